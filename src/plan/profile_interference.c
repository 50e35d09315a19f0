/* profile_interference.c - the interference stage of the hardware profile
 * (profile_measure.h): the kernels and the disk at once, as the engine runs them.
 *
 * A reader thread streams the disk stage's file like the engine's weights while the
 * measuring thread times Q8_0 matmuls and a block of attention; rounds of "alone", "with
 * the reader" and "with the reader timing urgent reads" alternate so drift cancels. Two
 * results: how much slower the kernels are while the disk streams (io_slowdown_matvec,
 * io_compute_slowdown, io_slowdown_attn, never below 1) with the rate it streamed at
 * (io_stream_bps: a run's stream at another rate takes another share), and the urgent
 * read times (disk_urgent_read_s / _page_s), which only mean what the cost model assumes
 * when measured behind a weight stream with every core busy.
 * The reader shares one atomic stop flag with the measuring thread; its results are read
 * only after pthread_join.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "plan/profile_measure.h"
#include "base/clock.h"
#include "base/rng.h"
#include "base/stats.h"
#include "base/status.h"
#include "base/threadpool.h"
#include "kernels/kernels.h"
#include "format/tensor_type.h"
#include "model/ops.h"
#include "tier/tier.h"

enum { URGENT_SAMPLES = 128 };
/* The urgent reads' figure: their lower quartile, not the median. On a virtual disk their
 * latency has two modes, the slow one in bursts, most of all as a stream starts; every
 * phase here restarts the reader, while a run's stream starts once and runs on, so the
 * bursts weigh more in the samples than in a run, and the median lands in either mode
 * from one profile to the next. */
#define URGENT_QUANTILE 0.25
/* The reading thread: streams as the residency does (tl__profile_disk_stream), or as the
 * weights stream with urgent reads timed on the way (tl__profile_disk_urgent), until
 * stop. */
typedef struct reader {
    tl_tier *t;
    int urgent;      /* which of the two */
    atomic_int stop; /* set by the measuring thread; only a flag, the results are read
                        after pthread_join, which orders them */
    uint8_t *buf; /* tl__profile_reader_bytes(): room for either reading */
    tl_status st;
    double lat1[URGENT_SAMPLES], latn[URGENT_SAMPLES];
    int n1, nn;
    uint64_t stream_bytes; /* what the streaming runs read, and in how long, all together */
    double stream_s;
} reader;

static void *reader_main(void *arg) {
    reader *r = arg;
    if (r->urgent) {
        r->st = tl__profile_disk_urgent(r->t, r->buf, &r->stop, r->lat1, &r->n1, r->latn,
                                        &r->nn, URGENT_SAMPLES);
        return NULL;
    }
    uint64_t bytes = 0;
    const double t0 = tl_now();
    r->st = tl__profile_disk_stream(r->t, r->buf, &r->stop, &bytes);
    r->stream_s += tl_now() - t0;
    r->stream_bytes += bytes;
    return NULL;
}

/* Calls of each product per phase: whole phases are timed, not their median call, since
 * the disk's interrupts and the IO thread's wake-ups land on some calls and not others,
 * and a run pays for all of them. The urgent reads' phase only keeps the cores busy while
 * its reads are timed, with fewer calls. Rounds alternate the phases so drift cancels. */
#define PHASE_CALLS 24
#define URGENT_PHASE_CALLS 8
#define ROUNDS 5

/* The attention timed: blocks of ATTN_ROWS query rows over ATTN_POS positions, as
 * prefill's blocks of a long prompt take them: ATTN_KV_HEADS kv heads of ATTN_HD, each
 * shared by ATTN_GROUP query heads, one job per block and kv head on the pool (the
 * engine's jobs), as many blocks as it takes to give every thread a job. Their f32 K and
 * V rows lie in ATTN_COPIES copies taken in turn, as many bytes as the products' weight
 * copies (beyond the caches), as a long context's layers are. */
#define ATTN_ROWS 16
#define ATTN_POS 2048
#define ATTN_KV_HEADS 4
#define ATTN_GROUP 4
#define ATTN_HD 64
#define ATTN_COPIES \
    ((int)(TL__PROF_MM_MIN_BYTES / (2 * sizeof(float) * ATTN_POS * ATTN_KV_HEADS * ATTN_HD)))

typedef struct attn_job {
    const float *Q;    /* [ATTN_ROWS][ATTN_KV_HEADS * ATTN_GROUP][ATTN_HD], every block's */
    const float *K, *V; /* this call's copy: [ATTN_POS][ATTN_KV_HEADS * ATTN_HD] each */
    float *scores;     /* per thread: [ATTN_GROUP][ATTN_POS] */
    float *out;        /* per block: [ATTN_ROWS][ATTN_KV_HEADS * ATTN_GROUP][ATTN_HD] */
    int blocks;
} attn_job;

static void attn_task(void *arg, int task, int thread) {
    const attn_job *j = arg;
    const size_t kvd = ATTN_KV_HEADS * ATTN_HD, qd = ATTN_GROUP * kvd;
    const size_t head = (size_t)task % ATTN_KV_HEADS, block = (size_t)task / ATTN_KV_HEADS;
    float *sc = j->scores + (size_t)thread * ATTN_GROUP * ATTN_POS;
    float *out = j->out + block * ATTN_ROWS * qd;
    const float scale = 0.125f; /* 1 / sqrt(ATTN_HD) */
    for (size_t r = 0; r < ATTN_ROWS; r++) {
        const size_t q0 = r * qd + head * ATTN_GROUP * ATTN_HD;
        tl_attn_scores_fast(j->Q + q0, ATTN_GROUP, ATTN_HD, j->K + head * ATTN_HD, kvd,
                            ATTN_POS, scale, sc, ATTN_POS);
        for (size_t h = 0; h < ATTN_GROUP; h++) tl_softmax_fast(sc + h * ATTN_POS, ATTN_POS);
        memset(out + q0, 0, ATTN_GROUP * ATTN_HD * sizeof(float));
        tl_attn_values_fast(out + q0, ATTN_GROUP, ATTN_HD, sc, ATTN_POS, j->V + head * ATTN_HD,
                            kvd, ATTN_POS);
    }
}

/* Floats of each part of the attention's memory. */
enum {
    ATTN_Q_FLOATS = ATTN_ROWS * ATTN_KV_HEADS * ATTN_GROUP * ATTN_HD,
    ATTN_KV_FLOATS = ATTN_POS * ATTN_KV_HEADS * ATTN_HD
};

uint64_t tl__profile_interference_attn_bytes(uint64_t threads) {
    const uint64_t blocks = (threads + ATTN_KV_HEADS - 1) / ATTN_KV_HEADS;
    return ((1 + blocks) * ATTN_Q_FLOATS + (uint64_t)ATTN_COPIES * 2 * ATTN_KV_FLOATS +
            threads * ATTN_GROUP * ATTN_POS) * sizeof(float);
}

/* The three products' times and the attention's (`calls` calls each, after one to warm
 * up, cycling the copies), added to sum[0..3]; with the reader running (started, given
 * time to ramp up, stopped) when rd is not NULL. kv: the attention's K and V copies. */
static tl_status time_products(tl_llama *mm, tl_weight *w, const uint8_t *W, size_t copies,
                               size_t mb, const float *X, const size_t *ns, float *Y,
                               float *scratch, size_t sf, attn_job *aj, const float *kv,
                               int calls, reader *rd, double *sum) {
    pthread_t th;
    if (rd) {
        atomic_store_explicit(&rd->stop, 0, memory_order_relaxed);
        if (pthread_create(&th, NULL, reader_main, rd) != 0)
            return tl_error_set(TL_ERR_IO, "interference profile: cannot start a thread");
        struct timespec ts = {0, 50 * 1000 * 1000}; /* let the reads ramp up */
        nanosleep(&ts, NULL);
    }
    for (int i = 0; i < 3; i++) {
        double t0 = 0;
        for (int r = -1; r < calls; r++) {
            if (r == 0) t0 = tl_now();
            w->data = W + (size_t)(r + 1) % copies * mb;
            tl_op_matmul(mm, w, X, ns[i], Y, scratch, sf);
        }
        sum[i] += tl_now() - t0;
    }
    double t0 = 0;
    for (int r = -1; r < calls; r++) {
        if (r == 0) t0 = tl_now();
        const float *copy = kv + (size_t)(r + 1) % ATTN_COPIES * 2 * ATTN_KV_FLOATS;
        aj->K = copy, aj->V = copy + ATTN_KV_FLOATS;
        tl_pool_run(mm->pool, aj->blocks * ATTN_KV_HEADS, attn_task, aj);
    }
    sum[3] += tl_now() - t0;
    if (!rd) return TL_OK;
    atomic_store_explicit(&rd->stop, 1, memory_order_relaxed);
    pthread_join(th, NULL);
    return rd->st;
}

/* How much slower the kernels run while the disk streams at full speed (DMA, interrupts
 * and the IO thread share the memory and the cores): Q8_0 matmuls of 1, 4 and
 * TL__PROF_SLOWDOWN_ROWS rows, and a block of attention over K and V beyond the caches
 * (its own figure: it leans on memory differently from the products), alone and with a
 * reader thread streaming as the residency streams weights (tl__profile_disk_stream:
 * whole units, the IO queue's chunks in flight), alternating to cancel drift. The
 * weights are in panels where the engine keeps them so (tl_panels_wanted), as resident
 * and streamed-and-repacked weights are: the kernel, and how hard it leans on memory, is
 * then the engine's own.
 * A third phase of each round reads as the weights stream with urgent reads timed on the
 * way (tl__profile_disk_urgent), the products running meanwhile, so disk_urgent_read_s /
 * _page_s are measured as the engine meets them: behind the chunks already in flight (the
 * IO queue starts no new weight chunk while an urgent read is out, tier/aio.c), with every
 * core computing; a batch of several pages is timed too, since a micro-batch submits its
 * pages together and they wait behind the same chunks. Its products are not counted in
 * the slowdowns: a reader that wakes for every chunk and page costs the cores more than
 * the residency's streaming does. With no sample (a disk too slow to reach the first
 * one), the disk grid's figures stand in. */
tl_status tl__profile_measure_interference(tl_pool *pool, tl_tier *t, tl_hw_profile *p,
                                           tl__profile_progress progress, void *user) {
    tl__profile_say(progress, user, "compute while the disk streams");
    const size_t R = TL__PROF_MM_ROWS, C = TL__PROF_MM_COLS, n_max = TL__PROF_SLOWDOWN_ROWS;
    const size_t threads = (size_t)tl_pool_threads(pool);
    const tl_type type = TL_TYPE_Q8_0;
    const size_t mb = R * tl_type_row_bytes(type, C);
    const size_t copies = TL__PROF_MM_MIN_BYTES / mb + 1;
    size_t sf = (tl_matmul_scratch_floats(C, n_max) + 15) / 16 * 16;
    float *X = aligned_alloc(64, n_max * C * sizeof(float));
    float *Y = aligned_alloc(64, n_max * R * sizeof(float));
    float *scratch = aligned_alloc(64, threads * sf * sizeof(float));
    float *row = malloc(C * sizeof(float));
    const int ablocks = (int)((threads + ATTN_KV_HEADS - 1) / ATTN_KV_HEADS);
    float *aq = aligned_alloc(64, (1 + (size_t)ablocks) * ATTN_Q_FLOATS * sizeof(float));
    float *akv = aligned_alloc(64, (size_t)ATTN_COPIES * 2 * ATTN_KV_FLOATS * sizeof(float));
    float *asc = aligned_alloc(64, threads * ATTN_GROUP * ATTN_POS * sizeof(float));
    reader *rd = calloc(1, sizeof *rd);
    if (rd) {
        rd->t = t;
        rd->buf = aligned_alloc(TL_TIER_MAX_ALIGN, tl__profile_reader_bytes());
    }
    uint64_t seed = 11;
    uint8_t *W = row ? tl__profile_weight_copies(type, R, C, copies, row, &seed) : NULL;
    tl_status st = TL_OK;
    if (!W || !X || !Y || !scratch || !row || !rd || !rd->buf || !aq || !akv || !asc) {
        st = tl_error_set(TL_ERR_NOMEM, "interference profile: out of memory");
        goto done;
    }
    for (size_t i = 0; i < n_max * C; i++) X[i] = tl_rand_sym(&seed);
    for (size_t i = 0; i < ATTN_Q_FLOATS; i++) aq[i] = tl_rand_sym(&seed);
    for (size_t i = 0; i < (size_t)ATTN_COPIES * 2 * ATTN_KV_FLOATS; i++)
        akv[i] = tl_rand_sym(&seed);
    attn_job aj = {aq, NULL, NULL, asc, aq + ATTN_Q_FLOATS, ablocks};
    tl_llama mm;
    memset(&mm, 0, sizeof mm);
    mm.pool = pool;
    tl_weight w;
    memset(&w, 0, sizeof w);
    w.type = w.file_type = type;
    w.rows = R;
    w.cols = C;
    w.panels = tl_panels_wanted(type, R);
    if (w.panels) {
        tl__profile_repack_copies(pool, type, W, R, C, copies, &st);
        if (st) goto done;
    }
    const size_t ns[3] = {1, 4, n_max};
    double alone[4] = {0, 0, 0, 0}, busy[4] = {0, 0, 0, 0}, unused[4] = {0, 0, 0, 0};
    for (int round = 0; round < ROUNDS && !st; round++) {
        st = time_products(&mm, &w, W, copies, mb, X, ns, Y, scratch, sf, &aj, akv,
                           PHASE_CALLS, NULL, alone);
        rd->urgent = 0;
        if (!st)
            st = time_products(&mm, &w, W, copies, mb, X, ns, Y, scratch, sf, &aj, akv,
                               PHASE_CALLS, rd, busy);
        rd->urgent = 1;
        if (!st)
            st = time_products(&mm, &w, W, copies, mb, X, ns, Y, scratch, sf, &aj, akv,
                               URGENT_PHASE_CALLS, rd, unused);
    }
    if (st) goto done;
    const double page = (double)TL_PROF_URGENT_BYTES;
    p->disk_urgent_read_s = rd->n1 ? tl_quantile(rd->lat1, (size_t)rd->n1, URGENT_QUANTILE)
                                   : page / tl_profile_read_bps(p, TL_PROF_URGENT_BYTES, 1);
    double more = rd->nn ? (tl_quantile(rd->latn, (size_t)rd->nn, URGENT_QUANTILE) -
                            p->disk_urgent_read_s) /
                               (TL__PROF_URGENT_BATCH - 1)
                         : page / tl_profile_read_bps(p, TL_PROF_URGENT_BYTES, 16);
    p->disk_urgent_page_s = more > 0 ? more : 1e-9;
    if (!(p->disk_urgent_read_s > 0)) p->disk_urgent_read_s = 1e-9;
    double mv = 0.5 * (busy[0] / alone[0] + busy[1] / alone[1]), mm_ = busy[2] / alone[2];
    p->io_slowdown_matvec = mv > 1 ? mv : 1;
    p->io_compute_slowdown = mm_ > 1 ? mm_ : 1;
    const double at = busy[3] / alone[3];
    p->io_slowdown_attn = at > 1 ? at : 1;
    p->io_stream_bps = rd->stream_s > 0 ? (double)rd->stream_bytes / rd->stream_s : 0;
done:
    free(aq);
    free(akv);
    free(asc);
    free(W);
    free(X);
    free(Y);
    free(scratch);
    free(row);
    if (rd) free(rd->buf);
    free(rd);
    return st;
}

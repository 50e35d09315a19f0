/* profile_measure.c - measuring the hardware profile (tl_profile_measure, profile.h).
 *
 * Five stages in a fixed order, each bounded in time (about 40 s in all on 2 cores):
 * memory/FMA probes; disk (a temporary file written through the aio queue with O_DIRECT,
 * then read back over the chunk x depth grid, each setting capped at DISK_SETTING_S);
 * matmul (tl_op_matmul on 8192 x 2048 matrices, cycled so every call streams its weights
 * from DRAM); element-wise ops; attention (token-by-token decode of a tiny synthetic
 * model per KV width: a robust line through per-window medians of the per-token times
 * gives the cost per visible position, its intercept the fixed cost per layer).
 * The disk stage's file is a scratch file with no name (it cannot outlive the process);
 * the synthetic model of the attention stage is unlinked as soon as it is open.
 *
 * Memory: the stages run one after another and each frees what it allocated, so the
 * measurement holds at most its largest stage (tl_profile_measure_bytes computes it from
 * the sizes below). Only the memory probe's buffer scales: 1 GiB where the limit allows,
 * down to PROBE_MIN_BYTES, still far beyond any last-level cache (the cost model does not
 * read mem_read_bps; it is reported beside the benchmarks). The other stages' sizes are
 * what makes their figures mean what the cost model assumes (weights streamed from DRAM,
 * the engine's IO queue settings), so under a smaller limit the measurement is refused.
 */
#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "plan/profile.h"
#include "base/budget.h"
#include "base/rng.h"
#include "base/stats.h"
#include "base/clock.h"
#include "base/status.h"
#include "base/threadpool.h"
#include "kernels/kernels.h"
#include "kernels/probe.h"
#include "format/tensor_type.h"
#include "kv/kv_cache.h"
#include "exec/model_handle.h"
#include "model/ops.h"
#include "tier/aio.h"
#include "tier/tier.h"

#define DISK_FILE_BYTES ((uint64_t)256 << 20)
#define DISK_WRITE_REQ ((size_t)4 << 20)
#define DISK_SMALL_READ ((uint64_t)64 << 20) /* bytes read per setting, chunks < 1 MiB */
#define DISK_SETTING_S 1.0                   /* time cap per read setting */

#define PROBE_MAX_BYTES ((uint64_t)1 << 30)   /* the memory probe's buffer ... */
#define PROBE_MIN_BYTES ((uint64_t)256 << 20) /* ... and its least (8x a 32 MiB LLC) */

#define MM_ROWS 8192
#define MM_COLS 2048
#define MM_SMALL_ROWS 1024 /* the second size: separates per-call cost from the rate */
#define MM_MIN_BYTES ((size_t)96 << 20) /* weights cycled per type: beyond the LLC */

/* tiny model for the attention fit: positions decoded with f32 KV, and with stored
 * (decoded) KV, whose cost grows faster with the position */
#define AT_POS 1024
#define AT_RUN_S 10.0 /* a run stops early after this long (a loaded machine) ... */
#define AT_MIN_POS 160 /* ... once it has this many positions */
#define AT_SKIP 32 /* first positions left out of the fit (warm-up) */
#define AT_WIN 32  /* positions per median window */

/* ---- helpers ---- */

/* A hidden temporary file name in dir, unique to this process and moment; 0 if it does
 * not fit. */
static int temp_name(const char *dir, const char *ext, char *out, size_t cap) {
    unsigned long long us = (unsigned long long)(tl_now() * 1e6);
    int n = snprintf(out, cap, "%s/.tierllm-profile-%ld-%llu.%s", dir, (long)getpid(), us, ext);
    return n >= 0 && (size_t)n < cap;
}

/* ---- disk ---- */

static tl_status disk_write(tl_tier *t, const uint8_t *buf, double *bps) {
    tl_aio_params ap = tl_aio_default_params();
    ap.chunk_bytes = (size_t)1 << 20;
    ap.queue_depth = 4;
    tl_aio *q;
    tl_status st = tl_aio_open(&ap, &q);
    if (st != TL_OK) return st;
    uint64_t n = DISK_FILE_BYTES / DISK_WRITE_REQ, sub = 0;
    double t0 = tl_now();
    for (; sub < n && st == TL_OK; sub++)
        if ((st = tl_aio_write(q, t, sub * DISK_WRITE_REQ, buf, DISK_WRITE_REQ, sub)))
            break;
    for (uint64_t i = 0; i < sub && st == TL_OK; i++) st = tl_aio_wait(q, i);
    tl_aio_close(q); /* after a failure: drains what is still in flight */
    if (st != TL_OK) return st;
    if (fdatasync(t->fd) != 0)
        return tl_error_set(errno == ENOSPC || errno == EDQUOT ? TL_ERR_NOSPACE : TL_ERR_IO,
                            "fdatasync %s: %s", t->name, strerror(errno));
    *bps = (double)DISK_FILE_BYTES / (tl_now() - t0);
    return TL_OK;
}

/* Reads `total` bytes in requests of `chunk` bytes, `depth` of them in flight, starting
 * at *cursor and wrapping at the end of the file; stops early after DISK_SETTING_S. */
static tl_status disk_read(tl_tier *t, uint64_t chunk, int depth, uint64_t total,
                           uint64_t *cursor, uint8_t *bufs, double *bps) {
    tl_aio_params ap = tl_aio_default_params();
    ap.chunk_bytes = (size_t)chunk;
    ap.queue_depth = depth;
    tl_aio *q;
    tl_status st = tl_aio_open(&ap, &q);
    if (st != TL_OK) return st;
    uint64_t nreq = total / chunk, sub = 0, done = 0;
    double t0 = tl_now(), el = 0;
    while (done < nreq) {
        while (sub < nreq && sub - done < (uint64_t)depth) {
            uint64_t off = *cursor;
            *cursor = (off + chunk) % DISK_FILE_BYTES;
            st = tl_aio_read(q, t, off, bufs + (sub % (uint64_t)depth) * chunk, chunk, sub);
            if (st != TL_OK) break;
            sub++;
        }
        if (st != TL_OK || (st = tl_aio_wait(q, done)) != TL_OK) break;
        done++;
        el = tl_now() - t0;
        if (el > DISK_SETTING_S && done >= 4 * (uint64_t)depth) break;
    }
    tl_aio_close(q);
    if (st != TL_OK) return st;
    *bps = (double)(done * chunk) / el;
    return TL_OK;
}

/* Streams like the engine's weights (the IO queue's default chunks at its default depth)
 * and, after every other chunk, times a batch of urgent reads (tl_aio_read_urgent) of
 * TL_PROF_URGENT_BYTES each, submitted together as a micro-batch's KV pages are: ahead of
 * the queued chunks, but behind those the device already serves. Batches alternate
 * between 1 and URGENT_BATCH reads; appends their times to lat1 / latn (up to cap each)
 * until *stop is set. */
enum { URGENT_BATCH = 8 };
static tl_status disk_urgent(tl_tier *t, uint8_t *bufs, atomic_int *stop, double *lat1,
                             int *n1, double *latn, int *nn, int cap) {
    tl_aio_params ap = tl_aio_default_params();
    const uint64_t chunk = ap.chunk_bytes;
    const int depth = ap.queue_depth;
    tl_aio *q;
    tl_status st = tl_aio_open(&ap, &q);
    if (st != TL_OK) return st;
    uint64_t sub = 0, done = 0, cursor = 0, seed = 7;
    uint8_t *small = bufs + (size_t)depth * chunk;
    const uint64_t urgent_tag = UINT64_MAX - URGENT_BATCH;
    while (st == TL_OK && !atomic_load_explicit(stop, memory_order_relaxed)) {
        while (sub - done < (uint64_t)depth) {
            st = tl_aio_read(q, t, cursor, bufs + (sub % (uint64_t)depth) * chunk, chunk, sub);
            if (st != TL_OK) break;
            cursor = (cursor + chunk) % DISK_FILE_BYTES;
            sub++;
        }
        if (st != TL_OK || (st = tl_aio_wait(q, done)) != TL_OK) break;
        done++;
        if (done < 2 * (uint64_t)depth || done % 2) continue;
        const int batch = done % 4 ? 1 : URGENT_BATCH;
        if ((batch == 1 ? *n1 : *nn) >= cap) continue;
        double t0 = tl_now();
        int k = 0;
        for (; k < batch && st == TL_OK; k++) {
            uint64_t off = tl_splitmix64(&seed) % (DISK_FILE_BYTES / TL_PROF_URGENT_BYTES) *
                           TL_PROF_URGENT_BYTES;
            st = tl_aio_read_urgent(q, t, off, small + (size_t)k * TL_PROF_URGENT_BYTES,
                                    TL_PROF_URGENT_BYTES, urgent_tag + (uint64_t)k);
        }
        for (int i = 0; i < k; i++) {
            tl_status w = tl_aio_wait(q, urgent_tag + (uint64_t)i);
            if (st == TL_OK) st = w;
        }
        if (batch == 1) lat1[(*n1)++] = tl_now() - t0;
        else latn[(*nn)++] = tl_now() - t0;
    }
    tl_aio_close(q);
    return st;
}

static tl_status measure_disk(const char *dir, tl_hw_profile *p,
                              void (*progress)(void *, const char *), void *user,
                              tl_tier **keep) {
    size_t buf_bytes = (size_t)tl_prof_chunks[TL_PROF_N_CHUNK - 1] *
                       (size_t)tl_prof_depths[TL_PROF_N_DEPTH - 1];
    uint8_t *buf = aligned_alloc(TL_TIER_MAX_ALIGN, buf_bytes);
    if (!buf) return tl_error_set(TL_ERR_NOMEM, "disk profile: out of memory");
    uint64_t seed = 42;
    for (size_t i = 0; i < DISK_WRITE_REQ / 8; i++) {
        uint64_t r = tl_splitmix64(&seed);
        memcpy(buf + 8 * i, &r, 8);
    }
    /* a scratch file has no name: a measurement that is killed leaves nothing behind */
    tl_tier *file = NULL;
    tl_status st = tl_tier_file_open_scratch(dir, TL_TIER_FILE_DIRECT, &file);
    if (st == TL_OK) {
        tl__profile_say(progress, user, "disk: writing %llu MiB to %s%s",
                        (unsigned long long)(DISK_FILE_BYTES >> 20), dir,
                        tl_tier_file_is_direct(file) ? "" : " (no O_DIRECT: page cache)");
        st = disk_write(file, buf, &p->disk_write_bps);
    }
    uint64_t cursor = 0;
    for (int c = 0; c < TL_PROF_N_CHUNK && st == TL_OK; c++) {
        tl__profile_say(progress, user, "disk: reading in %llu KiB chunks at depth 1, 4, 16",
                        (unsigned long long)(tl_prof_chunks[c] >> 10));
        uint64_t total = tl_prof_chunks[c] < ((uint64_t)1 << 20) ? DISK_SMALL_READ
                                                                  : DISK_FILE_BYTES;
        for (int d = 0; d < TL_PROF_N_DEPTH && st == TL_OK; d++)
            st = disk_read(file, tl_prof_chunks[c], tl_prof_depths[d], total, &cursor, buf,
                           &p->disk_read_bps[c][d]);
    }
    if (st == TL_OK && keep) *keep = file;
    else tl_tier_close(file);
    free(buf);
    if (st != TL_OK) return tl_error_wrap(st, "disk profile in %s", dir);
    return TL_OK;
}

/* `copies` back-to-back copies of one R x C matrix of random weights in `type` (more
 * bytes than the last-level cache, so cycling through them streams from DRAM); `row` is
 * C floats of scratch. NULL when out of memory. */
static uint8_t *weight_copies(tl_type type, size_t R, size_t C, size_t copies, float *row,
                              uint64_t *seed) {
    const size_t rb = tl_type_row_bytes(type, C), mb = R * rb;
    /* memory like the engine's weights (2 MiB-aligned, huge pages advised): on 4 KiB
     * pages a 2-thread Q8_0 matrix-vector product read ~21 GB/s where decode reads ~30 */
    uint8_t *W = tl_probe_buffer(copies * mb);
    if (!W) return NULL;
    for (size_t j = 0; j < R; j++) {
        for (size_t c = 0; c < C; c++) row[c] = tl_rand_sym(seed);
        tl_quant_row(type, row, W + j * rb, C);
    }
    for (size_t k = 1; k < copies; k++) memcpy(W + k * mb, W, mb);
    return W;
}

/* ---- compute while the disk streams ---- */

enum { URGENT_SAMPLES = 128 };
/* The streaming thread: reads as the engine streams weights, timing urgent reads on
 * the way (disk_urgent), until stop. */
typedef struct reader {
    tl_tier *t;
    atomic_int stop; /* set by the measuring thread; only a flag, the results are read
                        after pthread_join, which orders them */
    uint8_t *buf; /* queue depth default chunks + URGENT_BATCH pages */
    tl_status st;
    double lat1[URGENT_SAMPLES], latn[URGENT_SAMPLES];
    int n1, nn;
} reader;

static void *reader_main(void *arg) {
    reader *r = arg;
    r->st = disk_urgent(r->t, r->buf, &r->stop, r->lat1, &r->n1, r->latn, &r->nn,
                        URGENT_SAMPLES);
    return NULL;
}

/* Median seconds of tl_op_matmul of n rows over W (cycling `copies` matrices of mb). */
static double time_matmul(tl_llama *mm, tl_weight *w, const uint8_t *W, size_t copies,
                          size_t mb, const float *X, size_t n, float *Y, float *scratch,
                          size_t sf, int reps) {
    double t[16];
    for (int r = -1; r < reps; r++) {
        w->data = W + (size_t)(r + 1) % copies * mb;
        double t0 = tl_now();
        tl_op_matmul(mm, w, X, n, Y, scratch, sf);
        if (r >= 0) t[r] = tl_now() - t0;
    }
    return tl_median(t, (size_t)reps);
}

/* How much slower the kernels run while the disk streams at full speed (DMA and
 * interrupts share the memory and the cores): Q8_0 matmuls of 1, 4 and 32 rows, alone and
 * with a reader thread keeping 8 MiB in flight, alternating to cancel drift. The reader
 * also times urgent reads, so disk_urgent_read_s / _page_s are measured as the engine
 * meets them: behind the chunks already in flight (the IO queue starts no new weight
 * chunk while an urgent read is out, tier/aio.c), with every core computing. On a 2-core
 * Xeon VM: one page 0.9-2.6 ms, eight together no longer. With no sample (a disk too slow
 * to reach the first one), the disk grid's figures stand in. */
static tl_status measure_interference(tl_pool *pool, tl_tier *t, tl_hw_profile *p,
                                      void (*progress)(void *, const char *), void *user) {
    tl__profile_say(progress, user, "compute while the disk streams");
    const size_t R = MM_ROWS, C = MM_COLS, n_max = 32, threads = (size_t)tl_pool_threads(pool);
    const tl_type type = TL_TYPE_Q8_0;
    const size_t mb = R * tl_type_row_bytes(type, C), copies = MM_MIN_BYTES / mb + 1;
    size_t sf = (tl_matmul_scratch_floats(C, n_max) + 15) / 16 * 16;
    float *X = aligned_alloc(64, n_max * C * sizeof(float));
    float *Y = aligned_alloc(64, n_max * R * sizeof(float));
    float *scratch = aligned_alloc(64, threads * sf * sizeof(float));
    float *row = malloc(C * sizeof(float));
    tl_aio_params dp = tl_aio_default_params();
    reader *rd = calloc(1, sizeof *rd);
    if (rd) {
        rd->t = t;
        rd->buf = aligned_alloc(TL_TIER_MAX_ALIGN, (size_t)dp.queue_depth * dp.chunk_bytes +
                                          URGENT_BATCH * TL_PROF_URGENT_BYTES);
    }
    uint64_t seed = 11;
    uint8_t *W = row ? weight_copies(type, R, C, copies, row, &seed) : NULL;
    tl_status st = TL_OK;
    if (!W || !X || !Y || !scratch || !row || !rd || !rd->buf) {
        st = tl_error_set(TL_ERR_NOMEM, "interference profile: out of memory");
        goto done;
    }
    for (size_t i = 0; i < n_max * C; i++) X[i] = tl_rand_sym(&seed);
    tl_llama mm;
    memset(&mm, 0, sizeof mm);
    mm.pool = pool;
    tl_weight w;
    memset(&w, 0, sizeof w);
    w.type = w.file_type = type;
    w.rows = R;
    w.cols = C;
    const size_t ns[3] = {1, 4, n_max};
    double alone[3] = {0, 0, 0}, busy[3] = {0, 0, 0};
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 3; i++)
            alone[i] += time_matmul(&mm, &w, W, copies, mb, X, ns[i], Y, scratch, sf, 9);
        pthread_t th;
        atomic_store_explicit(&rd->stop, 0, memory_order_relaxed);
        if (pthread_create(&th, NULL, reader_main, rd) != 0) {
            st = tl_error_set(TL_ERR_IO, "interference profile: cannot start a thread");
            goto done;
        }
        struct timespec ts = {0, 50 * 1000 * 1000}; /* let the reads ramp up */
        nanosleep(&ts, NULL);
        for (int i = 0; i < 3; i++)
            busy[i] += time_matmul(&mm, &w, W, copies, mb, X, ns[i], Y, scratch, sf, 9);
        atomic_store_explicit(&rd->stop, 1, memory_order_relaxed);
        pthread_join(th, NULL);
        if ((st = rd->st)) goto done;
    }
    const double page = (double)TL_PROF_URGENT_BYTES;
    p->disk_urgent_read_s = rd->n1 ? tl_median(rd->lat1, (size_t)rd->n1)
                                   : page / tl_profile_read_bps(p, TL_PROF_URGENT_BYTES, 1);
    double more = rd->nn ? (tl_median(rd->latn, (size_t)rd->nn) - p->disk_urgent_read_s) /
                               (URGENT_BATCH - 1)
                         : page / tl_profile_read_bps(p, TL_PROF_URGENT_BYTES, 16);
    p->disk_urgent_page_s = more > 0 ? more : 1e-9;
    if (!(p->disk_urgent_read_s > 0)) p->disk_urgent_read_s = 1e-9;
    double mv = 0.5 * (busy[0] / alone[0] + busy[1] / alone[1]), mm_ = busy[2] / alone[2];
    p->io_slowdown_matvec = mv > 1 ? mv : 1;
    p->io_compute_slowdown = mm_ > 1 ? mm_ : 1;
done:
    free(W);
    free(X);
    free(Y);
    free(scratch);
    free(row);
    if (rd) free(rd->buf);
    free(rd);
    return st;
}

/* ---- matmul ---- */

static tl_status measure_matmul(tl_pool *pool, tl_hw_profile *p,
                                void (*progress)(void *, const char *), void *user) {
    const size_t R = MM_ROWS, C = MM_COLS, NMAX = (size_t)tl_prof_rows[TL_PROF_N_ROWS - 1];
    const size_t threads = (size_t)tl_pool_threads(pool);
    size_t sf = (tl_matmul_scratch_floats(C, NMAX) + 15) / 16 * 16; /* 64-byte slices */
    float *X = aligned_alloc(64, NMAX * C * sizeof(float));
    float *Y = aligned_alloc(64, NMAX * R * sizeof(float));
    float *scratch = aligned_alloc(64, threads * sf * sizeof(float));
    float *row = malloc(C * sizeof(float));
    tl_status st = TL_OK;
    if (!X || !Y || !scratch || !row) {
        st = tl_error_set(TL_ERR_NOMEM, "matmul profile: out of memory");
        goto done;
    }
    uint64_t seed = 7;
    for (size_t i = 0; i < NMAX * C; i++) X[i] = tl_rand_sym(&seed);
    tl_llama mm;
    memset(&mm, 0, sizeof mm); /* tl_op_matmul reads only pool and use_reference */
    mm.pool = pool;
    mm.use_reference = 0;
    for (int ti = 0; ti < TL_PROF_N_TYPE && st == TL_OK; ti++) {
        tl_type type = tl_type_table[ti].type;
        size_t rb = tl_type_row_bytes(type, C), mb = R * rb;
        size_t copies = MM_MIN_BYTES / mb + 1;
        tl__profile_say(progress, user, "matmul: %s, %zu x %zu, %zu copies (%zu MiB)",
                        tl_type_name(type), R, C, copies, copies * mb >> 20);
        uint8_t *W = weight_copies(type, R, C, copies, row, &seed);
        if (!W) {
            st = tl_error_set(TL_ERR_NOMEM, "matmul profile: out of memory for %zu MiB of %s",
                              copies * mb >> 20, tl_type_name(type));
            break;
        }
        /* a second, smaller matrix (MM_SMALL_ROWS of the same rows): two sizes separate
         * the per-call cost (dispatch, chunking) from the per-MAC rate */
        const size_t Rs = MM_SMALL_ROWS, mbs = Rs * rb;
        tl_weight w, ws;
        memset(&w, 0, sizeof w);
        w.type = w.file_type = type;
        w.rows = R;
        w.cols = C;
        ws = w;
        ws.rows = Rs;
        size_t cur = 0, cur_s = 0, copies_s = copies * mb / mbs;
        for (int ri = 0; ri < TL_PROF_N_ROWS; ri++) {
            size_t n = (size_t)tl_prof_rows[ri];
            int reps = n <= 64 ? 7 : 3;
            double t[7], ts[7];
            for (int r = -1; r < reps; r++) { /* r = -1: warm-up */
                w.data = W + cur * mb;
                cur = (cur + 1) % copies;
                double t0 = tl_now();
                tl_op_matmul(&mm, &w, X, n, Y, scratch, sf);
                if (r >= 0) t[r] = tl_now() - t0;
                ws.data = W + cur_s * mbs; /* the small matrix cycles over the same copies */
                cur_s = (cur_s + 1) % copies_s;
                t0 = tl_now();
                tl_op_matmul(&mm, &ws, X, n, Y, scratch, sf);
                if (r >= 0) ts[r] = tl_now() - t0;
            }
            const double tl_ = tl_median(t, (size_t)reps), tsm = tl_median(ts, (size_t)reps);
            const double macs_l = (double)n * R * C, macs_s = (double)n * Rs * C;
            /* t = call + macs / rate, fitted through both sizes */
            double rate = tl_ > tsm ? (macs_l - macs_s) / (tl_ - tsm) : macs_l / tl_;
            double call = tsm - macs_s / rate;
            if (call < 0 || rate <= 0) {
                call = 0;
                rate = macs_l / tl_;
            }
            p->matmul_macs[ti][ri] = rate;
            p->matmul_call_s[ti][ri] = call;
        }
        free(W);
    }
done:
    free(X);
    free(Y);
    free(scratch);
    free(row);
    return st;
}

/* ---- element-wise ---- */

static tl_status measure_elementwise(tl_hw_profile *p) {
    const size_t N = (size_t)1 << 20, D = 2048;
    float *g0 = malloc(N * sizeof(float)), *g = malloc(N * sizeof(float));
    float *u = malloc(N * sizeof(float)), *o = malloc(N * sizeof(float));
    float *w = malloc(D * sizeof(float));
    if (!g0 || !g || !u || !o || !w) {
        free(g0), free(g), free(u), free(o), free(w);
        return tl_error_set(TL_ERR_NOMEM, "element-wise profile: out of memory");
    }
    uint64_t seed = 11;
    for (size_t i = 0; i < N; i++) g0[i] = tl_rand_sym(&seed), u[i] = tl_rand_sym(&seed);
    for (size_t i = 0; i < D; i++) w[i] = 1.0f + 0.5f * tl_rand_sym(&seed);
    double ts[6], tr[6];
    for (int r = 0; r < 6; r++) {
        memcpy(g, g0, N * sizeof(float)); /* same inputs every time (no drift to denormals) */
        double t0 = tl_now();
        tl_swiglu_fast(g, u, N);
        ts[r] = tl_now() - t0;
        t0 = tl_now();
        tl_op_rmsnorm(g0, w, N / D, D, 1e-5f, o);
        tr[r] = tl_now() - t0;
    }
    p->elementwise_s = 0.5 * (tl_median(ts + 1, 5) + tl_median(tr + 1, 5)) / (double)N;
    free(g0), free(g), free(u), free(o), free(w);
    return TL_OK;
}

/* ---- attention ---- */

/* A line y = a + b*x through the points: Theil-Sen (median of pairwise slopes, then the
 * median intercept), robust against the odd slow token. */
static tl_status fit_line(const double *x, const double *y, size_t n, double *a, double *b) {
    double *tmp = malloc((n * (n - 1) / 2 + n) * sizeof *tmp);
    if (!tmp) return tl_error_set(TL_ERR_NOMEM, "attention profile: out of memory");
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++)
            if (x[j] != x[i]) tmp[k++] = (y[j] - y[i]) / (x[j] - x[i]);
    *b = k ? tl_median(tmp, k) : 0;
    for (size_t i = 0; i < n; i++) tmp[i] = y[i] - *b * x[i];
    *a = tl_median(tmp, n);
    free(tmp);
    return TL_OK;
}

static double model_matmul_seconds(tl_model *m) {
    const tl_llama_hparams *hp = &m->lm.hp;
    size_t nw = 7 * (size_t)hp->n_layer + 1, maxk = 0, maxr = 0;
    const tl_weight **ws = malloc(nw * sizeof *ws);
    if (!ws) return -1;
    size_t k = 0;
    for (int32_t l = 0; l < hp->n_layer; l++) {
        tl_llama_layer *L = &m->lm.layers[l];
        const tl_weight *lw[7] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up,
                                  &L->w_down};
        for (int i = 0; i < 7; i++) ws[k++] = lw[i];
    }
    ws[k++] = m->lm.tied_output ? &m->lm.tok_embd : &m->lm.output;
    for (size_t i = 0; i < nw; i++) {
        maxk = ws[i]->cols > maxk ? ws[i]->cols : maxk;
        maxr = ws[i]->rows > maxr ? ws[i]->rows : maxr;
    }
    size_t threads = (size_t)tl_pool_threads(m->lm.pool);
    size_t sf = (tl_matmul_scratch_floats(maxk, 1) + 15) / 16 * 16;
    float *scratch = aligned_alloc(64, threads * sf * sizeof(float));
    float *x = malloc(maxk * sizeof(float)), *y = malloc(maxr * sizeof(float));
    double t[9], res = -1;
    int ok = scratch && x && y;
    for (size_t i = 0; ok && i < nw; i++) ok = ws[i]->data != NULL;
    if (ok) {
        uint64_t seed = 3;
        for (size_t i = 0; i < maxk; i++) x[i] = tl_rand_sym(&seed);
        for (int r = 0; r < 9; r++) {
            double t0 = tl_now();
            for (size_t i = 0; i < nw; i++) tl_op_matmul(&m->lm, ws[i], x, 1, y, scratch, sf);
            t[r] = tl_now() - t0;
        }
        /* dispatches included: the cost model charges them to each matmul call
         * (matmul_call_s), so the fixed per-layer figure is what is left */
        res = tl_median(t + 1, 8);
    }
    free(ws);
    free(scratch);
    free(x);
    free(y);
    return res;
}

/* Per-token decode times of one KV width over n_pos positions (fewer when the run takes
 * longer than AT_RUN_S), reduced to a line over positions; with mm_s, also the matrix
 * products' share of a token (model_matmul_seconds). */
static tl_status attention_run(tl_model *m, int32_t kv_bits, int32_t n_pos, float *logits,
                               double *times, double *a, double *b, double *mm_s) {
    tl_context_params cp = tl_context_default_params();
    cp.n_ctx = n_pos + 16;
    cp.kv_bits = kv_bits;
    tl_context *c;
    tl_status st = tl_context_open(m, &cp, &c);
    if (st != TL_OK) return st;
    double start = tl_now();
    for (int32_t i = 0; i < n_pos && st == TL_OK; i++) {
        int32_t tok = 1 + i % 500;
        double t0 = tl_now();
        st = tl_decode(c, &tok, 1, logits);
        times[i] = tl_now() - t0;
        if (i + 1 >= AT_MIN_POS && tl_now() - start > AT_RUN_S) n_pos = i + 1;
    }
    if (st == TL_OK && mm_s) *mm_s = model_matmul_seconds(m);
    tl_context_close(c);
    if (st != TL_OK) return st;
    double wx[(AT_POS - AT_SKIP) / AT_WIN], wy[(AT_POS - AT_SKIP) / AT_WIN];
    int nw = (n_pos - AT_SKIP) / AT_WIN;
    for (int w = 0; w < nw; w++) {
        int p0 = AT_SKIP + w * AT_WIN;
        wx[w] = p0 + 0.5 * (AT_WIN - 1);
        wy[w] = tl_median(times + p0, AT_WIN); /* reorders only this window */
    }
    return fit_line(wx, wy, (size_t)nw, a, b);
}

/* Decoding stored KV pages into f32 (kv_cache.c's decode_page: f16 conversion or
 * group-wise dequantization, a row of kv_dim at a time): seconds per element, timed
 * directly on rows of 4096 values (a 7B model's kv_dim), single-threaded as it runs. */
static tl_status measure_kv_decode(tl_hw_profile *p) {
    const int32_t D = 4096, rows = 256;
    float *x = malloc((size_t)D * sizeof *x), *y = malloc((size_t)D * sizeof *y);
    uint8_t *in = malloc((size_t)rows * D * 2);
    if (!x || !y || !in) {
        free(x), free(y), free(in);
        return tl_error_set(TL_ERR_NOMEM, "kv decode profile: out of memory");
    }
    uint64_t seed = 5;
    for (int32_t j = 0; j < D; j++) x[j] = tl_rand_sym(&seed);
    p->attn_decode_s[0] = 0;
    for (int k = 1; k < TL_PROF_N_KVBITS; k++) {
        const int32_t bits = tl_prof_kvbits[k];
        const size_t rb = bits == 16 ? (size_t)D * 2 : tl_kv_quant_row_bytes(D, 64, bits);
        for (int32_t r = 0; r < rows; r++) {
            if (bits == 16)
                for (int32_t j = 0; j < D; j++)
                    ((uint16_t *)(void *)(in + r * rb))[j] = tl_f32_to_f16(x[j]);
            else
                tl_kv_quant_row(x, D, 64, bits, in + r * rb);
        }
        double t[5];
        volatile float sink = 0;
        for (int rep = 0; rep < 5; rep++) {
            double t0 = tl_now();
            for (int32_t r = 0; r < rows; r++) {
                if (bits == 16) {
                    const uint16_t *h = (const uint16_t *)(const void *)(in + r * rb);
                    for (int32_t j = 0; j < D; j++) y[j] = tl_f16_to_f32(h[j]);
                } else {
                    tl_kv_dequant_row(in + r * rb, D, 64, bits, y);
                }
                sink += y[r % D];
            }
            t[rep] = tl_now() - t0;
        }
        (void)sink;
        p->attn_decode_s[k] = tl_median(t, 5) / ((double)rows * D);
    }
    free(x), free(y), free(in);
    return TL_OK;
}

/* The tiny model the attention stage decodes with. */
static void attention_model(tl_synth_params *sp) {
    memset(sp, 0, sizeof *sp);
    sp->n_vocab = 512, sp->n_embd = 512, sp->n_ff = 1024, sp->n_layer = 4;
    sp->n_head = 8, sp->n_head_kv = 8, sp->n_ctx = 2048;
    sp->weight_type = TL_TYPE_F32, sp->rope_base = 10000.0f, sp->seed = 1;
}

static tl_status measure_attention(int32_t threads, const char *dir, tl_hw_profile *p,
                                   void (*progress)(void *, const char *), void *user) {
    tl_synth_params sp;
    attention_model(&sp);
    const double hd = sp.n_embd / sp.n_head, kvd = sp.n_head_kv * hd, L = sp.n_layer;
    char path[600];
    if (!temp_name(dir, "gguf", path, sizeof path))
        return tl_error_set(TL_ERR_INVALID, "attention profile: directory name too long");
    tl__profile_say(progress, user, "attention: writing a %d-layer synthetic model to %s",
                    sp.n_layer, dir);
    tl_status st = tl_synth_write(&sp, path);
    if (st != TL_OK) {
        unlink(path);
        return tl_error_wrap(st, "attention profile");
    }
    tl_model_params mp = tl_model_default_params();
    mp.n_threads = threads;
    tl_model *m = NULL;
    st = tl_model_open(path, &mp, &m);
    unlink(path); /* the model holds its file open */
    if (st != TL_OK) return tl_error_wrap(st, "attention profile");
    double *times = malloc(AT_POS * sizeof *times);
    float *logits = malloc((size_t)sp.n_vocab * sizeof *logits);
    double a = 0, b = 0, mm_s = -1; /* f32 KV; stored formats are timed by kv_decode */
    if (!times || !logits) st = tl_error_set(TL_ERR_NOMEM, "attention profile: out of memory");
    if (st == TL_OK) {
        tl__profile_say(progress, user, "attention: %d positions with 32-bit KV", AT_POS);
        st = attention_run(m, 32, AT_POS, logits, times, &a, &b, &mm_s);
    }
    tl_model_close(m);
    free(times);
    free(logits);
    if (st != TL_OK) return tl_error_wrap(st, "attention profile");

    /* seconds per visible position per layer */
    double s32 = b / L;
    if (s32 > 0) {
        p->attn_s_per_mac = s32 / (sp.n_head * hd);
    } else { /* noise swamped the slope: fall back to the FMA bound (QK and AV: 4 FLOPs) */
        tl__profile_say(progress, user, "attention: no measurable slope; using the FMA bound");
        p->attn_s_per_mac = 4.0 / p->fma_flops;
    }
    st = measure_kv_decode(p);
    if (st != TL_OK) return st;
    /* intercept: one token at position 0, less its matrix-product work (timed on the
     * model's own weights, as warm as in the loop - the streamed F32 rate would overstate
     * it for weights this small - or else estimated from that rate) and its element-wise
     * work, per layer: what is left is dispatches and bookkeeping */
    if (mm_s < 0) {
        double layer_macs = sp.n_embd * (sp.n_head * hd) + 2.0 * sp.n_embd * kvd +
                            (sp.n_head * hd) * sp.n_embd + 3.0 * sp.n_embd * sp.n_ff;
        mm_s = ((double)sp.n_vocab * sp.n_embd + L * layer_macs) / p->matmul_macs[0][0];
    }
    /* the cost model's element-wise terms: per layer 4*n_embd + 3*n_ff, per token the
     * embedding row (n_embd) and the logits' norm and output (n_embd + n_vocab) */
    double tok_elem = p->elementwise_s * (2.0 * sp.n_embd + sp.n_vocab);
    double fixed = (a - mm_s - tok_elem) / L -
                   p->elementwise_s * (4.0 * sp.n_embd + 3.0 * sp.n_ff);
    p->layer_fixed_s = fixed > 0 ? fixed : 0;
    return TL_OK;
}

/* ---- memory ---- */

static uint64_t huge_round(uint64_t b) { /* what tl_probe_buffer faults in */
    const uint64_t huge = (uint64_t)2 << 20;
    return (b + huge - 1) / huge * huge;
}

/* Bytes of matrix copies, activations and scratch of one matmul stage (measure_matmul,
 * measure_interference): `copies` of an R x C matrix of `type`, products of up to n rows. */
static uint64_t matmul_stage_bytes(tl_type type, uint64_t threads, size_t n) {
    const uint64_t mb = (uint64_t)MM_ROWS * tl_type_row_bytes(type, MM_COLS);
    const uint64_t copies = MM_MIN_BYTES / mb + 1;
    const uint64_t sf = (tl_matmul_scratch_floats(MM_COLS, n) + 15) / 16 * 16;
    return huge_round(copies * mb) +
           ((uint64_t)n * MM_COLS + (uint64_t)n * MM_ROWS + threads * sf + MM_COLS) * 4;
}

uint64_t tl_profile_measure_bytes(int32_t n_threads) {
    const uint64_t threads = (uint64_t)tl__profile_threads(n_threads);
    uint64_t peak = PROBE_MIN_BYTES;
#define STAGE(b) do { uint64_t b_ = (b); if (b_ > peak) peak = b_; } while (0)
    /* disk: one buffer of the largest chunk x depth */
    STAGE(tl_prof_chunks[TL_PROF_N_CHUNK - 1] * (uint64_t)tl_prof_depths[TL_PROF_N_DEPTH - 1]);
    for (int t = 0; t < TL_PROF_N_TYPE; t++)
        STAGE(matmul_stage_bytes(tl_type_table[t].type, threads,
                                 (size_t)tl_prof_rows[TL_PROF_N_ROWS - 1]));
    /* interference: Q8_0 copies up to 32 rows, and the reader's chunks and pages */
    tl_aio_params ap = tl_aio_default_params();
    STAGE(matmul_stage_bytes(TL_TYPE_Q8_0, threads, 32) +
          (uint64_t)ap.queue_depth * ap.chunk_bytes + URGENT_BATCH * TL_PROF_URGENT_BYTES);
    /* attention: the model's weights (resident), its f32 KV, and a margin for the
     * context's activations, logits and the file writer's chunk */
    tl_synth_params sp;
    attention_model(&sp);
    STAGE(tl_synth_file_bytes(&sp) +
          2ull * (uint64_t)sp.n_layer * (AT_POS + 16) * (uint64_t)sp.n_embd * 4 +
          ((uint64_t)16 << 20));
#undef STAGE
    return peak;
}

tl_status tl_profile_measure(int32_t n_threads, const char *disk_dir, uint64_t mem_limit,
                             void (*progress)(void *user, const char *line), void *user,
                             tl_hw_profile *out) {
    if (!out) return tl_error_set(TL_ERR_INVALID, "profile: no output");
    const uint64_t need = tl_profile_measure_bytes(n_threads);
    if (mem_limit && mem_limit < need)
        return tl_error_set(TL_ERR_NOMEM, "measuring the hardware profile needs %.1f MiB of "
                            "memory, more than the limit of %.1f MiB", tl_mib_up(need),
                            mem_limit / 1048576.0);
    const uint64_t probe = mem_limit && mem_limit < PROBE_MAX_BYTES
                               ? mem_limit / ((uint64_t)2 << 20) * ((uint64_t)2 << 20)
                               : PROBE_MAX_BYTES;
    memset(out, 0, sizeof *out);
    double t_start = tl_now();
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    out->measured_unix = (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
    int32_t threads = tl__profile_threads(n_threads);
    out->n_threads = threads;
    tl_profile_machine_key(threads, out->machine, sizeof out->machine);
    if (disk_dir) {
        if (strlen(disk_dir) >= sizeof out->disk_dir)
            return tl_error_set(TL_ERR_INVALID, "profile: directory name too long: %s",
                                disk_dir);
        snprintf(out->disk_dir, sizeof out->disk_dir, "%s", disk_dir);
    } else {
        tl__profile_default_dir(threads, out->disk_dir, sizeof out->disk_dir);
    }
    tl_pool *pool;
    tl_status st = tl_pool_open(threads, &pool);
    if (st != TL_OK) return st;
    tl__profile_say(progress, user, "memory bandwidth and FMA peak (%d threads)", (int)threads);
    out->mem_read_bps = tl_probe_read_bandwidth(pool, (size_t)probe, 5);
    out->fma_flops = tl_probe_fma_peak(pool, 5);
    if (!(out->mem_read_bps > 0) || !(out->fma_flops > 0))
        st = tl_error_set(TL_ERR_NOMEM, "profile: memory probe failed (%.1f MiB buffer)",
                          probe / 1048576.0);
    tl_tier *disk = NULL;
    if (st == TL_OK) st = measure_disk(out->disk_dir, out, progress, user, &disk);
    if (st == TL_OK) st = measure_matmul(pool, out, progress, user);
    if (st == TL_OK) st = measure_interference(pool, disk, out, progress, user);
    tl_tier_close(disk);
    tl_pool_close(pool);
    if (st == TL_OK) {
        tl__profile_say(progress, user, "element-wise ops");
        st = measure_elementwise(out);
    }
    if (st == TL_OK) st = measure_attention(threads, out->disk_dir, out, progress, user);
    if (st != TL_OK) return st;
    out->profile_seconds = tl_now() - t_start;
    tl_error_clear();
    return TL_OK;
}


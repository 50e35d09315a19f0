/* calibrate_stream.c - how much slower a piece of the model's compute runs while the model
 * file streams (tl__calibrate_stream_slowdown, calibrate.h).
 *
 * The profile measures the compute's slowdown beside a stream of its own scratch file, at
 * that file's rate; the model file may stream at several times that rate (a host's cache),
 * and what the IO takes from the cores (the IO threads' wake-ups, the interrupts, the
 * host's copy) does not follow the rate in any one way. So the caller's work (a layer's
 * forward over many rows) is timed alone and with a reader thread streaming the plan's
 * streamed units from the model file as the engine's queue reads them: through a queue of
 * its own with the engine's backend, chunk and depth, every chunk of the queue in flight,
 * the units' extents one after another, wrapping. Alone and held samples alternate from
 * alone to alone; each held sample is compared with the mean of the alone ones on either
 * side (a machine drifting over the samples moves both alike), and the median of those
 * ratios is the slowdown. A held sample starts once the stream has read a queue's worth,
 * so the stream's start-up latency is not what is timed.
 * Its chunks land in the ring's spare buffer (tl_residency_spare) or, where that is too
 * small, in memory from the budget; with no room there, as many chunks as the spare
 * buffer holds are kept in flight instead (2 halves of it, for units under 2 chunks).
 * The reader shares atomic flags (stop; ended, set as it returns) and an atomic count of
 * chunks read with the timing thread; its status is read only after pthread_join.
 */
#include "plan/calibrate.h"

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include "base/budget.h"
#include "base/clock.h"
#include "base/stats.h"
#include "base/status.h"
#include "exec/residency.h"
#include "model/placement.h"
#include "tier/aio.h"
#include "tier/tier.h"

#define STREAM_PAIRS 5
/* a reader that has not read a queue's worth after this long is taken as stuck */
#define STREAM_START_MAX_S 5.0

/* The streamed units' file extents, in pass order. */
typedef struct extents {
    uint64_t *off, *len;
    int n;
} extents;

typedef struct reader {
    tl_tier *t;
    tl_aio_params ap;
    const extents *e;
    uint8_t *buf; /* ap.queue_depth chunks */
    uint64_t *lens; /* the bytes of the read in each chunk's buffer */
    atomic_int stop;
    atomic_ullong chunks, done_bytes; /* chunks read so far, and their bytes */
    atomic_int ended;     /* the reader has returned (stopped, or an error) */
    int at;               /* where the stream goes on: extent, and offset within it */
    uint64_t at_off;
    tl_status st;
    uint64_t bytes; /* read while held samples were timed, and in how long */
    double seconds;
} reader;

/* Streams chunks of the extents, every one of the queue's depth in flight, until stop. */
static void *reader_main(void *arg) {
    reader *r = arg;
    tl_aio *q;
    r->st = tl_aio_open(&r->ap, &q);
    if (r->st) {
        atomic_store(&r->ended, 1);
        return NULL;
    }
    const int depth = r->ap.queue_depth;
    const uint64_t chunk = r->ap.chunk_bytes;
    uint64_t sub = 0, done = 0;
    while (!r->st && !atomic_load_explicit(&r->stop, memory_order_relaxed)) {
        while (!r->st && sub - done < (uint64_t)depth) {
            const uint64_t left = r->e->len[r->at] - r->at_off;
            const uint64_t len = left < chunk ? left : chunk;
            r->st = tl_aio_read(q, r->t, r->e->off[r->at] + r->at_off,
                                r->buf + (sub % (uint64_t)depth) * chunk, (size_t)len, sub);
            if (r->st) break;
            r->lens[sub % (uint64_t)depth] = len;
            sub++;
            r->at_off += len;
            if (r->at_off == r->e->len[r->at]) r->at = (r->at + 1) % r->e->n, r->at_off = 0;
        }
        if (!r->st && !(r->st = tl_aio_wait(q, done))) {
            atomic_fetch_add_explicit(&r->done_bytes, r->lens[done % (uint64_t)depth],
                                      memory_order_relaxed);
            atomic_fetch_add_explicit(&r->chunks, 1, memory_order_relaxed);
            done++;
        }
    }
    tl_aio_close(q); /* waits for what is still in flight */
    atomic_store(&r->ended, 1);
    return NULL;
}

/* One held sample: the stream started, work timed once a queue's worth has been read. */
static tl_status held_sample(reader *r, tl__calibrate_work_fn work, void *user,
                             double *seconds, double *bytes, double *wall) {
    atomic_store(&r->stop, 0);
    atomic_store(&r->chunks, 0);
    atomic_store(&r->done_bytes, 0);
    atomic_store(&r->ended, 0);
    pthread_t th;
    if (pthread_create(&th, NULL, reader_main, r))
        return tl_error_set(TL_ERR_IO, "calibrating the stream: no reader thread");
    const double t0 = tl_now();
    while (atomic_load(&r->chunks) < (unsigned long long)r->ap.queue_depth &&
           !atomic_load(&r->ended) && tl_now() - t0 < STREAM_START_MAX_S)
        sched_yield();
    tl_status st = TL_OK;
    const unsigned long long c0 = atomic_load(&r->chunks), b0 = atomic_load(&r->done_bytes);
    const double t1 = tl_now();
    if (c0 >= (unsigned long long)r->ap.queue_depth) st = work(user, seconds);
    const unsigned long long b1 = atomic_load(&r->done_bytes);
    const double t2 = tl_now();
    atomic_store(&r->stop, 1);
    pthread_join(th, NULL);
    if (r->st) return tl_error_wrap(r->st, "calibrating the stream on the model file");
    if (c0 < (unsigned long long)r->ap.queue_depth) *seconds = 0; /* no stream: not timed */
    *bytes = (double)(b1 - b0);
    *wall = t2 - t1;
    r->bytes += b1 - b0;
    r->seconds += t2 - t1;
    return st;
}

tl_status tl__calibrate_stream_slowdown(tl_model *m, tl__calibrate_work_fn work, void *user,
                                        double *slowdown, double *stream_bps,
                                        double *s_per_byte) {
    *slowdown = 0;
    *stream_bps = 0;
    *s_per_byte = 0;
    const tl_weight_plan *wp = tl_residency_plan(m->res);
    if (m->lm.flash || !wp->overlap || wp->streamed_bytes == 0) return TL_OK;
    /* every unit's, the output's (n_layer) last, as the residency reads them */
    const size_t cap = ((size_t)m->lm.hp.n_layer + 1) * TL_WEIGHT_UNIT_MAX;
    extents ex = {malloc(cap * sizeof *ex.off), malloc(cap * sizeof *ex.len), 0};
    for (int u = 0; u <= m->lm.hp.n_layer && ex.off && ex.len; u++) {
        tl_weight *ws[TL_WEIGHT_UNIT_MAX];
        const int n = tl_weight_plan_unit_weights(&m->lm, wp, u, ws);
        if (!n) continue;
        tl_weight_layout L;
        tl_weight_layout_build(&L, ws, n);
        for (int i = 0; i < L.n_e; i++)
            ex.off[ex.n] = L.e[i].file_off, ex.len[ex.n++] = L.e[i].len;
    }
    reader r = {.t = m->lm.panel_tier ? m->lm.panel_tier : m->lm.tier, .e = &ex};
    r.ap = tl_aio_default_params();
    r.ap.backend = (tl_aio_backend)m->lm.params.io_backend;
    r.ap.queue_depth = m->lm.params.io_queue_depth;
    r.ap.chunk_bytes = (size_t)m->lm.params.io_chunk_bytes;
    r.ap.n_threads = r.ap.queue_depth;
    /* the queue's chunks: in the ring's spare buffer where it holds them, else from the
     * budget, else as many as the spare buffer holds (fewer in flight than the engine
     * keeps, for a model whose units are that small; at least 2, of half the buffer each
     * where it holds fewer chunks); none: not measured */
    const size_t need = r.ap.chunk_bytes * (size_t)(r.ap.queue_depth > 0 ? r.ap.queue_depth : 0);
    size_t spare_bytes = 0;
    uint8_t *spare = tl_residency_spare(m->res, &spare_bytes);
    r.buf = spare && spare_bytes >= need ? spare : NULL;
    if (!r.buf && need > 0 &&
        tl_budget_alloc(m->lm.budget, need, TL_TIER_MAX_ALIGN, "stream calibration",
                        (void **)&r.buf)) {
        tl_error_clear();
        r.buf = NULL;
        if (spare && spare_bytes >= 2 * (size_t)TL_TIER_MAX_ALIGN) {
            if (spare_bytes < 2 * r.ap.chunk_bytes) /* a unit under 2 chunks: halves */
                r.ap.chunk_bytes = spare_bytes / 2 / TL_TIER_MAX_ALIGN * TL_TIER_MAX_ALIGN;
            const size_t fit = spare_bytes / r.ap.chunk_bytes;
            if (fit < (size_t)r.ap.queue_depth) r.ap.queue_depth = r.ap.n_threads = (int)fit;
            r.buf = spare;
        }
    }
    r.lens = malloc((size_t)(r.ap.queue_depth > 0 ? r.ap.queue_depth : 1) * sizeof *r.lens);
    if (ex.n == 0 || need == 0 || !r.buf || !r.lens) {
        if (spare) tl_residency_unspare(m->res);
        if (r.buf && r.buf != spare) tl_budget_free(m->lm.budget, r.buf);
        free(r.lens);
        free(ex.off);
        free(ex.len);
        return TL_OK;
    }
    double alone[STREAM_PAIRS + 1], held[STREAM_PAIRS], ratio[STREAM_PAIRS];
    double per_byte[STREAM_PAIRS];
    int n = 0;
    tl_status st = work(user, &alone[0]);
    for (int k = 0; k < STREAM_PAIRS && !st; k++) {
        double bytes = 0, wall = 0;
        st = held_sample(&r, work, user, &held[k], &bytes, &wall);
        if (!st) st = work(user, &alone[k + 1]);
        const double base = 0.5 * (alone[k] + alone[k + 1]);
        if (!st && held[k] > 0 && base > 0 && bytes > 0) {
            /* the share of the held sample's time the stream took, per byte it read */
            per_byte[n] = (1 - base / held[k]) * wall / bytes;
            ratio[n++] = held[k] / base;
        }
    }
    if (spare) tl_residency_unspare(m->res);
    if (r.buf != spare) tl_budget_free(m->lm.budget, r.buf);
    free(r.lens);
    free(ex.off);
    free(ex.len);
    if (st) return st;
    if (n == 0) return TL_OK;
    *slowdown = tl_median(ratio, (size_t)n);
    *s_per_byte = fmax(0, tl_median(per_byte, (size_t)n));
    *stream_bps = r.seconds > 0 ? (double)r.bytes / r.seconds : 0;
    return TL_OK;
}

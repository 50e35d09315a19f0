/* calibrate_ring.c - the ring's reads while the cores compute (tl_plan_calibrate_ring,
 * calibrate.h).
 *
 * The ring model (cost.c, ring_sim) overlaps each streamed unit's read with the compute of
 * the units before it, at the rate the disk calibration measured with nothing computing.
 * On a machine whose cores are all taken by the pool's threads, the IO thread that retires
 * a unit's chunks and issues the next ones waits for a core, so each read is late by some
 * time the rate alone does not show. This measures it as decode meets it: pairs of ring
 * samples, one alone and one with every streamed unit held while the pool multiplies one
 * row (a resident matrix of the model, standing for the unit's own work, whose weights a
 * hold cannot use), each unit about as long as the cost model prices its compute in the
 * plan's decode pass (its rows, its micro-batches): all of it, not only its products, as
 * the cores' busy share is what delays the reads, and a pass of many rows keeps them
 * busier than one of one row.
 * The alone samples on either side of a held one (alone and held alternate, from alone to
 * alone) give each unit's read time, at their rate together: a disk drifting over the
 * samples moves both sides alike, where an alone sample on one side only takes the drift
 * for a delay (or hides one). The delay per streamed read that makes the ring model (with
 * the holds as measured) take the held sample's time is the pair's figure
 * (tl_cost_ring_fit_delay); the median of the pairs is kept. A pair whose holds hid most
 * reads cannot tell a delay from the disk's noise and is dropped; so the holds multiply a
 * matrix whose one row costs no more than the shortest unit's target, so that each ends
 * near it.
 * A plan that keeps no such matrix resident (a tight budget streams every product) holds
 * its units with the pool's threads computing on registers alone, in SPIN_RUNS_PER_HOLD
 * runs a hold (about a layer's products and its attention): what delays the reads is the
 * cores being taken, which that reproduces without memory the budget does not have.
 */
#include "plan/calibrate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "base/clock.h"
#include "base/stats.h"
#include "base/status.h"
#include "base/threadpool.h"
#include "exec/residency.h"
#include "kernels/kernels.h"
#include "model/ops.h"
#include "model/placement.h"
#include "plan/cost.h"

#define RING_PAIRS 11
#define RING_MIN_PAIRS 3
#define RING_SAMPLES_S 1.0 /* past this, no further pair once RING_MIN_PAIRS are in */
#define RING_SAMPLE_BYTES ((uint64_t)32 << 20) /* whole passes per sample: this many bytes */
#define RING_MAX_PASS_BYTES ((uint64_t)512 << 20)
/* runs of a hold without a matrix: about a layer's products and its attention */
#define SPIN_RUNS_PER_HOLD 8

typedef struct hold_ctx {
    tl_model *m;
    const tl_weight *w; /* the resident matrix the holds multiply */
    float *X, *Y, *scratch;
    size_t sf;
    const double *target; /* seconds to hold each unit */
    double *held;         /* seconds each unit was held, in the last pass */
} hold_ctx;

/* A pool task of a hold without a matrix: its core kept busy until the run's end (reading
 * the clock is work enough: nothing of it waits). */
static void spin_task(void *arg, int task, int thread) {
    (void)task, (void)thread;
    const double until = *(const double *)arg;
    while (tl_now() < until) {
    }
}

/* tl_residency_hold_fn: one-row products until the unit's target has passed (at least
 * one), on the pool as decode runs them; without a matrix (h->w NULL), the pool's threads
 * spinning in SPIN_RUNS_PER_HOLD runs over the target */
static void hold(void *user, int unit) {
    hold_ctx *h = user;
    const double t0 = tl_now(), until = t0 + h->target[unit];
    tl_pool *pool = h->m->lm.pool;
    const double run_s = h->target[unit] / SPIN_RUNS_PER_HOLD;
    do {
        if (h->w) {
            tl_op_matmul(&h->m->lm, h->w, h->X, 1, h->Y, h->scratch, h->sf);
        } else {
            const double end = fmin(until, tl_now() + run_s);
            tl_pool_run(pool, tl_pool_threads(pool), spin_task, (void *)&end);
        }
    } while (tl_now() < until);
    h->held[unit] = tl_now() - t0;
}

/* The resident matrix the holds multiply (the row kernels' kind: not the embedding, which
 * is looked up, nor a flash or converted one): the dearest whose one-row product the
 * profile prices at most `fit` seconds, so a hold can end near its target. NULL if none
 * (the holds spin). */
static const tl_weight *hold_matrix(const tl_model *m, const tl_hw_profile *prof, double fit) {
    const tl_weight *under = NULL;
    double under_s = 0;
    for (size_t i = 0; i < m->lm.n_all; i++) {
        const tl_weight *w = m->lm.all[i];
        if (!w->data || w->convert || w->runs || w->rows <= 1 || w == &m->lm.tok_embd)
            continue;
        const double s = tl_cost_matmul(prof, w, 1);
        if (s <= fit && (!under || s > under_s)) under = w, under_s = s;
    }
    return under;
}

/* calibrate.h */
tl_plan_decode_shape tl_plan_decode_shape_of(const tl_policy *pol, const tl_workload *w) {
    tl_plan_decode_shape d = {pol->kv_bits, 1, 1,
                              tl_plan_decode_ctx(w->prompt_len, w->gen_len)};
    if (pol->single || pol->gbs < 1) return d;
    const int64_t cap = (int64_t)pol->gbs * (pol->num_gb > 0 ? pol->num_gb : 1);
    const int64_t seqs = w->num_seqs < 1 ? 1 : w->num_seqs < cap ? w->num_seqs : cap;
    d.n_mb = (int32_t)((seqs + pol->gbs - 1) / pol->gbs);
    d.rows = (int32_t)((seqs + d.n_mb - 1) / d.n_mb);
    return d;
}

/* calibrate.h */
double tl_plan_ring_hold_s(const tl_model *m, const tl_hw_profile *prof,
                           const tl_weight_plan *wp, int32_t u, const tl_plan_decode_shape *d) {
    /* at most as many micro-batches as the cost model walks (cost.c, block_walk) */
    enum { MAX_MB = 4096 };
    const int32_t n_mb = d->n_mb < 1 ? 1 : d->n_mb > MAX_MB ? MAX_MB : d->n_mb;
    const int32_t rows = d->rows > 0 ? d->rows : 1;
    const tl_weight *out = m->lm.tied_output ? &m->lm.tok_embd : &m->lm.output;
    const double out_s = tl_cost_matmul(prof, out, (double)rows * n_mb);
    const double repack = tl_cost_unit_repack_s(m, prof, wp, u);
    if (u == m->lm.hp.n_layer) return out_s + repack;
    int32_t r[MAX_MB];
    double c[MAX_MB], stored[MAX_MB];
    for (int32_t k = 0; k < n_mb; k++) { /* every position stored: a little dearer than
                                            the open page's f32 */
        r[k] = rows;
        c[k] = (double)rows * (d->ctx > 1 ? d->ctx : 1);
        stored[k] = d->kv_bits < 32 ? c[k] : 0;
    }
    const double pass = tl_cost_pass_compute(m, prof, d->kv_bits, r, c, stored, n_mb, 1, 1,
                                             rows * n_mb, 1, NULL);
    return fmax(0, pass - out_s) / m->lm.hp.n_layer + repack;
}

tl_status tl_plan_calibrate_ring(tl_model *m, tl_hw_profile *prof,
                                 const tl_plan_decode_shape *d, double *delay_s) {
    *delay_s = 0;
    prof->ring_unit_delay_s = 0;
    if (!m->res) return tl_error_set(TL_ERR_INVALID, "calibrating the ring: nothing placed");
    const tl_weight_plan *wp = tl_residency_plan(m->res);
    const int32_t U = m->lm.hp.n_layer;
    if (m->lm.flash || !wp->overlap || wp->streamed_bytes == 0 ||
        wp->streamed_bytes > RING_MAX_PASS_BYTES || U >= TL_COST_RING_MAX_UNITS ||
        m->lm.stage_first != 0 || m->lm.stage_end != U)
        return TL_OK;
    double *arr = calloc(4 * ((size_t)U + 1), sizeof *arr);
    if (!arr) return tl_error_set(TL_ERR_NOMEM, "calibrating the ring: out of memory");
    double *target = arr, *held = arr + U + 1, *c = arr + 2 * (U + 1), *r = arr + 3 * (U + 1);
    double fit_s = 0; /* the shortest streamed unit's target */
    for (int32_t u = 0; u <= U; u++) {
        target[u] = tl_plan_ring_hold_s(m, prof, wp, u, d);
        if (tl_weight_plan_unit_bytes(&m->lm, wp, u) > 0 && (fit_s == 0 || target[u] < fit_s))
            fit_s = target[u];
    }
    const tl_weight *w = hold_matrix(m, prof, fit_s);
    hold_ctx h = {.m = m, .w = w, .target = target, .held = held};
    if (w && !tl__calibrate_buffers(m, 1, w->rows, w->cols, "ring calibration", &h.X, &h.Y,
                                    &h.scratch, &h.sf))
        h.w = NULL; /* no room for its buffers: the pool spins instead */
    for (size_t i = 0; h.w && i < w->cols; i++) h.X[i] = (float)(i % 7) - 3;
    const int n_passes = (int)((RING_SAMPLE_BYTES + wp->streamed_bytes - 1) / wp->streamed_bytes);
    double fit[RING_PAIRS];
    int n = 0;
    tl_status st = TL_OK;
    const double t0 = tl_now();
    double s0 = 0; /* the alone sample before the held one */
    uint64_t b0 = 0;
    st = tl_residency_measure_passes(m->res, n_passes, NULL, NULL, &s0, &b0);
    for (int k = 0; k < RING_PAIRS && !st; k++) {
        if (k >= RING_MIN_PAIRS && tl_now() - t0 > RING_SAMPLES_S) break;
        double s1 = 0, s2 = 0;
        uint64_t b1 = 0, b2 = 0;
        memset(held, 0, ((size_t)U + 1) * sizeof *held);
        st = tl_residency_measure_passes(m->res, n_passes, hold, &h, &s1, &b1);
        if (!st) st = tl_residency_measure_passes(m->res, n_passes, NULL, NULL, &s2, &b2);
        const double alone_s = s0 + s2;
        const uint64_t alone_b = b0 + b2;
        s0 = s2, b0 = b2;
        if (st || !(alone_s > 0) || alone_b == 0 || !(s1 > 0)) continue;
        const double bps = (double)alone_b / alone_s; /* the two around it */
        for (int32_t u = 0; u <= U; u++) {
            r[u] = (double)tl_weight_plan_unit_bytes(&m->lm, wp, u) / bps;
            c[u] = held[u]; /* the last pass's hold of each unit stands for all */
        }
        const double d = tl_cost_ring_fit_delay(c, r, U, (int)wp->n_slots, n_passes, s1);
        if (d >= 0) fit[n++] = d; /* < 0: the holds hid the reads, the pair cannot tell */
    }
    if (h.w) tl__calibrate_free(m, h.X, h.Y, h.scratch);
    free(arr);
    if (st) return tl_error_wrap(st, "calibrating the ring on the model file");
    if (n == 0) return TL_OK;
    *delay_s = tl_median(fit, (size_t)n);
    prof->ring_unit_delay_s = *delay_s;
    return TL_OK;
}

/* ring_hold.c - bench_ring_hold: the residency ring's reads while the cores compute,
 * against the cost model's ring (bench, not a test; issue "Planner truth").
 *
 * bench_ring_hold -m MODEL --mem-budget MIB [--profile PATH] [--holds US,US,...] [--pairs N]
 *                 [--rows N]
 *
 * The model is planned for a short run at the budget (weights streamed where they do not
 * fit) and placed. For each hold h: N pairs, interleaved so the disk's drift reaches both,
 * of ring passes timed with nothing computing (tl_residency_measure_passes without a hold)
 * and with every streamed unit held about h while the cores compute: with --rows 0 (the
 * default) every pool thread spins for h; with --rows N > 0, products of N rows with a
 * resident matrix of the model (the largest, its own type and layout) run on the pool
 * until h has passed, as prefill's or decode's products keep the cores busy, between runs
 * as the engine's do. The rate of the first gives each unit's read time; the cost model's
 * ring from empty (tl_cost_ring_run_s) with those reads and the time each unit was actually
 * held predicts the second. Printed per hold, the medians over the pairs: measured /
 * predicted, the measured excess per streamed unit held (seconds the model misses each
 * time a unit's compute occupies the cores), and the IO queue's busy seconds (a read in
 * flight) in the held sample over the alone one's (reads slower beside compute).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tierllm.h"
#include "base/stats.h"
#include "base/status.h"
#include "exec/engine.h"
#include "exec/model_handle.h"
#include "exec/residency.h"
#include "model/ops.h"
#include "model/placement.h"
#include "base/clock.h"
#include "kernels/kernels.h"
#include "plan/cost.h"
#include "plan/profile.h"
#include "plan/replan.h"
#include "plan/search.h"
#include "tier/aio.h"

#define MAX_HOLDS 16
#define MAX_UNITS 4096
#define MAX_PAIRS 64
#define PASS_BYTES ((uint64_t)32 << 20) /* passes per sample: at least this many bytes */

typedef struct hold_ctx {
    tl_model *m;
    double hold_s;
    const tl_weight *w; /* the products' matrix (rows > 0) */
    size_t rows;
    float *X, *Y, *scratch;
    size_t sf;
    double held[MAX_UNITS]; /* seconds unit u was held in the last measurement */
} hold_ctx;

static void spin_task(void *arg, int task, int thread) {
    (void)task, (void)thread;
    const double until = *(const double *)arg;
    while (tl_now() < until) {
    }
}

/* tl_residency_hold_fn: the cores busy for about hold_s */
static void hold(void *user, int unit) {
    hold_ctx *h = user;
    const double t0 = tl_now(), until = t0 + h->hold_s;
    if (!h->rows) tl_pool_run(h->m->lm.pool, tl_pool_threads(h->m->lm.pool), spin_task,
                             (void *)&until);
    else
        do tl_op_matmul(&h->m->lm, h->w, h->X, h->rows, h->Y, h->scratch, h->sf);
        while (tl_now() < until);
    h->held[unit] = tl_now() - t0;
}

static int parse_holds(const char *s, double *us) {
    int n = 0;
    while (*s && n < MAX_HOLDS) {
        char *end;
        us[n] = strtod(s, &end);
        if (end == s || us[n] <= 0) return -1;
        n++;
        s = *end == ',' ? end + 1 : end;
    }
    return n;
}

int main(int argc, char **argv) {
    const char *path = NULL, *profile_path = NULL;
    uint64_t budget_mib = 0;
    double holds_us[MAX_HOLDS] = {250, 500, 1000, 2000};
    int n_holds = 4, pairs = 20;
    size_t rows = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-m") && i + 1 < argc) path = argv[++i];
        else if (!strcmp(argv[i], "--mem-budget") && i + 1 < argc)
            budget_mib = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--profile") && i + 1 < argc) profile_path = argv[++i];
        else if (!strcmp(argv[i], "--holds") && i + 1 < argc)
            n_holds = parse_holds(argv[++i], holds_us);
        else if (!strcmp(argv[i], "--pairs") && i + 1 < argc) pairs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rows") && i + 1 < argc) rows = strtoull(argv[++i], NULL, 10);
        else {
            fprintf(stderr, "usage: %s -m MODEL --mem-budget MIB [--profile PATH] "
                    "[--holds US,US,...] [--pairs N] [--rows N]\n", argv[0]);
            return 2;
        }
    }
    if (!path || !budget_mib || n_holds < 1 || pairs < 1 || pairs > MAX_PAIRS) {
        fprintf(stderr, "error: give -m MODEL and --mem-budget MIB; --holds: positive "
                "microseconds, at most %d; --pairs 1..%d\n", MAX_HOLDS, MAX_PAIRS);
        return 2;
    }
    tl_hw_profile prof;
    tl_status st = profile_path ? tl_profile_load(profile_path, &prof)
                                : tl_profile_measure(2, "/tmp", 0, NULL, NULL, &prof);
    if (st) {
        fprintf(stderr, "error: profile: %s\n", tl_last_error());
        return 1;
    }
    tl_model_params mp = tl_model_default_params();
    mp.mem_budget = budget_mib << 20;
    mp.n_threads = prof.n_threads;
    tl_model *m;
    if (tl_model_open(path, &mp, &m)) {
        fprintf(stderr, "error: %s\n", tl_last_error());
        return 1;
    }
    tl_plan_request rq;
    memset(&rq, 0, sizeof rq);
    rq.single = 1;
    rq.w = (tl_workload){.prompt_len = 32, .gen_len = 32, .num_seqs = 1};
    rq.n_ctx = 64;
    rq.overlap = 1;
    tl_plan_result plan;
    if ((st = tl_plan_search(m, &prof, &rq, &plan)) == TL_OK) {
        tl_plan_apply(&plan.policy, m, NULL);
        st = tl_engine_place(m, tl_plan_state_bytes(m, &plan.policy));
    }
    if (st) {
        fprintf(stderr, "error: %s\n", tl_last_error());
        tl_model_close(m);
        return 1;
    }
    const tl_weight_plan *wp = tl_residency_plan(m->res);
    const int32_t U = m->lm.hp.n_layer;
    int streamed = 0;
    for (int32_t u = 0; u <= U; u++) streamed += tl_weight_plan_unit_bytes(&m->lm, wp, u) > 0;
    if (!wp->overlap || !wp->streamed_bytes || U >= TL_COST_RING_MAX_UNITS || U >= MAX_UNITS) {
        fprintf(stderr, "error: nothing streams through the ring at %llu MiB\n",
                (unsigned long long)budget_mib);
        tl_model_close(m);
        return 1;
    }
    const int n_passes = (int)((PASS_BYTES + wp->streamed_bytes - 1) / wp->streamed_bytes);
    printf("%s at %llu MiB: %d of %d units streamed, %.1f MiB per pass, %d buffers, %d "
           "passes per sample, %d pairs per hold\n", path, (unsigned long long)budget_mib,
           streamed, (int)U + 1, (double)wp->streamed_bytes / 1048576, (int)wp->n_slots,
           n_passes, pairs);
    hold_ctx hc;
    memset(&hc, 0, sizeof hc);
    hc.m = m;
    hc.rows = rows;
    for (size_t i = 0; i < m->lm.n_all && rows; i++) {
        const tl_weight *w = m->lm.all[i];
        if (w->data && !w->convert && !w->runs && w->rows > 1 && w != &m->lm.tok_embd &&
            (!hc.w || w->rows * w->cols > hc.w->rows * hc.w->cols))
            hc.w = w;
    }
    if (rows && !hc.w) {
        fprintf(stderr, "error: no resident matrix to multiply at %llu MiB\n",
                (unsigned long long)budget_mib);
        tl_model_close(m);
        return 1;
    }
    if (rows) {
        const size_t threads = (size_t)tl_pool_threads(m->lm.pool);
        hc.sf = (tl_matmul_scratch_floats(hc.w->cols, rows) + 15) / 16 * 16;
        hc.X = calloc(rows * hc.w->cols, sizeof(float));
        hc.Y = calloc(rows * hc.w->rows, sizeof(float));
        hc.scratch = aligned_alloc(64, threads * hc.sf * sizeof(float));
        for (size_t i = 0; hc.X && i < rows * hc.w->cols; i++) hc.X[i] = (float)(i % 7) - 3;
        printf("holds: products of %zu rows with %s (%zu x %zu)\n", rows, hc.w->name,
               hc.w->rows, hc.w->cols);
    } else {
        printf("holds: every pool thread spinning\n");
    }
    double *c = calloc((size_t)U + 1, sizeof *c), *r = calloc((size_t)U + 1, sizeof *r);
    if (!c || !r || (rows && (!hc.X || !hc.Y || !hc.scratch)))
        st = tl_error_set(TL_ERR_NOMEM, "out of memory");
    for (int h = 0; h < n_holds && !st; h++) {
        hc.hold_s = holds_us[h] * 1e-6;
        double ratio[MAX_PAIRS], excess[MAX_PAIRS], alone_bps[MAX_PAIRS], busy[MAX_PAIRS];
        int k = 0; /* pairs measured */
        for (; k < pairs && !st; k++) {
            double s0 = 0, s1 = 0;
            uint64_t b0 = 0, b1 = 0;
            tl_aio_stats a0, a1, a2;
            tl_aio_get_stats(m->lm.aio, &a0);
            st = tl_residency_measure_passes(m->res, n_passes, NULL, NULL, &s0, &b0);
            tl_aio_get_stats(m->lm.aio, &a1);
            memset(hc.held, 0, sizeof hc.held);
            if (!st) st = tl_residency_measure_passes(m->res, n_passes, hold, &hc, &s1, &b1);
            tl_aio_get_stats(m->lm.aio, &a2);
            busy[k] = (a2.read_busy_s - a1.read_busy_s) / (a1.read_busy_s - a0.read_busy_s);
            if (!st && (!(s0 > 0) || !b0 || !(s1 > 0)))
                st = tl_error_set(TL_ERR_IO, "a sample read nothing or took no time");
            if (st) break;
            const double bps = (double)b0 / s0;
            for (int32_t u = 0; u <= U; u++) {
                const uint64_t ub = tl_weight_plan_unit_bytes(&m->lm, wp, u);
                r[u] = (double)ub / bps;
                c[u] = hc.held[u]; /* the last pass's hold of each unit stands for all */
            }
            const double model = tl_cost_ring_run_s(c, r, U, wp->n_slots, n_passes, 0);
            if (!(model > 0)) {
                st = tl_error_set(TL_ERR_INVALID, "the ring model gives no time");
                break;
            }
            alone_bps[k] = bps;
            ratio[k] = s1 / model;
            excess[k] = (s1 - model) / ((double)n_passes * streamed);
        }
        if (st) break;
        const double alone = tl_median(alone_bps, (size_t)k);
        printf("hold %6.0f us: alone %.2f GB/s | held measured / model %.3f | excess per held "
               "unit %+.0f us (model's unit read %.0f us) | IO busy held / alone %.2f\n",
               holds_us[h], alone / 1e9, tl_median(ratio, (size_t)k),
               tl_median(excess, (size_t)k) * 1e6,
               (double)wp->streamed_bytes / streamed / alone * 1e6, tl_median(busy, (size_t)k));
        fflush(stdout);
    }
    free(c), free(r), free(hc.X), free(hc.Y), free(hc.scratch);
    if (st) fprintf(stderr, "error: %s\n", tl_last_error());
    tl_model_close(m);
    return st ? 1 : 0;
}

/* replan.c - see replan.h. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "plan/replan.h"
#include "exec/model_handle.h"
#include "plan/calibrate.h"
#include "base/status.h"
#include "base/clock.h"

void tl_plan_apply(const tl_policy *pol, tl_model *m, tl_batch_params *bp) {
    m->lm.params.prefetch = pol->prefetch;
    m->lm.params.overlap = pol->overlap;
    m->lm.params.w_mem_pct = pol->w_mem_pct;
    if (bp) tl_plan_batch_params(pol, bp);
}

void tl_plan_context_params(const tl_policy *pol, const tl_model *m, tl_context_params *cp) {
    cp->n_batch = pol->prefill_rows;
    cp->n_ctx = pol->n_ctx;
    cp->kv_bits = pol->kv_bits;
    if (pol->kv_window_pages > 0) {
        const int64_t page = (int64_t)tl_cost_kv_page_bytes(m, pol->kv_bits, pol->page_tokens);
        const int64_t x = pol->kv_recompute > 0
                              ? (int64_t)pol->page_tokens * m->lm.hp.n_embd * 4 : 0;
        const int64_t a = TL_TIER_MAX_ALIGN; /* K and V, and the input rows, in 4 KiB units */
        const int64_t slot = (page + a - 1) / a * a + (x + a - 1) / a * a;
        cp->kv_window = pol->kv_window_pages * pol->page_tokens;
        cp->kv_sinks = pol->kv_sink_pages * pol->page_tokens;
        cp->kv_recompute = pol->kv_recompute;
        cp->kv_cache_bytes = (int64_t)pol->kv_cache_pages * (slot + TL_TIER_MAX_ALIGN);
    }
}

void tl_replanner_init(tl_replanner *r, const tl_model *m, const tl_hw_profile *prof,
                       const tl_plan_request *rq, const tl_plan_result *chosen) {
    memset(r, 0, sizeof *r);
    r->prof = *prof;
    r->rq = *rq;
    r->current = *chosen;
    r->threshold = 0.2;
    r->prompts_at_block = rq->w.num_seqs;
    tl_aio_get_stats(m->lm.aio, &r->aio_prev);
}

static void logf_(tl_replanner *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void logf_(tl_replanner *r, const char *fmt, ...) {
    if (r->n_log >= TL_REPLAN_LOG) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->log[r->n_log++], sizeof r->log[0], fmt, ap);
    va_end(ap);
}

static int same_policy(const tl_policy *a, const tl_policy *b) {
    return a->gbs == b->gbs && a->num_gb == b->num_gb && a->prefill_rows == b->prefill_rows &&
           a->kv_bits == b->kv_bits && a->kv_mem_pct == b->kv_mem_pct &&
           a->prefetch == b->prefetch && a->w_mem_pct == b->w_mem_pct &&
           a->page_tokens == b->page_tokens;
}

/* Searches again for the prompts left; switches if the policy changes. */
static int search_again(tl_replanner *r, tl_model *m, int32_t prompts_left,
                        tl_batch_params *bp, const char *when, double io_ratio,
                        double compute_ratio) {
    r->replans++;
    tl_plan_request rq = r->rq;
    rq.w.num_seqs = prompts_left;
    tl_plan_result next;
    /* the dry runs count from the budget in use before the current placement, which
     * the run frees before placing again (tl_engine_base_used) */
    if (tl_plan_search(m, &r->prof, &rq, &next)) {
        logf_(r, "%s: reads %.0f%% and compute %.0f%% of the prediction; re-planning failed "
              "(%s), policy kept", when, io_ratio * 100, compute_ratio * 100, tl_last_error());
        return 0;
    }
    const tl_policy *pol = &r->current.policy;
    int change = !same_policy(&next.policy, pol);
    logf_(r, "%s: disk reads took %.0f%% and compute %.0f%% of the predicted time; profile "
          "corrected, re-planned for %d prompts: %s (gbs %d x num_gb %d, prefill rows %d, KV "
          "%d-bit %d%%, prefetch %d; predicted %.2f tok/s)", when, io_ratio * 100,
          compute_ratio * 100, (int)prompts_left, change ? "new policy" : "policy kept",
          (int)next.policy.gbs, (int)next.policy.num_gb, (int)next.policy.prefill_rows,
          (int)next.policy.kv_bits, (int)next.policy.kv_mem_pct,
          (int)next.policy.prefetch, next.cost.tokens_per_s);
    if (r->checks == 0) r->calibrated = next.cost, r->has_calibrated = 1;
    if (!change) return 0;
    if (r->checks == 0) r->first_switch = 1, r->first = next;
    r->switches++;
    r->current = next;
    tl_plan_apply(&next.policy, m, bp);
    return 1;
}

static int hook(tl_replanner *r, tl_model *m, const tl_batch_stats *s, int32_t prompts_left,
                tl_batch_params *bp);

int tl_replanner_hook(void *user, tl_model *m, const tl_batch_stats *s, int32_t prompts_left,
                      tl_batch_params *bp) {
    tl_replanner *r = user;
    const double t0 = tl_now();
    int sw = hook(r, m, s, prompts_left, bp);
    r->hook_s += tl_now() - t0;
    return sw;
}

static int hook(tl_replanner *r, tl_model *m, const tl_batch_stats *s, int32_t prompts_left,
                tl_batch_params *bp) {
    if (!r->started) { /* before the first block: one pass of the engine's own streaming */
        r->started = 1;
        double bps, ratio = 1, cratio = 1;
        int sw = 0;
        if (!r->no_calibration && tl_plan_calibrate_disk(m, &r->prof, &bps, &ratio) == TL_OK) {
            r->disk_ratio = ratio;
            if (tl_plan_calibrate_compute(m, &r->prof, &cratio)) cratio = 1, tl_error_clear();
            /* products of many rows: what they change is the plan's predicted time (a
             * plan that waits on the disk is not moved by its compute's rate) */
            double pratio = 1, products_effect = 1;
            tl_plan_result was, now;
            const int priced = tl_plan_evaluate(m, &r->prof, &r->rq.w, &r->current.policy,
                                                &was) == TL_OK;
            if (tl_plan_calibrate_products(m, &r->prof, &pratio)) pratio = 1, tl_error_clear();
            double delay = 0; /* the ring's reads beside compute: in the plan's price */
            const tl_plan_decode_shape ds = tl_plan_decode_shape_of(&r->current.policy, &r->rq.w);
            if (tl_plan_calibrate_ring(m, &r->prof, &ds, &delay))
                tl_error_clear();
            if (priced && was.cost.total_s > 0 &&
                tl_plan_evaluate(m, &r->prof, &r->rq.w, &r->current.policy, &now) == TL_OK)
                products_effect = now.cost.total_s / was.cost.total_s;
            tl_error_clear();
            if (fabs(products_effect - 1) > r->threshold)
                logf_(r, "before the first block: a layer over 16 to 512 rows took (the "
                      "furthest off) %.0f%% of its price beside attention, the plan's prediction "
                      "%.0f%% (with the ring's reads %.0f us later each beside compute)",
                      100 * pratio, 100 * products_effect, 1e6 * delay);
            double page_scale = 0;
            const char *spill = bp ? bp->spill_dir : NULL;
            if (tl_plan_calibrate_kv(m, &r->prof, &r->current, &r->rq.w, spill, &page_scale, NULL))
                tl_error_clear();
            if (!(page_scale > 0)) page_scale = 1; /* not timed */
            else if (fabs(1 / page_scale - 1) > r->threshold)
                logf_(r, "before the first block: KV pages read (alone from a spill file, and "
                      "beside the stream) took %.0f%% of the time the profile gives them",
                      100 / page_scale);
            /* time for time: the profile predicted 1/ratio of what one pass took */
            if (fabs(1 / ratio - 1) > r->threshold || fabs(cratio - 1) > r->threshold ||
                fabs(products_effect - 1) > r->threshold ||
                fabs(1 / page_scale - 1) > r->threshold)
                sw = search_again(r, m, prompts_left, bp, "before the first block", 1 / ratio,
                                  cratio);
            else if (tl_plan_evaluate(m, &r->prof, &r->rq.w, &r->current.policy, &now) ==
                     TL_OK)
                r->calibrated = now.cost, r->has_calibrated = 1; /* the policy stays */
            tl_error_clear();
        }
        r->prev = *s;
        tl_aio_get_stats(m->lm.aio, &r->aio_prev);
        r->prompts_at_block = prompts_left;
        return sw;
    }
    tl_aio_stats aio;
    tl_aio_get_stats(m->lm.aio, &aio);
    const tl_policy *pol = &r->current.policy;
    const int32_t block = pol->gbs * pol->num_gb;
    int32_t ran = r->prompts_at_block - prompts_left; /* sequences of the finished block */
    if (ran > block || ran < 1) ran = block;
    double step_s = (s->prefill_s - r->prev.prefill_s) + (s->decode_s - r->prev.decode_s);
    double stall_s = (s->prefill_stall_s - r->prev.prefill_stall_s) +
                     (s->decode_stall_s - r->prev.decode_stall_s);
    double busy_s = aio.read_busy_s - r->aio_prev.read_busy_s;
    r->prev = *s;
    r->aio_prev = aio;
    r->prompts_at_block = prompts_left;
    r->checks++;
    /* what the plan predicted for the block that just ran */
    tl_workload w = r->rq.w;
    w.num_seqs = ran;
    tl_plan_result pred;
    if (tl_plan_evaluate(m, &r->prof, &w, pol, &pred)) return 0;
    const double p_compute = pred.cost.prefill.compute_s + pred.cost.decode.compute_s;
    const double p_read = pred.cost.prefill.weight_read_s + pred.cost.prefill.kv_read_s +
                          pred.cost.decode.weight_read_s + pred.cost.decode.kv_read_s;
    double io_ratio = 1, compute_ratio = 1;
    /* a read time too small to measure is not evidence about the disk */
    if (p_read > 0.02 && busy_s > 0) io_ratio = busy_s / p_read;
    if (p_compute > 0.02 && step_s - stall_s > 0) compute_ratio = (step_s - stall_s) / p_compute;
    r->last_io_ratio = io_ratio;
    r->last_compute_ratio = compute_ratio;
    const int io_off = fabs(io_ratio - 1) > r->threshold;
    const int compute_off = fabs(compute_ratio - 1) > r->threshold;
    if (!io_off && !compute_off) return 0;
    /* correct the profile by what was measured */
    if (io_off) tl_profile_scale_disk(&r->prof, io_ratio);
    if (compute_off) tl_profile_scale_compute(&r->prof, compute_ratio);
    char when[64];
    snprintf(when, sizeof when, "after block %d", (int)r->checks);
    return search_again(r, m, prompts_left, bp, when, io_ratio, compute_ratio);
}

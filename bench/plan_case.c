/* plan_case.c - one planned-then-run workload (plan_case.h). */
#include "plan_case.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "prompt.h"
#include "base/status.h"
#include "exec/engine.h"
#include "plan/calibrate.h"
#include "plan/replan.h"

void print_policy(const tl_policy *p) {
    if (p->single)
        printf("n_batch %3d prefetch %d%s", (int)p->prefill_rows, (int)p->prefetch,
               p->overlap ? "" : " sync");
    else
        printf("%2dx%-2d rows %4d kv %2d-bit %3d%% pf %d%s", (int)p->gbs, (int)p->num_gb,
               (int)p->prefill_rows, (int)p->kv_bits, (int)p->kv_mem_pct, (int)p->prefetch,
               p->overlap ? "" : " sync");
}

tl_plan_request bench_request(const bench_case *c) {
    tl_plan_request rq;
    memset(&rq, 0, sizeof rq);
    rq.single = c->single;
    rq.w = (tl_workload){.prompt_len = c->prompt, .gen_len = c->gen, .num_seqs = c->seqs};
    rq.n_ctx = c->prompt + c->gen;
    rq.overlap = 1;
    return rq;
}

/* The run's statistics when its first piece of text arrives: what the prompt took (a first
 * token that completes no UTF-8 text yet moves that point on to the one that does). */
typedef struct first_piece {
    tl_context *ctx;
    int seen;
    tl_run_stats at;
} first_piece;
static int at_first_piece(void *user, int32_t token, const char *text, size_t len) {
    (void)token, (void)text, (void)len;
    first_piece *fp = user;
    if (!fp->seen && !tl_context_get_stats(fp->ctx, &fp->at)) fp->seen = 1;
    return 0;
}

/* Plans (or evaluates the given knobs), then runs the workload under that policy. */
outcome run_case(const bench_case *c, const tl_hw_profile *prof_in, int replan,
                        int calibrate) {
    outcome o;
    memset(&o, 0, sizeof o);
    o.dec_read_busy_s = -1;
    tl_model_params mp = tl_model_default_params();
    mp.mem_budget = c->budget_mib << 20;
    mp.n_threads = prof_in->n_threads;
    tl_model *m;
    if (tl_model_open(c->path, &mp, &m)) {
        fprintf(stderr, "error: %s\n", tl_last_error());
        return o;
    }
    tl_hw_profile cal = *prof_in;
    const tl_hw_profile *prof = &cal;
    const tl_plan_request rq = bench_request(c);
    tl_policy fixed = tl_plan_default_policy(m, &rq);
    fixed.gbs = c->gbs;
    fixed.num_gb = c->num_gb;
    fixed.kv_bits = c->kv_bits;
    fixed.kv_mem_pct = c->kv_mem;
    fixed.prefetch = c->prefetch;
    fixed.overlap = c->overlap;
    fixed.prefill_rows = c->rows;
    if (c->policy) fixed = *c->policy;
    tl_status st = c->automatic ? tl_plan_search_ranked(m, prof, &rq, &o.plan, &o.ranked)
                                : tl_plan_evaluate(m, prof, &rq.w, &fixed, &o.plan);
    /* place, then time the engine's own streaming, its matrix-vector products over the
     * resident weights and the first layer's forward over many rows, and the KV pages'
     * cost beside the stream (plan/calibrate.h): the disk and the cores as they are now, in
     * the same run; auto re-plans on them as the CLI does, a fixed policy is predicted
     * again with them */
    int timed = 0; /* the disk timed on a placement that streams */
    for (int round = 0; round < 3 && !st; round++) {
        tl_plan_apply(&o.plan.policy, m, NULL); /* the model's knobs: prefetch, overlap */
        const uint64_t state = tl_plan_state_bytes(m, &o.plan.policy);
        if ((st = tl_engine_place(m, state))) break;
        if (!calibrate || round == 2 || (round == 1 && (timed || o.plan.streamed_bytes == 0)))
            break;
        double bps, ratio;
        if ((st = tl_plan_calibrate_disk(m, &cal, &bps, &ratio))) break;
        o.cal_disk = ratio;
        timed = bps > 0;
        /* round 1: the first placement streamed nothing to time; this one's stream and its
         * reads beside compute, as the CLI does (the rest was calibrated in round 0) */
        if (round == 0) {
            if ((st = tl_plan_calibrate_compute(m, &cal, &ratio))) break;
            o.cal_compute = ratio;
            if ((st = tl_plan_calibrate_products(m, &cal, &ratio))) break;
            o.cal_products = ratio;
        }
        double delay;
        const tl_plan_decode_shape ds = tl_plan_decode_shape_of(&o.plan.policy, &rq.w);
        if ((st = tl_plan_calibrate_ring(m, &cal, &ds, &delay))) break;
        if (round == 0) {
            double page, alone;
            if ((st = tl_plan_calibrate_kv(m, &cal, &o.plan, &rq.w, NULL, &page, &alone))) break;
            o.cal_kv_page = page;
            o.cal_kv_alone = alone;
        }
        tl_plan_result again;
        st = c->automatic ? tl_plan_search_ranked(m, prof, &rq, &again, &o.ranked)
                          : tl_plan_evaluate(m, prof, &rq.w, &o.plan.policy, &again);
        if (st) break;
        int same = !memcmp(&again.policy, &o.plan.policy, sizeof again.policy);
        o.plan = again;
        if (same) break;
        tl_engine_unplace(m); /* auto changed its mind: place the new policy */
    }
    o.disk_bps = tl_profile_read_bps(prof, m->lm.params.io_chunk_bytes, m->lm.params.io_queue_depth);
    o.prof = cal;
    o.total_no_ring_s = o.total_no_spread_s = o.plan.cost.total_s;
    o.total_no_layer_s = o.total_no_stream_s = o.total_no_rate_s = o.plan.cost.total_s;
    o.total_lowest_s = o.total_no_bytecost_s = o.plan.cost.total_s;
    double *const term_s[5] = {&o.total_no_layer_s, &o.total_no_stream_s, &o.total_no_rate_s,
                               &o.total_lowest_s, &o.total_no_bytecost_s};
    for (int term = 0; term < 5 && !st; term++) { /* the same policy, each term left out */
        tl_hw_profile off = cal;
        if (term == 0)
            for (int k = 0; k < TL_PROF_N_ROWS; k++) off.layer_row_scale[k] = 0;
        else if (term == 3)
            for (int k = 0; k < TL_PROF_N_ROWS; k++)
                off.layer_row_scale[k] = cal.layer_row_scale_lowest[k];
        else if (term == 4)
            off.io_stream_s_per_byte = 0;
        else
            off.io_slowdown_stream = off.io_stream_s_per_byte = 0;
        if (term == 2) off.io_rate_scale = 0;
        tl_plan_result with, without;
        if (tl_plan_evaluate(m, &cal, &rq.w, &o.plan.policy, &with) == TL_OK &&
            tl_plan_evaluate(m, &off, &rq.w, &o.plan.policy, &without) == TL_OK)
            *term_s[term] = o.plan.cost.total_s - with.cost.total_s + without.cost.total_s;
        tl_error_clear();
    }
    if (!st && cal.n_disk_spread > 1) {
        tl_hw_profile off = cal;
        off.n_disk_spread = 0;
        tl_plan_result with, without;
        if (tl_plan_evaluate(m, &cal, &rq.w, &o.plan.policy, &with) == TL_OK &&
            tl_plan_evaluate(m, &off, &rq.w, &o.plan.policy, &without) == TL_OK)
            o.total_no_spread_s =
                o.plan.cost.total_s - with.cost.total_s + without.cost.total_s;
        tl_error_clear();
    }
    if (!st && cal.ring_unit_delay_s > 0) { /* the same policy priced with and without */
        tl_hw_profile off = cal;
        off.ring_unit_delay_s = 0;
        tl_plan_result with, without;
        if (tl_plan_evaluate(m, &cal, &rq.w, &o.plan.policy, &with) == TL_OK &&
            tl_plan_evaluate(m, &off, &rq.w, &o.plan.policy, &without) == TL_OK)
            o.total_no_ring_s = o.plan.cost.total_s - with.cost.total_s + without.cost.total_s;
        tl_error_clear();
    }
    if (st) {
        snprintf(o.error, sizeof o.error, "%s", tl_last_error());
        fprintf(stderr, "error: planning: %s\n", o.error);
        tl_model_close(m);
        return o;
    }
    if (c->max_predicted_s > 0 && o.plan.cost.total_s > c->max_predicted_s) {
        o.too_long = 1;
        tl_model_close(m);
        return o;
    }
    const tl_policy *pol = &o.plan.policy;
    tl_generate_params gp = tl_generate_default_params();
    gp.n_predict = c->gen;
    gp.stop_at_eos = 0;
    gp.sampler.temperature = 0;
    o.ran = 1;
    if (c->single) {
        tl_context_params cp = tl_context_default_params();
        cp.n_ctx = pol->n_ctx;
        cp.n_batch = pol->prefill_rows;
        cp.kv_bits = pol->kv_bits;
        tl_plan_context_params(pol, m, &cp); /* KV tiers, when the policy has them */
        tl_context *ctx;
        char *prompt = bench_make_prompt(m, c->prompt, 0);
        tl_generate_stats gs;
        st = tl_context_open(m, &cp, &ctx);
        if (!st) {
            first_piece fp = {ctx, 0, {0}};
            st = tl_generate(ctx, prompt, &gp, at_first_piece, &fp, &gs);
            tl_run_stats all;
            if (!st && fp.seen && !tl_context_get_stats(ctx, &all)) {
                o.pre_stall_s = fp.at.stall_s;
                o.dec_stall_s = all.stall_s - fp.at.stall_s;
                o.dec_read_busy_s = all.io_busy_s - fp.at.io_busy_s;
            }
            tl_context_close(ctx);
        }
        free(prompt);
        if (!st) {
            o.measured_s = gs.prefill_seconds + gs.decode_seconds;
            o.pre_s = gs.prefill_seconds, o.dec_s = gs.decode_seconds;
            o.measured_tps = gs.n_generated / o.measured_s;
        }
    } else {
        tl_batch_params bp = tl_batch_default_params();
        tl_plan_apply(pol, m, &bp);
        char **prompts = calloc((size_t)c->seqs, sizeof *prompts);
        for (int i = 0; i < c->seqs; i++) prompts[i] = bench_make_prompt(m, c->prompt, i);
        tl_batch_stats bs;
        tl_replanner *rp = replan ? malloc(sizeof *rp) : NULL;
        if (rp) tl_replanner_init(rp, m, prof, &rq, &o.plan);
        tl_batch_run run = {rp ? tl_replanner_hook : NULL, rp, NULL, NULL};
        st = tl_batch_generate_ex(m, &bp, &gp, (const char *const *)prompts, NULL, c->seqs, NULL,
                                  NULL, NULL, &run, &bs);
        if (!st) {
            o.measured_s = bs.prefill_s + bs.decode_s;
            o.pre_s = bs.prefill_s, o.dec_s = bs.decode_s;
            o.pre_stall_s = bs.prefill_stall_s, o.dec_stall_s = bs.decode_stall_s;
            o.pre_kv_wait_s = bs.prefill_kv_wait_s, o.dec_kv_wait_s = bs.decode_kv_wait_s;
            o.kv_bytes_read = (double)bs.kv_bytes_read;
            o.weight_bytes_read = (double)bs.weight_bytes_read;
            o.measured_tps = bs.generated_tokens / o.measured_s;
            o.replans = rp ? rp->switches : 0;
            if (rp)
                for (int i = 0; i < rp->n_log; i++) printf("    replan: %s\n", rp->log[i]);
        }
        free(rp);
        for (int i = 0; i < c->seqs; i++) free(prompts[i]);
        free(prompts);
    }
    if (st) fprintf(stderr, "error: running: %s\n", tl_last_error());
    o.ok = !st;
    tl_model_close(m);
    return o;
}


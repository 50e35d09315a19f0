/* batch_pipe.c - planning a pipeline's batch run (tools/batch_pipe.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tools/batch_pipe.h"
#include "tools/cli_plan.h"
#include "base/status.h"
#include "base/threadpool.h"
#include "plan/profile.h"
#include "exec/pipeline.h"

/* The policy of the batch knobs bp (and the model's weight share) for rq's regime. */
static tl_policy manual_policy(const tl_model *m, const tl_plan_request *rq,
                               const tl_batch_params *bp) {
    tl_policy pol = tl_plan_default_policy(m, rq);
    pol.gbs = bp->gbs;
    pol.num_gb = bp->num_gb;
    pol.prefill_rows = bp->prefill_rows;
    pol.kv_bits = bp->kv_bits;
    pol.kv_mem_pct = bp->kv_mem_pct;
    pol.page_tokens = bp->page_tokens;
    pol.n_ctx = bp->n_ctx;
    pol.w_mem_pct = m->lm.params.w_mem_pct;
    return pol;
}

/* The prediction of the manual policy bp for the workload of rq. */
tl_status batch_evaluate_manual(tl_model *m, const tl_hw_profile *prof,
                                 const tl_plan_request *rq, const tl_batch_params *bp,
                                 tl_plan_result *chosen) {
    const tl_policy pol = manual_policy(m, rq, bp);
    return tl_plan_evaluate(m, prof, &rq->w, &pol, chosen);
}

/* The profile a pipeline stage is predicted with: k ranks on one host share its cores and
 * memory bandwidth, so each computes at 1/k of the rates the host reaches with all their
 * threads at once (a --profile file is taken as the host's). The disk's grid is kept: k
 * readers are k times the depth, which the grid's own rates already reflect. */
static tl_status stage_profile(tl_model *m, const cli_pipe *pp, const char *profile_path,
                               tl_hw_profile *prof) {
    tl_status st = cli_profile(m, profile_path, prof);
    const int k = tl_link_host_ranks(pp->link);
    if (!st && k > 1) {
        int32_t threads = m->lm.params.n_threads;
        if (threads <= 0) threads = tl_pool_threads(m->lm.pool);
        int measured = 0;
        tl_hw_profile host; /* only a saved one: k ranks must not measure at once */
        if (!tl_profile_obtain(profile_path, threads * k, NULL, 1, NULL, NULL, &host, &measured)) {
            *prof = host;
            tl_profile_scale_compute(prof, k);
        } else {
            fprintf(stderr, "[plan] rank %d: no saved profile for the %d threads of the %d ranks "
                    "on this host (run `tierllm profile -t %d` once); predicting with %d\n",
                    pp->rank, (int)(threads * k), k, (int)(threads * k), (int)threads);
            tl_error_clear();
        }
    }
    return st;
}

/* A stage's predicted seconds (out[0]; -1: none) and wave passes per block (out[1]) for
 * the workload of rq: its layers under the batch policy as one wave sees it (each wave is
 * a block of num_gb / waves micro-batches through this stage). */
static tl_status stage_seconds(tl_model *m, const cli_pipe *pp, const tl_hw_profile *prof,
                               const tl_plan_request *rq, const tl_batch_params *bp,
                               double out[2]) {
    out[0] = -1, out[1] = 0;
    tl_batch_params wbp = *bp;
    const int32_t waves = tl_batch_pipe_waves(pp->size, bp->num_gb);
    wbp.num_gb = (bp->num_gb + waves - 1) / waves;
    tl_plan_result r;
    tl_status st = batch_evaluate_manual(m, prof, rq, &wbp, &r);
    if (st) return st;
    const double block = (double)wbp.gbs * wbp.num_gb;
    const double blocks = ceil(rq->w.num_seqs / block);
    out[0] = r.cost.total_s;
    out[1] = (r.cost.prefill_passes + r.cost.decode_passes) / (blocks > 0 ? blocks : 1);
    return TL_OK;
}

/* This stage's KV placement for the block shape bp (tl_plan_place): sets bp->kv_mem_pct. */
static tl_status place_kv(tl_model *m, const tl_hw_profile *prof, const tl_plan_request *rq,
                          tl_batch_params *bp, tl_plan_result *r) {
    const tl_policy pol = manual_policy(m, rq, bp); /* its KV and weight shares: searched */
    tl_status st = tl_plan_place(m, prof, &rq->w, &pol, r);
    if (!st) bp->kv_mem_pct = r->policy.kv_mem_pct;
    return st;
}

tl_status batch_place_stage(tl_model *m, const cli_pipe *pp, const tl_plan_request *rq,
                            tl_batch_params *bp, const char *profile_path) {
    if (rq->w.num_seqs < 1) return TL_OK; /* nothing to run: the given placement stays */
    tl_hw_profile prof;
    tl_plan_result r;
    tl_status st = stage_profile(m, pp, profile_path, &prof);
    if (!st) st = place_kv(m, &prof, rq, bp, &r);
    if (st) return tl_error_wrap(st, "policy auto on rank %d (layers %d..%d)", pp->rank,
                                 (int)m->lm.stage_first, (int)m->lm.stage_end - 1);
    fprintf(stderr, "policy auto: rank %d (layers %d..%d) keeps %d%% of its KV pages in "
            "memory, weights %.1f MiB resident and %.1f MiB streamed per pass, for gbs %d x "
            "num_gb %d\n", pp->rank, (int)m->lm.stage_first, (int)m->lm.stage_end - 1,
            (int)bp->kv_mem_pct, r.resident_bytes / 1048576.0, r.streamed_bytes / 1048576.0,
            (int)bp->gbs, (int)bp->num_gb);
    return TL_OK;
}

/* Seconds this stage's messages take on its link for the workload of rq: every row of
 * every sequence crosses each boundary once as a hidden state (prompt and fed tokens:
 * prompt_len + gen_len - 1), in one step message (header and rows) per wave pass; the
 * last stage sends back a row of logits per generated token, one message per micro-batch
 * of gbs sequences and step that wants logits (gen_len of them per micro-batch). */
static double stage_network_s(const tl_model *m, const cli_pipe *pp, const tl_plan_request *rq,
                              const tl_batch_params *bp, double wave_passes,
                              const tl_pipe_link *lk) {
    if (!(lk->bps > 0) || lk->peer < 0) return 0;
    const tl_llama_hparams *hp = &m->lm.hp;
    const double seqs = rq->w.num_seqs;
    double bytes, messages;
    if (pp->rank < pp->size - 1) {
        messages = wave_passes;
        bytes = seqs * (rq->w.prompt_len + rq->w.gen_len - 1) * (double)hp->n_embd * 4 +
                messages * (double)tl_pipe_header_bytes(m->pipe);
    } else {
        messages = ceil(seqs / bp->gbs) * rq->w.gen_len;
        bytes = seqs * rq->w.gen_len * (double)hp->n_vocab * 4;
    }
    return messages * lk->latency_s + bytes / lk->bps;
}

/* --stats on a pipeline: this stage's prediction (rank 0 shared the workload). */
tl_status batch_predict_stage(tl_model *m, const cli_pipe *pp, const tl_plan_request *rq,
                              const tl_batch_params *bp, const char *profile_path,
                              batch_stage_pred *out) {
    memset(out, 0, sizeof *out);
    out->stage_s = -1;
    tl_pipe_link lk = {0, 0, -1};
    /* every rank times its link here; a failure ends the job (its peer may be waiting) */
    tl_status st = m->pipe ? tl_pipe_measure_link(m->pipe, &lk) : TL_OK;
    if (st || rq->w.num_seqs < 1) return st;
    tl_hw_profile prof;
    double t[2];
    if (stage_profile(m, pp, profile_path, &prof) || stage_seconds(m, pp, &prof, rq, bp, t)) {
        fprintf(stderr, "[plan] rank %d: no prediction: %s\n", pp->rank, tl_last_error());
        tl_error_clear();
        return TL_OK;
    }
    out->stage_s = t[0];
    out->passes = t[1];
    /* t[1] counts the passes of one wave's block: every block runs one per wave */
    const int32_t waves = tl_batch_pipe_waves(pp->size, bp->num_gb);
    const double blocks = ceil(rq->w.num_seqs / ((double)bp->gbs * bp->num_gb));
    out->net_s = stage_network_s(m, pp, rq, bp, t[1] * waves * blocks, &lk);
    out->link_bps = lk.bps;
    out->link_latency_s = lk.latency_s;
    return TL_OK;
}

/* --pipeline-layers auto: each rank predicts its own stage (its budget, its host's
 * profile) for every range whose ends lie within SPLIT_REACH layers of the even split's;
 * rank 0 takes the boundaries whose slowest stage is predicted fastest and shares them.
 * Sets mp's layer range; prints the choice on rank 0. An infeasible range (the budget
 * cannot hold it) is never chosen; with none feasible the even split stays. */
enum { SPLIT_REACH = 3, SPLIT_W = 2 * SPLIT_REACH + 1 };
static int32_t even_bound(int r, int n, int32_t L) { return (int32_t)((int64_t)r * L / n); }

/* The best boundaries bound[r+1..n-1] given bound[r], by trying every window position:
 * returns the least slowest-stage time (HUGE_VAL when none is feasible). */
static double split_search(const double *T, int n, int32_t L, int r, int32_t *bound,
                           int32_t *best) {
    if (r == n - 1) { /* the last stage ends at L */
        const int32_t a = bound[r], lo = even_bound(r, n, L) - SPLIT_REACH;
        const double t = T[((size_t)r * SPLIT_W + (size_t)(a - lo)) * SPLIT_W + SPLIT_REACH];
        if (t < 0) return HUGE_VAL;
        for (int i = 0; i <= n; i++) best[i] = bound[i];
        best[n] = L;
        return t;
    }
    double least = HUGE_VAL;
    int32_t trial[TL_PIPE_MAX_WAVES + 1];
    const int32_t lo_a = even_bound(r, n, L) - SPLIT_REACH, e = even_bound(r + 1, n, L);
    for (int32_t b = e - SPLIT_REACH; b <= e + SPLIT_REACH; b++) {
        if (b <= bound[r] || b >= L - (n - 2 - r)) continue;
        const double t = T[((size_t)r * SPLIT_W + (size_t)(bound[r] - lo_a)) * SPLIT_W +
                           (size_t)(b - (e - SPLIT_REACH))];
        if (t < 0 || t >= least) continue;
        bound[r + 1] = b;
        const double rest = split_search(T, n, L, r + 1, bound, trial);
        const double worst = rest > t ? rest : t;
        if (worst < least) {
            least = worst;
            for (int i = 0; i <= n; i++) best[i] = trial[i];
        }
    }
    return least;
}

tl_status batch_split_auto(cli_pipe *pp, const char *model_path, tl_model_params *mp,
                            const tl_batch_params *bp, const tl_plan_request *rq,
                            const char *profile_path, int32_t L, int place) {
    const int n = pp->size, r = pp->rank;
    if (rq->w.num_seqs < 1 || n > TL_PIPE_MAX_WAVES) return TL_OK; /* the even split stays */
    double mine[SPLIT_W * SPLIT_W], *all = calloc((size_t)n * SPLIT_W * SPLIT_W, sizeof *all);
    if (!all) return tl_error_set(TL_ERR_NOMEM, "out of memory");
    tl_hw_profile prof;
    int have_prof = 0;
    tl_status st = TL_OK;
    const int32_t lo_a = even_bound(r, n, L) - SPLIT_REACH, lo_b = even_bound(r + 1, n, L) - SPLIT_REACH;
    for (int i = 0; i < SPLIT_W && !st; i++)
        for (int j = 0; j < SPLIT_W && !st; j++) {
            const int32_t a = r == 0 ? 0 : lo_a + i, b = r == n - 1 ? L : lo_b + j;
            mine[i * SPLIT_W + j] = -1;
            if ((r == 0 && i != SPLIT_REACH) || (r == n - 1 && j != SPLIT_REACH)) continue;
            if (a < r || b > L - (n - 1 - r) || a >= b) continue;
            tl_model_params cp = *mp;
            cp.layer_first = a, cp.layer_end = b;
            tl_model *m = NULL;
            tl_status os = tl_model_open(model_path, &cp, &m);
            const tl_pipe_shape shape = os ? (tl_pipe_shape){0, 0, 0} : tl_batch_pipe_shape(m, bp);
            if (!os) os = tl_pipe_open(m, pp->link, &shape); /* its buffers count */
            if (!os && !have_prof) {
                st = stage_profile(m, pp, profile_path, &prof);
                have_prof = !st;
            }
            double t[2];
            tl_batch_params cbp = *bp; /* with place, this range's own KV placement */
            tl_plan_result pr;
            if (!os && !st && place) os = place_kv(m, &prof, rq, &cbp, &pr);
            if (!os && !st && !stage_seconds(m, pp, &prof, rq, &cbp, t))
                mine[i * SPLIT_W + j] = t[0];
            if (!st) tl_error_clear(); /* a range that does not fit is only infeasible */
            tl_model_close(m);
        }
    if (!st) st = tl_link_gather(pp->link, mine, sizeof mine, all);
    int32_t bound[TL_PIPE_MAX_WAVES + 1], best[TL_PIPE_MAX_WAVES + 1];
    for (int i = 0; i <= n; i++) best[i] = bound[i] = even_bound(i, n, L);
    if (!st && r == 0) {
        bound[0] = 0;
        const double t = split_search(all, n, L, 0, bound, best);
        if (t == HUGE_VAL)
            for (int i = 0; i <= n; i++) best[i] = even_bound(i, n, L);
        fprintf(stderr, "[plan] pipeline split:");
        for (int i = 0; i < n; i++) fprintf(stderr, "%s%d", i ? "," : " ", (int)(best[i + 1] - best[i]));
        if (t < HUGE_VAL) fprintf(stderr, " layers per rank, slowest stage predicted %.2f s\n", t);
        else fprintf(stderr, " (even: no range near it was predicted to fit)\n");
    }
    if (!st) st = tl_link_share(pp->link, best, sizeof best);
    if (!st) mp->layer_first = best[r], mp->layer_end = best[r + 1];
    free(all);
    return st;
}

/* After a pipeline's batch (--stats): every rank's prediction and measurement to rank 0,
 * which prints them per stage and for the pipeline: the slowest stage's time, stretched by
 * the fill and drain of each block ((ranks - 1) wave passes of the bottleneck per block). */
void batch_report_pipeline(tl_model *m, const cli_pipe *pp, const batch_stage_pred *pred,
                           double elapsed_s, const tl_batch_stats *bs) {
    tl_pipe *p = m->pipe;
    tl_pipe_stats ps;
    tl_pipe_get_stats(p, &ps);
    enum { NV = 9 };
    const double mine[NV] = {pred->stage_s, pred->passes, elapsed_s, ps.wait_s,
                             m->lm.stage_first, m->lm.stage_end, pred->net_s, pred->link_bps,
                             pred->link_latency_s};
    const int n = tl_pipe_size(p);
    double *all = calloc((size_t)n * NV, sizeof *all);
    if (!all) return;
    if (tl_link_gather(pp->link, mine, sizeof mine, all) || tl_pipe_rank(p) > 0) {
        free(all);
        return;
    }
    double slowest = 0, passes = 0, bubble = 0;
    int have = 1, at = 0;
    for (int r = 0; r < n; r++) {
        const double *v = all + (size_t)r * NV;
        const double busy = v[2] - v[3];
        /* a stage takes the longer of its passes and its sends (they overlap) */
        const double t = v[0] < 0 ? v[0] : v[0] > v[6] ? v[0] : v[6];
        fprintf(stderr, "[plan] stage %d (layers %d..%d): predicted %.2f s, measured %.2f s "
                "(error %+.1f%%) working and %.2f s waiting for the other ranks, %.1f%% of "
                "its %.2f s\n", r, (int)v[4], (int)v[5] - 1, t, busy,
                t > 0 ? 100 * (busy - t) / t : 0.0, v[3], v[2] > 0 ? 100 * v[3] / v[2] : 0.0,
                v[2]);
        if (v[7] > 0)
            fprintf(stderr, "[plan] stage %d link to rank %d: %.2f GB/s, %.1f us per message "
                    "(timed); its messages %.3f s of the predicted %.2f s\n", r, (r + 1) % n,
                    v[7] / 1e9, v[8] * 1e6, v[6], t);
        if (t < 0) have = 0;
        if (t > slowest) slowest = t, passes = v[1], at = r;
        bubble += v[2] > 0 ? v[3] / v[2] / n : 0;
    }
    fprintf(stderr, "[plan] pipeline: bubble (mean share of a rank's time spent waiting) "
            "%.1f%%\n", 100 * bubble);
    if (!have) {
        free(all);
        return;
    }
    const double t = slowest * (1 + (passes > 0 ? (n - 1) / passes : 0));
    const double tps = t > 0 ? (double)bs->generated_tokens / t : 0;
    const double meas = elapsed_s > 0 ? (double)bs->generated_tokens / elapsed_s : 0;
    fprintf(stderr, "[plan] pipeline: predicted %.2f s (stage %d the slowest, %.1f wave passes "
            "per block), %.2f generated tok/s; measured %.2f s, %.2f tok/s (error %+.1f%%)\n",
            t, at, passes, tps, elapsed_s, meas, t > 0 ? 100 * (elapsed_s - t) / t : 0.0);
    free(all);
}

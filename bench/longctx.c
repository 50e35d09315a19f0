/* longctx.c (bench_longctx) - decoding long contexts whose KV cache outgrows the budget.
 *
 * A multi-head synthetic shape (width 1024, 16 layers, 16 heads and 16 KV heads, Q4_0;
 * 128 KiB of f32 KV per position) is written once to the work directory. For each
 * context length the model opens with a memory budget of half the context's KV, one
 * context (KV in tiers by temperature: 256-position window, 16 sink positions, the cache
 * the budget leaves, key bounds kept) is prefilled once, then under each setting in turn
 * SETTLE_STEPS tokens are decoded unmeasured and 31 measured (--gen 32), in this order:
 *   no cache    exact attention, the DRAM cache off: every disk page is read every step
 *               (the nearest to today's --kv-mem 0 placement: only window and sinks stay)
 *   cache       exact attention through the cache
 *   by need     the same with weights and KV pages read in the order compute needs them
 *               (TL_IO_BY_NEED) instead of KV pages ahead of streamed weights
 *   select 50%  page selection at a budget of 50% of the pages, through the cache
 *   select 25%  the same at 25%
 * and reports per token: KV bytes read from disk, the cache hit rate measured and as the
 * cache model predicts it (exact settings), the disk bytes the selection read on demand
 * and its reads per disk page used against the hit-rate model's forecast, and tokens per
 * second. Beside the prefill and each setting: the cost model's prediction of the same
 * steps (KV bytes and wall time per token) from the hardware profile (the cached one, or
 * measured first), with its disk rate taken from timed reads of the context's own spill
 * file as the KV prefetch reads it (tl_context_time_disk_reads: its order, its depth, its
 * frames' footprint, each of which moves a virtual disk's rate), once before the setting
 * and around each block of BLOCK_STEPS steps (each block's plan the mean of its plans at
 * the rates before and after it, under selection with the hit-rate model's read forecast
 * taken before the block), since this disk's rate drifts within seconds. Random weights
 * attend nearly uniformly, so selection's quality is not judged here
 * (tests/test_kv_select.c does, on trained weights).
 * Then recompute against load (run_recompute) on a --recompute-ctx context (4096).
 * Usage: bench_longctx [--dir DIR] [--ctx 4096,16384] [--gen 32] [--threads N]
 *                      [--recompute-ctx 4096]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "tierllm.h"
#include "base/clock.h"
#include "base/stats.h"
#include "exec/engine.h"
#include "exec/residency.h"
#include "kv/kv_cache.h"
#include "plan/cost.h"
#include "plan/search.h"
#include "tier/aio.h"

enum { BLOCK_STEPS = 4 };   /* decode steps between two re-measures of the disk */
enum { SETTLE_STEPS = 2 };  /* decode steps before a setting is measured */
#define PROBE_S 0.3         /* seconds a re-measure reads */

/* The depth the KV cache's reads run at (the queue's urgent class): timed and priced there. */
static int32_t kv_depth(const tl_model_params *mp) {
    return tl_aio_class_depth(mp->io_queue_depth, TL_AIO_SOON);
}

static int argmax(const float *v, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[b]) b = i;
    return b;
}

/* n token ids of the synthetic vocabulary past its specials, from a seeded LCG. */
static int32_t *random_prompt(int32_t n, uint64_t x) {
    int32_t *p = malloc((size_t)n * sizeof *p);
    for (int32_t i = 0; p && i < n; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = 3 + (int32_t)((x >> 33) % 509);
    }
    return p;
}

typedef struct setting { const char *name; int cache; float select; int32_t io_order; } setting;

/* The cost model's prediction of n_gen - 1 decode steps after `len` positions, for the
 * context's placement (or `as`, when given) with this cache and selection share, and the
 * hit-rate model's read forecast (select_reads, 0: none). */
static tl_status predict(tl_model *m, const tl_hw_profile *prof, const tl_context *c,
                         int32_t len, int n_gen, int32_t cache, float select,
                         double select_reads, const tl_kv_params *as, tl_cost *out) {
    const tl_kv_params *kp = as ? as : tl_context_kv_params(c);
    tl_plan_request rq;
    memset(&rq, 0, sizeof rq);
    rq.single = 1;
    rq.w.num_seqs = 1;
    rq.w.prompt_len = len;
    rq.w.gen_len = n_gen;
    rq.n_ctx = kp->max_tokens;
    rq.kv_bits = kp->bits;
    rq.overlap = 1;
    tl_policy pol = tl_plan_default_policy(m, &rq);
    pol.prefill_rows = 128;
    tl_policy_set_kv(&pol, kp);
    pol.kv_cache_pages = cache;
    pol.kv_select = select;
    pol.kv_select_reads = (float)select_reads;
    return tl_cost_predict(m, prof, &rq.w, &pol, tl_residency_plan(m->res), out);
}

/* *out = prof with its disk read rate set to the context's spill file read now, as its
 * prefetch reads it (*bps). */
static tl_status time_disk(tl_context *c, const tl_hw_profile *prof, uint64_t slot,
                           int32_t depth, tl_hw_profile *out, double *bps) {
    *out = *prof;
    tl_status st = tl_context_time_disk_reads(c, depth, PROBE_S, bps);
    return st ? st : tl_profile_set_read_bps(out, slot, depth, *bps);
}

/* The model with a budget of half the context's f32 KV, and a context with its KV in
 * tiers (256-position window, 16 sinks, the cache the budget leaves), selection's key
 * bounds kept (select) or the input rows kept with every layer recomputing (recompute).
 * Returns 0, or 1 after printing the error. */
static int open_longctx(const char *path, int32_t n_ctx, int threads, int select,
                        int recompute, tl_model_params *mp, tl_model **m, tl_context **c) {
    *mp = tl_model_default_params();
    mp->n_threads = threads;
    mp->mem_budget = (uint64_t)n_ctx * 2 * 1024 * 4 * 16 / 2;
    *c = NULL;
    if (tl_model_open(path, mp, m)) {
        fprintf(stderr, "error: %s\n", tl_last_error());
        return 1;
    }
    tl_context_params cp = tl_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_batch = 128;
    cp.kv_window = 256;
    cp.kv_sinks = 16;
    cp.kv_select = select ? 0.5f : 0; /* keeps the key bounds; settings set the share */
    cp.kv_recompute = recompute ? (*m)->lm.hp.n_layer : 0; /* keeps the input rows */
    if (tl_context_open(*m, &cp, c)) {
        fprintf(stderr, "error: context of %d: %s\n", (int)n_ctx, tl_last_error());
        tl_model_close(*m);
        return 1;
    }
    return 0;
}

/* Recompute against load on one context: the model opened as for run_ctx, its KV in tiers
 * with the input rows kept beside K and V (prefill loads), then n_gen tokens decoded with
 * 0 (load), all, and the planner's count of layers recomputing K and V (by the search's
 * rule: the candidate count with the least predicted decode time, a count above 0 only
 * by TL_PLAN_RECOMPUTE_MARGIN, with the disk re-measured now), in 3 alternating rounds.
 * Reported: KV bytes read per token, tok/s, the plan's time per token, and the medians. */
static int run_recompute(const char *path, int32_t n_ctx, int n_gen, int threads,
                         const tl_hw_profile *prof) {
    tl_model_params mp;
    tl_model *m;
    tl_context *c;
    if (open_longctx(path, n_ctx, threads, 0, 1, &mp, &m, &c)) return 1;
    const int32_t L = m->lm.hp.n_layer;
    if (tl_context_set_kv_recompute(c, 0)) { /* the prefill loads */
        fprintf(stderr, "error: %s\n", tl_last_error());
        tl_context_close(c);
        tl_model_close(m);
        return 1;
    }
    const tl_kv_params *kp = tl_context_kv_params(c);
    printf("recompute against load, context %d: cache %d pages; a disk page reads %zu KiB "
           "as K and V, %zu KiB as input rows\n", (int)n_ctx, kp->cache_pages,
           tl_kv_read_bytes(kp, 0) >> 10, tl_kv_read_bytes(kp, 1) >> 10);
    const int32_t n_prompt = n_ctx - 9 * (n_gen + 1) - 1; /* 3 rounds of up to 3 settings */
    int32_t *prompt = random_prompt(n_prompt, 777);
    float *logits = malloc(512 * sizeof *logits);
    double t0 = tl_now();
    tl_status st = tl_decode(c, prompt, (size_t)n_prompt, logits);
    if (!st) printf("  prefill %d tokens (loading): %.1f s\n", (int)n_prompt, tl_now() - t0);
    int32_t tok = argmax(logits, 512);
    /* the planner's count for these decode steps, on the disk of this minute */
    tl_hw_profile now = *prof;
    const uint64_t slot = tl_kv_read_bytes(kp, 0);
    double disk_bps = 0;
    if (!st) st = time_disk(c, prof, slot, kv_depth(&mp), &now, &disk_bps);
    const int32_t cand[6] = {0, 1, L / 4, L / 2, 3 * L / 4, L};
    int32_t pick = 0;
    double pick_s = HUGE_VAL;
    tl_run_stats s0, s1;
    tl_context_get_stats(c, &s0);
    for (int i = 0; i < 6 && !st; i++) {
        tl_cost cost;
        tl_kv_params q = *kp;
        tl_kv_set_recompute(&q, q.input_dim, cand[i]);
        if (predict(m, &now, c, (int32_t)s0.tokens, n_gen, kp->cache_pages, 0, 0, &q, &cost))
            continue;
        /* the planner's rule (plan/search.h): recompute only by a margin */
        const double ranked = cost.decode_s * (cand[i] > 0 ? 1 + TL_PLAN_RECOMPUTE_MARGIN : 1);
        printf("  plan: %2d layers recomputing: %.3f s/token\n", (int)cand[i],
               cost.decode_s / (n_gen - 1));
        if (ranked < pick_s) {
            pick_s = ranked;
            pick = cand[i];
        }
    }
    /* load and recompute-all alternate (the planner's count between, when it is neither)
     * for 3 rounds; the medians are compared */
    double tps[3][3];
    int n_sets = pick == 0 || pick == L ? 2 : 3;
    const int32_t runs[3] = {0, L, pick};
    for (int round = 0; round < 3 && !st; round++)
        for (int k = 0; k < n_sets && !st; k++) {
            if ((st = tl_context_set_kv_recompute(c, runs[k]))) break;
            if ((st = tl_decode(c, &tok, 1, logits))) break; /* settles the cache */
            tok = argmax(logits, 512);
            tl_hw_profile here;
            if ((st = time_disk(c, prof, slot, kv_depth(&mp), &here, &disk_bps))) break;
            tl_context_get_stats(c, &s0);
            tl_cost cost;
            const int have = predict(m, &here, c, (int32_t)s0.tokens, n_gen, kp->cache_pages,
                                     0, 0, NULL, &cost) == TL_OK;
            t0 = tl_now();
            for (int i = 0; i < n_gen - 1 && !st; i++) {
                st = tl_decode(c, &tok, 1, logits);
                tok = argmax(logits, 512);
            }
            const double dt = tl_now() - t0, n = n_gen - 1;
            tl_context_get_stats(c, &s1);
            if (st) break;
            tps[k][round] = n / dt;
            printf("  round %d, %2d layers recomputing%s: KV read %6.1f MiB/token | %.2f tok/s "
                   "| disk before: %.2f GB/s", round + 1, (int)runs[k],
                   k == 2 ? " (planner)" : "",
                   (s1.kv_bytes_read - s0.kv_bytes_read) / 1048576.0 / n, tps[k][round],
                   disk_bps / 1e9);
            if (have)
                printf(" | plan %.3f s/token (%+.1f%% measured)", cost.decode_s / n,
                       100 * (dt / n / (cost.decode_s / n) - 1));
            printf("\n");
            fflush(stdout);
        }
    if (!st) {
        const double load = tl_median(tps[0], 3), all = tl_median(tps[1], 3);
        const double chosen = pick == 0 ? load : pick == L ? all : tl_median(tps[2], 3);
        const double best = load > all ? load : all;
        printf("  medians: load %.2f tok/s, recompute all %.2f tok/s; the planner's choice (%d "
               "layers) %.2f tok/s: %+.1f%% against the better fixed choice (%s)\n", load, all,
               (int)pick, chosen, 100 * (chosen / best - 1), load > all ? "load" : "recompute");
    } else {
        fprintf(stderr, "error: %s\n", tl_last_error());
    }
    free(prompt);
    free(logits);
    tl_context_close(c);
    tl_model_close(m);
    return st ? 1 : 0;
}

static int run_ctx(const char *path, int32_t n_ctx, int n_gen, int threads,
                   const tl_hw_profile *prof) {
    static const setting settings[] = {{"no cache", 0, 0, TL_IO_KV_FIRST},
                                       {"cache", 1, 0, TL_IO_KV_FIRST},
                                       {"by need", 1, 0, TL_IO_BY_NEED},
                                       {"select 50%", 1, 0.5f, TL_IO_KV_FIRST},
                                       {"select 25%", 1, 0.25f, TL_IO_KV_FIRST}};
    enum { NS = sizeof settings / sizeof settings[0] };
    const uint64_t kv_bytes = (uint64_t)n_ctx * 2 * 1024 * 4 * 16;
    tl_model_params mp;
    tl_model *m;
    tl_context *c;
    if (open_longctx(path, n_ctx, threads, 1, 0, &mp, &m, &c)) return 1;
    const tl_kv_params *kp = tl_context_kv_params(c);
    const int32_t cache_full = kp->cache_pages;
    const double page_mib = (double)tl_kv_slot_bytes(kp) / 1048576.0;
    printf("context %d: KV %.0f MiB (f32), budget %.0f MiB; window %d pages, sinks %d, "
           "cache %d pages (%.0f MiB)\n", (int)n_ctx, kv_bytes / 1048576.0,
           mp.mem_budget / 1048576.0, kp->window_pages, kp->sink_pages, cache_full,
           cache_full * page_mib);
    tl_run_stats ws;
    tl_context_get_stats(c, &ws);
    printf("  weights: %.1f MiB resident, %.1f MiB streamed per pass\n",
           ws.weights_resident_bytes / 1048576.0, ws.weights_streamed_bytes / 1048576.0);
    /* prefill all but the decoded positions, exact */
    const int32_t n_prompt = n_ctx - NS * (n_gen - 1 + SETTLE_STEPS) - 1;
    int32_t *prompt = random_prompt(n_prompt, 12345);
    float *logits = malloc(512 * sizeof *logits);
    tl_context_tune_kv(c, cache_full, 0);
    tl_run_stats s0, s1;
    tl_context_get_stats(c, &s0);
    double t0 = tl_now();
    tl_status st = tl_decode(c, prompt, (size_t)n_prompt, logits);
    double prefill_s = tl_now() - t0;
    tl_context_get_stats(c, &s1);
    if (st) {
        fprintf(stderr, "error: prefill: %s\n", tl_last_error());
    } else {
        printf("  prefill %d tokens: %.1f s (%.1f tok/s); KV read %.0f MiB during it, disk "
               "busy %.1f s\n", (int)n_prompt, prefill_s, n_prompt / prefill_s,
               (s1.kv_bytes_read - s0.kv_bytes_read) / 1048576.0, s1.io_busy_s - s0.io_busy_s);
        tl_cost pc;
        if (predict(m, prof, c, n_prompt, 1, cache_full, 0, 0, NULL, &pc) == TL_OK)
            printf("  prefill plan: %.1f s (%+.1f%% measured; compute %.1f s, KV read %.0f MiB)\n",
                   pc.prefill_s, 100 * (prefill_s / pc.prefill_s - 1), pc.prefill.compute_s,
                   pc.prefill.kv_read_bytes / 1048576.0);
    }
    int32_t tok = argmax(logits, 512);
    const uint64_t slot = (tl_kv_slot_bytes(kp) + 4095) / 4096 * 4096;
    for (int k = 0; k < NS && !st; k++) {
        const setting *se = &settings[k];
        tl_context_tune_kv(c, se->cache ? cache_full : 0, se->select);
        m->lm.params.io_order = se->io_order;
        /* settling steps first: the cache fills; and under selection, the heat of the
         * pages the exact setting before left at 1 falls below the fetch level after two
         * selections that do not use them (TL_KV_HEAT_KEEP, _FETCH) */
        for (int i = 0; i < SETTLE_STEPS && !st; i++) {
            st = tl_decode(c, &tok, 1, logits);
            tok = argmax(logits, 512);
        }
        if (st) break;
        /* the disk of this minute, in the requests the KV prefetch makes: once before
         * the setting (its whole-setting plan), and again after each block of steps; a
         * re-measure that cannot run (too few spare frames) only drops the predictions */
        double disk_bps = 0;
        const int timed =
            tl_context_time_disk_reads(c, kv_depth(&mp), PROBE_S, &disk_bps) == TL_OK;
        const double disk_first = disk_bps;
        /* under selection, the hit-rate model's forecast of the reads, now and before
         * each block */
        double fc = 0;
        if (se->select > 0 && tl_context_select_read_forecast(c, &fc)) fc = 0;
        const double fc_first = fc;
        tl_context_get_stats(c, &s0);
        tl_cost cost;
        tl_hw_profile now = *prof;
        const int have_pred =
            timed && tl_profile_set_read_bps(&now, slot, kv_depth(&mp), disk_bps) == TL_OK &&
            predict(m, &now, c, (int32_t)s0.tokens, n_gen, se->cache ? cache_full : 0, se->select,
                    fc, NULL, &cost) == TL_OK;
        int have_blocks = timed;
        double dt = 0, bracketed = 0, bracketed_kv = 0;
        for (int done = 0; done < n_gen - 1 && !st;) {
            const int b = n_gen - 1 - done < BLOCK_STEPS ? n_gen - 1 - done : BLOCK_STEPS;
            tl_run_stats sb;
            tl_context_get_stats(c, &sb);
            if (se->select > 0 && tl_context_select_read_forecast(c, &fc)) fc = 0;
            t0 = tl_now();
            for (int i = 0; i < b && !st; i++) {
                st = tl_decode(c, &tok, 1, logits);
                tok = argmax(logits, 512);
            }
            dt += tl_now() - t0;
            done += b;
            double after = 0;
            if (st) break;
            have_blocks = have_blocks &&
                          tl_context_time_disk_reads(c, kv_depth(&mp), PROBE_S, &after) == TL_OK;
            /* the block's plan: the mean of its plans at the disk before and after it */
            for (int side = 0; side < 2 && have_blocks; side++) {
                tl_cost bc;
                now = *prof;
                have_blocks = tl_profile_set_read_bps(&now, slot, kv_depth(&mp),
                                                      side ? after : disk_bps) == TL_OK &&
                              predict(m, &now, c, (int32_t)sb.tokens, b + 1,
                                      se->cache ? cache_full : 0, se->select, fc, NULL,
                                      &bc) == TL_OK;
                if (have_blocks) {
                    bracketed += bc.decode_s / 2;
                    bracketed_kv += bc.decode.kv_read_bytes / 2;
                }
            }
            disk_bps = after;
        }
        tl_context_get_stats(c, &s1);
        if (st) break;
        const double n = n_gen - 1;
        const double rd = (double)(s1.kv_pages_read - s0.kv_pages_read);
        const double hit = (double)(s1.kv_cache_hits - s0.kv_cache_hits);
        const double pred = (double)(s1.kv_predicted_reads - s0.kv_predicted_reads);
        const double dem = (double)(s1.kv_demand_reads - s0.kv_demand_reads);
        const double io = s1.io_busy_s - s0.io_busy_s;
        printf("  %-10s KV read %7.1f MiB/token, weights %.1f", se->name,
               (s1.kv_bytes_read - s0.kv_bytes_read) / 1048576.0 / n,
               (s1.bytes_read_disk - s0.bytes_read_disk) / 1048576.0 / n);
        if (se->select == 0)
            printf(" | hit rate %.3f, predicted %.3f (reads %+.1f%% of the prediction)",
                   rd + hit > 0 ? hit / (rd + hit) : 1.0,
                   rd + hit > 0 ? 1 - pred / (rd + hit) : 1.0, pred > 0 ? 100 * (rd / pred - 1) : 0.0);
        else {
            const double used = (double)(s1.kv_select_disk_pages - s0.kv_select_disk_pages);
            const double hn = s1.kv_heat_needed - s0.kv_heat_needed;
            printf(" | attended %.1f%% of pages, %.1f pages/token on demand, hit rate %.3f, "
                   "predicted %.3f; disk reads per disk page used %.3f, forecast %.3f",
                   100.0 * (double)(s1.kv_select_pages_read - s0.kv_select_pages_read) /
                       (double)(s1.kv_select_pages_total - s0.kv_select_pages_total),
                   dem / n, used > 0 ? 1 - dem / used : 1.0,
                   hn > 0 ? (s1.kv_heat_ready - s0.kv_heat_ready) / hn : 1.0,
                   used > 0 ? rd / used : 0.0, fc_first);
        }
        printf(" | %.2f tok/s | disk busy %.0f%% of the time (disk before: %.2f GB/s in "
               "%llu KiB reads, %d deep)\n", n / dt, 100 * io / dt, disk_first / 1e9,
               (unsigned long long)(slot >> 10), (int)kv_depth(&mp));
        if (have_pred) {
            const double kv_meas = (double)(s1.kv_bytes_read - s0.kv_bytes_read) / n;
            const double kv_pred = cost.decode.kv_read_bytes / n, t_pred = cost.decode_s / n;
            printf("  %-10s plan: KV read %7.1f MiB/token (%+.1f%% measured), %.3f s/token "
                   "(%+.1f%% measured); terms: compute %.3f, KV read %.3f, weights read %.3f, "
                   "KV wait %.3f\n", "", kv_pred / 1048576.0,
                   kv_pred > 0 ? 100 * (kv_meas / kv_pred - 1) : 0.0, t_pred,
                   100 * (dt / n / t_pred - 1), cost.decode.compute_s / n,
                   cost.decode.kv_read_s / n, cost.decode.weight_read_s / n,
                   cost.decode.kv_wait_s / n);
        }
        if (have_blocks)
            printf("  %-10s plan with the disk re-measured around each block of %d steps%s: "
                   "%.3f s/token (%+.1f%% measured), KV read %.1f MiB/token (%+.1f%% "
                   "measured)\n", "", BLOCK_STEPS,
                   se->select > 0 ? " and the read forecast before it" : "", bracketed / n,
                   100 * (dt / bracketed - 1), bracketed_kv / n / 1048576.0,
                   bracketed_kv > 0 ? 100 * ((double)(s1.kv_bytes_read - s0.kv_bytes_read) /
                                             bracketed_kv - 1) : 0.0);
        else
            printf("  %-10s (no plan: the spill file's re-measure could not run: %s)\n", "",
                   tl_last_error());
        fflush(stdout);
    }
    if (st) fprintf(stderr, "error: %s\n", tl_last_error());
    free(prompt);
    free(logits);
    tl_context_close(c);
    tl_model_close(m);
    return st ? 1 : 0;
}

int main(int argc, char **argv) {
    const char *dir = "/tmp/tierllm-bench", *ctxs = "4096,16384";
    int32_t recompute_ctx = 4096;
    int n_gen = 32, threads = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--dir")) dir = argv[i + 1];
        else if (!strcmp(argv[i], "--ctx")) ctxs = argv[i + 1];
        else if (!strcmp(argv[i], "--gen")) n_gen = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--recompute-ctx")) recompute_ctx = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: bench_longctx [--dir DIR] [--ctx 4096,16384] [--gen N] "
                    "[--threads N] [--recompute-ctx 4096 (0: skip)]\n");
            return 2;
        }
    }
    if (n_gen < 2) n_gen = 2;
    mkdir(dir, 0755);
    char path[1024];
    snprintf(path, sizeof path, "%s/longctx-w1024-l16-q4_0.gguf", dir);
    struct stat sb;
    if (stat(path, &sb) != 0) {
        tl_synth_params sp;
        tl_synth_preset("stories260k", &sp);
        sp.n_embd = 1024;
        sp.n_ff = 2816;
        sp.n_layer = 16;
        sp.n_head = sp.n_head_kv = 16;
        sp.n_ctx = 16384;
        sp.weight_type = 2; /* Q4_0 */
        printf("synthesizing %s ...\n", path);
        if (tl_synth_write(&sp, path)) {
            fprintf(stderr, "error: %s\n", tl_last_error());
            return 1;
        }
    }
    tl_hw_profile prof;
    int measured = 0;
    if (tl_profile_obtain(NULL, threads, dir, 0, NULL, NULL, &prof, &measured)) {
        fprintf(stderr, "error: hardware profile: %s\n", tl_last_error());
        return 1;
    }
    if (measured) printf("measured the hardware profile (saved for the next run)\n");
    int rc = 0;
    for (const char *p = ctxs; *p;) {
        int32_t n_ctx = (int32_t)strtol(p, (char **)&p, 10);
        if (n_ctx >= 1024) rc |= run_ctx(path, n_ctx, n_gen, threads, &prof);
        while (*p == ',') p++;
        if (*p && (*p < '0' || *p > '9')) break;
    }
    if (recompute_ctx >= 1024) rc |= run_recompute(path, recompute_ctx, n_gen, threads, &prof);
    return rc;
}

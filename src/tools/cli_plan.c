/* cli_plan.c - what `run`, `batch` and `plan` share about policies: obtaining the
 * hardware profile, running the search, printing a policy and its prediction, and
 * printing a prediction beside a measurement. */
#include <stdio.h>
#include <string.h>
#include "tools/cli_plan.h"
#include "exec/panel_copy.h"
#include "base/budget.h"
#include "base/status.h"
#include "exec/engine.h"

static void on_progress(void *user, const char *line) {
    (void)user;
    fprintf(stderr, "profile: %s\n", line);
}

tl_status cli_profile(const tl_model *m, const char *profile_path, tl_hw_profile *prof) {
    int measured = 0;
    int32_t threads = m->lm.params.n_threads;
    if (threads <= 0) threads = tl_pool_threads(m->lm.pool);
    /* a measurement made for this run keeps to what the user's --mem-budget has left
     * beside what the open model already holds (0: no budget given) */
    uint64_t limit = m->lm.params.mem_budget;
    if (limit) {
        const uint64_t used = tl_budget_used(m->lm.budget);
        limit = limit > used ? limit - used : 1;
    }
    tl_status st = tl_profile_obtain(profile_path, threads, NULL, limit, on_progress, NULL,
                                     prof, &measured);
    if (!st && measured) fprintf(stderr, "profile: measured once for this machine and saved\n");
    return st;
}

tl_status cli_use_weights_copy(tl_model *m, const char *who) {
    tl_panel_copy_info info;
    tl_status st = tl_panel_copy_use(m, NULL, &info);
    if (!st && info.created)
        fprintf(stderr, "%s: wrote a converted copy of the weights (%.1f MiB in %.1f s): %s\n",
                who, info.bytes / 1048576.0, info.seconds, info.path);
    else if (!st && info.used && info.path[0])
        fprintf(stderr, "%s: streaming the weights from the converted copy %s\n", who, info.path);
    return st;
}

void cli_print_policy(FILE *f, const char *label, const tl_plan_result *r) {
    const tl_policy *p = &r->policy;
    if (p->single)
        fprintf(f, "%s: one sequence, n_batch %d, prefetch %d%s, weights resident %.1f of "
                "%.1f MiB (streamed %.1f MiB per pass), memory %.1f of %.1f MiB\n", label,
                (int)p->prefill_rows, (int)p->prefetch, p->overlap ? "" : " (no overlap)",
                r->resident_bytes / 1048576.0,
                (r->resident_bytes + r->streamed_bytes) / 1048576.0,
                r->streamed_bytes / 1048576.0, r->mem_bytes / 1048576.0,
                r->budget_bytes / 1048576.0);
    if (p->single && p->kv_window_pages > 0)
        fprintf(f, "%*s  KV in tiers: %d-position pages, window %d pages and %d sink pages "
                "in memory, the rest on disk through a cache of %d pages; %d layer%s "
                "recompute K and V from input rows%s\n",
                (int)strlen(label), "", (int)p->page_tokens, (int)p->kv_window_pages,
                (int)p->kv_sink_pages, (int)p->kv_cache_pages, (int)p->kv_recompute,
                p->kv_recompute == 1 ? "" : "s", p->kv_select > 0 ? " (page selection)" : "");
    else if (!p->single)
        fprintf(f, "%s: gbs %d x num_gb %d, prefill rows %d, KV %d-bit %d%% in memory (page "
                "%d), prefetch %d%s, streamed %.1f MiB per pass, memory %.1f of %.1f MiB\n",
                label, (int)p->gbs, (int)p->num_gb, (int)p->prefill_rows, (int)p->kv_bits,
                (int)p->kv_mem_pct, (int)p->page_tokens, (int)p->prefetch,
                p->overlap ? "" : " (no overlap)", r->streamed_bytes / 1048576.0,
                r->mem_bytes / 1048576.0, r->budget_bytes / 1048576.0);
}

void cli_print_prediction(FILE *f, const char *label, const tl_plan_result *r,
                          const tl_workload *w) {
    const tl_cost *c = &r->cost;
    fprintf(f, "%s: prefill %.3f s, decode %.3f s, total %.3f s = %.2f generated tok/s "
            "(%d x %d tokens); bottleneck: %s\n", label, c->prefill_s, c->decode_s,
            c->total_s, c->tokens_per_s, (int)w->num_seqs, (int)w->gen_len, c->bottleneck);
    const double steps = c->decode_passes > 0 ? c->decode_passes : 1;
    if (c->decode_kv_pages_needed > 0)
        fprintf(f, "%*s  KV per decode step: %.0f disk pages used, %.0f read (%.1f MiB), "
                "cache hit rate %.3f\n", (int)strlen(label), "",
                c->decode_kv_pages_needed / steps, c->decode_kv_pages_read / steps,
                c->decode.kv_read_bytes / steps / 1048576.0,
                1 - c->decode_kv_pages_read / c->decode_kv_pages_needed);
}

static void term_line(FILE *f, const char *name, double pred, double meas, const char *unit,
                      double scale) {
    if (meas == CLI_NOT_MEASURED)
        fprintf(f, "[plan]   %-22s predicted %10.3f %-4s\n", name, pred / scale, unit);
    else
        fprintf(f, "[plan]   %-22s predicted %10.3f %-4s measured %10.3f %-4s (%+.0f%%)\n",
                name, pred / scale, unit, meas / scale, unit,
                pred > 0 ? (meas - pred) / pred * 100 : 0.0);
}

void cli_print_terms(FILE *f, const char *phase, const tl_cost_terms *pred, double pred_wall,
                     double pred_passes, const cli_measured *meas) {
    fprintf(f, "[plan] %s (predicted vs measured):\n", phase);
    term_line(f, "wall", pred_wall, meas->wall_s, "s", 1);
    term_line(f, "passes", pred_passes, meas->passes, "", 1);
    term_line(f, "compute", pred->compute_s, meas->compute_s, "s", 1);
    if (pred->repack_s > 0 || meas->repack_s > 0)
        term_line(f, "  repacking weights", pred->repack_s, meas->repack_s, "s", 1);
    term_line(f, "KV wait", pred->kv_wait_s, meas->kv_wait_s, "s", 1);
    term_line(f, "weight reads", pred->weight_read_s, CLI_NOT_MEASURED, "s", 1);
    term_line(f, "KV reads", pred->kv_read_s, CLI_NOT_MEASURED, "s", 1);
    term_line(f, "KV writes", pred->kv_write_s, CLI_NOT_MEASURED, "s", 1);
    term_line(f, "IO busy (all reads)", pred->weight_read_s + pred->kv_read_s, meas->io_busy_s,
              "s", 1);
    term_line(f, "weight bytes", pred->weight_bytes, meas->weight_bytes, "MiB", 1048576.0);
    term_line(f, "KV bytes read", pred->kv_read_bytes, meas->kv_read_bytes, "MiB", 1048576.0);
    term_line(f, "KV bytes written", pred->kv_write_bytes, meas->kv_write_bytes, "MiB",
              1048576.0);
}

/* cmd_plan.c - `tierllm plan`: the policy the planner would choose for a workload under a
 * memory budget, its predicted time term by term, and the prediction for the two naive
 * alternatives (everything resident if it fits; everything streamed, one sequence at a
 * time). Nothing is run; the model file is only opened to read its tensor directory. */
#include <stdio.h>
#include <string.h>
#include "tools/cli.h"
#include "exec/model_handle.h"
#include "tools/cli_plan.h"
#include "base/clock.h"
#include "base/status.h"

static void usage(void) {
    printf("usage: tierllm plan -m MODEL.gguf --mem-budget SIZE --prompt-len P --gen-len N "
           "--num-seqs S [options]\n"
           "  --num-seqs 1 plans the latency regime (tierllm run); more plans tierllm batch\n"
           "  --profile PATH          hardware profile (default: this machine's cached one,\n"
           "                          measured now if there is none; see tierllm profile)\n"
           "  -c, --ctx-size N        context per sequence (default prompt + generation)\n"
           "  --kv-bits 32|16|8|4     fix the KV format (default: search 32 and 16)\n"
           "  --lossy-kv              let the search use 8- and 4-bit KV too\n"
           "  --no-overlap            plan for synchronous IO\n"
           "  -t, --threads N\n");
}

static void print_layer(const char *phase, const tl_cost_terms *t) {
    printf("  %-8s per layer: compute %.3f ms, weight reads %.3f ms, KV reads %.3f ms, KV "
           "writes %.3f ms -> overlapped %.3f ms, serial %.3f ms\n", phase, t->compute_s * 1e3,
           t->weight_read_s * 1e3, t->kv_read_s * 1e3, t->kv_write_s * 1e3,
           t->overlapped_s * 1e3, t->serial_s * 1e3);
}

int tl_cmd_plan(int argc, char **argv) {
    const char *model_path = NULL, *profile_path = NULL;
    tl_model_params mp = tl_model_default_params();
    tl_plan_request rq;
    memset(&rq, 0, sizeof rq);
    rq.overlap = 1;
    int have_budget = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
#define VAL() if (!(v = cli_value(argc, argv, &i))) return 2
#define INT(flag, lo, hi, dst) else if (!strcmp(a, flag)) { VAL(); if (!cli_int(a, v, lo, hi, dst)) return 2; }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(); return 0; }
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) { VAL(); model_path = v; }
        else if (!strcmp(a, "--profile")) { VAL(); profile_path = v; }
        else if (!strcmp(a, "--mem-budget")) {
            VAL(); if (!cli_size(a, v, &mp.mem_budget)) return 2;
            have_budget = 1;
        }
        INT("--prompt-len", 1, 1 << 24, &rq.w.prompt_len) INT("--gen-len", 1, 1 << 24, &rq.w.gen_len)
        INT("--num-seqs", 1, 1 << 24, &rq.w.num_seqs) INT("-c", 2, 1 << 24, &rq.n_ctx)
        INT("--ctx-size", 2, 1 << 24, &rq.n_ctx) INT("--kv-bits", 4, 32, &rq.kv_bits)
        INT("-t", 1, 256, &mp.n_threads) INT("--threads", 1, 256, &mp.n_threads)
        else if (!strcmp(a, "--lossy-kv")) rq.allow_lossy_kv = 1;
        else if (!strcmp(a, "--no-overlap")) rq.overlap = 0;
        else {
            fprintf(stderr, "error: unknown option '%s' (see tierllm plan --help)\n", a);
            return 2;
        }
#undef INT
#undef VAL
    }
    if (!model_path || !have_budget || !rq.w.prompt_len || !rq.w.gen_len || !rq.w.num_seqs) {
        fprintf(stderr, "error: -m, --mem-budget, --prompt-len, --gen-len and --num-seqs are "
                "required (see tierllm plan --help)\n");
        return 2;
    }
    if (rq.kv_bits && rq.kv_bits != 32 && rq.kv_bits != 16 && rq.kv_bits != 8 && rq.kv_bits != 4) {
        fprintf(stderr, "error: --kv-bits must be 32, 16, 8 or 4\n");
        return 2;
    }
    rq.single = rq.w.num_seqs == 1;
    mp.overlap = rq.overlap;
    tl_model *m = NULL;
    tl_hw_profile prof;
    tl_plan_result best;
    tl_plan_ranking ranked;
    tl_status st = tl_model_open(model_path, &mp, &m);
    if (!st) st = cli_profile(m, profile_path, &prof);
    double t0 = tl_now();
    if (!st) st = tl_plan_search_ranked(m, &prof, &rq, &best, &ranked);
    double search_s = tl_now() - t0;
    if (st) {
        int rc = cli_fail(st);
        tl_model_close(m);
        return rc;
    }
    printf("workload: %d sequence%s, prompt %d, generate %d | budget %.1f MiB | profile: %s "
           "(disk read %.2f GB/s at 1 MiB x 8)\n", (int)rq.w.num_seqs, rq.w.num_seqs > 1 ? "s" : "",
           (int)rq.w.prompt_len, (int)rq.w.gen_len, tl_budget_limit(m->lm.budget) / 1048576.0,
           profile_path ? profile_path : "this machine's",
           tl_profile_read_bps(&prof, 1 << 20, 8) / 1e9);
    printf("search: %d combinations, %d LP solves, %d feasible candidates after the dry run, "
           "%.2f s\n", (int)best.combinations, (int)best.lp_solves, (int)best.feasible, search_s);
    cli_print_policy(stdout, "chosen", &best);
    cli_print_prediction(stdout, "predicted", &best, &rq.w);
    if (best.robust_pick)
        printf("  a near tie: the fastest prediction (%.3f s) is within the cost model's error "
               "spread (%.0f%%) of this one, whose worst case with the disk or the compute %.0f%% "
               "slower is %.3f s against that one's %.3f s: chosen as the safer\n",
               best.nominal_s, 100 * TL_PLAN_ERROR_SPREAD, 100 * TL_PLAN_ERROR_SPREAD,
               best.robust_worst_s, best.nominal_worst_s);
    print_layer("prefill", &best.cost.prefill_layer);
    print_layer("decode", &best.cost.decode_layer);
    if (best.policy.kv_window_pages > 0)
        printf("  KV tiers searched directly: %d candidate cache sizes and batch sizes\n",
               (int)best.combinations);
    else
        printf("  LP: resident weights %.0f%%, KV in memory %.0f%%, LP optimum %.3f s\n",
               best.lp_xw * 100, best.lp_xk * 100, best.lp_objective);

    /* the search's next best, then the naive alternatives */
    for (int i = 0, k = 0; i < ranked.n; i++)
        if (i != ranked.chosen) {
            char label[32];
            if (i == 0) snprintf(label, sizeof label, "fastest predicted (passed over)");
            else snprintf(label, sizeof label, "runner-up %d", ++k);
            cli_print_policy(stdout, label, &ranked.cand[i]);
            cli_print_prediction(stdout, "  predicted", &ranked.cand[i], &rq.w);
        }

    tl_policy dflt = tl_plan_default_policy(m, &rq);
    tl_plan_result alt;
    if (tl_plan_evaluate(m, &prof, &rq.w, &dflt, &alt) == TL_OK && alt.streamed_bytes == 0) {
        cli_print_policy(stdout, "all resident", &alt);
        cli_print_prediction(stdout, "  predicted", &alt, &rq.w);
    } else {
        printf("all resident: does not fit (the weights are %.1f MiB, beside the KV cache "
               "in memory, of a %.1f MiB budget)\n", m->lm.weight_bytes / 1048576.0,
               tl_budget_limit(m->lm.budget) / 1048576.0);
    }
    tl_policy streamed = dflt;
    streamed.gbs = streamed.num_gb = 1;
    streamed.w_mem_pct = 0;
    streamed.kv_mem_pct = 100;
    if (tl_plan_evaluate(m, &prof, &rq.w, &streamed, &alt) == TL_OK) {
        cli_print_policy(stdout, "all streamed, batch 1", &alt);
        cli_print_prediction(stdout, "  predicted", &alt, &rq.w);
        printf("chosen vs all streamed: %.2fx throughput\n",
               alt.cost.total_s > 0 ? alt.cost.total_s / best.cost.total_s : 0.0);
    } else {
        printf("all streamed, batch 1: does not fit (%s)\n", tl_last_error());
    }
    tl_model_close(m);
    return 0;
}

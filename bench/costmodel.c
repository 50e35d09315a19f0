/* costmodel.c (bench_costmodel) - how well the planner predicts, and how good its choice is.
 *
 * Two synthetic model sizes (TinyLlama-1.1B Q8_0, Llama-2-7B Q4_0; written once into
 * --dir), both regimes (latency: one sequence through tl_generate; throughput: blocks
 * of many sequences through tl_batch_generate), a sweep of hand-picked policies plus the
 * planner's own choice (auto) in each group. For every policy: the cost model's
 * prediction (the same call `tierllm plan` makes) beside the measured prefill + decode
 * time. The hardware profile is measured at the start of the same run, on --dir's disk
 * (or loaded with --profile).
 * Reports: median and worst absolute prediction error (targets 10% and 25%), and per
 * group the auto policy's measured throughput against the best measured in the group
 * (target 95%).
 * --replan: the re-planning experiment. Model 1, throughput regime, many prompts: a run
 * planned with the right profile, one planned with a profile whose disk bandwidth is
 * doubled and allowed to re-plan between blocks, and the same without re-planning.
 * --case N runs only case N (0-based, in the table's order) and prints its phases.
 * --heldout N --seed S: N configurations drawn at random instead of the table (heldout.c);
 * --decide CAP_S adds the decision half for those whose planned run took <= CAP_S (decide.c);
 * with --case N only configuration N of the draw runs.
 * Usage: bench_costmodel [--dir DIR] [--profile PATH] [--quick] [--replan] [--only-replan]
 *                        [--case N] [--heldout N --seed S [--keep] [--decide CAP_S] [--list]]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "tierllm.h"
#include "heldout.h"
#include "plan_case.h"
#include "prompt.h"
#include "base/clock.h"
#include "base/stats.h"
#include "exec/engine.h"
#include "plan/calibrate.h"
#include "plan/replan.h"

typedef struct model_spec { const char *preset, *file; int32_t type; } model_spec;
static const model_spec models[2] = {{"tinyllama-1.1b", "tinyllama-1.1b-q8_0.gguf", 8},
                                     {"llama2-7b", "llama2-7b-q4_0.gguf", 2}};

typedef struct table_case {
    int model;             /* index into models */
    bench_case c;          /* its path filled in when run */
} table_case;

/* group = (model, budget, regime, workload); each group ends with its auto case */
static const table_case cases[] = {
    /* TinyLlama Q8_0 (1.1 GiB), 400 MiB: latency */
    {0, {NULL, 400, 1, 32, 16, 1, 0, 1, 1, 32, 100, 2, 1, 64, NULL, 0}},
    {0, {NULL, 400, 1, 32, 16, 1, 0, 1, 1, 32, 100, 1, 0, 64, NULL, 0}},
    {0, {NULL, 400, 1, 32, 16, 1, 0, 1, 1, 32, 100, 4, 1, 16, NULL, 0}},
    {0, {NULL, 400, 1, 32, 16, 1, 1, 0, 0, 0, 0, 0, 0, 0, NULL, 0}},
    /* TinyLlama Q8_0, 600 MiB: throughput, 32 x (32 + 16) */
    {0, {NULL, 600, 0, 32, 16, 32, 0, 8, 4, 32, 100, 1, 1, 512, NULL, 0}},
    {0, {NULL, 600, 0, 32, 16, 32, 0, 4, 2, 32, 100, 2, 1, 512, NULL, 0}},
    {0, {NULL, 600, 0, 32, 16, 32, 0, 16, 2, 16, 100, 1, 1, 512, NULL, 0}},
    {0, {NULL, 600, 0, 32, 16, 32, 0, 32, 1, 32, 50, 1, 1, 512, NULL, 0}},
    {0, {NULL, 600, 0, 32, 16, 32, 0, 8, 4, 32, 100, 1, 0, 512, NULL, 0}},
    {0, {NULL, 600, 0, 32, 16, 32, 1, 0, 0, 0, 0, 0, 0, 0, NULL, 0}},
    /* Llama-2-7B Q4_0 (3.6 GiB), 2 GiB: latency */
    {1, {NULL, 2048, 1, 16, 6, 1, 0, 1, 1, 32, 100, 2, 1, 64, NULL, 0}},
    {1, {NULL, 2048, 1, 16, 6, 1, 0, 1, 1, 32, 100, 1, 0, 64, NULL, 0}},
    {1, {NULL, 2048, 1, 16, 6, 1, 1, 0, 0, 0, 0, 0, 0, 0, NULL, 0}},
    /* Llama-2-7B Q4_0, 2 GiB: throughput, 16 x (16 + 6) */
    {1, {NULL, 2048, 0, 16, 6, 16, 0, 4, 2, 32, 100, 1, 1, 512, NULL, 0}},
    {1, {NULL, 2048, 0, 16, 6, 16, 0, 16, 1, 16, 100, 1, 1, 512, NULL, 0}},
    {1, {NULL, 2048, 0, 16, 6, 16, 1, 0, 0, 0, 0, 0, 0, 0, NULL, 0}},
};
#define N_CASES ((int)(sizeof cases / sizeof cases[0]))

static char g_dir[512] = "/tmp/tierllm-bench";

static const char *model_path(int i, char *buf, size_t cap) {
    snprintf(buf, cap, "%s/%s", g_dir, models[i].file);
    struct stat sb;
    if (stat(buf, &sb) == 0) return buf;
    tl_synth_params sp;
    tl_synth_preset(models[i].preset, &sp);
    sp.weight_type = models[i].type;
    fprintf(stderr, "writing %s (%.2f GiB)...\n", buf, tl_synth_file_bytes(&sp) / 1073741824.0);
    if (tl_synth_write(&sp, buf)) {
        fprintf(stderr, "error: %s\n", tl_last_error());
        return NULL;
    }
    return buf;
}

static void replan_experiment(const tl_hw_profile *prof_in) {
    /* throughput regime, 128 prompts: several blocks, so a re-plan has room to pay off */
    char path[640];
    if (!model_path(0, path, sizeof path)) return;
    bench_case c = {path, 600, 0, 32, 16, 128, 1, 0, 0, 0, 0, 0, 0, 0, NULL, 0};
    /* the right profile: disk figures checked against the model file, now */
    tl_hw_profile right_prof = *prof_in;
    const tl_hw_profile *prof = &right_prof;
    tl_model *m;
    tl_model_params mp = tl_model_default_params();
    double bps, ratio;
    mp.mem_budget = c.budget_mib << 20;
    if (tl_model_open(path, &mp, &m)) return;
    tl_plan_request rq;
    memset(&rq, 0, sizeof rq);
    rq.w = (tl_workload){.prompt_len = c.prompt, .gen_len = c.gen, .num_seqs = c.seqs};
    rq.overlap = 1;
    tl_plan_result pr;
    tl_batch_params bp = tl_batch_default_params();
    tl_status cst = tl_plan_search(m, prof_in, &rq, &pr);
    if (!cst) {
        tl_plan_apply(&pr.policy, m, &bp);
        cst = tl_engine_place(m, tl_batch_budget_bytes(m, &bp));
    }
    if (!cst) cst = tl_plan_calibrate_disk(m, &right_prof, &bps, &ratio);
    tl_model_close(m);
    if (cst) return;
    printf("  the model file streams at %.2f GB/s (profile x %.2f)\n", bps / 1e9, ratio);
    tl_hw_profile wrong = *prof;
    for (int i = 0; i < TL_PROF_N_CHUNK; i++)
        for (int j = 0; j < TL_PROF_N_DEPTH; j++) wrong.disk_read_bps[i][j] *= 2;
    printf("\nre-planning: TinyLlama Q8_0, 600 MiB, 128 prompts x (32 + 16), auto policy\n");
    outcome right = run_case(&c, prof, 1, 1);
    printf("  right profile, re-planning on:  ");
    print_policy(&right.plan.policy);
    printf(" | %.2f tok/s, %d policy changes\n", right.measured_tps, (int)right.replans);
    outcome fixed = run_case(&c, &wrong, 0, 0);
    printf("  disk x2 profile, no re-planning: ");
    print_policy(&fixed.plan.policy);
    printf(" | %.2f tok/s\n", fixed.measured_tps);
    outcome re = run_case(&c, &wrong, 1, 0);
    printf("  disk x2 profile, re-planning on: ");
    print_policy(&re.plan.policy);
    printf(" (first) | %.2f tok/s, %d policy changes\n", re.measured_tps, (int)re.replans);
    if (right.ok && re.ok)
        printf("  wrong profile + re-planning reaches %.1f%% of the right profile's throughput "
               "(target >= 90%%); without re-planning %.1f%%\n",
               100 * re.measured_tps / right.measured_tps,
               fixed.ok ? 100 * fixed.measured_tps / right.measured_tps : 0.0);
}

int main(int argc, char **argv) {
    const char *profile_path = NULL;
    int quick = 0, replan = 0, only_replan = 0, only_case = -1, heldout = 0, keep = 0, list = 0;
    double decide_cap = 0;
    uint64_t seed = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--dir") && i + 1 < argc) snprintf(g_dir, sizeof g_dir, "%s", argv[++i]);
        else if (!strcmp(argv[i], "--profile") && i + 1 < argc) profile_path = argv[++i];
        else if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--replan")) replan = 1;
        else if (!strcmp(argv[i], "--only-replan")) replan = only_replan = 1;
        else if (!strcmp(argv[i], "--case") && i + 1 < argc) only_case = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--heldout") && i + 1 < argc) heldout = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--keep")) keep = 1;
        else if (!strcmp(argv[i], "--list")) list = 1;
        else if (!strcmp(argv[i], "--decide") && i + 1 < argc) decide_cap = atof(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_costmodel [--dir DIR] [--profile PATH] [--quick] "
                    "[--replan] [--only-replan] [--case N]\n"
                    "       [--heldout N --seed S [--keep] [--decide CAP_S] [--list]]\n");
            return 2;
        }
    }
    if (list && !(heldout && seed)) {
        fprintf(stderr, "error: --list prints a held-out draw: give --heldout N --seed S\n");
        return 2;
    }
    if (list) return heldout_run(heldout, seed, g_dir, NULL, 0, 0, only_case, 1);
    mkdir(g_dir, 0755);
    tl_hw_profile prof;
    double t0 = tl_now();
    tl_status st = profile_path ? tl_profile_load(profile_path, &prof)
                                : tl_profile_measure(2, g_dir, 0, NULL, NULL, &prof);
    if (st) {
        fprintf(stderr, "error: profile: %s\n", tl_last_error());
        return 1;
    }
    printf("profile (%s, %.0f s): memory %.1f GB/s, disk read %.2f GB/s (1 MiB x 8), write "
           "%.2f GB/s, Q8_0 matvec %.1f GMAC/s, Q4_0 %.1f GMAC/s\n",
           profile_path ? "loaded" : "measured now", tl_now() - t0, prof.mem_read_bps / 1e9,
           tl_profile_read_bps(&prof, 1 << 20, 8) / 1e9, prof.disk_write_bps / 1e9,
           tl_profile_matmul_macs(&prof, 8, 1) / 1e9, tl_profile_matmul_macs(&prof, 2, 1) / 1e9);
    if (heldout) {
        if (!seed) {
            fprintf(stderr, "error: --heldout needs --seed S (a new one each evaluation; never "
                    "tune on the seed you report)\n");
            return 2;
        }
        return heldout_run(heldout, seed, g_dir, &prof, keep, decide_cap, only_case, 0);
    }
    if (!only_replan) {
        double err[N_CASES];
        int n_err = 0;
        printf("\n%-5s %-7s %-9s %-44s %9s %9s %7s %9s  %s\n", "model", "budget", "regime",
               "policy", "pred s", "meas s", "error", "meas t/s", "bottleneck");
        double best_tps = 0, group_best = 0;
        int group_start = 0;
        for (int i = 0; i < N_CASES; i++) {
            if ((quick && cases[i].model == 1) || (only_case >= 0 && i != only_case)) continue;
            char path[640];
            if (!model_path(cases[i].model, path, sizeof path)) continue;
            bench_case cc = cases[i].c;
            cc.path = path;
            const bench_case *c = &cc;
            outcome o = run_case(c, &prof, 0, 1);
            if (!o.ok) continue;
            double e = (o.measured_s - o.plan.cost.total_s) / o.measured_s;
            err[n_err++] = fabs(e);
            printf("%-5s %5dM  %-9s %s", cases[i].model ? "7B" : "1.1B", (int)c->budget_mib,
                   c->single ? "latency" : "through", c->automatic ? "AUTO " : "     ");
            print_policy(&o.plan.policy);
            printf("  %9.2f %9.2f %+6.1f%% %9.2f  %s (disk %.2f GB/s)\n", o.plan.cost.total_s,
                   o.measured_s, 100 * e, o.measured_tps, o.plan.cost.bottleneck, o.disk_bps / 1e9);
            if (only_case >= 0) { /* one case: its phases in detail */
                const tl_cost *pc = &o.plan.cost;
                printf("      prefill: predicted %.2f s (compute %.2f, KV wait %.2f, IO %.2f), "
                       "measured %.2f s (stall %.2f, of which KV wait %.2f)\n",
                       pc->prefill_s, pc->prefill.compute_s, pc->prefill.kv_wait_s,
                       pc->prefill.weight_read_s + pc->prefill.kv_read_s + pc->prefill.kv_write_s,
                       o.pre_s, o.pre_stall_s, o.pre_kv_wait_s);
                printf("      decode:  predicted %.2f s (compute %.2f, KV wait %.2f, IO %.2f), "
                       "measured %.2f s (stall %.2f, of which KV wait %.2f)\n",
                       pc->decode_s, pc->decode.compute_s, pc->decode.kv_wait_s,
                       pc->decode.weight_read_s + pc->decode.kv_read_s + pc->decode.kv_write_s,
                       o.dec_s, o.dec_stall_s, o.dec_kv_wait_s);
            }
            fflush(stdout);
            if (i == group_start) group_best = 0;
            if (!c->automatic && o.measured_tps > group_best) group_best = o.measured_tps;
            if (c->automatic) {
                best_tps = group_best > o.measured_tps ? group_best : o.measured_tps;
                printf("      auto: %.2f tok/s measured vs best measured in its group %.2f "
                       "(%.1f%%, target >= 95%%)\n", o.measured_tps, best_tps,
                       100 * o.measured_tps / best_tps);
                group_start = i + 1;
            }
        }
        if (n_err > 0) {
            const double med = tl_median(err, (size_t)n_err); /* sorts err */
            printf("\nprediction error over %d policies: median %.1f%% (target <= 10%%), worst "
                   "%.1f%% (target <= 25%%)\n", n_err, 100 * med, 100 * err[n_err - 1]);
        }
    }
    if (replan) replan_experiment(&prof);
    return 0;
}

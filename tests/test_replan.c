/* test_replan.c - changing the policy between blocks of a batch run.
 *
 * 1. The machinery: a hook that switches to a different policy (block shape, KV format
 *    and placement, weight placement, prefetch) before every block gives exactly the
 *    tokens of a run that never switches, stays within the memory budget, and counts
 *    its switches.
 * 2. The replanner: with a profile whose disk is a thousand times slower than the real
 *    one, the model's own streaming timed before the first block, or else the first
 *    block's measured read time, is far below the prediction; the replanner says so,
 *    corrects its profile and re-plans; the run still completes with the same tokens.
 */
#include <stdlib.h>
#include <string.h>
#include "tierllm.h"
#include "exec/engine.h"
#include "plan/replan.h"
#include "testutil.h"

#define N_PROMPTS 13
#define N_GEN 10

static const char *prompts[N_PROMPTS] = {
    "Once upon a time", "The little dog", "Lily and Ben went to the park",
    "One day, a big bird", "Tom had a red ball.", "The sun was hot and the",
    "Sam liked to", "There was a cat named Tim. Tim", "Mom said,", "A girl",
    "The boat was on the water", "Max and his mom", "It was a rainy day"};

typedef struct collect { int32_t tokens[N_PROMPTS][N_GEN]; int32_t n[N_PROMPTS]; } collect;

static int on_result(void *user, const tl_batch_result *r) {
    collect *c = user;
    c->n[r->index] = r->n_tokens;
    for (int32_t i = 0; i < r->n_tokens && i < N_GEN; i++) c->tokens[r->index][i] = r->tokens[i];
    return 0;
}

typedef struct switcher { int calls; } switcher;

/* Before every block: the next of a list of quite different policies. */
static int switch_hook(void *user, tl_model *m, const tl_batch_stats *s, int32_t left,
                       tl_batch_params *bp) {
    (void)s;
    (void)left;
    switcher *sw = user;
    /* KV stays exact (32 bits): a lossy format would change the tokens by itself */
    static const int shape[][7] = {/* gbs, num_gb, kv_bits, kv_mem, w_mem, prefetch, rows */
                                   {1, 3, 32, 0, 0, 1, 1},
                                   {3, 1, 32, 50, 100, 3, 512},
                                   {2, 2, 32, 100, 30, 2, 4},
                                   {4, 1, 32, 25, 60, 1, 8}};
    const int *p = shape[sw->calls++ % 4];
    bp->gbs = p[0];
    bp->num_gb = p[1];
    bp->kv_bits = p[2];
    bp->kv_mem_pct = p[3];
    m->lm.params.w_mem_pct = p[4];
    m->lm.params.prefetch = p[5];
    bp->prefill_rows = p[6];
    return 1;
}

static tl_batch_params base_params(void) {
    tl_batch_params bp = tl_batch_default_params();
    bp.gbs = 2;
    bp.num_gb = 2;
    bp.n_ctx = 64;
    bp.page_tokens = 4;
    bp.spill_dir = ".";
    return bp;
}

static tl_generate_params greedy(void) {
    tl_generate_params gp = tl_generate_default_params();
    gp.sampler.temperature = 0;
    gp.n_predict = N_GEN;
    gp.stop_at_eos = 0;
    return gp;
}

static void machinery(const char *path, const collect *ref) {
    tl_model_params mp = tl_model_default_params();
    mp.mem_budget = 8u << 20; /* w_mem below 100 makes some layers stream */
    tl_model *m;
    CHECK(tl_model_open(path, &mp, &m) == TL_OK);
    if (!m) return;
    tl_batch_params bp = base_params();
    tl_generate_params gp = greedy();
    collect got;
    memset(&got, 0, sizeof got);
    switcher sw = {0};
    tl_batch_stats bs;
    tl_batch_run run = {switch_hook, &sw, NULL, NULL};
    tl_status st = tl_batch_generate_ex(m, &bp, &gp, prompts, NULL, N_PROMPTS, on_result, NULL,
                                        &got, &run, &bs);
    CHECK_MSG(st == TL_OK, "%s", tl_last_error());
    CHECK(bs.replans == sw.calls && sw.calls >= 3);
    CHECK(bs.generated_tokens == N_PROMPTS * N_GEN);
    CHECK(bs.weight_bytes_read > 0 && bs.ssd_bytes_written > 0);
    CHECK(tl_budget_peak(m->lm.budget) <= tl_budget_limit(m->lm.budget));
    for (int p = 0; p < N_PROMPTS; p++)
        CHECK_MSG(got.n[p] == N_GEN && !memcmp(got.tokens[p], ref->tokens[p], sizeof got.tokens[p]),
                  "prompt %d differs after policy switches", p);
    tl_model_close(m);
}

/* before_first: the replanner calibrates on the model before the first block; else that
 * step is skipped and the correction must come from a finished block's measured reads. */
static void replanner(const char *path, const collect *ref, int before_first) {
    tl_model_params mp = tl_model_default_params();
    mp.mem_budget = 3u << 20;
    tl_model *m;
    CHECK(tl_model_open(path, &mp, &m) == TL_OK);
    if (!m) return;
    /* a profile of round numbers with a very slow disk: 1 MB/s */
    tl_hw_profile prof;
    memset(&prof, 0, sizeof prof);
    prof.n_threads = 1;
    for (int c = 0; c < TL_PROF_N_CHUNK; c++)
        for (int d = 0; d < TL_PROF_N_DEPTH; d++) prof.disk_read_bps[c][d] = 1e6;
    prof.disk_write_bps = 1e6;
    for (int t = 0; t < TL_PROF_N_TYPE; t++)
        for (int n = 0; n < TL_PROF_N_ROWS; n++) prof.matmul_macs[t][n] = 1e9;
    prof.attn_s_per_mac = 1e-9;
    prof.attn_block_s_per_mac = 1e-9;
    prof.elementwise_s = 1e-9;
    prof.layer_fixed_s = 1e-6;
    prof.io_compute_slowdown = 1;
    prof.io_slowdown_matvec = 1;
    tl_plan_request rq;
    memset(&rq, 0, sizeof rq);
    rq.w = (tl_workload){.prompt_len = 8, .gen_len = N_GEN, .num_seqs = N_PROMPTS};
    rq.n_ctx = 64;
    rq.overlap = 1;
    rq.kv_bits = 32;
    tl_plan_result chosen;
    tl_status st = tl_plan_search(m, &prof, &rq, &chosen);
    CHECK_MSG(st == TL_OK, "%s", tl_last_error());
    if (st) {
        tl_model_close(m);
        return;
    }
    /* a small block, so there are blocks left to re-plan */
    chosen.policy.gbs = 2;
    chosen.policy.num_gb = 1;
    chosen.policy.w_mem_pct = 0; /* every layer streams: there are reads to measure */
    tl_batch_params bp = base_params();
    tl_plan_apply(&chosen.policy, m, &bp);
    tl_replanner rp;
    tl_replanner_init(&rp, m, &prof, &rq, &chosen);
    rp.no_calibration = !before_first;
    collect got;
    memset(&got, 0, sizeof got);
    tl_generate_params gp = greedy();
    tl_batch_stats bs;
    tl_batch_run run = {tl_replanner_hook, &rp, NULL, NULL};
    st = tl_batch_generate_ex(m, &bp, &gp, prompts, NULL, N_PROMPTS, on_result, NULL, &got, &run,
                              &bs);
    CHECK_MSG(st == TL_OK, "%s", tl_last_error());
    for (int i = 0; i < rp.n_log; i++) fprintf(stderr, "replan: %s\n", rp.log[i]);
    /* without the calibration, a finished block's reads corrected the profile (with it,
     * the passes and products timed before the first block may have done so already) */
    if (!before_first)
        CHECK_MSG(rp.checks >= 1 && rp.n_log >= 1 && !strncmp(rp.log[0], "after block", 11),
                  "first re-plan: %s", rp.n_log ? rp.log[0] : "none");
    /* a re-plan before the first block prices the run that follows: the kept policy's or
     * the new one's (the CLI's --stats compares the run with it) */
    const char *first_replan = NULL;
    for (int i = 0; i < rp.n_log && !first_replan; i++)
        if (!strncmp(rp.log[i], "before the first block: disk", 28)) first_replan = rp.log[i];
    if (before_first) { /* the profile's disk of 1 MB/s is far off: it always re-plans */
        CHECK_MSG(first_replan != NULL, "no re-plan before the first block");
        CHECK(rp.has_calibrated);
        CHECK(rp.first_switch == (first_replan && strstr(first_replan, "new policy") != NULL));
        if (first_replan && strstr(first_replan, "new policy"))
            CHECK_MSG(rp.first_switch && rp.calibrated.total_s == rp.first.cost.total_s &&
                          rp.first.policy.gbs > 0,
                      "first switch %d, calibrated %.6g s, new policy's %.6g s",
                      (int)rp.first_switch, rp.calibrated.total_s, rp.first.cost.total_s);
    }
    CHECK_MSG(rp.replans >= 1, "replans %d", (int)rp.replans);
    CHECK(rp.n_log >= 1);
    /* the corrected profile's disk is faster than the wrong one: from a finished block's
     * reads, or from the passes timed before the first block, which with this small model
     * also timed its products (plan/calibrate.c) and rescaled every type's 1-row rate */
    CHECK(rp.prof.disk_read_bps[2][1] > 1e6 * 1.2);
    if (before_first) CHECK(rp.prof.matmul_macs[0][0] != 1e9);
    CHECK(bs.replans == rp.switches);
    for (int p = 0; p < N_PROMPTS; p++)
        CHECK_MSG(got.n[p] == N_GEN && !memcmp(got.tokens[p], ref->tokens[p], sizeof got.tokens[p]),
                  "prompt %d differs after re-planning", p);
    tl_model_close(m);
}

int main(void) {
    const char *path = tl_test_model("stories260K.gguf");
    /* the reference: one run, default policy, everything resident, no switches */
    tl_model *m;
    CHECK(tl_model_open(path, NULL, &m) == TL_OK);
    if (!m) return tl_test_finish("test_replan");
    tl_batch_params bp = base_params();
    tl_generate_params gp = greedy();
    collect ref;
    memset(&ref, 0, sizeof ref);
    CHECK(tl_batch_generate(m, &bp, &gp, prompts, NULL, N_PROMPTS, on_result, NULL, &ref, NULL) == TL_OK);
    tl_model_close(m);
    machinery(path, &ref);
    replanner(path, &ref, 1);
    replanner(path, &ref, 0);
    return tl_test_finish("test_replan");
}

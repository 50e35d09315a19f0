/* test_serve_plan.c - the serving planner (plan/serve_plan.h) on a synthetic model and
 * profiles of round numbers.
 *
 * 1. Budgets are kept: the plan's dry run fits, and the scheduler opened with its
 *    parameters places exactly the weights the plan streamed, within the budget; also
 *    after the calibrated search, which times the model's own streaming and products.
 * 2. The chunk table is what serve_plan.h says: for every load g, c(g) keeps the step
 *    within max(itl budget, 1.1 x the decode step) and one more row would not (or it is
 *    c_max, or 1).
 * 3. Re-plan by load, IO against compute: with a disk so slow that steps wait on weights,
 *    8 prompt rows beside one generating row cost its step under 10% (with a fast disk,
 *    over 2x), and the table gives at least as many rows at every load, more at one.
 * 4. Re-plan by measurement: steps measured 3x slower than predicted (computing) correct
 *    the compute figures, and 2x slower while stalled on weights correct the disk's; the
 *    prediction follows, and steps measured as predicted change nothing.
 * 5. Knobs the user fixed are kept; lossy KV only when allowed; a budget too small and a
 *    request longer than the context are clear errors.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "tierllm.h"
#include "exec/engine.h"
#include "exec/residency.h"
#include "plan/serve_plan.h"
#include "testutil.h"

static void round_profile(tl_hw_profile *p, double disk_bps) {
    tl_test_round_profile(p);
    tl_test_profile_set_disk(p, disk_bps);
    for (int k = 0; k < TL_PROF_N_KVBITS; k++) p->attn_decode_s[k] = 1e-9;
}

static char g_path[256], g_deep[256]; /* 4 layers; 16 narrower ones (KV tiers) */

static tl_model *open_path(const char *path, uint64_t budget) {
    tl_model_params mp = tl_model_default_params();
    mp.n_threads = 1;
    mp.mem_budget = budget;
    tl_model *m = NULL;
    tl_status st = tl_model_open(path, &mp, &m);
    CHECK_MSG(st == TL_OK, "open: %s", tl_last_error());
    return st ? NULL : m;
}

static tl_model *open_model(uint64_t budget) { return open_path(g_path, budget); }

/* A budget that holds the scheduler of S slots, chunk c and 32-bit KV, and 3 MiB of the
 * model's 3.6 MiB of weights: some layers stream. */
static uint64_t streaming_budget(int32_t S, int32_t c) {
    tl_model *m = open_model(512u << 20);
    if (!m) return 0;
    tl_sched_params q = tl_sched_default_params();
    q.max_seqs = S;
    q.prefill_chunk = c;
    q.n_ctx = 256;
    q.kv_bits = 32;
    const uint64_t b = tl_engine_base_used(m) + tl_sched_budget_bytes(m, &q) + (3u << 20);
    tl_model_close(m);
    return b;
}

static tl_serve_request request(void) {
    tl_serve_request rq;
    memset(&rq, 0, sizeof rq);
    rq.prompt_len = 96;
    rq.gen_len = 32;
    rq.n_ctx = 256;
    rq.kv_window = -1; /* KV all in memory; tiers() searches them */
    return rq;
}

/* ---- 1. budgets ---- */

/* The scheduler opened with the plan's parameters places exactly the weights the plan
 * streamed, within the budget. */
static void opens_as_planned(tl_model *m, const tl_serve_plan *plan, uint64_t budget,
                             const char *what) {
    tl_sched *sc;
    tl_status st = tl_sched_open(m, &plan->sched, &sc);
    CHECK_MSG(st == TL_OK, "%s: open: %s", what, tl_last_error());
    if (st) return;
    const tl_weight_plan *wp = tl_residency_plan(m->res);
    CHECK_MSG(wp->streamed_bytes == plan->streamed_bytes, "%s: streams %llu, planned %llu", what,
              (unsigned long long)wp->streamed_bytes, (unsigned long long)plan->streamed_bytes);
    CHECK(tl_budget_used(m->lm.budget) <= budget && plan->mem_bytes <= budget);
    tl_sched_close(sc);
}

static void fits_and_places(uint64_t budget, double disk_bps) {
    tl_model *m = open_model(budget);
    if (!m) return;
    tl_hw_profile prof;
    round_profile(&prof, disk_bps);
    tl_serve_request rq = request();
    tl_serve_plan plan;
    tl_status st = tl_serve_plan_search(m, &prof, &rq, &plan);
    CHECK_MSG(st == TL_OK, "budget %llu: %s", (unsigned long long)budget, tl_last_error());
    if (!st) {
        CHECK_MSG(plan.mem_bytes <= budget, "plan holds %llu of %llu",
                  (unsigned long long)plan.mem_bytes, (unsigned long long)budget);
        CHECK(plan.feasible > 0 && plan.feasible <= plan.candidates);
        CHECK(plan.tokens_per_s > 0 && plan.itl_s >= plan.step_s * 0.999);
        opens_as_planned(m, &plan, budget, "the plan");
    }
    tl_model_close(m);
}

/* The search with calibration on the real model file: whatever it leaves placed, the
 * scheduler opened with its parameters fits the budget and streams what it planned. */
static void calibrated(uint64_t budget) {
    tl_model *m = open_model(budget);
    if (!m) return;
    tl_hw_profile prof;
    round_profile(&prof, 1e9);
    tl_serve_request rq = request();
    tl_serve_plan plan;
    double dr = 0, cr = 0;
    tl_status st = tl_serve_plan_calibrated(m, &prof, &rq, &plan, &dr, &cr);
    CHECK_MSG(st == TL_OK, "calibrated: %s", tl_last_error());
    CHECK(dr > 0 && cr > 0);
    if (!st) opens_as_planned(m, &plan, budget, "after calibration");
    tl_model_close(m);
}

/* ---- 2. the table's invariant ---- */

static void check_table(const tl_serve_replanner *r, const char *what) {
    const tl_serve_plan *p = &r->plan;
    int bad = 0;
    for (int32_t g = 1; g <= p->sched.max_seqs; g++) {
        const int32_t c = p->chunk_by_gen[g];
        const double t0 = tl_serve_replanner_step_s(r, g, 0);
        const double limit = fmax(p->itl_max_s, 1.1 * t0) * (1 + 1e-9);
        bad += c < 1 || c > p->sched.prefill_chunk;
        if (c > 1) bad += tl_serve_replanner_step_s(r, g, c) > limit;
        if (c < p->sched.prefill_chunk) bad += tl_serve_replanner_step_s(r, g, c + 1) <= limit;
    }
    CHECK_MSG(bad == 0, "%s: %d table entries break the rule", what, bad);
}

static int plan_with(tl_model *m, const tl_hw_profile *prof, const tl_serve_request *rq,
                     tl_serve_replanner *r) {
    tl_serve_plan plan;
    tl_status st = tl_serve_plan_search(m, prof, rq, &plan);
    CHECK_MSG(st == TL_OK, "%s", tl_last_error());
    if (st) return 0;
    st = tl_serve_replanner_init(r, m, prof, &plan);
    CHECK_MSG(st == TL_OK, "%s", tl_last_error());
    return st == TL_OK;
}

/* ---- 3. IO-bound against compute-bound ---- */

static void io_against_compute(void) {
    tl_model *m = open_model(streaming_budget(8, 512));
    if (!m) return;
    tl_hw_profile slow, fast;
    round_profile(&slow, 1e6);
    round_profile(&fast, 1e12);
    tl_serve_request rq = request();
    rq.max_seqs = 8;     /* the same slots and buffers: only the disk differs */
    rq.max_chunk = 512;
    rq.kv_bits = 32;
    tl_serve_replanner a, b;
    if (plan_with(m, &slow, &rq, &a) && plan_with(m, &fast, &rq, &b)) {
        CHECK_MSG(a.wplan.streamed_bytes > 0, "the budget should make weights stream");
        check_table(&a, "slow disk");
        check_table(&b, "fast disk");
        for (int32_t g = 1; g <= 8; g++)
            CHECK_MSG(a.plan.chunk_by_gen[g] >= b.plan.chunk_by_gen[g],
                      "g %d: slow disk %d rows, fast %d", g, a.plan.chunk_by_gen[g],
                      b.plan.chunk_by_gen[g]);
        CHECK_MSG(a.plan.chunk_by_gen[1] > b.plan.chunk_by_gen[1],
                  "one generating: slow disk %d rows, fast %d", a.plan.chunk_by_gen[1],
                  b.plan.chunk_by_gen[1]);
        /* why: with the slow disk 8 prompt rows cost the one generating row's step little,
         * with the fast one they multiply it */
        const double sa = tl_serve_replanner_step_s(&a, 1, 8) / tl_serve_replanner_step_s(&a, 1, 0);
        const double sb = tl_serve_replanner_step_s(&b, 1, 8) / tl_serve_replanner_step_s(&b, 1, 0);
        CHECK_MSG(sa < 1.1 && sb > 2, "8 prompt rows beside 1: x%.2f (slow disk), x%.2f (fast)",
                  sa, sb);
        tl_serve_replanner_free(&a);
        tl_serve_replanner_free(&b);
    }
    /* no latency budget to speak of: the table is the free rows alone */
    rq.max_itl_s = 1e-9;
    if (plan_with(m, &slow, &rq, &a) && plan_with(m, &fast, &rq, &b)) {
        check_table(&a, "slow disk, free rows only");
        check_table(&b, "fast disk, free rows only");
        CHECK_MSG(a.plan.chunk_by_gen[1] >= 8 && b.plan.chunk_by_gen[1] == 1,
                  "free rows beside one generating: %d (slow disk), %d (fast)",
                  a.plan.chunk_by_gen[1], b.plan.chunk_by_gen[1]);
        tl_serve_replanner_free(&a);
        tl_serve_replanner_free(&b);
    }
    tl_model_close(m);
}

/* ---- 4. re-plan by measurement ---- */

/* Feeds steps of (g, c) until the replanner has checked once more, each measured at
 * `factor` x what was predicted before the first (a machine that much slower throughout),
 * stalled `stall` of their time. */
static void feed(tl_serve_replanner *r, int32_t g, int32_t c, double factor, double stall) {
    const tl_sched_policy pol = tl_serve_replanner_policy(r);
    const double t = factor * tl_serve_replanner_step_s(r, g, c);
    const int32_t checks = r->checks;
    for (int i = 0; i < 1000000 && r->checks == checks; i++) pol.observe(pol.user, g, c, t, stall * t);
    CHECK(r->checks == checks + 1);
}

static void replans(uint64_t budget_resident) {
    /* computing: every weight resident, a fast disk */
    tl_model *m = open_model(budget_resident);
    tl_hw_profile prof;
    tl_serve_replanner r;
    tl_serve_request rq = request();
    rq.max_seqs = 4;
    rq.max_chunk = 32;
    if (m) {
        round_profile(&prof, 1e12);
        if (plan_with(m, &prof, &rq, &r)) {
            const int32_t S = r.plan.sched.max_seqs;
            const double before = tl_serve_replanner_step_s(&r, S, 0);
            feed(&r, S, 0, 1.0, 0);
            CHECK_MSG(r.replans == 0, "as predicted: %d re-plans", r.replans);
            feed(&r, S, 0, 3.0, 0);
            const double after = tl_serve_replanner_step_s(&r, S, 0);
            CHECK_MSG(r.replans == 1 && after > 2.5 * before && after < 3.1 * before,
                      "3x slower compute: %d re-plans, step %.4f -> %.4f s", r.replans, before,
                      after);
            CHECK(fabs(r.last_ratio - 3) < 0.01);
            check_table(&r, "after the compute re-plan");
            const tl_sched_policy pol = tl_serve_replanner_policy(&r);
            CHECK(pol.chunk(pol.user, S + 5) == r.plan.chunk_by_gen[S]); /* clamped to S */
            CHECK(pol.chunk(pol.user, 0) == r.plan.sched.prefill_chunk);
            feed(&r, S, 2, 1.0, 0); /* now as predicted: nothing changes */
            CHECK(r.replans == 1);
            tl_serve_replanner_free(&r);
        }
        tl_model_close(m);
    }
    /* waiting on weights: a slow disk, most weights streamed */
    m = open_model(streaming_budget(4, 32));
    if (!m) return;
    round_profile(&prof, 1e6);
    rq.kv_bits = 32;
    if (plan_with(m, &prof, &rq, &r)) {
        const double before = tl_serve_replanner_step_s(&r, 1, 0);
        CHECK(r.wplan.streamed_bytes > 0);
        feed(&r, 1, 0, 2.0, 0.9);
        const double after = tl_serve_replanner_step_s(&r, 1, 0);
        CHECK_MSG(r.replans == 1 && after > 1.8 * before && after < 2.1 * before,
                  "2x slower disk: %d re-plans, step %.3f -> %.3f s", r.replans, before, after);
        check_table(&r, "after the disk re-plan");
        tl_serve_replanner_free(&r);
    }
    tl_model_close(m);
}

/* ---- KV tiers ---- */

/* Windows are searched beside the KV in memory; on a deep model (16 layers: two layers'
 * disk pages staged are an eighth of them) a window fits sequences whose KV does not fit
 * in memory, the plan keeps the budget, and the scheduler opened with it places what was
 * planned. */
static void tiers(void) {
    const uint64_t budget = 24u << 20;
    tl_model *m = open_path(g_deep, budget);
    if (!m) return;
    tl_hw_profile prof;
    round_profile(&prof, 1e9);
    tl_serve_request rq = request();
    rq.n_ctx = 512;
    rq.prompt_len = 256;
    rq.gen_len = 128;
    tl_serve_plan mem, any, win;
    CHECK(tl_serve_plan_search(m, &prof, &rq, &mem) == TL_OK);
    rq.kv_window = 0;
    CHECK(tl_serve_plan_search(m, &prof, &rq, &any) == TL_OK);
    CHECK_MSG(any.candidates == 4 * mem.candidates, "%d candidates with windows, %d without",
              any.candidates, mem.candidates);
    CHECK(any.mem_bytes <= budget && mem.mem_bytes <= budget && mem.sched.kv_window == 0);
    /* the fewest sequences whose KV does not fit in memory fit with a window of 32 */
    int32_t S = 1;
    rq.kv_window = -1;
    for (; S <= 256; S *= 2) {
        rq.max_seqs = S;
        if (tl_serve_plan_search(m, &prof, &rq, &win) == TL_ERR_NOMEM) break;
    }
    CHECK_MSG(S <= 256, "256 sequences still fit with their KV in memory");
    rq.kv_window = 32;
    tl_status st = tl_serve_plan_search(m, &prof, &rq, &win);
    CHECK_MSG(st == TL_OK, "%d sequences with a window: %s", S, tl_last_error());
    if (!st) {
        CHECK(win.sched.kv_window == 32 && win.sched.max_seqs == S && win.mem_bytes <= budget);
        /* the step's KV terms by hand: 16 layers, 32-bit pages of 16 positions x 64 values
         * (8 KiB, one slot each); sinks 1 + window 2 pages stay in memory */
        tl_serve_replanner r;
        if (tl_serve_replanner_init(&r, m, &prof, &win) == TL_OK) {
            const double slot = 8192, L = 16;
            tl_serve_step ss = {3, 32, 200, 100, 32, 16, 512, 2, 1};
            tl_cost_terms t;
            tl_cost_serve_step(m, &prof, &r.wplan, &ss, &t);
            /* generating rows: floor(199 / 16) - 3 = 9 disk pages each; the prompt's
             * sequence floor(100 / 16) - 3 = 3, and its chunk pushes 8 - 3 - 3 = 2 out */
            CHECK_MSG(t.kv_read_bytes == L * (3 * 9 + 3) * slot &&
                          fabs(t.kv_write_bytes - L * (3 / 16.0 + 2) * slot) < 1e-6,
                      "KV terms: read %.0f, written %.1f bytes", t.kv_read_bytes, t.kv_write_bytes);
            ss.window_pages = 0; /* all in memory: no KV IO */
            tl_cost_serve_step(m, &prof, &r.wplan, &ss, &t);
            CHECK(t.kv_read_bytes == 0 && t.kv_write_bytes == 0);
            /* 16-bit KV: decoding stored pages is shared by the threads, one job per
             * attention block and kv head; the step's blocks are its 3 generating rows
             * and the 32-row prompt chunk's 2 (its mean block would count 2.4) */
            {
                tl_model_desc md;
                CHECK(tl_model_describe(m, &md) == TL_OK);
                tl_hw_profile p1 = prof, pn = prof;
                p1.attn_decode_s[0] = pn.attn_decode_s[0] = 0; /* f32: nothing to decode */
                p1.attn_decode_s[1] = pn.attn_decode_s[1] = 1e-9;
                p1.attn_mem_s_per_byte = pn.attn_mem_s_per_byte = 0;
                p1.n_threads = 1;
                pn.n_threads = 64;
                double d[2];
                for (int i = 0; i < 2; i++) {
                    tl_cost_terms t32, t16;
                    ss.kv_bits = 32;
                    tl_cost_serve_step(m, i ? &pn : &p1, &r.wplan, &ss, &t32);
                    ss.kv_bits = 16;
                    tl_cost_serve_step(m, i ? &pn : &p1, &r.wplan, &ss, &t16);
                    d[i] = t16.compute_s - t32.compute_s;
                }
                const double jobs = 5.0 * md.n_head_kv;
                CHECK_MSG(d[1] > 0 && fabs(d[0] / d[1] - (jobs < 64 ? jobs : 64)) < 1e-6,
                          "serve step's KV decoding on %g jobs: %.9g / %.9g", jobs, d[0], d[1]);
                ss.kv_bits = 32;
            }
            tl_serve_replanner_free(&r);
        }
        opens_as_planned(m, &win, budget, "with a window");
    }
    tl_model_close(m);
    /* memory to spare, and requests short enough that a window of 128 puts no page on
     * disk: tiers predict the same steps and would buy nothing, so the KV stays in memory
     * (though tiers would hold less of it) */
    m = open_path(g_deep, 256u << 20);
    if (!m) return;
    rq = request();
    rq.n_ctx = 512;
    rq.kv_window = 0;
    CHECK(tl_serve_plan_search(m, &prof, &rq, &any) == TL_OK);
    CHECK_MSG(any.sched.kv_window == 0, "ample memory: KV in tiers (window %d)",
              any.sched.kv_window);
    tl_model_close(m);
}

/* ---- 5. knobs and errors ---- */

static void knobs_and_errors(uint64_t budget) {
    tl_model *m = open_model(budget);
    if (!m) return;
    tl_hw_profile prof;
    round_profile(&prof, 1e9);
    tl_serve_request rq = request();
    tl_serve_plan plan;
    CHECK(tl_serve_plan_search(m, &prof, &rq, &plan) == TL_OK);
    CHECK(plan.sched.kv_bits == 32 || plan.sched.kv_bits == 16);
    CHECK(plan.sched.n_ctx == 256 && plan.prompt_len == 96 && plan.gen_len == 32);
    rq.max_seqs = 3;
    rq.kv_bits = 8;
    rq.max_chunk = 24;
    CHECK(tl_serve_plan_search(m, &prof, &rq, &plan) == TL_OK);
    CHECK(plan.sched.max_seqs == 3 && plan.sched.kv_bits == 8 && plan.sched.prefill_chunk == 24);
    CHECK(plan.candidates == 1);
    rq = request();
    rq.prompt_len = 250;
    rq.gen_len = 10;
    CHECK(tl_serve_plan_search(m, &prof, &rq, &plan) == TL_ERR_INVALID);
    CHECK(strstr(tl_last_error(), "does not fit the context") != NULL);
    tl_model_close(m);
    m = open_model(1u << 20); /* 1 MiB: not even the scheduler's state */
    if (!m) return;
    rq = request();
    tl_status st = tl_serve_plan_search(m, &prof, &rq, &plan);
    CHECK_MSG(st == TL_ERR_NOMEM && strstr(tl_last_error(), "holds no serving policy"),
              "tiny budget: %d %s", (int)st, tl_last_error());
    tl_model_close(m);
}

int main(void) {
    tl_synth_params sp;
    tl_synth_preset("stories260k", &sp);
    sp.n_vocab = 512;
    sp.n_embd = 256;
    sp.n_ff = 768;
    sp.n_layer = 4;
    sp.n_head = 8;
    sp.n_head_kv = 4;
    sp.n_ctx = 512;
    sp.weight_type = TL_TYPE_Q8_0;
    sp.tied_output = 0;
    snprintf(g_path, sizeof g_path, "/tmp/tl_test_serve_plan_%d.gguf", (int)getpid());
    snprintf(g_deep, sizeof g_deep, "/tmp/tl_test_serve_plan_%d_deep.gguf", (int)getpid());
    tl_status st = tl_synth_write(&sp, g_path);
    sp.n_embd = 128;
    sp.n_ff = 256;
    sp.n_layer = 16;
    sp.n_head = 4;
    sp.n_head_kv = 2;
    sp.n_ctx = 1024;
    if (!st) st = tl_synth_write(&sp, g_deep);
    if (st) {
        fprintf(stderr, "synth: %s\n", tl_last_error());
        return 1;
    }
    const uint64_t mib = 1u << 20;
    fits_and_places(512 * mib, 1e9); /* everything resident */
    fits_and_places(streaming_budget(4, 32), 1e9); /* weights stream */
    calibrated(512 * mib);
    calibrated(streaming_budget(4, 32));
    io_against_compute();
    replans(512 * mib);
    knobs_and_errors(512 * mib);
    tiers();
    unlink(g_path);
    unlink(g_deep);
    return tl_test_finish("test_serve_plan");
}

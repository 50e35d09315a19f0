/* test_plan.c - the planner: cost model, LP, search and its memory guarantee.
 *
 * 1. Hand-computed terms: on a small model with a profile of round numbers, the cost
 *    model's prefill/decode times, weight bytes and KV bytes equal values computed here
 *    from the formulas written out longhand (single sequence, and a batch whose KV spills).
 * 2. The LP agrees with brute force: its optimum is no worse than any point of a coarse
 *    21 x 21 grid of (x_w, x_k) and within 1% of the best point of a fine grid, and the
 *    objective evaluated at its solution equals the solver's value.
 * 3. Property: over many random shapes, types, budgets and workloads, a policy returned
 *    by the search never has a dry run above the budget; a sample of them is actually run
 *    and the budget's peak stays within the limit; when the search finds nothing, even
 *    the leanest policy's dry run does not fit.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "base/cache_dir.h"
#include "base/rng.h"
#include "tierllm.h"
#include "exec/engine.h"
#include "exec/residency.h"
#include "model/placement.h"
#include "format/tensor_type.h"
#include "plan/calibrate.h"
#include "plan/search.h"
#include "plan/replan.h"
#include "base/status.h"
#include "testutil.h"

static int32_t g_synth_ctx = 512;

static const char *synth(const char *tag, int32_t vocab, int32_t embd, int32_t ff,
                         int32_t layers, int32_t heads, int32_t kv_heads, int32_t type,
                         char *path, size_t cap) {
    tl_synth_params sp;
    tl_synth_preset("stories260k", &sp);
    sp.n_vocab = vocab;
    sp.n_embd = embd;
    sp.n_ff = ff;
    sp.n_layer = layers;
    sp.n_head = heads;
    sp.n_head_kv = kv_heads;
    sp.n_ctx = g_synth_ctx;
    sp.weight_type = type;
    sp.tied_output = 0;
    snprintf(path, cap, "/tmp/tl_test_plan_%d_%s.gguf", (int)getpid(), tag);
    if (tl_synth_write(&sp, path) != TL_OK) {
        fprintf(stderr, "synth: %s\n", tl_last_error());
        return NULL;
    }
    return path;
}

static int close_to(double a, double b, double rel) {
    return fabs(a - b) <= rel * fmax(fabs(a), fabs(b)) + 1e-15;
}

/* The model at `path` on one thread with a memory budget (NULL on failure, checked). */
static tl_model *open_model(const char *path, uint64_t budget) {
    tl_model_params mp = tl_model_default_params();
    mp.n_threads = 1;
    mp.mem_budget = budget;
    tl_model *m = NULL;
    CHECK(tl_model_open(path, &mp, &m) == TL_OK);
    return m;
}

/* ---- 1. hand-computed terms ---- */

/* The overlapped pass: (a^4 + b^4)^(1/4) (cost.c). */
static double smax(double a, double b) { return pow(pow(a, 4) + pow(b, 4), 0.25); }

static void hand_single(const char *path) {
    tl_model *m = open_model(path, 64u << 20);
    if (!m) return;
    tl_hw_profile prof;
    tl_test_round_profile(&prof);
    tl_workload w = {.prompt_len = 8, .gen_len = 4, .num_seqs = 1};
    tl_policy pol = {.single = 1, .gbs = 1, .num_gb = 1, .prefill_rows = 4, .w_mem_pct = 0,
                     .kv_mem_pct = 100, .kv_bits = 32, .page_tokens = 16, .prefetch = 1, .overlap = 1, .n_ctx = 16};
    tl_plan_result r;
    CHECK(tl_plan_evaluate(m, &prof, &w, &pol, &r) == TL_OK);
    /* longhand: d 128, f 320, 8 heads of 16, 2 kv heads (kv_dim 32), 2 layers, vocab 300 */
    const double mm_row = (128.0 * 128 + 32 * 128 + 32 * 128 + 128 * 128 + 3 * 320 * 128) / 1e9;
    const double elem_row = (4 * 128 + 3 * 320) * 1e-9, attn_pos = 8 * 16 * 2e-9, fixed = 1e-5;
    const double out_row = 300.0 * 128 / 1e9 + (128 + 300) * 1e-9;
    const double embd_row = 65536 / 1e9; /* w_mem 0: the embedding streams, a read per row */
    tl_weight_plan plan;
    CHECK(tl_engine_plan_weights(m, tl_context_budget_bytes(m, 16, 4), 1, 1, 0, &plan) == TL_OK);
    const double unit_s[3] = {(double)tl_weight_plan_unit_bytes(&m->lm, &plan, 0) / 1e9,
                              (double)tl_weight_plan_unit_bytes(&m->lm, &plan, 1) / 1e9,
                              (double)tl_weight_plan_unit_bytes(&m->lm, &plan, 2) / 1e9};
    double layer_bytes = (double)tl_weight_plan_unit_bytes(&m->lm, &plan, 0) +
                         (double)tl_weight_plan_unit_bytes(&m->lm, &plan, 1);
    double out_bytes = (double)tl_weight_plan_unit_bytes(&m->lm, &plan, 2);
    CHECK(layer_bytes > 2 * (128.0 * 128 * 2 + 32 * 128 * 2 + 3 * 320 * 128) * 4 - 1);
    CHECK(out_bytes >= 300.0 * 128 * 4);
    CHECK(plan.embd_resident == 0);
    tl_weight_plan_free(&plan);
    /* prefill: two passes of 4 rows (positions 0-3, then 4-7), logits after the second */
    double c1 = 2 * (4 * mm_row + 10 * attn_pos + 4 * elem_row + fixed) + 4 * embd_row;
    double c2 = 2 * (4 * mm_row + 26 * attn_pos + 4 * elem_row + fixed) + 4 * embd_row + out_row;
    double io1 = layer_bytes / 1e9, io2 = (layer_bytes + out_bytes) / 1e9;
    /* and never less than the ring allows (2 buffers; the output unit computes its
     * product, the layers share the rest; the first pass needs no logits) */
    const double out_mm = 300.0 * 128 / 1e9;
    const double r_nolog[3] = {unit_s[0], unit_s[1], 0};
    const double u1[3] = {c1 / 2, c1 / 2, 0};
    const double u2[3] = {(c2 - out_mm) / 2, (c2 - out_mm) / 2, out_mm}; /* last row only */
    /* the embedding streams: each pass's first row read waits for the reads in flight,
     * at most the IO queue's (1 MiB x 8 at the profile's 1 GB/s) */
    const double embd_wait = 8.0 * 1048576 / 1e9;
    double pre = fmax(smax(c1, io1), tl_cost_ring_pass_s(u1, r_nolog, 2, 2, embd_wait)) +
                 fmax(smax(c2, io2), tl_cost_ring_pass_s(u2, unit_s, 2, 2, embd_wait));
    /* decode: 3 passes of one row at positions 8, 9, 10 */
    double dec = 0, dec_compute = 0;
    for (int pos = 8; pos <= 10; pos++) {
        double c = 2 * (mm_row + (pos + 1) * attn_pos + elem_row + fixed) + embd_row + out_row;
        const double u[3] = {(c - out_mm) / 2, (c - out_mm) / 2, out_mm};
        dec_compute += c;
        dec += fmax(smax(c, io2), tl_cost_ring_pass_s(u, unit_s, 2, 2, embd_wait));
    }
    /* here the ring decides: the output is read only once its pass has begun */
    CHECK(dec > smax(dec_compute / 3, io2) * 3 * 1.01);
    CHECK_MSG(close_to(r.cost.prefill_s, pre, 1e-9), "prefill %.9g vs %.9g", r.cost.prefill_s, pre);
    CHECK_MSG(close_to(r.cost.decode_s, dec, 1e-9), "decode %.9g vs %.9g", r.cost.decode_s, dec);
    CHECK(close_to(r.cost.decode.compute_s, dec_compute, 1e-9));
    CHECK(close_to(r.cost.decode.weight_bytes, 3 * (layer_bytes + out_bytes), 1e-12));
    CHECK(close_to(r.cost.prefill.weight_bytes, 2 * layer_bytes + out_bytes, 1e-12));
    CHECK(r.cost.prefill_passes == 2 && r.cost.decode_passes == 3);
    CHECK(close_to(r.cost.decode_layer.compute_s, dec_compute / 6, 1e-9));
    CHECK(close_to(r.cost.decode.serial_s, dec_compute + 3 * io2, 1e-9));
    /* a calibrated ring delay lengthens every streamed unit's read in the ring (only
     * there: the IO term stays the bytes' time) */
    {
        const double delay = 2e-4;
        tl_hw_profile slow = prof;
        slow.ring_unit_delay_s = delay;
        tl_plan_result rd;
        CHECK(tl_plan_evaluate(m, &slow, &w, &pol, &rd) == TL_OK);
        const double unit_d[3] = {unit_s[0] + delay, unit_s[1] + delay, unit_s[2] + delay};
        double dec_d = 0;
        for (int pos = 8; pos <= 10; pos++) {
            double c = 2 * (mm_row + (pos + 1) * attn_pos + elem_row + fixed) + embd_row + out_row;
            const double u[3] = {(c - out_mm) / 2, (c - out_mm) / 2, out_mm};
            dec_d += fmax(smax(c, io2), tl_cost_ring_pass_s(u, unit_d, 2, 2, embd_wait));
        }
        CHECK(dec_d > dec * 1.001);
        CHECK_MSG(close_to(rd.cost.decode_s, dec_d, 1e-9), "decode with the delay %.9g vs %.9g",
                  rd.cost.decode_s, dec_d);
        CHECK(close_to(rd.cost.decode.weight_read_s, r.cost.decode.weight_read_s, 1e-12));
    }
    /* without overlap the pass is the sum */
    pol.overlap = 0;
    pol.prefetch = 0;
    CHECK(tl_plan_evaluate(m, &prof, &w, &pol, &r) == TL_OK);
    CHECK_MSG(close_to(r.cost.decode_s, dec_compute + 3 * io2, 1e-9), "serial decode %.9g",
              r.cost.decode_s);
    tl_model_close(m);
}

/* The slowdown while the disk streams, by kind of work: products of <= 4 rows use
 * io_slowdown_matvec, attention io_slowdown_attn, the rest io_compute_slowdown, weighted
 * by their time. The round profile prices attention at 2e-9 s per MAC, no cache term:
 * 2 layers x 8 heads x 16 dims per visible position. */
static void hand_slowdown(const char *path) {
    tl_model *m = open_model(path, 64u << 20);
    if (!m) return;
    tl_hw_profile prof;
    tl_test_round_profile(&prof);
    prof.io_slowdown_matvec = 1.6;
    prof.io_compute_slowdown = 1.1;
    prof.io_slowdown_attn = 1.3;
    const double mm_row = 2 * (128.0 * 128 + 32 * 128 + 32 * 128 + 128 * 128 + 3 * 320 * 128) / 1e9;
    const int32_t rows[3] = {1, 4, 64};
    const double none[3] = {0, 0, 0};
    double s = 0;
    double t = tl_cost_pass_compute(m, &prof, 32, rows, none, none, 3, 1, 1, 0, 1, &s);
    const double tv = 5 * mm_row; /* the 1- and 4-row products */
    double expect = (tv * 1.6 + (t - tv) * 1.1) / t;
    CHECK_MSG(close_to(s, expect, 1e-12), "slowdown %.12g vs %.12g", s, expect);
    CHECK(t > tv + 64 * mm_row * (1 - 1e-12));
    const double ctx[3] = {0, 0, 3000}; /* the 64 rows see 3000 positions in all */
    double sa = 0;
    double ta = tl_cost_pass_compute(m, &prof, 32, rows, ctx, none, 3, 1, 1, 0, 1, &sa);
    const double at = 3000 * 2 * 8 * 16 * 2e-9;
    CHECK_MSG(close_to(ta - t, at, 1e-9), "attention %.12g vs %.12g", ta - t, at);
    expect = (tv * 1.6 + at * 1.3 + (ta - tv - at) * 1.1) / ta;
    CHECK_MSG(close_to(sa, expect, 1e-12), "slowdown with attention %.12g vs %.12g", sa, expect);
    tl_model_close(m);
}

/* The disk calibration's spread: the wall times are the mean of the times at each sample's
 * rate (the stream's figures, chunks of the engine's size and up, scaled), the terms those
 * at the median; with a pass IO-bound, a rate half the median costs more than a rate twice
 * it saves. */
static void disk_spread(const char *path) {
    tl_model *m = open_model(path, 64u << 20);
    if (!m) return;
    tl_hw_profile prof;
    tl_test_round_profile(&prof);
    tl_workload w = {.prompt_len = 8, .gen_len = 4, .num_seqs = 1};
    tl_policy pol = {.single = 1, .gbs = 1, .num_gb = 1, .prefill_rows = 4, .w_mem_pct = 0,
                     .kv_mem_pct = 100, .kv_bits = 32, .page_tokens = 16, .prefetch = 1,
                     .overlap = 1, .n_ctx = 16};
    tl_plan_result r0, r, rk;
    CHECK(tl_plan_evaluate(m, &prof, &w, &pol, &r0) == TL_OK);
    const double spread[3] = {0.5, 1.0, 2.0};
    tl_hw_profile sp = prof;
    for (int k = 0; k < 3; k++) sp.disk_spread[k] = spread[k];
    sp.n_disk_spread = 3;
    CHECK(tl_plan_evaluate(m, &sp, &w, &pol, &r) == TL_OK);
    double pre = 0, dec = 0;
    for (int k = 0; k < 3; k++) {
        tl_hw_profile at = prof;
        for (int c = 0; c < TL_PROF_N_CHUNK; c++)
            for (int d = 0; d < TL_PROF_N_DEPTH; d++)
                if (tl_prof_chunks[c] >= m->lm.params.io_chunk_bytes)
                    at.disk_read_bps[c][d] *= spread[k];
        CHECK(tl_plan_evaluate(m, &at, &w, &pol, &rk) == TL_OK);
        pre += rk.cost.prefill_s / 3;
        dec += rk.cost.decode_s / 3;
    }
    CHECK_MSG(close_to(r.cost.prefill_s, pre, 1e-12) && close_to(r.cost.decode_s, dec, 1e-12),
              "spread: prefill %.9g vs %.9g, decode %.9g vs %.9g", r.cost.prefill_s, pre,
              r.cost.decode_s, dec);
    CHECK(close_to(r.cost.total_s, pre + dec, 1e-12));
    CHECK(close_to(r.cost.tokens_per_s, 4.0 / (pre + dec), 1e-12));
    CHECK(r.cost.decode_s > r0.cost.decode_s * 1.05);
    CHECK(r.cost.decode.weight_read_s == r0.cost.decode.weight_read_s);
    tl_model_close(m);
}

/* Storing KV: every row of every layer stores 2 * kv_dim values (hand_single's model: 2
 * layers, kv_dim 32) at the profile's figure for the format, and nothing else moves. */
static void hand_kv_store(const char *path) {
    tl_model *m = open_model(path, 64u << 20);
    if (!m) return;
    tl_hw_profile base, kv;
    tl_test_round_profile(&base);
    kv = base;
    for (int k = 0; k < TL_PROF_N_KVBITS; k++) kv.kv_store_s[k] = (k + 1) * 1e-9;
    const int32_t rows[3] = {1, 4, 64};
    const double none[3] = {0, 0, 0};
    for (int k = 0; k < TL_PROF_N_KVBITS; k++) {
        const int32_t bits = tl_prof_kvbits[k];
        const double t0 =
            tl_cost_pass_compute(m, &base, bits, rows, none, none, 3, 1, 1, 0, 1, NULL);
        const double t1 = tl_cost_pass_compute(m, &kv, bits, rows, none, none, 3, 1, 1, 0, 1, NULL);
        const double expect = 69.0 * 2 * 2 * 32 * (k + 1) * 1e-9;
        CHECK_MSG(close_to(t1 - t0, expect, 1e-9), "kv store at %d bits: %.12g vs %.12g",
                  (int)bits, t1 - t0, expect);
    }
    tl_model_close(m);
}

/* Attention in blocks (llama.h): a row's per-MAC cost is own + shared / b for blocks of b
 * rows, through the profile's points b = 1 (attn_s_per_mac) and b = TL_ATTN_BLOCK_MAX_ROWS
 * (attn_block_s_per_mac); decode rows are blocks of one. Longhand on hand_single's plan:
 * 2 layers, 8 heads of 16, prefill chunks of 4 rows seeing 10 and 26 positions. */
static void hand_attn_block(const char *path) {
    tl_model *m = open_model(path, 64u << 20);
    if (!m) return;
    tl_hw_profile one, blk;
    tl_test_round_profile(&one);
    blk = one;
    blk.attn_block_s_per_mac = 0.5e-9;
    const double B = TL_ATTN_BLOCK_MAX_ROWS, shared = 1.5e-9 * B / (B - 1), own = 2e-9 - shared;
    const int32_t rows[1] = {16};
    const double ctx[1] = {1000}, stored[1] = {0};
    double t1 = tl_cost_pass_compute(m, &one, 32, rows, ctx, stored, 1, B, 1, 0, 1, NULL);
    double tb = tl_cost_pass_compute(m, &blk, 32, rows, ctx, stored, 1, B, 1, 0, 1, NULL);
    double tr = tl_cost_pass_compute(m, &blk, 32, rows, ctx, stored, 1, 1, 1, 0, 1, NULL);
    CHECK_MSG(close_to(t1 - tb, 1000 * 2 * 128 * 1.5e-9, 1e-9), "full block saves %.9g", t1 - tb);
    CHECK_MSG(close_to(tr, t1, 1e-12), "rows one at a time cost the single-row rate");
    tl_workload w = {.prompt_len = 8, .gen_len = 4, .num_seqs = 1};
    tl_policy pol = {.single = 1, .gbs = 1, .num_gb = 1, .prefill_rows = 4, .w_mem_pct = 0,
                     .kv_mem_pct = 100, .kv_bits = 32, .page_tokens = 16, .prefetch = 1, .overlap = 1, .n_ctx = 16};
    tl_plan_result r1, rb;
    CHECK(tl_plan_evaluate(m, &one, &w, &pol, &r1) == TL_OK);
    CHECK(tl_plan_evaluate(m, &blk, &w, &pol, &rb) == TL_OK);
    const double saved = 36 * 2 * 128 * (2e-9 - (own + shared / 4));
    CHECK_MSG(close_to(r1.cost.prefill.compute_s - rb.cost.prefill.compute_s, saved, 1e-9),
              "prefill saves %.9g vs %.9g", r1.cost.prefill.compute_s - rb.cost.prefill.compute_s, saved);
    CHECK_MSG(close_to(r1.cost.decode.compute_s, rb.cost.decode.compute_s, 1e-12),
              "decode unchanged: %.9g vs %.9g", r1.cost.decode.compute_s, rb.cost.decode.compute_s);
    tl_model_close(m);
}

/* Grouped-query attention: a group of g query heads per kv head costs
 * c(1) + (c(G) - c(1)) (1 - 1/g) / (1 - 1/G) per MAC, c(1) from the multi-head figures and
 * c(G) from the grouped ones (G = TL_PROF_GQA_GROUP), each through its own block line;
 * a profile without grouped figures prices every group as multi-head. g4 and g2: the
 * 2-layer, 8 x 16 model with 2 and 4 kv heads; 16 rows in one block, 1000 positions. */
static void hand_attn_group(const char *g4, const char *g2) {
    tl_hw_profile mha, gqa;
    tl_test_round_profile(&mha); /* 2e-9 per MAC, blocks too, no grouped figures */
    gqa = mha;
    gqa.attn_gqa_s_per_mac = 1e-9, gqa.attn_gqa_block_s_per_mac = 0.25e-9;
    const double B = TL_ATTN_BLOCK_MAX_ROWS;
    const double c4_row = 1e-9, c4_blk = 0.25e-9, c1 = 2e-9; /* per MAC */
    const char *paths[2] = {g4, g2};
    const double x[2] = {1, (1 - 1 / 2.0) / (1 - 1 / (double)TL_PROF_GQA_GROUP)};
    for (int k = 0; k < 2; k++) {
        tl_model *m = open_model(paths[k], 64u << 20);
        if (!m) return;
        const int32_t rows[1] = {16};
        const double ctx[1] = {1000}, stored[1] = {0};
        const double macs = 1000 * 2 * 128; /* positions x layers x n_head * head_dim */
        double t1 = tl_cost_pass_compute(m, &mha, 32, rows, ctx, stored, 1, B, 1, 0, 1, NULL);
        double tg = tl_cost_pass_compute(m, &gqa, 32, rows, ctx, stored, 1, B, 1, 0, 1, NULL);
        double t1r = tl_cost_pass_compute(m, &mha, 32, rows, ctx, stored, 1, 1, 1, 0, 1, NULL);
        double tgr = tl_cost_pass_compute(m, &gqa, 32, rows, ctx, stored, 1, 1, 1, 0, 1, NULL);
        CHECK_MSG(close_to(t1 - tg, macs * (c1 - c4_blk) * x[k], 1e-9),
                  "group %d, blocks of %g: saves %.9g vs %.9g", k ? 2 : 4, B, t1 - tg,
                  macs * (c1 - c4_blk) * x[k]);
        CHECK_MSG(close_to(t1r - tgr, macs * (c1 - c4_row) * x[k], 1e-9),
                  "group %d, single rows: saves %.9g vs %.9g", k ? 2 : 4, t1r - tgr,
                  macs * (c1 - c4_row) * x[k]);
        tl_model_close(m);
    }
}

/* KV beyond the caches: a pass whose attention reads W bytes of KV (all layers, all
 * micro-batches, each sequence's KV once a step) pays attn_mem_s_per_byte per byte read
 * times miss(W) = (W - attn_cache_bytes) / (attn_mem_bytes - attn_cache_bytes), clamped
 * to [0, 1]; a sequence's further blocks in the step read it again at the full figure
 * times miss(a row's KV at the layer). Model: 2 layers, kv_dim 2 x 16 = 32; f32 KV is 2 x
 * 32 x 4 = 256 bytes per position and layer. */
static void hand_kv_mem(const char *path) {
    tl_model *m = open_model(path, 64u << 20);
    if (!m) return;
    tl_hw_profile base, mem;
    tl_test_round_profile(&base);
    mem = base;
    mem.attn_cache_bytes = 128000, mem.attn_mem_bytes = 1024000, mem.attn_mem_s_per_byte = 1e-9;
    const int32_t one[2] = {1, 1}, blk[1] = {16};
    const double c1[2] = {500, 500}, s0[2] = {0, 0}, c16[1] = {16 * 1000.0};
    /* decode, two micro-batches of one row seeing 500 positions: W = 2 x 2 x 500 x 256 */
    double w = 2 * 2 * 500 * 256.0, share = (w - 128000) / (1024000 - 128000);
    double t0 = tl_cost_pass_compute(m, &base, 32, one, c1, s0, 2, 1, 1, 0, 1, NULL);
    double t1 = tl_cost_pass_compute(m, &mem, 32, one, c1, s0, 2, 1, 1, 0, 1, NULL);
    CHECK_MSG(close_to(t1 - t0, share * 1e-9 * w, 1e-9), "decode: %.9g vs %.9g", t1 - t0,
              share * 1e-9 * w);
    /* a block of 16 rows reads each position once: W = 2 x 1000 x 256 */
    t0 = tl_cost_pass_compute(m, &base, 32, blk, c16, s0, 1, 16, 1, 0, 1, NULL);
    t1 = tl_cost_pass_compute(m, &mem, 32, blk, c16, s0, 1, 16, 1, 0, 1, NULL);
    w = 2 * 1000 * 256.0, share = (w - 128000) / (1024000 - 128000);
    CHECK_MSG(close_to(t1 - t0, share * 1e-9 * w, 1e-9), "block: %.9g vs %.9g", t1 - t0,
              share * 1e-9 * w);
    /* one sequence's 64 rows in 4 blocks of 16, each row seeing 1000 positions: the pass
     * reads its KV once (W = 2 x 1000 x 256), the first block at miss(W), the other three
     * again from the caches but for the share of a row's KV at a layer (1000 x 256 bytes)
     * that misses them, at the full figure */
    const int32_t seq[1] = {64};
    const double c64[1] = {64 * 1000.0};
    t0 = tl_cost_pass_compute(m, &base, 32, seq, c64, s0, 1, 16, 4, 0, 1, NULL);
    t1 = tl_cost_pass_compute(m, &mem, 32, seq, c64, s0, 1, 16, 4, 0, 1, NULL);
    w = 2 * 1000 * 256.0, share = (w - 128000) / (1024000 - 128000);
    const double miss = (1000 * 256.0 - 128000) / (1024000 - 128000);
    const double want = 2 * 4 * 1000 * 256.0 * 1e-9 * (share * 0.25 + 0.75 * miss);
    CHECK_MSG(close_to(t1 - t0, want, 1e-9), "4 blocks: %.9g vs %.9g", t1 - t0, want);
    /* 8-bit pages, 2 x 8000 positions: beyond attn_mem_bytes. Groups never straddle a
     * head, so a head of 16 is one group: 16 codes and 8 bytes of min and scale */
    const double c2k[2] = {8000, 8000};
    t0 = tl_cost_pass_compute(m, &base, 8, one, c2k, c2k, 2, 1, 1, 0, 1, NULL);
    t1 = tl_cost_pass_compute(m, &mem, 8, one, c2k, c2k, 2, 1, 1, 0, 1, NULL);
    w = 2 * 2 * 8000 * 2 * 32 * (1 + 8.0 / 16);
    CHECK(w > 1024000);
    CHECK_MSG(close_to(t1 - t0, 1e-9 * w, 1e-9), "8-bit: %.9g vs %.9g", t1 - t0, 1e-9 * w);
    tl_model_close(m);
}

/* The weight plan spreads its resident parts evenly over the layers (the reader then
 * streams during every resident layer's compute): for every budget, k resident parts of
 * a kind out of L sit at the layers l with floor((l+1)k/L) > floor(lk/L). */
static void spread_placement(const char *path) {
    int checked = 0, partial = 0;
    for (uint64_t kib = 1024; kib <= 8192; kib += 256) {
        tl_model_params mp = tl_model_default_params();
        mp.n_threads = 1;
        mp.mem_budget = kib << 10;
        tl_model *m;
        if (tl_model_open(path, &mp, &m) != TL_OK) continue;
        tl_weight_plan plan;
        if (tl_engine_plan_weights(m, tl_context_budget_bytes(m, 16, 4), 1, 1, 100, &plan) == TL_OK) {
            const int L = m->lm.hp.n_layer;
            int ka = 0, kf = 0, bad = 0;
            for (int l = 0; l < L; l++) ka += plan.attn_resident[l], kf += plan.ffn_resident[l];
            for (int l = 0; l < L; l++) {
                bad += plan.attn_resident[l] != ((l + 1) * ka / L > l * ka / L);
                bad += plan.ffn_resident[l] != ((l + 1) * kf / L > l * kf / L);
            }
            CHECK_MSG(bad == 0, "budget %d KiB: %d of %d attention and %d FFN parts resident, "
                      "%d flags off the even spread", (int)kib, ka, L, kf, bad);
            partial += (kf > 0 && kf < L) || (ka > 0 && ka < L);
            checked++;
            tl_weight_plan_free(&plan);
        }
        tl_model_close(m);
    }
    CHECK_MSG(checked >= 8 && partial >= 3, "%d budgets planned, %d with some parts streamed",
              checked, partial);
}

/* One pass's KV wait by the rules of cost.c's formula, for `layers` layers of `mbs`
 * micro-batches of `pages` disk pages each, computing c each: a batch is asked for when
 * the one before starts its wait; it takes drain + u + (pages - 1) v when no batch before
 * it is still being read, else its pages follow that batch's (v each), and never sooner
 * than u + (pages - 1) v. The drain is d, or, where the ring runs ahead of the compute
 * (every layer streamed), what is left of the unit_s of chunks it put in flight as the
 * batch's layer began, when that is more. */
static double hand_kv_wait_ring(int layers, int mbs, double pages, double c, double d,
                                double u, double v, double unit_s) {
    double t = 0, asked = 0, asked_layer = 0, prev = 0, wait = 0;
    for (int l = 0; l < layers; l++) {
        const double layer_t = t;
        for (int k = 0; k < mbs; k++) {
            double done = asked;
            if (pages > 0) {
                const double batch = u + (pages - 1) * v;
                const double drain = fmax(d, unit_s - (asked - asked_layer));
                done = asked >= prev ? asked + drain + batch
                                     : fmax(asked + batch, prev + pages * v);
                prev = done;
            }
            asked = t;
            asked_layer = layer_t;
            const double w = done > t ? done - t : 0;
            wait += w;
            t += w + c;
        }
    }
    return wait;
}

/* The same for n micro-batches in one run, the drain d for every batch. */
static double hand_kv_wait(int n, double pages, double c, double d, double u, double v) {
    return hand_kv_wait_ring(1, n, pages, c, d, u, v, 0);
}

/* The decode passes of a walk (tl_cost_walk): each one's compute and KV wait. */
typedef struct pass_list {
    int n_decode;
    double decode_compute[64], decode_kv_wait[64];
} pass_list;

static void collect_pass(void *user, const tl_cost_pass *p) {
    pass_list *pl = user;
    if (p->prefill || pl->n_decode >= 64) return;
    pl->decode_compute[pl->n_decode] = p->compute_s;
    pl->decode_kv_wait[pl->n_decode++] = p->kv_wait_s;
}

/* Every pass of a walk that reads or writes (tl_cost_walk), against the cost per byte:
 * n such passes, `off` of them whose slowdown is not 1 + k B / I by hand. */
typedef struct io_cost_check {
    double k;
    int n, off;
} io_cost_check;

static void check_io_cost(void *user, const tl_cost_pass *p) {
    io_cost_check *c = user;
    const double b = p->weight_bytes + p->kv_read_bytes + p->kv_write_bytes;
    double s = p->weight_bytes > 0 ? p->weight_bytes / p->weight_bps : 0;
    s += p->kv_read_bytes > 0 ? p->kv_read_bytes / p->kv_read_bps : 0;
    s += p->kv_write_bytes > 0 ? p->kv_write_bytes / p->kv_write_bps : 0;
    if (!(b > 0)) return;
    c->n++;
    if (!close_to(p->io_slowdown, 1 + c->k * b / s, 1e-12)) c->off++;
}

/* Prompts of different lengths (tl_workload_set_prompts): their quantiles and mean; a
 * workload whose quantiles are all one length predicts exactly what the plain one does;
 * with lengths 8, 40, 40 and 72 a block takes the steps its longest needs, each feeding
 * only the prompts not yet fed, which read the disk pages they see. */
static void varied_prompts(const char *path) {
    int32_t few[4] = {72, 8, 40, 40};
    tl_workload w = {.gen_len = 30, .num_seqs = 4};
    tl_workload_set_prompts(&w, few, 4);
    CHECK(w.prompt_len == 40 && tl_workload_prompt_max(&w) == 72);
    CHECK(w.prompt_q[0] == 8 && w.prompt_q[1] == 40 && w.prompt_q[2] == 40 &&
          w.prompt_q[3] == 72 && w.prompt_q[4] == 0);
    int32_t many[40];
    for (int i = 0; i < 40; i++) many[i] = 40 - i;
    tl_workload w40 = {.gen_len = 1, .num_seqs = 40};
    tl_workload_set_prompts(&w40, many, 40);
    /* quantile i: the prompt at rank (i + 0.5) * 40 / 16 of the sorted 1..40 */
    CHECK(w40.prompt_len == 21 && w40.prompt_q[0] == 2 && w40.prompt_q[15] == 39);
    tl_model *m = open_model(path, 256u << 20);
    if (!m) return;
    tl_hw_profile prof;
    tl_test_round_profile(&prof);
    /* as hand_batch_spill: gbs 2 x num_gb 2, prefill chunks of 32 tokens, KV half on disk
     * in 4096-byte slots, 2 layers */
    tl_policy pol = {.single = 0, .gbs = 2, .num_gb = 2, .prefill_rows = 64, .w_mem_pct = 100,
                     .kv_mem_pct = 50, .kv_bits = 32, .page_tokens = 16, .prefetch = 1,
                     .overlap = 1, .n_ctx = 104};
    tl_workload plain = {.prompt_len = 40, .gen_len = 30, .num_seqs = 4}, same = plain;
    for (int i = 0; i < 4; i++) same.prompt_q[i] = 40;
    tl_plan_result rp, rs, rv;
    CHECK(tl_plan_evaluate(m, &prof, &plain, &pol, &rp) == TL_OK);
    CHECK(tl_plan_evaluate(m, &prof, &same, &pol, &rs) == TL_OK);
    CHECK(tl_plan_evaluate(m, &prof, &w, &pol, &rv) == TL_OK);
    CHECK(rs.cost.total_s == rp.cost.total_s && rs.cost.prefill_s == rp.cost.prefill_s &&
          rs.cost.prefill.kv_read_bytes == rp.cost.prefill.kv_read_bytes);
    CHECK_MSG(rp.cost.prefill_passes == 2 && rv.cost.prefill_passes == 3, "%g, %g passes",
              rp.cost.prefill_passes, rv.cost.prefill_passes);
    /* disk pages among n full pages: floor(n / 2). Fed 32: the prompts of 40, 40 and 72
     * see 2 full pages, 1 on disk; fed 64: the 72 sees 4, 2 on disk (the plain workload: 4
     * prompts x 1 page at fed 32) */
    const double slot = 4096, L = 2;
    CHECK_MSG(close_to(rv.cost.prefill.kv_read_bytes, (3 + 2) * L * slot, 1e-12), "%g",
              rv.cost.prefill.kv_read_bytes);
    CHECK(close_to(rp.cost.prefill.kv_read_bytes, 4 * L * slot, 1e-12));
    CHECK(rv.cost.prefill_s > rp.cost.prefill_s);
    tl_model_close(m);
}

static void hand_batch_spill(const char *path) {
    tl_model *m = open_model(path, 256u << 20);
    if (!m) return;
    tl_hw_profile prof;
    tl_test_round_profile(&prof);
    /* 4 sequences of 40 + 20, gbs 2 x num_gb 2, KV f32 half on disk, 16-token pages
     * (16 tokens x 32 values x 4 bytes x K,V = 4096 bytes: one 4096-byte unit) */
    tl_workload w = {.prompt_len = 40, .gen_len = 30, .num_seqs = 4};
    tl_policy pol = {.single = 0, .gbs = 2, .num_gb = 2, .prefill_rows = 64, .w_mem_pct = 100,
                     .kv_mem_pct = 50, .kv_bits = 32, .page_tokens = 16, .prefetch = 1, .overlap = 1, .n_ctx = 80};
    tl_plan_result r;
    CHECK(tl_plan_evaluate(m, &prof, &w, &pol, &r) == TL_OK);
    CHECK(r.policy.page_tokens == 16);
    const double slot = 4096, L = 2;
    /* disk pages among n full pages at 50%: floor(n / 2).
     * prefill: chunk = 64 / 2 = 32 tokens: a step at fed 0 (32 rows per sequence), one at
     * fed 32 (8 rows); the second sees 2 full pages, 1 on disk; the first fills 2 pages
     * (1 to disk), the second none */
    double pre_read = 4 * L * 1 * slot, pre_write = 4 * L * 1 * slot;
    double kv_read = 0, kv_write = 0;
    for (int j = 1; j < 30; j++) {
        int before = 40 + j - 1;
        double d0 = floor(floor(before / 16.0) * 0.5), d1 = floor(floor((before + 1) / 16.0) * 0.5);
        kv_read += 4 * L * d0 * slot;
        kv_write += 4 * L * (d1 - d0) * slot;
    }
    CHECK(kv_read > 0 && kv_write > 0);
    CHECK_MSG(close_to(r.cost.prefill.kv_read_bytes, pre_read, 1e-12), "%g vs %g",
              r.cost.prefill.kv_read_bytes, pre_read);
    CHECK(close_to(r.cost.prefill.kv_write_bytes, pre_write, 1e-12));
    CHECK_MSG(close_to(r.cost.decode.kv_read_bytes, kv_read, 1e-12), "%g vs %g",
              r.cost.decode.kv_read_bytes, kv_read);
    CHECK(close_to(r.cost.decode.kv_write_bytes, kv_write, 1e-12));
    CHECK(close_to(r.cost.decode.kv_read_s, kv_read / 1e9, 1e-12));
    CHECK(close_to(r.cost.decode.kv_write_s, kv_write / 5e8, 1e-12));
    CHECK(r.cost.prefill_passes == 2 && r.cost.decode_passes == 29);
    /* 16-bit KV: decoding stored pages costs 2 * kv_dim * b per position in a full page
     * committed before the step (open pages are f32), per block and layer: each kv head's
     * job decodes its own columns */
    {
        tl_hw_profile p16 = prof;
        p16.attn_decode_s[1] = 1e-9;
        tl_policy q = pol;
        q.kv_bits = 16;
        q.kv_mem_pct = 100;
        tl_plan_result r32, r16;
        q.kv_bits = 32;
        CHECK(tl_plan_evaluate(m, &p16, &w, &q, &r32) == TL_OK);
        q.kv_bits = 16;
        CHECK(tl_plan_evaluate(m, &p16, &w, &q, &r16) == TL_OK);
        const double per_pos = 2.0 * 32 * 1e-9 * L;
        /* step 2: 8 rows per sequence, 2 full pages, decoded once per block of 8 rows */
        double pre = 4 * 8 * 32 * per_pos / 8;
        double dec = 0;
        for (int j = 1; j < 30; j++) dec += 4 * floor((40 + j - 1) / 16.0) * 16 * per_pos;
        CHECK_MSG(close_to(r16.cost.prefill.compute_s - r32.cost.prefill.compute_s, pre, 1e-6),
                  "prefill decode %.9g vs %.9g",
                  r16.cost.prefill.compute_s - r32.cost.prefill.compute_s, pre);
        CHECK_MSG(close_to(r16.cost.decode.compute_s - r32.cost.decode.compute_s, dec, 1e-6),
                  "decode decode %.9g vs %.9g", r16.cost.decode.compute_s - r32.cost.decode.compute_s,
                  dec);
        /* the jobs run on the threads (the profile times the decoding on one): 2 kv heads
         * x 2 blocks per micro-batch (prefill: 16 rows in blocks of 8; decode: 2 rows) */
        for (int32_t threads = 2; threads <= 8; threads *= 2) {
            p16.n_threads = threads;
            const double par = threads < 4 ? threads : 4;
            q.kv_bits = 32;
            CHECK(tl_plan_evaluate(m, &p16, &w, &q, &r32) == TL_OK);
            q.kv_bits = 16;
            CHECK(tl_plan_evaluate(m, &p16, &w, &q, &r16) == TL_OK);
            CHECK_MSG(close_to(r16.cost.prefill.compute_s - r32.cost.prefill.compute_s,
                               pre / par, 1e-6), "%d threads: prefill decode %.9g vs %.9g",
                      (int)threads, r16.cost.prefill.compute_s - r32.cost.prefill.compute_s,
                      pre / par);
            CHECK_MSG(close_to(r16.cost.decode.compute_s - r32.cost.decode.compute_s,
                               dec / par, 1e-6), "%d threads: decode decode %.9g vs %.9g",
                      (int)threads, r16.cost.decode.compute_s - r32.cost.decode.compute_s,
                      dec / par);
        }
    }
    /* one block: the streamed layers are read once per pass, not once per micro-batch */
    CHECK(close_to(r.cost.decode.weight_bytes, 29.0 * (double)r.streamed_bytes, 1e-12));
    CHECK(r.cost.decode.kv_wait_s >= 0 && r.cost.decode.kv_wait_s < 1e-3);
    /* KV wait: page reads slow enough that compute waits for them, per decode pass (2
     * layers x 2 micro-batches) by hand_kv_wait's rules (nothing streams here: no drain of
     * weight chunks ahead of the pages) */
    {
        tl_hw_profile ps = prof;
        for (int c = 0; c < TL_PROF_N_CHUNK; c++) ps.disk_read_bps[c][0] = 1e6; /* depth 1 */
        ps.disk_urgent_read_s = 3e-3;
        ps.disk_urgent_page_s = 7e-4;
        tl_plan_result rs;
        CHECK(tl_plan_evaluate(m, &ps, &w, &pol, &rs) == TL_OK);
        const double mm_row = (128.0 * 128 + 32 * 128 + 32 * 128 + 128 * 128 + 3 * 320 * 128) / 1e9;
        const double elem_row = (4 * 128 + 3 * 320) * 1e-9, attn_pos = 8 * 16 * 2e-9;
        const double u = rs.streamed_bytes > 0 ? 3e-3 : slot / 1e6;
        const double v = rs.streamed_bytes > 0 ? 7e-4 : slot / 1e9;
        double wait = 0;
        for (int j = 1; j < 30; j++) {
            int before = 40 + j - 1;
            double pages = 2 * floor(floor(before / 16.0) * 0.5);
            double c = 2 * mm_row + 2 * (before + 1) * attn_pos + 2 * elem_row + 1e-5;
            wait += hand_kv_wait(4, pages, c, 0, u, v);
        }
        CHECK(rs.streamed_bytes == 0);
        CHECK(wait > 0.01);
        CHECK_MSG(close_to(rs.cost.decode.kv_wait_s, wait, 1e-9), "KV wait %.9g vs %.9g",
                  rs.cost.decode.kv_wait_s, wait);
        /* the wait is on the compute side of the overlap: a pass is max(compute + wait, IO) */
        CHECK(rs.cost.decode_s >= rs.cost.decode.compute_s + rs.cost.decode.kv_wait_s - 1e-12);
        CHECK(close_to(rs.cost.decode.serial_s, rs.cost.decode.compute_s + rs.cost.decode.kv_wait_s +
                       rs.cost.decode.weight_read_s + rs.cost.decode.kv_read_s +
                       rs.cost.decode.kv_write_s, 1e-9));
        /* all KV in memory: no wait */
        tl_policy q = pol;
        q.kv_mem_pct = 100;
        CHECK(tl_plan_evaluate(m, &ps, &w, &q, &rs) == TL_OK && rs.cost.decode.kv_wait_s == 0);
        /* every weight streamed, at 1e6 B/s (so the stream reads through every pass): each
         * batch first waits for the weight chunks in flight, d = half of min(io queue,
         * prefetch x the mean streamed layer) at the weights' rate, and the page time v is
         * at least the page's bytes at the KV rate; a pass's KV reads take at least the
         * batches' device time, sum of u + (pages - 1) v (u is made long enough for it) */
        tl_hw_profile pw = prof;
        tl_test_profile_set_disk(&pw, 1e6);
        pw.disk_urgent_read_s = 2e-2;
        pw.disk_urgent_page_s = 7e-4;
        q = pol;
        q.w_mem_pct = 0;
        CHECK(tl_plan_evaluate(m, &pw, &w, &q, &rs) == TL_OK && rs.streamed_bytes > 0);
        tl_weight_plan plan;
        double layers_bytes = 0, ahead = 0;
        int units = 0;
        if (tl_engine_plan_weights(m, tl_plan_state_bytes(m, &q), q.prefetch, q.overlap,
                                   q.w_mem_pct, &plan) == TL_OK) {
            for (int32_t l = 0; l < m->lm.hp.n_layer; l++) {
                const double b = (double)tl_weight_plan_unit_bytes(&m->lm, &plan, l);
                layers_bytes += b;
                units += b > 0;
            }
            if (units > 0)
                ahead = layers_bytes / units * (plan.n_slots > 1 ? plan.n_slots - 1 : 1);
            tl_weight_plan_free(&plan);
        }
        CHECK(units > 0);
        const double queue = (double)m->lm.params.io_chunk_bytes * m->lm.params.io_queue_depth;
        const double d = 0.5 * (ahead < queue ? ahead : queue) / 1e6, vs = slot / 1e6;
        /* every decode pass computes for less than its weights take to read */
        CHECK_MSG(layers_bytes / 1e6 > 2 * rs.cost.decode.compute_s / 29, "%g vs %g",
                  layers_bytes / 1e6, rs.cost.decode.compute_s / 29);
        /* the profile's page figure is for a page of TL_PROF_URGENT_BYTES; a smaller page
         * takes its share (the second figure is the one that counts for this slot) */
        const double page_figures[2] = {7e-4, 0.1};
        for (int f = 0; f < 2; f++) {
            pw.disk_urgent_page_s = page_figures[f];
            CHECK(tl_plan_evaluate(m, &pw, &w, &q, &rs) == TL_OK);
            const double v = fmax(page_figures[f] * slot / TL_PROF_URGENT_BYTES, vs);
            CHECK(f == 0 || v > vs);
            double swait = 0, batches = 0;
            for (int j = 1; j < 30; j++) {
                int before = 40 + j - 1;
                double pages = 2 * floor(floor(before / 16.0) * 0.5);
                double c = 2 * mm_row + 2 * (before + 1) * attn_pos + 2 * elem_row + 1e-5;
                const double batch = pages > 0 ? 2e-2 + (pages - 1) * v : 0;
                swait += hand_kv_wait(4, pages, c, d, 2e-2, v);
                batches += 4 * batch;
            }
            CHECK(d > 0.01 && batches > rs.cost.decode.kv_read_bytes / 1e6);
            CHECK_MSG(close_to(rs.cost.decode.kv_wait_s, swait, 1e-9), "streamed KV wait %.9g "
                      "vs %.9g", rs.cost.decode.kv_wait_s, swait);
            CHECK_MSG(close_to(rs.cost.decode.kv_read_s, batches, 1e-9), "streamed KV reads "
                      "%.9g vs %.9g", rs.cost.decode.kv_read_s, batches);
        }
        /* a disk fast enough that the ring runs ahead of every pass's compute: as each
         * layer begins the ring puts a unit in flight (unit_s of reading), and a batch
         * asked for then waits for what is left of it (hand_kv_wait_ring) where that is
         * more than the random moment's drain (d scaled by the share of the pass the
         * stream reads: weight reads / the pass's compute, from the walk) */
        const double fast = 1.5e9;
        tl_test_profile_set_disk(&pw, fast);
        pw.disk_urgent_read_s = 4e-4;
        pw.disk_urgent_page_s = 1e-3;
        CHECK(tl_plan_evaluate(m, &pw, &w, &q, &rs) == TL_OK && rs.streamed_bytes > 0);
        const double unit = layers_bytes / units, wr = layers_bytes / fast;
        const double unit_s = (unit < queue ? unit : queue) / fast, dmax = d * 1e6 / fast;
        const double vf = fmax(1e-3 * slot / TL_PROF_URGENT_BYTES, slot / fast);
        pass_list passes = {0};
        if (tl_engine_plan_weights(m, tl_plan_state_bytes(m, &q), q.prefetch, q.overlap,
                                   q.w_mem_pct, &plan) == TL_OK) {
            CHECK(tl_cost_walk(m, &pw, &w, &q, &plan, collect_pass, &passes) == TL_OK);
            tl_weight_plan_free(&plan);
        }
        CHECK_MSG(passes.n_decode == 29, "%d decode passes", passes.n_decode);
        double ring_wait = 0, old_rule = 0;
        for (int j = 1; j < 30 && j <= passes.n_decode; j++) {
            const double cp = passes.decode_compute[j - 1];
            CHECK_MSG(wr < 0.5 * cp, "weights %g s, pass compute %g s", wr, cp);
            const double dj = (wr < cp ? wr / cp : 1) * dmax;
            int before = 40 + j - 1;
            double pages = 2 * floor(floor(before / 16.0) * 0.5);
            double c = 2 * mm_row + 2 * (before + 1) * attn_pos + 2 * elem_row + 1e-5;
            const double want = hand_kv_wait_ring(2, 2, pages, c, dj, 4e-4, vf, unit_s);
            CHECK_MSG(close_to(passes.decode_kv_wait[j - 1], want, 1e-9),
                      "step %d: ring-ahead KV wait %.9g vs %.9g", j,
                      passes.decode_kv_wait[j - 1], want);
            ring_wait += want;
            old_rule += hand_kv_wait(4, pages, c, dj, 4e-4, vf);
        }
        CHECK_MSG(old_rule < 0.85 * ring_wait &&
                      close_to(rs.cost.decode.kv_wait_s, ring_wait, 1e-9),
                  "random-moment drain alone %g s, with the ring's unit %g s, predicted %g s",
                  old_rule, ring_wait, rs.cost.decode.kv_wait_s);
        /* the compute's cost per byte read (prof->io_stream_s_per_byte = k): each pass
         * that reads or writes slows by 1 + k B / I (B its bytes, I their seconds), and the
         * prediction grows with k */
        tl_hw_profile pk = pw;
        pk.io_stream_s_per_byte = 2e-9;
        io_cost_check ic = {pk.io_stream_s_per_byte, 0, 0};
        if (tl_engine_plan_weights(m, tl_plan_state_bytes(m, &q), q.prefetch, q.overlap,
                                   q.w_mem_pct, &plan) == TL_OK) {
            CHECK(tl_cost_walk(m, &pk, &w, &q, &plan, check_io_cost, &ic) == TL_OK);
            tl_weight_plan_free(&plan);
        }
        CHECK_MSG(ic.n >= 30 && ic.off == 0, "%d of %d passes off 1 + k B / I", ic.off, ic.n);
        tl_plan_result r0, rk;
        CHECK(tl_plan_evaluate(m, &pw, &w, &q, &r0) == TL_OK &&
              tl_plan_evaluate(m, &pk, &w, &q, &rk) == TL_OK);
        CHECK_MSG(rk.cost.decode.compute_s > r0.cost.decode.compute_s &&
                      rk.cost.total_s >= r0.cost.total_s,
                  "decode compute %g s with the cost per byte, %g without",
                  rk.cost.decode.compute_s, r0.cost.decode.compute_s);
    }
    tl_model_close(m);
}

/* ---- 2. LP against brute force ---- */

static double g_slowdown = 1;

static void lp_vs_grid(const char *path, uint64_t budget, tl_workload w, tl_policy pol) {
    tl_model *m = open_model(path, budget);
    if (!m) return;
    tl_hw_profile prof;
    tl_test_round_profile(&prof);
    tl_test_profile_set_disk(&prof, 5e7); /* a slow disk, so IO matters */
    prof.disk_write_bps = 2e7;
    prof.io_compute_slowdown = g_slowdown;
    prof.io_slowdown_matvec = g_slowdown + 0.2;
    tl_plan_lp lp;
    CHECK(tl_plan_lp_build(m, &prof, &w, &pol, &lp) == TL_OK);
    double xw, xk, obj;
    tl_status st = tl_plan_lp_solve(&lp, &xw, &xk, &obj);
    CHECK_MSG(st == TL_OK, "%s", tl_last_error());
    if (!st) {
        double at = tl_plan_lp_eval(&lp, xw, xk);
        CHECK_MSG(close_to(at, obj, 1e-6), "objective at the LP's point %.9g vs %.9g", at, obj);
        double coarse = HUGE_VAL, fine = HUGE_VAL;
        for (int i = 0; i <= 20; i++)
            for (int j = 0; j <= 20; j++) coarse = fmin(coarse, tl_plan_lp_eval(&lp, i / 20.0, j / 20.0));
        for (int i = 0; i <= 400; i++)
            for (int j = 0; j <= 400; j++) fine = fmin(fine, tl_plan_lp_eval(&lp, i / 400.0, j / 400.0));
        CHECK_MSG(obj <= coarse * (1 + 1e-9), "LP %.9g worse than the coarse grid %.9g", obj, coarse);
        /* the grid comes within 1% of the LP, or as close as its step allows: its point
         * just below the LP's (feasible: less in memory) is no better than its best */
        const double snapped = tl_plan_lp_eval(&lp, floor(xw * 400) / 400, floor(xk * 400) / 400);
        CHECK_MSG(obj <= fine * (1 + 1e-9) && (fine <= obj * 1.01 || fine <= snapped),
                  "LP %.9g vs fine grid %.9g (the grid point below the LP's: %.9g)", obj, fine,
                  snapped);
        fprintf(stderr, "lp: x_w %.3f x_k %.3f objective %.4f s; coarse grid %.4f, fine %.4f\n",
                xw, xk, obj, coarse, fine);
        /* the memory row is honoured */
        CHECK(lp.base + xw * lp.r_w + xk * lp.r_k <= lp.budget * (1 + 1e-7));
    }
    tl_plan_lp_free(&lp);
    tl_model_close(m);
}

/* ---- 3. the search never exceeds the budget ---- */

static uint64_t rng_state = 88172645463325252ull;
static uint64_t rnd(void) {
    return tl_splitmix64(&rng_state);
}
static int32_t rnd_in(int32_t lo, int32_t hi) { return lo + (int32_t)(rnd() % (uint64_t)(hi - lo + 1)); }

static void run_policy(tl_model *m, const tl_plan_request *rq, const tl_plan_result *r) {
    tl_policy pol = r->policy;
    m->lm.params.prefetch = pol.prefetch;
    m->lm.params.overlap = pol.overlap;
    m->lm.params.w_mem_pct = pol.w_mem_pct;
    tl_generate_params gp = tl_generate_default_params();
    gp.sampler.temperature = 0;
    gp.stop_at_eos = 0;
    gp.n_predict = rq->w.gen_len;
    gp.add_bos = 0;
    /* prompts of exactly prompt_len tokens: byte tokens of the synthetic vocabulary */
    char *text = malloc((size_t)rq->w.prompt_len + 1);
    for (int32_t i = 0; i < rq->w.prompt_len; i++) text[i] = (char)('a' + i % 26);
    text[rq->w.prompt_len] = 0;
    tl_status st;
    if (pol.single) {
        tl_context_params cp = tl_context_default_params();
        cp.n_ctx = pol.n_ctx;
        cp.n_batch = pol.prefill_rows;
        cp.kv_bits = pol.kv_bits;
        tl_context *c = NULL;
        st = tl_context_open(m, &cp, &c);
        if (!st) st = tl_generate(c, text, &gp, NULL, NULL, NULL);
        tl_context_close(c);
    } else {
        tl_batch_params bp = tl_batch_default_params();
        bp.gbs = pol.gbs;
        bp.num_gb = pol.num_gb;
        bp.prefill_rows = pol.prefill_rows;
        bp.kv_bits = pol.kv_bits;
        bp.kv_mem_pct = pol.kv_mem_pct;
        bp.page_tokens = pol.page_tokens;
        bp.n_ctx = pol.n_ctx;
        const char **prompts = malloc((size_t)rq->w.num_seqs * sizeof *prompts);
        for (int32_t i = 0; i < rq->w.num_seqs; i++) prompts[i] = text;
        st = tl_batch_generate(m, &bp, &gp, prompts, NULL, rq->w.num_seqs, NULL, NULL, NULL, NULL);
        free(prompts);
    }
    CHECK_MSG(st == TL_OK, "running the chosen policy (single %d, gbs %d x %d, rows %d, kv %d "
              "bits %d%%, prefetch %d overlap %d, ctx %d, dry run %llu of %llu): %s",
              (int)pol.single, (int)pol.gbs, (int)pol.num_gb, (int)pol.prefill_rows,
              (int)pol.kv_bits, (int)pol.kv_mem_pct, (int)pol.prefetch, (int)pol.overlap,
              (int)pol.n_ctx, (unsigned long long)r->mem_bytes,
              (unsigned long long)r->budget_bytes, tl_last_error());
    CHECK_MSG(tl_budget_peak(m->lm.budget) <= tl_budget_limit(m->lm.budget),
              "peak %llu > budget %llu", (unsigned long long)tl_budget_peak(m->lm.budget),
              (unsigned long long)tl_budget_limit(m->lm.budget));
    free(text);
}

/* A candidate's key in the ranking, and its worst case (search.h: every disk transfer or
 * every compute figure slower by the spread, the recompute margin added), computed here
 * from the profile's own fields, not by the search's code. */
static double key_of(const tl_plan_result *r) {
    return r->cost.total_s * (r->policy.kv_recompute > 0 ? 1 + TL_PLAN_RECOMPUTE_MARGIN : 1);
}
static double worst_of(tl_model *m, const tl_hw_profile *prof, const tl_workload *w,
                       const tl_policy *pol) {
    const double f = 1 + TL_PLAN_ERROR_SPREAD;
    tl_hw_profile disk = *prof, cpu = *prof;
    tl_profile_scale_disk(&disk, f);
    disk.disk_urgent_read_s *= f;
    disk.disk_urgent_page_s *= f;
    disk.disk_write_bps /= f;
    tl_profile_scale_compute(&cpu, f);
    tl_plan_result a, b;
    CHECK(tl_plan_evaluate(m, &disk, w, pol, &a) == TL_OK);
    CHECK(tl_plan_evaluate(m, &cpu, w, pol, &b) == TL_OK);
    return fmax(a.cost.total_s, b.cost.total_s) *
           (pol->kv_recompute > 0 ? 1 + TL_PLAN_RECOMPUTE_MARGIN : 1);
}

/* The ranking is best first, its policies distinct, the choice among them; the choice is
 * the fastest, or a near tie whose worst case is no worse than the fastest one's, and no
 * candidate within the spread has a smaller worst case. */
static void check_ranking(tl_model *m, const tl_hw_profile *prof, const tl_plan_request *rq,
                          const tl_plan_result *r, const tl_plan_ranking *rk, int t) {
    CHECK_MSG(rk->n >= 1 && rk->n <= TL_PLAN_RANKED && rk->chosen >= 0 && rk->chosen < rk->n,
              "case %d: %d ranked, chosen %d", t, (int)rk->n, (int)rk->chosen);
    if (rk->n < 1 || rk->chosen < 0 || rk->chosen >= rk->n) return;
    CHECK(!memcmp(&r->policy, &rk->cand[rk->chosen].policy, sizeof r->policy));
    CHECK(r->robust_pick == (rk->chosen != 0));
    for (int i = 1; i < rk->n; i++) {
        CHECK_MSG(key_of(&rk->cand[i]) >= key_of(&rk->cand[i - 1]) * (1 - 1e-9),
                  "case %d: rank %d predicted %g before rank %d's %g", t, i - 1,
                  key_of(&rk->cand[i - 1]), i, key_of(&rk->cand[i]));
        for (int j = 0; j < i; j++)
            CHECK(memcmp(&rk->cand[i].policy, &rk->cand[j].policy, sizeof r->policy) != 0);
    }
    const double fastest = key_of(&rk->cand[0]);
    CHECK(key_of(r) <= fastest * (1 + TL_PLAN_ERROR_SPREAD) * (1 + 1e-9));
    const double chosen_worst = worst_of(m, prof, &rq->w, &r->policy);
    for (int i = 0; i < rk->n && key_of(&rk->cand[i]) <= fastest * (1 + TL_PLAN_ERROR_SPREAD); i++)
        CHECK_MSG(chosen_worst <= worst_of(m, prof, &rq->w, &rk->cand[i].policy) * (1 + 1e-9),
                  "case %d: rank %d's worst case beats the choice's %g", t, i, chosen_worst);
}

static void property(int cases, int runs) {
    tl_hw_profile prof;
    tl_test_round_profile(&prof);
    int found = 0, nomem = 0, ran = 0;
    const int32_t types[3] = {0, 1, 8};
    for (int t = 0; t < cases; t++) {
        char path[256], tag[32];
        int32_t heads = 1 << rnd_in(1, 3), hd = 16 * rnd_in(1, 2);
        int32_t kvh = heads >> rnd_in(0, 1);
        snprintf(tag, sizeof tag, "p%d", t % 6);
        if (t % 6 == 0 || t < 6) { /* a few distinct models, re-used */ }
        if (!synth(tag, rnd_in(260, 400), heads * hd, 32 * rnd_in(2, 8), rnd_in(1, 4), heads, kvh,
                   types[rnd_in(0, 2)], path, sizeof path)) {
            CHECK(0);
            continue;
        }
        tl_model_params mp = tl_model_default_params();
        mp.n_threads = 1;
        mp.mem_budget = (uint64_t)rnd_in(1, 64) << 18; /* 256 KiB .. 16 MiB */
        tl_model *m;
        if (tl_model_open(path, &mp, &m) != TL_OK) {
            nomem++; /* the budget does not even hold the norms: a clear error is right */
            continue;
        }
        tl_plan_request rq;
        memset(&rq, 0, sizeof rq);
        rq.single = rnd_in(0, 2) == 0;
        rq.w.prompt_len = rnd_in(1, 40);
        rq.w.gen_len = rnd_in(1, 12);
        rq.w.num_seqs = rq.single ? 1 : rnd_in(1, 24);
        rq.overlap = rnd_in(0, 3) != 0;
        rq.allow_lossy_kv = rnd_in(0, 1);
        tl_plan_result r;
        tl_plan_ranking rk;
        tl_status st = tl_plan_search_ranked(m, &prof, &rq, &r, &rk);
        if (st == TL_OK) {
            found++;
            check_ranking(m, &prof, &rq, &r, &rk, t);
            CHECK_MSG(r.mem_bytes <= tl_budget_limit(m->lm.budget), "case %d: dry run %llu > %llu",
                      t, (unsigned long long)r.mem_bytes,
                      (unsigned long long)tl_budget_limit(m->lm.budget));
            /* and independently of the search's own bookkeeping */
            tl_plan_result again;
            CHECK(tl_plan_evaluate(m, &prof, &rq.w, &r.policy, &again) == TL_OK);
            CHECK(again.mem_bytes == r.mem_bytes);
            if (ran < runs) {
                run_policy(m, &rq, &r);
                ran++;
            }
        } else {
            CHECK_MSG(st == TL_ERR_NOMEM, "case %d: %s", t, tl_last_error());
            nomem++;
            /* the leanest policy does not fit either */
            tl_policy lean = tl_plan_default_policy(m, &rq);
            lean.gbs = lean.num_gb = 1;
            lean.prefill_rows = 16;
            lean.kv_mem_pct = rq.single ? 100 : 0;
            lean.prefetch = rq.overlap ? 1 : 0;
            lean.w_mem_pct = 0;
            tl_plan_result lr;
            CHECK_MSG(tl_plan_evaluate(m, &prof, &rq.w, &lean, &lr) != TL_OK,
                      "case %d: the search found nothing but the lean policy fits (single %d, "
                      "overlap %d, %d seqs, budget %llu)", t, (int)rq.single, (int)rq.overlap,
                      (int)rq.w.num_seqs, (unsigned long long)tl_budget_limit(m->lm.budget));
        }
        tl_model_close(m);
    }
    fprintf(stderr, "property: %d cases, %d planned (%d run), %d too small for any policy\n",
            cases, found, ran, nomem);
    CHECK(found > cases / 4);
    CHECK(ran == runs);
}

/* ---- 3. KV tiers in the latency regime ----
 * A context whose KV cache does not fit in memory: the search puts it in tiers, its
 * choice of cache size and recomputing layers is within 2% of the best of a sweep of
 * both at the same other knobs, and the engine opens that policy within the budget and
 * runs it. A model whose input rows are wider than K and V together (grouped KV heads)
 * cannot recompute: the search never plans it, however slow the disk. */
static void tiers_search(const char *path, uint64_t budget, double disk_bps, int run,
                         int can_recompute) {
    tl_model *m = open_model(path, budget);
    if (!m) return;
    tl_hw_profile prof;
    tl_test_round_profile(&prof);
    tl_test_profile_set_disk(&prof, disk_bps); /* a slow disk, so the cache matters */
    tl_plan_request rq;
    memset(&rq, 0, sizeof rq);
    rq.single = 1;
    rq.overlap = 1;
    rq.w = (tl_workload){.prompt_len = 2000, .gen_len = 40, .num_seqs = 1};
    rq.n_ctx = 2048;
    tl_plan_result r;
    const tl_status found = tl_plan_search(m, &prof, &rq, &r);
    CHECK_MSG(found == TL_OK, "%s", tl_last_error());
    if (found) {
        tl_model_close(m);
        return;
    }
    CHECK(r.policy.kv_window_pages > 0 && r.policy.kv_mem_pct == 0);
    CHECK(r.mem_bytes <= r.budget_bytes);
    CHECK(r.cost.decode_kv_pages_needed > 0 &&
          r.cost.decode_kv_pages_read <= r.cost.decode_kv_pages_needed);
    double sweep_best = HUGE_VAL;
    int32_t best_cache = -1;
    int32_t best_rc = -1;
    for (int32_t c = 0; c <= 700; c += 10)
        for (int32_t rc = 0; rc <= 8; rc++) { /* and every count of recomputing layers */
            tl_policy q = r.policy;
            q.kv_cache_pages = c;
            q.kv_recompute = rc;
            q.kv_inputs = rc > 0;
            tl_plan_result e;
            if (tl_plan_evaluate(m, &prof, &rq.w, &q, &e)) continue;
            if (e.cost.total_s < sweep_best) {
                sweep_best = e.cost.total_s;
                best_cache = c;
                best_rc = rc;
            }
        }
    CHECK_MSG(r.cost.total_s <= sweep_best * 1.02, "search %.4f s (cache %d) vs sweep %.4f s "
              "(cache %d)", r.cost.total_s, (int)r.policy.kv_cache_pages, sweep_best,
              (int)best_cache);
    fprintf(stderr, "tiers: cache %d pages, %d layers recompute, predicted %.4f s; sweep "
            "best cache %d, %d layers recompute, %.4f s\n", (int)r.policy.kv_cache_pages,
            (int)r.policy.kv_recompute, r.cost.total_s, (int)best_cache, (int)best_rc,
            sweep_best);
    /* reading a page's 32 KiB of K and V takes 0.33 ms at 1e8 B/s, recomputing it from
     * its 16 KiB of input rows 2 ms of products at 1e9 MAC/s: load; at 1e6 B/s, the 16
     * KiB saved take 16 ms: recompute, though the input rows of the pages in memory push
     * weights out to stream (2000 positions: the pages read outweigh them) */
    CHECK_MSG((r.policy.kv_recompute > 0) == (can_recompute && disk_bps < 1e7), "%d layers "
              "recompute at a disk of %.0e B/s", (int)r.policy.kv_recompute, disk_bps);
    if (!run) {
        tl_model_close(m);
        return;
    }
    /* the engine holds the planned policy within the budget */
    tl_plan_apply(&r.policy, m, NULL);
    tl_context_params cp = tl_context_default_params();
    tl_plan_context_params(&r.policy, m, &cp);
    tl_context *c = NULL;
    CHECK_MSG(tl_context_open(m, &cp, &c) == TL_OK, "%s", tl_last_error());
    if (c) {
        CHECK(tl_context_kv_params(c)->placement == TL_KV_TEMPERATURE &&
              tl_context_kv_params(c)->cache_pages == r.policy.kv_cache_pages);
        int32_t *tok = malloc(1540 * sizeof *tok);
        for (int i = 0; i < 1540; i++) tok[i] = 3 + i % 250;
        CHECK(tl_decode(c, tok, 1500, NULL) == TL_OK);
        for (int i = 1500; i < 1540; i++) CHECK(tl_decode(c, tok + i, 1, NULL) == TL_OK);
        tl_run_stats st;
        tl_context_get_stats(c, &st);
        CHECK(st.budget_peak_bytes <= budget && st.kv_pages_read > 0);
        free(tok);
        tl_context_close(c);
    }
    tl_model_close(m);
}

/* ---- 4. KV pages at calibration ---- */

/* A planned policy that keeps kv_mem_pct of its 16-bit KV in memory, the rest on disk,
 * and whose decode reads a MB of pages a step: what tl_plan_calibrate_kv looks at. */
static tl_plan_result spilling_plan(int32_t kv_mem_pct) {
    tl_plan_result plan;
    memset(&plan, 0, sizeof plan);
    plan.policy.gbs = plan.policy.num_gb = 1;
    plan.policy.kv_mem_pct = kv_mem_pct;
    plan.policy.kv_bits = 16;
    plan.policy.page_tokens = 16;
    plan.cost.decode.kv_read_bytes = 1e6;
    return plan;
}

/* The fewest positions a 16-bit page holds (a power of two) for it to take at least
 * `bytes`: a page the profile's grid of reads covers from tl_prof_chunks[0] on. */
static int32_t page_tokens_of(const tl_model *m, double bytes) {
    int32_t pt = 1;
    while (tl_cost_kv_page_bytes(m, 16, pt) < bytes) pt *= 2;
    return pt;
}

/* The workload the spilling plans serve: one sequence of 1024 prompt positions and 16
 * generated: with half of its pages on disk, 32 of 16 positions per layer, or a few of
 * a page the profile's grid covers. */
static const tl_workload spill_workload = {1024, 16, 1, {0}};

/* KV pages read beside streamed weights: timed alone (the spill file's rate, below the
 * engine's chunk) and between the units of passes through the ring; the lower rate is
 * kept (the page's factor is at most the one its reads alone gave), every cell below the
 * chunk moves by it, and the profile's figures for a page queued behind the stream stay
 * (the cost model's KV wait prices that queueing). */
static void kv_beside_stream(const char *path) {
    tl_model *m = open_model(path, 10u << 20);
    if (!m) return;
    CHECK(tl_engine_place(m, 4u << 20) == TL_OK);
    CHECK_MSG(tl_residency_plan(m->res)->streamed_bytes > 0, "nothing streams");
    tl_hw_profile prof, round;
    tl_test_round_profile(&round);
    snprintf(round.disk_dir, sizeof round.disk_dir, "%s", tl_scratch_dir(NULL));
    tl_plan_result plan = spilling_plan(0);
    plan.policy.page_tokens = page_tokens_of(m, (double)tl_prof_chunks[0]);
    plan.streamed_bytes = tl_residency_plan(m->res)->streamed_bytes;
    plan.cost.decode.weight_bytes = 2e6;
    double scale = -1, alone = -1;
    prof = round;
    CHECK_MSG(tl_plan_calibrate_kv(m, &prof, &plan, &spill_workload, NULL, &scale, &alone) ==
                  TL_OK,
              "%s", tl_last_error());
    CHECK_MSG(scale > 0 && alone > 0 && scale <= alone, "page scale %g, alone %g", scale,
              alone);
    CHECK(memcmp(prof.disk_read_bps, round.disk_read_bps, sizeof prof.disk_read_bps));
    CHECK(close_to(prof.disk_read_bps[0][0] / round.disk_read_bps[0][0], scale, 1e-9));
    CHECK(prof.disk_urgent_read_s == round.disk_urgent_read_s &&
          prof.disk_urgent_page_s == round.disk_urgent_page_s);
    tl_engine_unplace(m);
    tl_model_close(m);
}

/* KV pages read alone from a scratch file laid out as the spill (tl_plan_calibrate_kv):
 * for a policy that spills and reads pages, every cell below the engine's chunk is scaled
 * by one factor, the page's rate moves by *page_scale, the stream's cells stay; a page
 * of the profile's grid is timed as well as one below it (the profile's random reads of
 * its own file are not the spill's); a directory that cannot hold the file, a policy
 * that keeps its KV in memory, and no workload leave the profile as it was. */
static void kv_spill_calibration(const char *path) {
    tl_model *m = open_model(path, 64u << 20);
    if (!m) return;
    CHECK(tl_engine_place(m, 4u << 20) == TL_OK);
    CHECK_MSG(tl_residency_plan(m->res)->streamed_bytes == 0, "weights stream");
    tl_hw_profile prof, round;
    tl_test_round_profile(&round);
    snprintf(round.disk_dir, sizeof round.disk_dir, "%s", tl_scratch_dir(NULL));
    tl_plan_result plan = spilling_plan(50);
    const tl_workload *w = &spill_workload;
    const size_t grid = sizeof prof.disk_read_bps;
    const int32_t depth = tl_aio_class_depth(m->lm.params.io_queue_depth, TL_AIO_SOON);
    const int32_t pts[2] = {16, page_tokens_of(m, (double)tl_prof_chunks[0])};
    CHECK_MSG(tl_cost_kv_page_bytes(m, 16, 16) < tl_prof_chunks[0], "a %g-byte page",
              tl_cost_kv_page_bytes(m, 16, 16));
    for (int p = 0; p < 2; p++) {
        plan.policy.page_tokens = pts[p];
        const uint64_t page = (uint64_t)tl_cost_kv_page_bytes(m, 16, pts[p]);
        const double before = tl_profile_read_bps(&round, page, depth);
        double scale = 0, alone = -1;
        prof = round;
        CHECK_MSG(tl_plan_calibrate_kv(m, &prof, &plan, w, NULL, &scale, &alone) == TL_OK, "%s",
                  tl_last_error());
        /* nothing streams: the reads alone decide */
        CHECK_MSG(alone == scale, "page scale %g, alone %g", scale, alone);
        CHECK_MSG(scale > 0, "spill reads of %llu-byte pages not timed (scale %g)",
                  (unsigned long long)page, scale);
        CHECK(close_to(tl_profile_read_bps(&prof, page, depth), before * scale, 1e-9));
        int off = 0;
        const double f = prof.disk_read_bps[0][0] / round.disk_read_bps[0][0];
        for (int c = 0; c < TL_PROF_N_CHUNK; c++)
            for (int d = 0; d < TL_PROF_N_DEPTH; d++) {
                const double g = prof.disk_read_bps[c][d] / round.disk_read_bps[c][d];
                const int big = tl_prof_chunks[c] >= m->lm.params.io_chunk_bytes;
                off += big ? g != 1 : !close_to(g, f, 1e-9);
            }
        CHECK_MSG(off == 0, "%d cells off the one factor", off);
        /* the rate timed now is the round profile's only by chance: the cells moved */
        CHECK_MSG(close_to(f, scale, 1e-9) && scale != 1.0, "factor %.9g, page scale %.9g",
                  f, scale);
    }
    plan.policy.page_tokens = 16;
    double scale = -1;
    prof = round;
    CHECK(tl_plan_calibrate_kv(m, &prof, &plan, w, "/nonexistent/dir", &scale, NULL) == TL_OK);
    CHECK(scale == 0 && !memcmp(prof.disk_read_bps, round.disk_read_bps, grid));
    scale = -1;
    CHECK(tl_plan_calibrate_kv(m, &prof, &plan, NULL, NULL, &scale, NULL) == TL_OK);
    CHECK(scale == 0 && !memcmp(prof.disk_read_bps, round.disk_read_bps, grid));
    plan.policy.kv_mem_pct = 100;
    scale = -1;
    CHECK(tl_plan_calibrate_kv(m, &prof, &plan, w, NULL, &scale, NULL) == TL_OK);
    CHECK(scale == 0 && !memcmp(prof.disk_read_bps, round.disk_read_bps, grid));
    tl_engine_unplace(m);
    tl_model_close(m);
}

/* The calibration's rounds (calibrate.h): the median measured ratio of each row count is
 * kept; two rounds that agree within 5% end it, else a third does; an unmeasured ratio
 * (0) agrees only with another. */
/* The pages' rate beside the stream (tl_plan_kv_rate_beside): each round's bytes over the
 * seconds its pass added to the mean of the passes alone on either side, the median
 * round's; pages that added nothing are free (HUGE_VAL); no rounds: 0. */
static void kv_rate_beside(void) {
    const double alone[4] = {0.10, 0.12, 0.10, 0.11}, bytes[3] = {100e6, 100e6, 100e6};
    const double mixed[3] = {0.31, 0.16, 0.50};
    /* extras 0.20, 0.05, 0.395 s: 0.5, 2 and 0.253 GB/s */
    CHECK_MSG(close_to(tl_plan_kv_rate_beside(alone, mixed, bytes, 3), 0.5e9, 1e-9), "%g",
              tl_plan_kv_rate_beside(alone, mixed, bytes, 3));
    CHECK(close_to(tl_plan_kv_rate_beside(alone, mixed, bytes, 1), 0.5e9, 1e-9));
    const double free_[3] = {0.10, 0.31, 0.09};
    CHECK(tl_plan_kv_rate_beside(alone, free_, bytes, 3) == HUGE_VAL);
    CHECK(tl_plan_kv_rate_beside(alone, mixed, bytes, 0) == 0);
}

static void products_rounds(void) {
    enum { K = TL_PLAN_PRODUCTS_POINTS };
    CHECK(K == 6);
    double r[K] = {0};
    const double agreeing[2][K] = {{1.0, 0.9, 0.8, 0.95, 1.1, 1.2},
                                   {1.02, 0.91, 0.82, 0.96, 1.09, 1.18}};
    CHECK(!tl_plan_products_round(agreeing, 0, r) && r[0] == 1.0 && r[3] == 0.95);
    /* two rounds that agree: the end, at their mean */
    CHECK(tl_plan_products_round(agreeing, 1, r) && close_to(r[0], 1.01, 1e-12) &&
          close_to(r[1], 0.905, 1e-12) && close_to(r[2], 0.81, 1e-12) &&
          close_to(r[3], 0.955, 1e-12) && close_to(r[4], 1.095, 1e-12) &&
          close_to(r[5], 1.19, 1e-12));
    /* a slow spell in the first round at 128 rows: the second disagrees, the third ends,
     * each count at its middle round (not the lowest: 0.96 at 128, 1.0 at 16) */
    double s[K] = {0};
    const double spell[3][K] = {{1.0, 1, 1, 1.8, 1, 1}, {1.01, 1, 1, 0.96, 1, 1},
                                {1.1, 1, 1, 1.2, 1, 1}};
    CHECK(!tl_plan_products_round(spell, 0, s));
    CHECK(!tl_plan_products_round(spell, 1, s) && close_to(s[3], 1.38, 1e-12));
    CHECK(tl_plan_products_round(spell, 2, s) && s[0] == 1.01 && s[3] == 1.2);
    /* one count alone disagreeing is enough for a third round */
    double o[K] = {0};
    const double one[2][K] = {{1, 1, 1, 1, 1, 1}, {1, 1, 1, 1, 1, 1.2}};
    CHECK(!tl_plan_products_round(one, 0, o));
    CHECK(!tl_plan_products_round(one, 1, o) && close_to(o[5], 1.1, 1e-12));
    /* a count no round measured stays unmeasured; one measured once takes that round's */
    double z[K] = {0};
    const double zero[2][K] = {{0, 1, 1, 1.0, 1, 1}, {0, 1, 1, 1.01, 1, 1}};
    CHECK(!tl_plan_products_round(zero, 0, z));
    CHECK(tl_plan_products_round(zero, 1, z) && z[0] == 0 && close_to(z[3], 1.005, 1e-12));
    double h[K] = {0};
    const double half[2][K] = {{0, 1, 1, 1.0, 1, 1}, {0.9, 1, 1, 1.0, 1, 1}};
    CHECK(!tl_plan_products_round(half, 0, h));
    CHECK(!tl_plan_products_round(half, 1, h) && h[0] == 0.9 && h[3] == 1.0);
}

/* The decode pass the ring calibration holds its units for (tl_plan_decode_shape_of): one
 * row for a single sequence, else the block's sequences in micro-batches of gbs; and each
 * hold by hand (tl_plan_ring_hold_s): a layer's even share of the pass's compute without
 * the output's product, the output unit that product over every row, each plus its
 * repacking; a pass of 2 x 8 rows holds every unit longer than a pass of one row. */
static void ring_hold_targets(const tl_model *m, const tl_hw_profile *prof,
                              const tl_weight_plan *wp) {
    tl_policy pol;
    memset(&pol, 0, sizeof pol);
    pol.kv_bits = 16, pol.gbs = 4, pol.num_gb = 3;
    tl_workload w = {.prompt_len = 60, .gen_len = 8, .num_seqs = 10};
    tl_plan_decode_shape d = tl_plan_decode_shape_of(&pol, &w);
    CHECK_MSG(d.kv_bits == 16 && d.n_mb == 3 && d.rows == 4 && d.ctx == 64, "%d %d %g",
              (int)d.n_mb, (int)d.rows, d.ctx);
    w.num_seqs = 50; /* a block holds gbs x num_gb of them */
    d = tl_plan_decode_shape_of(&pol, &w);
    CHECK(d.n_mb == 3 && d.rows == 4);
    w.num_seqs = 5;
    d = tl_plan_decode_shape_of(&pol, &w);
    CHECK(d.n_mb == 2 && d.rows == 3);
    pol.single = 1;
    d = tl_plan_decode_shape_of(&pol, &w);
    CHECK(d.n_mb == 1 && d.rows == 1);
    const int32_t L = m->lm.hp.n_layer;
    const tl_weight *out = m->lm.tied_output ? &m->lm.tok_embd : &m->lm.output;
    const tl_plan_decode_shape one = {16, 1, 1, 64}, many = {16, 8, 2, 64};
    const int32_t r1[1] = {1}, r8[2] = {8, 8};
    const double c1[1] = {64}, c8[2] = {8 * 64, 8 * 64};
    const double pass1 = tl_cost_pass_compute(m, prof, 16, r1, c1, c1, 1, 1, 1, 1, 1, NULL);
    const double pass8 = tl_cost_pass_compute(m, prof, 16, r8, c8, c8, 2, 1, 1, 16, 1, NULL);
    for (int32_t u = 0; u <= L; u++) {
        const double rep = tl_cost_unit_repack_s(m, prof, wp, u);
        const double want1 = u == L ? tl_cost_matmul(prof, out, 1) + rep
                                    : (pass1 - tl_cost_matmul(prof, out, 1)) / L + rep;
        const double want8 = u == L ? tl_cost_matmul(prof, out, 16) + rep
                                    : (pass8 - tl_cost_matmul(prof, out, 16)) / L + rep;
        const double h1 = tl_plan_ring_hold_s(m, prof, wp, u, &one);
        const double h8 = tl_plan_ring_hold_s(m, prof, wp, u, &many);
        CHECK_MSG(fabs(h1 - want1) <= 1e-12 + 1e-9 * want1 &&
                      fabs(h8 - want8) <= 1e-12 + 1e-9 * want8 && h8 > h1 && h1 > 0,
                  "unit %d: %g (by hand %g), %g (by hand %g)", (int)u, h1, want1, h8, want8);
    }
}

/* The ring calibration on a streamed plan (calibrate_ring.c): it holds each unit with a
 * resident matrix's products, or with the pool spinning where none is resident; either
 * way it ends cleanly with a finite delay (0 or more) that the profile keeps, its holds
 * as long as the unit's compute and repacking, and every streamed unit unbound after. */
static void ring_calibration(const char *path, uint64_t budget, uint64_t state) {
    tl_model *m = open_model(path, budget);
    if (!m) return;
    CHECK(tl_engine_place(m, state) == TL_OK);
    const tl_weight_plan *wp = tl_residency_plan(m->res);
    CHECK(wp->overlap && wp->streamed_bytes > 0);
    tl_hw_profile prof;
    tl_test_round_profile(&prof);
    double delay = -1;
    const tl_plan_decode_shape ds = {32, 1, 1, 64};
    CHECK_MSG(tl_plan_calibrate_ring(m, &prof, &ds, &delay) == TL_OK, "%s",
              tl_last_error());
    CHECK_MSG(delay >= 0 && isfinite(delay) && delay == prof.ring_unit_delay_s,
              "delay %g, profile's %g", delay, prof.ring_unit_delay_s);
    for (int32_t l = 0; l < m->lm.hp.n_layer; l++)
        if (tl_weight_plan_unit_bytes(&m->lm, wp, l) > 0) CHECK(!m->lm.layers[l].wq.data);
    ring_hold_targets(m, &prof, wp);
    tl_engine_unplace(m);
    tl_model_close(m);
}

/* A prefill layer priced alone (tl_cost_prefill_layer_s) by hand with the round profile,
 * and the compute's slowdown beside the stream scaled by the calibrated rate (the
 * products' and element-wise part only, within [1/4, 4]). */
static void prefill_layer_and_rate_scale(const char *path) {
    tl_model *m = open_model(path, 64u << 20);
    if (!m) return;
    tl_hw_profile prof;
    tl_test_round_profile(&prof);
    /* the "hand" model: d 128, f 320, 8 heads of 16, 2 kv heads; 4 rows see 10 positions */
    const double mm_row = (128.0 * 128 + 32 * 128 + 32 * 128 + 128 * 128 + 3 * 320 * 128) / 1e9;
    const double elem_row = (4 * 128 + 3 * 320) * 1e-9, attn_pos = 8 * 16 * 2e-9, fixed = 1e-5;
    double at = 0;
    const double layer = tl_cost_prefill_layer_s(m, &prof, 1, 32, 4, 16, &at);
    CHECK_MSG(close_to(at, 10 * attn_pos, 1e-9), "attention %g, by hand %g", at, 10 * attn_pos);
    CHECK_MSG(close_to(layer, 4 * mm_row + 10 * attn_pos + 4 * elem_row + fixed, 1e-9),
              "layer %g", layer);
    /* a calibrated layer scale: the work beside attention times it, over 4 rows only, a
     * count between the grid's points at the lower point's (9 rows: 8's) */
    for (int k = 0; k < TL_PROF_N_ROWS; k++)
        prof.layer_row_scale[k] = tl_prof_rows[k] == 8 ? 0.5 : tl_prof_rows[k] == 4 ? 3 : 0;
    CHECK(close_to(tl_cost_prefill_layer_s(m, &prof, 1, 32, 4, 16, NULL), layer, 1e-12));
    const double l9 = tl_cost_prefill_layer_s(m, &prof, 1, 32, 9, 16, &at);
    CHECK_MSG(close_to(at, 45 * attn_pos, 1e-9) &&
                  close_to(l9, 0.5 * (9 * mm_row + 9 * elem_row + fixed) + 45 * attn_pos, 1e-9),
              "9 rows at half: %g", l9);
    for (int k = 0; k < TL_PROF_N_ROWS; k++) prof.layer_row_scale[k] = 0;
    /* slowdowns: only io_compute_slowdown's excess follows the rate */
    const int32_t rows8[1] = {8}, rows1[1] = {1};
    const double ctx8[1] = {36}, ctx1[1] = {9}, none[1] = {0};
    prof.io_compute_slowdown = 1.2, prof.io_slowdown_matvec = 1, prof.io_slowdown_attn = 1;
    double s1 = 0, s3 = 0, s10 = 0;
    tl_cost_pass_compute(m, &prof, 32, rows8, ctx8, none, 1, 8, 1, 0, 1, &s1);
    prof.io_rate_scale = 3;
    tl_cost_pass_compute(m, &prof, 32, rows8, ctx8, none, 1, 8, 1, 0, 1, &s3);
    prof.io_rate_scale = 10;
    tl_cost_pass_compute(m, &prof, 32, rows8, ctx8, none, 1, 8, 1, 0, 1, &s10);
    CHECK_MSG(s1 > 1 && close_to(s3 - 1, 3 * (s1 - 1), 1e-9) &&
                  close_to(s10 - 1, 4 * (s1 - 1), 1e-9),
              "slowdowns %g at 1, %g at 3, %g at 10 (capped at 4)", s1, s3, s10);
    /* one measured beside the model file's stream replaces the extrapolation, at any
     * rate; one measured below 1 is none */
    double sm = 0;
    prof.io_slowdown_stream = 1.5;
    tl_cost_pass_compute(m, &prof, 32, rows8, ctx8, none, 1, 8, 1, 0, 1, &sm);
    CHECK_MSG(close_to(sm - 1, 2.5 * (s1 - 1), 1e-9), "measured 1.5: %g (1.2 gave %g)", sm, s1);
    prof.io_slowdown_stream = 0.8;
    tl_cost_pass_compute(m, &prof, 32, rows8, ctx8, none, 1, 8, 1, 0, 1, &sm);
    CHECK_MSG(sm == 1, "measured 0.8: %g", sm);
    prof.io_slowdown_stream = 0;
    prof.io_compute_slowdown = 1, prof.io_slowdown_matvec = 1.5, prof.io_rate_scale = 0;
    tl_cost_pass_compute(m, &prof, 32, rows1, ctx1, none, 1, 1, 1, 1, 1, &s1);
    prof.io_rate_scale = 3;
    tl_cost_pass_compute(m, &prof, 32, rows1, ctx1, none, 1, 1, 1, 1, 1, &s3);
    CHECK_MSG(s1 > 1 && s1 == s3, "matrix-vector slowdown %g, at 3x the rate %g", s1, s3);
    tl_model_close(m);
}

/* The model at path placed with `state` bytes of state, and its first layer's type on the
 * profile's axis (*ty); NULL (closed, a check failed) when either fails. */
static tl_model *placed_typed(const char *path, uint64_t budget, uint64_t state, int *ty) {
    tl_model *m = open_model(path, budget);
    if (!m) return NULL;
    CHECK(tl_engine_place(m, state) == TL_OK);
    *ty = tl_type_index((uint32_t)m->lm.layers[0].wq.type);
    CHECK(*ty >= 0);
    if (*ty < 0) {
        tl_model_close(m);
        return NULL;
    }
    return m;
}

/* ---- 5. a layer's forward over many rows timed at calibration ----
 * Products above 4 rows priced absurdly slow for the layer's type: the layer's work beside
 * attention is scaled back to the machine's rate, each count from 16 up by its own ratio,
 * 8 rows by the one at 16, up to 4 rows not at all; *ratio the one furthest from 1. The
 * profile's own figures and the disk keep theirs. Resident and streamed (the unit read on
 * its own and unbound after), and for a quantized type, whose place on the profile's axis
 * is not its tl_type value. */
static void products_calibration(const char *path, uint64_t budget, uint64_t state, int streams) {
    int ty;
    tl_model *m = placed_typed(path, budget, state, &ty);
    if (!m) return;
    const tl_weight *wq = &m->lm.layers[0].wq;
    CHECK_MSG(streams == !wq->data, "layer 0 %s", wq->data ? "resident" : "streamed");
    tl_hw_profile prof;
    tl_test_round_profile(&prof);
    for (int r = 0; r < TL_PROF_N_ROWS; r++)
        if (tl_prof_rows[r] > 4) prof.matmul_macs[ty][r] = 1e3;
    prof.layer_row_scale[TL_PROF_N_ROWS - 1] = 7; /* an earlier calibration's: replaced */
    prof.io_slowdown_stream = prof.io_stream_cal_bps = 7;
    const tl_hw_profile before = prof;
    tl_residency_stats rs0, rs1;
    tl_residency_get_stats(m->res, &rs0);
    double ratio = 0;
    CHECK_MSG(tl_plan_calibrate_products(m, &prof, &ratio) == TL_OK, "%s", tl_last_error());
    tl_residency_get_stats(m->res, &rs1);
    CHECK(rs1.passes == rs0.passes && rs1.bytes_read_disk == rs0.bytes_read_disk);
    CHECK(streams == !wq->data); /* a streamed unit is unbound again */
    /* a plan that streams has the forward timed beside the model file's stream too (the
     * reads its own: the run's counters above stay); one that does not, not */
    if (streams)
        CHECK_MSG(prof.io_slowdown_stream > 0.5 && prof.io_slowdown_stream < 5 &&
                      prof.io_stream_cal_bps > 0,
                  "beside the stream x%g at %g B/s", prof.io_slowdown_stream,
                  prof.io_stream_cal_bps);
    else
        CHECK(prof.io_slowdown_stream == 0 && prof.io_stream_cal_bps == 0);
    CHECK_MSG(ratio > 0 && ratio < 1e-3, "layers at %g of a 1 kMAC/s price", ratio);
    if (!streams) CHECK(prof.attn_block_scale > 0); /* attention timed first (room) */
    double f16 = 0, lowest = 1;
    const double *f = prof.layer_row_scale;
    for (int r = 0; r < TL_PROF_N_ROWS; r++) {
        if (tl_prof_rows[r] == 16) f16 = f[r];
        if (tl_prof_rows[r] > 4) lowest = fmin(lowest, f[r]);
    }
    CHECK(close_to(ratio, lowest, 1e-9));
    for (int r = 0; r < TL_PROF_N_ROWS; r++) {
        const int32_t n = tl_prof_rows[r];
        if (n <= 4) CHECK(f[r] == 0);
        else if (n < 16) CHECK(close_to(f[r], f16, 1e-9));
        else CHECK_MSG(f[r] > 0 && f[r] < 1e-3, "%d rows scaled by %g", (int)n, f[r]);
        /* each timed count its own ratio: 32 rows not 16's (a forward at 32 rows takes
         * neither exactly twice nor exactly the time of one at 16) */
        if (n == 32) CHECK_MSG(f[r] != f16, "32 rows scaled as 16 (%g)", f[r]);
        CHECK(prof.matmul_macs[ty][r] == before.matmul_macs[ty][r] &&
              prof.matmul_call_s[ty][r] == before.matmul_call_s[ty][r]);
    }
    for (int t = 0; t < TL_PROF_N_TYPE; t++)
        for (int r = 0; r < TL_PROF_N_ROWS && t != ty; r++)
            CHECK(prof.matmul_macs[t][r] == before.matmul_macs[t][r] &&
                  prof.matmul_call_s[t][r] == before.matmul_call_s[t][r]);
    for (int c = 0; c < TL_PROF_N_CHUNK; c++)
        for (int d = 0; d < TL_PROF_N_DEPTH; d++)
            CHECK(prof.disk_read_bps[c][d] == before.disk_read_bps[c][d]);
    tl_engine_unplace(m);
    tl_model_close(m);
}

/* ---- products of up to 4 rows timed at calibration (tl_plan_calibrate_compute) ----
 * 4-row products priced absurdly slow: the calibration times them on their own and brings
 * their figure back to the machine's rate, where 1-row products priced as the profile has
 * them move by their own ratio (*ratio), 2 rows by the two's geometric mean, and products
 * of more rows keep their figures. */
static void matvec_calibration(const char *path, uint64_t budget) {
    int ty;
    tl_model *m = placed_typed(path, budget, 0, &ty);
    if (!m) return;
    tl_hw_profile prof;
    tl_test_round_profile(&prof);
    int at1 = -1, at2 = -1, at4 = -1;
    for (int r = 0; r < TL_PROF_N_ROWS; r++) {
        at1 = tl_prof_rows[r] == 1 ? r : at1;
        at2 = tl_prof_rows[r] == 2 ? r : at2;
        at4 = tl_prof_rows[r] == 4 ? r : at4;
    }
    prof.matmul_macs[ty][at4] = 1e3;
    const tl_hw_profile before = prof;
    double ratio = 0;
    CHECK_MSG(tl_plan_calibrate_compute(m, &prof, &ratio) == TL_OK, "%s", tl_last_error());
    const double *macs = prof.matmul_macs[ty], *was = before.matmul_macs[ty];
    const double r4 = was[at4] / macs[at4];
    CHECK_MSG(ratio > 0 && close_to(macs[at1], was[at1] / ratio, 1e-9), "1 row: ratio %g", ratio);
    CHECK_MSG(r4 < 1e-3 && macs[at4] > 1e6, "4 rows: %g MAC/s (ratio %g)", macs[at4], r4);
    CHECK_MSG(close_to(macs[at2], was[at2] / sqrt(ratio * r4), 1e-9), "2 rows: %g", macs[at2]);
    for (int r = 0; r < TL_PROF_N_ROWS; r++)
        if (tl_prof_rows[r] > 4)
            CHECK(macs[r] == was[r] && prof.matmul_call_s[ty][r] == before.matmul_call_s[ty][r]);
    tl_engine_unplace(m);
    tl_model_close(m);
}

/* ---- the model's own attention timed at calibration ----
 * The factor is the measured attention over its price: a profile whose block figure is
 * three times the rate just measured gets about a third (the machine's wander allowed
 * for); one absurdly slow is held at the bound; an earlier factor is replaced; with little
 * room it is measured on fewer copies of the KV, with none nothing is (factor 1, none
 * set). */
static void attention_calibration(const char *path) {
    tl_model *m = open_model(path, 64u << 20);
    if (!m) return;
    tl_hw_profile prof;
    tl_test_round_profile(&prof);
    prof.attn_s_per_mac = 1e-6; /* a single row's: above every block figure below */
    prof.attn_block_scale = 7; /* an earlier calibration's: replaced */
    /* a figure near the rate measured (one thread; a sanitizer's build runs slower): one
     * whose factor lands on a bound is moved by it and timed again */
    double base = 3e-10, k1 = 0;
    for (int i = 0; i < 4; i++) {
        prof.attn_block_s_per_mac = base;
        CHECK_MSG(tl_plan_calibrate_attention(m, &prof, &k1) == TL_OK, "%s", tl_last_error());
        if (k1 > 0.25 && k1 < 4) break;
        base *= k1;
    }
    CHECK_MSG(k1 > 0.25 && k1 < 4 && k1 == prof.attn_block_scale, "factor %g (set %g)", k1,
              prof.attn_block_scale);
    double per_mac = 0;
    const double priced = tl_cost_attention_s(m, &prof, TL_PLAN_ATTN_ROWS, 1024, 1088, 1,
                                              &per_mac);
    CHECK(priced > 0 && per_mac > 0 && per_mac <= priced);
    prof.attn_block_s_per_mac = 3 * base * k1; /* three times the rate measured */
    double k3 = 0;
    CHECK(tl_plan_calibrate_attention(m, &prof, &k3) == TL_OK);
    CHECK_MSG(k3 > 0.2 && k3 < 0.55, "three times dear: factor %g", k3);
    prof.attn_block_s_per_mac = 1e-7;
    CHECK(tl_plan_calibrate_attention(m, &prof, &k3) == TL_OK);
    CHECK_MSG(k3 == 0.25 && prof.attn_block_scale == 0.25, "absurdly dear: factor %g", k3);
    /* room for one copy of the layer's KV at the full context (4 MiB), not for 32 MiB of
     * copies at any context: measured with fewer copies */
    void *most = NULL;
    const size_t free8 = tl_budget_limit(m->lm.budget) - tl_budget_used(m->lm.budget) -
                         (8u << 20);
    CHECK(tl_budget_alloc(m->lm.budget, free8, 64, "test", &most) == TL_OK);
    prof.attn_block_s_per_mac = base;
    CHECK(tl_plan_calibrate_attention(m, &prof, &k3) == TL_OK);
    CHECK_MSG(prof.attn_block_scale > 0 && k3 == prof.attn_block_scale,
              "8 MiB of room: factor %g, set %g", k3, prof.attn_block_scale);
    tl_budget_free(m->lm.budget, most);
    void *all = NULL; /* the budget's room taken */
    const size_t room = tl_budget_limit(m->lm.budget) - tl_budget_used(m->lm.budget) - 4096;
    CHECK(tl_budget_alloc(m->lm.budget, room, 64, "test", &all) == TL_OK);
    CHECK(tl_plan_calibrate_attention(m, &prof, &k3) == TL_OK);
    CHECK_MSG(k3 == 1 && prof.attn_block_scale == 0, "no room: factor %g, set %g", k3,
              prof.attn_block_scale);
    tl_budget_free(m->lm.budget, all);
    tl_model_close(m);
}

/* The engine's streaming timed as decode reads it: whole passes, every streamed unit once
 * per pass (the output too: logits are needed), the run's counters untouched, the streamed
 * weights unbound again. */
static void measure_passes(const char *path, uint64_t budget, uint64_t state) {
    tl_model *m = open_model(path, budget);
    if (!m) return;
    CHECK(tl_engine_place(m, state) == TL_OK);
    const tl_weight_plan *wp = tl_residency_plan(m->res);
    CHECK(wp->overlap && wp->streamed_bytes > 0);
    uint64_t per_pass = 0;
    for (int32_t u = 0; u <= m->lm.hp.n_layer; u++)
        per_pass += tl_weight_plan_unit_bytes(&m->lm, wp, u);
    tl_residency_stats rs0, rs1;
    tl_residency_get_stats(m->res, &rs0);
    double s = 0;
    uint64_t b = 0;
    CHECK_MSG(tl_residency_measure_passes(m->res, 3, NULL, NULL, &s, &b) == TL_OK, "%s",
              tl_last_error());
    CHECK_MSG(b == 3 * per_pass, "read %llu bytes, 3 passes of %llu", (unsigned long long)b,
              (unsigned long long)per_pass);
    CHECK(s > 0);
    tl_residency_get_stats(m->res, &rs1);
    CHECK(rs1.passes == rs0.passes && rs1.bytes_read_disk == rs0.bytes_read_disk &&
          rs1.stall_s == rs0.stall_s && rs1.streamed_panel_bytes == rs0.streamed_panel_bytes);
    for (int32_t l = 0; l < m->lm.hp.n_layer; l++)
        if (tl_weight_plan_unit_bytes(&m->lm, wp, l) > 0) CHECK(!m->lm.layers[l].w_down.data);
    tl_model_close(m);
}

/* The sweep over the memory the weights hold (tl_residency_sweep), where some layers'
 * products are resident and some stream. */
static void sweep_held(const char *path, uint64_t budget, uint64_t state) {
    tl_model *m = open_model(path, budget);
    if (!m) return;
    CHECK(tl_engine_place(m, state) == TL_OK);
    const tl_weight_plan *wp = tl_residency_plan(m->res);
    /* once over all of it at most, on from its cursor, wrapping */
    uint64_t at = 0;
    const uint64_t held = tl_residency_sweep(m->res, -1, UINT64_MAX, &at);
    const uint64_t ring = (uint64_t)wp->n_slots * wp->slot_bytes;
    CHECK_MSG(held > ring && at == 0, "swept %llu bytes (the ring %llu), cursor %llu",
              (unsigned long long)held, (unsigned long long)ring, (unsigned long long)at);
    const uint64_t third = held / 3 + 1;
    CHECK(tl_residency_sweep(m->res, -1, third, &at) == third && at == third);
    CHECK(tl_residency_sweep(m->res, -1, third, &at) == third && at == 2 * third);
    CHECK(tl_residency_sweep(m->res, -1, third, &at) == third && at == 3 * third - held);
    /* a layer's own buffers are left out: a streamed one's ring buffer, once borrowed, and
     * the resident buffers a resident one's products lie in */
    int32_t streamed = -1, resident = -1; /* all products streamed; one resident at least */
    for (int32_t l = 0; l < m->lm.hp.n_layer; l++) {
        const tl_llama_layer *ly = &m->lm.layers[l];
        const int any = ly->wq.data || ly->wo.data || ly->w_up.data || ly->w_down.data;
        if (tl_weight_plan_unit_bytes(&m->lm, wp, l) > 0 && !any) streamed = l;
        if (any) resident = l;
    }
    CHECK(streamed >= 0 && resident >= 0);
    CHECK(tl_residency_borrow(m->res, streamed) == TL_OK);
    at = 0;
    CHECK(tl_residency_sweep(m->res, streamed, UINT64_MAX, &at) == held - wp->slot_bytes);
    CHECK(tl_residency_sweep(m->res, -1, UINT64_MAX, &at) == held);
    tl_residency_unborrow(m->res, streamed);
    CHECK(tl_residency_sweep(m->res, streamed, UINT64_MAX, &at) == held);
    const uint64_t no_own = tl_residency_sweep(m->res, resident, UINT64_MAX, &at);
    CHECK_MSG(no_own < held && no_own > ring, "resident layer %d: %llu of %llu bytes swept",
              (int)resident, (unsigned long long)no_own, (unsigned long long)held);
    tl_model_close(m);
}

/* An embedding smaller than one IO queue is placed before any layer (placement.c): at
 * every budget from lo to hi (256 KiB steps) where some layer parts are resident and some
 * stream, it is resident (smaller than a part here), also where the parts placed first
 * would leave no room for it. */
static void embedding_first(const char *path, uint64_t lo, uint64_t hi, uint64_t state) {
    int streaming = 0;
    for (uint64_t budget = lo; budget <= hi; budget += 256u << 10) {
        tl_model *m = open_model(path, budget);
        if (!m) return;
        CHECK(m->lm.tok_embd.file_bytes <
              (uint64_t)m->lm.params.io_chunk_bytes * (uint64_t)m->lm.params.io_queue_depth);
        tl_weight_plan plan;
        if (tl_engine_plan_weights(m, state, 1, 1, 100, &plan) == TL_OK) {
            int streamed = 0, parts = 2 * m->lm.hp.n_layer;
            for (int32_t l = 0; l < m->lm.hp.n_layer; l++)
                streamed += !plan.attn_resident[l] + !plan.ffn_resident[l];
            const int mixed = streamed > 0 && streamed < parts;
            streaming += mixed;
            CHECK_MSG(!mixed || plan.embd_resident, "budget %llu: %d of %d layer parts "
                      "streamed, the embedding on disk", (unsigned long long)budget, streamed,
                      parts);
            tl_weight_plan_free(&plan);
        } else {
            /* below the minimum: nothing to check */
        }
        tl_model_close(m);
    }
    CHECK(streaming > 0);
}

/* A token embedding left on disk: the disk calibration times its reads, one row and a
 * full group (prof.embd_row_s, embd_group_s > 0, the run's counters untouched), and a
 * pass's compute prices each micro-batch's rows in groups at those figures; the grouped
 * reads give a resident embedding's rows bit for bit and refuse an id outside the
 * vocabulary; one in memory is not timed. */
static void embedding_calibration(const char *path, uint64_t budget, uint64_t state,
                                  int on_disk) {
    tl_model *m = open_model(path, budget);
    if (!m) return;
    CHECK(tl_engine_place(m, state) == TL_OK);
    CHECK_MSG((m->lm.tok_embd.data == NULL) == on_disk, "embedding %s",
              on_disk ? "resident" : "on disk");
    tl_hw_profile prof;
    tl_test_round_profile(&prof);
    prof.embd_row_s = prof.embd_group_s = 1; /* whatever was there before is replaced */
    tl_residency_stats rs0, rs1;
    tl_residency_get_stats(m->res, &rs0);
    double bps = 0, ratio = 0;
    CHECK_MSG(tl_plan_calibrate_disk(m, &prof, &bps, &ratio) == TL_OK, "%s", tl_last_error());
    tl_residency_get_stats(m->res, &rs1);
    CHECK(rs1.bytes_read_disk == rs0.bytes_read_disk && rs1.stall_s == rs0.stall_s);
    if (!on_disk) {
        CHECK(prof.embd_row_s == 0 && prof.embd_group_s == 0);
        tl_model_close(m);
        return;
    }
    CHECK_MSG(prof.embd_row_s > 0 && prof.embd_row_s < 1, "embd_row_s %g", prof.embd_row_s);
    CHECK_MSG(prof.embd_group_s > 0 && prof.embd_group_s < 1, "embd_group_s %g",
              prof.embd_group_s);
    /* the stream's rate over the grid's figure scales the slowdowns, or over the rate the
     * profile's slowdowns were measured beside, where the profile has it */
    CHECK_MSG(bps > 0 && prof.io_rate_scale == ratio, "rate scale %g, ratio %g",
              prof.io_rate_scale, ratio);
    tl_test_round_profile(&prof);
    prof.io_stream_bps = 3e8;
    CHECK(tl_plan_calibrate_disk(m, &prof, &bps, &ratio) == TL_OK);
    CHECK_MSG(bps > 0 && close_to(prof.io_rate_scale, bps / 3e8, 1e-12), "rate scale %g, %g / 3e8",
              prof.io_rate_scale, bps);
    /* rows in groups of K: a group of j rows between one row's read (j = 1) and a full
     * group's (j = K), linearly; priced per row, 10 rows would differ by 10 x 1e-3 */
    const int32_t K = tl_weight_embd_read_rows(&m->lm), n_rows[2] = {10, 37};
    CHECK_MSG(K >= 2, "a group of %d rows (the figures below want two or more)", (int)K);
    double want[2];
    for (int i = 0; i < 2; i++) {
        const int32_t full = n_rows[i] / K, rest = n_rows[i] % K;
        const double part = rest > 0 ? (double)(rest - 1) / (K - 1) : -1;
        want[i] = (full * 6e-3 + (part >= 0 ? 2e-3 + 4e-3 * part : 0)) -
                  (full * 4e-3 + (part >= 0 ? 1e-3 + 3e-3 * part : 0));
    }
    const double none[1] = {0};
    for (int i = 0; i < 2; i++) {
        tl_test_round_profile(&prof);
        prof.embd_row_s = 1e-3, prof.embd_group_s = 4e-3;
        const double a = tl_cost_pass_compute(m, &prof, 32, &n_rows[i], none, none, 1, 1, 1, 0,
                                              0, NULL);
        prof.embd_row_s = 2e-3, prof.embd_group_s = 6e-3;
        const double b = tl_cost_pass_compute(m, &prof, 32, &n_rows[i], none, none, 1, 1, 1, 0,
                                              0, NULL);
        CHECK_MSG(close_to(b - a, want[i], 1e-9), "%d rows priced %.9g, want %.9g",
                  (int)n_rows[i], b - a, want[i]);
    }
    /* the grouped reads give the rows a resident embedding gives, bit for bit, across
     * groups; an id outside the vocabulary is refused */
    tl_model *whole = open_model(path, 64u << 20);
    if (whole && tl_engine_place(whole, 0) == TL_OK && whole->lm.tok_embd.data) {
        const size_t d = (size_t)m->lm.hp.n_embd;
        int32_t ids[37];
        for (int i = 0; i < 37; i++) ids[i] = (i * 97 + 5) % m->lm.hp.n_vocab;
        float *x = calloc(2 * 37 * d, sizeof *x);
        CHECK(x != NULL);
        if (x) {
            CHECK_MSG(tl_residency_embeddings(m->res, ids, 37, x) == TL_OK, "%s",
                      tl_last_error());
            CHECK(tl_residency_embeddings(whole->res, ids, 37, x + 37 * d) == TL_OK);
            CHECK(memcmp(x, x + 37 * d, 37 * d * sizeof *x) == 0);
            ids[20] = m->lm.hp.n_vocab;
            CHECK(tl_residency_embeddings(m->res, ids, 37, x) == TL_ERR_INVALID);
            tl_error_clear();
            ids[20] = 0; /* the refusal leaves the residency usable */
            CHECK(tl_residency_embeddings(m->res, ids, 37, x) == TL_OK);
        }
        free(x);
    } else {
        CHECK_MSG(0, "the model at 64 MiB should hold its embedding in memory");
    }
    if (whole) tl_model_close(whole);
    tl_model_close(m);
}

/* Embedding reads priced by hand (tl_cost_embd_read_s): groups of 16, a partial group of j
 * rows at one + (group - one) (j - 1) / 15; uncalibrated, 64 KiB reads at depth 1 and 16;
 * a group never below one row; groups of one: one row each. */
static void embd_read_price(void) {
    tl_hw_profile prof;
    tl_test_round_profile(&prof);
    prof.embd_row_s = 1e-3, prof.embd_group_s = 4e-3;
    CHECK(tl_cost_embd_read_s(&prof, 16, 0) == 0);
    CHECK(close_to(tl_cost_embd_read_s(&prof, 16, 1), 1e-3, 1e-12));
    CHECK(close_to(tl_cost_embd_read_s(&prof, 16, 6), 1e-3 + 3e-3 * 5 / 15, 1e-12));
    CHECK(close_to(tl_cost_embd_read_s(&prof, 16, 16), 4e-3, 1e-12));
    CHECK(close_to(tl_cost_embd_read_s(&prof, 16, 40), 8e-3 + 1e-3 + 3e-3 * 7 / 15, 1e-12));
    CHECK(close_to(tl_cost_embd_read_s(&prof, 1, 5), 5e-3, 1e-12));
    prof.embd_group_s = 0.5e-3;
    CHECK(close_to(tl_cost_embd_read_s(&prof, 16, 20), 2e-3, 1e-12));
    prof.embd_row_s = prof.embd_group_s = 0;
    const double one = 65536 / tl_profile_read_bps(&prof, 65536, 1);
    const double group = 16 * 65536 / tl_profile_read_bps(&prof, 65536, 16);
    CHECK_MSG(close_to(tl_cost_embd_read_s(&prof, 16, 33),
                       2 * fmax(group, one) + one, 1e-12), "uncalibrated %.9g",
              tl_cost_embd_read_s(&prof, 16, 33));
}

/* The ring's pass time against timelines worked by hand (4 layers and the output, one
 * second of compute each unless said). */
static void ring_pass(void) {
    double c[5] = {3, 1, 1, 1, 1}, r[5] = {0, 1, 1, 1, 0};
    /* layers 1-3 stream (1 s each) after a 3 s resident layer. One buffer: layer 1's
     * read runs during the previous pass's output, each later read waits for the unit
     * before it to be used: 3 + 1 + (1 + 1) + (1 + 1) + 1 = 9 s, against 7 s of compute */
    CHECK(fabs(tl_cost_ring_pass_s(c, r, 4, 1, 0) - 9) < 1e-9);
    /* four buffers: all three read during layer 0: compute-bound */
    CHECK(fabs(tl_cost_ring_pass_s(c, r, 4, 4, 0) - 7) < 1e-9);
    /* only the output streams (5 s): read from the pass's start, never ahead of it:
     * max(4 s of layers, 5 s) + its own 1 s */
    double c2[5] = {1, 1, 1, 1, 1}, r2[5] = {0, 0, 0, 0, 5};
    CHECK(fabs(tl_cost_ring_pass_s(c2, r2, 4, 2, 0) - 6) < 1e-9);
    /* every unit streams at the compute's pace with room to read ahead: max() */
    double r3[5] = {1, 1, 1, 1, 1};
    CHECK(fabs(tl_cost_ring_pass_s(c2, r3, 4, 3, 0) - 5) < 1e-9);
    /* the same from an empty ring: the first read is hidden by nothing (1 s), then disk and
     * compute keep pace, one second a unit: 1 + 5, and 1 + 10 for two passes */
    CHECK(fabs(tl_cost_ring_run_s(c2, r3, 4, 3, 1, 0) - 6) < 1e-9);
    CHECK(fabs(tl_cost_ring_run_s(c2, r3, 4, 3, 2, 0) - 11) < 1e-9);
    CHECK(tl_cost_ring_run_s(c2, r3, 4, 3, 0, 0) == 0);
    /* an urgent read begins each pass: in the steady state the disk is a read (1 s) ahead
     * when the pass begins, so it waits start_wait, or that second when start_wait is
     * longer; from empty, behind all three reads issued at once, up to start_wait */
    CHECK(fabs(tl_cost_ring_pass_s(c2, r3, 4, 3, 0.5) - 5.5) < 1e-9);
    CHECK(fabs(tl_cost_ring_pass_s(c2, r3, 4, 3, 3) - 6) < 1e-9);
    CHECK(fabs(tl_cost_ring_run_s(c2, r3, 4, 3, 1, 3) - 8) < 1e-9);
    /* one buffer: the reads never run ahead of the pass's start, nothing to wait for */
    CHECK(fabs(tl_cost_ring_pass_s(c, r, 4, 1, 2) - 9) < 1e-9);
    /* nothing streams, or no buffer */
    double r0[5] = {0, 0, 0, 0, 0};
    CHECK(tl_cost_ring_pass_s(c2, r0, 4, 2, 0) == 0);
    CHECK(tl_cost_ring_pass_s(c2, r3, 4, 0, 0) == 0);
    CHECK(tl_cost_ring_pass_s(c2, r3, TL_COST_RING_MAX_UNITS, 2, 0) == 0);
}

/* The delay per streamed read that the ring calibration fits, against a timeline worked
 * by hand: the first case above from an empty ring, one buffer. Layer 1's read (1 + d)
 * hides under layer 0's 3 s; layer 2's and 3's each start when the unit before is used,
 * so the run is 3 + 1 + (1 + d + 1) + (1 + d + 1) + 1 = 9 + 2d (d < 2). */
static void ring_delay_fit(void) {
    const double c[5] = {3, 1, 1, 1, 1}, r[5] = {0, 1, 1, 1, 0};
    CHECK(fabs(tl_cost_ring_run_s(c, r, 4, 1, 1, 0) - 9) < 1e-9);
    double d = tl_cost_ring_fit_delay(c, r, 4, 1, 1, 9.4);
    CHECK_MSG(fabs(d - 0.2) < 1e-6, "fitted %.9g, want 0.2", d);
    d = tl_cost_ring_fit_delay(c, r, 4, 1, 1, 10);
    CHECK_MSG(fabs(d - 0.5) < 1e-6, "fitted %.9g, want 0.5", d);
    /* over two passes (the second one's first read issued ahead, under the first one's
     * output): the time of reads of 1.3 s gives back a delay of 0.3 s */
    const double r2[5] = {0, 1.3, 1.3, 1.3, 0};
    const double two = tl_cost_ring_run_s(c, r2, 4, 1, 2, 0);
    d = tl_cost_ring_fit_delay(c, r, 4, 1, 2, two);
    CHECK_MSG(fabs(d - 0.3) < 1e-6, "fitted %.9g over two passes, want 0.3", d);
    /* the held sample no slower than the model: no delay; nothing streams: none */
    CHECK(tl_cost_ring_fit_delay(c, r, 4, 1, 1, 8.5) == 0);
    CHECK(tl_cost_ring_fit_delay(c, r, 4, 1, 1, 9) == 0);
    const double r0[5] = {0, 0, 0, 0, 0};
    CHECK(tl_cost_ring_fit_delay(c, r0, 4, 1, 1, 20) == 0);
    /* reads of 0.5 s under units of 3 s with room to read ahead: only the first read waits
     * (0.5 + 15 s from empty), a delay moves the ring by a fifth of the reads' delays, and
     * a held sample's excess there cannot be told from noise: -1 */
    const double c3[5] = {3, 3, 3, 3, 3}, r3[5] = {0.5, 0.5, 0.5, 0.5, 0.5};
    CHECK(fabs(tl_cost_ring_run_s(c3, r3, 4, 4, 1, 0) - 15.5) < 1e-9);
    CHECK(tl_cost_ring_fit_delay(c3, r3, 4, 4, 1, 16) == -1);
    CHECK(tl_cost_ring_fit_delay(c3, r3, 4, 4, 1, 15) == -1);
}

int main(void) {
    char p1[256], p2[256];
    ring_pass();
    embd_read_price();
    ring_delay_fit();
    if (!synth("hand", 300, 128, 320, 2, 8, 2, 0, p1, sizeof p1)) return 1;
    hand_single(p1);
    prefill_layer_and_rate_scale(p1);
    hand_batch_spill(p1);
    varied_prompts(p1);
    hand_slowdown(p1);
    hand_kv_store(p1);
    disk_spread(p1);
    products_rounds();
    hand_attn_block(p1);
    char pg2[256];
    if (!synth("group2", 300, 128, 320, 2, 8, 4, 0, pg2, sizeof pg2)) return 1;
    hand_attn_group(p1, pg2);
    hand_kv_mem(p1);
    unlink(pg2);
    char p3[256];
    if (!synth("spread", 300, 128, 320, 8, 8, 2, 0, p3, sizeof p3)) return 1;
    spread_placement(p3);
    if (!synth("lp", 300, 256, 512, 4, 8, 8, 0, p2, sizeof p2)) return 1;
    tl_policy pol = {.single = 0, .gbs = 4, .num_gb = 4, .prefill_rows = 512, .w_mem_pct = 100,
                     .kv_mem_pct = 100, .kv_bits = 32, .page_tokens = 16, .prefetch = 1, .overlap = 1, .n_ctx = 300};
    tl_workload w = {.prompt_len = 200, .gen_len = 64, .num_seqs = 16};
    lp_vs_grid(p2, 48u << 20, w, pol); /* KV and weights compete for memory */
    g_slowdown = 1.3; /* compute slows while the disk streams: the LP's extra row */
    lp_vs_grid(p2, 48u << 20, w, pol);
    g_slowdown = 1;
    pol.overlap = 0;
    pol.prefetch = 0;
    lp_vs_grid(p2, 40u << 20, w, pol);
    tl_policy single = {.single = 1, .gbs = 1, .num_gb = 1, .prefill_rows = 64, .w_mem_pct = 100,
                        .kv_mem_pct = 100, .kv_bits = 32, .page_tokens = 16, .prefetch = 2, .overlap = 1, .n_ctx = 300};
    tl_workload w1 = {.prompt_len = 100, .gen_len = 50, .num_seqs = 1};
    lp_vs_grid(p2, 14u << 20, w1, single);
    char p4[256];
    g_synth_ctx = 2048;
    if (!synth("tiers", 300, 256, 320, 8, 8, 8, 0, p4, sizeof p4)) return 1;
    tiers_search(p4, 24u << 20, 1e8, 1, 1);
    tiers_search(p4, 36u << 20, 1e6, 0, 1); /* input rows kept take room too */
    kv_spill_calibration(p4);
    kv_rate_beside();
    kv_beside_stream(p4);
    attention_calibration(p4);
    matvec_calibration(p4, 64u << 20);
    products_calibration(p4, 64u << 20, 0, 0);         /* resident */
    products_calibration(p4, 10u << 20, 4u << 20, 1);  /* streamed */
    /* streamed, with room in the budget for the stream calibration's queue (8 MiB; the
     * ring's spare buffer holds 2 chunks of it, which the run above streams through) */
    products_calibration(p4, 28u << 20, 22u << 20, 1);
    ring_calibration(p4, 10u << 20, 4u << 20);
    measure_passes(p4, 10u << 20, 4u << 20);
    sweep_held(p4, 16u << 20, 4u << 20);
    embedding_calibration(p4, 10u << 20, 4u << 20, 1);
    embedding_first(p4, 8u << 20, 20u << 20, 4u << 20);
    embedding_calibration(p4, 64u << 20, 0, 0);
    unlink(p4);
    if (!synth("q8", 300, 256, 320, 2, 8, 2, TL_TYPE_Q8_0, p4, sizeof p4)) return 1;
    products_calibration(p4, 64u << 20, 0, 0);
    unlink(p4);
    if (!synth("tiersgqa", 300, 256, 320, 8, 8, 2, 0, p4, sizeof p4)) return 1;
    tiers_search(p4, 10u << 20, 1e6, 1, 0); /* inputs 256 wide, K and V 64 each */
    unlink(p4);
    property(150, 12);
    unlink(p1);
    unlink(p2);
    unlink(p3);
    for (int i = 0; i < 6; i++) {
        char path[256];
        snprintf(path, sizeof path, "/tmp/tl_test_plan_%d_p%d.gguf", (int)getpid(), i);
        unlink(path);
    }
    return tl_test_finish("test_plan");
}

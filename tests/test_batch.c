/* test_batch.c - batch generation through the block schedule and the paged KV cache.
 *
 * 1. Each sequence's greedy tokens are identical to generating it alone, whatever the
 *    block shape (gbs x num_gb), the KV placement (memory / half / all on the SSD) and
 *    the prefill chunking, on stories260K and on a synthetic F32 GQA model; also under a
 *    memory budget that streams the weights.
 * 2. SSD bytes written never exceed 1.05 x the KV bytes of the spilled pages (written
 *    once, never rewritten), and nothing is written when KV stays in memory.
 * 3. Results arrive in input order, once each.
 * 4. A prompt that cannot run (over the context) is a result with its status and message
 *    while the others run as they would alone; n_predict 0 generates nothing; a stop asked
 *    by the progress callback reports only complete sequences, then TL_ERR_CANCELLED.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "tierllm.h"
#include "exec/engine.h"
#include "exec/residency.h"
#include "testutil.h"

#define N_PROMPTS TL_TEST_N_STORY_PROMPTS
#define N_GEN 12

static const char *const *const prompts = tl_test_story_prompts;

typedef struct collect {
    int32_t tokens[N_PROMPTS][N_GEN];
    int32_t n[N_PROMPTS];
    int next_index, out_of_order;
} collect;

static int on_result(void *user, const tl_batch_result *r) {
    collect *c = user;
    if (r->index != c->next_index++) c->out_of_order = 1;
    c->n[r->index] = r->n_tokens;
    for (int32_t i = 0; i < r->n_tokens && i < N_GEN; i++) c->tokens[r->index][i] = r->tokens[i];
    return 0;
}

/* The reference: each prompt alone through the single-sequence API. */
static void alone(tl_model *m, collect *ref) {
    tl_context *c;
    tl_context_params cp = tl_context_default_params();
    cp.n_ctx = 128;
    CHECK(tl_context_open(m, &cp, &c) == TL_OK);
    tl_model_desc d;
    tl_model_describe(m, &d);
    float *logits = malloc((size_t)d.n_vocab * sizeof *logits);
    for (int p = 0; p < N_PROMPTS; p++) {
        int32_t ids[128];
        size_t n;
        tl_context_reset(c);
        CHECK(tl_tokenize(m, prompts[p], strlen(prompts[p]), 1, ids, 128, &n) == TL_OK);
        CHECK(tl_decode(c, ids, n, logits) == TL_OK);
        ref->n[p] = N_GEN;
        for (int i = 0; i < N_GEN; i++) {
            int32_t best = 0;
            for (int v = 1; v < d.n_vocab; v++) best = logits[v] > logits[best] ? v : best;
            ref->tokens[p][i] = best;
            CHECK(tl_decode(c, &best, 1, logits) == TL_OK);
        }
    }
    free(logits);
    tl_context_close(c);
}

/* A model opened with the smallest budget that runs `bp` plus `slack` bytes for
 * weights, so nearly all weights stream; the placement is fixed by the first run. */
static tl_model *open_streaming(const char *path, const tl_batch_params *bp, uint64_t slack) {
    tl_model *m;
    if (tl_model_open(path, NULL, &m) != TL_OK) return NULL;
    tl_batch_params p = *bp;
    if (!p.spill_dir) p.spill_dir = ".";
    uint64_t need = tl_budget_used(m->lm.budget) + tl_batch_budget_bytes(m, &p) +
                    tl_weight_plan_minimum(&m->lm, 2, 1) + slack;
    tl_model_close(m);
    tl_model_params mp = tl_model_default_params();
    mp.mem_budget = need;
    return tl_model_open(path, &mp, &m) == TL_OK ? m : NULL;
}

/* stream: 0 = one model, weights resident; 1 = a fresh streaming model per shape */
static void check_shapes(const char *path, int stream, const char *what) {
    tl_model *m;
    tl_status st = tl_model_open(path, NULL, &m);
    CHECK_MSG(st == TL_OK, "%s", tl_last_error());
    if (st) return;
    collect ref;
    memset(&ref, 0, sizeof ref);
    alone(m, &ref);
    if (stream) {
        tl_model_close(m);
        m = NULL;
    }
    static const int shapes[][2] = {{1, 1}, {2, 3}, {4, 2}, {3, 4}, {16, 1}};
    static const int mem_pct[] = {100, 50, 0};
    uint64_t kv_back = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (size_t pi = 0; pi < 3; pi++) {
            tl_batch_params bp = tl_batch_default_params();
            bp.gbs = shapes[si][0];
            bp.num_gb = shapes[si][1];
            bp.n_ctx = 96;
            bp.kv_mem_pct = mem_pct[pi];
            bp.page_tokens = 4;
            bp.prefill_rows = si % 2 ? bp.gbs * 3 : 512; /* chunked prefill too */
            bp.spill_dir = ".";
            tl_generate_params gp = tl_generate_default_params();
            gp.sampler.temperature = 0;
            gp.n_predict = N_GEN;
            gp.stop_at_eos = 0;
            collect got;
            memset(&got, 0, sizeof got);
            tl_batch_stats bs;
            if (stream && !(m = open_streaming(path, &bp, 64 << 10))) {
                CHECK_MSG(0, "%s: %s", what, tl_last_error());
                continue;
            }
            st = tl_batch_generate(m, &bp, &gp, prompts, NULL, N_PROMPTS, on_result, NULL, &got,
                                   &bs);
            if (stream) {
                CHECK_MSG(st || bs.weight_bytes_read > 0, "%s: nothing streamed", what);
                /* the weights' reads kept the IO queue busy inside the phases, never longer */
                CHECK_MSG(st || (bs.prefill_io_busy_s + bs.decode_io_busy_s > 0 &&
                                 bs.prefill_io_busy_s <= bs.prefill_s + 1e-6 &&
                                 bs.decode_io_busy_s <= bs.decode_s + 1e-6),
                          "%s: IO busy %.6f / %.6f s in phases of %.6f / %.6f s", what,
                          bs.prefill_io_busy_s, bs.decode_io_busy_s, bs.prefill_s, bs.decode_s);
                tl_model_close(m);
                m = NULL;
            }
            CHECK_MSG(st == TL_OK, "%s gbs %d num_gb %d kv-mem %d: %s", what, bp.gbs, bp.num_gb,
                      bp.kv_mem_pct, tl_last_error());
            if (st) continue;
            CHECK(!got.out_of_order && got.next_index == N_PROMPTS);
            CHECK(bs.generated_tokens == N_PROMPTS * N_GEN);
            for (int p = 0; p < N_PROMPTS; p++)
                CHECK_MSG(got.n[p] == N_GEN && !memcmp(got.tokens[p], ref.tokens[p],
                                                       sizeof ref.tokens[p]),
                          "%s gbs %d num_gb %d kv-mem %d: prompt %d differs from alone", what,
                          bp.gbs, bp.num_gb, bp.kv_mem_pct, p);
            if (mem_pct[pi] == 100) CHECK(bs.ssd_bytes_written == 0);
            else CHECK(bs.ssd_bytes_written > 0);
            /* a disk page comes back from the spill file, or from memory while its write
             * is still in flight (which of the two depends on the IO threads' timing) */
            kv_back += bs.kv_pages_read + bs.kv_cache_hits;
        }
    CHECK_MSG(kv_back > 0, "%s: no spilled KV page was ever attended again", what);
    if (m) tl_model_close(m);
}

/* KV bytes produced by the full pages homed on disk, against what was written. */
static void no_rewrites(const char *path) {
    tl_model *m;
    CHECK(tl_model_open(path, NULL, &m) == TL_OK);
    tl_model_desc d;
    tl_model_describe(m, &d);
    static const int bits_list[] = {32, 8, 4};
    for (int bi = 0; bi < 3; bi++)
    for (int pct = 0; pct <= 50; pct += 25) {
        const int bits = bits_list[bi];
        tl_batch_params bp = tl_batch_default_params();
        bp.kv_bits = bits;
        bp.gbs = 4;
        bp.num_gb = 2;
        const int gen = bits == 4 ? 250 : 100; /* 4-bit pages are 128 tokens */
        bp.n_ctx = 300;
        bp.kv_mem_pct = pct;
        bp.page_tokens = 16;
        /* bytes of one token's K and V as stored: f32, or groups of head_dim values with
         * an f32 min and scale each; pages are rounded to whole 4096-byte units */
        const int kvd = d.n_head_kv * d.head_dim;
        const double row = bits == 32 ? kvd * 4.0 : (kvd / d.head_dim) * 8.0 + kvd * bits / 8.0;
        const double per_token = 2 * row;
        int unit = 1;
        while (((long)(unit * per_token)) % 4096) unit++;
        const int pt = (16 + unit - 1) / unit * unit;
        bp.spill_dir = ".";
        tl_generate_params gp = tl_generate_default_params();
        gp.sampler.temperature = 0;
        gp.n_predict = gen;
        gp.stop_at_eos = 0;
        collect got;
        memset(&got, 0, sizeof got);
        tl_batch_stats bs;
        CHECK(tl_batch_generate(m, &bp, &gp, prompts, NULL, 8, NULL, NULL, &got, &bs) == TL_OK);
        /* every sequence reaches prompt + 40 positions; count its full pages on disk */
        double spilled = 0;
        for (int p = 0; p < 8; p++) {
            int32_t ids[128];
            size_t n;
            tl_tokenize(m, prompts[p], strlen(prompts[p]), 1, ids, 128, &n);
            int32_t len = (int32_t)n + gen - 1; /* the last token is sampled, never fed */
            int32_t full = len / pt;
            double dfrac = (100 - pct) / 100.0;
            int32_t on_disk = 0;
            for (int32_t i = 0; i < full; i++)
                on_disk += (int32_t)((i + 1) * dfrac) > (int32_t)(i * dfrac);
            spilled += (double)on_disk * d.n_layer * pt * per_token;
        }
        printf("kv-bits %d, kv-mem %d%%, page %d tokens: SSD written %llu bytes, spilled KV %.0f bytes, ratio %.3f\n",
               bits, pct, pt, (unsigned long long)bs.ssd_bytes_written, spilled,
               spilled > 0 ? bs.ssd_bytes_written / spilled : 0.0);
        CHECK(spilled > 0);
        CHECK(bs.ssd_bytes_written <= 1.05 * spilled);
        CHECK(bs.ssd_bytes_written >= 0.95 * spilled); /* they really went to disk */
    }
    tl_model_close(m);
}

typedef struct stop_ctx {
    int steps, stop_after;
    int32_t index[N_PROMPTS], n_tokens[N_PROMPTS], status[N_PROMPTS], last[N_PROMPTS];
    int32_t tokens[N_PROMPTS][2];
    char msg[N_PROMPTS][200];
    int n;
} stop_ctx;

static int stop_result(void *user, const tl_batch_result *r) {
    stop_ctx *c = user;
    if (c->n < N_PROMPTS) {
        c->index[c->n] = r->index;
        c->n_tokens[c->n] = r->n_tokens;
        c->status[c->n] = r->status;
        c->last[c->n] = r->last_in_block;
        for (int32_t i = 0; i < r->n_tokens && i < 2; i++) c->tokens[c->n][i] = r->tokens[i];
        snprintf(c->msg[c->n], sizeof c->msg[0], "%s", r->error ? r->error : "");
    }
    c->n++;
    return 0;
}

static int stop_progress(void *user, const tl_batch_stats *s) {
    stop_ctx *c = user;
    (void)s;
    return c->stop_after > 0 && ++c->steps >= c->stop_after;
}

static void failures_and_stops(const char *path) {
    tl_model *m;
    tl_model_params mp = tl_model_default_params();
    CHECK(tl_model_open(path, &mp, &m) == TL_OK);
    collect ref;
    memset(&ref, 0, sizeof ref);
    alone(m, &ref);
    tl_batch_params bp = tl_batch_default_params();
    bp.gbs = 2;
    bp.num_gb = 2;
    bp.n_ctx = 14; /* the last prompt (about 16 tokens) does not fit */
    tl_generate_params gp = tl_generate_default_params();
    gp.sampler.temperature = 0;
    gp.stop_at_eos = 0;
    int32_t n_predict[N_PROMPTS];
    for (int i = 0; i < N_PROMPTS; i++) n_predict[i] = i == 3 ? 0 : 2;
    stop_ctx c;
    memset(&c, 0, sizeof c);
    tl_batch_stats bs;
    tl_status st = tl_batch_generate(m, &bp, &gp, prompts, n_predict, N_PROMPTS, stop_result,
                                     stop_progress, &c, &bs);
    CHECK_MSG(st == TL_OK, "%s", tl_last_error());
    CHECK(c.n == N_PROMPTS && bs.failed_prompts == 1 && bs.done_prompts == N_PROMPTS);
    for (int i = 0; i < N_PROMPTS && i < c.n; i++) {
        CHECK(c.index[i] == i);
        if (i == N_PROMPTS - 1) {
            CHECK_MSG(c.status[i] == TL_ERR_CONTEXT && strstr(c.msg[i], "ctx-size"), "%d %s",
                      (int)c.status[i], c.msg[i]);
        } else {
            CHECK(c.status[i] == TL_OK && c.msg[i][0] == 0);
            CHECK(c.n_tokens[i] == (i == 3 ? 0 : 2));
            CHECK_MSG(i == 3 || (c.tokens[i][0] == ref.tokens[i][0] &&
                                 c.tokens[i][1] == ref.tokens[i][1]),
                      "prompt %d: tokens differ from the prompt alone", i);
        }
        CHECK(c.last[i] == (i % 4 == 3 || i == N_PROMPTS - 1));
    }
    /* The progress callback runs after each step, and once more when a phase finds no rows
     * left: a block of 5-token prompts is prefill + 1 (2 calls), then 4 decode steps + 1
     * (5 calls). Stopped after the prefill: only prompt 3 (n_predict 0) is complete. */
    for (int i = 0; i < N_PROMPTS; i++) n_predict[i] = i == 3 ? 0 : 5;
    memset(&c, 0, sizeof c);
    c.stop_after = 2;
    st = tl_batch_generate(m, &bp, &gp, prompts, n_predict, N_PROMPTS, stop_result,
                           stop_progress, &c, &bs);
    CHECK_MSG(st == TL_ERR_CANCELLED, "%d %s", (int)st, tl_last_error());
    CHECK_MSG(c.n == 1 && c.index[0] == 3 && c.n_tokens[0] == 0 && c.last[0] == 1, "%d results",
              c.n);
    /* stopped in the second block's prefill: the first block's four, none of the second */
    memset(&c, 0, sizeof c);
    c.stop_after = 8;
    st = tl_batch_generate(m, &bp, &gp, prompts, n_predict, N_PROMPTS, stop_result,
                           stop_progress, &c, &bs);
    CHECK_MSG(st == TL_ERR_CANCELLED && c.n == 4, "%d, %d results", (int)st, c.n);
    tl_model_close(m);
}

int main(void) {
    const char *stories = tl_test_model("stories260K.gguf");
    check_shapes(stories, 0, "stories260K");
    check_shapes(stories, 1, "stories260K, streamed weights");
    char dir[] = "tl_batch_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[256];
    snprintf(path, sizeof path, "%s/synth.gguf", dir);
    tl_synth_params sp = {.n_vocab = 600, .n_embd = 128, .n_ff = 256, .n_layer = 3, .n_head = 8,
        .n_head_kv = 2, .n_ctx = 256, .weight_type = 0 /* F32 */, .rope_base = 10000.0f,
        .seed = 11};
    CHECK(tl_synth_write(&sp, path) == TL_OK);
    check_shapes(path, 0, "synthetic F32 GQA");
    check_shapes(path, 1, "synthetic F32 GQA, streamed weights");
    no_rewrites(stories);
    failures_and_stops(stories);
    unlink(path);
    rmdir(dir);
    return tl_test_finish("test_batch");
}

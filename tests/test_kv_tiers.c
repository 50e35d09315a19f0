/* test_kv_tiers.c - a context whose KV cache lives in tiers by temperature gives the same
 * logits, bit for bit, as one whose KV is in memory, and its DRAM cache of disk pages
 * cuts the pages read as the cache model predicts.
 *
 * stories260K decodes 400 positions greedily from BOS (16-position pages, 5 layers), once
 * with the KV in memory, then with a window of 32 positions and 16 sink positions (the
 * other pages on disk) and a cache of 0%, 25% and 50% of the disk pages the run ends
 * with. Over the last 64 steps the pages read per step must fall by at least the cache's
 * share minus 5 points, and lie within 10% of the prediction (tl_run_stats's
 * kv_predicted_reads). A window that holds everything reads nothing. Layers that
 * recompute K and V from input rows kept on disk give the same tokens (logits to float
 * rounding) and read fewer bytes where the rows are narrower than K and V. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "tierllm.h"
#include "testutil.h"

enum { VOCAB = 512, LAYERS = 5, STEPS = 400, TAIL = 64, PAGE = 16 };

static int argmax(const float *v, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[b]) b = i;
    return b;
}

typedef struct run {
    int32_t tokens[STEPS];
    float last[VOCAB];
    uint64_t tail_reads, tail_predicted, tail_hits, total_reads, tail_bytes;
    int ok;
} run;

/* Greedy decode of STEPS positions from BOS; the stats of the last TAIL steps. */
static void decode(tl_model *m, const tl_context_params *cp, const char *label, run *r) {
    memset(r, 0, sizeof *r);
    tl_context *c = NULL;
    tl_status st = tl_context_open(m, cp, &c);
    CHECK_MSG(st == TL_OK, "%s: open: %s", label, tl_last_error());
    if (st) return;
    int32_t tok = 1;
    tl_run_stats before = {0}, after;
    for (int i = 0; i < STEPS; i++) {
        if (i == STEPS - TAIL) tl_context_get_stats(c, &before);
        st = tl_decode(c, &tok, 1, r->last);
        CHECK_MSG(st == TL_OK, "%s: step %d: %s", label, i, tl_last_error());
        if (st) break;
        tok = argmax(r->last, VOCAB);
        r->tokens[i] = tok;
    }
    tl_context_get_stats(c, &after);
    r->tail_reads = after.kv_pages_read - before.kv_pages_read;
    r->tail_hits = after.kv_cache_hits - before.kv_cache_hits;
    r->tail_bytes = after.kv_bytes_read - before.kv_bytes_read;
    r->tail_predicted = after.kv_predicted_reads - before.kv_predicted_reads;
    r->total_reads = after.kv_pages_read;
    r->ok = st == TL_OK;
    fprintf(stderr, "%s: last %d steps: %llu disk pages read, %llu found in memory, "
            "%llu predicted reads\n", label, TAIL, (unsigned long long)r->tail_reads,
            (unsigned long long)r->tail_hits, (unsigned long long)r->tail_predicted);
    tl_context_close(c);
}

/* A multi-head shape (64 wide, 8 heads of 8, 8 KV heads, 4 layers, random weights): a
 * page's K and V take 8 KiB, its input rows 4 KiB. With 1 of 4 layers recomputing, the
 * bytes read per disk page fall to 7 KiB on average; with all 4, to 4 KiB; the greedy
 * tokens stay those of loading K and V. `qwen2`: the same with the Qwen2 family (K and V
 * recomputed with their biases, NEOX RoPE) and Llama 3's frequency divisors. */
static void recompute_bytes(const char *dir, int qwen2) {
    tl_synth_params sp;
    tl_synth_preset("stories260k", &sp);
    sp.family = qwen2 ? TL_SYNTH_QWEN2 : TL_SYNTH_LLAMA;
    sp.rope_freqs = qwen2;
    sp.n_embd = 64;
    sp.n_ff = 128;
    sp.n_layer = 4;
    sp.n_head = sp.n_head_kv = 8;
    char path[256];
    snprintf(path, sizeof path, "%s/mha.gguf", dir);
    CHECK_MSG(tl_synth_write(&sp, path) == TL_OK, "synth: %s", tl_last_error());
    tl_model *m = NULL;
    tl_model_params mp = tl_model_default_params();
    mp.n_threads = 2;
    CHECK_MSG(tl_model_open(path, &mp, &m) == TL_OK, "open: %s", tl_last_error());
    if (!m) return;
    tl_context_params cp = tl_context_default_params();
    cp.n_ctx = STEPS;
    cp.kv_window = 32;
    cp.kv_sinks = 16;
    cp.kv_cache_bytes = 0;
    cp.spill_dir = dir;
    static run load, rec[2];
    decode(m, &cp, "multi-head, load", &load);
    const int layers[2] = {1, 4};
    for (int k = 0; k < 2; k++) {
        cp.kv_recompute = layers[k];
        char label[64];
        snprintf(label, sizeof label, "multi-head%s, recompute %d of 4", qwen2 ? " qwen2" : "",
                 layers[k]);
        decode(m, &cp, label, &rec[k]);
        CHECK_MSG(memcmp(rec[k].tokens, load.tokens, sizeof load.tokens) == 0,
                  "%s: the tokens differ from loading", label);
        double diff = 0, mag = 0; /* the last logits, to float rounding */
        for (int v = 0; v < VOCAB; v++) {
            diff = fmax(diff, fabs((double)rec[k].last[v] - load.last[v]));
            mag = fmax(mag, fabs((double)load.last[v]));
        }
        CHECK_MSG(diff <= 1e-4 * mag, "%s: logits differ from loading by %g (of %g)", label,
                  diff, mag);
        const double per_page = (double)rec[k].tail_bytes / (double)rec[k].tail_reads;
        const double want = 8192.0 - 4096.0 * layers[k] / 4;
        CHECK_MSG(fabs(per_page - want) <= 0.02 * want, "%s: %.0f bytes per page read, "
                  "%.0f expected", label, per_page, want);
    }
    CHECK((double)load.tail_bytes / (double)load.tail_reads == 8192.0);
    tl_model_close(m);
    unlink(path);
}

int main(void) {
    tl_model *m = NULL;
    tl_model_params mp = tl_model_default_params();
    mp.n_threads = 2;
    tl_status st = tl_model_open(tl_test_model("stories260K.gguf"), &mp, &m);
    CHECK_MSG(st == TL_OK, "open: %s", tl_last_error());
    if (st) return tl_test_finish("test_kv_tiers");

    tl_context_params cp = tl_context_default_params();
    cp.n_ctx = STEPS;
    cp.kv_window = -1; /* in memory */
    static run mem, tier[3], wide;
    decode(m, &cp, "memory", &mem);

    /* disk pages per layer at the end: full pages beyond 1 sink page and a 2-page window */
    const int disk_end = LAYERS * (STEPS / PAGE - 1 - 2);
    const double shares[3] = {0, 0.25, 0.5};
    char dir[] = "/tmp/tl_kv_tiers.XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    for (int k = 0; k < 3; k++) {
        cp.kv_window = 32;
        cp.kv_sinks = 16;
        cp.spill_dir = dir;
        /* a cache page costs its 4 KiB slot and the allocator's 4 KiB alignment */
        cp.kv_cache_bytes = (int64_t)(shares[k] * disk_end) * 8192;
        char label[64];
        snprintf(label, sizeof label, "tiers, cache %.0f%%", shares[k] * 100);
        decode(m, &cp, label, &tier[k]);
        CHECK_MSG(memcmp(tier[k].tokens, mem.tokens, sizeof mem.tokens) == 0 &&
                  memcmp(tier[k].last, mem.last, sizeof mem.last) == 0,
                  "%s: tokens or logits differ from the KV in memory", label);
        const double meas = (double)tier[k].tail_reads, pred = (double)tier[k].tail_predicted;
        CHECK_MSG(pred > 0 && fabs(meas - pred) <= 0.10 * pred,
                  "%s: %.0f pages read, %.0f predicted", label, meas, pred);
        if (k > 0) {
            double fall = 1 - meas / (double)tier[0].tail_reads;
            CHECK_MSG(fall >= shares[k] - 0.05, "%s: reads fell by %.1f%%, the cache holds "
                      "%.0f%%", label, fall * 100, shares[k] * 100);
        }
    }
    CHECK(tier[0].tail_reads > 0 && tier[0].tail_hits < tier[0].tail_reads / 10);

    /* recompute instead of load: 2 and then all 5 layers keep input rows on disk, and K
     * and V recomputed from a page of rows agree with the computed ones to float
     * rounding: the same greedy tokens, logits within 1e-4. stories260K's input rows (64
     * floats) are as wide as its K and V together (grouped-query: 2 x 32), so a page
     * reads 4 KiB either way; recompute_bytes checks the saving on a multi-head shape. */
    static run rec[2];
    const int rec_layers[2] = {2, LAYERS};
    for (int k = 0; k < 2; k++) {
        cp.kv_window = 32;
        cp.kv_sinks = 16;
        cp.kv_cache_bytes = 0;
        cp.kv_recompute = rec_layers[k];
        char label[64];
        snprintf(label, sizeof label, "tiers, recompute %d layers", rec_layers[k]);
        decode(m, &cp, label, &rec[k]);
        float worst = 0;
        for (int i = 0; i < VOCAB; i++) worst = fmaxf(worst, fabsf(rec[k].last[i] - mem.last[i]));
        CHECK_MSG(memcmp(rec[k].tokens, mem.tokens, sizeof mem.tokens) == 0 && worst <= 1e-4f,
                  "%s: tokens differ or logits by %g", label, (double)worst);
        /* the same pages, fewer bytes: layers that recompute read 1 of 2 slots of 4 KiB */
        CHECK(rec[k].tail_reads + rec[k].tail_hits == tier[0].tail_reads + tier[0].tail_hits);
        const double per_page = (double)rec[k].tail_bytes / (double)rec[k].tail_reads;
        const double want = 4096.0;
        CHECK_MSG(fabs(per_page - want) <= 0.02 * want, "%s: %.0f bytes per page read, "
                  "%.0f expected", label, per_page, want);
        fprintf(stderr, "%s: logits within %g of the KV in memory\n", label, (double)worst);
    }
    cp.kv_recompute = 0;
    tl_context *rc = NULL;
    tl_context_params rp = cp;
    rp.kv_recompute = LAYERS;
    rp.kv_bits = 16;
    CHECK(tl_context_open(m, &rp, &rc) == TL_ERR_INVALID && rc == NULL &&
          strstr(tl_last_error(), "recomputing layers needs 32-bit KV"));

    /* bad tier and selection parameters are refused with a message */
    tl_context *bad = NULL;
    tl_context_params bp = cp;
    bp.kv_select = 1.5f;
    CHECK(tl_context_open(m, &bp, &bad) == TL_ERR_INVALID && bad == NULL &&
          strstr(tl_last_error(), "kv_select 1.5"));
    bp = cp;
    bp.kv_sinks = -16;
    CHECK(tl_context_open(m, &bp, &bad) == TL_ERR_INVALID && strstr(tl_last_error(), "-16 sink"));
    bp = cp;
    bp.kv_cache_bytes = -5;
    CHECK(tl_context_open(m, &bp, &bad) == TL_ERR_INVALID && strstr(tl_last_error(), "cache of -5"));
    bp = cp;
    bp.kv_recompute = -1;
    CHECK(tl_context_open(m, &bp, &bad) == TL_ERR_INVALID &&
          strstr(tl_last_error(), "-1 layers recomputing"));
    bp.kv_recompute = 300;
    CHECK(tl_context_open(m, &bp, &bad) == TL_ERR_INVALID &&
          strstr(tl_last_error(), "300 layers recomputing"));
    tl_model_params bad_mp = tl_model_default_params();
    bad_mp.io_order = 7;
    tl_model *bad_m = NULL;
    CHECK(tl_model_open(tl_test_model("stories260K.gguf"), &bad_mp, &bad_m) == TL_ERR_INVALID &&
          bad_m == NULL && strstr(tl_last_error(), "io_order 7"));

    /* a window as long as the context: nothing goes to disk */
    cp.kv_window = STEPS;
    cp.kv_cache_bytes = 0;
    decode(m, &cp, "window = context", &wide);
    CHECK(wide.total_reads == 0 && memcmp(wide.last, mem.last, sizeof mem.last) == 0);

    recompute_bytes(dir, 0);
    recompute_bytes(dir, 1);

    /* no spill file outlives its context */
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rmdir %s", dir);
    CHECK_MSG(system(cmd) == 0, "%s is not empty", dir);
    tl_model_close(m);
    return tl_test_finish("test_kv_tiers");
}

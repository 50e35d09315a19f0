/* test_kv_select.c - what page-selective attention costs on real weights: stories260K on
 * the held-out story (tests/data/heldout_story.txt) over its 512-token training context,
 * 16-position pages, one token at a time, exact attention against selection at page
 * budgets from 100% down to 20%. Random weights attend nearly uniformly, so quality is
 * judged here only. Reported per budget: the share of pages read, perplexity, and the
 * attention mass the selected pages hold under exact attention (recall).
 *
 * Holds: at a budget of 100% selection is exact (same perplexity); at the default budget
 * (TL_KV_SELECT_DEFAULT below, the share README and `run --help` recommend) at most 50% of
 * the pages are read, perplexity is within +2% of exact and recall is at least 95%; and
 * fewer pages never keep more mass. Over KV tiers (pages on disk) the default selects
 * the same pages, and the hit-rate model (kv_cache.h: the pages' heat) predicts the share
 * of selected disk pages found prefetched within 10 points. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "tierllm.h"
#include "testutil.h"

#define TL_KV_SELECT_DEFAULT 0.4f

typedef struct outcome { double ppl, read_share, recall, hit, hit_predicted; } outcome;

/* tiers = 0: KV in memory (the left-out pages can be scored for the recall); 1: in tiers,
 * a 32-position window and 16 sinks in memory, no cache, so every other page attention
 * selects comes from disk: prefetched by the hit-rate model or read on demand. */
static outcome evaluate(tl_model *m, const int32_t *ids, size_t n, float share, int tiers) {
    outcome o = {NAN, NAN, NAN, NAN, NAN};
    tl_context_params cp = tl_context_default_params();
    cp.n_ctx = (int32_t)n;
    cp.n_batch = 1;
    cp.kv_window = tiers ? 32 : -1;
    cp.kv_sinks = 16;
    cp.kv_cache_bytes = 0;
    cp.kv_select = share;
    cp.kv_select_measure = share > 0 && !tiers;
    tl_context *c;
    tl_status st = tl_context_open(m, &cp, &c);
    CHECK_MSG(st == TL_OK, "share %.2f: %s", (double)share, tl_last_error());
    if (st) return o;
    float logits[512];
    double nll = 0;
    for (size_t i = 0; i + 1 < n; i++) {
        st = tl_decode(c, &ids[i], 1, logits);
        CHECK_MSG(st == TL_OK, "share %.2f, token %zu: %s", (double)share, i, tl_last_error());
        if (st) break;
        double mx = logits[0], z = 0;
        for (int v = 1; v < 512; v++) mx = logits[v] > mx ? logits[v] : mx;
        for (int v = 0; v < 512; v++) z += exp(logits[v] - mx);
        nll -= logits[ids[i + 1]] - mx - log(z);
    }
    tl_run_stats rs;
    tl_context_get_stats(c, &rs);
    o.ppl = exp(nll / (double)(n - 1));
    if (share > 0) {
        o.read_share = (double)rs.kv_select_pages_read / (double)rs.kv_select_pages_total;
        o.recall = rs.kv_select_mass_kept / rs.kv_select_heads;
        o.hit = 1 - (double)rs.kv_demand_reads / (double)rs.kv_select_disk_pages;
        o.hit_predicted = rs.kv_heat_ready / rs.kv_heat_needed;
    }
    tl_context_close(c);
    return o;
}

int main(void) {
    char *text = tl_test_read_text(TL_SOURCE_DIR "/tests/data/heldout_story.txt");
    CHECK(text != NULL);
    tl_model *m = NULL;
    CHECK(tl_model_open(tl_test_model("stories260K.gguf"), NULL, &m) == TL_OK);
    if (!text || !m) return tl_test_finish("test_kv_select");
    static int32_t ids[4096];
    size_t n = 0;
    CHECK(tl_tokenize(m, text, strlen(text), 1, ids, 4096, &n) == TL_OK);
    if (n > 512) n = 512; /* the context stories260K was trained with */
    CHECK(n == 512);

    const outcome exact = evaluate(m, ids, n, 0, 0);
    printf("exact: perplexity %.4f over %zu tokens\n", exact.ppl, n);
    static const float shares[] = {1.0f, 0.75f, 0.6f, 0.5f, TL_KV_SELECT_DEFAULT, 0.3f, 0.2f};
    double prev_recall = 2;
    for (size_t k = 0; k < sizeof shares / sizeof shares[0]; k++) {
        const outcome o = evaluate(m, ids, n, shares[k], 0);
        printf("budget %3.0f%%: pages read %5.1f%% | perplexity %.4f (%+.2f%%) | attention "
               "mass kept %.2f%%\n", shares[k] * 100, o.read_share * 100, o.ppl,
               100 * (o.ppl / exact.ppl - 1), o.recall * 100);
        CHECK(o.recall <= prev_recall + 1e-9);
        prev_recall = o.recall;
        if (shares[k] == 1.0f)
            CHECK(fabs(o.ppl / exact.ppl - 1) < 1e-4 && o.read_share == 1 && o.recall > 0.9999);
        if (shares[k] == TL_KV_SELECT_DEFAULT) {
            CHECK_MSG(o.read_share <= 0.50, "default: %.1f%% of pages read", o.read_share * 100);
            CHECK_MSG(o.ppl / exact.ppl - 1 <= 0.02, "default: perplexity %+.2f%%",
                      100 * (o.ppl / exact.ppl - 1));
            CHECK_MSG(o.recall >= 0.95, "default: recall %.2f%%", o.recall * 100);
        }
    }
    /* the default over KV tiers: the same selection and perplexity as in memory; the
     * hit-rate model's prediction within 10 points of the measured hit rate */
    const outcome mem = evaluate(m, ids, n, TL_KV_SELECT_DEFAULT, 0);
    const outcome tier = evaluate(m, ids, n, TL_KV_SELECT_DEFAULT, 1);
    printf("default over tiers: perplexity %.4f (in memory %.4f) | selected disk pages "
           "found in memory %.3f, predicted %.3f\n", tier.ppl, mem.ppl, tier.hit,
           tier.hit_predicted);
    CHECK(fabs(tier.ppl / mem.ppl - 1) < 1e-6 && tier.read_share == mem.read_share);
    CHECK_MSG(tier.hit > 0.5 && fabs(tier.hit - tier.hit_predicted) <= 0.10,
              "hit rate %.3f, predicted %.3f", tier.hit, tier.hit_predicted);
    tl_model_close(m);
    free(text);
    return tl_test_finish("test_kv_select");
}

/* test_kv_quality.c - what KV compression costs: perplexity of stories260K on a held-out
 * story written for this test (tests/data/heldout_story.txt, in TinyStories' style),
 * with the KV cache stored exactly (32 bits), and group-wise quantized to 8 and 4 bits.
 * Tokens are evaluated one at a time, so every earlier full page is read back in its
 * stored (quantized) form. Limits: 8-bit within 1%, 4-bit within 5% of exact. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "tierllm.h"
#include "testutil.h"

static double perplexity(tl_model *m, const int32_t *ids, size_t n, int bits) {
    tl_context_params cp = tl_context_default_params();
    cp.n_ctx = (int32_t)n + 1;
    cp.n_batch = 1;
    cp.kv_bits = bits;
    tl_context *c;
    if (tl_context_open(m, &cp, &c) != TL_OK) return -1;
    tl_model_desc d;
    tl_model_describe(m, &d);
    float *logits = malloc((size_t)d.n_vocab * sizeof *logits);
    double nll = 0;
    for (size_t i = 0; i + 1 < n; i++) {
        if (tl_decode(c, &ids[i], 1, logits) != TL_OK) { nll = NAN; break; }
        double mx = logits[0], z = 0;
        for (int v = 1; v < d.n_vocab; v++) mx = logits[v] > mx ? logits[v] : mx;
        for (int v = 0; v < d.n_vocab; v++) z += exp(logits[v] - mx);
        nll -= logits[ids[i + 1]] - mx - log(z);
    }
    free(logits);
    tl_context_close(c);
    return exp(nll / (double)(n - 1));
}

int main(void) {
    const char *path = tl_test_model("stories260K.gguf");
    char *text = tl_test_read_text(TL_SOURCE_DIR "/tests/data/heldout_story.txt");
    CHECK(text != NULL);
    tl_model *m = NULL;
    CHECK(tl_model_open(path, NULL, &m) == TL_OK);
    if (!text || !m) return tl_test_finish("test_kv_quality");
    static int32_t ids[4096];
    size_t n = 0;
    CHECK(tl_tokenize(m, text, strlen(text), 1, ids, 4096, &n) == TL_OK);
    printf("held-out story: %zu tokens\n", n);
    CHECK(n > 200);
    double p32 = perplexity(m, ids, n, 32), p16 = perplexity(m, ids, n, 16);
    double p8 = perplexity(m, ids, n, 8), p4 = perplexity(m, ids, n, 4);
    printf("perplexity: exact %.4f | 16-bit %.4f (%+.3f%%) | 8-bit %.4f (%+.3f%%) | 4-bit %.4f "
           "(%+.3f%%)\n", p32, p16, 100 * (p16 / p32 - 1), p8, 100 * (p8 / p32 - 1), p4,
           100 * (p4 / p32 - 1));
    CHECK(p32 > 1 && p32 < 50); /* a trained model on in-style text */
    CHECK(fabs(p16 / p32 - 1) <= 0.01);
    CHECK(fabs(p8 / p32 - 1) <= 0.01);
    CHECK(fabs(p4 / p32 - 1) <= 0.05);
    CHECK(p4 != p32); /* the 4-bit path really ran */
    tl_model_close(m);
    free(text);
    return tl_test_finish("test_kv_quality");
}

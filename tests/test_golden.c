/* test_golden.c - stories260K greedy from BOS reproduces llama2.c's published output,
 * through the public API, for the F32 GGUF v3 and the Q8_0 GGUF v2 files, with the fast
 * and the reference kernels, and for several prompt batch sizes. */
#include <string.h>
#include "tierllm.h"
#include "testutil.h"

static const int32_t golden[40] = {403, 407, 261, 378, 432, 383, 286, 261, 376, 298,
                                   315, 421, 395, 317, 426, 338, 401, 396, 267, 337,
                                   410, 408, 419, 292, 411, 322, 265, 282, 295, 433,
                                   426, 385, 328, 432, 358, 394, 261, 370, 432, 352};
static const char *golden_text = " Once upon a time, there was a little girl named Lily. She "
                                 "loved to play outside in the park. One day, she saw a big, r";

static int argmax(const float *v, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[b]) b = i;
    return b;
}

static int collect(void *user, int32_t token, const char *text, size_t len) {
    (void)token;
    char *out = user;
    size_t have = strlen(out);
    if (have + len < 1024) {
        memcpy(out + have, text, len);
        out[have + len] = 0;
    }
    return 0;
}

static void greedy_ids(const char *path, int reference, int threads) {
    tl_model_params mp = tl_model_default_params();
    mp.reference_kernels = reference;
    mp.n_threads = threads;
    tl_model *m = NULL;
    tl_status st = tl_model_open(path, &mp, &m);
    CHECK_MSG(st == TL_OK, "%s: %s", path, tl_last_error());
    if (st) return;
    tl_model_desc d;
    tl_model_describe(m, &d);
    CHECK(d.n_vocab == 512 && d.n_layer == 5 && d.n_head_kv == 4 && d.bos_id == 1);
    tl_context *c;
    CHECK(tl_context_open(m, NULL, &c) == TL_OK);
    float logits[512];
    int32_t tok = 1;
    int ok = 1;
    for (int i = 0; i < 40; i++) {
        CHECK(tl_decode(c, &tok, 1, logits) == TL_OK);
        tok = argmax(logits, 512);
        if (tok != golden[i]) {
            fprintf(stderr, "%s (ref=%d): token %d is %d, golden %d\n", path, reference, i,
                    tok, golden[i]);
            ok = 0;
            break;
        }
    }
    CHECK(ok);
    /* the same continuation through tl_generate, as text */
    char out[1024] = {0};
    size_t len = 0;
    tl_generate_params gp = tl_generate_default_params();
    gp.sampler.temperature = 0;
    gp.n_predict = 40;
    tl_generate_stats gs;
    CHECK(tl_generate(c, "", &gp, collect, out, &gs) == TL_OK);
    len = strlen(out);
    CHECK_MSG(len == strlen(golden_text) && !strcmp(out, golden_text), "got '%s'", out);
    CHECK(gs.n_generated == 40 && gs.n_prompt == 1 && gs.n_decoded == 39);
    tl_context_close(c);
    tl_model_close(m);
}

/* A prompt evaluated in blocks of several sizes gives the same greedy continuation. */
static void batch_sizes(const char *path) {
    tl_model *m;
    CHECK(tl_model_open(path, NULL, &m) == TL_OK);
    int32_t prompt[16] = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395,
                          317, 426};
    int first = -1;
    for (int b = 1; b <= 17; b += 4) {
        tl_context_params cp = tl_context_default_params();
        cp.n_batch = b;
        tl_context *c;
        CHECK(tl_context_open(m, &cp, &c) == TL_OK);
        float logits[512];
        CHECK(tl_decode(c, prompt, 16, logits) == TL_OK);
        int t = argmax(logits, 512);
        if (first < 0) first = t;
        CHECK_MSG(t == first && t == 338, "batch %d: next token %d", b, t);
        tl_context_close(c);
    }
    tl_model_close(m);
}

int main(void) {
    const char *f32 = tl_test_model("stories260K.gguf");
    const char *q8 = tl_test_model("tinyllamas-stories-260k-q8_0.gguf");
    greedy_ids(f32, 0, 2);
    greedy_ids(f32, 1, 1);
    greedy_ids(q8, 0, 2);
    greedy_ids(q8, 1, 2);
    batch_sizes(f32);
    return tl_test_finish("test_golden");
}

/* test_stage.c - a model opened as one pipeline stage (tl_model_params.layer_first/end,
 * model/llama.h): it keeps only its layers' tensors, the embedding when first and the
 * final norm and classifier when last; its weight bytes are exactly those; its weight plan
 * holds no absent tensor; shape classes never point at an absent layer; a bad range is
 * refused; and a stage without a pipe refuses to run (engine.c) instead of computing
 * half a model. The pipeline itself runs under mpirun in tests/pipeline_cli.sh. */
#include <string.h>
#include "tierllm.h"
#include "testutil.h"
#include "exec/model_handle.h"
#include "model/placement.h"

static uint64_t present_bytes(tl_llama *m) {
    uint64_t b = 0;
    for (size_t i = 0; i < m->n_all; i++) b += m->all[i]->file_bytes;
    return b;
}

static tl_model *open_stage(const char *path, int32_t a, int32_t b, tl_status *st) {
    tl_model_params mp = tl_model_default_params();
    mp.layer_first = a;
    mp.layer_end = b;
    mp.mem_budget = 64u << 20;
    tl_model *m = NULL;
    *st = tl_model_open(path, &mp, &m);
    return m;
}

int main(void) {
    const char *path = tl_test_model("stories260K.gguf");
    tl_status st;
    tl_model *whole = open_stage(path, 0, 0, &st);
    CHECK(st == TL_OK && whole);
    if (!whole) return 1;
    const int32_t L = whole->lm.hp.n_layer;
    CHECK(L == 5);
    CHECK(whole->lm.stage_first == 0 && whole->lm.stage_end == L);
    CHECK(present_bytes(&whole->lm) == whole->lm.weight_bytes);

    /* the three kinds of stage: first, middle, last */
    const int32_t ranges[3][2] = {{0, 2}, {2, 4}, {4, 5}};
    uint64_t layer_sum = 0;
    for (int k = 0; k < 3; k++) {
        const int32_t a = ranges[k][0], b = ranges[k][1];
        tl_model *m = open_stage(path, a, b, &st);
        CHECK_MSG(st == TL_OK && m, "stage %d..%d: %s", a, b - 1, tl_last_error());
        if (!m) continue;
        tl_llama *lm = &m->lm;
        CHECK(lm->stage_first == a && lm->stage_end == b && tl_llama_stage_layers(lm) == b - a);
        CHECK(present_bytes(lm) == lm->weight_bytes);
        CHECK((lm->tok_embd.name != NULL) == (a == 0 || (lm->tied_output && b == L)));
        CHECK((lm->output_norm.name != NULL) == (b == L));
        for (int32_t l = 0; l < L; l++) {
            const int in = l >= a && l < b;
            CHECK((lm->layers[l].wq.name != NULL) == in);
            CHECK((lm->layers[l].w_down.name != NULL) == in);
            CHECK((lm->layers[l].attn_norm.name != NULL) == in);
            if (in) CHECK_MSG(lm->layers[l].shape_class >= a, "layer %d's class is %d", (int)l,
                              (int)lm->layers[l].shape_class);
        }
        for (int32_t l = a; l < b; l++) {
            tl_weight *ws[TL_WEIGHT_UNIT_MAX];
            for (int part = 0; part < 2; part++) {
                const int n = tl_llama_layer_matrices(&lm->layers[l], part, ws);
                for (int i = 0; i < n; i++) layer_sum += ws[i]->file_bytes;
            }
        }
        /* the all-streamed plan streams only what the stage holds */
        tl_weight_plan plan;
        CHECK(tl_weight_plan_make(lm, UINT64_MAX, 2, 1, &plan) == TL_OK);
        uint64_t streamed = 0;
        for (int32_t l = 0; l <= L; l++) streamed += tl_weight_plan_unit_bytes(lm, &plan, l);
        CHECK(streamed == 0); /* an unlimited budget keeps everything present resident */
        CHECK(plan.resident_bytes == lm->weight_bytes);
        tl_weight_plan_free(&plan);
        /* a stage with no pipe to pass its rows on refuses to run */
        tl_context *c = NULL;
        tl_context_params cp = tl_context_default_params();
        cp.n_ctx = 32;
        CHECK(tl_context_open(m, &cp, &c) == TL_OK);
        if (c) {
            float logits[512];
            const int32_t tok = 1;
            CHECK(tl_decode(c, &tok, 1, logits) == TL_ERR_INVALID);
            CHECK(strstr(tl_last_error(), "pipeline stage") != NULL);
        }
        tl_context_close(c);
        tl_model_close(m);
    }
    /* the stages' layers together are the whole model's */
    uint64_t whole_layers = 0;
    for (int32_t l = 0; l < L; l++) {
        tl_weight *ws[TL_WEIGHT_UNIT_MAX];
        for (int part = 0; part < 2; part++) {
            const int n = tl_llama_layer_matrices(&whole->lm.layers[l], part, ws);
            for (int i = 0; i < n; i++) whole_layers += ws[i]->file_bytes;
        }
    }
    CHECK(layer_sum == whole_layers);

    /* bad ranges */
    const int32_t bad[3][2] = {{3, 2}, {-1, 2}, {2, 9}};
    for (int k = 0; k < 3; k++) {
        tl_model *m = open_stage(path, bad[k][0], bad[k][1], &st);
        CHECK(st == TL_ERR_INVALID && m == NULL);
        CHECK(strstr(tl_last_error(), "pipeline stage") != NULL);
        tl_model_close(m);
    }
    tl_model_close(whole);
    return tl_test_failures ? 1 : 0;
}

/* calibrate_attention.c - the model's own attention over a long context against its price
 * (tl_plan_calibrate_attention, calibrate.h).
 *
 * The profile times attention on two small synthetic models, both of head size 64 (eight
 * kv heads, or four query heads to each kv head), and the cost model carries their
 * per-MAC figures to every model. A model's attention runs at its own rate per MAC: a
 * position's fixed work (its score, its softmax term) is spread over the head's size, one
 * kv head's rows of a page lie kv_dim floats apart, a group shares each row it reads, and
 * the machine's spell moves compute-bound work as a whole. The layer calibration
 * (calibrate_products.c) times forwards at positions 0 .. 511 only, where attention is a
 * small part; a long prompt's prefill is mostly attention. So the engine's attention
 * stage is timed alone, for one prompt chunk at the end of a long context, over a KV cache
 * of one layer shaped as the model's, and the block figures are scaled to match:
 * prof->attn_block_scale = (measured - priced reads beyond the caches) / priced per-MAC
 * part. The keys, values and queries are made up: the work does not depend on them.
 */
#include "plan/calibrate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "base/budget.h"
#include "base/clock.h"
#include "base/stats.h"
#include "base/status.h"
#include "exec/model_handle.h"
#include "kv/kv_cache.h"
#include "model/llama.h"
#include "plan/cost.h"

/* Each sample lasts at least ATTN_SAMPLE_S (a small model's chunk is too short to time
 * alone against the clock and the pool's wake-ups); ATTN_SAMPLES samples, the median
 * kept. A factor outside [1 / ATTN_MAX_SCALE, ATTN_MAX_SCALE] is taken at the bound. */
#define ATTN_SAMPLE_S 0.004
#define ATTN_SAMPLES 9
#define ATTN_MAX_SCALE 4.0
#define ATTN_PAGE_TOKENS 16 /* the contexts' KV page */
/* The chunks take copies of the layer's KV in turn, enough of them to fill ATTN_CYCLE_BYTES
 * (at most ATTN_MAX_COPIES; fewer where the budget has no room for them, before a shorter
 * context is tried): a run's layer reads its KV after the other layers' KV and weights
 * went through the caches, not from where the chunk before left it. */
#define ATTN_CYCLE_BYTES ((uint64_t)32 << 20)
#define ATTN_MAX_COPIES 16

/* The timed state: the engine's scratch for the chunk's rows at a context of P
 * positions and one sequence's KV cache of `copies` layers, each filled to P positions. */
typedef struct attn_state {
    tl_model *m;
    int32_t copies;
    tl_llama_scratch s;
    int scratch_ok;
    tl_kv *kv;
    int32_t seq;
    int32_t seq_pos[TL_PLAN_ATTN_ROWS], seq_ids[TL_PLAN_ATTN_ROWS];
} attn_state;

static void state_close(attn_state *a) {
    if (a->kv) tl_kv_close(a->kv);
    if (a->scratch_ok) tl_llama_scratch_free(&a->m->lm, &a->s);
    memset(a, 0, sizeof *a);
}

/* The copies of a layer's KV at a context of P positions that fill ATTN_CYCLE_BYTES. */
static int32_t wanted_copies(const tl_model *m, int32_t P) {
    const tl_llama_hparams *hp = &m->lm.hp;
    const uint64_t layer_bytes = 2 * (uint64_t)P * (uint64_t)(hp->n_head_kv * hp->head_dim) * 4;
    const uint64_t c = (ATTN_CYCLE_BYTES + layer_bytes - 1) / layer_bytes;
    return c > ATTN_MAX_COPIES ? ATTN_MAX_COPIES : (int32_t)c;
}

/* Opens the state for a context of P positions in `copies` copies and appends them; 0
 * (nothing held, no error left) when the budget has no room or an append fails. */
static int state_open(tl_model *m, int32_t P, int32_t copies, attn_state *a) {
    const int32_t R = TL_PLAN_ATTN_ROWS;
    const tl_llama_hparams *hp = &m->lm.hp;
    memset(a, 0, sizeof *a);
    a->m = m;
    a->copies = copies;
    tl_kv_params kp;
    tl__calibrate_kv_params(m, a->copies, P, R, ATTN_PAGE_TOKENS, &kp);
    int ok = !tl_llama_scratch_init(&m->lm, R, P, ATTN_PAGE_TOKENS, &a->s);
    a->scratch_ok = ok;
    ok = ok && !tl_kv_open(&kp, m->lm.budget, m->lm.aio, &a->kv);
    /* the pages come as the appends fill them: room for all of them now */
    ok = ok && tl_budget_used(m->lm.budget) + tl_kv_budget_bytes(&kp, 1) <=
                   tl_budget_limit(m->lm.budget);
    ok = ok && !tl_kv_seq_open(a->kv, &a->seq);
    /* keys and values, R positions at a time through the scratch's K and V rows */
    const size_t kvd = (size_t)kp.kv_dim;
    for (int32_t t = 0; ok && t < P; t += R) {
        const int32_t n = P - t < R ? P - t : R;
        for (size_t i = 0; i < (size_t)n * kvd; i++) {
            a->s.k[i] = (float)((i * 7 + (size_t)t) % 29) / 29.0f - 0.5f;
            a->s.v[i] = (float)((i * 5 + (size_t)t) % 31) / 31.0f - 0.5f;
        }
        for (int32_t l = 0; ok && l < a->copies; l++)
            ok = !tl_kv_append(a->kv, a->seq, l, a->s.k, a->s.v, n);
        ok = ok && !tl_kv_seq_commit(a->kv, a->seq, n);
    }
    if (!ok) {
        state_close(a);
        tl_error_clear();
        return 0;
    }
    const size_t qd = (size_t)hp->n_head * hp->head_dim;
    for (size_t i = 0; i < (size_t)R * qd; i++) a->s.q[i] = (float)(i % 23) / 23.0f - 0.5f;
    for (int32_t r = 0; r < R; r++) a->seq_ids[r] = a->seq, a->seq_pos[r] = P - R + r;
    return 1;
}

/* Seconds of the attention of the chunk (the last R positions), the copies taken in
 * turn: the median of the samples, each of as many repeats as fill ATTN_SAMPLE_S. */
static tl_status attention_s(attn_state *a, double *seconds) {
    const tl_llama_rows rows = {TL_PLAN_ATTN_ROWS, a->seq_ids, a->seq_pos};
    tl_status st = TL_OK;
    for (int32_t c = 0; c < a->copies && !st; c++) { /* in memory: viewable until released */
        st = tl_kv_prefetch(a->kv, &a->seq, 1, c);
        if (!st) st = tl_kv_wait(a->kv, &a->seq, 1, c);
    }
    int32_t l = 0;
    double t[ATTN_SAMPLES];
    int reps = 1;
    for (int r = -1; r < ATTN_SAMPLES && !st; r++) { /* -1: warms the caches, sizes a sample */
        const double t0 = tl_now();
        for (int k = 0; k < reps && !st; k++, l = (l + 1) % a->copies)
            st = tl_llama_attend(&a->m->lm, &a->s, a->kv, l, &rows);
        const double dt = (tl_now() - t0) / reps;
        if (r < 0) reps = dt > 0 && dt < ATTN_SAMPLE_S ? (int)ceil(ATTN_SAMPLE_S / dt) : 1;
        else t[r] = dt;
    }
    for (int32_t c = 0; c < a->copies; c++) tl_kv_release(a->kv, &a->seq, 1, c);
    if (!st) *seconds = tl_median(t, ATTN_SAMPLES);
    return st;
}

tl_status tl_plan_calibrate_attention(tl_model *m, tl_hw_profile *prof, double *ratio) {
    *ratio = 1;
    prof->attn_block_scale = 0; /* priced as the profile has it */
    const tl_llama_hparams *hp = &m->lm.hp;
    int32_t P = TL_PLAN_ATTN_POS;
    if (hp->n_swa > 0 && hp->n_swa < P) P = hp->n_swa; /* a row sees no more than that */
    if (hp->pos_learned && hp->n_ctx_train > 0 && hp->n_ctx_train < P) P = hp->n_ctx_train;
    attn_state a;
    int opened = 0;
    while (!opened && P >= TL_PLAN_ATTN_MIN_POS) { /* fewer copies first, then positions */
        for (int32_t c = wanted_copies(m, P); c >= 1 && !opened; c /= 2)
            opened = state_open(m, P, c, &a);
        if (!opened) P /= 2;
    }
    if (!opened) return TL_OK; /* no room: nothing measured */
    double measured = 0;
    tl_status st = attention_s(&a, &measured);
    const int32_t copies = a.copies;
    state_close(&a);
    if (st) return tl_error_wrap(st, "calibrating attention");
    double per_mac = 0;
    const double priced = tl_cost_attention_s(m, prof, TL_PLAN_ATTN_ROWS, P - TL_PLAN_ATTN_ROWS,
                                              P, copies, &per_mac);
    if (!(measured > 0) || !(per_mac > 0)) return TL_OK;
    const double k = (measured - (priced - per_mac)) / per_mac;
    prof->attn_block_scale = fmin(ATTN_MAX_SCALE, fmax(1 / ATTN_MAX_SCALE, k));
    *ratio = prof->attn_block_scale;
    return TL_OK;
}

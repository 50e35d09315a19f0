/* llama_forward.c - the Llama forward pass, one block of tokens at a time.
 *
 * Read top to bottom this is the whole model (shapes in brackets, n = tokens in the
 * block, d = n_embd, qd = n_head*head_dim, kvd = n_head_kv*head_dim, f = n_ff):
 *   x[n][d] = token_embd[tokens]
 *   per layer:  xn = rmsnorm(x) * attn_norm
 *               q[n][qd], k[n][kvd], v[n][kvd] = xn Wq^T, xn Wk^T, xn Wv^T; rope(q, k)
 *               append k, v to the cache; att[n][qd] = causal GQA attention
 *               x += att Wo^T
 *               xn = rmsnorm(x) * ffn_norm
 *               x += (silu(xn Wgate^T) * (xn Wup^T)) Wdown^T      [n][f] inside
 *   logits = rmsnorm(x) * output_norm  Woutput^T
 * Prefill runs all n tokens through each matrix at once (matrix-matrix products).
 */
#include <stdlib.h>
#include <string.h>
#include "llama.h"
#include "ops.h"
#include "../base/status.h"
#include "../exec/residency.h"
#include "../kernels/kernels.h"

static tl_status alloc_f(tl_model *m, size_t n, const char *what, float **out) {
    return tl_budget_calloc(m->budget, n * sizeof(float), what, (void **)out);
}

/* The state's buffers, sized for (n_ctx, n_batch): one table serves sizing and
 * allocation, so the budget check before a run is exact. */
typedef struct state_buf { float **ptr; size_t floats; const char *what; } state_buf;

static size_t state_table(const tl_model *m, tl_llama_state *s, int32_t n_ctx, int32_t n_batch,
                          state_buf *t) {
    const tl_llama_hparams *hp = &m->hp;
    const size_t nb = (size_t)n_batch, d = (size_t)hp->n_embd, f = (size_t)hp->n_ff;
    const size_t qd = (size_t)hp->n_head * hp->head_dim;
    const size_t kvd = (size_t)hp->n_head_kv * hp->head_dim;
    const size_t threads = (size_t)tl_pool_threads(m->pool);
    const size_t cache = (size_t)hp->n_layer * (size_t)n_ctx * kvd;
    size_t widest = f > d ? f : d;
    if (qd > widest) widest = qd;
    s->mm_scratch_floats = tl_matmul_scratch_floats(widest, nb);
    size_t n = 0;
    t[n++] = (state_buf){&s->k_cache, cache, "KV cache (K)"};
    t[n++] = (state_buf){&s->v_cache, cache, "KV cache (V)"};
    t[n++] = (state_buf){&s->x, nb * d, "activations"};
    t[n++] = (state_buf){&s->xn, nb * (d > qd ? d : qd), "activations"};
    t[n++] = (state_buf){&s->q, nb * qd, "activations"};
    t[n++] = (state_buf){&s->k, nb * kvd, "activations"};
    t[n++] = (state_buf){&s->v, nb * kvd, "activations"};
    t[n++] = (state_buf){&s->att_out, nb * qd, "activations"};
    t[n++] = (state_buf){&s->gate, nb * f, "activations"};
    t[n++] = (state_buf){&s->up, nb * f, "activations"};
    t[n++] = (state_buf){&s->scores, threads * (size_t)n_ctx, "attention scores"};
    t[n++] = (state_buf){&s->mm_scratch, threads * (s->mm_scratch_floats ? s->mm_scratch_floats : 1),
                         "matmul scratch"};
    return n;
}

uint64_t tl_llama_state_bytes(const tl_model *m, int32_t n_ctx, int32_t n_batch) {
    tl_llama_state s;
    state_buf t[16];
    if (n_batch > n_ctx) n_batch = n_ctx;
    size_t n = state_table(m, &s, n_ctx, n_batch, t);
    uint64_t bytes = 0;
    for (size_t i = 0; i < n; i++) bytes += t[i].floats * sizeof(float) + 64;
    return bytes;
}

tl_status tl_llama_state_init(tl_model *m, int32_t n_ctx, int32_t n_batch, tl_llama_state *s) {
    memset(s, 0, sizeof *s);
    if (n_ctx <= 0 || n_batch <= 0)
        return tl_error_set(TL_ERR_INVALID, "context %d and batch %d must be positive",
                            (int)n_ctx, (int)n_batch);
    if (n_batch > n_ctx) n_batch = n_ctx;
    s->n_ctx = n_ctx;
    s->n_batch = n_batch;
    state_buf t[16];
    size_t n = state_table(m, s, n_ctx, n_batch, t);
    for (size_t i = 0; i < n; i++) {
        tl_status st = alloc_f(m, t[i].floats, t[i].what, t[i].ptr);
        if (st) {
            tl_llama_state_free(m, s);
            return st;
        }
    }
    return TL_OK;
}

void tl_llama_state_free(tl_model *m, tl_llama_state *s) {
    float *bufs[] = {s->k_cache, s->v_cache, s->x, s->xn, s->q, s->k, s->v,
                     s->att_out, s->gate, s->up, s->scores, s->mm_scratch};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) tl_budget_free(m->budget, bufs[i]);
    memset(s, 0, sizeof *s);
}

static void matmul(tl_model *m, tl_llama_state *s, const tl_weight *w, const float *X, size_t n,
                   float *Y) {
    tl_op_matmul(m, w, X, n, Y, s->mm_scratch, s->mm_scratch_floats);
}

static void add_rows(float *x, const float *y, size_t count) {
    for (size_t i = 0; i < count; i++) x[i] += y[i];
}

static void layer_forward(tl_model *m, tl_llama_state *s, int32_t l, size_t n) {
    const tl_llama_hparams *hp = &m->hp;
    const tl_llama_layer *L = &m->layers[l];
    const size_t d = (size_t)hp->n_embd, f = (size_t)hp->n_ff;
    const size_t qd = (size_t)hp->n_head * hp->head_dim;
    const size_t kvd = (size_t)hp->n_head_kv * hp->head_dim;
    float *k_cache = s->k_cache + (size_t)l * (size_t)s->n_ctx * kvd;
    float *v_cache = s->v_cache + (size_t)l * (size_t)s->n_ctx * kvd;

    /* attention block */
    tl_op_rmsnorm(s->x, L->attn_norm.data, n, d, hp->rms_eps, s->xn);
    matmul(m, s, &L->wq, s->xn, n, s->q);
    matmul(m, s, &L->wk, s->xn, n, s->k);
    matmul(m, s, &L->wv, s->xn, n, s->v);
    for (size_t i = 0; i < n; i++) {
        int32_t pos = s->n_past + (int32_t)i;
        tl_op_rope(s->q + i * qd, hp->n_head, hp->head_dim, hp->rope_dim, pos, hp->rope_base);
        tl_op_rope(s->k + i * kvd, hp->n_head_kv, hp->head_dim, hp->rope_dim, pos,
                   hp->rope_base);
    }
    memcpy(k_cache + (size_t)s->n_past * kvd, s->k, n * kvd * sizeof(float));
    memcpy(v_cache + (size_t)s->n_past * kvd, s->v, n * kvd * sizeof(float));
    tl_op_attention(m, s->q, k_cache, v_cache, n, s->n_past, s->att_out, s->scores,
                    (size_t)s->n_ctx);
    matmul(m, s, &L->wo, s->att_out, n, s->xn); /* xn reused as [n][d] output */
    add_rows(s->x, s->xn, n * d);

    /* feed-forward block */
    tl_op_rmsnorm(s->x, L->ffn_norm.data, n, d, hp->rms_eps, s->xn);
    matmul(m, s, &L->w_gate, s->xn, n, s->gate);
    matmul(m, s, &L->w_up, s->xn, n, s->up);
    tl_op_swiglu(s->gate, s->up, n * f);
    matmul(m, s, &L->w_down, s->gate, n, s->xn);
    add_rows(s->x, s->xn, n * d);
}

tl_status tl_llama_forward(tl_model *m, tl_llama_state *s, const int32_t *tokens, size_t n,
                           float *logits, int logits_all) {
    const tl_llama_hparams *hp = &m->hp;
    const size_t d = (size_t)hp->n_embd;
    if (n == 0) return TL_OK;
    if (n > (size_t)s->n_batch)
        return tl_error_set(TL_ERR_INVALID, "%zu tokens exceed the batch size %d", n,
                            (int)s->n_batch);
    if ((size_t)s->n_past + n > (size_t)s->n_ctx)
        return tl_error_set(TL_ERR_CONTEXT, "context full: %d tokens held, %zu more do not "
                            "fit in the context of %d", (int)s->n_past, n, (int)s->n_ctx);
    for (size_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= hp->n_vocab)
            return tl_error_set(TL_ERR_INVALID, "token id %d is outside the vocabulary (0..%d)",
                                (int)tokens[i], (int)hp->n_vocab - 1);
    /* weights are acquired unit by unit: resident ones are no-ops, streamed ones wait
     * for reads the residency manager issued ahead of time */
    tl_residency *r = m->res;
    tl_status st = tl_residency_begin_pass(r, logits != NULL);
    for (size_t i = 0; i < n && !st; i++) st = tl_residency_embedding(r, tokens[i], s->x + i * d);
    for (int32_t l = 0; l < hp->n_layer && !st; l++) {
        if ((st = tl_residency_acquire(r, l))) break;
        layer_forward(m, s, l, n);
        tl_residency_release(r, l);
    }
    if (st) return st;
    s->n_past += (int32_t)n;
    if (logits) {
        size_t first = logits_all ? 0 : n - 1, rows = n - first;
        tl_op_rmsnorm(s->x + first * d, m->output_norm.data, rows, d, hp->rms_eps, s->xn);
        if ((st = tl_residency_acquire(r, hp->n_layer))) return st;
        matmul(m, s, &m->output, s->xn, rows, logits);
        tl_residency_release(r, hp->n_layer);
    }
    return TL_OK;
}

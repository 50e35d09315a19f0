/* llama_load.c - opening a GGUF Llama model: hyperparameters, shape checks, weights.
 *
 * Every tensor the forward pass uses is looked up by its GGUF name and its shape is
 * checked against the hyperparameters before any data is read, so a file with missing
 * or mis-shaped tensors fails with a message naming the tensor. Weights are read into
 * budget buffers. Two conversions happen at load: norm vectors become f32, and a
 * quantized matrix whose rows are not a whole number of blocks (the Q8_0 stories260K
 * file's ffn_down, 172 columns) is dequantized as one flat block stream into f32 rows.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llama.h"
#include "../base/status.h"
#include "../kernels/kernels.h"
#include "../tier/file.h"

static tl_status get_arch_u32(const tl_gguf *g, const char *arch, const char *key,
                              uint32_t *out, int required, uint32_t dflt) {
    char full[128];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    if (!tl_gguf_find(g, full)) {
        if (required) return tl_error_set(TL_ERR_FORMAT, "missing metadata key '%s'", full);
        *out = dflt;
        return TL_OK;
    }
    return tl_gguf_get_u32(g, full, out);
}

static tl_status get_arch_f32(const tl_gguf *g, const char *arch, const char *key, float *out,
                              float dflt) {
    char full[128];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    if (!tl_gguf_find(g, full)) {
        *out = dflt;
        return TL_OK;
    }
    return tl_gguf_get_f32(g, full, out);
}

tl_status tl_llama_read_hparams(const tl_gguf *g, tl_llama_hparams *hp) {
    memset(hp, 0, sizeof *hp);
    const tl_gguf_str *arch;
    tl_status st = tl_gguf_get_str(g, "general.architecture", &arch);
    if (st) return st;
    if (strcmp(arch->s, "llama") != 0)
        return tl_error_set(TL_ERR_UNSUPPORTED, "architecture '%.40s' is not supported (llama "
                            "is)", arch->s);
    snprintf(hp->arch, sizeof hp->arch, "%s", arch->s);
    uint32_t n_embd, n_ff, n_layer, n_head, n_head_kv, head_dim, rope_dim, n_ctx;
    if ((st = get_arch_u32(g, hp->arch, "embedding_length", &n_embd, 1, 0)) ||
        (st = get_arch_u32(g, hp->arch, "feed_forward_length", &n_ff, 1, 0)) ||
        (st = get_arch_u32(g, hp->arch, "block_count", &n_layer, 1, 0)) ||
        (st = get_arch_u32(g, hp->arch, "attention.head_count", &n_head, 1, 0)) ||
        (st = get_arch_u32(g, hp->arch, "attention.head_count_kv", &n_head_kv, 0, n_head)) ||
        (st = get_arch_u32(g, hp->arch, "context_length", &n_ctx, 0, 2048)))
        return st;
    const uint32_t big = 1u << 20;
    if (n_embd == 0 || n_embd > big || n_ff == 0 || n_ff > big || n_layer == 0 ||
        n_layer > 4096 || n_head == 0 || n_head > 4096 || n_head_kv == 0 ||
        n_head % n_head_kv != 0 || n_ctx == 0)
        return tl_error_set(TL_ERR_FORMAT, "inconsistent hyperparameters: embedding %u, ffn %u, "
                            "layers %u, heads %u, kv heads %u, context %u", n_embd, n_ff,
                            n_layer, n_head, n_head_kv, n_ctx);
    if ((st = get_arch_u32(g, hp->arch, "attention.key_length", &head_dim, 0,
                           n_embd / n_head)))
        return st;
    if (head_dim == 0 || head_dim > 4096 || head_dim % 2 != 0)
        return tl_error_set(TL_ERR_FORMAT, "invalid head dimension %u", head_dim);
    if ((st = get_arch_u32(g, hp->arch, "rope.dimension_count", &rope_dim, 0, head_dim)))
        return st;
    if (rope_dim > head_dim || rope_dim % 2 != 0)
        return tl_error_set(TL_ERR_FORMAT, "rope.dimension_count %u is invalid for head "
                            "dimension %u", rope_dim, head_dim);
    if ((st = get_arch_f32(g, hp->arch, "attention.layer_norm_rms_epsilon", &hp->rms_eps,
                           1e-5f)) ||
        (st = get_arch_f32(g, hp->arch, "rope.freq_base", &hp->rope_base, 10000.0f)))
        return st;
    if (!(hp->rms_eps > 0 && hp->rms_eps < 1) || !(hp->rope_base > 1))
        return tl_error_set(TL_ERR_FORMAT, "invalid rms epsilon %g or rope base %g",
                            hp->rms_eps, hp->rope_base);
    hp->n_embd = (int32_t)n_embd;
    hp->n_ff = (int32_t)n_ff;
    hp->n_layer = (int32_t)n_layer;
    hp->n_head = (int32_t)n_head;
    hp->n_head_kv = (int32_t)n_head_kv;
    hp->head_dim = (int32_t)head_dim;
    hp->rope_dim = (int32_t)rope_dim;
    hp->n_ctx_train = n_ctx > (1u << 24) ? (1 << 24) : (int32_t)n_ctx;
    return TL_OK;
}

static tl_status track(tl_model *m, void *buf) {
    if (m->n_buffers == m->cap_buffers) {
        size_t cap = m->cap_buffers ? 2 * m->cap_buffers : 64;
        void **b = realloc(m->buffers, cap * sizeof *b);
        if (!b) return tl_error_set(TL_ERR_NOMEM, "out of memory");
        m->buffers = b;
        m->cap_buffers = cap;
    }
    m->buffers[m->n_buffers++] = buf;
    return TL_OK;
}

static tl_status alloc_tracked(tl_model *m, size_t size, const char *what, void **out) {
    tl_status st = tl_budget_alloc(m->budget, size, 64, what, out);
    if (st) return st;
    st = track(m, *out);
    if (st) tl_budget_free(m->budget, *out);
    return st;
}

static const tl_gguf_tensor *find_checked(tl_model *m, const char *name, uint64_t ne0,
                                          uint64_t ne1, tl_status *st) {
    const tl_gguf_tensor *t = tl_gguf_find_tensor(m->gguf, name);
    if (!t) {
        *st = tl_error_set(TL_ERR_FORMAT, "%s: missing tensor '%s'", m->path, name);
        return NULL;
    }
    uint64_t want_dims = ne1 > 1 ? 2 : 1;
    if (t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != 1 || t->ne[3] != 1 ||
        t->n_dims > 2 || t->n_dims < want_dims) {
        *st = tl_error_set(TL_ERR_FORMAT, "%s: tensor '%s' has %u-d shape [%llu, %llu, %llu, "
                           "%llu], expected [%llu, %llu]", m->path, name, t->n_dims,
                           (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
                           (unsigned long long)t->ne[2], (unsigned long long)t->ne[3],
                           (unsigned long long)ne0, (unsigned long long)ne1);
        return NULL;
    }
    *st = TL_OK;
    return t;
}

/* Reads tensor data; converts to f32 when `to_f32` or when rows split blocks. */
static tl_status load_tensor(tl_model *m, const tl_file *f, const tl_gguf_tensor *t,
                             int to_f32, tl_weight *w) {
    size_t cols = (size_t)t->ne[0], rows = (size_t)t->ne[1];
    int split_blocks = cols % tl_type_block_elems(t->type) != 0;
    void *raw;
    tl_status st;
    if (!to_f32 && !split_blocks) {
        if ((st = alloc_tracked(m, (size_t)t->nbytes, t->name, &raw))) return st;
        if ((st = tl_file_read_at(f, t->offset, raw, (size_t)t->nbytes)))
            return tl_error_wrap(st, "loading tensor '%s'", t->name);
        *w = (tl_weight){t->type, rows, cols, raw, t->name};
        m->weight_bytes += t->nbytes;
    } else {
        if ((st = tl_budget_alloc(m->budget, (size_t)t->nbytes, 64, t->name, &raw))) return st;
        float *dst;
        st = alloc_tracked(m, (size_t)t->n_elems * sizeof(float), t->name, (void **)&dst);
        if (!st) st = tl_file_read_at(f, t->offset, raw, (size_t)t->nbytes);
        if (!st) tl_dequant_row(t->type, raw, dst, (size_t)t->n_elems);
        tl_budget_free(m->budget, raw);
        if (st) return tl_error_wrap(st, "loading tensor '%s'", t->name);
        *w = (tl_weight){TL_TYPE_F32, rows, cols, dst, t->name};
        m->weight_bytes += (uint64_t)t->n_elems * sizeof(float);
    }
    m->n_params += t->n_elems;
    return TL_OK;
}

static tl_status load_matrix(tl_model *m, const tl_file *f, const char *name, uint64_t cols,
                             uint64_t rows, tl_weight *w) {
    tl_status st;
    const tl_gguf_tensor *t = find_checked(m, name, cols, rows, &st);
    return t ? load_tensor(m, f, t, 0, w) : st;
}

static tl_status load_norm(tl_model *m, const tl_file *f, const char *name, uint64_t n,
                           const float **out) {
    tl_status st;
    const tl_gguf_tensor *t = find_checked(m, name, n, 1, &st);
    if (!t) return st;
    tl_weight w;
    if ((st = load_tensor(m, f, t, 1, &w))) return st;
    *out = w.data;
    return TL_OK;
}

static tl_status load_weights(tl_model *m, const tl_file *f) {
    const tl_llama_hparams *hp = &m->hp;
    const uint64_t d = (uint64_t)hp->n_embd, hd = (uint64_t)hp->head_dim;
    const uint64_t q_dim = hd * (uint64_t)hp->n_head, kv_dim = hd * (uint64_t)hp->n_head_kv;
    tl_status st;
    const tl_gguf_tensor *emb = tl_gguf_find_tensor(m->gguf, "token_embd.weight");
    if (!emb) return tl_error_set(TL_ERR_FORMAT, "%s: missing tensor 'token_embd.weight'",
                                  m->path);
    if (emb->ne[1] == 0 || emb->ne[1] > (1u << 24))
        return tl_error_set(TL_ERR_FORMAT, "%s: token_embd.weight has an invalid vocabulary "
                            "size %llu", m->path, (unsigned long long)emb->ne[1]);
    m->hp.n_vocab = (int32_t)emb->ne[1];
    if ((st = load_matrix(m, f, "token_embd.weight", d, emb->ne[1], &m->tok_embd))) return st;
    if ((st = load_norm(m, f, "output_norm.weight", d, &m->output_norm))) return st;
    if (tl_gguf_find_tensor(m->gguf, "output.weight")) {
        if ((st = load_matrix(m, f, "output.weight", d, emb->ne[1], &m->output))) return st;
    } else {
        m->output = m->tok_embd; /* tied classifier */
    }
    m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
    if (!m->layers) return tl_error_set(TL_ERR_NOMEM, "out of memory");
    for (int32_t l = 0; l < hp->n_layer; l++) {
        tl_llama_layer *L = &m->layers[l];
        char n[96];
#define NAME(s) (snprintf(n, sizeof n, "blk.%d." s, (int)l), n)
        if ((st = load_norm(m, f, NAME("attn_norm.weight"), d, &L->attn_norm)) ||
            (st = load_matrix(m, f, NAME("attn_q.weight"), d, q_dim, &L->wq)) ||
            (st = load_matrix(m, f, NAME("attn_k.weight"), d, kv_dim, &L->wk)) ||
            (st = load_matrix(m, f, NAME("attn_v.weight"), d, kv_dim, &L->wv)) ||
            (st = load_matrix(m, f, NAME("attn_output.weight"), q_dim, d, &L->wo)) ||
            (st = load_norm(m, f, NAME("ffn_norm.weight"), d, &L->ffn_norm)) ||
            (st = load_matrix(m, f, NAME("ffn_gate.weight"), d, (uint64_t)hp->n_ff,
                              &L->w_gate)) ||
            (st = load_matrix(m, f, NAME("ffn_up.weight"), d, (uint64_t)hp->n_ff, &L->w_up)) ||
            (st = load_matrix(m, f, NAME("ffn_down.weight"), (uint64_t)hp->n_ff, d,
                              &L->w_down)))
            return st;
#undef NAME
    }
    return TL_OK;
}

tl_model_params tl_model_default_params(void) {
    tl_model_params p = {0};
    p.n_threads = 0;
    p.reference_kernels = 0;
    return p;
}

tl_status tl_model_open(const char *path, const tl_model_params *params, tl_model **out) {
    *out = NULL;
    tl_error_clear();
    tl_model_params p = params ? *params : tl_model_default_params();
    tl_model *m = calloc(1, sizeof *m);
    if (!m) return tl_error_set(TL_ERR_NOMEM, "out of memory");
    m->path = strdup(path);
    m->use_reference = p.reference_kernels;
    tl_file f = {.fd = -1};
    tl_status st = m->path ? TL_OK : tl_error_set(TL_ERR_NOMEM, "out of memory");
    if (!st) st = tl_gguf_open(path, &m->gguf);
    if (!st && (st = tl_llama_read_hparams(m->gguf, &m->hp))) tl_error_wrap(st, "%s", path);
    if (!st && (st = tl_tokenizer_from_gguf(m->gguf, &m->tok))) tl_error_wrap(st, "%s", path);
    if (!st) st = tl_budget_open(0, &m->budget);
    if (!st) st = tl_pool_open(p.n_threads, &m->pool);
    if (!st) st = tl_file_open_ro(path, &f);
    if (!st) st = load_weights(m, &f);
    if (!st && tl_tokenizer_n_vocab(m->tok) > m->hp.n_vocab)
        st = tl_error_set(TL_ERR_FORMAT, "%s: the tokenizer has %d tokens but token_embd has "
                          "only %d rows", path, (int)tl_tokenizer_n_vocab(m->tok),
                          (int)m->hp.n_vocab);
    tl_file_close(&f);
    if (st) {
        tl_model_close(m);
        return st;
    }
    *out = m;
    return TL_OK;
}

void tl_model_close(tl_model *m) {
    if (!m) return;
    for (size_t i = 0; i < m->n_buffers; i++) tl_budget_free(m->budget, m->buffers[i]);
    free(m->buffers);
    free(m->layers);
    tl_pool_close(m->pool);
    tl_budget_close(m->budget);
    tl_tokenizer_free(m->tok);
    tl_gguf_free(m->gguf);
    free(m->path);
    free(m);
}

tl_status tl_model_describe(const tl_model *m, tl_model_desc *d) {
    memset(d, 0, sizeof *d);
    snprintf(d->arch, sizeof d->arch, "%s", m->hp.arch);
    d->n_vocab = m->hp.n_vocab;
    d->n_embd = m->hp.n_embd;
    d->n_ff = m->hp.n_ff;
    d->n_layer = m->hp.n_layer;
    d->n_head = m->hp.n_head;
    d->n_head_kv = m->hp.n_head_kv;
    d->head_dim = m->hp.head_dim;
    d->n_ctx_train = m->hp.n_ctx_train;
    d->bos_id = tl_tokenizer_bos(m->tok);
    d->eos_id = tl_tokenizer_eos(m->tok);
    d->n_params = m->n_params;
    d->weight_bytes = m->weight_bytes;
    return TL_OK;
}

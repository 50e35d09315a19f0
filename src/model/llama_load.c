/* llama_load.c - opening a GGUF Llama model: hyperparameters, shape checks, weights.
 *
 * Every tensor the forward pass uses is looked up by its GGUF name and its shape is
 * checked against the hyperparameters before any data is read, so a file with missing
 * or mis-shaped tensors fails with a message naming the tensor. Opening reads no
 * weights: it records each tensor's place in the file; exec/ reads them when the first
 * context fixes the memory budget. Two
 * tensors kinds are converted to f32 when read (and always kept resident): norm vectors,
 * and quantized matrices whose rows are not a whole number of blocks (the Q8_0
 * stories260K file's ffn_down, 172 columns), dequantized as one flat block stream.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "model/llama.h"
#include "base/status.h"
#include "format/hf_folder.h"
#include "model/flash_layout.h"
#include "model/ops.h"
#include "kernels/kernels.h"
#include "tier/aio.h"
#include "tier/tier.h"

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
    if (strcmp(arch->s, "llama") != 0 && strcmp(arch->s, "qwen2") != 0 &&
        strcmp(arch->s, "opt") != 0)
        return tl_error_set(TL_ERR_UNSUPPORTED, "architecture '%.40s' is not supported (llama, "
                            "qwen2 and opt are)", arch->s);
    snprintf(hp->arch, sizeof hp->arch, "%s", arch->s);
    hp->rope_mode = strcmp(arch->s, "qwen2") == 0 ? TL_ROPE_NEOX : TL_ROPE_PAIRS;
    hp->layer_norm = hp->ffn_relu = hp->pos_learned = strcmp(arch->s, "opt") == 0;
    /* a Hugging Face Llama folder keeps q and k in rotate-half order (format/hf_folder.h) */
    if (tl_gguf_find(g, "tierllm.rope_half_order")) {
        bool b;
        if ((st = tl_gguf_get_bool(g, "tierllm.rope_half_order", &b))) return st;
        if (b && hp->rope_mode == TL_ROPE_PAIRS) hp->rope_mode = TL_ROPE_HALF_AS_PAIRS;
    }
    const tl_gguf_kv *act = tl_gguf_find(g, "tierllm.ffn_activation");
    if (act) {
        if (act->type != TL_GGUF_STRING ||
            (strcmp(act->v.str.s, "silu") != 0 && strcmp(act->v.str.s, "relu") != 0))
            return tl_error_set(TL_ERR_FORMAT, "tierllm.ffn_activation must be \"silu\" or "
                                "\"relu\"");
        hp->ffn_gate_relu = !strcmp(act->v.str.s, "relu");
        if (hp->ffn_gate_relu && hp->ffn_relu)
            return tl_error_set(TL_ERR_FORMAT, "tierllm.ffn_activation applies to a gated "
                                "feed-forward; %s has none", hp->arch);
    }
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
    uint32_t n_swa;
    if ((st = get_arch_u32(g, hp->arch, "attention.sliding_window", &n_swa, 0, 0))) return st;
    if (n_swa > (1u << 24))
        return tl_error_set(TL_ERR_FORMAT, "attention.sliding_window %u is too large", n_swa);
    hp->n_swa = (int32_t)n_swa;
    /* LayerNorm's epsilon is under llama.cpp's key for LayerNorm architectures */
    if ((st = get_arch_f32(g, hp->arch, hp->layer_norm ? "attention.layer_norm_epsilon"
                                                       : "attention.layer_norm_rms_epsilon",
                           &hp->rms_eps, 1e-5f)) ||
        (st = get_arch_f32(g, hp->arch, "rope.freq_base", &hp->rope_base, 10000.0f)))
        return st;
    if (!(hp->rms_eps > 0 && hp->rms_eps < 1) || !(hp->rope_base > 1))
        return tl_error_set(TL_ERR_FORMAT, "invalid %s epsilon %g or rope base %g",
                            hp->layer_norm ? "layer norm" : "rms", hp->rms_eps, hp->rope_base);
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


static const tl_gguf_tensor *find_checked(tl_llama *m, const char *name, uint64_t ne0,
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

/* Records where a tensor's data lives and how it will be held in memory. */
static tl_status describe(tl_llama *m, const char *name, uint64_t cols, uint64_t rows,
                          int is_norm, tl_weight *w) {
    tl_status st;
    const tl_gguf_tensor *t = find_checked(m, name, cols, rows, &st);
    if (!t) return st;
    int split_blocks = cols % tl_type_block_elems(t->type) != 0;
    memset(w, 0, sizeof *w);
    w->convert = is_norm || split_blocks;
    w->type = w->convert ? TL_TYPE_F32 : t->type;
    w->rows = (size_t)rows;
    w->cols = (size_t)cols;
    w->name = t->name;
    w->file_type = t->type;
    w->file_offset = t->offset;
    w->file_bytes = t->nbytes;
    m->weight_bytes += t->nbytes;
    m->n_params += t->n_elems;
    return TL_OK;
}

/* An optional f32 vector (a bias, the RoPE frequency divisors) of n elements: described
 * like a norm when the file has it, else left with name NULL. */
static tl_status describe_optional(tl_llama *m, const char *name, uint64_t n, tl_weight *w) {
    memset(w, 0, sizeof *w);
    if (!tl_gguf_find_tensor(m->gguf, name)) return TL_OK;
    return describe(m, name, n, 1, 1, w);
}

/* A flash-layout layer (model/flash_layout.h): its site tensors (four, or two and the
 * neuron runs with the predictor), each run a whole number of blocks of every part (not
 * converted at load: the runs are read selectively), and the seven matrices' shapes with
 * name NULL. */
static tl_status describe_flash_layer(tl_llama *m, int32_t l, tl_llama_layer *L) {
    char n[96];
    tl_status st;
    for (int s = 0; s < TL_SITE_COUNT; s++) {
        if (m->hp.ffn_neurons && (s == TL_SITE_FFN_IN || s == TL_SITE_FFN_MID)) continue;
        tl_flash_part parts[TL_FLASH_MAX_PARTS];
        const int np = tl_flash_site_parts(&m->hp, s, parts);
        snprintf(n, sizeof n, "blk.%d.%s", (int)l, tl_flash_site_tensor(s));
        if ((st = describe(m, n, tl_flash_site_run(&m->hp, s),
                           tl_flash_site_channels(&m->hp, s), 0, &L->site[s])))
            return st;
        L->site[s].runs = 1;
        const uint64_t blk = tl_type_block_elems(L->site[s].file_type);
        for (int i = 0; i < np; i++)
            if (L->site[s].convert || parts[i].len % blk)
                return tl_error_set(TL_ERR_FORMAT, "%s: '%s' is %s, whose %llu-element blocks "
                                    "do not divide its runs' parts", m->path, n,
                                    tl_type_name(L->site[s].file_type),
                                    (unsigned long long)blk);
    }
    const uint64_t d = (uint64_t)m->hp.n_embd, f = (uint64_t)m->hp.n_ff;
    const uint64_t qd = (uint64_t)m->hp.n_head * (uint64_t)m->hp.head_dim;
    const uint64_t kvd = (uint64_t)m->hp.n_head_kv * (uint64_t)m->hp.head_dim;
    const struct { tl_weight *w; uint64_t rows, cols; int site; } mats[] = {
        {&L->wq, qd, d, TL_SITE_ATTN_IN},   {&L->wk, kvd, d, TL_SITE_ATTN_IN},
        {&L->wv, kvd, d, TL_SITE_ATTN_IN},  {&L->wo, d, qd, TL_SITE_ATTN_OUT},
        {&L->w_gate, f, d, TL_SITE_FFN_IN}, {&L->w_up, f, d, TL_SITE_FFN_IN},
        {&L->w_down, d, f, TL_SITE_FFN_MID}};
    if (m->hp.ffn_neurons) { /* the FFN by neuron, and its predictor (model/neurons.h) */
        tl_flash_part parts[TL_FLASH_MAX_PARTS];
        const int np = tl_flash_neuron_parts(&m->hp, parts);
        const uint64_t r = (uint64_t)m->neuron_info.rank;
        snprintf(n, sizeof n, "blk.%d.ffn_neurons", (int)l);
        if ((st = describe(m, n, tl_flash_neuron_run(&m->hp), f, 0, &L->neurons))) return st;
        L->neurons.runs = 1;
        const uint64_t blk = tl_type_block_elems(L->neurons.file_type);
        for (int i = 0; i < np; i++)
            if (L->neurons.convert || parts[i].len % blk)
                return tl_error_set(TL_ERR_FORMAT, "%s: '%s' is %s, whose %llu-element blocks "
                                    "do not divide its runs' parts", m->path, n,
                                    tl_type_name(L->neurons.file_type),
                                    (unsigned long long)blk);
        if ((snprintf(n, sizeof n, "blk.%d.ffn_pred_v", (int)l),
             st = describe(m, n, d, r, 1, &L->pred_v)) ||
            (snprintf(n, sizeof n, "blk.%d.ffn_pred_u", (int)l),
             st = describe(m, n, r, f, 1, &L->pred_u)) ||
            (snprintf(n, sizeof n, "blk.%d.ffn_pred_b", (int)l),
             st = describe(m, n, f, 1, 1, &L->pred_b)))
            return st;
    }
    for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++) {
        memset(mats[i].w, 0, sizeof *mats[i].w);
        mats[i].w->rows = (size_t)mats[i].rows;
        mats[i].w->cols = (size_t)mats[i].cols;
        const tl_weight *from = mats[i].site >= TL_SITE_FFN_IN && m->hp.ffn_neurons
                                    ? &L->neurons : &L->site[mats[i].site];
        mats[i].w->type = mats[i].w->file_type = from->type;
    }
    return TL_OK;
}

/* A flash-layout ReLU FFN stored by neuron: the predictor's rank and what calibration
 * measured (tierllm.neurons.*, model/neurons.h); rank 0 when the file has none. */
static tl_status read_neuron_info(tl_llama *m) {
    tl_neuron_info *ni = &m->neuron_info;
    memset(ni, 0, sizeof *ni);
    if (!tl_gguf_find(m->gguf, "tierllm.neurons.rank")) return TL_OK;
    if (!m->flash || !(m->hp.ffn_gate_relu || m->hp.ffn_relu))
        return tl_error_set(TL_ERR_FORMAT, "%s: tierllm.neurons.rank belongs to a flash-layout "
                            "file of a ReLU feed-forward; this file is neither", m->path);
    uint32_t rank;
    tl_status st = tl_gguf_get_u32(m->gguf, "tierllm.neurons.rank", &rank);
    if (!st && (rank == 0 || rank > (uint32_t)m->hp.n_embd || rank > (uint32_t)m->hp.n_ff))
        st = tl_error_set(TL_ERR_FORMAT, "%s: tierllm.neurons.rank %u is outside 1..%d", m->path,
                          rank, m->hp.n_embd < m->hp.n_ff ? m->hp.n_embd : m->hp.n_ff);
    if (!st) st = tl_gguf_get_f32(m->gguf, "tierllm.neurons.recall", &ni->recall);
    if (!st) st = tl_gguf_get_f32(m->gguf, "tierllm.neurons.active", &ni->active);
    if (!st) st = tl_gguf_get_f32(m->gguf, "tierllm.neurons.predicted", &ni->predicted);
    uint64_t nh = 0, nu = 0, nm = 0;
    const void *hit = NULL, *uni = NULL, *mean = NULL;
    if (!st) st = tl_gguf_get_arr(m->gguf, "tierllm.neurons.window_hit", TL_GGUF_FLOAT32, &nh, &hit);
    if (!st) st = tl_gguf_get_arr(m->gguf, "tierllm.neurons.window_union", TL_GGUF_FLOAT32, &nu, &uni);
    if (!st) st = tl_gguf_get_arr(m->gguf, "tierllm.neurons.window_mean", TL_GGUF_FLOAT32, &nm, &mean);
    if (st) return tl_error_wrap(st, "%s: the neuron predictor's keys", m->path);
    if (nh != nu || nh != nm || nh > TL_NEURON_WINDOW_MAX)
        return tl_error_set(TL_ERR_FORMAT, "%s: tierllm.neurons.window_hit, window_union and "
                            "window_mean have %llu, %llu and %llu entries (at most %d, the same)",
                            m->path, (unsigned long long)nh, (unsigned long long)nu,
                            (unsigned long long)nm, TL_NEURON_WINDOW_MAX);
    ni->rank = (int32_t)rank;
    ni->window_k = (int32_t)nh;
    memcpy(ni->window_hit, hit, (size_t)nh * sizeof(float));
    memcpy(ni->window_union, uni, (size_t)nh * sizeof(float));
    memcpy(ni->window_mean, mean, (size_t)nh * sizeof(float));
    const float *shares[] = {&ni->recall, &ni->active, &ni->predicted};
    for (size_t i = 0; i < 3; i++)
        if (!(*shares[i] >= 0 && *shares[i] <= 1))
            return tl_error_set(TL_ERR_FORMAT, "%s: a tierllm.neurons share is not in [0, 1]",
                                m->path);
    for (int32_t k = 0; k < ni->window_k; k++)
        if (!(ni->window_hit[k] >= 0 && ni->window_hit[k] <= 1 && ni->window_union[k] >= 0 &&
              ni->window_union[k] <= 1 && ni->window_mean[k] >= 0 && ni->window_mean[k] <= 1))
            return tl_error_set(TL_ERR_FORMAT, "%s: tierllm.neurons.window_* entry %d is not a "
                                "share in [0, 1]", m->path, (int)k + 1);
    m->hp.ffn_neurons = 1;
    return TL_OK;
}

static tl_status describe_weights(tl_llama *m) {
    const tl_llama_hparams *hp = &m->hp;
    const uint64_t d = (uint64_t)hp->n_embd, hd = (uint64_t)hp->head_dim;
    const uint64_t q_dim = hd * (uint64_t)hp->n_head, kv_dim = hd * (uint64_t)hp->n_head_kv;
    const uint64_t f = (uint64_t)hp->n_ff;
    tl_status st;
    const tl_gguf_tensor *emb = tl_gguf_find_tensor(m->gguf, "token_embd.weight");
    if (!emb) return tl_error_set(TL_ERR_FORMAT, "%s: missing tensor 'token_embd.weight'",
                                  m->path);
    if (emb->ne[1] == 0 || emb->ne[1] > (1u << 24))
        return tl_error_set(TL_ERR_FORMAT, "%s: token_embd.weight has an invalid vocabulary "
                            "size %llu", m->path, (unsigned long long)emb->ne[1]);
    m->hp.n_vocab = (int32_t)emb->ne[1];
    if ((st = describe(m, "token_embd.weight", d, emb->ne[1], 0, &m->tok_embd))) return st;
    if (m->tok_embd.convert)
        return tl_error_set(TL_ERR_UNSUPPORTED, "%s: token_embd.weight rows split %s blocks",
                            m->path, tl_type_name(m->tok_embd.file_type));
    if ((st = describe(m, "output_norm.weight", d, 1, 1, &m->output_norm)) ||
        (st = describe_optional(m, "output_norm.bias", d, &m->output_norm_b)))
        return st;
    /* learned positions: one row per position of the training context, kept in f32 */
    if (hp->pos_learned &&
        (st = describe(m, "position_embd.weight", d, (uint64_t)hp->n_ctx_train, 1, &m->pos_embd)))
        return st;
    m->tied_output = tl_gguf_find_tensor(m->gguf, "output.weight") == NULL;
    if (m->tied_output) {
        m->output = m->tok_embd;
    } else if ((st = describe(m, "output.weight", d, emb->ne[1], 0, &m->output))) {
        return st;
    }
    if ((st = describe_optional(m, "rope_freqs.weight", (uint64_t)hp->rope_dim / 2, &m->rope_freqs)))
        return st;
    /* a Hugging Face folder's rope_scaling, computed (format/hf_folder.h) */
    const tl_gguf_kv *rf = tl_gguf_find(m->gguf, "tierllm.rope_freqs");
    if (rf && !m->rope_freqs.name) {
        uint64_t n;
        const void *v;
        if ((st = tl_gguf_get_arr(m->gguf, "tierllm.rope_freqs", TL_GGUF_FLOAT32, &n, &v)))
            return st;
        if (n != (uint64_t)hp->rope_dim / 2)
            return tl_error_set(TL_ERR_FORMAT, "%s: tierllm.rope_freqs has %llu entries, "
                                "expected %d", m->path, (unsigned long long)n, hp->rope_dim / 2);
        if (!(m->rope_divisors = malloc((size_t)n * sizeof(float))))
            return tl_error_set(TL_ERR_NOMEM, "out of memory");
        memcpy(m->rope_divisors, v, (size_t)n * sizeof(float));
        for (uint64_t i = 0; i < n; i++)
            if (!(m->rope_divisors[i] > 0 && m->rope_divisors[i] < 1e30f))
                return tl_error_set(TL_ERR_FORMAT, "%s: tierllm.rope_freqs[%llu] = %g is not a "
                                    "positive divisor", m->path, (unsigned long long)i,
                                    (double)m->rope_divisors[i]);
    }
    if ((st = tl_sparsity_load(&m->sparse, m->gguf, hp->n_layer, m->path)) ||
        (st = read_neuron_info(m)))
        return st;
    m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
    if (!m->layers) return tl_error_set(TL_ERR_NOMEM, "out of memory");
    for (int32_t l = 0; l < hp->n_layer; l++) {
        tl_llama_layer *L = &m->layers[l];
        char n[96];
#define NAME(s) (snprintf(n, sizeof n, "blk.%d." s, (int)l), n)
        if (m->flash) {
            if ((st = describe(m, NAME("attn_norm.weight"), d, 1, 1, &L->attn_norm)) ||
                (st = describe(m, NAME("ffn_norm.weight"), d, 1, 1, &L->ffn_norm)) ||
                (st = describe_flash_layer(m, l, L)))
                return st;
        } else if ((st = describe(m, NAME("attn_norm.weight"), d, 1, 1, &L->attn_norm)) ||
            (st = describe(m, NAME("attn_q.weight"), d, q_dim, 0, &L->wq)) ||
            (st = describe(m, NAME("attn_k.weight"), d, kv_dim, 0, &L->wk)) ||
            (st = describe(m, NAME("attn_v.weight"), d, kv_dim, 0, &L->wv)) ||
            (st = describe(m, NAME("attn_output.weight"), q_dim, d, 0, &L->wo)) ||
            (st = describe(m, NAME("ffn_norm.weight"), d, 1, 1, &L->ffn_norm)) ||
            (!hp->ffn_relu && (st = describe(m, NAME("ffn_gate.weight"), d, f, 0, &L->w_gate))) ||
            (st = describe(m, NAME("ffn_up.weight"), d, f, 0, &L->w_up)) ||
            (st = describe(m, NAME("ffn_down.weight"), f, d, 0, &L->w_down)))
            return st;
        if ((st = describe_optional(m, NAME("attn_q.bias"), q_dim, &L->bq)) ||
            (st = describe_optional(m, NAME("attn_k.bias"), kv_dim, &L->bk)) ||
            (st = describe_optional(m, NAME("attn_v.bias"), kv_dim, &L->bv)) ||
            (st = describe_optional(m, NAME("attn_output.bias"), d, &L->bo)) ||
            (st = describe_optional(m, NAME("ffn_up.bias"), f, &L->b_up)) ||
            (st = describe_optional(m, NAME("ffn_gate.bias"), f, &L->b_gate)) ||
            (st = describe_optional(m, NAME("ffn_down.bias"), d, &L->b_down)) ||
            (st = describe_optional(m, NAME("attn_norm.bias"), d, &L->attn_norm_b)) ||
            (st = describe_optional(m, NAME("ffn_norm.bias"), d, &L->ffn_norm_b)))
            return st;
#undef NAME
    }
    return TL_OK;
}

/* Layers whose 7 matrices match an earlier layer's in type, shape and presence share its
 * shape class (the cost model prices a class once). After trim_to_stage: an absent layer
 * never stands for a present one. */
static void classify_shapes(tl_llama *m) {
    for (int32_t l = 0; l < m->hp.n_layer; l++) {
        const tl_weight *a[7] = {&m->layers[l].wq, &m->layers[l].wk, &m->layers[l].wv,
                                 &m->layers[l].wo, &m->layers[l].w_gate, &m->layers[l].w_up,
                                 &m->layers[l].w_down};
        m->layers[l].shape_class = l;
        for (int32_t c = 0; c < l && m->layers[l].shape_class == l; c++) {
            if (m->layers[c].shape_class != c) continue;
            const tl_weight *b[7] = {&m->layers[c].wq, &m->layers[c].wk, &m->layers[c].wv,
                                     &m->layers[c].wo, &m->layers[c].w_gate, &m->layers[c].w_up,
                                     &m->layers[c].w_down};
            int same = 1;
            for (int i = 0; i < 7 && same; i++)
                same = a[i]->type == b[i]->type && a[i]->rows == b[i]->rows &&
                       a[i]->cols == b[i]->cols && !a[i]->name == !b[i]->name;
            for (int s = 0; s < TL_SITE_COUNT && same; s++) {
                const tl_weight *x = &m->layers[l].site[s], *y = &m->layers[c].site[s];
                same = x->type == y->type && !x->name == !y->name;
            }
            same = same && m->layers[l].neurons.type == m->layers[c].neurons.type &&
                   m->layers[l].pred_v.rows == m->layers[c].pred_v.rows;
            if (same) m->layers[l].shape_class = c;
        }
    }
}

/* Marks a weight absent: its bytes leave the model's total. */
static void drop(tl_llama *m, tl_weight *w) {
    if (!w->name) return;
    m->weight_bytes -= w->file_bytes;
    w->name = NULL;
}

/* A pipeline stage keeps its own layers' tensors, the embedding (and learned positions)
 * when it is first, and the final norm and classifier when it is last; a tied classifier
 * is the embedding, kept for the last stage. */
static tl_status trim_to_stage(tl_llama *m) {
    const int32_t L = m->hp.n_layer, a = m->params.layer_first;
    const int32_t b = m->params.layer_end ? m->params.layer_end : L;
    if (a < 0 || b <= a || b > L)
        return tl_error_set(TL_ERR_INVALID, "pipeline stage: layers %d..%d of a %d-layer model "
                            "(need 0 <= first < end <= %d)", (int)a, (int)b - 1, (int)L, (int)L);
    m->stage_first = a;
    m->stage_end = b;
    if (a == 0 && b == L) return TL_OK;
    for (int32_t l = 0; l < L; l++) {
        if (l >= a && l < b) continue;
        tl_llama_layer *ly = &m->layers[l];
        tl_weight *ws[] = {&ly->attn_norm, &ly->attn_norm_b, &ly->wq, &ly->wk, &ly->wv, &ly->wo,
                           &ly->bq, &ly->bk, &ly->bv, &ly->bo, &ly->ffn_norm, &ly->ffn_norm_b,
                           &ly->w_gate, &ly->w_up, &ly->w_down, &ly->b_up, &ly->b_down,
                           &ly->b_gate};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) drop(m, ws[i]);
        for (int s = 0; s < TL_SITE_COUNT; s++) drop(m, &ly->site[s]);
        drop(m, &ly->neurons);
        drop(m, &ly->pred_v);
        drop(m, &ly->pred_u);
        drop(m, &ly->pred_b);
    }
    if (b < L) {
        drop(m, &m->output_norm);
        drop(m, &m->output_norm_b);
        if (!m->tied_output) drop(m, &m->output);
        else m->output.name = NULL;
    }
    if (a > 0) {
        drop(m, &m->pos_embd);
        if (!(m->tied_output && b == L)) drop(m, &m->tok_embd);
    }
    return TL_OK;
}

size_t tl_llama_weights(tl_llama *m, tl_weight **out, size_t cap) {
    size_t n = 0;
#define PUT(w) do { if (n < cap) out[n] = (w); n++; } while (0)
#define PUT_IF(w) do { if ((w)->name) PUT(w); } while (0)
    PUT_IF(&m->tok_embd);
    PUT_IF(&m->output_norm);
    PUT_IF(&m->output_norm_b);
    if (!m->tied_output) PUT_IF(&m->output);
    PUT_IF(&m->rope_freqs);
    PUT_IF(&m->pos_embd);
    for (int32_t l = 0; l < m->hp.n_layer; l++) {
        tl_llama_layer *L = &m->layers[l];
        PUT_IF(&L->attn_norm); PUT_IF(&L->attn_norm_b);
        PUT_IF(&L->wq); PUT_IF(&L->wk); PUT_IF(&L->wv); PUT_IF(&L->wo);
        PUT_IF(&L->bq); PUT_IF(&L->bk); PUT_IF(&L->bv); PUT_IF(&L->bo);
        PUT_IF(&L->ffn_norm); PUT_IF(&L->ffn_norm_b);
        PUT_IF(&L->w_gate); PUT_IF(&L->w_up); PUT_IF(&L->w_down);
        PUT_IF(&L->b_up); PUT_IF(&L->b_down); PUT_IF(&L->b_gate);
        for (int s = 0; s < TL_SITE_COUNT; s++) PUT_IF(&L->site[s]);
        PUT_IF(&L->neurons); PUT_IF(&L->pred_v); PUT_IF(&L->pred_u); PUT_IF(&L->pred_b);
    }
#undef PUT_IF
#undef PUT
    return n;
}

/* The weight bytes per input channel of the matrices each sparsity site feeds
 * (model/sparsity.h), by which the sparsity reached is weighed. */
static tl_status sparsity_col_bytes(tl_llama *m) {
    double *cb = calloc((size_t)m->hp.n_layer * TL_SITE_COUNT, sizeof *cb);
    if (!cb) return tl_error_set(TL_ERR_NOMEM, "out of memory");
    for (int32_t l = 0; l < m->hp.n_layer; l++) {
        const tl_llama_layer *L = &m->layers[l];
        const tl_weight *site_mats[TL_SITE_COUNT][3] = {{&L->wq, &L->wk, &L->wv},
                                                        {&L->wo, NULL, NULL},
                                                        {&L->w_gate, &L->w_up, NULL},
                                                        {&L->w_down, NULL, NULL}};
        for (int s = 0; s < TL_SITE_COUNT; s++) {
            if (L->site[s].name) { /* flash layout: a run per channel */
                cb[(size_t)l * TL_SITE_COUNT + s] =
                    (double)L->site[s].file_bytes / (double)L->site[s].rows;
                continue;
            }
            for (int k = 0; k < 3; k++) {
                const tl_weight *w = site_mats[s][k];
                if (w && w->name && w->cols)
                    cb[(size_t)l * TL_SITE_COUNT + s] += (double)w->file_bytes / (double)w->cols;
            }
        }
    }
    m->sparse.col_bytes = cb;
    return TL_OK;
}

tl_model_params tl_model_default_params(void) {
    tl_model_params p;
    memset(&p, 0, sizeof p);
    p.n_threads = 0;
    p.mem_budget = 0;
    p.prefetch = 2;
    p.overlap = 1;
    p.io_backend = TL_IO_AUTO;
    p.io_queue_depth = 8;
    p.io_chunk_bytes = 1u << 20;
    p.direct_io = 1;
    p.w_mem_pct = 100;
    p.io_order = TL_IO_KV_FIRST;
    p.sparsity = -1.0f;
    p.flash_gap_bytes = 16384;
    p.neuron_window = -1;
    p.neuron_predict = 1;
    return p;
}

/* 80% of MemAvailable, the default budget: a model larger than that streams. */
static uint64_t default_budget(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    unsigned long long kb = 0;
    char line[256];
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    if (f) fclose(f);
    if (kb == 0) kb = 4ull << 20; /* unknown: assume 4 GiB */
    return kb * 1024ull / 10 * 8;
}

static tl_status check_params(const tl_model_params *p) {
    if (p->prefetch < 0 || p->prefetch > 64)
        return tl_error_set(TL_ERR_INVALID, "prefetch depth %d is outside 0..64", (int)p->prefetch);
    if (p->io_queue_depth < 1 || p->io_queue_depth > 1024)
        return tl_error_set(TL_ERR_INVALID, "IO queue depth %d is outside 1..1024",
                            (int)p->io_queue_depth);
    if (p->io_chunk_bytes < TL_TIER_MAX_ALIGN || p->io_chunk_bytes % TL_TIER_MAX_ALIGN ||
        p->io_chunk_bytes > (1u << 30))
        return tl_error_set(TL_ERR_INVALID, "IO chunk size %llu must be a multiple of %d "
                            "up to 1 GiB", (unsigned long long)p->io_chunk_bytes,
                            (int)TL_TIER_MAX_ALIGN);
    if (p->io_order != TL_IO_KV_FIRST && p->io_order != TL_IO_BY_NEED)
        return tl_error_set(TL_ERR_INVALID, "io_order %d (TL_IO_KV_FIRST or TL_IO_BY_NEED)",
                            (int)p->io_order);
    if (p->w_mem_pct < 0 || p->w_mem_pct > 100)
        return tl_error_set(TL_ERR_INVALID, "weight memory share %d%% is outside 0..100",
                            (int)p->w_mem_pct);
    _Static_assert(TL_IO_AUTO == (int)TL_AIO_AUTO && TL_IO_POOL == (int)TL_AIO_POOL &&
                       TL_IO_URING == (int)TL_AIO_URING,
                   "the public IO backend values are tier/aio.h's");
    if (p->io_backend < TL_IO_AUTO || p->io_backend > TL_IO_URING)
        return tl_error_set(TL_ERR_INVALID, "unknown IO backend %d", (int)p->io_backend);
    if (p->neuron_window < -1 || p->neuron_window > TL_NEURON_WINDOW_MAX)
        return tl_error_set(TL_ERR_INVALID, "neuron window %d is outside -1 (the planner's) .. "
                            "%d", (int)p->neuron_window, TL_NEURON_WINDOW_MAX);
    return TL_OK;
}

/* GGUF header bytes read through the model's tier (O_DIRECT: aligned reads through a
 * bounce buffer), so opening a model leaves none of its pages in the page cache. */
typedef struct tier_src { tl_tier *t; uint8_t *bounce; size_t cap; } tier_src;

static tl_status tier_src_read(void *src, uint64_t offset, void *dst, size_t len) {
    tier_src *s = src;
    const uint64_t a = s->t->align > 1 ? s->t->align : 1;
    while (len > 0) {
        uint64_t a0 = offset / a * a;
        size_t want = (size_t)(((offset + len - a0) + a - 1) / a * a);
        if (want > s->cap) want = s->cap;
        size_t got = 0, done;
        while (got < want && a0 + got < s->t->size) { /* short at the end: expected */
            tl_status st = s->t->ops->read_at(s->t, a0 + got, s->bounce + got, want - got, &done);
            if (st) return st;
            if (done == 0) break;
            got += done;
        }
        if (a0 + got <= offset)
            return tl_error_set(TL_ERR_FORMAT, "%s: unexpected end of file at offset %llu",
                                s->t->name, (unsigned long long)offset);
        size_t take = (size_t)(a0 + got - offset);
        if (take > len) take = len;
        memcpy(dst, s->bounce + (offset - a0), take);
        dst = (uint8_t *)dst + take;
        offset += take;
        len -= take;
    }
    return TL_OK;
}

static tl_status parse_header(tl_llama *m) {
    tier_src src = {m->tier, NULL, 256u << 10};
    if (posix_memalign((void **)&src.bounce, TL_TIER_MAX_ALIGN, src.cap) != 0)
        return tl_error_set(TL_ERR_NOMEM, "out of memory");
    tl_status st = tl_gguf_parse(tier_src_read, &src, m->tier->size, m->path, &m->gguf);
    free(src.bounce);
    return st;
}

_Static_assert(TL_HF_SHARD_ALIGN == TL_TIER_MAX_ALIGN, "shards start at O_DIRECT offsets");

/* A Hugging Face folder: its description as a GGUF, and its safetensors files as one
 * tier laid out as the description's offsets say. */
static tl_status open_folder(tl_llama *m, const char *path) {
    tl_hf_folder *f;
    tl_status st = tl_hf_folder_open(path, &f);
    if (st) return st;
    tl_tier **parts = calloc(f->n_files, sizeof *parts);
    if (!parts) st = tl_error_set(TL_ERR_NOMEM, "out of memory");
    size_t opened = 0;
    while (!st && opened < f->n_files) { /* parts[0, opened) are open */
        st = tl_tier_file_open(f->files[opened], m->params.direct_io ? TL_TIER_FILE_DIRECT : 0,
                               &parts[opened]);
        if (st) break;
        const size_t i = opened++;
        if (parts[i]->size != f->sizes[i])
            st = tl_error_set(TL_ERR_IO, "%s changed while it was opened", f->files[i]);
    }
    if (!st) st = tl_tier_concat_open(parts, f->at, f->n_files, m->path, &m->tier);
    else
        for (size_t i = 0; i < opened; i++) tl_tier_close(parts[i]);
    free(parts);
    if (!st) {
        m->gguf = f->gguf;
        f->gguf = NULL;
    }
    tl_hf_folder_free(f);
    return st;
}

tl_status tl_llama_open(const char *path, const tl_model_params *params, tl_llama *m) {
    memset(m, 0, sizeof *m);
    tl_model_params p = params ? *params : tl_model_default_params();
    tl_status st = check_params(&p);
    if (st) return st;
    m->params = p;
    m->path = strdup(path);
    m->use_reference = p.reference_kernels;
    st = m->path ? TL_OK : tl_error_set(TL_ERR_NOMEM, "out of memory");
    if (!st && tl_hf_is_folder(path)) st = open_folder(m, path);
    else if (!st) {
        st = tl_tier_file_open(path, p.direct_io ? TL_TIER_FILE_DIRECT : 0, &m->tier);
        if (!st) st = parse_header(m);
    }
    if (!st && (st = tl_llama_read_hparams(m->gguf, &m->hp))) tl_error_wrap(st, "%s", path);
    if (!st) st = tl_flash_layout_detect(m->gguf, &m->flash, path);
    if (!st && (st = tl_tokenizer_from_gguf(m->gguf, &m->tok))) tl_error_wrap(st, "%s", path);
    if (!st) st = describe_weights(m);
    if (!st) st = sparsity_col_bytes(m);
    if (!st) st = trim_to_stage(m);
    if (!st) st = tl_sparsity_set_level(&m->sparse, p.sparsity < 0 ? m->sparse.file_default
                                                                    : p.sparsity);
    if (!st) classify_shapes(m);
    if (!st) { /* the list every walk over all weights uses */
        m->n_all = tl_llama_weights(m, NULL, 0);
        if (!(m->all = malloc(m->n_all * sizeof *m->all)))
            st = tl_error_set(TL_ERR_NOMEM, "out of memory");
        else tl_llama_weights(m, m->all, m->n_all);
    }
    if (!st && tl_tokenizer_n_vocab(m->tok) > m->hp.n_vocab)
        st = tl_error_set(TL_ERR_FORMAT, "%s: the tokenizer has %d tokens but token_embd has "
                          "only %d rows", path, (int)tl_tokenizer_n_vocab(m->tok),
                          (int)m->hp.n_vocab);
    if (!st) st = tl_budget_open(p.mem_budget ? p.mem_budget : default_budget(), &m->budget);
    if (!st) st = tl_pool_open(p.n_threads, &m->pool);
    if (!st) {
        tl_aio_params ap = tl_aio_default_params();
        ap.backend = (tl_aio_backend)p.io_backend;
        ap.queue_depth = p.io_queue_depth;
        /* a flash layout's streamed sites are read as many requests of a few KiB, which a
         * disk serves faster the deeper its queue, at least up to 32 */
        if (m->flash && ap.queue_depth < TL_FLASH_MIN_QUEUE_DEPTH)
            ap.queue_depth = TL_FLASH_MIN_QUEUE_DEPTH;
        ap.chunk_bytes = (size_t)p.io_chunk_bytes;
        ap.n_threads = ap.queue_depth;
        st = tl_aio_open(&ap, &m->aio);
    }
    if (st) tl_llama_close(m);
    return st;
}

void tl_llama_close(tl_llama *m) {
    tl_aio_close(m->aio);
    if (m->tier) tl_tier_close(m->tier);
    if (m->panel_tier) tl_tier_close(m->panel_tier);
    free(m->layers);
    free(m->all);
    tl_pool_close(m->pool);
    tl_budget_close(m->budget);
    tl_tokenizer_free(m->tok);
    tl_gguf_free(m->gguf);
    free(m->rope_divisors);
    tl_sparsity_free(&m->sparse);
    free(m->path);
    memset(m, 0, sizeof *m);
}

void tl_llama_describe(const tl_llama *m, tl_model_desc *d) {
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
}

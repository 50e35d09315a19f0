/* synth.c - synthetic Llama GGUF models with random weights, for realistic-size
 * benchmarks without downloads.
 *
 * The vocabulary is a usable SentencePiece-style one: <unk>, <s>, </s>, the 256 byte
 * tokens <0x00>..<0xFF>, then pieces built from letters, digits and punctuation with
 * and without the U+2581 word prefix, scored so shorter pieces merge first. Any text
 * therefore tokenizes (byte fallback) and detokenizes exactly.
 * Weights are uniform in +-1/sqrt(cols) (activations stay near unit scale), generated
 * row by row from a counter-based RNG so any byte range can be produced independently;
 * norms are 1. Quantized types use tl_quant_row, so the file is what a converter would
 * write. The families of model/llama.h: Llama (with Llama 3's rope_freqs and Mistral's
 * sliding window on request), Qwen2 (its architecture keys and q/k/v biases) and OPT
 * (LayerNorm weights and biases, a learned position table, a ReLU FFN of two matrices,
 * biases on every matrix, the classifier tied). Norm weights are 1 and every bias small
 * and random, so that a bias left out changes the logits.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tierllm.h"
#include "base/rng.h"
#include "base/status.h"
#include "format/gguf.h"
#include "format/rope_scaling.h"
#include "kernels/kernels.h"

typedef struct synth_tensor {
    char name[64];
    uint64_t cols, rows;
    tl_type type;
    int kind; /* what gen_row writes: */
} synth_tensor;

/* uniform +-1/sqrt(cols), ones, Llama 3.1's divisors, the ReLU gate's bias, a ReLU gate of
 * low rank (gen_row) */
enum { K_RANDOM = 0, K_NORM = 1, K_ROPE_FREQS = 2, K_GATE_BIAS = 3, K_GATE_LOW_RANK = 4 };
/* A low-rank gate's share of variance in its rows' own noise. */
#define GATE_NOISE_SHARE 0.05f

typedef struct synth {
    const tl_synth_params *p;
    float gate_bias;   /* relu_sparsity's bias (gate_bias_for) */
    synth_tensor *t;
    size_t n;
    float *row_f;     /* [max cols] */
    uint8_t *row_q;   /* [max row bytes] */
    float *basis;     /* [gate_rank][n_embd]: the directions of the low-rank gate basis_ti's */
    size_t basis_ti;  /* (SIZE_MAX: none yet) */
} synth;

static const struct { const char *name; tl_synth_params p; } presets[] = {
    {"stories260k", {.n_vocab = 512, .n_embd = 64, .n_ff = 172, .n_layer = 5, .n_head = 8,
        .n_head_kv = 4, .n_ctx = 512, .weight_type = TL_TYPE_F32, .rope_base = 10000.0f,
        .seed = 1}},
    {"tinyllama-1.1b", {.n_vocab = 32000, .n_embd = 2048, .n_ff = 5632, .n_layer = 22,
        .n_head = 32, .n_head_kv = 4, .n_ctx = 2048, .weight_type = TL_TYPE_F32,
        .rope_base = 10000.0f, .seed = 1}},
    {"llama2-7b", {.n_vocab = 32000, .n_embd = 4096, .n_ff = 11008, .n_layer = 32, .n_head = 32,
        .n_head_kv = 32, .n_ctx = 4096, .weight_type = TL_TYPE_F32, .rope_base = 10000.0f,
        .seed = 1}},
};

tl_status tl_synth_preset(const char *name, tl_synth_params *out) {
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (strcmp(presets[i].name, name) == 0) {
            *out = presets[i].p;
            return TL_OK;
        }
    return tl_error_set(TL_ERR_INVALID, "unknown preset '%s' (stories260k, tinyllama-1.1b, "
                        "llama2-7b)", name);
}

static tl_status check_params(const tl_synth_params *p) {
    if (p->n_vocab < 260 || p->n_embd <= 0 || p->n_ff <= 0 || p->n_layer <= 0 ||
        p->n_head <= 0 || p->n_head_kv <= 0 || p->n_ctx <= 0)
        return tl_error_set(TL_ERR_INVALID, "synth: every dimension must be positive and the "
                            "vocabulary at least 260 tokens");
    if (p->n_embd % p->n_head != 0 || p->n_head % p->n_head_kv != 0 ||
        (p->n_embd / p->n_head) % 2 != 0)
        return tl_error_set(TL_ERR_INVALID, "synth: n_embd %d must divide into %d heads of "
                            "even size, and heads %d into %d kv heads", p->n_embd, p->n_head,
                            p->n_head, p->n_head_kv);
    if ((p->family != TL_SYNTH_LLAMA && p->family != TL_SYNTH_QWEN2 &&
         p->family != TL_SYNTH_OPT) || p->n_swa < 0)
        return tl_error_set(TL_ERR_INVALID, "synth: unknown family %d or sliding window %d",
                            p->family, p->n_swa);
    if (p->family == TL_SYNTH_OPT && (p->rope_freqs || p->n_swa > 0 || p->n_head_kv != p->n_head))
        return tl_error_set(TL_ERR_INVALID, "synth: OPT has no RoPE, no sliding window and as "
                            "many kv heads as heads");
    if (p->relu_sparsity != 0 &&
        (p->family == TL_SYNTH_OPT || !(p->relu_sparsity > 0 && p->relu_sparsity < 1)))
        return tl_error_set(TL_ERR_INVALID, "synth: a ReLU-fied feed-forward's sparsity must "
                            "lie in (0, 1), on a gated (Llama or Qwen2) model");
    if (p->gate_rank < 0 || p->gate_rank > 256 || (p->gate_rank > 0 && !(p->relu_sparsity > 0)))
        return tl_error_set(TL_ERR_INVALID, "synth: a gate rank (%d) is for a ReLU-fied "
                            "feed-forward, at most 256", p->gate_rank);
    if (p->mix != TL_MIX_NONE && (p->mix < TL_MIX_Q2_K || p->mix > TL_MIX_Q6_K))
        return tl_error_set(TL_ERR_INVALID, "synth: unknown K-quant mix %d", p->mix);
    if (!p->mix && !tl_type_known((uint32_t)p->weight_type))
        return tl_error_set(TL_ERR_INVALID, "synth: unsupported weight type %d",
                            p->weight_type);
    size_t be = p->mix ? TL_QK_K : tl_type_block_elems((tl_type)p->weight_type);
    if ((size_t)p->n_embd % be || (size_t)p->n_ff % be)
        return tl_error_set(TL_ERR_INVALID, "synth: %s needs n_embd (%d) and n_ff (%d) to be "
                            "multiples of %zu",
                            p->mix ? "a K-quant mix" : tl_type_name((tl_type)p->weight_type),
                            p->n_embd, p->n_ff, be);
    return TL_OK;
}

/* The matrices a mix quantizes differently from its base type. */
typedef enum { M_EMBD, M_OUTPUT, M_ATTN_V, M_ATTN_OUTPUT, M_FFN_DOWN, M_OTHER } mix_role;

/* llama.cpp's rule for layers that get more bits: the first and last eighth, and every
 * third layer between. */
static int use_more_bits(int layer, int n_layer) {
    return layer < n_layer / 8 || layer >= 7 * n_layer / 8 || (layer - n_layer / 8) % 3 == 2;
}

/* The type of one matrix under p's mix, as llama.cpp's quantizer chooses it for a Llama
 * model (llama_tensor_get_type: the output matrix, or a tied embedding, in Q6_K; attn_v,
 * ffn_down and attn_output raised per mix and layer; everything else in the mix's base
 * type). Its rules for other architectures, MoE models and imatrix files are left out. */
static tl_type mix_type(const tl_synth_params *p, mix_role role, int layer) {
    const int L = p->n_layer;
    tl_type base;
    switch (p->mix) {
    case TL_MIX_NONE: return (tl_type)p->weight_type;
    case TL_MIX_Q2_K: base = TL_TYPE_Q2_K; break;
    case TL_MIX_Q3_K_S: case TL_MIX_Q3_K_M: case TL_MIX_Q3_K_L: base = TL_TYPE_Q3_K; break;
    case TL_MIX_Q4_K_S: case TL_MIX_Q4_K_M: base = TL_TYPE_Q4_K; break;
    case TL_MIX_Q5_K_S: case TL_MIX_Q5_K_M: base = TL_TYPE_Q5_K; break;
    default: base = TL_TYPE_Q6_K; break;
    }
    switch (role) {
    case M_OUTPUT: return TL_TYPE_Q6_K;
    case M_ATTN_V:
        switch (p->mix) {
        case TL_MIX_Q2_K: return p->n_head / p->n_head_kv >= 4 ? TL_TYPE_Q4_K : TL_TYPE_Q3_K;
        case TL_MIX_Q3_K_M: return layer < 2 ? TL_TYPE_Q5_K : TL_TYPE_Q4_K;
        case TL_MIX_Q3_K_L: return TL_TYPE_Q5_K;
        case TL_MIX_Q4_K_M: case TL_MIX_Q5_K_M:
            return use_more_bits(layer, L) ? TL_TYPE_Q6_K : base;
        case TL_MIX_Q4_K_S: return layer < 4 ? TL_TYPE_Q5_K : base;
        default: return base;
        }
    case M_FFN_DOWN:
        switch (p->mix) {
        case TL_MIX_Q2_K: return TL_TYPE_Q3_K;
        case TL_MIX_Q3_K_M: return layer < L / 16 ? TL_TYPE_Q5_K : TL_TYPE_Q4_K;
        case TL_MIX_Q3_K_L: return TL_TYPE_Q5_K;
        case TL_MIX_Q4_K_M: case TL_MIX_Q5_K_M:
            return use_more_bits(layer, L) ? TL_TYPE_Q6_K : base;
        case TL_MIX_Q4_K_S: return layer < L / 8 ? TL_TYPE_Q5_K : base;
        default: return base;
        }
    case M_ATTN_OUTPUT:
        switch (p->mix) {
        case TL_MIX_Q2_K: return TL_TYPE_Q3_K;
        case TL_MIX_Q3_K_M: return TL_TYPE_Q4_K;
        case TL_MIX_Q3_K_L: return TL_TYPE_Q5_K;
        default: return base;
        }
    default: return base;
    }
}

static size_t build_tensors(const tl_synth_params *p, synth_tensor *t) {
    size_t n = 0;
    const uint64_t d = (uint64_t)p->n_embd, hd = d / (uint64_t)p->n_head;
    const uint64_t kvd = hd * (uint64_t)p->n_head_kv, f = (uint64_t)p->n_ff;
    const tl_type wt = mix_type(p, M_OTHER, 0);
#define ADD(nm, c, r, ty, norm)                                                              \
    do {                                                                                     \
        if (t) {                                                                             \
            snprintf(t[n].name, sizeof t[n].name, "%s", nm);                                 \
            t[n].cols = c; t[n].rows = r; t[n].type = ty; t[n].kind = norm;                  \
        }                                                                                    \
        n++;                                                                                 \
    } while (0)
    /* a tied classifier is the embedding: it gets the output's type */
    const int opt = p->family == TL_SYNTH_OPT, tied = p->tied_output || opt;
    ADD("token_embd.weight", d, (uint64_t)p->n_vocab, tied ? mix_type(p, M_OUTPUT, 0) : wt, 0);
    ADD("output_norm.weight", d, 1, TL_TYPE_F32, 1);
    if (opt) ADD("output_norm.bias", d, 1, TL_TYPE_F32, K_RANDOM);
    if (!tied)
        ADD("output.weight", d, (uint64_t)p->n_vocab, mix_type(p, M_OUTPUT, 0), K_RANDOM);
    if (p->rope_freqs) ADD("rope_freqs.weight", hd / 2, 1, TL_TYPE_F32, K_ROPE_FREQS);
    /* OPT's position table: in the model's float type (a checkpoint's F16), F32 beside
     * quantized matrices */
    if (opt)
        ADD("position_embd.weight", d, (uint64_t)p->n_ctx,
            wt == TL_TYPE_F16 || wt == TL_TYPE_BF16 ? wt : TL_TYPE_F32, K_RANDOM);
    for (int l = 0; l < p->n_layer; l++) {
        char nm[64];
#define LNAME(s) (snprintf(nm, sizeof nm, "blk.%d." s, l), nm)
        ADD(LNAME("attn_norm.weight"), d, 1, TL_TYPE_F32, 1);
        if (opt) ADD(LNAME("attn_norm.bias"), d, 1, TL_TYPE_F32, K_RANDOM);
        ADD(LNAME("attn_q.weight"), d, d, wt, 0);
        ADD(LNAME("attn_k.weight"), d, kvd, wt, 0);
        ADD(LNAME("attn_v.weight"), d, kvd, mix_type(p, M_ATTN_V, l), 0);
        if (p->family == TL_SYNTH_QWEN2 || opt) {
            ADD(LNAME("attn_q.bias"), d, 1, TL_TYPE_F32, K_RANDOM);
            ADD(LNAME("attn_k.bias"), kvd, 1, TL_TYPE_F32, K_RANDOM);
            ADD(LNAME("attn_v.bias"), kvd, 1, TL_TYPE_F32, K_RANDOM);
        }
        ADD(LNAME("attn_output.weight"), d, d, mix_type(p, M_ATTN_OUTPUT, l), 0);
        if (opt) ADD(LNAME("attn_output.bias"), d, 1, TL_TYPE_F32, K_RANDOM);
        ADD(LNAME("ffn_norm.weight"), d, 1, TL_TYPE_F32, 1);
        if (opt) ADD(LNAME("ffn_norm.bias"), d, 1, TL_TYPE_F32, K_RANDOM);
        if (!opt)
            ADD(LNAME("ffn_gate.weight"), d, f, wt,
                p->relu_sparsity > 0 && p->gate_rank > 0 ? K_GATE_LOW_RANK : 0);
        if (p->relu_sparsity > 0) ADD(LNAME("ffn_gate.bias"), f, 1, TL_TYPE_F32, K_GATE_BIAS);
        ADD(LNAME("ffn_up.weight"), d, f, wt, 0);
        if (opt) ADD(LNAME("ffn_up.bias"), f, 1, TL_TYPE_F32, K_RANDOM);
        ADD(LNAME("ffn_down.weight"), f, d, mix_type(p, M_FFN_DOWN, l), 0);
        if (opt) ADD(LNAME("ffn_down.bias"), d, 1, TL_TYPE_F32, K_RANDOM);
#undef LNAME
    }
#undef ADD
    return n;
}

/* llama.cpp's general.file_type of a file whose matrices are all `type`. */
static uint32_t synth_file_type(tl_type type) {
    switch (type) {
    case TL_TYPE_F32: return 0;
    case TL_TYPE_F16: return 1;
    case TL_TYPE_Q4_0: return 2;
    case TL_TYPE_Q4_1: return 3;
    case TL_TYPE_Q8_0: return 7;
    case TL_TYPE_Q5_0: return 8;
    case TL_TYPE_Q5_1: return 9;
    case TL_TYPE_Q2_K: return 10;
    case TL_TYPE_Q3_K: return 12; /* llama.cpp has no "all Q3_K" type; Q3_K_M is nearest */
    case TL_TYPE_Q4_K: return 15;
    case TL_TYPE_Q5_K: return 17;
    case TL_TYPE_Q6_K: return 18;
    default: return 32; /* BF16 */
    }
}

const char *tl_synth_mix_name(int32_t mix) {
    switch (mix) {
    case TL_MIX_Q2_K: return "Q2_K";
    case TL_MIX_Q3_K_S: return "Q3_K_S";
    case TL_MIX_Q3_K_M: return "Q3_K_M";
    case TL_MIX_Q3_K_L: return "Q3_K_L";
    case TL_MIX_Q4_K_S: return "Q4_K_S";
    case TL_MIX_Q4_K_M: return "Q4_K_M";
    case TL_MIX_Q5_K_S: return "Q5_K_S";
    case TL_MIX_Q5_K_M: return "Q5_K_M";
    case TL_MIX_Q6_K: return "Q6_K";
    default: return "?";
    }
}

uint64_t tl_synth_file_bytes(const tl_synth_params *p) {
    if (check_params(p)) return 0;
    size_t n = build_tensors(p, NULL);
    synth_tensor *t = calloc(n, sizeof *t);
    if (!t) return 0;
    build_tensors(p, t);
    uint64_t bytes = 0;
    for (size_t i = 0; i < n; i++)
        bytes += (tl_type_row_bytes(t[i].type, t[i].cols) * t[i].rows + 31) / 32 * 32;
    free(t);
    return bytes; /* plus a header of a few hundred KiB */
}

/* The gate bias b that leaves a share `sparsity` of the ReLU's inputs below zero: a
 * pre-activation is w . x + b with x RMS-normalized (sum x^2 = n_embd, the norm's weights
 * being ones) and w uniform in +-1/sqrt(n_embd), so w . x is near N(0, 1/3) and
 * P(w . x + b <= 0) = Phi(-b sqrt 3); Phi inverted by bisection. 0: no ReLU. */
static float gate_bias_for(float sparsity) {
    if (!(sparsity > 0)) return 0.0f;
    double lo = -10, hi = 10; /* z with Phi(z) = sparsity */
    for (int i = 0; i < 100; i++) {
        const double mid = 0.5 * (lo + hi);
        if (0.5 * erfc(-mid / sqrt(2.0)) < sparsity) lo = mid;
        else hi = mid;
    }
    return (float)(-0.5 * (lo + hi) / sqrt(3.0));
}

/* dst[c] uniform in +-a, a function of (stream, row, c) only. */
static void uniform_row(uint64_t stream, uint64_t row, float a, float *dst, size_t n) {
    const uint64_t key = tl_mix64(stream) ^ row;
    for (size_t c = 0; c < n; c += 2) {
        uint64_t r = tl_mix64(key * 0x100000001b3ull + c);
        dst[c] = a * ((float)(uint32_t)r * (2.0f / 4294967296.0f) - 1.0f);
        if (c + 1 < n) dst[c + 1] = a * ((float)(uint32_t)(r >> 32) * (2.0f / 4294967296.0f) - 1.0f);
    }
}

static void gen_row(synth *s, size_t ti, uint64_t row) {
    const synth_tensor *t = &s->t[ti];
    if (t->kind == K_NORM) {
        for (uint64_t c = 0; c < t->cols; c++) s->row_f[c] = 1.0f;
    } else if (t->kind == K_GATE_BIAS) {
        for (uint64_t c = 0; c < t->cols; c++) s->row_f[c] = s->gate_bias;
    } else if (t->kind == K_ROPE_FREQS) { /* Llama 3.1's: factor 8, 1/4, 8192 positions */
        tl_rope_llama3_divisors(s->p->rope_base, (int32_t)(2 * t->cols), 8.0, 1.0, 4.0, 8192.0,
                                s->row_f);
    } else if (t->kind == K_GATE_LOW_RANK) {
        /* row = sqrt(1 - e) sum_j a_j basis_j + sqrt(e) noise: basis_j and noise uniform in
         * +-1/sqrt(cols), the a_j uniform with variance 1/R, so each term's dot with an
         * RMS-normalized input has variance 1/3 as an independent row's has (gate_bias_for
         * holds), 1 - e of it from the layer's R directions */
        const size_t R = (size_t)s->p->gate_rank, d = (size_t)t->cols;
        if (s->basis_ti != ti) {
            for (size_t j = 0; j < R; j++)
                uniform_row(s->p->seed * 0x2545f4914f6cdd1dull + ti, j, 1.0f / sqrtf((float)d),
                            s->basis + j * d, d);
            s->basis_ti = ti;
        }
        uniform_row(s->p->seed * 0x9e3779b97f4a7c15ull + ti * 0x1000003ull, row,
                    sqrtf(GATE_NOISE_SHARE) / sqrtf((float)d), s->row_f, d);
        float coef[256];
        uniform_row(s->p->seed * 0x94d049bb133111ebull + ti, row,
                    sqrtf((1.0f - GATE_NOISE_SHARE) * 3.0f / (float)R), coef, R);
        for (size_t j = 0; j < R; j++)
            for (size_t c = 0; c < d; c++) s->row_f[c] += coef[j] * s->basis[j * d + c];
    } else {
        uniform_row(s->p->seed * 0x9e3779b97f4a7c15ull + ti * 0x1000003ull, row,
                    1.0f / sqrtf((float)t->cols), s->row_f, (size_t)t->cols);
    }
    tl_quant_row(t->type, s->row_f, s->row_q, (size_t)t->cols);
}

static tl_status fill(void *user, size_t index, uint64_t offset, void *dst, size_t len) {
    synth *s = user;
    const synth_tensor *t = &s->t[index];
    const uint64_t rb = tl_type_row_bytes(t->type, (size_t)t->cols);
    uint8_t *out = dst;
    for (uint64_t row = offset / rb; len > 0; row++) {
        gen_row(s, index, row);
        uint64_t start = offset - row * rb;
        size_t take = (size_t)(rb - start) < len ? (size_t)(rb - start) : len;
        memcpy(out, s->row_q + start, take);
        out += take;
        offset += take;
        len -= take;
    }
    return TL_OK;
}

/* Deterministic vocabulary: specials, bytes, then pieces of growing length. */
static char **make_vocab(int32_t n_vocab, float *scores, int32_t *types) {
    static const char alpha[] = "etaoinshrdlucmfwypvbgkjqxzETAOINSHRDLUCMFWYPVBGKJQXZ"
                                "0123456789.,!?'\"-:;()";
    const size_t na = sizeof alpha - 1;
    char **v = calloc((size_t)n_vocab, sizeof *v);
    if (!v) return NULL;
    int32_t n = 0;
    const char *specials[] = {"<unk>", "<s>", "</s>"};
    for (int i = 0; i < 3; i++) {
        v[n] = strdup(specials[i]);
        types[n] = i == 0 ? 2 : 3;
        scores[n] = 0;
        n++;
    }
    for (int b = 0; b < 256; b++) {
        char buf[8];
        snprintf(buf, sizeof buf, "<0x%02X>", b);
        v[n] = strdup(buf);
        types[n] = 6;
        scores[n] = 0;
        n++;
    }
    /* pieces: U+2581 alone, then every string of length 1, 2, ... (first character
     * from all of alpha, later ones lowercase), each with and without the prefix */
    char buf[64];
    for (int len = 0; len <= 6 && n < n_vocab; len++) {
        size_t idx[8] = {0};
        for (;;) {
            for (int pre = 1; pre >= 0 && n < n_vocab; pre--) {
                size_t o = 0;
                if (pre) { memcpy(buf, "\xe2\x96\x81", 3); o = 3; }
                for (int i = 0; i < len; i++) buf[o++] = alpha[idx[i]];
                buf[o] = 0;
                if (o == 0) continue;
                v[n] = strdup(buf);
                types[n] = 1;
                scores[n] = -(float)n;
                n++;
            }
            int i = len - 1;
            while (i >= 0 && ++idx[i] == (i == 0 ? na : 26)) idx[i--] = 0;
            if (i < 0 || n >= n_vocab) break;
        }
    }
    for (int32_t i = 0; i < n_vocab; i++)
        if (!v[i]) { /* ran out of pieces (never for realistic sizes): unused fillers */
            char buf[32];
            snprintf(buf, sizeof buf, "<unused%d>", (int)i);
            v[i] = strdup(buf);
            types[i] = 5;
            scores[i] = -1e9f;
        }
    for (int32_t i = 0; i < n_vocab; i++)
        if (!v[i]) { /* strdup failed */
            for (int32_t j = 0; j < n_vocab; j++) free(v[j]);
            free(v);
            return NULL;
        }
    return v;
}

tl_status tl_synth_write(const tl_synth_params *p, const char *path) {
    tl_status st = check_params(p);
    if (st) return st;
    synth s = {p, gate_bias_for(p->relu_sparsity), NULL, 0, NULL, NULL, NULL, SIZE_MAX};
    s.n = build_tensors(p, NULL);
    s.t = calloc(s.n, sizeof *s.t);
    size_t max_cols = (size_t)(p->n_ff > p->n_embd ? p->n_ff : p->n_embd);
    s.row_f = malloc(max_cols * sizeof(float));
    s.row_q = malloc(max_cols * sizeof(float));
    float *scores = malloc((size_t)p->n_vocab * sizeof *scores);
    int32_t *types = malloc((size_t)p->n_vocab * sizeof *types);
    char **vocab = NULL;
    tl_gguf_writer *w = NULL;
    if (p->relu_sparsity > 0 && p->gate_rank > 0)
        s.basis = malloc((size_t)p->gate_rank * (size_t)p->n_embd * sizeof(float));
    if (!s.t || !s.row_f || !s.row_q || !scores || !types ||
        (p->relu_sparsity > 0 && p->gate_rank > 0 && !s.basis) ||
        !(vocab = make_vocab(p->n_vocab, scores, types))) {
        st = tl_error_set(TL_ERR_NOMEM, "synth: out of memory");
        goto done;
    }
    build_tensors(p, s.t);
    if ((st = tl_gguf_writer_open(&w))) goto done;
    char name[64];
    const char *arch = p->family == TL_SYNTH_QWEN2 ? "qwen2"
                       : p->family == TL_SYNTH_OPT ? "opt" : "llama";
    snprintf(name, sizeof name, "synthetic-%s-%dL-%dd-%s", arch, p->n_layer, p->n_embd,
             p->mix ? tl_synth_mix_name(p->mix) : tl_type_name((tl_type)p->weight_type));
    const uint32_t file_type = p->mix ? (uint32_t)p->mix : synth_file_type((tl_type)p->weight_type);
    const int opt = p->family == TL_SYNTH_OPT;
    char key[128];
#define KEY(k) (snprintf(key, sizeof key, "%s." k, arch), key)
    if ((st = tl_gguf_writer_set_str(w, "general.architecture", arch)) ||
        (st = tl_gguf_writer_set_str(w, "general.name", name)) ||
        (st = tl_gguf_writer_set_u32(w, "general.file_type", file_type)) ||
        (st = tl_gguf_writer_set_u32(w, KEY("context_length"), (uint32_t)p->n_ctx)) ||
        (st = tl_gguf_writer_set_u32(w, KEY("embedding_length"), (uint32_t)p->n_embd)) ||
        (st = tl_gguf_writer_set_u32(w, KEY("feed_forward_length"), (uint32_t)p->n_ff)) ||
        (st = tl_gguf_writer_set_u32(w, KEY("block_count"), (uint32_t)p->n_layer)) ||
        (st = tl_gguf_writer_set_u32(w, KEY("attention.head_count"), (uint32_t)p->n_head)) ||
        (st = tl_gguf_writer_set_u32(w, KEY("attention.head_count_kv"),
                                     (uint32_t)p->n_head_kv)) ||
        (!opt && (st = tl_gguf_writer_set_u32(w, KEY("rope.dimension_count"),
                                              (uint32_t)(p->n_embd / p->n_head)))) ||
        (!opt && (st = tl_gguf_writer_set_f32(w, KEY("rope.freq_base"), p->rope_base))) ||
        (opt && (st = tl_gguf_writer_set_f32(w, KEY("attention.layer_norm_epsilon"), 1e-5f))) ||
        (!opt && (st = tl_gguf_writer_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), 1e-5f))) ||
        (p->n_swa > 0 &&
         (st = tl_gguf_writer_set_u32(w, KEY("attention.sliding_window"), (uint32_t)p->n_swa))) ||
        (st = tl_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama")) ||
        (st = tl_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens",
                                         (const char *const *)vocab, (uint64_t)p->n_vocab)) ||
        (st = tl_gguf_writer_set_arr(w, "tokenizer.ggml.scores", TL_GGUF_FLOAT32, scores,
                                     (uint64_t)p->n_vocab)) ||
        (st = tl_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", TL_GGUF_INT32, types,
                                     (uint64_t)p->n_vocab)) ||
        (st = tl_gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0)) ||
        (st = tl_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1)) ||
        (st = tl_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2)) ||
        (p->relu_sparsity > 0 && (st = tl_gguf_writer_set_str(w, "tierllm.ffn_activation",
                                                              "relu"))))
        goto done;
#undef KEY
    for (size_t i = 0; i < s.n && !st; i++) {
        uint64_t ne[2] = {s.t[i].cols, s.t[i].rows};
        st = tl_gguf_writer_add_tensor(w, s.t[i].name, s.t[i].type, s.t[i].rows > 1 ? 2 : 1,
                                       ne);
    }
    if (!st) st = tl_gguf_writer_write(w, path, fill, &s);
done:
    if (vocab)
        for (int32_t i = 0; i < p->n_vocab; i++) free(vocab[i]);
    free(vocab);
    free(scores);
    free(types);
    free(s.t);
    free(s.row_f);
    free(s.row_q);
    free(s.basis);
    tl_gguf_writer_close(w);
    return st;
}

/* hf_folder.c - a Hugging Face folder described as a GGUF (hf_folder.h says what and why).
 *
 * Steps: config.json gives the architecture and shapes; the safetensors files (one, or
 * those model.safetensors.index.json names, each only inside the folder) are parsed and
 * placed end to end; every tensor of the Llama (or OPT) layout is declared under its GGUF
 * name with its type and shape (GGUF ne is the safetensors shape reversed); tokenizer.json
 * (or vocab.json and merges.txt) becomes tokenizer.ggml.* (byte-level BPE as "gpt2" with
 * its pre-tokenizer and merges, SentencePiece-as-BPE as "llama" with scores); the
 * declaration goes through the GGUF reader (tl_gguf_writer_parse), and then each tensor's
 * offset is pointed into the shards. Tensors the layout does not use (rotary caches) are
 * ignored; a tensor it needs and the files lack is reported by the model loader, naming it.
 */
#include "format/hf_folder.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "base/json.h"
#include "base/status.h"
#include "format/file_src.h"
#include "format/rope_scaling.h"
#include "format/safetensors.h"

#define MAX_JSON_BYTES ((size_t)256 << 20) /* tokenizer.json of a 256k vocabulary: ~20 MB */
#define MAX_SHARDS 4096

int tl_hf_is_folder(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* ---- small helpers ---- */

/* The bytes of dir/file (NUL-terminated) in *buf, or *buf NULL when the file is absent
 * and not required. */
static tl_status read_text(const char *dir, const char *file, int required, char **buf,
                           size_t *len) {
    *buf = NULL;
    *len = 0;
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", dir, file) >= (int)sizeof path)
        return tl_error_set(TL_ERR_INVALID, "%s: path too long", dir);
    if (!required && access(path, F_OK) != 0) return TL_OK;
    tl_file_src src; /* a regular file only (never waits on a FIFO), read to its size */
    uint64_t size;
    tl_status st = tl_file_src_open(path, TL_ERR_FORMAT, &src, &size);
    if (st) return st;
    if (size > MAX_JSON_BYTES) {
        tl_file_src_close(&src);
        return tl_error_set(TL_ERR_FORMAT, "%s: larger than %zu bytes", path, MAX_JSON_BYTES);
    }
    char *b = malloc((size_t)size + 1);
    if (!b) st = tl_error_set(TL_ERR_NOMEM, "%s: out of memory", path);
    if (!st) st = tl_file_src_read(&src, 0, b, (size_t)size);
    tl_file_src_close(&src);
    if (st) {
        free(b);
        return st;
    }
    b[size] = 0;
    *buf = b;
    *len = (size_t)size;
    return TL_OK;
}

static tl_status read_json(const char *dir, const char *file, int required, json_t **out) {
    *out = NULL;
    char *buf;
    size_t len;
    tl_status st = read_text(dir, file, required, &buf, &len);
    if (st || !buf) return st;
    char msg[200];
    if (tl_json_parse(buf, len, 0, out, msg, sizeof msg))
        st = tl_error_set(TL_ERR_FORMAT, "%s/%s: %s", dir, file, msg);
    free(buf);
    return st;
}

/* An integer field >= lo (absent: dflt when dflt >= 0, else an error). */
static tl_status get_int(const json_t *o, const char *what, const char *key, int64_t lo,
                         int64_t dflt, int64_t *out) {
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        if (dflt < 0) return tl_error_set(TL_ERR_FORMAT, "%s: missing \"%s\"", what, key);
        *out = dflt;
        return TL_OK;
    }
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > (1ll << 31))
        return tl_error_set(TL_ERR_FORMAT, "%s: \"%s\" must be an integer from %lld to 2^31",
                            what, key, (long long)lo);
    *out = json_integer_value(v);
    return TL_OK;
}

static tl_status get_num(const json_t *o, const char *what, const char *key, double dflt,
                         double *out) {
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        *out = dflt;
        return TL_OK;
    }
    if (!json_is_number(v) || !(json_number_value(v) > 0) || !(json_number_value(v) < 1e30))
        return tl_error_set(TL_ERR_FORMAT, "%s: \"%s\" must be a positive number below 1e30",
                            what, key);
    *out = json_number_value(v);
    return TL_OK;
}

/* A safetensors file name from the index: a plain name inside the folder. */
static int plain_name(const char *s) {
    return s[0] && s[0] != '.' && !strchr(s, '/') && !strchr(s, '\\') && strlen(s) < 256;
}

/* ---- config.json ---- */

typedef struct hf_config {
    const char *arch; /* GGUF architecture */
    int64_t n_embd, n_ff, n_layer, n_head, n_head_kv, head_dim, n_ctx, n_swa, n_vocab;
    int64_t bos, eos, pad;
    double rms_eps, rope_base;   /* rms_eps: LayerNorm's epsilon for opt */
    int untied; /* tie_word_embeddings false: lm_head.weight must be there */
    int32_t n_rope_divisors; /* > 0: rope_scaling's frequency divisors */
    float rope_divisors[2048];
} hf_config;

/* A special token id: an integer, or a list whose first entry counts (Llama 3.1 lists its
 * end tokens); -1 when absent. */
static tl_status token_id(const json_t *c, const char *what, const char *key, int64_t *out) {
    const json_t *v = json_object_get(c, key);
    if (json_is_array(v)) v = json_array_get(v, 0);
    *out = -1;
    if (!v || json_is_null(v)) return TL_OK;
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= (1 << 24))
        return tl_error_set(TL_ERR_FORMAT, "%s: \"%s\" must be a token id", what, key);
    *out = json_integer_value(v);
    return TL_OK;
}

/* rope_scaling: none, or Llama 3.1's "llama3" (its divisors into cfg->rope_divisors);
 * the other kinds (linear, dynamic, yarn) are refused. */
static tl_status read_rope_scaling(const json_t *c, const char *what, hf_config *cfg) {
    const json_t *rs = json_object_get(c, "rope_scaling");
    if (!rs || json_is_null(rs)) return TL_OK;
    const char *kind = json_string_value(json_object_get(rs, "rope_type"));
    if (!kind) kind = json_string_value(json_object_get(rs, "type"));
    if (!json_is_object(rs) || !kind || strcmp(kind, "llama3") != 0)
        return tl_error_set(TL_ERR_UNSUPPORTED, "%s: rope_scaling of type '%s' is not supported "
                            "(llama3 is)", what, kind ? kind : "?");
    double factor, low, high, old_ctx;
    tl_status st;
    if ((st = get_num(rs, what, "factor", -1, &factor)) ||
        (st = get_num(rs, what, "low_freq_factor", 1.0, &low)) ||
        (st = get_num(rs, what, "high_freq_factor", 4.0, &high)) ||
        (st = get_num(rs, what, "original_max_position_embeddings", 8192.0, &old_ctx)))
        return st;
    if (!(factor > 0) || !(high > low))
        return tl_error_set(TL_ERR_FORMAT, "%s: rope_scaling needs a factor > 0 and "
                            "high_freq_factor > low_freq_factor", what);
    if (cfg->head_dim < 2 || cfg->head_dim > 4096 || cfg->head_dim % 2)
        return tl_error_set(TL_ERR_FORMAT, "%s: head_dim %lld cannot be rotated", what,
                            (long long)cfg->head_dim);
    cfg->n_rope_divisors = (int32_t)(cfg->head_dim / 2);
    tl_rope_llama3_divisors(cfg->rope_base, (int32_t)cfg->head_dim, factor, low, high, old_ctx,
                            cfg->rope_divisors);
    return TL_OK;
}

/* OPTForCausalLM: the pre-norm variant (do_layer_norm_before, every size but 350m) with
 * ReLU, biases, affine LayerNorms and the embedding as wide as the model (350m projects
 * it: refused); the classifier is tied unless lm_head.weight is in the files. */
static tl_status read_opt_config(const json_t *c, const char *what, hf_config *cfg) {
    cfg->arch = "opt";
    tl_status st;
    int64_t proj;
    if ((st = get_int(c, what, "hidden_size", 1, -1, &cfg->n_embd)) ||
        (st = get_int(c, what, "ffn_dim", 1, -1, &cfg->n_ff)) ||
        (st = get_int(c, what, "num_hidden_layers", 1, -1, &cfg->n_layer)) ||
        (st = get_int(c, what, "num_attention_heads", 1, -1, &cfg->n_head)) ||
        (st = get_int(c, what, "max_position_embeddings", 1, 2048, &cfg->n_ctx)) ||
        (st = get_int(c, what, "vocab_size", 1, -1, &cfg->n_vocab)) ||
        (st = get_int(c, what, "word_embed_proj_dim", 1, cfg->n_embd, &proj)) ||
        (st = token_id(c, what, "bos_token_id", &cfg->bos)) ||
        (st = token_id(c, what, "eos_token_id", &cfg->eos)) ||
        (st = token_id(c, what, "pad_token_id", &cfg->pad)))
        return st;
    if (cfg->n_vocab > (1 << 24))
        return tl_error_set(TL_ERR_FORMAT, "%s: vocab_size %lld is too large", what,
                            (long long)cfg->n_vocab);
    /* the variant's switches: booleans when present, each at the supported value */
    static const struct { const char *key; int want; } flags[] = {
        {"do_layer_norm_before", 1}, {"enable_bias", 1}, {"layer_norm_elementwise_affine", 1},
        {"_remove_final_layer_norm", 0}};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        const json_t *v = json_object_get(c, flags[i].key);
        if (v && !json_is_boolean(v))
            return tl_error_set(TL_ERR_FORMAT, "%s: \"%s\" must be true or false", what,
                                flags[i].key);
        if (v && json_is_true(v) != flags[i].want)
            return tl_error_set(TL_ERR_UNSUPPORTED, "%s: OPT with %s %s is not supported", what,
                                flags[i].key, flags[i].want ? "false" : "true");
    }
    const json_t *act_v = json_object_get(c, "activation_function");
    const char *act = json_string_value(act_v);
    if (act_v && !act)
        return tl_error_set(TL_ERR_FORMAT, "%s: \"activation_function\" must be a string", what);
    if (proj != cfg->n_embd)
        return tl_error_set(TL_ERR_UNSUPPORTED, "%s: OPT with word_embed_proj_dim %lld != "
                            "hidden_size %lld (projected embeddings, OPT-350m) is not supported",
                            what, (long long)proj, (long long)cfg->n_embd);
    if (act && strcmp(act, "relu") != 0)
        return tl_error_set(TL_ERR_UNSUPPORTED, "%s: OPT with activation_function '%.40s' is "
                            "not supported (relu is)", what, act);
    cfg->n_head_kv = cfg->n_head;
    cfg->head_dim = cfg->n_embd / cfg->n_head;
    if (cfg->n_embd % cfg->n_head || cfg->head_dim % 2)
        return tl_error_set(TL_ERR_FORMAT, "%s: hidden_size %lld does not split into %lld heads "
                            "of even size", what, (long long)cfg->n_embd, (long long)cfg->n_head);
    cfg->untied = json_is_false(json_object_get(c, "tie_word_embeddings"));
    cfg->rms_eps = 1e-5; /* torch.nn.LayerNorm's default, which OPT keeps */
    cfg->rope_base = 10000.0;
    return TL_OK;
}

static tl_status read_config(const char *dir, const json_t *c, hf_config *cfg) {
    char what[4200];
    snprintf(what, sizeof what, "%s/config.json", dir);
    memset(cfg, 0, sizeof *cfg);
    cfg->pad = -1;
    const json_t *archs = json_object_get(c, "architectures");
    const char *a = json_is_array(archs) && json_array_size(archs) == 1
                        ? json_string_value(json_array_get(archs, 0)) : NULL;
    if (!a) return tl_error_set(TL_ERR_FORMAT, "%s: \"architectures\" must list one name", what);
    if (!strcmp(a, "LlamaForCausalLM") || !strcmp(a, "MistralForCausalLM")) cfg->arch = "llama";
    else if (!strcmp(a, "Qwen2ForCausalLM")) cfg->arch = "qwen2";
    else if (!strcmp(a, "OPTForCausalLM")) return read_opt_config(c, what, cfg);
    else
        return tl_error_set(TL_ERR_UNSUPPORTED, "%s: architecture '%.60s' is not supported "
                            "(LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, "
                            "OPTForCausalLM are)", what, a);
    tl_status st;
    if ((st = get_int(c, what, "hidden_size", 1, -1, &cfg->n_embd)) ||
        (st = get_int(c, what, "intermediate_size", 1, -1, &cfg->n_ff)) ||
        (st = get_int(c, what, "num_hidden_layers", 1, -1, &cfg->n_layer)) ||
        (st = get_int(c, what, "num_attention_heads", 1, -1, &cfg->n_head)) ||
        (st = get_int(c, what, "num_key_value_heads", 1, cfg->n_head, &cfg->n_head_kv)) ||
        (st = get_int(c, what, "head_dim", 1, cfg->n_embd / cfg->n_head, &cfg->head_dim)) ||
        (st = get_int(c, what, "max_position_embeddings", 1, 2048, &cfg->n_ctx)) ||
        (st = get_int(c, what, "vocab_size", 1, -1, &cfg->n_vocab)) ||
        (cfg->n_vocab > (1 << 24) &&
         (st = tl_error_set(TL_ERR_FORMAT, "%s: vocab_size %lld is too large", what,
                            (long long)cfg->n_vocab))) ||
        (st = token_id(c, what, "bos_token_id", &cfg->bos)) ||
        (st = token_id(c, what, "eos_token_id", &cfg->eos)) ||
        (st = get_num(c, what, "rms_norm_eps", 1e-6, &cfg->rms_eps)) ||
        (st = get_num(c, what, "rope_theta", 10000.0, &cfg->rope_base)))
        return st;
    /* Qwen2 configs carry a sliding_window that applies only with use_sliding_window, and
     * then only from layer max_window_layers on: one window for every layer is all the
     * forward pass has */
    const json_t *use = json_object_get(c, "use_sliding_window");
    if (!strcmp(cfg->arch, "llama") || json_is_true(use))
        if ((st = get_int(c, what, "sliding_window", 1, 0, &cfg->n_swa))) return st;
    int64_t from = 0;
    if (json_is_true(use) && !strcmp(cfg->arch, "qwen2") &&
        (st = get_int(c, what, "max_window_layers", 0, 0, &from)))
        return st;
    if (cfg->n_swa > 0 && from > 0 && from < cfg->n_layer)
        return tl_error_set(TL_ERR_UNSUPPORTED, "%s: a sliding window on some layers only "
                            "(max_window_layers %lld of %lld) is not supported", what,
                            (long long)from, (long long)cfg->n_layer);
    if (from >= cfg->n_layer) cfg->n_swa = 0; /* no layer has the window */
    if (json_is_true(json_object_get(c, "mlp_bias")))
        return tl_error_set(TL_ERR_UNSUPPORTED, "%s: mlp_bias (biases on the feed-forward "
                            "matrices) is not supported", what);
    const json_t *tie = json_object_get(c, "tie_word_embeddings");
    cfg->untied = tie && json_is_false(tie);
    return read_rope_scaling(c, what, cfg);
}

/* OPT's keys: no RoPE, LayerNorm's epsilon; its tokenizer puts </s> (its bos) before
 * the text. */
static tl_status put_opt_config(tl_gguf_writer *w, const hf_config *c, const char *name) {
    tl_status st;
    if ((st = tl_gguf_writer_set_str(w, "general.architecture", "opt")) ||
        (st = tl_gguf_writer_set_str(w, "general.name", name)) ||
        (st = tl_gguf_writer_set_u32(w, "opt.context_length", (uint32_t)c->n_ctx)) ||
        (st = tl_gguf_writer_set_u32(w, "opt.embedding_length", (uint32_t)c->n_embd)) ||
        (st = tl_gguf_writer_set_u32(w, "opt.feed_forward_length", (uint32_t)c->n_ff)) ||
        (st = tl_gguf_writer_set_u32(w, "opt.block_count", (uint32_t)c->n_layer)) ||
        (st = tl_gguf_writer_set_u32(w, "opt.attention.head_count", (uint32_t)c->n_head)) ||
        (st = tl_gguf_writer_set_f32(w, "opt.attention.layer_norm_epsilon", (float)c->rms_eps)) ||
        (st = tl_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", c->bos >= 0)))
        return st;
    if (c->bos >= 0 &&
        (st = tl_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)c->bos)))
        return st;
    if (c->eos >= 0 &&
        (st = tl_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)c->eos)))
        return st;
    return TL_OK;
}

static tl_status put_config(tl_gguf_writer *w, const hf_config *c, const char *name) {
    char k[128];
#define KEY(s) (snprintf(k, sizeof k, "%s." s, c->arch), k)
    tl_status st;
    if (!strcmp(c->arch, "opt")) return put_opt_config(w, c, name);
    if ((st = tl_gguf_writer_set_str(w, "general.architecture", c->arch)) ||
        (st = tl_gguf_writer_set_str(w, "general.name", name)) ||
        (st = tl_gguf_writer_set_u32(w, KEY("context_length"), (uint32_t)c->n_ctx)) ||
        (st = tl_gguf_writer_set_u32(w, KEY("embedding_length"), (uint32_t)c->n_embd)) ||
        (st = tl_gguf_writer_set_u32(w, KEY("feed_forward_length"), (uint32_t)c->n_ff)) ||
        (st = tl_gguf_writer_set_u32(w, KEY("block_count"), (uint32_t)c->n_layer)) ||
        (st = tl_gguf_writer_set_u32(w, KEY("attention.head_count"), (uint32_t)c->n_head)) ||
        (st = tl_gguf_writer_set_u32(w, KEY("attention.head_count_kv"), (uint32_t)c->n_head_kv)) ||
        (st = tl_gguf_writer_set_u32(w, KEY("attention.key_length"), (uint32_t)c->head_dim)) ||
        (st = tl_gguf_writer_set_u32(w, KEY("rope.dimension_count"), (uint32_t)c->head_dim)) ||
        (st = tl_gguf_writer_set_f32(w, KEY("rope.freq_base"), (float)c->rope_base)) ||
        (st = tl_gguf_writer_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), (float)c->rms_eps)) ||
        (c->n_swa > 0 &&
         (st = tl_gguf_writer_set_u32(w, KEY("attention.sliding_window"), (uint32_t)c->n_swa))) ||
        (!strcmp(c->arch, "llama") &&
         (st = tl_gguf_writer_set_bool(w, "tierllm.rope_half_order", true))) ||
        (c->n_rope_divisors > 0 &&
         (st = tl_gguf_writer_set_arr(w, "tierllm.rope_freqs", TL_GGUF_FLOAT32, c->rope_divisors,
                                      (uint64_t)c->n_rope_divisors))) ||
        (c->bos >= 0 &&
         (st = tl_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)c->bos))) ||
        (c->eos >= 0 &&
         (st = tl_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)c->eos))))
        return st;
#undef KEY
    return TL_OK;
}

/* ---- tokenizer.json ---- */

/* Llama 3's and Qwen2's split regexes differ only in the digit run. */
#define LLAMA3_SPLIT "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define QWEN2_SPLIT "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

/* The pre-tokenizer rules (tokenizer.ggml.pre) of a byte-level pre_tokenizer, or NULL. */
static const char *pre_rules(const json_t *pre) {
    const char *type = json_string_value(json_object_get(pre, "type"));
    if (!type) return NULL;
    if (!strcmp(type, "ByteLevel"))
        return json_is_false(json_object_get(pre, "use_regex")) ? NULL : "gpt-2";
    if (strcmp(type, "Sequence") != 0) return NULL;
    const json_t *seq = json_object_get(pre, "pretokenizers");
    if (json_array_size(seq) != 2) return NULL;
    const json_t *split = json_array_get(seq, 0), *bl = json_array_get(seq, 1);
    const char *t0 = json_string_value(json_object_get(split, "type"));
    const char *t1 = json_string_value(json_object_get(bl, "type"));
    const char *rx = json_string_value(json_object_get(json_object_get(split, "pattern"), "Regex"));
    if (!t0 || !t1 || !rx || strcmp(t0, "Split") != 0 || strcmp(t1, "ByteLevel") != 0 ||
        !json_is_false(json_object_get(bl, "use_regex")))
        return NULL;
    if (!strcmp(rx, LLAMA3_SPLIT)) return "llama-bpe";
    if (!strcmp(rx, QWEN2_SPLIT)) return "qwen2";
    return NULL;
}

/* SentencePiece converted to BPE (Llama 2, Mistral, TinyLlama): byte fallback, and
 * spaces written as U+2581 by a normalizer (Replace " ", with a Prepend for the leading
 * one) or a Metaspace pre-tokenizer. 1 when tj is such a tokenizer; *prefix: whether a
 * U+2581 is put before the text. */
static int spm_style(const json_t *tj, int *prefix) {
    const json_t *model = json_object_get(tj, "model");
    if (!json_is_true(json_object_get(model, "byte_fallback"))) return 0;
    const json_t *norm = json_object_get(tj, "normalizer"), *pre = json_object_get(tj, "pre_tokenizer");
    const char *pt = json_string_value(json_object_get(pre, "type"));
    if (pt && !strcmp(pt, "Metaspace")) {
        const char *scheme = json_string_value(json_object_get(pre, "prepend_scheme"));
        *prefix = !scheme || strcmp(scheme, "never") != 0;
        return 1;
    }
    const json_t *list = json_object_get(norm, "normalizers");
    int replace = 0;
    *prefix = 0;
    size_t i;
    const json_t *n;
    json_array_foreach(list, i, n) {
        const char *t = json_string_value(json_object_get(n, "type"));
        if (t && !strcmp(t, "Prepend")) *prefix = 1;
        if (t && !strcmp(t, "Replace")) replace = 1;
    }
    return replace && !pre_rules(pre);
}

/* A SentencePiece-style vocabulary as GGUF's "llama" tokenizer: tokens by id with scores
 * and types. SentencePiece merges the adjacent pair whose joined piece scores highest;
 * the converted BPE merges pairs in the order of its merges list, which the converter
 * ranks by the joined piece's score. So each piece scores minus the rank of the first
 * merge that makes it (pieces no merge makes, single characters and bytes, score below
 * every merge), and merging by score is merging by rank. */
static tl_status put_spm(tl_gguf_writer *w, const char *what, const json_t *vocab,
                         const json_t *merges, const json_t *added, const json_t *model,
                         int prefix, int64_t n, const char **tokens, int32_t *types) {
    float *scores = malloc((size_t)n * sizeof *scores);
    if (!scores) return tl_error_set(TL_ERR_NOMEM, "%s: out of memory", what);
    const float unmade = -1e9f;
    for (int64_t t = 0; t < n; t++) scores[t] = unmade;
    size_t i;
    const json_t *v;
    json_array_foreach(merges, i, v) {
        char joined[1024];
        const char *a = NULL, *b = NULL, *sp = NULL;
        if (json_is_string(v) && (sp = strchr(json_string_value(v), ' '))) {
            a = json_string_value(v);
            b = sp + 1;
        } else if (json_is_array(v)) {
            a = json_string_value(json_array_get(v, 0));
            b = json_string_value(json_array_get(v, 1));
        }
        if (!a || !b) {
            free(scores);
            return tl_error_set(TL_ERR_FORMAT, "%s: merge %zu malformed", what, i);
        }
        const size_t la = sp ? (size_t)(sp - a) : strlen(a), lb = strlen(b);
        if (la + lb >= sizeof joined) continue; /* longer than any piece */
        memcpy(joined, a, la), memcpy(joined + la, b, lb + 1);
        const json_t *id = json_object_get(vocab, joined);
        if (json_is_integer(id) && json_integer_value(id) < n &&
            scores[json_integer_value(id)] == unmade)
            scores[json_integer_value(id)] = -(float)i;
    }
    for (int64_t t = 0; t < n; t++) /* bytes as <0xNN>, the others normal unless added */
        if (types[t] == 1 && strlen(tokens[t]) == 6 && !strncmp(tokens[t], "<0x", 3) &&
            tokens[t][5] == '>')
            types[t] = 6;
    const char *unk = json_string_value(json_object_get(model, "unk_token"));
    const json_t *unk_id = unk ? json_object_get(vocab, unk) : NULL;
    json_array_foreach(added, i, v) /* the unknown token may be listed among the added */
        if (unk && !unk_id && !strcmp(json_string_value(json_object_get(v, "content")), unk))
            unk_id = json_object_get(v, "id");
    if (json_is_integer(unk_id) && json_integer_value(unk_id) < n)
        types[json_integer_value(unk_id)] = 2;
    tl_status st;
    if ((st = tl_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama")) ||
        (st = tl_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", tokens, (uint64_t)n)) ||
        (st = tl_gguf_writer_set_arr(w, "tokenizer.ggml.scores", TL_GGUF_FLOAT32, scores,
                                     (uint64_t)n)) ||
        (st = tl_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", TL_GGUF_INT32, types,
                                     (uint64_t)n)) ||
        (st = tl_gguf_writer_set_bool(w, "tokenizer.ggml.add_space_prefix", prefix != 0)) ||
        (json_is_integer(unk_id) && json_integer_value(unk_id) < n &&
         (st = tl_gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id",
                                      (uint32_t)json_integer_value(unk_id)))))
        tl_error_wrap(st, "%s", what);
    free(scores);
    return st;
}

/* The tokens by id up to the largest (vocab and added tokens; ids missing from both
 * become [PAD<id>]) with their GGUF token types, and the merges as "a b". */
static tl_status put_tokenizer(tl_gguf_writer *w, const char *dir, const json_t *tj) {
    char what[4200];
    snprintf(what, sizeof what, "%s/tokenizer.json", dir);
    const json_t *model = json_object_get(tj, "model");
    const char *mtype = json_string_value(json_object_get(model, "type"));
    if (!mtype || strcmp(mtype, "BPE") != 0)
        return tl_error_set(TL_ERR_UNSUPPORTED, "%s: tokenizer model '%s' is not supported "
                            "(BPE is)", what, mtype ? mtype : "?");
    const char *pre = pre_rules(json_object_get(tj, "pre_tokenizer"));
    int prefix = 0;
    const int spm = !pre && spm_style(tj, &prefix);
    if (!pre && !spm)
        return tl_error_set(TL_ERR_UNSUPPORTED, "%s: the tokenizer is neither byte-level BPE "
                            "(GPT-2, Llama 3, Qwen2 pre-tokenizers) nor SentencePiece-style BPE "
                            "(byte fallback, spaces as U+2581)", what);
    const json_t *vocab = json_object_get(model, "vocab"), *merges = json_object_get(model, "merges");
    const json_t *added = json_object_get(tj, "added_tokens");
    if (!json_is_object(vocab) || !json_is_array(merges) || (added && !json_is_array(added)))
        return tl_error_set(TL_ERR_FORMAT, "%s: model.vocab, model.merges or added_tokens "
                            "malformed", what);
    int64_t n = 0; /* the largest id + 1: the embedding may have more rows (padding) */
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)vocab, key, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= (1 << 24))
            return tl_error_set(TL_ERR_FORMAT, "%s: token '%.40s' has a bad id", what, key);
        if (json_integer_value(v) >= n) n = json_integer_value(v) + 1;
    }
    size_t i;
    json_array_foreach(added, i, v) {
        const json_t *id = json_object_get(v, "id");
        if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) >= (1 << 24) ||
            !json_is_string(json_object_get(v, "content")))
            return tl_error_set(TL_ERR_FORMAT, "%s: added token %zu malformed", what, i);
        if (json_integer_value(id) >= n) n = json_integer_value(id) + 1;
    }
    const char **tokens = calloc((size_t)n, sizeof *tokens);
    int32_t *types = calloc((size_t)n, sizeof *types);
    char **pads = calloc((size_t)n, sizeof *pads);
    const char **mlist = calloc(json_array_size(merges) + 1, sizeof *mlist);
    char **mown = calloc(json_array_size(merges) + 1, sizeof *mown);
    tl_status st = tokens && types && pads && mlist && mown ? TL_OK
                   : tl_error_set(TL_ERR_NOMEM, "%s: out of memory", what);
    if (!st) {
        json_object_foreach((json_t *)vocab, key, v) {
            tokens[json_integer_value(v)] = key;
            types[json_integer_value(v)] = 1; /* normal */
        }
        json_array_foreach(added, i, v) {
            const int64_t id = json_integer_value(json_object_get(v, "id"));
            tokens[id] = json_string_value(json_object_get(v, "content"));
            types[id] = json_is_true(json_object_get(v, "special")) ? 3 : 4; /* control, user */
        }
        for (int64_t t = 0; t < n && !st; t++)
            if (!tokens[t]) {
                char b[32];
                snprintf(b, sizeof b, "[PAD%lld]", (long long)t);
                if (!(pads[t] = strdup(b))) st = tl_error_set(TL_ERR_NOMEM, "out of memory");
                tokens[t] = pads[t];
                types[t] = 5; /* unused */
            }
    }
    if (!st && spm) {
        st = put_spm(w, what, vocab, merges, added, model, prefix, n, tokens, types);
        goto done;
    }
    json_array_foreach(merges, i, v) { /* "a b", or ["a", "b"] in newer files */
        if (st) break;
        if (json_is_string(v)) {
            mlist[i] = json_string_value(v);
            continue;
        }
        const char *a = json_string_value(json_array_get(v, 0)), *b = json_string_value(json_array_get(v, 1));
        if (!json_is_array(v) || json_array_size(v) != 2 || !a || !b) {
            st = tl_error_set(TL_ERR_FORMAT, "%s: merge %zu malformed", what, i);
            break;
        }
        const size_t la = strlen(a), lb = strlen(b);
        if (!(mown[i] = malloc(la + lb + 2))) {
            st = tl_error_set(TL_ERR_NOMEM, "out of memory");
            break;
        }
        memcpy(mown[i], a, la), mown[i][la] = ' ', memcpy(mown[i] + la + 1, b, lb + 1);
        mlist[i] = mown[i];
    }
    if (!st && ((st = tl_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2")) ||
                (st = tl_gguf_writer_set_str(w, "tokenizer.ggml.pre", pre)) ||
                (st = tl_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", tokens, (uint64_t)n)) ||
                (st = tl_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", TL_GGUF_INT32, types,
                                             (uint64_t)n)) ||
                (st = tl_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", mlist,
                                                 json_array_size(merges)))))
        tl_error_wrap(st, "%s", what);
done:
    for (int64_t t = 0; pads && t < n; t++) free(pads[t]);
    for (size_t m = 0; mown && m < json_array_size(merges); m++) free(mown[m]);
    free(tokens), free(types), free(pads), free(mlist), free(mown);
    return st;
}

/* A folder without tokenizer.json but with GPT-2's vocab.json and merges.txt (OPT's
 * checkpoints): the tokenizer.json those two would convert to - a byte-level BPE model
 * with GPT-2's pre-tokenizer - with the config's bos, eos and pad tokens marked special. */
static tl_status gpt2_files_tokenizer(const char *dir, const hf_config *cfg, json_t **out) {
    *out = NULL;
    char path[4200];
    snprintf(path, sizeof path, "%s/merges.txt", dir);
    json_t *vocab = NULL;
    char *text = NULL;
    size_t len = 0;
    tl_status st = read_json(dir, "vocab.json", 0, &vocab);
    if (!st && vocab) st = read_text(dir, "merges.txt", 0, &text, &len);
    if (!st && (!vocab || !text))
        st = tl_error_set(TL_ERR_FORMAT, "%s: no tokenizer.json, and no vocab.json with "
                          "merges.txt", dir);
    if (!st && !json_is_object(vocab))
        st = tl_error_set(TL_ERR_FORMAT, "%s/vocab.json: not an object of token ids", dir);
    json_t *merges = st ? NULL : json_array(), *added = st ? NULL : json_array();
    json_t *tok = st ? NULL : json_object();
    if (!st && (!merges || !added || !tok)) st = tl_error_set(TL_ERR_NOMEM, "out of memory");
    /* one merge "a b" per line; a first line "#version: ..." and empty lines are skipped */
    size_t line_no = 0;
    for (char *p = text, *e; !st && p && p < text + len; p = e + 1, line_no++) {
        e = memchr(p, '\n', (size_t)(text + len - p));
        if (!e) e = text + len;
        size_t n = (size_t)(e - p);
        if (n && p[n - 1] == '\r') n--;
        if (n == 0 || (line_no == 0 && n >= 8 && !strncmp(p, "#version", 8))) continue;
        const char *sp = memchr(p, ' ', n);
        if (!sp || sp == p || sp == p + n - 1 || memchr(sp + 1, ' ', (size_t)(p + n - sp - 1)))
            st = tl_error_set(TL_ERR_FORMAT, "%s: line %zu is not a merge \"a b\"", path,
                              line_no + 1);
        else if (json_array_append_new(merges, json_stringn(p, n)))
            st = tl_error_set(TL_ERR_FORMAT, "%s: line %zu is not UTF-8", path, line_no + 1);
    }
    const int64_t special[3] = {cfg->bos, cfg->eos, cfg->pad};
    for (int k = 0; !st && k < 3; k++) { /* each special id once, named by vocab.json */
        const char *key;
        json_t *v;
        int seen = 0;
        for (int j = 0; j < k; j++) seen |= special[j] == special[k];
        if (special[k] < 0 || seen) continue;
        json_object_foreach(vocab, key, v)
            if (json_is_integer(v) && json_integer_value(v) == special[k]) {
                json_t *a = json_pack("{s:I, s:s, s:b}", "id", (json_int_t)special[k],
                                      "content", key, "special", 1);
                if (!a || json_array_append_new(added, a))
                    st = tl_error_set(TL_ERR_NOMEM, "out of memory");
                break;
            }
    }
    if (!st) {
        json_t *model = json_pack("{s:s, s:O, s:O}", "type", "BPE", "vocab", vocab, "merges", merges);
        json_t *pre = json_pack("{s:s}", "type", "ByteLevel");
        if (!model || !pre || json_object_set(tok, "model", model) ||
            json_object_set(tok, "pre_tokenizer", pre) ||
            json_object_set(tok, "added_tokens", added))
            st = tl_error_set(TL_ERR_NOMEM, "out of memory");
        json_decref(model);
        json_decref(pre);
    }
    json_decref(vocab);
    json_decref(merges);
    json_decref(added);
    free(text);
    if (st) json_decref(tok);
    else *out = tok;
    return st;
}

/* ---- tensors ---- */

/* Hugging Face name -> GGUF name, for whole-model tensors and for a layer's (after its
 * "<prefix>N." and before "blk.N."). */
typedef struct name_pair { const char *hf, *gguf; } name_pair;

/* The GGUF name of hf by the tables, or 0 when it is none of theirs. */
static int map_name(const char *hf, const name_pair *top, size_t n_top, const char *layers,
                    const name_pair *layer, size_t n_layer, char *out, size_t cap) {
    for (size_t i = 0; i < n_top; i++)
        if (!strcmp(hf, top[i].hf)) return snprintf(out, cap, "%s", top[i].gguf) < (int)cap;
    const size_t lp = strlen(layers);
    unsigned l;
    int used = 0;
    if (strncmp(hf, layers, lp) != 0 || sscanf(hf + lp, "%u.%n", &l, &used) != 1 || used == 0 ||
        l > 100000)
        return 0;
    for (size_t i = 0; i < n_layer; i++)
        if (!strcmp(hf + lp + used, layer[i].hf))
            return snprintf(out, cap, "blk.%u.%s", l, layer[i].gguf) < (int)cap;
    return 0;
}

/* The GGUF name of a Hugging Face OPT tensor (under "model.decoder." or "decoder."), or 0
 * when it is not one. */
static int gguf_name_opt(const char *hf, char *out, size_t cap) {
    static const name_pair top[] = {
        {"embed_tokens.weight", "token_embd.weight"},
        {"embed_positions.weight", "position_embd.weight"},
        {"final_layer_norm.weight", "output_norm.weight"},
        {"final_layer_norm.bias", "output_norm.bias"}};
    static const name_pair layer[] = {
        {"self_attn_layer_norm.weight", "attn_norm.weight"}, {"self_attn_layer_norm.bias", "attn_norm.bias"},
        {"self_attn.q_proj.weight", "attn_q.weight"},         {"self_attn.q_proj.bias", "attn_q.bias"},
        {"self_attn.k_proj.weight", "attn_k.weight"},         {"self_attn.k_proj.bias", "attn_k.bias"},
        {"self_attn.v_proj.weight", "attn_v.weight"},         {"self_attn.v_proj.bias", "attn_v.bias"},
        {"self_attn.out_proj.weight", "attn_output.weight"},  {"self_attn.out_proj.bias", "attn_output.bias"},
        {"final_layer_norm.weight", "ffn_norm.weight"},       {"final_layer_norm.bias", "ffn_norm.bias"},
        {"fc1.weight", "ffn_up.weight"},                      {"fc1.bias", "ffn_up.bias"},
        {"fc2.weight", "ffn_down.weight"},                    {"fc2.bias", "ffn_down.bias"}};
    if (!strcmp(hf, "lm_head.weight")) return snprintf(out, cap, "output.weight") < (int)cap;
    if (!strncmp(hf, "model.", 6)) hf += 6;
    if (strncmp(hf, "decoder.", 8) != 0) return 0;
    return map_name(hf + 8, top, sizeof top / sizeof top[0], "layers.", layer,
                    sizeof layer / sizeof layer[0], out, cap);
}

/* The GGUF name of a Hugging Face Llama-layout tensor, or 0 when it is not one. */
static int gguf_name(const char *hf, char *out, size_t cap) {
    static const name_pair top[] = {
        {"model.embed_tokens.weight", "token_embd.weight"},
        {"model.norm.weight", "output_norm.weight"},
        {"lm_head.weight", "output.weight"}};
    static const name_pair layer[] = {
        {"input_layernorm.weight", "attn_norm.weight"},
        {"self_attn.q_proj.weight", "attn_q.weight"},   {"self_attn.k_proj.weight", "attn_k.weight"},
        {"self_attn.v_proj.weight", "attn_v.weight"},   {"self_attn.o_proj.weight", "attn_output.weight"},
        {"self_attn.q_proj.bias", "attn_q.bias"},       {"self_attn.k_proj.bias", "attn_k.bias"},
        {"self_attn.v_proj.bias", "attn_v.bias"},       {"self_attn.o_proj.bias", "attn_output.bias"},
        {"post_attention_layernorm.weight", "ffn_norm.weight"},
        {"mlp.gate_proj.weight", "ffn_gate.weight"},    {"mlp.up_proj.weight", "ffn_up.weight"},
        {"mlp.down_proj.weight", "ffn_down.weight"}};
    return map_name(hf, top, sizeof top / sizeof top[0], "model.layers.", layer,
                    sizeof layer / sizeof layer[0], out, cap);
}

static tl_type gguf_type(tl_st_dtype d) {
    return d == TL_ST_F32 ? TL_TYPE_F32 : d == TL_ST_F16 ? TL_TYPE_F16 : TL_TYPE_BF16;
}

/* The shard file names: model.safetensors alone, or the index's weight_map values (in
 * sorted order, each once). */
static tl_status shard_names(const char *dir, char ***names, size_t *n) {
    *names = NULL;
    *n = 0;
    json_t *idx = NULL;
    tl_status st = read_json(dir, "model.safetensors.index.json", 0, &idx);
    if (st) return st;
    if (!idx) {
        *names = calloc(1, sizeof **names);
        if (!*names || !((*names)[0] = strdup("model.safetensors")))
            return free(*names), *names = NULL, tl_error_set(TL_ERR_NOMEM, "out of memory");
        *n = 1;
        return TL_OK;
    }
    const json_t *map = json_object_get(idx, "weight_map");
    const char *key;
    const json_t *v;
    size_t cap = json_object_size(map);
    char **list = json_is_object(map) && cap ? calloc(cap, sizeof *list) : NULL;
    if (!list)
        st = tl_error_set(TL_ERR_FORMAT, "%s/model.safetensors.index.json: weight_map must be a "
                          "non-empty object", dir);
    json_object_foreach((json_t *)map, key, v) {
        if (st) break;
        const char *file = json_string_value(v);
        if (!file || !plain_name(file)) {
            st = tl_error_set(TL_ERR_FORMAT, "%s/model.safetensors.index.json: tensor '%.60s' "
                              "names a file outside the folder or no file", dir, key);
            break;
        }
        size_t k = 0;
        while (k < *n && strcmp(list[k], file) != 0) k++;
        if (k < *n) continue;
        if (*n == MAX_SHARDS || !(list[*n] = strdup(file))) {
            st = tl_error_set(TL_ERR_FORMAT, "%s: too many shards or out of memory", dir);
            break;
        }
        (*n)++;
    }
    for (size_t a = 1; !st && a < *n; a++) /* sorted: a stable concatenation order */
        for (size_t b = a; b > 0 && strcmp(list[b - 1], list[b]) > 0; b--) {
            char *t = list[b];
            list[b] = list[b - 1], list[b - 1] = t;
        }
    json_decref(idx);
    if (st) {
        for (size_t k = 0; list && k < *n; k++) free(list[k]);
        free(list);
        *n = 0;
        return st;
    }
    *names = list;
    return TL_OK;
}

void tl_hf_folder_free(tl_hf_folder *f) {
    if (!f) return;
    tl_gguf_free(f->gguf);
    for (size_t i = 0; f->files && i < f->n_files; i++) free(f->files[i]);
    free(f->files);
    free(f->at);
    free(f->sizes);
    free(f);
}

tl_status tl_hf_folder_open(const char *dir, tl_hf_folder **out) {
    *out = NULL;
    json_t *cfg_json = NULL, *tok_json = NULL;
    hf_config cfg;
    tl_status st = read_json(dir, "config.json", 1, &cfg_json);
    if (!st) st = read_config(dir, cfg_json, &cfg);
    if (!st) st = read_json(dir, "tokenizer.json", 0, &tok_json);
    if (!st && !tok_json) st = gpt2_files_tokenizer(dir, &cfg, &tok_json);
    tl_hf_folder *f = st ? NULL : calloc(1, sizeof *f);
    if (!st && !f) st = tl_error_set(TL_ERR_NOMEM, "out of memory");
    char **names = NULL;
    if (!st) st = shard_names(dir, &names, &f->n_files);
    if (!st) {
        f->files = calloc(f->n_files, sizeof *f->files);
        f->at = calloc(f->n_files, sizeof *f->at);
        f->sizes = calloc(f->n_files, sizeof *f->sizes);
        if (!f->files || !f->at || !f->sizes) st = tl_error_set(TL_ERR_NOMEM, "out of memory");
    }
    tl_st_file **sts = st ? NULL : calloc(f->n_files, sizeof *sts);
    if (!st && !sts) st = tl_error_set(TL_ERR_NOMEM, "out of memory");
    uint64_t at = 0;
    for (size_t i = 0; !st && i < f->n_files; i++) {
        size_t len = strlen(dir) + strlen(names[i]) + 2;
        if (!(f->files[i] = malloc(len))) {
            st = tl_error_set(TL_ERR_NOMEM, "out of memory");
            break;
        }
        snprintf(f->files[i], len, "%s/%s", dir, names[i]);
        if ((st = tl_st_open(f->files[i], &sts[i]))) break;
        f->at[i] = at;
        f->sizes[i] = sts[i]->file_size;
        at += (sts[i]->file_size + TL_HF_SHARD_ALIGN - 1) / TL_HF_SHARD_ALIGN * TL_HF_SHARD_ALIGN;
    }
    tl_gguf_writer *w = NULL;
    if (!st) st = tl_gguf_writer_open(&w);
    if (!st) st = put_config(w, &cfg, dir);
    if (!st) st = put_tokenizer(w, dir, tok_json);
    /* tensors: declared in shard order, their absolute offsets kept in the same order */
    uint64_t *offsets = NULL;
    size_t n_t = 0, cap = 0;
    int has_output = 0;
    for (size_t i = 0; !st && i < f->n_files; i++)
        for (uint64_t t = 0; !st && t < sts[i]->n_tensors; t++) {
            const tl_st_tensor *x = &sts[i]->tensors[t];
            char name[96];
            if (!(strcmp(cfg.arch, "opt") ? gguf_name : gguf_name_opt)(x->name, name, sizeof name))
                continue;
            if (x->n_dims < 1 || x->n_dims > 2) {
                st = tl_error_set(TL_ERR_FORMAT, "%s: tensor '%s' has %u dimensions, expected 1 "
                                  "or 2", f->files[i], x->name, x->n_dims);
                break;
            }
            const uint64_t esize = x->dtype == TL_ST_F32 ? 4 : 2;
            if (x->offset % esize != 0) { /* the kernels read elements at their alignment */
                st = tl_error_set(TL_ERR_UNSUPPORTED, "%s: tensor '%s' starts at offset %llu, "
                                  "not a multiple of its element size", f->files[i], x->name,
                                  (unsigned long long)x->offset);
                break;
            }
            uint64_t ne[2] = {x->shape[x->n_dims - 1], x->n_dims == 2 ? x->shape[0] : 1};
            uint64_t skip = 0; /* bytes before the rows GGUF keeps */
            if (!strcmp(name, "position_embd.weight")) { /* OPT: positions start at row 2 */
                if (ne[1] <= 2) {
                    st = tl_error_set(TL_ERR_FORMAT, "%s: tensor '%s' has %llu rows, fewer "
                                      "than OPT's offset of 2 and a position", f->files[i],
                                      x->name, (unsigned long long)ne[1]);
                    break;
                }
                ne[1] -= 2;
                skip = 2 * ne[0] * esize;
            }
            if (n_t == cap) {
                cap = cap ? 2 * cap : 256;
                uint64_t *o = realloc(offsets, cap * sizeof *o);
                if (!o) {
                    st = tl_error_set(TL_ERR_NOMEM, "out of memory");
                    break;
                }
                offsets = o;
            }
            offsets[n_t++] = f->at[i] + x->offset + skip;
            has_output |= !strcmp(name, "output.weight");
            st = tl_gguf_writer_add_tensor(w, name, gguf_type(x->dtype), x->n_dims, ne);
        }
    if (!st && cfg.untied && !has_output)
        st = tl_error_set(TL_ERR_FORMAT, "%s: tie_word_embeddings is false but lm_head.weight "
                          "is missing", dir);
    if (!st) st = tl_gguf_writer_parse(w, dir, &f->gguf);
    if (!st) {
        for (size_t t = 0; t < n_t; t++) f->gguf->tensors[t].offset = offsets[t];
        f->gguf->data_offset = 0;
        f->gguf->file_size = at;
    }
    tl_gguf_writer_close(w);
    free(offsets);
    for (size_t i = 0; sts && i < f->n_files; i++) tl_st_free(sts[i]);
    free(sts);
    for (size_t i = 0; names && f && i < f->n_files; i++) free(names[i]);
    free(names);
    json_decref(cfg_json);
    json_decref(tok_json);
    if (st) {
        tl_hf_folder_free(f);
        return st;
    }
    *out = f;
    return TL_OK;
}

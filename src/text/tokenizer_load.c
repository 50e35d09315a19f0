/* tokenizer_load.c - builds a tokenizer from GGUF metadata (tokenizer.ggml.*): the
 * vocabulary (texts, scores, types), the BPE merges and pre-tokenizer, the special ids
 * and flags, the special tokens cut out of prompts, and each token's decoded piece.
 *
 * Invariants once tl_tokenizer_from_gguf succeeds: n_vocab >= 1; every array has
 * n_vocab entries; bos/eos/unk are -1 or valid ids; the tokenizer owns copies of all
 * strings (the tl_gguf may be freed). Hostile metadata (wrong types, count mismatches,
 * ids out of range, empty vocabularies) is refused with TL_ERR_FORMAT naming the key.
 */
#include "text/tokenizer_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "text/unicode.h"

#define KEY_MODEL "tokenizer.ggml.model"
#define KEY_TOKENS "tokenizer.ggml.tokens"
#define KEY_SCORES "tokenizer.ggml.scores"
#define KEY_TYPES "tokenizer.ggml.token_type"
#define KEY_MERGES "tokenizer.ggml.merges"
#define KEY_PRE "tokenizer.ggml.pre"

/* An optional token id key: absent -> def (if in range, else -1); -1 or 0xFFFFFFFF ->
 * -1 (llama.cpp writes that for "none"); otherwise it must be a valid id. */
static tl_status read_id(const tl_gguf *g, const char *key, int32_t n_vocab, int32_t def,
                         int32_t *out)
{
    const tl_gguf_kv *kv = tl_gguf_find(g, key);
    if (!kv) {
        *out = def < n_vocab ? def : -1;
        return TL_OK;
    }
    int64_t v;
    switch (kv->type) {
    case TL_GGUF_UINT8: case TL_GGUF_UINT16: case TL_GGUF_UINT32: case TL_GGUF_UINT64:
        if (kv->v.u == 0xFFFFFFFFu || kv->v.u == UINT64_MAX) {
            *out = -1;
            return TL_OK;
        }
        v = kv->v.u > (uint64_t)INT32_MAX ? INT64_MAX : (int64_t)kv->v.u;
        break;
    case TL_GGUF_INT8: case TL_GGUF_INT16: case TL_GGUF_INT32: case TL_GGUF_INT64:
        v = kv->v.i;
        break;
    default:
        return tl_error_set(TL_ERR_FORMAT, "tokenizer: %s has type %s, expected an integer",
                            key, tl_gguf_type_name(kv->type));
    }
    if (v == -1) {
        *out = -1;
        return TL_OK;
    }
    if (v < 0 || v >= n_vocab)
        return tl_error_set(TL_ERR_FORMAT,
                            "tokenizer: %s = %lld is out of range (vocabulary of %d tokens)",
                            key, (long long)v, (int)n_vocab);
    *out = (int32_t)v;
    return TL_OK;
}

static tl_status read_flag(const tl_gguf *g, const char *key, int def, int *out)
{
    const tl_gguf_kv *kv = tl_gguf_find(g, key);
    if (!kv) {
        *out = def;
        return TL_OK;
    }
    switch (kv->type) {
    case TL_GGUF_BOOL:
    case TL_GGUF_UINT8: case TL_GGUF_UINT16: case TL_GGUF_UINT32: case TL_GGUF_UINT64:
        *out = kv->v.u != 0;
        return TL_OK;
    case TL_GGUF_INT8: case TL_GGUF_INT16: case TL_GGUF_INT32: case TL_GGUF_INT64:
        *out = kv->v.i != 0;
        return TL_OK;
    default:
        return tl_error_set(TL_ERR_FORMAT, "tokenizer: %s has type %s, expected a bool", key,
                            tl_gguf_type_name(kv->type));
    }
}

/* An array key with n elements of type elem (or NULL if absent and !required). */
static tl_status get_array(const tl_gguf *g, const char *key, int required,
                           tl_gguf_type elem, tl_gguf_type elem_alt, uint64_t n_expect,
                           const tl_gguf_kv **out)
{
    const tl_gguf_kv *kv = tl_gguf_find(g, key);
    *out = NULL;
    if (!kv) {
        if (required)
            return tl_error_set(TL_ERR_FORMAT, "tokenizer: missing key %s", key);
        return TL_OK;
    }
    if (kv->type != TL_GGUF_ARRAY)
        return tl_error_set(TL_ERR_FORMAT, "tokenizer: %s has type %s, expected an array",
                            key, tl_gguf_type_name(kv->type));
    if (kv->v.arr.type != elem && kv->v.arr.type != elem_alt)
        return tl_error_set(TL_ERR_FORMAT, "tokenizer: %s is an array of %s, expected %s",
                            key, tl_gguf_type_name(kv->v.arr.type), tl_gguf_type_name(elem));
    if (n_expect != UINT64_MAX && kv->v.arr.n != n_expect)
        return tl_error_set(TL_ERR_FORMAT,
                            "tokenizer: %s has %llu entries but the vocabulary has %llu",
                            key, (unsigned long long)kv->v.arr.n,
                            (unsigned long long)n_expect);
    if (kv->v.arr.n && !kv->v.arr.data)
        return tl_error_set(TL_ERR_FORMAT, "tokenizer: %s has no data", key);
    *out = kv;
    return TL_OK;
}

/* "<0xXX>" -> XX, else -1. */
static int parse_byte_token(const char *s, size_t len)
{
    if (len != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>')
        return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0'
              : c >= 'A' && c <= 'F' ? c - 'A' + 10
              : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    return v;
}

/* Writes token id's decoded piece to out; returns its length (<= max(len, 3)). */
static size_t make_piece(const tl_tokenizer *tok, int32_t id, char *out)
{
    const char *s = tok->text_pool + tok->text_off[id];
    size_t len = tok->text_len[id], n = 0;
    switch (tok->types[id]) {
    case TL_TOKTYPE_CONTROL:
    case TL_TOKTYPE_UNUSED:
        return 0;
    case TL_TOKTYPE_USER_DEFINED:
        memcpy(out, s, len);
        return len;
    case TL_TOKTYPE_UNKNOWN:
        if (tok->kind == TL_TOK_SPM) { /* llama.cpp shows <unk> as U+2585 */
            memcpy(out, "\xE2\x96\x85", 3);
            return 3;
        }
        memcpy(out, s, len);
        return len;
    case TL_TOKTYPE_BYTE: {
        int b = parse_byte_token(s, len);
        if (b >= 0) {
            out[0] = (char)b;
            return 1;
        }
        break; /* not <0xXX>: decode as a normal token */
    }
    default:
        break;
    }
    if (tok->kind == TL_TOK_SPM) {
        for (size_t i = 0; i < len;) {
            if (i + 3 <= len && memcmp(s + i, "\xE2\x96\x81", 3) == 0) {
                out[n++] = ' ';
                i += 3;
            } else {
                out[n++] = s[i++];
            }
        }
        return n;
    }
    /* gpt2: each code point of the byte alphabet stands for one byte; anything else
     * (or invalid UTF-8) is copied unchanged */
    for (size_t i = 0; i < len;) {
        uint32_t cpt;
        size_t l = tl_utf8_decode((const unsigned char *)s + i, len - i, &cpt);
        int b = l ? tl__bpe_cpt_to_byte(cpt) : -1;
        if (b >= 0) {
            out[n++] = (char)b;
        } else {
            if (!l)
                l = 1;
            memcpy(out + n, s + i, l);
            n += l;
        }
        i += l;
    }
    return n;
}

static tl_status load_vocab(const tl_gguf *g, tl_tokenizer *tok)
{
    const tl_gguf_kv *kv;
    tl_status st = get_array(g, KEY_TOKENS, 1, TL_GGUF_STRING, TL_GGUF_STRING, UINT64_MAX, &kv);
    if (st)
        return st;
    uint64_t n = kv->v.arr.n;
    if (n == 0)
        return tl_error_set(TL_ERR_FORMAT, "tokenizer: %s is empty", KEY_TOKENS);
    if (n > (uint64_t)INT32_MAX / 2)
        return tl_error_set(TL_ERR_FORMAT, "tokenizer: %s has %llu entries (too many)",
                            KEY_TOKENS, (unsigned long long)n);
    tok->n_vocab = (int32_t)n;
    const tl_gguf_str *strs = kv->v.arr.data;

    size_t total = 0, piece_total = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (strs[i].len > UINT32_MAX / 2 || (strs[i].len && !strs[i].s))
            return tl_error_set(TL_ERR_FORMAT, "tokenizer: token %llu of %s is malformed",
                                (unsigned long long)i, KEY_TOKENS);
        total += (size_t)strs[i].len;
        piece_total += strs[i].len > 3 ? (size_t)strs[i].len : 3;
    }
    tok->text_pool = malloc(total + 1);
    tok->text_off = malloc(n * sizeof(*tok->text_off));
    tok->text_len = malloc(n * sizeof(*tok->text_len));
    tok->scores = calloc(n, sizeof(*tok->scores));
    tok->types = malloc(n * sizeof(*tok->types));
    tok->piece_pool = malloc(piece_total + 1);
    tok->piece_off = malloc(n * sizeof(*tok->piece_off));
    tok->piece_len = malloc(n * sizeof(*tok->piece_len));
    if (!tok->text_pool || !tok->text_off || !tok->text_len || !tok->scores || !tok->types ||
        !tok->piece_pool || !tok->piece_off || !tok->piece_len)
        return tl_error_set(TL_ERR_NOMEM, "tokenizer: out of memory for %llu tokens",
                            (unsigned long long)n);
    size_t off = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (strs[i].len)
            memcpy(tok->text_pool + off, strs[i].s, (size_t)strs[i].len);
        tok->text_off[i] = off;
        tok->text_len[i] = (uint32_t)strs[i].len;
        off += (size_t)strs[i].len;
    }

    if ((st = get_array(g, KEY_SCORES, 0, TL_GGUF_FLOAT32, TL_GGUF_FLOAT32, n, &kv)))
        return st;
    if (kv) {
        memcpy(tok->scores, kv->v.arr.data, n * sizeof(float));
        for (uint64_t i = 0; i < n; i++)
            if (isnan(tok->scores[i])) /* keep the merge order a total order */
                tok->scores[i] = -INFINITY;
    }

    if ((st = get_array(g, KEY_TYPES, 0, TL_GGUF_INT32, TL_GGUF_UINT32, n, &kv)))
        return st;
    if (kv)
        memcpy(tok->types, kv->v.arr.data, n * sizeof(int32_t));
    else
        for (uint64_t i = 0; i < n; i++)
            tok->types[i] = TL_TOKTYPE_NORMAL;

    if ((st = tl__strmap_init(&tok->vocab, n)))
        return st;
    for (uint64_t i = 0; i < n; i++)
        if (tok->text_len[i]) /* an empty text can never be looked up */
            tl__strmap_put(&tok->vocab, tok->text_pool + tok->text_off[i], tok->text_len[i],
                           tok->text_len[i], (int32_t)i, 1);
    return TL_OK;
}

static tl_status load_merges(const tl_gguf *g, tl_tokenizer *tok)
{
    const tl_gguf_kv *kv;
    tl_status st = get_array(g, KEY_MERGES, 1, TL_GGUF_STRING, TL_GGUF_STRING, UINT64_MAX, &kv);
    if (st)
        return st;
    uint64_t n = kv->v.arr.n;
    if (n > (uint64_t)INT32_MAX / 2)
        return tl_error_set(TL_ERR_FORMAT, "tokenizer: %s has %llu entries (too many)",
                            KEY_MERGES, (unsigned long long)n);
    const tl_gguf_str *strs = kv->v.arr.data;
    size_t total = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (strs[i].len > UINT32_MAX / 2 || (strs[i].len && !strs[i].s))
            return tl_error_set(TL_ERR_FORMAT, "tokenizer: merge %llu of %s is malformed",
                                (unsigned long long)i, KEY_MERGES);
        total += (size_t)strs[i].len;
    }
    tok->merge_pool = malloc(total + 1);
    if (!tok->merge_pool)
        return tl_error_set(TL_ERR_NOMEM, "tokenizer: out of memory for %llu merges",
                            (unsigned long long)n);
    if ((st = tl__strmap_init(&tok->merges, (size_t)n)))
        return st;
    size_t off = 0;
    for (uint64_t i = 0; i < n; i++) {
        size_t len = (size_t)strs[i].len;
        /* "left right", split at the first space after the first byte (llama.cpp);
         * an entry without one can never match and is skipped */
        const char *sp = len > 1 ? memchr(strs[i].s + 1, ' ', len - 1) : NULL;
        if (!sp)
            continue;
        char *key = tok->merge_pool + off;
        memcpy(key, strs[i].s, len);
        off += len;
        tl__strmap_put(&tok->merges, key, (uint32_t)len, (uint32_t)(sp - strs[i].s),
                       (int32_t)i, 0);
    }
    return TL_OK;
}

/* The pre-tokenizer of a gpt2 vocabulary. A missing or empty key keeps the GPT-2 rules
 * this loader always used (llama.cpp takes "default" there, with a warning that the
 * file should be regenerated). */
static tl_status read_pre(const tl_gguf *g, unsigned flags, tl_tokenizer *tok)
{
    const tl_gguf_kv *kv = tl_gguf_find(g, KEY_PRE);
    tok->pre = TL_PRETOK_GPT2;
    if (!kv)
        return TL_OK;
    if (kv->type != TL_GGUF_STRING || (kv->v.str.len && !kv->v.str.s))
        return tl_error_set(TL_ERR_FORMAT, "tokenizer: %s has type %s, expected a string",
                            KEY_PRE, tl_gguf_type_name(kv->type));
    if (kv->v.str.len == 0)
        return TL_OK;
    if (tl__pretok_from_name(kv->v.str.s, (size_t)kv->v.str.len, &tok->pre) != 0) {
        if (!(flags & TL_TOKENIZER_UNKNOWN_PRE_AS_DEFAULT))
            return tl_error_set(TL_ERR_UNSUPPORTED,
                                "tokenizer: %s '%.*s' is not a known pre-tokenizer (known: "
                                "default, gpt-2, llama-bpe, qwen2, deepseek-llm, "
                                "deepseek-coder, falcon, mpt, starcoder, refact)",
                                KEY_PRE, (int)(kv->v.str.len > 60 ? 60 : kv->v.str.len),
                                kv->v.str.s);
        tok->pre = TL_PRETOK_DEFAULT;
    }
    tok->ignore_merges = tok->pre == TL_PRETOK_LLAMA3; /* as llama.cpp sets it */
    return TL_OK;
}

static int token_is(const tl_tokenizer *tok, int32_t id, const char *s)
{
    size_t len = tok->text_len[id];
    return len == strlen(s) && memcmp(tok->text_pool + tok->text_off[id], s, len) == 0;
}

/* Whether s[0..n) contains needle (lowercase ASCII), ignoring ASCII case. */
static int contains_nocase(const char *s, size_t n, const char *needle)
{
    size_t m = strlen(needle);
    for (size_t i = 0; i + m <= n; i++) {
        size_t k = 0;
        for (; k < m; k++) {
            char c = s[i + k];
            if ((c >= 'A' && c <= 'Z' ? (char)(c + 32) : c) != needle[k])
                break;
        }
        if (k == m)
            return 1;
    }
    return 0;
}

/* llama.cpp strips the whitespace after most special tokens of a model whose
 * general.name, lowercased, contains "phi-3" or "phi3" (see collect_specials). */
static int is_phi3(const tl_gguf *g)
{
    const tl_gguf_kv *kv = tl_gguf_find(g, "general.name");
    if (!kv || kv->type != TL_GGUF_STRING || !kv->v.str.s)
        return 0;
    size_t n = (size_t)kv->v.str.len;
    return contains_nocase(kv->v.str.s, n, "phi-3") || contains_nocase(kv->v.str.s, n, "phi3");
}

static int special_cmp(const void *a, const void *b)
{
    const tl__special *x = a, *y = b;
    if (x->len != y->len)
        return x->len > y->len ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* The tokens cut out of prompts: USER_DEFINED, CONTROL and UNKNOWN ones with a
 * non-empty text (llama.cpp's cache_special_tokens). For phi-3 all of them, and </s>,
 * strip the whitespace that follows them, except <unk>, <s> and <|endoftext|>. */
static tl_status collect_specials(const tl_gguf *g, tl_tokenizer *tok)
{
    size_t n = 0;
    for (int32_t i = 0; i < tok->n_vocab; i++) {
        int32_t t = tok->types[i];
        n += (t == TL_TOKTYPE_USER_DEFINED || t == TL_TOKTYPE_CONTROL ||
              t == TL_TOKTYPE_UNKNOWN) && tok->text_len[i] > 0;
    }
    if (!n)
        return TL_OK;
    tok->specials = malloc(n * sizeof(*tok->specials));
    if (!tok->specials)
        return tl_error_set(TL_ERR_NOMEM, "tokenizer: out of memory for %zu special tokens", n);
    int phi3 = is_phi3(g);
    for (int32_t i = 0; i < tok->n_vocab; i++) {
        int32_t t = tok->types[i];
        if (!((t == TL_TOKTYPE_USER_DEFINED || t == TL_TOKTYPE_CONTROL ||
               t == TL_TOKTYPE_UNKNOWN) && tok->text_len[i] > 0))
            continue;
        tl__special *sp = &tok->specials[tok->n_special++];
        sp->id = i;
        sp->len = tok->text_len[i];
        sp->always = t == TL_TOKTYPE_USER_DEFINED;
        sp->rstrip = phi3 && !token_is(tok, i, "<unk>") && !token_is(tok, i, "<s>") &&
                     !token_is(tok, i, "<|endoftext|>");
    }
    qsort(tok->specials, tok->n_special, sizeof(*tok->specials), special_cmp);
    return TL_OK;
}

tl_status tl_tokenizer_from_gguf(const tl_gguf *g, tl_tokenizer **out)
{
    return tl_tokenizer_from_gguf_flags(g, 0, out);
}

tl_status tl_tokenizer_from_gguf_flags(const tl_gguf *g, unsigned flags, tl_tokenizer **out)
{
    if (!out)
        return tl_error_set(TL_ERR_INVALID, "tl_tokenizer_from_gguf: out is NULL");
    *out = NULL;
    if (!g)
        return tl_error_set(TL_ERR_INVALID, "tl_tokenizer_from_gguf: gguf is NULL");

    const tl_gguf_kv *model = tl_gguf_find(g, KEY_MODEL);
    if (!model)
        return tl_error_set(TL_ERR_FORMAT, "tokenizer: missing key %s", KEY_MODEL);
    if (model->type != TL_GGUF_STRING || !model->v.str.s)
        return tl_error_set(TL_ERR_FORMAT, "tokenizer: %s has type %s, expected a string",
                            KEY_MODEL, tl_gguf_type_name(model->type));
    tl_tok_kind kind;
    if (model->v.str.len == 5 && memcmp(model->v.str.s, "llama", 5) == 0)
        kind = TL_TOK_SPM;
    else if (model->v.str.len == 4 && memcmp(model->v.str.s, "gpt2", 4) == 0)
        kind = TL_TOK_BPE;
    else
        return tl_error_set(TL_ERR_UNSUPPORTED,
                            "tokenizer: %s '%.40s' is not supported (only llama and gpt2)",
                            KEY_MODEL, model->v.str.s);

    tl_tokenizer *tok = calloc(1, sizeof(*tok));
    if (!tok)
        return tl_error_set(TL_ERR_NOMEM, "tokenizer: out of memory");
    tok->kind = kind;
    tl_status st = load_vocab(g, tok);
    if (!st && kind == TL_TOK_BPE)
        st = load_merges(g, tok);
    if (!st && kind == TL_TOK_BPE)
        st = read_pre(g, flags, tok);
    int spm = kind == TL_TOK_SPM;
    /* llama.cpp's defaults: spm <s>=1, </s>=2, <unk>=0; gpt2 has none */
    if (!st)
        st = read_id(g, "tokenizer.ggml.bos_token_id", tok->n_vocab, spm ? 1 : -1, &tok->bos);
    if (!st)
        st = read_id(g, "tokenizer.ggml.eos_token_id", tok->n_vocab, spm ? 2 : -1, &tok->eos);
    if (!st)
        st = read_id(g, "tokenizer.ggml.unknown_token_id", tok->n_vocab, spm ? 0 : -1,
                     &tok->unk);
    if (!st)
        st = read_flag(g, "tokenizer.ggml.add_bos_token",
                       spm || tok->pre == TL_PRETOK_LLAMA3, &tok->add_bos);
    if (!st)
        st = read_flag(g, "tokenizer.ggml.add_space_prefix", 1, &tok->add_space_prefix);
    if (!st)
        st = collect_specials(g, tok);
    if (st) {
        tl_tokenizer_free(tok);
        return st;
    }

    for (int b = 0; b < 256; b++) {
        char name[8];
        static const char hex[] = "0123456789ABCDEF";
        memcpy(name, "<0x", 3);
        name[3] = hex[b >> 4];
        name[4] = hex[b & 15];
        name[5] = '>';
        tok->byte_token[b] = spm ? tl__strmap_find(&tok->vocab, name, 6, NULL, 0, -1) : -1;
    }

    size_t off = 0;
    for (int32_t i = 0; i < tok->n_vocab; i++) {
        tok->piece_off[i] = off;
        tok->piece_len[i] = (uint32_t)make_piece(tok, i, tok->piece_pool + off);
        off += tok->piece_len[i];
    }
    *out = tok;
    return TL_OK;
}

void tl_tokenizer_free(tl_tokenizer *tok)
{
    if (!tok)
        return;
    tl__strmap_free(&tok->vocab);
    tl__strmap_free(&tok->merges);
    free(tok->merge_pool);
    free(tok->text_pool);
    free(tok->text_off);
    free(tok->text_len);
    free(tok->piece_pool);
    free(tok->piece_off);
    free(tok->piece_len);
    free(tok->scores);
    free(tok->types);
    free(tok->specials);
    free(tok);
}

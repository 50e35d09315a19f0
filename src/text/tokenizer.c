/* tokenizer.c - encoding text to token ids and looking up a token's decoded piece.
 *
 * The text is first split around the special tokens (user-defined ones always, control
 * and unknown ones with TL_ENCODE_PARSE_SPECIAL), then each raw fragment goes to the
 * model's encoder (tokenizer_spm.c, tokenizer_bpe.c). Loading is in tokenizer_load.c,
 * the UTF-8 output stream in utf8_stream.c.
 */
#include "text/tokenizer_impl.h"

#include <stdlib.h>
#include <string.h>

#include "base/status.h"

tl_status tl__ids_push(tl__ids *ids, int32_t id)
{
    if (ids->n == ids->cap) {
        size_t cap = ids->cap ? ids->cap * 2 : 64;
        int32_t *v = realloc(ids->v, cap * sizeof(*v));
        if (!v)
            return tl_error_set(TL_ERR_NOMEM, "tokenizer: out of memory for %zu ids", cap);
        ids->v = v;
        ids->cap = cap;
    }
    ids->v[ids->n++] = id;
    return TL_OK;
}

int32_t tl_tokenizer_n_vocab(const tl_tokenizer *tok) { return tok->n_vocab; }
int32_t tl_tokenizer_bos(const tl_tokenizer *tok) { return tok->bos; }
int32_t tl_tokenizer_eos(const tl_tokenizer *tok) { return tok->eos; }
int tl_tokenizer_add_bos_default(const tl_tokenizer *tok) { return tok->add_bos; }

/* ---- encode / decode -------------------------------------------------------------- */

typedef struct frag {
    size_t off, len;
    int32_t id; /* >= 0: a special token; -1: raw text */
} frag;

typedef struct frags {
    frag *v;
    size_t n, cap;
} frags;

static tl_status frag_push(frags *f, size_t off, size_t len, int32_t id)
{
    if (id < 0 && len == 0)
        return TL_OK;
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 16;
        frag *v = realloc(f->v, cap * sizeof(*v));
        if (!v)
            return tl_error_set(TL_ERR_NOMEM, "tokenizer: out of memory");
        f->v = v;
        f->cap = cap;
    }
    f->v[f->n++] = (frag){off, len, id};
    return TL_OK;
}

static int is_ascii_space(char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r'); /* isspace() in the C locale */
}

static tl_status encode_raw(const tl_tokenizer *tok, const char *text, size_t len,
                            int prev_special, tl__ids *out)
{
    return tok->kind == TL_TOK_SPM
               ? tl__spm_encode(tok, text, len, tok->add_space_prefix && prev_special, out)
               : tl__bpe_encode(tok, text, len, out);
}

/* Splits text around the special tokens that apply (longest first, each over what the
 * longer ones left raw, occurrences left to right, as llama.cpp's
 * tokenizer_st_partition), then runs the model on each raw fragment. For spm a raw
 * fragment gets the space prefix when it starts the text or follows a special token. */
static tl_status encode_text(const tl_tokenizer *tok, const char *text, size_t len,
                             int parse_special, tl__ids *out)
{
    frags cur = {0}, next = {0};
    tl_status st = frag_push(&cur, 0, len, -1);
    for (size_t u = 0; u < tok->n_special && !st; u++) {
        const tl__special *sp = &tok->specials[u];
        if (!sp->always && !parse_special)
            continue;
        const char *t = tok->text_pool + tok->text_off[sp->id];
        size_t tl = tok->text_len[sp->id];
        next.n = 0;
        for (size_t i = 0; i < cur.n && !st; i++) {
            frag f = cur.v[i];
            if (f.id >= 0) {
                st = frag_push(&next, f.off, f.len, f.id);
                continue;
            }
            size_t pos = f.off, end = f.off + f.len;
            while (!st && pos < end) {
                const char *hit = memmem(text + pos, end - pos, t, tl);
                if (!hit)
                    break;
                size_t h = (size_t)(hit - text);
                st = frag_push(&next, pos, h - pos, -1);
                if (!st)
                    st = frag_push(&next, h, tl, sp->id);
                pos = h + tl;
                while (sp->rstrip && pos < end && is_ascii_space(text[pos]))
                    pos++;
            }
            if (!st)
                st = frag_push(&next, pos, end - pos, -1);
        }
        frags tmp = cur;
        cur = next;
        next = tmp;
    }
    int prev_special = 1;
    for (size_t i = 0; i < cur.n && !st; i++) {
        const frag *f = &cur.v[i];
        if (f->id >= 0) {
            st = tl__ids_push(out, f->id);
            prev_special = 1;
            continue;
        }
        st = encode_raw(tok, text + f->off, f->len, prev_special, out);
        prev_special = 0;
    }
    free(cur.v);
    free(next.v);
    return st;
}

tl_status tl_tokenizer_encode_flags(const tl_tokenizer *tok, const char *text, size_t len,
                                    unsigned flags, int32_t *ids, size_t cap, size_t *n_out)
{
    if (n_out)
        *n_out = 0;
    if (!tok || !n_out || (!text && len) || (!ids && cap))
        return tl_error_set(TL_ERR_INVALID, "tl_tokenizer_encode: NULL argument");
    tl__ids v = {0};
    tl_status st = TL_OK;
    if ((flags & TL_ENCODE_ADD_BOS) && tok->bos >= 0)
        st = tl__ids_push(&v, tok->bos);
    if (!st && len)
        st = encode_text(tok, text, len, (flags & TL_ENCODE_PARSE_SPECIAL) != 0, &v);
    if (!st) {
        *n_out = v.n;
        if (v.n && cap)
            memcpy(ids, v.v, (v.n < cap ? v.n : cap) * sizeof(int32_t));
        if (cap < v.n)
            st = tl_error_set(TL_ERR_INVALID,
                              "tokenizer: the text needs %zu tokens, the buffer holds %zu", v.n,
                              cap);
    }
    free(v.v);
    return st;
}

tl_status tl_tokenizer_encode(const tl_tokenizer *tok, const char *text, size_t len,
                              int add_bos, int32_t *ids, size_t cap, size_t *n_out)
{
    return tl_tokenizer_encode_flags(tok, text, len, add_bos ? TL_ENCODE_ADD_BOS : 0u, ids,
                                     cap, n_out);
}

tl_status tl_tokenizer_piece(const tl_tokenizer *tok, int32_t id, const char **bytes,
                             size_t *len)
{
    if (!tok || !bytes || !len)
        return tl_error_set(TL_ERR_INVALID, "tl_tokenizer_piece: NULL argument");
    if (id < 0 || id >= tok->n_vocab)
        return tl_error_set(TL_ERR_INVALID, "tokenizer: token id %d is out of range [0, %d)",
                            (int)id, (int)tok->n_vocab);
    *bytes = tok->piece_pool + tok->piece_off[id];
    *len = tok->piece_len[id];
    return TL_OK;
}

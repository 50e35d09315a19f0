/* tokenizer_spm.c - SentencePiece-style BPE over token scores, as llama.cpp's
 * llm_tokenizer_spm: spaces become U+2581 (with one prepended when asked),
 * the text splits into UTF-8 characters (by lead byte, so invalid bytes stand alone),
 * then the adjacent pair whose concatenation is the highest-scoring vocabulary token is
 * merged (ties: leftmost first) until no pair is in the vocabulary. A final symbol that
 * is not a token falls back to <0xXX> byte tokens (or <unk> if the vocabulary lacks one).
 *
 * Symbols form a doubly linked list over the escaped text; a merged-away symbol has
 * n == 0. Heap entries are validated lazily when popped: symbols only grow, so an entry
 * is current iff both symbols still have the lengths it was made from.
 */
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "text/tokenizer_impl.h"
#include "text/unicode.h"

typedef struct spm_sym {
    int32_t prev, next;
    uint32_t off, n;
} spm_sym;

typedef struct spm_state {
    const tl_tokenizer *tok;
    const char *text;
    spm_sym *sym;
    tl__bigram_heap heap;
} spm_state;

static tl_status try_bigram(spm_state *s, int32_t left, int32_t right)
{
    if (left < 0 || right < 0)
        return TL_OK;
    const spm_sym *l = &s->sym[left], *r = &s->sym[right];
    uint32_t size = l->n + r->n;
    int32_t id = tl__strmap_find(&s->tok->vocab, s->text + l->off, size, NULL, 0, -1);
    if (id < 0)
        return TL_OK;
    tl__bigram bg = {-s->tok->scores[id], left, right, size};
    return tl__bigram_push(&s->heap, bg);
}

static tl_status emit(const spm_state *s, const spm_sym *sym, tl__ids *out)
{
    const tl_tokenizer *tok = s->tok;
    int32_t id = tl__strmap_find(&tok->vocab, s->text + sym->off, sym->n, NULL, 0, -1);
    if (id >= 0)
        return tl__ids_push(out, id);
    for (uint32_t j = 0; j < sym->n; j++) {
        id = tok->byte_token[(unsigned char)s->text[sym->off + j]];
        if (id < 0)
            id = tok->unk;
        if (id >= 0) {
            tl_status st = tl__ids_push(out, id);
            if (st)
                return st;
        }
    }
    return TL_OK;
}

tl_status tl__spm_encode(const tl_tokenizer *tok, const char *text, size_t len, int prefix,
                         tl__ids *out)
{
    /* escape: ' ' -> U+2581 (3 bytes), with an optional leading one */
    size_t n_spaces = 0;
    for (size_t i = 0; i < len; i++)
        n_spaces += text[i] == ' ';
    if (len > (UINT32_MAX - 8) / 3)
        return tl_error_set(TL_ERR_INVALID, "tokenizer: text of %zu bytes is too long", len);
    size_t elen = len + 2 * n_spaces + (prefix ? 3 : 0);
    spm_state s = {tok, NULL, NULL, {NULL, 0, 0}};
    char *esc = malloc(elen + 1);
    s.sym = malloc((elen + 1) * sizeof(*s.sym));
    tl_status st = TL_OK;
    if (!esc || !s.sym) {
        st = tl_error_set(TL_ERR_NOMEM, "tokenizer: out of memory for %zu bytes of text", len);
        goto done;
    }
    size_t e = 0;
    if (prefix) {
        memcpy(esc, "\xE2\x96\x81", 3);
        e = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(esc + e, "\xE2\x96\x81", 3);
            e += 3;
        } else {
            esc[e++] = text[i];
        }
    }
    s.text = esc;

    int32_t n_sym = 0;
    for (size_t off = 0; off < elen;) {
        /* llama.cpp takes the length the lead byte announces; stopping early at a
         * byte that is not a continuation changes nothing for valid UTF-8 but keeps a
         * truncated sequence from swallowing the next character (an escaped space) */
        size_t want = tl_utf8_lead_len((unsigned char)esc[off]), l = 1;
        while (l < want && off + l < elen && ((unsigned char)esc[off + l] & 0xC0) == 0x80)
            l++;
        spm_sym *y = &s.sym[n_sym];
        y->off = (uint32_t)off;
        y->n = (uint32_t)l;
        y->prev = n_sym - 1;
        off += l;
        y->next = off == elen ? -1 : n_sym + 1;
        n_sym++;
    }
    for (int32_t i = 1; i < n_sym && !st; i++)
        st = try_bigram(&s, i - 1, i);

    while (!st && s.heap.n) {
        tl__bigram bg = tl__bigram_pop(&s.heap);
        spm_sym *l = &s.sym[bg.left], *r = &s.sym[bg.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != bg.size)
            continue; /* stale */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0)
            s.sym[r->next].prev = bg.left;
        st = try_bigram(&s, l->prev, bg.left);
        if (!st)
            st = try_bigram(&s, bg.left, l->next);
    }
    for (int32_t i = 0; !st && n_sym > 0 && i != -1; i = s.sym[i].next)
        st = emit(&s, &s.sym[i], out);
done:
    free(esc);
    free(s.sym);
    free(s.heap.v);
    return st;
}

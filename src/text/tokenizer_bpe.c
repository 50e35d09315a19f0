/* tokenizer_bpe.c - byte-level BPE, as llama.cpp's llm_tokenizer_bpe.
 *
 * 1. Cut the text into words by the vocabulary's pre-tokenizer (pretokenize.c), over
 *    code points. A byte that is not valid UTF-8 is one unit that reads as U+FFFD (as
 *    llama.cpp decodes it) but keeps its own byte, so every input byte is encoded.
 * 2. Write each word's bytes in the GPT-2 byte alphabet (each byte one code point).
 * 3. With ignore_merges (Llama 3) a word that is itself a token is that token. Otherwise
 *    start from one symbol per byte and merge the adjacent pair with the lowest merge
 *    rank (ties: leftmost) until no pair is in the merges list.
 * 4. Emit each symbol's token; a symbol that is not a token (only with an inconsistent
 *    vocabulary) emits its characters' tokens, or <unk>.
 */
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "text/pretokenize.h"
#include "text/tokenizer_impl.h"
#include "text/unicode.h"

/* ---- GPT-2 byte alphabet ------------------------------------------------------------ */

/* Printable bytes (0x21-0x7E, 0xA1-0xAC, 0xAE-0xFF) stand for themselves; the 68 others
 * map in order to U+0100..U+0143. */
uint32_t tl__bpe_byte_to_cpt(unsigned char b)
{
    if (b <= 0x20)
        return 0x100u + b;
    if (b >= 0x7F && b <= 0xA0)
        return 0x100u + 33 + (b - 0x7Fu);
    if (b == 0xAD)
        return 0x100u + 67;
    return b;
}

int tl__bpe_cpt_to_byte(uint32_t cpt)
{
    if ((cpt >= 0x21 && cpt <= 0x7E) || (cpt >= 0xA1 && cpt <= 0xAC) ||
        (cpt >= 0xAE && cpt <= 0xFF))
        return (int)cpt;
    if (cpt >= 0x100 && cpt <= 0x120)
        return (int)(cpt - 0x100);
    if (cpt >= 0x121 && cpt <= 0x142)
        return (int)(cpt - 0x121 + 0x7F);
    if (cpt == 0x143)
        return 0xAD;
    return -1;
}

/* ---- merging ------------------------------------------------------------------------ */

typedef struct bpe_sym {
    int32_t prev, next;
    uint32_t off, n; /* in the encoded word */
} bpe_sym;

typedef struct bpe_state {
    const tl_tokenizer *tok;
    const char *text;
    /* per code point unit of the text */
    uint32_t *u_off;
    uint32_t *u_cpt;
    size_t n_units;
    uint32_t *word_end; /* per word: its end, in units */
    /* per word, reused */
    char *enc;
    bpe_sym *sym;
    tl__bigram_heap heap;
    tl__ids *out;
} bpe_state;

static tl_status try_bigram(bpe_state *s, int32_t left, int32_t right)
{
    if (left < 0 || right < 0)
        return TL_OK;
    const bpe_sym *l = &s->sym[left], *r = &s->sym[right];
    int32_t rank = tl__strmap_find(&s->tok->merges, s->enc + l->off, l->n, s->enc + r->off,
                                   r->n, ' ');
    if (rank < 0)
        return TL_OK;
    tl__bigram bg = {(float)rank, left, right, l->n + r->n};
    return tl__bigram_push(&s->heap, bg);
}

static tl_status emit_symbol(bpe_state *s, const bpe_sym *y)
{
    const tl_tokenizer *tok = s->tok;
    const char *p = s->enc + y->off;
    int32_t id = tl__strmap_find(&tok->vocab, p, y->n, NULL, 0, -1);
    if (id >= 0)
        return tl__ids_push(s->out, id);
    for (uint32_t j = 0; j < y->n;) {
        size_t l = tl_utf8_lead_len((unsigned char)p[j]);
        if (l > y->n - j)
            l = y->n - j;
        id = tl__strmap_find(&tok->vocab, p + j, l, NULL, 0, -1);
        if (id < 0)
            id = tok->unk;
        if (id >= 0) {
            tl_status st = tl__ids_push(s->out, id);
            if (st)
                return st;
        }
        j += (uint32_t)l;
    }
    return TL_OK;
}

/* Encodes the word made of units [u0, u1). */
static tl_status bpe_word(bpe_state *s, size_t u0, size_t u1)
{
    size_t b0 = s->u_off[u0], b1 = s->u_off[u1]; /* u_off has n_units + 1 entries */
    size_t e = 0;
    int32_t n_sym = 0;
    for (size_t i = b0; i < b1; i++) {
        size_t l = tl_utf8_encode(tl__bpe_byte_to_cpt((unsigned char)s->text[i]), s->enc + e);
        bpe_sym *y = &s->sym[n_sym];
        y->off = (uint32_t)e;
        y->n = (uint32_t)l;
        y->prev = n_sym - 1;
        y->next = i + 1 == b1 ? -1 : n_sym + 1;
        e += l;
        n_sym++;
    }
    if (s->tok->ignore_merges) {
        int32_t id = tl__strmap_find(&s->tok->vocab, s->enc, e, NULL, 0, -1);
        if (id >= 0)
            return tl__ids_push(s->out, id);
    }
    tl_status st = TL_OK;
    s->heap.n = 0;
    for (int32_t i = 1; i < n_sym && !st; i++)
        st = try_bigram(s, i - 1, i);
    while (!st && s->heap.n) {
        tl__bigram bg = tl__bigram_pop(&s->heap);
        bpe_sym *l = &s->sym[bg.left], *r = &s->sym[bg.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != bg.size)
            continue; /* stale: one side has merged since */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0)
            s->sym[r->next].prev = bg.left;
        st = try_bigram(s, l->prev, bg.left);
        if (!st)
            st = try_bigram(s, bg.left, l->next);
    }
    for (int32_t i = 0; !st && n_sym > 0 && i != -1; i = s->sym[i].next)
        st = emit_symbol(s, &s->sym[i]);
    return st;
}

tl_status tl__bpe_encode(const tl_tokenizer *tok, const char *text, size_t len, tl__ids *out)
{
    if (len > UINT32_MAX / 4)
        return tl_error_set(TL_ERR_INVALID, "tokenizer: text of %zu bytes is too long", len);
    bpe_state s;
    memset(&s, 0, sizeof(s));
    s.tok = tok;
    s.text = text;
    s.out = out;
    s.u_off = malloc((len + 1) * sizeof(*s.u_off));
    s.u_cpt = malloc(len * sizeof(*s.u_cpt));
    s.word_end = malloc(len * sizeof(*s.word_end));
    s.enc = malloc(2 * len);
    s.sym = malloc(len * sizeof(*s.sym));
    tl_status st = TL_OK;
    if (!s.u_off || !s.u_cpt || !s.word_end || !s.enc || !s.sym) {
        st = tl_error_set(TL_ERR_NOMEM, "tokenizer: out of memory for %zu bytes of text", len);
        goto done;
    }
    for (size_t i = 0; i < len;) {
        uint32_t cpt;
        size_t l = tl_utf8_decode((const unsigned char *)text + i, len - i, &cpt);
        if (!l) { /* invalid byte: classed like U+FFFD, encoded as itself */
            cpt = TL_UNICODE_REPLACEMENT;
            l = 1;
        }
        s.u_off[s.n_units] = (uint32_t)i;
        s.u_cpt[s.n_units] = cpt;
        s.n_units++;
        i += l;
    }
    s.u_off[s.n_units] = (uint32_t)len;
    size_t n_words = 0;
    st = tl__pretokenize(tok->pre, s.u_cpt, s.n_units, s.word_end, &n_words);
    for (size_t w = 0, start = 0; w < n_words && !st; start = s.word_end[w++])
        st = bpe_word(&s, start, s.word_end[w]);
done:
    free(s.u_off);
    free(s.u_cpt);
    free(s.word_end);
    free(s.enc);
    free(s.sym);
    free(s.heap.v);
    return st;
}

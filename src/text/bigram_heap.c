/* bigram_heap.c - the merge queue both BPE encoders (tokenizer_spm.c, tokenizer_bpe.c)
 * pop candidate merges from: a binary min-heap on (key, left), so equal keys pop
 * leftmost first, as llama.cpp does. Stale entries are the caller's to skip.
 */
#include <stdlib.h>

#include "base/status.h"
#include "text/tokenizer_impl.h"

static int bigram_before(const tl__bigram *a, const tl__bigram *b) {
    return a->key < b->key || (a->key == b->key && a->left < b->left);
}

tl_status tl__bigram_push(tl__bigram_heap *h, tl__bigram bg) {
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        tl__bigram *v = realloc(h->v, cap * sizeof *v);
        if (!v) return tl_error_set(TL_ERR_NOMEM, "tokenizer: out of memory");
        h->v = v;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!bigram_before(&bg, &h->v[p])) break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = bg;
    return TL_OK;
}

tl__bigram tl__bigram_pop(tl__bigram_heap *h) {
    tl__bigram top = h->v[0], last = h->v[--h->n];
    size_t i = 0, n = h->n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && bigram_before(&h->v[c + 1], &h->v[c])) c++;
        if (!bigram_before(&h->v[c], &last)) break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (n) h->v[i] = last;
    return top;
}

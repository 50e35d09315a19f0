/* strmap.c - the tokenizers' string table (text/strmap.h): FNV-1a hashing, linear
 * probing over a power-of-two capacity. The table is sized once for its final entry count
 * (cap >= 2 * n), so inserting never resizes and a probe always reaches an empty slot.
 */
#include "text/strmap.h"

#include <stdlib.h>
#include <string.h>

#include "base/status.h"

uint32_t tl__strmap_hash(const char *a, size_t alen, const char *b, size_t blen, int sep)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < alen; i++)
        h = (h ^ (unsigned char)a[i]) * 16777619u;
    if (sep >= 0) {
        h = (h ^ (unsigned char)sep) * 16777619u;
        for (size_t i = 0; i < blen; i++)
            h = (h ^ (unsigned char)b[i]) * 16777619u;
    }
    return h;
}

tl_status tl__strmap_init(tl__strmap *m, size_t n)
{
    size_t cap = 16;
    while (cap < 2 * n)
        cap *= 2;
    m->slots = calloc(cap, sizeof(*m->slots));
    if (!m->slots)
        return tl_error_set(TL_ERR_NOMEM, "tokenizer: out of memory for a %zu-entry table",
                            cap);
    m->cap = cap;
    m->n = 0;
    return TL_OK;
}

void tl__strmap_free(tl__strmap *m)
{
    free(m->slots);
    m->slots = NULL;
    m->cap = m->n = 0;
}

void tl__strmap_put(tl__strmap *m, const char *key, uint32_t len, uint32_t split,
                    int32_t val, int overwrite)
{
    uint32_t h = tl__strmap_hash(key, len, NULL, 0, -1);
    size_t mask = m->cap - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        tl__strmap_entry *e = &m->slots[i];
        if (!e->key) {
            e->key = key;
            e->len = len;
            e->split = split;
            e->hash = h;
            e->val = val;
            m->n++;
            return;
        }
        if (e->hash == h && e->len == len && e->split == split &&
            memcmp(e->key, key, len) == 0) {
            if (overwrite)
                e->val = val;
            return;
        }
    }
}

int32_t tl__strmap_find(const tl__strmap *m, const char *a, size_t alen, const char *b,
                        size_t blen, int sep)
{
    if (!m->cap)
        return -1;
    uint32_t h = tl__strmap_hash(a, alen, b, blen, sep);
    size_t len = sep >= 0 ? alen + 1 + blen : alen;
    size_t split = sep >= 0 ? alen : len;
    size_t mask = m->cap - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        const tl__strmap_entry *e = &m->slots[i];
        if (!e->key)
            return -1;
        if (e->hash != h || e->len != len || e->split != split)
            continue;
        if (memcmp(e->key, a, alen) != 0)
            continue;
        if (sep >= 0 && memcmp(e->key + alen + 1, b, blen) != 0)
            continue;
        return e->val;
    }
}

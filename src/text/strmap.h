/* strmap.h - an open-addressing string table (linear probing, power-of-two capacity)
 * from byte strings to int32 values: the tokenizers' vocabulary and merges. A key is a
 * byte string; with split < len it is "left<sep>right" where the separator byte sits at
 * `split`, so a pair can be looked up without building the joined string. Keys point
 * into memory the owner keeps alive. Internal to src/text.
 */
#ifndef TL_TEXT_STRMAP_H
#define TL_TEXT_STRMAP_H

#include <stddef.h>
#include <stdint.h>
#include "tierllm.h"

typedef struct tl__strmap_entry {
    const char *key;
    uint32_t len;
    uint32_t split; /* == len when the key is not a pair */
    uint32_t hash;
    int32_t val;
} tl__strmap_entry;

typedef struct tl__strmap {
    tl__strmap_entry *slots; /* key == NULL marks an empty slot */
    size_t cap, n;
} tl__strmap;

/* Allocates a table for up to n entries (TL_ERR_NOMEM on failure). */
tl_status tl__strmap_init(tl__strmap *m, size_t n);
void tl__strmap_free(tl__strmap *m);
/* Inserts key[0..len) (a pair split at `split` if split < len). If the key exists, its
 * value is replaced only when `overwrite`. At most the n of tl__strmap_init entries:
 * the table never fills, cap >= 2 * n. */
void tl__strmap_put(tl__strmap *m, const char *key, uint32_t len, uint32_t split,
                    int32_t val, int overwrite);
uint32_t tl__strmap_hash(const char *a, size_t alen, const char *b, size_t blen, int sep);
/* Looks up the key a, or with sep >= 0 the pair a<sep>b. Returns the value or -1. */
int32_t tl__strmap_find(const tl__strmap *m, const char *a, size_t alen, const char *b,
                        size_t blen, int sep);

#endif

/* tier_mem.c - a fixed-size byte array behind the tier interface (tests, in-memory tier).
 * Invariants: size never changes; reads past the end return 0 bytes (end-of-file);
 * writes are clipped at the end (short) and a write starting at or past the end is
 * TL_ERR_NOSPACE. Concurrent calls at disjoint ranges are safe (plain memcpy). */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include "base/status.h"
#include "tier/tier.h"

typedef struct mem_tier {
    tl_tier base;
    uint8_t *data;
} mem_tier;

static tl_status mem_read_at(tl_tier *t, uint64_t offset, void *dst, size_t len,
                             size_t *done) {
    mem_tier *m = (mem_tier *)t;
    *done = 0;
    if (offset >= t->size) return TL_OK;
    uint64_t left = t->size - offset;
    size_t n = len < left ? len : (size_t)left;
    memcpy(dst, m->data + offset, n);
    *done = n;
    return TL_OK;
}

static tl_status mem_write_at(tl_tier *t, uint64_t offset, const void *src, size_t len,
                              size_t *done) {
    mem_tier *m = (mem_tier *)t;
    *done = 0;
    if (len == 0) return TL_OK;
    if (offset >= t->size)
        return tl_error_set(TL_ERR_NOSPACE,
                            "memory tier full: write at offset %" PRIu64
                            " past its size %" PRIu64,
                            offset, t->size);
    uint64_t left = t->size - offset;
    size_t n = len < left ? len : (size_t)left;
    memcpy(m->data + offset, src, n);
    *done = n;
    return TL_OK;
}

static void mem_close(tl_tier *t) {
    mem_tier *m = (mem_tier *)t;
    free(m->data);
    free(m);
}

static const tl_tier_ops mem_ops = {mem_read_at, mem_write_at, mem_close, NULL};

tl_status tl_tier_mem_open(uint64_t size, tl_tier **out) {
    *out = NULL;
    if (size > SIZE_MAX) return tl_error_set(TL_ERR_INVALID, "memory tier too large");
    mem_tier *m = calloc(1, sizeof *m);
    if (!m) return tl_error_set(TL_ERR_NOMEM, "memory tier: out of memory");
    m->data = calloc(size ? (size_t)size : 1, 1);
    if (!m->data) {
        free(m);
        return tl_error_set(TL_ERR_NOMEM, "memory tier of %" PRIu64 " bytes: out of memory",
                            size);
    }
    m->base.ops = &mem_ops;
    m->base.name = "memory";
    m->base.size = size;
    m->base.align = 1;
    m->base.fd = -1;
    m->base.writable = 1;
    *out = &m->base;
    return TL_OK;
}

uint8_t *tl_tier_mem_data(tl_tier *t) {
    return t && t->ops == &mem_ops ? ((mem_tier *)t)->data : NULL;
}

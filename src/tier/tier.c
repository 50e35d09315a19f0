/* tier.c - helpers shared by every tier: exact-length transfers over the short-transfer
 * contract of read_at/write_at, and close. A read that makes no progress before len
 * bytes is end-of-file ("truncated"); a write that makes no progress is an IO error. */
#include <inttypes.h>
#include "base/status.h"
#include "tier/tier.h"

tl_status tl_tier_read_full(tl_tier *t, uint64_t offset, void *dst, size_t len) {
    uint8_t *p = dst;
    size_t got = 0;
    while (got < len) {
        size_t done = 0;
        tl_status st = t->ops->read_at(t, offset + got, p + got, len - got, &done);
        if (st != TL_OK) return st;
        if (done == 0)
            return tl_error_set(TL_ERR_IO,
                                "%s: truncated: read of %zu bytes at offset %" PRIu64
                                " ends at %" PRIu64 " (end of data)",
                                t->name, len, offset, offset + got);
        got += done;
    }
    return TL_OK;
}

tl_status tl_tier_write_full(tl_tier *t, uint64_t offset, const void *src, size_t len) {
    const uint8_t *p = src;
    size_t put = 0;
    while (put < len) {
        size_t done = 0;
        tl_status st = t->ops->write_at(t, offset + put, p + put, len - put, &done);
        if (st != TL_OK) return st;
        if (done == 0)
            return tl_error_set(TL_ERR_IO,
                                "%s: write of %zu bytes at offset %" PRIu64
                                " made no progress at %" PRIu64,
                                t->name, len, offset, offset + put);
        put += done;
    }
    return TL_OK;
}

void tl_tier_close(tl_tier *t) {
    if (t) t->ops->close(t);
}

tl_status tl_tier_reserve(tl_tier *t, uint64_t size) {
    if (!t || !t->ops->reserve || size <= t->size) return TL_OK;
    if (!t->writable)
        return tl_error_set(TL_ERR_INVALID, "%s: tier is read-only, reserve refused", t->name);
    return t->ops->reserve(t, size);
}

/* tier_concat.c - several read-only tiers seen as one, laid end to end at given offsets
 * (a model sharded over files read as one address space).
 *
 * Part i occupies [base[i], base[i] + size_i); bases ascend and each part ends before the
 * next base. A read inside a part reads that part, clipped at the part's end rounded up
 * to its alignment (so an O_DIRECT read stays aligned; the part itself returns short at
 * its end of file); a read in the gap after a part returns zeros up to the next base;
 * past the last part is end-of-file. Offsets are translated, nothing is copied. The
 * tier's alignment is the largest of its parts', so callers honouring it honour every
 * part's whenever the bases are multiples of it (TL_TIER_MAX_ALIGN). Writes are refused.
 */
#include <stdlib.h>
#include <string.h>
#include "base/status.h"
#include "tier/tier.h"

typedef struct concat_tier {
    tl_tier base;
    size_t n;
    tl_tier **parts;
    uint64_t *at;
} concat_tier;

static tl_status concat_read_at(tl_tier *t, uint64_t offset, void *dst, size_t len,
                                size_t *done) {
    concat_tier *c = (concat_tier *)t;
    *done = 0;
    size_t lo = 0, hi = c->n; /* the last part starting at or before offset */
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (c->at[mid] <= offset) lo = mid;
        else hi = mid;
    }
    if (offset < c->at[lo] || len == 0) return TL_OK;
    tl_tier *p = c->parts[lo];
    const uint64_t rel = offset - c->at[lo];
    const uint64_t a = p->align ? p->align : 1, end = (p->size + a - 1) / a * a;
    if (rel < p->size) {
        size_t n = len < end - rel ? len : (size_t)(end - rel);
        return p->ops->read_at(p, rel, dst, n, done);
    }
    if (lo + 1 == c->n) return TL_OK; /* past the last part */
    const uint64_t gap = c->at[lo + 1] - offset;
    size_t n = len < gap ? len : (size_t)gap;
    memset(dst, 0, n);
    *done = n;
    return TL_OK;
}

static tl_status concat_write_at(tl_tier *t, uint64_t offset, const void *src, size_t len,
                                 size_t *done) {
    (void)offset, (void)src, (void)len;
    *done = 0;
    return tl_error_set(TL_ERR_IO, "%s is read-only", t->name);
}

static void concat_close(tl_tier *t) {
    concat_tier *c = (concat_tier *)t;
    for (size_t i = 0; i < c->n; i++) tl_tier_close(c->parts[i]);
    free(c->parts);
    free(c->at);
    free(c);
}

static const tl_tier_ops concat_ops = {concat_read_at, concat_write_at, concat_close, NULL};

tl_status tl_tier_concat_open(tl_tier **parts, const uint64_t *at, size_t n, const char *name,
                              tl_tier **out) {
    *out = NULL;
    tl_status st = TL_OK;
    for (size_t i = 0; i < n && !st; i++)
        if (at[i] % TL_TIER_MAX_ALIGN != 0 || (i + 1 < n && at[i] + parts[i]->size > at[i + 1]))
            st = tl_error_set(TL_ERR_INVALID, "concatenated tier: part %zu misplaced", i);
    concat_tier *c = n && !st ? calloc(1, sizeof *c) : NULL;
    if (c) {
        c->parts = malloc(n * sizeof *c->parts);
        c->at = malloc(n * sizeof *c->at);
    }
    if (!st && (!c || !c->parts || !c->at))
        st = n ? tl_error_set(TL_ERR_NOMEM, "concatenated tier: out of memory")
               : tl_error_set(TL_ERR_INVALID, "concatenated tier: no parts");
    if (st) {
        if (c) free(c->parts), free(c->at), free(c);
        for (size_t i = 0; i < n; i++) tl_tier_close(parts[i]);
        return st;
    }
    c->n = n;
    size_t align = 1;
    for (size_t i = 0; i < n; i++) {
        c->parts[i] = parts[i];
        c->at[i] = at[i];
        if (parts[i]->align > align) align = parts[i]->align;
    }
    c->base.ops = &concat_ops;
    c->base.name = name;
    c->base.size = at[n - 1] + parts[n - 1]->size;
    c->base.align = align;
    c->base.fd = n == 1 && at[0] == 0 ? parts[0]->fd : -1; /* io_uring reads one file */
    c->base.writable = 0;
    *out = &c->base;
    return TL_OK;
}

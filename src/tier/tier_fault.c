/* tier_fault.c - wraps any tier and injects faults, like SQLite's test_vfs: fail the Nth
 * call (optionally every later one, optionally writes only) with EIO or ENOSPC, clip
 * transfers to short_max bytes, sleep latency_s per call. Invariants: the call counters
 * are atomic, so concurrent callers each see a distinct call number; fd is -1 so that
 * io_uring never goes around the shim; the wrapper owns the inner tier. */
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "base/status.h"
#include "tier/tier.h"

typedef struct fault_tier {
    tl_tier base;
    tl_tier *inner;
    tl_fault_spec spec;
    size_t short_lim; /* 0 = no clipping */
    atomic_uint_fast64_t calls, write_calls;
    char name[256];
} fault_tier;

static void fault_sleep(double s) {
    if (s <= 0) return;
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Counts this call; returns a status if it is to fail. */
static tl_status fault_check(fault_tier *f, int is_write, uint64_t offset) {
    uint64_t n = atomic_fetch_add(&f->calls, 1) + 1;
    if (is_write) {
        uint64_t w = atomic_fetch_add(&f->write_calls, 1) + 1;
        if (f->spec.fail_writes_only) n = w;
    } else if (f->spec.fail_writes_only) {
        n = 0;
    }
    fault_sleep(f->spec.latency_s);
    uint64_t k = f->spec.fail_call;
    if (k == 0 || n == 0 || n < k || (n > k && !f->spec.sticky)) return TL_OK;
    int e = f->spec.fail_errno ? f->spec.fail_errno : EIO;
    tl_status st = (e == ENOSPC || e == EDQUOT) ? TL_ERR_NOSPACE : TL_ERR_IO;
    return tl_error_set(st, "%s: injected %s on %s call %" PRIu64 " at offset %" PRIu64 ": %s",
                        f->name, e == ENOSPC ? "ENOSPC" : e == EIO ? "EIO" : "error",
                        is_write ? "write" : "read", n, offset, strerror(e));
}

static size_t fault_clip(const fault_tier *f, size_t len) {
    return f->short_lim && len > f->short_lim ? f->short_lim : len;
}

static tl_status fault_read_at(tl_tier *t, uint64_t offset, void *dst, size_t len,
                               size_t *done) {
    fault_tier *f = (fault_tier *)t;
    *done = 0;
    tl_status st = fault_check(f, 0, offset);
    if (st != TL_OK) return st;
    return f->inner->ops->read_at(f->inner, offset, dst, fault_clip(f, len), done);
}

static tl_status fault_write_at(tl_tier *t, uint64_t offset, const void *src, size_t len,
                                size_t *done) {
    fault_tier *f = (fault_tier *)t;
    *done = 0;
    tl_status st = fault_check(f, 1, offset);
    if (st != TL_OK) return st;
    return f->inner->ops->write_at(f->inner, offset, src, fault_clip(f, len), done);
}

static void fault_close(tl_tier *t) {
    fault_tier *f = (fault_tier *)t;
    tl_tier_close(f->inner);
    free(f);
}

static const tl_tier_ops fault_ops = {fault_read_at, fault_write_at, fault_close, NULL};

tl_status tl_tier_fault_open(tl_tier *inner, const tl_fault_spec *spec, tl_tier **out) {
    *out = NULL;
    if (!inner || !spec) return tl_error_set(TL_ERR_INVALID, "fault tier: no inner tier");
    if (spec->fail_errno && spec->fail_errno != EIO && spec->fail_errno != ENOSPC)
        return tl_error_set(TL_ERR_INVALID, "fault tier: fail_errno must be EIO or ENOSPC");
    if (spec->latency_s < 0 || spec->latency_s > 60)
        return tl_error_set(TL_ERR_INVALID, "fault tier: latency %g s out of range",
                            spec->latency_s);
    fault_tier *f = calloc(1, sizeof *f);
    if (!f) return tl_error_set(TL_ERR_NOMEM, "fault tier: out of memory");
    f->inner = inner;
    f->spec = *spec;
    size_t a = inner->align ? inner->align : 1;
    if (spec->short_max) {
        f->short_lim = spec->short_max / a * a;
        if (f->short_lim == 0) f->short_lim = a;
    }
    atomic_init(&f->calls, 0);
    atomic_init(&f->write_calls, 0);
    snprintf(f->name, sizeof f->name, "fault(%s)", inner->name ? inner->name : "?");
    f->base.ops = &fault_ops;
    f->base.name = f->name;
    f->base.size = inner->size;
    f->base.align = a;
    f->base.fd = -1;
    f->base.writable = inner->writable;
    *out = &f->base;
    return TL_OK;
}

uint64_t tl_tier_fault_calls(const tl_tier *t) {
    if (!t || t->ops != &fault_ops) return 0;
    return atomic_load(&((fault_tier *)t)->calls);
}

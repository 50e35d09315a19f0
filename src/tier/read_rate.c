/* read_rate.c - timed reads of a tier (read_rate.h). A private queue at the requested
 * depth, so the rate is the device's for that request shape and nothing else queued in
 * this process stands in front of it; a request waited for is refilled at once, so depth
 * requests stay in flight until the end. */
#include "tier/read_rate.h"
#include "base/clock.h"
#include "base/rng.h"
#include "base/status.h"
#include "tier/aio.h"

/* Where the k-th request reads: a grid's sequential or scattered offsets, or a list's. */
typedef struct read_order {
    uint64_t chunk, span;
    int scatter;
    uint64_t *cursor, *seed;          /* grid */
    const uint64_t *offsets, *lens;   /* list (offsets non-NULL) */
    size_t n;
} read_order;

static uint64_t read_len(const read_order *o, uint64_t k) {
    return o->offsets && o->lens ? o->lens[k % o->n] : o->chunk;
}

static uint64_t next_offset(const read_order *o, uint64_t k) {
    if (o->offsets) return o->offsets[k % o->n];
    uint64_t off = *o->cursor;
    *o->cursor = (off + o->chunk) % o->span;
    if (o->scatter) off = tl_splitmix64(o->seed) % (o->span / o->chunk) * o->chunk;
    return off;
}

/* Up to nreq requests, depth in flight, request k into bufs[k % n_bufs]; *bps: the bytes
 * of the requests waited for over the seconds taken. */
static tl_status time_reads(tl_tier *t, const read_order *o, int depth, uint64_t nreq,
                            uint8_t *const *bufs, size_t n_bufs, double max_s, double *bps) {
    tl_aio_params ap = tl_aio_default_params();
    ap.chunk_bytes = (size_t)o->chunk;
    ap.queue_depth = depth;
    tl_aio *q;
    tl_status st = tl_aio_open(&ap, &q);
    if (st != TL_OK) return st;
    uint64_t sub = 0, done = 0, bytes = 0;
    double t0 = tl_now(), el = 0;
    while (done < nreq) {
        while (sub < nreq && sub - done < (uint64_t)depth) {
            st = tl_aio_read(q, t, next_offset(o, sub), bufs[sub % n_bufs],
                             (size_t)read_len(o, sub), sub);
            if (st != TL_OK) break;
            sub++;
        }
        if (st != TL_OK || (st = tl_aio_wait(q, done)) != TL_OK) break;
        bytes += read_len(o, done++);
        el = tl_now() - t0;
        if (el > max_s && done >= 4 * (uint64_t)depth) break;
    }
    tl_aio_close(q); /* after a failure: drains what is still in flight */
    if (st != TL_OK) return st;
    *bps = (double)bytes / el;
    return TL_OK;
}

tl_status tl_tier_time_reads(tl_tier *t, uint64_t chunk, int depth, uint64_t total,
                             uint64_t span, int scatter, uint64_t *cursor, uint64_t *seed,
                             uint8_t *const *bufs, double max_s, double *bps) {
    if (!t || chunk == 0 || depth <= 0 || span < chunk || total < chunk || !cursor || !seed ||
        !bufs || !bps)
        return tl_error_set(TL_ERR_INVALID, "timed reads: %llu-byte requests, depth %d, over "
                            "%llu bytes", (unsigned long long)chunk, depth,
                            (unsigned long long)span);
    read_order o = {.chunk = chunk, .span = span, .scatter = scatter, .cursor = cursor,
                    .seed = seed};
    return time_reads(t, &o, depth, total / chunk, bufs, (size_t)depth, max_s, bps);
}

tl_status tl_tier_time_read_list(tl_tier *t, const uint64_t *offsets, const uint64_t *lens,
                                 size_t n, uint64_t max_len, int depth, uint8_t *const *bufs,
                                 size_t n_bufs, double max_s, double *bps) {
    if (!t || !offsets || n == 0 || max_len == 0 || depth <= 0 || !bufs ||
        n_bufs < (size_t)depth || !bps)
        return tl_error_set(TL_ERR_INVALID, "timed reads: a list of %zu reads, depth %d, %zu "
                            "buffers", n, depth, n_bufs);
    read_order o = {.chunk = max_len, .offsets = offsets, .lens = lens, .n = n};
    return time_reads(t, &o, depth, (uint64_t)1 << 40, bufs, n_bufs, max_s, bps);
}

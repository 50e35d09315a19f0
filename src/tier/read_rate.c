/* read_rate.c - timed reads of a tier (read_rate.h). A private queue at the requested
 * depth, so the rate is the device's for that request shape and nothing else queued in
 * this process stands in front of it; a request waited for is refilled at once, so depth
 * requests stay in flight until the end. */
#include "tier/read_rate.h"
#include "base/clock.h"
#include "base/rng.h"
#include "base/status.h"
#include "tier/aio.h"

tl_status tl_tier_time_reads(tl_tier *t, uint64_t chunk, int depth, uint64_t total,
                             uint64_t span, int scatter, uint64_t *cursor, uint64_t *seed,
                             uint8_t *const *bufs, double max_s, double *bps) {
    if (!t || chunk == 0 || depth <= 0 || span < chunk || total < chunk || !cursor || !seed ||
        !bufs || !bps)
        return tl_error_set(TL_ERR_INVALID, "timed reads: %llu-byte requests, depth %d, over "
                            "%llu bytes", (unsigned long long)chunk, depth,
                            (unsigned long long)span);
    tl_aio_params ap = tl_aio_default_params();
    ap.chunk_bytes = (size_t)chunk;
    ap.queue_depth = depth;
    tl_aio *q;
    tl_status st = tl_aio_open(&ap, &q);
    if (st != TL_OK) return st;
    uint64_t nreq = total / chunk, sub = 0, done = 0;
    double t0 = tl_now(), el = 0;
    while (done < nreq) {
        while (sub < nreq && sub - done < (uint64_t)depth) {
            uint64_t off = *cursor;
            *cursor = (off + chunk) % span;
            if (scatter) off = tl_splitmix64(seed) % (span / chunk) * chunk;
            st = tl_aio_read(q, t, off, bufs[sub % (uint64_t)depth], chunk, sub);
            if (st != TL_OK) break;
            sub++;
        }
        if (st != TL_OK || (st = tl_aio_wait(q, done)) != TL_OK) break;
        done++;
        el = tl_now() - t0;
        if (el > max_s && done >= 4 * (uint64_t)depth) break;
    }
    tl_aio_close(q); /* after a failure: drains what is still in flight */
    if (st != TL_OK) return st;
    *bps = (double)(done * chunk) / el;
    return TL_OK;
}

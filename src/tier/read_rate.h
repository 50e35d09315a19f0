/* read_rate.h - what a tier's reads deliver right now: timed reads through a private IO
 * queue (default backend), in requests of a given size and depth.
 *
 * Used by the hardware profile (a scratch file over the chunk x depth grid) and by the KV
 * cache (its own spill file, read-only, between measured steps): a virtual disk's rate
 * depends on the minute and on which file, so a prediction compared with a measurement
 * should read the disk the engine reads, at the same time.
 */
#ifndef TL_TIER_READ_RATE_H
#define TL_TIER_READ_RATE_H

#include <stdint.h>
#include "tier/tier.h"

/* Reads up to `total` bytes of tier t in requests of `chunk` bytes, `depth` in flight,
 * into bufs[0 .. depth-1] (chunk bytes each, aligned for t), stopping early once max_s
 * seconds passed and at least 4 x depth requests completed. Offsets: sequential from *cursor, wrapping at
 * span (the cursor is left where reading stopped), or with scatter at random chunk-aligned
 * offsets below span drawn from *seed. *bps: the bytes read over the seconds taken. */
tl_status tl_tier_time_reads(tl_tier *t, uint64_t chunk, int depth, uint64_t total,
                             uint64_t span, int scatter, uint64_t *cursor, uint64_t *seed,
                             uint8_t *const *bufs, double max_s, double *bps);

/* The same for a list of reads: request k reads lens[k % n] bytes (max_len when lens is
 * NULL; none longer than max_len) at offsets[k % n], into bufs[k % n_bufs] (n_bufs >=
 * depth, max_len bytes each): the order, sizes and memory footprint of a reader whose
 * rate is wanted (a device's rate here depends on all three), until max_s seconds. */
tl_status tl_tier_time_read_list(tl_tier *t, const uint64_t *offsets, const uint64_t *lens,
                                 size_t n, uint64_t max_len, int depth, uint8_t *const *bufs,
                                 size_t n_bufs, double max_s, double *bps);

#endif

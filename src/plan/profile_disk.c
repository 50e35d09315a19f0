/* profile_disk.c - the disk stage of the hardware profile (profile_measure.h): what the
 * filesystem under the profile's directory delivers to the engine's IO queue.
 *
 * A scratch file of DISK_FILE_BYTES is written through the aio queue with O_DIRECT (where
 * the filesystem allows it), then read back over the chunk x depth grid (tl_prof_chunks x
 * tl_prof_depths), each setting capped at DISK_SETTING_S so a slow disk still finishes;
 * each setting reads on from where the one before stopped, wrapping at the end of the
 * file. The file has no name, so a measurement that is killed leaves nothing behind; it
 * stays open for the interference stage, which streams it again through
 * tl__profile_disk_stream, and through tl__profile_disk_urgent to time urgent reads.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "plan/profile_measure.h"
#include "base/clock.h"
#include "base/rng.h"
#include "base/status.h"
#include "tier/aio.h"
#include "tier/read_rate.h"
#include "tier/tier.h"

#define DISK_FILE_BYTES TL_PROF_DISK_FILE_BYTES
#define DISK_WRITE_REQ ((size_t)4 << 20)
#define DISK_SMALL_READ ((uint64_t)64 << 20) /* bytes read per setting, chunks < 1 MiB */
#define DISK_SETTING_S 1.0                   /* time cap per read setting */

static tl_status disk_write(tl_tier *t, const uint8_t *buf, double *bps) {
    tl_aio_params ap = tl_aio_default_params();
    ap.chunk_bytes = (size_t)1 << 20;
    ap.queue_depth = 4;
    tl_aio *q;
    tl_status st = tl_aio_open(&ap, &q);
    if (st != TL_OK) return st;
    uint64_t n = DISK_FILE_BYTES / DISK_WRITE_REQ, sub = 0;
    double t0 = tl_now();
    for (; sub < n && st == TL_OK; sub++)
        if ((st = tl_aio_write(q, t, sub * DISK_WRITE_REQ, buf, DISK_WRITE_REQ, sub)))
            break;
    for (uint64_t i = 0; i < sub && st == TL_OK; i++) st = tl_aio_wait(q, i);
    tl_aio_close(q); /* after a failure: drains what is still in flight */
    if (st != TL_OK) return st;
    if (fdatasync(t->fd) != 0)
        return tl_error_set(errno == ENOSPC || errno == EDQUOT ? TL_ERR_NOSPACE : TL_ERR_IO,
                            "fdatasync %s: %s", t->name, strerror(errno));
    *bps = (double)DISK_FILE_BYTES / (tl_now() - t0);
    return TL_OK;
}

/* One point of the read grid: sequential reads from *cursor into buf's consecutive
 * chunks. */
static tl_status read_grid_point(tl_tier *t, uint64_t chunk, int depth, uint64_t total,
                                 uint64_t *cursor, uint8_t *buf, double *bps) {
    uint64_t seed = 11; /* unused by sequential reads */
    uint8_t *bufs[64];
    if (depth > 64) return tl_error_set(TL_ERR_INVALID, "disk profile: depth %d over 64", depth);
    for (int i = 0; i < depth; i++) bufs[i] = buf + (size_t)i * chunk;
    return tl_tier_time_reads(t, chunk, depth, total, DISK_FILE_BYTES, 0, cursor, &seed, bufs,
                              DISK_SETTING_S, bps);
}

/* Streams like the engine's weights (the IO queue's default chunks at its default depth)
 * and, after every other chunk, times a batch of urgent reads (tl_aio_read_urgent) of
 * TL_PROF_URGENT_BYTES each, submitted together as a micro-batch's KV pages are: ahead of
 * the queued chunks, but behind those the device already serves. Batches alternate
 * between 1 and TL__PROF_URGENT_BATCH reads; appends their times to lat1 / latn (up to
 * cap each) until *stop is set. */
tl_status tl__profile_disk_urgent(tl_tier *t, uint8_t *bufs, atomic_int *stop, double *lat1,
                                  int *n1, double *latn, int *nn, int cap) {
    tl_aio_params ap = tl_aio_default_params();
    const uint64_t chunk = ap.chunk_bytes;
    const int depth = ap.queue_depth;
    tl_aio *q;
    tl_status st = tl_aio_open(&ap, &q);
    if (st != TL_OK) return st;
    uint64_t sub = 0, done = 0, cursor = 0, seed = 7;
    uint8_t *small = bufs + (size_t)depth * chunk;
    const uint64_t urgent_tag = UINT64_MAX - TL__PROF_URGENT_BATCH;
    while (st == TL_OK && !atomic_load_explicit(stop, memory_order_relaxed)) {
        while (sub - done < (uint64_t)depth) {
            st = tl_aio_read(q, t, cursor, bufs + (sub % (uint64_t)depth) * chunk, chunk, sub);
            if (st != TL_OK) break;
            cursor = (cursor + chunk) % DISK_FILE_BYTES;
            sub++;
        }
        if (st != TL_OK || (st = tl_aio_wait(q, done)) != TL_OK) break;
        done++;
        if (done < 2 * (uint64_t)depth || done % 2) continue;
        const int batch = done % 4 ? 1 : TL__PROF_URGENT_BATCH;
        if ((batch == 1 ? *n1 : *nn) >= cap) continue;
        double t0 = tl_now();
        int k = 0;
        for (; k < batch && st == TL_OK; k++) {
            uint64_t off = tl_splitmix64(&seed) % (DISK_FILE_BYTES / TL_PROF_URGENT_BYTES) *
                           TL_PROF_URGENT_BYTES;
            st = tl_aio_read_urgent(q, t, off, small + (size_t)k * TL_PROF_URGENT_BYTES,
                                    TL_PROF_URGENT_BYTES, urgent_tag + (uint64_t)k);
        }
        for (int i = 0; i < k; i++) {
            tl_status w = tl_aio_wait(q, urgent_tag + (uint64_t)i);
            if (st == TL_OK) st = w;
        }
        if (batch == 1) lat1[(*n1)++] = tl_now() - t0;
        else latn[(*nn)++] = tl_now() - t0;
    }
    tl_aio_close(q);
    return st;
}

uint64_t tl__profile_reader_bytes(void) {
    const tl_aio_params ap = tl_aio_default_params();
    const uint64_t urgent = (uint64_t)ap.queue_depth * ap.chunk_bytes +
                            TL__PROF_URGENT_BATCH * TL_PROF_URGENT_BYTES;
    return urgent > 2 * TL__PROF_STREAM_UNIT ? urgent : 2 * TL__PROF_STREAM_UNIT;
}

_Static_assert(DISK_FILE_BYTES >= 2 * TL__PROF_STREAM_UNIT, "the stream wraps within the file");

tl_status tl__profile_disk_stream(tl_tier *t, uint8_t *bufs, atomic_int *stop,
                                  uint64_t *bytes) {
    *bytes = 0;
    tl_aio_params ap = tl_aio_default_params();
    tl_aio *q;
    tl_status st = tl_aio_open(&ap, &q);
    if (st != TL_OK) return st;
    const uint64_t unit = TL__PROF_STREAM_UNIT, span = DISK_FILE_BYTES / unit * unit;
    uint64_t sub = 0, done = 0, cursor = 0;
    while (st == TL_OK && !atomic_load_explicit(stop, memory_order_relaxed)) {
        while (st == TL_OK && sub - done < 2) {
            st = tl_aio_read(q, t, cursor, bufs + (sub % 2) * unit, unit, sub);
            cursor = (cursor + unit) % span;
            sub += st == TL_OK;
        }
        if (st == TL_OK && (st = tl_aio_wait(q, done)) == TL_OK) done++;
    }
    tl_aio_close(q); /* waits for what is still in flight */
    *bytes = done * unit;
    return st;
}

tl_status tl__profile_measure_disk(const char *dir, tl_hw_profile *p,
                                   tl__profile_progress progress, void *user,
                                   tl_tier **keep) {
    size_t buf_bytes = (size_t)tl_prof_chunks[TL_PROF_N_CHUNK - 1] *
                       (size_t)tl_prof_depths[TL_PROF_N_DEPTH - 1];
    uint8_t *buf = aligned_alloc(TL_TIER_MAX_ALIGN, buf_bytes);
    if (!buf) return tl_error_set(TL_ERR_NOMEM, "disk profile: out of memory");
    uint64_t seed = 42;
    for (size_t i = 0; i < DISK_WRITE_REQ / 8; i++) {
        uint64_t r = tl_splitmix64(&seed);
        memcpy(buf + 8 * i, &r, 8);
    }
    /* a scratch file has no name: a measurement that is killed leaves nothing behind */
    tl_tier *file = NULL;
    tl_status st = tl_tier_file_open_scratch(dir, TL_TIER_FILE_DIRECT, &file);
    if (st == TL_OK) {
        tl__profile_say(progress, user, "disk: writing %llu MiB to %s%s",
                        (unsigned long long)(DISK_FILE_BYTES >> 20), dir,
                        tl_tier_file_is_direct(file) ? "" : " (no O_DIRECT: page cache)");
        st = disk_write(file, buf, &p->disk_write_bps);
    }
    uint64_t cursor = 0;
    for (int c = 0; c < TL_PROF_N_CHUNK && st == TL_OK; c++) {
        tl__profile_say(progress, user, "disk: reading in %llu KiB chunks at depth 1, 4, 16",
                        (unsigned long long)(tl_prof_chunks[c] >> 10));
        uint64_t total = tl_prof_chunks[c] < ((uint64_t)1 << 20) ? DISK_SMALL_READ
                                                                  : DISK_FILE_BYTES;
        for (int d = 0; d < TL_PROF_N_DEPTH && st == TL_OK; d++)
            st = read_grid_point(file, tl_prof_chunks[c], tl_prof_depths[d], total, &cursor,
                                 buf, &p->disk_read_bps[c][d]);
    }
    if (st == TL_OK && keep) *keep = file;
    else tl_tier_close(file);
    free(buf);
    if (st != TL_OK) return tl_error_wrap(st, "disk profile in %s", dir);
    return TL_OK;
}

tl_status tl_profile_write_scratch(const char *dir, uint64_t bytes, const uint8_t *buf,
                                   uint64_t step, tl_tier **out) {
    *out = NULL;
    tl_tier *file = NULL;
    tl_status st = tl_tier_file_open_scratch(dir, TL_TIER_FILE_DIRECT, &file);
    for (uint64_t off = 0; st == TL_OK && off < bytes; off += step)
        st = tl_tier_write_full(file, off, buf, (size_t)(bytes - off < step ? bytes - off : step));
    if (st == TL_OK && fdatasync(file->fd) != 0)
        st = tl_error_set(TL_ERR_IO, "fdatasync %s: %s", file->name, strerror(errno));
    if (st != TL_OK) {
        if (file) tl_tier_close(file);
        return st;
    }
    *out = file;
    return TL_OK;
}

tl_status tl_profile_time_dir_reads(const char *dir, uint64_t file_bytes, uint64_t chunk,
                                    int32_t depth, uint8_t *buf, double seconds, double *bps) {
    *bps = 0;
    if (chunk == 0 || chunk % TL_TIER_MAX_ALIGN || depth < 1 || depth > 64 ||
        file_bytes < chunk)
        return tl_error_set(TL_ERR_INVALID, "timing reads: %llu-byte chunks at depth %d over "
                            "%llu bytes", (unsigned long long)chunk, (int)depth,
                            (unsigned long long)file_bytes);
    file_bytes = file_bytes / chunk * chunk;
    tl_tier *file = NULL;
    /* written a whole buffer (depth chunks) at a time: small chunks written one by one
     * would take longer than the reads they set up */
    tl_status st = tl_profile_write_scratch(dir, file_bytes, buf, chunk * (uint64_t)depth, &file);
    uint64_t cursor = 0, seed = 43;
    uint8_t *bufs[64];
    for (int32_t i = 0; i < depth; i++) bufs[i] = buf + (size_t)i * chunk;
    if (st == TL_OK) /* at random chunk-aligned offsets, as KV pages lie in a spill file */
        st = tl_tier_time_reads(file, chunk, depth, 16 * file_bytes, file_bytes, 1, &cursor,
                                &seed, bufs, seconds, bps);
    if (file) tl_tier_close(file);
    return st;
}

#define REANCHOR_FILE_BYTES ((uint64_t)256 << 20)

tl_status tl_profile_reanchor_disk(tl_hw_profile *p, const char *dir, uint64_t chunk,
                                   int32_t depth, double *bps) {
    if (chunk == 0 || chunk % TL_TIER_MAX_ALIGN || chunk > REANCHOR_FILE_BYTES || depth <= 0 ||
        depth > 64 || !(tl_profile_read_bps(p, chunk, depth) > 0))
        return tl_error_set(TL_ERR_INVALID, "disk re-measure: %llu-byte chunks at depth %d "
                            "(chunks must be a multiple of %d, at most %llu MiB; depth 1-64)",
                            (unsigned long long)chunk, (int)depth, (int)TL_TIER_MAX_ALIGN,
                            (unsigned long long)(REANCHOR_FILE_BYTES >> 20));
    uint8_t *buf = aligned_alloc(TL_TIER_MAX_ALIGN, (size_t)chunk * (size_t)depth);
    if (!buf) return tl_error_set(TL_ERR_NOMEM, "disk re-measure: out of memory");
    uint64_t seed = 43;
    for (size_t i = 0; i + 8 <= (size_t)chunk * (size_t)depth; i += 8) { /* all of it: written */
        uint64_t r = tl_splitmix64(&seed);
        memcpy(buf + i, &r, 8);
    }
    double now = 0;
    tl_status st = tl_profile_time_dir_reads(dir, REANCHOR_FILE_BYTES, chunk, depth, buf,
                                             DISK_SETTING_S, &now);
    free(buf);
    if (st != TL_OK) return tl_error_wrap(st, "disk re-measure in %s", dir);
    st = tl_profile_set_read_bps(p, chunk, depth, now);
    if (st == TL_OK && bps) *bps = now;
    return st;
}

tl_status tl_profile_set_read_bps(tl_hw_profile *p, uint64_t chunk, int32_t depth, double bps) {
    const double before = tl_profile_read_bps(p, chunk, depth);
    if (!(before > 0) || !(bps > 0))
        return tl_error_set(TL_ERR_INVALID, "setting the disk's read rate: %g B/s against the "
                            "profile's %g", bps, before);
    const double f = bps / before;
    for (int c = 0; c < TL_PROF_N_CHUNK; c++)
        for (int d = 0; d < TL_PROF_N_DEPTH; d++) p->disk_read_bps[c][d] *= f;
    return TL_OK;
}

void tl_profile_scale_reads(tl_hw_profile *p, uint64_t chunk, int streams, double f) {
    for (int c = 0; c < TL_PROF_N_CHUNK; c++)
        if ((tl_prof_chunks[c] >= chunk) == (streams != 0))
            for (int d = 0; d < TL_PROF_N_DEPTH; d++) p->disk_read_bps[c][d] *= f;
}

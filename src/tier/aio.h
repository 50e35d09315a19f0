/* aio.h - the asynchronous IO queue every weight and KV transfer goes through.
 *
 * Shape of io_uring: submit a request (tier, offset, length, buffer, tag), keep working,
 * then wait for the tag. Requests larger than chunk_bytes are split into chunks that
 * are kept in flight in parallel (up to queue_depth at once). Two backends: a pool of
 * IO threads doing blocking pread/pwrite through the tier (always available), and
 * io_uring (liburing), used for tiers that expose an fd when a start-up probe succeeds;
 * requests on tiers without an fd (memory, fault) always take the thread pool.
 *
 * Errors: a failed chunk fails its request; tl_aio_wait returns that status and message.
 * Short transfers are continued until done. A read extending past the tier's size is
 * zero-filled beyond it (O_DIRECT reads are widened to the alignment, so the last
 * extent of a file may pass its end); a read that stops short before the end is a
 * "truncated" error. Statistics: bytes and busy seconds (time with
 * at least one request in flight), per direction.
 */
#ifndef TL_TIER_AIO_H
#define TL_TIER_AIO_H

#include <stddef.h>
#include <stdint.h>
#include "tier/tier.h"

typedef enum tl_aio_backend {
    TL_AIO_AUTO = 0,  /* io_uring if the probe succeeds, else the thread pool */
    TL_AIO_POOL = 1,
    TL_AIO_URING = 2  /* io_uring or fail at open */
} tl_aio_backend;

typedef struct tl_aio_params {
    tl_aio_backend backend;
    int queue_depth;     /* chunks in flight at once (default 8) */
    size_t chunk_bytes;  /* default 1 MiB; a multiple of TL_TIER_MAX_ALIGN */
    int n_threads;       /* IO threads of the pool backend (default queue_depth) */
} tl_aio_params;

typedef struct tl_aio_stats {
    uint64_t bytes_read, bytes_written, requests;
    double read_busy_s, write_busy_s; /* wall time with >= 1 read (write) in flight */
} tl_aio_stats;

typedef struct tl_aio tl_aio;

tl_aio_params tl_aio_default_params(void);
tl_status tl_aio_open(const tl_aio_params *params, tl_aio **out);
/* Waits for everything in flight, then frees. */
void tl_aio_close(tl_aio *q);
/* 1 if io_uring is in use. */
int tl_aio_uses_uring(const tl_aio *q);

/* Submits a read of len bytes at offset into dst (or a write from src). `tag` must be
 * unique among requests not yet waited for. The buffer must stay valid until waited. */
tl_status tl_aio_read(tl_aio *q, tl_tier *t, uint64_t offset, void *dst, size_t len,
                      uint64_t tag);
tl_status tl_aio_write(tl_aio *q, tl_tier *t, uint64_t offset, const void *src, size_t len,
                       uint64_t tag);
/* A read that is needed soon (a KV page for the next attention, an embedding row): it
 * goes ahead of every queued request that is not urgent, behind the urgent ones. */
tl_status tl_aio_read_urgent(tl_aio *q, tl_tier *t, uint64_t offset, void *dst, size_t len,
                             uint64_t tag);
/* Classes of reads, lowest first. A request is queued behind everything of its class or
 * a higher one and ahead of everything of a lower one; urgent classes (SOON, NOW) get
 * TL_AIO_URGENT_SLOTS more in flight, and ordinary chunks wait while urgent ones run. */
typedef enum tl_aio_class {
    TL_AIO_ORDINARY = 0, /* tl_aio_read: streamed weights, read ahead */
    TL_AIO_SOON = 1,     /* tl_aio_read_urgent: needed by the next compute (prefetch) */
    TL_AIO_NOW = 2,      /* compute is waiting for it (a page read on demand) */
    TL_AIO_CLASSES = 3
} tl_aio_class;
tl_status tl_aio_read_class(tl_aio *q, tl_tier *t, uint64_t offset, void *dst, size_t len,
                            uint64_t tag, tl_aio_class cls);
/* The chunks a queue of `queue_depth` keeps in flight for a class: the KV cache's reads
 * (SOON, NOW) run at this depth, not at queue_depth, and are timed and priced at it. */
int tl_aio_class_depth(int queue_depth, tl_aio_class cls);
/* Blocks until request `tag` has completed; returns its status (TL_ERR_INVALID for an
 * unknown tag) and forgets it. */
tl_status tl_aio_wait(tl_aio *q, uint64_t tag);
/* 1 if request `tag` has completed (it still must be waited for). */
int tl_aio_poll(tl_aio *q, uint64_t tag);

void tl_aio_get_stats(const tl_aio *q, tl_aio_stats *out);

#endif

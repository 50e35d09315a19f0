/* tier.h - a level of storage behind one small method table (like SQLite's VFS).
 *
 * Implementations: memory (tier_mem.c: a byte array standing in for a device, for
 * tests and for the in-memory tier), file (tier_file.c: pread/pwrite, O_DIRECT when
 * asked and supported), and fault (tier_fault.c: wraps any tier and injects EIO, short
 * transfers, ENOSPC or latency). Storage tests run over every implementation.
 *
 * Contract: read_at/write_at transfer up to len bytes at offset and report how many
 * through *done; a short transfer is not an error (callers loop), 0 bytes read at or
 * past the end is end-of-file. Errors are TL_ERR_IO / TL_ERR_NOSPACE with a message.
 * Callers of a tier with align > 1 pass offsets, lengths and buffers that are multiples
 * of align (O_DIRECT). Methods are thread-safe: concurrent calls at different offsets.
 */
#ifndef TL_TIER_TIER_H
#define TL_TIER_TIER_H

#include <stddef.h>
#include <stdint.h>
#include "tierllm.h"

typedef struct tl_tier tl_tier;

/* The largest alignment a tier asks of offsets, lengths and buffers: a file opened with
 * O_DIRECT uses it (the logical block size of the devices we run on). Code that sizes
 * buffers before any tier is open (the planner, the budget check) sizes them for it,
 * so the check holds whatever tier the data lands on. */
enum { TL_TIER_MAX_ALIGN = 4096 };

typedef struct tl_tier_ops {
    tl_status (*read_at)(tl_tier *t, uint64_t offset, void *dst, size_t len, size_t *done);
    tl_status (*write_at)(tl_tier *t, uint64_t offset, const void *src, size_t len,
                          size_t *done);
    void (*close)(tl_tier *t);
    /* optional (NULL: nothing to do): tl_tier_reserve */
    tl_status (*reserve)(tl_tier *t, uint64_t size);
} tl_tier_ops;

struct tl_tier {
    const tl_tier_ops *ops;
    const char *name;  /* for messages: the file path, "memory", ... */
    uint64_t size;     /* current size in bytes (files: at open) */
    size_t align;      /* required alignment of offset, length and buffer (1 = none) */
    int fd;            /* a file descriptor io_uring may use directly, or -1 */
    int writable;
};

/* Reads exactly len bytes (looping over short reads); end-of-file is TL_ERR_IO with a
 * "truncated" message. Same for writes. */
tl_status tl_tier_read_full(tl_tier *t, uint64_t offset, void *dst, size_t len);
tl_status tl_tier_write_full(tl_tier *t, uint64_t offset, const void *src, size_t len);
void tl_tier_close(tl_tier *t);
/* Makes the first `size` bytes of a writable tier ready for writes that do not grow it: a
 * file's blocks are allocated now (fallocate) and its size set, so that each later write
 * there is an overwrite, which a filesystem need not serialize the way it does writes
 * that extend a file. Nothing to do for a tier without the notion, a filesystem without
 * fallocate, or a size the tier has already. TL_ERR_NOSPACE when the device has no room;
 * what was written is kept either way. */
tl_status tl_tier_reserve(tl_tier *t, uint64_t size);

/* A memory tier of `size` bytes (zeroed), writable, align 1. */
tl_status tl_tier_mem_open(uint64_t size, tl_tier **out);
/* The memory tier's bytes (for tests). */
uint8_t *tl_tier_mem_data(tl_tier *t);

/* Opens a file. TL_TIER_FILE_DIRECT asks for O_DIRECT (align becomes the device's
 * logical block size, TL_TIER_MAX_ALIGN); where the filesystem refuses O_DIRECT (tmpfs)
 * the file is opened without it and align is 1. TL_TIER_FILE_WRITE opens read-write and
 * creates the file if missing; otherwise the file is opened read-only and never
 * modified. (Scratch files, which must not outlive the process, come from
 * tl_tier_file_open_scratch below.) */
enum { TL_TIER_FILE_DIRECT = 1, TL_TIER_FILE_WRITE = 2 };
tl_status tl_tier_file_open(const char *path, int flags, tl_tier **out);
/* Opens a read-write scratch file in directory dir that has no name (O_TMPFILE, or a
 * unique name unlinked at once), so it cannot outlive the process, however it ends.
 * flags: TL_TIER_FILE_DIRECT as above. */
tl_status tl_tier_file_open_scratch(const char *dir, int flags, tl_tier **out);
/* 1 if the file tier really uses O_DIRECT. */
int tl_tier_file_is_direct(const tl_tier *t);

/* n read-only tiers as one (tier_concat.c): part i at offsets [at[i], at[i] + size);
 * at[] ascending multiples of TL_TIER_MAX_ALIGN, parts not overlapping; gaps read as
 * zeros. Takes ownership of the parts (closed on failure too); `name` must outlive it. */
tl_status tl_tier_concat_open(tl_tier **parts, const uint64_t *at, size_t n, const char *name,
                              tl_tier **out);

/* Fault injection: wraps `inner` (which it then owns). Every read/write call counts
 * from 1. */
typedef struct tl_fault_spec {
    uint64_t fail_call;      /* this call (and every later one if sticky) fails; 0 = never */
    int sticky;              /* keep failing after fail_call */
    int fail_errno;          /* EIO (TL_ERR_IO) or ENOSPC (TL_ERR_NOSPACE) */
    int fail_writes_only;    /* apply fail_call counting to writes only */
    size_t short_max;        /* if > 0: transfer at most this many bytes per call (rounded
                                down to the inner tier's alignment, at least one unit) */
    double latency_s;        /* sleep this long in every call */
} tl_fault_spec;
tl_status tl_tier_fault_open(tl_tier *inner, const tl_fault_spec *spec, tl_tier **out);
/* Calls seen so far (reads + writes). */
uint64_t tl_tier_fault_calls(const tl_tier *t);

#endif

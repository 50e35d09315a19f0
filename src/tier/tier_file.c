/* tier_file.c - a file behind the tier interface: pread/pwrite, O_DIRECT when asked.
 * Invariants: a read-only tier opens O_RDONLY and never writes (write_at refuses);
 * with O_DIRECT, align is 4096 and every offset/length/buffer must be a multiple of it
 * (checked, TL_ERR_INVALID); where the filesystem refuses O_DIRECT (EINVAL at open) the
 * file is used buffered with align 1. t->fd is exposed for io_uring. Thread-safe:
 * pread/pwrite carry their own offsets. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "base/status.h"
#include "tier.h"

enum { FILE_DIRECT_ALIGN = 4096 };

typedef struct file_tier {
    tl_tier base;
    char *path;
    int direct;
} file_tier;

static tl_status file_check_align(const tl_tier *t, uint64_t offset, const void *buf,
                                  size_t len, const char *what) {
    size_t a = t->align;
    if (a > 1 && (offset % a || len % a || (uintptr_t)buf % a))
        return tl_error_set(TL_ERR_INVALID,
                            "%s: O_DIRECT %s of %zu bytes at offset %" PRIu64
                            " is not aligned to %zu",
                            t->name, what, len, offset, a);
    return TL_OK;
}

static tl_status file_read_at(tl_tier *t, uint64_t offset, void *dst, size_t len,
                              size_t *done) {
    *done = 0;
    tl_status st = file_check_align(t, offset, dst, len, "read");
    if (st != TL_OK) return st;
    if (offset > (uint64_t)INT64_MAX)
        return tl_error_set(TL_ERR_INVALID, "%s: offset %" PRIu64 " out of range", t->name,
                            offset);
    for (;;) {
        ssize_t r = pread(t->fd, dst, len, (off_t)offset);
        if (r >= 0) {
            *done = (size_t)r;
            return TL_OK;
        }
        if (errno == EINTR) continue;
        return tl_error_set(TL_ERR_IO, "read %s at offset %" PRIu64 " (%zu bytes): %s",
                            t->name, offset, len, strerror(errno));
    }
}

static tl_status file_write_at(tl_tier *t, uint64_t offset, const void *src, size_t len,
                               size_t *done) {
    *done = 0;
    if (!t->writable)
        return tl_error_set(TL_ERR_INVALID, "%s: file tier is read-only, write refused",
                            t->name);
    tl_status st = file_check_align(t, offset, src, len, "write");
    if (st != TL_OK) return st;
    if (offset > (uint64_t)INT64_MAX)
        return tl_error_set(TL_ERR_INVALID, "%s: offset %" PRIu64 " out of range", t->name,
                            offset);
    for (;;) {
        ssize_t r = pwrite(t->fd, src, len, (off_t)offset);
        if (r >= 0) {
            *done = (size_t)r;
            return TL_OK;
        }
        if (errno == EINTR) continue;
        if (errno == ENOSPC || errno == EDQUOT)
            return tl_error_set(TL_ERR_NOSPACE,
                                "disk full: write %s at offset %" PRIu64 " (%zu bytes): %s",
                                t->name, offset, len, strerror(errno));
        return tl_error_set(TL_ERR_IO, "write %s at offset %" PRIu64 " (%zu bytes): %s",
                            t->name, offset, len, strerror(errno));
    }
}

static void file_close(tl_tier *t) {
    file_tier *f = (file_tier *)t;
    if (t->fd >= 0) close(t->fd);
    free(f->path);
    free(f);
}

static const tl_tier_ops file_ops = {file_read_at, file_write_at, file_close};

static int open_retry(const char *path, int oflags) {
    int fd;
    do fd = open(path, oflags, 0600);
    while (fd < 0 && errno == EINTR);
    return fd;
}

tl_status tl_tier_file_open(const char *path, int flags, tl_tier **out) {
    *out = NULL;
    if (!path) return tl_error_set(TL_ERR_INVALID, "file tier: no path");
    int oflags = O_CLOEXEC;
    if (flags & TL_TIER_FILE_WRITE) {
        oflags |= O_RDWR | O_CREAT;
        if (flags & TL_TIER_FILE_CREATE_EXCL) oflags |= O_EXCL;
    } else {
        oflags |= O_RDONLY;
    }
    int direct = 0, fd = -1;
    if (flags & TL_TIER_FILE_DIRECT) {
        fd = open_retry(path, oflags | O_DIRECT);
        if (fd >= 0) {
            direct = 1;
        } else if (errno == EINVAL) {
            /* The filesystem refuses O_DIRECT. Some kernels create the file before
             * refusing, so an exclusive create must not trip over its own file. */
            fd = open_retry(path, oflags & ~O_EXCL);
        }
    } else {
        fd = open_retry(path, oflags);
    }
    if (fd < 0)
        return tl_error_set(TL_ERR_IO, "open %s (%s%s): %s", path,
                            (flags & TL_TIER_FILE_WRITE) ? "read-write" : "read-only",
                            (flags & TL_TIER_FILE_DIRECT) ? ", O_DIRECT" : "",
                            strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return tl_error_set(TL_ERR_IO, "stat %s: %s", path, strerror(e));
    }
    if (S_ISDIR(sb.st_mode)) {
        close(fd);
        return tl_error_set(TL_ERR_IO, "open %s: is a directory", path);
    }
    file_tier *f = calloc(1, sizeof *f);
    char *p = strdup(path);
    if (!f || !p) {
        free(f);
        free(p);
        close(fd);
        return tl_error_set(TL_ERR_NOMEM, "file tier %s: out of memory", path);
    }
    f->path = p;
    f->direct = direct;
    f->base.ops = &file_ops;
    f->base.name = p;
    f->base.size = (uint64_t)sb.st_size;
    f->base.align = direct ? FILE_DIRECT_ALIGN : 1;
    f->base.fd = fd;
    f->base.writable = (flags & TL_TIER_FILE_WRITE) != 0;
    *out = &f->base;
    return TL_OK;
}

int tl_tier_file_is_direct(const tl_tier *t) {
    return t && t->ops == &file_ops && ((const file_tier *)t)->direct;
}

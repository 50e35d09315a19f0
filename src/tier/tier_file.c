/* tier_file.c - a file behind the tier interface: pread/pwrite, O_DIRECT when asked.
 * Invariants: a read-only tier opens O_RDONLY and never writes (write_at refuses);
 * with O_DIRECT, align is TL_TIER_MAX_ALIGN and every offset/length/buffer must be a multiple of it
 * (checked, TL_ERR_INVALID); where the filesystem refuses O_DIRECT (EINVAL at open) the
 * file is used buffered with align 1. t->fd is exposed for io_uring. Thread-safe:
 * pread/pwrite carry their own offsets. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "base/status.h"
#include "tier/tier.h"


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

static tl_status file_reserve(tl_tier *t, uint64_t size) {
    if (size > (uint64_t)INT64_MAX)
        return tl_error_set(TL_ERR_INVALID, "%s: reserve of %" PRIu64 " bytes out of range",
                            t->name, size);
    while (fallocate(t->fd, 0, 0, (off_t)size) != 0) {
        if (errno == EINTR) continue;
        if (errno == EOPNOTSUPP || errno == ENOSYS) return TL_OK; /* writes extend it */
        if (errno == ENOSPC || errno == EDQUOT)
            return tl_error_set(TL_ERR_NOSPACE, "disk full: reserving %" PRIu64
                                " bytes of %s: %s", size, t->name, strerror(errno));
        return tl_error_set(TL_ERR_IO, "reserving %" PRIu64 " bytes of %s: %s", size,
                            t->name, strerror(errno));
    }
    t->size = size;
    return TL_OK;
}

static void file_close(tl_tier *t) {
    file_tier *f = (file_tier *)t;
    if (t->fd >= 0) close(t->fd);
    free(f->path);
    free(f);
}

static const tl_tier_ops file_ops = {file_read_at, file_write_at, file_close, file_reserve};

static int open_retry(const char *path, int oflags) {
    int fd;
    do fd = open(path, oflags, 0600);
    while (fd < 0 && errno == EINTR);
    return fd;
}

/* The tier over an open fd (which it then owns). */
static tl_status wrap_fd(int fd, const char *name, int direct, int writable, tl_tier **out) {
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return tl_error_set(TL_ERR_IO, "stat %s: %s", name, strerror(e));
    }
    if (S_ISDIR(sb.st_mode)) {
        close(fd);
        return tl_error_set(TL_ERR_IO, "open %s: is a directory", name);
    }
    file_tier *f = calloc(1, sizeof *f);
    char *p = strdup(name);
    if (!f || !p) {
        free(f);
        free(p);
        close(fd);
        return tl_error_set(TL_ERR_NOMEM, "file tier %s: out of memory", name);
    }
    f->path = p;
    f->direct = direct;
    f->base.ops = &file_ops;
    f->base.name = p;
    f->base.size = (uint64_t)sb.st_size;
    f->base.align = direct ? TL_TIER_MAX_ALIGN : 1;
    f->base.fd = fd;
    f->base.writable = writable;
    *out = &f->base;
    return TL_OK;
}

tl_status tl_tier_file_open(const char *path, int flags, tl_tier **out) {
    *out = NULL;
    if (!path) return tl_error_set(TL_ERR_INVALID, "file tier: no path");
    int oflags = O_CLOEXEC;
    oflags |= (flags & TL_TIER_FILE_WRITE) ? O_RDWR | O_CREAT : O_RDONLY;
    int direct = 0, fd = -1;
    if (flags & TL_TIER_FILE_DIRECT) {
        fd = open_retry(path, oflags | O_DIRECT);
        if (fd >= 0) {
            direct = 1;
        } else if (errno == EINVAL) { /* the filesystem refuses O_DIRECT */
            fd = open_retry(path, oflags);
        }
    } else {
        fd = open_retry(path, oflags);
    }
    if (fd < 0)
        return tl_error_set(TL_ERR_IO, "open %s (%s%s): %s", path,
                            (flags & TL_TIER_FILE_WRITE) ? "read-write" : "read-only",
                            (flags & TL_TIER_FILE_DIRECT) ? ", O_DIRECT" : "",
                            strerror(errno));
    return wrap_fd(fd, path, direct, (flags & TL_TIER_FILE_WRITE) != 0, out);
}

/* Opens an unnamed file in dir: O_TMPFILE, so the file never has a name another process
 * or a crash could leave behind. Where the filesystem lacks O_TMPFILE, a unique name is
 * created exclusively and unlinked at once. */
static int open_unnamed(const char *dir, int oflags, unsigned seq) {
    int fd = open_retry(dir, oflags | O_TMPFILE);
    if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR)) return fd;
    size_t n = strlen(dir) + 64;
    char *path = malloc(n);
    if (!path) return -1;
    for (int attempt = 0; attempt < 64; attempt++) {
        snprintf(path, n, "%s/.tierllm-scratch-%ld-%u-%d", dir, (long)getpid(), seq, attempt);
        fd = open_retry(path, oflags | O_CREAT | O_EXCL);
        if (fd >= 0) {
            unlink(path);
            break;
        }
        if (errno != EEXIST) break;
    }
    int e = errno;
    free(path);
    errno = e;
    return fd;
}

tl_status tl_tier_file_open_scratch(const char *dir, int flags, tl_tier **out) {
    static atomic_uint scratch_seq;
    *out = NULL;
    if (!dir) return tl_error_set(TL_ERR_INVALID, "scratch file: no directory");
    const unsigned seq = atomic_fetch_add(&scratch_seq, 1);
    const int oflags = O_CLOEXEC | O_RDWR;
    int direct = 0, fd = -1;
    if (flags & TL_TIER_FILE_DIRECT) {
        fd = open_unnamed(dir, oflags | O_DIRECT, seq);
        direct = fd >= 0;
    }
    if (fd < 0 && (!(flags & TL_TIER_FILE_DIRECT) || errno == EINVAL))
        fd = open_unnamed(dir, oflags, seq); /* the filesystem refuses O_DIRECT (tmpfs) */
    if (fd < 0)
        return tl_error_set(TL_ERR_IO, "cannot create a scratch file in %s: %s", dir,
                            strerror(errno));
    size_t n = strlen(dir) + 32;
    char *name = malloc(n);
    if (!name) {
        close(fd);
        return tl_error_set(TL_ERR_NOMEM, "scratch file: out of memory");
    }
    snprintf(name, n, "%s/(scratch file)", dir);
    tl_status st = wrap_fd(fd, name, direct, 1, out);
    free(name);
    return st;
}

int tl_tier_file_is_direct(const tl_tier *t) {
    return t && t->ops == &file_ops && ((const file_tier *)t)->direct;
}

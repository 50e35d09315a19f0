/* out_file.c - output files written whole or not at all (see out_file.h).
 *
 * Invariants: the temporary lives in the target's directory (so the rename is atomic and
 * never crosses filesystems) under a hidden name unique to this process, created with
 * O_EXCL; it exists exactly while f->tmp_path is set, and every path out of commit or
 * abort removes it unless the rename consumed it. The target is checked when the file is
 * opened and again just before the rename, so a target that became a device meanwhile is
 * still refused. A symlink target is resolved first: the file it points to is replaced
 * and the link stays a link.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "base/out_file.h"
#include "base/status.h"

#define MAX_LINK_HOPS 40 /* as the kernel's ELOOP limit */

static char *dup_n(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

char *tl_out_dir_of(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return dup_n(".", 1);
    return dup_n(path, slash == path ? 1 : (size_t)(slash - path));
}

int tl_out_sync_dir(const char *path) {
    char *dir = tl_out_dir_of(path);
    int dfd = dir ? open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    free(dir);
    if (dfd < 0) return -1;
    int rc = fsync(dfd) != 0 && errno != EINVAL ? -1 : 0; /* EINVAL: cannot be synced */
    int e = errno;
    close(dfd);
    errno = e;
    return rc;
}

/* path with its symlinks followed to the last name that is not one (which may not exist);
 * NULL when out of memory. A link loop stops after MAX_LINK_HOPS; stat then says ELOOP. */
static char *resolve_links(const char *path) {
    char *cur = dup_n(path, strlen(path));
    for (int hop = 0; cur && hop < MAX_LINK_HOPS; hop++) {
        struct stat sb;
        char link[4096];
        if (lstat(cur, &sb) != 0 || !S_ISLNK(sb.st_mode)) break;
        ssize_t n = readlink(cur, link, sizeof link - 1);
        if (n < 0) break;
        link[n] = 0;
        const char *slash = strrchr(cur, '/');
        char *next;
        if (link[0] == '/' || !slash) {
            next = dup_n(link, (size_t)n);
        } else { /* relative to the link's directory */
            size_t d = (size_t)(slash - cur) + 1;
            next = malloc(d + (size_t)n + 1);
            if (next) {
                memcpy(next, cur, d);
                memcpy(next + d, link, (size_t)n + 1);
            }
        }
        free(cur);
        cur = next;
    }
    return cur;
}

static const char *kind_of(mode_t m) {
    if (S_ISDIR(m)) return "a directory";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISSOCK(m)) return "a socket";
    return "not a regular file";
}

/* The check on the resolved target `real` (`path` is the name the user gave); *exists
 * and *sb describe the target when it is there. */
static tl_status check_resolved(const char *path, const char *real, int *exists,
                                struct stat *sb) {
    const int linked = strcmp(path, real) != 0;
    *exists = 0;
    if (stat(real, sb) == 0) {
        if (!S_ISREG(sb->st_mode))
            return tl_error_set(TL_ERR_INVALID, "%s%s%s is %s, not a regular file: refusing to "
                                "write to it", path, linked ? " -> " : "", linked ? real : "",
                                kind_of(sb->st_mode));
        *exists = 1;
        return TL_OK;
    }
    if (errno != ENOENT)
        return tl_error_set(TL_ERR_IO, "%s: %s", path, strerror(errno));
    char *dir = tl_out_dir_of(real);
    if (!dir) return tl_error_set(TL_ERR_NOMEM, "%s: out of memory", path);
    struct stat db;
    tl_status st = TL_OK;
    if (stat(dir, &db) != 0)
        st = tl_error_set(TL_ERR_IO, "%s: directory %s: %s", path, dir, strerror(errno));
    else if (!S_ISDIR(db.st_mode))
        st = tl_error_set(TL_ERR_IO, "%s: %s is not a directory", path, dir);
    free(dir);
    return st;
}

/* Resolves and checks the target named `path`: *real (malloc'd) is the file to replace,
 * *exists and *sb describe it. On error *real is NULL. */
static tl_status resolve_target(const char *path, char **real, int *exists, struct stat *sb) {
    *real = NULL;
    if (!path || !*path) return tl_error_set(TL_ERR_INVALID, "no output path");
    char *r = resolve_links(path);
    if (!r) return tl_error_set(TL_ERR_NOMEM, "%s: out of memory", path);
    tl_status st = check_resolved(path, r, exists, sb);
    if (st) free(r);
    else *real = r;
    return st;
}

tl_status tl_out_check_target(const char *path) {
    char *real;
    struct stat sb;
    int exists;
    tl_status st = resolve_target(path, &real, &exists, &sb);
    free(real);
    return st;
}

static tl_status io_error(const char *path, const char *what, int e) {
    if (e == ENOSPC || e == EDQUOT)
        return tl_error_set(TL_ERR_NOSPACE, "%s: disk full while writing", path);
    return tl_error_set(TL_ERR_IO, "%s: %s: %s", path, what, strerror(e));
}

static void release(tl_out_file *f) {
    free(f->path);
    free(f->tmp_path);
    f->fd = -1;
    f->path = f->tmp_path = NULL;
}

tl_status tl_out_file_open(tl_out_file *f, const char *path) {
    memset(f, 0, sizeof *f);
    f->fd = -1;
    char *real;
    struct stat sb;
    int exists;
    tl_status st = resolve_target(path, &real, &exists, &sb);
    if (st) return st;
    /* "<dir>/.<name>.tmp-<pid>-<n>", the name cut so the whole stays under NAME_MAX */
    const char *slash = strrchr(real, '/');
    const char *base = slash ? slash + 1 : real;
    const size_t dlen = slash ? (size_t)(slash - real) + 1 : 0;
    const size_t cap = dlen + 200 + 40;
    char *tmp = malloc(cap);
    if (!tmp) {
        free(real);
        return tl_error_set(TL_ERR_NOMEM, "%s: out of memory", path);
    }
    int fd = -1, e = 0;
    for (int i = 0; i < 1000 && fd < 0; i++) {
        snprintf(tmp, cap, "%.*s.%.200s.tmp-%ld-%d", (int)dlen, real, base, (long)getpid(), i);
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, exists ? 0600 : 0644);
        e = errno;
        if (fd < 0 && e != EEXIST) break;
    }
    if (fd < 0) {
        st = tl_error_set(TL_ERR_IO, "%s: cannot create a temporary file in its directory: %s",
                          path, strerror(e));
        free(tmp);
        free(real);
        return st;
    }
    if (exists) { /* the replacement keeps the old file's owner (where allowed) and mode */
        if (fchown(fd, sb.st_uid, sb.st_gid) != 0) { /* not ours to give away: keep ours */ }
        if (fchmod(fd, sb.st_mode & 07777) != 0) { /* the 0600 it was created with stands */ }
    }
    f->fd = fd;
    f->path = real;
    f->tmp_path = tmp;
    return TL_OK;
}

tl_status tl_out_file_write(tl_out_file *f, const void *data, size_t n) {
    const char *p = data;
    while (n > 0) {
        ssize_t r = write(f->fd, p, n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return io_error(f->path, "write", errno);
        p += r;
        n -= (size_t)r;
    }
    return TL_OK;
}

tl_status tl_out_file_commit(tl_out_file *f) {
    if (!f->tmp_path) return tl_error_set(TL_ERR_INVALID, "output file: nothing to commit");
    tl_status st = TL_OK;
    if (fsync(f->fd) != 0) st = io_error(f->path, "fsync", errno);
    int closed = close(f->fd);
    if (!st && closed != 0) st = io_error(f->path, "close", errno);
    f->fd = -1;
    struct stat sb;
    int exists;
    if (!st) st = check_resolved(f->path, f->path, &exists, &sb);
    if (!st && rename(f->tmp_path, f->path) != 0)
        st = tl_error_set(TL_ERR_IO, "%s: cannot rename %s over it: %s", f->path, f->tmp_path,
                          strerror(errno));
    if (st) {
        unlink(f->tmp_path);
        release(f);
        return st;
    }
    /* the rename is durable once the directory is: a crash before this may still show the
     * old file, never a partial one */
    if (tl_out_sync_dir(f->path) != 0)
        st = tl_error_set(TL_ERR_IO, "%s: written, but syncing its directory failed: %s",
                          f->path, strerror(errno));
    release(f);
    return st;
}

void tl_out_file_abort(tl_out_file *f) {
    if (!f || !f->tmp_path) return;
    if (f->fd >= 0) close(f->fd);
    unlink(f->tmp_path);
    release(f);
}

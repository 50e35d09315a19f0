/* batch_output.c - see batch_output.h.
 *
 * Holds: nothing on disk changes before batch_out_begin; while o->fd is open it carries
 * an exclusive flock, and every other run of batch on the same file is refused by that
 * lock (a file created here appears already locked: it is made with O_TMPFILE, locked,
 * then linked in; a replacement is a locked temporary renamed over the target). o->size
 * is the length of the complete lines we know of: a failed write is cut back to it. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include "base/json.h"
#include "base/out_file.h"
#include "tools/batch_output.h"
#include "tools/line_reader.h"
#ifdef TL_TEST_HOOKS
#include "tools/test_hooks.h"
#endif

enum { MAX_RESULT_LINE = 256 << 20 }; /* a result line longer than this is not ours */

static int lock_fd(int fd, const char *path, char *err, size_t err_len) {
    while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        if (errno == EINTR) continue;
        if (errno == EWOULDBLOCK)
            snprintf(err, err_len, "%s is being written by another tierllm batch run; wait "
                     "for it to finish (or stop it) and use --resume", path);
        else
            snprintf(err, err_len, "cannot lock %s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

typedef struct scan_ctx {
    batch_out *o;
    size_t cap;
} scan_ctx;

/* --resume: each complete line must be a result line of ours; its id is finished. */
static int on_result_line(void *user, const char *text, size_t len, int32_t line_no,
                          off_t offset, int terminated, char *err, size_t err_len) {
    scan_ctx *c = user;
    batch_out *o = c->o;
    if (!terminated) return 0; /* torn by a crash: cut by batch_out_begin, then redone */
    json_t *v;
    char e[160];
    json_t *id = NULL;
    if (tl_json_parse(text, len, 0, &v, e, sizeof e) == TL_OK) {
        id = json_object_get(v, "id");
        if (!id || !(json_is_string(id) || json_is_number(id)) ||
            !json_object_get(v, "finish_reason")) {
            snprintf(e, sizeof e, "no \"id\" and \"finish_reason\"");
            id = NULL;
        }
    }
    if (!id) {
        snprintf(err, err_len, "%s line %d is not a result line of tierllm batch (%s); not "
                 "resuming into it", o->path, (int)line_no, e);
        if (v) json_decref(v);
        return -1;
    }
    if (o->n_done == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 256;
        char **d = realloc(o->done, cap * sizeof *d);
        if (!d) {
            json_decref(v);
            snprintf(err, err_len, "out of memory");
            return -1;
        }
        o->done = d;
        c->cap = cap;
    }
    o->done[o->n_done] = tl_json_canonical(id);
    json_decref(v);
    if (!o->done[o->n_done]) {
        snprintf(err, err_len, "out of memory");
        return -1;
    }
    o->n_done++;
    o->keep_bytes = offset + (off_t)len + 1;
    return 0;
}

int batch_out_prepare(batch_out *o, const char *path, const char *in_path, int mode,
                      char *err, size_t err_len) {
    memset(o, 0, sizeof *o);
    o->fd = o->old_fd = -1;
    o->mode = mode;
    if (tl_out_check_target(path)) { /* a regular file, or missing in a directory */
        snprintf(err, err_len, "%s", tl_last_error());
        return -1;
    }
    struct stat sb, ib;
    if (stat(path, &sb) != 0) { /* missing */
        if (lstat(path, &sb) == 0) {
            snprintf(err, err_len, "%s is a symbolic link to nowhere; give a real path", path);
            return -1;
        }
        o->path = strdup(path);
        if (!o->path) { snprintf(err, err_len, "out of memory"); return -1; }
        return 0;
    }
    if (stat(in_path, &ib) == 0 && ib.st_dev == sb.st_dev && ib.st_ino == sb.st_ino) {
        snprintf(err, err_len, "-o %s is the input file; write the results elsewhere", path);
        return -1;
    }
    o->exists = 1;
    o->path = realpath(path, NULL);
    if (!o->path) {
        snprintf(err, err_len, "%s: %s", path, strerror(errno));
        return -1;
    }
    o->old_fd = open(o->path, O_RDWR | O_APPEND | O_CLOEXEC);
    if (o->old_fd < 0) {
        snprintf(err, err_len, "cannot open %s: %s", path, strerror(errno));
        batch_out_close(o, NULL, 0);
        return -1;
    }
    if (lock_fd(o->old_fd, path, err, err_len)) {
        batch_out_close(o, NULL, 0);
        return -1;
    }
    if (fstat(o->old_fd, &sb) != 0) sb.st_size = 0;
    o->size = sb.st_size;
    if (o->size > 0 && mode == BATCH_OUT_NEW) {
        snprintf(err, err_len, "%s is not empty (%lld bytes): --resume finishes an interrupted "
                 "run into it, --overwrite replaces it", path, (long long)o->size);
        batch_out_close(o, NULL, 0);
        return -1;
    }
    if (mode == BATCH_OUT_RESUME && o->size > 0) {
        scan_ctx c = {o, 0};
        if (line_reader_run(o->old_fd, path, MAX_RESULT_LINE, on_result_line, &c, err,
                            err_len)) {
            batch_out_close(o, NULL, 0);
            return -1;
        }
        if (o->n_done > 1) qsort(o->done, o->n_done, sizeof *o->done, cmp_str);
    }
    return 0;
}

int batch_out_is_done(const batch_out *o, const char *id) {
    return id && o->n_done &&
           bsearch(&id, o->done, o->n_done, sizeof *o->done, cmp_str) != NULL;
}

/* A new file that appears already locked; without O_TMPFILE, created exclusively and
 * locked at once. */
static int create_new(batch_out *o, char *err, size_t err_len) {
    char *dir = tl_out_dir_of(o->path);
    if (!dir) { snprintf(err, err_len, "out of memory"); return -1; }
    int fd = open(dir, O_TMPFILE | O_WRONLY | O_APPEND | O_CLOEXEC, 0644);
    free(dir);
    if (fd >= 0) {
        char proc[64];
        snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
        if (flock(fd, LOCK_EX) != 0 ||
            linkat(AT_FDCWD, proc, AT_FDCWD, o->path, AT_SYMLINK_FOLLOW) != 0) {
            int e = errno;
            close(fd);
            if (e == EEXIST)
                snprintf(err, err_len, "%s appeared while this run was starting (another "
                         "tierllm batch?); not writing into it", o->path);
            else
                snprintf(err, err_len, "cannot create %s: %s", o->path, strerror(e));
            return -1;
        }
    } else {
        fd = open(o->path, O_WRONLY | O_APPEND | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) != 0) {
            int e = errno;
            if (fd >= 0) close(fd);
            snprintf(err, err_len, "cannot create %s: %s", o->path,
                     e == EEXIST ? "it appeared while this run was starting (another "
                                   "tierllm batch?)" : strerror(e));
            return -1;
        }
    }
    o->fd = fd;
    o->size = 0;
    if (tl_out_sync_dir(o->path) != 0) { /* the name is durable before results go in */
        snprintf(err, err_len, "syncing the directory of %s: %s", o->path, strerror(errno));
        return -1;
    }
    return 0;
}

/* --overwrite: a locked temporary in the same directory renamed over the target, so the
 * old results stay whole until the new file has taken the name. */
static int replace(batch_out *o, char *err, size_t err_len) {
    size_t n = strlen(o->path) + 48;
    char *tmp = malloc(n);
    if (!tmp) { snprintf(err, err_len, "out of memory"); return -1; }
    struct stat sb;
    mode_t perm = fstat(o->old_fd, &sb) == 0 ? (sb.st_mode & 07777) : 0644;
    int fd = -1;
    for (int attempt = 0; attempt < 100 && fd < 0; attempt++) {
        snprintf(tmp, n, "%s.tmp-%ld-%d", o->path, (long)getpid(), attempt);
        fd = open(tmp, O_WRONLY | O_APPEND | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0 && errno != EEXIST) break;
    }
    if (fd < 0 || flock(fd, LOCK_EX) != 0 || fchmod(fd, perm) != 0 ||
        rename(tmp, o->path) != 0) {
        snprintf(err, err_len, "cannot replace %s: %s", o->path, strerror(errno));
        if (fd >= 0) {
            close(fd);
            unlink(tmp);
        }
        free(tmp);
        return -1;
    }
    free(tmp);
    o->fd = fd;
    o->size = 0;
    close(o->old_fd);
    o->old_fd = -1;
    if (tl_out_sync_dir(o->path) != 0) {
        snprintf(err, err_len, "syncing the directory of %s: %s", o->path, strerror(errno));
        return -1;
    }
    return 0;
}

int batch_out_begin(batch_out *o, char *err, size_t err_len) {
    if (!o->exists) return create_new(o, err, err_len);
    if (o->mode == BATCH_OUT_OVERWRITE && o->size > 0) return replace(o, err, err_len);
    if (o->mode == BATCH_OUT_RESUME && o->keep_bytes < o->size) {
        if (ftruncate(o->old_fd, o->keep_bytes) != 0 || fdatasync(o->old_fd) != 0) {
            snprintf(err, err_len, "cutting the torn last line of %s: %s", o->path,
                     strerror(errno));
            return -1;
        }
        o->size = o->keep_bytes;
    }
    o->fd = o->old_fd;
    o->old_fd = -1;
    return 0;
}

int batch_out_write(batch_out *o, const char *line, size_t len, char *err, size_t err_len) {
    size_t done = 0;
    int e = 0;
#ifdef TL_TEST_HOOKS
    e = tl_test_hook_result_line(o->fd, line, len, &done);
#endif
    while (!e && done < len) {
        ssize_t w = write(o->fd, line + done, len - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) e = w < 0 ? errno : ENOSPC;
        else done += (size_t)w;
    }
    if (e) { /* the part of the line that reached the file is cut: it stays whole lines */
        if (ftruncate(o->fd, o->size) != 0) { /* --resume cuts it then */ }
        snprintf(err, err_len, "writing %s: %s", o->path, strerror(e));
        return -1;
    }
    o->size += (off_t)len;
    return 0;
}

int batch_out_sync(batch_out *o, char *err, size_t err_len) {
    if (o->fd >= 0 && fdatasync(o->fd) != 0) {
        snprintf(err, err_len, "syncing %s: %s", o->path, strerror(errno));
        return -1;
    }
    return 0;
}

int batch_out_close(batch_out *o, char *err, size_t err_len) {
    int rc = 0;
    if (o->fd >= 0) {
        if (err) rc = batch_out_sync(o, err, err_len);
        if (close(o->fd) != 0 && !rc && err) {
            snprintf(err, err_len, "closing %s: %s", o->path, strerror(errno));
            rc = -1;
        }
    }
    if (o->old_fd >= 0) close(o->old_fd);
    for (size_t i = 0; i < o->n_done; i++) free(o->done[i]);
    free(o->done);
    free(o->path);
    memset(o, 0, sizeof *o);
    o->fd = o->old_fd = -1;
    return rc;
}

/* panel_copy.c - see panel_copy.h. The copy is made in two steps through one buffer from
 * the budget: the whole file in large chunks, then each tensor to repack, whole panels at a
 * time, read from the model file, repacked and written over its range of the copy. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include "exec/panel_copy.h"
#include "base/budget.h"
#include "base/cache_dir.h"
#include "base/clock.h"
#include "base/status.h"
#include "kernels/kernels.h"
#include "model/placement.h"
#include "tier/tier.h"

#define PANEL_LAYOUT_VERSION 1           /* bump when kernels.h's panel layout changes */
#define COPY_CHUNK ((size_t)8 << 20)     /* bytes per read and write */
#define SPACE_MARGIN ((uint64_t)256 << 20) /* left free on the copy's filesystem */

/* 1 when tensor w is stored repacked in the copy. */
static int stored_repacked(const tl_llama *m, const tl_weight *w) {
    return w != &m->tok_embd && tl_weight_wants_panels(m, w);
}

static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static tl_status read_all(int fd, void *buf, size_t n, uint64_t off, const char *path) {
    for (size_t done = 0; done < n;) {
        ssize_t r = pread(fd, (char *)buf + done, n - done, (off_t)(off + done));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0)
            return tl_error_set(TL_ERR_IO, "reading %s at offset %llu: %s", path,
                                (unsigned long long)(off + done), r < 0 ? strerror(errno) : "end of file");
        done += (size_t)r;
    }
    return TL_OK;
}

static tl_status write_all(int fd, const void *buf, size_t n, uint64_t off, const char *path) {
    for (size_t done = 0; done < n;) {
        ssize_t r = pwrite(fd, (const char *)buf + done, n - done, (off_t)(off + done));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0)
            return tl_error_set(r < 0 && (errno == ENOSPC || errno == EDQUOT) ? TL_ERR_NOSPACE : TL_ERR_IO,
                                "writing %s at offset %llu: %s", path,
                                (unsigned long long)(off + done), r < 0 ? strerror(errno) : "no progress");
        done += (size_t)r;
    }
    return TL_OK;
}

/* Writes the copy of `src` (size bytes) to the new file fd: all of it, then the repacked
 * tensors over their ranges, through buf (cap bytes, at least one panel of any tensor). */
static tl_status write_copy(tl_llama *m, int src, int fd, uint64_t size, uint8_t *buf,
                            size_t cap, uint8_t *tmp, const char *tmp_path) {
    tl_status st = TL_OK;
    for (uint64_t off = 0; off < size && !st; off += cap) {
        size_t n = size - off < cap ? (size_t)(size - off) : cap;
        st = read_all(src, buf, n, off, m->path);
        if (!st) st = write_all(fd, buf, n, off, tmp_path);
    }
    for (size_t i = 0; i < m->n_all && !st; i++) {
        const tl_weight *w = m->all[i];
        if (!stored_repacked(m, w)) continue;
        const size_t panel = tl_panels_tmp_bytes(w->type, w->cols);
        const size_t per = cap / panel, panels = w->rows / TL_PANEL_ROWS;
        for (size_t p = 0; p < panels && !st; p += per) {
            const size_t np = panels - p < per ? panels - p : per;
            const uint64_t off = w->file_offset + (uint64_t)p * panel;
            st = read_all(src, buf, np * panel, off, m->path);
            if (st) break;
            tl_panels_pack(w->type, buf, np * TL_PANEL_ROWS, w->cols, tmp);
            st = write_all(fd, buf, np * panel, off, tmp_path);
        }
    }
    if (!st && fsync(fd) != 0)
        st = tl_error_set(errno == ENOSPC ? TL_ERR_NOSPACE : TL_ERR_IO, "writing %s: %s",
                          tmp_path, strerror(errno));
    return st;
}

/* The copy's path for the model file open as fd: its identity and the layout version. */
static tl_status copy_path(const tl_llama *m, const char *dir, const struct stat *sb,
                           char *out, size_t cap) {
    char real[PATH_MAX];
    const char *name = realpath(m->path, real) ? real : m->path;
    uint64_t h = 1469598103934665603ull;
    const int64_t facts[] = {(int64_t)sb->st_size, (int64_t)sb->st_mtim.tv_sec,
                             (int64_t)sb->st_mtim.tv_nsec, (int64_t)sb->st_ino,
                             (int64_t)sb->st_dev, PANEL_LAYOUT_VERSION};
    h = fnv1a(h, name, strlen(name));
    h = fnv1a(h, facts, sizeof facts);
    int n = snprintf(out, cap, "%s/panels-%016llx.gguf", dir, (unsigned long long)h);
    if (n < 0 || (size_t)n >= cap) return tl_error_set(TL_ERR_INVALID, "cache path too long");
    return TL_OK;
}

/* Opens the finished copy as the model's source of weight reads. */
static tl_status open_copy(tl_model *m, const char *path) {
    tl_tier *t;
    tl_status st = tl_tier_file_open(path, m->lm.params.direct_io ? TL_TIER_FILE_DIRECT : 0, &t);
    if (st) return st;
    if (t->size != m->lm.tier->size) {
        tl_tier_close(t);
        return tl_error_set(TL_ERR_FORMAT, "%s: %llu bytes, the model file %llu", path,
                            (unsigned long long)t->size, (unsigned long long)m->lm.tier->size);
    }
    m->lm.panel_tier = t;
    return TL_OK;
}

tl_status tl_panel_copy_use(tl_model *m, const char *dir, tl_panel_copy_info *info) {
    memset(info, 0, sizeof *info);
    if (m->res) return tl_error_set(TL_ERR_INVALID, "a converted copy must be chosen before the weights are placed");
    /* a copy holds every tensor of the file; a stage knows only its own */
    if (m->lm.stage_first > 0 || m->lm.stage_end < m->lm.hp.n_layer)
        return tl_error_set(TL_ERR_UNSUPPORTED, "a pipeline stage streams from the model file: "
                            "--weights-copy is not available with --pipeline");
    if (m->lm.panel_tier) {
        info->used = 1;
        return TL_OK;
    }
    size_t most = 0;
    for (size_t i = 0; i < m->lm.n_all; i++)
        if (stored_repacked(&m->lm, m->lm.all[i])) {
            size_t b = tl_panels_tmp_bytes(m->lm.all[i]->type, m->lm.all[i]->cols);
            if (b > most) most = b;
        }
    if (!most) return TL_OK; /* nothing kept in panels here */
    char cache[1024];
    tl_status st = TL_OK;
    if (!dir) {
        if ((st = tl_cache_dir(cache, sizeof cache))) return st;
        dir = cache;
    }
    if ((st = tl_make_dirs(dir))) return st;
    int src = open(m->lm.path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (src < 0 || fstat(src, &sb) != 0) {
        st = tl_error_set(TL_ERR_IO, "%s: %s", m->lm.path, strerror(errno));
        if (src >= 0) close(src);
        return st;
    }
    if ((st = copy_path(&m->lm, dir, &sb, info->path, sizeof info->path))) {
        close(src);
        return st;
    }
    info->bytes = (uint64_t)sb.st_size;
    struct stat cb;
    if (stat(info->path, &cb) == 0 && cb.st_size == sb.st_size) { /* written before */
        close(src);
        st = open_copy(m, info->path);
        info->used = !st;
        return st;
    }
    struct statvfs vfs;
    if (statvfs(dir, &vfs) == 0 &&
        (uint64_t)vfs.f_bavail * vfs.f_frsize < (uint64_t)sb.st_size + SPACE_MARGIN) {
        close(src);
        return tl_error_set(TL_ERR_NOSPACE, "no room for a converted copy of the weights in %s: "
                            "it needs %.1f MiB (and %.0f MiB left free), %.1f MiB are free",
                            dir, sb.st_size / 1048576.0, SPACE_MARGIN / 1048576.0,
                            (double)vfs.f_bavail * vfs.f_frsize / 1048576.0);
    }
    char tmp_path[1100];
    snprintf(tmp_path, sizeof tmp_path, "%s.tmp-%ld", info->path, (long)getpid());
    /* the chunk: COPY_CHUNK, or what the budget leaves beside the panel temporary (at
     * least one panel: the repack works in whole panels) */
    const uint64_t limit = tl_budget_limit(m->lm.budget), used = tl_budget_used(m->lm.budget);
    const uint64_t spare = limit == 0 ? COPY_CHUNK /* unlimited */
                           : limit > used + 2 * most + 8192 ? limit - used - most - 8192 : most;
    size_t cap = spare < COPY_CHUNK ? (size_t)spare : COPY_CHUNK;
    if (cap < most) cap = most;
    uint8_t *buf = NULL, *tmp = NULL;
    if ((st = tl_budget_alloc(m->lm.budget, cap, 4096, "converted copy", (void **)&buf)) ||
        (st = tl_budget_alloc(m->lm.budget, most, 64, "converted copy", (void **)&tmp))) {
        tl_budget_free(m->lm.budget, buf);
        close(src);
        return st;
    }
    const double t0 = tl_now();
    int fd = open(tmp_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) st = tl_error_set(TL_ERR_IO, "create %s: %s", tmp_path, strerror(errno));
    else {
        st = write_copy(&m->lm, src, fd, (uint64_t)sb.st_size, buf, cap, tmp, tmp_path);
        if (close(fd) != 0 && !st) st = tl_error_set(TL_ERR_IO, "writing %s: %s", tmp_path, strerror(errno));
        if (!st && rename(tmp_path, info->path) != 0)
            st = tl_error_set(TL_ERR_IO, "rename %s: %s", tmp_path, strerror(errno));
        if (st) unlink(tmp_path);
    }
    tl_budget_free(m->lm.budget, tmp);
    tl_budget_free(m->lm.budget, buf);
    close(src);
    if (st) return st;
    info->seconds = tl_now() - t0;
    info->created = 1;
    st = open_copy(m, info->path);
    info->used = !st;
    return st;
}

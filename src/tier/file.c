/* file.c - see file.h. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "file.h"
#include "../base/status.h"

tl_status tl_file_open_ro(const char *path, tl_file *f) {
    memset(f, 0, sizeof *f);
    f->fd = -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return tl_error_set(TL_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return tl_error_set(TL_ERR_IO, "%s: not a regular file", path);
    }
    f->path = strdup(path);
    if (!f->path) {
        close(fd);
        return tl_error_set(TL_ERR_NOMEM, "out of memory");
    }
    f->fd = fd;
    f->size = (uint64_t)sb.st_size;
    return TL_OK;
}

void tl_file_close(tl_file *f) {
    if (f->fd >= 0) close(f->fd);
    free(f->path);
    f->fd = -1;
    f->path = NULL;
}

tl_status tl_file_read_at(const tl_file *f, uint64_t offset, void *dst, size_t len) {
    size_t done = 0;
    while (done < len) {
        size_t want = len - done;
        if (want > (1u << 30)) want = 1u << 30;
        ssize_t r = pread(f->fd, (char *)dst + done, want, (off_t)(offset + done));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0)
            return tl_error_set(TL_ERR_IO, "%s: read of %zu bytes at offset %llu failed: %s",
                                f->path, len, (unsigned long long)offset, strerror(errno));
        if (r == 0)
            return tl_error_set(TL_ERR_FORMAT, "%s: unexpected end of file at offset %llu",
                                f->path, (unsigned long long)(offset + done));
        done += (size_t)r;
    }
    return TL_OK;
}

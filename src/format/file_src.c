/* file_src.c - a regular file as a readers' byte source (file_src.h). */
#include "format/file_src.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "base/status.h"

tl_status tl_file_src_open(const char *path, tl_status eof_status, tl_file_src *src,
                           uint64_t *size) {
    src->fd = -1;
    src->path = path;
    src->eof_status = eof_status;
    /* O_NONBLOCK: opening a FIFO must not wait for a writer; fstat then refuses it */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return tl_error_set(TL_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return tl_error_set(TL_ERR_IO, "%s: not a regular file", path);
    }
    src->fd = fd;
    *size = (uint64_t)sb.st_size;
    return TL_OK;
}

tl_status tl_file_src_read(void *src, uint64_t offset, void *dst, size_t len) {
    tl_file_src *f = src;
    size_t done = 0;
    while (done < len) {
        ssize_t r = pread(f->fd, (char *)dst + done, len - done, (off_t)(offset + done));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0)
            return tl_error_set(TL_ERR_IO, "%s: read failed at offset %llu: %s", f->path,
                                (unsigned long long)(offset + done), strerror(errno));
        if (r == 0) /* the file shrank since it was opened */
            return tl_error_set(f->eof_status, "%s: unexpected end of file at offset %llu",
                                f->path, (unsigned long long)(offset + done));
        done += (size_t)r;
    }
    return TL_OK;
}

void tl_file_src_close(tl_file_src *src) {
    if (src->fd >= 0) close(src->fd);
    src->fd = -1;
}

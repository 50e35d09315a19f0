/* file_src.h - a regular file as the byte source the readers parse (gguf.h's
 * tl_gguf_read_fn), shared by the GGUF and safetensors readers: opened read-only without
 * waiting on a FIFO, anything but a regular file refused, reads retried on EINTR, a file
 * that ends early reported with the reader's own status for truncation. */
#ifndef TL_FORMAT_FILE_SRC_H
#define TL_FORMAT_FILE_SRC_H

#include <stdint.h>
#include "tierllm.h"

typedef struct tl_file_src {
    int fd;
    const char *path;
    tl_status eof_status; /* what reading past the end returns */
} tl_file_src;

/* Opens path; *size is its size. TL_ERR_IO when it cannot be opened or is not a regular
 * file. */
tl_status tl_file_src_open(const char *path, tl_status eof_status, tl_file_src *src,
                           uint64_t *size);
/* A tl_gguf_read_fn over a tl_file_src: exactly len bytes at offset, or an error. */
tl_status tl_file_src_read(void *src, uint64_t offset, void *dst, size_t len);
void tl_file_src_close(tl_file_src *src);

#endif

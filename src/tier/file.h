/* file.h - read-only access to the user's model file (synchronous pread path).
 * Only tier/ performs IO; model code asks for (offset, length) into its buffers. */
#ifndef TL_TIER_FILE_H
#define TL_TIER_FILE_H

#include <stddef.h>
#include <stdint.h>
#include "tierllm.h"

typedef struct tl_file {
    int fd;
    uint64_t size;
    char *path;
} tl_file;

/* Opens read-only; the file is never written. */
tl_status tl_file_open_ro(const char *path, tl_file *f);
void tl_file_close(tl_file *f);
/* Reads exactly len bytes at offset (TL_ERR_IO on error, TL_ERR_FORMAT on EOF). */
tl_status tl_file_read_at(const tl_file *f, uint64_t offset, void *dst, size_t len);

#endif

/* out_file.h - an output file the user named, written whole or not at all.
 *
 * The data goes to a hidden temporary file in the target's directory; commit fsyncs it,
 * renames it over the target and fsyncs the directory. The target is never truncated in
 * place, so a failure (disk full, an error, a crash) leaves either the old file or the
 * new one, and a failure before commit removes the temporary. Only regular files are
 * replaced: a device, directory, FIFO or socket is refused before anything is written
 * (as root, renaming over /dev/null would replace the device node).
 */
#ifndef TL_BASE_OUT_FILE_H
#define TL_BASE_OUT_FILE_H

#include <stddef.h>
#include "tierllm.h"

typedef struct tl_out_file {
    int fd;          /* the temporary file, open for writing */
    char *path;      /* the target, symlinks resolved: what commit replaces */
    char *tmp_path;  /* the temporary file */
} tl_out_file;

/* TL_OK if `path` may be written: it is missing and its directory exists, or it is a
 * regular file. A symlink is followed: the file it points to is the target. Otherwise
 * TL_ERR_INVALID (a device, directory, FIFO or socket: the message names the path and
 * what it is) or TL_ERR_IO (the directory is missing, a stat error). Writes nothing. */
tl_status tl_out_check_target(const char *path);

/* Checks the target, then creates the temporary file beside it with the existing
 * target's mode (and owner, where allowed), else 0644 less the umask. On error *f holds
 * nothing to free. */
tl_status tl_out_file_open(tl_out_file *f, const char *path);

/* Writes all of data (retrying short writes); TL_ERR_NOSPACE when the disk is full. */
tl_status tl_out_file_write(tl_out_file *f, const void *data, size_t n);

/* Fsyncs the temporary, checks the target again, renames the temporary over
 * it and fsyncs the directory. Always releases f; on error the temporary is removed and
 * the old target is untouched. */
tl_status tl_out_file_commit(tl_out_file *f);

/* Closes and removes the temporary file; releases f. Safe on a zeroed or released f. */
void tl_out_file_abort(tl_out_file *f);

/* The directory part of path ("." when it has none), malloc'd; NULL when out of memory. */
char *tl_out_dir_of(const char *path);
/* Fsyncs the directory holding path, so that a name created or renamed there survives a
 * crash. 0, or -1 with errno (a directory that cannot be synced at all counts as synced). */
int tl_out_sync_dir(const char *path);

#endif

/* panel_copy.h - a converted copy of the model file for streaming weights already in the
 * int8 kernels' 32-row panels (kernels.h), so streamed units are not repacked each pass.
 *
 * The copy is the model file byte for byte except that every tensor the residency keeps in
 * panels (model/placement.h), the token embedding excepted (its rows are also read one at
 * a time from the file), is stored repacked: same size, same offsets, so a unit's reads
 * are the same ranges of another file. It lives in the cache directory under a name
 * derived from the model file's identity (path, size, modification time, inode) and the
 * panel layout's version, is written to a temporary name and renamed when complete (a
 * partial copy is never used), and is written once: later runs on the same file reuse
 * it. The user's file is only read.
 */
#ifndef TL_EXEC_PANEL_COPY_H
#define TL_EXEC_PANEL_COPY_H

#include <stdint.h>
#include "exec/model_handle.h"

typedef struct tl_panel_copy_info {
    int used;           /* 1: streamed weights now come from the copy */
    int created;        /* 1: written by this call (else reused or not needed) */
    uint64_t bytes;     /* the copy's size */
    double seconds;     /* writing it (0 when reused) */
    char path[1024];
} tl_panel_copy_info;

/* Before the weights are placed: opens the copy in `dir` (the cache directory when NULL),
 * writing it first when absent, and makes the model read its weights from it. Nothing to
 * do (info->used = 0, TL_OK) when no tensor is kept in panels on this CPU. Errors leave
 * the model reading its own file and no partial copy behind (a complete one that could
 * not be opened stays, for the next run): TL_ERR_NOSPACE when the directory's
 * filesystem lacks room for the copy (checked before writing), TL_ERR_IO on a failed read
 * or write, TL_ERR_INVALID when the weights are already placed. The conversion's buffers
 * come from the model's budget. */
tl_status tl_panel_copy_use(tl_model *m, const char *dir, tl_panel_copy_info *info);

#endif

/* batch_output.h - the output file of `tierllm batch`, which never loses finished work.
 *
 * Two steps. batch_out_prepare runs before anything else and changes nothing on disk: it
 * refuses a target that is not a regular file, is the input file, is being written by
 * another run (flock), or is non-empty without --resume or --overwrite; under --resume it
 * reads the ids already finished, and finds a last line torn by a crash (our own output:
 * it is cut and redone). batch_out_begin runs once everything else has been validated:
 * it creates the file (appearing already locked), replaces it atomically (--overwrite), or
 * cuts the torn line (--resume). From then on each result line goes out in one O_APPEND
 * write (a short write is finished, a failed one is cut off again), and batch_out_sync
 * makes the lines durable at each block's end. The lock is held until batch_out_close.
 */
#ifndef TL_TOOLS_BATCH_OUTPUT_H
#define TL_TOOLS_BATCH_OUTPUT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

enum { BATCH_OUT_NEW = 0, BATCH_OUT_RESUME = 1, BATCH_OUT_OVERWRITE = 2 };

typedef struct batch_out {
    char *path;         /* the target (symlinks resolved when it exists) */
    int mode;
    int fd;             /* the open, locked output, or -1 */
    int old_fd;         /* the existing target, locked while we start (or -1) */
    int exists;
    off_t keep_bytes;   /* --resume: the complete lines; what follows is torn */
    off_t size;         /* bytes of complete lines in the output now */
    char **done;        /* --resume: sorted canonical ids of the finished lines */
    size_t n_done;
} batch_out;

/* Returns 0, or -1 with the message in err. in_path is the input (refused as the target). */
int batch_out_prepare(batch_out *o, const char *path, const char *in_path, int mode,
                      char *err, size_t err_len);
/* 1 when --resume found canonical id `id` finished. */
int batch_out_is_done(const batch_out *o, const char *id);
int batch_out_begin(batch_out *o, char *err, size_t err_len);
/* Appends one whole line (with its newline). Returns 0, or -1 with the message in err; on
 * failure whatever part of the line reached the file is cut off again. */
int batch_out_write(batch_out *o, const char *line, size_t len, char *err, size_t err_len);
int batch_out_sync(batch_out *o, char *err, size_t err_len);
/* Syncs, unlocks and closes. Returns 0, or -1 with the message in err. */
int batch_out_close(batch_out *o, char *err, size_t err_len);

#endif

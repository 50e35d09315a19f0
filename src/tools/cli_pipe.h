/* cli_pipe.h - `--pipeline` for run and batch: this process as one rank of an mpirun job
 * (exec/pipeline.h). Rank r holds a contiguous range of layers: an even split, or the
 * per-rank layer counts of --pipeline-layers. Rank 0 does the command's work and output;
 * the other ranks serve its steps and print only their own summary to stderr. An error on
 * any rank is printed with the rank's number and ends the whole job (MPI_Abort), so no
 * rank waits for one that has stopped. */
#ifndef TL_TOOLS_CLI_PIPE_H
#define TL_TOOLS_CLI_PIPE_H

#include "tierllm.h"
#include "dist/link.h"
#include "exec/pipeline.h"

typedef struct cli_pipe {
    tl_link *link; /* NULL: one process, no pipeline */
    int rank, size;
    int32_t n_layer; /* the model's */
    int32_t rows;    /* the most rows a step message holds (the attached shape's) */
} cli_pipe;

/* Joins the job and sets mp's layer range for this rank; `split` is NULL (even) or
 * "N0,N1,...", one layer count per rank. Returns an exit code (0: go on). */
int cli_pipe_start(cli_pipe *p, const char *model_path, const char *split, tl_model_params *mp);
/* Attaches the pipe to the opened stage. */
tl_status cli_pipe_attach(cli_pipe *p, tl_model *m, const tl_pipe_shape *shape);
/* After the command: rank 0 tells the others to stop, every rank waits for its sends and
 * leaves the job. With st != TL_OK the error is printed with the rank and the job ends
 * here with a non-zero code everywhere. Returns the exit code. */
int cli_pipe_end(cli_pipe *p, tl_model *m, tl_status st);
/* After an error already printed: ends the whole job with `code` (returns it without a
 * pipeline). */
int cli_pipe_abort(cli_pipe *p, int code);

#endif

/* pipeline.h - pipeline-parallel forward passes across processes (FlexGen's pipeline over
 * ranks, launched with mpirun).
 *
 * Rank r is a stage: a contiguous range of layers (tl_model_params.layer_first/layer_end)
 * with its own residency, KV cache and budget. A step's rows and hidden states flow
 * rank 0 -> 1 -> ... -> last; the last rank sends the logits back to rank 0, which
 * tokenizes, samples and writes. Rank 0 runs the ordinary context or batch code: after its
 * engine step it calls tl_pipe_forward, and tl_pipe_collect when it needs the logits; it
 * may forward further steps first, which is how stages overlap. Every other rank runs
 * tl_pipe_work. The KV cache never moves: each rank keeps its own layers' K/V of every
 * sequence. Sequence ids are rank 0's; a later rank maps each to one of its own and starts
 * it afresh when a step brings the sequence's position 0.
 *
 * Each rank sends from two buffers in turn, so it can compute the next step while the last
 * one is still on its way. The buffers come from the model's budget when the pipe opens,
 * before the weights are placed.
 */
#ifndef TL_EXEC_PIPELINE_H
#define TL_EXEC_PIPELINE_H

#include "exec/engine.h"
#include "dist/link.h"

typedef struct tl_pipe tl_pipe;

/* The shape of the largest step: micro-batches, rows and logit rows over all of them. */
typedef struct tl_pipe_shape {
    int32_t max_mb, max_rows, max_logits;
} tl_pipe_shape;

/* Attaches a pipe on link l to m, which is stage tl_link_rank(l) of tl_link_size(l):
 * allocates its buffers from m's budget (before any placement). */
tl_status tl_pipe_open(tl_model *m, tl_link *l, const tl_pipe_shape *shape);
/* Waits for this rank's sends and frees the pipe (nothing when m has none). */
tl_status tl_pipe_close(tl_model *m);

/* Bytes of a step message's header (padded), sent before every step's hidden states. */
size_t tl_pipe_header_bytes(const tl_pipe *p);
/* Ranks in the pipeline, and this one. */
int tl_pipe_size(const tl_pipe *p);
int tl_pipe_rank(const tl_pipe *p);

/* What this rank's pipe measured: seconds spent waiting on the other ranks (to receive: a
 * later rank the next step from the rank before, rank 0 logits from the last rank; and
 * for a send buffer to come free, when the next rank has not yet taken the step before),
 * out of `since_s`, the seconds since the pipe opened. Waiting is the pipeline's bubble as
 * this rank saw it. */
typedef struct tl_pipe_stats {
    double wait_s, since_s;
} tl_pipe_stats;
void tl_pipe_get_stats(const tl_pipe *p, tl_pipe_stats *out);

/* The link this rank's messages take (to the next rank; the last rank's logits to rank 0),
 * timed by ping-pong once the pipe is open: every rank calls it at the same point.
 * Latency: half the least round trip of a 64-byte message; rate: a message of the pipe's
 * largest step (at most 4 MiB) over half its least round trip; least of
 * TL_PIPE_LINK_REPS each, so a preempted round trip does not count. A later call returns
 * the first measurement. Pairs (0,1), (1,2), ..., (last,0) take turns, so no rank waits
 * on one that waits on it. A failure is the job's: the peer may be left waiting. */
enum { TL_PIPE_LINK_REPS = 5 };
typedef struct tl_pipe_link {
    double latency_s, bps;
    int peer;
} tl_pipe_link;
tl_status tl_pipe_measure_link(tl_pipe *p, tl_pipe_link *out);


/* Rank 0, after its engine step over mb[0..n_mb): sends the rows and hidden states on. */
tl_status tl_pipe_forward(tl_pipe *p, const tl_microbatch *mb, int32_t n_mb);
/* Rank 0: receives into mb[k].logits the logits of the oldest forwarded step not yet
 * collected that wants any; mb and n_mb are that step's. */
tl_status tl_pipe_collect(tl_pipe *p, tl_microbatch *mb, int32_t n_mb);
/* Rank 0: tells the other ranks the run is over (once; later calls do nothing). */
tl_status tl_pipe_finish(tl_pipe *p);
/* Ranks > 0: serve steps with this rank's scratch and KV cache (opened as rank 0's, for
 * max_seqs sequences) until rank 0 finishes. */
tl_status tl_pipe_work(tl_pipe *p, tl_llama_scratch *s, tl_kv *kv, int32_t max_seqs);

/* The contexts of `run` (context.c): the pipe shape of a context opened with these params
 * (one micro-batch of up to n_batch rows, the last row's logits), and the loop ranks > 0
 * run instead of generating: rank 0's context steps, through this rank's layers. */
tl_pipe_shape tl_context_pipe_shape(const tl_model *m, const tl_context_params *p);
tl_status tl_context_pipeline_work(tl_context *c);
/* The same for `batch` (batch.c): the pipe shape of a batch run with these params (a
 * block's micro-batches, their rows and logit rows), and the loop of ranks > 0, which
 * hold the same block state as rank 0 but for its output. Rank 0 runs tl_batch_generate
 * on a model with a pipe; it may not re-plan. */
tl_pipe_shape tl_batch_pipe_shape(const tl_model *m, const tl_batch_params *bp);
/* Waves rank 0 splits a block's num_gb micro-batches into: one per rank, at most num_gb
 * (and TL_PIPE_MAX_WAVES). */
enum { TL_PIPE_MAX_WAVES = 64 };
static inline int32_t tl_batch_pipe_waves(int ranks, int32_t num_gb) {
    int32_t w = ranks < num_gb ? ranks : num_gb;
    return w < TL_PIPE_MAX_WAVES ? w : TL_PIPE_MAX_WAVES;
}
tl_status tl_batch_pipeline_work(tl_model *m, const tl_batch_params *bp, tl_batch_stats *stats);

#endif

/* link.h - moving bytes between the processes of a pipeline: MPI underneath (Open MPI from
 * Debian), or, in a build without MPI, stubs that say so.
 *
 * Point-to-point only, between ranks of one job. Sends are non-blocking into a request the
 * caller waits on before reusing the buffer; receives block with a deadline, so a peer that
 * stopped answering becomes an error naming it instead of a hang. Only the thread that
 * opened the link calls it (MPI_THREAD_FUNNELED). Errors are statuses; only tl_link_abort,
 * which a tool calls after printing its message, ends the job.
 */
#ifndef TL_DIST_LINK_H
#define TL_DIST_LINK_H

#include <stddef.h>
#include <stdint.h>
#include "tierllm.h"

typedef struct tl_link tl_link;
/* A non-blocking send in flight; zero-initialized means none. */
typedef struct tl_link_req {
    int active, peer;
    uint64_t handle[4]; /* the transport's request, opaque here */
} tl_link_req;

/* 1 when this build can link processes (built with MPI). */
int tl_link_available(void);
/* Starts the transport (MPI_Init_thread) once per process. TL_ERR_UNSUPPORTED without MPI. */
tl_status tl_link_open(int *argc, char ***argv, tl_link **out);
/* Ends the transport after every request has completed (MPI_Finalize). */
void tl_link_close(tl_link *l);
int tl_link_rank(const tl_link *l);
int tl_link_size(const tl_link *l);
/* Ranks of the job on this rank's host (itself included): they share its cores, memory
 * bandwidth and disk. */
int tl_link_host_ranks(const tl_link *l);

/* Starts sending `bytes` of buf to `peer` with `tag`; buf must stay untouched until
 * tl_link_wait(req) returns. */
tl_status tl_link_isend(tl_link *l, int peer, int tag, const void *buf, size_t bytes,
                        tl_link_req *req);
/* Waits for a send to complete (nothing when req is not active). */
tl_status tl_link_wait(tl_link *l, tl_link_req *req);
/* Receives one message from `peer` with `tag` into buf (at most cap bytes); *got is its
 * size. A longer message, or none within 600 s, is an error. */
tl_status tl_link_recv(tl_link *l, int peer, int tag, void *buf, size_t cap, size_t *got);
/* Small exchanges every rank makes at the same point of the run (deadlines as above):
 * tl_link_share copies rank 0's n bytes into every rank's buf; tl_link_gather collects n
 * bytes from each rank into rank 0's all[rank * n ...] (the others only send theirs). */
tl_status tl_link_share(tl_link *l, void *buf, size_t n);
tl_status tl_link_gather(tl_link *l, const void *mine, size_t n, void *all);
/* Ends every process of the job with `code` (tools only, after reporting the error). */
void tl_link_abort(tl_link *l, int code);

#endif

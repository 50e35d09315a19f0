/* server.h - the serving core, independent of HTTP: a bounded queue of generation
 * requests in front of one engine thread that owns the continuous-batching scheduler.
 *
 * Any number of threads submit requests and read their text; only the engine thread
 * touches the scheduler (exec/sched.h is not thread-safe). It takes queued requests into
 * the running batch while the scheduler has room (oldest first), steps it, and turns each
 * sampled token into text on the request's own channel: token pieces go through a UTF-8
 * stream (text/tokenizer.h) so a reader only ever sees whole characters, and stop strings
 * are matched on that text, with any tail that could still become a stop string held back
 * until it cannot. A request whose reader lets go before it ends is cancelled in the
 * scheduler at the next step boundary.
 *
 * Admission: at most max_queue requests wait beyond the scheduler's max_seqs in flight;
 * past that tl_server_submit answers TL_ERR_BUSY at once (the HTTP layer's 503), so the
 * memory a burst can claim is bounded. Draining refuses new requests (TL_ERR_CANCELLED)
 * and lets every queued and running one finish.
 *
 * One mutex guards every request's state and the queue; each request has its own
 * condition variable, so a reader wakes only for its own text. The scheduler step runs
 * outside the mutex.
 */
#ifndef TL_SERVE_SERVER_H
#define TL_SERVE_SERVER_H

#include <stddef.h>
#include <stdint.h>
#include "tierllm.h"
#include "exec/sched.h"

typedef struct tl_server tl_server;
typedef struct tl_server_req tl_server_req;

typedef struct tl_server_params {
    tl_sched_params sched;
    int32_t max_queue; /* requests waiting beyond those in flight (default 64) */
} tl_server_params;

tl_server_params tl_server_default_params(void);

/* Opens the scheduler on m (which must outlive the server) and starts the engine thread. */
tl_status tl_server_open(tl_model *m, const tl_server_params *p, tl_server **out);
/* Drains (see tl_server_drain), stops the engine thread and frees everything. Every request
 * must have been released first. */
void tl_server_close(tl_server *s);
/* Refuses new requests from now on (tl_server_submit: TL_ERR_CANCELLED); returns at once. */
void tl_server_stop_accepting(tl_server *s);
/* Stops accepting, then waits until every queued and running request has ended. */
void tl_server_drain(tl_server *s);

/* 0 once the engine has failed (a weight read error ends every request, and the
 * scheduler refuses work from then on): /health reports it. */
int tl_server_healthy(tl_server *s);
/* The scheduler's parameters as opened (n_ctx resolved). */
const tl_sched_params *tl_server_sched_params(const tl_server *s);

#define TL_SERVER_MAX_STOP 4

typedef struct tl_server_gen {
    const int32_t *prompt; /* n_prompt >= 1 token ids (copied) */
    int32_t n_prompt;
    int32_t max_tokens;    /* >= 1 */
    tl_sampler_params sampler;
    const char *stop[TL_SERVER_MAX_STOP]; /* non-empty UTF-8 stop strings (copied) */
    int32_t n_stop;
    int32_t stop_tokens[TL_SERVER_MAX_STOP]; /* tokens that end the text (not emitted),
                                                beside the model's EOS */
    int32_t n_stop_tokens;
    int ignore_eos;        /* 1: the model's EOS does not end the text (llama.cpp's and
                              vLLM's ignore_eos; benchmarks) */
} tl_server_gen;

/* Queues a request. TL_ERR_BUSY when the queue is full, TL_ERR_CANCELLED when the server
 * is draining, TL_ERR_INVALID for a bad request, TL_ERR_NOMEM. On TL_OK the caller holds
 * *out until tl_server_req_release. */
tl_status tl_server_submit(tl_server *s, const tl_server_gen *g, tl_server_req **out);

enum { TL_SERVER_RUNNING = 0, TL_SERVER_STOP = 1, TL_SERVER_LENGTH = 2, TL_SERVER_ERROR = 3 };

typedef struct tl_server_status {
    int32_t finish;                /* TL_SERVER_RUNNING or why the request ended */
    int32_t n_prompt, n_generated; /* tokens so far */
    tl_status error;               /* with TL_SERVER_ERROR */
    char message[256];
} tl_server_status;

/* Copies at most cap bytes of text not yet read (whole UTF-8 characters) into buf, waiting
 * up to timeout_ms for some when there is none. Returns the bytes copied; *st tells
 * whether the request has ended (then no more text follows once this returns 0). */
size_t tl_server_req_read(tl_server_req *r, char *buf, size_t cap, int timeout_ms,
                          tl_server_status *st);
/* The reader is done with the request: an unfinished one is cancelled. */
void tl_server_req_release(tl_server_req *r);

typedef struct tl_server_stats {
    tl_sched_stats sched;  /* as of the last step */
    int32_t queued;        /* waiting for a place in the batch */
    int32_t running;       /* in the batch */
    uint64_t rejected;     /* refused because the queue was full */
} tl_server_stats;

void tl_server_get_stats(tl_server *s, tl_server_stats *out);

#endif

/* aio_internal.h - what aio.c (front end, thread pool) shares with aio_uring.c (the
 * io_uring backend). Not part of the tier API. Everything here is guarded by tl_aio.mu
 * unless a comment says otherwise. */
#ifndef TL_TIER_AIO_INTERNAL_H
#define TL_TIER_AIO_INTERNAL_H

#include <pthread.h>
#include "tier/aio.h"

typedef struct tl_aio_req tl_aio_req;
struct tl_aio_req {
    uint64_t tag;
    tl_tier *tier;
    uint8_t *buf;
    uint64_t offset;
    size_t len;
    size_t cursor;    /* bytes already carved into chunks */
    int outstanding;  /* chunks carved but not finished */
    int is_write, uring, queued, done, waiting;
    int urgent;       /* its class (tl_aio_class): queued ahead of every request of a
                         lower class; nonzero = urgent */
    tl_status status; /* first failure */
    char msg[512];    /* its message, delivered to the waiter's thread */
    tl_aio_req *hnext;        /* tag hash chain */
    tl_aio_req *qprev, *qnext; /* pending FIFO */
};

/* One in-flight piece of a request. The slot array has queue_depth entries. While a
 * chunk is in flight, only the thread running it touches done. */
typedef struct tl_aio_chunk {
    tl_aio_req *req;
    uint64_t offset; /* in the tier */
    uint8_t *buf;
    size_t len, done;
    struct tl_aio_chunk *next_free;
} tl_aio_chunk;

typedef struct tl_aio_uring tl_aio_uring;

/* slots beyond queue_depth that only urgent requests use (aio.c): a micro-batch's KV
 * pages go to the device together instead of a few at a time, one round trip each */
enum { TL_AIO_BUCKETS = 256, TL_AIO_URGENT_SLOTS = 16 };

struct tl_aio {
    tl_aio_params p;
    pthread_mutex_t mu;
    pthread_cond_t pool_cv; /* pool threads: work at the head of the FIFO, or stop */
    pthread_cond_t done_cv; /* waiters: some request completed */
    tl_aio_req *head, *tail; /* requests with chunks left to carve: by class, highest
                                first, each class in submission order */
    tl_aio_req *class_tail[TL_AIO_CLASSES]; /* the last request of each urgent class in
                                               the FIFO, or NULL ([0] unused) */
    tl_aio_req *buckets[TL_AIO_BUCKETS];
    tl_aio_chunk *slots, *free_slots;
    int inflight, inflight_r, inflight_w;
    int inflight_urgent; /* chunks of urgent requests in flight: ordinary ones wait */
    double r_start, w_start;
    tl_aio_stats stats;
    int stopping;
    pthread_t *threads;
    int n_threads;
    tl_aio_uring *uring; /* NULL when io_uring is not in use */
};

/* Carves the next chunk off the head request if it belongs to this backend (uring 0/1)
 * and fewer than queue_depth chunks are in flight; NULL otherwise. */
tl_aio_chunk *tl_aio__take(tl_aio *q, int uring);
/* Retires a chunk: stats, request completion, error recording (msg may be NULL when st
 * is TL_OK), slot freed, next chunk kicked. */
void tl_aio__finish(tl_aio *q, tl_aio_chunk *c, tl_status st, const char *msg);

/* io_uring backend (aio_uring.c). start: probes, sets q->uring and starts the IO thread;
 * on failure returns an error with a message and leaves q->uring NULL. notify: wakes the
 * IO thread (mu held). stop: joins the thread (mu not held, q->stopping set) and frees. */
tl_status tl_aio__uring_start(tl_aio *q);
void tl_aio__uring_notify(tl_aio_uring *u);
void tl_aio__uring_stop(tl_aio *q);

/* Zero-fills the rest of a read chunk that reached the tier's end; 1 if it did. */
int tl_aio__past_end(tl_aio_chunk *c);

#endif

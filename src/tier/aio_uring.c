/* aio_uring.c - the io_uring backend of the aio queue (liburing).
 *
 * One IO thread owns the ring: it carves chunks of io_uring-routed requests off the
 * FIFO (tl_aio__take), keeps them in flight as READ/WRITE SQEs (user_data = the chunk),
 * reaps CQEs, resubmits the remainder of short transfers, and retires chunks with
 * tl_aio__finish. It sleeps only in io_uring_enter; other threads wake it through an
 * eventfd that always has a POLL_ADD armed in the ring (user_data 0). The eventfd is
 * drained before the FIFO is looked at, so no wake-up is lost.
 * Without liburing (TL_HAVE_URING undefined) the probe fails and the pool is used.
 */
#include "tier/aio_internal.h"
#include "base/status.h"

#ifdef TL_HAVE_URING

#include <errno.h>
#include <inttypes.h>
#include <liburing.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

struct tl_aio_uring {
    struct io_uring ring;
    int efd;
    pthread_t thread;
    int inflight; /* IO SQEs in flight (IO thread only) */
};

void tl_aio__uring_notify(tl_aio_uring *u) {
    uint64_t one = 1;
    ssize_t r = write(u->efd, &one, sizeof one);
    (void)r; /* EAGAIN means the counter is already non-zero: it is awake anyway */
}

static struct io_uring_sqe *get_sqe(tl_aio_uring *u) {
    struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
    if (!sqe) { /* never expected: the SQ has room for every slot + 1 */
        io_uring_submit(&u->ring);
        sqe = io_uring_get_sqe(&u->ring);
    }
    return sqe;
}

static void prep_chunk(tl_aio_uring *u, tl_aio_chunk *c) {
    struct io_uring_sqe *sqe = get_sqe(u);
    tl_aio_req *r = c->req;
    unsigned n = (unsigned)(c->len - c->done);
    if (r->is_write)
        io_uring_prep_write(sqe, r->tier->fd, c->buf + c->done, n, c->offset + c->done);
    else
        io_uring_prep_read(sqe, r->tier->fd, c->buf + c->done, n, c->offset + c->done);
    io_uring_sqe_set_data(sqe, c);
}

static void arm_poll(tl_aio_uring *u) {
    struct io_uring_sqe *sqe = get_sqe(u);
    io_uring_prep_poll_add(sqe, u->efd, POLLIN);
    io_uring_sqe_set_data(sqe, NULL);
}

/* Handles one IO completion. Returns 1 if the chunk is finished (status in *st and
 * message in msg), 0 if its remainder was resubmitted. */
static int complete(tl_aio_uring *u, tl_aio_chunk *c, int res, tl_status *st, char *msg,
                    size_t cap) {
    tl_aio_req *r = c->req;
    const char *what = r->is_write ? "write" : "read";
    uint64_t off = c->offset + c->done;
    if (res == -EINTR || res == -EAGAIN) {
        prep_chunk(u, c);
        return 0;
    }
    if (res < 0) {
        int e = -res;
        *st = (e == ENOSPC || e == EDQUOT) ? TL_ERR_NOSPACE : TL_ERR_IO;
        snprintf(msg, cap, "%s%s %s at offset %" PRIu64 ": %s",
                 *st == TL_ERR_NOSPACE ? "disk full: " : "", what, r->tier->name, off,
                 strerror(e));
        return 1;
    }
    c->done += (size_t)res;
    if (tl_aio__past_end(c)) {
        *st = TL_OK;
        return 1;
    }
    if (res == 0) {
        *st = TL_ERR_IO;
        snprintf(msg, cap, "%s %s at offset %" PRIu64 ": %s", what, r->tier->name, off,
                 r->is_write ? "made no progress" : "truncated: end of file");
        return 1;
    }
    if (c->done < c->len) {
        prep_chunk(u, c);
        return 0;
    }
    *st = TL_OK;
    return 1;
}

static void *uring_main(void *arg) {
    tl_aio *q = arg;
    tl_aio_uring *u = q->uring;
    char msg[400];
    int rearm = 1;
    for (;;) {
        if (rearm) {
            arm_poll(u);
            rearm = 0;
        }
        pthread_mutex_lock(&q->mu);
        tl_aio_chunk *c;
        while ((c = tl_aio__take(q, 1)) != NULL) {
            prep_chunk(u, c);
            u->inflight++;
        }
        int stop = q->stopping && !q->head && u->inflight == 0;
        pthread_mutex_unlock(&q->mu);
        if (stop) break;

        int ret = io_uring_submit_and_wait(&u->ring, 1);
        if (ret < 0 && ret != -EINTR && ret != -EAGAIN && ret != -EBUSY) {
            /* Not expected with a CQ twice the SQ. Report it and back off instead of
             * spinning; in-flight SQEs still complete and are reaped below. */
            fprintf(stderr, "tierllm: io_uring_submit_and_wait: %s\n", strerror(-ret));
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
        struct io_uring_cqe *cqe;
        unsigned head, seen = 0;
        int locked = 0;
        io_uring_for_each_cqe(&u->ring, head, cqe) {
            seen++;
            tl_aio_chunk *ch = io_uring_cqe_get_data(cqe);
            if (!ch) { /* the eventfd fired: drain it, then look at the FIFO again */
                uint64_t v;
                ssize_t rr = read(u->efd, &v, sizeof v);
                (void)rr;
                rearm = 1;
                continue;
            }
            tl_status st = TL_OK;
            if (!complete(u, ch, cqe->res, &st, msg, sizeof msg)) continue;
            if (!locked) {
                pthread_mutex_lock(&q->mu);
                locked = 1;
            }
            u->inflight--;
            tl_aio__finish(q, ch, st, st == TL_OK ? NULL : msg);
        }
        if (locked) pthread_mutex_unlock(&q->mu);
        io_uring_cq_advance(&u->ring, seen);
    }
    return NULL;
}

tl_status tl_aio__uring_start(tl_aio *q) {
    tl_aio_uring *u = calloc(1, sizeof *u);
    if (!u) return tl_error_set(TL_ERR_NOMEM, "io_uring: out of memory");
    int ret = io_uring_queue_init((unsigned)(q->p.queue_depth + TL_AIO_URGENT_SLOTS) + 1, &u->ring, 0);
    if (ret < 0) {
        free(u);
        return tl_error_set(TL_ERR_UNSUPPORTED, "io_uring unavailable: io_uring_setup: %s",
                            strerror(-ret));
    }
    struct io_uring_probe *probe = io_uring_get_probe_ring(&u->ring);
    int ok = probe && io_uring_opcode_supported(probe, IORING_OP_READ) &&
             io_uring_opcode_supported(probe, IORING_OP_WRITE) &&
             io_uring_opcode_supported(probe, IORING_OP_POLL_ADD);
    if (probe) io_uring_free_probe(probe);
    if (!ok) {
        io_uring_queue_exit(&u->ring);
        free(u);
        return tl_error_set(TL_ERR_UNSUPPORTED,
                            "io_uring unavailable: kernel lacks READ/WRITE/POLL_ADD");
    }
    u->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (u->efd < 0) {
        int e = errno;
        io_uring_queue_exit(&u->ring);
        free(u);
        return tl_error_set(TL_ERR_UNSUPPORTED, "io_uring unavailable: eventfd: %s",
                            strerror(e));
    }
    q->uring = u;
    int e = pthread_create(&u->thread, NULL, uring_main, q);
    if (e != 0) {
        q->uring = NULL;
        close(u->efd);
        io_uring_queue_exit(&u->ring);
        free(u);
        return tl_error_set(TL_ERR_NOMEM, "io_uring: cannot start IO thread: %s",
                            strerror(e));
    }
    return TL_OK;
}

void tl_aio__uring_stop(tl_aio *q) {
    tl_aio_uring *u = q->uring;
    if (!u) return;
    pthread_join(u->thread, NULL);
    io_uring_queue_exit(&u->ring);
    close(u->efd);
    free(u);
    q->uring = NULL;
}

#else /* !TL_HAVE_URING */

tl_status tl_aio__uring_start(tl_aio *q) {
    (void)q;
    return tl_error_set(TL_ERR_UNSUPPORTED, "io_uring unavailable: built without liburing");
}

void tl_aio__uring_notify(tl_aio_uring *u) { (void)u; }

void tl_aio__uring_stop(tl_aio *q) { (void)q; }

#endif

/* aio.c - the asynchronous IO queue: requests, chunking, tags, stats, and the thread
 * pool backend (the io_uring backend lives in aio_uring.c).
 *
 * Invariants (all under q->mu):
 * - Pending requests sit in one FIFO ordered by class (tl_aio_class): reads needed now,
 *   then urgent ones (tl_aio_read_urgent), then the others, each class in submission
 *   order; chunks are carved off the head only. So an urgent read waits for the chunks
 *   already in flight, never for queued ones of a lower class: a KV page that attention
 *   needs next is not stuck behind layers of weights read ahead, which would stall the
 *   layer that needs it for as long as the read-ahead takes to drain; and a page that
 *   compute waits for this moment is not stuck behind the next layer's prefetch.
 * - At most queue_depth chunks are in flight across all requests and both backends, plus
 *   up to TL_AIO_URGENT_SLOTS more for urgent requests (so an urgent read starts at once,
 *   not when a weight chunk finishes); a chunk occupies one slot from carve to finish.
 * - No ordinary chunk starts while an urgent one is in flight: the device then serves
 *   the urgent reads behind only the chunks it already has, not also behind the ones
 *   the queue would keep submitting meanwhile: a device shares its time among what it
 *   holds, so a small read beside a stream that is kept refilled waits many chunk times,
 *   beside a stream held back a few at most.
 * - A request is done when all its bytes were carved and no chunk is outstanding. Its
 *   first failure is kept (status + message) and its uncarved rest is dropped.
 * - Requests live in the tag table from submit until tl_aio_wait (or close) frees them.
 * - Threads sleep on condition variables (the io_uring thread in io_uring_enter); no
 *   thread ever spins.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tier/aio_internal.h"
#include "base/clock.h"
#include "base/status.h"

enum { AIO_DEFAULT_DEPTH = 8, AIO_MAX_DEPTH = 1024 };
#define AIO_DEFAULT_CHUNK ((size_t)1 << 20)
#define AIO_MAX_CHUNK ((size_t)1 << 30)

tl_aio_params tl_aio_default_params(void) {
    tl_aio_params p;
    p.backend = TL_AIO_AUTO;
    p.queue_depth = AIO_DEFAULT_DEPTH;
    p.chunk_bytes = AIO_DEFAULT_CHUNK;
    p.n_threads = 0; /* 0 = queue_depth + the urgent slots */
    return p;
}

static unsigned tag_bucket(uint64_t tag) {
    return (unsigned)((tag * 0x9E3779B97F4A7C15ull) >> 56) % TL_AIO_BUCKETS;
}

static tl_aio_req **tag_find(tl_aio *q, uint64_t tag) {
    tl_aio_req **pp = &q->buckets[tag_bucket(tag)];
    while (*pp && (*pp)->tag != tag) pp = &(*pp)->hnext;
    return pp;
}

int tl_aio_class_depth(int queue_depth, tl_aio_class cls) {
    return cls == TL_AIO_ORDINARY ? queue_depth : queue_depth + TL_AIO_URGENT_SLOTS;
}

/* Chunks that may be in flight when the head request is carved; none for an ordinary
 * request while urgent chunks are out (0 makes it wait: see the top of the file). */
static int depth_for(const tl_aio *q, const tl_aio_req *head) {
    if (head->urgent) return tl_aio_class_depth(q->p.queue_depth, (tl_aio_class)head->urgent);
    return q->inflight_urgent > 0 ? 0 : q->p.queue_depth;
}

/* Wakes whoever can start the head request's next chunk. */
static void kick(tl_aio *q) {
    if (!q->head || q->inflight >= depth_for(q, q->head)) return;
    if (q->head->uring)
        tl_aio__uring_notify(q->uring);
    else
        pthread_cond_signal(&q->pool_cv);
}

static void fifo_remove(tl_aio *q, tl_aio_req *r) {
    if (r->urgent && q->class_tail[r->urgent] == r) /* each class is one run */
        q->class_tail[r->urgent] = r->qprev && r->qprev->urgent == r->urgent ? r->qprev : NULL;
    if (r->qprev) r->qprev->qnext = r->qnext;
    else q->head = r->qnext;
    if (r->qnext) r->qnext->qprev = r->qprev;
    else q->tail = r->qprev;
    r->qprev = r->qnext = NULL;
    r->queued = 0;
    if (q->stopping && !q->head) { /* threads exit once the FIFO is drained */
        pthread_cond_broadcast(&q->pool_cv);
        if (q->uring) tl_aio__uring_notify(q->uring);
    }
}

static void req_maybe_done(tl_aio *q, tl_aio_req *r) {
    if (!r->done && r->cursor == r->len && r->outstanding == 0) {
        r->done = 1;
        pthread_cond_broadcast(&q->done_cv);
    }
}

tl_aio_chunk *tl_aio__take(tl_aio *q, int uring) {
    tl_aio_req *r = q->head;
    if (!r || r->uring != uring || q->inflight >= depth_for(q, r) || !q->free_slots)
        return NULL;
    tl_aio_chunk *c = q->free_slots;
    q->free_slots = c->next_free;
    size_t n = r->len - r->cursor;
    if (n > q->p.chunk_bytes) n = q->p.chunk_bytes;
    c->req = r;
    c->offset = r->offset + r->cursor;
    c->buf = r->buf + r->cursor;
    c->len = n;
    c->done = 0;
    c->next_free = NULL;
    r->cursor += n;
    r->outstanding++;
    if (r->cursor == r->len) fifo_remove(q, r);
    q->inflight++;
    q->inflight_urgent += r->urgent;
    if (r->is_write) {
        if (q->inflight_w++ == 0) q->w_start = tl_now();
    } else {
        if (q->inflight_r++ == 0) q->r_start = tl_now();
    }
    return c;
}

void tl_aio__finish(tl_aio *q, tl_aio_chunk *c, tl_status st, const char *msg) {
    tl_aio_req *r = c->req;
    if (r->is_write) {
        q->stats.bytes_written += c->done;
        if (--q->inflight_w == 0) q->stats.write_busy_s += tl_now() - q->w_start;
    } else {
        q->stats.bytes_read += c->done;
        if (--q->inflight_r == 0) q->stats.read_busy_s += tl_now() - q->r_start;
    }
    if (st != TL_OK && r->status == TL_OK) {
        r->status = st;
        snprintf(r->msg, sizeof r->msg,
                 "aio %s tag %" PRIu64 " (%zu bytes at offset %" PRIu64 " of %s): %s",
                 r->is_write ? "write" : "read", r->tag, r->len, r->offset, r->tier->name,
                 msg ? msg : tl_status_str(st));
        if (r->queued) { /* drop the part not yet started */
            fifo_remove(q, r);
            r->cursor = r->len;
        }
    }
    r->outstanding--;
    q->inflight_urgent -= r->urgent;
    req_maybe_done(q, r);
    c->req = NULL;
    c->next_free = q->free_slots;
    q->free_slots = c;
    q->inflight--;
    kick(q);
}

/* A read that reached the tier's end: the rest of the chunk lies past the end of the
 * file (an O_DIRECT read widened to the alignment) and is zero-filled. */
int tl_aio__past_end(tl_aio_chunk *c) {
    tl_aio_req *r = c->req;
    if (r->is_write || c->done >= c->len || c->offset + c->done < r->tier->size) return 0;
    memset(c->buf + c->done, 0, c->len - c->done);
    c->done = c->len;
    return 1;
}

/* Runs one chunk to the end through the tier (pool threads; mu not held). */
static tl_status run_chunk(tl_aio_chunk *c, char *msg, size_t cap) {
    tl_aio_req *r = c->req;
    tl_tier *t = r->tier;
    while (c->done < c->len) {
        size_t d = 0;
        uint64_t off = c->offset + c->done;
        tl_status st = r->is_write
                           ? t->ops->write_at(t, off, c->buf + c->done, c->len - c->done, &d)
                           : t->ops->read_at(t, off, c->buf + c->done, c->len - c->done, &d);
        if (st != TL_OK) {
            snprintf(msg, cap, "%s", tl_last_error());
            return st;
        }
        c->done += d;
        if (tl_aio__past_end(c)) break;
        if (d == 0) {
            snprintf(msg, cap, "%s at offset %" PRIu64,
                     r->is_write ? "write made no progress" : "truncated: end of data", off);
            return TL_ERR_IO;
        }
    }
    return TL_OK;
}

static void *pool_main(void *arg) {
    tl_aio *q = arg;
    char msg[400];
    pthread_mutex_lock(&q->mu);
    for (;;) {
        tl_aio_chunk *c = tl_aio__take(q, 0);
        if (c) {
            kick(q); /* maybe another chunk can start too */
            pthread_mutex_unlock(&q->mu);
            tl_status st = run_chunk(c, msg, sizeof msg);
            pthread_mutex_lock(&q->mu);
            tl_aio__finish(q, c, st, st == TL_OK ? NULL : msg);
            continue;
        }
        if (q->stopping && !q->head) break;
        pthread_cond_wait(&q->pool_cv, &q->mu);
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

static void aio_free(tl_aio *q) {
    for (int b = 0; b < TL_AIO_BUCKETS; b++) {
        tl_aio_req *r = q->buckets[b];
        while (r) {
            tl_aio_req *n = r->hnext;
            free(r);
            r = n;
        }
    }
    pthread_cond_destroy(&q->pool_cv);
    pthread_cond_destroy(&q->done_cv);
    pthread_mutex_destroy(&q->mu);
    free(q->threads);
    free(q->slots);
    free(q);
}

/* Stops and joins all threads after the FIFO drains and in-flight chunks finish. */
static void aio_stop(tl_aio *q) {
    pthread_mutex_lock(&q->mu);
    q->stopping = 1;
    pthread_cond_broadcast(&q->pool_cv);
    if (q->uring) tl_aio__uring_notify(q->uring);
    pthread_mutex_unlock(&q->mu);
    for (int i = 0; i < q->n_threads; i++) pthread_join(q->threads[i], NULL);
    q->n_threads = 0;
    if (q->uring) tl_aio__uring_stop(q);
}

tl_status tl_aio_open(const tl_aio_params *params, tl_aio **out) {
    *out = NULL;
    tl_aio_params p = params ? *params : tl_aio_default_params();
    if (p.queue_depth == 0) p.queue_depth = AIO_DEFAULT_DEPTH;
    if (p.chunk_bytes == 0) p.chunk_bytes = AIO_DEFAULT_CHUNK;
    if (p.n_threads == 0) p.n_threads = p.queue_depth + TL_AIO_URGENT_SLOTS;
    if (p.queue_depth < 0 || p.queue_depth > AIO_MAX_DEPTH)
        return tl_error_set(TL_ERR_INVALID, "aio: queue depth %d out of range [1, %d]",
                            p.queue_depth, AIO_MAX_DEPTH);
    if (p.chunk_bytes % TL_TIER_MAX_ALIGN || p.chunk_bytes > AIO_MAX_CHUNK)
        return tl_error_set(TL_ERR_INVALID,
                            "aio: chunk size %zu is not a multiple of %d up to 1 GiB",
                            p.chunk_bytes, (int)TL_TIER_MAX_ALIGN);
    if (p.n_threads < 0 || p.n_threads > AIO_MAX_DEPTH)
        return tl_error_set(TL_ERR_INVALID, "aio: %d IO threads out of range", p.n_threads);
    if (p.backend != TL_AIO_AUTO && p.backend != TL_AIO_POOL && p.backend != TL_AIO_URING)
        return tl_error_set(TL_ERR_INVALID, "aio: unknown backend %d", (int)p.backend);

    tl_aio *q = calloc(1, sizeof *q);
    if (!q) return tl_error_set(TL_ERR_NOMEM, "aio: out of memory");
    q->p = p;
    const int slots = p.queue_depth + TL_AIO_URGENT_SLOTS;
    q->slots = calloc((size_t)slots, sizeof *q->slots);
    q->threads = calloc((size_t)p.n_threads, sizeof *q->threads);
    if (!q->slots || !q->threads) {
        free(q->slots);
        free(q->threads);
        free(q);
        return tl_error_set(TL_ERR_NOMEM, "aio: out of memory");
    }
    for (int i = 0; i < slots; i++) q->slots[i].next_free = i + 1 < slots ? &q->slots[i + 1] : NULL;
    q->free_slots = &q->slots[0];
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->pool_cv, NULL);
    pthread_cond_init(&q->done_cv, NULL);

    if (p.backend != TL_AIO_POOL) {
        tl_status st = tl_aio__uring_start(q);
        if (st != TL_OK && p.backend == TL_AIO_URING) {
            aio_free(q);
            return st;
        }
    }
    for (int i = 0; i < p.n_threads; i++) {
        int e = pthread_create(&q->threads[i], NULL, pool_main, q);
        if (e != 0) {
            aio_stop(q);
            aio_free(q);
            return tl_error_set(TL_ERR_NOMEM, "aio: cannot start IO thread: %s", strerror(e));
        }
        q->n_threads = i + 1;
    }
    tl_error_clear();
    *out = q;
    return TL_OK;
}

void tl_aio_close(tl_aio *q) {
    if (!q) return;
    aio_stop(q);
    aio_free(q);
}

int tl_aio_uses_uring(const tl_aio *q) { return q && q->uring != NULL; }

/* Puts r into the FIFO after the last request of its class or a higher one: at the tail
 * for an ordinary request. */
static void fifo_insert(tl_aio *q, tl_aio_req *r) {
    tl_aio_req *after = r->urgent ? NULL : q->tail;
    for (int c = r->urgent; r->urgent && c < TL_AIO_CLASSES && !after; c++)
        after = q->class_tail[c];
    tl_aio_req *before = after ? after->qnext : q->head;
    r->qprev = after;
    r->qnext = before;
    if (after) after->qnext = r;
    else q->head = r;
    if (before) before->qprev = r;
    else q->tail = r;
    if (r->urgent) q->class_tail[r->urgent] = r;
    r->queued = 1;
}

static tl_status submit(tl_aio *q, tl_tier *t, uint64_t offset, void *buf, size_t len,
                        uint64_t tag, int is_write, int urgent) {
    const char *what = is_write ? "write" : "read";
    if (!q || !t || (!buf && len))
        return tl_error_set(TL_ERR_INVALID, "aio %s tag %" PRIu64 ": null argument", what,
                            tag);
    if (is_write && !t->writable)
        return tl_error_set(TL_ERR_INVALID, "aio write tag %" PRIu64 ": %s is read-only",
                            tag, t->name);
    if (offset + len < offset)
        return tl_error_set(TL_ERR_INVALID, "aio %s tag %" PRIu64 ": offset overflows",
                            what, tag);
    size_t a = t->align ? t->align : 1;
    if (a > 1 && (offset % a || len % a || (uintptr_t)buf % a || q->p.chunk_bytes % a))
        return tl_error_set(TL_ERR_INVALID,
                            "aio %s tag %" PRIu64 ": %zu bytes at offset %" PRIu64
                            " of %s not aligned to %zu",
                            what, tag, len, offset, t->name, a);
    tl_aio_req *r = calloc(1, sizeof *r);
    if (!r) return tl_error_set(TL_ERR_NOMEM, "aio: out of memory");
    r->tag = tag;
    r->tier = t;
    r->buf = buf;
    r->offset = offset;
    r->len = len;
    r->is_write = is_write;
    r->urgent = urgent;
    r->uring = q->uring != NULL && t->fd >= 0;

    pthread_mutex_lock(&q->mu);
    tl_aio_req **pp = tag_find(q, tag);
    if (*pp || q->stopping) {
        int closing = q->stopping;
        pthread_mutex_unlock(&q->mu);
        free(r);
        return tl_error_set(TL_ERR_INVALID, "aio %s: tag %" PRIu64 " %s", what, tag,
                            closing ? "submitted while the queue closes" : "is already in use");
    }
    *pp = r;
    q->stats.requests++;
    if (len == 0) {
        r->done = 1;
    } else {
        fifo_insert(q, r);
        kick(q);
    }
    pthread_mutex_unlock(&q->mu);
    return TL_OK;
}

tl_status tl_aio_read(tl_aio *q, tl_tier *t, uint64_t offset, void *dst, size_t len,
                      uint64_t tag) {
    return submit(q, t, offset, dst, len, tag, 0, 0);
}

tl_status tl_aio_read_urgent(tl_aio *q, tl_tier *t, uint64_t offset, void *dst, size_t len,
                             uint64_t tag) {
    return submit(q, t, offset, dst, len, tag, 0, TL_AIO_SOON);
}

tl_status tl_aio_read_class(tl_aio *q, tl_tier *t, uint64_t offset, void *dst, size_t len,
                            uint64_t tag, tl_aio_class cls) {
    if ((int)cls < TL_AIO_ORDINARY || (int)cls >= TL_AIO_CLASSES)
        return tl_error_set(TL_ERR_INVALID, "aio read tag %" PRIu64 ": class %d", tag, (int)cls);
    return submit(q, t, offset, dst, len, tag, 0, (int)cls);
}

tl_status tl_aio_write(tl_aio *q, tl_tier *t, uint64_t offset, const void *src, size_t len,
                       uint64_t tag) {
    return submit(q, t, offset, (void *)(uintptr_t)src, len, tag, 1, 0);
}

tl_status tl_aio_wait(tl_aio *q, uint64_t tag) {
    if (!q) return tl_error_set(TL_ERR_INVALID, "aio wait: no queue");
    pthread_mutex_lock(&q->mu);
    tl_aio_req **pp = tag_find(q, tag);
    tl_aio_req *r = *pp;
    if (!r || r->waiting) {
        pthread_mutex_unlock(&q->mu);
        return tl_error_set(TL_ERR_INVALID, "aio wait: %s tag %" PRIu64,
                            r ? "another thread is already waiting for" : "unknown", tag);
    }
    r->waiting = 1;
    while (!r->done) pthread_cond_wait(&q->done_cv, &q->mu);
    pp = tag_find(q, tag); /* the chain may have changed while we slept */
    *pp = r->hnext;
    pthread_mutex_unlock(&q->mu);
    tl_status st = r->status;
    if (st != TL_OK) tl_error_set(st, "%s", r->msg);
    free(r);
    return st;
}

int tl_aio_poll(tl_aio *q, uint64_t tag) {
    if (!q) return 0;
    pthread_mutex_lock(&q->mu);
    tl_aio_req *r = *tag_find(q, tag);
    int done = r && r->done;
    pthread_mutex_unlock(&q->mu);
    return done;
}

void tl_aio_get_stats(const tl_aio *q, tl_aio_stats *out) {
    memset(out, 0, sizeof *out);
    if (!q) return;
    tl_aio *m = (tl_aio *)(uintptr_t)q; /* the lock is not part of the logical state */
    pthread_mutex_lock(&m->mu);
    *out = m->stats;
    double now = tl_now();
    if (m->inflight_r) out->read_busy_s += now - m->r_start;
    if (m->inflight_w) out->write_busy_s += now - m->w_start;
    pthread_mutex_unlock(&m->mu);
}

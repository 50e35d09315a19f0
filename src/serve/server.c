/* server.c - the engine thread, the request queue and the per-request text channels
 * (see server.h for what holds).
 *
 * A request is shared by its reader and the engine; it holds a count of two references
 * while queued or running and is freed when the last one goes, so neither side has to
 * know when the other is done. Every field of a request and of the queue is read and
 * written under the server's one mutex; the scheduler is touched by the engine thread
 * alone, and its step (the forward pass) runs with the mutex released, so submitting and
 * reading never wait for compute.
 */
#include "serve/server.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "base/status.h"
#include "text/tokenizer.h"

enum { REQ_QUEUED, REQ_RUNNING, REQ_DONE };

struct tl_server_req {
    tl_server *srv;
    tl_server_req *next;   /* the queue's link */
    pthread_cond_t cv;     /* signalled when text is released or the request ends */
    int refs;              /* the reader's and, until the request ends, the engine's */
    int state;             /* REQ_* */
    int abandoned;         /* the reader let go before the end */
    int64_t id;            /* the scheduler's, while running */
    tl_sched_request rq;   /* its prompt points at `prompt` */
    int32_t *prompt;
    char *stop[TL_SERVER_MAX_STOP];
    size_t stop_len[TL_SERVER_MAX_STOP];
    int32_t n_stop;
    size_t max_stop;       /* the longest stop string's length */
    int32_t stop_tok[TL_SERVER_MAX_STOP];
    int32_t n_stop_tok;
    tl_utf8_stream utf8;   /* bytes of a character not yet complete */
    char *text;            /* the generated text: [0, safe) released, [safe, len) held back
                              because it may still become a stop string */
    size_t len, cap, safe, read_pos;
    tl_server_status st;
};

struct tl_server {
    tl_model *m;
    tl_sched *sched;
    tl_sched_params sp;
    int32_t max_queue;
    pthread_mutex_t mu;
    pthread_cond_t work_cv; /* the engine waits here for requests */
    pthread_cond_t idle_cv; /* drain waits here for the engine to finish */
    pthread_t thread;
    int thread_started;
    tl_server_req *qhead, *qtail;
    int32_t n_queued;
    tl_server_req **running; /* max_seqs slots, n_running used */
    int32_t n_running;
    int accepting, exited;
    tl_sched_event *ev;
    /* sequences to end in the scheduler, recorded under the mutex and ended outside it
     * before the next step: ending one may wait for its KV pages' disk writes */
    int64_t *cancels;
    int32_t n_cancels;
    tl_sched_stats sched_stats;
    uint64_t rejected;
    tl_status engine_error; /* the scheduler's final error (it refuses work after one) */
};

tl_server_params tl_server_default_params(void) {
    tl_server_params p;
    p.sched = tl_sched_default_params();
    p.max_queue = 64;
    return p;
}

const tl_sched_params *tl_server_sched_params(const tl_server *s) { return &s->sp; }

int tl_server_healthy(tl_server *s) {
    pthread_mutex_lock(&s->mu);
    const int ok = s->engine_error == TL_OK;
    pthread_mutex_unlock(&s->mu);
    return ok;
}

/* ---- requests (all under s->mu) ---------------------------------------------------- */

static void req_free(tl_server_req *r) {
    pthread_cond_destroy(&r->cv);
    for (int32_t i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->prompt);
    free(r->text);
    free(r);
}

static void req_unref(tl_server_req *r) {
    if (--r->refs == 0) req_free(r);
}

/* Room for `more` bytes of text beyond len (and a terminating byte). */
static int text_reserve(tl_server_req *r, size_t more) {
    if (r->len + more + 1 <= r->cap) return 1;
    size_t cap = r->cap ? r->cap : 256;
    while (cap < r->len + more + 1) cap *= 2;
    char *t = realloc(r->text, cap);
    if (!t) return 0;
    r->text = t;
    r->cap = cap;
    return 1;
}

/* Finds a stop string in the text not yet released: the text is cut where the earliest
 * one begins and 1 is returned. Otherwise releases everything except the longest tail that
 * is a proper prefix of a stop string. A stop string cannot begin inside the released
 * text: a match starting there would have been a held-back prefix. */
static int apply_stop(tl_server_req *r) {
    if (!r->n_stop) {
        r->safe = r->len;
        return 0;
    }
    const char *best = NULL;
    for (int32_t k = 0; k < r->n_stop; k++) {
        const char *hit = memmem(r->text + r->safe, r->len - r->safe, r->stop[k], r->stop_len[k]);
        if (hit && (!best || hit < best)) best = hit;
    }
    if (best) {
        r->len = r->safe = (size_t)(best - r->text);
        return 1;
    }
    size_t from = r->len >= r->max_stop ? r->len - r->max_stop + 1 : 0;
    if (from < r->safe) from = r->safe;
    for (size_t p = from; p < r->len; p++)
        for (int32_t k = 0; k < r->n_stop; k++) {
            size_t n = r->len - p;
            if (n < r->stop_len[k] && !memcmp(r->text + p, r->stop[k], n)) {
                r->safe = p;
                return 0;
            }
        }
    r->safe = r->len;
    return 0;
}

/* Appends one token's piece; returns 1 when a stop string ended the text. */
static int take_piece(tl_server *s, tl_server_req *r, int32_t tok) {
    const char *bytes;
    size_t n;
    if (tl_token_piece(s->m, tok, &bytes, &n) != TL_OK || !n) return 0;
    if (!text_reserve(r, 3 * n + 3)) {
        r->st.finish = TL_SERVER_ERROR;
        r->st.error = TL_ERR_NOMEM;
        snprintf(r->st.message, sizeof r->st.message, "out of memory");
        return 1;
    }
    r->len += tl_utf8_stream_push(&r->utf8, bytes, n, r->text + r->len);
    return apply_stop(r);
}

static void remove_running(tl_server *s, tl_server_req *r) {
    for (int32_t i = 0; i < s->n_running; i++)
        if (s->running[i] == r) {
            s->running[i] = s->running[--s->n_running];
            return;
        }
}

/* Ends a request. Unless a stop string cut the text there (cut), what is held back is
 * released: the bytes still in the UTF-8 stream, and a tail that looked like the start of
 * a stop string. Then the reader is woken and the engine's reference dropped. */
static void finish(tl_server *s, tl_server_req *r, int32_t why, int cut) {
    if (!cut) {
        char tail[8];
        size_t n = tl_utf8_stream_flush(&r->utf8, tail);
        if (n && text_reserve(r, n)) {
            memcpy(r->text + r->len, tail, n);
            r->len += n;
        }
    }
    r->safe = r->len;
    if (r->st.finish == TL_SERVER_RUNNING) r->st.finish = why;
    if (r->state == REQ_RUNNING) remove_running(s, r);
    r->state = REQ_DONE;
    pthread_cond_broadcast(&r->cv);
    req_unref(r);
}

static void fail(tl_server *s, tl_server_req *r, tl_status st, const char *msg) {
    r->st.finish = TL_SERVER_ERROR;
    r->st.error = st;
    snprintf(r->st.message, sizeof r->st.message, "%s", msg && *msg ? msg : tl_status_str(st));
    finish(s, r, TL_SERVER_ERROR, 0);
}

/* ---- the engine thread ------------------------------------------------------------- */

/* Cancels running requests whose reader has gone. */
static void reap(tl_server *s) {
    for (int32_t i = 0; i < s->n_running;) {
        tl_server_req *r = s->running[i];
        if (r->abandoned) {
            s->cancels[s->n_cancels++] = r->id;
            finish(s, r, TL_SERVER_STOP, 0); /* moves the last slot into i */
        } else {
            i++;
        }
    }
}

/* Moves queued requests into the batch, oldest first, while the scheduler takes them. */
static void admit(tl_server *s) {
    while (s->qhead) {
        tl_server_req *r = s->qhead;
        tl_status st = TL_OK;
        if (!r->abandoned) {
            if (s->n_running >= s->sp.max_seqs) return;
            st = tl_sched_submit(s->sched, &r->rq, &r->id);
            if (st == TL_ERR_BUSY && s->n_running > 0) return; /* room comes as others end */
        }
        s->qhead = r->next;
        if (!s->qhead) s->qtail = NULL;
        s->n_queued--;
        r->next = NULL;
        if (r->abandoned) {
            finish(s, r, TL_SERVER_STOP, 0);
        } else if (st) {
            fail(s, r, st, tl_last_error());
        } else {
            r->state = REQ_RUNNING;
            s->running[s->n_running++] = r;
        }
    }
}

static tl_server_req *find_running(tl_server *s, int64_t id) {
    for (int32_t i = 0; i < s->n_running; i++)
        if (s->running[i]->id == id) return s->running[i];
    return NULL;
}

static int is_stop_token(const tl_server_req *r, int32_t tok) {
    for (int32_t i = 0; i < r->n_stop_tok; i++)
        if (r->stop_tok[i] == tok) return 1;
    return 0;
}

static void deliver(tl_server *s, const tl_sched_event *ev) {
    tl_server_req *r = find_running(s, ev->id);
    if (!r) return;
    r->st.n_prompt = ev->n_prompt;
    r->st.n_generated = ev->n_generated;
    int32_t end = TL_SERVER_RUNNING;
    int cut = 0;
    size_t released = r->safe;
    if (ev->token >= 0 && !r->abandoned) {
        if (is_stop_token(r, ev->token)) {
            end = TL_SERVER_STOP;
        } else if (take_piece(s, r, ev->token)) {
            end = r->st.finish ? r->st.finish : TL_SERVER_STOP;
            cut = 1;
        }
    }
    if (!end && ev->finish != TL_SCHED_RUNNING)
        end = ev->finish == TL_SCHED_STOP ? TL_SERVER_STOP : TL_SERVER_LENGTH;
    if (end) {
        if (ev->finish == TL_SCHED_RUNNING) s->cancels[s->n_cancels++] = r->id;
        finish(s, r, end, cut);
    } else if (r->safe > released) {
        pthread_cond_signal(&r->cv);
    }
}

/* Ends the recorded sequences in the scheduler; called without the mutex (only this thread
 * touches cancels between a step's delivery and the next reap). */
static void end_cancelled(tl_server *s) {
    for (int32_t i = 0; i < s->n_cancels; i++) tl_sched_cancel(s->sched, s->cancels[i]);
    s->n_cancels = 0;
}

static void *engine_main(void *arg) {
    tl_server *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        reap(s);
        if (s->n_cancels) { /* their slots free before admission */
            pthread_mutex_unlock(&s->mu);
            end_cancelled(s);
            pthread_mutex_lock(&s->mu);
            continue;
        }
        admit(s);
        if (s->n_running == 0) { /* then the queue is empty too: admit took or failed all */
            if (!s->accepting) break;
            pthread_cond_wait(&s->work_cv, &s->mu);
            continue;
        }
        pthread_mutex_unlock(&s->mu);
        int32_t n = 0;
        tl_status st = tl_sched_step(s->sched, s->ev, s->sp.max_seqs, &n);
        char msg[256] = "";
        if (st) snprintf(msg, sizeof msg, "%s", tl_last_error());
        tl_sched_stats ss;
        tl_sched_get_stats(s->sched, &ss);
        pthread_mutex_lock(&s->mu);
        s->sched_stats = ss;
        if (st) { /* an engine error (a failed weight read): every running request ends */
            s->engine_error = st;
            while (s->n_running) {
                tl_server_req *r = s->running[0];
                tl_sched_cancel(s->sched, r->id);
                fail(s, r, st, msg);
            }
        } else {
            for (int32_t i = 0; i < n; i++) deliver(s, &s->ev[i]);
        }
    }
    s->exited = 1;
    pthread_cond_broadcast(&s->idle_cv);
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ---- the callers' side ------------------------------------------------------------- */

tl_status tl_server_submit(tl_server *s, const tl_server_gen *g, tl_server_req **out) {
    *out = NULL;
    if (g->n_prompt < 1 || !g->prompt || g->max_tokens < 1 || g->n_stop < 0 ||
        g->n_stop > TL_SERVER_MAX_STOP || g->n_stop_tokens < 0 ||
        g->n_stop_tokens > TL_SERVER_MAX_STOP)
        return tl_error_set(TL_ERR_INVALID, "bad generation request");
    tl_status st = tl_sampler_params_check(&g->sampler);
    if (st) return st;
    tl_server_req *r = calloc(1, sizeof *r);
    if (!r) return tl_error_set(TL_ERR_NOMEM, "out of memory");
    pthread_condattr_t ca; /* timed waits count on the monotonic clock */
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int cerr = pthread_cond_init(&r->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (cerr) {
        free(r);
        return tl_error_set(TL_ERR_NOMEM, "cannot create a condition variable");
    }
    r->srv = s;
    r->refs = 2;
    r->prompt = malloc((size_t)g->n_prompt * sizeof *r->prompt);
    int oom = !r->prompt;
    if (!oom) memcpy(r->prompt, g->prompt, (size_t)g->n_prompt * sizeof *r->prompt);
    for (int32_t i = 0; i < g->n_stop && !oom; i++) {
        size_t n = g->stop[i] ? strlen(g->stop[i]) : 0;
        if (!n) continue;
        if (!(r->stop[r->n_stop] = strdup(g->stop[i]))) {
            oom = 1;
            break;
        }
        r->stop_len[r->n_stop++] = n;
        if (n > r->max_stop) r->max_stop = n;
    }
    r->n_stop_tok = g->n_stop_tokens;
    memcpy(r->stop_tok, g->stop_tokens, (size_t)g->n_stop_tokens * sizeof *r->stop_tok);
    if (oom) {
        req_free(r);
        return tl_error_set(TL_ERR_NOMEM, "out of memory");
    }
    r->rq.prompt = r->prompt;
    r->rq.n_prompt = g->n_prompt;
    r->rq.max_tokens = g->max_tokens;
    r->rq.stop_at_eos = !g->ignore_eos;
    r->rq.sampler = g->sampler;
    r->st.n_prompt = g->n_prompt;
    pthread_mutex_lock(&s->mu);
    if (!s->accepting) {
        st = tl_error_set(TL_ERR_CANCELLED, "the server is shutting down");
    } else if (s->n_queued + s->n_running >= s->sp.max_seqs + s->max_queue) {
        s->rejected++;
        st = tl_error_set(TL_ERR_BUSY, "the server is busy: %d requests running and %d "
                          "waiting; try again later", (int)s->n_running, (int)s->n_queued);
    } else {
        if (s->qtail) s->qtail->next = r;
        else s->qhead = r;
        s->qtail = r;
        s->n_queued++;
        pthread_cond_signal(&s->work_cv);
    }
    pthread_mutex_unlock(&s->mu);
    if (st) {
        req_free(r);
        return st;
    }
    *out = r;
    return TL_OK;
}

size_t tl_server_req_read(tl_server_req *r, char *buf, size_t cap, int timeout_ms,
                          tl_server_status *st) {
    tl_server *s = r->srv;
    pthread_mutex_lock(&s->mu);
    if (r->read_pos >= r->safe && r->state != REQ_DONE && timeout_ms > 0) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += timeout_ms / 1000;
        until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        while (r->read_pos >= r->safe && r->state != REQ_DONE)
            if (pthread_cond_timedwait(&r->cv, &s->mu, &until) == ETIMEDOUT) break;
    }
    size_t avail = r->safe > r->read_pos ? r->safe - r->read_pos : 0;
    size_t n = avail < cap ? avail : cap;
    /* whole characters only: never end inside a UTF-8 sequence */
    while (n > 0 && n < avail && ((unsigned char)r->text[r->read_pos + n] & 0xC0) == 0x80) n--;
    if (n) memcpy(buf, r->text + r->read_pos, n);
    r->read_pos += n;
    *st = r->st;
    pthread_mutex_unlock(&s->mu);
    return n;
}

void tl_server_req_release(tl_server_req *r) {
    if (!r) return;
    tl_server *s = r->srv;
    pthread_mutex_lock(&s->mu);
    if (r->state != REQ_DONE) {
        r->abandoned = 1;
        pthread_cond_signal(&s->work_cv);
    }
    req_unref(r);
    pthread_mutex_unlock(&s->mu);
}

void tl_server_get_stats(tl_server *s, tl_server_stats *out) {
    pthread_mutex_lock(&s->mu);
    out->sched = s->sched_stats;
    out->queued = s->n_queued;
    out->running = s->n_running;
    out->rejected = s->rejected;
    pthread_mutex_unlock(&s->mu);
}

/* ---- lifetime ---------------------------------------------------------------------- */

tl_status tl_server_open(tl_model *m, const tl_server_params *p, tl_server **out) {
    *out = NULL;
    if (p->max_queue < 0)
        return tl_error_set(TL_ERR_INVALID, "max_queue must be >= 0, not %d", (int)p->max_queue);
    tl_server *s = calloc(1, sizeof *s);
    if (!s) return tl_error_set(TL_ERR_NOMEM, "out of memory");
    s->m = m;
    s->max_queue = p->max_queue;
    s->accepting = 1;
    tl_status st = tl_sched_open(m, &p->sched, &s->sched);
    if (st) {
        free(s);
        return st;
    }
    s->sp = *tl_sched_get_params(s->sched);
    s->ev = calloc((size_t)s->sp.max_seqs, sizeof *s->ev);
    s->running = calloc((size_t)s->sp.max_seqs, sizeof *s->running);
    s->cancels = calloc((size_t)s->sp.max_seqs, sizeof *s->cancels);
    if (!s->ev || !s->running || !s->cancels) {
        st = tl_error_set(TL_ERR_NOMEM, "out of memory");
        goto fail_alloc;
    }
    if (pthread_mutex_init(&s->mu, NULL)) {
        st = tl_error_set(TL_ERR_NOMEM, "cannot create a mutex");
        goto fail_alloc;
    }
    if (pthread_cond_init(&s->work_cv, NULL)) {
        st = tl_error_set(TL_ERR_NOMEM, "cannot create a condition variable");
        goto fail_mu;
    }
    if (pthread_cond_init(&s->idle_cv, NULL)) {
        st = tl_error_set(TL_ERR_NOMEM, "cannot create a condition variable");
        goto fail_work;
    }
    int err = pthread_create(&s->thread, NULL, engine_main, s);
    if (err) {
        st = tl_error_set(TL_ERR_NOMEM, "cannot start the engine thread: %s", strerror(err));
        pthread_cond_destroy(&s->idle_cv);
        goto fail_work;
    }
    s->thread_started = 1;
    *out = s;
    return TL_OK;
fail_work:
    pthread_cond_destroy(&s->work_cv);
fail_mu:
    pthread_mutex_destroy(&s->mu);
fail_alloc:
    free(s->ev);
    free(s->running);
    free(s->cancels);
    tl_sched_close(s->sched);
    free(s);
    return st;
}

void tl_server_stop_accepting(tl_server *s) {
    pthread_mutex_lock(&s->mu);
    s->accepting = 0;
    pthread_cond_signal(&s->work_cv);
    pthread_mutex_unlock(&s->mu);
}

void tl_server_drain(tl_server *s) {
    pthread_mutex_lock(&s->mu);
    s->accepting = 0;
    pthread_cond_signal(&s->work_cv);
    while (!s->exited) pthread_cond_wait(&s->idle_cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

void tl_server_close(tl_server *s) {
    if (!s) return;
    tl_server_drain(s);
    pthread_join(s->thread, NULL);
    pthread_cond_destroy(&s->idle_cv);
    pthread_cond_destroy(&s->work_cv);
    pthread_mutex_destroy(&s->mu);
    tl_sched_close(s->sched);
    free(s->ev);
    free(s->running);
    free(s->cancels);
    free(s);
}

/* http.c - HTTP through libmicrohttpd (http.h says what is served and bounded).
 *
 * Why libmicrohttpd: it is maintained (GNU), packaged in Debian (libmicrohttpd-dev), and
 * has what a server facing untrusted clients needs built in: a thread per connection (a
 * slow client holds one thread, never the others), a connection limit, idle timeouts and
 * bounded header memory. What it lacks, a deadline for a whole request whatever the pace
 * its bytes come at, is the watchdog here: each connection is tracked from its start, and
 * one that has not delivered a complete request by its deadline is shut down (the socket
 * is shut down under the tracking mutex, which the close notification also takes, so the
 * descriptor cannot have been closed and reused meanwhile).
 *
 * A generation request blocks its connection's thread: a plain response waits for the
 * whole text, a stream (server-sent events) waits for each piece inside the response
 * callback. Both wait in short slices and look at the socket between them, so a client
 * that hangs up is noticed and its request cancelled in the server core.
 */
#include "serve/http.h"

#include <math.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "base/clock.h"
#include "base/status.h"
#include "serve/metrics.h"

#define WAIT_SLICE_MS 200 /* how often a waiting request looks at its client's socket */

typedef struct conn_track {
    int fd;
    double deadline; /* INFINITY while a complete request is being answered */
    int cut;
    struct conn_track *prev, *next;
} conn_track;

struct tl_http {
    tl_server *srv;
    tl_oai *api;
    tl_http_params p;
    struct MHD_Daemon *d;
    int port;
    tl_metrics metrics;
    pthread_mutex_t mu; /* conns, active */
    pthread_cond_t cv;  /* the watchdog's sleep; also signalled when active drops */
    conn_track *conns;
    int active;         /* requests between their first byte of handling and their end */
    int wd_stop;
    pthread_t wd;
    atomic_int closing; /* stopping: waiting requests give up */
    size_t body_bytes;  /* request bodies buffered now, all connections (under mu) */
    int parsing;        /* requests being parsed and tokenized now (under mu) */
    pthread_cond_t parse_cv;
};

/* Memory a request holds outside the budget while it is read and parsed is bounded over
 * the whole server, not per connection (the budget's promise allows 64 MiB beside it):
 * bodies buffered at once, and parses (a JSON tree of at most TL_OAI_MAX_VALUES values,
 * the prompt's tokens) at once. */
#define BODY_BYTES_MAX ((size_t)24 << 20)
#define PARSING_MAX 2

typedef struct request {
    int ep;
    int answered; /* a response is queued */
    char *body;
    size_t len, cap;
    int too_big;
    int too_busy; /* the server-wide body allowance was full: 503 */
} request;

/* Frees a request's body and gives its bytes back to the server-wide allowance. */
static void drop_body(tl_http *h, request *rq) {
    if (rq->cap) {
        pthread_mutex_lock(&h->mu);
        h->body_bytes -= rq->cap;
        pthread_mutex_unlock(&h->mu);
    }
    free(rq->body);
    rq->body = NULL;
    rq->len = rq->cap = 0;
}

tl_http_params tl_http_default_params(void) {
    tl_http_params p;
    p.host = "127.0.0.1";
    p.port = 8080;
    p.api_key = NULL;
    p.timeout_s = 30;
    p.max_conns = 256;
    p.max_body = (size_t)1 << 20;
    return p;
}

int tl_http_port(const tl_http *h) { return h->port; }

/* ---- connection tracking and the watchdog --------------------------------------------- */

static conn_track *track_of(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

static void set_deadline(tl_http *h, struct MHD_Connection *c, double deadline) {
    conn_track *t = track_of(c);
    if (!t) return;
    pthread_mutex_lock(&h->mu);
    t->deadline = deadline;
    pthread_mutex_unlock(&h->mu);
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
    tl_http *h = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        conn_track *t = ci ? calloc(1, sizeof *t) : NULL;
        if (!t) return; /* untracked: MHD's idle timeout still applies */
        t->fd = ci->connect_fd;
        t->deadline = tl_now() + h->p.timeout_s;
        pthread_mutex_lock(&h->mu);
        t->next = h->conns;
        if (h->conns) h->conns->prev = t;
        h->conns = t;
        pthread_mutex_unlock(&h->mu);
        *socket_context = t;
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        conn_track *t = *socket_context;
        if (!t) return;
        pthread_mutex_lock(&h->mu);
        if (t->prev) t->prev->next = t->next;
        else h->conns = t->next;
        if (t->next) t->next->prev = t->prev;
        pthread_mutex_unlock(&h->mu);
        free(t);
        *socket_context = NULL;
    }
}

static void *watchdog(void *arg) {
    tl_http *h = arg;
    pthread_mutex_lock(&h->mu);
    while (!h->wd_stop) {
        double now = tl_now();
        for (conn_track *t = h->conns; t; t = t->next)
            if (!t->cut && t->deadline < now) {
                shutdown(t->fd, SHUT_RDWR); /* MHD's thread sees the end and closes it */
                t->cut = 1;
            }
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_nsec += 250 * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&h->cv, &h->mu, &until);
    }
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

/* Lets MHD's idle clock restart: a request that waited longer than the timeout for the
 * engine must not be closed as idle the moment it has something to send. Setting the
 * timeout from 0 restarts the connection's activity time. */
static void touch(tl_http *h, struct MHD_Connection *c) {
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)h->p.timeout_s);
}

/* The client closed its end (or the connection broke). */
static int client_gone(int fd) {
    if (fd < 0) return 0;
    struct pollfd pf = {fd, POLLIN | POLLRDHUP, 0};
    if (poll(&pf, 1, 0) <= 0) return 0;
    if (pf.revents & (POLLERR | POLLHUP | POLLRDHUP)) return 1;
    char b;
    return recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

static int conn_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

/* ---- responses ------------------------------------------------------------------------ */

typedef struct header {
    const char *name, *value;
} header;

/* Queues body (malloc'd, taken over; NULL: out of memory) with status and headers. */
static enum MHD_Result reply(tl_http *h, struct MHD_Connection *c, request *rq, int status,
                             const char *ctype, char *body, size_t len, const header *hd,
                             int n_hd) {
    static const char oom[] = "{\"error\": {\"message\": \"out of memory\", \"type\": "
                              "\"server_error\", \"param\": null, \"code\": null}}";
    struct MHD_Response *resp;
    if (body) {
        resp = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
        if (!resp) free(body);
    } else {
        status = MHD_HTTP_INTERNAL_SERVER_ERROR;
        ctype = "application/json";
        resp = MHD_create_response_from_buffer(sizeof oom - 1, (void *)oom,
                                               MHD_RESPMEM_PERSISTENT);
    }
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    for (int i = 0; i < n_hd; i++) MHD_add_response_header(resp, hd[i].name, hd[i].value);
    enum MHD_Result r = MHD_queue_response(c, (unsigned)status, resp);
    MHD_destroy_response(resp);
    rq->answered = 1;
    tl_metrics_count(&h->metrics, rq->ep, status);
    return r;
}

static enum MHD_Result reply_error(tl_http *h, struct MHD_Connection *c, request *rq,
                                   const tl_oai_error *e) {
    header hd[1];
    int n = 0;
    if (e->status == 503) hd[n++] = (header){MHD_HTTP_HEADER_RETRY_AFTER, "1"};
    else if (e->status == 401) hd[n++] = (header){MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer"};
    else if (e->status == 405)
        hd[n++] = (header){MHD_HTTP_HEADER_ALLOW,
                           rq->ep <= TL_EP_CHAT ? "POST" : "GET, HEAD"};
    size_t len = 0;
    char *body = tl_oai_error_body(e, &len);
    return reply(h, c, rq, e->status, "application/json", body, len, hd, n);
}

static enum MHD_Result fail(tl_http *h, struct MHD_Connection *c, request *rq, int status,
                            const char *type, const char *code, const char *fmt,
                            const char *arg) {
    tl_oai_error e;
    tl_oai_fail(&e, status, type, code, NULL, fmt, arg);
    return reply_error(h, c, rq, &e);
}

/* The server core's refusal of a submit as an HTTP error. */
static enum MHD_Result submit_error(tl_http *h, struct MHD_Connection *c, request *rq,
                                    tl_status st) {
    if (st == TL_ERR_BUSY || st == TL_ERR_CANCELLED)
        return fail(h, c, rq, 503, "server_error", st == TL_ERR_BUSY ? "overloaded"
                    : "shutting_down", "%s", tl_last_error());
    if (st == TL_ERR_INVALID || st == TL_ERR_CONTEXT)
        return fail(h, c, rq, 400, "invalid_request_error", NULL, "%s", tl_last_error());
    return fail(h, c, rq, 500, "server_error", NULL, "%s", tl_last_error());
}

/* ---- generation ----------------------------------------------------------------------- */

typedef struct stream {
    tl_http *h;
    struct MHD_Connection *c;
    int fd;
    tl_server_req *req;
    tl_oai_job job;
    int first, done;
    char *pend;           /* the event being sent */
    size_t pend_len, pend_off;
    char text[4096];
} stream;

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    stream *s = cls;
    (void)pos;
    for (;;) {
        if (s->pend_off < s->pend_len) {
            size_t n = s->pend_len - s->pend_off < max ? s->pend_len - s->pend_off : max;
            memcpy(buf, s->pend + s->pend_off, n);
            s->pend_off += n;
            return (ssize_t)n;
        }
        free(s->pend);
        s->pend = NULL;
        s->pend_len = s->pend_off = 0;
        if (s->done) return MHD_CONTENT_READER_END_OF_STREAM;
        tl_server_status st;
        size_t n = tl_server_req_read(s->req, s->text, sizeof s->text, WAIT_SLICE_MS, &st);
        if (n || st.finish) {
            if (n) {
                s->pend = tl_oai_chunk(s->h->api, &s->job, s->text, n, s->first, NULL,
                                       &s->pend_len);
                s->first = 0;
            } else if (st.finish == TL_SERVER_ERROR) {
                tl_oai_error e;
                tl_oai_fail(&e, 500, "server_error", NULL, NULL, "%s", st.message);
                s->pend = tl_oai_stream_error(&e, &s->pend_len);
                s->done = 1;
            } else {
                s->pend = tl_oai_chunk(s->h->api, &s->job, "", 0, s->first, &st, &s->pend_len);
                s->done = 1;
            }
            if (!s->pend) return MHD_CONTENT_READER_END_WITH_ERROR;
            touch(s->h, s->c);
            continue;
        }
        if (atomic_load(&s->h->closing) || client_gone(s->fd))
            return MHD_CONTENT_READER_END_WITH_ERROR;
    }
}

static void stream_free(void *cls) {
    stream *s = cls;
    tl_server_req_release(s->req);
    tl_oai_job_free(&s->job);
    free(s->pend);
    free(s);
}

/* Waits for the whole text of a request; NULL when the client left (or memory ran out,
 * *oom set). */
static char *collect(tl_http *h, int fd, tl_server_req *r, size_t *len, tl_server_status *st,
                     int *oom) {
    size_t cap = 4096;
    char *text = malloc(cap);
    *len = 0;
    *oom = !text;
    while (text) {
        if (cap - *len < 1024) {
            char *t = realloc(text, cap * 2);
            if (!t) {
                *oom = 1;
                break;
            }
            text = t;
            cap *= 2;
        }
        size_t n = tl_server_req_read(r, text + *len, cap - *len - 1, WAIT_SLICE_MS, st);
        *len += n;
        if (!n && st->finish) {
            text[*len] = 0;
            return text;
        }
        /* on every pass, text or not: a client gone while tokens flow stops them */
        if (atomic_load(&h->closing) || client_gone(fd)) break;
    }
    free(text);
    return NULL;
}

static enum MHD_Result generate(tl_http *h, struct MHD_Connection *c, request *rq) {
    tl_oai_job job;
    tl_oai_error e;
    pthread_mutex_lock(&h->mu); /* a few parses at once: see PARSING_MAX */
    while (h->parsing >= PARSING_MAX) pthread_cond_wait(&h->parse_cv, &h->mu);
    h->parsing++;
    pthread_mutex_unlock(&h->mu);
    const int bad = tl_oai_parse(h->api, rq->ep == TL_EP_CHAT, rq->body ? rq->body : "",
                                 rq->len, &job, &e);
    drop_body(h, rq);
    tl_server_req *r = NULL;
    tl_status st = bad ? TL_OK : tl_server_submit(h->srv, &job.gen, &r);
    tl_oai_job_drop_tree(&job); /* submit copied what it keeps (stop strings) */
    pthread_mutex_lock(&h->mu);
    h->parsing--;
    pthread_cond_signal(&h->parse_cv);
    pthread_mutex_unlock(&h->mu);
    if (bad) {
        tl_oai_job_free(&job);
        return reply_error(h, c, rq, &e);
    }
    if (st) {
        tl_oai_job_free(&job);
        return submit_error(h, c, rq, st);
    }
    if (job.stream) {
        stream *s = calloc(1, sizeof *s);
        struct MHD_Response *resp = NULL;
        if (s) {
            *s = (stream){.h = h, .c = c, .fd = conn_fd(c), .req = r, .job = job, .first = 1};
            resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, sizeof s->text + 1024,
                                                     stream_read, s, stream_free);
        }
        if (!resp) { /* stream_free was not registered: undo by hand */
            free(s);
            tl_server_req_release(r);
            tl_oai_job_free(&job);
            return reply(h, c, rq, 500, "application/json", NULL, 0, NULL, 0);
        }
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        enum MHD_Result res = MHD_queue_response(c, MHD_HTTP_OK, resp);
        MHD_destroy_response(resp);
        rq->answered = 1;
        tl_metrics_count(&h->metrics, rq->ep, MHD_HTTP_OK);
        return res;
    }
    size_t len;
    int oom;
    tl_server_status ss;
    char *text = collect(h, conn_fd(c), r, &len, &ss, &oom);
    tl_server_req_release(r);
    if (!text) {
        tl_oai_job_free(&job);
        if (oom) return reply(h, c, rq, 500, "application/json", NULL, 0, NULL, 0);
        return MHD_NO; /* the client has gone: close the connection */
    }
    touch(h, c);
    enum MHD_Result res;
    if (ss.finish == TL_SERVER_ERROR) {
        res = fail(h, c, rq, 500, "server_error", NULL, "%s", ss.message);
    } else {
        size_t n;
        char *body = tl_oai_response(h->api, &job, text, len, &ss, &n);
        res = reply(h, c, rq, 200, "application/json", body, n, NULL, 0);
    }
    free(text);
    tl_oai_job_free(&job);
    return res;
}

/* ---- routing -------------------------------------------------------------------------- */

static int route(const char *url) {
    static const struct {
        const char *path;
        int ep;
    } routes[] = {{"/v1/completions", TL_EP_COMPLETIONS}, {"/v1/chat/completions", TL_EP_CHAT},
                  {"/v1/models", TL_EP_MODELS},           {"/health", TL_EP_HEALTH},
                  {"/metrics", TL_EP_METRICS}};
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (!strcmp(url, routes[i].path)) return routes[i].ep;
    return TL_EP_OTHER;
}

/* Compares the whole key whatever the first difference (no timing hint of the prefix). */
static int key_ok(const char *given, const char *key) {
    size_t n = strlen(key), m = given ? strlen(given) : 0;
    unsigned char diff = (unsigned char)(n != m);
    for (size_t i = 0; i < n; i++) diff |= (unsigned char)(key[i] ^ (i < m ? given[i] : 0));
    return !diff;
}

/* The checks that need no body: path, method, key, declared size. */
static enum MHD_Result check_head(tl_http *h, struct MHD_Connection *c, request *rq,
                                  const char *url, const char *method) {
    if (rq->ep == TL_EP_OTHER)
        return fail(h, c, rq, 404, "invalid_request_error", "not_found",
                    "there is no endpoint %.200s", url);
    int post = rq->ep == TL_EP_COMPLETIONS || rq->ep == TL_EP_CHAT;
    int ok = post ? !strcmp(method, "POST") : !strcmp(method, "GET") || !strcmp(method, "HEAD");
    if (!ok)
        return fail(h, c, rq, 405, "invalid_request_error", "method_not_allowed",
                    "method %.20s is not allowed here", method);
    if (h->p.api_key && rq->ep != TL_EP_HEALTH) {
        const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                       MHD_HTTP_HEADER_AUTHORIZATION);
        if (!auth || strncmp(auth, "Bearer ", 7) || !key_ok(auth + 7, h->p.api_key))
            return fail(h, c, rq, 401, "invalid_request_error", "invalid_api_key", "%s",
                        "a valid API key is required: Authorization: Bearer <key>");
    }
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                 MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl && strtoull(cl, NULL, 10) > h->p.max_body) {
        char lim[32];
        snprintf(lim, sizeof lim, "%zu", h->p.max_body);
        return fail(h, c, rq, 413, "invalid_request_error", "request_too_large",
                    "the request body is larger than %s bytes", lim);
    }
    return MHD_YES;
}

static enum MHD_Result answer(tl_http *h, struct MHD_Connection *c, request *rq) {
    size_t n = 0;
    char *body;
    switch (rq->ep) {
    case TL_EP_HEALTH: {
        const int ok = tl_server_healthy(h->srv);
        body = strdup(ok ? "{\"status\": \"ok\"}" : "{\"status\": \"error\"}");
        return reply(h, c, rq, ok ? 200 : 503, "application/json", body, body ? strlen(body) : 0,
                     NULL, 0);
    }
    case TL_EP_MODELS:
        body = tl_oai_models(h->api, &n);
        return reply(h, c, rq, 200, "application/json", body, n, NULL, 0);
    case TL_EP_METRICS:
        body = tl_metrics_render(&h->metrics, h->srv, &n);
        return reply(h, c, rq, 200, "text/plain; version=0.0.4", body, n, NULL, 0);
    default:
        return generate(h, c, rq);
    }
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload, size_t *upload_size, void **con_cls) {
    tl_http *h = cls;
    request *rq = *con_cls;
    (void)version;
    if (!rq) { /* the headers are in */
        if (!(rq = calloc(1, sizeof *rq))) return MHD_NO;
        rq->ep = route(url);
        *con_cls = rq;
        pthread_mutex_lock(&h->mu);
        h->active++;
        pthread_mutex_unlock(&h->mu);
        set_deadline(h, c, tl_now() + h->p.timeout_s); /* for the body */
        return check_head(h, c, rq, url, method);
    }
    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (rq->answered || rq->too_big || rq->too_busy) return MHD_YES;
        if (rq->len + n > h->p.max_body) {
            drop_body(h, rq);
            rq->too_big = 1;
            return MHD_YES;
        }
        if (rq->len + n + 1 > rq->cap) {
            size_t cap = rq->cap ? rq->cap : 4096;
            while (cap < rq->len + n + 1) cap *= 2;
            if (cap > h->p.max_body + 1) cap = h->p.max_body + 1;
            pthread_mutex_lock(&h->mu);
            const int room = h->body_bytes + (cap - rq->cap) <= BODY_BYTES_MAX;
            if (room) h->body_bytes += cap - rq->cap;
            pthread_mutex_unlock(&h->mu);
            char *b = room ? realloc(rq->body, cap) : NULL;
            if (!b) {
                if (room) { /* give back what was counted */
                    pthread_mutex_lock(&h->mu);
                    h->body_bytes -= cap - rq->cap;
                    pthread_mutex_unlock(&h->mu);
                }
                drop_body(h, rq);
                rq->too_busy = 1;
                return MHD_YES;
            }
            rq->body = b;
            rq->cap = cap;
        }
        memcpy(rq->body + rq->len, upload, n);
        rq->len += n;
        rq->body[rq->len] = 0;
        return MHD_YES;
    }
    if (rq->answered) return MHD_YES;
    set_deadline(h, c, INFINITY); /* complete: answering is bounded by MHD's idle timeout */
    if (rq->too_busy) {
        static const header retry = {"Retry-After", "1"};
        tl_oai_error e;
        tl_oai_fail(&e, 503, "server_error", "overloaded", NULL, "the server is reading too many "
                    "request bodies at once; retry shortly");
        size_t n;
        char *body = tl_oai_error_body(&e, &n);
        return reply(h, c, rq, 503, "application/json", body, n, &retry, 1);
    }
    if (rq->too_big) {
        char lim[32];
        snprintf(lim, sizeof lim, "%zu", h->p.max_body);
        return fail(h, c, rq, 413, "invalid_request_error", "request_too_large",
                    "the request body is larger than %s bytes", lim);
    }
    return answer(h, c, rq);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode code) {
    tl_http *h = cls;
    request *rq = *con_cls;
    (void)code;
    if (!rq) return;
    drop_body(h, rq);
    free(rq);
    *con_cls = NULL;
    set_deadline(h, c, tl_now() + h->p.timeout_s); /* the next request on a kept-alive one */
    pthread_mutex_lock(&h->mu);
    h->active--;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

static void on_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    fputs("tierllm serve: http: ", stderr);
    vfprintf(stderr, fmt, ap);
}

/* ---- lifetime ------------------------------------------------------------------------- */

tl_status tl_http_start(tl_server *srv, tl_oai *api, const tl_http_params *p, tl_http **out) {
    *out = NULL;
    if (p->port < 0 || p->port > 65535 || p->timeout_s < 1 || p->max_conns < 1 ||
        p->max_body < 1)
        return tl_error_set(TL_ERR_INVALID, "http: port %d, timeout %d s, %d connections or "
                            "body limit %zu out of range", p->port, p->timeout_s, p->max_conns,
                            p->max_body);
    tl_http *h = calloc(1, sizeof *h);
    if (!h) return tl_error_set(TL_ERR_NOMEM, "out of memory");
    h->srv = srv;
    h->api = api;
    h->p = *p;
    atomic_init(&h->closing, 0);
    if (tl_metrics_init(&h->metrics)) {
        free(h);
        return tl_error_set(TL_ERR_NOMEM, "cannot create a mutex");
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int bad = pthread_mutex_init(&h->mu, NULL);
    if (!bad && pthread_cond_init(&h->cv, &ca)) {
        pthread_mutex_destroy(&h->mu);
        bad = 1;
    }
    if (!bad && pthread_cond_init(&h->parse_cv, NULL)) {
        pthread_cond_destroy(&h->cv);
        pthread_mutex_destroy(&h->mu);
        bad = 1;
    }
    pthread_condattr_destroy(&ca);
    if (bad) {
        tl_metrics_free(&h->metrics);
        free(h);
        return tl_error_set(TL_ERR_NOMEM, "cannot create a mutex");
    }
    tl_status st = TL_OK;
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    char port[8];
    snprintf(port, sizeof port, "%d", p->port);
    int gai = getaddrinfo(p->host, port, &hints, &ai);
    if (gai) st = tl_error_set(TL_ERR_INVALID, "cannot resolve host '%s': %s", p->host,
                               gai_strerror(gai));
    if (!st) {
        unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                         MHD_USE_ITC | MHD_USE_AUTO | MHD_USE_ERROR_LOG;
        if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
        h->d = MHD_start_daemon(flags, (uint16_t)p->port, NULL, NULL, on_request, h,
                                MHD_OPTION_EXTERNAL_LOGGER, on_log, h,
                                MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                                MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)p->timeout_s,
                                MHD_OPTION_CONNECTION_LIMIT, (unsigned)p->max_conns,
                                MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
                                MHD_OPTION_NOTIFY_CONNECTION, on_connection, h,
                                MHD_OPTION_END);
        if (!h->d)
            st = tl_error_set(TL_ERR_IO, "cannot listen on %s port %d (in use, or not an "
                              "address of this machine?)", p->host, p->port);
    }
    if (ai) freeaddrinfo(ai);
    if (!st) {
        const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
        h->port = di && di->port ? di->port : p->port;
        int err = pthread_create(&h->wd, NULL, watchdog, h);
        if (err) {
            MHD_stop_daemon(h->d);
            st = tl_error_set(TL_ERR_NOMEM, "cannot start a thread: %s", strerror(err));
        }
    }
    if (st) {
        pthread_cond_destroy(&h->parse_cv);
        pthread_cond_destroy(&h->cv);
        pthread_mutex_destroy(&h->mu);
        tl_metrics_free(&h->metrics);
        free(h);
        return st;
    }
    *out = h;
    return TL_OK;
}

void tl_http_quiesce(tl_http *h) {
    MHD_socket fd = MHD_quiesce_daemon(h->d);
    if (fd != MHD_INVALID_SOCKET) close(fd);
}

void tl_http_stop(tl_http *h, int wait_s) {
    if (!h) return;
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += wait_s;
    pthread_mutex_lock(&h->mu);
    while (h->active > 0)
        if (pthread_cond_timedwait(&h->cv, &h->mu, &until)) break;
    pthread_mutex_unlock(&h->mu);
    atomic_store(&h->closing, 1);
    MHD_stop_daemon(h->d);
    pthread_mutex_lock(&h->mu);
    h->wd_stop = 1;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    pthread_join(h->wd, NULL);
    pthread_cond_destroy(&h->parse_cv);
    pthread_cond_destroy(&h->cv);
    pthread_mutex_destroy(&h->mu);
    tl_metrics_free(&h->metrics);
    free(h);
}

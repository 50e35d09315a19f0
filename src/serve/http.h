/* http.h - the OpenAI-compatible HTTP front of the server core, on libmicrohttpd.
 *
 * Endpoints: POST /v1/completions and /v1/chat/completions (JSON, or server-sent events
 * with "stream": true), GET /v1/models, /health and /metrics. Every limit a client could
 * otherwise push on is bounded here: the request body (413 past max_body), the time to
 * send a request's headers and body (timeout_s from the connection's start, whatever the
 * pace: a client trickling bytes is cut off), idle connections (timeout_s), and the
 * number of connections (max_conns, each with its own thread). With api_key set, every
 * endpoint but /health needs "Authorization: Bearer <key>" (401 otherwise).
 */
#ifndef TL_SERVE_HTTP_H
#define TL_SERVE_HTTP_H

#include <stddef.h>
#include "tierllm.h"
#include "serve/openai.h"
#include "serve/server.h"

typedef struct tl_http tl_http;

typedef struct tl_http_params {
    const char *host;    /* address to bind (default "127.0.0.1") */
    int port;            /* 0: a free port, see tl_http_port (default 8080) */
    const char *api_key; /* NULL: no authentication */
    int timeout_s;       /* seconds for a request to arrive, and of idleness (default 30) */
    int max_conns;       /* connections at once (default 256) */
    size_t max_body;     /* request body bytes (default 1 MiB) */
} tl_http_params;

tl_http_params tl_http_default_params(void);

/* Binds and starts serving srv through api (both must outlive the tl_http).
 * TL_ERR_IO when the address cannot be bound. */
tl_status tl_http_start(tl_server *srv, tl_oai *api, const tl_http_params *p, tl_http **out);
/* The port bound (the one chosen when port 0 was asked for). */
int tl_http_port(const tl_http *h);
/* Stops accepting connections; the open ones are served on (the caller stops the server
 * core accepting too, so new requests on them get 503). */
void tl_http_quiesce(tl_http *h);
/* Waits up to wait_s seconds for the requests in progress to be answered in full, then
 * closes every connection and frees h. */
void tl_http_stop(tl_http *h, int wait_s);

#endif

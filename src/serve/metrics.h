/* metrics.h - the server's counters and their Prometheus text (GET /metrics).
 *
 * Requests are counted by endpoint and HTTP status as each response is queued; the
 * engine's figures (tokens, queue depth, sequences in flight, weight bytes read, stall
 * seconds) are read from the server core when the page is written, so nothing here is
 * updated on the engine's path. The counters are guarded by their own mutex: every
 * connection thread counts.
 */
#ifndef TL_SERVE_METRICS_H
#define TL_SERVE_METRICS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include "tierllm.h"
#include "serve/server.h"

/* The endpoints counted by name; everything else is "other". */
enum {
    TL_EP_COMPLETIONS,
    TL_EP_CHAT,
    TL_EP_MODELS,
    TL_EP_HEALTH,
    TL_EP_METRICS,
    TL_EP_OTHER,
    TL_EP_COUNT
};

#define TL_METRICS_STATUSES 16 /* distinct statuses kept per endpoint */

typedef struct tl_metrics {
    pthread_mutex_t mu;
    struct {
        int status;
        uint64_t count;
    } req[TL_EP_COUNT][TL_METRICS_STATUSES];
} tl_metrics;

tl_status tl_metrics_init(tl_metrics *m);
void tl_metrics_free(tl_metrics *m);
const char *tl_metrics_endpoint_name(int ep);
void tl_metrics_count(tl_metrics *m, int ep, int status);
/* The Prometheus text exposition (version 0.0.4): a malloc'd string, or NULL. */
char *tl_metrics_render(tl_metrics *m, tl_server *srv, size_t *len);

#endif

/* metrics.c - counters by endpoint and status, and the Prometheus page (metrics.h). */
#include "serve/metrics.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const ep_names[TL_EP_COUNT] = {
    "/v1/completions", "/v1/chat/completions", "/v1/models", "/health", "/metrics", "other"};

const char *tl_metrics_endpoint_name(int ep) {
    return ep >= 0 && ep < TL_EP_COUNT ? ep_names[ep] : "other";
}

tl_status tl_metrics_init(tl_metrics *m) {
    memset(m, 0, sizeof *m);
    return pthread_mutex_init(&m->mu, NULL) ? TL_ERR_NOMEM : TL_OK;
}

void tl_metrics_free(tl_metrics *m) { pthread_mutex_destroy(&m->mu); }

void tl_metrics_count(tl_metrics *m, int ep, int status) {
    if (ep < 0 || ep >= TL_EP_COUNT) ep = TL_EP_OTHER;
    pthread_mutex_lock(&m->mu);
    for (int i = 0; i < TL_METRICS_STATUSES; i++) {
        if (m->req[ep][i].status == status || m->req[ep][i].status == 0) {
            m->req[ep][i].status = status;
            m->req[ep][i].count++;
            break;
        }
    }
    pthread_mutex_unlock(&m->mu);
}

typedef struct out {
    char *p;
    size_t len, cap;
    int oom;
} out;

static void put(out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(out *o, const char *fmt, ...) {
    if (o->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(o->p + o->len, o->cap - o->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            o->oom = 1;
            return;
        }
        if ((size_t)n < o->cap - o->len) {
            o->len += (size_t)n;
            return;
        }
        size_t cap = o->cap * 2 + (size_t)n;
        char *p = realloc(o->p, cap);
        if (!p) {
            o->oom = 1;
            return;
        }
        o->p = p;
        o->cap = cap;
    }
}

char *tl_metrics_render(tl_metrics *m, tl_server *srv, size_t *len) {
    out o = {malloc(4096), 0, 4096, 0};
    if (!o.p) return NULL;
    put(&o, "# HELP tierllm_requests_total HTTP requests answered, by endpoint and status.\n"
            "# TYPE tierllm_requests_total counter\n");
    pthread_mutex_lock(&m->mu);
    for (int ep = 0; ep < TL_EP_COUNT; ep++)
        for (int i = 0; i < TL_METRICS_STATUSES && m->req[ep][i].status; i++)
            put(&o, "tierllm_requests_total{endpoint=\"%s\",status=\"%d\"} %llu\n", ep_names[ep],
                m->req[ep][i].status, (unsigned long long)m->req[ep][i].count);
    pthread_mutex_unlock(&m->mu);
    tl_server_stats s;
    tl_server_get_stats(srv, &s);
    put(&o, "# HELP tierllm_prompt_tokens_total Prompt tokens computed.\n"
            "# TYPE tierllm_prompt_tokens_total counter\n"
            "tierllm_prompt_tokens_total %llu\n"
            "# HELP tierllm_generated_tokens_total Tokens generated.\n"
            "# TYPE tierllm_generated_tokens_total counter\n"
            "tierllm_generated_tokens_total %llu\n"
            "# HELP tierllm_queue_depth Requests waiting for a place in the batch.\n"
            "# TYPE tierllm_queue_depth gauge\n"
            "tierllm_queue_depth %d\n"
            "# HELP tierllm_active_sequences Sequences in the running batch.\n"
            "# TYPE tierllm_active_sequences gauge\n"
            "tierllm_active_sequences %d\n"
            "# HELP tierllm_rejected_total Requests refused because the queue was full.\n"
            "# TYPE tierllm_rejected_total counter\n"
            "tierllm_rejected_total %llu\n"
            "# HELP tierllm_steps_total Scheduler steps (forward passes over the batch).\n"
            "# TYPE tierllm_steps_total counter\n"
            "tierllm_steps_total %llu\n"
            "# HELP tierllm_step_seconds_total Time spent in scheduler steps.\n"
            "# TYPE tierllm_step_seconds_total counter\n"
            "tierllm_step_seconds_total %.6f\n"
            "# HELP tierllm_weight_bytes_read_total Streamed weight bytes read from disk.\n"
            "# TYPE tierllm_weight_bytes_read_total counter\n"
            "tierllm_weight_bytes_read_total %llu\n"
            "# HELP tierllm_stall_seconds_total Time compute waited for weight reads.\n"
            "# TYPE tierllm_stall_seconds_total counter\n"
            "tierllm_stall_seconds_total %.6f\n"
            "# HELP tierllm_kv_pages_memory_peak KV pages held in memory at once, at the most.\n"
            "# TYPE tierllm_kv_pages_memory_peak gauge\n"
            "tierllm_kv_pages_memory_peak %llu\n"
            "# HELP tierllm_kv_pages_disk_peak KV pages on disk at once, at the most (the spill "
            "file's slots; 0 with the KV all in memory).\n"
            "# TYPE tierllm_kv_pages_disk_peak gauge\n"
            "tierllm_kv_pages_disk_peak %llu\n"
            "# HELP tierllm_kv_bytes_read_total KV bytes read back from disk.\n"
            "# TYPE tierllm_kv_bytes_read_total counter\n"
            "tierllm_kv_bytes_read_total %llu\n",
        (unsigned long long)s.sched.prompt_tokens, (unsigned long long)s.sched.generated_tokens,
        (int)s.queued, (int)s.running, (unsigned long long)s.rejected,
        (unsigned long long)s.sched.steps, s.sched.step_s,
        (unsigned long long)s.sched.weight_bytes_read, s.sched.stall_s,
        (unsigned long long)s.sched.kv_pages_mem, (unsigned long long)s.sched.kv_pages_disk,
        (unsigned long long)s.sched.kv_bytes_read);
    if (o.oom) {
        free(o.p);
        return NULL;
    }
    *len = o.len;
    return o.p;
}

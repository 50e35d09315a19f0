/* probe.c - see probe.h. Each task stores its kernel's result in the job's sink, so the
 * compiler cannot drop the work; tasks run on several threads at once, so the sink is an
 * atomic written once per task (relaxed: which task's value stays does not matter). */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/probe.h"
#include "base/budget.h"
#include "base/stats.h"
#include "base/clock.h"

typedef struct read_job { const float *p; size_t n, per; _Atomic float sink; } read_job;

static void read_task(void *arg, int task, int thread) {
    (void)thread;
    read_job *j = arg;
    size_t start = (size_t)task * j->per;
    size_t len = start + j->per <= j->n ? j->per : j->n - start;
    atomic_store_explicit(&j->sink, tl_probe_read_kernel(j->p + start, len),
                          memory_order_relaxed);
}

double tl_probe_read_buffer(tl_pool *pool, const void *p, size_t bytes, int reps) {
    size_t n = bytes / sizeof(float);
    if (!p || n == 0 || reps < 1 || reps > 64) return 0;
    int tasks = 8 * tl_pool_threads(pool); /* several per thread: a late thread can't skew */
    read_job j = {p, n, (n + (size_t)tasks - 1) / (size_t)tasks, 0};
    double t[64];
    for (int r = 0; r < reps; r++) {
        double t0 = tl_now();
        tl_pool_run(pool, tasks, read_task, &j);
        t[r] = tl_now() - t0;
    }
    return (double)(n * sizeof(float)) / tl_median(t, (size_t)reps);
}

void *tl_probe_buffer(size_t bytes) {
    size_t huge = (size_t)2 << 20, total = (bytes + huge - 1) / huge * huge;
    if (bytes == 0 || total < bytes) return NULL;
    void *p = aligned_alloc(huge, total);
    if (!p) return NULL;
    tl_advise_huge_pages(p, total); /* as the engine's budget blocks: same TLB behaviour */
    memset(p, 1, total);            /* fault the pages in before timing */
    return p;
}

double tl_probe_read_bandwidth(tl_pool *pool, size_t bytes, int reps) {
    void *p = tl_probe_buffer(bytes);
    double bw = p ? tl_probe_read_buffer(pool, p, bytes, reps) : 0;
    free(p);
    return bw;
}

typedef struct fma_job { size_t iters; _Atomic float sink; } fma_job;

static void fma_task(void *arg, int task, int thread) {
    (void)thread;
    fma_job *j = arg;
    atomic_store_explicit(&j->sink, tl_probe_fma_kernel(j->iters, (float)task),
                          memory_order_relaxed);
}

double tl_probe_fma_peak(tl_pool *pool, int reps) {
    int tasks = 8 * tl_pool_threads(pool);
    fma_job j = {2500u * 1000, 0};
    double t[64];
    if (reps < 1 || reps > 64) return 0;
    for (int r = 0; r < reps; r++) {
        double t0 = tl_now();
        tl_pool_run(pool, tasks, fma_task, &j);
        t[r] = tl_now() - t0;
    }
    /* per iteration: 12 FMAs x 8 lanes x 2 FLOPs, per task */
    return (double)j.iters * 12 * 8 * 2 * tasks / tl_median(t, (size_t)reps);
}

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
#include "kernels/x86_matmul.h"

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

typedef float (*unit_kernel)(size_t iters, float seed);
typedef struct unit_job { unit_kernel fn; size_t iters; _Atomic float sink; } unit_job;

static void unit_task(void *arg, int task, int thread) {
    (void)thread;
    unit_job *j = arg;
    atomic_store_explicit(&j->sink, j->fn(j->iters, (float)task), memory_order_relaxed);
}

/* Each unit's loop, its operations per iteration (12 chains x products per instruction
 * x 2), and its name. */
static const struct {
    const char *name;
    double ops_per_iter;
} units[TL_UNIT_COUNT] = {
    [TL_UNIT_FMA_AVX2] = {"f32 FMA AVX2", 12 * 8 * 2},
    [TL_UNIT_FMA_AVX512] = {"f32 FMA AVX-512", 12 * 16 * 2},
    [TL_UNIT_INT8_AVX2] = {"int8 dot AVX2", 12 * 32 * 2},
    [TL_UNIT_INT8_AVXVNNI] = {"int8 dot AVX-VNNI", 12 * 32 * 2},
    [TL_UNIT_INT8_AVX512VNNI] = {"int8 dot AVX-512 VNNI", 12 * 64 * 2},
    [TL_UNIT_BF16_AVX512] = {"bf16 dot AVX-512", 12 * 32 * 2},
};

const char *tl_probe_unit_name(tl_probe_unit u) {
    return u >= 0 && u < TL_UNIT_COUNT ? units[u].name : "?";
}

static unit_kernel unit_fn(tl_probe_unit u) {
    switch (u) {
    case TL_UNIT_FMA_AVX2: return tl_probe_fma_kernel;
    case TL_UNIT_INT8_AVX2: return tl__probe_int8_avx2_kernel;
#ifdef TL_HAVE_AVXVNNI
    case TL_UNIT_INT8_AVXVNNI: return tl__cpu_has_avxvnni() ? tl__probe_int8_vnni256_kernel : NULL;
#endif
#ifdef TL_HAVE_AVX512VNNI
    case TL_UNIT_FMA_AVX512: return tl__cpu_has_avx512vnni() ? tl__probe_fma512_kernel : NULL;
    case TL_UNIT_INT8_AVX512VNNI:
        return tl__cpu_has_avx512vnni() ? tl__probe_int8_512_kernel : NULL;
    case TL_UNIT_BF16_AVX512: return tl__cpu_has_avx512bf16() ? tl__probe_bf16_512_kernel : NULL;
#endif
    default: return NULL;
    }
}

int tl_probe_unit_present(tl_probe_unit u) { return unit_fn(u) != NULL; }

double tl_probe_unit_peak(tl_pool *pool, tl_probe_unit u, int reps) {
    unit_job j = {unit_fn(u), 2000u * 1000, 0};
    if (!j.fn || reps < 1 || reps > 64) return 0;
    int tasks = 8 * tl_pool_threads(pool); /* several per thread: a late thread can't skew */
    double t[64];
    for (int r = 0; r < reps; r++) {
        double t0 = tl_now();
        tl_pool_run(pool, tasks, unit_task, &j);
        t[r] = tl_now() - t0;
    }
    return (double)j.iters * units[u].ops_per_iter * tasks / tl_median(t, (size_t)reps);
}

double tl_probe_fma_peak(tl_pool *pool, int reps) {
    double p512 = tl_probe_unit_peak(pool, TL_UNIT_FMA_AVX512, reps);
    double p256 = tl_probe_unit_peak(pool, TL_UNIT_FMA_AVX2, reps);
    return p512 > p256 ? p512 : p256;
}

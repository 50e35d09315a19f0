/* threadpool.c - fixed pool of worker threads for data-parallel kernels.
 *
 * A run publishes (fn, arg) and one 64-bit claim word = generation | n_tasks | next index,
 * then bumps `generation`. Threads claim a task with a compare-and-swap on the claim
 * word, which fails for a thread holding a stale generation, so a worker that wakes late
 * can never run a task of the wrong run. The caller claims tasks too and returns when
 * `done` reaches n_tasks: it never waits for a worker that has not joined (on a busy
 * machine the caller simply does the work itself). Workers poll `generation` for
 * WORKER_POLL_S before sleeping on a condition variable: a decode step issues hundreds of
 * short runs and a futex wake-up per run would cost more than the work, and its gaps
 * (a wait for a streamed layer or a batch of KV pages) last milliseconds. A worker that
 * sleeps through such a gap gives its core back; on a virtual machine its vCPU may then
 * run slowly for milliseconds after it wakes (the host may have given its core away), and every
 * run it joins meanwhile waits for its share. The poll is timed, not counted: a pause
 * instruction's cost differs tenfold between CPUs. With yield on,
 * each thread that woke for a run calls sched_yield() once after it (tl_pool_set_yield).
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>
#include "base/threadpool.h"
#include "base/clock.h"
#include "base/status.h"

/* the caller's polls for the workers' last tasks before it yields its core between them */
#define SPIN_ITERS 20000
/* seconds a worker polls for the next run before it sleeps */
#define WORKER_POLL_S 2e-3
/* polls between two looks at the clock */
#define POLLS_PER_CLOCK 64
#define MAX_TASKS ((1u << 20) - 1)

typedef struct worker { tl_pool *pool; int index; pthread_t thread; } worker;

struct tl_pool {
    int n_threads;
    worker *workers;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    atomic_uint generation;
    _Atomic uint64_t claim; /* gen (24 bits) | n_tasks (20) | next index (20) */
    atomic_int done;
    atomic_int stop;
    atomic_int yield; /* tl_pool_set_yield */
    tl_pool_fn fn;
    void *arg;
};

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static uint64_t claim_word(unsigned gen, unsigned n, unsigned idx) {
    return (uint64_t)(gen & 0xffffffu) << 40 | (uint64_t)n << 20 | idx;
}

/* Runs tasks of generation `gen` until none are left or the run has moved on. */
static void drain(tl_pool *p, unsigned gen, int thread) {
    uint64_t w = atomic_load_explicit(&p->claim, memory_order_acquire);
    for (;;) {
        unsigned wgen = (unsigned)(w >> 40), n = (unsigned)(w >> 20) & MAX_TASKS;
        unsigned idx = (unsigned)w & MAX_TASKS;
        if (wgen != (gen & 0xffffffu) || idx >= n) return;
        if (!atomic_compare_exchange_weak_explicit(&p->claim, &w, w + 1, memory_order_acq_rel,
                                                   memory_order_acquire))
            continue; /* w was reloaded */
        p->fn(p->arg, (int)idx, thread);
        atomic_fetch_add_explicit(&p->done, 1, memory_order_release);
        w = atomic_load_explicit(&p->claim, memory_order_acquire);
    }
}

static void *worker_main(void *arg) {
    worker *w = arg;
    tl_pool *p = w->pool;
    unsigned seen = 0; /* the generation at creation: a late-starting thread must not
                          skip runs issued before it got here */
    for (;;) {
        unsigned gen;
        int polls = 0;
        const double since = tl_now();
        while ((gen = atomic_load_explicit(&p->generation, memory_order_acquire)) == seen &&
               !atomic_load(&p->stop)) {
            if (++polls % POLLS_PER_CLOCK || tl_now() - since < WORKER_POLL_S) {
                cpu_relax();
                continue;
            }
            pthread_mutex_lock(&p->lock);
            while (atomic_load(&p->generation) == seen && !atomic_load(&p->stop))
                pthread_cond_wait(&p->wake, &p->lock);
            pthread_mutex_unlock(&p->lock);
        }
        if (atomic_load(&p->stop)) return NULL;
        seen = gen;
        drain(p, gen, w->index);
        if (atomic_load_explicit(&p->yield, memory_order_relaxed)) sched_yield();
    }
}
tl_status tl_pool_open(int n_threads, tl_pool **out) {
    *out = NULL;
    if (n_threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = n > 0 ? (int)n : 1;
    }
    if (n_threads > 256) n_threads = 256;
    tl_pool *p = calloc(1, sizeof *p);
    if (!p) return tl_error_set(TL_ERR_NOMEM, "thread pool: out of memory");
    p->n_threads = n_threads;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    p->workers = calloc((size_t)n_threads, sizeof *p->workers);
    if (!p->workers) {
        tl_pool_close(p);
        return tl_error_set(TL_ERR_NOMEM, "thread pool: out of memory");
    }
    for (int i = 1; i < n_threads; i++) {
        p->workers[i].pool = p;
        p->workers[i].index = i;
        if (pthread_create(&p->workers[i].thread, NULL, worker_main, &p->workers[i]) != 0) {
            p->n_threads = i; /* close joins only the ones started */
            tl_pool_close(p);
            return tl_error_set(TL_ERR_NOMEM, "thread pool: cannot start thread %d", i);
        }
    }
    *out = p;
    return TL_OK;
}

void tl_pool_close(tl_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->lock);
    atomic_store(&p->stop, 1);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    if (p->workers)
        for (int i = 1; i < p->n_threads; i++) pthread_join(p->workers[i].thread, NULL);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->wake);
    free(p->workers);
    free(p);
}

int tl_pool_threads(const tl_pool *p) { return p->n_threads; }

void tl_pool_run(tl_pool *p, int n_tasks, tl_pool_fn fn, void *arg) {
    if (n_tasks <= 0) return;
    if (p->n_threads == 1 || n_tasks == 1 || (unsigned)n_tasks > MAX_TASKS) {
        for (int t = 0; t < n_tasks; t++) fn(arg, t, 0);
        if (atomic_load_explicit(&p->yield, memory_order_relaxed)) sched_yield();
        return;
    }
    p->fn = fn;
    p->arg = arg;
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    unsigned gen = atomic_load_explicit(&p->generation, memory_order_relaxed) + 1;
    atomic_store_explicit(&p->claim, claim_word(gen, (unsigned)n_tasks, 0), memory_order_release);
    pthread_mutex_lock(&p->lock);
    atomic_store_explicit(&p->generation, gen, memory_order_release);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    drain(p, gen, 0);
    int spins = 0;
    while (atomic_load_explicit(&p->done, memory_order_acquire) < n_tasks) {
        if (++spins < SPIN_ITERS) cpu_relax();
        else sched_yield();
    }
    if (atomic_load_explicit(&p->yield, memory_order_relaxed)) sched_yield();
}

void tl_pool_set_yield(tl_pool *pool, int on) {
    if (!pool) return;
    atomic_store_explicit(&pool->yield, on != 0, memory_order_relaxed);
}

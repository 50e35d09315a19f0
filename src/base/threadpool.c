/* threadpool.c - fixed pool of worker threads for data-parallel kernels.
 *
 * A run publishes (fn, arg, n_tasks) and bumps `generation`; workers claim task indices
 * from an atomic counter, and the caller claims tasks too, then waits until `done`
 * reaches n_tasks. Workers spin briefly on `generation` before sleeping on a condition
 * variable, because a decode step issues hundreds of short runs and a futex wake-up per
 * run would cost more than the work. Invariant: tl_pool_run returns only after every
 * worker has drained this generation, so no worker touches job state between runs.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>
#include "threadpool.h"
#include "status.h"

#define SPIN_ITERS 20000

typedef struct worker {
    tl_pool *pool;
    int index;
    pthread_t thread;
    atomic_uint finished; /* last generation this worker has fully drained */
} worker;

struct tl_pool {
    int n_threads;
    worker *workers;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    atomic_uint generation;
    atomic_int next_task;
    atomic_int done;
    atomic_int stop;
    tl_pool_fn fn;
    void *arg;
    int n_tasks;
};

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void drain(tl_pool *p, int thread) {
    for (;;) {
        int t = atomic_fetch_add_explicit(&p->next_task, 1, memory_order_relaxed);
        if (t >= p->n_tasks) break;
        p->fn(p->arg, t, thread);
        atomic_fetch_add_explicit(&p->done, 1, memory_order_release);
    }
}

static void *worker_main(void *arg) {
    worker *w = arg;
    tl_pool *p = w->pool;
    unsigned seen = 0; /* the generation at creation: a late-starting thread must not
                          skip runs issued before it got here */
    for (;;) {
        unsigned gen;
        int spins = 0;
        while ((gen = atomic_load_explicit(&p->generation, memory_order_acquire)) == seen &&
               !atomic_load(&p->stop)) {
            if (++spins < SPIN_ITERS) {
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
        drain(p, w->index);
        atomic_store_explicit(&w->finished, gen, memory_order_release);
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
    if (p->n_threads == 1 || n_tasks == 1) {
        for (int t = 0; t < n_tasks; t++) fn(arg, t, 0);
        return;
    }
    p->fn = fn;
    p->arg = arg;
    p->n_tasks = n_tasks;
    atomic_store(&p->done, 0);
    atomic_store(&p->next_task, 0);
    pthread_mutex_lock(&p->lock);
    unsigned gen = atomic_fetch_add_explicit(&p->generation, 1, memory_order_release) + 1;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    drain(p, 0);
    int spins = 0;
    while (atomic_load_explicit(&p->done, memory_order_acquire) < n_tasks) {
        if (++spins < SPIN_ITERS) cpu_relax();
        else sched_yield();
    }
    /* No worker may still be inside drain() when the next run resets the job. */
    for (int i = 1; i < p->n_threads; i++) {
        spins = 0;
        while (atomic_load_explicit(&p->workers[i].finished, memory_order_acquire) != gen) {
            if (++spins < SPIN_ITERS) cpu_relax();
            else sched_yield();
        }
    }
}

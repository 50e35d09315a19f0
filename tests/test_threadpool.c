/* test_threadpool.c - every task runs exactly once per run, thread ids are in range,
 * many short back-to-back runs never lose or repeat a task, and a pool whose worker
 * starts late still completes (the start-up race that once deadlocked); the runs with the
 * pool yielding after each run too (tl_pool_set_yield), switched off and on between them. */
#include <stdatomic.h>
#include <stdlib.h>
#include "base/threadpool.h"
#include "testutil.h"

typedef struct job { atomic_int *hits; int n_threads; atomic_int bad_thread; } job;

static void task(void *arg, int t, int thread) {
    job *j = arg;
    atomic_fetch_add(&j->hits[t], 1);
    if (thread < 0 || thread >= j->n_threads) atomic_store(&j->bad_thread, 1);
}

int main(void) {
    for (int threads = 1; threads <= 4; threads++) {
        tl_pool *p;
        CHECK(tl_pool_open(threads, &p) == TL_OK);
        CHECK(tl_pool_threads(p) == threads);
        atomic_int hits[257];
        job j = {hits, threads, 0};
        for (int run = 0; run < 3000; run++) {
            if (run % 500 == 0) tl_pool_set_yield(p, (run / 500) % 2); /* off, on, ... */
            int n = 1 + (run * 37) % 257;
            for (int i = 0; i < n; i++) atomic_store(&hits[i], 0);
            tl_pool_run(p, n, task, &j);
            for (int i = 0; i < n; i++)
                if (atomic_load(&hits[i]) != 1) {
                    CHECK_MSG(0, "threads %d run %d: task %d ran %d times", threads, run, i,
                              atomic_load(&hits[i]));
                    break;
                }
        }
        CHECK(!atomic_load(&j.bad_thread));
        tl_pool_close(p);
    }
    /* open/close many pools immediately after a first run (late worker start) */
    for (int i = 0; i < 200; i++) {
        tl_pool *p;
        CHECK(tl_pool_open(2, &p) == TL_OK);
        atomic_int hits[4] = {0};
        job j = {hits, 2, 0};
        tl_pool_run(p, 4, task, &j);
        CHECK(hits[0] == 1 && hits[3] == 1);
        tl_pool_close(p);
    }
    return tl_test_finish("test_threadpool");
}

/* threadpool.h - the project's own fixed-size thread pool (no OpenMP).
 *
 * tl_pool_run() runs fn(arg, task, thread) for task in [0, n_tasks) on the pool's
 * threads (the caller's thread participates as thread 0) and returns when all are done.
 * Tasks are handed out dynamically; `thread` in [0, n_threads) identifies per-thread
 * scratch. One tl_pool_run at a time per pool.
 */
#ifndef TL_BASE_THREADPOOL_H
#define TL_BASE_THREADPOOL_H

#include "tierllm.h"

typedef struct tl_pool tl_pool;
typedef void (*tl_pool_fn)(void *arg, int task, int thread);

tl_status tl_pool_open(int n_threads, tl_pool **out);
void tl_pool_close(tl_pool *pool);
int tl_pool_threads(const tl_pool *pool);
void tl_pool_run(tl_pool *pool, int n_tasks, tl_pool_fn fn, void *arg);
/* on: after each run every thread that woke for it offers its core once (sched_yield), so
 * a thread that is ready but has no core gets one between runs rather than after the
 * scheduler's slice. Off by default. For a process whose IO thread retires and issues
 * reads while the pool computes on every core (weights streamed): a read that is done
 * waits for that thread to see it, and then the next read waits to be issued. */
void tl_pool_set_yield(tl_pool *pool, int on);

#endif

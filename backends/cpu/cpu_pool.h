/* cpu_pool.h — the CPU backend's thread pool: a parallel-for over [0, n) with a fixed,
 * timing-independent partition.
 *
 * Why fixed partitioning: chunk k of a call is always [n*k/c, n*(k+1)/c) for c chunks and is
 * always run by thread k, so which element lands on which thread depends only on n, the
 * grain and the thread count, never on scheduling. Kernels additionally make every output
 * element a function of its inputs alone (no cross-chunk accumulation), so results do not
 * depend on the thread count either.
 *
 * Lifetime: td__cpu_pool_create starts nthreads - 1 workers (the calling thread is the
 * first participant); td__cpu_pool_destroy joins them.
 * Thread-safety: td__cpu_parallel_for may be called from any thread; one call uses the
 * workers at a time, and a call that finds them busy (a concurrent caller, or a nested call
 * from inside a task) runs its whole range inline on the caller.
 */
#ifndef TD_BACKENDS_CPU_POOL_H
#define TD_BACKENDS_CPU_POOL_H

#include "tensord.h"
#include <stdint.h>

#define TD_CPU_MAX_THREADS 256

typedef struct td__cpu_pool td__cpu_pool;

/* A task body: process elements [lo, hi). */
typedef void (*td__cpu_task_fn)(void *ctx, int64_t lo, int64_t hi);

/* Start a pool of `nthreads` participants (clamped to 1..TD_CPU_MAX_THREADS). If the OS
 * refuses to start some workers, the pool runs with the ones it got.
 * Returns TD_OK (*out owns the pool) or TD_ENOMEM. */
td_status td__cpu_pool_create(int nthreads, td__cpu_pool **out);

/* Stop and join the workers, free the pool. NULL is a no-op. No call may be in flight. */
void td__cpu_pool_destroy(td__cpu_pool *pool);

/* Participants (workers + caller). A NULL pool has one. */
int td__cpu_pool_threads(const td__cpu_pool *pool);

/* Run fn over [0, n) split into c = min(threads, ceil(n / grain)) contiguous chunks, chunk
 * k = [n*k/c, n*(k+1)/c) on participant k; returns when all are done. n <= 0 does nothing;
 * grain < 1 counts as 1; pool NULL or c == 1 runs fn(ctx, 0, n) inline. */
void td__cpu_parallel_for(td__cpu_pool *pool, int64_t n, int64_t grain, td__cpu_task_fn fn,
                          void *ctx);

/* Thread count from the environment: TENSORD_CPU_THREADS when it is an integer in
 * 1..TD_CPU_MAX_THREADS, else the number of online CPUs (at least 1, at most the cap). */
int td__cpu_default_threads(void);
#endif

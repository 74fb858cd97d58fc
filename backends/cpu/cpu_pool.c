/* cpu_pool.c — a small pthread pool with a fixed-partition parallel-for (see cpu_pool.h).
 *
 * One job at a time: the submitter publishes (fn, ctx, n, chunks) under the mutex, bumps a
 * generation counter and wakes the workers; worker t runs chunk t if t < chunks, the
 * submitter runs chunk 0, then waits until `pending` (chunks still running on workers)
 * reaches zero. Workers that have no chunk in a job only record the generation, so the
 * submitter never waits for them. A try-lock on `submit` makes concurrent or nested calls
 * fall back to running inline instead of deadlocking.
 */
#include "backends/cpu/cpu_pool.h"
#include "common/alloc.h"
#include "common/log.h"
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct td__cpu_worker {
    td__cpu_pool *pool;
    pthread_t thread;
    int index; /* 1..nthreads-1; the submitter is participant 0 */
} td__cpu_worker;

struct td__cpu_pool {
    pthread_mutex_t submit; /* held by the one caller using the workers */
    pthread_mutex_t mu;     /* guards everything below */
    pthread_cond_t work;    /* generation changed or stop */
    pthread_cond_t done;    /* pending reached zero */
    uint64_t generation;
    bool stop;
    td__cpu_task_fn fn;
    void *ctx;
    int64_t n;
    int chunks;
    int pending;
    int nthreads; /* participants: started workers + 1 */
    td__cpu_worker *workers;
};

/* floor(n * k / c) for 0 <= k <= c <= TD_CPU_MAX_THREADS without forming n * k, which
 * overflows int64 once n > INT64_MAX / c: with n = q * c + r, n * k / c = q * k + r * k / c
 * exactly, and r * k < c * c is small. */
static int64_t chunk_bound(int64_t n, int c, int k)
{
    int64_t q = n / c, r = n % c;
    return q * k + r * k / c;
}

static void chunk_range(int64_t n, int chunks, int k, int64_t *lo, int64_t *hi)
{
    *lo = chunk_bound(n, chunks, k);
    *hi = chunk_bound(n, chunks, k + 1);
}

static void *worker_main(void *arg)
{
    td__cpu_worker *w = arg;
    td__cpu_pool *p = w->pool;
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->generation == seen) pthread_cond_wait(&p->work, &p->mu);
        if (p->stop) break;
        seen = p->generation;
        if (w->index >= p->chunks) continue;
        td__cpu_task_fn fn = p->fn;
        void *ctx = p->ctx;
        int64_t lo, hi;
        chunk_range(p->n, p->chunks, w->index, &lo, &hi);
        pthread_mutex_unlock(&p->mu);
        fn(ctx, lo, hi);
        pthread_mutex_lock(&p->mu);
        if (--p->pending == 0) pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

td_status td__cpu_pool_create(int nthreads, td__cpu_pool **out)
{
    if (nthreads < 1) nthreads = 1;
    if (nthreads > TD_CPU_MAX_THREADS) nthreads = TD_CPU_MAX_THREADS;
    td__cpu_pool *p = td__calloc(1, sizeof *p);
    if (p == NULL) return TD_ENOMEM;
    p->nthreads = 1;
    if (nthreads > 1) {
        p->workers = td__calloc((size_t)nthreads - 1, sizeof *p->workers);
        if (p->workers == NULL) {
            td__free(p);
            return TD_ENOMEM;
        }
    }
    pthread_mutex_init(&p->submit, NULL);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work, NULL);
    pthread_cond_init(&p->done, NULL);
    for (int t = 1; t < nthreads; t++) {
        td__cpu_worker *w = &p->workers[t - 1];
        w->pool = p;
        w->index = t;
        int rc = pthread_create(&w->thread, NULL, worker_main, w);
        if (rc != 0) {
            td__log(TD_LOG_WARN, "cpu: could not start worker %d of %d (error %d); using %d",
                    t, nthreads - 1, rc, p->nthreads);
            break;
        }
        p->nthreads++;
    }
    *out = p;
    return TD_OK;
}

void td__cpu_pool_destroy(td__cpu_pool *p)
{
    if (p == NULL) return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    for (int t = 1; t < p->nthreads; t++) pthread_join(p->workers[t - 1].thread, NULL);
    pthread_cond_destroy(&p->done);
    pthread_cond_destroy(&p->work);
    pthread_mutex_destroy(&p->mu);
    pthread_mutex_destroy(&p->submit);
    td__free(p->workers);
    td__free(p);
}

int td__cpu_pool_threads(const td__cpu_pool *p) { return p == NULL ? 1 : p->nthreads; }

void td__cpu_parallel_for(td__cpu_pool *p, int64_t n, int64_t grain, td__cpu_task_fn fn,
                          void *ctx)
{
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    int64_t want = n / grain + (n % grain != 0);
    int chunks = p == NULL ? 1 : (want < p->nthreads ? (int)want : p->nthreads);
    if (chunks <= 1 || pthread_mutex_trylock(&p->submit) != 0) {
        fn(ctx, 0, n);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    p->chunks = chunks;
    p->pending = chunks - 1;
    p->generation++;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);

    int64_t lo, hi;
    chunk_range(n, chunks, 0, &lo, &hi);
    fn(ctx, lo, hi);

    pthread_mutex_lock(&p->mu);
    while (p->pending > 0) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
    pthread_mutex_unlock(&p->submit);
}

int td__cpu_default_threads(void)
{
    const char *env = getenv("TENSORD_CPU_THREADS");
    if (env != NULL && *env != '\0') {
        char *end = NULL;
        errno = 0;
        long v = strtol(env, &end, 10);
        if (errno == 0 && end != env && *end == '\0' && v >= 1 && v <= TD_CPU_MAX_THREADS)
            return (int)v;
        td__log(TD_LOG_WARN, "cpu: ignoring TENSORD_CPU_THREADS=\"%s\" (want 1..%d)", env,
                TD_CPU_MAX_THREADS);
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1) n = 1;
    if (n > TD_CPU_MAX_THREADS) n = TD_CPU_MAX_THREADS;
    return (int)n;
}

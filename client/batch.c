/* batch.c — the background flusher that bounds how long an op waits in a batch (see
 * batch.h). One thread per remote context, asleep on a condition variable unless a batch is
 * pending; the clock is CLOCK_MONOTONIC so wall-clock jumps do not delay or hurry it. */
#include "client/batch.h"

#include "common/alloc.h"

#include <pthread.h>
#include <stdbool.h>
#include <time.h>

struct td__flusher {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    void (*flush)(void *arg);
    bool (*drive)(void *arg);
    void *arg;
    bool drive_pending; /* td__flusher_kick: call drive */
    int64_t flush_ns;
    int64_t pending_since; /* monotonic ns; 0: nothing pending */
    bool stop;
    uint64_t flushes;
};

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void *flusher_main(void *arg)
{
    td__flusher *f = arg;
    pthread_mutex_lock(&f->mu);
    while (!f->stop) {
        if (f->drive_pending) {
            /* Without the lock: the user thread records ops meanwhile; the transport
             * serialises drive against its own calls. */
            f->drive_pending = false;
            pthread_mutex_unlock(&f->mu);
            bool more = f->drive(f->arg);
            pthread_mutex_lock(&f->mu);
            if (more) f->drive_pending = true;
            if (f->pending_since == 0 || now_ns() < f->pending_since + f->flush_ns) continue;
        }
        if (f->pending_since == 0) {
            pthread_cond_wait(&f->cv, &f->mu);
            continue;
        }
        int64_t due = f->pending_since + f->flush_ns;
        if (now_ns() >= due) {
            f->flushes++;
            f->flush(f->arg);
            f->pending_since = 0; /* the callback emptied the batch, or cannot send now */
            continue;
        }
        struct timespec ts = {.tv_sec = (time_t)(due / 1000000000),
                              .tv_nsec = (long)(due % 1000000000)};
        pthread_cond_timedwait(&f->cv, &f->mu, &ts);
    }
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

td_status td__flusher_start(int flush_us, void (*flush)(void *arg), bool (*drive)(void *arg),
                            void *arg, td__flusher **out)
{
    td__flusher *f = td__calloc(1, sizeof *f);
    if (f == NULL) return TD_ENOMEM;
    f->flush = flush;
    f->drive = drive;
    f->arg = arg;
    f->flush_ns = (int64_t)flush_us * 1000;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&f->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&f->mu, NULL);
    if (pthread_create(&f->thread, NULL, flusher_main, f) != 0) {
        pthread_cond_destroy(&f->cv);
        pthread_mutex_destroy(&f->mu);
        td__free(f);
        return TD_ENOMEM;
    }
    *out = f;
    return TD_OK;
}

void td__flusher_stop(td__flusher *f)
{
    if (f == NULL) return;
    pthread_mutex_lock(&f->mu);
    f->stop = true;
    pthread_cond_signal(&f->cv);
    pthread_mutex_unlock(&f->mu);
    pthread_join(f->thread, NULL);
    pthread_cond_destroy(&f->cv);
    pthread_mutex_destroy(&f->mu);
    td__free(f);
}

void td__flusher_lock(td__flusher *f)
{
    if (f != NULL) pthread_mutex_lock(&f->mu);
}

void td__flusher_unlock(td__flusher *f)
{
    if (f != NULL) pthread_mutex_unlock(&f->mu);
}

void td__flusher_pending(td__flusher *f)
{
    if (f == NULL || f->pending_since != 0) return;
    f->pending_since = now_ns();
    pthread_cond_signal(&f->cv);
}

void td__flusher_idle(td__flusher *f)
{
    if (f != NULL) f->pending_since = 0;
}

void td__flusher_kick_locked(td__flusher *f)
{
    if (f == NULL || f->drive == NULL || f->drive_pending) return;
    f->drive_pending = true;
    pthread_cond_signal(&f->cv);
}

void td__flusher_kick(td__flusher *f)
{
    if (f == NULL) return;
    pthread_mutex_lock(&f->mu);
    td__flusher_kick_locked(f);
    pthread_mutex_unlock(&f->mu);
}

uint64_t td__flusher_flushes(const td__flusher *f) { return f != NULL ? f->flushes : 0; }

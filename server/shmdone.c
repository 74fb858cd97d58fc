/* shmdone.c — see shmdone.h. */
#include "server/shmdone.h"

#include "common/alloc.h"
#include "common/log.h"
#include "server/session_int.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>

typedef struct pending {
    td__fence fence;
    uint64_t seq, tensor;
} pending;

struct td__shm_done {
    td__srv_session *ss;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* signalled on add, on stop and when a fence is answered */
    pending ring[TD_SHM_DONE_MAX];
    unsigned head, n; /* the FIFO ring[head], ... (n of them), the head being waited for */
    bool stopping;
};

/* Wait for p's copy and answer its ShmWrite. */
static void answer(td__srv_session *ss, pending *p)
{
    if (td__fence_finish(&p->fence) == TD_OK) {
        td__reply r = {.kind = TD_REPLY_SHM_DONE, .seq = p->seq};
        td__ss_reply_or_end(ss, &r);
        return;
    }
    char err[160];
    snprintf(err, sizeof err, "shm write seq %llu to tensor %llu: the device copy failed",
             (unsigned long long)p->seq, (unsigned long long)p->tensor);
    td__ss_failure(ss, p->seq, 0, TD_EDEVICE, err);
}

static void *run(void *arg)
{
    td__shm_done *d = arg;
    pthread_mutex_lock(&d->mu);
    for (;;) {
        while (d->n == 0 && !d->stopping) pthread_cond_wait(&d->cv, &d->mu);
        if (d->n == 0) break; /* stopping, and nothing left */
        pending p = d->ring[d->head];
        pthread_mutex_unlock(&d->mu);
        answer(d->ss, &p); /* in order: the client's slots come back as it sent them */
        pthread_mutex_lock(&d->mu);
        d->head = (d->head + 1) % TD_SHM_DONE_MAX;
        d->n--;
        pthread_cond_broadcast(&d->cv);
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

static td__shm_done *start(td__srv_session *ss)
{
    td__shm_done *d = td__calloc(1, sizeof *d);
    if (d == NULL) return NULL;
    d->ss = ss;
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cv, NULL);
    if (pthread_create(&d->thread, NULL, run, d) != 0) {
        pthread_cond_destroy(&d->cv);
        pthread_mutex_destroy(&d->mu);
        td__free(d);
        return NULL;
    }
    return d;
}

void td__shm_done_add(td__shm_done **slot, td__srv_session *ss, td__fence f, uint64_t seq,
                      uint64_t tensor)
{
    pending p = {.fence = f, .seq = seq, .tensor = tensor};
    if (*slot == NULL && (*slot = start(ss)) == NULL) {
        td__log(TD_LOG_WARN,
                "session %llu: no thread to answer shm writes; the worker answers each",
                (unsigned long long)ss->c.id);
        answer(ss, &p);
        return;
    }
    td__shm_done *d = *slot;
    pthread_mutex_lock(&d->mu);
    while (d->n == TD_SHM_DONE_MAX) pthread_cond_wait(&d->cv, &d->mu);
    d->ring[(d->head + d->n) % TD_SHM_DONE_MAX] = p;
    d->n++;
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
}

void td__shm_done_wait_answered(td__shm_done *d)
{
    if (d == NULL) return;
    pthread_mutex_lock(&d->mu);
    while (d->n > 0) pthread_cond_wait(&d->cv, &d->mu);
    pthread_mutex_unlock(&d->mu);
}

void td__shm_done_stop(td__shm_done **slot)
{
    td__shm_done *d = *slot;
    if (d == NULL) return;
    pthread_mutex_lock(&d->mu);
    d->stopping = true;
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
    pthread_join(d->thread, NULL);
    pthread_cond_destroy(&d->cv);
    pthread_mutex_destroy(&d->mu);
    td__free(d);
    *slot = NULL;
}

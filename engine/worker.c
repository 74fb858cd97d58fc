/* worker.c — see worker.h.
 *
 * One pthread per worker. Each queue is a FIFO of closures; queues that have something to
 * do (closures, or a pending close) sit in a "ready" ring. The worker takes the queue at the
 * head of the ring, runs its closures for one turn (until it is empty or TD_WORKER_SLICE_NS
 * have passed), and puts it back at the tail if it still has work, so N busy queues each
 * get every N-th turn whatever their depth, and a client's few small requests (a batch, a
 * read, a release) are served in one turn rather than one turn each. A queue is
 * only ever in the ring once and only the worker thread runs its closures, so a queue's
 * closures run one at a time and in submission order.
 *
 * Why a mutex and a condition variable rather than a lock-free queue: submits are per
 * message (microseconds of work each at best), the critical sections are a few pointer
 * moves, and this keeps close/destroy semantics easy to get right.
 *
 * Time slices: a closure that has run for TD_WORKER_SLICE_NS puts its continuation back at
 * the head of its own queue (td__worker_continue); the queue goes to the tail of the ring,
 * so each other busy queue gets one turn before the continuation runs, and nothing else of
 * the yielding queue overtakes it.
 *
 * Holding: a held queue is left out of the ring (its closures wait, submits and continues
 * only queue) until td__worker_queue_release puts it back; the turn that holds it ends after
 * the closure that asked. A close does not end a hold: a held queue is never freed, so a
 * pointer to it stays good until its release. This is how a closure waits for something outside
 * the worker (a client taking its replies) without spinning or sleeping on the worker.
 *
 * Lifetime: td__worker_queue_close marks the queue closing; once its last closure has run
 * the worker unlinks and frees it and then calls `done` (outside the lock). Queues still
 * open when the worker is destroyed are drained and freed without a `done` call.
 */
#include "engine/worker.h"
#include "common/alloc.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

typedef struct td__work_item {
    struct td__work_item *next;
    td__work_fn fn;
    void *arg;
} td__work_item;

struct td__worker_queue {
    td__worker *w;
    td__work_item *head, *tail;
    size_t depth;
    bool in_ring;  /* linked in w's ready ring */
    bool closing;  /* close requested: free after the last closure */
    bool held;     /* td__worker_queue_hold: skipped until released (or closed) */
    td__work_fn done;
    void *done_arg;
    td__worker_queue *ring_next;          /* ready ring link */
    td__worker_queue *all_prev, *all_next; /* every queue of w, for destroy */
};

struct td__worker {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    td__worker_queue *ring_head, *ring_tail;
    td__worker_queue *all;
    size_t nqueues; /* queues in `all` */
    bool stopping;
    char name[16];
};

/* Caller holds w->mu. */
static void ring_push(td__worker *w, td__worker_queue *q)
{
    q->ring_next = NULL;
    q->in_ring = true;
    if (w->ring_tail)
        w->ring_tail->ring_next = q;
    else
        w->ring_head = q;
    w->ring_tail = q;
}

/* Caller holds w->mu. */
static td__worker_queue *ring_pop(td__worker *w)
{
    td__worker_queue *q = w->ring_head;
    if (!q) return NULL;
    w->ring_head = q->ring_next;
    if (!w->ring_head) w->ring_tail = NULL;
    q->ring_next = NULL;
    q->in_ring = false;
    return q;
}

/* Caller holds w->mu. */
static void all_unlink(td__worker *w, td__worker_queue *q)
{
    if (q->all_prev)
        q->all_prev->all_next = q->all_next;
    else
        w->all = q->all_next;
    if (q->all_next) q->all_next->all_prev = q->all_prev;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void *worker_main(void *arg)
{
    td__worker *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        td__worker_queue *q = ring_pop(w);
        if (!q) {
            if (w->stopping) break;
            pthread_cond_wait(&w->cv, &w->mu);
            continue;
        }
        if (q->head) {
            /* One turn: q's closures, in order, until the queue is empty or the turn has
             * lasted a slice. q counts as linked meanwhile (in_ring), so submits, continues
             * and closes from any thread leave the relinking to this loop; only this thread
             * runs closures, so q's closures never run concurrently. */
            q->in_ring = true;
            uint64_t start = now_ns();
            while (q->head) {
                td__work_item *it = q->head;
                q->head = it->next;
                if (!q->head) q->tail = NULL;
                q->depth--;
                pthread_mutex_unlock(&w->mu);
                it->fn(it->arg);
                td__free(it);
                pthread_mutex_lock(&w->mu);
                if (q->held || now_ns() - start >= TD_WORKER_SLICE_NS) break;
            }
            q->in_ring = false;
            if (!q->held && (q->head || q->closing)) ring_push(w, q);
            continue;
        }
        /* Empty and in the ring: it is closing. */
        td__work_fn done = q->done;
        void *done_arg = q->done_arg;
        all_unlink(w, q);
        w->nqueues--;
        pthread_mutex_unlock(&w->mu);
        td__free(q);
        if (done) done(done_arg);
        pthread_mutex_lock(&w->mu);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

td_status td__worker_create(const char *name, td__worker **out)
{
    td__worker *w = td__calloc(1, sizeof *w);
    if (!w) return TD_ENOMEM;
    snprintf(w->name, sizeof w->name, "%s", name ? name : "td-worker");
    if (pthread_mutex_init(&w->mu, NULL) != 0) goto fail_mu;
    if (pthread_cond_init(&w->cv, NULL) != 0) goto fail_cv;
    if (pthread_create(&w->thread, NULL, worker_main, w) != 0) goto fail_thread;
#ifdef __GLIBC__
    pthread_setname_np(w->thread, w->name); /* best effort: names longer than 15 fail */
#endif
    *out = w;
    return TD_OK;
fail_thread:
    pthread_cond_destroy(&w->cv);
fail_cv:
    pthread_mutex_destroy(&w->mu);
fail_mu:
    td__free(w);
    return TD_ENOMEM;
}

void td__worker_destroy(td__worker *w)
{
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    w->stopping = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    /* The ring is empty now, so every remaining queue is empty and was never closed. */
    while (w->all) {
        td__worker_queue *q = w->all;
        w->all = q->all_next;
        td__free(q);
    }
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    td__free(w);
}

td_status td__worker_queue_create(td__worker *w, td__worker_queue **out)
{
    td__worker_queue *q = td__calloc(1, sizeof *q);
    if (!q) return TD_ENOMEM;
    q->w = w;
    pthread_mutex_lock(&w->mu);
    q->all_next = w->all;
    if (w->all) w->all->all_prev = q;
    w->all = q;
    w->nqueues++;
    pthread_mutex_unlock(&w->mu);
    *out = q;
    return TD_OK;
}

void td__worker_queue_close(td__worker_queue *q, td__work_fn done, void *arg)
{
    td__worker *w = q->w;
    pthread_mutex_lock(&w->mu);
    q->closing = true;
    q->done = done;
    q->done_arg = arg;
    if (!q->in_ring && !q->held) { /* a held queue goes on (and ends) after its release */
        ring_push(w, q);
        pthread_cond_signal(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
}

td_status td__worker_submit(td__worker_queue *q, td__work_fn fn, void *arg)
{
    td__worker *w = q->w;
    td__work_item *it = td__malloc(sizeof *it);
    if (!it) return TD_ENOMEM;
    it->next = NULL;
    it->fn = fn;
    it->arg = arg;
    pthread_mutex_lock(&w->mu);
    if (q->closing) {
        pthread_mutex_unlock(&w->mu);
        td__free(it);
        return TD_ECLOSED;
    }
    if (q->tail)
        q->tail->next = it;
    else
        q->head = it;
    q->tail = it;
    q->depth++;
    if (!q->in_ring && !q->held) {
        ring_push(w, q);
        pthread_cond_signal(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return TD_OK;
}

td_status td__worker_continue(td__worker_queue *q, td__work_fn fn, void *arg)
{
    td__worker *w = q->w;
    td__work_item *it = td__malloc(sizeof *it);
    if (!it) return TD_ENOMEM;
    it->fn = fn;
    it->arg = arg;
    pthread_mutex_lock(&w->mu);
    it->next = q->head;
    q->head = it;
    if (!q->tail) q->tail = it;
    q->depth++;
    if (!q->in_ring && !q->held) ring_push(w, q); /* at the ring's tail: every other queue goes first */
    pthread_mutex_unlock(&w->mu);
    return TD_OK;
}

void td__worker_queue_hold(td__worker_queue *q)
{
    td__worker *w = q->w;
    pthread_mutex_lock(&w->mu);
    q->held = true;
    pthread_mutex_unlock(&w->mu);
}

void td__worker_queue_release(td__worker_queue *q)
{
    td__worker *w = q->w;
    pthread_mutex_lock(&w->mu);
    q->held = false;
    if (!q->in_ring && (q->head || q->closing)) {
        ring_push(w, q);
        pthread_cond_signal(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
}

size_t td__worker_queue_depth(td__worker_queue *q)
{
    td__worker *w = q->w;
    pthread_mutex_lock(&w->mu);
    size_t n = q->depth;
    pthread_mutex_unlock(&w->mu);
    return n;
}

size_t td__worker_queue_count(td__worker *w)
{
    pthread_mutex_lock(&w->mu);
    size_t n = w->nqueues;
    pthread_mutex_unlock(&w->mu);
    return n;
}

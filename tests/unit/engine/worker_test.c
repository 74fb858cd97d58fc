/* worker_test.c — engine/worker.c: order within a queue, fairness across queues (one time
 * slice per turn), close and destroy semantics. */
#include "engine/worker.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

/* A log of (queue tag, item index) in the order the worker ran them. */
#define LOG_CAP 4096
typedef struct run_log {
    pthread_mutex_t mu;
    int n;
    int tag[LOG_CAP];
    int idx[LOG_CAP];
} run_log;

typedef struct item {
    run_log *log;
    int tag;
    int idx;
} item;

/* Sleeps for longer than a time slice, then logs: a queue of these gets one per turn. */
static void log_item(void *arg);
static void slow_item(void *arg)
{
    usleep(TD_WORKER_SLICE_NS / 1000 + 1000);
    log_item(arg);
}

static void log_item(void *arg)
{
    item *it = arg;
    pthread_mutex_lock(&it->log->mu);
    if (it->log->n < LOG_CAP) {
        it->log->tag[it->log->n] = it->tag;
        it->log->idx[it->log->n] = it->idx;
        it->log->n++;
    }
    pthread_mutex_unlock(&it->log->mu);
}

/* Blocks the worker until the test opens the gate, so queues can be filled first. */
typedef struct gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool open;
    bool entered;
} gate;

static void gate_wait(void *arg)
{
    gate *g = arg;
    pthread_mutex_lock(&g->mu);
    g->entered = true;
    pthread_cond_broadcast(&g->cv);
    while (!g->open) pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
}

static void gate_init(gate *g)
{
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    g->open = false;
    g->entered = false;
}

static void gate_wait_entered(gate *g)
{
    pthread_mutex_lock(&g->mu);
    while (!g->entered) pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
}

static void gate_open(gate *g)
{
    pthread_mutex_lock(&g->mu);
    g->open = true;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

/* A one-shot event, signalled from the worker. */
typedef struct event {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int fired;
    pthread_t thread;
} event;

static void event_init(event *e)
{
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    e->fired = 0;
}

static void event_fire(void *arg)
{
    event *e = arg;
    pthread_mutex_lock(&e->mu);
    e->fired++;
    e->thread = pthread_self();
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

static void event_wait(event *e)
{
    pthread_mutex_lock(&e->mu);
    while (!e->fired) pthread_cond_wait(&e->cv, &e->mu);
    pthread_mutex_unlock(&e->mu);
}

Test(worker, create_destroy_null)
{
    td__worker *w = NULL;
    cr_assert_eq(td__worker_create("t-worker", &w), TD_OK);
    cr_assert_not_null(w);
    td__worker_destroy(w);
    td__worker_destroy(NULL);
}

Test(worker, order_within_queue)
{
    static run_log log = {.mu = PTHREAD_MUTEX_INITIALIZER};
    static item items[1000];
    td__worker *w;
    td__worker_queue *q;
    cr_assert_eq(td__worker_create("t-order", &w), TD_OK);
    cr_assert_eq(td__worker_queue_create(w, &q), TD_OK);
    for (int i = 0; i < 1000; i++) {
        items[i] = (item){&log, 0, i};
        cr_assert_eq(td__worker_submit(q, log_item, &items[i]), TD_OK);
    }
    event done;
    event_init(&done);
    td__worker_queue_close(q, event_fire, &done);
    event_wait(&done);
    cr_assert_eq(log.n, 1000);
    for (int i = 0; i < 1000; i++) cr_assert_eq(log.idx[i], i, "position %d ran item %d", i, log.idx[i]);
    td__worker_destroy(w);
}

Test(worker, fairness_two_queues)
{
    static run_log log = {.mu = PTHREAD_MUTEX_INITIALIZER};
    static item big_items[60];
    static item small_item;
    td__worker *w;
    td__worker_queue *big, *small, *blocker;
    gate g;
    gate_init(&g);
    cr_assert_eq(td__worker_create("t-fair", &w), TD_OK);
    cr_assert_eq(td__worker_queue_create(w, &blocker), TD_OK);
    cr_assert_eq(td__worker_queue_create(w, &big), TD_OK);
    cr_assert_eq(td__worker_queue_create(w, &small), TD_OK);

    /* Hold the worker so that both queues are full before it picks anything. */
    cr_assert_eq(td__worker_submit(blocker, gate_wait, &g), TD_OK);
    gate_wait_entered(&g);
    for (int i = 0; i < 60; i++) {
        big_items[i] = (item){&log, 1, i};
        cr_assert_eq(td__worker_submit(big, slow_item, &big_items[i]), TD_OK);
    }
    small_item = (item){&log, 2, 0};
    cr_assert_eq(td__worker_submit(small, log_item, &small_item), TD_OK);
    cr_assert_eq(td__worker_queue_depth(big), 60);
    cr_assert_eq(td__worker_queue_depth(small), 1);
    gate_open(&g);

    event d1, d2, d3;
    event_init(&d1);
    event_init(&d2);
    event_init(&d3);
    td__worker_queue_close(big, event_fire, &d1);
    td__worker_queue_close(small, event_fire, &d2);
    td__worker_queue_close(blocker, event_fire, &d3);
    event_wait(&d1);
    event_wait(&d2);
    event_wait(&d3);

    cr_assert_eq(log.n, 61);
    int small_pos = -1;
    for (int i = 0; i < log.n; i++)
        if (log.tag[i] == 2) small_pos = i;
    cr_assert_geq(small_pos, 0);
    cr_assert_leq(small_pos, 3, "the single item ran after %d items of the busy queue",
                  small_pos);
    int next = 0;
    for (int i = 0; i < log.n; i++) {
        if (log.tag[i] != 1) continue;
        cr_assert_eq(log.idx[i], next, "busy queue out of order at %d", i);
        next++;
    }
    td__worker_destroy(w);
}

/* Three queues of 10 items each longer than a slice alternate strictly once all are
 * ready. */
Test(worker, round_robin_three_queues)
{
    static run_log log = {.mu = PTHREAD_MUTEX_INITIALIZER};
    static item items[3][10];
    td__worker *w;
    td__worker_queue *qs[3], *blocker;
    gate g;
    gate_init(&g);
    cr_assert_eq(td__worker_create("t-rr", &w), TD_OK);
    cr_assert_eq(td__worker_queue_create(w, &blocker), TD_OK);
    for (int k = 0; k < 3; k++) cr_assert_eq(td__worker_queue_create(w, &qs[k]), TD_OK);
    cr_assert_eq(td__worker_submit(blocker, gate_wait, &g), TD_OK);
    gate_wait_entered(&g);
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < 10; i++) {
            items[k][i] = (item){&log, k, i};
            cr_assert_eq(td__worker_submit(qs[k], slow_item, &items[k][i]), TD_OK);
        }
    gate_open(&g);
    event done[3];
    for (int k = 0; k < 3; k++) {
        event_init(&done[k]);
        td__worker_queue_close(qs[k], event_fire, &done[k]);
    }
    for (int k = 0; k < 3; k++) event_wait(&done[k]);
    cr_assert_eq(log.n, 30);
    for (int i = 0; i < 30; i++) {
        cr_assert_eq(log.tag[i], i % 3, "turn %d went to queue %d", i, log.tag[i]);
        cr_assert_eq(log.idx[i], i / 3);
    }
    td__worker_queue_close(blocker, NULL, NULL);
    td__worker_destroy(w);
}

/* Quick closures of one queue share a turn: two queues of 10 no-op items do not alternate
 * item by item (a client's batch, read and release are served in one turn). */
Test(worker, quick_items_share_a_turn)
{
    static run_log log = {.mu = PTHREAD_MUTEX_INITIALIZER};
    static item items[2][10];
    td__worker *w;
    td__worker_queue *qs[2], *blocker;
    gate g;
    gate_init(&g);
    cr_assert_eq(td__worker_create("t-turn", &w), TD_OK);
    cr_assert_eq(td__worker_queue_create(w, &blocker), TD_OK);
    for (int k = 0; k < 2; k++) cr_assert_eq(td__worker_queue_create(w, &qs[k]), TD_OK);
    cr_assert_eq(td__worker_submit(blocker, gate_wait, &g), TD_OK);
    gate_wait_entered(&g);
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 10; i++) {
            items[k][i] = (item){&log, k, i};
            cr_assert_eq(td__worker_submit(qs[k], log_item, &items[k][i]), TD_OK);
        }
    gate_open(&g);
    event done[2];
    for (int k = 0; k < 2; k++) {
        event_init(&done[k]);
        td__worker_queue_close(qs[k], event_fire, &done[k]);
    }
    for (int k = 0; k < 2; k++) event_wait(&done[k]);
    cr_assert_eq(log.n, 20);
    int switches = 0;
    for (int i = 1; i < 20; i++) switches += log.tag[i] != log.tag[i - 1];
    cr_assert_lt(switches, 19, "20 quick items alternated one by one: one closure per turn");
    td__worker_queue_close(blocker, NULL, NULL);
    td__worker_destroy(w);
}

/* A continuation (td__worker_continue) runs before the rest of its queue, after the other
 * queues' turns. */
typedef struct cont_item {
    run_log *log;
    td__worker_queue *q;
    int left;
} cont_item;

static void cont_step(void *arg)
{
    cont_item *c = arg;
    usleep(TD_WORKER_SLICE_NS / 1000 + 1000);
    pthread_mutex_lock(&c->log->mu);
    c->log->tag[c->log->n] = 0;
    c->log->idx[c->log->n++] = c->left;
    pthread_mutex_unlock(&c->log->mu);
    if (--c->left > 0) cr_assert_eq(td__worker_continue(c->q, cont_step, c), TD_OK);
}

Test(worker, continue_keeps_order_and_yields)
{
    static run_log log = {.mu = PTHREAD_MUTEX_INITIALIZER};
    static item other[3], after;
    td__worker *w;
    td__worker_queue *a, *b, *blocker;
    gate g;
    gate_init(&g);
    cr_assert_eq(td__worker_create("t-cont", &w), TD_OK);
    cr_assert_eq(td__worker_queue_create(w, &blocker), TD_OK);
    cr_assert_eq(td__worker_queue_create(w, &a), TD_OK);
    cr_assert_eq(td__worker_queue_create(w, &b), TD_OK);
    cr_assert_eq(td__worker_submit(blocker, gate_wait, &g), TD_OK);
    gate_wait_entered(&g);
    static cont_item c;
    c = (cont_item){&log, a, 3};
    cr_assert_eq(td__worker_submit(a, cont_step, &c), TD_OK);
    after = (item){&log, 2, 0};
    cr_assert_eq(td__worker_submit(a, log_item, &after), TD_OK);
    for (int i = 0; i < 3; i++) {
        other[i] = (item){&log, 1, i};
        cr_assert_eq(td__worker_submit(b, slow_item, &other[i]), TD_OK);
    }
    gate_open(&g);
    event d[2];
    event_init(&d[0]);
    event_init(&d[1]);
    td__worker_queue_close(a, event_fire, &d[0]);
    td__worker_queue_close(b, event_fire, &d[1]);
    event_wait(&d[0]);
    event_wait(&d[1]);
    /* a's three steps alternate with b's items (each step uses up its turn); a's later
     * item runs after its last step. */
    int want_tag[7] = {0, 1, 0, 1, 0, 1, 2};
    cr_assert_eq(log.n, 7);
    for (int i = 0; i < 7; i++)
        cr_assert_eq(log.tag[i], want_tag[i], "turn %d went to %d, want %d", i, log.tag[i],
                     want_tag[i]);
    td__worker_queue_close(blocker, NULL, NULL);
    td__worker_destroy(w);
}

/* done runs on the worker thread after the queue's remaining closures. */
typedef struct close_probe {
    atomic_int ran;
    int ran_at_done;
    pthread_t worker_thread;
    event ev;
} close_probe;

static void probe_item(void *arg)
{
    close_probe *p = arg;
    usleep(1000);
    p->worker_thread = pthread_self();
    atomic_fetch_add(&p->ran, 1);
}

static void probe_done(void *arg)
{
    close_probe *p = arg;
    p->ran_at_done = atomic_load(&p->ran);
    event_fire(&p->ev);
}

Test(worker, close_runs_done_after_remaining)
{
    close_probe p = {0};
    event_init(&p.ev);
    td__worker *w;
    td__worker_queue *q;
    cr_assert_eq(td__worker_create("t-close", &w), TD_OK);
    cr_assert_eq(td__worker_queue_create(w, &q), TD_OK);
    for (int i = 0; i < 20; i++) cr_assert_eq(td__worker_submit(q, probe_item, &p), TD_OK);
    td__worker_queue_close(q, probe_done, &p);
    event_wait(&p.ev);
    cr_assert_eq(p.ran_at_done, 20);
    cr_assert(pthread_equal(p.ev.thread, p.worker_thread), "done ran off the worker thread");
    cr_assert(!pthread_equal(p.ev.thread, pthread_self()));
    td__worker_destroy(w);
}

Test(worker, close_empty_queue)
{
    event ev;
    event_init(&ev);
    td__worker *w;
    td__worker_queue *q;
    cr_assert_eq(td__worker_create("t-empty", &w), TD_OK);
    cr_assert_eq(td__worker_queue_create(w, &q), TD_OK);
    td__worker_queue_close(q, event_fire, &ev);
    event_wait(&ev);
    cr_assert_eq(ev.fired, 1);
    td__worker_destroy(w);
}

/* A closure may submit more work to its own queue and close it. */
typedef struct self_ctx {
    td__worker_queue *q;
    atomic_int count;
    event ev;
} self_ctx;

static void self_step(void *arg)
{
    self_ctx *c = arg;
    int n = atomic_fetch_add(&c->count, 1) + 1;
    if (n < 5)
        cr_assert_eq(td__worker_submit(c->q, self_step, c), TD_OK);
    else
        td__worker_queue_close(c->q, event_fire, &c->ev);
}

Test(worker, submit_and_close_from_closure)
{
    self_ctx c = {0};
    event_init(&c.ev);
    td__worker *w;
    cr_assert_eq(td__worker_create("t-self", &w), TD_OK);
    cr_assert_eq(td__worker_queue_create(w, &c.q), TD_OK);
    cr_assert_eq(td__worker_submit(c.q, self_step, &c), TD_OK);
    event_wait(&c.ev);
    cr_assert_eq(atomic_load(&c.count), 5);
    td__worker_destroy(w);
}

Test(worker, submit_after_close_is_refused)
{
    gate g;
    gate_init(&g);
    event ev;
    event_init(&ev);
    td__worker *w;
    td__worker_queue *q;
    cr_assert_eq(td__worker_create("t-refuse", &w), TD_OK);
    cr_assert_eq(td__worker_queue_create(w, &q), TD_OK);
    cr_assert_eq(td__worker_submit(q, gate_wait, &g), TD_OK);
    gate_wait_entered(&g);
    td__worker_queue_close(q, event_fire, &ev);
    cr_assert_eq(td__worker_submit(q, probe_item, NULL), TD_ECLOSED);
    gate_open(&g);
    event_wait(&ev);
    td__worker_destroy(w);
}

/* destroy runs what was submitted (and pending closes) before it returns. */
static void count_item(void *arg) { atomic_fetch_add((atomic_int *)arg, 1); }

Test(worker, destroy_drains)
{
    atomic_int count = 0;
    event ev;
    event_init(&ev);
    td__worker *w;
    td__worker_queue *q1, *q2;
    cr_assert_eq(td__worker_create("t-drain", &w), TD_OK);
    cr_assert_eq(td__worker_queue_create(w, &q1), TD_OK);
    cr_assert_eq(td__worker_queue_create(w, &q2), TD_OK);
    for (int i = 0; i < 500; i++) {
        cr_assert_eq(td__worker_submit(q1, count_item, &count), TD_OK);
        cr_assert_eq(td__worker_submit(q2, count_item, &count), TD_OK);
    }
    td__worker_queue_close(q1, event_fire, &ev);
    td__worker_destroy(w); /* q2 stays open: freed by destroy, no done */
    cr_assert_eq(atomic_load(&count), 1000);
    cr_assert_eq(ev.fired, 1);
}

/* Many producer threads submitting to their own queues concurrently. */
typedef struct producer {
    td__worker_queue *q;
    run_log *log;
    int tag;
    item items[200];
} producer;

static void *produce(void *arg)
{
    producer *p = arg;
    for (int i = 0; i < 200; i++) {
        p->items[i] = (item){p->log, p->tag, i};
        cr_assert_eq(td__worker_submit(p->q, log_item, &p->items[i]), TD_OK);
    }
    return NULL;
}

Test(worker, concurrent_producers_keep_order)
{
    static run_log log = {.mu = PTHREAD_MUTEX_INITIALIZER};
    static producer prods[8];
    pthread_t th[8];
    td__worker *w;
    cr_assert_eq(td__worker_create("t-mt", &w), TD_OK);
    for (int k = 0; k < 8; k++) {
        prods[k].log = &log;
        prods[k].tag = k;
        cr_assert_eq(td__worker_queue_create(w, &prods[k].q), TD_OK);
        pthread_create(&th[k], NULL, produce, &prods[k]);
    }
    for (int k = 0; k < 8; k++) pthread_join(th[k], NULL);
    for (int k = 0; k < 8; k++) td__worker_queue_close(prods[k].q, NULL, NULL);
    td__worker_destroy(w);
    cr_assert_eq(log.n, 1600);
    int next[8] = {0};
    for (int i = 0; i < log.n; i++) {
        int k = log.tag[i];
        cr_assert_eq(log.idx[i], next[k], "queue %d out of order", k);
        next[k]++;
    }
}

/* ---- hold / release ---- */

typedef struct hold_probe {
    td__worker_queue *q;
    atomic_int held_runs;  /* closures of the held queue that ran */
    event held;            /* the holding closure has held its queue */
} hold_probe;

static void hold_self(void *arg)
{
    hold_probe *p = arg;
    td__worker_queue_hold(p->q);
    atomic_fetch_add(&p->held_runs, 1);
    event_fire(&p->held);
}

static void held_item(void *arg) { atomic_fetch_add(&((hold_probe *)arg)->held_runs, 1); }

/* A closure holds its queue: nothing more of that queue runs (its turn ends, later submits
 * wait) while another queue is served, until a release from another thread; then the
 * queue's closures run in order. */
Test(worker, hold_skips_the_queue_until_released)
{
    hold_probe p = {0};
    event_init(&p.held);
    td__worker *w;
    td__worker_queue *other;
    cr_assert_eq(td__worker_create("t-hold", &w), TD_OK);
    cr_assert_eq(td__worker_queue_create(w, &p.q), TD_OK);
    cr_assert_eq(td__worker_queue_create(w, &other), TD_OK);
    cr_assert_eq(td__worker_submit(p.q, hold_self, &p), TD_OK);
    cr_assert_eq(td__worker_submit(p.q, held_item, &p), TD_OK); /* same turn: must wait */
    event_wait(&p.held);
    cr_assert_eq(td__worker_submit(p.q, held_item, &p), TD_OK); /* a later submit waits too */
    event other_ran;
    event_init(&other_ran);
    for (int round = 0; round < 20; round++) { /* the other queue is served meanwhile */
        other_ran.fired = 0;
        cr_assert_eq(td__worker_submit(other, event_fire, &other_ran), TD_OK);
        event_wait(&other_ran);
    }
    cr_expect_eq(atomic_load(&p.held_runs), 1, "a held queue's closures ran");
    cr_expect_eq(td__worker_queue_depth(p.q), 2);
    event done;
    event_init(&done);
    cr_assert_eq(td__worker_submit(p.q, event_fire, &done), TD_OK);
    td__worker_queue_release(p.q);
    event_wait(&done);
    cr_expect_eq(atomic_load(&p.held_runs), 3, "after the release, everything ran in order");
    td__worker_queue_release(p.q); /* not held: nothing */
    td__worker_queue_close(other, NULL, NULL);
    td__worker_queue_close(p.q, NULL, NULL);
    td__worker_destroy(w);
}

/* A close does not end a hold: the held queue's closures and its `done` wait for the
 * release (the server's held read must not run early, nor its queue be freed under it). */
Test(worker, close_keeps_a_hold_until_released)
{
    hold_probe p = {0};
    event_init(&p.held);
    td__worker *w;
    cr_assert_eq(td__worker_create("t-hold-close", &w), TD_OK);
    cr_assert_eq(td__worker_queue_create(w, &p.q), TD_OK);
    cr_assert_eq(td__worker_submit(p.q, hold_self, &p), TD_OK);
    cr_assert_eq(td__worker_submit(p.q, held_item, &p), TD_OK);
    event_wait(&p.held);
    event closed;
    event_init(&closed);
    td__worker_queue_close(p.q, event_fire, &closed);
    usleep(50 * 1000);
    cr_expect_eq(atomic_load(&p.held_runs), 1, "a closed but held queue ran a closure");
    cr_expect_eq(closed.fired, 0, "a held queue was freed");
    td__worker_queue_release(p.q);
    event_wait(&closed);
    cr_expect_eq(atomic_load(&p.held_runs), 2);
    td__worker_destroy(w);
}

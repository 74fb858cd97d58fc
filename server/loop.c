/* loop.c — the libuv process loop (see loop.h).
 *
 * Only the post queue is shared between threads (mutex-protected singly linked list); the
 * uv handles are touched on the loop thread alone, as libuv requires. Timers are heap
 * objects closed through uv_close so that stopping one from its own callback is safe.
 */
#include "server/loop.h"
#include "common/alloc.h"
#include "common/log.h"

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <uv.h>

typedef struct post_item {
    struct post_item *next;
    void (*fn)(void *arg);
    void *arg;
} post_item;

struct td__loop_timer {
    uv_timer_t handle;
    void (*fn)(void *arg);
    void *arg;
    struct td__loop_timer *prev, *next; /* live timers, closed by td__loop_close */
};

static struct {
    uv_loop_t *loop;
    uv_async_t async;
    uv_signal_t sig_int, sig_term, sig_hup;
    td__loop_handlers handlers;
    pthread_mutex_t mu; /* guards head, tail, closed */
    post_item *head, *tail;
    bool closed;
    td__loop_timer *timers;
} g;

static void drain_posts(uv_async_t *h)
{
    (void)h;
    for (;;) {
        pthread_mutex_lock(&g.mu);
        post_item *list = g.head;
        g.head = g.tail = NULL;
        pthread_mutex_unlock(&g.mu);
        if (list == NULL) return;
        while (list != NULL) {
            post_item *it = list;
            list = it->next;
            it->fn(it->arg);
            td__free(it);
        }
    }
}

static void on_signal(uv_signal_t *h, int signum)
{
    if (signum == SIGHUP) {
        if (g.handlers.on_reload) g.handlers.on_reload(g.handlers.arg);
        return;
    }
    (void)h;
    if (g.handlers.on_stop) g.handlers.on_stop(signum, g.handlers.arg);
}

td_status td__loop_open(const td__loop_handlers *h)
{
    g.loop = uv_default_loop();
    if (g.loop == NULL) return TD_EINTERNAL;
    g.handlers = *h;
    pthread_mutex_init(&g.mu, NULL);
    if (uv_async_init(g.loop, &g.async, drain_posts) != 0) return TD_EINTERNAL;
    uv_signal_t *sigs[] = {&g.sig_int, &g.sig_term, &g.sig_hup};
    int nums[] = {SIGINT, SIGTERM, SIGHUP};
    for (int i = 0; i < 3; i++) {
        if (uv_signal_init(g.loop, sigs[i]) != 0 || uv_signal_start(sigs[i], on_signal, nums[i]) != 0)
            return TD_EINTERNAL;
    }
    /* A client that vanishes mid-write must not kill the server. */
    signal(SIGPIPE, SIG_IGN);
    return TD_OK;
}

void td__loop_run(void) { uv_run(g.loop, UV_RUN_DEFAULT); }

static void free_timer(uv_handle_t *h) { td__free(h->data); }

void td__loop_timer_stop(td__loop_timer *t)
{
    if (t == NULL) return;
    if (t->prev)
        t->prev->next = t->next;
    else
        g.timers = t->next;
    if (t->next) t->next->prev = t->prev;
    uv_timer_stop(&t->handle);
    uv_close((uv_handle_t *)&t->handle, free_timer);
}

static void on_timer(uv_timer_t *h)
{
    td__loop_timer *t = h->data;
    t->fn(t->arg);
}

td_status td__loop_timer_start(uint64_t first_ms, uint64_t repeat_ms, void (*fn)(void *arg),
                               void *arg, td__loop_timer **out)
{
    td__loop_timer *t = td__calloc(1, sizeof *t);
    if (t == NULL) return TD_ENOMEM;
    t->fn = fn;
    t->arg = arg;
    if (uv_timer_init(g.loop, &t->handle) != 0) {
        td__free(t);
        return TD_EINTERNAL;
    }
    t->handle.data = t;
    uv_timer_start(&t->handle, on_timer, first_ms, repeat_ms);
    t->next = g.timers;
    if (g.timers) g.timers->prev = t;
    g.timers = t;
    if (out) *out = t;
    return TD_OK;
}

uint64_t td__loop_now_ms(void)
{
    uv_update_time(g.loop);
    return uv_now(g.loop);
}

void td__loop_close(void)
{
    pthread_mutex_lock(&g.mu);
    g.closed = true;
    pthread_mutex_unlock(&g.mu);
    drain_posts(&g.async); /* run what was posted before the close */
    while (g.timers) td__loop_timer_stop(g.timers);
    uv_signal_t *sigs[] = {&g.sig_int, &g.sig_term, &g.sig_hup};
    for (int i = 0; i < 3; i++) {
        uv_signal_stop(sigs[i]);
        uv_close((uv_handle_t *)sigs[i], NULL);
    }
    uv_close((uv_handle_t *)&g.async, NULL);
}

td_status td__loop_post(void (*fn)(void *arg), void *arg)
{
    post_item *it = td__malloc(sizeof *it);
    if (it == NULL) return TD_ENOMEM;
    it->next = NULL;
    it->fn = fn;
    it->arg = arg;
    pthread_mutex_lock(&g.mu);
    if (g.closed) {
        pthread_mutex_unlock(&g.mu);
        td__free(it);
        return TD_ECLOSED;
    }
    if (g.tail)
        g.tail->next = it;
    else
        g.head = it;
    g.tail = it;
    /* Under the lock so a concurrent td__loop_close cannot close the handle in between. */
    uv_async_send(&g.async);
    pthread_mutex_unlock(&g.mu);
    return TD_OK;
}

/* loop.h — the process loop of tensord (libuv), on the main thread.
 *
 * The loop owns process life (DESIGN.md §4): signals, timers, and work that must happen on
 * one thread. Other threads hand it work with td__loop_post, which queues a closure and
 * wakes the loop with uv_async_send; because async sends coalesce, the loop drains the
 * whole queue on each wake-up.
 *
 * Thread-safety: td__loop_post from any thread; everything else on the loop thread.
 */
#ifndef TD_SERVER_LOOP_H
#define TD_SERVER_LOOP_H

#include "tensord.h"
#include <stdint.h>

typedef struct td__loop_handlers {
    void (*on_stop)(int signum, void *arg); /* SIGINT, SIGTERM */
    void (*on_reload)(void *arg);           /* SIGHUP */
    void *arg;
} td__loop_handlers;

/* Set up the default loop, its post queue and signal handlers. TD_ENOMEM / TD_EINTERNAL. */
td_status td__loop_open(const td__loop_handlers *h);
/* Run until td__loop_close() was called and every handle is closed. */
void td__loop_run(void);
/* Stop timers and signal watchers and close every handle; td__loop_run then returns.
 * Closures posted afterwards are dropped. */
void td__loop_close(void);

/* Run fn(arg) on the loop thread soon. Returns TD_ENOMEM (fn is then never called) or
 * TD_ECLOSED after td__loop_close. Any thread. */
td_status td__loop_post(void (*fn)(void *arg), void *arg);

/* A repeating timer: fn(arg) after first_ms, then every repeat_ms (0 = once). The handle
 * stays valid until td__loop_timer_stop, which frees it (safe from inside fn). */
typedef struct td__loop_timer td__loop_timer;
td_status td__loop_timer_start(uint64_t first_ms, uint64_t repeat_ms, void (*fn)(void *arg),
                               void *arg, td__loop_timer **out);
void td__loop_timer_stop(td__loop_timer *t);

/* Milliseconds on the loop's monotonic clock. */
uint64_t td__loop_now_ms(void);
#endif

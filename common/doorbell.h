/* doorbell.h — wait for a 32-bit word in shared memory to change: a bounded spin, then a
 * futex sleep (Linux futex(2), FUTEX_WAIT / FUTEX_WAKE without FUTEX_PRIVATE_FLAG, so it
 * works between processes that map the same memfd).
 *
 * Why a spin first: waking a sleeping thread costs 5-60 us on the project's virtual
 * machines, ten times a round trip between two spinning threads; a short spin catches the
 * answers that come soon, and the sleep keeps an idle waiter off the core. The spin yields
 * the core every few microseconds: on a loaded machine both ends may share one core, and
 * a spin that never yields would make each wait last the whole spin (measured: 210 us a
 * round trip instead of 2-5 us). The waiter
 * announces its sleep in a second word (`waiting`) so that the other side makes the wake
 * system call only when someone sleeps; a wake that races with the announcement is caught
 * because the sleep itself re-checks the word (FUTEX_WAIT returns at once when it changed).
 *
 * Self-contained: depends on nothing else in the tree.
 * Thread-safety: any thread; the words are accessed atomically.
 */
#ifndef TD_COMMON_DOORBELL_H
#define TD_COMMON_DOORBELL_H

#include <errno.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static inline uint64_t td__doorbell_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline void td__cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Sleep while *word == expect, at most timeout_ns (0: no limit). Returns on a wake, a
 * change, a signal or the timeout; the caller re-checks. */
static inline void td__futex_wait(_Atomic uint32_t *word, uint32_t expect, uint64_t timeout_ns)
{
    struct timespec ts = {.tv_sec = (time_t)(timeout_ns / 1000000000u),
                          .tv_nsec = (long)(timeout_ns % 1000000000u)};
    (void)syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT, expect,
                  timeout_ns != 0 ? &ts : NULL, NULL, 0);
}

/* Wake every sleeper on word. */
static inline void td__futex_wake(_Atomic uint32_t *word)
{
    (void)syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
}

/* Wait until *word != old or stop() says so: spin for spin_ns, then sleep in slices of at
 * most slice_ns with *waiting set (the other side wakes `word` when it sees it). `stop` may
 * be NULL. Returns the new value of *word, or `old` when stopped. */
static inline uint32_t td__doorbell_wait(_Atomic uint32_t *word, _Atomic uint32_t *waiting,
                                         uint32_t old, uint64_t spin_ns, uint64_t slice_ns,
                                         bool (*stop)(void *arg), void *arg)
{
    uint64_t t0 = td__doorbell_now_ns();
    for (unsigned i = 0;; i++) {
        uint32_t v = atomic_load_explicit(word, memory_order_acquire);
        if (v != old) return v;
        if ((i & 63) == 63) {
            if (stop != NULL && stop(arg)) return old;
            if (td__doorbell_now_ns() - t0 >= spin_ns) break;
            /* The other side may be waiting for this very core (both threads on one core
             * of a loaded machine): without a yield each wait would last the whole spin. */
            sched_yield();
        }
        td__cpu_relax();
    }
    for (;;) {
        atomic_store(waiting, 1); /* seq_cst: ordered before the re-check below */
        uint32_t v = atomic_load(word);
        if (v == old && (stop == NULL || !stop(arg))) td__futex_wait(word, old, slice_ns);
        atomic_store(waiting, 0);
        v = atomic_load_explicit(word, memory_order_acquire);
        if (v != old) return v;
        if (stop != NULL && stop(arg)) return old;
    }
}

/* Publish `value` in `word` (everything written before it becomes visible with it) and
 * wake the other side if it announced a sleep. Both accesses are seq_cst: either the
 * waiter's re-check sees the value or this sees its `waiting`. */
static inline void td__doorbell_ring(_Atomic uint32_t *word, _Atomic uint32_t *waiting,
                                     uint32_t value)
{
    atomic_store(word, value);
    if (atomic_load(waiting) != 0) td__futex_wake(word);
}
#endif

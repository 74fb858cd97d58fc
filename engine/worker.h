/* worker.h — a device worker thread that serves many sessions fairly.
 *
 * Each session owns a td__worker_queue of closures; the worker visits queues with work in
 * round-robin order and runs its closures for one time slice per turn, so one busy session cannot
 * starve the others while each session's closures still run in submission order.
 * A device may have several workers (tensord --device-workers, server/service.c); a queue
 * belongs to one worker for its whole life, so a session's closures never run on two
 * threads, and fairness holds among the sessions that share a worker.
 * Thread-safety: submit from any thread; closures run on the worker thread.
 */
#ifndef TD_ENGINE_WORKER_H
#define TD_ENGINE_WORKER_H

#include "tensord.h"
#include <stdbool.h>
#include <stdint.h>

typedef struct td__worker td__worker;
typedef struct td__worker_queue td__worker_queue;
typedef void (*td__work_fn)(void *arg);

/* How long a closure should run before it yields with td__worker_continue (a time slice):
 * 2 ms of device time. A session's small op then waits at most about one slice per other
 * busy session, plus the one op (or piece of a big CPU matmul, engine/session.c) in flight
 * when the slice ran out. */
#define TD_WORKER_SLICE_NS (UINT64_C(2) * 1000 * 1000)

/* Most workers a server gives one device (tensord --device-workers). */
#define TD_WORKERS_PER_DEVICE_MAX 64

td_status td__worker_create(const char *name, td__worker **out);
/* Stops after running the closures already submitted. NULL is a no-op. */
void td__worker_destroy(td__worker *w);

td_status td__worker_queue_create(td__worker *w, td__worker_queue **out);
/* Destroy a queue once it is empty (closures already submitted still run first); `done` is
 * called on the worker thread when the queue is gone. */
void td__worker_queue_close(td__worker_queue *q, td__work_fn done, void *arg);
/* Append a closure. TD_ENOMEM if it cannot be queued (fn is then never called). */
td_status td__worker_submit(td__worker_queue *q, td__work_fn fn, void *arg);
/* Continue later: put a closure at the HEAD of queue q, so it runs before anything else of
 * q, but only after every other queue with work has had its turn. This is how a closure
 * that ran out of its time slice (TD_WORKER_SLICE_NS) yields the device without breaking
 * its session's order. Call it only from a closure of q running on q's worker; accepted
 * while q is closing (it continues work submitted before the close).
 * Returns TD_OK or TD_ENOMEM (fn is then never called). */
td_status td__worker_continue(td__worker_queue *q, td__work_fn fn, void *arg);
/* Hold q: the worker runs none of q's closures (they and later submits wait, in order)
 * until td__worker_queue_release(q); other queues are served meanwhile. Called from a
 * closure of q (usually right after td__worker_continue), the turn ends when that closure
 * returns. Closing or closed-and-draining queues hold too: a held queue is not freed (nor
 * its `done` called) before its release, so whoever holds must release. Any thread. */
void td__worker_queue_hold(td__worker_queue *q);
/* End a hold (nothing when q is not held). Any thread, as long as q is not freed. */
void td__worker_queue_release(td__worker_queue *q);
/* Closures waiting in this queue. */
size_t td__worker_queue_depth(td__worker_queue *q);
/* Queues of this worker not yet freed (open, or closed with closures still to run): the
 * load the server balances sessions by. Any thread. */
size_t td__worker_queue_count(td__worker *w);
#endif

/* worker.h — a device worker thread that serves many sessions fairly.
 *
 * Each session owns a td__worker_queue of closures; the worker visits queues with work in
 * round-robin order and runs one closure from each per turn, so one busy session cannot
 * starve the others while each session's closures still run in submission order.
 * Thread-safety: submit from any thread; closures run on the worker thread.
 */
#ifndef TD_ENGINE_WORKER_H
#define TD_ENGINE_WORKER_H

#include "tensord.h"
#include <stdbool.h>

typedef struct td__worker td__worker;
typedef struct td__worker_queue td__worker_queue;
typedef void (*td__work_fn)(void *arg);

td_status td__worker_create(const char *name, td__worker **out);
/* Stops after running the closures already submitted. NULL is a no-op. */
void td__worker_destroy(td__worker *w);

td_status td__worker_queue_create(td__worker *w, td__worker_queue **out);
/* Destroy a queue once it is empty (closures already submitted still run first); `done` is
 * called on the worker thread when the queue is gone. */
void td__worker_queue_close(td__worker_queue *q, td__work_fn done, void *arg);
/* Append a closure. TD_ENOMEM if it cannot be queued (fn is then never called). */
td_status td__worker_submit(td__worker_queue *q, td__work_fn fn, void *arg);
/* Closures waiting in this queue. */
size_t td__worker_queue_depth(td__worker_queue *q);
#endif

/* batch.h — the time bound on a context's op batch: a small background thread that sends
 * a batch nobody else flushes.
 *
 * Ops are fire-and-forget, so a program that records one op and then computes on the host
 * for a while would leave that op sitting in the client. The flusher sends any batch whose
 * first op is older than flush_us. It shares one mutex with the recording thread: the
 * context takes it around every change to its batch (td__flusher_lock), and the flusher
 * holds it while it flushes, so the transport is only ever driven by one thread at a time.
 * The public rule stays "one user thread per context"; the flusher is invisible.
 *
 * A NULL flusher (local contexts, or batch_flush_us < 0) makes every function a no-op.
 * Thread-safety: as stated per function.
 */
#ifndef TD_CLIENT_BATCH_H
#define TD_CLIENT_BATCH_H

#include "tensord.h"

#include <stdbool.h>

typedef struct td__flusher td__flusher;

/* Start the thread. flush(arg) is called with the lock held when a batch is due; it must
 * empty the batch (or call td__flusher_idle) so that it is not called again at once.
 * drive(arg) (may be NULL) is called *without* the lock after td__flusher_kick, and again
 * at once for as long as it returns true: it moves the transport's queued sends along
 * (client/transport.h vt->drive) while the user thread goes on recording.
 * Returns TD_OK or TD_ENOMEM (no thread). */
td_status td__flusher_start(int flush_us, void (*flush)(void *arg), bool (*drive)(void *arg),
                            void *arg, td__flusher **out);
/* Stop and join the thread, free f. Call without the lock. NULL is a no-op. */
void td__flusher_stop(td__flusher *f);

void td__flusher_lock(td__flusher *f);
void td__flusher_unlock(td__flusher *f);
/* With the lock held: the batch went from empty to non-empty (starts the clock). */
void td__flusher_pending(td__flusher *f);
/* With the lock held: nothing is pending any more (or nothing may be sent now). */
void td__flusher_idle(td__flusher *f);
/* Wake the thread to call drive (td__flusher_start). _locked: with the lock held. */
void td__flusher_kick(td__flusher *f);
void td__flusher_kick_locked(td__flusher *f);
/* Batches the thread has sent (for tests and statistics); with the lock held. */
uint64_t td__flusher_flushes(const td__flusher *f);
#endif

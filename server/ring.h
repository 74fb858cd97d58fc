/* ring.h — the request ring of a same-host session (tensord.proto "request ring"; README
 * "Same-host clients"): small synchronous requests (a fence, a small read, the small batch
 * and releases recorded before them) that skip gRPC's threads.
 *
 * What it is: the last TD_RING_BYTES of the session's shared-memory region (so the region's
 * quota charge covers it), a request area the client fills, a reply area the server fills,
 * and two counters that serve as futex doorbells (common/doorbell.h). One thread per ring
 * serves it: it spins a bounded time (TD_RING_SPIN_NS) after each request for the next one,
 * then sleeps on the request counter, so an idle session costs no CPU; it never touches
 * the libuv loop, and it runs a request itself, on the session's engine session, instead
 * of handing it to the device worker — that hand-off (a thread wake-up) is most of what
 * the ring saves.
 *
 * Why running a request outside the worker keeps the session's rules:
 *  - Order: ring messages carry seqs from the session's one sequence. The ring runs seq s
 *    only when the stream has accepted every seq below s and every job for them has
 *    finished (session.c's done_seq), then claims s with a compare-and-swap on the
 *    session's next_seq, so the stream and the ring can never both take s. A client that
 *    sends a seq twice, or one already used, has its session ended.
 *  - One user of the engine session at a time: a job and a ring request each hold the
 *    session's exec_mu while they touch the engine session. The worker only try-locks it
 *    (a job that finds the ring busy is continued later), so the ring never blocks the
 *    worker and with it other sessions. A well-behaved client never makes them meet: it
 *    sends nothing on the stream while it waits for the ring, and the ring lets go of the
 *    lock before it answers.
 *  - Fairness: a ring request runs on the ring's own thread, so a busy ring session does
 *    not take turns from the worker's other sessions (the OS shares the cores); batches on
 *    the ring are small (the request area holds 28 KiB).
 *  - Validation: every message is copied out of the region first (the client can change
 *    it under us), then decoded and checked by server/request.c like a stream message;
 *    lengths and counts in the ring's header are read once and bounds-checked. A client
 *    that breaks the ring's rules (a length past the area, bad framing, a body the ring
 *    does not carry, an undecodable message, a seq out of order) gets its session ended
 *    with INVALID_ARGUMENT and a message saying which; it can only ever reach its own
 *    region through the ring.
 *
 * Lifetime: started by the session's open (on the worker) once the engine session exists;
 * stopped by the session's end (queue_closed, on the worker) before the engine session is
 * destroyed. Stopping marks the ring closed (a client waiting on it wakes up and falls
 * back to the stream's status), wakes the thread and joins it; a request in progress
 * finishes its current slice (TD_WORKER_SLICE_NS) first.
 *
 * Thread-safety: start/stop on the session's worker; td__ring_progress from any thread;
 * td__ring_reply from whatever thread answers.
 */
#ifndef TD_SERVER_RING_H
#define TD_SERVER_RING_H

#include "server/request.h"
#include "tensord.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct td__srv_session;
typedef struct td__ring td__ring;

/* How long the ring's thread spins for the next request before it sleeps. */
#define TD_RING_SPIN_NS (UINT64_C(100) * 1000)

/* Serve the ring at `base` (TD_RING_BYTES of the server's mapping of ss's region) for
 * session ss. Returns TD_OK or TD_ENOMEM (no memory or no thread), err saying why. */
td_status td__ring_start(struct td__srv_session *ss, uint8_t *base, td__ring **out, char *err,
                         size_t errlen);
/* Close the ring, wake and join its thread, free. NULL is a no-op. */
void td__ring_stop(td__ring *r);
/* The session's stream accepted a message or a job finished: a ring request waiting for
 * the stream to catch up looks again. NULL is a no-op. */
void td__ring_progress(td__ring *r);
/* Called by the session's reply helper: when the calling thread is running a ring request
 * of session ss, encode reply rp into the ring's reply area, set *st and return true;
 * otherwise return false (the reply goes on the stream). */
bool td__ring_reply(struct td__srv_session *ss, const td__reply *rp, td_status *st);

/* For the metrics: rings open now, requests served so far. Any thread. */
void td__ring_stats(uint64_t *open, uint64_t *requests);
#endif

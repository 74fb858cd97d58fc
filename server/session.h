/* session.h — a server session: one Session stream (a gRPC bidirectional call), the engine
 * session it drives, its queue on the device worker, and its queue of replies.
 *
 * Lifetime: the server session is reference-counted. Every gRPC operation in flight on the
 * call, every closure queued on the worker and the worker queue's close callback hold a
 * reference, so no completion, closure or callback ever sees freed memory. Payload slices
 * of ReadChunk replies hold references on the tensor buffer, not on the session. When the
 * stream ends for any reason (client half-close, cancel, vanished client, oversize message,
 * server shutdown) the worker queue is closed, its close callback destroys the engine
 * session (freeing every tensor), and the last reference frees the rest.
 *
 * Thread-safety: td__srv_session_start is called on a completion-queue thread.
 */
#ifndef TD_SERVER_SESSION_H
#define TD_SERVER_SESSION_H

#include "server/service.h"
#include <grpc/grpc.h>

/* Take over a newly accepted Session call (the call's reference passes to the session).
 * `quota` is the authenticated tenant's (borrowed; outlives every session): the session
 * charges its sessions, tensors and queued batches there, and its tenant name scopes
 * shared lookups (see td__srv_session's `tenant`). */
/* Whether the server times its requests per session and logs the times with each
 * session's close line (TENSORD_TRACE_JOBS=1 at start; set once by main before any
 * session starts). */
extern bool td__trace_jobs;
/* Whether a same-host GPU session's ShmWrite waits for its device copy on the worker
 * instead of being answered by the session's shmdone thread (TENSORD_SHM_WRITE_WAIT=1 at
 * start, an A/B aid; set once by main). */
extern bool td__shm_write_wait;
/* Whether a ShmWrite whose copy is done when the worker returns from it (a CPU session, or
 * a copy that could not be queued) is answered by the worker itself instead of the
 * session's shmdone thread (TENSORD_SHM_DONE_INLINE=1 at start, an A/B aid; set once by
 * main). */
extern bool td__shm_done_inline;

void td__srv_session_start(td__service *svc, grpc_call *call, td__quota *quota,
                           const td__identity *id);

/* End session `ss` now with `code` and `why` (UNAUTHENTICATED: its token was revoked;
 * DEADLINE_EXCEEDED: no complete open message in time): the call is
 * cancelled with that status and the session ends through its usual path (worker queue
 * closed, engine session and every tensor freed). `id` above is what the session
 * registered with (td__service_live_add), for td__service_revoke_stale. The caller keeps
 * ss alive for the call (it holds the service's live-session lock).
 * Thread-safety: any thread. */
struct td__srv_session;
/* Batches waiting for their tenant's max_queued_batches (one per waiting session; their
 * streams are not read meanwhile). For the metrics. Any thread. */
long td__srv_sessions_parked(void);
void td__srv_session_revoke(struct td__srv_session *ss, grpc_status_code code,
                            const char *why);
#endif

/* session_int.h — what the parts of a server session share: the session record, the job
 * (one request on its way through the device worker) and the reply helpers.
 *
 * The parts (DESIGN.md §3, "transport code is layered"):
 *  - server/call.c: the gRPC call, its send queue and flow control;
 *  - server/request.c: ClientMessage -> td__request (all wire validation), td__reply ->
 *    ServerMessage;
 *  - server/session.c: the session's life cycle and its receive path (seq order, session
 *    slots and quotas, jobs onto the worker queue);
 *  - server/handlers.c: the jobs, on the device worker, on plain requests;
 *  - server/caches.c: the blob store pins and the graph cache, as the handlers use them.
 *
 * Internal to server/; nothing here is protobuf-c.
 * Thread-safety: the session's "worker side" fields are used only by jobs on its worker
 * queue (one at a time, in order); the rest as marked.
 */
#ifndef TD_SERVER_SESSION_INT_H
#define TD_SERVER_SESSION_INT_H

#include "engine/session.h"
#include "engine/worker.h"
#include "server/blobstore.h"
#include "server/call.h"
#include "server/graphcache.h"
#include "server/request.h"
#include "server/session.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

enum td__ss_state { TD_SS_AWAIT_OPEN, TD_SS_OPEN, TD_SS_DONE };

#define TD_SS_PEND_MAX 32

typedef struct td__srv_session {
    td__srv_call c; /* first: call.c's ops get back to the session from it */
    td__service *svc;
    char peer[128];
    char client[65];
    /* The authenticated tenant: its quota (borrowed from the service's td__tenants) and
     * its name, which scopes lookups shared between sessions (blob store, graph cache).
     * Set before the first message is received; never NULL. */
    td__quota *quota;
    const char *tenant;
    struct td__live_session *live; /* registration for token revocation (service.h) */
    /* A batch waiting for the tenant's max_queued_batches (server/session.c, "queued-batch
     * limit"), and the list of such sessions; under that file's g_park_mu. */
    struct td__job *parked;
    struct td__srv_session *park_prev, *park_next;
    bool unparking; /* a waker is queueing the batch it took from `parked` */

    /* Receive side (one completion-queue thread at a time). */
    td__req_decoder *decoder;
    enum td__ss_state state;
    /* The seq the next client message must carry (open's seq + 1, ...). Claimed with a
     * compare-and-swap by the receive side and by the request ring (server/ring.h), which
     * takes seqs from the same sequence. */
    _Atomic uint64_t next_seq;
    /* Set by the open (worker) once SessionOpened is queued: from then on the receive side
     * may answer a fresh fingerprint offer itself (session.c, answer_fresh_offer). */
    atomic_bool opened;
    /* Set by the receive side before it ends the stream for a protocol violation; the
     * status sent once the worker queue has drained (so queued replies go first). */
    grpc_status_code end_code;
    char end_msg[256];
    td__worker_queue *wq;
    td__device *dev;
    uint32_t protocol; /* the protocol the session opened at (set before the open is queued) */
    int slot;          /* the device's metrics slot (server/metrics.h), -1 before open */
    uint64_t start_ns; /* when the call was taken over (td__metrics_now_ns) */

    /* Worker side. */
    td__session *es;
    bool reserved;      /* holds one of the service's session slots */
    bool quota_session; /* holds one of the tenant's sessions */
    uint64_t freed_tensors, freed_bytes;
    uint64_t ops_run; /* ops executed for the session (batches and graph runs), for its close line */
    td__graph_set graphs; /* graphs this session defined or looked up (server/graphcache.h) */
    td__blob **pins;      /* blobs HasBlobs reported present, until WriteFromBlob uses them */
    size_t n_pins;
    struct td__shm_region *shm; /* the session's shared-memory region, or NULL (shm.h) */
    /* The region pinned for the session's GPU (td__session_host_pin; handlers.c shm_pin),
     * tried at the first large ShmWrite/ShmRead; unpinned before the engine session goes.
     * Under exec_mu, like every use of the engine session. */
    bool shm_pin_tried;
    uint32_t shm_pinned;
    /* Answers the session's ShmWrites, also those whose device copy is still queued
     * (server/shmdone.h); NULL until the first. Stopped in queue_closed before the region is unpinned. Used by jobs only
     * (td__ss_in_job: the worker, or the ring's thread under exec_mu), one at a time. */
    struct td__shm_done *shm_done;

    /* The request ring (server/ring.h): set by the open (worker) and cleared by the end
     * (worker), read by the receive side while the session is open. */
    struct td__ring *_Atomic ring;
    /* The last seq whose request has run (stream job or ring request); any thread. */
    _Atomic uint64_t done_seq;
    /* Held while a job or a ring request touches the engine session (ring.h). */
    pthread_mutex_t exec_mu;
    /* A read waiting for the client to take replies (td__ss_wait_for_drain): its queue,
     * held (so not freed, even once closed) until the call's on_drained releases it, which
     * want_drain guarantees (a send is in flight: it completes, or fails when the call
     * dies). Under hold_mu, so the release comes after the hold. */
    pthread_mutex_t hold_mu;
    td__worker_queue *hold_q;

    /* Fingerprints of this session's StoreBlob requests received but not yet run: an offer
     * of one of them must wait its turn (the candidate is about to exist), so
     * answer_fresh_offer (session.c) does not answer it "absent". Under pend_mu (receive
     * side adds, job_free removes); pend_untracked counts those beyond TD_SS_PEND_MAX, and
     * while it is not 0 no offer is answered early. */
    pthread_mutex_t pend_mu;
    uint8_t pend_fp[TD_SS_PEND_MAX][TD_FINGERPRINT_BYTES];
    uint32_t pend_n, pend_untracked;

    /* TENSORD_TRACE_JOBS (td__trace_jobs): the worker time each kind of request took, and
     * of that the device copies of reads and the host copies of GPU candidates, logged
     * with the session's close line. Under exec_mu, like the handlers that add to it. */
    uint64_t trace_ns[TD_REQ_KIND_COUNT], trace_n[TD_REQ_KIND_COUNT];
    uint64_t trace_read_copy_ns, trace_candidate_copy_ns;
} td__srv_session;


/* One request on its way through the worker queue. */
typedef struct td__job {
    td__srv_session *ss;
    td__request rq;
    bool always;        /* run even without an engine session (open) */
    bool batch_charged; /* holds one of the tenant's queued batches */
    uint32_t failures_sent; /* Failure replies sent for this batch (td__handle_op_failure) */
    int slot;               /* metrics slot of the device it was queued for (-1: none) */
    uint64_t received_ns;   /* when it was decoded (td__metrics_now_ns) */
    uint64_t split_ns;      /* worker time of a split op's pieces so far (run_batch) */
    /* Time slices (engine/worker.h): a batch or graph run that used up its slice sets
     * `continued` and is queued again at the head of the session's queue; it resumes at
     * rq.ops[next_op] or with `grun`. */
    bool continued;
    td__worker_queue *wq; /* the queue it was submitted to (ss->wq goes NULL at close) */
    size_t next_op;
    uint64_t read_off; /* a read (run_read) that gave up a turn goes on here (0: from its start) */
    td__graph_run *grun;
    td__graph *graph; /* reference held while grun runs */
    /* A fingerprint offer the receive side answered "absent" at once (session.c,
     * answer_fresh_offer): the worker only lets its seq pass, in order. */
    bool answered;
    /* A StoreBlob with a fingerprint: 1 when its fingerprint is in ss->pend_fp, 2 when
     * counted in ss->pend_untracked (removed by job_free). */
    uint8_t pend;
} td__job;

/* ---- handlers (worker) ---- */

/* Run job j for session ss (server/handlers.c), on the worker or the ring's thread. */
void td__handle(td__srv_session *ss, td__job *j);
/* Whether this thread is running a job of ss (inside td__handle): its replies keep request
 * order behind the session's queued ShmWrites (td__ss_reply). */
bool td__ss_in_job(const td__srv_session *ss);
/* An engine failure callback (td__failure_fn) for a job's ops: answers with a Failure,
 * using the conversion error of ops that could not be converted. */
void td__handle_op_failure(void *job, uint32_t op_index, td_status status, const char *message);
/* Give a session's open run its slot and tenant session back (worker side). */
void td__ss_unreserve(td__srv_session *ss);

/* server/caches.c */
void td__handle_has_blobs(td__srv_session *ss, td__job *j);
void td__handle_write_from_blob(td__srv_session *ss, td__job *j);
void td__handle_store_blob(td__srv_session *ss, td__job *j);
void td__handle_graph_define(td__srv_session *ss, td__job *j);
/* Drop every pin the session holds (at its end). */
void td__ss_pins_fini(td__srv_session *ss);

/* ---- replies (any thread; server/session.c) ---- */

/* Encode and queue r. Returns TD_OK or TD_ENOMEM. From a job (td__ss_in_job), first
 * waits until the session's shmdone thread has answered every ShmWrite handed to it, so
 * that the job's reply does not overtake theirs (tensord.proto: replies keep request
 * order); the receive side's early answers and the shmdone thread's own do not wait. */
td_status td__ss_reply(td__srv_session *ss, const td__reply *r);
/* From a job on queue q that is about to continue (j->continued): hold q until the
 * session's queued replies are at most `mark` bytes, so the job resumes only then, without
 * taking the worker's turns meanwhile. Returns false (nothing held) when they already are,
 * or the call is over. */
bool td__ss_wait_for_drain(td__srv_session *ss, td__worker_queue *q, size_t mark);
/* Queue r; without memory for it, end the call with RESOURCE_EXHAUSTED. */
void td__ss_reply_or_end(td__srv_session *ss, const td__reply *r);
/* Whether an execution-failure log line may be written now (at most 50 a second; the rest
 * are counted and the count logged later). Any thread. */
bool td__ss_failure_log_allowed(void);
/* Queue a Failure (seq, op_index, status, message) and count it (tensord_failures_total);
 * logged when it cannot be queued. */
void td__ss_failure(td__srv_session *ss, uint64_t seq, uint32_t op_index, td_status st,
                    const char *message);
/* The same for a failed op, whose name (the op table's) goes into the log line. */
void td__ss_failure_op(td__srv_session *ss, uint64_t seq, uint32_t op_index,
                       const char *op_name, td_status st, const char *message);
#endif

/* session.c — one Session stream: the server session's life cycle and its receive path
 * (see session.h; the parts are listed in session_int.h).
 *
 * Receive path (a completion-queue thread; server/call.c delivers one message at a time):
 * decode the message into a plain request (server/request.c), check what depends on the
 * session (seq order, the session slot and the tenant's quotas), wrap it in a job and
 * submit it to the session's worker queue. Nothing here touches the engine session: the
 * jobs do, on the worker (server/handlers.c, server/caches.c), and answer through the
 * reply helpers below, which encode and queue on the call.
 *
 * Flow control: a job's memory (its message, converted ops, a payload) counts on the call
 * (td__srv_call_hold) from the moment it is decoded until the job has run.
 *
 * Queued-batch limit (a tenant's max_queued_batches): a batch that would pass it is never
 * failed. The session parks it and stops receiving (td__srv_call_pause), so HTTP/2 flow
 * control slows the sender; when one of the tenant's queued batches has run (job_free), the
 * first parked session of that tenant gets the freed slot, its batch is queued and its
 * receive resumes. One mutex (g_park_mu) covers the parked list and every session's parked
 * job; the park counts itself (g_n_parked) and re-tries the charge under it, and a wake-up
 * looks at that count after its uncharge and charges under the mutex, so no wake-up is
 * lost. A parked session holds a reference on its call and counts as queued work
 * (td__service_work_add) for the drain; its end waits for a wake-up that is queueing its
 * batch (`unparking`), so the batch never goes to a closed queue.
 */
#include "server/session_int.h"

#include "common/alloc.h"
#include "common/log.h"
#include "server/candidates.h"
#include "server/metrics.h"
#include "server/ring.h"
#include "server/shm.h"
#include "server/shmdone.h"

#include <grpc/support/alloc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static td__srv_session *ss_of(td__srv_call *c) { return (td__srv_session *)c; }

static pthread_mutex_t g_park_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_park_cv = PTHREAD_COND_INITIALIZER; /* an unpark finished */
static td__srv_session *g_parked; /* sessions with a parked batch, oldest first */
static td__srv_session *g_parked_tail;
static atomic_long g_n_parked;

static bool submit(td__srv_session *ss, td__job *j);

static void stream_ended(td__srv_session *ss);

/* ---- replies ---- */

td_status td__ss_reply(td__srv_session *ss, const td__reply *r)
{
    if (td__ss_in_job(ss)) td__shm_done_wait_answered(ss->shm_done);
    td__reply fence;
    if (r->kind == TD_REPLY_FENCE) { /* counted after the wait: the ShmDones are in it */
        fence = *r;
        fence.stream_msgs = td__srv_call_queued_msgs(&ss->c);
        r = &fence;
    }
    td_status rst;
    if (td__ring_reply(ss, r, &rst)) return rst; /* answering a ring request */
    grpc_byte_buffer *bb;
    td_status st = td__reply_encode(r, &bb);
    return st == TD_OK ? td__srv_call_send(&ss->c, bb) : st;
}

void td__ss_reply_or_end(td__srv_session *ss, const td__reply *r)
{
    if (td__ss_reply(ss, r) != TD_OK)
        td__srv_call_finish(&ss->c, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
}

/* Execution failures are logged at info, but a client can make thousands a second: past
 * FAILURE_LOG_PER_S lines in a second the rest of that second is counted, not logged, and
 * the count is logged with the next line. Approximate under races (two threads may both
 * start a new second); it only bounds the log. */
#define FAILURE_LOG_PER_S 50
static atomic_ullong g_fail_log_second, g_fail_log_lines, g_fail_log_dropped;

bool td__ss_failure_log_allowed(void)
{
    uint64_t now_s = td__metrics_now_ns() / 1000000000u;
    unsigned long long was = atomic_load(&g_fail_log_second);
    if (was != now_s && atomic_compare_exchange_strong(&g_fail_log_second, &was, now_s)) {
        atomic_store(&g_fail_log_lines, 0);
        unsigned long long dropped = atomic_exchange(&g_fail_log_dropped, 0);
        if (dropped != 0)
            td__log(TD_LOG_INFO, "%llu more execution failures were not logged (at most %d "
                                 "lines a second)", dropped, FAILURE_LOG_PER_S);
    }
    if (atomic_fetch_add(&g_fail_log_lines, 1) < FAILURE_LOG_PER_S) return true;
    atomic_fetch_add(&g_fail_log_dropped, 1);
    return false;
}

void td__ss_failure(td__srv_session *ss, uint64_t seq, uint32_t op_index, td_status st,
                    const char *message)
{
    td__ss_failure_op(ss, seq, op_index, NULL, st, message);
}

void td__ss_failure_op(td__srv_session *ss, uint64_t seq, uint32_t op_index,
                       const char *op_name, td_status st, const char *message)
{
    td__metrics_failure(st);
    if (td__ss_failure_log_allowed()) {
        if (op_name != NULL)
            td__log(TD_LOG_INFO, "session %llu (tenant '%s'): op %u (%s) of seq %llu failed: %s: %s",
                    (unsigned long long)ss->c.id, ss->tenant, op_index, op_name,
                    (unsigned long long)seq, td_status_name(st), message);
        else
            td__log(TD_LOG_INFO, "session %llu (tenant '%s'): request seq %llu failed: %s: %s",
                    (unsigned long long)ss->c.id, ss->tenant, (unsigned long long)seq,
                    td_status_name(st), message);
    }
    td__reply r = {.kind = TD_REPLY_FAILURE, .seq = seq, .op_index = op_index, .status = st,
                   .message = message};
    if (td__ss_reply(ss, &r) != TD_OK)
        td__log(TD_LOG_WARN, "session %llu: out of memory; dropped failure for seq %llu: %s",
                (unsigned long long)ss->c.id, (unsigned long long)seq, message);
}

/* ---- life cycle ---- */

void td__ss_unreserve(td__srv_session *ss)
{
    if (ss->reserved) {
        ss->reserved = false;
        td__service_session_unreserve(ss->svc);
    }
    if (ss->quota_session) {
        ss->quota_session = false;
        td__quota_session_uncharge(ss->quota);
    }
}

/* TENSORD_TRACE_JOBS: one line of worker time per kind of request (count, ms), and the
 * device copies inside reads and GPU candidates. */
static void trace_log(const td__srv_session *ss)
{
    static const char *const names[TD_REQ_KIND_COUNT] = {
        "bad", "open", "batch", "write", "has_blobs", "write_from_blob", "store_blob",
        "read", "release", "fence", "graph_define", "graph_run", "graph_release",
        "to_device", "shm_write", "shm_read"};
    char line[1024];
    size_t at = 0;
    for (int k = 0; k < TD_REQ_KIND_COUNT && at < sizeof line; k++)
        if (ss->trace_n[k] > 0)
            at += (size_t)snprintf(line + at, sizeof line - at, " %s %llu/%.3f ms", names[k],
                                   (unsigned long long)ss->trace_n[k],
                                   (double)ss->trace_ns[k] * 1e-6);
    if (at >= sizeof line) at = sizeof line - 1;
    line[at] = '\0';
    td__log(TD_LOG_INFO,
            "session %llu worker time (TENSORD_TRACE_JOBS, count/total):%s; read device "
            "copies %.3f ms, candidate copies %.3f ms",
            (unsigned long long)ss->c.id, line, (double)ss->trace_read_copy_ns * 1e-6,
            (double)ss->trace_candidate_copy_ns * 1e-6);
}

static void ss_free(td__srv_call *c)
{
    td__srv_session *ss = ss_of(c);
    td__service *svc = ss->svc;
    td__service_live_remove(svc, ss->live); /* first: a revoke may be looking at ss */
    if (ss->c.id != 0)
        td__log(TD_LOG_INFO,
                "session %llu closed (%s): tenant '%s', device %s, peer %s, %.3f s, %llu ops, "
                "received %llu bytes, sent %llu bytes; freed %llu tensors, %llu bytes",
                (unsigned long long)ss->c.id,
                td__srv_call_cancelled(&ss->c) ? "cancelled or client gone"
                                               : "ended by the client",
                ss->tenant, ss->dev != NULL ? ss->dev->name : "-", ss->peer,
                (double)(td__metrics_now_ns() - ss->start_ns) * 1e-9,
                (unsigned long long)ss->ops_run, (unsigned long long)ss->c.rx_bytes,
                (unsigned long long)td__srv_call_tx_bytes(&ss->c),
                (unsigned long long)ss->freed_tensors, (unsigned long long)ss->freed_bytes);
    if (ss->c.id != 0 && td__trace_jobs) trace_log(ss);
    td__req_decoder_destroy(ss->decoder);
    pthread_mutex_destroy(&ss->exec_mu);
    pthread_mutex_destroy(&ss->hold_mu);
    pthread_mutex_destroy(&ss->pend_mu);
    td__graph_set_fini(&ss->graphs);
    td__ss_pins_fini(ss);
    td__srv_call_fini(&ss->c);
    td__free(ss);
    td__service_call_end(svc);
}

/* Worker: the queue is empty and gone. Free the engine session, then end the call. */
static void queue_closed(void *arg)
{
    td__srv_session *ss = arg;
    /* First the ring: its thread may be running a request on the engine session. */
    td__ring *ring = atomic_exchange(&ss->ring, NULL);
    td__ring_stop(ring);
    /* the copies still reading the region finish, and their ShmWrites are answered */
    td__shm_done_stop(&ss->shm_done);
    if (ss->es) {
        /* no transfer runs now: the queue is closed, the ring stopped, the copies done */
        if (ss->shm_pinned != 0)
            td__session_host_unpin(ss->es, ss->shm_pinned, td__shm_region_data(ss->shm));
        ss->shm_pinned = 0;
        ss->freed_tensors = td__session_tensor_count(ss->es);
        ss->freed_bytes = td__session_bytes(ss->es);
        td__session_destroy(ss->es);
        ss->es = NULL;
    }
    td__shm_region_destroy(ss->shm); /* unmapped; freed once the client's mapping goes too */
    ss->shm = NULL;
    td__service_live_closed(ss->live); /* its device is free before its slot is */
    td__ss_unreserve(ss);
    td__srv_call_finish(&ss->c, ss->end_code, "%s", ss->end_msg);
    td__srv_call_unref(&ss->c);
}

/* Receive side: no more messages will come (half-close, cancel, error). */
static void stream_ended(td__srv_session *ss)
{
    ss->state = TD_SS_DONE;
    if (ss->wq != NULL) {
        td__worker_queue *q = ss->wq;
        ss->wq = NULL;
        /* a read held on q stays held (the queue is not freed) until the call drains or
         * dies (on_drained): a client that half-closed may still take its replies */
        td__srv_call_ref(&ss->c);
        td__worker_queue_close(q, queue_closed, ss);
    } else {
        td__srv_call_finish(&ss->c, ss->end_code, "%s", ss->end_msg);
    }
}

long td__srv_sessions_parked(void) { return atomic_load(&g_n_parked); }

/* Caller holds g_park_mu. */
static void park_unlink(td__srv_session *ss)
{
    if (ss->park_prev)
        ss->park_prev->park_next = ss->park_next;
    else
        g_parked = ss->park_next;
    if (ss->park_next)
        ss->park_next->park_prev = ss->park_prev;
    else
        g_parked_tail = ss->park_prev;
    ss->park_prev = ss->park_next = NULL;
    atomic_fetch_sub(&g_n_parked, 1);
}

static void job_free(td__job *j);

/* The batch of a session that ended while parked (the session's end, on_end). */
static void park_drop(td__srv_session *ss)
{
    pthread_mutex_lock(&g_park_mu);
    /* A waker that took the batch is queueing it on ss->wq: let it finish before the
     * stream's end closes that queue. */
    while (ss->unparking) pthread_cond_wait(&g_park_cv, &g_park_mu);
    td__job *j = ss->parked;
    ss->parked = NULL;
    if (j != NULL) park_unlink(ss);
    pthread_mutex_unlock(&g_park_mu);
    if (j == NULL) return;
    job_free(j);
    td__service_work_add(ss->svc, -1);
    td__srv_call_unref(&ss->c); /* the parked list's reference; the caller holds another */
}

/* One of q's queued batches has run: give the freed slots to q's parked sessions, oldest
 * first. Any thread. */
static void wake_parked(td__quota *q)
{
    if (atomic_load(&g_n_parked) == 0) return;
    for (;;) {
        td__srv_session *ss;
        td__job *j = NULL;
        char why[256];
        pthread_mutex_lock(&g_park_mu);
        for (ss = g_parked; ss != NULL && ss->quota != q; ss = ss->park_next) {
        }
        if (ss != NULL && td__quota_batch_charge(q, why, sizeof why) == TD_OK) {
            j = ss->parked;
            ss->parked = NULL;
            ss->unparking = true;
            park_unlink(ss);
        }
        pthread_mutex_unlock(&g_park_mu);
        if (j == NULL) return;
        j->batch_charged = true;
        td__log(TD_LOG_DEBUG, "session %llu: batch seq %llu queued after waiting for the "
                              "max_queued_batches quota", (unsigned long long)ss->c.id,
                (unsigned long long)j->rq.seq);
        bool queued = submit(ss, j);
        pthread_mutex_lock(&g_park_mu);
        ss->unparking = false;
        pthread_cond_broadcast(&g_park_cv);
        pthread_mutex_unlock(&g_park_mu);
        if (queued) td__srv_call_resume(&ss->c);
        td__service_work_add(ss->svc, -1);
        td__srv_call_unref(&ss->c);
    }
}

static void on_end(td__srv_call *c)
{
    park_drop(ss_of(c));
    stream_ended(ss_of(c));
}

/* ---- jobs ---- */

/* Note a StoreBlob(fingerprint) that is about to be queued (receive side). */
static void pend_add(td__srv_session *ss, td__job *j)
{
    pthread_mutex_lock(&ss->pend_mu);
    if (ss->pend_n < TD_SS_PEND_MAX) {
        memcpy(ss->pend_fp[ss->pend_n++], j->rq.fp, TD_FINGERPRINT_BYTES);
        j->pend = 1;
    } else {
        ss->pend_untracked++;
        j->pend = 2;
    }
    pthread_mutex_unlock(&ss->pend_mu);
}

/* The StoreBlob has run or was dropped (job_free). */
static void pend_remove(td__srv_session *ss, const td__job *j)
{
    pthread_mutex_lock(&ss->pend_mu);
    if (j->pend == 2) {
        ss->pend_untracked--;
    } else {
        for (uint32_t i = 0; i < ss->pend_n; i++) {
            if (memcmp(ss->pend_fp[i], j->rq.fp, TD_FINGERPRINT_BYTES) != 0) continue;
            memcpy(ss->pend_fp[i], ss->pend_fp[--ss->pend_n], TD_FINGERPRINT_BYTES);
            break;
        }
    }
    pthread_mutex_unlock(&ss->pend_mu);
}

static void job_free(td__job *j)
{
    if (j->pend != 0) pend_remove(j->ss, j);
    if (j->grun != NULL) td__graph_run_destroy(j->ss->es, j->grun);
    td__graph_unref(j->graph);
    if (j->batch_charged) {
        td__quota_batch_uncharge(j->ss->quota);
        wake_parked(j->ss->quota);
    }
    td__request_fini(&j->rq);
    td__free(j);
}

static void job_main(void *arg)
{
    td__job *j = arg;
    td__srv_session *ss = j->ss;
    /* A session with a ring shares its engine session with the ring's thread (ring.h):
     * never wait for it here (other sessions use this worker), try again after their turns. */
    bool locked = atomic_load(&ss->ring) != NULL;
    if (locked && pthread_mutex_trylock(&ss->exec_mu) != 0) {
        if (td__worker_continue(j->wq, job_main, j) == TD_OK) return;
        pthread_mutex_lock(&ss->exec_mu); /* no memory to requeue: wait this once */
    }
    j->continued = false;
    if (!td__srv_call_dead(&ss->c) && (j->always || ss->es != NULL)) td__handle(ss, j);
    /* Out of its slice: run the rest after the other sessions' turns. A session that ended
     * meanwhile drops the rest (the dead check above), and so does a failed requeue. */
    if (j->continued && td__worker_continue(j->wq, job_main, j) == TD_OK) {
        if (locked) pthread_mutex_unlock(&ss->exec_mu);
        return;
    }
    if (j->graph != NULL && !j->continued) { /* a graph run that finished */
        for (uint32_t i = 0; i < j->graph->n_ops; i++)
            td__metrics_op(j->slot, j->graph->ops[i].opcode, UINT64_MAX);
        ss->ops_run += j->graph->n_ops;
    }
    td__service_live_progress(ss->live, ss->ops_run, ss->es != NULL ? td__session_bytes(ss->es) : 0);
    if (j->rq.kind == TD_REQ_BATCH || j->rq.kind == TD_REQ_GRAPH_RUN)
        td__metrics_batch(j->slot, j->rq.kind == TD_REQ_GRAPH_RUN,
                          td__metrics_now_ns() - j->received_ns);
    td__metrics_queue_add(j->slot, -1);
    size_t cost = j->rq.cost;
    uint64_t seq = j->rq.decoded ? j->rq.seq : 0;
    job_free(j); /* may touch the engine session (a graph run's state) */
    if (locked) pthread_mutex_unlock(&ss->exec_mu);
    if (seq > atomic_load(&ss->done_seq)) {
        atomic_store(&ss->done_seq, seq);
        td__ring_progress(atomic_load(&ss->ring));
    }
    td__srv_call_unhold(&ss->c, cost);
    td__service_work_add(ss->svc, -1);
    td__srv_call_unref(&ss->c);
}

/* ---- receive side ---- */

/* The receive side cannot go on (out of memory): end the call and clean up. */
static void fatal(td__srv_session *ss, const char *what)
{
    td__log(TD_LOG_ERROR, "session %llu: %s; ending the session", (unsigned long long)ss->c.id,
            what);
    td__srv_call_cancel(&ss->c, GRPC_STATUS_RESOURCE_EXHAUSTED, what);
    stream_ended(ss);
}

/* Submit j; takes ownership. False if the session had to end. */
static bool submit(td__srv_session *ss, td__job *j)
{
    td__srv_call_hold(&ss->c, j->rq.cost);
    td__srv_call_ref(&ss->c);
    td__service_work_add(ss->svc, 1);
    j->wq = ss->wq;
    j->slot = ss->slot;
    td__metrics_queue_add(j->slot, 1);
    if (td__worker_submit(ss->wq, job_main, j) == TD_OK) return true;
    td__metrics_queue_add(j->slot, -1);
    size_t cost = j->rq.cost;
    td__service_work_add(ss->svc, -1);
    job_free(j);
    td__srv_call_unhold(&ss->c, cost);
    fatal(ss, "out of memory queueing work");
    td__srv_call_unref(&ss->c);
    return false;
}

/* A message whose seq is not the previous one + 1 (replayed, skipped, reordered): replies
 * are matched to requests by seq, so the session cannot go on. Answer with a Failure
 * (carrying the seq received), then end the call with INVALID_ARGUMENT once the replies
 * queued before it are sent. Returns false: receive nothing more. */
static bool seq_violation(td__srv_session *ss, td__job *j)
{
    snprintf(ss->end_msg, sizeof ss->end_msg,
             "message seq %llu out of order: expected seq %llu (each message carries the "
             "previous seq + 1); session ended",
             (unsigned long long)j->rq.seq, (unsigned long long)atomic_load(&ss->next_seq));
    td__log(TD_LOG_INFO, "session %llu: %s", (unsigned long long)ss->c.id, ss->end_msg);
    td__request_fail(&j->rq, TD_EPROTO, "%s", ss->end_msg);
    if (!submit(ss, j)) return false; /* already ended */
    ss->end_code = GRPC_STATUS_INVALID_ARGUMENT;
    stream_ended(ss);
    return false;
}

static void reject(td__srv_session *ss, grpc_status_code code, const char *msg)
{
    ss->state = TD_SS_DONE;
    td__log(TD_LOG_INFO, "rejected a session from %s: %s", ss->peer, msg);
    td__srv_call_finish(&ss->c, code, "%s", msg);
}

/* First message (decoded and validated as an open). Returns whether to keep receiving. */
static bool handle_open(td__srv_session *ss, td__job *j)
{
    char msg[512];
    td__service_live_opened(ss->live); /* a whole first message came: no open timeout */
    if (j->rq.kind != TD_REQ_OPEN) {
        reject(ss, j->rq.reject_code,
               j->rq.text != NULL ? j->rq.text : td_status_message(j->rq.status));
        job_free(j);
        return false;
    }
    if (td__service_shutting_down(ss->svc)) {
        reject(ss, GRPC_STATUS_UNAVAILABLE, "server is shutting down");
        job_free(j);
        return false;
    }
    uint64_t id;
    if (!td__service_session_reserve(ss->svc, &id)) {
        snprintf(msg, sizeof msg, "session limit reached: this server allows %llu sessions",
                 (unsigned long long)td__service_max_sessions(ss->svc));
        reject(ss, GRPC_STATUS_RESOURCE_EXHAUSTED, msg);
        job_free(j);
        return false;
    }
    char why[256];
    if (td__quota_session_charge(ss->quota, why, sizeof why) != TD_OK) {
        td__service_session_unreserve(ss->svc);
        reject(ss, GRPC_STATUS_RESOURCE_EXHAUSTED, why);
        job_free(j);
        return false;
    }
    td__device *dev = NULL;
    td_status pst = td__service_place(ss->svc, ss->quota, j->rq.device_req, j->rq.dev,
                                      j->rq.extra, j->rq.n_extra, ss->live, &dev, msg,
                                      sizeof msg);
    if (pst != TD_OK) {
        td__quota_session_uncharge(ss->quota);
        td__service_session_unreserve(ss->svc);
        reject(ss, pst == TD_EUNAUTHENTICATED ? GRPC_STATUS_PERMISSION_DENIED
                                              : GRPC_STATUS_INVALID_ARGUMENT,
               msg);
        job_free(j);
        return false;
    }
    for (size_t i = 0; i < j->rq.n_extra && pst == TD_OK; i++) {
        td__device *x = j->rq.extra[i], *ok = NULL;
        char why2[512];
        if (x == dev) {
            snprintf(msg, sizeof msg, "open: device %s is named twice (it is the session's "
                     "first device)", x->name);
            pst = TD_EINVAL;
        } else if ((pst = td__service_place(ss->svc, ss->quota, x->name, x, NULL, 0, NULL,
                                            &ok, why2, sizeof why2)) != TD_OK) {
            snprintf(msg, sizeof msg, "%s", why2);
        }
    }
    if (pst != TD_OK) {
        td__quota_session_uncharge(ss->quota);
        td__service_session_unreserve(ss->svc);
        reject(ss, pst == TD_EUNAUTHENTICATED ? GRPC_STATUS_PERMISSION_DENIED
                                              : GRPC_STATUS_INVALID_ARGUMENT,
               msg);
        job_free(j);
        return false;
    }
    if (j->rq.dev == NULL || j->rq.device_req[0] == '\0') /* the server chose: say how */
        td__log(TD_LOG_INFO, "session %llu: device %s for request '%s' from tenant '%s': %s",
                (unsigned long long)id, dev->name, j->rq.device_req, ss->tenant, msg);
    j->rq.dev = dev;
    if (td__service_queue_open(ss->svc, j->rq.dev, &ss->wq) != TD_OK) {
        job_free(j);
        td__quota_session_uncharge(ss->quota);
        td__service_session_unreserve(ss->svc);
        reject(ss, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory opening a session");
        return false;
    }
    ss->c.id = id;
    ss->reserved = true;
    ss->quota_session = true;
    ss->dev = j->rq.dev;
    ss->protocol = j->rq.protocol;
    ss->slot = td__metrics_device_slot(ss->dev);
    td__service_live_set_device(ss->live, id, ss->slot, ss->dev->name);
    ss->state = TD_SS_OPEN;
    snprintf(ss->client, sizeof ss->client, "%s", j->rq.client);
    j->always = true;
    atomic_store(&ss->next_seq, j->rq.seq + 1);
    return submit(ss, j);
}

/* A batch: charged to the tenant's queued batches; past the limit it waits, parked, with
 * the session's receive paused (see the top of this file). Returns whether to keep
 * receiving (true also when parked: the pause stops the receive loop). */
static bool prepare_batch(td__srv_session *ss, td__job *j)
{
    td__request *rq = &j->rq;
    /* An empty batch still runs (as nothing), so that every accepted seq reaches done_seq
     * in order: a ring request waits for that (ring.h). */
    if (rq->n_ops == 0) return submit(ss, j);
    char qerr[256];
    if (td__quota_batch_charge(ss->quota, qerr, sizeof qerr) == TD_OK) {
        j->batch_charged = true;
        return submit(ss, j);
    }
    pthread_mutex_lock(&g_park_mu);
    /* Counted before the second try: a batch that finishes after that try fails sees the
     * count (wake_parked's unlocked check) and waits for this lock (seq_cst atomics). */
    atomic_fetch_add(&g_n_parked, 1);
    if (td__quota_batch_charge(ss->quota, qerr, sizeof qerr) == TD_OK) { /* freed meanwhile */
        atomic_fetch_sub(&g_n_parked, 1);
        pthread_mutex_unlock(&g_park_mu);
        j->batch_charged = true;
        return submit(ss, j);
    }
    td__srv_call_pause(&ss->c); /* before any waker can see it (and resume) */
    td__srv_call_ref(&ss->c);
    td__service_work_add(ss->svc, 1);
    ss->parked = j;
    ss->park_prev = g_parked_tail;
    ss->park_next = NULL;
    if (g_parked_tail)
        g_parked_tail->park_next = ss;
    else
        g_parked = ss;
    g_parked_tail = ss;
    uint64_t seq = rq->seq; /* j may run and be freed as soon as the lock is released */
    pthread_mutex_unlock(&g_park_mu);
    td__log(TD_LOG_DEBUG, "session %llu: batch seq %llu waits (%s); not reading the stream "
                          "until one has run", (unsigned long long)ss->c.id,
            (unsigned long long)seq, qerr);
    return true;
}

/* A fingerprint offer (HasBlobs with fingerprints only) that names nothing the server
 * knows is answered "absent" here, on the receive side, instead of after the session's
 * queued work: the client waits for this answer before it sends an upload's bytes, so
 * behind a training step's ops the answer held the pipeline empty once per upload (P5:
 * the server's device threads idle while the batch crossed the wire). The job still goes
 * to the worker, which lets its seq pass in order (done_seq, the ring). Only when cheap
 * and certain: the session is open, at most FRESH_OFFER_MAX fingerprints, none has a
 * candidate record, and the blob store has no cache directory (whose fingerprint files
 * the worker reads), and no StoreBlob of this session with one of them is still queued
 * (pend_fp: it is about to keep that candidate). A session with a request ring never
 * answers early (its StoreBlobs may travel in the ring). */
#define FRESH_OFFER_MAX 4

static void answer_fresh_offer(td__srv_session *ss, td__job *j)
{
    const td__request *rq = &j->rq;
    td__blobstore *bs = td__service_blobs(ss->svc);
    if (rq->n_hashes != 0 || rq->n_fps == 0 || rq->n_fps > FRESH_OFFER_MAX || bs == NULL ||
        td__blobstore_on_disk(bs) || atomic_load(&ss->ring) != NULL)
        return; /* (a ring's StoreBlobs do not pass through pend_fp) */
    /* Under pend_mu, which the open holds while it queues SessionOpened and sets `opened`:
     * a client that has SessionOpened finds `opened` set, and no answer can precede it. */
    pthread_mutex_lock(&ss->pend_mu);
    bool fresh = atomic_load(&ss->opened) && ss->pend_untracked == 0;
    for (size_t i = 0; i < rq->n_fps && fresh; i++) {
        for (uint32_t k = 0; k < ss->pend_n && fresh; k++)
            fresh = memcmp(ss->pend_fp[k], rq->fps[i], TD_FINGERPRINT_BYTES) != 0;
        fresh = fresh && !td__candidates_known(ss->tenant, rq->fps[i]);
    }
    if (fresh) {
        bool present[FRESH_OFFER_MAX] = {false};
        td__reply r = {.kind = TD_REPLY_BLOB_STATUS, .seq = rq->seq, .present = present,
                       .n_present = rq->n_fps};
        j->answered = td__ss_reply(ss, &r) == TD_OK;
    }
    pthread_mutex_unlock(&ss->pend_mu);
}

static bool on_message(td__srv_call *c, grpc_byte_buffer *bb)
{
    td__srv_session *ss = ss_of(c);
    if (ss->state == TD_SS_DONE) {
        /* Ending (the open failed on the worker): drain until the client goes away. */
        grpc_byte_buffer_destroy(bb);
        return true;
    }
    td__job *j = td__calloc(1, sizeof *j);
    if (j == NULL) {
        grpc_byte_buffer_destroy(bb);
        if (ss->state == TD_SS_AWAIT_OPEN) {
            td__service_live_opened(ss->live);
            reject(ss, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory opening a session");
        } else {
            fatal(ss, "out of memory for a request");
        }
        return false;
    }
    j->ss = ss;
    j->slot = -1;
    j->received_ns = td__metrics_now_ns();
    td__request_decode(ss->decoder, bb, ss->state == TD_SS_AWAIT_OPEN, &j->rq);
    if (ss->state == TD_SS_AWAIT_OPEN) return handle_open(ss, j);
    if (!j->rq.decoded) return submit(ss, j);
    uint64_t want = j->rq.seq;
    if (!atomic_compare_exchange_strong(&ss->next_seq, &want, want + 1))
        return seq_violation(ss, j);
    td__ring_progress(atomic_load(&ss->ring));
    if (j->rq.kind == TD_REQ_BATCH) return prepare_batch(ss, j);
    if (j->rq.kind == TD_REQ_HAS_BLOBS) answer_fresh_offer(ss, j);
    if (j->rq.kind == TD_REQ_STORE_BLOB && j->rq.fp != NULL) pend_add(ss, j);
    return submit(ss, j);
}

bool td__ss_wait_for_drain(td__srv_session *ss, td__worker_queue *q, size_t mark)
{
    pthread_mutex_lock(&ss->hold_mu);
    const bool wait = td__srv_call_want_drain(&ss->c, mark);
    if (wait) {
        ss->hold_q = q;
        td__worker_queue_hold(q);
    }
    pthread_mutex_unlock(&ss->hold_mu);
    return wait;
}

/* The call's replies drained to the mark (or it died): the held read goes on. */
static void on_drained(td__srv_call *c)
{
    td__srv_session *ss = (td__srv_session *)c;
    pthread_mutex_lock(&ss->hold_mu);
    td__worker_queue *q = ss->hold_q;
    ss->hold_q = NULL;
    if (q != NULL) td__worker_queue_release(q);
    pthread_mutex_unlock(&ss->hold_mu);
}

static const td__srv_call_ops session_call_ops = {
    .on_message = on_message,
    .on_end = on_end,
    .on_free = ss_free,
    .on_drained = on_drained,
};

void td__srv_session_start(td__service *svc, grpc_call *call, td__quota *quota,
                           const td__identity *id)
{
    td__srv_session *ss = td__calloc(1, sizeof *ss);
    td__req_decoder *dec = ss != NULL ? td__req_decoder_create() : NULL;
    if (ss == NULL || dec == NULL) {
        td__free(ss);
        grpc_call_cancel_with_status(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory",
                                     NULL);
        grpc_call_unref(call);
        return;
    }
    td__service_call_begin(svc);
    td__srv_call_init(&ss->c, svc, call, &session_call_ops);
    ss->svc = svc;
    ss->decoder = dec;
    pthread_mutex_init(&ss->exec_mu, NULL);
    pthread_mutex_init(&ss->hold_mu, NULL);
    pthread_mutex_init(&ss->pend_mu, NULL);
    ss->quota = quota;
    ss->tenant = quota->name;
    ss->state = TD_SS_AWAIT_OPEN;
    ss->slot = -1;
    ss->start_ns = td__metrics_now_ns();
    char *peer = grpc_call_get_peer(call);
    td__request_printable(peer, ss->peer, sizeof ss->peer);
    gpr_free(peer);
    ss->live = td__service_live_add(svc, ss, quota, id, ss->peer);
    td__srv_call_start(&ss->c);
    td__srv_call_unref(&ss->c);
}

void td__srv_session_revoke(td__srv_session *ss, grpc_status_code code, const char *why)
{
    td__log(TD_LOG_INFO, "session %llu of tenant '%s' at %s ended: %s",
            (unsigned long long)ss->c.id, ss->tenant, ss->peer, why);
    td__srv_call_cancel(&ss->c, code, why);
}

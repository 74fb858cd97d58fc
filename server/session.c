/* session.c — one Session stream: the call state machine and the closures that drive the
 * engine session (see session.h).
 *
 * Who does what:
 *  - receive side (a completion-queue thread; one receive is outstanding at a time, so
 *    this state has one owner at any moment): decode each ClientMessage, turn it into a
 *    closure ("job") and submit it to the session's worker queue, then ask for the next
 *    message. Nothing here touches the engine session.
 *  - worker side (the device worker): jobs run in submission order and call the engine
 *    session; replies are encoded there and pushed onto the send queue.
 *  - send side (whoever pushes or completes a send): gRPC allows one SEND_MESSAGE in flight
 *    per call, so replies wait in a mutex-protected queue; the thread that finds no send in
 *    flight starts the next one, and each send completion starts the one after.
 *
 * Every reply after `open` goes through the worker queue, failures included, so the client
 * sees replies in the order of its requests.
 *
 * Flow control: the memory a request holds (its message, the job, converted ops) counts
 * until its job has run, and a reply's memory (its bytes plus SS_REPLY_OVERHEAD) counts
 * until gRPC is done sending it. Above
 * SS_RECV_HIGH bytes in all the receive side stops asking gRPC for messages (HTTP/2 flow
 * control then holds the client back, so a client that floods requests, or never reads
 * its replies, cannot grow the server's memory); whoever brings the total under
 * SS_RECV_LOW (a finished job, a completed send) asks again.
 *
 * Tensor bytes: only a write's header is flattened (td__wire_decode_head); the job keeps
 * the received byte buffer and the worker copies the payload once, from gRPC's slices
 * straight into the tensor's (pooled) buffer. Reads on host-memory devices send slices
 * over the tensor buffer itself, each holding a buffer reference.
 *
 * Blobs (server/blobstore.h): HasBlobs answers from the shared store and pins what it
 * found until the session's WriteFromBlob uses it (at most SS_MAX_PINS pins, each charged
 * to the tenant's max_bytes quota while held; a blob whose pin the quota refuses is
 * reported absent, so the client sends the bytes itself); StoreBlob re-hashes a written tensor
 * before the store accepts it. Keys are scoped by the session's tenant.
 */
#include "server/session.h"

#include "common/alloc.h"
#include "common/log.h"
#include "engine/session.h"
#include "engine/tensor.h"
#include "server/blobstore.h"
#include "server/graphcache.h"
#include "wire_graph.h"
#include "wire.h"

#include <grpc/support/alloc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#define SS_RECV_HIGH ((size_t)64 << 20)
#define SS_RECV_LOW ((size_t)16 << 20)
/* Memory a job holds besides its message bytes (job, unpacked message, allocator slack):
 * counted so that a flood of tiny messages is held back too. */
#define SS_JOB_OVERHEAD 512
/* Memory a queued reply holds besides its message bytes: the grpc_byte_buffer with its
 * grpc_slice_buffer of 8 inline slices (~330 bytes), the send_item (64; 80 with malloc's
 * header) and the encoded slice's refcount header. Measured: a client that sends fences
 * and never reads made the server park 150,000 FenceDone replies (6 bytes each on the
 * wire) for 61.6 MB of RSS, 410 bytes each (tests/hostile/memory.c, never_reading_client).
 * The old count (sizeof(send_item) + message, ~70 bytes) let ~390 MB park under the mark. */
#define SS_REPLY_OVERHEAD 404
/* Opcode no op uses: stands in for an op that could not be converted, so that the engine
 * poisons its output id and later ops that read it fail as they would for any failed op. */
#define SS_BAD_OPCODE 0xFFFFFFFFu

enum ss_state { SS_AWAIT_OPEN, SS_OPEN, SS_DONE };

typedef struct send_item {
    struct send_item *next;
    size_t cost; /* bytes counted in send_bytes while queued or in flight */
    grpc_byte_buffer *bb; /* NULL: the final status */
    grpc_status_code code;
    grpc_slice details;
} send_item;

typedef struct td__srv_session {
    atomic_long refs;
    td__service *svc;
    grpc_call *call;
    uint64_t id;
    char peer[128];
    char client[65];
    /* The authenticated tenant: its quota (borrowed from the service's td__tenants) and
     * its name, which scopes lookups shared between sessions (blob store, graph cache).
     * Set before the first message is received; never NULL. */
    td__quota *quota;
    const char *tenant;
    bool quota_session; /* holds one of the tenant's sessions (worker side) */
    struct td__live_session *live; /* registration for token revocation (service.h) */

    /* Receive side (one completion-queue thread at a time). */
    td__tag recv_tag;
    grpc_byte_buffer *recv_buf;
    td__wire_scratch scratch;
    grpc_byte_buffer *rx_bb; /* the message being handled, while its payload is unclaimed */
    td__wire_span rx_span;
    enum ss_state state;
    uint64_t next_seq; /* the seq the next client message must carry (open's seq + 1, ...) */
    /* Set by the receive side before it ends the stream for a protocol violation; the
     * status sent once the worker queue has drained (so queued replies go first). */
    grpc_status_code end_code;
    char end_msg[256];
    td__worker_queue *wq;
    td__device *dev;

    td__tag close_tag;
    int cancelled;     /* written by gRPC for RECV_CLOSE_ON_SERVER */
    atomic_bool dead;  /* the call is over (cancelled, or a send failed): skip work */

    /* Worker side. */
    td__session *es;
    bool reserved; /* holds one of the service's session slots */
    uint64_t freed_tensors, freed_bytes;
    td__graph_set graphs; /* graphs this session defined or looked up (server/graphcache.h) */
    td__blob **pins; /* blobs HasBlobs reported present, until WriteFromBlob uses them */
    size_t n_pins;

    /* Send side and flow control, under mu. */
    pthread_mutex_t mu;
    td__tag send_tag;
    send_item *sq_head, *sq_tail, *in_flight;
    bool status_queued;
    bool md_sent;
    size_t pending_bytes; /* memory held by queued jobs */
    size_t send_bytes;    /* memory held by queued replies */
    bool recv_paused;
} td__srv_session;

#define SS_OF(tagptr, field) ((td__srv_session *)((char *)(tagptr) - offsetof(td__srv_session, field)))

static void ss_ref(td__srv_session *ss) { atomic_fetch_add(&ss->refs, 1); }
static void ss_unref(td__srv_session *ss);
static void recv_next(td__srv_session *ss);
static void stream_ended(td__srv_session *ss);

/* ---- send side ---- */

static void item_free(send_item *it)
{
    if (it->bb) grpc_byte_buffer_destroy(it->bb);
    grpc_slice_unref(it->details);
    td__free(it);
}

static void items_free(send_item *list)
{
    while (list) {
        send_item *next = list->next;
        item_free(list);
        list = next;
    }
}

/* Caller holds mu: an item leaves the send side (sent or dropped). */
static void uncount_locked(td__srv_session *ss, send_item *it)
{
    ss->send_bytes -= it->cost;
    td__service_work_add(ss->svc, -1);
}

/* Caller holds mu. Returns the items it dropped (free them after unlocking). */
static send_item *kill_locked(td__srv_session *ss)
{
    atomic_store(&ss->dead, true);
    send_item *list = ss->sq_head;
    ss->sq_head = ss->sq_tail = NULL;
    for (send_item *it = list; it != NULL; it = it->next) uncount_locked(ss, it);
    return list;
}

/* Caller holds mu. Whether the caller must restart the paused receive: memory held by
 * queued work fell below the low mark, or the call is over (the receive then fails at
 * once, which is what ends the stream and frees the session). */
static bool resume_locked(td__srv_session *ss)
{
    if (!ss->recv_paused) return false;
    if (!atomic_load(&ss->dead) && ss->pending_bytes + ss->send_bytes > SS_RECV_LOW)
        return false;
    ss->recv_paused = false;
    return true;
}

/* Caller holds mu and a reference; starts the next queued send. Returns dropped items. */
static send_item *send_next_locked(td__srv_session *ss)
{
    send_item *it = ss->sq_head;
    if (it == NULL || ss->in_flight != NULL) return NULL;
    ss->sq_head = it->next;
    if (ss->sq_head == NULL) ss->sq_tail = NULL;
    it->next = NULL;
    grpc_op ops[2];
    memset(ops, 0, sizeof ops);
    size_t n = 0;
    /* Initial metadata goes with the first send, status included: in gRPC 1.51 a
     * SEND_STATUS_FROM_SERVER without it (a "trailers-only" reply) is never written to
     * the wire and the client waits until its deadline (measured). */
    if (!ss->md_sent) {
        ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
        ss->md_sent = true;
    }
    if (it->bb != NULL) {
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = it->bb;
    } else {
        ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
        ops[n].data.send_status_from_server.status = it->code;
        ops[n++].data.send_status_from_server.status_details = &it->details;
    }
    ss->in_flight = it;
    ss_ref(ss);
    td__tag_arm(&ss->send_tag);
    grpc_call_error e = grpc_call_start_batch(ss->call, ops, n, &ss->send_tag, NULL);
    if (e == GRPC_CALL_OK) return NULL;
    td__log(TD_LOG_ERROR, "session %llu: cannot start a send (grpc error %d)",
            (unsigned long long)ss->id, (int)e);
    ss->in_flight = NULL;
    atomic_fetch_sub(&ss->refs, 1); /* the caller still holds one */
    uncount_locked(ss, it);
    send_item *dropped = kill_locked(ss);
    it->next = dropped;
    return it;
}

static void send_done(td__tag *tag, bool ok)
{
    td__srv_session *ss = SS_OF(tag, send_tag);
    pthread_mutex_lock(&ss->mu);
    send_item *done = ss->in_flight, *dropped = NULL;
    ss->in_flight = NULL;
    if (done) uncount_locked(ss, done);
    if (!ok)
        dropped = kill_locked(ss);
    else
        dropped = send_next_locked(ss);
    bool resume = resume_locked(ss);
    pthread_mutex_unlock(&ss->mu);
    if (!ok)
        td__log(TD_LOG_DEBUG, "session %llu: send failed (call over)", (unsigned long long)ss->id);
    if (done) item_free(done);
    items_free(dropped);
    if (resume) recv_next(ss);
    ss_unref(ss);
}

/* Queue an item; takes ownership. Dropped when the call is over or has its status. */
static void send_push(td__srv_session *ss, send_item *it)
{
    send_item *dropped = NULL;
    pthread_mutex_lock(&ss->mu);
    if (atomic_load(&ss->dead) || ss->status_queued) {
        dropped = it;
    } else {
        if (it->bb == NULL) ss->status_queued = true;
        ss->send_bytes += it->cost;
        td__service_work_add(ss->svc, 1);
        if (ss->sq_tail)
            ss->sq_tail->next = it;
        else
            ss->sq_head = it;
        ss->sq_tail = it;
        dropped = send_next_locked(ss);
    }
    pthread_mutex_unlock(&ss->mu);
    items_free(dropped);
}

/* Queue the call's final status. */
static void ss_finish(td__srv_session *ss, grpc_status_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void ss_finish(td__srv_session *ss, grpc_status_code code, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    send_item *it = td__calloc(1, sizeof *it);
    if (it == NULL) {
        /* Without memory for a status, cancelling still ends the call. */
        grpc_call_cancel_with_status(ss->call, code, msg, NULL);
        return;
    }
    it->code = code;
    it->details = grpc_slice_from_copied_string(msg);
    it->cost = SS_REPLY_OVERHEAD + strlen(msg);
    send_push(ss, it);
}

/* Encode and queue a ServerMessage (payload as in td__wire_encode). */
static td_status send_msg(td__srv_session *ss, Tensord__V1__ServerMessage *m,
                          const td__wire_payload *payload)
{
    grpc_byte_buffer *bb;
    td_status st = td__wire_encode(&m->base, payload, &bb);
    if (st != TD_OK) return st;
    send_item *it = td__calloc(1, sizeof *it);
    if (it == NULL) {
        grpc_byte_buffer_destroy(bb);
        return TD_ENOMEM;
    }
    it->bb = bb;
    it->details = grpc_empty_slice();
    it->cost = SS_REPLY_OVERHEAD + grpc_byte_buffer_length(bb);
    send_push(ss, it);
    return TD_OK;
}

static void send_failure(td__srv_session *ss, uint64_t seq, uint32_t op_index, td_status st,
                         const char *message)
{
    Tensord__V1__ServerMessage m = TENSORD__V1__SERVER_MESSAGE__INIT;
    Tensord__V1__Failure f = TENSORD__V1__FAILURE__INIT;
    f.op_index = op_index;
    f.status = (uint32_t)st;
    f.message = (char *)message;
    m.seq = seq;
    m.body_case = TENSORD__V1__SERVER_MESSAGE__BODY_FAILURE;
    m.failure = &f;
    if (send_msg(ss, &m, NULL) != TD_OK)
        td__log(TD_LOG_WARN, "session %llu: out of memory; dropped failure for seq %llu: %s",
                (unsigned long long)ss->id, (unsigned long long)seq, message);
}

/* ---- life cycle ---- */

/* Drop a pin taken by pin_blob: its bytes go back to the tenant, its reference to the blob. */
static void unpin(td__srv_session *ss, td__blob *b)
{
    td__quota_bytes_uncharge(ss->quota, b->nbytes);
    td__blob_unref(b);
}

static void ss_free(td__srv_session *ss)
{
    td__service *svc = ss->svc;
    td__service_live_remove(svc, ss->live); /* first: a revoke may be looking at ss */
    if (ss->id != 0)
        td__log(TD_LOG_INFO, "session %llu closed (%s): freed %llu tensors, %llu bytes",
                (unsigned long long)ss->id,
                ss->cancelled ? "cancelled or client gone" : "ended by the client",
                (unsigned long long)ss->freed_tensors, (unsigned long long)ss->freed_bytes);
    items_free(kill_locked(ss)); /* empty unless something went wrong */
    if (ss->recv_buf) grpc_byte_buffer_destroy(ss->recv_buf);
    td__wire_scratch_fini(&ss->scratch);
    td__graph_set_fini(&ss->graphs);
    for (size_t i = 0; i < ss->n_pins; i++) unpin(ss, ss->pins[i]);
    td__free(ss->pins);
    if (ss->rx_bb) grpc_byte_buffer_destroy(ss->rx_bb);
    grpc_call_unref(ss->call);
    pthread_mutex_destroy(&ss->mu);
    td__free(ss);
    td__service_call_end(svc);
}

static void ss_unref(td__srv_session *ss)
{
    if (atomic_fetch_sub(&ss->refs, 1) == 1) ss_free(ss);
}

static void close_done(td__tag *tag, bool ok)
{
    (void)ok;
    td__srv_session *ss = SS_OF(tag, close_tag);
    send_item *dropped = NULL;
    bool resume = false;
    if (ss->cancelled) {
        pthread_mutex_lock(&ss->mu);
        dropped = kill_locked(ss);
        resume = resume_locked(ss);
        pthread_mutex_unlock(&ss->mu);
    }
    items_free(dropped);
    if (resume) recv_next(ss);
    ss_unref(ss);
}

/* Worker: the queue is empty and gone. Free the engine session, then end the call. */
static void queue_closed(void *arg)
{
    td__srv_session *ss = arg;
    if (ss->es) {
        ss->freed_tensors = td__session_tensor_count(ss->es);
        ss->freed_bytes = td__session_bytes(ss->es);
        td__session_destroy(ss->es);
        ss->es = NULL;
    }
    if (ss->reserved) {
        ss->reserved = false;
        td__service_session_unreserve(ss->svc);
    }
    if (ss->quota_session) {
        ss->quota_session = false;
        td__quota_session_uncharge(ss->quota);
    }
    ss_finish(ss, ss->end_code, "%s", ss->end_msg);
    ss_unref(ss);
}

/* Receive side: no more messages will come (half-close, cancel, error). */
static void stream_ended(td__srv_session *ss)
{
    ss->state = SS_DONE;
    if (ss->wq != NULL) {
        td__worker_queue *q = ss->wq;
        ss->wq = NULL;
        ss_ref(ss);
        td__worker_queue_close(q, queue_closed, ss);
    } else {
        ss_finish(ss, ss->end_code, "%s", ss->end_msg);
    }
}

/* ---- jobs (run on the worker) ---- */

typedef struct job job;
typedef void (*job_fn)(td__srv_session *ss, job *j);

struct job {
    td__srv_session *ss;
    job_fn run;
    bool always; /* run even without an engine session */
    uint64_t seq;
    size_t cost;
    ProtobufCMessage *msg;    /* owned */
    td__wire_scratch scratch; /* owned: a write's payload lives here */
    grpc_byte_buffer *bb; /* owned: a write whose payload stays in gRPC's slices */
    td__wire_span span;   /* where a write's payload is (in bb or in scratch) */
    const uint8_t *payload;
    size_t payload_len;
    td__op *ops;
    size_t n_ops;
    char **op_errs; /* per op, NULL unless the op could not be converted */
    bool batch_charged; /* holds one of the tenant's queued batches */
    uint64_t *poison_ids; /* a refused batch's output ids: run_failure poisons them */
    size_t n_poison;
    td_status status;
    char *text;
    td__device *dev;
    uint32_t protocol;
    /* Time slices (engine/worker.h): a batch or graph run that used up its slice sets
     * `continued` and is queued again at the head of the session's queue; it resumes at
     * ops[next_op] or with `grun`. */
    bool continued;
    td__worker_queue *wq; /* the queue it was submitted to (ss->wq goes NULL at close) */
    size_t next_op;
    td__graph_run *grun;
    td__graph *graph; /* reference held while grun runs */
};

static void job_free(job *j)
{
    if (j->grun != NULL) td__graph_run_destroy(j->ss->es, j->grun);
    td__graph_unref(j->graph);
    if (j->batch_charged) td__quota_batch_uncharge(j->ss->quota);
    if (j->msg) protobuf_c_message_free_unpacked(j->msg, NULL);
    td__wire_scratch_fini(&j->scratch);
    if (j->bb) grpc_byte_buffer_destroy(j->bb);
    if (j->op_errs) {
        for (size_t i = 0; i < j->n_ops; i++) td__free(j->op_errs[i]);
        td__free(j->op_errs);
    }
    td__free(j->ops);
    td__free(j->poison_ids);
    td__free(j->text);
    td__free(j);
}

static void job_main(void *arg)
{
    job *j = arg;
    td__srv_session *ss = j->ss;
    j->continued = false;
    if (!atomic_load(&ss->dead) && (j->always || ss->es != NULL)) j->run(ss, j);
    /* Out of its slice: run the rest after the other sessions' turns. A session that ended
     * meanwhile drops the rest (the dead check above), and so does a failed requeue. */
    if (j->continued && td__worker_continue(j->wq, job_main, j) == TD_OK) return;
    size_t cost = j->cost;
    job_free(j);
    pthread_mutex_lock(&ss->mu);
    ss->pending_bytes -= cost;
    bool restart = resume_locked(ss);
    pthread_mutex_unlock(&ss->mu);
    if (restart) {
        td__log(TD_LOG_DEBUG, "session %llu: resuming receive", (unsigned long long)ss->id);
        recv_next(ss);
    }
    td__service_work_add(ss->svc, -1);
    ss_unref(ss);
}

static void run_open(td__srv_session *ss, job *j)
{
    td__session_limits lim = {.max_bytes = td__service_max_session_bytes(ss->svc),
                              .quota = ss->quota};
    td__session *es;
    td_status st = td__session_create(j->dev, &lim, &es);
    if (st != TD_OK) {
        if (ss->reserved) {
            ss->reserved = false;
            td__service_session_unreserve(ss->svc);
        }
        if (ss->quota_session) {
            ss->quota_session = false;
            td__quota_session_uncharge(ss->quota);
        }
        td__log(TD_LOG_WARN, "session %llu: cannot open on %s: %s", (unsigned long long)ss->id,
                j->dev->name, td_status_message(st));
        ss_finish(ss, td__grpc_code(st), "cannot open a session on %s: %s", j->dev->name,
                  td_status_message(st));
        return;
    }
    ss->es = es;
    td__log(TD_LOG_INFO, "session %llu opened on %s by '%s' at %s, tenant '%s' (protocol %u)",
            (unsigned long long)ss->id, j->dev->name, ss->client, ss->peer, ss->tenant,
            j->protocol);
    Tensord__V1__ServerMessage m = TENSORD__V1__SERVER_MESSAGE__INIT;
    Tensord__V1__SessionOpened o = TENSORD__V1__SESSION_OPENED__INIT;
    Tensord__V1__Limits lim_msg = TENSORD__V1__LIMITS__INIT;
    lim_msg.max_message_bytes = TD_MAX_MESSAGE_BYTES;
    lim_msg.chunk_bytes = TD_CHUNK_BYTES;
    lim_msg.max_tensor_bytes = TD_MAX_TENSOR_BYTES;
    lim_msg.max_rank = TD_MAX_RANK;
    lim_msg.max_batch_ops = TD_MAX_BATCH_OPS;
    o.protocol = j->protocol;
    o.device = j->dev->name;
    o.session_id = ss->id;
    o.limits = &lim_msg;
    m.seq = j->seq;
    m.body_case = TENSORD__V1__SERVER_MESSAGE__BODY_OPENED;
    m.opened = &o;
    if (send_msg(ss, &m, NULL) != TD_OK)
        ss_finish(ss, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
}

static void batch_failure(void *arg, uint32_t op_index, td_status status, const char *message)
{
    job *j = arg;
    if (j->op_errs != NULL && op_index < j->n_ops && j->op_errs[op_index] != NULL)
        send_failure(j->ss, j->seq, op_index, TD_EPROTO, j->op_errs[op_index]);
    else
        send_failure(j->ss, j->seq, op_index, status, message);
}

static void run_batch(td__srv_session *ss, job *j)
{
    j->next_op = td__session_exec_slice(ss->es, j->ops, j->next_op, j->n_ops,
                                        TD_WORKER_SLICE_NS, false, batch_failure, j, NULL);
    j->continued = j->next_op < j->n_ops;
}

/* The payload is copied once: from gRPC's slices (or the decode scratch, for small or
 * unusually laid out messages) straight into the tensor's buffer. */
static void run_write(td__srv_session *ss, job *j)
{
    const Tensord__V1__ClientMessage *cm = (const Tensord__V1__ClientMessage *)j->msg;
    char err[512];
    size_t n = j->span.len;
    void *dst = NULL;
    td_status st = td__session_write_ptr(ss->es, cm->write->tensor, cm->write->offset, n, &dst,
                                         err, sizeof err);
    if (st == TD_OK && n > 0) {
        if (dst != NULL) {
            st = td__wire_span_copy(j->bb, &j->span, dst);
        } else if (j->span.flat != NULL) {
            st = td__session_write(ss->es, cm->write->tensor, cm->write->offset, j->span.flat, n,
                                   err, sizeof err);
        } else {
            void *tmp = td__malloc(n);
            st = tmp == NULL ? TD_ENOMEM : td__wire_span_copy(j->bb, &j->span, tmp);
            if (st == TD_OK)
                st = td__session_write(ss->es, cm->write->tensor, cm->write->offset, tmp, n, err,
                                       sizeof err);
            td__free(tmp);
        }
        if (st == TD_ENOMEM || st == TD_EPROTO)
            snprintf(err, sizeof err, "write seq %llu to tensor %llu: %s",
                     (unsigned long long)j->seq, (unsigned long long)cm->write->tensor,
                     st == TD_ENOMEM ? "out of host memory" : "unreadable payload");
    }
    if (st != TD_OK) send_failure(ss, j->seq, 0, st, err);
}

/* ---- blob store jobs ---- */

#define SS_MAX_PINS 1024
#define SS_MAX_HASHES TD_MAX_HAS_BLOBS /* proto/wire.h */

/* Pin b (takes the caller's reference) until WriteFromBlob or the session's end, charging
 * its bytes to the tenant's max_bytes quota. Returns false, dropping the reference, when
 * the quota refuses the pin: the blob is then reported absent, so that the client sends
 * the bytes with its writes (already paid for by the tensor) instead. */
static bool pin_blob(td__srv_session *ss, td__blob *b)
{
    for (size_t i = 0; i < ss->n_pins; i++) {
        if (ss->pins[i] == b) {
            td__blob_unref(b);
            return true;
        }
    }
    if (ss->pins == NULL && (ss->pins = td__calloc(SS_MAX_PINS, sizeof *ss->pins)) == NULL) {
        td__blob_unref(b); /* WriteFromBlob then looks in the store itself */
        return true;
    }
    if (ss->n_pins == SS_MAX_PINS) { /* drop the oldest pin */
        unpin(ss, ss->pins[0]);
        memmove(ss->pins, ss->pins + 1, (SS_MAX_PINS - 1) * sizeof *ss->pins);
        ss->n_pins--;
    }
    char why[384];
    if (td__quota_bytes_charge(ss->quota, b->nbytes, "pinning a blob of", why, sizeof why) !=
        TD_OK) {
        td__log(TD_LOG_DEBUG, "session %llu: blob reported absent: %s", (unsigned long long)ss->id,
                why);
        td__blob_unref(b);
        return false;
    }
    ss->pins[ss->n_pins++] = b;
    return true;
}

/* The pinned blob with this hash (the pin's reference passes to the caller, its bytes go
 * back to the tenant), else a store lookup. */
static td__blob *take_blob(td__srv_session *ss, const uint8_t *hash)
{
    for (size_t i = 0; i < ss->n_pins; i++) {
        td__blob *b = ss->pins[i];
        if (memcmp(b->hash, hash, TD_SHA256_BYTES) != 0) continue;
        memmove(ss->pins + i, ss->pins + i + 1, (ss->n_pins - i - 1) * sizeof *ss->pins);
        ss->n_pins--;
        td__quota_bytes_uncharge(ss->quota, b->nbytes);
        return b;
    }
    td__blobstore *bs = td__service_blobs(ss->svc);
    return bs != NULL ? td__blobstore_get(bs, ss->tenant, hash) : NULL;
}

static void run_has_blobs(td__srv_session *ss, job *j)
{
    const Tensord__V1__HasBlobs *h = ((const Tensord__V1__ClientMessage *)j->msg)->has_blobs;
    td__blobstore *bs = td__service_blobs(ss->svc);
    protobuf_c_boolean *present = td__calloc(h->n_sha256 > 0 ? h->n_sha256 : 1, sizeof *present);
    if (present == NULL) {
        send_failure(ss, j->seq, 0, TD_ENOMEM, "out of memory answering has-blobs");
        return;
    }
    for (size_t i = 0; i < h->n_sha256; i++) {
        td__blob *b = bs != NULL ? td__blobstore_get(bs, ss->tenant, h->sha256[i].data) : NULL;
        present[i] = b != NULL && pin_blob(ss, b);
    }
    Tensord__V1__ServerMessage m = TENSORD__V1__SERVER_MESSAGE__INIT;
    Tensord__V1__BlobStatus bst = TENSORD__V1__BLOB_STATUS__INIT;
    bst.n_present = h->n_sha256;
    bst.present = present;
    m.seq = j->seq;
    m.body_case = TENSORD__V1__SERVER_MESSAGE__BODY_BLOB_STATUS;
    m.blob_status = &bst;
    if (send_msg(ss, &m, NULL) != TD_OK)
        ss_finish(ss, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
    td__free(present);
}

static void run_write_from_blob(td__srv_session *ss, job *j)
{
    const Tensord__V1__WriteFromBlob *w =
        ((const Tensord__V1__ClientMessage *)j->msg)->write_from_blob;
    char err[512], hex[TD_SHA256_HEX];
    td__sha256_hex(w->sha256.data, hex);
    td__blob *b = take_blob(ss, w->sha256.data);
    if (b == NULL) {
        snprintf(err, sizeof err, "write seq %llu to tensor %llu: blob %.16s... is not in the "
                 "store (offer it with has-blobs first)", (unsigned long long)j->seq,
                 (unsigned long long)w->tensor, hex);
        send_failure(ss, j->seq, 0, TD_ENOTFOUND, err);
        return;
    }
    td__desc desc;
    td__buffer *buf = NULL;
    td_status st = td__session_lookup(ss->es, w->tensor, &desc, &buf, err, sizeof err);
    td__buffer_unref(buf);
    if (st == TD_OK && td__desc_nbytes(&desc) != b->nbytes) {
        snprintf(err, sizeof err, "write seq %llu: blob %.16s... has %zu bytes, tensor %llu "
                 "holds %zu", (unsigned long long)j->seq, hex, b->nbytes,
                 (unsigned long long)w->tensor, td__desc_nbytes(&desc));
        st = TD_ERANGE;
    }
    void *dst = NULL;
    if (st == TD_OK)
        st = td__session_write_ptr(ss->es, w->tensor, 0, b->nbytes, &dst, err, sizeof err);
    if (st == TD_OK && b->nbytes > 0) {
        if (dst != NULL)
            memcpy(dst, b->data, b->nbytes);
        else
            st = td__session_write(ss->es, w->tensor, 0, b->data, b->nbytes, err, sizeof err);
    }
    td__blob_unref(b);
    if (st != TD_OK) send_failure(ss, j->seq, 0, st, err);
}

static void run_store_blob(td__srv_session *ss, job *j)
{
    const Tensord__V1__StoreBlob *sb = ((const Tensord__V1__ClientMessage *)j->msg)->store_blob;
    td__blobstore *bs = td__service_blobs(ss->svc);
    if (bs == NULL) return;
    char err[512];
    td__desc desc;
    td__buffer *buf = NULL;
    td_status st = td__session_lookup(ss->es, sb->tensor, &desc, &buf, err, sizeof err);
    if (st == TD_OK) st = td__session_sync(ss->es, err, sizeof err);
    size_t n = st == TD_OK ? td__desc_nbytes(&desc) : 0;
    if (st == TD_OK) {
        if (buf != NULL) {
            st = td__blobstore_put(bs, ss->tenant, sb->sha256.data, buf->data, n, err,
                                   sizeof err);
        } else {
            void *tmp = td__malloc(n > 0 ? n : 1);
            st = tmp == NULL ? TD_ENOMEM
                             : td__session_read(ss->es, sb->tensor, 0, tmp, n, err, sizeof err);
            if (st == TD_OK)
                st = td__blobstore_put(bs, ss->tenant, sb->sha256.data, tmp, n, err,
                                       sizeof err);
            else if (tmp == NULL)
                snprintf(err, sizeof err, "out of host memory storing a %zu-byte blob", n);
            td__free(tmp);
        }
    }
    td__buffer_unref(buf);
    if (st != TD_OK) send_failure(ss, j->seq, 0, st, err);
}

static bool hash_ok(const ProtobufCBinaryData *h) { return h->len == TD_SHA256_BYTES; }

static void release_buffer(void *arg) { td__buffer_unref(arg); }
static void release_host(void *arg) { td__free(arg); }

static void run_read(td__srv_session *ss, job *j)
{
    const Tensord__V1__ReadRequest *rq = ((const Tensord__V1__ClientMessage *)j->msg)->read;
    char err[512];
    td__desc desc;
    td__buffer *buf = NULL;
    td_status st = td__session_lookup(ss->es, rq->tensor, &desc, &buf, err, sizeof err);
    if (st != TD_OK) {
        send_failure(ss, j->seq, 0, st, err);
        return;
    }
    uint64_t total = td__desc_nbytes(&desc);
    if (buf != NULL && buf->nbytes < total) total = buf->nbytes;
    if (rq->offset > total || rq->nbytes > total - rq->offset) {
        snprintf(err, sizeof err, "read of tensor %llu: range [%llu, +%llu) is outside its %llu bytes",
                 (unsigned long long)rq->tensor, (unsigned long long)rq->offset,
                 (unsigned long long)rq->nbytes, (unsigned long long)total);
        td__buffer_unref(buf);
        send_failure(ss, j->seq, 0, TD_ERANGE, err);
        return;
    }
    if (buf != NULL && (st = td__session_sync(ss->es, err, sizeof err)) != TD_OK) {
        td__buffer_unref(buf);
        send_failure(ss, j->seq, 0, st, err);
        return;
    }
    Tensord__V1__ServerMessage m = TENSORD__V1__SERVER_MESSAGE__INIT;
    Tensord__V1__ReadChunk rc = TENSORD__V1__READ_CHUNK__INIT;
    m.seq = j->seq;
    m.body_case = TENSORD__V1__SERVER_MESSAGE__BODY_READ;
    m.read = &rc;
    rc.tensor = rq->tensor;
    uint64_t off = rq->offset, end = rq->offset + rq->nbytes;
    do {
        if (atomic_load(&ss->dead)) break;
        size_t len = end - off > TD_CHUNK_BYTES ? TD_CHUNK_BYTES : (size_t)(end - off);
        rc.offset = off;
        rc.last = off + len == end;
        td__wire_payload pl = {0};
        if (len > 0 && buf != NULL) {
            td__buffer_ref(buf);
            pl = (td__wire_payload){.data = (const char *)buf->data + off, .nbytes = len,
                                    .release = release_buffer, .release_arg = buf};
        } else if (len > 0) {
            void *host = td__malloc(len);
            if (host == NULL) {
                send_failure(ss, j->seq, 0, TD_ENOMEM, "out of host memory for a read chunk");
                break;
            }
            st = td__session_read(ss->es, rq->tensor, off, host, len, err, sizeof err);
            if (st != TD_OK) {
                td__free(host);
                send_failure(ss, j->seq, 0, st, err);
                break;
            }
            pl = (td__wire_payload){.data = host, .nbytes = len, .release = release_host,
                                    .release_arg = host};
        }
        st = send_msg(ss, &m, len > 0 ? &pl : NULL);
        if (st != TD_OK) {
            send_failure(ss, j->seq, 0, st, "out of memory while sending a read chunk");
            break;
        }
        off += len;
    } while (off < end);
    td__buffer_unref(buf);
}

static void run_release(td__srv_session *ss, job *j)
{
    const Tensord__V1__Release *r = ((const Tensord__V1__ClientMessage *)j->msg)->release;
    td__session_release(ss->es, r->tensors, r->n_tensors);
}

static void run_fence(td__srv_session *ss, job *j)
{
    char err[512];
    td_status st = td__session_sync(ss->es, err, sizeof err);
    if (st != TD_OK) {
        /* A Failure with the fence's seq answers the fence (no FenceDone after it). */
        send_failure(ss, j->seq, 0, st, err);
        return;
    }
    Tensord__V1__ServerMessage m = TENSORD__V1__SERVER_MESSAGE__INIT;
    Tensord__V1__FenceDone fd = TENSORD__V1__FENCE_DONE__INIT;
    m.seq = j->seq;
    m.body_case = TENSORD__V1__SERVER_MESSAGE__BODY_FENCE;
    m.fence = &fd;
    if (send_msg(ss, &m, NULL) != TD_OK)
        ss_finish(ss, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
}

/* ---- graphs ---- */

static void send_graph_ready(td__srv_session *ss, uint64_t seq, const uint8_t *hash, bool known)
{
    Tensord__V1__ServerMessage m = TENSORD__V1__SERVER_MESSAGE__INIT;
    Tensord__V1__GraphReady gr = TENSORD__V1__GRAPH_READY__INIT;
    gr.graph_id.len = TD_GRAPH_HASH_BYTES;
    gr.graph_id.data = (uint8_t *)(uintptr_t)hash;
    gr.known = known;
    m.seq = seq;
    m.body_case = TENSORD__V1__SERVER_MESSAGE__BODY_GRAPH_READY;
    m.graph_ready = &gr;
    if (send_msg(ss, &m, NULL) != TD_OK)
        ss_finish(ss, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
}

/* GraphDefine: attach a graph from the session's set, the server cache, or the definition
 * (validated here, on the worker, and checked against the id the client claims). */
static void run_graph_define(td__srv_session *ss, job *j)
{
    const Tensord__V1__GraphDefine *gd = ((const Tensord__V1__ClientMessage *)j->msg)->graph_define;
    const uint8_t *id = gd->graph_id.data;
    if (td__graph_set_find(&ss->graphs, id) != NULL) {
        send_graph_ready(ss, j->seq, id, true);
        return;
    }
    char err[768];
    td__graph *g = td__graphcache_get(ss->tenant, id);
    if (g == NULL && gd->graph != NULL) {
        td_status st = td__wire_graph_from(gd->graph, &g, err, sizeof err);
        if (st != TD_OK) {
            send_failure(ss, j->seq, 0, st, err);
            return;
        }
        if (memcmp(g->hash, id, TD_GRAPH_HASH_BYTES) != 0) {
            char want[2 * TD_GRAPH_HASH_BYTES + 1], have[2 * TD_GRAPH_HASH_BYTES + 1];
            td__graph_hash_hex(id, TD_GRAPH_HASH_BYTES, want);
            td__graph_hash_hex(g->hash, TD_GRAPH_HASH_BYTES, have);
            snprintf(err, sizeof err, "graph id %s does not match its definition (SHA-256 %s)",
                     want, have);
            td__graph_unref(g);
            send_failure(ss, j->seq, 0, TD_EINVAL, err);
            return;
        }
        /* Charged once, here, to the defining tenant; the last holder (this session's set,
         * another session's, the cache) gives it back. */
        uint64_t gbytes = td__graph_nbytes(g);
        char why[384];
        if (gbytes > TD_GRAPH_DEF_MAX_BYTES) {
            snprintf(err, sizeof err, "graph definition holds %llu bytes in memory (%u ops); "
                     "at most %llu", (unsigned long long)gbytes, g->n_ops,
                     (unsigned long long)TD_GRAPH_DEF_MAX_BYTES);
            td__graph_unref(g);
            send_failure(ss, j->seq, 0, TD_EINVAL, err);
            return;
        }
        if (td__quota_bytes_charge(ss->quota, gbytes, "keeping a graph definition of", why,
                                   sizeof why) != TD_OK) {
            td__graph_unref(g);
            send_failure(ss, j->seq, 0, TD_EQUOTA, why);
            return;
        }
        g->quota = ss->quota;
        g->charged = gbytes;
        if (!td__graphcache_put(ss->tenant, g))
            td__log(TD_LOG_WARN, "session %llu: out of memory caching a graph",
                    (unsigned long long)ss->id);
    }
    if (g != NULL && !td__graph_set_add(&ss->graphs, g)) {
        td__graph_unref(g);
        snprintf(err, sizeof err, "a session may use at most %d graphs of %llu ops in all",
                 TD_SESSION_MAX_GRAPHS, (unsigned long long)TD_SESSION_MAX_GRAPH_OPS);
        send_failure(ss, j->seq, 0, TD_EQUOTA, err);
        return;
    }
    td__graph_unref(g);
    send_graph_ready(ss, j->seq, id, g != NULL);
}

static void run_graph_run(td__srv_session *ss, job *j)
{
    if (j->grun != NULL) { /* a continuation */
        j->continued = !td__graph_run_step(ss->es, j->grun, TD_WORKER_SLICE_NS);
        return;
    }
    const Tensord__V1__GraphRun *gr = ((const Tensord__V1__ClientMessage *)j->msg)->graph_run;
    td__graph *g = td__graph_set_find(&ss->graphs, gr->graph_id.data);
    if (g == NULL) {
        char hex[2 * TD_GRAPH_HASH_BYTES + 1], err[256];
        td__graph_hash_hex(gr->graph_id.data, TD_GRAPH_HASH_BYTES, hex);
        snprintf(err, sizeof err, "graph %s is not defined in this session (GraphDefine first)",
                 hex);
        for (size_t i = 0; i < gr->n_outputs && i < TD_GRAPH_MAX_INPUTS; i++)
            td__session_poison(ss->es, gr->outputs[i], TD_ENOTFOUND, err);
        send_failure(ss, j->seq, 0, TD_ENOTFOUND, err);
        return;
    }
    td__graph_run_create(ss->es, g, gr->inputs, gr->n_inputs, gr->outputs, gr->n_outputs,
                         batch_failure, j, &j->grun);
    if (j->grun == NULL) return;
    td__graph_ref(g);
    j->graph = g;
    j->continued = !td__graph_run_step(ss->es, j->grun, TD_WORKER_SLICE_NS);
}

static void run_failure(td__srv_session *ss, job *j)
{
    const char *text = j->text ? j->text : td_status_message(j->status);
    for (size_t i = 0; i < j->n_poison; i++)
        td__session_poison(ss->es, j->poison_ids[i], j->status, text);
    send_failure(ss, j->seq, 0, j->status, text);
}

/* ---- receive side ---- */

/* The receive side cannot go on (out of memory): end the call and clean up. */
static void fatal(td__srv_session *ss, const char *what)
{
    td__log(TD_LOG_ERROR, "session %llu: %s; ending the session", (unsigned long long)ss->id,
            what);
    grpc_call_cancel_with_status(ss->call, GRPC_STATUS_RESOURCE_EXHAUSTED, what, NULL);
    stream_ended(ss);
}

/* Submit j; takes ownership. False if the session had to end. */
static bool submit(td__srv_session *ss, job *j)
{
    pthread_mutex_lock(&ss->mu);
    ss->pending_bytes += j->cost;
    pthread_mutex_unlock(&ss->mu);
    ss_ref(ss);
    td__service_work_add(ss->svc, 1);
    j->wq = ss->wq;
    if (td__worker_submit(ss->wq, job_main, j) == TD_OK) return true;
    pthread_mutex_lock(&ss->mu);
    ss->pending_bytes -= j->cost;
    pthread_mutex_unlock(&ss->mu);
    td__service_work_add(ss->svc, -1);
    job_free(j);
    fatal(ss, "out of memory queueing work");
    ss_unref(ss);
    return false;
}

/* Queue a Failure reply, in order with the session's other work. */
static bool submit_failure(td__srv_session *ss, job *j, td_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static bool submit_failure(td__srv_session *ss, job *j, td_status st, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (j->msg) {
        protobuf_c_message_free_unpacked(j->msg, NULL);
        j->msg = NULL;
    }
    j->run = run_failure;
    j->status = st;
    j->text = td__strdup(msg);
    return submit(ss, j);
}

/* Printable ASCII only, at most cap-1 bytes: wire strings go into logs and messages. */
static void sanitize(const char *in, char *out, size_t cap)
{
    size_t n = 0;
    for (; in != NULL && *in != '\0' && n + 1 < cap; in++)
        out[n++] = (*in >= 0x20 && *in < 0x7f) ? *in : '?';
    out[n] = '\0';
}

/* A message whose seq is not the previous one + 1 (replayed, skipped, reordered): replies
 * are matched to requests by seq, so the session cannot go on. Answer with a Failure
 * (carrying the seq received), then end the call with INVALID_ARGUMENT once the replies
 * queued before it are sent. Returns false: receive nothing more. */
static bool seq_violation(td__srv_session *ss, job *j, uint64_t got)
{
    snprintf(ss->end_msg, sizeof ss->end_msg,
             "message seq %llu out of order: expected seq %llu (each message carries the "
             "previous seq + 1); session ended",
             (unsigned long long)got, (unsigned long long)ss->next_seq);
    td__log(TD_LOG_INFO, "session %llu: %s", (unsigned long long)ss->id, ss->end_msg);
    if (!submit_failure(ss, j, TD_EPROTO, "%s", ss->end_msg)) return false; /* already ended */
    ss->end_code = GRPC_STATUS_INVALID_ARGUMENT;
    stream_ended(ss);
    return false;
}

static void reject(td__srv_session *ss, grpc_status_code code, const char *msg)
{
    ss->state = SS_DONE;
    td__log(TD_LOG_INFO, "rejected a session from %s: %s", ss->peer, msg);
    ss_finish(ss, code, "%s", msg);
}

/* First message. Returns whether to keep receiving. */
static bool handle_open(td__srv_session *ss, td_status dst, Tensord__V1__ClientMessage *cm,
                        const char *derr, size_t cost)
{
    char msg[512];
    td__service_live_opened(ss->live); /* a whole first message came: no open timeout */
    if (dst != TD_OK || cm->body_case != TENSORD__V1__CLIENT_MESSAGE__BODY_OPEN) {
        if (dst != TD_OK)
            snprintf(msg, sizeof msg, "first message must be open (got an undecodable message: %s)",
                     derr);
        else
            snprintf(msg, sizeof msg, "first message must be open");
        reject(ss, GRPC_STATUS_INVALID_ARGUMENT, msg);
        return false;
    }
    const Tensord__V1__OpenSession *o = cm->open;
    if (ss->rx_span.present) {
        snprintf(msg, sizeof msg,
                 "open carries a payload of %zu bytes; only write messages may", ss->rx_span.len);
        reject(ss, GRPC_STATUS_INVALID_ARGUMENT, msg);
        return false;
    }
    if (o->protocol_min > o->protocol_max || o->protocol_max < TD_PROTOCOL_MIN ||
        o->protocol_min > TD_PROTOCOL_MAX) {
        snprintf(msg, sizeof msg,
                 "protocol versions %u..%u not supported; this server speaks %u..%u",
                 o->protocol_min, o->protocol_max, (unsigned)TD_PROTOCOL_MIN,
                 (unsigned)TD_PROTOCOL_MAX);
        reject(ss, GRPC_STATUS_FAILED_PRECONDITION, msg);
        return false;
    }
    td__device *dev = td__device_find(o->device);
    if (dev == NULL) {
        char name[65], list[256] = "";
        sanitize(o->device, name, sizeof name);
        size_t len = 0;
        for (int i = 0; i < td__device_count() && len < sizeof list; i++)
            len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", i ? ", " : "",
                                    td__device_at(i)->name);
        snprintf(msg, sizeof msg, "unknown device '%s'; this server has: %s", name, list);
        reject(ss, GRPC_STATUS_INVALID_ARGUMENT, msg);
        return false;
    }
    if (td__service_shutting_down(ss->svc)) {
        reject(ss, GRPC_STATUS_UNAVAILABLE, "server is shutting down");
        return false;
    }
    uint64_t id;
    if (!td__service_session_reserve(ss->svc, &id)) {
        snprintf(msg, sizeof msg, "session limit reached: this server allows %llu sessions",
                 (unsigned long long)td__service_max_sessions(ss->svc));
        reject(ss, GRPC_STATUS_RESOURCE_EXHAUSTED, msg);
        return false;
    }
    char why[256];
    if (td__quota_session_charge(ss->quota, why, sizeof why) != TD_OK) {
        td__service_session_unreserve(ss->svc);
        reject(ss, GRPC_STATUS_RESOURCE_EXHAUSTED, why);
        return false;
    }
    td__worker *w = td__service_worker(ss->svc, dev);
    job *j = td__calloc(1, sizeof *j);
    if (w == NULL || j == NULL || td__worker_queue_create(w, &ss->wq) != TD_OK) {
        td__free(j);
        td__quota_session_uncharge(ss->quota);
        td__service_session_unreserve(ss->svc);
        reject(ss, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory opening a session");
        return false;
    }
    ss->id = id;
    ss->reserved = true;
    ss->quota_session = true;
    ss->dev = dev;
    ss->state = SS_OPEN;
    sanitize(o->client_name, ss->client, sizeof ss->client);
    j->ss = ss;
    j->run = run_open;
    j->always = true;
    j->seq = cm->seq;
    ss->next_seq = cm->seq + 1;
    j->cost = cost;
    j->dev = dev;
    j->protocol = o->protocol_max < TD_PROTOCOL_MAX ? o->protocol_max : TD_PROTOCOL_MAX;
    return submit(ss, j);
}

static bool prepare_batch(td__srv_session *ss, job *j, const Tensord__V1__OpBatch *b)
{
    if (b->n_ops > TD_MAX_BATCH_OPS)
        return submit_failure(ss, j, TD_EPROTO, "batch seq %llu has %zu ops; the limit is %d",
                              (unsigned long long)j->seq, b->n_ops, TD_MAX_BATCH_OPS);
    if (b->n_ops == 0) {
        job_free(j);
        return true;
    }
    char qerr[256];
    if (td__quota_batch_charge(j->ss->quota, qerr, sizeof qerr) != TD_OK) {
        /* Reads of the refused ops' outputs then report the quota, not an unknown id. */
        if ((j->poison_ids = td__calloc(b->n_ops, sizeof *j->poison_ids)) != NULL) {
            j->n_poison = b->n_ops;
            j->cost += b->n_ops * sizeof *j->poison_ids;
            for (size_t i = 0; i < b->n_ops; i++) j->poison_ids[i] = b->ops[i]->output;
        }
        return submit_failure(ss, j, TD_EQUOTA, "batch seq %llu: %s", (unsigned long long)j->seq,
                              qerr);
    }
    j->batch_charged = true;
    j->ops = td__calloc(b->n_ops, sizeof *j->ops);
    if (j->ops == NULL)
        return submit_failure(ss, j, TD_ENOMEM, "out of memory for a batch of %zu ops",
                              b->n_ops);
    j->n_ops = b->n_ops;
    j->cost += b->n_ops * sizeof *j->ops;
    for (size_t i = 0; i < b->n_ops; i++) {
        char err[256];
        if (td__wire_op_from(b->ops[i], &j->ops[i], err, sizeof err) == TD_OK) continue;
        if (j->op_errs == NULL && (j->op_errs = td__calloc(b->n_ops, sizeof *j->op_errs)) == NULL)
            return submit_failure(ss, j, TD_ENOMEM, "out of memory for a batch of %zu ops",
                                  b->n_ops);
        const char *why = strncmp(err, "op: ", 4) == 0 ? err + 4 : err;
        char msg[320];
        snprintf(msg, sizeof msg, "op %zu (%s): %s", i, td__op_name(b->ops[i]->opcode), why);
        j->op_errs[i] = td__strdup(msg);
        memset(&j->ops[i], 0, sizeof j->ops[i]);
        j->ops[i].opcode = SS_BAD_OPCODE;
        j->ops[i].output = b->ops[i]->output;
    }
    protobuf_c_message_free_unpacked(j->msg, NULL);
    j->msg = NULL;
    j->run = run_batch;
    return submit(ss, j);
}

/* One message after open. Returns whether to keep receiving. */
static bool handle_message(td__srv_session *ss, td_status dst, Tensord__V1__ClientMessage *cm,
                           const uint8_t *payload, size_t payload_len, const char *derr,
                           size_t cost)
{
    job *j = td__calloc(1, sizeof *j);
    if (j == NULL) {
        if (cm) protobuf_c_message_free_unpacked(&cm->base, NULL);
        fatal(ss, "out of memory for a request");
        return false;
    }
    j->ss = ss;
    j->cost = cost;
    if (dst != TD_OK)
        return submit_failure(ss, j, dst, "undecodable message: %s", derr);
    j->msg = &cm->base;
    j->seq = cm->seq;
    if (cm->seq != ss->next_seq) return seq_violation(ss, j, cm->seq);
    ss->next_seq++;
    if (ss->rx_span.present && cm->body_case != TENSORD__V1__CLIENT_MESSAGE__BODY_WRITE)
        return submit_failure(ss, j, TD_EPROTO,
                              "message seq %llu (body field %d) carries a payload of %zu "
                              "bytes; only write messages may",
                              (unsigned long long)cm->seq, (int)cm->body_case,
                              ss->rx_span.len);
    switch (cm->body_case) {
    case TENSORD__V1__CLIENT_MESSAGE__BODY_OPEN:
        return submit_failure(ss, j, TD_EPROTO, "seq %llu: the session is already open",
                              (unsigned long long)cm->seq);
    case TENSORD__V1__CLIENT_MESSAGE__BODY_BATCH:
        return prepare_batch(ss, j, cm->batch);
    case TENSORD__V1__CLIENT_MESSAGE__BODY_WRITE:
        if (!ss->rx_span.present)
            return submit_failure(ss, j, TD_EPROTO,
                                  "write seq %llu to tensor %llu: the message has no payload",
                                  (unsigned long long)cm->seq,
                                  (unsigned long long)cm->write->tensor);
        if (ss->rx_span.len > TD_CHUNK_BYTES)
            return submit_failure(ss, j, TD_EPROTO,
                                  "write seq %llu to tensor %llu: a chunk of %zu bytes; chunks "
                                  "carry at most %u (Limits.chunk_bytes)",
                                  (unsigned long long)cm->seq,
                                  (unsigned long long)cm->write->tensor, ss->rx_span.len,
                                  (unsigned)TD_CHUNK_BYTES);
        j->span = ss->rx_span;
        if (ss->rx_span.flat != NULL) {
            /* The payload points into the scratch: the job keeps it. */
            j->scratch = ss->scratch;
            memset(&ss->scratch, 0, sizeof ss->scratch);
            j->cost += j->scratch.cap;
        } else {
            /* The payload stays in gRPC's slices (counted in cost already). */
            j->bb = ss->rx_bb;
            ss->rx_bb = NULL;
        }
        j->payload = payload;
        j->payload_len = payload_len;
        j->run = run_write;
        return submit(ss, j);
    case TENSORD__V1__CLIENT_MESSAGE__BODY_HAS_BLOBS:
        if (cm->has_blobs->n_sha256 > SS_MAX_HASHES)
            return submit_failure(ss, j, TD_EPROTO, "has-blobs seq %llu offers %zu hashes; the "
                                  "limit is %d", (unsigned long long)cm->seq,
                                  cm->has_blobs->n_sha256, SS_MAX_HASHES);
        for (size_t i = 0; i < cm->has_blobs->n_sha256; i++)
            if (!hash_ok(&cm->has_blobs->sha256[i]))
                return submit_failure(ss, j, TD_EPROTO, "has-blobs seq %llu: hash %zu has %zu "
                                      "bytes, SHA-256 has %d", (unsigned long long)cm->seq, i,
                                      cm->has_blobs->sha256[i].len, TD_SHA256_BYTES);
        j->run = run_has_blobs;
        return submit(ss, j);
    case TENSORD__V1__CLIENT_MESSAGE__BODY_WRITE_FROM_BLOB:
    case TENSORD__V1__CLIENT_MESSAGE__BODY_STORE_BLOB: {
        bool from = cm->body_case == TENSORD__V1__CLIENT_MESSAGE__BODY_WRITE_FROM_BLOB;
        const ProtobufCBinaryData *h = from ? &cm->write_from_blob->sha256
                                            : &cm->store_blob->sha256;
        if (!hash_ok(h))
            return submit_failure(ss, j, TD_EPROTO, "%s seq %llu: hash has %zu bytes, SHA-256 "
                                  "has %d", from ? "write-from-blob" : "store-blob",
                                  (unsigned long long)cm->seq, h->len, TD_SHA256_BYTES);
        j->run = from ? run_write_from_blob : run_store_blob;
        return submit(ss, j);
    }
    case TENSORD__V1__CLIENT_MESSAGE__BODY_READ:
        j->run = run_read;
        return submit(ss, j);
    case TENSORD__V1__CLIENT_MESSAGE__BODY_RELEASE:
        j->cost += cm->release->n_tensors * sizeof *cm->release->tensors;
        j->run = run_release;
        return submit(ss, j);
    case TENSORD__V1__CLIENT_MESSAGE__BODY_FENCE:
        j->run = run_fence;
        return submit(ss, j);
    case TENSORD__V1__CLIENT_MESSAGE__BODY_GRAPH_DEFINE:
    case TENSORD__V1__CLIENT_MESSAGE__BODY_GRAPH_RUN: {
        bool def = cm->body_case == TENSORD__V1__CLIENT_MESSAGE__BODY_GRAPH_DEFINE;
        const ProtobufCBinaryData *gid =
            def ? &cm->graph_define->graph_id : &cm->graph_run->graph_id;
        if (gid->len != TD_GRAPH_HASH_BYTES)
            return submit_failure(ss, j, TD_EPROTO,
                                  "graph message seq %llu: graph id has %zu bytes, a SHA-256 "
                                  "has %d",
                                  (unsigned long long)cm->seq, gid->len, TD_GRAPH_HASH_BYTES);
        if (!def && (cm->graph_run->n_inputs > TD_GRAPH_MAX_INPUTS ||
                     cm->graph_run->n_outputs > TD_GRAPH_MAX_INPUTS))
            return submit_failure(ss, j, TD_EPROTO,
                                  "graph run seq %llu binds %zu inputs and %zu outputs; at most "
                                  "%d each",
                                  (unsigned long long)cm->seq, cm->graph_run->n_inputs,
                                  cm->graph_run->n_outputs, TD_GRAPH_MAX_INPUTS);
        j->run = def ? run_graph_define : run_graph_run;
        return submit(ss, j);
    }
    default:
        break;
    }
    if (cm->base.n_unknown_fields > 0)
        return submit_failure(ss, j, TD_EPROTO,
                              "message seq %llu: unknown body (field %u); this server speaks "
                              "protocol %u",
                              (unsigned long long)cm->seq, cm->base.unknown_fields[0].tag,
                              (unsigned)TD_PROTOCOL_MAX);
    return submit_failure(ss, j, TD_EPROTO, "message seq %llu has no body",
                          (unsigned long long)cm->seq);
}

static void recv_done(td__tag *tag, bool ok)
{
    td__srv_session *ss = SS_OF(tag, recv_tag);
    grpc_byte_buffer *bb = ss->recv_buf;
    ss->recv_buf = NULL;
    if (!ok || bb == NULL) {
        if (bb) grpc_byte_buffer_destroy(bb);
        stream_ended(ss);
        ss_unref(ss);
        return;
    }
    size_t cost = grpc_byte_buffer_length(bb) + SS_JOB_OVERHEAD;
    ProtobufCMessage *m = NULL;
    char err[256] = "";
    td__wire_span span;
    td_status st = td__wire_decode_head(bb, &tensord__v1__client_message__descriptor,
                                        &ss->scratch, &m, &span, err, sizeof err);
    const uint8_t *payload = span.flat;
    size_t payload_len = span.flat != NULL ? span.len : 0;
    /* A write takes rx_bb when its payload is still in the slices; else it is freed below. */
    ss->rx_bb = bb;
    ss->rx_span = span;
    Tensord__V1__ClientMessage *cm = st == TD_OK ? (Tensord__V1__ClientMessage *)m : NULL;
    bool more;
    if (ss->state == SS_AWAIT_OPEN) {
        more = handle_open(ss, st, cm, err, cost);
        if (cm) protobuf_c_message_free_unpacked(&cm->base, NULL);
    } else if (ss->state == SS_OPEN) {
        more = handle_message(ss, st, cm, payload, payload_len, err, cost);
    } else {
        /* Ending (the open failed on the worker): drain until the client goes away. */
        if (cm) protobuf_c_message_free_unpacked(&cm->base, NULL);
        more = true;
    }
    if (ss->rx_bb != NULL) {
        grpc_byte_buffer_destroy(ss->rx_bb);
        ss->rx_bb = NULL;
    }
    if (more) {
        bool start = true;
        pthread_mutex_lock(&ss->mu);
        size_t pending = ss->pending_bytes + ss->send_bytes;
        if (pending > SS_RECV_HIGH && !atomic_load(&ss->dead)) {
            ss->recv_paused = true;
            start = false;
        }
        pthread_mutex_unlock(&ss->mu);
        if (!start)
            td__log(TD_LOG_DEBUG, "session %llu: %zu bytes of work and replies queued; pausing receive",
                    (unsigned long long)ss->id, pending);
        if (start) recv_next(ss);
    }
    ss_unref(ss);
}

static void recv_next(td__srv_session *ss)
{
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &ss->recv_buf;
    ss_ref(ss);
    td__tag_arm(&ss->recv_tag);
    grpc_call_error e = grpc_call_start_batch(ss->call, &op, 1, &ss->recv_tag, NULL);
    if (e != GRPC_CALL_OK) {
        td__log(TD_LOG_ERROR, "session %llu: cannot start a receive (grpc error %d)",
                (unsigned long long)ss->id, (int)e);
        grpc_call_cancel(ss->call, NULL);
        stream_ended(ss);
        ss_unref(ss);
    }
}

void td__srv_session_start(td__service *svc, grpc_call *call, td__quota *quota,
                           const td__identity *id)
{
    td__srv_session *ss = td__calloc(1, sizeof *ss);
    if (ss == NULL) {
        grpc_call_cancel_with_status(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory",
                                     NULL);
        grpc_call_unref(call);
        return;
    }
    td__service_call_begin(svc);
    atomic_init(&ss->refs, 1);
    atomic_init(&ss->dead, false);
    ss->svc = svc;
    ss->call = call;
    ss->quota = quota;
    ss->tenant = quota->name;
    ss->state = SS_AWAIT_OPEN;
    ss->recv_tag.fn = recv_done;
    ss->send_tag.fn = send_done;
    ss->close_tag.fn = close_done;
    pthread_mutex_init(&ss->mu, NULL);
    char *peer = grpc_call_get_peer(call);
    sanitize(peer, ss->peer, sizeof ss->peer);
    gpr_free(peer);
    ss->live = td__service_live_add(svc, ss, quota, id);

    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    op.data.recv_close_on_server.cancelled = &ss->cancelled;
    ss_ref(ss);
    td__tag_arm(&ss->close_tag);
    grpc_call_error e = grpc_call_start_batch(call, &op, 1, &ss->close_tag, NULL);
    if (e != GRPC_CALL_OK) {
        td__log(TD_LOG_ERROR, "session: cannot watch for the end of the call (grpc error %d)",
                (int)e);
        ss_unref(ss);
        grpc_call_cancel(call, NULL);
    }
    recv_next(ss);
    ss_unref(ss);
}

void td__srv_session_revoke(td__srv_session *ss, grpc_status_code code, const char *why)
{
    td__log(TD_LOG_INFO, "session %llu of tenant '%s' at %s ended: %s",
            (unsigned long long)ss->id, ss->tenant, ss->peer, why);
    grpc_call_cancel_with_status(ss->call, code, why, NULL);
}

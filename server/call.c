/* call.c — one Session stream's gRPC call: references, the receive loop, the send queue and
 * flow control (see call.h).
 *
 * Who does what:
 *  - receive side (a completion-queue thread; one receive is outstanding at a time, so this
 *    state has one owner at any moment): each received message goes to ops->on_message,
 *    then the next one is asked for unless too much memory is held.
 *  - send side (whoever queues or completes a send): gRPC allows one SEND_MESSAGE in flight
 *    per call, so replies wait in a mutex-protected queue; the thread that finds no send in
 *    flight starts the next one, and each send completion starts the one after.
 */
#include "server/call.h"

#include "common/alloc.h"
#include "common/errbuf.h"
#include "common/log.h"
#include "server/metrics.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Memory a queued reply holds besides its message bytes: the grpc_byte_buffer with its
 * grpc_slice_buffer of 8 inline slices (~330 bytes), the td__call_item (64; 80 with
 * malloc's header) and the encoded slice's refcount header. Measured: a client that sends
 * fences and never reads made the server park 150,000 FenceDone replies (6 bytes each on
 * the wire) for 61.6 MB of RSS, 410 bytes each (tests/hostile/memory.c,
 * never_reading_client). The old count (sizeof(item) + message, ~70 bytes) let ~390 MB
 * park under the mark. */
#define CALL_REPLY_OVERHEAD 404

struct td__call_item {
    td__call_item *next;
    size_t cost;          /* bytes counted in send_bytes while queued or in flight */
    size_t nbytes;        /* message length (gRPC empties the buffer as it sends it) */
    grpc_byte_buffer *bb; /* NULL: the final status */
    grpc_status_code code;
    grpc_slice details;
};

#define CALL_OF(tagptr, field) ((td__srv_call *)((char *)(tagptr) - offsetof(td__srv_call, field)))

static void recv_next(td__srv_call *c);

void td__srv_call_ref(td__srv_call *c) { atomic_fetch_add(&c->refs, 1); }

void td__srv_call_unref(td__srv_call *c)
{
    if (atomic_fetch_sub(&c->refs, 1) == 1) c->ops->on_free(c);
}

bool td__srv_call_dead(td__srv_call *c) { return atomic_load(&c->dead); }

bool td__srv_call_cancelled(const td__srv_call *c) { return c->cancelled != 0; }

/* ---- send side ---- */

static void item_free(td__call_item *it)
{
    if (it->bb) grpc_byte_buffer_destroy(it->bb);
    grpc_slice_unref(it->details);
    td__free(it);
}

static void items_free(td__call_item *list)
{
    while (list) {
        td__call_item *next = list->next;
        item_free(list);
        list = next;
    }
}

/* Caller holds mu: an item leaves the send side (sent or dropped). */
static void uncount_locked(td__srv_call *c, td__call_item *it)
{
    c->send_bytes -= it->cost;
    td__service_work_add(c->svc, -1);
}

/* Caller holds mu. Returns the items it dropped (free them after unlocking). */
static td__call_item *kill_locked(td__srv_call *c)
{
    atomic_store(&c->dead, true);
    td__call_item *list = c->sq_head;
    c->sq_head = c->sq_tail = NULL;
    for (td__call_item *it = list; it != NULL; it = it->next) uncount_locked(c, it);
    return list;
}

/* Caller holds mu. Whether the caller must restart the paused receive: memory held by
 * queued work fell below the low mark, or the call is over (the receive then fails at
 * once, which is what ends the stream and frees the owner). */
static bool resume_locked(td__srv_call *c)
{
    if (!c->recv_paused) return false;
    if (!atomic_load(&c->dead) &&
        (c->owner_paused || c->pending_bytes + c->send_bytes > TD_CALL_RECV_LOW))
        return false;
    c->recv_paused = false;
    return true;
}

/* Caller holds mu and a reference; starts the next queued send. Returns dropped items. */
static td__call_item *send_next_locked(td__srv_call *c)
{
    td__call_item *it = c->sq_head;
    if (it == NULL || c->in_flight != NULL) return NULL;
    c->sq_head = it->next;
    if (c->sq_head == NULL) c->sq_tail = NULL;
    it->next = NULL;
    grpc_op ops[2];
    memset(ops, 0, sizeof ops);
    size_t n = 0;
    /* Initial metadata goes with the first send, status included: in gRPC 1.51 a
     * SEND_STATUS_FROM_SERVER without it (a "trailers-only" reply) is never written to
     * the wire and the client waits until its deadline (measured). */
    if (!c->md_sent) {
        ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
        c->md_sent = true;
    }
    if (it->bb != NULL) {
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = it->bb;
    } else {
        ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
        ops[n].data.send_status_from_server.status = it->code;
        ops[n++].data.send_status_from_server.status_details = &it->details;
    }
    c->in_flight = it;
    td__srv_call_ref(c);
    td__tag_arm(&c->send_tag);
    grpc_call_error e = grpc_call_start_batch(c->call, ops, n, &c->send_tag, NULL);
    if (e == GRPC_CALL_OK) return NULL;
    td__log(TD_LOG_ERROR, "session %llu: cannot start a send (grpc error %d)",
            (unsigned long long)c->id, (int)e);
    c->in_flight = NULL;
    atomic_fetch_sub(&c->refs, 1); /* the caller still holds one */
    uncount_locked(c, it);
    td__call_item *dropped = kill_locked(c);
    it->next = dropped;
    return it;
}

static void send_done(td__tag *tag, bool ok)
{
    td__srv_call *c = CALL_OF(tag, send_tag);
    pthread_mutex_lock(&c->mu);
    td__call_item *done = c->in_flight, *dropped = NULL;
    c->in_flight = NULL;
    size_t sent = 0;
    if (done) {
        uncount_locked(c, done);
        if (ok) sent = done->nbytes;
        c->tx_bytes += sent;
    }
    if (!ok)
        dropped = kill_locked(c);
    else
        dropped = send_next_locked(c);
    bool resume = resume_locked(c);
    const bool drained =
        c->drain_wanted && (c->send_bytes <= c->drain_mark || atomic_load(&c->dead));
    if (drained) c->drain_wanted = false;
    pthread_mutex_unlock(&c->mu);
    if (!ok)
        td__log(TD_LOG_DEBUG, "session %llu: send failed (call over)", (unsigned long long)c->id);
    if (sent != 0) td__metrics_bytes_sent(sent);
    if (done) item_free(done);
    items_free(dropped);
    if (resume) recv_next(c);
    if (drained) c->ops->on_drained(c); /* after the frees: their quota charges are gone */
    td__srv_call_unref(c);
}

/* Queue an item; takes ownership. Dropped when the call is over or has its status. */
static void send_push(td__srv_call *c, td__call_item *it)
{
    td__call_item *dropped = NULL;
    pthread_mutex_lock(&c->mu);
    if (atomic_load(&c->dead) || c->status_queued) {
        dropped = it;
    } else {
        if (it->bb == NULL) c->status_queued = true;
        else c->queued_msgs++;
        c->send_bytes += it->cost;
        td__service_work_add(c->svc, 1);
        if (c->sq_tail)
            c->sq_tail->next = it;
        else
            c->sq_head = it;
        c->sq_tail = it;
        dropped = send_next_locked(c);
    }
    pthread_mutex_unlock(&c->mu);
    items_free(dropped);
}

void td__srv_call_finish(td__srv_call *c, grpc_status_code code, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    td__verrf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    td__call_item *it = td__calloc(1, sizeof *it);
    if (it == NULL) {
        /* Without memory for a status, cancelling still ends the call. */
        grpc_call_cancel_with_status(c->call, code, msg, NULL);
        return;
    }
    it->code = code;
    it->details = grpc_slice_from_copied_string(msg);
    it->cost = CALL_REPLY_OVERHEAD + strlen(msg);
    send_push(c, it);
}

td_status td__srv_call_send(td__srv_call *c, grpc_byte_buffer *bb)
{
    td__call_item *it = td__calloc(1, sizeof *it);
    if (it == NULL) {
        grpc_byte_buffer_destroy(bb);
        return TD_ENOMEM;
    }
    it->bb = bb;
    it->nbytes = grpc_byte_buffer_length(bb);
    it->details = grpc_empty_slice();
    it->cost = CALL_REPLY_OVERHEAD + grpc_byte_buffer_length(bb);
    send_push(c, it);
    return TD_OK;
}

uint64_t td__srv_call_queued_msgs(td__srv_call *c)
{
    pthread_mutex_lock(&c->mu);
    uint64_t n = c->queued_msgs;
    pthread_mutex_unlock(&c->mu);
    return n;
}

uint64_t td__srv_call_tx_bytes(td__srv_call *c)
{
    pthread_mutex_lock(&c->mu);
    uint64_t n = c->tx_bytes;
    pthread_mutex_unlock(&c->mu);
    return n;
}

bool td__srv_call_want_drain(td__srv_call *c, size_t mark)
{
    pthread_mutex_lock(&c->mu);
    /* a queue above the mark has an item in flight (send_next_locked starts one whenever
     * the queue is not empty), whose completion checks the mark */
    const bool wait = c->ops->on_drained != NULL && !atomic_load(&c->dead) &&
                      c->send_bytes > mark && c->in_flight != NULL;
    if (wait) {
        c->drain_wanted = true;
        c->drain_mark = mark;
    }
    pthread_mutex_unlock(&c->mu);
    return wait;
}

size_t td__srv_call_queued_bytes(td__srv_call *c)
{
    pthread_mutex_lock(&c->mu);
    size_t n = c->send_bytes;
    pthread_mutex_unlock(&c->mu);
    return n;
}

void td__srv_call_cancel(td__srv_call *c, grpc_status_code code, const char *why)
{
    grpc_call_cancel_with_status(c->call, code, why, NULL);
}

/* ---- flow control ---- */

void td__srv_call_hold(td__srv_call *c, size_t nbytes)
{
    pthread_mutex_lock(&c->mu);
    c->pending_bytes += nbytes;
    pthread_mutex_unlock(&c->mu);
}

void td__srv_call_unhold(td__srv_call *c, size_t nbytes)
{
    pthread_mutex_lock(&c->mu);
    c->pending_bytes -= nbytes;
    bool restart = resume_locked(c);
    pthread_mutex_unlock(&c->mu);
    if (restart) {
        td__log(TD_LOG_DEBUG, "session %llu: resuming receive", (unsigned long long)c->id);
        recv_next(c);
    }
}

void td__srv_call_pause(td__srv_call *c)
{
    pthread_mutex_lock(&c->mu);
    c->owner_paused = true;
    pthread_mutex_unlock(&c->mu);
}

void td__srv_call_resume(td__srv_call *c)
{
    pthread_mutex_lock(&c->mu);
    c->owner_paused = false;
    bool restart = resume_locked(c);
    pthread_mutex_unlock(&c->mu);
    if (restart) recv_next(c);
}

/* ---- receive side and life cycle ---- */

static void close_done(td__tag *tag, bool ok)
{
    (void)ok;
    td__srv_call *c = CALL_OF(tag, close_tag);
    td__call_item *dropped = NULL;
    bool resume = false;
    if (c->cancelled) {
        pthread_mutex_lock(&c->mu);
        dropped = kill_locked(c);
        resume = resume_locked(c);
        pthread_mutex_unlock(&c->mu);
    }
    items_free(dropped);
    if (resume) recv_next(c);
    td__srv_call_unref(c);
}

static void recv_done(td__tag *tag, bool ok)
{
    td__srv_call *c = CALL_OF(tag, recv_tag);
    grpc_byte_buffer *bb = c->recv_buf;
    c->recv_buf = NULL;
    if (!ok || bb == NULL) {
        if (bb) grpc_byte_buffer_destroy(bb);
        c->ops->on_end(c);
        td__srv_call_unref(c);
        return;
    }
    size_t got = grpc_byte_buffer_length(bb);
    c->rx_bytes += got;
    td__metrics_bytes_received(got);
    if (c->ops->on_message(c, bb)) {
        bool start = true;
        pthread_mutex_lock(&c->mu);
        size_t pending = c->pending_bytes + c->send_bytes;
        if ((pending > TD_CALL_RECV_HIGH || c->owner_paused) && !atomic_load(&c->dead)) {
            c->recv_paused = true;
            start = false;
        }
        pthread_mutex_unlock(&c->mu);
        if (!start)
            td__log(TD_LOG_DEBUG,
                    "session %llu: %zu bytes of work and replies queued; pausing receive",
                    (unsigned long long)c->id, pending);
        if (start) recv_next(c);
    }
    td__srv_call_unref(c);
}

/* Start one operation under a reference of its own. When gRPC refuses it, the reference
 * goes back (the caller holds another), the refusal is logged as "cannot <what>" and the
 * call is cancelled; returns false. */
static bool start_one(td__srv_call *c, const grpc_op *op, td__tag *tag, const char *what)
{
    td__srv_call_ref(c);
    td__tag_arm(tag);
    grpc_call_error e = grpc_call_start_batch(c->call, op, 1, tag, NULL);
    if (e == GRPC_CALL_OK) return true;
    td__srv_call_unref(c);
    td__log(TD_LOG_ERROR, "session %llu: cannot %s (grpc error %d)", (unsigned long long)c->id,
            what, (int)e);
    grpc_call_cancel(c->call, NULL);
    return false;
}

static void recv_next(td__srv_call *c)
{
    grpc_op op = {.op = GRPC_OP_RECV_MESSAGE, .data.recv_message.recv_message = &c->recv_buf};
    if (!start_one(c, &op, &c->recv_tag, "start a receive")) c->ops->on_end(c);
}

void td__srv_call_init(td__srv_call *c, td__service *svc, grpc_call *call,
                       const td__srv_call_ops *ops)
{
    atomic_init(&c->refs, 1);
    atomic_init(&c->dead, false);
    c->ops = ops;
    c->svc = svc;
    c->call = call;
    c->recv_tag.fn = recv_done;
    c->send_tag.fn = send_done;
    c->close_tag.fn = close_done;
    pthread_mutex_init(&c->mu, NULL);
}

void td__srv_call_start(td__srv_call *c)
{
    grpc_op op = {.op = GRPC_OP_RECV_CLOSE_ON_SERVER,
                  .data.recv_close_on_server.cancelled = &c->cancelled};
    start_one(c, &op, &c->close_tag, "watch for the end of the call");
    recv_next(c);
}

void td__srv_call_fini(td__srv_call *c)
{
    items_free(kill_locked(c)); /* empty unless something went wrong */
    if (c->recv_buf) grpc_byte_buffer_destroy(c->recv_buf);
    grpc_call_unref(c->call);
    pthread_mutex_destroy(&c->mu);
}

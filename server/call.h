/* call.h — the gRPC side of one Session stream: references, the receive loop, the send
 * queue and flow control. What the messages mean is not its business: the owner (a server
 * session, server/session.c) gets each received byte buffer and hands back encoded replies.
 *
 * Why a separate layer: gRPC allows one RECV_MESSAGE and one SEND_MESSAGE in flight per
 * call, every operation's completion must find its object alive, and a client that floods
 * requests or never reads its replies must not grow the server's memory. Those rules are
 * the same for every message, so they live here once.
 *
 * Lifetime: a td__srv_call is embedded in its owner and reference-counted. Every operation
 * in flight holds a reference; the owner takes more for its own work (td__srv_call_ref)
 * and the last td__srv_call_unref calls ops->on_free, which frees the owner (calling
 * td__srv_call_fini first).
 *
 * Flow control: the owner counts the memory a request holds until it is done with it
 * (td__srv_call_hold / td__srv_call_unhold); queued replies count until gRPC has sent them.
 * Above TD_CALL_RECV_HIGH bytes in all the receive loop stops asking gRPC for messages
 * (HTTP/2 flow control then holds the client back); whoever brings the total under
 * TD_CALL_RECV_LOW asks again.
 *
 * Thread-safety: the receive side (on_message, on_end) runs on one completion-queue thread
 * at a time; send, finish, hold, unhold, ref and unref may be called from any thread.
 */
#ifndef TD_SERVER_CALL_H
#define TD_SERVER_CALL_H

#include "server/service.h"

#include <grpc/grpc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#define TD_CALL_RECV_HIGH ((size_t)64 << 20)
#define TD_CALL_RECV_LOW ((size_t)16 << 20)

typedef struct td__srv_call td__srv_call;

typedef struct td__srv_call_ops {
    /* One whole message arrived; takes ownership of bb. Returns whether to receive more
     * (false: the owner has ended the stream or is ending it). Completion-queue thread. */
    bool (*on_message)(td__srv_call *c, grpc_byte_buffer *bb);
    /* The receive loop stopped for good (half-close, cancel, error). Once. */
    void (*on_end)(td__srv_call *c);
    /* The last reference is gone: free the owner (after td__srv_call_fini). */
    void (*on_free)(td__srv_call *c);
    /* Optional: the queued replies went down to the mark of td__srv_call_want_drain (or
     * the call died). Once per want_drain that returned true; any thread, no lock held. */
    void (*on_drained)(td__srv_call *c);
} td__srv_call_ops;

typedef struct td__call_item td__call_item;

/* Fields are private to server/call.c, except `id`, which the owner sets (the session id,
 * for log lines; 0 until the session is open). */
struct td__srv_call {
    atomic_long refs;
    const td__srv_call_ops *ops;
    td__service *svc;
    grpc_call *call;
    _Atomic uint64_t id; /* atomic: revocation (any thread) logs it while the open sets it */
    uint64_t rx_bytes; /* message bytes received (receive side only) */

    td__tag recv_tag;
    grpc_byte_buffer *recv_buf;
    td__tag close_tag;
    int cancelled;    /* written by gRPC for RECV_CLOSE_ON_SERVER */
    atomic_bool dead; /* the call is over (cancelled, or a send failed): skip work */

    /* Send side and flow control, under mu. */
    pthread_mutex_t mu;
    td__tag send_tag;
    td__call_item *sq_head, *sq_tail, *in_flight;
    bool status_queued;
    bool md_sent;
    size_t pending_bytes; /* memory held by requests (td__srv_call_hold) */
    size_t send_bytes;    /* memory held by queued replies */
    bool recv_paused;
    bool owner_paused;    /* td__srv_call_pause: receive nothing until td__srv_call_resume */
    uint64_t tx_bytes;    /* message bytes sent (gRPC reported the send done) */
    uint64_t queued_msgs; /* messages queued for sending (not the status), under mu */
    bool drain_wanted;    /* td__srv_call_want_drain: call on_drained at drain_mark */
    size_t drain_mark;
};

/* Message bytes sent on the call so far. Any thread. */
uint64_t td__srv_call_tx_bytes(td__srv_call *c);
/* Messages queued on the call so far (td__srv_call_send; the status is not one). The
 * client counts what it receives on the stream, so an answer that travels another way
 * (the request ring) can say how many stream messages came before it. Any thread. */
uint64_t td__srv_call_queued_msgs(td__srv_call *c);
/* Bytes of replies queued or in flight (their cost as counted for flow control). */
size_t td__srv_call_queued_bytes(td__srv_call *c);
/* Ask for ops->on_drained once the queued replies are at most `mark` bytes (or the call is
 * dead). Returns false, asking nothing, when that is already so (the caller goes on); true:
 * the callback will come (exactly once) from the thread that completes a send. */
bool td__srv_call_want_drain(td__srv_call *c, size_t mark);

/* Initialise `c` over an accepted call (its reference passes to c), holding one
 * reference. Nothing is started. */
void td__srv_call_init(td__srv_call *c, td__service *svc, grpc_call *call,
                       const td__srv_call_ops *ops);
/* Start watching for the call's end and receiving messages. */
void td__srv_call_start(td__srv_call *c);
/* Release what c holds (queued replies, the call). For on_free only. */
void td__srv_call_fini(td__srv_call *c);

void td__srv_call_ref(td__srv_call *c);
void td__srv_call_unref(td__srv_call *c);

/* Whether the call is over (cancelled or a send failed): work for it may be skipped. */
bool td__srv_call_dead(td__srv_call *c);
/* Whether gRPC reported the call cancelled (valid once the call has ended). */
bool td__srv_call_cancelled(const td__srv_call *c);

/* Queue an encoded message (takes ownership of bb). Dropped when the call is over or has
 * its status. Returns TD_OK or TD_ENOMEM (bb destroyed). */
td_status td__srv_call_send(td__srv_call *c, grpc_byte_buffer *bb);
/* Queue the call's final status; without memory for it, cancel the call with it. */
void td__srv_call_finish(td__srv_call *c, grpc_status_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Cancel the call now with this status (the stream then ends through on_end). */
void td__srv_call_cancel(td__srv_call *c, grpc_status_code code, const char *why);

/* Receive no more messages until td__srv_call_resume (the owner holds a request it cannot
 * queue yet: server/session.c's queued-batch limit). Called from on_message, which then
 * returns true; HTTP/2 flow control holds the client back meanwhile. A call that ends while
 * paused still reaches on_end. Any thread (pause: the receive side). */
void td__srv_call_pause(td__srv_call *c);
void td__srv_call_resume(td__srv_call *c);

/* Count / uncount `nbytes` of request memory (see flow control above). Unhold asks for the
 * next message when it brings the total under TD_CALL_RECV_LOW after a pause. */
void td__srv_call_hold(td__srv_call *c, size_t nbytes);
void td__srv_call_unhold(td__srv_call *c, size_t nbytes);
#endif

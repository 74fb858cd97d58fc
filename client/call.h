/* call.h — the client's one gRPC call helper: a channel with tensord's limits, a completion
 * queue that only its owner's thread polls, and one call on it (a Session stream or a unary
 * GetInfo), with the pump that turns completions into state.
 *
 * Why one helper: protoc-c gives no gRPC stubs, and the C core allows one SEND_MESSAGE and
 * one RECV_MESSAGE outstanding per call, so every client (the session transport in
 * client/remote.c, the unary calls in client/info.c, the hostile-input test client in
 * tests/e2e/raw_session.c) drives the same small state machine by hand. It lives here
 * once; what the messages mean stays with each owner.
 *
 * The owner calls grpc_init before td__cli_call_init and grpc_shutdown after
 * td__cli_call_fini (a payload slice gRPC still holds may call back into the owner, so only
 * the owner knows when it is safe to shut down).
 *
 * Thread-safety: a td__cli_call is used by one thread at a time.
 */
#ifndef TD_CLIENT_CALL_H
#define TD_CLIENT_CALL_H

#include "client/security.h"
#include "tensord.h"

#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <grpc/support/time.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct td__cli_call {
    grpc_completion_queue *cq; /* owned */
    grpc_channel *ch;          /* owned */
    grpc_call *call;           /* owned; NULL between unary calls */
    const char *method_name;   /* the method `method` was registered for */
    void *method;

    /* Send side: one SEND_MESSAGE at a time. */
    bool send_pending;
    bool send_failed; /* a send failed: the call can carry nothing more */
    bool md_sent;     /* initial metadata went with the first send */
    grpc_byte_buffer *send_bb;
    bool half_close_pending;

    /* Receive side: one RECV_MESSAGE at a time. */
    bool recv_pending;
    bool recv_ready;   /* a receive completed: recv_bb is the message, NULL at the end */
    bool stream_ended; /* a receive found the end of the stream */
    bool initial_md_armed;
    grpc_byte_buffer *recv_bb;
    grpc_metadata_array initial_md;

    /* Status. */
    bool status_armed;
    bool status_done;
    grpc_status_code status;
    grpc_slice details;
    grpc_metadata_array trailing_md;
} td__cli_call;

/* Milliseconds from now on the monotonic clock. */
gpr_timespec td__cli_after_ms(int ms);

/* Prepare c (creates its completion queue). */
void td__cli_call_init(td__cli_call *c);
/* Cancel what is left, free the call, the channel and the queue. */
void td__cli_call_fini(td__cli_call *c);

/* Open a channel to `target` with tensord's limits (message sizes, a fixed HTTP/2 receive
 * window of recv_window bytes with BDP probing off — 0: TD_STREAM_WINDOW_BYTES —, quick
 * reconnects, a write buffer for bulk uploads). Credentials from `sec` (NULL: plaintext).
 * With timeout_ms >= 0, waits until the channel is READY: a connection that fails fails at
 * once, a peer that accepts nothing is bounded by timeout_ms; timeout_ms < 0 connects
 * lazily. Returns TD_OK, TD_EINVAL (no channel), TD_EUNAVAILABLE (message in err). */
td_status td__cli_channel_open(td__cli_call *c, const char *target, const td__client_sec *sec,
                               int recv_window, int timeout_ms, char *err, size_t errlen);

/* Start a streaming call of `method` with `deadline` and arm RECV_STATUS_ON_CLIENT.
 * Returns TD_OK or TD_EINTERNAL (no call). */
td_status td__cli_call_start(td__cli_call *c, const char *method, gpr_timespec deadline);
/* Start sending bb (ownership passes to c) with `flags` (GRPC_WRITE_*); the first send
 * carries the initial metadata md[0..n_md). Requires !send_pending. Returns false (bb
 * destroyed, send_failed set) when gRPC refuses the operation. */
bool td__cli_call_send(td__cli_call *c, grpc_byte_buffer *bb, const grpc_metadata *md,
                       size_t n_md, uint32_t flags);
/* Arm one RECV_MESSAGE (with the initial metadata, the first time). Sets stream_ended when
 * gRPC refuses. */
void td__cli_call_recv(td__cli_call *c);
/* Take the message a completed receive left (NULL at the end of the stream); clears
 * recv_ready. The caller destroys it. */
grpc_byte_buffer *td__cli_call_take(td__cli_call *c);
/* Half-close (SEND_CLOSE_FROM_CLIENT). */
void td__cli_call_half_close(td__cli_call *c);
/* Handle one completion. Returns false when the deadline passed first. */
bool td__cli_call_pump(td__cli_call *c, gpr_timespec deadline);
/* Whether an operation is still in flight on the call. */
bool td__cli_call_busy(const td__cli_call *c);
/* Pump until nothing is in flight or the deadline passes, dropping received messages. */
void td__cli_call_drain(td__cli_call *c, gpr_timespec deadline);

/* One unary call of `method`: send bb (owned by c from here) with metadata md[0..n_md),
 * half-close, and wait (bounded by `deadline`) for the reply and the status, which end up
 * in c->status and c->details. *reply gets the message (NULL when none came; caller
 * destroys). Returns false when no call could be created. */
bool td__cli_call_unary(td__cli_call *c, const char *method, gpr_timespec deadline,
                        grpc_byte_buffer *bb, const grpc_metadata *md, size_t n_md,
                        grpc_byte_buffer **reply);
#endif

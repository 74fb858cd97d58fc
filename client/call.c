/* call.c — the client's gRPC call helper (see call.h): channel set-up, the completion-queue
 * pump, sends, receives and the unary round trip, written once for every client.
 */
#include "client/call.h"

#include "common/malloc_tune.h"
#include "proto/wire_limits.h"

#include <grpc/grpc_security.h>
#include <stdio.h>
#include <string.h>

/* How much of a write gRPC may hold queued while reporting its chunks sent. */
#define CALL_WRITE_BUFFER_BYTES (8u << 20)
/* Freed memory each malloc arena keeps (common/malloc_tune.h): four stream windows
 * (TD_STREAM_WINDOW_BYTES) of gRPC receive buffers; 16 MiB already stopped every steady-state
 * page fault of a 1 GiB download (BENCHMARKS.md, issue 12). */
#define CALL_MALLOC_TRIM_BYTES ((size_t)32 << 20)

enum call_tag { TAG_SEND = 1, TAG_RECV, TAG_STATUS, TAG_HALF_CLOSE, TAG_CONNECT, TAG_UNARY };
#define TAG(x) ((void *)(uintptr_t)(x))

gpr_timespec td__cli_after_ms(int ms)
{
    return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(ms, GPR_TIMESPAN));
}

void td__cli_call_init(td__cli_call *c)
{
    memset(c, 0, sizeof *c);
    grpc_metadata_array_init(&c->initial_md);
    grpc_metadata_array_init(&c->trailing_md);
    c->details = grpc_empty_slice();
    c->cq = grpc_completion_queue_create_for_next(NULL);
}

/* Free the call and what its operations left, so that another call can start. */
static void call_reset(td__cli_call *c)
{
    if (c->call != NULL) {
        /* Cancel first: a send stuck in flow control (server stopped, not dead) would
         * otherwise keep its completion pending and the queue drain would wait forever.
         * Cancelling a finished call is a no-op. */
        grpc_call_cancel(c->call, NULL);
        grpc_call_unref(c->call);
        c->call = NULL;
    }
    if (c->send_bb != NULL) grpc_byte_buffer_destroy(c->send_bb);
    if (c->recv_bb != NULL) grpc_byte_buffer_destroy(c->recv_bb);
    c->send_bb = c->recv_bb = NULL;
    grpc_metadata_array_destroy(&c->initial_md);
    grpc_metadata_array_destroy(&c->trailing_md);
    grpc_metadata_array_init(&c->initial_md);
    grpc_metadata_array_init(&c->trailing_md);
    grpc_slice_unref(c->details);
    c->details = grpc_empty_slice();
}

void td__cli_call_fini(td__cli_call *c)
{
    if (c->call != NULL) grpc_call_cancel(c->call, NULL);
    if (c->cq == NULL) return;
    if (c->call != NULL) {
        grpc_call_unref(c->call);
        c->call = NULL;
    }
    if (c->ch != NULL) grpc_channel_destroy(c->ch);
    c->ch = NULL;
    grpc_completion_queue_shutdown(c->cq);
    while (grpc_completion_queue_next(c->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).type !=
           GRPC_QUEUE_SHUTDOWN) {
    }
    grpc_completion_queue_destroy(c->cq);
    c->cq = NULL;
    call_reset(c);
    grpc_metadata_array_destroy(&c->initial_md);
    grpc_metadata_array_destroy(&c->trailing_md);
    grpc_slice_unref(c->details);
}

td_status td__cli_channel_open(td__cli_call *c, const char *target, const td__client_sec *sec,
                               int recv_window, int timeout_ms, char *err, size_t errlen)
{
    /* Reconnect quickly: a server restarted mid-run should be found again within ~1 s.
     * (Not GRPC_ARG_MIN_RECONNECT_BACKOFF_MS: gRPC also uses it as the time one connection
     * attempt may take, so a small value makes slow links fail.) Bulk data: buffered write
     * chunks (client/remote.c) and a fixed receive window for downloads
     * (TD_STREAM_WINDOW_BYTES, proto/wire_limits.h). Each channel its own connection
     * (a local subchannel pool): gRPC's global pool would put every context of the process
     * on one connection to a server, whose --max-streams (32 by default) then left the 33rd
     * context's session waiting for a stream until its call timeout. */
    enum { NARGS = 8 };
    static const char *const keys[NARGS] = {
        GRPC_ARG_MAX_SEND_MESSAGE_LENGTH,     GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
        GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
        GRPC_ARG_HTTP2_WRITE_BUFFER_SIZE,     GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES,
        GRPC_ARG_HTTP2_BDP_PROBE,             GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL,
    };
    const int values[NARGS] = {
        (int)TD_MAX_MESSAGE_BYTES, (int)TD_MAX_MESSAGE_BYTES, 100, 1000,
        (int)CALL_WRITE_BUFFER_BYTES, recv_window > 0 ? recv_window : (int)TD_STREAM_WINDOW_BYTES,
        0, 1,
    };
    /* The first channel sets the process's malloc policy unless told not to (README,
     * "Bulk data"): without it, every gRPC receive buffer is faulted in afresh. */
    td__malloc_keep_heap(CALL_MALLOC_TRIM_BYTES, "TENSORD_NO_MALLOC_TUNE");
    grpc_arg args[NARGS];
    for (int i = 0; i < NARGS; i++) {
        args[i].type = GRPC_ARG_INTEGER;
        args[i].key = (char *)(uintptr_t)keys[i];
        args[i].value.integer = values[i];
    }
    grpc_channel_args chargs = {.num_args = NARGS, .args = args};

    grpc_channel_credentials *creds =
        sec != NULL ? td__client_sec_creds(sec) : grpc_insecure_credentials_create();
    grpc_channel *ch = creds != NULL ? grpc_channel_create(target, creds, &chargs) : NULL;
    grpc_channel_credentials_release(creds);
    if (ch == NULL) {
        snprintf(err, errlen, "cannot create a channel to '%s'", target);
        return TD_EINVAL;
    }
    c->ch = ch;
    if (timeout_ms < 0) return TD_OK;

    /* A target as the user would write it: gRPC's "ipv4:10.0.0.5:7070" and
     * "ipv6:[fd00::5]:7070" (client/pool.c's resolved members) lose their prefix. */
    const char *shown = strncmp(target, "ipv4:", 5) == 0 || strncmp(target, "ipv6:", 5) == 0
                            ? target + 5
                            : target;
    /* Wait until READY. A connection attempt that fails (nothing listening, no such socket,
     * unknown host) fails at once, as gRPC's own fail-fast calls do; a peer that accepts
     * nothing at all is bounded by timeout_ms. */
    gpr_timespec deadline = td__cli_after_ms(timeout_ms);
    grpc_connectivity_state state = grpc_channel_check_connectivity_state(ch, 1);
    td_status st = TD_OK;
    while (state != GRPC_CHANNEL_READY) {
        if (state == GRPC_CHANNEL_TRANSIENT_FAILURE || state == GRPC_CHANNEL_SHUTDOWN) {
            snprintf(err, errlen,
                     "cannot reach tensord at %s: connection failed; is the server running? "
                     "(tensord --listen %s)",
                     shown, shown);
            st = TD_EUNAVAILABLE;
            if (sec != NULL) td__client_sec_explain(sec, target, err, errlen);
            break;
        }
        grpc_channel_watch_connectivity_state(ch, state, deadline, c->cq, TAG(TAG_CONNECT));
        grpc_event ev;
        do {
            ev = grpc_completion_queue_next(c->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
        } while (ev.type == GRPC_OP_COMPLETE && ev.tag != TAG(TAG_CONNECT));
        if (ev.type != GRPC_OP_COMPLETE || !ev.success) {
            snprintf(err, errlen,
                     "cannot reach tensord at %s within %d ms: is the server running? "
                     "(tensord --listen %s)",
                     shown, timeout_ms, shown);
            st = TD_EUNAVAILABLE;
            break;
        }
        state = grpc_channel_check_connectivity_state(ch, 0);
    }
    if (st != TD_OK) {
        grpc_channel_destroy(ch);
        c->ch = NULL;
    }
    return st;
}

static void *method_handle(td__cli_call *c, const char *method)
{
    if (c->method == NULL || c->method_name != method) {
        c->method = grpc_channel_register_call(c->ch, method, NULL, NULL);
        c->method_name = method;
    }
    return c->method;
}

td_status td__cli_call_start(td__cli_call *c, const char *method, gpr_timespec deadline)
{
    c->call = grpc_channel_create_registered_call(c->ch, NULL, GRPC_PROPAGATE_DEFAULTS, c->cq,
                                                  method_handle(c, method), deadline, NULL);
    if (c->call == NULL) return TD_EINTERNAL;
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    op.data.recv_status_on_client.trailing_metadata = &c->trailing_md;
    op.data.recv_status_on_client.status = &c->status;
    op.data.recv_status_on_client.status_details = &c->details;
    if (grpc_call_start_batch(c->call, &op, 1, TAG(TAG_STATUS), NULL) == GRPC_CALL_OK)
        c->status_armed = true;
    return TD_OK;
}

bool td__cli_call_send(td__cli_call *c, grpc_byte_buffer *bb, const grpc_metadata *md,
                       size_t n_md, uint32_t flags)
{
    grpc_op ops[2];
    size_t n = 0;
    memset(ops, 0, sizeof ops);
    if (!c->md_sent) {
        ops[n].op = GRPC_OP_SEND_INITIAL_METADATA;
        ops[n].data.send_initial_metadata.count = n_md;
        ops[n].data.send_initial_metadata.metadata = (grpc_metadata *)(uintptr_t)md;
        n++;
    }
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n].flags = flags;
    ops[n].data.send_message.send_message = bb;
    n++;
    if (grpc_call_start_batch(c->call, ops, n, TAG(TAG_SEND), NULL) != GRPC_CALL_OK) {
        grpc_byte_buffer_destroy(bb);
        c->send_failed = true;
        return false;
    }
    c->md_sent = true;
    c->send_bb = bb;
    c->send_pending = true;
    return true;
}

void td__cli_call_recv(td__cli_call *c)
{
    grpc_op ops[2];
    size_t n = 0;
    memset(ops, 0, sizeof ops);
    if (!c->initial_md_armed) {
        /* First receive of the call: take the initial metadata with it. */
        ops[n].op = GRPC_OP_RECV_INITIAL_METADATA;
        ops[n].data.recv_initial_metadata.recv_initial_metadata = &c->initial_md;
        n++;
    }
    ops[n].op = GRPC_OP_RECV_MESSAGE;
    ops[n].data.recv_message.recv_message = &c->recv_bb;
    n++;
    c->recv_bb = NULL;
    if (grpc_call_start_batch(c->call, ops, n, TAG(TAG_RECV), NULL) != GRPC_CALL_OK) {
        c->stream_ended = true;
        return;
    }
    c->recv_pending = true;
    c->initial_md_armed = true;
}

grpc_byte_buffer *td__cli_call_take(td__cli_call *c)
{
    grpc_byte_buffer *bb = c->recv_bb;
    c->recv_bb = NULL;
    c->recv_ready = false;
    return bb;
}

void td__cli_call_half_close(td__cli_call *c)
{
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    if (grpc_call_start_batch(c->call, &op, 1, TAG(TAG_HALF_CLOSE), NULL) == GRPC_CALL_OK)
        c->half_close_pending = true;
}

bool td__cli_call_pump(td__cli_call *c, gpr_timespec deadline)
{
    grpc_event ev = grpc_completion_queue_next(c->cq, deadline, NULL);
    if (ev.type == GRPC_QUEUE_TIMEOUT) return false;
    if (ev.type != GRPC_OP_COMPLETE) return true;
    switch ((uintptr_t)ev.tag) {
    case TAG_SEND:
        c->send_pending = false;
        if (!ev.success) c->send_failed = true;
        if (c->send_bb != NULL) grpc_byte_buffer_destroy(c->send_bb);
        c->send_bb = NULL;
        break;
    case TAG_HALF_CLOSE:
        c->half_close_pending = false;
        break;
    case TAG_RECV:
        c->recv_pending = false;
        c->recv_ready = true;
        if (!ev.success && c->recv_bb != NULL) {
            grpc_byte_buffer_destroy(c->recv_bb);
            c->recv_bb = NULL;
        }
        if (c->recv_bb == NULL) c->stream_ended = true;
        break;
    case TAG_STATUS:
        c->status_done = true;
        break;
    default:
        break;
    }
    return true;
}

bool td__cli_call_busy(const td__cli_call *c)
{
    return c->send_pending || c->recv_pending || c->half_close_pending ||
           (c->status_armed && !c->status_done);
}

void td__cli_call_drain(td__cli_call *c, gpr_timespec deadline)
{
    while (td__cli_call_busy(c) && td__cli_call_pump(c, deadline)) {
        grpc_byte_buffer *bb = c->recv_ready ? td__cli_call_take(c) : NULL;
        if (bb != NULL) grpc_byte_buffer_destroy(bb);
    }
}

bool td__cli_call_unary(td__cli_call *c, const char *method, gpr_timespec deadline,
                        grpc_byte_buffer *bb, const grpc_metadata *md, size_t n_md,
                        grpc_byte_buffer **reply)
{
    *reply = NULL;
    call_reset(c);
    c->status = GRPC_STATUS_UNKNOWN;
    c->call = grpc_channel_create_registered_call(c->ch, NULL, GRPC_PROPAGATE_DEFAULTS, c->cq,
                                                  method_handle(c, method), deadline, NULL);
    if (c->call == NULL) {
        grpc_byte_buffer_destroy(bb);
        return false;
    }
    grpc_op ops[6];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[0].data.send_initial_metadata.count = n_md;
    ops[0].data.send_initial_metadata.metadata = (grpc_metadata *)(uintptr_t)md;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = bb;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &c->initial_md;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = reply;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &c->trailing_md;
    ops[5].data.recv_status_on_client.status = &c->status;
    ops[5].data.recv_status_on_client.status_details = &c->details;
    if (grpc_call_start_batch(c->call, ops, 6, TAG(TAG_UNARY), NULL) == GRPC_CALL_OK) {
        /* The call's own deadline bounds this wait. */
        grpc_event ev;
        do {
            ev = grpc_completion_queue_next(c->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
        } while (ev.type == GRPC_OP_COMPLETE && ev.tag != TAG(TAG_UNARY));
    } else {
        c->status = GRPC_STATUS_INTERNAL;
        grpc_slice_unref(c->details);
        c->details = grpc_slice_from_static_string("cannot start the call");
    }
    grpc_byte_buffer_destroy(bb);
    grpc_call_unref(c->call);
    c->call = NULL;
    return true;
}

/* e2e/rogue_server.c — the client against a server that breaks the protocol.
 *
 * A real tensord never does these things, so this test runs a tiny in-process gRPC server
 * that answers OpenSession normally and then misbehaves on the first read: chunks that run
 * past the caller's buffer, chunks at the wrong offset, a read that ends short, undecodable
 * bytes, replies to requests nobody made. The client must return TD_EPROTO (or the open
 * must fail), never write outside the caller's buffer, and close the session for good;
 * also when the stray reply is taken in by the context's background thread while the
 * program makes no call (the next call reports it).
 */
#include "engine/op.h"
#include "proto/wire.h"
#include "tensord.h"

#include <criterion/criterion.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

enum rogue_mode {
    ROGUE_OVERFLOW,      /* one chunk with 4x the requested bytes */
    ROGUE_GAP,           /* chunk offset skips ahead */
    ROGUE_SHORT,         /* last=true after half the bytes */
    ROGUE_GARBAGE,       /* undecodable reply */
    ROGUE_WRONG_TENSOR,  /* chunk names another tensor */
    ROGUE_STRAY_FENCE,   /* FenceDone for a request never sent */
    ROGUE_BAD_PROTOCOL,  /* SessionOpened with protocol 99 */
    ROGUE_HANG_UP,       /* ends the call with UNAVAILABLE at the read */
    ROGUE_STRAY_ON_WRITE, /* FenceDone for a request never sent, on the first write chunk */
    ROGUE_STRAY_CHUNK,   /* a ReadChunk for a request never sent */
    ROGUE_FAIL_READ,     /* a Failure (TD_ENOTFOUND) for the read */
};

typedef struct rogue {
    enum rogue_mode mode;
    grpc_server *server;
    grpc_completion_queue *cq;
    void *method;
    int port;
    pthread_t thread;
    unsigned done; /* tags (bit n = tag n) that completed while waiting for another */
    unsigned ok;   /* their success flags */
    bool stray_sent; /* ROGUE_STRAY_ON_WRITE: the stray reply went out */
    int bad_read; /* the read (0-based) that misbehaves; the others get 0x5A bytes */
    int n_reads;      /* reads seen so far */
} rogue;

#define RT(x) ((void *)(uintptr_t)(x))

/* Wait for one tag (1..31), remembering others that complete meanwhile. */
static bool rogue_wait(rogue *r, void *tag)
{
    unsigned bit = 1u << (uintptr_t)tag;
    gpr_timespec deadline =
        gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_seconds(20, GPR_TIMESPAN));
    while (!(r->done & bit)) {
        grpc_event ev = grpc_completion_queue_next(r->cq, deadline, NULL);
        if (ev.type != GRPC_OP_COMPLETE) return false;
        unsigned b = 1u << (uintptr_t)ev.tag;
        r->done |= b;
        if (ev.success)
            r->ok |= b;
        else
            r->ok &= ~b;
    }
    r->done &= ~bit;
    return (r->ok & bit) != 0;
}

static bool rogue_send(rogue *r, grpc_call *call, grpc_byte_buffer *bb, bool first)
{
    grpc_op ops[2];
    memset(ops, 0, sizeof ops);
    size_t n = 0;
    if (first) ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n].data.send_message.send_message = bb;
    n++;
    bool ok =
        grpc_call_start_batch(call, ops, n, RT(2), NULL) == GRPC_CALL_OK && rogue_wait(r, RT(2));
    grpc_byte_buffer_destroy(bb);
    return ok;
}

static bool rogue_send_msg(rogue *r, grpc_call *call, Tensord__V1__ServerMessage *m,
                           const void *payload, size_t n, bool first)
{
    td__wire_payload pl = {.data = payload, .nbytes = n};
    grpc_byte_buffer *bb;
    if (td__wire_encode(&m->base, payload ? &pl : NULL, &bb) != TD_OK) return false;
    return rogue_send(r, call, bb, first);
}

static void *rogue_main(void *arg)
{
    rogue *r = arg;
    grpc_call *call = NULL;
    gpr_timespec deadline;
    grpc_metadata_array md;
    grpc_metadata_array_init(&md);
    if (grpc_server_request_registered_call(r->server, r->method, &call, &deadline, &md, NULL,
                                            r->cq, r->cq, RT(1)) != GRPC_CALL_OK ||
        !rogue_wait(r, RT(1))) {
        grpc_metadata_array_destroy(&md);
        return NULL;
    }
    int cancelled = 0;
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    op.data.recv_close_on_server.cancelled = &cancelled;
    grpc_call_start_batch(call, &op, 1, RT(9), NULL);

    td__wire_scratch scratch = {0};
    bool first = true;
    static uint8_t junk[4096];
    memset(junk, 0x5A, sizeof junk);
    for (;;) {
        grpc_byte_buffer *bb = NULL;
        memset(&op, 0, sizeof op);
        op.op = GRPC_OP_RECV_MESSAGE;
        op.data.recv_message.recv_message = &bb;
        if (grpc_call_start_batch(call, &op, 1, RT(3), NULL) != GRPC_CALL_OK ||
            !rogue_wait(r, RT(3)) || bb == NULL)
            break;
        ProtobufCMessage *pm;
        char err[256];
        td_status st = td__wire_decode(bb, &tensord__v1__client_message__descriptor, &scratch,
                                       &pm, NULL, NULL, err, sizeof err);
        grpc_byte_buffer_destroy(bb);
        if (st != TD_OK) break;
        Tensord__V1__ClientMessage *cm = (Tensord__V1__ClientMessage *)pm;
        Tensord__V1__ServerMessage sm = TENSORD__V1__SERVER_MESSAGE__INIT;
        sm.seq = cm->seq;
        bool ok = true;
        if (cm->body_case == TENSORD__V1__CLIENT_MESSAGE__BODY_OPEN) {
            Tensord__V1__SessionOpened so = TENSORD__V1__SESSION_OPENED__INIT;
            so.protocol = r->mode == ROGUE_BAD_PROTOCOL ? 99 : 1;
            so.device = (char *)"cpu";
            sm.body_case = TENSORD__V1__SERVER_MESSAGE__BODY_OPENED;
            sm.opened = &so;
            ok = rogue_send_msg(r, call, &sm, NULL, 0, first);
            first = false;
        } else if (cm->body_case == TENSORD__V1__CLIENT_MESSAGE__BODY_WRITE &&
                   r->mode == ROGUE_STRAY_ON_WRITE && !r->stray_sent) {
            Tensord__V1__FenceDone fd = TENSORD__V1__FENCE_DONE__INIT;
            sm.seq = cm->seq + 1000;
            sm.body_case = TENSORD__V1__SERVER_MESSAGE__BODY_FENCE;
            sm.fence = &fd;
            ok = rogue_send_msg(r, call, &sm, NULL, 0, first);
            first = false;
            r->stray_sent = true;
        } else if (cm->body_case == TENSORD__V1__CLIENT_MESSAGE__BODY_FENCE) {
            Tensord__V1__FenceDone fd = TENSORD__V1__FENCE_DONE__INIT;
            sm.body_case = TENSORD__V1__SERVER_MESSAGE__BODY_FENCE;
            sm.fence = &fd;
            ok = rogue_send_msg(r, call, &sm, NULL, 0, first);
            first = false;
        } else if (cm->body_case == TENSORD__V1__CLIENT_MESSAGE__BODY_READ) {
            const Tensord__V1__ReadRequest *rr = cm->read;
            Tensord__V1__ReadChunk rc = TENSORD__V1__READ_CHUNK__INIT;
            rc.tensor = rr->tensor;
            rc.offset = rr->offset;
            rc.last = true;
            sm.body_case = TENSORD__V1__SERVER_MESSAGE__BODY_READ;
            sm.read = &rc;
            size_t n = (size_t)rr->nbytes;
            if (r->n_reads++ != r->bad_read) {
                if (n <= sizeof junk) {
                    ok = rogue_send_msg(r, call, &sm, junk, n, first);
                    first = false;
                } else {
                    ok = false;
                }
                protobuf_c_message_free_unpacked(pm, NULL);
                if (!ok) break;
                continue;
            }
            switch (r->mode) {
            case ROGUE_OVERFLOW:
                ok = rogue_send_msg(r, call, &sm, junk, 4 * n, first);
                break;
            case ROGUE_GAP:
                rc.offset += 4;
                ok = rogue_send_msg(r, call, &sm, junk, n - 4, first);
                break;
            case ROGUE_SHORT:
                ok = rogue_send_msg(r, call, &sm, junk, n / 2, first);
                break;
            case ROGUE_WRONG_TENSOR:
                rc.tensor += 1000;
                ok = rogue_send_msg(r, call, &sm, junk, n, first);
                break;
            case ROGUE_GARBAGE: {
                grpc_slice s = grpc_slice_from_static_string("\x0b\x0b\x0b");
                grpc_byte_buffer *g = grpc_raw_byte_buffer_create(&s, 1);
                grpc_slice_unref(s);
                ok = rogue_send(r, call, g, first);
                break;
            }
            case ROGUE_STRAY_FENCE: {
                Tensord__V1__FenceDone fd = TENSORD__V1__FENCE_DONE__INIT;
                sm.seq = cm->seq + 1000;
                sm.body_case = TENSORD__V1__SERVER_MESSAGE__BODY_FENCE;
                sm.fence = &fd;
                ok = rogue_send_msg(r, call, &sm, NULL, 0, first);
                break;
            }
            case ROGUE_STRAY_CHUNK:
                sm.seq = cm->seq + 1000;
                ok = rogue_send_msg(r, call, &sm, junk, n, first);
                break;
            case ROGUE_FAIL_READ: {
                Tensord__V1__Failure f = TENSORD__V1__FAILURE__INIT;
                f.status = TD_ENOTFOUND;
                f.message = (char *)"rogue: tensor not found";
                sm.body_case = TENSORD__V1__SERVER_MESSAGE__BODY_FAILURE;
                sm.failure = &f;
                ok = rogue_send_msg(r, call, &sm, NULL, 0, first);
                break;
            }
            case ROGUE_HANG_UP:
            case ROGUE_BAD_PROTOCOL:
            case ROGUE_STRAY_ON_WRITE:
                ok = false;
                break;
            }
        }
        protobuf_c_message_free_unpacked(pm, NULL);
        if (!ok) break;
    }
    grpc_slice details = grpc_slice_from_static_string("rogue server hangs up");
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    op.data.send_status_from_server.status = GRPC_STATUS_UNAVAILABLE;
    op.data.send_status_from_server.status_details = &details;
    grpc_op ops2[2];
    memset(ops2, 0, sizeof ops2);
    size_t n2 = 0;
    if (first) ops2[n2++].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops2[n2++] = op;
    if (grpc_call_start_batch(call, ops2, n2, RT(4), NULL) == GRPC_CALL_OK) rogue_wait(r, RT(4));
    rogue_wait(r, RT(9));
    grpc_call_unref(call);
    td__wire_scratch_fini(&scratch);
    grpc_metadata_array_destroy(&md);
    return NULL;
}

static void rogue_start(rogue *r, enum rogue_mode mode)
{
    memset(r, 0, sizeof *r);
    r->mode = mode;
    grpc_init();
    r->cq = grpc_completion_queue_create_for_next(NULL);
    grpc_arg args[2];
    args[0].type = GRPC_ARG_INTEGER;
    args[0].key = GRPC_ARG_MAX_SEND_MESSAGE_LENGTH;
    args[0].value.integer = (int)TD_MAX_MESSAGE_BYTES;
    args[1].type = GRPC_ARG_INTEGER;
    args[1].key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    args[1].value.integer = (int)TD_MAX_MESSAGE_BYTES;
    grpc_channel_args chargs = {.num_args = 2, .args = args};
    r->server = grpc_server_create(&chargs, NULL);
    r->method = grpc_server_register_method(r->server, TD_METHOD_SESSION, NULL,
                                            GRPC_SRM_PAYLOAD_NONE, 0);
    grpc_server_register_completion_queue(r->server, r->cq, NULL);
    grpc_server_credentials *creds = grpc_insecure_server_credentials_create();
    r->port = grpc_server_add_http2_port(r->server, "127.0.0.1:0", creds);
    grpc_server_credentials_release(creds);
    cr_assert_gt(r->port, 0);
    grpc_server_start(r->server);
    cr_assert_eq(pthread_create(&r->thread, NULL, rogue_main, r), 0);
}

static void rogue_stop(rogue *r)
{
    pthread_join(r->thread, NULL);
    grpc_server_shutdown_and_notify(r->server, r->cq, RT(7));
    grpc_server_cancel_all_calls(r->server);
    rogue_wait(r, RT(7));
    grpc_server_destroy(r->server);
    grpc_completion_queue_shutdown(r->cq);
    while (grpc_completion_queue_next(r->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).type !=
           GRPC_QUEUE_SHUTDOWN) {
    }
    grpc_completion_queue_destroy(r->cq);
    grpc_shutdown();
}

/* Connect, read a 16-byte tensor into a buffer with guard bytes on both sides. */
static void read_against(enum rogue_mode mode, td_status want, const char *msg_part)
{
    rogue r;
    rogue_start(&r, mode);
    char uri[64];
    snprintf(uri, sizeof uri, "tensord://127.0.0.1:%d/cpu", r.port);
    td_options o = {.call_timeout_ms = 5000};
    td_context *ctx = NULL;
    td_status st = td_connect(uri, &o, &ctx);
    if (mode == ROGUE_BAD_PROTOCOL) {
        cr_expect_eq(st, TD_EPROTO, "%s: %s", td_status_name(st), td_connect_error());
        cr_expect(strstr(td_connect_error(), "protocol 99") != NULL, "%s", td_connect_error());
        rogue_stop(&r);
        return;
    }
    cr_assert_eq(st, TD_OK, "%s", td_connect_error());
    td_tensor *t = td_full(ctx, TD_F32, 1, (int64_t[]){4}, 1.0);
    uint8_t buf[64 + 16 + 64];
    memset(buf, 0xEE, sizeof buf);
    st = td_read(t, buf + 64, 16);
    cr_expect_eq(st, want, "read: %s: %s", td_status_name(st), td_last_error(ctx));
    cr_expect(strstr(td_last_error(ctx), msg_part) != NULL, "message lacks '%s': %s", msg_part,
              td_last_error(ctx));
    for (size_t i = 0; i < sizeof buf; i++) {
        if ((i < 64 || i >= 80) && buf[i] != 0xEE) {
            cr_expect_fail("byte %zd outside the destination was written", (ssize_t)i - 64);
            break;
        }
    }
    st = td_fence(ctx);
    cr_expect_eq(st, TD_ECLOSED, "after the protocol error: %s", td_status_name(st));
    td_close(ctx);
    rogue_stop(&r);
}

Test(rogue_server, chunk_past_buffer, .timeout = 30)
{
    read_against(ROGUE_OVERFLOW, TD_EPROTO, "at most 16 bytes");
}

Test(rogue_server, chunk_at_wrong_offset, .timeout = 30)
{
    read_against(ROGUE_GAP, TD_EPROTO, "expected offset 0");
}

Test(rogue_server, read_ends_short, .timeout = 30)
{
    read_against(ROGUE_SHORT, TD_EPROTO, "after 8 of 16 bytes");
}

Test(rogue_server, chunk_for_other_tensor, .timeout = 30)
{
    read_against(ROGUE_WRONG_TENSOR, TD_EPROTO, "names tensor");
}

Test(rogue_server, undecodable_reply, .timeout = 30)
{
    read_against(ROGUE_GARBAGE, TD_EPROTO, "group wire type");
}

Test(rogue_server, reply_to_nothing, .timeout = 30)
{
    read_against(ROGUE_STRAY_FENCE, TD_EPROTO, "none pending");
}

Test(rogue_server, bad_protocol_version, .timeout = 30)
{
    read_against(ROGUE_BAD_PROTOCOL, TD_EPROTO, "");
}

Test(rogue_server, hangs_up_mid_read, .timeout = 30)
{
    read_against(ROGUE_HANG_UP, TD_EUNAVAILABLE, "rogue server hangs up");
}

Test(rogue_server, stray_reply_taken_in_the_background, .timeout = 30)
{
    /* Background sends are on by default only with 4 CPUs or more (client/remote.c). */
    setenv("TENSORD_WRITE_COPY_MAX", "16777216", 1);
    rogue r;
    rogue_start(&r, ROGUE_STRAY_ON_WRITE);
    char uri[64];
    snprintf(uri, sizeof uri, "tensord://127.0.0.1:%d/cpu", r.port);
    td_options o = {.call_timeout_ms = 5000, .blob_min_bytes = SIZE_MAX};
    td_context *ctx = NULL;
    cr_assert_eq(td_connect(uri, &o, &ctx), TD_OK, "%s", td_connect_error());
    /* 16 chunks: the stray FenceDone (sent on the first) arrives while the rest are still
     * queued (gRPC buffers 8 MiB), so the flusher thread's drive takes it in while the
     * program makes no call (drive pumps only while sends are queued). */
    static uint8_t data[(size_t)16 << 20];
    td_tensor *a = td_from_host(ctx, TD_U8, 1, (int64_t[]){sizeof data}, data);
    cr_assert_not_null(a, "%s", td_last_error(ctx));
    usleep(300000);
    td_status st = td_write(a, data, sizeof data);
    cr_expect_eq(st, TD_EPROTO, "an upload after the protocol violation: %s: %s",
                 td_status_name(st), td_last_error(ctx));
    cr_expect(strstr(td_last_error(ctx), "none pending") != NULL, "after %s: '%s'",
              td_status_name(st), td_last_error(ctx));
    st = td_fence(ctx);
    cr_expect_eq(st, TD_ECLOSED, "fence after it: %s: %s", td_status_name(st),
                 td_last_error(ctx));
    td_release(a);
    td_close(ctx);
    rogue_stop(&r);
}

/* Three reads started (td_read_start) into buffers with guard bytes on both sides; the
 * server answers the first honestly (0x5A bytes) and the second in `mode` while all three
 * are pending (the third honestly unless the session broke). Finished last-first, then
 * first, then the bad one: the call that takes in the bad reply returns `want` naming
 * itself and the cause — a finish, or the third start when the reply arrives while that
 * start pumps the session (timing decides); no byte outside the three destinations is
 * written, whatever comes. */
static void async_read_against(enum rogue_mode mode, td_status want, const char *msg_part,
                               bool session_survives)
{
    rogue r;
    rogue_start(&r, mode);
    r.bad_read = 1;
    char uri[64];
    snprintf(uri, sizeof uri, "tensord://127.0.0.1:%d/cpu", r.port);
    td_options o = {.call_timeout_ms = 5000};
    td_context *ctx = NULL;
    cr_assert_eq(td_connect(uri, &o, &ctx), TD_OK, "%s", td_connect_error());
    td_tensor *t = td_full(ctx, TD_F32, 1, (int64_t[]){4}, 1.0);
    cr_assert_not_null(t, "%s", td_last_error(ctx));
    static uint8_t buf[3][64 + 16 + 64];
    memset(buf, 0xEE, sizeof buf);
    td_pending_read *p[3] = {NULL, NULL, NULL};
    td_status st = TD_OK;
    int started = 0;
    for (; started < 3; started++) {
        st = td_read_start(t, buf[started] + 64, 16, &p[started]);
        if (st != TD_OK) break;
    }
    if (started < 3) {
        /* The bad reply to read 1 came in while a later request was being sent (a start
         * pumps the session too): the session broke there, and that start reports it. */
        cr_assert(!session_survives && started >= 1, "read %d: %s: %s", started,
                  td_status_name(st), td_last_error(ctx));
        cr_expect_eq(st, want, "the bad reply, taken in by td_read_start: %s: %s",
                     td_status_name(st), td_last_error(ctx));
        cr_expect(strncmp(td_last_error(ctx), "td_read_start: ", 15) == 0 &&
                      strstr(td_last_error(ctx), msg_part) != NULL,
                  "message lacks 'td_read_start: ' or '%s': %s", msg_part, td_last_error(ctx));
        st = td_read_finish(p[0]); /* its reply came before the bad one */
        cr_expect_eq(st, TD_OK, "first read: %s: %s", td_status_name(st), td_last_error(ctx));
        if (started == 2) {
            st = td_read_finish(p[1]);
            cr_expect(st == want || st == TD_ECLOSED, "the bad read after the break: %s: %s",
                      td_status_name(st), td_last_error(ctx));
            cr_expect(strstr(td_last_error(ctx), msg_part) != NULL, "%s", td_last_error(ctx));
        }
    } else {
        st = td_read_finish(p[2]);
        if (session_survives) {
            cr_expect_eq(st, TD_OK, "third read: %s: %s", td_status_name(st),
                         td_last_error(ctx));
            st = td_read_finish(p[0]);
            cr_expect_eq(st, TD_OK, "first read: %s: %s", td_status_name(st),
                         td_last_error(ctx));
            st = td_read_finish(p[1]);
        }
        cr_expect_eq(st, want, "the bad read: %s: %s", td_status_name(st), td_last_error(ctx));
        cr_expect(strncmp(td_last_error(ctx), "td_read_finish: ", 16) == 0 &&
                      strstr(td_last_error(ctx), msg_part) != NULL,
                  "message lacks 'td_read_finish: ' or '%s': %s", msg_part, td_last_error(ctx));
        if (!session_survives) {
            st = td_read_finish(p[0]); /* its reply came before the bad one */
            cr_expect_eq(st, TD_OK, "first read: %s: %s", td_status_name(st),
                         td_last_error(ctx));
            st = td_read_finish(p[1]);
            cr_expect_eq(st, TD_ECLOSED, "after the session broke: %s: %s",
                         td_status_name(st), td_last_error(ctx));
            cr_expect(strstr(td_last_error(ctx), msg_part) != NULL, "%s", td_last_error(ctx));
        }
    }
    for (int k = 0; k < 3; k++) {
        for (size_t i = 0; i < sizeof buf[k]; i++) {
            if ((i < 64 || i >= 80) && buf[k][i] != 0xEE) {
                cr_expect_fail("read %d: byte %zd outside the destination was written", k,
                               (ssize_t)i - 64);
                break;
            }
        }
    }
    for (int i = 64; i < 80; i++) cr_expect_eq(buf[0][i], 0x5A, "first read, byte %d", i - 64);
    st = td_fence(ctx);
    cr_expect_eq(st, session_survives ? TD_OK : TD_ECLOSED, "fence after it: %s: %s",
                 td_status_name(st), td_last_error(ctx));
    td_release(t);
    td_close(ctx);
    rogue_stop(&r);
}

Test(rogue_server, async_chunk_past_buffer, .timeout = 30)
{
    async_read_against(ROGUE_OVERFLOW, TD_EPROTO, "at most 16 bytes", false);
}

Test(rogue_server, async_chunk_at_wrong_offset, .timeout = 30)
{
    async_read_against(ROGUE_GAP, TD_EPROTO, "expected offset 0", false);
}

Test(rogue_server, async_read_ends_short, .timeout = 30)
{
    async_read_against(ROGUE_SHORT, TD_EPROTO, "after 8 of 16 bytes", false);
}

Test(rogue_server, async_chunk_for_other_tensor, .timeout = 30)
{
    async_read_against(ROGUE_WRONG_TENSOR, TD_EPROTO, "names tensor", false);
}

Test(rogue_server, async_chunk_for_no_request, .timeout = 30)
{
    async_read_against(ROGUE_STRAY_CHUNK, TD_EPROTO, "none pending", false);
}

Test(rogue_server, async_undecodable_reply, .timeout = 30)
{
    async_read_against(ROGUE_GARBAGE, TD_EPROTO, "group wire type", false);
}

Test(rogue_server, async_hangs_up, .timeout = 30)
{
    async_read_against(ROGUE_HANG_UP, TD_EUNAVAILABLE, "rogue server hangs up", false);
}

Test(rogue_server, async_read_fails, .timeout = 30)
{
    async_read_against(ROGUE_FAIL_READ, TD_ENOTFOUND, "rogue: tensor not found", true);
}

/* A stray reply taken in by the context's background thread while a read is pending (the
 * read's request queued behind a copied upload): td_read_finish reports the violation
 * (or td_read_start does, when the thread found it first), and the read's dst is not
 * written outside its bytes. */
Test(rogue_server, stray_reply_in_the_background_with_a_read_pending, .timeout = 30)
{
    setenv("TENSORD_WRITE_COPY_MAX", "16777216", 1);
    rogue r;
    rogue_start(&r, ROGUE_STRAY_ON_WRITE);
    r.bad_read = -1; /* reads are answered honestly */
    char uri[64];
    snprintf(uri, sizeof uri, "tensord://127.0.0.1:%d/cpu", r.port);
    td_options o = {.call_timeout_ms = 5000, .blob_min_bytes = SIZE_MAX};
    td_context *ctx = NULL;
    cr_assert_eq(td_connect(uri, &o, &ctx), TD_OK, "%s", td_connect_error());
    td_tensor *t = td_full(ctx, TD_F32, 1, (int64_t[]){4}, 1.0);
    static uint8_t data[(size_t)16 << 20];
    td_tensor *a = td_from_host(ctx, TD_U8, 1, (int64_t[]){sizeof data}, data);
    cr_assert_not_null(a, "%s", td_last_error(ctx));
    static uint8_t buf[64 + 16 + 64];
    memset(buf, 0xEE, sizeof buf);
    td_pending_read *p = NULL;
    td_status st = td_read_start(t, buf + 64, 16, &p);
    if (st == TD_OK) {
        usleep(300000);
        st = td_read_finish(p);
        cr_expect(strncmp(td_last_error(ctx), "td_read_finish: ", 16) == 0, "%s",
                  td_last_error(ctx));
    }
    cr_expect_eq(st, TD_EPROTO, "%s: %s", td_status_name(st), td_last_error(ctx));
    cr_expect(strstr(td_last_error(ctx), "none pending") != NULL, "%s", td_last_error(ctx));
    for (size_t i = 0; i < sizeof buf; i++)
        if ((i < 64 || i >= 80) && buf[i] != 0xEE) {
            cr_expect_fail("byte %zd outside the destination was written", (ssize_t)i - 64);
            break;
        }
    cr_expect_eq(td_fence(ctx), TD_ECLOSED);
    td_release(a);
    td_release(t);
    td_close(ctx);
    rogue_stop(&r);
}

/* hostile/hostile.c — input that only the server can catch. Raw protocol messages built with
 * proto/wire.c (bypassing every client-side check) and public-API cases whose errors only
 * show at execution. Each bad message must get a Failure or an error status with a message;
 * afterwards the same session (when the server kept it open) and a new session still work. */
#include "engine/op.h"
#include "raw_session.h"
#include "server_fixture.h"
#include "suite_fixture.h"
#include "tensord.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ANY_SEQ UINT64_MAX

/* After sending something bad (seq bad_seq, or ANY_SEQ), fence and collect what comes back.
 * Returns 1 when a Failure for bad_seq arrived and the session is still open, 0 when the
 * server ended the call instead (with a non-OK status and a message). The failure message
 * is copied to msg. */
static int expect_rejected(raw_session *s, uint64_t bad_seq, char *msg, size_t msglen)
{
    msg[0] = '\0';
    uint64_t fence = raw_send_fence(s);
    bool failed = false;
    for (;;) {
        raw_msg m;
        int rc = raw_recv(s, &m, 10000);
        cr_assert_neq(rc, -1, "no reply within 10 s after bad message %llu",
                      (unsigned long long)bad_seq);
        cr_assert_neq(rc, -2, "undecodable reply: %s", m.message);
        if (rc == 0) {
            cr_assert(!failed, "server ended the call after already reporting a Failure");
            cr_expect_neq(s->status, GRPC_STATUS_OK, "call ended with OK after a bad message");
            cr_expect_neq(raw_details(s)[0], '\0', "error status without a message");
            snprintf(msg, msglen, "%s", raw_details(s));
            cr_log_info("call ended, status %d: %s", (int)s->status, msg);
            return 0;
        }
        if (m.kind == TENSORD__V1__SERVER_MESSAGE__BODY_FAILURE &&
            (m.seq == bad_seq || bad_seq == ANY_SEQ)) {
            cr_expect_neq(m.status, 0u, "Failure with status TD_OK");
            cr_expect_neq(m.message[0], '\0', "Failure without a message");
            snprintf(msg, msglen, "%s", m.message);
            cr_log_info("Failure seq %llu op %u status %u: %s", (unsigned long long)m.seq,
                        m.op_index, m.status, m.message);
            failed = true;
        } else if (m.kind == TENSORD__V1__SERVER_MESSAGE__BODY_FENCE && fence != 0 &&
                   m.seq == fence) {
            raw_msg_fini(&m);
            break;
        } else if (m.kind == TENSORD__V1__SERVER_MESSAGE__BODY_FAILURE) {
            cr_expect_fail("Failure for seq %llu (bad message was %llu): %s",
                           (unsigned long long)m.seq, (unsigned long long)bad_seq, m.message);
        }
        raw_msg_fini(&m);
    }
    cr_assert(failed, "bad message %llu got no Failure before the fence completed",
              (unsigned long long)bad_seq);
    return 1;
}

/* FULL f32 [3] = 2.5 as tensor `id`, read it back. */
static void expect_session_works(raw_session *s, uint64_t id)
{
    td__op op = raw_op_full(id, TD_F32, 1, (int64_t[]){3}, 2.5);
    cr_assert_neq(raw_send_ops(s, &op, 1), 0u, "send failed on a session that should work");
    uint8_t buf[12];
    size_t got = raw_read_back(s, id, 0, buf, sizeof buf, 10000);
    cr_assert_eq(got, sizeof buf);
    float v[3];
    memcpy(v, buf, sizeof v);
    for (int i = 0; i < 3; i++) cr_expect_eq(v[i], 2.5f, "element %d = %g", i, v[i]);
}

static void expect_new_session_works(void)
{
    raw_session s2;
    open_raw(&s2);
    expect_session_works(&s2, 77);
    grpc_status_code code = raw_close(&s2);
    cr_expect_eq(code, GRPC_STATUS_OK, "clean close ended with status %d", (int)code);
}

/* Send ops, expect a Failure (or a refused call), then check both sessions. */
static void bad_ops_case(const td__op *ops, size_t n, const char *must_name)
{
    raw_session s;
    open_raw(&s);
    uint64_t seq = raw_send_ops(&s, ops, n);
    cr_assert_neq(seq, 0u);
    char msg[1024];
    int open = expect_rejected(&s, seq, msg, sizeof msg);
    if (must_name != NULL)
        cr_expect(strstr(msg, must_name) != NULL, "message does not name %s: '%s'", must_name,
                  msg);
    if (open) expect_session_works(&s, 1000);
    raw_close(&s);
    expect_new_session_works();
}

Test(hostile, unknown_tensor_in_batch, .init = start_tcp, .fini = stop, .timeout = 120)
{
    td__op op = raw_op_binary(TD_OP_ADD, 5, 987654, 987655);
    bad_ops_case(&op, 1, "987654");
}

Test(hostile, unknown_opcode, .init = start_tcp, .fini = stop, .timeout = 120)
{
    td__op op;
    memset(&op, 0, sizeof op);
    op.opcode = 511; /* below TD_OPCODE_LIMIT, no row */
    op.output = 5;
    bad_ops_case(&op, 1, "511");
    op.opcode = 0xFFFFFFFFu;
    bad_ops_case(&op, 1, NULL);
}

Test(hostile, rank_9, .init = start_tcp, .fini = stop, .timeout = 120)
{
    int64_t dims[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    td__op op = raw_op_full(5, TD_F32, 9, dims, 1.0);
    bad_ops_case(&op, 1, "9");
}

Test(hostile, negative_dim, .init = start_tcp, .fini = stop, .timeout = 120)
{
    td__op op = raw_op_full(5, TD_F32, 2, (int64_t[]){2, -3}, 1.0);
    bad_ops_case(&op, 1, "-3");
}

Test(hostile, overflowing_dims, .init = start_tcp, .fini = stop, .timeout = 120)
{
    /* 2^31 cubed = 2^93 elements; INT64_MAX * 2; and 2^46 f64 elements = 2^49 bytes, over
     * the 2^48-byte tensor limit without overflowing int64. */
    td__op a = raw_op_full(5, TD_F32, 3, (int64_t[]){1ll << 31, 1ll << 31, 1ll << 31}, 0.0);
    bad_ops_case(&a, 1, NULL);
    td__op b = raw_op_full(5, TD_U8, 2, (int64_t[]){INT64_MAX, 2}, 0.0);
    bad_ops_case(&b, 1, NULL);
    td__op c = raw_op_full(5, TD_F64, 1, (int64_t[]){1ll << 46}, 0.0);
    bad_ops_case(&c, 1, NULL);
}

Test(hostile, bad_dtype_and_too_many_inputs, .init = start_tcp, .fini = stop, .timeout = 120)
{
    td__op a = raw_op_full(5, 99, 1, (int64_t[]){4}, 0.0);
    bad_ops_case(&a, 1, "99");
    /* Nine inputs cannot be represented in td__op: build the wire Op by hand. */
    raw_session s;
    open_raw(&s);
    uint64_t inputs[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    Tensord__V1__Op w = TENSORD__V1__OP__INIT;
    w.opcode = TD_OP_CONCAT;
    w.n_inputs = 9;
    w.inputs = inputs;
    w.output = 10;
    Tensord__V1__Op *wp = &w;
    Tensord__V1__OpBatch b = TENSORD__V1__OP_BATCH__INIT;
    b.n_ops = 1;
    b.ops = &wp;
    Tensord__V1__ClientMessage cm = TENSORD__V1__CLIENT_MESSAGE__INIT;
    cm.body_case = TENSORD__V1__CLIENT_MESSAGE__BODY_BATCH;
    cm.batch = &b;
    uint64_t seq;
    cr_assert(raw_send(&s, &cm, NULL, 0, &seq));
    char msg[1024];
    if (expect_rejected(&s, seq, msg, sizeof msg)) expect_session_works(&s, 1000);
    raw_close(&s);
    expect_new_session_works();
}

Test(hostile, failure_names_op_index, .init = start_tcp, .fini = stop, .timeout = 120)
{
    /* Two good ops, then a bad one: the Failure must point at index 2. */
    raw_session s;
    open_raw(&s);
    td__op ops[3] = {raw_op_full(1, TD_F32, 1, (int64_t[]){4}, 1.0),
                     raw_op_full(2, TD_F32, 1, (int64_t[]){4}, 2.0),
                     raw_op_binary(TD_OP_ADD, 3, 1, 424242)};
    uint64_t seq = raw_send_ops(&s, ops, 3);
    uint64_t fence = raw_send_fence(&s);
    bool seen = false;
    for (;;) {
        raw_msg m;
        cr_assert_eq(raw_recv(&s, &m, 10000), 1, "%s", raw_details(&s));
        if (m.kind == TENSORD__V1__SERVER_MESSAGE__BODY_FAILURE) {
            cr_expect_eq(m.seq, seq);
            cr_expect_eq(m.op_index, 2u, "op_index %u: %s", m.op_index, m.message);
            seen = true;
        }
        bool done = m.kind == TENSORD__V1__SERVER_MESSAGE__BODY_FENCE && m.seq == fence;
        raw_msg_fini(&m);
        if (done) break;
    }
    cr_expect(seen, "no Failure for the bad op");
    expect_session_works(&s, 2000);
    raw_close(&s);
}

Test(hostile, write_past_end, .init = start_tcp, .fini = stop, .timeout = 120)
{
    raw_session s;
    open_raw(&s);
    td__op op = raw_op_full(1, TD_F32, 1, (int64_t[]){4}, 0.0); /* 16 bytes */
    cr_assert_neq(raw_send_ops(&s, &op, 1), 0u);
    uint8_t data[16] = {0};
    char msg[1024];
    struct {
        uint64_t offset;
        size_t n;
    } cases[] = {{8, 16}, {16, 1}, {UINT64_MAX - 7, 16}, {UINT64_MAX, 1}, {1ull << 63, 8}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint64_t seq = raw_send_write(&s, 1, cases[i].offset, data, cases[i].n);
        cr_assert_neq(seq, 0u, "case %zu: send failed", i);
        int open = expect_rejected(&s, seq, msg, sizeof msg);
        cr_assert(open, "case %zu: the server ended the session: %s", i, msg);
    }
    /* Writing to a tensor that does not exist. */
    uint64_t seq = raw_send_write(&s, 555555, 0, data, 4);
    cr_assert(expect_rejected(&s, seq, msg, sizeof msg), "%s", msg);
    expect_session_works(&s, 1000);
    raw_close(&s);
    expect_new_session_works();
}

/* Read with a bad range: the read itself must fail (a Failure with the read's seq). */
static void expect_read_fails(raw_session *s, uint64_t id, uint64_t offset, uint64_t nbytes,
                              const char *must_name)
{
    uint64_t seq = raw_send_read(s, id, offset, nbytes);
    cr_assert_neq(seq, 0u);
    for (;;) {
        raw_msg m;
        int rc = raw_recv(s, &m, 10000);
        cr_assert_eq(rc, 1, "read %llu+%llu of %llu: no reply (rc %d: %s)",
                     (unsigned long long)offset, (unsigned long long)nbytes,
                     (unsigned long long)id, rc, raw_details(s));
        if (m.seq == seq) {
            cr_assert_eq(m.kind, TENSORD__V1__SERVER_MESSAGE__BODY_FAILURE,
                         "read %llu+%llu of tensor %llu did not fail",
                         (unsigned long long)offset, (unsigned long long)nbytes,
                         (unsigned long long)id);
            cr_expect_neq(m.message[0], '\0');
            if (must_name != NULL)
                cr_expect(strstr(m.message, must_name) != NULL, "message does not name %s: %s",
                          must_name, m.message);
            raw_msg_fini(&m);
            return;
        }
        raw_msg_fini(&m);
    }
}

Test(hostile, bad_read_ranges, .init = start_tcp, .fini = stop, .timeout = 120)
{
    raw_session s;
    open_raw(&s);
    td__op op = raw_op_full(1, TD_F32, 1, (int64_t[]){4}, 0.0);
    cr_assert_neq(raw_send_ops(&s, &op, 1), 0u);
    expect_read_fails(&s, 1, 0, 17, NULL);
    expect_read_fails(&s, 1, 16, 1, NULL);
    expect_read_fails(&s, 1, UINT64_MAX, 2, NULL);
    expect_read_fails(&s, 1, 8, UINT64_MAX, NULL);
    expect_read_fails(&s, 1, UINT64_MAX - 7, 16, NULL);
    expect_read_fails(&s, 31337, 0, 4, "31337");
    expect_session_works(&s, 1000);
    raw_close(&s);
    expect_new_session_works();
}

Test(hostile, read_released_tensor, .init = start_tcp, .fini = stop, .timeout = 120)
{
    raw_session s;
    open_raw(&s);
    td__op op = raw_op_full(4242, TD_F32, 1, (int64_t[]){4}, 1.0);
    cr_assert_neq(raw_send_ops(&s, &op, 1), 0u);
    uint64_t id = 4242;
    cr_assert_neq(raw_send_release(&s, &id, 1), 0u);
    expect_read_fails(&s, 4242, 0, 16, "4242");
    /* Releasing it again, or an id never made, is not fatal either. */
    uint64_t ids[2] = {4242, 999999};
    uint64_t seq = raw_send_release(&s, ids, 2);
    cr_assert_neq(seq, 0u);
    uint64_t fence = raw_send_fence(&s);
    for (;;) {
        raw_msg m;
        cr_assert_eq(raw_recv(&s, &m, 10000), 1, "%s", raw_details(&s));
        bool done = m.kind == TENSORD__V1__SERVER_MESSAGE__BODY_FENCE && m.seq == fence;
        raw_msg_fini(&m);
        if (done) break;
    }
    expect_session_works(&s, 1000);
    raw_close(&s);
}

Test(hostile, garbage_message, .init = start_tcp, .fini = stop, .timeout = 120)
{
    const uint8_t garbage[][8] = {
        {0xFF, 0xFF, 0xFF, 0xFF, 0x0F},   /* field tag that never ends */
        {0x0B, 0x01, 0x02, 0x03},         /* a group */
        {0x12, 0x7F, 0x01},               /* length past the end */
        {0x7A, 0x05, 'a', 'b'},           /* payload shorter than its length */
    };
    const size_t lens[] = {5, 4, 3, 4};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        raw_session s;
        open_raw(&s);
        cr_assert(raw_send_bytes(&s, garbage[i], lens[i]), "case %zu: send failed", i);
        char msg[1024];
        if (expect_rejected(&s, ANY_SEQ, msg, sizeof msg)) expect_session_works(&s, 1000);
        raw_close(&s);
        expect_new_session_works();
    }
}

Test(hostile, no_open_first, .init = start_tcp, .fini = stop, .timeout = 120)
{
    /* A session whose first message is not OpenSession. */
    raw_session s;
    cr_assert(raw_start(&s, srv.addr));
    uint64_t seq = raw_send_fence(&s);
    raw_msg m;
    int rc = raw_recv(&s, &m, 10000);
    if (rc == 1) {
        cr_expect_eq(m.kind, TENSORD__V1__SERVER_MESSAGE__BODY_FAILURE,
                     "fence before open was answered with message kind %d", m.kind);
        cr_expect_eq(m.seq, seq);
        raw_msg_fini(&m);
    } else {
        cr_assert_eq(rc, 0, "no reply");
        cr_expect_neq(s.status, GRPC_STATUS_OK);
        cr_expect_neq(raw_details(&s)[0], '\0');
    }
    raw_abort(&s);
    expect_new_session_works();
}

Test(hostile, protocol_version_outside, .init = start_tcp, .fini = stop, .timeout = 120)
{
    uint32_t ranges[][2] = {{99, 99}, {0, 0}, {2, 1}};
    for (size_t i = 0; i < 3; i++) {
        raw_session s;
        bool opened = raw_open(&s, srv.addr, ranges[i][0], ranges[i][1], "cpu");
        cr_expect(!opened, "protocol %u..%u was accepted", ranges[i][0], ranges[i][1]);
        if (!opened) {
            cr_expect_neq(s.status, GRPC_STATUS_OK);
            cr_expect_neq(raw_details(&s)[0], '\0', "refusal without a message");
        }
        raw_abort(&s);
    }
    expect_new_session_works();
}

Test(hostile, unknown_device_raw, .init = start_tcp, .fini = stop, .timeout = 120)
{
    raw_session s;
    bool opened = raw_open(&s, srv.addr, TD_PROTOCOL_MIN, TD_PROTOCOL_MAX, "cuda:7");
    cr_expect(!opened);
    cr_expect_eq(s.status, GRPC_STATUS_INVALID_ARGUMENT, "status %d: %s", (int)s.status,
                 raw_details(&s));
    cr_expect(strstr(raw_details(&s), "cuda:7") != NULL, "%s", raw_details(&s));
    raw_abort(&s);
    expect_new_session_works();
}

/* ---- through the public API ---- */

static void unknown_device(void)
{
    char uri[600];
    td_test_server_uri(&srv, "cuda:7", uri, sizeof uri);
    td_context *ctx = NULL;
    td_status st = td_connect(uri, NULL, &ctx);
    cr_expect_eq(st, TD_EINVAL, "%s: %s: %s", uri, td_status_name(st), td_connect_error());
    cr_expect_null(ctx);
    cr_expect(strstr(td_connect_error(), "cuda:7") != NULL, "%s", td_connect_error());
    td_server_info info;
    cr_expect(td_test_wait_usage(srv.addr, 0, 0, 5000, &info), "%llu sessions after refusal",
              (unsigned long long)info.sessions);
}

Test(hostile, unknown_device_tcp, .init = start_tcp, .fini = stop, .timeout = 120)
{
    unknown_device();
}

Test(hostile, unknown_device_unix, .init = start_unix, .fini = stop, .timeout = 120)
{
    unknown_device();
}

/* gather with an index out of range: only execution can see the index values. */
static void gather_oob(const char *uri, td_status *read_st, td_status *fence_st)
{
    td_context *ctx;
    cr_assert_eq(td_connect(uri, NULL, &ctx), TD_OK, "%s", td_connect_error());
    const float xd[6] = {1, 2, 3, 4, 5, 6};
    const int64_t idx[2] = {0, 7};
    td_tensor *x = td_from_host(ctx, TD_F32, 2, (int64_t[]){2, 3}, xd);
    td_tensor *i = td_from_host(ctx, TD_I64, 2, (int64_t[]){2, 1}, idx);
    td_tensor *g = td_gather(x, i, 1);
    cr_assert(g != NULL, "%s", td_last_error(ctx));
    float out[2];
    *read_st = td_read(g, out, sizeof out);
    cr_expect_neq(*read_st, TD_OK, "%s: gather with index 7 of 3 succeeded", uri);
    cr_expect_neq(td_last_error(ctx)[0], '\0');
    *fence_st = td_fence(ctx);
    /* The context still works afterwards. */
    td_tensor *y = td_add(x, x);
    float v[6];
    cr_expect_eq(td_read(y, v, sizeof v), TD_OK, "%s: %s", uri, td_last_error(ctx));
    cr_expect_eq(v[5], 12.0f);
    cr_expect_eq(td_fence(ctx), TD_OK, "%s: %s", uri, td_last_error(ctx));
    td_close(ctx);
}

Test(hostile, gather_out_of_range_like_local, .init = start_tcp, .fini = stop, .timeout = 120)
{
    char uri[600];
    td_test_server_uri(&srv, "cpu", uri, sizeof uri);
    td_status lr, lf, rr, rf;
    gather_oob("local:cpu", &lr, &lf);
    gather_oob(uri, &rr, &rf);
    cr_expect_eq(rr, lr, "read: remote %s, local %s", td_status_name(rr), td_status_name(lr));
    cr_expect_eq(rf, lf, "fence: remote %s, local %s", td_status_name(rf), td_status_name(lf));
}

/* ---- more classes (issue 5): ids of another session, zero-element tensors, writes at
 * hostile offsets and out of order, releases inside a stream, huge allocations,
 * truncated protobuf, and a flood of batches that are never read. ---- */

static void read_expect_failure(raw_session *s, uint64_t id, uint64_t off, uint64_t n,
                                const char *must_name)
{
    uint64_t seq = raw_send_read(s, id, off, n);
    cr_assert_neq(seq, 0u);
    char msg[1024];
    cr_assert_eq(expect_rejected(s, seq, msg, sizeof msg), 1, "session ended: %s", msg);
    if (must_name) cr_expect(strstr(msg, must_name) != NULL, "'%s' lacks '%s'", msg, must_name);
}

Test(hostile, other_sessions_tensor_id, .init = start_tcp, .fini = stop, .timeout = 120)
{
    raw_session a, b;
    open_raw(&a);
    open_raw(&b);
    expect_session_works(&a, 42); /* a holds tensor 42 */
    read_expect_failure(&b, 42, 0, 12, "42");
    td__op op = raw_op_binary(TD_OP_ADD, 43, 42, 42);
    uint64_t seq = raw_send_ops(&b, &op, 1);
    char msg[1024];
    cr_assert_eq(expect_rejected(&b, seq, msg, sizeof msg), 1);
    cr_expect(strstr(msg, "42") != NULL, "%s", msg);
    expect_session_works(&a, 44);
    expect_session_works(&b, 45);
    raw_close(&a);
    raw_close(&b);
}

Test(hostile, zero_element_tensors, .init = start_tcp, .fini = stop, .timeout = 120)
{
    raw_session s;
    open_raw(&s);
    td__op ops[2] = {raw_op_full(1, TD_F32, 2, (int64_t[]){0, 5}, 1.0),
                     raw_op_binary(TD_OP_ADD, 2, 1, 1)};
    cr_assert_neq(raw_send_ops(&s, ops, 2), 0u);
    /* An empty read at offset 0 is fine; anything else is out of range. */
    uint64_t r = raw_send_read(&s, 2, 0, 0);
    uint64_t f = raw_send_fence(&s);
    bool got_read = false, got_fence = false;
    while (!got_fence) {
        raw_msg m;
        cr_assert_eq(raw_recv(&s, &m, 10000), 1, "%s", raw_details(&s));
        if (m.kind == TENSORD__V1__SERVER_MESSAGE__BODY_READ && m.seq == r) got_read = true;
        if (m.kind == TENSORD__V1__SERVER_MESSAGE__BODY_FENCE && m.seq == f) got_fence = true;
        cr_expect_neq(m.kind, TENSORD__V1__SERVER_MESSAGE__BODY_FAILURE, "%s", m.message);
        raw_msg_fini(&m);
    }
    cr_expect(got_read, "no (empty) read reply");
    read_expect_failure(&s, 2, 1, 0, NULL);
    read_expect_failure(&s, 2, 0, 4, NULL);
    uint8_t byte = 7;
    uint64_t w = raw_send_write(&s, 2, 0, &byte, 1);
    char msg[1024];
    cr_assert_eq(expect_rejected(&s, w, msg, sizeof msg), 1);
    /* A write without payload bytes is refused as a protocol error (libtensord never
     * sends one); the session goes on. */
    w = raw_send_write(&s, 2, 0, NULL, 0);
    cr_assert_eq(expect_rejected(&s, w, msg, sizeof msg), 1);
    expect_session_works(&s, 3);
    raw_close(&s);
    expect_new_session_works();
}

Test(hostile, write_offsets_hostile_and_out_of_order, .init = start_tcp, .fini = stop,
     .timeout = 120)
{
    raw_session s;
    open_raw(&s);
    td__op op = raw_op_full(1, TD_F32, 1, (int64_t[]){4}, 0.0); /* 16 bytes */
    cr_assert_neq(raw_send_ops(&s, &op, 1), 0u);
    float v[2] = {1.0f, 2.0f};
    /* Out of order and duplicated chunks inside the tensor are plain writes. */
    cr_assert_neq(raw_send_write(&s, 1, 8, v, 8), 0u);
    cr_assert_neq(raw_send_write(&s, 1, 0, v, 8), 0u);
    cr_assert_neq(raw_send_write(&s, 1, 0, v, 8), 0u);
    /* Past the end, "negative" (huge unsigned) and overflowing offsets fail alone. */
    static const uint64_t bad[] = {12, 16, UINT64_MAX, UINT64_MAX - 3, 1ull << 63};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint64_t seq = raw_send_write(&s, 1, bad[i], v, 8);
        char msg[1024];
        cr_assert_eq(expect_rejected(&s, seq, msg, sizeof msg), 1, "offset %llu",
                     (unsigned long long)bad[i]);
    }
    read_expect_failure(&s, 1, UINT64_MAX, 2, NULL);
    read_expect_failure(&s, 1, 8, UINT64_MAX - 4, NULL);
    expect_session_works(&s, 2);
    raw_close(&s);
}

Test(hostile, use_after_release_in_stream, .init = start_tcp, .fini = stop, .timeout = 120)
{
    raw_session s;
    open_raw(&s);
    td__op op = raw_op_full(1, TD_F32, 1, (int64_t[]){4}, 1.0);
    cr_assert_neq(raw_send_ops(&s, &op, 1), 0u);
    uint64_t id = 1;
    cr_assert_neq(raw_send_release(&s, &id, 1), 0u);
    cr_assert_neq(raw_send_release(&s, &id, 1), 0u); /* twice: idempotent */
    td__op use = raw_op_binary(TD_OP_MUL, 2, 1, 1);
    uint64_t seq = raw_send_ops(&s, &use, 1);
    char msg[1024];
    cr_assert_eq(expect_rejected(&s, seq, msg, sizeof msg), 1);
    cr_expect(strstr(msg, "unknown tensor id 1") != NULL, "%s", msg);
    read_expect_failure(&s, 1, 0, 16, NULL);
    expect_session_works(&s, 3);
    raw_close(&s);
}

Test(hostile, allocation_larger_than_device, .init = start_tcp, .fini = stop, .timeout = 120)
{
    /* 2^47 bytes: under the protocol's tensor limit, over any host's memory. */
    td__op op = raw_op_full(5, TD_U8, 1, (int64_t[]){1ll << 47}, 0.0);
    bad_ops_case(&op, 1, NULL);
}

Test(hostile, truncated_protobuf, .init = start_tcp, .fini = stop, .timeout = 120)
{
    raw_session s;
    open_raw(&s);
    /* seq = 2, then a batch field whose length says 100 bytes and only 3 follow. */
    static const uint8_t trunc[] = {0x08, 0x02, 0x1a, 0x64, 0x0a, 0x01, 0x08};
    cr_assert(raw_send_bytes(&s, trunc, sizeof trunc));
    char msg[1024];
    int open = expect_rejected(&s, ANY_SEQ, msg, sizeof msg);
    if (open) expect_session_works(&s, 9);
    raw_close(&s);
    expect_new_session_works();
}

Test(hostile, flood_of_batches_without_reads, .init = start_tcp, .fini = stop, .timeout = 120)
{
    raw_session s;
    open_raw(&s);
    /* 2,000 batches of 64 small ops, never reading a reply: the server must apply flow
     * control (or just keep up) without growing, and answer the fence at the end. */
    td__op ops[64];
    for (int i = 0; i < 64; i++) ops[i] = raw_op_full(0, TD_F32, 1, (int64_t[]){256}, 1.0);
    uint64_t id = 1;
    for (int b = 0; b < 2000; b++) {
        for (int i = 0; i < 64; i++) ops[i].output = id++;
        cr_assert_neq(raw_send_ops(&s, ops, 64), 0u, "send %d failed: %s", b, raw_details(&s));
        uint64_t ids[64];
        for (int i = 0; i < 64; i++) ids[i] = id - 64 + (uint64_t)i;
        cr_assert_neq(raw_send_release(&s, ids, 64), 0u);
    }
    expect_new_session_works();
    expect_session_works(&s, id + 1);
    raw_close(&s);
}

/* A write whose payload field (15) comes before seq and the body: valid protobuf with the
 * same meaning as the usual order. The server copied such a payload from the unpacked
 * message after freeing it (breaker round, 2026-12-06: freed-heap bytes in the tensor,
 * another session's data once in 200 tries, SIGSEGV with MALLOC_ARENA_MAX=2). Now the
 * tensor must hold exactly the bytes sent, and the server must stay up for others. */
Test(hostile, payload_first_write_is_applied_as_sent, .init = start_tcp, .fini = stop,
     .timeout = 120)
{
    enum { N = 300000 };
    raw_session s;
    open_raw(&s);
    td__op full = raw_op_full(1, TD_U8, 1, (int64_t[]){N}, 0);
    cr_assert_neq(raw_send_ops(&s, &full, 1), 0u);
    uint8_t *msg = malloc(N + 64), *back = malloc(N);
    cr_assert(msg != NULL && back != NULL);
    /* field 15, wire type 2, length N as a varint, then the bytes */
    size_t len = 0;
    msg[len++] = (15u << 3) | 2u;
    uint32_t v = N;
    do {
        const uint8_t low = (uint8_t)(v & 0x7f);
        v >>= 7;
        msg[len++] = (uint8_t)(low | (v != 0 ? 0x80 : 0));
    } while (v != 0);
    for (size_t i = 0; i < N; i++) msg[len + i] = (uint8_t)(i * 13u + 5u);
    len += N;
    Tensord__V1__WriteChunk w = TENSORD__V1__WRITE_CHUNK__INIT;
    w.tensor = 1;
    w.offset = 0;
    Tensord__V1__ClientMessage cm = TENSORD__V1__CLIENT_MESSAGE__INIT;
    cm.seq = s.next_seq;
    cm.body_case = TENSORD__V1__CLIENT_MESSAGE__BODY_WRITE;
    cm.write = &w;
    len += tensord__v1__client_message__pack(&cm, msg + len);
    cr_assert(raw_send_bytes(&s, msg, len));
    s.next_seq++; /* the message used it */
    size_t got = raw_read_back(&s, 1, 0, back, N, 10000);
    cr_assert_eq(got, (size_t)N);
    for (size_t i = 0; i < N; i++)
        cr_assert_eq(back[i], (uint8_t)(i * 13u + 5u), "byte %zu of the payload-first write", i);
    free(msg);
    free(back);
    raw_close(&s);
    expect_new_session_works();
}

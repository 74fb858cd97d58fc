/* hostile/overflow.c — issue 10, item 1: shapes whose broadcast result overflows, sent to a
 * real tensord over the raw protocol (tests/e2e/raw_session.h, not libtensord), in a batch
 * and inside a graph, and through libtensord's local:cpu engine.
 *
 * The heap overflow: three FULL tensors f32 [3161593,1,1], [1,2438809,1], [1,1,598103]
 * (about 15 MB) fed to WHERE give 3161593 * 2438809 * 598103 = 2^62 + 7 elements, whose
 * f32 byte size wraps to 28 in 64 bits; with 2^62 elements it wraps to 0 (a NULL buffer).
 * Each case must get a Failure naming the op, after which the same session and a second
 * one keep working and the server exits cleanly on SIGTERM (it did not crash).
 * Before the fix (engine/op.c), the batch cases killed tensord (SIGSEGV in the CPU where
 * kernel; heap-buffer-overflow under ASan) and the graph validated. */
#include "engine/op.h"
#include "raw_session.h"
#include "server_fixture.h"
#include "suite_fixture.h"
#include "tensord.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Fence, then require a Failure for seq `bad` at op `op_index` with status `want` before the
 * fence reply; the
 * call must stay open (a server that died or ended the call fails the test). The message
 * is copied to msg. */
static void expect_failure(raw_session *s, uint64_t bad, uint32_t op_index, td_status want,
                           char *msg, size_t msglen)
{
    msg[0] = '\0';
    uint64_t fence = raw_send_fence(s);
    cr_assert_neq(fence, 0u, "the server is gone: the fence could not be sent");
    bool failed = false;
    for (;;) {
        raw_msg m;
        int rc = raw_recv(s, &m, 20000);
        cr_assert_eq(rc, 1, "no Failure for seq %llu: receive returned %d (status %d: %s)",
                     (unsigned long long)bad, rc, (int)s->status, raw_details(s));
        if (m.kind == TENSORD__V1__SERVER_MESSAGE__BODY_FAILURE && m.seq == bad) {
            cr_expect_eq(m.op_index, op_index, "failure at op %u, expected %u: %s", m.op_index,
                         op_index, m.message);
            cr_expect_eq(m.status, (uint32_t)want, "status %u, expected %s: %s", m.status,
                         td_status_name(want), m.message);
            snprintf(msg, msglen, "%s", m.message);
            cr_log_info("Failure seq %llu op %u: %s", (unsigned long long)m.seq, m.op_index,
                        m.message);
            failed = true;
        } else if (m.kind == TENSORD__V1__SERVER_MESSAGE__BODY_FENCE && m.seq == fence) {
            raw_msg_fini(&m);
            break;
        } else if (m.kind == TENSORD__V1__SERVER_MESSAGE__BODY_FAILURE) {
            cr_expect_fail("unexpected Failure for seq %llu: %s", (unsigned long long)m.seq,
                           m.message);
        }
        raw_msg_fini(&m);
    }
    cr_assert(failed, "seq %llu got no Failure before its fence", (unsigned long long)bad);
}

/* FULL f32 [3] = 2.5 as tensor `id`, read back: the session still computes. */
static void expect_session_works(raw_session *s, uint64_t id)
{
    td__op op = raw_op_full(id, TD_F32, 1, (int64_t[]){3}, 2.5);
    cr_assert_neq(raw_send_ops(s, &op, 1), 0u, "send failed on a session that should work");
    uint8_t buf[12];
    size_t got = raw_read_back(s, id, 0, buf, sizeof buf, 20000);
    cr_assert_eq(got, sizeof buf);
    float v[3];
    memcpy(v, buf, sizeof v);
    for (int i = 0; i < 3; i++) cr_expect_eq(v[i], 2.5f, "element %d = %g", i, (double)v[i]);
}

/* A second, fresh session works too. */
static void expect_server_serves(void)
{
    raw_session s2;
    open_raw(&s2);
    expect_session_works(&s2, 77);
    cr_expect_eq(raw_close(&s2), GRPC_STATUS_OK, "second session: %s", raw_details(&s2));
}

/* FULL bool cond, FULL f32 a, FULL f32 b (ids 1..3), WHERE -> 4; expect op 3 refused. */
static void where_batch(const int64_t c[3], const int64_t a[3], const int64_t b[3],
                        const char *want_shape)
{
    raw_session s;
    open_raw(&s);
    td__op ops[4] = {raw_op_full(1, TD_BOOL, 3, c, 1.0), raw_op_full(2, TD_F32, 3, a, 2.0),
                     raw_op_full(3, TD_F32, 3, b, 3.0)};
    memset(&ops[3], 0, sizeof ops[3]);
    ops[3].opcode = TD_OP_WHERE;
    ops[3].n_inputs = 3;
    ops[3].inputs[0] = 1, ops[3].inputs[1] = 2, ops[3].inputs[2] = 3;
    ops[3].output = 4;
    uint64_t seq = raw_send_ops(&s, ops, 4);
    cr_assert_neq(seq, 0u);
    char msg[1024];
    expect_failure(&s, seq, 3, TD_EINVAL, msg, sizeof msg);
    cr_expect(strstr(msg, "where") && strstr(msg, want_shape) && strstr(msg, "too large"),
              "message should name the op, the shape and the limit: %s", msg);
    /* the refused output id reads as failed, with the same reason */
    uint64_t rseq = raw_send_read(&s, 4, 0, 4);
    cr_assert_neq(rseq, 0u);
    char rmsg[1024];
    expect_failure(&s, rseq, 0, TD_EPOISONED, rmsg, sizeof rmsg);
    cr_expect(strstr(rmsg, "where"), "read of the refused id: %s", rmsg);
    expect_session_works(&s, 10);
    cr_expect_eq(raw_close(&s), GRPC_STATUS_OK, "%s", raw_details(&s));
    expect_server_serves();
}

Test(overflow, where_batch_2p62_plus_7, .init = start_tcp, .fini = stop, .timeout = 120)
{
    where_batch((int64_t[]){3161593, 1, 1}, (int64_t[]){1, 2438809, 1},
                (int64_t[]){1, 1, 598103}, "[3161593, 2438809, 598103]");
}

Test(overflow, where_batch_exactly_2p62, .init = start_tcp, .fini = stop, .timeout = 120)
{
    /* 2^21 * 2^21 * 2^20 = 2^62 elements: 2^64 bytes, which is 0 in 64 bits */
    where_batch((int64_t[]){1 << 21, 1, 1}, (int64_t[]){1, 1 << 21, 1},
                (int64_t[]){1, 1, 1 << 20}, "[2097152, 2097152, 1048576]");
}

Test(overflow, add_empty_result_with_huge_span, .init = start_tcp, .fini = stop, .timeout = 120)
{
    /* u8 [1,1,2^40,0] + [2^12,2^12,1,1]: no elements, but the non-zero dims multiply to
     * 2^64 (signed overflow in the count helpers before the fix) */
    raw_session s;
    open_raw(&s);
    td__op ops[3] = {raw_op_full(1, TD_U8, 4, (int64_t[]){1, 1, (int64_t)1 << 40, 0}, 1.0),
                     raw_op_full(2, TD_U8, 4, (int64_t[]){1 << 12, 1 << 12, 1, 1}, 2.0),
                     raw_op_binary(TD_OP_ADD, 3, 1, 2)};
    uint64_t seq = raw_send_ops(&s, ops, 3);
    cr_assert_neq(seq, 0u);
    char msg[1024];
    expect_failure(&s, seq, 2, TD_EINVAL, msg, sizeof msg);
    cr_expect(strstr(msg, "add") && strstr(msg, "[4096, 4096, 1099511627776, 0]") &&
                  strstr(msg, "no elements"),
              "%s", msg);
    expect_session_works(&s, 10);
    cr_expect_eq(raw_close(&s), GRPC_STATUS_OK, "%s", raw_details(&s));
    expect_server_serves();
}

/* GraphDefine of FULL x3 + WHERE (no inputs), output the WHERE: refused at validation. */
static void graph_define_where(raw_session *s, const int64_t shapes[3][3], uint64_t *seq)
{
    Tensord__V1__Op w[4], *wp[4];
    uint64_t storage[4][TD_OP_MAX_INPUTS];
    td__op ops[4] = {raw_op_full(0, TD_BOOL, 3, shapes[0], 1.0),
                     raw_op_full(0, TD_F32, 3, shapes[1], 2.0),
                     raw_op_full(0, TD_F32, 3, shapes[2], 3.0)};
    memset(&ops[3], 0, sizeof ops[3]);
    ops[3].opcode = TD_OP_WHERE;
    ops[3].n_inputs = 3;
    ops[3].inputs[0] = 0, ops[3].inputs[1] = 1, ops[3].inputs[2] = 2;
    for (int i = 0; i < 4; i++) {
        td__wire_op_to(&ops[i], &w[i], storage[i]);
        wp[i] = &w[i];
    }
    Tensord__V1__GraphOutput out;
    tensord__v1__graph_output__init(&out);
    out.name = "y";
    out.value = 3;
    Tensord__V1__GraphOutput *outp = &out;
    Tensord__V1__Graph g;
    tensord__v1__graph__init(&g);
    g.n_ops = 4;
    g.ops = wp;
    g.n_outputs = 1;
    g.outputs = &outp;
    uint8_t id[32] = {0};
    Tensord__V1__GraphDefine gd;
    tensord__v1__graph_define__init(&gd);
    gd.graph_id.data = id;
    gd.graph_id.len = sizeof id;
    gd.graph = &g;
    Tensord__V1__ClientMessage cm;
    tensord__v1__client_message__init(&cm);
    cm.body_case = TENSORD__V1__CLIENT_MESSAGE__BODY_GRAPH_DEFINE;
    cm.graph_define = &gd;
    cr_assert(raw_send(s, &cm, NULL, 0, seq), "send of GraphDefine failed");
}

Test(overflow, where_graph_refused_at_validation, .init = start_tcp, .fini = stop,
     .timeout = 120)
{
    const int64_t shapes[2][3][3] = {{{3161593, 1, 1}, {1, 2438809, 1}, {1, 1, 598103}},
                                     {{1 << 21, 1, 1}, {1, 1 << 21, 1}, {1, 1, 1 << 20}}};
    raw_session s;
    open_raw(&s);
    for (int k = 0; k < 2; k++) {
        uint64_t seq = 0;
        graph_define_where(&s, shapes[k], &seq);
        char msg[1024];
        expect_failure(&s, seq, 0, TD_EINVAL, msg, sizeof msg);
        /* refused by the validator (not for its id, which is all zeros here) */
        cr_expect(strstr(msg, "graph op 3") && strstr(msg, "where") && strstr(msg, "too large"),
                  "graph %d: %s", k, msg);
    }
    expect_session_works(&s, 10);
    cr_expect_eq(raw_close(&s), GRPC_STATUS_OK, "%s", raw_details(&s));
    expect_server_serves();
}

/* A libtensord program on local:cpu: the engine runs in-process, so before the fix this
 * crashed the program itself. Now td_where refuses at record time (the client runs the
 * same td__op_infer) with a message naming the op, and the context keeps working. */
Test(overflow, local_cpu_client_gets_an_error, .timeout = 120)
{
    td_context *ctx = NULL;
    cr_assert_eq(td_connect("local:cpu", NULL, &ctx), TD_OK, "%s", td_connect_error());
    td_tensor *c = td_full(ctx, TD_BOOL, 3, (int64_t[]){3161593, 1, 1}, 1.0);
    td_tensor *a = td_full(ctx, TD_F32, 3, (int64_t[]){1, 2438809, 1}, 2.0);
    td_tensor *b = td_full(ctx, TD_F32, 3, (int64_t[]){1, 1, 598103}, 3.0);
    cr_assert(c && a && b, "%s", td_last_error(ctx));
    td_tensor *w = td_where(c, a, b);
    cr_expect_null(w, "td_where accepted a 2^62+7-element result");
    cr_expect_eq(td_last_status(ctx), TD_EINVAL);
    const char *msg = td_last_error(ctx);
    cr_expect(strstr(msg, "where") && strstr(msg, "too large"), "%s", msg);
    if (w != NULL) {
        uint8_t one;
        (void)td_read(w, &one, 1); /* the old code crashed here, in the kernel */
        td_release(w);
    }
    /* the context still computes: 2.0 + 3.0 over a small broadcast */
    td_tensor *x = td_full(ctx, TD_F32, 1, (int64_t[]){4}, 2.0);
    td_tensor *y = td_add_scalar(x, 3.0);
    float v[4];
    cr_assert_eq(td_read(y, v, sizeof v), TD_OK, "%s", td_last_error(ctx));
    for (int i = 0; i < 4; i++) cr_expect_eq(v[i], 5.0f);
    td_release(y);
    td_release(x);
    td_release(c);
    td_release(a);
    td_release(b);
    td_close(ctx);
}

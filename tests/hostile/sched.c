/* hostile/sched.c — one session must not hold the device from the others, and graph runs
 * must not touch ids that are not theirs (issue 10, items 4 and 5).
 *
 * Items 4: a batch of a few hundred ~10 ms reductions (seconds in all) is sent by one raw
 * session; a second session opened afterwards must get its small op answered while that
 * batch is still running (its fence not yet answered). On the code before time slices the
 * second session waited for the whole batch. A batch whose client has gone is dropped, and
 * SIGTERM ends the server within its drain promise even with such a batch queued.
 * Item 5: graph output ids in the engine's range, plain ops creating ids there, and runs
 * onto live ids are refused without touching the caller's tensors.
 * Clients here are raw protocol clients (tests/e2e/raw_session.c), not libtensord. */
#include "engine/op.h"
#include "raw_session.h"
#include "server_fixture.h"
#include "suite_fixture.h"
#include "tensord.h"

#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* 64 MiB of f32 (id 1) and `n` full reductions of it (ids 2 .. n+1): about 10-40 ms each
 * on the CPU device, so the batch runs for seconds. */
#define HOG_NELEM (INT64_C(16) << 20)
static void send_hog(raw_session *s, size_t n)
{
    td__op *ops = calloc(n + 1, sizeof *ops);
    cr_assert(ops != NULL);
    ops[0] = raw_op_full(1, TD_F32, 1, (int64_t[]){HOG_NELEM}, 0.5);
    for (size_t k = 0; k < n; k++) {
        td__op *op = &ops[k + 1];
        op->opcode = TD_OP_SUM;
        op->n_inputs = 1;
        op->inputs[0] = 1;
        op->output = 2 + k;
        op->n_iattrs = 2;
        op->iattrs[0] = 1; /* axis 0 */
        op->iattrs[1] = 0;
    }
    cr_assert_neq(raw_send_ops(s, ops, n + 1), 0, "sending the batch failed");
    free(ops);
}

/* Wait for the reply to `seq` of kind `kind`; skips other messages. Returns the time it came
 * (ms) or fails the test. */
static double wait_reply(raw_session *s, uint64_t seq, int kind, int timeout_ms)
{
    double deadline = td_test_now_ms() + timeout_ms;
    for (;;) {
        raw_msg m;
        int left = (int)(deadline - td_test_now_ms());
        cr_assert(left > 0, "no reply to seq %llu within %d ms", (unsigned long long)seq,
                  timeout_ms);
        int rc = raw_recv(s, &m, left);
        cr_assert_eq(rc, 1, "no reply to seq %llu (rc %d: %s)", (unsigned long long)seq, rc,
                     raw_details(s));
        bool hit = m.seq == seq;
        cr_assert(!hit || m.kind == kind, "seq %llu: got reply kind %d, want %d (%s)",
                  (unsigned long long)seq, m.kind, kind, m.message);
        raw_msg_fini(&m);
        if (hit) return td_test_now_ms();
    }
}

/* Read f32 tensor `id` (n elements) into out. Returns NULL, or the Failure message. */
static const char *read_f32(raw_session *s, uint64_t id, float *out, size_t n)
{
    static char fail[1024];
    uint64_t seq = raw_send_read(s, id, 0, n * sizeof(float));
    cr_assert_neq(seq, 0);
    size_t got = 0;
    for (;;) {
        raw_msg m;
        int rc = raw_recv(s, &m, 10000);
        cr_assert_eq(rc, 1, "no reply to the read of %llu", (unsigned long long)id);
        if (m.seq != seq) {
            raw_msg_fini(&m);
            continue;
        }
        if (m.kind == TENSORD__V1__SERVER_MESSAGE__BODY_FAILURE) {
            snprintf(fail, sizeof fail, "%s", m.message);
            raw_msg_fini(&m);
            return fail;
        }
        cr_assert_eq(m.kind, TENSORD__V1__SERVER_MESSAGE__BODY_READ);
        cr_assert(m.offset + m.payload_len <= n * sizeof(float));
        memcpy((char *)out + m.offset, m.payload, m.payload_len);
        got += m.payload_len;
        bool last = m.last;
        raw_msg_fini(&m);
        if (last) break;
    }
    cr_assert_eq(got, n * sizeof(float));
    return NULL;
}

/* How many reductions make a batch of about `ms` on this server (plain, sanitized or
 * loaded): times a batch of 4 first (ids 1..5, released again). */
static size_t hog_ops_for_ms(raw_session *s, double ms)
{
    send_hog(s, 4);
    double t0 = td_test_now_ms();
    wait_reply(s, raw_send_fence(s), TENSORD__V1__SERVER_MESSAGE__BODY_FENCE, 120000);
    double per_op = (td_test_now_ms() - t0) / 5;
    uint64_t ids[5] = {1, 2, 3, 4, 5};
    cr_assert_neq(raw_send_release(s, ids, 5), 0);
    size_t n = (size_t)(ms / (per_op > 0.1 ? per_op : 0.1));
    n = n < 40 ? 40 : n > 2000 ? 2000 : n;
    fprintf(stderr, "sched: %.1f ms per reduction: %zu make the long batch\n", per_op, n);
    return n;
}

/* A small op of a second session is answered while the first session's long batch runs. */
Test(sched, small_op_not_held_by_a_long_batch, .init = start_tcp, .fini = stop, .timeout = 300)
{
    raw_session hog, other;
    open_raw(&hog);
    size_t n = hog_ops_for_ms(&hog, 4000);
    send_hog(&hog, n);
    uint64_t hog_fence = raw_send_fence(&hog);
    double t0 = td_test_now_ms();
    usleep(100 * 1000); /* the batch is running */

    open_raw(&other); /* opening is work on the same device too */
    double opened = td_test_now_ms();
    td__op small = raw_op_full(7, TD_F32, 1, (int64_t[]){4}, 3.0);
    cr_assert_neq(raw_send_ops(&other, &small, 1), 0);
    float v[4] = {0};
    const char *fail = read_f32(&other, 7, v, 4);
    cr_assert_null(fail, "read failed: %s", fail);
    double answered = td_test_now_ms();
    for (int i = 0; i < 4; i++) cr_expect_eq(v[i], 3.0f);

    /* The hog's fence must still be outstanding: its batch is not done. */
    raw_msg m;
    int rc = raw_recv(&hog, &m, 0);
    cr_assert_eq(rc, -1, "the long batch finished before the small op was answered (rc %d): "
                 "the test batch is too short for this machine, or the device was held",
                 rc);
    fprintf(stderr, "sched: open %.1f ms, small op answered %.1f ms after open, "
            "while the long batch was running (%.0f ms since it was sent)\n",
            opened - t0 - 100, answered - opened, answered - t0);
    double done = wait_reply(&hog, hog_fence, TENSORD__V1__SERVER_MESSAGE__BODY_FENCE, 250000);
    fprintf(stderr, "sched: the long batch took %.0f ms\n", done - t0);
    /* The batch's results are right: sum of 2^24 halves is 2^23, exactly. */
    float r = 0;
    cr_assert_null(read_f32(&hog, 1 + n, &r, 1));
    cr_expect_eq(r, 8388608.0f);
    raw_close(&other);
    raw_close(&hog);
}

/* The rest of a batch whose client went away is dropped: the session ends at once. */
Test(sched, batch_of_a_gone_client_is_dropped, .init = start_tcp, .fini = stop, .timeout = 300)
{
    raw_session hog;
    open_raw(&hog);
    send_hog(&hog, 2000); /* tens of seconds if it ran to the end */
    raw_send_fence(&hog);
    usleep(200 * 1000);
    raw_abort(&hog);
    struct td_server_info last;
    bool ended = td_test_wait_usage(srv.addr, 0, 0, 3000, &last);
    cr_expect(ended, "3 s after its client left, the session still exists (%llu sessions, "
              "%llu bytes): the batch kept running",
              (unsigned long long)last.sessions, (unsigned long long)last.bytes_in_use);
}

/* SIGTERM ends the server within the drain promise (the fixture's --drain-timeout 2, then
 * 0.5 s for the ended sessions' statuses to go out, then cancel) with a long batch queued. */
Test(sched, sigterm_with_a_long_batch, .init = start_tcp, .timeout = 300)
{
    raw_session hog;
    open_raw(&hog);
    send_hog(&hog, 2000);
    raw_send_fence(&hog);
    usleep(200 * 1000);
    double t0 = td_test_now_ms();
    int rc = td_test_server_stop(&srv);
    double took = td_test_now_ms() - t0;
    cr_expect_eq(rc, 0, "tensord exited with status %d", rc);
    /* The promise is 2000 ms of drain, 500 ms of linger, then cancel; allow 2 s more for the op in flight,
     * cancelling and exit (a ThreadSanitizer server needs about 1.3 s of it). Before time
     * slices the whole batch ran first: 15 s, then SIGKILL. */
    cr_expect(took < 4500, "SIGTERM took %.0f ms with a long batch queued", took);
    raw_abort(&hog);
}

/* ---- graph runs and the engine's id range (item 5) ---- */

#define ENGINE_ID (UINT64_C(1) << 62) /* the first id above the client range */

/* Define y = neg(neg(x)), x f32[4] (raw_session.h's chain graph); its id into id[]. */
static void define(raw_session *s, raw_graph *r, uint8_t id[32])
{
    raw_graph_init(r, 2, TD_OP_NEG, 4);
    char msg[1024];
    cr_assert_eq(raw_define_graph(s, &r->g, id, msg, sizeof msg), 0, "%s", msg);
}

/* Run the graph on input `in` into `out`; then fence. Returns 1 and the message when a
 * Failure for the run came back, else 0. */
static int run(raw_session *s, const uint8_t *id, uint64_t in, uint64_t out, char *msg,
               size_t len)
{
    uint64_t ins[1] = {in}, outs[1] = {out};
    Tensord__V1__GraphRun gr = TENSORD__V1__GRAPH_RUN__INIT;
    gr.graph_id.data = (uint8_t *)(uintptr_t)id;
    gr.graph_id.len = 32;
    gr.n_inputs = 1;
    gr.inputs = ins;
    gr.n_outputs = 1;
    gr.outputs = outs;
    Tensord__V1__ClientMessage cm = TENSORD__V1__CLIENT_MESSAGE__INIT;
    cm.body_case = TENSORD__V1__CLIENT_MESSAGE__BODY_GRAPH_RUN;
    cm.graph_run = &gr;
    uint64_t seq;
    cr_assert(raw_send(s, &cm, NULL, 0, &seq));
    uint64_t fence = raw_send_fence(s);
    int failed = 0;
    msg[0] = '\0';
    for (;;) {
        raw_msg m;
        int rc = raw_recv(s, &m, 10000);
        cr_assert_eq(rc, 1, "no reply to the run (rc %d)", rc);
        if (m.seq == seq && m.kind == TENSORD__V1__SERVER_MESSAGE__BODY_FAILURE) {
            failed = 1;
            snprintf(msg, len, "%s", m.message);
        }
        bool end = m.seq == fence;
        raw_msg_fini(&m);
        if (end) return failed;
    }
}

static void expect_value(raw_session *s, uint64_t id, float want)
{
    float v[4] = {0};
    const char *fail = read_f32(s, id, v, 4);
    cr_assert_null(fail, "reading %llu: %s", (unsigned long long)id, fail);
    for (int i = 0; i < 4; i++)
        cr_expect_eq(v[i], want, "tensor %llu[%d] = %g, want %g", (unsigned long long)id, i,
                     v[i], want);
}

Test(sched, graph_output_ids, .init = start_tcp, .fini = stop, .timeout = 300)
{
    raw_session s;
    open_raw(&s);
    raw_graph r;
    uint8_t id[32];
    define(&s, &r, id);
    td__op x = raw_op_full(1, TD_F32, 1, (int64_t[]){4}, 1.0);
    cr_assert_neq(raw_send_ops(&s, &x, 1), 0);
    char msg[1024];

    /* An output id in the engine's range is refused, and leaves nothing behind that
     * breaks the next valid run. */
    cr_expect_eq(run(&s, id, 1, ENGINE_ID, msg, sizeof msg), 1, "engine id accepted");
    cr_expect(strstr(msg, "outside") != NULL, "message: %s", msg);
    cr_expect_eq(run(&s, id, 1, 10, msg, sizeof msg), 0, "valid run failed: %s", msg);
    expect_value(&s, 10, 1.0f);

    /* A run of an undefined graph with engine-range outputs leaves nothing there either
     * (the breaker's case: such ids were poisoned and broke the next run). */
    uint8_t undefined[32];
    memset(undefined, 1, sizeof undefined);
    cr_expect_eq(run(&s, undefined, 1, ENGINE_ID, msg, sizeof msg), 1);
    cr_expect(strstr(msg, "not defined") != NULL, "message: %s", msg);
    cr_expect_eq(run(&s, id, 1, 14, msg, sizeof msg), 0, "valid run failed: %s", msg);
    expect_value(&s, 14, 1.0f);

    /* A plain op cannot create an id in the engine's range... */
    td__op bad = raw_op_full(ENGINE_ID + 1, TD_F32, 1, (int64_t[]){4}, -42.0);
    uint64_t seq = raw_send_ops(&s, &bad, 1);
    cr_expect_eq(reply_to(&s, seq, msg, sizeof msg), 1, "a plain op created an engine id");
    cr_expect(strstr(msg, "outside") != NULL, "message: %s", msg);
    /* ...so a later run computes its output from its own temporaries. */
    cr_expect_eq(run(&s, id, 1, 11, msg, sizeof msg), 0, "run failed: %s", msg);
    expect_value(&s, 11, 1.0f);

    /* A run onto a live id fails and leaves that tensor as it was. */
    td__op live = raw_op_full(12, TD_F32, 1, (int64_t[]){4}, -42.0);
    cr_assert_neq(raw_send_ops(&s, &live, 1), 0);
    cr_expect_eq(run(&s, id, 1, 12, msg, sizeof msg), 1, "a run onto a live id succeeded");
    cr_expect(strstr(msg, "already in use") != NULL, "message: %s", msg);
    expect_value(&s, 12, -42.0f);
    expect_value(&s, 1, 1.0f);
    /* and the graph still runs after all that */
    cr_expect_eq(run(&s, id, 1, 13, msg, sizeof msg), 0, "run failed: %s", msg);
    expect_value(&s, 13, 1.0f);
    raw_graph_fini(&r);
    raw_close(&s);
}

/* One big op (the breaker's case: an i64 matmul holding the device for every session for
 * 17 s and more) is run in pieces: another session's small op is answered while it runs,
 * and when its client goes the op stops between pieces. i64 [1536,1536] x [1536,1536] is
 * 3.6 G multiply-adds in the plain integer kernel: seconds here, minutes under a
 * sanitizer; the test never waits for it. */
static void big_op_case(uint32_t dtype, int ra, const int64_t *da, int rb, const int64_t *db)
{
    raw_session hog, other;
    open_raw(&hog);
    td__op ops[3] = {raw_op_full(1, dtype, ra, da, 1.0), raw_op_full(2, dtype, rb, db, 1.0),
                     {.opcode = TD_OP_MATMUL, .n_inputs = 2, .inputs = {1, 2}, .output = 3}};
    cr_assert_neq(raw_send_ops(&hog, ops, 3), 0);
    raw_send_fence(&hog);
    usleep(300 * 1000); /* the matmul is running */
    double t0 = td_test_now_ms();
    open_raw(&other);
    td__op small = raw_op_full(7, TD_F32, 1, (int64_t[]){4}, 3.0);
    cr_assert_neq(raw_send_ops(&other, &small, 1), 0);
    float v[4] = {0};
    const char *fail = read_f32(&other, 7, v, 4);
    cr_assert_null(fail, "read failed: %s", fail);
    fprintf(stderr, "sched: beside one big matmul, a new session's open and small op took "
            "%.1f ms\n", td_test_now_ms() - t0);
    raw_msg m;
    cr_assert_eq(raw_recv(&hog, &m, 0), -1, "the big matmul finished first: the device was held "
                 "or the op is too small for this machine");
    raw_close(&other);
    raw_abort(&hog);
    struct td_server_info last;
    cr_expect(td_test_wait_usage(srv.addr, 0, 0, 5000, &last),
              "5 s after its client left, the big op's session still exists (%llu sessions, "
              "%llu bytes): the op ran on", (unsigned long long)last.sessions,
              (unsigned long long)last.bytes_in_use);
}

/* Rows: i64 [1536,1536]^2, 3.6 G multiply-adds. */
Test(sched, one_big_op_does_not_hold_the_device, .init = start_tcp, .fini = stop, .timeout = 300)
{
    big_op_case(TD_I64, 2, (int64_t[]){1536, 1536}, 2, (int64_t[]){1536, 1536});
}

/* Matrices of a batch whose leading dim is 1 (breaker round 2: never split, 4 s held):
 * i32 [1,64,512,512] x [512,512], 2^33 multiply-adds. */
Test(sched, one_big_batched_op_does_not_hold_the_device, .init = start_tcp, .fini = stop,
     .timeout = 300)
{
    big_op_case(TD_I32, 4, (int64_t[]){1, 64, 512, 512}, 2, (int64_t[]){512, 512});
}

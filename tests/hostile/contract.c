/* hostile/contract.c — the session contract the server enforces (proto/tensord/v1/
 * tensord.proto, header comment): seq numbers go up by exactly one per client message
 * (else a Failure naming both seqs, then the call ends with INVALID_ARGUMENT); a write
 * chunk holds at most TD_CHUNK_BYTES; only writes carry a payload (else a Failure and the
 * session goes on). Raw messages (tests/e2e/raw_session.h) bypass libtensord's checks. */
#include "engine/op.h"
#include "raw_session.h"
#include "server_fixture.h"
#include "suite_fixture.h"
#include "tensord.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Collect replies until FenceDone for `fence` (or the end of the call). Returns the number
 * of Failures seen for `bad` (message of the last in msg); *ended tells whether the call
 * ended; *fence_done whether FenceDone for `bad` itself came (a fence that should not run). */
static int collect(raw_session *s, uint64_t bad, uint64_t fence, char *msg, size_t msglen,
                   bool *ended, bool *bad_fence_done)
{
    int failures = 0;
    *ended = false;
    if (bad_fence_done) *bad_fence_done = false;
    msg[0] = '\0';
    for (;;) {
        raw_msg m;
        int rc = raw_recv(s, &m, 10000);
        cr_assert_neq(rc, -1, "no reply within 10 s");
        cr_assert_neq(rc, -2, "undecodable reply");
        if (rc == 0) {
            *ended = true;
            return failures;
        }
        if (m.kind == TENSORD__V1__SERVER_MESSAGE__BODY_FAILURE) {
            cr_expect_eq(m.seq, bad, "Failure for seq %llu, expected one for %llu: %s",
                         (unsigned long long)m.seq, (unsigned long long)bad, m.message);
            cr_expect_eq(m.status, (uint32_t)TD_EPROTO, "status %u: %s", m.status, m.message);
            snprintf(msg, msglen, "%s", m.message);
            cr_log_info("Failure seq %llu: %s", (unsigned long long)m.seq, m.message);
            failures++;
        } else if (m.kind == TENSORD__V1__SERVER_MESSAGE__BODY_FENCE && m.seq == bad &&
                   bad_fence_done != NULL) {
            *bad_fence_done = true;
        } else if (m.kind == TENSORD__V1__SERVER_MESSAGE__BODY_READ && m.seq == bad) {
            cr_expect_fail("the refused read seq %llu was answered with data",
                           (unsigned long long)bad);
        } else if (m.kind == TENSORD__V1__SERVER_MESSAGE__BODY_FENCE && m.seq == fence) {
            raw_msg_fini(&m);
            return failures;
        }
        raw_msg_fini(&m);
    }
}

/* FULL u8 [n] = v as tensor `id`; read `len` bytes at `off` back into out. */
static void make_u8(raw_session *s, uint64_t id, int64_t n, double v)
{
    td__op op = raw_op_full(id, TD_U8, 1, (int64_t[]){n}, v);
    cr_assert_neq(raw_send_ops(s, &op, 1), 0u);
}

static void read_back(raw_session *s, uint64_t id, uint64_t off, uint8_t *out, size_t len)
{
    size_t got = raw_read_back(s, id, off, out, len, 10000);
    cr_assert_eq(got, len);
}

static void expect_new_session_works(void)
{
    char uri[700];
    td_test_server_uri(&srv, "cpu", uri, sizeof uri);
    td_context *ctx = NULL;
    cr_assert_eq(td_connect(uri, NULL, &ctx), TD_OK, "%s", td_connect_error());
    td_tensor *t = td_full(ctx, TD_F32, 1, (int64_t[]){4}, 3.0);
    float v[4] = {0};
    cr_assert_eq(td_read(t, v, sizeof v), TD_OK, "%s", td_last_error(ctx));
    cr_expect_eq(v[3], 3.0f);
    td_release(t);
    td_close(ctx);
}

/* A message with seq `bad_seq` (via s->next_seq) ends the session as the contract says. */
static void expect_seq_violation(raw_session *s, uint64_t bad_seq, uint64_t expected)
{
    s->next_seq = bad_seq;
    uint64_t seq = raw_send_fence(s);
    cr_assert_eq(seq, bad_seq);
    /* Whatever follows must not be executed; the send may fail once the call is over. */
    (void)raw_send_fence(s);
    char msg[1024];
    bool ended = false;
    int failures = collect(s, bad_seq, 0, msg, sizeof msg, &ended, NULL);
    cr_assert(ended, "the session stayed open after seq %llu (expected %llu)",
              (unsigned long long)bad_seq, (unsigned long long)expected);
    cr_expect_eq(failures, 1, "%d Failures for the bad seq", failures);
    char want[64], got[64];
    snprintf(want, sizeof want, "expected seq %llu", (unsigned long long)expected);
    snprintf(got, sizeof got, "seq %llu", (unsigned long long)bad_seq);
    cr_expect(strstr(msg, want) != NULL && strstr(msg, got) != NULL,
              "Failure does not name the expected (%s) and received (%s) seq: %s", want, got,
              msg);
    cr_expect_eq(s->status, GRPC_STATUS_INVALID_ARGUMENT, "status %d: %s", (int)s->status,
                 raw_details(s));
    cr_expect(strstr(raw_details(s), want) != NULL, "status details: %s", raw_details(s));
    raw_close(s);
    expect_new_session_works();
}

Test(contract, replayed_seq_ends_session, .init = start_tcp, .fini = stop, .timeout = 60)
{
    raw_session s;
    open_raw(&s);
    uint64_t f = raw_send_fence(&s); /* seq 2 */
    char msg[1024];
    bool ended;
    cr_assert_eq(collect(&s, 0, f, msg, sizeof msg, &ended, NULL), 0);
    cr_assert(!ended);
    expect_seq_violation(&s, f, f + 1); /* seq 2 again */
}

Test(contract, skipped_seq_ends_session, .init = start_tcp, .fini = stop, .timeout = 60)
{
    raw_session s;
    open_raw(&s);
    expect_seq_violation(&s, s.next_seq + 5, s.next_seq);
}

Test(contract, seq_zero_after_open_ends_session, .init = start_tcp, .fini = stop, .timeout = 60)
{
    raw_session s;
    open_raw(&s);
    make_u8(&s, 1, 16, 1.0);
    expect_seq_violation(&s, 0, s.next_seq);
}

Test(contract, oversize_write_chunk, .init = start_tcp, .fini = stop, .timeout = 60)
{
    raw_session s;
    open_raw(&s);
    const size_t n = (size_t)TD_CHUNK_BYTES + 1;
    make_u8(&s, 7, (int64_t)n, 5.0);
    uint8_t *data = malloc(n);
    cr_assert_not_null(data);
    memset(data, 9, n);
    uint64_t bad = raw_send_write(&s, 7, 0, data, n);
    cr_assert_neq(bad, 0u);
    uint64_t f = raw_send_fence(&s);
    char msg[1024];
    bool ended;
    cr_assert_eq(collect(&s, bad, f, msg, sizeof msg, &ended, NULL), 1);
    cr_assert(!ended, "an oversize chunk ended the session: %s", raw_details(&s));
    cr_expect(strstr(msg, "at most") != NULL, "message: %s", msg);
    /* Nothing was written; a chunk of exactly TD_CHUNK_BYTES is fine. */
    uint8_t head[4];
    read_back(&s, 7, 0, head, sizeof head);
    cr_expect_eq(head[0], 5);
    uint64_t ok = raw_send_write(&s, 7, 1, data, TD_CHUNK_BYTES);
    cr_assert_neq(ok, 0u);
    f = raw_send_fence(&s);
    cr_assert_eq(collect(&s, ok, f, msg, sizeof msg, &ended, NULL), 0, "%s", msg);
    read_back(&s, 7, 0, head, sizeof head);
    cr_expect(head[0] == 5 && head[1] == 9 && head[3] == 9, "got %u %u %u", head[0], head[1],
              head[3]);
    free(data);
    raw_close(&s);
}

Test(contract, payload_on_non_write, .init = start_tcp, .fini = stop, .timeout = 60)
{
    raw_session s;
    open_raw(&s);
    make_u8(&s, 3, 8, 4.0);
    static const uint8_t junk[32] = {1, 2, 3};
    /* A fence with a payload: refused, and not executed (no FenceDone for it). */
    Tensord__V1__Fence fe = TENSORD__V1__FENCE__INIT;
    Tensord__V1__ClientMessage cm = TENSORD__V1__CLIENT_MESSAGE__INIT;
    cm.body_case = TENSORD__V1__CLIENT_MESSAGE__BODY_FENCE;
    cm.fence = &fe;
    uint64_t bad = 0;
    cr_assert(raw_send(&s, &cm, junk, sizeof junk, &bad));
    uint64_t f = raw_send_fence(&s);
    char msg[1024];
    bool ended, bad_done;
    cr_assert_eq(collect(&s, bad, f, msg, sizeof msg, &ended, &bad_done), 1);
    cr_assert(!ended, "the session ended: %s", raw_details(&s));
    cr_expect(!bad_done, "the fence with a payload was executed");
    cr_expect(strstr(msg, "payload") != NULL, "message: %s", msg);
    /* A read request with a payload: refused too, no ReadChunk. */
    Tensord__V1__ReadRequest rr = TENSORD__V1__READ_REQUEST__INIT;
    rr.tensor = 3;
    rr.nbytes = 8;
    Tensord__V1__ClientMessage cr = TENSORD__V1__CLIENT_MESSAGE__INIT;
    cr.body_case = TENSORD__V1__CLIENT_MESSAGE__BODY_READ;
    cr.read = &rr;
    cr_assert(raw_send(&s, &cr, junk, sizeof junk, &bad));
    f = raw_send_fence(&s);
    cr_assert_eq(collect(&s, bad, f, msg, sizeof msg, &ended, NULL), 1);
    cr_assert(!ended);
    uint8_t v[8];
    read_back(&s, 3, 0, v, sizeof v);
    cr_expect_eq(v[7], 4);
    raw_close(&s);
}

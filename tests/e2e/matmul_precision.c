/* e2e/matmul_precision.c — TF32 is the caller's choice, not the server's.
 *
 * The MATMUL op's "precision" attribute (engine/op.h) is set by td_options.matmul_allow_tf32
 * or td_matmul_ex(..., TD_MATMUL_ALLOW_TF32). Checked here, in-process and against a real
 * tensord:
 *  - a CPU device has no TF32 path, so allowing TF32 changes no bit (local and remote, eager
 *    and graph replay), and full precision can still be asked for per call;
 *  - the attribute travels: a graph with a TF32 matmul gets another id than the same graph
 *    without, and that id is the one a real tensord computes (SHA-256 of the definition
 *    it decoded) for a hand-built matmul with precision = 1, while the full-precision
 *    graph's id is that of a matmul with no attribute; the server accepts the client's
 *    definitions and runs them; only f32 matmuls carry it (an f64 graph's id is the same
 *    with the option on or off);
 *  - bad values are refused: unknown td_matmul_ex flags on the client (TD_EINVAL), and a
 *    precision other than 0 or 1 sent as a raw protocol message by the server (a Failure
 *    with TD_EINVAL naming the op and the value), after which the session still works.
 * On CUDA, tests/unit/backends/conformance.c checks that the attribute does switch cuBLAS
 * to TF32 (results differ from full precision, within the TF32 bound).
 */
#include "engine/op.h"
#include "raw_session.h"
#include "server_fixture.h"
#include "suite_fixture.h"
#include "tensord.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static td_context *connect_to(const char *uri, bool allow_tf32)
{
    td_options o = {.matmul_allow_tf32 = allow_tf32 ? 1 : 0};
    td_context *ctx = NULL;
    td_status st = td_connect(uri, &o, &ctx);
    cr_assert_eq(st, TD_OK, "td_connect(%s): %s", uri, td_connect_error());
    return ctx;
}

/* The two URIs every check runs on: local:cpu and the test server's cpu device. */
static void uris(char remote[600], const char *out[2])
{
    td_test_server_uri(&srv, "cpu", remote, 600);
    out[0] = "local:cpu";
    out[1] = remote;
}

/* Floats in [-1, 1) with all 24 mantissa bits in use (TF32 would round every one). */
static void fill(float *p, int n, uint64_t seed)
{
    uint64_t s = seed;
    for (int i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = (float)((double)(s >> 11) * 0x1p-52 - 1.0);
    }
}

#define BT 2
#define M 33
#define K 70
#define N 21

/* C = A @ B on ctx: mode 0 td_matmul, 1 td_matmul_ex(TF32), 2 td_matmul_ex(0). */
static void matmul_on(td_context *ctx, const float *a, const float *b, int mode, float *c)
{
    td_tensor *ta = td_from_host(ctx, TD_F32, 3, (int64_t[]){BT, M, K}, a);
    td_tensor *tb = td_from_host(ctx, TD_F32, 2, (int64_t[]){K, N}, b);
    td_tensor *tc = mode == 0   ? td_matmul(ta, tb)
                    : mode == 1 ? td_matmul_ex(ta, tb, TD_MATMUL_ALLOW_TF32)
                                : td_matmul_ex(ta, tb, 0);
    cr_assert_not_null(tc, "%s", td_last_error(ctx));
    cr_assert_eq(td_read(tc, c, sizeof(float) * BT * M * N), TD_OK, "%s", td_last_error(ctx));
    td_release(ta);
    td_release(tb);
    td_release(tc);
}

Test(matmul_precision, cpu_ignores_tf32_bit_for_bit, .init = start_tcp, .fini = stop,
     .timeout = 60)
{
    static float a[BT * M * K], b[K * N], want[BT * M * N], got[BT * M * N];
    fill(a, BT * M * K, 1);
    fill(b, K * N, 2);
    char remote[600];
    const char *u[2];
    uris(remote, u);
    td_context *ref = connect_to("local:cpu", false);
    matmul_on(ref, a, b, 0, want);
    td_close(ref);
    /* a real matmul: within f32's dot-product bound of a double reference */
    for (int bt = 0; bt < BT; bt++)
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                double d = 0, s = 0;
                for (int k = 0; k < K; k++) {
                    d += (double)a[(bt * M + i) * K + k] * b[k * N + j];
                    s += fabs((double)a[(bt * M + i) * K + k] * b[k * N + j]);
                }
                float w = want[(bt * M + i) * N + j];
                cr_assert_leq(fabs(w - d), 2.0 * K * 0x1p-24 * s + 1e-30, "[%d,%d,%d]", bt, i, j);
            }
    for (int ui = 0; ui < 2; ui++)
        for (int opt = 0; opt <= 1; opt++) {
            td_context *ctx = connect_to(u[ui], opt);
            for (int mode = 0; mode <= 2; mode++) {
                memset(got, 0xff, sizeof got);
                matmul_on(ctx, a, b, mode, got);
                cr_expect(memcmp(got, want, sizeof got) == 0,
                          "%s, matmul_allow_tf32 = %d, %s: bits differ from full precision", u[ui],
                          opt, mode == 0 ? "td_matmul" : mode == 1 ? "td_matmul_ex(TF32)"
                                                                   : "td_matmul_ex(0)");
            }
            cr_expect_eq(td_fence(ctx), TD_OK, "%s", td_last_error(ctx));
            td_close(ctx);
        }
}

/* Capture y = x @ w (dtype dt) on ctx, with td_matmul or td_matmul_ex(TF32); replay it once
 * and compare with the eager op. Returns the graph's id in id[65] and its info. */
static void graph_of(td_context *ctx, const char *uri, td_dtype dt, bool ex_tf32, char id[65],
                     td_graph_info *gi)
{
    const size_t es = td_dtype_size(dt);
    float xf[M * K], wf[K * N];
    double xd[M * K], wd[K * N];
    fill(xf, M * K, 3);
    fill(wf, K * N, 4);
    for (int i = 0; i < M * K; i++) xd[i] = xf[i];
    for (int i = 0; i < K * N; i++) wd[i] = wf[i];
    const void *xs = dt == TD_F32 ? (const void *)xf : (const void *)xd;
    const void *ws = dt == TD_F32 ? (const void *)wf : (const void *)wd;
    cr_assert_eq(td_graph_begin(ctx), TD_OK, "%s", td_last_error(ctx));
    td_tensor *px = td_graph_input(ctx, "x", dt, 2, (int64_t[]){M, K});
    td_tensor *pw = td_graph_input(ctx, "w", dt, 2, (int64_t[]){K, N});
    td_tensor *py = ex_tf32 ? td_matmul_ex(px, pw, TD_MATMUL_ALLOW_TF32) : td_matmul(px, pw);
    cr_assert_not_null(py, "%s", td_last_error(ctx));
    cr_assert_eq(td_graph_output(ctx, "y", py), TD_OK, "%s", td_last_error(ctx));
    td_graph *g = NULL;
    cr_assert_eq(td_graph_end(ctx, &g), TD_OK, "%s", td_last_error(ctx));
    td_release(px);
    td_release(pw);
    td_release(py);
    td_tensor *x = td_from_host(ctx, dt, 2, (int64_t[]){M, K}, xs);
    td_tensor *w = td_from_host(ctx, dt, 2, (int64_t[]){K, N}, ws);
    td_tensor *y = NULL;
    cr_assert_eq(td_graph_run(g, 2, NULL, (td_tensor *[]){x, w}, 1, NULL, &y), TD_OK, "%s: %s",
                 uri, td_last_error(ctx));
    td_tensor *e = td_matmul_ex(x, w, 0);
    static double yr[M * N], er[M * N];
    cr_assert_eq(td_read(y, yr, es * M * N), TD_OK, "%s: %s", uri, td_last_error(ctx));
    cr_assert_eq(td_read(e, er, es * M * N), TD_OK, "%s: %s", uri, td_last_error(ctx));
    cr_expect(memcmp(yr, er, es * M * N) == 0, "%s: %s graph (%s) differs from eager", uri,
              td_dtype_name(dt), ex_tf32 ? "td_matmul_ex(TF32)" : "td_matmul");
    td_graph_get_info(g, gi);
    memcpy(id, gi->id, 65);
    td_release(x);
    td_release(w);
    td_release(y);
    td_release(e);
    td_graph_destroy(g);
}

/* The id the server computes for the definition a client captures in graph_of (inputs x
 * [M,K] and w [K,N] f32, y = matmul(x, w), with iattrs {precision} when precision >= 0):
 * sent under a wrong id, the server answers with a Failure naming the definition's SHA-256. */
static void server_id_of(raw_session *s, int64_t precision, char hex[65])
{
    Tensord__V1__GraphInput in[2] = {TENSORD__V1__GRAPH_INPUT__INIT,
                                     TENSORD__V1__GRAPH_INPUT__INIT};
    Tensord__V1__GraphInput *inp[2] = {&in[0], &in[1]};
    int64_t dx[2] = {M, K}, dw[2] = {K, N};
    in[0].name = "x";
    in[0].dtype = TD_F32;
    in[0].n_dims = 2;
    in[0].dims = dx;
    in[1].name = "w";
    in[1].dtype = TD_F32;
    in[1].n_dims = 2;
    in[1].dims = dw;
    uint64_t args[2] = {0, 1};
    Tensord__V1__Op op = TENSORD__V1__OP__INIT, *opp = &op;
    op.opcode = TD_OP_MATMUL;
    op.n_inputs = 2;
    op.inputs = args;
    if (precision >= 0) {
        op.n_iattrs = 1;
        op.iattrs = &precision;
    }
    Tensord__V1__GraphOutput out = TENSORD__V1__GRAPH_OUTPUT__INIT, *outp = &out;
    out.name = "y";
    out.value = 2;
    Tensord__V1__Graph g = TENSORD__V1__GRAPH__INIT;
    g.n_inputs = 2;
    g.inputs = inp;
    g.n_ops = 1;
    g.ops = &opp;
    g.n_outputs = 1;
    g.outputs = &outp;
    uint8_t zero[32] = {0};
    Tensord__V1__GraphDefine gd = TENSORD__V1__GRAPH_DEFINE__INIT;
    gd.graph_id.data = zero;
    gd.graph_id.len = sizeof zero;
    gd.graph = &g;
    Tensord__V1__ClientMessage cm = TENSORD__V1__CLIENT_MESSAGE__INIT;
    cm.body_case = TENSORD__V1__CLIENT_MESSAGE__BODY_GRAPH_DEFINE;
    cm.graph_define = &gd;
    uint64_t seq = 0;
    cr_assert(raw_send(s, &cm, NULL, 0, &seq), "send failed");
    for (;;) {
        raw_msg m;
        cr_assert_eq(raw_recv(s, &m, 10000), 1, "%s", raw_details(s));
        bool mine = m.seq == seq;
        if (mine) {
            cr_assert_eq(m.kind, TENSORD__V1__SERVER_MESSAGE__BODY_FAILURE,
                         "a definition under id 0 was accepted");
            const char *p = strstr(m.message, "SHA-256 ");
            cr_assert(p != NULL && strlen(p + 8) >= 64, "%s", m.message);
            memcpy(hex, p + 8, 64);
            hex[64] = '\0';
        }
        raw_msg_fini(&m);
        if (mine) break;
    }
}

Test(matmul_precision, graphs_carry_the_attribute, .init = start_tcp, .fini = stop,
     .timeout = 60)
{
    char remote[600];
    const char *u[2];
    uris(remote, u);
    for (int ui = 0; ui < 2; ui++) {
        char full[65], tf32[65], opt[65], f64_off[65], f64_on[65];
        td_graph_info gi;
        td_context *c0 = connect_to(u[ui], false), *c1 = connect_to(u[ui], true);
        graph_of(c0, u[ui], TD_F32, false, full, &gi);
        graph_of(c0, u[ui], TD_F32, true, tf32, &gi);
        if (ui == 1)
            cr_expect_eq(gi.definitions_sent, 1,
                         "the server took the TF32 graph's definition (its id checks out)");
        graph_of(c1, u[ui], TD_F32, false, opt, &gi);
        cr_expect(gi.runs == 1, "%s: the option's graph ran", u[ui]);
        graph_of(c0, u[ui], TD_F64, false, f64_off, &gi);
        graph_of(c1, u[ui], TD_F64, true, f64_on, &gi);
        cr_expect(strcmp(full, tf32) != 0, "%s: the precision attribute is not in the graph",
                  u[ui]);
        cr_expect(strcmp(tf32, opt) == 0,
                  "%s: matmul_allow_tf32 records the same op as td_matmul_ex(TF32)", u[ui]);
        cr_expect(strcmp(f64_off, f64_on) == 0, "%s: an f64 matmul must not carry the attribute",
                  u[ui]);
        if (ui == 1) {
            /* exactly {precision = 1} for TF32, and no attribute at all for full precision,
             * as a real tensord decodes them */
            raw_session s;
            cr_assert(raw_open(&s, srv.addr, TD_PROTOCOL_MIN, TD_PROTOCOL_MAX, "cpu"), "%s",
                      raw_details(&s));
            char want_tf32[65], want_full[65];
            server_id_of(&s, 1, want_tf32);
            server_id_of(&s, -1, want_full);
            raw_close(&s);
            cr_expect(strcmp(tf32, want_tf32) == 0, "TF32 graph id %s, server computes %s for "
                      "matmul {precision = 1}", tf32, want_tf32);
            cr_expect(strcmp(full, want_full) == 0, "full graph id %s, server computes %s for "
                      "a matmul without attributes", full, want_full);
        }
        cr_expect_eq(td_fence(c0), TD_OK, "%s", td_last_error(c0));
        cr_expect_eq(td_fence(c1), TD_OK, "%s", td_last_error(c1));
        td_close(c0);
        td_close(c1);
    }
}

Test(matmul_precision, unknown_flags_are_refused, .init = start_tcp, .fini = stop, .timeout = 60)
{
    char remote[600];
    const char *u[2];
    uris(remote, u);
    for (int ui = 0; ui < 2; ui++) {
        td_context *ctx = connect_to(u[ui], false);
        td_tensor *a = td_full(ctx, TD_F32, 2, (int64_t[]){2, 3}, 1.0);
        td_tensor *b = td_full(ctx, TD_F32, 2, (int64_t[]){3, 4}, 1.0);
        cr_assert_null(td_matmul_ex(a, b, 0x6));
        cr_expect_eq(td_last_status(ctx), TD_EINVAL);
        cr_expect(strstr(td_last_error(ctx), "td_matmul_ex: unknown flags 0x6"), "%s",
                  td_last_error(ctx));
        cr_assert_null(td_relu(td_matmul_ex(a, b, 1u << 31)), "NULL propagates");
        td_tensor *c = td_matmul_ex(a, b, TD_MATMUL_ALLOW_TF32);
        float v[8];
        cr_assert_eq(td_read(c, v, sizeof v), TD_OK, "%s", td_last_error(ctx));
        cr_expect_eq(v[7], 3.0f);
        td_close(ctx);
    }
}

/* Read `n` bytes of tensor id over a raw session; the session must not fail. */
static void raw_read_all(raw_session *s, uint64_t id, void *dst, size_t n)
{
    uint64_t rseq = raw_send_read(s, id, 0, n);
    cr_assert_neq(rseq, 0u);
    size_t got = 0;
    for (;;) {
        raw_msg m;
        cr_assert_eq(raw_recv(s, &m, 10000), 1, "%s", raw_details(s));
        cr_assert_neq(m.kind, TENSORD__V1__SERVER_MESSAGE__BODY_FAILURE, "%s", m.message);
        bool last = false;
        if (m.kind == TENSORD__V1__SERVER_MESSAGE__BODY_READ && m.seq == rseq) {
            cr_assert_leq(got + m.payload_len, n);
            memcpy((char *)dst + got, m.payload, m.payload_len);
            got += m.payload_len;
            last = m.last;
        }
        raw_msg_fini(&m);
        if (last) break;
    }
    cr_assert_eq(got, n);
}

/* Send one op; expect a Failure for it before the fence answers. */
static void expect_failure(raw_session *s, const td__op *op, uint32_t *status, char *msg,
                           size_t msglen)
{
    uint64_t seq = raw_send_ops(s, op, 1);
    cr_assert_neq(seq, 0u);
    uint64_t fence = raw_send_fence(s);
    bool seen = false;
    for (;;) {
        raw_msg m;
        cr_assert_eq(raw_recv(s, &m, 10000), 1, "%s", raw_details(s));
        if (m.kind == TENSORD__V1__SERVER_MESSAGE__BODY_FAILURE && m.seq == seq) {
            *status = m.status;
            snprintf(msg, msglen, "%s", m.message);
            seen = true;
        }
        bool done = m.kind == TENSORD__V1__SERVER_MESSAGE__BODY_FENCE && m.seq == fence;
        raw_msg_fini(&m);
        if (done) break;
    }
    cr_assert(seen, "no Failure for the bad matmul");
}

Test(matmul_precision, server_refuses_bad_precision, .init = start_tcp, .fini = stop,
     .timeout = 60)
{
    raw_session s;
    cr_assert(raw_open(&s, srv.addr, TD_PROTOCOL_MIN, TD_PROTOCOL_MAX, "cpu"), "%s",
              raw_details(&s));
    /* a = 1.5 [2,3], b = 2 [3,4]: every element of a @ b is 3 * 1.5 * 2 = 9 */
    td__op ops[2] = {raw_op_full(1, TD_F32, 2, (int64_t[]){2, 3}, 1.5),
                     raw_op_full(2, TD_F32, 2, (int64_t[]){3, 4}, 2.0)};
    cr_assert_neq(raw_send_ops(&s, ops, 2), 0u);
    const int64_t bad[] = {2, -1, 1LL << 40};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        td__op mm = raw_op_binary(TD_OP_MATMUL, 10 + i, 1, 2);
        mm.n_iattrs = 1;
        mm.iattrs[0] = bad[i];
        uint32_t st = 0;
        char msg[1024], want[96];
        expect_failure(&s, &mm, &st, msg, sizeof msg);
        cr_expect_eq(st, (uint32_t)TD_EINVAL, "status %u: %s", st, msg);
        snprintf(want, sizeof want, "(matmul): precision %lld is not 0", (long long)bad[i]);
        cr_expect(strstr(msg, want), "message does not name the op and value: '%s'", msg);
    }
    td__op two = raw_op_binary(TD_OP_MATMUL, 20, 1, 2);
    two.n_iattrs = 2;
    two.iattrs[0] = 1;
    uint32_t st = 0;
    char msg[1024];
    expect_failure(&s, &two, &st, msg, sizeof msg);
    cr_expect_eq(st, (uint32_t)TD_EINVAL, "status %u: %s", st, msg);
    cr_expect(strstr(msg, "(matmul): expects at most 1 attribute (precision), got 2"), "%s", msg);
    /* 0 and 1 are accepted; the CPU computes both in full precision */
    for (int64_t p = 0; p <= 1; p++) {
        td__op mm = raw_op_binary(TD_OP_MATMUL, 30 + (uint64_t)p, 1, 2);
        mm.n_iattrs = 1;
        mm.iattrs[0] = p;
        cr_assert_neq(raw_send_ops(&s, &mm, 1), 0u);
        float v[8];
        raw_read_all(&s, 30 + (uint64_t)p, v, sizeof v);
        for (int i = 0; i < 8; i++)
            cr_expect_eq(v[i], 9.0f, "precision %lld [%d]", (long long)p, i);
    }
    raw_close(&s);
}

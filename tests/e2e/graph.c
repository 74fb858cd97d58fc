/* e2e/graph.c — graph capture and replay (td_graph_*), in-process and against a real
 * tensord: replay gives the bits of eager execution, bad bindings and released captured
 * tensors get clear errors, the server's graph cache is bounded and a missing graph is
 * re-sent transparently, and hostile definitions sent as raw protocol messages are
 * rejected with a message while the server keeps serving. */
#include "raw_session.h"
#include "server_fixture.h"
#include "suite_fixture.h"
#include "tensord.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void start_small_cache(void)
{
    char err[600];
    const char *args[] = {"--graph-cache", "2", NULL};
    cr_assert(td_test_server_start(&srv, false, args, err, sizeof err), "%s", err);
}

static td_context *connect_to(const char *uri)
{
    td_context *ctx = NULL;
    td_status st = td_connect(uri, NULL, &ctx);
    cr_assert_eq(st, TD_OK, "td_connect(%s): %s", uri, td_connect_error());
    return ctx;
}

#define B 8
#define IN 16
#define OUT 4

/* The step both modes compute: y = relu(x @ w + b) * 0.5, s = sum(softmax(y)) ;
 * w_new = w - 0.01 * (x^T @ y) (weights in, new weights out). */
static void step_eager(td_tensor *x, td_tensor *w, td_tensor *b, td_tensor **y, td_tensor **s,
                       td_tensor **w_new)
{
    td_tensor *mm = td_matmul(x, w);
    td_tensor *pre = td_add(mm, b);
    td_tensor *r = td_relu(pre);
    *y = td_mul_scalar(r, 0.5);
    td_tensor *sm = td_softmax(*y, 1);
    *s = td_sum(sm, 0, NULL, false);
    td_tensor *xt = td_transpose(x);
    td_tensor *g = td_matmul(xt, *y);
    td_tensor *gs = td_mul_scalar(g, 0.01);
    *w_new = td_sub(w, gs);
    td_release(mm);
    td_release(pre);
    td_release(r);
    td_release(sm);
    td_release(xt);
    td_release(g);
    td_release(gs);
}

static void fill(float *p, int n, int seed)
{
    for (int i = 0; i < n; i++) p[i] = (float)((i * 37 + seed * 11) % 29 - 14) / 7.0f;
}

/* Run three steps eagerly and by replay on `uri`; every output must match bit for bit. */
static void replay_matches_eager(const char *uri)
{
    td_context *ctx = connect_to(uri);
    float xd[B * IN], wd[IN * OUT], bd[OUT];
    fill(wd, IN * OUT, 1);
    fill(bd, OUT, 2);
    td_tensor *b = td_from_host(ctx, TD_F32, 1, (int64_t[]){OUT}, bd); /* captured constant */
    td_tensor *we = td_from_host(ctx, TD_F32, 2, (int64_t[]){IN, OUT}, wd);
    td_tensor *wg = td_from_host(ctx, TD_F32, 2, (int64_t[]){IN, OUT}, wd);
    cr_assert(b && we && wg, "%s", td_last_error(ctx));

    cr_assert_eq(td_graph_begin(ctx), TD_OK, "%s", td_last_error(ctx));
    td_tensor *px = td_graph_input(ctx, "x", TD_F32, 2, (int64_t[]){B, IN});
    td_tensor *pw = td_graph_input(ctx, "w", TD_F32, 2, (int64_t[]){IN, OUT});
    cr_assert(px && pw, "%s", td_last_error(ctx));
    td_tensor *py, *ps, *pwn;
    step_eager(px, pw, b, &py, &ps, &pwn);
    cr_assert(py && ps && pwn, "capture: %s", td_last_error(ctx));
    cr_assert_eq(td_read(py, xd, sizeof(float)), TD_EINVAL, "reading a placeholder must fail");
    cr_assert_eq(td_graph_output(ctx, "y", py), TD_OK, "%s", td_last_error(ctx));
    cr_assert_eq(td_graph_output(ctx, "s", ps), TD_OK, "%s", td_last_error(ctx));
    cr_assert_eq(td_graph_output(ctx, "w_new", pwn), TD_OK, "%s", td_last_error(ctx));
    cr_assert_eq(td_graph_output(ctx, "w_new", pwn), TD_EINVAL, "duplicate output name");
    td_graph *graph = NULL;
    cr_assert_eq(td_graph_end(ctx, &graph), TD_OK, "%s", td_last_error(ctx));
    td_tensor *ph[] = {px, pw, py, ps, pwn};
    for (int i = 0; i < 5; i++) td_release(ph[i]);
    td_graph_info gi;
    td_graph_get_info(graph, &gi);
    cr_expect_eq(gi.n_inputs, 2);
    cr_expect_eq(gi.n_outputs, 3);
    cr_expect_eq(gi.n_captured, 1, "b is captured by reference");
    cr_expect_eq(strlen(gi.id), 64);

    for (int step = 0; step < 3; step++) {
        fill(xd, B * IN, 10 + step);
        td_tensor *x = td_from_host(ctx, TD_F32, 2, (int64_t[]){B, IN}, xd);
        td_tensor *ey, *es, *ewn;
        step_eager(x, we, b, &ey, &es, &ewn);
        /* outputs by name, in a different order than declared */
        const char *names[] = {"w_new", "y", "s"};
        td_tensor *outs[3] = {NULL};
        td_status st = td_graph_run(graph, 2, (const char *[]){"w", "x"},
                                    (td_tensor *[]){wg, x}, 3, names, outs);
        cr_assert_eq(st, TD_OK, "%s: run %d: %s", uri, step, td_last_error(ctx));
        float a[B * OUT], c[B * OUT], wa[IN * OUT], wc[IN * OUT], sa, sc;
        cr_assert_eq(td_read(ey, a, sizeof a), TD_OK, "%s", td_last_error(ctx));
        cr_assert_eq(td_read(outs[1], c, sizeof c), TD_OK, "%s", td_last_error(ctx));
        cr_assert_eq(td_read(es, &sa, sizeof sa), TD_OK);
        cr_assert_eq(td_read(outs[2], &sc, sizeof sc), TD_OK);
        cr_assert_eq(td_read(ewn, wa, sizeof wa), TD_OK);
        cr_assert_eq(td_read(outs[0], wc, sizeof wc), TD_OK);
        cr_expect(memcmp(a, c, sizeof a) == 0, "%s step %d: y differs", uri, step);
        cr_expect(memcmp(&sa, &sc, sizeof sa) == 0, "%s step %d: s differs", uri, step);
        cr_expect(memcmp(wa, wc, sizeof wa) == 0, "%s step %d: w_new differs", uri, step);
        /* outputs become the next step's weights */
        td_release(we);
        td_release(wg);
        we = ewn;
        wg = outs[0];
        td_release(x);
        td_release(ey);
        td_release(es);
        td_release(outs[1]);
        td_release(outs[2]);
    }
    td_graph_get_info(graph, &gi);
    cr_expect_eq(gi.runs, 3);
    cr_expect_eq(td_fence(ctx), TD_OK, "%s", td_last_error(ctx));

    /* wrong shape and wrong dtype bindings: clear errors at the call */
    td_tensor *bad = td_full(ctx, TD_F32, 2, (int64_t[]){B + 1, IN}, 1.0);
    td_tensor *badt = td_full(ctx, TD_F64, 2, (int64_t[]){B, IN}, 1.0);
    td_tensor *outs[3];
    cr_expect_eq(td_graph_run(graph, 2, NULL, (td_tensor *[]){bad, wg}, 3, NULL, outs), TD_EINVAL);
    cr_expect(strstr(td_last_error(ctx), "input 'x' needs f32[8, 16]") != NULL, "%s",
              td_last_error(ctx));
    cr_expect_eq(td_graph_run(graph, 2, NULL, (td_tensor *[]){badt, wg}, 3, NULL, outs), TD_EINVAL);
    cr_expect(strstr(td_last_error(ctx), "f64[8, 16]") != NULL, "%s", td_last_error(ctx));
    cr_expect_eq(td_graph_run(graph, 1, NULL, (td_tensor *[]){bad}, 3, NULL, outs), TD_EINVAL);

    /* a released captured tensor: the run is lazy; reads and the fence name the cause */
    td_release(b);
    td_tensor *x = td_full(ctx, TD_F32, 2, (int64_t[]){B, IN}, 0.25);
    cr_assert_eq(td_graph_run(graph, 2, NULL, (td_tensor *[]){x, wg}, 3, NULL, outs), TD_OK,
                 "%s", td_last_error(ctx));
    float yv[B * OUT];
    td_status st = td_read(outs[0], yv, sizeof yv);
    cr_expect_eq(st, TD_EPOISONED, "%s: got %s", uri, td_status_name(st));
    cr_expect(strstr(td_last_error(ctx), "captured tensor") != NULL &&
                  strstr(td_last_error(ctx), "unknown tensor id") != NULL,
              "%s: message: %s", uri, td_last_error(ctx));
    st = td_fence(ctx);
    cr_expect_eq(st, TD_ENOTFOUND, "%s: fence gave %s", uri, td_status_name(st));
    for (int i = 0; i < 3; i++) td_release(outs[i]);
    td_release(x);
    td_release(bad);
    td_release(badt);
    td_release(we);
    td_release(wg);
    td_graph_destroy(graph);
    /* the session stays usable */
    td_tensor *one = td_full(ctx, TD_F32, 0, NULL, 1.0);
    double v = 0;
    cr_expect_eq(td_read_scalar(one, &v), TD_OK, "%s", td_last_error(ctx));
    cr_expect_eq(v, 1.0);
    td_release(one);
    td_close(ctx);
}

Test(graph, local_replay_matches_eager) { replay_matches_eager("local:cpu"); }

Test(graph, remote_replay_matches_eager, .init = start_small_cache, .fini = stop)
{
    char uri[600];
    td_test_server_uri(&srv, "cpu", uri, sizeof uri);
    replay_matches_eager(uri);
}

Test(graph, capture_errors)
{
    td_context *ctx = connect_to("local:cpu");
    td_graph *g = NULL;
    cr_expect_eq(td_graph_end(ctx, &g), TD_EINVAL, "end without begin");
    cr_expect_null(td_graph_input(ctx, "x", TD_F32, 0, NULL), "input without begin");
    cr_assert_eq(td_graph_begin(ctx), TD_OK);
    cr_expect_eq(td_graph_begin(ctx), TD_EINVAL, "nested begin");
    cr_expect_null(td_graph_input(ctx, "bad name", TD_F32, 0, NULL));
    td_tensor *x = td_graph_input(ctx, "x", TD_F32, 1, (int64_t[]){3});
    cr_expect_null(td_graph_input(ctx, "x", TD_F32, 0, NULL), "duplicate input");
    cr_expect_eq(td_fence(ctx), TD_EINVAL, "fence while capturing");
    cr_expect_null(td_from_host(ctx, TD_F32, 1, (int64_t[]){3}, (float[]){1, 2, 3}));
    cr_expect_eq(td_graph_end(ctx, &g), TD_EINVAL, "no outputs");
    cr_expect(strstr(td_last_error(ctx), "no outputs") != NULL, "%s", td_last_error(ctx));
    /* capture ended: the placeholder cannot be used eagerly */
    cr_expect_null(td_neg(x));
    cr_expect(strstr(td_last_error(ctx), "captured graph") != NULL, "%s", td_last_error(ctx));
    td_release(x);
    td_close(ctx);
}

/* td_from_host and td_from_host_ex fail while capturing (tensord.h, graphs) with a message
 * that says so, and leave nothing behind in the capture: the graph still ends and runs. */
static void upload_while_capturing(const char *uri)
{
    td_context *ctx = connect_to(uri);
    const float data[3] = {1, 2, 3};
    cr_assert_eq(td_graph_begin(ctx), TD_OK, "%s", td_last_error(ctx));
    td_tensor *x = td_graph_input(ctx, "x", TD_F32, 1, (int64_t[]){3});
    cr_assert_not_null(x, "%s", td_last_error(ctx));
    cr_expect_null(td_from_host(ctx, TD_F32, 1, (int64_t[]){3}, data));
    cr_expect_eq(td_last_status(ctx), TD_EINVAL);
    cr_expect(strstr(td_last_error(ctx), "td_from_host: not allowed while capturing") != NULL,
              "%s", td_last_error(ctx));
    cr_expect_null(td_from_host_ex(ctx, TD_F32, 1, (int64_t[]){3}, data, TD_WRITE_FRESH));
    cr_expect(strstr(td_last_error(ctx), "td_from_host_ex: not allowed while capturing") !=
                  NULL, "%s", td_last_error(ctx));
    td_tensor *y = td_mul_scalar(x, 2);
    cr_assert_eq(td_graph_output(ctx, "y", y), TD_OK, "%s", td_last_error(ctx));
    td_graph *g = NULL;
    cr_assert_eq(td_graph_end(ctx, &g), TD_OK, "%s", td_last_error(ctx));
    td_release(x);
    td_release(y);
    td_tensor *in = td_from_host(ctx, TD_F32, 1, (int64_t[]){3}, data);
    td_tensor *out = NULL;
    cr_assert_eq(td_graph_run(g, 1, NULL, &in, 1, NULL, &out), TD_OK, "%s", td_last_error(ctx));
    float v[3];
    cr_assert_eq(td_read(out, v, sizeof v), TD_OK, "%s", td_last_error(ctx));
    for (int i = 0; i < 3; i++) cr_expect_eq(v[i], 2.0f * (float)(i + 1), "y[%d] = %g", i, v[i]);
    td_release(in);
    td_release(out);
    td_graph_destroy(g);
    td_close(ctx);
}

Test(graph, local_upload_while_capturing_leaves_the_capture_intact)
{
    upload_while_capturing("local:cpu");
}

Test(graph, remote_upload_while_capturing_leaves_the_capture_intact, .init = start_small_cache,
     .fini = stop)
{
    char uri[600];
    td_test_server_uri(&srv, "cpu", uri, sizeof uri);
    upload_while_capturing(uri);
}

/* Distinct graphs: y = x * k. */
static td_graph *scale_graph(td_context *ctx, double k)
{
    cr_assert_eq(td_graph_begin(ctx), TD_OK, "%s", td_last_error(ctx));
    td_tensor *x = td_graph_input(ctx, "x", TD_F32, 1, (int64_t[]){4});
    td_tensor *y = td_mul_scalar(x, k);
    cr_assert_not_null(y, "k %g: %s", k, td_last_error(ctx));
    cr_assert_eq(td_graph_output(ctx, "y", y), TD_OK, "%s", td_last_error(ctx));
    td_graph *g = NULL;
    cr_assert_eq(td_graph_end(ctx, &g), TD_OK, "%s", td_last_error(ctx));
    td_release(x);
    td_release(y);
    return g;
}

static void run_scale(td_context *ctx, td_graph *g, double k)
{
    td_tensor *x = td_from_host(ctx, TD_F32, 1, (int64_t[]){4}, (float[]){1, 2, 3, 4});
    td_tensor *y = NULL;
    cr_assert_eq(td_graph_run(g, 1, NULL, &x, 1, NULL, &y), TD_OK, "%s", td_last_error(ctx));
    float v[4];
    cr_assert_eq(td_read(y, v, sizeof v), TD_OK, "%s", td_last_error(ctx));
    for (int i = 0; i < 4; i++) cr_expect_eq(v[i], (float)((i + 1) * k));
    td_release(x);
    td_release(y);
}

/* --graph-cache 2: three graphs evict the first; a later session gets it re-sent. */
Test(graph, cache_is_bounded, .init = start_small_cache, .fini = stop)
{
    char uri[600];
    td_test_server_uri(&srv, "cpu", uri, sizeof uri);
    td_context *a = connect_to(uri);
    td_graph *g[3];
    td_graph_info gi;
    for (int i = 0; i < 3; i++) {
        g[i] = scale_graph(a, i + 2);
        run_scale(a, g[i], i + 2);
        run_scale(a, g[i], i + 2);
        td_graph_get_info(g[i], &gi);
        cr_expect_eq(gi.definitions_sent, 1, "graph %d: first use sends the definition once", i);
    }
    /* in the session that defined it, graph 0 is still usable */
    run_scale(a, g[0], 2);
    for (int i = 0; i < 3; i++) td_graph_destroy(g[i]);
    td_close(a);

    td_context *b = connect_to(uri);
    td_graph *g0 = scale_graph(b, 2), *g2 = scale_graph(b, 4);
    run_scale(b, g2, 4);
    td_graph_get_info(g2, &gi);
    cr_expect_eq(gi.definitions_sent, 0, "graph 2 is still cached: no definition sent");
    run_scale(b, g0, 2);
    td_graph_get_info(g0, &gi);
    cr_expect_eq(gi.definitions_sent, 1, "graph 0 was evicted: re-sent once");
    run_scale(b, g0, 2);
    td_graph_get_info(g0, &gi);
    cr_expect_eq(gi.definitions_sent, 1);
    td_graph_destroy(g0);
    td_graph_destroy(g2);
    td_close(b);
}

/* A session holds at most 256 graphs at a time (server/graphcache.h); destroying a graph
 * lets the server's session go of it, so one session can capture and run graphs for 300
 * distinct shapes one after another (a model run at new batch sizes). */
Test(graph, destroyed_graphs_free_their_session_slot, .init = start_small_cache, .fini = stop)
{
    char uri[600];
    td_test_server_uri(&srv, "cpu", uri, sizeof uri);
    td_context *ctx = connect_to(uri);
    for (int i = 0; i < 300; i++) {
        td_graph *g = scale_graph(ctx, i + 2);
        run_scale(ctx, g, i + 2);
        td_graph_destroy(g);
    }
    cr_expect_eq(td_fence(ctx), TD_OK, "%s", td_last_error(ctx));
    td_close(ctx);
}

/* ---- hostile definitions over the raw protocol ---- */

static uint64_t send_define(raw_session *s, const uint8_t *id, size_t id_len,
                            Tensord__V1__Graph *graph)
{
    uint64_t seq = raw_send_define(s, id, id_len, graph);
    cr_assert_neq(seq, 0, "send failed");
    return seq;
}

static void expect_failure(raw_session *s, uint64_t seq, const char *needle)
{
    char msg[1024];
    cr_expect_eq(reply_to(s, seq, msg, sizeof msg), 1, "expected a Failure for '%s'", needle);
    cr_expect(strstr(msg, needle) != NULL, "message '%s' lacks '%s'", msg, needle);
}

Test(graph, hostile_definitions, .init = start_small_cache, .fini = stop)
{
    raw_session s;
    cr_assert(raw_open(&s, srv.addr, TD_PROTOCOL_MIN, TD_PROTOCOL_MAX, "cpu"), "%s",
              raw_details(&s));
    uint8_t zero[32] = {0};
    raw_graph r;

    raw_graph_init(&r, 3, TD_OP_NEG, 4);
    r.inputs[1] = 2; /* op 1 reads op 1's own output: a cycle */
    expect_failure(&s, send_define(&s, zero, 32, &r.g), "forward reference or cycle");
    r.inputs[1] = 3; /* op 1 reads op 2's output: a forward reference */
    expect_failure(&s, send_define(&s, zero, 32, &r.g), "forward reference or cycle");
    r.inputs[1] = 1000000007;
    expect_failure(&s, send_define(&s, zero, 32, &r.g), "not defined before it");
    r.inputs[1] = 1;
    r.ops[2].opcode = 999;
    expect_failure(&s, send_define(&s, zero, 32, &r.g), "unknown opcode 999");
    r.ops[2].opcode = TD_OP_NEG;
    r.out.value = 99;
    expect_failure(&s, send_define(&s, zero, 32, &r.g), "refers to value 99");
    r.out.value = 3;
    r.in.n_dims = 9;
    expect_failure(&s, send_define(&s, zero, 32, &r.g), "rank 9");
    r.in.n_dims = 1;
    r.in.name = "";
    expect_failure(&s, send_define(&s, zero, 32, &r.g), "name must be");
    r.in.name = "x";
    expect_failure(&s, send_define(&s, zero, 31, &r.g), "graph id has 31 bytes");

    /* a valid definition under a wrong id: the server names the real one */
    char msg[1024];
    cr_assert_eq(reply_to(&s, send_define(&s, zero, 32, &r.g), msg, sizeof msg), 1);
    const char *p = strstr(msg, "SHA-256 ");
    cr_assert(p != NULL, "%s", msg);
    uint8_t id[32];
    for (int i = 0; i < 32; i++) {
        unsigned v;
        cr_assert(sscanf(p + 8 + 2 * i, "%2x", &v) == 1);
        id[i] = (uint8_t)v;
    }
    cr_expect_eq(reply_to(&s, send_define(&s, id, 32, &r.g), msg, sizeof msg), 0,
                 "the right id is accepted: %s", msg);
    raw_graph_fini(&r);

    /* runs: undefined graph, wrong bindings */
    td__op mk = raw_op_full(1, TD_F32, 1, (int64_t[]){5}, 1.0);
    raw_send_ops(&s, &mk, 1);
    uint64_t outs[1] = {50};
    uint64_t ins[1] = {1};
    Tensord__V1__GraphRun gr = TENSORD__V1__GRAPH_RUN__INIT;
    gr.graph_id.data = zero;
    gr.graph_id.len = 32;
    gr.n_inputs = 1;
    gr.inputs = ins;
    gr.n_outputs = 1;
    gr.outputs = outs;
    Tensord__V1__ClientMessage cm = TENSORD__V1__CLIENT_MESSAGE__INIT;
    cm.body_case = TENSORD__V1__CLIENT_MESSAGE__BODY_GRAPH_RUN;
    cm.graph_run = &gr;
    uint64_t seq;
    cr_assert(raw_send(&s, &cm, NULL, 0, &seq));
    expect_failure(&s, seq, "not defined in this session");
    gr.graph_id.data = id;
    outs[0] = 53; /* 50 holds the poison record of the failed run: outputs need fresh ids */
    cr_assert(raw_send(&s, &cm, NULL, 0, &seq));
    expect_failure(&s, seq, "tensor 1 is f32[5], the graph needs f32[4]");
    ins[0] = 77;
    outs[0] = 51;
    cr_assert(raw_send(&s, &cm, NULL, 0, &seq));
    expect_failure(&s, seq, "unknown tensor id 77");
    gr.n_inputs = 0;
    outs[0] = 52;
    cr_assert(raw_send(&s, &cm, NULL, 0, &seq));
    expect_failure(&s, seq, "binds 0 inputs");

    /* GraphRelease (protocol 3): one release per define; the last one lets go */
    cr_expect_eq(reply_to(&s, send_define(&s, id, 32, NULL), msg, sizeof msg), 0,
                 "a second define of a held graph: %s", msg); /* now held twice */
    Tensord__V1__GraphRelease rel = TENSORD__V1__GRAPH_RELEASE__INIT;
    rel.graph_id.data = id;
    rel.graph_id.len = 32;
    Tensord__V1__ClientMessage rm = TENSORD__V1__CLIENT_MESSAGE__INIT;
    rm.body_case = TENSORD__V1__CLIENT_MESSAGE__BODY_GRAPH_RELEASE;
    rm.graph_release = &rel;
    cr_assert(raw_send(&s, &rm, NULL, 0, &seq)); /* held once now: still runnable */
    gr.n_inputs = 1;
    ins[0] = 2;
    td__op mk4 = raw_op_full(2, TD_F32, 1, (int64_t[]){4}, 1.0);
    raw_send_ops(&s, &mk4, 1);
    outs[0] = 60;
    cr_assert(raw_send(&s, &cm, NULL, 0, &seq));
    Tensord__V1__ClientMessage fm = TENSORD__V1__CLIENT_MESSAGE__INIT;
    Tensord__V1__Fence fence = TENSORD__V1__FENCE__INIT;
    fm.body_case = TENSORD__V1__CLIENT_MESSAGE__BODY_FENCE;
    fm.fence = &fence;
    cr_assert(raw_send(&s, &fm, NULL, 0, &seq));
    cr_expect_eq(reply_to(&s, seq, msg, sizeof msg), 0, "run after one of two releases: %s",
                 msg);
    cr_assert(raw_send(&s, &rm, NULL, 0, &seq)); /* the last hold: the session lets go */
    outs[0] = 61;
    cr_assert(raw_send(&s, &cm, NULL, 0, &seq));
    expect_failure(&s, seq, "not defined in this session");
    cr_assert(raw_send(&s, &rm, NULL, 0, &seq));
    expect_failure(&s, seq, "is not held by this session");
    rel.graph_id.len = 31;
    cr_assert(raw_send(&s, &rm, NULL, 0, &seq));
    expect_failure(&s, seq, "graph id has 31 bytes");
    rel.graph_id.len = 32;
    /* defined again (from the server's cache, no definition): runnable again */
    cr_expect_eq(reply_to(&s, send_define(&s, id, 32, NULL), msg, sizeof msg), 0, "%s", msg);
    outs[0] = 62;
    cr_assert(raw_send(&s, &cm, NULL, 0, &seq));
    cr_assert(raw_send(&s, &fm, NULL, 0, &seq));
    cr_expect_eq(reply_to(&s, seq, msg, sizeof msg), 0, "run after a new define: %s", msg);

    /* too many ops: refused before anything is allocated for them */
    raw_graph_init(&r, 70000, TD_OP_NEG, 4);
    expect_failure(&s, send_define(&s, zero, 32, &r.g), "the limit is 65536");
    raw_graph_fini(&r);
    raw_close(&s);

    /* the server still serves */
    char uri[600];
    td_test_server_uri(&srv, "cpu", uri, sizeof uri);
    td_context *ctx = connect_to(uri);
    td_graph *g = scale_graph(ctx, 3);
    run_scale(ctx, g, 3);
    td_graph_destroy(g);
    td_close(ctx);
}

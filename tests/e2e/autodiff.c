/* autodiff.c — gradients through a real tensord (issue 15): the same training step (a
 * two-layer MLP with log-softmax cross-entropy, td_backward, an SGD update under
 * td_no_grad) gives bit-identical losses, gradients and updated weights on local:cpu and
 * on a remote session on the server's cpu device, eagerly and replayed from a captured
 * graph (td_graph_begin .. td_graph_end around the whole step, backward included); and a
 * conv + batch norm + max pool classifier trained 6 steps with td_optim (Adam) gives the
 * same bits locally and remotely, eagerly, from a captured step and resumed from a
 * td_optim_save checkpoint (tests/e2e/optim_run.h).
 */
#include "suite_fixture.h"
#include "optim_run.h"
#include "tensord.h"

#include <criterion/criterion.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

#define B 8
#define IN 12
#define HID 16
#define OUT 5

typedef struct result {
    float loss;
    float w1[IN * HID], w2[HID * OUT];
    float g1[IN * HID];
} result;

static void fill(float *p, int n, unsigned seed)
{
    for (int i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = (float)((seed >> 8) & 0xffff) / 65536.0f - 0.5f;
    }
}

/* One step: loss = -mean(sum(onehot * log_softmax(relu(x w1) w2))), grads, w -= 0.1 g. */
static td_tensor *step(td_context *c, td_tensor *x, td_tensor *y1h, td_tensor *w1, td_tensor *w2,
                       td_tensor **nw1, td_tensor **nw2, td_tensor **g1out)
{
    td_tensor *h = td_relu(td_matmul(x, w1));
    td_tensor *lp = td_log_softmax(td_matmul(h, w2), 1);
    td_tensor *loss = td_mul_scalar(td_sum(td_mul(lp, y1h), 0, NULL, false), -1.0 / B);
    cr_assert_not_null(loss, "%s", td_last_error(c));
    cr_assert_eq(td_backward(loss), TD_OK, "%s", td_last_error(c));
    td_no_grad_begin(c);
    td_tensor *g1 = td_grad(w1), *g2 = td_grad(w2);
    cr_assert(g1 && g2, "%s", td_last_error(c));
    *nw1 = td_sub(w1, td_mul_scalar(g1, 0.1));
    *nw2 = td_sub(w2, td_mul_scalar(g2, 0.1));
    *g1out = td_mul_scalar(g1, 1.0); /* a copy that outlives td_zero_grad */
    td_no_grad_end(c);
    td_zero_grad(w1);
    td_zero_grad(w2);
    return loss;
}

static void run(const char *uri, bool graph, result *out)
{
    td_context *c;
    cr_assert_eq(td_connect(uri, NULL, &c), TD_OK, "%s: %s", uri, td_connect_error());
    float xs[B * IN], w1s[IN * HID], w2s[HID * OUT], oh[B * OUT] = {0};
    fill(xs, B * IN, 1);
    fill(w1s, IN * HID, 2);
    fill(w2s, HID * OUT, 3);
    for (int i = 0; i < B; i++) oh[i * OUT + (i * 3) % OUT] = 1;
    td_tensor *x = td_from_host(c, TD_F32, 2, (int64_t[]){B, IN}, xs);
    td_tensor *y1h = td_from_host(c, TD_F32, 2, (int64_t[]){B, OUT}, oh);
    td_tensor *w1 = td_from_host(c, TD_F32, 2, (int64_t[]){IN, HID}, w1s);
    td_tensor *w2 = td_from_host(c, TD_F32, 2, (int64_t[]){HID, OUT}, w2s);
    td_tensor *nw1, *nw2, *g1, *loss;
    if (!graph) {
        cr_assert_eq(td_requires_grad(w1, true), TD_OK);
        cr_assert_eq(td_requires_grad(w2, true), TD_OK);
        loss = step(c, x, y1h, w1, w2, &nw1, &nw2, &g1);
    } else {
        cr_assert_eq(td_graph_begin(c), TD_OK, "%s", td_last_error(c));
        td_tensor *px = td_graph_input(c, "x", TD_F32, 2, (int64_t[]){B, IN});
        td_tensor *py = td_graph_input(c, "y", TD_F32, 2, (int64_t[]){B, OUT});
        td_tensor *p1 = td_graph_input(c, "w1", TD_F32, 2, (int64_t[]){IN, HID});
        td_tensor *p2 = td_graph_input(c, "w2", TD_F32, 2, (int64_t[]){HID, OUT});
        cr_assert_eq(td_requires_grad(p1, true), TD_OK);
        cr_assert_eq(td_requires_grad(p2, true), TD_OK);
        td_tensor *l = step(c, px, py, p1, p2, &nw1, &nw2, &g1);
        cr_assert_eq(td_graph_output(c, "loss", l), TD_OK, "%s", td_last_error(c));
        cr_assert_eq(td_graph_output(c, "w1", nw1), TD_OK, "%s", td_last_error(c));
        cr_assert_eq(td_graph_output(c, "w2", nw2), TD_OK, "%s", td_last_error(c));
        cr_assert_eq(td_graph_output(c, "g1", g1), TD_OK, "%s", td_last_error(c));
        td_graph *gr;
        cr_assert_eq(td_graph_end(c, &gr), TD_OK, "%s", td_last_error(c));
        td_tensor *outs[4];
        cr_assert_eq(td_graph_run(gr, 4, (const char *[]){"x", "y", "w1", "w2"},
                                  (td_tensor *[]){x, y1h, w1, w2}, 4,
                                  (const char *[]){"loss", "w1", "w2", "g1"}, outs),
                     TD_OK, "%s", td_last_error(c));
        loss = outs[0];
        nw1 = outs[1];
        nw2 = outs[2];
        g1 = outs[3];
        td_graph_destroy(gr);
    }
    cr_assert_eq(td_read(loss, &out->loss, sizeof out->loss), TD_OK, "%s", td_last_error(c));
    cr_assert_eq(td_read(nw1, out->w1, sizeof out->w1), TD_OK, "%s", td_last_error(c));
    cr_assert_eq(td_read(nw2, out->w2, sizeof out->w2), TD_OK, "%s", td_last_error(c));
    cr_assert_eq(td_read(g1, out->g1, sizeof out->g1), TD_OK, "%s", td_last_error(c));
    td_close(c);
}

Test(autodiff, remote_equals_local_eager_and_graph, .init = start_tcp, .fini = stop,
     .timeout = 120)
{
    char uri[600];
    td_test_server_uri(&srv, "cpu", uri, sizeof uri);
    result a, b, c, d;
    run("local:cpu", false, &a);
    run(uri, false, &b);
    run("local:cpu", true, &c);
    run(uri, true, &d);
    cr_expect(isfinite(a.loss) && a.loss > 0, "loss %g", a.loss);
    float nz = 0;
    for (int i = 0; i < IN * HID; i++) nz += fabsf(a.g1[i]);
    cr_expect(nz > 0, "the first layer's gradient is not all zero");
    cr_expect(memcmp(&a, &b, sizeof a) == 0, "remote eager differs from local eager");
    cr_expect(memcmp(&a, &c, sizeof a) == 0, "a captured step differs from the eager one");
    cr_expect(memcmp(&a, &d, sizeof a) == 0, "a remote captured step differs");
}

Test(autodiff, optimizer_training_remote_equals_local, .init = start_tcp, .fini = stop,
     .timeout = 120)
{
    char uri[600], path[] = "/tmp/td-e2e-optim-XXXXXX";
    td_test_server_uri(&srv, "cpu", uri, sizeof uri);
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    or_result a, b, c, d;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    memset(&c, 0, sizeof c);
    memset(&d, 0, sizeof d);
    or_train("local:cpu", OR_EAGER, NULL, &a);
    or_train(uri, OR_EAGER, NULL, &b);
    or_train(uri, OR_GRAPH, NULL, &c);
    or_train(uri, OR_RESUME, path, &d);
    unlink(path);
    cr_expect(a.loss[OR_STEPS - 1] < a.loss[0], "loss %g -> %g", a.loss[0], a.loss[OR_STEPS - 1]);
    cr_expect(memcmp(&a, &b, sizeof a) == 0, "remote eager training differs from local");
    cr_expect(memcmp(&a, &c, sizeof a) == 0, "remote training from a captured step differs");
    cr_expect(memcmp(&a, &d, sizeof a) == 0, "remote training resumed from a checkpoint differs");
}

static void start_two_cpus(void)
{
    start_with((const char *[]){"--cpu-devices", "2", "--devices", "cpu", NULL});
}

/* A session spanning cpu:0 and cpu:1 of a real tensord, the parameter on cpu:1: td_backward
 * seeds the gradient on the loss's device, Adam's state sits beside the parameter, and a
 * checkpoint loads back onto cpu:1 (before, backward failed with mixed devices). By hand:
 * d/dw sum(w w) = 2w; Adam's first step is w - lr m^ / (sqrt(v^) + eps) with m^ = g and
 * sqrt(v^) = |g|, so w - lr g / (|g| + eps). */
Test(autodiff, parameters_on_the_second_device, .init = start_two_cpus, .fini = stop,
     .timeout = 120)
{
    char uri[600], path[] = "/tmp/td-e2e-dev-XXXXXX";
    td_test_server_uri(&srv, "cpu:0,cpu:1", uri, sizeof uri);
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    td_context *c;
    cr_assert_eq(td_connect(uri, NULL, &c), TD_OK, "%s", td_connect_error());
    const double w0[3] = {2.0, -1.0, 0.5};
    td_tensor *h = td_from_host(c, TD_F64, 1, (int64_t[]){3}, w0);
    td_tensor *w = td_to_device(h, "cpu:1");
    td_release(h);
    cr_assert_eq(td_requires_grad(w, true), TD_OK, "%s", td_last_error(c));
    td_optim_config cfg = td_optim_config_default(TD_OPTIM_ADAM, 0.1);
    td_optim *o;
    cr_assert_eq(td_optim_create(c, &cfg, 1, &w, (const char *[]){"w"}, &o), TD_OK, "%s",
                 td_last_error(c));
    cr_assert_eq(td_backward(td_sum(td_mul(w, w), 0, NULL, false)), TD_OK, "%s",
                 td_last_error(c));
    double g[3], got[3];
    cr_assert_eq(td_read(td_grad(w), g, sizeof g), TD_OK, "%s", td_last_error(c));
    for (int i = 0; i < 3; i++) cr_expect_eq(g[i], 2 * w0[i]);
    cr_assert_eq(td_optim_step(o, &w), TD_OK, "%s", td_last_error(c));
    cr_assert_eq(td_read(w, got, sizeof got), TD_OK, "%s", td_last_error(c));
    for (int i = 0; i < 3; i++) {
        const double gi = 2 * w0[i], want = w0[i] - 0.1 * gi / (fabs(gi) + 1e-8);
        cr_expect(fabs(got[i] - want) <= 1e-15, "w[%d] %.17g, want %.17g", i, got[i], want);
    }
    cr_expect_str_eq(td_tensor_device(w), "cpu:1");
    cr_assert_eq(td_optim_save(o, &w, path, 0, NULL, NULL), TD_OK, "%s", td_last_error(c));
    cr_assert_eq(td_optim_load(o, &w, path), TD_OK, "%s", td_last_error(c));
    unlink(path);
    cr_expect_str_eq(td_tensor_device(w), "cpu:1", "a load puts w back on its device");
    const char *name;
    td_tensor *s;
    cr_assert_eq(td_optim_state(o, 2, &name, &s), TD_OK);
    cr_expect_str_eq(name, "w.exp_avg");
    cr_expect_str_eq(td_tensor_device(s), "cpu:1");
    double again[3];
    cr_assert_eq(td_read(w, again, sizeof again), TD_OK, "%s", td_last_error(c));
    cr_expect(memcmp(got, again, sizeof got) == 0, "the loaded w is the saved one");
    td_optim_destroy(o);
    /* through td_to_device: v on cpu:0, its copy on cpu:1; d/dv sum(m m) = 2v, on cpu:0 */
    td_tensor *v = td_from_host(c, TD_F64, 1, (int64_t[]){3}, w0);
    cr_assert_eq(td_requires_grad(v, true), TD_OK);
    td_tensor *m = td_to_device(v, "cpu:1");
    cr_assert_eq(td_backward(td_sum(td_mul(m, m), 0, NULL, false)), TD_OK, "%s",
                 td_last_error(c));
    cr_assert_not_null(td_grad(v), "%s", td_last_error(c));
    cr_expect_str_eq(td_tensor_device(td_grad(v)), "cpu:0");
    cr_assert_eq(td_read(td_grad(v), g, sizeof g), TD_OK, "%s", td_last_error(c));
    for (int i = 0; i < 3; i++) cr_expect_eq(g[i], 2 * w0[i]);
    td_close(c);
}

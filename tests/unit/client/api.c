/* Client API tests on the in-process engine (local:cpu). Expected values are computed by
 * hand in the comments next to them. */
#include "tensord.h"
#include <criterion/criterion.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "read_start_cases.h"

static td_context *ctx;

static void setup(void)
{
    cr_assert_eq(td_connect("local:cpu", NULL, &ctx), TD_OK, "%s", td_connect_error());
}
static void teardown(void) { td_close(ctx); }

TestSuite(api, .init = setup, .fini = teardown);

Test(api, chain_matmul_add_relu)
{
    /* x = [[1,2],[3,4]], w = [[1,-1],[0.5,2]], b = [-3, 0]
     * x@w = [[1+1, -1+4], [3+2, -3+8]] = [[2,3],[5,5]]; + b = [[-1,3],[2,5]]; relu ->
     * [[0,3],[2,5]] */
    float xv[] = {1, 2, 3, 4}, wv[] = {1, -1, 0.5f, 2}, bv[] = {-3, 0};
    td_tensor *x = td_from_host(ctx, TD_F32, 2, (int64_t[]){2, 2}, xv);
    td_tensor *w = td_from_host(ctx, TD_F32, 2, (int64_t[]){2, 2}, wv);
    td_tensor *b = td_from_host(ctx, TD_F32, 1, (int64_t[]){2}, bv);
    td_tensor *y = td_relu(td_add(td_matmul(x, w), b));
    cr_assert_not_null(y, "%s", td_last_error(ctx));
    cr_assert_eq(td_rank(y), 2);
    float out[4];
    cr_assert_eq(td_read(y, out, sizeof out), TD_OK, "%s", td_last_error(ctx));
    float want[] = {0, 3, 2, 5};
    for (int i = 0; i < 4; i++) cr_assert_eq(out[i], want[i], "element %d: %g", i, out[i]);
}

Test(api, client_side_shape_error_is_immediate)
{
    td_tensor *a = td_full(ctx, TD_F32, 2, (int64_t[]){784, 256}, 1.0);
    td_tensor *b = td_full(ctx, TD_F32, 2, (int64_t[]){783, 10}, 1.0);
    cr_assert_null(td_matmul(a, b));
    cr_assert(strstr(td_last_error(ctx), "td_matmul") &&
                  strstr(td_last_error(ctx), "inner dims 256 and 783 differ"),
              "%s", td_last_error(ctx));
    cr_assert_null(td_relu(td_matmul(a, b)), "NULL propagates");
}

Test(api, reductions_and_argmax)
{
    /* x = [[1, 5, 2], [7, 0, 7]]: sum axis 1 = [8, 14]; mean all = 22/6; max axis 0 =
     * [7, 5, 7]; argmax axis 1 = [1, 0] (first maximum) */
    float xv[] = {1, 5, 2, 7, 0, 7};
    td_tensor *x = td_from_host(ctx, TD_F32, 2, (int64_t[]){2, 3}, xv);
    float s[2], mx[3], mean;
    int64_t am[2];
    cr_assert_eq(td_read(td_sum(x, 1, (int[]){-1}, false), s, sizeof s), TD_OK);
    cr_assert_eq(s[0], 8.0f);
    cr_assert_eq(s[1], 14.0f);
    td_tensor *m = td_mean(x, 0, NULL, false);
    cr_assert_eq(td_rank(m), 0);
    cr_assert_eq(td_read(m, &mean, sizeof mean), TD_OK);
    cr_assert_float_eq(mean, 22.0f / 6.0f, 1e-6);
    td_tensor *k = td_max(x, 1, (int[]){0}, true);
    cr_assert_eq(td_rank(k), 2);
    cr_assert_eq(td_read(k, mx, sizeof mx), TD_OK);
    cr_assert(mx[0] == 7 && mx[1] == 5 && mx[2] == 7);
    cr_assert_eq(td_read(td_argmax(x, 1, false), am, sizeof am), TD_OK);
    cr_assert(am[0] == 1 && am[1] == 0, "%lld %lld", (long long)am[0], (long long)am[1]);
}

Test(api, log_softmax_matches_float64_formula)
{
    double xv[] = {1.0, 2.0, 3.0, -1.0, 0.0, 1000.0};
    td_tensor *x = td_from_host(ctx, TD_F64, 2, (int64_t[]){2, 3}, xv);
    double out[6], sm[6];
    cr_assert_eq(td_read(td_log_softmax(x, 1), out, sizeof out), TD_OK, "%s", td_last_error(ctx));
    cr_assert_eq(td_read(td_softmax(x, -1), sm, sizeof sm), TD_OK);
    /* row 0: log(e^1+e^2+e^3) = 3 + log(1 + e^-1 + e^-2) */
    double l0 = 3.0 + log(1.0 + exp(-1.0) + exp(-2.0));
    for (int i = 0; i < 3; i++) {
        cr_assert_float_eq(out[i], xv[i] - l0, 1e-12);
        cr_assert_float_eq(sm[i], exp(xv[i] - l0), 1e-12);
    }
    /* row 1 is dominated by 1000: log_softmax = [-1001, -1000, 0] (to 1e-12) */
    cr_assert_float_eq(out[3], -1001.0, 1e-9);
    cr_assert_float_eq(out[4], -1000.0, 1e-9);
    cr_assert_float_eq(out[5], 0.0, 1e-12);
}

/* td_silu against x / (1 + e^-x) evaluated in float64 by Python's math module (the f64 values
 * below), in f64 and f32 (the f32 result within 4 ulp of the float64 value), plus its
 * specials and its dtype rule. */
Test(api, silu_matches_float64_reference)
{
    static const double xs[] = {0.0, 1.0, -1.0, 2.0, -2.5, 10.0, -20.0, 0.125, -0.125, 88.0};
    static const double want[] = {0.0, 0.7310585786300049, -0.2689414213699951,
                                  1.7615941559557646, -0.18964545005310887, 9.999546021312975,
                                  -4.122307236380407e-08, 0.06640117167171954,
                                  -0.05859882832828047, 88.0};
    enum { N = sizeof xs / sizeof xs[0] };
    double y64[N];
    td_tensor *x64 = td_from_host(ctx, TD_F64, 1, (int64_t[]){N}, xs);
    cr_assert_eq(td_read(td_silu(x64), y64, sizeof y64), TD_OK, "%s", td_last_error(ctx));
    float xf[N], y32[N];
    for (int i = 0; i < N; i++) xf[i] = (float)xs[i];
    td_tensor *x32 = td_from_host(ctx, TD_F32, 1, (int64_t[]){N}, xf);
    cr_assert_eq(td_read(td_silu(x32), y32, sizeof y32), TD_OK, "%s", td_last_error(ctx));
    for (int i = 0; i < N; i++) {
        cr_assert(fabs(y64[i] - want[i]) <= 4e-16 * fabs(want[i]), "f64 silu(%g) = %.17g, want %.17g",
                  xs[i], y64[i], want[i]);
        float w = (float)want[i];
        cr_assert(fabsf(y32[i] - w) <= 4 * (nextafterf(fabsf(w), INFINITY) - fabsf(w)),
                  "f32 silu(%g) = %.9g, want %.9g", xs[i], (double)y32[i], (double)w);
    }
    const float sp[] = {INFINITY, -INFINITY, NAN, -100.0f};
    float ys[4];
    td_tensor *xsp = td_from_host(ctx, TD_F32, 1, (int64_t[]){4}, sp);
    cr_assert_eq(td_read(td_silu(xsp), ys, sizeof ys), TD_OK);
    cr_assert(ys[0] == INFINITY && isnan(ys[1]) && isnan(ys[2]), "%g %g %g", ys[0], ys[1], ys[2]);
    cr_assert(ys[3] == 0.0f && signbit(ys[3]), "silu(-100) underflows to -0 in f32: %g", ys[3]);
    td_tensor *xi = td_from_host(ctx, TD_I32, 1, (int64_t[]){1}, (int32_t[]){3});
    cr_assert_null(td_silu(xi));
    cr_assert(strncmp(td_last_error(ctx), "td_silu: ", 9) == 0 &&
                  strstr(td_last_error(ctx), "needs a float dtype, got i32"),
              "%s", td_last_error(ctx));
}

Test(api, gather_labels_and_onehot)
{
    /* logp rows, labels [2, 0]: picks 0.3 and 0.4 */
    float lp[] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f};
    int64_t lab[] = {2, 0};
    td_tensor *x = td_from_host(ctx, TD_F32, 2, (int64_t[]){2, 3}, lp);
    td_tensor *l = td_from_host(ctx, TD_I64, 2, (int64_t[]){2, 1}, lab);
    float g[2];
    cr_assert_eq(td_read(td_gather(x, l, 1), g, sizeof g), TD_OK, "%s", td_last_error(ctx));
    cr_assert(g[0] == 0.3f && g[1] == 0.4f);
    /* onehot = cast(eq(labels[2,1], arange(3)[1..3]) -> [[0,0,1],[1,0,0]] */
    td_tensor *ar = td_arange(ctx, TD_I64, 3, 0, 1);
    float oh[6];
    cr_assert_eq(td_read(td_cast(td_eq(l, ar), TD_F32), oh, sizeof oh), TD_OK);
    float want[] = {0, 0, 1, 1, 0, 0};
    cr_assert_arr_eq(oh, want, sizeof want);
}

Test(api, lazy_error_surfaces_at_read_and_fence)
{
    /* gather index 5 is out of range for dim 3: only the executor can see that */
    float xv[] = {1, 2, 3};
    int64_t bad[] = {5};
    td_tensor *x = td_from_host(ctx, TD_F32, 1, (int64_t[]){3}, xv);
    td_tensor *i = td_from_host(ctx, TD_I64, 1, (int64_t[]){1}, bad);
    td_tensor *g = td_gather(x, i, 0);
    cr_assert_not_null(g);
    td_tensor *h = td_neg(g); /* depends on the failed op */
    td_tensor *ok = td_neg(x); /* independent */
    float v, o[3];
    cr_assert_eq(td_read(h, &v, sizeof v), TD_EPOISONED);
    cr_assert(strstr(td_last_error(ctx), "gather"), "%s", td_last_error(ctx));
    cr_assert_eq(td_read(ok, o, sizeof o), TD_OK, "independent work still runs");
    cr_assert(o[0] == -1 && o[2] == -3);
    cr_assert_neq(td_fence(ctx), TD_OK, "fence reports the deferred failure");
    cr_assert(strstr(td_last_error(ctx), "op "), "%s", td_last_error(ctx));
    cr_assert_eq(td_fence(ctx), TD_OK, "and then forgets it");
}

Test(api, zero_length_and_scalars)
{
    td_tensor *e = td_full(ctx, TD_F32, 2, (int64_t[]){0, 4}, 2.0);
    td_tensor *s = td_sum(e, 1, (int[]){0}, false);
    float sv[4];
    cr_assert_eq(td_read(s, sv, sizeof sv), TD_OK, "%s", td_last_error(ctx));
    for (int i = 0; i < 4; i++) cr_assert_eq(sv[i], 0.0f);
    cr_assert_eq(td_read(e, NULL, 0), TD_OK);
    td_tensor *c = td_mul_scalar(td_full(ctx, TD_I32, 0, NULL, 6), 7);
    double v;
    cr_assert_eq(td_read_scalar(c, &v), TD_OK);
    cr_assert_eq(v, 42.0);
}

Test(api, movement_ops)
{
    /* x = arange(6) as [2,3] = [[0,1,2],[3,4,5]] */
    td_tensor *x = td_reshape(td_arange(ctx, TD_I32, 6, 0, 1), 2, (int64_t[]){2, -1});
    cr_assert_eq(td_dims(x)[1], 3);
    int32_t t[6], sl[2], cc[12];
    cr_assert_eq(td_read(td_transpose(x), t, sizeof t), TD_OK);
    int32_t tw[] = {0, 3, 1, 4, 2, 5};
    cr_assert_arr_eq(t, tw, sizeof tw);
    /* slice rows [1,2), cols [-2, end) -> [[4, 5]] */
    cr_assert_eq(td_read(td_slice(x, (int64_t[]){1, -2}, (int64_t[]){2, 3}), sl, sizeof sl),
                 TD_OK);
    cr_assert(sl[0] == 4 && sl[1] == 5);
    td_tensor *xs[2] = {x, x};
    cr_assert_eq(td_read(td_concat(2, xs, 1), cc, sizeof cc), TD_OK);
    int32_t cw[] = {0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5};
    cr_assert_arr_eq(cc, cw, sizeof cw);
}

Test(api, rng_is_reproducible_and_plausible)
{
    td_tensor *a = td_rand_normal(ctx, TD_F32, 1, (int64_t[]){10000}, 42, 0.0, 1.0);
    td_tensor *b = td_rand_normal(ctx, TD_F32, 1, (int64_t[]){10000}, 42, 0.0, 1.0);
    static float av[10000], bv[10000];
    cr_assert_eq(td_read(a, av, sizeof av), TD_OK);
    cr_assert_eq(td_read(b, bv, sizeof bv), TD_OK);
    cr_assert_arr_eq(av, bv, sizeof av);
    double m = 0, v = 0;
    for (int i = 0; i < 10000; i++) m += av[i];
    m /= 10000;
    for (int i = 0; i < 10000; i++) v += (av[i] - m) * (av[i] - m);
    v /= 10000;
    /* standard error of the mean 0.01, of the variance ~0.014: 5 sigma bounds */
    cr_assert(fabs(m) < 0.05 && fabs(v - 1.0) < 0.07, "mean %g var %g", m, v);
}

Test(api, bad_uris)
{
    td_context *c2 = NULL;
    cr_assert_eq(td_connect("http://x", NULL, &c2), TD_EINVAL);
    cr_assert(strstr(td_connect_error(), "unsupported uri"), "%s", td_connect_error());
    cr_assert_eq(td_connect("local:cuda:7", NULL, &c2), TD_EINVAL);
    cr_assert(strstr(td_connect_error(), "unknown device 'cuda:7'"), "%s", td_connect_error());
    cr_assert_null(c2);
    /* device list entries are numbered as written: the first device is entry 1 */
    cr_assert_eq(td_connect("local:cpu:0,,cpu:1", NULL, &c2), TD_EINVAL);
    cr_assert(strstr(td_connect_error(), "entry 2 is empty"), "%s", td_connect_error());
    /* what every server refuses is refused before anything opens: a placement after the
     * first entry, one device twice ("cpu" is cpu:0) */
    cr_assert_eq(td_connect("local:cpu,auto", NULL, &c2), TD_EINVAL);
    cr_assert(strstr(td_connect_error(), "entry 2 ('auto') asks the server to place it"), "%s",
              td_connect_error());
    cr_assert_eq(td_connect("tensord://127.0.0.1:1/cpu:0,cpu:1,cpu", NULL, &c2), TD_EINVAL);
    cr_assert(
        strstr(td_connect_error(), "device cpu:0 is named twice (entries 1 'cpu:0' and 3 'cpu')"),
        "%s", td_connect_error());
    cr_assert_null(c2);
    /* a device list longer than 63 bytes is refused, not cut to 63 (the server would have
     * been asked for another device) */
    char uri[160];
    snprintf(uri, sizeof uri, "tensord://127.0.0.1:1/%070d", 0);
    cr_assert_eq(td_connect(uri, NULL, &c2), TD_EINVAL);
    cr_assert(strstr(td_connect_error(), "the device list is 70 bytes; at most 63"), "%s",
              td_connect_error());
    snprintf(uri, sizeof uri, "local:cpu,%064d", 0);
    cr_assert_eq(td_connect(uri, NULL, &c2), TD_EINVAL);
    cr_assert(strstr(td_connect_error(), "the device list is 68 bytes; at most 63"), "%s",
              td_connect_error());
    cr_assert_null(c2);
}

/* A uri of thousands of bytes: the error echoes its first 200 bytes, an ellipsis and its
 * length, and still says what is wrong after the echo. */
Test(api, long_uris_are_echoed_in_part)
{
    enum { LONG = 5000 };
    static char uri[LONG + 64], want[300];
    struct {
        const char *head, *tail, *problem;
    } cases[] = {
        {"http://", "", "use local:cpu, tensord://HOST:PORT/DEVICE"},
        {"tensord://", "/cpu", "expected tensord://HOST:PORT[/DEVICE]"},
        {"dns:///", "/cpu", "expected dns:///NAME:PORT[/DEVICE]"},
        {"tensord://a:1,", ":99999/cpu", "has port '99999', want 1..65535"},
        {"unix:/tmp/", ",x/cpu", "contains ',', which gRPC's unix: targets take"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        size_t hl = strlen(cases[c].head);
        memcpy(uri, cases[c].head, hl);
        memset(uri + hl, 'h', LONG);
        strcpy(uri + hl + LONG, cases[c].tail);
        td_context *c2 = NULL;
        cr_assert_eq(td_connect(uri, NULL, &c2), TD_EINVAL, "%s...", cases[c].head);
        cr_assert_null(c2);
        const char *msg = td_connect_error();
        cr_expect(strstr(msg, cases[c].problem) != NULL, "%s...: %s", cases[c].head, msg);
        cr_expect_lt(strlen(msg), 700, "%s...: %zu bytes: %.300s", cases[c].head, strlen(msg),
                     msg);
        /* 200 bytes of the uri (of the path after "unix:"), then U+2026 and the length */
        const char *from = strncmp(uri, "unix:", 5) == 0 ? uri + 5 : uri;
        snprintf(want, sizeof want, "%.200s\xe2\x80\xa6 (%zu bytes)", from, strlen(from));
        if (strncmp(uri, "unix:", 5) == 0) /* the path up to the device part */
            snprintf(want, sizeof want, "%.200s\xe2\x80\xa6 (%zu bytes)", from,
                     strlen(from) - strlen("/cpu"));
        cr_expect(strstr(msg, want) != NULL, "%s...: want '%.40s...' in %.300s", cases[c].head,
                  want, msg);
    }
    /* a short one is echoed whole */
    td_context *c2 = NULL;
    cr_assert_eq(td_connect("tensord://nocolon/cpu", NULL, &c2), TD_EINVAL);
    cr_expect(strstr(td_connect_error(), "'tensord://nocolon/cpu'") != NULL, "%s",
              td_connect_error());
}

/* td_to_device's hint is a valid uri or absent, and a long name is cut in the message. */
Test(api, to_device_hints_are_valid_uris)
{
    td_tensor *x = td_full(ctx, TD_F32, 1, (int64_t[]){2}, 1.0);
    const char *d0 = td_device_name(ctx);
    char want[128], bad[128];
    cr_expect_null(td_to_device(x, "cuda:7"));
    snprintf(want, sizeof want, "e.g. tensord://HOST:PORT/%s,cuda:7", d0);
    cr_expect(strstr(td_last_error(ctx), want) != NULL, "%s", td_last_error(ctx));
    cr_expect_null(td_to_device(x, "cpu:0,cpu:1"));
    snprintf(bad, sizeof bad, "/%s,cpu:0,cpu:1", d0);
    cr_expect(strstr(td_last_error(ctx), bad) == NULL, "%s", td_last_error(ctx));
    cr_expect(strstr(td_last_error(ctx), "name one device exactly") != NULL, "%s",
              td_last_error(ctx));
    cr_expect_null(td_to_device(x, "auto"));
    snprintf(bad, sizeof bad, "/%s,auto", d0);
    cr_expect(strstr(td_last_error(ctx), bad) == NULL, "%s", td_last_error(ctx));
    static char huge[5001];
    memset(huge, 'x', 5000);
    cr_expect_null(td_to_device(x, huge));
    cr_expect_lt(strlen(td_last_error(ctx)), 400, "%s", td_last_error(ctx));
    cr_expect(strstr(td_last_error(ctx), "xxxx\xe2\x80\xa6'") != NULL, "%s", td_last_error(ctx));
    td_release(x);
}

/* Ports outside 1..65535 are refused before connecting, naming the entry (108921 used to
 * reach port 43385, 4294967296 port 0). */
Test(api, uri_ports_are_range_checked)
{
    static const struct {
        const char *uri, *says;
    } bad[] = {
        {"tensord://127.0.0.1:108921/cpu", "port '108921' of 127.0.0.1:108921 is not 1..65535"},
        {"tensords://127.0.0.1:65536/cpu", "port '65536'"},
        {"tensord://127.0.0.1:0/cpu", "port '0'"},
        {"tensord://127.0.0.1:-1/cpu", "port '-1'"},
        {"tensord://127.0.0.1:/cpu", "port ''"},
        {"tensord://[::1]:99999/cpu", "port '99999' of [::1]:99999"},
        {"tensord://127.0.0.1:7070,127.0.0.1:70000/cpu",
         "entry 2 (127.0.0.1:70000) has port '70000', want 1..65535"},
        {"dns:///localhost:108921/cpu", "port '108921' of localhost:108921"},
        {"dns:///localhost:4294967296", "port '4294967296'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        td_context *c = NULL;
        td_status st = td_connect(bad[i].uri, NULL, &c);
        cr_expect_eq(st, TD_EINVAL, "%s: %s", bad[i].uri, td_status_name(st));
        cr_expect_null(c);
        cr_expect(strstr(td_connect_error(), bad[i].says) != NULL, "%s: '%s' lacks '%s'",
                  bad[i].uri, td_connect_error(), bad[i].says);
    }
}

/* A unix: uri is never a pool: a device list after the path is a device list, and a comma
 * in the path is refused with the reason (gRPC splits unix: targets at commas) instead of
 * "server list ... entry 2 is not HOST:PORT". */
Test(api, unix_uri_with_a_comma_is_not_a_pool)
{
    td_options o = {.connect_timeout_ms = 500};
    td_context *c = NULL;
    td_status st = td_connect("unix:/nonexistent/x.sock/cpu:0,bogus", &o, &c);
    cr_expect_eq(st, TD_EUNAVAILABLE, "%s: %s", td_status_name(st), td_connect_error());
    cr_expect(strstr(td_connect_error(), "unix:/nonexistent/x.sock") != NULL &&
                  strstr(td_connect_error(), "server list") == NULL,
              "%s", td_connect_error());
    const char *uris[] = {"unix:/nonexistent/a,b.sock/cpu", "unix:/nonexistent/a,b.sock"};
    for (size_t i = 0; i < sizeof uris / sizeof uris[0]; i++) {
        st = td_connect(uris[i], &o, &c);
        cr_expect_eq(st, TD_EINVAL, "%s: %s: %s", uris[i], td_status_name(st),
                     td_connect_error());
        cr_expect(strstr(td_connect_error(), "'/nonexistent/a,b.sock' contains ','") != NULL,
                  "%s: %s", uris[i], td_connect_error());
    }
    cr_expect_null(c);
}

/* The id of a one-matmul f32 graph recorded on a local:cpu context opened by `open`: it
 * differs exactly when the context stamps TF32 permission on its matmuls. */
typedef td_status (*connect_fn)(const char *, const td_options *, td_context **);

static void matmul_graph_id(td_context *cx, char id[65])
{
    cr_assert_eq(td_graph_begin(cx), TD_OK);
    td_tensor *a = td_graph_input(cx, "a", TD_F32, 2, (int64_t[]){4, 4});
    cr_assert_eq(td_graph_output(cx, "y", td_matmul(a, a)), TD_OK);
    td_graph *g = NULL;
    cr_assert_eq(td_graph_end(cx, &g), TD_OK, "%s", td_last_error(cx));
    td_graph_info gi;
    td_graph_get_info(g, &gi);
    memcpy(id, gi.id, 65);
    td_graph_destroy(g);
    td_close(cx);
}

Test(api, options_size_guards_appended_fields)
{
    td_context *c;
    char want[65], got[65], tf32[65];
    cr_assert_eq(td_connect("local:cpu", NULL, &c), TD_OK);
    matmul_graph_id(c, want);
    td_options t = {.matmul_allow_tf32 = 1};
    cr_assert_eq(td_connect("local:cpu", &t, &c), TD_OK);
    matmul_graph_id(c, tf32);
    cr_assert_str_neq(want, tf32, "TF32 permission must change the graph (else this test is blind)");

    /* A program built before matmul_allow_tf32 existed: its zeroed struct ends at
     * blob_min_bytes and whatever follows it in memory is not its own (0xff here). It calls
     * the td_connect function, not the macro. */
    size_t old_size = offsetof(td_options, matmul_allow_tf32);
    unsigned char buf[sizeof(td_options) + 64];
    memset(buf, 0xff, sizeof buf);
    memset(buf, 0, old_size);
    connect_fn old_connect = td_connect; /* the function, as an old binary links it */
    cr_assert_eq(old_connect("local:cpu", (const td_options *)(void *)buf, &c), TD_OK);
    matmul_graph_id(c, got);
    cr_assert_str_eq(got, want, "bytes past the old struct turned an option on");
    cr_assert_eq(td_connect_sized("local:cpu", (const td_options *)(void *)buf, old_size, &c),
                 TD_OK);
    matmul_graph_id(c, got);
    cr_assert_str_eq(got, want);

    /* A program built against a newer header: unknown trailing fields must be unset. */
    memset(buf, 0, sizeof buf);
    cr_assert_eq(td_connect_sized("local:cpu", (const td_options *)(void *)buf, sizeof buf, &c),
                 TD_OK);
    td_close(c);
    buf[sizeof(td_options) + 3] = 1;
    c = NULL;
    cr_assert_eq(td_connect_sized("local:cpu", (const td_options *)(void *)buf, sizeof buf, &c),
                 TD_EINVAL);
    cr_assert_null(c);
    cr_assert(strstr(td_connect_error(), "link a libtensord as new as the tensord.h"), "%s",
              td_connect_error());
}

/* ---- a session spanning two CPU devices (TENSORD_CPU_DEVICES=2 before the first connect;
 * criterion runs each test in its own process) ---- */

static td_context *two;
static void setup_two(void)
{
    setenv("TENSORD_CPU_DEVICES", "2", 1);
    setenv("TENSORD_DEVICES", "cpu", 1);
    cr_assert_eq(td_connect("local:cpu:0,cpu:1", NULL, &two), TD_OK, "%s", td_connect_error());
}
static void teardown_two(void) { td_close(two); }
TestSuite(api_devices, .init = setup_two, .fini = teardown_two);

/* f64 values on `dev`. */
static td_tensor *on(const char *dev, int rank, const int64_t *dims, const double *v)
{
    td_tensor *h = td_from_host(two, TD_F64, rank, dims, v);
    td_tensor *m = td_to_device(h, dev);
    td_release(h);
    cr_assert_not_null(m, "%s", td_last_error(two));
    return m;
}

/* Composites that make a constant of their own (td_add_scalar's and td_where_scalar_b's
 * scalar, layer/group norm's weight of ones for a bias alone, causal attention's aranges,
 * cross entropy's ignore_index) made it on the session's first device, so on cpu:1 they
 * failed with mixed devices; each now runs beside its input and gives cpu:0's bits. By
 * hand: where(x > b, x, -1) + 0.5 with b = [0.5, -1] along the last axis is [-0.5, -0.5,
 * 2.5, 0.75, 3.5, 0, 2, 1.5]; cross entropy of equal logits over 2 classes with one of two
 * targets ignored is log 2. */
Test(api_devices, composites_run_on_the_second_device)
{
    static const double xv[8] = {0.5, -1, 2, 0.25, 3, -0.5, 1.5, 1};
    static const double want0[8] = {-0.5, -0.5, 2.5, 0.75, 3.5, 0, 2, 1.5};
    const int64_t x4[4] = {1, 2, 2, 2}, c2[1] = {2}, sq[3] = {1, 2, 4};
    double got[2][4][8];
    for (int k = 0; k < 2; k++) {
        const char *dev = k == 0 ? "cpu:1" : "cpu:0";
        td_tensor *x = on(dev, 4, x4, xv), *b = on(dev, 1, c2, xv + 2);
        td_tensor *q = on(dev, 3, sq, xv);
        td_tensor *r[4] = {
            td_add_scalar(td_where_scalar_b(td_gt(x, on(dev, 1, c2, (double[]){0.5, -1})), x,
                                            -1.0),
                          0.5),
            td_layer_norm(x, 1, NULL, b, 1e-5),
            td_group_norm(x, 1, NULL, b, 1e-5),
            td_scaled_dot_product_attention(q, q, q, NULL, true, 0),
        };
        for (int i = 0; i < 4; i++) {
            cr_assert_not_null(r[i], "%s: result %d: %s", dev, i, td_last_error(two));
            cr_expect_str_eq(td_tensor_device(r[i]), dev, "result %d", i);
            cr_assert_eq(td_read(r[i], got[k][i], sizeof got[k][i]), TD_OK, "%s",
                         td_last_error(two));
        }
        td_tensor *t = td_to_device(td_from_host(two, TD_I64, 1, (int64_t[]){2},
                                                 (int64_t[]){1, -100}), dev);
        td_tensor *ce = td_cross_entropy(on(dev, 2, (int64_t[]){2, 2}, (double[]){0, 0, 0, 0}),
                                         t, TD_REDUCTION_MEAN, -100, 0.0);
        cr_assert_not_null(ce, "%s: %s", dev, td_last_error(two));
        double v;
        cr_assert_eq(td_read(ce, &v, sizeof v), TD_OK, "%s", td_last_error(two));
        cr_expect(fabs(v - log(2.0)) <= 1e-15, "%s: cross entropy %.17g", dev, v);
    }
    for (int j = 0; j < 8; j++) cr_expect_eq(got[0][0][j], want0[j], "element %d", j);
    for (int i = 0; i < 4; i++)
        cr_expect(memcmp(got[0][i], got[1][i], sizeof got[0][i]) == 0, "result %d: cpu:1 "
                  "%.17g, cpu:0 %.17g", i, got[0][i][0], got[1][i][0]);
}

/* td_host_alloc on a local CPU context (header: "on any other context it is ordinary
 * memory"): 64-byte aligned, usable for writes and reads like any pointer, freed once;
 * a second free, a foreign pointer and nbytes 0 are TD_EINVAL / NULL; td_close frees what
 * is left (LeakSanitizer would report it otherwise). The pinned local GPU variant is
 * checked on the GPU host (tests/gpu/pinned-on-gpu-host.sh: gpu-bench compares every read). */
Test(api, host_buffers_on_a_local_cpu_context)
{
    const size_t n = (size_t)3 << 20; /* above the GPU path's 64 KiB, for the same code */
    unsigned char *a = td_host_alloc(ctx, n), *b = td_host_alloc(ctx, n);
    cr_assert(a != NULL && b != NULL, "%s", td_last_error(ctx));
    cr_assert_eq((uintptr_t)a % 64, 0);
    cr_assert_eq((uintptr_t)b % 64, 0);
    for (size_t i = 0; i < n; i++) a[i] = (unsigned char)(i * 7 + 3);
    int64_t dim = (int64_t)n;
    td_tensor *t = td_full(ctx, TD_U8, 1, &dim, 0);
    cr_assert(t != NULL);
    cr_assert_eq(td_write(t, a, n), TD_OK, "%s", td_last_error(ctx));
    memset(b, 0, n);
    cr_assert_eq(td_read(t, b, n), TD_OK, "%s", td_last_error(ctx));
    cr_assert_eq(memcmp(a, b, n), 0);
    td_release(t);
    cr_assert_eq(td_host_free(ctx, a), TD_OK);
    cr_assert_eq(td_host_free(ctx, a), TD_EINVAL);
    cr_assert(strstr(td_last_error(ctx), "not a live buffer") != NULL, "%s", td_last_error(ctx));
    int local_var = 0;
    cr_assert_eq(td_host_free(ctx, &local_var), TD_EINVAL);
    cr_assert_eq(td_host_free(ctx, NULL), TD_OK);
    cr_assert_null(td_host_alloc(ctx, 0));
    cr_assert(strstr(td_last_error(ctx), "nbytes is 0") != NULL, "%s", td_last_error(ctx));
    (void)b; /* left for td_close (teardown) to free */
}

/* TD_WRITE_FRESH on a local context (tensord.h: "the flag changes nothing there"): the
 * marked calls give the contents, ordering and td_stats of td_from_host / td_write, for an
 * upload above the remote offer's 1 MiB threshold and for none; an unknown bit is refused
 * with the message the header gives, and nothing is recorded. */
Test(api, fresh_marked_uploads_on_a_local_context)
{
    const size_t n = ((size_t)3 << 20) + 5;
    unsigned char *x = malloc(n), *y = malloc(n), *got = malloc(n);
    cr_assert(x && y && got);
    for (size_t i = 0; i < n; i++) {
        x[i] = (unsigned char)(i * 7 + 3);
        y[i] = (unsigned char)(i * 13 + 1);
    }
    int64_t dim = (int64_t)n;
    td_stats s0, s1;
    td_get_stats(ctx, &s0);
    td_tensor *t = td_from_host_ex(ctx, TD_U8, 1, &dim, x, TD_WRITE_FRESH);
    cr_assert_not_null(t, "%s", td_last_error(ctx));
    /* recorded before the write: the old bytes, x[i] + 1 (u8 wraps); after: y[i] + 1 */
    td_tensor *before = td_add_scalar(t, 1);
    cr_assert_eq(td_write_ex(t, y, n, TD_WRITE_FRESH), TD_OK, "%s", td_last_error(ctx));
    td_tensor *after = td_add_scalar(t, 1);
    cr_assert_eq(td_read(before, got, n), TD_OK, "%s", td_last_error(ctx));
    size_t i = 0;
    while (i < n && got[i] == (unsigned char)(x[i] + 1)) i++;
    cr_expect_eq(i, n, "an op recorded before td_write_ex saw the new bytes at %zu", i);
    cr_assert_eq(td_read(after, got, n), TD_OK, "%s", td_last_error(ctx));
    i = 0;
    while (i < n && got[i] == (unsigned char)(y[i] + 1)) i++;
    cr_expect_eq(i, n, "an op recorded after td_write_ex saw the old bytes at %zu", i);
    td_tensor *z = td_from_host_ex(ctx, TD_U8, 1, (int64_t[]){0}, NULL, TD_WRITE_FRESH);
    cr_assert_not_null(z, "%s", td_last_error(ctx));
    cr_expect_eq(td_write_ex(z, NULL, 0, TD_WRITE_FRESH), TD_OK, "%s", td_last_error(ctx));
    td_get_stats(ctx, &s1);
    cr_expect_eq(s1.bytes_sent - s0.bytes_sent, 2 * (uint64_t)n, "local uploads counted %llu",
                 (unsigned long long)(s1.bytes_sent - s0.bytes_sent));
    cr_expect_eq(td_write_ex(t, y, n, 0x6), TD_EINVAL);
    cr_expect_str_eq(td_last_error(ctx), "td_write_ex: unknown flags 0x6 (known: TD_WRITE_FRESH "
                     "0x1)");
    uint64_t ops = s1.ops_recorded;
    cr_expect_null(td_from_host_ex(ctx, TD_U8, 1, &dim, x, TD_WRITE_FRESH | 0x80));
    cr_expect_eq(td_last_status(ctx), TD_EINVAL);
    cr_expect_str_eq(td_last_error(ctx), "td_from_host_ex: unknown flags 0x80 (known: "
                     "TD_WRITE_FRESH 0x1)");
    td_get_stats(ctx, &s1);
    cr_expect_eq(s1.ops_recorded, ops, "a refused td_from_host_ex recorded an op");
    td_release(before);
    td_release(after);
    td_release(z);
    td_release(t);
    free(x);
    free(y);
    free(got);
}

/* td_read_start / td_read_finish on local:cpu, where each read completes in td_read_start
 * (tests/unit/client/read_start_cases.h has the cases and their expected values). */
Test(api, read_start_out_of_order) { read_start_case_out_of_order(ctx); }
Test(api, read_start_then_release) { read_start_case_released(ctx); }
Test(api, read_start_argument_errors) { read_start_case_errors(ctx); }
Test(api, read_start_poisoned) { read_start_case_poisoned(ctx); }
Test(api, read_start_pending_limit) { read_start_case_limit(ctx); }
Test(api, read_start_finish_while_capturing) { read_start_case_finish_while_capturing(ctx); }
Test(api, read_start_close_with_reads_pending)
{
    td_context *other = NULL;
    cr_assert_eq(td_connect("local:cpu", NULL, &other), TD_OK, "%s", td_connect_error());
    read_start_case_close_pending(other);
}

/* attention.c — scaled dot-product attention through a real tensord (opcode 299, protocol
 * 6): the op and its gradient give the same bits on a server's cpu device as on local:cpu
 * (both run the CPU's native kernel); a client that offers at most protocol 5
 * (TENSORD_PROTOCOL_MAX=5, as against a server that predates the op) records the composite
 * instead and gets the bits of the op's lowering (local:cpu with TENSORD_FORCE_LOWERING=1),
 * with gradients within rounding of the op's rule; a protocol cap outside 1..6 fails
 * td_connect naming the variable. */
#include "suite_fixture.h"
#include "tensord.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define L 70
#define S 90
#define E 16
#define EV 8
#define NB 2

typedef struct result {
    float y[NB * L * EV];
    float gq[NB * L * E];
} result;

static void fill(float *p, int n, unsigned seed)
{
    for (int i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = (float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
}

static void run(const char *uri, result *out)
{
    static float q[NB * L * E], k[NB * S * E], v[NB * S * EV], m[L * S], w[NB * L * EV];
    fill(q, NB * L * E, 1);
    fill(k, NB * S * E, 2);
    fill(v, NB * S * EV, 3);
    fill(m, L * S, 4);
    fill(w, NB * L * EV, 5);
    td_context *c = NULL;
    cr_assert_eq(td_connect(uri, NULL, &c), TD_OK, "%s: %s", uri, td_connect_error());
    td_tensor *tq = td_from_host(c, TD_F32, 3, (int64_t[]){NB, L, E}, q);
    td_tensor *tk = td_from_host(c, TD_F32, 3, (int64_t[]){NB, S, E}, k);
    td_tensor *tv = td_from_host(c, TD_F32, 3, (int64_t[]){NB, S, EV}, v);
    td_tensor *tm = td_from_host(c, TD_F32, 2, (int64_t[]){L, S}, m);
    td_tensor *tw = td_from_host(c, TD_F32, 3, (int64_t[]){NB, L, EV}, w);
    cr_assert_eq(td_requires_grad(tq, true), TD_OK, "%s", td_last_error(c));
    td_tensor *y = td_scaled_dot_product_attention(tq, tk, tv, tm, true, 0.3);
    cr_assert_not_null(y, "%s: %s", uri, td_last_error(c));
    td_tensor *loss = td_sum(td_mul(y, tw), 0, NULL, false);
    cr_assert_not_null(loss, "%s", td_last_error(c));
    cr_assert_eq(td_backward(loss), TD_OK, "%s: %s", uri, td_last_error(c));
    cr_assert_eq(td_read(y, out->y, sizeof out->y), TD_OK, "%s", td_last_error(c));
    td_tensor *g = td_grad(tq);
    cr_assert_not_null(g, "%s", td_last_error(c));
    cr_assert_eq(td_read(g, out->gq, sizeof out->gq), TD_OK, "%s", td_last_error(c));
    td_close(c);
}

static void expect_close(const float *a, const float *b, int n, const char *what)
{
    for (int i = 0; i < n; i++)
        cr_assert(fabsf(a[i] - b[i]) <= 1e-5f * (1.0f + fabsf(b[i])), "%s [%d]: %.9g vs %.9g",
                  what, i, a[i], b[i]);
}

Test(attention, remote_equals_local, .init = start_tcp, .fini = stop, .timeout = 60)
{
    char uri[600];
    td_test_server_uri(&srv, "cpu", uri, sizeof uri);
    static result a, b;
    run("local:cpu", &a);
    run(uri, &b);
    cr_assert(memcmp(a.y, b.y, sizeof a.y) == 0, "remote y differs from local:cpu");
    cr_assert(memcmp(a.gq, b.gq, sizeof a.gq) == 0, "remote dq differs from local:cpu");
}

Test(attention, protocol_5_records_the_composite, .init = start_tcp, .fini = stop,
     .timeout = 60)
{
    char uri[600];
    td_test_server_uri(&srv, "cpu", uri, sizeof uri);
    static result lowered, native, old;
    setenv("TENSORD_FORCE_LOWERING", "1", 1);
    run("local:cpu", &lowered);
    unsetenv("TENSORD_FORCE_LOWERING");
    run("local:cpu", &native);
    setenv("TENSORD_PROTOCOL_MAX", "5", 1);
    run(uri, &old);
    unsetenv("TENSORD_PROTOCOL_MAX");
    cr_assert(memcmp(old.y, lowered.y, sizeof old.y) == 0,
              "protocol 5: y differs from the op's lowering");
    cr_assert(memcmp(native.y, lowered.y, sizeof native.y) != 0,
              "the native kernel and the lowering gave the same bits: the test would not see "
              "which one ran");
    expect_close(old.gq, native.gq, NB * L * E, "protocol 5 dq vs the op's rule");
}

Test(attention, protocol_cap_outside_the_range_is_refused, .init = start_tcp, .fini = stop)
{
    char uri[600];
    td_test_server_uri(&srv, "cpu", uri, sizeof uri);
    static const char *const bad[] = {"0", "7", "six", "-1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv("TENSORD_PROTOCOL_MAX", bad[i], 1);
        td_context *c = NULL;
        td_status st = td_connect(uri, NULL, &c);
        unsetenv("TENSORD_PROTOCOL_MAX");
        cr_assert_eq(st, TD_EINVAL, "TENSORD_PROTOCOL_MAX=%s: status %d", bad[i], (int)st);
        cr_assert_null(c);
        cr_assert(strstr(td_connect_error(), "TENSORD_PROTOCOL_MAX") != NULL, "%s",
                  td_connect_error());
    }
}

/* mlp_grads.c — the Fashion-MNIST example trains on td_backward's gradients; its old
 * hand-written backward pass (examples/fashion-mnist/mlp.c, hand_grads) is the oracle: on a
 * random batch both give the same loss bits and the same gradients within rounding. The
 * tolerance: each gradient element is a sum of at most 784 (w1), 128 (b1) or 256 products
 * evaluated in f32 in another order, so |autodiff - hand| <= 1e-5 (max |hand| + 1e-3)
 * per tensor, far below any wrong rule (a sign, a factor of the batch, a missing term) and
 * far above f32 reassociation noise. Also: a training step changes the parameters and a
 * few steps lower the loss.
 */
#include "mlp.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#define B 32

static void read_all(td_tensor *t, float **out, int64_t *n)
{
    *n = td_nelem(t);
    *out = malloc((size_t)*n * sizeof(float));
    cr_assert_not_null(*out);
    cr_assert_eq(td_read(t, *out, (size_t)*n * sizeof(float)), TD_OK, "%s",
                 td_last_error(td_tensor_context(t)));
}

Test(mlp, autodiff_gradients_match_the_hand_written_backward)
{
    td_context *c;
    cr_assert_eq(td_connect("local:cpu", NULL, &c), TD_OK, "%s", td_connect_error());
    fm_mlp m;
    cr_assert_eq(fm_mlp_init(&m, c, 784, 128, 10, 3), TD_OK, "%s", td_last_error(c));
    static float x[B * 784];
    int64_t y[B];
    unsigned s = 1;
    for (int i = 0; i < B * 784; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)(s >> 8) / 16777216.0f;
    }
    for (int i = 0; i < B; i++) y[i] = (i * 7) % 10;
    td_tensor *xt = td_from_host(c, TD_F32, 2, (int64_t[]){B, 784}, x);
    td_tensor *yt = td_from_host(c, TD_I64, 2, (int64_t[]){B, 1}, y);
    /* one step first, so the biases are no longer zero */
    td_tensor *l0;
    cr_assert_eq(fm_mlp_train_step(&m, xt, yt, 0.1, 0.9, &l0), TD_OK, "%s", td_last_error(c));
    td_release(l0);
    td_tensor *ga[4], *gh[4], *la, *lh;
    cr_assert_eq(fm_mlp_gradients(&m, xt, yt, false, ga, &la), TD_OK, "%s", td_last_error(c));
    cr_assert_eq(fm_mlp_gradients(&m, xt, yt, true, gh, &lh), TD_OK, "%s", td_last_error(c));
    float fa, fh;
    cr_assert_eq(td_read(la, &fa, 4), TD_OK);
    cr_assert_eq(td_read(lh, &fh, 4), TD_OK);
    cr_expect_eq(fa, fh, "the same forward pass: loss %.9g vs %.9g", fa, fh);
    for (int i = 0; i < 4; i++) {
        float *a, *h;
        int64_t na, nh;
        read_all(ga[i], &a, &na);
        read_all(gh[i], &h, &nh);
        cr_assert_eq(na, nh);
        double mx = 0, diff = 0;
        for (int64_t j = 0; j < na; j++) {
            mx = fmax(mx, fabs(h[j]));
            diff = fmax(diff, fabs((double)a[j] - h[j]));
        }
        cr_expect(mx > 0, "gradient %s is not all zero", fm_mlp_param_names[i]);
        cr_expect(diff <= 1e-5 * (mx + 1e-3), "%s: autodiff and hand differ by %g (max |g| %g)",
                  fm_mlp_param_names[i], diff, mx);
        free(a);
        free(h);
        td_release(ga[i]);
        td_release(gh[i]);
    }
    td_release(la);
    td_release(lh);
    float first = 0, last = 0;
    for (int k = 0; k < 5; k++) {
        td_tensor *l;
        cr_assert_eq(fm_mlp_train_step(&m, xt, yt, 0.05, 0.9, &l), TD_OK, "%s", td_last_error(c));
        cr_assert_eq(td_read(l, k == 0 ? &first : &last, 4), TD_OK);
        td_release(l);
    }
    cr_expect(last < first, "training lowers the loss: %g -> %g", first, last);
    td_release(xt);
    td_release(yt);
    fm_mlp_fini(&m);
    td_close(c);
}

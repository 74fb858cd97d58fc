/* autodiff.c — td_backward's gradients against central finite differences (issue 15).
 *
 * Each case builds y = f(inputs) on local:cpu in float64 from small inputs drawn from a
 * fixed seed, takes the loss L = sum(y * W) with a fixed random W of y's shape (so every
 * output element matters with its own weight), and compares d L / d input from td_backward
 * with the central difference (L(x + h e_j) - L(x - h e_j)) / 2h, h = 1e-6, for every
 * element j of every input. The reference is independent of the code under test: it only
 * evaluates the forward ops. Tolerance: |analytic - numeric| <= 1e-6 (1 + |numeric|); the
 * central difference's own error is h^2 |f'''| / 6 (about 1e-12 here) plus the rounding of
 * L, about 2^-53 |L| / h (1e-10 |L|), so a wrong rule (off by a factor, a sign, a missing
 * broadcast sum) is far outside it and a right one far inside. Inputs avoid the points
 * where a function is not differentiable (0 for abs/relu, ties for max, bounds for clamp).
 * Further tests: an op without a rule, integer tensors, no-grad scopes, detach,
 * accumulation and td_zero_grad, and one tensor used twice.
 */
#include "tensord.h"
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#define MAXN 256
#define H 1e-6

static td_context *ctx;

static void setup(void)
{
    cr_assert_eq(td_connect("local:cpu", NULL, &ctx), TD_OK, "%s", td_connect_error());
}
static void teardown(void) { td_close(ctx); }
TestSuite(autodiff, .init = setup, .fini = teardown);

enum gen { ANY, POS, SMALL, AWAY };

typedef struct input {
    int rank;
    int64_t dims[5];
    enum gen gen;
} input;

typedef td_tensor *(*build_fn)(td_tensor **in);

static uint64_t g_state;
static double unit(void) /* splitmix64 -> [0, 1) */
{
    uint64_t z = (g_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (double)((z ^ (z >> 31)) >> 11) * 0x1p-53;
}

static int64_t count(const input *in)
{
    int64_t n = 1;
    for (int i = 0; i < in->rank; i++) n *= in->dims[i];
    return n;
}

static void fill(const input *in, double *x)
{
    for (int64_t j = 0; j < count(in); j++) {
        double u = unit();
        switch (in->gen) {
        case ANY: x[j] = 4 * u - 2; break;
        case POS: x[j] = 0.5 + 2 * u; break;
        case SMALL: x[j] = 1.6 * u - 0.8; break;
        case AWAY: /* |x| in [0.3, 1.8], and distinct: away from 0, ties and integers */
            x[j] = (0.3 + 1.5 * u) * (j % 2 ? -1 : 1) + 0.013 * (double)j;
            break;
        }
    }
}

/* L = sum(f(x) * W) for host inputs xs; also returns the output's element count. */
static double loss_of(build_fn f, int n_in, const input *ins, double *const *xs, const double *w,
                      bool mark, td_tensor **made, td_tensor **loss_out)
{
    td_tensor *t[4];
    for (int i = 0; i < n_in; i++) {
        t[i] = td_from_host(ctx, TD_F64, ins[i].rank, ins[i].dims, xs[i]);
        cr_assert_not_null(t[i], "%s", td_last_error(ctx));
        if (mark) cr_assert_eq(td_requires_grad(t[i], true), TD_OK, "%s", td_last_error(ctx));
    }
    td_tensor *y = f(t);
    cr_assert_not_null(y, "%s", td_last_error(ctx));
    td_tensor *wt = td_from_host(ctx, TD_F64, td_rank(y), td_dims(y), w);
    td_tensor *p = td_mul(y, wt);
    td_tensor *l = td_sum(p, 0, NULL, false);
    cr_assert_not_null(l, "%s", td_last_error(ctx));
    double v;
    cr_assert_eq(td_read_scalar(l, &v), TD_OK, "%s", td_last_error(ctx));
    td_release(y);
    td_release(wt);
    td_release(p);
    if (loss_out != NULL) *loss_out = l;
    else td_release(l);
    for (int i = 0; i < n_in; i++) {
        if (made != NULL) made[i] = t[i];
        else td_release(t[i]);
    }
    return v;
}

static void gradcheck(const char *name, build_fn f, int n_in, const input *ins)
{
    g_state = 0x5eed;
    for (const char *c = name; *c; c++) g_state = g_state * 31 + (uint64_t)*c;
    double x[4][MAXN], *xs[4] = {x[0], x[1], x[2], x[3]};
    for (int i = 0; i < n_in; i++) {
        cr_assert_leq(count(&ins[i]), MAXN);
        fill(&ins[i], x[i]);
    }
    /* the output's shape, for W */
    td_tensor *probe[4];
    for (int i = 0; i < n_in; i++)
        probe[i] = td_from_host(ctx, TD_F64, ins[i].rank, ins[i].dims, x[i]);
    td_tensor *py = f(probe);
    cr_assert_not_null(py, "%s: %s", name, td_last_error(ctx));
    int64_t ny = td_nelem(py);
    td_release(py);
    for (int i = 0; i < n_in; i++) td_release(probe[i]);
    double w[512];
    cr_assert_leq(ny, 512);
    for (int64_t j = 0; j < ny; j++) w[j] = unit() * 2 - 1;

    td_tensor *leaf[4], *loss;
    loss_of(f, n_in, ins, xs, w, true, leaf, &loss);
    cr_assert_eq(td_backward(loss), TD_OK, "%s: %s", name, td_last_error(ctx));
    td_release(loss);
    for (int i = 0; i < n_in; i++) {
        double ga[MAXN];
        td_tensor *g = td_grad(leaf[i]);
        cr_assert_not_null(g, "%s: input %d: %s", name, i, td_last_error(ctx));
        cr_assert_eq(td_nelem(g), count(&ins[i]), "%s: gradient %d has the input's size", name, i);
        cr_assert_eq(td_read(g, ga, sizeof(double) * (size_t)count(&ins[i])), TD_OK, "%s",
                     td_last_error(ctx));
        for (int64_t j = 0; j < count(&ins[i]); j++) {
            double keep = x[i][j];
            x[i][j] = keep + H;
            double lp = loss_of(f, n_in, ins, xs, w, false, NULL, NULL);
            x[i][j] = keep - H;
            double lm = loss_of(f, n_in, ins, xs, w, false, NULL, NULL);
            x[i][j] = keep;
            double num = (lp - lm) / (2 * H);
            cr_expect(fabs(ga[j] - num) <= 1e-6 * (1 + fabs(num)),
                      "%s: d L / d input %d [%lld]: td_backward %.12g, finite difference %.12g",
                      name, i, (long long)j, ga[j], num);
        }
    }
    for (int i = 0; i < n_in; i++) td_release(leaf[i]);
}

#define IN(r, g, ...) {r, {__VA_ARGS__}, g}

/* ---- unary ---- */
#define UNARY(fn, gen)                                                                     \
    static td_tensor *b_##fn(td_tensor **in) { return td_##fn(in[0]); }                    \
    Test(autodiff, fn) { gradcheck(#fn, b_##fn, 1, (input[]){IN(2, gen, 2, 3)}); }
UNARY(neg, ANY)
UNARY(abs, AWAY)
UNARY(exp, ANY)
UNARY(log, POS)
UNARY(sqrt, POS)
UNARY(rsqrt, POS)
UNARY(tanh, ANY)
UNARY(sigmoid, ANY)
UNARY(relu, AWAY)
UNARY(silu, ANY)
UNARY(sin, ANY)
UNARY(cos, ANY)
UNARY(tan, SMALL)
UNARY(erf, ANY)
UNARY(log1p, POS)
UNARY(expm1, ANY)
UNARY(log2, POS)
UNARY(log10, POS)
UNARY(reciprocal, POS)
UNARY(floor, AWAY)
UNARY(sign, AWAY)

static td_tensor *b_softplus(td_tensor **in) { return td_softplus(in[0], 2.0, 3.0); }
static td_tensor *b_leaky(td_tensor **in) { return td_leaky_relu(in[0], 0.1); }
static td_tensor *b_elu(td_tensor **in) { return td_elu(in[0], 1.5); }
static td_tensor *b_gelu(td_tensor **in) { return td_gelu(in[0], false); }
static td_tensor *b_clamp(td_tensor **in) { return td_clamp(in[0], -0.95, 1.05); }
/* softplus crosses its threshold (beta x > 3 is linear) within ANY's range */
Test(autodiff, softplus) { gradcheck("softplus", b_softplus, 1, (input[]){IN(2, ANY, 2, 3)}); }
Test(autodiff, leaky_relu) { gradcheck("leaky_relu", b_leaky, 1, (input[]){IN(2, AWAY, 2, 3)}); }
Test(autodiff, elu) { gradcheck("elu", b_elu, 1, (input[]){IN(2, AWAY, 2, 3)}); }
Test(autodiff, gelu) { gradcheck("gelu", b_gelu, 1, (input[]){IN(2, ANY, 2, 3)}); }
Test(autodiff, clamp) { gradcheck("clamp", b_clamp, 1, (input[]){IN(2, AWAY, 2, 3)}); }

/* ---- binary, with broadcasting: [2, 3] (op) [3] and [2, 1] (op) [1, 3] ---- */
#define BINARY(fn, ga, gb)                                                                 \
    static td_tensor *b_##fn(td_tensor **in) { return td_##fn(in[0], in[1]); }             \
    Test(autodiff, fn)                                                                     \
    {                                                                                      \
        gradcheck(#fn, b_##fn, 2, (input[]){IN(2, ga, 2, 3), IN(1, gb, 3)});               \
        gradcheck(#fn " outer", b_##fn, 2, (input[]){IN(2, ga, 2, 1), IN(2, gb, 1, 3)});   \
    }
BINARY(add, ANY, ANY)
BINARY(sub, ANY, ANY)
BINARY(mul, ANY, ANY)
BINARY(div, ANY, POS)
BINARY(pow, POS, ANY)
BINARY(maximum, AWAY, ANY)
BINARY(minimum, AWAY, ANY)

static td_tensor *b_where(td_tensor **in)
{
    td_tensor *zero = td_full(ctx, TD_F64, 0, NULL, 0.0);
    td_tensor *cond = td_gt(in[0], zero);
    td_tensor *y = td_where(cond, td_mul(in[0], in[0]), in[1]);
    td_release(zero);
    td_release(cond);
    return y;
}
Test(autodiff, where)
{
    gradcheck("where", b_where, 2, (input[]){IN(2, AWAY, 2, 3), IN(1, ANY, 3)});
}

static td_tensor *b_cast(td_tensor **in) { return td_cast(in[0], TD_F64); }
Test(autodiff, cast) { gradcheck("cast", b_cast, 1, (input[]){IN(2, ANY, 2, 3)}); }

/* ---- reductions ---- */
static td_tensor *b_sum0(td_tensor **in) { return td_sum(in[0], 1, (int[]){0}, false); }
static td_tensor *b_mean1(td_tensor **in) { return td_mean(in[0], 1, (int[]){1}, true); }
static td_tensor *b_max(td_tensor **in) { return td_max(in[0], 1, (int[]){-1}, false); }
static td_tensor *b_min(td_tensor **in) { return td_min(in[0], 2, (int[]){0, 2}, true); }
static td_tensor *b_lse(td_tensor **in) { return td_logsumexp(in[0], 1, (int[]){1}, false); }
static td_tensor *b_var(td_tensor **in) { return td_var(in[0], 1, (int[]){1}, false, 1.0); }
static td_tensor *b_std(td_tensor **in) { return td_std(in[0], 2, (int[]){0, 1}, true, 0.0); }
static td_tensor *b_l1(td_tensor **in) { return td_norm(in[0], 1.0, 1, (int[]){0}, false); }
static td_tensor *b_cumsum(td_tensor **in) { return td_cumsum(in[0], 1); }
Test(autodiff, sum) { gradcheck("sum", b_sum0, 1, (input[]){IN(2, ANY, 2, 3)}); }
Test(autodiff, mean) { gradcheck("mean", b_mean1, 1, (input[]){IN(2, ANY, 2, 3)}); }
Test(autodiff, max) { gradcheck("max", b_max, 1, (input[]){IN(2, AWAY, 2, 3)}); }
Test(autodiff, min) { gradcheck("min", b_min, 1, (input[]){IN(3, AWAY, 2, 3, 2)}); }
Test(autodiff, logsumexp) { gradcheck("logsumexp", b_lse, 1, (input[]){IN(2, ANY, 2, 3)}); }
Test(autodiff, var) { gradcheck("var", b_var, 1, (input[]){IN(2, ANY, 2, 4)}); }
Test(autodiff, std) { gradcheck("std", b_std, 1, (input[]){IN(3, ANY, 2, 3, 2)}); }
Test(autodiff, norm_l1) { gradcheck("norm_l1", b_l1, 1, (input[]){IN(2, AWAY, 2, 3)}); }
Test(autodiff, cumsum) { gradcheck("cumsum", b_cumsum, 1, (input[]){IN(2, ANY, 2, 4)}); }

/* ---- matmul: plain, and batch dims broadcast ---- */
static td_tensor *b_matmul(td_tensor **in) { return td_matmul(in[0], in[1]); }
Test(autodiff, matmul)
{
    gradcheck("matmul", b_matmul, 2, (input[]){IN(2, ANY, 3, 4), IN(2, ANY, 4, 2)});
    gradcheck("matmul batched", b_matmul, 2, (input[]){IN(3, ANY, 2, 3, 4), IN(2, ANY, 4, 2)});
}

/* ---- movement ---- */
static td_tensor *b_reshape(td_tensor **in)
{
    return td_mul(td_reshape(in[0], 2, (int64_t[]){3, 2}), td_reshape(in[0], 2, (int64_t[]){3, 2}));
}
static td_tensor *b_permute(td_tensor **in) { return td_permute(in[0], (int[]){2, 0, 1}); }
static td_tensor *b_slice(td_tensor **in)
{
    return td_slice(in[0], (int64_t[]){1, 0}, (int64_t[]){3, 2});
}
static td_tensor *b_concat(td_tensor **in)
{
    return td_concat(2, (td_tensor *[]){in[0], in[1]}, 1);
}
static td_tensor *b_expand(td_tensor **in) { return td_expand(in[0], 3, (int64_t[]){2, 3, 4}); }
static td_tensor *b_softmax(td_tensor **in) { return td_softmax(in[0], 1); }
static td_tensor *b_log_softmax(td_tensor **in) { return td_log_softmax(in[0], 0); }
Test(autodiff, reshape) { gradcheck("reshape", b_reshape, 1, (input[]){IN(2, ANY, 2, 3)}); }
Test(autodiff, permute) { gradcheck("permute", b_permute, 1, (input[]){IN(3, ANY, 2, 3, 2)}); }
Test(autodiff, slice) { gradcheck("slice", b_slice, 1, (input[]){IN(2, ANY, 4, 3)}); }
Test(autodiff, concat)
{
    gradcheck("concat", b_concat, 2, (input[]){IN(2, ANY, 2, 3), IN(2, ANY, 2, 1)});
}
Test(autodiff, expand) { gradcheck("expand", b_expand, 1, (input[]){IN(2, ANY, 3, 1)}); }
Test(autodiff, softmax) { gradcheck("softmax", b_softmax, 1, (input[]){IN(2, ANY, 2, 4)}); }
Test(autodiff, log_softmax)
{
    gradcheck("log_softmax", b_log_softmax, 1, (input[]){IN(2, ANY, 3, 2)});
}

/* attention: one op (native on the CPU); its rule recomputes the weights */
static td_tensor *b_attn(td_tensor **in)
{
    return td_scaled_dot_product_attention(in[0], in[1], in[2], NULL, false, 0);
}
static td_tensor *b_attn_causal_fmask(td_tensor **in)
{
    return td_scaled_dot_product_attention(in[0], in[1], in[2], in[3], true, 0.7);
}
static td_tensor *b_attn_bmask(td_tensor **in)
{
    static const uint8_t bits[4] = {1, 0, 1, 1}; /* key 1 hidden from every query */
    td_tensor *keep = td_from_host(ctx, TD_BOOL, 2, (int64_t[]){1, 4}, bits);
    td_tensor *y = td_scaled_dot_product_attention(in[0], in[1], in[2], keep, false, 0.5);
    td_release(keep);
    return y;
}
/* A query that a bool mask hides from every key: its output is NaN (0 / 0, as PyTorch), yet
 * its dq is 0 and it adds nothing to dk (PyTorch's masked_fill passes no gradient to hidden
 * scores), so dk equals dk of the same attention without that query; dv is NaN (p^T g
 * meets the NaN weights), as in PyTorch. */
static void attn_grads(const double *qv, int l, const uint8_t *mv, double *dq, double *dk,
                       double *dv)
{
    static const double kv[5 * 4] = {0.5, -1, 0.25, 2, 1, 0.75, -0.5, -1.5, -2, 0.125, 1.5,
                                     0.5, 0.25, -0.75, 1, -1, 1.25, 0.5, -0.25, 0.75};
    static const double vv[5 * 2] = {1, -2, 0.5, 0.25, -1, 3, 2, -0.5, 0.75, 1.5};
    td_tensor *q = td_from_host(ctx, TD_F64, 2, (int64_t[]){l, 4}, qv);
    td_tensor *k = td_from_host(ctx, TD_F64, 2, (int64_t[]){5, 4}, kv);
    td_tensor *v = td_from_host(ctx, TD_F64, 2, (int64_t[]){5, 2}, vv);
    td_tensor *m = td_from_host(ctx, TD_BOOL, 2, (int64_t[]){l, 5}, mv);
    cr_assert(q && k && v && m, "%s", td_last_error(ctx));
    td_requires_grad(q, true);
    td_requires_grad(k, true);
    td_requires_grad(v, true);
    td_tensor *y = td_scaled_dot_product_attention(q, k, v, m, false, 0.5);
    td_tensor *ones = td_full(ctx, TD_F64, 2, (int64_t[]){l, 2}, 1.0);
    cr_assert(y && ones, "%s", td_last_error(ctx));
    cr_assert_eq(td_backward_grad(y, ones), TD_OK, "%s", td_last_error(ctx));
    cr_assert_eq(td_read(td_grad(q), dq, sizeof(double) * (size_t)l * 4), TD_OK);
    cr_assert_eq(td_read(td_grad(k), dk, sizeof(double) * 20), TD_OK);
    cr_assert_eq(td_read(td_grad(v), dv, sizeof(double) * 10), TD_OK);
    td_tensor *all[] = {q, k, v, m, y, ones};
    for (size_t i = 0; i < 6; i++) td_release(all[i]);
}

Test(autodiff, attention_query_that_sees_no_key)
{
    static const double q3[3 * 4] = {1, 0.5, -1, 2, -0.5, 1, 1, 0.25, 0.75, -1.25, 0.5, 1};
    static const uint8_t m3[3 * 5] = {1, 0, 1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 0, 1, 1};
    static const double q2[2 * 4] = {1, 0.5, -1, 2, 0.75, -1.25, 0.5, 1};
    static const uint8_t m2[2 * 5] = {1, 0, 1, 1, 0, 1, 1, 0, 1, 1};
    double dq3[12], dk3[20], dv3[10], dq2[8], dk2[20], dv2[10];
    attn_grads(q3, 3, m3, dq3, dk3, dv3);
    attn_grads(q2, 2, m2, dq2, dk2, dv2);
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(dq3[4 + i], 0.0, "dq of the hidden query [%d]: %g", i, dq3[4 + i]);
        cr_assert_eq(dq3[i], dq2[i], "dq row 0 [%d]", i);
        cr_assert_eq(dq3[8 + i], dq2[4 + i], "dq row 2 [%d]", i);
    }
    for (int i = 0; i < 20; i++)
        cr_assert(fabs(dk3[i] - dk2[i]) <= 1e-14 * (1 + fabs(dk2[i])), "dk [%d]: %.17g vs %.17g",
                  i, dk3[i], dk2[i]);
    for (int i = 0; i < 10; i++) cr_assert(isnan(dv3[i]), "dv [%d] = %g, want NaN", i, dv3[i]);
}

Test(autodiff, scaled_dot_product_attention)
{
    gradcheck("attention, batch broadcast", b_attn, 3,
              (input[]){IN(3, ANY, 2, 3, 4), IN(2, ANY, 5, 4), IN(2, ANY, 5, 3)});
    gradcheck("attention causal, float mask", b_attn_causal_fmask, 4,
              (input[]){IN(3, ANY, 2, 4, 3), IN(3, ANY, 2, 6, 3), IN(3, ANY, 2, 6, 2),
                        IN(2, ANY, 4, 6)});
    gradcheck("attention, bool mask", b_attn_bmask, 3,
              (input[]){IN(2, ANY, 3, 3), IN(2, ANY, 4, 3), IN(2, ANY, 4, 2)});
}

/* ---- a small network: the same tensor used twice, several ops ---- */
static td_tensor *b_mlp(td_tensor **in)
{
    /* log_softmax(relu(x W1) W2 + x W1 * x W1) over classes */
    td_tensor *h = td_matmul(in[0], in[1]);
    td_tensor *a = td_relu(h);
    td_tensor *o = td_matmul(a, in[2]);
    td_tensor *hh = td_matmul(td_mul(h, h), in[2]);
    return td_log_softmax(td_add(o, hh), 1);
}
Test(autodiff, mlp)
{
    gradcheck("mlp", b_mlp, 3,
              (input[]){IN(2, ANY, 3, 4), IN(2, SMALL, 4, 5), IN(2, SMALL, 5, 2)});
}

/* ---- behaviour ---- */

static td_tensor *vec(double a, double b)
{
    td_tensor *t = td_from_host(ctx, TD_F64, 1, (int64_t[]){2}, (double[]){a, b});
    cr_assert_not_null(t, "%s", td_last_error(ctx));
    return t;
}

static void read2(td_tensor *t, double *out)
{
    cr_assert_not_null(t, "%s", td_last_error(ctx));
    cr_assert_eq(td_read(t, out, 2 * sizeof(double)), TD_OK, "%s", td_last_error(ctx));
}

Test(autodiff, op_without_rule_fails_naming_it)
{
    td_tensor *x = vec(2, 1);
    cr_assert_eq(td_requires_grad(x, true), TD_OK);
    td_tensor *s = td_sort(x, 0, false);
    td_tensor *l = td_sum(s, 0, NULL, false);
    cr_assert_eq(td_backward(l), TD_EUNSUPPORTED);
    cr_expect(strstr(td_last_error(ctx), "op sort") != NULL, "%s", td_last_error(ctx));
    cr_expect_null(td_grad(x), "nothing was computed");
}

Test(autodiff, integer_tensors_have_no_gradient)
{
    td_tensor *i = td_full(ctx, TD_I32, 1, (int64_t[]){2}, 1);
    cr_assert_eq(td_requires_grad(i, true), TD_EINVAL);
    cr_expect(strstr(td_last_error(ctx), "only float tensors") != NULL, "%s", td_last_error(ctx));
    /* a comparison stops the flow: its bool result is not taped */
    td_tensor *x = vec(1, -1);
    cr_assert_eq(td_requires_grad(x, true), TD_OK);
    td_tensor *b = td_gt(x, x);
    cr_expect(!td_is_requires_grad(b));
    cr_expect(td_is_requires_grad(td_neg(x)));
}

Test(autodiff, backward_needs_one_element_and_a_path)
{
    td_tensor *x = vec(1, 2);
    td_tensor *y = td_exp(x);
    cr_assert_eq(td_backward(td_sum(y, 0, NULL, false)), TD_EINVAL);
    cr_expect(strstr(td_last_error(ctx), "does not depend") != NULL, "%s", td_last_error(ctx));
    cr_assert_eq(td_requires_grad(x, true), TD_OK);
    cr_assert_eq(td_backward(td_exp(x)), TD_EINVAL);
    cr_expect(strstr(td_last_error(ctx), "one element") != NULL, "%s", td_last_error(ctx));
}

/* A NULL argument records its own message: before, the status was TD_EINVAL but
 * td_last_error still showed the previous failure's message. */
Test(autodiff, null_arguments_record_their_message)
{
    td_tensor *i = td_full(ctx, TD_I32, 1, (int64_t[]){2}, 1);
    cr_assert_eq(td_requires_grad(i, true), TD_EINVAL); /* an older message to replace */
    cr_expect_eq(td_requires_grad(NULL, true), TD_EINVAL);
    cr_expect_str_eq(td_last_error(NULL), "td_requires_grad: t is NULL");
    cr_expect_str_eq(td_last_error(ctx), "td_requires_grad: t is NULL");
    cr_expect_eq(td_backward(NULL), TD_EINVAL);
    cr_expect_str_eq(td_last_error(NULL), "td_backward: loss is NULL");
    cr_expect_str_eq(td_last_error(ctx), "td_backward: loss is NULL");
    cr_expect_eq(td_backward_grad(NULL, i), TD_EINVAL);
    cr_expect_str_eq(td_last_error(NULL), "td_backward_grad: out is NULL");
    td_tensor *x = vec(1, 2);
    cr_assert_eq(td_requires_grad(x, true), TD_OK);
    td_tensor *y = td_exp(x);
    cr_expect_eq(td_backward_grad(y, NULL), TD_EINVAL);
    cr_expect_eq(td_last_status(ctx), TD_EINVAL);
    cr_expect_str_eq(td_last_error(ctx), "td_backward_grad: grad is NULL");
    cr_expect_str_eq(td_last_error(NULL), "td_backward_grad: grad is NULL");
}

Test(autodiff, no_grad_scope_and_detach)
{
    td_tensor *x = vec(3, 4);
    cr_assert_eq(td_requires_grad(x, true), TD_OK);
    td_no_grad_begin(ctx);
    td_tensor *y = td_mul(x, x);
    td_no_grad_end(ctx);
    cr_expect(!td_is_requires_grad(y), "ops in a no-grad scope are not taped");
    /* d/dx (x * detach(x)) = detach(x): the detached factor is a constant */
    td_tensor *d = td_detach(x);
    cr_expect(!td_is_requires_grad(d));
    td_tensor *l = td_sum(td_mul(x, d), 0, NULL, false);
    cr_assert_eq(td_backward(l), TD_OK, "%s", td_last_error(ctx));
    double g[2];
    read2(td_grad(x), g);
    cr_expect_eq(g[0], 3.0);
    cr_expect_eq(g[1], 4.0);
}

Test(autodiff, gradients_accumulate_until_zero_grad)
{
    td_tensor *x = vec(1.5, -2);
    cr_assert_eq(td_requires_grad(x, true), TD_OK);
    for (int k = 0; k < 2; k++) { /* d/dx sum(x^2) = 2x, twice */
        td_tensor *l = td_sum(td_mul(x, x), 0, NULL, false);
        cr_assert_eq(td_backward(l), TD_OK, "%s", td_last_error(ctx));
    }
    double g[2];
    read2(td_grad(x), g);
    cr_expect_eq(g[0], 6.0);
    cr_expect_eq(g[1], -8.0);
    td_zero_grad(x);
    cr_expect_null(td_grad(x));
    cr_expect(strstr(td_last_error(ctx), "no td_backward reached it") != NULL, "%s",
              td_last_error(ctx));
    /* the tape was freed by the last backward: a second one needs a new forward pass */
    td_tensor *l = td_sum(td_mul_scalar(x, 3.0), 0, NULL, false);
    cr_assert_eq(td_backward(l), TD_OK, "%s", td_last_error(ctx));
    cr_assert_eq(td_backward(l), TD_EINVAL, "the tape is gone");
    read2(td_grad(x), g);
    cr_expect_eq(g[0], 3.0);
    cr_expect_eq(g[1], 3.0);
}

Test(autodiff, saved_values_survive_release)
{
    /* the program releases every intermediate before td_backward: the tape's aliases keep
     * the values the rules need */
    td_tensor *x = vec(0.5, 2);
    cr_assert_eq(td_requires_grad(x, true), TD_OK);
    td_tensor *e = td_exp(x);
    td_tensor *p = td_mul(e, x);
    td_tensor *l = td_sum(p, 0, NULL, false);
    td_release(e);
    td_release(p);
    cr_assert_eq(td_backward(l), TD_OK, "%s", td_last_error(ctx));
    double g[2];
    read2(td_grad(x), g);
    for (int i = 0; i < 2; i++) { /* d/dx x e^x = e^x (1 + x) */
        double v = i ? 2.0 : 0.5;
        cr_expect(fabs(g[i] - exp(v) * (1 + v)) <= 1e-15 * exp(v) * (1 + v) * 4, "%g", g[i]);
    }
}

/* ---- movement ops of issue 13 (rules: the op's adjoint, from the table's own ops) ---- */
static td_tensor *idx(const int64_t *v, int rank, const int64_t *dims)
{
    return td_from_host(ctx, TD_I64, rank, dims, v);
}
static td_tensor *b_flip(td_tensor **in) { return td_flip(in[0], 2, (int[]){0, -1}); }
static td_tensor *b_roll(td_tensor **in)
{
    return td_roll(in[0], 2, (int64_t[]){1, -4}, (int[]){0, 1});
}
static td_tensor *b_pad(td_tensor **in)
{
    return td_pad(in[0], 4, (int64_t[]){1, 2, 0, 1}, TD_PAD_CONSTANT, 0.5);
}
static td_tensor *b_repeat(td_tensor **in) { return td_repeat(in[0], 2, (int64_t[]){2, 3}); }
static td_tensor *b_tril(td_tensor **in) { return td_triu(td_tril(in[0], 1), -1); }
static td_tensor *b_masked(td_tensor **in)
{
    static const uint8_t m[3] = {1, 0, 1};
    td_tensor *mask = td_from_host(ctx, TD_BOOL, 1, (int64_t[]){3}, m);
    return td_masked_fill(in[0], mask, 7.0);
}
static td_tensor *b_gather(td_tensor **in) /* duplicate indices: gradients add */
{
    static const int64_t v[6] = {2, 0, 2, 1, 1, 1};
    return td_gather(in[0], idx(v, 2, (int64_t[]){2, 3}), 1);
}
/* one index per line (a loss picking labels): the rule's where(arange == index, g, 0) form */
static td_tensor *b_gather_one(td_tensor **in)
{
    static const int64_t v[3] = {2, 0, 1};
    return td_gather(in[0], idx(v, 2, (int64_t[]){3, 1}), 1);
}
static td_tensor *b_gather_one_axis0(td_tensor **in)
{
    static const int64_t v[4] = {1, 0, 2, 1};
    return td_gather(in[0], idx(v, 2, (int64_t[]){1, 4}), 0);
}
static td_tensor *b_index_select(td_tensor **in)
{
    static const int64_t v[4] = {2, 0, 2, 2};
    return td_index_select(in[0], idx(v, 1, (int64_t[]){4}), 0);
}
static td_tensor *b_scatter_add(td_tensor **in)
{
    static const int64_t v[4] = {1, 1, 0, 2};
    return td_scatter_add(in[0], 1, idx(v, 2, (int64_t[]){2, 2}), in[1]);
}
static td_tensor *b_index_add(td_tensor **in)
{
    static const int64_t v[3] = {2, 0, 2};
    return td_index_add(in[0], 0, idx(v, 1, (int64_t[]){3}), in[1]);
}
static td_tensor *b_split(td_tensor **in) /* the middle piece of a split, times the last */
{
    td_tensor *p[3];
    cr_assert_eq(td_split(in[0], 3, (int64_t[]){1, 2, 2}, 1, p), TD_OK, "%s", td_last_error(ctx));
    return td_mul(p[1], p[2]);
}
Test(autodiff, flip) { gradcheck("flip", b_flip, 1, (input[]){IN(2, ANY, 2, 3)}); }
Test(autodiff, roll) { gradcheck("roll", b_roll, 1, (input[]){IN(2, ANY, 2, 3)}); }
Test(autodiff, pad) { gradcheck("pad", b_pad, 1, (input[]){IN(2, ANY, 2, 3)}); }
Test(autodiff, repeat) { gradcheck("repeat", b_repeat, 1, (input[]){IN(2, ANY, 2, 3)}); }
Test(autodiff, tril_triu) { gradcheck("tril_triu", b_tril, 1, (input[]){IN(3, ANY, 2, 3, 4)}); }
Test(autodiff, masked_fill) { gradcheck("masked_fill", b_masked, 1, (input[]){IN(2, ANY, 2, 3)}); }
Test(autodiff, gather) { gradcheck("gather", b_gather, 1, (input[]){IN(2, ANY, 2, 3)}); }
Test(autodiff, gather_one_index_per_line)
{
    gradcheck("gather one", b_gather_one, 1, (input[]){IN(2, ANY, 3, 4)});
    gradcheck("gather one axis 0", b_gather_one_axis0, 1, (input[]){IN(2, ANY, 3, 4)});
}
Test(autodiff, index_select)
{
    gradcheck("index_select", b_index_select, 1, (input[]){IN(2, ANY, 3, 2)});
}
Test(autodiff, scatter_add)
{
    gradcheck("scatter_add", b_scatter_add, 2, (input[]){IN(2, ANY, 2, 3), IN(2, ANY, 2, 2)});
}
Test(autodiff, index_add)
{
    gradcheck("index_add", b_index_add, 2, (input[]){IN(2, ANY, 3, 2), IN(2, ANY, 3, 2)});
}
Test(autodiff, split) { gradcheck("split", b_split, 1, (input[]){IN(2, ANY, 2, 5)}); }

/* ---- normalisation and dropout (rules: the table's backward ops; dropout's own mask) ---- */
static td_tensor *b_layer_norm(td_tensor **in) { return td_layer_norm(in[0], 1, in[1], in[2], 1e-5); }
static td_tensor *b_rms_norm(td_tensor **in) { return td_rms_norm(in[0], 2, in[1], 1e-6); }
static td_tensor *b_group_norm(td_tensor **in) { return td_group_norm(in[0], 2, in[1], in[2], 1e-5); }
static td_tensor *b_dropout(td_tensor **in) { return td_dropout(in[0], 0.4, 77); }
Test(autodiff, layer_norm)
{
    gradcheck("layer_norm", b_layer_norm, 3,
              (input[]){IN(2, ANY, 3, 4), IN(1, ANY, 4), IN(1, ANY, 4)});
}
Test(autodiff, rms_norm)
{
    gradcheck("rms_norm", b_rms_norm, 2, (input[]){IN(3, ANY, 2, 2, 3), IN(2, ANY, 2, 3)});
}
Test(autodiff, group_norm)
{
    gradcheck("group_norm", b_group_norm, 3,
              (input[]){IN(3, ANY, 2, 4, 3), IN(1, ANY, 4), IN(1, ANY, 4)});
}
Test(autodiff, dropout) { gradcheck("dropout", b_dropout, 1, (input[]){IN(2, ANY, 3, 4)}); }

/* ---- convolution and pooling (1-, 2-, 3-d; groups, stride, dilation, padding) ---- */
static td_tensor *b_conv1d(td_tensor **in) /* stride 2, dilation 2, uneven padding, bias */
{
    td_conv_params p = {.stride = {2}, .dilation = {2}, .pad_lo = {2}, .pad_hi = {1}};
    return td_conv(in[0], in[1], in[2], &p);
}
static td_tensor *b_conv2d_groups(td_tensor **in) /* 2 groups, stride 2 with a floor */
{
    td_conv_params p = {.stride = {2, 1}, .pad_lo = {1, 0}, .pad_hi = {1, 1}, .groups = 2};
    return td_conv(in[0], in[1], NULL, &p);
}
static td_tensor *b_conv2d_same(td_tensor **in) /* padding "same" with an even kernel */
{
    td_conv_params p = {.pad_same = true, .dilation = {1, 2}};
    return td_conv(in[0], in[1], in[2], &p);
}
static td_tensor *b_conv3d(td_tensor **in)
{
    td_conv_params p = {.stride = {1, 2, 1}, .pad_lo = {1, 1, 0}, .pad_hi = {0, 1, 0}};
    return td_conv(in[0], in[1], in[2], &p);
}
static td_tensor *b_depthwise(td_tensor **in)
{
    td_conv_params p = {.pad_lo = {1, 1}, .pad_hi = {1, 1}, .groups = 3};
    return td_conv(in[0], in[1], NULL, &p);
}
Test(autodiff, conv1d)
{
    gradcheck("conv1d", b_conv1d, 3,
              (input[]){IN(3, ANY, 2, 2, 9), IN(3, ANY, 3, 2, 3), IN(1, ANY, 3)});
}
Test(autodiff, conv2d_groups)
{
    gradcheck("conv2d_groups", b_conv2d_groups, 2,
              (input[]){IN(4, ANY, 2, 4, 5, 4), IN(4, ANY, 4, 2, 3, 2)});
}
Test(autodiff, conv2d_same_dilated)
{
    gradcheck("conv2d_same", b_conv2d_same, 3,
              (input[]){IN(4, ANY, 1, 2, 5, 6), IN(4, ANY, 2, 2, 2, 2), IN(1, ANY, 2)});
}
Test(autodiff, conv3d)
{
    gradcheck("conv3d", b_conv3d, 3,
              (input[]){IN(5, ANY, 1, 2, 3, 4, 3), IN(5, ANY, 2, 2, 2, 2, 2), IN(1, ANY, 2)});
}
Test(autodiff, conv2d_depthwise)
{
    gradcheck("depthwise", b_depthwise, 2,
              (input[]){IN(4, ANY, 2, 3, 4, 4), IN(4, ANY, 3, 1, 3, 3)});
}

static td_tensor *b_convt1d(td_tensor **in) /* stride 3, output padding beyond pad_hi */
{
    td_conv_params p = {.stride = {3}, .pad_lo = {1}, .pad_hi = {0}, .output_padding = {2}};
    return td_conv_transpose(in[0], in[1], in[2], &p);
}
static td_tensor *b_convt2d(td_tensor **in) /* 2 groups, stride 2, dilation, padding */
{
    td_conv_params p = {.stride = {2, 2}, .dilation = {1, 2}, .pad_lo = {1, 1}, .pad_hi = {1, 1},
                        .groups = 2, .output_padding = {1, 0}};
    return td_conv_transpose(in[0], in[1], NULL, &p);
}
Test(autodiff, conv_transpose1d)
{
    gradcheck("conv_transpose1d", b_convt1d, 3,
              (input[]){IN(3, ANY, 2, 2, 4), IN(3, ANY, 2, 3, 3), IN(1, ANY, 3)});
}
Test(autodiff, conv_transpose2d_groups)
{
    gradcheck("conv_transpose2d", b_convt2d, 2,
              (input[]){IN(4, ANY, 1, 4, 3, 3), IN(4, ANY, 4, 1, 3, 2)});
}

static td_tensor *b_maxpool2d(td_tensor **in)
{
    td_pool_params p = {.kernel = {3, 2}, .stride = {2, 1}, .padding = {1, 0}, .ceil_mode = true};
    return td_max_pool(in[0], &p, NULL);
}
static td_tensor *b_maxpool1d_dilated(td_tensor **in)
{
    td_pool_params p = {.kernel = {2}, .stride = {2}, .dilation = {2}};
    return td_max_pool(in[0], &p, NULL);
}
static td_tensor *b_maxpool3d(td_tensor **in)
{
    td_pool_params p = {.kernel = {2, 2, 2}};
    return td_max_pool(in[0], &p, NULL);
}
static td_tensor *b_avgpool2d(td_tensor **in) /* overlapping windows, padding counted */
{
    td_pool_params p = {.kernel = {3, 3}, .stride = {2, 1}, .padding = {1, 1}};
    return td_avg_pool(in[0], &p);
}
static td_tensor *b_avgpool1d_excl(td_tensor **in) /* padding excluded, ceil mode */
{
    td_pool_params p = {.kernel = {3}, .stride = {2}, .padding = {1}, .ceil_mode = true,
                        .exclude_pad = true};
    return td_avg_pool(in[0], &p);
}
static td_tensor *b_adaptive(td_tensor **in)
{
    return td_adaptive_avg_pool(in[0], (int64_t[]){3, 2});
}
Test(autodiff, max_pool2d) { gradcheck("max_pool2d", b_maxpool2d, 1, (input[]){IN(4, AWAY, 2, 2, 5, 4)}); }
Test(autodiff, max_pool1d_dilated)
{
    gradcheck("max_pool1d", b_maxpool1d_dilated, 1, (input[]){IN(3, AWAY, 2, 2, 9)});
}
Test(autodiff, max_pool3d) { gradcheck("max_pool3d", b_maxpool3d, 1, (input[]){IN(5, AWAY, 1, 2, 4, 2, 4)}); }
Test(autodiff, avg_pool2d) { gradcheck("avg_pool2d", b_avgpool2d, 1, (input[]){IN(4, ANY, 2, 2, 5, 4)}); }
Test(autodiff, avg_pool1d_exclude_pad)
{
    gradcheck("avg_pool1d", b_avgpool1d_excl, 1, (input[]){IN(3, ANY, 2, 3, 8)});
}
Test(autodiff, adaptive_avg_pool2d)
{
    gradcheck("adaptive_avg_pool", b_adaptive, 1, (input[]){IN(4, ANY, 2, 2, 5, 5)});
}

/* ---- batch norm: training statistics from x (its gradient flows through mean and var too),
 * and given statistics that are themselves inputs ---- */
static td_tensor *b_bn_train(td_tensor **in)
{
    td_tensor *var = NULL;
    td_tensor *mean = td_batch_norm_stats(in[0], &var, NULL);
    td_tensor *y = td_batch_norm(in[0], mean, var, in[1], in[2], 1e-5);
    td_release(mean);
    td_release(var);
    return y;
}
static td_tensor *b_bn_given(td_tensor **in)
{
    return td_batch_norm(in[0], in[1], in[2], in[3], NULL, 1e-3);
}
static td_tensor *b_bn_nobias(td_tensor **in) /* 2-d x [N, C] */
{
    td_tensor *var = NULL;
    td_tensor *mean = td_batch_norm_stats(in[0], &var, NULL);
    td_tensor *y = td_batch_norm(in[0], mean, var, NULL, NULL, 1e-5);
    td_release(mean);
    td_release(var);
    return y;
}
Test(autodiff, batch_norm_training)
{
    gradcheck("batch_norm_training", b_bn_train, 3,
              (input[]){IN(4, ANY, 3, 2, 2, 3), IN(1, ANY, 2), IN(1, ANY, 2)});
}
Test(autodiff, batch_norm_given_statistics)
{
    gradcheck("batch_norm_given", b_bn_given, 4,
              (input[]){IN(3, ANY, 2, 3, 4), IN(1, ANY, 3), IN(1, POS, 3), IN(1, ANY, 3)});
}
Test(autodiff, batch_norm_2d_no_affine)
{
    gradcheck("batch_norm_2d", b_bn_nobias, 1, (input[]){IN(2, ANY, 5, 3)});
}

/* a reshape to a lower rank straight into a full reduction (the gradient arrives with the
 * reshape's output rank, 2, for an input of rank 4) */
static td_tensor *b_reshape_down(td_tensor **in)
{
    td_tensor *f = td_reshape(in[0], 2, (int64_t[]){2, 6});
    td_tensor *y = td_sum(f, 1, (int[]){1}, false);
    td_release(f);
    return y;
}
Test(autodiff, reshape_to_lower_rank)
{
    gradcheck("reshape_down", b_reshape_down, 1, (input[]){IN(4, ANY, 2, 1, 3, 2)});
}

/* interpolate: nearest and linear, up- and downsampling, both align_corners (the output is
 * linear in x, so the finite differences are exact up to rounding) */
static td_tensor *b_interp_nearest2d(td_tensor **in)
{
    return td_interpolate(in[0], (int64_t[]){5, 3}, TD_INTERP_NEAREST, false);
}
static td_tensor *b_interp_linear2d(td_tensor **in)
{
    return td_interpolate(in[0], (int64_t[]){7, 2}, TD_INTERP_LINEAR, false);
}
static td_tensor *b_interp_linear1d_align(td_tensor **in)
{
    return td_interpolate(in[0], (int64_t[]){9}, TD_INTERP_LINEAR, true);
}
static td_tensor *b_interp_trilinear(td_tensor **in)
{
    return td_interpolate(in[0], (int64_t[]){3, 2, 5}, TD_INTERP_LINEAR, false);
}
Test(autodiff, interpolate_nearest2d)
{
    gradcheck("interp_nearest", b_interp_nearest2d, 1, (input[]){IN(4, ANY, 2, 2, 3, 4)});
}
Test(autodiff, interpolate_bilinear)
{
    gradcheck("interp_bilinear", b_interp_linear2d, 1, (input[]){IN(4, ANY, 1, 2, 3, 4)});
}
Test(autodiff, interpolate_linear_align_corners)
{
    gradcheck("interp_linear_align", b_interp_linear1d_align, 1, (input[]){IN(3, ANY, 2, 2, 4)});
}
Test(autodiff, interpolate_trilinear)
{
    gradcheck("interp_trilinear", b_interp_trilinear, 1, (input[]){IN(5, ANY, 1, 1, 2, 3, 3)});
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
TestSuite(autodiff_devices, .init = setup_two, .fini = teardown_two);

static const double w6[6] = {0.5, -1.25, 2.0, -0.75, 1.5, 3.0};

/* w (f64 [2, 3], w6) on `dev`, marked. */
static td_tensor *w_on(const char *dev)
{
    td_tensor *w = td_from_host(two, TD_F64, 2, (int64_t[]){2, 3}, w6);
    td_tensor *m = td_to_device(w, dev);
    cr_assert_not_null(m, "%s", td_last_error(two));
    td_release(w);
    cr_assert_eq(td_requires_grad(m, true), TD_OK, "%s", td_last_error(two));
    return m;
}

/* td_backward on a loss held by the second device: the seed of ones was made on the first
 * (every such backward failed with mixed devices), and so were the constants of several
 * rules (relu's 0, sqrt's 2 through td_mul_scalar, slice's zero padding). Expected
 * gradients by hand: d/dw sum(w w) = 2w; d/dw [sum(sqrt(w w + 1)) + sum(relu(w))
 * + 3 sum(w[:, 1:3])] = w / sqrt(w w + 1) + (w > 0) + 3 [column >= 1]. */
Test(autodiff_devices, backward_on_the_second_device)
{
    td_tensor *w = w_on("cpu:1");
    td_tensor *loss = td_sum(td_mul(w, w), 0, NULL, false);
    cr_assert_str_eq(td_tensor_device(loss), "cpu:1");
    cr_assert_eq(td_backward(loss), TD_OK, "%s", td_last_error(two));
    td_tensor *g = td_grad(w);
    cr_assert_not_null(g, "%s", td_last_error(two));
    cr_expect_str_eq(td_tensor_device(g), "cpu:1");
    double got[6];
    cr_assert_eq(td_read(g, got, sizeof got), TD_OK, "%s", td_last_error(two));
    for (int i = 0; i < 6; i++) cr_expect_eq(got[i], 2 * w6[i], "element %d: %g", i, got[i]);
    td_zero_grad(w);

    td_tensor *a = td_sum(td_sqrt(td_add_scalar(td_mul(w, w), 1.0)), 0, NULL, false);
    td_tensor *b = td_sum(td_relu(w), 0, NULL, false);
    td_tensor *c = td_mul_scalar(td_sum(td_slice(w, (int64_t[]){0, 1}, (int64_t[]){2, 3}), 0,
                                        NULL, false), 3.0);
    cr_assert_not_null(c, "%s", td_last_error(two));
    td_tensor *l2 = td_add(td_add(a, b), c);
    cr_assert_not_null(l2, "%s", td_last_error(two));
    cr_assert_eq(td_backward(l2), TD_OK, "%s", td_last_error(two));
    cr_assert_eq(td_read(td_grad(w), got, sizeof got), TD_OK, "%s", td_last_error(two));
    for (int i = 0; i < 6; i++) {
        const double x = w6[i];
        const double want = x / sqrt(x * x + 1) + (x > 0) + (i % 3 >= 1 ? 3 : 0);
        cr_expect(fabs(got[i] - want) <= 1e-15 * (1 + fabs(want)), "element %d: %.17g, want "
                  "%.17g", i, got[i], want);
    }
}

/* A gradient given on another device than the tensor is refused by name, before any op. */
Test(autodiff_devices, backward_grad_on_another_device_is_refused)
{
    td_tensor *w = w_on("cpu:1");
    td_tensor *y = td_mul(w, w);
    td_tensor *g0 = td_full(two, TD_F64, 2, (int64_t[]){2, 3}, 1.0);
    cr_expect_eq(td_backward_grad(y, g0), TD_EINVAL);
    cr_expect(strstr(td_last_error(two), "the gradient is on device cpu:0, the tensor on "
                                         "cpu:1") != NULL, "%s", td_last_error(two));
    td_tensor *g1 = td_to_device(g0, "cpu:1");
    cr_assert_eq(td_backward_grad(y, g1), TD_OK, "%s", td_last_error(two));
    double got[6];
    cr_assert_eq(td_read(td_grad(w), got, sizeof got), TD_OK, "%s", td_last_error(two));
    for (int i = 0; i < 6; i++) cr_expect_eq(got[i], 2 * w6[i]);
}

/* td_to_device is differentiable: the gradient goes back with td_to_device to the source
 * device. L = to_device(sum(exp(m) c), cpu:0) + sum(w w), m = to_device(w, cpu:1), c on
 * cpu:1; by hand dL/dw = exp(w) c + 2w. The same L on one device (no moves) must give the
 * same bits: the moves copy bits, and the CPU devices run the same kernels. Before, the
 * moved tensor was not on the tape ("does not depend on a tensor that requires a
 * gradient"). */
Test(autodiff_devices, gradient_through_to_device)
{
    static const double c6[6] = {1.0, 2.0, -0.5, 0.25, 3.0, -1.5};
    double moved[6], plain[6];
    for (int pass = 0; pass < 2; pass++) {
        td_tensor *w = w_on("cpu:0");
        td_tensor *c = td_from_host(two, TD_F64, 2, (int64_t[]){2, 3}, c6);
        td_tensor *m = w, *cm = c;
        if (pass == 0) {
            m = td_to_device(w, "cpu:1");
            cm = td_to_device(c, "cpu:1");
            cr_assert_not_null(m, "%s", td_last_error(two));
            cr_expect(td_is_requires_grad(m), "a moved tensor that requires grad is taped");
            cr_expect(!td_is_requires_grad(cm), "a moved constant is not");
        }
        td_tensor *a = td_sum(td_mul(td_exp(m), cm), 0, NULL, false);
        if (pass == 0) {
            cr_expect_str_eq(td_tensor_device(a), "cpu:1");
            a = td_to_device(a, "cpu:0");
        }
        td_tensor *l = td_add(a, td_sum(td_mul(w, w), 0, NULL, false));
        cr_assert_not_null(l, "%s", td_last_error(two));
        cr_assert_eq(td_backward(l), TD_OK, "%s", td_last_error(two));
        td_tensor *g = td_grad(w);
        cr_assert_not_null(g, "%s", td_last_error(two));
        cr_expect_str_eq(td_tensor_device(g), "cpu:0", "the gradient is where w is");
        cr_assert_eq(td_read(g, pass == 0 ? moved : plain, sizeof moved), TD_OK, "%s",
                     td_last_error(two));
        td_release(w);
    }
    cr_expect(memcmp(moved, plain, sizeof moved) == 0, "through the moves %.17g, on one "
              "device %.17g", moved[0], plain[0]);
    for (int i = 0; i < 6; i++) {
        const double want = exp(w6[i]) * c6[i] + 2 * w6[i];
        cr_expect(fabs(moved[i] - want) <= 1e-15 * (1 + fabs(want)), "element %d: %.17g, "
                  "want %.17g", i, moved[i], want);
    }
}

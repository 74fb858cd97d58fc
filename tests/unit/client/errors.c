/* errors.c — every public op function reports its own failures (issue 11, item 5).
 *
 * The walk calls each function declared `td_tensor *td_...(` in include/tensord.h with bad
 * arguments (NULL tensors, contexts and arrays, negative, zero and too large counts, bad
 * axes, ranks and dims, wrong dtypes, inputs of different contexts) and checks, for every
 * call: it returns NULL, td_last_status(NULL) is not TD_OK and td_last_error(NULL) starts
 * with the function's name; where a context is reachable from the arguments, the same holds
 * for td_last_status(ctx) / td_last_error(ctx). A second test reads include/tensord.h and
 * fails if it declares an op function the walk did not check, so new ops must be added
 * here. Further tests: a chain keeps the first failure on its context, a context-free
 * failure (td_concat(0, ...)) shows on the context only until the next op on it.
 */
#include "tensord.h"
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static td_context *ctx, *other;
static td_tensor *f2x3, *f3x2, *i2x3, *b2x3, *f_other, *idx2x1;

#define MAX_NAMES 256
static const char *checked[MAX_NAMES];
static int n_checked;

static void setup(void)
{
    cr_assert_eq(td_connect("local:cpu", NULL, &ctx), TD_OK, "%s", td_connect_error());
    cr_assert_eq(td_connect("local:cpu", NULL, &other), TD_OK, "%s", td_connect_error());
    f2x3 = td_full(ctx, TD_F32, 2, (int64_t[]){2, 3}, 1.0);
    f3x2 = td_full(ctx, TD_F32, 2, (int64_t[]){3, 2}, 1.0);
    i2x3 = td_full(ctx, TD_I32, 2, (int64_t[]){2, 3}, 1.0);
    b2x3 = td_full(ctx, TD_BOOL, 2, (int64_t[]){2, 3}, 1.0);
    idx2x1 = td_full(ctx, TD_I64, 2, (int64_t[]){2, 1}, 0.0);
    f_other = td_full(other, TD_F32, 2, (int64_t[]){2, 3}, 1.0);
    cr_assert(f2x3 && f3x2 && i2x3 && b2x3 && idx2x1 && f_other, "%s", td_last_error(ctx));
}

static void teardown(void)
{
    td_close(ctx);
    td_close(other);
}

TestSuite(op_errors, .init = setup, .fini = teardown);

static bool names(const char *msg, const char *api)
{
    size_t n = strlen(api);
    return strncmp(msg, api, n) == 0 && (msg[n] == ':' || msg[n] == ' ');
}

static void note_checked(const char *api)
{
    for (int i = 0; i < n_checked; i++)
        if (strcmp(checked[i], api) == 0) return;
    cr_assert_lt(n_checked, MAX_NAMES);
    checked[n_checked++] = api;
}

/* A successful op on c: afterwards c has no failure newer than its last op. */
static void fresh(td_context *c)
{
    td_tensor *t = td_full(c, TD_F32, 0, NULL, 0.0);
    cr_assert_not_null(t, "%s", td_last_error(c));
    td_release(t);
}

/* r came from a bad call of `api` (described by `what`); on_ctx: the context the caller
 * would ask (NULL: only the thread's record is checked). */
static void expect_fail(td_tensor *r, const char *api, td_context *on_ctx, const char *what)
{
    note_checked(api);
    cr_assert_null(r, "%s (%s) returned a tensor", api, what);
    cr_assert_neq(td_last_status(NULL), TD_OK, "%s (%s): thread status TD_OK", api, what);
    cr_assert(names(td_last_error(NULL), api), "%s (%s): thread message \"%s\"", api, what,
              td_last_error(NULL));
    if (on_ctx != NULL) {
        cr_assert_neq(td_last_status(on_ctx), TD_OK, "%s (%s): context status TD_OK", api,
                      what);
        cr_assert(names(td_last_error(on_ctx), api), "%s (%s): context message \"%s\"", api,
                  what, td_last_error(on_ctx));
    }
}

/* Run a bad call after a fresh op on ctx, then check it. */
#define BAD(api, on_ctx, what, call)                                                       \
    do {                                                                                   \
        fresh(ctx);                                                                        \
        td_tensor *r_ = (call);                                                            \
        expect_fail(r_, api, on_ctx, what);                                                \
    } while (0)

typedef td_tensor *(*unary_fn)(td_tensor *);
typedef td_tensor *(*binary_fn)(td_tensor *, td_tensor *);
typedef td_tensor *(*reduce_fn)(td_tensor *, int, const int *, bool);
typedef td_tensor *(*axis_fn)(td_tensor *, int, bool);
typedef td_tensor *(*softmax_fn)(td_tensor *, int);
typedef td_tensor *(*index_fn)(td_tensor *, td_tensor *, int);
typedef td_tensor *(*scalar_fn)(td_tensor *, double);

static void walk_elementwise(void)
{
    static const struct {
        const char *name;
        unary_fn fn;
        bool float_only;
    } un[] = {
        {"td_neg", td_neg, false},   {"td_abs", td_abs, false},
        {"td_exp", td_exp, true},    {"td_log", td_log, true},
        {"td_sqrt", td_sqrt, true},  {"td_rsqrt", td_rsqrt, true},
        {"td_tanh", td_tanh, true},  {"td_sigmoid", td_sigmoid, true},
        {"td_relu", td_relu, false}, {"td_silu", td_silu, true},
        {"td_sin", td_sin, true},     {"td_cos", td_cos, true},
        {"td_tan", td_tan, true},     {"td_asin", td_asin, true},
        {"td_acos", td_acos, true},   {"td_atan", td_atan, true},
        {"td_sinh", td_sinh, true},   {"td_cosh", td_cosh, true},
        {"td_asinh", td_asinh, true}, {"td_acosh", td_acosh, true},
        {"td_atanh", td_atanh, true}, {"td_erf", td_erf, true},
        {"td_log1p", td_log1p, true}, {"td_expm1", td_expm1, true},
        {"td_log2", td_log2, true},   {"td_log10", td_log10, true},
        {"td_floor", td_floor, true}, {"td_ceil", td_ceil, true},
        {"td_round", td_round, true}, {"td_trunc", td_trunc, true},
        {"td_sign", td_sign, true},   {"td_reciprocal", td_reciprocal, true},
        {"td_isnan", td_isnan, false}, {"td_isinf", td_isinf, true},
        {"td_isfinite", td_isfinite, true}, {"td_logical_not", td_logical_not, false},
        {"td_bitwise_not", td_bitwise_not, false},
    };
    for (size_t i = 0; i < sizeof un / sizeof un[0]; i++) {
        BAD(un[i].name, NULL, "x NULL", un[i].fn(NULL));
        if (un[i].float_only) BAD(un[i].name, ctx, "bool input", un[i].fn(b2x3));
    }
    static const struct {
        const char *name;
        binary_fn fn;
    } bin[] = {
        {"td_add", td_add},         {"td_sub", td_sub},         {"td_mul", td_mul},
        {"td_div", td_div},         {"td_pow", td_pow},         {"td_maximum", td_maximum},
        {"td_minimum", td_minimum}, {"td_eq", td_eq},           {"td_ne", td_ne},
        {"td_lt", td_lt},           {"td_le", td_le},           {"td_gt", td_gt},
        {"td_ge", td_ge},           {"td_matmul", td_matmul},
        {"td_atan2", td_atan2},     {"td_hypot", td_hypot},     {"td_copysign", td_copysign},
        {"td_fmod", td_fmod},       {"td_remainder", td_remainder},
        {"td_floor_divide", td_floor_divide},
        {"td_logical_and", td_logical_and}, {"td_logical_or", td_logical_or},
        {"td_logical_xor", td_logical_xor}, {"td_bitwise_and", td_bitwise_and},
        {"td_bitwise_or", td_bitwise_or},   {"td_bitwise_xor", td_bitwise_xor},
        {"td_shift_left", td_shift_left},   {"td_shift_right", td_shift_right},
    };
    for (size_t i = 0; i < sizeof bin / sizeof bin[0]; i++) {
        const char *n = bin[i].name;
        BAD(n, ctx, "a NULL", bin[i].fn(NULL, f2x3));
        BAD(n, ctx, "b NULL", bin[i].fn(f2x3, NULL));
        BAD(n, NULL, "both NULL", bin[i].fn(NULL, NULL));
        BAD(n, ctx, "other context", bin[i].fn(f2x3, f_other));
        BAD(n, ctx, "dtypes differ", bin[i].fn(f2x3, i2x3));
        /* [2,3] with [3,2]: neither broadcasts nor multiplies ([2,3] x [2,3] for matmul) */
        BAD(n, ctx, "shapes", bin[i].fn(f2x3, strcmp(n, "td_matmul") == 0 ? f2x3 : f3x2));
    }
    BAD("td_matmul_ex", ctx, "a NULL", td_matmul_ex(NULL, f3x2, 0));
    BAD("td_matmul_ex", ctx, "b NULL", td_matmul_ex(f2x3, NULL, 0));
    BAD("td_matmul_ex", ctx, "unknown flag", td_matmul_ex(f2x3, f3x2, 0x80));
    BAD("td_matmul_ex", ctx, "other context", td_matmul_ex(f2x3, f_other, 0));
    BAD("td_matmul_ex", ctx, "inner dims", td_matmul_ex(f2x3, f2x3, 0));

    BAD("td_where", ctx, "cond NULL", td_where(NULL, f2x3, f2x3));
    BAD("td_where", ctx, "a NULL", td_where(b2x3, NULL, f2x3));
    BAD("td_where", ctx, "b NULL", td_where(b2x3, f2x3, NULL));
    BAD("td_where", ctx, "other context", td_where(b2x3, f2x3, f_other));
    BAD("td_where", ctx, "cond not bool", td_where(f2x3, f2x3, f2x3));
    BAD("td_where", ctx, "dtypes differ", td_where(b2x3, f2x3, i2x3));

    BAD("td_bitwise_not", ctx, "float x", td_bitwise_not(f2x3));
    BAD("td_shift_left", ctx, "float operands", td_shift_left(f2x3, f2x3));
    BAD("td_bitwise_and", ctx, "float operands", td_bitwise_and(f2x3, f2x3));
    BAD("td_fmod", ctx, "bool operands", td_fmod(b2x3, b2x3));
    BAD("td_atan2", ctx, "integer operands", td_atan2(i2x3, i2x3));
    BAD("td_gelu", NULL, "x NULL", td_gelu(NULL, false));
    BAD("td_gelu", ctx, "integer x", td_gelu(i2x3, true));
    BAD("td_softplus", NULL, "x NULL", td_softplus(NULL, 1, 20));
    BAD("td_softplus", ctx, "beta 0", td_softplus(f2x3, 0, 20));
    BAD("td_softplus", ctx, "beta inf", td_softplus(f2x3, INFINITY, 20));
    BAD("td_softplus", ctx, "threshold NaN", td_softplus(f2x3, 1, NAN));
    BAD("td_softplus", ctx, "integer x", td_softplus(i2x3, 1, 20));
    BAD("td_leaky_relu", NULL, "x NULL", td_leaky_relu(NULL, 0.01));
    BAD("td_leaky_relu", ctx, "slope NaN", td_leaky_relu(f2x3, NAN));
    BAD("td_leaky_relu", ctx, "integer x", td_leaky_relu(i2x3, 0.01));
    BAD("td_elu", NULL, "x NULL", td_elu(NULL, 1));
    BAD("td_elu", ctx, "alpha -inf", td_elu(f2x3, -INFINITY));
    BAD("td_elu", ctx, "bool x", td_elu(b2x3, 1));
    BAD("td_clamp", NULL, "x NULL", td_clamp(NULL, 0, 1));
    BAD("td_clamp", ctx, "lo > hi", td_clamp(f2x3, 2, 1));
    BAD("td_clamp", ctx, "NaN bound", td_clamp(i2x3, NAN, 1));
    BAD("td_clamp", ctx, "bool x", td_clamp(b2x3, 0, 1));
    BAD("td_clamp_tensor", ctx, "x NULL", td_clamp_tensor(NULL, f2x3, f2x3));
    BAD("td_clamp_tensor", ctx, "lo NULL", td_clamp_tensor(f2x3, NULL, f2x3));
    BAD("td_clamp_tensor", ctx, "hi NULL", td_clamp_tensor(f2x3, f2x3, NULL));
    BAD("td_clamp_tensor", ctx, "other context", td_clamp_tensor(f2x3, f2x3, f_other));
    BAD("td_clamp_tensor", ctx, "dtypes differ", td_clamp_tensor(f2x3, f2x3, i2x3));
    BAD("td_clamp_tensor", ctx, "shapes", td_clamp_tensor(f2x3, f3x2, f2x3));
    BAD("td_clamp_tensor", ctx, "bool", td_clamp_tensor(b2x3, b2x3, b2x3));
    BAD("td_nan_to_num", NULL, "x NULL", td_nan_to_num(NULL, 0, INFINITY, -INFINITY));
    BAD("td_nan_to_num", ctx, "integer x", td_nan_to_num(i2x3, 0, INFINITY, -INFINITY));
    BAD("td_where_scalar_a", ctx, "cond NULL", td_where_scalar_a(NULL, 1, f2x3));
    BAD("td_where_scalar_a", ctx, "b NULL", td_where_scalar_a(b2x3, 1, NULL));
    BAD("td_where_scalar_a", ctx, "cond not bool", td_where_scalar_a(f2x3, 1, f2x3));
    BAD("td_where_scalar_a", ctx, "other context", td_where_scalar_a(b2x3, 1, f_other));
    BAD("td_where_scalar_b", ctx, "cond NULL", td_where_scalar_b(NULL, f2x3, 1));
    BAD("td_where_scalar_b", ctx, "a NULL", td_where_scalar_b(b2x3, NULL, 1));
    BAD("td_where_scalar_b", ctx, "shapes", td_where_scalar_b(td_full(ctx, TD_BOOL, 2,
                                            (int64_t[]){3, 2}, 1.0), f2x3, 1));
    BAD("td_where_scalars", NULL, "cond NULL", td_where_scalars(NULL, 1, 2, TD_F32));
    BAD("td_where_scalars", ctx, "dtype 99", td_where_scalars(b2x3, 1, 2, (td_dtype)99));
    BAD("td_where_scalars", ctx, "cond not bool", td_where_scalars(i2x3, 1, 2, TD_F32));

    BAD("td_cast", NULL, "x NULL", td_cast(NULL, TD_F64));
    BAD("td_cast", ctx, "dtype 99", td_cast(f2x3, (td_dtype)99));

    static const struct {
        const char *name;
        scalar_fn fn;
    } sc[] = {{"td_add_scalar", td_add_scalar}, {"td_mul_scalar", td_mul_scalar}};
    for (size_t i = 0; i < 2; i++) {
        BAD(sc[i].name, NULL, "x NULL", sc[i].fn(NULL, 1.0));
        BAD(sc[i].name, ctx, "bool x", sc[i].fn(b2x3, 1.0));
    }
}

static void walk_reductions(void)
{
    static const struct {
        const char *name;
        reduce_fn fn;
    } rd[] = {{"td_sum", td_sum}, {"td_mean", td_mean}, {"td_max", td_max},
              {"td_min", td_min}, {"td_prod", td_prod}};
    for (size_t i = 0; i < sizeof rd / sizeof rd[0]; i++) {
        const char *n = rd[i].name;
        BAD(n, NULL, "x NULL", rd[i].fn(NULL, 0, NULL, false));
        BAD(n, ctx, "naxes -1", rd[i].fn(f2x3, -1, (int[]){0}, false));
        BAD(n, ctx, "naxes 3 > rank 2", rd[i].fn(f2x3, 3, (int[]){0, 1, 0}, false));
        BAD(n, ctx, "axes NULL", rd[i].fn(f2x3, 1, NULL, false));
        BAD(n, ctx, "axis 2", rd[i].fn(f2x3, 1, (int[]){2}, false));
        BAD(n, ctx, "axis -3", rd[i].fn(f2x3, 1, (int[]){-3}, false));
        BAD(n, ctx, "axis twice", rd[i].fn(f2x3, 2, (int[]){1, -1}, false));
    }
    static const struct {
        const char *name;
        axis_fn fn;
    } ax[] = {{"td_argmax", td_argmax}, {"td_argmin", td_argmin}};
    for (size_t i = 0; i < 2; i++) {
        BAD(ax[i].name, NULL, "x NULL", ax[i].fn(NULL, 0, false));
        BAD(ax[i].name, ctx, "axis 2", ax[i].fn(f2x3, 2, false));
        BAD(ax[i].name, ctx, "axis -3", ax[i].fn(f2x3, -3, true));
    }
}

typedef td_tensor *(*stat_fn)(td_tensor *, int, const int *, bool, double);
typedef td_tensor *(*along_fn)(td_tensor *, int);
typedef td_tensor *(*sort_fn)(td_tensor *, int, bool);

/* Issue 13, item 2: the reductions, scans and sorts. */
static void walk_stats(void)
{
    static const struct {
        const char *name;
        stat_fn fn;
    } vs[] = {{"td_var", td_var}, {"td_std", td_std}};
    for (size_t i = 0; i < 2; i++) {
        const char *n = vs[i].name;
        BAD(n, NULL, "x NULL", vs[i].fn(NULL, 0, NULL, false, 1.0));
        BAD(n, ctx, "axis 2", vs[i].fn(f2x3, 1, (int[]){2}, false, 1.0));
        BAD(n, ctx, "correction -1", vs[i].fn(f2x3, 0, NULL, false, -1.0));
        BAD(n, ctx, "correction NaN", vs[i].fn(f2x3, 0, NULL, false, NAN));
        BAD(n, ctx, "i32", vs[i].fn(i2x3, 0, NULL, false, 1.0));
    }
    static const struct {
        const char *name;
        reduce_fn fn;
        bool any_dtype;
    } rd[] = {{"td_logsumexp", td_logsumexp, false}, {"td_any", td_any, true},
              {"td_all", td_all, true},             {"td_argmax_axes", td_argmax_axes, true},
              {"td_argmin_axes", td_argmin_axes, true}};
    for (size_t i = 0; i < sizeof rd / sizeof rd[0]; i++) {
        const char *n = rd[i].name;
        BAD(n, NULL, "x NULL", rd[i].fn(NULL, 0, NULL, false));
        BAD(n, ctx, "naxes -1", rd[i].fn(f2x3, -1, (int[]){0}, false));
        BAD(n, ctx, "axis 2", rd[i].fn(f2x3, 1, (int[]){2}, false));
        BAD(n, ctx, "axis twice", rd[i].fn(f2x3, 2, (int[]){1, -1}, false));
        if (!rd[i].any_dtype) BAD(n, ctx, "i32", rd[i].fn(i2x3, 0, NULL, false));
    }
    td_tensor *empty = td_full(ctx, TD_F32, 2, (int64_t[]){2, 0}, 0.0);
    BAD("td_argmax_axes", ctx, "empty axis", td_argmax_axes(empty, 0, NULL, false));
    BAD("td_norm", NULL, "x NULL", td_norm(NULL, 2.0, 0, NULL, false));
    BAD("td_norm", ctx, "p NaN", td_norm(f2x3, NAN, 0, NULL, false));
    BAD("td_norm", ctx, "axis 2", td_norm(f2x3, 2.0, 1, (int[]){2}, false));
    BAD("td_norm", ctx, "i32", td_norm(i2x3, 1.0, 0, NULL, false));
    BAD("td_norm", ctx, "inf over an empty axis", td_norm(empty, INFINITY, 1, (int[]){1}, false));
    static const struct {
        const char *name;
        along_fn fn;
    } sc[] = {{"td_cumsum", td_cumsum}, {"td_cumprod", td_cumprod}};
    for (size_t i = 0; i < 2; i++) {
        BAD(sc[i].name, NULL, "x NULL", sc[i].fn(NULL, 0));
        BAD(sc[i].name, ctx, "axis 2", sc[i].fn(f2x3, 2));
        BAD(sc[i].name, ctx, "axis -3", sc[i].fn(f2x3, -3));
        BAD(sc[i].name, ctx, "bool", sc[i].fn(b2x3, 0));
    }
    static const struct {
        const char *name;
        sort_fn fn;
    } so[] = {{"td_sort", td_sort}, {"td_argsort", td_argsort}};
    for (size_t i = 0; i < 2; i++) {
        BAD(so[i].name, NULL, "x NULL", so[i].fn(NULL, 0, false));
        BAD(so[i].name, ctx, "axis 2", so[i].fn(f2x3, 2, true));
        BAD(so[i].name, ctx, "axis -3", so[i].fn(f2x3, -3, false));
    }
    td_tensor *ix = NULL;
    BAD("td_topk", NULL, "x NULL", td_topk(NULL, 1, 0, true, &ix));
    BAD("td_topk", ctx, "k 4 > 3", td_topk(f2x3, 4, 1, true, &ix));
    BAD("td_topk", ctx, "k -1", td_topk(f2x3, -1, 1, true, &ix));
    BAD("td_topk", ctx, "axis 2", td_topk(f2x3, 1, 2, false, NULL));
    cr_assert_null(ix, "*indices untouched on failure");
    td_release(empty);
}

static void walk_movement(void)
{
    BAD("td_reshape", NULL, "x NULL", td_reshape(NULL, 1, (int64_t[]){6}));
    BAD("td_reshape", ctx, "rank -1", td_reshape(f2x3, -1, (int64_t[]){6}));
    BAD("td_reshape", ctx, "rank 9", td_reshape(f2x3, 9, (int64_t[]){6, 1, 1, 1, 1, 1, 1, 1, 1}));
    BAD("td_reshape", ctx, "dims NULL", td_reshape(f2x3, 1, NULL));
    BAD("td_reshape", ctx, "two -1", td_reshape(f2x3, 2, (int64_t[]){-1, -1}));
    BAD("td_reshape", ctx, "dim -2", td_reshape(f2x3, 2, (int64_t[]){-2, 3}));
    BAD("td_reshape", ctx, "7 elements", td_reshape(f2x3, 1, (int64_t[]){7}));
    BAD("td_reshape", ctx, "-1 of 4", td_reshape(f2x3, 2, (int64_t[]){4, -1}));

    BAD("td_permute", NULL, "x NULL", td_permute(NULL, (int[]){1, 0}));
    BAD("td_permute", ctx, "perm NULL", td_permute(f2x3, NULL));
    BAD("td_permute", ctx, "perm {0, 0}", td_permute(f2x3, (int[]){0, 0}));
    BAD("td_permute", ctx, "perm {0, 2}", td_permute(f2x3, (int[]){0, 2}));

    td_tensor *v = td_full(ctx, TD_F32, 1, (int64_t[]){4}, 0.0);
    BAD("td_transpose", NULL, "x NULL", td_transpose(NULL));
    BAD("td_transpose", ctx, "rank 1", td_transpose(v));

    BAD("td_slice", NULL, "x NULL", td_slice(NULL, (int64_t[]){0, 0}, (int64_t[]){1, 1}));
    BAD("td_slice", ctx, "starts NULL", td_slice(f2x3, NULL, (int64_t[]){1, 1}));
    BAD("td_slice", ctx, "stops NULL", td_slice(f2x3, (int64_t[]){0, 0}, NULL));

    td_tensor *two[2] = {f2x3, f2x3};
    td_tensor *nine[9] = {f2x3, f2x3, f2x3, f2x3, f2x3, f2x3, f2x3, f2x3, f2x3};
    /* a NULL array and counts below 1 name no tensor: the thread's record, and ctx's too
     * because nothing happened on ctx after them */
    BAD("td_concat", ctx, "n 0", td_concat(0, two, 0));
    BAD("td_concat", ctx, "n -1", td_concat(-1, two, 0));
    BAD("td_concat", ctx, "n INT_MIN", td_concat(-2147483647 - 1, two, 0));
    BAD("td_concat", ctx, "xs NULL", td_concat(2, NULL, 0));
    BAD("td_concat", ctx, "xs NULL, n 0", td_concat(0, NULL, 0));
    BAD("td_concat", ctx, "n 9", td_concat(9, nine, 0));
    BAD("td_concat", ctx, "xs[1] NULL", td_concat(2, (td_tensor *[]){f2x3, NULL}, 0));
    BAD("td_concat", ctx, "xs[0] NULL", td_concat(2, (td_tensor *[]){NULL, f2x3}, 0));
    BAD("td_concat", NULL, "all NULL", td_concat(2, (td_tensor *[]){NULL, NULL}, 0));
    BAD("td_concat", ctx, "other context", td_concat(2, (td_tensor *[]){f2x3, f_other}, 0));
    BAD("td_concat", ctx, "axis 2", td_concat(2, two, 2));
    BAD("td_concat", ctx, "axis -3", td_concat(2, two, -3));
    BAD("td_concat", ctx, "dtypes differ", td_concat(2, (td_tensor *[]){f2x3, i2x3}, 0));
    BAD("td_concat", ctx, "dims differ", td_concat(2, (td_tensor *[]){f2x3, f3x2}, 0));

    BAD("td_expand", NULL, "x NULL", td_expand(NULL, 2, (int64_t[]){2, 3}));
    BAD("td_expand", ctx, "rank -1", td_expand(f2x3, -1, (int64_t[]){2, 3}));
    BAD("td_expand", ctx, "dims NULL", td_expand(f2x3, 2, NULL));
    BAD("td_expand", ctx, "[2,3] to [4,3]", td_expand(f2x3, 2, (int64_t[]){4, 3}));

    static const struct {
        const char *name;
        index_fn fn;
    } ix[] = {{"td_gather", td_gather}, {"td_index_select", td_index_select}};
    td_tensor *idx_other = td_full(other, TD_I64, 2, (int64_t[]){2, 1}, 0.0);
    for (size_t i = 0; i < 2; i++) {
        const char *n = ix[i].name;
        BAD(n, ctx, "x NULL", ix[i].fn(NULL, idx2x1, 1));
        BAD(n, ctx, "index NULL", ix[i].fn(f2x3, NULL, 1));
        BAD(n, ctx, "axis 2", ix[i].fn(f2x3, idx2x1, 2));
        BAD(n, ctx, "other context", ix[i].fn(f2x3, idx_other, 1));
        BAD(n, ctx, "float index", ix[i].fn(f2x3, f2x3, 1));
    }
    td_release(idx_other);
    td_release(v);
}

/* The movement ops of issue 13 item 3. */
static void walk_movement_steps(void)
{
    const int64_t z2[2] = {0, 0}, e2[2] = {2, 3}, s11[2] = {1, 1};
    BAD("td_slice_step", NULL, "x NULL", td_slice_step(NULL, z2, e2, s11));
    BAD("td_slice_step", ctx, "steps NULL", td_slice_step(f2x3, z2, e2, NULL));
    BAD("td_slice_step", ctx, "step 0", td_slice_step(f2x3, z2, e2, (int64_t[]){1, 0}));
    BAD("td_slice_step", ctx, "step 2^63-1", td_slice_step(f2x3, z2, e2, (int64_t[]){1, INT64_MAX}));

    BAD("td_flip", NULL, "x NULL", td_flip(NULL, 1, (int[]){0}));
    BAD("td_flip", ctx, "axis 2", td_flip(f2x3, 1, (int[]){2}));
    BAD("td_flip", ctx, "axis twice", td_flip(f2x3, 2, (int[]){1, -1}));
    BAD("td_flip", ctx, "naxes 3", td_flip(f2x3, 3, (int[]){0, 1, 0}));
    BAD("td_flip", ctx, "axes NULL", td_flip(f2x3, 1, NULL));

    BAD("td_roll", NULL, "x NULL", td_roll(NULL, 1, (int64_t[]){1}, NULL));
    BAD("td_roll", ctx, "axis 2", td_roll(f2x3, 1, (int64_t[]){1}, (int[]){2}));
    BAD("td_roll", ctx, "no axes, 2 shifts", td_roll(f2x3, 2, (int64_t[]){1, 1}, NULL));
    BAD("td_roll", ctx, "shifts NULL", td_roll(f2x3, 1, NULL, (int[]){0}));
    BAD("td_roll", ctx, "n 9", td_roll(f2x3, 9, (int64_t[9]){0}, (int[9]){0}));

    BAD("td_pad", NULL, "x NULL", td_pad(NULL, 2, (int64_t[]){1, 1}, TD_PAD_CONSTANT, 0));
    BAD("td_pad", ctx, "npads 3", td_pad(f2x3, 3, (int64_t[]){1, 1, 1}, TD_PAD_CONSTANT, 0));
    BAD("td_pad", ctx, "npads 6", td_pad(f2x3, 6, (int64_t[6]){0}, TD_PAD_CONSTANT, 0));
    BAD("td_pad", ctx, "pads NULL", td_pad(f2x3, 2, NULL, TD_PAD_CONSTANT, 0));
    BAD("td_pad", ctx, "negative", td_pad(f2x3, 2, (int64_t[]){-1, 0}, TD_PAD_CONSTANT, 0));
    BAD("td_pad", ctx, "reflect 3 on 3", td_pad(f2x3, 2, (int64_t[]){3, 0}, TD_PAD_REFLECT, 0));
    BAD("td_pad", ctx, "circular 4 on 3", td_pad(f2x3, 2, (int64_t[]){0, 4}, TD_PAD_CIRCULAR, 0));
    BAD("td_pad", ctx, "mode 7", td_pad(f2x3, 2, (int64_t[]){1, 1}, (td_pad_mode)7, 0));
    BAD("td_pad", ctx, "overflow", td_pad(f2x3, 2, (int64_t[]){INT64_MAX, 1}, TD_PAD_CONSTANT, 0));

    td_tensor *two[2] = {f2x3, f2x3};
    BAD("td_stack", ctx, "n 0", td_stack(0, two, 0));
    BAD("td_stack", ctx, "xs NULL", td_stack(2, NULL, 0));
    BAD("td_stack", ctx, "xs[1] NULL", td_stack(2, (td_tensor *[]){f2x3, NULL}, 0));
    BAD("td_stack", ctx, "shapes differ", td_stack(2, (td_tensor *[]){f2x3, f3x2}, 0));
    BAD("td_stack", ctx, "dtypes differ", td_stack(2, (td_tensor *[]){f2x3, i2x3}, 0));
    BAD("td_stack", ctx, "other context", td_stack(2, (td_tensor *[]){f2x3, f_other}, 0));
    BAD("td_stack", ctx, "axis 3", td_stack(2, two, 3));
    BAD("td_stack", ctx, "axis -4", td_stack(2, two, -4));

    BAD("td_repeat", NULL, "x NULL", td_repeat(NULL, 2, (int64_t[]){1, 1}));
    BAD("td_repeat", ctx, "n below rank", td_repeat(f2x3, 1, (int64_t[]){2}));
    BAD("td_repeat", ctx, "negative", td_repeat(f2x3, 2, (int64_t[]){1, -1}));
    BAD("td_repeat", ctx, "repeats NULL", td_repeat(f2x3, 2, NULL));
    BAD("td_repeat", ctx, "overflow", td_repeat(f2x3, 2, (int64_t[]){INT64_MAX, 1}));
    BAD("td_tile", NULL, "x NULL", td_tile(NULL, 1, (int64_t[]){1}));
    BAD("td_tile", ctx, "n 9", td_tile(f2x3, 9, (int64_t[9]){1, 1, 1, 1, 1, 1, 1, 1, 1}));
    BAD("td_tile", ctx, "negative", td_tile(f2x3, 1, (int64_t[]){-2}));

    td_tensor *v = td_full(ctx, TD_F32, 1, (int64_t[]){4}, 0.0);
    BAD("td_tril", NULL, "x NULL", td_tril(NULL, 0));
    BAD("td_tril", ctx, "rank 1", td_tril(v, 0));
    BAD("td_triu", NULL, "x NULL", td_triu(NULL, 0));
    BAD("td_triu", ctx, "rank 1", td_triu(v, 1));

    BAD("td_one_hot", NULL, "index NULL", td_one_hot(NULL, 3, TD_F32));
    BAD("td_one_hot", ctx, "classes 0", td_one_hot(idx2x1, 0, TD_F32));
    BAD("td_one_hot", ctx, "float index", td_one_hot(f2x3, 3, TD_F32));
    BAD("td_one_hot", ctx, "dtype 99", td_one_hot(idx2x1, 3, (td_dtype)99));

    BAD("td_masked_fill", NULL, "x NULL", td_masked_fill(NULL, NULL, 0));
    BAD("td_masked_fill", ctx, "mask NULL", td_masked_fill(f2x3, NULL, 0));
    BAD("td_masked_fill", ctx, "mask not bool", td_masked_fill(f2x3, i2x3, 0));
    BAD("td_masked_fill", ctx, "mask [3,2]", td_masked_fill(f2x3, td_cast(f3x2, TD_BOOL), 0));
    BAD("td_masked_fill", ctx, "other context", td_masked_fill(f_other, b2x3, 0));

    td_tensor *i2x3_64 = td_full(ctx, TD_I64, 2, (int64_t[]){2, 3}, 0.0);
    static const struct {
        const char *name;
        td_tensor *(*fn)(td_tensor *, int, td_tensor *, td_tensor *);
    } sc[] = {{"td_scatter", td_scatter}, {"td_scatter_add", td_scatter_add},
              {"td_index_add", td_index_add}};
    for (size_t i = 0; i < 3; i++) {
        const char *n = sc[i].name;
        BAD(n, NULL, "all NULL", sc[i].fn(NULL, 0, NULL, NULL));
        BAD(n, ctx, "x NULL", sc[i].fn(NULL, 0, idx2x1, f2x3));
        BAD(n, ctx, "src NULL", sc[i].fn(f2x3, 0, idx2x1, NULL));
        BAD(n, ctx, "axis 2", sc[i].fn(f2x3, 2, i2x3_64, f2x3));
        BAD(n, ctx, "float index", sc[i].fn(f2x3, 0, f2x3, f2x3));
        BAD(n, ctx, "src dtype", sc[i].fn(f2x3, 0, i2x3_64, i2x3));
        BAD(n, ctx, "other context", sc[i].fn(f2x3, 0, i2x3_64, f_other));
    }
    BAD("td_scatter_add", ctx, "bool x", td_scatter_add(b2x3, 0, i2x3_64, b2x3));
    BAD("td_scatter", ctx, "index exceeds src", td_scatter(f2x3, 1, i2x3_64, f3x2));
    BAD("td_index_add", ctx, "index rank 2", td_index_add(f2x3, 0, i2x3_64, f2x3));
    td_release(i2x3_64);

    BAD("td_gather_nd", NULL, "x NULL", td_gather_nd(NULL, NULL));
    BAD("td_gather_nd", ctx, "index NULL", td_gather_nd(f2x3, NULL));
    BAD("td_gather_nd", ctx, "float index", td_gather_nd(f2x3, f2x3));
    BAD("td_gather_nd", ctx, "k 3 > rank 2", td_gather_nd(f2x3, td_full(ctx, TD_I64, 1, (int64_t[]){3}, 0)));
    BAD("td_gather_nd", ctx, "rank-0 index", td_gather_nd(f2x3, td_full(ctx, TD_I64, 0, NULL, 0)));
    td_tensor *ab[2] = {f2x3, f3x2};
    BAD("td_einsum", ctx, "n 0", td_einsum("ij", 0, ab));
    BAD("td_einsum", ctx, "xs NULL", td_einsum("ij", 1, NULL));
    BAD("td_einsum", ctx, "xs[1] NULL", td_einsum("ij,jk", 2, (td_tensor *[]){f2x3, NULL}));
    BAD("td_einsum", ctx, "equation NULL", td_einsum(NULL, 2, ab));
    BAD("td_einsum", ctx, "sizes differ", td_einsum("ij,ij->i", 2, ab));
    BAD("td_einsum", ctx, "diagonal", td_einsum("ii->i", 1, (td_tensor *[]){f2x3}));
    BAD("td_einsum", ctx, "ellipsis", td_einsum("...j->j", 1, ab));
    BAD("td_einsum", ctx, "rank mismatch", td_einsum("ijk,jk", 2, ab));
    BAD("td_einsum", ctx, "3 operands named", td_einsum("ij,jk,k", 2, ab));
    BAD("td_einsum", ctx, "output letter unknown", td_einsum("ij,jk->iz", 2, ab));
    BAD("td_einsum", ctx, "bad character", td_einsum("i1,jk", 2, ab));
    BAD("td_einsum", ctx, "dtypes differ", td_einsum("ij,jk", 2, (td_tensor *[]){f2x3, td_cast(f3x2, TD_F64)}));
    BAD("td_einsum", ctx, "other context", td_einsum("ij,ij", 2, (td_tensor *[]){f2x3, f_other}));
    td_release(v);
}

static void walk_softmax(void)
{
    static const struct {
        const char *name;
        softmax_fn fn;
    } sm[] = {{"td_softmax", td_softmax}, {"td_log_softmax", td_log_softmax}};
    td_tensor *empty = td_full(ctx, TD_F32, 2, (int64_t[]){2, 0}, 0.0);
    for (size_t i = 0; i < 2; i++) {
        BAD(sm[i].name, NULL, "x NULL", sm[i].fn(NULL, 0));
        BAD(sm[i].name, ctx, "axis 2", sm[i].fn(f2x3, 2));
        BAD(sm[i].name, ctx, "axis -3", sm[i].fn(f2x3, -3));
        BAD(sm[i].name, ctx, "i32", sm[i].fn(i2x3, 1));
        BAD(sm[i].name, ctx, "zero-length axis", sm[i].fn(empty, 1));
    }
    td_release(empty);
}

static void walk_autodiff(void)
{
    BAD("td_grad", NULL, "t NULL", td_grad(NULL));
    BAD("td_grad", ctx, "not a leaf", td_grad(f2x3));
    BAD("td_detach", NULL, "x NULL", td_detach(NULL));
}

static void walk_creation(void)
{
    const float data[6] = {0};
    const int64_t d23[2] = {2, 3};
    BAD("td_from_host", NULL, "ctx NULL", td_from_host(NULL, TD_F32, 2, d23, data));
    BAD("td_from_host", ctx, "rank -1", td_from_host(ctx, TD_F32, -1, d23, data));
    BAD("td_from_host", ctx, "rank 9", td_from_host(ctx, TD_F32, 9, d23, data));
    BAD("td_from_host", ctx, "dims NULL", td_from_host(ctx, TD_F32, 2, NULL, data));
    BAD("td_from_host", ctx, "data NULL", td_from_host(ctx, TD_F32, 2, d23, NULL));
    BAD("td_from_host", ctx, "dim -1", td_from_host(ctx, TD_F32, 2, (int64_t[]){-1, 3}, data));
    BAD("td_from_host", ctx, "dtype 99", td_from_host(ctx, (td_dtype)99, 2, d23, data));
    BAD("td_from_host_ex", NULL, "ctx NULL",
        td_from_host_ex(NULL, TD_F32, 2, d23, data, TD_WRITE_FRESH));
    BAD("td_from_host_ex", ctx, "unknown flags 0x2", td_from_host_ex(ctx, TD_F32, 2, d23, data, 2));
    cr_assert(strstr(td_last_error(NULL), "unknown flags 0x2 (known: TD_WRITE_FRESH 0x1)"), "%s",
              td_last_error(NULL));
    BAD("td_from_host_ex", ctx, "rank -1",
        td_from_host_ex(ctx, TD_F32, -1, d23, data, TD_WRITE_FRESH));
    BAD("td_from_host_ex", ctx, "data NULL",
        td_from_host_ex(ctx, TD_F32, 2, d23, NULL, TD_WRITE_FRESH));

    BAD("td_to_device", NULL, "t NULL", td_to_device(NULL, "cpu"));
    BAD("td_to_device", ctx, "device NULL", td_to_device(f2x3, NULL));
    BAD("td_to_device", ctx, "not a device of the session", td_to_device(f2x3, "cuda:9"));

    BAD("td_full", NULL, "ctx NULL", td_full(NULL, TD_F32, 2, d23, 1.0));
    BAD("td_full", ctx, "rank -1", td_full(ctx, TD_F32, -1, d23, 1.0));
    BAD("td_full", ctx, "dims NULL", td_full(ctx, TD_F32, 2, NULL, 1.0));
    BAD("td_full", ctx, "dim -5", td_full(ctx, TD_F32, 2, (int64_t[]){2, -5}, 1.0));
    BAD("td_full", ctx, "dtype 99", td_full(ctx, (td_dtype)99, 2, d23, 1.0));

    BAD("td_arange", NULL, "ctx NULL", td_arange(NULL, TD_F32, 4, 0.0, 1.0));
    BAD("td_arange", ctx, "n -1", td_arange(ctx, TD_F32, -1, 0.0, 1.0));
    BAD("td_arange", ctx, "dtype 99", td_arange(ctx, (td_dtype)99, 4, 0.0, 1.0));

    BAD("td_rand_uniform", NULL, "ctx NULL", td_rand_uniform(NULL, TD_F32, 2, d23, 1, 0, 1));
    BAD("td_rand_uniform", ctx, "i32", td_rand_uniform(ctx, TD_I32, 2, d23, 1, 0, 1));
    BAD("td_rand_uniform", ctx, "rank -1", td_rand_uniform(ctx, TD_F32, -1, d23, 1, 0, 1));
    BAD("td_rand_uniform", ctx, "dims NULL", td_rand_uniform(ctx, TD_F32, 2, NULL, 1, 0, 1));
    BAD("td_rand_normal", NULL, "ctx NULL", td_rand_normal(NULL, TD_F64, 2, d23, 1, 0, 1));
    BAD("td_rand_normal", ctx, "u8", td_rand_normal(ctx, TD_U8, 2, d23, 1, 0, 1));
    BAD("td_rand_normal", ctx, "rank 9", td_rand_normal(ctx, TD_F32, 9, d23, 1, 0, 1));
    BAD("td_rand_normal", ctx, "dims NULL", td_rand_normal(ctx, TD_F32, 2, NULL, 1, 0, 1));
    BAD("td_rand_uniform", ctx, "low 1 exceeds high 0", td_rand_uniform(ctx, TD_F32, 2, d23, 1, 1, 0));
    BAD("td_rand_uniform", ctx, "must be finite", td_rand_uniform(ctx, TD_F32, 2, d23, 1, 0, INFINITY));
    BAD("td_rand_normal", ctx, "stddev -1 must be finite", td_rand_normal(ctx, TD_F32, 2, d23, 1, 0, -1));
    BAD("td_rand_normal", ctx, "mean nan must be finite", td_rand_normal(ctx, TD_F32, 2, d23, 1, NAN, 1));

    /* the random ops of issue 13: each refusal names the op and the values */
#define BAD_SAYS(api, on_ctx, says, call)                                                  \
    do {                                                                                   \
        BAD(api, on_ctx, says, call);                                                      \
        cr_assert(strstr(td_last_error(NULL), says), "%s: \"%s\" lacks \"%s\"", api,        \
                  td_last_error(NULL), says);                                              \
    } while (0)
    td_tensor *pi = td_full(ctx, TD_I32, 2, d23, 0.5);
    BAD("td_bernoulli", NULL, "p NULL", td_bernoulli(NULL, 1));
    BAD_SAYS("td_bernoulli", ctx, "bernoulli: needs a float dtype, got i32", td_bernoulli(pi, 1));
    td_release(pi);
    BAD("td_bernoulli_scalar", NULL, "ctx NULL", td_bernoulli_scalar(NULL, TD_F32, 2, d23, 1, 0.5));
    BAD_SAYS("td_bernoulli_scalar", ctx, "bernoulli_scalar: p 1.5 is outside [0, 1]",
             td_bernoulli_scalar(ctx, TD_F32, 2, d23, 1, 1.5));
    BAD_SAYS("td_bernoulli_scalar", ctx, "p -0.1 is outside", td_bernoulli_scalar(ctx, TD_BOOL, 2, d23, 1, -0.1));
    BAD_SAYS("td_bernoulli_scalar", ctx, "p nan is outside", td_bernoulli_scalar(ctx, TD_U8, 2, d23, 1, NAN));
    BAD("td_bernoulli_scalar", ctx, "rank 9", td_bernoulli_scalar(ctx, TD_F32, 9, d23, 1, 0.5));
    BAD("td_randint", NULL, "ctx NULL", td_randint(NULL, TD_I32, 2, d23, 1, 0, 5));
    BAD_SAYS("td_randint", ctx, "randint: low 5 must be below high 5", td_randint(ctx, TD_I32, 2, d23, 1, 5, 5));
    BAD_SAYS("td_randint", ctx, "randint: needs an integer dtype, got f32",
             td_randint(ctx, TD_F32, 2, d23, 1, 0, 5));
    BAD_SAYS("td_randint", ctx, "randint: [0, 257) does not fit u8 ([0, 255])",
             td_randint(ctx, TD_U8, 2, d23, 1, 0, 257));
    BAD_SAYS("td_randint", ctx, "[-129, 0) does not fit i8", td_randint(ctx, TD_I8, 2, d23, 1, -129, 0));
    BAD("td_randint", ctx, "rank 9", td_randint(ctx, TD_I32, 9, d23, 1, 0, 5));
    BAD("td_randperm", NULL, "ctx NULL", td_randperm(NULL, 5, 1));
    BAD_SAYS("td_randperm", ctx, "randperm: n -1 is negative", td_randperm(ctx, -1, 1));
    BAD("td_trunc_normal", NULL, "ctx NULL", td_trunc_normal(NULL, TD_F32, 2, d23, 1, 0, 1, -2, 2));
    BAD_SAYS("td_trunc_normal", ctx, "trunc_normal: a 2 must be below b 2",
             td_trunc_normal(ctx, TD_F32, 2, d23, 1, 0, 1, 2, 2));
    BAD_SAYS("td_trunc_normal", ctx, "stddev 0 must be finite and > 0",
             td_trunc_normal(ctx, TD_F32, 2, d23, 1, 0, 0, -2, 2));
    BAD_SAYS("td_trunc_normal", ctx, "bounds [-inf, 2] must be finite",
             td_trunc_normal(ctx, TD_F64, 2, d23, 1, 0, 1, -INFINITY, 2));
    BAD_SAYS("td_trunc_normal", ctx, "mean nan must be finite",
             td_trunc_normal(ctx, TD_F64, 2, d23, 1, NAN, 1, -2, 2));
    BAD_SAYS("td_trunc_normal", ctx, "needs a float dtype, got i64",
             td_trunc_normal(ctx, TD_I64, 2, d23, 1, 0, 1, -2, 2));
#undef BAD_SAYS

    BAD("td_graph_input", NULL, "ctx NULL", td_graph_input(NULL, "x", TD_F32, 2, d23));
    BAD("td_graph_input", ctx, "not capturing", td_graph_input(ctx, "x", TD_F32, 2, d23));
    cr_assert_eq(td_graph_begin(ctx), TD_OK, "%s", td_last_error(ctx));
    BAD("td_graph_input", ctx, "name NULL", td_graph_input(ctx, NULL, TD_F32, 2, d23));
    BAD("td_graph_input", ctx, "name with space", td_graph_input(ctx, "a b", TD_F32, 2, d23));
    BAD("td_graph_input", ctx, "rank -1", td_graph_input(ctx, "x", TD_F32, -1, d23));
    BAD("td_graph_input", ctx, "dims NULL", td_graph_input(ctx, "x", TD_F32, 2, NULL));
    td_tensor *x = td_graph_input(ctx, "x", TD_F32, 2, d23);
    cr_assert_not_null(x, "%s", td_last_error(ctx));
    BAD("td_graph_input", ctx, "duplicate name", td_graph_input(ctx, "x", TD_F32, 2, d23));
    td_graph *g = NULL;
    cr_assert_eq(td_graph_output(ctx, "y", x), TD_OK, "%s", td_last_error(ctx));
    cr_assert_eq(td_graph_end(ctx, &g), TD_OK, "%s", td_last_error(ctx));
    td_graph_destroy(g);
    td_release(x);
}

static void walk_nn(void)
{
    td_tensor *w3 = td_full(ctx, TD_F32, 1, (int64_t[]){3}, 1.0);
    td_tensor *w4 = td_full(ctx, TD_F32, 1, (int64_t[]){4}, 1.0);
    td_tensor *w2 = td_full(ctx, TD_F32, 1, (int64_t[]){2}, 1.0);
    td_tensor *i2 = td_full(ctx, TD_I64, 1, (int64_t[]){2}, 0.0);
    td_tensor *f1 = td_full(ctx, TD_F32, 1, (int64_t[]){6}, 0.0);
    cr_assert(w3 && w4 && w2 && i2 && f1, "%s", td_last_error(ctx));
    BAD("td_layer_norm", NULL, "x NULL", td_layer_norm(NULL, 1, NULL, NULL, 1e-5));
    BAD("td_layer_norm", ctx, "naxes 0", td_layer_norm(f2x3, 0, NULL, NULL, 1e-5));
    BAD("td_layer_norm", ctx, "naxes 3", td_layer_norm(f2x3, 3, NULL, NULL, 1e-5));
    BAD("td_layer_norm", ctx, "weight [4]", td_layer_norm(f2x3, 1, w4, NULL, 1e-5));
    BAD("td_layer_norm", ctx, "bias [4]", td_layer_norm(f2x3, 1, w3, w4, 1e-5));
    BAD("td_layer_norm", ctx, "eps -1", td_layer_norm(f2x3, 1, NULL, NULL, -1));
    BAD("td_layer_norm", ctx, "eps nan", td_layer_norm(f2x3, 1, NULL, NULL, NAN));
    BAD("td_layer_norm", ctx, "i32", td_layer_norm(i2x3, 1, NULL, NULL, 1e-5));
    BAD("td_layer_norm", ctx, "contexts", td_layer_norm(f2x3, 1, f_other, NULL, 1e-5));
    BAD("td_rms_norm", NULL, "x NULL", td_rms_norm(NULL, 1, NULL, 1e-5));
    BAD("td_rms_norm", ctx, "naxes 5", td_rms_norm(f2x3, 5, NULL, 1e-5));
    BAD("td_rms_norm", ctx, "weight [4]", td_rms_norm(f2x3, 1, w4, 1e-5));
    BAD("td_group_norm", NULL, "x NULL", td_group_norm(NULL, 1, NULL, NULL, 1e-5));
    BAD("td_group_norm", ctx, "groups 2 of 3", td_group_norm(f2x3, 2, NULL, NULL, 1e-5));
    BAD("td_group_norm", ctx, "groups 0", td_group_norm(f2x3, 0, NULL, NULL, 1e-5));
    BAD("td_group_norm", ctx, "rank 1", td_group_norm(f1, 1, NULL, NULL, 1e-5));
    BAD("td_group_norm", ctx, "weight [4]", td_group_norm(f2x3, 3, w4, NULL, 1e-5));
    BAD("td_batch_norm", NULL, "x NULL", td_batch_norm(NULL, w3, w3, NULL, NULL, 1e-5));
    BAD("td_batch_norm", ctx, "var NULL", td_batch_norm(f2x3, w3, NULL, NULL, NULL, 1e-5));
    BAD("td_batch_norm", ctx, "mean [4]", td_batch_norm(f2x3, w4, w3, NULL, NULL, 1e-5));
    BAD("td_batch_norm", ctx, "rank 1", td_batch_norm(f1, w3, w3, NULL, NULL, 1e-5));
    BAD("td_batch_norm_stats", NULL, "x NULL", td_batch_norm_stats(NULL, NULL, NULL));
    BAD("td_batch_norm_stats", ctx, "rank 1", td_batch_norm_stats(f1, NULL, NULL));
    td_tensor *gw = NULL, *gb = NULL;
    BAD("td_layer_norm_backward", NULL, "dy NULL",
        td_layer_norm_backward(NULL, f2x3, 1, NULL, 1e-5, &gw, &gb));
    BAD("td_layer_norm_backward", ctx, "dy [3, 2]",
        td_layer_norm_backward(f3x2, f2x3, 1, NULL, 1e-5, &gw, &gb));
    BAD("td_layer_norm_backward", ctx, "naxes 0",
        td_layer_norm_backward(f2x3, f2x3, 0, NULL, 1e-5, &gw, &gb));
    BAD("td_rms_norm_backward", NULL, "x NULL",
        td_rms_norm_backward(f2x3, NULL, 1, NULL, 1e-5, &gw));
    BAD("td_rms_norm_backward", ctx, "weight [4]",
        td_rms_norm_backward(f2x3, f2x3, 1, w4, 1e-5, &gw));
    BAD("td_group_norm_backward", NULL, "dy NULL",
        td_group_norm_backward(NULL, f2x3, 1, NULL, 1e-5, &gw, &gb));
    BAD("td_group_norm_backward", ctx, "groups 2",
        td_group_norm_backward(f2x3, f2x3, 2, NULL, 1e-5, &gw, &gb));
    BAD("td_batch_norm_backward", NULL, "dy NULL",
        td_batch_norm_backward(NULL, f2x3, NULL, NULL, NULL, 1e-5, &gw, &gb));
    BAD("td_batch_norm_backward", ctx, "mean without var",
        td_batch_norm_backward(f2x3, f2x3, w3, NULL, NULL, 1e-5, &gw, &gb));
    BAD("td_batch_norm_backward", ctx, "var [4]",
        td_batch_norm_backward(f2x3, f2x3, w3, w4, NULL, 1e-5, &gw, &gb));
    BAD("td_batch_norm_backward", ctx, "weight [4]",
        td_batch_norm_backward(f2x3, f2x3, NULL, NULL, w4, 1e-5, &gw, &gb));
    cr_assert(gw == NULL && gb == NULL, "out-parameters untouched on failure");
    BAD("td_dropout", NULL, "x NULL", td_dropout(NULL, 0.5, 1));
    BAD("td_dropout", ctx, "p 1.5", td_dropout(f2x3, 1.5, 1));
    BAD("td_dropout", ctx, "p nan", td_dropout(f2x3, NAN, 1));
    BAD("td_dropout", ctx, "i32", td_dropout(i2x3, 0.5, 1));
    BAD("td_scaled_dot_product_attention", NULL, "q NULL",
        td_scaled_dot_product_attention(NULL, f2x3, f2x3, NULL, false, 0));
    BAD("td_scaled_dot_product_attention", ctx, "E 3 vs 2",
        td_scaled_dot_product_attention(f2x3, f3x2, f3x2, NULL, false, 0));
    BAD("td_scaled_dot_product_attention", ctx, "i32",
        td_scaled_dot_product_attention(i2x3, i2x3, i2x3, NULL, false, 0));
    BAD("td_scaled_dot_product_attention", ctx, "rank 1",
        td_scaled_dot_product_attention(f1, f1, f1, NULL, false, 0));
    BAD("td_scaled_dot_product_attention", ctx, "scale inf",
        td_scaled_dot_product_attention(f2x3, f2x3, f2x3, NULL, false, INFINITY));
    BAD("td_scaled_dot_product_attention", ctx, "i64 mask",
        td_scaled_dot_product_attention(f2x3, f2x3, f2x3, i2x3, false, 0));
    BAD("td_nll_loss", NULL, "input NULL", td_nll_loss(NULL, i2, TD_REDUCTION_MEAN, -100));
    BAD("td_nll_loss", ctx, "target f32", td_nll_loss(f2x3, w2, TD_REDUCTION_MEAN, -100));
    BAD("td_nll_loss", ctx, "target [3]", td_nll_loss(f2x3, td_full(ctx, TD_I64, 1,
        (int64_t[]){3}, 0), TD_REDUCTION_MEAN, -100));
    BAD("td_nll_loss", ctx, "reduction 7", td_nll_loss(f2x3, i2, (td_reduction)7, -100));
    BAD("td_nll_loss", ctx, "i32 input", td_nll_loss(i2x3, i2, TD_REDUCTION_SUM, -100));
    BAD("td_cross_entropy", NULL, "target NULL",
        td_cross_entropy(f2x3, NULL, TD_REDUCTION_MEAN, -100, 0));
    BAD("td_cross_entropy", ctx, "smoothing 2",
        td_cross_entropy(f2x3, i2, TD_REDUCTION_MEAN, -100, 2));
    BAD("td_cross_entropy", ctx, "rank 1", td_cross_entropy(f1, i2, TD_REDUCTION_MEAN, -100, 0));
    td_release(w3);
    td_release(w4);
    td_release(w2);
    td_release(i2);
    td_release(f1);
}

/* Convolution, pooling, interpolation: NULL inputs, rank 2 (not [N, C, spatial]), and a
 * bad attribute each. */
static void walk_window(void)
{
    const int64_t sz[2] = {3, 3};
    const td_pool_params pp = {.kernel = {2, 2}};
    const td_conv_params cp = {.groups = 1};
    BAD("td_conv", NULL, "x NULL", td_conv(NULL, f2x3, NULL, NULL));
    BAD("td_conv", ctx, "rank 2", td_conv(f2x3, f2x3, NULL, &cp));
    BAD("td_conv_transpose", NULL, "weight NULL", td_conv_transpose(f2x3, NULL, NULL, NULL));
    BAD("td_conv_transpose", ctx, "rank 2", td_conv_transpose(f2x3, f2x3, NULL, NULL));
    BAD("td_conv_input_grad", NULL, "dy NULL", td_conv_input_grad(NULL, f2x3, sz, NULL));
    BAD("td_conv_input_grad", ctx, "rank 2", td_conv_input_grad(f2x3, f2x3, sz, NULL));
    BAD("td_conv_weight_grad", NULL, "x NULL", td_conv_weight_grad(NULL, f2x3, sz, NULL));
    BAD("td_conv_weight_grad", ctx, "rank 2", td_conv_weight_grad(f2x3, f2x3, sz, NULL));
    BAD("td_max_pool", NULL, "x NULL", td_max_pool(NULL, &pp, NULL));
    BAD("td_max_pool", ctx, "rank 2", td_max_pool(f2x3, &pp, NULL));
    BAD("td_max_pool_backward", NULL, "dy NULL", td_max_pool_backward(NULL, idx2x1, sz, &pp));
    BAD("td_max_pool_backward", ctx, "rank 2", td_max_pool_backward(f2x3, idx2x1, sz, &pp));
    BAD("td_avg_pool", NULL, "x NULL", td_avg_pool(NULL, &pp));
    BAD("td_avg_pool", ctx, "rank 2", td_avg_pool(f2x3, &pp));
    BAD("td_avg_pool_backward", NULL, "dy NULL", td_avg_pool_backward(NULL, sz, &pp));
    BAD("td_avg_pool_backward", ctx, "rank 2", td_avg_pool_backward(f2x3, sz, &pp));
    BAD("td_adaptive_avg_pool", NULL, "x NULL", td_adaptive_avg_pool(NULL, sz));
    BAD("td_adaptive_avg_pool", ctx, "rank 2", td_adaptive_avg_pool(f2x3, sz));
    BAD("td_adaptive_avg_pool_backward", NULL, "dy NULL", td_adaptive_avg_pool_backward(NULL, sz));
    BAD("td_adaptive_avg_pool_backward", ctx, "rank 2", td_adaptive_avg_pool_backward(f2x3, sz));
    BAD("td_interpolate", NULL, "x NULL", td_interpolate(NULL, sz, TD_INTERP_NEAREST, false));
    BAD("td_interpolate", ctx, "rank 2", td_interpolate(f2x3, sz, TD_INTERP_LINEAR, false));
}

static void walk_all(void)
{
    walk_window();
    walk_creation();
    walk_autodiff();
    walk_elementwise();
    walk_reductions();
    walk_movement();
    walk_movement_steps();
    walk_softmax();
    walk_stats();
    walk_nn();
}

Test(op_errors, every_public_op_function_names_itself)
{
    walk_all();
    /* the context still works after all that */
    td_tensor *y = td_add(f2x3, f2x3);
    cr_assert_not_null(y, "%s", td_last_error(ctx));
    float out[6];
    cr_assert_eq(td_read(y, out, sizeof out), TD_OK, "%s", td_last_error(ctx));
    for (int i = 0; i < 6; i++) cr_assert_eq(out[i], 2.0f);
}

/* Every `td_tensor *td_NAME(` declaration in include/tensord.h was walked. */
Test(op_errors, the_walk_covers_every_op_in_the_header)
{
    walk_all();
    const char *root = getenv("TD_SOURCE_ROOT");
    cr_assert_not_null(root, "TD_SOURCE_ROOT is not set (meson test sets it)");
    char path[1024];
    snprintf(path, sizeof path, "%s/include/tensord.h", root);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "cannot open %s", path);
    char line[512], missing[2048] = "";
    int found = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        const char *p = line;
        while (*p == ' ') p++;
        if (strncmp(p, "td_tensor *td_", 14) != 0) continue;
        char name[128];
        size_t n = 0;
        for (const char *q = p + 11; n + 1 < sizeof name && (*q == '_' || (*q >= 'a' && *q <= 'z') ||
                                                   (*q >= '0' && *q <= '9'));
             q++)
            name[n++] = *q;
        name[n] = '\0';
        found++;
        bool seen = false;
        for (int i = 0; i < n_checked; i++) seen |= strcmp(checked[i], name) == 0;
        if (!seen && strlen(missing) + n + 2 < sizeof missing) {
            strcat(missing, " ");
            strcat(missing, name);
        }
    }
    fclose(f);
    cr_assert_geq(found, 50, "found only %d op declarations in %s", found, path);
    cr_assert_str_empty(missing, "op functions in tensord.h that errors.c never called with bad "
                        "arguments:%s", missing);
}

Test(op_errors, a_chain_keeps_its_first_failure_on_the_context)
{
    /* td_matmul fails ([2,3] x [2,3]); td_add and td_relu get NULL from it */
    fresh(ctx);
    td_tensor *y = td_relu(td_add(f2x3, td_matmul(f2x3, f2x3)));
    cr_assert_null(y);
    cr_assert_eq(td_last_status(ctx), TD_EINVAL);
    cr_assert(names(td_last_error(ctx), "td_matmul"), "context: \"%s\"", td_last_error(ctx));
    cr_assert(names(td_last_error(NULL), "td_relu"), "thread: \"%s\"", td_last_error(NULL));
}

Test(op_errors, a_context_free_failure_shows_until_the_next_op)
{
    fresh(ctx);
    fresh(other);
    cr_assert_eq(td_last_status(ctx), TD_OK);
    td_tensor *two[2] = {f2x3, f2x3};
    cr_assert_null(td_concat(0, two, 0));
    cr_assert_eq(td_last_status(ctx), TD_EINVAL);
    cr_assert_str_eq(td_last_error(ctx), "td_concat: n is 0, want 1..8");
    /* the next op recorded on a context hides it there, not on the thread */
    fresh(ctx);
    cr_assert_eq(td_last_status(ctx), TD_OK, "%s", td_last_error(ctx));
    cr_assert_str_eq(td_last_error(ctx), "");
    cr_assert_str_eq(td_last_error(NULL), "td_concat: n is 0, want 1..8");
    /* a failure on the context is newer: it wins */
    cr_assert_null(td_concat(-4, NULL, 0));
    cr_assert_str_eq(td_last_error(ctx), "td_concat: xs is NULL (n -4)");
    cr_assert_null(td_softmax(i2x3, 0));
    cr_assert(names(td_last_error(ctx), "td_softmax"), "%s", td_last_error(ctx));
    cr_assert(names(td_last_error(NULL), "td_softmax"), "%s", td_last_error(NULL));
}

/* cpu_elementwise.c — unary, binary, compare, WHERE and CAST kernels of the CPU backend.
 * Float transcendentals are checked against numpy float64 (cpu_reference.h); integer and
 * broadcasting cases are computed by hand in the comments or by a closed formula. */
#include "cpu_reference.h"
#include "cpu_test_util.h"
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

static td__device *dev;
static void setup(void) { dev = tu_open(4); }
static void teardown(void) { tu_close(dev); }
TestSuite(cpu_elementwise, .init = setup, .fini = teardown);

/* Run a 1-input op on a rank-1 tensor of doubles and return the output. */
static td__view unary(uint32_t opcode, uint32_t dt, int64_t n, const double *x)
{
    td__view in = tu_from_doubles(dev, dt, 1, DIMS(n), x);
    td__view out = tu_new(dev, dt, 1, DIMS(n), NULL);
    cr_assert_eq(tu_exec(dev, tu_op(opcode, 0, NULL), &in, 1, &out), TD_OK, "%s", tu_err);
    tu_free(dev, &in);
    return out;
}

Test(cpu_elementwise, transcendental_vs_numpy)
{
    static const struct {
        uint32_t op;
        const double *x, *want;
    } cases[] = {
        {TD_OP_EXP, REF_UNARY_X, REF_EXP},      {TD_OP_TANH, REF_UNARY_X, REF_TANH},
        {TD_OP_SIGMOID, REF_UNARY_X, REF_SIGMOID}, {TD_OP_LOG, REF_UNARY_POS, REF_LOG},
        {TD_OP_SQRT, REF_UNARY_POS, REF_SQRT},  {TD_OP_RSQRT, REF_UNARY_POS, REF_RSQRT},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        td__view o64 = unary(cases[c].op, TD_F64, 16, cases[c].x);
        tu_expect_close(&o64, cases[c].want, 16, 1e-14, 1e-300, "f64");
        td__view o32 = unary(cases[c].op, TD_F32, 16, cases[c].x);
        tu_expect_close(&o32, cases[c].want, 16, 4e-7, 1e-7, "f32");
        tu_free(dev, &o64);
        tu_free(dev, &o32);
    }
}

Test(cpu_elementwise, neg_abs_relu_integers_wrap)
{
    /* i32: -INT_MIN and |INT_MIN| wrap to INT_MIN */
    const double xi[] = {INT32_MIN, -5, 0, 7};
    td__view n = unary(TD_OP_NEG, TD_I32, 4, xi);
    td__view a = unary(TD_OP_ABS, TD_I32, 4, xi);
    td__view r = unary(TD_OP_RELU, TD_I32, 4, xi);
    tu_expect_eq(&n, (double[]){INT32_MIN, 5, 0, -7}, 4, "neg i32");
    tu_expect_eq(&a, (double[]){INT32_MIN, 5, 0, 7}, 4, "abs i32");
    tu_expect_eq(&r, (double[]){0, 0, 0, 7}, 4, "relu i32");
    tu_free(dev, &n);
    tu_free(dev, &a);
    tu_free(dev, &r);
    /* i64 */
    td__view in = tu_new(dev, TD_I64, 1, DIMS(3), (int64_t[]){INT64_MIN, -3, 9});
    td__view out = tu_new(dev, TD_I64, 1, DIMS(3), NULL);
    cr_assert_eq(tu_exec(dev, tu_op(TD_OP_NEG, 0, NULL), &in, 1, &out), TD_OK);
    cr_assert_eq(((int64_t *)out.data)[0], INT64_MIN);
    cr_assert_eq(((int64_t *)out.data)[1], 3);
    cr_assert_eq(((int64_t *)out.data)[2], -9);
    cr_assert_eq(tu_exec(dev, tu_op(TD_OP_ABS, 0, NULL), &in, 1, &out), TD_OK);
    cr_assert_eq(((int64_t *)out.data)[0], INT64_MIN);
    cr_assert_eq(((int64_t *)out.data)[1], 3);
    tu_free(dev, &in);
    tu_free(dev, &out);
    /* u8: -1 = 255, -200 = 56 (mod 256); abs and relu are the identity */
    const double xu[] = {0, 1, 200};
    n = unary(TD_OP_NEG, TD_U8, 3, xu);
    a = unary(TD_OP_ABS, TD_U8, 3, xu);
    r = unary(TD_OP_RELU, TD_U8, 3, xu);
    tu_expect_eq(&n, (double[]){0, 255, 56}, 3, "neg u8");
    tu_expect_eq(&a, xu, 3, "abs u8");
    tu_expect_eq(&r, xu, 3, "relu u8");
    tu_free(dev, &n);
    tu_free(dev, &a);
    tu_free(dev, &r);
}

Test(cpu_elementwise, neg_abs_relu_floats)
{
    const double x[] = {-2.5, -0.0, 0.0, 3.25, NAN, -INFINITY};
    for (uint32_t dt = TD_F32; dt <= TD_F64; dt++) {
        td__view n = unary(TD_OP_NEG, dt, 6, x);
        td__view a = unary(TD_OP_ABS, dt, 6, x);
        td__view r = unary(TD_OP_RELU, dt, 6, x);
        tu_expect_eq(&n, (double[]){2.5, 0.0, -0.0, -3.25, NAN, INFINITY}, 6, "neg");
        tu_expect_eq(&a, (double[]){2.5, 0.0, 0.0, 3.25, NAN, INFINITY}, 6, "abs");
        tu_expect_eq(&r, (double[]){0, 0, 0, 3.25, NAN, 0}, 6, "relu (keeps NaN)");
        tu_free(dev, &n);
        tu_free(dev, &a);
        tu_free(dev, &r);
    }
}

/* Run a binary op over two rank-1 tensors of n doubles of one dtype. */
static td__view binary(uint32_t opcode, uint32_t dt, uint32_t out_dt, int64_t n,
                       const double *a, const double *b)
{
    td__view in[2] = {tu_from_doubles(dev, dt, 1, DIMS(n), a),
                      tu_from_doubles(dev, dt, 1, DIMS(n), b)};
    td__view out = tu_new(dev, out_dt, 1, DIMS(n), NULL);
    cr_assert_eq(tu_exec(dev, tu_op(opcode, 0, NULL), in, 2, &out), TD_OK, "%s", tu_err);
    tu_free(dev, &in[0]);
    tu_free(dev, &in[1]);
    return out;
}

Test(cpu_elementwise, integer_division_rules)
{
    /* truncating division; x / 0 = 0; INT_MIN / -1 = INT_MIN */
    const double a[] = {7, -7, 7, -7, 5, 0, INT32_MIN, INT32_MIN};
    const double b[] = {2, 2, -2, -2, 0, 0, -1, 1};
    const double want[] = {3, -3, -3, 3, 0, 0, INT32_MIN, INT32_MIN};
    td__view o = binary(TD_OP_DIV, TD_I32, TD_I32, 8, a, b);
    tu_expect_eq(&o, want, 8, "div i32");
    tu_free(dev, &o);

    td__view in[2] = {tu_new(dev, TD_I64, 1, DIMS(3), (int64_t[]){INT64_MIN, 9, -9}),
                      tu_new(dev, TD_I64, 1, DIMS(3), (int64_t[]){-1, 0, 4})};
    td__view out = tu_new(dev, TD_I64, 1, DIMS(3), NULL);
    cr_assert_eq(tu_exec(dev, tu_op(TD_OP_DIV, 0, NULL), in, 2, &out), TD_OK);
    cr_assert_eq(((int64_t *)out.data)[0], INT64_MIN);
    cr_assert_eq(((int64_t *)out.data)[1], 0);
    cr_assert_eq(((int64_t *)out.data)[2], -2);
    tu_free(dev, &in[0]);
    tu_free(dev, &in[1]);
    tu_free(dev, &out);

    o = binary(TD_OP_DIV, TD_U8, TD_U8, 3, (double[]){7, 255, 0}, (double[]){0, 2, 0});
    tu_expect_eq(&o, (double[]){0, 127, 0}, 3, "div u8");
    tu_free(dev, &o);
}

Test(cpu_elementwise, integer_arithmetic_wraps)
{
    /* i32: MAX + 1 = MIN, MIN - 1 = MAX, 65536 * 65536 = 2^32 = 0, 46341^2 = 2147488281
     * - 2^32 = -2147479015 */
    td__view o = binary(TD_OP_ADD, TD_I32, TD_I32, 2, (double[]){INT32_MAX, -3},
                        (double[]){1, 5});
    tu_expect_eq(&o, (double[]){INT32_MIN, 2}, 2, "add i32");
    tu_free(dev, &o);
    o = binary(TD_OP_SUB, TD_I32, TD_I32, 2, (double[]){INT32_MIN, 3}, (double[]){1, 5});
    tu_expect_eq(&o, (double[]){INT32_MAX, -2}, 2, "sub i32");
    tu_free(dev, &o);
    o = binary(TD_OP_MUL, TD_I32, TD_I32, 3, (double[]){65536, 46341, -4},
               (double[]){65536, 46341, 6});
    tu_expect_eq(&o, (double[]){0, -2147479015.0, -24}, 3, "mul i32");
    tu_free(dev, &o);
    /* u8: 200 + 100 = 300 - 256 = 44; 5 - 10 = 251; 16 * 16 = 0; max/min */
    o = binary(TD_OP_ADD, TD_U8, TD_U8, 1, (double[]){200}, (double[]){100});
    tu_expect_eq(&o, (double[]){44}, 1, "add u8");
    tu_free(dev, &o);
    o = binary(TD_OP_SUB, TD_U8, TD_U8, 1, (double[]){5}, (double[]){10});
    tu_expect_eq(&o, (double[]){251}, 1, "sub u8");
    tu_free(dev, &o);
    o = binary(TD_OP_MUL, TD_U8, TD_U8, 2, (double[]){16, 3}, (double[]){16, 7});
    tu_expect_eq(&o, (double[]){0, 21}, 2, "mul u8");
    tu_free(dev, &o);
    o = binary(TD_OP_MAXIMUM, TD_U8, TD_U8, 2, (double[]){16, 3}, (double[]){9, 7});
    tu_expect_eq(&o, (double[]){16, 7}, 2, "maximum u8");
    tu_free(dev, &o);
    /* i64: MAX + 1 = MIN */
    td__view in[2] = {tu_new(dev, TD_I64, 1, DIMS(1), (int64_t[]){INT64_MAX}),
                      tu_new(dev, TD_I64, 1, DIMS(1), (int64_t[]){1})};
    td__view out = tu_new(dev, TD_I64, 1, DIMS(1), NULL);
    cr_assert_eq(tu_exec(dev, tu_op(TD_OP_ADD, 0, NULL), in, 2, &out), TD_OK);
    cr_assert_eq(((int64_t *)out.data)[0], INT64_MIN);
    cr_assert_eq(tu_exec(dev, tu_op(TD_OP_MINIMUM, 0, NULL), in, 2, &out), TD_OK);
    cr_assert_eq(((int64_t *)out.data)[0], 1);
    tu_free(dev, &in[0]);
    tu_free(dev, &in[1]);
    tu_free(dev, &out);
}

Test(cpu_elementwise, float_binary_ops)
{
    const double a[] = {1.5, -2.0, 1.0, 0.0, NAN, 3.0};
    const double b[] = {0.5, 4.0, 0.0, 0.0, 1.0, NAN};
    for (uint32_t dt = TD_F32; dt <= TD_F64; dt++) {
        td__view o = binary(TD_OP_ADD, dt, dt, 6, a, b);
        tu_expect_eq(&o, (double[]){2.0, 2.0, 1.0, 0.0, NAN, NAN}, 6, "add");
        tu_free(dev, &o);
        o = binary(TD_OP_SUB, dt, dt, 6, a, b);
        tu_expect_eq(&o, (double[]){1.0, -6.0, 1.0, 0.0, NAN, NAN}, 6, "sub");
        tu_free(dev, &o);
        o = binary(TD_OP_MUL, dt, dt, 6, a, b);
        tu_expect_eq(&o, (double[]){0.75, -8.0, 0.0, 0.0, NAN, NAN}, 6, "mul");
        tu_free(dev, &o);
        o = binary(TD_OP_DIV, dt, dt, 6, a, b); /* 1/0 = inf, 0/0 = NaN */
        tu_expect_eq(&o, (double[]){3.0, -0.5, INFINITY, NAN, NAN, NAN}, 6, "div");
        tu_free(dev, &o);
        o = binary(TD_OP_MAXIMUM, dt, dt, 6, a, b); /* NaN propagates from either side */
        tu_expect_eq(&o, (double[]){1.5, 4.0, 1.0, 0.0, NAN, NAN}, 6, "maximum");
        tu_free(dev, &o);
        o = binary(TD_OP_MINIMUM, dt, dt, 6, a, b);
        tu_expect_eq(&o, (double[]){0.5, -2.0, 0.0, 0.0, NAN, NAN}, 6, "minimum");
        tu_free(dev, &o);
        o = binary(TD_OP_POW, dt, dt, 16, REF_UNARY_POS, REF_POW_B);
        tu_expect_close(&o, REF_POW, 16, dt == TD_F32 ? 2e-6 : 1e-14, 0, "pow vs numpy");
        tu_free(dev, &o);
    }
}

Test(cpu_elementwise, comparisons_all_dtypes)
{
    const double a[] = {1, 2, 3};
    const double b[] = {2, 2, 2};
    static const struct {
        uint32_t op;
        double want[3];
    } cases[] = {
        {TD_OP_EQ, {0, 1, 0}}, {TD_OP_NE, {1, 0, 1}}, {TD_OP_LT, {1, 0, 0}},
        {TD_OP_LE, {1, 1, 0}}, {TD_OP_GT, {0, 0, 1}}, {TD_OP_GE, {0, 1, 1}},
    };
    for (uint32_t dt = 0; dt < TD_BOOL; dt++) {
        for (size_t c = 0; c < 6; c++) {
            td__view o = binary(cases[c].op, dt, TD_BOOL, 3, a, b);
            tu_expect_eq(&o, cases[c].want, 3, "compare");
            tu_free(dev, &o);
        }
    }
    /* bool: (0,1) pairs */
    td__view o = binary(TD_OP_LT, TD_BOOL, TD_BOOL, 4, (double[]){0, 0, 1, 1},
                        (double[]){0, 1, 0, 1});
    tu_expect_eq(&o, (double[]){0, 1, 0, 0}, 4, "lt bool");
    tu_free(dev, &o);
    o = binary(TD_OP_EQ, TD_BOOL, TD_BOOL, 4, (double[]){0, 0, 1, 1}, (double[]){0, 1, 0, 1});
    tu_expect_eq(&o, (double[]){1, 0, 0, 1}, 4, "eq bool");
    tu_free(dev, &o);
    /* NaN: every comparison false except NE */
    o = binary(TD_OP_EQ, TD_F64, TD_BOOL, 1, (double[]){NAN}, (double[]){NAN});
    tu_expect_eq(&o, (double[]){0}, 1, "nan eq");
    tu_free(dev, &o);
    o = binary(TD_OP_NE, TD_F32, TD_BOOL, 1, (double[]){NAN}, (double[]){NAN});
    tu_expect_eq(&o, (double[]){1}, 1, "nan ne");
    tu_free(dev, &o);
    o = binary(TD_OP_GE, TD_F32, TD_BOOL, 1, (double[]){NAN}, (double[]){1});
    tu_expect_eq(&o, (double[]){0}, 1, "nan ge");
    tu_free(dev, &o);
}

Test(cpu_elementwise, broadcast_column_with_row)
{
    /* [3,1] + [4] -> [3,4]: out[i][j] = a[i] + b[j] = 10 i + (j + 1) */
    for (uint32_t dt = 0; dt < TD_BOOL; dt++) {
        td__view in[2] = {tu_from_doubles(dev, dt, 2, DIMS(3, 1), (double[]){0, 10, 20}),
                          tu_from_doubles(dev, dt, 1, DIMS(4), (double[]){1, 2, 3, 4})};
        td__view out = tu_new(dev, dt, 2, DIMS(3, 4), NULL);
        cr_assert_eq(tu_exec(dev, tu_op(TD_OP_ADD, 0, NULL), in, 2, &out), TD_OK);
        tu_expect_eq(&out, (double[]){1, 2, 3, 4, 11, 12, 13, 14, 21, 22, 23, 24}, 12, "[3,1]+[4]");
        /* and the other way round: [4] - [3,1] -> out[i][j] = (j + 1) - 10 i */
        td__view sw[2] = {in[1], in[0]};
        if (dt != TD_U8) {
            cr_assert_eq(tu_exec(dev, tu_op(TD_OP_SUB, 0, NULL), sw, 2, &out), TD_OK);
            tu_expect_eq(&out, (double[]){1, 2, 3, 4, -9, -8, -7, -6, -19, -18, -17, -16}, 12,
                         "[4]-[3,1]");
        }
        tu_free(dev, &in[0]);
        tu_free(dev, &in[1]);
        tu_free(dev, &out);
    }
}

Test(cpu_elementwise, broadcast_rank0_scalar)
{
    /* rank-0 100 with [2,3] = 0..5: s - x and x - s */
    td__view s = tu_from_doubles(dev, TD_F32, 0, NULL, (double[]){100});
    td__view x = tu_from_doubles(dev, TD_F32, 2, DIMS(2, 3), (double[]){0, 1, 2, 3, 4, 5});
    td__view out = tu_new(dev, TD_F32, 2, DIMS(2, 3), NULL);
    cr_assert_eq(tu_exec(dev, tu_op(TD_OP_SUB, 0, NULL), (td__view[]){s, x}, 2, &out), TD_OK);
    tu_expect_eq(&out, (double[]){100, 99, 98, 97, 96, 95}, 6, "s - x");
    cr_assert_eq(tu_exec(dev, tu_op(TD_OP_SUB, 0, NULL), (td__view[]){x, s}, 2, &out), TD_OK);
    tu_expect_eq(&out, (double[]){-100, -99, -98, -97, -96, -95}, 6, "x - s");
    /* rank-0 op rank-0 -> rank-0 */
    td__view o0 = tu_new(dev, TD_F32, 0, NULL, NULL);
    cr_assert_eq(tu_exec(dev, tu_op(TD_OP_MUL, 0, NULL), (td__view[]){s, s}, 2, &o0), TD_OK);
    tu_expect_eq(&o0, (double[]){10000}, 1, "s * s");
    cr_assert_eq(tu_exec(dev, tu_op(TD_OP_SQRT, 0, NULL), &s, 1, &o0), TD_OK);
    tu_expect_eq(&o0, (double[]){10}, 1, "sqrt(s)");
    tu_free(dev, &s);
    tu_free(dev, &x);
    tu_free(dev, &out);
    tu_free(dev, &o0);
}

Test(cpu_elementwise, broadcast_general_strided)
{
    /* [2,1,3] * [4,1] -> [2,4,3]: out[i][j][k] = a[i][0][k] * b[j][0] with a = 1 + 3i + k,
     * b = j - 1 */
    double av[6], bv[4], want[24];
    for (int i = 0; i < 6; i++) av[i] = 1 + i;
    for (int j = 0; j < 4; j++) bv[j] = j - 1;
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 4; j++)
            for (int k = 0; k < 3; k++) want[(i * 4 + j) * 3 + k] = (1 + 3 * i + k) * (j - 1);
    td__view in[2] = {tu_from_doubles(dev, TD_I64, 3, DIMS(2, 1, 3), av),
                      tu_from_doubles(dev, TD_I64, 2, DIMS(4, 1), bv)};
    td__view out = tu_new(dev, TD_I64, 3, DIMS(2, 4, 3), NULL);
    cr_assert_eq(tu_exec(dev, tu_op(TD_OP_MUL, 0, NULL), in, 2, &out), TD_OK);
    tu_expect_eq(&out, want, 24, "[2,1,3]*[4,1]");
    tu_free(dev, &in[0]);
    tu_free(dev, &in[1]);
    tu_free(dev, &out);
}

Test(cpu_elementwise, broadcast_large_parallel)
{
    /* [300,1] + [1,200] -> [300,200] (60000 elements: the pool path) and the same-shape
     * fast path over 60000 elements; out[i][j] = i * 1000 + j */
    enum { R = 300, C = 200 };
    double *a = malloc(R * sizeof *a), *b = malloc(C * sizeof *b);
    for (int i = 0; i < R; i++) a[i] = i * 1000.0;
    for (int j = 0; j < C; j++) b[j] = j;
    td__view in[2] = {tu_from_doubles(dev, TD_F64, 2, DIMS(R, 1), a),
                      tu_from_doubles(dev, TD_F64, 2, DIMS(1, C), b)};
    td__view out = tu_new(dev, TD_F64, 2, DIMS(R, C), NULL);
    cr_assert_eq(tu_exec(dev, tu_op(TD_OP_ADD, 0, NULL), in, 2, &out), TD_OK);
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++)
            cr_assert_eq(((double *)out.data)[i * C + j], i * 1000.0 + j);
    td__view out2 = tu_new(dev, TD_F64, 2, DIMS(R, C), NULL);
    cr_assert_eq(tu_exec(dev, tu_op(TD_OP_SUB, 0, NULL), (td__view[]){out, out}, 2, &out2),
                 TD_OK);
    for (int64_t i = 0; i < R * C; i++) cr_assert_eq(((double *)out2.data)[i], 0.0);
    free(a);
    free(b);
    tu_free(dev, &in[0]);
    tu_free(dev, &in[1]);
    tu_free(dev, &out);
    tu_free(dev, &out2);
}

Test(cpu_elementwise, where_broadcasts_three_ways)
{
    /* cond [3,1] = (1,0,1), a [4] = 1..4, b rank-0 = -1 -> [3,4] */
    td__view c = tu_from_doubles(dev, TD_BOOL, 2, DIMS(3, 1), (double[]){1, 0, 1});
    for (uint32_t dt = 0; dt < TD_DTYPE_COUNT; dt++) {
        double bval = dt == TD_U8 ? 9 : dt == TD_BOOL ? 0 : -1;
        double av[4] = {1, 2, 3, 4};
        if (dt == TD_BOOL) av[1] = av[2] = av[3] = 1;
        td__view in[3] = {c, tu_from_doubles(dev, dt, 1, DIMS(4), av),
                          tu_from_doubles(dev, dt, 0, NULL, &bval)};
        td__view out = tu_new(dev, dt, 2, DIMS(3, 4), NULL);
        cr_assert_eq(tu_exec(dev, tu_op(TD_OP_WHERE, 0, NULL), in, 3, &out), TD_OK);
        double want[12];
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 4; j++) want[i * 4 + j] = i == 1 ? bval : av[j];
        tu_expect_eq(&out, want, 12, "where");
        tu_free(dev, &in[1]);
        tu_free(dev, &in[2]);
        tu_free(dev, &out);
    }
    tu_free(dev, &c);
}

static td__view cast(uint32_t from, uint32_t to, int64_t n, const void *data)
{
    td__view in = tu_new(dev, from, 1, DIMS(n), data);
    td__view out = tu_new(dev, to, 1, DIMS(n), NULL);
    td__op op = tu_op(TD_OP_CAST, 0, NULL);
    op.dtype = to;
    cr_assert_eq(tu_exec(dev, op, &in, 1, &out), TD_OK, "%s", tu_err);
    tu_free(dev, &in);
    return out;
}

Test(cpu_elementwise, cast_float_to_int_truncates_and_saturates)
{
    /* truncate toward zero; NaN -> 0; beyond the range -> the nearest bound */
    td__view o = cast(TD_F32, TD_I32, 7,
                      (float[]){1.9f, -1.9f, NAN, 3e9f, -3e9f, INFINITY, -0.5f});
    tu_expect_eq(&o, (double[]){1, -1, 0, INT32_MAX, INT32_MIN, INT32_MAX, 0}, 7, "f32->i32");
    tu_free(dev, &o);
    o = cast(TD_F64, TD_U8, 6, (double[]){-5, 255.9, 256, 3.7, NAN, -INFINITY});
    tu_expect_eq(&o, (double[]){0, 255, 255, 3, 0, 0}, 6, "f64->u8");
    tu_free(dev, &o);
    o = cast(TD_F64, TD_I64, 4, (double[]){1e19, -1e19, -2.5, 9007199254740993.0});
    cr_assert_eq(((int64_t *)o.data)[0], INT64_MAX);
    cr_assert_eq(((int64_t *)o.data)[1], INT64_MIN);
    cr_assert_eq(((int64_t *)o.data)[2], -2);
    cr_assert_eq(((int64_t *)o.data)[3], 9007199254740992); /* the double is 2^53 */
    tu_free(dev, &o);
}

Test(cpu_elementwise, cast_int_to_int_wraps)
{
    td__view o = cast(TD_I64, TD_I32, 4, (int64_t[]){0x100000005ll, -1, 2147483648ll, -7});
    tu_expect_eq(&o, (double[]){5, -1, INT32_MIN, -7}, 4, "i64->i32");
    tu_free(dev, &o);
    o = cast(TD_I32, TD_U8, 4, (int32_t[]){-1, 256, 300, 17});
    tu_expect_eq(&o, (double[]){255, 0, 44, 17}, 4, "i32->u8");
    tu_free(dev, &o);
    o = cast(TD_U8, TD_I64, 2, (uint8_t[]){255, 0});
    tu_expect_eq(&o, (double[]){255, 0}, 2, "u8->i64");
    tu_free(dev, &o);
    o = cast(TD_I32, TD_I64, 2, (int32_t[]){INT32_MIN, 3});
    tu_expect_eq(&o, (double[]){INT32_MIN, 3}, 2, "i32->i64");
    tu_free(dev, &o);
}

Test(cpu_elementwise, cast_bool_and_float_rules)
{
    td__view o = cast(TD_F32, TD_BOOL, 5, (float[]){0.0f, -0.0f, 0.5f, NAN, -3.0f});
    tu_expect_eq(&o, (double[]){0, 0, 1, 1, 1}, 5, "f32->bool");
    tu_free(dev, &o);
    o = cast(TD_I64, TD_BOOL, 3, (int64_t[]){0, 256, -1});
    tu_expect_eq(&o, (double[]){0, 1, 1}, 3, "i64->bool (not truncation)");
    tu_free(dev, &o);
    o = cast(TD_BOOL, TD_F64, 2, (uint8_t[]){0, 1});
    tu_expect_eq(&o, (double[]){0, 1}, 2, "bool->f64");
    tu_free(dev, &o);
    o = cast(TD_BOOL, TD_I32, 2, (uint8_t[]){1, 0});
    tu_expect_eq(&o, (double[]){1, 0}, 2, "bool->i32");
    tu_free(dev, &o);
    /* 2^24 + 1 rounds to 2^24 in f32 (to nearest even) */
    o = cast(TD_I64, TD_F32, 2, (int64_t[]){16777217, -3});
    tu_expect_eq(&o, (double[]){16777216, -3}, 2, "i64->f32");
    tu_free(dev, &o);
    o = cast(TD_F64, TD_F32, 3, (double[]){0.1, 1e300, -1e300});
    tu_expect_eq(&o, (double[]){(float)0.1, INFINITY, -INFINITY}, 3, "f64->f32");
    tu_free(dev, &o);
    o = cast(TD_F32, TD_F32, 2, (float[]){1.25f, NAN});
    tu_expect_eq(&o, (double[]){1.25, NAN}, 2, "f32->f32");
    tu_free(dev, &o);
    o = cast(TD_BOOL, TD_BOOL, 2, (uint8_t[]){1, 0});
    tu_expect_eq(&o, (double[]){1, 0}, 2, "bool->bool");
    tu_free(dev, &o);
}

Test(cpu_elementwise, zero_elements_touch_nothing)
{
    /* [0,3] + [3] -> [0,3]; unary on [0]; cast on [4,0]: data pointers are NULL */
    td__view in[2] = {tu_new(dev, TD_F32, 2, DIMS(0, 3), NULL),
                      tu_from_doubles(dev, TD_F32, 1, DIMS(3), (double[]){1, 2, 3})};
    td__view out = tu_new(dev, TD_F32, 2, DIMS(0, 3), NULL);
    cr_assert_null(in[0].data);
    cr_assert_null(out.data);
    cr_assert_eq(tu_exec(dev, tu_op(TD_OP_ADD, 0, NULL), in, 2, &out), TD_OK);
    cr_assert_eq(tu_exec(dev, tu_op(TD_OP_EXP, 0, NULL), in, 1, &out), TD_OK);
    td__view c = tu_new(dev, TD_BOOL, 2, DIMS(0, 3), NULL);
    cr_assert_eq(tu_exec(dev, tu_op(TD_OP_WHERE, 0, NULL), (td__view[]){c, in[0], in[1]}, 3,
                         &out),
                 TD_OK);
    td__op op = tu_op(TD_OP_CAST, 0, NULL);
    op.dtype = TD_I64;
    td__view o64 = tu_new(dev, TD_I64, 2, DIMS(0, 3), NULL);
    cr_assert_eq(tu_exec(dev, op, in, 1, &o64), TD_OK);
    tu_free(dev, &in[1]);
}

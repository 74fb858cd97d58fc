/* cpu_reduce.c — SUM PROD MEAN MAX MIN ARGMAX ARGMIN of the CPU backend: against numpy
 * float64 (cpu_reference.h; the inputs are multiples of 1/16, so f32 and f64 results are
 * exact), hand-computed integer and edge cases, and large shapes against a plain
 * ascending-order double loop written here. */
#include "cpu_reference.h"
#include "cpu_test_util.h"
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static td__device *dev;
static void setup(void) { dev = tu_open(4); }
static void teardown(void) { tu_close(dev); }
TestSuite(cpu_reduce, .init = setup, .fini = teardown);

/* Reduce `x` with (mask, keepdims) into a fresh output of the given dtype and shape. */
static td__view reduce(uint32_t opcode, const td__view *x, int64_t mask, int keep,
                       uint32_t out_dt, uint32_t rank, const int64_t *dims)
{
    td__view out = tu_new(dev, out_dt, rank, dims, NULL);
    td_status s = tu_exec(dev, tu_op(opcode, 2, DIMS(mask, keep)), x, 1, &out);
    cr_assert_eq(s, TD_OK, "%s", tu_err);
    return out;
}

Test(cpu_reduce, float_vs_numpy)
{
    for (uint32_t dt = TD_F32; dt <= TD_F64; dt++) {
        td__view x = tu_from_doubles(dev, dt, 3, DIMS(2, 3, 4), REF_RED_X);
        td__view o = reduce(TD_OP_SUM, &x, 0x5, 0, dt, 1, DIMS(3));
        tu_expect_eq(&o, REF_SUM_AX02, 3, "sum axes 0,2");
        tu_free(dev, &o);
        o = reduce(TD_OP_SUM, &x, 0x5, 1, dt, 3, DIMS(1, 3, 1));
        tu_expect_eq(&o, REF_SUM_AX02, 3, "sum axes 0,2 keepdims");
        tu_free(dev, &o);
        o = reduce(TD_OP_SUM, &x, 0x2, 0, dt, 2, DIMS(2, 4));
        tu_expect_eq(&o, REF_SUM_AX1, 8, "sum axis 1");
        tu_free(dev, &o);
        o = reduce(TD_OP_SUM, &x, 0x7, 0, dt, 0, NULL);
        tu_expect_eq(&o, REF_SUM_ALL, 1, "sum all");
        tu_free(dev, &o);
        o = reduce(TD_OP_SUM, &x, 0x7, 1, dt, 3, DIMS(1, 1, 1));
        tu_expect_eq(&o, REF_SUM_ALL, 1, "sum all keepdims");
        tu_free(dev, &o);
        o = reduce(TD_OP_MEAN, &x, 0x4, 0, dt, 2, DIMS(2, 3));
        tu_expect_eq(&o, REF_MEAN_AX2, 6, "mean axis 2");
        tu_free(dev, &o);
        o = reduce(TD_OP_PROD, &x, 0x1, 0, dt, 2, DIMS(3, 4));
        tu_expect_eq(&o, REF_PROD_AX0, 12, "prod axis 0");
        tu_free(dev, &o);
        o = reduce(TD_OP_MAX, &x, 0x6, 0, dt, 1, DIMS(2));
        tu_expect_eq(&o, REF_MAX_AX12, 2, "max axes 1,2");
        tu_free(dev, &o);
        o = reduce(TD_OP_MIN, &x, 0x1, 1, dt, 3, DIMS(1, 3, 4));
        tu_expect_eq(&o, REF_MIN_AX0, 12, "min axis 0 keepdims");
        tu_free(dev, &o);
        tu_free(dev, &x);
    }
}

Test(cpu_reduce, argmax_argmin_first_index)
{
    for (uint32_t dt = TD_F32; dt <= TD_F64; dt++) {
        td__view x = tu_from_doubles(dev, dt, 3, DIMS(2, 3, 4), REF_RED_X);
        double want[8];
        td__view o = reduce(TD_OP_ARGMAX, &x, 0x2, 0, TD_I64, 2, DIMS(2, 4));
        for (int i = 0; i < 8; i++) want[i] = (double)REF_ARGMAX_AX1[i];
        tu_expect_eq(&o, want, 8, "argmax axis 1");
        tu_free(dev, &o);
        o = reduce(TD_OP_ARGMIN, &x, 0x4, 1, TD_I64, 3, DIMS(2, 3, 1));
        for (int i = 0; i < 6; i++) want[i] = (double)REF_ARGMIN_AX2[i];
        tu_expect_eq(&o, want, 6, "argmin axis 2 keepdims (has a tie)");
        tu_free(dev, &o);
        o = reduce(TD_OP_ARGMAX, &x, 0x4, 0, TD_I64, 2, DIMS(2, 3));
        for (int i = 0; i < 6; i++) want[i] = (double)REF_ARGMAX_AX2[i];
        tu_expect_eq(&o, want, 6, "argmax axis 2");
        tu_free(dev, &o);
        tu_free(dev, &x);
    }
    /* integers and bool: ties give the first index */
    td__view xi = tu_from_doubles(dev, TD_I32, 2, DIMS(2, 3), (double[]){5, 9, 9, -1, -7, -7});
    td__view o = reduce(TD_OP_ARGMAX, &xi, 0x2, 0, TD_I64, 1, DIMS(2));
    tu_expect_eq(&o, (double[]){1, 0}, 2, "argmax i32");
    tu_free(dev, &o);
    o = reduce(TD_OP_ARGMIN, &xi, 0x2, 0, TD_I64, 1, DIMS(2));
    tu_expect_eq(&o, (double[]){0, 1}, 2, "argmin i32");
    tu_free(dev, &o);
    o = reduce(TD_OP_ARGMAX, &xi, 0x1, 0, TD_I64, 1, DIMS(3));
    tu_expect_eq(&o, (double[]){0, 0, 0}, 3, "argmax i32 axis 0");
    tu_free(dev, &o);
    tu_free(dev, &xi);
    td__view xb = tu_from_doubles(dev, TD_BOOL, 1, DIMS(4), (double[]){0, 0, 1, 1});
    o = reduce(TD_OP_ARGMAX, &xb, 0x1, 0, TD_I64, 0, NULL);
    tu_expect_eq(&o, (double[]){2}, 1, "argmax bool");
    tu_free(dev, &o);
    tu_free(dev, &xb);
}

Test(cpu_reduce, nan_propagates)
{
    td__view x = tu_from_doubles(dev, TD_F32, 2, DIMS(2, 3), (double[]){1, NAN, 3, 2, 5, 4});
    td__view o = reduce(TD_OP_MAX, &x, 0x2, 0, TD_F32, 1, DIMS(2));
    tu_expect_eq(&o, (double[]){NAN, 5}, 2, "max");
    tu_free(dev, &o);
    o = reduce(TD_OP_MIN, &x, 0x1, 0, TD_F32, 1, DIMS(3));
    tu_expect_eq(&o, (double[]){1, NAN, 3}, 3, "min axis 0");
    tu_free(dev, &o);
    o = reduce(TD_OP_ARGMIN, &x, 0x2, 0, TD_I64, 1, DIMS(2));
    tu_expect_eq(&o, (double[]){1, 0}, 2, "argmin gives the first NaN");
    tu_free(dev, &o);
    o = reduce(TD_OP_SUM, &x, 0x2, 0, TD_F32, 1, DIMS(2));
    tu_expect_eq(&o, (double[]){NAN, 11}, 2, "sum");
    tu_free(dev, &o);
    tu_free(dev, &x);
}

Test(cpu_reduce, integer_sums_wrap_in_output_dtype)
{
    td__view x = tu_from_doubles(dev, TD_I32, 1, DIMS(3), (double[]){INT32_MAX, 1, 2});
    td__view o = reduce(TD_OP_SUM, &x, 0x1, 0, TD_I32, 0, NULL);
    tu_expect_eq(&o, (double[]){INT32_MIN + 2.0}, 1, "sum i32 wraps");
    tu_free(dev, &o);
    tu_free(dev, &x);
    x = tu_from_doubles(dev, TD_U8, 2, DIMS(2, 2), (double[]){200, 100, 255, 1});
    o = reduce(TD_OP_SUM, &x, 0x2, 0, TD_U8, 1, DIMS(2));
    tu_expect_eq(&o, (double[]){44, 0}, 2, "sum u8 wraps (300 - 256, 256 - 256)");
    tu_free(dev, &o);
    o = reduce(TD_OP_PROD, &x, 0x1, 0, TD_U8, 1, DIMS(2));
    tu_expect_eq(&o, (double[]){(200 * 255) % 256, 100}, 2, "prod u8 wraps");
    tu_free(dev, &o);
    o = reduce(TD_OP_MAX, &x, 0x3, 0, TD_U8, 0, NULL);
    tu_expect_eq(&o, (double[]){255}, 1, "max u8");
    tu_free(dev, &o);
    tu_free(dev, &x);
    /* i64: 2^40 * 2^30 = 2^70 wraps to 0; min over INT64_MIN */
    td__view y = tu_new(dev, TD_I64, 1, DIMS(3), (int64_t[]){1ll << 40, 1ll << 30, 3});
    o = reduce(TD_OP_PROD, &y, 0x1, 0, TD_I64, 0, NULL);
    cr_assert_eq(((int64_t *)o.data)[0], 0);
    tu_free(dev, &o);
    tu_free(dev, &y);
    y = tu_new(dev, TD_I64, 1, DIMS(3), (int64_t[]){5, INT64_MIN, INT64_MAX});
    o = reduce(TD_OP_MIN, &y, 0x1, 0, TD_I64, 0, NULL);
    cr_assert_eq(((int64_t *)o.data)[0], INT64_MIN);
    tu_free(dev, &o);
    o = reduce(TD_OP_MAX, &y, 0x1, 0, TD_I64, 0, NULL);
    cr_assert_eq(((int64_t *)o.data)[0], INT64_MAX);
    tu_free(dev, &o);
    o = reduce(TD_OP_SUM, &y, 0x1, 0, TD_I64, 0, NULL); /* 5 + MIN + MAX = 4 */
    cr_assert_eq(((int64_t *)o.data)[0], 4);
    tu_free(dev, &o);
    tu_free(dev, &y);
}

Test(cpu_reduce, bool_max_min)
{
    td__view x = tu_from_doubles(dev, TD_BOOL, 2, DIMS(3, 2), (double[]){0, 1, 0, 1, 0, 0});
    td__view o = reduce(TD_OP_MAX, &x, 0x1, 0, TD_BOOL, 1, DIMS(2));
    tu_expect_eq(&o, (double[]){0, 1}, 2, "any");
    tu_free(dev, &o);
    o = reduce(TD_OP_MIN, &x, 0x2, 0, TD_BOOL, 1, DIMS(3));
    tu_expect_eq(&o, (double[]){0, 0, 0}, 3, "all");
    tu_free(dev, &o);
    tu_free(dev, &x);
}

Test(cpu_reduce, zero_length_axes)
{
    /* [2,0] over axis 1: sum 0, prod 1, mean NaN; input data is NULL */
    td__view x = tu_new(dev, TD_F32, 2, DIMS(2, 0), NULL);
    cr_assert_null(x.data);
    td__view o = reduce(TD_OP_SUM, &x, 0x2, 0, TD_F32, 1, DIMS(2));
    tu_expect_eq(&o, (double[]){0, 0}, 2, "sum");
    tu_free(dev, &o);
    o = reduce(TD_OP_PROD, &x, 0x2, 1, TD_F32, 2, DIMS(2, 1));
    tu_expect_eq(&o, (double[]){1, 1}, 2, "prod");
    tu_free(dev, &o);
    o = reduce(TD_OP_MEAN, &x, 0x3, 0, TD_F32, 0, NULL);
    tu_expect_eq(&o, (double[]){NAN}, 1, "mean");
    tu_free(dev, &o);
    td__view xi = tu_new(dev, TD_I64, 2, DIMS(2, 0), NULL);
    o = reduce(TD_OP_SUM, &xi, 0x2, 0, TD_I64, 1, DIMS(2));
    tu_expect_eq(&o, (double[]){0, 0}, 2, "sum i64");
    tu_free(dev, &o);
    /* [2,0] over axis 0 -> [0]: no output elements */
    o = reduce(TD_OP_MAX, &x, 0x1, 0, TD_F32, 1, DIMS(0));
    cr_assert_null(o.data);
    o = reduce(TD_OP_ARGMAX, &x, 0x1, 0, TD_I64, 1, DIMS(0));
    cr_assert_null(o.data);
}

Test(cpu_reduce, no_axes_and_rank0)
{
    td__view x = tu_from_doubles(dev, TD_F64, 2, DIMS(2, 2), (double[]){1, -2, 3, 4});
    td__view o = reduce(TD_OP_SUM, &x, 0, 0, TD_F64, 2, DIMS(2, 2));
    tu_expect_eq(&o, (double[]){1, -2, 3, 4}, 4, "mask 0 is the identity");
    tu_free(dev, &o);
    tu_free(dev, &x);
    td__view s = tu_from_doubles(dev, TD_I32, 0, NULL, (double[]){7});
    o = reduce(TD_OP_PROD, &s, 0, 0, TD_I32, 0, NULL);
    tu_expect_eq(&o, (double[]){7}, 1, "rank 0");
    tu_free(dev, &o);
    tu_free(dev, &s);
    /* size-1 axes reduced away: [1,3,1] over axes 0 and 2 */
    td__view y = tu_from_doubles(dev, TD_F32, 3, DIMS(1, 3, 1), (double[]){1, 2, 3});
    o = reduce(TD_OP_MAX, &y, 0x5, 0, TD_F32, 1, DIMS(3));
    tu_expect_eq(&o, (double[]){1, 2, 3}, 3, "size-1 axes");
    tu_free(dev, &o);
    o = reduce(TD_OP_ARGMAX, &y, 0x1, 0, TD_I64, 2, DIMS(3, 1));
    tu_expect_eq(&o, (double[]){0, 0, 0}, 3, "argmax over a size-1 axis");
    tu_free(dev, &o);
    tu_free(dev, &y);
}

/* Reference: sum over the axes of mask of a [d0, d1, d2] tensor given as doubles, each
 * output folded in ascending input-index order in double (the documented semantics). */
static void ref_sum3(const double *x, const int64_t d[3], int mask, double *out, int64_t nout)
{
    for (int64_t o = 0; o < nout; o++) out[o] = 0.0;
    for (int64_t i = 0; i < d[0]; i++)
        for (int64_t j = 0; j < d[1]; j++)
            for (int64_t k = 0; k < d[2]; k++) {
                int64_t o = 0;
                if (!(mask & 1)) o = o * d[0] + i;
                if (!(mask & 2)) o = o * d[1] + j;
                if (!(mask & 4)) o = o * d[2] + k;
                out[o] += x[(i * d[1] + j) * d[2] + k];
            }
}

Test(cpu_reduce, large_shapes_match_ascending_double_fold)
{
    /* 74000 elements (the pool path) with 53-bit mantissas scaled by 2^-40..2^39, so f64
     * sums round and a different summation order gives different bits; the f32 copy checks
     * the double accumulator rounded once. */
    const int64_t d[3] = {50, 40, 37};
    const int64_t n = d[0] * d[1] * d[2];
    double *xv = malloc((size_t)n * sizeof *xv), *xr = malloc((size_t)n * sizeof *xr);
    uint64_t s = 12345;
    for (int64_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        double m = (double)(int64_t)(s >> 11) * 0x1p-53 - 0.5;
        xv[i] = ldexp(m, (int)((s >> 3) % 80) - 40);
        xr[i] = (double)(float)xv[i];
    }
    td__view x64 = tu_new(dev, TD_F64, 3, d, xv);
    td__view x32 = tu_from_doubles(dev, TD_F32, 3, d, xr);
    static const struct {
        int mask;
        uint32_t rank;
        int64_t dims[3];
    } cases[] = {
        {0x1, 2, {40, 37}}, /* column path */
        {0x4, 2, {50, 40}}, /* row path */
        {0x5, 1, {40}},     /* column path with an outer reduced group */
        {0x2, 2, {50, 37}}, /* column path, reduced group in the middle */
        {0x6, 1, {50}},     /* row path over merged axes */
        {0x7, 0, {0}},      /* everything */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        td__view o = reduce(TD_OP_SUM, &x64, cases[c].mask, 0, TD_F64, cases[c].rank,
                            cases[c].dims);
        int64_t nout = tu_nelem(&o);
        double *want = malloc((size_t)nout * sizeof *want);
        ref_sum3(xv, d, cases[c].mask, want, nout);
        cr_assert_eq(memcmp(o.data, want, (size_t)nout * sizeof(double)), 0,
                     "f64 mask 0x%x differs from the ascending fold", cases[c].mask);
        tu_free(dev, &o);
        o = reduce(TD_OP_SUM, &x32, cases[c].mask, 0, TD_F32, cases[c].rank, cases[c].dims);
        ref_sum3(xr, d, cases[c].mask, want, nout);
        for (int64_t k = 0; k < nout; k++)
            cr_assert_eq(((float *)o.data)[k], (float)want[k], "f32 mask 0x%x output %lld",
                         cases[c].mask, (long long)k);
        free(want);
        tu_free(dev, &o);
    }
    tu_free(dev, &x64);
    tu_free(dev, &x32);
    free(xv);
    free(xr);
}

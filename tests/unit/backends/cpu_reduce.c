/* cpu_reduce.c — SUM PROD MEAN MAX MIN ARGMAX ARGMIN of the CPU backend: against numpy
 * float64 (cpu_reference.h; the inputs are multiples of 1/16, so f32 and f64 results are
 * exact), hand-computed integer and edge cases, large shapes against the documented fold
 * (include/tensord.h) written out again here, exact and bounded large sums, max/min/arg
 * against ascending folds with NaN payloads and signed zeros, and the same bits at 1, 2 and
 * 5 threads and from every instruction-set variant of the kernels. */
#include "backends/cpu/cpu_reduce.h"
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

/* ---- the documented fold, written out again here ----
 * Reference for float SUM over the axes of mask of a [d0, d1, d2] tensor (values given as
 * doubles), following include/tensord.h's contract with its own loops: the row path
 * (axis 2 reduced) as blocks of 4096 (runs cut at 4096 or grouped 4096 / run-length runs
 * to a block), 32 lanes per block combined by halving, blocks combined pairwise by the
 * stride-doubling loop below (cpu_reduce.c uses a stack instead); the column path (axis 2
 * kept) in ascending index order. */
static double ref_block_tree(double *b, int64_t m)
{
    for (int64_t s = 1; s < m; s *= 2)
        for (int64_t i = 0; i + s < m; i += 2 * s) b[i] = b[i] + b[i + s];
    return b[0];
}

/* The reduced elements of one output as runs: run r is vals[r * len .. r * len + len). */
static double ref_runs(const double *vals, int64_t nruns, int64_t len)
{
    const int64_t per = len >= 4096 ? (len + 4095) / 4096 : 0;  /* blocks per run */
    const int64_t group = len >= 4096 ? 1 : 4096 / len;        /* runs per block */
    const int64_t m = per > 0 ? nruns * per : (nruns + group - 1) / group;
    double *b = malloc((size_t)m * sizeof *b);
    for (int64_t k = 0; k < m; k++) {
        double lane[32] = {0};
        if (per > 0) {
            const double *v = vals + (k / per) * len + (k % per) * 4096;
            int64_t n = len - (k % per) * 4096;
            if (n > 4096) n = 4096;
            for (int64_t i = 0; i < n; i++) lane[i % 32] += v[i];
        } else {
            for (int64_t r = k * group; r < (k + 1) * group && r < nruns; r++)
                for (int64_t i = 0; i < len; i++) lane[i % 32] += vals[r * len + i];
        }
        for (int w = 16; w >= 1; w /= 2)
            for (int l = 0; l < w; l++) lane[l] += lane[l + w];
        b[k] = lane[0];
    }
    double r = ref_block_tree(b, m);
    free(b);
    return r;
}

static void ref_sum3(const double *x, const int64_t d[3], int mask, double *out, int64_t nout)
{
    /* gather each output's reduced elements in index order, then fold them */
    const int64_t per_out = d[0] * d[1] * d[2] / nout;
    double *g = malloc((size_t)(per_out * nout) * sizeof *g);
    int64_t *fill = calloc((size_t)nout, sizeof *fill);
    for (int64_t i = 0; i < d[0]; i++)
        for (int64_t j = 0; j < d[1]; j++)
            for (int64_t k = 0; k < d[2]; k++) {
                int64_t o = 0;
                if (!(mask & 1)) o = o * d[0] + i;
                if (!(mask & 2)) o = o * d[1] + j;
                if (!(mask & 4)) o = o * d[2] + k;
                g[o * per_out + fill[o]++] = x[(i * d[1] + j) * d[2] + k];
            }
    for (int64_t o = 0; o < nout; o++) {
        const double *v = g + o * per_out;
        if (!(mask & 4)) { /* column path: ascending */
            double a = 0.0;
            for (int64_t k = 0; k < per_out; k++) a += v[k];
            out[o] = a;
        } else {
            /* trailing reduced axes merge into one run; axes 0 and 2 alone give d0 runs */
            int64_t len = mask == 0x5 ? d[2] : per_out;
            out[o] = ref_runs(v, per_out / len, len);
        }
    }
    free(fill);
    free(g);
}

static double *rand_doubles(int64_t n, uint64_t seed)
{
    double *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        double m = (double)(int64_t)(seed >> 11) * 0x1p-53 - 0.5;
        v[i] = ldexp(m, (int)((seed >> 3) % 80) - 40);
    }
    return v;
}

Test(cpu_reduce, large_shapes_match_the_documented_block_tree, .timeout = 120)
{
    /* 53-bit mantissas scaled by 2^-40..2^39, so f64 sums round and any other order gives
     * other bits; the f32 copy checks the double accumulator rounded once. Shapes reach
     * every branch: runs longer than a block and cut (9000), runs grouped into blocks
     * (37: 110 runs a block), several blocks per output (pairwise combine), the column
     * path. */
    static const struct {
        int64_t d[3];
        int mask;
        uint32_t rank;
        int64_t dims[3];
    } cases[] = {
        {{50, 40, 37}, 0x1, 2, {40, 37}},   /* column path */
        {{50, 40, 37}, 0x4, 2, {50, 40}},   /* row path, one short run */
        {{50, 40, 37}, 0x5, 1, {40}},       /* 50 runs of 37: one block */
        {{300, 2, 37}, 0x5, 1, {2}},        /* 300 runs of 37: 3 blocks */
        {{50, 40, 37}, 0x2, 2, {50, 37}},   /* column path, reduced group in the middle */
        {{50, 40, 37}, 0x6, 1, {50}},       /* row path over merged axes */
        {{50, 40, 37}, 0x7, 0, {0}},        /* everything: 74000, 19 blocks */
        {{3, 5, 9000}, 0x4, 2, {3, 5}},     /* runs of 9000: 3 blocks each */
        {{3, 5, 9000}, 0x5, 1, {5}},        /* 3 runs of 9000 cut into 9 blocks */
        {{1, 1, 300001}, 0x7, 0, {0}},      /* 74 blocks: heap partials */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int64_t *d = cases[c].d;
        const int64_t n = d[0] * d[1] * d[2];
        double *xv = rand_doubles(n, 12345 + c), *xr = malloc((size_t)n * sizeof *xr);
        for (int64_t i = 0; i < n; i++) xr[i] = (double)(float)xv[i];
        td__view x64 = tu_new(dev, TD_F64, 3, d, xv);
        td__view x32 = tu_from_doubles(dev, TD_F32, 3, d, xr);
        td__view o = reduce(TD_OP_SUM, &x64, cases[c].mask, 0, TD_F64, cases[c].rank,
                            cases[c].dims);
        int64_t nout = tu_nelem(&o);
        double *want = malloc((size_t)nout * sizeof *want);
        ref_sum3(xv, d, cases[c].mask, want, nout);
        for (int64_t k = 0; k < nout; k++)
            cr_assert_eq(((double *)o.data)[k], want[k], "case %zu f64 output %lld: %a vs %a",
                         c, (long long)k, ((double *)o.data)[k], want[k]);
        tu_free(dev, &o);
        o = reduce(TD_OP_SUM, &x32, cases[c].mask, 0, TD_F32, cases[c].rank, cases[c].dims);
        ref_sum3(xr, d, cases[c].mask, want, nout);
        for (int64_t k = 0; k < nout; k++)
            cr_assert_eq(((float *)o.data)[k], (float)want[k], "case %zu f32 output %lld", c,
                         (long long)k);
        tu_free(dev, &o);
        o = reduce(TD_OP_MEAN, &x32, cases[c].mask, 0, TD_F32, cases[c].rank, cases[c].dims);
        for (int64_t k = 0; k < nout; k++)
            cr_assert_eq(((float *)o.data)[k], (float)(want[k] / (double)(n / nout)),
                         "case %zu mean f32 output %lld", c, (long long)k);
        free(want);
        tu_free(dev, &o);
        tu_free(dev, &x64);
        tu_free(dev, &x32);
        free(xv);
        free(xr);
    }
}

/* Values exact in double whatever the order (multiples of 1/16, partial sums < 2^53), so the
 * expected sums follow by hand: x[i] = (i % 17) / 16 over n elements sums to
 * (q * 136 + r(r-1)/2) / 16 with n = 17q + r. Large enough for many blocks and threads. */
Test(cpu_reduce, exact_sums_of_millions)
{
    const int64_t ns[] = {4096, 4097, 1 << 20, 3000017};
    for (size_t t = 0; t < sizeof ns / sizeof ns[0]; t++) {
        const int64_t n = ns[t];
        td__view x = tu_new(dev, TD_F32, 1, DIMS(n), NULL);
        for (int64_t i = 0; i < n; i++) ((float *)x.data)[i] = (float)(i % 17) / 16.0f;
        const int64_t q = n / 17, r = n % 17;
        const double want = (double)(q * 136 + r * (r - 1) / 2) / 16.0;
        td__view o = reduce(TD_OP_SUM, &x, 0x1, 0, TD_F32, 0, NULL);
        cr_assert_eq(((float *)o.data)[0], (float)want, "n %lld", (long long)n);
        tu_free(dev, &o);
        o = reduce(TD_OP_MEAN, &x, 0x1, 0, TD_F32, 0, NULL);
        cr_assert_eq(((float *)o.data)[0], (float)(want / (double)n), "mean n %lld",
                     (long long)n);
        tu_free(dev, &o);
        tu_free(dev, &x);
    }
}

/* Accuracy of f64 sums of random data against a long double sum (independent of any
 * order): within (4096 / 32 + 5 + log2(blocks) + 1) * 2^-53 * sum |x|, the bound of 128
 * sequential adds in a lane, 5 lane levels, the block tree and rounding. */
Test(cpu_reduce, f64_sums_within_the_tree_bound)
{
    const int64_t n = 2000003;
    double *v = rand_doubles(n, 777);
    for (int64_t i = 0; i < n; i++) v[i] = ldexp(v[i], -(int)(i % 7)) + 0x1p-30;
    long double ref = 0, mag = 0;
    for (int64_t i = 0; i < n; i++) {
        ref += v[i];
        mag += fabsl((long double)v[i]);
    }
    td__view x = tu_new(dev, TD_F64, 1, DIMS(n), v);
    td__view o = reduce(TD_OP_SUM, &x, 0x1, 0, TD_F64, 0, NULL);
    const double bound = (128 + 5 + 9 + 1) * 0x1p-53 * (double)mag;
    cr_assert_leq(fabs(((double *)o.data)[0] - (double)ref), bound, "%a vs %La",
                  ((double *)o.data)[0], ref);
    tu_free(dev, &o);
    tu_free(dev, &x);
    free(v);
}

/* ---- max/min/argmax/argmin: exactly the ascending fold, specials included ---- */

/* Ascending folds written here: max/min keep the accumulator unless v is NaN or better
 * (so: the last NaN, else the first of equal values); arg gives the first index of the
 * best, the first NaN if any. */
static float ref_extreme(const float *x, int64_t n, int64_t stride, bool mx)
{
    float a = mx ? -INFINITY : INFINITY;
    for (int64_t k = 0; k < n; k++) {
        float v = x[k * stride];
        if ((mx ? v > a : v < a) || v != v) a = v;
    }
    return a;
}

static int64_t ref_arg(const float *x, int64_t n, int64_t stride, bool mx)
{
    int64_t at = 0;
    for (int64_t k = 1; k < n && x[at * stride] == x[at * stride]; k++) {
        float v = x[k * stride], b = x[at * stride];
        if ((mx ? v > b : v < b) || v != v) at = k;
    }
    return at;
}

static float nan_with(uint32_t payload)
{
    uint32_t u = 0x7fc00000u | (payload & 0x3fffffu);
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

Test(cpu_reduce, extremes_are_the_ascending_fold, .timeout = 120)
{
    /* rows of 10000 (3 blocks) with: plain data, zeros of both signs as the maximum, NaNs
     * with distinct payloads in several blocks, ties of the extreme, all -inf */
    const int64_t rows = 8, cols = 10000;
    float *h = malloc((size_t)(rows * cols) * sizeof *h);
    uint64_t s = 99;
    for (int64_t i = 0; i < rows * cols; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        h[i] = (float)((int64_t)(s >> 40) % 2001 - 1000) / 8.0f;
    }
    float *r1 = h + cols, *r2 = h + 2 * cols, *r3 = h + 3 * cols, *r4 = h + 4 * cols;
    for (int64_t k = 0; k < cols; k++) { /* row 1: non-positive with zeros of both signs */
        r1[k] = -fabsf(r1[k]);
        if (k % 997 == 5) r1[k] = (k / 997) % 2 ? 0.0f : -0.0f;
    }
    r2[7000] = nan_with(1); /* row 2: NaNs in two blocks */
    r2[9000] = nan_with(2);
    r2[100] = nan_with(3);
    for (int64_t k = 0; k < cols; k++) r3[k] = -INFINITY; /* row 3: all -inf */
    for (int64_t k = 0; k < cols; k++) r4[k] = (float)(k % 3); /* row 4: ties */
    h[5 * cols + 4095] = 1e30f; /* row 5: the extreme at block edges */
    h[5 * cols + 4096] = 1e30f;
    h[6 * cols + 9999] = -1e30f;
    h[7 * cols + 3] = nan_with(9); /* row 7: a NaN in the first chunk */
    td__view x = tu_new(dev, TD_F32, 2, DIMS(rows, cols), h);
    for (int mx = 0; mx <= 1; mx++) {
        td__view o = reduce(mx ? TD_OP_MAX : TD_OP_MIN, &x, 0x2, 0, TD_F32, 1, DIMS(rows));
        td__view a = reduce(mx ? TD_OP_ARGMAX : TD_OP_ARGMIN, &x, 0x2, 0, TD_I64, 1,
                            DIMS(rows));
        for (int64_t r = 0; r < rows; r++) {
            float want = ref_extreme(h + r * cols, cols, 1, mx);
            cr_assert_eq(memcmp(&((float *)o.data)[r], &want, 4), 0, "%s row %lld: %a vs %a",
                         mx ? "max" : "min", (long long)r, ((float *)o.data)[r], want);
            cr_assert_eq(((int64_t *)a.data)[r], ref_arg(h + r * cols, cols, 1, mx),
                         "arg%s row %lld", mx ? "max" : "min", (long long)r);
        }
        tu_free(dev, &o);
        tu_free(dev, &a);
        /* the column path: axis 0 of the same matrix */
        o = reduce(mx ? TD_OP_MAX : TD_OP_MIN, &x, 0x1, 0, TD_F32, 1, DIMS(cols));
        a = reduce(mx ? TD_OP_ARGMAX : TD_OP_ARGMIN, &x, 0x1, 0, TD_I64, 1, DIMS(cols));
        for (int64_t k = 0; k < cols; k++) {
            float want = ref_extreme(h + k, rows, cols, mx);
            cr_assert_eq(memcmp(&((float *)o.data)[k], &want, 4), 0, "col %lld", (long long)k);
            cr_assert_eq(((int64_t *)a.data)[k], ref_arg(h + k, rows, cols, mx), "argcol %lld",
                         (long long)k);
        }
        tu_free(dev, &o);
        tu_free(dev, &a);
    }
    tu_free(dev, &x);
    free(h);
}

/* ---- the same bits at 1, 2 and 5 threads, and from every kernel variant ---- */

typedef struct red_case {
    uint32_t opcode, dtype, out_dtype;
    int64_t d[3];
    int mask;
    uint32_t rank;
    int64_t dims[3];
} red_case;

static const red_case bit_cases[] = {
    {TD_OP_SUM, TD_F32, TD_F32, {1, 1, 2000003}, 0x7, 0, {0}},     /* 489 blocks */
    {TD_OP_SUM, TD_F32, TD_F32, {3, 7, 100003}, 0x4, 2, {3, 7}},   /* 25 blocks a row */
    {TD_OP_SUM, TD_F32, TD_F32, {300, 30, 37}, 0x5, 1, {30}},      /* grouped runs */
    {TD_OP_SUM, TD_F32, TD_F32, {1, 4096, 300}, 0x2, 1, {300}},    /* column */
    {TD_OP_MEAN, TD_F64, TD_F64, {1, 400, 4096}, 0x4, 1, {400}},   /* one block a row */
    {TD_OP_SUM, TD_F64, TD_F64, {1, 1, 1000003}, 0x7, 0, {0}},
    {TD_OP_PROD, TD_F32, TD_F32, {1, 9, 70001}, 0x4, 1, {9}},
    {TD_OP_PROD, TD_F64, TD_F64, {1, 3000, 70}, 0x2, 1, {70}},
    {TD_OP_MAX, TD_F32, TD_F32, {1, 5, 300007}, 0x4, 1, {5}},
    {TD_OP_MIN, TD_F64, TD_F64, {1, 5, 300007}, 0x4, 1, {5}},
    {TD_OP_MAX, TD_F32, TD_F32, {1, 3000, 70}, 0x2, 1, {70}},
    {TD_OP_ARGMAX, TD_F32, TD_I64, {1, 5, 300007}, 0x4, 1, {5}},
    {TD_OP_ARGMIN, TD_F64, TD_I64, {1, 5, 300007}, 0x4, 1, {5}},
    {TD_OP_ARGMAX, TD_F32, TD_I64, {1, 3000, 70}, 0x2, 1, {70}},
    {TD_OP_SUM, TD_I32, TD_I32, {1, 7, 100003}, 0x4, 1, {7}},
};

/* Inputs: values near 1 (products stay finite), with a NaN and signed zeros in some rows. */
static td__view bit_input(td__device *d, const red_case *c)
{
    const int64_t n = c->d[0] * c->d[1] * c->d[2];
    td__view x = tu_new(d, c->dtype, 3, c->d, NULL);
    uint64_t s = 4242;
    for (int64_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        double v = 1.0 + ((double)(s >> 11) * 0x1p-53 - 0.5) * 1e-4;
        if (c->opcode != TD_OP_PROD && i % 50021 == 17) v = (i / 50021) % 2 ? NAN : -0.0;
        switch (c->dtype) {
        case TD_F32: ((float *)x.data)[i] = (float)v; break;
        case TD_F64: ((double *)x.data)[i] = v; break;
        case TD_I32: ((int32_t *)x.data)[i] = (int32_t)(s >> 33); break;
        }
    }
    return x;
}

static void *bits_of(td__device *d, const red_case *c)
{
    td__view x = bit_input(d, c);
    td__view o = tu_new(d, c->out_dtype, c->rank, c->dims, NULL);
    cr_assert_eq(tu_exec(d, tu_op(c->opcode, 2, DIMS(c->mask, 0)), &x, 1, &o), TD_OK, "%s",
                 tu_err);
    void *copy = malloc(tu_nbytes(&o));
    memcpy(copy, o.data, tu_nbytes(&o));
    tu_free(d, &o);
    tu_free(d, &x);
    return copy;
}

static size_t out_bytes(const red_case *c)
{
    size_t n = c->out_dtype == TD_I32 ? 4 : c->out_dtype == TD_F32 ? 4 : 8;
    for (uint32_t i = 0; i < c->rank; i++) n *= (size_t)c->dims[i];
    return n;
}

Test(cpu_reduce, same_bits_at_1_2_and_5_threads, .timeout = 120)
{
    td__device *devs[3] = {tu_open(1), tu_open(2), tu_open(5)};
    for (size_t c = 0; c < sizeof bit_cases / sizeof bit_cases[0]; c++) {
        void *a = bits_of(devs[0], &bit_cases[c]);
        for (int k = 1; k < 3; k++) {
            void *b = bits_of(devs[k], &bit_cases[c]);
            cr_assert_eq(memcmp(a, b, out_bytes(&bit_cases[c])), 0,
                         "case %zu: 1 and %d threads differ", c, k == 1 ? 2 : 5);
            free(b);
        }
        free(a);
    }
    for (int k = 0; k < 3; k++) tu_close(devs[k]);
}

Test(cpu_reduce, same_bits_from_every_kernel_variant, .timeout = 120)
{
    static const char *const isas[] = {"avx2", "avx512"};
    cr_assert(td__cpu_reduce_force_isa("generic"));
    cr_assert_str_eq(td__cpu_reduce_isa(), "generic");
    void *want[sizeof bit_cases / sizeof bit_cases[0]];
    for (size_t c = 0; c < sizeof bit_cases / sizeof bit_cases[0]; c++)
        want[c] = bits_of(dev, &bit_cases[c]);
    int ran = 0;
    for (size_t i = 0; i < sizeof isas / sizeof isas[0]; i++) {
        if (!td__cpu_reduce_force_isa(isas[i])) continue; /* not in this build or CPU */
        ran++;
        for (size_t c = 0; c < sizeof bit_cases / sizeof bit_cases[0]; c++) {
            void *got = bits_of(dev, &bit_cases[c]);
            cr_assert_eq(memcmp(got, want[c], out_bytes(&bit_cases[c])), 0,
                         "case %zu: %s and generic differ", c, isas[i]);
            free(got);
        }
    }
    cr_assert(td__cpu_reduce_force_isa(NULL));
    cr_assert(!td__cpu_reduce_force_isa("sse9"));
    for (size_t c = 0; c < sizeof bit_cases / sizeof bit_cases[0]; c++) free(want[c]);
    cr_log_info("kernel variants compared with generic: %d (best here: %s)", ran,
                td__cpu_reduce_isa());
}

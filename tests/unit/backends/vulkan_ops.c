/* vulkan_ops.c — cases of the Vulkan backend's ops through the public API on
 * local:vulkan:0, against values from an independent reference.
 *
 * sinh and cosh near the overflow edge: e^|x| overflows past |x| = 709.78 (f64) while
 * sinh x = cosh x ~ e^|x| / 2 stays below DBL_MAX up to |x| = 710.4758 (f32: e^x overflows
 * f32 past 88.72, sinh stays finite up to 89.4159). An implementation that forms e^|x| (or
 * a product that exceeds the range on the way) gives inf there, as NVIDIA's driver did
 * (CONFORMANCE.md, 2026-12-05). Expected values: mpmath 1.3 at 200 bits, rounded to
 * nearest in the dtype (the script is in the comment above the table); the bound is 4 ulp
 * for f64 (the conformance bound for SINH/COSH is 6) and 1 ulp for f32 (the shader computes
 * in double and rounds once).
 *
 * Long reductions (below): split over many workgroups, against sums known in integers.
 * Skipped where there is no Vulkan device.
 */
#include "tensord.h"
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static td_context *open_vulkan(void)
{
    td_context *ctx = NULL;
    if (td_connect("local:vulkan:0", NULL, &ctx) != TD_OK) return NULL;
    return ctx;
}

/* python3: import mpmath; mpmath.mp.prec = 200
 *   f64: float(mpmath.sinh(mpmath.mpf(x))), float(mpmath.cosh(...))
 *   f32: x the float32 value of the literal; with mpmath.workprec(24): +mpmath.sinh(x) */
static const double k_x64[] = {709.0, 709.78, 710.0, 710.4, 710.47, -710.2, 710.48, 711.0};
static const double k_sinh64[] = {4.109203730777486e+307, 8.964113971972578e+307,
                                  1.1169973830808555e+308, 1.6663642832806496e+308,
                                  1.7871893267684048e+308, -1.3643036845527107e+308,
                                  INFINITY, INFINITY};
static const double k_cosh64[] = {4.109203730777486e+307, 8.964113971972578e+307,
                                  1.1169973830808555e+308, 1.6663642832806496e+308,
                                  1.7871893267684048e+308, 1.3643036845527107e+308,
                                  INFINITY, INFINITY};
static const float k_x32[] = {88.5f, 88.8f, 89.0f, 89.2f, 89.4f, 89.41f, -89.3f, 89.42f};
static const float k_sinh32[] = {1.361543959006414e+38f, 1.8378976450782574e+38f,
                                 2.2448063889081578e+38f, 2.741804322770982e+38f,
                                 3.3488627241070614e+38f, 3.3825266562708183e+38f,
                                 -3.0301810422843736e+38f, INFINITY};
static const float k_cosh32[] = {1.361543959006414e+38f, 1.8378976450782574e+38f,
                                 2.2448063889081578e+38f, 2.741804322770982e+38f,
                                 3.3488627241070614e+38f, 3.3825266562708183e+38f,
                                 3.0301810422843736e+38f, INFINITY};

#define N 8

static void check64(const char *what, const double *got, const double *want)
{
    for (int i = 0; i < N; i++) {
        if (isinf(want[i])) {
            cr_expect(got[i] == want[i], "%s(%.17g) = %.17g, want %g", what, k_x64[i], got[i],
                      want[i]);
            continue;
        }
        const double ulp = nextafter(fabs(want[i]), INFINITY) - fabs(want[i]);
        cr_expect(isfinite(got[i]) && fabs(got[i] - want[i]) <= 4 * ulp,
                  "%s(%.17g) = %.17g, want %.17g (4 ulp)", what, k_x64[i], got[i], want[i]);
    }
}

static void check32(const char *what, const float *got, const float *want)
{
    for (int i = 0; i < N; i++) {
        if (isinf(want[i])) {
            cr_expect(got[i] == want[i], "%s(%.9g) = %.9g, want %g", what, k_x32[i], got[i],
                      want[i]);
            continue;
        }
        const float ulp = nextafterf(fabsf(want[i]), INFINITY) - fabsf(want[i]);
        cr_expect(isfinite(got[i]) && fabsf(got[i] - want[i]) <= ulp,
                  "%s(%.9g) = %.9g, want %.9g (1 ulp)", what, k_x32[i], got[i], want[i]);
    }
}

Test(vulkan_ops, sinh_cosh_f64_near_overflow)
{
    td_context *ctx = open_vulkan();
    if (ctx == NULL) cr_skip_test("no Vulkan device");
    td_tensor *x = td_from_host(ctx, TD_F64, 1, (int64_t[]){N}, k_x64);
    double s[N], c[N];
    cr_assert_eq(td_read(td_sinh(x), s, sizeof s), TD_OK, "%s", td_last_error(ctx));
    cr_assert_eq(td_read(td_cosh(x), c, sizeof c), TD_OK, "%s", td_last_error(ctx));
    check64("sinh", s, k_sinh64);
    check64("cosh", c, k_cosh64);
    td_close(ctx);
}

Test(vulkan_ops, sinh_cosh_f32_near_overflow)
{
    td_context *ctx = open_vulkan();
    if (ctx == NULL) cr_skip_test("no Vulkan device");
    td_tensor *x = td_from_host(ctx, TD_F32, 1, (int64_t[]){N}, k_x32);
    float s[N], c[N];
    cr_assert_eq(td_read(td_sinh(x), s, sizeof s), TD_OK, "%s", td_last_error(ctx));
    cr_assert_eq(td_read(td_cosh(x), c, sizeof c), TD_OK, "%s", td_last_error(ctx));
    check32("sinh", s, k_sinh32);
    check32("cosh", c, k_cosh32);
    td_close(ctx);
}

/* ---- long reductions to a scalar or a few rows (split over many workgroups,
 * backends/vulkan/vk_reduce.c) ----
 * x[i] = (i % 1000) / 4, so every partial sum is a multiple of 1/4 below 2^33 and exact in
 * double: the sum is known in integers (sum_ref) and the result is its one rounding to f32.
 * Two equal maxima (1000) sit in different chunks: argmax is the first. 20M elements fold
 * more than lavapipe's 60000 loop iterations per invocation in one workgroup, so before the
 * split these ops were refused there (TD_EUNSUPPORTED). Each op runs twice: same bytes. */
#define NR 20000000
#define MAXA 7654321
#define MAXB 17654321

static double sum_ref(int64_t lo, int64_t hi) /* sum of (i % 1000) / 4 over [lo, hi) */
{
    int64_t s = 0;
    for (int64_t i = lo; i < hi; i++) s += i % 1000;
    if (lo <= MAXA && MAXA < hi) s += 4000 - MAXA % 1000;
    if (lo <= MAXB && MAXB < hi) s += 4000 - MAXB % 1000;
    return (double)s / 4;
}

static float *long_input(void)
{
    float *h = malloc((size_t)NR * sizeof *h);
    cr_assert(h != NULL);
    for (int64_t i = 0; i < NR; i++) h[i] = (float)(i % 1000) / 4;
    h[MAXA] = h[MAXB] = 1000.0f;
    return h;
}

/* td_read of t twice (the op recomputed), the same bytes both times, into out. */
static void read_twice(td_tensor *(*mk)(td_tensor *), td_tensor *x, void *out, size_t nb)
{
    void *again = malloc(nb);
    cr_assert(again != NULL);
    cr_assert_eq(td_read(mk(x), out, nb), TD_OK, "%s", td_last_error(td_tensor_context(x)));
    cr_assert_eq(td_read(mk(x), again, nb), TD_OK);
    cr_assert(memcmp(out, again, nb) == 0, "two runs gave different bytes");
    free(again);
}

static td_tensor *all_sum(td_tensor *x) { return td_sum(x, 0, NULL, false); }
static td_tensor *all_mean(td_tensor *x) { return td_mean(x, 0, NULL, false); }
static td_tensor *all_max(td_tensor *x) { return td_max(x, 0, NULL, false); }
static td_tensor *all_min(td_tensor *x) { return td_min(x, 0, NULL, false); }
static td_tensor *arg_max(td_tensor *x) { return td_argmax(x, 0, false); }
static td_tensor *rows_sum(td_tensor *x) { return td_sum(x, 1, (int[]){1}, false); }
static td_tensor *rows_argmax(td_tensor *x) { return td_argmax(x, 1, false); }

Test(vulkan_ops, long_reductions_to_a_scalar, .timeout = 300)
{
    td_context *ctx = open_vulkan();
    if (ctx == NULL) cr_skip_test("no Vulkan device");
    float *h = long_input();
    td_tensor *x = td_from_host(ctx, TD_F32, 1, (int64_t[]){NR}, h);
    float f;
    int64_t k;
    read_twice(all_sum, x, &f, sizeof f);
    cr_expect_eq(f, (float)sum_ref(0, NR), "sum %.9g, want %.9g", f, (float)sum_ref(0, NR));
    read_twice(all_mean, x, &f, sizeof f);
    cr_expect_eq(f, (float)(sum_ref(0, NR) / NR), "mean %.9g, want %.9g", f,
                 (float)(sum_ref(0, NR) / NR));
    read_twice(all_max, x, &f, sizeof f);
    cr_expect_eq(f, 1000.0f);
    read_twice(all_min, x, &f, sizeof f);
    cr_expect_eq(f, 0.0f);
    read_twice(arg_max, x, &k, sizeof k);
    cr_expect_eq(k, MAXA, "argmax %lld, want the first maximum %d", (long long)k, MAXA);
    /* NaN at two places: max is NaN, argmax the first NaN (tensord.h) */
    h[3000001] = h[19000001] = NAN;
    td_tensor *y = td_from_host(ctx, TD_F32, 1, (int64_t[]){NR}, h);
    read_twice(all_max, y, &f, sizeof f);
    cr_expect(isnan(f), "max %g, want NaN", f);
    read_twice(arg_max, y, &k, sizeof k);
    cr_expect_eq(k, 3000001, "argmax %lld, want the first NaN 3000001", (long long)k);
    free(h);
    td_close(ctx);
}

Test(vulkan_ops, long_reductions_of_a_few_rows, .timeout = 300)
{
    td_context *ctx = open_vulkan();
    if (ctx == NULL) cr_skip_test("no Vulkan device");
    float *h = long_input();
    const int64_t rows = 4, cols = NR / 4;
    td_tensor *x = td_from_host(ctx, TD_F32, 2, (int64_t[]){rows, cols}, h);
    float f[4];
    int64_t k[4];
    read_twice(rows_sum, x, f, sizeof f);
    for (int r = 0; r < rows; r++)
        cr_expect_eq(f[r], (float)sum_ref(r * cols, (r + 1) * cols), "row %d: %.9g, want %.9g",
                     r, f[r], (float)sum_ref(r * cols, (r + 1) * cols));
    read_twice(rows_argmax, x, k, sizeof k);
    /* row 1 holds MAXA (7654321 - 5000000), row 3 MAXB; rows 0 and 2 the first 249.75 */
    const int64_t want[4] = {999, MAXA - cols, 999, MAXB - 3 * cols};
    for (int r = 0; r < rows; r++)
        cr_expect_eq(k[r], want[r], "row %d: argmax %lld, want %lld", r, (long long)k[r],
                     (long long)want[r]);
    free(h);
    td_close(ctx);
}

/* ---- reductions of a short extent into many outputs ----
 * One workgroup per output cost ~0.1-0.5 ms each on lavapipe: the sum over axis 1 of
 * [200000, 1] took over a minute and of an empty [8M, 0] more than ten, holding the device.
 * Now one invocation per output (reduce.comp's mode 3); the .timeout makes a regression fail
 * instead of hang (5 minutes, the one value every test of this file uses: tests/lsan.supp
 * says why; the [8M, 0] case takes ~2 s here and over 30 s under ASan in CI; the old code
 * took over ten minutes). Expected values: the CPU device's, which are exact here. */
static td_context *open_cpu(void)
{
    td_context *ctx = NULL;
    cr_assert_eq(td_connect("local:cpu", NULL, &ctx), TD_OK, "%s", td_connect_error());
    return ctx;
}

static void sum_axis1_like_cpu(int64_t rows, int64_t cols)
{
    td_context *vk = open_vulkan();
    if (vk == NULL) cr_skip_test("no Vulkan device");
    td_context *cpu = open_cpu();
    const int64_t n = rows * cols;
    float *h = malloc((size_t)(n > 0 ? n : 1) * sizeof *h);
    float *got = malloc((size_t)rows * sizeof *got), *want = malloc((size_t)rows * sizeof *want);
    cr_assert(h != NULL && got != NULL && want != NULL);
    for (int64_t i = 0; i < n; i++) h[i] = (float)(i % 997) - 498.5f;
    const int64_t dims[2] = {rows, cols};
    const int ax = 1;
    td_tensor *xv = td_from_host(vk, TD_F32, 2, dims, h);
    td_tensor *xc = td_from_host(cpu, TD_F32, 2, dims, h);
    cr_assert_eq(td_read(td_sum(xv, 1, &ax, false), got, (size_t)rows * sizeof *got), TD_OK,
                 "%s", td_last_error(vk));
    cr_assert_eq(td_read(td_sum(xc, 1, &ax, false), want, (size_t)rows * sizeof *want), TD_OK,
                 "%s", td_last_error(cpu));
    cr_expect(memcmp(got, want, (size_t)rows * sizeof *got) == 0,
              "sum over axis 1 of [%lld, %lld] differs from the CPU's", (long long)rows,
              (long long)cols);
    free(h);
    free(got);
    free(want);
    td_close(vk);
    td_close(cpu);
}

Test(vulkan_ops, sum_of_many_single_element_rows, .timeout = 300) { sum_axis1_like_cpu(200000, 1); }

Test(vulkan_ops, sum_of_many_short_rows, .timeout = 300) { sum_axis1_like_cpu(100000, 7); }

Test(vulkan_ops, reductions_of_empty_rows, .timeout = 300)
{
    td_context *vk = open_vulkan();
    if (vk == NULL) cr_skip_test("no Vulkan device");
    const int64_t rows = 8 << 20, dims[2] = {rows, 0};
    const int ax = 1;
    td_tensor *x = td_full(vk, TD_F32, 2, dims, 0.0);
    float *o = malloc((size_t)rows * sizeof *o);
    cr_assert(o != NULL);
    cr_assert_eq(td_read(td_sum(x, 1, &ax, false), o, (size_t)rows * sizeof *o), TD_OK, "%s",
                 td_last_error(vk));
    int64_t bad = 0;
    for (int64_t i = 0; i < rows; i++) bad += o[i] != 0.0f || signbit(o[i]);
    cr_expect_eq(bad, 0, "sum of empty rows: %lld outputs not +0", (long long)bad);
    const int64_t small[2] = {1000, 0};
    td_tensor *y = td_full(vk, TD_F32, 2, small, 0.0);
    cr_assert_eq(td_read(td_prod(y, 1, &ax, false), o, 1000 * sizeof *o), TD_OK);
    cr_expect(o[0] == 1.0f && o[999] == 1.0f, "prod of empty rows %g, want 1", o[0]);
    cr_assert_eq(td_read(td_mean(y, 1, &ax, false), o, 1000 * sizeof *o), TD_OK);
    cr_expect(isnan(o[0]) && isnan(o[999]), "mean of empty rows %g, want NaN", o[0]);
    cr_assert_eq(td_read(td_var(x, 1, &ax, false, 1.0), o, (size_t)rows * sizeof *o), TD_OK,
                 "%s", td_last_error(vk));
    cr_expect(isnan(o[0]) && isnan(o[rows - 1]), "var of empty rows %g, want NaN", o[0]);
    free(o);
    td_close(vk);
}

/* The same rows reduced one workgroup per output (256 rows: mode 0) and one invocation per
 * output (257 rows on lavapipe: mode 3) give the same bytes: mode 3 replays mode 0's fold
 * order (runs of ceil(cols / 256), then the tree of adjacent pairs). NaNs and ties check the
 * order rules of MAX and ARGMAX. */
static void same_bytes(td_tensor *(*mk)(td_tensor *), td_tensor *a, td_tensor *b, size_t esz)
{
    char ra[256 * 8], rb[257 * 8];
    cr_assert_eq(td_read(mk(a), ra, 256 * esz), TD_OK, "%s",
                 td_last_error(td_tensor_context(a)));
    cr_assert_eq(td_read(mk(b), rb, 257 * esz), TD_OK);
    cr_expect(memcmp(ra, rb, 256 * esz) == 0, "mode 0 and mode 3 differ");
}

static td_tensor *ax1_sum(td_tensor *x) { return td_sum(x, 1, (int[]){1}, false); }
static td_tensor *ax1_prod(td_tensor *x) { return td_prod(x, 1, (int[]){1}, false); }
static td_tensor *ax1_max(td_tensor *x) { return td_max(x, 1, (int[]){1}, false); }
static td_tensor *ax1_argmax(td_tensor *x) { return td_argmax(x, 1, false); }

Test(vulkan_ops, short_folds_keep_the_workgroup_order, .timeout = 300)
{
    td_context *vk = open_vulkan();
    if (vk == NULL) cr_skip_test("no Vulkan device");
    const int64_t widths[] = {3, 200, 777, 1000};
    for (size_t w = 0; w < sizeof widths / sizeof *widths; w++) {
        const int64_t cols = widths[w], n = 257 * cols;
        double *h = malloc((size_t)n * sizeof *h);
        cr_assert(h != NULL);
        uint64_t s = 12345;
        for (int64_t i = 0; i < n; i++) {
            s = s * 6364136223846793005u + 1442695040888963407u;
            h[i] = ldexp((double)(s >> 11), -53) * (s & 1 ? 1e8 : 1e-3) - 0.4;
            if (s % 97 == 0) h[i] = 1e9; /* ties for argmax */
            if (s % 1009 == 0) h[i] = NAN;
        }
        td_tensor *a = td_from_host(vk, TD_F64, 2, (int64_t[]){256, cols}, h);
        td_tensor *b = td_from_host(vk, TD_F64, 2, (int64_t[]){257, cols}, h);
        same_bytes(ax1_sum, a, b, 8);
        same_bytes(ax1_prod, a, b, 8);
        same_bytes(ax1_max, a, b, 8);
        same_bytes(ax1_argmax, a, b, 8);
        free(h);
    }
    td_close(vk);
}

/* ---- f64 pow at the edges of its range ----
 * Huge |y| (an even integer: Dekker's split of 2^27 y overflowed to NaN), overflow and
 * underflow, and a large y where log x must carry ~2^-62 relative (m + 1 rounded cost 200
 * ulp of pow(1.0000001, 2^32)). Reference: this C library's pow, bound 8 ulp (docs/ops.md);
 * exact for infinities, zeros and NaN. */
Test(vulkan_ops, pow_f64_edges)
{
    td_context *vk = open_vulkan();
    if (vk == NULL) cr_skip_test("no Vulkan device");
    static const double xs[] = {-1.0, 5.5, 3.0, 1e308, 1e-45, 5e-324, 1.0000001, 3.0,
                                -1.0, -3.0, -3.0, 0.5, 2.0, 2.0, 10.0, 0.9999999999999999,
                                1.0000000000000002, -2.0, 7.0, 1e-300, 1e300, 2.5, -0.5,
                                4294967296.0, 1.5};
    static const double ys[] = {1e308, 1e308, 1e308, 1e308, 1e308, 1e308, 4294967296.0, -1.0,
                                -1e308, 3.0, -1e300, -1e308, 1023.9999, -1074.5, -307.5,
                                -1e19, 4e18, 1023.0, 364.7, -1.02, 1.027, -800.1, 1073.0,
                                31.99, 1750.5};
    enum { NP = sizeof xs / sizeof *xs };
    td_tensor *x = td_from_host(vk, TD_F64, 1, (int64_t[]){NP}, xs);
    td_tensor *y = td_from_host(vk, TD_F64, 1, (int64_t[]){NP}, ys);
    double got[NP];
    cr_assert_eq(td_read(td_pow(x, y), got, sizeof got), TD_OK, "%s", td_last_error(vk));
    for (int i = 0; i < NP; i++) {
        const double want = pow(xs[i], ys[i]);
        if (isnan(want) || isinf(want) || want == 0.0) {
            cr_expect(isnan(want) ? isnan(got[i])
                                  : got[i] == want && signbit(got[i]) == signbit(want),
                      "pow(%.17g, %.17g) = %.17g, want %.17g", xs[i], ys[i], got[i], want);
            continue;
        }
        const double ulp = fabs(want) < DBL_MIN ? 4.9406564584124654e-324
                                                : nextafter(fabs(want), INFINITY) - fabs(want);
        cr_expect(isfinite(got[i]) && fabs(got[i] - want) <= 8 * ulp,
                  "pow(%.17g, %.17g) = %.17g, want %.17g (%.1f ulp, bound 8)", xs[i], ys[i],
                  got[i], want, fabs(got[i] - want) / ulp);
    }
    td_close(vk);
}

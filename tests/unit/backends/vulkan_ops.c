/* vulkan_ops.c — cases of the Vulkan backend's ops through the public API on
 * local:vulkan:0, against values from an independent reference.
 *
 * Long reductions (below): split over many workgroups, against sums known in integers.
 * Skipped where there is no Vulkan device.
 */
#include "tensord.h"
#include <criterion/criterion.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static td_context *open_vulkan(void)
{
    td_context *ctx = NULL;
    if (td_connect("local:vulkan:0", NULL, &ctx) != TD_OK) return NULL;
    return ctx;
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

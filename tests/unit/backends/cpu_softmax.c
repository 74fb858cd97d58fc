/* cpu_softmax.c — the CPU backend's native SOFTMAX and LOG_SOFTMAX (backends/cpu/cpu_softmax.c),
 * through the public API on local:cpu, checked two ways:
 *
 *  1. against the composite they replaced, built here from primitive ops (td_max, td_sub,
 *     td_exp, td_sum, td_div; td_log, td_sub): the bytes must be identical, NaN payloads
 *     and signed zeros included, for every shape, axis and special value below;
 *  2. against a reference computed here with plain loops in long double, within the bound
 *     stated at check_reference().
 */
#include "tensord.h"
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static td_context *ctx;

static void setup(void)
{
    cr_assert_eq(td_connect("local:cpu", NULL, &ctx), TD_OK, "%s", td_connect_error());
}
static void teardown(void) { td_close(ctx); }

TestSuite(cpu_softmax, .init = setup, .fini = teardown);

typedef struct sm_case {
    int rank;
    int64_t dims[4];
    int axis;
} sm_case;

static int64_t nelem(const sm_case *c)
{
    int64_t n = 1;
    for (int i = 0; i < c->rank; i++) n *= c->dims[i];
    return n;
}

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [-8, 8); with `one_in` > 0, about one element in `one_in` is a special value. */
static double gen(uint64_t *s, int one_in)
{
    static const double sp[] = {INFINITY, -INFINITY, NAN, -NAN, 0.0, -0.0, 1e30, -1e30,
                                88.5, -88.5, 1e-40, -1e-310, 700.0, -745.5};
    uint64_t r = splitmix(s);
    if (one_in > 0 && r % (uint64_t)one_in == 0)
        return sp[(r / (uint64_t)one_in) % (sizeof sp / sizeof sp[0])];
    return -8.0 + 16.0 * (double)(splitmix(s) >> 11) * 0x1p-53;
}

static void *make_data(td_dtype dt, int64_t n, uint64_t seed, int one_in)
{
    void *p = malloc((size_t)n * td_dtype_size(dt) + 1);
    cr_assert_not_null(p);
    uint64_t s = seed;
    for (int64_t i = 0; i < n; i++) {
        double v = gen(&s, one_in);
        if (dt == TD_F32) ((float *)p)[i] = (float)v;
        else ((double *)p)[i] = v;
    }
    return p;
}

/* The composite the engine emitted before SOFTMAX/LOG_SOFTMAX were ops. */
static td_tensor *composite(td_tensor *x, int axis, bool lg)
{
    td_tensor *m = td_max(x, 1, &axis, true);
    td_tensor *d = td_sub(x, m);
    td_tensor *e = td_exp(d);
    td_tensor *s = td_sum(e, 1, &axis, true);
    td_tensor *y;
    if (lg) {
        td_tensor *ls = td_log(s);
        y = td_sub(d, ls);
        td_release(ls);
    } else {
        y = td_div(e, s);
    }
    td_release(m);
    td_release(d);
    td_release(e);
    td_release(s);
    return y;
}

/* Run native and composite on `data` and require identical bytes. */
static void check_same_bits(const sm_case *c, td_dtype dt, const void *data)
{
    const int64_t n = nelem(c);
    const size_t nb = (size_t)n * td_dtype_size(dt);
    td_tensor *x = td_from_host(ctx, dt, c->rank, c->dims, data);
    cr_assert_not_null(x, "%s", td_last_error(ctx));
    for (int lg = 0; lg < 2; lg++) {
        td_tensor *nat = lg ? td_log_softmax(x, c->axis) : td_softmax(x, c->axis);
        td_tensor *com = composite(x, c->axis, lg);
        cr_assert(nat != NULL && com != NULL, "%s", td_last_error(ctx));
        unsigned char *a = malloc(nb + 1), *b = malloc(nb + 1);
        cr_assert(a != NULL && b != NULL);
        cr_assert_eq(td_read(nat, a, nb), TD_OK, "%s", td_last_error(ctx));
        cr_assert_eq(td_read(com, b, nb), TD_OK, "%s", td_last_error(ctx));
        if (memcmp(a, b, nb) != 0) {
            const size_t es = td_dtype_size(dt);
            int64_t i = 0;
            while (i < n && memcmp(a + (size_t)i * es, b + (size_t)i * es, es) == 0) i++;
            double va = dt == TD_F32 ? ((float *)a)[i] : ((double *)a)[i];
            double vb = dt == TD_F32 ? ((float *)b)[i] : ((double *)b)[i];
            cr_assert_fail("%s %s rank %d axis %d: element %lld: native %.17g, composite %.17g",
                           lg ? "log_softmax" : "softmax", td_dtype_name(dt), c->rank, c->axis,
                           (long long)i, va, vb);
        }
        free(a);
        free(b);
        td_release(nat);
        td_release(com);
    }
    td_release(x);
}

static const sm_case k_cases[] = {
    {2, {5, 7}, 1},       {2, {5, 7}, 0},          {3, {3, 4, 5}, 0},   {3, {3, 4, 5}, 1},
    {3, {3, 4, 5}, 2},    {3, {3, 4, 5}, -1},      {2, {6, 1}, 1},      {2, {1, 6}, 0},
    {1, {7}, 0},          {1, {1}, 0},             {4, {2, 3, 1, 4}, 2}, {2, {4, 100003}, 1},
    {1, {100003}, 0},     {2, {300, 257}, 0},      {3, {2, 50, 1500}, 1}, {3, {3, 700, 40}, 1},
    {2, {64, 1000}, 0},   {2, {0, 5}, 1},          {3, {2, 0, 3}, 2},
};
#define NCASES (sizeof k_cases / sizeof k_cases[0])

Test(cpu_softmax, native_matches_composite_bits)
{
    const td_dtype dts[] = {TD_F32, TD_F64};
    for (size_t d = 0; d < 2; d++)
        for (size_t i = 0; i < NCASES; i++) {
            const sm_case *c = &k_cases[i];
            const int64_t n = nelem(c);
            /* sparse specials in long rows (most rows stay finite), dense in short ones */
            for (int sp = 0; sp <= 1; sp++) {
                const int one_in = sp ? (n > 5000 ? 5000 : 9) : 0;
                void *data = make_data(dts[d], n, 1000 + i * 7 + d, one_in);
                check_same_bits(c, dts[d], data);
                free(data);
            }
        }
}

/* Rows made of special values, along axis 1 and (transposed) axis 0. */
Test(cpu_softmax, special_rows_match_composite_bits)
{
    const double I = INFINITY;
    const double rows[][5] = {
        {-I, -I, -I, -I, -I},       /* all -inf: m = -inf, -inf - -inf = NaN */
        {1.0, I, 2.0, -I, 0.0},     /* +inf maximum: NaN */
        {1.0, NAN, 2.0, 3.0, -1.0}, /* NaN propagates */
        {-I, 1.0, -I, 2.0, -I},     /* -inf elements give 0 / -inf */
        {-0.0, 0.0, -0.0, -1.0, -2.0},
        {1e30, -1e30, 0.0, 1e30, 5.0},
        {-88.5, -100.0, -745.5, -1e-40, -1e-310},
        {7.0, 7.0, 7.0, 7.0, 7.0},
    };
    const size_t nr = sizeof rows / sizeof rows[0];
    double d64[sizeof rows / sizeof rows[0] * 5];
    float d32[sizeof rows / sizeof rows[0] * 5];
    for (size_t r = 0; r < nr; r++)
        for (int k = 0; k < 5; k++) {
            d64[r * 5 + (size_t)k] = rows[r][k];
            d32[r * 5 + (size_t)k] = (float)rows[r][k];
        }
    for (int axis = 0; axis < 2; axis++) {
        sm_case c = {2, {(int64_t)nr, 5}, axis};
        check_same_bits(&c, TD_F64, d64);
        check_same_bits(&c, TD_F32, d32);
    }
}

/* |got - want| against the long-double reference, for inputs in [-8, 8) (so |x - m| < 16):
 *   softmax:     |got - want| <= (64 u + 2 n 2^-53) want
 *   log_softmax: |got - want| <= (64 + |want|) u + 2 n 2^-53
 * with u = 2^-24 (f32) or 2^-53 (f64) and n the row length. Why: x - m is rounded once
 * (relative u, which exp turns into at most 16 u relative), exp and log are within 1 ulp
 * (2 u), the double sum of n positive terms is within n 2^-53 relative, and the rounding of
 * s and of the final e / s or subtraction add u each: about 40 u in all, rounded up. */
static void check_reference(const sm_case *c, td_dtype dt, const void *data, bool lg)
{
    const int64_t total = nelem(c);
    const int axis = c->axis < 0 ? c->axis + c->rank : c->axis;
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < axis; i++) outer *= c->dims[i];
    for (int i = axis + 1; i < c->rank; i++) inner *= c->dims[i];
    const int64_t n = c->dims[axis];
    const double u = dt == TD_F32 ? 0x1p-24 : 0x1p-53;
    const size_t nb = (size_t)total * td_dtype_size(dt);
    td_tensor *x = td_from_host(ctx, dt, c->rank, c->dims, data);
    td_tensor *y = lg ? td_log_softmax(x, c->axis) : td_softmax(x, c->axis);
    void *got = malloc(nb + 1);
    cr_assert_not_null(got);
    cr_assert_eq(td_read(y, got, nb), TD_OK, "%s", td_last_error(ctx));
    double worst = 0.0;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < inner; j++) {
            const int64_t base = o * n * inner + j;
#define X(k) ((long double)(dt == TD_F32 ? ((const float *)data)[base + (k) * inner]         \
                                         : ((const double *)data)[base + (k) * inner]))
            long double m = X(0), s = 0.0L;
            for (int64_t k = 1; k < n; k++) m = X(k) > m ? X(k) : m;
            for (int64_t k = 0; k < n; k++) s += expl(X(k) - m);
            for (int64_t k = 0; k < n; k++) {
                const long double want =
                    lg ? (X(k) - m) - logl(s) : expl(X(k) - m) / s;
#undef X
                const int64_t at = base + k * inner;
                const double g = dt == TD_F32 ? ((float *)got)[at] : ((double *)got)[at];
                const double w = (double)want;
                const double tol = lg ? (64.0 + fabs(w)) * u + 2.0 * (double)n * 0x1p-53
                                      : (64.0 * u + 2.0 * (double)n * 0x1p-53) * w;
                const double err = fabs(g - w);
                cr_assert(err <= tol,
                          "%s %s axis %d row (%lld, %lld) element %lld: got %.17g, want %.17g "
                          "(|diff| %.3g, tolerance %.3g)",
                          lg ? "log_softmax" : "softmax", td_dtype_name(dt), c->axis,
                          (long long)o, (long long)j, (long long)k, g, w, err, tol);
                if (tol > 0 && err / tol > worst) worst = err / tol;
            }
        }
    cr_log_info("%s %s rank %d axis %d: worst error %.3f of the tolerance",
                lg ? "log_softmax" : "softmax", td_dtype_name(dt), c->rank, c->axis, worst);
    free(got);
    td_release(y);
    td_release(x);
}

Test(cpu_softmax, matches_long_double_reference)
{
    const td_dtype dts[] = {TD_F32, TD_F64};
    for (size_t d = 0; d < 2; d++)
        for (size_t i = 0; i < NCASES; i++) {
            const sm_case *c = &k_cases[i];
            void *data = make_data(dts[d], nelem(c), 77 + i, 0);
            check_reference(c, dts[d], data, false);
            check_reference(c, dts[d], data, true);
            free(data);
        }
}

Test(cpu_softmax, errors_name_the_call)
{
    td_tensor *xi = td_full(ctx, TD_I32, 2, (int64_t[]){2, 3}, 1.0);
    cr_assert_null(td_softmax(xi, 1));
    cr_assert_str_eq(td_last_error(ctx), "td_softmax: needs a float dtype, got i32");
    td_tensor *x = td_full(ctx, TD_F32, 2, (int64_t[]){2, 3}, 1.0);
    cr_assert_null(td_log_softmax(x, 2));
    cr_assert_str_eq(td_last_error(ctx), "td_log_softmax: axis 2 out of range for rank 2");
    cr_assert_null(td_softmax(x, -3));
    cr_assert_str_eq(td_last_error(ctx), "td_softmax: axis -3 out of range for rank 2");
    td_tensor *z = td_full(ctx, TD_F64, 2, (int64_t[]){4, 0}, 1.0);
    cr_assert_null(td_log_softmax(z, -1));
    cr_assert_str_eq(td_last_error(ctx), "td_log_softmax: axis -1 has length 0");
    cr_assert_null(td_softmax(NULL, 0));
    float out[6];
    cr_assert_eq(td_read(td_softmax(x, -1), out, sizeof out), TD_OK, "%s", td_last_error(ctx));
    for (int i = 0; i < 6; i++) cr_assert_eq(out[i], 1.0f / 3.0f, "element %d: %.9g", i, out[i]);
    td_release(xi);
    td_release(x);
    td_release(z);
}

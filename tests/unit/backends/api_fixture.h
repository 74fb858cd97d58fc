/* api_fixture.h — what the suites that test ops through the public API on local:cpu share
 * (cpu_conv.c, cpu_nn.c, cpu_stats.c, movement_ops.c): one local:cpu context per test, and
 * tensors made from doubles and read back as doubles through CAST (exact for the values
 * these suites use: multiples of 1/16 and small integers). Include once per suite, then
 * `TestSuite(name, .init = api_setup, .fini = api_teardown);`.
 * Thread-safety: the test's main thread only. */
#ifndef TD_TESTS_UNIT_BACKENDS_API_FIXTURE_H
#define TD_TESTS_UNIT_BACKENDS_API_FIXTURE_H

#include "tensord.h"
#include <criterion/criterion.h>
#include <stdlib.h>

static td_context *ctx;

static inline void api_setup(void)
{
    cr_assert_eq(td_connect("local:cpu", NULL, &ctx), TD_OK, "%s", td_connect_error());
}

static inline void api_teardown(void) { td_close(ctx); }

static inline int64_t nelem(int rank, const int64_t *d)
{
    int64_t n = 1;
    for (int i = 0; i < rank; i++) n *= d[i];
    return n;
}

/* A tensor of dtype dt holding v (converted by the CAST rules). */
static inline td_tensor *make(td_dtype dt, int rank, const int64_t *dims, const double *v)
{
    td_tensor *f = td_from_host(ctx, TD_F64, rank, dims, v);
    cr_assert_not_null(f, "%s", td_last_error(ctx));
    td_tensor *t = td_cast(f, dt);
    cr_assert_not_null(t, "%s", td_last_error(ctx));
    td_release(f);
    return t;
}

/* The n elements of t as doubles (the caller frees them); NULL with *st set when the read
 * fails (a poisoned tensor). */
static inline double *read_f64_status(td_tensor *t, int64_t n, td_status *st)
{
    cr_assert_not_null(t, "%s", td_last_error(ctx));
    td_tensor *f = td_cast(t, TD_F64);
    cr_assert_not_null(f, "%s", td_last_error(ctx));
    double *out = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    cr_assert_not_null(out);
    *st = td_read(f, out, (size_t)n * sizeof(double));
    td_release(f);
    if (*st != TD_OK) {
        free(out);
        return NULL;
    }
    return out;
}

/* read_f64_status that must succeed. */
static inline double *read_f64(td_tensor *t, int64_t n)
{
    td_status st;
    double *out = read_f64_status(t, n, &st);
    cr_assert_eq(st, TD_OK, "%s", td_last_error(ctx));
    return out;
}

#endif

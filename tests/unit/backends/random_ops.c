/* random_ops.c — BERNOULLI BERNOULLI_SCALAR RANDINT RANDPERM TRUNC_NORMAL on the CPU backend:
 * bit for bit against random_reference.h (gen_random_reference.py: Philox4x32-10 and
 * engine/philox.h's mappings reimplemented in Python), the same bits with 1 and 4 threads,
 * and distribution checks on larger draws with the sigma of each bound stated. */
#include "cpu_test_util.h"
#include "engine/op.h"
#include "random_reference.h"
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static td__op rand_op(uint32_t opcode, uint32_t dt, int64_t n, uint64_t seed)
{
    td__op op = tu_op(opcode, 1, DIMS(n));
    op.dtype = dt;
    op.seed = seed;
    return op;
}

static td__view run(td__device *dev, td__op op, const td__view *in, uint32_t n_in, uint32_t dt,
                    int64_t n)
{
    td__view out = tu_new(dev, dt, 1, DIMS(n), NULL);
    cr_assert_eq(tu_exec(dev, op, in, n_in, &out), TD_OK, "%s: %s", td__op_name(op.opcode),
                 tu_err);
    return out;
}

static td__op randint_op(uint32_t dt, int64_t n, uint64_t seed, int64_t low, int64_t high)
{
    td__op op = tu_op(TD_OP_RANDINT, 3, DIMS(low, high, n));
    op.dtype = dt;
    op.seed = seed;
    return op;
}

static td__op tn_op(uint32_t dt, int64_t n, uint64_t seed, const double prm[4])
{
    td__op op = rand_op(TD_OP_TRUNC_NORMAL, dt, n, seed);
    memcpy(op.fattrs, prm, 4 * sizeof(double));
    return op;
}

Test(random_ops, bernoulli_matches_reference)
{
    td__device *dev = tu_open(0);
    const int64_t n = REF_BERN_N;
    td__view p = tu_new(dev, TD_F64, 1, DIMS(n), ref_bern_p);
    td__op op = {.opcode = TD_OP_BERNOULLI, .n_inputs = 1, .seed = REF_SEED};
    td__view y = run(dev, op, &p, 1, TD_F64, n);
    for (int64_t i = 0; i < n; i++)
        cr_assert_eq(((double *)y.data)[i], (double)ref_bern[i], "p[%lld] = %g", (long long)i,
                     ref_bern_p[i]);
    td__op sc = rand_op(TD_OP_BERNOULLI_SCALAR, TD_BOOL, 37, REF_SEED);
    sc.fattrs[0] = 0.3;
    td__view b = run(dev, sc, NULL, 0, TD_BOOL, 37);
    cr_assert_eq(memcmp(b.data, ref_bern_scalar, 37), 0);
    /* bernoulli_scalar(p) == bernoulli(full(p)) bit for bit, p exact in f32 */
    sc.dtype = TD_F32;
    sc.fattrs[0] = 0.375;
    td__view s32 = run(dev, sc, NULL, 0, TD_F32, 1001);
    float pv[1001];
    for (int i = 0; i < 1001; i++) pv[i] = 0.375f;
    td__view p32 = tu_new(dev, TD_F32, 1, DIMS(1001), pv);
    td__view t32 = run(dev, op, &p32, 1, TD_F32, 1001);
    cr_assert_eq(memcmp(s32.data, t32.data, 1001 * sizeof(float)), 0);
    tu_free(dev, &p);
    tu_free(dev, &y);
    tu_free(dev, &b);
    tu_free(dev, &s32);
    tu_free(dev, &p32);
    tu_free(dev, &t32);
    tu_close(dev);
}

static void check_randint(td__device *dev, uint32_t dt, int64_t low, int64_t high,
                          const int64_t *want)
{
    td__view y = run(dev, randint_op(dt, 37, REF_SEED, low, high), NULL, 0, dt, 37);
    for (int64_t i = 0; i < 37; i++) {
        int64_t v;
        switch (dt) {
        case TD_I8: v = ((int8_t *)y.data)[i]; break;
        case TD_I32: v = ((int32_t *)y.data)[i]; break;
        case TD_U8: v = ((uint8_t *)y.data)[i]; break;
        default: v = ((int64_t *)y.data)[i]; break;
        }
        cr_assert_eq(v, want[i], "%s [%lld, %lld) element %lld: %lld want %lld",
                     td_dtype_name((td_dtype)dt), (long long)low, (long long)high,
                     (long long)i, (long long)v, (long long)want[i]);
    }
    tu_free(dev, &y);
}

Test(random_ops, randint_matches_reference)
{
    td__device *dev = tu_open(0);
    check_randint(dev, TD_I64, INT64_MIN, INT64_MAX, ref_randint_i64);
    check_randint(dev, TD_I32, -5, 7, ref_randint_i32);
    check_randint(dev, TD_U8, 0, 256, ref_randint_u8);
    check_randint(dev, TD_I8, -128, 128, ref_randint_i8);
    check_randint(dev, TD_I64, 1000000000000LL, 1000000000003LL, ref_randint_i64_small);
    tu_close(dev);
}

Test(random_ops, randperm_matches_reference)
{
    td__device *dev = tu_open(0);
    const struct {
        int64_t n;
        const int64_t *want;
    } c[] = {{1, ref_randperm_1}, {2, ref_randperm_2}, {5, ref_randperm_5}, {33, ref_randperm_33},
                 {5000, ref_randperm_5000}};
    for (size_t k = 0; k < sizeof c / sizeof c[0]; k++) {
        td__op op = tu_op(TD_OP_RANDPERM, 1, DIMS(c[k].n));
        op.seed = REF_SEED;
        td__view y = run(dev, op, NULL, 0, TD_I64, c[k].n);
        cr_assert_eq(memcmp(y.data, c[k].want, (size_t)c[k].n * 8), 0, "n %lld", (long long)c[k].n);
        tu_free(dev, &y);
    }
    td__op op = tu_op(TD_OP_RANDPERM, 1, DIMS(0));
    td__view e = tu_new(dev, TD_I64, 1, DIMS(0), NULL);
    cr_assert_eq(tu_exec(dev, op, NULL, 0, &e), TD_OK);
    tu_close(dev);
}

Test(random_ops, trunc_normal_matches_reference)
{
    td__device *dev = tu_open(0);
    for (int s = 0; s < REF_TN_SETS; s++) {
        td__view y64 = run(dev, tn_op(TD_F64, REF_TN_N, REF_SEED, ref_tn_params[s]), NULL, 0,
                           TD_F64, REF_TN_N);
        td__view y32 = run(dev, tn_op(TD_F32, REF_TN_N, REF_SEED, ref_tn_params[s]), NULL, 0,
                           TD_F32, REF_TN_N);
        for (int i = 0; i < REF_TN_N; i++) {
            cr_assert_eq(((double *)y64.data)[i], ref_tn_f64[s][i], "set %d f64 [%d]: %a want %a",
                         s, i, ((double *)y64.data)[i], ref_tn_f64[s][i]);
            cr_assert_eq(((float *)y32.data)[i], ref_tn_f32[s][i], "set %d f32 [%d]: %a want %a",
                         s, i, (double)((float *)y32.data)[i], (double)ref_tn_f32[s][i]);
        }
        tu_free(dev, &y64);
        tu_free(dev, &y32);
    }
    tu_close(dev);
}

/* The same bytes with 1 and 4 threads, on sizes that split blocks between chunks. */
Test(random_ops, thread_count_independent)
{
    td__device *d1 = tu_open(1), *d4 = tu_open(4);
    const int64_t n = 100003;
    const double prm[4] = {0.5, 2.0, -1.0, 3.0};
    td__op ops[5];
    uint32_t dts[5] = {TD_F16, TD_I16, TD_I64, TD_BF16, TD_BOOL};
    ops[0] = tn_op(TD_F16, n, 9, prm);
    ops[1] = randint_op(TD_I16, n, 9, -1000, 1000);
    ops[2] = tu_op(TD_OP_RANDPERM, 1, DIMS(n));
    ops[2].seed = 9;
    ops[3] = tn_op(TD_BF16, n, 11, prm);
    ops[4] = rand_op(TD_OP_BERNOULLI_SCALAR, TD_BOOL, n, 9);
    ops[4].fattrs[0] = 0.5;
    for (int k = 0; k < 5; k++) {
        td__view a = run(d1, ops[k], NULL, 0, dts[k], n), b = run(d4, ops[k], NULL, 0, dts[k], n);
        cr_assert_eq(memcmp(a.data, b.data, tu_nbytes(&a)), 0, "%s", td__op_name(ops[k].opcode));
        tu_free(d1, &a);
        tu_free(d4, &b);
    }
    tu_close(d1);
    tu_close(d4);
}

/* Distributions, n = 200000 draws each; bounds at about 5 sigma. */
Test(random_ops, distributions)
{
    td__device *dev = tu_open(0);
    const int64_t n = 200000;
    /* bernoulli p = 0.3: sd of the mean sqrt(0.21 / n) = 0.00102 */
    td__op sc = rand_op(TD_OP_BERNOULLI_SCALAR, TD_U8, n, 5);
    sc.fattrs[0] = 0.3;
    td__view b = run(dev, sc, NULL, 0, TD_U8, n);
    double sb = 0;
    for (int64_t i = 0; i < n; i++) {
        uint8_t v = ((uint8_t *)b.data)[i];
        cr_assert(v == 0 || v == 1);
        sb += v;
    }
    cr_assert(fabs(sb / n - 0.3) < 0.0052, "bernoulli mean %g", sb / n);
    /* randint [-3, 7): in range; each of 10 counts n/10 +- 5 sd (sd sqrt(n 0.09) = 134) */
    td__view r = run(dev, randint_op(TD_I32, n, 5, -3, 7), NULL, 0, TD_I32, n);
    int64_t cnt[10] = {0};
    for (int64_t i = 0; i < n; i++) {
        int32_t v = ((int32_t *)r.data)[i];
        cr_assert(v >= -3 && v < 7, "randint %d", v);
        cnt[v + 3]++;
    }
    for (int k = 0; k < 10; k++) cr_assert(llabs(cnt[k] - n / 10) < 670, "count %d: %lld", k, (long long)cnt[k]);
    /* randperm is a permutation; its first element is uniform (checked loosely by the mean
     * position of element 0 over the permutation: (n - 1) / 2 +- 5 sd, sd n / sqrt(12)) */
    td__op pp = tu_op(TD_OP_RANDPERM, 1, DIMS(n));
    pp.seed = 5;
    td__view perm = run(dev, pp, NULL, 0, TD_I64, n);
    unsigned char *seen = calloc((size_t)n, 1);
    for (int64_t i = 0; i < n; i++) {
        int64_t v = ((int64_t *)perm.data)[i];
        cr_assert(v >= 0 && v < n && !seen[v], "randperm[%lld] = %lld", (long long)i, (long long)v);
        seen[v] = 1;
    }
    free(seen);
    int64_t fixed = 0;
    for (int64_t i = 0; i < n; i++) fixed += ((int64_t *)perm.data)[i] == i;
    cr_assert(fixed < 10, "%lld fixed points (Poisson(1))", (long long)fixed);
    /* trunc_normal(0, 1, -2, 2): mean 0, variance 1 - 2 * 2 phi(2) / (Phi(2) - Phi(-2)) =
     * 0.773741 (float64, by hand from phi(2) = 0.0539910, Phi(2) - Phi(-2) = 0.9544997);
     * sd of the mean sqrt(0.774 / n) = 0.00197, of the variance about 0.0022 */
    const double prm[4] = {0.0, 1.0, -2.0, 2.0};
    td__view t = run(dev, tn_op(TD_F32, n, 5, prm), NULL, 0, TD_F32, n);
    double s1 = 0, s2 = 0;
    for (int64_t i = 0; i < n; i++) {
        double v = ((float *)t.data)[i];
        cr_assert(v >= -2.0 && v <= 2.0, "trunc_normal %g", v);
        s1 += v;
        s2 += v * v;
    }
    cr_assert(fabs(s1 / n) < 0.01, "trunc_normal mean %g", s1 / n);
    cr_assert(fabs(s2 / n - 0.773741) < 0.011, "trunc_normal variance %g", s2 / n);
    /* one-sided tail [3, 4] (the flipped path): in range, mean 3.260454 (mpmath:
     * (phi(3) - phi(4)) / (Phi(4) - Phi(3))), sd of the mean 0.222 / sqrt(n) = 0.0005 */
    const double tail[4] = {0.0, 1.0, 3.0, 4.0};
    td__view u = run(dev, tn_op(TD_F64, n, 6, tail), NULL, 0, TD_F64, n);
    double su = 0;
    for (int64_t i = 0; i < n; i++) {
        double v = ((double *)u.data)[i];
        cr_assert(v >= 3.0 && v <= 4.0, "trunc_normal tail %g", v);
        su += v;
    }
    cr_assert(fabs(su / n - 3.260454) < 0.0025, "trunc_normal tail mean %g", su / n);
    tu_free(dev, &b);
    tu_free(dev, &r);
    tu_free(dev, &perm);
    tu_free(dev, &t);
    tu_free(dev, &u);
    tu_close(dev);
}

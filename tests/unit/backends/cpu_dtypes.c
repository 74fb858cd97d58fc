/* cpu_dtypes.c — the dtypes f16, bf16, i8 and i16 through every op family of the CPU backend,
 * against float64 / exact-integer references computed here: a float result is the float64
 * value rounded once to the dtype by round_to() below (frexp/rint arithmetic, written apart
 * from engine/convert.h's bit manipulation), an integer result the int64 value wrapped to
 * the dtype. Inputs are values the dtype holds exactly (multiples of 1/8 or 1/64 in small
 * ranges), so their conversion is not under test here (tests/unit/engine/convert.c is).
 * Random draws are checked against the Philox words (KAT-tested in philox.c) turned into
 * values here by engine/philox.h's documented formulas. */
#include "cpu_test_util.h"
#include "backends/cpu/cpu_internal.h"
#include "engine/philox.h"
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static td__device *dev;
static void setup(void) { dev = tu_open(4); }
static void teardown(void) { tu_close(dev); }
TestSuite(cpu_dtypes, .init = setup, .fini = teardown);

static const uint32_t halves[] = {TD_F16, TD_BF16};
static const uint32_t small_ints[] = {TD_I8, TD_I16};

/* x rounded to nearest even in a format of p significant bits, minimum normal exponent emin
 * and largest finite maxfin; past it (after rounding) +-inf. */
static double round_to(uint32_t dt, double x)
{
    const int p = dt == TD_F16 ? 11 : 8, emin = dt == TD_F16 ? -14 : -126;
    const double maxfin = dt == TD_F16 ? 65504.0 : 0x1.fep127;
    if (isnan(x) || isinf(x) || x == 0) return x;
    int e = ilogb(x);
    if (e < emin) e = emin;
    double q = ldexp(rint(ldexp(x, p - 1 - e)), e - (p - 1));
    return fabs(q) > maxfin ? copysign(INFINITY, x) : q;
}

static double ulp_in(uint32_t dt, double x)
{
    const int p = dt == TD_F16 ? 11 : 8, emin = dt == TD_F16 ? -14 : -126;
    int e = x == 0 || !isfinite(x) ? emin : ilogb(x);
    return ldexp(1.0, (e < emin ? emin : e) - (p - 1));
}

static int64_t wrap_to(uint32_t dt, int64_t v)
{
    return dt == TD_I8 ? (int8_t)(uint8_t)(uint64_t)v : (int16_t)(uint16_t)(uint64_t)v;
}

static td__view run(td__op op, const td__view *in, uint32_t n_in, uint32_t dt, uint32_t rank,
                    const int64_t *dims)
{
    td__view out = tu_new(dev, dt, rank, dims, NULL);
    cr_assert_eq(tu_exec(dev, op, in, n_in, &out), TD_OK, "op %u dtype %u: %s", op.opcode, dt,
                 tu_err);
    return out;
}

#define NX 12
static const double X[NX] = {-3.5, -1.0, -0.0, 0.0, 0.375, 1.0, 2.5, 7.0, 100.0, 0.125, -0.25, 3.0};
static const double Y[NX] = {2.0, -4.0, 1.5, -0.5, 0.25, 3.0, -2.5, 0.125, 7.0, -1.0, 0.5, 3.0};

static double relu(double x) { return x < 0 ? 0.0 : x; }
static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

Test(cpu_dtypes, half_unary)
{
    struct { uint32_t op; double (*f)(double); bool exact; bool pos; } u[] = {
        {TD_OP_NEG, NULL, true, false},   {TD_OP_ABS, fabs, true, false},
        {TD_OP_RELU, relu, true, false},  {TD_OP_SQRT, sqrt, true, true},
        {TD_OP_EXP, exp, false, false},   {TD_OP_LOG, log, false, true},
        {TD_OP_TANH, tanh, false, false}, {TD_OP_SIGMOID, sigmoid, false, false},
    };
    for (size_t h = 0; h < 2; h++)
        for (size_t k = 0; k < sizeof u / sizeof u[0]; k++) {
            const uint32_t dt = halves[h];
            double xv[NX];
            for (int i = 0; i < NX; i++) xv[i] = u[k].pos ? fabs(X[i]) + 0.5 : X[i] / 2;
            td__view x = tu_from_doubles(dev, dt, 1, DIMS(NX), xv);
            td__view o = run(tu_op(u[k].op, 0, NULL), &x, 1, dt, 1, DIMS(NX));
            for (int i = 0; i < NX; i++) {
                double want = round_to(dt, u[k].f ? u[k].f(xv[i]) : -xv[i]);
                double got = tu_get(&o, i);
                /* exact ops are correctly rounded (f32 has > 2p + 2 bits); exp/log/tanh/
                 * sigmoid in f32 are within an f32 ulp or two, so within 1 ulp of the dtype */
                double tol = u[k].exact ? 0.0 : ulp_in(dt, want);
                cr_expect(got == want || fabs(got - want) <= tol, "dt %u op %u x %g: got %.9g want %.9g", dt,
                          u[k].op, xv[i], got, want);
            }
            tu_free(dev, &x);
            tu_free(dev, &o);
        }
}

Test(cpu_dtypes, half_binary_compare_where)
{
    const uint32_t ops[] = {TD_OP_ADD, TD_OP_SUB, TD_OP_MUL, TD_OP_DIV, TD_OP_MAXIMUM,
                            TD_OP_MINIMUM, TD_OP_POW};
    for (size_t h = 0; h < 2; h++) {
        const uint32_t dt = halves[h];
        td__view a = tu_from_doubles(dev, dt, 1, DIMS(NX), X);
        td__view b = tu_from_doubles(dev, dt, 1, DIMS(NX), Y);
        td__view in[2] = {a, b};
        for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
            td__view o = run(tu_op(ops[k], 0, NULL), in, 2, dt, 1, DIMS(NX));
            for (int i = 0; i < NX; i++) {
                double p = X[i], q = Y[i], w;
                switch (ops[k]) {
                case TD_OP_ADD: w = p + q; break;
                case TD_OP_SUB: w = p - q; break;
                case TD_OP_MUL: w = p * q; break;
                case TD_OP_DIV: w = p / q; break;
                case TD_OP_MAXIMUM: w = p > q ? p : q; break;
                case TD_OP_MINIMUM: w = p < q ? p : q; break;
                default: w = pow(fabs(p) + 0.5, q); break;
                }
                if (ops[k] == TD_OP_POW) continue; /* pow below, on positive bases */
                w = round_to(dt, w);
                cr_expect_eq(tu_get(&o, i), w, "dt %u op %u %g,%g: got %.9g want %.9g", dt,
                             ops[k], p, q, tu_get(&o, i), w);
            }
            tu_free(dev, &o);
        }
        /* pow on positive bases: within 1 ulp of the once-rounded float64 value */
        double pb[NX];
        for (int i = 0; i < NX; i++) pb[i] = fabs(X[i]) / 4 + 0.5;
        td__view base = tu_from_doubles(dev, dt, 1, DIMS(NX), pb);
        td__view pin[2] = {base, b};
        td__view o = run(tu_op(TD_OP_POW, 0, NULL), pin, 2, dt, 1, DIMS(NX));
        for (int i = 0; i < NX; i++) {
            double w = round_to(dt, pow(pb[i], Y[i]));
            cr_expect(tu_get(&o, i) == w || fabs(tu_get(&o, i) - w) <= ulp_in(dt, w), "pow dt %u %g^%g: %.9g vs %.9g",
                      dt, pb[i], Y[i], tu_get(&o, i), w);
        }
        tu_free(dev, &o);
        tu_free(dev, &base);
        /* comparisons give bool */
        const uint32_t cmp[] = {TD_OP_EQ, TD_OP_NE, TD_OP_LT, TD_OP_LE, TD_OP_GT, TD_OP_GE};
        for (size_t k = 0; k < 6; k++) {
            o = run(tu_op(cmp[k], 0, NULL), in, 2, TD_BOOL, 1, DIMS(NX));
            for (int i = 0; i < NX; i++) {
                double p = X[i], q = Y[i];
                bool w = k == 0 ? p == q : k == 1 ? p != q : k == 2 ? p < q
                       : k == 3 ? p <= q : k == 4 ? p > q : p >= q;
                cr_expect_eq(tu_get(&o, i), (double)w, "cmp %zu dt %u %g %g", k, dt, p, q);
            }
            tu_free(dev, &o);
        }
        /* where: cond [NX] alternating, a, b rank-0 */
        double cv[NX];
        for (int i = 0; i < NX; i++) cv[i] = i % 2;
        td__view c = tu_from_doubles(dev, TD_BOOL, 1, DIMS(NX), cv);
        double s = -6.5;
        td__view sb = tu_from_doubles(dev, dt, 0, NULL, &s);
        td__view win[3] = {c, a, sb};
        o = run(tu_op(TD_OP_WHERE, 0, NULL), win, 3, dt, 1, DIMS(NX));
        for (int i = 0; i < NX; i++) cr_expect_eq(tu_get(&o, i), i % 2 ? X[i] : s);
        tu_free(dev, &o);
        tu_free(dev, &c);
        tu_free(dev, &sb);
        tu_free(dev, &a);
        tu_free(dev, &b);
    }
}

Test(cpu_dtypes, half_rounding_of_arithmetic)
{
    /* f16: 2048 + 1 is the tie 2049 -> 2048; 2048 + 3 -> 2052; 65504 + 16 -> inf (tie, odd);
     * 65504 + 8 -> 65504. bf16: 256 + 1 -> 256 (tie), 256 + 3 -> 260 */
    td__view a = tu_from_doubles(dev, TD_F16, 1, DIMS(4), (double[]){2048, 2048, 65504, 65504});
    td__view b = tu_from_doubles(dev, TD_F16, 1, DIMS(4), (double[]){1, 3, 16, 8});
    td__view in[2] = {a, b};
    td__view o = run(tu_op(TD_OP_ADD, 0, NULL), in, 2, TD_F16, 1, DIMS(4));
    tu_expect_eq(&o, (double[]){2048, 2052, INFINITY, 65504}, 4, "f16 add ties");
    tu_free(dev, &a);
    tu_free(dev, &b);
    tu_free(dev, &o);
    a = tu_from_doubles(dev, TD_BF16, 1, DIMS(2), (double[]){256, 256});
    b = tu_from_doubles(dev, TD_BF16, 1, DIMS(2), (double[]){1, 3});
    td__view in2[2] = {a, b};
    o = run(tu_op(TD_OP_ADD, 0, NULL), in2, 2, TD_BF16, 1, DIMS(2));
    tu_expect_eq(&o, (double[]){256, 260}, 2, "bf16 add ties");
    tu_free(dev, &a);
    tu_free(dev, &b);
    tu_free(dev, &o);
}

Test(cpu_dtypes, small_int_elementwise_wraps)
{
    const double A[6] = {100, -100, 127, -128, 7, -7};
    const double B[6] = {100, 100, 1, -1, -2, 0};
    for (size_t d = 0; d < 2; d++) {
        const uint32_t dt = small_ints[d];
        const double scale = dt == TD_I16 ? 256 : 1; /* i16: same pattern near its range */
        double av[6], bv[6];
        for (int i = 0; i < 6; i++) {
            av[i] = dt == TD_I16 && fabs(A[i]) >= 127 ? (A[i] > 0 ? 32767 : -32768) : A[i] * (dt == TD_I16 && fabs(A[i]) == 100 ? scale : 1);
            bv[i] = B[i] * (dt == TD_I16 && fabs(B[i]) == 100 ? scale : 1);
        }
        td__view a = tu_from_doubles(dev, dt, 1, DIMS(6), av);
        td__view b = tu_from_doubles(dev, dt, 1, DIMS(6), bv);
        td__view in[2] = {a, b};
        const uint32_t ops[] = {TD_OP_ADD, TD_OP_SUB, TD_OP_MUL, TD_OP_DIV, TD_OP_MAXIMUM};
        for (size_t k = 0; k < 5; k++) {
            td__view o = run(tu_op(ops[k], 0, NULL), in, 2, dt, 1, DIMS(6));
            for (int i = 0; i < 6; i++) {
                int64_t p = (int64_t)av[i], q = (int64_t)bv[i], w;
                switch (ops[k]) {
                case TD_OP_ADD: w = p + q; break;
                case TD_OP_SUB: w = p - q; break;
                case TD_OP_MUL: w = p * q; break;
                case TD_OP_DIV: w = q == 0 ? 0 : p / q; break; /* MIN / -1 wraps to MIN */
                default: w = p > q ? p : q; break;
                }
                w = wrap_to(dt, w);
                cr_expect_eq(tu_get(&o, i), (double)w, "dt %u op %u %lld,%lld: got %g want %lld",
                             dt, ops[k], (long long)p, (long long)q, tu_get(&o, i), (long long)w);
            }
            tu_free(dev, &o);
        }
        td__view o = run(tu_op(TD_OP_NEG, 0, NULL), &a, 1, dt, 1, DIMS(6));
        for (int i = 0; i < 6; i++)
            cr_expect_eq(tu_get(&o, i), (double)wrap_to(dt, -(int64_t)av[i]));
        tu_free(dev, &o);
        o = run(tu_op(TD_OP_ABS, 0, NULL), &a, 1, dt, 1, DIMS(6));
        for (int i = 0; i < 6; i++)
            cr_expect_eq(tu_get(&o, i), (double)wrap_to(dt, llabs((long long)av[i])));
        tu_free(dev, &o);
        o = run(tu_op(TD_OP_LT, 0, NULL), in, 2, TD_BOOL, 1, DIMS(6));
        for (int i = 0; i < 6; i++) cr_expect_eq(tu_get(&o, i), (double)(av[i] < bv[i]));
        tu_free(dev, &o);
        tu_free(dev, &a);
        tu_free(dev, &b);
    }
}

static td__view cast1(uint32_t from, uint32_t to, int64_t n, const double *vals)
{
    td__view in = tu_from_doubles(dev, from, 1, DIMS(n), vals);
    td__op op = tu_op(TD_OP_CAST, 0, NULL);
    op.dtype = to;
    td__view out = run(op, &in, 1, to, 1, DIMS(n));
    tu_free(dev, &in);
    return out;
}

Test(cpu_dtypes, casts)
{
    /* f64 -> i8 / i16: truncate, saturate, NaN 0 */
    const double f[8] = {300, -300, NAN, -3.7, 3.7, INFINITY, -INFINITY, 40000};
    td__view o = cast1(TD_F64, TD_I8, 8, f);
    tu_expect_eq(&o, (double[]){127, -128, 0, -3, 3, 127, -128, 127}, 8, "f64->i8");
    tu_free(dev, &o);
    o = cast1(TD_F64, TD_I16, 8, f);
    tu_expect_eq(&o, (double[]){300, -300, 0, -3, 3, 32767, -32768, 32767}, 8, "f64->i16");
    tu_free(dev, &o);
    /* integers wrap: i32 200 -> i8 -56, 65537 -> 1; 40000 -> i16 -25536; i8 -1 -> u8 255 */
    o = cast1(TD_I32, TD_I8, 3, (double[]){200, 65537, -129});
    tu_expect_eq(&o, (double[]){-56, 1, 127}, 3, "i32->i8");
    tu_free(dev, &o);
    o = cast1(TD_I32, TD_I16, 2, (double[]){40000, -32769});
    tu_expect_eq(&o, (double[]){-25536, 32767}, 2, "i32->i16");
    tu_free(dev, &o);
    o = cast1(TD_I8, TD_U8, 2, (double[]){-1, -128});
    tu_expect_eq(&o, (double[]){255, 128}, 2, "i8->u8");
    tu_free(dev, &o);
    o = cast1(TD_I16, TD_I64, 2, (double[]){-32768, 32767});
    tu_expect_eq(&o, (double[]){-32768, 32767}, 2, "i16->i64");
    tu_free(dev, &o);
    /* f16 -> ints saturate: 65504 -> i8 127, i16 32767; -inf -> -128 */
    o = cast1(TD_F16, TD_I8, 3, (double[]){65504, -INFINITY, -2.5});
    tu_expect_eq(&o, (double[]){127, -128, -2}, 3, "f16->i8");
    tu_free(dev, &o);
    o = cast1(TD_BF16, TD_I16, 3, (double[]){1e10, -1e10, NAN});
    tu_expect_eq(&o, (double[]){32767, -32768, 0}, 3, "bf16->i16");
    tu_free(dev, &o);
    /* to halves from every kind: i32 2049 -> f16 2048 (tie), 70000 -> inf; f64 round once */
    o = cast1(TD_I32, TD_F16, 3, (double[]){2049, 70000, -2051});
    tu_expect_eq(&o, (double[]){2048, INFINITY, -2052}, 3, "i32->f16");
    tu_free(dev, &o);
    o = cast1(TD_F64, TD_F16, 2, (double[]){1.0 + 0x1p-11 + 0x1p-40, 0x1p-25});
    tu_expect_eq(&o, (double[]){1.0 + 0x1p-10, 0.0}, 2, "f64->f16 once");
    tu_free(dev, &o);
    o = cast1(TD_F64, TD_BF16, 2, (double[]){1.0 + 0x1p-8 + 0x1p-40, 1.0 + 0x1p-8});
    tu_expect_eq(&o, (double[]){1.0 + 0x1p-7, 1.0}, 2, "f64->bf16 once");
    tu_free(dev, &o);
    /* f16 <-> bf16: 1 + 2^-10 (f16) is below bf16's half ulp 2^-8: 1; bf16 99840 -> f16 inf */
    o = cast1(TD_F16, TD_BF16, 2, (double[]){1.0 + 0x1p-10, 1.0 + 0x1p-7 + 0x1p-8});
    tu_expect_eq(&o, (double[]){1.0, 1.0 + 0x1p-6}, 2, "f16->bf16");
    tu_free(dev, &o);
    o = cast1(TD_BF16, TD_F16, 2, (double[]){99840, 0.5});
    tu_expect_eq(&o, (double[]){INFINITY, 0.5}, 2, "bf16->f16");
    tu_free(dev, &o);
    o = cast1(TD_BOOL, TD_BF16, 2, (double[]){1, 0});
    tu_expect_eq(&o, (double[]){1, 0}, 2, "bool->bf16");
    tu_free(dev, &o);
    o = cast1(TD_F16, TD_BOOL, 3, (double[]){NAN, -0.0, 0x1p-24});
    tu_expect_eq(&o, (double[]){1, 0, 1}, 3, "f16->bool");
    tu_free(dev, &o);
    o = cast1(TD_F16, TD_F64, 2, (double[]){0x1p-24, -65504});
    tu_expect_eq(&o, (double[]){0x1p-24, -65504}, 2, "f16->f64 exact");
    tu_free(dev, &o);
}

Test(cpu_dtypes, reductions)
{
    enum { N = 5003 }; /* more than one 4096-element block */
    double *v = malloc(N * sizeof *v);
    for (int i = 0; i < N; i++) v[i] = (double)((i * 37) % 61 - 30) / 8;
    for (size_t h = 0; h < 2; h++) {
        const uint32_t dt = halves[h];
        td__view x = tu_from_doubles(dev, dt, 2, DIMS(1, N), v);
        /* the float64 sum of these values is exact, so any order gives it: rounded once */
        double s = 0, mx = -INFINITY;
        int64_t at = 0;
        for (int i = 0; i < N; i++) {
            s += v[i];
            if (v[i] > mx) { mx = v[i]; at = i; }
        }
        td__view o = run(tu_op(TD_OP_SUM, 2, DIMS(2, 0)), &x, 1, dt, 1, DIMS(1));
        tu_expect_eq(&o, (double[]){round_to(dt, s)}, 1, "sum");
        tu_free(dev, &o);
        o = run(tu_op(TD_OP_MEAN, 2, DIMS(2, 0)), &x, 1, dt, 1, DIMS(1));
        tu_expect_eq(&o, (double[]){round_to(dt, s / N)}, 1, "mean");
        tu_free(dev, &o);
        o = run(tu_op(TD_OP_MAX, 2, DIMS(2, 0)), &x, 1, dt, 1, DIMS(1));
        tu_expect_eq(&o, (double[]){mx}, 1, "max");
        tu_free(dev, &o);
        o = run(tu_op(TD_OP_ARGMAX, 2, DIMS(2, 0)), &x, 1, TD_I64, 1, DIMS(1));
        tu_expect_eq(&o, (double[]){(double)at}, 1, "argmax");
        tu_free(dev, &o);
        tu_free(dev, &x);
        /* prod of 8 values near 1 over axis 1 of [2, 8] */
        double pv[16], p0 = 1, p1 = 1;
        for (int i = 0; i < 16; i++) {
            pv[i] = 1.0 + (double)(i % 5 - 2) / 16;
            if (i < 8) p0 *= pv[i]; else p1 *= pv[i];
        }
        x = tu_from_doubles(dev, dt, 2, DIMS(2, 8), pv);
        o = run(tu_op(TD_OP_PROD, 2, DIMS(2, 0)), &x, 1, dt, 1, DIMS(2));
        tu_expect_eq(&o, (double[]){round_to(dt, p0), round_to(dt, p1)}, 2, "prod");
        tu_free(dev, &o);
        o = run(tu_op(TD_OP_MIN, 2, DIMS(1, 0)), &x, 1, dt, 1, DIMS(8));
        for (int j = 0; j < 8; j++)
            cr_expect_eq(tu_get(&o, j), fmin(pv[j], pv[8 + j]), "min col %d", j);
        tu_free(dev, &o);
        tu_free(dev, &x);
    }
    for (size_t d = 0; d < 2; d++) {
        const uint32_t dt = small_ints[d];
        double iv[300];
        int64_t s = 0, p = 1;
        for (int i = 0; i < 300; i++) {
            iv[i] = (double)((i * 53) % 201 - 100);
            s += (int64_t)iv[i];
        }
        for (int i = 0; i < 7; i++) p *= (int64_t)iv[i];
        td__view x = tu_from_doubles(dev, dt, 1, DIMS(300), iv);
        td__view o = run(tu_op(TD_OP_SUM, 2, DIMS(1, 0)), &x, 1, dt, 0, NULL);
        tu_expect_eq(&o, (double[]){(double)wrap_to(dt, s)}, 1, "int sum wraps");
        tu_free(dev, &o);
        o = run(tu_op(TD_OP_MAX, 2, DIMS(1, 0)), &x, 1, dt, 0, NULL);
        tu_expect_eq(&o, (double[]){100}, 1, "int max");
        tu_free(dev, &o);
        o = run(tu_op(TD_OP_ARGMIN, 2, DIMS(1, 0)), &x, 1, TD_I64, 0, NULL);
        double first_min = 0;
        for (int i = 0; i < 300; i++)
            if (iv[i] == -100) { first_min = i; break; }
        tu_expect_eq(&o, &first_min, 1, "int argmin");
        tu_free(dev, &o);
        tu_free(dev, &x);
        x = tu_from_doubles(dev, dt, 1, DIMS(7), iv);
        o = run(tu_op(TD_OP_PROD, 2, DIMS(1, 0)), &x, 1, dt, 0, NULL);
        tu_expect_eq(&o, (double[]){(double)wrap_to(dt, p)}, 1, "int prod wraps");
        tu_free(dev, &o);
        tu_free(dev, &x);
    }
    free(v);
}

Test(cpu_dtypes, movement_is_bytes)
{
    const uint32_t dts[] = {TD_F16, TD_BF16, TD_I8, TD_I16};
    for (size_t d = 0; d < 4; d++) {
        const uint32_t dt = dts[d];
        double v[6] = {1, 2, 3, 4, 5, 6};
        td__view x = tu_from_doubles(dev, dt, 2, DIMS(2, 3), v);
        td__view o = run(tu_op(TD_OP_PERMUTE, 2, DIMS(1, 0)), &x, 1, dt, 2, DIMS(3, 2));
        tu_expect_eq(&o, (double[]){1, 4, 2, 5, 3, 6}, 6, "permute");
        tu_free(dev, &o);
        o = run(tu_op(TD_OP_SLICE, 4, DIMS(0, 1, 2, 3)), &x, 1, dt, 2, DIMS(2, 2));
        tu_expect_eq(&o, (double[]){2, 3, 5, 6}, 4, "slice");
        tu_free(dev, &o);
        td__view two[2] = {x, x};
        o = run(tu_op(TD_OP_CONCAT, 1, DIMS(1)), two, 2, dt, 2, DIMS(2, 6));
        tu_expect_eq(&o, (double[]){1, 2, 3, 1, 2, 3, 4, 5, 6, 4, 5, 6}, 12, "concat");
        tu_free(dev, &o);
        td__view idx = tu_from_doubles(dev, TD_I64, 1, DIMS(3), (double[]){2, 0, 2});
        td__view gin[2] = {x, idx};
        o = run(tu_op(TD_OP_INDEX_SELECT, 1, DIMS(1)), gin, 2, dt, 2, DIMS(2, 3));
        tu_expect_eq(&o, (double[]){3, 1, 3, 6, 4, 6}, 6, "index_select");
        tu_free(dev, &o);
        o = run(tu_op(TD_OP_EXPAND, 3, DIMS(2, 2, 3)), &x, 1, dt, 3, DIMS(2, 2, 3));
        tu_expect_eq(&o, (double[]){1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6}, 12, "expand");
        tu_free(dev, &o);
        tu_free(dev, &idx);
        tu_free(dev, &x);
    }
}

Test(cpu_dtypes, matmul)
{
    enum { M = 5, K = 37, N = 6 };
    double a[M * K], b[K * N];
    for (int i = 0; i < M * K; i++) a[i] = (double)((i * 13) % 17 - 8) / 16;
    for (int i = 0; i < K * N; i++) b[i] = (double)((i * 7) % 11 - 5) / 8;
    for (size_t h = 0; h < 2; h++) {
        const uint32_t dt = halves[h];
        td__view x[2] = {tu_from_doubles(dev, dt, 2, DIMS(M, K), a),
                         tu_from_doubles(dev, dt, 2, DIMS(K, N), b)};
        td__view o = run(tu_op(TD_OP_MATMUL, 0, NULL), x, 2, dt, 2, DIMS(M, N));
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                /* products of these inputs have at most 8 significant bits and every partial
                 * sum is a multiple of 2^-7 below 2^7: exact in f32, so the f32 sum is the
                 * float64 one and the result is it rounded once */
                double s = 0;
                for (int k = 0; k < K; k++) s += a[i * K + k] * b[k * N + j];
                cr_expect_eq(tu_get(&o, i * N + j), round_to(dt, s), "dt %u [%d,%d]: %.9g vs %.9g",
                             dt, i, j, tu_get(&o, i * N + j), round_to(dt, s));
            }
        tu_free(dev, &o);
        tu_free(dev, &x[0]);
        tu_free(dev, &x[1]);
    }
    for (size_t d = 0; d < 2; d++) {
        const uint32_t dt = small_ints[d];
        double ai[M * K], bi[K * N];
        for (int i = 0; i < M * K; i++) ai[i] = (double)((i * 29) % 255 - 127);
        for (int i = 0; i < K * N; i++) bi[i] = (double)((i * 31) % 255 - 127);
        td__view x[2] = {tu_from_doubles(dev, dt, 2, DIMS(M, K), ai),
                         tu_from_doubles(dev, dt, 2, DIMS(K, N), bi)};
        td__view o = run(tu_op(TD_OP_MATMUL, 0, NULL), x, 2, dt, 2, DIMS(M, N));
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                int64_t s = 0;
                for (int k = 0; k < K; k++) s += (int64_t)ai[i * K + k] * (int64_t)bi[k * N + j];
                cr_expect_eq(tu_get(&o, i * N + j), (double)wrap_to(dt, s), "dt %u [%d,%d]", dt, i, j);
            }
        tu_free(dev, &o);
        tu_free(dev, &x[0]);
        tu_free(dev, &x[1]);
    }
}

/* RAND_UNIFORM / RAND_NORMAL in f16 and bf16: the f32 mapping of engine/philox.h (block
 * i / 4, word i % 4; Box-Muller pair (i / 2) % 2), its double value computed here from the
 * Philox words and rounded once by round_to(). The [60000, 70000) range reaches f16's
 * overflow to inf; 100003 elements on 4 threads put chunk edges inside Philox blocks. */
Test(cpu_dtypes, half_random_draws)
{
    const int64_t n = 100003;
    const uint64_t seed = 0x9e3779b97f4a7c15ull;
    const double params[][2] = {{-2.0, 5.0}, {60000.0, 70000.0}, {0.5, 3.0}};
    for (size_t h = 0; h < 2; h++)
        for (int normal = 0; normal < 2; normal++)
            for (size_t p = 0; p < 3; p++) {
                const uint32_t dt = halves[h];
                const double a = params[p][0], b = params[p][1];
                td__op op = tu_op(normal ? TD_OP_RAND_NORMAL : TD_OP_RAND_UNIFORM, 1, DIMS(n));
                op.dtype = dt;
                op.seed = seed;
                op.fattrs[0] = a;
                op.fattrs[1] = b;
                td__view o = run(op, NULL, 0, dt, 1, DIMS(n));
                int64_t bad = 0;
                for (int64_t i = 0; i < n; i++) {
                    uint32_t w[4];
                    td__philox_block(seed, (uint64_t)i / 4, w);
                    double v;
                    if (normal) {
                        const unsigned q = (unsigned)((i / 2) % 2);
                        const double u1 = (double)((w[2 * q] >> 8) + 1) * 0x1p-24;
                        const double u2 = (double)(w[2 * q + 1] >> 8) * 0x1p-24;
                        const double r = sqrt(-2.0 * log(u1)), t = 2.0 * M_PI * u2;
                        v = a + b * (i % 2 == 0 ? r * cos(t) : r * sin(t));
                    } else {
                        v = a + (b - a) * ((double)(w[i % 4] >> 8) * 0x1p-24);
                    }
                    const double want = round_to(dt, v), got = tu_get(&o, i);
                    if (got != want && bad++ < 5)
                        cr_expect_eq(got, want, "dt %u %s(%g, %g) [%lld]: %.9g, want %.9g", dt,
                                     normal ? "normal" : "uniform", a, b, (long long)i, got, want);
                }
                cr_expect_eq(bad, 0, "dt %u %s(%g, %g): %lld elements differ", dt,
                             normal ? "normal" : "uniform", a, b, (long long)bad);
                tu_free(dev, &o);
            }
}

/* The f16/bf16 bits of f32 bits u by the documented rules (engine/convert.h): a NaN keeps
 * its sign and top payload bits, quieted; everything else is round_to() of the value. */
static uint16_t half_bits_of(uint32_t dt, uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    if (isnan(f))
        return dt == TD_F16 ? (uint16_t)(((u >> 16) & 0x8000u) | 0x7e00u | ((u >> 13) & 0x3ffu))
                            : (uint16_t)((u >> 16) | 0x40u);
    const double v = round_to(dt, (double)f);
    /* encode v (exactly representable) by hand: sign, then exponent and mantissa */
    const int p = dt == TD_F16 ? 11 : 8, bias = dt == TD_F16 ? 15 : 127;
    const uint32_t sign = signbit(v) ? 0x8000u : 0;
    const double a = fabs(v);
    if (isinf(a)) return (uint16_t)(sign | (dt == TD_F16 ? 0x7c00u : 0x7f80u));
    if (a == 0) return (uint16_t)sign;
    int e = ilogb(a);
    if (e < 1 - bias) /* subnormal: a / 2^(1 - bias - (p - 1)) */
        return (uint16_t)(sign | (uint32_t)ldexp(a, p - 1 - (1 - bias)));
    const uint32_t mant = (uint32_t)(ldexp(a, p - 1 - e) - ldexp(1.0, p - 1));
    return (uint16_t)(sign | ((uint32_t)(e + bias) << (p - 1)) | mant);
}

/* The f32 bits of f16/bf16 bits h, decoded by hand (NaN: quieted, same sign and payload). */
static uint32_t f32_bits_of(uint32_t dt, uint16_t h)
{
    if (dt == TD_BF16) {
        uint32_t u = (uint32_t)h << 16;
        return (h & 0x7fffu) > 0x7f80u ? u | 0x400000u : u;
    }
    const uint32_t s = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 31) return s | 0x7f800000u | (m ? 0x400000u | (m << 13) : 0);
    const float v = (float)(e == 0 ? ldexp(m, -24) : ldexp(1024 + m, (int)e - 25));
    uint32_t u;
    memcpy(&u, &v, 4);
    return s | u;
}

/* CAST f32 <-> f16/bf16 and bf16 <-> f16 through the CPU's blocked conversion loops, once
 * per instruction-set copy the CPU runs: every f16/bf16 bit pattern widened, and f32 bit
 * patterns (a spread over all 2^32, plus, for every exponent and sign, the mantissas just
 * below, at and above each format's rounding tie with either kept lsb) rounded, against the
 * hand encodings above. Lengths are not multiples of the block. */
Test(cpu_dtypes, half_conversions_every_isa)
{
    enum { NS = 60000, NT = 512 * 2 * 12 };
    uint32_t *u = malloc((NS + NT) * sizeof *u);
    for (uint32_t i = 0; i < NS; i++) u[i] = i * 71583u + (i >> 3) * 0x9e3779b9u;
    uint32_t t = NS;
    const uint32_t low[12] = {0xfff, 0x1000, 0x1001, 0x2fff, 0x3000, 0x3001,
                              0x7fff, 0x8000, 0x8001, 0x17fff, 0x18000, 0x18001};
    for (uint32_t e = 0; e < 256; e++)
        for (uint32_t s = 0; s < 2; s++)
            for (int k = 0; k < 12; k++) u[t++] = (s << 31) | (e << 23) | (low[k] & 0x7fffffu);
    const int64_t n = t;
    td__view x = tu_new(dev, TD_F32, 1, DIMS(n), u);
    const char *isas[] = {"generic", "avx2", "avx512"};
    int tried = 0;
    for (int k = 0; k < 3; k++) {
        if (!td__cpu_half_force_isa(isas[k])) continue;
        tried++;
        for (size_t h = 0; h < 2; h++) {
            const uint32_t dt = halves[h];
            td__op op = tu_op(TD_OP_CAST, 0, NULL);
            op.dtype = dt;
            td__view o = run(op, &x, 1, dt, 1, DIMS(n));
            const uint16_t *got = o.data;
            int64_t bad = 0;
            for (int64_t i = 0; i < n; i++)
                if (got[i] != half_bits_of(dt, u[i]) && bad++ < 5)
                    cr_expect_eq(got[i], half_bits_of(dt, u[i]), "%s f32 %08x -> dt %u: %04x want %04x",
                                 isas[k], u[i], dt, got[i], half_bits_of(dt, u[i]));
            cr_expect_eq(bad, 0, "%s f32 -> dt %u: %lld wrong", isas[k], dt, (long long)bad);
            tu_free(dev, &o);
            /* every pattern widened, 65536 + 77 elements */
            const int64_t nh = 65536 + 77;
            uint16_t *hv = malloc((size_t)nh * 2);
            for (int64_t i = 0; i < nh; i++) hv[i] = (uint16_t)(i * 40503u);
            td__view hx = tu_new(dev, dt, 1, DIMS(nh), hv);
            op.dtype = TD_F32;
            o = run(op, &hx, 1, TD_F32, 1, DIMS(nh));
            const uint32_t *wide = o.data;
            bad = 0;
            for (int64_t i = 0; i < nh; i++)
                if (wide[i] != f32_bits_of(dt, hv[i]) && bad++ < 5)
                    cr_expect_eq(wide[i], f32_bits_of(dt, hv[i]), "%s dt %u %04x -> f32 %08x want %08x",
                                 isas[k], dt, hv[i], wide[i], f32_bits_of(dt, hv[i]));
            cr_expect_eq(bad, 0, "%s dt %u -> f32: %lld wrong", isas[k], dt, (long long)bad);
            tu_free(dev, &o);
            /* to the other half format: widened, then rounded */
            const uint32_t other = dt == TD_F16 ? TD_BF16 : TD_F16;
            op.dtype = other;
            o = run(op, &hx, 1, other, 1, DIMS(nh));
            got = o.data;
            bad = 0;
            for (int64_t i = 0; i < nh; i++) {
                const uint16_t want = half_bits_of(other, f32_bits_of(dt, hv[i]));
                if (got[i] != want && bad++ < 5)
                    cr_expect_eq(got[i], want, "%s %04x dt %u -> %u: %04x want %04x", isas[k],
                                 hv[i], dt, other, got[i], want);
            }
            cr_expect_eq(bad, 0, "%s dt %u -> %u: %lld wrong", isas[k], dt, other, (long long)bad);
            tu_free(dev, &o);
            tu_free(dev, &hx);
            free(hv);
        }
    }
    cr_expect(tried >= 1, "no instruction-set copy ran");
    td__cpu_half_force_isa(NULL);
    tu_free(dev, &x);
    free(u);
}

/* Binary ops and comparisons over several blocks (contiguous, scalar-broadcast on either
 * side, and a broadcast row), on every instruction-set copy: each element the float64
 * result rounded once. */
Test(cpu_dtypes, half_binary_blocks_every_isa)
{
    enum { R = 3, C = 1111 }; /* 3333 elements: 3 blocks and a part */
    double *av = malloc(R * C * sizeof *av), bv[C];
    for (int i = 0; i < R * C; i++) av[i] = (double)((i * 29) % 257 - 128) / 16;
    for (int i = 0; i < C; i++) bv[i] = (double)((i * 13) % 61 - 30) / 8;
    const char *isas[] = {"generic", "avx2", "avx512"};
    for (int k = 0; k < 3; k++) {
        if (!td__cpu_half_force_isa(isas[k])) continue;
        for (size_t h = 0; h < 2; h++) {
            const uint32_t dt = halves[h];
            td__view a = tu_from_doubles(dev, dt, 2, DIMS(R, C), av);
            td__view row = tu_from_doubles(dev, dt, 1, DIMS(C), bv);
            td__view full = tu_from_doubles(dev, dt, 2, DIMS(R, C), av + 0);
            const double sv = -2.375;
            td__view sc = tu_from_doubles(dev, dt, 0, NULL, &sv);
            struct { td__view l, r; int kind; } cases[] = {
                {a, full, 0}, {a, sc, 1}, {sc, a, 2}, {a, row, 3}};
            const uint32_t ops[] = {TD_OP_ADD, TD_OP_MUL, TD_OP_DIV, TD_OP_LT};
            for (size_t c = 0; c < 4; c++)
                for (size_t q = 0; q < 4; q++) {
                    td__view in[2] = {cases[c].l, cases[c].r};
                    const bool cmp = ops[q] == TD_OP_LT;
                    td__view o = run(tu_op(ops[q], 0, NULL), in, 2, cmp ? TD_BOOL : dt, 2,
                                     DIMS(R, C));
                    int64_t bad = 0;
                    for (int i = 0; i < R * C; i++) {
                        const double l = cases[c].kind == 2 ? sv : av[i];
                        const double r = cases[c].kind == 0 ? av[i] : cases[c].kind == 3 ? bv[i % C]
                                       : cases[c].kind == 1 ? sv : av[i];
                        const double w = ops[q] == TD_OP_ADD ? round_to(dt, l + r)
                                       : ops[q] == TD_OP_MUL ? round_to(dt, l * r)
                                       : ops[q] == TD_OP_DIV ? round_to(dt, l / r)
                                                             : (double)(l < r);
                        if (!(tu_get(&o, i) == w || (isnan(w) && isnan(tu_get(&o, i)))) && bad++ < 3)
                            cr_expect_eq(tu_get(&o, i), w, "%s dt %u op %u case %zu [%d]: %g %g",
                                         isas[k], dt, ops[q], c, i, l, r);
                    }
                    cr_expect_eq(bad, 0, "%s dt %u op %u case %zu", isas[k], dt, ops[q], c);
                    tu_free(dev, &o);
                }
            tu_free(dev, &a);
            tu_free(dev, &row);
            tu_free(dev, &full);
            tu_free(dev, &sc);
        }
    }
    td__cpu_half_force_isa(NULL);
    free(av);
}

/* f16/bf16 matmul over several tiles of the CPU's fixed tiling, short last tile row and
 * column included ([2, 300, 70] x [70, 600], the weight broadcast over the batch): every
 * partial sum of these inputs is exact in f32 whatever the order (products of at most 8
 * significant bits, sums multiples of 2^-7 below 2^7), so each output is the float64 sum
 * rounded once. */
Test(cpu_dtypes, half_matmul_tiles)
{
    enum { B = 2, M = 300, K = 70, N = 600 };
    double *a = malloc(B * M * K * sizeof *a), *b = malloc(K * N * sizeof *b);
    for (int i = 0; i < B * M * K; i++) a[i] = (double)((i * 13) % 17 - 8) / 16;
    for (int i = 0; i < K * N; i++) b[i] = (double)((i * 7) % 11 - 5) / 8;
    for (size_t h = 0; h < 2; h++) {
        const uint32_t dt = halves[h];
        td__view x[2] = {tu_from_doubles(dev, dt, 3, DIMS(B, M, K), a),
                         tu_from_doubles(dev, dt, 2, DIMS(K, N), b)};
        td__view o = run(tu_op(TD_OP_MATMUL, 0, NULL), x, 2, dt, 3, DIMS(B, M, N));
        int64_t bad = 0;
        for (int q = 0; q < B; q++)
            for (int i = 0; i < M; i++)
                for (int j = 0; j < N; j++) {
                    double sum = 0;
                    for (int k = 0; k < K; k++) sum += a[(q * M + i) * K + k] * b[k * N + j];
                    const double got = tu_get(&o, (q * M + i) * N + j);
                    if (got != round_to(dt, sum) && bad++ < 3)
                        cr_expect_eq(got, round_to(dt, sum), "dt %u [%d,%d,%d]: %.9g", dt, q, i, j, got);
                }
        cr_expect_eq(bad, 0, "dt %u: %lld wrong", dt, (long long)bad);
        tu_free(dev, &o);
        tu_free(dev, &x[0]);
        tu_free(dev, &x[1]);
    }
    /* the same bits on 1 thread as on 4, with inexact sums (values of 8 significant bits) */
    for (int i = 0; i < B * M * K; i++) a[i] = (double)((i * 2654435761u) % 255 + 1) / 37;
    for (int i = 0; i < K * N; i++) b[i] = (double)((i * 40503u) % 253 + 1) / -29;
    td__device *one = tu_open(1);
    for (size_t h = 0; h < 2; h++) {
        const uint32_t dt = halves[h];
        td__view x[2] = {tu_from_doubles(dev, dt, 3, DIMS(B, M, K), a),
                         tu_from_doubles(dev, dt, 2, DIMS(K, N), b)};
        td__view o4 = run(tu_op(TD_OP_MATMUL, 0, NULL), x, 2, dt, 3, DIMS(B, M, N));
        td__view y[2] = {tu_new(one, dt, 3, DIMS(B, M, K), x[0].data),
                         tu_new(one, dt, 2, DIMS(K, N), x[1].data)};
        td__view o1 = tu_new(one, dt, 3, DIMS(B, M, N), NULL);
        cr_assert_eq(tu_exec(one, tu_op(TD_OP_MATMUL, 0, NULL), y, 2, &o1), TD_OK, "%s", tu_err);
        cr_expect_eq(memcmp(o1.data, o4.data, tu_nbytes(&o1)), 0, "dt %u: 1 and 4 threads differ", dt);
        tu_free(one, &o1);
        tu_free(one, &y[0]);
        tu_free(one, &y[1]);
        tu_free(dev, &o4);
        tu_free(dev, &x[0]);
        tu_free(dev, &x[1]);
    }
    tu_close(one);
    free(a);
    free(b);
}

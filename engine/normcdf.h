/* normcdf.h — the standard normal CDF and its inverse, and the exp and log they need,
 * written with IEEE basic operations only (+ - * /, sqrt, comparisons, exact bit moves) so
 * that every backend computes them to the same bits. TRUNC_NORMAL (engine/philox.h) draws
 * through them: a math library's exp/log/erfc rounds its last bit differently on glibc,
 * CUDA and ROCm, which would make truncated normal draws differ between backends.
 *
 * Requirements on the compiler: IEEE double, round to nearest, no contraction into fused
 * multiply-add (C11 without -ffp-contract=fast on the host; nvcc -fmad=false; hipcc
 * -ffp-contract=off: the build sets these, engine/philox.h says why) and no x87 excess
 * precision (x86-64 SSE2). Subnormals are kept (no flush to zero in double).
 * tests/unit/backends/gen_random_reference.py implements the same operations in Python
 * (whose floats are IEEE doubles) and checks the accuracy stated here against mpmath.
 *
 * td__nd_exp(x), x <= 0: k = floor(x / ln 2 + 1/2), r = (x - k ln2_hi) - k ln2_lo
 *   (|r| <= ln 2 / 2; ln2_hi has 20 significant bits so k ln2_hi is exact), e^r by Taylor
 *   to degree 13 in Horner form p = 1 + (p r) / n for n = 13 .. 1, times 2^k (two exact
 *   steps below 2^-1022). 0 for x <= -745.5. Within 2 ulp of e^x.
 * td__nd_log(x), x > 0 finite: x = m 2^e with m in [sqrt(1/2), sqrt(2)] (subnormals scaled
 *   by 2^54 first), f = m - 1, s = f / (2 + f), log m = 2 s sum_{k=0}^{11} s^(2k) / (2k+1)
 *   (Horner from 1/23), result e ln2_hi + (2 s q + e ln2_lo). Within a few ulp.
 * td__nd_cdf_lower(t) = Phi(-t) for t >= 0 (Phi the standard normal CDF):
 *   t < 3: 1/2 - phi(t) S(t), S(t) = t + t^3/3 + t^5/(3 5) + ..., summed until a term no
 *          longer changes the sum (the series of Abramowitz & Stegun 26.2.11);
 *   3 <= t < 40: phi(t) / K(t), K(t) = t + 1/(t + 2/(t + 3/(t + ...))) (Laplace's continued
 *          fraction, A&S 26.2.14), evaluated forward by the modified Lentz method until a
 *          step changes it by less than 2^-53 (at most 500 steps; about 50 at t = 3);
 *   t >= 40 (or +inf): 0 (Phi(-40) < 1e-349 underflows).
 *   phi(t) = e^(-t^2 / 2) / sqrt(2 pi). Relative error below 2e-13 (the series' cancellation
 *   near t = 3), usually about 1e-16.
 * td__nd_quantile(u), u in [0, 1]: Phi^-1. For u <= 1/2 (else -quantile(1 - u)): start
 *   from A&S 26.2.23 (Hastings: z = c(t) - t, t = sqrt(-2 log u), error < 4.5e-4) and take
 *   exactly two Halley steps z -= h / (1 + z h / 2), h = (Phi(z) - u) / phi(z) (cubic
 *   convergence: from 4.5e-4 to below 1e-16 in two steps; a step is skipped when phi(z)
 *   underflows). quantile(0) = -inf, quantile(1) = +inf. Relative error below 1e-13 (or
 *   1e-17 absolute near u = 1/2), checked against mpmath.
 *
 * Thread-safety: pure functions.
 */
#ifndef TD_ENGINE_NORMCDF_H
#define TD_ENGINE_NORMCDF_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define TD__ND_FN __host__ __device__ static inline
#else
#define TD__ND_FN static inline
#endif
#if defined(__HIPCC__)
#define TD__ND_MEMCPY __builtin_memcpy
#else
#define TD__ND_MEMCPY memcpy
#endif

#define TD__ND_LN2_HI 0x1.62e42p-1
#define TD__ND_LN2_LO 0x1.fdf473de6af28p-22
#define TD__ND_INV_LN2 0x1.71547652b82fep+0
#define TD__ND_SQRT2 0x1.6a09e667f3bcdp+0
#define TD__ND_INV_SQRT_2PI 0x1.9884533d43651p-2

TD__ND_FN uint64_t td__nd_bits(double x)
{
    uint64_t b;
    TD__ND_MEMCPY(&b, &x, sizeof b);
    return b;
}

TD__ND_FN double td__nd_from_bits(uint64_t b)
{
    double x;
    TD__ND_MEMCPY(&x, &b, sizeof x);
    return x;
}

/* 2^k for k in [-1022, 1023], exactly. */
TD__ND_FN double td__nd_pow2(int k) { return td__nd_from_bits((uint64_t)(k + 1023) << 52); }

/* e^x for x <= 0 (see the top of the file). */
TD__ND_FN double td__nd_exp(double x)
{
    if (!(x > -745.5)) return 0.0;
    const double k = floor(x * TD__ND_INV_LN2 + 0.5);
    const double r = (x - k * TD__ND_LN2_HI) - k * TD__ND_LN2_LO;
    double p = 1.0;
    for (int n = 13; n >= 1; n--) p = 1.0 + p * r / (double)n;
    const int ki = (int)k;
    if (ki >= -1022) return p * td__nd_pow2(ki);
    return (p * td__nd_pow2(ki + 54)) * td__nd_pow2(-54);
}

/* Natural log of a finite x > 0 (see the top of the file). */
TD__ND_FN double td__nd_log(double x)
{
    int e = 0;
    if (x < 0x1p-1022) {
        x = x * 0x1p54;
        e = -54;
    }
    const uint64_t b = td__nd_bits(x);
    e += (int)(b >> 52) - 1023;
    double m = td__nd_from_bits((b & 0x000fffffffffffffull) | 0x3ff0000000000000ull);
    if (m > TD__ND_SQRT2) {
        m = m * 0.5;
        e += 1;
    }
    const double f = m - 1.0;
    const double s = f / (2.0 + f);
    const double z = s * s;
    double q = 1.0 / 23.0;
    for (int k = 10; k >= 0; k--) q = 1.0 / (double)(2 * k + 1) + z * q;
    return (double)e * TD__ND_LN2_HI + (2.0 * s * q + (double)e * TD__ND_LN2_LO);
}

/* phi(t) = e^(-t^2/2) / sqrt(2 pi). */
TD__ND_FN double td__nd_pdf(double t) { return td__nd_exp(-0.5 * (t * t)) * TD__ND_INV_SQRT_2PI; }

/* Phi(-t) for t >= 0 (see the top of the file). */
TD__ND_FN double td__nd_cdf_lower(double t)
{
    if (!(t < 40.0)) return 0.0;
    if (t < 3.0) {
        const double z = t * t;
        double term = t, s = t;
        for (int n = 3; n < 400; n += 2) {
            term = term * z / (double)n;
            const double s2 = s + term;
            if (s2 == s) break;
            s = s2;
        }
        return 0.5 - td__nd_pdf(t) * s;
    }
    double f = t, c = t, d = 0.0;
    for (int k = 1; k <= 500; k++) {
        d = 1.0 / (t + (double)k * d);
        c = t + (double)k / c;
        const double delta = c * d;
        f = f * delta;
        if (fabs(delta - 1.0) < 0x1p-53) break;
    }
    return td__nd_pdf(t) / f;
}

/* Phi(x). */
TD__ND_FN double td__nd_cdf(double x)
{
    return x <= 0.0 ? td__nd_cdf_lower(-x) : 1.0 - td__nd_cdf_lower(x);
}

/* Phi^-1(u) for u in [0, 1/2] (a value <= 0, up to the last Halley step's rounding). */
TD__ND_FN double td__nd_quantile_lower(double u)
{
    if (!(u > 0.0)) return -INFINITY;
    const double t = sqrt(-2.0 * td__nd_log(u));
    const double num = 2.515517 + t * (0.802853 + t * 0.010328);
    const double den = 1.0 + t * (1.432788 + t * (0.189269 + t * 0.001308));
    double z = num / den - t;
    for (int it = 0; it < 2; it++) {
        const double p = td__nd_pdf(z);
        if (!(p > 0.0)) break;
        const double h = (td__nd_cdf(z) - u) / p;
        z = z - h / (1.0 + 0.5 * z * h);
    }
    return z;
}

/* Phi^-1(u) for u in [0, 1]. */
TD__ND_FN double td__nd_quantile(double u)
{
    return u <= 0.5 ? td__nd_quantile_lower(u) : -td__nd_quantile_lower(1.0 - u);
}
#endif

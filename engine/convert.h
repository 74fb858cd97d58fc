/* convert.h — the 16-bit float formats (IEEE 754 binary16 "f16" and bfloat16 "bf16") and the
 * saturating float -> i8/i16 rules, as header-only static inline functions that the engine,
 * the CPU backend, the GPU kernels (CUDA/HIP C++, host and device) and the tests all expand.
 *
 * Why our own code instead of _Float16 / __half / __nv_bfloat16: the CPU reference must give
 * the same bits on every compiler and CPU (gcc's _Float16 needs SSE2 and differs in NaN
 * payloads between versions), and one function per rule keeps the CPU and GPU casts alike.
 *
 * Narrowing (td__f32_to_f16, td__f64_to_f16, td__i64_to_f16 and the bf16 twins) rounds once,
 * to nearest, ties to even, straight from the source value (an f64 or i64 is never rounded
 * to f32 first, which could round twice): results below the smallest subnormal round to
 * +-0 (the tie, half of it, to 0), subnormals are produced, values that round past the
 * largest finite (65504 for f16, about 3.39e38 for bf16) become +-inf, +-inf stays +-inf,
 * and NaN stays a NaN of the same sign, quiet, with the top bits of its payload.
 * Widening (td__f16_to_f32, td__bf16_to_f32) is exact; a NaN comes back quiet, same sign.
 *
 * Thread-safety: pure functions, any thread. C11 and C++ (CUDA/HIP device code too).
 */
#ifndef TD_ENGINE_CONVERT_H
#define TD_ENGINE_CONVERT_H

#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define TD__CVT_FN static inline __host__ __device__
#else
#define TD__CVT_FN static inline
#endif
/* hipcc has no device memcpy; its clang builtin works on both sides */
#if defined(__HIPCC__)
#define TD__CVT_MEMCPY __builtin_memcpy
#else
#define TD__CVT_MEMCPY memcpy
#endif

TD__CVT_FN uint32_t td__f32_bits(float f)
{
    uint32_t u;
    TD__CVT_MEMCPY(&u, &f, 4);
    return u;
}

TD__CVT_FN float td__f32_from_bits(uint32_t u)
{
    float f;
    TD__CVT_MEMCPY(&f, &u, 4);
    return f;
}

/* Round a finite nonzero magnitude m * 2^(e - 63) (m's top bit, bit 63, set) to a format with
 * `mbits` stored mantissa bits and exponent bias `bias`; returns the unsigned encoding
 * (exponent field all ones with mantissa 0 = inf on overflow). */
TD__CVT_FN uint32_t td__round_small_float(int e, uint64_t m, int mbits, int bias)
{
    const int emin = 1 - bias;
    if (e > bias) return (uint32_t)(2 * bias + 1) << mbits; /* inf */
    int shift = 63 - mbits;
    uint32_t base = 0;
    if (e >= emin) base = (uint32_t)(e + bias) << mbits;
    else shift += emin - e;
    uint64_t r;
    if (shift > 64) {
        r = 0;
    } else if (shift == 64) {
        r = m > (1ull << 63) ? 1 : 0; /* above half the smallest subnormal; the tie goes to 0 */
    } else {
        r = m >> shift;
        const uint64_t rem = m & ((1ull << shift) - 1), half = 1ull << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
    }
    /* a normal's r includes the implicit bit; a carry out of the mantissa bumps the
     * exponent (to inf past the largest finite), a subnormal that rounds up becomes normal */
    return base != 0 ? base + (uint32_t)(r - (1ull << mbits)) : (uint32_t)r;
}

/* Unbiased exponent and top-aligned mantissa of a finite nonzero f64 magnitude. */
TD__CVT_FN void td__f64_split(uint64_t u, int *e, uint64_t *m)
{
    int ex = (int)((u >> 52) & 0x7ff);
    uint64_t mant = u & ((1ull << 52) - 1);
    if (ex == 0) { /* subnormal: normalise */
        int lz = __builtin_clzll(mant);
        *m = mant << lz;
        *e = -1022 - (lz - 11);
    } else {
        *m = (mant | (1ull << 52)) << 11;
        *e = ex - 1023;
    }
}

TD__CVT_FN uint16_t td__f64_narrow(double d, int mbits, int bias, int nan_shift)
{
    uint64_t u;
    TD__CVT_MEMCPY(&u, &d, 8);
    const uint32_t sign = (uint32_t)(u >> 63) << (mbits + (bias == 15 ? 5 : 8));
    const uint32_t expall = (uint32_t)(2 * bias + 1) << mbits;
    const uint64_t mag = u & ~(1ull << 63);
    if (mag >= 0x7ff0000000000000ull) {
        if (mag == 0x7ff0000000000000ull) return (uint16_t)(sign | expall);
        return (uint16_t)(sign | expall | (1u << (mbits - 1)) |
                          (uint32_t)((mag & ((1ull << 52) - 1)) >> nan_shift));
    }
    if (mag == 0) return (uint16_t)sign;
    int e;
    uint64_t m;
    td__f64_split(mag, &e, &m);
    return (uint16_t)(sign | td__round_small_float(e, m, mbits, bias));
}

/* f64 -> f16 and bf16, rounded once (a float converts to double exactly, so these are the
 * f32 conversions too). */
TD__CVT_FN uint16_t td__f64_to_f16(double d) { return td__f64_narrow(d, 10, 15, 42); }
TD__CVT_FN uint16_t td__f64_to_bf16(double d) { return td__f64_narrow(d, 7, 127, 45); }
TD__CVT_FN uint16_t td__f32_to_f16(float f) { return td__f64_to_f16((double)f); }
TD__CVT_FN uint16_t td__f32_to_bf16(float f) { return td__f64_to_bf16((double)f); }

/* i64 -> f16 / bf16, rounded once from the exact integer. */
TD__CVT_FN uint16_t td__i64_narrow(int64_t v, int mbits, int bias)
{
    const uint32_t sign = v < 0 ? 1u << (mbits + (bias == 15 ? 5 : 8)) : 0u;
    uint64_t mag = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    if (mag == 0) return 0;
    int lz = __builtin_clzll(mag);
    return (uint16_t)(sign | td__round_small_float(63 - lz, mag << lz, mbits, bias));
}
TD__CVT_FN uint16_t td__i64_to_f16(int64_t v) { return td__i64_narrow(v, 10, 15); }
TD__CVT_FN uint16_t td__i64_to_bf16(int64_t v) { return td__i64_narrow(v, 7, 127); }

/* f16 -> f32, exact. */
TD__CVT_FN float td__f16_to_f32(uint16_t h)
{
    const uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ffu;
    if (e == 0) {
        float v = (float)m * 0x1p-24f; /* zero or subnormal: exact in f32 */
        return s ? -v : v;
    }
    if (e == 31) return td__f32_from_bits(s | 0x7f800000u | (m ? 0x400000u | (m << 13) : 0));
    return td__f32_from_bits(s | ((e + 112) << 23) | (m << 13));
}

/* bf16 -> f32, exact (bf16 is the top half of an f32). */
TD__CVT_FN float td__bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    if ((u & 0x7fffffffu) > 0x7f800000u) u |= 0x400000u;
    return td__f32_from_bits(u);
}

/* float -> i8 / i16 by the cast rules (include/tensord.h, td_cast): NaN gives 0, otherwise
 * truncate toward zero and saturate to the type's range. */
TD__CVT_FN int8_t td__sat_i8(double v)
{
    if (v != v) return 0;
    if (v <= -128.0) return INT8_MIN;
    if (v >= 127.0) return INT8_MAX;
    return (int8_t)v;
}

TD__CVT_FN int16_t td__sat_i16(double v)
{
    if (v != v) return 0;
    if (v <= -32768.0) return INT16_MIN;
    if (v >= 32767.0) return INT16_MAX;
    return (int16_t)v;
}
#endif

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

/* f64 -> f16 and bf16, rounded once. */
TD__CVT_FN uint16_t td__f64_to_f16(double d) { return td__f64_narrow(d, 10, 15, 42); }
TD__CVT_FN uint16_t td__f64_to_bf16(double d) { return td__f64_narrow(d, 7, 127, 45); }

/* f32 -> f16 and bf16: the same results as td__f64_to_f16((double)f) (a float converts to
 * double exactly), computed on the f32 bits without branches so that a loop of them
 * vectorises (every case is computed and one selected). Checked against the f64 path on
 * all 2^32 inputs; tests/unit/engine/convert.c and tests/unit/backends/cpu_dtypes.c
 * (half_conversions_every_isa) hold them to hand encodings of the rules.
 * bf16: add 0x7fff plus the kept lsb and drop 16 bits (ties to even; a carry runs into the
 * exponent, to inf past the largest finite); a NaN keeps its top 7 payload bits, quieted. */
TD__CVT_FN uint16_t td__f32_to_bf16(float f)
{
    const uint32_t u = td__f32_bits(f);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const uint32_t nan = (u >> 16) | 0x40u;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

/* f16: |f| >= 65520 (half way past 65504; its tie goes to the even 2^16) is inf, a normal
 * result rebiases the exponent (127 -> 15) and rounds 13 bits off, a subnormal one shifts the
 * mantissa with its implicit bit right by 126 - exponent (capped at 31: anything shifted
 * that far is below half the smallest subnormal, or an f32 subnormal, and rounds to 0). */
TD__CVT_FN uint16_t td__f32_to_f16(float f)
{
    const uint32_t u = td__f32_bits(f), a = u & 0x7fffffffu, sign = (u >> 16) & 0x8000u;
    const uint32_t nan = 0x7e00u | ((a >> 13) & 0x3ffu);
    const uint32_t r = a - 0x38000000u; /* exponent 127 -> 15 */
    const uint32_t normal = (r + 0xfffu + ((r >> 13) & 1u)) >> 13;
    const uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
    /* used only for e <= 112 (sh >= 14); clamped to [14, 31] so that no lane shifts by 32
     * or more (undefined) when the result is another case's */
    const uint32_t ec = e < 112u ? e : 112u, d = 126u - ec, sh = d < 31u ? d : 31u;
    /* m + (half - 1) + kept lsb, shifted: ties to even (m < 2^24, so no overflow) */
    const uint32_t sub = (m + ((1u << (sh - 1u)) - 1u) + ((m >> sh) & 1u)) >> sh;
    const uint32_t mag = a > 0x7f800000u   ? nan
                         : a >= 0x477ff000u ? 0x7c00u
                         : a >= 0x38800000u ? normal
                                            : sub;
    return (uint16_t)(sign | mag);
}

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

/* f16 -> f32, exact. Branch-free (each case computed, one selected) so that loops vectorise. */
TD__CVT_FN float td__f16_to_f32(uint16_t h)
{
    const uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    /* zero or subnormal: m * 2^-24, exact in f32 (a normal f32 or 0) */
    const uint32_t sub = td__f32_bits((float)m * 0x1p-24f);
    const uint32_t special = 0x7f800000u | ((0u - (uint32_t)(m != 0)) & (0x400000u | (m << 13)));
    const uint32_t normal = ((e + 112u) << 23) | (m << 13);
    const uint32_t is_sub = 0u - (uint32_t)(e == 0), is_special = 0u - (uint32_t)(e == 31);
    return td__f32_from_bits(s | (sub & is_sub) | (special & is_special) |
                             (normal & ~(is_sub | is_special)));
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

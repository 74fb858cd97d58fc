/* gpu_half.h — f32 -> f16 / bf16 narrowing for the GPU kernels, in 32-bit integer arithmetic.
 *
 * Why: engine/convert.h's td__f32_to_f16 / td__f32_to_bf16 (the CPU reference) widen to f64
 * and round through a 64-bit mantissa, count leading zeros and shift in 64 bits; on a GPU
 * that is a few dozen instructions of emulated 64-bit integer work per element, and it made
 * bf16 add on 1 GiB compute-bound at 0.41x PyTorch on the H200 (BENCHMARKS.md). These give
 * the same bits for every f32 that is not a NaN (round to nearest, ties to even; subnormal
 * results produced; past the largest finite to +-inf; +-0 and +-inf kept): the unit test
 * tests/gpu/half_check.c compares them with engine/convert.h on every one of the 2^32 f32
 * bit patterns when run with --all, and on a fixed sample plus every rounding boundary by
 * default. A NaN takes engine/convert.h's own function, so its payload rule is convert.h's
 * by construction.
 *
 * C11 and C++ (CUDA/HIP device and host code). Pure functions, any thread.
 */
#ifndef TD_BACKENDS_GPU_HALF_H
#define TD_BACKENDS_GPU_HALF_H

#include "engine/convert.h"
#include <stdint.h>

/* f32 -> bf16: the top half, rounded to nearest even on the low 16 bits. The carry of a
 * round-up moves into the exponent (the largest finite rounds to inf; a subnormal to the
 * smallest normal), which is exactly the rounding of the format. */
TD__CVT_FN uint16_t td__gpu_f32_to_bf16(float f)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    if (f != f) return td__f32_to_bf16(f); /* NaN (a float compare: the FP32 pipe) */
    /* On sm_80 and later, one instruction: PTX cvt.rn.bf16.f32 rounds to nearest even, keeps
     * subnormals (no .ftz) and overflows to +-inf, the same rounding as the integer code
     * below (which is what half_check holds to convert.h), in place of ~5 integer ops on
     * Hopper's half-rate INT32 pipe. */
    uint16_t r;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(f));
    return r;
#else
    const uint32_t u = td__f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return td__f32_to_bf16(f); /* NaN */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
#endif
}

/* f32 -> f16. Magnitudes from 65520 (the tie between 65504 and 2^16, rounded to even: up)
 * become inf; from 2^-14 up, normals: rebias the exponent and round the low 13 mantissa bits
 * (a carry bumps the exponent); below, subnormals of step 2^-24: the 24-bit significand
 * shifted right by 126 - exponent (14 to 24 places) and rounded; at most 2^-25 (the tie with
 * 0 included) gives +-0. */
TD__CVT_FN uint16_t td__gpu_f32_to_f16(float f)
{
    const uint32_t u = td__f32_bits(f), a = u & 0x7fffffffu;
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    if (a > 0x7f800000u) return td__f32_to_f16(f); /* NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
    if (a >= 0x38800000u) {
        const uint32_t r = a + 0xfffu + ((a >> 13) & 1u);
        return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
    }
    if (a <= 0x33000000u) return sign;
    const uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - e; /* 14 .. 24: e is 102 .. 112 here */
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u))) r++;
    return (uint16_t)(sign | r);
}

#endif

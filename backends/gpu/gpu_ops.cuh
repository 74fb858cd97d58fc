/* gpu_ops.cuh — element semantics on the device, written to match the CPU backend (the
 * reference) bit for bit: the CAST/FULL/ARANGE conversion rules, integer arithmetic that
 * never traps (wraparound, x / 0 = 0, INT_MIN / -1 = INT_MIN), NaN-propagating
 * maximum/minimum, comparisons on raw values, and the kernel-side walk of a td__gpu_iter.
 *
 * Float functions use the CUDA math library without fast-math (IEEE division and square
 * root, no flush to zero) and the module is compiled with -fmad=false, so +, -, *, /, sqrt
 * and the conversions round exactly as on the CPU; exp/log/tanh/pow differ from glibc by a
 * few ulps (tests/unit/backends/conformance.c states the bounds).
 */
#ifndef TD_BACKENDS_GPU_OPS_CUH
#define TD_BACKENDS_GPU_OPS_CUH

#include "backends/gpu/gpu_internal.h"
#include "backends/gpu/gpu_half.h"
#include "engine/convert.h"
#include <stdint.h>
#if defined(TD_GPU_HIP)
/* nvcc includes the kernel-language header implicitly; hipcc needs it named */
#include <hip/hip_runtime.h>
#endif

#define TD_DEV __device__ __forceinline__
#define TD_HOSTDEV __host__ __device__ inline

/* ---- conversions (same rules as backends/cpu/cpu_internal.h) ---- */

TD_HOSTDEV int32_t td_sat_i32(double v)
{
    if (v != v) return 0;
    if (v <= -2147483648.0) return INT32_MIN;
    if (v >= 2147483647.0) return INT32_MAX;
    return (int32_t)v;
}

TD_HOSTDEV int64_t td_sat_i64(double v)
{
    if (v != v) return 0;
    if (v <= -9223372036854775808.0) return INT64_MIN;
    if (v >= 9223372036854775808.0) return INT64_MAX;
    return (int64_t)v;
}

TD_HOSTDEV uint8_t td_sat_u8(double v)
{
    if (v != v || v <= 0.0) return 0;
    if (v >= 255.0) return 255;
    return (uint8_t)v;
}

/* Element types by dtype, and a tag for bool (stored as one byte, any nonzero is true). */
struct td_bool {
    uint8_t v;
};

/* f16 and bf16 elements: their bits (engine/convert.h's formats, the CPU's exactly), read
 * as float and written back rounded once, as the CPU backend computes them (from f32 by
 * gpu_half.h's 32-bit narrowing, which gives convert.h's bits without its 64-bit work). Our own
 * conversions rather than __half / __nv_bfloat16 so that HIP and CUDA and the CPU agree bit
 * for bit, NaN payloads included. */
struct td_f16 {
    uint16_t bits;
    TD_DEV float f() const { return td__f16_to_f32(bits); }
    static TD_DEV td_f16 of(float v)
    {
        td_f16 h;
        h.bits = td__gpu_f32_to_f16(v);
        return h;
    }
};
struct td_bf16 {
    uint16_t bits;
    TD_DEV float f() const { return td__bf16_to_f32(bits); }
    /* The f32 value for an operand of an IEEE arithmetic op (+ - * /) on CUDA: the bits
     * shifted, a NaN not quieted first, since the op's NaN result is quiet either way (on
     * NVIDIA GPUs the canonical NaN), so the result's bits are those of f(). HIP keeps f(). */
    TD_DEV float f_arith() const
    {
#if defined(TD_GPU_HIP)
        return f();
#else
        return td__f32_from_bits((uint32_t)bits << 16);
#endif
    }
    static TD_DEV td_bf16 of(float v)
    {
        td_bf16 h;
        h.bits = td__gpu_f32_to_bf16(v);
        return h;
    }
};
template <typename T> struct td_is_half {
    static constexpr bool value = false;
};
template <> struct td_is_half<td_f16> {
    static constexpr bool value = true;
};
template <> struct td_is_half<td_bf16> {
    static constexpr bool value = true;
};

/* Convert a source value to a destination type by the CAST rules. */
template <typename D> struct td_cast_to;

template <> struct td_cast_to<float> {
    template <typename S> static TD_DEV float from(S x) { return (float)x; }
};
template <> struct td_cast_to<double> {
    template <typename S> static TD_DEV double from(S x) { return (double)x; }
};
template <> struct td_cast_to<int8_t> {
    static TD_DEV int8_t from(float x) { return td__sat_i8(x); }
    static TD_DEV int8_t from(double x) { return td__sat_i8(x); }
    template <typename S> static TD_DEV int8_t from(S x) { return (int8_t)(uint8_t)x; }
};
template <> struct td_cast_to<int16_t> {
    static TD_DEV int16_t from(float x) { return td__sat_i16(x); }
    static TD_DEV int16_t from(double x) { return td__sat_i16(x); }
    template <typename S> static TD_DEV int16_t from(S x) { return (int16_t)(uint16_t)x; }
};
template <> struct td_cast_to<td_f16> {
    static TD_DEV td_f16 from(float x) { td_f16 h; h.bits = td__gpu_f32_to_f16(x); return h; }
    static TD_DEV td_f16 from(double x) { td_f16 h; h.bits = td__f64_to_f16(x); return h; }
    static TD_DEV td_f16 from(int64_t x) { td_f16 h; h.bits = td__i64_to_f16(x); return h; }
    template <typename S> static TD_DEV td_f16 from(S x) { return from((double)x); }
};
template <> struct td_cast_to<td_bf16> {
    static TD_DEV td_bf16 from(float x) { td_bf16 h; h.bits = td__gpu_f32_to_bf16(x); return h; }
    static TD_DEV td_bf16 from(double x) { td_bf16 h; h.bits = td__f64_to_bf16(x); return h; }
    static TD_DEV td_bf16 from(int64_t x) { td_bf16 h; h.bits = td__i64_to_bf16(x); return h; }
    template <typename S> static TD_DEV td_bf16 from(S x) { return from((double)x); }
};
template <> struct td_cast_to<int32_t> {
    static TD_DEV int32_t from(float x) { return td_sat_i32(x); }
    static TD_DEV int32_t from(double x) { return td_sat_i32(x); }
    static TD_DEV int32_t from(int64_t x) { return (int32_t)(uint32_t)x; }
    static TD_DEV int32_t from(int32_t x) { return x; }
    static TD_DEV int32_t from(uint8_t x) { return x; }
};
template <> struct td_cast_to<int64_t> {
    static TD_DEV int64_t from(float x) { return td_sat_i64(x); }
    static TD_DEV int64_t from(double x) { return td_sat_i64(x); }
    static TD_DEV int64_t from(int64_t x) { return x; }
    static TD_DEV int64_t from(int32_t x) { return x; }
    static TD_DEV int64_t from(uint8_t x) { return x; }
};
template <> struct td_cast_to<uint8_t> {
    static TD_DEV uint8_t from(float x) { return td_sat_u8(x); }
    static TD_DEV uint8_t from(double x) { return td_sat_u8(x); }
    static TD_DEV uint8_t from(int64_t x) { return (uint8_t)x; }
    static TD_DEV uint8_t from(int32_t x) { return (uint8_t)x; }
    static TD_DEV uint8_t from(uint8_t x) { return x; }
};
template <> struct td_cast_to<td_bool> {
    template <typename S> static TD_DEV td_bool from(S x)
    {
        td_bool b;
        b.v = x != 0;
        return b;
    }
};

/* Storage type of an element type (td_bool is a byte). */
template <typename T> struct td_store {
    typedef T type;
};
template <> struct td_store<td_bool> {
    typedef uint8_t type;
};

/* Store double v into element i of a buffer of dtype dt (FULL, ARANGE, reductions). */
TD_DEV void td_store_double(uint32_t dt, void *base, int64_t i, double v)
{
    switch (dt) {
    case TD_F32: ((float *)base)[i] = (float)v; break;
    case TD_F64: ((double *)base)[i] = v; break;
    case TD_I32: ((int32_t *)base)[i] = td_sat_i32(v); break;
    case TD_I64: ((int64_t *)base)[i] = td_sat_i64(v); break;
    case TD_U8: ((uint8_t *)base)[i] = td_sat_u8(v); break;
    case TD_BOOL: ((uint8_t *)base)[i] = v != 0.0; break;
    case TD_F16: ((uint16_t *)base)[i] = td__f64_to_f16(v); break;
    case TD_BF16: ((uint16_t *)base)[i] = td__f64_to_bf16(v); break;
    case TD_I8: ((int8_t *)base)[i] = td__sat_i8(v); break;
    case TD_I16: ((int16_t *)base)[i] = td__sat_i16(v); break;
    }
}

/* ---- float elements as double, and fixed-order team sums (the normalisations, VAR/STD) ----
 * td_ld_double: a float element widened exactly to double. td_from_double: double rounded
 * once to the element type (td_store_double's rule). */
TD_DEV double td_ld_double(float v) { return v; }
TD_DEV double td_ld_double(double v) { return v; }
TD_DEV double td_ld_double(td_f16 v) { return v.f(); }
TD_DEV double td_ld_double(td_bf16 v) { return v.f(); }
template <typename T> TD_DEV T td_from_double(double v) { return td_cast_to<T>::from(v); }

/* Shuffles within 32-lane segments: lane ^ m, and lane + d (a lane past its segment's end
 * gets its own value). Width 32 on both vendors, so a 64-wide AMD wavefront acts as two
 * independent 32-lane warps and every tree below has the same shape everywhere. */
TD_DEV double td_shfl_xor(double v, int m)
{
#if defined(TD_GPU_HIP)
    return __shfl_xor(v, m, 32);
#else
    return __shfl_xor_sync(0xffffffffu, v, m, 32);
#endif
}
TD_DEV double td_shfl_down(double v, int d)
{
#if defined(TD_GPU_HIP)
    return __shfl_down(v, (unsigned)d, 32);
#else
    return __shfl_down_sync(0xffffffffu, v, (unsigned)d, 32);
#endif
}

/* Sum of v over a team of `team` consecutive threads of a 1-D block (a power of two,
 * 32 <= team <= blockDim.x, the same in every thread). Within each 32-lane warp a butterfly
 * (lane ^ 16, 8, 4, 2, 1: each step adds two partials, and a + b == b + a bit for bit, so
 * every lane ends with the same bits); for teams wider than a warp, the warps' sums are
 * added in ascending warp order from shared memory `sh` (one double per warp of the block)
 * by every thread alike. The association depends on `team` alone: the same bits every run.
 * Every thread of the block must call it with the same `team` (shuffles over full warps,
 * and two barriers when team > 32; `sh` is free again when it returns). */
TD_DEV double td_team_sum(double v, int team, double *sh)
{
    for (int m = 16; m > 0; m >>= 1) v += td_shfl_xor(v, m);
    if (team <= 32) return v;
    const int w = (int)threadIdx.x / 32, w0 = w - w % (team / 32);
    if (threadIdx.x % 32 == 0) sh[w] = v;
    __syncthreads();
    double s = sh[w0];
    for (int i = 1; i < team / 32; i++) s += sh[w0 + i];
    __syncthreads();
    return s;
}

/* ---- the iterator walk ----
 * Element i's input offsets for a td__gpu_iter with NIN inputs, in index type I (int32_t
 * when the iterator is `small`, else int64_t: 64-bit division costs several times more). */
template <typename I, int NIN>
TD_DEV void td_iter_offsets(const td__gpu_iter &it, I i, I off[NIN])
{
    if (it.rank == 1) {
#pragma unroll
        for (int k = 0; k < NIN; k++) off[k] = i * (I)it.strides[k][0];
        return;
    }
#pragma unroll
    for (int k = 0; k < NIN; k++) off[k] = 0;
    I rem = i;
    for (int d = it.rank - 1; d > 0; d--) {
        I n = (I)it.dims[d];
        I c = rem % n;
        rem /= n;
#pragma unroll
        for (int k = 0; k < NIN; k++) off[k] += c * (I)it.strides[k][d];
    }
#pragma unroll
    for (int k = 0; k < NIN; k++) off[k] += rem * (I)it.strides[k][0];
}

#endif

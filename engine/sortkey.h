/* sortkey.h — the sort order of SORT ARGSORT TOPK_*: a uint64 key per element whose unsigned
 * order is the value order, shared by the CPU (backends/cpu/cpu_sort.c) and GPU
 * (backends/gpu/gpu_sort.cu) kernels so both order every dtype identically.
 *
 * Floats (f16/bf16/f32 widened exactly to double): -0.0 is taken as +0.0, every NaN maps to
 * UINT64_MAX (above +inf, all NaNs equal); other values map their IEEE bits to an unsigned
 * order (negative: all bits flipped; positive: the sign bit set). Signed integers: the value
 * with its sign bit flipped. u8: the value. bool: 0 for a zero byte, 1 for any other.
 * Header-only and static inline (host and device) because loadable backend modules may not
 * link engine symbols. Thread-safety: pure functions.
 */
#ifndef TD_ENGINE_SORTKEY_H
#define TD_ENGINE_SORTKEY_H

#include "engine/convert.h"
#include "tensord.h"
#include <stdint.h>

TD__CVT_FN uint64_t td__sort_key_f64(double v)
{
    if (v != v) return UINT64_MAX;
    if (v == 0.0) v = 0.0;
    uint64_t b;
    TD__CVT_MEMCPY(&b, &v, sizeof b);
    return (b >> 63) ? ~b : b | 0x8000000000000000ull;
}

TD__CVT_FN uint64_t td__sort_key_i64(int64_t v) { return (uint64_t)v ^ 0x8000000000000000ull; }

/* Key of element i of a buffer of dtype dt. */
TD__CVT_FN uint64_t td__sort_key(uint32_t dt, const void *base, int64_t i)
{
    switch (dt) {
    case TD_F32: return td__sort_key_f64((double)((const float *)base)[i]);
    case TD_F64: return td__sort_key_f64(((const double *)base)[i]);
    case TD_F16: return td__sort_key_f64((double)td__f16_to_f32(((const uint16_t *)base)[i]));
    case TD_BF16: return td__sort_key_f64((double)td__bf16_to_f32(((const uint16_t *)base)[i]));
    case TD_I32: return td__sort_key_i64(((const int32_t *)base)[i]);
    case TD_I64: return td__sort_key_i64(((const int64_t *)base)[i]);
    case TD_I8: return td__sort_key_i64(((const int8_t *)base)[i]);
    case TD_I16: return td__sort_key_i64(((const int16_t *)base)[i]);
    case TD_BOOL: return ((const uint8_t *)base)[i] != 0;
    default: return ((const uint8_t *)base)[i];
    }
}
#endif

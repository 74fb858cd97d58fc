#version 450
// sort.comp — SORT ARGSORT TOPK_VALUES TOPK_INDICES along one axis and RANDPERM, by rank:
// element i of a line (x viewed as [outer, n, inner]) goes to position rank(i) = the number
// of elements j of its line with key_j < key_i, or key_j == key_i and j < i. That is the
// stable order backends/cpu/cpu_sort.c produces (engine/sortkey.h's uint64 keys: -0 as +0,
// every NaN above +inf; descending by the complemented key, so ties keep index order;
// TOPK the first k), computed by one invocation per element with no inter-thread order, so
// the result is the CPU's, bytes included (values are copied as words: NaN payloads, -0 and
// raw bool bytes survive). O(n) work per element: vk_ops.c limits the axis length.
// RANDPERM (PERM) ranks the 64-bit Philox draws of 0..n-1 the same way (ties: index order).
// Variants: TW the element word, K* the key rule, IDX (i64 indices out) or values (TO = TW).
#include "common.glsl"
#include "half.glsl"
#include "philox.glsl"

layout(std430, binding = 1) buffer O { TO o[]; };
#if !defined(PERM)
layout(std430, binding = 2) readonly buffer A { TW a[]; };
#endif

uint64_t key_of_double(double v)
{
    if (v != v) return 0xfffffffffffffffful;
    if (v == 0.0LF) v = 0.0LF;
    uint64_t b = doubleBitsToUint64(v);
    return (b >> 63) != 0ul ? ~b : b | 0x8000000000000000ul;
}

uint64_t key(uint at)
{
#if defined(PERM)
    uvec4 w = philox(P[P_SEED], P[P_SEED + 1], at / 2u, 0u);
    uint j = (at % 2u) * 2u;
    return packUint2x32(uvec2(w[j], w[j + 1u]));
#else
    TW w = a[P[P_BASE + 1] + at];
#if defined(KF32)
    return key_of_double(double(uintBitsToFloat(uint(w))));
#elif defined(KF64)
    return key_of_double(uint64BitsToDouble(uint64_t(w)));
#elif defined(KH16)
    return key_of_double(double(h_from_f16(uint(w))));
#elif defined(KBF16)
    return key_of_double(double(h_from_bf16(uint(w))));
#elif defined(KI32)
    return uint64_t(int64_t(int(w))) ^ 0x8000000000000000ul;
#elif defined(KI8)
    return uint64_t(int64_t(int8_t(w))) ^ 0x8000000000000000ul;
#elif defined(KI16)
    return uint64_t(int64_t(int16_t(w))) ^ 0x8000000000000000ul;
#elif defined(KI64)
    return uint64_t(w) ^ 0x8000000000000000ul;
#elif defined(KBOOL)
    return uint(w) != 0u ? 1ul : 0ul;
#else
    return uint64_t(w);
#endif
#endif
}

void main()
{
    const uint n = P[P_N], nl = P[P_I], inner = P[P_I + 1], kout = P[P_I + 2];
    const bool desc = P[P_I + 3] != 0u;
    const uint step = gstride();
    for (uint g = gl_GlobalInvocationID.x; g < n;) {
        uint ob = g / (nl * inner), rem = g - ob * nl * inner, i = rem / inner;
        uint inn = rem - i * inner, line = ob * nl * inner + inn;
        uint64_t ki = key(line + i * inner);
        if (desc) ki = ~ki;
        uint rank = 0u;
        for (uint j = 0u; j < nl; j++) {
            uint64_t kj = key(line + j * inner);
            if (desc) kj = ~kj;
            if (kj < ki || (kj == ki && j < i)) rank++;
        }
        if (rank < kout) {
            uint oo = P[P_BASE] + ob * kout * inner + rank * inner + inn;
#if defined(IDX)
            o[oo] = int64_t(i);
#else
            o[oo] = a[P[P_BASE + 1] + line + i * inner];
#endif
        }
        if (n - g <= step) break;
        g += step;
    }
}

#version 450
// create.comp — FULL (a bit pattern the host converted by the cast rules), ARANGE and the
// Philox RAND_UNIFORM / RAND_NORMAL of engine/philox.h, for one output type per variant:
// DT_F32, DT_F64, DT_I32, DT_I64, DT_U8, DT_BOOL (TO its storage type); FULL also runs on
// the raw variants W8/W16/W32/W64 for every other dtype. The mapping from (seed, i) to a
// value is philox.h's, in IEEE double without contraction (`precise`), so uniform values are
// the CPU's bit for bit; normal values go through dmath.glsl's log, sqrt and sincos.
#include "common.glsl"
#include "dmath.glsl"

layout(std430, binding = 1) buffer O { TO o[]; };

uvec4 philox(uint seed_lo, uint seed_hi, uint b_lo, uint b_hi)
{
    uvec4 c = uvec4(b_lo, b_hi, 0u, 0u);
    uint k0 = seed_lo, k1 = seed_hi;
    for (int r = 0; r < 10; r++) {
        if (r > 0) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        uint hi0, lo0, hi1, lo1;
        umulExtended(0xD2511F53u, c.x, hi0, lo0);
        umulExtended(0xCD9E8D57u, c.z, hi1, lo1);
        c = uvec4(hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0);
    }
    return c;
}

#if !defined(RAW)
void store(uint i, double v)
{
#if defined(DT_F32)
    o[i] = float(v);
#elif defined(DT_F64)
    o[i] = v;
#elif defined(DT_I32)
    o[i] = v != v ? 0 : v <= -2147483648.0LF ? (-2147483647 - 1)
                     : v >= 2147483647.0LF ? 2147483647 : int(v);
#elif defined(DT_I64)
    o[i] = v != v ? 0l : v <= -9223372036854775808.0LF ? (-9223372036854775807l - 1l)
                      : v >= 9223372036854775808.0LF ? 9223372036854775807l : int64_t(v);
#elif defined(DT_U8)
    o[i] = uint8_t(v != v || v <= 0.0LF ? 0u : v >= 255.0LF ? 255u : uint(v));
#elif defined(DT_BOOL)
    o[i] = uint8_t(v != 0.0LF ? 1u : 0u);
#endif
}
#endif

void main()
{
    const uint n = P[P_N], step = gstride(), base = P[P_BASE];
    // element offset of the view inside the whole tensor (the engine may run a slice of it)
    const uint first = P[P_I];
    for (uint i = gl_GlobalInvocationID.x; i < n;) {
        if (OP == 1u) { // FULL
#if defined(W64) || defined(DT_F64) || defined(DT_I64)
            o[base + i] = TO(uint64_t(P[P_I + 1]) | (uint64_t(P[P_I + 2]) << 32));
#else
            o[base + i] = TO(P[P_I + 1]);
#endif
        }
#if !defined(RAW)
        else if (OP == 2u) { // ARANGE
            precise double v = pf(0) + double(first + i) * pf(1);
            store(base + i, v);
        } else if (OP == 3u || OP == 4u) { // RAND_UNIFORM, RAND_NORMAL
            uint64_t e = uint64_t(first) + uint64_t(i);
#if defined(DT_F64)
            uint64_t blk = e / 2ul;
            uvec4 w = philox(P[P_SEED], P[P_SEED + 1], uint(blk), uint(blk >> 32));
            if (OP == 3u) {
                uint j = uint(e % 2ul) * 2u;
                uint64_t x = ((uint64_t(w[j + 1u]) << 32) | uint64_t(w[j])) >> 11;
                precise double v = pf(0) + (pf(1) - pf(0)) * (double(x) * 1.1102230246251565404236316680908203125e-16LF);
                store(base + i, v);
            } else {
                uint64_t x1 = ((uint64_t(w.y) << 32) | uint64_t(w.x)) >> 11;
                uint64_t x2 = ((uint64_t(w.w) << 32) | uint64_t(w.z)) >> 11;
                precise double u1 = double(x1 + 1ul) * 1.1102230246251565404236316680908203125e-16LF;
                precise double u2 = double(x2) * 1.1102230246251565404236316680908203125e-16LF;
                precise double r = sqrt(-2.0LF * d_log(u1));
                precise double t = 6.283185307179586476925286766559LF * u2;
                double s, c;
                d_sincos(t, s, c);
                precise double z = (e % 2ul) == 0ul ? r * c : r * s;
                precise double v = pf(0) + pf(1) * z;
                store(base + i, v);
            }
#else
            uint64_t blk = e / 4ul;
            uvec4 w = philox(P[P_SEED], P[P_SEED + 1], uint(blk), uint(blk >> 32));
            uint k = uint(e % 4ul);
            if (OP == 3u) {
                precise double v = pf(0) + (pf(1) - pf(0)) * (double(w[k] >> 8) * 5.9604644775390625e-08LF);
                store(base + i, v);
            } else {
                uint q = (k / 2u) * 2u;
                precise double u1 = double((w[q] >> 8) + 1u) * 5.9604644775390625e-08LF;
                precise double u2 = double(w[q + 1u] >> 8) * 5.9604644775390625e-08LF;
                precise double r = sqrt(-2.0LF * d_log(u1));
                precise double t = 6.283185307179586476925286766559LF * u2;
                double s, c;
                d_sincos(t, s, c);
                precise double z = (k % 2u) == 0u ? r * c : r * s;
                precise double v = pf(0) + pf(1) * z;
                store(base + i, v);
            }
#endif
        }
#endif
        if (n - i <= step) break;
        i += step;
    }
}

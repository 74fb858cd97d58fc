#version 450
// create.comp — FULL (a bit pattern the host converted by the cast rules), ARANGE and the
// Philox RAND_UNIFORM / RAND_NORMAL of engine/philox.h, for one output type per variant:
// DT_F32, DT_F64, DT_I32, DT_I64, DT_U8, DT_BOOL, DT_F16, DT_BF16, DT_I8, DT_I16 (TO its
// storage type); FULL also runs on
// the raw variants W8/W16/W32/W64 for every other dtype. The mapping from (seed, i) to a
// value is philox.h's, in IEEE double without contraction (`precise`), so uniform values are
// the CPU's bit for bit; normal values go through dmath.glsl's log, sqrt and sincos.
#include "common.glsl"
#include "dmath.glsl"
#include "philox.glsl"
#include "half.glsl"
#include "normcdf.glsl"

layout(std430, binding = 1) buffer O { TO o[]; };

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
#elif defined(DT_I8)
    o[i] = int8_t(v != v ? 0 : v <= -128.0LF ? -128 : v >= 127.0LF ? 127 : int(v));
#elif defined(DT_I16)
    o[i] = int16_t(v != v ? 0 : v <= -32768.0LF ? -32768 : v >= 32767.0LF ? 32767 : int(v));
#elif defined(DT_F16)
    o[i] = TO(h_to_f16(h_odd_f32(v)));   // once from the double, as the CPU
#elif defined(DT_BF16)
    o[i] = TO(h_to_bf16(h_odd_f32(v)));
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
        else if (OP == 6u) { // BERNOULLI_SCALAR: one 32-bit word per element, block i / 4
            uint64_t e = uint64_t(first) + uint64_t(i);
            uvec4 w = philox(P[P_SEED], P[P_SEED + 1], uint(e / 4ul), uint(e >> 34));
            store(base + i, double(w[uint(e % 4ul)]) * 2.3283064365386963e-10LF < pf(0) ? 1.0LF : 0.0LF);
        }
#if defined(DT_F32) || defined(DT_F64) || defined(DT_F16) || defined(DT_BF16)
        else if (OP == 9u) { // TRUNC_NORMAL: td__truncnorm_value of the 64-bit draw, block i / 2
            uint64_t e = uint64_t(first) + uint64_t(i);
            uvec4 w = philox(P[P_SEED], P[P_SEED + 1], uint(e / 2ul), uint(e >> 33));
            uint j = uint(e % 2ul) * 2u;
            uint64_t x = packUint2x32(uvec2(w[j], w[j + 1u]));
            // host words from P_I + 2: mean stddev a b lo hi pl dp (doubles), flip
            double tn[8];
            for (int k = 0; k < 8; k++)
                tn[k] = packDouble2x32(uvec2(P[P_I + 2 + 2 * k], P[P_I + 3 + 2 * k]));
            precise double u = tn[6] + tn[7] * (double(x >> 11) * 1.1102230246251565404236316680908203125e-16LF);
            double z = nd_quantile(u);
            if (z < tn[4]) z = tn[4];
            if (z > tn[5]) z = tn[5];
            if (P[P_I + 18] != 0u) z = -z;
            precise double v = tn[0] + tn[1] * z;
            if (v < tn[2]) v = tn[2];
            if (v > tn[3]) v = tn[3];
            store(base + i, v);
        }
#endif
#if defined(DT_I32) || defined(DT_I64) || defined(DT_U8) || defined(DT_I8) || defined(DT_I16)
        else if (OP == 7u) { // RANDINT: low + the high 64 bits of x (high - low), block i / 2
            uint64_t e = uint64_t(first) + uint64_t(i);
            uvec4 w = philox(P[P_SEED], P[P_SEED + 1], uint(e / 2ul), uint(e >> 33));
            uint j = uint(e % 2ul) * 2u;
            uint64_t lo = packUint2x32(uvec2(P[P_I + 1], P[P_I + 2]));
            uint64_t r = packUint2x32(uvec2(P[P_I + 3], P[P_I + 4])) - lo;
            uint xl = w[j], xh = w[j + 1u], rl = uint(r), rh = uint(r >> 32);
            uint h0, l0, h1, l1, h2, l2, h3, l3;
            umulExtended(xl, rl, h0, l0);
            umulExtended(xl, rh, h1, l1);
            umulExtended(xh, rl, h2, l2);
            umulExtended(xh, rh, h3, l3);
            uint64_t mid = uint64_t(h0) + uint64_t(l1) + uint64_t(l2);
            uint64_t hi = packUint2x32(uvec2(l3, h3)) + uint64_t(h1) + uint64_t(h2) + (mid >> 32);
            o[base + i] = TO(lo + hi); // wraps to the dtype, as the CPU's cast
        }
#endif
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

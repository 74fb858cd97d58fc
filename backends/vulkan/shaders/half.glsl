// half.glsl — f16 (IEEE binary16) and bf16 elements as 16-bit bits in storage: widened to f32
// on load (exact), computed in f32 (or double) and rounded once on store, to nearest, ties
// to even, by engine/convert.h's rules (NaN stays a quiet NaN of the same sign, f16 values
// from 65520 up become inf, subnormals are produced). No shaderFloat16 arithmetic is used:
// the bits move as uint16_t (storageBuffer16BitAccess), so the results are the CPU's bit for
// bit wherever the f32 result is. Needs f32 subnormals kept (not flushed) by the device.
// Variant defines: HA16 / HABF (input a, and b, is f16 / bf16), HO16 / HOBF (output).

float h_from_f16(uint h)
{
    uint s = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0u) { // zero or subnormal: m 2^-24, a normal f32
        float v = float(m) * 5.9604644775390625e-8;
        return s != 0u ? -v : v;
    }
    if (e == 31u) return uintBitsToFloat(s | 0x7f800000u | (m != 0u ? 0x400000u | (m << 13) : 0u));
    return uintBitsToFloat(s | ((e + 112u) << 23) | (m << 13));
}

float h_from_bf16(uint h)
{
    uint u = h << 16;
    if ((u & 0x7fffffffu) > 0x7f800000u) u |= 0x400000u;
    return uintBitsToFloat(u);
}

uint h_to_bf16(float f)
{
    uint u = floatBitsToUint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 0x40u;
    return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

uint h_to_f16(float f)
{
    uint u = floatBitsToUint(f), a = u & 0x7fffffffu, sign = (u >> 16) & 0x8000u;
    if (a > 0x7f800000u) return sign | 0x7e00u | ((a >> 13) & 0x3ffu);
    if (a >= 0x477ff000u) return sign | 0x7c00u;                // rounds past 65504
    if (a >= 0x38800000u) {                                      // normal: rebias, drop 13 bits
        uint r = a - 0x38000000u;
        return sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13);
    }
    uint e = a >> 23;
    if (e < 102u) return sign;                                   // below 2^-25: rounds to 0
    uint m = (a & 0x7fffffu) | 0x800000u, sh = 126u - e;         // subnormal: sh in [14, 24]
    return sign | ((m + ((1u << (sh - 1u)) - 1u) + ((m >> sh) & 1u)) >> sh);
}

// d rounded to f32 to odd (truncated, lowest bit set when inexact): rounding that to a
// 16-bit format to nearest gives d's own correctly rounded value (f32 has more than p + 2
// bits of either), so a double accumulator or an f64 rounds once, as the CPU's.
float h_odd_f32(double d)
{
    float f = float(d);
    if (d == d && double(f) != d) {
        uint u = floatBitsToUint(f);
        if ((u & 1u) == 0u) u = abs(double(f)) > abs(d) ? u - 1u : u + 1u;
        f = uintBitsToFloat(u);
    }
    return f;
}

// an i64 rounded to 53 bits to odd (exact below 2^53), for h_odd_f32
double h_i64_odd(int64_t v)
{
    uint64_t m = v < 0l ? 0ul - uint64_t(v) : uint64_t(v);
    double r;
    if (m < (1ul << 53)) {
        r = double(m);
    } else {
        int sh = findMSB(unpackUint2x32(m).y) + 32 - 52;
        uint64_t k = m >> sh;
        if ((k << sh) != m) k |= 1ul;
        r = double(k) * packDouble2x32(uvec2(0u, uint(sh + 1023) << 20));
    }
    return v < 0l ? -r : r;
}

#if defined(HA16)
#define LDA(v) h_from_f16(uint(v))
#elif defined(HABF)
#define LDA(v) h_from_bf16(uint(v))
#else
#define LDA(v) (v)
#endif
#if defined(HO16)
#define STF(r) TO(h_to_f16(r))
#define STD(r) TO(h_to_f16(h_odd_f32(r)))
#elif defined(HOBF)
#define STF(r) TO(h_to_bf16(r))
#define STD(r) TO(h_to_bf16(h_odd_f32(r)))
#else
#define STF(r) TO(r)
#define STD(r) TO(r)
#endif

#version 450
// ew.comp — the elementwise families on a strided walk: UNARY, BINARY, COMPARE, WHERE and
// CAST (also the movement ops, as a CAST to the same type with permuted, sliced or
// broadcast strides). Output element i sits at the output's strided offset of i's
// multi-index (the dims in P), each input at its own strides, so one shader serves
// contiguous, broadcast, permuted and concatenated layouts.
//
// GATHER and INDEX_SELECT (FAM 6) walk the output too: input a's strides cover the dims
// that are not the indexed axis, b's the index tensor, and the index value times the axis
// stride (P_I) is added to a's offset.
// Variants (meson.build): FAM (1 unary, 2 binary, 3 compare, 4 where, 5 cast, 6 gather), TA/TB the
// input element types, TO the output's, and the compute kind of input a: KF (f32), KI (i32),
// KU (u8), KB (bool), KL (i64: comparisons only). The opcode (engine/optable.h) is the specialization constant OP, so a
// pipeline per (variant, op) is created once and each keeps only its own case.
//
// Semantics are the CPU backend's: integer ops wrap and never trap (DIV by 0 gives 0, MIN /
// -1 gives MIN), MAXIMUM/MINIMUM propagate NaN, RELU keeps NaN, bool compares raw bytes.
// f32 DIV, SQRT, RSQRT, RECIPROCAL are computed in double and rounded once: a correctly
// rounded f64 result of f32 operands rounds to the correctly rounded f32 one (the double
// format has more than 2 * 24 + 2 bits), whatever the device's own f32 division precision.
// `precise` keeps every f32 expression free of contraction into fused multiply-adds.
#include "common.glsl"
#include "dmath.glsl"

layout(std430, binding = 1) buffer O { TO o[]; };
layout(std430, binding = 2) readonly buffer A { TA a[]; };
#if FAM == 2 || FAM == 3 || FAM == 4 || FAM == 6
layout(std430, binding = 3) readonly buffer B { TB b[]; };
#endif
#if FAM == 4
layout(std430, binding = 4) readonly buffer C { TB c[]; };
#endif

#if defined(KF)
float fdiv(float x, float y) { return float(double(x) / double(y)); }
#endif

#if FAM == 1
#if defined(KF)
TO unary(float x)
{
    precise float r;
    float p0 = float(pf(0)), p1 = float(pf(1)), p2 = float(pf(2));
    double d = double(x);
    switch (OP) {
    case 10: r = -x; break;                                      // NEG
    case 11: r = abs(x); break;                                  // ABS
    case 12: r = float(d_exp(d)); break;                         // EXP
    case 13: r = float(d_log(d)); break;                         // LOG
    case 14: r = float(sqrt(d)); break;                          // SQRT
    case 15: r = fdiv(1.0, float(sqrt(d))); break;               // RSQRT: two roundings
    case 16: {                                                   // TANH
        double e = d_expm1(-2.0LF * abs(d));
        double t = -e / (e + 2.0LF);
        r = x != x ? x : float(d < 0.0LF ? -t : t);
        if (x == 0.0) r = x;
        break;
    }
    case 17: r = float(1.0LF / (1.0LF + d_exp(-d))); break;      // SIGMOID
    case 18: r = x < 0.0 ? 0.0 : x; break;                       // RELU
    case 19: r = float(d / (1.0LF + d_exp(-d))); break;          // SILU
    case 114: { precise float m = x * p0; r = x > 0.0 ? x : m; break; } // LEAKY_RELU
    case 115: {                                                  // ELU
        precise float m = p0 * float(d_expm1(d));
        r = x > 0.0 ? x : m;
        break;
    }
    case 116: r = float(d_log1p(d)); break;                      // LOG1P
    case 117: r = float(d_expm1(d)); break;                      // EXPM1
    case 118: r = float(d_log(d) / 0.69314718055994530942LF); break; // LOG2
    case 119: r = float(d_log(d) / 2.30258509299404568402LF); break; // LOG10
    case 120: r = floor(x); break;                               // FLOOR
    case 121: r = ceil(x); break;                                // CEIL
    case 122: r = roundEven(x); break;                           // ROUND (rint)
    case 123: r = trunc(x); break;                               // TRUNC
    case 124: r = fdiv(1.0, x); break;                           // RECIPROCAL
    case 125: r = x != x ? p0 : (isinf(x) ? (x > 0.0 ? p1 : p2) : x); break; // NAN_TO_NUM
    case 126: r = x > 0.0 ? 1.0 : (x < 0.0 ? -1.0 : (x == 0.0 ? 0.0 : x)); break; // SIGN (+0 for +-0)
    default: r = x; break;
    }
    return r;
}
#elif defined(KI)
TO unary(int x)
{
    switch (OP) {
    case 10: return -x;
    case 11: return x < 0 ? -x : x;
    case 18: return x < 0 ? 0 : x;
    case 126: return x > 0 ? 1 : (x < 0 ? -1 : 0);
    case 128: return ~x;
    default: return x;
    }
}
#elif defined(KU)
TO unary(uint x)
{
    switch (OP) {
    case 10: return TO((0u - x) & 255u);
    case 126: return TO(x > 0u ? 1u : 0u);
    case 128: return TO((~x) & 255u);
    default: return TO(x);   // ABS, RELU of an unsigned value
    }
}
#endif
#endif

#if FAM == 2
#if defined(KF)
TO binary(float x, float y)
{
    precise float r;
    switch (OP) {
    case 30: r = x + y; break;
    case 31: r = x - y; break;
    case 32: r = x * y; break;
    case 33: r = fdiv(x, y); break;
    case 35: r = (x > y || x != x) ? x : y; break; // MAXIMUM (as the CPU: ties give y)
    case 36: r = (x < y || x != x) ? x : y; break; // MINIMUM
    default: r = x; break;
    }
    return r;
}
#elif defined(KI)
TO binary(int x, int y)
{
    switch (OP) {
    case 30: return x + y;
    case 31: return x - y;
    case 32: return int(uint(x) * uint(y));
    case 33: return y == 0 ? 0 : (y == -1 ? -x : x / y);
    case 35: return max(x, y);
    case 36: return min(x, y);
    case 146: return x & y;
    case 147: return x | y;
    case 148: return x ^ y;
    default: return x;
    }
}
#elif defined(KU)
TO binary(uint x, uint y)
{
    uint r;
    switch (OP) {
    case 30: r = x + y; break;
    case 31: r = x - y; break;
    case 32: r = x * y; break;
    case 33: r = y == 0u ? 0u : x / y; break;
    case 35: r = max(x, y); break;
    case 36: r = min(x, y); break;
    case 146: r = x & y; break;
    case 147: r = x | y; break;
    case 148: r = x ^ y; break;
    default: r = x; break;
    }
    return TO(r & 255u);
}
#endif
#endif

#if FAM == 3
#if defined(KF)
#define CT float
#define NZ(v) ((v) != 0.0)
#elif defined(KI)
#define CT int
#define NZ(v) ((v) != 0)
#elif defined(KL)
#define CT int64_t
#define NZ(v) ((v) != 0l)
#else
#define CT uint
#define NZ(v) ((v) != 0u)
#endif
TO compare(CT x, CT y)
{
    bool r;
    switch (OP) {
    case 40: r = x == y; break;
    case 41: r = x != y; break;
    case 42: r = x < y; break;
    case 43: r = x <= y; break;
    case 44: r = x > y; break;
    case 45: r = x >= y; break;
    case 155: r = NZ(x) && NZ(y); break;
    case 156: r = NZ(x) || NZ(y); break;
    case 157: r = NZ(x) != NZ(y); break;
    default: r = false; break;
    }
    return TO(r ? 1u : 0u);
}
#endif

#if FAM == 5
// CAST by the CPU's rules (backends/cpu/cpu_internal.h): float -> integer NaN 0, truncate,
// saturate; integer -> integer wraps; -> bool x != 0; bool -> 0 or 1. CV names the rule.
TO convert(TA x)
{
#if defined(CV_F2I)
    double v = double(x);
    if (v != v) return TO(0);
    if (v <= -2147483648.0LF) return TO(-2147483647 - 1);
    if (v >= 2147483647.0LF) return TO(2147483647);
    return TO(int(v));
#elif defined(CV_F2U8)
    double v = double(x);
    if (v != v || v <= 0.0LF) return TO(0u);
    if (v >= 255.0LF) return TO(255u);
    return TO(uint(v));
#elif defined(CV_F2I64)
    double v = double(x);
    if (v != v) return TO(0l);
    if (v <= -9223372036854775808.0LF) return TO(-9223372036854775807l - 1l);
    if (v >= 9223372036854775808.0LF) return TO(9223372036854775807l);
    return TO(int64_t(v));
#elif defined(CV_2B)
    return TO(x != TA(0) ? 1u : 0u);
#elif defined(CV_B2)
    return TO(uint(x) != 0u ? 1 : 0);
#elif defined(CV_WRAP8)
    return TO(uint(x) & 255u);
#elif defined(CV_I2I64)
    return TO(int(x));
#elif defined(CV_I642I)
    return TO(int(x & 0xffffffffl));
#else
    return TO(x);
#endif
}
#endif

void main()
{
    const uint n = P[P_N], rank = P[P_RANK], step = gstride();
    for (uint i = gl_GlobalInvocationID.x; i < n;) {
        uint q = i, oo = P[P_BASE], oa = P[P_BASE + 1], ob = P[P_BASE + 2], oc = P[P_BASE + 3];
        for (int d = int(rank) - 1; d >= 0; d--) {
            uint dim = P[P_DIMS + d], nq = q / dim, r = q - nq * dim;
            q = nq;
            oo += r * P[P_STR_O + d];
            oa += r * P[P_STR_A + d];
            ob += r * P[P_STR_B + d];
            oc += r * P[P_STR_C + d];
        }
#if FAM == 1
#if defined(KF)
        o[oo] = unary(float(a[oa]));
#elif defined(KI)
        o[oo] = unary(int(a[oa]));
#else
        o[oo] = unary(uint(a[oa]));
#endif
#elif FAM == 2
#if defined(KF)
        o[oo] = binary(float(a[oa]), float(b[ob]));
#elif defined(KI)
        o[oo] = binary(int(a[oa]), int(b[ob]));
#else
        o[oo] = binary(uint(a[oa]), uint(b[ob]));
#endif
#elif FAM == 3
        o[oo] = compare(CT(a[oa]), CT(b[ob]));
#elif FAM == 4
        o[oo] = uint(a[oa]) != 0u ? b[ob] : c[oc];
#elif FAM == 5
        o[oo] = convert(a[oa]);
#elif FAM == 6
        // GATHER / INDEX_SELECT: the host checked every index against [0, dim) first
        o[oo] = a[oa + uint(b[ob]) * P[P_I]];
#endif
        if (n - i <= step) break;
        i += step;
    }
}

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
// Variants (meson.build): FAM (1 unary, 2 binary, 3 compare, 4 where, 5 cast, 6 gather,
// 7 dropout, 8 bernoulli), TA/TB the
// input element types, TO the output's, and the compute kind of input a: KF (f32), KD (f64),
// KI (i32; i8 and i16 too, with NBITS), KL (i64), KU (u8), KB (bool). The opcode (engine/optable.h) is the
// specialization constant OP, so a pipeline per (variant, op) is created once and each keeps
// only its own case.
//
// Semantics are the CPU backend's: integer ops wrap and never trap (DIV by 0 gives 0, MIN /
// -1 gives MIN), MAXIMUM/MINIMUM propagate NaN, RELU keeps NaN, bool compares raw bytes.
// The f32 transcendental functions (dmath.glsl) are evaluated in double and rounded once;
// GELU, SOFTPLUS, FLOOR_DIVIDE and REMAINDER repeat the CPU's f32 steps and roundings.
// f32 DIV, SQRT, RSQRT, RECIPROCAL are computed in double and rounded once: a correctly
// rounded f64 result of f32 operands rounds to the correctly rounded f32 one (the double
// format has more than 2 * 24 + 2 bits), whatever the device's own f32 division precision.
// `precise` keeps every f32 expression free of contraction into fused multiply-adds.
#include "common.glsl"
#include "dmath.glsl"
#include "half.glsl"
#include "philox.glsl"

layout(std430, binding = 1) buffer O { TO o[]; };
layout(std430, binding = 2) readonly buffer A { TA a[]; };
#if FAM == 2 || FAM == 3 || FAM == 4 || FAM == 6
layout(std430, binding = 3) readonly buffer B { TB b[]; };
#endif
#if FAM == 4
layout(std430, binding = 4) readonly buffer C { TB c[]; };
#endif

// The float kinds: KF (f32) and KD (f64) compute in their own type FT; an f32 op whose
// element function is transcendental evaluates it in double (dmath.glsl) and rounds once.
#if defined(KF) || defined(KD)
#define KFLOAT
#if defined(KD)
#define FT double
bool sbit(double x) { return (unpackDouble2x32(x).y >> 31) != 0u; }
double fcopysign(double x, double y)
{
    uvec2 a = unpackDouble2x32(x), b = unpackDouble2x32(y);
    return packDouble2x32(uvec2(a.x, (a.y & 0x7fffffffu) | (b.y & 0x80000000u)));
}
#else
#define FT float
bool sbit(float x) { return (floatBitsToUint(x) >> 31) != 0u; }
float fcopysign(float x, float y)
{
    return uintBitsToFloat((floatBitsToUint(x) & 0x7fffffffu) | (floatBitsToUint(y) & 0x80000000u));
}
#endif
FT fdiv(FT x, FT y) { return FT(double(x) / double(y)); }
#endif

#if FAM == 1
#if defined(KFLOAT)
FT unary(FT x)
{
    precise FT r;
    FT p0 = FT(pf(0)), p1 = FT(pf(1)), p2 = FT(pf(2));
    double d = double(x);
    switch (OP) {
    case 10: r = -x; break;                                      // NEG
    case 11: r = abs(x); break;                                  // ABS
    case 12: r = FT(d_exp(d)); break;                            // EXP
    case 13: r = FT(d_log(d)); break;                            // LOG
    case 14: r = FT(sqrt(d)); break;                             // SQRT
    case 15: r = fdiv(FT(1.0), FT(sqrt(d))); break;              // RSQRT: two roundings
    case 16: {                                                   // TANH
        double e = d_expm1(-2.0LF * abs(d));
        double t = -e / (e + 2.0LF);
        r = x != x ? x : FT(d < 0.0LF ? -t : t);
        if (x == FT(0)) r = x;
        break;
    }
    case 17: r = FT(1.0LF / (1.0LF + d_exp(-d))); break;         // SIGMOID
    case 18: r = x < FT(0) ? FT(0) : x; break;                   // RELU
    case 19: r = FT(d / (1.0LF + d_exp(-d))); break;             // SILU
#if defined(KF)
    case 100: r = FT(d_trig(d, 0)); break;                           // SIN
    case 101: r = FT(d_trig(d, 1)); break;                           // COS
    case 102: r = FT(d_trig(d, 2)); break;                           // TAN
    case 103: r = FT(d_asin(d)); break;                          // ASIN
    case 104: r = FT(d_acos(d)); break;                          // ACOS
    case 105: r = FT(d_atan(d)); break;                          // ATAN
    case 111: r = FT(d_erf(d)); break;                           // ERF
    case 112:                                                    // GELU, the CPU's roundings
        if (P[P_I] != 0u) {
            precise FT u = FT(0.044715) * x * x * x;
            u = FT(-1.5957691216057308) * (x + u);
            precise FT den = FT(1) + FT(d_exp(double(u)));
            r = fdiv(x, den);
        } else {
            precise FT z = x * FT(-0.70710678118654752);
            precise FT h = FT(0.5) * x;
            r = FT(double(h) * d_erfc(double(z)));
        }
        break;
#endif
    case 106: r = FT(d_sinh(d)); break;                          // SINH
    case 107: r = FT(d_cosh(d)); break;                          // COSH
    case 108: r = FT(d_asinh(d)); break;                         // ASINH
    case 109: r = FT(d_acosh(d)); break;                         // ACOSH
    case 110: r = FT(d_atanh(d)); break;                         // ATANH
    case 113: {                                                  // SOFTPLUS, the CPU's roundings
        precise FT t = x * p0;
        if (t > p1) {
            r = x;
        } else {
            FT e = FT(d_exp(double(t)));
            FT l = FT(d_log1p(double(e)));
            r = fdiv(l, p0);
        }
        break;
    }
    case 114: { precise FT m = x * p0; r = x > FT(0) ? x : m; break; } // LEAKY_RELU
    case 115: {                                                  // ELU
        precise FT m = p0 * FT(d_expm1(d));
        r = x > FT(0) ? x : m;
        break;
    }
    case 116: r = FT(d_log1p(d)); break;                         // LOG1P
    case 117: r = FT(d_expm1(d)); break;                         // EXPM1
    case 118: r = FT(d_log(d) / 0.69314718055994530942LF); break; // LOG2
    case 119: r = FT(d_log(d) / 2.30258509299404568402LF); break; // LOG10
    case 120: r = floor(x); break;                               // FLOOR
    case 121: r = ceil(x); break;                                // CEIL
    case 122: r = roundEven(x); break;                           // ROUND (rint)
    case 123: r = trunc(x); break;                               // TRUNC
    case 124: r = fdiv(FT(1), x); break;                         // RECIPROCAL
    case 125: r = x != x ? p0 : (isinf(x) ? (x > FT(0) ? p1 : p2) : x); break; // NAN_TO_NUM
    case 126: r = x > FT(0) ? FT(1) : (x < FT(0) ? FT(-1) : (x == FT(0) ? FT(0) : x)); break; // SIGN (+0 for +-0)
    case 127: r = x < p0 ? p0 : (x > p1 ? p1 : x); break;        // CLAMP (NaN stays)
    default: r = x; break;
    }
    return r;
}
#elif defined(KI) || defined(KL)
#if defined(KI)
#define IT int
#define UT uint
#else
#define IT int64_t
#define UT uint64_t
#endif
// CLAMP's bounds come converted by the cast rules (vk_ops.c): words P_I + 1.. (lo, hi)
IT bound(int k)
{
#if defined(KI)
    return int(P[P_I + 1 + 2 * k]);
#else
    return int64_t(packUint2x32(uvec2(P[P_I + 1 + 2 * k], P[P_I + 2 + 2 * k])));
#endif
}
TO unary(IT x)
{
    switch (OP) {
    case 10: return TO(UT(0) - UT(x));
    case 11: return x < IT(0) ? TO(UT(0) - UT(x)) : TO(x);
    case 18: return x < IT(0) ? TO(0) : TO(x);
    case 126: return TO(x > IT(0) ? 1 : (x < IT(0) ? -1 : 0));
    case 127: { IT lo = bound(0), hi = bound(1); return TO(x < lo ? lo : (x > hi ? hi : x)); }
    case 128: return TO(~x);
    default: return TO(x);
    }
}
#elif defined(KU)
TO unary(uint x)
{
    switch (OP) {
    case 10: return TO((0u - x) & 255u);
    case 126: return TO(x > 0u ? 1u : 0u);
    case 127: { uint lo = P[P_I + 1], hi = P[P_I + 3]; return TO(x < lo ? lo : (x > hi ? hi : x)); }
#if defined(BOOLV)
    case 128: return TO(x == 0u ? 1u : 0u);  // BITWISE_NOT of a bool: logical not of the byte
#else
    case 128: return TO((~x) & 255u);
#endif
    default: return TO(x);   // ABS, RELU of an unsigned value
    }
}
#endif
#endif

#if FAM == 2
#if defined(KFLOAT)
// Python's floor division and remainder as the CPU computes them (numpy's npy_divmod), step
// by step in FT from the exact fmod.
FT floordiv(FT a, FT b)
{
    if (b == FT(0)) return fdiv(a, b);
    precise FT mod = FT(d_fmod(double(a), double(b)));
    precise FT div = fdiv(a - mod, b);
    if (mod != FT(0) && ((b < FT(0)) != (mod < FT(0)))) div = div - FT(1);
    if (div == FT(0)) return fcopysign(FT(0), fdiv(a, b));
    precise FT fl = floor(div);
    if (div - fl > FT(0.5)) fl = fl + FT(1);
    return fl;
}
FT pyrem(FT a, FT b)
{
    precise FT mod = FT(d_fmod(double(a), double(b)));
    if (b == FT(0)) return mod;
    if (mod == FT(0)) return fcopysign(FT(0), b);
    precise FT s = mod + b;
    return (b < FT(0)) != (mod < FT(0)) ? s : mod;
}
FT binary(FT x, FT y)
{
    precise FT r;
    switch (OP) {
    case 30: r = x + y; break;
    case 31: r = x - y; break;
    case 32: r = x * y; break;
    case 33: r = fdiv(x, y); break;
    case 35: r = (x > y || x != x) ? x : y; break; // MAXIMUM (as the CPU: ties give y)
    case 36: r = (x < y || x != x) ? x : y; break; // MINIMUM
    case 34: r = FT(d_pow(double(x), double(y))); break;     // POW
#if defined(KF)
    case 140: r = FT(d_atan2(double(x), double(y))); break;  // ATAN2
    case 141: {                                              // HYPOT (inf beats NaN, as C)
        double a = double(x), b = double(y);
        r = isinf(a) || isinf(b) ? FT(1.0LF / 0.0LF) : FT(sqrt(a * a + b * b));
        break;
    }
#endif
    case 142: r = fcopysign(x, y); break;                    // COPYSIGN
    case 143: r = FT(d_fmod(double(x), double(y))); break;   // FMOD (exact)
    case 144: r = pyrem(x, y); break;                        // REMAINDER
    case 145: r = floordiv(x, y); break;                     // FLOOR_DIVIDE
    default: r = x; break;
    }
    return r;
}
#elif defined(KI) || defined(KL)
#if defined(KI)
#define IT int
#define UT uint
#define IMIN (-2147483647 - 1)
#if defined(NBITS) // i8 / i16 computed in i32 and wrapped to the width on store
#define IBITS NBITS
#else
#define IBITS 32
#endif
#else
#define IT int64_t
#define UT uint64_t
#define IMIN (-9223372036854775807l - 1l)
#define IBITS 64
#endif
// Never undefined, as the CPU (backends/cpu/cpu_elementwise.c): x / 0 = x // 0 = 0,
// fmod(x, 0) = x, MIN / -1 = MIN, pow by squaring (wraps; negative powers truncate),
// shifts by counts outside [0, bits) shift everything out (arithmetic right shifts).
IT ifmod(IT a, IT b)
{
    if (b == IT(0)) return a;
    if (b == IT(-1)) return IT(0);
    return a - (a / b) * b;
}
IT ipow(IT a, IT b)
{
    if (b < IT(0)) return a == IT(1) ? IT(1) : (a == IT(-1) ? ((b & IT(1)) != IT(0) ? IT(-1) : IT(1)) : IT(0));
    UT base = UT(a), e = UT(b), r = UT(1);
    while (e != UT(0)) {
        if ((e & UT(1)) != UT(0)) r *= base;
        base *= base;
        e >>= 1;
    }
    return IT(r);
}
TO binary(IT x, IT y)
{
    switch (OP) {
    case 30: return TO(UT(x) + UT(y));
    case 31: return TO(UT(x) - UT(y));
    case 32: return TO(UT(x) * UT(y));
    case 33: return y == IT(0) ? TO(0) : (y == IT(-1) ? TO(UT(0) - UT(x)) : TO(x / y));
    case 34: return TO(ipow(x, y));
    case 35: return TO(max(x, y));
    case 36: return TO(min(x, y));
    case 143: return TO(ifmod(x, y));
    case 144: {
        IT r = ifmod(x, y);
        return TO(y != IT(0) && r != IT(0) && ((r < IT(0)) != (y < IT(0))) ? r + y : r);
    }
    case 145: {
        if (y == IT(0)) return TO(0);
        if (x == IT(IMIN) && y == IT(-1)) return TO(x);
        IT q = x / y, r = x - q * y;
        return TO(r != IT(0) && ((r < IT(0)) != (y < IT(0))) ? q - IT(1) : q);
    }
    case 146: return TO(x & y);
    case 147: return TO(x | y);
    case 148: return TO(x ^ y);
    case 149: return y < IT(0) || y >= IT(IBITS) ? TO(0) : TO(UT(x) << UT(y));
    case 150: return y < IT(0) || y >= IT(IBITS) ? TO(x < IT(0) ? IT(-1) : IT(0)) : TO(x >> y);
    default: return TO(x);
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
    case 34: {                                  // POW by squaring, mod 256
        uint base = x, e = y;
        r = 1u;
        while (e != 0u) {
            if ((e & 1u) != 0u) r = (r * base) & 255u;
            base = (base * base) & 255u;
            e >>= 1;
        }
        break;
    }
    case 35: r = max(x, y); break;
    case 36: r = min(x, y); break;
    case 143: case 144: r = y == 0u ? x : x % y; break;   // FMOD, REMAINDER
    case 145: r = y == 0u ? 0u : x / y; break;            // FLOOR_DIVIDE
    case 146: r = x & y; break;
    case 147: r = x | y; break;
    case 148: r = x ^ y; break;
    case 149: r = y >= 8u ? 0u : x << y; break;
    case 150: r = y >= 8u ? 0u : x >> y; break;
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
#elif defined(KD)
#define CT double
#define NZ(v) ((v) != 0.0LF)
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
TO convert(TA raw)
{
#if defined(HA16) || defined(HABF)
    float x = LDA(raw);
#else
    TA x = raw;
#endif
#if defined(HO16) || defined(HOBF)
#if defined(CV_B2)
    return STF(uint(x) != 0u ? 1.0 : 0.0);
#elif defined(CV_I64H)
    return STF(h_odd_f32(h_i64_odd(int64_t(x))));
#else
    return STD(double(x));
#endif
#elif defined(CV_F2I)
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
#elif defined(CV_F2I8) || defined(CV_F2I16)
    double v = double(x);
#if defined(CV_F2I8)
    const double lo = -128.0LF, hi = 127.0LF;
#else
    const double lo = -32768.0LF, hi = 32767.0LF;
#endif
    if (v != v) return TO(0);
    if (v <= lo) return TO(int(lo));
    if (v >= hi) return TO(int(hi));
    return TO(int(v));
#elif defined(CV_F2I64)
    double v = double(x);
    if (v != v) return TO(0l);
    if (v <= -9223372036854775808.0LF) return TO(-9223372036854775807l - 1l);
    if (v >= 9223372036854775808.0LF) return TO(9223372036854775807l);
    return TO(int64_t(v));
#elif defined(CV_2B)
    return TO(double(x) != 0.0LF ? 1u : 0u);
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

// Element i of the walk, at element offsets oo (output), oa, ob, oc (inputs).
void element(uint i, uint oo, uint oa, uint ob, uint oc)
{
#if FAM == 1
#if defined(KFLOAT)
    o[oo] = STF(unary(FT(LDA(a[oa]))));
#elif defined(KI) || defined(KL)
    o[oo] = unary(IT(a[oa]));
#else
    o[oo] = unary(uint(a[oa]));
#endif
#elif FAM == 2
#if defined(KFLOAT)
    o[oo] = STF(binary(FT(LDA(a[oa])), FT(LDA(b[ob]))));
#elif defined(KI) || defined(KL)
    o[oo] = binary(IT(a[oa]), IT(b[ob]));
#else
    o[oo] = binary(uint(a[oa]), uint(b[ob]));
#endif
#elif FAM == 3
    o[oo] = compare(CT(LDA(a[oa])), CT(LDA(b[ob])));
#elif FAM == 4
    o[oo] = uint(a[oa]) != 0u ? b[ob] : c[oc];
#elif FAM == 5
    o[oo] = convert(a[oa]);
#elif FAM == 6
    // GATHER / INDEX_SELECT: the host checked every index against [0, dim) first
    o[oo] = a[oa + uint(b[ob]) * P[P_I]];
#elif FAM == 7
    // DROPOUT (contiguous, i the element): keep x when the 24-bit uniform of word i % 4 of
    // Philox block i / 4 is >= p, times 1/(1-p) rounded to FT (pf(1), from the host) —
    // backends/cpu/cpu_nn.c's mapping, one IEEE multiply: the CPU's bits
    uvec4 w = philox(P[P_SEED], P[P_SEED + 1], i / 4u, 0u);
    bool keep = double(w[i % 4u] >> 8) * 5.9604644775390625e-08LF >= pf(0);
    precise FT r = FT(LDA(a[oa])) * (keep ? FT(pf(1)) : FT(0));
    o[oo] = STF(r);
#elif FAM == 8
    // BERNOULLI: 1 where word i % 4 of block i / 4, times 2^-32, is below p_i, else 0
    uvec4 w = philox(P[P_SEED], P[P_SEED + 1], i / 4u, 0u);
    bool one = double(w[i % 4u]) * 2.3283064365386963e-10LF < double(LDA(a[oa]));
    o[oo] = STF(FT(one ? 1.0 : 0.0));
#endif
}

void main()
{
    const uint n = P[P_N], rank = P[P_RANK], step = gstride();
    if (rank <= 1u) {
        // One run (td__collapse_dims merged the dims: same-shaped contiguous operands, or a
        // single strided run): offsets are base + i * stride, the parameters read once, no
        // division per element. The same element(), so the same bits as the general walk.
        const uint so = P[P_STR_O], sa = P[P_STR_A], sb = P[P_STR_B], sc = P[P_STR_C];
        const uint bo = P[P_BASE], ba = P[P_BASE + 1] + P[P_SKEW_A], bb = P[P_BASE + 2],
                   bc = P[P_BASE + 3];
#if FAM == 2 || FAM == 3 || FAM == 6
        const bool dense = so == 1u && sa == 1u && sb == 1u;
#elif FAM == 4
        const bool dense = so == 1u && sa == 1u && sb == 1u && sc == 1u;
#else
        const bool dense = so == 1u && sa == 1u;
#endif
        if (dense) { // every operand it reads contiguous: consecutive elements, no stride
            for (uint i = gl_GlobalInvocationID.x; i < n;) {
                element(i, bo + i, ba + i, bb + i, bc + i);
                if (n - i <= step) break;
                i += step;
            }
            return;
        }
        for (uint i = gl_GlobalInvocationID.x; i < n;) {
            element(i, bo + i * so, ba + i * sa, bb + i * sb, bc + i * sc);
            if (n - i <= step) break;
            i += step;
        }
        return;
    }
    for (uint i = gl_GlobalInvocationID.x; i < n;) {
        uint q = i, oo = P[P_BASE], oa = P[P_BASE + 1] + P[P_SKEW_A], ob = P[P_BASE + 2], oc = P[P_BASE + 3];
        for (int d = int(rank) - 1; d >= 0; d--) {
            uint dim = P[P_DIMS + d], nq = q / dim, r = q - nq * dim;
            q = nq;
            oo += r * P[P_STR_O + d];
            oa += r * P[P_STR_A + d];
            ob += r * P[P_STR_B + d];
            oc += r * P[P_STR_C + d];
        }
        element(i, oo, oa, ob, oc);
        if (n - i <= step) break;
        i += step;
    }
}

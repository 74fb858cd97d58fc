#!/usr/bin/python3
"""Expected values of the random ops of issue 13 (BERNOULLI BERNOULLI_SCALAR RANDINT RANDPERM
TRUNC_NORMAL) for small shapes, written to random_reference.h for random_ops.c, which
compares the CPU backend's results with them bit for bit.

Independent of the code under test: Philox4x32-10 is reimplemented here from Salmon, Moraes,
Dror and Shaw, "Parallel random numbers: as easy as 1, 2, 3" (SC'11): the round function
with multipliers 0xD2511F53, 0xCD9E8D57 and Weyl key increments 0x9E3779B9, 0xBB67AE85,
checked first against the paper's (Random123's) known-answer vectors. The (seed, i) ->
value mappings are those engine/philox.h and engine/normcdf.h document, in Python's
integers (exact) and floats (IEEE double, one rounding per operation, like the C code).
The normal CDF and quantile of the truncated normal are checked here against mpmath (50
digits) before any value is written: relative error below 1e-13.

Run: /usr/bin/python3 tests/unit/backends/gen_random_reference.py > tests/unit/backends/random_reference.h
"""
import math
import struct
import sys

import mpmath

M32 = 0xFFFFFFFF


def philox4x32_10(ctr, key):
    c0, c1, c2, c3 = ctr
    k0, k1 = key
    for r in range(10):
        if r:
            k0 = (k0 + 0x9E3779B9) & M32
            k1 = (k1 + 0xBB67AE85) & M32
        p0 = 0xD2511F53 * c0
        p1 = 0xCD9E8D57 * c2
        c0, c1, c2, c3 = ((p1 >> 32) ^ c1 ^ k0, p1 & M32, (p0 >> 32) ^ c3 ^ k1, p0 & M32)
    return [c0, c1, c2, c3]


KAT = [((0, 0, 0, 0), (0, 0), [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]),
       ((M32,) * 4, (M32, M32), [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd]),
       ((0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344), (0xa4093822, 0x299f31d0),
        [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1])]
for ctr, key, want in KAT:
    assert philox4x32_10(ctr, key) == want


def block(seed, b):
    return philox4x32_10((b & M32, b >> 32, 0, 0), (seed & M32, seed >> 32))


def draw32(seed, i):
    return block(seed, i // 4)[i % 4]


def draw64(seed, i):
    w = block(seed, i // 2)
    j = (i % 2) * 2
    return (w[j + 1] << 32) | w[j]


# ---- IEEE basic-operation math (engine/normcdf.h) ----
def bits(x):
    return struct.unpack('<Q', struct.pack('<d', x))[0]


def from_bits(b):
    return struct.unpack('<d', struct.pack('<Q', b))[0]


def pow2(k):
    return from_bits((k + 1023) << 52)


LN2_HI = float.fromhex('0x1.62e42p-1')
LN2_LO = float.fromhex('0x1.fdf473de6af28p-22')
INV_LN2 = float.fromhex('0x1.71547652b82fep+0')
SQRT2 = float.fromhex('0x1.6a09e667f3bcdp+0')
INV_SQRT_2PI = float.fromhex('0x1.9884533d43651p-2')
mpmath.mp.dps = 50
# the constants are what they claim
assert abs(mpmath.mpf(LN2_HI) + mpmath.mpf(LN2_LO) - mpmath.log(2)) < mpmath.mpf(2) ** -70
assert LN2_HI == float(mpmath.floor(mpmath.log(2) * 2**20) / 2**20)
assert INV_LN2 == float(1 / mpmath.log(2)) and SQRT2 == float(mpmath.sqrt(2))
assert INV_SQRT_2PI == float(1 / mpmath.sqrt(2 * mpmath.pi))


def nd_exp(x):
    if not x > -745.5:
        return 0.0
    k = float(math.floor(x * INV_LN2 + 0.5))
    r = (x - k * LN2_HI) - k * LN2_LO
    p = 1.0
    for n in range(13, 0, -1):
        p = 1.0 + p * r / float(n)
    ki = int(k)
    if ki >= -1022:
        return p * pow2(ki)
    return (p * pow2(ki + 54)) * pow2(-54)


def nd_log(x):
    e = 0
    if x < 2.0**-1022:
        x = x * 2.0**54
        e = -54
    b = bits(x)
    e += (b >> 52) - 1023
    m = from_bits((b & ((1 << 52) - 1)) | (1023 << 52))
    if m > SQRT2:
        m = m * 0.5
        e += 1
    f = m - 1.0
    s = f / (2.0 + f)
    z = s * s
    q = 1.0 / 23.0
    for k in range(10, -1, -1):
        q = 1.0 / float(2 * k + 1) + z * q
    return float(e) * LN2_HI + (2.0 * s * q + float(e) * LN2_LO)


def nd_pdf(t):
    return nd_exp(-0.5 * (t * t)) * INV_SQRT_2PI


def nd_cdf_lower(t):
    if not t < 40.0:
        return 0.0
    if t < 3.0:
        z = t * t
        term = s = t
        for n in range(3, 400, 2):
            term = term * z / float(n)
            s2 = s + term
            if s2 == s:
                break
            s = s2
        return 0.5 - nd_pdf(t) * s
    f = c = t
    d = 0.0
    for k in range(1, 501):
        d = 1.0 / (t + float(k) * d)
        c = t + float(k) / c
        delta = c * d
        f = f * delta
        if abs(delta - 1.0) < 2.0**-53:
            break
    return nd_pdf(t) / f


def nd_cdf(x):
    return nd_cdf_lower(-x) if x <= 0.0 else 1.0 - nd_cdf_lower(x)


def nd_quantile_lower(u):
    if not u > 0.0:
        return -math.inf
    t = math.sqrt(-2.0 * nd_log(u))
    num = 2.515517 + t * (0.802853 + t * 0.010328)
    den = 1.0 + t * (1.432788 + t * (0.189269 + t * 0.001308))
    z = num / den - t
    for _ in range(2):
        p = nd_pdf(z)
        if not p > 0.0:
            break
        h = (nd_cdf(z) - u) / p
        z = z - h / (1.0 + 0.5 * z * h)
    return z


def nd_quantile(u):
    return nd_quantile_lower(u) if u <= 0.5 else -nd_quantile_lower(1.0 - u)


def check_accuracy():
    for x in [k / 8 for k in range(-300, 1)]:
        got, ref = nd_cdf(x), mpmath.ncdf(x)
        assert abs(got - ref) <= 2e-13 * ref, (x, got, ref)
    us = [10.0**-k for k in range(1, 300, 3)] + [k / 1000 for k in range(1, 1000)]
    for u in us:
        z = nd_quantile(u)
        ref = mpmath.findroot(lambda v: mpmath.ncdf(v) - u, z)
        assert abs(z - ref) <= 1e-13 * abs(ref) + 1e-16, (u, z, ref)
    for x in [-700.0, -1.0, -1e-3, 0.0, -745.0]:
        assert abs(nd_exp(x) - mpmath.exp(x)) <= 4e-16 * mpmath.exp(x) + 5e-324
    for x in [1e-310, 1e-300, 0.3, 0.5, 0.7071, 0.99, 1.0]:
        assert abs(nd_log(x) - mpmath.log(x)) <= 4e-16 * abs(mpmath.log(x)) + 1e-300


check_accuracy()


# ---- the ops ----
def bernoulli(seed, n, p_of):
    return [1 if draw32(seed, i) * 2.0**-32 < p_of(i) else 0 for i in range(n)]


def randint(seed, n, low, high):
    r = (high - low) % 2**64
    out = []
    for i in range(n):
        v = (low + ((draw64(seed, i) * r) >> 64))
        assert low <= v < high
        out.append(v)
    return out


def randperm(seed, n):
    return sorted(range(n), key=lambda i: (draw64(seed, i), i))


def trunc_normal(seed, n, mean, sd, a, b):
    alpha, beta = (a - mean) / sd, (b - mean) / sd
    flip = alpha + beta > 0.0
    lo, hi = (-beta, -alpha) if flip else (alpha, beta)
    pl = nd_cdf(lo)
    dp = nd_cdf(hi) - pl
    out = []
    for i in range(n):
        u = pl + dp * (float(draw64(seed, i) >> 11) * 2.0**-53)
        z = min(max(nd_quantile(u), lo), hi)
        if flip:
            z = -z
        v = min(max(mean + sd * z, a), b)
        out.append(v)
    return out


def f32(v):
    return struct.unpack('<f', struct.pack('<f', v))[0]


def hexd(v):
    return v.hex() if math.isfinite(v) else ('INFINITY' if v > 0 else '-INFINITY')


def emit_list(name, ctype, vals, fmt):
    print(f"static const {ctype} {name}[{len(vals)}] = {{")
    for k in range(0, len(vals), 6):
        print("    " + ", ".join(fmt(v) for v in vals[k:k + 6]) + ",")
    print("};")


P_F64 = [0.0, 1.0, 0.5, 0.25, 0.75, 1e-9, 1 - 1e-9, 0.1, 0.9, 0.3, 0.7, 0.05, 0.95, 0.2, 0.8,
         0.6, 0.4, 0.33]


def main():
    print("/* Generated by tests/unit/backends/gen_random_reference.py (Philox4x32-10 and the")
    print(" * mappings of engine/philox.h reimplemented in Python); do not edit. */")
    print("#ifndef TD_TEST_RANDOM_REFERENCE_H\n#define TD_TEST_RANDOM_REFERENCE_H")
    print("#include <math.h>\n#include <stdint.h>\n")
    seed = 0x0123456789abcdef
    print(f"#define REF_SEED 0x{seed:016x}ull")
    # bernoulli with a p tensor (f64, 18 elements), and scalar p = 0.3 over 37 elements
    print(f"#define REF_BERN_N {len(P_F64)}")
    emit_list("ref_bern_p", "double", P_F64, hexd)
    emit_list("ref_bern", "uint8_t", bernoulli(seed, len(P_F64), lambda i: P_F64[i]), str)
    emit_list("ref_bern_scalar", "uint8_t", bernoulli(seed, 37, lambda i: 0.3), str)
    # randint: i64 full range, i32 [-5, 7), u8 [0, 256), i8 [-128, 128), 37 elements each
    for name, lo, hi in [("i64", -2**63, 2**63 - 1), ("i32", -5, 7), ("u8", 0, 256),
                         ("i8", -128, 128), ("i64_small", 10**12, 10**12 + 3)]:
        vals = randint(seed, 37, lo, hi)
        emit_list(f"ref_randint_{name}", "int64_t", vals,
                  lambda v: "INT64_MIN" if v == -2**63 else f"{v}LL")
    for n in (0, 1, 2, 5, 33, 5000):  # 5000: the CPU sorts lines from 4096 by radix
        emit_list(f"ref_randperm_{n}", "int64_t", randperm(seed, n) or [-1], lambda v: f"{v}LL")
    # trunc_normal: f64 and f32, several bound sets
    sets = [(0.0, 1.0, -2.0, 2.0), (1.0, 0.02, 0.99, 1.5), (0.0, 1.0, 3.0, 4.0),
            (0.0, 1.0, -6.0, -5.5), (5.0, 2.0, -100.0, 100.0), (0.0, 1.0, -0.001, 0.001)]
    print(f"#define REF_TN_SETS {len(sets)}")
    print("#define REF_TN_N 21")
    print("static const double ref_tn_params[REF_TN_SETS][4] = {")
    for s in sets:
        print("    {" + ", ".join(hexd(v) for v in s) + "},")
    print("};")
    print("static const double ref_tn_f64[REF_TN_SETS][REF_TN_N] = {")
    f32s = []
    for s in sets:
        vals = trunc_normal(seed, 21, *s)
        assert all(s[2] <= v <= s[3] for v in vals)
        f32s.append([f32(v) for v in vals])
        print("    {" + ", ".join(hexd(v) for v in vals) + "},")
    print("};")
    print("static const float ref_tn_f32[REF_TN_SETS][REF_TN_N] = {")
    for vals in f32s:
        print("    {" + ", ".join(hexd(v) + "f" for v in vals) + "},")
    print("};")
    print("#endif")


main()

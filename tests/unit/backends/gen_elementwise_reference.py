#!/usr/bin/env python3
"""Generate elementwise_reference.h: inputs and float64 expected values for the elementwise
ops of issue 13 (tests/unit/backends/elementwise_ops.c runs them through the public API on
local:cpu, in f64, f32, f16 and bf16, and the integer ops in every integer dtype).

References, all independent of the code under test:
  - float ops: PyTorch CPU in float64 (torch 1.13), numpy float64 where PyTorch has no
    function or a different convention (numpy's sign keeps NaN; numpy's remainder gives a
    zero the divisor's sign, Python's rule), mpmath at 50 digits for gelu (PyTorch's
    float64 formula cancels for negative x);
  - integer ops: Python's exact integer arithmetic (// and % are Python's floor rules,
    pow and << on unbounded ints), then wrapped to the dtype's width; the cases the
    contract defines beyond Python (x // 0 = 0, fmod(x, 0) = remainder(x, 0) = x, negative
    exponents, shift counts outside [0, width)) are written out by that contract.

Float inputs are multiples of 1/16 in [-4, 4] (exact in f16 and bf16, so every dtype gets
the same values) plus +-0, +-inf and NaN, and round's ties. Run once and check the output in:

    /usr/bin/python3 tests/unit/backends/gen_elementwise_reference.py > \\
        tests/unit/backends/elementwise_reference.h
"""
import math
import sys
import warnings

import mpmath
import numpy as np
import torch

RNG = np.random.default_rng(20261201)
warnings.simplefilter("ignore")  # numpy warns about the NaN and inf cases it computes
SPECIAL = [0.0, -0.0, math.inf, -math.inf, math.nan, 0.5, -0.5, 1.5, 2.5, -2.5, 1.0, -1.0]


def fgrid(n, lo=-64, hi=65):
    return list(RNG.integers(lo, hi, size=n).astype(np.float64) / 16.0)


def cnum(v):
    v = float(v)
    if math.isnan(v):
        return "NAN"
    if math.isinf(v):
        return "INFINITY" if v > 0 else "-INFINITY"
    if v == 0.0:
        return "-0.0" if math.copysign(1.0, v) < 0 else "0.0"
    return repr(v)


def wrapped(tokens):
    """A brace initializer of the tokens, wrapped at 96 columns."""
    lines, line = [], "    "
    for tok in tokens:
        if len(line) + len(tok) + 2 > 96:
            lines.append(line.rstrip())
            line = "    "
        line += tok + ", "
    if line.strip():
        lines.append(line.rstrip())
    return "{\n" + "\n".join(lines) + "\n}"


def carr(vals):
    return wrapped([cnum(v) for v in vals])


def t(x):
    return torch.tensor(x, dtype=torch.float64)


mpmath.mp.dps = 50


def mp_map(fn, v):
    """fn in 50-digit arithmetic, rounded to float64; IEEE specials by the formula's limit."""
    return torch.tensor([fn(x) for x in v.tolist()], dtype=torch.float64)


def gelu_exact(x):
    # x Phi(x) (Hendrycks & Gimpel); PyTorch's float64 0.5 x (1 + erf(x / sqrt 2)) loses
    # digits to cancellation for negative x, so the reference is computed with mpmath.
    if math.isnan(x) or x == -math.inf:
        return math.nan
    if x == math.inf:
        return math.inf
    if x == 0:
        return x
    return float(mpmath.mpf(x) / 2 * mpmath.erfc(-mpmath.mpf(x) / mpmath.sqrt(2)))


def gelu_tanh(x):
    if math.isnan(x) or x == -math.inf:
        return math.nan
    if x == math.inf:
        return math.inf
    if x == 0:
        return x
    m = mpmath.mpf(x)
    u = mpmath.sqrt(2 / mpmath.pi) * (m + mpmath.mpf("0.044715") * m ** 3)
    return float(m / 2 * (1 + mpmath.tanh(u)))


cases = []  # (kind, op, dims_x, x, dims_y, y, want, p0, p1, p2, mode)


def unary(op, fn, x=None, p=(0.0, 0.0, 0.0), mode=0):
    x = SPECIAL + fgrid(20) if x is None else x
    want = [float(v) for v in fn(t(x)).tolist()]
    cases.append(("U", op, [len(x)], x, [], [], want, p, mode))


def binary(op, fn, dx, x, dy, y):
    out = fn(t(x).reshape(dx), t(y).reshape(dy))
    cases.append(("B", op, dx, x, dy, y, [float(v) for v in out.reshape(-1).tolist()],
                  (0.0, 0.0, 0.0), 0))


pos = [abs(v) + 0.0625 for v in fgrid(20)]
unit = [v / 4.0 for v in fgrid(20)]  # [-1, 1]
unary("sin", torch.sin)
unary("cos", torch.cos)
unary("tan", torch.tan)
unary("asin", torch.asin, SPECIAL + unit)
unary("acos", torch.acos, SPECIAL + unit)
unary("atan", torch.atan)
unary("sinh", torch.sinh)
unary("cosh", torch.cosh)
unary("asinh", torch.asinh)
unary("acosh", torch.acosh, SPECIAL + [1.0 + v for v in pos])
unary("atanh", torch.atanh, SPECIAL + unit)
unary("erf", torch.erf)
unary("gelu", lambda v: mp_map(gelu_exact, v), SPECIAL + fgrid(20, -128, 129))
unary("gelu", lambda v: mp_map(gelu_tanh, v), SPECIAL + fgrid(20, -128, 129), mode=1)
unary("softplus", lambda v: torch.nn.functional.softplus(v, beta=1.0, threshold=20.0),
      p=(1.0, 20.0, 0.0))
unary("softplus", lambda v: torch.nn.functional.softplus(v, beta=2.0, threshold=3.0),
      p=(2.0, 3.0, 0.0))
unary("leaky_relu", lambda v: torch.nn.functional.leaky_relu(v, 0.125), p=(0.125, 0, 0))
# elu(-0) is -0 here (alpha * expm1(-0), the sign elu's x > 0 branch would also give);
# PyTorch 1.13's float64 kernel computes alpha * (e^x - 1) and gives +0: the one deviation.
unary("elu", lambda v: torch.where(v == 0, v, torch.nn.functional.elu(v, alpha=1.5)),
      p=(1.5, 0, 0))
unary("log1p", torch.log1p, SPECIAL + [v - 0.9375 for v in pos])
unary("expm1", torch.expm1)
unary("log2", torch.log2, SPECIAL + pos)
unary("log10", torch.log10, SPECIAL + pos)
unary("floor", torch.floor, SPECIAL + fgrid(20) + [-3.5, 3.5, -0.25])
unary("ceil", torch.ceil, SPECIAL + fgrid(20) + [-3.5, 3.5, -0.25])
unary("round", torch.round, SPECIAL + fgrid(20) + [-3.5, 3.5, 0.25, -0.25, -1.5, 3.0])
unary("trunc", torch.trunc, SPECIAL + fgrid(20) + [-3.5, 3.5, -0.25])
unary("sign", lambda v: torch.from_numpy(np.sign(v.numpy())), SPECIAL + fgrid(20))
unary("reciprocal", torch.reciprocal, SPECIAL + [v for v in fgrid(20) if v != 0])
unary("nan_to_num", lambda v: torch.nan_to_num(v, nan=-7.0, posinf=100.0, neginf=-200.0),
      p=(-7.0, 100.0, -200.0))
unary("clamp", lambda v: torch.clamp(v, -1.25, 2.5), p=(-1.25, 2.5, 0.0))
unary("clamp", lambda v: torch.clamp(v, min=0.5), p=(0.5, math.inf, 0.0))

bx = SPECIAL + fgrid(20)
by = [2.0, -2.0, 0.0, -0.0, math.inf, -math.inf, math.nan, 0.75, 0.75, -0.75, 3.0, -3.0] + \
    [v if v != 0 else 0.5 for v in fgrid(20)]
n = len(bx)
binary("atan2", torch.atan2, [n], bx, [n], by)
binary("hypot", torch.hypot, [n], bx, [n], by)
binary("copysign", torch.copysign, [n], bx, [n], by)
binary("fmod", torch.fmod, [n], bx, [n], by)
binary("remainder", lambda a, b: torch.from_numpy(np.remainder(a.numpy(), b.numpy())),
       [n], bx, [n], by)
binary("floor_divide", lambda a, b: torch.from_numpy(np.floor_divide(a.numpy(), b.numpy())),
       [n], bx, [n], by)
# broadcasting: [3, 1] with [1, 4]
bxa = fgrid(3)
bya = [v if v != 0 else 0.25 for v in fgrid(4)]
binary("atan2", torch.atan2, [3, 1], bxa, [1, 4], bya)
binary("remainder", lambda a, b: torch.from_numpy(np.remainder(a.numpy(), b.numpy())),
       [3, 1], bxa, [1, 4], bya)
binary("floor_divide", lambda a, b: torch.from_numpy(np.floor_divide(a.numpy(), b.numpy())),
       [3, 1], bxa, [1, 4], bya)

# ---- integers ----
WIDTH = {"i8": (8, True), "i16": (16, True), "i32": (32, True), "i64": (64, True),
         "u8": (8, False)}


def wrap(v, dt):
    w, signed = WIDTH[dt]
    v &= (1 << w) - 1
    if signed and v >= 1 << (w - 1):
        v -= 1 << w
    return v


def lim(dt):
    w, signed = WIDTH[dt]
    return (-(1 << (w - 1)), (1 << (w - 1)) - 1) if signed else (0, (1 << w) - 1)


def int_ref(op, a, b, dt):
    w, signed = WIDTH[dt]
    lo, hi = lim(dt)
    if op == "floor_divide":
        return 0 if b == 0 else wrap(a // b, dt)
    if op == "remainder":
        return a if b == 0 else wrap(a % b, dt)
    if op == "fmod":  # C's %: a - trunc(a / b) b, the sign of a
        return a if b == 0 else wrap((abs(a) % abs(b)) * (1 if a >= 0 else -1), dt)
    if op == "pow":
        if b < 0:
            return 1 if a == 1 else ((-1 if b % 2 else 1) if a == -1 else 0)
        return wrap(pow(a, b, 1 << w), dt)
    if op == "shift_left":
        return 0 if b < 0 or b >= w else wrap(a << b, dt)
    if op == "shift_right":
        return (-1 if a < 0 else 0) if b < 0 or b >= w else a >> b
    if op == "bitwise_and":
        return wrap(a & b, dt)
    if op == "bitwise_or":
        return wrap(a | b, dt)
    if op == "bitwise_xor":
        return wrap(a ^ b, dt)
    raise ValueError(op)


icases = []  # (op, dtype, a[], b[], want[])
for dt in WIDTH:
    lo, hi = lim(dt)
    w = WIDTH[dt][0]
    base = [lo, lo + 1, -7, -1, 0, 1, 3, 7, 100 % (hi + 1), hi - 1, hi]
    base = [v for v in base if lo <= v <= hi]
    divs = [-1, 1, 2, -3, 0, 5, -7, hi, lo, 3, -2]
    divs = [v if lo <= v <= hi else abs(v) for v in divs]
    a_list, b_list = [], []
    for x in base:
        for y in divs:
            a_list.append(x)
            b_list.append(y)
    for op in ["floor_divide", "remainder", "fmod", "bitwise_and", "bitwise_or", "bitwise_xor"]:
        icases.append((op, dt, a_list, b_list, [int_ref(op, x, y, dt) for x, y in
                                               zip(a_list, b_list)]))
    counts = [-1, 0, 1, 3, w - 1, w, w + 5, lo] if WIDTH[dt][1] else [0, 1, 3, w - 1, w, 200]
    counts = [c for c in counts if lo <= c <= hi]
    sa, sb = [], []
    for x in [lo, -5 if WIDTH[dt][1] else 5, 1, hi, 0]:
        for c in counts:
            sa.append(x)
            sb.append(c)
    for op in ["shift_left", "shift_right"]:
        icases.append((op, dt, sa, sb, [int_ref(op, x, y, dt) for x, y in zip(sa, sb)]))
    pa, pb = [], []
    for x in [-3, -2, -1, 0, 1, 2, 3, 7, hi, lo]:
        for e in [-3, -2, -1, 0, 1, 2, 5, 13, 63 if w == 64 else 9]:
            if lo <= x <= hi and lo <= e <= hi:
                pa.append(x)
                pb.append(e)
    icases.append(("pow", dt, pa, pb, [int_ref("pow", x, y, dt) for x, y in zip(pa, pb)]))

out = []
out.append("/* elementwise_reference.h — GENERATED by "
           "tests/unit/backends/gen_elementwise_reference.py\n"
           f" * (torch {torch.__version__}, numpy {np.__version__}, float64; integers: Python "
           "integer arithmetic).\n"
           " * Do not edit: rerun the script and check the result in. */\n"
           "#ifndef TD_TESTS_ELEMENTWISE_REFERENCE_H\n#define TD_TESTS_ELEMENTWISE_REFERENCE_H\n"
           "#include <math.h>\n#include <stddef.h>\n#include <stdint.h>\n\n"
           "typedef struct ref_float_case {\n"
           "    const char *op;  /* the op's name in docs/ops.md */\n"
           "    int binary;      /* 0: unary of x; 1: binary of x and y */\n"
           "    int rank_x, rank_y;\n    int64_t dims_x[2], dims_y[2];\n"
           "    int n_x, n_y, n_out;\n    const double *x, *y, *want;\n"
           "    double p[3];     /* float attributes */\n    int mode;        /* gelu's approximate */\n"
           "} ref_float_case;\n\n"
           "typedef struct ref_int_case {\n    const char *op, *dtype;\n    int n;\n"
           "    const int64_t *a, *b, *want;\n} ref_int_case;\n")
for i, c in enumerate(cases):
    kind, op, dx, x, dy, y, want, p, mode = c
    out.append(f"static const double REF_F{i}_X[] = {carr(x)};")
    if y:
        out.append(f"static const double REF_F{i}_Y[] = {carr(y)};")
    out.append(f"static const double REF_F{i}_WANT[] = {carr(want)};")
out.append("\nstatic const ref_float_case REF_FLOAT_CASES[] = {")
for i, c in enumerate(cases):
    kind, op, dx, x, dy, y, want, p, mode = c
    ddx = (dx + [0, 0])[:2]
    ddy = (dy + [0, 0])[:2]
    out.append(f"    {{\"{op}\", {1 if kind == 'B' else 0}, {len(dx)}, {len(dy)}, "
               f"{{{ddx[0]}, {ddx[1]}}}, {{{ddy[0]}, {ddy[1]}}}, {len(x)}, {len(y)},\n"
               f"     {len(want)}, REF_F{i}_X, {f'REF_F{i}_Y' if y else 'NULL'}, REF_F{i}_WANT, "
               f"{{{cnum(p[0])}, {cnum(p[1])}, {cnum(p[2])}}}, {mode}}},")
out.append("};\n")


def iarr(v):
    return wrapped([(f"INT64_C({x})" if x != -(1 << 63) else "INT64_MIN") for x in v])


for i, (op, dt, a, b, want) in enumerate(icases):
    out.append(f"static const int64_t REF_I{i}_A[] = {iarr(a)};")
    out.append(f"static const int64_t REF_I{i}_B[] = {iarr(b)};")
    out.append(f"static const int64_t REF_I{i}_WANT[] = {iarr(want)};")
out.append("\nstatic const ref_int_case REF_INT_CASES[] = {")
for i, (op, dt, a, b, want) in enumerate(icases):
    out.append(f"    {{\"{op}\", \"{dt}\", {len(a)}, REF_I{i}_A, REF_I{i}_B, REF_I{i}_WANT}},")
out.append("};\n#endif")
sys.stdout.write("\n".join(out) + "\n")

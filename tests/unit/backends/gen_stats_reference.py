#!/usr/bin/env python3
"""Generate stats_reference.h: inputs and float64 expected values for the reductions, scans
and sorts of issue 13 item 2 (var std logsumexp norm any all argmax/argmin over several axes,
cumsum cumprod, sort argsort topk), checked by tests/unit/backends/cpu_stats.c.

References are PyTorch CPU in float64 (torch.var/std with an integer correction,
torch.logsumexp, torch.linalg.vector_norm, torch.cumsum/cumprod, torch.sort(stable=True))
and numpy float64 where PyTorch 1.13 has no equivalent (np.var/np.std with a fractional
ddof, np.any/np.all over several axes, argmax/argmin over several axes as numpy's argmax of
the reduced axes moved last and flattened). topk's reference is torch.sort(stable=True)'s
first k: torch.topk promises no order among ties, while our contract sends ties to the lower
index; the script asserts that torch.topk gives the same values.

Inputs are multiples of 1/16 in [-4, 4) (exact in f16, bf16, f32 and f64, so the C test
feeds the same values to every float dtype), with NaN, +-inf and -0.0 in the special cases,
and small integers in the integer cases. Run once from anywhere and check the output in:

    /usr/bin/python3 tests/unit/backends/gen_stats_reference.py > tests/unit/backends/stats_reference.h

(Debian 12: the system python with python3-numpy and PyTorch 1.13.)
"""
import math
import sys

import numpy as np
import torch

RNG = np.random.default_rng(20261201)

OPS = ["VAR", "STD", "LOGSUMEXP", "NORM", "ANY", "ALL", "ARGMAX", "ARGMIN", "CUMSUM",
       "CUMPROD", "SORT", "ARGSORT", "TOPK_VALUES", "TOPK_INDICES"]
INDEX_OUT = {"ARGMAX", "ARGMIN", "ARGSORT", "TOPK_INDICES"}


def grid(shape, lo=-64, hi=64):
    return RNG.integers(lo, hi, size=shape).astype(np.float64) / 16.0


def ints(shape, lo=-9, hi=10):
    return RNG.integers(lo, hi, size=shape).astype(np.float64)


def with_specials(a, every=5):
    a = a.copy()
    flat = a.reshape(-1)
    sp = [math.nan, math.inf, -math.inf, -0.0, 0.0]
    for i in range(0, flat.size, every):
        flat[i] = sp[(i // every) % len(sp)]
    return a


def cval(v):
    if isinstance(v, (bool, np.bool_)):
        return "1" if v else "0"
    v = float(v)
    if math.isnan(v):
        return "NAN"
    if math.isinf(v):
        return "INFINITY" if v > 0 else "-INFINITY"
    if v == 0.0 and math.copysign(1.0, v) < 0:
        return "-0.0"
    return repr(v)


def arr(name, flat, ctype):
    flat = list(flat)
    if not flat:
        return f"static const {ctype} {name}[1] = {{0}};"
    toks = [cval(v) if ctype == "double" else str(int(v)) for v in flat]
    lines, line = [], "    "
    for t in toks:
        if len(line) + len(t) + 2 > 96:
            lines.append(line.rstrip())
            line = "    "
        line += t + ", "
    lines.append(line.rstrip())
    return f"static const {ctype} {name}[{len(flat)}] = {{\n" + "\n".join(lines) + "\n};"


CASES = []


def add(op, x, integer=False, axes=None, keep=False, f=0.0, axis=0, desc=False, k=0):
    """axes: None = every axis (reductions); axis/desc/k: scans and sorts."""
    x = np.asarray(x, dtype=np.float64)
    t = torch.from_numpy(x.copy())
    nd = x.ndim
    red_axes = tuple(range(nd)) if axes is None else tuple(a % nd for a in axes) if nd else ()
    if op in ("VAR", "STD"):
        n = int(np.prod([x.shape[a] for a in red_axes])) if red_axes else 1
        with np.errstate(all="ignore"):
            mean = np.sum(x, axis=red_axes, keepdims=True) / n if n else np.full(
                np.sum(x, axis=red_axes, keepdims=True).shape, math.nan)
            ss = np.sum((x - mean) ** 2, axis=red_axes, keepdims=keep)
            div = max(0.0, n - f)
            y = ss / div if div else np.where(ss == 0, math.nan, ss * math.inf)
            y = np.asarray(y, dtype=np.float64)
            if n == 0:
                y = np.full(y.shape, math.nan)
            if op == "STD":
                y = np.sqrt(y)
        if f == int(f) and n > 0:  # cross-check against PyTorch where it takes the correction
            fn = torch.var if op == "VAR" else torch.std
            ty = fn(t, dim=red_axes, correction=int(f), keepdim=keep).numpy()
            assert np.allclose(ty, y, rtol=1e-12, atol=0, equal_nan=True), (op, x.shape, f)
    elif op == "LOGSUMEXP":
        y = torch.logsumexp(t, dim=red_axes, keepdim=keep).numpy()
    elif op == "NORM":
        y = torch.linalg.vector_norm(t, ord=f, dim=red_axes, keepdim=keep).numpy()
    elif op in ("ANY", "ALL"):
        fn = np.any if op == "ANY" else np.all
        y = fn(x != 0, axis=red_axes, keepdims=keep)
    elif op in ("ARGMAX", "ARGMIN"):
        kept = [a for a in range(nd) if a not in red_axes]
        m = np.transpose(x, kept + list(red_axes)) if nd else x
        m = m.reshape([x.shape[a] for a in kept] + [-1])
        y = (np.argmax if op == "ARGMAX" else np.argmin)(m, axis=-1)
        if keep:
            y = y.reshape([1 if a in red_axes else x.shape[a] for a in range(nd)])
    elif op in ("CUMSUM", "CUMPROD"):
        fn = torch.cumsum if op == "CUMSUM" else torch.cumprod
        y = fn(t, dim=axis).numpy()
    else:
        largest = desc
        v, i = torch.sort(t, dim=axis, descending=desc, stable=True)
        if op.startswith("TOPK"):
            v = v.narrow(axis, 0, k) if nd else v
            i = i.narrow(axis, 0, k) if nd else i
            tv, _ = torch.topk(t, k, dim=axis, largest=largest, sorted=True)
            assert torch.equal(tv.nan_to_num(7.0), v.nan_to_num(7.0)), (op, x.shape, k)
        y = (i if op in INDEX_OUT else v).numpy()
    y = np.asarray(y)
    CASES.append(dict(op=op, x=x, integer=integer, axes=red_axes if axes is not None else None,
                      keep=keep, f=f, axis=axis, desc=desc, k=k, y=y))


def build():
    global RNG
    x345 = grid((3, 4, 5))
    sp345 = with_specials(grid((3, 4, 5)), 7)
    empty = grid((2, 0, 3))
    # ---- var / std ----
    for op in ("VAR", "STD"):
        for c in (0.0, 1.0, 2.5):
            add(op, x345, axes=(1,), f=c)
            add(op, x345, axes=(0, 2), keep=True, f=c)
            add(op, x345, axes=None, f=c)
        add(op, x345, axes=(-1,), f=1.0)
        add(op, grid((1, 3)), axes=(0,), f=1.0)          # n - correction = 0, sum 0: NaN
        add(op, grid((2, 3)), axes=(0,), f=3.0)          # n - correction < 0: inf (or NaN)
        add(op, empty, axes=(1,), f=1.0)                 # n = 0: NaN
        add(op, sp345, axes=(2,), f=1.0)
        add(op, grid(()), axes=None, f=0.0)              # rank 0
        add(op, grid((1000,)), axes=None, f=1.0)
    # ---- logsumexp ----
    add("LOGSUMEXP", x345, axes=(1,))
    add("LOGSUMEXP", x345, axes=(0, 2), keep=True)
    add("LOGSUMEXP", x345 * 256.0, axes=(2,))           # |x| up to 1024: needs the max shift
    add("LOGSUMEXP", sp345, axes=(2,))
    add("LOGSUMEXP", np.array([[-math.inf, -math.inf], [math.inf, 1.0], [math.inf, -math.inf]]),
        axes=(1,))
    add("LOGSUMEXP", empty, axes=(1,))
    add("LOGSUMEXP", grid(()), axes=None)
    # ---- norms ----
    for p in (1.0, 2.0, math.inf, -math.inf, 0.0, 3.0, 0.5, -1.0):
        add("NORM", x345, axes=(1,), f=p)
        add("NORM", x345, axes=None, keep=True, f=p)
        add("NORM", sp345, axes=(2,), f=p)
    add("NORM", empty, axes=(1,), f=2.0)
    add("NORM", empty, axes=(1,), f=1.0)
    add("NORM", grid((1000,)) * 64.0, axes=None, f=2.0)  # f16: x^2 above 65504
    # ---- any / all ----
    zs = np.where(grid((3, 4, 5)) > 1.0, grid((3, 4, 5)), 0.0)
    for op in ("ANY", "ALL"):
        add(op, zs, axes=(1,))
        add(op, zs, axes=(0, 2), keep=True)
        add(op, zs != 0, axes=None)
        add(op, sp345, axes=(2,))
        add(op, np.where(ints((3, 4)) > 0, ints((3, 4)), 0), integer=True, axes=(1,))
        add(op, empty, axes=(1,))
        add(op, np.ones((2, 3)), axes=(0,))
    # ---- argmax / argmin over several axes or all ----
    ties = np.round(grid((3, 4, 5)))
    for op in ("ARGMAX", "ARGMIN"):
        add(op, x345, axes=(0, 2))
        add(op, x345, axes=None)
        add(op, ties, axes=(0, 2), keep=True)
        add(op, ties, axes=None, keep=True)
        add(op, sp345, axes=(0, 2))
        add(op, ints((3, 4, 5)), integer=True, axes=(0, 2))
        add(op, grid(()), axes=None)
    # ---- cumsum / cumprod ----
    near1 = RNG.integers(8, 24, size=(3, 4, 5)).astype(np.float64) / 16.0
    for op, data in (("CUMSUM", x345), ("CUMPROD", near1)):
        for ax in (0, 1, 2, -1):
            add(op, data, axis=ax % 3)
        add(op, sp345, axis=2)
        add(op, grid((0, 3)), axis=1)
        add(op, grid(()), axis=0)
        add(op, ints((3, 6), -3, 4), integer=True, axis=1)
    add("CUMSUM", grid((3000,)), axis=0)
    add("CUMSUM", grid((2, 1500)), axis=1)
    add("CUMPROD", RNG.integers(15, 18, size=(600,)).astype(np.float64) / 16.0, axis=0)
    # ---- sort / argsort / topk ----
    tie38 = np.round(grid((3, 8)))
    sp38 = with_specials(np.round(grid((3, 8))), 3)
    for op in ("SORT", "ARGSORT"):
        for d in (False, True):
            add(op, tie38, axis=1, desc=d)
            add(op, tie38, axis=0, desc=d)
            add(op, sp38, axis=1, desc=d)
            add(op, np.round(grid((3000,))), axis=0, desc=d)
            add(op, np.round(grid((2, 4, 3))), axis=1, desc=d)
            add(op, ints((4, 9)), integer=True, axis=1, desc=d)
            add(op, grid((0, 3)), axis=0, desc=d)
            add(op, grid(()), axis=0, desc=d)
    for op in ("TOPK_VALUES", "TOPK_INDICES"):
        for largest in (True, False):
            for k in (0, 1, 3, 8):
                add(op, tie38, axis=1, desc=largest, k=k)
            add(op, sp38, axis=1, desc=largest, k=5)
            add(op, tie38, axis=0, desc=largest, k=2)
            add(op, np.round(grid((3000,))), axis=0, desc=largest, k=50)
            add(op, ints((4, 9)), integer=True, axis=1, desc=largest, k=4)
            add(op, grid(()), axis=0, desc=largest, k=1)
    # lines of 4096 and more (the CPU's radix sort), with many ties and specials, along the
    # last axis and along a strided one; their own generator keeps the values above
    saved, RNG = RNG, np.random.default_rng(20261205)
    long_ties = np.round(grid((4200,)) * 4) / 4
    long_sp = with_specials(np.round(grid((2, 4100))), 7)
    long_ints = ints((4100, 2), lo=-120, hi=121)  # exact in bf16 and i8
    for d in (False, True):
        add("SORT", long_ties, axis=0, desc=d)
        add("ARGSORT", long_sp, axis=1, desc=d)
    add("ARGSORT", long_ints, integer=True, axis=0, desc=False)
    add("TOPK_INDICES", long_sp, axis=1, desc=True, k=20)
    RNG = saved


def main():
    build()
    out = ["/* stats_reference.h — GENERATED by tests/unit/backends/gen_stats_reference.py",
           f" * (PyTorch {torch.__version__} CPU and numpy {np.__version__}, float64).",
           " * Do not edit: rerun `/usr/bin/python3 tests/unit/backends/gen_stats_reference.py >",
           " * tests/unit/backends/stats_reference.h` and check the result in. */",
           "#ifndef TD_TESTS_STATS_REFERENCE_H", "#define TD_TESTS_STATS_REFERENCE_H",
           "#include <math.h>", "#include <stdbool.h>", "#include <stddef.h>", "#include <stdint.h>", "",
           "enum ref_op { " + ", ".join("REF_" + o for o in OPS) + " };", "",
           "typedef struct ref_case {",
           "    int op;                 /* enum ref_op */",
           "    bool integer;           /* integer-valued input: also run on integer dtypes */",
           "    int rank;",
           "    int64_t dims[4];",
           "    int naxes;              /* reductions: -1 = every axis (axes NULL) */",
           "    int axes[4];",
           "    bool keep;",
           "    double f;               /* correction or p */",
           "    int axis;               /* scans and sorts */",
           "    bool desc;              /* descending / largest */",
           "    int64_t k;",
           "    int out_rank;",
           "    int64_t out_dims[4];",
           "    int64_t n_out;",
           "    const double *x;",
           "    const double *want;     /* float and bool results */",
           "    const int64_t *want_i;  /* index results */",
           "} ref_case;", ""]
    rows = []
    first_of = {}  # an input's bytes -> the first case that emitted them (inputs are shared)
    for i, c in enumerate(CASES):
        x, y = c["x"], c["y"]
        key = (x.shape, x.tobytes())
        xi = first_of.setdefault(key, i)
        if xi == i:
            out.append(arr(f"REF_X{i}", x.reshape(-1), "double"))
        idx = c["op"] in INDEX_OUT
        out.append(arr(f"REF_Y{i}", y.reshape(-1), "int64_t" if idx else "double"))
        dims = list(x.shape) + [0] * (4 - x.ndim)
        odims = list(y.shape) + [0] * (4 - y.ndim)
        axes = c["axes"]
        naxes = -1 if axes is None else len(axes)
        ax = list(axes or ()) + [0] * (4 - len(axes or ()))
        rows.append(
            "    {REF_%s, %d, %d, {%s}, %d, {%s}, %d, %s, %d, %d, %d, %d, {%s}, %d, REF_X%d, %s, %s},"
            % (c["op"], int(c["integer"]), x.ndim, ", ".join(map(str, dims)), naxes,
               ", ".join(map(str, ax)), int(c["keep"]), cval(c["f"]), c["axis"], int(c["desc"]),
               c["k"], y.ndim, ", ".join(map(str, odims)), y.size, xi,
               "NULL" if idx else f"REF_Y{i}", f"REF_Y{i}" if idx else "NULL"))
    out.append("")
    out.append("static const ref_case REF_CASES[] = {")
    out.extend(rows)
    out.append("};")
    out.append("#define REF_NCASES (sizeof REF_CASES / sizeof REF_CASES[0])")
    out.append("#endif")
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Generate movement_reference.h: inputs, attributes and expected outputs for the movement
ops of issue 13 item 3 (slice with steps, flip, roll, pad, stack, split, chunk, repeat,
tile, tril/triu, one_hot, masked_fill, scatter, scatter_add, index_add, gather_nd) and for
td_einsum (item 6), checked by tests/unit/backends/movement_ops.c through the public API.

References, all independent of the code under test:
  - numpy basic slicing x[a:b:s] (Python's slice semantics), np.flip, np.roll, np.pad
    (constant / reflect / edge / wrap, which are torch's constant / reflect / replicate /
    circular), np.tile, numpy advanced indexing for gather_nd, np.einsum;
  - PyTorch CPU 1.13: torch.roll, torch.nn.functional.pad (asserted equal to np.pad where
    PyTorch accepts the shape), Tensor.repeat, torch.tril/triu, one_hot, masked_fill,
    scatter / scatter_add / index_add, torch.stack / split / chunk;
  - scatter with duplicate indices and the f32 scatter_add / index_add determinism cases:
    an explicit Python loop in ascending index order, in numpy float32 (each add rounded to
    f32), which is the contract (torch's CPU order is asserted to agree where it does).

Values are small integers (exact in every dtype the C test runs: f32 f64 bf16 i8 i32 i64),
except the f32-only determinism cases. Run once from anywhere and check the output in:

    /usr/bin/python3 tests/unit/backends/gen_movement_reference.py > \\
        tests/unit/backends/movement_reference.h
"""
import math

import numpy as np
import torch
import torch.nn.functional as F

RNG = np.random.default_rng(20261202)
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)
CASES = []


def ints(shape, lo=-9, hi=10):
    return RNG.integers(lo, hi, size=shape).astype(np.float64)


def case(name, op, x, want, **kw):
    c = dict(name=name, op=op, x=np.asarray(x, dtype=np.float64),
             want=np.asarray(want, dtype=np.float64), **kw)
    CASES.append(c)


# ---- slice with steps (numpy basic slicing is Python's slice semantics) ----
def py_bound(v):
    return None if v in (INT64_MAX, INT64_MIN) else v


def slice_case(name, shape, starts, stops, steps):
    x = ints(shape)
    # INT64_MAX / INT64_MIN mean "open end"; any other value is a Python bound as is
    sl = tuple(slice(py_bound(a), py_bound(b), s) for a, b, s in zip(starts, stops, steps))
    case(name, "SLICE_STEP", x, x[sl], p=list(starts) + list(stops) + list(steps))


slice_case("slice_step 2-d steps 2 and 3", (5, 7), [0, 1], [5, 7], [2, 3])
slice_case("slice_step reversed rows", (4, 3), [INT64_MAX, 0], [INT64_MIN, 3], [-1, 1])
slice_case("slice_step negative step -2 from -1", (9,), [-1], [INT64_MIN], [-2])
slice_case("slice_step negative bounds", (10,), [-2], [-8], [-3])
slice_case("slice_step out-of-range bounds clamp", (6, 2), [-100, 0], [100, 100], [4, 1])
slice_case("slice_step empty result (start past stop)", (6,), [4], [2], [1])
slice_case("slice_step empty result (negative step)", (6,), [1], [4], [-1])
slice_case("slice_step zero-length dim reversed", (0, 3), [INT64_MAX, 0], [INT64_MIN, 3], [-1, 2])
slice_case("slice_step rank 3 mixed", (3, 4, 5), [2, 0, -1], [INT64_MIN, 4, 0], [-2, 3, -2])
slice_case("slice_step rank 0", (), [], [], [])
slice_case("slice_step huge step", (5,), [1], [5], [2**62])

# ---- flip ----
for shape, axes in [((3, 4), [0]), ((3, 4), [-1]), ((2, 3, 4), [0, 2]), ((2, 3), []),
                    ((0, 3), [1]), ((), []), ((5,), [0])]:
    x = ints(shape)
    want = np.flip(x, axis=tuple(axes)) if axes else x
    case(f"flip {list(shape)} axes {axes}", "FLIP", x, want, ax=axes)

# ---- roll ----
for shape, shifts, axes in [((5,), [2], [0]), ((3, 4), [1, -1], [0, 1]), ((3, 4), [-7], [1]),
                            ((3, 4), [5], None), ((2, 3), [2, 2], [1, 1]),
                            ((0, 4), [3], [1]), ((4, 0), [3], [1]), ((2, 3, 2), [10**12 + 1], [1]),
                            ((3,), [-(2**63)], [0])]:
    x = ints(shape)
    tx = torch.tensor(x)
    if axes is None:
        want = torch.roll(tx, shifts[0]).numpy()
        assert np.array_equal(want, np.roll(x, shifts[0]))
    else:
        ref = x
        for s, a in zip(shifts, axes):
            ref = np.roll(ref, s % max(1, x.shape[a]), axis=a)
        want = ref
        # torch 1.13 negates the shift in int64, so a shift of -2^63 comes out wrong there;
        # the mathematical roll (numpy with Python's exact mod) is the reference
        if x.size and min(shifts) > INT64_MIN:
            assert np.array_equal(torch.roll(tx, shifts, axes).numpy(), ref)
    case(f"roll {list(shape)} shifts {shifts} axes {axes}", "ROLL", x, want, p=shifts,
         ax=axes if axes is not None else None)

# ---- pad: np.pad per mode, torch.nn.functional.pad cross-checked where it applies ----
NP_MODE = {0: "constant", 1: "reflect", 2: "edge", 3: "wrap"}
TORCH_MODE = {0: "constant", 1: "reflect", 2: "replicate", 3: "circular"}


def pad_case(shape, pads, mode, value=0.0, err=None):
    x = ints(shape)
    r = len(shape)
    width = [(0, 0)] * r
    for i in range(len(pads) // 2):
        width[r - 1 - i] = (pads[2 * i], pads[2 * i + 1])
    name = f"pad {list(shape)} {pads} {TORCH_MODE[mode]}"
    if err is not None:
        case(name + " refused", "PAD", x, [], p=pads, mode=mode, value=value, err=err)
        return
    if r == 0:
        want = x  # nothing to pad on a rank-0 tensor
    elif mode == 0:
        want = np.pad(x, width, mode="constant", constant_values=value)
    else:
        want = np.pad(x, width, mode=NP_MODE[mode])
    try:  # torch accepts constant anywhere, the others on trailing dims of batched input
        tw = F.pad(torch.tensor(x), tuple(pads), mode=TORCH_MODE[mode],
                   **({"value": value} if mode == 0 else {})).numpy()
        assert np.array_equal(tw, want), name
    except (RuntimeError, NotImplementedError, ValueError):
        pass
    case(name, "PAD", x, want, p=pads, mode=mode, value=value)


for mode in range(4):
    pad_case((2, 3, 4), [2, 1], mode, 7.0)
    pad_case((2, 3, 4), [1, 2, 2, 0], mode, -3.0)
    pad_case((3, 4), [3, 3, 2, 2], mode, 1.5)
    pad_case((4, 5), [0, 0, 1, 3], mode)
    pad_case((2, 3), [], mode)
pad_case((3, 4), [1, 1, 3, 0], 1, err="reflect padding 3 on dim 0 needs < 3 (its size)")
pad_case((2, 4), [4, 0], 1, err="reflect padding 4 on dim 1 needs < 4 (its size)")
pad_case((2, 4), [0, 5], 3, err="circular padding 5 on dim 1 needs <= 4 (its size)")
pad_case((2, 0), [1, 0], 2, err="replicate padding 1 on dim 1 needs a non-empty dim")
pad_case((2, 3), [-1, 0], 0, err="constant padding -1 before dim 1 is negative")
pad_case((2, 0), [2, 1], 0, 4.0)
pad_case((2, 0), [2, 1], 3, err="circular padding 2 on dim 1 needs <= 0 (its size)")
pad_case((5,), [4, 4], 1)
pad_case((4,), [4, 4], 3)
pad_case((), [], 0, 1.0)
pad_case((2, 2), [1, 1, 1, 1], 0, math.inf)

# ---- repeat (torch) and tile (numpy) ----
for shape, reps in [((2, 3), [2, 1]), ((2, 3), [1, 2, 3]), ((3,), [0]), ((2, 0), [2, 2]),
                    ((), [3]), ((), []), ((1, 2, 1), [2, 1, 3])]:
    x = ints(shape)
    want = torch.tensor(x).repeat(*reps).numpy() if reps else x
    case(f"repeat {list(shape)} {reps}", "REPEAT", x, want, p=reps)
for shape, reps in [((2, 3), [2]), ((2, 3), [2, 2]), ((3,), [2, 1, 2]), ((2, 2), [])]:
    x = ints(shape)
    want = np.tile(x, reps) if reps else x
    assert np.array_equal(want, torch.tile(torch.tensor(x), tuple(reps)).numpy())
    case(f"tile {list(shape)} {reps}", "TILE", x, want, p=reps)

# ---- tril / triu ----
for shape, k in [((4, 4), 0), ((3, 5), 1), ((3, 5), -1), ((2, 3, 4), 2), ((4, 3), -5),
                 ((4, 3), 7), ((2, 0, 3), 0), ((3, 3), 2**62), ((3, 3), -(2**62))]:
    x = ints(shape)
    tx = torch.tensor(x)
    kk = max(-100, min(100, k))
    case(f"tril {list(shape)} k {k}", "TRIL", x, torch.tril(tx, kk).numpy(), k=k)
    case(f"triu {list(shape)} k {k}", "TRIU", x, torch.triu(tx, kk).numpy(), k=k)

# ---- one_hot ----
for ishape, c in [((5,), 4), ((2, 3), 3), ((0,), 2), ((), 5)]:
    idx = RNG.integers(0, c, size=ishape)
    want = F.one_hot(torch.tensor(idx, dtype=torch.int64), c).numpy()
    case(f"one_hot {list(ishape)} classes {c}", "ONE_HOT", np.zeros(0), want, index=idx, k=c)
case("one_hot index out of range", "ONE_HOT", np.zeros(0), [], index=np.array([1, 4, 2]), k=4,
     err_exec="index 4 out of range [0, 4) at position 1")
case("one_hot negative index", "ONE_HOT", np.zeros(0), [], index=np.array([0, -1]), k=3,
     err_exec="index -1 out of range [0, 3) at position 1")

# ---- masked_fill ----
for shape, mshape, v in [((3, 4), (3, 4), 5.0), ((3, 4), (4,), -2.0), ((2, 3, 4), (3, 1), 9.0),
                         ((2, 3), (), 1.0), ((0, 3), (3,), 4.0), ((), (), 3.0)]:
    x = ints(shape)
    m = RNG.integers(0, 2, size=mshape).astype(bool)
    want = torch.tensor(x).masked_fill(torch.tensor(m), v).numpy()
    case(f"masked_fill {list(shape)} mask {list(mshape)}", "MASKED_FILL", x, want,
         src=m.astype(np.float64), value=v)
case("masked_fill mask does not broadcast", "MASKED_FILL", ints((2, 3)), [],
     src=np.zeros((3, 2)), value=1.0, err="mask shape [3, 2] does not broadcast to x's [2, 3]")
case("masked_fill mask broadcasting up is refused", "MASKED_FILL", ints((3,)), [],
     src=np.zeros((2, 3)), value=1.0, err="does not broadcast to x's [3]")


# ---- scatter / scatter_add / index_add ----
def scatter_loop(x, axis, idx, src, add, dtype=np.float64):
    """The contract: positions of index in row-major order, each add rounded to dtype."""
    out = x.astype(dtype).copy()
    for pos in np.ndindex(*idx.shape):
        dst = list(pos)
        dst[axis] = idx[pos]
        dst = tuple(dst)
        if add:
            out[dst] = dtype(out[dst] + dtype(src[pos]))
        else:
            out[dst] = src[pos]
    return out


def scatter_cases(xshape, axis, ishape, sshape, lim=None):
    x = ints(xshape)
    src = ints(sshape)
    lim = xshape[axis] if lim is None else lim
    idx = RNG.integers(0, lim, size=ishape)
    tx, ti, ts = torch.tensor(x), torch.tensor(idx, dtype=torch.int64), torch.tensor(src)
    want_add = tx.scatter_add(axis, ti, ts).numpy()
    assert np.array_equal(want_add, scatter_loop(x, axis, idx, src, True))
    want = scatter_loop(x, axis, idx, src, False)
    case(f"scatter {list(xshape)} axis {axis} index {list(ishape)}", "SCATTER", x, want,
         index=idx, src=src, axis=axis)
    case(f"scatter_add {list(xshape)} axis {axis} index {list(ishape)}", "SCATTER_ADD", x,
         want_add, index=idx, src=src, axis=axis)


scatter_cases((4, 3), 0, (6, 3), (6, 3))      # duplicates along the axis
scatter_cases((3, 5), 1, (3, 8), (3, 9), 5)    # index smaller than src, duplicates
scatter_cases((2, 3, 4), 1, (2, 2, 3), (2, 3, 4))
scatter_cases((2, 3, 4), -1 + 3, (1, 3, 6), (2, 3, 6))
scatter_cases((3, 0), 0, (2, 0), (2, 0))
scatter_cases((5,), 0, (0,), (3,))
# torch.scatter with duplicates promises no winner; the contract's (last in order) only:
x = np.zeros((3,))
idx = np.array([1, 1, 1, 0])
src = np.array([4.0, 5.0, 6.0, 7.0])
case("scatter duplicates: the last wins", "SCATTER", x, [7.0, 6.0, 0.0], index=idx, src=src, axis=0)
# determinism: f32 adds whose result depends on the order (ascending index position)
x = np.zeros((2,), dtype=np.float32)
idx = np.array([0, 0, 0, 1, 1, 1, 0, 1])
src = np.array([1e8, 1.0, -1e8, 1.0, 1e8, -1e8, 3.0, 0.5], dtype=np.float32)
want = scatter_loop(x, 0, idx, src, True, np.float32)
assert want[0] == np.float32(3.0) and want[1] == np.float32(0.5)
case("scatter_add f32 order: ascending position", "SCATTER_ADD", x, want, index=idx, src=src,
     axis=0, f32_only=True)
case("scatter_add index out of range", "SCATTER_ADD", ints((4, 2)), [], index=np.array([[0, 1], [4, 0]]),
     src=ints((2, 2)), axis=0, err_exec="index 4 out of range [0, 4) at position 2")
case("scatter negative index", "SCATTER", ints((4, 2)), [], index=np.array([[0, -1]]),
     src=ints((1, 2)), axis=0, err_exec="index -1 out of range [0, 4) at position 1")
case("scatter index dim exceeds src", "SCATTER", ints((4, 2)), [], index=np.zeros((3, 2), dtype=np.int64),
     src=ints((2, 2)), axis=0, err="index dim 0 (3) exceeds src's (2)")


def index_add_case(xshape, axis, m, lim=None):
    x = ints(xshape)
    sshape = list(xshape)
    sshape[axis] = m
    src = ints(sshape)
    idx = RNG.integers(0, xshape[axis] if lim is None else lim, size=(m,))
    want = torch.tensor(x).index_add(axis, torch.tensor(idx, dtype=torch.int64),
                                     torch.tensor(src)).numpy()
    case(f"index_add {list(xshape)} axis {axis} m {m}", "INDEX_ADD", x, want, index=idx,
         src=src, axis=axis)


index_add_case((5, 3), 0, 8)
index_add_case((2, 4, 3), 1, 6)
index_add_case((3, 4), 1, 0)
index_add_case((0, 4), 1, 3)
x = np.zeros((1, 2), dtype=np.float32)
idx = np.array([1, 1, 1, 1])
src = np.array([[1e8, 1.0, -1e8, 1.0]], dtype=np.float32)
want = x.copy()
for j in range(4):
    want[0, idx[j]] = np.float32(want[0, idx[j]] + src[0, j])
case("index_add f32 order: ascending j", "INDEX_ADD", x, want, index=idx, src=src, axis=1,
     f32_only=True)
case("index_add index out of range", "INDEX_ADD", ints((3, 2)), [], index=np.array([0, 3]),
     src=ints((2, 2)), axis=0, err_exec="index 3 out of range [0, 3) at position 1")
case("index_add src shape refused", "INDEX_ADD", ints((2, 3)), [], index=np.array([0, 1]),
     src=ints((2, 2)), axis=0, err="src shape [2, 2] must be [2, 3]")


# ---- gather_nd (numpy advanced indexing) ----
def gather_nd_case(xshape, ishape, name=None):
    x = ints(xshape)
    k = ishape[-1]
    idx = np.stack([RNG.integers(0, xshape[c], size=ishape[:-1]) for c in range(k)], axis=-1) \
        if k > 0 else np.zeros(ishape, dtype=np.int64)
    idx = idx.reshape(ishape)
    want = x[tuple(idx[..., c] for c in range(k))] if k > 0 else \
        np.broadcast_to(x, tuple(ishape[:-1]) + tuple(xshape)).copy()
    case(name or f"gather_nd {list(xshape)} index {list(ishape)}", "GATHER_ND", x, want, index=idx)


gather_nd_case((4, 5), (3, 2))
gather_nd_case((4, 5, 2), (2, 2, 1))
gather_nd_case((3, 4, 5), (6, 3))
gather_nd_case((3, 4), (2, 0))
gather_nd_case((3, 4), (0, 2))
gather_nd_case((5,), (1,))
case("gather_nd index out of range", "GATHER_ND", ints((3, 3)), [], index=np.array([[0, 1], [1, 3]]),
     err_exec="index 3 out of range [0, 3) for dim 1 at position 3")
case("gather_nd k above rank", "GATHER_ND", ints((3,)), [], index=np.zeros((1, 2), dtype=np.int64),
     err="index's last dim 2 exceeds x's rank 1")

# ---- stack / split / chunk (torch) ----
for shape, n, axis in [((2, 3), 3, 0), ((2, 3), 2, 1), ((2, 3), 2, -1), ((), 4, 0),
                       ((3,), 11, 1), ((0, 2), 2, 1)]:
    xs = [ints(shape) for _ in range(n)]
    want = torch.stack([torch.tensor(v) for v in xs], axis).numpy()
    case(f"stack {n} x {list(shape)} axis {axis}", "STACK", np.stack(xs).reshape(-1), want,
         xshape=shape, k=n, axis=axis)
for shape, sizes, axis in [((5, 2), [2, 0, 3], 0), ((2, 6), [1, 5], -1), ((4,), [4], 0)]:
    x = ints(shape)
    parts = torch.split(torch.tensor(x), sizes, axis)
    case(f"split {list(shape)} {sizes} axis {axis}", "SPLIT", x,
         np.concatenate([p.numpy().reshape(-1) for p in parts]), p=sizes, axis=axis)
case("split sizes do not sum", "SPLIT", ints((2, 6)), [], p=[2, 3], axis=1,
     err="sizes sum to 5, dim 1 has 6")
for shape, chunks, axis in [((5, 2), 3, 0), ((6,), 4, 0), ((2, 7), 7, 1), ((0, 3), 3, 0),
                            ((3,), 5, 0)]:
    x = ints(shape)
    parts = torch.chunk(torch.tensor(x), chunks, axis)
    case(f"chunk {list(shape)} {chunks} axis {axis}", "CHUNK", x,
         np.concatenate([p.numpy().reshape(-1) for p in parts]),
         p=[len(parts)] + [p.shape[axis] for p in parts], k=chunks, axis=axis)

# ---- einsum (numpy) ----
EINSUM = []


def einsum_case(eq, *shapes, err=None):
    xs = [ints(s, -4, 5) for s in shapes]
    want = np.einsum(eq, *xs) if err is None else np.zeros(0)
    EINSUM.append(dict(eq=eq, xs=xs, want=np.asarray(want, dtype=np.float64), err=err))


einsum_case("ij,jk->ik", (2, 3), (3, 4))
einsum_case("ij,jk", (2, 3), (3, 4))
einsum_case("bij,bjk->bik", (2, 3, 4), (2, 4, 2))
einsum_case("ij->ji", (2, 3))
einsum_case("ij->", (2, 3))
einsum_case("ij->j", (2, 3))
einsum_case("i,i->", (4,), (4,))
einsum_case("i,j->ij", (3,), (2,))
einsum_case("ijk,ikl->jl", (2, 3, 4), (2, 4, 5))
einsum_case("bhqd,bhkd->bhqk", (1, 2, 3, 4), (1, 2, 5, 4))
einsum_case("ij,ij->ij", (2, 3), (2, 3))
einsum_case("ab,bc,cd->ad", (2, 3), (3, 4), (4, 2))
einsum_case("i->i", (0,))
einsum_case(",->", (), ())
einsum_case("ij,kj->ik", (0, 3), (2, 3))
einsum_case(" i j , j k -> i k ", (2, 3), (3, 2))
einsum_case("ii->i", (3, 3), err="repeated index 'i' in operand 0")
einsum_case("ij,jk->ik", (2, 3), (4, 2), err="index 'j' has sizes 3 and 4")
einsum_case("ij->k", (2, 3), err="output index 'k' is in no operand")
einsum_case("...ij->ij", (2, 3), err="ellipsis")


# ---- output ----
def cval(v):
    v = float(v)
    if math.isnan(v):
        return "NAN"
    if math.isinf(v):
        return "INFINITY" if v > 0 else "-INFINITY"
    return repr(v)


def arr(name, vals, ctype):
    vals = list(vals)
    if not vals:
        return f"static const {ctype} {name}[1] = {{0}};"
    toks = [cval(v) if ctype == "double" else str(int(v)) for v in vals]
    lines, line = [], "    "
    for t in toks:
        if len(line) + len(t) + 2 > 96:
            lines.append(line.rstrip())
            line = "    "
        line += t + ", "
    lines.append(line.rstrip())
    return f"static const {ctype} {name}[{len(vals)}] = {{\n" + "\n".join(lines) + "\n};"


def dims(shape):
    return "{" + ", ".join(str(int(d)) for d in shape) + "}" if len(shape) else "{0}"


def cint(v):
    v = int(v)
    if v == INT64_MIN:
        return "INT64_MIN"
    if v == INT64_MAX:
        return "INT64_MAX"
    return str(v)


def cstr(s):
    return "NULL" if s is None else '"' + s.replace('"', '\\"') + '"'


OPS = ["SLICE_STEP", "FLIP", "ROLL", "PAD", "REPEAT", "TILE", "TRIL", "TRIU", "ONE_HOT",
       "MASKED_FILL", "SCATTER", "SCATTER_ADD", "INDEX_ADD", "GATHER_ND", "STACK", "SPLIT",
       "CHUNK"]

out = []
out.append("/* movement_reference.h — generated by gen_movement_reference.py; do not edit.")
out.append(" * Inputs and expected outputs (numpy / PyTorch 1.13 CPU, see the script's header) for")
out.append(" * tests/unit/backends/movement_ops.c. */")
out.append("#ifndef TD_TESTS_MOVEMENT_REFERENCE_H")
out.append("#define TD_TESTS_MOVEMENT_REFERENCE_H")
out.append("#include <math.h>\n#include <stdbool.h>\n#include <stddef.h>\n#include <stdint.h>\n")
out.append("enum mv_op { " + ", ".join(f"MV_{o}" for o in OPS) + " };\n")
out.append("""typedef struct mv_case {
    const char *name;
    int op;
    int rank;                 /* x (STACK: each input's shape) */
    int64_t dims[8];
    const double *x;
    int irank;                /* index (-1: none) */
    int64_t idims[8];
    const int64_t *index;
    int srank;                /* src, or masked_fill's mask as 0/1 (-1: none) */
    int64_t sdims[8];
    const double *src;
    int np;                   /* integer list: slice starts+stops+steps, shifts, pads, repeats,
                               * split sizes, chunk count + lengths */
    int64_t p[24];
    int nax;                  /* axes list (-1: NULL) */
    int ax[8];
    int axis, mode;
    int64_t k;                /* tril/triu diagonal, one_hot classes, stack count, chunks */
    double value;
    int orank;
    int64_t odims[8];
    int64_t nwant;
    const double *want;
    bool f32_only;
    const char *err;          /* refused at record time: a substring of td_last_error */
    const char *err_exec;     /* fails at execution (TD_ERANGE): the exact message's tail */
} mv_case;
""")
for i, c in enumerate(CASES):
    out.append(arr(f"mv_x{i}", c["x"].reshape(-1), "double"))
    out.append(arr(f"mv_w{i}", c["want"].reshape(-1), "double"))
    if "index" in c:
        out.append(arr(f"mv_i{i}", np.asarray(c["index"]).reshape(-1), "int64_t"))
    if "src" in c:
        out.append(arr(f"mv_s{i}", np.asarray(c["src"], dtype=np.float64).reshape(-1), "double"))
out.append("\nstatic const mv_case mv_cases[] = {")
for i, c in enumerate(CASES):
    xshape = c.get("xshape", c["x"].shape)
    idx = np.asarray(c["index"]) if "index" in c else None
    src = np.asarray(c["src"]) if "src" in c else None
    p = [int(v) for v in c.get("p", [])]
    ax = c.get("ax", [])
    nax = -1 if ("ax" in c and c["ax"] is None) else len(ax or [])
    ax = ax or []
    want = c["want"]
    fields = [
        cstr(c["name"]), "MV_" + c["op"], str(len(xshape)), dims(xshape), f"mv_x{i}",
        str(idx.ndim if idx is not None else -1), dims(idx.shape if idx is not None else ()),
        f"mv_i{i}" if idx is not None else "NULL",
        str(src.ndim if src is not None else -1), dims(src.shape if src is not None else ()),
        f"mv_s{i}" if src is not None else "NULL",
        str(len(p)), "{" + ", ".join(cint(v) for v in p) + "}" if p else "{0}",
        str(nax), "{" + ", ".join(str(v) for v in ax) + "}" if ax else "{0}",
        str(c.get("axis", 0)), str(c.get("mode", 0)), cint(c.get("k", 0)),
        cval(c.get("value", 0.0)), str(want.ndim), dims(want.shape), str(want.size),
        f"mv_w{i}", "true" if c.get("f32_only") else "false", cstr(c.get("err")),
        cstr(c.get("err_exec")),
    ]
    out.append("    {" + ", ".join(fields) + "},")
out.append("};\n")

out.append("""typedef struct einsum_case {
    const char *eq;
    int n;
    int rank[3];
    int64_t dims[3][8];
    const double *x[3];
    int orank;
    int64_t odims[8];
    int64_t nwant;
    const double *want;
    const char *err;
} einsum_case;
""")
for i, c in enumerate(EINSUM):
    for j, v in enumerate(c["xs"]):
        out.append(arr(f"es_x{i}_{j}", v.reshape(-1), "double"))
    out.append(arr(f"es_w{i}", c["want"].reshape(-1), "double"))
out.append("static const einsum_case einsum_cases[] = {")
for i, c in enumerate(EINSUM):
    n = len(c["xs"])
    ranks = [v.ndim for v in c["xs"]] + [0] * (3 - n)
    dl = [dims(v.shape) for v in c["xs"]] + ["{0}"] * (3 - n)
    xl = [f"es_x{i}_{j}" for j in range(n)] + ["NULL"] * (3 - n)
    w = c["want"]
    out.append("    {" + ", ".join([cstr(c["eq"]), str(n), "{" + ", ".join(map(str, ranks)) + "}",
                                     "{" + ", ".join(dl) + "}", "{" + ", ".join(xl) + "}",
                                     str(w.ndim), dims(w.shape), str(w.size), f"es_w{i}",
                                     cstr(c["err"])]) + "},")
out.append("};\n#endif")
print("\n".join(out))

#!/usr/bin/env python3
"""Generate conv_reference.h: inputs and float64 expected values for the convolution,
pooling and interpolation ops of issue 13 item 4 (td_conv, td_conv_transpose,
td_conv_input_grad, td_conv_weight_grad, td_max_pool (+ indices), td_max_pool_backward,
td_avg_pool, td_avg_pool_backward, td_adaptive_avg_pool (+ backward), td_interpolate),
checked by tests/unit/backends/cpu_conv.c.

References are PyTorch CPU in float64: torch.nn.functional.conv1d/2d/3d (padding="same"
where the case says so), conv_transpose1d/2d, max_pool1d/2d(return_indices=True),
avg_pool1d/2d, adaptive_avg_pool1d/2d, interpolate; the gradient ops' references are
torch.autograd.grad of the forward op with a given dy (conv's input gradient, weight
gradient, max/avg/adaptive pooling backward).

Inputs are multiples of 1/16 in [-4, 4) (exact in f16, bf16, f32 and f64), so every
product of two is a multiple of 2^-8 and the conv sums here are exact in f32. Max-pool
inputs are distinct values (no ties) so the indices are unique. Run from anywhere and
check the output in:

    /usr/bin/python3 tests/unit/backends/gen_conv_reference.py > tests/unit/backends/conv_reference.h
"""
import math

import numpy as np
import torch
import torch.nn.functional as F

RNG = np.random.default_rng(20261202)
OPS = ["CONV", "CONV_T", "CONV_IGRAD", "CONV_WGRAD", "MAXPOOL", "MAXPOOL_BWD", "AVGPOOL",
       "AVGPOOL_BWD", "ADAPTIVE", "ADAPTIVE_BWD", "INTERP"]


def grid(shape):
    return RNG.integers(-64, 64, size=shape).astype(np.float64) / 16.0


def distinct(shape):
    n = int(np.prod(shape))
    v = RNG.permutation(np.arange(n) - n // 2).astype(np.float64) / 16.0
    return v.reshape(shape)


def cval(v):
    v = float(v)
    if math.isnan(v):
        return "NAN"
    if math.isinf(v):
        return "INFINITY" if v > 0 else "-INFINITY"
    return repr(v)


cases = []
arrays = []


def arr(name, a):
    flat = np.asarray(a, dtype=np.float64).reshape(-1)
    arrays.append((name, flat))
    return name


def pad3(v, n, fill):
    v = list(v) + [fill] * (3 - len(v))
    return v[:3]


def add(name, op, x, w=None, b=None, want=None, **kw):
    i = len(cases)
    c = {"name": name, "op": op, "x": x, "w": w, "b": b, "want": want}
    c.update(kw)
    c["_i"] = i
    cases.append(c)


def t(a):
    return torch.tensor(a, dtype=torch.float64)


def conv_fn(nsp):
    return [None, F.conv1d, F.conv2d, F.conv3d][nsp]


def conv_case(name, N, C, Co, L, k, stride=1, pad=0, dil=1, groups=1, bias=True, same=False,
              pad_lohi=None):
    nsp = len(L)
    x = grid([N, C] + L)
    w = grid([Co, C // groups] + k)
    b = grid([Co]) if bias else None
    st = [stride] * nsp if isinstance(stride, int) else stride
    dl = [dil] * nsp if isinstance(dil, int) else dil
    if same:
        y = conv_fn(nsp)(t(x), t(w), t(b) if bias else None, stride=1, padding="same",
                         dilation=dl, groups=groups)
        lo = [0] * nsp
        hi = [0] * nsp
    elif pad_lohi is not None:
        lo, hi = pad_lohi
        padarg = []
        for i in reversed(range(nsp)):
            padarg += [lo[i], hi[i]]
        xp = F.pad(t(x), padarg)
        y = conv_fn(nsp)(xp, t(w), t(b) if bias else None, stride=st, dilation=dl, groups=groups)
    else:
        pd = [pad] * nsp if isinstance(pad, int) else pad
        lo, hi = pd, pd
        y = conv_fn(nsp)(t(x), t(w), t(b) if bias else None, stride=st, padding=pd, dilation=dl,
                         groups=groups)
    y = y.numpy()
    add(name, "CONV", x, w, b, y, stride=st, dil=dl, lo=lo, hi=hi, groups=groups, same=same)
    return x, w, y, st, dl, lo, hi


def grads_case(name, N, C, Co, L, k, stride=1, pad=0, dil=1, groups=1, same=False):
    """input and weight gradients of conv (no bias) for a random dy"""
    nsp = len(L)
    x = grid([N, C] + L)
    w = grid([Co, C // groups] + k)
    st = [stride] * nsp if isinstance(stride, int) else stride
    dl = [dil] * nsp if isinstance(dil, int) else dil
    xt = t(x).requires_grad_(True)
    wt = t(w).requires_grad_(True)
    if same:
        y = conv_fn(nsp)(xt, wt, None, stride=1, padding="same", dilation=dl, groups=groups)
        lo = hi = [0] * nsp
    else:
        pd = [pad] * nsp if isinstance(pad, int) else pad
        lo = hi = pd
        y = conv_fn(nsp)(xt, wt, None, stride=st, padding=pd, dilation=dl, groups=groups)
    dy = grid(list(y.shape))
    gx, gw = torch.autograd.grad(y, (xt, wt), t(dy))
    add(name + " input grad", "CONV_IGRAD", dy, w, None, gx.numpy(), stride=st, dil=dl, lo=lo,
        hi=hi, groups=groups, same=same, size=L)
    add(name + " weight grad", "CONV_WGRAD", x, dy, None, gw.numpy(), stride=st, dil=dl, lo=lo,
        hi=hi, groups=groups, same=same, size=k)


def convt_case(name, N, C, Co, L, k, stride=1, pad=0, outpad=0, dil=1, groups=1, bias=True):
    nsp = len(L)
    x = grid([N, C] + L)
    w = grid([C, Co // groups] + k)
    b = grid([Co]) if bias else None
    f = [None, F.conv_transpose1d, F.conv_transpose2d][nsp]
    st = [stride] * nsp if isinstance(stride, int) else stride
    dl = [dil] * nsp if isinstance(dil, int) else dil
    pd = [pad] * nsp if isinstance(pad, int) else pad
    op_ = [outpad] * nsp if isinstance(outpad, int) else outpad
    y = f(t(x), t(w), t(b) if bias else None, stride=st, padding=pd, output_padding=op_,
          groups=groups, dilation=dl).numpy()
    add(name, "CONV_T", x, w, b, y, stride=st, dil=dl, lo=pd, hi=pd, outpad=op_, groups=groups)


def pool_case(name, kind, N, C, L, k, stride=None, pad=0, dil=1, ceil=False, cip=True):
    nsp = len(L)
    x = distinct([N, C] + L)
    kk = [k] * nsp if isinstance(k, int) else k
    st = kk if stride is None else ([stride] * nsp if isinstance(stride, int) else stride)
    pd = [pad] * nsp if isinstance(pad, int) else pad
    dl = [dil] * nsp if isinstance(dil, int) else dil
    xt = t(x).requires_grad_(True)
    if kind == "max":
        f = [None, F.max_pool1d, F.max_pool2d][nsp]
        y, idx = f(xt, kk, st, pd, dl, ceil_mode=ceil, return_indices=True)
    else:
        f = [None, F.avg_pool1d, F.avg_pool2d][nsp]
        y = f(xt, kk, st, pd, ceil_mode=ceil, count_include_pad=cip)
        idx = None
    dy = grid(list(y.shape))
    (gx,) = torch.autograd.grad(y, (xt,), t(dy))
    common = dict(kernel=kk, pstride=st, ppad=pd, pdil=dl, ceil=ceil, excl=not cip)
    if kind == "max":
        add(name, "MAXPOOL", x, None, None, y.detach().numpy(), idx=idx.numpy(), **common)
        add(name + " backward", "MAXPOOL_BWD", dy, None, None, gx.numpy(), idx=idx.numpy(),
            size=L, **common)
    else:
        add(name, "AVGPOOL", x, None, None, y.detach().numpy(), **common)
        add(name + " backward", "AVGPOOL_BWD", dy, None, None, gx.numpy(), size=L, **common)


def adaptive_case(name, N, C, L, O):
    nsp = len(L)
    x = grid([N, C] + L)
    xt = t(x).requires_grad_(True)
    f = [None, F.adaptive_avg_pool1d, F.adaptive_avg_pool2d][nsp]
    y = f(xt, O)
    dy = grid(list(y.shape))
    (gx,) = torch.autograd.grad(y, (xt,), t(dy))
    add(name, "ADAPTIVE", x, None, None, y.detach().numpy(), size=O)
    add(name + " backward", "ADAPTIVE_BWD", dy, None, None, gx.numpy(), size=L)


def interp_case(name, N, C, L, O, mode, align=False):
    x = grid([N, C] + L)
    if mode == "nearest":
        y = F.interpolate(t(x), size=O, mode="nearest")
    else:
        m = "linear" if len(L) == 1 else "bilinear"
        y = F.interpolate(t(x), size=O, mode=m, align_corners=align)
    add(name, "INTERP", x, None, None, y.numpy(), size=O, mode=0 if mode == "nearest" else 1,
        align=align)


# ---- the cases ----
conv_case("conv1d basic", 2, 3, 4, [9], [3])
conv_case("conv1d stride 3 > kernel 2", 2, 2, 3, [11], [2], stride=3, pad=1)
conv_case("conv1d dilation 2 pad 2", 1, 2, 2, [10], [3], dil=2, pad=2)
conv_case("conv1d same even kernel 4", 2, 2, 3, [7], [4], same=True)
conv_case("conv1d same even kernel 2 dilation 3", 1, 3, 2, [8], [2], dil=3, same=True)
conv_case("conv2d basic bias", 2, 3, 4, [6, 5], [3, 3], pad=1)
conv_case("conv2d stride 2 no bias", 2, 4, 6, [7, 8], [3, 2], stride=[2, 3], pad=[1, 0],
          bias=False)
conv_case("conv2d groups 2", 2, 4, 6, [5, 6], [3, 3], groups=2, pad=1)
conv_case("conv2d depthwise", 1, 4, 4, [6, 6], [3, 3], groups=4, pad=1, stride=2)
conv_case("conv2d depthwise x2 multiplier", 2, 3, 6, [5, 5], [2, 2], groups=3)
conv_case("conv2d dilation 2x1", 1, 2, 3, [9, 7], [3, 2], dil=[2, 1], pad=[2, 1])
conv_case("conv2d same even kernel 2x4", 2, 3, 2, [5, 6], [2, 4], same=True)
conv_case("conv2d 1x1", 2, 5, 3, [4, 4], [1, 1])
conv_case("conv2d 1x1 stride 2", 2, 5, 3, [5, 5], [1, 1], stride=2)
conv_case("conv2d asymmetric pads", 1, 2, 2, [5, 4], [3, 3], pad_lohi=([0, 2], [1, 0]))
conv_case("conv3d basic", 1, 2, 3, [4, 5, 4], [2, 3, 2], pad=[1, 1, 0], stride=[1, 2, 1])
conv_case("conv3d groups same", 2, 4, 2, [3, 4, 4], [2, 2, 3], groups=2, same=True)
grads_case("conv1d s2 p1", 2, 3, 4, [10], [3], stride=2, pad=1)
grads_case("conv2d s2 p1 g2", 2, 4, 6, [7, 6], [3, 3], stride=2, pad=1, groups=2)
grads_case("conv2d s3 > k2 dil", 1, 2, 3, [9, 8], [2, 2], stride=3, dil=[2, 1])
grads_case("conv2d same even", 2, 2, 3, [5, 6], [2, 4], same=True)
grads_case("conv2d depthwise", 2, 3, 3, [6, 5], [3, 3], groups=3, pad=1)
grads_case("conv3d", 1, 2, 2, [4, 4, 3], [2, 2, 2], stride=[2, 1, 1], pad=[1, 0, 1])
convt_case("conv_transpose1d", 2, 3, 2, [5], [3], stride=2, pad=1, outpad=1)
convt_case("conv_transpose1d dilation", 1, 2, 4, [6], [2], stride=1, dil=3, groups=2)
convt_case("conv_transpose2d", 2, 4, 6, [4, 3], [3, 3], stride=2, pad=1, outpad=[1, 0],
           groups=2)
convt_case("conv_transpose2d stride 3 > k2", 1, 2, 3, [3, 4], [2, 2], stride=3, bias=False)
convt_case("conv_transpose2d outpad < dilation", 1, 2, 2, [3, 3], [2, 3], stride=1, dil=2,
           pad=[0, 1], outpad=1)
pool_case("max_pool1d k3 s2", "max", 2, 3, [9], 3, 2)
pool_case("max_pool1d pad dil ceil", "max", 1, 2, [10], 3, 2, pad=1, dil=2, ceil=True)
pool_case("max_pool2d k2", "max", 2, 3, [6, 6], 2)
pool_case("max_pool2d k3 s2 p1", "max", 2, 2, [7, 8], 3, 2, pad=1)
pool_case("max_pool2d ceil", "max", 1, 2, [7, 6], [3, 2], [2, 2], ceil=True)
pool_case("max_pool2d stride 3 > k2 dil 2", "max", 1, 2, [9, 9], 2, 3, dil=2)
pool_case("avg_pool1d k3 s2 p1", "avg", 2, 3, [9], 3, 2, pad=1)
pool_case("avg_pool1d exclude pad ceil", "avg", 1, 2, [8], 3, 2, pad=1, ceil=True, cip=False)
pool_case("avg_pool2d k2", "avg", 2, 3, [6, 6], 2)
pool_case("avg_pool2d k3 s2 p1", "avg", 2, 2, [7, 8], 3, 2, pad=1)
pool_case("avg_pool2d k3 s2 p1 exclude pad", "avg", 2, 2, [7, 8], 3, 2, pad=1, cip=False)
pool_case("avg_pool2d ceil include pad", "avg", 1, 2, [7, 6], 3, 2, pad=1, ceil=True)
pool_case("avg_pool2d stride 3 > k2", "avg", 1, 2, [8, 7], 2, 3)
adaptive_case("adaptive_avg_pool1d 10 -> 4", 2, 3, [10], [4])
adaptive_case("adaptive_avg_pool1d 3 -> 7", 1, 2, [3], [7])
adaptive_case("adaptive_avg_pool2d 7x5 -> 3x2", 2, 2, [7, 5], [3, 2])
adaptive_case("adaptive_avg_pool2d 4x4 -> 1x1", 2, 3, [4, 4], [1, 1])
adaptive_case("adaptive_avg_pool2d 3x5 -> 6x4", 1, 2, [3, 5], [6, 4])
interp_case("nearest1d 5 -> 12", 2, 2, [5], [12], "nearest")
interp_case("nearest1d 7 -> 3", 1, 2, [7], [3], "nearest")
interp_case("nearest2d 3x4 -> 6x8", 1, 2, [3, 4], [6, 8], "nearest")
interp_case("nearest2d 5x3 -> 7x2", 2, 2, [5, 3], [7, 2], "nearest")
interp_case("linear1d 5 -> 9", 2, 2, [5], [9], "linear")
interp_case("linear1d 5 -> 9 align", 2, 2, [5], [9], "linear", True)
interp_case("bilinear 3x4 -> 7x5", 1, 2, [3, 4], [7, 5], "linear")
interp_case("bilinear 3x4 -> 7x5 align", 1, 2, [3, 4], [7, 5], "linear", True)
interp_case("bilinear 6x5 -> 4x3", 2, 2, [6, 5], [4, 3], "linear")
interp_case("bilinear 6x5 -> 4x1 align", 2, 1, [6, 5], [4, 1], "linear", True)
interp_case("bilinear 2x2 -> 1x3", 1, 1, [2, 2], [1, 3], "linear")


# ---- output ----
def dims5(shape):
    s = list(shape) + [0] * (5 - len(shape))
    return "{" + ", ".join(str(int(v)) for v in s) + "}"


def l3(v, fill=0):
    if v is None:
        v = []
    v = [int(a) for a in v] + [fill] * (3 - len(v))
    return "{" + ", ".join(str(a) for a in v) + "}"


print("/* conv_reference.h — GENERATED by tests/unit/backends/gen_conv_reference.py")
print(" * (PyTorch %s CPU, float64). Do not edit: rerun `/usr/bin/python3" % torch.__version__)
print(" * tests/unit/backends/gen_conv_reference.py > tests/unit/backends/conv_reference.h`")
print(" * and check the result in. */")
print("#ifndef TD_TESTS_CONV_REFERENCE_H")
print("#define TD_TESTS_CONV_REFERENCE_H")
print("#include <stdbool.h>")
print("#include <stddef.h>")
print("#include <stdint.h>")
print()
print("enum conv_ref_op { " + ", ".join("CREF_" + o for o in OPS) + " };")
print("""
typedef struct conv_ref {
    const char *name;
    int op;                   /* enum conv_ref_op */
    int rank;                 /* of x (dy for the backward ops) */
    int64_t x_dims[5], w_dims[5], want_dims[5];
    int64_t groups, stride[3], dil[3], lo[3], hi[3], outpad[3];
    bool same;
    int64_t kernel[3], pstride[3], ppad[3], pdil[3];
    bool ceil, excl;
    int64_t size[3];          /* input size (gradients), output size (adaptive, interpolate), kernel (weight grad) */
    int mode;
    bool align;
    int64_t n_x, n_w, n_want;
    const double *x, *w, *b, *want, *idx; /* w: weight, or the weight gradient's dy */
} conv_ref;
""")
for c in cases:
    i = c["_i"]
    for key in ("x", "w", "b", "want", "idx"):
        if c.get(key) is not None:
            flat = np.asarray(c[key], dtype=np.float64).reshape(-1)
            print("static const double cref%d_%s[%d] = {%s};" % (i, key, max(flat.size, 1),
                  ", ".join(cval(v) for v in flat) if flat.size else "0"))
print()
print("static const conv_ref conv_refs[] = {")
for c in cases:
    i = c["_i"]
    x = np.asarray(c["x"])
    w = np.asarray(c["w"]) if c.get("w") is not None else np.zeros([0])
    want = np.asarray(c["want"])
    g = lambda k: "cref%d_%s" % (i, k) if c.get(k) is not None else "NULL"
    print("    {%s, CREF_%s, %d, %s, %s, %s, %d, %s, %s, %s, %s, %s, %d, %s, %s, %s, %s, %d, %d, "
          "%s, %d, %d, %d, %d, %d, %s, %s, %s, %s, %s}," % (
              '"' + c["name"] + '"', c["op"], x.ndim, dims5(x.shape),
              dims5(w.shape) if c.get("w") is not None else dims5([]), dims5(want.shape),
              c.get("groups", 1), l3(c.get("stride"), 1), l3(c.get("dil"), 1), l3(c.get("lo")),
              l3(c.get("hi")), l3(c.get("outpad")), 1 if c.get("same") else 0,
              l3(c.get("kernel")), l3(c.get("pstride")), l3(c.get("ppad")), l3(c.get("pdil"), 1),
              1 if c.get("ceil") else 0, 1 if c.get("excl") else 0, l3(c.get("size")),
              c.get("mode", 0), 1 if c.get("align") else 0, x.size, w.size, want.size,
              g("x"), g("w"), g("b"), g("want"), g("idx")))
print("};")
print("#define N_CONV_REFS (sizeof conv_refs / sizeof conv_refs[0])")
print("#endif")

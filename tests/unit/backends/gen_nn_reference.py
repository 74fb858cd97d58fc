#!/usr/bin/env python3
"""Generate nn_reference.h: inputs and float64 expected values for the normalisations, their
backward ops, scaled dot-product attention and the losses of issue 13 item 4, checked by
tests/unit/backends/cpu_nn.c.

References are PyTorch CPU in float64: torch.nn.functional.layer_norm, group_norm,
batch_norm (training=False for given statistics), torch.var_mean for the batch statistics,
nll_loss and cross_entropy (label_smoothing); gradients from torch.autograd of
sum(dy * forward(x)). PyTorch 1.13 has neither rms_norm nor scaled_dot_product_attention:
those are written out from their papers' formulas in float64 torch ops
(x * rsqrt(mean(x^2) + eps) * w; softmax(q k^T * scale + mask) v with the causal mask
torch.tril(ones(L, S)), top-left aligned as PyTorch 2's is_causal) and differentiated by
autograd the same way.

Inputs are multiples of 1/16 in [-4, 4) (variances in (0.25, 4]), exact in f16, bf16, f32 and
f64, so the C test feeds the same values to every float dtype. Run once and check the
output in:

    /usr/bin/python3 tests/unit/backends/gen_nn_reference.py > tests/unit/backends/nn_reference.h

(Debian 12: the system python with python3-numpy and PyTorch 1.13.)
"""
import math

import numpy as np
import torch
import torch.nn.functional as F

RNG = np.random.default_rng(20261202)
OUT = []
NAMES = {}


def grid(shape, lo=-64, hi=64):
    return RNG.integers(lo, hi, size=shape).astype(np.float64) / 16.0


def pos(shape):
    return RNG.integers(5, 65, size=shape).astype(np.float64) / 16.0


def arr(name, a, ctype="double"):
    a = np.asarray(a).reshape(-1)
    key = f"{name}_{len(NAMES)}"
    NAMES[key] = True
    if a.size == 0:
        OUT.append(f"static const {ctype} {key}[1] = {{0}};")
        return key
    if ctype == "double":
        vals = []
        for v in a:
            v = float(v)
            if math.isnan(v):
                vals.append("NAN")
            elif math.isinf(v):
                vals.append("INFINITY" if v > 0 else "-INFINITY")
            else:
                vals.append(repr(v))
    else:
        vals = [str(int(v)) for v in a]
    body = ",\n    ".join(", ".join(vals[i:i + 6]) for i in range(0, len(vals), 6))
    OUT.append(f"static const {ctype} {key}[{a.size}] = {{\n    {body}}};")
    return key


def t(a, grad=False):
    return torch.tensor(a, dtype=torch.float64, requires_grad=grad)


NN_CASES = []


def rms(x, naxes, w, eps):
    dims = tuple(range(x.dim() - naxes, x.dim()))
    y = x * torch.rsqrt((x * x).mean(dim=dims, keepdim=True) + eps)
    return y * w if w is not None else y


def forward(op, x, p, w, b, eps, mean=None, var=None):
    if op in ("LN", "LN_BWD"):
        return F.layer_norm(x, x.shape[x.dim() - p:], w, b, eps)
    if op in ("RMS", "RMS_BWD"):
        return rms(x, p, w, eps)
    if op in ("GN", "GN_BWD"):
        return F.group_norm(x, p, w, b, eps)
    if op == "BN_BWD":  # training: batch statistics
        return F.batch_norm(x, None, None, w, b, training=True, eps=eps)
    return F.batch_norm(x, mean, var, w, b, training=False, eps=eps)  # BN, BN_BWD_INF


def nn_case(name, op, dims, p=0, eps=1e-5, has_w=True, has_b=True, special=None):
    x = grid(dims)
    if special is not None:
        special(x)
    if op in ("GN", "GN_BWD", "BN", "BN_BWD", "BN_BWD_INF", "BN_STATS"):
        pshape = (dims[1],)
    else:
        pshape = tuple(dims[len(dims) - p:])
    w = grid(pshape) if has_w else None
    b = grid(pshape) if has_b and op not in ("RMS", "RMS_BWD") else None
    mean = grid(pshape) if op in ("BN", "BN_BWD_INF") else None
    var = pos(pshape) if op in ("BN", "BN_BWD_INF") else None
    dy = grid(dims) if op.endswith("_BWD") or op.endswith("_INF") else None
    rec = dict(name=name, op=op, dims=dims, p=p, eps=eps, has_w=has_w, has_b=b is not None,
               nparam=int(np.prod(pshape)) if len(pshape) else 1, x=x, w=w, b=b, mean=mean,
               var=var, dy=dy, y2=None, y3=None, n2=0)
    if op == "BN_STATS":
        xt = t(x)
        v, m = torch.var_mean(xt, dim=[d for d in range(len(dims)) if d != 1], unbiased=False)
        vu = torch.var(xt, dim=[d for d in range(len(dims)) if d != 1], unbiased=True)
        rec.update(y=m.numpy(), y2=v.numpy(), y3=vu.numpy(), n2=dims[1])
    elif dy is None:
        y = forward(op, t(x), p, None if w is None else t(w), None if b is None else t(b), eps,
                    None if mean is None else t(mean), None if var is None else t(var))
        rec.update(y=y.detach().numpy())
    else:
        xt = t(x, True)
        wt = t(w, True) if w is not None else None
        bt = t(b, True) if op not in ("RMS_BWD",) else None
        if bt is None or op == "RMS_BWD":
            bt = None
        # the parameter gradients are asked for with and without weight: make leaves of ones
        wl = wt if wt is not None else t(np.ones(pshape), True)
        bl = bt if bt is not None else (t(np.zeros(pshape), True) if op != "RMS_BWD" else None)
        y = forward(op, xt, p, wl, bl, eps, None if mean is None else t(mean),
                    None if var is None else t(var))
        (y * t(dy)).sum().backward()
        rec.update(y=xt.grad.numpy(), y2=wl.grad.numpy(),
                   y3=bl.grad.numpy() if bl is not None else None,
                   n2=int(np.prod(pshape)))
        rec["b"] = None
        rec["has_b"] = False
    NN_CASES.append(rec)


def nan_row0(x):
    x[0, 1] = np.nan


def inf_row1(x):
    x[1, 2] = np.inf


def const_row0(x):
    x[0, :] = 0.75


nn_case("layer_norm [4, 8] last dim, weight and bias", "LN", (4, 8), 1)
nn_case("layer_norm [2, 3, 5] last 2 dims, weight only", "LN", (2, 3, 5), 2, has_b=False)
nn_case("layer_norm [3, 6] no affine, eps 0.5", "LN", (3, 6), 1, eps=0.5, has_w=False,
        has_b=False)
nn_case("layer_norm [2, 2, 3] all dims", "LN", (2, 2, 3), 3)
nn_case("layer_norm [5] rank 1", "LN", (5,), 1, has_w=False, has_b=False)
nn_case("layer_norm [0, 4] empty", "LN", (0, 4), 1)
nn_case("layer_norm [3, 0] empty rows", "LN", (3, 0), 1)
nn_case("layer_norm [3, 4] NaN in row 0, inf in row 1", "LN", (3, 4), 1,
        special=lambda x: (nan_row0(x), inf_row1(x)))
nn_case("layer_norm [2, 4] constant row, eps 0", "LN", (2, 4), 1, eps=0.0, has_w=False,
        has_b=False, special=const_row0)
nn_case("layer_norm [2, 300] long rows", "LN", (2, 300), 1)
nn_case("rms_norm [4, 8] weight", "RMS", (4, 8), 1, eps=1e-6)
nn_case("rms_norm [2, 3, 4] last 2 dims", "RMS", (2, 3, 4), 2, has_w=False)
nn_case("rms_norm [3, 4] NaN in row 0", "RMS", (3, 4), 1, special=nan_row0)
nn_case("group_norm [2, 6, 5] 3 groups", "GN", (2, 6, 5), 3)
nn_case("group_norm [3, 4] 2 groups, rank 2", "GN", (3, 4), 2, has_w=False, has_b=False)
nn_case("group_norm [2, 4, 2, 3] 4 groups, weight only", "GN", (2, 4, 2, 3), 4, has_b=False)
nn_case("group_norm [2, 3, 4] 1 group", "GN", (2, 3, 4), 1)
nn_case("group_norm [0, 4, 3] empty", "GN", (0, 4, 3), 2)
nn_case("batch_norm [4, 3, 5] given statistics", "BN", (4, 3, 5))
nn_case("batch_norm [6, 2] rank 2, no affine", "BN", (6, 2), has_w=False, has_b=False)
nn_case("batch_norm [2, 3, 2, 2] weight only", "BN", (2, 3, 2, 2), has_b=False)
nn_case("batch_norm_stats [4, 3, 5]", "BN_STATS", (4, 3, 5))
nn_case("batch_norm_stats [5, 2]", "BN_STATS", (5, 2))
nn_case("layer_norm_backward [4, 8] weight", "LN_BWD", (4, 8), 1)
nn_case("layer_norm_backward [2, 3, 5] last 2 dims, no weight", "LN_BWD", (2, 3, 5), 2,
        has_w=False)
nn_case("rms_norm_backward [4, 8] weight", "RMS_BWD", (4, 8), 1, eps=1e-6)
nn_case("rms_norm_backward [3, 2, 4] last 2 dims, no weight", "RMS_BWD", (3, 2, 4), 2,
        has_w=False)
nn_case("group_norm_backward [2, 6, 5] 3 groups, weight", "GN_BWD", (2, 6, 5), 3)
nn_case("group_norm_backward [2, 4, 3] 2 groups, no weight", "GN_BWD", (2, 4, 3), 2,
        has_w=False)
nn_case("batch_norm_backward [4, 3, 5] training, weight", "BN_BWD", (4, 3, 5))
nn_case("batch_norm_backward [6, 2] training, no weight", "BN_BWD", (6, 2), has_w=False)
nn_case("batch_norm_backward [4, 3, 5] given statistics, weight", "BN_BWD_INF", (4, 3, 5))

ATTN = []


def attn_case(name, qd, kd, vd, mask=None, md=None, causal=False, scale=0.0):
    q, k, v = grid(qd) / 2, grid(kd) / 2, grid(vd)
    m = None
    if mask == "bool":
        m = RNG.integers(0, 4, size=md) > 0
        m.reshape(-1)[0] = True
    elif mask == "float":
        m = grid(md)
    sc = scale if scale != 0.0 else 1.0 / math.sqrt(qd[-1])
    s = t(q) @ t(k).transpose(-1, -2) * sc
    if causal:
        L, S = qd[-2], kd[-2]
        s = s.masked_fill(~torch.tril(torch.ones(L, S, dtype=torch.bool)), -math.inf)
    if mask == "bool":
        s = s.masked_fill(~torch.tensor(m), -math.inf)
    elif mask == "float":
        s = s + t(m)
    y = torch.softmax(s, dim=-1) @ t(v)
    ATTN.append(dict(name=name, qd=qd, kd=kd, vd=vd, mask=mask, md=md, causal=causal,
                     scale=scale, q=q, k=k, v=v, m=m, y=y.numpy()))


attn_case("attention [2, 3, 4] x [2, 5, 4] x [2, 5, 6]", (2, 3, 4), (2, 5, 4), (2, 5, 6))
attn_case("attention causal [1, 4, 4] L = S", (1, 4, 4), (1, 4, 4), (1, 4, 3), causal=True)
attn_case("attention causal [2, 3, 5] L < S, scale 0.3", (2, 3, 5), (2, 6, 5), (2, 6, 2),
          causal=True, scale=0.3)
attn_case("attention bool mask [3, 5] broadcast", (2, 3, 4), (2, 5, 4), (2, 5, 3), "bool",
          (3, 5))
attn_case("attention float mask [1, 3, 5]", (2, 3, 4), (2, 5, 4), (2, 5, 3), "float", (1, 3, 5))
attn_case("attention batch broadcast [2, 2, 3, 4] x [2, 1, 5, 4]", (2, 2, 3, 4), (2, 1, 5, 4),
          (2, 1, 5, 2))


def masked_row_case():
    # row 1 of the bool mask all false: that row is NaN, as in PyTorch
    qd, kd, vd = (1, 2, 4), (1, 3, 4), (1, 3, 2)
    q, k, v = grid(qd), grid(kd), grid(vd)
    m = np.array([[True, False, True], [False, False, False]])
    s = (t(q) @ t(k).transpose(-1, -2) * 0.5).masked_fill(~torch.tensor(m), -math.inf)
    y = torch.softmax(s, dim=-1) @ t(v)
    ATTN.append(dict(name="attention fully masked row gives NaN", qd=qd, kd=kd, vd=vd,
                     mask="bool", md=(2, 3), causal=False, scale=0.0, q=q, k=k, v=v, m=m,
                     y=y.numpy()))


masked_row_case()


def block_cases():
    # shapes that cross the CPU kernel's blocks (64 queries, 256 keys), from their own
    # generator so the cases above keep their values
    global RNG
    saved, RNG = RNG, np.random.default_rng(20261205)
    attn_case("attention blocks causal [2, 70, 8] x [2, 300, 8]", (2, 70, 8), (2, 300, 8),
              (2, 300, 4), causal=True)
    attn_case("attention blocks causal L > S, float mask [1, 90]", (1, 150, 8), (1, 90, 8),
              (1, 90, 3), "float", (1, 90), causal=True, scale=0.2)
    attn_case("attention blocks bool mask [2, 1, 1, 260] broadcast", (1, 2, 65, 4),
              (2, 1, 260, 4), (260, 2), "bool", (2, 1, 1, 260))
    RNG = saved


block_cases()

LOSS = []


def loss_case(name, ce, ld, target, reduction, ignore=-100, smoothing=0.0):
    x = grid(ld)
    if not ce:
        x = torch.log_softmax(t(x), dim=1).numpy()
    tg = torch.tensor(np.array(target, dtype=np.int64).reshape([ld[0]] + list(ld[2:])))
    red = ["none", "mean", "sum"][reduction]
    if ce:
        y = F.cross_entropy(t(x), tg, reduction=red, ignore_index=ignore,
                            label_smoothing=smoothing)
    else:
        y = F.nll_loss(t(x), tg, reduction=red, ignore_index=ignore)
    LOSS.append(dict(name=name, ce=ce, ld=ld, x=x, target=tg.numpy(), reduction=reduction,
                     ignore=ignore, smoothing=smoothing, y=y.numpy()))


for red in range(3):
    rn = ["none", "mean", "sum"][red]
    loss_case(f"nll_loss [5, 4] {rn}, one ignored", False, (5, 4), [0, 3, -100, 1, 2], red)
    loss_case(f"cross_entropy [5, 4] {rn}", True, (5, 4), [0, 3, 2, 1, 2], red)
    loss_case(f"cross_entropy [5, 4] {rn}, smoothing 0.1, ignore_index 2", True, (5, 4),
              [0, 3, 2, 1, 2], red, ignore=2, smoothing=0.1)
    loss_case(f"cross_entropy [2, 3, 4] (N, C, d) {rn}, smoothing 0.25", True, (2, 3, 4),
              [0, 1, 2, 1, 2, -100, 0, 0], red, smoothing=0.25)
loss_case("nll_loss every target ignored: mean NaN", False, (3, 4), [-100, -100, -100], 1)
loss_case("cross_entropy [1, 3] smoothing 1", True, (1, 3), [1], 1, smoothing=1.0)

# ---- emit ----
print("/* nn_reference.h — generated by gen_nn_reference.py (PyTorch 1.13 CPU, float64); do not")
print(" * edit: rerun the script. */")
print("#ifndef TD_TESTS_NN_REFERENCE_H")
print("#define TD_TESTS_NN_REFERENCE_H")
print("#include <math.h>")
print("#include <stdbool.h>")
print("#include <stdint.h>")
print("#include <stddef.h>")
print("enum nn_ref_op { NN_LN, NN_RMS, NN_GN, NN_BN, NN_BN_STATS, NN_LN_BWD, NN_RMS_BWD, "
      "NN_GN_BWD, NN_BN_BWD, NN_BN_BWD_INF };")
rows = []
for c in NN_CASES:
    def opt(key):
        return arr(key, c[key]) if c[key] is not None else "NULL"
    xs = arr("x", c["x"])
    names = {k: opt(k) for k in ("w", "b", "mean", "var", "dy", "y2", "y3")}
    ys = arr("y", c["y"])
    d = list(c["dims"]) + [0] * (4 - len(c["dims"]))
    rows.append(f'    {{"{c["name"]}", NN_{c["op"]}, {len(c["dims"])}, {{{", ".join(map(str, d))}}}, '
                f'{c["p"]}, {c["eps"]!r}, {int(c["has_w"])}, {int(c["has_b"])}, {c["nparam"]}, '
                f'{xs}, {names["w"]}, {names["b"]}, {names["mean"]}, {names["var"]}, '
                f'{names["dy"]}, {ys}, {names["y2"]}, {names["y3"]}, {c["n2"]}}},')
arows = []
for c in ATTN:
    q, k, v = arr("q", c["q"]), arr("k", c["k"]), arr("v", c["v"])
    m = "NULL"
    if c["mask"] is not None:
        m = arr("m", np.asarray(c["m"], dtype=np.float64))
    y = arr("y", c["y"])

    def d4(d):
        d = list(d) + [0] * (4 - len(d))
        return "{" + ", ".join(map(str, d)) + "}"
    mk = {None: 0, "bool": 1, "float": 2}[c["mask"]]
    md = c["md"] if c["md"] is not None else ()
    arows.append(f'    {{"{c["name"]}", {len(c["qd"])}, {d4(c["qd"])}, {len(c["kd"])}, {d4(c["kd"])}, '
                 f'{len(c["vd"])}, {d4(c["vd"])}, {mk}, {len(md)}, {d4(md)}, '
                 f'{str(c["causal"]).lower()}, {c["scale"]!r}, {q}, {k}, {v}, {m}, {y}, '
                 f'{int(np.asarray(c["y"]).size)}}},')
lrows = []
for c in LOSS:
    x = arr("l", c["x"])
    tg = arr("t", c["target"], "int64_t")
    y = arr("y", np.asarray(c["y"], dtype=np.float64))
    d = list(c["ld"]) + [0] * (4 - len(c["ld"]))
    lrows.append(f'    {{"{c["name"]}", {str(c["ce"]).lower()}, {len(c["ld"])}, '
                 f'{{{", ".join(map(str, d))}}}, {x}, {tg}, {c["reduction"]}, {c["ignore"]}, '
                 f'{c["smoothing"]!r}, {y}, {int(np.asarray(c["y"]).size)}}},')
print("\n".join(OUT))
print("""
typedef struct nn_ref_case {
    const char *name;
    int op; /* enum nn_ref_op */
    int rank;
    int64_t dims[4];
    int64_t p; /* naxes (LN, RMS), groups (GN), unused (BN) */
    double eps;
    int has_w, has_b;
    int64_t nparam; /* elements of w, b, mean, var */
    const double *x, *w, *b, *mean, *var, *dy;
    const double *y;       /* forward output, mean (BN_STATS) or dx (backward) */
    const double *y2, *y3; /* var, unbiased var (BN_STATS); dweight, dbias (backward) */
    int64_t n2;
} nn_ref_case;

typedef struct attn_ref_case {
    const char *name;
    int qr;
    int64_t qd[4];
    int kr;
    int64_t kd[4];
    int vr;
    int64_t vd[4];
    int mask; /* 0 none, 1 bool (1.0 true), 2 float */
    int mr;
    int64_t md[4];
    bool causal;
    double scale;
    const double *q, *k, *v, *m, *y;
    int64_t ny;
} attn_ref_case;

typedef struct loss_ref_case {
    const char *name;
    bool ce; /* cross_entropy of logits; else nll_loss of log-probabilities */
    int rank;
    int64_t dims[4];
    const double *x;
    const int64_t *target;
    int reduction;
    int64_t ignore;
    double smoothing;
    const double *y;
    int64_t ny;
} loss_ref_case;
""")
print("static const nn_ref_case nn_ref_cases[] = {")
print("\n".join(rows))
print("};")
print("static const attn_ref_case attn_ref_cases[] = {")
print("\n".join(arows))
print("};")
print("static const loss_ref_case loss_ref_cases[] = {")
print("\n".join(lrows))
print("};")
print("#endif")

#!/usr/bin/env python3
"""attn_torch.py: the PyTorch side of bench/attn_bench.c: F.scaled_dot_product_attention at
the same shapes, dtype and timing rule (inputs made once; one untimed pass, then the median of
ROUNDS timed loops of REPS calls, each followed by torch.cuda.synchronize() on a GPU as
td_fence follows each op there), same row names. Besides the dtype of the tensord rows it
prints bf16 rows (flash attention on the GPU), the speed tensord's f32 composite is held to.

Usage: python3 bench/attn_torch.py [--device cpu|cuda] [--batch N] [--heads N] [--seq N]
       [--dim N] [--reps N] [--rounds N] [--dtype f32|f64]"""
import sys
import time

import torch
import torch.nn.functional as F


def arg(name, default, conv=int):
    return conv(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


dev = arg("--device", "cpu", str)
B, H, L, D = arg("--batch", 8), arg("--heads", 16), arg("--seq", 2048), arg("--dim", 64)
reps, rounds = arg("--reps", 5), arg("--rounds", 3)
dts = arg("--dtype", "f32", str)
torch.backends.cuda.matmul.allow_tf32 = False  # tensord's f32 matmul is full f32
print("# pytorch %s, %s, q k v [%d, %d, %d, %d], median of %d x %d"
      % (torch.__version__, dev, B, H, L, D, rounds, reps))
sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)


def sdpa_math(q, k, v, is_causal):
    """PyTorch < 2.0 (Debian's 1.13) has no F.scaled_dot_product_attention: the math
    composite that 2.x itself runs on the CPU for these shapes without a fused kernel."""
    s = (q @ k.transpose(-2, -1)) * (q.shape[-1] ** -0.5)
    if is_causal:
        n, m = s.shape[-2], s.shape[-1]
        s = s.masked_fill(torch.ones(n, m, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    return torch.softmax(s, dim=-1) @ v


sdpa = getattr(F, "scaled_dot_product_attention", sdpa_math)
if sdpa is sdpa_math:
    print("# no F.scaled_dot_product_attention in this PyTorch: the math composite")
for name, dt in ((dts, {"f32": torch.float32, "f64": torch.float64}[dts]), ("bf16", torch.bfloat16)):
    g = torch.Generator(device=dev).manual_seed(1)
    q, k, v = (torch.randn(B, H, L, D, generator=g, device=dev, dtype=dt) for _ in range(3))
    for causal in (False, True):
        times = []
        for r in range(-1, rounds):
            t0 = time.perf_counter()
            for _ in range(reps):
                y = sdpa(q, k, v, is_causal=causal)
                sync()
                del y
            if r >= 0:
                times.append((time.perf_counter() - t0) / reps)
        times.sort()
        s = times[len(times) // 2]
        flop = 4.0 * B * H * L * L * D / (2 if causal else 1)
        print("attention_%s%-14s %10.3f ms %10.2f TFLOP/s"
              % (name, "_causal" if causal else "", s * 1e3, flop / s / 1e12), flush=True)

#!/usr/bin/env python3
"""PyTorch side of bench/conv_bench.c: the same ResNet-50 conv2d shapes (batch 32, no bias),
torch.set_num_threads(2) on the CPU, median of `reps` timed runs after one warm-up (each
followed by torch.cuda.synchronize() on a GPU, as td_fence follows td_conv), printed in the
same format. On a GPU f32 runs with TF32 off (cuDNN's default is on): tensord's f32 conv is
full f32. Usage: python3 bench/conv_torch.py [reps] [cpu|cuda] [f32|bf16]"""
import sys
import time

import torch
import torch.nn.functional as F

torch.set_num_threads(2)
reps = int(sys.argv[1]) if len(sys.argv) > 1 else 5
dev = sys.argv[2] if len(sys.argv) > 2 else "cpu"
dts = sys.argv[3] if len(sys.argv) > 3 else "f32"
dt = {"f32": torch.float32, "bf16": torch.bfloat16}[dts]
torch.backends.cudnn.allow_tf32 = False
sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
SHAPES = [("conv1 7x7/2 3->64 224", 3, 224, 224, 64, 7, 2, 3),
          ("layer1 3x3 64->64 56", 64, 56, 56, 64, 3, 1, 1),
          ("layer2 3x3 128->128 28", 128, 28, 28, 128, 3, 1, 1),
          ("layer3 1x1 1024->256 14", 1024, 14, 14, 256, 1, 1, 0),
          ("layer4 3x3 512->512 7", 512, 7, 7, 512, 3, 1, 1)]
with torch.no_grad():
    for name, c, h, w, co, k, s, p in SHAPES:
        x = torch.randn(32, c, h, w, device=dev).to(dt)
        wt = (torch.randn(co, c, k, k, device=dev) * 0.1).to(dt)
        ts = []
        for r in range(reps + 1):
            t0 = time.perf_counter()
            y = F.conv2d(x, wt, stride=s, padding=p)
            sync()
            if r > 0:
                ts.append((time.perf_counter() - t0) * 1e3)
        ts.sort()
        ms = ts[len(ts) // 2]
        flop = 2.0 * 32 * co * y.shape[2] * y.shape[3] * c * k * k
        print("torch   %-26s %9.3f ms %7.1f GFLOP/s" % (name, ms, flop / ms * 1e-6))

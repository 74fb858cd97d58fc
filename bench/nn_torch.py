"""nn_torch.py: the PyTorch CPU side of bench/nn_bench.c: the same rows, sizes and timing
rule (inputs made once; one untimed pass, then the median of ROUNDS timed loops of REPS
ops, each result dropped at once). Threads: --threads N (torch.set_num_threads; default 2,
this machine's core count). The backward row times torch's native layer-norm backward
(autograd of layer_norm with dy given, dx only: weight and bias need no grad). The
var_bn_stats row is batch norm's statistics, torch.var over dims (0, 2, 3) of a
[128, 64, 28, 28] f32 tensor with correction 0 (td_var in nn-bench).

--device cuda runs on the GPU, each op followed by torch.cuda.synchronize() (as td_fence
follows each op in nn-bench).

Usage: /usr/bin/python3 bench/nn_torch.py [--rows N] [--cols N] [--reps N] [--rounds N]
       [--threads N] [--device cpu|cuda]"""
import sys
import time

import torch
import torch.nn.functional as F


def arg(name, default, conv=int):
    return conv(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


dev = arg("--device", "cpu", str)
sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)


rows, cols = arg("--rows", 8192), arg("--cols", 4096)
reps, rounds = arg("--reps", 10), arg("--rounds", 5)
torch.set_num_threads(arg("--threads", 2))
g = torch.Generator().manual_seed(1)
x = torch.randn(rows, cols, generator=g) * 2 + 0.5
dy = torch.randn(rows, cols, generator=g)
w = torch.randn(cols, generator=g) * 0.1 + 1
b = torch.randn(cols, generator=g) * 0.1
x, dy, w, b = (t.to(dev) for t in (x, dy, w, b))
xg = x.clone().requires_grad_(True)
# batch norm's statistics: var over dims (0, 2, 3) of [128, 64, 28, 28], correction 0 as
# nn_bench.c's td_var (row size in bytes: x read once)
xb = (torch.randn(128, 64, 28, 28, generator=g) * 2 + 0.5).to(dev)


def bwd():
    y = F.layer_norm(xg, (cols,), w, b, 1e-5)
    (gx,) = torch.autograd.grad(y, xg, dy)
    return gx


rows_ = [("layer_norm_f32", lambda: F.layer_norm(x, (cols,), w, b, 1e-5), 2),
         ("layer_norm_f32_noaffine", lambda: F.layer_norm(x, (cols,), None, None, 1e-5), 2),
         ("layer_norm_backward_dx_f32", bwd, 3),
         ("var_bn_stats_f32", lambda: torch.var(xb, dim=(0, 2, 3), unbiased=False),
          xb.numel() / (rows * cols))]
print("# pytorch %s, %s, %d threads, [%d, %d] f32, median of %d x %d"
      % (torch.__version__, dev, torch.get_num_threads(), rows, cols, rounds, reps))
for name, fn, nbuf in rows_:
    times = []
    for r in range(-1, rounds):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
            sync()
        if r >= 0:
            times.append((time.perf_counter() - t0) / reps)
    times.sort()
    s = times[len(times) // 2]
    print("%-28s %10.3f ms %10.2f GB/s" % (name, s * 1e3, rows * cols * 4 * nbuf / s / 1e9),
          flush=True)

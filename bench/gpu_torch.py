"""gpu_torch.py: the PyTorch side of bench/gpu_bench.c, with the same sizes and the same
timing rule (warm-up, then reps ops between two synchronisations), on cuda:0.
Usage: python3 bench/gpu_torch.py [--quick] [--tf32]"""
import sys
import time

import torch

quick = "--quick" in sys.argv
torch.backends.cuda.matmul.allow_tf32 = "--tf32" in sys.argv
reps = 20
dev = "cuda:0"


def timed(fn):
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / reps


print("torch", torch.__version__, torch.cuda.get_device_name(0), "tf32" if torch.backends.cuda.matmul.allow_tf32 else "fp32")
for n in ((256, 512) if quick else (4096, 8192)):
    a = torch.rand(n, n, device=dev) * 2 - 1
    b = torch.rand(n, n, device=dev) * 2 - 1
    s = timed(lambda: a @ b)
    print(f"matmul f32 {n}^3: {s*1e3:.3f} ms  {2*n**3/s/1e9:.1f} GFLOP/s")
    del a, b
nb = (1 << 20) if quick else (1 << 28)
x = torch.rand(nb, device=dev)
y = torch.rand(nb, device=dev)
gb = nb * 4 / 1e9
s = timed(lambda: x + y)
print(f"add f32 [{nb}]: {s*1e3:.3f} ms  {3*gb/s:.1f} GB/s (read 2, write 1)")
s = timed(lambda: x * y)
print(f"mul f32 [{nb}]: {s*1e3:.3f} ms  {3*gb/s:.1f} GB/s (read 2, write 1)")
s = timed(lambda: x.sum())
print(f"sum f32 [{nb}]: {s*1e3:.3f} ms  {gb/s:.1f} GB/s (read 1)")
del x, y
rows, cols = (256, 256) if quick else (65536, 4096)
z = torch.rand(rows, cols, device=dev) * 8 - 4
s = timed(lambda: torch.softmax(z, dim=1))
print(f"softmax f32 [{rows}, {cols}] rows: {s*1e3:.3f} ms  {2*rows*cols*4/1e9/s:.1f} GB/s (read 1, write 1)")

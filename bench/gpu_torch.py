"""gpu_torch.py: the PyTorch side of bench/gpu_bench.c, on cuda:0: the same sizes, the same
row names and the same timing rule (per measure one untimed pass of the timed loop, then the
median of ROUNDS timed loops of REPS ops between two synchronisations; each result is dropped
at once, so the caching allocator reuses one output block).

TF32 rows switch PyTorch's float32 matmul precision to TF32 for those rows only
(torch.backends.cuda.matmul.fp32_precision = "tf32" where it exists, PyTorch >= 2.9; else
allow_tf32 = True) and back to IEEE f32 for every other row; a '# tf32 check' line shows
that the switch took effect.

The transfer rows time Tensor.copy_ between pageable CPU memory and cuda:0 (as td_write and
td_read from a caller's malloc'd buffer), one copy per timing.

Usage: python3 bench/gpu_torch.py [--quick] [--reps N] [--rounds N] [--profile] [--cumsum-only] [--sort-only]
--cumsum-only: only the cumsum row (tests/gpu/memops-on-gpu-host.sh); --sort-only: only the
sort row (tests/gpu/sort-on-gpu-host.sh).
--profile: no timing; one add, one sum and one softmax of the bench sizes after a warm-up,
between torch.cuda.profiler.start() and stop() (for ncu --profile-from-start off)."""
import sys
import time

import torch


def arg(name, default):
    return int(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


quick = "--quick" in sys.argv
profile = "--profile" in sys.argv
reps = arg("--reps", 20)
rounds = arg("--rounds", 3)
dev = "cuda:0"


def set_tf32(on):
    """Float32 matmuls in TF32 (on) or IEEE f32 (off); returns the setting's name."""
    m = torch.backends.cuda.matmul
    if hasattr(m, "fp32_precision"):
        m.fp32_precision = "tf32" if on else "ieee"
        return "torch.backends.cuda.matmul.fp32_precision = %r" % m.fp32_precision
    m.allow_tf32 = on
    return "torch.backends.cuda.matmul.allow_tf32 = %r" % m.allow_tf32


def loop(fn):
    for _ in range(reps):
        fn()
    torch.cuda.synchronize()


def timed(fn):
    loop(fn)  # untimed: kernels, cuBLAS heuristics, allocator blocks
    ts = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        loop(fn)
        ts.append((time.perf_counter() - t0) / reps)
    ts.sort()
    return ts[len(ts) // 2]


def report(name, s, amount, scale, unit):
    print(f"{name:<26} {s * 1e3:10.3f} ms {amount / s / scale:10.1f} {unit}", flush=True)


print(f"# torch {torch.__version__} on {torch.cuda.get_device_name(0)}; {set_tf32(False)}")
nb = (1 << 20) if quick else (1 << 28)  # f32 elements: 1 GiB
rows, cols = (256, 256) if quick else (65536, 4096)

if profile:
    x = torch.rand(nb, device=dev) * 2 - 1
    y = torch.rand(nb, device=dev) * 2 - 1
    z = torch.rand(rows, cols, device=dev) * 8 - 4
    xb = (torch.rand(2 * nb, device=dev) * 2 - 1).to(torch.bfloat16)
    yb = (torch.rand(2 * nb, device=dev) * 2 - 1).to(torch.bfloat16)
    for p in range(2):  # warm-up, then the profiled pass
        if p == 1:
            torch.cuda.profiler.start()
        x + y
        x.sum()
        torch.softmax(z, dim=1)
        xb + yb
        xb.sum()
        torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    print(f"# profiled: add f32 [{nb}], sum f32 [{nb}], softmax f32 [{rows}, {cols}] rows, "
          f"add bf16 [{2 * nb}], sum bf16 [{2 * nb}]")
    sys.exit(0)

print(f"# {reps} ops per loop, median of {rounds} loops after one untimed loop")
if "--sort-only" in sys.argv:
    ns = (1 << 16) if quick else (1 << 24)
    xs = torch.rand(ns, device=dev) * 2 - 1
    report(f"sort_f32_{ns}", timed(lambda: torch.sort(xs, stable=True)), ns, 1e6, "Melem/s")
    sys.exit(0)
if "--cumsum-only" in sys.argv:
    x = torch.rand(nb, device=dev) * 2 - 1
    report(f"cumsum_f32_{nb}", timed(lambda: torch.cumsum(x, 0)), 2 * nb * 4, 1e9,
           "GB/s (read 1, write 1)")
    sys.exit(0)
for n in (256, 512) if quick else (4096, 8192):
    a = torch.rand(n, n, device=dev) * 2 - 1
    b = torch.rand(n, n, device=dev) * 2 - 1
    flop = 2.0 * n ** 3
    set_tf32(False)
    report(f"matmul_f32_{n}", timed(lambda: a @ b), flop, 1e12, "TFLOP/s")
    c32 = a @ b
    tf32_name = set_tf32(True)
    report(f"matmul_tf32_{n}", timed(lambda: a @ b), flop, 1e12, "TFLOP/s")
    ctf = a @ b
    set_tf32(False)
    rel = ((c32 - ctf).abs().max() / c32.abs().max()).item()
    note = " (identical: TF32 NOT in effect)" if rel == 0 else ""
    print(f"# tf32 check {n}: max|C_tf32 - C_f32| / max|C_f32| = {rel:.3g}{note} ({tf32_name})")
    for hname, ht in (("f16", torch.float16), ("bf16", torch.bfloat16)):
        ah, bh = a.to(ht), b.to(ht)
        report(f"matmul_{hname}_{n}", timed(lambda: ah @ bh), flop, 1e12, "TFLOP/s")
        del ah, bh
    del a, b, c32, ctf
x = torch.rand(nb, device=dev) * 2 - 1
y = torch.rand(nb, device=dev) * 2 - 1
gb = nb * 4
report(f"add_f32_{nb}", timed(lambda: x + y), 3 * gb, 1e9, "GB/s (read 2, write 1)")
report(f"mul_f32_{nb}", timed(lambda: x * y), 3 * gb, 1e9, "GB/s (read 2, write 1)")
report(f"sum_f32_{nb}", timed(lambda: x.sum()), gb, 1e9, "GB/s (read 1)")
report(f"cumsum_f32_{nb}", timed(lambda: torch.cumsum(x, 0)), 2 * gb, 1e9,
       "GB/s (read 1, write 1)")
del x, y
ns = (1 << 16) if quick else (1 << 24)
xs = torch.rand(ns, device=dev) * 2 - 1
report(f"sort_f32_{ns}", timed(lambda: torch.sort(xs, stable=True)), ns, 1e6, "Melem/s")
del xs
xb = (torch.rand(2 * nb, device=dev) * 2 - 1).to(torch.bfloat16)
yb = (torch.rand(2 * nb, device=dev) * 2 - 1).to(torch.bfloat16)
gb16 = 2 * nb * 2
report(f"add_bf16_{2 * nb}", timed(lambda: xb + yb), 3 * gb16, 1e9, "GB/s (read 2, write 1)")
report(f"sum_bf16_{2 * nb}", timed(lambda: xb.sum()), gb16, 1e9, "GB/s (read 1)")
del xb, yb
z = torch.rand(rows, cols, device=dev) * 8 - 4
report(f"softmax_f32_{rows}x{cols}", timed(lambda: torch.softmax(z, dim=1)),
       2.0 * rows * cols * 4, 1e9, "GB/s (read 1, write 1)")
del z

# transfers (gpu_bench.c's td_write/td_read rows): copy_ between a pageable CPU tensor and an
# existing cuda:0 tensor of n bytes, synchronised; median of ROUNDS after one untimed copy.
print("# transfers: Tensor.copy_ between pageable CPU memory and cuda:0 (u8), synchronised")
for n in ((1 << 20, 8 << 20) if quick else (64 << 20, 1 << 30)):
    h = torch.ones(n, dtype=torch.uint8)
    d = torch.zeros(n, dtype=torch.uint8, device=dev)
    for name, fn in ((f"td_write_{n}", lambda: d.copy_(h)), (f"td_read_{n}", lambda: h.copy_(d))):
        ts = []
        for r in range(rounds + 1):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            if r > 0:
                ts.append(time.perf_counter() - t0)
        ts.sort()
        s = ts[len(ts) // 2]
        print(f"{name:<26} {s * 1e3:10.3f} ms {n / s / 1e9:10.1f} GB/s", flush=True)
    del h, d

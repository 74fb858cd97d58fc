"""cpu_torch.py: the PyTorch CPU side of bench/cpu_bench.c: the same row names, sizes and
timing rule (inputs made once; per row one untimed pass of the timed loop, then the median of
ROUNDS timed loops of REPS ops; each result dropped at once). PyTorch runs on every core
(torch.set_num_threads(os.cpu_count()): its default here is 1 thread). Rates as in cpu_bench.c: GB/s counts bytes read and written once,
GFLOP/s is 2 M N K per matmul.

Usage: /usr/bin/python3 bench/cpu_torch.py [--quick] [--reps N] [--rounds N]
       [--only elementwise|matmul|scan]"""
import os
import sys
import time

import torch


def arg(name, default):
    return int(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


quick = "--quick" in sys.argv
reps = arg("--reps", 2 if quick else 10)
rounds = arg("--rounds", 1 if quick else 5)
torch.set_num_threads(os.cpu_count())


def timed(fn, nreps):
    for _ in range(nreps):
        fn()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(nreps):
            fn()
        times.append((time.perf_counter() - t0) / nreps)
    times.sort()
    return times[len(times) // 2]


def report(name, s, amount, scale, unit):
    print("%-28s %10.3f ms %10.2f %s" % (name, s * 1e3, amount / s / scale, unit), flush=True)


DT = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
SIZE = {"f32": 4, "bf16": 2, "f16": 2}


def elementwise(nbytes):
    src = torch.ones(nbytes, dtype=torch.uint8)
    dst = torch.empty_like(src)
    report("memcpy_%d" % nbytes, timed(lambda: dst.copy_(src), reps), 2.0 * nbytes, 1e9, "GB/s")
    g = torch.Generator().manual_seed(1)
    for name in ("f32", "bf16", "f16"):
        n = nbytes // SIZE[name]
        a = (torch.rand(n, generator=g) * 2 - 1).to(DT[name])
        b = (torch.rand(n, generator=g) * 2 - 1).to(DT[name])
        report("add_%s_%d" % (name, n), timed(lambda: torch.add(a, b), reps), 3.0 * nbytes, 1e9,
               "GB/s")
        report("mul_%s_%d" % (name, n), timed(lambda: torch.mul(a, b), reps), 3.0 * nbytes, 1e9,
               "GB/s")
        if name == "f32":
            continue
        report("cast_%s_f32_%d" % (name, n), timed(lambda: a.to(torch.float32), reps),
               3.0 * nbytes, 1e9, "GB/s")
        f = a.to(torch.float32)
        report("cast_f32_%s_%d" % (name, n), timed(lambda: f.to(DT[name]), reps), 3.0 * nbytes,
               1e9, "GB/s")
        other = "f16" if name == "bf16" else "bf16"
        report("cast_%s_%s_%d" % (name, other, n), timed(lambda: a.to(DT[other]), reps),
               2.0 * nbytes, 1e9, "GB/s")


def matmul(size):
    g = torch.Generator().manual_seed(3)
    for name in ("bf16", "f16", "f32"):
        a = (torch.rand(size, size, generator=g) * 2 - 1).to(DT[name])
        b = (torch.rand(size, size, generator=g) * 2 - 1).to(DT[name])
        n = min(reps, 3) if size >= 2048 else reps
        try:
            report("matmul_%s_%d" % (name, size), timed(lambda: torch.matmul(a, b), n),
                   2.0 * size ** 3, 1e9, "GFLOP/s")
        except RuntimeError as e:
            print("# matmul_%s_%d failed: %s" % (name, size, e))


def scan():
    ns, nc = (1 << 16, 1 << 16) if quick else (1 << 24, 1 << 28)
    a = torch.rand(ns) * 2 - 1
    report("sort_f32_%d" % ns, timed(lambda: torch.sort(a, stable=True), reps), ns, 1e6,
           "Melem/s")
    del a
    c = torch.rand(nc) * 2 - 1
    report("cumsum_f32_%d" % nc, timed(lambda: torch.cumsum(c, 0), reps), 8.0 * nc, 1e9, "GB/s")


print("# cpu_torch.py: torch %s, %d threads, reps %d, rounds %d"
      % (torch.__version__, torch.get_num_threads(), reps, rounds))
only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else ""
if only == "scan":
    scan()
    sys.exit(0)
if only != "matmul":
    elementwise((1 << 20) if quick else (64 << 20))
if only != "elementwise":
    for s in ([128] if quick else [512, 1024, 2048]):
        matmul(s)

#!/usr/bin/env python3
"""coop_error_model.py — how far an NVIDIA tensor-core f16 dot product with f32 accumulation
can be from the exact one, next to the conformance suite's matmul bound (conformance.c,
TOL_MATMUL: 2 K 2^-24 (|A| @ |B|) + 1 ulp of f16). backends/vulkan/shaders/matmul_coop.comp
quotes its output.

The model (Fasi, Higham, Mikaitis, Pranesh, "Numerical behavior of NVIDIA tensor cores",
PeerJ Comput. Sci. 7:e330, 2021): f16 products are exact; each MMA step adds B = 16 products
and the accumulator at once, every term aligned to the largest exponent among them and
truncated (toward zero) to 24 bits below it, and the sum truncated to 24 significant bits.
Data: the suite's GEN_PLAIN inputs (uniform in [-4, 4], rounded to f16) and all-positive
ones (uniform in [0, 1]: the truncation errors all go one way), K from the suite's shapes up
to the benchmarks' 4096. Prints, per case, the largest error in units of K 2^-24 (|A| @ |B|)
and the largest |f16(model) - f16(exact)| as a fraction of the suite's tolerance (near 1:
one f16 ulp, where the two sums straddle a rounding boundary; the tolerance's ulp term).

Usage: python3 tests/unit/backends/coop_error_model.py   (numpy; about a minute)
"""
import numpy as np

B = 16


def exponent(x):
    """e with |x| in [2^e, 2^(e+1)) (x != 0)."""
    return np.frexp(x)[1] - 1


def truncate(x, e):
    """x toward zero to a multiple of 2^(e - 23): 24 bits below exponent e."""
    q = np.ldexp(1.0, e - 23)
    return np.trunc(x / q) * q


def tensor_core_dot(a, b):
    acc = np.zeros(a.shape[0])
    for k0 in range(0, a.shape[1], B):
        terms = np.concatenate([a[:, k0:k0 + B] * b[:, k0:k0 + B], acc[:, None]], axis=1)
        mx = np.max(np.abs(terms), axis=1)
        e = np.where(mx > 0, exponent(np.where(mx > 0, mx, 1.0)), 0)
        s = np.sum(truncate(terms, e[:, None]), axis=1)
        es = np.where(s != 0, exponent(np.where(s != 0, np.abs(s), 1.0)), 0)
        acc = truncate(s, es)
    return acc


def ulp_f16(w):
    w = np.abs(w)
    e = np.maximum(exponent(np.where(w > 0, w, 2.0**-14)), -14)
    return np.ldexp(1.0, e - 10)


def main():
    rng = np.random.default_rng(1)
    for name, lo, hi in [("plain [-4, 4]", -4.0, 4.0), ("positive [0, 1]", 0.0, 1.0)]:
        for k in [4, 33, 257, 1024, 4096]:
            rows = 2000 if k < 1024 else 300
            a = rng.uniform(lo, hi, (rows, k)).astype(np.float16).astype(np.float64)
            b = rng.uniform(lo, hi, (rows, k)).astype(np.float16).astype(np.float64)
            exact = np.sum(a * b, axis=1)
            scale = np.sum(np.abs(a * b), axis=1)
            got = tensor_core_dot(a, b)
            err = np.max(np.abs(got - exact) / (k * 2.0**-24 * scale))
            w16 = exact.astype(np.float16).astype(np.float64)
            g16 = got.astype(np.float32).astype(np.float16).astype(np.float64)
            tol = 2 * k * 2.0**-24 * scale.astype(np.float16).astype(np.float64) + ulp_f16(w16)
            frac = np.max(np.abs(g16 - w16) / tol)
            print(f"{name:16s} K = {k:4d}: max error {err:.3f} K 2^-24 (|A| @ |B|); "
                  f"worst f16 |diff| / tolerance {frac:.3f}")


if __name__ == "__main__":
    main()

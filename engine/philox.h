/* philox.h — the counter-based random number generator every backend uses, and the exact
 * mapping from (seed, element index) to a random value. This mapping is a cross-backend
 * contract: a CPU, CUDA, HIP or Vulkan device must draw the same numbers from the same seed.
 *
 * Why counter-based: element i of a random tensor is a pure function of (seed, i), so any
 * partition of the work over threads, GPU blocks or devices gives the same tensor, and a
 * backend can compute element i without computing elements 0..i-1.
 *
 * Generator: Philox4x32-10 from Salmon, Moraes, Dror and Shaw, "Parallel random numbers: as
 * easy as 1, 2, 3", SC'11 (the Random123 library). One call maps a 128-bit counter
 * (4 x uint32) and a 64-bit key (2 x uint32) to 4 uint32 words. Round function, with
 * multipliers M0 = 0xD2511F53, M1 = 0xCD9E8D57 and the 64-bit products split as hi:lo:
 *     hi0:lo0 = M0 * c0;  hi1:lo1 = M1 * c2;
 *     c = (hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0)
 * ten rounds, the key bumped by the Weyl constants (k0 += 0x9E3779B9, k1 += 0xBB67AE85)
 * between consecutive rounds (nine bumps). Known-answer vectors from Random123's kat_vectors
 * are checked in tests/unit/backends/philox.c.
 *
 * The mapping (seed is uint64; "block b" means Philox called with
 *     key = ((uint32)seed, (uint32)(seed >> 32)),  counter = ((uint32)b, (uint32)(b >> 32), 0, 0)
 * giving words w[0..3]):
 *
 *   f32 uniform, element i:  b = i / 4,  w = w[i % 4]
 *       u = (w >> 8) * 2^-24                                      (exact, in [0, 1))
 *       value = (float)(low + (high - low) * u)                   (double arithmetic)
 *   f64 uniform, element i:  b = i / 2,  j = i % 2
 *       x = (((uint64)w[2j+1] << 32) | w[2j]) >> 11                (53 bits)
 *       u = x * 2^-53                                             (exact, in [0, 1))
 *       value = low + (high - low) * u
 *   f32 normal, element i:   b = i / 4,  q = (i / 2) % 2  (the pair inside the block)
 *       u1 = ((w[2q] >> 8) + 1) * 2^-24                           (in (0, 1]: log is finite)
 *       u2 = (w[2q+1] >> 8) * 2^-24                               (in [0, 1))
 *       r = sqrt(-2 log u1),  t = 2 pi u2
 *       z = r cos t for even i,  r sin t for odd i                (Box-Muller, one pair of
 *                                                                  uniforms per two outputs)
 *       value = (float)(mean + stddev * z)                        (double arithmetic)
 *   f64 normal, element i:   b = i / 2  (one block per pair)
 *       u1 = (((((uint64)w[1] << 32) | w[0]) >> 11) + 1) * 2^-53   (in (0, 1])
 *       u2 = ((((uint64)w[3] << 32) | w[2]) >> 11) * 2^-53        (in [0, 1))
 *       r, t, z as for f32;  value = mean + stddev * z
 *   f16 and bf16 uniform and normal, element i: the f32 mapping's block, word and double
 *       value (low + (high - low) * u, mean + stddev * z), rounded once to the dtype
 *       (engine/convert.h, td__f64_to_f16 / td__f64_to_bf16; never through f32, which
 *       could round twice)
 *
 *
 * The random ops of issue 13 (BERNOULLI BERNOULLI_SCALAR RANDINT RANDPERM TRUNC_NORMAL) use
 * two draws, whatever the dtype, so the counter layout depends on the shape only:
 *   32-bit draw of element i:  b = i / 4,  w[i % 4]
 *   64-bit draw of element i:  b = i / 2,  j = i % 2,  x = ((uint64)w[2j+1] << 32) | w[2j]
 *                              (the words of the f64 uniform mapping)
 *   BERNOULLI, BERNOULLI_SCALAR: element i is 1 when w * 2^-32 < p, else 0 (w its 32-bit
 *       draw, p its probability widened exactly to double; the comparison is exact). So
 *       P(1) = ceil(p 2^32) / 2^32, within 2^-32 of p; p <= 0 (or NaN) gives 0, p >= 1 gives 1.
 *       BERNOULLI_SCALAR with p equals BERNOULLI of a tensor full of p, bit for bit.
 *   RANDINT in [low, high): r = high - low (as uint64, 1 .. 2^64 - 1), element i =
 *       low + floor(x r / 2^64) (x its 64-bit draw; the high word of the 128-bit product,
 *       td__philox_mulhi64): multiply-shift without rejection. Each value k is hit by
 *       floor(2^64 / r) or ceil(2^64 / r) of the 2^64 draws, so |P(k) - 1/r| < 2^-64.
 *   RANDPERM of n: key_i = the 64-bit draw of element i; the result lists 0..n-1 ordered
 *       by (key, index) ascending (one total order: any correct sort gives these bits). A
 *       tie of keys (probability below n^2 / 2^65) keeps index order.
 *   TRUNC_NORMAL(mean, stddev, a, b): inverse CDF with the functions of engine/normcdf.h,
 *       computed once per op: alpha = (a - mean) / stddev, beta = (b - mean) / stddev;
 *       flip = alpha + beta > 0; [lo, hi] = flip ? [-beta, -alpha] : [alpha, beta] (the
 *       sampled side holds the heavier tail, where Phi keeps its relative precision);
 *       pl = Phi(lo), dp = Phi(hi) - pl. Element i, with U = (x >> 11) 2^-53 from its 64-bit
 *       draw: u = pl + dp U; z = Phi^-1(u) clamped to [lo, hi]; z = -z if flip;
 *       value = mean + stddev z clamped to [a, b], then rounded once to the dtype
 *       (f32: (float), f16/bf16: td__f64_to_f16 / td__f64_to_bf16). Only IEEE basic
 *       operations, so every backend gives the same bits. When [lo, hi] lies beyond ~37
 *       standard deviations, Phi underflows and values collect at the bound nearest the mean.
 *
 * Arithmetic is IEEE double without fused multiply-add (CUDA: compile with -fmad=false or
 * use __dmul_rn/__dadd_rn), so uniform values agree bit for bit across backends. Normal
 * values go through log, sqrt, cos and sin, whose last-ulp rounding differs between math
 * libraries: backends agree on them to a few ulps, not bit for bit. "[low, high)" holds
 * exactly for u; after scaling, rounding can give `high` itself when high - low is not a
 * power of two times the spacing of the result type.
 *
 * Everything here is `static inline` (and host/device under nvcc and hipcc) so GPU
 * kernels can include this header unchanged.
 * Thread-safety: pure functions.
 */
#ifndef TD_ENGINE_PHILOX_H
#define TD_ENGINE_PHILOX_H

#include "engine/normcdf.h"
#include <math.h>
#include <stdint.h>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define TD__PHILOX_FN __host__ __device__ static inline
#else
#define TD__PHILOX_FN static inline
#endif

#define TD_PHILOX_M0 0xD2511F53u
#define TD_PHILOX_M1 0xCD9E8D57u
#define TD_PHILOX_W0 0x9E3779B9u
#define TD_PHILOX_W1 0xBB67AE85u

/* One Philox4x32 round on ctr in place with key (k0, k1). */
TD__PHILOX_FN void td__philox_round(uint32_t ctr[4], uint32_t k0, uint32_t k1)
{
    uint64_t p0 = (uint64_t)TD_PHILOX_M0 * ctr[0];
    uint64_t p1 = (uint64_t)TD_PHILOX_M1 * ctr[2];
    uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
    uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    uint32_t c1 = ctr[1], c3 = ctr[3];
    ctr[0] = hi1 ^ c1 ^ k0;
    ctr[1] = lo1;
    ctr[2] = hi0 ^ c3 ^ k1;
    ctr[3] = lo0;
}

/* Philox4x32-10: out = philox(ctr, key). out may alias ctr. */
TD__PHILOX_FN void td__philox4x32_10(const uint32_t ctr[4], const uint32_t key[2],
                                     uint32_t out[4])
{
    uint32_t c[4] = {ctr[0], ctr[1], ctr[2], ctr[3]};
    uint32_t k0 = key[0], k1 = key[1];
    for (int r = 0; r < 10; r++) {
        if (r > 0) {
            k0 += TD_PHILOX_W0;
            k1 += TD_PHILOX_W1;
        }
        td__philox_round(c, k0, k1);
    }
    out[0] = c[0];
    out[1] = c[1];
    out[2] = c[2];
    out[3] = c[3];
}

/* The four words of block b for a seed (see the mapping above). */
TD__PHILOX_FN void td__philox_block(uint64_t seed, uint64_t b, uint32_t w[4])
{
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    const uint32_t ctr[4] = {(uint32_t)b, (uint32_t)(b >> 32), 0u, 0u};
    td__philox4x32_10(ctr, key, w);
}

/* 24-bit uniform in [0, 1) from one word. */
TD__PHILOX_FN double td__philox_u24(uint32_t w) { return (double)(w >> 8) * 0x1p-24; }

/* 53-bit uniform in [0, 1) from two words (lo first). */
TD__PHILOX_FN double td__philox_u53(uint32_t lo, uint32_t hi)
{
    return (double)((((uint64_t)hi << 32) | lo) >> 11) * 0x1p-53;
}

/* Box-Muller: the normal pair (r cos t, r sin t) from u1 in (0, 1], u2 in [0, 1). */
TD__PHILOX_FN void td__philox_box_muller(double u1, double u2, double z[2])
{
    const double two_pi = 6.283185307179586476925286766559;
    double r = sqrt(-2.0 * log(u1));
    double t = two_pi * u2;
    z[0] = r * cos(t);
    z[1] = r * sin(t);
}

/* The double value of element i of an f32 (f16, bf16) uniform tensor before it is rounded to
 * the dtype; w holds block i / 4 of the seed. */
TD__PHILOX_FN double td__philox_uniform_u24_from(const uint32_t w[4], uint64_t i, double low,
                                                 double high)
{
    return low + (high - low) * td__philox_u24(w[i % 4]);
}

/* Element i of an f32 uniform tensor; w holds block i / 4 of the seed. */
TD__PHILOX_FN float td__philox_uniform_f32_from(const uint32_t w[4], uint64_t i, double low,
                                                double high)
{
    return (float)td__philox_uniform_u24_from(w, i, low, high);
}

/* Element i of an f64 uniform tensor; w holds block i / 2 of the seed. */
TD__PHILOX_FN double td__philox_uniform_f64_from(const uint32_t w[4], uint64_t i, double low,
                                                 double high)
{
    unsigned j = (unsigned)(i % 2) * 2;
    return low + (high - low) * td__philox_u53(w[j], w[j + 1]);
}

/* The standard normal pair q (0 or 1) of an f32 normal block w: elements 4b + 2q and
 * 4b + 2q + 1. */
TD__PHILOX_FN void td__philox_normal_f32_pair(const uint32_t w[4], unsigned q, double z[2])
{
    double u1 = (double)((w[2 * q] >> 8) + 1u) * 0x1p-24;
    double u2 = td__philox_u24(w[2 * q + 1]);
    td__philox_box_muller(u1, u2, z);
}

/* The standard normal pair of an f64 normal block w: elements 2b and 2b + 1. */
TD__PHILOX_FN void td__philox_normal_f64_pair(const uint32_t w[4], double z[2])
{
    double u1 = (double)(((((uint64_t)w[1] << 32) | w[0]) >> 11) + 1u) * 0x1p-53;
    double u2 = td__philox_u53(w[2], w[3]);
    td__philox_box_muller(u1, u2, z);
}

/* Standard normal z of element i of an f32 normal tensor; w holds block i / 4. */
TD__PHILOX_FN double td__philox_normal_f32_z(const uint32_t w[4], uint64_t i)
{
    double z[2];
    td__philox_normal_f32_pair(w, (unsigned)((i / 2) % 2), z);
    return z[i % 2];
}

/* Standard normal z of element i of an f64 normal tensor; w holds block i / 2. */
TD__PHILOX_FN double td__philox_normal_f64_z(const uint32_t w[4], uint64_t i)
{
    double z[2];
    td__philox_normal_f64_pair(w, z);
    return z[i % 2];
}

/* The 64-bit draw of element i from its block w (block i / 2). */
TD__PHILOX_FN uint64_t td__philox_draw64(const uint32_t w[4], uint64_t i)
{
    const unsigned j = (unsigned)(i % 2) * 2;
    return ((uint64_t)w[j + 1] << 32) | w[j];
}

/* High 64 bits of the 128-bit product a * b, from 32-bit halves (the same bits on every
 * compiler, with or without a 128-bit type). */
TD__PHILOX_FN uint64_t td__philox_mulhi64(uint64_t a, uint64_t b)
{
    const uint64_t al = a & 0xffffffffu, ah = a >> 32, bl = b & 0xffffffffu, bh = b >> 32;
    const uint64_t p0 = al * bl, p1 = al * bh, p2 = ah * bl, p3 = ah * bh;
    const uint64_t mid = (p0 >> 32) + (p1 & 0xffffffffu) + (p2 & 0xffffffffu);
    return p3 + (p1 >> 32) + (p2 >> 32) + (mid >> 32);
}

/* BERNOULLI: whether element i (32-bit draw w) is 1 for probability p. */
TD__PHILOX_FN int td__philox_bernoulli(uint32_t w, double p) { return (double)w * 0x1p-32 < p; }

/* RANDINT: low + floor(x r / 2^64) with r = high - low (as uint64), for low < high. */
TD__PHILOX_FN int64_t td__philox_randint(uint64_t x, int64_t low, int64_t high)
{
    const uint64_t r = (uint64_t)high - (uint64_t)low;
    return (int64_t)((uint64_t)low + td__philox_mulhi64(x, r));
}

/* TRUNC_NORMAL's per-op constants (see the mapping above). */
typedef struct td__truncnorm {
    double mean, stddev, a, b, lo, hi, pl, dp;
    int flip;
} td__truncnorm;

TD__PHILOX_FN td__truncnorm td__truncnorm_init(double mean, double stddev, double a, double b)
{
    td__truncnorm t;
    const double alpha = (a - mean) / stddev, beta = (b - mean) / stddev;
    t.mean = mean;
    t.stddev = stddev;
    t.a = a;
    t.b = b;
    t.flip = alpha + beta > 0.0;
    t.lo = t.flip ? -beta : alpha;
    t.hi = t.flip ? -alpha : beta;
    t.pl = td__nd_cdf(t.lo);
    t.dp = td__nd_cdf(t.hi) - t.pl;
    return t;
}

/* The double value of a TRUNC_NORMAL element whose 64-bit draw is x. */
TD__PHILOX_FN double td__truncnorm_value(const td__truncnorm *t, uint64_t x)
{
    const double u = t->pl + t->dp * ((double)(x >> 11) * 0x1p-53);
    double z = td__nd_quantile(u);
    if (z < t->lo) z = t->lo;
    if (z > t->hi) z = t->hi;
    if (t->flip) z = -z;
    double v = t->mean + t->stddev * z;
    if (v < t->a) v = t->a;
    if (v > t->b) v = t->b;
    return v;
}

/* Convenience: element i of each distribution straight from (seed, i). Kernels that produce
 * consecutive elements should compute each block once and use the _from/_z forms. */
TD__PHILOX_FN float td__philox_uniform_f32(uint64_t seed, uint64_t i, double low, double high)
{
    uint32_t w[4];
    td__philox_block(seed, i / 4, w);
    return td__philox_uniform_f32_from(w, i, low, high);
}

TD__PHILOX_FN double td__philox_uniform_f64(uint64_t seed, uint64_t i, double low, double high)
{
    uint32_t w[4];
    td__philox_block(seed, i / 2, w);
    return td__philox_uniform_f64_from(w, i, low, high);
}

TD__PHILOX_FN float td__philox_normal_f32(uint64_t seed, uint64_t i, double mean, double stddev)
{
    uint32_t w[4];
    td__philox_block(seed, i / 4, w);
    return (float)(mean + stddev * td__philox_normal_f32_z(w, i));
}

TD__PHILOX_FN double td__philox_normal_f64(uint64_t seed, uint64_t i, double mean,
                                           double stddev)
{
    uint32_t w[4];
    td__philox_block(seed, i / 2, w);
    return mean + stddev * td__philox_normal_f64_z(w, i);
}
#endif

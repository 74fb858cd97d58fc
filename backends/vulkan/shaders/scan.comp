#version 450
// scan.comp — CUMSUM and CUMPROD along one axis, as backends/cpu/cpu_scan.c's contract: x
// viewed as [outer, n, inner], one invocation per line (outer, inner) folding its n
// elements strictly in ascending order from 0 (1 for CUMPROD) in an accumulator — double
// for f32 and f64, f32 for f16/bf16, the dtype's own width with wraparound for integers —
// each y_i the accumulator rounded once to the dtype: the CPU's bits, no inter-thread order.
// Variants: TA (storage), KF (f32; with HA16/HABF + HO16/HOBF the halves), KD, KI, KL, KU.
#include "common.glsl"
#include "half.glsl"

layout(std430, binding = 1) buffer O { TA o[]; };
layout(std430, binding = 2) readonly buffer A { TA a[]; };

#if defined(KF) && (defined(HA16) || defined(HABF))
#define ACC float
#define LD(v) LDA(v)
#define TO TA
#define ST(v) STF(v)
#elif defined(KF) || defined(KD)
#define ACC double
#define LD(v) double(v)
#define ST(v) TA(v)
#elif defined(KI)
#define ACC uint
#define LD(v) uint(v)
#define ST(v) TA(v)
#elif defined(KL)
#define ACC uint64_t
#define LD(v) uint64_t(v)
#define ST(v) TA(v)
#else
#define ACC uint
#define LD(v) uint(v)
#define ST(v) TA((v) & 255u)
#endif

layout(std430, binding = 3) buffer S { ACC sc[]; }; // block folds, then their prefixes

ACC fold(ACC acc, ACC v) { precise ACC r = OP == 191u ? acc * v : acc + v; return r; }

// Modes (P_I + 3): 0 each line whole, in order (lines of at most one block); for longer
// lines, blocks of B elements (P_I + 4; nb per line, P_I + 5): 1 each block's fold into the
// scratch, 2 per line the exclusive prefix of those in order, 3 each block from its prefix.
// Why blocks: lavapipe (gallivm) ends an invocation's loops after 65535 iterations in all,
// so no invocation may walk a long line alone. The blocked association differs from the
// CPU's strict order only in where the block totals join, inside the conformance bound
// (integer folds are exact either way).
void main()
{
    const uint outer = P[P_I], n = P[P_I + 1], inner = P[P_I + 2], step = gstride();
    const uint mode = P[P_I + 3], bsz = P[P_I + 4], nb = P[P_I + 5];
    const uint lines = outer * inner, units = mode == 1u || mode == 3u ? lines * nb : lines;
    for (uint u = gl_GlobalInvocationID.x; u < units;) {
        uint l = mode == 1u || mode == 3u ? u / nb : u, blk = u - l * nb;
        uint ob = l / inner, base = ob * n * inner + (l - ob * inner);
        ACC acc = OP == 191u ? ACC(1) : ACC(0);
        if (mode == 2u) {
            for (uint b = 0u; b < nb; b++) {
                ACC t = sc[l * nb + b];
                sc[l * nb + b] = acc; // the exclusive prefix
                acc = fold(acc, t);
            }
        } else {
            uint k0 = mode == 0u ? 0u : blk * bsz, k1 = mode == 0u ? n : min(n, k0 + bsz);
            if (mode == 3u) acc = sc[l * nb + blk];
            for (uint k = k0; k < k1; k++) {
                acc = fold(acc, LD(a[P[P_BASE + 1] + base + k * inner]));
                if (mode != 1u) o[P[P_BASE] + base + k * inner] = ST(acc);
            }
            if (mode == 1u) sc[l * nb + blk] = acc;
        }
        if (units - u <= step) break;
        u += step;
    }
}

#version 450
// reduce.comp — SUM MEAN PROD MAX MIN ARGMAX ARGMIN ANY ALL over the plan of
// engine/collapse.h (td__reduce_plan: kept runs and reduced runs with their strides). One
// workgroup per output element (grid-stride over outputs); invocation t folds the contiguous
// chunk [t c, (t + 1) c) of the reduced elements in index order, c = ceil(rcount / 256), and
// the 256 partials are combined by a fixed tree of adjacent pairs (t with t + s, s = 1, 2, 4,
// ...), so the fold order depends on rcount alone: no atomics, the same bytes on every run.
// Adjacent, in-order combination keeps the CPU's order rules: MAX/MIN give the last NaN or
// the first of equal extremes, ARGMAX/ARGMIN the first index of the extreme (the first NaN).
// Float sums and products accumulate in double and round once (as the CPU does); integer
// ones wrap. Bool MAX/MIN/ARG* compare the raw bytes, as the CPU does (a true byte need not
// be 1). Variant defines: TA/TO storage types, KF/KD/KI/KL/KU/KB the input kind.
#include "common.glsl"
#include "half.glsl"

layout(std430, binding = 1) buffer O { TO o[]; };
layout(std430, binding = 2) readonly buffer A { TA a[]; };

// parameter words of this shader
#define R_NOUT 0
#define R_KSIZE 2
#define R_KSTR 10
#define R_RSIZE 18
#define R_RSTR 26
#define R_NK 34
#define R_NR 35
#define R_RCOUNT 36

#if defined(KF) || defined(KD)
#define KFLOAT
#define ACC double
#define LD(v) double(LDA(v))
#elif defined(KI)
#define ACC int
#define LD(v) int(v)
#elif defined(KL)
#define ACC int64_t
#define LD(v) int64_t(v)
#else
#define ACC uint
#define LD(v) uint(v)
#endif

shared ACC s_v[256];
shared uint s_at[256];
shared uint s_has[256];

bool isnan_acc(ACC v)
{
#if defined(KFLOAT)
    return v != v;
#else
    return false;
#endif
}

// whether a later value b replaces an earlier a (MAX/ARGMAX: larger or NaN; MIN: smaller)
bool better(ACC av, ACC bv)
{
    if (isnan_acc(av)) return false;
    if (isnan_acc(bv)) return true;
    return (OP == 62u || OP == 64u) ? bv > av : bv < av;
}

void combine(inout ACC v, inout uint at, inout uint has, ACC v2, uint at2, uint has2)
{
    if (has2 == 0u) return;
    if (has == 0u) {
        v = v2; at = at2; has = 1u;
        return;
    }
    if (OP == 60u || OP == 61u) v = v + v2;
    else if (OP == 65u) v = v * v2;
    else if (OP == 187u) v = (v != ACC(0) || v2 != ACC(0)) ? ACC(1) : ACC(0);
    else if (OP == 188u) v = (v != ACC(0) && v2 != ACC(0)) ? ACC(1) : ACC(0);
    else if (better(v, v2)) { v = v2; at = at2; }
}

void main()
{
    const uint nout = P[P_I + R_NOUT], rcount = P[P_I + R_RCOUNT];
    const uint nk = P[P_I + R_NK], nr = P[P_I + R_NR];
    const uint t = gl_LocalInvocationID.x;
    const uint chunk = (rcount + 255u) / 256u;
    for (uint ob = gl_WorkGroupID.x; ob < nout; ob += gl_NumWorkGroups.x) {
        uint q = ob, koff = P[P_BASE + 1];
        for (int d = int(nk) - 1; d >= 0; d--) {
            uint dim = P[P_I + R_KSIZE + d], nq = q / dim;
            koff += (q - nq * dim) * P[P_I + R_KSTR + d];
            q = nq;
        }
        ACC v = ACC(0);
        uint at = 0u, has = 0u;
        uint lo = min(t * chunk, rcount), hi = min(lo + chunk, rcount);
        for (uint j = lo; j < hi; j++) {
            uint r = j, off = koff;
            for (int d = int(nr) - 1; d >= 0; d--) {
                uint dim = P[P_I + R_RSIZE + d], nq = r / dim;
                off += (r - nq * dim) * P[P_I + R_RSTR + d];
                r = nq;
            }
            ACC x = LD(a[off]);
            if (OP == 187u || OP == 188u) x = x != ACC(0) ? ACC(1) : ACC(0);
            combine(v, at, has, x, j, 1u);
        }
        s_v[t] = v;
        s_at[t] = at;
        s_has[t] = has;
        barrier();
        for (uint s = 1u; s < 256u; s *= 2u) {
            if ((t & (2u * s - 1u)) == 0u) {
                ACC v1 = s_v[t];
                uint at1 = s_at[t], h1 = s_has[t];
                combine(v1, at1, h1, s_v[t + s], s_at[t + s], s_has[t + s]);
                s_v[t] = v1;
                s_at[t] = at1;
                s_has[t] = h1;
            }
            barrier();
        }
        if (t == 0u) {
            ACC r = s_v[0];
            uint oo = P[P_BASE] + ob;
            if (s_has[0] == 0u) { // empty: SUM 0, PROD 1, MEAN NaN, ANY false, ALL true
                r = (OP == 65u || OP == 188u) ? ACC(1) : ACC(0);
#if defined(KFLOAT)
                if (OP == 61u) r = r / r; // 0/0 in double: NaN
#endif
            }
#if defined(KFLOAT)
            if (OP == 61u && s_has[0] != 0u) r = r / double(rcount);
#endif
#if defined(KB)
            if (OP == 63u) r = min(r, 1u); // the CPU folds bool MIN from true (1)
#endif
            if (OP == 64u || OP == 66u) o[oo] = TO(s_at[0]);
            else if (OP == 187u || OP == 188u) o[oo] = TO(r != ACC(0) ? 1u : 0u);
#if defined(KU) || defined(KB)
            else o[oo] = TO(r & 255u);
#else
            else o[oo] = STD(r); // a half output rounds the double once
#endif
        }
        barrier();
    }
}

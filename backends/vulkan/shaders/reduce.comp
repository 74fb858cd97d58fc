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
//
// Split reductions (R_MODE 1 then 2; vk_reduce.c picks them for few outputs with a long
// reduced extent, so that a sum to a scalar is not one workgroup on a whole GPU): pass 1
// cuts each output's rcount elements into R_G chunks of R_L consecutive elements (the last
// may be shorter), one workgroup per (chunk, output), each folding its chunk exactly as
// above (contiguous runs per invocation, then the fixed tree) into a partial (value, index,
// has) in the scratch buffer; pass 2 folds each output's R_G partials in chunk order the
// same way and finishes as mode 0. R_G and R_L are functions of rcount alone (vk_reduce.c),
// so the association — and the bits — depend on the shape only, never on the device or the
// timing; partials keep the accumulator type (double for float sums), so the rounding rules
// are mode 0's.
#include "common.glsl"
#include "half.glsl"

layout(std430, binding = 1) buffer O { TO o[]; };
layout(std430, binding = 2) readonly buffer A { TA a[]; };
// split reductions' partials, output-major: the accumulator's bits (lo, hi), index, has
struct Part { uint lo, hi, at, has; };
layout(std430, binding = 3) buffer S { Part part[]; };

// parameter words of this shader
#define R_NOUT 0
#define R_KSIZE 2
#define R_KSTR 10
#define R_RSIZE 18
#define R_RSTR 26
#define R_NK 34
#define R_NR 35
#define R_RCOUNT 36
#define R_MODE 37   // 0: one workgroup per output; 1: split pass 1 (partials); 2: pass 2;
                    // 3: one invocation per output
#define R_G 38      // chunks per output (modes 1 and 2)
#define R_L 39      // elements per chunk (mode 1)

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

Part to_part(ACC v, uint at, uint has)
{
#if defined(KFLOAT)
    uvec2 w = unpackDouble2x32(v);
#elif defined(KL)
    uvec2 w = unpackUint2x32(uint64_t(v));
#else
    uvec2 w = uvec2(uint(v), 0u);
#endif
    return Part(w.x, w.y, at, has);
}

ACC part_value(Part q)
{
#if defined(KFLOAT)
    return packDouble2x32(uvec2(q.lo, q.hi));
#elif defined(KL)
    return int64_t(packUint2x32(uvec2(q.lo, q.hi)));
#elif defined(KI)
    return int(q.lo);
#else
    return q.lo;
#endif
}

// Fold elements [jlo, jhi) of the output at koff, in index order, into (v, at, has).
void run(uint koff, uint jlo, uint jhi, inout ACC v, inout uint at, inout uint has)
{
    const uint nr = P[P_I + R_NR];
    if (nr == 1u) { // one reduced run: offsets koff + j * stride
        const uint rstr = P[P_I + R_RSTR];
        for (uint j = jlo; j < jhi; j++) {
            ACC x = LD(a[koff + j * rstr]);
            if (OP == 187u || OP == 188u) x = x != ACC(0) ? ACC(1) : ACC(0);
            combine(v, at, has, x, j, 1u);
        }
    } else {
        for (uint j = jlo; j < jhi; j++) {
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
    }
}

// Fold with the whole workgroup: invocation t takes the contiguous run [lo + t c, lo +
// (t + 1) c) of [lo, hi), c = ceil((hi - lo) / 256), in index order (elements of the output
// at koff, or, with parts, partials from part[pbase + j]), then the fixed tree of adjacent
// pairs; the result is in s_v[0], s_at[0], s_has[0] for every invocation after the call.
void fold(uint koff, uint lo, uint hi, bool parts, uint pbase)
{
    const uint t = gl_LocalInvocationID.x;
    const uint chunk = (hi - lo + 255u) / 256u;
    ACC v = ACC(0);
    uint at = 0u, has = 0u;
    uint jlo = min(lo + t * chunk, hi), jhi = min(jlo + chunk, hi);
    if (parts) {
        for (uint j = jlo; j < jhi; j++) {
            Part q = part[pbase + j];
            combine(v, at, has, part_value(q), q.at, q.has);
        }
    } else {
        run(koff, jlo, jhi, v, at, has);
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
}

// The output ob from a fold's result (r, at, has).
void finish(uint ob, uint rcount, ACC r, uint at, uint has)
{
    uint oo = P[P_BASE] + ob;
    if (has == 0u) { // empty: SUM 0, PROD 1, MEAN NaN, ANY false, ALL true
        r = (OP == 65u || OP == 188u) ? ACC(1) : ACC(0);
#if defined(KFLOAT)
        if (OP == 61u) r = r / r; // 0/0 in double: NaN
#endif
    }
#if defined(KFLOAT)
    if (OP == 61u && has != 0u) r = r / double(rcount);
#endif
#if defined(KB)
    if (OP == 63u) r = min(r, 1u); // the CPU folds bool MIN from true (1)
#endif
    if (OP == 64u || OP == 66u) o[oo] = TO(at);
    else if (OP == 187u || OP == 188u) o[oo] = TO(r != ACC(0) ? 1u : 0u);
#if defined(KU) || defined(KB)
    else o[oo] = TO(r & 255u);
#else
    else o[oo] = STD(r); // a half output rounds the double once
#endif
}

// The input offset of output ob's first reduced element.
uint kept_offset(uint ob)
{
    const uint nk = P[P_I + R_NK];
    uint q = ob, koff = P[P_BASE + 1];
    for (int d = int(nk) - 1; d >= 0; d--) {
        uint dim = P[P_I + R_KSIZE + d], nq = q / dim;
        koff += (q - nq * dim) * P[P_I + R_KSTR + d];
        q = nq;
    }
    return koff;
}

// Mode 3: one invocation per output (grid-stride), for short reduced extents with many
// outputs, where a workgroup per output costs far more than its fold (lavapipe runs a
// workgroup's 256 invocations and its barriers in ~0.1-0.5 ms: [1e5, 1] summed over axis 1
// took 50 s). The invocation replays mode 0's association exactly: the same 256 runs
// of c = ceil(rcount / 256) elements, each folded in index order, then the same tree of
// adjacent pairs, kept as a stack of complete subtrees (a subtree of 2^k runs merges with its
// left neighbour of equal size; what remains merges right to left, as the tree does with its
// empty runs), so the bits are mode 0's for every shape. rcount 0 writes the identity.
void fold_one(uint ob, uint rcount)
{
    ACC sv[9];
    uint sat[9], shas[9], slev[9];
    int top = -1;
    const uint koff = kept_offset(ob), c = max((rcount + 255u) / 256u, 1u);
    for (uint lo = 0u; lo < rcount; lo += c) {
        ACC v = ACC(0);
        uint at = 0u, has = 0u, lev = 0u;
        run(koff, lo, min(lo + c, rcount), v, at, has);
        while (top >= 0 && slev[top] == lev) {
            ACC v1 = sv[top];
            uint at1 = sat[top], h1 = shas[top];
            combine(v1, at1, h1, v, at, has);
            v = v1; at = at1; has = h1;
            lev++;
            top--;
        }
        top++;
        sv[top] = v; sat[top] = at; shas[top] = has; slev[top] = lev;
    }
    ACC v = ACC(0);
    uint at = 0u, has = 0u;
    for (; top >= 0; top--) {
        ACC v1 = sv[top];
        uint at1 = sat[top], h1 = shas[top];
        combine(v1, at1, h1, v, at, has);
        v = v1; at = at1; has = h1;
    }
    finish(ob, rcount, v, at, has);
}

void main()
{
    const uint nout = P[P_I + R_NOUT], rcount = P[P_I + R_RCOUNT], mode = P[P_I + R_MODE];
    const uint t = gl_LocalInvocationID.x;
    if (mode == 3u) {
        const uint i0 = gl_WorkGroupID.x * gl_WorkGroupSize.x + t;
        for (uint ob = i0; ob < nout; ob += gstride()) fold_one(ob, rcount);
        return;
    }
    if (mode == 1u) { // workgroup (g, ob): chunk g of output ob into part[ob G + g]
        const uint g = gl_WorkGroupID.x, G = P[P_I + R_G], L = P[P_I + R_L];
        for (uint ob = gl_WorkGroupID.y; ob < nout; ob += gl_NumWorkGroups.y) {
            uint lo = min(g * L, rcount);
            fold(kept_offset(ob), lo, min(lo + L, rcount), false, 0u);
            if (t == 0u) part[ob * G + g] = to_part(s_v[0], s_at[0], s_has[0]);
            barrier();
        }
        return;
    }
    for (uint ob = gl_WorkGroupID.x; ob < nout; ob += gl_NumWorkGroups.x) {
        if (mode == 2u) {
            const uint G = P[P_I + R_G];
            fold(0u, 0u, G, true, ob * G);
        } else {
            fold(kept_offset(ob), 0u, rcount, false, 0u);
        }
        if (t == 0u) finish(ob, rcount, s_v[0], s_at[0], s_has[0]);
        barrier();
    }
}

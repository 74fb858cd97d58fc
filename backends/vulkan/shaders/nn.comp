#version 450
// nn.comp — LAYER_NORM RMS_NORM GROUP_NORM and their backward ops, BATCH_NORM_BACKWARD, and
// BATCH_NORM with given statistics, by backends/cpu/cpu_nn.c's group formulation: a group is
// nseg segments of seglen contiguous elements (segment s at base + s segstride), reduced to
// a mean and r = 1/sqrt(var + eps) and then mapped element by element. Everything runs in
// double (f16/bf16/f32 widened exactly) and each result is rounded once to the dtype, as the
// CPU. One workgroup per group: invocation t folds its contiguous chunk of the group in
// order and the partials meet in reduce.comp's fixed tree (an association of its own, inside
// the conformance suite's norm bound; deterministic). Statistics are two-pass, as the CPU's.
// Kinds (P_I): 0 LN/GN forward, 1 RMS forward, 2 LN/GN/BN backward, 3 RMS backward, 4
// BATCH_NORM (elementwise: a group is one [n, c] row of S elements). Variants: TA (storage),
// HA16/HABF + HO16/HOBF for the halves.
#include "common.glsl"
#include "half.glsl"

layout(std430, binding = 1) buffer O { TA o[]; };
layout(std430, binding = 2) readonly buffer A { TA a[]; };
layout(std430, binding = 3) readonly buffer B { TA b[]; };
layout(std430, binding = 4) readonly buffer C { TA c[]; };
layout(std430, binding = 5) readonly buffer D { TA d[]; };
layout(std430, binding = 6) readonly buffer E { TA e[]; };
#define TO TA

shared double s_v[256];

double tree_sum(double v)
{
    const uint t = gl_LocalInvocationID.x;
    s_v[t] = v;
    barrier();
    for (uint s = 1u; s < 256u; s *= 2u) {
        if ((t & (2u * s - 1u)) == 0u) s_v[t] = s_v[t] + s_v[t + s];
        barrier();
    }
    double r = s_v[0];
    barrier();
    return r;
}

uint Q(int k) { return P[P_I + k]; }
double ldA(uint i) { return double(LDA(a[P[P_BASE + 1] + i])); }
double ldB(uint i) { return double(LDA(b[P[P_BASE + 2] + i])); }
double ldC(uint i) { return double(LDA(c[P[P_BASE + 3] + i])); }
double ldD(uint i) { return double(LDA(d[P[P_BASE + 4] + i])); }
double ldE(uint i) { return double(LDA(e[P[P_BASE + 5] + i])); }

void main()
{
    const uint kind = Q(0), nseg = Q(1), seglen = Q(2), segstride = Q(3), gstride = Q(4);
    const uint gdiv = Q(5), gstep = Q(6), welem = Q(7), pdiv = Q(8), pmul = Q(9), pseg = Q(10);
    const uint ngroups = Q(11), hasw = Q(12), hasb = Q(13), nc = Q(14);
    const double eps = pf(0);
    const bool bwd = kind == 2u || kind == 3u, layer = kind == 0u || kind == 2u;
    const uint t = gl_LocalInvocationID.x, n = nseg * seglen;
    const uint chunk = (n + 255u) / 256u, lo = min(t * chunk, n), hi = min(lo + chunk, n);
    for (uint k = gl_WorkGroupID.x; k < ngroups; k += gl_NumWorkGroups.x) {
        const uint base = (k / gdiv) * gstride + (k % gdiv) * gstep;
        if (kind == 4u) { // BATCH_NORM: x, mean, var, weight, bias; row k is channel k % C
            const uint ch = k % nc;
            const double m = ldB(ch), r = 1.0LF / sqrt(ldC(ch) + eps);
            for (uint j = lo; j < hi; j++) {
                double v = (ldA(base + j) - m) * r;
                if (hasw != 0u) v *= ldD(ch);
                if (hasb != 0u) v += ldE(ch);
                o[P[P_BASE] + base + j] = STD(v);
            }
            continue;
        }
        // x is input a (forward) or b (backward: dy is a)
        double mean = 0.0LF;
        if (layer) {
            double s = 0.0LF;
            for (uint j = lo; j < hi; j++) {
                uint off = base + (j / seglen) * segstride + j % seglen;
                s += bwd ? ldB(off) : ldA(off);
            }
            mean = tree_sum(s) / double(n);
        }
        double ss = 0.0LF;
        for (uint j = lo; j < hi; j++) {
            uint off = base + (j / seglen) * segstride + j % seglen;
            double dv = (bwd ? ldB(off) : ldA(off)) - mean;
            ss += dv * dv;
        }
        const double r = 1.0LF / sqrt(tree_sum(ss) / double(n) + eps);
        double mg = 0.0LF, mgx = 0.0LF;
        if (bwd) {
            double sg = 0.0LF, sgx = 0.0LF;
            for (uint j = lo; j < hi; j++) {
                uint s = j / seglen, off = base + s * segstride + j % seglen;
                uint pi = welem != 0u ? j % seglen : (k % pdiv) * pmul + s * pseg;
                double g = ldA(off);
                if (hasw != 0u) g *= ldC(pi);
                sg += g;
                sgx += g * ((ldB(off) - mean) * r);
            }
            sg = tree_sum(sg);
            sgx = tree_sum(sgx);
            mg = layer ? sg / double(n) : 0.0LF;
            mgx = sgx / double(n);
        }
        for (uint j = lo; j < hi; j++) {
            uint s = j / seglen, off = base + s * segstride + j % seglen;
            uint pi = welem != 0u ? j % seglen : (k % pdiv) * pmul + s * pseg;
            double v;
            if (bwd) {
                double g = ldA(off);
                if (hasw != 0u) g *= ldC(pi);
                double xh = (ldB(off) - mean) * r;
                v = r * (g - mg - xh * mgx);
            } else {
                v = (ldA(off) - mean) * r;
                if (hasw != 0u) v *= ldB(pi);
                if (hasb != 0u) v += ldC(pi);
            }
            o[P[P_BASE] + off] = STD(v);
        }
    }
}

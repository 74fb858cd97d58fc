#version 450
// stats.comp — VAR STD LOGSUMEXP NORM over the reduce plan (engine/collapse.h), by
// backends/cpu/cpu_stats.c's formulas in double: VAR sum (x - mean)^2 / max(0, n -
// correction) after mean = sum x / n; STD its sqrt; LOGSUMEXP m + log sum exp(x - m) after
// m = max (NaN: NaN, m = +-inf: m, n = 0: -inf); NORM by p (0: count of x != 0, +-inf:
// max/min |x|, 1: sum |x|, 2: sqrt sum x^2, else (sum |x|^p)^(1/p); a NaN gives NaN but
// for p = 0). One workgroup per output; invocation t folds its contiguous chunk of the
// reduced elements in index order and the 256 partials meet in a fixed tree of adjacent
// pairs (reduce.comp's scheme), so the bits depend on the shape alone. The association
// differs from the CPU's sequential fold, within the conformance bound for these ops.
// Variants: TA/TO storage (HA16/HABF, HO16/HOBF for the halves).
#include "common.glsl"
#include "dmath.glsl"
#include "half.glsl"

layout(std430, binding = 1) buffer O { TO o[]; };
layout(std430, binding = 2) readonly buffer A { TA a[]; };

#define R_NOUT 0
#define R_KSIZE 2
#define R_KSTR 10
#define R_RSIZE 18
#define R_RSTR 26
#define R_NK 34
#define R_NR 35
#define R_RCOUNT 36

shared double s_v[256];

// 0 sum, 1 max (NaN wins: the caller tests for it first), 2 min
double fold(double x, double y, int how)
{
    if (how == 0) return x + y;
    if (how == 1) return (x != x || y != y) ? 0.0LF / 0.0LF : max(x, y);
    return min(x, y);
}

// The fixed tree over the workgroup's partials; every invocation gets the total.
double tree(double v, int how)
{
    const uint t = gl_LocalInvocationID.x;
    s_v[t] = v;
    barrier();
    for (uint s = 1u; s < 256u; s *= 2u) {
        if ((t & (2u * s - 1u)) == 0u) s_v[t] = fold(s_v[t], s_v[t + s], how);
        barrier();
    }
    double r = s_v[0];
    barrier();
    return r;
}

uint elem(uint koff, uint j)
{
    uint off = koff;
    for (int d = int(P[P_I + R_NR]) - 1; d >= 0; d--) {
        uint dim = P[P_I + R_RSIZE + d], nq = j / dim;
        off += (j - nq * dim) * P[P_I + R_RSTR + d];
        j = nq;
    }
    return off;
}

double ld(uint off) { return double(LDA(a[off])); }

void main()
{
    const uint nout = P[P_I + R_NOUT], rcount = P[P_I + R_RCOUNT], nk = P[P_I + R_NK];
    const uint t = gl_LocalInvocationID.x;
    const uint chunk = (rcount + 255u) / 256u;
    const uint lo = min(t * chunk, rcount), hi = min(lo + chunk, rcount);
    const double n = double(rcount), f0 = pf(0), inf = 1.0LF / 0.0LF;
    for (uint ob = gl_WorkGroupID.x; ob < nout; ob += gl_NumWorkGroups.x) {
        uint q = ob, koff = P[P_BASE + 1];
        for (int d = int(nk) - 1; d >= 0; d--) {
            uint dim = P[P_I + R_KSIZE + d], nq = q / dim;
            koff += (q - nq * dim) * P[P_I + R_KSTR + d];
            q = nq;
        }
        double r;
        if (OP == 180u || OP == 181u) { // VAR, STD
            double s = 0.0LF;
            for (uint j = lo; j < hi; j++) s += ld(elem(koff, j));
            double mean = tree(s, 0) / n;
            double ss = 0.0LF;
            for (uint j = lo; j < hi; j++) {
                double dv = ld(elem(koff, j)) - mean;
                ss += dv * dv;
            }
            ss = tree(ss, 0);
            r = ss / (n - f0 > 0.0LF ? n - f0 : 0.0LF);
            if (OP == 181u) r = sqrt(r);
        } else if (OP == 182u) { // LOGSUMEXP
            double m = -inf;
            for (uint j = lo; j < hi; j++) m = fold(m, ld(elem(koff, j)), 1);
            m = tree(m, 1);
            if (m != m || isinf(m)) {
                r = m;
            } else {
                double s = 0.0LF;
                for (uint j = lo; j < hi; j++) s += d_exp(ld(elem(koff, j)) - m);
                r = m + d_log(tree(s, 0));
            }
        } else { // NORM
            int how = isinf(f0) ? (f0 > 0.0LF ? 1 : 2) : 0;
            double s = f0 == -inf ? inf : 0.0LF, nan = 0.0LF;
            for (uint j = lo; j < hi; j++) {
                double av = abs(ld(elem(koff, j)));
                if (f0 == 0.0LF) s += av != 0.0LF ? 1.0LF : 0.0LF;
                else if (av != av) nan = 1.0LF;
                else if (how == 1) s = max(s, av);
                else if (how == 2) s = min(s, av);
                else if (f0 == 1.0LF) s += av;
                else if (f0 == 2.0LF) s += av * av;
                else s += d_pow(av, f0);
            }
            s = tree(s, how);
            if (tree(nan, 0) != 0.0LF) r = 0.0LF / 0.0LF;
            else if (f0 == 0.0LF || f0 == 1.0LF || isinf(f0)) r = s;
            else if (f0 == 2.0LF) r = sqrt(s);
            else r = d_pow(s, 1.0LF / f0);
        }
        if (t == 0u) o[P[P_BASE] + ob] = STD(r);
        barrier();
    }
}

#version 450
// conv.comp — the helpers that turn the CONV family into GEMMs (matmul.comp), as
// backends/gpu/gpu_window.cu does for CUDA; vk_window.c runs them in chunks of images:
//   CVF 1  im2col: col[((j G + g) kg + r) P + p] for images n0 + j (j < nimg): row r < C/G kk
//          is channel r / kk of group g at kernel offset r % kk (zero outside the input), row
//          C/G kk (bias only) is one; one invocation per (image, group, row group, position)
//          writes its kk rows. Elements move as bits (TW their width), so one variant per
//          width serves every float dtype.
//   CVF 2  transposed im2col for CONV_WEIGHT_GRAD: colT[((j G + g) P + p) kin + c kk + t],
//          one invocation per (image, group, channel, position) writing its kk offsets.
//   CVF 3  col2im for CONV_TRANSPOSE: y[n0 + j, o, q] = the sum over kernel offsets t, in
//          order, of cols[j, g][(o % cog) kk + t][l] where input position l reaches output q
//          through t, + bias, in the accumulator and rounded once (cols in TC: f32 for
//          f32/f16/bf16, f64 for f64; the GEMM wrote them unrounded to the half).
//   CVF 4  the weight gradient's per-image partial products summed over the images in
//          order: acc[e] = (first ? 0 : acc[e]) + part[0 ne + e] + part[1 ne + e] + ...,
//          and with `last` dw[e] = acc[e] rounded once.
// No atomics: every output element is written by one invocation, each sum in a fixed order.
#include "common.glsl"
#include "half.glsl"

// window words (vk_ops.c's exec_window layout, as window.comp), then this file's own
int W(int k) { return int(P[P_I + k]); }
#define WIN(d) W(d)
#define WOUT(d) W(3 + d)
#define WK(d) W(6 + d)
#define WS(d) W(9 + d)
#define WDIL(d) W(12 + d)
#define WPL(d) W(15 + d)
#define C_N W(26)
#define C_CI W(27)
#define C_CO W(28)
#define C_G W(29)
#define C_BIAS W(30)
#define C_N0 W(32)
#define C_NIMG W(33)
#define C_KG W(34)
#define C_ONE_LO P[P_I + 35]
#define C_ONE_HI P[P_I + 36]
#define C_NE P[P_I + 37]
#define C_FIRST W(38)
#define C_LAST W(39)

#if CVF == 1 || CVF == 2
layout(std430, binding = 1) writeonly buffer O { TW o[]; };
layout(std430, binding = 2) readonly buffer A { TW a[]; };
#elif CVF == 3
layout(std430, binding = 1) writeonly buffer O { TO o[]; };
layout(std430, binding = 2) readonly buffer A { TC cols[]; };
layout(std430, binding = 3) readonly buffer B { TA bias[]; };
#else
layout(std430, binding = 1) writeonly buffer O { TO o[]; };
layout(std430, binding = 2) readonly buffer A { TC part[]; };
layout(std430, binding = 3) buffer B { TC acc[]; };
#endif

#if CVF == 1 || CVF == 2
// The kk input values output position (p0, p1, p2) sees through the kernel offsets in order,
// zero outside the input, from the plane at xb to o[ob], o[ob + step], ...
void write_patch(uint xb, uint ob, uint step, int p0, int p1, int p2)
{
    const TW zero = TW(0);
    for (int kd = 0; kd < WK(0); kd++) {
        const int id = p0 * WS(0) - WPL(0) + kd * WDIL(0);
        const bool dok = id >= 0 && id < WIN(0);
        for (int kh = 0; kh < WK(1); kh++) {
            const int ih = p1 * WS(1) - WPL(1) + kh * WDIL(1);
            const bool hok = dok && ih >= 0 && ih < WIN(1);
            const int row = (id * WIN(1) + ih) * WIN(2);
            for (int kw = 0; kw < WK(2); kw++) {
                const int iw = p2 * WS(2) - WPL(2) + kw * WDIL(2);
                o[ob] = hok && iw >= 0 && iw < WIN(2) ? a[xb + uint(row + iw)] : zero;
                ob += step;
            }
        }
    }
}
#endif

#if CVF == 3
// The input index along dim d that output q reaches through kernel offset k, or -1.
int convt_src(int d, int q, int k)
{
    const int u = q + WPL(d) - k * WDIL(d);
    if (u < 0 || u % WS(d) != 0) return -1;
    const int l = u / WS(d);
    return l < WIN(d) ? l : -1;
}
#endif

void main()
{
    const uint n = P[P_N], step = gstride();
    const uint xbase = P[P_BASE + 1];
    const int G = C_G, cg = C_CI / G;
    const int PP = WOUT(0) * WOUT(1) * WOUT(2), L = WIN(0) * WIN(1) * WIN(2);
    const int kk = WK(0) * WK(1) * WK(2), ohw = WOUT(1) * WOUT(2);
    for (uint i = gl_GlobalInvocationID.x; i < n;) {
#if CVF == 1
        {
            const int rows = cg + (C_BIAS != 0 ? 1 : 0), kg = C_KG;
            const int p = int(i % uint(PP)), cr = int(i / uint(PP));
            const int c = cr % rows, jg = cr / rows;
            const uint ob = P[P_BASE] + uint(jg * kg) * uint(PP) + uint(p);
            if (c == cg) {
#if defined(W64)
                o[ob + uint(kg - 1) * uint(PP)] = TW(packUint2x32(uvec2(C_ONE_LO, C_ONE_HI)));
#else
                o[ob + uint(kg - 1) * uint(PP)] = TW(C_ONE_LO);
#endif
            } else {
                const int gi = jg % G, j = jg / G;
                const int p0 = p / ohw, rem = p - p0 * ohw;
                const int p1 = rem / WOUT(2), p2 = rem - p1 * WOUT(2);
                write_patch(xbase + uint((C_N0 + j) * C_CI + gi * cg + c) * uint(L),
                            ob + uint(c * kk) * uint(PP), uint(PP), p0, p1, p2);
            }
        }
#elif CVF == 2
        {
            const int kin = cg * kk;
            const int c = int(i % uint(cg)), p = int((i / uint(cg)) % uint(PP));
            const int jg = int(i / uint(cg * PP));
            const int gi = jg % G, j = jg / G;
            const int p0 = p / ohw, rem = p - p0 * ohw;
            const int p1 = rem / WOUT(2), p2 = rem - p1 * WOUT(2);
            write_patch(xbase + uint((C_N0 + j) * C_CI + gi * cg + c) * uint(L),
                        P[P_BASE] + uint(jg * PP + p) * uint(kin) + uint(c * kk), 1u, p0, p1, p2);
        }
#elif CVF == 3
        {
            const int CO = C_CO, cog = CO / G;
            const int q = int(i % uint(PP)), oc = int((i / uint(PP)) % uint(CO));
            const int j = int(i / uint(PP * CO));
            const int q0 = q / ohw, q1 = (q / WOUT(2)) % WOUT(1), q2 = q % WOUT(2);
            const int gi = oc / cog, ol = oc - gi * cog;
            const uint cb = xbase + uint((j * G + gi) * cog + ol) * uint(kk * L);
            precise TC s = TC(0);
            for (int kd = 0; kd < WK(0); kd++) {
                const int l0 = convt_src(0, q0, kd);
                for (int kh = 0; kh < WK(1); kh++) {
                    const int l1 = convt_src(1, q1, kh);
                    for (int kw = 0; kw < WK(2); kw++) {
                        const int l2 = convt_src(2, q2, kw);
                        if (l0 < 0 || l1 < 0 || l2 < 0) continue;
                        const int t = (kd * WK(1) + kh) * WK(2) + kw;
                        s = s + cols[cb + uint(t * L + (l0 * WIN(1) + l1) * WIN(2) + l2)];
                    }
                }
            }
            if (C_BIAS != 0) s = s + TC(LDA(bias[P[P_BASE + 2] + uint(oc)]));
            o[P[P_BASE] + i] = STF(s);
        }
#else
        {
            const uint ne = C_NE;
            precise TC s = C_FIRST != 0 ? TC(0) : acc[P[P_BASE + 2] + i];
            for (int j = 0; j < C_NIMG; j++) s = s + part[xbase + uint(j) * ne + i];
            if (C_LAST != 0) o[P[P_BASE] + i] = STF(s);
            else acc[P[P_BASE + 2] + i] = s;
        }
#endif
        if (n - i <= step) break;
        i += step;
    }
}

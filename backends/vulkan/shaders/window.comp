#version 450
// window.comp — the POOL family (engine/window.h) and the CONV family, one invocation per
// output element, each running backends/cpu/cpu_window.c's loop for that element in the
// same order and working type (T: f32 for f32/f16/bf16, f64 for f64; `precise`), so the pools
// give the CPU's sums; CONV, CONV_TRANSPOSE (as a gather: each output sums the inputs whose
// scattered windows reach it) and CONV_WEIGHT_GRAD fold their products in a fixed order of
// their own, inside the conformance suite's conv bound. No atomics: each output is written
// by one invocation. The [D, H, W] normalisation (3 spatial slots) is window.h's.
// Variants: WOP 1 pools/interpolate (TO = TA), 2 MAX_POOL_INDICES (TO int64_t), 3
// MAX_POOL_BACKWARD (TB the index type), 4 CONV and CONV_TRANSPOSE (TB = TA: the weight,
// bias in binding 4), 5 CONV_WEIGHT_GRAD (TB = TA: dy; one workgroup per weight element);
// KF/KD, HA16/HABF + HO16/HOBF for the halves.
#include "common.glsl"
#include "half.glsl"

layout(std430, binding = 1) buffer O { TO o[]; };
layout(std430, binding = 2) readonly buffer A { TA a[]; };
#if WOP >= 3
layout(std430, binding = 3) readonly buffer B { TB b[]; };
#endif
#if WOP == 4
layout(std430, binding = 4) readonly buffer C { TA c[]; };
#endif

#if defined(KD)
#define T double
#define NEG_INF packDouble2x32(uvec2(0u, 0xfff00000u))
#else
#define T float
#define NEG_INF uintBitsToFloat(0xff800000u)
#endif

// window words (vk_ops.c): in[3] out[3] k[3] stride[3] dil[3] pad_lo[3] pad_hi[3],
// count_include_pad, mode, align_corners, first (3 - nsp), planes, n, c, co, groups, has_bias
int W(int k) { return int(P[P_I + k]); }
#define WIN(d) W(d)
#define WOUT(d) W(3 + d)
#define WK(d) W(6 + d)
#define WS(d) W(9 + d)
#define WDIL(d) W(12 + d)
#define WPL(d) W(15 + d)
#define WPH(d) W(18 + d)

T xin(uint off) { return T(LDA(a[P[P_BASE + 1] + off])); }
T fdivT(T x, T y) { return T(double(x) / double(y)); }

#if WOP == 1 || WOP == 2
void avg_window(int d, int j, out int s, out int e, out int ext)
{
    s = j * WS(d) - WPL(d);
    e = s + WK(d);
    if (e > WIN(d) + WPH(d)) e = WIN(d) + WPH(d);
    int padded = e - s;
    if (s < 0) s = 0;
    if (e > WIN(d)) e = WIN(d);
    ext = W(21) != 0 ? padded : e - s;
}
#endif

#if WOP == 5
shared T s_acc[256];
#endif

void main()
{
    const uint n = P[P_N], step = gstride();
#if WOP == 5
    // CONV_WEIGHT_GRAD: dw [CO, C/groups, *k] = sum over n, j of dy[n, o, j] x[n, c, j s + k d
    // - pad]; one workgroup per weight element, invocation t folds its contiguous chunk of
    // the N x positions products in order, the partials meet in a fixed tree of adjacent
    // pairs (reduce.comp's scheme): deterministic, and no invocation walks the whole batch
    const int NB = W(26), CI = W(27), CO = W(28), G = W(29);
    const int IP = WIN(0) * WIN(1) * WIN(2), OPL = WOUT(0) * WOUT(1) * WOUT(2);
    const int KP = WK(0) * WK(1) * WK(2), cg = CI / G, cog = CO / G, total = NB * OPL;
    const uint t = gl_LocalInvocationID.x;
    const int chunk = (total + 255) / 256, lo = min(int(t) * chunk, total);
    const int hi = min(lo + chunk, total);
    for (uint i = gl_WorkGroupID.x; i < n; i += gl_NumWorkGroups.x) {
        const int oc = int(i) / (cg * KP), cl = (int(i) / KP) % cg, kk = int(i) % KP;
        const int kd = kk / (WK(1) * WK(2)), kh = (kk / WK(2)) % WK(1), kw = kk % WK(2);
        const int ci = (oc / cog) * cg + cl;
        precise T acc = T(0);
        for (int q = lo; q < hi; q++) {
            const int nn = q / OPL, j = q - nn * OPL;
            const int p0 = j / (WOUT(1) * WOUT(2)), p1 = (j / WOUT(2)) % WOUT(1), p2 = j % WOUT(2);
            int t0 = p0 * WS(0) + kd * WDIL(0) - WPL(0);
            int t1 = p1 * WS(1) + kh * WDIL(1) - WPL(1);
            int t2 = p2 * WS(2) + kw * WDIL(2) - WPL(2);
            if (t0 < 0 || t0 >= WIN(0) || t1 < 0 || t1 >= WIN(1) || t2 < 0 || t2 >= WIN(2))
                continue;
            T xv = xin(uint((nn * CI + ci) * IP + (t0 * WIN(1) + t1) * WIN(2) + t2));
            T dv = T(LDA(b[P[P_BASE + 2] + uint((nn * CO + oc) * OPL + j)]));
            precise T pr = dv * xv;
            acc = acc + pr;
        }
        s_acc[t] = acc;
        barrier();
        for (uint s = 1u; s < 256u; s *= 2u) {
            if ((t & (2u * s - 1u)) == 0u) {
                precise T v = s_acc[t] + s_acc[t + s];
                s_acc[t] = v;
            }
            barrier();
        }
        if (t == 0u) o[P[P_BASE] + i] = STF(s_acc[0]);
        barrier();
    }
#else
    for (uint i = gl_GlobalInvocationID.x; i < n;) {
#if WOP == 1 || WOP == 2 || WOP == 3
        const bool bwd = OP == 265u || OP == 267u || OP == 269u;
        // forward ops: i walks the output (plane, j); backward ops: the input gradient
        const int IP = WIN(0) * WIN(1) * WIN(2), OPL = WOUT(0) * WOUT(1) * WOUT(2);
        const int per = bwd ? IP : OPL;
        const int pl = int(i) / per, j = int(i) - pl * per;
        const int d0 = bwd ? j / (WIN(1) * WIN(2)) : j / (WOUT(1) * WOUT(2));
        const int d1 = bwd ? (j / WIN(2)) % WIN(1) : (j / WOUT(2)) % WOUT(1);
        const int d2 = bwd ? j % WIN(2) : j % WOUT(2);
        const int c3[3] = int[3](d0, d1, d2);
        const uint xb = uint(pl) * uint(bwd ? OPL : IP);
#endif
#if WOP == 1 || WOP == 2
        if (OP == 263u || OP == 264u) { // MAX_POOL, MAX_POOL_INDICES
            T best = NEG_INF;
            int bi = -1;
            for (int kd = 0; kd < WK(0); kd++) {
                int id = d0 * WS(0) - WPL(0) + kd * WDIL(0);
                if (id < 0 || id >= WIN(0)) continue;
                for (int kh = 0; kh < WK(1); kh++) {
                    int ih = d1 * WS(1) - WPL(1) + kh * WDIL(1);
                    if (ih < 0 || ih >= WIN(1)) continue;
                    for (int kw = 0; kw < WK(2); kw++) {
                        int iw = d2 * WS(2) - WPL(2) + kw * WDIL(2);
                        if (iw < 0 || iw >= WIN(2)) continue;
                        int pos = (id * WIN(1) + ih) * WIN(2) + iw;
                        T v = xin(xb + uint(pos));
                        if (bi < 0) bi = pos;
                        if (v > best || v != v) {
                            best = v;
                            bi = pos;
                        }
                    }
                }
            }
#if WOP == 2
            o[P[P_BASE] + i] = TO(int64_t(bi));
#else
            o[P[P_BASE] + i] = STF(best);
#endif
        }
#endif
#if WOP == 1
        else if (OP == 266u) { // AVG_POOL
            int s[3], e[3], ext[3];
            for (int d = 0; d < 3; d++) avg_window(d, c3[d], s[d], e[d], ext[d]);
            precise T sum = T(0);
            for (int id = s[0]; id < e[0]; id++)
                for (int ih = s[1]; ih < e[1]; ih++)
                    for (int iw = s[2]; iw < e[2]; iw++)
                        sum = sum + xin(xb + uint((id * WIN(1) + ih) * WIN(2) + iw));
            o[P[P_BASE] + i] = STF(fdivT(sum, T(ext[0] * ext[1] * ext[2])));
        } else if (OP == 267u) { // AVG_POOL_BACKWARD: the windows that hold this input
            int lo3[3], hi3[3];
            for (int d = 0; d < 3; d++) {
                int t = c3[d] + WPL(d) - WK(d) + 1;
                lo3[d] = t <= 0 ? 0 : (t + WS(d) - 1) / WS(d);
                hi3[d] = min((c3[d] + WPL(d)) / WS(d), WOUT(d) - 1);
            }
            precise T sum = T(0);
            for (int jd = lo3[0]; jd <= hi3[0]; jd++)
                for (int jh = lo3[1]; jh <= hi3[1]; jh++)
                    for (int jw = lo3[2]; jw <= hi3[2]; jw++) {
                        int s, e, x0, x1, x2;
                        avg_window(0, jd, s, e, x0);
                        avg_window(1, jh, s, e, x1);
                        avg_window(2, jw, s, e, x2);
                        T dyv = xin(xb + uint((jd * WOUT(1) + jh) * WOUT(2) + jw));
                        sum = sum + fdivT(dyv, T(x0 * x1 * x2));
                    }
            o[P[P_BASE] + i] = STF(sum);
        } else if (OP == 268u) { // ADAPTIVE_AVG_POOL
            int s[3], e[3];
            for (int d = 0; d < 3; d++) {
                s[d] = (c3[d] * WIN(d)) / WOUT(d);
                e[d] = ((c3[d] + 1) * WIN(d) + WOUT(d) - 1) / WOUT(d);
            }
            precise T sum = T(0);
            for (int id = s[0]; id < e[0]; id++)
                for (int ih = s[1]; ih < e[1]; ih++)
                    for (int iw = s[2]; iw < e[2]; iw++)
                        sum = sum + xin(xb + uint((id * WIN(1) + ih) * WIN(2) + iw));
            o[P[P_BASE] + i] = STF(fdivT(sum, T((e[0] - s[0]) * (e[1] - s[1]) * (e[2] - s[2]))));
        } else if (OP == 269u) { // ADAPTIVE_AVG_POOL_BACKWARD
            int lo3[3], hi3[3];
            for (int d = 0; d < 3; d++) {
                lo3[d] = c3[d] * WOUT(d) / WIN(d);
                hi3[d] = ((c3[d] + 1) * WOUT(d) - 1) / WIN(d);
            }
            precise T sum = T(0);
            for (int jd = lo3[0]; jd <= hi3[0]; jd++)
                for (int jh = lo3[1]; jh <= hi3[1]; jh++)
                    for (int jw = lo3[2]; jw <= hi3[2]; jw++) {
                        int j3[3] = int[3](jd, jh, jw);
                        int cnt = 1;
                        for (int d = 0; d < 3; d++) {
                            int s = (j3[d] * WIN(d)) / WOUT(d);
                            int e = ((j3[d] + 1) * WIN(d) + WOUT(d) - 1) / WOUT(d);
                            cnt *= e - s;
                        }
                        T dyv = xin(xb + uint((jd * WOUT(1) + jh) * WOUT(2) + jw));
                        sum = sum + fdivT(dyv, T(cnt));
                    }
            o[P[P_BASE] + i] = STF(sum);
        } else if (OP == 270u) { // INTERPOLATE
            T v;
            if (W(22) == 0) { // nearest (window.h's td__nearest_src, the product in float)
                int s[3];
                for (int d = 0; d < 3; d++) {
                    int L = WIN(d), Ou = WOUT(d), jj = c3[d];
                    if (Ou == L) s[d] = jj;
                    else if (Ou == 2 * L) s[d] = jj >> 1;
                    else {
                        precise float sc = float(double(float(L)) / double(float(Ou)));
                        precise float pr = float(jj) * sc;
                        s[d] = min(int(floor(pr)), L - 1);
                    }
                }
                v = xin(xb + uint((s[0] * WIN(1) + s[1]) * WIN(2) + s[2]));
            } else { // (bi/tri)linear, PyTorch's separable order
                int i0[3], i1[3];
                T l0[3], l1[3];
                for (int d = 0; d < 3; d++) {
                    int L = WIN(d), Ou = WOUT(d);
                    precise T sc, src;
                    if (W(23) != 0) {
                        sc = Ou > 1 ? fdivT(T(L - 1), T(Ou - 1)) : T(0);
                        src = sc * T(c3[d]);
                    } else {
                        sc = fdivT(T(L), T(Ou));
                        src = sc * (T(c3[d]) + T(0.5)) - T(0.5);
                        if (src < T(0)) src = T(0);
                    }
                    i0[d] = int(src);
                    i1[d] = i0[d] + (i0[d] < L - 1 ? 1 : 0);
                    precise T lam = src - T(i0[d]);
                    lam = clamp(lam, T(0), T(1));
                    l1[d] = lam;
                    l0[d] = T(1) - lam;
                }
                const int first = W(24);
                T pla[2];
                for (int z = 0; z < 2; z++) {
                    int aa = z == 0 ? i0[0] : i1[0];
                    T ln[2];
                    for (int y = 0; y < 2; y++) {
                        int bb = y == 0 ? i0[1] : i1[1];
                        precise T line = xin(xb + uint((aa * WIN(1) + bb) * WIN(2) + i0[2])) * l0[2] +
                                         xin(xb + uint((aa * WIN(1) + bb) * WIN(2) + i1[2])) * l1[2];
                        ln[y] = line;
                    }
                    precise T plane = first <= 1 ? ln[0] * l0[1] + ln[1] * l1[1] : ln[0];
                    pla[z] = plane;
                }
                precise T vv = first == 0 ? pla[0] * l0[0] + pla[1] * l1[0] : pla[0];
                v = vv;
            }
            o[P[P_BASE] + i] = STF(v);
        }
#endif
#if WOP == 3
        { // MAX_POOL_BACKWARD: the windows holding this input whose index names it, ascending
            precise T sum = T(0);
            for (int kd = WK(0) - 1; kd >= 0; kd--) {
                int td = d0 + WPL(0) - kd * WDIL(0);
                if (td < 0 || td % WS(0) != 0 || td / WS(0) >= WOUT(0)) continue;
                for (int kh = WK(1) - 1; kh >= 0; kh--) {
                    int th = d1 + WPL(1) - kh * WDIL(1);
                    if (th < 0 || th % WS(1) != 0 || th / WS(1) >= WOUT(1)) continue;
                    for (int kw = WK(2) - 1; kw >= 0; kw--) {
                        int tw = d2 + WPL(2) - kw * WDIL(2);
                        if (tw < 0 || tw % WS(2) != 0 || tw / WS(2) >= WOUT(2)) continue;
                        int jj = ((td / WS(0)) * WOUT(1) + th / WS(1)) * WOUT(2) + tw / WS(2);
                        if (int64_t(b[P[P_BASE + 2] + xb + uint(jj)]) == int64_t(j))
                            sum = sum + xin(xb + uint(jj));
                    }
                }
            }
            o[P[P_BASE] + i] = STF(sum);
        }
#endif
#if WOP == 4
        {
            // conv words from 25: planes, n, c, co, groups, has_bias
            const int NB = W(26), CI = W(27), CO = W(28), G = W(29);
            const int IP = WIN(0) * WIN(1) * WIN(2), OPL = WOUT(0) * WOUT(1) * WOUT(2);
            const int KP = WK(0) * WK(1) * WK(2);
            precise T acc = T(0);
            {
                // output [N, CO, OPL]
                const int nn = int(i) / (CO * OPL), oc = (int(i) / OPL) % CO, j = int(i) % OPL;
                const int p0 = j / (WOUT(1) * WOUT(2)), p1 = (j / WOUT(2)) % WOUT(1), p2 = j % WOUT(2);
                const int cog = CO / G, cg = CI / G, g = oc / cog;
                for (int cl = 0; cl < cg; cl++) {
                    const int ci = g * cg + cl;
                    const uint xbase = uint((nn * CI + ci) * IP);
                    for (int kd = 0; kd < WK(0); kd++)
                        for (int kh = 0; kh < WK(1); kh++)
                            for (int kw = 0; kw < WK(2); kw++) {
                                int t0, t1, t2;
                                if (OP == 260u) { // CONV: x at p s + k d - pad
                                    t0 = p0 * WS(0) + kd * WDIL(0) - WPL(0);
                                    t1 = p1 * WS(1) + kh * WDIL(1) - WPL(1);
                                    t2 = p2 * WS(2) + kw * WDIL(2) - WPL(2);
                                } else { // CONV_TRANSPOSE: the input l with l s + k d - pad = p
                                    int u0 = p0 + WPL(0) - kd * WDIL(0), u1 = p1 + WPL(1) - kh * WDIL(1);
                                    int u2 = p2 + WPL(2) - kw * WDIL(2);
                                    if (u0 < 0 || u1 < 0 || u2 < 0 || u0 % WS(0) != 0 ||
                                        u1 % WS(1) != 0 || u2 % WS(2) != 0)
                                        continue;
                                    t0 = u0 / WS(0);
                                    t1 = u1 / WS(1);
                                    t2 = u2 / WS(2);
                                }
                                if (t0 < 0 || t0 >= WIN(0) || t1 < 0 || t1 >= WIN(1) || t2 < 0 ||
                                    t2 >= WIN(2))
                                    continue;
                                const int kk = (kd * WK(1) + kh) * WK(2) + kw;
                                // CONV weight [CO, cg, k]; CONV_TRANSPOSE weight [CI, cog, k]
                                const int wi = OP == 260u ? (oc * cg + cl) * KP + kk
                                                          : (ci * cog + (oc - g * cog)) * KP + kk;
                                T xv = xin(xbase + uint((t0 * WIN(1) + t1) * WIN(2) + t2));
                                T wv = T(LDA(b[P[P_BASE + 2] + uint(wi)]));
                                precise T pr = xv * wv;
                                acc = acc + pr;
                            }
                }
                if (W(30) != 0) acc = acc + T(LDA(c[P[P_BASE + 3] + uint(oc)]));
            }
            o[P[P_BASE] + i] = STF(acc);
        }
#endif
        if (n - i <= step) break;
        i += step;
    }
#endif
}

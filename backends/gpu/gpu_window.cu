/* gpu_window.cu — the CONV and POOL families (engine/window.h) on the GPU as direct kernels.
 *
 * Determinism: no atomics anywhere; every output element is one fixed-order sum.
 *  - CONV: one thread per output element, summing over its group's channels, then kernel
 *    offsets (d, h, w), in that order, in the accumulator (f32 for f32/f16/bf16, f64 for
 *    f64), then + bias, rounded once. CONV_TRANSPOSE: one thread per output element, the
 *    same order over the (channel, offset) pairs that reach it (a gather, the adjoint of the
 *    convolution). CONV_WEIGHT_GRAD: one block per weight-gradient element; thread t folds
 *    the (image, position) pairs t, t + 256, ... in order, and the 256 partial sums meet in a
 *    fixed shared-memory tree. Their association differs from the CPU's GEMMs:
 *    conformance.c holds them to TD_ACC_CONV's bound.
 *  - POOL: one thread per output element running backends/cpu/cpu_window_impl.h's loop for
 *    that element in the same order and the same working type, so sums equal the CPU's bit
 *    for bit up to the device's division and (for interpolation) its products, which are
 *    written with __fmul_rn / __fadd_rn so that no fused multiply-add changes them.
 * CONV itself (the forward op) in f16/bf16 on CUDA runs as gpu_conv.cu's implicit GEMM on
 * tensor cores (td__gpu_conv_mma: no column buffer, f32 accumulation, bias added and the
 * result rounded once; its own comment says why), and in f32 with TENSORD_GPU_CONV_F32=1 as
 * its FFMA implicit GEMM (but for a pointwise conv without bias). Everywhere else (f32 by
 * default, f64, HIP, f16/bf16 under the CPU emulation, shapes past those kernels' 32-bit
 * indexing, TENSORD_GPU_CONV_VARIANT=5) it runs
 * as im2col + the backend's batched GEMM (cuBLAS on CUDA,
 * hip_gemm.cu on HIP; deterministic for a given shape) in chunks of images (conv_gemm): the columns of a chunk of images (a constant cap,
 * so the chunking depends on the shape alone) hold, per image and group, the [C/G k, P]
 * patch matrix, plus a row of ones when there is a bias, whose weight column is the bias:
 * the GEMM then sums products and bias in one accumulator and rounds once (f16/bf16 on
 * tensor cores with f32 accumulation, like MATMUL). The direct CONV kernel ran ResNet-50's
 * layers at 0.01-0.06x cuDNN on the H200 (BENCHMARKS.md). In f32 and f64 the two
 * gradient ops take GEMMs too (they were 58 % of a CNN training step's GPU time, BENCHMARKS.md):
 * CONV_WEIGHT_GRAD as a transposed im2col and one GEMM per image and group whose partial
 * products are summed over the images in order (wgrad_gemm), CONV_TRANSPOSE as a GEMM of the
 * transposed weights with the input and a gathering col2im that sums the kernel offsets in
 * order (convt_gemm). f16/bf16 keep the direct kernels below for those two (their GEMM
 * intermediates would be rounded to 16 bits, outside TD_ACC_CONV); pooling is direct.
 */
#include "backends/gpu/gpu_ops.cuh"
#include "engine/window.h"
#include <stdlib.h>

namespace {

#define WIN_THREADS 256

template <typename T> struct wt;
template <> struct wt<float> {
    typedef float A;
    static TD_DEV A in(float v) { return v; }
    static TD_DEV float out(A a) { return a; }
};
template <> struct wt<double> {
    typedef double A;
    static TD_DEV A in(double v) { return v; }
    static TD_DEV double out(A a) { return a; }
};
template <> struct wt<td_f16> {
    typedef float A;
    static TD_DEV A in(td_f16 v) { return v.f(); }
    static TD_DEV td_f16 out(A a) { return td_f16::of(a); }
};
template <> struct wt<td_bf16> {
    typedef float A;
    static TD_DEV A in(td_bf16 v) { return v.f(); }
    static TD_DEV td_bf16 out(A a) { return td_bf16::of(a); }
};

TD_DEV float mul_rn(float a, float b) { return __fmul_rn(a, b); }
TD_DEV double mul_rn(double a, double b) { return __dmul_rn(a, b); }
TD_DEV float add_rn(float a, float b) { return __fadd_rn(a, b); }
TD_DEV double add_rn(double a, double b) { return __dadd_rn(a, b); }

#define GRID_LOOP(i, n)                                                                    \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);              \
         i += (int64_t)gridDim.x * blockDim.x)

/* ---- CONV family ---- */

template <typename T>
__global__ void k_conv(const T *x, const T *w, const T *b, T *y, td__window win)
{
    typedef typename wt<T>::A A;
    const int64_t g = win.groups, cg = win.c / g, cog = win.co / g;
    const int64_t P = win.out[0] * win.out[1] * win.out[2];
    const int64_t L = win.in[0] * win.in[1] * win.in[2];
    const int64_t kk = win.k[0] * win.k[1] * win.k[2];
    const int64_t n_out = win.n * win.co * P;
    GRID_LOOP(e, n_out)
    {
        const int64_t p = e % P, o = (e / P) % win.co, n = e / (P * win.co);
        const int64_t od = p / (win.out[1] * win.out[2]), oh = (p / win.out[2]) % win.out[1];
        const int64_t ow = p % win.out[2];
        const int64_t gi = o / cog;
        A acc = (A)0;
        for (int64_t c = 0; c < cg; c++) {
            const T *xc = x + (n * win.c + gi * cg + c) * L;
            const T *wc = w + (o * cg + c) * kk;
            for (int64_t kd = 0; kd < win.k[0]; kd++) {
                const int64_t id = od * win.stride[0] - win.pad_lo[0] + kd * win.dil[0];
                if (id < 0 || id >= win.in[0]) continue;
                for (int64_t kh = 0; kh < win.k[1]; kh++) {
                    const int64_t ih = oh * win.stride[1] - win.pad_lo[1] + kh * win.dil[1];
                    if (ih < 0 || ih >= win.in[1]) continue;
                    for (int64_t kw = 0; kw < win.k[2]; kw++) {
                        const int64_t iw = ow * win.stride[2] - win.pad_lo[2] + kw * win.dil[2];
                        if (iw < 0 || iw >= win.in[2]) continue;
                        acc += wt<T>::in(xc[(id * win.in[1] + ih) * win.in[2] + iw]) *
                               wt<T>::in(wc[(kd * win.k[1] + kh) * win.k[2] + kw]);
                    }
                }
            }
        }
        if (b != NULL) acc += wt<T>::in(b[o]);
        y[e] = wt<T>::out(acc);
    }
}

/* The input index j along one dim that output q reaches through kernel offset t, or -1. */
TD_DEV int64_t convt_src(int64_t q, int64_t t, int64_t stride, int64_t dil, int64_t lo,
                         int64_t L)
{
    const int64_t v = q + lo - t * dil;
    if (v < 0 || v % stride != 0) return -1;
    const int64_t j = v / stride;
    return j < L ? j : -1;
}

template <typename T>
__global__ void k_convt(const T *x, const T *w, const T *b, T *y, td__window win)
{
    typedef typename wt<T>::A A;
    const int64_t g = win.groups, cg = win.c / g, cog = win.co / g;
    const int64_t P = win.out[0] * win.out[1] * win.out[2];
    const int64_t L = win.in[0] * win.in[1] * win.in[2];
    const int64_t kk = win.k[0] * win.k[1] * win.k[2];
    const int64_t n_out = win.n * win.co * P;
    GRID_LOOP(e, n_out)
    {
        const int64_t q = e % P, o = (e / P) % win.co, n = e / (P * win.co);
        const int64_t qd = q / (win.out[1] * win.out[2]), qh = (q / win.out[2]) % win.out[1];
        const int64_t qw = q % win.out[2];
        const int64_t gi = o / cog, ol = o % cog;
        A acc = (A)0;
        for (int64_t c = 0; c < cg; c++) {
            const int64_t ci = gi * cg + c;
            const T *xc = x + (n * win.c + ci) * L;
            const T *wc = w + (ci * cog + ol) * kk;
            for (int64_t kd = 0; kd < win.k[0]; kd++) {
                const int64_t jd = convt_src(qd, kd, win.stride[0], win.dil[0], win.pad_lo[0], win.in[0]);
                if (jd < 0) continue;
                for (int64_t kh = 0; kh < win.k[1]; kh++) {
                    const int64_t jh = convt_src(qh, kh, win.stride[1], win.dil[1], win.pad_lo[1], win.in[1]);
                    if (jh < 0) continue;
                    for (int64_t kw = 0; kw < win.k[2]; kw++) {
                        const int64_t jw = convt_src(qw, kw, win.stride[2], win.dil[2], win.pad_lo[2], win.in[2]);
                        if (jw < 0) continue;
                        acc += wt<T>::in(xc[(jd * win.in[1] + jh) * win.in[2] + jw]) *
                               wt<T>::in(wc[(kd * win.k[1] + kh) * win.k[2] + kw]);
                    }
                }
            }
        }
        if (b != NULL) acc += wt<T>::in(b[o]);
        y[e] = wt<T>::out(acc);
    }
}

/* One block per dw element [o, c, kd, kh, kw]: the (n, p) pairs strided over the threads,
 * then a fixed tree. */
template <typename T>
__global__ void __launch_bounds__(WIN_THREADS) k_wgrad(const T *x, const T *dy, T *dw,
                                                       td__window win)
{
    typedef typename wt<T>::A A;
    __shared__ A sh[WIN_THREADS];
    const int64_t g = win.groups, cg = win.c / g, cog = win.co / g;
    const int64_t P = win.out[0] * win.out[1] * win.out[2];
    const int64_t L = win.in[0] * win.in[1] * win.in[2];
    const int64_t kk = win.k[0] * win.k[1] * win.k[2];
    const int64_t n_dw = win.co * cg * kk, pairs = win.n * P;
    for (int64_t e = blockIdx.x; e < n_dw; e += gridDim.x) {
        const int64_t t = e % kk, c = (e / kk) % cg, o = e / (kk * cg);
        const int64_t kd = t / (win.k[1] * win.k[2]), kh = (t / win.k[2]) % win.k[1];
        const int64_t kw = t % win.k[2];
        const int64_t ci = (o / cog) * cg + c;
        A acc = (A)0;
        for (int64_t u = threadIdx.x; u < pairs; u += WIN_THREADS) {
            const int64_t n = u / P, p = u % P;
            const int64_t od = p / (win.out[1] * win.out[2]), oh = (p / win.out[2]) % win.out[1];
            const int64_t ow = p % win.out[2];
            const int64_t id = od * win.stride[0] - win.pad_lo[0] + kd * win.dil[0];
            const int64_t ih = oh * win.stride[1] - win.pad_lo[1] + kh * win.dil[1];
            const int64_t iw = ow * win.stride[2] - win.pad_lo[2] + kw * win.dil[2];
            if (id < 0 || id >= win.in[0] || ih < 0 || ih >= win.in[1] || iw < 0 || iw >= win.in[2])
                continue;
            acc += wt<T>::in(dy[(n * win.co + o) * P + p]) *
                   wt<T>::in(x[(n * win.c + ci) * L + (id * win.in[1] + ih) * win.in[2] + iw]);
        }
        sh[threadIdx.x] = acc;
        __syncthreads();
        for (int s = WIN_THREADS / 2; s > 0; s /= 2) {
            if ((int)threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
            __syncthreads();
        }
        if (threadIdx.x == 0) dw[e] = wt<T>::out(sh[0]);
        __syncthreads();
    }
}

/* ---- POOL family: cpu_window_impl.h's loops, one output element per thread ---- */

template <typename T>
__global__ void k_maxpool(const T *x, void *y, bool want_idx, td__window w)
{
    typedef typename wt<T>::A A;
    const int64_t IP = w.in[0] * w.in[1] * w.in[2], OP = w.out[0] * w.out[1] * w.out[2];
    GRID_LOOP(e, w.n * w.c * OP)
    {
        const int64_t pl = e / OP, j = e % OP;
        const T *xp = x + pl * IP;
        const int64_t od = j / (w.out[1] * w.out[2]), oh = (j / w.out[2]) % w.out[1];
        const int64_t ow = j % w.out[2];
        A best = -(A)INFINITY;
        int64_t bi = -1;
        T bv = wt<T>::out(best);
        for (int64_t kd = 0; kd < w.k[0]; kd++) {
            const int64_t id = od * w.stride[0] - w.pad_lo[0] + kd * w.dil[0];
            if (id < 0 || id >= w.in[0]) continue;
            for (int64_t kh = 0; kh < w.k[1]; kh++) {
                const int64_t ih = oh * w.stride[1] - w.pad_lo[1] + kh * w.dil[1];
                if (ih < 0 || ih >= w.in[1]) continue;
                for (int64_t kw = 0; kw < w.k[2]; kw++) {
                    const int64_t iw = ow * w.stride[2] - w.pad_lo[2] + kw * w.dil[2];
                    if (iw < 0 || iw >= w.in[2]) continue;
                    const int64_t pos = (id * w.in[1] + ih) * w.in[2] + iw;
                    const A v = wt<T>::in(xp[pos]);
                    if (bi < 0) bi = pos;
                    if (v > best || v != v) {
                        best = v;
                        bi = pos;
                        bv = xp[pos];
                    }
                }
            }
        }
        if (want_idx) ((int64_t *)y)[e] = bi;
        else ((T *)y)[e] = bv;
    }
}

TD_DEV int64_t index_at(const void *idx, bool i32, int64_t k)
{
    return i32 ? ((const int32_t *)idx)[k] : ((const int64_t *)idx)[k];
}

template <typename T>
__global__ void k_maxpool_bwd(const T *dy, const void *idx, bool i32, T *dx, td__window w)
{
    typedef typename wt<T>::A A;
    const int64_t IP = w.in[0] * w.in[1] * w.in[2], OP = w.out[0] * w.out[1] * w.out[2];
    GRID_LOOP(e, w.n * w.c * IP)
    {
        const int64_t pl = e / IP, i = e % IP;
        const int64_t id = i / (w.in[1] * w.in[2]), ih = (i / w.in[2]) % w.in[1], iw = i % w.in[2];
        A sum = (A)0;
        for (int64_t kd = w.k[0] - 1; kd >= 0; kd--) {
            const int64_t td = id + w.pad_lo[0] - kd * w.dil[0];
            if (td < 0 || td % w.stride[0] != 0 || td / w.stride[0] >= w.out[0]) continue;
            for (int64_t kh = w.k[1] - 1; kh >= 0; kh--) {
                const int64_t th = ih + w.pad_lo[1] - kh * w.dil[1];
                if (th < 0 || th % w.stride[1] != 0 || th / w.stride[1] >= w.out[1]) continue;
                for (int64_t kw = w.k[2] - 1; kw >= 0; kw--) {
                    const int64_t tw = iw + w.pad_lo[2] - kw * w.dil[2];
                    if (tw < 0 || tw % w.stride[2] != 0 || tw / w.stride[2] >= w.out[2]) continue;
                    const int64_t j =
                        ((td / w.stride[0]) * w.out[1] + th / w.stride[1]) * w.out[2] + tw / w.stride[2];
                    if (index_at(idx, i32, pl * OP + j) == i) sum = add_rn(sum, wt<T>::in(dy[pl * OP + j]));
                }
            }
        }
        dx[e] = wt<T>::out(sum);
    }
}

template <typename T> __global__ void k_avgpool(const T *x, T *y, td__window w)
{
    typedef typename wt<T>::A A;
    const int64_t IP = w.in[0] * w.in[1] * w.in[2], OP = w.out[0] * w.out[1] * w.out[2];
    GRID_LOOP(e, w.n * w.c * OP)
    {
        const int64_t pl = e / OP, j = e % OP;
        const T *xp = x + pl * IP;
        const int64_t o[3] = {j / (w.out[1] * w.out[2]), (j / w.out[2]) % w.out[1], j % w.out[2]};
        int64_t s[3], en[3], ext[3];
        for (int d = 0; d < 3; d++) td__avg_window(&w, d, o[d], &s[d], &en[d], &ext[d]);
        A sum = (A)0;
        for (int64_t id = s[0]; id < en[0]; id++)
            for (int64_t ih = s[1]; ih < en[1]; ih++)
                for (int64_t iw = s[2]; iw < en[2]; iw++)
                    sum = add_rn(sum, wt<T>::in(xp[(id * w.in[1] + ih) * w.in[2] + iw]));
        y[e] = wt<T>::out(sum / (A)(ext[0] * ext[1] * ext[2]));
    }
}

template <typename T> __global__ void k_avgpool_bwd(const T *dy, T *dx, td__window w)
{
    typedef typename wt<T>::A A;
    const int64_t IP = w.in[0] * w.in[1] * w.in[2], OP = w.out[0] * w.out[1] * w.out[2];
    GRID_LOOP(e, w.n * w.c * IP)
    {
        const int64_t pl = e / IP, i = e % IP;
        const int64_t in3[3] = {i / (w.in[1] * w.in[2]), (i / w.in[2]) % w.in[1], i % w.in[2]};
        int64_t a[3], b[3];
        for (int d = 0; d < 3; d++) {
            const int64_t t = in3[d] + w.pad_lo[d] - w.k[d] + 1;
            a[d] = t <= 0 ? 0 : (t + w.stride[d] - 1) / w.stride[d];
            b[d] = (in3[d] + w.pad_lo[d]) / w.stride[d];
            if (b[d] > w.out[d] - 1) b[d] = w.out[d] - 1;
        }
        A sum = (A)0;
        for (int64_t jd = a[0]; jd <= b[0]; jd++)
            for (int64_t jh = a[1]; jh <= b[1]; jh++)
                for (int64_t jw = a[2]; jw <= b[2]; jw++) {
                    int64_t s, en, x0, x1, x2;
                    td__avg_window(&w, 0, jd, &s, &en, &x0);
                    td__avg_window(&w, 1, jh, &s, &en, &x1);
                    td__avg_window(&w, 2, jw, &s, &en, &x2);
                    sum = add_rn(sum, wt<T>::in(dy[pl * OP + (jd * w.out[1] + jh) * w.out[2] + jw]) /
                                          (A)(x0 * x1 * x2));
                }
        dx[e] = wt<T>::out(sum);
    }
}

template <typename T> __global__ void k_adaptive(const T *x, T *y, td__window w)
{
    typedef typename wt<T>::A A;
    const int64_t IP = w.in[0] * w.in[1] * w.in[2], OP = w.out[0] * w.out[1] * w.out[2];
    GRID_LOOP(e, w.n * w.c * OP)
    {
        const int64_t pl = e / OP, j = e % OP;
        const T *xp = x + pl * IP;
        const int64_t o[3] = {j / (w.out[1] * w.out[2]), (j / w.out[2]) % w.out[1], j % w.out[2]};
        int64_t s[3], en[3];
        for (int d = 0; d < 3; d++) td__adaptive_window(o[d], w.in[d], w.out[d], &s[d], &en[d]);
        A sum = (A)0;
        for (int64_t id = s[0]; id < en[0]; id++)
            for (int64_t ih = s[1]; ih < en[1]; ih++)
                for (int64_t iw = s[2]; iw < en[2]; iw++)
                    sum = add_rn(sum, wt<T>::in(xp[(id * w.in[1] + ih) * w.in[2] + iw]));
        y[e] = wt<T>::out(sum / (A)((en[0] - s[0]) * (en[1] - s[1]) * (en[2] - s[2])));
    }
}

template <typename T> __global__ void k_adaptive_bwd(const T *dy, T *dx, td__window w)
{
    typedef typename wt<T>::A A;
    const int64_t IP = w.in[0] * w.in[1] * w.in[2], OP = w.out[0] * w.out[1] * w.out[2];
    GRID_LOOP(e, w.n * w.c * IP)
    {
        const int64_t pl = e / IP, i = e % IP;
        const int64_t in3[3] = {i / (w.in[1] * w.in[2]), (i / w.in[2]) % w.in[1], i % w.in[2]};
        int64_t a[3], b[3];
        for (int d = 0; d < 3; d++) {
            a[d] = in3[d] * w.out[d] / w.in[d];
            b[d] = ((in3[d] + 1) * w.out[d] - 1) / w.in[d];
        }
        A sum = (A)0;
        for (int64_t jd = a[0]; jd <= b[0]; jd++)
            for (int64_t jh = a[1]; jh <= b[1]; jh++)
                for (int64_t jw = a[2]; jw <= b[2]; jw++) {
                    const int64_t j3[3] = {jd, jh, jw};
                    int64_t cnt = 1;
                    for (int d = 0; d < 3; d++) {
                        int64_t s, en;
                        td__adaptive_window(j3[d], w.in[d], w.out[d], &s, &en);
                        cnt *= en - s;
                    }
                    sum = add_rn(sum, wt<T>::in(dy[pl * OP + (jd * w.out[1] + jh) * w.out[2] + jw]) / (A)cnt);
                }
        dx[e] = wt<T>::out(sum);
    }
}

template <typename A>
TD_DEV void lin_coef(const td__window &w, int d, int64_t j, int64_t *i0, int64_t *i1, A *l0, A *l1)
{
    const int64_t L = w.in[d], O = w.out[d];
    A src;
    if (w.align_corners) {
        const A scale = O > 1 ? (A)(L - 1) / (A)(O - 1) : (A)0;
        src = mul_rn(scale, (A)j);
    } else {
        const A scale = (A)L / (A)O;
        src = add_rn(mul_rn(scale, add_rn((A)j, (A)0.5)), (A)-0.5);
        if (src < (A)0) src = (A)0;
    }
    *i0 = (int64_t)src;
    *i1 = *i0 + (*i0 < L - 1 ? 1 : 0);
    A lam = src - (A)*i0;
    if (lam < (A)0) lam = (A)0;
    if (lam > (A)1) lam = (A)1;
    *l1 = lam;
    *l0 = (A)1 - lam;
}

template <typename T> __global__ void k_interp(const T *x, T *y, td__window w)
{
    typedef typename wt<T>::A A;
    const int64_t IP = w.in[0] * w.in[1] * w.in[2], OP = w.out[0] * w.out[1] * w.out[2];
    const int first = TD_WIN_SP - w.nsp;
    GRID_LOOP(e, w.n * w.c * OP)
    {
        const int64_t pl = e / OP, j = e % OP;
        const T *xp = x + pl * IP;
        const int64_t o[3] = {j / (w.out[1] * w.out[2]), (j / w.out[2]) % w.out[1], j % w.out[2]};
        if (w.mode == 0) {
            int64_t s[3];
            for (int d = 0; d < 3; d++) s[d] = td__nearest_src(o[d], w.in[d], w.out[d]);
            y[e] = xp[(s[0] * w.in[1] + s[1]) * w.in[2] + s[2]];
            continue;
        }
        int64_t i0[3], i1[3];
        A l0[3], l1[3];
        for (int d = 0; d < 3; d++) lin_coef<A>(w, d, o[d], &i0[d], &i1[d], &l0[d], &l1[d]);
        A plane[2];
        for (int a = 0; a < (first == 0 ? 2 : 1); a++) {
            const int64_t da = a == 0 ? i0[0] : i1[0];
            A line[2];
            for (int b = 0; b < (first <= 1 ? 2 : 1); b++) {
                const int64_t hb = b == 0 ? i0[1] : i1[1];
                const T *row = xp + (da * w.in[1] + hb) * w.in[2];
                line[b] = add_rn(mul_rn(wt<T>::in(row[i0[2]]), l0[2]),
                                 mul_rn(wt<T>::in(row[i1[2]]), l1[2]));
            }
            plane[a] = first <= 1 ? add_rn(mul_rn(line[0], l0[1]), mul_rn(line[1], l1[1])) : line[0];
        }
        y[e] = wt<T>::out(first == 0 ? add_rn(mul_rn(plane[0], l0[0]), mul_rn(plane[1], l1[0]))
                                     : plane[0]);
    }
}

/* ---- CONV as im2col + GEMM ---- */

/* Column buffer per chunk of images: at most CONV_COL_BYTES (a constant, so the chunk of
 * images depends on the shape alone), at least one image; an image whose columns exceed
 * CONV_COL_MAX takes the direct kernel. TENSORD_TEST_CONV_COL_BYTES (a test hook) lowers the
 * cap so that the conformance cases run one image a chunk. */
#define CONV_COL_BYTES ((int64_t)256 << 20)
#define CONV_COL_MAX ((int64_t)2 << 30)

static int64_t conv_col_cap(void)
{
    /* read once (a C++ function-local static: initialised once, thread-safe) */
    static const int64_t cap = [] {
        const char *e = getenv("TENSORD_TEST_CONV_COL_BYTES");
        const long long v = e != NULL ? atoll(e) : 0;
        return v > 0 && v < CONV_COL_BYTES ? (int64_t)v : CONV_COL_BYTES;
    }();
    return cap;
}

/* Images a chunk holds when one image needs per_img bytes of scratch: what the cap allows,
 * at least one, at most the batch n. */
static int64_t conv_chunk(int64_t per_img, int64_t n)
{
    const int64_t chunk = conv_col_cap() / per_img;
    return chunk < 1 ? 1 : chunk > n ? n : chunk;
}

/* The kk input values that output position (od, oh, ow) sees through the kernel offsets
 * (kd, kh, kw) in order, zero outside the input, from channel plane xc to o, o + step, ...
 * (step P: im2col's rows; 1: the transposed layout's contiguous run). */
template <typename T>
TD_DEV void write_patch(const T *xc, T *o, int64_t step, int64_t od, int64_t oh, int64_t ow,
                        const td__window &win)
{
    const T zero = wt<T>::out(0.0f);
    for (int64_t kd = 0; kd < win.k[0]; kd++) {
        const int64_t id = od * win.stride[0] - win.pad_lo[0] + kd * win.dil[0];
        const bool dok = id >= 0 && id < win.in[0];
        for (int64_t kh = 0; kh < win.k[1]; kh++) {
            const int64_t ih = oh * win.stride[1] - win.pad_lo[1] + kh * win.dil[1];
            const bool hok = dok && ih >= 0 && ih < win.in[1];
            const int64_t row = (id * win.in[1] + ih) * win.in[2];
            for (int64_t kw = 0; kw < win.k[2]; kw++) {
                const int64_t iw = ow * win.stride[2] - win.pad_lo[2] + kw * win.dil[2];
                *o = hok && iw >= 0 && iw < win.in[2] ? xc[row + iw] : zero;
                o += step;
            }
        }
    }
}

/* col[((j G + g) Kg + r) P + p] for images n0 + j (j < nimg) of x: row r < C/G kk is channel
 * r / kk of group g at kernel offset r % kk (zero outside the input), row C/G kk (bias only)
 * is one. One thread per (image, group, channel, output position): the position's
 * coordinates are worked out once and its kk rows written in a loop (a thread per element
 * spent most of its time in 64-bit divisions). */
template <typename T>
__global__ void k_im2col(const T *x, T *col, td__window win, int64_t n0, int64_t nimg,
                         int64_t kg, bool bias)
{
    const int64_t g = win.groups, cg = win.c / g;
    const int64_t P = win.out[0] * win.out[1] * win.out[2];
    const int64_t L = win.in[0] * win.in[1] * win.in[2];
    const int64_t kk = win.k[0] * win.k[1] * win.k[2];
    const int64_t ohw = win.out[1] * win.out[2];
    /* channel index cg stands for the bias row */
    const int64_t rows = cg + (bias ? 1 : 0);
    const int64_t total = nimg * g * rows * P;
    GRID_LOOP(e, total)
    {
        const int64_t p = e % P, cr = e / P;
        const int64_t c = cr % rows, jg = cr / rows;
        T *out = col + jg * kg * P + p;
        if (c == cg) {
            out[(kg - 1) * P] = wt<T>::out(1.0f);
            continue;
        }
        const int64_t gi = jg % g, j = jg / g;
        const int64_t od = p / ohw, rem = p - od * ohw;
        const int64_t oh = rem / win.out[2], ow = rem - oh * win.out[2];
        write_patch(x + ((n0 + j) * win.c + gi * cg + c) * L, out + c * kk * P, P, od, oh, ow,
                    win);
    }
}

/* wa[o kg + r] = w[o][r] for r < C/G kk, wa[o kg + C/G kk] = b[o] (bias only). */
template <typename T>
__global__ void k_conv_weights(const T *w, const T *b, T *wa, int64_t co, int64_t kin, int64_t kg)
{
    GRID_LOOP(e, co * kg)
    {
        const int64_t o = e / kg, r = e % kg;
        wa[e] = r < kin ? w[o * kin + r] : b[o];
    }
}

/* One batched GEMM over the `nb0` x `nb1` batch (strides in elements of a and b along the
 * two batch dims): out[i, j] = a[i, j] [m, k] times b[i, j] [k, n], row-major, written
 * contiguously in batch order. */
template <typename T>
td_status gemm_batched(const td__gpu_exec *x, uint32_t dtype, int64_t nb0, int64_t nb1,
                       const int64_t (&sa)[2], const int64_t (&sb)[2], int64_t m, int64_t n,
                       int64_t k, const T *a, const T *b, T *out)
{
    td__desc bd;
    memset(&bd, 0, sizeof bd);
    bd.dtype = dtype;
    bd.rank = 2;
    bd.dims[0] = nb0;
    bd.dims[1] = nb1;
    int64_t strides[2][TD_MAX_RANK] = {{sa[0], sa[1]}, {sb[0], sb[1]}};
    td__gpu_iter it;
    td__gpu_iter_init(&it, &bd, 2, strides);
    td__view gv[2], ov;
    memset(gv, 0, sizeof gv);
    memset(&ov, 0, sizeof ov);
    gv[0].desc.dtype = gv[1].desc.dtype = ov.desc.dtype = dtype;
    gv[0].data = (void *)a;
    gv[1].data = (void *)b;
    ov.data = out;
    return td__gpu_matmul_float(x, &it, nb0 * nb1, m, n, k, gv, &ov, false);
}

/* CONV through im2col + GEMM; TD_EUNSUPPORTED (nothing enqueued, no message) when the
 * shape does not fit it, and the caller runs the direct kernel. */
template <typename T>
td_status conv_gemm(const td__gpu_exec *x, const td__op *op, const td__view *in,
                    const td__view *out, const td__window &w)
{
    const int64_t G = w.groups, cg = w.c / G, cog = w.co / G;
    const int64_t kk = w.k[0] * w.k[1] * w.k[2];
    const int64_t P = w.out[0] * w.out[1] * w.out[2];
    const bool bias = op->n_inputs == 3;
    const int64_t kin = cg * kk, kg = kin + (bias ? 1 : 0);
    int64_t per_img;
    if (kg > INT32_MAX || P > INT32_MAX || cog > INT32_MAX ||
        __builtin_mul_overflow(G * kg, P, &per_img) ||
        __builtin_mul_overflow(per_img, (int64_t)sizeof(T), &per_img) || per_img > CONV_COL_MAX)
        return TD_EUNSUPPORTED;
    /* A pointwise conv (1x1x1 kernel, stride 1, no padding) without bias: each image's
     * [C/G, P] patch matrix is the input itself, so the GEMM reads x and w directly (no
     * column buffer, no weight copy): batch (image j, group g) is w_g [cog, cg] times
     * x[j, g cg:(g + 1) cg] [cg, P], the shapes of the im2col GEMM below. */
    bool pointwise = !bias;
    for (int d = 0; d < 3; d++)
        pointwise = pointwise && w.k[d] == 1 && w.stride[d] == 1 && w.pad_lo[d] == 0 &&
                    w.pad_hi[d] == 0 && w.in[d] == w.out[d];
    if (pointwise) {
        const int64_t sa[2] = {0, cog * cg}, sb[2] = {w.c * P, cg * P};
        return gemm_batched<T>(x, out->desc.dtype, w.n, G, sa, sb, cog, P, cg,
                               (const T *)in[1].data, (const T *)in[0].data, (T *)out->data);
    }
    const int64_t chunk = conv_chunk(per_img, w.n);
    const size_t col_bytes = (size_t)(chunk * per_img);
    const size_t wa_bytes = ((size_t)(w.co * kg) * sizeof(T) + 255) / 256 * 256;
    void *mem = NULL;
    td_status s = td__gpu_temp_alloc(x, wa_bytes + col_bytes, &mem);
    if (s != TD_OK) return s;
    T *wa = (T *)mem, *col = (T *)((char *)mem + wa_bytes);
    const gpuStream_t st = x->st->s;
    k_conv_weights<T><<<td__gpu_blocks(w.co * kg, WIN_THREADS), WIN_THREADS, 0, st>>>(
        (const T *)in[1].data, bias ? (const T *)in[2].data : NULL, wa, w.co, kin, kg);
    s = td__gpu_launched(x, "conv weights kernel");
    for (int64_t n0 = 0; n0 < w.n && s == TD_OK; n0 += chunk) {
        const int64_t nimg = w.n - n0 < chunk ? w.n - n0 : chunk;
        k_im2col<T><<<td__gpu_blocks(nimg * G * (cg + (bias ? 1 : 0)) * P, WIN_THREADS),
                      WIN_THREADS, 0, st>>>(
            (const T *)in[0].data, col, w, n0, nimg, kg, bias);
        s = td__gpu_launched(x, "im2col kernel");
        if (s != TD_OK) break;
        /* batch (image j, group g): [cog, kg] weights of g times [kg, P] columns -> out */
        const int64_t sa[2] = {0, cog * kg}, sb[2] = {G * kg * P, kg * P};
        s = gemm_batched<T>(x, out->desc.dtype, nimg, G, sa, sb, cog, P, kg, wa, col,
                            (T *)out->data + n0 * w.co * P);
    }
    td__gpu_temp_free(x, mem);
    return s;
}

/* ---- CONV_WEIGHT_GRAD as transposed im2col + GEMM ----
 * dW [co, C/G k] per group g and image n: dY[n, g] [co/G, P] times colT[n, g] [P, C/G k] (the
 * patch matrix transposed, so that the GEMM needs no transposed operand), one partial
 * product per image, then summed over the images in order (n = 0, 1, ...) in the
 * accumulator type and rounded once. Chunked like conv_gemm. */

/* colT[((j G + g) P + p) Kin + c kk + t] for images n0 + j: one thread per (image, group,
 * channel, position) writing its kk offsets (contiguous). */
template <typename T>
__global__ void k_im2col_t(const T *x, T *colt, td__window win, int64_t n0, int64_t nimg)
{
    const int64_t g = win.groups, cg = win.c / g;
    const int64_t P = win.out[0] * win.out[1] * win.out[2];
    const int64_t L = win.in[0] * win.in[1] * win.in[2];
    const int64_t kk = win.k[0] * win.k[1] * win.k[2];
    const int64_t kin = cg * kk, ohw = win.out[1] * win.out[2];
    GRID_LOOP(e, nimg * g * cg * P)
    {
        const int64_t c = e % cg, p = (e / cg) % P, jg = e / (cg * P);
        const int64_t gi = jg % g, j = jg / g;
        const int64_t od = p / ohw, rem = p - od * ohw;
        const int64_t oh = rem / win.out[2], ow = rem - oh * win.out[2];
        write_patch(x + ((n0 + j) * win.c + gi * cg + c) * L, colt + (jg * P + p) * kin + c * kk,
                    1, od, oh, ow, win);
    }
}

/* acc[e] (+)= sum over j < nimg of part[j ne + e], in order; with `last`, dw[e] = acc[e]
 * rounded to T. */
template <typename T>
__global__ void k_sum_images(const T *part, typename wt<T>::A *acc, T *dw, int64_t nimg,
                             int64_t ne, bool first, bool last)
{
    typedef typename wt<T>::A A;
    GRID_LOOP(e, ne)
    {
        A a = first ? (A)0 : acc[e];
        for (int64_t j = 0; j < nimg; j++) a += wt<T>::in(part[j * ne + e]);
        if (last)
            dw[e] = wt<T>::out(a);
        else
            acc[e] = a;
    }
}

template <typename T>
td_status wgrad_gemm(const td__gpu_exec *x, const td__view *in, const td__view *out,
                     const td__window &w)
{
    typedef typename wt<T>::A A;
    /* the per-image partial products are rounded to T: only f32 and f64 keep within
     * TD_ACC_CONV that way (f16/bf16 would need f32 partials; they take the direct kernel) */
    if (sizeof(T) < 4) return TD_EUNSUPPORTED;
    const int64_t G = w.groups, cg = w.c / G, cog = w.co / G;
    const int64_t kk = w.k[0] * w.k[1] * w.k[2];
    const int64_t P = w.out[0] * w.out[1] * w.out[2];
    const int64_t kin = cg * kk, ne = w.co * kin;
    int64_t per_img, part_img;
    if (kin > INT32_MAX || P > INT32_MAX || cog > INT32_MAX ||
        __builtin_mul_overflow(G * kin, P, &per_img) ||
        __builtin_mul_overflow(per_img, (int64_t)sizeof(T), &per_img) ||
        __builtin_mul_overflow(ne, (int64_t)sizeof(T), &part_img) ||
        per_img + part_img > CONV_COL_MAX)
        return TD_EUNSUPPORTED;
    const int64_t chunk = conv_chunk(per_img + part_img, w.n);
    const size_t acc_bytes = ((size_t)ne * sizeof(A) + 255) / 256 * 256;
    const size_t col_bytes = ((size_t)(chunk * per_img) + 255) / 256 * 256;
    void *mem = NULL;
    td_status s = td__gpu_temp_alloc(x, acc_bytes + col_bytes + (size_t)(chunk * part_img), &mem);
    if (s != TD_OK) return s;
    A *acc = (A *)mem;
    T *colt = (T *)((char *)mem + acc_bytes);
    T *part = (T *)((char *)mem + acc_bytes + col_bytes);
    const gpuStream_t st = x->st->s;
    const T *dy = (const T *)in[1].data;
    for (int64_t n0 = 0; n0 < w.n && s == TD_OK; n0 += chunk) {
        const int64_t nimg = w.n - n0 < chunk ? w.n - n0 : chunk;
        k_im2col_t<T><<<td__gpu_blocks(nimg * G * cg * P, WIN_THREADS), WIN_THREADS, 0, st>>>(
            (const T *)in[0].data, colt, w, n0, nimg);
        s = td__gpu_launched(x, "transposed im2col kernel");
        if (s != TD_OK) break;
        /* batch (image j, group g): dY[n0 + j, g] [cog, P] times colT[j, g] [P, kin] */
        const int64_t sa[2] = {w.co * P, cog * P}, sb[2] = {G * P * kin, P * kin};
        s = gemm_batched<T>(x, out->desc.dtype, nimg, G, sa, sb, cog, kin, P,
                            dy + n0 * w.co * P, colt, part);
        if (s != TD_OK) break;
        k_sum_images<T><<<td__gpu_blocks(ne, WIN_THREADS), WIN_THREADS, 0, st>>>(
            part, acc, (T *)out->data, nimg, ne, n0 == 0, n0 + nimg >= w.n);
        s = td__gpu_launched(x, "weight-gradient sum kernel");
    }
    td__gpu_temp_free(x, mem);
    return s;
}

/* ---- CONV_TRANSPOSE as GEMM + a gathering col2im ----
 * Per image n and group g: cols [cog k, L] = W_g^T [cog k, C/G] times x[n, g] [C/G, L] (W_g^T
 * made once by k_convt_weights), then y[n, o, q] = sum over kernel offsets t (in order) of
 * cols[g][(o % cog) k + t][j(q, t)] where input position j reaches output q through t, +
 * bias, rounded once from the accumulator. */

/* wt_[(g (cog k) + r) cg + c] = w[(g cg + c) (cog k) + r] */
template <typename T>
__global__ void k_convt_weights(const T *w, T *wtr, int64_t G, int64_t cg, int64_t rk)
{
    GRID_LOOP(e, G * rk * cg)
    {
        const int64_t c = e % cg, r = (e / cg) % rk, gi = e / (cg * rk);
        wtr[e] = w[(gi * cg + c) * rk + r];
    }
}

template <typename T>
__global__ void k_col2im(const T *cols, const T *b, T *y, td__window win, int64_t n0,
                         int64_t nimg)
{
    typedef typename wt<T>::A A;
    const int64_t cog = win.co / win.groups;
    const int64_t P = win.out[0] * win.out[1] * win.out[2];
    const int64_t L = win.in[0] * win.in[1] * win.in[2];
    const int64_t kk = win.k[0] * win.k[1] * win.k[2];
    GRID_LOOP(e, nimg * win.co * P)
    {
        const int64_t q = e % P, o = (e / P) % win.co, j = e / (P * win.co);
        const int64_t qd = q / (win.out[1] * win.out[2]), qh = (q / win.out[2]) % win.out[1];
        const int64_t qw = q % win.out[2];
        const int64_t gi = o / cog, ol = o % cog;
        const T *cb = cols + ((j * win.groups + gi) * cog + ol) * kk * L;
        A acc = (A)0;
        for (int64_t kd = 0; kd < win.k[0]; kd++) {
            const int64_t jd = convt_src(qd, kd, win.stride[0], win.dil[0], win.pad_lo[0], win.in[0]);
            for (int64_t kh = 0; kh < win.k[1]; kh++) {
                const int64_t jh = convt_src(qh, kh, win.stride[1], win.dil[1], win.pad_lo[1], win.in[1]);
                for (int64_t kw = 0; kw < win.k[2]; kw++) {
                    const int64_t jw = convt_src(qw, kw, win.stride[2], win.dil[2], win.pad_lo[2], win.in[2]);
                    if (jd < 0 || jh < 0 || jw < 0) continue;
                    const int64_t t = (kd * win.k[1] + kh) * win.k[2] + kw;
                    acc += wt<T>::in(cb[t * L + (jd * win.in[1] + jh) * win.in[2] + jw]);
                }
            }
        }
        if (b != NULL) acc += wt<T>::in(b[o]);
        y[(n0 * win.co) * P + e] = wt<T>::out(acc);
    }
}

template <typename T>
td_status convt_gemm(const td__gpu_exec *x, const td__op *op, const td__view *in,
                     const td__view *out, const td__window &w)
{
    /* cols are rounded to T before the kernel offsets are summed: f32 and f64 only (as in
     * wgrad_gemm) */
    if (sizeof(T) < 4) return TD_EUNSUPPORTED;
    const int64_t G = w.groups, cg = w.c / G, cog = w.co / G;
    const int64_t kk = w.k[0] * w.k[1] * w.k[2];
    const int64_t L = w.in[0] * w.in[1] * w.in[2];
    const int64_t rk = cog * kk;
    int64_t per_img;
    if (rk > INT32_MAX || L > INT32_MAX || cg > INT32_MAX ||
        __builtin_mul_overflow(G * rk, L, &per_img) ||
        __builtin_mul_overflow(per_img, (int64_t)sizeof(T), &per_img) || per_img > CONV_COL_MAX)
        return TD_EUNSUPPORTED;
    const int64_t chunk = conv_chunk(per_img, w.n);
    const size_t wt_bytes = ((size_t)(G * rk * cg) * sizeof(T) + 255) / 256 * 256;
    void *mem = NULL;
    td_status s = td__gpu_temp_alloc(x, wt_bytes + (size_t)(chunk * per_img), &mem);
    if (s != TD_OK) return s;
    T *wtr = (T *)mem, *cols = (T *)((char *)mem + wt_bytes);
    const gpuStream_t st = x->st->s;
    k_convt_weights<T><<<td__gpu_blocks(G * rk * cg, WIN_THREADS), WIN_THREADS, 0, st>>>(
        (const T *)in[1].data, wtr, G, cg, rk);
    s = td__gpu_launched(x, "transposed conv weights kernel");
    const int64_t P = w.out[0] * w.out[1] * w.out[2];
    for (int64_t n0 = 0; n0 < w.n && s == TD_OK; n0 += chunk) {
        const int64_t nimg = w.n - n0 < chunk ? w.n - n0 : chunk;
        /* batch (image j, group g): W_g^T [rk, cg] times x[n0 + j, g] [cg, L] */
        const int64_t sa[2] = {0, rk * cg}, sb[2] = {w.c * L, cg * L};
        s = gemm_batched<T>(x, out->desc.dtype, nimg, G, sa, sb, rk, L, cg, wtr,
                            (const T *)in[0].data + n0 * w.c * L, cols);
        if (s != TD_OK) break;
        k_col2im<T><<<td__gpu_blocks(nimg * w.co * P, WIN_THREADS), WIN_THREADS, 0, st>>>(
            cols, op->n_inputs == 3 ? (const T *)in[2].data : NULL, (T *)out->data, w, n0,
            nimg);
        s = td__gpu_launched(x, "col2im kernel");
    }
    td__gpu_temp_free(x, mem);
    return s;
}

template <typename T>
td_status run(const td__gpu_exec *x, const td__op *op, const td__view *in, const td__view *out,
              const td__window &w)
{
    const gpuStream_t s = x->st->s;
    const int64_t n_out = td__gpu_nelem(&out->desc);
    const unsigned blocks = td__gpu_blocks(n_out, WIN_THREADS);
    const T *x0 = (const T *)in[0].data;
    switch (op->opcode) {
    case TD_OP_CONV: {
        td_status gs = td__gpu_conv_mma(x, op, in, out, &w);
        if (gs != TD_EUNSUPPORTED) return gs;
        gs = conv_gemm<T>(x, op, in, out, w);
        if (gs != TD_EUNSUPPORTED) return gs;
        k_conv<T><<<blocks, WIN_THREADS, 0, s>>>(x0, (const T *)in[1].data,
                                                 op->n_inputs == 3 ? (const T *)in[2].data : NULL,
                                                 (T *)out->data, w);
        break;
    }
    case TD_OP_CONV_TRANSPOSE: {
        const td_status gs = convt_gemm<T>(x, op, in, out, w);
        if (gs != TD_EUNSUPPORTED) return gs;
        k_convt<T><<<blocks, WIN_THREADS, 0, s>>>(x0, (const T *)in[1].data,
                                                  op->n_inputs == 3 ? (const T *)in[2].data : NULL,
                                                  (T *)out->data, w);
        break;
    }
    case TD_OP_CONV_WEIGHT_GRAD: {
        const td_status gs = wgrad_gemm<T>(x, in, out, w);
        if (gs != TD_EUNSUPPORTED) return gs;
        k_wgrad<T><<<td__gpu_blocks(n_out, 1), WIN_THREADS, 0, s>>>(x0, (const T *)in[1].data,
                                                                   (T *)out->data, w);
        break;
    }
    case TD_OP_MAX_POOL:
    case TD_OP_MAX_POOL_INDICES:
        k_maxpool<T><<<blocks, WIN_THREADS, 0, s>>>(x0, out->data,
                                                    op->opcode == TD_OP_MAX_POOL_INDICES, w);
        break;
    case TD_OP_MAX_POOL_BACKWARD:
        k_maxpool_bwd<T><<<blocks, WIN_THREADS, 0, s>>>(x0, in[1].data, in[1].desc.dtype == TD_I32,
                                                        (T *)out->data, w);
        break;
    case TD_OP_AVG_POOL: k_avgpool<T><<<blocks, WIN_THREADS, 0, s>>>(x0, (T *)out->data, w); break;
    case TD_OP_AVG_POOL_BACKWARD:
        k_avgpool_bwd<T><<<blocks, WIN_THREADS, 0, s>>>(x0, (T *)out->data, w);
        break;
    case TD_OP_ADAPTIVE_AVG_POOL:
        k_adaptive<T><<<blocks, WIN_THREADS, 0, s>>>(x0, (T *)out->data, w);
        break;
    case TD_OP_ADAPTIVE_AVG_POOL_BACKWARD:
        k_adaptive_bwd<T><<<blocks, WIN_THREADS, 0, s>>>(x0, (T *)out->data, w);
        break;
    default: k_interp<T><<<blocks, WIN_THREADS, 0, s>>>(x0, (T *)out->data, w); break;
    }
    return td__gpu_launched(x, "window kernel");
}

} // namespace

extern "C" td_status td__gpu_exec_window(const td__gpu_exec *x, const td__op *op,
                                         const td__view *in, const td__view *out)
{
    td__window w;
    td__window_decode(op, &in[0].desc, op->n_inputs > 1 ? &in[1].desc : NULL, &out->desc, &w);
    if (td__gpu_nelem(&out->desc) == 0) return TD_OK;
    switch (in[0].desc.dtype) {
    case TD_F32: return run<float>(x, op, in, out, w);
    case TD_F64: return run<double>(x, op, in, out, w);
    case TD_F16: return run<td_f16>(x, op, in, out, w);
    case TD_BF16: return run<td_bf16>(x, op, in, out, w);
    default: break;
    }
    return td__gpu_fail(x, TD_EINTERNAL, TD_GPU_KIND ": %s: dtype %u has no kernel",
                        td__op_name(op->opcode), in[0].desc.dtype);
}

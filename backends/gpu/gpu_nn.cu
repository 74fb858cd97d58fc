/* gpu_nn.cu — the normalisations (LAYER_NORM RMS_NORM GROUP_NORM BATCH_NORM), their backward
 * ops and DROPOUT on the GPU: the same formulas as backends/cpu/cpu_nn.c (read its header
 * for the group layout), in the same arithmetic: every element widened to double, sums in
 * double, the per-element formula in double, one rounding to the dtype.
 *
 * Why double on the GPU too: these ops are memory-bound (a row is read two or three times,
 * mostly from L2, and written once), so double arithmetic costs little, and it keeps the
 * GPU within a few ulp of the CPU reference in every dtype (the conformance bound,
 * TD_ACC_NORM, allows for the different association of the sums).
 *
 * Layout. LAYER_NORM RMS_NORM and their backward ops on rows of at most 1024 x ROW_CAP_FWD
 * (16384) elements, 1024 x ROW_CAP_BWD (8192) for the backward ops, take the row path
 * (k_nn_row): a team of tpr threads a row (the smallest power of two from 32 up that holds
 * the row in ROW_CAP_* elements a thread), several teams a block for short rows. The row is
 * read once, with 16-byte loads where every operand is 16-byte aligned and the row length a
 * multiple of the vector, into registers as double, and written once (the backward op also
 * keeps dy * w). The team's sums: each lane folds its elements in a fixed order, a warp
 * butterfly of shuffles adds the lanes (a + b == b + a, so every lane has the same bits),
 * and wider teams add the warps' sums from shared memory in ascending order
 * (gpu_ops.cuh's td_team_sum). Mean, then the sum of squared deviations from it (a
 * two-pass variance, from registers), as the CPU computes them. The kernel is templated on
 * the element type, so the loads and the one rounding at the store are the dtype's own.
 * Expected speed on the H200: one read and one write of the row per op (two reads for the
 * backward op), at close to memory bandwidth; double arithmetic is a small fraction of
 * the H200's FP64 rate at that byte rate.
 *
 * GROUP_NORM, BATCH_NORM_BACKWARD and rows longer than the row path's take one block of
 * NN_THREADS threads per group (a grid-stride loop over groups). Thread t folds the group's
 * elements t, t + NN_THREADS, ... in ascending order (forward groups of at most NN_THREADS
 * x NN_ITEMS elements are read once into registers, longer ones and the backward ops re-read
 * them, mostly from L2); the block combines the partial sums along a fixed shared-memory
 * tree.
 *
 * No atomics anywhere: every association depends on the shape alone (never the device or
 * the alignment of the data), so a second run gives the same bits. BATCH_NORM (given
 * statistics) and DROPOUT are grid-stride elementwise kernels. DROPOUT keeps element i when
 * td__philox_u24(word i % 4 of block i / 4) >= p and multiplies by 1/(1-p) rounded to the
 * compute type (float for f32/f16/bf16, double for f64): bit-identical to the CPU.
 *
 * The row path has not run on hardware yet (written without a GPU; checked by the CPU
 * emulation, tests/gpu/emu/run.sh).
 */
#include "backends/gpu/gpu_ops.cuh"
#include "engine/philox.h"
#include <math.h>

namespace {

#define NN_THREADS 256
#define NN_MAX_GRID 65535
/* Elements a thread keeps in registers on the on-chip path (groups up to 4096 elements) */
#define NN_ITEMS 16
/* The row path (LAYER_NORM RMS_NORM and their backward ops): threads of a block when a row
 * takes at most that many, and the elements a thread keeps (the backward op keeps two
 * values an element). Rows of up to 1024 x ROW_CAP_* elements take it. */
#define ROW_BLOCK 256
#define ROW_CAP_FWD 16
#define ROW_CAP_BWD 8

TD_DEV double nn_ld(uint32_t dt, const void *p, int64_t i)
{
    switch (dt) {
    case TD_F32: return ((const float *)p)[i];
    case TD_F64: return ((const double *)p)[i];
    case TD_F16: return td__f16_to_f32(((const uint16_t *)p)[i]);
    default: return td__bf16_to_f32(((const uint16_t *)p)[i]);
    }
}

/* Geometry of a group kernel, by value (cpu_nn.c's nn_task without the pointers). */
struct nn_geom {
    uint32_t dt;
    int kind; /* 0 layer, 1 rms, 2 layer backward, 3 rms backward */
    double eps;
    int64_t ngroups, nseg, seglen, segstride, gstride, gdiv, gstep, pdiv, pmul, pseg;
    int w_elem;
};

struct nn_ptrs {
    const void *x, *dy, *w, *b;
    void *y;
};

/* Sum of v over the block along a fixed tree; every thread gets the result. */
TD_DEV double block_sum(double v, double *sh)
{
    const int t = threadIdx.x;
    sh[t] = v;
    __syncthreads();
    for (int s = NN_THREADS / 2; s > 0; s >>= 1) {
        if (t < s) sh[t] = sh[t] + sh[t + s];
        __syncthreads();
    }
    const double r = sh[0];
    __syncthreads();
    return r;
}

__global__ void __launch_bounds__(NN_THREADS) k_nn_group(nn_geom g, nn_ptrs p)
{
    __shared__ double sh[NN_THREADS];
    const int64_t n = g.nseg * g.seglen;
    const bool bwd = g.kind >= 2, layer = g.kind == 0 || g.kind == 2;
    for (int64_t k = blockIdx.x; k < g.ngroups; k += gridDim.x) {
        const int64_t base = (k / g.gdiv) * g.gstride + (k % g.gdiv) * g.gstep;
        /* element e of the group: segment e / seglen, place e % seglen */
#define NN_OFF(e) (g.nseg == 1 ? base + (e) : base + ((e) / g.seglen) * g.segstride + (e) % g.seglen)
#define NN_PIDX(e) (g.w_elem ? (g.nseg == 1 ? (e) : (e) % g.seglen) \
                             : (k % g.pdiv) * g.pmul + ((e) / g.seglen) * g.pseg)
        if (!bwd && n <= NN_THREADS * NN_ITEMS) {
            /* on chip: the group's elements stay in registers, read once (same folds, same
             * order as below, so the same bits) */
            double xr[NN_ITEMS];
#pragma unroll
            for (int i = 0; i < NN_ITEMS; i++) {
                const int64_t e = threadIdx.x + (int64_t)i * NN_THREADS;
                xr[i] = e < n ? nn_ld(g.dt, p.x, NN_OFF(e)) : 0.0;
            }
            double m = 0.0;
            if (layer) {
                double a = 0.0;
#pragma unroll
                for (int i = 0; i < NN_ITEMS; i++)
                    if (threadIdx.x + (int64_t)i * NN_THREADS < n) a += xr[i];
                m = block_sum(a, sh) / (double)n;
            }
            double a = 0.0;
#pragma unroll
            for (int i = 0; i < NN_ITEMS; i++)
                if (threadIdx.x + (int64_t)i * NN_THREADS < n) {
                    const double d = xr[i] - m;
                    a += d * d;
                }
            const double r = 1.0 / sqrt(block_sum(a, sh) / (double)n + g.eps);
#pragma unroll
            for (int i = 0; i < NN_ITEMS; i++) {
                const int64_t e = threadIdx.x + (int64_t)i * NN_THREADS;
                if (e >= n) break;
                double v = (xr[i] - m) * r;
                if (p.w != NULL) v *= nn_ld(g.dt, p.w, NN_PIDX(e));
                if (p.b != NULL) v += nn_ld(g.dt, p.b, NN_PIDX(e));
                td_store_double(g.dt, p.y, NN_OFF(e), v);
            }
            continue;
        }
        double mean = 0.0;
        if (layer) {
            double a = 0.0;
            for (int64_t e = threadIdx.x; e < n; e += NN_THREADS) a += nn_ld(g.dt, p.x, NN_OFF(e));
            mean = block_sum(a, sh) / (double)n;
        }
        double a = 0.0;
        for (int64_t e = threadIdx.x; e < n; e += NN_THREADS) {
            const double d = nn_ld(g.dt, p.x, NN_OFF(e)) - mean;
            a += d * d;
        }
        const double r = 1.0 / sqrt(block_sum(a, sh) / (double)n + g.eps);
        if (!bwd) {
            for (int64_t e = threadIdx.x; e < n; e += NN_THREADS) {
                const int64_t o = NN_OFF(e);
                double v = (nn_ld(g.dt, p.x, o) - mean) * r;
                if (p.w != NULL) v *= nn_ld(g.dt, p.w, NN_PIDX(e));
                if (p.b != NULL) v += nn_ld(g.dt, p.b, NN_PIDX(e));
                td_store_double(g.dt, p.y, o, v);
            }
            continue;
        }
        double ag = 0.0, agx = 0.0;
        for (int64_t e = threadIdx.x; e < n; e += NN_THREADS) {
            const int64_t o = NN_OFF(e);
            double gg = nn_ld(g.dt, p.dy, o);
            if (p.w != NULL) gg *= nn_ld(g.dt, p.w, NN_PIDX(e));
            ag += gg;
            agx += gg * ((nn_ld(g.dt, p.x, o) - mean) * r);
        }
        const double sg = block_sum(ag, sh), sgx = block_sum(agx, sh);
        const double mg = layer ? sg / (double)n : 0.0, mgx = sgx / (double)n;
        for (int64_t e = threadIdx.x; e < n; e += NN_THREADS) {
            const int64_t o = NN_OFF(e);
            double gg = nn_ld(g.dt, p.dy, o);
            if (p.w != NULL) gg *= nn_ld(g.dt, p.w, NN_PIDX(e));
            const double xh = (nn_ld(g.dt, p.x, o) - mean) * r;
            td_store_double(g.dt, p.y, o, r * (gg - mg - xh * mgx));
        }
#undef NN_OFF
#undef NN_PIDX
    }
}

/* ---- the row path: LAYER_NORM RMS_NORM and their backward ops ----
 * A team of `tpr` threads (a power of two, 32 .. BLOCK) takes a row of n elements; a block
 * holds BLOCK / tpr teams. Lane l of a team keeps elements (j tpr + l) VEC + q, j < CAP /
 * VEC, q < VEC, in registers as double (VEC: the elements in 16 bytes; read as one 16-byte
 * load when every operand is 16-byte aligned and VEC divides n, else element by element:
 * the same elements in the same registers either way, so the same bits). */
struct row_geom {
    int64_t n, nrows;
    int tpr;
    bool layer, vec;
    double eps;
};

template <typename T> struct alignas(16) row_vec {
    T v[16 / sizeof(T)];
};

/* Elements e0 .. e0 + VEC - 1 of row pointer p as double (0 past n). */
template <typename T>
TD_DEV void row_load(const T *p, int64_t e0, int64_t n, bool vec, double *out)
{
    constexpr int VEC = 16 / sizeof(T);
    if (vec) {
        if (e0 < n) {
            const row_vec<T> r = *(const row_vec<T> *)(p + e0);
#pragma unroll
            for (int q = 0; q < VEC; q++) out[q] = td_ld_double(r.v[q]);
        } else {
#pragma unroll
            for (int q = 0; q < VEC; q++) out[q] = 0.0;
        }
        return;
    }
#pragma unroll
    for (int q = 0; q < VEC; q++) out[q] = e0 + q < n ? td_ld_double(p[e0 + q]) : 0.0;
}

template <typename T>
TD_DEV void row_store(T *p, int64_t e0, int64_t n, bool vec, const double *v)
{
    constexpr int VEC = 16 / sizeof(T);
    if (vec) {
        if (e0 >= n) return;
        row_vec<T> r;
#pragma unroll
        for (int q = 0; q < VEC; q++) r.v[q] = td_from_double<T>(v[q]);
        *(row_vec<T> *)(p + e0) = r;
        return;
    }
#pragma unroll
    for (int q = 0; q < VEC; q++)
        if (e0 + q < n) p[e0 + q] = td_from_double<T>(v[q]);
}

/* The sums of NS values over a team of `tpr` threads (a power of two, 32 .. BLOCK), in
 * td_team_sum's association exactly (a warp butterfly, then the warps' sums in ascending
 * order, so the same bits), with one barrier instead of two: `sh` (NS x BLOCK / 32 doubles)
 * is written before the barrier and read after it, so a caller must not write the same
 * `sh` again before the block's next barrier: the row kernel alternates two buffers (the
 * next call's barrier comes after every thread's reads of this one). */
template <int NS, int BLOCK>
TD_DEV void team_sums(double (&v)[NS], int tpr, double *sh)
{
#pragma unroll
    for (int m = 16; m > 0; m >>= 1)
#pragma unroll
        for (int i = 0; i < NS; i++) v[i] += td_shfl_xor(v[i], m);
    if (tpr <= 32) return;
    const int w = (int)threadIdx.x / 32, w0 = w - w % (tpr / 32);
    if (threadIdx.x % 32 == 0)
#pragma unroll
        for (int i = 0; i < NS; i++) sh[i * (BLOCK / 32) + w] = v[i];
    __syncthreads();
#pragma unroll
    for (int i = 0; i < NS; i++) {
        double s = sh[i * (BLOCK / 32) + w0];
        for (int k = 1; k < tpr / 32; k++) s += sh[i * (BLOCK / 32) + w0 + k];
        v[i] = s;
    }
}

/* CAP elements a lane keeps; BWD: the backward op (keeps x and dy * w, CAP each). The
 * general row kernel: any row length up to 1024 x CAP, any alignment. */
template <typename T, int CAP, int BLOCK, bool BWD>
__global__ void __launch_bounds__(BLOCK) k_nn_row(row_geom g, nn_ptrs p)
{
    constexpr int VEC = 16 / sizeof(T), NV = CAP / VEC;
    __shared__ double sh[2][2 * (BLOCK / 32)];
    int cb = 0; /* the buffer of the next team_sums call */
    const int tpr = g.tpr, lane = (int)threadIdx.x % tpr, rpb = BLOCK / tpr;
    const int64_t n = g.n;
    const double nd = (double)n;
    const T *w = (const T *)p.w, *b = (const T *)p.b;
    /* every thread of the block runs the same iterations (block-uniform bound) */
    for (int64_t r0 = (int64_t)blockIdx.x * rpb; r0 < g.nrows; r0 += (int64_t)gridDim.x * rpb) {
        const int64_t row = r0 + (int)threadIdx.x / tpr;
        const int64_t len = row < g.nrows ? n : 0; /* a team past the last row holds zeros */
        const int64_t off = row < g.nrows ? row * n : 0;
        const T *x = (const T *)p.x + off;
        double xr[CAP], gr[BWD ? CAP : 1];
#pragma unroll
        for (int j = 0; j < NV; j++)
            row_load(x, ((int64_t)j * tpr + lane) * VEC, len, g.vec, xr + j * VEC);
        if (BWD) {
            const T *dy = (const T *)p.dy + off;
#pragma unroll
            for (int j = 0; j < NV; j++) {
                const int64_t e0 = ((int64_t)j * tpr + lane) * VEC;
                row_load(dy, e0, len, g.vec, gr + j * VEC);
                if (w != NULL) {
                    double wv[VEC];
                    row_load(w, e0, len, g.vec, wv);
#pragma unroll
                    for (int q = 0; q < VEC; q++) gr[j * VEC + q] *= wv[q];
                }
            }
        }
        /* elements past the row's end hold 0 and are left out of every fold */
        double mean = 0.0;
        if (g.layer) {
            double a = 0.0;
#pragma unroll
            for (int i = 0; i < CAP; i++)
                if (((int64_t)(i / VEC) * tpr + lane) * VEC + i % VEC < len) a += xr[i];
            double t1[1] = {a};
            team_sums<1, BLOCK>(t1, tpr, sh[cb]);
            cb ^= 1;
            mean = t1[0] / nd;
        }
        double a = 0.0;
#pragma unroll
        for (int i = 0; i < CAP; i++) {
            const int64_t e = ((int64_t)(i / VEC) * tpr + lane) * VEC + i % VEC;
            const double d = e < len ? xr[i] - mean : 0.0;
            a += d * d;
        }
        double t2[1] = {a};
        team_sums<1, BLOCK>(t2, tpr, sh[cb]);
        cb ^= 1;
        const double r = 1.0 / sqrt(t2[0] / nd + g.eps);
        T *y = (T *)p.y + off;
        if (!BWD) {
#pragma unroll
            for (int j = 0; j < NV; j++) {
                const int64_t e0 = ((int64_t)j * tpr + lane) * VEC;
                double v[VEC], wv[VEC], bv[VEC];
                if (w != NULL) row_load(w, e0, len, g.vec, wv);
                if (b != NULL) row_load(b, e0, len, g.vec, bv);
#pragma unroll
                for (int q = 0; q < VEC; q++) {
                    v[q] = (xr[j * VEC + q] - mean) * r;
                    if (w != NULL) v[q] *= wv[q];
                    if (b != NULL) v[q] += bv[q];
                }
                row_store(y, e0, len, g.vec, v);
            }
            continue;
        }
        double ag = 0.0, agx = 0.0;
#pragma unroll
        for (int i = 0; i < CAP; i++)
            if (((int64_t)(i / VEC) * tpr + lane) * VEC + i % VEC < len) {
                ag += gr[i];
                agx += gr[i] * ((xr[i] - mean) * r);
            }
        double t3[2] = {ag, agx};
        team_sums<2, BLOCK>(t3, tpr, sh[cb]);
        cb ^= 1;
        const double sg = t3[0], sgx = t3[1];
        const double mg = g.layer ? sg / nd : 0.0, mgx = sgx / nd;
#pragma unroll
        for (int j = 0; j < NV; j++) {
            double v[VEC];
#pragma unroll
            for (int q = 0; q < VEC; q++) {
                const double xh = (xr[j * VEC + q] - mean) * r;
                v[q] = r * (gr[j * VEC + q] - mg - xh * mgx);
            }
            row_store(y, ((int64_t)j * tpr + lane) * VEC, len, g.vec, v);
        }
    }
}

/* The row kernel for whole chunks: every operand 16-byte aligned and the row length a
 * multiple of VEC x tpr, so lane l holds chunks j tpr + l for j < nv = n / (VEC tpr), all
 * inside the row (the common case: 4096 f32 is 256 lanes x 4 chunks). The same elements in
 * the same registers, folded in the same order, as k_nn_row: the same bits. What differs:
 * no per-element bounds (a chunk count instead; 32-bit offsets inside a row), a team past
 * the last row reads row 0 and stores nothing, and at most 64 registers a thread (1024
 * threads a multiprocessor). Without that bound nvcc gave the f32 forward row kernel 120
 * registers, so only two 256-thread rows were in flight on a multiprocessor, each loading,
 * then reducing (barriers), then storing: the suspected reason for 0.175 ms on [8192, 4096]
 * f32 on the H200 (64 MiB moved, under a tenth of the bandwidth). */
template <typename T, int CAP, int BLOCK, bool BWD>
__global__ void __launch_bounds__(BLOCK, 1024 / BLOCK) k_nn_rowv(row_geom g, nn_ptrs p)
{
    constexpr int VEC = 16 / sizeof(T), NV = CAP / VEC;
    typedef row_vec<T> RV;
    __shared__ double sh[2][2 * (BLOCK / 32)];
    int cb = 0; /* the buffer of the next team_sums call */
    const int tpr = g.tpr, lane = (int)threadIdx.x % tpr, rpb = BLOCK / tpr;
    const int nv = (int)(g.n / ((int64_t)VEC * tpr));
    const double nd = (double)g.n;
    const RV *w = (const RV *)p.w, *b = (const RV *)p.b;
    for (int64_t r0 = (int64_t)blockIdx.x * rpb; r0 < g.nrows; r0 += (int64_t)gridDim.x * rpb) {
        const int64_t row = r0 + (int)threadIdx.x / tpr;
        const bool live = row < g.nrows;
        const int64_t off = live ? row * g.n : 0;
        const RV *x = (const RV *)((const T *)p.x + off);
        double xr[CAP], gr[BWD ? CAP : 1];
#pragma unroll
        for (int j = 0; j < NV; j++)
            if (j < nv) {
                const RV v = x[j * tpr + lane];
#pragma unroll
                for (int q = 0; q < VEC; q++) xr[j * VEC + q] = td_ld_double(v.v[q]);
            }
        if (BWD) {
            const RV *dy = (const RV *)((const T *)p.dy + off);
#pragma unroll
            for (int j = 0; j < NV; j++)
                if (j < nv) {
                    const RV v = dy[j * tpr + lane];
#pragma unroll
                    for (int q = 0; q < VEC; q++) gr[j * VEC + q] = td_ld_double(v.v[q]);
                    if (w != NULL) {
                        const RV wv = w[j * tpr + lane];
#pragma unroll
                        for (int q = 0; q < VEC; q++) gr[j * VEC + q] *= td_ld_double(wv.v[q]);
                    }
                }
        }
        double mean = 0.0;
        if (g.layer) {
            double a[1] = {0.0};
#pragma unroll
            for (int j = 0; j < NV; j++)
                if (j < nv)
#pragma unroll
                    for (int q = 0; q < VEC; q++) a[0] += xr[j * VEC + q];
            team_sums<1, BLOCK>(a, tpr, sh[cb]);
            cb ^= 1;
            mean = a[0] / nd;
        }
        double a2[1] = {0.0};
#pragma unroll
        for (int j = 0; j < NV; j++)
            if (j < nv)
#pragma unroll
                for (int q = 0; q < VEC; q++) {
                    const double d = xr[j * VEC + q] - mean;
                    a2[0] += d * d;
                }
        team_sums<1, BLOCK>(a2, tpr, sh[cb]);
        cb ^= 1;
        const double r = 1.0 / sqrt(a2[0] / nd + g.eps);
        RV *y = (RV *)((T *)p.y + off);
        if (!BWD) {
#pragma unroll
            for (int j = 0; j < NV; j++)
                if (j < nv) {
                    double v[VEC];
#pragma unroll
                    for (int q = 0; q < VEC; q++) v[q] = (xr[j * VEC + q] - mean) * r;
                    if (w != NULL) {
                        const RV wv = w[j * tpr + lane];
#pragma unroll
                        for (int q = 0; q < VEC; q++) v[q] *= td_ld_double(wv.v[q]);
                    }
                    if (b != NULL) {
                        const RV bv = b[j * tpr + lane];
#pragma unroll
                        for (int q = 0; q < VEC; q++) v[q] += td_ld_double(bv.v[q]);
                    }
                    RV o;
#pragma unroll
                    for (int q = 0; q < VEC; q++) o.v[q] = td_from_double<T>(v[q]);
                    if (live) y[j * tpr + lane] = o;
                }
            continue;
        }
        double t3[2] = {0.0, 0.0};
#pragma unroll
        for (int j = 0; j < NV; j++)
            if (j < nv)
#pragma unroll
                for (int q = 0; q < VEC; q++) {
                    t3[0] += gr[j * VEC + q];
                    t3[1] += gr[j * VEC + q] * ((xr[j * VEC + q] - mean) * r);
                }
        team_sums<2, BLOCK>(t3, tpr, sh[cb]);
        cb ^= 1;
        const double mg = g.layer ? t3[0] / nd : 0.0, mgx = t3[1] / nd;
#pragma unroll
        for (int j = 0; j < NV; j++)
            if (j < nv) {
                RV o;
#pragma unroll
                for (int q = 0; q < VEC; q++) {
                    const double xh = (xr[j * VEC + q] - mean) * r;
                    o.v[q] = td_from_double<T>(r * (gr[j * VEC + q] - mg - xh * mgx));
                }
                if (live) y[j * tpr + lane] = o;
            }
    }
}

/* BATCH_NORM with given statistics over [N, C, S]: element i is channel (i / S) % C. */
__global__ void k_batch_norm(uint32_t dt, const void *x, const void *mean, const void *var,
                             const void *w, const void *b, void *y, double eps, int64_t c,
                             int64_t s, int64_t total)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t ch = (i / s) % c;
        const double r = 1.0 / sqrt(nn_ld(dt, var, ch) + eps);
        double v = (nn_ld(dt, x, i) - nn_ld(dt, mean, ch)) * r;
        if (w != NULL) v *= nn_ld(dt, w, ch);
        if (b != NULL) v += nn_ld(dt, b, ch);
        td_store_double(dt, y, i, v);
    }
}

/* DROPOUT: thread q takes Philox block q (elements 4q .. 4q + 3). */
__global__ void k_dropout(uint32_t dt, const void *x, void *y, double p, uint64_t seed,
                          int64_t total)
{
    const float sf = (float)(1.0 / (1.0 - p));
    const double sd = 1.0 / (1.0 - p);
    const int64_t nblocks = (total + 3) / 4;
    for (int64_t q = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; q < nblocks;
         q += (int64_t)gridDim.x * blockDim.x) {
        uint32_t w[4];
        td__philox_block(seed, (uint64_t)q, w);
        for (int j = 0; j < 4; j++) {
            const int64_t i = q * 4 + j;
            if (i >= total) break;
            const bool keep = td__philox_u24(w[j]) >= p;
            switch (dt) {
            case TD_F32: ((float *)y)[i] = ((const float *)x)[i] * (keep ? sf : 0.0f); break;
            case TD_F64: ((double *)y)[i] = ((const double *)x)[i] * (keep ? sd : 0.0); break;
            case TD_F16: {
                const float v = ((const td_f16 *)x)[i].f() * (keep ? sf : 0.0f);
                ((td_f16 *)y)[i] = td_cast_to<td_f16>::from(v);
                break;
            }
            default: {
                const float v = ((const td_bf16 *)x)[i].f() * (keep ? sf : 0.0f);
                ((td_bf16 *)y)[i] = td_cast_to<td_bf16>::from(v);
                break;
            }
            }
        }
    }
}

template <typename T, bool BWD>
void launch_row_t(const td__gpu_exec *x, const row_geom &g, const nn_ptrs &p)
{
    constexpr int CAP = BWD ? ROW_CAP_BWD : ROW_CAP_FWD;
    const int block = g.tpr > ROW_BLOCK ? g.tpr : ROW_BLOCK;
    const int64_t rpb = block / g.tpr, need = (g.nrows + rpb - 1) / rpb;
    const unsigned grid = (unsigned)(need < NN_MAX_GRID ? need : NN_MAX_GRID);
    if (g.vec && g.n % ((int64_t)(16 / sizeof(T)) * g.tpr) == 0) {
        if (block == 256)
            k_nn_rowv<T, CAP, 256, BWD><<<grid, 256, 0, x->st->s>>>(g, p);
        else if (block == 512)
            k_nn_rowv<T, CAP, 512, BWD><<<grid, 512, 0, x->st->s>>>(g, p);
        else
            k_nn_rowv<T, CAP, 1024, BWD><<<grid, 1024, 0, x->st->s>>>(g, p);
        return;
    }
    if (block == 256)
        k_nn_row<T, CAP, 256, BWD><<<grid, 256, 0, x->st->s>>>(g, p);
    else if (block == 512)
        k_nn_row<T, CAP, 512, BWD><<<grid, 512, 0, x->st->s>>>(g, p);
    else
        k_nn_row<T, CAP, 1024, BWD><<<grid, 1024, 0, x->st->s>>>(g, p);
}

template <bool BWD>
void launch_row_b(const td__gpu_exec *x, uint32_t dt, const row_geom &g, const nn_ptrs &p)
{
    switch (dt) {
    case TD_F32: launch_row_t<float, BWD>(x, g, p); break;
    case TD_F64: launch_row_t<double, BWD>(x, g, p); break;
    case TD_F16: launch_row_t<td_f16, BWD>(x, g, p); break;
    default: launch_row_t<td_bf16, BWD>(x, g, p); break;
    }
}

td_status launch_row(const td__gpu_exec *x, uint32_t dt, bool bwd, const row_geom &g,
                     const nn_ptrs &p)
{
    if (bwd) launch_row_b<true>(x, dt, g, p);
    else launch_row_b<false>(x, dt, g, p);
    return td__gpu_launched(x, "normalisation row kernel");
}

} // namespace

extern "C" td_status td__gpu_exec_nn(const td__gpu_exec *x, const td__op *op, const td__view *in,
                                     const td__view *out)
{
    const uint32_t dt = out->desc.dtype;
    const int64_t total = td__gpu_nelem(&out->desc);
    if (total == 0) return TD_OK;
    const double eps = op->fattrs[0];
    if (op->opcode == TD_OP_DROPOUT) {
        k_dropout<<<td__gpu_blocks((total + 3) / 4, TD_GPU_THREADS), TD_GPU_THREADS, 0,
                    x->st->s>>>(dt, in[0].data, out->data, op->fattrs[0], op->seed, total);
        return td__gpu_launched(x, "dropout kernel");
    }
    if (op->opcode == TD_OP_BATCH_NORM) {
        const td__desc *d = &in[0].desc;
        int64_t s = 1;
        for (uint32_t i = 2; i < d->rank; i++) s *= d->dims[i];
        k_batch_norm<<<td__gpu_blocks(total, TD_GPU_THREADS), TD_GPU_THREADS, 0, x->st->s>>>(
            dt, in[0].data, in[1].data, in[2].data, op->n_inputs > 3 ? in[3].data : NULL,
            op->n_inputs > 4 ? in[4].data : NULL, out->data, eps, d->dims[1], s, total);
        return td__gpu_launched(x, "batch_norm kernel");
    }
    const bool bwd = op->opcode == TD_OP_LAYER_NORM_BACKWARD ||
                     op->opcode == TD_OP_RMS_NORM_BACKWARD ||
                     op->opcode == TD_OP_GROUP_NORM_BACKWARD ||
                     op->opcode == TD_OP_BATCH_NORM_BACKWARD;
    const uint32_t xi = bwd ? 1 : 0;
    const td__desc *d = &in[xi].desc;
    nn_ptrs p = {in[xi].data, bwd ? in[0].data : NULL,
                 op->n_inputs > xi + 1 ? in[xi + 1].data : NULL,
                 !bwd && op->n_inputs > 2 ? in[2].data : NULL, out->data};
    nn_geom g = {};
    g.dt = dt;
    g.eps = eps;
    g.nseg = 1;
    g.gdiv = 1;
    g.pdiv = 1;
    switch (op->opcode) {
    case TD_OP_LAYER_NORM: case TD_OP_RMS_NORM:
    case TD_OP_LAYER_NORM_BACKWARD: case TD_OP_RMS_NORM_BACKWARD: {
        int64_t n = 1;
        for (uint32_t i = (uint32_t)op->iattrs[0]; i < d->rank; i++) n *= d->dims[i];
        g.kind = op->opcode == TD_OP_LAYER_NORM ? 0 : op->opcode == TD_OP_RMS_NORM ? 1
                 : op->opcode == TD_OP_LAYER_NORM_BACKWARD ? 2 : 3;
        g.seglen = g.segstride = g.gstride = n;
        g.w_elem = 1;
        g.ngroups = total / n;
        break;
    }
    case TD_OP_GROUP_NORM: case TD_OP_GROUP_NORM_BACKWARD: {
        const int64_t c = d->dims[1], gr = op->iattrs[0];
        int64_t s = 1;
        for (uint32_t i = 2; i < d->rank; i++) s *= d->dims[i];
        g.kind = bwd ? 2 : 0;
        g.nseg = c / gr;
        g.seglen = g.segstride = s;
        g.gstride = g.nseg * s;
        g.pdiv = gr;
        g.pmul = c / gr;
        g.pseg = 1;
        g.ngroups = total / g.gstride;
        break;
    }
    default: {
        const int64_t c = d->dims[1];
        int64_t s = 1;
        for (uint32_t i = 2; i < d->rank; i++) s *= d->dims[i];
        g.kind = 2;
        g.nseg = d->dims[0];
        g.seglen = s;
        g.segstride = c * s;
        g.gdiv = c;
        g.gstride = 0;
        g.gstep = s;
        g.pdiv = c;
        g.pmul = 1;
        g.pseg = 0;
        g.ngroups = c;
        break;
    }
    }
    if (g.ngroups == 0 || g.nseg * g.seglen == 0) return TD_OK;
    if (g.nseg == 1 && g.w_elem) {
        row_geom rg = {};
        rg.n = g.seglen;
        rg.nrows = g.ngroups;
        rg.layer = g.kind == 0 || g.kind == 2;
        rg.eps = eps;
        const int cap = bwd ? ROW_CAP_BWD : ROW_CAP_FWD;
        int tpr = 32;
        while ((int64_t)tpr * cap < rg.n && tpr < 1024) tpr *= 2;
        if ((int64_t)tpr * cap >= rg.n) {
            rg.tpr = tpr;
            const size_t esz = td__gpu_dtype_size(dt);
            bool vec = (rg.n * (int64_t)esz) % 16 == 0;
            const void *ptrs[5] = {p.x, p.dy, p.w, p.b, p.y};
            for (int i = 0; i < 5; i++) vec = vec && (uintptr_t)ptrs[i] % 16 == 0;
            rg.vec = vec;
            return launch_row(x, dt, bwd, rg, p);
        }
    }
    const unsigned grid = (unsigned)(g.ngroups < NN_MAX_GRID ? g.ngroups : NN_MAX_GRID);
    k_nn_group<<<grid, NN_THREADS, 0, x->st->s>>>(g, p);
    return td__gpu_launched(x, "normalisation kernel");
}

/* gpu_conv.cu — CONV (the forward op, 1d/2d/3d, any stride, padding, dilation and groups) in
 * f16 and bf16 as an implicit GEMM on NVIDIA tensor cores, and in f32 as an implicit GEMM on
 * the CUDA cores (FFMA; TENSORD_GPU_CONV_F32): no column buffer.
 *
 * Why: im2col + batched GEMM (gpu_window.cu's conv_gemm) writes and reads a column matrix
 * kernel-volume times the input's size, and its GEMMs are per image, so a small output
 * plane (49 positions in ResNet-50's last stage) makes thin GEMMs: issue 13 measured it at
 * 0.27-0.47x cuDNN in bf16. Here the GEMM's columns are images x output positions
 * (flattened across the images), so every layer makes full tiles, and the B operand is
 * gathered from the input while the tile is copied to shared memory.
 *
 * GEMM view and index math: gpu_conv_layout.h (M = C_out/G, N = images x positions, K =
 * C_in/G x kernel volume; per-k and per-column tables, so the copy loop does no division).
 * A block of 8 warps computes a BM x BN tile of one group's output (BM 64 or 128, BN 64 or
 * 128; a warp BM/WM x BN/(8/WM)) over K in steps of 32 (ldmatrix, mma.sync m16n8k16, f32
 * accumulation; gpu_mma.cuh). Two ways to feed it:
 *  - channels-last (C/G a multiple of 8: every ResNet layer but the first): the input is
 *    first transposed to NHWC and the weight to [C_out][kd][kh][kw][C/G] in temp memory
 *    (memory-bound, a few microseconds), K ordered (kd, kh, kw, c), so that 8 consecutive k
 *    are 8 consecutive channels of one pixel: both operands by 16-byte cp.async (zero-fill
 *    for the padding) in a 3- or 4-stage pipeline, nothing through registers. When
 *    the grid is small (ResNet-50's last stage: N = 32 x 49) K is split in S parts
 *    (td_conv_splits_wave, from the shape and tile alone: one wave of blocks; a split
 *    128 x 64 grid runs at 3 blocks an SM), and the S blocks of an output tile,
 *    launched as one thread-block cluster, leave their f32 tiles in shared memory and sum
 *    them in ascending split through distributed shared memory (deterministic split-K, no
 *    atomics, no second launch); where a tile's stages cannot hold its f32 tile (128 x 128)
 *    or the device refuses the cluster, into f32 partials in global memory that a second
 *    kernel sums in the same order (the same bits).
 *  - element gather (other C/G, e.g. the 3-channel first layer): the weight by cp.async
 *    (element by element when K is not a multiple of 8) and the input gathered element by
 *    element through registers, double-buffered.
 * At the end the accumulator plus the bias (in f32) is rounded to the dtype once.
 *
 * Determinism and accuracy: each output element is an f32 sum over k in ascending tiles
 * of 32 (each the two k16 steps of the mma in order), then, when split, the S partials
 * summed in ascending order: the order depends on the shape, the path (K order) and the
 * split alone, never on the grid or timing (no atomics). The split depends on the tile, so
 * variants may differ in the last bits; the default (variant 0) picks from the shape
 * only, never from the device. Bias is added after the products (the im2col GEMM summed
 * it as one more product): all are within the f32-accumulate-once of TD_ACC_CONV's bound
 * (tests/unit/backends/conformance.c).
 *
 * TENSORD_GPU_CONV_VARIANT (a development aid for timing): 0 (default): channels-last
 * when it applies, tile by auto_cfg_nhwc, split when the grid is small; else the element
 * gather with the largest tile that still gives a wave of blocks (C_out/G <= 64 tries
 * 64-row tiles first); 1: 128x128; 2: 64x128; 3: 128x64; 4: 64x64 (split as 0 would for
 * that tile); 5: the im2col + GEMM path; 6: channels-last off (the element gather, auto
 * tile); 7: split-K off (otherwise as 0); 8: a split summed by the second kernel from f32
 * partials in global memory (otherwise as 0; the way before the cluster sum); 9: the
 * channels-last 128 x 64 tile at 3 blocks an SM (launch bounds; a timing aid).
 * TENSORD_GPU_CONV_TRACE=1 prints a line to stderr per launch (path, tile, split, M, N, K):
 * a check that this kernel ran.
 *
 * f32 (k_conv_f32; the layout and thread mapping: gpu_conv_layout.h's f32 section): full f32,
 * no TF32 and no tensor cores (f32 results must be f32-accurate), so a classic SIMT GEMM:
 * by default 256 threads, block tile BM x 128 (BM 128, or 64 when C_out/G <= 64) x 16 k,
 * each thread an 8 x 8 (4 x 8) micro-tile of fmaf from k-major shared tiles (float4 loads,
 * one wavefront each), fed by a 3- (4-) stage cp.async pipeline: the weight, transposed
 * once into temp memory to [G][K][C_out/G rounded up to 4] (zero-padded), by 16-byte
 * chunks, the input gathered element by element by 4-byte cp.async with zero-fill (the
 * same per-k and per-column tables as the f16 element gather, K in the weight's own
 * order). No channels-last copy: the FFMA tile wants B n-contiguous in shared memory,
 * which the NCHW gather gives directly and a k-contiguous NHWC chunk does not. Why:
 * im2col + cuBLAS wrote and re-read a K x N column buffer (115 MB for ResNet-50's layer2
 * at batch 32), and the per-image SIMT sgemm saw M = C_out/G only (0.52x cuDNN there).
 * Determinism: each output is one fmaf chain over k ascending (then, when split, the
 * partials summed in ascending split, as for f16), + bias once at the end: the bits
 * depend on the shape alone (the tile and the split are chosen from the shape,
 * td_conv_splits over TD_CONVF_BK tiles; without a split no tile changes a bit). The
 * order differs from im2col + cuBLAS's (within TD_ACC_CONV). TENSORD_GPU_CONV_F32 (read
 * once): 1 (the default) takes f32 CONV here, 0 to im2col + cuBLAS, 2 to 5 (timing aids)
 * here with one tile: 128 x 128, 64 x 128, and two 128 x 64 tiles at 3 blocks an SM for
 * grids that 128 x 128 leaves unevenly spread (f32_pick says why). Measured on an H100
 * (BENCHMARKS.md, 2026-12-06 11:35 UTC), x/PT on ResNet-50's layers at batch 32 against
 * cuDNN with TF32 off: 1.34, 1.27, 0.68, 1.54, 1.40 (im2col + cuBLAS: 1.18, 0.79, 0.53,
 * 1.56, 1.39); on the H200 (2026-12-07) layer2 went from 0.57 to 0.72 with mode 1's
 * 128 x 64 tile for C_out/G <= 128; forcing the split over K (TENSORD_GPU_CONV_F32_SPLIT) moved the 3x3
 * 128-channel layer by under 5 %. A pointwise conv without bias (1x1, stride 1, no
 * padding) keeps that path's shortcut either way (one batched GEMM straight on x and w).
 * The CPU emulation runs this kernel too (cp.async as plain copies, gpu_mma.cuh's
 * TD_GPU_STAGE).
 *
 * Built only by nvcc for CUDA (sm_80 instructions; the module targets sm_90): under hipcc
 * (TD_GPU_HIP) td__gpu_conv_mma says TD_EUNSUPPORTED and gpu_window.cu takes im2col + GEMM,
 * as under the CPU emulation (TD_GPU_EMU) for f16/bf16. Shapes outside the kernels' 32-bit
 * index arithmetic (td_conv_shape_init) or their grids take that path too.
 */
#include "backends/gpu/gpu_ops.cuh"
#include "backends/gpu/gpu_conv_layout.h"
#include "backends/gpu/gpu_mma.cuh"
#include "engine/window.h"
#if defined(TD_GPU_MMA)
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
#endif
#include <stdio.h>
#include <stdlib.h>

/* nvcc or the CPU emulation: what the f32 kernel uses (the f16/bf16 kernels: TD_GPU_MMA) */
#if defined(TD_GPU_STAGE)

namespace {

/* table entry i (one 16-byte load on the GPU: the table is in temp memory, 256-byte aligned) */
TD_DEV td_conv_kent kent_ld(const td_conv_kent *__restrict__ tab, int i)
{
#if defined(TD_GPU_MMA)
    const int4 kv = __ldg(reinterpret_cast<const int4 *>(tab) + i);
    td_conv_kent ke;
    ke.off = kv.x;
    ke.dd = kv.y;
    ke.dh = kv.z;
    ke.dw = kv.w;
    return ke;
#else
    return tab[i];
#endif
}

/* The cp.async pipeline over K tiles [kt0, kt1) in ST stages (the channels-last f16 kernel
 * and the f32 one): load(kt, stage) issues tile kt's copies into a stage, one commit group a
 * tile; fold(stage) computes from a stage once its group is complete (wait_group ST - 2)
 * and every thread's copies are in (the barrier, which also frees the stage of the tile
 * before, the next one to be loaded). */
template <int ST, typename L, typename F>
TD_DEV void stage_pipeline(int kt0, int kt1, L &&load, F &&fold)
{
#pragma unroll
    for (int st = 0; st < ST - 1; st++) {
        if (kt0 + st < kt1) load(kt0 + st, st);
        stage_commit();
    }
    for (int kt = kt0; kt < kt1; kt++) {
        const int i = kt - kt0, cur = i % ST;
        stage_wait<ST - 2>();
        __syncthreads();
        if (kt + ST - 1 < kt1) load(kt + ST - 1, (i + ST - 1) % ST);
        stage_commit();
        fold(cur);
    }
    stage_wait<0>();
}

/* the element types' widening to f32 and rounding from it (IO::T, IO::in, IO::out) */
struct io_f32 {
    typedef float T;
    static TD_DEV float in(float v) { return v; }
    static TD_DEV float out(float v) { return v; }
};

/* the S partials summed in ascending split, + bias, rounded once: one thread an output */
template <typename IO>
__global__ void k_conv_reduce(const float *__restrict__ part,
                              const typename IO::T *__restrict__ bias,
                              typename IO::T *__restrict__ y, td_conv_shape s, int S)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)s.n * s.co * s.P) return;
    const int32_t img = (int32_t)(i / ((int64_t)s.co * s.P));
    const int32_t r = (int32_t)(i % ((int64_t)s.co * s.P));
    const int32_t o = r / s.P, p = r % s.P, g = o / s.cog, m = o % s.cog;
    const int32_t j = img * s.P + p;
    float a = 0.0f;
    for (int sp = 0; sp < S; sp++) a += part[td_conv_part_off(&s, sp, g, m, j)];
    if (bias != NULL) a += IO::in(bias[o]);
    y[i] = IO::out(a);
}

template <typename IO>
td_status launch_reduce(const td__gpu_exec *x, const float *part, const typename IO::T *bias,
                        typename IO::T *y, const td_conv_shape &s, int S)
{
    const int64_t nout = (int64_t)s.n * s.co * s.P;
    k_conv_reduce<IO><<<(unsigned)((nout + 255) / 256), 256, 0, x->st->s>>>(part, bias, y, s, S);
    return td__gpu_launched(x, "conv split-k reduction");
}

/* One temp block of n <= 4 parts of bytes[i] bytes, each 256-byte aligned: part[i] (NULL
 * when bytes[i] is 0). TD_EUNSUPPORTED (nothing allocated) when the total overflows. */
td_status temp_parts(const td__gpu_exec *x, int n, const size_t *bytes, void **mem, char **part)
{
    size_t off[4], total = 0;
    for (int i = 0; i < n; i++) {
        off[i] = total;
        if (__builtin_add_overflow(total, bytes[i], &total) ||
            __builtin_add_overflow(total, (size_t)255, &total))
            return TD_EUNSUPPORTED;
        total &= ~(size_t)255;
    }
    const td_status st = td__gpu_temp_alloc(x, total, mem);
    if (st != TD_OK) return st;
    for (int i = 0; i < n; i++) part[i] = bytes[i] != 0 ? (char *)*mem + off[i] : NULL;
    return TD_OK;
}

} // namespace

#endif

#if defined(TD_GPU_MMA)

namespace {

/* the per-k table: nk TD_CONV_BK entries */
__global__ void k_conv_ktab(td_conv_kent *tab, td_conv_shape s)
{
    const int32_t k = (int32_t)(blockIdx.x * blockDim.x + threadIdx.x);
    if (k < s.nk * TD_CONV_BK) tab[k] = td_conv_kentry(&s, k);
}

template <bool BF> TD_DEV uint16_t round16(float v);
template <> TD_DEV uint16_t round16<true>(float v) { return td__gpu_f32_to_bf16(v); }
template <> TD_DEV uint16_t round16<false>(float v) { return td__gpu_f32_to_f16(v); }
template <bool BF> TD_DEV float widen16(uint16_t v);
template <> TD_DEV float widen16<true>(uint16_t v) { return td__bf16_to_f32(v); }
template <> TD_DEV float widen16<false>(uint16_t v) { return td__f16_to_f32(v); }
template <bool BF> struct io16 {
    typedef uint16_t T;
    static TD_DEV float in(uint16_t v) { return widen16<BF>(v); }
    static TD_DEV uint16_t out(float v) { return round16<BF>(v); }
};

/* BF: bf16 (else f16); BM x BN block tile, WM warps along M; AV: the weight by cp.async. */
template <bool BF, int BM, int BN, int WM, bool AV, int MINB>
__global__ void __launch_bounds__(TD_CONV_THREADS, MINB)
    k_conv_mma(const uint16_t *__restrict__ x, const uint16_t *__restrict__ w,
               const uint16_t *__restrict__ bias, uint16_t *__restrict__ y,
               const td_conv_kent *__restrict__ ktab, td_conv_shape s)
{
    constexpr int BK = TD_CONV_BK;
    constexpr int WN = 8 / WM, WTM = BM / WM, WTN = BN / WN;
    constexpr int MT = WTM / 16, NT = WTN / 8;
    constexpr int BP = BN / 16;                    /* B gather passes per tile */
    constexpr int AP = AV ? BM / 64 : BM / 16;     /* A chunks / pairs per thread */
    static_assert(NT % 2 == 0 && MT >= 1 && BP * 2 * TD_CONV_THREADS == BK * BN, "tile");
    __shared__ __align__(128) uint16_t sa[2][BM * BK];
    __shared__ __align__(128) uint16_t sb[2][BK * BN];

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = blockIdx.z, m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    int bcol, bk0, bkstep;
    td_conv_b_thread(tid, BN, &bcol, &bk0, &bkstep);
    const td_conv_col col0 = td_conv_column(&s, g, n0 + bcol);
    const td_conv_col col1 = td_conv_column(&s, g, n0 + bcol + 1);
    const uint16_t *wg = w + (int64_t)g * s.cog * s.K; /* the group's weight rows */
    int wr0, wc0;
    td_conv_warp(warp, BM, BN, WM, &wr0, &wc0);

    uint32_t breg[BP];
    uint32_t areg[AV ? 1 : AP];
    (void)areg;

    /* the weight tile kt into stage st (cp.async), or into areg */
    auto load_a = [&](int kt, int st) {
        if constexpr (AV) {
            const uint32_t base = smem_addr(sa[st]);
#pragma unroll
            for (int i = 0; i < AP; i++) {
                int r, ch;
                td_conv_a_chunk(tid, i, &r, &ch);
                const int kc = kt * BK + ch * 8;
                const bool in = m0 + r < s.cog && kc < s.K;
                const uint16_t *src = in ? wg + (int64_t)(m0 + r) * s.K + kc : w;
                cp_async16(base + 2u * (uint32_t)td_conv_swz_a(r, ch * 8), src, in ? 16 : 0);
            }
        } else {
#pragma unroll
            for (int i = 0; i < AP; i++) {
                int r, c;
                td_conv_a_pair(tid, i, &r, &c);
                const int kc = kt * BK + c;
                const uint16_t *row = wg + (int64_t)(m0 + r) * s.K;
                const bool rin = m0 + r < s.cog;
                const uint32_t lo = rin && kc < s.K ? row[kc] : 0u;
                const uint32_t hi = rin && kc + 1 < s.K ? row[kc + 1] : 0u;
                areg[i] = lo | hi << 16;
            }
        }
    };
    auto store_a = [&](int st) {
        if constexpr (!AV) {
#pragma unroll
            for (int i = 0; i < AP; i++) {
                int r, c;
                td_conv_a_pair(tid, i, &r, &c);
                *reinterpret_cast<uint32_t *>(&sa[st][td_conv_swz_a(r, c)]) = areg[i];
            }
        }
    };
    /* the input tile kt into breg */
    auto load_b = [&](int kt) {
#pragma unroll
        for (int i = 0; i < BP; i++) {
            const td_conv_kent ke = kent_ld(ktab, kt * BK + bk0 + i * bkstep);
            const uint32_t lo = td_conv_inside(&s, col0, ke) ? x[td_conv_gather_off(col0, ke)] : 0u;
            const uint32_t hi = td_conv_inside(&s, col1, ke) ? x[td_conv_gather_off(col1, ke)] : 0u;
            breg[i] = lo | hi << 16;
        }
    };
    auto store_b = [&](int st) {
#pragma unroll
        for (int i = 0; i < BP; i++)
            *reinterpret_cast<uint32_t *>(&sb[st][td_conv_swz_b(bk0 + i * bkstep, bcol, BN)]) =
                breg[i];
    };

    float acc[MT][NT][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++) acc[mt][nt][0] = acc[mt][nt][1] = acc[mt][nt][2] = acc[mt][nt][3] = 0.0f;

    load_a(0, 0);
    cp_commit();
    load_b(0);
    store_a(0);
    store_b(0);
    cp_wait<0>();
    __syncthreads();

    for (int kt = 0; kt < s.nk; kt++) {
        const int cur = kt & 1;
        const bool next = kt + 1 < s.nk;
        if (next) {
            load_a(kt + 1, cur ^ 1);
            cp_commit();
            load_b(kt + 1);
        }
        const uint32_t ab = smem_addr(sa[cur]), bb = smem_addr(sb[cur]);
#pragma unroll
        for (int kk = 0; kk < BK / 16; kk++) {
            uint32_t af[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                int r, c;
                td_attn_q_rc(lane, wr0 + mt * 16, kk, &r, &c);
                ldsm_x4(ab + 2u * (uint32_t)td_conv_swz_a(r, c), af[mt][0], af[mt][1], af[mt][2],
                        af[mt][3]);
            }
#pragma unroll
            for (int np = 0; np < NT / 2; np++) {
                uint32_t b0, b1, b2, b3;
                int r, c;
                td_attn_v_rc(lane, kk, np, &r, &c);
                ldsm_x4_t(bb + 2u * (uint32_t)td_conv_swz_b(r, wc0 + c, BN), b0, b1, b2, b3);
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    mma16816<BF>(acc[mt][2 * np], af[mt], b0, b1);
                    mma16816<BF>(acc[mt][2 * np + 1], af[mt], b2, b3);
                }
            }
        }
        if (next) {
            store_a(cur ^ 1);
            store_b(cur ^ 1);
            cp_wait<0>();
        }
        __syncthreads(); /* the next tile is in place; this one may be overwritten */
    }

    /* + bias, rounded once */
    const int gq = lane >> 2, t = lane & 3;
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int m = m0 + wr0 + mt * 16 + gq + 8 * h;
            if (m >= s.cog) continue;
            const float b = bias != NULL ? widen16<BF>(bias[g * s.cog + m]) : 0.0f;
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int j = n0 + wc0 + nt * 8 + 2 * t + e;
                    if (j < s.N) y[td_conv_out_off(&s, g, m, j)] = round16<BF>(acc[mt][nt][2 * h + e] + b);
                }
        }
}


/* ---- the channels-last path (gpu_conv_layout.h): both operands by 16-byte cp.async, in a
 * TD_CONV_STAGES(BM, BN)-deep pipeline; optionally one split of K (S > 1: an f32 partial) ---- */

/* One 64 x 64 tile of the per-image [C][L] -> [L][C] transpose of x (NCHW -> NHWC) through
 * shared memory t; a block of 256 threads as (32, 8): tx = tid % 32, ty = tid / 32. W2 (L
 * even, x 4-byte aligned): each thread moves element pairs (a warp reads and writes 128
 * contiguous bytes); else single elements. C is a multiple of 8 here. */
TD_DEV void transpose_tile(const uint16_t *__restrict__ x, uint16_t *__restrict__ xt,
                           int32_t C, int32_t L, int64_t img, int32_t p0, int32_t c0, bool w2,
                           uint16_t (*t)[66])
{
    const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
    for (int i = ty; i < 64; i += 8) {
        const int32_t c = c0 + i;
        if (c >= C) break;
        if (w2) {
            const int32_t p = p0 + 2 * tx;
            if (p < L)
                *reinterpret_cast<uint32_t *>(&t[i][2 * tx]) =
                    *reinterpret_cast<const uint32_t *>(&x[(img * C + c) * L + p]);
        } else {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int32_t p = p0 + tx + 32 * e;
                if (p < L) t[i][tx + 32 * e] = x[(img * C + c) * L + p];
            }
        }
    }
    __syncthreads();
    for (int i = ty; i < 64; i += 8) {
        const int32_t p = p0 + i;
        if (p >= L) break;
        const int32_t c = c0 + 2 * tx; /* C even: c + 1 < C too */
        if (c < C)
            *reinterpret_cast<uint32_t *>(&xt[(img * L + p) * C + c]) =
                (uint32_t)t[2 * tx][i] | (uint32_t)t[2 * tx + 1][i] << 16;
    }
}

/* x's transpose tiles: 64 positions x 64 channels, image-major */
TD_CONV_FN int64_t xt_tiles(const td_conv_shape &s)
{
    return (int64_t)((s.L + 63) / 64) * ((s.c + 63) / 64) * s.n;
}

/* Everything the channels-last kernel reads, in one launch of 256-thread blocks: blocks
 * [0, xt_tiles) transpose x to NHWC (xt, 64 x 64 tiles), the next nwb gather the weight into
 * [C_out][kvol][C/G] (wt; a thread 8 channels of one (row, kernel position): 8 loads, one
 * 16-byte store; the kernel position runs fastest, so a warp reads whole runs of the
 * NCHW rows: 2.5x faster than a tile transpose where kvol is 9, which uses 9 of a tile's
 * 64 columns), the rest fill the per-chunk table (256 entries a block). */
__global__ void __launch_bounds__(256)
    k_conv_prep_nhwc(const uint16_t *__restrict__ x, uint16_t *__restrict__ xt,
                     const uint16_t *__restrict__ w, uint16_t *__restrict__ wt,
                     td_conv_kent *__restrict__ tab, td_conv_shape s, int64_t nwb, bool x2)
{
    __shared__ __align__(4) uint16_t t[64][66];
    int64_t b = blockIdx.x;
    const int64_t nxb = xt_tiles(s);
    if (b < nxb) {
        const int32_t pt = (s.L + 63) / 64;
        const int64_t per_img = (int64_t)pt * ((s.c + 63) / 64);
        const int32_t r = (int32_t)(b % per_img);
        transpose_tile(x, xt, s.c, s.L, b / per_img, (r % pt) * 64, (r / pt) * 64, x2, t);
        return;
    }
    b -= nxb;
    if (b < nwb) {
        const int64_t q = b * 256 + threadIdx.x, per_o = (int64_t)s.kvol * (s.cg / 8);
        if (q >= (int64_t)s.co * per_o) return;
        const int64_t o = q / per_o;
        const int32_t rem = (int32_t)(q % per_o);
        const int32_t c0 = (rem / s.kvol) * 8, kp = rem % s.kvol;
        const uint16_t *src = w + (o * s.cg + c0) * s.kvol + kp;
        uint32_t v[4];
#pragma unroll
        for (int j = 0; j < 4; j++)
            v[j] = (uint32_t)src[(2 * j) * s.kvol] | (uint32_t)src[(2 * j + 1) * s.kvol] << 16;
        *reinterpret_cast<uint4 *>(&wt[(o * s.kvol + kp) * s.cg + c0]) =
            make_uint4(v[0], v[1], v[2], v[3]);
        return;
    }
    const int64_t i = (b - nwb) * 256 + threadIdx.x;
    if (i < (int64_t)s.nk * (TD_CONV_BK / 8)) tab[i] = td_conv_kentry_nhwc(&s, (int32_t)i);
}

/* The f32 tile a block of a cluster-reduced split leaves in its shared memory: BM rows of
 * BN + 8 floats (the pad makes a warp's float2 stores of the mma layout conflict-free);
 * reused from the pipeline's stages, so only tiles whose stages hold it take that way. */
__host__ __device__ constexpr int cl_ld(int bn) { return bn + 8; }
__host__ __device__ constexpr bool cl_fits(int bm, int bn)
{
    return (size_t)bm * (size_t)cl_ld(bn) * 4u <=
           (size_t)TD_CONV_STAGES(bm, bn) * (size_t)(bm + bn) * TD_CONV_BK * 2u;
}

/* CL (S > 1 only): the S blocks of one output tile (blockIdx.z g S .. g S + S - 1) are one
 * thread-block cluster (Hopper; launched with cluster dims (1, 1, S)): each leaves its f32
 * partial tile in its shared memory, and after a cluster barrier block rank r sums every
 * r-th 256-element run of the tile over the S blocks' tiles in ascending split (read
 * through distributed shared memory), + bias, rounded once: the same additions in the same
 * order as k_conv_reduce, so the same bits, without the f32 partials' round trip through
 * global memory or a second launch. */
template <bool BF, int BM, int BN, int WM, int MINB, bool CL>
__global__ void __launch_bounds__(TD_CONV_THREADS, MINB)
    k_conv_nhwc(const uint16_t *__restrict__ xt, const uint16_t *__restrict__ wt,
                const uint16_t *__restrict__ bias, uint16_t *__restrict__ y,
                float *__restrict__ part, const td_conv_kent *__restrict__ ktab,
                td_conv_shape s, int S)
{
    constexpr int BK = TD_CONV_BK, ST = TD_CONV_STAGES(BM, BN);
    constexpr int WN = 8 / WM, WTM = BM / WM, WTN = BN / WN;
    constexpr int MT = WTM / 16, NT = WTN / 8;
    constexpr int AP = BM / 64, BP = BN / 64; /* 16-byte chunks per thread */
    constexpr int SA = BM * BK, SB = BN * BK;  /* elements of a stage's A and B */
    static_assert(NT % 2 == 0 && MT >= 1 && AP >= 1 && BP >= 1, "tile");
    static_assert(!CL || cl_fits(BM, BN), "the cluster-reduced f32 tile fits the stages");
    __shared__ __align__(128) uint16_t smem[ST * (SA + SB)];
    uint16_t *const sa = smem, *const sb = smem + ST * SA;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = (int)blockIdx.z / S, sp = (int)blockIdx.z % S;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    int kt0, kt1;
    td_conv_split_range(&s, S, sp, &kt0, &kt1);
    const uint16_t *wg = wt + (int64_t)g * s.cog * s.K;
    int wr0, wc0;
    td_conv_warp(warp, BM, BN, WM, &wr0, &wc0);

    td_conv_col bcol[BP];
    int bch[BP], bdst[BP];
#pragma unroll
    for (int i = 0; i < BP; i++) {
        int r, ch;
        td_conv_a_chunk(tid, i, &r, &ch);
        bcol[i] = td_conv_column_nhwc(&s, g, n0 + r);
        bch[i] = ch;
        bdst[i] = td_conv_swz_a(r, ch * 8);
    }

    auto load = [&](int kt, int st) {
        const uint32_t ab = smem_addr(sa + st * SA), bb = smem_addr(sb + st * SB);
#pragma unroll
        for (int i = 0; i < AP; i++) {
            int r, ch;
            td_conv_a_chunk(tid, i, &r, &ch);
            const int kc = kt * BK + ch * 8;
            const bool in = m0 + r < s.cog && kc < s.K;
            const uint16_t *src = in ? wg + (int64_t)(m0 + r) * s.K + kc : wt;
            cp_async16(ab + 2u * (uint32_t)td_conv_swz_a(r, ch * 8), src, in ? 16 : 0);
        }
#pragma unroll
        for (int i = 0; i < BP; i++) {
            const td_conv_kent ke = kent_ld(ktab, kt * (BK / 8) + bch[i]);
            const bool in = td_conv_inside(&s, bcol[i], ke);
            const uint16_t *src = in ? xt + td_conv_gather_off(bcol[i], ke) : xt;
            cp_async16(bb + 2u * (uint32_t)bdst[i], src, in ? 16 : 0);
        }
    };

    float acc[MT][NT][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
            acc[mt][nt][0] = acc[mt][nt][1] = acc[mt][nt][2] = acc[mt][nt][3] = 0.0f;

    stage_pipeline<ST>(kt0, kt1, load, [&](int cur) {
        const uint32_t ab = smem_addr(sa + cur * SA), bb = smem_addr(sb + cur * SB);
#pragma unroll
        for (int kk = 0; kk < BK / 16; kk++) {
            uint32_t af[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                int r, c;
                td_attn_q_rc(lane, wr0 + mt * 16, kk, &r, &c);
                ldsm_x4(ab + 2u * (uint32_t)td_conv_swz_a(r, c), af[mt][0], af[mt][1], af[mt][2],
                        af[mt][3]);
            }
#pragma unroll
            for (int np = 0; np < NT / 2; np++) {
                uint32_t b0, b1, b2, b3;
                int r, c;
                td_attn_k_rc(lane, np, kk, &r, &c);
                ldsm_x4(bb + 2u * (uint32_t)td_conv_swz_a(wc0 + r, c), b0, b1, b2, b3);
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    mma16816<BF>(acc[mt][2 * np], af[mt], b0, b1);
                    mma16816<BF>(acc[mt][2 * np + 1], af[mt], b2, b3);
                }
            }
        }
    });

    const int gq = lane >> 2, t = lane & 3;
    if constexpr (CL) {
        constexpr int LD = cl_ld(BN);
        float *const tile = reinterpret_cast<float *>(smem);
        __syncthreads(); /* every warp is done with the stages */
        if (tid == 0) tile[BN] = (float)sp; /* the split number, in row 0's pad */
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int h = 0; h < 2; h++)
#pragma unroll
                for (int nt = 0; nt < NT; nt++)
                    *reinterpret_cast<float2 *>(
                        &tile[(wr0 + mt * 16 + gq + 8 * h) * LD + wc0 + nt * 8 + 2 * t]) =
                        make_float2(acc[mt][nt][2 * h], acc[mt][nt][2 * h + 1]);
        cg::cluster_group cl = cg::this_cluster();
        cl.sync(); /* every block's tile (and split number) is in place */
        const float *src[TD_CONV_SPLIT_MAX];
        for (int r = 0; r < S; r++) { /* the tiles by split, whatever the ranks' order */
            const float *peer = cl.map_shared_rank(tile, (unsigned)r);
            src[(int)peer[BN]] = peer;
        }
        for (int e = (int)cl.block_rank() * TD_CONV_THREADS + tid; e < BM * BN;
             e += S * TD_CONV_THREADS) {
            const int row = e / BN, c = e % BN, m = m0 + row, j = n0 + c;
            if (m >= s.cog || j >= s.N) continue;
            float a = 0.0f;
            for (int q = 0; q < S; q++) a += src[q][row * LD + c];
            if (bias != NULL) a += widen16<BF>(bias[g * s.cog + m]);
            y[td_conv_out_off(&s, g, m, j)] = round16<BF>(a);
        }
        cl.sync(); /* no block leaves while another still reads its tile */
        return;
    }
    /* + bias, rounded once (S 1), or the f32 partial; a lane's two adjacent columns j, j + 1
     * (j even) as one store when they are adjacent and aligned there: P even (one image,
     * output offset even; y 4-byte aligned) or N even (the partials) */
    const bool y4 = ((uintptr_t)y & 3u) == 0; /* a view may start at an odd element */
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int m = m0 + wr0 + mt * 16 + gq + 8 * h;
            if (m >= s.cog) continue;
            const float b = S == 1 && bias != NULL ? widen16<BF>(bias[g * s.cog + m]) : 0.0f;
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                const int j = n0 + wc0 + nt * 8 + 2 * t;
                const float v0 = acc[mt][nt][2 * h], v1 = acc[mt][nt][2 * h + 1];
                if (j >= s.N) continue;
                if (S == 1) {
                    const int32_t o = td_conv_out_off(&s, g, m, j);
                    const uint32_t lo = round16<BF>(v0 + b);
                    if ((s.P & 1) == 0 && j + 1 < s.N && y4) {
                        *reinterpret_cast<uint32_t *>(&y[o]) = lo | (uint32_t)round16<BF>(v1 + b) << 16;
                    } else {
                        y[o] = (uint16_t)lo;
                        if (j + 1 < s.N) y[td_conv_out_off(&s, g, m, j + 1)] = round16<BF>(v1 + b);
                    }
                } else {
                    const int64_t o = td_conv_part_off(&s, sp, g, m, j);
                    if ((s.N & 1) == 0 && j + 1 < s.N) {
                        *reinterpret_cast<float2 *>(&part[o]) = make_float2(v0, v1);
                    } else {
                        part[o] = v0;
                        if (j + 1 < s.N) part[o + 1] = v1;
                    }
                }
            }
        }
}

struct tile_cfg {
    int bm, bn;
    bool cl;    /* cl_fits: a split of this tile may be summed inside a cluster */
    int per_sm; /* blocks an SM (the launch bounds' minimum) */
};
/* [4]: the 128 x 64 tile at 3 blocks an SM (channels-last only: split grids, variant 9) */
const tile_cfg CFG[5] = {{128, 128, cl_fits(128, 128), 1}, {64, 128, cl_fits(64, 128), 2},
                         {128, 64, cl_fits(128, 64), 2},   {64, 64, cl_fits(64, 64), 2},
                         {128, 64, cl_fits(128, 64), 3}};

template <bool BF, int BM, int BN, int WM, int MINB>
td_status launch(const td__gpu_exec *x, const td__view *in, const td__view *out,
                 const td_conv_shape &s, const td_conv_kent *tab, bool av)
{
    const dim3 grid((unsigned)((s.N + BN - 1) / BN), (unsigned)((s.cog + BM - 1) / BM),
                    (unsigned)s.groups);
    const uint16_t *xp = (const uint16_t *)in[0].data, *wp = (const uint16_t *)in[1].data;
    const uint16_t *bp = (const uint16_t *)in[2].data; /* NULL: no bias */
    uint16_t *yp = (uint16_t *)out->data;
    if (av)
        k_conv_mma<BF, BM, BN, WM, true, MINB>
            <<<grid, TD_CONV_THREADS, 0, x->st->s>>>(xp, wp, bp, yp, tab, s);
    else
        k_conv_mma<BF, BM, BN, WM, false, MINB>
            <<<grid, TD_CONV_THREADS, 0, x->st->s>>>(xp, wp, bp, yp, tab, s);
    return td__gpu_launched(x, "conv implicit-gemm kernel");
}

template <bool BF>
td_status launch_cfg(const td__gpu_exec *x, const td__view *in, const td__view *out,
                     const td_conv_shape &s, const td_conv_kent *tab, bool av, int c)
{
    switch (c) {
    case 0: return launch<BF, 128, 128, 2, 1>(x, in, out, s, tab, av);
    case 1: return launch<BF, 64, 128, 2, 2>(x, in, out, s, tab, av);
    case 2: return launch<BF, 128, 64, 4, 2>(x, in, out, s, tab, av);
    default: return launch<BF, 64, 64, 2, 2>(x, in, out, s, tab, av);
    }
}

/* part == NULL (S > 1): the cluster-reduced kernel; TD_EUNSUPPORTED (nothing enqueued) when
 * the tile's stages cannot hold its f32 tile or the device refuses the cluster launch (the
 * caller then takes f32 partials and k_conv_reduce) */
template <bool BF, int BM, int BN, int WM, int MINB>
td_status launch_nhwc(const td__gpu_exec *x, const uint16_t *xt, const uint16_t *wt,
                      const uint16_t *bias, uint16_t *y, float *part, const td_conv_kent *tab,
                      const td_conv_shape &s, int S)
{
    const dim3 grid((unsigned)((s.N + BN - 1) / BN), (unsigned)((s.cog + BM - 1) / BM),
                    (unsigned)(s.groups * S));
    if (S > 1 && part == NULL) {
        if constexpr (!cl_fits(BM, BN)) {
            return TD_EUNSUPPORTED;
        } else {
            cudaLaunchConfig_t cfg = {};
            cudaLaunchAttribute at[1];
            at[0].id = cudaLaunchAttributeClusterDimension;
            at[0].val.clusterDim.x = 1;
            at[0].val.clusterDim.y = 1;
            at[0].val.clusterDim.z = (unsigned)S;
            cfg.gridDim = grid;
            cfg.blockDim = dim3(TD_CONV_THREADS);
            cfg.stream = x->st->s;
            cfg.attrs = at;
            cfg.numAttrs = 1;
            if (cudaLaunchKernelEx(&cfg, k_conv_nhwc<BF, BM, BN, WM, MINB, true>, xt, wt, bias,
                                   y, part, tab, s, S) != cudaSuccess) {
                (void)cudaGetLastError(); /* a refused configuration is not sticky */
                return TD_EUNSUPPORTED;
            }
            return td__gpu_launched(x, "conv implicit-gemm kernel (channels-last, cluster split)");
        }
    }
    k_conv_nhwc<BF, BM, BN, WM, MINB, false>
        <<<grid, TD_CONV_THREADS, 0, x->st->s>>>(xt, wt, bias, y, part, tab, s, S);
    return td__gpu_launched(x, "conv implicit-gemm kernel (channels-last)");
}

template <bool BF>
td_status launch_nhwc_cfg(const td__gpu_exec *x, const uint16_t *xt, const uint16_t *wt,
                          const uint16_t *bias, uint16_t *y, float *part,
                          const td_conv_kent *tab, const td_conv_shape &s, int S, int c)
{
    switch (c) {
    case 0: return launch_nhwc<BF, 128, 128, 2, 1>(x, xt, wt, bias, y, part, tab, s, S);
    case 1: return launch_nhwc<BF, 64, 128, 2, 2>(x, xt, wt, bias, y, part, tab, s, S);
    case 2: return launch_nhwc<BF, 128, 64, 4, 2>(x, xt, wt, bias, y, part, tab, s, S);
    case 4: return launch_nhwc<BF, 128, 64, 4, 3>(x, xt, wt, bias, y, part, tab, s, S);
    default: return launch_nhwc<BF, 64, 64, 2, 2>(x, xt, wt, bias, y, part, tab, s, S);
    }
}

int variant(void)
{
    const char *e = getenv("TENSORD_GPU_CONV_VARIANT");
    const int v = e != NULL ? atoi(e) : 0;
    return v >= 0 && v <= 9 ? v : 0;
}

int64_t cfg_blocks(const td_conv_shape &s, int c)
{
    return (int64_t)((s.N + CFG[c].bn - 1) / CFG[c].bn) * ((s.cog + CFG[c].bm - 1) / CFG[c].bm) *
           s.groups;
}

/* The tile of variant 0 on the element-gather path (the same bits for every tile there): in
 * order of preference, the first whose grid fills the SMs once (else the one with the most
 * blocks, the last). */
int auto_cfg(const td_conv_shape &s)
{
    int dev = 0, nsm = 132;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
        nsm = 132;
    const int order_wide[4] = {0, 2, 1, 3}, order_thin[2] = {1, 3};
    const int *order = s.cog <= 64 ? order_thin : order_wide;
    const int n = s.cog <= 64 ? 2 : 4;
    for (int i = 0; i < n; i++)
        if (cfg_blocks(s, order[i]) >= nsm) return order[i];
    return order[n - 1];
}

/* The tile of variant 0 on the channels-last path, from the shape alone (the tile decides
 * the split, and the split the bits): C_out/G <= 64: 64x128 (64x64 when that gives under
 * TD_CONV_SPLIT_BLOCKS blocks, then perhaps split); else 128x128 when it gives two H100
 * waves (264 blocks), else 128x64 (perhaps split). */
int auto_cfg_nhwc(const td_conv_shape &s)
{
    if (s.cog <= 64) return cfg_blocks(s, 1) >= TD_CONV_SPLIT_BLOCKS ? 1 : 3;
    return cfg_blocks(s, 0) >= 2 * 132 ? 0 : 2;
}

/* The channels-last path: transposes into temp memory, then the kernel (and the reduction
 * when split). TD_EUNSUPPORTED (nothing enqueued) when the transpose's grid cannot hold the
 * shape: the caller takes the element-gather kernel. */
td_status conv_nhwc(const td__gpu_exec *x, const td__op *op, const td__view *in,
                    const td__view *out, const td_conv_shape &s, int var, bool bf)
{
    /* one launch transposes x and the weight and fills the table (k_conv_prep_nhwc) */
    const int64_t nwb = ((int64_t)s.co * s.kvol * (s.cg / 8) + 255) / 256;
    const int64_t pblocks = xt_tiles(s) + nwb + ((int64_t)s.nk * (TD_CONV_BK / 8) + 255) / 256;
    if (pblocks >= ((int64_t)1 << 31) || (int64_t)s.co * s.K >= ((int64_t)1 << 31))
        return TD_EUNSUPPORTED;
    int c = var >= 1 && var <= 4 ? var - 1 : var == 9 ? 4 : auto_cfg_nhwc(s);
    /* a split 128 x 64 grid takes the same tile at 3 blocks an SM: one wave of more splits
     * (layer4 of ResNet-50 at batch 32: 3 splits, 0.073 ms against 0.079 with 2 at 2 an SM) */
    if (c == 2 && var != 3 && var != 7 && td_conv_splits_wave(&s, cfg_blocks(s, 4), 3) > 1)
        c = 4;
    int S = var == 7 ? 1 : td_conv_splits_wave(&s, cfg_blocks(s, c), CFG[c].per_sm);
    /* TENSORD_GPU_CONV_SPLIT=S (a timing aid, as TENSORD_GPU_CONV_F32_SPLIT for f32): this
     * split over K instead */
    static const int force_split = [] {
        const char *e = getenv("TENSORD_GPU_CONV_SPLIT");
        return e != NULL ? atoi(e) : 0;
    }();
    const int forced = td_conv_forced_splits(&s, force_split);
    if (forced > 0) S = forced;
    if ((int64_t)s.groups * S > 65535) S = 1;
    /* a split is summed inside a thread-block cluster unless the tile's stages cannot hold
     * its f32 tile or variant 8 asks for the f32 partials and k_conv_reduce */
    const bool clr = S > 1 && var != 8 && CFG[c].cl;
    size_t part_bytes = 0;
    if (S > 1 && __builtin_mul_overflow((size_t)S * sizeof(float), (size_t)s.co * (size_t)s.N,
                                        &part_bytes))
        return TD_EUNSUPPORTED;

    /* one temp block: table | xt | wt | partials (when not cluster-reduced) */
    const size_t ntab = (size_t)s.nk * (TD_CONV_BK / 8);
    const size_t xel = (size_t)s.n * (size_t)s.c * (size_t)s.L, wel = (size_t)s.co * (size_t)s.K;
    size_t bytes[4] = {ntab * sizeof(td_conv_kent), xel * 2, wel * 2, clr ? 0 : part_bytes};
    if (getenv("TENSORD_GPU_CONV_TRACE") != NULL)
        fprintf(stderr, "tensord " TD_GPU_KIND " conv: implicit gemm %s tile %dx%d channels-last "
                "split %d%s M %d N %d K %d groups %d\n", bf ? "bf16" : "f16", CFG[c].bm,
                CFG[c].bn, S, clr ? " (cluster)" : "", s.cog, s.N, s.K, s.groups);
    void *mem = NULL;
    char *pp[4];
    td_status st = temp_parts(x, 4, bytes, &mem, pp);
    if (st != TD_OK) return st;
    td_conv_kent *tab = (td_conv_kent *)pp[0];
    uint16_t *xt = (uint16_t *)pp[1], *wt = (uint16_t *)pp[2];
    float *part = (float *)pp[3];
    const uint16_t *xp = (const uint16_t *)in[0].data, *wp = (const uint16_t *)in[1].data;
    const uint16_t *bp = op->n_inputs == 3 ? (const uint16_t *)in[2].data : NULL;
    uint16_t *yp = (uint16_t *)out->data;
    gpuStream_t cs = x->st->s;

    k_conv_prep_nhwc<<<(unsigned)pblocks, 256, 0, cs>>>(
        xp, xt, wp, wt, tab, s, nwb, s.L % 2 == 0 && ((uintptr_t)xp & 3u) == 0);
    st = td__gpu_launched(x, "conv channels-last transposes");
    if (st == TD_OK)
        st = bf ? launch_nhwc_cfg<true>(x, xt, wt, bp, yp, part, tab, s, S, c)
                : launch_nhwc_cfg<false>(x, xt, wt, bp, yp, part, tab, s, S, c);
    void *mem2 = NULL; /* the partials when the device refused the cluster */
    if (st == TD_EUNSUPPORTED && clr) {
        st = td__gpu_temp_alloc(x, part_bytes, &mem2);
        part = (float *)mem2;
        if (st == TD_OK)
            st = bf ? launch_nhwc_cfg<true>(x, xt, wt, bp, yp, part, tab, s, S, c)
                    : launch_nhwc_cfg<false>(x, xt, wt, bp, yp, part, tab, s, S, c);
    }
    if (st == TD_OK && S > 1 && part != NULL)
        st = bf ? launch_reduce<io16<true>>(x, part, bp, yp, s, S)
                : launch_reduce<io16<false>>(x, part, bp, yp, s, S);
    if (mem2 != NULL) td__gpu_temp_free(x, mem2);
    td__gpu_temp_free(x, mem);
    return st;
}

/* f16/bf16: the channels-last path when it applies, else the element gather */
td_status conv_f16(const td__gpu_exec *x, const td__op *op, const td__view *in,
                   const td__view *out, const td_conv_shape &s, uint32_t dt)
{
    const int var = variant();
    if (var == 5) return TD_EUNSUPPORTED;
    if ((s.cog + 63) / 64 > 65535) return TD_EUNSUPPORTED; /* the grid's y */
    if (var != 6 && td_conv_nhwc_ok(&s)) {
        const td_status ns = conv_nhwc(x, op, in, out, s, var, dt == TD_BF16);
        if (ns != TD_EUNSUPPORTED) return ns;
    }
    const bool av = s.K % 8 == 0 && ((uintptr_t)in[1].data & 15u) == 0;
    const int c = var >= 1 && var <= 4 ? var - 1 : auto_cfg(s);
    if (getenv("TENSORD_GPU_CONV_TRACE") != NULL)
        fprintf(stderr, "tensord " TD_GPU_KIND " conv: implicit gemm %s tile %dx%d%s M %d N %d "
                "K %d groups %d\n", dt == TD_BF16 ? "bf16" : "f16", CFG[c].bm, CFG[c].bn,
                av ? "" : " (weights by element)", s.cog, s.N, s.K, s.groups);

    const size_t tab_bytes = (size_t)s.nk * TD_CONV_BK * sizeof(td_conv_kent);
    void *mem = NULL;
    td_status st = td__gpu_temp_alloc(x, tab_bytes, &mem);
    if (st != TD_OK) return st;
    td_conv_kent *tab = (td_conv_kent *)mem;
    const int nt = s.nk * TD_CONV_BK;
    k_conv_ktab<<<(unsigned)((nt + 255) / 256), 256, 0, x->st->s>>>(tab, s);
    st = td__gpu_launched(x, "conv table kernel");
    if (st == TD_OK) {
        td__view inb[3];
        inb[0] = in[0];
        inb[1] = in[1];
        memset(&inb[2], 0, sizeof inb[2]);
        if (op->n_inputs == 3) inb[2] = in[2];
        st = dt == TD_BF16 ? launch_cfg<true>(x, inb, out, s, tab, av, c)
                           : launch_cfg<false>(x, inb, out, s, tab, av, c);
    }
    td__gpu_temp_free(x, mem);
    return st;
}

} // namespace

#endif

#if defined(TD_GPU_STAGE)

namespace {

/* TENSORD_GPU_CONV_F32 when unset: the FFMA kernel, the tile from the shape (timed: the
 * module comment) */
#define TD_CONVF_DEFAULT 1

/* ---- the f32 kernel (gpu_conv_layout.h's f32 section): FFMA micro-tiles from k-major
 * shared tiles that a TD_CONVF_STAGES-deep cp.async pipeline fills; optionally one split of
 * K (S > 1: an f32 partial) ---- */

/* the weight transposed to [G][nk TD_CONVF_BK][cogp] (zeros past K and C_out/G), and the
 * per-k table; nwt: the transposed weight's elements */
__global__ void k_conv_prep_f32(const float *__restrict__ w, float *__restrict__ wt,
                                td_conv_kent *__restrict__ tab, td_conv_shape s, int64_t nwt)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < nwt) {
        const int64_t src = td_convf_wt_src(&s, i);
        wt[i] = src >= 0 ? w[src] : 0.0f;
    }
    if (i < (int64_t)s.nk * TD_CONVF_BK) tab[i] = td_conv_kentry(&s, (int32_t)i);
}

/* 4 floats from (16-byte aligned) shared memory; one LDS.128 on the GPU */
TD_DEV void ld4(const float *p, float *v)
{
#if defined(TD_GPU_MMA)
    const float4 t = *reinterpret_cast<const float4 *>(p);
    v[0] = t.x;
    v[1] = t.y;
    v[2] = t.z;
    v[3] = t.w;
#else
    memcpy(v, p, 16);
#endif
}
TD_DEV void st4(float *p, const float *v)
{
#if defined(TD_GPU_MMA)
    *reinterpret_cast<float4 *>(p) = make_float4(v[0], v[1], v[2], v[3]);
#else
    memcpy(p, v, 16);
#endif
}

/* A BM x BN tile, TN columns a thread (NT = 16 BN / TN threads), at least MINB blocks an
 * SM (the register cap: 64 Ki / (NT MINB)) */
template <int BM, int BN, int TN, int MINB>
__global__ void __launch_bounds__(16 * (BN / TN), MINB)
    k_conv_f32(const float *__restrict__ x, const float *__restrict__ wt,
               const float *__restrict__ bias, float *__restrict__ y, float *__restrict__ part,
               const td_conv_kent *__restrict__ ktab, td_conv_shape s, int S)
{
    constexpr int BK = TD_CONVF_BK, TM = BM / 16, NTX = BN / TN, NT = 16 * NTX;
    constexpr int ST = TD_CONVF_STAGES(BM, BN);
    constexpr int AP = BK * BM / (4 * NT), BP = BK * BN / NT;
    static_assert((TM == 4 || TM == 8) && (TN == 4 || TN == 8) && (NTX == 8 || NTX == 16) &&
                      NT % BN == 0 && AP >= 1 && AP * 4 * NT == BK * BM && BP * NT == BK * BN,
                  "tile");
    alignas(16) __shared__ float sa[ST][BK * BM];
    alignas(16) __shared__ float sb[ST][BK * BN];

    const int tid = threadIdx.x;
    const int g = (int)blockIdx.z / S, sp = (int)blockIdx.z % S;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    int kt0, kt1;
    td_conv_split_range(&s, S, sp, &kt0, &kt1);
    const int32_t cogp = td_convf_cogp(&s);
    const float *wg = wt + (int64_t)g * s.nk * BK * cogp; /* the group's [nk BK][cogp] */
    int bk0, bcol;
    td_convf_b_elem(tid, 0, NT, BN, &bk0, &bcol);
    const td_conv_col col = td_conv_column(&s, g, n0 + bcol);
    int ty, tx;
    td_convf_thread(tid, NTX, &ty, &tx);

    auto load = [&](int kt, int st) {
#pragma unroll
        for (int i = 0; i < AP; i++) {
            int k, m;
            td_convf_a_chunk(tid, i, NT, BM, &k, &m);
            const bool in = m0 + m < cogp;
            stage16(&sa[st][k * BM + m], in ? wg + (int64_t)(kt * BK + k) * cogp + m0 + m : wt,
                    in);
        }
#pragma unroll
        for (int i = 0; i < BP; i++) {
            int k, c;
            td_convf_b_elem(tid, i, NT, BN, &k, &c);
            const td_conv_kent ke = kent_ld(ktab, kt * BK + k);
            const bool in = td_conv_inside(&s, col, ke);
            stage4(&sb[st][k * BN + c], in ? x + td_conv_gather_off(col, ke) : x, in);
        }
    };

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; i++)
#pragma unroll
        for (int e = 0; e < TN; e++) acc[i][e] = 0.0f;

    stage_pipeline<ST>(kt0, kt1, load, [&](int cur) {
        const float *ac = sa[cur], *bc = sb[cur];
#pragma unroll
        for (int k = 0; k < BK; k++) {
            float a[TM], b[TN];
#pragma unroll
            for (int q = 0; q < TM / 4; q++) ld4(ac + k * BM + td_convf_row(ty, 4 * q), a + 4 * q);
#pragma unroll
            for (int q = 0; q < TN / 4; q++)
                ld4(bc + k * BN + td_convf_col(tx, NTX, 4 * q), b + 4 * q);
#pragma unroll
            for (int r = 0; r < TM; r++)
#pragma unroll
                for (int e = 0; e < TN; e++) acc[r][e] = fmaf(a[r], b[e], acc[r][e]);
        }
    });

    /* + bias (S 1) or the f32 partial; a run of 4 columns as one 16-byte store when they are
     * adjacent and aligned there: P % 4 == 0 (one image; y 16-byte aligned) or N % 4 == 0
     * (the partials, 256-byte aligned temp memory) */
    const bool v4 = S == 1 ? s.P % 4 == 0 && ((uintptr_t)y & 15u) == 0 : s.N % 4 == 0;
#pragma unroll
    for (int q = 0; q < TN / 4; q++) {
        const int j = n0 + td_convf_col(tx, NTX, 4 * q); /* a multiple of 4 */
        if (j >= s.N) continue;
#pragma unroll
        for (int r = 0; r < TM; r++) {
            const int m = m0 + td_convf_row(ty, r);
            if (m >= s.cog) continue;
            const float b = S == 1 && bias != NULL ? bias[g * s.cog + m] : 0.0f;
            float v[4];
#pragma unroll
            for (int e = 0; e < 4; e++) v[e] = acc[r][4 * q + e] + b;
            float *dst = S == 1 ? y + td_conv_out_off(&s, g, m, j)
                                : part + td_conv_part_off(&s, sp, g, m, j);
            if (v4 && j + 3 < s.N) {
                st4(dst, v);
                continue;
            }
#pragma unroll
            for (int e = 0; e < 4; e++) {
                if (j + e >= s.N) break;
                if (S == 1) y[td_conv_out_off(&s, g, m, j + e)] = v[e];
                else part[td_conv_part_off(&s, sp, g, m, j + e)] = v[e];
            }
        }
    }
}

/* TENSORD_GPU_CONV_F32, read once: 0 takes f32 CONV to im2col + cuBLAS; 1 to k_conv_f32,
 * the tile from the shape; 2 to 5 (timing aids) to k_conv_f32 with one tile (f32_tile) */
int f32_mode(void)
{
    static const int mode = [] {
        const char *e = getenv("TENSORD_GPU_CONV_F32");
        const int v = e != NULL ? atoi(e) : TD_CONVF_DEFAULT;
        return v >= 0 && v <= 5 ? v : TD_CONVF_DEFAULT;
    }();
    return mode;
}

/* One f32 tile: BM x BN, TN columns a thread (16 BN / TN threads). */
struct f32_tile {
    int bm, bn, tn;
};

/* The tile of mode 1 to 5, from the shape alone (never from the device: the split, and so
 * the bits, follow from it). Mode 1 (auto): 64 x 128 when C_out/G <= 64, 128 x 64 (mode 4's
 * tile) when C_out/G <= 128, else 128 x 128. Measured on the H200 (BENCHMARKS.md,
 * 2026-12-07 04:23 UTC), ResNet-50 layer2 at batch 32: 0.201 ms with mode 4's tile against
 * 0.249-0.253 with 128 x 128 (cuDNN 0.143-0.145); mode 4 was slower where C_out/G <= 64
 * (conv1 0.45 against 0.29 ms, layer1 0.38 against 0.24) and the same at C_out 512.
 * 2: 128 x 128, 3: 64 x 128 (256 threads, 8 x 8 / 4 x 8 a thread, 2 blocks an SM, the
 * register cap 128 / 96 a thread as ptxas fills it). 4 and 5, 128 x 64 at 3 blocks an SM:
 * for grids of about 1.5 blocks of 128 x 128 an SM, where 2 of those blocks resident leave
 * the SMs unevenly loaded. ResNet-50's layer2 at batch 32 (M 128, N 25088) is 196 blocks
 * of 128 x 128 on an H100's 132 SMs x 2 slots: 64 SMs run two tiles and 68 one, the
 * busiest carry 2 tiles against 1.48 on average (74 % of the SMs' time used); 128 x 64 is
 * 392 blocks on 132 x 3 = 396 slots, one wave: the busiest SMs carry 3 half tiles = 1.5
 * tiles (99 %). 4: 128 threads of 8 x 8 (the same inner loop and gather per FFMA as
 * 128 x 128; 12 warps an SM); 5: 256 threads of 8 x 4 (24 warps an SM to hide the
 * gather's latency, 3 float4 loads a k for 32 FFMA instead of 4 for 64). 64 x 128 halves
 * the tile the other way but doubles the gather per FFMA (its 392 blocks ran layer2
 * 25 % slower than 128 x 128: BENCHMARKS.md, 2026-12-06 11:35 UTC). */
f32_tile f32_pick(const td_conv_shape &s, int mode)
{
    switch (mode) {
    case 2: return {128, 128, 8};
    case 3: return {64, 128, 8};
    case 4: return {128, 64, 8};
    case 5: return {128, 64, 4};
    default:
        return s.cog <= 64 ? f32_tile{64, 128, 8}
               : s.cog <= 128 ? f32_tile{128, 64, 8}
                              : f32_tile{128, 128, 8};
    }
}

template <int BM, int BN, int TN, int MINB>
td_status launch_f32(const td__gpu_exec *x, const float *xp, const float *wt, const float *bp,
                     float *yp, float *part, const td_conv_kent *tab, const td_conv_shape &s,
                     int S)
{
    const dim3 grid((unsigned)((s.N + BN - 1) / BN), (unsigned)((s.cog + BM - 1) / BM),
                    (unsigned)(s.groups * S));
    k_conv_f32<BM, BN, TN, MINB><<<grid, 16 * (BN / TN), 0, x->st->s>>>(xp, wt, bp, yp, part,
                                                                       tab, s, S);
    return td__gpu_launched(x, "conv implicit-gemm kernel (f32)");
}

/* The f32 kernel: the transposed weight and the table into temp memory, the kernel, and
 * the reduction when split. The tile from the shape alone (f32_pick), and so the split
 * (td_conv_splits over TD_CONVF_BK tiles; without a split the bits do not depend on the
 * tile). TD_EUNSUPPORTED (nothing enqueued) when the grid cannot hold the shape. */
td_status conv_f32(const td__gpu_exec *x, const td__op *op, const td__view *in,
                   const td__view *out, const td_conv_shape &s0, int mode)
{
    const td_conv_shape s = td_convf_shape(&s0);
    const f32_tile t = f32_pick(s, mode);
    const int64_t mtiles = (s.cog + t.bm - 1) / t.bm;
    if (mtiles > 65535) return TD_EUNSUPPORTED;
    const int64_t blocks = (int64_t)((s.N + t.bn - 1) / t.bn) * mtiles * s.groups;
    int S = td_conv_splits(&s, blocks);
    /* TENSORD_GPU_CONV_F32_SPLIT=S (a timing aid): this split over K instead (1..8, at
     * most one per K tile, none empty) */
    static const int force_split = [] {
        const char *e = getenv("TENSORD_GPU_CONV_F32_SPLIT");
        return e != NULL ? atoi(e) : 0;
    }();
    const int forced = td_conv_forced_splits(&s, force_split);
    if (forced > 0) S = forced;
    if ((int64_t)s.groups * S > 65535) S = 1;
    if (getenv("TENSORD_GPU_CONV_TRACE") != NULL)
        fprintf(stderr, "tensord " TD_GPU_KIND " conv: implicit gemm f32 tile %dx%d (%d threads) "
                "split %d M %d N %d K %d groups %d\n", t.bm, t.bn, 16 * (t.bn / t.tn), S,
                s.cog, s.N, s.K, s.groups);

    /* one temp block: table | transposed weight | partials */
    const size_t ntab = (size_t)s.nk * TD_CONVF_BK;
    size_t nwt = 0, bytes[3] = {ntab * sizeof(td_conv_kent), 0, 0};
    if (__builtin_mul_overflow((size_t)s.groups * ntab, (size_t)td_convf_cogp(&s), &nwt) ||
        __builtin_mul_overflow(nwt, sizeof(float), &bytes[1]) || nwt >= ((size_t)1 << 38) ||
        (S > 1 && __builtin_mul_overflow((size_t)S * sizeof(float),
                                         (size_t)s.co * (size_t)s.N, &bytes[2])))
        return TD_EUNSUPPORTED;
    void *mem = NULL;
    char *pp[3];
    td_status st = temp_parts(x, 3, bytes, &mem, pp);
    if (st != TD_OK) return st;
    td_conv_kent *tab = (td_conv_kent *)pp[0];
    float *wt = (float *)pp[1], *part = (float *)pp[2];
    const float *xp = (const float *)in[0].data, *wp = (const float *)in[1].data;
    const float *bp = op->n_inputs == 3 ? (const float *)in[2].data : NULL;
    float *yp = (float *)out->data;

    const size_t np = nwt > ntab ? nwt : ntab;
    k_conv_prep_f32<<<(unsigned)((np + 255) / 256), 256, 0, x->st->s>>>(wp, wt, tab, s,
                                                                          (int64_t)nwt);
    st = td__gpu_launched(x, "conv f32 weight");
    if (st == TD_OK) {
        if (t.bm == 64) st = launch_f32<64, 128, 8, 2>(x, xp, wt, bp, yp, part, tab, s, S);
        else if (t.bn == 128) st = launch_f32<128, 128, 8, 2>(x, xp, wt, bp, yp, part, tab, s, S);
        else if (t.tn == 8) st = launch_f32<128, 64, 8, 3>(x, xp, wt, bp, yp, part, tab, s, S);
        else st = launch_f32<128, 64, 4, 3>(x, xp, wt, bp, yp, part, tab, s, S);
    }
    if (st == TD_OK && S > 1) st = launch_reduce<io_f32>(x, part, bp, yp, s, S);
    td__gpu_temp_free(x, mem);
    return st;
}

} // namespace

#endif

extern "C" td_status td__gpu_conv_mma(const td__gpu_exec *x, const td__op *op,
                                      const td__view *in, const td__view *out,
                                      const td__window *w)
{
#if defined(TD_GPU_STAGE)
    const uint32_t dt = in[0].desc.dtype;
    const int f32 = dt == TD_F32 ? f32_mode() : 0;
    if (f32 == 0 && dt != TD_F16 && dt != TD_BF16) return TD_EUNSUPPORTED;
    td_conv_shape s;
    if (!td_conv_shape_init(&s, w->n, w->c, w->co, w->groups, w->in, w->out, w->k, w->stride,
                            w->pad_lo, w->dil))
        return TD_EUNSUPPORTED;
    /* f32 pointwise without bias: the im2col path's shortcut (one batched GEMM on x and w) */
    if (dt == TD_F32)
        return op->n_inputs == 2 && td_conv_pointwise(&s) ? TD_EUNSUPPORTED
                                                          : conv_f32(x, op, in, out, s, f32);
#if defined(TD_GPU_MMA)
    return conv_f16(x, op, in, out, s, dt);
#else
    return TD_EUNSUPPORTED; /* the CPU emulation: f16/bf16 take im2col + GEMM */
#endif
#else /* HIP: im2col + GEMM */
    (void)x;
    (void)op;
    (void)in;
    (void)out;
    (void)w;
    return TD_EUNSUPPORTED;
#endif
}

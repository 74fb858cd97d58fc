/* gpu_conv.cu — CONV (the forward op, 1d/2d/3d, any stride, padding, dilation and groups) in
 * f16 and bf16 as an implicit GEMM on NVIDIA tensor cores: no column buffer.
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
 * 128; a warp BM/WM x BN/(8/WM)) over K in steps of 32: the weight tile by cp.async
 * (16-byte chunks; element by element when K is not a multiple of 8) and the input tile by
 * a gather through registers, both into a second shared buffer while the tensor cores
 * (ldmatrix, mma.sync m16n8k16, f32 accumulation; gpu_mma.cuh) work on the first. At the end
 * the accumulator plus the bias (in f32) is rounded to the dtype once.
 *
 * Determinism and accuracy: each output element is one f32 sum over k in ascending tiles
 * of 32, each the two k16 steps of the mma in order: the order depends on K alone, not on
 * the tile shape, the variant, the grid or timing (no atomics, no split over K). Bias is
 * added after the products (the im2col GEMM summed it as one more product): both are the
 * f32-accumulate-once of TD_ACC_CONV's bound (tests/unit/backends/conformance.c).
 *
 * TENSORD_GPU_CONV_VARIANT (a development aid for timing; every variant gives the same bits):
 * 0 (default): the largest tile that still gives a wave of blocks (C_out/G <= 64 tries
 * 64-row tiles first); 1: 128x128; 2: 64x128; 3: 128x64; 4: 64x64; 5: the im2col + GEMM path.
 * TENSORD_GPU_CONV_TRACE=1 prints a line to stderr per launch (tile, M, N, K): a check that
 * this kernel ran.
 *
 * Built only by nvcc for CUDA (sm_80 instructions; the module targets sm_90): under hipcc
 * (TD_GPU_HIP) and the CPU emulation (TD_GPU_EMU) td__gpu_conv_mma says TD_EUNSUPPORTED and
 * gpu_window.cu takes im2col + GEMM. Shapes outside the kernel's 32-bit index arithmetic
 * (td_conv_shape_init) take that path too.
 */
#include "backends/gpu/gpu_ops.cuh"
#include "backends/gpu/gpu_conv_layout.h"
#include "backends/gpu/gpu_mma.cuh"
#include "engine/window.h"
#include <stdio.h>
#include <stdlib.h>

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
            /* one 16-byte load (the table is 16-byte aligned: temp memory) */
            const int4 kv = __ldg(reinterpret_cast<const int4 *>(ktab) + kt * BK + bk0 + i * bkstep);
            td_conv_kent ke;
            ke.off = kv.x;
            ke.dd = kv.y;
            ke.dh = kv.z;
            ke.dw = kv.w;
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

struct tile_cfg {
    int bm, bn;
};
const tile_cfg CFG[4] = {{128, 128}, {64, 128}, {128, 64}, {64, 64}};

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

int variant(void)
{
    const char *e = getenv("TENSORD_GPU_CONV_VARIANT");
    const int v = e != NULL ? atoi(e) : 0;
    return v >= 0 && v <= 5 ? v : 0;
}

/* The tile of variant 0: in order of preference, the first whose grid fills the SMs once
 * (else the one with the most blocks, the last). */
int auto_cfg(const td_conv_shape &s)
{
    int dev = 0, nsm = 132;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
        nsm = 132;
    const int order_wide[4] = {0, 2, 1, 3}, order_thin[2] = {1, 3};
    const int *order = s.cog <= 64 ? order_thin : order_wide;
    const int n = s.cog <= 64 ? 2 : 4;
    for (int i = 0; i < n; i++) {
        const tile_cfg &c = CFG[order[i]];
        const int64_t blocks = (int64_t)((s.N + c.bn - 1) / c.bn) * ((s.cog + c.bm - 1) / c.bm) *
                               s.groups;
        if (blocks >= nsm) return order[i];
    }
    return order[n - 1];
}

} // namespace

extern "C" td_status td__gpu_conv_mma(const td__gpu_exec *x, const td__op *op,
                                      const td__view *in, const td__view *out,
                                      const td__window *w)
{
    const uint32_t dt = in[0].desc.dtype;
    if (dt != TD_F16 && dt != TD_BF16) return TD_EUNSUPPORTED;
    const int var = variant();
    if (var == 5) return TD_EUNSUPPORTED;
    td_conv_shape s;
    if (!td_conv_shape_init(&s, w->n, w->c, w->co, w->groups, w->in, w->out, w->k, w->stride,
                            w->pad_lo, w->dil))
        return TD_EUNSUPPORTED;
    if ((s.cog + 63) / 64 > 65535) return TD_EUNSUPPORTED; /* the grid's y */
    const bool av = s.K % 8 == 0 && ((uintptr_t)in[1].data & 15u) == 0;
    const int c = var == 0 ? auto_cfg(s) : var - 1;
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

#else /* no tensor-core path: im2col + GEMM */

extern "C" td_status td__gpu_conv_mma(const td__gpu_exec *x, const td__op *op,
                                      const td__view *in, const td__view *out,
                                      const td__window *w)
{
    (void)x;
    (void)op;
    (void)in;
    (void)out;
    (void)w;
    return TD_EUNSUPPORTED;
}

#endif

/* gpu_attention.cu — SCALED_DOT_PRODUCT_ATTENTION (f16, bf16; no mask or causal; head dim
 * 64 or 128) on NVIDIA tensor cores, in one pass that never forms the [L, S] score matrix.
 *
 * Why: the lowering (permute, two matmuls, mul, softmax's steps) writes and reads the whole
 * score matrix several times; at issue 13's shape ([8, 16, 2048, 64]) that is 2 GiB of f32
 * traffic where the inputs are 6 MiB. The algorithm is FlashAttention-2's (Dao, "FlashAttention-
 * 2: Faster Attention with Better Parallelism and Work Partitioning", 2023): the online
 * softmax of Milakov & Gimelshein (2018) over tiles of keys, the running maximum and sum in
 * f32, the output accumulator rescaled when the maximum grows and divided once at the end.
 *
 * Work: a CTA of 4 warps takes BM = 64 * MT queries of one batch matrix (MT = 2 for head dim
 * 64, 1 for 128); warp w owns rows [16 MT w, 16 MT (w + 1)). Keys and values come in tiles of
 * BN = 64 rows, in ascending order, copied by cp.async into a second shared buffer while the
 * current tile is used. Per tile a warp computes S = Q K^T (mma.sync m16n8k16, f32
 * accumulation; Q's fragments stay in registers), applies the causal rule (key j > query
 * i: -inf) and the end of the keys, updates its rows' running maximum m of the raw scores
 * (the 4 lanes that share a row combine by two fixed shuffles), p = 2^(s c - m c) with
 * c = |scale| log2(e) (one fused multiply-add, then ex2.approx: a relative error near 2^-22,
 * far below f16/bf16's rounding; a negative scale flips Q's signs instead, exactly, as
 * (-q) k = -(q k)), rescales its accumulators by 2^(m_old c - m c), adds p to its lanes' partial row sums (f32, the lanes'
 * partials combined once at the end), rounds p to the input dtype and computes O += P V
 * (mma.sync, f32 accumulation; P goes from the S accumulators to the A operand in
 * registers). At the end y = O / l, rounded to the dtype once.
 *
 * Against the reference (the CPU running the lowering in f16/bf16: the scores rounded to the
 * dtype twice (matmul, times scale), the softmax's weights rounded once, the weighted sum of
 * v rounded once) the scores here are f32 (more accurate), p is rounded to the dtype as the
 * reference's weights are (each one relative u, so the output moves by at most u max|v|),
 * and the sums differ in order: all inside the op table's ATTENTION bound
 * (tests/unit/backends/conformance.c derives it). The scale is rounded to the dtype first,
 * as the lowering's FULL(scale) is, so both sides multiply by the same number.
 *
 * Determinism: every sum has an order fixed by the code and the shapes (the k loop of each
 * mma, tiles in ascending key order, fixed shuffles); no atomics, no split over keys.
 *
 * Special values: a NaN score makes its row NaN (its p is NaN; the maximum ignores it). A
 * row's first tile always holds key 0, which no rule masks, so its maximum is finite unless
 * scores are infinite (then the row is NaN, as the lowering's softmax gives).
 *
 * Built only by nvcc for CUDA (sm_80 instructions; the module targets sm_90): under hipcc
 * (TD_GPU_HIP) and the CPU emulation of tests/gpu/emu (TD_GPU_EMU) supports() says no, so
 * the engine runs the lowering there. f32 goes to gpu_attention_f32.cu (the same algorithm
 * on the CUDA cores), through supports() and exec below.
 */
#include "backends/gpu/gpu_ops.cuh"
#include "backends/gpu/gpu_attention_layout.h"
#include "engine/convert.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <type_traits>

#if !defined(TD_GPU_HIP) && !defined(TD_GPU_EMU)
#define TD_GPU_ATTN_MMA 1
#endif

#if defined(TD_GPU_ATTN_MMA)

namespace {

#define ATTN_WARPS 4
#define ATTN_THREADS (ATTN_WARPS * 32)
#define ATTN_BN 64
#define ATTN_MAX_BATCH 6 /* batch dims: TD_MAX_RANK - 2 */

/* Shape and batch walk of one launch, by value. */
struct attn_args {
    int l, s;            /* queries, keys */
    int causal;
    float scale_log2;    /* |scale| (rounded to the dtype) * log2(e), > 0 */
    uint32_t qneg;       /* 0x80008000 when scale < 0: Q's signs flipped, (-q) k = -(q k) */
    int nb;              /* output batch rank */
    int64_t bdims[ATTN_MAX_BATCH];
    int64_t bst[3][ATTN_MAX_BATCH]; /* q k v: element stride per batch dim (0: broadcast) */
};

TD_DEV uint32_t smem_addr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* 16 bytes global -> shared; `bytes` 0 writes zeros (rows past the end). */
TD_DEV void cp_async16(uint32_t dst, const void *src, int bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(bytes));
}
TD_DEV void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> TD_DEV void cp_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

TD_DEV void ldsm_x4(uint32_t addr, uint32_t &r0, uint32_t &r1, uint32_t &r2, uint32_t &r3)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}
TD_DEV void ldsm_x4_t(uint32_t addr, uint32_t &r0, uint32_t &r1, uint32_t &r2, uint32_t &r3)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}

/* d += a b for one m16n8k16 tile (PTX ISA, "Matrix Fragments for mma.m16n8k16"). */
template <bool BF> TD_DEV void mma16816(float *d, const uint32_t *a, uint32_t b0, uint32_t b1);
template <> TD_DEV void mma16816<true>(float *d, const uint32_t *a, uint32_t b0, uint32_t b1)
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <> TD_DEV void mma16816<false>(float *d, const uint32_t *a, uint32_t b0, uint32_t b1)
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Two f32 rounded to nearest even into one register: lo in bits 0-15 (the lower column). */
template <bool BF> TD_DEV uint32_t pack2(float lo, float hi);
template <> TD_DEV uint32_t pack2<true>(float lo, float hi)
{
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
template <> TD_DEV uint32_t pack2<false>(float lo, float hi)
{
    uint32_t r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

/* 2^x by the SFU (subnormal results flush to 0: far below a row's largest weight, 1). */
TD_DEV float ex2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

template <int D> TD_DEV int swz(int r, int c) { return td_attn_swz(r, c, D); }

/* Rows [r0, r0 + R) of a [n, D] matrix into a swizzled tile (zeros past row n). */
template <int D, int R>
TD_DEV void load_tile(uint16_t *tile, const uint16_t *g, int r0, int n, int tid)
{
    constexpr int CH = D / 8;
    const uint32_t base = smem_addr(tile);
#pragma unroll
    for (int i = 0; i < R * CH / ATTN_THREADS; i++) {
        int r, ch;
        td_attn_chunk(tid + i * ATTN_THREADS, D, &r, &ch);
        const bool in = r0 + r < n;
        const uint16_t *src = in ? g + (int64_t)(r0 + r) * D + ch * 8 : g;
        cp_async16(base + 2u * (uint32_t)swz<D>(r, ch * 8), src, in ? 16 : 0);
    }
}

template <bool BF, int D, int MT, bool QREG, int BN, bool FLAT>
__global__ void __launch_bounds__(ATTN_THREADS, 2)
    k_attention(const uint16_t *__restrict__ q, const uint16_t *__restrict__ k,
                const uint16_t *__restrict__ v, uint16_t *__restrict__ y, attn_args a)
{
    constexpr int BM = 16 * MT * ATTN_WARPS;
    constexpr int KT = D / 16;  /* k16 steps of Q K^T */
    constexpr int NT = BN / 8;  /* n8 tiles of S */
    constexpr int DT = D / 8;   /* n8 tiles of O */
    extern __shared__ uint4 smem_raw[];
    uint16_t *sq = reinterpret_cast<uint16_t *>(smem_raw);
    uint16_t *sk = sq + BM * D;     /* 2 buffers of BN x D */
    uint16_t *sv = sk + 2 * BN * D; /* 2 buffers of BN x D */

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const float sc2 = a.scale_log2;
    const int g = lane >> 2, t = lane & 3;
    /* causal: the longest query blocks first (they have the most key tiles) */
    const int mb = a.causal ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;
    const int m0 = mb * BM;
    int64_t bi = blockIdx.y, off[3] = {0, 0, 0};
    for (int d = a.nb - 1; d >= 0; d--) {
        const int64_t i = bi % a.bdims[d];
        bi /= a.bdims[d];
        for (int u = 0; u < 3; u++) off[u] += i * a.bst[u][d];
    }
    const uint16_t *gq = q + off[0], *gk = k + off[1], *gv = v + off[2];
    uint16_t *gy = y + (int64_t)blockIdx.y * a.l * D;

    const int kv_end = a.causal ? min(a.s, m0 + BM) : a.s;
    const int ntiles = (kv_end + BN - 1) / BN;

    load_tile<D, BM>(sq, gq, m0, a.l, tid);
    load_tile<D, BN>(sk, gk, 0, a.s, tid);
    load_tile<D, BN>(sv, gv, 0, a.s, tid);
    cp_commit();

    uint32_t qf[MT][KT][4];
    float o[MT][DT][4];
    float mrow[MT][2], lrow[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        mrow[mt][0] = mrow[mt][1] = -INFINITY;
        lrow[mt][0] = lrow[mt][1] = 0.0f;
#pragma unroll
        for (int dt = 0; dt < DT; dt++)
            o[mt][dt][0] = o[mt][dt][1] = o[mt][dt][2] = o[mt][dt][3] = 0.0f;
    }
    const int wr0 = warp * 16 * MT; /* the warp's first row in the block */

    for (int j = 0; j < ntiles; j++) {
        const int buf = j & 1;
        if (j + 1 < ntiles) {
            load_tile<D, BN>(sk + (buf ^ 1) * BN * D, gk, (j + 1) * BN, a.s, tid);
            load_tile<D, BN>(sv + (buf ^ 1) * BN * D, gv, (j + 1) * BN, a.s, tid);
            cp_commit();
            cp_wait<1>();
        } else {
            cp_wait<0>();
        }
        __syncthreads();
        const uint32_t qb = smem_addr(sq);
        if (QREG && j == 0) {
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int kk = 0; kk < KT; kk++) {
                    int r, c;
                    td_attn_q_rc(lane, wr0 + mt * 16, kk, &r, &c);
                    ldsm_x4(qb + 2u * (uint32_t)swz<D>(r, c), qf[mt][kk][0], qf[mt][kk][1],
                            qf[mt][kk][2], qf[mt][kk][3]);
#pragma unroll
                    for (int i = 0; i < 4; i++) qf[mt][kk][i] ^= a.qneg;
                }
        }
        const uint32_t kb = smem_addr(sk + buf * BN * D), vb = smem_addr(sv + buf * BN * D);
        const int kv0 = j * BN;
        /* causal: a tile wholly after the warp's last row adds nothing (every weight 0) */
        if (!a.causal || kv0 <= m0 + wr0 + 16 * MT - 1) {
            /* one tile; EDGE (the end of the keys, or the causal diagonal, crosses it) is a
             * compile-time flag so that the other tiles' code has no branch between the two
             * products and the compiler can interleave the softmax with the tensor cores */
            auto step = [&](auto edge_tag) {
                bool EDGE; /* a constant except in the !FLAT build, which passes a bool */
                if constexpr (std::is_same<decltype(edge_tag), bool>::value)
                    EDGE = edge_tag;
                else
                    EDGE = decltype(edge_tag)::value;
                /* S = Q K^T */
                float s[MT][NT][4];
#pragma unroll
                for (int mt = 0; mt < MT; mt++)
#pragma unroll
                    for (int nt = 0; nt < NT; nt++)
                        s[mt][nt][0] = s[mt][nt][1] = s[mt][nt][2] = s[mt][nt][3] = 0.0f;
#pragma unroll
                for (int kk = 0; kk < KT; kk++) {
                    uint32_t qs[MT][4]; /* !QREG: this k step's Q fragments, from shared memory */
                    if (!QREG) {
#pragma unroll
                        for (int mt = 0; mt < MT; mt++) {
                            int r, c;
                            td_attn_q_rc(lane, wr0 + mt * 16, kk, &r, &c);
                            ldsm_x4(qb + 2u * (uint32_t)swz<D>(r, c), qs[mt][0], qs[mt][1],
                                    qs[mt][2], qs[mt][3]);
#pragma unroll
                            for (int i = 0; i < 4; i++) qs[mt][i] ^= a.qneg;
                        }
                    }
#pragma unroll
                    for (int np = 0; np < NT / 2; np++) {
                        uint32_t b0, b1, b2, b3;
                        int r, c;
                        td_attn_k_rc(lane, np, kk, &r, &c);
                        ldsm_x4(kb + 2u * (uint32_t)swz<D>(r, c), b0, b1, b2, b3);
#pragma unroll
                        for (int mt = 0; mt < MT; mt++) {
                            const uint32_t *qa = QREG ? qf[mt][kk] : qs[mt];
                            mma16816<BF>(s[mt][2 * np], qa, b0, b1);
                            mma16816<BF>(s[mt][2 * np + 1], qa, b2, b3);
                        }
                    }
                }

                /* mask, online softmax; P into A fragments */
                uint32_t pa[MT][BN / 16][4];
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        const int row = m0 + wr0 + mt * 16 + g + 8 * h;
                        float mx = mrow[mt][h]; /* unscaled: c > 0 keeps the order */
                        if (EDGE) {
#pragma unroll
                            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                                for (int e = 0; e < 2; e++) {
                                    const int col = kv0 + nt * 8 + 2 * t + e;
                                    if (col >= a.s || (a.causal && col > row))
                                        s[mt][nt][2 * h + e] = -INFINITY;
                                }
                        }
#pragma unroll
                        for (int nt = 0; nt < NT; nt++)
#pragma unroll
                            for (int e = 0; e < 2; e++) mx = fmaxf(mx, s[mt][nt][2 * h + e]);
                        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                        const float mu = mx == -INFINITY ? 0.0f : mx * sc2;
                        const float alpha = ex2(mrow[mt][h] * sc2 - mu);
                        mrow[mt][h] = mx;
                        float ls = 0.0f;
#pragma unroll
                        for (int nt = 0; nt < NT; nt++)
#pragma unroll
                            for (int e = 0; e < 2; e++) {
                                const float p = ex2(__fmaf_rn(s[mt][nt][2 * h + e], sc2, -mu));
                                s[mt][nt][2 * h + e] = p;
                                ls += p;
                            }
                        lrow[mt][h] = lrow[mt][h] * alpha + ls;
                        /* !FLAT: skip the multiply by 1 once every row's maximum holds (no
                         * bit changes; a branch in the middle of the tile's code) */
                        if (FLAT || !__all_sync(0xffffffffu, alpha == 1.0f)) {
#pragma unroll
                            for (int dt = 0; dt < DT; dt++) {
                                o[mt][dt][2 * h] *= alpha;
                                o[mt][dt][2 * h + 1] *= alpha;
                            }
                        }
                    }
#pragma unroll
                    for (int kk = 0; kk < BN / 16; kk++) {
                        pa[mt][kk][0] = pack2<BF>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
                        pa[mt][kk][1] = pack2<BF>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
                        pa[mt][kk][2] = pack2<BF>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
                        pa[mt][kk][3] = pack2<BF>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
                    }
                }

                /* O += P V */
#pragma unroll
                for (int kk = 0; kk < BN / 16; kk++)
#pragma unroll
                    for (int dp = 0; dp < DT / 2; dp++) {
                        uint32_t b0, b1, b2, b3;
                        int r, c;
                        td_attn_v_rc(lane, kk, dp, &r, &c);
                        ldsm_x4_t(vb + 2u * (uint32_t)swz<D>(r, c), b0, b1, b2, b3);
#pragma unroll
                        for (int mt = 0; mt < MT; mt++) {
                            mma16816<BF>(o[mt][2 * dp], pa[mt][kk], b0, b1);
                            mma16816<BF>(o[mt][2 * dp + 1], pa[mt][kk], b2, b3);
                        }
                    }
            };
            const bool edge = kv0 + BN > a.s || (a.causal && kv0 + BN - 1 > m0 + wr0);
            if (!FLAT)
                step(edge);
            else if (edge)
                step(std::true_type{});
            else
                step(std::false_type{});
        }
        __syncthreads(); /* the next iteration's copies overwrite the other buffer */
    }

    /* y = O / l */
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float l = lrow[mt][h];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            const float inv = 1.0f / l;
            const int row = m0 + wr0 + mt * 16 + g + 8 * h;
            if (row < a.l) {
                uint32_t *dst = reinterpret_cast<uint32_t *>(gy + (int64_t)row * D);
#pragma unroll
                for (int dt = 0; dt < DT; dt++)
                    dst[dt * 4 + t] =
                        pack2<BF>(o[mt][dt][2 * h] * inv, o[mt][dt][2 * h + 1] * inv);
            }
        }
}

/* Element strides of `in`'s batch dims aligned right with the output's nb batch dims (0
 * where in has no such dim or it is 1); `mat` elements per matrix. */
void batch_strides(const td__desc *in, int nb, int64_t mat, int64_t *st)
{
    const int ib = (int)in->rank - 2;
    int64_t stride = mat;
    for (int d = nb - 1; d >= 0; d--) {
        st[d] = 0;
        const int di = d - (nb - ib);
        if (di < 0) continue;
        if (in->dims[di] != 1) st[d] = stride;
        stride *= in->dims[di];
    }
}

template <bool BF, int D, int MT, bool QREG, int BN = ATTN_BN, bool FLAT = true>
td_status launch(const td__gpu_exec *x, const td__view *in, const td__view *out,
                 const attn_args &a, int64_t nbatch)
{
    constexpr int BM = 16 * MT * ATTN_WARPS;
    const size_t smem = (size_t)(BM + 4 * BN) * D * sizeof(uint16_t);
    auto kern = k_attention<BF, D, MT, QREG, BN, FLAT>;
    td_status s = td__gpu_check(
        x, cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
        "attention shared memory");
    if (s != TD_OK) return s;
    const dim3 grid((unsigned)((a.l + BM - 1) / BM), (unsigned)nbatch);
    kern<<<grid, ATTN_THREADS, smem, x->st->s>>>(
        (const uint16_t *)in[0].data, (const uint16_t *)in[1].data,
        (const uint16_t *)in[2].data, (uint16_t *)out->data, a);
    return td__gpu_launched(x, "attention kernel");
}

/* TENSORD_GPU_ATTN_VARIANT (a development aid for timing): how a block is cut,
 * never what it computes, so every variant gives the same bits (each row's sums keep their
 * order: the key tiles, and each dot product's k order, are the same). 0 (default): head dim
 * 64 as 2 m16 tiles a warp (128 queries a block) with Q's fragments in registers, 128 as 1
 * tile (64 queries); 1: head dim 64 as 1 tile; 2: 64 as 2 tiles, Q read from shared memory
 * at each key tile; 3: 64 as 1 tile, Q from shared memory; for head dim 128, 1 and 0 are
 * the default, 2: 2 tiles with Q from shared memory; 3: 1 tile, Q from shared memory.
 * 4 and 5 change the key tile, so their bits differ from the default's: head dim 64, 4:
 * 1 m16 tile a warp and 128-key tiles, 5: 2 tiles and 32-key tiles; head dim 128, 4: 2
 * tiles, Q from shared memory, 32-key tiles (5 takes 0).
 * 6 (head dim 64) is the default's cut with the tile's code split by branches (the
 * masking test at run time, the rescale skipped when every maximum held): the first
 * version measured, same bits. */
int variant(void)
{
    const char *e = getenv("TENSORD_GPU_ATTN_VARIANT");
    const int v = e != NULL ? atoi(e) : 0;
    return v >= 0 && v <= 6 ? v : 0;
}

} // namespace

extern "C" bool td__gpu_attention_supports(const td__op *op, const td__desc *const *in,
                                           const td__desc *out)
{
    if (op->n_inputs != 3) return false; /* masks: the lowering */
    if (in[0]->dtype == TD_F32) return td__gpu_attention_f32_supports(op, in, out);
    const td__desc *q = in[0], *k = in[1], *v = in[2];
    if (q->dtype != TD_F16 && q->dtype != TD_BF16) return false;
    const int64_t l = q->dims[q->rank - 2], e = q->dims[q->rank - 1];
    const int64_t s = k->dims[k->rank - 2], ev = v->dims[v->rank - 1];
    if (e != ev || (e != 64 && e != 128)) return false;
    /* a scale the dtype rounds to 0 (|scale| below its smallest subnormal): the lowering,
     * whose 0 * s keeps an infinite score's NaN (the kernel's scores are scaled inside
     * exp's argument, which needs scale != 0) */
    const float sc = q->dtype == TD_BF16 ? td__bf16_to_f32(td__f64_to_bf16(op->fattrs[0]))
                                         : td__f16_to_f32(td__f64_to_f16(op->fattrs[0]));
    if (sc == 0.0f) return false;
    if (out->rank - 2 > ATTN_MAX_BATCH) return false;
    int64_t nbatch = 1;
    for (uint32_t i = 0; i + 2 < out->rank; i++) nbatch *= out->dims[i];
    if (nbatch > 65535) return false;
    /* 32-bit row arithmetic inside a matrix; the grid's x dim */
    return l * e <= INT32_MAX / 2 && s * e <= INT32_MAX / 2;
}

extern "C" td_status td__gpu_exec_attention(const td__gpu_exec *x, const td__op *op,
                                            const td__view *in, const td__view *out)
{
    if (in[0].desc.dtype == TD_F32) return td__gpu_exec_attention_f32(x, op, in, out);
    const td__desc *q = &in[0].desc, *k = &in[1].desc, *v = &in[2].desc, *o = &out->desc;
    attn_args a;
    memset(&a, 0, sizeof a);
    const int64_t e = q->dims[q->rank - 1];
    a.l = (int)q->dims[q->rank - 2];
    a.s = (int)k->dims[k->rank - 2];
    a.causal = op->iattrs[0] != 0;
    const bool bf = q->dtype == TD_BF16;
    /* the lowering multiplies by FULL(scale) in the dtype: the same rounded scale */
    const float sc = bf ? td__bf16_to_f32(td__f64_to_bf16(op->fattrs[0]))
                        : td__f16_to_f32(td__f64_to_f16(op->fattrs[0]));
    a.scale_log2 = fabsf(sc) * 1.44269504088896340736f;
    a.qneg = sc < 0 ? 0x80008000u : 0u;
    a.nb = (int)o->rank - 2;
    int64_t nbatch = 1;
    for (int d = 0; d < a.nb; d++) {
        a.bdims[d] = o->dims[d];
        nbatch *= o->dims[d];
    }
    if (nbatch == 0 || a.l == 0) return TD_OK;
    batch_strides(q, a.nb, (int64_t)a.l * e, a.bst[0]);
    batch_strides(k, a.nb, (int64_t)a.s * e, a.bst[1]);
    batch_strides(v, a.nb, (int64_t)a.s * e, a.bst[2]);
    for (int i = 0; i < 3; i++)
        if (((uintptr_t)in[i].data & 15u) != 0)
            return td__gpu_fail(x, TD_EINTERNAL,
                                TD_GPU_KIND ": attention input %d not 16-byte aligned", i);
    const int var = variant();
    if (e == 64 && var == 4)
        return bf ? launch<true, 64, 1, true, 128>(x, in, out, a, nbatch)
                  : launch<false, 64, 1, true, 128>(x, in, out, a, nbatch);
    if (e == 64 && var == 5)
        return bf ? launch<true, 64, 2, true, 32>(x, in, out, a, nbatch)
                  : launch<false, 64, 2, true, 32>(x, in, out, a, nbatch);
    if (e == 128 && var == 4)
        return bf ? launch<true, 128, 2, false, 32>(x, in, out, a, nbatch)
                  : launch<false, 128, 2, false, 32>(x, in, out, a, nbatch);
    if (e == 64 && var == 6)
        return bf ? launch<true, 64, 2, true, 64, false>(x, in, out, a, nbatch)
                  : launch<false, 64, 2, true, 64, false>(x, in, out, a, nbatch);
    switch ((e == 64 ? 0 : 4) + (var % 4)) {
    case 1: return bf ? launch<true, 64, 1, true>(x, in, out, a, nbatch)
                      : launch<false, 64, 1, true>(x, in, out, a, nbatch);
    case 2: return bf ? launch<true, 64, 2, false>(x, in, out, a, nbatch)
                      : launch<false, 64, 2, false>(x, in, out, a, nbatch);
    case 3: return bf ? launch<true, 64, 1, false>(x, in, out, a, nbatch)
                      : launch<false, 64, 1, false>(x, in, out, a, nbatch);
    case 4: case 5: return bf ? launch<true, 128, 1, true>(x, in, out, a, nbatch)
                              : launch<false, 128, 1, true>(x, in, out, a, nbatch);
    case 6: return bf ? launch<true, 128, 2, false>(x, in, out, a, nbatch)
                      : launch<false, 128, 2, false>(x, in, out, a, nbatch);
    case 7: return bf ? launch<true, 128, 1, false>(x, in, out, a, nbatch)
                      : launch<false, 128, 1, false>(x, in, out, a, nbatch);
    default: return bf ? launch<true, 64, 2, true>(x, in, out, a, nbatch)
                       : launch<false, 64, 2, true>(x, in, out, a, nbatch);
    }
}

#else /* no tensor-core path: the engine lowers every attention op */

extern "C" bool td__gpu_attention_supports(const td__op *op, const td__desc *const *in,
                                           const td__desc *out)
{
    (void)op;
    (void)in;
    (void)out;
    return false;
}

extern "C" td_status td__gpu_exec_attention(const td__gpu_exec *x, const td__op *op,
                                            const td__view *in, const td__view *out)
{
    (void)op;
    (void)in;
    (void)out;
    return td__gpu_fail(x, TD_EINTERNAL, TD_GPU_KIND ": no native attention in this build");
}

#endif

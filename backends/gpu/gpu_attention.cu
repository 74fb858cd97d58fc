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
#include "backends/gpu/gpu_mma.cuh"
#include "engine/convert.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <type_traits>

#if defined(TD_GPU_MMA)

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

/* k_attention2: the default's arithmetic, row for row and in the same order (64-key tiles
 * ascending, each mma's k order, the same softmax steps: the same bits) with the block cut
 * and the pipeline as parameters, for timing (variant()):
 *   WARPS warps of MT m16 query tiles (BM = 16 MT WARPS queries a block), MINB blocks an
 *   SM for __launch_bounds__ (the register cap: 65536 / (32 WARPS MINB));
 *   STAGES K/V buffers (2 or 3) and one barrier a tile, where the default has two: wait for
 *   tile j's copies, barrier (after which every warp is past tile j - 1, whose buffer the
 *   copies of tile j + STAGES - 1, issued next, overwrite), compute tile j;
 *   addresses computed once: each copy and ldmatrix in the loop is a base register plus an
 *   immediate (td_attn_*_base / _imm), 32-bit offsets inside the batch matrix, and only the
 *   copy of a tile that crosses the end of the keys checks rows;
 *   SUB: a copied tile of SUB BN keys (one wait and barrier) computed as SUB tiles of BN;
 *   BN: keys a computed tile (64 keeps the default's bits; 128 does not: the running
 *   maximum, and so each weight's rounding, changes every 128 keys);
 *   QREG: Q's fragments in registers (else read from shared memory at every tile). */
/* 16 bytes global -> shared, all of them (cp_async16 without the source-size operand) */
TD_DEV void cp_async16_in(uint32_t dst, const void *src)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
}

template <int D, int THREADS> struct attn_copy {
    static constexpr int CH = D / 8;       /* 16-byte chunks a row */
    static constexpr int RS = THREADS / CH; /* rows a step of the block's threads */
    static_assert(RS % 8 == 0, "a copy step keeps the swizzle's row phase");

    /* R rows of a tile from this thread's first chunk (row crow of the tile): dst its
     * shared byte address, src its global address, left the tile's rows before the end of
     * the matrix (all R when left >= R; rows from left on are zero-filled, from base, a
     * valid address: cp.async reads none of it) */
    template <int R> static TD_DEV void rows(uint32_t dst, const uint16_t *src, int left,
                                            int crow, const uint16_t *base)
    {
        static_assert(R % RS == 0, "whole copy steps");
        if (left >= R) {
#pragma unroll
            for (int i = 0; i < R / RS; i++)
                cp_async16_in(dst + 2u * (uint32_t)td_attn_copy_imm(i, THREADS, D),
                              src + td_attn_copy_imm(i, THREADS, D));
        } else {
#pragma unroll
            for (int i = 0; i < R / RS; i++) {
                const bool in = crow + i * RS < left;
                cp_async16(dst + 2u * (uint32_t)td_attn_copy_imm(i, THREADS, D),
                           in ? src + td_attn_copy_imm(i, THREADS, D) : base, in ? 16 : 0);
            }
        }
    }
};

template <bool BF, int D, int MT, int WARPS, int STAGES, int MINB, int BN, int SUB, bool QREG>
__global__ void __launch_bounds__(WARPS * 32, MINB)
    k_attention2(const uint16_t *__restrict__ q, const uint16_t *__restrict__ k,
                 const uint16_t *__restrict__ v, uint16_t *__restrict__ y, attn_args a)
{
    constexpr int THREADS = WARPS * 32;
    constexpr int LT = BN * SUB; /* keys a copied tile: SUB tiles of BN computed in turn */
    constexpr int BM = 16 * MT * WARPS;
    constexpr int KT = D / 16;  /* k16 steps of Q K^T */
    constexpr int NT = BN / 8;  /* n8 tiles of S */
    constexpr int DT = D / 8;   /* n8 tiles of O */
    constexpr uint32_t TILE_BYTES = LT * D * 2;
    static_assert(STAGES == 2 || STAGES == 3, "2 or 3 K/V buffers");
    using copy = attn_copy<D, THREADS>;
    extern __shared__ uint4 smem_raw[];
    uint16_t *sq = reinterpret_cast<uint16_t *>(smem_raw);
    uint16_t *sk = sq + BM * D;          /* STAGES buffers of LT x D */
    uint16_t *sv = sk + STAGES * LT * D; /* STAGES buffers of LT x D */

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const float sc2 = a.scale_log2;
    const int g = lane >> 2, t = lane & 3;
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
    const int ntiles = (kv_end + LT - 1) / LT;

    /* this thread's copy chunk: row crow, column ccol; its offset in every tile */
    int crow, cch;
    td_attn_chunk(tid, D, &crow, &cch);
    const int ccol = cch * 8;
    const uint32_t cdst = 2u * (uint32_t)td_attn_copy_base(tid, D);
    const uint32_t sq_a = smem_addr(sq), sk_a = smem_addr(sk), sv_a = smem_addr(sv);
    const uint16_t *gk_t = gk + crow * D + ccol, *gv_t = gv + crow * D + ccol;

    copy::template rows<BM>(sq_a + cdst, gq + (int64_t)(m0 + crow) * D + ccol, a.l - m0, crow,
                            gq);
#pragma unroll
    for (int st = 0; st < STAGES - 1; st++) {
        if (st < ntiles) {
            copy::template rows<LT>(sk_a + st * TILE_BYTES + cdst, gk_t + st * LT * D,
                                    a.s - st * LT, crow, gk);
            copy::template rows<LT>(sv_a + st * TILE_BYTES + cdst, gv_t + st * LT * D,
                                    a.s - st * LT, crow, gv);
        }
        cp_commit();
    }

    /* ldmatrix bases (bytes): K by k step % 4, V by dim pair % 4 */
    uint32_t kbo[4], vbo[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        kbo[i] = 2u * (uint32_t)td_attn_k_base(lane, i, D);
        vbo[i] = 2u * (uint32_t)td_attn_v_base(lane, i, D);
    }

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

    int stage = 0;
    for (int j = 0; j < ntiles; j++) {
        cp_wait<STAGES - 2>();
        __syncthreads();
        {
            const int jn = j + STAGES - 1; /* the tile to fetch, into the buffer of j - 1 */
            if (jn < ntiles) {
                const int sn = stage == 0 ? STAGES - 1 : stage - 1;
                copy::template rows<LT>(sk_a + sn * TILE_BYTES + cdst, gk_t + jn * LT * D,
                                        a.s - jn * LT, crow, gk);
                copy::template rows<LT>(sv_a + sn * TILE_BYTES + cdst, gv_t + jn * LT * D,
                                        a.s - jn * LT, crow, gv);
            }
            cp_commit();
        }
        if (QREG && j == 0) {
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int kk = 0; kk < KT; kk++) {
                    int r, c;
                    td_attn_q_rc(lane, wr0 + mt * 16, kk, &r, &c);
                    ldsm_x4(sq_a + 2u * (uint32_t)swz<D>(r, c), qf[mt][kk][0], qf[mt][kk][1],
                            qf[mt][kk][2], qf[mt][kk][3]);
#pragma unroll
                    for (int i = 0; i < 4; i++) qf[mt][kk][i] ^= a.qneg;
                }
        }
#pragma unroll
        for (int sb = 0; sb < SUB; sb++) {
            const uint32_t kb = sk_a + stage * TILE_BYTES + sb * BN * D * 2,
                           vb = sv_a + stage * TILE_BYTES + sb * BN * D * 2;
            const int kv0 = j * LT + sb * BN;
            /* past the keys (SUB > 1), or wholly after the warp's last row (causal) */
            if ((SUB == 1 || kv0 < kv_end) && (!a.causal || kv0 <= m0 + wr0 + 16 * MT - 1)) {
                auto step = [&](auto edge_tag) {
                    constexpr bool EDGE = decltype(edge_tag)::value;
                    /* S = Q K^T */
                    float s[MT][NT][4];
#pragma unroll
                    for (int mt = 0; mt < MT; mt++)
#pragma unroll
                        for (int nt = 0; nt < NT; nt++)
                            s[mt][nt][0] = s[mt][nt][1] = s[mt][nt][2] = s[mt][nt][3] = 0.0f;
#pragma unroll
                    for (int kk = 0; kk < KT; kk++) {
                        uint32_t qs[MT][4]; /* !QREG: this k step's Q fragments */
                        if (!QREG) {
#pragma unroll
                            for (int mt = 0; mt < MT; mt++) {
                                int r, c;
                                td_attn_q_rc(lane, wr0 + mt * 16, kk, &r, &c);
                                ldsm_x4(sq_a + 2u * (uint32_t)swz<D>(r, c), qs[mt][0], qs[mt][1],
                                        qs[mt][2], qs[mt][3]);
#pragma unroll
                                for (int i = 0; i < 4; i++) qs[mt][i] ^= a.qneg;
                            }
                        }
#pragma unroll
                        for (int np = 0; np < NT / 2; np++) {
                            uint32_t b0, b1, b2, b3;
                            ldsm_x4(kb + kbo[kk & 3] + 2u * (uint32_t)td_attn_k_imm(np, kk, D), b0,
                                    b1, b2, b3);
#pragma unroll
                            for (int mt = 0; mt < MT; mt++) {
                                const uint32_t *qa = QREG ? qf[mt][kk] : qs[mt];
                                mma16816<BF>(s[mt][2 * np], qa, b0, b1);
                                mma16816<BF>(s[mt][2 * np + 1], qa, b2, b3);
                            }
                        }
                    }

                    /* mask, online softmax; P into A fragments (as k_attention) */
                    uint32_t pa[MT][BN / 16][4];
#pragma unroll
                    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
                        for (int h = 0; h < 2; h++) {
                            const int row = m0 + wr0 + mt * 16 + g + 8 * h;
                            float mx = mrow[mt][h];
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
#pragma unroll
                            for (int dt = 0; dt < DT; dt++) {
                                o[mt][dt][2 * h] *= alpha;
                                o[mt][dt][2 * h + 1] *= alpha;
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
                            ldsm_x4_t(vb + vbo[dp & 3] + 2u * (uint32_t)td_attn_v_imm(kk, dp, D),
                                      b0, b1, b2, b3);
#pragma unroll
                            for (int mt = 0; mt < MT; mt++) {
                                mma16816<BF>(o[mt][2 * dp], pa[mt][kk], b0, b1);
                                mma16816<BF>(o[mt][2 * dp + 1], pa[mt][kk], b2, b3);
                            }
                        }
                };
                if (kv0 + BN > a.s || (a.causal && kv0 + BN - 1 > m0 + wr0))
                    step(std::true_type{});
                else
                    step(std::false_type{});
            }
        }
        stage = stage + 1 == STAGES ? 0 : stage + 1;
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

template <bool BF, int D, int MT, int WARPS, int STAGES, int MINB, int BN = ATTN_BN,
          int SUB = 1, bool QREG = true>
td_status launch2(const td__gpu_exec *x, const td__view *in, const td__view *out,
                  const attn_args &a, int64_t nbatch)
{
    constexpr int BM = 16 * MT * WARPS;
    const size_t smem = (size_t)(BM + 2 * STAGES * BN * SUB) * D * sizeof(uint16_t);
    auto kern = k_attention2<BF, D, MT, WARPS, STAGES, MINB, BN, SUB, QREG>;
    td_status s = td__gpu_check(
        x, cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
        "attention shared memory");
    /* all of the SM's 228 KiB as shared memory (the L1 cache's share: cp.async.cg bypasses
     * it), so that MINB blocks of up to 113 KiB fit */
    if (s == TD_OK)
        s = td__gpu_check(x,
                          cudaFuncSetAttribute(kern,
                                               cudaFuncAttributePreferredSharedMemoryCarveout,
                                               (int)cudaSharedmemCarveoutMaxShared),
                          "attention shared memory carveout");
    if (s != TD_OK) return s;
    const dim3 grid((unsigned)((a.l + BM - 1) / BM), (unsigned)nbatch);
    kern<<<grid, WARPS * 32, smem, x->st->s>>>(
        (const uint16_t *)in[0].data, (const uint16_t *)in[1].data,
        (const uint16_t *)in[2].data, (uint16_t *)out->data, a);
    return td__gpu_launched(x, "attention kernel");
}

/* Variants 7 to 14 (k_attention2; see variant()). */
template <bool BF>
td_status launch_v2(int var, int64_t e, const td__gpu_exec *x, const td__view *in,
                    const td__view *out, const attn_args &a, int64_t nbatch)
{
    if (e == 64) {
        switch (var) {
        case 7: return launch2<BF, 64, 2, 4, 2, 2>(x, in, out, a, nbatch);
        case 8: return launch2<BF, 64, 2, 4, 3, 2>(x, in, out, a, nbatch);
        case 9: return launch2<BF, 64, 2, 8, 2, 1>(x, in, out, a, nbatch);
        case 10: return launch2<BF, 64, 2, 8, 3, 1>(x, in, out, a, nbatch);
        case 11: return launch2<BF, 64, 1, 8, 2, 2>(x, in, out, a, nbatch);
        case 12: return launch2<BF, 64, 2, 4, 2, 2, 64, 2>(x, in, out, a, nbatch);
        case 13: return launch2<BF, 64, 2, 4, 3, 2, 64, 2>(x, in, out, a, nbatch);
        default: return launch2<BF, 64, 2, 4, 2, 2, 128, 1, false>(x, in, out, a, nbatch);
        }
    }
    switch (var) {
    case 7: return launch2<BF, 128, 1, 4, 2, 2>(x, in, out, a, nbatch);
    case 8: return launch2<BF, 128, 1, 4, 3, 2>(x, in, out, a, nbatch);
    case 9: case 11: return launch2<BF, 128, 1, 8, 2, 1>(x, in, out, a, nbatch);
    case 10: return launch2<BF, 128, 1, 8, 3, 1>(x, in, out, a, nbatch);
    case 12: return launch2<BF, 128, 1, 4, 2, 2, 64, 2>(x, in, out, a, nbatch);
    case 13: return launch2<BF, 128, 1, 4, 3, 2, 64, 2>(x, in, out, a, nbatch);
    default: return launch2<BF, 128, 1, 4, 2, 2, 128, 1, false>(x, in, out, a, nbatch);
    }
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
 * version measured, same bits.
 * 7 to 14: k_attention2 (one barrier a tile, addresses hoisted); head dim 64 (128: 1 m16
 * tile a warp throughout): 7: the default's cut (4 warps of 2 tiles, 2 K/V buffers);
 * 8: 7 with 3 K/V buffers; 9: 8 warps (256 queries a block; 128 for head dim 128), one
 * block an SM; 10: 9 with 3 buffers; 11: 8 warps of 1 tile (128 queries), two blocks an SM
 * (128 registers; head dim 128: as 9); 12: 7 copying 128 keys at a time, computed as two
 * 64-key tiles; 13: 12 with 3 buffers; all of these the default's bits. 14: 128-key tiles
 * with Q from shared memory (FlashAttention-2's cut for head dim 64): other bits.
 * Unset (or out of range): 13 for head dim 64 and 8 for 128, the fastest of these on an
 * H100 (bf16 [8, 16, 2048, 64]: 0.430 ms against 0's 0.484; [8, 8, 2048, 128]: 0.459
 * against 0.523; BENCHMARKS.md 2026-12-06), with 0's bits (attn-check --bits-only). */
int variant(int head_dim)
{
    const char *e = getenv("TENSORD_GPU_ATTN_VARIANT");
    const int v = e != NULL && *e != '\0' ? atoi(e) : -1;
    return v >= 0 && v <= 14 ? v : head_dim == 64 ? 13 : 8;
}

} // namespace

extern "C" void td__gpu_attention_batch_strides(const td__desc *in, int nb, int64_t mat,
                                                int64_t *st)
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
    td__gpu_attention_batch_strides(q, a.nb, (int64_t)a.l * e, a.bst[0]);
    td__gpu_attention_batch_strides(k, a.nb, (int64_t)a.s * e, a.bst[1]);
    td__gpu_attention_batch_strides(v, a.nb, (int64_t)a.s * e, a.bst[2]);
    for (int i = 0; i < 3; i++)
        if (((uintptr_t)in[i].data & 15u) != 0)
            return td__gpu_fail(x, TD_EINTERNAL,
                                TD_GPU_KIND ": attention input %d not 16-byte aligned", i);
    const int var = variant(e);
    if (var >= 7)
        return bf ? launch_v2<true>(var, e, x, in, out, a, nbatch)
                  : launch_v2<false>(var, e, x, in, out, a, nbatch);
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

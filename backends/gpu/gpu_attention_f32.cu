/* gpu_attention_f32.cu — SCALED_DOT_PRODUCT_ATTENTION in f32 (no mask or causal; head dim 64
 * or 128) on the CUDA cores in one pass that never forms the [L, S] score matrix.
 *
 * Why: the lowering (two matmuls, mul, softmax's steps) writes and reads the whole score
 * matrix several times (2 GiB at issue 13's [8, 16, 2048, 64]). f32 results must be full
 * f32, so no tensor cores (TF32 would round the inputs to 10 bits): every product is an
 * FP32 fused multiply-add on the CUDA cores, register-tiled. The algorithm is the one of
 * gpu_attention.cu (FlashAttention-2's online softmax): per tile of keys the running
 * maximum and sum in f32, the output rescaled when the maximum grows, divided once at the
 * end.
 *
 * Work: a CTA of 2 BM threads takes BM queries of one batch matrix; keys and values come
 * in tiles of BN rows, ascending, copied by cp.async into a second shared buffer while the
 * current one is used (Q stays in shared memory for the whole CTA). Thread (ty, tx) owns 8
 * query rows, BN / 16 key columns of the score tile and D / 16 output columns
 * (gpu_attention_f32_layout.h: who owns what, the padded layouts, and why they are free of
 * bank conflicts). Per tile a thread computes its 8 x BN / 16 scores s = q . k (a chain of
 * fmaf over the head dim in ascending order, float4 reads of Q and K rows), t = s * scale
 * (the f32 product the lowering's matmul(q, kt) * full(scale) forms), applies the causal
 * rule (key j > query i: -inf) and the end of the keys, updates each row's running maximum
 * m (the 16 threads of a row combine theirs by four fixed xor shuffles), p = 2^((t - mu)
 * log2(e)) with mu = m (0 while m is -inf), rescales its output columns and its partial row
 * sum by 2^((m_old - mu) log2(e)), and writes p into the P tile; P's rows are written and
 * read by the same half-warp, so a __syncwarp orders them. Then O += P V (per output
 * element a chain of fmaf over the tile's keys in ascending order). At the end the 16
 * partial row sums are combined by fixed shuffles and y = O / l (an IEEE division).
 *
 * Accuracy (the op table's ATTENTION bound, tests/unit/backends/conformance.c: 16 ulp +
 * (4 E |scale| max|q| max|k| + 4 S + 8) u max|v|, u = 2^-24): the scores are the same f32
 * dot products and product with the scale as the lowering's, in another order (within
 * E u |scale| max|q| max|k| each); t - mu and the product with log2(e) are rounded
 * relative to the exponent x <= 0, which moves a weight 2^x by x u ln 2 relative, small
 * where the weight is not (x 2^x <= 0.54); ex2.approx.ftz.f32 (the SFU's 2^x, as exp2f
 * without flushing subnormals) has a relative error of at most 2 ulp (2^-22 = 4 u; the
 * CUDA programming guide's exp2f bound), which moves the output by at most 2 * 4 u max|v|
 * (the weights sum to 1): inside the bound's constant 8 u max|v| plus its 16 ulp. A weight
 * below 2^-126 of the row's largest flushes to 0 (at most S 2^-126 max|v|). The row sum
 * and the weighted sum of v add at most S u each (in the bound's 4 S u).
 *
 * Determinism: every sum has an order fixed by the code and the shape (the fmaf chains,
 * tiles in ascending key order, fixed shuffles); no atomics, no split over keys. The tile
 * configuration (TENSORD_GPU_ATTN_F32, below) decides which thread owns a key column, so
 * the row sums' association, and the bits, depend on it; one configuration always gives
 * the same bits.
 *
 * Special values (as gpu_attention.cu): a NaN score makes its row NaN (p is NaN; the
 * maximum ignores it); an infinite score makes its row NaN as the lowering's softmax does
 * (inf - inf) unless every infinite score of the row is -inf (weight 0). Scale 0 gives
 * every key weight 1 (t = s * 0, as the lowering); a negative scale needs nothing (the
 * maximum is taken of t). No keys (S = 0) goes to the lowering.
 *
 * Built only by nvcc for CUDA (cp.async needs sm_80; the module targets sm_90): under hipcc
 * (TD_GPU_HIP) and the CPU emulation of tests/gpu/emu (TD_GPU_EMU) this file is empty and
 * gpu_attention.cu's supports() says no, so the engine runs the lowering there.
 */
#include "backends/gpu/gpu_ops.cuh"
#include "backends/gpu/gpu_attention_f32_layout.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <type_traits>

#if !defined(TD_GPU_HIP) && !defined(TD_GPU_EMU)

namespace {

#define AF32_MAX_BATCH 6 /* batch dims: TD_MAX_RANK - 2 */
#define AF32_LOG2E 1.44269504088896340736f

/* Shape and batch walk of one launch, by value. */
struct af32_args {
    int l, s; /* queries, keys */
    int causal;
    float scale; /* the op's scale rounded to f32, as the lowering's full(scale) */
    int nb;      /* output batch rank */
    int64_t bdims[AF32_MAX_BATCH];
    int64_t bst[3][AF32_MAX_BATCH]; /* q k v: element stride per batch dim (0: broadcast) */
};

TD_DEV uint32_t af32_smem_addr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* 16 bytes global -> shared; `bytes` 0 writes zeros (rows past the end). */
TD_DEV void af32_cp_async16(uint32_t dst, const void *src, int bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(bytes));
}
TD_DEV void af32_cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> TD_DEV void af32_cp_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/* 2^x by the SFU: relative error <= 2^-22; subnormal results flush to 0. */
TD_DEV float af32_ex2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

TD_DEV float f4_at(const float4 &f, int c)
{
    return c == 0 ? f.x : c == 1 ? f.y : c == 2 ? f.z : f.w;
}

/* Rows [r0, r0 + R) of a [n, D] f32 matrix into a tile of row stride `stride` floats
 * (zeros past row n). */
template <int D, int R, int NTH>
TD_DEV void af32_load_tile(float *tile, int stride, const float *g, int r0, int n, int tid)
{
    static_assert((R * D / 4) % NTH == 0, "tile copy: whole rounds of 16-byte chunks");
#pragma unroll
    for (int it = 0; it < R * D / 4 / NTH; it++) {
        int r, c;
        td_af32_chunk(tid + it * NTH, D, &r, &c);
        const bool in = r0 + r < n;
        const float *src = in ? g + (int64_t)(r0 + r) * D + c : g;
        af32_cp_async16(af32_smem_addr(tile + r * stride + c), src, in ? 16 : 0);
    }
}

template <int D, int BM, int BN, int MINB>
__global__ void __launch_bounds__(2 * BM, MINB)
    k_attention_f32(const float *__restrict__ q, const float *__restrict__ k,
                    const float *__restrict__ v, float *__restrict__ y, af32_args a)
{
    constexpr int NTH = 2 * BM; /* threads */
    constexpr int TN = BN / 16; /* a thread's key columns of S */
    constexpr int TH = D / 64;  /* a thread's float4 output columns */
    static_assert(BM % 16 == 0 && BN % 16 == 0 && D % 64 == 0, "tile shape");
    const int QS = td_af32_qstride(D), KS = td_af32_kstride(D), VS = td_af32_vstride(D),
              PS = td_af32_pstride(BN);
    extern __shared__ float4 af32_smem[];
    float *const sm = reinterpret_cast<float *>(af32_smem);
    float *const sq = sm;
    float *const sk = sm + td_af32_k_off(D, BM);     /* 2 buffers of BN x KS */
    float *const sv = sm + td_af32_v_off(D, BM, BN); /* 2 buffers of BN x VS */
    float *const sp = sm + td_af32_p_off(D, BM, BN); /* BM x PS */

    const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
    /* causal: the longest query blocks first (they have the most key tiles) */
    const int mb = a.causal ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;
    const int m0 = mb * BM;
    int64_t bi = blockIdx.y, off[3] = {0, 0, 0};
    for (int d = a.nb - 1; d >= 0; d--) {
        const int64_t i = bi % a.bdims[d];
        bi /= a.bdims[d];
        for (int u = 0; u < 3; u++) off[u] += i * a.bst[u][d];
    }
    const float *gq = q + off[0], *gk = k + off[1], *gv = v + off[2];
    float *gy = y + (int64_t)blockIdx.y * a.l * D;

    const int kv_end = a.causal ? min(a.s, m0 + BM) : a.s;
    const int ntiles = (kv_end + BN - 1) / BN;

    af32_load_tile<D, BM, NTH>(sq, QS, gq, m0, a.l, tid);
    af32_load_tile<D, BN, NTH>(sk, KS, gk, 0, a.s, tid);
    af32_load_tile<D, BN, NTH>(sv, VS, gv, 0, a.s, tid);
    af32_cp_commit();

    float o[8][4 * TH];
    float mrow[8], lrow[8];
#pragma unroll
    for (int i = 0; i < 8; i++) {
        mrow[i] = -INFINITY;
        lrow[i] = 0.0f;
#pragma unroll
        for (int c = 0; c < 4 * TH; c++) o[i][c] = 0.0f;
    }
    const float scale = a.scale;

    for (int jt = 0; jt < ntiles; jt++) {
        const int buf = jt & 1;
        if (jt + 1 < ntiles) {
            af32_load_tile<D, BN, NTH>(sk + (buf ^ 1) * BN * KS, KS, gk, (jt + 1) * BN, a.s,
                                       tid);
            af32_load_tile<D, BN, NTH>(sv + (buf ^ 1) * BN * VS, VS, gv, (jt + 1) * BN, a.s,
                                       tid);
            af32_cp_commit();
            af32_cp_wait<1>();
        } else {
            af32_cp_wait<0>();
        }
        __syncthreads();
        const float *kb = sk + buf * BN * KS, *vb = sv + buf * BN * VS;
        const int kv0 = jt * BN;
        /* one tile; EDGE (the end of the keys, or the causal diagonal, crosses it) is a
         * compile-time flag so that the other tiles carry no masking code */
        auto step = [&](auto edge_tag) {
            constexpr bool EDGE = decltype(edge_tag)::value;
            /* s = Q K^T: per element a chain over the head dim, ascending */
            float s[8][TN];
#pragma unroll
            for (int i = 0; i < 8; i++)
#pragma unroll
                for (int j = 0; j < TN; j++) s[i][j] = 0.0f;
#pragma unroll
            for (int k4 = 0; k4 < D / 4; k4++) {
                float4 qv[8], kv[TN];
#pragma unroll
                for (int i = 0; i < 8; i++)
                    qv[i] = *reinterpret_cast<const float4 *>(
                        sq + td_af32_row(ty, i, BM) * QS + 4 * k4);
#pragma unroll
                for (int j = 0; j < TN; j++)
                    kv[j] = *reinterpret_cast<const float4 *>(
                        kb + td_af32_scol(tx, j) * KS + 4 * k4);
#pragma unroll
                for (int c = 0; c < 4; c++)
#pragma unroll
                    for (int i = 0; i < 8; i++)
#pragma unroll
                        for (int j = 0; j < TN; j++)
                            s[i][j] = fmaf(f4_at(qv[i], c), f4_at(kv[j], c), s[i][j]);
            }
            /* scale, mask, online softmax; p into P */
#pragma unroll
            for (int i = 0; i < 8; i++) {
                const int rl = td_af32_row(ty, i, BM), row = m0 + rl;
                float mx = mrow[i];
#pragma unroll
                for (int j = 0; j < TN; j++) {
                    float t = s[i][j] * scale;
                    if (EDGE) {
                        const int col = kv0 + td_af32_scol(tx, j);
                        if (col >= a.s || (a.causal && col > row)) t = -INFINITY;
                    }
                    s[i][j] = t;
                    mx = fmaxf(mx, t);
                }
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
                const float mu = mx == -INFINITY ? 0.0f : mx;
                const float alpha = af32_ex2((mrow[i] - mu) * AF32_LOG2E);
                mrow[i] = mx;
                float ls = 0.0f;
#pragma unroll
                for (int j = 0; j < TN; j++) {
                    const float p = af32_ex2((s[i][j] - mu) * AF32_LOG2E);
                    sp[rl * PS + td_af32_scol(tx, j)] = p;
                    ls += p;
                }
                lrow[i] = lrow[i] * alpha + ls;
#pragma unroll
                for (int c = 0; c < 4 * TH; c++) o[i][c] *= alpha;
            }
            __syncwarp(); /* P's rows: written and read by this half-warp */
            /* O += P V: per element a chain over the tile's keys, ascending */
#pragma unroll
            for (int j4 = 0; j4 < BN / 4; j4++) {
                float4 pv[8];
#pragma unroll
                for (int i = 0; i < 8; i++)
                    pv[i] = *reinterpret_cast<const float4 *>(
                        sp + td_af32_row(ty, i, BM) * PS + 4 * j4);
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    float4 vv[TH];
#pragma unroll
                    for (int h = 0; h < TH; h++)
                        vv[h] = *reinterpret_cast<const float4 *>(
                            vb + (4 * j4 + c) * VS + td_af32_ocol(tx, h));
#pragma unroll
                    for (int i = 0; i < 8; i++) {
                        const float p = f4_at(pv[i], c);
#pragma unroll
                        for (int h = 0; h < TH; h++) {
                            o[i][4 * h + 0] = fmaf(p, vv[h].x, o[i][4 * h + 0]);
                            o[i][4 * h + 1] = fmaf(p, vv[h].y, o[i][4 * h + 1]);
                            o[i][4 * h + 2] = fmaf(p, vv[h].z, o[i][4 * h + 2]);
                            o[i][4 * h + 3] = fmaf(p, vv[h].w, o[i][4 * h + 3]);
                        }
                    }
                }
            }
        };
        if (kv0 + BN > a.s || (a.causal && kv0 + BN - 1 > m0))
            step(std::true_type{});
        else
            step(std::false_type{});
        __syncthreads(); /* the next copies overwrite the other buffer; P is rewritten */
    }

    /* y = O / l */
#pragma unroll
    for (int i = 0; i < 8; i++) {
        float l = lrow[i];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        l += __shfl_xor_sync(0xffffffffu, l, 4);
        l += __shfl_xor_sync(0xffffffffu, l, 8);
        const int row = m0 + td_af32_row(ty, i, BM);
        if (row < a.l) {
            float *dst = gy + (int64_t)row * D;
#pragma unroll
            for (int h = 0; h < TH; h++) {
                float4 r;
                r.x = o[i][4 * h + 0] / l;
                r.y = o[i][4 * h + 1] / l;
                r.z = o[i][4 * h + 2] / l;
                r.w = o[i][4 * h + 3] / l;
                *reinterpret_cast<float4 *>(dst + td_af32_ocol(tx, h)) = r;
            }
        }
    }
}

template <int D, int BM, int BN, int MINB>
td_status af32_launch(const td__gpu_exec *x, const td__view *in, const td__view *out,
                      const af32_args &a, int64_t nbatch)
{
    const size_t smem = (size_t)td_af32_smem_floats(D, BM, BN) * sizeof(float);
    auto kern = k_attention_f32<D, BM, BN, MINB>;
    td_status s = td__gpu_check(
        x, cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
        "attention f32 shared memory");
    if (s != TD_OK) return s;
    const dim3 grid((unsigned)((a.l + BM - 1) / BM), (unsigned)nbatch);
    kern<<<grid, 2 * BM, smem, x->st->s>>>((const float *)in[0].data,
                                            (const float *)in[1].data,
                                            (const float *)in[2].data, (float *)out->data, a);
    return td__gpu_launched(x, "attention f32 kernel");
}

/* TENSORD_GPU_ATTN_F32 (a development aid for timing and for comparing with the lowering):
 * 0: f32 attention runs the lowering; unset or 1: the default tiles, head dim 64 as
 * BM 64 queries x BN 64 keys (128 threads, two CTAs an SM), 128 as BM 128 x BN 32
 * (155 KiB); 2: BM 64 x BN 64; 3: BM 128 x BN 32 (at head dim 64 two CTAs an SM, 128
 * registers a thread); 4: BM 64 x BN 32; 5: head dim 64 as BM 128 x BN 64 (256 threads,
 * 140 KiB; the first default: on an H100, 3.97 ms against 2's 3.87 at [8, 16, 2048, 64],
 * causal 2.24 against 2.15, BENCHMARKS.md 2026-12-06). Configurations with the same BN
 * give the same bits (a key column's owner depends only on BN); BN 32 and 64 differ in
 * the row sums' association. */
int af32_config(void)
{
    const char *e = getenv("TENSORD_GPU_ATTN_F32");
    if (e == NULL || *e == '\0') return 1;
    const int v = atoi(e);
    return v >= 0 && v <= 5 ? v : 1;
}

} // namespace

extern "C" bool td__gpu_attention_f32_supports(const td__op *op, const td__desc *const *in,
                                               const td__desc *out)
{
    if (op->n_inputs != 3 || af32_config() == 0) return false;
    const td__desc *q = in[0], *k = in[1], *v = in[2];
    if (q->dtype != TD_F32) return false;
    const int64_t l = q->dims[q->rank - 2], e = q->dims[q->rank - 1];
    const int64_t s = k->dims[k->rank - 2], ev = v->dims[v->rank - 1];
    if (e != ev || (e != 64 && e != 128)) return false;
    if (s == 0) return false; /* no keys: the lowering's empty sums */
    if (out->rank - 2 > AF32_MAX_BATCH) return false;
    int64_t nbatch = 1;
    for (uint32_t i = 0; i + 2 < out->rank; i++) nbatch *= out->dims[i];
    if (nbatch > 65535) return false;
    /* 32-bit row arithmetic inside a matrix; the grid's x dim */
    return l * e <= INT32_MAX / 2 && s * e <= INT32_MAX / 2;
}

extern "C" td_status td__gpu_exec_attention_f32(const td__gpu_exec *x, const td__op *op,
                                                const td__view *in, const td__view *out)
{
    const td__desc *q = &in[0].desc, *k = &in[1].desc, *v = &in[2].desc, *o = &out->desc;
    af32_args a;
    memset(&a, 0, sizeof a);
    const int64_t e = q->dims[q->rank - 1];
    a.l = (int)q->dims[q->rank - 2];
    a.s = (int)k->dims[k->rank - 2];
    a.causal = op->iattrs[0] != 0;
    a.scale = (float)op->fattrs[0];
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
    switch (af32_config() * 2 + (e == 128)) {
    case 4: return af32_launch<64, 64, 64, 2>(x, in, out, a, nbatch);
    case 5: return af32_launch<128, 64, 64, 1>(x, in, out, a, nbatch);
    case 6: return af32_launch<64, 128, 32, 2>(x, in, out, a, nbatch);
    case 7: return af32_launch<128, 128, 32, 1>(x, in, out, a, nbatch);
    case 8: return af32_launch<64, 64, 32, 2>(x, in, out, a, nbatch);
    case 9: return af32_launch<128, 64, 32, 2>(x, in, out, a, nbatch);
    case 3: return af32_launch<128, 128, 32, 1>(x, in, out, a, nbatch);
    case 10: return af32_launch<64, 128, 64, 1>(x, in, out, a, nbatch);
    case 11: return af32_launch<128, 128, 32, 1>(x, in, out, a, nbatch); /* 5 at 128: 1's */
    default: return af32_launch<64, 64, 64, 2>(x, in, out, a, nbatch); /* 1 (and 2) at 64 */
    }
}

#endif

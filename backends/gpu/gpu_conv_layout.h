/* gpu_conv_layout.h — the index math of gpu_conv.cu's implicit-GEMM convolution: the GEMM
 * view of a CONV op, the gather tables that find a B element in the input without a
 * division, the shared-memory layout of the A and B tiles, which thread copies which
 * element, where a warp's fragments come from and where each accumulator goes.
 *
 * GEMM view, per group g: D[m][j] = sum_k A[m][k] B[k][j] (+ bias[m]), m < C_out/G (the
 * output channel g C_out/G + m), j < N = images x output positions (flattened across the
 * images: j = image P + p), k < K = C_in/G x kernel volume in the weight's own order
 * (k = c kvol + (kd kh_n + kh) kw_n + kw). A is the weight, row-major [C_out][K], read as it
 * lies; B[k][j] is the input value output position j sees through k (zero in the padding),
 * never stored in global memory: a thread copying B element (k, j) adds a per-k table entry
 * (the offset of channel c and kernel offset (kd, kh, kw), and the three dilated kernel
 * offsets) to a per-column entry (the offset of the window's corner for image and output
 * position j, and the corner's three coordinates) and tests the coordinates' sum against
 * the input's size. Padding entries (k >= K, j >= N) have coordinates TD_CONV_FAR that fail
 * the test, so the loops have no tail branches.
 *
 * Why a header: these formulas are the part of the kernel a CPU cannot check by running it,
 * and a wrong one gives plausible-looking wrong numbers; tests/gpu/conv_frag_check.c runs
 * them on the host, with gpu_attention_layout.h's ldmatrix lane addresses and a model of
 * ldmatrix and mma.sync from the PTX ISA's fragment tables, over whole grids of several
 * conv shapes, against a direct convolution. C and CUDA C++; pure functions.
 *
 * Index width: the kernel keeps offsets in 32 bits. td_conv_shape_init refuses shapes whose
 * offsets or coordinates could leave [-2^28, 2^31) (the caller falls back to im2col + GEMM).
 */
#ifndef TD_BACKENDS_GPU_CONV_LAYOUT_H
#define TD_BACKENDS_GPU_CONV_LAYOUT_H

#include "backends/gpu/gpu_attention_layout.h"
#include <stdbool.h>
#include <stdint.h>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define TD_CONV_FN static __host__ __device__ __forceinline__
#else
#define TD_CONV_FN static inline
#endif

#define TD_CONV_BK 32       /* K per tile (two k16 mma steps) */
#define TD_CONV_THREADS 256 /* 8 warps a block */
/* cp.async pipeline depth of the channels-last path for a BM x BN tile: 4, or 3 for
 * 128x128 (3 x 16 KiB: CUDA's 48 KiB of static shared memory) */
#define TD_CONV_STAGES(bm, bn) ((bm) * (bn) >= 128 * 128 ? 3 : 4)
#define TD_CONV_FAR (-(1 << 29)) /* a coordinate no bounds test accepts */
#define TD_CONV_LIM (1 << 28)    /* |coordinate|, |dilated kernel offset| below this */

/* One launch's shape (normalised to three spatial dims, engine/window.h), by value. */
typedef struct td_conv_shape {
    int32_t n, c, co, groups, cg, cog; /* images, in/out channels, groups, per group */
    int32_t in[3], out[3], k[3], stride[3], pad[3], dil[3];
    int32_t kvol;  /* k[0] k[1] k[2] */
    int32_t L;     /* in[0] in[1] in[2]: one input channel plane */
    int32_t P;     /* out[0] out[1] out[2] */
    int32_t N;     /* n P: GEMM columns */
    int32_t K;     /* cg kvol: GEMM depth */
    int32_t nk;    /* K tiles: ceil(K / TD_CONV_BK) */
} td_conv_shape;

/* Per k: the offset of (c, kd, kh, kw) in a group's input planes, and the dilated kernel
 * offsets along d, h, w (TD_CONV_FAR for k >= K). */
typedef struct td_conv_kent {
    int32_t off, dd, dh, dw;
} td_conv_kent;

/* Per GEMM column j: the offset of the window's corner (image j / P, group g, position
 * j % P, each coordinate output * stride - pad_lo: possibly negative) in the input, and its
 * coordinates (TD_CONV_FAR for j >= N). */
typedef struct td_conv_col {
    int32_t base, d0, h0, w0;
} td_conv_col;

/* The shape from the window's sizes (int64 as engine/window.h holds them). Returns false
 * when a size or an offset of the kernel's 32-bit arithmetic could overflow: the input's
 * elements and every offset base + off must stay below 2^31, each coordinate and dilated
 * kernel offset within TD_CONV_LIM, the grid within CUDA's limits. */
TD_CONV_FN bool td_conv_shape_init(td_conv_shape *s, int64_t n, int64_t c, int64_t co,
                                   int64_t groups, const int64_t *in, const int64_t *out,
                                   const int64_t *k, const int64_t *stride, const int64_t *pad,
                                   const int64_t *dil)
{
    const int64_t lim = TD_CONV_LIM;
    if (n < 1 || c < 1 || co < 1 || groups < 1 || c % groups != 0 || co % groups != 0 ||
        groups > 65535)
        return false;
    int64_t L = 1, P = 1, kvol = 1;
    for (int d = 0; d < 3; d++) {
        if (in[d] < 1 || out[d] < 1 || k[d] < 1 || stride[d] < 1 || dil[d] < 1 || pad[d] < 0 ||
            in[d] >= lim || out[d] >= lim || pad[d] >= lim || k[d] >= lim || dil[d] >= lim ||
            stride[d] >= lim || (out[d] - 1) * stride[d] >= lim || (k[d] - 1) * dil[d] >= lim)
            return false;
        L *= in[d];
        P *= out[d];
        kvol *= k[d];
        if (L >= lim || P >= lim || kvol >= lim) return false;
    }
    /* in double (exact below 2^53, and products of values below 2^28 that exceed it are
     * far above the limits): the input's elements, the smallest corner offset (every
     * coordinate -pad) and the largest dilated kernel offset */
    const double total = (double)n * (double)c * (double)L, big = 2147483648.0;
    const double lo = ((double)pad[0] * (double)in[1] + (double)pad[1]) * (double)in[2] +
                      (double)pad[2];
    const double hi =
        ((double)((k[0] - 1) * dil[0]) * (double)in[1] + (double)((k[1] - 1) * dil[1])) *
            (double)in[2] + (double)((k[2] - 1) * dil[2]);
    const int64_t cg = c / groups;
    if (n >= lim || c >= lim || co >= lim || total + hi >= big || lo >= lim || hi >= lim ||
        (double)cg * (double)kvol >= lim || (double)n * (double)P >= lim ||
        (double)n * (double)P * (double)co >= big)
        return false;
    s->n = (int32_t)n;
    s->c = (int32_t)c;
    s->co = (int32_t)co;
    s->groups = (int32_t)groups;
    s->cg = (int32_t)cg;
    s->cog = (int32_t)(co / groups);
    for (int d = 0; d < 3; d++) {
        s->in[d] = (int32_t)in[d];
        s->out[d] = (int32_t)out[d];
        s->k[d] = (int32_t)k[d];
        s->stride[d] = (int32_t)stride[d];
        s->pad[d] = (int32_t)pad[d];
        s->dil[d] = (int32_t)dil[d];
    }
    s->kvol = (int32_t)kvol;
    s->L = (int32_t)L;
    s->P = (int32_t)P;
    s->N = (int32_t)(n * P);
    s->K = (int32_t)(cg * kvol);
    s->nk = (s->K + TD_CONV_BK - 1) / TD_CONV_BK;
    return true;
}

/* Table entry of GEMM row k (the table has nk TD_CONV_BK entries). */
TD_CONV_FN td_conv_kent td_conv_kentry(const td_conv_shape *s, int32_t k)
{
    td_conv_kent e;
    if (k >= s->K) {
        e.off = 0;
        e.dd = e.dh = e.dw = TD_CONV_FAR;
        return e;
    }
    const int32_t c = k / s->kvol, r = k % s->kvol, hw = s->k[1] * s->k[2];
    const int32_t kd = r / hw, kh = (r % hw) / s->k[2], kw = r % s->k[2];
    e.dd = kd * s->dil[0];
    e.dh = kh * s->dil[1];
    e.dw = kw * s->dil[2];
    e.off = c * s->L + (e.dd * s->in[1] + e.dh) * s->in[2] + e.dw;
    return e;
}

/* Column entry of GEMM column j in group g. */
TD_CONV_FN td_conv_col td_conv_column(const td_conv_shape *s, int32_t g, int32_t j)
{
    td_conv_col e;
    if (j >= s->N) {
        e.base = 0;
        e.d0 = e.h0 = e.w0 = TD_CONV_FAR;
        return e;
    }
    const int32_t img = j / s->P, p = j % s->P, ohw = s->out[1] * s->out[2];
    const int32_t od = p / ohw, oh = (p % ohw) / s->out[2], ow = p % s->out[2];
    e.d0 = od * s->stride[0] - s->pad[0];
    e.h0 = oh * s->stride[1] - s->pad[1];
    e.w0 = ow * s->stride[2] - s->pad[2];
    /* (img c + g cg) L < 2^31 and |corner| < 2^28: the int64 sum fits int32 */
    e.base = (int32_t)((int64_t)(img * s->c + g * s->cg) * s->L +
                       ((int64_t)e.d0 * s->in[1] + e.h0) * s->in[2] + e.w0);
    return e;
}

/* Whether B element (k, j) lies inside the input; then its element offset is
 * td_conv_gather_off (a wrapping 32-bit sum: the true offset, in [0, 2^31), whenever the
 * element is inside). */
TD_CONV_FN bool td_conv_inside(const td_conv_shape *s, td_conv_col col, td_conv_kent ke)
{
    return (uint32_t)(col.d0 + ke.dd) < (uint32_t)s->in[0] &&
           (uint32_t)(col.h0 + ke.dh) < (uint32_t)s->in[1] &&
           (uint32_t)(col.w0 + ke.dw) < (uint32_t)s->in[2];
}
TD_CONV_FN uint32_t td_conv_gather_off(td_conv_col col, td_conv_kent ke)
{
    return (uint32_t)col.base + (uint32_t)ke.off;
}

/* Whether the conv is pointwise: a 1x1x1 kernel at stride 1 without padding (each image's
 * [C/G, P] patch matrix is the input itself). */
TD_CONV_FN bool td_conv_pointwise(const td_conv_shape *s)
{
    bool pw = s->kvol == 1;
    for (int d = 0; d < 3; d++)
        pw = pw && s->stride[d] == 1 && s->pad[d] == 0 && s->in[d] == s->out[d];
    return pw;
}

/* ---- shared-memory tiles ----
 * A: [BM][TD_CONV_BK] (a row is 64 bytes: 4 chunks of 8 elements); chunk c / 8 XOR bits 1-2
 * of the row, so the 8 rows one ldmatrix phase reads (two to a 128-byte line) fall in 8
 * different 16-byte bank groups (c need not be a multiple of 8: an element's offset). B: [TD_CONV_BK][BN] (k rows, n contiguous) with
 * gpu_attention_layout.h's swizzle td_attn_swz (BN 64 or 128), read by ldmatrix .trans as
 * attention reads V. */
TD_CONV_FN int td_conv_swz_a(int r, int c)
{
    return r * TD_CONV_BK + ((((c >> 3) ^ ((r >> 1) & 3))) << 3) + (c & 7);
}
TD_CONV_FN int td_conv_swz_b(int r, int c, int bn)
{
    return td_attn_swz(r, c & ~7, bn) + (c & 7);
}

/* A by cp.async (the weight rows are 16-byte aligned: K % 8 == 0): copy i (i < BM / 64) of
 * thread tid is 8-element chunk ch of tile row r. */
TD_CONV_FN void td_conv_a_chunk(int tid, int i, int *r, int *ch)
{
    const int idx = tid + i * TD_CONV_THREADS;
    *r = idx >> 2;
    *ch = idx & 3;
}
/* A element by element (other K): pair i (i < BM / 16) of thread tid is tile row r,
 * columns c and c + 1 (c even; one 32-bit shared store). */
TD_CONV_FN void td_conv_a_pair(int tid, int i, int *r, int *c)
{
    const int idx = tid + i * TD_CONV_THREADS;
    *r = idx >> 4;
    *c = (idx & 15) * 2;
}

/* B gather: thread tid owns tile columns col and col + 1 (col even; consecutive threads
 * consecutive pairs, so a warp reads 64 consecutive positions of one k row) for the whole
 * K loop, and at pass i (i < BN / 16) tile row k0 + i kstep. */
TD_CONV_FN void td_conv_b_thread(int tid, int bn, int *col, int *k0, int *kstep)
{
    *col = 2 * (tid % (bn / 2));
    *k0 = tid / (bn / 2);
    *kstep = 2 * TD_CONV_THREADS / bn;
}

/* Warp w's tile of the block: rows [*r0, *r0 + BM / wm), columns [*c0, *c0 + BN / (8 / wm)).
 * Its A fragments: td_attn_q_rc(lane, r0 + 16 mt, kk); its B fragments for n8 tiles 2 np
 * and 2 np + 1: td_attn_v_rc(lane, kk, np) with the column plus c0 (.trans). */
TD_CONV_FN void td_conv_warp(int warp, int bm, int bn, int wm, int *r0, int *c0)
{
    *r0 = (warp % wm) * (bm / wm);
    *c0 = (warp / wm) * (bn / (8 / wm));
}

/* Element offset in the output [n, C_out, P] of GEMM row m (group g) and column j < N. */
TD_CONV_FN int32_t td_conv_out_off(const td_conv_shape *s, int32_t g, int32_t m, int32_t j)
{
    const int32_t img = j / s->P, p = j % s->P;
    return (img * s->co + g * s->cog + m) * s->P + p;
}

/* ---- the channels-last path (C/G a multiple of 8) ----
 * gpu_conv.cu first copies the input to NHWC (xt[(img L + spatial) C + c]) and the weight to
 * [C_out][kd][kh][kw][C/G] (wt), and orders K as k = ((kd kh_n + kh) kw_n + kw) cg + c. Then
 * 8 consecutive k (a chunk; K % 8 == 0, a chunk never straddles two kernel offsets) are 8
 * consecutive channels of one input pixel: one 16-byte cp.async, zero-filled (src-size 0)
 * outside the input, for both operands. The per-chunk table entry (td_conv_kent, nk 4
 * entries) holds the chunk's offset (kernel offset x C + channel) and its dilated kernel
 * offsets; the column entry the corner pixel's offset x C + g cg. Offsets are computed in
 * 64 bits and kept modulo 2^32: their wrapping sum is the true offset (below n C L < 2^31)
 * whenever the pixel is inside, and nothing else is read. */
TD_CONV_FN bool td_conv_nhwc_ok(const td_conv_shape *s)
{
    return s->cg % 8 == 0;
}
/* the element offset in the NCHW weight [C_out][C/G][kvol] of row o, K index k (the NHWC
 * order): the weight transpose's source */
TD_CONV_FN int64_t td_conv_wt_src(const td_conv_shape *s, int64_t o, int32_t k)
{
    const int32_t r = k / s->cg, c = k % s->cg;
    return o * s->K + (int64_t)c * s->kvol + r;
}
/* table entry of K chunk q (k = 8 q; the table has nk TD_CONV_BK / 8 entries) */
TD_CONV_FN td_conv_kent td_conv_kentry_nhwc(const td_conv_shape *s, int32_t q)
{
    td_conv_kent e;
    const int32_t k = 8 * q;
    if (k >= s->K) {
        e.off = 0;
        e.dd = e.dh = e.dw = TD_CONV_FAR;
        return e;
    }
    const int32_t r = k / s->cg, c = k % s->cg, hw = s->k[1] * s->k[2];
    const int32_t kd = r / hw, kh = (r % hw) / s->k[2], kw = r % s->k[2];
    e.dd = kd * s->dil[0];
    e.dh = kh * s->dil[1];
    e.dw = kw * s->dil[2];
    const int64_t sp = ((int64_t)e.dd * s->in[1] + e.dh) * s->in[2] + e.dw;
    e.off = (int32_t)(uint32_t)(uint64_t)(sp * s->c + c);
    return e;
}
/* column entry of GEMM column j in group g */
TD_CONV_FN td_conv_col td_conv_column_nhwc(const td_conv_shape *s, int32_t g, int32_t j)
{
    td_conv_col e;
    if (j >= s->N) {
        e.base = 0;
        e.d0 = e.h0 = e.w0 = TD_CONV_FAR;
        return e;
    }
    const int32_t img = j / s->P, p = j % s->P, ohw = s->out[1] * s->out[2];
    const int32_t od = p / ohw, oh = (p % ohw) / s->out[2], ow = p % s->out[2];
    e.d0 = od * s->stride[0] - s->pad[0];
    e.h0 = oh * s->stride[1] - s->pad[1];
    e.w0 = ow * s->stride[2] - s->pad[2];
    const int64_t sp = (int64_t)img * s->L + ((int64_t)e.d0 * s->in[1] + e.h0) * s->in[2] + e.w0;
    e.base = (int32_t)(uint32_t)(uint64_t)(sp * s->c + (int64_t)g * s->cg);
    return e;
}
/* B tile of this path: [BN][TD_CONV_BK] (a column's 32 k contiguous) with A's swizzle
 * td_conv_swz_a(j, k), copied as A is (td_conv_a_chunk: copy i < BN / 64 of thread tid is
 * chunk ch of tile column r) and read by plain ldmatrix as attention reads K: the fragments
 * of n8 tiles 2 np and 2 np + 1 at td_attn_k_rc(lane, np, kk), the row plus c0. */

/* ---- the f32 kernel (FFMA on the CUDA cores; gpu_conv.cu's k_conv_f32) ----
 * The same GEMM view and K order as the element-gather path (td_conv_kentry,
 * td_conv_column), but K tiles of TD_CONVF_BK (the shape's nk as td_convf_shape sets it:
 * the split-K functions below then count these tiles). A classic SIMT tiling of a BM x BN
 * block tile: the block's threads are a 16 x ntx grid (ntx = BN / TN: 16 or 8; 256 or 128
 * threads), thread (ty, tx) owns a TM x TN micro-tile (TM = BM / 16: 8 or 4; TN 8 or 4),
 * rows td_convf_row(ty, i), columns td_convf_col(tx, ntx, e): two (or one) runs of 4 rows
 * 64 apart, two (or one) runs of 4 columns 4 ntx apart. A warp is 4 ty x 8 tx, so each
 * float4 shared load of a k row touches 4 (A) or 8 (B) consecutive 16-byte chunks: one
 * wavefront, the rest broadcast. Tiles (gpu_conv.cu's TENSORD_GPU_CONV_F32): 128 x 128 and
 * 64 x 128 (256 threads, TN 8), 128 x 64 with 128 threads (TN 8) or 256 (TN 4). Shared
 * tiles are k-major, no swizzle: A [BK][BM] (the weight, transposed once into temp memory
 * as [G][nk BK][cogp], zero past K and C_out/G, cogp = C_out/G rounded up to 4: a tile row
 * is 16-byte cp.async chunks), B [BK][BN] (the input, one 4-byte cp.async per element,
 * zero-filled outside the input: any C/G, stride, dilation and padding, no channels-last
 * copy). Each output element is fmaf(a, b, acc) over k ascending (one chain a split), so
 * its bits depend on the shape and the split alone, never on the tile. */
#define TD_CONVF_BK 16
/* cp.async stages of a BM x BN tile: 3 x 16 KiB (128 x 128) or 4 x 12 KiB (64 x 128,
 * 128 x 64) of static shared memory */
#define TD_CONVF_STAGES(bm, bn) ((bm) + (bn) >= 256 ? 3 : 4)

/* the shape with nk counted in TD_CONVF_BK tiles */
TD_CONV_FN td_conv_shape td_convf_shape(const td_conv_shape *s)
{
    td_conv_shape f = *s;
    f.nk = (s->K + TD_CONVF_BK - 1) / TD_CONVF_BK;
    return f;
}
/* the transposed weight's row length: C_out/G rounded up to a 16-byte chunk */
TD_CONV_FN int32_t td_convf_cogp(const td_conv_shape *s)
{
    return (s->cog + 3) & ~3;
}
/* the NCHW weight element [C_out][K] that transposed element i ([G][nk BK][cogp]) copies,
 * or -1 for a zero (k >= K or m >= C_out/G) */
TD_CONV_FN int64_t td_convf_wt_src(const td_conv_shape *s, int64_t i)
{
    const int64_t cogp = td_convf_cogp(s), per = (int64_t)s->nk * TD_CONVF_BK * cogp;
    const int64_t g = i / per, k = (i % per) / cogp, m = i % cogp;
    if (k >= s->K || m >= s->cog) return -1;
    return (g * s->cog + m) * s->K + k;
}
/* A copy i (i < TD_CONVF_BK BM / (4 nt)) of thread tid of nt: the 4 rows [*m, *m + 4) of
 * tile k row *k */
TD_CONV_FN void td_convf_a_chunk(int tid, int i, int nt, int bm, int *k, int *m)
{
    const int idx = tid + i * nt;
    *k = idx / (bm / 4);
    *m = (idx % (bm / 4)) * 4;
}
/* B copy i (i < TD_CONVF_BK BN / nt; nt a multiple of BN) of thread tid of nt: tile k row
 * *k, column *col (a thread keeps its column: one td_conv_column; a warp copies 32
 * consecutive columns) */
TD_CONV_FN void td_convf_b_elem(int tid, int i, int nt, int bn, int *k, int *col)
{
    *col = tid % bn;
    *k = tid / bn + i * (nt / bn);
}
/* thread tid's place (ty, tx) in the 16 x ntx grid (ntx 8 or 16): warp w is ty in
 * [4 (w / (ntx / 8)), + 4), tx in [8 (w % (ntx / 8)), + 8) */
TD_CONV_FN void td_convf_thread(int tid, int ntx, int *ty, int *tx)
{
    const int warp = tid >> 5, lane = tid & 31, lg = ntx >> 4; /* log2(ntx / 8) */
    *ty = (warp >> lg) * 4 + (lane >> 3);
    *tx = (warp & lg) * 8 + (lane & 7);
}
/* micro-tile row i (i < TM) of thread row ty, column e (e < TN) of thread column tx */
TD_CONV_FN int td_convf_row(int ty, int i)
{
    return (i >> 2) * 64 + ty * 4 + (i & 3);
}
TD_CONV_FN int td_convf_col(int tx, int ntx, int e)
{
    return (e >> 2) * (4 * ntx) + tx * 4 + (e & 3);
}

/* ---- deterministic split-K (channels-last and f32 paths) ----
 * When a layer's grid is small (below TD_CONV_SPLIT_BLOCKS blocks: a constant, so the split
 * depends on the shape and the tile alone, never on the device), blockIdx.z = g S + split;
 * split sp sums K tiles [sp per, min(nk, (sp + 1) per)) (per = ceil(nk / S)) into an f32
 * partial [S][C_out][N], and a second kernel sums the S partials in ascending sp, adds the
 * bias and rounds once. */
#define TD_CONV_SPLIT_BLOCKS 128 /* below this many blocks, split (about one H100 wave) */
#define TD_CONV_SPLIT_TARGET 400 /* aim for about this many blocks (3 an SM of an H100) */
#define TD_CONV_SPLIT_MAX 8
#define TD_CONV_SPLIT_MIN_TILES 8 /* S <= nk / this: K tiles per split (the last may have fewer) */
/* A wanted split S within the bounds: at most TD_CONV_SPLIT_MAX and one per
 * TD_CONV_SPLIT_MIN_TILES K tiles, none empty (so possibly fewer); 1 below 2 */
TD_CONV_FN int td_conv_split_bounded(const td_conv_shape *s, int64_t S)
{
    if (S > TD_CONV_SPLIT_MAX) S = TD_CONV_SPLIT_MAX;
    if (S > s->nk / TD_CONV_SPLIT_MIN_TILES) S = s->nk / TD_CONV_SPLIT_MIN_TILES;
    if (S < 2) return 1;
    const int64_t per = (s->nk + S - 1) / S;
    return (int)((s->nk + per - 1) / per); /* no empty split */
}
/* S for a grid of `blocks` blocks (groups included); 1: no split */
TD_CONV_FN int td_conv_splits(const td_conv_shape *s, int64_t blocks)
{
    if (blocks >= TD_CONV_SPLIT_BLOCKS) return 1;
    return td_conv_split_bounded(s, (TD_CONV_SPLIT_TARGET + blocks - 1) / blocks);
}
/* The split of the channels-last f16/bf16 kernel (gpu_conv.cu; summed inside a thread-block
 * cluster): as many splits as keep the grid within one wave of per_sm blocks on each of
 * TD_CONV_WAVE_SMS multiprocessors (the tile's occupancy on an H100's 132: constants, so
 * the bits depend on the shape alone), at least 2, within td_conv_splits' bounds
 * (TD_CONV_SPLIT_MAX, TD_CONV_SPLIT_MIN_TILES K tiles a split); 1 when the grid is not
 * small. H100 (BENCHMARKS.md 2026-12-07): ResNet-50's layer4 at batch 32 (100 blocks of
 * 128 x 64) 0.073 ms with 3 splits at 3 blocks an SM (one wave of 300), 0.079-0.088 with 2 at
 * 2 an SM, 0.081-0.092 with td_conv_splits' 4 (400 blocks: a second, partial wave). */
#define TD_CONV_WAVE_SMS 132
TD_CONV_FN int td_conv_splits_wave(const td_conv_shape *s, int64_t blocks, int per_sm)
{
    if (blocks >= TD_CONV_SPLIT_BLOCKS) return 1;
    const int64_t S = (int64_t)per_sm * TD_CONV_WAVE_SMS / blocks;
    return td_conv_split_bounded(s, S < 2 ? 2 : S);
}
/* S when a timing aid asks for `force` splits over K: at most TD_CONV_SPLIT_MAX and one per
 * K tile, none empty (so possibly fewer than asked); 0 when `force` is out of that range
 * (not forced) */
TD_CONV_FN int td_conv_forced_splits(const td_conv_shape *s, int force)
{
    if (force < 1 || force > TD_CONV_SPLIT_MAX || force > s->nk) return 0;
    const int per = (s->nk + force - 1) / force;
    return (s->nk + per - 1) / per;
}
/* split sp of S: K tiles [*kt0, *kt1) */
TD_CONV_FN void td_conv_split_range(const td_conv_shape *s, int S, int sp, int *kt0, int *kt1)
{
    const int per = (s->nk + S - 1) / S;
    *kt0 = sp * per;
    *kt1 = *kt0 + per < s->nk ? *kt0 + per : s->nk;
}
/* element offset of (split sp, group g, row m, column j) in the partials */
TD_CONV_FN int64_t td_conv_part_off(const td_conv_shape *s, int sp, int32_t g, int32_t m,
                                    int32_t j)
{
    return ((int64_t)sp * s->co + (int64_t)g * s->cog + m) * s->N + j;
}

#endif

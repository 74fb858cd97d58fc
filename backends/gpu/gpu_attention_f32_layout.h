/* gpu_attention_f32_layout.h — who owns what in gpu_attention_f32.cu's f32 attention kernel:
 * the rows and columns of the score tile S and the output tile O each thread holds, and the
 * padded shared-memory layout of the Q, K, V and P tiles.
 *
 * Why a header: these formulas decide which thread computes which element and where it is
 * read; a wrong one gives plausible-looking wrong numbers. tests/gpu/attn_f32_check.c runs
 * them on the host: every element of S and O owned by exactly one thread, P's rows written
 * and read inside one half-warp, every access inside its tile, the shared-memory wavefronts
 * of each warp-wide access, and a phase-by-phase model of the kernel against a double
 * reference. C and CUDA C++; pure functions.
 *
 * A CTA has 2 BM threads: tid = 16 ty + tx, ty in [0, BM / 8) (a warp holds two ty, lanes
 * 0-15 and 16-31), tx in [0, 16). Thread (ty, tx) owns the 8 query rows ty + (BM / 8) i,
 * i < 8 (row-strided, so a warp's two ty read adjacent rows), the BN / 16 key columns of S
 * tx + 16 j, and the D / 16 output columns 4 tx + 64 h + e, h < D / 64, e < 4 (float4
 * reads of a V row cover 256 contiguous bytes per half-warp). The 16 threads of one ty share
 * its rows: the row's max and sum are combined by shuffles inside the half-warp.
 *
 * Strides (floats): Q and K rows D + 4, so a float4 at (r, c) lies in 16-byte bank group
 * (r + c / 4) mod 8 (D / 4 is a multiple of 8): the 16 keys tx + 16 j a half-warp reads fall
 * in 8 groups (2 wavefronts, the least for 256 distinct bytes), the two rows of a warp's
 * Q read in 2. V rows D (every lane reads the same key). P rows BN + 16 (= 16 mod 32): a
 * warp's scalar writes (rows r, r + 1, columns tx + 16 j) hit 32 different banks, and its
 * float4 reads (rows r, r + 1) two bank groups 4 apart.
 */
#ifndef TD_BACKENDS_GPU_ATTENTION_F32_LAYOUT_H
#define TD_BACKENDS_GPU_ATTENTION_F32_LAYOUT_H

#if defined(__CUDACC__)
#define TD_AF32_FN static __host__ __device__ __forceinline__
#else
#define TD_AF32_FN static inline
#endif

/* Row (within the CTA's BM queries) of a thread's i-th row. */
TD_AF32_FN int td_af32_row(int ty, int i, int bm)
{
    return ty + (bm / 8) * i;
}
/* Key column (within the BN-key tile) of a thread's j-th S column. */
TD_AF32_FN int td_af32_scol(int tx, int j)
{
    return tx + 16 * j;
}
/* Output column of a thread's float4 h (element e adds e). */
TD_AF32_FN int td_af32_ocol(int tx, int h)
{
    return 4 * tx + 64 * h;
}

/* Row strides in floats. */
TD_AF32_FN int td_af32_qstride(int d)
{
    return d + 4;
}
TD_AF32_FN int td_af32_kstride(int d)
{
    return d + 4;
}
TD_AF32_FN int td_af32_vstride(int d)
{
    return d;
}
TD_AF32_FN int td_af32_pstride(int bn)
{
    return bn + 16;
}

/* Float offsets of the tiles in dynamic shared memory: Q [BM], K [2][BN], V [2][BN],
 * P [BM] rows; td_af32_smem_floats is the total. */
TD_AF32_FN int td_af32_k_off(int d, int bm)
{
    return bm * td_af32_qstride(d);
}
TD_AF32_FN int td_af32_v_off(int d, int bm, int bn)
{
    return td_af32_k_off(d, bm) + 2 * bn * td_af32_kstride(d);
}
TD_AF32_FN int td_af32_p_off(int d, int bm, int bn)
{
    return td_af32_v_off(d, bm, bn) + 2 * bn * td_af32_vstride(d);
}
TD_AF32_FN int td_af32_smem_floats(int d, int bm, int bn)
{
    return td_af32_p_off(d, bm, bn) + bm * td_af32_pstride(bn);
}

/* Copy chunk idx (16 bytes) of a [rows, d] tile: its row and first column. */
TD_AF32_FN void td_af32_chunk(int idx, int d, int *r, int *c)
{
    *r = idx / (d / 4);
    *c = (idx % (d / 4)) * 4;
}

#endif

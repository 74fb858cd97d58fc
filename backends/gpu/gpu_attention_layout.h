/* gpu_attention_layout.h — where gpu_attention.cu's threads put and find tile elements:
 * the swizzled shared-memory layout of a [rows, D] tile of 16-bit elements, and the row and
 * column each lane hands to ldmatrix for the Q, K and V fragments of mma.m16n8k16.
 *
 * Why a header: these few formulas are the part of the kernel a CPU cannot run, and a wrong
 * one gives plausible-looking wrong numbers; tests/gpu/attn_frag_check.c runs them on the
 * host against an independent model of ldmatrix and mma.sync (PTX ISA, "Warp-level matrix
 * fragments for mma.m16n8k16" and "ldmatrix") and checks S = Q K^T and O = P V of a whole
 * warp element by element. C and CUDA C++; pure functions.
 *
 * ldmatrix .x4: lanes 8i .. 8i+7 give the row addresses of 8x8 matrix i (16 bytes each) and
 * every lane receives one 32-bit register per matrix. mma.m16n8k16 (f16/bf16): A (16x16,
 * row) fragment regs {rows 0-7 cols 0-7, rows 8-15 cols 0-7, rows 0-7 cols 8-15, rows 8-15
 * cols 8-15}; B (16x8, k x n) regs {k 0-7, k 8-15} of column n = lane / 4; C regs c0 c1 at
 * row lane / 4, c2 c3 at row lane / 4 + 8, columns 2 (lane % 4) + {0, 1}.
 */
#ifndef TD_BACKENDS_GPU_ATTENTION_LAYOUT_H
#define TD_BACKENDS_GPU_ATTENTION_LAYOUT_H

#if defined(__CUDACC__)
#define TD_ATTN_FN static __host__ __device__ __forceinline__
#else
#define TD_ATTN_FN static inline
#endif

/* Element offset of (r, c) in a tile of d columns, c a multiple of 8: 16-byte chunk c / 8
 * XOR (r mod 8), so the 8 rows one ldmatrix phase reads fall in 8 different bank groups
 * (d 64: a row is the 128 bytes of all 32 banks; d 128: two such). */
TD_ATTN_FN int td_attn_swz(int r, int c, int d)
{
    return r * d + ((((c >> 3) ^ (r & 7))) << 3);
}

/* Copy chunk idx of a [rows, d] tile: its row and 8-element chunk. */
TD_ATTN_FN void td_attn_chunk(int idx, int d, int *r, int *ch)
{
    *r = idx / (d / 8);
    *ch = idx % (d / 8);
}

/* Q (A operand, 16 rows from row0, k columns 16 kk ..): the row and column lane addresses.
 * Matrices: rows 0-7 / 8-15 (lane bit 3) and columns 0-7 / 8-15 (lane bit 4), which is the
 * A register order above. */
TD_ATTN_FN void td_attn_q_rc(int lane, int row0, int kk, int *r, int *c)
{
    *r = row0 + (lane & 15);
    *c = kk * 16 + (lane >> 4) * 8;
}

/* K (B operand of S = Q K^T: B[k][n] = K[n][k], K stored [key][dim]): keys 16 np .. 16 np +
 * 15, dims 16 kk ..; matrices {keys 0-7 dims 0-7, keys 0-7 dims 8-15, keys 8-15 dims 0-7,
 * keys 8-15 dims 8-15}: regs 0 1 are B of key tile 2 np, regs 2 3 of key tile 2 np + 1. */
TD_ATTN_FN void td_attn_k_rc(int lane, int np, int kk, int *r, int *c)
{
    *r = np * 16 + (lane & 7) + (lane >> 4) * 8;
    *c = kk * 16 + ((lane >> 3) & 1) * 8;
}

/* V (B operand of O = P V, V stored [key][dim], read transposed): keys 16 kk .. 16 kk + 15,
 * dims 16 dp ..; matrices {keys 0-7 dims 0-7, keys 8-15 dims 0-7, keys 0-7 dims 8-15, keys
 * 8-15 dims 8-15}: regs 0 1 are B of dim tile 2 dp, regs 2 3 of dim tile 2 dp + 1. */
TD_ATTN_FN void td_attn_v_rc(int lane, int kk, int dp, int *r, int *c)
{
    *r = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
    *c = dp * 16 + (lane >> 4) * 8;
}

/* The same offsets as base + constant, so that a kernel computes a few bases per thread
 * once and every ldmatrix in its loop takes an immediate: row 8 m + r and column 64 n + c
 * (c < 64) of the swizzled tile sit 8 m d + 64 n elements after (r, c), as the XOR touches
 * only the chunk's low 3 bits with row r's low 3 bits. K fragment (np, kk): the base of k
 * step kk % 4 plus td_attn_k_imm; V fragment (kk, dp): the base of dim pair dp % 4 plus
 * td_attn_v_imm; copy chunk tid + i threads: chunk tid's offset plus td_attn_copy_imm
 * (threads / (d / 8) rows a step, a multiple of 8). tests/gpu/attn_frag_check.c checks each
 * against the formulas above. */
TD_ATTN_FN int td_attn_k_base(int lane, int k4, int d)
{
    int r, c;
    td_attn_k_rc(lane, 0, k4, &r, &c);
    return td_attn_swz(r, c, d);
}
TD_ATTN_FN int td_attn_k_imm(int np, int kk, int d) { return np * 16 * d + (kk >> 2) * 64; }
TD_ATTN_FN int td_attn_v_base(int lane, int d4, int d)
{
    int r, c;
    td_attn_v_rc(lane, 0, d4, &r, &c);
    return td_attn_swz(r, c, d);
}
TD_ATTN_FN int td_attn_v_imm(int kk, int dp, int d) { return kk * 16 * d + (dp >> 2) * 64; }
TD_ATTN_FN int td_attn_copy_base(int tid, int d)
{
    int r, ch;
    td_attn_chunk(tid, d, &r, &ch);
    return td_attn_swz(r, ch * 8, d);
}
TD_ATTN_FN int td_attn_copy_imm(int i, int threads, int d) { return i * (threads / (d / 8)) * d; }

#endif

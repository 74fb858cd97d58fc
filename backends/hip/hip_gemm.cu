/* hip_gemm.cu — f32/f64 batched matmul for the HIP backend (f16/bf16 too, computed in f32):
 * our own tiled GEMM kernel,
 * because Debian ships neither rocBLAS nor hipBLAS. It implements td__gpu_matmul_float
 * (backends/gpu/gpu_internal.h), the entry the CUDA backend serves with cuBLAS.
 *
 * Plain CUDA/HIP kernel language, so the same file also builds with nvcc: tests/gpu builds
 * a CUDA module with this file in place of cuda_blas.c (backends/hip/nvcc-check), which is
 * how the kernel is checked for numbers on a real GPU while no AMD GPU is reachable.
 *
 * Kernel: row-major C[M,N] = A[M,K] B[K,N] per batch entry. A block of 16 x 16 threads
 * owns a 64 x 64 tile of C; thread (tx, ty) owns the 4 x 4 outputs at rows ty + 16 i and
 * columns tx + 16 j (i, j < 4), so a warp's stores to a row are contiguous. K is walked in
 * steps of 8: the block stages an 8 x 64 slice of A (stored k-major, so each k step reads
 * A values the warp shares) and an 8 x 64 slice of B in shared memory, zero-padded past the
 * edges, and every thread does 8 x 16 fused multiply-adds from registers.
 *
 * Numbers: each output is one fma chain over k = 0, 1, ..., K-1 in the element type (fma
 * is called explicitly; the module is otherwise built without contraction), so results are
 * the same on every run and independent of the tile sizes. Against the CPU (OpenBLAS, a
 * different summation order) the difference is within the usual dot-product bound
 * K * u * sum_k |a_ik b_kj| (u = 2^-24 for f32, 2^-53 for f64; Higham, "Accuracy and
 * Stability of Numerical Algorithms", 2nd ed., section 3.1), which is the bound
 * tests/unit/backends/conformance.c applies to every backend's matmul.
 *
 * Batches: `batch` walks the output's batch dims with operand strides (0 where an operand
 * is broadcast), as for the integer kernel. TF32 is a CUDA tensor-core format; this kernel
 * always computes in full f32 (allow_tf32 is a permission, never a requirement).
 *
 * Speed is secondary to being right and portable here: no tensor cores (MFMA on gfx90a),
 * no double buffering. On an H200 under nvcc it is far below cuBLAS (BENCHMARKS.md).
 */
#include "backends/gpu/gpu_ops.cuh"

namespace {

#define GEMM_TILE 64   /* outputs per block side */
#define GEMM_K 8       /* K step staged in shared memory */
#define GEMM_SIDE 16   /* threads per block side */
#define GEMM_PER 4     /* outputs per thread side (GEMM_TILE / GEMM_SIDE) */

template <typename T> TD_DEV T fma_t(T a, T b, T c);
template <> TD_DEV float fma_t<float>(float a, float b, float c) { return fmaf(a, b, c); }
template <> TD_DEV double fma_t<double>(double a, double b, double c) { return fma(a, b, c); }

/* Loads and stores between the element type S and the compute type T: f16/bf16 (S) are
 * computed in float (T) and each output rounded once; f32/f64 are their own. */
template <typename T, typename S> TD_DEV T ld(S v)
{
    if constexpr (td_is_half<S>::value) return v.f();
    else return v;
}
template <typename S, typename T> TD_DEV S st(T v)
{
    if constexpr (td_is_half<S>::value) return S::of(v);
    else return v;
}

template <typename T, typename S>
__global__ void k_gemm_tile(td__gpu_iter batch, int64_t nbatch, const S *a, const S *b, S *c,
                            int64_t m, int64_t n, int64_t k)
{
    __shared__ T as[GEMM_K][GEMM_TILE]; /* as[kk][r] = A[row0 + r, k0 + kk] */
    __shared__ T bs[GEMM_K][GEMM_TILE]; /* bs[kk][col] = B[k0 + kk, col0 + col] */
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int tid = ty * GEMM_SIDE + tx;
    const int64_t row_tiles = (m + GEMM_TILE - 1) / GEMM_TILE;
    const int64_t col_tiles = (n + GEMM_TILE - 1) / GEMM_TILE;
    for (int64_t z = blockIdx.z; z < nbatch; z += gridDim.z) {
        int64_t off[2];
        td_iter_offsets<int64_t, 2>(batch, z, off);
        const S *A = a + off[0], *B = b + off[1];
        S *C = c + z * m * n;
        for (int64_t rt = blockIdx.y; rt < row_tiles; rt += gridDim.y) {
            for (int64_t ct = blockIdx.x; ct < col_tiles; ct += gridDim.x) {
                const int64_t row0 = rt * GEMM_TILE, col0 = ct * GEMM_TILE;
                T acc[GEMM_PER][GEMM_PER];
#pragma unroll
                for (int i = 0; i < GEMM_PER; i++)
#pragma unroll
                    for (int j = 0; j < GEMM_PER; j++) acc[i][j] = (T)0;
                for (int64_t k0 = 0; k0 < k; k0 += GEMM_K) {
                    /* 512 elements of each slice, two per thread */
#pragma unroll
                    for (int l = 0; l < 2; l++) {
                        const int e = tid + l * GEMM_SIDE * GEMM_SIDE;
                        const int ar = e / GEMM_K, ak = e % GEMM_K;     /* A: row-fast k */
                        const int64_t gr = row0 + ar, gk = k0 + ak;
                        as[ak][ar] = (gr < m && gk < k) ? ld<T, S>(A[gr * k + gk]) : (T)0;
                        const int bk = e / GEMM_TILE, bc = e % GEMM_TILE; /* B: col-fast */
                        const int64_t hk = k0 + bk, hc = col0 + bc;
                        bs[bk][bc] = (hk < k && hc < n) ? ld<T, S>(B[hk * n + hc]) : (T)0;
                    }
                    __syncthreads();
#pragma unroll
                    for (int kk = 0; kk < GEMM_K; kk++) {
                        T av[GEMM_PER], bv[GEMM_PER];
#pragma unroll
                        for (int i = 0; i < GEMM_PER; i++) av[i] = as[kk][ty + GEMM_SIDE * i];
#pragma unroll
                        for (int j = 0; j < GEMM_PER; j++) bv[j] = bs[kk][tx + GEMM_SIDE * j];
#pragma unroll
                        for (int i = 0; i < GEMM_PER; i++)
#pragma unroll
                            for (int j = 0; j < GEMM_PER; j++)
                                acc[i][j] = fma_t<T>(av[i], bv[j], acc[i][j]);
                    }
                    __syncthreads();
                }
#pragma unroll
                for (int i = 0; i < GEMM_PER; i++) {
                    const int64_t r = row0 + ty + GEMM_SIDE * i;
                    if (r >= m) continue;
#pragma unroll
                    for (int j = 0; j < GEMM_PER; j++) {
                        const int64_t col = col0 + tx + GEMM_SIDE * j;
                        if (col < n) C[r * n + col] = st<S, T>(acc[i][j]);
                    }
                }
            }
        }
    }
}

unsigned grid_dim(int64_t tiles)
{
    return (unsigned)(tiles < 65535 ? tiles : 65535);
}

template <typename T, typename S = T>
void launch(const td__gpu_exec *x, const td__gpu_iter *batch, int64_t nbatch, int64_t m,
            int64_t n, int64_t k, const td__view *in, const td__view *out)
{
    dim3 grid(grid_dim((n + GEMM_TILE - 1) / GEMM_TILE), grid_dim((m + GEMM_TILE - 1) / GEMM_TILE),
              grid_dim(nbatch));
    dim3 block(GEMM_SIDE, GEMM_SIDE);
    k_gemm_tile<T, S><<<grid, block, 0, x->st->s>>>(*batch, nbatch, (const S *)in[0].data,
                                                    (const S *)in[1].data, (S *)out->data, m,
                                                    n, k);
}

} // namespace

extern "C" td_status td__gpu_matmul_float(const td__gpu_exec *x, const td__gpu_iter *batch,
                                          int64_t nbatch, int64_t m, int64_t n, int64_t k,
                                          const td__view *in, const td__view *out,
                                          bool allow_tf32)
{
    (void)allow_tf32;
    switch (out->desc.dtype) {
    case TD_F32: launch<float>(x, batch, nbatch, m, n, k, in, out); break;
    case TD_F64: launch<double>(x, batch, nbatch, m, n, k, in, out); break;
    case TD_F16: launch<float, td_f16>(x, batch, nbatch, m, n, k, in, out); break;
    case TD_BF16: launch<float, td_bf16>(x, batch, nbatch, m, n, k, in, out); break;
    default:
        return td__gpu_fail(x, TD_EINTERNAL, TD_GPU_KIND ": float matmul on dtype %u",
                            out->desc.dtype);
    }
    return td__gpu_launched(x, "gemm kernel");
}

extern "C" bool td__gpu_matmul_float_dtype(uint32_t dtype)
{
    /* f16/bf16: the same tiled kernel, loads widened to f32, f32 fma accumulation, each
     * output rounded once */
    return dtype == TD_F32 || dtype == TD_F64 || dtype == TD_F16 || dtype == TD_BF16;
}

extern "C" void td__gpu_matmul_release(void *state)
{
    (void)state; /* the kernel keeps nothing per stream */
}

/* gpu_matmul.cu — batched integer matmul (i32, i64, u8); float matmul is per vendor
 * (td__gpu_matmul_float: cuBLAS on CUDA, backends/hip/hip_gemm.cu on HIP).
 *
 * A plain shared-memory tiled kernel: 16 x 16 output tiles, K walked in steps of 16, with
 * wraparound arithmetic in the unsigned type of the output width (u8 accumulates in 32 bits
 * and truncates at the end, which is the same modular result). Integer results are exact,
 * so the order of the K sum does not matter for agreement with the CPU. Batch operand
 * offsets come from the broadcast iterator over the batch dims (stride 0 on broadcast
 * dims). Integer matmul is for correctness, not speed.
 */
#include "backends/gpu/gpu_ops.cuh"

namespace {

#define MM_TILE 16

template <typename T> struct acc_of { typedef uint32_t type; };
template <> struct acc_of<int64_t> { typedef uint64_t type; };

template <typename T>
__global__ void k_matmul_int(td__gpu_iter batch, int64_t nbatch, const T *a, const T *b, T *c,
                             int64_t m, int64_t n, int64_t k)
{
    typedef typename acc_of<T>::type U;
    __shared__ U as[MM_TILE][MM_TILE];
    __shared__ U bs[MM_TILE][MM_TILE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t row_tiles = (m + MM_TILE - 1) / MM_TILE;
    const int64_t col = (int64_t)blockIdx.x * MM_TILE + tx;
    for (int64_t z = blockIdx.z; z < nbatch; z += gridDim.z) {
        int64_t off[2];
        td_iter_offsets<int64_t, 2>(batch, z, off);
        const T *A = a + off[0], *B = b + off[1];
        T *C = c + z * m * n;
        for (int64_t rt = blockIdx.y; rt < row_tiles; rt += gridDim.y) {
            const int64_t row = rt * MM_TILE + ty;
            U acc = 0;
            for (int64_t k0 = 0; k0 < k; k0 += MM_TILE) {
                as[ty][tx] = (row < m && k0 + tx < k) ? (U)A[row * k + k0 + tx] : (U)0;
                bs[ty][tx] = (k0 + ty < k && col < n) ? (U)B[(k0 + ty) * n + col] : (U)0;
                __syncthreads();
#pragma unroll
                for (int kk = 0; kk < MM_TILE; kk++) acc += as[ty][kk] * bs[kk][tx];
                __syncthreads();
            }
            if (row < m && col < n) C[row * n + col] = (T)acc;
        }
    }
}

template <typename T>
void launch(const td__gpu_exec *x, const td__gpu_iter *batch, int64_t nbatch, int64_t m,
            int64_t n, int64_t k, const td__view *in, const td__view *out)
{
    int64_t gx = (n + MM_TILE - 1) / MM_TILE, gy = (m + MM_TILE - 1) / MM_TILE;
    dim3 grid((unsigned)gx, (unsigned)(gy < 65535 ? gy : 65535),
              (unsigned)(nbatch < 65535 ? nbatch : 65535));
    dim3 block(MM_TILE, MM_TILE);
    k_matmul_int<T><<<grid, block, 0, x->st->s>>>(*batch, nbatch, (const T *)in[0].data,
                                                  (const T *)in[1].data, (T *)out->data, m, n, k);
}

} // namespace

extern "C" td_status td__gpu_matmul_int(const td__gpu_exec *x, const td__gpu_iter *batch,
                                         int64_t nbatch, int64_t m, int64_t n, int64_t k,
                                         const td__view *in, const td__view *out)
{
    if ((n + MM_TILE - 1) / MM_TILE > INT32_MAX)
        return td__gpu_fail(x, TD_EUNSUPPORTED, "matmul: N=%lld is too large",
                             (long long)n);
    switch (out->desc.dtype) {
    case TD_I32: launch<int32_t>(x, batch, nbatch, m, n, k, in, out); break;
    case TD_I64: launch<int64_t>(x, batch, nbatch, m, n, k, in, out); break;
    case TD_U8: launch<uint8_t>(x, batch, nbatch, m, n, k, in, out); break;
    case TD_I8: launch<int8_t>(x, batch, nbatch, m, n, k, in, out); break;
    case TD_I16: launch<int16_t>(x, batch, nbatch, m, n, k, in, out); break;
    default:
        return td__gpu_fail(x, TD_EINTERNAL, TD_GPU_KIND ": integer matmul on dtype %u",
                             out->desc.dtype);
    }
    return td__gpu_launched(x, "integer matmul kernel");
}

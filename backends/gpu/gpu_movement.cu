/* gpu_movement.cu — PERMUTE SLICE EXPAND COPY CONCAT GATHER INDEX_SELECT, and SLICE_STEP FLIP
 * ROLL PAD REPEAT TRIL TRIU (the indexed ops of the family are in gpu_scatter.cu).
 *
 * PERMUTE, SLICE and EXPAND are one strided-copy kernel over the collapsed iterator: the
 * output is walked contiguously and the input read at (base, per-axis strides) — permuted
 * strides, an offset start, or stride 0 on broadcast axes. When the collapsed walk ends in
 * a transpose (the input's unit stride sits on the output's second-to-last axis), a tiled
 * kernel stages 32 x 32 tiles through shared memory so that both reads and writes are
 * coalesced. COPY is a device-to-device memcpy; CONCAT copies each input into its column
 * band of the output rows. Values move as bytes of their element size, never interpreted.
 *
 * GATHER and INDEX_SELECT read indices from tensor data. A first kernel checks every index
 * against [0, dim) and records the smallest offending position with atomicMin (the minimum
 * does not depend on timing); the host reads that word back — the one synchronisation these
 * ops need — and fails with TD_ERANGE naming the value and position exactly as the CPU
 * does, before anything is written. Negative indices are not wrapped.
 *
 * SLICE_STEP and FLIP run the strided copy with each axis' step folded into its stride
 * (negative strides read backwards from the base). ROLL, PAD and REPEAT are one kernel over
 * engine/remap.h's per-dim maps (the CPU's very functions); a constant pad's value is first
 * written to the stream's scratch word by td__gpu_fill, so its bits are FULL's. TRIL/TRIU
 * is one pass that keeps or zeroes each element. One thread per output element throughout.
 */
#include "backends/gpu/gpu_ops.cuh"
#include "engine/remap.h"
#include <inttypes.h>
#include <stdio.h>

namespace {

template <typename I, typename E>
__global__ void k_strided(td__gpu_iter it, const E *src, E *dst, I n)
{
    for (I i = (I)(blockIdx.x * blockDim.x + threadIdx.x); i < n; i += (I)(gridDim.x * blockDim.x)) {
        I off[1];
        td_iter_offsets<I, 1>(it, i, off);
        dst[i] = src[off[0]];
    }
}

#define TILE 32
#define TILE_ROWS 8

/* Output [outer..., P, Q] from input element (p, q) at base(outer) + p + q * sq. Grid:
 * x over Q tiles, y over P tiles, z (looped) over outer indices. */
template <typename E>
__global__ void k_transpose(td__gpu_iter it, const E *src, E *dst, int64_t p, int64_t q,
                            int64_t sq, int64_t outer)
{
    __shared__ E tile[TILE][TILE + 1];
    const int64_t q0 = (int64_t)blockIdx.x * TILE, p0 = (int64_t)blockIdx.y * TILE;
    for (int64_t o = blockIdx.z; o < outer; o += gridDim.z) {
        int64_t base = 0, rem = o;
        for (int d = it.rank - 3; d >= 0; d--) {
            base += (rem % it.dims[d]) * it.strides[0][d];
            rem /= it.dims[d];
        }
        /* read: threads along p (unit stride in the input) */
        for (int j = threadIdx.y; j < TILE; j += TILE_ROWS) {
            int64_t qq = q0 + j, pp = p0 + threadIdx.x;
            if (qq < q && pp < p) tile[j][threadIdx.x] = src[base + pp + qq * sq];
        }
        __syncthreads();
        /* write: threads along q (unit stride in the output) */
        E *d = dst + o * p * q;
        for (int j = threadIdx.y; j < TILE; j += TILE_ROWS) {
            int64_t pp = p0 + j, qq = q0 + threadIdx.x;
            if (qq < q && pp < p) d[pp * q + qq] = tile[threadIdx.x][j];
        }
        __syncthreads();
    }
}

template <typename E>
td_status strided_es(const td__gpu_exec *x, const td__gpu_iter &it, const void *src,
                     void *dst, int64_t n)
{
    const int r = it.rank;
    if (r >= 2 && it.strides[0][r - 2] == 1 && it.strides[0][r - 1] > 1 && it.dims[r - 2] >= TILE &&
        it.dims[r - 1] >= TILE) {
        int64_t p = it.dims[r - 2], q = it.dims[r - 1];
        int64_t outer = n / (p * q);
        int64_t gz = outer < 65535 ? outer : 65535;
        int64_t gx = (q + TILE - 1) / TILE, gy = (p + TILE - 1) / TILE;
        if (gx <= INT32_MAX && gy <= 65535) {
            dim3 grid((unsigned)gx, (unsigned)gy, (unsigned)gz), block(TILE, TILE_ROWS);
            k_transpose<E><<<grid, block, 0, x->st->s>>>(it, (const E *)src, (E *)dst, p, q,
                                                         it.strides[0][r - 1], outer);
            return td__gpu_launched(x, "transpose kernel");
        }
    }
    unsigned blocks = td__gpu_blocks(n, TD_GPU_THREADS);
    if (it.small)
        k_strided<int32_t, E><<<blocks, TD_GPU_THREADS, 0, x->st->s>>>(it, (const E *)src,
                                                                       (E *)dst, (int32_t)n);
    else
        k_strided<int64_t, E><<<blocks, TD_GPU_THREADS, 0, x->st->s>>>(it, (const E *)src,
                                                                       (E *)dst, n);
    return td__gpu_launched(x, "strided copy kernel");
}

/* Copy into `out` from `src` read with per-out-axis element strides `st`. */
td_status strided_copy(const td__gpu_exec *x, const td__view *out, const void *src,
                       const int64_t st[TD_MAX_RANK])
{
    int64_t n = td__gpu_nelem(&out->desc);
    if (n == 0) return TD_OK;
    td__gpu_iter it;
    td__gpu_iter_init(&it, &out->desc, 1, (const int64_t(*)[TD_MAX_RANK])st);
    switch (td__gpu_dtype_size(out->desc.dtype)) {
    case 1: return strided_es<uint8_t>(x, it, src, out->data, n);
    case 2: return strided_es<uint16_t>(x, it, src, out->data, n);
    case 4: return strided_es<uint32_t>(x, it, src, out->data, n);
    case 8: return strided_es<uint64_t>(x, it, src, out->data, n);
    }
    return td__gpu_fail(x, TD_EINTERNAL, TD_GPU_KIND ": strided copy of dtype %u", out->desc.dtype);
}

/* ---- concat ---- */

template <typename E>
__global__ void k_concat(const E *src, E *dst, int64_t outer, int64_t row, int64_t out_row,
                         int64_t col0)
{
    int64_t n = outer * row;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t o = i / row, j = i % row;
        dst[o * out_row + col0 + j] = src[i];
    }
}

template <typename E>
td_status concat_es(const td__gpu_exec *x, const td__op *op, const td__view *in,
                    const td__view *out, int64_t outer, int64_t inner)
{
    const int64_t axis = op->iattrs[0];
    const int64_t out_row = out->desc.dims[axis] * inner;
    int64_t col0 = 0;
    for (uint32_t k = 0; k < op->n_inputs; k++) {
        int64_t row = in[k].desc.dims[axis] * inner;
        if (row > 0 && outer > 0) {
            k_concat<E><<<td__gpu_blocks(outer * row, TD_GPU_THREADS), TD_GPU_THREADS, 0,
                          x->st->s>>>((const E *)in[k].data, (E *)out->data, outer, row,
                                      out_row, col0);
            td_status s = td__gpu_launched(x, "concat kernel");
            if (s != TD_OK) return s;
        }
        col0 += row;
    }
    return TD_OK;
}

td_status exec_concat(const td__gpu_exec *x, const td__op *op, const td__view *in,
                      const td__view *out)
{
    const td__desc *od = &out->desc;
    int64_t axis = op->iattrs[0];
    if (op->n_inputs < 1 || op->n_inputs > TD_OP_MAX_INPUTS || axis < 0 ||
        axis >= (int64_t)od->rank)
        return td__gpu_fail(x, TD_EINTERNAL, TD_GPU_KIND ": concat with %u inputs on axis %lld",
                             op->n_inputs, (long long)axis);
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < axis; d++) outer *= od->dims[d];
    for (uint32_t d = (uint32_t)axis + 1; d < od->rank; d++) inner *= od->dims[d];
    if (td__gpu_nelem(od) == 0) return TD_OK;
    switch (td__gpu_dtype_size(od->dtype)) {
    case 1: return concat_es<uint8_t>(x, op, in, out, outer, inner);
    case 2: return concat_es<uint16_t>(x, op, in, out, outer, inner);
    case 4: return concat_es<uint32_t>(x, op, in, out, outer, inner);
    case 8: return concat_es<uint64_t>(x, op, in, out, outer, inner);
    }
    return td__gpu_fail(x, TD_EINTERNAL, TD_GPU_KIND ": concat of dtype %u", od->dtype);
}

/* ---- gather / index_select ---- */

template <typename IT>
__global__ void k_check_index(const IT *idx, int64_t n, int64_t dim, unsigned long long *flag)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t v = idx[i];
        if (v < 0 || v >= dim) atomicMin(flag, (unsigned long long)i);
    }
}

/* TD_ERANGE for the first index outside [0, dim) (message as the CPU's), else TD_OK. */
td_status check_indices(const td__gpu_exec *x, const char *name, const td__view *idx,
                        int64_t dim)
{
    const int64_t n = td__gpu_nelem(&idx->desc);
    if (n == 0) return TD_OK;
    const bool is64 = idx->desc.dtype == TD_I64;
    td_status s = td__gpu_check(x, gpuMemsetAsync(x->st->flag, 0xff, sizeof(uint64_t), x->st->s),
                                 "index check");
    if (s != TD_OK) return s;
    unsigned blocks = td__gpu_blocks(n, TD_GPU_THREADS);
    unsigned long long *flag = (unsigned long long *)x->st->flag;
    if (is64)
        k_check_index<int64_t><<<blocks, TD_GPU_THREADS, 0, x->st->s>>>(
            (const int64_t *)idx->data, n, dim, flag);
    else
        k_check_index<int32_t><<<blocks, TD_GPU_THREADS, 0, x->st->s>>>(
            (const int32_t *)idx->data, n, dim, flag);
    s = td__gpu_launched(x, "index check kernel");
    uint64_t pos = UINT64_MAX;
    if (s == TD_OK) s = td__gpu_read_flag(x, &pos);
    if (s != TD_OK || pos == UINT64_MAX) return s;
    int64_t v = 0;
    if (is64) {
        s = td__gpu_check(x, gpuMemcpy(&v, (const int64_t *)idx->data + pos, sizeof v,
                                        gpuMemcpyDeviceToHost), "index read");
    } else {
        int32_t v32 = 0;
        s = td__gpu_check(x, gpuMemcpy(&v32, (const int32_t *)idx->data + pos, sizeof v32,
                                        gpuMemcpyDeviceToHost), "index read");
        v = v32;
    }
    if (s != TD_OK) return s;
    return td__gpu_fail(x, TD_ERANGE,
                         "%s: index %" PRId64 " out of range [0, %" PRId64 ") at position %" PRId64,
                         name, v, dim, (int64_t)pos);
}

template <typename I, typename E, typename IT>
__global__ void k_gather(td__gpu_iter it, const E *src, const IT *idx, E *dst, int64_t axis_stride,
                         I n)
{
    for (I i = (I)(blockIdx.x * blockDim.x + threadIdx.x); i < n; i += (I)(gridDim.x * blockDim.x)) {
        I off[2];
        td_iter_offsets<I, 2>(it, i, off);
        int64_t v = idx[off[0]];
        dst[i] = src[(int64_t)off[1] + v * axis_stride];
    }
}

template <typename E, typename IT>
void launch_gather(const td__gpu_exec *x, const td__gpu_iter &it, const void *src,
                   const void *idx, void *dst, int64_t axis_stride, int64_t n)
{
    unsigned blocks = td__gpu_blocks(n, TD_GPU_THREADS);
    if (it.small)
        k_gather<int32_t, E, IT><<<blocks, TD_GPU_THREADS, 0, x->st->s>>>(
            it, (const E *)src, (const IT *)idx, (E *)dst, axis_stride, (int32_t)n);
    else
        k_gather<int64_t, E, IT><<<blocks, TD_GPU_THREADS, 0, x->st->s>>>(
            it, (const E *)src, (const IT *)idx, (E *)dst, axis_stride, n);
}

template <typename E>
void gather_es(const td__gpu_exec *x, const td__gpu_iter &it, bool is64, const void *src,
               const void *idx, void *dst, int64_t axis_stride, int64_t n)
{
    if (is64) launch_gather<E, int64_t>(x, it, src, idx, dst, axis_stride, n);
    else launch_gather<E, int32_t>(x, it, src, idx, dst, axis_stride, n);
}

td_status exec_gather(const td__gpu_exec *x, const td__op *op, const td__view *in,
                      const td__view *out)
{
    const td__desc *xd = &in[0].desc, *id = &in[1].desc;
    int64_t axis = op->iattrs[0];
    if (axis < 0 || axis >= (int64_t)xd->rank || id->rank != xd->rank)
        return td__gpu_fail(x, TD_EINTERNAL, TD_GPU_KIND ": gather on axis %lld", (long long)axis);
    td_status s = check_indices(x, "gather", &in[1], xd->dims[axis]);
    if (s != TD_OK) return s;
    int64_t n = td__gpu_nelem(&out->desc);
    if (n == 0) return TD_OK;
    int64_t st[2][TD_MAX_RANK];
    td__desc_strides(id, st[0]);
    td__desc_strides(xd, st[1]);
    int64_t axis_stride = st[1][axis];
    st[1][axis] = 0;
    td__gpu_iter it;
    td__gpu_iter_init(&it, &out->desc, 2, (const int64_t(*)[TD_MAX_RANK])st);
    bool is64 = id->dtype == TD_I64;
    switch (td__gpu_dtype_size(out->desc.dtype)) {
    case 1: gather_es<uint8_t>(x, it, is64, in[0].data, in[1].data, out->data, axis_stride, n); break;
    case 2: gather_es<uint16_t>(x, it, is64, in[0].data, in[1].data, out->data, axis_stride, n); break;
    case 4: gather_es<uint32_t>(x, it, is64, in[0].data, in[1].data, out->data, axis_stride, n); break;
    case 8: gather_es<uint64_t>(x, it, is64, in[0].data, in[1].data, out->data, axis_stride, n); break;
    default: return td__gpu_fail(x, TD_EINTERNAL, TD_GPU_KIND ": gather of dtype %u", out->desc.dtype);
    }
    return td__gpu_launched(x, "gather kernel");
}

/* out[o, j, q] = x[o, idx[j], q] over [outer, nidx, inner]. */
template <typename E, typename IT>
__global__ void k_index_select(const E *src, const IT *idx, E *dst, int64_t nidx, int64_t dim,
                               int64_t inner, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t q = i % inner, t = i / inner;
        int64_t j = t % nidx, o = t / nidx;
        dst[i] = src[(o * dim + (int64_t)idx[j]) * inner + q];
    }
}

template <typename E>
void select_es(const td__gpu_exec *x, bool is64, const void *src, const void *idx, void *dst,
               int64_t nidx, int64_t dim, int64_t inner, int64_t n)
{
    unsigned blocks = td__gpu_blocks(n, TD_GPU_THREADS);
    if (is64)
        k_index_select<E, int64_t><<<blocks, TD_GPU_THREADS, 0, x->st->s>>>(
            (const E *)src, (const int64_t *)idx, (E *)dst, nidx, dim, inner, n);
    else
        k_index_select<E, int32_t><<<blocks, TD_GPU_THREADS, 0, x->st->s>>>(
            (const E *)src, (const int32_t *)idx, (E *)dst, nidx, dim, inner, n);
}

td_status exec_index_select(const td__gpu_exec *x, const td__op *op, const td__view *in,
                            const td__view *out)
{
    const td__desc *xd = &in[0].desc;
    int64_t axis = op->iattrs[0];
    if (axis < 0 || axis >= (int64_t)xd->rank)
        return td__gpu_fail(x, TD_EINTERNAL, TD_GPU_KIND ": index_select on axis %lld",
                             (long long)axis);
    td_status s = check_indices(x, "index_select", &in[1], xd->dims[axis]);
    if (s != TD_OK) return s;
    int64_t n = td__gpu_nelem(&out->desc);
    if (n == 0) return TD_OK;
    int64_t inner = 1;
    for (uint32_t d = (uint32_t)axis + 1; d < xd->rank; d++) inner *= xd->dims[d];
    int64_t nidx = td__gpu_nelem(&in[1].desc), dim = xd->dims[axis];
    bool is64 = in[1].desc.dtype == TD_I64;
    switch (td__gpu_dtype_size(xd->dtype)) {
    case 1: select_es<uint8_t>(x, is64, in[0].data, in[1].data, out->data, nidx, dim, inner, n); break;
    case 2: select_es<uint16_t>(x, is64, in[0].data, in[1].data, out->data, nidx, dim, inner, n); break;
    case 4: select_es<uint32_t>(x, is64, in[0].data, in[1].data, out->data, nidx, dim, inner, n); break;
    case 8: select_es<uint64_t>(x, is64, in[0].data, in[1].data, out->data, nidx, dim, inner, n); break;
    default: return td__gpu_fail(x, TD_EINTERNAL, TD_GPU_KIND ": index_select of dtype %u", xd->dtype);
    }
    return td__gpu_launched(x, "index_select kernel");
}

/* ---- roll / pad / repeat ---- */

struct remap_params {
    td__remap m;
    int rank;
    int64_t od[TD_MAX_RANK], xs[TD_MAX_RANK];
};

template <typename E>
__global__ void k_remap(remap_params p, const E *src, E *dst, const E *fill, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t rem = i, off = 0;
        bool pad = false;
        for (int d = p.rank - 1; d >= 0; d--) {
            int64_t c = rem % p.od[d];
            rem /= p.od[d];
            int64_t sc = td__remap_src(&p.m, d, c);
            if (sc < 0) pad = true;
            off += sc * p.xs[d];
        }
        dst[i] = pad ? *fill : src[off];
    }
}

template <typename E>
void remap_es(const td__gpu_exec *x, const remap_params &p, const void *src, void *dst,
              const void *fill, int64_t n)
{
    k_remap<E><<<td__gpu_blocks(n, TD_GPU_THREADS), TD_GPU_THREADS, 0, x->st->s>>>(
        p, (const E *)src, (E *)dst, (const E *)fill, n);
}

td_status exec_remap(const td__gpu_exec *x, const td__op *op, const td__view *in,
                     const td__view *out)
{
    const td__desc *xd = &in[0].desc, *od = &out->desc;
    const int64_t n = td__gpu_nelem(od);
    if (n == 0) return TD_OK;
    remap_params p;
    memset(&p, 0, sizeof p);
    if (!td__remap_init(&p.m, op, xd))
        return td__gpu_fail(x, TD_EINTERNAL, TD_GPU_KIND ": remap of opcode %u", op->opcode);
    p.rank = (int)od->rank;
    for (uint32_t d = 0; d < od->rank; d++) p.od[d] = od->dims[d];
    td__desc_strides(xd, p.xs);
    /* the pad value in the dtype, by FULL's conversion, in the stream's scratch word */
    td_status s = td__gpu_fill(x, od->dtype, x->st->flag, 1, op->opcode == TD_OP_PAD ? op->fattrs[0] : 0.0);
    if (s != TD_OK) return s;
    switch (td__gpu_dtype_size(od->dtype)) {
    case 1: remap_es<uint8_t>(x, p, in[0].data, out->data, x->st->flag, n); break;
    case 2: remap_es<uint16_t>(x, p, in[0].data, out->data, x->st->flag, n); break;
    case 4: remap_es<uint32_t>(x, p, in[0].data, out->data, x->st->flag, n); break;
    case 8: remap_es<uint64_t>(x, p, in[0].data, out->data, x->st->flag, n); break;
    default: return td__gpu_fail(x, TD_EINTERNAL, TD_GPU_KIND ": remap of dtype %u", od->dtype);
    }
    return td__gpu_launched(x, "remap kernel");
}

/* ---- tril / triu ---- */

template <typename E>
__global__ void k_tri(const E *src, E *dst, int64_t m, int64_t ncol, int64_t k, bool upper,
                      int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t c = i % ncol, r = (i / ncol) % m;
        bool keep = upper ? c - r >= k : c - r <= k;
        dst[i] = keep ? src[i] : E(0);
    }
}

td_status exec_tri(const td__gpu_exec *x, const td__op *op, const td__view *in,
                   const td__view *out)
{
    const td__desc *od = &out->desc;
    const int64_t n = td__gpu_nelem(od);
    if (n == 0) return TD_OK;
    const int64_t m = od->dims[od->rank - 2], nc = od->dims[od->rank - 1];
    int64_t k = op->iattrs[0];
    k = k < -m - 1 ? -m - 1 : k > nc + 1 ? nc + 1 : k; /* keeps c - r vs k exact */
    const bool up = op->opcode == TD_OP_TRIU;
    const unsigned b = td__gpu_blocks(n, TD_GPU_THREADS);
    switch (td__gpu_dtype_size(od->dtype)) {
    case 1: k_tri<uint8_t><<<b, TD_GPU_THREADS, 0, x->st->s>>>((const uint8_t *)in[0].data, (uint8_t *)out->data, m, nc, k, up, n); break;
    case 2: k_tri<uint16_t><<<b, TD_GPU_THREADS, 0, x->st->s>>>((const uint16_t *)in[0].data, (uint16_t *)out->data, m, nc, k, up, n); break;
    case 4: k_tri<uint32_t><<<b, TD_GPU_THREADS, 0, x->st->s>>>((const uint32_t *)in[0].data, (uint32_t *)out->data, m, nc, k, up, n); break;
    case 8: k_tri<uint64_t><<<b, TD_GPU_THREADS, 0, x->st->s>>>((const uint64_t *)in[0].data, (uint64_t *)out->data, m, nc, k, up, n); break;
    default: return td__gpu_fail(x, TD_EINTERNAL, TD_GPU_KIND ": tril/triu of dtype %u", od->dtype);
    }
    return td__gpu_launched(x, "tril/triu kernel");
}

} // namespace

extern "C" td_status td__gpu_check_indices(const td__gpu_exec *x, const char *name,
                                           const td__view *idx, int64_t dim)
{
    return check_indices(x, name, idx, dim);
}

extern "C" td_status td__gpu_exec_movement(const td__gpu_exec *x, const td__op *op,
                                            const td__view *in, const td__view *out)
{
    const td__desc *xd = &in[0].desc, *od = &out->desc;
    if (op->opcode == TD_OP_CONCAT) return exec_concat(x, op, in, out);
    if (op->opcode == TD_OP_GATHER) return exec_gather(x, op, in, out);
    if (op->opcode == TD_OP_INDEX_SELECT) return exec_index_select(x, op, in, out);
    switch (op->opcode) {
    case TD_OP_ROLL: case TD_OP_PAD: case TD_OP_REPEAT: return exec_remap(x, op, in, out);
    case TD_OP_TRIL: case TD_OP_TRIU: return exec_tri(x, op, in, out);
    case TD_OP_ONE_HOT: case TD_OP_MASKED_FILL: case TD_OP_SCATTER: case TD_OP_SCATTER_ADD:
    case TD_OP_INDEX_ADD: case TD_OP_GATHER_ND:
        return td__gpu_exec_indexed(x, op, in, out);
    }
    const int64_t n = td__gpu_nelem(od);
    const size_t es = td__gpu_dtype_size(od->dtype);
    if (es == 0) return td__gpu_fail(x, TD_EINTERNAL, TD_GPU_KIND ": dtype %u", od->dtype);
    if (n == 0) return TD_OK;
    int64_t own[TD_MAX_RANK], st[TD_MAX_RANK];
    td__desc_strides(xd, own);
    switch (op->opcode) {
    case TD_OP_COPY:
        return td__gpu_check(x, gpuMemcpyAsync(out->data, in[0].data, (size_t)n * es,
                                                gpuMemcpyDeviceToDevice, x->st->s),
                              "copy");
    case TD_OP_PERMUTE:
        for (uint32_t d = 0; d < od->rank; d++) {
            int64_t p = op->iattrs[d];
            if (p < 0 || p >= (int64_t)xd->rank)
                return td__gpu_fail(x, TD_EINTERNAL, TD_GPU_KIND ": permute entry %lld", (long long)p);
            st[d] = own[p];
        }
        return strided_copy(x, out, in[0].data, st);
    case TD_OP_SLICE: {
        int64_t base = 0;
        for (uint32_t d = 0; d < xd->rank; d++) base += op->iattrs[d] * own[d];
        return strided_copy(x, out, (const char *)in[0].data + (size_t)base * es, own);
    }
    case TD_OP_EXPAND:
        td__desc_bcast_strides(xd, od, st);
        return strided_copy(x, out, in[0].data, st);
    case TD_OP_SLICE_STEP:
    case TD_OP_FLIP: {
        /* out[i] = x[start + i * step] per axis: base start, stride step * own */
        int64_t base = 0;
        const uint32_t r = xd->rank;
        for (uint32_t d = 0; d < r; d++) {
            bool flip = op->opcode == TD_OP_FLIP && ((op->iattrs[0] >> d) & 1);
            int64_t start = op->opcode == TD_OP_FLIP ? (flip ? xd->dims[d] - 1 : 0) : op->iattrs[d];
            int64_t step = op->opcode == TD_OP_FLIP ? (flip ? -1 : 1) : op->iattrs[2 * r + d];
            base += start * own[d];
            st[d] = step * own[d];
        }
        return strided_copy(x, out, (const char *)in[0].data + base * (int64_t)es, st);
    }
    }
    return td__gpu_fail(x, TD_EINTERNAL, TD_GPU_KIND ": movement opcode %u", op->opcode);
}

/* gpu_scatter.cu — the indexed movement ops of issue 13 on the GPU: SCATTER SCATTER_ADD
 * INDEX_ADD GATHER_ND ONE_HOT MASKED_FILL, with the CPU's contract (cpu_scatter.c).
 *
 * Determinism without atomics: SCATTER and SCATTER_ADD give one thread each line of the
 * index (the positions that share every coordinate off the axis, whose destinations no
 * other line can reach), and the thread walks the line in ascending order; INDEX_ADD gives
 * one thread each destination column (outer index, inner index) and walks j ascending. So
 * every destination receives its contributions in the CPU's order, each add rounded to the
 * dtype the same way (f16/bf16 through f32 and gpu_half.h's rounding, which equals
 * convert.h's for every non-NaN), and the bits do not depend on scheduling. A NaN result of
 * a float add is the GPU's canonical NaN (conformance matches any NaN with any NaN).
 *
 * Indices are checked first (gpu_movement.cu's check, or the per-dim check of GATHER_ND
 * here), the offending value and position read back and reported as the CPU does, before
 * anything is written. A constant (masked_fill's value, one_hot's 1) is written to the
 * stream's scratch word by td__gpu_fill, so its bits are FULL's.
 */
#include "backends/gpu/gpu_ops.cuh"
#include <inttypes.h>
#include <string.h>

namespace {

/* d += s, rounded to the element type (unsigned integer types wrap). */
TD_DEV void acc(float &d, float s) { d = d + s; }
TD_DEV void acc(double &d, double s) { d = d + s; }
TD_DEV void acc(uint8_t &d, uint8_t s) { d = (uint8_t)(d + s); }
TD_DEV void acc(uint16_t &d, uint16_t s) { d = (uint16_t)(d + s); }
TD_DEV void acc(uint32_t &d, uint32_t s) { d = d + s; }
TD_DEV void acc(uint64_t &d, uint64_t s) { d = d + s; }
TD_DEV void acc(td_f16 &d, td_f16 s) { d = td_f16::of(d.f() + s.f()); }
TD_DEV void acc(td_bf16 &d, td_bf16 s) { d = td_bf16::of(d.f() + s.f()); }

struct scatter_params {
    int rank, axis;
    int64_t len;
    int64_t idims[TD_MAX_RANK], ist[TD_MAX_RANK], sst[TD_MAX_RANK], xst[TD_MAX_RANK];
};

template <typename E, typename IT, bool ADD>
__global__ void k_scatter(scatter_params p, const IT *idx, const E *src, E *dst, int64_t lines)
{
    for (int64_t l = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; l < lines;
         l += (int64_t)gridDim.x * blockDim.x) {
        int64_t io = 0, so = 0, xo = 0, rem = l;
        for (int d = p.rank - 1; d >= 0; d--) {
            if (d == p.axis) continue;
            int64_t c = rem % p.idims[d];
            rem /= p.idims[d];
            io += c * p.ist[d];
            so += c * p.sst[d];
            xo += c * p.xst[d];
        }
        for (int64_t j = 0; j < p.len; j++) {
            int64_t v = idx[io + j * p.ist[p.axis]];
            E *d = dst + xo + v * p.xst[p.axis];
            const E s = src[so + j * p.sst[p.axis]];
            if (ADD) acc(*d, s);
            else *d = s;
        }
    }
}

template <typename E, bool ADD>
void scatter_es(const td__gpu_exec *x, const scatter_params &p, bool is64, const void *idx,
                const void *src, void *dst, int64_t lines)
{
    const unsigned b = td__gpu_blocks(lines, TD_GPU_THREADS);
    if (is64)
        k_scatter<E, int64_t, ADD><<<b, TD_GPU_THREADS, 0, x->st->s>>>(
            p, (const int64_t *)idx, (const E *)src, (E *)dst, lines);
    else
        k_scatter<E, int32_t, ADD><<<b, TD_GPU_THREADS, 0, x->st->s>>>(
            p, (const int32_t *)idx, (const E *)src, (E *)dst, lines);
}

td_status exec_scatter(const td__gpu_exec *x, const td__op *op, const td__view *in,
                       const td__view *out)
{
    const td__desc *xd = &in[0].desc, *id = &in[1].desc;
    const int64_t axis = op->iattrs[0];
    const bool add = op->opcode == TD_OP_SCATTER_ADD;
    td_status s = td__gpu_check_indices(x, add ? "scatter_add" : "scatter", &in[1], xd->dims[axis]);
    if (s != TD_OK) return s;
    const int64_t n = td__gpu_nelem(xd), ni = td__gpu_nelem(id);
    const size_t es = td__gpu_dtype_size(xd->dtype);
    if (n > 0) {
        s = td__gpu_check(x, gpuMemcpyAsync(out->data, in[0].data, (size_t)n * es,
                                            gpuMemcpyDeviceToDevice, x->st->s), "scatter copy");
        if (s != TD_OK) return s;
    }
    if (ni == 0) return TD_OK;
    scatter_params p;
    memset(&p, 0, sizeof p);
    p.rank = (int)id->rank;
    p.axis = (int)axis;
    p.len = id->dims[axis];
    for (uint32_t d = 0; d < id->rank; d++) p.idims[d] = id->dims[d];
    td__desc_strides(id, p.ist);
    td__desc_strides(&in[2].desc, p.sst);
    td__desc_strides(xd, p.xst);
    const int64_t lines = ni / p.len;
    const bool is64 = id->dtype == TD_I64;
    const void *ix = in[1].data, *src = in[2].data;
    void *dst = out->data;
    if (!add) {
        switch (es) {
        case 1: scatter_es<uint8_t, false>(x, p, is64, ix, src, dst, lines); break;
        case 2: scatter_es<uint16_t, false>(x, p, is64, ix, src, dst, lines); break;
        case 4: scatter_es<uint32_t, false>(x, p, is64, ix, src, dst, lines); break;
        case 8: scatter_es<uint64_t, false>(x, p, is64, ix, src, dst, lines); break;
        default: return td__gpu_fail(x, TD_EINTERNAL, TD_GPU_KIND ": scatter of dtype %u", xd->dtype);
        }
        return td__gpu_launched(x, "scatter kernel");
    }
    switch (xd->dtype) {
    case TD_F32: scatter_es<float, true>(x, p, is64, ix, src, dst, lines); break;
    case TD_F64: scatter_es<double, true>(x, p, is64, ix, src, dst, lines); break;
    case TD_F16: scatter_es<td_f16, true>(x, p, is64, ix, src, dst, lines); break;
    case TD_BF16: scatter_es<td_bf16, true>(x, p, is64, ix, src, dst, lines); break;
    case TD_I8: case TD_U8: scatter_es<uint8_t, true>(x, p, is64, ix, src, dst, lines); break;
    case TD_I16: scatter_es<uint16_t, true>(x, p, is64, ix, src, dst, lines); break;
    case TD_I32: scatter_es<uint32_t, true>(x, p, is64, ix, src, dst, lines); break;
    case TD_I64: scatter_es<uint64_t, true>(x, p, is64, ix, src, dst, lines); break;
    default: return td__gpu_fail(x, TD_EINTERNAL, TD_GPU_KIND ": scatter_add of dtype %u", xd->dtype);
    }
    return td__gpu_launched(x, "scatter_add kernel");
}

/* ---- index_add: one thread per destination column (o, i), j ascending ---- */

template <typename E, typename IT>
__global__ void k_index_add(const IT *idx, const E *src, E *dst, int64_t m, int64_t dim,
                            int64_t inner, int64_t cols)
{
    for (int64_t u = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; u < cols;
         u += (int64_t)gridDim.x * blockDim.x) {
        const int64_t o = u / inner, i = u % inner;
        for (int64_t j = 0; j < m; j++) {
            const int64_t v = idx[j];
            acc(dst[(o * dim + v) * inner + i], src[(o * m + j) * inner + i]);
        }
    }
}

template <typename E>
void index_add_es(const td__gpu_exec *x, bool is64, const void *idx, const void *src, void *dst,
                  int64_t m, int64_t dim, int64_t inner, int64_t cols)
{
    const unsigned b = td__gpu_blocks(cols, TD_GPU_THREADS);
    if (is64)
        k_index_add<E, int64_t><<<b, TD_GPU_THREADS, 0, x->st->s>>>(
            (const int64_t *)idx, (const E *)src, (E *)dst, m, dim, inner, cols);
    else
        k_index_add<E, int32_t><<<b, TD_GPU_THREADS, 0, x->st->s>>>(
            (const int32_t *)idx, (const E *)src, (E *)dst, m, dim, inner, cols);
}

td_status exec_index_add(const td__gpu_exec *x, const td__op *op, const td__view *in,
                         const td__view *out)
{
    const td__desc *xd = &in[0].desc;
    const int64_t axis = op->iattrs[0];
    td_status s = td__gpu_check_indices(x, "index_add", &in[1], xd->dims[axis]);
    if (s != TD_OK) return s;
    const int64_t n = td__gpu_nelem(xd);
    if (n > 0) {
        s = td__gpu_check(x, gpuMemcpyAsync(out->data, in[0].data,
                                            (size_t)n * td__gpu_dtype_size(xd->dtype),
                                            gpuMemcpyDeviceToDevice, x->st->s), "index_add copy");
        if (s != TD_OK) return s;
    }
    const int64_t m = td__gpu_nelem(&in[1].desc), dim = xd->dims[axis];
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < axis; d++) outer *= xd->dims[d];
    for (uint32_t d = (uint32_t)axis + 1; d < xd->rank; d++) inner *= xd->dims[d];
    const int64_t cols = outer * inner;
    if (m == 0 || cols == 0) return TD_OK;
    const bool is64 = in[1].desc.dtype == TD_I64;
    const void *ix = in[1].data, *src = in[2].data;
    void *dst = out->data;
    switch (xd->dtype) {
    case TD_F32: index_add_es<float>(x, is64, ix, src, dst, m, dim, inner, cols); break;
    case TD_F64: index_add_es<double>(x, is64, ix, src, dst, m, dim, inner, cols); break;
    case TD_F16: index_add_es<td_f16>(x, is64, ix, src, dst, m, dim, inner, cols); break;
    case TD_BF16: index_add_es<td_bf16>(x, is64, ix, src, dst, m, dim, inner, cols); break;
    case TD_I8: case TD_U8: index_add_es<uint8_t>(x, is64, ix, src, dst, m, dim, inner, cols); break;
    case TD_I16: index_add_es<uint16_t>(x, is64, ix, src, dst, m, dim, inner, cols); break;
    case TD_I32: index_add_es<uint32_t>(x, is64, ix, src, dst, m, dim, inner, cols); break;
    case TD_I64: index_add_es<uint64_t>(x, is64, ix, src, dst, m, dim, inner, cols); break;
    default: return td__gpu_fail(x, TD_EINTERNAL, TD_GPU_KIND ": index_add of dtype %u", xd->dtype);
    }
    return td__gpu_launched(x, "index_add kernel");
}

/* ---- gather_nd ---- */

struct nd_params {
    int64_t k, inner;
    int64_t dims[TD_MAX_RANK], xst[TD_MAX_RANK];
};

template <typename IT>
__global__ void k_check_nd(const IT *idx, int64_t n, nd_params p, unsigned long long *flag)
{
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n;
         e += (int64_t)gridDim.x * blockDim.x) {
        int64_t v = idx[e], c = e % p.k;
        if (v < 0 || v >= p.dims[c]) atomicMin(flag, (unsigned long long)e);
    }
}

template <typename E, typename IT>
__global__ void k_gather_nd(const IT *idx, const E *src, E *dst, nd_params p, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t q = i / p.inner, r = i % p.inner;
        int64_t off = 0;
        for (int64_t c = 0; c < p.k; c++) off += (int64_t)idx[q * p.k + c] * p.xst[c];
        dst[i] = src[off + r];
    }
}

template <typename E>
void gather_nd_es(const td__gpu_exec *x, bool is64, const void *idx, const void *src, void *dst,
                  const nd_params &p, int64_t n)
{
    const unsigned b = td__gpu_blocks(n, TD_GPU_THREADS);
    if (is64)
        k_gather_nd<E, int64_t><<<b, TD_GPU_THREADS, 0, x->st->s>>>((const int64_t *)idx,
                                                                   (const E *)src, (E *)dst, p, n);
    else
        k_gather_nd<E, int32_t><<<b, TD_GPU_THREADS, 0, x->st->s>>>((const int32_t *)idx,
                                                                   (const E *)src, (E *)dst, p, n);
}

td_status exec_gather_nd(const td__gpu_exec *x, const td__view *in, const td__view *out)
{
    const td__desc *xd = &in[0].desc, *id = &in[1].desc;
    nd_params p;
    memset(&p, 0, sizeof p);
    p.k = id->dims[id->rank - 1];
    p.inner = 1;
    for (uint32_t d = 0; d < xd->rank; d++) p.dims[d] = xd->dims[d];
    td__desc_strides(xd, p.xst);
    for (uint32_t d = (uint32_t)p.k; d < xd->rank; d++) p.inner *= xd->dims[d];
    const bool is64 = id->dtype == TD_I64;
    const int64_t ni = td__gpu_nelem(id);
    td_status s;
    if (ni > 0 && p.k > 0) {
        s = td__gpu_check(x, gpuMemsetAsync(x->st->flag, 0xff, sizeof(uint64_t), x->st->s),
                          "index check");
        if (s != TD_OK) return s;
        const unsigned b = td__gpu_blocks(ni, TD_GPU_THREADS);
        unsigned long long *flag = (unsigned long long *)x->st->flag;
        if (is64)
            k_check_nd<int64_t><<<b, TD_GPU_THREADS, 0, x->st->s>>>((const int64_t *)in[1].data, ni, p, flag);
        else
            k_check_nd<int32_t><<<b, TD_GPU_THREADS, 0, x->st->s>>>((const int32_t *)in[1].data, ni, p, flag);
        s = td__gpu_launched(x, "gather_nd index check kernel");
        uint64_t pos = UINT64_MAX;
        if (s == TD_OK) s = td__gpu_read_flag(x, &pos);
        if (s != TD_OK) return s;
        if (pos != UINT64_MAX) {
            int64_t v = 0;
            if (is64) {
                s = td__gpu_check(x, gpuMemcpy(&v, (const int64_t *)in[1].data + pos, sizeof v,
                                               gpuMemcpyDeviceToHost), "index read");
            } else {
                int32_t v32 = 0;
                s = td__gpu_check(x, gpuMemcpy(&v32, (const int32_t *)in[1].data + pos, sizeof v32,
                                               gpuMemcpyDeviceToHost), "index read");
                v = v32;
            }
            if (s != TD_OK) return s;
            const int64_t c = (int64_t)pos % p.k;
            return td__gpu_fail(x, TD_ERANGE,
                                "gather_nd: index %" PRId64 " out of range [0, %" PRId64
                                ") for dim %" PRId64 " at position %" PRId64,
                                v, xd->dims[c], c, (int64_t)pos);
        }
    }
    const int64_t n = td__gpu_nelem(&out->desc);
    if (n == 0) return TD_OK;
    switch (td__gpu_dtype_size(xd->dtype)) {
    case 1: gather_nd_es<uint8_t>(x, is64, in[1].data, in[0].data, out->data, p, n); break;
    case 2: gather_nd_es<uint16_t>(x, is64, in[1].data, in[0].data, out->data, p, n); break;
    case 4: gather_nd_es<uint32_t>(x, is64, in[1].data, in[0].data, out->data, p, n); break;
    case 8: gather_nd_es<uint64_t>(x, is64, in[1].data, in[0].data, out->data, p, n); break;
    default: return td__gpu_fail(x, TD_EINTERNAL, TD_GPU_KIND ": gather_nd of dtype %u", xd->dtype);
    }
    return td__gpu_launched(x, "gather_nd kernel");
}

/* ---- one_hot ---- */

template <typename E, typename IT>
__global__ void k_one_hot(const IT *idx, E *dst, const E *one, int64_t c, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = (int64_t)idx[i / c] == i % c ? *one : E(0);
}

template <typename E>
void one_hot_es(const td__gpu_exec *x, bool is64, const void *idx, void *dst, const void *one,
                int64_t c, int64_t n)
{
    const unsigned b = td__gpu_blocks(n, TD_GPU_THREADS);
    if (is64)
        k_one_hot<E, int64_t><<<b, TD_GPU_THREADS, 0, x->st->s>>>((const int64_t *)idx, (E *)dst,
                                                                 (const E *)one, c, n);
    else
        k_one_hot<E, int32_t><<<b, TD_GPU_THREADS, 0, x->st->s>>>((const int32_t *)idx, (E *)dst,
                                                                 (const E *)one, c, n);
}

td_status exec_one_hot(const td__gpu_exec *x, const td__op *op, const td__view *in,
                       const td__view *out)
{
    const int64_t c = op->iattrs[0];
    td_status s = td__gpu_check_indices(x, "one_hot", &in[0], c);
    if (s != TD_OK) return s;
    const int64_t n = td__gpu_nelem(&out->desc);
    if (n == 0) return TD_OK;
    const uint32_t dt = out->desc.dtype;
    s = td__gpu_fill(x, dt, x->st->flag, 1, 1.0);
    if (s != TD_OK) return s;
    const bool is64 = in[0].desc.dtype == TD_I64;
    switch (td__gpu_dtype_size(dt)) {
    case 1: one_hot_es<uint8_t>(x, is64, in[0].data, out->data, x->st->flag, c, n); break;
    case 2: one_hot_es<uint16_t>(x, is64, in[0].data, out->data, x->st->flag, c, n); break;
    case 4: one_hot_es<uint32_t>(x, is64, in[0].data, out->data, x->st->flag, c, n); break;
    case 8: one_hot_es<uint64_t>(x, is64, in[0].data, out->data, x->st->flag, c, n); break;
    default: return td__gpu_fail(x, TD_EINTERNAL, TD_GPU_KIND ": one_hot of dtype %u", dt);
    }
    return td__gpu_launched(x, "one_hot kernel");
}

/* ---- masked_fill ---- */

template <typename E>
__global__ void k_masked(td__gpu_iter it, const E *src, const uint8_t *mask, E *dst,
                         const E *value, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t off[1];
        td_iter_offsets<int64_t, 1>(it, i, off);
        dst[i] = mask[off[0]] != 0 ? *value : src[i];
    }
}

template <typename E>
void masked_es(const td__gpu_exec *x, const td__gpu_iter &it, const void *src, const void *mask,
               void *dst, const void *value, int64_t n)
{
    k_masked<E><<<td__gpu_blocks(n, TD_GPU_THREADS), TD_GPU_THREADS, 0, x->st->s>>>(
        it, (const E *)src, (const uint8_t *)mask, (E *)dst, (const E *)value, n);
}

td_status exec_masked_fill(const td__gpu_exec *x, const td__op *op, const td__view *in,
                           const td__view *out)
{
    const td__desc *od = &out->desc;
    const int64_t n = td__gpu_nelem(od);
    if (n == 0) return TD_OK;
    td_status s = td__gpu_fill(x, od->dtype, x->st->flag, 1, op->fattrs[0]);
    if (s != TD_OK) return s;
    int64_t st[1][TD_MAX_RANK];
    td__desc_bcast_strides(&in[1].desc, od, st[0]);
    td__gpu_iter it;
    td__gpu_iter_init(&it, od, 1, (const int64_t(*)[TD_MAX_RANK])st);
    switch (td__gpu_dtype_size(od->dtype)) {
    case 1: masked_es<uint8_t>(x, it, in[0].data, in[1].data, out->data, x->st->flag, n); break;
    case 2: masked_es<uint16_t>(x, it, in[0].data, in[1].data, out->data, x->st->flag, n); break;
    case 4: masked_es<uint32_t>(x, it, in[0].data, in[1].data, out->data, x->st->flag, n); break;
    case 8: masked_es<uint64_t>(x, it, in[0].data, in[1].data, out->data, x->st->flag, n); break;
    default: return td__gpu_fail(x, TD_EINTERNAL, TD_GPU_KIND ": masked_fill of dtype %u", od->dtype);
    }
    return td__gpu_launched(x, "masked_fill kernel");
}

} // namespace

extern "C" td_status td__gpu_exec_indexed(const td__gpu_exec *x, const td__op *op,
                                           const td__view *in, const td__view *out)
{
    switch (op->opcode) {
    case TD_OP_SCATTER:
    case TD_OP_SCATTER_ADD: return exec_scatter(x, op, in, out);
    case TD_OP_INDEX_ADD: return exec_index_add(x, op, in, out);
    case TD_OP_GATHER_ND: return exec_gather_nd(x, in, out);
    case TD_OP_ONE_HOT: return exec_one_hot(x, op, in, out);
    case TD_OP_MASKED_FILL: return exec_masked_fill(x, op, in, out);
    }
    return td__gpu_fail(x, TD_EINTERNAL, TD_GPU_KIND ": indexed opcode %u", op->opcode);
}

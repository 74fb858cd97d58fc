/* cpu_scatter.c — the indexed movement ops of issue 13: SCATTER SCATTER_ADD INDEX_ADD
 * GATHER_ND ONE_HOT MASKED_FILL.
 *
 * Why this shape: the adds must be deterministic (the gradient of gather is a scatter_add,
 * and it has to reproduce bit for bit on every thread count). Each destination element
 * receives its contributions in one fixed order — ascending position along the axis in the
 * index (SCATTER_ADD) or ascending j (INDEX_ADD) — because work is split only between
 * destinations that can never collide: SCATTER's lines (all index positions that share the
 * coordinates off the axis) write disjoint sets, and INDEX_ADD's units are (outer index,
 * block of the inner dims). Each add is rounded to the dtype (f16/bf16: widened to f32,
 * added, rounded once), as PyTorch's CPU kernels do; integers wrap. SCATTER with duplicate
 * indices keeps the last write in that order.
 *
 * Indices come from tensor data, so every op checks all of them before writing anything:
 * an index outside [0, dim) fails the op with TD_ERANGE naming the op, the value, the range
 * and the first offending position (row-major over the index tensor). Negative indices are
 * not wrapped.
 */
#include "backends/cpu/cpu_internal.h"
#include <inttypes.h>
#include <string.h>

static inline int64_t idx_at(const void *idx, bool is64, int64_t i)
{
    return is64 ? ((const int64_t *)idx)[i] : ((const int32_t *)idx)[i];
}

/* The bits of v in dtype dt (FULL's conversion rules). */
static uint64_t scalar_bits(uint32_t dt, double v)
{
    uint64_t b = 0;
    td__cpu_store_double(dt, &b, 0, v);
    return b;
}

/* dst[di] += src[si] in dtype dt, rounded to dt; integers wrap. */
static inline void add_elem(uint32_t dt, void *dst, int64_t di, const void *src, int64_t si)
{
    switch (dt) {
    case TD_F32: ((float *)dst)[di] += ((const float *)src)[si]; break;
    case TD_F64: ((double *)dst)[di] += ((const double *)src)[si]; break;
    case TD_F16: {
        uint16_t *d = (uint16_t *)dst + di;
        *d = td__f32_to_f16(td__f16_to_f32(*d) + td__f16_to_f32(((const uint16_t *)src)[si]));
        break;
    }
    case TD_BF16: {
        uint16_t *d = (uint16_t *)dst + di;
        *d = td__f32_to_bf16(td__bf16_to_f32(*d) + td__bf16_to_f32(((const uint16_t *)src)[si]));
        break;
    }
    case TD_I8:
    case TD_U8: ((uint8_t *)dst)[di] = (uint8_t)(((uint8_t *)dst)[di] + ((const uint8_t *)src)[si]); break;
    case TD_I16: ((uint16_t *)dst)[di] = (uint16_t)(((uint16_t *)dst)[di] + ((const uint16_t *)src)[si]); break;
    case TD_I32: ((uint32_t *)dst)[di] += ((const uint32_t *)src)[si]; break;
    case TD_I64: ((uint64_t *)dst)[di] += ((const uint64_t *)src)[si]; break;
    }
}

static inline void copy_elem(size_t es, void *dst, int64_t di, const void *src, int64_t si)
{
    memcpy((char *)dst + (size_t)di * es, (const char *)src + (size_t)si * es, es);
}

/* ---- scatter / scatter_add ---- */

typedef struct scatter_task {
    const td__desc *id;
    int64_t axis, len; /* the axis, the index's length along it */
    int64_t ist[TD_MAX_RANK], sst[TD_MAX_RANK], xst[TD_MAX_RANK];
    const void *idx, *src;
    bool is64, add;
    void *dst;
    uint32_t dt;
    size_t es;
} scatter_task;

static void scatter_chunk(void *ctx, int64_t lo, int64_t hi)
{
    const scatter_task *t = ctx;
    const td__desc *id = t->id;
    for (int64_t l = lo; l < hi; l++) {
        int64_t io = 0, so = 0, xo = 0, rem = l;
        for (int d = (int)id->rank - 1; d >= 0; d--) {
            if (d == t->axis) continue;
            int64_t c = rem % id->dims[d];
            rem /= id->dims[d];
            io += c * t->ist[d];
            so += c * t->sst[d];
            xo += c * t->xst[d];
        }
        for (int64_t j = 0; j < t->len; j++) {
            int64_t v = idx_at(t->idx, t->is64, io + j * t->ist[t->axis]);
            int64_t di = xo + v * t->xst[t->axis], si = so + j * t->sst[t->axis];
            if (t->add) add_elem(t->dt, t->dst, di, t->src, si);
            else copy_elem(t->es, t->dst, di, t->src, si);
        }
    }
}

static td_status exec_scatter(const td__cpu_exec *x, const td__op *op, const td__view *in,
                              const td__view *out)
{
    const td__desc *xd = &in[0].desc, *id = &in[1].desc;
    const int64_t axis = op->iattrs[0];
    const bool add = op->opcode == TD_OP_SCATTER_ADD;
    td_status s = td__cpu_check_indices(x, add ? "scatter_add" : "scatter", &in[1], xd->dims[axis]);
    if (s != TD_OK) return s;
    const int64_t n = td__cpu_nelem(xd);
    const size_t es = td__cpu_dtype_size(xd->dtype);
    if (n > 0) memcpy(out->data, in[0].data, (size_t)n * es);
    const int64_t ni = td__cpu_nelem(id);
    if (ni == 0) return TD_OK;
    scatter_task t = {.id = id, .axis = axis, .len = id->dims[axis], .idx = in[1].data,
                      .src = in[2].data, .is64 = id->dtype == TD_I64, .add = add,
                      .dst = out->data, .dt = xd->dtype, .es = es};
    td__desc_strides(id, t.ist);
    td__desc_strides(&in[2].desc, t.sst);
    td__desc_strides(xd, t.xst);
    td__cpu_run(x, ni / t.len, t.len, scatter_chunk, &t);
    return TD_OK;
}

/* ---- index_add ---- */

#define INDEX_ADD_BLOCK 512

typedef struct index_add_task {
    const void *idx, *src;
    bool is64;
    int64_t m, dim, inner, nblk;
    void *dst;
    uint32_t dt;
} index_add_task;

static void index_add_chunk(void *ctx, int64_t lo, int64_t hi)
{
    const index_add_task *t = ctx;
    for (int64_t u = lo; u < hi; u++) {
        const int64_t o = u / t->nblk, i0 = (u % t->nblk) * INDEX_ADD_BLOCK;
        const int64_t i1 = i0 + INDEX_ADD_BLOCK < t->inner ? i0 + INDEX_ADD_BLOCK : t->inner;
        for (int64_t j = 0; j < t->m; j++) {
            const int64_t v = idx_at(t->idx, t->is64, j);
            const int64_t db = (o * t->dim + v) * t->inner, sb = (o * t->m + j) * t->inner;
            if (t->dt == TD_F32) {
                float *d = (float *)t->dst + db;
                const float *s = (const float *)t->src + sb;
                for (int64_t i = i0; i < i1; i++) d[i] += s[i];
            } else {
                for (int64_t i = i0; i < i1; i++) add_elem(t->dt, t->dst, db + i, t->src, sb + i);
            }
        }
    }
}

static td_status exec_index_add(const td__cpu_exec *x, const td__op *op, const td__view *in,
                                const td__view *out)
{
    const td__desc *xd = &in[0].desc;
    const int64_t axis = op->iattrs[0];
    td_status s = td__cpu_check_indices(x, "index_add", &in[1], xd->dims[axis]);
    if (s != TD_OK) return s;
    const int64_t n = td__cpu_nelem(xd);
    if (n > 0) memcpy(out->data, in[0].data, (size_t)n * td__cpu_dtype_size(xd->dtype));
    index_add_task t = {.idx = in[1].data, .src = in[2].data, .is64 = in[1].desc.dtype == TD_I64,
                        .m = td__cpu_nelem(&in[1].desc), .dim = xd->dims[axis], .inner = 1,
                        .dst = out->data, .dt = xd->dtype};
    int64_t outer = 1;
    for (int64_t d = 0; d < axis; d++) outer *= xd->dims[d];
    for (uint32_t d = (uint32_t)axis + 1; d < xd->rank; d++) t.inner *= xd->dims[d];
    if (t.m == 0 || outer == 0 || t.inner == 0) return TD_OK;
    t.nblk = (t.inner + INDEX_ADD_BLOCK - 1) / INDEX_ADD_BLOCK;
    int64_t cost = t.m * (t.inner < INDEX_ADD_BLOCK ? t.inner : INDEX_ADD_BLOCK);
    td__cpu_run(x, outer * t.nblk, cost, index_add_chunk, &t);
    return TD_OK;
}

/* ---- gather_nd ---- */

typedef struct gather_nd_task {
    const void *idx;
    bool is64;
    int64_t k;
    int64_t xst[TD_MAX_RANK]; /* x's strides of the indexed dims, in bytes */
    size_t run_bytes; /* inner elements * es */
    const char *src;
    char *dst;
} gather_nd_task;

static void gather_nd_chunk(void *ctx, int64_t lo, int64_t hi)
{
    const gather_nd_task *t = ctx;
    const size_t es_run = t->run_bytes;
    for (int64_t p = lo; p < hi; p++) {
        int64_t off = 0;
        for (int64_t c = 0; c < t->k; c++) off += idx_at(t->idx, t->is64, p * t->k + c) * t->xst[c];
        memcpy(t->dst + (size_t)p * es_run, t->src + (size_t)off, es_run);
    }
}

static td_status exec_gather_nd(const td__cpu_exec *x, const td__view *in, const td__view *out)
{
    const td__desc *xd = &in[0].desc, *id = &in[1].desc;
    const int64_t k = id->dims[id->rank - 1];
    const bool is64 = id->dtype == TD_I64;
    int64_t np = 1;
    for (uint32_t i = 0; i + 1 < id->rank; i++) np *= id->dims[i];
    for (int64_t p = 0; p < np; p++) {
        for (int64_t c = 0; c < k; c++) {
            int64_t v = idx_at(in[1].data, is64, p * k + c);
            if (v < 0 || v >= xd->dims[c])
                return td__cpu_fail(x, TD_ERANGE,
                                    "gather_nd: index %" PRId64 " out of range [0, %" PRId64
                                    ") for dim %" PRId64 " at position %" PRId64,
                                    v, xd->dims[c], c, p * k + c);
        }
    }
    const int64_t n = td__cpu_nelem(&out->desc);
    if (n == 0) return TD_OK;
    const size_t es = td__cpu_dtype_size(xd->dtype);
    int64_t inner = 1;
    for (uint32_t i = (uint32_t)k; i < xd->rank; i++) inner *= xd->dims[i];
    gather_nd_task t = {.idx = in[1].data, .is64 = is64, .k = k, .run_bytes = (size_t)inner * es,
                        .src = in[0].data, .dst = out->data};
    td__desc_strides(xd, t.xst);
    for (int64_t c = 0; c < k; c++) t.xst[c] *= (int64_t)es; /* byte strides */
    td__cpu_run(x, np, inner, gather_nd_chunk, &t);
    return TD_OK;
}

/* ---- one_hot ---- */

typedef struct one_hot_task {
    const void *idx;
    bool is64;
    int64_t c;
    size_t es;
    uint64_t one;
    char *dst;
} one_hot_task;

static void one_hot_chunk(void *ctx, int64_t lo, int64_t hi)
{
    const one_hot_task *t = ctx;
    memset(t->dst + (size_t)(lo * t->c) * t->es, 0, (size_t)((hi - lo) * t->c) * t->es);
    for (int64_t p = lo; p < hi; p++) {
        int64_t v = idx_at(t->idx, t->is64, p);
        memcpy(t->dst + (size_t)(p * t->c + v) * t->es, &t->one, t->es);
    }
}

static td_status exec_one_hot(const td__cpu_exec *x, const td__op *op, const td__view *in,
                              const td__view *out)
{
    const int64_t c = op->iattrs[0];
    td_status s = td__cpu_check_indices(x, "one_hot", &in[0], c);
    if (s != TD_OK) return s;
    const int64_t np = td__cpu_nelem(&in[0].desc);
    if (np == 0) return TD_OK;
    one_hot_task t = {.idx = in[0].data, .is64 = in[0].desc.dtype == TD_I64, .c = c,
                      .es = td__cpu_dtype_size(out->desc.dtype), .dst = out->data};
    t.one = scalar_bits(out->desc.dtype, 1.0);
    td__cpu_run(x, np, c, one_hot_chunk, &t);
    return TD_OK;
}

/* ---- masked_fill ---- */

typedef struct masked_task {
    td__cpu_iter it; /* input 0: the mask, broadcast */
    const char *src;
    const uint8_t *mask;
    char *dst;
    size_t es;
    uint64_t value;
} masked_task;

static void masked_row(void *ctx, const int64_t *off, const int64_t *st, int64_t o, int64_t n)
{
    const masked_task *t = ctx;
    char *d = t->dst + (size_t)o * t->es;
    memcpy(d, t->src + (size_t)o * t->es, (size_t)n * t->es);
    for (int64_t k = 0; k < n; k++)
        if (t->mask[off[0] + k * st[0]] != 0) memcpy(d + (size_t)k * t->es, &t->value, t->es);
}

static void masked_chunk(void *ctx, int64_t lo, int64_t hi)
{
    masked_task *t = ctx;
    td__cpu_iter_rows(&t->it, lo, hi, masked_row, t);
}

static td_status exec_masked_fill(const td__cpu_exec *x, const td__op *op, const td__view *in,
                                  const td__view *out)
{
    const td__desc *od = &out->desc;
    const int64_t n = td__cpu_nelem(od);
    if (n == 0) return TD_OK;
    masked_task t = {.src = in[0].data, .mask = in[1].data, .dst = out->data,
                     .es = td__cpu_dtype_size(od->dtype)};
    t.value = scalar_bits(od->dtype, op->fattrs[0]);
    int64_t st[1][TD_MAX_RANK];
    td__desc_bcast_strides(&in[1].desc, od, st[0]);
    td__cpu_iter_init(&t.it, od, 1, (const int64_t(*)[TD_MAX_RANK])st);
    td__cpu_run(x, n, 1, masked_chunk, &t);
    return TD_OK;
}

td_status td__cpu_exec_indexed(const td__cpu_exec *x, const td__op *op, const td__view *in,
                               const td__view *out)
{
    switch (op->opcode) {
    case TD_OP_SCATTER:
    case TD_OP_SCATTER_ADD: return exec_scatter(x, op, in, out);
    case TD_OP_INDEX_ADD: return exec_index_add(x, op, in, out);
    case TD_OP_GATHER_ND: return exec_gather_nd(x, in, out);
    case TD_OP_ONE_HOT: return exec_one_hot(x, op, in, out);
    case TD_OP_MASKED_FILL: return exec_masked_fill(x, op, in, out);
    }
    return td__cpu_fail(x, TD_EINTERNAL, "cpu: indexed opcode %u", op->opcode);
}

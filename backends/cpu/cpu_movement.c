/* cpu_movement.c — PERMUTE SLICE EXPAND COPY CONCAT GATHER INDEX_SELECT, and SLICE_STEP FLIP
 * ROLL PAD REPEAT TRIL TRIU (the indexed ops of the family are in cpu_scatter.c).
 *
 * PERMUTE, SLICE and EXPAND are one kernel: a strided copy that walks the contiguous output
 * and reads the input at (base offset, per-axis strides) — permuted strides, an offset start,
 * or stride 0 on broadcast axes. The iterator merges axes that stay contiguous, so a slice
 * of whole rows becomes one memcpy per run. Values are moved as bytes of their element
 * size, never interpreted (NaN payloads and -0.0 survive).
 *
 * GATHER (numpy take_along_axis) and INDEX_SELECT read indices that come from tensor data,
 * so they check every index before writing anything: an index outside [0, dim) fails the op
 * with TD_ERANGE naming the first offending position (row-major over the index tensor);
 * negative indices are not wrapped.
 *
 * SLICE_STEP and FLIP are the same strided copy with a step (negative: backwards) folded
 * into each axis' stride. ROLL, PAD and REPEAT map each output coordinate to a source
 * coordinate per dim (engine/remap.h, shared with the GPU): the last dim's map is tabulated
 * once, and each output row is then one pass over that table (a row whose outer coordinates
 * fall in constant padding is the fill value throughout). TRIL/TRIU copy each row of the
 * last two dims and zero the part outside the band. Every output element is written by
 * exactly one work unit, so no result depends on the thread count.
 */
#include "backends/cpu/cpu_internal.h"
#include "common/alloc.h"
#include "engine/remap.h"
#include <inttypes.h>
#include <stddef.h>
#include <string.h>

/* ---- strided copy ---- */

typedef struct strided_task {
    td__cpu_iter it;
    const char *src;
    char *dst;
    size_t es;
} strided_task;

static void copy_elems(char *dst, const char *src, int64_t st, int64_t n, size_t es)
{
    if (st == 1) {
        memcpy(dst, src, (size_t)n * es);
        return;
    }
    switch (es) {
    case 1: {
        const uint8_t *s = (const uint8_t *)src;
        uint8_t *d = (uint8_t *)dst;
        for (int64_t i = 0; i < n; i++) d[i] = s[i * st];
        break;
    }
    case 2: {
        const uint16_t *s = (const uint16_t *)src;
        uint16_t *d = (uint16_t *)dst;
        for (int64_t i = 0; i < n; i++) d[i] = s[i * st];
        break;
    }
    case 4: {
        const uint32_t *s = (const uint32_t *)src;
        uint32_t *d = (uint32_t *)dst;
        for (int64_t i = 0; i < n; i++) d[i] = s[i * st];
        break;
    }
    case 8: {
        const uint64_t *s = (const uint64_t *)src;
        uint64_t *d = (uint64_t *)dst;
        for (int64_t i = 0; i < n; i++) d[i] = s[i * st];
        break;
    }
    }
}

static void strided_row(void *ctx, const int64_t *off, const int64_t *st, int64_t o, int64_t n)
{
    const strided_task *t = ctx;
    /* signed: FLIP and negative-step SLICE_STEP read backwards from their base */
    copy_elems(t->dst + (size_t)o * t->es, t->src + off[0] * (ptrdiff_t)t->es, st[0], n, t->es);
}

static void strided_chunk(void *ctx, int64_t lo, int64_t hi)
{
    strided_task *t = ctx;
    td__cpu_iter_rows(&t->it, lo, hi, strided_row, t);
}

/* Transposed trailing dims: after collapsing, the output is [outer..., P, Q] and the input
 * reads (p, q) at p + q * sq. Walking the output row by row would touch a new cache line
 * (and often a new page) per element, so copy TB x TB blocks instead. Work units are
 * (outer index, block row). */
#define TB 32

typedef struct transpose_task {
    const td__cpu_iter *it;
    const char *src;
    char *dst;
    size_t es;
    int64_t p, q, sq, nbp;
} transpose_task;

#define TRANSPOSE_BLOCK(T)                                                                 \
    do {                                                                                   \
        const T *s = (const T *)t->src + base;                                             \
        T *d = (T *)t->dst + o * t->p * t->q;                                              \
        for (int64_t q0 = 0; q0 < t->q; q0 += TB) {                                        \
            int64_t q1 = q0 + TB < t->q ? q0 + TB : t->q;                                  \
            for (int64_t pp = p0; pp < p1; pp++)                                           \
                for (int64_t qq = q0; qq < q1; qq++)                                       \
                    d[pp * t->q + qq] = s[pp + qq * t->sq];                                \
        }                                                                                  \
    } while (0)

static void transpose_chunk(void *ctx, int64_t lo, int64_t hi)
{
    const transpose_task *t = ctx;
    const td__cpu_iter *it = t->it;
    for (int64_t u = lo; u < hi; u++) {
        int64_t o = u / t->nbp, p0 = (u % t->nbp) * TB;
        int64_t p1 = p0 + TB < t->p ? p0 + TB : t->p;
        int64_t base = 0, rem = o;
        for (int d = it->rank - 3; d >= 0; d--) {
            base += (rem % it->dims[d]) * it->in_strides[0][d];
            rem /= it->dims[d];
        }
        switch (t->es) {
        case 1: TRANSPOSE_BLOCK(uint8_t); break;
        case 2: TRANSPOSE_BLOCK(uint16_t); break;
        case 4: TRANSPOSE_BLOCK(uint32_t); break;
        case 8: TRANSPOSE_BLOCK(uint64_t); break;
        }
    }
}

/* Copy into `out` from `src` read with per-out-axis element strides `st`. */
static void strided_copy(const td__cpu_exec *x, const td__view *out, const void *src,
                         const int64_t st[TD_MAX_RANK])
{
    strided_task t = {.src = src, .dst = out->data, .es = td__cpu_dtype_size(out->desc.dtype)};
    td__cpu_iter_init(&t.it, &out->desc, 1, (const int64_t(*)[TD_MAX_RANK])st);
    const int r = t.it.rank;
    if (r >= 2 && t.it.in_strides[0][r - 2] == 1 && t.it.in_strides[0][r - 1] > 1 &&
        t.it.dims[r - 2] >= TB && t.it.dims[r - 1] >= TB) {
        transpose_task tt = {.it = &t.it,
                             .src = src,
                             .dst = out->data,
                             .es = t.es,
                             .p = t.it.dims[r - 2],
                             .q = t.it.dims[r - 1],
                             .sq = t.it.in_strides[0][r - 1]};
        tt.nbp = (tt.p + TB - 1) / TB;
        int64_t outer = td__cpu_nelem(&out->desc) / (tt.p * tt.q);
        td__cpu_run(x, outer * tt.nbp, TB * tt.q, transpose_chunk, &tt);
        return;
    }
    td__cpu_run(x, td__cpu_nelem(&out->desc), 1, strided_chunk, &t);
}

typedef struct bytes_task {
    const char *src;
    char *dst;
} bytes_task;

static void bytes_chunk(void *ctx, int64_t lo, int64_t hi)
{
    const bytes_task *t = ctx;
    memcpy(t->dst + lo, t->src + lo, (size_t)(hi - lo));
}

/* ---- concat ---- */

typedef struct concat_task {
    int n_in;
    const char *src[TD_OP_MAX_INPUTS];
    size_t row_bytes[TD_OP_MAX_INPUTS]; /* bytes of one outer row of each input */
    size_t out_row_bytes;
    char *dst;
} concat_task;

static void concat_chunk(void *ctx, int64_t lo, int64_t hi)
{
    const concat_task *t = ctx;
    for (int64_t o = lo; o < hi; o++) {
        char *d = t->dst + (size_t)o * t->out_row_bytes;
        for (int k = 0; k < t->n_in; k++) {
            size_t rb = t->row_bytes[k];
            if (rb == 0) continue;
            memcpy(d, t->src[k] + (size_t)o * rb, rb);
            d += rb;
        }
    }
}

static td_status exec_concat(const td__cpu_exec *x, const td__op *op, const td__view *in,
                             const td__view *out)
{
    const td__desc *od = &out->desc;
    int64_t axis = op->iattrs[0];
    if (op->n_inputs < 1 || op->n_inputs > TD_OP_MAX_INPUTS || axis < 0 ||
        axis >= (int64_t)od->rank)
        return td__cpu_fail(x, TD_EINTERNAL, "cpu: concat with %u inputs on axis %lld",
                            op->n_inputs, (long long)axis);
    /* An empty result has a NULL buffer: no row address may be formed from it. */
    if (td__cpu_nelem(od) == 0) return TD_OK;
    size_t es = td__cpu_dtype_size(od->dtype);
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < axis; d++) outer *= od->dims[d];
    for (uint32_t d = (uint32_t)axis + 1; d < od->rank; d++) inner *= od->dims[d];
    concat_task t = {.n_in = (int)op->n_inputs, .dst = out->data};
    t.out_row_bytes = (size_t)(od->dims[axis] * inner) * es;
    for (uint32_t k = 0; k < op->n_inputs; k++) {
        t.src[k] = in[k].data;
        t.row_bytes[k] = (size_t)(in[k].desc.dims[axis] * inner) * es;
    }
    td__cpu_run(x, outer, (int64_t)(t.out_row_bytes / es), concat_chunk, &t);
    return TD_OK;
}

/* ---- gather / index_select ---- */

static inline int64_t index_at(const void *idx, bool is64, int64_t i)
{
    return is64 ? ((const int64_t *)idx)[i] : ((const int32_t *)idx)[i];
}

/* TD_ERANGE for the first index outside [0, dim), else TD_OK. */
td_status td__cpu_check_indices(const td__cpu_exec *x, const char *name, const td__view *idx,
                               int64_t dim)
{
    const bool is64 = idx->desc.dtype == TD_I64;
    const int64_t n = td__cpu_nelem(&idx->desc);
    for (int64_t i = 0; i < n; i++) {
        int64_t v = index_at(idx->data, is64, i);
        if (v < 0 || v >= dim)
            return td__cpu_fail(x, TD_ERANGE,
                                "%s: index %" PRId64 " out of range [0, %" PRId64
                                ") at position %" PRId64,
                                name, v, dim, i);
    }
    return TD_OK;
}

typedef struct gather_task {
    td__cpu_iter it; /* input 0: index (contiguous); input 1: x without the axis */
    const char *x;
    const void *idx;
    bool is64;
    int64_t axis_stride;
    char *dst;
    size_t es;
} gather_task;

static void gather_row(void *ctx, const int64_t *off, const int64_t *st, int64_t o, int64_t n)
{
    const gather_task *t = ctx;
    for (int64_t k = 0; k < n; k++) {
        int64_t v = index_at(t->idx, t->is64, off[0] + k * st[0]);
        int64_t src = off[1] + k * st[1] + v * t->axis_stride;
        switch (t->es) {
        case 1: ((uint8_t *)t->dst)[o + k] = ((const uint8_t *)t->x)[src]; break;
        case 2: ((uint16_t *)t->dst)[o + k] = ((const uint16_t *)t->x)[src]; break;
        case 4: ((uint32_t *)t->dst)[o + k] = ((const uint32_t *)t->x)[src]; break;
        case 8: ((uint64_t *)t->dst)[o + k] = ((const uint64_t *)t->x)[src]; break;
        }
    }
}

static void gather_chunk(void *ctx, int64_t lo, int64_t hi)
{
    gather_task *t = ctx;
    td__cpu_iter_rows(&t->it, lo, hi, gather_row, t);
}

static td_status exec_gather(const td__cpu_exec *x, const td__op *op, const td__view *in,
                             const td__view *out)
{
    const td__desc *xd = &in[0].desc, *id = &in[1].desc;
    int64_t axis = op->iattrs[0];
    if (axis < 0 || axis >= (int64_t)xd->rank || id->rank != xd->rank)
        return td__cpu_fail(x, TD_EINTERNAL, "cpu: gather on axis %lld", (long long)axis);
    td_status s = td__cpu_check_indices(x, "gather", &in[1], xd->dims[axis]);
    if (s != TD_OK) return s;
    int64_t n = td__cpu_nelem(&out->desc);
    if (n == 0) return TD_OK;
    int64_t st[2][TD_MAX_RANK];
    td__desc_strides(id, st[0]);
    td__desc_strides(xd, st[1]);
    gather_task t = {.x = in[0].data,
                     .idx = in[1].data,
                     .is64 = id->dtype == TD_I64,
                     .axis_stride = st[1][axis],
                     .dst = out->data,
                     .es = td__cpu_dtype_size(out->desc.dtype)};
    st[1][axis] = 0;
    td__cpu_iter_init(&t.it, &out->desc, 2, (const int64_t(*)[TD_MAX_RANK])st);
    td__cpu_run(x, n, 1, gather_chunk, &t);
    return TD_OK;
}

typedef struct select_task {
    const char *x;
    const void *idx;
    bool is64;
    int64_t nidx, dim;
    size_t run_bytes; /* inner * es */
    char *dst;
} select_task;

static void select_chunk(void *ctx, int64_t lo, int64_t hi)
{
    const select_task *t = ctx;
    for (int64_t r = lo; r < hi; r++) {
        int64_t o = r / t->nidx, j = r % t->nidx;
        int64_t v = index_at(t->idx, t->is64, j);
        memcpy(t->dst + (size_t)r * t->run_bytes,
               t->x + (size_t)(o * t->dim + v) * t->run_bytes, t->run_bytes);
    }
}

static td_status exec_index_select(const td__cpu_exec *x, const td__op *op, const td__view *in,
                                   const td__view *out)
{
    const td__desc *xd = &in[0].desc;
    int64_t axis = op->iattrs[0];
    if (axis < 0 || axis >= (int64_t)xd->rank)
        return td__cpu_fail(x, TD_EINTERNAL, "cpu: index_select on axis %lld",
                            (long long)axis);
    td_status s = td__cpu_check_indices(x, "index_select", &in[1], xd->dims[axis]);
    if (s != TD_OK) return s;
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < axis; d++) outer *= xd->dims[d];
    for (uint32_t d = (uint32_t)axis + 1; d < xd->rank; d++) inner *= xd->dims[d];
    select_task t = {.x = in[0].data,
                     .idx = in[1].data,
                     .is64 = in[1].desc.dtype == TD_I64,
                     .nidx = td__cpu_nelem(&in[1].desc),
                     .dim = xd->dims[axis],
                     .run_bytes = (size_t)inner * td__cpu_dtype_size(xd->dtype),
                     .dst = out->data};
    if (td__cpu_nelem(&out->desc) == 0) return TD_OK;
    td__cpu_run(x, outer * t.nidx, inner, select_chunk, &t);
    return TD_OK;
}

/* ---- roll / pad / repeat: per-dim index maps (engine/remap.h) ---- */

typedef struct remap_task {
    td__remap m;
    const int64_t *last; /* source coordinate per output coordinate of the last dim, or -1 */
    int64_t od[TD_MAX_RANK], xs[TD_MAX_RANK]; /* output dims, x's element strides */
    int rank;
    int64_t row; /* output row length (the last dim; 1 for rank 0) */
    const char *src;
    char *dst;
    size_t es;
    uint64_t fill; /* the constant's bits */
} remap_task;

#define REMAP_ROW(T)                                                                       \
    do {                                                                                   \
        T *d_ = (T *)t->dst + r * t->row;                                                  \
        T f_;                                                                              \
        memcpy(&f_, &t->fill, sizeof f_);                                                  \
        if (base < 0) { /* x may be empty (a NULL buffer): form no address from it */      \
            for (int64_t i = 0; i < t->row; i++) d_[i] = f_;                               \
        } else {                                                                           \
            const T *s_ = (const T *)t->src + base;                                        \
            for (int64_t i = 0; i < t->row; i++) {                                         \
                int64_t j = t->last[i];                                                    \
                d_[i] = j < 0 ? f_ : s_[j];                                                \
            }                                                                              \
        }                                                                                  \
    } while (0)

static void remap_chunk(void *ctx, int64_t lo, int64_t hi)
{
    const remap_task *t = ctx;
    for (int64_t r = lo; r < hi; r++) {
        /* the row's outer coordinates (all dims but the last), and their source offset */
        int64_t base = 0, rem = r;
        for (int d = t->rank - 2; d >= 0; d--) {
            int64_t c = rem % t->od[d];
            rem /= t->od[d];
            int64_t sc = td__remap_src(&t->m, d, c);
            if (sc < 0) {
                base = -1;
                break;
            }
            base += sc * t->xs[d];
        }
        switch (t->es) {
        case 1: REMAP_ROW(uint8_t); break;
        case 2: REMAP_ROW(uint16_t); break;
        case 4: REMAP_ROW(uint32_t); break;
        case 8: REMAP_ROW(uint64_t); break;
        }
    }
}

static td_status exec_remap(const td__cpu_exec *x, const td__op *op, const td__view *in,
                            const td__view *out)
{
    const td__desc *xd = &in[0].desc, *od = &out->desc;
    const int64_t n = td__cpu_nelem(od);
    if (n == 0) return TD_OK;
    remap_task t = {.rank = (int)od->rank, .src = in[0].data, .dst = out->data,
                    .es = td__cpu_dtype_size(od->dtype)};
    if (!td__remap_init(&t.m, op, xd))
        return td__cpu_fail(x, TD_EINTERNAL, "cpu: remap of opcode %u", op->opcode);
    if (op->opcode == TD_OP_PAD) td__cpu_store_double(od->dtype, &t.fill, 0, op->fattrs[0]);
    td__desc_strides(xd, t.xs);
    for (uint32_t d = 0; d < od->rank; d++) t.od[d] = od->dims[d];
    t.row = od->rank > 0 ? od->dims[od->rank - 1] : 1;
    int64_t *last = td__malloc((size_t)t.row * sizeof *last);
    if (last == NULL) return td__cpu_fail(x, TD_ENOMEM, "cpu: %s: out of memory", td__op_name(op->opcode));
    for (int64_t i = 0; i < t.row; i++)
        last[i] = od->rank > 0 ? td__remap_src(&t.m, (int)od->rank - 1, i) : 0;
    t.last = last;
    td__cpu_run(x, n / t.row, t.row, remap_chunk, &t);
    td__free(last);
    return TD_OK;
}

/* ---- tril / triu ---- */

typedef struct tri_task {
    const char *src;
    char *dst;
    size_t es;
    int64_t m, n, k; /* rows, cols of each matrix; k the diagonal, clamped to [-m-1, n+1] */
    bool upper;
} tri_task;

static void tri_chunk(void *ctx, int64_t lo, int64_t hi)
{
    const tri_task *t = ctx;
    const size_t rb = (size_t)t->n * t->es;
    for (int64_t r = lo; r < hi; r++) {
        const int64_t i = r % t->m;
        /* tril keeps columns [0, i + k + 1); triu keeps [i + k, n) */
        int64_t c = t->upper ? i + t->k : i + t->k + 1;
        c = c < 0 ? 0 : c > t->n ? t->n : c;
        const char *s = t->src + (size_t)r * rb;
        char *d = t->dst + (size_t)r * rb;
        const size_t cb = (size_t)c * t->es;
        if (t->upper) {
            memset(d, 0, cb);
            memcpy(d + cb, s + cb, rb - cb);
        } else {
            memcpy(d, s, cb);
            memset(d + cb, 0, rb - cb);
        }
    }
}

static td_status exec_tri(const td__cpu_exec *x, const td__op *op, const td__view *in,
                          const td__view *out)
{
    const td__desc *od = &out->desc;
    if (td__cpu_nelem(od) == 0) return TD_OK;
    tri_task t = {.src = in[0].data, .dst = out->data, .es = td__cpu_dtype_size(od->dtype),
                  .m = od->dims[od->rank - 2], .n = od->dims[od->rank - 1],
                  .upper = op->opcode == TD_OP_TRIU};
    int64_t k = op->iattrs[0];
    t.k = k < -t.m - 1 ? -t.m - 1 : k > t.n + 1 ? t.n + 1 : k;
    td__cpu_run(x, td__cpu_nelem(od) / t.n, t.n, tri_chunk, &t);
    return TD_OK;
}

/* ---- dispatch ---- */

td_status td__cpu_exec_movement(const td__cpu_exec *x, const td__op *op, const td__view *in,
                                const td__view *out)
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
        return td__cpu_exec_indexed(x, op, in, out);
    }
    int64_t n = td__cpu_nelem(od);
    size_t es = td__cpu_dtype_size(od->dtype);
    if (es == 0) return td__cpu_fail(x, TD_EINTERNAL, "cpu: dtype %u", od->dtype);
    int64_t own[TD_MAX_RANK], st[TD_MAX_RANK];
    td__desc_strides(xd, own);
    switch (op->opcode) {
    case TD_OP_COPY: {
        if (n == 0) return TD_OK;
        bytes_task t = {.src = in[0].data, .dst = out->data};
        td__cpu_run(x, n * (int64_t)es, 1, bytes_chunk, &t);
        return TD_OK;
    }
    case TD_OP_PERMUTE:
        for (uint32_t d = 0; d < od->rank; d++) {
            int64_t p = op->iattrs[d];
            if (p < 0 || p >= (int64_t)xd->rank)
                return td__cpu_fail(x, TD_EINTERNAL, "cpu: permute entry %lld", (long long)p);
            st[d] = own[p];
        }
        if (n > 0) strided_copy(x, out, in[0].data, st);
        return TD_OK;
    case TD_OP_SLICE: {
        if (n == 0) return TD_OK;
        int64_t base = 0;
        for (uint32_t d = 0; d < xd->rank; d++) base += op->iattrs[d] * own[d];
        strided_copy(x, out, (const char *)in[0].data + (size_t)base * es, own);
        return TD_OK;
    }
    case TD_OP_EXPAND:
        if (n == 0) return TD_OK;
        td__desc_bcast_strides(xd, od, st);
        strided_copy(x, out, in[0].data, st);
        return TD_OK;
    case TD_OP_SLICE_STEP:
    case TD_OP_FLIP: {
        if (n == 0) return TD_OK;
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
        strided_copy(x, out, (const char *)in[0].data + base * (int64_t)es, st);
        return TD_OK;
    }
    }
    return td__cpu_fail(x, TD_EINTERNAL, "cpu: movement opcode %u", op->opcode);
}

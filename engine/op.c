/* op.c — the op table's validation and shape inference (see op.h for the attribute layout).
 *
 * Every op from the client API and every op off the wire goes through td__op_infer(), so
 * this file is the single place where "is this op well formed?" is decided. It treats all
 * fields as hostile: opcode, dtype, counts, dims, axes and perms are range-checked before
 * any is used as an index, and every size product is overflow-checked.
 */
#include "engine/op.h"
#include "common/checked.h"
#include "common/errbuf.h"
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *td__op_name(uint32_t opcode)
{
    switch (opcode) {
#define TD__OPCODE_NAME(name, value, str)                                                  \
    case TD_OP_##name:                                                                     \
        return str;
        TD_OPCODE_MAP(TD__OPCODE_NAME)
#undef TD__OPCODE_NAME
    }
    return "unknown";
}

enum td__op_class td__op_class(uint32_t opcode)
{
    switch (opcode) {
    case TD_OP_EMPTY: case TD_OP_FULL: case TD_OP_ARANGE: case TD_OP_RAND_UNIFORM:
    case TD_OP_RAND_NORMAL:
        return TD_OPCLASS_CREATE;
    case TD_OP_NEG: case TD_OP_ABS: case TD_OP_EXP: case TD_OP_LOG: case TD_OP_SQRT:
    case TD_OP_RSQRT: case TD_OP_TANH: case TD_OP_SIGMOID: case TD_OP_RELU:
        return TD_OPCLASS_UNARY;
    case TD_OP_ADD: case TD_OP_SUB: case TD_OP_MUL: case TD_OP_DIV: case TD_OP_POW:
    case TD_OP_MAXIMUM: case TD_OP_MINIMUM:
        return TD_OPCLASS_BINARY;
    case TD_OP_EQ: case TD_OP_NE: case TD_OP_LT: case TD_OP_LE: case TD_OP_GT: case TD_OP_GE:
        return TD_OPCLASS_COMPARE;
    case TD_OP_WHERE:
        return TD_OPCLASS_WHERE;
    case TD_OP_CAST:
        return TD_OPCLASS_CAST;
    case TD_OP_SUM: case TD_OP_MEAN: case TD_OP_MAX: case TD_OP_MIN: case TD_OP_ARGMAX:
    case TD_OP_PROD: case TD_OP_ARGMIN:
        return TD_OPCLASS_REDUCE;
    case TD_OP_MATMUL:
        return TD_OPCLASS_MATMUL;
    case TD_OP_RESHAPE: case TD_OP_PERMUTE: case TD_OP_SLICE: case TD_OP_CONCAT:
    case TD_OP_EXPAND: case TD_OP_GATHER: case TD_OP_INDEX_SELECT: case TD_OP_COPY:
        return TD_OPCLASS_MOVEMENT;
    case TD_OP_SOFTMAX: case TD_OP_LOG_SOFTMAX:
        return TD_OPCLASS_SOFTMAX;
    }
    return TD_OPCLASS_NONE;
}

int64_t td__desc_nelem(const td__desc *d)
{
    /* Unsigned and checked: a desc that never passed td__desc_check (a rule's raw result,
     * a fuzzer's input) must not reach signed overflow here. A zero dim wins over any
     * overflow of the others, as in the mathematical product. */
    uint64_t n = 1;
    bool overflow = false;
    uint32_t rank = d->rank < TD_MAX_RANK ? d->rank : TD_MAX_RANK;
    for (uint32_t i = 0; i < rank; i++) {
        if (d->dims[i] < 0) return -1;
        if (d->dims[i] == 0) return 0;
        if (!overflow && !td__mul_u64(n, (uint64_t)d->dims[i], &n)) overflow = true;
    }
    return overflow || n > (uint64_t)INT64_MAX ? -1 : (int64_t)n;
}

size_t td__desc_nbytes(const td__desc *d)
{
    int64_t n = td__desc_nelem(d);
    uint64_t nbytes;
    if (n < 0 || !td__mul_u64((uint64_t)n, td_dtype_size((td_dtype)d->dtype), &nbytes) ||
        nbytes > SIZE_MAX)
        return SIZE_MAX;
    return (size_t)nbytes;
}

bool td__desc_equal(const td__desc *a, const td__desc *b)
{
    if (a->dtype != b->dtype || a->rank != b->rank) return false;
    for (uint32_t i = 0; i < a->rank; i++)
        if (a->dims[i] != b->dims[i]) return false;
    return true;
}

td_status td__einval(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    td__verrf(err, errlen, fmt, ap);
    va_end(ap);
    return TD_EINVAL;
}

/* "[2, 3, 4]" into buf. */
static const char *shape_str(const td__desc *d, char *buf, size_t len)
{
    size_t o = 0;
    o += (size_t)snprintf(buf + o, len - o, "[");
    for (uint32_t i = 0; i < d->rank && i < TD_MAX_RANK && o < len; i++) {
        o += (size_t)snprintf(buf + o, len - o, i ? ", %lld" : "%lld", (long long)d->dims[i]);
    }
    if (o < len) snprintf(buf + o, len - o, "]");
    return buf;
}

void td__desc_str(const td__desc *d, char *buf, size_t len)
{
    size_t o = (size_t)snprintf(buf, len, "%s", td_dtype_name((td_dtype)d->dtype));
    if (o < len) shape_str(d, buf + o, len - o);
}

td_status td__desc_check(const td__desc *d, char *err, size_t errlen)
{
    if (!td__dtype_valid(d->dtype)) return td__einval(err, errlen, "unknown dtype %u", d->dtype);
    if (d->rank > TD_MAX_RANK)
        return td__einval(err, errlen, "rank %u exceeds the maximum %d", d->rank, TD_MAX_RANK);
    /* span: the product of the non-zero dims, in bytes. Strides and element counts are
     * int64 products of dims taken in any order, so the span must fit even when a zero dim
     * makes the tensor empty ([0, 2^40, 2^40] would otherwise overflow a stride). The
     * element count is 0 or the span, so bounding the span bounds the byte size. */
    uint64_t span = td_dtype_size((td_dtype)d->dtype);
    bool empty = false, fits = true;
    for (uint32_t i = 0; i < d->rank; i++) {
        if (d->dims[i] < 0)
            return td__einval(err, errlen, "dim %u is negative (%lld)", i, (long long)d->dims[i]);
        if (d->dims[i] == 0) {
            empty = true;
        } else if (fits && (!td__mul_u64(span, (uint64_t)d->dims[i], &span) ||
                            span > TD_MAX_TENSOR_BYTES)) {
            fits = false;
        }
    }
    if (!fits) {
        char sb[192];
        shape_str(d, sb, sizeof sb);
        if (empty)
            return td__einval(err, errlen,
                              "shape %s of %s is too large: it has no elements, but its non-zero "
                              "dims span more than %llu bytes (the limit, which keeps strides "
                              "in int64)",
                              sb, td_dtype_name((td_dtype)d->dtype),
                              (unsigned long long)TD_MAX_TENSOR_BYTES);
        return td__einval(err, errlen, "shape %s of %s is too large: more than %llu bytes (the limit)",
                          sb, td_dtype_name((td_dtype)d->dtype),
                          (unsigned long long)TD_MAX_TENSOR_BYTES);
    }
    return TD_OK;
}

bool td__broadcast_shapes(const td__desc *a, const td__desc *b, td__desc *out)
{
    uint32_t r = a->rank > b->rank ? a->rank : b->rank;
    td__desc o = {.dtype = a->dtype, .rank = r};
    for (uint32_t i = 0; i < r; i++) {
        int64_t da = i < r - a->rank ? 1 : a->dims[i - (r - a->rank)];
        int64_t db = i < r - b->rank ? 1 : b->dims[i - (r - b->rank)];
        if (da == db || db == 1) {
            o.dims[i] = da;
        } else if (da == 1) {
            o.dims[i] = db;
        } else {
            return false;
        }
    }
    *out = o;
    return true;
}

/* Shape from iattrs (EMPTY FULL RAND_* RESHAPE EXPAND). */
static td_status shape_from_attrs(const td__op *op, uint32_t dtype, td__desc *out, char *err,
                                  size_t errlen)
{
    if (op->n_iattrs > TD_MAX_RANK)
        return td__einval(err, errlen, "rank %u exceeds the maximum %d", op->n_iattrs, TD_MAX_RANK);
    td__desc d = {.dtype = dtype, .rank = op->n_iattrs};
    for (uint32_t i = 0; i < op->n_iattrs; i++) d.dims[i] = op->iattrs[i];
    td_status s = td__desc_check(&d, err, errlen);
    if (s == TD_OK) *out = d;
    return s;
}

static bool is_numeric(uint32_t dt) { return dt != TD_BOOL; }

static td_status infer_reduce(const td__op *op, const td__desc *x, td__desc *out, char *err,
                              size_t errlen)
{
    if (op->n_iattrs != 2)
        return td__einval(err, errlen, "expects 2 attributes (axes mask, keepdims), got %u",
                          op->n_iattrs);
    int64_t mask = op->iattrs[0], keep = op->iattrs[1];
    if (mask < 0 || (x->rank < 63 && (mask >> x->rank) != 0))
        return td__einval(err, errlen, "axes mask 0x%llx names axes beyond rank %u",
                          (unsigned long long)mask, x->rank);
    if (keep != 0 && keep != 1) return td__einval(err, errlen, "keepdims must be 0 or 1");
    int naxes = __builtin_popcountll((unsigned long long)mask);
    uint32_t oc = op->opcode;
    if ((oc == TD_OP_ARGMAX || oc == TD_OP_ARGMIN) && naxes != 1)
        return td__einval(err, errlen, "needs exactly one axis, got %d", naxes);
    if (oc == TD_OP_MEAN && !td__dtype_is_float(x->dtype))
        return td__einval(err, errlen, "needs a float dtype, got %s", td_dtype_name(x->dtype));
    if ((oc == TD_OP_SUM || oc == TD_OP_PROD) && x->dtype == TD_BOOL)
        return td__einval(err, errlen, "needs a numeric dtype, got bool (cast first)");
    td__desc o = {.dtype = x->dtype, .rank = 0};
    if (oc == TD_OP_ARGMAX || oc == TD_OP_ARGMIN) o.dtype = TD_I64;
    for (uint32_t i = 0; i < x->rank; i++) {
        bool reduced = (mask >> i) & 1;
        if (reduced && x->dims[i] == 0 &&
            (oc == TD_OP_MAX || oc == TD_OP_MIN || oc == TD_OP_ARGMAX || oc == TD_OP_ARGMIN))
            return td__einval(err, errlen, "cannot reduce zero-length axis %u", i);
        if (!reduced) {
            o.dims[o.rank++] = x->dims[i];
        } else if (keep) {
            o.dims[o.rank++] = 1;
        }
    }
    *out = o;
    return TD_OK;
}

/* SOFTMAX LOG_SOFTMAX: iattrs = {axis}; a float input with a non-empty axis. */
static td_status infer_softmax(const td__op *op, const td__desc *x, td__desc *out, char *err,
                               size_t errlen)
{
    if (op->n_iattrs != 1)
        return td__einval(err, errlen, "expects 1 attribute (axis), got %u", op->n_iattrs);
    int64_t ax = op->iattrs[0];
    if (ax < 0 || ax >= (int64_t)x->rank)
        return td__einval(err, errlen, "axis %lld out of range for rank %u", (long long)ax,
                          x->rank);
    if (!td__dtype_is_float(x->dtype))
        return td__einval(err, errlen, "needs a float dtype, got %s", td_dtype_name(x->dtype));
    if (x->dims[ax] == 0)
        return td__einval(err, errlen, "cannot normalise along zero-length axis %lld",
                          (long long)ax);
    *out = *x;
    return TD_OK;
}

static td_status infer_matmul(const td__desc *a, const td__desc *b, td__desc *out, char *err,
                              size_t errlen)
{
    char sa[160], sb[160];
    if (a->rank < 2 || b->rank < 2)
        return td__einval(err, errlen, "needs rank >= 2 operands, got %s and %s",
                          shape_str(a, sa, sizeof sa), shape_str(b, sb, sizeof sb));
    if (a->dtype != b->dtype)
        return td__einval(err, errlen, "dtypes %s and %s differ", td_dtype_name(a->dtype),
                          td_dtype_name(b->dtype));
    if (a->dtype == TD_BOOL) return td__einval(err, errlen, "needs a numeric dtype, got bool");
    int64_t k1 = a->dims[a->rank - 1], k2 = b->dims[b->rank - 2];
    if (k1 != k2)
        return td__einval(err, errlen, "inner dims %lld and %lld differ (%s x %s)", (long long)k1,
                          (long long)k2, shape_str(a, sa, sizeof sa), shape_str(b, sb, sizeof sb));
    td__desc ba = *a, bb = *b, bo;
    ba.rank -= 2;
    bb.rank -= 2;
    if (!td__broadcast_shapes(&ba, &bb, &bo))
        return td__einval(err, errlen, "batch dims of %s and %s do not broadcast",
                          shape_str(a, sa, sizeof sa), shape_str(b, sb, sizeof sb));
    bo.dims[bo.rank++] = a->dims[a->rank - 2];
    bo.dims[bo.rank++] = b->dims[b->rank - 1];
    bo.dtype = a->dtype;
    *out = bo;
    return TD_OK;
}

static td_status infer_movement(const td__op *op, const td__desc *const *in, td__desc *out,
                                char *err, size_t errlen)
{
    const td__desc *x = in[0];
    char sx[160], sy[160];
    td__desc o = *x;
    switch (op->opcode) {
    case TD_OP_COPY:
        break;
    case TD_OP_RESHAPE: {
        td_status s = shape_from_attrs(op, x->dtype, &o, err, errlen);
        if (s != TD_OK) return s;
        if (td__desc_nelem(&o) != td__desc_nelem(x))
            return td__einval(err, errlen, "cannot reshape %s (%lld elements) to %s",
                              shape_str(x, sx, sizeof sx), (long long)td__desc_nelem(x),
                              shape_str(&o, sy, sizeof sy));
        break;
    }
    case TD_OP_EXPAND: {
        td_status s = shape_from_attrs(op, x->dtype, &o, err, errlen);
        if (s != TD_OK) return s;
        td__desc b;
        if (o.rank < x->rank || !td__broadcast_shapes(x, &o, &b) ||
            memcmp(b.dims, o.dims, sizeof(int64_t) * o.rank) != 0)
            return td__einval(err, errlen, "cannot broadcast %s to %s", shape_str(x, sx, sizeof sx),
                              shape_str(&o, sy, sizeof sy));
        break;
    }
    case TD_OP_PERMUTE: {
        if (op->n_iattrs != x->rank)
            return td__einval(err, errlen, "perm has %u entries for rank %u", op->n_iattrs,
                              x->rank);
        bool seen[TD_MAX_RANK] = {false};
        for (uint32_t i = 0; i < x->rank; i++) {
            int64_t p = op->iattrs[i];
            if (p < 0 || p >= (int64_t)x->rank || seen[p])
                return td__einval(err, errlen, "perm entry %u (%lld) is not a permutation of 0..%u",
                                  i, (long long)p, x->rank - 1);
            seen[p] = true;
            o.dims[i] = x->dims[p];
        }
        break;
    }
    case TD_OP_SLICE: {
        if (op->n_iattrs != 2 * x->rank)
            return td__einval(err, errlen, "expects %u attributes (starts, stops), got %u",
                              2 * x->rank, op->n_iattrs);
        for (uint32_t i = 0; i < x->rank; i++) {
            int64_t a = op->iattrs[i], b = op->iattrs[x->rank + i];
            if (a < 0 || b < a || b > x->dims[i])
                return td__einval(err, errlen, "axis %u: [%lld, %lld) is not inside [0, %lld]", i,
                                  (long long)a, (long long)b, (long long)x->dims[i]);
            o.dims[i] = b - a;
        }
        break;
    }
    case TD_OP_CONCAT: {
        if (op->n_iattrs != 1)
            return td__einval(err, errlen, "expects 1 attribute (axis), got %u", op->n_iattrs);
        int64_t ax = op->iattrs[0];
        if (x->rank == 0) return td__einval(err, errlen, "cannot concatenate rank-0 tensors");
        if (ax < 0 || ax >= (int64_t)x->rank)
            return td__einval(err, errlen, "axis %lld out of range for rank %u", (long long)ax,
                              x->rank);
        int64_t total = 0;
        for (uint32_t k = 0; k < op->n_inputs; k++) {
            const td__desc *y = in[k];
            if (y->dtype != x->dtype || y->rank != x->rank)
                return td__einval(err, errlen, "input %u (%s %s) does not match input 0 (%s %s)", k,
                                  td_dtype_name(y->dtype), shape_str(y, sy, sizeof sy),
                                  td_dtype_name(x->dtype), shape_str(x, sx, sizeof sx));
            for (uint32_t i = 0; i < x->rank; i++) {
                if ((int64_t)i != ax && y->dims[i] != x->dims[i])
                    return td__einval(err, errlen, "input %u dim %u is %lld, input 0 has %lld", k,
                                      i, (long long)y->dims[i], (long long)x->dims[i]);
            }
            if (__builtin_add_overflow(total, y->dims[ax], &total))
                return td__einval(err, errlen, "concatenated dim overflows");
        }
        o.dims[ax] = total;
        break;
    }
    case TD_OP_GATHER:
    case TD_OP_INDEX_SELECT: {
        const td__desc *idx = in[1];
        if (op->n_iattrs != 1)
            return td__einval(err, errlen, "expects 1 attribute (axis), got %u", op->n_iattrs);
        int64_t ax = op->iattrs[0];
        if (ax < 0 || ax >= (int64_t)x->rank)
            return td__einval(err, errlen, "axis %lld out of range for rank %u", (long long)ax,
                              x->rank);
        if (idx->dtype != TD_I32 && idx->dtype != TD_I64)
            return td__einval(err, errlen, "index dtype must be i32 or i64, got %s",
                              td_dtype_name(idx->dtype));
        if (op->opcode == TD_OP_GATHER) {
            if (idx->rank != x->rank)
                return td__einval(err, errlen, "index rank %u differs from input rank %u",
                                  idx->rank, x->rank);
            for (uint32_t i = 0; i < x->rank; i++) {
                if ((int64_t)i != ax && idx->dims[i] > x->dims[i])
                    return td__einval(err, errlen, "index dim %u (%lld) exceeds input dim (%lld)",
                                      i, (long long)idx->dims[i], (long long)x->dims[i]);
            }
            o = *idx;
            o.dtype = x->dtype;
        } else {
            if (x->rank - 1 + idx->rank > TD_MAX_RANK)
                return td__einval(err, errlen, "result rank %u exceeds %d", x->rank - 1 + idx->rank,
                                  TD_MAX_RANK);
            o.rank = 0;
            for (int64_t i = 0; i < ax; i++) o.dims[o.rank++] = x->dims[i];
            for (uint32_t i = 0; i < idx->rank; i++) o.dims[o.rank++] = idx->dims[i];
            for (uint32_t i = (uint32_t)ax + 1; i < x->rank; i++) o.dims[o.rank++] = x->dims[i];
            if (x->dims[ax] == 0 && td__desc_nelem(idx) > 0)
                return td__einval(err, errlen, "cannot select from zero-length axis %lld",
                                  (long long)ax);
            *out = o;
            return TD_OK;
        }
        if (x->dims[ax] == 0 && td__desc_nelem(idx) > 0)
            return td__einval(err, errlen, "cannot gather from zero-length axis %lld",
                              (long long)ax);
        break;
    }
    default:
        return td__einval(err, errlen, "not a movement op");
    }
    *out = o;
    return TD_OK;
}

/* Arity of each class/opcode: exact count, or a range for CONCAT. */
static bool arity_ok(uint32_t opcode, uint32_t n, uint32_t *want)
{
    switch (td__op_class(opcode)) {
    case TD_OPCLASS_CREATE: *want = 0; break;
    case TD_OPCLASS_UNARY: case TD_OPCLASS_CAST: case TD_OPCLASS_REDUCE:
    case TD_OPCLASS_SOFTMAX: *want = 1; break;
    case TD_OPCLASS_BINARY: case TD_OPCLASS_COMPARE: case TD_OPCLASS_MATMUL: *want = 2; break;
    case TD_OPCLASS_WHERE: *want = 3; break;
    case TD_OPCLASS_MOVEMENT:
        if (opcode == TD_OP_CONCAT) {
            *want = 1;
            return n >= 1 && n <= TD_OP_MAX_INPUTS;
        }
        *want = (opcode == TD_OP_GATHER || opcode == TD_OP_INDEX_SELECT) ? 2 : 1;
        break;
    case TD_OPCLASS_NONE: *want = 0; return false;
    }
    return n == *want;
}

static td_status infer(const td__op *op, const td__desc *const *in, td__desc *out, char *err,
                       size_t errlen)
{
    uint32_t oc = op->opcode;
    enum td__op_class cls = td__op_class(oc);
    if (cls == TD_OPCLASS_NONE) return td__einval(err, errlen, "unknown opcode %u", oc);
    uint32_t want = 0;
    if (!arity_ok(oc, op->n_inputs, &want))
        return td__einval(err, errlen, "expects %s%u inputs, got %u",
                          oc == TD_OP_CONCAT ? "1.." : "",
                          oc == TD_OP_CONCAT ? TD_OP_MAX_INPUTS : want, op->n_inputs);
    if (op->n_iattrs > TD_OP_MAX_IATTRS)
        return td__einval(err, errlen, "%u attributes, at most %d", op->n_iattrs, TD_OP_MAX_IATTRS);
    for (uint32_t i = 0; i < op->n_inputs; i++) {
        td_status s = td__desc_check(in[i], err, errlen);
        if (s != TD_OK) return s;
    }
    /* Ops whose layout in op.h has no integer attributes take exactly none: an extra one
     * is a client bug or a probe, and accepting it would give it a meaning later. */
    bool no_attrs = cls == TD_OPCLASS_UNARY || cls == TD_OPCLASS_BINARY ||
                    cls == TD_OPCLASS_COMPARE || cls == TD_OPCLASS_WHERE ||
                    cls == TD_OPCLASS_CAST || oc == TD_OP_COPY;
    if (no_attrs && op->n_iattrs != 0)
        return td__einval(err, errlen, "expects no attributes, got %u", op->n_iattrs);
    const td__desc *x = op->n_inputs > 0 ? in[0] : NULL;
    char sa[160], sb[160];
    switch (cls) {
    case TD_OPCLASS_CREATE: {
        if (!td__dtype_valid(op->dtype))
            return td__einval(err, errlen, "unknown dtype %u", op->dtype);
        if (oc == TD_OP_ARANGE) {
            if (op->n_iattrs != 1)
                return td__einval(err, errlen, "expects 1 attribute (length), got %u",
                                  op->n_iattrs);
            if (op->iattrs[0] < 0)
                return td__einval(err, errlen, "length %lld is negative",
                                  (long long)op->iattrs[0]);
            *out = (td__desc){.dtype = op->dtype, .rank = 1, .dims = {op->iattrs[0]}};
            return TD_OK;
        }
        if ((oc == TD_OP_RAND_UNIFORM || oc == TD_OP_RAND_NORMAL) &&
            !td__dtype_is_float(op->dtype))
            return td__einval(err, errlen, "needs dtype f32 or f64, got %s",
                              td_dtype_name(op->dtype));
        return shape_from_attrs(op, op->dtype, out, err, errlen);
    }
    case TD_OPCLASS_UNARY:
        if (x->dtype == TD_BOOL) return td__einval(err, errlen, "needs a numeric dtype, got bool");
        if (oc != TD_OP_NEG && oc != TD_OP_ABS && oc != TD_OP_RELU && !td__dtype_is_float(x->dtype))
            return td__einval(err, errlen, "needs a float dtype, got %s", td_dtype_name(x->dtype));
        *out = *x;
        return TD_OK;
    case TD_OPCLASS_BINARY:
    case TD_OPCLASS_COMPARE: {
        const td__desc *y = in[1];
        if (x->dtype != y->dtype)
            return td__einval(err, errlen, "dtypes %s and %s differ (cast one first)",
                              td_dtype_name(x->dtype), td_dtype_name(y->dtype));
        if (cls == TD_OPCLASS_BINARY && !is_numeric(x->dtype))
            return td__einval(err, errlen, "needs a numeric dtype, got bool");
        if (oc == TD_OP_POW && !td__dtype_is_float(x->dtype))
            return td__einval(err, errlen, "needs a float dtype, got %s", td_dtype_name(x->dtype));
        td__desc o;
        if (!td__broadcast_shapes(x, y, &o))
            return td__einval(err, errlen, "shapes %s and %s do not broadcast",
                              shape_str(x, sa, sizeof sa), shape_str(y, sb, sizeof sb));
        if (cls == TD_OPCLASS_COMPARE) o.dtype = TD_BOOL;
        *out = o;
        return TD_OK;
    }
    case TD_OPCLASS_WHERE: {
        if (x->dtype != TD_BOOL)
            return td__einval(err, errlen, "condition must be bool, got %s",
                              td_dtype_name(x->dtype));
        if (in[1]->dtype != in[2]->dtype)
            return td__einval(err, errlen, "dtypes %s and %s differ", td_dtype_name(in[1]->dtype),
                              td_dtype_name(in[2]->dtype));
        td__desc t, o;
        if (!td__broadcast_shapes(in[1], in[2], &t) || !td__broadcast_shapes(x, &t, &o))
            return td__einval(err, errlen, "shapes do not broadcast");
        o.dtype = in[1]->dtype;
        *out = o;
        return TD_OK;
    }
    case TD_OPCLASS_CAST:
        if (!td__dtype_valid(op->dtype))
            return td__einval(err, errlen, "unknown dtype %u", op->dtype);
        *out = *x;
        out->dtype = op->dtype;
        return TD_OK;
    case TD_OPCLASS_REDUCE:
        return infer_reduce(op, x, out, err, errlen);
    case TD_OPCLASS_MATMUL: {
        if (op->n_iattrs > 1)
            return td__einval(err, errlen, "expects at most 1 attribute (precision), got %u",
                              op->n_iattrs);
        if (op->n_iattrs == 1 && op->iattrs[0] != TD_MATMUL_PRECISION_FULL &&
            op->iattrs[0] != TD_MATMUL_PRECISION_TF32)
            return td__einval(err, errlen,
                              "precision %lld is not 0 (full precision) or 1 (tf32 allowed)",
                              (long long)op->iattrs[0]);
        return infer_matmul(in[0], in[1], out, err, errlen);
    }
    case TD_OPCLASS_MOVEMENT:
        return infer_movement(op, in, out, err, errlen);
    case TD_OPCLASS_SOFTMAX:
        return infer_softmax(op, x, out, err, errlen);
    case TD_OPCLASS_NONE:
        break;
    }
    return td__einval(err, errlen, "unknown opcode %u", oc);
}

td_status td__op_infer(const td__op *op, const td__desc *const *in, td__desc *out, char *err,
                       size_t errlen)
{
    char why[512];
    td__desc o;
    td_status s = infer(op, in, &o, why, sizeof why);
    /* Structural: whatever rule produced the output, it passes the one checked
     * constructor here, so no rule (today's or a future one) can hand a backend a shape
     * whose byte size overflowed or exceeds TD_MAX_TENSOR_BYTES. */
    if (s == TD_OK) {
        char what[448];
        if (td__desc_check(&o, what, sizeof what) != TD_OK)
            s = td__einval(why, sizeof why, "output %s", what);
    }
    if (s != TD_OK) {
        if (err != NULL && errlen > 0)
            snprintf(err, errlen, "%s: %s", td__op_name(op->opcode), why);
        return s;
    }
    *out = o;
    return TD_OK;
}

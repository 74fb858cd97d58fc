/* op.c — validation and shape inference of ops against their rows in the op table
 * (engine/optable.h): the arity, attribute schema and dtype rule a row states are checked
 * generically here, then the row's shape rule runs.
 *
 * Every op from the client API and every op off the wire goes through td__op_infer(), so
 * this file is the single place where "is this op well formed?" is decided. It treats all
 * fields as hostile: opcode, dtype, counts, dims, axes and perms are range-checked before
 * any is used as an index, and every size product is overflow-checked.
 */
#include "engine/op.h"
#include "engine/window.h"
#include "common/checked.h"
#include "common/errbuf.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

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
    if (n < 0 || !td__mul_u64((uint64_t)n, td__dtype_size(d->dtype), &nbytes) ||
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
    uint64_t span = td__dtype_size(d->dtype);
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

/* ---- the row's generic checks: arity, attributes, dtypes ---- */

/* Name of input k from the row's comma-separated names ("condition, a, b"; "x..." names
 * every input "x"). */
static const char *input_name(const td__op_row *r, uint32_t k, char *buf, size_t len)
{
    const char *p = r->inputs;
    for (uint32_t i = 0; i < k; i++) {
        const char *c = strchr(p, ',');
        if (c == NULL) break;
        p = c + 1;
        while (*p == ' ') p++;
    }
    size_t n = strcspn(p, ",.");
    if (n >= len) n = len - 1;
    memcpy(buf, p, n);
    buf[n] = '\0';
    return buf;
}

/* "axes mask, keepdims": the names of a fixed schema's attributes. */
static const char *attr_names(const td__attr_schema *a, char *buf, size_t len)
{
    size_t o = 0;
    buf[0] = '\0';
    for (uint32_t i = 0; i < a->n && i < 3 && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "%s%s", i ? ", " : "", a->a[i].name);
    return buf;
}

static td_status check_attr_count(const td__op_row *r, const td__op *op, const td__desc *x,
                                  char *err, size_t errlen)
{
    const td__attr_schema *a = &r->attrs;
    uint32_t n = op->n_iattrs;
    char names[96];
    switch (a->layout) {
    case TD_ATTRS_NONE:
        if (n != 0) return td__einval(err, errlen, "expects no attributes, got %u", n);
        break;
    case TD_ATTRS_FIXED:
        if (n != a->n)
            return td__einval(err, errlen, "expects %u attribute%s (%s), got %u", a->n,
                              a->n == 1 ? "" : "s", attr_names(a, names, sizeof names), n);
        break;
    case TD_ATTRS_UPTO:
        if (n > a->n)
            return td__einval(err, errlen, "expects at most %u attribute%s (%s), got %u", a->n,
                              a->n == 1 ? "" : "s", attr_names(a, names, sizeof names), n);
        break;
    case TD_ATTRS_DIMS:
        if (n > TD_MAX_RANK)
            return td__einval(err, errlen, "rank %u exceeds the maximum %d", n, TD_MAX_RANK);
        break;
    case TD_ATTRS_BOUNDS_DIMS:
        if (n < 2) return td__einval(err, errlen, "expects low, high and dims, got %u attributes", n);
        if (n - 2 > TD_MAX_RANK)
            return td__einval(err, errlen, "rank %u exceeds the maximum %d", n - 2, TD_MAX_RANK);
        break;
    case TD_ATTRS_RANK:
        if (n != x->rank)
            return td__einval(err, errlen, "%s has %u entries for rank %u", a->a[0].name, n,
                              x->rank);
        break;
    case TD_ATTRS_2RANK:
        if (n != 2 * x->rank)
            return td__einval(err, errlen, "expects %u attributes (%s), got %u", 2 * x->rank,
                              a->a[0].name, n);
        break;
    case TD_ATTRS_3RANK:
        if (n != 3 * x->rank)
            return td__einval(err, errlen, "expects %u attributes (%s), got %u", 3 * x->rank,
                              a->a[0].name, n);
        break;
    case TD_ATTRS_MODE_2RANK:
        if (n != 1 + 2 * x->rank)
            return td__einval(err, errlen, "expects %u attributes (%s, then %s), got %u",
                              1 + 2 * x->rank, a->a[0].name, a->a[1].name, n);
        if (op->iattrs[0] < a->a[0].lo || op->iattrs[0] > a->a[0].hi)
            return td__einval(err, errlen, "%s %lld is not %s", a->a[0].name,
                              (long long)op->iattrs[0], a->a[0].values);
        break;
    case TD_ATTRS_SPATIAL: {
        if (x->rank < 3 || x->rank > 5)
            return td__einval(err, errlen,
                              "%s must be [N, C, spatial...] with 1 to 3 spatial dims (rank 3 "
                              "to 5), got rank %u",
                              r->inputs[0] == 'd' ? "dy" : "x", x->rank);
        uint32_t want = a->n + (uint32_t)a->a[2].lo * (x->rank - 2);
        if (n != want) {
            size_t o = 0;
            names[0] = '\0';
            if (a->n > 0) o = strlen(attr_names(a, names, sizeof names));
            (void)o;
            return td__einval(err, errlen, "expects %u attributes (%s%s%s per spatial dim), got %u",
                              want, names, o ? ", then " : "", a->a[2].name, n);
        }
        break;
    }
    default:
        return td__einval(err, errlen, "attribute layout %u of the op table is unknown",
                          a->layout);
    }
    return TD_OK;
}

/* Value ranges of the scalar attributes (FIXED and UPTO layouts). */
static td_status check_attr_values(const td__op_row *r, const td__op *op, const td__desc *x,
                                   char *err, size_t errlen)
{
    const td__attr_schema *a = &r->attrs;
    if (a->layout != TD_ATTRS_FIXED && a->layout != TD_ATTRS_UPTO &&
        a->layout != TD_ATTRS_SPATIAL)
        return TD_OK;
    uint32_t rank = x != NULL ? x->rank : 0;
    for (uint32_t i = 0; i < op->n_iattrs && i < a->n && i < 3; i++) {
        const td__attr_spec *sp = &a->a[i];
        int64_t v = op->iattrs[i];
        switch (sp->kind) {
        case TD_ATTR_NONNEG:
            if (v < 0) return td__einval(err, errlen, "%s %lld is negative", sp->name, (long long)v);
            break;
        case TD_ATTR_ENUM:
            if (v < sp->lo || v > sp->hi)
                return td__einval(err, errlen, "%s %lld is not %s", sp->name, (long long)v,
                                  sp->values);
            break;
        case TD_ATTR_AXIS:
            if (v < 0 || v >= (int64_t)rank)
                return td__einval(err, errlen, "%s %lld out of range for rank %u", sp->name,
                                  (long long)v, rank);
            break;
        case TD_ATTR_AXES_MASK:
            if (v < 0 || (rank < 63 && (v >> rank) != 0))
                return td__einval(err, errlen, "%s 0x%llx names axes beyond rank %u", sp->name,
                                  (unsigned long long)v, rank);
            break;
        default:
            break;
        }
    }
    return TD_OK;
}

/* The float attribute rules of the row's flags (TD_OPF_F0_*). */
/* The row flags' rules for fattrs[0] (var/std's correction, norm's p). */
static td_status check_fattr_flags(const td__op_row *r, const td__op *op, char *err,
                                   size_t errlen)
{
    double v = op->fattrs[0];
    if ((r->flags & (TD_OPF_F0_NONNEG | TD_OPF_F0_NOTNAN)) && v != v)
        return td__einval(err, errlen, "%s is NaN", r->fattrs);
    if ((r->flags & TD_OPF_F0_NONNEG) && v < 0)
        return td__einval(err, errlen, "%s %g is negative", r->fattrs, v);
    return TD_OK;
}

static td_status check_dtypes(const td__op_row *r, const td__op *op, const td__desc *const *in,
                              char *err, size_t errlen)
{
    char nb[32];
    if (r->attr_dtype != TD_DTC_NONE) {
        if (!td__dtype_valid(op->dtype))
            return td__einval(err, errlen, "unknown dtype %u", op->dtype);
        if (!td__dtype_in(op->dtype, r->attr_dtype))
            return td__einval(err, errlen, "needs %s, got %s", td__dtype_class_str(r->attr_dtype),
                              td_dtype_name((td_dtype)op->dtype));
    }
    uint32_t first = r->same_dtype == TD_SAME_ALL ? 0 : r->same_dtype == TD_SAME_REST ? 1 : op->n_inputs;
    for (uint32_t k = first + 1; k < op->n_inputs; k++) {
        if (in[k]->dtype != in[first]->dtype)
            return td__einval(err, errlen, "dtypes %s and %s differ (cast one first)",
                              td_dtype_name((td_dtype)in[first]->dtype),
                              td_dtype_name((td_dtype)in[k]->dtype));
    }
    for (uint32_t k = 0; k < op->n_inputs; k++) {
        unsigned cls = k == 0 ? r->in_dtype : r->rest_dtype;
        uint32_t dt = in[k]->dtype;
        if (td__dtype_in(dt, cls)) continue;
        const char *dn = td_dtype_name((td_dtype)dt);
        if (cls == TD_DTC_BOOL)
            return td__einval(err, errlen, "%s must be bool, got %s", input_name(r, k, nb, sizeof nb), dn);
        if (cls == TD_DTC_INDEX)
            return td__einval(err, errlen, "%s dtype must be i32 or i64, got %s",
                              input_name(r, k, nb, sizeof nb), dn);
        if (k == 0) return td__einval(err, errlen, "needs %s, got %s", td__dtype_class_str(cls), dn);
        return td__einval(err, errlen, "%s needs %s, got %s", input_name(r, k, nb, sizeof nb),
                          td__dtype_class_str(cls), dn);
    }
    return TD_OK;
}

/* The float attributes of the rows that use them (the row's fattrs column says what each
 * holds); checked at record time so a bad value names the op instead of surfacing as NaN. */
static td_status check_fattrs(const td__op *op, char *err, size_t errlen)
{
    const double a = op->fattrs[0], b = op->fattrs[1];
    switch (op->opcode) {
    case TD_OP_SOFTPLUS:
        if (!isfinite(a) || a == 0.0)
            return td__einval(err, errlen, "beta %g must be finite and not 0", a);
        if (!isfinite(b)) return td__einval(err, errlen, "threshold %g must be finite", b);
        break;
    case TD_OP_LEAKY_RELU:
        if (!isfinite(a)) return td__einval(err, errlen, "slope %g must be finite", a);
        break;
    case TD_OP_ELU:
        if (!isfinite(a)) return td__einval(err, errlen, "alpha %g must be finite", a);
        break;
    case TD_OP_RAND_UNIFORM:
        if (!isfinite(a) || !isfinite(b))
            return td__einval(err, errlen, "bounds [%g, %g] must be finite", a, b);
        if (a > b) return td__einval(err, errlen, "low %g exceeds high %g", a, b);
        break;
    case TD_OP_RAND_NORMAL:
        if (!isfinite(a)) return td__einval(err, errlen, "mean %g must be finite", a);
        if (!isfinite(b) || b < 0)
            return td__einval(err, errlen, "stddev %g must be finite and >= 0", b);
        break;
    case TD_OP_BERNOULLI_SCALAR:
        if (!(a >= 0.0 && a <= 1.0))
            return td__einval(err, errlen, "p %g is outside [0, 1]", a);
        break;
    case TD_OP_TRUNC_NORMAL: {
        const double lo = op->fattrs[2], hi = op->fattrs[3];
        if (!isfinite(a)) return td__einval(err, errlen, "mean %g must be finite", a);
        if (!isfinite(b) || !(b > 0))
            return td__einval(err, errlen, "stddev %g must be finite and > 0", b);
        if (!isfinite(lo) || !isfinite(hi))
            return td__einval(err, errlen, "bounds [%g, %g] must be finite", lo, hi);
        if (!(lo < hi)) return td__einval(err, errlen, "a %g must be below b %g", lo, hi);
        break;
    }
    case TD_OP_LAYER_NORM: case TD_OP_RMS_NORM: case TD_OP_GROUP_NORM: case TD_OP_BATCH_NORM:
    case TD_OP_LAYER_NORM_BACKWARD: case TD_OP_RMS_NORM_BACKWARD:
    case TD_OP_GROUP_NORM_BACKWARD: case TD_OP_BATCH_NORM_BACKWARD:
        if (!isfinite(a) || a < 0)
            return td__einval(err, errlen, "eps %g must be finite and >= 0", a);
        break;
    case TD_OP_DROPOUT:
        if (!(a >= 0 && a <= 1)) return td__einval(err, errlen, "p %g is not in [0, 1]", a);
        break;
    case TD_OP_SCALED_DOT_PRODUCT_ATTENTION:
        if (!isfinite(a)) return td__einval(err, errlen, "scale %g must be finite", a);
        break;
    case TD_OP_CLAMP:
        if (isnan(a) || isnan(b))
            return td__einval(err, errlen, "bounds [%g, %g] must not be NaN", a, b);
        if (a > b) return td__einval(err, errlen, "lower bound %g exceeds upper bound %g", a, b);
        break;
    default:
        break;
    }
    return TD_OK;
}

/* RANDINT's integer bounds: low < high, both inside the dtype (high may be its maximum + 1). */
static td_status check_randint(const td__op *op, char *err, size_t errlen)
{
    const int64_t low = op->iattrs[0], high = op->iattrs[1];
    if (low >= high)
        return td__einval(err, errlen, "low %lld must be below high %lld", (long long)low,
                          (long long)high);
    int64_t mn = INT64_MIN, mx = INT64_MAX;
    switch (op->dtype) {
    case TD_I8: mn = INT8_MIN, mx = INT8_MAX; break;
    case TD_I16: mn = INT16_MIN, mx = INT16_MAX; break;
    case TD_I32: mn = INT32_MIN, mx = INT32_MAX; break;
    case TD_U8: mn = 0, mx = UINT8_MAX; break;
    default: break;
    }
    /* high - 1 is the largest value drawn; it cannot overflow since low < high */
    if (low < mn || high - 1 > mx)
        return td__einval(err, errlen, "[%lld, %lld) does not fit %s ([%lld, %lld])",
                          (long long)low, (long long)high, td_dtype_name((td_dtype)op->dtype),
                          (long long)mn, (long long)mx);
    return TD_OK;
}

static uint32_t out_dtype(const td__op_row *r, const td__op *op, const td__desc *const *in)
{
    switch (r->out_dtype) {
    case TD_OUT_ATTR: return op->dtype;
    case TD_OUT_BOOL: return TD_BOOL;
    case TD_OUT_I64: return TD_I64;
    case TD_OUT_IN1: return in[1]->dtype;
    default: return in[0]->dtype;
    }
}

/* ---- shape rules ---- */

/* Shape from iattrs (the TD_ATTRS_DIMS layout, whose count is checked). */
static td_status shape_from_attrs(const td__op *op, uint32_t dtype, td__desc *out, char *err,
                                  size_t errlen)
{
    const uint32_t at = td__op_dims_at(td__op_row_of(op->opcode));
    td__desc d = {.dtype = dtype, .rank = op->n_iattrs - at};
    for (uint32_t i = 0; i < d.rank; i++) d.dims[i] = op->iattrs[at + i];
    td_status s = td__desc_check(&d, err, errlen);
    if (s == TD_OK) *out = d;
    return s;
}

static td_status shape_reduce(const td__op_row *r, const td__op *op, const td__desc *x,
                              td__desc *out, char *err, size_t errlen)
{
    int64_t mask = op->iattrs[0], keep = op->iattrs[1];
    int naxes = __builtin_popcountll((unsigned long long)mask);
    if ((r->flags & TD_OPF_ONE_AXIS) && naxes != 1)
        return td__einval(err, errlen, "needs exactly one axis, got %d", naxes);
    td__desc o = {.dtype = x->dtype, .rank = 0};
    for (uint32_t i = 0; i < x->rank; i++) {
        bool reduced = (mask >> i) & 1;
        if (reduced && x->dims[i] == 0 && (r->flags & TD_OPF_NONEMPTY_AXIS))
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

static td_status shape_matmul(const td__desc *a, const td__desc *b, td__desc *out, char *err,
                              size_t errlen)
{
    char sa[160], sb[160];
    if (a->rank < 2 || b->rank < 2)
        return td__einval(err, errlen, "needs rank >= 2 operands, got %s and %s",
                          shape_str(a, sa, sizeof sa), shape_str(b, sb, sizeof sb));
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
    *out = bo;
    return TD_OK;
}

static td_status shape_gather(const td__op *op, const td__desc *x, const td__desc *idx,
                              td__desc *out, char *err, size_t errlen)
{
    int64_t ax = op->iattrs[0];
    td__desc o;
    if (op->opcode == TD_OP_GATHER) {
        if (idx->rank != x->rank)
            return td__einval(err, errlen, "index rank %u differs from input rank %u", idx->rank,
                              x->rank);
        for (uint32_t i = 0; i < x->rank; i++) {
            if ((int64_t)i != ax && idx->dims[i] > x->dims[i])
                return td__einval(err, errlen, "index dim %u (%lld) exceeds input dim (%lld)", i,
                                  (long long)idx->dims[i], (long long)x->dims[i]);
        }
        if (x->dims[ax] == 0 && td__desc_nelem(idx) > 0)
            return td__einval(err, errlen, "cannot gather from zero-length axis %lld",
                              (long long)ax);
        o = *idx;
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
    }
    *out = o;
    return TD_OK;
}

/* ---- shape rules of the movement ops of issue 13 (opcodes 220..232) ---- */

/* SLICE_STEP: iattrs are starts, stops, steps, already normalised by the client (the public
 * td_slice_step resolves Python's negative and open ends): step > 0 needs
 * 0 <= start <= stop <= dim, step < 0 needs -1 <= stop <= start < dim (start = stop = -1 on
 * a zero-length dim); |step| <= 2^62 keeps every product in int64. */
static td_status shape_slice_step(const td__op *op, const td__desc *x, td__desc *o, char *err,
                                  size_t errlen)
{
    const uint32_t r = x->rank;
    for (uint32_t i = 0; i < r; i++) {
        int64_t a = op->iattrs[i], b = op->iattrs[r + i], st = op->iattrs[2 * r + i];
        int64_t n = x->dims[i];
        if (st == 0 || st > (INT64_C(1) << 62) || st < -(INT64_C(1) << 62))
            return td__einval(err, errlen, "dim %u: step %lld must be non-zero, |step| <= 2^62",
                              i, (long long)st);
        if (st > 0) {
            if (a < 0 || b < a || b > n)
                return td__einval(err, errlen,
                                  "dim %u: start %lld, stop %lld with step %lld need 0 <= start "
                                  "<= stop <= %lld (its size)",
                                  i, (long long)a, (long long)b, (long long)st, (long long)n);
            o->dims[i] = (b - a + st - 1) / st;
        } else {
            if (b < -1 || a < b || a >= n + (n == 0))
                return td__einval(err, errlen,
                                  "dim %u: start %lld, stop %lld with step %lld need -1 <= stop "
                                  "<= start < %lld (its size)",
                                  i, (long long)a, (long long)b, (long long)st, (long long)n);
            if (n == 0 && a != -1)
                return td__einval(err, errlen, "dim %u has size 0: start %lld must be -1", i,
                                  (long long)a);
            o->dims[i] = (a - b + (-st) - 1) / (-st);
        }
    }
    return TD_OK;
}

static const char *const pad_mode_names[] = {"constant", "reflect", "replicate", "circular"};

/* PAD: iattrs[0] the mode, then befores and afters per dim (PyTorch's F.pad rules). */
static td_status shape_pad(const td__op *op, const td__desc *x, td__desc *o, char *err,
                           size_t errlen)
{
    const uint32_t r = x->rank;
    const int64_t mode = op->iattrs[0];
    const char *mn = pad_mode_names[mode];
    for (uint32_t i = 0; i < r; i++) {
        int64_t n = x->dims[i];
        for (int side = 0; side < 2; side++) {
            int64_t p = op->iattrs[1 + side * r + i];
            const char *sn = side ? "after" : "before";
            if (p < 0)
                return td__einval(err, errlen, "%s padding %lld %s dim %u is negative (crop with "
                                  "a slice instead)", mn, (long long)p, sn, i);
            if (p == 0) continue;
            if (mode == 1 && p >= n)
                return td__einval(err, errlen, "reflect padding %lld on dim %u needs < %lld (its "
                                  "size)", (long long)p, i, (long long)n);
            if (mode == 2 && n == 0)
                return td__einval(err, errlen, "replicate padding %lld on dim %u needs a "
                                  "non-empty dim (its size is 0)", (long long)p, i);
            if (mode == 3 && p > n)
                return td__einval(err, errlen, "circular padding %lld on dim %u needs <= %lld "
                                  "(its size)", (long long)p, i, (long long)n);
        }
        int64_t d;
        if (__builtin_add_overflow(n, op->iattrs[1 + i], &d) ||
            __builtin_add_overflow(d, op->iattrs[1 + r + i], &d))
            return td__einval(err, errlen, "padded dim %u overflows", i);
        o->dims[i] = d;
    }
    return TD_OK;
}

static td_status shape_repeat(const td__op *op, const td__desc *x, td__desc *o, char *err,
                              size_t errlen)
{
    for (uint32_t i = 0; i < x->rank; i++) {
        int64_t k = op->iattrs[i], d;
        if (k < 0)
            return td__einval(err, errlen, "repeats %lld for dim %u is negative", (long long)k, i);
        if (__builtin_mul_overflow(x->dims[i], k, &d))
            return td__einval(err, errlen, "dim %u: %lld x %lld repeats overflows", i,
                              (long long)x->dims[i], (long long)k);
        o->dims[i] = d;
    }
    return TD_OK;
}

/* SCATTER / SCATTER_ADD (x, index, src; axis): index of x's rank and an index dtype, src
 * of x's dtype and rank; index.dims[d] <= src.dims[d] for all d and <= x.dims[d] for
 * d != axis (torch.Tensor.scatter_). */
static td_status shape_scatter(const td__op *op, const td__desc *const *in, char *err,
                               size_t errlen)
{
    const td__desc *x = in[0], *idx = in[1], *src = in[2];
    const int64_t ax = op->iattrs[0];
    if (idx->dtype != TD_I32 && idx->dtype != TD_I64)
        return td__einval(err, errlen, "index dtype must be i32 or i64, got %s",
                          td_dtype_name((td_dtype)idx->dtype));
    if (src->dtype != x->dtype)
        return td__einval(err, errlen, "src dtype %s differs from x's %s (cast one first)",
                          td_dtype_name((td_dtype)src->dtype), td_dtype_name((td_dtype)x->dtype));
    if (idx->rank != x->rank || src->rank != x->rank)
        return td__einval(err, errlen, "x, index and src need one rank, got %u, %u and %u",
                          x->rank, idx->rank, src->rank);
    for (uint32_t i = 0; i < x->rank; i++) {
        if (idx->dims[i] > src->dims[i])
            return td__einval(err, errlen, "index dim %u (%lld) exceeds src's (%lld)", i,
                              (long long)idx->dims[i], (long long)src->dims[i]);
        if ((int64_t)i != ax && idx->dims[i] > x->dims[i])
            return td__einval(err, errlen, "index dim %u (%lld) exceeds x's (%lld)", i,
                              (long long)idx->dims[i], (long long)x->dims[i]);
    }
    return TD_OK;
}

/* INDEX_ADD (x, index, src; axis): index of rank 0 or 1 and an index dtype; src of x's
 * dtype and shape with the axis of index's length (torch.Tensor.index_add_). */
static td_status shape_index_add(const td__op *op, const td__desc *const *in, char *err,
                                 size_t errlen)
{
    const td__desc *x = in[0], *idx = in[1], *src = in[2];
    const int64_t ax = op->iattrs[0];
    char sa[160], sb[160];
    if (idx->dtype != TD_I32 && idx->dtype != TD_I64)
        return td__einval(err, errlen, "index dtype must be i32 or i64, got %s",
                          td_dtype_name((td_dtype)idx->dtype));
    if (src->dtype != x->dtype)
        return td__einval(err, errlen, "src dtype %s differs from x's %s (cast one first)",
                          td_dtype_name((td_dtype)src->dtype), td_dtype_name((td_dtype)x->dtype));
    if (idx->rank > 1)
        return td__einval(err, errlen, "index must have rank 0 or 1, got %u", idx->rank);
    td__desc want = *x;
    want.dims[ax] = idx->rank == 1 ? idx->dims[0] : 1;
    bool ok = src->rank == x->rank;
    for (uint32_t i = 0; ok && i < x->rank; i++) ok = src->dims[i] == want.dims[i];
    if (!ok)
        return td__einval(err, errlen, "src shape %s must be %s (x's with axis %lld of the index's "
                          "length)", shape_str(src, sa, sizeof sa), shape_str(&want, sb, sizeof sb),
                          (long long)ax);
    return TD_OK;
}

static td_status shape_gather_nd(const td__desc *x, const td__desc *idx, td__desc *o, char *err,
                                 size_t errlen)
{
    if (idx->rank < 1)
        return td__einval(err, errlen, "index needs rank >= 1 (its last dim indexes x), got 0");
    int64_t k = idx->dims[idx->rank - 1];
    if (k > (int64_t)x->rank)
        return td__einval(err, errlen, "index's last dim %lld exceeds x's rank %u", (long long)k,
                          x->rank);
    uint32_t rank = idx->rank - 1 + x->rank - (uint32_t)k;
    if (rank > TD_MAX_RANK)
        return td__einval(err, errlen, "result rank %u exceeds %d", rank, TD_MAX_RANK);
    for (uint32_t c = 0; c < (uint32_t)k; c++)
        if (x->dims[c] == 0 && td__desc_nelem(idx) > 0)
            return td__einval(err, errlen, "cannot gather from zero-length dim %u", c);
    o->rank = 0;
    for (uint32_t i = 0; i + 1 < idx->rank; i++) o->dims[o->rank++] = idx->dims[i];
    for (uint32_t i = (uint32_t)k; i < x->rank; i++) o->dims[o->rank++] = x->dims[i];
    return TD_OK;
}

/* TD_SHAPE_NORM: the inputs after x (after dy and x for the backward ops) against x's
 * shape: the normalised dims x.dims[axis..] for LAYER_NORM / RMS_NORM and their backward
 * ops, [C] (x [N, C, ...]) for GROUP_NORM and BATCH_NORM and theirs. The output is x's. */
static td_status shape_norm(const td__op *op, const td__desc *const *in, td__desc *out,
                            char *err, size_t errlen)
{
    const bool bwd = op->opcode == TD_OP_LAYER_NORM_BACKWARD ||
                     op->opcode == TD_OP_RMS_NORM_BACKWARD ||
                     op->opcode == TD_OP_GROUP_NORM_BACKWARD ||
                     op->opcode == TD_OP_BATCH_NORM_BACKWARD;
    const uint32_t first = bwd ? 2 : 1;
    const td__desc *x = in[first - 1];
    char sx[160], sy[160];
    if (bwd && (in[0]->rank != x->rank ||
                memcmp(in[0]->dims, x->dims, sizeof(int64_t) * x->rank) != 0))
        return td__einval(err, errlen, "dy %s and x %s differ in shape",
                          shape_str(in[0], sy, sizeof sy), shape_str(x, sx, sizeof sx));
    td__desc want = {.dtype = x->dtype};
    switch (op->opcode) {
    case TD_OP_LAYER_NORM: case TD_OP_RMS_NORM:
    case TD_OP_LAYER_NORM_BACKWARD: case TD_OP_RMS_NORM_BACKWARD:
        for (uint32_t i = (uint32_t)op->iattrs[0]; i < x->rank; i++)
            want.dims[want.rank++] = x->dims[i];
        break;
    default: /* GROUP_NORM BATCH_NORM and their backward ops: x is [N, C, ...] */
        if (x->rank < 2)
            return td__einval(err, errlen, "x %s needs rank >= 2 ([N, C, ...])",
                              shape_str(x, sx, sizeof sx));
        want.rank = 1;
        want.dims[0] = x->dims[1];
        if (op->opcode == TD_OP_GROUP_NORM || op->opcode == TD_OP_GROUP_NORM_BACKWARD) {
            const int64_t g = op->iattrs[0];
            if (g < 1 || x->dims[1] % g != 0)
                return td__einval(err, errlen, "groups %lld must be >= 1 and divide the %lld "
                                  "channels", (long long)g, (long long)x->dims[1]);
        }
        break;
    }
    const td__op_row *r = td__op_row_of(op->opcode);
    for (uint32_t k = first; k < op->n_inputs; k++) {
        if (in[k]->rank != want.rank ||
            memcmp(in[k]->dims, want.dims, sizeof(int64_t) * want.rank) != 0) {
            char nb[32], sw[160];
            return td__einval(err, errlen, "%s %s must have shape %s (x %s)",
                              input_name(r, k, nb, sizeof nb), shape_str(in[k], sy, sizeof sy),
                              shape_str(&want, sw, sizeof sw), shape_str(x, sx, sizeof sx));
        }
    }
    *out = *x;
    return TD_OK;
}

/* SCALED_DOT_PRODUCT_ATTENTION: q [..., L, E], k [..., S, E], v [..., S, Ev], mask (bool or
 * q's dtype) broadcasting to [..., L, S]; out [..., L, Ev] with the batch dims of all four
 * broadcast (as the composite's matmuls and mask add would). */
static td_status shape_attention(const td__op *op, const td__desc *const *in, td__desc *out,
                                 char *err, size_t errlen)
{
    static const char *const names[] = {"q", "k", "v", "mask"};
    const td__desc *q = in[0], *k = in[1], *v = in[2];
    char sa[160], sb[160];
    for (uint32_t i = 0; i < op->n_inputs; i++)
        if (in[i]->rank < 2)
            return td__einval(err, errlen, "%s %s needs rank >= 2", names[i],
                              shape_str(in[i], sa, sizeof sa));
    for (uint32_t i = 1; i < 3; i++)
        if (in[i]->dtype != q->dtype)
            return td__einval(err, errlen, "%s is %s, q is %s: q, k, v need one dtype", names[i],
                              td__dtype_str(in[i]->dtype), td__dtype_str(q->dtype));
    if (op->n_inputs > 3 && in[3]->dtype != TD_BOOL && in[3]->dtype != q->dtype)
        return td__einval(err, errlen, "mask is %s: it must be bool or q's dtype %s",
                          td__dtype_str(in[3]->dtype), td__dtype_str(q->dtype));
    const int64_t L = q->dims[q->rank - 2], E = q->dims[q->rank - 1];
    const int64_t S = k->dims[k->rank - 2];
    if (k->dims[k->rank - 1] != E)
        return td__einval(err, errlen, "q %s and k %s differ in their last dim",
                          shape_str(q, sa, sizeof sa), shape_str(k, sb, sizeof sb));
    if (S == 0)
        return td__einval(err, errlen, "k %s has no positions: the softmax over them is empty",
                          shape_str(k, sa, sizeof sa));
    if (v->dims[v->rank - 2] != S)
        return td__einval(err, errlen, "v %s must have k's %lld positions (k %s)",
                          shape_str(v, sa, sizeof sa), (long long)S, shape_str(k, sb, sizeof sb));
    td__desc o = {.dtype = q->dtype, .rank = 0};
    for (uint32_t i = 0; i < op->n_inputs; i++) {
        td__desc b = *in[i], r;
        b.rank -= 2;
        if (!td__broadcast_shapes(&o, &b, &r))
            return td__einval(err, errlen, "the batch dims of %s %s do not broadcast with %s",
                              names[i], shape_str(in[i], sa, sizeof sa),
                              shape_str(&o, sb, sizeof sb));
        o = r;
    }
    if (op->n_inputs > 3) {
        const td__desc *m = in[3];
        const int64_t ml = m->dims[m->rank - 2], ms = m->dims[m->rank - 1];
        if ((ml != 1 && ml != L) || (ms != 1 && ms != S))
            return td__einval(err, errlen, "mask %s does not broadcast to the [%lld, %lld] "
                              "scores", shape_str(m, sa, sizeof sa), (long long)L, (long long)S);
    }
    o.dims[o.rank++] = L;
    o.dims[o.rank++] = v->dims[v->rank - 1];
    *out = o;
    return TD_OK;
}

/* The row's shape rule: out's dims (out->dtype is set by the caller). */
static td_status apply_shape_rule(const td__op_row *r, const td__op *op,
                                  const td__desc *const *in, uint32_t odt, td__desc *out,
                                  char *err, size_t errlen)
{
    const td__desc *x = op->n_inputs > 0 ? in[0] : NULL;
    char sx[160], sy[160];
    td__desc o = x != NULL ? *x : (td__desc){.dtype = odt};
    switch (r->shape) {
    case TD_SHAPE_SAME:
        break;
    case TD_SHAPE_DIMS:
        return shape_from_attrs(op, odt, out, err, errlen);
    case TD_SHAPE_ARANGE:
        o = (td__desc){.dtype = odt, .rank = 1, .dims = {op->iattrs[0]}};
        break;
    case TD_SHAPE_BROADCAST:
        for (uint32_t k = 1; k < op->n_inputs; k++) {
            td__desc b;
            if (!td__broadcast_shapes(&o, in[k], &b))
                return td__einval(err, errlen, "shapes %s and %s do not broadcast",
                                  shape_str(&o, sx, sizeof sx), shape_str(in[k], sy, sizeof sy));
            o = b;
        }
        break;
    case TD_SHAPE_REDUCE:
        return shape_reduce(r, op, x, out, err, errlen);
    case TD_SHAPE_MATMUL:
        return shape_matmul(in[0], in[1], out, err, errlen);
    case TD_SHAPE_NORMALIZE:
        if (x->dims[op->iattrs[0]] == 0)
            return td__einval(err, errlen, "cannot normalise along zero-length axis %lld",
                              (long long)op->iattrs[0]);
        break;
    case TD_SHAPE_RESHAPE: {
        td_status s = shape_from_attrs(op, x->dtype, &o, err, errlen);
        if (s != TD_OK) return s;
        if (td__desc_nelem(&o) != td__desc_nelem(x))
            return td__einval(err, errlen, "cannot reshape %s (%lld elements) to %s",
                              shape_str(x, sx, sizeof sx), (long long)td__desc_nelem(x),
                              shape_str(&o, sy, sizeof sy));
        break;
    }
    case TD_SHAPE_EXPAND: {
        td_status s = shape_from_attrs(op, x->dtype, &o, err, errlen);
        if (s != TD_OK) return s;
        td__desc b;
        if (o.rank < x->rank || !td__broadcast_shapes(x, &o, &b) ||
            memcmp(b.dims, o.dims, sizeof(int64_t) * o.rank) != 0)
            return td__einval(err, errlen, "cannot broadcast %s to %s", shape_str(x, sx, sizeof sx),
                              shape_str(&o, sy, sizeof sy));
        break;
    }
    case TD_SHAPE_PERMUTE: {
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
    case TD_SHAPE_SLICE:
        for (uint32_t i = 0; i < x->rank; i++) {
            int64_t a = op->iattrs[i], b = op->iattrs[x->rank + i];
            if (a < 0 || b < a || b > x->dims[i])
                return td__einval(err, errlen, "axis %u: [%lld, %lld) is not inside [0, %lld]", i,
                                  (long long)a, (long long)b, (long long)x->dims[i]);
            o.dims[i] = b - a;
        }
        break;
    case TD_SHAPE_CONCAT: {
        int64_t ax = op->iattrs[0], total = 0;
        for (uint32_t k = 0; k < op->n_inputs; k++) {
            const td__desc *y = in[k];
            if (y->rank != x->rank)
                return td__einval(err, errlen, "input %u (%s %s) does not match input 0 (%s %s)", k,
                                  td_dtype_name((td_dtype)y->dtype), shape_str(y, sy, sizeof sy),
                                  td_dtype_name((td_dtype)x->dtype), shape_str(x, sx, sizeof sx));
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
    case TD_SHAPE_GATHER:
    case TD_SHAPE_INDEX_SELECT:
        return shape_gather(op, x, in[1], out, err, errlen);
    case TD_SHAPE_ALONG:
    case TD_SHAPE_TOPK: {
        /* rank 0 is one element along axis 0, as in PyTorch */
        int64_t ax = op->iattrs[0], n = 1;
        if (ax < 0 || ax >= (int64_t)(x->rank > 0 ? x->rank : 1))
            return td__einval(err, errlen, "axis %lld out of range for rank %u", (long long)ax,
                              x->rank);
        if (x->rank > 0) n = x->dims[ax];
        if (r->shape == TD_SHAPE_TOPK) {
            int64_t k = op->iattrs[1];
            if (k > n)
                return td__einval(err, errlen, "k %lld exceeds the length %lld of axis %lld",
                                  (long long)k, (long long)n, (long long)ax);
            if (x->rank > 0) o.dims[ax] = k;
            else if (k == 0) /* rank 0 keeps no room for 0 elements */
                return td__einval(err, errlen, "k 0 on a rank-0 input (it has one element)");
        }
        break;
    }
    case TD_SHAPE_SLICE_STEP: {
        td_status s = shape_slice_step(op, x, &o, err, errlen);
        if (s != TD_OK) return s;
        break;
    }
    case TD_SHAPE_PAD: {
        td_status s = shape_pad(op, x, &o, err, errlen);
        if (s != TD_OK) return s;
        break;
    }
    case TD_SHAPE_REPEAT: {
        td_status s = shape_repeat(op, x, &o, err, errlen);
        if (s != TD_OK) return s;
        break;
    }
    case TD_SHAPE_TRI:
        if (x->rank < 2)
            return td__einval(err, errlen, "needs rank >= 2 (the last two dims are the matrix), "
                              "got %s", shape_str(x, sx, sizeof sx));
        break;
    case TD_SHAPE_ONE_HOT:
        if (op->iattrs[0] < 1)
            return td__einval(err, errlen, "num_classes %lld must be >= 1",
                              (long long)op->iattrs[0]);
        if (x->rank + 1 > TD_MAX_RANK)
            return td__einval(err, errlen, "result rank %u exceeds %d", x->rank + 1, TD_MAX_RANK);
        o.dims[o.rank++] = op->iattrs[0];
        break;
    case TD_SHAPE_MASKED: {
        td__desc b;
        if (!td__broadcast_shapes(x, in[1], &b) || b.rank != x->rank ||
            memcmp(b.dims, x->dims, sizeof(int64_t) * x->rank) != 0)
            return td__einval(err, errlen, "mask shape %s does not broadcast to x's %s",
                              shape_str(in[1], sy, sizeof sy), shape_str(x, sx, sizeof sx));
        break;
    }
    case TD_SHAPE_SCATTER:
    case TD_SHAPE_INDEX_ADD: {
        td_status s = r->shape == TD_SHAPE_SCATTER ? shape_scatter(op, in, err, errlen)
                                                   : shape_index_add(op, in, err, errlen);
        if (s != TD_OK) return s;
        break;
    }
    case TD_SHAPE_GATHER_ND: {
        td_status s = shape_gather_nd(x, in[1], &o, err, errlen);
        if (s != TD_OK) return s;
        break;
    }
    case TD_SHAPE_NORM:
        return shape_norm(op, in, out, err, errlen);
    case TD_SHAPE_ATTENTION:
        return shape_attention(op, in, out, err, errlen);
    case TD_SHAPE_WINDOW:
        return td__window_shape(op, in, out, err, errlen);
    default:
        return td__einval(err, errlen, "shape rule %u of the op table is unknown", r->shape);
    }
    *out = o;
    return TD_OK;
}

/* Validation and shape inference from the op's row, in a fixed order: arity, attribute
 * count, input descs, attribute values, dtypes, float attributes, shape rule. */
static td_status infer(const td__op *op, const td__desc *const *in, td__desc *out, char *err,
                       size_t errlen)
{
    const td__op_row *r = td__op_row_of(op->opcode);
    if (r == NULL) return td__einval(err, errlen, "unknown opcode %u", op->opcode);
    if (op->n_inputs < r->min_inputs || op->n_inputs > r->max_inputs) {
        if (r->min_inputs == r->max_inputs)
            return td__einval(err, errlen, "expects %u inputs, got %u", r->min_inputs,
                              op->n_inputs);
        return td__einval(err, errlen, "expects %u..%u inputs, got %u", r->min_inputs,
                          r->max_inputs, op->n_inputs);
    }
    if (op->n_iattrs > TD_OP_MAX_IATTRS)
        return td__einval(err, errlen, "%u attributes, at most %d", op->n_iattrs, TD_OP_MAX_IATTRS);
    for (uint32_t i = 0; i < op->n_inputs; i++) {
        td_status s = td__desc_check(in[i], err, errlen);
        if (s != TD_OK) return s;
    }
    const td__desc *x = op->n_inputs > 0 ? in[0] : NULL;
    td_status s = check_attr_count(r, op, x, err, errlen);
    if (s == TD_OK) s = check_attr_values(r, op, x, err, errlen);
    if (s == TD_OK) s = check_fattr_flags(r, op, err, errlen);
    if (s == TD_OK) s = check_dtypes(r, op, in, err, errlen);
    if (s == TD_OK) s = check_fattrs(op, err, errlen);
    if (s == TD_OK && op->opcode == TD_OP_RANDINT) s = check_randint(op, err, errlen);
    if (s != TD_OK) return s;
    uint32_t odt = out_dtype(r, op, in);
    td__desc o;
    s = apply_shape_rule(r, op, in, odt, &o, err, errlen);
    if (s != TD_OK) return s;
    o.dtype = odt;
    *out = o;
    return TD_OK;
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

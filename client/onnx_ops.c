/* onnx_ops.c — the ONNX op mapping: one table row per ONNX op (and opset range), each
 * emitting calls of the public op functions (so every step is shape- and dtype-checked by
 * the engine's op table). Composite ONNX ops are lowered here onto the table's ops, with
 * the formula of the ONNX operator specification (docs/Operators.md of onnx 1.12).
 *
 * Adding an op that maps one to one onto a public elementwise function is one row:
 *   {"Sin", 7, 0, h_unary, td_sin, NULL, TD_OP_SIN, 0},
 * A row's `since`/`until` are the opsets of the default domain whose semantics its handler
 * implements; a model at an opset no row covers gets TD_EUNSUPPORTED naming the op and opset.
 * `opcode` names the tensord op whose dtype class input 0 must be in (checked before the
 * handler runs, so an unsupported dtype is TD_EUNSUPPORTED, not a wrong answer).
 */
#include "client/onnx_int.h"
#include "common/alloc.h"
#include "engine/optable.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

typedef td__onnx_emit E;
typedef Onnx__NodeProto N;
typedef td__onnx_op OP;

#define K(x) td__onnx_keep(e, (x))
#define IN(k) td__onnx_in(e, n, (k))
#define OUT(k, t) td__onnx_set_out(e, n, (k), (t))
#define CTX td__onnx_ctx(e)
#define NONE UINT32_MAX
#define ONNX_RESIZE_MAX 1024 /* outputs per resized axis (index vectors are built as constants) */

static td_tensor *scalar(E *e, td_dtype dt, double v) { return K(td_full(CTX, dt, 0, NULL, v)); }
static td_tensor *sc_like(E *e, td_tensor *x, double v)
{
    return x ? scalar(e, td_tensor_dtype(x), v) : NULL;
}

static bool axis_of(E *e, int64_t axis, int rank, int *out)
{
    if (axis < -rank || axis >= (rank > 0 ? rank : 1)) {
        td__onnx_fail(e, TD_EINVAL, "axis %lld is outside [-%d, %d)", (long long)axis, rank,
                      rank);
        return false;
    }
    *out = (int)(axis < 0 ? axis + rank : axis);
    return true;
}

static td_tensor *reshape(E *e, td_tensor *x, int rank, const int64_t *dims)
{
    return x ? K(td_reshape(x, rank, dims)) : NULL;
}

/* Product of dims [a, b) of x. */
static int64_t dprod(td_tensor *x, int a, int b)
{
    int64_t p = 1;
    for (int i = a; i < b; i++) p *= td_dims(x)[i];
    return p;
}

/* ---- elementwise ---- */

static td_status h_unary(E *e, const N *n, const OP *op) { return OUT(0, K(op->un(IN(0)))); }
static td_status h_binary(E *e, const N *n, const OP *op)
{
    return OUT(0, K(op->bin(IN(0), IN(1))));
}

static td_status h_pow(E *e, const N *n, const OP *op)
{
    td_tensor *a = IN(0), *b = IN(1);
    if (a && b && td_tensor_dtype(a) != td_tensor_dtype(b)) b = K(td_cast(b, td_tensor_dtype(a)));
    return OUT(0, K(td_pow(a, b)));
}

/* Max, Min, Sum, Mean: a fold over 1.. inputs with broadcasting. */
static td_status h_variadic(E *e, const N *n, const OP *op)
{
    int cnt = td__onnx_nin(e, n);
    if (cnt < 1) return td__onnx_fail(e, TD_EINVAL, "needs at least one input");
    td_tensor *acc = IN(0);
    for (int k = 1; k < cnt && acc != NULL; k++) acc = K(op->bin(acc, IN(k)));
    if (acc != NULL && strcmp(n->op_type, "Mean") == 0 && cnt > 1)
        acc = K(td_div(acc, sc_like(e, acc, cnt)));
    if (acc != NULL && cnt == 1) acc = K(td_add(acc, sc_like(e, acc, 0)));
    return OUT(0, acc);
}

static bool dtype_of_onnx(E *e, int64_t t, td_dtype *dt)
{
    if (t < INT32_MIN || t > INT32_MAX || !td__onnx_dtype((int32_t)t, dt)) {
        td__onnx_fail(e, TD_EUNSUPPORTED, "data type %s (%lld) is not supported by tensord",
                      td__onnx_dtype_name((int32_t)t), (long long)t);
        return false;
    }
    return true;
}

static td_status h_cast(E *e, const N *n, const OP *op)
{
    td_dtype dt;
    if (!dtype_of_onnx(e, td__onnx_attr_i(n, "to", 0), &dt)) return TD_EUNSUPPORTED;
    return OUT(0, K(td_cast(IN(0), dt)));
}

static td_status h_castlike(E *e, const N *n, const OP *op)
{
    td_tensor *t = IN(1);
    return OUT(0, t ? K(td_cast(IN(0), td_tensor_dtype(t))) : NULL);
}

static td_status h_where(E *e, const N *n, const OP *op)
{
    return OUT(0, K(td_where(IN(0), IN(1), IN(2))));
}

static td_status h_identity(E *e, const N *n, const OP *op) { return OUT(0, IN(0)); }

static td_status h_dropout(E *e, const N *n, const OP *op)
{
    const td__onnx_host *tm = td__onnx_host_in(e, n, 2);
    if (td__onnx_attr_i(n, "is_test", 1) == 0 && op->since < 7)
        return td__onnx_fail(e, TD_EUNSUPPORTED, "training-mode dropout is not supported");
    if (td__onnx_nin(e, n) > 2 && n->input[2][0] != '\0') {
        if (tm == NULL || tm->desc.dtype != TD_BOOL || tm->nbytes != 1)
            return td__onnx_fail(e, TD_EUNSUPPORTED, "training_mode must be a constant bool");
        if (((const uint8_t *)tm->data)[0] != 0) {
            /* training: identity only when the ratio is a constant 0 (default 0.5) */
            const td__onnx_host *ra = td__onnx_host_in(e, n, 1);
            bool zero = ra != NULL && td__desc_nelem(&ra->desc) == 1 &&
                        ((ra->desc.dtype == TD_F32 && *(const float *)ra->data == 0) ||
                         (ra->desc.dtype == TD_F64 && *(const double *)ra->data == 0));
            if (!zero)
                return td__onnx_fail(e, TD_EUNSUPPORTED, "training-mode dropout with a ratio "
                                     "other than a constant 0 is not supported (random)");
        }
    }
    td_tensor *x = IN(0);
    td_status st = OUT(0, x);
    if (st == TD_OK && td__onnx_nout(n) > 1 && x != NULL)
        st = OUT(1, K(td_full(CTX, TD_BOOL, td_rank(x), td_dims(x), 1)));
    return st;
}

/* x < 0 ? a : b, with x's dtype. */
static td_tensor *neg_where(E *e, td_tensor *x, td_tensor *a, td_tensor *b)
{
    td_tensor *c = K(td_lt(x, sc_like(e, x, 0)));
    return K(td_where(c, a, b));
}

static td_status h_leakyrelu(E *e, const N *n, const OP *op)
{
    td_tensor *x = IN(0);
    double alpha = td__onnx_attr_f(n, "alpha", 0.01f);
    return OUT(0, neg_where(e, x, K(td_mul(x, sc_like(e, x, alpha))), x));
}

static td_status h_prelu(E *e, const N *n, const OP *op)
{
    td_tensor *x = IN(0);
    return OUT(0, neg_where(e, x, K(td_mul(x, IN(1))), x));
}

static td_status h_elu(E *e, const N *n, const OP *op)
{
    td_tensor *x = IN(0);
    double alpha = td__onnx_attr_f(n, "alpha", 1.0f);
    td_tensor *em1 = K(td_sub(K(td_exp(x)), sc_like(e, x, 1)));
    return OUT(0, neg_where(e, x, K(td_mul(em1, sc_like(e, x, alpha))), x));
}

static td_status h_selu(E *e, const N *n, const OP *op)
{
    td_tensor *x = IN(0);
    double alpha = td__onnx_attr_f(n, "alpha", 1.67326319217681884765625f);
    double gamma = td__onnx_attr_f(n, "gamma", 1.05070102214813232421875f);
    td_tensor *neg = K(td_sub(K(td_mul(K(td_exp(x)), sc_like(e, x, alpha))), sc_like(e, x, alpha)));
    td_tensor *c = K(td_le(x, sc_like(e, x, 0)));
    td_tensor *y = K(td_where(c, neg, x));
    return OUT(0, K(td_mul(y, sc_like(e, x, gamma))));
}

static td_status h_celu(E *e, const N *n, const OP *op)
{
    td_tensor *x = IN(0);
    double alpha = td__onnx_attr_f(n, "alpha", 1.0f);
    td_tensor *z = sc_like(e, x, 0);
    td_tensor *em1 = K(td_sub(K(td_exp(K(td_div(x, sc_like(e, x, alpha))))), sc_like(e, x, 1)));
    td_tensor *neg = K(td_minimum(z, K(td_mul(em1, sc_like(e, x, alpha)))));
    return OUT(0, K(td_add(K(td_maximum(z, x)), neg)));
}

static td_tensor *clamp01(E *e, td_tensor *x)
{
    return K(td_maximum(K(td_minimum(x, sc_like(e, x, 1))), sc_like(e, x, 0)));
}

static td_status h_hardsigmoid(E *e, const N *n, const OP *op)
{
    td_tensor *x = IN(0);
    double alpha = td__onnx_attr_f(n, "alpha", 0.2f), beta = td__onnx_attr_f(n, "beta", 0.5f);
    return OUT(0, clamp01(e, K(td_add(K(td_mul(x, sc_like(e, x, alpha))), sc_like(e, x, beta)))));
}

static td_status h_hardswish(E *e, const N *n, const OP *op)
{
    td_tensor *x = IN(0);
    td_tensor *h = clamp01(e, K(td_add(K(td_mul(x, sc_like(e, x, 1.0 / 6))), sc_like(e, x, 0.5))));
    return OUT(0, K(td_mul(x, h)));
}

static td_status h_softplus(E *e, const N *n, const OP *op)
{
    td_tensor *x = IN(0);
    return OUT(0, K(td_log(K(td_add(K(td_exp(x)), sc_like(e, x, 1))))));
}

static td_status h_softsign(E *e, const N *n, const OP *op)
{
    td_tensor *x = IN(0);
    return OUT(0, K(td_div(x, K(td_add(K(td_abs(x)), sc_like(e, x, 1))))));
}

static td_status h_thresholdedrelu(E *e, const N *n, const OP *op)
{
    td_tensor *x = IN(0);
    double alpha = td__onnx_attr_f(n, "alpha", 1.0f);
    return OUT(0, K(td_where(K(td_gt(x, sc_like(e, x, alpha))), x, sc_like(e, x, 0))));
}

static td_status h_reciprocal(E *e, const N *n, const OP *op)
{
    td_tensor *x = IN(0);
    return OUT(0, K(td_div(sc_like(e, x, 1), x)));
}

static td_status h_sign(E *e, const N *n, const OP *op)
{
    td_tensor *x = IN(0);
    if (x == NULL) return OUT(0, NULL);
    td_dtype dt = td_tensor_dtype(x);
    td_tensor *z = sc_like(e, x, 0);
    td_tensor *s = K(td_sub(K(td_cast(K(td_gt(x, z)), dt)), K(td_cast(K(td_lt(x, z)), dt))));
    if (td__dtype_is_float((uint32_t)dt)) s = K(td_where(K(td_ne(x, x)), x, s)); /* NaN */
    return OUT(0, s);
}

static td_status h_not(E *e, const N *n, const OP *op)
{
    td_tensor *x = IN(0);
    return OUT(0, K(td_eq(x, sc_like(e, x, 0))));
}

static td_status h_logic(E *e, const N *n, const OP *op)
{
    td_tensor *a = IN(0), *b = IN(1);
    if (a && td_tensor_dtype(a) != TD_BOOL)
        return td__onnx_fail(e, TD_EINVAL, "inputs must be bool");
    const char *t = n->op_type;
    if (strcmp(t, "Xor") == 0) return OUT(0, K(td_ne(a, b)));
    if (strcmp(t, "And") == 0) return OUT(0, K(td_where(a, b, sc_like(e, a, 0))));
    return OUT(0, K(td_where(a, sc_like(e, a, 1), b)));
}

static td_status h_isnan(E *e, const N *n, const OP *op)
{
    td_tensor *x = IN(0);
    return OUT(0, K(td_ne(x, x)));
}

static td_status h_isinf(E *e, const N *n, const OP *op)
{
    td_tensor *x = IN(0);
    bool pos = td__onnx_attr_i(n, "detect_positive", 1) != 0;
    bool neg = td__onnx_attr_i(n, "detect_negative", 1) != 0;
    td_tensor *p = pos ? K(td_eq(x, sc_like(e, x, INFINITY))) : NULL;
    td_tensor *q = neg ? K(td_eq(x, sc_like(e, x, -INFINITY))) : NULL;
    if (p && q) return OUT(0, K(td_ne(p, q)));
    if (p || q) return OUT(0, p ? p : q);
    return OUT(0, x ? K(td_full(CTX, TD_BOOL, td_rank(x), td_dims(x), 0)) : NULL);
}

static td_status h_clip(E *e, const N *n, const OP *op)
{
    td_tensor *x = IN(0), *lo = NULL, *hi = NULL;
    if (op->since < 11) {
        if (td__onnx_attr(n, "min")) lo = sc_like(e, x, td__onnx_attr_f(n, "min", 0));
        if (td__onnx_attr(n, "max")) hi = sc_like(e, x, td__onnx_attr_f(n, "max", 0));
    } else {
        lo = IN(1);
        hi = IN(2);
    }
    td_tensor *y = x;
    if (lo != NULL) y = K(td_maximum(y, lo));
    if (hi != NULL) y = K(td_minimum(y, hi));
    return OUT(0, y);
}

/* ---- matmul ---- */

static td_status h_matmul(E *e, const N *n, const OP *op)
{
    td_tensor *a = IN(0), *b = IN(1);
    if (a == NULL || b == NULL) return OUT(0, K(td_matmul(a, b)));
    bool va = td_rank(a) == 1, vb = td_rank(b) == 1;
    if (va) a = reshape(e, a, 2, (int64_t[]){1, td_dims(a)[0]});
    if (vb) b = reshape(e, b, 2, (int64_t[]){td_dims(b)[0], 1});
    td_tensor *y = K(td_matmul(a, b));
    if (y != NULL && (va || vb)) {
        int64_t d[TD_MAX_RANK];
        int r = td_rank(y), o = 0;
        for (int i = 0; i < r; i++) {
            if (va && i == r - 2) continue;
            if (vb && i == r - 1) continue;
            d[o++] = td_dims(y)[i];
        }
        y = reshape(e, y, o, d);
    }
    return OUT(0, y);
}

static td_status h_gemm(E *e, const N *n, const OP *op)
{
    td_tensor *a = IN(0), *b = IN(1), *c = IN(2);
    if (td__onnx_attr_i(n, "transA", 0)) a = a ? K(td_transpose(a)) : NULL;
    if (td__onnx_attr_i(n, "transB", 0)) b = b ? K(td_transpose(b)) : NULL;
    double alpha = td__onnx_attr_f(n, "alpha", 1.0f), beta = td__onnx_attr_f(n, "beta", 1.0f);
    td_tensor *y = K(td_matmul(a, b));
    if (alpha != 1.0) y = K(td_mul(y, sc_like(e, y, alpha)));
    if (c != NULL) {
        if (beta != 1.0) c = K(td_mul(c, sc_like(e, c, beta)));
        y = K(td_add(y, c));
    }
    return OUT(0, y);
}

/* ---- movement ---- */

static td_status h_reshape(E *e, const N *n, const OP *op)
{
    td_tensor *x = IN(0);
    const int64_t *s;
    size_t cnt;
    if (!td__onnx_host_ints(e, n, 1, false, &s, &cnt, NULL)) return TD_EINVAL;
    if (x == NULL) return OUT(0, NULL);
    if (cnt > TD_MAX_RANK) return td__onnx_fail(e, TD_EUNSUPPORTED, "shape of rank %zu", cnt);
    bool allowzero = td__onnx_attr_i(n, "allowzero", 0) != 0;
    int64_t d[TD_MAX_RANK];
    for (size_t i = 0; i < cnt; i++) {
        d[i] = s[i];
        if (s[i] == 0 && !allowzero) {
            if ((int)i >= td_rank(x))
                return td__onnx_fail(e, TD_EINVAL, "shape[%zu] is 0 (copy) but the input has "
                                     "rank %d", i, td_rank(x));
            d[i] = td_dims(x)[i];
        }
        if (d[i] < -1) return td__onnx_fail(e, TD_EINVAL, "shape[%zu] is %lld", i, (long long)d[i]);
    }
    return OUT(0, reshape(e, x, (int)cnt, d));
}

static td_status h_flatten(E *e, const N *n, const OP *op)
{
    td_tensor *x = IN(0);
    if (x == NULL) return OUT(0, NULL);
    int r = td_rank(x), axis;
    int64_t a = td__onnx_attr_i(n, "axis", 1);
    if (a == r) axis = r;
    else if (!axis_of(e, a, r, &axis)) return TD_EINVAL;
    return OUT(0, reshape(e, x, 2, (int64_t[]){dprod(x, 0, axis), dprod(x, axis, r)}));
}

static td_status h_transpose(E *e, const N *n, const OP *op)
{
    td_tensor *x = IN(0);
    if (x == NULL) return OUT(0, NULL);
    int r = td_rank(x), perm[TD_MAX_RANK];
    const Onnx__AttributeProto *a = td__onnx_attr(n, "perm");
    if (a != NULL && a->n_ints != (size_t)r)
        return td__onnx_fail(e, TD_EINVAL, "perm has %zu entries for rank %d", a->n_ints, r);
    for (int i = 0; i < r; i++) {
        int64_t p = a ? a->ints[i] : r - 1 - i;
        if (p < 0 || p >= r) return td__onnx_fail(e, TD_EINVAL, "perm[%d] is %lld", i, (long long)p);
        perm[i] = (int)p;
    }
    if (r == 0) return OUT(0, x);
    return OUT(0, K(td_permute(x, perm)));
}

/* Axes from the attribute (opset < since_input) or input k. */
static bool get_axes(E *e, const N *n, const OP *op, int since_input, int k, const int64_t **ax,
                     size_t *cnt, bool *present)
{
    if (op->since >= since_input) return td__onnx_host_ints(e, n, k, true, ax, cnt, present);
    const Onnx__AttributeProto *a = td__onnx_attr(n, "axes");
    *present = a != NULL;
    *ax = a ? a->ints : NULL;
    *cnt = a ? a->n_ints : 0;
    return true;
}

static td_status h_squeeze(E *e, const N *n, const OP *op)
{
    td_tensor *x = IN(0);
    const int64_t *ax;
    size_t cnt;
    bool present;
    if (!get_axes(e, n, op, 13, 1, &ax, &cnt, &present)) return TD_EINVAL;
    if (x == NULL) return OUT(0, NULL);
    int r = td_rank(x);
    bool drop[TD_MAX_RANK] = {false};
    for (size_t i = 0; i < cnt; i++) {
        int a;
        if (!axis_of(e, ax[i], r, &a)) return TD_EINVAL;
        if (td_dims(x)[a] != 1)
            return td__onnx_fail(e, TD_EINVAL, "axis %d has size %lld, not 1", a,
                                 (long long)td_dims(x)[a]);
        drop[a] = true;
    }
    if (!present)
        for (int i = 0; i < r; i++) drop[i] = td_dims(x)[i] == 1;
    int64_t d[TD_MAX_RANK];
    int o = 0;
    for (int i = 0; i < r; i++)
        if (!drop[i]) d[o++] = td_dims(x)[i];
    return OUT(0, reshape(e, x, o, d));
}

static td_status h_unsqueeze(E *e, const N *n, const OP *op)
{
    td_tensor *x = IN(0);
    const int64_t *ax;
    size_t cnt;
    bool present;
    if (!get_axes(e, n, op, 13, 1, &ax, &cnt, &present)) return TD_EINVAL;
    if (x == NULL) return OUT(0, NULL);
    int r = td_rank(x);
    if (r + (int64_t)cnt > TD_MAX_RANK)
        return td__onnx_fail(e, TD_EUNSUPPORTED, "the result would have rank %lld, more than %d",
                             (long long)(r + (int64_t)cnt), TD_MAX_RANK);
    int ro = r + (int)cnt;
    bool ins[TD_MAX_RANK] = {false};
    for (size_t i = 0; i < cnt; i++) {
        int a;
        if (!axis_of(e, ax[i], ro, &a)) return TD_EINVAL;
        if (ins[a]) return td__onnx_fail(e, TD_EINVAL, "axis %d appears twice", a);
        ins[a] = true;
    }
    int64_t d[TD_MAX_RANK];
    for (int i = 0, j = 0; i < ro; i++) d[i] = ins[i] ? 1 : td_dims(x)[j++];
    return OUT(0, reshape(e, x, ro, d));
}

static td_tensor *concat_many(E *e, int cnt, td_tensor **xs, int axis)
{
    td_tensor *acc = NULL;
    for (int i = 0; i < cnt;) {
        td_tensor *part[8];
        int np = 0;
        if (acc != NULL) part[np++] = acc;
        while (np < 8 && i < cnt) part[np++] = xs[i++];
        acc = K(td_concat(np, part, axis));
        if (acc == NULL) return NULL;
    }
    return acc;
}

static td_status h_concat(E *e, const N *n, const OP *op)
{
    int cnt = td__onnx_nin(e, n), axis;
    if (cnt < 1) return td__onnx_fail(e, TD_EINVAL, "needs at least one input");
    td_tensor **xs = td__malloc((size_t)cnt * sizeof *xs);
    if (xs == NULL) return td__onnx_fail(e, TD_ENOMEM, "out of memory");
    for (int k = 0; k < cnt; k++) xs[k] = IN(k);
    td_tensor *y = NULL;
    if (xs[0] != NULL && axis_of(e, td__onnx_attr_i(n, "axis", 0), td_rank(xs[0]), &axis))
        y = concat_many(e, cnt, xs, axis);
    td__free(xs);
    return OUT(0, y);
}

/* Clamp an ONNX slice bound for step 1 (onnx Operators.md, Slice). */
static int64_t clampb(int64_t v, int64_t dim)
{
    if (v < 0) v = v < -dim ? 0 : v + dim;
    return v > dim ? dim : v;
}

static td_status h_slice(E *e, const N *n, const OP *op)
{
    td_tensor *x = IN(0);
    const int64_t *st = NULL, *en = NULL, *ax = NULL, *sp = NULL;
    size_t ns = 0, ne = 0, na = 0, nsp = 0;
    bool has_ax = false, has_sp = false;
    if (op->since >= 10) {
        if (!td__onnx_host_ints(e, n, 1, false, &st, &ns, NULL) ||
            !td__onnx_host_ints(e, n, 2, false, &en, &ne, NULL) ||
            !td__onnx_host_ints(e, n, 3, true, &ax, &na, &has_ax) ||
            !td__onnx_host_ints(e, n, 4, true, &sp, &nsp, &has_sp))
            return TD_EINVAL;
    } else {
        const Onnx__AttributeProto *a = td__onnx_attr(n, "starts"), *b = td__onnx_attr(n, "ends"),
                                   *c = td__onnx_attr(n, "axes");
        if (a == NULL || b == NULL) return td__onnx_fail(e, TD_EINVAL, "starts and ends are required");
        st = a->ints, ns = a->n_ints, en = b->ints, ne = b->n_ints;
        if (c) ax = c->ints, na = c->n_ints, has_ax = true;
    }
    if (x == NULL) return OUT(0, NULL);
    int r = td_rank(x);
    if (ns != ne || (has_ax && na != ns) || (has_sp && nsp != ns))
        return td__onnx_fail(e, TD_EINVAL, "starts, ends, axes and steps differ in length");
    int64_t lo[TD_MAX_RANK], hi[TD_MAX_RANK];
    bool seen[TD_MAX_RANK] = {false};
    int step_axis[TD_MAX_RANK], nstep = 0;
    td_tensor *step_idx[TD_MAX_RANK];
    for (int i = 0; i < r; i++) lo[i] = 0, hi[i] = td_dims(x)[i];
    for (size_t i = 0; i < ns; i++) {
        int a = (int)i;
        if (has_ax && !axis_of(e, ax[i], r, &a)) return TD_EINVAL;
        if (!has_ax && (int)i >= r) return td__onnx_fail(e, TD_EINVAL, "more starts than dims");
        if (seen[a]) return td__onnx_fail(e, TD_EINVAL, "axis %d appears twice", a);
        seen[a] = true;
        int64_t d = td_dims(x)[a];
        if (has_sp && sp[i] != 1) {
            /* Any other step: the picked indices start + j * step as an index_select
             * (Operators.md, Slice: a negative step clamps start to [0, d-1] and end to
             * [-1, d-1]). */
            int64_t stp = sp[i];
            if (stp == 0) return td__onnx_fail(e, TD_EINVAL, "step 0 on axis %d", a);
            int64_t b0 = st[i] < 0 ? (st[i] < -d ? -1 : st[i] + d) : st[i];
            int64_t e0 = en[i] < 0 ? (en[i] < -d ? -1 : en[i] + d) : en[i];
            int64_t cnt;
            if (stp > 0) {
                b0 = b0 < 0 ? 0 : b0 > d ? d : b0;
                e0 = e0 < 0 ? 0 : e0 > d ? d : e0;
                cnt = e0 > b0 ? (e0 - b0 - 1) / stp + 1 : 0;
            } else {
                b0 = b0 < 0 ? 0 : b0 > d - 1 ? d - 1 : b0;
                e0 = e0 < -1 ? -1 : e0 > d - 1 ? d - 1 : e0;
                cnt = b0 > e0 ? (b0 - e0 - 1) / (stp == INT64_MIN ? INT64_MAX : -stp) + 1 : 0;
            }
            if (nstep >= TD_MAX_RANK) return td__onnx_fail(e, TD_EINVAL, "too many steps");
            step_axis[nstep] = a;
            step_idx[nstep++] = K(td_arange(CTX, TD_I64, cnt, (double)b0, (double)stp));
            continue;
        }
        lo[a] = clampb(st[i], d);
        hi[a] = clampb(en[i], d);
        if (hi[a] < lo[a]) hi[a] = lo[a];
    }
    if (r == 0) return OUT(0, x);
    td_tensor *y = K(td_slice(x, lo, hi));
    for (int i = 0; i < nstep && y != NULL; i++) y = K(td_index_select(y, step_idx[i], step_axis[i]));
    return OUT(0, y);
}

static td_status h_split(E *e, const N *n, const OP *op)
{
    td_tensor *x = IN(0);
    const int64_t *sz = NULL;
    size_t cnt = 0;
    bool present = false;
    if (op->since >= 13) {
        if (!td__onnx_host_ints(e, n, 1, true, &sz, &cnt, &present)) return TD_EINVAL;
    } else {
        const Onnx__AttributeProto *a = td__onnx_attr(n, "split");
        if (a) sz = a->ints, cnt = a->n_ints, present = true;
    }
    if (x == NULL) return OUT(0, NULL);
    int r = td_rank(x), axis, nout = td__onnx_nout(n);
    if (!axis_of(e, td__onnx_attr_i(n, "axis", 0), r, &axis)) return TD_EINVAL;
    int64_t d = td_dims(x)[axis];
    if (present && cnt != (size_t)nout)
        return td__onnx_fail(e, TD_EINVAL, "split has %zu sizes for %d outputs", cnt, nout);
    if (!present && (nout < 1 || d % nout != 0))
        return td__onnx_fail(e, TD_EINVAL, "dim %lld does not split into %d equal parts",
                             (long long)d, nout);
    int64_t lo[TD_MAX_RANK], hi[TD_MAX_RANK], off = 0;
    for (int k = 0; k < nout; k++) {
        int64_t s = present ? sz[k] : d / nout;
        if (s < 0 || s > d - off)
            return td__onnx_fail(e, TD_EINVAL, "split sizes exceed dim %lld", (long long)d);
        for (int i = 0; i < r; i++) lo[i] = 0, hi[i] = td_dims(x)[i];
        lo[axis] = off;
        hi[axis] = off + s;
        off += s;
        td_status st = OUT(k, K(td_slice(x, lo, hi)));
        if (st != TD_OK) return st;
    }
    if (off != d) return td__onnx_fail(e, TD_EINVAL, "split sizes sum to %lld, not %lld",
                                       (long long)off, (long long)d);
    return TD_OK;
}

static td_status h_expand(E *e, const N *n, const OP *op)
{
    td_tensor *x = IN(0);
    const int64_t *s;
    size_t cnt;
    if (!td__onnx_host_ints(e, n, 1, false, &s, &cnt, NULL)) return TD_EINVAL;
    if (x == NULL) return OUT(0, NULL);
    int r = td_rank(x);
    int ro = r > (int)cnt ? r : (int)cnt;
    if (ro > TD_MAX_RANK) return td__onnx_fail(e, TD_EUNSUPPORTED, "rank %d", ro);
    int64_t d[TD_MAX_RANK];
    for (int i = 0; i < ro; i++) {
        int xi = i - (ro - r), si = i - (ro - (int)cnt);
        int64_t a = xi >= 0 ? td_dims(x)[xi] : 1, b = si >= 0 ? s[si] : 1;
        if (a != b && a != 1 && b != 1)
            return td__onnx_fail(e, TD_EINVAL, "shape %lld does not broadcast with dim %lld",
                                 (long long)b, (long long)a);
        d[i] = a == 1 ? b : a;
    }
    return OUT(0, K(td_expand(x, ro, d)));
}

static td_status h_tile(E *e, const N *n, const OP *op)
{
    td_tensor *x = IN(0);
    const int64_t *rep;
    size_t cnt;
    if (!td__onnx_host_ints(e, n, 1, false, &rep, &cnt, NULL)) return TD_EINVAL;
    if (x == NULL) return OUT(0, NULL);
    int r = td_rank(x);
    if (cnt != (size_t)r) return td__onnx_fail(e, TD_EINVAL, "repeats has %zu entries for rank %d", cnt, r);
    if (r >= TD_MAX_RANK) return td__onnx_fail(e, TD_EUNSUPPORTED, "rank %d", r);
    td_tensor *y = x;
    for (int a = 0; a < r && y != NULL; a++) {
        if (rep[a] < 0) return td__onnx_fail(e, TD_EINVAL, "repeats[%d] is %lld", a, (long long)rep[a]);
        if (rep[a] == 1) continue;
        int64_t d[TD_MAX_RANK], d2[TD_MAX_RANK];
        for (int i = 0, j = 0; i <= r; i++) d[i] = i == a ? 1 : td_dims(y)[j++];
        memcpy(d2, d, sizeof d);
        d2[a] = rep[a];
        y = K(td_expand(reshape(e, y, r + 1, d), r + 1, d2));
        if (y == NULL) break;
        int64_t d3[TD_MAX_RANK];
        for (int i = 0; i < a; i++) d3[i] = td_dims(y)[i];
        d3[a] = td_dims(y)[a] * td_dims(y)[a + 1];
        for (int i = a + 1; i < r; i++) d3[i] = td_dims(y)[i + 1];
        y = reshape(e, y, r, d3);
    }
    return OUT(0, y);
}

static td_status h_pad(E *e, const N *n, const OP *op)
{
    td_tensor *x = IN(0);
    const int64_t *p;
    size_t cnt;
    double value = 0;
    const Onnx__AttributeProto *ma = td__onnx_attr(n, "mode");
    int mode = 0; /* constant, edge, reflect */
    if (ma && ma->has_s && ma->s.len == 4 && memcmp(ma->s.data, "edge", 4) == 0) mode = 1;
    else if (ma && ma->has_s && ma->s.len == 7 && memcmp(ma->s.data, "reflect", 7) == 0) mode = 2;
    else if (ma && ma->has_s && !(ma->s.len == 8 && memcmp(ma->s.data, "constant", 8) == 0))
        return td__onnx_fail(e, TD_EUNSUPPORTED, "mode '%.*s'", (int)ma->s.len,
                             (const char *)ma->s.data);
    if (op->since >= 11) {
        if (!td__onnx_host_ints(e, n, 1, false, &p, &cnt, NULL)) return TD_EINVAL;
        if (td__onnx_nin(e, n) > 3 && n->input[3][0])
            return td__onnx_fail(e, TD_EUNSUPPORTED, "the axes input is not supported");
        const td__onnx_host *cv = td__onnx_host_in(e, n, 2);
        if (td__onnx_nin(e, n) > 2 && n->input[2][0] && cv == NULL)
            return td__onnx_fail(e, TD_EUNSUPPORTED, "constant_value must be a constant");
        if (cv != NULL && cv->nbytes > 0) {
            switch (cv->desc.dtype) {
            case TD_F32: value = *(const float *)cv->data; break;
            case TD_F64: value = *(const double *)cv->data; break;
            case TD_I64: value = (double)*(const int64_t *)cv->data; break;
            case TD_I32: value = *(const int32_t *)cv->data; break;
            default: return td__onnx_fail(e, TD_EUNSUPPORTED, "constant_value dtype");
            }
        }
    } else {
        const Onnx__AttributeProto *a = td__onnx_attr(n, "pads");
        if (a == NULL) return td__onnx_fail(e, TD_EINVAL, "pads is required");
        p = a->ints, cnt = a->n_ints;
        value = td__onnx_attr_f(n, "value", 0);
    }
    if (x == NULL) return OUT(0, NULL);
    int r = td_rank(x);
    if (cnt != 2 * (size_t)r) return td__onnx_fail(e, TD_EINVAL, "pads has %zu entries for rank %d", cnt, r);
    td_tensor *y = x;
    int64_t lo[TD_MAX_RANK], hi[TD_MAX_RANK];
    bool crop = false;
    for (int i = 0; i < r; i++) {
        lo[i] = p[i] < 0 ? -p[i] : 0;
        hi[i] = td_dims(x)[i] - (p[r + i] < 0 ? -p[r + i] : 0);
        if (lo[i] > hi[i]) return td__onnx_fail(e, TD_EINVAL, "pads crop axis %d below 0", i);
        crop |= p[i] < 0 || p[r + i] < 0;
    }
    if (crop) y = K(td_slice(y, lo, hi));
    for (int i = 0; mode != 0 && i < r && y != NULL; i++) {
        /* edge: index 0 (D-1) repeated; reflect: pb, pb-1, .., 1 and D-2, D-3, .. */
        int64_t D = td_dims(y)[i], b0 = p[i] > 0 ? p[i] : 0, e0 = p[r + i] > 0 ? p[r + i] : 0;
        if (b0 == 0 && e0 == 0) continue;
        if (D == 0 || (mode == 2 && (b0 >= D || e0 >= D)))
            return td__onnx_fail(e, TD_EINVAL, "axis %d of size %lld cannot be padded by %lld "
                                 "and %lld in this mode", i, (long long)D, (long long)b0,
                                 (long long)e0);
        td_tensor *parts[3];
        int np = 0;
        if (b0 > 0)
            parts[np++] = K(td_arange(CTX, TD_I64, b0, mode == 1 ? 0 : (double)b0, mode == 1 ? 0 : -1));
        parts[np++] = K(td_arange(CTX, TD_I64, D, 0, 1));
        if (e0 > 0)
            parts[np++] = K(td_arange(CTX, TD_I64, e0, mode == 1 ? (double)(D - 1) : (double)(D - 2),
                                      mode == 1 ? 0 : -1));
        y = K(td_index_select(y, K(td_concat(np, parts, 0)), i));
    }
    for (int i = 0; mode == 0 && i < r && y != NULL; i++) {
        td_tensor *parts[3];
        int np = 0;
        int64_t d[TD_MAX_RANK];
        memcpy(d, td_dims(y), (size_t)r * sizeof *d);
        if (p[i] > 0) {
            d[i] = p[i];
            parts[np++] = K(td_full(CTX, td_tensor_dtype(y), r, d, value));
        }
        parts[np++] = y;
        if (p[r + i] > 0) {
            d[i] = p[r + i];
            parts[np++] = K(td_full(CTX, td_tensor_dtype(y), r, d, value));
        }
        if (np > 1) y = K(td_concat(np, parts, i));
    }
    return OUT(0, y);
}

static td_status h_depthtospace(E *e, const N *n, const OP *op)
{
    td_tensor *x = IN(0);
    if (x == NULL) return OUT(0, NULL);
    if (td_rank(x) != 4) return td__onnx_fail(e, TD_EINVAL, "input must have rank 4");
    int64_t b = td__onnx_attr_i(n, "blocksize", 0);
    const int64_t *d = td_dims(x);
    int64_t N0 = d[0], C = d[1], H = d[2], W = d[3];
    bool to_space = strcmp(n->op_type, "DepthToSpace") == 0;
    if (b < 1 || b > 1 << 20) return td__onnx_fail(e, TD_EINVAL, "blocksize %lld", (long long)b);
    td_tensor *y;
    if (to_space) {
        if (C % (b * b)) return td__onnx_fail(e, TD_EINVAL, "channels %lld not divisible by blocksize^2", (long long)C);
        const Onnx__AttributeProto *ma = td__onnx_attr(n, "mode");
        bool crd = ma && ma->has_s && ma->s.len == 3 && memcmp(ma->s.data, "CRD", 3) == 0;
        int64_t c = C / (b * b);
        if (crd) {
            y = reshape(e, x, 6, (int64_t[]){N0, c, b, b, H, W});
            y = y ? K(td_permute(y, (int[]){0, 1, 4, 2, 5, 3})) : NULL;
        } else {
            y = reshape(e, x, 6, (int64_t[]){N0, b, b, c, H, W});
            y = y ? K(td_permute(y, (int[]){0, 3, 4, 1, 5, 2})) : NULL;
        }
        y = reshape(e, y, 4, (int64_t[]){N0, c, H * b, W * b});
    } else {
        if (H % b || W % b) return td__onnx_fail(e, TD_EINVAL, "spatial dims not divisible by blocksize");
        y = reshape(e, x, 6, (int64_t[]){N0, C, H / b, b, W / b, b});
        y = y ? K(td_permute(y, (int[]){0, 3, 5, 1, 2, 4})) : NULL;
        y = reshape(e, y, 4, (int64_t[]){N0, C * b * b, H / b, W / b});
    }
    return OUT(0, y);
}

/* Gather / GatherElements: negative indices count from the end of the axis. */
static td_tensor *wrap_index(E *e, td_tensor *idx, int64_t dim)
{
    if (idx == NULL) return NULL;
    td_tensor *neg = K(td_lt(idx, sc_like(e, idx, 0)));
    return K(td_where(neg, K(td_add(idx, sc_like(e, idx, (double)dim))), idx));
}

static td_status h_gather(E *e, const N *n, const OP *op)
{
    td_tensor *x = IN(0), *idx = IN(1);
    if (x == NULL || idx == NULL) return OUT(0, NULL);
    int axis;
    if (!axis_of(e, td__onnx_attr_i(n, "axis", 0), td_rank(x), &axis)) return TD_EINVAL;
    idx = wrap_index(e, idx, td_dims(x)[axis]);
    if (strcmp(n->op_type, "GatherElements") == 0) return OUT(0, K(td_gather(x, idx, axis)));
    return OUT(0, K(td_index_select(x, idx, axis)));
}

/* ---- host values ---- */

static td_status host_i64(E *e, const N *n, int k, int rank, const int64_t *vals, int64_t cnt)
{
    td__onnx_host h = {.desc = {.dtype = TD_I64, .rank = (uint32_t)rank}};
    if (rank == 1) h.desc.dims[0] = cnt;
    h.nbytes = (size_t)cnt * 8;
    if (cnt > 0 && (h.data = td__malloc(h.nbytes)) == NULL)
        return td__onnx_fail(e, TD_ENOMEM, "out of memory");
    if (cnt > 0) memcpy(h.data, vals, h.nbytes);
    return td__onnx_set_host_out(e, n, k, &h);
}

static td_status h_shape(E *e, const N *n, const OP *op)
{
    td_tensor *x = IN(0);
    if (x == NULL) return OUT(0, NULL);
    int r = td_rank(x);
    int64_t s = td__onnx_attr_i(n, "start", 0), t = td__onnx_attr_i(n, "end", r);
    s = s < 0 ? s + r : s;
    t = t < 0 ? t + r : t;
    s = s < 0 ? 0 : s > r ? r : s;
    t = t < 0 ? 0 : t > r ? r : t;
    if (t < s) t = s;
    return host_i64(e, n, 0, 1, td_dims(x) + s, t - s);
}

static td_status h_size(E *e, const N *n, const OP *op)
{
    td_tensor *x = IN(0);
    if (x == NULL) return OUT(0, NULL);
    int64_t v = td_nelem(x);
    return host_i64(e, n, 0, 0, &v, 1);
}

static td_status h_constantofshape(E *e, const N *n, const OP *op)
{
    const int64_t *s;
    size_t cnt;
    if (!td__onnx_host_ints(e, n, 0, false, &s, &cnt, NULL)) return TD_EINVAL;
    if (cnt > TD_MAX_RANK) return td__onnx_fail(e, TD_EUNSUPPORTED, "rank %zu", cnt);
    const Onnx__AttributeProto *a = td__onnx_attr(n, "value");
    td_dtype dt = TD_F32;
    double v = 0;
    if (a != NULL && a->t != NULL) {
        char err[300];
        td__onnx_host h;
        td_status st = td__onnx_host_decode(a->t, "value", &h, err, sizeof err);
        if (st != TD_OK) return td__onnx_fail(e, st, "%s", err);
        dt = (td_dtype)h.desc.dtype;
        if (td__desc_nelem(&h.desc) != 1) {
            td__onnx_host_fini(&h);
            return td__onnx_fail(e, TD_EINVAL, "value must have one element");
        }
        switch (dt) {
        case TD_F32: v = *(float *)h.data; break;
        case TD_F64: v = *(double *)h.data; break;
        case TD_I64: v = (double)*(int64_t *)h.data; break;
        case TD_I32: v = *(int32_t *)h.data; break;
        case TD_I16: v = *(int16_t *)h.data; break;
        case TD_I8: v = *(int8_t *)h.data; break;
        case TD_U8: case TD_BOOL: v = *(uint8_t *)h.data; break;
        default:
            td__onnx_host_fini(&h);
            return td__onnx_fail(e, TD_EUNSUPPORTED, "value of dtype %s", td_dtype_name(dt));
        }
        td__onnx_host_fini(&h);
    }
    for (size_t i = 0; i < cnt; i++)
        if (s[i] < 0) return td__onnx_fail(e, TD_EINVAL, "shape[%zu] is %lld", i, (long long)s[i]);
    return OUT(0, K(td_full(CTX, dt, (int)cnt, s, v)));
}

static bool host_scalar(E *e, const N *n, int k, double *v, td_dtype *dt)
{
    const td__onnx_host *h = td__onnx_host_in(e, n, k);
    if (h == NULL || td__desc_nelem(&h->desc) != 1) {
        td__onnx_fail(e, TD_EUNSUPPORTED, "input %d must be a constant scalar", k);
        return false;
    }
    *dt = (td_dtype)h->desc.dtype;
    switch (*dt) {
    case TD_F32: *v = *(const float *)h->data; return true;
    case TD_F64: *v = *(const double *)h->data; return true;
    case TD_I64: *v = (double)*(const int64_t *)h->data; return true;
    case TD_I32: *v = *(const int32_t *)h->data; return true;
    case TD_I16: *v = *(const int16_t *)h->data; return true;
    default: td__onnx_fail(e, TD_EUNSUPPORTED, "input %d of dtype %s", k, td_dtype_name(*dt));
        return false;
    }
}

static td_status h_range(E *e, const N *n, const OP *op)
{
    double s, l, d;
    td_dtype dt;
    if (!host_scalar(e, n, 0, &s, &dt) || !host_scalar(e, n, 1, &l, &dt) ||
        !host_scalar(e, n, 2, &d, &dt))
        return TD_EINVAL;
    if (d == 0) return td__onnx_fail(e, TD_EINVAL, "delta is 0");
    double cnt = ceil((l - s) / d);
    if (!(cnt >= 0)) cnt = 0;
    if (cnt > (double)(1ll << 40)) return td__onnx_fail(e, TD_EINVAL, "%g elements", cnt);
    if (td__dtype_is_float((uint32_t)dt) && dt != TD_F64) {
        /* The ONNX reference adds delta in the input dtype, element by element: that is
         * exact here only when the values stay integers (checked), else unsupported. */
        if (s != floor(s) || d != floor(d) || fabs(s) + fabs(d) * cnt > (1 << 24))
            return td__onnx_fail(e, TD_EUNSUPPORTED, "a non-integer float range");
    }
    return OUT(0, K(td_arange(CTX, dt, (int64_t)cnt, s, d)));
}

/* ---- reductions ---- */

typedef td_tensor *(*reduce_fn)(td_tensor *, int, const int *, bool);

static td_status reduce_with(E *e, const N *n, const OP *op, reduce_fn f, td_tensor *x,
                             td_tensor **out)
{
    const int64_t *ax;
    size_t cnt;
    bool present;
    int since = strcmp(n->op_type, "ReduceSum") == 0 ? 13 : 18;
    if (!get_axes(e, n, op, since, 1, &ax, &cnt, &present)) return TD_EINVAL;
    *out = NULL;
    if (x == NULL) return TD_OK;
    bool keep = td__onnx_attr_i(n, "keepdims", 1) != 0;
    if (cnt == 0 && td__onnx_attr_i(n, "noop_with_empty_axes", 0) != 0) {
        *out = x;
        return TD_OK;
    }
    int axes[TD_MAX_RANK], r = td_rank(x);
    if (cnt > (size_t)r) return td__onnx_fail(e, TD_EINVAL, "%zu axes for rank %d", cnt, r);
    for (size_t i = 0; i < cnt; i++)
        if (!axis_of(e, ax[i], r, &axes[i])) return TD_EINVAL;
    if (r == 0) {
        *out = x;
        return TD_OK;
    }
    *out = K(f(x, (int)cnt, cnt ? axes : NULL, keep));
    return TD_OK;
}

static td_status h_reduce(E *e, const N *n, const OP *op)
{
    const char *t = n->op_type + 6; /* after "Reduce" */
    td_tensor *x = IN(0), *y = NULL;
    reduce_fn f = td_sum;
    td_tensor *pre = x;
    if (strcmp(t, "Mean") == 0) f = td_mean;
    else if (strcmp(t, "Max") == 0) f = td_max;
    else if (strcmp(t, "Min") == 0) f = td_min;
    else if (strcmp(t, "Prod") == 0) f = td_prod;
    else if (strcmp(t, "L1") == 0) pre = x ? K(td_abs(x)) : NULL;
    else if (strcmp(t, "L2") == 0 || strcmp(t, "SumSquare") == 0) pre = x ? K(td_mul(x, x)) : NULL;
    else if (strcmp(t, "LogSumExp") == 0) pre = x ? K(td_exp(x)) : NULL;
    td_status st = reduce_with(e, n, op, f, pre, &y);
    if (st != TD_OK) return st;
    if (strcmp(t, "L2") == 0) y = y ? K(td_sqrt(y)) : NULL;
    if (strcmp(t, "LogSum") == 0 || strcmp(t, "LogSumExp") == 0) y = y ? K(td_log(y)) : NULL;
    return OUT(0, y);
}

static td_status h_arg(E *e, const N *n, const OP *op)
{
    td_tensor *x = IN(0);
    if (x == NULL) return OUT(0, NULL);
    bool keep = td__onnx_attr_i(n, "keepdims", 1) != 0;
    bool mx = strcmp(n->op_type, "ArgMax") == 0;
    int r = td_rank(x), axis;
    if (!axis_of(e, td__onnx_attr_i(n, "axis", 0), r, &axis)) return TD_EINVAL;
    if (td__onnx_attr_i(n, "select_last_index", 0) == 0)
        return OUT(0, K(mx ? td_argmax(x, axis, keep) : td_argmin(x, axis, keep)));
    /* Last index of the extreme: the largest index i along the axis where x_i equals the
     * extreme, or (as argmax of the reversed axis gives) is NaN when the extreme is. */
    td_tensor *m = K(mx ? td_max(x, 1, &axis, true) : td_min(x, 1, &axis, true));
    int64_t d[TD_MAX_RANK];
    for (int i = 0; i < r; i++) d[i] = i == axis ? td_dims(x)[axis] : 1;
    td_tensor *idx = reshape(e, K(td_arange(CTX, TD_I64, td_dims(x)[axis], 0, 1)), r, d);
    td_tensor *hit = K(td_eq(x, m));
    if (td__dtype_is_float((uint32_t)td_tensor_dtype(x))) {
        td_tensor *both = K(td_where(K(td_ne(x, x)), K(td_ne(m, m)), scalar(e, TD_BOOL, 0)));
        hit = K(td_where(hit, scalar(e, TD_BOOL, 1), both));
    }
    td_tensor *c = K(td_where(hit, idx, scalar(e, TD_I64, -1)));
    return OUT(0, K(td_max(c, 1, &axis, keep)));
}

static td_status h_softmax(E *e, const N *n, const OP *op)
{
    td_tensor *x = IN(0);
    if (x == NULL) return OUT(0, NULL);
    bool lg = strcmp(n->op_type, "LogSoftmax") == 0;
    int r = td_rank(x), axis;
    if (!axis_of(e, td__onnx_attr_i(n, "axis", op->since >= 13 ? -1 : 1), r, &axis))
        return TD_EINVAL;
    if (op->since >= 13) return OUT(0, K(lg ? td_log_softmax(x, axis) : td_softmax(x, axis)));
    /* Before opset 13: the input is coerced to 2-D [prod(:axis), prod(axis:)]. */
    td_tensor *y = reshape(e, x, 2, (int64_t[]){dprod(x, 0, axis), dprod(x, axis, r)});
    y = y ? K(lg ? td_log_softmax(y, 1) : td_softmax(y, 1)) : NULL;
    return OUT(0, reshape(e, y, r, td_dims(x)));
}

static td_status h_globalpool(E *e, const N *n, const OP *op)
{
    td_tensor *x = IN(0);
    if (x == NULL) return OUT(0, NULL);
    int r = td_rank(x), axes[TD_MAX_RANK];
    if (r < 3) return td__onnx_fail(e, TD_EINVAL, "input must have rank >= 3");
    for (int i = 2; i < r; i++) axes[i - 2] = i;
    bool mx = strcmp(n->op_type, "GlobalMaxPool") == 0;
    return OUT(0, K(mx ? td_max(x, r - 2, axes, true) : td_mean(x, r - 2, axes, true)));
}

/* ---- normalization ---- */

/* v [C] as [C, 1, ..., 1] of rank r - 1 (to broadcast against [N, C, ...]). */
static td_tensor *per_channel(E *e, td_tensor *v, int r)
{
    if (v == NULL) return NULL;
    int64_t d[TD_MAX_RANK];
    d[0] = td_nelem(v);
    for (int i = 1; i < r - 1; i++) d[i] = 1;
    return reshape(e, v, r - 1, d);
}

static td_status h_batchnorm(E *e, const N *n, const OP *op)
{
    td_tensor *x = IN(0);
    bool training = td__onnx_attr_i(n, "training_mode", 0) != 0;
    if (!training && td__onnx_nout(n) > 1)
        return td__onnx_fail(e, TD_EUNSUPPORTED, "extra outputs outside training mode (opsets "
                             "before 14) are not supported");
    if (training && op->since < 14)
        return td__onnx_fail(e, TD_EUNSUPPORTED, "training mode before opset 14");
    if (x == NULL) return OUT(0, NULL);
    int r = td_rank(x);
    if (r < 2) return td__onnx_fail(e, TD_EINVAL, "input must have rank >= 2");
    if (training) {
        /* batch statistics over every axis but the channel (population variance); the
         * running ones blend in with momentum (Operators.md, BatchNormalization-15) */
        int axes[TD_MAX_RANK], na = 0;
        for (int i = 0; i < r; i++)
            if (i != 1) axes[na++] = i;
        double eps = td__onnx_attr_f(n, "epsilon", 1e-5f), mom = td__onnx_attr_f(n, "momentum", 0.9f);
        td_tensor *mean = K(td_mean(x, na, axes, true));
        td_tensor *d = K(td_sub(x, mean));
        td_tensor *var = K(td_mean(K(td_mul(d, d)), na, axes, true));
        td_tensor *y = K(td_div(d, K(td_sqrt(K(td_add(var, sc_like(e, x, eps)))))));
        y = K(td_add(K(td_mul(y, per_channel(e, IN(1), r))), per_channel(e, IN(2), r)));
        td_status st = OUT(0, y);
        int64_t C = td_dims(x)[1];
        td_tensor *m1 = reshape(e, mean, 1, &C), *v1 = reshape(e, var, 1, &C);
        td_tensor *rm = K(td_add(K(td_mul(IN(3), sc_like(e, x, mom))),
                                 K(td_mul(m1, sc_like(e, x, 1 - mom)))));
        td_tensor *rv = K(td_add(K(td_mul(IN(4), sc_like(e, x, mom))),
                                 K(td_mul(v1, sc_like(e, x, 1 - mom)))));
        if (st == TD_OK && td__onnx_nout(n) > 1) st = OUT(1, rm);
        if (st == TD_OK && td__onnx_nout(n) > 2) st = OUT(2, rv);
        return st;
    }
    td_tensor *sc = per_channel(e, IN(1), r), *b = per_channel(e, IN(2), r);
    td_tensor *mean = per_channel(e, IN(3), r), *var = per_channel(e, IN(4), r);
    double eps = td__onnx_attr_f(n, "epsilon", 1e-5f);
    td_tensor *den = K(td_sqrt(K(td_add(var, sc_like(e, x, eps)))));
    td_tensor *y = K(td_div(K(td_sub(x, mean)), den));
    return OUT(0, K(td_add(K(td_mul(y, sc)), b)));
}

static td_status h_instancenorm(E *e, const N *n, const OP *op)
{
    td_tensor *x = IN(0);
    if (x == NULL) return OUT(0, NULL);
    int r = td_rank(x), axes[TD_MAX_RANK];
    if (r < 3) return td__onnx_fail(e, TD_EINVAL, "input must have rank >= 3");
    for (int i = 2; i < r; i++) axes[i - 2] = i;
    double eps = td__onnx_attr_f(n, "epsilon", 1e-5f);
    td_tensor *mean = K(td_mean(x, r - 2, axes, true));
    td_tensor *d = K(td_sub(x, mean));
    td_tensor *var = K(td_mean(K(td_mul(d, d)), r - 2, axes, true));
    td_tensor *y = K(td_div(d, K(td_sqrt(K(td_add(var, sc_like(e, x, eps)))))));
    return OUT(0, K(td_add(K(td_mul(y, per_channel(e, IN(1), r))), per_channel(e, IN(2), r))));
}

static td_status h_layernorm(E *e, const N *n, const OP *op)
{
    td_tensor *x = IN(0);
    if (x == NULL) return OUT(0, NULL);
    int r = td_rank(x), axis, axes[TD_MAX_RANK];
    if (!axis_of(e, td__onnx_attr_i(n, "axis", -1), r, &axis)) return TD_EINVAL;
    for (int i = axis; i < r; i++) axes[i - axis] = i;
    double eps = td__onnx_attr_f(n, "epsilon", 1e-5f);
    td_tensor *mean = K(td_mean(x, r - axis, axes, true));
    td_tensor *d = K(td_sub(x, mean));
    td_tensor *var = K(td_mean(K(td_mul(d, d)), r - axis, axes, true));
    td_tensor *inv = K(td_rsqrt(K(td_add(var, sc_like(e, x, eps)))));
    td_tensor *y = K(td_mul(K(td_mul(d, inv)), IN(1)));
    td_tensor *b = IN(2);
    if (b != NULL) y = K(td_add(y, b));
    td_status st = OUT(0, y);
    if (st == TD_OK && td__onnx_nout(n) > 1) st = OUT(1, mean);
    if (st == TD_OK && td__onnx_nout(n) > 2) st = OUT(2, inv);
    return st;
}


/* ---- losses (NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss) ----
 * loss[n, d..] = -input[n, target[n, d..], d..] * w[n, d..], where w is weight[target]
 * (1 without weights) and 0 where target == ignore_index; "mean" is sum(loss) / sum(w),
 * "sum" sum(loss), "none" loss itself (Operators.md, NegativeLogLikelihoodLoss). */
static bool reduction_of(E *e, const N *n, int *red)
{
    const Onnx__AttributeProto *a = td__onnx_attr(n, "reduction");
    *red = 2;
    if (a == NULL || !a->has_s) return true;
    if (a->s.len == 4 && memcmp(a->s.data, "none", 4) == 0) *red = 0;
    else if (a->s.len == 3 && memcmp(a->s.data, "sum", 3) == 0) *red = 1;
    else if (a->s.len == 4 && memcmp(a->s.data, "mean", 4) == 0) *red = 2;
    else {
        td__onnx_fail(e, TD_EINVAL, "reduction '%.*s' (want none, sum or mean)", (int)a->s.len,
                      (const char *)a->s.data);
        return false;
    }
    return true;
}

static td_tensor *nll(E *e, const N *n, td_tensor *x, td_tensor *t, td_tensor *w, int red)
{
    if (x == NULL || t == NULL) return NULL;
    int r = td_rank(x), rt = td_rank(t);
    if (r < 2 || rt != r - 1) {
        td__onnx_fail(e, TD_EINVAL, "input of rank %d needs a target of rank %d, got %d", r,
                      r - 1, rt);
        return NULL;
    }
    const Onnx__AttributeProto *ia = td__onnx_attr(n, "ignore_index");
    td_tensor *mask = NULL, *ts = t;
    if (ia != NULL && ia->has_i) {
        mask = K(td_ne(t, sc_like(e, t, (double)ia->i)));
        ts = K(td_where(mask, t, sc_like(e, t, 0)));
    }
    int64_t d[TD_MAX_RANK];
    if (ts == NULL) return NULL;
    d[0] = td_dims(ts)[0];
    d[1] = 1;
    for (int i = 1; i < rt; i++) d[i + 1] = td_dims(ts)[i];
    td_tensor *picked = K(td_gather(x, reshape(e, ts, r, d), 1));
    td_tensor *loss = K(td_neg(reshape(e, picked, rt, td_dims(ts))));
    td_tensor *wt = w != NULL ? K(td_index_select(w, ts, 0)) : NULL;
    if (mask != NULL) wt = K(td_where(mask, wt ? wt : sc_like(e, x, 1), sc_like(e, x, 0)));
    if (wt != NULL) loss = K(td_mul(loss, wt));
    if (loss == NULL || red == 0) return loss;
    if (red == 1) return K(td_sum(loss, 0, NULL, false));
    if (wt == NULL) return K(td_mean(loss, 0, NULL, false));
    return K(td_div(K(td_sum(loss, 0, NULL, false)), K(td_sum(wt, 0, NULL, false))));
}

static td_status h_nll(E *e, const N *n, const OP *op)
{
    int red;
    if (!reduction_of(e, n, &red)) return TD_EINVAL;
    return OUT(0, nll(e, n, IN(0), IN(1), IN(2), red));
}

static td_status h_sce(E *e, const N *n, const OP *op)
{
    int red;
    if (!reduction_of(e, n, &red)) return TD_EINVAL;
    td_tensor *x = IN(0);
    td_tensor *lp = x ? K(td_log_softmax(x, td_rank(x) > 1 ? 1 : 0)) : NULL;
    td_status st = OUT(0, nll(e, n, lp, IN(1), IN(2), red));
    if (st == TD_OK && td__onnx_nout(n) > 1) st = OUT(1, lp);
    return st;
}

/* ---- index masks ---- */

/* arange(len) as i64 shaped to broadcast along `axis` of a rank-r tensor. */
static td_tensor *iota_along(E *e, int64_t len, int axis, int r)
{
    int64_t d[TD_MAX_RANK];
    for (int i = 0; i < r; i++) d[i] = i == axis ? len : 1;
    return reshape(e, K(td_arange(CTX, TD_I64, len, 0, 1)), r, d);
}

static td_status h_trilu(E *e, const N *n, const OP *op)
{
    td_tensor *x = IN(0);
    const int64_t *kv;
    size_t cnt;
    bool present;
    if (!td__onnx_host_ints(e, n, 1, true, &kv, &cnt, &present)) return TD_EINVAL;
    if (x == NULL) return OUT(0, NULL);
    int r = td_rank(x);
    if (r < 2) return td__onnx_fail(e, TD_EINVAL, "input must have rank >= 2");
    if (present && cnt != 1) return td__onnx_fail(e, TD_EINVAL, "k must be a scalar");
    int64_t k = present ? kv[0] : 0;
    td_tensor *rows = iota_along(e, td_dims(x)[r - 2], 0, 2);
    td_tensor *cols = iota_along(e, td_dims(x)[r - 1], 1, 2);
    td_tensor *diff = K(td_sub(cols, rows));
    td_tensor *kk = scalar(e, TD_I64, (double)k);
    td_tensor *mask = td__onnx_attr_i(n, "upper", 1) ? K(td_ge(diff, kk)) : K(td_le(diff, kk));
    return OUT(0, K(td_where(mask, x, sc_like(e, x, 0))));
}

static td_status h_hardmax(E *e, const N *n, const OP *op)
{
    td_tensor *x = IN(0);
    if (x == NULL) return OUT(0, NULL);
    int r = td_rank(x), axis;
    if (!axis_of(e, td__onnx_attr_i(n, "axis", op->since >= 13 ? -1 : 1), r, &axis))
        return TD_EINVAL;
    td_tensor *y = x;
    int ax = axis;
    if (op->since < 13) {
        y = reshape(e, x, 2, (int64_t[]){dprod(x, 0, axis), dprod(x, axis, r)});
        ax = 1;
    }
    if (y == NULL) return OUT(0, NULL);
    int ry = td_rank(y);
    td_tensor *am = K(td_argmax(y, ax, true));
    td_tensor *h = K(td_cast(K(td_eq(iota_along(e, td_dims(y)[ax], ax, ry), am)),
                             td_tensor_dtype(x)));
    return OUT(0, op->since < 13 ? reshape(e, h, r, td_dims(x)) : h);
}

/* CumSum as a matmul with a 0/1 triangle: y[.., j] = sum_i x[.., i] T[i, j]. */
static td_status h_cumsum(E *e, const N *n, const OP *op)
{
    td_tensor *x = IN(0);
    const int64_t *av;
    size_t cnt;
    if (!td__onnx_host_ints(e, n, 1, false, &av, &cnt, NULL)) return TD_EINVAL;
    if (x == NULL) return OUT(0, NULL);
    if (cnt != 1) return td__onnx_fail(e, TD_EINVAL, "axis must be a scalar");
    int r = td_rank(x), axis;
    if (!axis_of(e, av[0], r, &axis)) return TD_EINVAL;
    int perm[TD_MAX_RANK], inv[TD_MAX_RANK];
    for (int i = 0, j = 0; i < r; i++)
        if (i != axis) perm[j++] = i;
    perm[r - 1] = axis;
    for (int i = 0; i < r; i++) inv[perm[i]] = i;
    td_tensor *xp = r > 1 ? K(td_permute(x, perm)) : x;
    int64_t len = td_dims(x)[axis];
    int64_t rest = td_nelem(x) / (len ? len : 1);
    if (len == 0) return OUT(0, x);
    td_tensor *x2 = reshape(e, xp, 2, (int64_t[]){rest, len});
    td_tensor *i = iota_along(e, len, 0, 2), *j = iota_along(e, len, 1, 2);
    bool ex = td__onnx_attr_i(n, "exclusive", 0) != 0, rev = td__onnx_attr_i(n, "reverse", 0) != 0;
    td_tensor *tri = rev ? (ex ? K(td_gt(i, j)) : K(td_ge(i, j)))
                         : (ex ? K(td_lt(i, j)) : K(td_le(i, j)));
    td_tensor *y = K(td_matmul(x2, K(td_cast(tri, td_tensor_dtype(x)))));
    y = reshape(e, y, r, xp ? td_dims(xp) : NULL);
    return OUT(0, r > 1 && y ? K(td_permute(y, inv)) : y);
}

static td_status h_eyelike(E *e, const N *n, const OP *op)
{
    td_tensor *x = IN(0);
    if (x == NULL) return OUT(0, NULL);
    if (td_rank(x) != 2) return td__onnx_fail(e, TD_EINVAL, "input must have rank 2");
    td_dtype dt = td_tensor_dtype(x);
    if (td__onnx_attr(n, "dtype") && !dtype_of_onnx(e, td__onnx_attr_i(n, "dtype", 1), &dt))
        return TD_EUNSUPPORTED;
    int64_t k = td__onnx_attr_i(n, "k", 0);
    td_tensor *diff = K(td_sub(iota_along(e, td_dims(x)[1], 1, 2), iota_along(e, td_dims(x)[0], 0, 2)));
    return OUT(0, K(td_cast(K(td_eq(diff, scalar(e, TD_I64, (double)k))), dt)));
}

static td_status h_shrink(E *e, const N *n, const OP *op)
{
    td_tensor *x = IN(0);
    double l = td__onnx_attr_f(n, "lambd", 0.5f), b = td__onnx_attr_f(n, "bias", 0.0f);
    td_tensor *lo = K(td_lt(x, sc_like(e, x, -l))), *hi = K(td_gt(x, sc_like(e, x, l)));
    td_tensor *y = K(td_where(hi, K(td_sub(x, sc_like(e, x, b))), sc_like(e, x, 0)));
    return OUT(0, K(td_where(lo, K(td_add(x, sc_like(e, x, b))), y)));
}


/* ---- windows: MaxPool, AveragePool, Conv ----
 * Output sizes, auto_pad and ceil_mode as the ONNX spec states them (Operators.md,
 * MaxPool): with explicit pads out = floor or ceil((D + pb + pe - ((K - 1) d + 1)) / s) + 1;
 * SAME_UPPER/SAME_LOWER out = ceil(D / s), the total padding split with the extra element
 * at the end (UPPER) or the start (LOWER); VALID no padding. Every window position is then
 * an index_select along each spatial axis of the padded input (indices o s + a d for kernel
 * offset a), folded with maximum (MaxPool), add (AveragePool; divided by the count of
 * elements that are not padding, or by the kernel size with count_include_pad), or a
 * matmul with the kernel's [M, C] slice (Conv). */
typedef struct win {
    int k; /* spatial dims */
    int64_t kern[6], str[6], dil[6], pb[6], pe[6], out[6], extra[6];
} win;

static bool ints_attr(const N *n, const char *name, int k, int64_t *out, int64_t dflt)
{
    const Onnx__AttributeProto *a = td__onnx_attr(n, name);
    for (int i = 0; i < k; i++) out[i] = dflt;
    if (a == NULL) return true;
    if (a->n_ints != (size_t)k) return false;
    for (int i = 0; i < k; i++) out[i] = a->ints[i];
    return true;
}

static bool win_plan(E *e, const N *n, td_tensor *x, const int64_t *kern, win *w, bool pool)
{
    int r = td_rank(x);
    w->k = r - 2;
    int k = w->k;
    if (k < 1 || k > 6) {
        td__onnx_fail(e, TD_EUNSUPPORTED, "input of rank %d (want 3..8)", r);
        return false;
    }
    int64_t pads[12];
    for (int i = 0; i < k; i++) w->kern[i] = kern[i];
    if (!ints_attr(n, "strides", k, w->str, 1) || !ints_attr(n, "dilations", k, w->dil, 1) ||
        !ints_attr(n, "pads", 2 * k, pads, 0)) {
        td__onnx_fail(e, TD_EINVAL, "strides, dilations or pads of the wrong length for %d "
                      "spatial dims", k);
        return false;
    }
    bool ceil_mode = pool && td__onnx_attr_i(n, "ceil_mode", 0) != 0;
    const Onnx__AttributeProto *ap = td__onnx_attr(n, "auto_pad");
    char mode[16] = "NOTSET";
    if (ap && ap->has_s && ap->s.len < sizeof mode) {
        if (ap->s.len > 0) memcpy(mode, ap->s.data, ap->s.len);
        mode[ap->s.len] = '\0';
    }
    for (int i = 0; i < k; i++) {
        int64_t D = td_dims(x)[i + 2], K = w->kern[i], s = w->str[i], d = w->dil[i];
        if (K < 1 || s < 1 || d < 1 || K > (1 << 20) || s > (1 << 20) || d > (1 << 20) ||
            pads[i] < 0 || pads[k + i] < 0 || pads[i] > (1 << 20) || pads[k + i] > (1 << 20)) {
            td__onnx_fail(e, TD_EINVAL, "kernel %lld, stride %lld, dilation %lld, pads %lld "
                          "%lld on spatial dim %d", (long long)K, (long long)s, (long long)d,
                          (long long)pads[i], (long long)pads[k + i], i);
            return false;
        }
        int64_t span = (K - 1) * d + 1;
        w->pb[i] = pads[i];
        w->pe[i] = pads[k + i];
        if (strcmp(mode, "SAME_UPPER") == 0 || strcmp(mode, "SAME_LOWER") == 0) {
            w->out[i] = (D + s - 1) / s;
            int64_t total = (w->out[i] - 1) * s + span - D;
            if (total < 0) total = 0;
            bool upper = mode[5] == 'U';
            w->pb[i] = upper ? total / 2 : total - total / 2;
            w->pe[i] = total - w->pb[i];
        } else if (strcmp(mode, "VALID") == 0) {
            w->pb[i] = w->pe[i] = 0;
            w->out[i] = D >= span ? (D - span) / s + 1 : 0;
        } else if (strcmp(mode, "NOTSET") == 0) {
            int64_t len = D + w->pb[i] + w->pe[i] - span;
            w->out[i] = len < 0 ? 0 : (ceil_mode ? (len + s - 1) / s : len / s) + 1;
            /* ceil_mode: a last window that starts in the padding is dropped */
            if (ceil_mode && w->out[i] > 1 && (w->out[i] - 1) * s >= D + w->pb[i]) w->out[i]--;
        } else {
            td__onnx_fail(e, TD_EINVAL, "auto_pad '%s'", mode);
            return false;
        }
        int64_t need = (w->out[i] - 1) * s + span - (D + w->pb[i] + w->pe[i]);
        w->extra[i] = need > 0 ? need : 0;
        if (w->out[i] < 1) {
            td__onnx_fail(e, TD_EINVAL, "spatial dim %d of size %lld is smaller than the "
                          "kernel", i, (long long)D);
            return false;
        }
    }
    return true;
}

/* x padded on spatial dims: `value` for pb/pe, `extra_value` for the ceil-mode extension. */
static td_tensor *win_pad(E *e, td_tensor *x, const win *w, double value, double extra_value)
{
    td_tensor *y = x;
    int r = td_rank(x);
    for (int i = 0; i < w->k && y != NULL; i++) {
        td_tensor *parts[4];
        int np = 0;
        int64_t d[TD_MAX_RANK];
        memcpy(d, td_dims(y), (size_t)r * sizeof *d);
        if (w->pb[i] > 0) {
            d[i + 2] = w->pb[i];
            parts[np++] = K(td_full(CTX, td_tensor_dtype(y), r, d, value));
        }
        parts[np++] = y;
        if (w->pe[i] > 0) {
            d[i + 2] = w->pe[i];
            parts[np++] = K(td_full(CTX, td_tensor_dtype(y), r, d, value));
        }
        if (w->extra[i] > 0) {
            d[i + 2] = w->extra[i];
            parts[np++] = K(td_full(CTX, td_tensor_dtype(y), r, d, extra_value));
        }
        if (np > 1) y = K(td_concat(np, parts, i + 2));
    }
    return y;
}

/* The window of kernel offset `off` (one per spatial dim) of padded input p. */
static td_tensor *win_at(E *e, td_tensor *p, const win *w, const int64_t *off)
{
    td_tensor *t = p;
    for (int i = 0; i < w->k && t != NULL; i++) {
        td_tensor *idx = K(td_arange(CTX, TD_I64, w->out[i], (double)(off[i] * w->dil[i]),
                                     (double)w->str[i]));
        t = K(td_index_select(t, idx, i + 2));
    }
    return t;
}

static bool win_next(const win *w, int64_t *off)
{
    for (int i = w->k - 1; i >= 0; i--) {
        if (++off[i] < w->kern[i]) return true;
        off[i] = 0;
    }
    return false;
}

static td_status h_pool(E *e, const N *n, const OP *op)
{
    td_tensor *x = IN(0);
    if (x == NULL) return OUT(0, NULL);
    bool mx = strcmp(n->op_type, "MaxPool") == 0;
    if (mx && td__onnx_nout(n) > 1 && n->output[1][0] != '\0')
        return td__onnx_fail(e, TD_EUNSUPPORTED, "the Indices output is not supported");
    const Onnx__AttributeProto *ka = td__onnx_attr(n, "kernel_shape");
    win w;
    if (ka == NULL || (int)ka->n_ints != td_rank(x) - 2)
        return td__onnx_fail(e, TD_EINVAL, "kernel_shape must have one entry per spatial dim");
    if (!win_plan(e, n, x, ka->ints, &w, true)) return TD_EINVAL;
    if (!mx && (w.dil[0] != 1 || (w.k > 1 && w.dil[1] != 1)))
        return td__onnx_fail(e, TD_EUNSUPPORTED, "dilations in AveragePool");
    bool incl = td__onnx_attr_i(n, "count_include_pad", 0) != 0;
    td_tensor *p = win_pad(e, x, &w, mx ? -INFINITY : 0, mx ? -INFINITY : 0);
    int64_t off[6] = {0};
    td_tensor *acc = NULL;
    do {
        td_tensor *t = win_at(e, p, &w, off);
        acc = acc == NULL ? t : K(mx ? td_maximum(acc, t) : td_add(acc, t));
        if (acc == NULL) return OUT(0, NULL);
    } while (win_next(&w, off));
    if (mx) return OUT(0, acc);
    /* the count of non-padding elements of each window (padding counts with
     * count_include_pad, the ceil-mode extension never) */
    int r = td_rank(x);
    int64_t d[TD_MAX_RANK];
    d[0] = d[1] = 1;
    for (int i = 2; i < r; i++) d[i] = td_dims(x)[i];
    td_tensor *ones = K(td_full(CTX, td_tensor_dtype(x), r, d, 1));
    td_tensor *pc = ones ? win_pad(e, ones, &w, incl ? 1 : 0, 0) : NULL;
    td_tensor *cnt = NULL;
    memset(off, 0, sizeof off);
    do {
        td_tensor *t = pc ? win_at(e, pc, &w, off) : NULL;
        cnt = cnt == NULL ? t : K(td_add(cnt, t));
        if (cnt == NULL) return OUT(0, NULL);
    } while (win_next(&w, off));
    return OUT(0, K(td_div(acc, cnt)));
}

/* The correlation of x [N, C, D...] (padded per w) with wt [M, C, k...] on the plan w. */
static td_tensor *conv_core(E *e, td_tensor *x, td_tensor *wt, td_tensor *b, const win *w)
{
    int r = td_rank(x);
    int64_t M = td_dims(wt)[0], C = td_dims(x)[1], Nb = td_dims(x)[0], P = 1;
    for (int i = 0; i < w->k; i++) P *= w->out[i];
    td_tensor *p = win_pad(e, x, w, 0, 0);
    int64_t off[6] = {0}, lo[TD_MAX_RANK], hi[TD_MAX_RANK];
    td_tensor *acc = NULL;
    do {
        td_tensor *t = p ? win_at(e, p, w, off) : NULL;
        t = reshape(e, t, 3, (int64_t[]){Nb, C, P});
        lo[0] = lo[1] = 0;
        hi[0] = M;
        hi[1] = C;
        for (int i = 0; i < w->k; i++) lo[i + 2] = off[i], hi[i + 2] = off[i] + 1;
        td_tensor *wk = reshape(e, K(td_slice(wt, lo, hi)), 2, (int64_t[]){M, C});
        td_tensor *c = wk && t ? K(td_matmul(wk, t)) : NULL;
        acc = acc == NULL ? c : K(td_add(acc, c));
        if (acc == NULL) return NULL;
    } while (win_next(w, off));
    int64_t d[TD_MAX_RANK];
    d[0] = Nb;
    d[1] = M;
    for (int i = 0; i < w->k; i++) d[i + 2] = w->out[i];
    td_tensor *y = reshape(e, acc, r, d);
    if (b != NULL) y = K(td_add(y, per_channel(e, b, r)));
    return y;
}

/* Conv: 1 to 3 spatial dims through the table's convolution (td_conv: any group count
 * dividing C and M, asymmetric pads, one fused op instead of a matmul per kernel offset);
 * more spatial dims (group 1 only) through conv_core's matmuls. */
static td_status h_conv(E *e, const N *n, const OP *op)
{
    td_tensor *x = IN(0), *wt = IN(1), *b = IN(2);
    if (x == NULL || wt == NULL) return OUT(0, NULL);
    int64_t group = td__onnx_attr_i(n, "group", 1);
    int r = td_rank(x);
    int64_t C = r >= 2 ? td_dims(x)[1] : 0;
    if (group < 1 || group > C || C % group != 0)
        return td__onnx_fail(e, TD_EINVAL, "group %lld does not divide the %lld input channels",
                             (long long)group, (long long)C);
    if (td_rank(wt) != r || td_dims(wt)[1] * group != C || td_dims(wt)[0] % group != 0)
        return td__onnx_fail(e, TD_EINVAL, "weight must be [M, C / group, kernel...] with "
                             "C = %lld, group %lld and M a multiple of the group",
                             (long long)C, (long long)group);
    win w;
    if (!win_plan(e, n, x, td_dims(wt) + 2, &w, false)) return TD_EINVAL;
    const Onnx__AttributeProto *ka = td__onnx_attr(n, "kernel_shape");
    if (ka != NULL)
        for (int i = 0; i < w.k; i++)
            if ((int)ka->n_ints != w.k || ka->ints[i] != w.kern[i])
                return td__onnx_fail(e, TD_EINVAL, "kernel_shape disagrees with the weight");
    if (w.k >= 1 && w.k <= 3) {
        td_conv_params p;
        memset(&p, 0, sizeof p);
        for (int i = 0; i < w.k; i++) {
            p.stride[i] = w.str[i];
            p.dilation[i] = w.dil[i];
            p.pad_lo[i] = w.pb[i];
            p.pad_hi[i] = w.pe[i];
        }
        p.groups = group;
        return OUT(0, K(td_conv(x, wt, b, &p)));
    }
    if (group != 1)
        return td__onnx_fail(e, TD_EUNSUPPORTED, "group %lld with %d spatial dims (groups need "
                             "1 to 3)", (long long)group, w.k);
    return OUT(0, conv_core(e, x, wt, b, &w));
}

/* ConvTranspose (group 1) as a correlation: the input with stride - 1 zeros inserted
 * between elements, padded by (kernel - 1) * dilation on both sides (plus output_padding
 * at the end), correlated with the kernel flipped and its [C, M] axes swapped, then
 * cropped by pads (Operators.md, ConvTranspose: out = stride (D - 1) + output_padding +
 * (kernel - 1) dilation + 1 - pads; output_shape sets the pads instead). */
static td_status h_convtranspose(E *e, const N *n, const OP *op)
{
    td_tensor *x = IN(0), *wt = IN(1), *b = IN(2);
    if (x == NULL || wt == NULL) return OUT(0, NULL);
    if (td__onnx_attr_i(n, "group", 1) != 1)
        return td__onnx_fail(e, TD_EUNSUPPORTED, "group other than 1");
    int r = td_rank(x), k = r - 2;
    if (k < 1 || r >= TD_MAX_RANK || td_rank(wt) != r || td_dims(wt)[0] != td_dims(x)[1])
        return td__onnx_fail(e, TD_EINVAL, "weight must be [C, M, kernel...] with C = %lld "
                             "(and the input rank 3..7)", (long long)td_dims(x)[1]);
    int64_t str[6], dil[6], pads[12], opad[6], oshape[6];
    const Onnx__AttributeProto *osa = td__onnx_attr(n, "output_shape");
    if (!ints_attr(n, "strides", k, str, 1) || !ints_attr(n, "dilations", k, dil, 1) ||
        !ints_attr(n, "pads", 2 * k, pads, 0) || !ints_attr(n, "output_padding", k, opad, 0) ||
        (osa != NULL && !ints_attr(n, "output_shape", k, oshape, 0)))
        return td__onnx_fail(e, TD_EINVAL, "strides, dilations, pads, output_padding or "
                             "output_shape of the wrong length");
    const Onnx__AttributeProto *ap = td__onnx_attr(n, "auto_pad");
    bool same = ap && ap->has_s && ap->s.len > 4 && memcmp(ap->s.data, "SAME", 4) == 0;
    bool upper = same && ap->s.len == 10 && memcmp(ap->s.data, "SAME_UPPER", 10) == 0;
    /* permuted, flipped kernel [M, C, k...] */
    int perm[TD_MAX_RANK];
    for (int i = 0; i < r; i++) perm[i] = i;
    perm[0] = 1, perm[1] = 0;
    td_tensor *wf = K(td_permute(wt, perm));
    win w = {.k = k};
    td_tensor *xu = x;
    for (int i = 0; i < k && wf != NULL && xu != NULL; i++) {
        int64_t K0 = td_dims(wt)[i + 2], D = td_dims(x)[i + 2];
        if (str[i] < 1 || dil[i] < 1 || str[i] > (1 << 16) || dil[i] > (1 << 16) || opad[i] < 0 ||
            opad[i] > (1 << 16) || pads[i] < 0 || pads[k + i] < 0 || D < 1)
            return td__onnx_fail(e, TD_EINVAL, "stride, dilation, pads or output_padding on "
                                 "spatial dim %d", i);
        wf = K(td_index_select(wf, K(td_arange(CTX, TD_I64, K0, (double)(K0 - 1), -1)), i + 2));
        if (str[i] > 1) { /* insert stride - 1 zeros after each element, drop the last ones */
            int ax = i + 2, ru = td_rank(xu);
            int64_t d1[TD_MAX_RANK], dz[TD_MAX_RANK], dm[TD_MAX_RANK];
            for (int j = 0, q = 0; j <= ru; j++) d1[j] = j == ax + 1 ? 1 : td_dims(xu)[q++];
            memcpy(dz, d1, sizeof dz);
            dz[ax + 1] = str[i] - 1;
            td_tensor *parts[2] = {reshape(e, xu, ru + 1, d1),
                                   K(td_full(CTX, td_tensor_dtype(xu), ru + 1, dz, 0))};
            td_tensor *il = K(td_concat(2, parts, ax + 1));
            memcpy(dm, td_dims(xu), (size_t)ru * sizeof *dm);
            dm[ax] = D * str[i];
            il = reshape(e, il, ru, dm);
            int64_t lo[TD_MAX_RANK] = {0}, hi[TD_MAX_RANK];
            memcpy(hi, dm, sizeof hi);
            hi[ax] = (D - 1) * str[i] + 1;
            xu = il ? K(td_slice(il, lo, hi)) : NULL;
        }
        int64_t span = (K0 - 1) * dil[i];
        int64_t full = (D - 1) * str[i] + span + 1 + opad[i];
        w.kern[i] = K0;
        w.str[i] = 1;
        w.dil[i] = dil[i];
        w.pb[i] = w.pe[i] = span;
        w.extra[i] = opad[i];
        w.out[i] = full;
        if (osa != NULL || same) {
            int64_t want = osa != NULL ? oshape[i] : D * str[i];
            int64_t total = full - want;
            if (want < 1 || want > full + (1 << 16))
                return td__onnx_fail(e, TD_EINVAL, "output_shape %lld for a full size of %lld",
                                     (long long)want, (long long)full);
            if (total < 0) { /* a larger output: zeros at the end, as output_padding */
                w.extra[i] -= total;
                w.out[i] -= total;
                pads[i] = pads[k + i] = 0;
                continue;
            }
            pads[i] = upper ? total / 2 : total - total / 2;
            pads[k + i] = total - pads[i];
        }
        if (pads[i] + pads[k + i] >= full)
            return td__onnx_fail(e, TD_EINVAL, "pads remove the whole output of dim %d", i);
    }
    if (wf == NULL || xu == NULL) return OUT(0, NULL);
    td_tensor *y = conv_core(e, xu, wf, NULL, &w);
    if (y == NULL) return OUT(0, NULL);
    int64_t lo[TD_MAX_RANK] = {0}, hi[TD_MAX_RANK];
    memcpy(hi, td_dims(y), (size_t)r * sizeof *hi);
    for (int i = 0; i < k; i++) lo[i + 2] = pads[i], hi[i + 2] -= pads[k + i];
    y = K(td_slice(y, lo, hi));
    if (b != NULL) y = K(td_add(y, per_channel(e, b, r)));
    return OUT(0, y);
}

/* Mod (Operators.md): fmod 1 is C's fmod (the dividend's sign), td_fmod; fmod 0 is Python's
 * remainder (the divisor's sign), td_remainder, for integers only: the spec requires fmod 1
 * for floating-point inputs. Integer division by zero gives the dividend (td_fmod's rule;
 * the spec leaves it undefined). */
static td_status h_mod(E *e, const N *n, const OP *op)
{
    td_tensor *a = IN(0), *b = IN(1);
    if (a == NULL || b == NULL) return OUT(0, NULL);
    int64_t fm = td__onnx_attr_i(n, "fmod", 0);
    if (fm != 0 && fm != 1) return td__onnx_fail(e, TD_EINVAL, "fmod %lld (0 or 1)", (long long)fm);
    bool is_int = td__dtype_is_int((uint32_t)td_tensor_dtype(a));
    if (!is_int && fm == 0)
        return td__onnx_fail(e, TD_EINVAL, "Mod of %s needs fmod 1 (the spec's rule for "
                             "floating-point inputs)", td_dtype_name(td_tensor_dtype(a)));
    return OUT(0, K(fm ? td_fmod(a, b) : td_remainder(a, b)));
}


/* TopK (opset 10+: K a constant input): values and indices along axis, largest or smallest
 * first, ties to the lower index (the spec's rule; td_topk's too). sorted 0 lets the order
 * be anything, so the sorted order is a valid answer. */
static td_status h_topk(E *e, const N *n, const OP *op)
{
    td_tensor *x = IN(0);
    const int64_t *kv;
    size_t cnt;
    bool present;
    if (!td__onnx_host_ints(e, n, 1, false, &kv, &cnt, &present)) return TD_EUNSUPPORTED;
    if (x == NULL) return OUT(0, NULL);
    if (cnt != 1) return td__onnx_fail(e, TD_EINVAL, "K must hold one value, not %zu", cnt);
    int axis;
    if (!axis_of(e, td__onnx_attr_i(n, "axis", -1), td_rank(x), &axis)) return TD_EINVAL;
    td_tensor *idx = NULL;
    td_tensor *v = K(td_topk(x, kv[0], axis, td__onnx_attr_i(n, "largest", 1) != 0, &idx));
    K(idx);
    td_status st = OUT(0, v);
    if (st != TD_OK) return st;
    return OUT(1, idx);
}

/* ScatterElements (and the older Scatter): out = data, out[index along axis] = updates
 * (reduction "none": td_scatter, the last of duplicates wins; "add": td_scatter_add in
 * ascending order); negative indices count from the end of the axis. */
static td_status h_scatter_elements(E *e, const N *n, const OP *op)
{
    td_tensor *x = IN(0), *idx = IN(1), *upd = IN(2);
    if (x == NULL || idx == NULL || upd == NULL) return OUT(0, NULL);
    int axis;
    if (!axis_of(e, td__onnx_attr_i(n, "axis", 0), td_rank(x), &axis)) return TD_EINVAL;
    const Onnx__AttributeProto *ra = td__onnx_attr(n, "reduction");
    bool add = false;
    if (ra != NULL && ra->has_s) {
        if (ra->s.len == 3 && memcmp(ra->s.data, "add", 3) == 0) add = true;
        else if (!(ra->s.len == 4 && memcmp(ra->s.data, "none", 4) == 0))
            return td__onnx_fail(e, TD_EUNSUPPORTED, "reduction '%.*s' (none and add are "
                                 "supported)", (int)(ra->s.len > 16 ? 16 : ra->s.len),
                                 (const char *)ra->s.data);
    }
    idx = wrap_index(e, idx, td_dims(x)[axis]);
    if (idx == NULL) return OUT(0, NULL);
    return OUT(0, K(add ? td_scatter_add(x, axis, idx, upd) : td_scatter(x, axis, idx, upd)));
}

static td_status h_onehot(E *e, const N *n, const OP *op)
{
    td_tensor *idx = IN(0), *vals = IN(2);
    double depth;
    td_dtype ddt;
    if (!host_scalar(e, n, 1, &depth, &ddt)) return TD_EUNSUPPORTED;
    if (idx == NULL || vals == NULL) return OUT(0, NULL);
    if (!(depth >= 1 && depth <= (double)(1 << 30)))
        return td__onnx_fail(e, TD_EINVAL, "depth %g", depth);
    int64_t dp = (int64_t)depth;
    if (td_rank(vals) != 1 || td_dims(vals)[0] != 2)
        return td__onnx_fail(e, TD_EINVAL, "values must be [off, on]");
    int r = td_rank(idx) + 1, axis;
    if (r > TD_MAX_RANK) return td__onnx_fail(e, TD_EUNSUPPORTED, "rank %d", r);
    if (!axis_of(e, td__onnx_attr_i(n, "axis", -1), r, &axis)) return TD_EINVAL;
    /* non-integer indices are truncated (cast), negative ones count from depth */
    td_tensor *i64 = K(td_cast(idx, TD_I64));
    i64 = wrap_index(e, i64, dp);
    int64_t d[TD_MAX_RANK];
    for (int i = 0, j = 0; i < r; i++) d[i] = i == axis ? 1 : td_dims(idx)[j++];
    td_tensor *hit = K(td_eq(reshape(e, i64, r, d), iota_along(e, dp, axis, r)));
    td_tensor *off = reshape(e, K(td_slice(vals, (int64_t[]){0}, (int64_t[]){1})), 0, NULL);
    td_tensor *on = reshape(e, K(td_slice(vals, (int64_t[]){1}, (int64_t[]){2})), 0, NULL);
    return OUT(0, K(td_where(hit, on, off)));
}

/* Compress: the condition is read on the host, so the output length is known. */
static td_status h_compress(E *e, const N *n, const OP *op)
{
    td_tensor *x = IN(0);
    const td__onnx_host *c = td__onnx_host_in(e, n, 1);
    if (c == NULL || c->desc.dtype != TD_BOOL || c->desc.rank != 1)
        return td__onnx_fail(e, TD_EUNSUPPORTED, "condition must be a 1-D bool known before "
                             "the run");
    if (x == NULL) return OUT(0, NULL);
    const Onnx__AttributeProto *aa = td__onnx_attr(n, "axis");
    int axis = 0;
    if (aa == NULL) {
        x = reshape(e, x, 1, (int64_t[]){td_nelem(x)});
        if (x == NULL) return OUT(0, NULL);
    } else if (!axis_of(e, aa->i, td_rank(x), &axis)) {
        return TD_EINVAL;
    }
    int64_t len = c->desc.dims[0], D = td_dims(x)[axis], cnt = 0;
    if (len > D) return td__onnx_fail(e, TD_EINVAL, "condition longer than axis %d", axis);
    td__onnx_host h = {.desc = {.dtype = TD_I64, .rank = 1}};
    for (int64_t i = 0; i < len; i++) cnt += ((const uint8_t *)c->data)[i] != 0;
    h.desc.dims[0] = cnt;
    h.nbytes = (size_t)cnt * 8;
    if (cnt > 0 && (h.data = td__malloc(h.nbytes)) == NULL)
        return td__onnx_fail(e, TD_ENOMEM, "out of memory");
    for (int64_t i = 0, j = 0; i < len; i++)
        if (((const uint8_t *)c->data)[i]) ((int64_t *)h.data)[j++] = i;
    td_tensor *idx = cnt > 0 ? td__onnx_materialize(e, &h) : K(td_full(CTX, TD_I64, 1, (int64_t[]){0}, 0));
    td__onnx_host_fini(&h);
    return OUT(0, idx ? K(td_index_select(x, idx, axis)) : NULL);
}

/* GatherND with batch_dims 0: the last index dim k picks x[i0, .., ik-1] by a linear
 * index into x reshaped to [prod(dims[:k]), rest...]. */
static td_status h_gathernd(E *e, const N *n, const OP *op)
{
    td_tensor *x = IN(0), *idx = IN(1);
    if (x == NULL || idx == NULL) return OUT(0, NULL);
    if (td__onnx_attr_i(n, "batch_dims", 0) != 0)
        return td__onnx_fail(e, TD_EUNSUPPORTED, "batch_dims other than 0");
    int r = td_rank(x), q = td_rank(idx);
    if (q < 1) return td__onnx_fail(e, TD_EINVAL, "indices must have rank >= 1");
    int64_t k = td_dims(idx)[q - 1];
    if (k < 1 || k > r) return td__onnx_fail(e, TD_EINVAL, "last index dim %lld for rank %d",
                                             (long long)k, r);
    if (q - 1 + (r - k) > TD_MAX_RANK) return td__onnx_fail(e, TD_EUNSUPPORTED, "rank");
    td_tensor *lin = NULL;
    int64_t stride = 1, lo[TD_MAX_RANK] = {0}, hi[TD_MAX_RANK];
    for (int i = 0; i < q; i++) hi[i] = td_dims(idx)[i];
    td_tensor *i64 = K(td_cast(idx, TD_I64));
    for (int64_t j = k - 1; j >= 0 && i64 != NULL; j--) {
        lo[q - 1] = j;
        hi[q - 1] = j + 1;
        td_tensor *c = wrap_index(e, K(td_slice(i64, lo, hi)), td_dims(x)[j]);
        td_tensor *t = K(td_mul(c, scalar(e, TD_I64, (double)stride)));
        lin = lin == NULL ? t : K(td_add(lin, t));
        stride *= td_dims(x)[j];
    }
    if (lin == NULL) return OUT(0, NULL);
    int64_t d[TD_MAX_RANK];
    d[0] = stride;
    for (int i = (int)k; i < r; i++) d[i - k + 1] = td_dims(x)[i];
    td_tensor *xf = reshape(e, x, r - (int)k + 1, d);
    td_tensor *li = reshape(e, lin, q - 1, td_dims(idx));
    return OUT(0, li && xf ? K(td_index_select(xf, li, 0)) : NULL);
}

static td_status h_mvn(E *e, const N *n, const OP *op)
{
    td_tensor *x = IN(0);
    if (x == NULL) return OUT(0, NULL);
    const Onnx__AttributeProto *a = td__onnx_attr(n, "axes");
    int axes[TD_MAX_RANK], na = 0, r = td_rank(x);
    if (a == NULL) {
        if (r != 4) return td__onnx_fail(e, TD_EINVAL, "default axes need rank 4");
        axes[0] = 0, axes[1] = 2, axes[2] = 3, na = 3;
    } else {
        for (size_t i = 0; i < a->n_ints && i < TD_MAX_RANK; i++, na++)
            if (!axis_of(e, a->ints[i], r, &axes[na])) return TD_EINVAL;
    }
    td_tensor *mean = K(td_mean(x, na, axes, true));
    td_tensor *d = K(td_sub(x, mean));
    td_tensor *var = K(td_mean(K(td_mul(d, d)), na, axes, true));
    return OUT(0, K(td_div(d, K(td_add(K(td_sqrt(var)), sc_like(e, x, 1e-9))))));
}

/* LRN: y = x / (bias + alpha / size * sum of x^2 over the channel window)^beta. */
static td_status h_lrn(E *e, const N *n, const OP *op)
{
    td_tensor *x = IN(0);
    if (x == NULL) return OUT(0, NULL);
    int r = td_rank(x);
    int64_t size = td__onnx_attr_i(n, "size", 0);
    if (r < 3 || size < 1 || size > (1 << 16))
        return td__onnx_fail(e, TD_EINVAL, "size %lld, rank %d", (long long)size, r);
    double alpha = td__onnx_attr_f(n, "alpha", 1e-4f), beta = td__onnx_attr_f(n, "beta", 0.75f);
    double bias = td__onnx_attr_f(n, "bias", 1.0f);
    int64_t C = td_dims(x)[1], before = (size - 1) / 2, after = size - 1 - before;
    td_tensor *sq = K(td_mul(x, x));
    int64_t d[TD_MAX_RANK];
    memcpy(d, td_dims(x), (size_t)r * sizeof *d);
    td_tensor *parts[3];
    int np = 0;
    if (before > 0) d[1] = before, parts[np++] = K(td_full(CTX, td_tensor_dtype(x), r, d, 0));
    parts[np++] = sq;
    if (after > 0) d[1] = after, parts[np++] = K(td_full(CTX, td_tensor_dtype(x), r, d, 0));
    td_tensor *p = np > 1 ? K(td_concat(np, parts, 1)) : sq;
    td_tensor *acc = NULL;
    for (int64_t a = 0; a < size && p != NULL; a++) {
        td_tensor *t = K(td_index_select(p, K(td_arange(CTX, TD_I64, C, (double)a, 1)), 1));
        acc = acc == NULL ? t : K(td_add(acc, t));
    }
    td_tensor *den = K(td_add(K(td_mul(acc, sc_like(e, x, alpha / (double)size))), sc_like(e, x, bias)));
    return OUT(0, K(td_div(x, K(td_pow(den, sc_like(e, x, beta))))));
}


/* ---- Resize (opset 11+) and Upsample (opset 9) ----
 * Separable: per resized axis, each output position o maps to an input coordinate x(o) by
 * the coordinate_transformation_mode (Operators.md, Resize), then to 1 (nearest), 2
 * (linear) or 4 (cubic, coefficient A) input taps clamped to the edge, whose indices and
 * weights are computed here on the host in double and applied as index_selects, muls and
 * adds. tf_crop_and_resize is refused. */
static td_tensor *host_vec(E *e, td_dtype dt, const double *v, int64_t n, int axis, int r)
{
    td__onnx_host h = {.desc = {.dtype = (uint32_t)dt, .rank = 1}};
    h.desc.dims[0] = n;
    h.nbytes = (size_t)n * td_dtype_size(dt);
    h.data = td__malloc(h.nbytes ? h.nbytes : 1);
    if (h.data == NULL) {
        td__onnx_fail(e, TD_ENOMEM, "out of memory");
        return NULL;
    }
    for (int64_t i = 0; i < n; i++) {
        if (dt == TD_I64) ((int64_t *)h.data)[i] = (int64_t)v[i];
        else if (dt == TD_F64) ((double *)h.data)[i] = v[i];
        else ((float *)h.data)[i] = (float)v[i];
    }
    td_tensor *t = td__onnx_materialize(e, &h);
    td__onnx_host_fini(&h);
    if (t == NULL || r == 1) return t;
    int64_t d[TD_MAX_RANK];
    for (int i = 0; i < r; i++) d[i] = i == axis ? n : 1;
    return reshape(e, t, r, d);
}

static double cubic_w(double t, double A, int k)
{
    /* the Keys kernel at distances 1 + t, t, 1 - t, 2 - t */
    double d = k == 0 ? 1 + t : k == 1 ? t : k == 2 ? 1 - t : 2 - t;
    if (d <= 1) return ((A + 2) * d - (A + 3)) * d * d + 1;
    if (d < 2) return ((A * d - 5 * A) * d + 8 * A) * d - 4 * A;
    return 0;
}

static td_status h_resize(E *e, const N *n, const OP *op)
{
    td_tensor *x = IN(0);
    if (x == NULL) return OUT(0, NULL);
    int r = td_rank(x);
    const td__onnx_host *sc = NULL, *sz = NULL;
    bool upsample = strcmp(n->op_type, "Upsample") == 0;
    if (upsample) {
        sc = td__onnx_host_in(e, n, 1);
    } else {
        sc = td__onnx_host_in(e, n, 2);
        sz = td__onnx_host_in(e, n, 3);
        if (sc != NULL && td__desc_nelem(&sc->desc) == 0) sc = NULL;
    }
    const Onnx__AttributeProto *ma = td__onnx_attr(n, "mode");
    const Onnx__AttributeProto *ca = td__onnx_attr(n, "coordinate_transformation_mode");
    const Onnx__AttributeProto *na = td__onnx_attr(n, "nearest_mode");
#define ATTR_IS(a, str) ((a) != NULL && (a)->has_s && (a)->s.len == strlen(str) &&              \
                         memcmp((a)->s.data, str, strlen(str)) == 0)
    int mode = ATTR_IS(ma, "linear") ? 1 : ATTR_IS(ma, "cubic") ? 2 : 0;
    if (ma && !ATTR_IS(ma, "nearest") && mode == 0)
        return td__onnx_fail(e, TD_EINVAL, "mode '%.*s'", (int)ma->s.len, (const char *)ma->s.data);
    int ctm = upsample ? 3 : 0; /* half_pixel, pytorch_half_pixel, align_corners, asymmetric, tf_half_pixel_for_nn */
    if (ATTR_IS(ca, "pytorch_half_pixel")) ctm = 1;
    else if (ATTR_IS(ca, "align_corners")) ctm = 2;
    else if (ATTR_IS(ca, "asymmetric")) ctm = 3;
    else if (ATTR_IS(ca, "tf_half_pixel_for_nn")) ctm = 4;
    else if (ca && !ATTR_IS(ca, "half_pixel"))
        return td__onnx_fail(e, TD_EUNSUPPORTED, "coordinate_transformation_mode '%.*s'",
                             (int)ca->s.len, (const char *)ca->s.data);
    int nm = upsample ? 2 : 0; /* round_prefer_floor, round_prefer_ceil, floor, ceil */
    if (ATTR_IS(na, "round_prefer_ceil")) nm = 1;
    else if (ATTR_IS(na, "floor")) nm = 2;
    else if (ATTR_IS(na, "ceil")) nm = 3;
    double A = td__onnx_attr_f(n, "cubic_coeff_a", -0.75f);
    bool excl = td__onnx_attr_i(n, "exclude_outside", 0) != 0;
    if (sc == NULL && sz == NULL) return td__onnx_fail(e, TD_EINVAL, "needs scales or sizes");
    if ((sz ? td__desc_nelem(&sz->desc) : td__desc_nelem(&sc->desc)) != r)
        return td__onnx_fail(e, TD_EINVAL, "scales or sizes must have %d entries", r);
    if (sz && sz->desc.dtype != TD_I64) return td__onnx_fail(e, TD_EINVAL, "sizes must be int64");
    if (!sz && sc->desc.dtype != TD_F32) return td__onnx_fail(e, TD_EINVAL, "scales must be float");
    td_tensor *y = x;
    for (int a = 0; a < r && y != NULL; a++) {
        int64_t D = td_dims(x)[a], O;
        double scale;
        if (sz) {
            O = ((const int64_t *)sz->data)[a];
            scale = D > 0 ? (double)O / (double)D : 1;
        } else {
            scale = ((const float *)sc->data)[a];
            if (!(scale > 0 && scale < 1e6)) return td__onnx_fail(e, TD_EINVAL, "scale %g", scale);
            O = (int64_t)floor((double)D * scale);
        }
        if (O < 1 || O > ONNX_RESIZE_MAX || D < 1)
            return td__onnx_fail(e, TD_EUNSUPPORTED, "axis %d: %lld -> %lld (at most %d outputs "
                                 "per axis)", a, (long long)D, (long long)O, ONNX_RESIZE_MAX);
        if (O == D && scale == 1) continue;
        int taps = mode == 0 ? 1 : mode == 1 ? 2 : 4;
        double *idx = td__malloc((size_t)(O * taps) * 2 * sizeof *idx);
        if (idx == NULL) return td__onnx_fail(e, TD_ENOMEM, "out of memory");
        double *wt = idx + O * taps;
        double lr = sz ? (double)O : (double)D * scale;
        for (int64_t o = 0; o < O; o++) {
            double c;
            switch (ctm) {
            /* length_resized of the spec: D * scale itself when scales are given */
            case 1: c = lr > 1 ? (o + 0.5) / scale - 0.5 : 0; break;
            case 2: c = lr > 1 ? (double)o * (double)(D - 1) / (lr - 1) : 0; break;
            case 3: c = o / scale; break;
            case 4: c = (o + 0.5) / scale; break;
            default: c = (o + 0.5) / scale - 0.5; break;
            }
            if (mode == 0) {
                double f = nm == 0 ? ceil(c - 0.5) : nm == 1 ? floor(c + 0.5) : nm == 2 ? floor(c) : ceil(c);
                if (nm == 0 && c - floor(c) != 0.5) f = floor(c + 0.5);
                idx[o] = f < 0 ? 0 : f > (double)(D - 1) ? (double)(D - 1) : f;
                wt[o] = 1;
                continue;
            }
            double i0 = floor(c), t = c - i0;
            double wsum = 0;
            for (int k = 0; k < taps; k++) {
                double at = i0 + (mode == 1 ? k : k - 1);
                double w = mode == 1 ? (k == 0 ? 1 - t : t) : cubic_w(t, A, k);
                if (excl && (at < 0 || at > (double)(D - 1))) w = 0;
                idx[k * O + o] = at < 0 ? 0 : at > (double)(D - 1) ? (double)(D - 1) : at;
                wt[k * O + o] = w;
                wsum += w;
            }
            if (excl && wsum != 0)
                for (int k = 0; k < taps; k++) wt[k * O + o] /= wsum;
        }
        td_tensor *acc = NULL;
        for (int k = 0; k < taps && y != NULL; k++) {
            td_tensor *iv = host_vec(e, TD_I64, idx + k * O, O, 0, 1);
            td_tensor *t = iv ? K(td_index_select(y, iv, a)) : NULL;
            if (mode != 0) t = K(td_mul(t, host_vec(e, td_tensor_dtype(x), wt + k * O, O, a, r)));
            acc = acc == NULL ? t : K(td_add(acc, t));
        }
        td__free(idx);
        y = acc;
    }
#undef ATTR_IS
    return OUT(0, y);
}


/* ---- Einsum: one or two operands, each letter at most once per operand, no ellipsis ----
 * Letters only one operand has and the output lacks are summed first; then the operands
 * are permuted to [batch, kept, contracted] and [batch, contracted, kept], multiplied as
 * [B, M, K] x [B, K, N], and the result permuted to the output's letter order. */
static td_tensor *perm_to(E *e, td_tensor *x, const char *have, const char *want)
{
    int r = (int)strlen(want), perm[TD_MAX_RANK];
    bool id = true;
    for (int i = 0; i < r; i++) {
        perm[i] = (int)(strchr(have, want[i]) - have);
        id &= perm[i] == i;
    }
    return id || x == NULL ? x : K(td_permute(x, perm));
}

/* Sum out of x (letters `lt`) the letters not in keep1 or keep2; lt is updated. */
static td_tensor *sum_unused(E *e, td_tensor *x, char *lt, const char *k1, const char *k2)
{
    int axes[TD_MAX_RANK], na = 0;
    char rest[TD_MAX_RANK + 1];
    int nr = 0;
    for (int i = 0; lt[i]; i++) {
        if (strchr(k1, lt[i]) == NULL && (k2 == NULL || strchr(k2, lt[i]) == NULL)) axes[na++] = i;
        else rest[nr++] = lt[i];
    }
    rest[nr] = '\0';
    strcpy(lt, rest);
    return na == 0 || x == NULL ? x : K(td_sum(x, na, axes, false));
}

static td_status h_einsum(E *e, const N *n, const OP *op)
{
    const Onnx__AttributeProto *ea = td__onnx_attr(n, "equation");
    if (ea == NULL || !ea->has_s || ea->s.len > 60)
        return td__onnx_fail(e, TD_EINVAL, "equation is required (at most 60 characters)");
    char eq[64], ops[2][TD_MAX_RANK + 1] = {"", ""}, out[TD_MAX_RANK + 1] = "";
    int k = 0, nops = 0;
    for (size_t i = 0; i < ea->s.len; i++)
        if (ea->s.data[i] != ' ') eq[k++] = (char)ea->s.data[i];
    eq[k] = '\0';
    char *arrow = strstr(eq, "->");
    if (arrow) *arrow = '\0';
    for (char *p = eq, *tok; (tok = strsep(&p, ",")) != NULL;) {
        if (nops >= 2 || strlen(tok) > TD_MAX_RANK)
            return td__onnx_fail(e, TD_EUNSUPPORTED, "einsum '%.*s': at most 2 operands of rank "
                                 "<= 8", (int)ea->s.len, (const char *)ea->s.data);
        strcpy(ops[nops++], tok);
    }
    if (nops != td__onnx_nin(e, n)) return td__onnx_fail(e, TD_EINVAL, "operand count");
    int count[128] = {0};
    for (int o = 0; o < nops; o++)
        for (int i = 0; ops[o][i]; i++) {
            unsigned char c = (unsigned char)ops[o][i];
            if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) || strchr(ops[o] + i + 1, c))
                return td__onnx_fail(e, TD_EUNSUPPORTED, "einsum '%.*s': ellipsis or a "
                                     "repeated letter in one operand (a diagonal)",
                                     (int)ea->s.len, (const char *)ea->s.data);
            count[c]++;
        }
    if (arrow) {
        if (strlen(arrow + 2) > TD_MAX_RANK) return td__onnx_fail(e, TD_EINVAL, "output rank");
        strcpy(out, arrow + 2);
        for (int i = 0; out[i]; i++)
            if ((unsigned char)out[i] >= 128 || count[(unsigned char)out[i]] == 0 ||
                strchr(out + i + 1, out[i]))
                return td__onnx_fail(e, TD_EINVAL, "output letter '%c'", out[i]);
    } else {
        int o = 0;
        for (int c = 0; c < 128; c++)
            if (count[c] == 1) out[o++] = (char)c;
        out[o] = '\0';
    }
    td_tensor *x[2] = {IN(0), nops > 1 ? IN(1) : NULL};
    for (int o = 0; o < nops; o++) {
        if (x[o] == NULL) return OUT(0, NULL);
        if (td_rank(x[o]) != (int)strlen(ops[o]))
            return td__onnx_fail(e, TD_EINVAL, "operand %d has rank %d, the equation says %zu",
                                 o, td_rank(x[o]), strlen(ops[o]));
    }
    if (nops == 1) {
        td_tensor *y = sum_unused(e, x[0], ops[0], out, NULL);
        return OUT(0, perm_to(e, y, ops[0], out));
    }
    x[0] = sum_unused(e, x[0], ops[0], out, ops[1]);
    x[1] = sum_unused(e, x[1], ops[1], out, ops[0]);
    if (x[0] == NULL || x[1] == NULL) return OUT(0, NULL);
    char bt[9] = "", ak[9] = "", ct[9] = "", bk[9] = "";
    int nb = 0, na = 0, nc = 0, nk = 0;
    int64_t Bt = 1, M = 1, Kc = 1, Nn = 1, dimof[128] = {0};
    for (int i = 0; ops[0][i]; i++) {
        char c = ops[0][i];
        dimof[(int)c] = td_dims(x[0])[i];
        bool inb = strchr(ops[1], c) != NULL, ino = strchr(out, c) != NULL;
        if (inb && ino) bt[nb++] = c;
        else if (inb) ct[nc++] = c;
        else ak[na++] = c;
    }
    for (int i = 0; ops[1][i]; i++) {
        char c = ops[1][i];
        if (strchr(ops[0], c) != NULL) {
            if (dimof[(int)c] != td_dims(x[1])[i])
                return td__onnx_fail(e, TD_EINVAL, "letter '%c' is %lld and %lld", c,
                                     (long long)dimof[(int)c], (long long)td_dims(x[1])[i]);
        } else {
            bk[nk++] = c;
            dimof[(int)c] = td_dims(x[1])[i];
        }
    }
    for (int i = 0; i < nb; i++) Bt *= dimof[(int)bt[i]];
    for (int i = 0; i < na; i++) M *= dimof[(int)ak[i]];
    for (int i = 0; i < nc; i++) Kc *= dimof[(int)ct[i]];
    for (int i = 0; i < nk; i++) Nn *= dimof[(int)bk[i]];
    char la[32], lb[32], ly[32];
    snprintf(la, sizeof la, "%s%s%s", bt, ak, ct);
    snprintf(lb, sizeof lb, "%s%s%s", bt, ct, bk);
    snprintf(ly, sizeof ly, "%s%s%s", bt, ak, bk);
    td_tensor *a3 = reshape(e, perm_to(e, x[0], ops[0], la), 3, (int64_t[]){Bt, M, Kc});
    td_tensor *b3 = reshape(e, perm_to(e, x[1], ops[1], lb), 3, (int64_t[]){Bt, Kc, Nn});
    td_tensor *y = a3 && b3 ? K(td_matmul(a3, b3)) : NULL;
    int64_t d[TD_MAX_RANK];
    int ry = (int)strlen(ly);
    for (int i = 0; i < ry; i++) d[i] = dimof[(int)ly[i]];
    y = reshape(e, y, ry, d);
    return OUT(0, perm_to(e, y, ly, out));
}


/* ---- Unique: computed on the host (the output length depends on the data) ----
 * Slices along `axis` (elements, without an axis) are compared exactly; sorted = 1 orders
 * the unique ones ascending (lexicographically for slices), sorted = 0 by first occurrence.
 * NaN is refused (its equality is ambiguous here). */
static double host_elem(const td__onnx_host *h, size_t i)
{
    switch (h->desc.dtype) {
    case TD_F32: return ((const float *)h->data)[i];
    case TD_F64: return ((const double *)h->data)[i];
    case TD_I64: return (double)((const int64_t *)h->data)[i];
    case TD_I32: return ((const int32_t *)h->data)[i];
    case TD_I16: return ((const int16_t *)h->data)[i];
    case TD_I8: return ((const int8_t *)h->data)[i];
    default: return ((const uint8_t *)h->data)[i];
    }
}

static td_status h_unique(E *e, const N *n, const OP *op)
{
    const td__onnx_host *h = td__onnx_host_in(e, n, 0);
    if (h == NULL) return td__onnx_fail(e, TD_EUNSUPPORTED, "the input must be known on the host");
    if (h->desc.dtype == TD_F16 || h->desc.dtype == TD_BF16)
        return td__onnx_fail(e, TD_EUNSUPPORTED, "Unique of %s",
                             td_dtype_name((td_dtype)h->desc.dtype));
    for (size_t i = 0; h->desc.dtype == TD_I64 && i < h->nbytes / 8; i++) {
        int64_t v = ((const int64_t *)h->data)[i];
        if (v > (1ll << 53) || v < -(1ll << 53)) /* compared as doubles below */
            return td__onnx_fail(e, TD_EUNSUPPORTED, "Unique of int64 values beyond 2^53");
    }
    int r = (int)h->desc.rank, axis = -1;
    const Onnx__AttributeProto *aa = td__onnx_attr(n, "axis");
    if (aa != NULL && !axis_of(e, aa->i, r, &axis)) return TD_EINVAL;
    int64_t total = td__desc_nelem(&h->desc), D, inner = 1, outer = 1;
    if (axis < 0) {
        D = total;
    } else {
        D = h->desc.dims[axis];
        for (int i = 0; i < axis; i++) outer *= h->desc.dims[i];
        for (int i = axis + 1; i < r; i++) inner *= h->desc.dims[i];
    }
    int64_t S = D > 0 ? total / D : 0; /* elements per slice */
    size_t es = td_dtype_size((td_dtype)h->desc.dtype);
    for (int64_t i = 0; i < total; i++)
        if (host_elem(h, (size_t)i) != host_elem(h, (size_t)i))
            return td__onnx_fail(e, TD_EUNSUPPORTED, "Unique of data with NaN");
    /* element k of slice j */
#define UQ_AT(j, k) (axis < 0 ? (size_t)(j) : (size_t)((((k) / inner) * D + (j)) * inner + (k) % inner))
    int64_t *first = td__malloc((size_t)(D ? D : 1) * 3 * sizeof(int64_t));
    if (first == NULL) return td__onnx_fail(e, TD_ENOMEM, "out of memory");
    int64_t *inv = first + D, *cnt = inv + D, U = 0;
    for (int64_t j = 0; j < D; j++) {
        int64_t u = 0;
        for (; u < U; u++) {
            int64_t k = 0;
            while (k < S && host_elem(h, UQ_AT(j, k)) == host_elem(h, UQ_AT(first[u], k))) k++;
            if (k == S) break;
        }
        if (u == U) first[U] = j, cnt[U] = 0, U++;
        cnt[u]++;
        inv[j] = u;
    }
    int64_t *ord = td__malloc((size_t)(U ? U : 1) * 2 * sizeof(int64_t));
    if (ord == NULL) {
        td__free(first);
        return td__onnx_fail(e, TD_ENOMEM, "out of memory");
    }
    int64_t *rank_of = ord + U;
    for (int64_t u = 0; u < U; u++) ord[u] = u;
    if (td__onnx_attr_i(n, "sorted", 1) != 0)
        for (int64_t a = 1; a < U; a++) /* insertion sort, lexicographic on the slices */
            for (int64_t b = a; b > 0; b--) {
                int64_t k = 0, p = first[ord[b - 1]], q = first[ord[b]];
                while (k < S && host_elem(h, UQ_AT(p, k)) == host_elem(h, UQ_AT(q, k))) k++;
                if (k == S || host_elem(h, UQ_AT(p, k)) < host_elem(h, UQ_AT(q, k))) break;
                int64_t t = ord[b];
                ord[b] = ord[b - 1];
                ord[b - 1] = t;
            }
    for (int64_t u = 0; u < U; u++) rank_of[ord[u]] = u;
    td__onnx_host y = {.desc = h->desc};
    if (axis < 0) y.desc.rank = 1, y.desc.dims[0] = U;
    else y.desc.dims[axis] = U;
    y.nbytes = (size_t)(U * S) * es;
    td_status st = TD_OK;
    if (y.nbytes > 0 && (y.data = td__malloc(y.nbytes)) == NULL) st = TD_ENOMEM;
    for (int64_t u = 0; st == TD_OK && u < U; u++)
        for (int64_t k = 0; k < S; k++) {
            size_t dst = axis < 0 ? (size_t)u : (size_t)(((k / inner) * U + u) * inner + k % inner);
            memcpy((char *)y.data + dst * es, (const char *)h->data + UQ_AT(first[ord[u]], k) * es, es);
        }
#undef UQ_AT
    double *v = st == TD_OK ? td__malloc((size_t)(D > U ? D : U) * sizeof(double) + 8) : NULL;
    if (st == TD_OK && v == NULL) st = TD_ENOMEM;
    if (st == TD_OK) st = td__onnx_set_host_out(e, n, 0, &y);
    td__onnx_host_fini(&y);
    for (int out = 1; st == TD_OK && out < 4 && out < td__onnx_nout(n); out++) {
        int64_t len = out == 2 ? D : U;
        for (int64_t i = 0; i < len; i++)
            v[i] = out == 1 ? (double)first[ord[i]] : out == 2 ? (double)rank_of[inv[i]]
                                                             : (double)cnt[ord[i]];
        td__onnx_host o = {.desc = {.dtype = TD_I64, .rank = 1}};
        o.desc.dims[0] = len;
        o.nbytes = (size_t)len * 8;
        if (len > 0 && (o.data = td__malloc(o.nbytes)) == NULL) {
            st = TD_ENOMEM;
            break;
        }
        for (int64_t i = 0; i < len; i++) ((int64_t *)o.data)[i] = (int64_t)v[i];
        st = td__onnx_set_host_out(e, n, out, &o);
        td__onnx_host_fini(&o);
    }
    td__free(v);
    td__free(ord);
    td__free(first);
    return st == TD_ENOMEM ? td__onnx_fail(e, st, "out of memory") : st;
}

/* ---- the table ---- */

#define H TD_ONNX_HOST_OUT
static const td__onnx_op ops[] = {
    {"Neg", 6, 0, h_unary, td_neg, NULL, TD_OP_NEG, 0},
    {"Abs", 6, 0, h_unary, td_abs, NULL, TD_OP_ABS, 0},
    {"Exp", 6, 0, h_unary, td_exp, NULL, TD_OP_EXP, 0},
    {"Log", 6, 0, h_unary, td_log, NULL, TD_OP_LOG, 0},
    {"Sqrt", 6, 0, h_unary, td_sqrt, NULL, TD_OP_SQRT, 0},
    {"Tanh", 6, 0, h_unary, td_tanh, NULL, TD_OP_TANH, 0},
    {"Sigmoid", 6, 0, h_unary, td_sigmoid, NULL, TD_OP_SIGMOID, 0},
    {"Relu", 6, 0, h_unary, td_relu, NULL, TD_OP_RELU, 0},
    {"Sin", 7, 0, h_unary, td_sin, NULL, TD_OP_SIN, 0},
    {"Cos", 7, 0, h_unary, td_cos, NULL, TD_OP_COS, 0},
    {"Tan", 7, 0, h_unary, td_tan, NULL, TD_OP_TAN, 0},
    {"Asin", 7, 0, h_unary, td_asin, NULL, TD_OP_ASIN, 0},
    {"Acos", 7, 0, h_unary, td_acos, NULL, TD_OP_ACOS, 0},
    {"Atan", 7, 0, h_unary, td_atan, NULL, TD_OP_ATAN, 0},
    {"Sinh", 9, 0, h_unary, td_sinh, NULL, TD_OP_SINH, 0},
    {"Cosh", 9, 0, h_unary, td_cosh, NULL, TD_OP_COSH, 0},
    {"Asinh", 9, 0, h_unary, td_asinh, NULL, TD_OP_ASINH, 0},
    {"Acosh", 9, 0, h_unary, td_acosh, NULL, TD_OP_ACOSH, 0},
    {"Atanh", 9, 0, h_unary, td_atanh, NULL, TD_OP_ATANH, 0},
    {"Erf", 9, 0, h_unary, td_erf, NULL, TD_OP_ERF, 0},
    {"Floor", 6, 0, h_unary, td_floor, NULL, TD_OP_FLOOR, 0},
    {"Ceil", 6, 0, h_unary, td_ceil, NULL, TD_OP_CEIL, 0},
    {"Round", 11, 0, h_unary, td_round, NULL, TD_OP_ROUND, 0},
    {"Add", 7, 0, h_binary, NULL, td_add, TD_OP_ADD, 0},
    {"Sub", 7, 0, h_binary, NULL, td_sub, TD_OP_SUB, 0},
    {"Mul", 7, 0, h_binary, NULL, td_mul, TD_OP_MUL, 0},
    {"Div", 7, 0, h_binary, NULL, td_div, TD_OP_DIV, 0},
    {"Pow", 7, 0, h_pow, NULL, NULL, TD_OP_POW, 0},
    {"Equal", 7, 0, h_binary, NULL, td_eq, TD_OP_EQ, 0},
    {"Less", 7, 0, h_binary, NULL, td_lt, TD_OP_LT, 0},
    {"LessOrEqual", 12, 0, h_binary, NULL, td_le, TD_OP_LE, 0},
    {"Greater", 7, 0, h_binary, NULL, td_gt, TD_OP_GT, 0},
    {"GreaterOrEqual", 12, 0, h_binary, NULL, td_ge, TD_OP_GE, 0},
    {"Max", 8, 0, h_variadic, NULL, td_maximum, TD_OP_MAXIMUM, 0},
    {"Min", 8, 0, h_variadic, NULL, td_minimum, TD_OP_MINIMUM, 0},
    {"Sum", 8, 0, h_variadic, NULL, td_add, TD_OP_ADD, 0},
    {"Mean", 8, 0, h_variadic, NULL, td_add, TD_OP_DIV, 0},
    {"Where", 9, 0, h_where, NULL, NULL, NONE, 0},
    {"Cast", 6, 0, h_cast, NULL, NULL, NONE, 0},
    {"CastLike", 15, 0, h_castlike, NULL, NULL, NONE, 0},
    {"Identity", 1, 0, h_identity, NULL, NULL, NONE, 0},
    {"Dropout", 7, 0, h_dropout, NULL, NULL, NONE, 0x6u},
    {"LeakyRelu", 6, 0, h_leakyrelu, NULL, NULL, TD_OP_EXP, 0},
    {"PRelu", 7, 0, h_prelu, NULL, NULL, TD_OP_MUL, 0},
    {"Elu", 6, 0, h_elu, NULL, NULL, TD_OP_EXP, 0},
    {"Selu", 6, 0, h_selu, NULL, NULL, TD_OP_EXP, 0},
    {"Celu", 12, 0, h_celu, NULL, NULL, TD_OP_EXP, 0},
    {"HardSigmoid", 6, 0, h_hardsigmoid, NULL, NULL, TD_OP_EXP, 0},
    {"HardSwish", 14, 0, h_hardswish, NULL, NULL, TD_OP_EXP, 0},
    {"Softplus", 1, 0, h_softplus, NULL, NULL, TD_OP_EXP, 0},
    {"Softsign", 1, 0, h_softsign, NULL, NULL, TD_OP_EXP, 0},
    {"ThresholdedRelu", 10, 0, h_thresholdedrelu, NULL, NULL, TD_OP_MUL, 0},
    {"Reciprocal", 6, 0, h_reciprocal, NULL, NULL, TD_OP_EXP, 0},
    {"Sign", 9, 0, h_sign, NULL, NULL, TD_OP_SUB, 0},
    {"Not", 1, 0, h_not, NULL, NULL, NONE, 0},
    {"And", 7, 0, h_logic, NULL, NULL, NONE, 0},
    {"Or", 7, 0, h_logic, NULL, NULL, NONE, 0},
    {"Xor", 7, 0, h_logic, NULL, NULL, NONE, 0},
    {"IsNaN", 9, 0, h_isnan, NULL, NULL, TD_OP_EXP, 0},
    {"IsInf", 10, 0, h_isinf, NULL, NULL, TD_OP_EXP, 0},
    {"Clip", 6, 10, h_clip, NULL, NULL, TD_OP_MAXIMUM, 0},
    {"Clip", 11, 0, h_clip, NULL, NULL, TD_OP_MAXIMUM, 0},
    {"MatMul", 1, 0, h_matmul, NULL, NULL, TD_OP_MATMUL, 0},
    {"Gemm", 7, 0, h_gemm, NULL, NULL, TD_OP_MATMUL, 0},
    {"Reshape", 5, 0, h_reshape, NULL, NULL, NONE, 1u << 1},
    {"Flatten", 1, 0, h_flatten, NULL, NULL, NONE, 0},
    {"Transpose", 1, 0, h_transpose, NULL, NULL, NONE, 0},
    {"Squeeze", 1, 12, h_squeeze, NULL, NULL, NONE, 0},
    {"Squeeze", 13, 0, h_squeeze, NULL, NULL, NONE, 1u << 1},
    {"Unsqueeze", 1, 12, h_unsqueeze, NULL, NULL, NONE, 0},
    {"Unsqueeze", 13, 0, h_unsqueeze, NULL, NULL, NONE, 1u << 1},
    {"Concat", 4, 0, h_concat, NULL, NULL, NONE, 0},
    {"Slice", 1, 9, h_slice, NULL, NULL, NONE, 0},
    {"Slice", 10, 0, h_slice, NULL, NULL, NONE, 0x1eu},
    {"Split", 2, 12, h_split, NULL, NULL, NONE, 0},
    {"Split", 13, 0, h_split, NULL, NULL, NONE, 1u << 1},
    {"Expand", 8, 0, h_expand, NULL, NULL, NONE, 1u << 1},
    {"Tile", 6, 0, h_tile, NULL, NULL, NONE, 1u << 1},
    {"Pad", 2, 10, h_pad, NULL, NULL, NONE, 0},
    {"Pad", 11, 0, h_pad, NULL, NULL, NONE, 0xeu},
    {"DepthToSpace", 1, 0, h_depthtospace, NULL, NULL, NONE, 0},
    {"SpaceToDepth", 1, 0, h_depthtospace, NULL, NULL, NONE, 0},
    {"Gather", 1, 0, h_gather, NULL, NULL, NONE, 0},
    {"GatherElements", 11, 0, h_gather, NULL, NULL, NONE, 0},
    {"Shape", 1, 0, h_shape, NULL, NULL, NONE, H},
    {"Size", 1, 0, h_size, NULL, NULL, NONE, H},
    {"ConstantOfShape", 9, 0, h_constantofshape, NULL, NULL, NONE, 1u << 0},
    {"Range", 11, 0, h_range, NULL, NULL, NONE, 0x7u},
    {"ReduceSum", 1, 12, h_reduce, NULL, NULL, TD_OP_SUM, 0},
    {"ReduceSum", 13, 0, h_reduce, NULL, NULL, TD_OP_SUM, 1u << 1},
    {"ReduceMean", 1, 17, h_reduce, NULL, NULL, TD_OP_MEAN, 0},
    {"ReduceMax", 1, 17, h_reduce, NULL, NULL, TD_OP_MAX, 0},
    {"ReduceMin", 1, 17, h_reduce, NULL, NULL, TD_OP_MIN, 0},
    {"ReduceProd", 1, 17, h_reduce, NULL, NULL, TD_OP_PROD, 0},
    {"ReduceL1", 1, 17, h_reduce, NULL, NULL, TD_OP_SUM, 0},
    {"ReduceL2", 1, 17, h_reduce, NULL, NULL, TD_OP_SQRT, 0},
    {"ReduceSumSquare", 1, 17, h_reduce, NULL, NULL, TD_OP_SUM, 0},
    {"ReduceLogSum", 1, 17, h_reduce, NULL, NULL, TD_OP_LOG, 0},
    {"ReduceLogSumExp", 1, 17, h_reduce, NULL, NULL, TD_OP_EXP, 0},
    {"ArgMax", 1, 0, h_arg, NULL, NULL, TD_OP_ARGMAX, 0},
    {"ArgMin", 1, 0, h_arg, NULL, NULL, TD_OP_ARGMIN, 0},
    {"Softmax", 1, 12, h_softmax, NULL, NULL, TD_OP_SOFTMAX, 0},
    {"Softmax", 13, 0, h_softmax, NULL, NULL, TD_OP_SOFTMAX, 0},
    {"LogSoftmax", 1, 12, h_softmax, NULL, NULL, TD_OP_LOG_SOFTMAX, 0},
    {"LogSoftmax", 13, 0, h_softmax, NULL, NULL, TD_OP_LOG_SOFTMAX, 0},
    {"GlobalAveragePool", 1, 0, h_globalpool, NULL, NULL, TD_OP_MEAN, 0},
    {"GlobalMaxPool", 1, 0, h_globalpool, NULL, NULL, TD_OP_MAX, 0},
    {"BatchNormalization", 7, 13, h_batchnorm, NULL, NULL, TD_OP_SQRT, 0},
    {"BatchNormalization", 14, 0, h_batchnorm, NULL, NULL, TD_OP_SQRT, 0},
    {"InstanceNormalization", 6, 0, h_instancenorm, NULL, NULL, TD_OP_SQRT, 0},
    {"LayerNormalization", 17, 0, h_layernorm, NULL, NULL, TD_OP_RSQRT, 0},
    {"NegativeLogLikelihoodLoss", 12, 0, h_nll, NULL, NULL, TD_OP_NEG, 0},
    {"SoftmaxCrossEntropyLoss", 12, 0, h_sce, NULL, NULL, TD_OP_LOG_SOFTMAX, 0},
    {"Trilu", 14, 0, h_trilu, NULL, NULL, NONE, 1u << 1},
    {"Hardmax", 1, 12, h_hardmax, NULL, NULL, TD_OP_ARGMAX, 0},
    {"Hardmax", 13, 0, h_hardmax, NULL, NULL, TD_OP_ARGMAX, 0},
    {"CumSum", 11, 0, h_cumsum, NULL, NULL, TD_OP_MATMUL, 1u << 1},
    {"EyeLike", 9, 0, h_eyelike, NULL, NULL, NONE, 0},
    {"Shrink", 9, 0, h_shrink, NULL, NULL, TD_OP_SUB, 0},
    {"MaxPool", 1, 0, h_pool, NULL, NULL, TD_OP_MAXIMUM, 0},
    {"AveragePool", 1, 0, h_pool, NULL, NULL, TD_OP_DIV, 0},
    {"Conv", 1, 0, h_conv, NULL, NULL, TD_OP_CONV, 0},
    {"ConvTranspose", 1, 0, h_convtranspose, NULL, NULL, TD_OP_MATMUL, 0},
    {"Mod", 10, 0, h_mod, NULL, NULL, NONE, 0},
    {"TopK", 10, 0, h_topk, NULL, NULL, NONE, 1u << 1},
    {"ScatterElements", 11, 0, h_scatter_elements, NULL, NULL, NONE, 0},
    {"Scatter", 9, 10, h_scatter_elements, NULL, NULL, NONE, 0},
    {"OneHot", 9, 0, h_onehot, NULL, NULL, NONE, 1u << 1},
    {"Compress", 9, 0, h_compress, NULL, NULL, NONE, 1u << 1},
    {"GatherND", 11, 0, h_gathernd, NULL, NULL, NONE, 0},
    {"MeanVarianceNormalization", 9, 0, h_mvn, NULL, NULL, TD_OP_SQRT, 0},
    {"LRN", 1, 0, h_lrn, NULL, NULL, TD_OP_POW, 0},
    {"Resize", 11, 0, h_resize, NULL, NULL, NONE, 0xcu},
    {"Einsum", 12, 0, h_einsum, NULL, NULL, NONE, 0},
    {"Unique", 11, 0, h_unique, NULL, NULL, NONE, TD_ONNX_HOST_OUT | 1u},
    {"Upsample", 9, 9, h_resize, NULL, NULL, NONE, 0x2u},
};
#undef H

const td__onnx_op *td__onnx_op_find(const char *op_type, int64_t opset)
{
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (strcmp(ops[i].op_type, op_type) == 0 && opset >= ops[i].since &&
            (ops[i].until == 0 || opset <= ops[i].until))
            return &ops[i];
    return NULL;
}

bool td__onnx_op_known(const char *op_type)
{
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (strcmp(ops[i].op_type, op_type) == 0) return true;
    return false;
}

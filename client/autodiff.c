/* autodiff.c — reverse-mode automatic differentiation in libtensord (include/tensord.h,
 * "autodiff").
 *
 * How it works. A context gets a tape the first time td_requires_grad marks a tensor.
 * From then on every op recorded on the context (context.c's record()) is shown to
 * td__ad_recorded: if one of its inputs requires a gradient, the op is appended to the
 * tape with aliases of its inputs and output (RESHAPE to the same dims, which the engine
 * runs as an alias: no copy), so the values the gradient rules need stay alive even when
 * the program releases its handles, and the output is marked as requiring a gradient.
 * td_backward walks the tape backwards once. Each op's gradient rule is written with the
 * public op functions, so the backward pass is ordinary ops: batched, run where the
 * tensors live (remote or local, any device), captured in a graph when td_graph_begin is
 * active, lowered like any other op. Gradients of broadcasting ops are summed back to the
 * input's shape. Only float tensors have gradients; integer and bool values stop the flow
 * (comparisons, argmax, casts to integers).
 *
 * Memory: the tape holds an alias of every input and output of each op it records (the
 * buffers a forward pass produced stay alive until td_backward or td_tape_clear). During
 * td_backward an op's incoming gradient is released once its inputs' gradients are
 * formed, and the tape is freed at the end. What remains is each leaf's accumulated
 * gradient (td_grad), until td_zero_grad, td_release of the leaf, or td_close.
 *
 * Rules: the derivatives are the textbook ones (e.g. Griewank & Walther, "Evaluating
 * Derivatives", 2nd ed., SIAM 2008, for the reverse-mode scheme); where a function is
 * not differentiable the choice is PyTorch's (relu'(0) = 0, |x|'(0) = 0, ties of
 * max/maximum share the gradient equally, floor/ceil/round/trunc/sign have gradient 0).
 *
 * Thread-safety: the context's rule (one thread at a time per context).
 */
#include "client/capture.h"
#include "common/alloc.h"
#include "common/idmap.h"
#include "engine/op.h"
#include "engine/optable.h"
#include "tensord.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

typedef struct ad_node {
    td__op op;                                /* as recorded; inputs/output are ids */
    td_tensor *saved_in[TD_OP_MAX_INPUTS];    /* aliases of the inputs */
    td_tensor *saved_out;                     /* alias of the output */
    bool needs[TD_OP_MAX_INPUTS];             /* input i requires a gradient */
} ad_node;

typedef struct ad_leaf {
    td_tensor *grad; /* accumulated gradient (owned), NULL until a backward pass reached it */
} ad_leaf;

struct td__autodiff {
    ad_node *nodes;
    size_t n, cap;
    td__idmap req;    /* id -> (void *)1: produced by a taped op (requires a gradient) */
    td__idmap leaves; /* id -> ad_leaf*: marked by td_requires_grad */
    int no_grad;      /* td_no_grad_begin depth */
    bool internal;    /* recording the tape's own ops (aliases, rules): not taped */
    td_status broken; /* a failure while taping (out of memory): reported by td_backward */
    char why[512];
};

#define REQ_MARK ((void *)1)

/* td_to_device is no op of the table (the transport copies the tensor between devices), so
 * its tape nodes carry an opcode beyond every row's; its rule moves the gradient back. */
#define AD_TO_DEVICE UINT32_MAX

static const char *node_op_name(uint32_t opcode)
{
    return opcode == AD_TO_DEVICE ? "to_device" : td__op_name(opcode);
}

static bool is_float(uint32_t dt)
{
    return dt == TD_F32 || dt == TD_F64 || dt == TD_F16 || dt == TD_BF16;
}

static bool requires(const td__autodiff *ad, uint64_t id)
{
    return td__idmap_get(&ad->req, id) != NULL || td__idmap_get(&ad->leaves, id) != NULL;
}

/* Enter / leave a stretch of the library's own ops and releases, which the tape must not
 * record: internal_begin returns the previous state for internal_end (stretches nest). */
static bool internal_begin(td__autodiff *ad)
{
    bool was = ad->internal;
    ad->internal = true;
    return was;
}

static void internal_end(td__autodiff *ad, bool was) { ad->internal = was; }

/* td_release(t) without taping. */
static void release_internal(td__autodiff *ad, td_tensor *t)
{
    bool was = internal_begin(ad);
    td_release(t);
    internal_end(ad, was);
}

/* An alias of t (same buffer, new handle), made without taping. */
static td_tensor *alias(td__autodiff *ad, td_tensor *t)
{
    const td__desc *d = td__tensor_desc(t);
    bool was = internal_begin(ad);
    td_tensor *a = td_reshape(t, (int)d->rank, d->dims);
    internal_end(ad, was);
    return a;
}

static void node_free(ad_node *n)
{
    for (uint32_t i = 0; i < n->op.n_inputs; i++) td_release(n->saved_in[i]);
    td_release(n->saved_out);
    memset(n, 0, sizeof *n);
}

static void tape_clear(td__autodiff *ad)
{
    bool was = internal_begin(ad);
    for (size_t i = 0; i < ad->n; i++) node_free(&ad->nodes[i]);
    internal_end(ad, was);
    ad->n = 0;
    td__idmap_fini(&ad->req);
    td__idmap_init(&ad->req);
}

static td__autodiff *ad_get(td_context *ctx, bool create)
{
    td__autodiff **slot = td__ctx_autodiff(ctx);
    if (*slot == NULL && create) {
        td__autodiff *ad = td__calloc(1, sizeof *ad);
        if (ad == NULL) return NULL;
        td__idmap_init(&ad->req);
        td__idmap_init(&ad->leaves);
        *slot = ad;
    }
    return *slot;
}

void td__ad_free(td__autodiff *ad)
{
    if (ad == NULL) return;
    /* td_close frees every handle itself: only the bookkeeping goes here */
    size_t pos = 0;
    uint64_t id;
    void *v;
    while (td__idmap_next(&ad->leaves, &pos, &id, &v)) td__free(v);
    td__idmap_fini(&ad->leaves);
    td__idmap_fini(&ad->req);
    td__free(ad->nodes);
    td__free(ad);
}

void td__ad_recorded(td__autodiff *ad, const td__op *op, td_tensor *const *in, td_tensor *out)
{
    if (ad->internal || ad->no_grad > 0 || ad->broken != TD_OK) return;
    if (!is_float(td__tensor_desc(out)->dtype)) return; /* integer and bool results stop it */
    bool any = false;
    bool needs[TD_OP_MAX_INPUTS] = {false};
    for (uint32_t i = 0; i < op->n_inputs; i++) {
        needs[i] = is_float(td__tensor_desc(in[i])->dtype) && requires(ad, td__tensor_id(in[i]));
        any = any || needs[i];
    }
    if (!any) return;
    if (ad->n == ad->cap) {
        size_t ncap = ad->cap ? ad->cap * 2 : 64;
        ad_node *nn = td__realloc(ad->nodes, ncap * sizeof *nn);
        if (nn == NULL) goto oom;
        ad->nodes = nn;
        ad->cap = ncap;
    }
    ad_node *n = &ad->nodes[ad->n];
    memset(n, 0, sizeof *n);
    n->op = *op;
    for (uint32_t i = 0; i < op->n_inputs; i++) {
        n->needs[i] = needs[i];
        n->saved_in[i] = alias(ad, in[i]);
        if (n->saved_in[i] == NULL) goto oom_node;
    }
    n->saved_out = alias(ad, out);
    if (n->saved_out == NULL || !td__idmap_put(&ad->req, td__tensor_id(out), REQ_MARK))
        goto oom_node;
    ad->n++;
    return;
oom_node:
    node_free(n);
oom:
    ad->broken = TD_ENOMEM;
    snprintf(ad->why, sizeof ad->why, "out of memory recording op %s on the tape",
             node_op_name(op->opcode));
}

void td__ad_moved(td__autodiff *ad, td_tensor *in, td_tensor *out)
{
    td__op op = {.opcode = AD_TO_DEVICE, .n_inputs = 1, .inputs = {td__tensor_id(in)},
                 .output = td__tensor_id(out)};
    td__ad_recorded(ad, &op, &in, out);
}

void td__ad_forget(td__autodiff *ad, uint64_t id)
{
    ad_leaf *l = td__idmap_del(&ad->leaves, id);
    if (l != NULL) {
        release_internal(ad, l->grad);
        td__free(l);
    }
}

/* ---- public API: marking, scopes ---- */

td_status td_requires_grad(td_tensor *t, bool on)
{
    if (t == NULL) {
        td__ctx_set_error(NULL, TD_EINVAL, "td_requires_grad: t is NULL");
        return TD_EINVAL;
    }
    td_context *ctx = td__tensor_ctx(t);
    const td__desc *d = td__tensor_desc(t);
    if (on && !is_float(d->dtype)) {
        char msg[160];
        snprintf(msg, sizeof msg, "td_requires_grad: tensor %llu is %s; only float tensors "
                 "(f16, bf16, f32, f64) have gradients", (unsigned long long)td__tensor_id(t),
                 td_dtype_name((td_dtype)d->dtype));
        td__ctx_set_error(ctx, TD_EINVAL, msg);
        return TD_EINVAL;
    }
    td__autodiff *ad = ad_get(ctx, on);
    if (ad == NULL) {
        if (!on) return TD_OK;
        td__ctx_set_error(ctx, TD_ENOMEM, "td_requires_grad: out of memory");
        return TD_ENOMEM;
    }
    uint64_t id = td__tensor_id(t);
    if (!on) {
        td__ad_forget(ad, id);
        return TD_OK;
    }
    if (td__idmap_get(&ad->leaves, id) != NULL) return TD_OK;
    ad_leaf *l = td__calloc(1, sizeof *l);
    if (l == NULL || !td__idmap_put(&ad->leaves, id, l)) {
        td__free(l);
        td__ctx_set_error(ctx, TD_ENOMEM, "td_requires_grad: out of memory");
        return TD_ENOMEM;
    }
    return TD_OK;
}

bool td_is_requires_grad(const td_tensor *t)
{
    if (t == NULL) return false;
    td__autodiff *ad = *td__ctx_autodiff(td__tensor_ctx(t));
    return ad != NULL && requires(ad, td__tensor_id(t));
}

void td_no_grad_begin(td_context *ctx)
{
    td__autodiff *ad = ctx != NULL ? ad_get(ctx, true) : NULL;
    if (ad != NULL) ad->no_grad++;
}

void td_no_grad_end(td_context *ctx)
{
    td__autodiff *ad = ctx != NULL ? ad_get(ctx, false) : NULL;
    if (ad != NULL && ad->no_grad > 0) ad->no_grad--;
}

td_tensor *td_detach(td_tensor *t)
{
    if (t == NULL) {
        td__ctx_set_error(NULL, TD_EINVAL, "td_detach: x is NULL");
        return NULL;
    }
    td__autodiff *ad = *td__ctx_autodiff(td__tensor_ctx(t));
    if (ad == NULL) {
        const td__desc *d = td__tensor_desc(t);
        return td_reshape(t, (int)d->rank, d->dims);
    }
    return alias(ad, t);
}

td_tensor *td_grad(td_tensor *t)
{
    if (t == NULL) {
        td__ctx_set_error(NULL, TD_EINVAL, "td_grad: t is NULL");
        return NULL;
    }
    td_context *ctx = td__tensor_ctx(t);
    td__autodiff *ad = *td__ctx_autodiff(ctx);
    ad_leaf *l = ad != NULL ? td__idmap_get(&ad->leaves, td__tensor_id(t)) : NULL;
    if (l != NULL && l->grad != NULL) return l->grad;
    char msg[256];
    snprintf(msg, sizeof msg, "td_grad: tensor %llu has no gradient (%s)",
             (unsigned long long)td__tensor_id(t),
             l == NULL ? "it is not a leaf marked by td_requires_grad"
                       : "no td_backward reached it since td_zero_grad");
    td__ctx_set_error(ctx, TD_ENOTFOUND, msg);
    return NULL;
}

td_tensor *td__ad_grad_peek(const td_tensor *t)
{
    td__autodiff *ad = t != NULL ? *td__ctx_autodiff(td__tensor_ctx(t)) : NULL;
    ad_leaf *l = ad != NULL ? td__idmap_get(&ad->leaves, td__tensor_id(t)) : NULL;
    return l != NULL ? l->grad : NULL;
}

void td_zero_grad(td_tensor *t)
{
    if (t == NULL) return;
    td__autodiff *ad = *td__ctx_autodiff(td__tensor_ctx(t));
    ad_leaf *l = ad != NULL ? td__idmap_get(&ad->leaves, td__tensor_id(t)) : NULL;
    if (l == NULL) return;
    release_internal(ad, l->grad);
    l->grad = NULL;
}

void td_tape_clear(td_context *ctx)
{
    td__autodiff *ad = ctx != NULL ? ad_get(ctx, false) : NULL;
    if (ad == NULL) return;
    tape_clear(ad);
    ad->broken = TD_OK;
}

/* ---- gradient rules ---- */

typedef struct rule_ctx {
    td_context *ctx;
    const ad_node *n;
    td_tensor *g;                       /* the output's gradient */
    td_tensor *out[TD_OP_MAX_INPUTS];   /* the inputs' gradients (NULL: none) */
    td_tensor *tmp[128];                /* intermediates, released after the rule */
    int ntmp;
    bool failed;
} rule_ctx;

/* Keep t as an intermediate of the rule; NULL marks the rule failed. */
static td_tensor *T(rule_ctx *r, td_tensor *t)
{
    if (t == NULL) r->failed = true;
    else if (r->ntmp < (int)(sizeof r->tmp / sizeof r->tmp[0])) r->tmp[r->ntmp++] = t;
    else r->failed = true; /* a rule with more intermediates is a bug: say so */
    return t;
}

static td_tensor *X(const rule_ctx *r, int i) { return r->n->saved_in[i]; }
static td_tensor *Y(const rule_ctx *r) { return r->n->saved_out; }

/* t, made by an op without inputs (td_full, td_arange: on the session's first device), on
 * the device of `like` when that is another one (a copy, kept as an intermediate too). */
static td_tensor *near(rule_ctx *r, td_tensor *t, const td_tensor *like)
{
    if (t == NULL || td__ctx_tensor_device(t) == td__ctx_tensor_device(like)) return t;
    return T(r, td_to_device(t, td_tensor_device(like)));
}

static td_tensor *scalar(rule_ctx *r, td_tensor *like, double v)
{
    return near(r, T(r, td_full(r->ctx, td_tensor_dtype(like), 0, NULL, v)), like);
}

/* g (of the output's shape) reduced to the shape of input i: broadcast dims summed. */
static td_tensor *reduce_to(rule_ctx *r, td_tensor *g, const td__desc *want)
{
    if (g == NULL) return NULL;
    const td__desc *have = td__tensor_desc(g);
    if (have->rank == want->rank &&
        memcmp(have->dims, want->dims, sizeof(int64_t) * want->rank) == 0)
        return g;
    /* the same element count: a reshape's gradient (RESHAPE to another rank), no broadcast */
    if (td__desc_nelem(have) == td__desc_nelem(want) || have->rank < want->rank)
        return T(r, td_reshape(g, (int)want->rank, want->dims));
    int axes[TD_MAX_RANK], na = 0;
    const uint32_t lead = have->rank - want->rank;
    for (uint32_t d = 0; d < have->rank; d++)
        if (d < lead || (want->dims[d - lead] == 1 && have->dims[d] != 1)) axes[na++] = (int)d;
    td_tensor *s = na > 0 ? T(r, td_sum(g, na, axes, true)) : g;
    return T(r, td_reshape(s, (int)want->rank, want->dims));
}

/* Set input i's gradient to v (reduced to the input's shape), if it needs one. */
static void give(rule_ctx *r, int i, td_tensor *v)
{
    if (!r->n->needs[i] || v == NULL) {
        if (r->n->needs[i]) r->failed = true;
        return;
    }
    td_tensor *red = reduce_to(r, v, td__tensor_desc(X(r, i)));
    if (red == NULL) return;
    /* the caller owns out[i]: an alias keeps it beyond the intermediates' release */
    const td__desc *d = td__tensor_desc(red);
    r->out[i] = td_reshape(red, (int)d->rank, d->dims);
    if (r->out[i] == NULL) r->failed = true;
}

/* g broadcast back over a reduction's axes (the op's axes mask and keepdims). */
static td_tensor *unreduce(rule_ctx *r, td_tensor *v)
{
    const td__desc *x = td__tensor_desc(X(r, 0));
    uint64_t mask = (uint64_t)r->n->op.iattrs[0];
    int64_t keep[TD_MAX_RANK];
    for (uint32_t d = 0; d < x->rank; d++) keep[d] = (mask >> d) & 1 ? 1 : x->dims[d];
    td_tensor *k = T(r, td_reshape(v, (int)x->rank, keep));
    return k != NULL ? T(r, td_expand(k, (int)x->rank, x->dims)) : NULL;
}

static int64_t reduced_count(const rule_ctx *r)
{
    const td__desc *x = td__tensor_desc(X(r, 0));
    uint64_t mask = (uint64_t)r->n->op.iattrs[0];
    int64_t c = 1;
    for (uint32_t d = 0; d < x->rank; d++)
        if ((mask >> d) & 1) c *= x->dims[d];
    return c;
}

/* Swap the last two dims (matmul's transposes, batched). */
static td_tensor *swap_last2(rule_ctx *r, td_tensor *t)
{
    int rank = td_rank(t), perm[TD_MAX_RANK];
    for (int i = 0; i < rank; i++) perm[i] = i;
    perm[rank - 2] = rank - 1;
    perm[rank - 1] = rank - 2;
    return T(r, td_permute(t, perm));
}

/* g of a slice of x (starts at starts[0..rank), lengths g's dims) put back in zeros of
 * x's shape, one dim at a time (zeros before and after, concatenated). */
static td_tensor *surround(rule_ctx *r, td_tensor *g, const int64_t *starts)
{
    const td__desc *x = td__tensor_desc(X(r, 0));
    td_tensor *cur = g;
    for (uint32_t d = 0; d < x->rank && cur != NULL; d++) {
        const int64_t start = starts[d], len = td_dims(g)[d];
        if (start == 0 && len == x->dims[d]) continue;
        td_tensor *parts[3];
        int np = 0;
        int64_t dims[TD_MAX_RANK];
        memcpy(dims, td_dims(cur), sizeof(int64_t) * x->rank);
        if (start > 0) {
            dims[d] = start;
            parts[np++] =
                near(r, T(r, td_full(r->ctx, td_tensor_dtype(g), (int)x->rank, dims, 0)), g);
        }
        parts[np++] = cur;
        if (start + len < x->dims[d]) {
            dims[d] = x->dims[d] - start - len;
            parts[np++] =
                near(r, T(r, td_full(r->ctx, td_tensor_dtype(g), (int)x->rank, dims, 0)), g);
        }
        cur = np > 1 ? T(r, td_concat(np, parts, (int)d)) : cur;
    }
    return cur;
}

/* where(mask, v, 0) */
static td_tensor *masked(rule_ctx *r, td_tensor *mask, td_tensor *v)
{
    return mask != NULL && v != NULL ? T(r, td_where_scalar_b(mask, v, 0.0)) : NULL;
}

#define MUL(a, b) T(r, td_mul((a), (b)))
#define DIV(a, b) T(r, td_div((a), (b)))
#define ADD(a, b) T(r, td_add((a), (b)))
#define SUB(a, b) T(r, td_sub((a), (b)))
#define MULS(a, v) T(r, td_mul_scalar((a), (v)))
#define ADDS(a, v) T(r, td_add_scalar((a), (v)))

/* Whether the op has a gradient rule (those below). */
static bool has_rule(uint32_t opcode)
{
    switch (opcode) {
    case TD_OP_NEG: case TD_OP_ABS: case TD_OP_EXP: case TD_OP_LOG: case TD_OP_SQRT:
    case TD_OP_RSQRT: case TD_OP_TANH: case TD_OP_SIGMOID: case TD_OP_RELU: case TD_OP_SILU:
    case TD_OP_SIN: case TD_OP_COS: case TD_OP_TAN: case TD_OP_ERF: case TD_OP_LOG1P:
    case TD_OP_EXPM1: case TD_OP_LOG2: case TD_OP_LOG10: case TD_OP_RECIPROCAL:
    case TD_OP_SOFTPLUS: case TD_OP_LEAKY_RELU: case TD_OP_ELU: case TD_OP_GELU:
    case TD_OP_CLAMP: case TD_OP_FLOOR: case TD_OP_CEIL: case TD_OP_ROUND: case TD_OP_TRUNC:
    case TD_OP_SIGN:
    case TD_OP_ADD: case TD_OP_SUB: case TD_OP_MUL: case TD_OP_DIV: case TD_OP_POW:
    case TD_OP_MAXIMUM: case TD_OP_MINIMUM: case TD_OP_WHERE: case TD_OP_CAST:
    case TD_OP_SUM: case TD_OP_MEAN: case TD_OP_MAX: case TD_OP_MIN: case TD_OP_LOGSUMEXP:
    case TD_OP_VAR: case TD_OP_STD: case TD_OP_NORM_L1: case TD_OP_CUMSUM:
    case TD_OP_MATMUL:
    case TD_OP_RESHAPE: case TD_OP_PERMUTE: case TD_OP_SLICE: case TD_OP_CONCAT:
    case TD_OP_EXPAND: case TD_OP_COPY:
    case TD_OP_SOFTMAX: case TD_OP_LOG_SOFTMAX: case TD_OP_SCALED_DOT_PRODUCT_ATTENTION:
    case TD_OP_SLICE_STEP: case TD_OP_PAD:
    case TD_OP_FLIP: case TD_OP_ROLL: case TD_OP_REPEAT: case TD_OP_TRIL: case TD_OP_TRIU:
    case TD_OP_MASKED_FILL: case TD_OP_GATHER: case TD_OP_INDEX_SELECT:
    case TD_OP_SCATTER_ADD: case TD_OP_INDEX_ADD:
    case TD_OP_LAYER_NORM: case TD_OP_RMS_NORM: case TD_OP_GROUP_NORM: case TD_OP_DROPOUT:
    case TD_OP_BATCH_NORM:
    case TD_OP_CONV: case TD_OP_CONV_TRANSPOSE: case TD_OP_MAX_POOL: case TD_OP_AVG_POOL:
    case TD_OP_ADAPTIVE_AVG_POOL: case TD_OP_INTERPOLATE:
        return true;
    default:
        return false;
    }
}

/* The gradients of max/min and of maximum/minimum: the output's gradient shared equally
 * among the inputs equal to the result. */
static void rule_extreme_reduce(rule_ctx *r)
{
    td_tensor *yk = unreduce(r, Y(r));
    td_tensor *mask = T(r, td_eq(X(r, 0), yk));
    const td__desc *x = td__tensor_desc(X(r, 0));
    int axes[TD_MAX_RANK], na = 0;
    for (uint32_t d = 0; d < x->rank; d++)
        if (((uint64_t)r->n->op.iattrs[0] >> d) & 1) axes[na++] = (int)d;
    td_tensor *mf = T(r, td_cast(mask, td_tensor_dtype(X(r, 0))));
    td_tensor *count = na > 0 ? T(r, td_sum(mf, na, axes, true)) : mf;
    td_tensor *share = DIV(unreduce(r, r->g), count);
    give(r, 0, masked(r, mask, share));
}


/* ---- the window ops (conv, pooling): attributes back into the public parameter structs ---- */

static int window_nsp(const rule_ctx *r) { return (int)td__tensor_desc(X(r, 0))->rank - 2; }

/* CONV / CONV_TRANSPOSE iattrs {groups, stride[s], dilation[s], pad_lo[s], pad_hi[s]} (pad_hi
 * as recorded: a transposed convolution's already less its output padding). */
static td_conv_params conv_params_of(const td__op *op, int nsp)
{
    td_conv_params p = {.groups = op->iattrs[0]};
    for (int i = 0; i < nsp; i++) {
        p.stride[i] = op->iattrs[1 + i];
        p.dilation[i] = op->iattrs[1 + nsp + i];
        p.pad_lo[i] = op->iattrs[1 + 2 * nsp + i];
        p.pad_hi[i] = op->iattrs[1 + 3 * nsp + i];
    }
    return p;
}

/* MAX_POOL {ceil, kernel[s], stride[s], dilation[s], padding[s]}; AVG_POOL {ceil,
 * count_include_pad, kernel[s], stride[s], padding[s]}. */
static td_pool_params pool_params_of(const td__op *op, int nsp)
{
    td_pool_params p = {.ceil_mode = op->iattrs[0] != 0};
    const bool avg = op->opcode == TD_OP_AVG_POOL;
    const int ns = avg ? 2 : 1;
    if (avg) p.exclude_pad = op->iattrs[1] == 0;
    for (int i = 0; i < nsp; i++) {
        p.kernel[i] = op->iattrs[ns + i];
        p.stride[i] = op->iattrs[ns + nsp + i];
        if (avg) {
            p.padding[i] = op->iattrs[ns + 2 * nsp + i];
        } else {
            p.dilation[i] = op->iattrs[ns + 2 * nsp + i];
            p.padding[i] = op->iattrs[ns + 3 * nsp + i];
        }
    }
    return p;
}

/* The sum of g over every axis but 1 (a per-channel bias's gradient), shape [C]. */
static td_tensor *sum_but_channels(rule_ctx *r, td_tensor *g)
{
    int axes[TD_MAX_RANK], na = 0;
    for (int d = 0; d < td_rank(g); d++)
        if (d != 1) axes[na++] = d;
    return T(r, td_sum(g, na, axes, false));
}

/* A [C] tensor as [1, C, 1, ...] of rank `rank`, to broadcast over [N, C, ...]. */
static td_tensor *per_channel(rule_ctx *r, td_tensor *v, int rank)
{
    int64_t dims[TD_MAX_RANK];
    for (int d = 0; d < rank; d++) dims[d] = 1;
    dims[1] = td_dims(v)[0];
    return T(r, td_reshape(v, rank, dims));
}

/* The transposed convolution y = conv_transpose(x, w) is the adjoint of conv(., w) with the
 * same attributes; its recorded pad_hi may be negative (output padding beyond pad_hi): the
 * adjoint convolution then reads g only up to O + pad_hi, so g is sliced there and the
 * padding set to 0 (the rows beyond are never read by any window). */
static td_tensor *trim_negative_pad(rule_ctx *r, td_tensor *g, td_conv_params *p, int nsp)
{
    int64_t starts[TD_MAX_RANK] = {0}, stops[TD_MAX_RANK];
    bool any = false;
    memcpy(stops, td_dims(g), sizeof(int64_t) * (size_t)td_rank(g));
    for (int i = 0; i < nsp; i++) {
        if (p->pad_hi[i] >= 0) continue;
        stops[2 + i] += p->pad_hi[i];
        p->pad_hi[i] = 0;
        any = true;
    }
    return any ? T(r, td_slice(g, starts, stops)) : g;
}


/* The gradient of td_interpolate, one spatial dim at a time (the op is separable): the
 * source positions of dim d come from the op itself, run on arange(L) as a [1, 1, L] input
 * (in f32, f64 for f64, so the positions are exact integers or the op's own interpolated
 * coordinates), so no formula is restated here. Nearest: g is index_add-ed at those
 * positions. Linear: s = the interpolated coordinate, i0 = floor(s), f = s - i0; g (1 - f)
 * goes to i0 and g f to min(i0 + 1, L - 1) (the op's weights up to the rounding of s). */
static td_tensor *interpolate_grad(rule_ctx *r, td_tensor *g)
{
    const td__op *op = &r->n->op;
    const td__desc *x = td__tensor_desc(X(r, 0));
    const int nsp = (int)x->rank - 2;
    const enum td_interp_mode mode = (enum td_interp_mode)op->iattrs[0];
    const bool align = op->iattrs[1] != 0;
    const td_dtype gd = td_tensor_dtype(g), cd = gd == TD_F64 ? TD_F64 : TD_F32;
    td_tensor *cur = g;
    for (int d = 0; d < nsp && cur != NULL; d++) {
        const int axis = 2 + d;
        const int64_t L = x->dims[axis], O = op->iattrs[2 + d];
        if (L == O) continue; /* the identity in both modes */
        td_tensor *a = near(r, T(r, td_arange(r->ctx, cd, L, 0, 1)), g);
        td_tensor *a3 = T(r, td_reshape(a, 3, (int64_t[]){1, 1, L}));
        td_tensor *s3 = T(r, td_interpolate(a3, &O, mode, align));
        td_tensor *s = T(r, td_reshape(s3, 1, &O));
        int64_t zd[TD_MAX_RANK], bd[TD_MAX_RANK];
        memcpy(zd, td_dims(cur), sizeof(int64_t) * x->rank);
        zd[axis] = L;
        for (uint32_t k = 0; k < x->rank; k++) bd[k] = 1;
        bd[axis] = O;
        td_tensor *z = near(r, T(r, td_full(r->ctx, gd, (int)x->rank, zd, 0)), g);
        if (mode == TD_INTERP_NEAREST) {
            cur = T(r, td_index_add(z, axis, T(r, td_cast(s, TD_I64)), cur));
            continue;
        }
        td_tensor *i0f = T(r, td_floor(s));
        td_tensor *f = SUB(s, i0f);
        td_tensor *i0 = T(r, td_cast(i0f, TD_I64));
        td_tensor *i1 = T(r, td_cast(T(r, td_clamp(ADDS(i0f, 1.0), 0, (double)(L - 1))), TD_I64));
        td_tensor *fb = T(r, td_reshape(gd == cd ? f : T(r, td_cast(f, gd)), (int)x->rank, bd));
        td_tensor *w0 = ADDS(MULS(fb, -1.0), 1.0);
        td_tensor *z1 = T(r, td_index_add(z, axis, i0, MUL(cur, w0)));
        cur = T(r, td_index_add(z1, axis, i1, MUL(cur, fb)));
    }
    return cur;
}

/* SCALED_DOT_PRODUCT_ATTENTION: the weights p = softmax(s) are recomputed from q, k and the
 * mask as the op's lowering computes them (s = q k^T scale, -inf where causal or a bool mask
 * hides a key, + a float mask); then with g = dy: dv = p^T g, dp = g v^T,
 * ds = p (dp - sum(dp p, last)), set to 0 where the causal rule or a bool mask hides the
 * key (as PyTorch's masked_fill passes no gradient there: a query that sees no key gets
 * dq = 0 and adds nothing to dk, though its output is NaN), dmask = ds (a float mask),
 * dq = ds k scale, dk = ds^T q scale. Batch dims that broadcast are summed back by give(). */
static void rule_attention(rule_ctx *r)
{
    const td__op *op = &r->n->op;
    td_tensor *q = X(r, 0), *k = X(r, 1), *v = X(r, 2), *g = r->g;
    td_tensor *mask = op->n_inputs > 3 ? X(r, 3) : NULL;
    const double scale = op->fattrs[0];
    td_tensor *visible = NULL;
    td_tensor *p = T(r, td__attention_weights(q, k, mask, op->iattrs[0] != 0, scale, &visible));
    if (visible != NULL) T(r, visible);
    if (r->n->needs[2]) give(r, 2, T(r, td_matmul(swap_last2(r, p), g)));
    const bool fmask = mask != NULL && td_tensor_dtype(mask) != TD_BOOL && r->n->needs[3];
    if (!r->n->needs[0] && !r->n->needs[1] && !fmask) return;
    td_tensor *dp = T(r, td_matmul(g, swap_last2(r, v)));
    int last = -1;
    td_tensor *ds = MUL(p, SUB(dp, T(r, td_sum(MUL(dp, p), 1, &last, true))));
    if (visible != NULL) /* keys hidden from a query take no gradient (masked_fill's rule) */
        ds = T(r, td_where_scalar_b(visible, ds, 0.0));
    if (fmask) give(r, 3, ds);
    td_tensor *dss = MULS(ds, scale);
    if (r->n->needs[0]) give(r, 0, T(r, td_matmul(dss, k)));
    if (r->n->needs[1]) give(r, 1, T(r, td_matmul(swap_last2(r, dss), q)));
}

static void rule_window(rule_ctx *r)
{
    const td__op *op = &r->n->op;
    td_tensor *g = r->g;
    const int nsp = window_nsp(r);
    const int64_t *xs = td__tensor_desc(X(r, 0))->dims + 2; /* x's spatial sizes */
    switch (op->opcode) {
    case TD_OP_CONV: { /* dx: the adjoint (a transposed conv); dw: the weight gradient op */
        td_conv_params p = conv_params_of(op, nsp);
        if (r->n->needs[0]) give(r, 0, T(r, td_conv_input_grad(g, X(r, 1), xs, &p)));
        if (r->n->needs[1])
            give(r, 1, T(r, td_conv_weight_grad(X(r, 0), g, td__tensor_desc(X(r, 1))->dims + 2,
                                                &p)));
        if (op->n_inputs > 2 && r->n->needs[2]) give(r, 2, sum_but_channels(r, g));
        break;
    }
    case TD_OP_CONV_TRANSPOSE: { /* dx = conv(g, w); dw = weight grad with the roles swapped */
        td_conv_params p = conv_params_of(op, nsp);
        td_tensor *gt = trim_negative_pad(r, g, &p, nsp);
        if (r->n->needs[0]) give(r, 0, T(r, td_conv(gt, X(r, 1), NULL, &p)));
        if (r->n->needs[1])
            give(r, 1, T(r, td_conv_weight_grad(gt, X(r, 0), td__tensor_desc(X(r, 1))->dims + 2,
                                                &p)));
        if (op->n_inputs > 2 && r->n->needs[2]) give(r, 2, sum_but_channels(r, g));
        break;
    }
    case TD_OP_MAX_POOL: { /* the maxima's positions again (MAX_POOL_INDICES), then scatter */
        td_pool_params p = pool_params_of(op, nsp);
        td_tensor *ix = NULL;
        td_tensor *v = T(r, td_max_pool(X(r, 0), &p, &ix));
        T(r, ix);
        if (v != NULL && ix != NULL) give(r, 0, T(r, td_max_pool_backward(g, ix, xs, &p)));
        break;
    }
    case TD_OP_AVG_POOL: {
        td_pool_params p = pool_params_of(op, nsp);
        give(r, 0, T(r, td_avg_pool_backward(g, xs, &p)));
        break;
    }
    case TD_OP_ADAPTIVE_AVG_POOL: give(r, 0, T(r, td_adaptive_avg_pool_backward(g, xs))); break;
    case TD_OP_INTERPOLATE: give(r, 0, interpolate_grad(r, g)); break;
    default: r->failed = true; break;
    }
}

/* Batch norm y = (x - mean) r w + b, r = 1 / sqrt(var + eps), per channel c = axis 1, with
 * the gradient of every input (mean and var included): with training statistics (mean and
 * var computed from x by td_batch_norm_stats, i.e. MEAN and VAR ops on the tape) their
 * rules carry dmean and dvar on into x, which sums to Ioffe & Szegedy's dx
 * (r (g w - mean(g w) - xhat mean(g w xhat))); with fixed running statistics (not taped)
 * only dx = g w r remains.
 *   dx = g w r   dmean = -w r sum(g)   dvar = -1/2 w r^3 sum(g (x - mean))
 *   dw = sum(g (x - mean) r)   db = sum(g)   (sums over every axis but 1) */
static void rule_batch_norm(rule_ctx *r)
{
    const td__op *op = &r->n->op;
    td_tensor *g = r->g, *x = X(r, 0);
    const int rank = td_rank(x);
    td_tensor *mean = per_channel(r, X(r, 1), rank);
    td_tensor *rr = T(r, td_rsqrt(ADDS(X(r, 2), op->fattrs[0]))); /* [C] */
    td_tensor *wr = op->n_inputs > 3 ? MUL(X(r, 3), rr) : rr;     /* w r, [C] */
    td_tensor *dev = mean != NULL ? SUB(x, mean) : NULL;
    if (r->n->needs[0]) give(r, 0, MUL(g, per_channel(r, wr, rank)));
    td_tensor *sg = (r->n->needs[1] || (op->n_inputs > 4 && r->n->needs[4]))
                        ? sum_but_channels(r, g) : NULL;
    if (r->n->needs[1]) give(r, 1, MULS(MUL(sg, wr), -1.0));
    td_tensor *sgd = (r->n->needs[2] || (op->n_inputs > 3 && r->n->needs[3]))
                         ? sum_but_channels(r, MUL(g, dev)) : NULL;
    if (r->n->needs[2]) give(r, 2, MULS(MUL(sgd, MUL(wr, MUL(rr, rr))), -0.5));
    if (op->n_inputs > 3 && r->n->needs[3]) give(r, 3, MUL(sgd, rr));
    if (op->n_inputs > 4 && r->n->needs[4]) give(r, 4, sg);
}

static void rule(rule_ctx *r)
{
    const td__op *op = &r->n->op;
    td_tensor *g = r->g;
    switch (op->opcode) {
    case AD_TO_DEVICE: give(r, 0, T(r, td_to_device(g, td_tensor_device(X(r, 0))))); break;
    case TD_OP_NEG: give(r, 0, T(r, td_neg(g))); break;
    case TD_OP_ABS: give(r, 0, MUL(g, T(r, td_sign(X(r, 0))))); break;
    case TD_OP_EXP: give(r, 0, MUL(g, Y(r))); break;
    case TD_OP_LOG: give(r, 0, DIV(g, X(r, 0))); break;
    case TD_OP_SQRT: give(r, 0, DIV(g, MULS(Y(r), 2.0))); break;
    case TD_OP_RSQRT: /* d/dx x^-1/2 = -1/2 y^3 */
        give(r, 0, MUL(g, MULS(MUL(Y(r), MUL(Y(r), Y(r))), -0.5)));
        break;
    case TD_OP_TANH: give(r, 0, MUL(g, T(r, td_add_scalar(MULS(MUL(Y(r), Y(r)), -1.0), 1.0)))); break;
    case TD_OP_SIGMOID: give(r, 0, MUL(g, MUL(Y(r), ADDS(MULS(Y(r), -1.0), 1.0)))); break;
    case TD_OP_RELU: give(r, 0, masked(r, T(r, td_gt(X(r, 0), scalar(r, X(r, 0), 0))), g)); break;
    case TD_OP_SILU: { /* s (1 + x (1 - s)) */
        td_tensor *s = T(r, td_sigmoid(X(r, 0)));
        td_tensor *d = MUL(s, ADDS(MUL(X(r, 0), ADDS(MULS(s, -1.0), 1.0)), 1.0));
        give(r, 0, MUL(g, d));
        break;
    }
    case TD_OP_SIN: give(r, 0, MUL(g, T(r, td_cos(X(r, 0))))); break;
    case TD_OP_COS: give(r, 0, MUL(g, MULS(T(r, td_sin(X(r, 0))), -1.0))); break;
    case TD_OP_TAN: give(r, 0, MUL(g, ADDS(MUL(Y(r), Y(r)), 1.0))); break;
    case TD_OP_ERF: /* 2/sqrt(pi) e^(-x^2) */
        give(r, 0, MUL(g, MULS(T(r, td_exp(MULS(MUL(X(r, 0), X(r, 0)), -1.0))),
                               1.1283791670955126)));
        break;
    case TD_OP_LOG1P: give(r, 0, DIV(g, ADDS(X(r, 0), 1.0))); break;
    case TD_OP_EXPM1: give(r, 0, MUL(g, ADDS(Y(r), 1.0))); break;
    case TD_OP_LOG2: give(r, 0, DIV(g, MULS(X(r, 0), 0.69314718055994531))); break;
    case TD_OP_LOG10: give(r, 0, DIV(g, MULS(X(r, 0), 2.3025850929940457))); break;
    case TD_OP_RECIPROCAL: give(r, 0, MUL(g, MULS(MUL(Y(r), Y(r)), -1.0))); break;
    case TD_OP_SOFTPLUS: { /* sigmoid(beta x) below the threshold, 1 above (PyTorch's) */
        const double beta = op->fattrs[0], thr = op->fattrs[1];
        td_tensor *bx = MULS(X(r, 0), beta);
        td_tensor *above = T(r, td_gt(bx, scalar(r, X(r, 0), thr)));
        td_tensor *d = T(r, td_where_scalar_a(above, 1.0, T(r, td_sigmoid(bx))));
        give(r, 0, MUL(g, d));
        break;
    }
    case TD_OP_LEAKY_RELU: {
        td_tensor *pos = T(r, td_gt(X(r, 0), scalar(r, X(r, 0), 0)));
        give(r, 0, T(r, td_where(pos, g, MULS(g, op->fattrs[0]))));
        break;
    }
    case TD_OP_ELU: { /* x > 0: 1; else alpha e^x = y + alpha */
        td_tensor *pos = T(r, td_gt(X(r, 0), scalar(r, X(r, 0), 0)));
        give(r, 0, T(r, td_where(pos, g, MUL(g, ADDS(Y(r), op->fattrs[0])))));
        break;
    }
    case TD_OP_GELU: { /* exact form: Phi(x) + x phi(x) */
        if (op->n_iattrs > 0 && op->iattrs[0] != 0) {
            r->failed = true; /* the tanh approximation: refused up front (has_rule_op) */
            break;
        }
        td_tensor *x = X(r, 0);
        td_tensor *cdf = MULS(ADDS(T(r, td_erf(MULS(x, 0.70710678118654752))), 1.0), 0.5);
        td_tensor *pdf = MULS(T(r, td_exp(MULS(MUL(x, x), -0.5))), 0.39894228040143268);
        give(r, 0, MUL(g, ADD(cdf, MUL(x, pdf))));
        break;
    }
    case TD_OP_CLAMP: { /* 1 inside [lo, hi], 0 outside (PyTorch: the bounds count inside) */
        td_tensor *x = X(r, 0);
        td_tensor *in = T(r, td_logical_and(T(r, td_ge(x, scalar(r, x, op->fattrs[0]))),
                                            T(r, td_le(x, scalar(r, x, op->fattrs[1])))));
        give(r, 0, masked(r, in, g));
        break;
    }
    case TD_OP_FLOOR: case TD_OP_CEIL: case TD_OP_ROUND: case TD_OP_TRUNC: case TD_OP_SIGN:
        give(r, 0, MULS(g, 0.0));
        break;
    case TD_OP_ADD: give(r, 0, g); give(r, 1, g); break;
    case TD_OP_SUB: give(r, 0, g); give(r, 1, T(r, td_neg(g))); break;
    case TD_OP_MUL: give(r, 0, MUL(g, X(r, 1))); give(r, 1, MUL(g, X(r, 0))); break;
    case TD_OP_DIV:
        give(r, 0, DIV(g, X(r, 1)));
        if (r->n->needs[1]) give(r, 1, T(r, td_neg(DIV(MUL(g, Y(r)), X(r, 1)))));
        break;
    case TD_OP_POW: /* d/da = b a^(b-1) = b y / a; d/db = y ln a */
        if (r->n->needs[0])
            give(r, 0, MUL(g, MUL(X(r, 1), T(r, td_pow(X(r, 0), ADDS(X(r, 1), -1.0))))));
        if (r->n->needs[1]) give(r, 1, MUL(g, MUL(Y(r), T(r, td_log(X(r, 0))))));
        break;
    case TD_OP_MAXIMUM:
    case TD_OP_MINIMUM: { /* ties: half each (PyTorch) */
        bool mx = op->opcode == TD_OP_MAXIMUM;
        td_tensor *a = X(r, 0), *b = X(r, 1);
        td_tensor *half = MULS(g, 0.5);
        td_tensor *eq = T(r, td_eq(a, b));
        td_tensor *wa = T(r, mx ? td_gt(a, b) : td_lt(a, b));
        td_tensor *wb = T(r, mx ? td_lt(a, b) : td_gt(a, b));
        give(r, 0, T(r, td_where(wa, g, masked(r, eq, half))));
        give(r, 1, T(r, td_where(wb, g, masked(r, eq, half))));
        break;
    }
    case TD_OP_WHERE:
        give(r, 1, masked(r, X(r, 0), g));
        give(r, 2, T(r, td_where_scalar_a(X(r, 0), 0.0, g)));
        break;
    case TD_OP_CAST: give(r, 0, T(r, td_cast(g, td_tensor_dtype(X(r, 0))))); break;
    case TD_OP_SUM: give(r, 0, unreduce(r, g)); break;
    case TD_OP_MEAN: give(r, 0, MULS(unreduce(r, g), 1.0 / (double)reduced_count(r))); break;
    case TD_OP_MAX:
    case TD_OP_MIN: rule_extreme_reduce(r); break;
    case TD_OP_LOGSUMEXP: /* softmax of x over the axes */
        give(r, 0, MUL(unreduce(r, g), T(r, td_exp(SUB(X(r, 0), unreduce(r, Y(r)))))));
        break;
    case TD_OP_VAR:
    case TD_OP_STD: { /* var: 2 (x - mean) / (n - c); std: that / (2 std) */
        const int64_t n = reduced_count(r);
        const double dof = (double)n - op->fattrs[0];
        const td__desc *x = td__tensor_desc(X(r, 0));
        int axes[TD_MAX_RANK], na = 0;
        for (uint32_t d = 0; d < x->rank; d++)
            if (((uint64_t)op->iattrs[0] >> d) & 1) axes[na++] = (int)d;
        td_tensor *mean = T(r, td_mean(X(r, 0), na, axes, true));
        td_tensor *dev = SUB(X(r, 0), mean);
        td_tensor *gx = MULS(MUL(unreduce(r, g), dev), (op->opcode == TD_OP_VAR ? 2.0 : 1.0) / dof);
        if (op->opcode == TD_OP_STD) gx = DIV(gx, unreduce(r, Y(r)));
        give(r, 0, gx);
        break;
    }
    case TD_OP_NORM_L1: give(r, 0, MUL(unreduce(r, g), T(r, td_sign(X(r, 0))))); break;
    case TD_OP_CUMSUM: { /* reversed cumsum: sum_{j >= i} g_j = total - cumsum(g)_i + g_i */
        int axis = (int)op->iattrs[0];
        if (td_rank(g) == 0) {
            give(r, 0, g);
            break;
        }
        td_tensor *total = T(r, td_sum(g, 1, &axis, true));
        give(r, 0, ADD(SUB(total, T(r, td_cumsum(g, axis))), g));
        break;
    }
    case TD_OP_MATMUL: /* dA = dC B^T, dB = A^T dC (batch dims summed back by give) */
        if (r->n->needs[0]) give(r, 0, T(r, td_matmul(g, swap_last2(r, X(r, 1)))));
        if (r->n->needs[1]) give(r, 1, T(r, td_matmul(swap_last2(r, X(r, 0)), g)));
        break;
    case TD_OP_RESHAPE:
    case TD_OP_EXPAND:
    case TD_OP_COPY: give(r, 0, g); break; /* give() reshapes/sums to the input's shape */
    case TD_OP_PERMUTE: {
        int inv[TD_MAX_RANK];
        for (uint32_t i = 0; i < op->n_iattrs; i++) inv[op->iattrs[i]] = (int)i;
        give(r, 0, T(r, td_permute(g, inv)));
        break;
    }
    case TD_OP_SLICE: give(r, 0, surround(r, g, op->iattrs)); break;
    case TD_OP_SLICE_STEP: /* steps of 1 (what td_split records): a slice */
        give(r, 0, surround(r, g, op->iattrs));
        break;
    case TD_OP_FLIP: {
        const td__desc *x = td__tensor_desc(X(r, 0));
        int axes[TD_MAX_RANK], na = 0;
        for (uint32_t d = 0; d < x->rank; d++)
            if (((uint64_t)op->iattrs[0] >> d) & 1) axes[na++] = (int)d;
        give(r, 0, T(r, td_flip(g, na, axes)));
        break;
    }
    case TD_OP_ROLL: { /* roll back */
        int axes[TD_MAX_RANK];
        int64_t back[TD_MAX_RANK];
        for (uint32_t d = 0; d < op->n_iattrs; d++) {
            const int64_t dim = td__tensor_desc(X(r, 0))->dims[d];
            axes[d] = (int)d;
            back[d] = dim > 0 ? -(op->iattrs[d] % dim) : 0;
        }
        give(r, 0, T(r, td_roll(g, (int)op->n_iattrs, back, axes)));
        break;
    }
    case TD_OP_PAD: { /* constant padding: the inner block of g */
        const td__desc *x = td__tensor_desc(X(r, 0));
        int64_t starts[TD_MAX_RANK], stops[TD_MAX_RANK];
        for (uint32_t d = 0; d < x->rank; d++) {
            starts[d] = op->iattrs[1 + d];
            stops[d] = starts[d] + x->dims[d];
        }
        give(r, 0, T(r, td_slice(g, starts, stops)));
        break;
    }
    case TD_OP_REPEAT: { /* per dim: g as [.., r, d, ..], summed over r */
        const td__desc *x = td__tensor_desc(X(r, 0));
        td_tensor *cur = g;
        for (uint32_t d = 0; d < x->rank && cur != NULL; d++) {
            if (op->iattrs[d] == 1) continue;
            const td__desc *c = td__tensor_desc(cur);
            int64_t dims[TD_MAX_RANK + 1];
            int k = 0;
            for (uint32_t e = 0; e < c->rank; e++) {
                if (e == d) {
                    dims[k++] = op->iattrs[d];
                    dims[k++] = x->dims[d];
                } else {
                    dims[k++] = c->dims[e];
                }
            }
            if (k > TD_MAX_RANK) {
                r->failed = true;
                break;
            }
            td_tensor *v = T(r, td_reshape(cur, k, dims));
            int ax = (int)d;
            cur = v != NULL ? T(r, td_sum(v, 1, &ax, false)) : NULL;
        }
        give(r, 0, cur);
        break;
    }
    case TD_OP_TRIL: give(r, 0, T(r, td_tril(g, op->iattrs[0]))); break;
    case TD_OP_TRIU: give(r, 0, T(r, td_triu(g, op->iattrs[0]))); break;
    case TD_OP_MASKED_FILL: give(r, 0, T(r, td_masked_fill(g, X(r, 1), 0.0))); break;
    case TD_OP_GATHER: {
        const td__desc *x = td__tensor_desc(X(r, 0));
        const td__desc *ix = td__tensor_desc(X(r, 1));
        const int axis = (int)op->iattrs[0];
        /* One index per line (a loss picking each row's label, take_along_dim with size 1):
         * dx = where(arange(x.dims[axis]) == index, g, 0), the index and g broadcast along
         * the axis. Elementwise ops only, so it runs on every backend (a backend without
         * SCATTER_ADD too), costs numel(x) like the zeros below, and each element is g's or
         * 0 exactly. Otherwise scatter_add of g into zeros of x's shape. */
        bool one = ix->dims[axis] == 1;
        for (uint32_t d = 0; d < x->rank && one; d++)
            if ((int)d != axis && ix->dims[d] != x->dims[d]) one = false;
        if (one) {
            int64_t adims[TD_MAX_RANK];
            for (uint32_t d = 0; d < x->rank; d++) adims[d] = (int)d == axis ? x->dims[d] : 1;
            td_tensor *a =
                near(r, T(r, td_arange(r->ctx, ix->dtype, x->dims[axis], 0, 1)), X(r, 1));
            td_tensor *ar = a != NULL ? T(r, td_reshape(a, (int)x->rank, adims)) : NULL;
            td_tensor *m = ar != NULL ? T(r, td_eq(ar, X(r, 1))) : NULL;
            give(r, 0, m != NULL ? T(r, td_where_scalar_b(m, g, 0)) : NULL);
            break;
        }
        td_tensor *z =
            near(r, T(r, td_full(r->ctx, td_tensor_dtype(g), (int)x->rank, x->dims, 0)), g);
        give(r, 0, T(r, td_scatter_add(z, axis, X(r, 1), g)));
        break;
    }
    case TD_OP_INDEX_SELECT: {
        const td__desc *x = td__tensor_desc(X(r, 0));
        td_tensor *z =
            near(r, T(r, td_full(r->ctx, td_tensor_dtype(g), (int)x->rank, x->dims, 0)), g);
        give(r, 0, T(r, td_index_add(z, (int)op->iattrs[0], X(r, 1), g)));
        break;
    }
    case TD_OP_LAYER_NORM:
    case TD_OP_RMS_NORM:
    case TD_OP_GROUP_NORM: { /* the table's backward ops (dx, and dweight/dbias) */
        const td__desc *x = td__tensor_desc(X(r, 0));
        td_tensor *w = op->n_inputs > 1 ? X(r, 1) : NULL;
        td_tensor *dw = NULL, *db = NULL, *dx;
        const bool want_w = op->n_inputs > 1 && r->n->needs[1];
        const bool want_b = op->n_inputs > 2 && r->n->needs[2];
        const double eps = op->fattrs[0];
        if (op->opcode == TD_OP_LAYER_NORM)
            dx = td_layer_norm_backward(g, X(r, 0), (int)(x->rank - op->iattrs[0]), w, eps,
                                        want_w ? &dw : NULL, want_b ? &db : NULL);
        else if (op->opcode == TD_OP_RMS_NORM)
            dx = td_rms_norm_backward(g, X(r, 0), (int)(x->rank - op->iattrs[0]), w, eps,
                                      want_w ? &dw : NULL);
        else
            dx = td_group_norm_backward(g, X(r, 0), op->iattrs[0], w, eps, want_w ? &dw : NULL,
                                        want_b ? &db : NULL);
        give(r, 0, T(r, dx));
        if (want_w) give(r, 1, T(r, dw));
        if (want_b) give(r, 2, T(r, db));
        break;
    }
    case TD_OP_CONV: case TD_OP_CONV_TRANSPOSE: case TD_OP_MAX_POOL: case TD_OP_AVG_POOL:
    case TD_OP_ADAPTIVE_AVG_POOL: case TD_OP_INTERPOLATE:
        rule_window(r);
        break;
    case TD_OP_BATCH_NORM: rule_batch_norm(r); break;
    case TD_OP_DROPOUT: /* the same mask (seed and shape) and scale applied to g */
        give(r, 0, T(r, td_dropout(g, op->fattrs[0], op->seed)));
        break;
    case TD_OP_SCATTER_ADD: /* x: g; src: g gathered at the index */
        give(r, 0, g);
        if (r->n->needs[2]) give(r, 2, T(r, td_gather(g, X(r, 1), (int)op->iattrs[0])));
        break;
    case TD_OP_INDEX_ADD:
        give(r, 0, g);
        if (r->n->needs[2]) give(r, 2, T(r, td_index_select(g, X(r, 1), (int)op->iattrs[0])));
        break;
    case TD_OP_CONCAT: {
        const int axis = (int)op->iattrs[0];
        int64_t at = 0;
        for (uint32_t i = 0; i < op->n_inputs; i++) {
            const td__desc *x = td__tensor_desc(X(r, (int)i));
            if (r->n->needs[i]) {
                int64_t starts[TD_MAX_RANK] = {0}, stops[TD_MAX_RANK];
                memcpy(stops, x->dims, sizeof(int64_t) * x->rank);
                starts[axis] = at;
                stops[axis] = at + x->dims[axis];
                give(r, (int)i, T(r, td_slice(g, starts, stops)));
            }
            at += x->dims[axis];
        }
        break;
    }
    case TD_OP_SOFTMAX: { /* y (g - sum(g y)) */
        int axis = (int)op->iattrs[0];
        td_tensor *gy = MUL(g, Y(r));
        give(r, 0, MUL(Y(r), SUB(g, T(r, td_sum(gy, 1, &axis, true)))));
        break;
    }
    case TD_OP_SCALED_DOT_PRODUCT_ATTENTION:
        rule_attention(r);
        break;
    case TD_OP_LOG_SOFTMAX: { /* g - e^y sum(g) */
        int axis = (int)op->iattrs[0];
        give(r, 0, SUB(g, MUL(T(r, td_exp(Y(r))), T(r, td_sum(g, 1, &axis, true)))));
        break;
    }
    default: r->failed = true; break;
    }
}

/* Whether node n has a rule for the way it was recorded. */
static bool node_has_rule(const ad_node *n)
{
    if (n->op.opcode == AD_TO_DEVICE) return true;
    if (!has_rule(n->op.opcode)) return false;
    if (n->op.opcode == TD_OP_GELU && n->op.n_iattrs > 0 && n->op.iattrs[0] != 0) return false;
    if (n->op.opcode == TD_OP_PAD) return n->op.iattrs[0] == 0; /* constant mode only */
    if (n->op.opcode == TD_OP_SLICE_STEP) { /* steps of 1 from a start in range */
        const uint32_t rank = n->op.n_iattrs / 3;
        for (uint32_t d = 0; d < rank; d++)
            if (n->op.iattrs[2 * rank + d] != 1 || n->op.iattrs[d] < 0) return false;
    }
    return true;
}

/* ---- td_backward ---- */

/* grads[id] += v (v is consumed: owned by the map afterwards). */
static bool accumulate(td__idmap *grads, uint64_t id, td_tensor *v)
{
    td_tensor *have = td__idmap_get(grads, id);
    if (have == NULL) return td__idmap_put(grads, id, v);
    td_tensor *sum = td_add(have, v);
    td_release(have);
    td_release(v);
    if (sum == NULL) {
        td__idmap_del(grads, id);
        return false;
    }
    return td__idmap_put(grads, id, sum);
}

static void release_all(td__idmap *m)
{
    size_t pos = 0;
    uint64_t id;
    void *v;
    while (td__idmap_next(m, &pos, &id, &v)) td_release(v);
    td__idmap_fini(m);
}

td_status td_backward_grad(td_tensor *out, td_tensor *grad)
{
    if (out == NULL) {
        td__ctx_set_error(NULL, TD_EINVAL, "td_backward_grad: out is NULL");
        return TD_EINVAL;
    }
    td_context *ctx = td__tensor_ctx(out);
    if (grad == NULL) {
        td__ctx_set_error(ctx, TD_EINVAL, "td_backward_grad: grad is NULL");
        return TD_EINVAL;
    }
    char msg[640];
    td__autodiff *ad = *td__ctx_autodiff(ctx);
    const uint64_t out_id = td__tensor_id(out);
    if (ad == NULL || !requires(ad, out_id)) {
        snprintf(msg, sizeof msg, "td_backward: tensor %llu is not on the tape: either it "
                 "was computed before the last td_backward or td_tape_clear (each frees the "
                 "tape: run the forward pass again), or it does not depend on a tensor that "
                 "requires a gradient (call td_requires_grad on the parameters before the "
                 "forward pass; outside td_no_grad scopes)", (unsigned long long)out_id);
        td__ctx_set_error(ctx, TD_EINVAL, msg);
        return TD_EINVAL;
    }
    if (ad->broken != TD_OK) {
        snprintf(msg, sizeof msg, "td_backward: the tape is incomplete: %s", ad->why);
        td__ctx_set_error(ctx, ad->broken, msg);
        return ad->broken;
    }
    const td__desc *od = td__tensor_desc(out), *gd = td__tensor_desc(grad);
    if (od->dtype != gd->dtype || od->rank != gd->rank ||
        memcmp(od->dims, gd->dims, sizeof(int64_t) * od->rank) != 0) {
        char a[128], b[128];
        td__desc_str(od, a, sizeof a);
        td__desc_str(gd, b, sizeof b);
        snprintf(msg, sizeof msg, "td_backward: the gradient is %s, the tensor %s", b, a);
        td__ctx_set_error(ctx, TD_EINVAL, msg);
        return TD_EINVAL;
    }
    if (td__ctx_tensor_device(grad) != td__ctx_tensor_device(out)) {
        snprintf(msg, sizeof msg, "td_backward: the gradient is on device %s, the tensor on %s "
                 "(move it with td_to_device)", td_tensor_device(grad), td_tensor_device(out));
        td__ctx_set_error(ctx, TD_EINVAL, msg);
        return TD_EINVAL;
    }
    /* Which nodes the gradient reaches: one pass from the end, before anything is recorded,
     * so an op without a rule fails the call at once, naming it. */
    td__idmap reach;
    td__idmap_init(&reach);
    td_status st = td__idmap_put(&reach, out_id, REQ_MARK) ? TD_OK : TD_ENOMEM;
    for (size_t k = ad->n; k-- > 0 && st == TD_OK;) {
        const ad_node *n = &ad->nodes[k];
        if (td__idmap_get(&reach, n->op.output) == NULL) continue;
        if (!node_has_rule(n)) {
            snprintf(msg, sizeof msg, "td_backward: op %s (tensor %llu) has no gradient rule; "
                     "compute that part under td_no_grad_begin, or on detached inputs "
                     "(td_detach)",
                     node_op_name(n->op.opcode), (unsigned long long)n->op.output);
            st = TD_EUNSUPPORTED;
            break;
        }
        for (uint32_t i = 0; i < n->op.n_inputs; i++)
            if (n->needs[i] && !td__idmap_put(&reach, n->op.inputs[i], REQ_MARK)) st = TD_ENOMEM;
    }
    td__idmap_fini(&reach);
    if (st != TD_OK) {
        if (st == TD_ENOMEM) snprintf(msg, sizeof msg, "td_backward: out of memory");
        td__ctx_set_error(ctx, st, msg);
        return st;
    }
    const bool was_internal = internal_begin(ad);
    td__idmap grads;
    td__idmap_init(&grads);
    td_tensor *seed = td_reshape(grad, (int)gd->rank, gd->dims);
    if (seed == NULL || !td__idmap_put(&grads, out_id, seed)) {
        td_release(seed);
        st = TD_ENOMEM;
        snprintf(msg, sizeof msg, "td_backward: %s", td_last_error(ctx));
    }
    for (size_t k = ad->n; k-- > 0 && st == TD_OK;) {
        const ad_node *n = &ad->nodes[k];
        td_tensor *g = td__idmap_del(&grads, n->op.output);
        if (g == NULL) continue;
        rule_ctx r = {.ctx = ctx, .n = n, .g = g};
        rule(&r);
        for (int t = 0; t < r.ntmp; t++) td_release(r.tmp[t]);
        td_release(g);
        if (r.failed) {
            snprintf(msg, sizeof msg, "td_backward: the gradient of op %s (tensor %llu) "
                     "failed: %s", node_op_name(n->op.opcode), (unsigned long long)n->op.output,
                     td_last_error(ctx));
            st = td_last_status(ctx) != TD_OK ? td_last_status(ctx) : TD_EINTERNAL;
        }
        for (uint32_t i = 0; i < n->op.n_inputs; i++) {
            if (r.out[i] == NULL) continue;
            if (st == TD_OK && !accumulate(&grads, n->op.inputs[i], r.out[i])) {
                snprintf(msg, sizeof msg, "td_backward: accumulating a gradient: %s",
                         td_last_error(ctx));
                st = TD_ENOMEM;
            } else if (st != TD_OK) {
                td_release(r.out[i]);
            }
        }
    }
    /* the leaves' gradients add to what they hold */
    size_t pos = 0;
    uint64_t id;
    void *v;
    while (st == TD_OK && td__idmap_next(&ad->leaves, &pos, &id, &v)) {
        ad_leaf *l = v;
        td_tensor *gl = td__idmap_del(&grads, id);
        if (gl == NULL) continue;
        if (l->grad == NULL) {
            l->grad = gl;
            continue;
        }
        td_tensor *sum = td_add(l->grad, gl);
        td_release(gl);
        if (sum == NULL) {
            snprintf(msg, sizeof msg, "td_backward: %s", td_last_error(ctx));
            st = TD_ENOMEM;
            break;
        }
        td_release(l->grad);
        l->grad = sum;
    }
    release_all(&grads);
    internal_end(ad, was_internal);
    tape_clear(ad);
    if (st != TD_OK) td__ctx_set_error(ctx, st, msg);
    return st;
}

td_status td_backward(td_tensor *loss)
{
    if (loss == NULL) {
        td__ctx_set_error(NULL, TD_EINVAL, "td_backward: loss is NULL");
        return TD_EINVAL;
    }
    td_context *ctx = td__tensor_ctx(loss);
    const td__desc *d = td__tensor_desc(loss);
    if (td__desc_nelem(d) != 1) {
        char msg[256], s[128];
        td__desc_str(d, s, sizeof s);
        snprintf(msg, sizeof msg, "td_backward: the loss must have one element, got %s; use "
                 "td_backward_grad with a gradient of its shape", s);
        td__ctx_set_error(ctx, TD_EINVAL, msg);
        return TD_EINVAL;
    }
    td__autodiff *ad = *td__ctx_autodiff(ctx);
    const bool was = ad != NULL && internal_begin(ad);
    td_tensor *one = td_full(ctx, td_tensor_dtype(loss), (int)d->rank, d->dims, 1.0);
    if (one != NULL && td__ctx_tensor_device(one) != td__ctx_tensor_device(loss)) {
        /* td_full makes it on the session's first device: the seed goes where the loss is */
        td_tensor *moved = td_to_device(one, td_tensor_device(loss));
        td_release(one);
        one = moved;
    }
    if (ad != NULL) internal_end(ad, was);
    if (one == NULL) return td_last_status(ctx);
    td_status st = td_backward_grad(loss, one);
    if (ad != NULL) release_internal(ad, one);
    else td_release(one);
    return st;
}

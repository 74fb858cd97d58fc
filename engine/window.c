/* window.c — the shape rule of the window ops (TD_SHAPE_WINDOW: the CONV and POOL families,
 * engine/window.h): channel and group arithmetic, each spatial dim's output size, and every
 * bad attribute refused with the op's name (added by td__op_infer) and the values.
 *
 * Output sizes follow PyTorch's definitions (torch.nn.Conv*d, ConvTranspose*d, MaxPool*d,
 * AvgPool*d): conv O = floor((L + pad_lo + pad_hi - dilation (k - 1) - 1) / stride) + 1;
 * transposed O = (L - 1) stride - pad_lo - pad_hi + dilation (k - 1) + 1; pooling
 * O = floor or ceil((L + 2 pad - dilation (k - 1) - 1) / stride) + 1, less one when ceil mode
 * would start the last window inside the right padding.
 */
#include "engine/window.h"
#include <stdio.h>

/* Largest stride, dilation, kernel, padding or size attribute: keeps every product of the
 * output-size formulas inside int64 for dims below 2^48. */
#define WIN_ATTR_MAX ((int64_t)1 << 31)
#define WIN_SIZE_MAX ((int64_t)1 << 47)

static td_status bad(char *err, size_t errlen, const char *what, int64_t v, int dim,
                     const char *rule)
{
    return td__einval(err, errlen, "%s %lld in spatial dim %d %s", what, (long long)v, dim, rule);
}

/* Every list entry inside its range. */
static td_status check_lists(const td__op *op, const td__window *w, char *err, size_t errlen)
{
    int off = TD_WIN_SP - w->nsp;
    for (int i = 0; i < w->nsp; i++) {
        int d = off + i;
        const int64_t pos[3] = {w->k[d], w->stride[d], w->dil[d]};
        static const char *const names[3] = {"kernel", "stride", "dilation"};
        for (int j = 0; j < 3; j++) {
            if (pos[j] < 1) return bad(err, errlen, names[j], pos[j], i, "must be >= 1");
            if (pos[j] > WIN_ATTR_MAX)
                return bad(err, errlen, names[j], pos[j], i, "exceeds 2^31");
        }
        if (w->pad_lo[d] < 0 || w->pad_lo[d] > WIN_ATTR_MAX)
            return bad(err, errlen, "padding", w->pad_lo[d], i, "must be in [0, 2^31]");
        if (op->opcode == TD_OP_CONV_TRANSPOSE) {
            int64_t m = w->stride[d] > w->dil[d] ? w->stride[d] : w->dil[d];
            if (w->pad_hi[d] <= -m || w->pad_hi[d] > WIN_ATTR_MAX)
                return td__einval(err, errlen,
                                  "pad_hi %lld in spatial dim %d must be in (-max(stride, "
                                  "dilation), 2^31] = (%lld, 2^31] (pad_hi = padding - "
                                  "output_padding)",
                                  (long long)w->pad_hi[d], i, (long long)-m);
        } else if (w->pad_hi[d] < 0 || w->pad_hi[d] > WIN_ATTR_MAX) {
            return bad(err, errlen, "pad_hi", w->pad_hi[d], i, "must be in [0, 2^31]");
        }
        if (w->in[d] < 1 || w->in[d] > WIN_SIZE_MAX)
            return bad(err, errlen, "input size", w->in[d], i, "must be in [1, 2^47]");
        if (w->out[d] < 1 || w->out[d] > WIN_SIZE_MAX)
            return bad(err, errlen, "output size", w->out[d], i, "must be in [1, 2^47]");
    }
    return TD_OK;
}

/* Conv output size along dim d; fails when the dilated kernel is larger than the padded
 * input. */
static td_status conv_out(const td__window *w, int d, int i, int64_t L, int64_t *o, char *err,
                          size_t errlen)
{
    int64_t ext = w->dil[d] * (w->k[d] - 1) + 1, padded = L + w->pad_lo[d] + w->pad_hi[d];
    if (ext > padded)
        return td__einval(err, errlen,
                          "kernel extent %lld (kernel %lld, dilation %lld) exceeds the padded "
                          "input %lld (input %lld + padding %lld + %lld) in spatial dim %d",
                          (long long)ext, (long long)w->k[d], (long long)w->dil[d],
                          (long long)padded, (long long)L, (long long)w->pad_lo[d],
                          (long long)w->pad_hi[d], i);
    *o = (padded - ext) / w->stride[d] + 1;
    return TD_OK;
}

/* Pooling output size along dim d (PyTorch's pooling_output_shape). */
static td_status pool_out(const td__window *w, int d, int i, int64_t L, int64_t *o, char *err,
                          size_t errlen)
{
    int64_t k = w->k[d], p = w->pad_lo[d], s = w->stride[d];
    if (p > k / 2)
        return td__einval(err, errlen,
                          "padding %lld in spatial dim %d exceeds half the kernel %lld", (long long)p,
                          i, (long long)k);
    int64_t ext = w->dil[d] * (k - 1) + 1, padded = L + 2 * p;
    if (ext > padded)
        return td__einval(err, errlen,
                          "kernel extent %lld (kernel %lld, dilation %lld) exceeds the padded "
                          "input %lld (input %lld + 2 x padding %lld) in spatial dim %d",
                          (long long)ext, (long long)k, (long long)w->dil[d], (long long)padded,
                          (long long)L, (long long)p, i);
    int64_t num = padded - ext + (w->ceil_mode ? s - 1 : 0);
    int64_t n = num / s + 1;
    if (w->ceil_mode && (n - 1) * s >= L + p) n--;
    *o = n;
    return TD_OK;
}

static td_status check_channels(int64_t c, int64_t co, int64_t g, char *err, size_t errlen)
{
    if (g < 1) return td__einval(err, errlen, "groups %lld must be >= 1", (long long)g);
    if (c % g != 0)
        return td__einval(err, errlen, "input channels %lld are not divisible by groups %lld",
                          (long long)c, (long long)g);
    if (co % g != 0)
        return td__einval(err, errlen, "output channels %lld are not divisible by groups %lld",
                          (long long)co, (long long)g);
    return TD_OK;
}

static td_status check_bias(const td__desc *b, int64_t co, char *err, size_t errlen)
{
    if (b->rank != 1 || b->dims[0] != co)
        return td__einval(err, errlen, "bias must be [%lld] (one per output channel), got rank %u%s",
                          (long long)co, b->rank, b->rank == 1 ? " of another length" : "");
    return TD_OK;
}

td_status td__window_shape(const td__op *op, const td__desc *const *in, td__desc *out,
                           char *err, size_t errlen)
{
    const td__desc *x = in[0];
    const int nsp = (int)x->rank - 2, off = TD_WIN_SP - nsp;
    td__window w;
    td__window_attrs(op, nsp, &w);
    const bool bwd = td__window_is_backward(op->opcode);
    /* what the input tensor holds: the forward input, or (backward ops) the forward output */
    for (int i = 0; i < nsp; i++) {
        if (bwd) w.out[off + i] = x->dims[2 + i];
        else if (op->opcode != TD_OP_ADAPTIVE_AVG_POOL && op->opcode != TD_OP_INTERPOLATE)
            w.in[off + i] = x->dims[2 + i];
    }
    if (op->opcode == TD_OP_ADAPTIVE_AVG_POOL || op->opcode == TD_OP_INTERPOLATE)
        for (int i = 0; i < nsp; i++) w.in[off + i] = x->dims[2 + i];
    if (op->opcode == TD_OP_CONV || op->opcode == TD_OP_CONV_TRANSPOSE) {
        const td__desc *wt = in[1];
        if (wt->rank != x->rank)
            return td__einval(err, errlen, "weight rank %u differs from input rank %u", wt->rank,
                              x->rank);
        for (int i = 0; i < nsp; i++) w.k[off + i] = wt->dims[2 + i];
    }
    if (op->opcode == TD_OP_CONV_WEIGHT_GRAD) {
        const td__desc *dy = in[1];
        if (dy->rank != x->rank)
            return td__einval(err, errlen, "dy rank %u differs from input rank %u", dy->rank,
                              x->rank);
        for (int i = 0; i < nsp; i++) w.out[off + i] = dy->dims[2 + i];
    }
    /* sizes a later rule computes get a placeholder that passes the range check */
    if (op->opcode == TD_OP_CONV || op->opcode == TD_OP_CONV_TRANSPOSE ||
        op->opcode == TD_OP_MAX_POOL || op->opcode == TD_OP_MAX_POOL_INDICES ||
        op->opcode == TD_OP_AVG_POOL)
        for (int i = 0; i < nsp; i++) w.out[off + i] = 1;
    td_status s = check_lists(op, &w, err, errlen);
    if (s != TD_OK) return s;
    if (w.align_corners && w.mode == 0)
        return td__einval(err, errlen, "align_corners 1 needs mode 1 (linear), got mode 0");

    td__desc o = *x;
    switch (op->opcode) {
    case TD_OP_CONV: {
        const td__desc *wt = in[1];
        int64_t co = wt->dims[0];
        if ((s = check_channels(x->dims[1], co, w.groups, err, errlen)) != TD_OK) return s;
        if (wt->dims[1] != x->dims[1] / w.groups)
            return td__einval(err, errlen,
                              "weight dim 1 is %lld, expected input channels / groups = %lld / "
                              "%lld = %lld",
                              (long long)wt->dims[1], (long long)x->dims[1], (long long)w.groups,
                              (long long)(x->dims[1] / w.groups));
        if (op->n_inputs == 3 && (s = check_bias(in[2], co, err, errlen)) != TD_OK) return s;
        o.dims[1] = co;
        for (int i = 0; i < nsp; i++)
            if ((s = conv_out(&w, off + i, i, x->dims[2 + i], &o.dims[2 + i], err, errlen)) != TD_OK)
                return s;
        break;
    }
    case TD_OP_CONV_TRANSPOSE: {
        const td__desc *wt = in[1];
        if (wt->dims[0] != x->dims[1])
            return td__einval(err, errlen, "weight dim 0 is %lld, expected the input channels %lld",
                              (long long)wt->dims[0], (long long)x->dims[1]);
        int64_t co;
        if (__builtin_mul_overflow(wt->dims[1], w.groups < 1 ? 1 : w.groups, &co))
            return td__einval(err, errlen, "output channels overflow");
        if ((s = check_channels(x->dims[1], co, w.groups, err, errlen)) != TD_OK) return s;
        if (op->n_inputs == 3 && (s = check_bias(in[2], co, err, errlen)) != TD_OK) return s;
        o.dims[1] = co;
        for (int i = 0; i < nsp; i++) {
            int d = off + i;
            int64_t v = (x->dims[2 + i] - 1) * w.stride[d] - w.pad_lo[d] - w.pad_hi[d] +
                        w.dil[d] * (w.k[d] - 1) + 1;
            if (v < 1)
                return td__einval(err, errlen,
                                  "output size %lld in spatial dim %d is below 1 (input %lld, "
                                  "stride %lld, padding %lld + %lld, kernel %lld, dilation %lld)",
                                  (long long)v, i, (long long)x->dims[2 + i],
                                  (long long)w.stride[d], (long long)w.pad_lo[d],
                                  (long long)w.pad_hi[d], (long long)w.k[d], (long long)w.dil[d]);
            o.dims[2 + i] = v;
        }
        break;
    }
    case TD_OP_CONV_WEIGHT_GRAD: {
        const td__desc *dy = in[1];
        if (dy->dims[0] != x->dims[0])
            return td__einval(err, errlen, "dy batch %lld differs from the input batch %lld",
                              (long long)dy->dims[0], (long long)x->dims[0]);
        if ((s = check_channels(x->dims[1], dy->dims[1], w.groups, err, errlen)) != TD_OK) return s;
        o.dims[0] = dy->dims[1];
        o.dims[1] = x->dims[1] / w.groups;
        for (int i = 0; i < nsp; i++) {
            int64_t e = 0;
            if ((s = conv_out(&w, off + i, i, x->dims[2 + i], &e, err, errlen)) != TD_OK) return s;
            if (e != dy->dims[2 + i])
                return td__einval(err, errlen,
                                  "dy spatial dim %d is %lld, the convolution gives %lld", i,
                                  (long long)dy->dims[2 + i], (long long)e);
            o.dims[2 + i] = w.k[off + i];
        }
        break;
    }
    case TD_OP_MAX_POOL:
    case TD_OP_MAX_POOL_INDICES:
    case TD_OP_AVG_POOL:
    case TD_OP_MAX_POOL_BACKWARD:
    case TD_OP_AVG_POOL_BACKWARD:
        if (op->opcode == TD_OP_MAX_POOL_BACKWARD) {
            const td__desc *ix = in[1];
            bool same = ix->rank == x->rank;
            for (uint32_t i = 0; same && i < x->rank; i++) same = ix->dims[i] == x->dims[i];
            if (!same) return td__einval(err, errlen, "indices must have dy's shape");
        }
        for (int i = 0; i < nsp; i++) {
            int d = off + i;
            int64_t e = 0;
            if ((s = pool_out(&w, d, i, w.in[d], &e, err, errlen)) != TD_OK) return s;
            if (bwd) {
                if (e != x->dims[2 + i])
                    return td__einval(err, errlen,
                                      "dy spatial dim %d is %lld, the pooling gives %lld", i,
                                      (long long)x->dims[2 + i], (long long)e);
                o.dims[2 + i] = w.in[d];
            } else {
                o.dims[2 + i] = e;
            }
        }
        break;
    case TD_OP_ADAPTIVE_AVG_POOL:
    case TD_OP_INTERPOLATE:
        for (int i = 0; i < nsp; i++) o.dims[2 + i] = w.out[off + i];
        break;
    case TD_OP_ADAPTIVE_AVG_POOL_BACKWARD:
        for (int i = 0; i < nsp; i++) o.dims[2 + i] = w.in[off + i];
        break;
    default:
        return td__einval(err, errlen, "opcode %u is not a window op", op->opcode);
    }
    *out = o;
    return TD_OK;
}

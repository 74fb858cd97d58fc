/* lower.c — the built lowerings of engine/lower.h.
 *
 * SCALED_DOT_PRODUCT_ATTENTION is lowered exactly as td_scaled_dot_product_attention
 * recorded it before it was a row (so every device without a native kernel computes what it
 * did): kt = permute(k, last two swapped); s = matmul(q, kt) * full(scale); causal:
 * s = where(le(arange(S) as [1, S], arange(L) as [L, 1]), s, full(-inf)); a bool mask:
 * s = where(mask, s, full(-inf)); a float mask: s = s + mask; p = softmax(s) along the last
 * axis, as one SOFTMAX step (run natively where the device has a kernel, else lowered one
 * level down: max, sub, exp, sum, div, optable.h's SOFTMAX steps); y = matmul(p, v). */
#include "engine/lower.h"
#include "engine/optable.h"
#include "engine/session.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

typedef struct builder {
    td__lower_prog *p;
    uint64_t base; /* step j's output: base + j */
} builder;

/* Append a step; returns its output id. */
static uint64_t step(builder *b, td__op op)
{
    const uint32_t j = b->p->n++;
    op.output = b->base + j;
    b->p->steps[j] = op;
    return op.output;
}

static uint64_t op2(builder *b, uint32_t opcode, uint64_t a, uint64_t c)
{
    return step(b, (td__op){.opcode = opcode, .n_inputs = 2, .inputs = {a, c}});
}

static uint64_t scalar(builder *b, uint32_t dt, double v)
{
    return step(b, (td__op){.opcode = TD_OP_FULL, .dtype = dt, .fattrs = {v}});
}

/* arange(n) as i64, reshaped to [n, 1] (column) or [1, n] */
static uint64_t index_vector(builder *b, int64_t n, bool column)
{
    uint64_t a = step(b, (td__op){.opcode = TD_OP_ARANGE, .dtype = TD_I64, .n_iattrs = 1,
                                  .iattrs = {n}, .fattrs = {0, 1}});
    td__op r = {.opcode = TD_OP_RESHAPE, .n_inputs = 1, .inputs = {a}, .n_iattrs = 2,
                .iattrs = {column ? n : 1, column ? 1 : n}};
    return step(b, r);
}

static void lower_attention(const td__op *op, const td__desc *const *in, builder *b)
{
    const td__desc *q = in[0], *k = in[1];
    const uint32_t dt = q->dtype;
    td__op perm = {.opcode = TD_OP_PERMUTE, .n_inputs = 1, .inputs = {op->inputs[1]},
                   .n_iattrs = k->rank};
    for (uint32_t i = 0; i < k->rank; i++) perm.iattrs[i] = i;
    perm.iattrs[k->rank - 2] = k->rank - 1;
    perm.iattrs[k->rank - 1] = k->rank - 2;
    uint64_t kt = step(b, perm);
    uint64_t s = op2(b, TD_OP_MATMUL, op->inputs[0], kt);
    s = op2(b, TD_OP_MUL, s, scalar(b, dt, op->fattrs[0]));
    uint64_t ninf = 0;
    if (op->iattrs[0] != 0) {
        const int64_t L = q->dims[q->rank - 2], S = k->dims[k->rank - 2];
        uint64_t cols = index_vector(b, S, false), rows = index_vector(b, L, true);
        uint64_t keep = op2(b, TD_OP_LE, cols, rows);
        ninf = scalar(b, dt, -INFINITY);
        s = step(b, (td__op){.opcode = TD_OP_WHERE, .n_inputs = 3, .inputs = {keep, s, ninf}});
    }
    if (op->n_inputs > 3 && in[3]->dtype == TD_BOOL) {
        if (ninf == 0) ninf = scalar(b, dt, -INFINITY);
        s = step(b, (td__op){.opcode = TD_OP_WHERE, .n_inputs = 3,
                             .inputs = {op->inputs[3], s, ninf}});
    } else if (op->n_inputs > 3) {
        s = op2(b, TD_OP_ADD, s, op->inputs[3]);
    }
    /* softmax along the last axis as one step: the device's native kernel where it has one
     * (the CUDA backend's reads the scores once), else its lowering, one level down */
    uint32_t rank = q->rank > k->rank ? q->rank : k->rank;
    if (op->n_inputs > 3 && in[3]->rank > rank) rank = in[3]->rank;
    uint64_t pr = step(b, (td__op){.opcode = TD_OP_SOFTMAX, .n_inputs = 1, .inputs = {s},
                                   .n_iattrs = 1, .iattrs = {(int64_t)rank - 1}});
    op2(b, TD_OP_MATMUL, pr, op->inputs[2]);
}

td_status td__lower_build(const td__op *op, const td__desc *const *in, uint64_t temp_base,
                          td__lower_prog *p, char *err, size_t errlen)
{
    builder b = {.p = p, .base = temp_base};
    p->n = 0;
    switch (op->opcode) {
    case TD_OP_SCALED_DOT_PRODUCT_ATTENTION:
        lower_attention(op, in, &b);
        break;
    default:
        snprintf(err, errlen, "%s has no built lowering", td__op_name(op->opcode));
        return TD_EINTERNAL;
    }
    p->steps[p->n - 1].output = op->output;
    return TD_OK;
}

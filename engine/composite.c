/* composite.c — composite ops from primitives (see composite.h). */
#include "engine/composite.h"

static td_status emit1(const td__emitter *e, uint32_t opcode, uint64_t x, uint64_t *out,
                       td__desc *od)
{
    td__op op = {.opcode = opcode, .n_inputs = 1, .inputs = {x}};
    return e->emit(e->ctx, &op, out, od);
}

static td_status emit2(const td__emitter *e, uint32_t opcode, uint64_t a, uint64_t b,
                       uint64_t *out, td__desc *od)
{
    td__op op = {.opcode = opcode, .n_inputs = 2, .inputs = {a, b}};
    return e->emit(e->ctx, &op, out, od);
}

static td_status emit_reduce(const td__emitter *e, uint32_t opcode, uint64_t x, int axis,
                             uint64_t *out, td__desc *od)
{
    td__op op = {.opcode = opcode, .n_inputs = 1, .inputs = {x}, .n_iattrs = 2,
                 .iattrs = {(int64_t)1 << axis, 1}};
    return e->emit(e->ctx, &op, out, od);
}

td_status td__composite_softmax(const td__emitter *e, uint64_t x, const td__desc *xd, int axis,
                                bool log, uint64_t *out_id, td__desc *out_desc)
{
    if (!td__dtype_is_float(xd->dtype) || axis < 0 || axis >= (int)xd->rank) return TD_EINVAL;
    uint64_t m, shifted, ex, sum, lsum, res;
    td__desc d;
    td_status s = emit_reduce(e, TD_OP_MAX, x, axis, &m, &d);
    if (s != TD_OK) return s;
    s = emit2(e, TD_OP_SUB, x, m, &shifted, &d);
    e->drop(e->ctx, m);
    if (s != TD_OK) return s;
    s = emit1(e, TD_OP_EXP, shifted, &ex, &d);
    if (s != TD_OK) goto out_shifted;
    s = emit_reduce(e, TD_OP_SUM, ex, axis, &sum, &d);
    if (s != TD_OK) goto out_ex;
    if (log) {
        s = emit1(e, TD_OP_LOG, sum, &lsum, &d);
        if (s == TD_OK) {
            s = emit2(e, TD_OP_SUB, shifted, lsum, &res, out_desc);
            e->drop(e->ctx, lsum);
        }
    } else {
        s = emit2(e, TD_OP_DIV, ex, sum, &res, out_desc);
    }
    e->drop(e->ctx, sum);
    if (s == TD_OK) *out_id = res;
out_ex:
    e->drop(e->ctx, ex);
out_shifted:
    e->drop(e->ctx, shifted);
    return s;
}

/* Unit tests for engine/optable.h: the table's own consistency (frozen opcodes in range and
 * unique, names unique, arities sane, every lowering a program of primitive ops whose
 * operands exist and whose result has the composite's desc, every table element function a
 * float unary row). The wire values of the opcodes are written out here on purpose. */
#include "engine/op.h"
#include <criterion/criterion.h>
#include <string.h>

Test(optable, opcodes_and_names)
{
    bool seen[TD_OPCODE_LIMIT] = {false};
    for (int i = 0; i < TD_OP_COUNT; i++) {
        const td__op_row *r = &td__op_rows[i];
        cr_assert_lt(r->opcode, TD_OPCODE_LIMIT, "%s", r->name);
        cr_assert_not(seen[r->opcode], "opcode %u twice", r->opcode);
        seen[r->opcode] = true;
        cr_assert_eq(td__op_row_of(r->opcode), r);
        cr_assert_leq(r->min_inputs, r->max_inputs, "%s", r->name);
        cr_assert_leq(r->max_inputs, TD_OP_MAX_INPUTS, "%s", r->name);
        cr_assert_neq(r->family, TD_OPCLASS_NONE, "%s", r->name);
        for (int j = 0; j < i; j++) cr_assert_str_neq(td__op_rows[j].name, r->name);
    }
    /* frozen wire values */
    cr_assert_eq(TD_OP_EMPTY, 0);
    cr_assert_eq(TD_OP_NEG, 10);
    cr_assert_eq(TD_OP_RELU, 18);
    cr_assert_eq(TD_OP_ADD, 30);
    cr_assert_eq(TD_OP_EQ, 40);
    cr_assert_eq(TD_OP_WHERE, 50);
    cr_assert_eq(TD_OP_CAST, 51);
    cr_assert_eq(TD_OP_SUM, 60);
    cr_assert_eq(TD_OP_ARGMIN, 66);
    cr_assert_eq(TD_OP_MATMUL, 70);
    cr_assert_eq(TD_OP_RESHAPE, 80);
    cr_assert_eq(TD_OP_COPY, 87);
    cr_assert_eq(TD_OP_SOFTMAX, 90);
    cr_assert_eq(TD_OP_LOG_SOFTMAX, 91);
    cr_assert_eq(TD_OP_VAR, 180);
    cr_assert_eq(TD_OP_ALL, 188);
    cr_assert_eq(TD_OP_CUMSUM, 190);
    cr_assert_eq(TD_OP_CUMPROD, 191);
    cr_assert_eq(TD_OP_SORT, 200);
    cr_assert_eq(TD_OP_TOPK_INDICES, 203);
    cr_assert_eq(TD_OP_BERNOULLI, 5);
    cr_assert_eq(TD_OP_TRUNC_NORMAL, 9);
    cr_assert_null(td__op_row_of(10 - 1 + 1000));
    cr_assert_null(td__op_row_of(UINT32_MAX));
    cr_assert_str_eq(td__op_name(1000), "unknown");
    cr_assert_eq(td__op_class(1000), TD_OPCLASS_NONE);
}

Test(optable, lowerings_are_primitive_programs)
{
    int composites = 0;
    for (int i = 0; i < TD_OP_COUNT; i++) {
        const td__op_row *r = &td__op_rows[i];
        const td__lowering *l = td__op_lowering(r);
        if (l == NULL) {
            cr_assert(td__op_default_supports(r->opcode), "%s", r->name);
            continue;
        }
        composites++;
        cr_assert_not(td__op_default_supports(r->opcode), "%s is lowered by default", r->name);
        cr_assert(l->n_steps >= 1 && l->n_steps <= TD_LOWER_MAX_STEPS, "%s", r->name);
        /* run the shape rules along the program for every input x = f32 [3, 4, 5], axis 1
         * (for the composites with an axis attribute) */
        td__desc x = {.dtype = TD_F32, .rank = 3, .dims = {3, 4, 5}}, d[TD_LOWER_MAX_STEPS], want;
        td__op op = {.opcode = r->opcode, .n_inputs = r->min_inputs};
        if (r->attrs.a[0].kind == TD_ATTR_AXES_MASK) { /* a reduction: axes {1, 2}, keepdims 0 */
            op.n_iattrs = 2;
            op.iattrs[0] = 6;
            op.iattrs[1] = 0;
        } else if (r->attrs.layout == TD_ATTRS_FIXED) {
            op.n_iattrs = 1;
            op.iattrs[0] = 1;
        }
        const td__desc *pin[TD_OP_MAX_INPUTS] = {&x, &x, &x, &x, &x, &x, &x, &x};
        char err[512];
        cr_assert_eq(td__op_infer(&op, pin, &want, err, sizeof err), TD_OK, "%s", err);
        for (uint32_t j = 0; j < l->n_steps; j++) {
            const td__lower_step *st = &l->steps[j];
            cr_assert_not_null(td__op_row_of(st->opcode));
            cr_assert_null(td__op_lowering(td__op_row_of(st->opcode)), "%s step %u is a composite",
                           r->name, j);
            td__op s = {.opcode = st->opcode, .n_inputs = st->n_inputs};
            if (st->attrs == TD_LATTR_AXIS_KEEP) {
                s.n_iattrs = 2;
                s.iattrs[0] = 1 << 1;
                s.iattrs[1] = 1;
            } else if (st->attrs == TD_LATTR_SAME) {
                s.n_iattrs = op.n_iattrs;
                memcpy(s.iattrs, op.iattrs, sizeof s.iattrs);
            }
            const td__desc *sin[3];
            for (uint32_t k = 0; k < st->n_inputs; k++) {
                uint8_t src = st->in[k];
                cr_assert(src < r->min_inputs || (src >= TD_LSTEP(0) && src < TD_LSTEP(j)),
                          "%s step %u operand %u", r->name, j, k);
                sin[k] = src >= TD_LSTEP(0) ? &d[src - TD_LSTEP(0)] : &x;
            }
            cr_assert_eq(td__op_infer(&s, sin, &d[j], err, sizeof err), TD_OK, "%s step %u: %s",
                         r->name, j, err);
        }
        cr_assert(td__desc_equal(&d[l->n_steps - 1], &want), "%s: the lowering's result differs",
                  r->name);
    }
    cr_assert_geq(composites, 10, "softmax, log_softmax, isnan, isinf, isfinite, logical_not, "
                                  "clamp_tensor and the norms l1, inf, -inf");
}

Test(optable, element_functions_are_float_unary_rows)
{
#define CHECK_KERNEL(NAME, EXPR)                                                           \
    do {                                                                                   \
        const td__op_row *r = td__op_row_of(TD_OP_##NAME);                                 \
        cr_assert_not_null(r);                                                             \
        cr_assert_eq(r->family, TD_OPCLASS_UNARY, #NAME);                                  \
        cr_assert_eq(r->in_dtype, TD_DTC_FLOAT, #NAME);                                    \
    } while (0);
    TD_UNARY_FLOAT_KERNELS(CHECK_KERNEL)
#undef CHECK_KERNEL
}

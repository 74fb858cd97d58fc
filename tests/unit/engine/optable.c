/* Unit tests for engine/optable.h: the table's own consistency (frozen opcodes in range and
 * unique, names unique, arities sane, every lowering a program of primitive ops whose
 * operands exist and whose result has the composite's desc, every table element function a
 * float unary row). The wire values of the opcodes are written out here on purpose. */
#include "engine/lower.h"
#include "engine/op.h"
#include "engine/session.h"
#include <stdio.h>
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
        if (l->n_steps == 0) continue; /* built per op: built_lowerings_are_primitive_programs */
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

/* Run td__op_infer along a built program (engine/lower.c): every step a primitive or a
 * composite with a fixed step list of primitives (one level of nesting: attention's softmax,
 * engine/session.c's TD_LOWER_MAX_DEPTH), every operand a composite input or an earlier
 * step, step j's output the given base + j, the result the composite's shape. The base is an
 * enclosing program's past its TD_LOWER_PROG_MAX temporaries, as the engine nests them. */
static void check_built(const char *what, const td__op *op, const td__desc *const *in)
{
    td__desc want;
    char err[512];
    cr_assert_eq(td__op_infer(op, in, &want, err, sizeof err), TD_OK, "%s: %s", what, err);
    td__lower_prog p;
    const uint64_t base = TD_LOWER_TEMP_BASE + TD_LOWER_PROG_MAX;
    cr_assert_eq(td__lower_build(op, in, base, &p, err, sizeof err), TD_OK, "%s: %s", what, err);
    cr_assert(p.n >= 1 && p.n <= TD_LOWER_PROG_MAX, "%s", what);
    static td__desc d[TD_LOWER_PROG_MAX];
    for (uint32_t j = 0; j < p.n; j++) {
        const td__op *st = &p.steps[j];
        const td__lowering *sl = td__op_lowering(td__op_row_of(st->opcode));
        if (sl != NULL) { /* a composite step: its own steps are fixed primitives */
            cr_assert_gt(sl->n_steps, 0, "%s step %u (%s) is a built composite", what, j,
                         td__op_name(st->opcode));
            for (uint32_t q = 0; q < sl->n_steps; q++)
                cr_assert_null(td__op_lowering(td__op_row_of(sl->steps[q].opcode)),
                               "%s step %u (%s) nests a composite", what, j,
                               td__op_name(st->opcode));
        }
        const td__desc *sin[TD_OP_MAX_INPUTS];
        for (uint32_t k = 0; k < st->n_inputs; k++) {
            const uint64_t id = st->inputs[k];
            if (id >= base) {
                cr_assert_lt(id - base, j, "%s step %u operand %u", what, j, k);
                sin[k] = &d[id - base];
            } else {
                uint32_t at = 0;
                while (at < op->n_inputs && op->inputs[at] != id) at++;
                cr_assert_lt(at, op->n_inputs, "%s step %u operand %u: id %llu", what, j, k,
                             (unsigned long long)id);
                sin[k] = in[at];
            }
        }
        cr_assert_eq(td__op_infer(st, sin, &d[j], err, sizeof err), TD_OK, "%s step %u (%s): %s",
                     what, j, td__op_name(st->opcode), err);
        const uint64_t out = j + 1 == p.n ? op->output : base + j;
        cr_assert_eq(st->output, out, "%s step %u output", what, j);
    }
    cr_assert(td__desc_equal(&d[p.n - 1], &want), "%s: the lowering's result differs", what);
}

Test(optable, built_lowerings_are_primitive_programs)
{
    /* q [2, 1, 3, 4], k [3, 5, 4] (batch broadcast), v [5, 6]; masks bool [3, 5], float
     * [2, 3, 1, 5] (a batch dim q and k do not have), causal on and off */
    static const td__desc q = {.dtype = TD_F32, .rank = 4, .dims = {2, 1, 3, 4}};
    static const td__desc k = {.dtype = TD_F32, .rank = 3, .dims = {3, 5, 4}};
    static const td__desc v = {.dtype = TD_F32, .rank = 2, .dims = {5, 6}};
    static const td__desc mb = {.dtype = TD_BOOL, .rank = 2, .dims = {3, 5}};
    static const td__desc mf = {.dtype = TD_F32, .rank = 4, .dims = {2, 3, 1, 5}};
    for (int causal = 0; causal < 2; causal++) {
        for (int m = 0; m < 3; m++) {
            td__op op = {.opcode = TD_OP_SCALED_DOT_PRODUCT_ATTENTION, .n_inputs = m ? 4 : 3,
                         .inputs = {1, 2, 3, 4}, .output = 9, .n_iattrs = 1,
                         .iattrs = {causal}, .fattrs = {0.5}};
            const td__desc *in[4] = {&q, &k, &v, m == 1 ? &mb : &mf};
            char what[64];
            snprintf(what, sizeof what, "attention causal %d mask %d", causal, m);
            check_built(what, &op, in);
        }
    }
}

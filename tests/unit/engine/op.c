/* Unit tests for engine/op.c: shape inference and validation. Expected shapes are worked
 * out by hand from numpy's broadcasting rules and the attribute layout in op.h. */
#include "engine/op.h"
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static td__desc D(uint32_t dt, uint32_t rank, const int64_t *dims)
{
    td__desc d = {.dtype = dt, .rank = rank};
    for (uint32_t i = 0; i < rank; i++) d.dims[i] = dims[i];
    return d;
}

static char err[512];

static td_status infer(td__op *op, td__desc *a, td__desc *b, td__desc *c, td__desc *out)
{
    const td__desc *in[3] = {a, b, c};
    err[0] = '\0';
    return td__op_infer(op, in, out, err, sizeof err);
}

static void expect_shape(const td__desc *d, uint32_t dt, uint32_t rank, const int64_t *dims)
{
    cr_assert_eq(d->dtype, dt, "dtype %u, expected %u", d->dtype, dt);
    cr_assert_eq(d->rank, rank, "rank %u, expected %u", d->rank, rank);
    for (uint32_t i = 0; i < rank; i++) cr_assert_eq(d->dims[i], dims[i], "dim %u", i);
}

Test(op_infer, broadcast_binary)
{
    td__desc a = D(TD_F32, 2, (int64_t[]){3, 1}), b = D(TD_F32, 1, (int64_t[]){4}), o;
    td__op op = {.opcode = TD_OP_ADD, .n_inputs = 2};
    cr_assert_eq(infer(&op, &a, &b, NULL, &o), TD_OK, "%s", err);
    expect_shape(&o, TD_F32, 2, (int64_t[]){3, 4});
    td__desc s = D(TD_F32, 0, NULL), m = D(TD_F32, 2, (int64_t[]){2, 3});
    cr_assert_eq(infer(&op, &s, &m, NULL, &o), TD_OK);
    expect_shape(&o, TD_F32, 2, (int64_t[]){2, 3});
    td__desc z = D(TD_F32, 2, (int64_t[]){0, 3}), one = D(TD_F32, 1, (int64_t[]){1});
    cr_assert_eq(infer(&op, &z, &one, NULL, &o), TD_OK);
    expect_shape(&o, TD_F32, 2, (int64_t[]){0, 3});
}

Test(op_infer, broadcast_mismatch_names_shapes)
{
    td__desc a = D(TD_F32, 2, (int64_t[]){3, 2}), b = D(TD_F32, 1, (int64_t[]){4}), o;
    td__op op = {.opcode = TD_OP_MUL, .n_inputs = 2};
    cr_assert_eq(infer(&op, &a, &b, NULL, &o), TD_EINVAL);
    cr_assert(strstr(err, "mul") && strstr(err, "[3, 2]") && strstr(err, "[4]"), "%s", err);
}

Test(op_infer, dtype_rules)
{
    td__desc f = D(TD_F32, 1, (int64_t[]){2}), i = D(TD_I32, 1, (int64_t[]){2});
    td__desc bo = D(TD_BOOL, 1, (int64_t[]){2}), o;
    td__op add = {.opcode = TD_OP_ADD, .n_inputs = 2};
    cr_assert_eq(infer(&add, &f, &i, NULL, &o), TD_EINVAL);
    cr_assert(strstr(err, "f32") && strstr(err, "i32"), "%s", err);
    cr_assert_eq(infer(&add, &bo, &bo, NULL, &o), TD_EINVAL);
    td__op lt = {.opcode = TD_OP_LT, .n_inputs = 2};
    cr_assert_eq(infer(&lt, &i, &i, NULL, &o), TD_OK);
    cr_assert_eq(o.dtype, TD_BOOL);
    td__op ex = {.opcode = TD_OP_EXP, .n_inputs = 1};
    cr_assert_eq(infer(&ex, &i, NULL, NULL, &o), TD_EINVAL);
    cr_assert_eq(infer(&ex, &f, NULL, NULL, &o), TD_OK);
    td__op pw = {.opcode = TD_OP_POW, .n_inputs = 2}; /* integer pow is defined; bool is not */
    cr_assert_eq(infer(&pw, &i, &i, NULL, &o), TD_OK);
    cr_assert_eq(infer(&pw, &bo, &bo, NULL, &o), TD_EINVAL);
    td__op w = {.opcode = TD_OP_WHERE, .n_inputs = 3};
    cr_assert_eq(infer(&w, &bo, &f, &f, &o), TD_OK);
    cr_assert_eq(o.dtype, TD_F32);
    cr_assert_eq(infer(&w, &f, &f, &f, &o), TD_EINVAL);
    td__op c = {.opcode = TD_OP_CAST, .n_inputs = 1, .dtype = TD_I64};
    cr_assert_eq(infer(&c, &f, NULL, NULL, &o), TD_OK);
    cr_assert_eq(o.dtype, TD_I64);
    c.dtype = 99;
    cr_assert_eq(infer(&c, &f, NULL, NULL, &o), TD_EINVAL);
}

Test(op_infer, reduce_axes_and_keepdims)
{
    td__desc x = D(TD_F32, 3, (int64_t[]){2, 3, 4}), o;
    td__op op = {.opcode = TD_OP_SUM, .n_inputs = 1, .n_iattrs = 2, .iattrs = {0x5, 0}};
    cr_assert_eq(infer(&op, &x, NULL, NULL, &o), TD_OK);
    expect_shape(&o, TD_F32, 1, (int64_t[]){3});
    op.iattrs[1] = 1;
    cr_assert_eq(infer(&op, &x, NULL, NULL, &o), TD_OK);
    expect_shape(&o, TD_F32, 3, (int64_t[]){1, 3, 1});
    op.iattrs[0] = 0x8; /* axis 3 of a rank-3 tensor */
    cr_assert_eq(infer(&op, &x, NULL, NULL, &o), TD_EINVAL);
    td__op am = {.opcode = TD_OP_ARGMAX, .n_inputs = 1, .n_iattrs = 2, .iattrs = {0x3, 0}};
    cr_assert_eq(infer(&am, &x, NULL, NULL, &o), TD_OK, "two axes for argmax (issue 13)");
    expect_shape(&o, TD_I64, 1, (int64_t[]){4});
    am.iattrs[0] = 0x4;
    cr_assert_eq(infer(&am, &x, NULL, NULL, &o), TD_OK);
    expect_shape(&o, TD_I64, 2, (int64_t[]){2, 3});
    td__desc e = D(TD_F32, 2, (int64_t[]){0, 3});
    td__op mx = {.opcode = TD_OP_MAX, .n_inputs = 1, .n_iattrs = 2, .iattrs = {0x1, 0}};
    cr_assert_eq(infer(&mx, &e, NULL, NULL, &o), TD_EINVAL, "max over an empty axis");
    td__op sm = {.opcode = TD_OP_SUM, .n_inputs = 1, .n_iattrs = 2, .iattrs = {0x1, 0}};
    cr_assert_eq(infer(&sm, &e, NULL, NULL, &o), TD_OK);
    expect_shape(&o, TD_F32, 1, (int64_t[]){3});
    td__desc s = D(TD_F64, 0, NULL);
    sm.iattrs[0] = 0;
    cr_assert_eq(infer(&sm, &s, NULL, NULL, &o), TD_OK);
    cr_assert_eq(o.rank, 0);
}

Test(op_infer, matmul)
{
    td__desc a = D(TD_F32, 3, (int64_t[]){5, 2, 3}), b = D(TD_F32, 2, (int64_t[]){3, 4}), o;
    td__op op = {.opcode = TD_OP_MATMUL, .n_inputs = 2};
    cr_assert_eq(infer(&op, &a, &b, NULL, &o), TD_OK, "%s", err);
    expect_shape(&o, TD_F32, 3, (int64_t[]){5, 2, 4});
    td__desc c = D(TD_F32, 2, (int64_t[]){784, 256}), d = D(TD_F32, 2, (int64_t[]){783, 10});
    cr_assert_eq(infer(&op, &c, &d, NULL, &o), TD_EINVAL);
    cr_assert(strstr(err, "inner dims 256 and 783 differ"), "%s", err);
    td__desc v = D(TD_F32, 1, (int64_t[]){3});
    cr_assert_eq(infer(&op, &v, &b, NULL, &o), TD_EINVAL);
}

Test(op_infer, matmul_precision_attribute)
{
    td__desc a = D(TD_F32, 2, (int64_t[]){2, 3}), b = D(TD_F32, 2, (int64_t[]){3, 4}), o;
    td__op op = {.opcode = TD_OP_MATMUL, .n_inputs = 2};
    cr_assert_not(td__matmul_allows_tf32(&op), "absent means full precision");
    for (int64_t p = 0; p <= 1; p++) {
        op.n_iattrs = 1;
        op.iattrs[0] = p;
        cr_assert_eq(infer(&op, &a, &b, NULL, &o), TD_OK, "precision %lld: %s", (long long)p, err);
        expect_shape(&o, TD_F32, 2, (int64_t[]){2, 4});
        cr_assert_eq(td__matmul_allows_tf32(&op), p == 1);
    }
    /* a permission: also accepted (and ignored) for f64 and integer matmuls */
    td__desc ai = D(TD_I32, 2, (int64_t[]){2, 3}), bi = D(TD_I32, 2, (int64_t[]){3, 4});
    cr_assert_eq(infer(&op, &ai, &bi, NULL, &o), TD_OK, "%s", err);
    const int64_t bad[] = {2, -1, INT64_MIN};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        op.iattrs[0] = bad[i];
        cr_assert_eq(infer(&op, &a, &b, NULL, &o), TD_EINVAL);
        char want[96];
        snprintf(want, sizeof want, "matmul: precision %lld is not 0", (long long)bad[i]);
        cr_assert(strstr(err, want), "%s", err);
    }
    op.n_iattrs = 2;
    op.iattrs[0] = 1;
    cr_assert_eq(infer(&op, &a, &b, NULL, &o), TD_EINVAL);
    cr_assert(strstr(err, "matmul: expects at most 1 attribute (precision), got 2"), "%s", err);
}

Test(op_infer, movement)
{
    td__desc x = D(TD_F32, 3, (int64_t[]){2, 3, 4}), o;
    td__op p = {.opcode = TD_OP_PERMUTE, .n_inputs = 1, .n_iattrs = 3, .iattrs = {2, 0, 1}};
    cr_assert_eq(infer(&p, &x, NULL, NULL, &o), TD_OK);
    expect_shape(&o, TD_F32, 3, (int64_t[]){4, 2, 3});
    p.iattrs[2] = 0;
    cr_assert_eq(infer(&p, &x, NULL, NULL, &o), TD_EINVAL, "repeated perm entry");
    td__op s = {.opcode = TD_OP_SLICE, .n_inputs = 1, .n_iattrs = 6,
                .iattrs = {0, 1, 1, 2, 3, 4}};
    cr_assert_eq(infer(&s, &x, NULL, NULL, &o), TD_OK);
    expect_shape(&o, TD_F32, 3, (int64_t[]){2, 2, 3});
    s.iattrs[5] = 5;
    cr_assert_eq(infer(&s, &x, NULL, NULL, &o), TD_EINVAL);
    td__op r = {.opcode = TD_OP_RESHAPE, .n_inputs = 1, .n_iattrs = 2, .iattrs = {6, 4}};
    cr_assert_eq(infer(&r, &x, NULL, NULL, &o), TD_OK);
    expect_shape(&o, TD_F32, 2, (int64_t[]){6, 4});
    r.iattrs[1] = 5;
    cr_assert_eq(infer(&r, &x, NULL, NULL, &o), TD_EINVAL);
    td__desc y = D(TD_F32, 3, (int64_t[]){2, 5, 4});
    td__op c = {.opcode = TD_OP_CONCAT, .n_inputs = 2, .n_iattrs = 1, .iattrs = {1}};
    cr_assert_eq(infer(&c, &x, &y, NULL, &o), TD_OK);
    expect_shape(&o, TD_F32, 3, (int64_t[]){2, 8, 4});
    c.iattrs[0] = 0;
    cr_assert_eq(infer(&c, &x, &y, NULL, &o), TD_EINVAL);
    td__desc col = D(TD_F32, 2, (int64_t[]){3, 1});
    td__op e = {.opcode = TD_OP_EXPAND, .n_inputs = 1, .n_iattrs = 3, .iattrs = {2, 3, 5}};
    cr_assert_eq(infer(&e, &col, NULL, NULL, &o), TD_OK);
    expect_shape(&o, TD_F32, 3, (int64_t[]){2, 3, 5});
    e.iattrs[1] = 4;
    cr_assert_eq(infer(&e, &col, NULL, NULL, &o), TD_EINVAL);
}

Test(op_infer, gather_and_index_select)
{
    td__desc x = D(TD_F32, 2, (int64_t[]){128, 10}), lab = D(TD_I64, 2, (int64_t[]){128, 1}), o;
    td__op g = {.opcode = TD_OP_GATHER, .n_inputs = 2, .n_iattrs = 1, .iattrs = {1}};
    cr_assert_eq(infer(&g, &x, &lab, NULL, &o), TD_OK);
    expect_shape(&o, TD_F32, 2, (int64_t[]){128, 1});
    td__desc fl = D(TD_F32, 2, (int64_t[]){128, 1});
    cr_assert_eq(infer(&g, &x, &fl, NULL, &o), TD_EINVAL, "float index");
    td__desc emb = D(TD_F32, 2, (int64_t[]){1000, 64}), ids = D(TD_I32, 2, (int64_t[]){8, 16});
    td__op is = {.opcode = TD_OP_INDEX_SELECT, .n_inputs = 2, .n_iattrs = 1, .iattrs = {0}};
    cr_assert_eq(infer(&is, &emb, &ids, NULL, &o), TD_OK);
    expect_shape(&o, TD_F32, 3, (int64_t[]){8, 16, 64});
}

Test(op_infer, softmax_axis_dtype_and_length)
{
    td__desc x = D(TD_F32, 3, (int64_t[]){2, 5, 7}), o;
    td__op sm = {.opcode = TD_OP_SOFTMAX, .n_inputs = 1, .n_iattrs = 1, .iattrs = {1}};
    cr_assert_eq(infer(&sm, &x, NULL, NULL, &o), TD_OK, "%s", err);
    expect_shape(&o, TD_F32, 3, (int64_t[]){2, 5, 7});
    td__desc xd = D(TD_F64, 1, (int64_t[]){1}), empty_rows = D(TD_F32, 2, (int64_t[]){0, 4});
    td__op lsm = {.opcode = TD_OP_LOG_SOFTMAX, .n_inputs = 1, .n_iattrs = 1, .iattrs = {0}};
    cr_assert_eq(infer(&lsm, &xd, NULL, NULL, &o), TD_OK, "%s", err);
    expect_shape(&o, TD_F64, 1, (int64_t[]){1});
    lsm.iattrs[0] = 1;
    cr_assert_eq(infer(&lsm, &empty_rows, NULL, NULL, &o), TD_OK, "no rows is fine: %s", err);
    sm.iattrs[0] = 3;
    cr_assert_eq(infer(&sm, &x, NULL, NULL, &o), TD_EINVAL);
    cr_assert_str_eq(err, "softmax: axis 3 out of range for rank 3");
    sm.iattrs[0] = -1;
    cr_assert_eq(infer(&sm, &x, NULL, NULL, &o), TD_EINVAL);
    cr_assert_str_eq(err, "softmax: axis -1 out of range for rank 3");
    td__desc xi = D(TD_I32, 2, (int64_t[]){2, 3});
    lsm.iattrs[0] = 1;
    cr_assert_eq(infer(&lsm, &xi, NULL, NULL, &o), TD_EINVAL);
    cr_assert_str_eq(err, "log_softmax: needs a float dtype, got i32");
    lsm.iattrs[0] = 0;
    cr_assert_eq(infer(&lsm, &empty_rows, NULL, NULL, &o), TD_EINVAL);
    cr_assert_str_eq(err, "log_softmax: cannot normalise along zero-length axis 0");
    td__desc scalar = D(TD_F32, 0, NULL);
    sm.iattrs[0] = 0;
    cr_assert_eq(infer(&sm, &scalar, NULL, NULL, &o), TD_EINVAL);
    cr_assert_str_eq(err, "softmax: axis 0 out of range for rank 0");
    sm.n_iattrs = 2;
    cr_assert_eq(infer(&sm, &x, NULL, NULL, &o), TD_EINVAL);
    cr_assert_str_eq(err, "softmax: expects 1 attribute (axis), got 2");
    sm.n_iattrs = 1;
    sm.n_inputs = 2;
    cr_assert_eq(infer(&sm, &x, &x, NULL, &o), TD_EINVAL);
    cr_assert_str_eq(err, "softmax: expects 1 inputs, got 2");
    cr_assert_eq(td__op_class(TD_OP_SOFTMAX), TD_OPCLASS_SOFTMAX);
    cr_assert_str_eq(td__op_name(TD_OP_LOG_SOFTMAX), "log_softmax");
}

Test(op_infer, hostile_descs)
{
    td__op ex = {.opcode = TD_OP_NEG, .n_inputs = 1}, out_op;
    td__desc o;
    td__desc neg = D(TD_F32, 1, (int64_t[]){-1});
    cr_assert_eq(infer(&ex, &neg, NULL, NULL, &o), TD_EINVAL);
    cr_assert(strstr(err, "negative"), "%s", err);
    td__desc big = D(TD_F32, 2, (int64_t[]){INT64_MAX, 4});
    cr_assert_eq(infer(&ex, &big, NULL, NULL, &o), TD_EINVAL);
    td__desc r9 = D(TD_F32, 8, (int64_t[]){1, 1, 1, 1, 1, 1, 1, 1});
    r9.rank = 9;
    cr_assert_eq(infer(&ex, &r9, NULL, NULL, &o), TD_EINVAL);
    td__desc baddt = D(TD_DTYPE_COUNT, 1, (int64_t[]){2});
    cr_assert_eq(infer(&ex, &baddt, NULL, NULL, &o), TD_EINVAL);
    out_op = (td__op){.opcode = 511};
    cr_assert_eq(infer(&out_op, NULL, NULL, NULL, &o), TD_EINVAL);
    cr_assert(strstr(err, "unknown opcode 511"), "%s", err);
    td__op full = {.opcode = TD_OP_FULL, .dtype = TD_F32, .n_iattrs = 9};
    cr_assert_eq(infer(&full, NULL, NULL, NULL, &o), TD_EINVAL, "rank 9");
    td__op huge = {.opcode = TD_OP_EMPTY, .dtype = TD_F64, .n_iattrs = 3,
                   .iattrs = {1LL << 20, 1LL << 20, 1LL << 20}};
    cr_assert_eq(infer(&huge, NULL, NULL, NULL, &o), TD_EINVAL, "2^63 bytes");
    /* Empty, but its other dims multiply past int64 (a fuzz find: strides overflowed). */
    td__op empty_huge = {.opcode = TD_OP_EMPTY, .dtype = TD_F32, .n_iattrs = 3,
                         .iattrs = {1LL << 30, 1LL << 30, 0}};
    cr_assert_eq(infer(&empty_huge, NULL, NULL, NULL, &o), TD_EINVAL, "%s", err);
    cr_assert(strstr(err, "non-zero dims"), "%s", err);
    td__op empty_ok = {.opcode = TD_OP_EMPTY, .dtype = TD_F32, .n_iattrs = 3,
                       .iattrs = {0, 1LL << 20, 1LL << 20}};
    cr_assert_eq(infer(&empty_ok, NULL, NULL, NULL, &o), TD_OK, "%s", err);
    td__op arity = {.opcode = TD_OP_ADD, .n_inputs = 1};
    td__desc f = D(TD_F32, 0, NULL);
    cr_assert_eq(infer(&arity, &f, NULL, NULL, &o), TD_EINVAL);
    td__op rnd = {.opcode = TD_OP_RAND_NORMAL, .dtype = TD_I32, .n_iattrs = 1, .iattrs = {4}};
    cr_assert_eq(infer(&rnd, NULL, NULL, NULL, &o), TD_EINVAL);
}

/* Issue 13, item 2: the attribute rules of the new reductions, scans and sorts, refused with
 * a message naming the op and the value. */
static void expect_refusal(const td__op *op, const td__desc *x, const char *want)
{
    const td__desc *in[1] = {x};
    td__desc o;
    char msg[512] = "";
    cr_assert_eq(td__op_infer(op, in, &o, msg, sizeof msg), TD_EINVAL, "%s", want);
    cr_assert(strstr(msg, want) != NULL, "got \"%s\", want \"%s\"", msg, want);
}

Test(op_infer, reductions_scans_sorts)
{
    td__desc x = D(TD_F32, 2, (int64_t[]){2, 3}), s0 = D(TD_F32, 0, (int64_t[]){0}), o;
    td__op v = {.opcode = TD_OP_VAR, .n_inputs = 1, .n_iattrs = 2, .iattrs = {0x2, 0},
                .fattrs = {-1, 0}};
    expect_refusal(&v, &x, "var: correction -1 is negative");
    v.fattrs[0] = NAN;
    expect_refusal(&v, &x, "var: correction is NaN");
    v.opcode = TD_OP_STD;
    v.fattrs[0] = 2.5;
    cr_assert_eq(infer(&v, &x, NULL, NULL, &o), TD_OK);
    expect_shape(&o, TD_F32, 1, (int64_t[]){2});
    td__op nm = {.opcode = TD_OP_NORM, .n_inputs = 1, .n_iattrs = 2, .iattrs = {0x3, 1},
                 .fattrs = {NAN, 0}};
    expect_refusal(&nm, &x, "norm: p is NaN");
    nm.fattrs[0] = -0.5;
    cr_assert_eq(infer(&nm, &x, NULL, NULL, &o), TD_OK);
    expect_shape(&o, TD_F32, 2, (int64_t[]){1, 1});
    td__desc xi = D(TD_I32, 2, (int64_t[]){2, 3});
    td__op an = {.opcode = TD_OP_ANY, .n_inputs = 1, .n_iattrs = 2, .iattrs = {0x1, 0}};
    cr_assert_eq(infer(&an, &xi, NULL, NULL, &o), TD_OK);
    expect_shape(&o, TD_BOOL, 1, (int64_t[]){3});
    nm.opcode = TD_OP_VAR;
    nm.fattrs[0] = 1;
    expect_refusal(&nm, &xi, "var: needs a float dtype, got i32");
    td__op tk = {.opcode = TD_OP_TOPK_VALUES, .n_inputs = 1, .n_iattrs = 3, .iattrs = {1, 4, 1}};
    expect_refusal(&tk, &x, "topk_values: k 4 exceeds the length 3 of axis 1");
    tk.iattrs[1] = -1;
    expect_refusal(&tk, &x, "topk_values: k -1 is negative");
    tk.iattrs[1] = 2;
    tk.iattrs[0] = 2;
    expect_refusal(&tk, &x, "topk_values: axis 2 out of range for rank 2");
    tk.iattrs[0] = 1;
    tk.opcode = TD_OP_TOPK_INDICES;
    cr_assert_eq(infer(&tk, &x, NULL, NULL, &o), TD_OK);
    expect_shape(&o, TD_I64, 2, (int64_t[]){2, 2});
    tk.iattrs[0] = 0;
    tk.iattrs[1] = 1;
    cr_assert_eq(infer(&tk, &s0, NULL, NULL, &o), TD_OK, "rank 0: k 1 along axis 0");
    expect_shape(&o, TD_I64, 0, (int64_t[]){0});
    tk.iattrs[2] = 2;
    expect_refusal(&tk, &x, "topk_indices: largest 2 is not 0 (smallest) or 1 (largest)");
    td__op st = {.opcode = TD_OP_SORT, .n_inputs = 1, .n_iattrs = 2, .iattrs = {-1, 0}};
    expect_refusal(&st, &x, "sort: axis -1 out of range for rank 2");
    st.iattrs[0] = 0;
    cr_assert_eq(infer(&st, &s0, NULL, NULL, &o), TD_OK);
    td__op cs = {.opcode = TD_OP_CUMSUM, .n_inputs = 1, .n_iattrs = 1, .iattrs = {1}};
    td__desc b = D(TD_BOOL, 1, (int64_t[]){3});
    cs.iattrs[0] = 0;
    expect_refusal(&cs, &b, "cumsum: needs a numeric dtype, got bool");
}

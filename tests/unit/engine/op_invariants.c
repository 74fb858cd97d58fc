/* Invariant test for engine/op.c: for EVERY opcode of TD_OP_TABLE and every dtype,
 * td__op_infer runs on adversarial input shapes (products near 2^62, 2^63 and 2^64,
 * zero-length dims next to huge ones, rank 8, broadcast pairs and triples that multiply up,
 * dtype-widening casts and gathers) and every output must either be refused with a message
 * naming the op, or be a desc that td__desc_check accepts and whose byte size fits
 * TD_MAX_TENSOR_BYTES.
 *
 * Why this shape of test: the heap overflow of issue 10 came from a shape rule (broadcast)
 * whose result skipped the checked constructor; a unit test per rule only covers the rules
 * someone thought of. This one walks the whole table, so a new rule that forgets the check
 * fails here without anyone writing a test for it.
 *
 * Expected sizes are computed here, independently of engine/op.c, in unsigned __int128:
 * the element count, and the "span" (product of the non-zero dims) in bytes, which op.h's
 * contract bounds by TD_MAX_TENSOR_BYTES so that strides fit int64. */
#include "engine/op.h"
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

__extension__ typedef unsigned __int128 u128;

static const uint32_t opcodes[] = {
#define X_OPCODE(name, ...) TD_OP_##name,
    TD_OP_TABLE(X_OPCODE)
#undef X_OPCODE
};
#define N_OPCODES (sizeof opcodes / sizeof opcodes[0])

/* Element sizes from the dtype table in tensord.h, written out here on purpose. */
static u128 elem_size(uint32_t dt)
{
    /* f32 f64 i32 i64 u8 bool f16 bf16 i8 i16 */
    static const unsigned sz[TD_DTYPE_COUNT] = {4, 8, 4, 8, 1, 1, 2, 2, 1, 2};
    return dt < TD_DTYPE_COUNT ? sz[dt] : 0;
}

#define P(k) ((int64_t)1 << (k))

/* Shapes (dtype set per use). */
typedef struct shape {
    uint32_t rank;
    int64_t dims[TD_MAX_RANK];
} shape;

static const shape pool[] = {
    {0, {0}},
    {1, {1}},
    {1, {0}},
    {1, {7}},
    {2, {3, 1}},
    {2, {1, 4}},
    {1, {P(62)}},
    {1, {P(62) + 7}},
    {1, {INT64_MAX}},
    {1, {P(46)}},
    {1, {P(47)}},
    {1, {P(48)}},
    {2, {P(31), P(31)}},
    {2, {P(31), 1}},
    {2, {1, P(31)}},
    {2, {P(32), P(32)}},
    {2, {P(24), P(24)}},
    {3, {3161593, 1, 1}},   /* issue 10: WHERE of these three is 2^62 + 7 elements */
    {3, {1, 2438809, 1}},
    {3, {1, 1, 598103}},
    {3, {P(21), 1, 1}},     /* with the next two: exactly 2^62 elements */
    {3, {1, P(21), 1}},
    {3, {1, 1, P(20)}},
    {4, {1, 1, P(40), 0}},  /* issue 10: with the next, a UBSan find in the count helpers */
    {4, {P(12), P(12), 1, 1}},
    {3, {0, P(40), P(40)}}, /* empty, but its other dims overflow int64 */
    {3, {0, P(20), P(20)}}, /* empty, and within the limit */
    {3, {P(30), P(30), 0}},
    {8, {P(8), P(8), P(8), P(8), P(8), P(8), P(8), P(8)}}, /* 2^64 */
    {8, {P(6), P(6), P(6), P(6), P(6), P(6), P(6), P(6)}}, /* 2^48 */
    {8, {P(6), P(6), P(6), P(6), 1, 1, 1, 1}},
    {8, {1, 1, 1, 1, P(6), P(6), P(6), P(6)}},
    {8, {2, 1, 2, 1, 2, 1, 2, 1}},
    {8, {0, P(8), P(8), P(8), P(8), P(8), P(8), P(8)}},
    {2, {P(20), P(20)}},
    {3, {P(16), 1, P(16)}},
    {3, {1, P(32), 1}},
};
#define N_POOL (sizeof pool / sizeof pool[0])

static td__desc mk(uint32_t dt, const shape *s)
{
    td__desc d = {.dtype = dt, .rank = s->rank};
    memcpy(d.dims, s->dims, sizeof d.dims);
    return d;
}

/* The contract of op.h, computed independently: true when d is a desc a backend may get. */
static bool fits(const td__desc *d, u128 *nelem, u128 *nbytes)
{
    if (d->dtype >= TD_DTYPE_COUNT || d->rank > TD_MAX_RANK) return false;
    const u128 cap = (u128)1 << 100; /* clamp: anything this big is over the limit anyway */
    u128 span = 1;
    bool empty = false;
    for (uint32_t i = 0; i < d->rank; i++) {
        if (d->dims[i] < 0) return false;
        if (d->dims[i] == 0) {
            empty = true;
        } else {
            span *= (u128)d->dims[i];
            if (span > cap) span = cap;
        }
    }
    *nelem = empty ? 0 : span;
    *nbytes = *nelem * elem_size(d->dtype);
    return span * elem_size(d->dtype) <= (u128)TD_MAX_TENSOR_BYTES &&
           *nbytes <= (u128)TD_MAX_TENSOR_BYTES;
}

static unsigned long n_calls, n_accepted, n_refused_output;

/* Run one op; check the invariant on whatever comes back. */
static void check(const td__op *op, const td__desc *in)
{
    const td__desc *pin[TD_OP_MAX_INPUTS];
    for (uint32_t i = 0; i < op->n_inputs && i < TD_OP_MAX_INPUTS; i++) pin[i] = &in[i];
    td__desc out;
    memset(&out, 0xa5, sizeof out);
    char err[512] = "";
    n_calls++;
    td_status st = td__op_infer(op, pin, &out, err, sizeof err);
    const char *name = td__op_name(op->opcode);
    char in0[96] = "-";
    if (op->n_inputs > 0) td__desc_str(&in[0], in0, sizeof in0);
    if (st != TD_OK) {
        cr_assert_eq(st, TD_EINVAL, "%s (input 0 %s): status %d, expected TD_EINVAL: %s", name,
                     in0, st, err);
        size_t nl = strlen(name);
        cr_assert(strncmp(err, name, nl) == 0 && err[nl] == ':' && strlen(err) > nl + 2,
                  "%s: refusal message does not name the op: \"%s\"", name, err);
        if (strstr(err, "output shape")) n_refused_output++;
        return;
    }
    n_accepted++;
    u128 ne, nb;
    char os[200];
    td__desc_str(&out, os, sizeof os);
    cr_assert(fits(&out, &ne, &nb),
              "%s (input 0 %s, %u inputs) accepted output %s whose size exceeds the limit", name,
              in0, op->n_inputs, os);
    char cerr[512];
    cr_assert_eq(td__desc_check(&out, cerr, sizeof cerr), TD_OK, "%s: output %s: %s", name, os,
                 cerr);
    cr_assert_eq((u128)td__desc_nelem(&out), ne, "%s: td__desc_nelem of %s", name, os);
    cr_assert_eq((u128)td__desc_nbytes(&out), nb, "%s: td__desc_nbytes of %s", name, os);
}

static void check_dims_attr(td__op *op, const shape *s)
{
    op->n_iattrs = s->rank;
    for (uint32_t i = 0; i < s->rank; i++) op->iattrs[i] = s->dims[i];
}

/* Every pool shape with every applicable attribute set, for one opcode and dtype. */
static void walk(uint32_t oc, uint32_t dt)
{
    td__desc in[TD_OP_MAX_INPUTS];
    td__op op = {.opcode = oc, .dtype = dt};
    switch (td__op_class(oc)) {
    case TD_OPCLASS_CREATE:
        for (size_t a = 0; a < N_POOL; a++) {
            if (oc == TD_OP_ARANGE) {
                op.n_iattrs = 1;
                op.iattrs[0] = pool[a].rank ? pool[a].dims[0] : 0;
            } else {
                check_dims_attr(&op, &pool[a]);
            }
            check(&op, in);
        }
        break;
    case TD_OPCLASS_UNARY: case TD_OPCLASS_SOFTMAX: case TD_OPCLASS_REDUCE:
    case TD_OPCLASS_CAST:
        op.n_inputs = 1;
        for (size_t a = 0; a < N_POOL; a++) {
            in[0] = mk(dt, &pool[a]);
            if (td__op_class(oc) == TD_OPCLASS_CAST) {
                for (uint32_t to = 0; to < TD_DTYPE_COUNT; to++) {
                    op.dtype = to;
                    check(&op, in);
                }
            } else if (td__op_class(oc) == TD_OPCLASS_SOFTMAX) {
                op.n_iattrs = 1;
                for (int64_t ax = 0; ax < 8; ax++) {
                    op.iattrs[0] = ax;
                    check(&op, in);
                }
            } else if (td__op_class(oc) == TD_OPCLASS_REDUCE) {
                op.n_iattrs = 2;
                for (int64_t m = 0; m < 256; m = m ? m * 2 : 1) {
                    for (int keep = 0; keep < 2; keep++) {
                        op.iattrs[0] = m;
                        op.iattrs[1] = keep;
                        check(&op, in);
                        op.iattrs[0] = 255 >> (8 - pool[a].rank);
                        check(&op, in);
                    }
                }
            } else {
                check(&op, in);
            }
        }
        break;
    case TD_OPCLASS_NN:
        /* x (and dy) from the pool with every axis or group count; the parameters get the
         * shape the op needs, and once a wrong one */
        for (size_t a = 0; a < N_POOL; a++) {
            const bool bwd = oc == TD_OP_LAYER_NORM_BACKWARD || oc == TD_OP_RMS_NORM_BACKWARD ||
                             oc == TD_OP_GROUP_NORM_BACKWARD || oc == TD_OP_BATCH_NORM_BACKWARD;
            const td__op_row *r = td__op_row_of(oc);
            for (int64_t at = -1; at < 9; at++)
                for (int bad = 0; bad < 2; bad++) {
                    const uint32_t xi = bwd ? 1 : 0;
                    in[0] = mk(dt, &pool[a]);
                    in[xi] = in[0];
                    td__desc pd = {.dtype = dt};
                    const bool per_c = oc == TD_OP_GROUP_NORM || oc == TD_OP_BATCH_NORM ||
                                       oc == TD_OP_GROUP_NORM_BACKWARD ||
                                       oc == TD_OP_BATCH_NORM_BACKWARD;
                    if (per_c) {
                        pd.rank = 1;
                        pd.dims[0] = pool[a].rank > 1 ? pool[a].dims[1] : 1;
                    } else {
                        for (int64_t i = at < 0 ? 0 : at; i < (int64_t)pool[a].rank; i++)
                            pd.dims[pd.rank++] = pool[a].dims[i];
                    }
                    if (bad) pd.dims[0] = pd.dims[0] != 7 ? 7 : 8;
                    op.n_inputs = r->max_inputs;
                    for (uint32_t k = xi + 1; k < op.n_inputs; k++) in[k] = pd;
                    op.n_iattrs = r->attrs.layout == TD_ATTRS_NONE ? 0 : 1;
                    op.iattrs[0] = at;
                    op.fattrs[0] = 1e-5;
                    check(&op, in);
                }
        }
        break;
    case TD_OPCLASS_CONV: case TD_OPCLASS_POOL: {
        /* every pair of pool shapes as input 0 and input 1 (weight, dy, indices; a third,
         * the bias, is input 1 again), attributes all 1 (groups, strides, dilations, pads,
         * kernels, sizes, modes) or with huge sizes */
        const td__op_row *row = td__op_row_of(oc);
        op.n_inputs = row->max_inputs;
        for (size_t a = 0; a < N_POOL; a++)
            for (size_t b = 0; b < N_POOL; b++)
                for (int big = 0; big < 2; big++) {
                    /* input 0 of another rank is refused before input 1 is read: one b */
                    if ((pool[a].rank < 3 || pool[a].rank > 5) && b != a) continue;
                    in[0] = mk(dt, &pool[a]);
                    in[1] = mk(oc == TD_OP_MAX_POOL_BACKWARD ? TD_I64 : dt, &pool[b]);
                    in[2] = in[1];
                    /* ranks above 5 are refused by rank: any count within the limit */
                    uint32_t nsp = pool[a].rank >= 3 && pool[a].rank <= 5 ? pool[a].rank - 2 : 1;
                    op.n_iattrs = row->attrs.n + (uint32_t)row->attrs.a[2].lo * nsp;
                    for (uint32_t i = 0; i < op.n_iattrs; i++)
                        op.iattrs[i] = big && i >= row->attrs.n ? P(31) : 1;
                    check(&op, in);
                }
        break;
    }
    case TD_OPCLASS_SCAN: case TD_OPCLASS_SORT:
        op.n_inputs = 1;
        for (size_t a = 0; a < N_POOL; a++) {
            in[0] = mk(dt, &pool[a]);
            for (int64_t ax = -1; ax < 9; ax++)
                for (int64_t k = -1; k < 3; k++) {
                    op.iattrs[0] = ax;
                    if (td__op_class(oc) == TD_OPCLASS_SCAN) {
                        op.n_iattrs = 1;
                        if (k > -1) continue;
                    } else if (oc == TD_OP_TOPK_VALUES || oc == TD_OP_TOPK_INDICES) {
                        op.n_iattrs = 3;
                        op.iattrs[1] = k < 2 ? k : P(62);
                        op.iattrs[2] = 1;
                    } else {
                        op.n_iattrs = 2;
                        op.iattrs[1] = k & 1;
                    }
                    check(&op, in);
                }
        }
        break;
    case TD_OPCLASS_BINARY: case TD_OPCLASS_COMPARE: case TD_OPCLASS_MATMUL:
        op.n_inputs = 2;
        for (size_t a = 0; a < N_POOL; a++) {
            for (size_t b = 0; b < N_POOL; b++) {
                in[0] = mk(dt, &pool[a]);
                in[1] = mk(dt, &pool[b]);
                check(&op, in);
            }
        }
        break;
    case TD_OPCLASS_WHERE:
        op.n_inputs = 3;
        for (size_t c = 0; c < N_POOL; c++) {
            for (size_t a = 0; a < N_POOL; a++) {
                for (size_t b = 0; b < N_POOL; b++) {
                    in[0] = mk(TD_BOOL, &pool[c]);
                    in[1] = mk(dt, &pool[a]);
                    in[2] = mk(dt, &pool[b]);
                    check(&op, in);
                }
            }
        }
        break;
    case TD_OPCLASS_MOVEMENT:
        for (size_t a = 0; a < N_POOL; a++) {
            const shape *s = &pool[a];
            in[0] = mk(dt, s);
            op.n_inputs = 1;
            op.n_iattrs = 0;
            switch (oc) {
            case TD_OP_COPY:
                check(&op, in);
                break;
            case TD_OP_RESHAPE: case TD_OP_EXPAND:
                for (size_t b = 0; b < N_POOL; b++) {
                    check_dims_attr(&op, &pool[b]);
                    check(&op, in);
                }
                break;
            case TD_OP_PERMUTE:
                op.n_iattrs = s->rank;
                for (uint32_t i = 0; i < s->rank; i++) op.iattrs[i] = s->rank - 1 - i;
                check(&op, in);
                break;
            case TD_OP_SLICE:
                op.n_iattrs = 2 * s->rank;
                for (uint32_t i = 0; i < s->rank; i++) {
                    op.iattrs[i] = 0;
                    op.iattrs[s->rank + i] = s->dims[i];
                }
                check(&op, in);
                break;
            case TD_OP_CONCAT:
                op.n_iattrs = 1;
                for (uint32_t n = 1; n <= TD_OP_MAX_INPUTS; n++) {
                    op.n_inputs = n;
                    for (uint32_t k = 0; k < n; k++) in[k] = mk(dt, s);
                    for (int64_t ax = 0; ax < (int64_t)s->rank; ax++) {
                        op.iattrs[0] = ax;
                        check(&op, in);
                    }
                }
                break;
            case TD_OP_GATHER: case TD_OP_INDEX_SELECT:
                op.n_inputs = 2;
                op.n_iattrs = 1;
                for (size_t b = 0; b < N_POOL; b++) {
                    for (uint32_t idt = TD_I32; idt <= TD_I64; idt++) {
                        in[1] = mk(idt, &pool[b]);
                        for (int64_t ax = 0; ax < (int64_t)s->rank; ax++) {
                            op.iattrs[0] = ax;
                            check(&op, in);
                        }
                    }
                }
                break;
            case TD_OP_SLICE_STEP: {
                /* whole, reversed, and the largest step */
                const uint32_t r = s->rank;
                op.n_iattrs = 3 * r;
                for (int v = 0; v < 3; v++) {
                    for (uint32_t i = 0; i < r; i++) {
                        int64_t n = s->dims[i];
                        op.iattrs[i] = v == 1 ? n - 1 : 0;
                        op.iattrs[r + i] = v == 1 ? -1 : n;
                        op.iattrs[2 * r + i] = v == 1 ? -1 : v == 2 ? P(62) : 1;
                    }
                    check(&op, in);
                }
                break;
            }
            case TD_OP_FLIP:
                op.n_iattrs = 1;
                op.iattrs[0] = s->rank ? (int64_t)((1u << s->rank) - 1) : 0;
                check(&op, in);
                break;
            case TD_OP_ROLL: case TD_OP_REPEAT: case TD_OP_TRIL: case TD_OP_TRIU: {
                static const int64_t vals[] = {0, 1, 2, P(31), P(62), INT64_MAX, INT64_MIN};
                const bool tri = oc == TD_OP_TRIL || oc == TD_OP_TRIU;
                op.n_iattrs = tri ? 1 : s->rank;
                for (size_t v = 0; v < sizeof vals / sizeof vals[0]; v++) {
                    for (uint32_t i = 0; i < op.n_iattrs; i++) op.iattrs[i] = vals[v];
                    check(&op, in);
                }
                break;
            }
            case TD_OP_PAD: {
                static const int64_t vals[] = {0, 1, P(31), P(62), INT64_MAX};
                op.n_iattrs = 1 + 2 * s->rank;
                for (int64_t mode = 0; mode < 4; mode++) {
                    for (size_t v = 0; v < sizeof vals / sizeof vals[0]; v++) {
                        op.iattrs[0] = mode;
                        for (uint32_t i = 1; i < op.n_iattrs; i++) op.iattrs[i] = vals[v];
                        check(&op, in);
                    }
                }
                break;
            }
            case TD_OP_ONE_HOT: {
                static const int64_t vals[] = {1, 7, P(31), P(47), INT64_MAX};
                op.n_iattrs = 1;
                for (uint32_t idt = TD_I32; idt <= TD_I64; idt++) {
                    in[0] = mk(idt, s);
                    for (size_t v = 0; v < sizeof vals / sizeof vals[0]; v++) {
                        op.iattrs[0] = vals[v];
                        check(&op, in);
                    }
                }
                break;
            }
            case TD_OP_MASKED_FILL:
                op.n_inputs = 2;
                for (size_t b = 0; b < N_POOL; b++) {
                    in[1] = mk(TD_BOOL, &pool[b]);
                    check(&op, in);
                }
                break;
            case TD_OP_SCATTER: case TD_OP_SCATTER_ADD: case TD_OP_INDEX_ADD:
                op.n_inputs = 3;
                op.n_iattrs = 1;
                for (size_t b = 0; b < N_POOL; b++) {
                    in[1] = mk(TD_I64, &pool[b]);
                    /* src shaped as the index, or as x (the rules' two extremes) */
                    for (int c = 0; c < 2; c++) {
                        in[2] = mk(dt, c ? s : &pool[b]);
                        for (int64_t ax = 0; ax < (int64_t)s->rank; ax++) {
                            op.iattrs[0] = ax;
                            check(&op, in);
                        }
                    }
                }
                break;
            case TD_OP_GATHER_ND:
                op.n_inputs = 2;
                for (size_t b = 0; b < N_POOL; b++) {
                    for (uint32_t idt = TD_I32; idt <= TD_I64; idt++) {
                        in[1] = mk(idt, &pool[b]);
                        check(&op, in);
                    }
                }
                break;
            default:
                cr_assert_fail("movement opcode %u (%s) not walked: extend this test", oc,
                               td__op_name(oc));
            }
        }
        break;
    case TD_OPCLASS_NONE:
        cr_assert_fail("opcode %u of the table has no class", oc);
    }
}

Test(op_invariants, every_op_every_dtype_adversarial_shapes, .timeout = 300)
{
    for (size_t k = 0; k < N_OPCODES; k++)
        for (uint32_t dt = 0; dt < TD_DTYPE_COUNT; dt++) walk(opcodes[k], dt);
    /* The walk must have reached both sides of the check, or it proves nothing. */
    cr_assert_gt(n_accepted, 1000, "only %lu of %lu calls accepted", n_accepted, n_calls);
    cr_assert_gt(n_refused_output, 100, "only %lu outputs refused as too large",
                 n_refused_output);
}

/* A handful of shapes mixed with extra entries that make broadcasts multiply up, checked
 * for WHERE in every argument position (the heap overflow). */
Test(op_invariants, where_overflow_repro_is_einval)
{
    const shape s3[3] = {{3, {3161593, 1, 1}}, {3, {1, 2438809, 1}}, {3, {1, 1, 598103}}};
    td__op op = {.opcode = TD_OP_WHERE, .n_inputs = 3};
    int perm[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
    for (int p = 0; p < 6; p++) {
        td__desc in[3] = {mk(TD_BOOL, &s3[perm[p][0]]), mk(TD_F32, &s3[perm[p][1]]),
                          mk(TD_F32, &s3[perm[p][2]])};
        const td__desc *pin[3] = {&in[0], &in[1], &in[2]};
        td__desc out;
        char err[512] = "";
        cr_assert_eq(td__op_infer(&op, pin, &out, err, sizeof err), TD_EINVAL,
                     "permutation %d accepted", p);
        /* 3161593 * 2438809 * 598103 = 2^62 + 7 (worked out by hand, and by the u128 here) */
        cr_assert_eq((u128)3161593 * 2438809 * 598103, ((u128)1 << 62) + 7);
        cr_assert(strstr(err, "where: output shape [") && strstr(err, "too large"), "%s", err);
    }
    /* exactly 2^62 elements: the byte size would wrap to 0 */
    const shape e[3] = {{3, {P(21), 1, 1}}, {3, {1, P(21), 1}}, {3, {1, 1, P(20)}}};
    td__desc in[3] = {mk(TD_BOOL, &e[0]), mk(TD_F32, &e[1]), mk(TD_F32, &e[2])};
    const td__desc *pin[3] = {&in[0], &in[1], &in[2]};
    td__desc out;
    char err[512] = "";
    cr_assert_eq(td__op_infer(&op, pin, &out, err, sizeof err), TD_EINVAL);
    cr_assert(strstr(err, "where: output shape [2097152, 2097152, 1048576] of f32 is too large"),
              "%s", err);
}

/* Oversized broadcasts are TD_EINVAL (a bad request), not TD_ENOMEM from an allocation. */
Test(op_invariants, oversized_broadcast_binary_and_compare)
{
    td__desc a = {.dtype = TD_F32, .rank = 2, .dims = {P(31), 1}};
    td__desc b = {.dtype = TD_F32, .rank = 2, .dims = {1, P(31)}};
    const td__desc *pin[2] = {&a, &b};
    td__desc out;
    char err[512];
    td__op add = {.opcode = TD_OP_ADD, .n_inputs = 2};
    cr_assert_eq(td__op_infer(&add, pin, &out, err, sizeof err), TD_EINVAL);
    cr_assert(strstr(err, "add: output shape [2147483648, 2147483648] of f32 is too large"), "%s",
              err);
    td__op lt = {.opcode = TD_OP_LT, .n_inputs = 2};
    cr_assert_eq(td__op_infer(&lt, pin, &out, err, sizeof err), TD_EINVAL);
    cr_assert(strstr(err, "lt: output shape") && strstr(err, "of bool"), "%s", err);
    /* the UBSan case of the issue: u8 [1,1,2^40,0] + [2^12,2^12,1,1] is empty, but its
     * non-zero dims span 2^64 */
    td__desc c = {.dtype = TD_U8, .rank = 4, .dims = {1, 1, P(40), 0}};
    td__desc d = {.dtype = TD_U8, .rank = 4, .dims = {P(12), P(12), 1, 1}};
    const td__desc *pcd[2] = {&c, &d};
    cr_assert_eq(td__op_infer(&add, pcd, &out, err, sizeof err), TD_EINVAL);
    cr_assert(strstr(err, "no elements") && strstr(err, "non-zero dims"), "%s", err);
    /* a cast that widens past the limit */
    td__desc u = {.dtype = TD_U8, .rank = 1, .dims = {P(48)}};
    const td__desc *pu[1] = {&u};
    td__op cast = {.opcode = TD_OP_CAST, .n_inputs = 1, .dtype = TD_F64};
    cr_assert_eq(td__op_infer(&cast, pu, &out, err, sizeof err), TD_EINVAL);
    cr_assert(strstr(err, "cast: output shape [281474976710656] of f64 is too large"), "%s", err);
}

/* td__desc_nelem / td__desc_nbytes on descs that never passed the check: defined results,
 * no signed overflow (run under UBSan in the asan build). */
Test(op_invariants, count_helpers_on_unchecked_descs)
{
    td__desc z = {.dtype = TD_U8, .rank = 4, .dims = {P(12), P(12), P(40), 0}};
    cr_assert_eq(td__desc_nelem(&z), 0);
    cr_assert_eq(td__desc_nbytes(&z), 0);
    td__desc big = {.dtype = TD_F32, .rank = 3, .dims = {3161593, 2438809, 598103}};
    cr_assert_eq(td__desc_nelem(&big), ((int64_t)1 << 62) + 7, "fits int64");
    cr_assert_eq(td__desc_nbytes(&big), SIZE_MAX, "bytes overflow: SIZE_MAX, not 28");
    td__desc ovf = {.dtype = TD_F32, .rank = 2, .dims = {P(32), P(32)}};
    cr_assert_eq(td__desc_nelem(&ovf), -1);
    cr_assert_eq(td__desc_nbytes(&ovf), SIZE_MAX);
    td__desc neg = {.dtype = TD_F32, .rank = 1, .dims = {-3}};
    cr_assert_eq(td__desc_nelem(&neg), -1);
    td__desc r8 = {.dtype = TD_F64, .rank = 8, .dims = {2, 3, 1, 1, 1, 1, 1, 5}};
    cr_assert_eq(td__desc_nelem(&r8), 30);
    cr_assert_eq(td__desc_nbytes(&r8), 240);
    td__desc scalar = {.dtype = TD_I64, .rank = 0};
    cr_assert_eq(td__desc_nelem(&scalar), 1);
    cr_assert_eq(td__desc_nbytes(&scalar), 8);
}

/* [0, 2^40, 2^40]: refused with an accurate message (op.h: the non-zero dims must stay in
 * the byte limit so strides fit int64), not "element count overflows". */
Test(op_invariants, empty_shape_with_huge_dims_message)
{
    td__desc d = {.dtype = TD_F32, .rank = 3, .dims = {0, P(40), P(40)}};
    char err[512];
    cr_assert_eq(td__desc_check(&d, err, sizeof err), TD_EINVAL);
    cr_assert(strstr(err, "[0, 1099511627776, 1099511627776]") && strstr(err, "no elements") &&
                  !strstr(err, "overflows"),
              "%s", err);
    td__desc ok = {.dtype = TD_F32, .rank = 3, .dims = {0, P(20), P(20)}};
    cr_assert_eq(td__desc_check(&ok, err, sizeof err), TD_OK, "%s", err);
    td__desc limit = {.dtype = TD_U8, .rank = 2, .dims = {P(24), P(24)}};
    cr_assert_eq(td__desc_check(&limit, err, sizeof err), TD_OK, "exactly 2^48 bytes: %s", err);
    limit.dims[1]++;
    cr_assert_eq(td__desc_check(&limit, err, sizeof err), TD_EINVAL);
}

/* Item 6: every op checks its exact attribute count. A valid baseline per op, then one
 * attribute too many must be refused with a message naming the op and the count. Ops whose
 * attributes are a shape (EMPTY FULL RAND_* RESHAPE EXPAND) are skipped: one more entry is
 * a different, valid shape. */
Test(op_invariants, extra_attribute_refused_for_every_op)
{
    const td__desc x = {.dtype = TD_F32, .rank = 2, .dims = {2, 3}};
    const td__desc m = {.dtype = TD_F32, .rank = 2, .dims = {3, 4}};
    const td__desc cond = {.dtype = TD_BOOL, .rank = 2, .dims = {2, 3}};
    const td__desc idx = {.dtype = TD_I64, .rank = 2, .dims = {2, 1}};
    const td__desc idx1 = {.dtype = TD_I64, .rank = 1, .dims = {2}};
    const td__desc cvec = {.dtype = TD_F32, .rank = 1, .dims = {3}};
    int checked = 0;
    for (size_t k = 0; k < N_OPCODES; k++) {
        uint32_t oc = opcodes[k];
        td__op op = {.opcode = oc, .dtype = TD_F32};
        const td__desc *in[3] = {&x, &x, &x};
        switch (td__op_class(oc)) {
        case TD_OPCLASS_CREATE:
            if (oc != TD_OP_ARANGE) continue;
            op.n_iattrs = 1;
            op.iattrs[0] = 5;
            break;
        case TD_OPCLASS_UNARY: case TD_OPCLASS_CAST: op.n_inputs = 1; break;
        case TD_OPCLASS_BINARY: case TD_OPCLASS_COMPARE: op.n_inputs = 2; break;
        case TD_OPCLASS_WHERE: op.n_inputs = 3; in[0] = &cond; break;
        case TD_OPCLASS_REDUCE:
            op.n_inputs = 1;
            op.n_iattrs = 2;
            op.iattrs[0] = 1;
            break;
        case TD_OPCLASS_SOFTMAX: op.n_inputs = 1; op.n_iattrs = 1; op.iattrs[0] = 1; break;
        case TD_OPCLASS_SCAN: op.n_inputs = 1; op.n_iattrs = 1; op.iattrs[0] = 1; break;
        case TD_OPCLASS_SORT:
            op.n_inputs = 1;
            op.n_iattrs = oc == TD_OP_TOPK_VALUES || oc == TD_OP_TOPK_INDICES ? 3 : 2;
            op.iattrs[0] = 1;
            op.iattrs[1] = 1;
            break;
        case TD_OPCLASS_MATMUL:
            op.n_inputs = 2;
            in[1] = &m;
            op.n_iattrs = 1; /* precision: 0 or 1 attributes are valid */
            break;
        case TD_OPCLASS_MOVEMENT:
            op.n_inputs = 1;
            if (oc == TD_OP_RESHAPE || oc == TD_OP_EXPAND) continue;
            if (oc == TD_OP_PERMUTE) {
                op.n_iattrs = 2;
                op.iattrs[0] = 1;
            } else if (oc == TD_OP_SLICE) {
                op.n_iattrs = 4;
                op.iattrs[2] = 2;
                op.iattrs[3] = 3;
            } else if (oc == TD_OP_CONCAT) {
                op.n_inputs = 2;
                op.n_iattrs = 1;
            } else if (oc == TD_OP_GATHER || oc == TD_OP_INDEX_SELECT) {
                op.n_inputs = 2;
                in[1] = &idx;
                op.n_iattrs = 1;
                op.iattrs[0] = 1;
            } else if (oc == TD_OP_SLICE_STEP) {
                static const int64_t a[] = {0, 0, 2, 3, 1, 1};
                op.n_iattrs = 6;
                memcpy(op.iattrs, a, sizeof a);
            } else if (oc == TD_OP_FLIP || oc == TD_OP_TRIL || oc == TD_OP_TRIU) {
                op.n_iattrs = 1;
                op.iattrs[0] = oc == TD_OP_FLIP ? 3 : 0;
            } else if (oc == TD_OP_ROLL || oc == TD_OP_REPEAT) {
                op.n_iattrs = 2;
                op.iattrs[0] = op.iattrs[1] = 1;
            } else if (oc == TD_OP_PAD) {
                op.n_iattrs = 5;
            } else if (oc == TD_OP_ONE_HOT) {
                in[0] = &idx;
                op.n_iattrs = 1;
                op.iattrs[0] = 3;
            } else if (oc == TD_OP_MASKED_FILL) {
                op.n_inputs = 2;
                in[1] = &cond;
            } else if (oc == TD_OP_SCATTER || oc == TD_OP_SCATTER_ADD) {
                op.n_inputs = 3;
                in[1] = &idx;
                op.n_iattrs = 1;
            } else if (oc == TD_OP_INDEX_ADD) {
                op.n_inputs = 3;
                in[1] = &idx1;
                op.n_iattrs = 1;
            } else if (oc == TD_OP_GATHER_ND) {
                op.n_inputs = 2;
                in[1] = &idx;
            }
            break;
        case TD_OPCLASS_NN:
            op.fattrs[0] = 1e-5;
            if (oc == TD_OP_BATCH_NORM) {
                op.n_inputs = 3;
                in[1] = in[2] = &cvec;
            } else if (oc == TD_OP_BATCH_NORM_BACKWARD) {
                op.n_inputs = 2;
            } else if (oc == TD_OP_DROPOUT) {
                op.n_inputs = 1;
            } else if (oc == TD_OP_SCALED_DOT_PRODUCT_ATTENTION) { /* q = k = v = x, causal */
                op.n_inputs = 3;
                op.n_iattrs = 1;
                op.iattrs[0] = 1;
            } else {
                op.n_inputs = oc == TD_OP_LAYER_NORM_BACKWARD || oc == TD_OP_RMS_NORM_BACKWARD ||
                                      oc == TD_OP_GROUP_NORM_BACKWARD
                                  ? 2
                                  : 1;
                op.n_iattrs = 1;
                op.iattrs[0] = 1;
            }
            break;
        case TD_OPCLASS_CONV:
        case TD_OPCLASS_POOL: {
            /* x [2, 3, 4]; weight / dy / indices [3, 3, 1] ([3, 3, 4] for dy and indices of
             * the pool gradients); attributes all 1, pads 0 */
            static const td__desc cw = {.dtype = TD_F32, .rank = 3, .dims = {3, 3, 1}};
            static const td__desc cx3 = {.dtype = TD_F32, .rank = 3, .dims = {2, 3, 4}};
            static const td__desc ci = {.dtype = TD_I64, .rank = 3, .dims = {2, 3, 4}};
            static const td__desc dyw = {.dtype = TD_F32, .rank = 3, .dims = {2, 3, 4}};
            const td__op_row *row = td__op_row_of(oc);
            in[0] = &cx3;
            in[1] = oc == TD_OP_MAX_POOL_BACKWARD ? &ci : oc == TD_OP_CONV_WEIGHT_GRAD ? &dyw : &cw;
            op.n_inputs = row->min_inputs;
            op.n_iattrs = row->attrs.n + (uint32_t)row->attrs.a[2].lo;
            for (uint32_t i = 0; i < op.n_iattrs; i++) op.iattrs[i] = 1;
            if (oc == TD_OP_CONV || oc == TD_OP_CONV_TRANSPOSE || oc == TD_OP_CONV_WEIGHT_GRAD) {
                op.iattrs[3] = op.iattrs[4] = 0; /* pads */
            } else if (oc == TD_OP_MAX_POOL || oc == TD_OP_MAX_POOL_INDICES ||
                       oc == TD_OP_MAX_POOL_BACKWARD) {
                op.iattrs[4] = 0;
                if (oc == TD_OP_MAX_POOL_BACKWARD) op.iattrs[5] = 4;
            } else if (oc == TD_OP_AVG_POOL || oc == TD_OP_AVG_POOL_BACKWARD) {
                op.iattrs[4] = 0;
                if (oc == TD_OP_AVG_POOL_BACKWARD) op.iattrs[5] = 4;
            }
            break;
        }
        case TD_OPCLASS_NONE: cr_assert_fail("opcode %u has no class", oc);
        }
        /* a valid baseline: every optional attribute present, valid float attributes, and
         * clamp_tensor's three numeric inputs */
        const td__op_row *row = td__op_row_of(oc);
        if (row->attrs.layout == TD_ATTRS_UPTO && td__op_class(oc) == TD_OPCLASS_UNARY)
            op.n_iattrs = row->attrs.n;
        if (oc == TD_OP_SOFTPLUS) op.fattrs[0] = 1.0;
        if (oc == TD_OP_CLAMP_TENSOR) in[0] = &x;
        static const td__desc xi = {.dtype = TD_I32, .rank = 2, .dims = {2, 3}};
        if (row->in_dtype == TD_DTC_INT || row->in_dtype == TD_DTC_INTBOOL)
            in[0] = in[1] = in[2] = &xi; /* integer-only ops */
        td__desc out;
        char err[512] = "";
        cr_assert_eq(td__op_infer(&op, in, &out, err, sizeof err), TD_OK, "baseline %s: %s",
                     td__op_name(oc), err);
        uint32_t extra = op.n_iattrs + 1;
        op.n_iattrs = extra;
        op.iattrs[extra - 1] = 0;
        cr_assert_eq(td__op_infer(&op, in, &out, err, sizeof err), TD_EINVAL,
                     "%s accepted %u attributes", td__op_name(oc), extra);
        char want[64];
        snprintf(want, sizeof want, "got %u", extra);
        size_t nl = strlen(td__op_name(oc));
        cr_assert(strncmp(err, td__op_name(oc), nl) == 0 && err[nl] == ':', "%s", err);
        if (row->attrs.layout != TD_ATTRS_RANK) /* PERMUTE ROLL REPEAT: "perm has 3 entries" */
            cr_assert(strstr(err, want), "%s: message lacks the count: %s", td__op_name(oc), err);
        else
            cr_assert(strstr(err, "has 3 entries"), "%s", err);
        checked++;
    }
    cr_assert_geq(checked, 35, "only %d ops checked", checked);
}

/* cpu_reduce.c — SUM PROD MEAN MAX MIN ARGMAX ARGMIN over an axes bitmask.
 *
 * Determinism is the design constraint: each output element is computed by exactly one
 * thread, which folds its reduced elements in ascending input-index order, so the bits of
 * the result never depend on the thread count or on timing. Threads split the *outputs*.
 *
 * Plan: drop size-1 dims and merge adjacent dims that are both kept or both reduced, which
 * leaves alternating groups. If the innermost group is reduced, each output folds contiguous
 * runs ("row" path). If it is kept, outputs that are neighbours along it read neighbouring
 * inputs, so a tile of up to TILE outputs is folded together, one reduced index at a time
 * ("column" path): still ascending order per output, but with unit-stride, vectorisable
 * loads. Both paths produce per-output accumulators that one store step converts.
 *
 * Accumulators: float SUM/PROD/MEAN fold in double and round once at the end (f32 results
 * are therefore the correctly rounded value of the double fold, more accurate than an f32
 * fold and just as deterministic); integer SUM/PROD fold in uint64 with wraparound, which
 * after truncation equals wrapping in the output dtype. MAX/MIN fold in the input type and
 * propagate NaN. ARGMAX/ARGMIN give the first index of the extreme value (the first NaN if
 * any). Reducing zero elements gives SUM 0, PROD 1, MEAN NaN (op.c rejects the others).
 */
#include "backends/cpu/cpu_internal.h"
#include "engine/collapse.h"
#include <math.h>
#include <string.h>

/* Outputs folded together: 2048 double accumulators (16 KiB) stay in L1/L2 while the
 * column path streams one input row of that width per reduced index. */
#define TILE 2048

typedef td__reduce_plan red_plan;

/* Input offset of output element o (row-major over the kept groups). */
static int64_t kept_offset(const red_plan *p, int64_t o)
{
    int64_t off = 0;
    for (int g = p->nk - 1; g >= 0; g--) {
        off += (o % p->ksize[g]) * p->kstride[g];
        o /= p->ksize[g];
    }
    return off;
}

/* Advance a reduced-group odometer over groups [0, ng); returns the new offset. */
static int64_t red_next(const red_plan *p, int ng, int64_t *idx, int64_t off)
{
    for (int g = ng - 1; g >= 0; g--) {
        off += p->rstride[g];
        if (++idx[g] < p->rsize[g]) return off;
        off -= idx[g] * p->rstride[g];
        idx[g] = 0;
    }
    return off;
}

/* Generates, for one (fold, input type) pair:
 *   NAME_rows(p, x, o0, n, acc): acc[j] = fold over output o0 + j, for j < n (row path);
 *   NAME_cols(p, x, o0, n, acc): same, outputs o0..o0+n-1 consecutive along the inner kept
 *                                group (column path).
 * A is the accumulator type, INIT its start value, STEP(acc, v) folds one input v. */
#define REDUCE_KERNEL(NAME, T, A, INIT, STEP)                                              \
    static void NAME##_rows(const red_plan *p, const void *x_, int64_t o0, int64_t n,      \
                            void *acc_)                                                    \
    {                                                                                      \
        const T *x = x_;                                                                   \
        A *accs = acc_;                                                                    \
        const int nouter = p->nr > 0 ? p->nr - 1 : 0;                                      \
        const int64_t inner = p->nr > 0 ? p->rsize[p->nr - 1] : 1;                         \
        const int64_t nrows = inner > 0 ? p->rcount / inner : 0;                           \
        for (int64_t j = 0; j < n; j++) {                                                  \
            A acc = (INIT);                                                                \
            int64_t idx[TD_MAX_RANK] = {0};                                                \
            int64_t off = kept_offset(p, o0 + j);                                          \
            for (int64_t r = 0; r < nrows; r++) {                                          \
                const T *run = x + off;                                                    \
                for (int64_t k = 0; k < inner; k++) {                                      \
                    const T v = run[k];                                                    \
                    STEP(acc, v);                                                          \
                }                                                                          \
                off = red_next(p, nouter, idx, off);                                       \
            }                                                                              \
            accs[j] = acc;                                                                 \
        }                                                                                  \
    }                                                                                      \
    static void NAME##_cols(const red_plan *p, const void *x_, int64_t o0, int64_t n,      \
                            void *acc_)                                                    \
    {                                                                                      \
        const T *x = x_;                                                                   \
        A *restrict accs = acc_;                                                           \
        for (int64_t j = 0; j < n; j++) accs[j] = (INIT);                                  \
        int64_t idx[TD_MAX_RANK] = {0};                                                    \
        int64_t off = kept_offset(p, o0);                                                  \
        for (int64_t r = 0; r < p->rcount; r++) {                                          \
            const T *restrict run = x + off;                                               \
            for (int64_t j = 0; j < n; j++) {                                              \
                const T v = run[j];                                                        \
                STEP(accs[j], v);                                                          \
            }                                                                              \
            off = red_next(p, p->nr, idx, off);                                            \
        }                                                                                  \
    }

#define STEP_ADD(acc, v) ((acc) += (v))
#define STEP_MUL(acc, v) ((acc) *= (v))
#define STEP_ADD_D(acc, v) ((acc) += (double)(v))
#define STEP_MUL_D(acc, v) ((acc) *= (double)(v))
#define STEP_ADD_U(acc, v) ((acc) += (uint64_t)(v))
#define STEP_MUL_U(acc, v) ((acc) *= (uint64_t)(v))
#define STEP_MAX_F(acc, v) ((acc) = ((v) > (acc) || (v) != (v)) ? (v) : (acc))
#define STEP_MIN_F(acc, v) ((acc) = ((v) < (acc) || (v) != (v)) ? (v) : (acc))
#define STEP_MAX_I(acc, v) ((acc) = (v) > (acc) ? (v) : (acc))
#define STEP_MIN_I(acc, v) ((acc) = (v) < (acc) ? (v) : (acc))

REDUCE_KERNEL(sum_f32, float, double, 0.0, STEP_ADD_D)
REDUCE_KERNEL(sum_f64, double, double, 0.0, STEP_ADD_D)
REDUCE_KERNEL(sum_i32, int32_t, uint64_t, 0u, STEP_ADD_U)
REDUCE_KERNEL(sum_i64, int64_t, uint64_t, 0u, STEP_ADD_U)
REDUCE_KERNEL(sum_u8, uint8_t, uint64_t, 0u, STEP_ADD_U)
REDUCE_KERNEL(prod_f32, float, double, 1.0, STEP_MUL_D)
REDUCE_KERNEL(prod_f64, double, double, 1.0, STEP_MUL_D)
REDUCE_KERNEL(prod_i32, int32_t, uint64_t, 1u, STEP_MUL_U)
REDUCE_KERNEL(prod_i64, int64_t, uint64_t, 1u, STEP_MUL_U)
REDUCE_KERNEL(prod_u8, uint8_t, uint64_t, 1u, STEP_MUL_U)
REDUCE_KERNEL(max_f32, float, float, -INFINITY, STEP_MAX_F)
REDUCE_KERNEL(max_f64, double, double, -INFINITY, STEP_MAX_F)
REDUCE_KERNEL(max_i32, int32_t, int32_t, INT32_MIN, STEP_MAX_I)
REDUCE_KERNEL(max_i64, int64_t, int64_t, INT64_MIN, STEP_MAX_I)
REDUCE_KERNEL(max_u8, uint8_t, uint8_t, 0, STEP_MAX_I)
REDUCE_KERNEL(min_f32, float, float, INFINITY, STEP_MIN_F)
REDUCE_KERNEL(min_f64, double, double, INFINITY, STEP_MIN_F)
REDUCE_KERNEL(min_i32, int32_t, int32_t, INT32_MAX, STEP_MIN_I)
REDUCE_KERNEL(min_i64, int64_t, int64_t, INT64_MAX, STEP_MIN_I)
REDUCE_KERNEL(min_u8, uint8_t, uint8_t, UINT8_MAX, STEP_MIN_I)
/* bool MIN over 0/1 bytes starts from 1 (true), the identity of AND. */
REDUCE_KERNEL(min_bool, uint8_t, uint8_t, 1, STEP_MIN_I)

typedef void (*fold_fn)(const red_plan *p, const void *x, int64_t o0, int64_t n, void *acc);

typedef struct fold_pair {
    fold_fn rows, cols;
} fold_pair;

#define PAIR(name) {name##_rows, name##_cols}

/* Accumulator kinds, for the store step. */
enum acc_kind { ACC_NONE, ACC_DOUBLE, ACC_U64, ACC_SAME };

static enum acc_kind acc_kind_of(uint32_t opcode, uint32_t dt)
{
    switch (opcode) {
    case TD_OP_SUM: case TD_OP_PROD:
        if (dt == TD_BOOL || dt >= TD_DTYPE_COUNT) return ACC_NONE;
        return td__dtype_is_float(dt) ? ACC_DOUBLE : ACC_U64;
    case TD_OP_MEAN:
        return td__dtype_is_float(dt) ? ACC_DOUBLE : ACC_NONE;
    case TD_OP_MAX: case TD_OP_MIN:
        return dt < TD_DTYPE_COUNT ? ACC_SAME : ACC_NONE;
    }
    return ACC_NONE;
}

static fold_pair find_fold(uint32_t opcode, uint32_t dt)
{
    static const fold_pair sum[TD_DTYPE_COUNT] = {
        [TD_F32] = PAIR(sum_f32), [TD_F64] = PAIR(sum_f64), [TD_I32] = PAIR(sum_i32),
        [TD_I64] = PAIR(sum_i64), [TD_U8] = PAIR(sum_u8)};
    static const fold_pair prod[TD_DTYPE_COUNT] = {
        [TD_F32] = PAIR(prod_f32), [TD_F64] = PAIR(prod_f64), [TD_I32] = PAIR(prod_i32),
        [TD_I64] = PAIR(prod_i64), [TD_U8] = PAIR(prod_u8)};
    static const fold_pair max[TD_DTYPE_COUNT] = {
        [TD_F32] = PAIR(max_f32), [TD_F64] = PAIR(max_f64), [TD_I32] = PAIR(max_i32),
        [TD_I64] = PAIR(max_i64), [TD_U8] = PAIR(max_u8),   [TD_BOOL] = PAIR(max_u8)};
    static const fold_pair min[TD_DTYPE_COUNT] = {
        [TD_F32] = PAIR(min_f32), [TD_F64] = PAIR(min_f64), [TD_I32] = PAIR(min_i32),
        [TD_I64] = PAIR(min_i64), [TD_U8] = PAIR(min_u8),   [TD_BOOL] = PAIR(min_bool)};
    fold_pair none = {NULL, NULL};
    if (dt >= TD_DTYPE_COUNT || acc_kind_of(opcode, dt) == ACC_NONE) return none;
    switch (opcode) {
    case TD_OP_SUM: case TD_OP_MEAN: return sum[dt];
    case TD_OP_PROD: return prod[dt];
    case TD_OP_MAX: return max[dt];
    case TD_OP_MIN: return min[dt];
    }
    return none;
}

bool td__cpu_reduce_supports(uint32_t opcode, uint32_t in_dtype)
{
    if (opcode == TD_OP_ARGMAX || opcode == TD_OP_ARGMIN) return in_dtype < TD_DTYPE_COUNT;
    return find_fold(opcode, in_dtype).rows != NULL;
}

typedef struct red_task {
    red_plan plan;
    fold_pair fold;
    enum acc_kind kind;
    bool mean;
    const void *x;
    void *out;
    uint32_t out_dtype;
    size_t out_size;
} red_task;

/* Convert n accumulators of t's kind into the output at element o0. */
static void store_tile(const red_task *t, const void *acc, int64_t o0, int64_t n)
{
    switch (t->kind) {
    case ACC_DOUBLE: {
        const double *a = acc;
        double scale = t->mean ? (double)t->plan.rcount : 1.0;
        for (int64_t j = 0; j < n; j++)
            td__cpu_store_double(t->out_dtype, t->out, o0 + j, t->mean ? a[j] / scale : a[j]);
        break;
    }
    case ACC_U64: {
        const uint64_t *a = acc;
        for (int64_t j = 0; j < n; j++) {
            switch (t->out_dtype) {
            case TD_I32: ((int32_t *)t->out)[o0 + j] = (int32_t)(uint32_t)a[j]; break;
            case TD_I64: ((int64_t *)t->out)[o0 + j] = (int64_t)a[j]; break;
            case TD_U8: ((uint8_t *)t->out)[o0 + j] = (uint8_t)a[j]; break;
            }
        }
        break;
    }
    case ACC_SAME:
        memcpy((char *)t->out + (size_t)o0 * t->out_size, acc, (size_t)n * t->out_size);
        break;
    case ACC_NONE:
        break;
    }
}

static void reduce_chunk(void *ctx, int64_t lo, int64_t hi)
{
    const red_task *t = ctx;
    const red_plan *p = &t->plan;
    /* One tile of accumulators; the fold writes the member of its accumulator type. */
    union {
        double d[TILE];
        uint64_t u[TILE];
        float f32[TILE];
        int32_t i32[TILE];
        int64_t i64[TILE];
        uint8_t u8[TILE];
    } acc;
    int64_t o = lo;
    while (o < hi) {
        int64_t n = hi - o;
        if (n > TILE) n = TILE;
        if (p->inner_kept) {
            int64_t inner = p->ksize[p->nk - 1];
            int64_t left = inner - o % inner;
            if (n > left) n = left;
            t->fold.cols(p, t->x, o, n, &acc);
        } else {
            t->fold.rows(p, t->x, o, n, &acc);
        }
        store_tile(t, &acc, o, n);
        o += n;
    }
}

/* ---- argmax / argmin (one axis: at most one reduced group) ---- */

#define ARG_KERNEL(NAME, T, BETTER, IS_NAN)                                                \
    static void NAME(const red_plan *p, const void *x_, int64_t *out, int64_t lo,          \
                     int64_t hi)                                                           \
    {                                                                                      \
        const T *x = x_;                                                                   \
        const int64_t n = p->nr > 0 ? p->rsize[0] : 1;                                     \
        const int64_t s = p->nr > 0 ? p->rstride[0] : 0;                                   \
        for (int64_t o = lo; o < hi; o++) {                                                \
            const T *run = x + kept_offset(p, o);                                          \
            T best = run[0];                                                               \
            int64_t at = 0;                                                                \
            for (int64_t k = 1; k < n && !IS_NAN(best); k++) {                             \
                const T v = run[k * s];                                                    \
                if (BETTER(v, best)) {                                                     \
                    best = v;                                                              \
                    at = k;                                                                \
                }                                                                          \
            }                                                                              \
            out[o] = at;                                                                   \
        }                                                                                  \
    }

#define GT_NAN(v, b) ((v) > (b) || (v) != (v))
#define LT_NAN(v, b) ((v) < (b) || (v) != (v))
#define GT(v, b) ((v) > (b))
#define IS_NAN_F(v) ((v) != (v))
#define NEVER_NAN(v) 0
#define LT(v, b) ((v) < (b))

ARG_KERNEL(argmax_f32, float, GT_NAN, IS_NAN_F)
ARG_KERNEL(argmax_f64, double, GT_NAN, IS_NAN_F)
ARG_KERNEL(argmax_i32, int32_t, GT, NEVER_NAN)
ARG_KERNEL(argmax_i64, int64_t, GT, NEVER_NAN)
ARG_KERNEL(argmax_u8, uint8_t, GT, NEVER_NAN)
ARG_KERNEL(argmin_f32, float, LT_NAN, IS_NAN_F)
ARG_KERNEL(argmin_f64, double, LT_NAN, IS_NAN_F)
ARG_KERNEL(argmin_i32, int32_t, LT, NEVER_NAN)
ARG_KERNEL(argmin_i64, int64_t, LT, NEVER_NAN)
ARG_KERNEL(argmin_u8, uint8_t, LT, NEVER_NAN)

typedef void (*arg_fn)(const red_plan *p, const void *x, int64_t *out, int64_t lo, int64_t hi);

typedef struct arg_task {
    red_plan plan;
    arg_fn fn;
    const void *x;
    int64_t *out;
} arg_task;

static void arg_chunk(void *ctx, int64_t lo, int64_t hi)
{
    const arg_task *t = ctx;
    t->fn(&t->plan, t->x, t->out, lo, hi);
}

static td_status exec_arg(const td__cpu_exec *x, const td__op *op, const td__view *in,
                          const td__view *out, const red_plan *plan)
{
    static const arg_fn amax[TD_DTYPE_COUNT] = {
        [TD_F32] = argmax_f32, [TD_F64] = argmax_f64, [TD_I32] = argmax_i32,
        [TD_I64] = argmax_i64, [TD_U8] = argmax_u8,   [TD_BOOL] = argmax_u8};
    static const arg_fn amin[TD_DTYPE_COUNT] = {
        [TD_F32] = argmin_f32, [TD_F64] = argmin_f64, [TD_I32] = argmin_i32,
        [TD_I64] = argmin_i64, [TD_U8] = argmin_u8,   [TD_BOOL] = argmin_u8};
    uint32_t dt = in[0].desc.dtype;
    if (dt >= TD_DTYPE_COUNT || plan->nr > 1 || out->desc.dtype != TD_I64 || plan->rcount == 0)
        return td__cpu_fail(x, TD_EINTERNAL, "cpu: %s on dtype %u over %lld elements",
                            op->opcode == TD_OP_ARGMAX ? "argmax" : "argmin", dt,
                            (long long)plan->rcount);
    arg_task t = {.plan = *plan,
                  .fn = op->opcode == TD_OP_ARGMAX ? amax[dt] : amin[dt],
                  .x = in[0].data,
                  .out = out->data};
    td__cpu_run(x, plan->nout, plan->rcount, arg_chunk, &t);
    return TD_OK;
}

/* Fill the output with the identity of an empty fold. */
static td_status fill_empty(const td__cpu_exec *x, const td__op *op, const td__view *out)
{
    double v;
    switch (op->opcode) {
    case TD_OP_SUM: v = 0.0; break;
    case TD_OP_PROD: v = 1.0; break;
    case TD_OP_MEAN: v = NAN; break;
    default:
        return td__cpu_fail(x, TD_EINTERNAL, "cpu: opcode %u reduces zero elements",
                            op->opcode);
    }
    int64_t n = td__cpu_nelem(&out->desc);
    for (int64_t i = 0; i < n; i++) td__cpu_store_double(out->desc.dtype, out->data, i, v);
    return TD_OK;
}

td_status td__cpu_exec_reduce(const td__cpu_exec *x, const td__op *op, const td__view *in,
                              const td__view *out)
{
    const td__desc *xd = &in[0].desc;
    if (op->n_iattrs < 1 || op->iattrs[0] < 0)
        return td__cpu_fail(x, TD_EINTERNAL, "cpu: reduce without an axes mask");
    red_plan plan;
    td__reduce_plan_init(&plan, xd, (uint64_t)op->iattrs[0]);
    if (plan.nout == 0) return TD_OK;
    if (op->opcode == TD_OP_ARGMAX || op->opcode == TD_OP_ARGMIN)
        return exec_arg(x, op, in, out, &plan);
    fold_pair fold = find_fold(op->opcode, xd->dtype);
    if (fold.rows == NULL)
        return td__cpu_fail(x, TD_EINTERNAL, "cpu: no reduce kernel for opcode %u dtype %u",
                            op->opcode, xd->dtype);
    if (plan.rcount == 0) return fill_empty(x, op, out);
    red_task t = {.plan = plan,
                  .fold = fold,
                  .kind = acc_kind_of(op->opcode, xd->dtype),
                  .mean = op->opcode == TD_OP_MEAN,
                  .x = in[0].data,
                  .out = out->data,
                  .out_dtype = out->desc.dtype,
                  .out_size = td__cpu_dtype_size(out->desc.dtype)};
    if (t.kind == ACC_SAME && out->desc.dtype != xd->dtype)
        return td__cpu_fail(x, TD_EINTERNAL, "cpu: reduce output dtype %u for input %u",
                            out->desc.dtype, xd->dtype);
    td__cpu_run(x, plan.nout, plan.rcount, reduce_chunk, &t);
    return TD_OK;
}

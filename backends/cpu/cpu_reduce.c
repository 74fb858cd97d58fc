/* cpu_reduce.c — SUM PROD MEAN MAX MIN ARGMAX ARGMIN over an axes bitmask.
 *
 * Determinism is the design constraint: the bits of a result depend only on the input's
 * shape, the reduced axes and the values — never on the thread count, on timing, or on the
 * vector instructions of the machine. Work is split into pieces whose boundaries are fixed
 * by the shape, any thread may compute any piece, and pieces are combined in a fixed order.
 *
 * Plan (engine/collapse.h): drop size-1 dims and merge adjacent dims that are both kept or
 * both reduced. If the innermost group is reduced, each output folds `nruns` contiguous runs
 * of `inner` elements (the "row" path); if it is kept, neighbouring outputs read
 * neighbouring inputs and a tile of up to TILE outputs is folded together, one reduced
 * index at a time (the "column" path).
 *
 * Float SUM, MEAN, PROD (f32 and f64; accumulated in double, rounded once at the end):
 *  - row path: an output's reduced elements are cut into blocks of BLOCK = 4096 — a run
 *    longer than BLOCK is cut into pieces of BLOCK (the last one shorter), shorter runs are
 *    grouped BLOCK / inner whole runs to a block. A block is folded into RK_LANES = 32
 *    double lanes (element i of each run goes to lane i % 32, ascending within a lane), the
 *    lanes are combined pairwise (l += l + 16, then + 8, + 4, + 2, + 1) and the blocks of an
 *    output are combined pairwise in block order (a binary tree: pairs, pairs of pairs, ...,
 *    an unpaired block joining at the level where it has a partner: tree_push below);
 *  - column path: each output folds its reduced elements in ascending index order.
 *  Blocks, not outputs, are what threads share, so one long row spreads over every thread.
 *  The lane loops are compiled once per instruction set from one source
 *  (cpu_reduce_simd.h); the variants are bit-identical and the best one the CPU runs is
 *  chosen at run time.
 * Integer SUM/PROD fold in uint64 with wraparound (exact, so the order is irrelevant); after
 * truncation this equals wrapping in the output dtype.
 * MAX/MIN give exactly what an ascending fold from -inf/+inf with "a NaN or a larger value
 * replaces the accumulator" gives: the last NaN if there is one, otherwise the maximum, and
 * of equal zeros the first one. Vector loops find the block maximum and a NaN flag; a block
 * with a NaN or a zero maximum is folded again in order, and blocks are combined in order
 * with the same step (it is associative), so the result is the ascending fold's.
 * ARGMAX/ARGMIN give the first index of the extreme value (the first NaN if any).
 * Reducing zero elements gives SUM 0, PROD 1, MEAN NaN (op.c rejects the others).
 */
#include "backends/cpu/cpu_reduce.h"
#include "backends/cpu/cpu_internal.h"
#include "common/alloc.h"
#include "engine/collapse.h"
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#define RK_SUFFIX generic
#define RK_TARGET
#define RK_NAME "generic"
#include "backends/cpu/cpu_reduce_simd.h"
#if defined(__x86_64__)
#define RK_SUFFIX avx2
#define RK_TARGET __attribute__((target("avx2")))
#define RK_NAME "avx2"
#include "backends/cpu/cpu_reduce_simd.h"
#define RK_SUFFIX avx512
#if defined(__clang__)
#define RK_TARGET __attribute__((target("avx512f")))
#else
/* GCC otherwise widens f32 to f64 256 bits at a time */
#define RK_TARGET __attribute__((target("avx512f,prefer-vector-width=512")))
#endif
#define RK_NAME "avx512"
#define RK_AVX512 1
#include "backends/cpu/cpu_reduce_simd.h"
#endif

/* Elements a row-path block holds (part of the result contract, see above). */
#define BLOCK 4096
/* Outputs folded together on the column path: 2048 double accumulators (16 KiB) stay in
 * L1/L2 while the input streams past. Not part of the contract (outputs are independent). */
#define TILE 2048
/* Partial results kept on the stack before the exec allocates. */
#define STACK_PARTS 256

typedef td__reduce_plan red_plan;

/* ---- instruction-set choice ---- */

static td__cpu_isa_choice reduce_choice;

static const rk_isa *current_isa(void)
{
    static const rk_isa *const copies[TD_CPU_ISA_COUNT] = {
        &rk_isa_generic,
#if defined(__x86_64__)
        &rk_isa_avx2, &rk_isa_avx512,
#endif
    };
    const rk_isa *k = copies[td__cpu_isa_pick(&reduce_choice)];
    return k != NULL ? k : &rk_isa_generic;
}

bool td__cpu_reduce_force_isa(const char *name) { return td__cpu_isa_force(&reduce_choice, name); }

const char *td__cpu_reduce_isa(void) { return current_isa()->name; }

/* ---- the fixed trees ---- */

/* Combine the RK_LANES lanes pairwise: lane l takes l + 16, then l + 8, ..., l + 1. */
static double lane_tree(double *lanes, bool mul)
{
    for (int w = RK_LANES / 2; w >= 1; w /= 2)
        for (int l = 0; l < w; l++)
            lanes[l] = mul ? lanes[l] * lanes[l + w] : lanes[l] + lanes[l + w];
    return lanes[0];
}

/* Pairwise combine of values pushed in order: the k-th push (from 0) merges with as many
 * complete subtrees as k has trailing one bits, so values pair up as (0,1), (2,3),
 * ((0,1),(2,3)), ...; finishing merges what is left from the right. For 2^j values this is
 * the balanced tree; otherwise it is the same tree with the unpaired tail joined where it
 * first fits. Left operand first, so the order of every operation is fixed. */
typedef struct tree {
    double v[64];
    int top;
    uint64_t count;
} tree;

static void tree_push(tree *t, double x, bool mul)
{
    for (uint64_t k = t->count++; k & 1; k >>= 1) {
        double l = t->v[--t->top];
        x = mul ? l * x : l + x;
    }
    t->v[t->top++] = x;
}

static double tree_finish(tree *t, bool mul)
{
    double x = t->v[--t->top];
    while (t->top > 0) {
        double l = t->v[--t->top];
        x = mul ? l * x : l + x;
    }
    return x;
}

static double lanes_block(const rk_isa *k, uint32_t dt, bool mul, const void *x, int64_t n)
{
    double lanes[RK_LANES];
    for (int l = 0; l < RK_LANES; l++) lanes[l] = mul ? 1.0 : 0.0;
    if (dt == TD_F32) (mul ? k->prod_f32 : k->sum_f32)(lanes, x, n);
    else (mul ? k->prod_f64 : k->sum_f64)(lanes, x, n);
    return lane_tree(lanes, mul);
}

static double sum_row(uint32_t dt, const void *x, int64_t n)
{
    if (n <= 0) return 0.0;
    const rk_isa *k = current_isa();
    const size_t es = td__cpu_dtype_size(dt);
    tree t = {.top = 0};
    for (int64_t b = 0; b < n; b += BLOCK) {
        int64_t len = n - b < BLOCK ? n - b : BLOCK;
        tree_push(&t, lanes_block(k, dt, false, (const char *)x + (size_t)b * es, len), false);
    }
    return tree_finish(&t, false);
}

double td__cpu_sum_row_f32(const float *x, int64_t n) { return sum_row(TD_F32, x, n); }
double td__cpu_sum_row_f64(const double *x, int64_t n) { return sum_row(TD_F64, x, n); }

/* ---- exact (ascending) folds ---- */

/* An accumulator: the member of its type, plus an index for ARGMAX/ARGMIN. */
typedef struct red_part {
    union {
        double d;
        uint64_t u;
        float f32;
        int32_t i32;
        int64_t i64;
        uint8_t u8;
        int8_t i8;
        int16_t i16;
    } v;
    int64_t at;
} red_part;

/* Generates, for one (fold, input type) pair, STEP(acc, v) folding input v into an
 * accumulator of type A:
 *   NAME_seg(acc, x, n): *acc folded over x[0..n) in order;
 *   NAME_col(acc, row, n): acc[j] folded with row[j], j < n (one reduced index). */
#define EXACT_KERNEL(NAME, T, A, STEP)                                                     \
    static void NAME##_seg(void *acc_, const void *x_, int64_t n)                          \
    {                                                                                      \
        const T *x = x_;                                                                   \
        A acc = *(A *)acc_;                                                                \
        for (int64_t k = 0; k < n; k++) {                                                  \
            const T v = x[k];                                                              \
            STEP(acc, v);                                                                  \
        }                                                                                  \
        *(A *)acc_ = acc;                                                                  \
    }                                                                                      \
    static void NAME##_col(void *acc_, const void *x_, int64_t n)                          \
    {                                                                                      \
        A *restrict acc = acc_;                                                            \
        const T *restrict x = x_;                                                          \
        for (int64_t j = 0; j < n; j++) {                                                  \
            const T v = x[j];                                                              \
            STEP(acc[j], v);                                                               \
        }                                                                                  \
    }

#define STEP_ADD_D(acc, v) ((acc) += (double)(v))
#define STEP_MUL_D(acc, v) ((acc) *= (double)(v))
#define STEP_ADD_U(acc, v) ((acc) += (uint64_t)(v))
#define STEP_MUL_U(acc, v) ((acc) *= (uint64_t)(v))
#define STEP_MAX_F(acc, v) ((acc) = ((v) > (acc) || (v) != (v)) ? (v) : (acc))
#define STEP_MIN_F(acc, v) ((acc) = ((v) < (acc) || (v) != (v)) ? (v) : (acc))
#define STEP_MAX_I(acc, v) ((acc) = (v) > (acc) ? (v) : (acc))
#define STEP_MIN_I(acc, v) ((acc) = (v) < (acc) ? (v) : (acc))

EXACT_KERNEL(sum_f32, float, double, STEP_ADD_D)
EXACT_KERNEL(sum_f64, double, double, STEP_ADD_D)
EXACT_KERNEL(sum_i32, int32_t, uint64_t, STEP_ADD_U)
EXACT_KERNEL(sum_i64, int64_t, uint64_t, STEP_ADD_U)
EXACT_KERNEL(sum_u8, uint8_t, uint64_t, STEP_ADD_U)
EXACT_KERNEL(sum_i8, int8_t, uint64_t, STEP_ADD_U)
EXACT_KERNEL(sum_i16, int16_t, uint64_t, STEP_ADD_U)
EXACT_KERNEL(prod_i8, int8_t, uint64_t, STEP_MUL_U)
EXACT_KERNEL(prod_i16, int16_t, uint64_t, STEP_MUL_U)
EXACT_KERNEL(max_i8, int8_t, int8_t, STEP_MAX_I)
EXACT_KERNEL(max_i16, int16_t, int16_t, STEP_MAX_I)
EXACT_KERNEL(min_i8, int8_t, int8_t, STEP_MIN_I)
EXACT_KERNEL(min_i16, int16_t, int16_t, STEP_MIN_I)
EXACT_KERNEL(prod_f32, float, double, STEP_MUL_D)
EXACT_KERNEL(prod_f64, double, double, STEP_MUL_D)
EXACT_KERNEL(prod_i32, int32_t, uint64_t, STEP_MUL_U)
EXACT_KERNEL(prod_i64, int64_t, uint64_t, STEP_MUL_U)
EXACT_KERNEL(prod_u8, uint8_t, uint64_t, STEP_MUL_U)
EXACT_KERNEL(max_f32, float, float, STEP_MAX_F)
EXACT_KERNEL(max_f64, double, double, STEP_MAX_F)
EXACT_KERNEL(max_i32, int32_t, int32_t, STEP_MAX_I)
EXACT_KERNEL(max_i64, int64_t, int64_t, STEP_MAX_I)
EXACT_KERNEL(max_u8, uint8_t, uint8_t, STEP_MAX_I)
EXACT_KERNEL(min_f32, float, float, STEP_MIN_F)
EXACT_KERNEL(min_f64, double, double, STEP_MIN_F)
EXACT_KERNEL(min_i32, int32_t, int32_t, STEP_MIN_I)
EXACT_KERNEL(min_i64, int64_t, int64_t, STEP_MIN_I)
EXACT_KERNEL(min_u8, uint8_t, uint8_t, STEP_MIN_I)

typedef void (*exact_fn)(void *acc, const void *x, int64_t n);

typedef struct exact_pair {
    exact_fn seg, col;
} exact_pair;

#define PAIR(name) {name##_seg, name##_col}

/* Accumulator kinds, for the store step. */
enum acc_kind { ACC_NONE, ACC_DOUBLE, ACC_U64, ACC_SAME };

/* How blocks are folded. */
enum how { HOW_LANES, HOW_EXTREME, HOW_EXACT };

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

static exact_pair find_fold(uint32_t opcode, uint32_t dt)
{
    static const exact_pair sum[TD_DTYPE_COUNT] = {
        [TD_F32] = PAIR(sum_f32), [TD_F64] = PAIR(sum_f64), [TD_I32] = PAIR(sum_i32),
        [TD_I64] = PAIR(sum_i64), [TD_U8] = PAIR(sum_u8),
        [TD_I8] = PAIR(sum_i8),   [TD_I16] = PAIR(sum_i16)};
    static const exact_pair prod[TD_DTYPE_COUNT] = {
        [TD_F32] = PAIR(prod_f32), [TD_F64] = PAIR(prod_f64), [TD_I32] = PAIR(prod_i32),
        [TD_I64] = PAIR(prod_i64), [TD_U8] = PAIR(prod_u8),
        [TD_I8] = PAIR(prod_i8),   [TD_I16] = PAIR(prod_i16)};
    static const exact_pair max[TD_DTYPE_COUNT] = {
        [TD_F32] = PAIR(max_f32), [TD_F64] = PAIR(max_f64), [TD_I32] = PAIR(max_i32),
        [TD_I64] = PAIR(max_i64), [TD_U8] = PAIR(max_u8),   [TD_BOOL] = PAIR(max_u8),
        [TD_I8] = PAIR(max_i8),   [TD_I16] = PAIR(max_i16)};
    static const exact_pair min[TD_DTYPE_COUNT] = {
        [TD_F32] = PAIR(min_f32), [TD_F64] = PAIR(min_f64), [TD_I32] = PAIR(min_i32),
        [TD_I64] = PAIR(min_i64), [TD_U8] = PAIR(min_u8),   [TD_BOOL] = PAIR(min_u8),
        [TD_I8] = PAIR(min_i8),   [TD_I16] = PAIR(min_i16)};
    exact_pair none = {NULL, NULL};
    if (dt >= TD_DTYPE_COUNT || acc_kind_of(opcode, dt) == ACC_NONE) return none;
    switch (opcode) {
    case TD_OP_SUM: case TD_OP_MEAN: return sum[dt];
    case TD_OP_PROD: return prod[dt];
    case TD_OP_MAX: return max[dt];
    case TD_OP_MIN: return min[dt];
    }
    return none;
}

/* The start value of a fold. */
static red_part fold_init(uint32_t opcode, uint32_t dt)
{
    red_part p;
    memset(&p, 0, sizeof p);
    bool mx = opcode == TD_OP_MAX;
    switch (acc_kind_of(opcode, dt)) {
    case ACC_DOUBLE: p.v.d = opcode == TD_OP_PROD ? 1.0 : 0.0; break;
    case ACC_U64: p.v.u = opcode == TD_OP_PROD ? 1u : 0u; break;
    case ACC_SAME:
        switch (dt) {
        case TD_F32: p.v.f32 = mx ? -INFINITY : INFINITY; break;
        case TD_F64: p.v.d = mx ? -INFINITY : INFINITY; break;
        case TD_I32: p.v.i32 = mx ? INT32_MIN : INT32_MAX; break;
        case TD_I64: p.v.i64 = mx ? INT64_MIN : INT64_MAX; break;
        case TD_U8: p.v.u8 = mx ? 0 : UINT8_MAX; break;
        case TD_BOOL: p.v.u8 = mx ? 0 : 1; break; /* any / all */
        case TD_I8: p.v.i8 = mx ? INT8_MIN : INT8_MAX; break;
        case TD_I16: p.v.i16 = mx ? INT16_MIN : INT16_MAX; break;
        }
        break;
    case ACC_NONE: break;
    }
    return p;
}

bool td__cpu_reduce_supports(uint32_t opcode, uint32_t in_dtype)
{
    if (td__dtype_is_half(in_dtype)) in_dtype = TD_F32; /* reduced as f32 (exec_reduce_half) */
    if (opcode == TD_OP_ARGMAX || opcode == TD_OP_ARGMIN) return in_dtype < TD_DTYPE_COUNT;
    return find_fold(opcode, in_dtype).seg != NULL;
}

typedef struct red_task {
    red_plan plan;
    const rk_isa *isa;
    exact_pair fold;
    red_part init;
    enum acc_kind kind;
    enum how how;
    uint32_t opcode, dt;
    bool mul; /* PROD */
    bool mean;
    const void *x;
    void *out;
    uint32_t out_dtype;
    size_t in_size, out_size;
    /* row path */
    int64_t inner, nruns; /* run length, runs per output */
    int64_t bpr, rpb;     /* blocks per run (inner >= BLOCK) or runs per block (else) */
    int64_t m;            /* blocks per output */
    red_part *parts;      /* m > 1: the nout * m block results */
} red_task;

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

/* Convert n accumulators of t's kind into the output at element o0. */
static void store_acc(const red_task *t, const void *acc, size_t stride, int64_t o0, int64_t n)
{
    const char *a = acc;
    for (int64_t j = 0; j < n; j++, a += stride) {
        switch (t->kind) {
        case ACC_DOUBLE: {
            double v;
            memcpy(&v, a, sizeof v);
            td__cpu_store_double(t->out_dtype, t->out, o0 + j,
                                 t->mean ? v / (double)t->plan.rcount : v);
            break;
        }
        case ACC_U64: {
            uint64_t v;
            memcpy(&v, a, sizeof v);
            switch (t->out_dtype) {
            case TD_I32: ((int32_t *)t->out)[o0 + j] = (int32_t)(uint32_t)v; break;
            case TD_I64: ((int64_t *)t->out)[o0 + j] = (int64_t)v; break;
            case TD_U8: ((uint8_t *)t->out)[o0 + j] = (uint8_t)v; break;
            case TD_I8: ((int8_t *)t->out)[o0 + j] = (int8_t)(uint8_t)v; break;
            case TD_I16: ((int16_t *)t->out)[o0 + j] = (int16_t)(uint16_t)v; break;
            }
            break;
        }
        case ACC_SAME:
            memcpy((char *)t->out + (size_t)(o0 + j) * t->out_size, a, t->out_size);
            break;
        case ACC_NONE:
            break;
        }
    }
}

/* ---- row path ---- */

/* The segments (contiguous pieces of runs) of block b of output o, in order. */
typedef struct seg_walk {
    int64_t off, len, left;
    int64_t idx[TD_MAX_RANK];
} seg_walk;

static void seg_first(const red_task *t, int64_t o, int64_t b, seg_walk *w)
{
    const red_plan *p = &t->plan;
    int64_t run, start = 0;
    if (t->bpr > 0) {
        run = b / t->bpr;
        start = (b % t->bpr) * BLOCK;
        w->len = t->inner - start < BLOCK ? t->inner - start : BLOCK;
        w->left = 1;
    } else {
        run = b * t->rpb;
        w->len = t->inner;
        w->left = t->nruns - run < t->rpb ? t->nruns - run : t->rpb;
    }
    int64_t off = kept_offset(p, o);
    memset(w->idx, 0, sizeof w->idx);
    for (int g = p->nr - 2; g >= 0; g--) {
        w->idx[g] = run % p->rsize[g];
        off += w->idx[g] * p->rstride[g];
        run /= p->rsize[g];
    }
    w->off = off + start;
}

static void seg_next(const red_task *t, seg_walk *w)
{
    if (--w->left > 0) w->off = red_next(&t->plan, t->plan.nr - 1, w->idx, w->off);
}

#define FOR_SEGMENTS(t, o, b, w) for (seg_first(t, o, b, &w); w.left > 0; seg_next(t, &w))

static const void *seg_ptr(const red_task *t, const seg_walk *w)
{
    return (const char *)t->x + (size_t)w->off * t->in_size;
}

/* Vector max/min of a segment, ignoring NaNs and the order (see rk_isa). */
static void extreme_seg(const red_task *t, red_part *acc, bool *nan, const void *x, int64_t n)
{
    const rk_isa *k = t->isa;
    bool mx = t->opcode == TD_OP_MAX;
    if (t->dt == TD_F32) (mx ? k->max_f32 : k->min_f32)(&acc->v.f32, nan, x, n);
    else (mx ? k->max_f64 : k->min_f64)(&acc->v.d, nan, x, n);
}

static void fold_block(const red_task *t, int64_t o, int64_t b, red_part *out)
{
    seg_walk w;
    switch (t->how) {
    case HOW_LANES: {
        double lanes[RK_LANES];
        for (int l = 0; l < RK_LANES; l++) lanes[l] = t->init.v.d;
        const rk_isa *k = t->isa;
        FOR_SEGMENTS(t, o, b, w) {
            if (t->dt == TD_F32) (t->mul ? k->prod_f32 : k->sum_f32)(lanes, seg_ptr(t, &w), w.len);
            else (t->mul ? k->prod_f64 : k->sum_f64)(lanes, seg_ptr(t, &w), w.len);
        }
        out->v.d = lane_tree(lanes, t->mul);
        return;
    }
    case HOW_EXTREME: {
        red_part acc = t->init;
        bool nan = false;
        FOR_SEGMENTS(t, o, b, w) extreme_seg(t, &acc, &nan, seg_ptr(t, &w), w.len);
        bool zero = t->dt == TD_F32 ? acc.v.f32 == 0.0f : acc.v.d == 0.0;
        if (nan || zero) {
            /* the order decides which NaN or which zero: fold this block in order */
            acc = t->init;
            FOR_SEGMENTS(t, o, b, w) t->fold.seg(&acc.v, seg_ptr(t, &w), w.len);
        }
        *out = acc;
        return;
    }
    case HOW_EXACT: {
        red_part acc = t->init;
        FOR_SEGMENTS(t, o, b, w) t->fold.seg(&acc.v, seg_ptr(t, &w), w.len);
        *out = acc;
        return;
    }
    }
}

static void row_chunk(void *ctx, int64_t lo, int64_t hi)
{
    const red_task *t = ctx;
    for (int64_t u = lo; u < hi; u++) {
        red_part part;
        fold_block(t, u / t->m, u % t->m, &part);
        if (t->m == 1) store_acc(t, &part.v, sizeof part, u, 1);
        else t->parts[u] = part;
    }
}

/* Outputs [lo, hi): combine their m block results in block order and store. */
static void combine_chunk(void *ctx, int64_t lo, int64_t hi)
{
    const red_task *t = ctx;
    for (int64_t o = lo; o < hi; o++) {
        const red_part *p = t->parts + o * t->m;
        red_part acc = t->init;
        if (t->kind == ACC_DOUBLE) {
            tree tr = {.top = 0};
            for (int64_t b = 0; b < t->m; b++) tree_push(&tr, p[b].v.d, t->mul);
            acc.v.d = tree_finish(&tr, t->mul);
        } else if (t->kind == ACC_U64) {
            for (int64_t b = 0; b < t->m; b++)
                acc.v.u = t->mul ? acc.v.u * p[b].v.u : acc.v.u + p[b].v.u;
        } else {
            /* MAX/MIN: the fold's own step on the block results (it is associative) */
            for (int64_t b = 0; b < t->m; b++) t->fold.seg(&acc.v, &p[b].v, 1);
        }
        store_acc(t, &acc.v, sizeof acc, o, 1);
    }
}

/* ---- column path ---- */

static void fold_cols(const red_task *t, int64_t o0, int64_t n, void *acc)
{
    const red_plan *p = &t->plan;
    const size_t asz = t->kind == ACC_SAME ? t->in_size : 8;
    for (int64_t j = 0; j < n; j++) memcpy((char *)acc + (size_t)j * asz, &t->init.v, asz);
    int64_t idx[TD_MAX_RANK] = {0};
    int64_t off = kept_offset(p, o0);
    const char *x = t->x;
    const rk_isa *k = t->isa;
    if (t->how == HOW_EXACT) {
        for (int64_t r = 0; r < p->rcount; r++) {
            t->fold.col(acc, x + (size_t)off * t->in_size, n);
            off = red_next(p, p->nr, idx, off);
        }
        return;
    }
    for (int64_t r = 0; r < p->rcount;) {
        const void *rows[4];
        int nrows = 0;
        for (; nrows < 4 && r < p->rcount; nrows++, r++) {
            rows[nrows] = x + (size_t)off * t->in_size;
            off = red_next(p, p->nr, idx, off);
        }
        bool f32 = t->dt == TD_F32;
        switch (t->opcode) {
        case TD_OP_SUM: case TD_OP_MEAN:
            if (f32) k->col_sum_f32(acc, (const float *const *)rows, nrows, n);
            else k->col_sum_f64(acc, (const double *const *)rows, nrows, n);
            break;
        case TD_OP_PROD:
            if (f32) k->col_prod_f32(acc, (const float *const *)rows, nrows, n);
            else k->col_prod_f64(acc, (const double *const *)rows, nrows, n);
            break;
        case TD_OP_MAX:
            if (f32) k->col_max_f32(acc, (const float *const *)rows, nrows, n);
            else k->col_max_f64(acc, (const double *const *)rows, nrows, n);
            break;
        case TD_OP_MIN:
            if (f32) k->col_min_f32(acc, (const float *const *)rows, nrows, n);
            else k->col_min_f64(acc, (const double *const *)rows, nrows, n);
            break;
        }
    }
}

static void col_chunk(void *ctx, int64_t lo, int64_t hi)
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
    const size_t asz = t->kind == ACC_SAME ? t->in_size : 8;
    const int64_t inner = p->ksize[p->nk - 1];
    for (int64_t o = lo; o < hi;) {
        int64_t n = hi - o;
        if (n > TILE) n = TILE;
        if (n > inner - o % inner) n = inner - o % inner;
        fold_cols(t, o, n, &acc);
        store_acc(t, &acc, asz, o, n);
        o += n;
    }
}

/* ---- argmax / argmin (one axis: at most one reduced group) ---- */

typedef struct arg_task {
    red_plan plan;
    const rk_isa *isa;
    uint32_t dt;
    bool is_max;
    const void *x;
    int64_t *out;
    int64_t n, s; /* axis length and stride */
    int64_t m;    /* row path: blocks per output */
    red_part *parts;
} arg_task;

/* Generates, for element type T (member MEMB of red_part) and BETTER(v, best):
 *   NAME_scan(x, n, out): the first best of x[0..n) in order (the first NaN if any);
 *   NAME_better(a, b): whether a later result b replaces an earlier a (a is not NaN and b
 *                      is a NaN or better);
 *   NAME_cols(t, o0, c, out): outputs o0..o0+c-1 of the column path, in order along the
 *                             axis, neighbouring outputs read side by side. */
#define ARG_KERNEL(NAME, T, MEMB, BETTER, IS_NAN)                                          \
    static void NAME##_scan(const void *x_, int64_t n, red_part *out)                      \
    {                                                                                      \
        const T *x = x_;                                                                   \
        T best = x[0];                                                                     \
        int64_t at = 0;                                                                    \
        for (int64_t k = 1; k < n && !IS_NAN(best); k++) {                                 \
            if (BETTER(x[k], best)) {                                                      \
                best = x[k];                                                               \
                at = k;                                                                    \
            }                                                                              \
        }                                                                                  \
        out->v.MEMB = best;                                                                \
        out->at = at;                                                                      \
    }                                                                                      \
    static bool NAME##_better(const red_part *a, const red_part *b)                        \
    {                                                                                      \
        return !IS_NAN(a->v.MEMB) && BETTER(b->v.MEMB, a->v.MEMB);                         \
    }                                                                                      \
    static void NAME##_cols(const arg_task *t, int64_t o0, int64_t c, int64_t *out)        \
    {                                                                                      \
        T best[TILE];                                                                      \
        const T *x = (const T *)t->x + kept_offset(&t->plan, o0);                          \
        for (int64_t j = 0; j < c; j++) {                                                  \
            best[j] = x[j];                                                                \
            out[j] = 0;                                                                    \
        }                                                                                  \
        for (int64_t k = 1; k < t->n; k++) {                                               \
            const T *restrict row = x + k * t->s;                                          \
            for (int64_t j = 0; j < c; j++) {                                              \
                const T v = row[j];                                                        \
                if (!IS_NAN(best[j]) && BETTER(v, best[j])) {                              \
                    best[j] = v;                                                           \
                    out[j] = k;                                                            \
                }                                                                          \
            }                                                                              \
        }                                                                                  \
    }

#define GT_NAN(v, b) ((v) > (b) || (v) != (v))
#define LT_NAN(v, b) ((v) < (b) || (v) != (v))
#define GT(v, b) ((v) > (b))
#define LT(v, b) ((v) < (b))
#define IS_NAN_F(v) ((v) != (v))
#define NEVER_NAN(v) 0

ARG_KERNEL(argmax_f32, float, f32, GT_NAN, IS_NAN_F)
ARG_KERNEL(argmax_f64, double, d, GT_NAN, IS_NAN_F)
ARG_KERNEL(argmax_i32, int32_t, i32, GT, NEVER_NAN)
ARG_KERNEL(argmax_i64, int64_t, i64, GT, NEVER_NAN)
ARG_KERNEL(argmax_u8, uint8_t, u8, GT, NEVER_NAN)
ARG_KERNEL(argmax_i8, int8_t, i8, GT, NEVER_NAN)
ARG_KERNEL(argmax_i16, int16_t, i16, GT, NEVER_NAN)
ARG_KERNEL(argmin_i8, int8_t, i8, LT, NEVER_NAN)
ARG_KERNEL(argmin_i16, int16_t, i16, LT, NEVER_NAN)
ARG_KERNEL(argmin_f32, float, f32, LT_NAN, IS_NAN_F)
ARG_KERNEL(argmin_f64, double, d, LT_NAN, IS_NAN_F)
ARG_KERNEL(argmin_i32, int32_t, i32, LT, NEVER_NAN)
ARG_KERNEL(argmin_i64, int64_t, i64, LT, NEVER_NAN)
ARG_KERNEL(argmin_u8, uint8_t, u8, LT, NEVER_NAN)

typedef struct arg_fns {
    void (*scan)(const void *x, int64_t n, red_part *out);
    bool (*better)(const red_part *a, const red_part *b);
    void (*cols)(const arg_task *t, int64_t o0, int64_t c, int64_t *out);
} arg_fns;

#define ARG_FNS(name) {name##_scan, name##_better, name##_cols}

static arg_fns find_arg(bool is_max, uint32_t dt)
{
    static const arg_fns amax[TD_DTYPE_COUNT] = {
        [TD_F32] = ARG_FNS(argmax_f32), [TD_F64] = ARG_FNS(argmax_f64),
        [TD_I32] = ARG_FNS(argmax_i32), [TD_I64] = ARG_FNS(argmax_i64),
        [TD_U8] = ARG_FNS(argmax_u8),   [TD_BOOL] = ARG_FNS(argmax_u8),
        [TD_I8] = ARG_FNS(argmax_i8),   [TD_I16] = ARG_FNS(argmax_i16)};
    static const arg_fns amin[TD_DTYPE_COUNT] = {
        [TD_F32] = ARG_FNS(argmin_f32), [TD_F64] = ARG_FNS(argmin_f64),
        [TD_I32] = ARG_FNS(argmin_i32), [TD_I64] = ARG_FNS(argmin_i64),
        [TD_U8] = ARG_FNS(argmin_u8),   [TD_BOOL] = ARG_FNS(argmin_u8),
        [TD_I8] = ARG_FNS(argmin_i8),   [TD_I16] = ARG_FNS(argmin_i16)};
    return is_max ? amax[dt] : amin[dt];
}

/* Block b (elements [b * BLOCK, ...) of the run) of output o: its first best. */
static void arg_block(const arg_task *t, int64_t o, int64_t b, red_part *out)
{
    const int64_t start = b * BLOCK;
    const int64_t len = t->n - start < BLOCK ? t->n - start : BLOCK;
    const size_t es = td__cpu_dtype_size(t->dt);
    const void *x = (const char *)t->x + (size_t)(kept_offset(&t->plan, o) + start) * es;
    const rk_isa *k = t->isa;
    bool nan = false;
    if (t->dt == TD_F32) {
        (t->is_max ? k->argmax_f32 : k->argmin_f32)(x, len, &out->v.f32, &out->at, &nan);
    } else if (t->dt == TD_F64) {
        (t->is_max ? k->argmax_f64 : k->argmin_f64)(x, len, &out->v.d, &out->at, &nan);
    } else {
        nan = true; /* integers: the exact scan */
    }
    if (nan) find_arg(t->is_max, t->dt).scan(x, len, out);
    out->at += start;
}

static void arg_row_chunk(void *ctx, int64_t lo, int64_t hi)
{
    const arg_task *t = ctx;
    for (int64_t u = lo; u < hi; u++) {
        red_part part;
        arg_block(t, u / t->m, u % t->m, &part);
        if (t->m == 1) t->out[u] = part.at;
        else t->parts[u] = part;
    }
}

static void arg_combine_chunk(void *ctx, int64_t lo, int64_t hi)
{
    const arg_task *t = ctx;
    arg_fns f = find_arg(t->is_max, t->dt);
    for (int64_t o = lo; o < hi; o++) {
        const red_part *p = t->parts + o * t->m;
        red_part acc = p[0];
        for (int64_t b = 1; b < t->m; b++)
            if (f.better(&acc, &p[b])) acc = p[b];
        t->out[o] = acc.at;
    }
}

static void arg_col_chunk(void *ctx, int64_t lo, int64_t hi)
{
    const arg_task *t = ctx;
    arg_fns f = find_arg(t->is_max, t->dt);
    const int64_t inner = t->plan.ksize[t->plan.nk - 1];
    for (int64_t o = lo; o < hi;) {
        int64_t c = hi - o;
        if (c > TILE) c = TILE;
        if (c > inner - o % inner) c = inner - o % inner;
        f.cols(t, o, c, t->out + o);
        o += c;
    }
}

/* Partial results: the stack buffer when they fit, else the heap (*heap to free). */
static td_status get_parts(const td__cpu_exec *x, int64_t count, red_part *stack,
                           red_part **parts, red_part **heap)
{
    *heap = NULL;
    if (count <= STACK_PARTS) {
        *parts = stack;
        return TD_OK;
    }
    size_t bytes;
    if (__builtin_mul_overflow((size_t)count, sizeof(red_part), &bytes) ||
        (*heap = td__malloc(bytes)) == NULL)
        return td__cpu_fail(x, TD_ENOMEM, "cpu: reduce: no memory for %lld partial results",
                            (long long)count);
    *parts = *heap;
    return TD_OK;
}

static td_status exec_arg(const td__cpu_exec *x, const td__op *op, const td__view *in,
                          const td__view *out, const red_plan *plan)
{
    uint32_t dt = in[0].desc.dtype;
    if (dt >= TD_DTYPE_COUNT || plan->nr > 1 || out->desc.dtype != TD_I64 || plan->rcount == 0)
        return td__cpu_fail(x, TD_EINTERNAL, "cpu: %s on dtype %u over %lld elements",
                            op->opcode == TD_OP_ARGMAX ? "argmax" : "argmin", dt,
                            (long long)plan->rcount);
    arg_task t = {.plan = *plan,
                  .isa = current_isa(),
                  .dt = dt,
                  .is_max = op->opcode == TD_OP_ARGMAX,
                  .x = in[0].data,
                  .out = out->data,
                  .n = plan->nr > 0 ? plan->rsize[0] : 1,
                  .s = plan->nr > 0 ? plan->rstride[0] : 0,
                  .m = 1};
    if (t.n == 1) {
        for (int64_t o = 0; o < plan->nout; o++) t.out[o] = 0;
        return TD_OK;
    }
    if (plan->inner_kept) {
        td__cpu_run(x, plan->nout, plan->rcount, arg_col_chunk, &t);
        return TD_OK;
    }
    t.m = (t.n + BLOCK - 1) / BLOCK;
    red_part stack[STACK_PARTS], *heap = NULL;
    if (t.m > 1) {
        td_status s = get_parts(x, plan->nout * t.m, stack, &t.parts, &heap);
        if (s != TD_OK) return s;
    }
    td__cpu_run(x, plan->nout * t.m, t.n / t.m, arg_row_chunk, &t);
    if (t.m > 1) td__cpu_run(x, plan->nout, t.m, arg_combine_chunk, &t);
    td__free(heap);
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

/* f16/bf16 (widened to f32, exactly): the f32 reduction of the same values, so the same
 * folds; SUM, MEAN and PROD round their double accumulator once, straight to the half
 * dtype (td__cpu_store_double), MAX/MIN give an f32 that narrows exactly. */
typedef struct widen_task {
    const uint16_t *in;
    float *out;
    bool bf16;
} widen_task;

static void widen_chunk(void *ctx, int64_t lo, int64_t hi)
{
    const widen_task *t = ctx;
    if (t->bf16)
        for (int64_t i = lo; i < hi; i++) t->out[i] = td__bf16_to_f32(t->in[i]);
    else
        for (int64_t i = lo; i < hi; i++) t->out[i] = td__f16_to_f32(t->in[i]);
}

static td_status exec_reduce_half(const td__cpu_exec *x, const td__op *op, const td__view *in,
                                  const td__view *out)
{
    const uint32_t hdt = in[0].desc.dtype;
    const int64_t n = td__cpu_nelem(&in[0].desc), no = td__cpu_nelem(&out->desc);
    const bool same = op->opcode == TD_OP_MAX || op->opcode == TD_OP_MIN;
    float *w = td__malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    float *wo = same ? td__malloc((size_t)(no > 0 ? no : 1) * sizeof(float)) : NULL;
    if (w == NULL || (same && wo == NULL)) {
        td__free(w);
        td__free(wo);
        return td__cpu_fail(x, TD_ENOMEM, "cpu: %s: no memory to widen %s to f32",
                            td__op_name(op->opcode), td__dtype_str(hdt));
    }
    widen_task wt = {.in = in[0].data, .out = w, .bf16 = hdt == TD_BF16};
    td__cpu_run(x, n, 1, widen_chunk, &wt);
    td__view win = in[0];
    win.desc.dtype = TD_F32;
    win.data = w;
    td__view wout = *out;
    if (same) {
        wout.desc.dtype = TD_F32;
        wout.data = wo;
    }
    td_status s = td__cpu_exec_reduce(x, op, &win, &wout);
    if (s == TD_OK && same) {
        uint16_t *o = out->data;
        for (int64_t i = 0; i < no; i++)
            o[i] = hdt == TD_BF16 ? td__f32_to_bf16(wo[i]) : td__f32_to_f16(wo[i]);
    }
    td__free(w);
    td__free(wo);
    return s;
}

td_status td__cpu_exec_reduce(const td__cpu_exec *x, const td__op *op, const td__view *in,
                              const td__view *out)
{
    if (td__dtype_is_half(in[0].desc.dtype)) return exec_reduce_half(x, op, in, out);
    const td__desc *xd = &in[0].desc;
    if (op->n_iattrs < 1 || op->iattrs[0] < 0)
        return td__cpu_fail(x, TD_EINTERNAL, "cpu: reduce without an axes mask");
    red_plan plan;
    td__reduce_plan_init(&plan, xd, (uint64_t)op->iattrs[0]);
    if (plan.nout == 0) return TD_OK;
    if (op->opcode == TD_OP_ARGMAX || op->opcode == TD_OP_ARGMIN)
        return exec_arg(x, op, in, out, &plan);
    exact_pair fold = find_fold(op->opcode, xd->dtype);
    if (fold.seg == NULL)
        return td__cpu_fail(x, TD_EINTERNAL, "cpu: no reduce kernel for opcode %u dtype %u",
                            op->opcode, xd->dtype);
    if (plan.rcount == 0) return fill_empty(x, op, out);
    red_task t = {.plan = plan,
                  .isa = current_isa(),
                  .fold = fold,
                  .init = fold_init(op->opcode, xd->dtype),
                  .kind = acc_kind_of(op->opcode, xd->dtype),
                  .opcode = op->opcode,
                  .dt = xd->dtype,
                  .mul = op->opcode == TD_OP_PROD,
                  .mean = op->opcode == TD_OP_MEAN,
                  .x = in[0].data,
                  .out = out->data,
                  .out_dtype = out->desc.dtype,
                  .in_size = td__cpu_dtype_size(xd->dtype),
                  .out_size = td__cpu_dtype_size(out->desc.dtype)};
    if (t.kind == ACC_SAME && out->desc.dtype != xd->dtype)
        return td__cpu_fail(x, TD_EINTERNAL, "cpu: reduce output dtype %u for input %u",
                            out->desc.dtype, xd->dtype);
    bool is_float = td__dtype_is_float(xd->dtype);
    t.how = !is_float ? HOW_EXACT : t.kind == ACC_DOUBLE ? HOW_LANES : HOW_EXTREME;
    if (plan.inner_kept) {
        td__cpu_run(x, plan.nout, plan.rcount, col_chunk, &t);
        return TD_OK;
    }
    t.inner = plan.nr > 0 ? plan.rsize[plan.nr - 1] : 1;
    t.nruns = plan.rcount / t.inner;
    if (t.inner >= BLOCK) {
        t.bpr = (t.inner + BLOCK - 1) / BLOCK;
        t.m = t.nruns * t.bpr;
    } else {
        t.rpb = BLOCK / t.inner;
        t.m = (t.nruns + t.rpb - 1) / t.rpb;
    }
    red_part stack[STACK_PARTS], *heap = NULL;
    if (t.m > 1) {
        td_status s = get_parts(x, plan.nout * t.m, stack, &t.parts, &heap);
        if (s != TD_OK) return s;
    }
    td__cpu_run(x, plan.nout * t.m, plan.rcount / t.m, row_chunk, &t);
    if (t.m > 1) td__cpu_run(x, plan.nout, t.m, combine_chunk, &t);
    td__free(heap);
    return TD_OK;
}

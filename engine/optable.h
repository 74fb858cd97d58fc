/* optable.h — the op table as data: one row per operation, read by the client (shape
 * inference of lazy handles), the server (validation of every op off the wire), the engine
 * (td__op_infer, the executor's lowering of composites) and the loadable backend modules
 * (dispatch by family, default supports_op), and printed as docs/ops.md by tools/td-opdoc.
 *
 * Why a header of plain `static const` data: a backend module may not call engine symbols
 * (backends/backend.h), and the GPU modules compile this header as CUDA/HIP C++, so the
 * table is data every translation unit expands itself (positional initializers only, no
 * function pointers into the engine). The rules the columns name (shape rules, attribute
 * kinds, dtype classes, lowerings) are implemented once: validation and shape inference in
 * engine/op.c, lowering in engine/session.c, the element functions below by each backend's
 * family code.
 *
 * Adding an op to an existing family: its row in TD_OP_TABLE (a new opcode, appended: opcodes
 * are frozen, they travel on the wire), for a float elementwise unary op its element
 * function in TD_UNARY_FLOAT_KERNELS (the CPU and GPU kernels are stamped from it), its
 * public function (include/tensord.h, client/context.c), its tests, and docs/ops.md
 * regenerated with `build/tools/td-opdoc > docs/ops.md` (a test fails while it is stale).
 *
 * Thread-safety: constant data and pure functions, any thread.
 */
#ifndef TD_ENGINE_OPTABLE_H
#define TD_ENGINE_OPTABLE_H

#include "engine/dtype.h"
#include "tensord.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TD_OP_MAX_INPUTS 8
#define TD_OP_MAX_IATTRS 24
#define TD_OP_MAX_FATTRS 4   /* float attributes (op->fattrs); the third NAN_TO_NUM and
                              * TRUNC_NORMAL use, the fourth TRUNC_NORMAL only */
#define TD_OPCODE_LIMIT 512 /* all opcodes are < this */

/* Op families (what a backend dispatches on). */
enum td__op_class {
    TD_OPCLASS_NONE = 0, /* unknown opcode */
    TD_OPCLASS_CREATE,   /* EMPTY FULL ARANGE RAND_* and the random ops BERNOULLI*
                          * RANDINT RANDPERM TRUNC_NORMAL (engine/philox.h) */
    TD_OPCLASS_UNARY,
    TD_OPCLASS_BINARY,
    TD_OPCLASS_COMPARE,
    TD_OPCLASS_WHERE,
    TD_OPCLASS_CAST,
    TD_OPCLASS_REDUCE,
    TD_OPCLASS_MATMUL,
    TD_OPCLASS_MOVEMENT, /* RESHAPE PERMUTE SLICE CONCAT EXPAND GATHER INDEX_SELECT COPY, and
                          * SLICE_STEP .. GATHER_ND (220..232) */
    TD_OPCLASS_SOFTMAX,  /* SOFTMAX LOG_SOFTMAX */
    TD_OPCLASS_SCAN,     /* CUMSUM CUMPROD */
    TD_OPCLASS_SORT,     /* SORT ARGSORT TOPK_VALUES TOPK_INDICES */
    TD_OPCLASS_NN,       /* normalisations, their backward ops, DROPOUT */
    TD_OPCLASS_CONV,     /* CONV CONV_TRANSPOSE CONV_WEIGHT_GRAD (engine/window.h) */
    TD_OPCLASS_POOL,     /* pooling, their gradients, INTERPOLATE (engine/window.h) */
};

/* How many integer attributes (op->iattrs) an op takes. */
enum td__attr_layout {
    TD_ATTRS_NONE = 0, /* exactly none */
    TD_ATTRS_FIXED,    /* exactly `n`, described by a[0..n) */
    TD_ATTRS_UPTO,     /* at most `n` (absent ones have their default 0) */
    TD_ATTRS_DIMS,     /* a shape: 0..TD_MAX_RANK dims, checked by td__desc_check */
    TD_ATTRS_RANK,     /* one per dim of input 0 (a permutation) */
    TD_ATTRS_2RANK,    /* two per dim of input 0 (starts, then stops) */
    TD_ATTRS_3RANK,    /* three per dim of input 0 (starts, stops, steps) */
    TD_ATTRS_MODE_2RANK, /* one (a mode), then two per dim of input 0 (befores, afters) */
    TD_ATTRS_BOUNDS_DIMS, /* two integers (low, high), then a shape as TD_ATTRS_DIMS */
    TD_ATTRS_SPATIAL,  /* `n` scalars, then `lists` lists of one entry per spatial dim of
                        * input 0 ([N, C, spatial...], rank 3..5): engine/window.h */
};

/* What one integer attribute may hold (checked before any shape rule runs). */
enum td__attr_kind {
    TD_ATTR_INT = 0,   /* any value; the shape rule checks it */
    TD_ATTR_NONNEG,    /* >= 0 */
    TD_ATTR_ENUM,      /* lo..hi; `values` says what they mean */
    TD_ATTR_AXIS,      /* 0..rank-1 of input 0 */
    TD_ATTR_AXES_MASK, /* bit i set: axis i of input 0 (no bit at or above its rank) */
};

typedef struct td__attr_spec {
    const char *name;   /* "axis", "keepdims"; for list layouts the list ("dims") */
    uint8_t kind;       /* enum td__attr_kind */
    int64_t lo, hi;     /* TD_ATTR_ENUM's range */
    const char *values; /* TD_ATTR_ENUM: "0 or 1" */
} td__attr_spec;

typedef struct td__attr_schema {
    uint8_t layout; /* enum td__attr_layout */
    uint8_t n;      /* TD_ATTRS_FIXED / TD_ATTRS_UPTO: the count; SPATIAL: the scalars (<= 2) */
    td__attr_spec a[3]; /* SPATIAL: a[0..n) the scalars; a[2] names the lists ("stride,
                         * dilation, pad_lo, pad_hi") and a[2].lo is their count */
} td__attr_schema;

/* The output dtype. */
enum td__out_dtype {
    TD_OUT_SAME = 0, /* input 0's */
    TD_OUT_ATTR,     /* op->dtype */
    TD_OUT_BOOL,
    TD_OUT_I64,
    TD_OUT_IN1, /* input 1's (WHERE) */
};

/* Which inputs must share one dtype. */
enum td__same_dtype {
    TD_SAME_NONE = 0,
    TD_SAME_ALL,  /* every input has input 0's dtype */
    TD_SAME_REST, /* inputs 1.. share input 1's dtype (WHERE's a and b) */
};

/* Shape rules (engine/op.c implements each once). */
enum td__shape_rule {
    TD_SHAPE_SAME = 0,    /* input 0's shape */
    TD_SHAPE_DIMS,        /* the dims attribute (after the bounds of TD_ATTRS_BOUNDS_DIMS) */
    TD_SHAPE_ARANGE,      /* [length] */
    TD_SHAPE_BROADCAST,   /* numpy broadcast of every input */
    TD_SHAPE_REDUCE,      /* reduced axes dropped, or kept as 1 */
    TD_SHAPE_MATMUL,      /* [..batch, M, K] x [..batch, K, N] -> [..batch, M, N] */
    TD_SHAPE_NORMALIZE,   /* input 0's shape; the axis must not be empty */
    TD_SHAPE_RESHAPE,     /* the dims attribute, same element count */
    TD_SHAPE_EXPAND,      /* the dims attribute, a broadcast of input 0 */
    TD_SHAPE_PERMUTE,     /* dims permuted */
    TD_SHAPE_SLICE,       /* stop - start per dim */
    TD_SHAPE_CONCAT,      /* dims summed along the axis */
    TD_SHAPE_GATHER,      /* the index's shape */
    TD_SHAPE_INDEX_SELECT, /* the axis replaced by the index's dims */
    TD_SHAPE_ALONG,        /* input 0's shape; iattrs[0] an axis of it (rank 0: axis 0) */
    TD_SHAPE_TOPK,         /* input 0's shape with axis iattrs[0] of length k = iattrs[1] */
    TD_SHAPE_SLICE_STEP,   /* per dim the count of start + i * step between start and stop */
    TD_SHAPE_PAD,          /* per dim before + dim + after */
    TD_SHAPE_REPEAT,       /* per dim dim * repeats */
    TD_SHAPE_TRI,          /* input 0's shape, rank >= 2 */
    TD_SHAPE_ONE_HOT,      /* the index's shape + [num_classes] */
    TD_SHAPE_MASKED,       /* input 0's shape; input 1 broadcasts to it */
    TD_SHAPE_SCATTER,      /* input 0's shape; index and src as torch.scatter */
    TD_SHAPE_INDEX_ADD,    /* input 0's shape; src is x with the axis of index's length */
    TD_SHAPE_GATHER_ND,    /* index.shape[:-1] + x.shape[k:], k = index.shape[-1] */
    TD_SHAPE_NORM,         /* the shape of x (input 0); the other inputs' shapes checked per
                            * op (engine/op.c, shape_norm) */
    TD_SHAPE_WINDOW,       /* convolution, pooling, interpolation: engine/window.h */
    TD_SHAPE_ATTENTION     /* q [..., L, E], k [..., S, E], v [..., S, Ev] (mask broadcast
                            * to [..., L, S]) -> [..., L, Ev], batch dims of all broadcast */
};

/* Row flags. */
#define TD_OPF_ENGINE 0x1u        /* run by the engine itself (EMPTY as a zero FULL, RESHAPE aliases) */
#define TD_OPF_NONEMPTY_AXIS 0x2u /* the reduced axes must not be empty */
#define TD_OPF_ONE_AXIS 0x4u      /* exactly one reduced axis */
#define TD_OPF_F0_NONNEG 0x8u     /* fattrs[0] (named by the row's fattrs) is >= 0, not NaN */
#define TD_OPF_F0_NOTNAN 0x10u    /* fattrs[0] is not NaN */

/* How closely a backend must follow the CPU reference (tests/unit/backends/conformance.c
 * states each bound in full). */
enum td__accuracy {
    TD_ACC_EXACT = 0, /* bit for bit (any NaN matches any NaN) */
    TD_ACC_ULP4,      /* float results within 4 ulp */
    TD_ACC_ULP6,
    TD_ACC_ULP8,
    TD_ACC_SUM,       /* 1 ulp + 4 n 2^-53 sum|x| */
    TD_ACC_PROD,      /* 1 ulp + 4 n 2^-53 |prod| */
    TD_ACC_MATMUL,    /* 2 K u (|A| @ |B|) + 1 ulp */
    TD_ACC_NORMAL,    /* 2 ulp + 2^-20 stddev (f32), 4 ulp + 2^-40 stddev (f64) */
    TD_ACC_SOFTMAX,   /* 24 ulp + 2 n 2^-53 |y| */
    TD_ACC_LOG_SOFTMAX, /* 4 ulp + (16 + 8 ln n) u + 2 n 2^-53 */
    TD_ACC_ULP16,       /* float results within 16 ulp: formulas that chain two library
                         * functions (gelu's erfc, softplus's log1p of exp) */
    TD_ACC_STAT,      /* 2 ulp + 16 n 2^-53 B, B per op (VAR STD LOGSUMEXP NORM) */
    TD_ACC_CUMSUM,    /* 1 ulp + 4 n u_acc (cumsum |x|), u_acc 2^-24 f16/bf16, else 2^-53 */
    TD_ACC_CUMPROD,   /* 1 ulp + 4 n u_acc |y| */
    TD_ACC_NORM,      /* 8 ulp + 64 n 2^-53 (1 + max |y|), n the group size (double sums) */
    TD_ACC_CONV,      /* 2 K u (|x| conv |w|) + 1 ulp, K the products per output */
    TD_ACC_ATTENTION  /* 16 ulp + (4 E |scale| max|q| max|k| + 4 S + 8) u max|v| (the score
                       * error moves each weight by its relative size; the weights sum to 1) */
};

/* Lowerings of composite ops (td__lowerings below). */
enum td__lowering_id {
    TD_LOWER_NONE = 0,
    TD_LOWER_SOFTMAX,
    TD_LOWER_LOG_SOFTMAX,
    TD_LOWER_ISNAN,
    TD_LOWER_ISINF,
    TD_LOWER_ISFINITE,
    TD_LOWER_LOGICAL_NOT,
    TD_LOWER_CLAMP_TENSOR,
    TD_LOWER_NORM_L1,
    TD_LOWER_NORM_INF,
    TD_LOWER_NORM_NEG_INF,
    TD_LOWER_ATTENTION, /* a program built per op by engine/lower.c (its steps depend on the
                         * ranks, the mask and causal): n_steps 0 below */
};

typedef struct td__op_row {
    uint32_t opcode;
    const char *name;
    uint8_t family;                /* enum td__op_class */
    uint8_t min_inputs, max_inputs;
    const char *inputs;            /* names of the inputs, comma-separated ("condition, a, b") */
    td__attr_schema attrs;         /* op->iattrs */
    const char *fattrs;            /* what op->fattrs (and seed) hold; "" if unused */
    uint8_t attr_dtype;            /* class op->dtype must be in; TD_DTC_NONE: unused */
    uint8_t in_dtype, rest_dtype;  /* classes of input 0 and of inputs 1.. */
    uint8_t same_dtype;            /* enum td__same_dtype */
    uint8_t out_dtype;             /* enum td__out_dtype */
    uint8_t shape;                 /* enum td__shape_rule */
    uint8_t flags;                 /* TD_OPF_* */
    uint8_t lowering;              /* enum td__lowering_id */
    uint8_t accuracy;              /* enum td__accuracy */
    const char *summary;
} td__op_row;

/* Attribute schemas, by the names the table uses. */
#define TD__ASPEC0 {NULL, TD_ATTR_INT, 0, 0, NULL}
#define TD__ATTRS_NONE {TD_ATTRS_NONE, 0, {TD__ASPEC0, TD__ASPEC0}}
#define TD__ATTRS_DIMS {TD_ATTRS_DIMS, 0, {{"dims", TD_ATTR_INT, 0, 0, NULL}, TD__ASPEC0}}
#define TD__ATTRS_LENGTH {TD_ATTRS_FIXED, 1, {{"length", TD_ATTR_NONNEG, 0, 0, NULL}, TD__ASPEC0}}
#define TD__ATTRS_N {TD_ATTRS_FIXED, 1, {{"n", TD_ATTR_NONNEG, 0, 0, NULL}, TD__ASPEC0}}
#define TD__ATTRS_BOUNDS_DIMS                                                              \
    {TD_ATTRS_BOUNDS_DIMS, 0, {{"low, high, dims", TD_ATTR_INT, 0, 0, NULL}, TD__ASPEC0}}
#define TD__ATTRS_REDUCE                                                                   \
    {TD_ATTRS_FIXED, 2,                                                                    \
     {{"axes mask", TD_ATTR_AXES_MASK, 0, 0, NULL}, {"keepdims", TD_ATTR_ENUM, 0, 1, "0 or 1"}}}
#define TD__ATTRS_PRECISION                                                                \
    {TD_ATTRS_UPTO, 1,                                                                     \
     {{"precision", TD_ATTR_ENUM, 0, 1, "0 (full precision) or 1 (tf32 allowed)"},         \
      TD__ASPEC0}}
#define TD__ATTRS_PERM {TD_ATTRS_RANK, 0, {{"perm", TD_ATTR_INT, 0, 0, NULL}, TD__ASPEC0}}
#define TD__ATTRS_SLICE {TD_ATTRS_2RANK, 0, {{"starts, stops", TD_ATTR_INT, 0, 0, NULL}, TD__ASPEC0}}
#define TD__ATTRS_SLICE_STEP                                                               \
    {TD_ATTRS_3RANK, 0, {{"starts, stops, steps", TD_ATTR_INT, 0, 0, NULL}, TD__ASPEC0}}
#define TD__ATTRS_FLIP                                                                     \
    {TD_ATTRS_FIXED, 1, {{"axes mask", TD_ATTR_AXES_MASK, 0, 0, NULL}, TD__ASPEC0}}
#define TD__ATTRS_SHIFTS {TD_ATTRS_RANK, 0, {{"shifts", TD_ATTR_INT, 0, 0, NULL}, TD__ASPEC0}}
#define TD__ATTRS_REPEATS {TD_ATTRS_RANK, 0, {{"repeats", TD_ATTR_INT, 0, 0, NULL}, TD__ASPEC0}}
#define TD__ATTRS_PAD                                                                      \
    {TD_ATTRS_MODE_2RANK, 0,                                                               \
     {{"mode", TD_ATTR_ENUM, 0, 3, "0 constant, 1 reflect, 2 replicate, 3 circular"},      \
      {"befores, afters", TD_ATTR_INT, 0, 0, NULL}}}
#define TD__ATTRS_DIAGONAL                                                                 \
    {TD_ATTRS_FIXED, 1, {{"diagonal", TD_ATTR_INT, 0, 0, NULL}, TD__ASPEC0}}
#define TD__ATTRS_CLASSES                                                                  \
    {TD_ATTRS_FIXED, 1, {{"num_classes", TD_ATTR_NONNEG, 0, 0, NULL}, TD__ASPEC0}}
#define TD__ATTRS_AXIS {TD_ATTRS_FIXED, 1, {{"axis", TD_ATTR_AXIS, 0, 0, NULL}, TD__ASPEC0}}
#define TD__ATTRS_GELU                                                                     \
    {TD_ATTRS_UPTO, 1,                                                                     \
     {{"approximate", TD_ATTR_ENUM, 0, 1, "0 (exact, erf; also when absent) or 1 (tanh)"},  \
      TD__ASPEC0}}
/* SCAN and SORT: the axis is checked by the shape rule (rank 0 takes axis 0) */
#define TD__ATTRS_SCAN {TD_ATTRS_FIXED, 1, {{"axis", TD_ATTR_INT, 0, 0, NULL}, TD__ASPEC0}}
#define TD__ATTRS_SORT                                                                     \
    {TD_ATTRS_FIXED, 2,                                                                    \
     {{"axis", TD_ATTR_INT, 0, 0, NULL},                                                   \
      {"descending", TD_ATTR_ENUM, 0, 1, "0 (ascending) or 1 (descending)"}}}
#define TD__ATTRS_ATTENTION                                                                \
    {TD_ATTRS_FIXED, 1,                                                                    \
     {{"causal", TD_ATTR_ENUM, 0, 1, "0 or 1 (keep key j <= query i only)"}, TD__ASPEC0}}
#define TD__ATTRS_GROUPS {TD_ATTRS_FIXED, 1, {{"groups", TD_ATTR_NONNEG, 0, 0, NULL}, TD__ASPEC0}}
#define TD__ATTRS_TOPK                                                                     \
    {TD_ATTRS_FIXED, 3,                                                                    \
     {{"axis", TD_ATTR_INT, 0, 0, NULL}, {"k", TD_ATTR_NONNEG, 0, 0, NULL},                \
      {"largest", TD_ATTR_ENUM, 0, 1, "0 (smallest) or 1 (largest)"}}}

/* The window ops (engine/window.h): scalars, then per-spatial-dim lists. */
#define TD__ATTRS_CONV \
    {TD_ATTRS_SPATIAL, 1, \
     {{"groups", TD_ATTR_INT, 0, 0, NULL}, \
      TD__ASPEC0, \
      {"stride, dilation, pad_lo, pad_hi", TD_ATTR_INT, 4, 0, NULL}}}
#define TD__ATTRS_CONV_WGRAD \
    {TD_ATTRS_SPATIAL, 1, \
     {{"groups", TD_ATTR_INT, 0, 0, NULL}, \
      TD__ASPEC0, \
      {"stride, dilation, pad_lo, pad_hi, kernel", TD_ATTR_INT, 5, 0, NULL}}}
#define TD__ATTRS_MAXPOOL \
    {TD_ATTRS_SPATIAL, 1, \
     {{"ceil_mode", TD_ATTR_ENUM, 0, 1, "0 or 1"}, \
      TD__ASPEC0, \
      {"kernel, stride, dilation, pad", TD_ATTR_INT, 4, 0, NULL}}}
#define TD__ATTRS_MAXPOOL_BWD \
    {TD_ATTRS_SPATIAL, 1, \
     {{"ceil_mode", TD_ATTR_ENUM, 0, 1, "0 or 1"}, \
      TD__ASPEC0, \
      {"kernel, stride, dilation, pad, input size", TD_ATTR_INT, 5, 0, NULL}}}
#define TD__ATTRS_AVGPOOL \
    {TD_ATTRS_SPATIAL, 2, \
     {{"ceil_mode", TD_ATTR_ENUM, 0, 1, "0 or 1"}, \
      {"count_include_pad", TD_ATTR_ENUM, 0, 1, "0 or 1"}, \
      {"kernel, stride, pad", TD_ATTR_INT, 3, 0, NULL}}}
#define TD__ATTRS_AVGPOOL_BWD \
    {TD_ATTRS_SPATIAL, 2, \
     {{"ceil_mode", TD_ATTR_ENUM, 0, 1, "0 or 1"}, \
      {"count_include_pad", TD_ATTR_ENUM, 0, 1, "0 or 1"}, \
      {"kernel, stride, pad, input size", TD_ATTR_INT, 4, 0, NULL}}}
#define TD__ATTRS_OUTSIZE \
    {TD_ATTRS_SPATIAL, 0, \
     {TD__ASPEC0, \
      TD__ASPEC0, \
      {"output size", TD_ATTR_INT, 1, 0, NULL}}}
#define TD__ATTRS_INSIZE \
    {TD_ATTRS_SPATIAL, 0, \
     {TD__ASPEC0, \
      TD__ASPEC0, \
      {"input size", TD_ATTR_INT, 1, 0, NULL}}}
#define TD__ATTRS_INTERP \
    {TD_ATTRS_SPATIAL, 2, \
     {{"mode", TD_ATTR_ENUM, 0, 1, "0 (nearest) or 1 (linear: bilinear in 2-d)"}, \
      {"align_corners", TD_ATTR_ENUM, 0, 1, "0 or 1"}, \
      {"output size", TD_ATTR_INT, 1, 0, NULL}}}

#define TD__OPF_0 0u
#define TD__OPF_ENGINE TD_OPF_ENGINE
#define TD__OPF_NE TD_OPF_NONEMPTY_AXIS
#define TD__OPF_ONE_NE (TD_OPF_ONE_AXIS | TD_OPF_NONEMPTY_AXIS)
#define TD__OPF_F0_NONNEG TD_OPF_F0_NONNEG
#define TD__OPF_F0_NOTNAN TD_OPF_F0_NOTNAN

/* The table. X(NAME, opcode, "name", FAMILY, min inputs, max inputs, "input names",
 *   ATTRS (TD__ATTRS_*), "float attributes", dtype-attribute class, input-0 class,
 *   inputs-1.. class, SAME (td__same_dtype), OUT (td__out_dtype), SHAPE (td__shape_rule),
 *   FLAGS (TD__OPF_*), LOWERING, ACCURACY, "summary")
 * Classes are TD_DTC_* without the prefix. Opcodes are frozen; append new ones. */
#define TD_OP_TABLE(X)                                                                     \
    X(EMPTY, 0, "empty", CREATE, 0, 0, "", DIMS, "", ANY, NONE, NONE, NONE, ATTR, DIMS,    \
      ENGINE, NONE, EXACT, "new tensor; reads as zeros until written")                     \
    X(FULL, 1, "full", CREATE, 0, 0, "", DIMS, "value", ANY, NONE, NONE, NONE, ATTR, DIMS, \
      0, NONE, EXACT, "every element is `value` (converted by the cast rules)")            \
    X(ARANGE, 2, "arange", CREATE, 0, 0, "", LENGTH, "start, step", ANY, NONE, NONE, NONE, \
      ATTR, ARANGE, 0, NONE, EXACT, "start + i * step for i in [0, length)")               \
    X(RAND_UNIFORM, 3, "rand_uniform", CREATE, 0, 0, "", DIMS, "low, high; seed", FLOAT,   \
      NONE, NONE, NONE, ATTR, DIMS, 0, NONE, EXACT,                                        \
      "uniform in [low, high), Philox counter-based (engine/philox.h)")                    \
    X(RAND_NORMAL, 4, "rand_normal", CREATE, 0, 0, "", DIMS, "mean, stddev; seed", FLOAT,  \
      NONE, NONE, NONE, ATTR, DIMS, 0, NONE, NORMAL,                                       \
      "normal(mean, stddev), Philox + Box-Muller (engine/philox.h)")                       \
    X(BERNOULLI, 5, "bernoulli", CREATE, 1, 1, "p", NONE, "seed", NONE, FLOAT, NONE, NONE, \
      SAME, SAME, 0, NONE, EXACT,                                                          \
      "1 where u < p else 0, u = one Philox word * 2^-32 (engine/philox.h)")               \
    X(BERNOULLI_SCALAR, 6, "bernoulli_scalar", CREATE, 0, 0, "", DIMS, "p; seed", ANY,     \
      NONE, NONE, NONE, ATTR, DIMS, 0, NONE, EXACT,                                        \
      "bernoulli with one p in [0, 1] for every element (engine/philox.h)")                \
    X(RANDINT, 7, "randint", CREATE, 0, 0, "", BOUNDS_DIMS, "seed", INT, NONE, NONE, NONE, \
      ATTR, DIMS, 0, NONE, EXACT,                                                          \
      "integers in [low, high): low + (x * (high - low)) >> 64, x 64 Philox bits")         \
    X(RANDPERM, 8, "randperm", CREATE, 0, 0, "", N, "seed", NONE, NONE, NONE, NONE, I64,   \
      ARANGE, 0, NONE, EXACT,                                                              \
      "random permutation of 0..n-1: indices sorted by 64-bit Philox keys (ties by index)") \
    X(TRUNC_NORMAL, 9, "trunc_normal", CREATE, 0, 0, "", DIMS, "mean, stddev, a, b; seed", \
      FLOAT, NONE, NONE, NONE, ATTR, DIMS, 0, NONE, EXACT,                                 \
      "normal(mean, stddev) truncated to [a, b] by inverse CDF, IEEE basic ops only")      \
    X(NEG, 10, "neg", UNARY, 1, 1, "x", NONE, "", NONE, NUMERIC, NONE, NONE, SAME, SAME,   \
      0, NONE, EXACT, "-x (integers wrap)")                                                \
    X(ABS, 11, "abs", UNARY, 1, 1, "x", NONE, "", NONE, NUMERIC, NONE, NONE, SAME, SAME,   \
      0, NONE, EXACT, "absolute value (the integer minimum wraps to itself)")                             \
    X(EXP, 12, "exp", UNARY, 1, 1, "x", NONE, "", NONE, FLOAT, NONE, NONE, SAME, SAME, 0,  \
      NONE, ULP4, "e^x")                                                                   \
    X(LOG, 13, "log", UNARY, 1, 1, "x", NONE, "", NONE, FLOAT, NONE, NONE, SAME, SAME, 0,  \
      NONE, ULP4, "natural logarithm")                                                     \
    X(SQRT, 14, "sqrt", UNARY, 1, 1, "x", NONE, "", NONE, FLOAT, NONE, NONE, SAME, SAME,   \
      0, NONE, EXACT, "square root (IEEE-rounded)")                                        \
    X(RSQRT, 15, "rsqrt", UNARY, 1, 1, "x", NONE, "", NONE, FLOAT, NONE, NONE, SAME, SAME, \
      0, NONE, EXACT, "1 / sqrt(x), two IEEE roundings")                                   \
    X(TANH, 16, "tanh", UNARY, 1, 1, "x", NONE, "", NONE, FLOAT, NONE, NONE, SAME, SAME,   \
      0, NONE, ULP6, "hyperbolic tangent")                                                 \
    X(SIGMOID, 17, "sigmoid", UNARY, 1, 1, "x", NONE, "", NONE, FLOAT, NONE, NONE, SAME,   \
      SAME, 0, NONE, ULP6, "1 / (1 + e^-x)")                                               \
    X(RELU, 18, "relu", UNARY, 1, 1, "x", NONE, "", NONE, NUMERIC, NONE, NONE, SAME, SAME, \
      0, NONE, EXACT, "x < 0 ? 0 : x (NaN stays NaN)")                                     \
    X(SILU, 19, "silu", UNARY, 1, 1, "x", NONE, "", NONE, FLOAT, NONE, NONE, SAME, SAME,   \
      0, NONE, ULP6, "x / (1 + e^-x), also called swish")                                  \
    X(ADD, 30, "add", BINARY, 2, 2, "a, b", NONE, "", NONE, NUMERIC, NUMERIC, ALL, SAME,   \
      BROADCAST, 0, NONE, EXACT, "a + b (integers wrap)")                                  \
    X(SUB, 31, "sub", BINARY, 2, 2, "a, b", NONE, "", NONE, NUMERIC, NUMERIC, ALL, SAME,   \
      BROADCAST, 0, NONE, EXACT, "a - b (integers wrap)")                                  \
    X(MUL, 32, "mul", BINARY, 2, 2, "a, b", NONE, "", NONE, NUMERIC, NUMERIC, ALL, SAME,   \
      BROADCAST, 0, NONE, EXACT, "a * b (integers wrap)")                                  \
    X(DIV, 33, "div", BINARY, 2, 2, "a, b", NONE, "", NONE, NUMERIC, NUMERIC, ALL, SAME,   \
      BROADCAST, 0, NONE, EXACT, "a / b (integers: toward zero, x / 0 = 0)")               \
    X(POW, 34, "pow", BINARY, 2, 2, "a, b", NONE, "", NONE, NUMERIC, NUMERIC, ALL, SAME,   \
      BROADCAST, 0, NONE, ULP8,                                                            \
      "a^b (integers: exact, wrapping; b < 0 gives 1 / a^-b toward zero, and 0 for a = 0)")                                                     \
    X(MAXIMUM, 35, "maximum", BINARY, 2, 2, "a, b", NONE, "", NONE, NUMERIC, NUMERIC, ALL, \
      SAME, BROADCAST, 0, NONE, EXACT, "larger of a and b (NaN propagates)")               \
    X(MINIMUM, 36, "minimum", BINARY, 2, 2, "a, b", NONE, "", NONE, NUMERIC, NUMERIC, ALL, \
      SAME, BROADCAST, 0, NONE, EXACT, "smaller of a and b (NaN propagates)")              \
    X(EQ, 40, "eq", COMPARE, 2, 2, "a, b", NONE, "", NONE, ANY, ANY, ALL, BOOL, BROADCAST, \
      0, NONE, EXACT, "a == b")                                                            \
    X(NE, 41, "ne", COMPARE, 2, 2, "a, b", NONE, "", NONE, ANY, ANY, ALL, BOOL, BROADCAST, \
      0, NONE, EXACT, "a != b (true for NaN)")                                             \
    X(LT, 42, "lt", COMPARE, 2, 2, "a, b", NONE, "", NONE, ANY, ANY, ALL, BOOL, BROADCAST, \
      0, NONE, EXACT, "a < b")                                                             \
    X(LE, 43, "le", COMPARE, 2, 2, "a, b", NONE, "", NONE, ANY, ANY, ALL, BOOL, BROADCAST, \
      0, NONE, EXACT, "a <= b")                                                            \
    X(GT, 44, "gt", COMPARE, 2, 2, "a, b", NONE, "", NONE, ANY, ANY, ALL, BOOL, BROADCAST, \
      0, NONE, EXACT, "a > b")                                                             \
    X(GE, 45, "ge", COMPARE, 2, 2, "a, b", NONE, "", NONE, ANY, ANY, ALL, BOOL, BROADCAST, \
      0, NONE, EXACT, "a >= b")                                                            \
    X(WHERE, 50, "where", WHERE, 3, 3, "condition, a, b", NONE, "", NONE, BOOL, ANY, REST, \
      IN1, BROADCAST, 0, NONE, EXACT, "condition ? a : b")                                 \
    X(CAST, 51, "cast", CAST, 1, 1, "x", NONE, "", ANY, ANY, NONE, NONE, ATTR, SAME, 0,    \
      NONE, EXACT, "x converted to the dtype attribute (cast rules)")                      \
    X(SUM, 60, "sum", REDUCE, 1, 1, "x", REDUCE, "", NONE, NUMERIC, NONE, NONE, SAME,      \
      REDUCE, 0, NONE, SUM, "sum over the axes")                                           \
    X(MEAN, 61, "mean", REDUCE, 1, 1, "x", REDUCE, "", NONE, FLOAT, NONE, NONE, SAME,      \
      REDUCE, 0, NONE, SUM, "mean over the axes")                                          \
    X(MAX, 62, "max", REDUCE, 1, 1, "x", REDUCE, "", NONE, ANY, NONE, NONE, SAME, REDUCE,  \
      NE, NONE, EXACT, "largest over the axes (NaN propagates)")                           \
    X(MIN, 63, "min", REDUCE, 1, 1, "x", REDUCE, "", NONE, ANY, NONE, NONE, SAME, REDUCE,  \
      NE, NONE, EXACT, "smallest over the axes (NaN propagates)")                          \
    X(ARGMAX, 64, "argmax", REDUCE, 1, 1, "x", REDUCE, "", NONE, ANY, NONE, NONE, I64,     \
      REDUCE, NE, NONE, EXACT,                                                             \
      "index of the first largest over the axes (row-major over them; flattened: all)")   \
    X(PROD, 65, "prod", REDUCE, 1, 1, "x", REDUCE, "", NONE, NUMERIC, NONE, NONE, SAME,    \
      REDUCE, 0, NONE, PROD, "product over the axes")                                      \
    X(ARGMIN, 66, "argmin", REDUCE, 1, 1, "x", REDUCE, "", NONE, ANY, NONE, NONE, I64,     \
      REDUCE, NE, NONE, EXACT,                                                             \
      "index of the first smallest over the axes (row-major over them; flattened: all)")  \
    X(MATMUL, 70, "matmul", MATMUL, 2, 2, "a, b", PRECISION, "", NONE, NUMERIC, NUMERIC,   \
      ALL, SAME, MATMUL, 0, NONE, MATMUL, "batched matrix product, batch dims broadcast")  \
    X(RESHAPE, 80, "reshape", MOVEMENT, 1, 1, "x", DIMS, "", NONE, ANY, NONE, NONE, SAME,  \
      RESHAPE, ENGINE, NONE, EXACT, "same elements, new dims (an alias)")                  \
    X(PERMUTE, 81, "permute", MOVEMENT, 1, 1, "x", PERM, "", NONE, ANY, NONE, NONE, SAME,  \
      PERMUTE, 0, NONE, EXACT, "dims reordered: out dim i is x dim perm[i]")               \
    X(SLICE, 82, "slice", MOVEMENT, 1, 1, "x", SLICE, "", NONE, ANY, NONE, NONE, SAME,     \
      SLICE, 0, NONE, EXACT, "x[start:stop] along every dim")                              \
    X(CONCAT, 83, "concat", MOVEMENT, 1, TD_OP_MAX_INPUTS, "x...", AXIS, "", NONE, ANY,    \
      ANY, ALL, SAME, CONCAT, 0, NONE, EXACT, "inputs joined along the axis")              \
    X(EXPAND, 84, "expand", MOVEMENT, 1, 1, "x", DIMS, "", NONE, ANY, NONE, NONE, SAME,    \
      EXPAND, 0, NONE, EXACT, "x broadcast to the dims")                                   \
    X(GATHER, 85, "gather", MOVEMENT, 2, 2, "x, index", AXIS, "", NONE, ANY, INDEX, NONE,  \
      SAME, GATHER, 0, NONE, EXACT, "out[..i..] = x[..index[..i..]..] along the axis")     \
    X(INDEX_SELECT, 86, "index_select", MOVEMENT, 2, 2, "x, index", AXIS, "", NONE, ANY,   \
      INDEX, NONE, SAME, INDEX_SELECT, 0, NONE, EXACT, "rows of x picked by index")        \
    X(COPY, 87, "copy", MOVEMENT, 1, 1, "x", NONE, "", NONE, ANY, NONE, NONE, SAME, SAME,  \
      0, NONE, EXACT, "a new buffer with x's contents")                                    \
    X(SOFTMAX, 90, "softmax", SOFTMAX, 1, 1, "x", AXIS, "", NONE, FLOAT, NONE, NONE, SAME, \
      NORMALIZE, 0, SOFTMAX, SOFTMAX, "e^(x - max) / sum e^(x - max) along the axis")      \
    X(LOG_SOFTMAX, 91, "log_softmax", SOFTMAX, 1, 1, "x", AXIS, "", NONE, FLOAT, NONE,     \
      NONE, SAME, NORMALIZE, 0, LOG_SOFTMAX, LOG_SOFTMAX,                                  \
      "(x - max) - log sum e^(x - max) along the axis") \
    X(SIN, 100, "sin", UNARY, 1, 1, "x", NONE, "", NONE, FLOAT, NONE, NONE, SAME, SAME, 0, NONE, ULP4, \
      "sine (radians)") \
    X(COS, 101, "cos", UNARY, 1, 1, "x", NONE, "", NONE, FLOAT, NONE, NONE, SAME, SAME, 0, NONE, ULP4, \
      "cosine (radians)") \
    X(TAN, 102, "tan", UNARY, 1, 1, "x", NONE, "", NONE, FLOAT, NONE, NONE, SAME, SAME, 0, NONE, ULP8, \
      "tangent (radians)") \
    X(ASIN, 103, "asin", UNARY, 1, 1, "x", NONE, "", NONE, FLOAT, NONE, NONE, SAME, SAME, 0, NONE, ULP4, \
      "arcsine, [-pi/2, pi/2]; NaN outside [-1, 1]") \
    X(ACOS, 104, "acos", UNARY, 1, 1, "x", NONE, "", NONE, FLOAT, NONE, NONE, SAME, SAME, 0, NONE, ULP4, \
      "arccosine, [0, pi]; NaN outside [-1, 1]") \
    X(ATAN, 105, "atan", UNARY, 1, 1, "x", NONE, "", NONE, FLOAT, NONE, NONE, SAME, SAME, 0, NONE, ULP4, \
      "arctangent, (-pi/2, pi/2)") \
    X(SINH, 106, "sinh", UNARY, 1, 1, "x", NONE, "", NONE, FLOAT, NONE, NONE, SAME, SAME, 0, NONE, ULP6, \
      "hyperbolic sine") \
    X(COSH, 107, "cosh", UNARY, 1, 1, "x", NONE, "", NONE, FLOAT, NONE, NONE, SAME, SAME, 0, NONE, ULP6, \
      "hyperbolic cosine") \
    X(ASINH, 108, "asinh", UNARY, 1, 1, "x", NONE, "", NONE, FLOAT, NONE, NONE, SAME, SAME, 0, NONE, ULP6, \
      "inverse hyperbolic sine") \
    X(ACOSH, 109, "acosh", UNARY, 1, 1, "x", NONE, "", NONE, FLOAT, NONE, NONE, SAME, SAME, 0, NONE, ULP6, \
      "inverse hyperbolic cosine; NaN below 1") \
    X(ATANH, 110, "atanh", UNARY, 1, 1, "x", NONE, "", NONE, FLOAT, NONE, NONE, SAME, SAME, 0, NONE, ULP6, \
      "inverse hyperbolic tangent; +-inf at +-1, NaN outside [-1, 1]") \
    X(ERF, 111, "erf", UNARY, 1, 1, "x", NONE, "", NONE, FLOAT, NONE, NONE, SAME, SAME, 0, NONE, ULP4, \
      "error function 2/sqrt(pi) int_0^x e^-t^2 dt") \
    X(GELU, 112, "gelu", UNARY, 1, 1, "x", GELU, "", NONE, FLOAT, NONE, NONE, SAME, SAME, 0, NONE, ULP16, \
      "x Phi(x) = x/2 erfc(-x/sqrt 2); approximate 1: x / (1 + e^(-2u)), u = sqrt(2/pi)(x + 0.044715 x^3) (= x/2 (1 + tanh u))") \
    X(SOFTPLUS, 113, "softplus", UNARY, 1, 1, "x", NONE, "beta (finite, not 0), threshold (finite)", NONE, FLOAT, NONE, NONE, SAME, SAME, 0, NONE, ULP16, \
      "x if beta x > threshold, else log1p(e^(beta x)) / beta") \
    X(LEAKY_RELU, 114, "leaky_relu", UNARY, 1, 1, "x", NONE, "slope (finite)", NONE, FLOAT, NONE, NONE, SAME, SAME, 0, NONE, EXACT, \
      "x > 0 ? x : slope x (NaN stays NaN)") \
    X(ELU, 115, "elu", UNARY, 1, 1, "x", NONE, "alpha (finite)", NONE, FLOAT, NONE, NONE, SAME, SAME, 0, NONE, ULP6, \
      "x > 0 ? x : alpha (e^x - 1), by expm1 (so -0 gives -0)") \
    X(LOG1P, 116, "log1p", UNARY, 1, 1, "x", NONE, "", NONE, FLOAT, NONE, NONE, SAME, SAME, 0, NONE, ULP4, \
      "ln(1 + x), accurate near 0") \
    X(EXPM1, 117, "expm1", UNARY, 1, 1, "x", NONE, "", NONE, FLOAT, NONE, NONE, SAME, SAME, 0, NONE, ULP4, \
      "e^x - 1, accurate near 0") \
    X(LOG2, 118, "log2", UNARY, 1, 1, "x", NONE, "", NONE, FLOAT, NONE, NONE, SAME, SAME, 0, NONE, ULP4, \
      "base-2 logarithm") \
    X(LOG10, 119, "log10", UNARY, 1, 1, "x", NONE, "", NONE, FLOAT, NONE, NONE, SAME, SAME, 0, NONE, ULP4, \
      "base-10 logarithm") \
    X(FLOOR, 120, "floor", UNARY, 1, 1, "x", NONE, "", NONE, FLOAT, NONE, NONE, SAME, SAME, 0, NONE, EXACT, \
      "largest integer <= x (+-0, +-inf, NaN kept)") \
    X(CEIL, 121, "ceil", UNARY, 1, 1, "x", NONE, "", NONE, FLOAT, NONE, NONE, SAME, SAME, 0, NONE, EXACT, \
      "smallest integer >= x (+-0, +-inf, NaN kept)") \
    X(ROUND, 122, "round", UNARY, 1, 1, "x", NONE, "", NONE, FLOAT, NONE, NONE, SAME, SAME, 0, NONE, EXACT, \
      "nearest integer, ties to even (rint; -0.5 gives -0)") \
    X(TRUNC, 123, "trunc", UNARY, 1, 1, "x", NONE, "", NONE, FLOAT, NONE, NONE, SAME, SAME, 0, NONE, EXACT, \
      "integer part, toward zero (-0.5 gives -0)") \
    X(RECIPROCAL, 124, "reciprocal", UNARY, 1, 1, "x", NONE, "", NONE, FLOAT, NONE, NONE, SAME, SAME, 0, NONE, EXACT, \
      "1 / x (IEEE-rounded; 1 / +-0 = +-inf)") \
    X(NAN_TO_NUM, 125, "nan_to_num", UNARY, 1, 1, "x", NONE, "nan, posinf, neginf", NONE, FLOAT, NONE, NONE, SAME, SAME, 0, NONE, EXACT, \
      "NaN -> nan, +inf -> posinf, -inf -> neginf (each converted to the dtype), others kept") \
    X(SIGN, 126, "sign", UNARY, 1, 1, "x", NONE, "", NONE, NUMERIC, NONE, NONE, SAME, SAME, 0, NONE, EXACT, \
      "1, -1 or 0 (+0 for +-0; NaN stays NaN)") \
    X(CLAMP, 127, "clamp", UNARY, 1, 1, "x", NONE, "lo, hi (not NaN, lo <= hi; +-inf: unbounded)", NONE, NUMERIC, NONE, NONE, SAME, SAME, 0, NONE, EXACT, \
      "min(max(x, lo), hi) (NaN stays NaN; integers: bounds converted by the cast rules)") \
    X(BITWISE_NOT, 128, "bitwise_not", UNARY, 1, 1, "x", NONE, "", NONE, INTBOOL, NONE, NONE, SAME, SAME, 0, NONE, EXACT, \
      "~x (bool: logical not)") \
    X(ISNAN, 129, "isnan", UNARY, 1, 1, "x", NONE, "", NONE, ANY, NONE, NONE, BOOL, SAME, 0, ISNAN, EXACT, \
      "x != x") \
    X(ISINF, 130, "isinf", UNARY, 1, 1, "x", NONE, "", NONE, NUMERIC, NONE, NONE, BOOL, SAME, 0, ISINF, EXACT, \
      "x is +inf or -inf (x == x and x - x is NaN)") \
    X(ISFINITE, 131, "isfinite", UNARY, 1, 1, "x", NONE, "", NONE, NUMERIC, NONE, NONE, BOOL, SAME, 0, ISFINITE, EXACT, \
      "x is neither inf nor NaN (x - x == x - x)") \
    X(LOGICAL_NOT, 132, "logical_not", UNARY, 1, 1, "x", NONE, "", NONE, ANY, NONE, NONE, BOOL, SAME, 0, LOGICAL_NOT, EXACT, \
      "x == 0 (NaN is true, so gives false)") \
    X(ATAN2, 140, "atan2", BINARY, 2, 2, "a, b", NONE, "", NONE, FLOAT, FLOAT, ALL, SAME, BROADCAST, 0, NONE, ULP6, \
      "angle of the point (b, a): atan(a / b) in the right quadrant, [-pi, pi]") \
    X(HYPOT, 141, "hypot", BINARY, 2, 2, "a, b", NONE, "", NONE, FLOAT, FLOAT, ALL, SAME, BROADCAST, 0, NONE, ULP6, \
      "sqrt(a^2 + b^2) without undue overflow (inf if either is inf)") \
    X(COPYSIGN, 142, "copysign", BINARY, 2, 2, "a, b", NONE, "", NONE, FLOAT, FLOAT, ALL, SAME, BROADCAST, 0, NONE, EXACT, \
      "|a| with the sign bit of b (-0 and NaN signs count)") \
    X(FMOD, 143, "fmod", BINARY, 2, 2, "a, b", NONE, "", NONE, NUMERIC, NUMERIC, ALL, SAME, BROADCAST, 0, NONE, EXACT, \
      "a - trunc(a / b) b, sign of a (C fmod; integers: fmod(a, 0) = a)") \
    X(REMAINDER, 144, "remainder", BINARY, 2, 2, "a, b", NONE, "", NONE, NUMERIC, NUMERIC, ALL, SAME, BROADCAST, 0, NONE, EXACT, \
      "a - floor(a / b) b, sign of b (Python %; floats: a zero takes b's sign; integers: remainder(a, 0) = a)") \
    X(FLOOR_DIVIDE, 145, "floor_divide", BINARY, 2, 2, "a, b", NONE, "", NONE, NUMERIC, NUMERIC, ALL, SAME, BROADCAST, 0, NONE, EXACT, \
      "floor(a / b) (Python //; floats: numpy's divmod rule, x / 0 = a / b; integers: x // 0 = 0, MIN // -1 = MIN)") \
    X(BITWISE_AND, 146, "bitwise_and", BINARY, 2, 2, "a, b", NONE, "", NONE, INTBOOL, INTBOOL, ALL, SAME, BROADCAST, 0, NONE, EXACT, \
      "a & b (bool: logical and)") \
    X(BITWISE_OR, 147, "bitwise_or", BINARY, 2, 2, "a, b", NONE, "", NONE, INTBOOL, INTBOOL, ALL, SAME, BROADCAST, 0, NONE, EXACT, \
      "a | b (bool: logical or)") \
    X(BITWISE_XOR, 148, "bitwise_xor", BINARY, 2, 2, "a, b", NONE, "", NONE, INTBOOL, INTBOOL, ALL, SAME, BROADCAST, 0, NONE, EXACT, \
      "a ^ b (bool: logical xor)") \
    X(SHIFT_LEFT, 149, "shift_left", BINARY, 2, 2, "a, b", NONE, "", NONE, INT, INT, ALL, SAME, BROADCAST, 0, NONE, EXACT, \
      "a << b, bits shifted out are lost; b < 0 or b >= width gives 0") \
    X(SHIFT_RIGHT, 150, "shift_right", BINARY, 2, 2, "a, b", NONE, "", NONE, INT, INT, ALL, SAME, BROADCAST, 0, NONE, EXACT, \
      "a >> b, arithmetic for signed types; b < 0 or b >= width gives 0 (-1 for a negative a)") \
    X(LOGICAL_AND, 155, "logical_and", COMPARE, 2, 2, "a, b", NONE, "", NONE, ANY, ANY, ALL, BOOL, BROADCAST, 0, NONE, EXACT, \
      "(a != 0) and (b != 0) (NaN is true)") \
    X(LOGICAL_OR, 156, "logical_or", COMPARE, 2, 2, "a, b", NONE, "", NONE, ANY, ANY, ALL, BOOL, BROADCAST, 0, NONE, EXACT, \
      "(a != 0) or (b != 0)") \
    X(LOGICAL_XOR, 157, "logical_xor", COMPARE, 2, 2, "a, b", NONE, "", NONE, ANY, ANY, ALL, BOOL, BROADCAST, 0, NONE, EXACT, \
      "(a != 0) != (b != 0)") \
    X(CLAMP_TENSOR, 160, "clamp_tensor", WHERE, 3, 3, "x, lo, hi", NONE, "", NONE, NUMERIC, NUMERIC, ALL, SAME, BROADCAST, 0, CLAMP_TENSOR, EXACT, \
      "minimum(maximum(x, lo), hi), all three broadcast (hi wins where lo > hi; NaN propagates)") \
    X(VAR, 180, "var", REDUCE, 1, 1, "x", REDUCE, "correction", NONE, FLOAT, NONE, NONE,   \
      SAME, REDUCE, F0_NONNEG, NONE, STAT,                                                 \
      "sum (x - mean)^2 / max(0, n - correction) over the axes")                           \
    X(STD, 181, "std", REDUCE, 1, 1, "x", REDUCE, "correction", NONE, FLOAT, NONE, NONE,   \
      SAME, REDUCE, F0_NONNEG, NONE, STAT, "sqrt of var over the axes")                    \
    X(LOGSUMEXP, 182, "logsumexp", REDUCE, 1, 1, "x", REDUCE, "", NONE, FLOAT, NONE, NONE, \
      SAME, REDUCE, 0, NONE, STAT, "m + log sum e^(x - m), m = max, over the axes")        \
    X(NORM, 183, "norm", REDUCE, 1, 1, "x", REDUCE, "p", NONE, FLOAT, NONE, NONE, SAME,    \
      REDUCE, F0_NOTNAN, NONE, STAT,                                                       \
      "(sum |x|^p)^(1/p) over the axes (p 0: count of x != 0; +-inf: max/min |x|)")        \
    X(NORM_L1, 184, "norm_l1", REDUCE, 1, 1, "x", REDUCE, "", NONE, FLOAT, NONE, NONE,     \
      SAME, REDUCE, 0, NORM_L1, SUM, "sum |x| over the axes")                              \
    X(NORM_INF, 185, "norm_inf", REDUCE, 1, 1, "x", REDUCE, "", NONE, FLOAT, NONE, NONE,   \
      SAME, REDUCE, NE, NORM_INF, EXACT, "max |x| over the axes")                          \
    X(NORM_NEG_INF, 186, "norm_neg_inf", REDUCE, 1, 1, "x", REDUCE, "", NONE, FLOAT, NONE, \
      NONE, SAME, REDUCE, NE, NORM_NEG_INF, EXACT, "min |x| over the axes")                \
    X(ANY, 187, "any", REDUCE, 1, 1, "x", REDUCE, "", NONE, ANY, NONE, NONE, BOOL, REDUCE, \
      0, NONE, EXACT, "whether some x != 0 (NaN counts) over the axes; empty: false")      \
    X(ALL, 188, "all", REDUCE, 1, 1, "x", REDUCE, "", NONE, ANY, NONE, NONE, BOOL, REDUCE, \
      0, NONE, EXACT, "whether every x != 0 (NaN counts) over the axes; empty: true")      \
    X(CUMSUM, 190, "cumsum", SCAN, 1, 1, "x", SCAN, "", NONE, NUMERIC, NONE, NONE, SAME,   \
      ALONG, 0, NONE, CUMSUM, "y_i = x_0 + ... + x_i along the axis (integers wrap)")     \
    X(CUMPROD, 191, "cumprod", SCAN, 1, 1, "x", SCAN, "", NONE, NUMERIC, NONE, NONE, SAME, \
      ALONG, 0, NONE, CUMPROD, "y_i = x_0 * ... * x_i along the axis (integers wrap)")    \
    X(SORT, 200, "sort", SORT, 1, 1, "x", SORT, "", NONE, ANY, NONE, NONE, SAME, ALONG, 0, \
      NONE, EXACT, "stable sort along the axis (NaN above +inf)")                          \
    X(ARGSORT, 201, "argsort", SORT, 1, 1, "x", SORT, "", NONE, ANY, NONE, NONE, I64,      \
      ALONG, 0, NONE, EXACT, "indices of the stable sort along the axis")                  \
    X(TOPK_VALUES, 202, "topk_values", SORT, 1, 1, "x", TOPK, "", NONE, ANY, NONE, NONE,   \
      SAME, TOPK, 0, NONE, EXACT, "the k largest (smallest) along the axis, in order")     \
    X(TOPK_INDICES, 203, "topk_indices", SORT, 1, 1, "x", TOPK, "", NONE, ANY, NONE, NONE, \
      I64, TOPK, 0, NONE, EXACT, "indices of topk_values (ties: the lower index first)")    \
    X(SLICE_STEP, 220, "slice_step", MOVEMENT, 1, 1, "x", SLICE_STEP, "", NONE, ANY, NONE, \
      NONE, SAME, SLICE_STEP, 0, NONE, EXACT,                                              \
      "primitive (strided copy): x[start:stop:step] per dim, steps != 0 (negative: backwards)") \
    X(FLIP, 221, "flip", MOVEMENT, 1, 1, "x", FLIP, "", NONE, ANY, NONE, NONE, SAME, SAME, \
      0, NONE, EXACT, "primitive (strided copy, negative strides): the masked axes reversed") \
    X(ROLL, 222, "roll", MOVEMENT, 1, 1, "x", SHIFTS, "", NONE, ANY, NONE, NONE, SAME,     \
      SAME, 0, NONE, EXACT,                                                                \
      "primitive (index remap): out[i] = x[(i - shift) mod dim] per dim, any shift")       \
    X(PAD, 223, "pad", MOVEMENT, 1, 1, "x", PAD, "value", NONE, ANY, NONE, NONE, SAME,     \
      PAD, 0, NONE, EXACT,                                                                 \
      "primitive (index remap): before/after per dim, >= 0; constant (value, cast rules), " \
      "reflect (pad < dim), replicate (dim > 0), circular (pad <= dim), as torch F.pad")   \
    X(REPEAT, 224, "repeat", MOVEMENT, 1, 1, "x", REPEATS, "", NONE, ANY, NONE, NONE,      \
      SAME, REPEAT, 0, NONE, EXACT,                                                        \
      "primitive (index remap): x tiled repeats[d] >= 0 times along each dim (torch repeat)") \
    X(TRIL, 225, "tril", MOVEMENT, 1, 1, "x", DIAGONAL, "", NONE, ANY, NONE, NONE, SAME,   \
      TRI, 0, NONE, EXACT,                                                                 \
      "primitive: x where col - row <= diagonal in the last two dims, else 0 (batched)")   \
    X(TRIU, 226, "triu", MOVEMENT, 1, 1, "x", DIAGONAL, "", NONE, ANY, NONE, NONE, SAME,   \
      TRI, 0, NONE, EXACT,                                                                 \
      "primitive: x where col - row >= diagonal in the last two dims, else 0 (batched)")   \
    X(ONE_HOT, 227, "one_hot", MOVEMENT, 1, 1, "index", CLASSES, "", ANY, INDEX, NONE,     \
      NONE, ATTR, ONE_HOT, 0, NONE, EXACT,                                                 \
      "primitive: out[..., c] = (index[...] == c); an index outside [0, num_classes) "     \
      "fails the op at execution (TD_ERANGE)")                                             \
    X(MASKED_FILL, 228, "masked_fill", MOVEMENT, 2, 2, "x, mask", NONE, "value", NONE,     \
      ANY, BOOL, NONE, SAME, MASKED, 0, NONE, EXACT,                                       \
      "primitive: mask ? value (cast rules) : x; mask broadcasts to x's shape")            \
    X(SCATTER, 229, "scatter", MOVEMENT, 3, 3, "x, index, src", AXIS, "", NONE, ANY, ANY,  \
      NONE, SAME, SCATTER, 0, NONE, EXACT,                                                 \
      "primitive: x with out[..index[..j..]..] = src[..j..] along the axis; duplicates: "  \
      "the last in row-major index order wins; index outside [0, dim): TD_ERANGE")         \
    X(SCATTER_ADD, 230, "scatter_add", MOVEMENT, 3, 3, "x, index, src", AXIS, "", NONE,    \
      NUMERIC, ANY, NONE, SAME, SCATTER, 0, NONE, EXACT,                                   \
      "primitive: x plus src added at index along the axis, per destination in ascending " \
      "index position, each add rounded to the dtype (deterministic)")                     \
    X(INDEX_ADD, 231, "index_add", MOVEMENT, 3, 3, "x, index, src", AXIS, "", NONE,        \
      NUMERIC, ANY, NONE, SAME, INDEX_ADD, 0, NONE, EXACT,                                 \
      "primitive: out[..index[j]..] += src[..j..] along the axis, j ascending per "        \
      "destination, each add rounded to the dtype (deterministic)")                        \
    X(GATHER_ND, 232, "gather_nd", MOVEMENT, 2, 2, "x, index", NONE, "", NONE, ANY, INDEX, \
      NONE, SAME, GATHER_ND, 0, NONE, EXACT,                                               \
      "primitive: out[p, ...] = x[index[p, 0], .., index[p, k-1], ...] (tf.gather_nd); "   \
      "an index outside its dim: TD_ERANGE") \
    X(LAYER_NORM, 290, "layer_norm", NN, 1, 3, "x, weight, bias", AXIS, "eps (finite, >= 0)",  \
      NONE, FLOAT, FLOAT, ALL, SAME, NORM, 0, NONE, NORM,                                   \
      "(x - mean) / sqrt(var + eps) * weight + bias over dims axis.. (biased var; weight, bias: those dims)") \
    X(RMS_NORM, 291, "rms_norm", NN, 1, 2, "x, weight", AXIS, "eps (finite, >= 0)", NONE,     \
      FLOAT, FLOAT, ALL, SAME, NORM, 0, NONE, NORM,                                         \
      "x / sqrt(mean x^2 + eps) * weight over dims axis.. (weight: those dims)")            \
    X(GROUP_NORM, 292, "group_norm", NN, 1, 3, "x, weight, bias", GROUPS, "eps (finite, >= 0)", \
      NONE, FLOAT, FLOAT, ALL, SAME, NORM, 0, NONE, NORM,                                   \
      "x [N, C, ...]: layer norm over each group of C / groups channels, then * weight[c] + bias[c]") \
    X(BATCH_NORM, 293, "batch_norm", NN, 3, 5, "x, mean, var, weight, bias", NONE,            \
      "eps (finite, >= 0)", NONE, FLOAT, FLOAT, ALL, SAME, NORM, 0, NONE, NORM,             \
      "x [N, C, ...]: (x - mean[c]) / sqrt(var[c] + eps) * weight[c] + bias[c] (given statistics)") \
    X(LAYER_NORM_BACKWARD, 294, "layer_norm_backward", NN, 2, 3, "dy, x, weight", AXIS,       \
      "eps (finite, >= 0)", NONE, FLOAT, FLOAT, ALL, SAME, NORM, 0, NONE, NORM,             \
      "dx of layer_norm: r (g - mean g - xhat mean(g xhat)), g = dy * weight, r = 1/sqrt(var + eps)") \
    X(RMS_NORM_BACKWARD, 295, "rms_norm_backward", NN, 2, 3, "dy, x, weight", AXIS,           \
      "eps (finite, >= 0)", NONE, FLOAT, FLOAT, ALL, SAME, NORM, 0, NONE, NORM,             \
      "dx of rms_norm: r (g - xhat mean(g xhat)), g = dy * weight, xhat = r x, r = 1/sqrt(mean x^2 + eps)") \
    X(GROUP_NORM_BACKWARD, 296, "group_norm_backward", NN, 2, 3, "dy, x, weight", GROUPS,     \
      "eps (finite, >= 0)", NONE, FLOAT, FLOAT, ALL, SAME, NORM, 0, NONE, NORM,             \
      "dx of group_norm: layer_norm_backward's formula over each group, g = dy * weight[c]") \
    X(BATCH_NORM_BACKWARD, 297, "batch_norm_backward", NN, 2, 3, "dy, x, weight", NONE,       \
      "eps (finite, >= 0)", NONE, FLOAT, FLOAT, ALL, SAME, NORM, 0, NONE, NORM,             \
      "dx of batch_norm with batch statistics (training): the formula over each channel c's N x spatial elements") \
    X(DROPOUT, 298, "dropout", NN, 1, 1, "x", NONE, "p (in [0, 1]); seed", NONE, FLOAT, NONE, \
      NONE, SAME, SAME, 0, NONE, EXACT,                                                     \
      "x * (u_i >= p ? 1/(1-p) : 0), u_i the Philox f32 uniform of element i (engine/philox.h)") \
    X(SCALED_DOT_PRODUCT_ATTENTION, 299, "scaled_dot_product_attention", NN, 3, 4,            \
      "q, k, v, mask", ATTENTION, "scale (finite)", NONE, FLOAT, ANY, NONE, SAME, ATTENTION,  \
      0, ATTENTION, ATTENTION,                                                              \
      "softmax(q k^T scale + mask (bool: false -> -inf; causal: key j > query i -> -inf), "  \
      "last axis) v; lowered to permute, matmul, mul, (arange, le, where), softmax's steps, " \
      "matmul; native on the CPU (blocks of keys with a running max, f32/f64) and on CUDA " \
      "(no mask, head dim 64 or 128: f16/bf16 on tensor cores, f32 on CUDA cores)")        \
    X(CONV, 260, "conv", CONV, 2, 3, "x, weight, bias", CONV, "", NONE, FLOAT, FLOAT, ALL,  \
      SAME, WINDOW, 0, NONE, CONV,                                                         \
      "N-d convolution (cross-correlation) [N, C, *L] x [Cout, C/groups, *k] (+ bias) -> [N, Cout, *O]") \
    X(CONV_TRANSPOSE, 261, "conv_transpose", CONV, 2, 3, "x, weight, bias", CONV, "", NONE, \
      FLOAT, FLOAT, ALL, SAME, WINDOW, 0, NONE, CONV,                                      \
      "transposed convolution [N, Cin, *L] x [Cin, Cout/groups, *k] (+ bias) -> [N, Cout, *O]; conv's input gradient") \
    X(CONV_WEIGHT_GRAD, 262, "conv_weight_grad", CONV, 2, 2, "x, dy", CONV_WGRAD, "", NONE, \
      FLOAT, FLOAT, ALL, SAME, WINDOW, 0, NONE, CONV,                                      \
      "conv's weight gradient: dw[o, c, k] = sum over n, j of dy[n, o, j] x[n, c, j s + k d - pad_lo]") \
    X(MAX_POOL, 263, "max_pool", POOL, 1, 1, "x", MAXPOOL, "", NONE, FLOAT, NONE, NONE,     \
      SAME, WINDOW, 0, NONE, EXACT, "largest element of each window (NaN wins; padding never does)") \
    X(MAX_POOL_INDICES, 264, "max_pool_indices", POOL, 1, 1, "x", MAXPOOL, "", NONE, FLOAT, \
      NONE, NONE, I64, WINDOW, 0, NONE, EXACT,                                             \
      "flat index in x's spatial plane of max_pool's element (ties: the first; NaN: the last NaN)")  \
    X(MAX_POOL_BACKWARD, 265, "max_pool_backward", POOL, 2, 2, "dy, indices", MAXPOOL_BWD, \
      "", NONE, FLOAT, INDEX, NONE, SAME, WINDOW, 0, NONE, ULP4,                            \
      "dx[i] = sum of dy[j] over the windows j whose index is i (ascending j)")           \
    X(AVG_POOL, 266, "avg_pool", POOL, 1, 1, "x", AVGPOOL, "", NONE, FLOAT, NONE, NONE,     \
      SAME, WINDOW, 0, NONE, ULP4, "mean of each window (PyTorch's divisor rules)")        \
    X(AVG_POOL_BACKWARD, 267, "avg_pool_backward", POOL, 1, 1, "dy", AVGPOOL_BWD, "", NONE, \
      FLOAT, NONE, NONE, SAME, WINDOW, 0, NONE, ULP4,                                      \
      "dx[i] = sum of dy[j] / divisor[j] over the windows j that hold i")                 \
    X(ADAPTIVE_AVG_POOL, 268, "adaptive_avg_pool", POOL, 1, 1, "x", OUTSIZE, "", NONE,      \
      FLOAT, NONE, NONE, SAME, WINDOW, 0, NONE, ULP4,                                      \
      "mean over [floor(i L / O), ceil((i + 1) L / O)) per output i")                      \
    X(ADAPTIVE_AVG_POOL_BACKWARD, 269, "adaptive_avg_pool_backward", POOL, 1, 1, "dy",      \
      INSIZE, "", NONE, FLOAT, NONE, NONE, SAME, WINDOW, 0, NONE, ULP4,                     \
      "dx[i] = sum of dy[j] / |window j| over the windows j that hold i")                 \
    X(INTERPOLATE, 270, "interpolate", POOL, 1, 1, "x", INTERP, "", NONE, FLOAT, NONE,      \
      NONE, SAME, WINDOW, 0, NONE, ULP4,                                                   \
      "resize to the output size: nearest (floor(j in / out)) or (bi)linear, align_corners 0 or 1")

/* Element functions of the float elementwise unary ops, written once: X(NAME, expression
 * of `x`, whose type is `T` (float or double; write constants as (T)1)). The expression may
 * also read the op's float attributes as `p0`, `p1`, `p2` (op->fattrs converted to T) and
 * its first integer attribute as `mode` (0 when absent). The CPU backend stamps one loop per
 * float dtype from each (with <tgmath.h>, so exp(x) is expf for float), the GPU backends one
 * kernel (with device overloads of the same names), so both compute the same expression.
 * f16/bf16 evaluate it with T = float and round once. Functions available: exp, expm1, log,
 * log1p, log2, log10, sqrt, sin, cos, tan, asin, acos, atan, sinh, cosh, tanh, asinh, acosh,
 * atanh, erf, erfc, floor, ceil, rint, trunc, fabs.
 *
 * GELU: the exact form is x/2 (1 + erf(x / sqrt 2)) (Hendrycks & Gimpel, "Gaussian error
 * linear units", 2016), written with erfc so that it keeps its relative accuracy for
 * negative x where 1 + erf cancels; the tanh approximation x/2 (1 + tanh u) of the same
 * paper is written x / (1 + e^(-2u)) (the identity 1 + tanh u = 2 / (1 + e^(-2u))) for the
 * same reason. SOFTPLUS and ELU follow PyTorch's definitions (torch.nn.Softplus, ELU of
 * Clevert et al. 2015). NAN_TO_NUM tests x != x first; x - x == x - x holds for exactly the finite x. */
#define TD_UNARY_FLOAT_KERNELS(X)                                                          \
    X(EXP, exp(x))                                                                         \
    X(LOG, log(x))                                                                         \
    X(SQRT, sqrt(x))                                                                       \
    X(RSQRT, (T)1 / sqrt(x))                                                               \
    X(TANH, tanh(x))                                                                       \
    X(SIGMOID, (T)1 / ((T)1 + exp(-x)))                                                    \
    X(SILU, x / ((T)1 + exp(-x)))                                                          \
    X(SIN, sin(x))                                                                         \
    X(COS, cos(x))                                                                         \
    X(TAN, tan(x))                                                                         \
    X(ASIN, asin(x))                                                                       \
    X(ACOS, acos(x))                                                                       \
    X(ATAN, atan(x))                                                                       \
    X(SINH, sinh(x))                                                                       \
    X(COSH, cosh(x))                                                                       \
    X(ASINH, asinh(x))                                                                     \
    X(ACOSH, acosh(x))                                                                     \
    X(ATANH, atanh(x))                                                                     \
    X(ERF, erf(x))                                                                         \
    X(GELU, mode != 0                                                                      \
                ? x / ((T)1 + exp((T)-1.5957691216057308 * (x + (T)0.044715 * x * x * x))) \
                : (T)0.5 * x * erfc(x * (T)-0.70710678118654752))                          \
    X(SOFTPLUS, x * p0 > p1 ? x : log1p(exp(x * p0)) / p0)                                 \
    X(LEAKY_RELU, x > (T)0 ? x : x * p0)                                                   \
    X(ELU, x > (T)0 ? x : p0 * expm1(x))                                                   \
    X(LOG1P, log1p(x))                                                                     \
    X(EXPM1, expm1(x))                                                                     \
    X(LOG2, log2(x))                                                                       \
    X(LOG10, log10(x))                                                                     \
    X(FLOOR, floor(x))                                                                     \
    X(CEIL, ceil(x))                                                                       \
    X(ROUND, rint(x))                                                                      \
    X(TRUNC, trunc(x))                                                                     \
    X(RECIPROCAL, (T)1 / x)                                                                \
    X(NAN_TO_NUM, x != x ? p0 : x - x == x - x ? x : x > (T)0 ? p1 : p2)

enum td__opcode {
#define TD__OPCODE_ENUM(name, value, ...) TD_OP_##name = value,
    TD_OP_TABLE(TD__OPCODE_ENUM)
#undef TD__OPCODE_ENUM
};

/* Row indexes (position in td__op_rows), and the row count TD_OP_COUNT. */
enum td__op_row_index {
#define TD__ROW_INDEX(name, ...) TD__ROW_##name,
    TD_OP_TABLE(TD__ROW_INDEX)
#undef TD__ROW_INDEX
    TD_OP_COUNT
};

#define TD__ROW_INIT(NAME, code, str, fam, mn, mx, ins, attrs, fat, adt, d0, d1, same, out, \
                     shape, flags, lower, acc, summary)                                    \
    {code,          str,           TD_OPCLASS_##fam, mn,                                   \
     mx,            ins,           TD__ATTRS_##attrs, fat,                                 \
     TD_DTC_##adt,  TD_DTC_##d0,   TD_DTC_##d1,       TD_SAME_##same,                      \
     TD_OUT_##out,  TD_SHAPE_##shape, TD__OPF_##flags, TD_LOWER_##lower,                   \
     TD_ACC_##acc,  summary},

/* Every row, in table order. */
static const td__op_row td__op_rows[TD_OP_COUNT] = {TD_OP_TABLE(TD__ROW_INIT)};

/* The row of an opcode; NULL for an unknown opcode (any uint32 is safe to pass). */
static inline const td__op_row *td__op_row_of(uint32_t opcode)
{
    switch (opcode) {
#define TD__ROW_CASE(name, ...)                                                            \
    case TD_OP_##name:                                                                     \
        return &td__op_rows[TD__ROW_##name];
        TD_OP_TABLE(TD__ROW_CASE)
#undef TD__ROW_CASE
    }
    return NULL;
}

/* Index of the first dim in iattrs of a row whose shape rule is TD_SHAPE_DIMS (RANDINT's
 * shape follows its bounds). */
static inline uint32_t td__op_dims_at(const td__op_row *r)
{
    return r != NULL && r->attrs.layout == TD_ATTRS_BOUNDS_DIMS ? 2u : 0u;
}

/* Family of an opcode (TD_OPCLASS_NONE if unknown). */
static inline enum td__op_class td__op_class(uint32_t opcode)
{
    const td__op_row *r = td__op_row_of(opcode);
    return r != NULL ? (enum td__op_class)r->family : TD_OPCLASS_NONE;
}

/* Name of an opcode ("matmul"), or "unknown" — static string. */
static inline const char *td__op_name(uint32_t opcode)
{
    const td__op_row *r = td__op_row_of(opcode);
    return r != NULL ? r->name : "unknown";
}

/* ---- lowerings: composites as programs of primitive ops ----
 * A lowering is a list of steps; each step is a primitive op (a row without a lowering)
 * whose operands are the composite's inputs (TD_LIN(k)) or earlier steps' outputs
 * (TD_LSTEP(j)), and whose integer attributes are derived from the composite's by the
 * step's `attrs` rule. The last step writes the composite's output; the engine gives the
 * others temporary ids of its own (engine/session.c) and releases them afterwards. */
#define TD_LOWER_MAX_STEPS 8
#define TD_LIN(k) (k)
#define TD_LSTEP(j) (16 + (j))

enum td__lower_attrs {
    TD_LATTR_NONE = 0,  /* no attributes */
    TD_LATTR_AXIS_KEEP, /* {1 << iattrs[0], 1}: reduce over the composite's axis, keep it */
    TD_LATTR_SAME       /* the composite's own iattrs (a reduction's axes mask, keepdims) */
};

typedef struct td__lower_step {
    uint32_t opcode;
    uint8_t n_inputs;
    uint8_t in[3]; /* TD_LIN(k) or TD_LSTEP(j), j < this step */
    uint8_t attrs; /* enum td__lower_attrs */
} td__lower_step;

typedef struct td__lowering {
    uint8_t n_steps;
    td__lower_step steps[TD_LOWER_MAX_STEPS];
} td__lowering;

/* By enum td__lowering_id. SOFTMAX is op.h's contract step by step: m = max, x - m, exp,
 * s = sum (keepdims), e / s; LOG_SOFTMAX ends with (x - m) - log(s).
 * The predicates need no constants: ISNAN is x != x; ISFINITE is d == d with d = x - x
 * (0 for finite x, NaN for inf and NaN; integers give 0); ISINF is (x == x) and (d != d).
 * LOGICAL_NOT makes b = x or x (bool), t = (b == b) (all true) and gives b xor t.
 * CLAMP_TENSOR is minimum(maximum(x, lo), hi). The p-norms that cost one elementwise op and
 * one reduction are lowered: NORM_L1 = sum |x|, NORM_INF = max |x|,
 * NORM_NEG_INF = min |x| (the composite's axes mask and keepdims passed on). */
static const td__lowering td__lowerings[] = {
    {0, {{0, 0, {0, 0, 0}, TD_LATTR_NONE}}},
    {5,
     {{TD_OP_MAX, 1, {TD_LIN(0), 0, 0}, TD_LATTR_AXIS_KEEP},
      {TD_OP_SUB, 2, {TD_LIN(0), TD_LSTEP(0), 0}, TD_LATTR_NONE},
      {TD_OP_EXP, 1, {TD_LSTEP(1), 0, 0}, TD_LATTR_NONE},
      {TD_OP_SUM, 1, {TD_LSTEP(2), 0, 0}, TD_LATTR_AXIS_KEEP},
      {TD_OP_DIV, 2, {TD_LSTEP(2), TD_LSTEP(3), 0}, TD_LATTR_NONE}}},
    {6,
     {{TD_OP_MAX, 1, {TD_LIN(0), 0, 0}, TD_LATTR_AXIS_KEEP},
      {TD_OP_SUB, 2, {TD_LIN(0), TD_LSTEP(0), 0}, TD_LATTR_NONE},
      {TD_OP_EXP, 1, {TD_LSTEP(1), 0, 0}, TD_LATTR_NONE},
      {TD_OP_SUM, 1, {TD_LSTEP(2), 0, 0}, TD_LATTR_AXIS_KEEP},
      {TD_OP_LOG, 1, {TD_LSTEP(3), 0, 0}, TD_LATTR_NONE},
      {TD_OP_SUB, 2, {TD_LSTEP(1), TD_LSTEP(4), 0}, TD_LATTR_NONE}}},
    {1, {{TD_OP_NE, 2, {TD_LIN(0), TD_LIN(0), 0}, TD_LATTR_NONE}}},
    {4,
     {{TD_OP_EQ, 2, {TD_LIN(0), TD_LIN(0), 0}, TD_LATTR_NONE},
      {TD_OP_SUB, 2, {TD_LIN(0), TD_LIN(0), 0}, TD_LATTR_NONE},
      {TD_OP_NE, 2, {TD_LSTEP(1), TD_LSTEP(1), 0}, TD_LATTR_NONE},
      {TD_OP_LOGICAL_AND, 2, {TD_LSTEP(0), TD_LSTEP(2), 0}, TD_LATTR_NONE}}},
    {2,
     {{TD_OP_SUB, 2, {TD_LIN(0), TD_LIN(0), 0}, TD_LATTR_NONE},
      {TD_OP_EQ, 2, {TD_LSTEP(0), TD_LSTEP(0), 0}, TD_LATTR_NONE}}},
    {3,
     {{TD_OP_LOGICAL_OR, 2, {TD_LIN(0), TD_LIN(0), 0}, TD_LATTR_NONE},
      {TD_OP_EQ, 2, {TD_LSTEP(0), TD_LSTEP(0), 0}, TD_LATTR_NONE},
      {TD_OP_LOGICAL_XOR, 2, {TD_LSTEP(0), TD_LSTEP(1), 0}, TD_LATTR_NONE}}},
    {2,
     {{TD_OP_MAXIMUM, 2, {TD_LIN(0), TD_LIN(1), 0}, TD_LATTR_NONE},
      {TD_OP_MINIMUM, 2, {TD_LSTEP(0), TD_LIN(2), 0}, TD_LATTR_NONE}}},
    {2,
     {{TD_OP_ABS, 1, {TD_LIN(0), 0, 0}, TD_LATTR_NONE},
      {TD_OP_SUM, 1, {TD_LSTEP(0), 0, 0}, TD_LATTR_SAME}}},
    {2,
     {{TD_OP_ABS, 1, {TD_LIN(0), 0, 0}, TD_LATTR_NONE},
      {TD_OP_MAX, 1, {TD_LSTEP(0), 0, 0}, TD_LATTR_SAME}}},
    {2,
     {{TD_OP_ABS, 1, {TD_LIN(0), 0, 0}, TD_LATTR_NONE},
      {TD_OP_MIN, 1, {TD_LSTEP(0), 0, 0}, TD_LATTR_SAME}}},
    {0, {{0, 0, {0, 0, 0}, TD_LATTR_NONE}}}, /* ATTENTION: engine/lower.c */
};

/* The lowering of a row, or NULL when it has none. */
static inline const td__lowering *td__op_lowering(const td__op_row *r)
{
    return r != NULL && r->lowering != TD_LOWER_NONE ? &td__lowerings[r->lowering] : NULL;
}

/* The default answer of a backend's supports_op, for an op td__op_infer accepted:
 * every primitive op (in the dtypes its row accepts, which validation has checked), and no
 * composite: those the engine lowers. A backend with a native kernel for a composite, or
 * with kernels for fewer dtypes or sizes than the row allows, says so in its own
 * supports_op (which may call this for the rest). */
static inline bool td__op_default_supports(uint32_t opcode)
{
    const td__op_row *r = td__op_row_of(opcode);
    return r != NULL && r->lowering == TD_LOWER_NONE;
}
#endif

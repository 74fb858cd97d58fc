/* op.h — the op table: the single definition of every operation's opcode, arity,
 * attributes, dtype rules and shape inference.
 *
 * Why one table: the client calls td__op_infer() to give lazy handles their dtype and shape
 * at once, and the server calls the very same function on every op that arrives off the
 * wire before any backend sees it. Backends never validate; an op that reaches a backend
 * has passed td__op_infer() against the actual input tensors.
 *
 * Opcodes are frozen (they travel on the wire); new ones are appended.
 *
 * Attribute layout per op (iattrs = int64 list, fattrs = 2 doubles, dtype, seed):
 *   EMPTY            dtype; iattrs = dims                 new uninitialised tensor (writes follow)
 *   FULL             dtype; iattrs = dims; fattrs[0] = value
 *   ARANGE           dtype; iattrs[0] = n; fattrs = {start, step}      -> [n]
 *   RAND_UNIFORM     dtype f32|f64; iattrs = dims; fattrs = {low, high}; seed
 *   RAND_NORMAL      dtype f32|f64; iattrs = dims; fattrs = {mean, stddev}; seed
 *   unary (NEG..RELU)     1 input, same dtype out
 *   binary (ADD..MINIMUM) 2 inputs of one dtype, broadcast, same dtype out
 *   compare (EQ..GE)      2 inputs of one dtype, broadcast, TD_BOOL out
 *   WHERE            3 inputs (bool cond, a, b), broadcast, dtype of a
 *   CAST             1 input; dtype = target
 *   reduce (SUM..ARGMIN)  1 input; iattrs = {axes bitmask, keepdims 0|1}; ARGMAX/ARGMIN
 *                    need exactly one axis and give TD_I64; MEAN needs a float dtype
 *   MATMUL           2 inputs [..,M,K] x [..,K,N], batch dims broadcast; iattrs = {} or
 *                    {precision}: TD_MATMUL_PRECISION_FULL (0, also when absent) or
 *                    TD_MATMUL_PRECISION_TF32 (1: f32 inputs may be computed in TF32)
 *   RESHAPE          1 input; iattrs = dims (no -1 on the wire; the client resolves it)
 *   PERMUTE          1 input; iattrs = perm (a permutation of 0..rank-1)
 *   SLICE            1 input; iattrs = {start[0..rank), stop[0..rank)}, 0 <= start <= stop <= dim
 *   CONCAT           1..8 inputs; iattrs[0] = axis (0..rank-1)
 *   EXPAND           1 input; iattrs = dims (numpy broadcast target)
 *   GATHER           2 inputs (x, index i32|i64 of x's rank); iattrs[0] = axis
 *   INDEX_SELECT     2 inputs (x, index i32|i64 any rank <= 8-(rank-1)); iattrs[0] = axis
 *   COPY             1 input; same dtype/shape, new buffer
 *   SOFTMAX          1 input f32|f64; iattrs[0] = axis (0..rank-1, dim > 0); same dtype/shape
 *   LOG_SOFTMAX      as SOFTMAX
 *
 * SOFTMAX / LOG_SOFTMAX, the contract every backend implements, per row along `axis`:
 *   m   = max_j x_j                 (NaN propagates, as MAX does)
 *   e_i = exp(x_i - m)              (subtraction and exp in the element dtype)
 *   s   = sum_i e_i                 (accumulated in double, rounded once to the dtype)
 *   softmax y_i = e_i / s;   log_softmax y_i = (x_i - m) - log(s)   (in the element dtype)
 * The CPU backend folds s in ascending index order from 0.0, which makes it bit-identical
 * to the composite MAX, SUB, EXP, SUM, DIV (LOG, SUB) on the CPU; other backends hold to it
 * within the bound tests/unit/backends/conformance.c states.
 */
#ifndef TD_ENGINE_OP_H
#define TD_ENGINE_OP_H

#include "tensord.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TD_OP_MAX_INPUTS 8
#define TD_OP_MAX_IATTRS 24
/* Largest tensor any backend accepts: 2^48 bytes (keeps every index product in int64). */
#define TD_MAX_TENSOR_BYTES (1ULL << 48)

#define TD_OPCODE_MAP(X)                                                                   \
    X(EMPTY, 0, "empty")                                                                   \
    X(FULL, 1, "full")                                                                     \
    X(ARANGE, 2, "arange")                                                                 \
    X(RAND_UNIFORM, 3, "rand_uniform")                                                     \
    X(RAND_NORMAL, 4, "rand_normal")                                                       \
    X(NEG, 10, "neg")                                                                      \
    X(ABS, 11, "abs")                                                                      \
    X(EXP, 12, "exp")                                                                      \
    X(LOG, 13, "log")                                                                      \
    X(SQRT, 14, "sqrt")                                                                    \
    X(RSQRT, 15, "rsqrt")                                                                  \
    X(TANH, 16, "tanh")                                                                    \
    X(SIGMOID, 17, "sigmoid")                                                              \
    X(RELU, 18, "relu")                                                                    \
    X(ADD, 30, "add")                                                                      \
    X(SUB, 31, "sub")                                                                      \
    X(MUL, 32, "mul")                                                                      \
    X(DIV, 33, "div")                                                                      \
    X(POW, 34, "pow")                                                                      \
    X(MAXIMUM, 35, "maximum")                                                              \
    X(MINIMUM, 36, "minimum")                                                              \
    X(EQ, 40, "eq")                                                                        \
    X(NE, 41, "ne")                                                                        \
    X(LT, 42, "lt")                                                                        \
    X(LE, 43, "le")                                                                        \
    X(GT, 44, "gt")                                                                        \
    X(GE, 45, "ge")                                                                        \
    X(WHERE, 50, "where")                                                                  \
    X(CAST, 51, "cast")                                                                    \
    X(SUM, 60, "sum")                                                                      \
    X(MEAN, 61, "mean")                                                                    \
    X(MAX, 62, "max")                                                                      \
    X(MIN, 63, "min")                                                                      \
    X(ARGMAX, 64, "argmax")                                                                \
    X(PROD, 65, "prod")                                                                    \
    X(ARGMIN, 66, "argmin")                                                                \
    X(MATMUL, 70, "matmul")                                                                \
    X(RESHAPE, 80, "reshape")                                                              \
    X(PERMUTE, 81, "permute")                                                              \
    X(SLICE, 82, "slice")                                                                  \
    X(CONCAT, 83, "concat")                                                                \
    X(EXPAND, 84, "expand")                                                                \
    X(GATHER, 85, "gather")                                                                \
    X(INDEX_SELECT, 86, "index_select")                                                    \
    X(COPY, 87, "copy")                                                                    \
    X(SOFTMAX, 90, "softmax")                                                              \
    X(LOG_SOFTMAX, 91, "log_softmax")

enum td__opcode {
#define TD__OPCODE_ENUM(name, value, str) TD_OP_##name = value,
    TD_OPCODE_MAP(TD__OPCODE_ENUM)
#undef TD__OPCODE_ENUM
};
#define TD_OPCODE_LIMIT 128 /* all opcodes are < this */

/* Op classes, for backends that dispatch by family. */
enum td__op_class {
    TD_OPCLASS_NONE = 0, /* unknown opcode */
    TD_OPCLASS_CREATE,   /* EMPTY FULL ARANGE RAND_* */
    TD_OPCLASS_UNARY,
    TD_OPCLASS_BINARY,
    TD_OPCLASS_COMPARE,
    TD_OPCLASS_WHERE,
    TD_OPCLASS_CAST,
    TD_OPCLASS_REDUCE,
    TD_OPCLASS_MATMUL,
    TD_OPCLASS_MOVEMENT, /* RESHAPE PERMUTE SLICE CONCAT EXPAND GATHER INDEX_SELECT COPY */
    TD_OPCLASS_SOFTMAX,  /* SOFTMAX LOG_SOFTMAX */
};

/* A tensor's dtype and shape. */
typedef struct td__desc {
    uint32_t dtype; /* td_dtype; uint32 because it may come off the wire unchecked */
    uint32_t rank;
    int64_t dims[TD_MAX_RANK];
} td__desc;

/* One recorded operation. Ids are chosen by the client; the executor maps them. */
typedef struct td__op {
    uint32_t opcode;
    uint32_t dtype; /* attribute dtype: EMPTY FULL ARANGE RAND_* CAST; else ignored */
    uint32_t n_inputs;
    uint32_t n_iattrs;
    uint64_t inputs[TD_OP_MAX_INPUTS];
    uint64_t output;
    int64_t iattrs[TD_OP_MAX_IATTRS];
    double fattrs[2];
    uint64_t seed;
} td__op;

/* MATMUL's optional attribute iattrs[0], "precision": what the backend may trade for speed.
 * Absent (n_iattrs == 0) means FULL, so ops of clients that predate it keep their meaning.
 * TF32 is a permission for f32 inputs (td_matmul_ex in tensord.h says what it costs); a
 * backend without a TF32 path, and every f64 or integer matmul, computes as for FULL. */
enum td__matmul_precision {
    TD_MATMUL_PRECISION_FULL = 0, /* f32 products and sums in f32 (f64 in f64) */
    TD_MATMUL_PRECISION_TF32 = 1, /* f32 inputs may be rounded to TF32, f32 accumulation */
};

/* Whether a validated MATMUL op allows TF32 for f32 inputs. */
static inline bool td__matmul_allows_tf32(const td__op *op)
{
    return op->n_iattrs >= 1 && op->iattrs[0] == TD_MATMUL_PRECISION_TF32;
}

/* Name of an opcode ("matmul"), or "unknown" — static string. */
const char *td__op_name(uint32_t opcode);
/* Class of an opcode (TD_OPCLASS_NONE if unknown). */
enum td__op_class td__op_class(uint32_t opcode);
/* Element count of a desc: 0 when any dim is 0 (whatever the others), -1 when a dim is
 * negative or the product exceeds INT64_MAX. Never -1 for a desc that passed
 * td__desc_check. Computed without signed overflow for any input (unchecked descs too).
 * Thread-safety: pure function, any thread. */
int64_t td__desc_nelem(const td__desc *d);
/* Byte size of a desc; SIZE_MAX when td__desc_nelem is -1 or the size overflows (so an
 * allocation of it fails cleanly). Exact for a desc that passed td__desc_check.
 * Thread-safety: pure function, any thread. */
size_t td__desc_nbytes(const td__desc *d);
/* Format the message into err (common/errbuf.h rules) and return TD_EINVAL: how the
 * engine's validators report bad input. */
td_status td__einval(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Same dtype, rank and dims. */
bool td__desc_equal(const td__desc *a, const td__desc *b);
/* "f32[2, 3]" into buf (truncated to len bytes, always terminated when len > 0). */
void td__desc_str(const td__desc *d, char *buf, size_t len);
/* The one checked constructor of tensor descriptors: validate a desc from an untrusted
 * source or from a shape rule. Known dtype, rank <= 8, dims >= 0, and the "span" — the
 * product of the non-zero dims times the element size, computed with overflow checks — at
 * most TD_MAX_TENSOR_BYTES. The byte size is 0 or the span, so it fits too.
 * Zero-length dims: an empty shape is accepted only when its non-zero dims also stay within
 * the limit ([0, 2^20, 2^20] f32 is fine; [0, 2^40, 2^40] is refused with a message saying
 * it has no elements but its non-zero dims span more than the limit), because strides are
 * int64 products of dims and every backend computes them for empty tensors too.
 * Returns TD_OK or TD_EINVAL with a message in err (lowercase, names the shape and limit).
 * Thread-safety: pure function, any thread. */
td_status td__desc_check(const td__desc *d, char *err, size_t errlen);

/* Validate `op` against its input descs (in[i] describes op->inputs[i]; n_inputs entries)
 * and compute the output desc. Checks: known opcode, arity, the exact attribute count of
 * the op (ops with no attributes in the layout above take none), attribute values, dtype
 * rules, shapes. Every input and every output desc passes td__desc_check here, whichever
 * rule produced it (broadcasts, casts, matmul, movement ...): an output that is too large
 * is TD_EINVAL "<name>: output shape [..] of <dtype> is too large: ...", never a wrapped
 * size. Does not look at tensor data.
 * Returns: TD_OK (*out set); TD_EINVAL with a message "<name>: <what> ..." in err.
 * Thread-safety: pure function, any thread. */
td_status td__op_infer(const td__op *op, const td__desc *const *in, td__desc *out, char *err,
                       size_t errlen);

/* numpy broadcasting of two shapes into out; false if incompatible. The result is NOT
 * size-checked (its element count may exceed 2^64): pass it to td__desc_check before use;
 * td__op_infer does. */
bool td__broadcast_shapes(const td__desc *a, const td__desc *b, td__desc *out);

/* Row-major strides (in elements) of a desc. Static inline because loadable backend
 * modules use it too and may not link engine symbols. */
static inline void td__desc_strides(const td__desc *d, int64_t strides[TD_MAX_RANK])
{
    int64_t s = 1;
    for (int i = (int)d->rank - 1; i >= 0; i--) {
        strides[i] = s;
        s *= d->dims[i];
    }
}

/* Strides (elements) that read `in` broadcast to `out`'s shape (numpy broadcasting: `in`
 * aligned right, missing and size-1 dims get stride 0). in->rank <= out->rank. */
static inline void td__desc_bcast_strides(const td__desc *in, const td__desc *out,
                                          int64_t st[TD_MAX_RANK])
{
    int64_t own[TD_MAX_RANK];
    td__desc_strides(in, own);
    uint32_t lead = out->rank - in->rank;
    for (uint32_t d = 0; d < out->rank; d++)
        st[d] = (d < lead || in->dims[d - lead] == 1) ? 0 : own[d - lead];
}

/* Batch strides (elements) of matmul operand `d` (rank >= 2) broadcast to the batch dims of
 * the output `out`: the broadcast strides of the leading dims, in whole [rows, cols]
 * matrices. st[0 .. out->rank - 2). Shared by every backend's matmul. */
static inline void td__matmul_batch_strides(const td__desc *d, const td__desc *out,
                                            int64_t st[TD_MAX_RANK])
{
    td__desc bd = *d, bo = *out;
    bd.rank -= 2;
    bo.rank -= 2;
    td__desc_bcast_strides(&bd, &bo, st);
    int64_t mat = d->dims[d->rank - 2] * d->dims[d->rank - 1];
    for (uint32_t i = 0; i < bo.rank; i++) st[i] *= mat;
}

static inline bool td__dtype_is_float(uint32_t dt) { return dt == TD_F32 || dt == TD_F64; }
static inline bool td__dtype_valid(uint32_t dt) { return dt < TD_DTYPE_COUNT; }
#endif

/* op.h — the op record (td__op), tensor descriptors, and validation and shape inference of
 * ops against their rows in the op table (engine/optable.h; docs/ops.md lists them).
 *
 * Why one table: the client calls td__op_infer() to give lazy handles their dtype and shape
 * at once, and the server calls the very same function on every op that arrives off the
 * wire before any backend sees it. Backends never validate; an op that reaches a backend
 * has passed td__op_infer() against the actual input tensors.
 *
 * Opcodes are frozen (they travel on the wire); new ones are appended. Each row gives the
 * op's arity, its attribute schema (iattrs = int64 list, fattrs = up to 4 doubles, dtype, seed),
 * its dtype rule and its shape rule; the notes below are what a row cannot say:
 *   EMPTY            a new tensor; the engine runs it as FULL 0 (no session sees old bytes)
 *   MATMUL           iattrs = {} or {precision}: TD_MATMUL_PRECISION_FULL (0, also when
 *                    absent) or TD_MATMUL_PRECISION_TF32 (1: f32 inputs may use TF32)
 *   RESHAPE          no -1 on the wire (the client resolves it); the engine aliases
 *   GATHER           index of x's rank, each of its other dims <= x's
 *   INDEX_SELECT     index of any rank <= 8 - (rank - 1)
 *
 * SOFTMAX / LOG_SOFTMAX, the contract every backend implements, per row along `axis`:
 *   m   = max_j x_j                 (NaN propagates, as MAX does)
 *   e_i = exp(x_i - m)              (subtraction and exp in the element dtype)
 *   s   = sum_i e_i                 (accumulated in double, rounded once to the dtype)
 *   softmax y_i = e_i / s;   log_softmax y_i = (x_i - m) - log(s)   (in the element dtype)
 * The CPU backend folds s in ascending index order from 0.0, which makes it bit-identical
 * to the composite MAX, SUB, EXP, SUM, DIV (LOG, SUB) on the CPU; other backends hold to it
 * within the bound tests/unit/backends/conformance.c states. The op table lowers both to
 * exactly that composite (td__lowerings) wherever a backend has no native kernel, so the
 * contract also reads: on the CPU, the native kernel equals its lowering bit for bit. The
 * CPU's row sum therefore follows SUM's fold order, whatever SUM's order is.
 */
#ifndef TD_ENGINE_OP_H
#define TD_ENGINE_OP_H

#include "engine/optable.h"
#include "tensord.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Largest tensor any backend accepts: 2^48 bytes (keeps every index product in int64). */
#define TD_MAX_TENSOR_BYTES (1ULL << 48)

/* A tensor's dtype and shape. */
typedef struct td__desc {
    uint32_t dtype; /* td_dtype; uint32 because it may come off the wire unchecked */
    uint32_t rank;
    int64_t dims[TD_MAX_RANK];
} td__desc;

/* One recorded operation. Ids are chosen by the client; the executor maps them. */
typedef struct td__op {
    uint32_t opcode;
    uint32_t dtype; /* attribute dtype: the CREATE rows that have one, CAST; else ignored */
    uint32_t n_inputs;
    uint32_t n_iattrs;
    uint64_t inputs[TD_OP_MAX_INPUTS];
    uint64_t output;
    int64_t iattrs[TD_OP_MAX_IATTRS];
    double fattrs[TD_OP_MAX_FATTRS]; /* absent ones are +0.0 */
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

/* td__op_name, td__op_class and the rows themselves: engine/optable.h. */
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

#endif

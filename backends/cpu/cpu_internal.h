/* cpu_internal.h — what the CPU backend's files share: the execution context handed to
 * every kernel family, desc helpers, the dtype conversion rules, and the broadcast/strided
 * iterator that elementwise and movement kernels run on.
 *
 * Kernel families live one per file (cpu_create.c, cpu_elementwise.c, cpu_reduce.c,
 * cpu_stats.c, cpu_scan.c, cpu_sort.c, cpu_matmul.c, cpu_movement.c, cpu_softmax.c, cpu_nn.c); cpu_backend.c dispatches to them. Every
 * family entry gets an op that td__op_infer() accepted, inputs and an output that are
 * contiguous and row-major, and returns td_status with a message in the context's err buffer.
 */
#ifndef TD_BACKENDS_CPU_INTERNAL_H
#define TD_BACKENDS_CPU_INTERNAL_H

#include "backends/backend.h"
#include "backends/cpu/cpu_pool.h"
#include "engine/convert.h"
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* Below this many elements a kernel runs on the calling thread only. */
#define TD_CPU_PARALLEL_MIN 32768
/* Smallest chunk (elements) a parallel kernel hands one thread. */
#define TD_CPU_GRAIN 16384

/* Instruction-set copies of a kernel family (cpu_isa.c). AVX-512 means F, BW and VL. */
enum td__cpu_isa { TD_CPU_ISA_GENERIC = 0, TD_CPU_ISA_AVX2, TD_CPU_ISA_AVX512, TD_CPU_ISA_COUNT };
/* A family's choice: zero-initialised (static storage) it follows the CPU. */
typedef struct td__cpu_isa_choice {
    _Atomic int forced; /* 0: the best this CPU runs; else the forced ISA + 1 */
} td__cpu_isa_choice;
/* The ISA (enum td__cpu_isa) whose copy to run now. Thread-safety: any thread. */
int td__cpu_isa_pick(td__cpu_isa_choice *c);
/* Tests: force "generic", "avx2" or "avx512" (NULL: follow the CPU again); false for another
 * name or an ISA this CPU lacks. */
bool td__cpu_isa_force(td__cpu_isa_choice *c, const char *name);
const char *td__cpu_isa_name(int isa);

typedef struct td__cpu_exec {
    td__cpu_pool *pool;
    char *err;
    size_t errlen;
} td__cpu_exec;

/* printf into the context's err buffer (if any) and return `s`. */
td_status td__cpu_fail(const td__cpu_exec *x, td_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Run fn over [0, n) on the pool when n >= TD_CPU_PARALLEL_MIN work units (scaled by
 * `cost`, the elements touched per unit), else inline. */
void td__cpu_run(const td__cpu_exec *x, int64_t n, int64_t cost, td__cpu_task_fn fn, void *ctx);

/* SCALED_DOT_PRODUCT_ATTENTION (cpu_attention.c): whether the native kernel takes it (f32,
 * f64, dims BLAS takes), and the kernel. */
bool td__cpu_attention_supports(const td__desc *const *in, const td__desc *out);
/* Tests: use the "generic", "avx2" or "avx512" copies of the f32 row passes (NULL: the
 * machine's best again); false when this CPU lacks the ISA. */
bool td__cpu_attention_force_isa(const char *name);
td_status td__cpu_exec_attention(const td__cpu_exec *x, const td__op *op, const td__view *in,
                                 const td__view *out);

/* The indexed movement ops (cpu_scatter.c): ONE_HOT MASKED_FILL SCATTER SCATTER_ADD
 * INDEX_ADD GATHER_ND. */
td_status td__cpu_exec_indexed(const td__cpu_exec *x, const td__op *op, const td__view *in,
                               const td__view *out);
/* TD_ERANGE naming `name`, the value, [0, dim) and the first offending position (row-major
 * over idx) when an index of idx (TD_I32 or TD_I64) lies outside [0, dim); else TD_OK. */
td_status td__cpu_check_indices(const td__cpu_exec *x, const char *name, const td__view *idx,
                                int64_t dim);

/* Element size of a dtype (0 if unknown): the dtype table's (engine/dtype.h). */
static inline size_t td__cpu_dtype_size(uint32_t dt) { return td__dtype_size(dt); }

static inline int64_t td__cpu_nelem(const td__desc *d)
{
    int64_t n = 1;
    for (uint32_t i = 0; i < d->rank; i++) n *= d->dims[i];
    return n;
}


/* The f16/bf16 conversion loops of cpu_elementwise.c come in bit-identical copies per
 * instruction set. td__cpu_half_force_isa forces one ("generic", "avx2", "avx512"; NULL:
 * the best the CPU runs again) and returns false if the CPU lacks it; td__cpu_half_isa
 * names the one in use. For tests. Thread-safety: any thread (an atomic). */
bool td__cpu_half_force_isa(const char *name);
const char *td__cpu_half_isa(void);
/* n f16 (dt TD_F16) or bf16 (TD_BF16) elements widened to f32 (exact), or f32 rounded once to
 * them, by those loops. Thread-safety: any thread. */
void td__cpu_half_widen(uint32_t dt, const uint16_t *in, float *out, int64_t n);
void td__cpu_half_narrow(uint32_t dt, const float *in, uint16_t *out, int64_t n);

/* ---- conversion rules (CAST, FULL, ARANGE) ----
 * float -> integer: NaN gives 0; otherwise truncate toward zero and saturate to the target
 *                   range (u8: negative gives 0, >= 255 gives 255).
 * integer -> integer: two's-complement wrap (keep the low bits), as numpy's astype.
 * anything -> bool:  x != 0 (NaN gives 1).  bool -> anything: 0 or 1.
 * integer -> float, f64 -> f32: C conversion, round to nearest even (f32 overflow: +-inf).
 * -> f16 / bf16: engine/convert.h (round once, ties to even); i8 / i16: td__sat_i8/16. */
static inline int32_t td__cpu_sat_i32(double v)
{
    if (v != v) return 0;
    if (v <= -2147483648.0) return INT32_MIN;
    if (v >= 2147483647.0) return INT32_MAX;
    return (int32_t)v;
}

static inline int64_t td__cpu_sat_i64(double v)
{
    if (v != v) return 0;
    if (v <= -9223372036854775808.0) return INT64_MIN;
    if (v >= 9223372036854775808.0) return INT64_MAX;
    return (int64_t)v;
}

static inline uint8_t td__cpu_sat_u8(double v)
{
    if (v != v || v <= 0.0) return 0;
    if (v >= 255.0) return 255;
    return (uint8_t)v;
}

/* Store double v at element i of a buffer of dtype dt, by the rules above. */
static inline void td__cpu_store_double(uint32_t dt, void *base, int64_t i, double v)
{
    switch (dt) {
    case TD_F32: ((float *)base)[i] = (float)v; break;
    case TD_F64: ((double *)base)[i] = v; break;
    case TD_I32: ((int32_t *)base)[i] = td__cpu_sat_i32(v); break;
    case TD_I64: ((int64_t *)base)[i] = td__cpu_sat_i64(v); break;
    case TD_U8: ((uint8_t *)base)[i] = td__cpu_sat_u8(v); break;
    case TD_BOOL: ((uint8_t *)base)[i] = v != 0.0; break;
    case TD_F16: ((uint16_t *)base)[i] = td__f64_to_f16(v); break;
    case TD_BF16: ((uint16_t *)base)[i] = td__f64_to_bf16(v); break;
    case TD_I8: ((int8_t *)base)[i] = td__sat_i8(v); break;
    case TD_I16: ((int16_t *)base)[i] = td__sat_i16(v); break;
    }
}

/* ---- broadcast / strided iterator ----
 * Walks a contiguous output of some shape in row-major order while tracking the element
 * offsets of up to TD_CPU_ITER_MAX_IN inputs with arbitrary strides (0 = broadcast). Dims of
 * size 1 are dropped and adjacent dims that are contiguous for every operand are merged, so
 * same-shape operands become one flat run and a scalar operand a stride-0 run. */
#define TD_CPU_ITER_MAX_IN 3

typedef struct td__cpu_iter {
    int rank; /* >= 1 after init */
    int n_in;
    int64_t dims[TD_MAX_RANK];
    int64_t in_strides[TD_CPU_ITER_MAX_IN][TD_MAX_RANK];
} td__cpu_iter;

/* A row callback: `n` output elements starting at out element `out_index` (the output is
 * contiguous, so its stride is 1); in_off[k] is input k's element offset of the first one
 * and in_stride[k] its step. */
typedef void (*td__cpu_row_fn)(void *ctx, const int64_t *in_off, const int64_t *in_stride,
                               int64_t out_index, int64_t n);

/* Set up an iterator over `out` (rank, dims) with n_in inputs whose strides are given in
 * out's axes. */
void td__cpu_iter_init(td__cpu_iter *it, const td__desc *out, int n_in,
                       const int64_t (*in_strides)[TD_MAX_RANK]);

/* Call row() for every row that covers output elements [lo, hi), in order. */
void td__cpu_iter_rows(const td__cpu_iter *it, int64_t lo, int64_t hi, td__cpu_row_fn row,
                       void *ctx);

/* ---- kernel families ---- */
td_status td__cpu_exec_create(const td__cpu_exec *x, const td__op *op, const td__view *in,
                              const td__view *out);
/* BERNOULLI BERNOULLI_SCALAR RANDINT TRUNC_NORMAL RANDPERM (cpu_random.c, cpu_sort.c). */
td_status td__cpu_exec_random(const td__cpu_exec *x, const td__op *op, const td__view *in,
                              const td__view *out);
td_status td__cpu_exec_randperm(const td__cpu_exec *x, const td__op *op, const td__view *out);
td_status td__cpu_exec_unary(const td__cpu_exec *x, const td__op *op, const td__view *in,
                             const td__view *out);
td_status td__cpu_exec_binary(const td__cpu_exec *x, const td__op *op, const td__view *in,
                              const td__view *out);
td_status td__cpu_exec_where(const td__cpu_exec *x, const td__view *in, const td__view *out);
td_status td__cpu_exec_cast(const td__cpu_exec *x, const td__view *in, const td__view *out);
td_status td__cpu_exec_reduce(const td__cpu_exec *x, const td__op *op, const td__view *in,
                              const td__view *out);
td_status td__cpu_exec_matmul(const td__cpu_exec *x, const td__view *in, const td__view *out);
td_status td__cpu_exec_movement(const td__cpu_exec *x, const td__op *op, const td__view *in,
                                const td__view *out);
td_status td__cpu_exec_softmax(const td__cpu_exec *x, const td__op *op, const td__view *in,
                               const td__view *out);
/* CONV family (cpu_conv.c) and POOL family (cpu_window.c): engine/window.h. */
td_status td__cpu_exec_conv(const td__cpu_exec *x, const td__op *op, const td__view *in,
                            const td__view *out);
td_status td__cpu_exec_window(const td__cpu_exec *x, const td__op *op, const td__view *in,
                              const td__view *out);

td_status td__cpu_exec_nn(const td__cpu_exec *x, const td__op *op, const td__view *in,
                          const td__view *out);
td_status td__cpu_exec_stats(const td__cpu_exec *x, const td__op *op, const td__view *in,
                             const td__view *out);
td_status td__cpu_exec_scan(const td__cpu_exec *x, const td__op *op, const td__view *in,
                            const td__view *out);
td_status td__cpu_exec_sort(const td__cpu_exec *x, const td__op *op, const td__view *in,
                            const td__view *out);
/* Whether a (validated) REDUCE op runs in cpu_stats.c: VAR STD LOGSUMEXP NORM ANY ALL, and
 * ARGMAX/ARGMIN whose axes are not one run of adjacent dims (x is the input's desc). */
bool td__cpu_stats_op(const td__op *op, const td__desc *x);

/* Whether the kernel tables cover this op's dtypes (used by supports_op). */
bool td__cpu_elementwise_supports(uint32_t opcode, uint32_t in_dtype, uint32_t out_dtype);
bool td__cpu_reduce_supports(uint32_t opcode, uint32_t in_dtype);
#endif

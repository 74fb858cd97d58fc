/* vk_ops.c — which ops the Vulkan backend runs (supports_op) and how each becomes a
 * dispatch of one of the shader variants (shaders/, built by meson.build): td__vk_exec sends
 * each op class to its file. Here: the elementwise families, create and random ops,
 * DROPOUT, the normalisations and MATMUL, with the helpers the op files share (the strided
 * walk, FULL's bits); vk_reduce.c: reductions, stats, scans and sorts; vk_movement.c: the
 * movement and indexed ops; vk_window.c: the pools and the convolutions.
 *
 * Coverage, all held to the CPU by tests/unit/backends/conformance.c on lavapipe:
 *   create    FULL (every dtype: the host converts the value by the cast rules and the shader
 *             writes its bits), ARANGE and BERNOULLI_SCALAR (every dtype), RAND_UNIFORM
 *             RAND_NORMAL BERNOULLI TRUNC_NORMAL (f32 f64 f16 bf16; TRUNC_NORMAL through
 *             engine/normcdf.h as shaders/normcdf.glsl), RANDINT (i32 i64 u8 i8 i16):
 *             Philox as engine/philox.h (shaders/philox.glsl),
 *             the CPU's bits (RAND_NORMAL within its bound: log and sincos differ);
 *             RANDPERM (i64, a rank sort of the Philox draws, as the sorts below);
 *   nn        DROPOUT (the CPU's Philox mask and one IEEE multiply: bit-identical), LAYER_NORM
 *             RMS_NORM GROUP_NORM BATCH_NORM and their backward ops (shaders/nn.comp, in
 *             double, as backends/cpu/cpu_nn.c) in f32 f64 f16 bf16;
 *   window    the POOL family (pools, their gradients, INTERPOLATE: the CPU's loops per
 *             element; shaders/window.comp) and CONV CONV_TRANSPOSE CONV_WEIGHT_GRAD (im2col
 *             and GEMMs, vk_window.c; window.comp's direct loops where those do not fit) in
 *             f32 f64 f16 bf16;
 *   unary     f32: every unary primitive of the table (the trigonometric, hyperbolic and
 *             inverse functions, ERF, GELU (both modes), SOFTPLUS included: evaluated in
 *             double by shaders/dmath.glsl and rounded once); f64: all but SIN COS TAN ASIN
 *             ACOS ATAN ERF GELU (their reduction is f32-accurate only); i32, i64, u8, i8,
 *             i16: NEG ABS RELU SIGN CLAMP BITWISE_NOT; bool: BITWISE_NOT;
 *   binary    f32: ADD SUB MUL DIV POW MAXIMUM MINIMUM ATAN2 HYPOT COPYSIGN FMOD REMAINDER
 *             FLOOR_DIVIDE; f64: those but ATAN2 HYPOT; i32 i64 u8 i8 i16: ADD SUB MUL DIV POW
 *             MAXIMUM MINIMUM FMOD REMAINDER FLOOR_DIVIDE BITWISE_AND/OR/XOR SHIFT_LEFT/RIGHT;
 *             bool: BITWISE_AND/OR/XOR;
 *   compare   EQ NE LT LE GT GE LOGICAL_AND/OR/XOR in every dtype;
 *   f16 bf16  every unary, binary, compare, reduce and matmul op of f32, widened to f32 and
 *             rounded once to nearest even (shaders/half.glsl: 16-bit storage, no f16
 *             arithmetic, so shaderFloat16 is not needed); SUM/MEAN/PROD round their double
 *             accumulator once (f32 round-to-odd, then the half), as the CPU;
 *   where     every dtype (the values are moved as bits); CAST between every pair of dtypes
 *             (one rounding into a half: f64 and i64 go through round-to-odd);
 *   reduce    SUM PROD MAX MIN ARGMAX ARGMIN ANY ALL in f32 f64 i32 i64 u8 i8 i16 (bool:
 *             MAX MIN ARG* ANY ALL), MEAN in f32 f64;
 *   stats     VAR STD LOGSUMEXP NORM in f32 f16 bf16 f64 (f64 NORM: p in 0, 1, 2, +-inf),
 *             in double by backends/cpu/cpu_stats.c's formulas (shaders/stats.comp);
 *   scan      CUMSUM CUMPROD in f32 f64 f16 bf16 i32 i64 u8 i8 i16 (shaders/scan.comp);
 *   sort      SORT ARGSORT TOPK_VALUES TOPK_INDICES in every dtype, by rank
 *             (shaders/sort.comp: engine/sortkey.h's keys, stable): lines of at most
 *             16384 elements (4096 on a CPU implementation such as lavapipe), longer ones
 *             refused;
 *   matmul    f32 f64 f16 bf16 i32 i64 u8 i8 i16 (batched, broadcast batch dims); f16 on
 *             cooperative matrices (tensor cores, shaders/matmul_coop.comp) where the device
 *             has VK_NV_cooperative_matrix: within the matmul bound, not bit for bit;
 *   movement  every movement primitive in every dtype: PERMUTE SLICE CONCAT EXPAND COPY
 *             SLICE_STEP FLIP (strided walks), GATHER INDEX_SELECT, and ROLL PAD REPEAT TRIL
 *             TRIU MASKED_FILL ONE_HOT GATHER_ND SCATTER (shaders/index.comp, one invocation
 *             per output element); SCATTER_ADD and INDEX_ADD in every numeric dtype
 *             (each destination adds its contributions in the CPU's order, rounded per add).
 * Every family lists its opcodes, so an op added to the table later is refused until it has
 * a kernel here. Everything else is refused here, so the engine lowers composites into these
 * (SOFTMAX, LOG_SOFTMAX, NORM_L1, CLAMP_TENSOR, ISNAN, ...) or answers TD_EUNSUPPORTED naming
 * the op, the device and the dtype: what is left are SIN COS TAN ASIN ACOS ATAN ERF GELU ATAN2 HYPOT
 * in f64, NORM f64 with p outside 0, 1, 2, +-inf, long sorts and the lavapipe loop limits
 * below. i8 and i16 compute as i32 (NBITS their width for the shifts) and wrap on store.
 *
 * Limits: every tensor of an op must fit one storage-buffer binding (maxStorageBufferRange,
 * 128 MiB on lavapipe) and hold fewer than 2^32 elements (the shaders index in 32 bits);
 * larger ones are refused. lavapipe ends an invocation's loops after 65535 iterations in
 * all: scans split long lines into blocks for it; reductions folding more than about 15M
 * elements into one output (5M for VAR STD LOGSUMEXP NORM, 3.8M per normalised group) and
 * matmuls with K above 60000 are refused on a CPU implementation (loops_ok; no GPU driver
 * has that cap), and so are the pools and convolutions whose shader would loop more than
 * 60000 times an invocation (vk_window.c's td__vk_window_loops_ok: a conv whose GEMM
 * does not fit and whose direct shader folds more than about 20000 products per output, a
 * pool window or gradient gather of more than about 60000 elements; conv over 131072
 * channels once gave 6554 for 131072 there); the refusal is logged at info level with the
 * count. The ops that index by tensor data (GATHER INDEX_SELECT ONE_HOT
 * GATHER_ND SCATTER SCATTER_ADD INDEX_ADD) read their index tensor back to check it against
 * [0, dim) before the dispatch, with the CPU's message, which costs a submission.
 */
#include "backends/vulkan/vk_internal.h"
#include "engine/collapse.h"
#include "engine/convert.h"
#include "engine/philox.h"
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* The arithmetic kinds with shaders: f32, f64, i32, i64, u8 (bool where the op allows it).
 * f64 and i64 need shaderFloat64 and shaderInt64, which vk_device.c requires of every device
 * it lists (a device without them is not offered at all, with its reason at info level). */
const char *td__vk_dtype_name(uint32_t dt)
{
    switch (dt) {
    case TD_F32: return "f32";
    case TD_F64: return "f64";
    case TD_I32: return "i32";
    case TD_I64: return "i64";
    case TD_U8: return "u8";
    case TD_BOOL: return "bool";
    case TD_F16: return "f16";
    case TD_BF16: return "bf16";
    case TD_I8: return "i8";
    case TD_I16: return "i16";
    default: return NULL;
    }
}

static bool kind_ok(uint32_t dt, bool with_bool)
{
    return dt == TD_F32 || dt == TD_F64 || dt == TD_I32 || dt == TD_I64 || dt == TD_U8 ||
           dt == TD_I8 || dt == TD_I16 || (with_bool && dt == TD_BOOL);
}

/* f16 and bf16 run every op their f32 kernel runs: widened to f32, rounded once
 * (shaders/half.glsl). Only 16-bit storage access is needed (required of every listed
 * device), not shaderFloat16: no arithmetic happens in 16 bits. */
static uint32_t as_f32_if_half(uint32_t dt)
{
    return dt == TD_F16 || dt == TD_BF16 ? TD_F32 : dt;
}

static bool opcode_in(uint32_t op, const uint32_t *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (list[i] == op) return true;
    return false;
}
#define IN_LIST(op, ...)                                                                   \
    opcode_in((op), (const uint32_t[]){__VA_ARGS__},                                       \
              sizeof((const uint32_t[]){__VA_ARGS__}) / sizeof(uint32_t))

/* f64 runs every unary op but the trigonometric ones, ERF and GELU: dmath.glsl's exp, log
 * and log1p are evaluated without reassociation (`precise`) and are within a few double
 * ulps, pow goes through double-double, while the trigonometric reduction and erf are
 * accurate for f32 arguments only. */
static bool unary_ok(uint32_t op, uint32_t dt)
{
    dt = as_f32_if_half(dt);
    if (IN_LIST(op, TD_OP_NEG, TD_OP_ABS, TD_OP_RELU, TD_OP_SIGN, TD_OP_CLAMP))
        return kind_ok(dt, false);
    if (op == TD_OP_BITWISE_NOT)
        return dt == TD_BOOL || (kind_ok(dt, false) && dt != TD_F32 && dt != TD_F64);
    if (dt != TD_F32 && dt != TD_F64) return false;
    if (IN_LIST(op, TD_OP_SQRT, TD_OP_RSQRT, TD_OP_LEAKY_RELU, TD_OP_FLOOR, TD_OP_CEIL,
                TD_OP_ROUND, TD_OP_TRUNC, TD_OP_RECIPROCAL, TD_OP_NAN_TO_NUM, TD_OP_EXP,
                TD_OP_LOG, TD_OP_TANH, TD_OP_SIGMOID, TD_OP_SILU, TD_OP_ELU, TD_OP_LOG1P,
                TD_OP_EXPM1, TD_OP_LOG2, TD_OP_LOG10, TD_OP_SINH, TD_OP_COSH, TD_OP_ASINH,
                TD_OP_ACOSH, TD_OP_ATANH, TD_OP_SOFTPLUS))
        return true;
    return dt == TD_F32 && IN_LIST(op, TD_OP_SIN, TD_OP_COS, TD_OP_TAN, TD_OP_ASIN,
                                   TD_OP_ACOS, TD_OP_ATAN, TD_OP_ERF, TD_OP_GELU);
}

static bool binary_ok(uint32_t op, uint32_t dt)
{
    dt = as_f32_if_half(dt);
    if (dt == TD_BOOL) /* bool's bitwise ops are the logical ones (the compare shader) */
        return IN_LIST(op, TD_OP_BITWISE_AND, TD_OP_BITWISE_OR, TD_OP_BITWISE_XOR);
    if (!kind_ok(dt, false)) return false;
    if (IN_LIST(op, TD_OP_ADD, TD_OP_SUB, TD_OP_MUL, TD_OP_DIV, TD_OP_MAXIMUM, TD_OP_MINIMUM,
                TD_OP_FMOD, TD_OP_REMAINDER, TD_OP_FLOOR_DIVIDE))
        return true;
    if (dt == TD_F32 || dt == TD_F64)
        return op == TD_OP_COPYSIGN ||
               IN_LIST(op, TD_OP_POW) || (dt == TD_F32 && IN_LIST(op, TD_OP_ATAN2, TD_OP_HYPOT));
    return IN_LIST(op, TD_OP_POW, TD_OP_BITWISE_AND, TD_OP_BITWISE_OR, TD_OP_BITWISE_XOR,
                   TD_OP_SHIFT_LEFT, TD_OP_SHIFT_RIGHT);
}

/* VAR STD LOGSUMEXP NORM (stats.comp) fold in double. Its pow is exp(p log x), accurate to
 * f32 only (and GLSL's frexp is undefined for subnormal doubles), so f64 NORM runs the p
 * that need no pow: 0, 1, 2, +-inf. */
static bool stat_ok(uint32_t op, uint32_t dt, double p)
{
    if (dt == TD_F32 || dt == TD_F16 || dt == TD_BF16) return true;
    if (dt != TD_F64) return false;
    return op != TD_OP_NORM || p == 0.0 || p == 1.0 || p == 2.0 || p == 1.0 / 0.0 ||
           p == -1.0 / 0.0;
}

static bool reduce_ok(uint32_t op, uint32_t dt)
{
    dt = as_f32_if_half(dt);
    if (op == TD_OP_MEAN) return dt == TD_F32 || dt == TD_F64;
    if (IN_LIST(op, TD_OP_SUM, TD_OP_PROD)) return kind_ok(dt, false);
    return IN_LIST(op, TD_OP_MAX, TD_OP_MIN, TD_OP_ARGMAX, TD_OP_ARGMIN, TD_OP_ANY, TD_OP_ALL) &&
           kind_ok(dt, true);
}

/* One binding must cover the tensor, and its elements are indexed in 32 bits. A tensor
 * the device cannot allocate at all (above maxMemoryAllocationSize or the heap) is let
 * through: its allocation fails first, with TD_ENOMEM naming the op and the size, which is
 * the clearer answer for "too large for this device". */
static bool fits(const vk_device *vd, const td__desc *d)
{
    size_t nb = td__vk_nbytes(d);
    int64_t n = td__vk_nelem(d);
    if (nb > vd->max_alloc || nb > vd->heap_size) return true;
    return n >= 0 && n < ((int64_t)1 << 32) && nb <= vd->max_range - VK_ALIGN;
}

/* The sorts rank each element against its whole line (sort.comp), O(n^2) per line: the line
 * length is capped at 16384 on a GPU (one invocation's loop, n compares, stays short) and at
 * 4096 on a CPU implementation such as lavapipe, which runs those compares on the host's
 * cores (and stops any invocation's loops after 65535 iterations); longer lines are
 * refused. */
#define VK_SORT_MAX 16384
#define VK_SORT_MAX_CPU 4096

static int64_t sort_len(const td__op *op, const td__desc *x)
{
    return x->rank == 0 ? 1 : x->dims[op->iattrs[0]];
}


/* Elements one normalisation group holds (exec_norm's nseg * seglen; BATCH_NORM: a row). */
static int64_t norm_group(const td__op *op, const td__desc *const *in)
{
    const uint32_t opc = op->opcode;
    const td__desc *x = in[opc >= TD_OP_LAYER_NORM_BACKWARD && opc != TD_OP_DROPOUT ? 1 : 0];
    int64_t s = 1, n = 1;
    for (uint32_t i = 2; i < x->rank; i++) s *= x->dims[i];
    switch (opc) {
    case TD_OP_LAYER_NORM: case TD_OP_RMS_NORM:
    case TD_OP_LAYER_NORM_BACKWARD: case TD_OP_RMS_NORM_BACKWARD:
        for (uint32_t i = (uint32_t)op->iattrs[0]; i < x->rank; i++) n *= x->dims[i];
        return n;
    case TD_OP_GROUP_NORM: case TD_OP_GROUP_NORM_BACKWARD:
        return x->dims[1] / op->iattrs[0] * s;
    case TD_OP_BATCH_NORM_BACKWARD:
        return x->dims[0] * s;
    default:
        return s;
    }
}

/* Elements folded into each output of a reduction (n_in / n_out). */
static int64_t per_output(const td__desc *x, const td__desc *o)
{
    const int64_t no = td__vk_nelem(o), ni = td__vk_nelem(x);
    return no > 0 ? ni / no : ni;
}

bool td__vk_supports_op(td__device *dev, const td__op *op, const td__desc *const *in,
                        const td__desc *out)
{
    vk_device *vd = dev->impl;
    if (!fits(vd, out)) return false;
    for (uint32_t k = 0; k < op->n_inputs; k++)
        if (!fits(vd, in[k])) return false;
    const uint32_t dt = op->n_inputs > 0 ? in[0]->dtype : out->dtype;
    switch (td__op_class(op->opcode)) {
    case TD_OPCLASS_CREATE:
        if (op->opcode == TD_OP_FULL || op->opcode == TD_OP_EMPTY) return dt < TD_DTYPE_COUNT;
        if (op->opcode == TD_OP_ARANGE || op->opcode == TD_OP_BERNOULLI_SCALAR)
            return td__vk_dtype_name(dt) != NULL;
        if (op->opcode == TD_OP_BERNOULLI) return as_f32_if_half(dt) == TD_F32 || dt == TD_F64;
        if (op->opcode == TD_OP_RANDINT)
            return out->dtype == TD_I32 || out->dtype == TD_I64 || out->dtype == TD_U8 ||
                   out->dtype == TD_I8 || out->dtype == TD_I16;
        if (op->opcode == TD_OP_TRUNC_NORMAL) return as_f32_if_half(dt) == TD_F32 || dt == TD_F64;
        if (op->opcode == TD_OP_RANDPERM)
            return op->iattrs[0] <= (vd->cpu_impl ? VK_SORT_MAX_CPU : VK_SORT_MAX);
        return IN_LIST(op->opcode, TD_OP_RAND_UNIFORM, TD_OP_RAND_NORMAL) &&
               (as_f32_if_half(dt) == TD_F32 || dt == TD_F64);
    case TD_OPCLASS_UNARY:
        return unary_ok(op->opcode, dt);
    case TD_OPCLASS_BINARY:
        return binary_ok(op->opcode, dt);
    case TD_OPCLASS_COMPARE:
        return kind_ok(as_f32_if_half(dt), true) &&
               IN_LIST(op->opcode, TD_OP_EQ, TD_OP_NE, TD_OP_LT, TD_OP_LE, TD_OP_GT, TD_OP_GE,
                       TD_OP_LOGICAL_AND, TD_OP_LOGICAL_OR, TD_OP_LOGICAL_XOR);
    case TD_OPCLASS_WHERE:
        return op->opcode == TD_OP_WHERE;
    case TD_OPCLASS_CAST:
        return op->opcode == TD_OP_CAST && td__vk_dtype_name(dt) != NULL &&
               td__vk_dtype_name(out->dtype) != NULL;
    case TD_OPCLASS_REDUCE: {
        const int64_t nout = td__vk_nelem(out), per = per_output(in[0], out);
        int64_t groups = 0; /* workgroups of one output each (0: none, or few) */
        if (IN_LIST(op->opcode, TD_OP_VAR, TD_OP_STD, TD_OP_LOGSUMEXP, TD_OP_NORM)) {
            if (!stat_ok(op->opcode, dt, op->fattrs[0]) ||
                !td__vk_loops_ok(vd, 2 * ((per + 255) / 256)))
                return false;
            groups = td__vk_nelem(in[0]) > 0 ? nout : 0; /* empty: one fill (vk_reduce.c) */
        } else {
            if (!reduce_ok(op->opcode, dt) ||
                !td__vk_loops_ok(vd, td__vk_reduce_iters(vd, nout, per)))
                return false;
            if (!td__vk_reduce_flat(vd, nout, per) && td__vk_reduce_chunks(nout, per) == 0)
                groups = nout;
        }
        if (td__vk_groups_ok(vd, groups)) return true;
        td__vk_log(1, "vulkan:%d: %s (%s) refused: %lld outputs of %lld elements would run "
                   "one workgroup each, above this CPU implementation's limit of %d",
                   vd->index, td__op_name(op->opcode), td__vk_dtype_name(dt),
                   (long long)nout, (long long)per, VK_CPU_MAX_GROUPS);
        return false;
    }
    case TD_OPCLASS_SCAN:
        return IN_LIST(op->opcode, TD_OP_CUMSUM, TD_OP_CUMPROD) &&
               kind_ok(as_f32_if_half(dt), false);
    case TD_OPCLASS_MATMUL:
        return op->opcode == TD_OP_MATMUL && kind_ok(as_f32_if_half(dt), false) &&
               out->dims[out->rank - 2] <= (int64_t)65535 * 16 &&
               out->dims[out->rank - 1] <= (int64_t)65535 * 16 &&
               td__vk_loops_ok(vd, in[0]->dims[in[0]->rank - 1]);
    case TD_OPCLASS_NN: /* the normalisations (nn.comp) and DROPOUT (ew.comp); the family's
                         * composites (SCALED_DOT_PRODUCT_ATTENTION) come lowered */
        if (!td__op_default_supports(op->opcode)) return false;
        if (op->opcode != TD_OP_DROPOUT) {
            const int64_t g = norm_group(op, in);
            if (!td__vk_loops_ok(vd, 4 * ((g + 255) / 256))) return false;
            const int64_t groups = g > 0 ? td__vk_nelem(in[0]) / g : 0;
            if (!td__vk_groups_ok(vd, groups)) {
                td__vk_log(1, "vulkan:%d: %s (%s) refused: %lld groups of %lld elements "
                           "would run one workgroup each, above this CPU implementation's "
                           "limit of %d", vd->index, td__op_name(op->opcode),
                           td__vk_dtype_name(dt), (long long)groups, (long long)g,
                           VK_CPU_MAX_GROUPS);
                return false;
            }
        }
        return as_f32_if_half(dt) == TD_F32 || dt == TD_F64;
    case TD_OPCLASS_SORT: /* rank sorts: O(axis length) per element */
        return td__vk_dtype_name(dt) != NULL &&
               sort_len(op, in[0]) <= (vd->cpu_impl ? VK_SORT_MAX_CPU : VK_SORT_MAX);
    case TD_OPCLASS_POOL:
    case TD_OPCLASS_CONV: { /* window.comp: every op of both families, in the float dtypes */
        if (as_f32_if_half(dt) != TD_F32 && dt != TD_F64) return false;
        int64_t iters;
        if (td__vk_window_loops_ok(vd, op, in, out, &iters)) return true;
        td__vk_log(1, "vulkan:%d: %s (%s) refused: an invocation would loop %lld times, above "
                   "this CPU implementation's limit of 60000", vd->index,
                   td__op_name(op->opcode), td__vk_dtype_name(dt), (long long)iters);
        return false;
    }
    case TD_OPCLASS_MOVEMENT: /* RESHAPE never arrives (the engine aliases) */
        if (IN_LIST(op->opcode, TD_OP_SCATTER_ADD, TD_OP_INDEX_ADD)) /* adds: arithmetic */
            return kind_ok(as_f32_if_half(dt), false);
        return IN_LIST(op->opcode, TD_OP_RESHAPE, TD_OP_PERMUTE, TD_OP_SLICE, TD_OP_CONCAT,
                       TD_OP_EXPAND, TD_OP_COPY, TD_OP_GATHER, TD_OP_INDEX_SELECT,
                       TD_OP_SLICE_STEP, TD_OP_FLIP, TD_OP_ROLL, TD_OP_PAD, TD_OP_REPEAT,
                       TD_OP_TRIL, TD_OP_TRIU, TD_OP_ONE_HOT, TD_OP_MASKED_FILL, TD_OP_SCATTER,
                       TD_OP_GATHER_ND);
    default:
        return false;
    }
}

/* FULL's value as the dtype's bits, by the cast rules (backends/cpu/cpu_internal.h). */
uint64_t td__vk_full_bits(uint32_t dt, double v)
{
    union {
        float f;
        uint32_t u;
    } f32;
    uint64_t u64;
    switch (dt) {
    case TD_F32:
        f32.f = (float)v;
        return f32.u;
    case TD_F64:
        memcpy(&u64, &v, sizeof u64);
        return u64;
    case TD_I32:
        return (uint32_t)(v != v ? 0 : v <= -2147483648.0 ? INT32_MIN
                                   : v >= 2147483647.0   ? INT32_MAX
                                                         : (int32_t)v);
    case TD_I64:
        return (uint64_t)(v != v ? 0 : v <= -9223372036854775808.0 ? INT64_MIN
                                   : v >= 9223372036854775808.0    ? INT64_MAX
                                                                   : (int64_t)v);
    case TD_U8:
        return v != v || v <= 0.0 ? 0 : v >= 255.0 ? 255 : (uint8_t)v;
    case TD_BOOL:
        return v != 0.0;
    case TD_F16:
        return td__f64_to_f16(v);
    case TD_BF16:
        return td__f64_to_bf16(v);
    case TD_I8:
        return (uint8_t)td__sat_i8(v);
    case TD_I16:
        return (uint16_t)td__sat_i16(v);
    }
    return 0;
}

/* ---- the strided walk (ew.comp) ---- */



/* Walk `shape` (rank <= 8; dims as given, not necessarily an op's output) with nstr stride
 * sets in elements (0 the output, then a, b, c), collapsed first; args[0] the output;
 * extra (NULL: zeros) the shader's own words from VK_P_I on. */
td_status td__vk_walk(vk_device *vd, const char *shader, uint32_t opcode, const td__desc *shape,
                      int nstr, int64_t (*str)[TD_MAX_RANK], const vk_arg *args, int nargs,
                      const td__op *op, const uint32_t *extra, char *err, size_t errlen)
{
    int64_t n = td__vk_nelem(shape);
    if (n <= 0) return TD_OK;
    int64_t dims[TD_MAX_RANK], cs[4][TD_MAX_RANK];
    int rank = td__collapse_dims(shape, nstr, (const int64_t(*)[TD_MAX_RANK])str, dims, cs);
    uint32_t p[VK_PARAM_WORDS];
    memset(p, 0, sizeof p);
    p[VK_P_N] = (uint32_t)n;
    p[VK_P_RANK] = (uint32_t)rank;
    for (int d = 0; d < rank; d++) {
        p[VK_P_DIMS + d] = (uint32_t)dims[d];
        for (int k = 0; k < nstr; k++) p[VK_P_STR_O + 8 * k + d] = (uint32_t)cs[k][d];
    }
    for (int k = 0; op != NULL && k < TD_OP_MAX_FATTRS; k++) td__vk_put_double(p, k, op->fattrs[k]);
    if (op != NULL) {
        p[VK_P_SEED] = (uint32_t)op->seed;
        p[VK_P_SEED + 1] = (uint32_t)(op->seed >> 32);
    }
    if (extra != NULL) memcpy(p + VK_P_I, extra, (VK_PARAM_WORDS - VK_P_I) * sizeof *p);
    return td__vk_dispatch(vd, shader, opcode, p, args, nargs, td__vk_groups_for((uint64_t)n, 256),
                           1, 1, err, errlen);
}



static td_status exec_elementwise(vk_device *vd, const td__op *op, const td__view *in,
                                  const td__view *out, char *err, size_t errlen)
{
    const td__desc *o = &out->desc;
    int64_t st[4][TD_MAX_RANK];
    td__desc_strides(o, st[0]);
    const int n_in = (int)op->n_inputs;
    for (int k = 0; k < n_in; k++) td__desc_bcast_strides(&in[k].desc, o, st[k + 1]);
    vk_arg args[4] = {td__vk_arg_of(out)};
    for (int k = 0; k < n_in; k++) args[k + 1] = td__vk_arg_of(&in[k]);
    char name[32];
    uint32_t opcode = op->opcode;
    const uint32_t dt = in[0].desc.dtype;
    uint32_t p[VK_PARAM_WORDS - VK_P_I] = {0};
    switch (td__op_class(opcode)) {
    case TD_OPCLASS_UNARY:
        snprintf(name, sizeof name, "u_%s", dt == TD_BOOL ? "bool" : td__vk_kind_sfx(dt));
        p[0] = op->n_iattrs > 0 ? (uint32_t)op->iattrs[0] : 0; /* GELU's mode */
        if (opcode == TD_OP_CLAMP && as_f32_if_half(dt) != TD_F32 && dt != TD_F64)
            for (int k = 0; k < 2; k++) { /* integer bounds by the cast rules, as the CPU */
                uint64_t b = td__vk_full_bits(dt, op->fattrs[k]);
                if (dt == TD_I8) b = (uint64_t)(int64_t)(int8_t)b; /* the shader's int */
                if (dt == TD_I16) b = (uint64_t)(int64_t)(int16_t)b;
                p[1 + 2 * k] = (uint32_t)b;
                p[2 + 2 * k] = (uint32_t)(b >> 32);
            }
        break;
    case TD_OPCLASS_BINARY:
        if (dt == TD_BOOL) { /* bool AND/OR/XOR are LOGICAL_AND/OR/XOR of the bytes */
            snprintf(name, sizeof name, "c_u8");
            opcode = opcode == TD_OP_BITWISE_AND  ? TD_OP_LOGICAL_AND
                     : opcode == TD_OP_BITWISE_OR ? TD_OP_LOGICAL_OR
                                                  : TD_OP_LOGICAL_XOR;
        } else {
            snprintf(name, sizeof name, "b_%s", td__vk_kind_sfx(dt));
        }
        break;
    case TD_OPCLASS_COMPARE:
        snprintf(name, sizeof name, "c_%s", td__vk_kind_sfx(dt));
        break;
    case TD_OPCLASS_WHERE:
        snprintf(name, sizeof name, "w_%zu", td__dtype_size(o->dtype));
        break;
    default:
        snprintf(name, sizeof name, "x_%s_%s", td__vk_dtype_name(dt), td__vk_dtype_name(o->dtype));
        break;
    }
    return td__vk_walk(vd, name, opcode, o, n_in + 1, st, args, n_in + 1, op, p, err, errlen);
}

/* DROPOUT (ew.comp FAM 7): the walk over the contiguous output, element i its index;
 * fattrs[1] carries 1/(1-p) (rounded to the dtype's compute type by the shader, as the CPU
 * rounds it). */
static td_status exec_dropout(vk_device *vd, const td__op *op, const td__view *in,
                              const td__view *out, char *err, size_t errlen)
{
    const td__desc *o = &out->desc;
    if ((uint64_t)td__vk_nelem(o) > (uint64_t)UINT32_MAX / 4 * 4)
        return td__vk_fail(err, errlen, TD_EUNSUPPORTED, "dropout: too many elements");
    td__op d = *op;
    d.fattrs[1] = 1.0 / (1.0 - op->fattrs[0]);
    int64_t st[2][TD_MAX_RANK];
    td__desc_strides(o, st[0]);
    td__desc_strides(o, st[1]);
    vk_arg args[2] = {td__vk_arg_of(out), td__vk_arg_of(&in[0])};
    char name[16];
    snprintf(name, sizeof name, "dr_%s", td__vk_dtype_name(o->dtype));
    return td__vk_walk(vd, name, op->opcode, o, 2, st, args, 2, &d, NULL, err, errlen);
}

/* ---- the normalisations (nn.comp): cpu_nn.c's groups ---- */

static td_status exec_norm(vk_device *vd, const td__op *op, const td__view *in,
                           const td__view *out, char *err, size_t errlen)
{
    const uint32_t opc = op->opcode;
    const bool bwd = opc == TD_OP_LAYER_NORM_BACKWARD || opc == TD_OP_RMS_NORM_BACKWARD ||
                     opc == TD_OP_GROUP_NORM_BACKWARD || opc == TD_OP_BATCH_NORM_BACKWARD;
    const uint32_t xi = bwd ? 1 : 0;
    const td__desc *d = &in[xi].desc;
    const int64_t total = td__vk_nelem(&out->desc);
    if (total == 0) return TD_OK;
    int64_t kind, nseg = 1, seglen = 1, segstride = 0, gstride = 0, gdiv = 1, gstep = 0;
    int64_t welem = 0, pdiv = 1, pmul = 0, pseg = 0, ngroups, nc = 1;
    int64_t s = 1;
    for (uint32_t i = 2; i < d->rank; i++) s *= d->dims[i];
    bool hasw = op->n_inputs > xi + 1, hasb = !bwd && op->n_inputs > 2;
    switch (opc) {
    case TD_OP_BATCH_NORM:
        kind = 4;
        nc = d->dims[1];
        seglen = s;
        gstride = s;
        ngroups = total / s;
        hasw = op->n_inputs > 3;
        hasb = op->n_inputs > 4;
        break;
    case TD_OP_LAYER_NORM: case TD_OP_RMS_NORM:
    case TD_OP_LAYER_NORM_BACKWARD: case TD_OP_RMS_NORM_BACKWARD: {
        int64_t n = 1;
        for (uint32_t i = (uint32_t)op->iattrs[0]; i < d->rank; i++) n *= d->dims[i];
        kind = opc == TD_OP_LAYER_NORM ? 0 : opc == TD_OP_RMS_NORM ? 1
             : opc == TD_OP_LAYER_NORM_BACKWARD ? 2 : 3;
        seglen = segstride = gstride = n;
        welem = 1;
        ngroups = total / n;
        break;
    }
    case TD_OP_GROUP_NORM: case TD_OP_GROUP_NORM_BACKWARD: {
        const int64_t c = d->dims[1], g = op->iattrs[0];
        kind = bwd ? 2 : 0;
        nseg = c / g;
        seglen = segstride = s;
        gstride = nseg * s;
        pdiv = g;
        pmul = c / g;
        pseg = 1;
        ngroups = total / gstride;
        break;
    }
    default: /* BATCH_NORM_BACKWARD: channel k is N segments of S at stride C S */
        kind = 2;
        nseg = d->dims[0];
        seglen = s;
        segstride = d->dims[1] * s;
        gdiv = d->dims[1];
        gstep = s;
        pdiv = d->dims[1];
        pmul = 1;
        ngroups = d->dims[1];
        break;
    }
    if (ngroups == 0 || nseg * seglen == 0) return TD_OK;
    uint32_t p[VK_PARAM_WORDS];
    memset(p, 0, sizeof p);
    const int64_t w[15] = {kind, nseg, seglen, segstride, gstride, gdiv, gstep, welem,
                           pdiv, pmul, pseg, ngroups, hasw, hasb, nc};
    for (int k = 0; k < 15; k++) p[VK_P_I + k] = (uint32_t)w[k];
    td__vk_put_double(p, 0, op->fattrs[0]);
    vk_arg args[6] = {td__vk_arg_of(out)};
    for (uint32_t k = 0; k < op->n_inputs && k < 5; k++) args[k + 1] = td__vk_arg_of(&in[k]);
    char name[16];
    snprintf(name, sizeof name, "nn_%s", td__vk_dtype_name(d->dtype));
    return td__vk_dispatch(vd, name, opc, p, args, (int)op->n_inputs + 1,
                           td__vk_groups_for((uint64_t)ngroups, 1), 1, 1, err, errlen);
}

/* ---- create ---- */

static td_status exec_create(vk_device *vd, const td__op *op, const td__view *in,
                             const td__view *out, char *err, size_t errlen)
{
    const td__desc *o = &out->desc;
    int64_t n = td__vk_nelem(o);
    if (n <= 0) return TD_OK;
    uint32_t p[VK_PARAM_WORDS];
    memset(p, 0, sizeof p);
    p[VK_P_N] = (uint32_t)n;
    for (int k = 0; k < TD_OP_MAX_FATTRS; k++) td__vk_put_double(p, k, op->fattrs[k]);
    p[VK_P_SEED] = (uint32_t)op->seed;
    p[VK_P_SEED + 1] = (uint32_t)(op->seed >> 32);
    p[VK_P_I] = 0; /* first element: the engine runs device ops whole */
    char name[32];
    uint32_t opcode = op->opcode;
    if (opcode == TD_OP_FULL || opcode == TD_OP_EMPTY) {
        uint64_t bits = opcode == TD_OP_EMPTY ? 0 : td__vk_full_bits(o->dtype, op->fattrs[0]);
        p[VK_P_I + 1] = (uint32_t)bits;
        p[VK_P_I + 2] = (uint32_t)(bits >> 32);
        snprintf(name, sizeof name, "cr_w%zu", 8 * td__dtype_size(o->dtype));
        opcode = TD_OP_FULL;
    } else if (opcode == TD_OP_RANDPERM) { /* a rank sort of Philox draws (sort.comp) */
        return td__vk_exec_sort(vd, op, in, out, err, errlen);
    } else if (opcode == TD_OP_BERNOULLI) { /* a walk over p (ew.comp FAM 8) */
        int64_t st[2][TD_MAX_RANK];
        td__desc_strides(o, st[0]);
        td__desc_strides(o, st[1]);
        vk_arg args[2] = {td__vk_arg_of(out), td__vk_arg_of(&in[0])};
        snprintf(name, sizeof name, "be_%s", td__vk_dtype_name(o->dtype));
        return td__vk_walk(vd, name, opcode, o, 2, st, args, 2, op, NULL, err, errlen);
    } else {
        snprintf(name, sizeof name, "cr_%s", td__vk_dtype_name(o->dtype));
        if (opcode == TD_OP_TRUNC_NORMAL) { /* the per-op constants, as the CPU's */
            const td__truncnorm tn =
                td__truncnorm_init(op->fattrs[0], op->fattrs[1], op->fattrs[2], op->fattrs[3]);
            const double v[8] = {tn.mean, tn.stddev, tn.a, tn.b, tn.lo, tn.hi, tn.pl, tn.dp};
            for (int k = 0; k < 8; k++) {
                uint64_t u;
                memcpy(&u, &v[k], sizeof u);
                p[VK_P_I + 2 + 2 * k] = (uint32_t)u;
                p[VK_P_I + 3 + 2 * k] = (uint32_t)(u >> 32);
            }
            p[VK_P_I + 18] = (uint32_t)tn.flip;
        }
        if (opcode == TD_OP_RANDINT) /* low, high (engine/op.c checked low < high) */
            for (int k = 0; k < 2; k++) {
                p[VK_P_I + 1 + 2 * k] = (uint32_t)(uint64_t)op->iattrs[k];
                p[VK_P_I + 2 + 2 * k] = (uint32_t)((uint64_t)op->iattrs[k] >> 32);
            }
    }
    vk_arg a = td__vk_arg_of(out);
    return td__vk_dispatch(vd, name, opcode, p, &a, 1, td__vk_groups_for((uint64_t)n, 256), 1, 1,
                           err, errlen);
}

/* ---- matmul (matmul.comp) ---- */

static td_status exec_matmul(vk_device *vd, const td__op *op, const td__view *in,
                             const td__view *out, char *err, size_t errlen)
{
    const td__desc *a = &in[0].desc, *b = &in[1].desc, *o = &out->desc;
    const int64_t m = o->dims[o->rank - 2], n = o->dims[o->rank - 1], k = a->dims[a->rank - 1];
    td__desc bo = *o;
    bo.rank -= 2;
    const int64_t nb = td__vk_nelem(&bo);
    if (nb == 0 || m == 0 || n == 0) return TD_OK;
    int64_t sa[TD_MAX_RANK], sb[TD_MAX_RANK];
    td__matmul_batch_strides(a, o, sa);
    td__matmul_batch_strides(b, o, sb);
    uint32_t p[VK_PARAM_WORDS];
    memset(p, 0, sizeof p);
    uint32_t *q = p + VK_P_I;
    q[0] = (uint32_t)m;
    q[1] = (uint32_t)n;
    q[2] = (uint32_t)k;
    q[3] = (uint32_t)nb;
    q[4] = bo.rank;
    for (uint32_t d = 0; d < bo.rank; d++) {
        q[5 + d] = (uint32_t)bo.dims[d];
        q[11 + d] = (uint32_t)sa[d];
        q[17 + d] = (uint32_t)sb[d];
    }
    /* matmul.comp's register-blocked variant: 64 x 64 output tiles, 4 x 4 outputs an
     * invocation, with shared-memory tiles on a GPU (mb_) and without on a CPU
     * implementation (mc_: lavapipe runs a barrier as a coroutine switch). Each output is
     * the same ascending-k sum of separately rounded products as the 16 x 16 mm_ variant,
     * so the bits are the same (TENSORD_TEST_VULKAN_MATMUL_16=1 keeps mm_: for A/B runs of
     * gpu-bench and for conformance-vulkan-matmul-16). */
    const char *env16 = getenv("TENSORD_TEST_VULKAN_MATMUL_16");
    const bool tile16 = env16 != NULL && env16[0] == '1';
    char name[24];
    snprintf(name, sizeof name, "%s_%s", tile16 ? "mm" : vd->cpu_impl ? "mc" : "mb",
             td__vk_kind_sfx(o->dtype));
    int64_t tile = tile16 ? 16 : 64;
    /* f16 on cooperative matrices (tensor cores) where the device has them:
     * matmul_coop.comp, 128 x 128 blocks, f32 accumulation in the hardware's order, so not
     * the bits of the variants above but within the conformance suite's matmul bound (the
     * shader's header says why); bf16 stays above (the NV extension has no bf16) */
    if (o->dtype == TD_F16 && !tile16 && td__vk_coop_name(vd, false, name, sizeof name))
        tile = 128;
    vk_arg args[3] = {td__vk_arg_of(out), td__vk_arg_of(&in[0]), td__vk_arg_of(&in[1])};
    (void)op;
    return td__vk_dispatch(vd, name, TD_OP_MATMUL, p, args, 3, (uint32_t)((n + tile - 1) / tile),
                           (uint32_t)((m + tile - 1) / tile), nb > 65535 ? 65535 : (uint32_t)nb,
                           err, errlen);
}

td_status td__vk_exec(vk_device *vd, const td__op *op, const td__view *in, const td__view *out,
                      char *err, size_t errlen)
{
    switch (td__op_class(op->opcode)) {
    case TD_OPCLASS_CREATE:
        return exec_create(vd, op, in, out, err, errlen);
    case TD_OPCLASS_UNARY:
    case TD_OPCLASS_BINARY:
    case TD_OPCLASS_COMPARE:
    case TD_OPCLASS_WHERE:
    case TD_OPCLASS_CAST:
        return exec_elementwise(vd, op, in, out, err, errlen);
    case TD_OPCLASS_REDUCE:
        return td__vk_exec_reduce(vd, op, in, out, err, errlen);
    case TD_OPCLASS_MATMUL:
        return exec_matmul(vd, op, in, out, err, errlen);
    case TD_OPCLASS_SCAN:
        return td__vk_exec_scan(vd, op, in, out, err, errlen);
    case TD_OPCLASS_SORT:
        return td__vk_exec_sort(vd, op, in, out, err, errlen);
    case TD_OPCLASS_NN:
        if (op->opcode == TD_OP_DROPOUT) return exec_dropout(vd, op, in, out, err, errlen);
        return exec_norm(vd, op, in, out, err, errlen);
    case TD_OPCLASS_POOL:
    case TD_OPCLASS_CONV:
        return td__vk_exec_window(vd, op, in, out, err, errlen);
    case TD_OPCLASS_MOVEMENT:
        return td__vk_exec_movement(vd, op, in, out, err, errlen);
    default:
        return td__vk_fail(err, errlen, TD_EINTERNAL, "vulkan: %s has no kernel",
                           td__op_name(op->opcode));
    }
}

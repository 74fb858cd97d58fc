/* conformance.c — every op of the engine's table on a target device, compared with the CPU
 * backend (the reference) through the same engine session path the client uses.
 *
 * Usage:
 *   conformance                     every non-CPU device this process can open (backend
 *                                   modules included) against local:cpu; for each GPU kind
 *                                   without a device it prints why, e.g. "hip: backend
 *                                   loaded, no device, skipped", and passes (what CI sees)
 *   conformance --target URI ...    the given executors: "local:cuda:0", "local:cpu" (a
 *                                   self-check of the harness), or a remote session
 *                                   "tensord://HOST:PORT/DEVICE"
 *   options: --filter SUBSTR (cases whose name contains it), --verbose (every case),
 *            --oom (also ask the target for a 200 GiB tensor: it must fail with TD_ENOMEM,
 *            and the session must keep working afterwards), --quick (skip cases with more
 *            than 65536 elements in an input or the output), --require-backend KIND
 *            (fail unless a backend of that kind loaded, devices or not: CI's check that
 *            each GPU module it built loads on a host without that GPU), --tf32 on|off|auto
 *            (whether the target computes matmuls that allow TF32 in TF32: auto, the
 *            default, says yes for a cuda device; "off" for a CUDA-runtime module whose
 *            GEMM has no TF32 path, such as backends/hip/nvcc-check),
 *            --allow-unsupported (a case the target refuses with TD_EUNSUPPORTED, where the
 *            reference runs it, is counted as refused rather than failed, and the refused
 *            op/dtype pairs are listed: for a backend that covers part of the op table, such
 *            as vulkan; every case it does run is held to the bounds below), --sample N (run
 *            case i only when i % N == 0, cases in table order, so every op keeps some of
 *            its cases: CI's sanitizer-friendly subset), --target-kind KIND (every device of
 *            that kind, e.g. vulkan; none: prints why and passes), --flush-subnormals (for
 *            a target that flushes f32/bf16 subnormals to zero, as NVIDIA's Vulkan driver
 *            says it does: a case is also accepted when it matches the reference run on
 *            inputs with those subnormals as ±0 and its subnormal results as ±0; the
 *            summary counts such cases), --long-windows (adds the "long-window" cases:
 *            window ops looping past 65535 per output, below). Without --target the
 *            vulkan devices are left to --target-kind vulkan --allow-unsupported (the
 *            backend covers part of the op table)
 * Exit status: 0 all passed (or skipped), 1 a case failed, 2 usage or setup error.
 *
 * Each case builds its inputs from a seeded generator, runs one op on the reference and on
 * the target (each through a td__transport: the in-process engine session, or a remote
 * tensord session), reads the result back and compares it. The target runs every case
 * twice and must give the same bytes both times (determinism). Cases that must fail (an
 * out-of-range gather index) must fail on both with the same status and message.
 *
 * Tolerances, per op and dtype (ulp = unit in the last place of the reference value):
 *  - exact (bit for bit; any NaN matches any NaN): integer and bool results of every op,
 *    movement ops, CAST, FULL, ARANGE, RAND_UNIFORM, the random ops BERNOULLI
 *    BERNOULLI_SCALAR RANDINT RANDPERM TRUNC_NORMAL (engine/philox.h: integer and IEEE
 *    basic double operations only), comparisons, WHERE, MAX/MIN/ARG*,
 *    float NEG ABS RELU SQRT RSQRT ADD SUB MUL DIV MAXIMUM MINIMUM (IEEE-rounded ops);
 *  - 4 ulp: float EXP LOG, 6 ulp: TANH SIGMOID, 8 ulp: POW (vendor math libraries and
 *    glibc each round within a few ulps, in opposite directions at worst); the elementwise
 *    ops of issue 13 state theirs in their rows (docs/ops.md): 4 ulp for SIN COS ASIN ACOS
 *    ATAN ERF LOG1P EXPM1 LOG2 LOG10 (CUDA's documented bounds are 1-2 ulp, glibc's 1-2),
 *    6 ulp for SINH COSH ASINH ACOSH ATANH ELU ATAN2 HYPOT (CUDA 2-4 ulp plus glibc's 1-2),
 *    8 ulp for TAN (CUDA tanf 4 ulp), 16 ulp for GELU and SOFTPLUS (two library functions in
 *    a row: erfc is 4-5 ulp on CUDA and up to 5 in glibc; log1p of exp adds both errors),
 *    exact for the rest (FLOOR CEIL ROUND TRUNC SIGN CLAMP NAN_TO_NUM RECIPROCAL LEAKY_RELU
 *    COPYSIGN FMOD REMAINDER FLOOR_DIVIDE: IEEE operations only; integer, bool and bitwise
 *    results; the lowered ISNAN ISINF ISFINITE LOGICAL_NOT CLAMP_TENSOR). Unary ops with
 *    attributes run with several attribute sets each (unary_attr_sets);
 *  - SUM/MEAN (float): |got - want| <= 1 ulp + 4 * n * 2^-53 * S, where n is the number of
 *    reduced elements and S the same reduction of |x| (both sides fold in double, in a
 *    different association);
 *  - PROD (float): |got - want| <= 1 ulp + 4 * n * 2^-53 * |want| (inputs near 1, at most
 *    4096 factors: longer float products under/overflow at association-dependent points);
 *  - MATMUL (float): |got - want| <= 2 * K * u * (|A| @ |B|) + 1 ulp with u = 2^-24 (f32)
 *    or 2^-53 (f64): the classic dot-product bound for each side's own summation order;
 *  - MATMUL f32 with TF32 allowed (precision attribute 1), on a target that uses TF32
 *    (a cuda device: "local:cuda:N" or ".../cuda:N"): the bound above plus (2 t + t^2) *
 *    (|A| @ |B|) with t = 2^-10: each input reduced to TF32's 10-bit mantissa moves by at
 *    most t relative (2^-11 when rounded to nearest; 2^-10 covers truncation, which the
 *    vendor does not rule out), so each product by at most 2 t + t^2. On every other target
 *    TF32 is ignored and the plain f32 bound applies. The "tf32 probe" case must also
 *    differ from the same case in full precision on a TF32 target: proof that the
 *    attribute reached the GEMM;
 *  - RAND_NORMAL: |got - want| <= 2 ulp + 2^-20 |stddev| (f32), 4 ulp + 2^-40 |stddev|
 *    (f64): log/sqrt/sin/cos of different math libraries;
 *  - SOFTMAX: |got - want| <= 24 ulp + 2 * n * 2^-53 * |want|, and LOG_SOFTMAX:
 *    |got - want| <= 4 ulp + (16 + 8 ln n) * u + 2 * n * 2^-53, with n the row length and
 *    u = 2^-24 (f32) or 2^-53 (f64). Why: both sides compute x - m exactly alike; each e_i
 *    may differ by 4 ulp (EXP's bound, 8 u relative), so s by 8 u relative plus each side's
 *    own association of the double sum (n 2^-53) plus its rounding to the dtype (u); e / s
 *    adds one rounding per side (20 ulp in all, rounded up to 24); log(s) differs by
 *    ds / s plus LOG's 4 ulp of log(s) <= ln n (8 u ln n), and the final subtraction adds an
 *    ulp per side.
 *  - composites (ops whose row in engine/optable.h has a lowering: SOFTMAX, LOG_SOFTMAX):
 *    on every local target a second session lowers them (TENSORD_FORCE_LOWERING, engine/
 *    session.h) and each case's native result must equal the lowered one bit for bit on
 *    local:cpu (op.h's contract: the CPU kernel is its composite), and be within the op's
 *    bound above (with the native result in the reference's place) on any other device:
 *    both compute the same m, x - m and e^(x - m) up to EXP's 4 ulp, and differ in the
 *    association of s and the roundings the bound counts.
 *
 *  - VAR STD LOGSUMEXP NORM (TD_ACC_STAT; both sides fold in double, in different
 *    associations, the GPU's pow/exp/log within 2 ulp of double): |got - want| <= 2 ulp +
 *    B, with e = 16 n 2^-53 (n reduced elements) and m = max |x| over them (the reference's
 *    MAX of ABS): VAR B = e m^2 (each squared deviation moves by the mean's error, at most
 *    n 2^-53 m); STD B = min(sqrt(e m^2), e m^2 / |want|) (|sqrt a - sqrt b| <= both);
 *    LOGSUMEXP B = e (1 + |want|); NORM B = 16 (n + 4) 2^-53 |want| max(1, 1/|p|) (the
 *    sum's relative error, amplified by the root when |p| < 1);
 *    NORM_L1 (lowered to ABS, SUM) the SUM bound, NORM_INF/NORM_NEG_INF (ABS, MAX/MIN)
 *    exact; ANY ALL, ARGMAX/ARGMIN over several axes: exact;
 *  - CUMSUM (TD_ACC_CUMSUM): per element i, |got - want| <= 1 ulp + 4 n u_acc S_i with n
 *    the axis length, S_i the reference's cumsum of |x| at i and u_acc the accumulator's
 *    unit roundoff (2^-24 for f16/bf16, which accumulate in f32; 2^-53 otherwise); CUMPROD
 *    (TD_ACC_CUMPROD): 1 ulp + 4 n u_acc |want|, inputs near 1 and at most 4096 factors
 *    (the PROD reasoning); integer scans exact (they wrap);
 *  - SORT ARGSORT TOPK_VALUES TOPK_INDICES: exact in every dtype (one stable order,
 *    engine/sortkey.h; a NaN's payload is the input's own);
 *  - the movement ops of issue 13 (SLICE_STEP .. GATHER_ND): exact, SCATTER_ADD and
 *    INDEX_ADD included (both backends add each destination's contributions in ascending
 *    order, each add rounded to the dtype; a NaN sum may carry another payload);
 *  - CONV CONV_TRANSPOSE CONV_WEIGHT_GRAD (TD_ACC_CONV): the MATMUL bound with K the products
 *    one output sums (conv_products: C/groups times the kernel size; N times the output
 *    positions for the weight gradient) and |A| @ |B| replaced by the op on |inputs| (bias
 *    included); f16/bf16 with u = 2^-24 in the K term (f32 accumulation on both backends)
 *    plus 1 ulp of the dtype; MAX_POOL, MAX_POOL_INDICES exact (NaN and inf included);
 *    AVG_POOL, ADAPTIVE_AVG_POOL, INTERPOLATE and the pool gradients 4 ulp (both backends
 *    run the same loop in the same working type; the division and the products differ at
 *    most by the device's rounding, which is IEEE here);
 *  - the dtypes i8, i16: exact, like every integer result. f16 and bf16 (both backends
 *    widen to f32, compute there and round once to the dtype): the bounds above with ulp and
 *    u those of the dtype (u = 2^-11 for f16, 2^-8 for bf16), so exact ops stay bit for bit
 *    (f32 holds more than 2p + 2 bits, so a correctly rounded f32 result rounds to the
 *    correctly rounded half), EXP/LOG/TANH/SIGMOID/POW within their 4-8 ulps of the half
 *    dtype (in practice 0 or 1: f32 math errors are 2^13 times smaller), SUM/MEAN/PROD with
 *    1 ulp of the dtype (each side rounds its double accumulator once); MATMUL with u =
 *    2^-24 in the K term (f32 products and sums on both sides: widened sgemm on the CPU, or
 *    oneDNN's bf16 tiles with f32 accumulation where built, cuBLAS GemmEx with f32 compute
 *    on CUDA) plus 1 ulp of the dtype for the final rounding;
 *    SOFTMAX/LOG_SOFTMAX are lowered into the ops above on every backend and held to their
 *    formulas with the dtype's ulp and u. RAND_UNIFORM/RAND_NORMAL in f16/bf16 draw the f32
 *    mapping's double value and round it once (engine/philox.h): uniform exact, normal
 *    within 2 ulp of the dtype + 2^-20 |stddev| (the f32 bound; in practice 0 or 1 ulp, when
 *    the math libraries' few-ulp difference in z straddles a rounding boundary).
 *
 *  - LAYER_NORM RMS_NORM GROUP_NORM BATCH_NORM and their backward ops (TD_ACC_NORM):
 *    |got - want| <= 8 ulp + 64 n 2^-53 (1 + M), n the elements normalised together and M
 *    the largest finite |want| of the case. Why: both sides widen to double, sum in double
 *    in different associations (each sum within n 2^-53 of its terms' magnitude, which for
 *    the normalised values (x - mean) r is at most sqrt(n) <= n), evaluate the same formula
 *    in double and round once: the dtype's last-place difference where the double values
 *    straddle a rounding boundary, and the association term. DROPOUT is exact (a Philox
 *    mask and one IEEE multiply).
 *  - SCALED_DOT_PRODUCT_ATTENTION (TD_ACC_ATTENTION): |got - want| <= 16 ulp + (4 E |scale|
 *    max|q| max|k| + 4 S + 8) u max|v|, E the head dim, S the keys. Why: a score differs by
 *    at most 2 E u |scale| max|q| max|k| between two summation orders of the dot product, and
 *    moves its weight by that much relative (exp); the weights of a row sum to 1, so the
 *    output moves by the score error times max|v|; each side's softmax sum and the weighted
 *    sum of v add S u relative each (the CPU's blocked running maximum rescales in double).
 *    Unlike the other composites, the CPU's native kernel is held to its own lowering with
 *    this bound, not bit for bit: it never forms the whole row of scores. The CUDA f16/bf16
 *    kernel (backends/gpu/gpu_attention.cu) keeps its scores in f32 (closer to exact than
 *    the lowering's, which are rounded to the dtype) and rounds each weight to the dtype
 *    before the product with v, as the lowering's softmax output is: u max|v| more on its
 *    side, inside the constant term; tests/gpu/attn_check.c holds it to 4 u max|v| + u |y|
 *    against an f32 reference.
 *
 * Op and dtype lists come from the op table and the dtype table: every row of a family is
 * run in every dtype its class holds, with its row's accuracy as the tolerance.
 */
#include "client/transport.h"
#include "common/log.h"
#include "engine/convert.h"
#include "engine/device.h"
#include "engine/op.h"
#include "tests/unit/backends/conformance.h"
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- shapes ---- */

typedef struct shape {
    uint32_t rank;
    int64_t d[TD_MAX_RANK];
} shape;

static shape mkshape(uint32_t rank, const int64_t *d)
{
    shape s = {.rank = rank};
    for (uint32_t i = 0; i < rank; i++) s.d[i] = d[i];
    return s;
}
#define SH(...)                                                                            \
    mkshape((uint32_t)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)),                \
            (int64_t[]){__VA_ARGS__})
#define SH0 ((shape){.rank = 0})

/* ---- cases ---- */

enum gen {
    GEN_ANY,     /* specials sprinkled in (floats: NaN, inf, -0, subnormals; ints: extremes) */
    GEN_PLAIN,   /* floats in [-4, 4), ints in [-20, 20], u8 any, bool 0/1 */
    GEN_POS,     /* floats in (0.25, 4] */
    GEN_NEAR1,   /* floats in [0.9, 1.1), ints in [-3, 3] */
    GEN_CASTSRC, /* values at the edges of every conversion rule */
    GEN_INDEX,   /* indices in [0, lim); position `bad` (if >= 0) gets lim + 3 */
    GEN_BOOL_RAW, /* bool bytes 0, 1 and 2..255 (raw bytes are legal in a bool tensor) */
    GEN_ARANGE    /* floats: element i is i (the maximum last) */
};

typedef struct input {
    uint32_t dtype;
    shape sh;
    enum gen gen;
    int64_t lim, bad;
} input;

enum tol { TOL_EXACT, TOL_ULP, TOL_SUM, TOL_PROD, TOL_MATMUL, TOL_NORMAL, TOL_SOFTMAX, TOL_STAT,
           TOL_NORM, TOL_ATTN };

typedef struct tcase {
    char name[200];
    int n_in;
    input in[TD_OP_MAX_INPUTS];
    td__op op;
    enum tol tol;
    int ulps;
    td_status expect;
    bool tf32_probe; /* TF32 target: the result must differ from full precision's */
} tcase;

static tcase *g_cases;
static size_t g_ncases, g_capcases;

static tcase *add_case(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static tcase *add_case(const char *fmt, ...)
{
    if (g_ncases == g_capcases) {
        g_capcases = g_capcases ? g_capcases * 2 : 256;
        g_cases = realloc(g_cases, g_capcases * sizeof *g_cases);
        if (g_cases == NULL) {
            fprintf(stderr, "conformance: out of memory\n");
            exit(2);
        }
    }
    tcase *c = &g_cases[g_ncases++];
    memset(c, 0, sizeof *c);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->name, sizeof c->name, fmt, ap);
    va_end(ap);
    c->tol = TOL_EXACT;
    c->expect = TD_OK;
    return c;
}

static input in_of(uint32_t dt, shape sh, enum gen g)
{
    return (input){.dtype = dt, .sh = sh, .gen = g, .bad = -1};
}

static const char *shape_str(const shape *s, char *buf, size_t len)
{
    size_t o = (size_t)snprintf(buf, len, "[");
    for (uint32_t i = 0; i < s->rank && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "%s%" PRId64, i ? "," : "", s->d[i]);
    if (o < len) snprintf(buf + o, len - o, "]");
    return buf;
}

static const char *dtn(uint32_t dt) { return td_dtype_name((td_dtype)dt); }

/* ---- deterministic data ---- */

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double unit(uint64_t *s) { return (double)(splitmix(s) >> 11) * 0x1p-53; }

static double gen_float(uint64_t *s, enum gen g, bool f32)
{
    switch (g) {
    case GEN_POS: return 0.25 + 3.75 * (1.0 - unit(s));
    case GEN_NEAR1: return 0.9 + 0.2 * unit(s);
    case GEN_PLAIN: return -4.0 + 8.0 * unit(s);
    case GEN_CASTSRC: {
        static const double v[] = {0.0, -0.0, 0.5, -0.5, 0.999, 1.0, -1.0, 1.5, -1.5, 2.5,
                                   127.9, 128.0, 254.5, 255.0, 255.9, 256.0, 300.0, -300.0,
                                   2147483647.0, 2147483648.0, -2147483648.0, -2147483649.0,
                                   4294967296.5, 9.2233720368547758e18, -9.2233720368547758e18,
                                   1e19, -1e19, 1e30, 3.4e38, 1e300, 1e-30, 1e-310, INFINITY,
                                   -INFINITY, NAN, 16777217.0, 9007199254740993.0, 3.7, -3.7};
        return v[splitmix(s) % (sizeof v / sizeof v[0])];
    }
    default: break;
    }
    uint64_t r = splitmix(s);
    if (r % 10 != 0) return -8.0 + 16.0 * unit(s);
    static const double sp[] = {0.0, -0.0, 1.0, -1.0, INFINITY, -INFINITY, NAN, 0.5, 1e30,
                                -1e30, 1e-40, -1e-40, 1e-310, 88.5, -88.5, 710.0, 2.0};
    double v = sp[(r / 10) % (sizeof sp / sizeof sp[0])];
    if (f32 && (v == 1e-310 || v == 710.0)) v = 3e-39; /* f32 subnormal instead */
    return v;
}

static int64_t gen_int(uint64_t *s, enum gen g, uint32_t dt)
{
    uint64_t r = splitmix(s);
    if (g == GEN_NEAR1) return (int64_t)(r % 7) - 3;
    if (g == GEN_PLAIN) return (int64_t)(r % 41) - 20;
    if (g == GEN_CASTSRC || r % 8 == 0) {
        static const int64_t sp[] = {0, -1, 1, 2, -2, 127, 128, 255, 256, -128, -129,
                                     INT32_MAX, INT32_MIN, (int64_t)INT32_MAX + 1,
                                     (int64_t)INT32_MIN - 1, INT64_MAX, INT64_MIN,
                                     (1LL << 53) + 1, -(1LL << 53) - 1, 16777217};
        int64_t v = sp[(r >> 8) % (sizeof sp / sizeof sp[0])];
        if (dt == TD_I32) v = (int32_t)(uint32_t)(uint64_t)v;
        return v;
    }
    return (int64_t)((r >> 8) % 201) - 100;
}

static void fill_input(const input *in, void *buf, uint64_t seed)
{
    int64_t n = 1;
    for (uint32_t i = 0; i < in->sh.rank; i++) n *= in->sh.d[i];
    uint64_t s = seed;
    for (int64_t i = 0; i < n; i++) {
        switch (in->dtype) {
        case TD_F32:
            ((float *)buf)[i] = in->gen == GEN_ARANGE ? (float)i
                                                      : (float)gen_float(&s, in->gen, true);
            break;
        case TD_F64: ((double *)buf)[i] = gen_float(&s, in->gen, false); break;
        case TD_I32:
        case TD_I64: {
            int64_t v;
            if (in->gen == GEN_INDEX) {
                v = i == in->bad ? in->lim + 3 : (int64_t)(splitmix(&s) % (uint64_t)in->lim);
            } else {
                v = gen_int(&s, in->gen, in->dtype);
            }
            if (in->dtype == TD_I32) ((int32_t *)buf)[i] = (int32_t)v;
            else ((int64_t *)buf)[i] = v;
            break;
        }
        case TD_U8: ((uint8_t *)buf)[i] = (uint8_t)splitmix(&s); break;
        case TD_F16: ((uint16_t *)buf)[i] = td__f64_to_f16(gen_float(&s, in->gen, true)); break;
        case TD_BF16: ((uint16_t *)buf)[i] = td__f64_to_bf16(gen_float(&s, in->gen, true)); break;
        case TD_I8: ((int8_t *)buf)[i] = (int8_t)(uint8_t)(uint64_t)gen_int(&s, in->gen, in->dtype); break;
        case TD_I16: ((int16_t *)buf)[i] = (int16_t)(uint16_t)(uint64_t)gen_int(&s, in->gen, in->dtype); break;
        case TD_BOOL: {
            uint64_t r = splitmix(&s);
            ((uint8_t *)buf)[i] = in->gen == GEN_BOOL_RAW ? (uint8_t)(r % 4 == 0 ? r >> 8 : r & 1)
                                                          : (uint8_t)(r & 1);
            break;
        }
        }
    }
}

/* ---- executors ---- */

typedef struct executor {
    char uri[512];
    td__transport *tp;
    uint64_t next_id;
    bool tf32; /* uses TF32 where a matmul allows it (--tf32; by default: a cuda device) */
} executor;

static int g_tf32 = -1; /* --tf32: -1 auto, 0 off, 1 on */

/* Options for remote targets (token, TLS files, timeouts): tensorctl verify passes its
 * own; the test binary uses the defaults. */
static const td_options *g_remote;

static td_status executor_open(executor *e, const char *uri, char *err, size_t errlen)
{
    snprintf(e->uri, sizeof e->uri, "%s", uri);
    e->next_id = 1;
    const char *dev = strncmp(uri, "local:", 6) == 0 ? uri + 6 : strrchr(uri, '/');
    if (dev != NULL && *dev == '/') dev++;
    e->tf32 = g_tf32 >= 0 ? g_tf32 == 1 : dev != NULL && strncmp(dev, "cuda", 4) == 0;
    if (strncmp(uri, "local:", 6) == 0) return td__local_open(uri + 6, &e->tp, err, errlen);
    /* tensord://HOST:PORT/DEVICE, tensords://HOST:PORT/DEVICE (TLS), unix:PATH/DEVICE */
    const bool tls = strncmp(uri, "tensords://", 11) == 0;
    const bool unix_path = strncmp(uri, "unix:", 5) == 0;
    if (tls || unix_path || strncmp(uri, "tensord://", 10) == 0) {
        char target[512];
        snprintf(target, sizeof target, "%s", unix_path ? uri : uri + (tls ? 11 : 10));
        char *slash = unix_path ? strrchr(target, '/') : strchr(target, '/');
        const char *device = "";
        if (slash != NULL && slash > target + 5) {
            *slash = '\0';
            device = slash + 1;
        }
        td_options o = {.call_timeout_ms = 120000, .client_name = "conformance"};
        if (g_remote != NULL) {
            o = *g_remote;
            if (o.call_timeout_ms <= 0) o.call_timeout_ms = 120000;
            if (o.connect_timeout_ms <= 0) o.connect_timeout_ms = 5000;
            if (o.client_name == NULL) o.client_name = "tensorctl verify";
        }
        if (tls) o.tls = 1;
        return td__remote_open(target, device, &o, &e->tp, err, errlen);
    }
    snprintf(err, errlen, "unsupported uri '%s' (use local:DEVICE, tensord://HOST:PORT/DEVICE, "
             "tensords://HOST:PORT/DEVICE or unix:PATH/DEVICE)", uri);
    return TD_EINVAL;
}

/* One step of a small program: an op whose inputs name slots (the program's inputs first,
 * then each earlier step's output). */
typedef struct step {
    td__op op;
    int slot[TD_OP_MAX_INPUTS];
} step;

/* Run a program on e: upload inputs, run steps, read the last step's output into out
 * (nbytes). Returns the fence status (an op failure) or a transport error; msg says why. */
static td_status run_program(executor *e, int n_in, const td__desc *in_desc,
                             void *const *in_data, const step *steps, int n_steps, void *out,
                             size_t nbytes, char *msg, size_t msglen)
{
    td__transport *tp = e->tp;
    uint64_t base = e->next_id;
    int nslots = n_in + n_steps;
    e->next_id += (uint64_t)nslots;
    td__op ops[TD_OP_MAX_INPUTS + 8];
    for (int k = 0; k < n_in; k++) {
        td__op op = {.opcode = TD_OP_EMPTY, .dtype = in_desc[k].dtype,
                     .n_iattrs = in_desc[k].rank, .output = base + (uint64_t)k};
        for (uint32_t i = 0; i < in_desc[k].rank; i++) op.iattrs[i] = in_desc[k].dims[i];
        ops[k] = op;
    }
    td_status st = n_in > 0 ? tp->vt->submit(tp, ops, (size_t)n_in) : TD_OK;
    for (int k = 0; k < n_in && st == TD_OK; k++) {
        size_t nb = td__desc_nbytes(&in_desc[k]);
        if (nb > 0) st = tp->vt->write(tp, base + (uint64_t)k, 0, in_data[k], nb);
    }
    for (int j = 0; j < n_steps && st == TD_OK; j++) {
        td__op op = steps[j].op;
        for (uint32_t k = 0; k < op.n_inputs; k++) op.inputs[k] = base + (uint64_t)steps[j].slot[k];
        op.output = base + (uint64_t)(n_in + j);
        ops[j] = op;
    }
    if (st == TD_OK) st = tp->vt->submit(tp, ops, (size_t)n_steps);
    if (st == TD_OK) st = tp->vt->fence(tp);
    if (st == TD_OK && nbytes > 0)
        st = tp->vt->read(tp, base + (uint64_t)(nslots - 1), 0, out, nbytes);
    if (st != TD_OK) snprintf(msg, msglen, "%s", tp->err);
    uint64_t ids[TD_OP_MAX_INPUTS + 8];
    for (int k = 0; k < nslots; k++) ids[k] = base + (uint64_t)k;
    tp->vt->release(tp, ids, (size_t)nslots);
    return st;
}

/* ---- comparison ---- */

static double elem(const void *p, uint32_t dt, int64_t i)
{
    switch (dt) {
    case TD_F32: return ((const float *)p)[i];
    case TD_F64: return ((const double *)p)[i];
    case TD_I32: return ((const int32_t *)p)[i];
    case TD_I64: return (double)((const int64_t *)p)[i];
    case TD_F16: return td__f16_to_f32(((const uint16_t *)p)[i]);
    case TD_BF16: return td__bf16_to_f32(((const uint16_t *)p)[i]);
    case TD_I8: return ((const int8_t *)p)[i];
    case TD_I16: return ((const int16_t *)p)[i];
    default: return ((const uint8_t *)p)[i];
    }
}

/* Unit roundoff of a float dtype: 2^-p for p mantissa bits (implicit one included). */
static double unit_roundoff(uint32_t dt)
{
    switch (dt) {
    case TD_F32: return 0x1p-24;
    case TD_F16: return 0x1p-11;
    case TD_BF16: return 0x1p-8;
    default: return 0x1p-53;
    }
}

static int64_t ordered(const void *p, uint32_t dt, int64_t i)
{
    if (td__dtype_is_half(dt)) {
        int16_t b;
        memcpy(&b, (const uint16_t *)p + i, 2);
        return b < 0 ? (int64_t)INT16_MIN - b : b;
    }
    if (dt == TD_F32) {
        int32_t b;
        memcpy(&b, (const float *)p + i, 4);
        return b < 0 ? (int64_t)INT32_MIN - b : b;
    }
    int64_t b;
    memcpy(&b, (const double *)p + i, 8);
    return b < 0 ? INT64_MIN - b : b;
}

/* ulp of v in a 16-bit float dtype: its spacing at |v| (subnormal spacing below the
 * smallest normal). */
static double ulp_half(double v, uint32_t dt)
{
    v = fabs(v);
    if (isinf(v) || isnan(v)) return 0.0;
    const int p = dt == TD_F16 ? 11 : 8, emin = dt == TD_F16 ? -14 : -126;
    int e = v > 0 ? ilogb(v) : emin;
    if (e < emin) e = emin;
    return ldexp(1.0, e - (p - 1));
}

static double ulp_of(double v, bool f32);
static double ulp_dt(double v, uint32_t dt)
{
    return td__dtype_is_half(dt) ? ulp_half(v, dt) : ulp_of(v, dt == TD_F32);
}

static double ulp_of(double v, bool f32)
{
    v = fabs(v);
    if (isinf(v) || isnan(v)) return 0.0;
    if (f32) {
        float f = (float)v;
        return (double)(nextafterf(f, INFINITY) - f);
    }
    return nextafter(v, INFINITY) - v;
}

typedef struct check {
    const tcase *c;
    uint32_t dtype;
    int64_t n;
    const void *want, *got;
    const void *scale; /* TOL_SUM / TOL_MATMUL: reference of the op on |x| (out dtype) */
    double factor;     /* multiplies scale (TOL_SUM, TOL_MATMUL) or |want| (TOL_PROD) */
    double mag;        /* TOL_NORM: max |want| over the finite outputs */
    char why[512];
    /* filled by compare(): the worst element, for the per-op table (--table, --json) */
    double worst_ulp;  /* largest distance in units in the last place (float results) */
    double worst_frac; /* largest |got - want| / tolerance (0 for exact comparisons) */
} check;

/* Distance of element i of got from want in ulps of the dtype (0 for equal bits or two
 * NaNs; inf when only one side is NaN or infinite). */
static double ulp_distance(const check *k, int64_t i)
{
    double w = elem(k->want, k->dtype, i), g = elem(k->got, k->dtype, i);
    if (isnan(w) || isnan(g)) return isnan(w) && isnan(g) ? 0.0 : INFINITY;
    int64_t a = ordered(k->want, k->dtype, i), b = ordered(k->got, k->dtype, i);
    return a > b ? (double)((uint64_t)a - (uint64_t)b) : (double)((uint64_t)b - (uint64_t)a);
}

static bool same_nan_inf(double a, double b, bool *decided)
{
    *decided = true;
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    if (isinf(a) || isinf(b)) return a == b;
    *decided = false;
    return true;
}

static bool compare(check *k)
{
    const tcase *c = k->c;
    const bool fl = td__dtype_is_float(k->dtype);
    const size_t es = td_dtype_size((td_dtype)k->dtype);
    if (!fl || c->tol == TOL_EXACT) {
        for (int64_t i = 0; i < k->n; i++) {
            bool eq;
            if (fl) {
                double a = elem(k->want, k->dtype, i), b = elem(k->got, k->dtype, i);
                eq = (isnan(a) && isnan(b)) ||
                     memcmp((const char *)k->want + (size_t)i * es,
                            (const char *)k->got + (size_t)i * es, es) == 0;
            } else {
                eq = memcmp((const char *)k->want + (size_t)i * es,
                            (const char *)k->got + (size_t)i * es, es) == 0;
            }
            if (fl && !eq) {
                double d = ulp_distance(k, i);
                if (d > k->worst_ulp) k->worst_ulp = d;
            }
            if (!eq) {
                if (k->dtype == TD_I64)
                    snprintf(k->why, sizeof k->why, "element %" PRId64 ": got %" PRId64
                             ", want %" PRId64 " (exact)", i, ((const int64_t *)k->got)[i],
                             ((const int64_t *)k->want)[i]);
                else
                    snprintf(k->why, sizeof k->why, "element %" PRId64 ": got %.17g, want %.17g "
                             "(exact)", i, elem(k->got, k->dtype, i), elem(k->want, k->dtype, i));
                return false;
            }
        }
        return true;
    }
    for (int64_t i = 0; i < k->n; i++) {
        double w = elem(k->want, k->dtype, i), g = elem(k->got, k->dtype, i);
        bool decided;
        bool ok = same_nan_inf(w, g, &decided);
        double tol = 0.0;
        if (!decided) {
            switch (c->tol) {
            case TOL_ULP: {
                int64_t a = ordered(k->want, k->dtype, i), b = ordered(k->got, k->dtype, i);
                uint64_t d = a > b ? (uint64_t)a - (uint64_t)b : (uint64_t)b - (uint64_t)a;
                ok = d <= (uint64_t)c->ulps;
                tol = c->ulps * ulp_dt(w, k->dtype);
                break;
            }
            case TOL_SUM:
            case TOL_MATMUL:
                tol = ulp_dt(w, k->dtype) + k->factor * fabs(elem(k->scale, k->dtype, i));
                ok = fabs(w - g) <= tol;
                break;
            case TOL_PROD:
                tol = ulp_dt(w, k->dtype) + k->factor * fabs(w);
                ok = fabs(w - g) <= tol;
                break;
            case TOL_SOFTMAX: {
                const double u = unit_roundoff(k->dtype), n = k->factor;
                if (c->op.opcode == TD_OP_LOG_SOFTMAX)
                    tol = 4 * ulp_dt(w, k->dtype) + (16.0 + 8.0 * log(n)) * u + 2.0 * n * 0x1p-53;
                else
                    tol = 24 * ulp_dt(w, k->dtype) + 2.0 * n * 0x1p-53 * fabs(w);
                ok = fabs(w - g) <= tol;
                break;
            }
            case TOL_STAT: {
                /* scale: max |x| over the reduced elements (0 when there are none) */
                const double m = k->scale != NULL ? fabs(elem(k->scale, k->dtype, i)) : 0.0;
                const double e = 16.0 * k->factor * 0x1p-53, aw = fabs(w);
                double b;
                switch (c->op.opcode) {
                case TD_OP_VAR: b = e * m * m; break;
                case TD_OP_STD: {
                    const double bv = e * m * m, s1 = sqrt(bv);
                    b = aw > 0 && bv / aw < s1 ? bv / aw : s1;
                    break;
                }
                case TD_OP_LOGSUMEXP: b = e * (1.0 + aw); break;
                default: { /* NORM */
                    const double p = fabs(c->op.fattrs[0]);
                    b = 16.0 * (k->factor + 4.0) * 0x1p-53 * aw * (p > 0 && p < 1 ? 1.0 / p : 1.0);
                    break;
                }
                }
                tol = 2 * ulp_dt(w, k->dtype) + b;
                ok = fabs(w - g) <= tol;
                break;
            }
            case TOL_ATTN:
                tol = 16 * ulp_dt(w, k->dtype) + k->factor;
                ok = fabs(w - g) <= tol;
                break;
            case TOL_NORM:
                tol = 8 * ulp_dt(w, k->dtype) + k->factor * (1.0 + k->mag);
                ok = fabs(w - g) <= tol;
                break;
            case TOL_NORMAL: {
                double sd = fabs(c->op.fattrs[1]);
                tol = k->dtype == TD_F64 ? 4 * ulp_of(w, false) + 0x1p-40 * sd
                                         : 2 * ulp_dt(w, k->dtype) + 0x1p-20 * sd;
                ok = fabs(w - g) <= tol;
                break;
            }
            case TOL_EXACT:
                break;
            }
        }
        {
            double d = ulp_distance(k, i);
            if (d > k->worst_ulp) k->worst_ulp = d;
            if (!decided && tol > 0 && fabs(w - g) / tol > k->worst_frac)
                k->worst_frac = fabs(w - g) / tol;
        }
        if (!ok) {
            snprintf(k->why, sizeof k->why,
                     "element %" PRId64 ": got %.17g, want %.17g (|diff| %.3g, tolerance %.3g)", i,
                     g, w, fabs(g - w), tol);
            return false;
        }
    }
    return true;
}

/* ---- running a case ---- */

typedef struct stats {
    size_t run, passed, failed;
} stats;

static bool g_verbose;
static bool g_allow_unsupported; /* --allow-unsupported */
/* --flush-subnormals: the target flushes f32/bf16 subnormals to zero (a Vulkan driver
 * without shaderDenormPreserveFloat32 says so at open). A case the CPU's semantics fail is
 * then held, once more, to the reference run on inputs whose f32/bf16 subnormals are ±0,
 * with the reference's f32/bf16 subnormal results taken as ±0 too (what a flush-to-zero,
 * denormals-are-zero device computes), element by element: each result element may be
 * either semantics' (see run_case); g_flushed counts the cases that needed it. */
static bool g_flush;
static size_t g_flushed;

/* Replace every f32/bf16 subnormal in p[0..n) by a zero of its sign. */
static void flush_subnormals(void *p, uint32_t dt, int64_t n)
{
    if (dt == TD_F32) {
        uint32_t *u = p;
        for (int64_t i = 0; i < n; i++)
            if ((u[i] & 0x7f800000u) == 0) u[i] &= 0x80000000u;
    } else if (dt == TD_BF16) {
        uint16_t *u = p;
        for (int64_t i = 0; i < n; i++)
            if ((u[i] & 0x7f80u) == 0) u[i] &= 0x8000u;
    }
}
static bool g_refused;           /* the last run_case: the target refused it (allowed) */

static void *xmalloc(size_t n)
{
    void *p = malloc(n > 0 ? n : 1);
    if (p == NULL) {
        fprintf(stderr, "conformance: out of memory (%zu bytes)\n", n);
        exit(2);
    }
    return p;
}

/* "index 7 out of range [0, 5) at position 3" from a failure message (or the message). */
static const char *reason_of(const char *msg)
{
    const char *p = strstr(msg, "index ");
    return p != NULL ? p : msg;
}

static int64_t reduced_count(const tcase *c)
{
    int64_t n = 1;
    uint64_t mask = (uint64_t)c->op.iattrs[0];
    for (uint32_t d = 0; d < c->in[0].sh.rank; d++)
        if ((mask >> d) & 1) n *= c->in[0].sh.d[d];
    return n;
}

/* A scan's axis length (rank 0: 1). */
static int64_t scan_length(const tcase *c)
{
    return c->in[0].sh.rank > 0 ? c->in[0].sh.d[c->op.iattrs[0]] : 1;
}

static int64_t shape_elems(const shape *s)
{
    int64_t n = 1;
    for (uint32_t i = 0; i < s->rank; i++) n *= s->d[i];
    return n;
}

/* The number of elements a normalisation op (TD_OPCLASS_NN) folds together: the dims from
 * the axis (LAYER_NORM RMS_NORM and their backward ops), C / groups x spatial (GROUP_NORM),
 * N x spatial (BATCH_NORM_BACKWARD), 1 (BATCH_NORM: elementwise). x is input 0, or 1 for the
 * backward ops (the same shape as dy). */
static int64_t norm_group(const tcase *c)
{
    const shape *x = &c->in[0].sh;
    int64_t n = 1, sp = 1;
    for (uint32_t i = 2; i < x->rank; i++) sp *= x->d[i];
    switch (c->op.opcode) {
    case TD_OP_LAYER_NORM: case TD_OP_RMS_NORM:
    case TD_OP_LAYER_NORM_BACKWARD: case TD_OP_RMS_NORM_BACKWARD:
        for (uint32_t i = (uint32_t)c->op.iattrs[0]; i < x->rank; i++) n *= x->d[i];
        return n;
    case TD_OP_GROUP_NORM: case TD_OP_GROUP_NORM_BACKWARD:
        return x->d[1] / c->op.iattrs[0] * sp;
    case TD_OP_BATCH_NORM_BACKWARD: return x->d[0] * sp;
    default: return 1;
    }
}

/* Unit roundoff of a scan's accumulator: f32 for f16/bf16, double otherwise. */
static double scan_u(uint32_t dt) { return td__dtype_is_half(dt) ? 0x1p-24 : 0x1p-53; }

/* TD_ACC_CONV's K: the products one output element sums (an upper bound for the
 * transposed convolution): C/groups * kernel for CONV and CONV_TRANSPOSE (weight dim 1 or
 * input channels / groups, times the kernel's spatial size), N * output positions for
 * CONV_WEIGHT_GRAD. */
static int64_t conv_products(const td__op *op, const td__desc *in)
{
    int64_t k = 1;
    const td__desc *w = &in[1];
    if (op->opcode == TD_OP_CONV_WEIGHT_GRAD) {
        k = w->dims[0];
        for (uint32_t i = 2; i < w->rank; i++) k *= w->dims[i];
        return k;
    }
    k = op->opcode == TD_OP_CONV ? w->dims[1] : in[0].dims[1] / (op->iattrs[0] > 0 ? op->iattrs[0] : 1);
    for (uint32_t i = 2; i < w->rank; i++) k *= w->dims[i];
    return k;
}

static bool run_case(executor *ref, executor *tgt, executor *low, const tcase *c, size_t index,
                     char *why, size_t whylen, double *worst_ulp, double *worst_frac)
{
    *worst_ulp = *worst_frac = 0.0;
    td__desc in_desc[TD_OP_MAX_INPUTS];
    const td__desc *in_ptr[TD_OP_MAX_INPUTS];
    void *in_data[TD_OP_MAX_INPUTS];
    for (int k = 0; k < c->n_in; k++) {
        in_desc[k] = (td__desc){.dtype = c->in[k].dtype, .rank = c->in[k].sh.rank};
        for (uint32_t i = 0; i < c->in[k].sh.rank; i++) in_desc[k].dims[i] = c->in[k].sh.d[i];
        in_ptr[k] = &in_desc[k];
        in_data[k] = xmalloc(td__desc_nbytes(&in_desc[k]));
        fill_input(&c->in[k], in_data[k], 0x5eed0000ull + index * 131 + (uint64_t)k);
    }
    td__op op = c->op;
    op.n_inputs = (uint32_t)c->n_in;
    td__desc od;
    char err[1024] = "";
    bool ok = false;
    void *want = NULL, *got = NULL, *again = NULL, *scale = NULL;
    if (td__op_infer(&op, in_ptr, &od, err, sizeof err) != TD_OK) {
        snprintf(why, whylen, "case is invalid: %s", err);
        goto done;
    }
    size_t nbytes = td__desc_nbytes(&od);
    want = xmalloc(nbytes);
    got = xmalloc(nbytes);
    again = xmalloc(nbytes);
    step s = {.op = op};
    for (int k = 0; k < c->n_in; k++) s.slot[k] = k;
    char mref[1024] = "", mtgt[1024] = "", mtgt2[1024] = "";
    td_status sref = run_program(ref, c->n_in, in_desc, in_data, &s, 1, want, nbytes, mref,
                                 sizeof mref);
    td_status stgt = run_program(tgt, c->n_in, in_desc, in_data, &s, 1, got, nbytes, mtgt,
                                 sizeof mtgt);
    if (c->expect != TD_OK && sref == c->expect && stgt == TD_EUNSUPPORTED &&
        g_allow_unsupported) {
        g_refused = true;
        goto done;
    }
    if (c->expect != TD_OK) {
        if (sref != c->expect || stgt != c->expect) {
            snprintf(why, whylen, "expected %s on both; reference gave %s (%s), target %s (%s)",
                     td_status_name(c->expect), td_status_name(sref), mref,
                     td_status_name(stgt), mtgt);
        } else if (strcmp(reason_of(mref), reason_of(mtgt)) != 0) {
            snprintf(why, whylen, "messages differ: reference '%s', target '%s'", mref, mtgt);
        } else {
            ok = true;
        }
        goto done;
    }
    if (sref == TD_OK && stgt == TD_EUNSUPPORTED && g_allow_unsupported) {
        g_refused = true;
        goto done;
    }
    if (sref != TD_OK || stgt != TD_OK) {
        snprintf(why, whylen, "reference %s (%s), target %s (%s)", td_status_name(sref), mref,
                 td_status_name(stgt), mtgt);
        goto done;
    }
    td_status s2 = run_program(tgt, c->n_in, in_desc, in_data, &s, 1, again, nbytes, mtgt2,
                               sizeof mtgt2);
    if (s2 != TD_OK || memcmp(got, again, nbytes) != 0) {
        snprintf(why, whylen, "not deterministic: a second run on the target %s",
                 s2 != TD_OK ? mtgt2 : "gave different bytes");
        goto done;
    }
    check k = {.c = c, .dtype = od.dtype, .n = td__desc_nelem(&od), .want = want, .got = got};
    if (td__dtype_is_float(od.dtype) && (c->tol == TOL_SUM || c->tol == TOL_MATMUL)) {
        /* the same op on |inputs|, on the reference, scales the bound */
        step p[TD_OP_MAX_INPUTS + 1];
        int np = 0;
        for (int j = 0; j < c->n_in; j++) {
            p[np] = (step){.op = {.opcode = TD_OP_ABS, .n_inputs = 1}, .slot = {j}};
            np++;
        }
        p[np] = (step){.op = op};
        for (int j = 0; j < c->n_in; j++) p[np].slot[j] = c->n_in + j;
        np++;
        scale = xmalloc(nbytes);
        char m[1024] = "";
        if (run_program(ref, c->n_in, in_desc, in_data, p, np, scale, nbytes, m, sizeof m) !=
            TD_OK) {
            snprintf(why, whylen, "reference failed on |x|: %s", m);
            goto done;
        }
        k.scale = scale;
        if (c->tol == TOL_SUM && td__op_class(op.opcode) == TD_OPCLASS_SCAN) {
            k.factor = 4.0 * (double)scan_length(c) * scan_u(od.dtype);
        } else if (c->tol == TOL_SUM) {
            k.factor = 4.0 * (double)reduced_count(c) * 0x1p-53;
        } else {
            int64_t kk = in_desc[0].dims[in_desc[0].rank - 1];
            if (td__op_class(op.opcode) == TD_OPCLASS_CONV) kk = conv_products(&op, in_desc);
            /* f16/bf16 multiply and add in f32 (u = 2^-24) and round once at the end: the
             * 1 ulp term, in the half dtype, covers that rounding */
            k.factor = 2.0 * (double)kk * (od.dtype == TD_F64 ? 0x1p-53 : 0x1p-24);
            if (od.dtype == TD_F32 && td__matmul_allows_tf32(&op) && tgt->tf32)
                k.factor += 2.0 * 0x1p-10 + 0x1p-20;
        }
    } else if (c->tol == TOL_STAT) {
        /* max |x| over each output's reduced elements, on the reference, scales the bound */
        k.factor = (double)reduced_count(c);
        if (reduced_count(c) > 0) {
            step p[2] = {{.op = {.opcode = TD_OP_ABS, .n_inputs = 1}, .slot = {0}},
                         {.op = {.opcode = TD_OP_MAX, .n_inputs = 1, .n_iattrs = 2,
                                 .iattrs = {op.iattrs[0], op.iattrs[1]}},
                          .slot = {1}}};
            scale = xmalloc(nbytes);
            char m[1024] = "";
            if (run_program(ref, 1, in_desc, in_data, p, 2, scale, nbytes, m, sizeof m) != TD_OK) {
                snprintf(why, whylen, "reference failed on max |x|: %s", m);
                goto done;
            }
            k.scale = scale;
        }
    } else if (c->tol == TOL_PROD && td__op_class(op.opcode) == TD_OPCLASS_SCAN) {
        k.factor = 4.0 * (double)scan_length(c) * scan_u(od.dtype);
    } else if (c->tol == TOL_PROD) {
        k.factor = 4.0 * (double)reduced_count(c) * 0x1p-53;
    } else if (c->tol == TOL_NORM) {
        /* 64 n 2^-53 (1 + max |y|), n the elements normalised together */
        k.factor = 64.0 * (double)norm_group(c) * 0x1p-53;
        for (int64_t i = 0; i < k.n; i++) {
            const double v = elem(want, od.dtype, i);
            if (isfinite(v) && fabs(v) > k.mag) k.mag = fabs(v);
        }
    } else if (c->tol == TOL_SOFTMAX) {
        k.factor = (double)c->in[0].sh.d[c->op.iattrs[0]]; /* the row length */
    } else if (c->tol == TOL_ATTN) {
        /* (4 E |scale| max|q| max|k| + 4 S + 8) u max|v| */
        double mx[3] = {0, 0, 0};
        for (int t = 0; t < 3; t++)
            for (int64_t i = 0; i < td__desc_nelem(&in_desc[t]); i++) {
                const double v = fabs(elem(in_data[t], in_desc[t].dtype, i));
                if (isfinite(v) && v > mx[t]) mx[t] = v;
            }
        const double e = (double)in_desc[0].dims[in_desc[0].rank - 1];
        const double sl = (double)in_desc[1].dims[in_desc[1].rank - 2];
        k.factor = (4.0 * e * fabs(op.fattrs[0]) * mx[0] * mx[1] + 4.0 * sl + 8.0) *
                   unit_roundoff(od.dtype) * mx[2];
    }
    ok = compare(&k);
    if (!ok && g_flush) {
        bool any = od.dtype == TD_F32 || od.dtype == TD_BF16;
        for (int j = 0; j < c->n_in; j++)
            any = any || c->in[j].dtype == TD_F32 || c->in[j].dtype == TD_BF16;
        void *flushed[TD_OP_MAX_INPUTS] = {0};
        void *want2 = any ? xmalloc(nbytes) : NULL;
        for (int j = 0; any && j < c->n_in; j++) {
            size_t nb = td__desc_nbytes(&in_desc[j]);
            flushed[j] = xmalloc(nb ? nb : 1);
            memcpy(flushed[j], in_data[j], nb);
            flush_subnormals(flushed[j], in_desc[j].dtype, td__desc_nelem(&in_desc[j]));
        }
        char m[1024] = "";
        if (any && run_program(ref, c->n_in, in_desc, flushed, &s, 1, want2, nbytes, m,
                               sizeof m) == TD_OK) {
            flush_subnormals(want2, od.dtype, td__desc_nelem(&od));
            /* Per element, whichever semantics the device used there: the IEEE result
             * (want), or the flushed one (want2), where a got that flushes to want2 (or to
             * a zero when want2 is a zero: a flushing device cannot tell ±0 and the
             * subnormals apart, e.g. which one MINIMUM or a sort passes through) counts as
             * that. */
            const size_t es = td_dtype_size((td_dtype)od.dtype);
            const int64_t ne = td__desc_nelem(&od);
            uint8_t *w = want2, *g = got, *w1 = want;
            for (int64_t i = 0; i < ne; i++) {
                uint8_t *wi = w + (size_t)i * es;
                const uint8_t *gi = g + (size_t)i * es, *w1i = w1 + (size_t)i * es;
                if (memcmp(gi, w1i, es) == 0) {
                    memcpy(wi, w1i, es);
                    continue;
                }
                if (od.dtype == TD_F32 || od.dtype == TD_BF16) {
                    uint8_t fg[4];
                    memcpy(fg, gi, es);
                    flush_subnormals(fg, od.dtype, 1);
                    const double fv = elem(fg, od.dtype, 0), wv = elem(wi, od.dtype, 0);
                    if (memcmp(fg, wi, es) == 0 || (fv == 0.0 && wv == 0.0)) {
                        memcpy(wi, gi, es);
                        continue;
                    }
                }
                const double gv = elem(gi, od.dtype, 0), v1 = elem(w1i, od.dtype, 0),
                             v2 = elem(wi, od.dtype, 0);
                if (isfinite(gv) && isfinite(v1) && isfinite(v2) && fabs(gv - v1) < fabs(gv - v2))
                    memcpy(wi, w1i, es);
            }
            check k2 = k;
            k2.want = want2;
            k2.why[0] = '\0';
            k2.worst_ulp = k2.worst_frac = 0;
            if (compare(&k2)) {
                ok = true;
                g_flushed++;
                k = k2;
            }
        }
        for (int j = 0; j < c->n_in; j++) free(flushed[j]);
        free(want2);
    }
    *worst_ulp = k.worst_ulp;
    *worst_frac = k.worst_frac;
    if (!ok) snprintf(why, whylen, "%s", k.why);
    if (ok && c->tf32_probe && tgt->tf32) {
        step full = s;
        full.op.n_iattrs = 0;
        if (run_program(tgt, c->n_in, in_desc, in_data, &full, 1, again, nbytes, mtgt2,
                        sizeof mtgt2) != TD_OK) {
            snprintf(why, whylen, "full-precision run for the TF32 probe: %s", mtgt2);
            ok = false;
        } else if (memcmp(got, again, nbytes) == 0) {
            snprintf(why, whylen, "TF32 allowed, yet the result is bit-identical to full "
                     "precision: the precision attribute did not reach the GEMM");
            ok = false;
        }
    }
    if (ok && low != NULL && td__op_lowering(td__op_row_of(op.opcode)) != NULL) {
        /* the native kernel held to its lowering on the same device: bit for bit on the CPU
         * (op.h's contract), within the op's own bound elsewhere */
        if (run_program(low, c->n_in, in_desc, in_data, &s, 1, again, nbytes, mtgt2,
                        sizeof mtgt2) != TD_OK) {
            snprintf(why, whylen, "lowered run on the target: %s", mtgt2);
            ok = false;
        } else {
            tcase lc = *c;
            if (strcmp(tgt->uri, "local:cpu") == 0 && c->tol != TOL_ATTN) lc.tol = TOL_EXACT;
            check kl = k;
            kl.c = &lc;
            kl.want = got;
            kl.got = again;
            kl.why[0] = '\0';
            ok = compare(&kl);
            if (!ok) snprintf(why, whylen, "native kernel vs its lowering: %s", kl.why);
        }
    }
done:
    for (int k2 = 0; k2 < c->n_in; k2++) free(in_data[k2]);
    free(want);
    free(got);
    free(again);
    free(scale);
    return ok;
}

/* ---- the case list ---- */

/* The dtypes of a class, from the dtype table (engine/dtype.h): a new dtype joins every
 * case list whose class holds it. */
static uint32_t k_numeric[TD_DTYPE_COUNT], k_all[TD_DTYPE_COUNT], k_float[TD_DTYPE_COUNT];
static size_t n_numeric, n_all, n_float;
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static size_t dtypes_of(unsigned cls, uint32_t *out)
{
    size_t n = 0;
    for (uint32_t dt = 0; dt < TD_DTYPE_COUNT; dt++)
        if (td__dtype_in(dt, cls)) out[n++] = dt;
    return n;
}

/* The ops of a family, from the op table. */
static size_t ops_of(unsigned family, const td__op_row **out)
{
    size_t n = 0;
    for (int i = 0; i < TD_OP_COUNT; i++)
        if (td__op_rows[i].family == family) out[n++] = &td__op_rows[i];
    return n;
}

/* A row's accuracy as a case tolerance (TOL_EXACT, or TOL_ULP with c->ulps). */
static void tol_of(tcase *c, const td__op_row *r)
{
    switch (r->accuracy) {
    case TD_ACC_ULP4: c->tol = TOL_ULP; c->ulps = 4; break;
    case TD_ACC_ULP6: c->tol = TOL_ULP; c->ulps = 6; break;
    case TD_ACC_ULP8: c->tol = TOL_ULP; c->ulps = 8; break;
    case TD_ACC_ULP16: c->tol = TOL_ULP; c->ulps = 16; break;
    case TD_ACC_SUM: c->tol = TOL_SUM; break;
    case TD_ACC_PROD: c->tol = TOL_PROD; break;
    case TD_ACC_MATMUL: case TD_ACC_CONV: c->tol = TOL_MATMUL; break;
    case TD_ACC_NORMAL: c->tol = TOL_NORMAL; break;
    case TD_ACC_SOFTMAX: case TD_ACC_LOG_SOFTMAX: c->tol = TOL_SOFTMAX; break;
    case TD_ACC_STAT: c->tol = TOL_STAT; break;
    case TD_ACC_NORM: c->tol = TOL_NORM; break;
    case TD_ACC_ATTENTION: c->tol = TOL_ATTN; break;
    case TD_ACC_CUMSUM: c->tol = TOL_SUM; break;
    case TD_ACC_CUMPROD: c->tol = TOL_PROD; break;
    default: c->tol = TOL_EXACT; break;
    }
}

static void add_create(void)
{
    const shape shapes[] = {SH0, SH(0), SH(3, 4), SH(2, 0, 3), SH(1000003)};
    const double vals[] = {3.7, -2.5, 1e10, -1e10, 300.0, NAN, 0.0};
    char sb[64];
    for (size_t s = 0; s < COUNT(shapes); s++)
        for (size_t d = 0; d < n_all; d++)
            for (size_t v = 0; v < COUNT(vals); v++) {
                if (s == 4 && v > 0) continue;
                tcase *c = add_case("full %s %s %g", dtn(k_all[d]), shape_str(&shapes[s], sb, sizeof sb), vals[v]);
                c->op = (td__op){.opcode = TD_OP_FULL, .dtype = k_all[d], .n_iattrs = shapes[s].rank,
                                 .fattrs = {vals[v], 0}};
                for (uint32_t i = 0; i < shapes[s].rank; i++) c->op.iattrs[i] = shapes[s].d[i];
            }
    const int64_t ns[] = {0, 1, 17, 100003};
    const double ar[][2] = {{0, 1}, {-3.5, 0.1}, {1e6, -7.25}, {0.1, 0.1}};
    for (size_t n = 0; n < COUNT(ns); n++)
        for (size_t d = 0; d < n_all; d++)
            for (size_t a = 0; a < COUNT(ar); a++) {
                tcase *c = add_case("arange %s n=%" PRId64 " start %g step %g", dtn(k_all[d]), ns[n],
                                    ar[a][0], ar[a][1]);
                c->op = (td__op){.opcode = TD_OP_ARANGE, .dtype = k_all[d], .n_iattrs = 1,
                                 .iattrs = {ns[n]}, .fattrs = {ar[a][0], ar[a][1]}};
            }
    const shape rs[] = {SH0, SH(0), SH(1), SH(3), SH(4), SH(5), SH(2, 3, 7), SH(1000003)};
    const uint64_t seeds[] = {0, 1, 0xdeadbeefcafef00dull};
    for (size_t s = 0; s < COUNT(rs); s++)
        for (size_t f = 0; f < n_float; f++)
            for (size_t e = 0; e < COUNT(seeds); e++)
                for (int normal = 0; normal < 2; normal++) {
                    tcase *c = add_case("rand_%s %s %s seed %" PRIu64, normal ? "normal" : "uniform",
                                        dtn(k_float[f]), shape_str(&rs[s], sb, sizeof sb), seeds[e]);
                    c->op = (td__op){.opcode = normal ? TD_OP_RAND_NORMAL : TD_OP_RAND_UNIFORM,
                                     .dtype = k_float[f], .n_iattrs = rs[s].rank,
                                     .fattrs = {normal ? 0.5 : -2.0, normal ? 3.0 : 5.0},
                                     .seed = seeds[e]};
                    for (uint32_t i = 0; i < rs[s].rank; i++) c->op.iattrs[i] = rs[s].d[i];
                    if (normal) c->tol = TOL_NORMAL;
                }
    /* the random ops of issue 13: exact on every backend (integer and IEEE basic double
     * operations only, engine/philox.h) */
    const int64_t rn[] = {0, 1, 5, 33, 4099, 100003};
    for (size_t s = 0; s < COUNT(rs); s++)
        for (size_t e = 0; e < COUNT(seeds); e++) {
            /* CI time: no million-element draws (the kernels are flat loops over blocks;
             * RANDPERM below runs 4099 and 100003, past the GPU sort's one-tile size) */
            const bool big = rs[s].rank > 0 && rs[s].d[0] > 1000;
            for (size_t f = 0; f < n_float && !big; f++) {
                tcase *c = add_case("bernoulli %s %s seed %" PRIu64, dtn(k_float[f]),
                                    shape_str(&rs[s], sb, sizeof sb), seeds[e]);
                c->n_in = 1;
                c->in[0] = in_of(k_float[f], rs[s], GEN_ANY);
                c->op = (td__op){.opcode = TD_OP_BERNOULLI, .n_inputs = 1, .seed = seeds[e]};
                const double tn[][4] = {{0, 1, -2, 2}, {1, 0.5, 1.2, 9}, {0, 1, -7, -6.5}};
                for (size_t t = 0; t < COUNT(tn); t++) {
                    c = add_case("trunc_normal %s %s seed %" PRIu64 " (%g, %g, %g, %g)",
                                 dtn(k_float[f]), shape_str(&rs[s], sb, sizeof sb), seeds[e],
                                 tn[t][0], tn[t][1], tn[t][2], tn[t][3]);
                    c->op = (td__op){.opcode = TD_OP_TRUNC_NORMAL, .dtype = k_float[f],
                                     .n_iattrs = rs[s].rank, .seed = seeds[e],
                                     .fattrs = {tn[t][0], tn[t][1], tn[t][2], tn[t][3]}};
                    for (uint32_t i = 0; i < rs[s].rank; i++) c->op.iattrs[i] = rs[s].d[i];
                }
            }
            for (size_t d = 0; d < n_all && !big; d++) {
                tcase *c = add_case("bernoulli_scalar %s %s seed %" PRIu64, dtn(k_all[d]),
                                    shape_str(&rs[s], sb, sizeof sb), seeds[e]);
                c->op = (td__op){.opcode = TD_OP_BERNOULLI_SCALAR, .dtype = k_all[d],
                                 .n_iattrs = rs[s].rank, .fattrs = {0.3, 0}, .seed = seeds[e]};
                for (uint32_t i = 0; i < rs[s].rank; i++) c->op.iattrs[i] = rs[s].d[i];
                if (!td__dtype_in(k_all[d], TD_DTC_INT)) continue;
                const int64_t lim[][2] = {{0, 100}, {-3, 4}, {INT64_MIN, INT64_MAX}};
                for (size_t l = 0; l < COUNT(lim); l++) {
                    int64_t lo = lim[l][0], hi = lim[l][1];
                    if (k_all[d] == TD_U8 && l == 1) lo = 0;
                    if (l == 2) { /* the dtype's whole range */
                        lo = k_all[d] == TD_U8 ? 0 : k_all[d] == TD_I8 ? INT8_MIN
                             : k_all[d] == TD_I16 ? INT16_MIN : k_all[d] == TD_I32 ? INT32_MIN : lo;
                        hi = k_all[d] == TD_U8 ? 256 : k_all[d] == TD_I8 ? 128
                             : k_all[d] == TD_I16 ? 32768 : k_all[d] == TD_I32 ? 2147483648LL : hi;
                    }
                    c = add_case("randint %s %s seed %" PRIu64 " [%" PRId64 ", %" PRId64 ")",
                                 dtn(k_all[d]), shape_str(&rs[s], sb, sizeof sb), seeds[e], lo, hi);
                    c->op = (td__op){.opcode = TD_OP_RANDINT, .dtype = k_all[d],
                                     .n_iattrs = rs[s].rank + 2, .iattrs = {lo, hi},
                                     .seed = seeds[e]};
                    for (uint32_t i = 0; i < rs[s].rank; i++) c->op.iattrs[2 + i] = rs[s].d[i];
                }
            }
            if (s < COUNT(rn)) {
                tcase *c = add_case("randperm n=%" PRId64 " seed %" PRIu64, rn[s], seeds[e]);
                c->op = (td__op){.opcode = TD_OP_RANDPERM, .dtype = TD_I64, .n_iattrs = 1,
                                 .iattrs = {rn[s]}, .seed = seeds[e]};
            }
        }
}

/* The attribute sets a unary op runs with (iattrs, fattrs); one empty set for ops without
 * attributes. Returns the count. */
typedef struct uattrs {
    uint32_t n_iattrs;
    int64_t mode;
    double f[TD_OP_MAX_FATTRS];
} uattrs;

static size_t unary_attr_sets(uint32_t opcode, uattrs *out)
{
    switch (opcode) {
    case TD_OP_GELU:
        out[0] = (uattrs){0, 0, {0}};
        out[1] = (uattrs){1, 1, {0}};
        return 2;
    case TD_OP_SOFTPLUS:
        out[0] = (uattrs){0, 0, {1.0, 20.0}};
        out[1] = (uattrs){0, 0, {2.5, 3.0}};
        out[2] = (uattrs){0, 0, {-0.5, 1.0}};
        return 3;
    case TD_OP_LEAKY_RELU:
        out[0] = (uattrs){0, 0, {0.01}};
        out[1] = (uattrs){0, 0, {-2.5}};
        return 2;
    case TD_OP_ELU:
        out[0] = (uattrs){0, 0, {1.0}};
        out[1] = (uattrs){0, 0, {0.3}};
        return 2;
    case TD_OP_CLAMP:
        out[0] = (uattrs){0, 0, {-1.5, 2.25}};
        out[1] = (uattrs){0, 0, {-INFINITY, 0.5}};
        out[2] = (uattrs){0, 0, {3.0, 3.0}};
        out[3] = (uattrs){0, 0, {-1e300, 1e300}};
        return 4;
    case TD_OP_NAN_TO_NUM:
        out[0] = (uattrs){0, 0, {0.0, 100.0, -100.0}};
        out[1] = (uattrs){0, 0, {-1.5, 1e300, -0.1}};
        return 2;
    default:
        out[0] = (uattrs){0, 0, {0}};
        return 1;
    }
}

static void add_unary(void)
{
    const shape shapes[] = {SH0, SH(0), SH(7), SH(3, 5), SH(2, 3, 4, 5), SH(3, 100003)};
    const td__op_row *ops[TD_OP_COUNT];
    size_t nops = ops_of(TD_OPCLASS_UNARY, ops);
    char sb[64];
    for (size_t o = 0; o < nops; o++) {
        uint32_t dts[TD_DTYPE_COUNT];
        size_t nd = dtypes_of(ops[o]->in_dtype, dts);
        uattrs at[8];
        size_t na = unary_attr_sets(ops[o]->opcode, at);
        for (size_t d = 0; d < nd; d++) {
            for (size_t s = 0; s < COUNT(shapes); s++)
                for (size_t a = 0; a < na; a++)
                    for (int g = 0; g < 2; g++) {
                        /* the large shape once per op and dtype (ASan time) */
                        if (shapes[s].rank == 2 && shapes[s].d[1] == 100003 && a > 0) continue;
                        char an[96] = "";
                        if (na > 1)
                            snprintf(an, sizeof an, " attrs %" PRId64 ",%g,%g,%g", at[a].mode,
                                     at[a].f[0], at[a].f[1], at[a].f[2]);
                        tcase *c = add_case("%s %s %s%s%s", ops[o]->name, dtn(dts[d]),
                                            shape_str(&shapes[s], sb, sizeof sb), an,
                                            g ? " specials" : "");
                        c->n_in = 1;
                        c->in[0] = in_of(dts[d], shapes[s], g ? GEN_ANY : GEN_PLAIN);
                        if (dts[d] == TD_BOOL && g) c->in[0].gen = GEN_BOOL_RAW;
                        c->op = (td__op){.opcode = ops[o]->opcode, .n_iattrs = at[a].n_iattrs,
                                         .iattrs = {at[a].mode},
                                         .fattrs = {at[a].f[0], at[a].f[1], at[a].f[2]}};
                        tol_of(c, ops[o]);
                    }
        }
    }
}

static void add_binary(void)
{
    const shape pairs[][2] = {
        {SH0, SH0}, {SH(5), SH0}, {SH0, SH(5)}, {SH(7), SH(7)}, {SH(3, 1), SH(1, 4)},
        {SH(2, 3, 4), SH(4)}, {SH(2, 1, 4), SH(3, 1)}, {SH(0, 3), SH(3)}, {SH(4, 0), SH(1)},
        {SH(2, 1, 2, 1, 2, 1, 2, 3), SH(1, 2, 1, 2, 1, 2, 1, 3)}, {SH(1000, 513), SH(513)},
        {SH(513, 1000), SH(513, 1)}, {SH(300007), SH(300007)}};
    const td__op_row *rows[TD_OP_COUNT];
    size_t nops = ops_of(TD_OPCLASS_BINARY, rows);
    nops += ops_of(TD_OPCLASS_COMPARE, rows + nops);
    char sa[96], sb[96];
    for (size_t o = 0; o < nops; o++) {
        const uint32_t opc = rows[o]->opcode;
        for (size_t d = 0; d < n_all; d++) {
            uint32_t dt = k_all[d];
            if (!td__dtype_in(dt, rows[o]->in_dtype)) continue;
            for (size_t p = 0; p < COUNT(pairs); p++)
                for (int g = 0; g < 2; g++) {
                    tcase *c = add_case("%s %s %s %s%s", rows[o]->name, dtn(dt),
                                        shape_str(&pairs[p][0], sa, sizeof sa),
                                        shape_str(&pairs[p][1], sb, sizeof sb), g ? " specials" : "");
                    c->n_in = 2;
                    enum gen gen = g ? GEN_ANY : GEN_PLAIN;
                    if (dt == TD_BOOL && g) gen = GEN_BOOL_RAW;
                    c->in[0] = in_of(dt, pairs[p][0], gen);
                    c->in[1] = in_of(dt, pairs[p][1], gen);
                    c->op = (td__op){.opcode = opc};
                    tol_of(c, rows[o]);
                    /* inexact ops (pow) take positive bases in the plain cases */
                    if (c->tol != TOL_EXACT && !g) c->in[0].gen = GEN_POS;
                }
        }
    }
}

static void add_where_cast(void)
{
    const shape triples[][3] = {{SH0, SH0, SH0}, {SH(3, 1), SH(1, 4), SH(3, 4)},
                                {SH0, SH(5), SH(2, 5)}, {SH(2, 0), SH(1), SH(2, 1)},
                                {SH(4, 1, 6), SH(5, 1), SH(1, 6)}, {SH(100003), SH(100003), SH0}};
    char s1[64], s2[64], s3[64];
    for (size_t d = 0; d < n_all; d++)
        for (size_t t = 0; t < COUNT(triples); t++)
            for (int raw = 0; raw < 2; raw++) {
                tcase *c = add_case("where %s %s %s %s%s", dtn(k_all[d]),
                                    shape_str(&triples[t][0], s1, sizeof s1),
                                    shape_str(&triples[t][1], s2, sizeof s2),
                                    shape_str(&triples[t][2], s3, sizeof s3), raw ? " raw-bool" : "");
                c->n_in = 3;
                c->in[0] = in_of(TD_BOOL, triples[t][0], raw ? GEN_BOOL_RAW : GEN_ANY);
                c->in[1] = in_of(k_all[d], triples[t][1], GEN_ANY);
                c->in[2] = in_of(k_all[d], triples[t][2], GEN_ANY);
                c->op = (td__op){.opcode = TD_OP_WHERE};
            }
    /* clamp_tensor (a composite of maximum and minimum): x, lo, hi broadcast together */
    for (size_t d = 0; d < n_numeric; d++)
        for (size_t t = 0; t < COUNT(triples); t++)
            for (int g = 0; g < 2; g++) {
                tcase *c = add_case("clamp_tensor %s %s %s %s%s", dtn(k_numeric[d]),
                                    shape_str(&triples[t][0], s1, sizeof s1),
                                    shape_str(&triples[t][1], s2, sizeof s2),
                                    shape_str(&triples[t][2], s3, sizeof s3), g ? " specials" : "");
                c->n_in = 3;
                for (int k = 0; k < 3; k++)
                    c->in[k] = in_of(k_numeric[d], triples[t][k], g ? GEN_ANY : GEN_PLAIN);
                c->op = (td__op){.opcode = TD_OP_CLAMP_TENSOR};
            }
    const shape shapes[] = {SH0, SH(0), SH(6, 7), SH(100003)};
    for (size_t a = 0; a < n_all; a++)
        for (size_t b = 0; b < n_all; b++)
            for (size_t s = 0; s < COUNT(shapes); s++)
                for (int g = 0; g < 2; g++) {
                    tcase *c = add_case("cast %s->%s %s%s", dtn(k_all[a]), dtn(k_all[b]),
                                        shape_str(&shapes[s], s1, sizeof s1), g ? " edges" : "");
                    c->n_in = 1;
                    c->in[0] = in_of(k_all[a], shapes[s], g ? GEN_CASTSRC : GEN_ANY);
                    if (k_all[a] == TD_BOOL && g) c->in[0].gen = GEN_BOOL_RAW;
                    c->op = (td__op){.opcode = TD_OP_CAST, .dtype = k_all[b]};
                }
}

static void add_reduce(void)
{
    typedef struct rcase {
        shape sh;
        int64_t mask;
    } rcase;
    const rcase rs[] = {
        {SH0, 0},           {SH(0), 1},           {SH(5, 0), 2},        {SH(0, 5), 2},
        {SH(7), 1},         {SH(3, 4, 5), 1},     {SH(3, 4, 5), 2},     {SH(3, 4, 5), 4},
        {SH(3, 4, 5), 3},   {SH(3, 4, 5), 5},     {SH(3, 4, 5), 6},     {SH(3, 4, 5), 7},
        {SH(3, 4, 5), 0},   {SH(2, 3, 1, 4), 12}, {SH(2, 3, 1, 4), 4},  {SH(1000003), 1},
        {SH(7, 100003), 2}, {SH(100003, 7), 1},   {SH(64, 1024), 1},    {SH(64, 1024), 2},
        {SH(3, 300, 5, 7), 10}, {SH(33, 3, 65), 5}, {SH(2, 2, 2, 2, 2, 2, 2, 3), 0x55},
        /* batch norm's statistics: few outputs, reduced dims both outside and inside */
        {SH(32, 4, 28, 28), 13},
        /* the GPU's row path (gpu_reduce.cu, rows of 16 KiB and more, 64 KiB chunks): aligned
         * rows of several chunks, the last one partial; whole chunks only */
        {SH(5, 40000), 2}, {SH(3, 2, 16384), 6}};
    const td__op_row *rows[TD_OP_COUNT];
    size_t nops = ops_of(TD_OPCLASS_REDUCE, rows);
    char sb[96];
    for (size_t o = 0; o < nops; o++) {
        uint32_t opc = rows[o]->opcode;
        bool arg = (rows[o]->flags & TD_OPF_ONE_AXIS) != 0;
        bool ext = (rows[o]->flags & TD_OPF_NONEMPTY_AXIS) != 0;
        bool prod = rows[o]->accuracy == TD_ACC_PROD;
        for (size_t d = 0; d < n_all; d++) {
            uint32_t dt = k_all[d];
            if (!td__dtype_in(dt, rows[o]->in_dtype)) continue;
            for (size_t r = 0; r < COUNT(rs); r++) {
                int naxes = __builtin_popcountll((unsigned long long)rs[r].mask);
                if (arg && naxes != 1) continue;
                bool empty_axis = false;
                for (uint32_t i = 0; i < rs[r].sh.rank; i++)
                    if (((rs[r].mask >> i) & 1) && rs[r].sh.d[i] == 0) empty_axis = true;
                if (ext && empty_axis) continue;
                int64_t rcount = 1;
                for (uint32_t i = 0; i < rs[r].sh.rank; i++)
                    if ((rs[r].mask >> i) & 1) rcount *= rs[r].sh.d[i];
                /* long float products under- or overflow at association-dependent points */
                if (prod && td__dtype_is_float(dt) && rcount > 4096) continue;
                /* the float attribute: var/std's correction, norm's p */
                static const double corr[] = {0.0, 1.0}, ps[] = {2.0, 0.5, 0.0, -1.5};
                const double none[] = {0.0};
                const double *fs = none;
                size_t nf = 1;
                if (opc == TD_OP_VAR || opc == TD_OP_STD) fs = corr, nf = COUNT(corr);
                if (opc == TD_OP_NORM) fs = ps, nf = COUNT(ps);
                /* the rows of issue 13 (opcodes from 180) keep the run time in check: large
                 * shapes once (no keepdims, the first float attribute), the float
                 * attribute's other values on small shapes */
                int64_t nel = 1;
                for (uint32_t i = 0; i < rs[r].sh.rank; i++) nel *= rs[r].sh.d[i];
                const bool trim = opc >= 180 && nel > 4096;
                if (trim && nf > 1) nf = 1;
                for (size_t f = 0; f < nf; f++)
                for (int keep = 0; keep < 2; keep++)
                    for (int g = 0; g < 2; g++) {
                        if (g && !(ext || (td__dtype_is_float(dt) && !prod))) continue;
                        if (trim && (keep || (g && r % 2))) continue;
                        tcase *c = add_case("%s %s %s mask 0x%" PRIx64 "%s%s f %g", rows[o]->name,
                                            dtn(dt), shape_str(&rs[r].sh, sb, sizeof sb),
                                            (uint64_t)rs[r].mask, keep ? " keepdims" : "",
                                            g ? " specials" : "", fs[f]);
                        c->n_in = 1;
                        enum gen gen = prod ? GEN_NEAR1 : GEN_PLAIN;
                        if (g) gen = dt == TD_BOOL ? GEN_BOOL_RAW : GEN_ANY;
                        c->in[0] = in_of(dt, rs[r].sh, gen);
                        c->op = (td__op){.opcode = opc, .n_iattrs = 2, .iattrs = {rs[r].mask, keep},
                                         .fattrs = {fs[f], 0}};
                        if (td__dtype_is_float(dt)) tol_of(c, rows[o]);
                    }
            }
        }
    }
}

static void add_matmul(void)
{
    const shape pairs[][2] = {
        {SH(3, 4), SH(4, 5)},       {SH(1, 1), SH(1, 1)},         {SH(0, 4), SH(4, 5)},
        {SH(3, 0), SH(0, 5)},       {SH(3, 4), SH(4, 0)},         {SH(2, 3, 4), SH(4, 5)},
        {SH(3, 4), SH(2, 4, 5)},    {SH(2, 1, 3, 4), SH(5, 4, 6)}, {SH(128, 256), SH(256, 64)},
        {SH(7, 64, 33), SH(7, 33, 65)}, {SH(0, 3, 4), SH(4, 2)},  {SH(1, 300, 257), SH(257, 129)},
        /* K and N multiples of 8 but not of the tiles: matmul_coop.comp's 16-byte reads with
         * partial blocks and a partial last K step, B broadcast over the batch */
        {SH(2, 136, 264), SH(264, 200)}};
    const uint32_t *dts = k_numeric;
    char sa[96], sb[96];
    for (size_t d = 0; d < n_numeric; d++)
        for (size_t p = 0; p < COUNT(pairs); p++) {
            tcase *c = add_case("matmul %s %s %s", dtn(dts[d]), shape_str(&pairs[p][0], sa, sizeof sa),
                                shape_str(&pairs[p][1], sb, sizeof sb));
            c->n_in = 2;
            c->in[0] = in_of(dts[d], pairs[p][0], GEN_PLAIN);
            c->in[1] = in_of(dts[d], pairs[p][1], GEN_PLAIN);
            if (dts[d] == TD_I32 || dts[d] == TD_I64) c->in[0].gen = c->in[1].gen = GEN_ANY;
            c->op = (td__op){.opcode = TD_OP_MATMUL};
            if (td__dtype_is_float(dts[d])) c->tol = TOL_MATMUL;
        }
    /* f32 with TF32 allowed: the TF32 bound on a cuda target, exact f32's elsewhere */
    for (size_t p = 0; p < COUNT(pairs); p++) {
        tcase *c = add_case("matmul f32 tf32 %s %s", shape_str(&pairs[p][0], sa, sizeof sa),
                            shape_str(&pairs[p][1], sb, sizeof sb));
        c->n_in = 2;
        c->in[0] = in_of(TD_F32, pairs[p][0], GEN_PLAIN);
        c->in[1] = in_of(TD_F32, pairs[p][1], GEN_PLAIN);
        c->op = (td__op){.opcode = TD_OP_MATMUL, .n_iattrs = 1,
                         .iattrs = {TD_MATMUL_PRECISION_TF32}};
        c->tol = TOL_MATMUL;
    }
    /* f16 with K = 4096 (the benchmarks' size): a long sum, held to the same bound, for a
     * target whose f16 GEMM accumulates in its own order (tensor cores) */
    tcase *c = add_case("matmul f16 long k [64,4096] [4096,96]");
    c->n_in = 2;
    c->in[0] = in_of(TD_F16, SH(64, 4096), GEN_PLAIN);
    c->in[1] = in_of(TD_F16, SH(4096, 96), GEN_PLAIN);
    c->op = (td__op){.opcode = TD_OP_MATMUL};
    c->tol = TOL_MATMUL;
    c = add_case("matmul f32 tf32 probe [256,512] [512,256]");
    c->n_in = 2;
    c->in[0] = in_of(TD_F32, SH(256, 512), GEN_PLAIN);
    c->in[1] = in_of(TD_F32, SH(512, 256), GEN_PLAIN);
    c->op = (td__op){.opcode = TD_OP_MATMUL, .n_iattrs = 1, .iattrs = {TD_MATMUL_PRECISION_TF32}};
    c->tol = TOL_MATMUL;
    c->tf32_probe = true;
}

static void add_movement(void)
{
    char sb[96];
    typedef struct mv {
        shape sh;
        uint32_t n;
        int64_t at[TD_OP_MAX_IATTRS];
    } mv;
    const mv perms[] = {{SH(2, 3, 4), 3, {2, 0, 1}}, {SH(64, 48), 2, {1, 0}},
                        {SH(3, 40, 50), 3, {0, 2, 1}}, {SH0, 0, {0}}, {SH(0, 3), 2, {1, 0}},
                        {SH(513, 1025), 2, {1, 0}}, {SH(2, 3, 4, 5, 6), 5, {4, 2, 0, 3, 1}},
                        {SH(1, 7, 1, 9), 4, {3, 2, 1, 0}}};
    const mv slices[] = {{SH(5, 6), 4, {1, 2, 4, 6}}, {SH(5, 6), 4, {2, 0, 2, 6}},
                         {SH(4, 5, 6), 6, {0, 1, 2, 4, 4, 5}}, {SH(100003), 2, {7, 100000}},
                         {SH0, 0, {0}}};
    const mv expands[] = {{SH(3, 1), 3, {2, 3, 4}}, {SH0, 1, {5}}, {SH(1), 2, {0, 4}},
                          {SH(4, 1, 6), 4, {2, 4, 5, 6}}, {SH(1, 1000), 2, {300, 1000}}};
    for (size_t d = 0; d < n_all; d++) {
        uint32_t dt = k_all[d];
        for (size_t i = 0; i < COUNT(perms); i++) {
            tcase *c = add_case("permute %s %s #%zu", dtn(dt), shape_str(&perms[i].sh, sb, sizeof sb), i);
            c->n_in = 1;
            c->in[0] = in_of(dt, perms[i].sh, GEN_ANY);
            c->op = (td__op){.opcode = TD_OP_PERMUTE, .n_iattrs = perms[i].n};
            memcpy(c->op.iattrs, perms[i].at, sizeof perms[i].at);
        }
        for (size_t i = 0; i < COUNT(slices); i++) {
            tcase *c = add_case("slice %s %s #%zu", dtn(dt), shape_str(&slices[i].sh, sb, sizeof sb), i);
            c->n_in = 1;
            c->in[0] = in_of(dt, slices[i].sh, GEN_ANY);
            c->op = (td__op){.opcode = TD_OP_SLICE, .n_iattrs = slices[i].n};
            memcpy(c->op.iattrs, slices[i].at, sizeof slices[i].at);
        }
        for (size_t i = 0; i < COUNT(expands); i++) {
            tcase *c = add_case("expand %s %s #%zu", dtn(dt), shape_str(&expands[i].sh, sb, sizeof sb), i);
            c->n_in = 1;
            c->in[0] = in_of(dt, expands[i].sh, GEN_ANY);
            c->op = (td__op){.opcode = TD_OP_EXPAND, .n_iattrs = expands[i].n};
            memcpy(c->op.iattrs, expands[i].at, sizeof expands[i].at);
        }
        const shape copies[] = {SH0, SH(0), SH(3, 7), SH(100003)};
        for (size_t i = 0; i < COUNT(copies); i++) {
            tcase *c = add_case("copy %s %s", dtn(dt), shape_str(&copies[i], sb, sizeof sb));
            c->n_in = 1;
            c->in[0] = in_of(dt, copies[i], GEN_ANY);
            c->op = (td__op){.opcode = TD_OP_COPY};
        }
        /* concat: axis 0 and 1, three inputs, one of them empty along the axis */
        const shape cat[][3] = {{SH(2, 3), SH(0, 3), SH(4, 3)}, {SH(2, 3), SH(2, 0), SH(2, 5)},
                                {SH(3, 1, 4), SH(3, 7, 4), SH(3, 2, 4)}};
        const int64_t axes[] = {0, 1, 1};
        for (size_t i = 0; i < COUNT(cat); i++) {
            tcase *c = add_case("concat %s axis %" PRId64 " #%zu", dtn(dt), axes[i], i);
            c->n_in = 3;
            for (int k = 0; k < 3; k++) c->in[k] = in_of(dt, cat[i][k], GEN_ANY);
            c->op = (td__op){.opcode = TD_OP_CONCAT, .n_iattrs = 1, .iattrs = {axes[i]}};
        }
        tcase *c = add_case("concat %s single input", dtn(dt));
        c->n_in = 1;
        c->in[0] = in_of(dt, SH(5, 2), GEN_ANY);
        c->op = (td__op){.opcode = TD_OP_CONCAT, .n_iattrs = 1, .iattrs = {1}};
        /* gather / index_select with i32 and i64 indices */
        for (int i64 = 0; i64 < 2; i64++) {
            uint32_t it = i64 ? TD_I64 : TD_I32;
            c = add_case("gather %s idx %s axis 1", dtn(dt), dtn(it));
            c->n_in = 2;
            c->in[0] = in_of(dt, SH(4, 5), GEN_ANY);
            c->in[1] = (input){.dtype = it, .sh = SH(4, 2), .gen = GEN_INDEX, .lim = 5, .bad = -1};
            c->op = (td__op){.opcode = TD_OP_GATHER, .n_iattrs = 1, .iattrs = {1}};
            c = add_case("gather %s idx %s axis 0 smaller index", dtn(dt), dtn(it));
            c->n_in = 2;
            c->in[0] = in_of(dt, SH(4, 5, 3), GEN_ANY);
            c->in[1] = (input){.dtype = it, .sh = SH(6, 2, 3), .gen = GEN_INDEX, .lim = 4, .bad = -1};
            c->op = (td__op){.opcode = TD_OP_GATHER, .n_iattrs = 1, .iattrs = {0}};
            c = add_case("gather %s idx %s large", dtn(dt), dtn(it));
            c->n_in = 2;
            c->in[0] = in_of(dt, SH(1000, 10), GEN_ANY);
            c->in[1] = (input){.dtype = it, .sh = SH(1000, 1), .gen = GEN_INDEX, .lim = 10, .bad = -1};
            c->op = (td__op){.opcode = TD_OP_GATHER, .n_iattrs = 1, .iattrs = {1}};
            c = add_case("gather %s idx %s out of range", dtn(dt), dtn(it));
            c->n_in = 2;
            c->in[0] = in_of(dt, SH(4, 5), GEN_ANY);
            c->in[1] = (input){.dtype = it, .sh = SH(4, 2), .gen = GEN_INDEX, .lim = 5, .bad = 5};
            c->op = (td__op){.opcode = TD_OP_GATHER, .n_iattrs = 1, .iattrs = {1}};
            c->expect = TD_ERANGE;
            c = add_case("gather %s idx %s empty", dtn(dt), dtn(it));
            c->n_in = 2;
            c->in[0] = in_of(dt, SH(0, 5), GEN_ANY);
            c->in[1] = (input){.dtype = it, .sh = SH(0, 2), .gen = GEN_INDEX, .lim = 5, .bad = -1};
            c->op = (td__op){.opcode = TD_OP_GATHER, .n_iattrs = 1, .iattrs = {1}};
            c = add_case("index_select %s idx %s axis 0", dtn(dt), dtn(it));
            c->n_in = 2;
            c->in[0] = in_of(dt, SH(10, 4), GEN_ANY);
            c->in[1] = (input){.dtype = it, .sh = SH(7), .gen = GEN_INDEX, .lim = 10, .bad = -1};
            c->op = (td__op){.opcode = TD_OP_INDEX_SELECT, .n_iattrs = 1, .iattrs = {0}};
            c = add_case("index_select %s idx %s axis 1 rank-2 index", dtn(dt), dtn(it));
            c->n_in = 2;
            c->in[0] = in_of(dt, SH(3, 6, 5), GEN_ANY);
            c->in[1] = (input){.dtype = it, .sh = SH(2, 4), .gen = GEN_INDEX, .lim = 6, .bad = -1};
            c->op = (td__op){.opcode = TD_OP_INDEX_SELECT, .n_iattrs = 1, .iattrs = {1}};
            c = add_case("index_select %s idx %s rank-0 index", dtn(dt), dtn(it));
            c->n_in = 2;
            c->in[0] = in_of(dt, SH(3, 6), GEN_ANY);
            c->in[1] = (input){.dtype = it, .sh = SH0, .gen = GEN_INDEX, .lim = 6, .bad = -1};
            c->op = (td__op){.opcode = TD_OP_INDEX_SELECT, .n_iattrs = 1, .iattrs = {1}};
            c = add_case("index_select %s idx %s embedding rows", dtn(dt), dtn(it));
            c->n_in = 2;
            c->in[0] = in_of(dt, SH(1000, 64), GEN_ANY);
            c->in[1] = (input){.dtype = it, .sh = SH(33, 5), .gen = GEN_INDEX, .lim = 1000, .bad = -1};
            c->op = (td__op){.opcode = TD_OP_INDEX_SELECT, .n_iattrs = 1, .iattrs = {0}};
            c = add_case("index_select %s idx %s out of range", dtn(dt), dtn(it));
            c->n_in = 2;
            c->in[0] = in_of(dt, SH(10, 4), GEN_ANY);
            c->in[1] = (input){.dtype = it, .sh = SH(9), .gen = GEN_INDEX, .lim = 10, .bad = 6};
            c->op = (td__op){.opcode = TD_OP_INDEX_SELECT, .n_iattrs = 1, .iattrs = {0}};
            c->expect = TD_ERANGE;
            c = add_case("index_select %s idx %s empty x, bad index", dtn(dt), dtn(it));
            c->n_in = 2;
            c->in[0] = in_of(dt, SH(0, 4), GEN_ANY);
            c->in[1] = (input){.dtype = it, .sh = SH(3), .gen = GEN_INDEX, .lim = 4, .bad = 1};
            c->op = (td__op){.opcode = TD_OP_INDEX_SELECT, .n_iattrs = 1, .iattrs = {1}};
            c->expect = TD_ERANGE;
        }
    }
}

/* The movement ops of issue 13 item 3 (SLICE_STEP .. GATHER_ND): exact in every dtype they
 * take (the adds of SCATTER_ADD / INDEX_ADD too: both backends add in the same ascending
 * order, each add rounded to the dtype; a NaN matches any NaN). Small shapes for the edge
 * rules, one large case each for the GPU's grid-stride loops and the CPU's parallel chunks;
 * out-of-range indices must fail with the same message on both. */
static tcase *mv_case1(const char *what, uint32_t dt, shape sh, uint32_t opcode, uint32_t n,
                       const int64_t *at)
{
    char sb[96];
    tcase *c = add_case("%s %s %s", what, dtn(dt), shape_str(&sh, sb, sizeof sb));
    c->n_in = 1;
    c->in[0] = in_of(dt, sh, GEN_ANY);
    c->op = (td__op){.opcode = opcode, .n_iattrs = n};
    for (uint32_t i = 0; i < n; i++) c->op.iattrs[i] = at[i];
    return c;
}

static input index_in(uint32_t it, shape sh, int64_t lim, int64_t bad)
{
    return (input){.dtype = it, .sh = sh, .gen = GEN_INDEX, .lim = lim, .bad = bad};
}

static void add_movement_steps(void)
{
    for (size_t d = 0; d < n_all; d++) {
        const uint32_t dt = k_all[d];
        const uint32_t it = d % 2 ? TD_I32 : TD_I64;
        /* slice_step: starts, stops, steps (normalised) */
        mv_case1("slice_step", dt, SH(5, 7), TD_OP_SLICE_STEP, 6, (int64_t[]){0, 1, 5, 7, 2, 3});
        mv_case1("slice_step reversed", dt, SH(4, 6), TD_OP_SLICE_STEP, 6,
                 (int64_t[]){3, 5, -1, 0, -1, -2});
        mv_case1("slice_step empty", dt, SH(0, 3), TD_OP_SLICE_STEP, 6,
                 (int64_t[]){-1, 2, -1, -1, -1, -1});
        mv_case1("slice_step rank 0", dt, SH0, TD_OP_SLICE_STEP, 0, NULL);
        mv_case1("slice_step large", dt, SH(300, 1000), TD_OP_SLICE_STEP, 6,
                 (int64_t[]){299, 1, -1, 1000, -1, 3});
        mv_case1("flip", dt, SH(2, 3, 4), TD_OP_FLIP, 1, (int64_t[]){5});
        mv_case1("flip none", dt, SH(3, 2), TD_OP_FLIP, 1, (int64_t[]){0});
        mv_case1("flip large", dt, SH(513, 257), TD_OP_FLIP, 1, (int64_t[]){3});
        mv_case1("roll", dt, SH(3, 5), TD_OP_ROLL, 2, (int64_t[]){-7, 2});
        mv_case1("roll empty", dt, SH(0, 5), TD_OP_ROLL, 2, (int64_t[]){1, 2});
        mv_case1("roll large", dt, SH(100003), TD_OP_ROLL, 1, (int64_t[]){-4321});
        for (int64_t mode = 0; mode < 4; mode++) {
            /* mode, befores, afters (reflect < dim, circular <= dim) */
            tcase *c = mv_case1("pad", dt, SH(3, 4), TD_OP_PAD, 5, (int64_t[]){mode, 2, 3, 1, 3});
            c->op.fattrs[0] = -2.5;
            mv_case1("pad rank 3", dt, SH(2, 3, 5), TD_OP_PAD, 7,
                     (int64_t[]){mode, 0, 1, 2, 1, 0, 4});
        }
        tcase *c = mv_case1("pad constant empty dim", dt, SH(0, 3), TD_OP_PAD, 5,
                            (int64_t[]){0, 2, 0, 1, 1});
        c->op.fattrs[0] = 7.0;
        mv_case1("pad reflect large", dt, SH(200, 300), TD_OP_PAD, 5,
                 (int64_t[]){1, 5, 100, 7, 299});
        mv_case1("repeat", dt, SH(2, 3), TD_OP_REPEAT, 2, (int64_t[]){3, 2});
        mv_case1("repeat zero", dt, SH(2, 3), TD_OP_REPEAT, 2, (int64_t[]){0, 2});
        mv_case1("repeat large", dt, SH(7, 100), TD_OP_REPEAT, 2, (int64_t[]){50, 3});
        mv_case1("tril", dt, SH(2, 4, 5), TD_OP_TRIL, 1, (int64_t[]){-1});
        mv_case1("triu", dt, SH(4, 5), TD_OP_TRIU, 1, (int64_t[]){2});
        mv_case1("triu far diagonal", dt, SH(3, 3), TD_OP_TRIU, 1, (int64_t[]){INT64_MIN});
        mv_case1("tril large", dt, SH(600, 600), TD_OP_TRIL, 1, (int64_t[]){0});
        /* one_hot: the output dtype is this loop's */
        c = add_case("one_hot %s idx %s", dtn(dt), dtn(it));
        c->n_in = 1;
        c->in[0] = index_in(it, SH(4, 3), 6, -1);
        c->op = (td__op){.opcode = TD_OP_ONE_HOT, .dtype = dt, .n_iattrs = 1, .iattrs = {6}};
        c = add_case("one_hot %s idx %s out of range", dtn(dt), dtn(it));
        c->n_in = 1;
        c->in[0] = index_in(it, SH(7), 5, 4);
        c->op = (td__op){.opcode = TD_OP_ONE_HOT, .dtype = dt, .n_iattrs = 1, .iattrs = {5}};
        c->expect = TD_ERANGE;
        c = add_case("one_hot %s idx %s large", dtn(dt), dtn(it));
        c->n_in = 1;
        c->in[0] = index_in(it, SH(5000), 100, -1);
        c->op = (td__op){.opcode = TD_OP_ONE_HOT, .dtype = dt, .n_iattrs = 1, .iattrs = {100}};
        /* masked_fill: raw bool bytes (any nonzero is true), broadcast masks */
        const shape mx[] = {SH(3, 4), SH(2, 3, 4), SH(1000, 300)};
        const shape mm[] = {SH(3, 4), SH(3, 1), SH(300)};
        for (size_t i = 0; i < COUNT(mx); i++) {
            c = add_case("masked_fill %s #%zu", dtn(dt), i);
            c->n_in = 2;
            c->in[0] = in_of(dt, mx[i], GEN_ANY);
            c->in[1] = in_of(TD_BOOL, mm[i], GEN_BOOL_RAW);
            c->op = (td__op){.opcode = TD_OP_MASKED_FILL, .fattrs = {-1.5}};
        }
        /* gather_nd */
        c = add_case("gather_nd %s idx %s", dtn(dt), dtn(it));
        c->n_in = 2;
        c->in[0] = in_of(dt, SH(4, 4, 3), GEN_ANY);
        c->in[1] = index_in(it, SH(5, 2), 4, -1);
        c->op = (td__op){.opcode = TD_OP_GATHER_ND};
        c = add_case("gather_nd %s idx %s out of range", dtn(dt), dtn(it));
        c->n_in = 2;
        c->in[0] = in_of(dt, SH(4, 4, 3), GEN_ANY);
        c->in[1] = index_in(it, SH(5, 2), 4, 7);
        c->op = (td__op){.opcode = TD_OP_GATHER_ND};
        c->expect = TD_ERANGE;
        c = add_case("gather_nd %s idx %s large", dtn(dt), dtn(it));
        c->n_in = 2;
        c->in[0] = in_of(dt, SH(300, 300), GEN_ANY);
        c->in[1] = index_in(it, SH(20000, 2), 300, -1);
        c->op = (td__op){.opcode = TD_OP_GATHER_ND};
        /* scatter (any dtype), scatter_add / index_add (numeric): many duplicates */
        for (int o = 0; o < 3; o++) {
            const uint32_t opc = o == 0 ? TD_OP_SCATTER : o == 1 ? TD_OP_SCATTER_ADD : TD_OP_INDEX_ADD;
            const char *on = o == 0 ? "scatter" : o == 1 ? "scatter_add" : "index_add";
            if (o > 0 && dt == TD_BOOL) continue;
            const bool ia = opc == TD_OP_INDEX_ADD;
            c = add_case("%s %s idx %s axis 0", on, dtn(dt), dtn(it));
            c->n_in = 3;
            c->in[0] = in_of(dt, SH(4, 3), GEN_ANY);
            c->in[1] = ia ? index_in(it, SH(9), 4, -1) : index_in(it, SH(9, 3), 4, -1);
            c->in[2] = in_of(dt, SH(9, 3), GEN_ANY);
            c->op = (td__op){.opcode = opc, .n_iattrs = 1, .iattrs = {0}};
            c = add_case("%s %s idx %s axis 1", on, dtn(dt), dtn(it));
            c->n_in = 3;
            c->in[0] = in_of(dt, SH(2, 5, 3), GEN_ANY);
            c->in[1] = ia ? index_in(it, SH(7), 5, -1) : index_in(it, SH(2, 6, 2), 5, -1);
            c->in[2] = in_of(dt, ia ? SH(2, 7, 3) : SH(2, 8, 3), GEN_ANY);
            c->op = (td__op){.opcode = opc, .n_iattrs = 1, .iattrs = {1}};
            c = add_case("%s %s idx %s out of range", on, dtn(dt), dtn(it));
            c->n_in = 3;
            c->in[0] = in_of(dt, SH(4, 3), GEN_ANY);
            c->in[1] = ia ? index_in(it, SH(5), 4, 2) : index_in(it, SH(5, 3), 4, 8);
            c->in[2] = in_of(dt, SH(5, 3), GEN_ANY);
            c->op = (td__op){.opcode = opc, .n_iattrs = 1, .iattrs = {0}};
            c->expect = TD_ERANGE;
            c = add_case("%s %s idx %s large", on, dtn(dt), dtn(it));
            c->n_in = 3;
            c->in[0] = in_of(dt, SH(64, 300), GEN_ANY);
            c->in[1] = ia ? index_in(it, SH(2000), 64, -1) : index_in(it, SH(2000, 300), 64, -1);
            c->in[2] = in_of(dt, SH(2000, 300), GEN_ANY);
            c->op = (td__op){.opcode = opc, .n_iattrs = 1, .iattrs = {0}};
        }
    }
}

/* Rows short and long, along the last axis and others, covering the GPU's paths: several
 * rows per block, a row per block kept on chip, streamed rows, rows split into chunks,
 * strided rows (inner > 1) on chip, streamed and chunked. */
/* CUMSUM CUMPROD (TD_OPCLASS_SCAN): every numeric dtype; the GPU's one-thread-per-line and
 * tiled paths (rows longer than 256; tiles of 8192 elements, 4096 of 8 bytes: several tiles,
 * one long row of 123 or 245 tiles: two levels of its tree of tile totals; unaligned rows),
 * and for i64 cumsum alone (exact, so a node counted twice or missed shows) a row of 1050
 * tiles: three levels. */
static void add_scan(void)
{
    typedef struct scase {
        shape sh;
        int64_t axis;
    } scase;
    const scase ss[] = {{SH0, 0},           {SH(0), 0},           {SH(7), 0},
                        {SH(3, 4, 5), 0},   {SH(3, 4, 5), 1},     {SH(3, 4, 5), 2},
                        {SH(2, 0, 3), 1},   {SH(2, 0, 3), 2},     {SH(64, 257), 1},
                        {SH(3, 5000), 1},   {SH(4100), 0},        {SH(100003, 7), 0},
                        {SH(7, 100003), 1}, {SH(1000003), 0},     {SH(300, 2, 40), 0},
                        /* two aligned lines of 18 GPU tiles (35 of 8-byte elements): each
                         * line's own tree of tile totals, two levels, a partial last tile */
                        {SH(2, 140000), 1},
                        /* i64 only: 1050 tiles of 4096, three levels */
                        {SH(4300000), 0}};
    const td__op_row *rows[TD_OP_COUNT];
    size_t nops = ops_of(TD_OPCLASS_SCAN, rows);
    char sb[96];
    for (size_t o = 0; o < nops; o++) {
        const bool prod = rows[o]->accuracy == TD_ACC_CUMPROD;
        for (size_t d = 0; d < n_all; d++) {
            uint32_t dt = k_all[d];
            if (!td__dtype_in(dt, rows[o]->in_dtype)) continue;
            for (size_t r = 0; r < COUNT(ss); r++) {
                const int64_t len = ss[r].sh.rank ? ss[r].sh.d[ss[r].axis] : 1;
                if (len == 4300000 && (dt != TD_I64 || prod)) continue;
                /* long float products under- or overflow at association-dependent points */
                if (prod && td__dtype_is_float(dt) && len > 4096) continue;
                for (int g = 0; g < 2; g++) {
                    /* as for PROD: a float product's inf/0/NaN specials under- and overflow
                     * at association-dependent points (the CPU suite checks them in order) */
                    if (g && prod && td__dtype_is_float(dt)) continue;
                    if (g && len == 4300000) continue;
                    tcase *c = add_case("%s %s %s axis %" PRId64 "%s", rows[o]->name, dtn(dt),
                                        shape_str(&ss[r].sh, sb, sizeof sb), ss[r].axis,
                                        g ? " specials" : "");
                    c->n_in = 1;
                    c->in[0] = in_of(dt, ss[r].sh, g ? GEN_ANY : prod ? GEN_NEAR1 : GEN_PLAIN);
                    c->op = (td__op){.opcode = rows[o]->opcode, .n_iattrs = 1, .iattrs = {ss[r].axis}};
                    if (td__dtype_is_float(dt)) tol_of(c, rows[o]);
                }
            }
        }
    }
}

/* SORT ARGSORT TOPK_VALUES TOPK_INDICES (TD_OPCLASS_SORT): exact in every dtype, both
 * directions; ties from small integers and from the cast-edge values; lines that fit one
 * GPU tile (2048), just above it, several merge passes, and strided (non-innermost) axes. */
static void add_sort(void)
{
    typedef struct scase {
        shape sh;
        int64_t axis;
    } scase;
    const scase ss[] = {{SH0, 0},          {SH(0), 0},         {SH(1), 0},
                        {SH(7), 0},        {SH(3, 4, 5), 0},   {SH(3, 4, 5), 1},
                        {SH(3, 4, 5), 2},  {SH(2, 0, 3), 1},   {SH(2, 0, 3), 2},
                        {SH(100, 2048), 1}, {SH(5, 2049), 1},  {SH(3, 10000), 1},
                        {SH(100003), 0},   {SH(2000, 3), 0},   {SH(64, 33), 0}};
    const td__op_row *rows[TD_OP_COUNT];
    size_t nops = ops_of(TD_OPCLASS_SORT, rows);
    char sb[96];
    for (size_t o = 0; o < nops; o++) {
        const uint32_t opc = rows[o]->opcode;
        const bool topk = opc == TD_OP_TOPK_VALUES || opc == TD_OP_TOPK_INDICES;
        for (size_t d = 0; d < n_all; d++) {
            uint32_t dt = k_all[d];
            for (size_t r = 0; r < COUNT(ss); r++) {
                const int64_t len = ss[r].sh.rank ? ss[r].sh.d[ss[r].axis] : 1;
                int64_t nel = 1;
                for (uint32_t i = 0; i < ss[r].sh.rank; i++) nel *= ss[r].sh.d[i];
                /* large lines (the GPU's merge passes) in a few dtypes of each kind: the
                 * kernels differ by dtype only in the key (engine/sortkey.h) */
                const bool big = nel > 4096;
                if (big && dt != TD_F32 && dt != TD_BF16 && dt != TD_I64 && dt != TD_U8) continue;
                const int64_t ks[] = {0, 1, len < 5 ? len : 5, len};
                const size_t nk = topk ? COUNT(ks) : 1;
                for (size_t ki = 0; ki < nk; ki++)
                    for (int dir = 0; dir < 2; dir++)
                        for (int g = 0; g < 3; g++) {
                            if (big && topk && ki != 2) continue;
                            if (big && g != (dir ? 1 : 2)) continue;
                            if (topk && ss[r].sh.rank == 0 && ks[ki] != 1) continue;
                            if (topk && ki > 0 && ks[ki] == ks[ki - 1]) continue;
                            /* k = 0 and k = n (the whole sort) on one shape */
                            if (topk && (ki == 0 || ki == 3) && r != 3) continue;
                            if (topk && ks[ki] > len) continue;
                            if (g == 2 && dt == TD_BOOL) continue;
                            tcase *c = add_case("%s %s %s axis %" PRId64 " k %" PRId64 "%s%s",
                                                rows[o]->name, dtn(dt),
                                                shape_str(&ss[r].sh, sb, sizeof sb), ss[r].axis,
                                                topk ? ks[ki] : len, dir ? " descending" : "",
                                                g == 1 ? " specials" : g == 2 ? " ties" : "");
                            c->n_in = 1;
                            enum gen gen = g == 1 ? (dt == TD_BOOL ? GEN_BOOL_RAW : GEN_ANY)
                                           : g == 2 ? (td__dtype_is_float(dt) ? GEN_CASTSRC : GEN_NEAR1)
                                                    : GEN_PLAIN;
                            c->in[0] = in_of(dt, ss[r].sh, gen);
                            c->op = (td__op){.opcode = opc, .n_iattrs = topk ? 3u : 2u,
                                             .iattrs = {ss[r].axis, topk ? ks[ki] : dir, dir}};
                        }
            }
        }
    }
}

static void add_softmax(void)
{
    typedef struct scase {
        shape sh;
        int64_t axis;
    } scase;
    const scase cs[] = {
        {SH(7), 0},          {SH(1), 0},            {SH(5, 1), 1},        {SH(1, 5), 0},
        {SH(3, 4, 5), 0},    {SH(3, 4, 5), 1},      {SH(3, 4, 5), 2},     {SH(2, 3, 1, 4), 2},
        {SH(0, 5), 1},       {SH(64, 10), 1},       {SH(1000, 33), 1},    {SH(33, 1000), 0},
        {SH(128, 4096), 1},  {SH(4, 16384), 1},     {SH(3, 16385), 1},    {SH(2, 300000), 1},
        {SH(1000003), 0},    {SH(5, 300, 7), 1},    {SH(3, 1000, 5), 1},  {SH(2, 100000, 3), 1},
        {SH(7, 100003), 0},  {SH(2, 3, 4, 5, 6), 3}};
    const td__op_row *rows[TD_OP_COUNT];
    size_t nops = ops_of(TD_OPCLASS_SOFTMAX, rows);
    char sb[96];
    for (size_t o = 0; o < nops; o++) {
        uint32_t dts[TD_DTYPE_COUNT];
        size_t nd = dtypes_of(rows[o]->in_dtype, dts);
        for (size_t d = 0; d < nd; d++)
            for (size_t i = 0; i < COUNT(cs); i++)
                for (int g = 0; g < 2; g++) {
                    /* specials in long rows only make every row NaN */
                    if (g && cs[i].sh.d[cs[i].axis] > 1000) continue;
                    tcase *c = add_case("%s %s %s axis %" PRId64 "%s", rows[o]->name,
                                        dtn(dts[d]), shape_str(&cs[i].sh, sb, sizeof sb),
                                        cs[i].axis, g ? " specials" : "");
                    c->n_in = 1;
                    c->in[0] = in_of(dts[d], cs[i].sh, g ? GEN_ANY : GEN_PLAIN);
                    c->op = (td__op){.opcode = rows[o]->opcode, .n_iattrs = 1,
                                     .iattrs = {cs[i].axis}};
                    tol_of(c, rows[o]);
                }
    }
}

/* SCALED_DOT_PRODUCT_ATTENTION: a small case in every float dtype; then in f32 and f64 the
 * shapes that cross the CPU kernel's blocks (64 queries, 256 keys), causal with L < S and
 * L > S, bool and float masks broadcast over rows and batch dims, batch dims of q, k and v
 * broadcast, a case with NaN and inf in q (their rows NaN on both sides); then in f16,
 * bf16 and f32 the CUDA kernels' cases (head dim 64 and 128, no mask): L and S of 1, 63,
 * 64, 65, 200, 1000 across their blocks (64 or 128 queries, 32 or 64 keys), causal with
 * L < S and L > S, a scale the dtype rounds, a negative scale, k and v broadcast over q's
 * batch dims; and next to them the cases they leave to the lowering (a mask, Ev != E, head
 * dim 96). */
static void add_attention(void)
{
    typedef struct acase {
        shape q, k, v, m;
        int mask; /* 0 none, 1 bool, 2 float */
        int causal;
        double scale;
        int halves; /* 0: f32 and f64; 1: every float dtype; 2: f16, bf16 and f32 */
        bool specials;
    } acase;
    const acase cs[] = {
        {SH(2, 3, 8), SH(2, 5, 8), SH(2, 5, 4), SH0, 0, 0, 0.35, true, false},
        {SH(2, 4, 6), SH(2, 4, 6), SH(2, 4, 3), SH(4, 4), 1, 1, 0.4, true, false},
        {SH(2, 70, 16), SH(2, 300, 16), SH(2, 300, 8), SH0, 0, 1, 0.25, false, false},
        {SH(130, 16), SH(40, 16), SH(40, 5), SH(130, 40), 1, 1, 0.25, false, false},
        {SH(2, 1, 20, 16), SH(3, 300, 16), SH(3, 300, 8), SH(1, 300), 2, 0, 0.125, false,
         false},
        {SH(1, 2, 65, 8), SH(1, 2, 257, 8), SH(257, 4), SH(2, 1, 65, 257), 2, 1, 0.3, false,
         false},
        {SH(3, 9, 8), SH(3, 11, 8), SH(3, 11, 2), SH0, 0, 0, 0.3, false, true},
        {SH(2, 1, 64), SH(2, 1, 64), SH(2, 1, 64), SH0, 0, 0, 0.125, 2, false},
        {SH(2, 1, 128), SH(2, 1, 128), SH(2, 1, 128), SH0, 0, 1, 0.125, 2, false},
        {SH(2, 1, 64), SH(2, 65, 64), SH(2, 65, 64), SH0, 0, 1, 0.125, 2, false},
        {SH(2, 2, 63, 64), SH(2, 2, 64, 64), SH(2, 2, 64, 64), SH0, 0, 0, 0.125, 2, false},
        {SH(2, 2, 64, 64), SH(2, 2, 63, 64), SH(2, 2, 63, 64), SH0, 0, 1, 0.125, 2, false},
        {SH(2, 65, 64), SH(2, 65, 64), SH(2, 65, 64), SH0, 0, 1, 0.3, 2, false},
        {SH(2, 65, 64), SH(2, 130, 64), SH(2, 130, 64), SH0, 0, 1, -0.2, 2, false},
        {SH(2, 63, 128), SH(2, 65, 128), SH(2, 65, 128), SH0, 0, 0, 0.088, 2, false},
        {SH(2, 65, 128), SH(2, 63, 128), SH(2, 63, 128), SH0, 0, 1, 0.3, 2, false},
        {SH(1, 200, 64), SH(1, 1000, 64), SH(1, 1000, 64), SH0, 0, 1, 0.125, 2, false},
        {SH(1, 1000, 64), SH(1, 200, 64), SH(1, 200, 64), SH0, 0, 1, 0.125, 2, false},
        {SH(1, 1000, 64), SH(1, 1000, 64), SH(1, 1000, 64), SH0, 0, 0, 0.125, 2, false},
        {SH(1, 200, 128), SH(1, 1000, 128), SH(1, 1000, 128), SH0, 0, 0, 0.088, 2, false},
        {SH(1, 1000, 128), SH(1, 200, 128), SH(1, 200, 128), SH0, 0, 1, 0.088, 2, false},
        {SH(2, 3, 129, 64), SH(3, 200, 64), SH(3, 200, 64), SH0, 0, 0, 0.125, 2, false},
        {SH(2, 3, 65, 128), SH(1, 3, 70, 128), SH(2, 1, 70, 128), SH0, 0, 1, 0.088, 2, false},
        {SH(2, 70, 64), SH(2, 130, 64), SH(2, 130, 64), SH(70, 130), 1, 1, 0.125, 2, false},
        {SH(2, 65, 128), SH(2, 66, 128), SH(2, 66, 128), SH(2, 1, 66), 2, 0, 0.088, 2, false},
        {SH(2, 65, 64), SH(2, 66, 64), SH(2, 66, 32), SH0, 0, 1, 0.125, 2, false},
        {SH(2, 65, 96), SH(2, 66, 96), SH(2, 66, 96), SH0, 0, 0, 0.1, 2, false},
    };
    const td__op_row *r = td__op_row_of(TD_OP_SCALED_DOT_PRODUCT_ATTENTION);
    char sq[64], sk[64], sv[64], sm[64];
    for (size_t i = 0; i < COUNT(cs); i++)
        for (size_t d = 0; d < n_float; d++) {
            const uint32_t dt = k_float[d];
            const bool wide = dt == TD_F32 || dt == TD_F64;
            if ((cs[i].halves == 0 && !wide) || (cs[i].halves == 2 && dt == TD_F64)) continue;
            tcase *c = add_case("scaled_dot_product_attention %s q %s k %s v %s mask %s%s%s",
                                dtn(dt), shape_str(&cs[i].q, sq, sizeof sq),
                                shape_str(&cs[i].k, sk, sizeof sk),
                                shape_str(&cs[i].v, sv, sizeof sv),
                                cs[i].mask ? shape_str(&cs[i].m, sm, sizeof sm) : "none",
                                cs[i].causal ? " causal" : "", cs[i].specials ? " specials" : "");
            c->n_in = cs[i].mask ? 4 : 3;
            c->in[0] = in_of(dt, cs[i].q, cs[i].specials ? GEN_ANY : GEN_PLAIN);
            c->in[1] = in_of(dt, cs[i].k, GEN_PLAIN);
            c->in[2] = in_of(dt, cs[i].v, GEN_PLAIN);
            if (cs[i].mask) c->in[3] = in_of(cs[i].mask == 1 ? TD_BOOL : dt, cs[i].m, GEN_PLAIN);
            c->op = (td__op){.opcode = TD_OP_SCALED_DOT_PRODUCT_ATTENTION, .n_iattrs = 1,
                             .iattrs = {cs[i].causal}, .fattrs = {cs[i].scale}};
            tol_of(c, r);
        }
}

/* TD_OPCLASS_NN: the normalisations with and without their parameters, their backward ops,
 * in every float dtype, with specials (a NaN or inf makes its group NaN on both sides), on
 * groups that fit a GPU block's one pass and groups much longer than it; DROPOUT exact for
 * p 0, 0.3 and 1. */
static void add_nn(void)
{
    typedef struct ncase {
        uint32_t opcode;
        shape sh;
        int64_t attr; /* axis or groups; -1: none */
        int nparams;  /* parameters after x (after dy, x for the backward ops) */
    } ncase;
    const ncase cs[] = {
        {TD_OP_LAYER_NORM, SH(7), 0, 2},             {TD_OP_LAYER_NORM, SH(3, 4, 5), 2, 2},
        {TD_OP_LAYER_NORM, SH(3, 4, 5), 1, 1},       {TD_OP_LAYER_NORM, SH(0, 5), 1, 2},
        {TD_OP_LAYER_NORM, SH(64, 257), 1, 0},       {TD_OP_LAYER_NORM, SH(16, 4096), 1, 2},
        {TD_OP_LAYER_NORM, SH(2, 100003), 1, 2},     {TD_OP_RMS_NORM, SH(3, 4, 5), 2, 1},
        {TD_OP_RMS_NORM, SH(33, 1000), 1, 0},        {TD_OP_RMS_NORM, SH(7), 0, 1},
        {TD_OP_GROUP_NORM, SH(2, 6, 5), 3, 2},       {TD_OP_GROUP_NORM, SH(3, 4), 2, 0},
        {TD_OP_GROUP_NORM, SH(2, 8, 3, 3), 4, 1},    {TD_OP_GROUP_NORM, SH(4, 32, 1000), 8, 2},
        {TD_OP_BATCH_NORM, SH(4, 3, 5), -1, 4},      {TD_OP_BATCH_NORM, SH(6, 2), -1, 2},
        {TD_OP_BATCH_NORM, SH(8, 16, 100), -1, 3},   {TD_OP_LAYER_NORM_BACKWARD, SH(3, 4, 5), 2, 1},
        {TD_OP_LAYER_NORM_BACKWARD, SH(16, 4096), 1, 1},
        {TD_OP_LAYER_NORM_BACKWARD, SH(5, 9), 1, 0}, {TD_OP_RMS_NORM_BACKWARD, SH(3, 4, 5), 1, 1},
        {TD_OP_RMS_NORM_BACKWARD, SH(33, 1000), 1, 0},
        {TD_OP_GROUP_NORM_BACKWARD, SH(2, 6, 5), 3, 1},
        {TD_OP_GROUP_NORM_BACKWARD, SH(4, 32, 1000), 8, 0},
        {TD_OP_BATCH_NORM_BACKWARD, SH(4, 3, 5), -1, 1},
        {TD_OP_BATCH_NORM_BACKWARD, SH(6, 2), -1, 0},
        {TD_OP_BATCH_NORM_BACKWARD, SH(16, 8, 500), -1, 1},
        /* the GPU's row path: the longest rows it keeps in registers (16384 forward, 8192
         * backward), one past them (the block-per-group path), widths no 16-byte vector
         * divides, several rows a block with a partial last block */
        {TD_OP_LAYER_NORM, SH(3, 16384), 1, 2},      {TD_OP_LAYER_NORM, SH(2, 16385), 1, 1},
        {TD_OP_LAYER_NORM, SH(37, 96), 1, 2},        {TD_OP_RMS_NORM, SH(9, 2050), 1, 1},
        {TD_OP_LAYER_NORM_BACKWARD, SH(3, 8192), 1, 1},
        {TD_OP_LAYER_NORM_BACKWARD, SH(2, 8193), 1, 1},
        {TD_OP_LAYER_NORM_BACKWARD, SH(11, 1030), 1, 1},
        {TD_OP_RMS_NORM_BACKWARD, SH(37, 96), 1, 0},
        /* the GPU's whole-chunk row kernel (k_nn_rowv: aligned rows that are a multiple of a
         * team's 16-byte chunks): fewer chunks a lane than it can hold, several rows a block
         * with teams past the last row */
        {TD_OP_LAYER_NORM, SH(37, 128), 1, 2},       {TD_OP_LAYER_NORM, SH(5, 1536), 1, 0},
        {TD_OP_LAYER_NORM_BACKWARD, SH(37, 256), 1, 1},
        {TD_OP_RMS_NORM_BACKWARD, SH(37, 128), 1, 0}};
    char sb[96];
    for (size_t i = 0; i < COUNT(cs); i++) {
        const td__op_row *r = td__op_row_of(cs[i].opcode);
        const bool bwd = r->inputs[0] == 'd';
        const uint32_t first = bwd ? 2 : 1;
        const shape *x = &cs[i].sh;
        shape ps = {.rank = 0};
        if (cs[i].opcode == TD_OP_LAYER_NORM || cs[i].opcode == TD_OP_RMS_NORM ||
            cs[i].opcode == TD_OP_LAYER_NORM_BACKWARD || cs[i].opcode == TD_OP_RMS_NORM_BACKWARD) {
            for (uint32_t k = (uint32_t)cs[i].attr; k < x->rank; k++) ps.d[ps.rank++] = x->d[k];
        } else {
            ps = SH(x->d[1]);
        }
        for (size_t d = 0; d < n_float; d++)
            for (int g = 0; g < 2; g++) {
                if (g && (bwd || shape_elems(x) > 4096)) continue;
                tcase *c = add_case("%s %s %s attr %" PRId64 " %d params%s", r->name, dtn(k_float[d]),
                                    shape_str(x, sb, sizeof sb), cs[i].attr, cs[i].nparams,
                                    g ? " specials" : "");
                c->n_in = (int)first + cs[i].nparams;
                for (uint32_t k = 0; k < first; k++)
                    c->in[k] = in_of(k_float[d], *x, g ? GEN_ANY : GEN_PLAIN);
                for (int k = 0; k < cs[i].nparams; k++)
                    c->in[first + k] = in_of(k_float[d], ps, GEN_PLAIN);
                if (cs[i].opcode == TD_OP_BATCH_NORM) c->in[2].gen = GEN_POS; /* var */
                c->op = (td__op){.opcode = cs[i].opcode, .n_iattrs = cs[i].attr >= 0 ? 1 : 0,
                                 .iattrs = {cs[i].attr}, .fattrs = {1e-5}};
                tol_of(c, r);
            }
    }
    add_attention();
    const shape ds[] = {SH(7), SH(3, 5), SH(100003)};
    const double ps[] = {0.0, 0.3, 1.0};
    for (size_t d = 0; d < n_float; d++)
        for (size_t i = 0; i < COUNT(ds); i++)
            for (size_t p = 0; p < COUNT(ps); p++) {
                tcase *c = add_case("dropout %s %s p %g", dtn(k_float[d]),
                                    shape_str(&ds[i], sb, sizeof sb), ps[p]);
                c->n_in = 1;
                c->in[0] = in_of(k_float[d], ds[i], GEN_ANY);
                c->op = (td__op){.opcode = TD_OP_DROPOUT, .fattrs = {ps[p]},
                                 .seed = 0x9e3779b97f4a7c15ull + i};
            }
}

/* CONV and POOL families (engine/window.h): a handful of shapes per op covering groups,
 * stride > kernel, dilation, asymmetric and negative-high padding, 1-3 spatial dims, a zero
 * batch and one larger conv (the CPU's parallel blocks); every float dtype. Conv ops are
 * held to TD_ACC_CONV (the matmul bound with K the products per output); max pooling is
 * exact (NaN and inf included); avg/adaptive pooling, the pool gradients and interpolation
 * to 4 ulp (both backends sum in the same order in the same type). */
typedef struct wcase {
    uint32_t opcode;
    int n_in;
    shape sh[3];
    uint32_t n_iattrs;
    int64_t ia[16];
    bool specials;
} wcase;

static void add_window(void)
{
    const wcase ws[] = {
        /* conv: groups, stride, dilation, pad_lo, pad_hi */
        {TD_OP_CONV, 3, {SH(2, 4, 9), SH(6, 2, 3), SH(6)}, 5, {2, 2, 1, 1, 1}, false},
        {TD_OP_CONV, 2, {SH(2, 3, 8, 7), SH(4, 3, 3, 3)}, 9, {1, 1, 1, 2, 1, 1, 0, 1, 2}, false},
        {TD_OP_CONV, 2, {SH(1, 2, 4, 5, 4), SH(2, 2, 2, 3, 2)}, 13,
         {1, 1, 2, 1, 1, 1, 1, 1, 0, 1, 0, 1, 0}, false},
        {TD_OP_CONV, 3, {SH(1, 8, 16, 16), SH(8, 1, 3, 3), SH(8)}, 9, {8, 2, 2, 1, 1, 1, 1, 1, 1},
         false},
        {TD_OP_CONV, 2, {SH(2, 6, 7, 7), SH(4, 3, 2, 2)}, 9, {2, 3, 3, 1, 1, 0, 0, 0, 0}, false},
        {TD_OP_CONV, 3, {SH(4, 16, 20, 20), SH(32, 16, 3, 3), SH(32)}, 9,
         {1, 1, 1, 1, 1, 1, 1, 1, 1}, false},
        /* C/G 64 in 2 groups, K 576 over a 4x4 plane: a small grid (CUDA f16/bf16 split K) */
        {TD_OP_CONV, 3, {SH(2, 128, 4, 4), SH(16, 64, 3, 3), SH(16)}, 9,
         {2, 1, 1, 1, 1, 1, 1, 1, 1}, false},
        /* C_out 136 (two 128-row tiles, the second partial), K 1152, 24 columns: the CUDA
         * f16/bf16 128 x 64 tile split 4 ways in clusters at 3 blocks an SM */
        {TD_OP_CONV, 3, {SH(1, 128, 4, 6), SH(136, 128, 3, 3), SH(136)}, 9,
         {1, 1, 1, 1, 1, 1, 1, 1, 1}, false},
        {TD_OP_CONV, 2, {SH(0, 4, 5, 5), SH(4, 4, 3, 3)}, 9, {1, 1, 1, 1, 1, 1, 1, 1, 1}, false},
        /* pointwise (1x1, stride 1, no padding, no bias: the GPU's GEMM reads x directly),
         * grouped in 2-d, plain in 1-d */
        {TD_OP_CONV, 2, {SH(3, 8, 5, 6), SH(6, 4, 1, 1)}, 9, {2, 1, 1, 1, 1, 0, 0, 0, 0}, false},
        {TD_OP_CONV, 2, {SH(2, 5, 7), SH(3, 5, 1)}, 5, {1, 1, 1, 0, 0}, false},
        /* conv_transpose: groups, stride, dilation, pad_lo, pad_hi (= padding - output_padding) */
        {TD_OP_CONV_TRANSPOSE, 3, {SH(2, 4, 5), SH(4, 3, 3), SH(6)}, 5, {2, 2, 1, 1, 0}, false},
        {TD_OP_CONV_TRANSPOSE, 2, {SH(2, 3, 5, 4), SH(3, 2, 3, 2)}, 9,
         {1, 2, 3, 1, 2, 1, 0, 0, -1}, false},
        /* conv_weight_grad: groups, stride, dilation, pad_lo, pad_hi, kernel */
        {TD_OP_CONV_WEIGHT_GRAD, 2, {SH(2, 4, 7, 6), SH(2, 6, 4, 6)}, 11,
         {2, 2, 1, 1, 1, 1, 1, 1, 1, 3, 3}, false},
        {TD_OP_CONV_WEIGHT_GRAD, 2, {SH(3, 2, 10), SH(3, 4, 4)}, 6, {1, 2, 2, 0, 1, 3}, false},
        /* max pool: ceil, kernel, stride, dilation, pad */
        {TD_OP_MAX_POOL, 1, {SH(2, 3, 9, 8)}, 9, {1, 3, 2, 2, 2, 1, 2, 1, 1}, true},
        {TD_OP_MAX_POOL_INDICES, 1, {SH(2, 3, 9, 8)}, 9, {1, 3, 2, 2, 2, 1, 2, 1, 1}, true},
        {TD_OP_MAX_POOL, 1, {SH(2, 2, 11)}, 5, {0, 3, 2, 1, 1}, true},
        {TD_OP_MAX_POOL_INDICES, 1, {SH(2, 2, 11)}, 5, {0, 3, 2, 1, 1}, true},
        /* ... backward: + input size (dy [2, 3, 5, 5] for [9, 8]) */
        {TD_OP_MAX_POOL_BACKWARD, 2, {SH(2, 3, 5, 5), SH(2, 3, 5, 5)}, 11,
         {1, 3, 2, 2, 2, 1, 2, 1, 1, 9, 8}, false},
        /* avg pool: ceil, count_include_pad, kernel, stride, pad */
        {TD_OP_AVG_POOL, 1, {SH(2, 3, 9, 8)}, 8, {1, 0, 3, 3, 2, 2, 1, 1}, false},
        {TD_OP_AVG_POOL, 1, {SH(2, 3, 9, 8)}, 8, {1, 1, 3, 3, 2, 2, 1, 1}, false},
        {TD_OP_AVG_POOL, 1, {SH(2, 2, 11)}, 5, {0, 1, 2, 3, 0}, false},
        {TD_OP_AVG_POOL_BACKWARD, 1, {SH(2, 3, 5, 5)}, 10, {1, 0, 3, 3, 2, 2, 1, 1, 9, 8}, false},
        {TD_OP_ADAPTIVE_AVG_POOL, 1, {SH(2, 3, 9, 7)}, 2, {4, 3}, false},
        {TD_OP_ADAPTIVE_AVG_POOL, 1, {SH(2, 3, 3)}, 1, {7}, false},
        {TD_OP_ADAPTIVE_AVG_POOL_BACKWARD, 1, {SH(2, 3, 4, 3)}, 2, {9, 7}, false},
        /* interpolate: mode, align_corners, output size */
        {TD_OP_INTERPOLATE, 1, {SH(2, 2, 5, 4)}, 4, {0, 0, 7, 9}, true},
        {TD_OP_INTERPOLATE, 1, {SH(2, 2, 5, 4)}, 4, {1, 0, 7, 9}, false},
        {TD_OP_INTERPOLATE, 1, {SH(2, 2, 5, 4)}, 4, {1, 1, 7, 3}, false},
        {TD_OP_INTERPOLATE, 1, {SH(2, 2, 6)}, 3, {1, 0, 13}, false},
    };
    char sb[96];
    for (size_t i = 0; i < COUNT(ws); i++) {
        const td__op_row *r = td__op_row_of(ws[i].opcode);
        for (size_t d = 0; d < n_float; d++) {
            const uint32_t dt = k_float[d];
            tcase *c = add_case("%s %s %s case %zu", r->name, dtn(dt),
                                shape_str(&ws[i].sh[0], sb, sizeof sb), i);
            c->n_in = ws[i].n_in;
            for (int k = 0; k < ws[i].n_in; k++)
                c->in[k] = in_of(dt, ws[i].sh[k], ws[i].specials ? GEN_ANY : GEN_PLAIN);
            if (ws[i].opcode == TD_OP_MAX_POOL_BACKWARD) {
                c->in[1] = in_of(TD_I64, ws[i].sh[1], GEN_INDEX);
                c->in[1].lim = 72; /* the [9, 8] plane */
            }
            c->op = (td__op){.opcode = ws[i].opcode, .n_iattrs = ws[i].n_iattrs};
            for (uint32_t a = 0; a < ws[i].n_iattrs; a++) c->op.iattrs[a] = ws[i].ia[a];
            tol_of(c, r);
        }
    }
}


/* --long-windows: window ops whose one output loops over more than 65535 elements or
 * products (f32, named "long-window ..."): a CPU implementation such as lavapipe stops an
 * invocation's loops after 65535 iterations, so there the target must refuse them (it once
 * gave wrong sums instead: conv over 131072 channels 6554 for 131072); a GPU runs them, held
 * to the usual bounds. Off by default: the weight gradient's inputs are 80 MB each. */
static bool g_long_windows;

static void add_long_windows(void)
{
    const int64_t big = 70000;
    const wcase ws[] = {
        /* conv: C = 131072 (x [1, 131072, 1]); C = 1, kernel = L = 70000 */
        {TD_OP_CONV, 2, {SH(1, 131072, 1), SH(1, 131072, 1)}, 5, {1, 1, 1, 0, 0}, false},
        {TD_OP_CONV, 2, {SH(1, 1, big), SH(1, 1, big)}, 5, {1, 1, 1, 0, 0}, false},
        /* conv_transpose: C_in = 70000 (conv_input_grad's C_out), then C_out = 70000 */
        {TD_OP_CONV_TRANSPOSE, 2, {SH(1, big, 1), SH(big, 1, 1)}, 5, {1, 1, 1, 0, 0}, false},
        {TD_OP_CONV_TRANSPOSE, 2, {SH(1, 1, 3), SH(1, big, 1)}, 5, {1, 1, 1, 0, 0}, false},
        /* conv_weight_grad: L = 2e7, kernel 1 */
        {TD_OP_CONV_WEIGHT_GRAD, 2, {SH(1, 1, 20000000), SH(1, 1, 20000000)}, 6,
         {1, 1, 1, 0, 0, 1}, false},
        /* pools over a 70000 window, and a 300 x 300 one */
        {TD_OP_MAX_POOL, 1, {SH(1, 1, big)}, 5, {0, big, 1, 1, 0}, false},
        {TD_OP_MAX_POOL_INDICES, 1, {SH(1, 1, big)}, 5, {0, big, 1, 1, 0}, false},
        {TD_OP_MAX_POOL_BACKWARD, 2, {SH(1, 1, 1), SH(1, 1, 1)}, 6, {0, big, 1, 1, 0, big},
         false},
        {TD_OP_AVG_POOL, 1, {SH(1, 1, big)}, 5, {0, 0, big, 1, 0}, false},
        {TD_OP_AVG_POOL, 1, {SH(1, 1, 300, 300)}, 8, {0, 0, 300, 300, 1, 1, 0, 0}, false},
        /* overlapping windows: each input is in up to 1001 of them */
        {TD_OP_AVG_POOL_BACKWARD, 1, {SH(1, 1, 1001)}, 6, {0, 0, big, 1, 0, big + 1000}, false},
        {TD_OP_ADAPTIVE_AVG_POOL, 1, {SH(1, 1, big)}, 1, {1}, false},
        {TD_OP_ADAPTIVE_AVG_POOL_BACKWARD, 1, {SH(1, 1, big)}, 1, {1}, false},
    };
    char sb[96];
    for (size_t i = 0; i < COUNT(ws); i++) {
        const td__op_row *r = td__op_row_of(ws[i].opcode);
        tcase *c = add_case("long-window %s f32 %s case %zu", r->name,
                            shape_str(&ws[i].sh[0], sb, sizeof sb), i);
        c->n_in = ws[i].n_in;
        /* positive values, so that a sum cut short is visibly short; max pooling over
         * ascending values, so that a window cut short misses the maximum */
        const bool asc = ws[i].opcode == TD_OP_MAX_POOL || ws[i].opcode == TD_OP_MAX_POOL_INDICES;
        for (int k = 0; k < ws[i].n_in; k++)
            c->in[k] = in_of(TD_F32, ws[i].sh[k], asc ? GEN_ARANGE : GEN_POS);
        if (ws[i].opcode == TD_OP_MAX_POOL_BACKWARD) {
            c->in[1] = in_of(TD_I64, ws[i].sh[1], GEN_INDEX);
            c->in[1].lim = big;
        }
        c->op = (td__op){.opcode = ws[i].opcode, .n_iattrs = ws[i].n_iattrs};
        for (uint32_t a = 0; a < ws[i].n_iattrs; a++) c->op.iattrs[a] = ws[i].ia[a];
        tol_of(c, r);
    }
}

static void build_cases(void)
{
    n_all = dtypes_of(TD_DTC_ANY, k_all);
    n_numeric = dtypes_of(TD_DTC_NUMERIC, k_numeric);
    n_float = dtypes_of(TD_DTC_FLOAT, k_float);
    add_create();
    add_unary();
    add_binary();
    add_where_cast();
    add_reduce();
    add_matmul();
    add_movement();
    add_movement_steps();
    add_softmax();
    add_scan();
    add_sort();
    add_nn();
    add_window();
    if (g_long_windows) add_long_windows();
}

/* ---- the out-of-memory check ---- */

/* A 200 GiB FULL must fail with TD_ENOMEM; a small op on the same session must then work. */
static bool run_oom(executor *tgt, char *why, size_t whylen)
{
    step s = {.op = {.opcode = TD_OP_FULL, .dtype = TD_F32, .n_iattrs = 2,
                     .iattrs = {50, 1LL << 30}, .fattrs = {1.0, 0}}};
    char msg[1024] = "";
    float one = 0;
    td_status st = run_program(tgt, 0, NULL, NULL, &s, 1, NULL, 0, msg, sizeof msg);
    printf("oom: 200 GiB full on %s -> %s (%s)\n", tgt->uri, td_status_name(st), msg);
    if (st != TD_ENOMEM) {
        snprintf(why, whylen, "a 200 GiB tensor gave %s, expected TD_ENOMEM", td_status_name(st));
        return false;
    }
    step t = {.op = {.opcode = TD_OP_FULL, .dtype = TD_F32, .n_iattrs = 0, .fattrs = {1.0, 0}}};
    st = run_program(tgt, 0, NULL, NULL, &t, 1, &one, sizeof one, msg, sizeof msg);
    if (st != TD_OK || one != 1.0f) {
        snprintf(why, whylen, "after the failed allocation the session gave %s (%s)",
                 td_status_name(st), msg);
        return false;
    }
    printf("oom: session still works after the failure (read back %g)\n", one);
    return true;
}

/* ---- main ---- */

/* Largest element count among a case's inputs and its output (for --quick). */
static int64_t case_size(const tcase *c)
{
    int64_t most = 0;
    td__desc d[TD_OP_MAX_INPUTS];
    const td__desc *p[TD_OP_MAX_INPUTS];
    for (int k = 0; k < c->n_in; k++) {
        d[k] = (td__desc){.dtype = c->in[k].dtype, .rank = c->in[k].sh.rank};
        for (uint32_t i = 0; i < d[k].rank; i++) d[k].dims[i] = c->in[k].sh.d[i];
        p[k] = &d[k];
        if (td__desc_nelem(&d[k]) > most) most = td__desc_nelem(&d[k]);
    }
    td__op op = c->op;
    op.n_inputs = (uint32_t)c->n_in;
    td__desc od;
    char err[256];
    if (td__op_infer(&op, p, &od, err, sizeof err) == TD_OK && td__desc_nelem(&od) > most)
        most = td__desc_nelem(&od);
    return most;
}

/* Per-op results of one target, for --table and --json. */
typedef struct op_stats {
    size_t run, passed, failed;
    double worst_ulp, worst_frac;
} op_stats;

/* s as a JSON string (RFC 8259: quote, backslash and control characters escaped). */
void td__json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
}

/* A worst-error value for JSON: finite numbers as they are, inf (one side NaN or inf) as
 * null, since JSON has no infinity. */
void td__json_num(FILE *f, double v)
{
    if (isfinite(v)) fprintf(f, "%.6g", v);
    else fputs("null", f);
}

typedef struct run_opts {
    const char *filter;
    bool oom, quick, table;
    long sample; /* --sample N: every Nth case (0 or 1: all) */
    FILE *json; /* one JSON object per target, one per line (NULL: none) */
} run_opts;

static int run_target(executor *ref, const char *uri, const run_opts *ro)
{
    executor tgt, low;
    char err[1024] = "";
    if (executor_open(&tgt, uri, err, sizeof err) != TD_OK) {
        fprintf(stderr, "conformance: cannot open %s: %s\n", uri, err);
        if (ro->json != NULL) {
            fputs("{\"target\": ", ro->json);
            td__json_str(ro->json, uri);
            fputs(", \"error\": ", ro->json);
            td__json_str(ro->json, err);
            fputs("}\n", ro->json);
        }
        return 2;
    }
    /* A second session on a local target lowers every composite (engine/session.h): each
     * native kernel is held to its lowering. A remote server lowers when it was started
     * with TENSORD_FORCE_LOWERING=1; then the ordinary comparison covers the lowering. */
    executor *lowp = NULL;
    if (strncmp(uri, "local:", 6) == 0) {
        const char *was = getenv("TENSORD_FORCE_LOWERING");
        char saved[16] = "";
        if (was != NULL) snprintf(saved, sizeof saved, "%s", was);
        setenv("TENSORD_FORCE_LOWERING", "1", 1);
        if (executor_open(&low, uri, err, sizeof err) != TD_OK) {
            fprintf(stderr, "conformance: cannot open a lowering session on %s: %s\n", uri, err);
            tgt.tp->vt->close(tgt.tp);
            return 2;
        }
        if (was != NULL) setenv("TENSORD_FORCE_LOWERING", saved, 1);
        else unsetenv("TENSORD_FORCE_LOWERING");
        lowp = &low;
    }
    stats st = {0};
    op_stats *per = calloc(TD_OP_COUNT, sizeof *per);
    if (per == NULL) {
        fprintf(stderr, "conformance: out of memory\n");
        exit(2);
    }
    size_t skipped_quick = 0, large_seen = 0, refused = 0, nref = 0;
    g_flushed = 0;
    static char refused_pairs[1024][40]; /* "opname dtype", distinct, in table order */
    /* TD_CONFORMANCE_LARGE_EVERY=N: of the cases above 65536 elements run every Nth (the
     * first, the N+1th, ...) — tests/run.sh's sanitizer pass, where they cost minutes; the
     * plain pass and the GPU runs leave it unset and run every case. */
    const char *every_env = getenv("TD_CONFORMANCE_LARGE_EVERY");
    const long large_every = every_env != NULL && atol(every_env) > 1 ? atol(every_env) : 1;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (ro->json != NULL) {
        fputs("{\"target\": ", ro->json);
        td__json_str(ro->json, uri);
        fputs(", \"reference\": ", ro->json);
        td__json_str(ro->json, ref->uri);
        fputs(", \"failures\": [", ro->json);
    }
    size_t nfail_json = 0;
    bool lost = false;
    for (size_t i = 0; i < g_ncases; i++) {
        const tcase *c = &g_cases[i];
        if (ro->filter != NULL && strstr(c->name, ro->filter) == NULL) continue;
        if (case_size(c) > 65536 && (ro->quick || large_seen++ % (size_t)large_every != 0)) {
            skipped_quick++;
            continue;
        }
        char why[2048] = "";
        if (ro->sample > 1 && i % (size_t)ro->sample != 0) continue;
        double wu = 0, wf = 0;
        const td__op_row *row = td__op_row_of(c->op.opcode);
        op_stats *ps = row != NULL ? &per[row - td__op_rows] : NULL;
        g_refused = false;
        bool ok = run_case(ref, &tgt, lowp, c, i, why, sizeof why, &wu, &wf);
        if (!ok && (strstr(why, "target TD_ECLOSED") != NULL ||
                    strstr(why, "target TD_EUNAVAILABLE") != NULL)) {
            /* the session is gone (server stopped, connection lost): the remaining cases
             * would only repeat it, and none of them says anything about an op */
            printf("conformance: lost the session to %s at case '%s': %s; the remaining cases "
                   "were not run\n", uri, c->name, why);
            lost = true;
            break;
        }
        if (g_refused) {
            char pair[40];
            snprintf(pair, sizeof pair, "%s %s", td__op_name(c->op.opcode),
                     dtn(c->n_in > 0 ? c->in[0].dtype : c->op.dtype));
            bool seen = false;
            for (size_t j = 0; j < nref && !seen; j++) seen = strcmp(refused_pairs[j], pair) == 0;
            if (!seen && nref < 1024) snprintf(refused_pairs[nref++], sizeof pair, "%s", pair);
            refused++;
            continue;
        }
        st.run++;
        if (ps != NULL) ps->run++;
        if (ps != NULL) {
            if (wu > ps->worst_ulp) ps->worst_ulp = wu;
            if (wf > ps->worst_frac) ps->worst_frac = wf;
        }
        if (ok) {
            st.passed++;
            if (ps != NULL) ps->passed++;
            if (g_verbose) printf("ok   %s\n", c->name);
        } else {
            st.failed++;
            if (ps != NULL) ps->failed++;
            printf("FAIL %s on %s: %s\n", c->name, uri, why);
            if (ro->json != NULL) {
                fputs(nfail_json++ ? ", {\"case\": " : "{\"case\": ", ro->json);
                td__json_str(ro->json, c->name);
                fputs(", \"op\": ", ro->json);
                td__json_str(ro->json, td__op_name(c->op.opcode));
                fputs(", \"why\": ", ro->json);
                td__json_str(ro->json, why);
                fputs("}", ro->json);
            }
        }
        fflush(stdout);
    }
    if (ro->oom) {
        char why[1024] = "";
        st.run++;
        if (run_oom(&tgt, why, sizeof why)) {
            st.passed++;
        } else {
            st.failed++;
            printf("FAIL oom on %s: %s\n", uri, why);
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const double secs =
        (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    tgt.tp->vt->close(tgt.tp);
    if (lowp != NULL) lowp->tp->vt->close(lowp->tp);
    if (ro->table) {
        /* worst ulp: the largest distance in units in the last place over every element of
         * every case of the op (float results; inf where one side alone was NaN or inf);
         * of tolerance: the largest |got - want| divided by the case's bound (1 = at the
         * bound; "-" for ops compared bit for bit) */
        printf("%-18s %6s %6s %6s %10s %12s\n", "op", "cases", "passed", "failed", "worst ulp",
               "of tolerance");
        for (size_t r = 0; r < TD_OP_COUNT; r++) {
            const op_stats *ps = &per[r];
            if (ps->run == 0) continue;
            char frac[32] = "-";
            if (ps->worst_frac > 0) snprintf(frac, sizeof frac, "%.3g", ps->worst_frac);
            printf("%-18s %6zu %6zu %6zu %10.4g %12s%s\n", td__op_rows[r].name, ps->run,
                   ps->passed, ps->failed, ps->worst_ulp, frac, ps->failed ? "  FAIL" : "");
        }
    }
    if (ro->json != NULL) {
        fprintf(ro->json, "], \"cases\": %zu, \"passed\": %zu, \"failed\": %zu, \"seconds\": %.3f, "
                          "\"skipped_large\": %zu, \"refused\": %zu, \"session_lost\": %s, "
                          "\"ops\": [", st.run, st.passed, st.failed, secs, skipped_quick, refused,
                lost ? "true" : "false");
        size_t nops = 0;
        for (size_t r = 0; r < TD_OP_COUNT; r++) {
            const op_stats *ps = &per[r];
            if (ps->run == 0) continue;
            fputs(nops++ ? ", {\"op\": " : "{\"op\": ", ro->json);
            td__json_str(ro->json, td__op_rows[r].name);
            fprintf(ro->json, ", \"cases\": %zu, \"passed\": %zu, \"failed\": %zu, \"worst_ulp\": ",
                    ps->run, ps->passed, ps->failed);
            td__json_num(ro->json, ps->worst_ulp);
            fputs(", \"worst_of_tolerance\": ", ro->json);
            td__json_num(ro->json, ps->worst_frac);
            fputs("}", ro->json);
        }
        fputs("]}\n", ro->json);
        fflush(ro->json);
    }
    free(per);
    printf("conformance %s vs %s: %zu cases, %zu passed, %zu failed (%.1f s)", uri, ref->uri,
           st.run, st.passed, st.failed, secs);
    if (skipped_quick > 0)
        printf("; %zu larger cases skipped by --quick or TD_CONFORMANCE_LARGE_EVERY",
               skipped_quick);
    if (ro->sample > 1) printf("; every %ldth case (--sample)", ro->sample);
    if (g_flush)
        printf("; %zu passed only with f32/bf16 subnormals flushed (--flush-subnormals)",
               g_flushed);
    printf("\n");
    if (refused > 0) {
        printf("refused by %s (TD_EUNSUPPORTED, --allow-unsupported): %zu cases of %zu op/dtype "
               "pairs:", uri, refused, nref);
        for (size_t j = 0; j < nref; j++) printf("%s%s", j ? ", " : " ", refused_pairs[j]);
        printf("\n");
    }
    return lost ? 2 : st.failed > 0 ? 1 : 0;
}

static const char conformance_usage[] =
    "usage: conformance [--target URI]... [--reference URI] [--filter SUBSTR] [--verbose]\n"
    "                   [--oom] [--quick] [--table] [--json FILE|-] [--require-backend KIND]...\n"
    "                   [--tf32 on|off|auto] [--allow-unsupported] [--sample N]\n"
    "                   [--target-kind KIND] [--long-windows]\n";

int td__conformance_main(int argc, char **argv, const td_options *remote)
{
    g_remote = remote;
    const char *targets[16];
    int ntargets = 0;
    const char *ref_uri = "local:cpu", *json_path = NULL;
    run_opts ro = {0};
    const char *target_kind = NULL;
    g_allow_unsupported = false;
    const char *required[8];
    int nrequired = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--target") == 0 && i + 1 < argc && ntargets < 16) {
            targets[ntargets++] = argv[++i];
        } else if (strcmp(argv[i], "--filter") == 0 && i + 1 < argc) {
            ro.filter = argv[++i];
        } else if (strcmp(argv[i], "--reference") == 0 && i + 1 < argc) {
            ref_uri = argv[++i];
        } else if (strcmp(argv[i], "--verbose") == 0) {
            g_verbose = true;
        } else if (strcmp(argv[i], "--oom") == 0) {
            ro.oom = true;
        } else if (strcmp(argv[i], "--long-windows") == 0) {
            g_long_windows = true;
        } else if (strcmp(argv[i], "--quick") == 0) {
            ro.quick = true;
        } else if (strcmp(argv[i], "--allow-unsupported") == 0) {
            g_allow_unsupported = true;
        } else if (strcmp(argv[i], "--flush-subnormals") == 0) {
            g_flush = true;
        } else if (strcmp(argv[i], "--sample") == 0 && i + 1 < argc && atol(argv[i + 1]) >= 1) {
            ro.sample = atol(argv[++i]);
        } else if (strcmp(argv[i], "--target-kind") == 0 && i + 1 < argc) {
            target_kind = argv[++i];
        } else if (strcmp(argv[i], "--table") == 0) {
            ro.table = true;
        } else if (strcmp(argv[i], "--json") == 0 && i + 1 < argc) {
            json_path = argv[++i];
        } else if (strcmp(argv[i], "--tf32") == 0 && i + 1 < argc &&
                   (strcmp(argv[i + 1], "on") == 0 || strcmp(argv[i + 1], "off") == 0 ||
                    strcmp(argv[i + 1], "auto") == 0)) {
            i++;
            g_tf32 = strcmp(argv[i], "on") == 0 ? 1 : strcmp(argv[i], "off") == 0 ? 0 : -1;
        } else if (strcmp(argv[i], "--require-backend") == 0 && i + 1 < argc && nrequired < 8) {
            required[nrequired++] = argv[++i];
        } else {
            fputs(conformance_usage, stderr);
            return 2;
        }
    }
    char err[1024] = "";
    const char *lvl = getenv("TENSORD_LOG_LEVEL");
    if (lvl != NULL && strcmp(lvl, "debug") == 0) td__log_set_level(TD_LOG_DEBUG);
    if (td__devices_init(err, sizeof err) != TD_OK) {
        fprintf(stderr, "conformance: %s\n", err);
        return 2;
    }
    static char local_names[16][48];
    if (target_kind != NULL) {
        for (int i = 0; i < td__device_count() && ntargets < 16; i++) {
            const td__device *d = td__device_at(i);
            if (strcmp(d->backend->kind, target_kind) != 0) continue;
            snprintf(local_names[ntargets], sizeof local_names[0], "local:%s", d->name);
            targets[ntargets] = local_names[ntargets];
            ntargets++;
        }
        if (ntargets == 0)
            printf("%s: %s, skipped\n", target_kind,
                   td__backend_loaded(target_kind) ? "backend loaded, no device"
                                                   : "no backend module");
    } else if (ntargets == 0) {
        for (int i = 0; i < td__device_count() && ntargets < 16; i++) {
            const td__device *d = td__device_at(i);
            if (strcmp(d->backend->kind, "cpu") == 0) continue;
            if (strcmp(d->backend->kind, "vulkan") == 0) {
                /* a partial backend: run with --target-kind vulkan --allow-unsupported */
                printf("%s: skipped here (conformance --target-kind vulkan "
                       "--allow-unsupported runs it)\n", d->name);
                continue;
            }
            snprintf(local_names[ntargets], sizeof local_names[0], "local:%s", d->name);
            targets[ntargets] = local_names[ntargets];
            ntargets++;
        }
        static const char *const gpu_kinds[] = {"cuda", "hip", "vulkan"};
        for (size_t g = 0; g < sizeof gpu_kinds / sizeof gpu_kinds[0]; g++) {
            bool have = false;
            for (int i = 0; i < td__device_count(); i++)
                if (strcmp(td__device_at(i)->backend->kind, gpu_kinds[g]) == 0) have = true;
            if (!have)
                printf("%s: %s, skipped\n", gpu_kinds[g],
                       td__backend_loaded(gpu_kinds[g]) ? "backend loaded, no device"
                                                        : "no backend module");
        }
    }
    for (int r = 0; r < nrequired; r++) {
        if (!td__backend_loaded(required[r])) {
            printf("FAIL backend %s did not load: no tensord-backend-%s.so was found, or it "
                   "failed to load (an info line above says why). TENSORD_LOG_LEVEL=debug "
                   "lists the folders searched; TENSORD_BACKEND_DIR sets them\n",
                   required[r], required[r]);
            return 1;
        }
        printf("%s: backend loaded\n", required[r]);
    }
    if (ntargets == 0) return 0;
    if (json_path != NULL) {
        ro.json = strcmp(json_path, "-") == 0 ? stdout : fopen(json_path, "w");
        if (ro.json == NULL) {
            fprintf(stderr, "conformance: cannot write %s: %s\n", json_path, strerror(errno));
            return 2;
        }
    }
    if (g_ncases == 0) build_cases();
    executor ref;
    if (executor_open(&ref, ref_uri, err, sizeof err) != TD_OK) {
        fprintf(stderr, "conformance: cannot open the reference %s: %s\n", ref_uri, err);
        if (ro.json != NULL && ro.json != stdout) fclose(ro.json);
        return 2;
    }
    int rc = 0;
    for (int t = 0; t < ntargets; t++) {
        for (int i = 0; i < td__device_count(); i++) {
            const td__device *d = td__device_at(i);
            char uri[64];
            snprintf(uri, sizeof uri, "local:%s", d->name);
            if (strcmp(uri, targets[t]) == 0)
                printf("device %s: %s\n", d->name, d->description);
        }
        int r = run_target(&ref, targets[t], &ro);
        if (r > rc) rc = r;
    }
    ref.tp->vt->close(ref.tp);
    if (ro.json != NULL && ro.json != stdout) fclose(ro.json);
    return rc;
}

#ifndef TD_CONFORMANCE_LIBRARY
int main(int argc, char **argv)
{
    int rc = td__conformance_main(argc, argv, NULL);
    free(g_cases);
    return rc;
}
#endif

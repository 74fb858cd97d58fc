/* cpu_reduce_simd.h — the vector loops of cpu_reduce.c, written once and compiled once per
 * instruction set: cpu_reduce.c includes this file several times, each time with
 * RK_SUFFIX (a name suffix) and RK_TARGET (a function attribute, empty for the baseline)
 * defined, and gets one table of kernels per inclusion (rk_isa_<suffix>).
 *
 * Why one source: the kernels use GCC/clang vector extensions (vector_size types, element
 * wise + - * and compares, __builtin_convertvector), not intrinsics, so every copy performs
 * the same IEEE operations on the same elements in the same order; only the register width
 * the compiler maps them to differs. The results are therefore bit-identical whichever copy
 * runs (cpu_reduce.c tests this by forcing each one). No copy contains a multiply feeding
 * an add, so floating-point contraction cannot make them differ either.
 *
 * The lane pattern of the sum and product kernels is part of the CPU backend's result
 * contract (see cpu_reduce.c): RK_LANES double accumulators, element i of a segment going
 * to lane i % RK_LANES, each lane folding its elements in ascending order. The max/min/arg
 * kernels are free to use any pattern: cpu_reduce.c only uses what they return where it
 * cannot depend on the order.
 */
#ifndef TD_BACKENDS_CPU_REDUCE_SIMD_TYPES
#define TD_BACKENDS_CPU_REDUCE_SIMD_TYPES
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define RK_LANES 32

typedef double rk_v8d __attribute__((vector_size(64)));
typedef float rk_v8f __attribute__((vector_size(32)));
typedef float rk_v16f __attribute__((vector_size(64)));
typedef int32_t rk_v16i __attribute__((vector_size(64)));
typedef int64_t rk_v8l __attribute__((vector_size(64)));
/* The same types for loads and stores at element alignment. */
typedef double rk_u8d __attribute__((vector_size(64), aligned(8), may_alias));
typedef float rk_u8f __attribute__((vector_size(32), aligned(4), may_alias));
typedef float rk_u16f __attribute__((vector_size(64), aligned(4), may_alias));

/* One instruction set's kernels. */
typedef struct rk_isa {
    const char *name;
    /* lanes[i % RK_LANES] += x[i] (or *=), i ascending; n >= 0 */
    void (*sum_f32)(double *lanes, const float *x, int64_t n);
    void (*sum_f64)(double *lanes, const double *x, int64_t n);
    void (*prod_f32)(double *lanes, const float *x, int64_t n);
    void (*prod_f64)(double *lanes, const double *x, int64_t n);
    /* *m = the largest (smallest) of *m and x[0..n) ignoring NaNs, in no stated order (so
     * the sign of a zero result is unspecified); *nan |= any x is NaN */
    void (*max_f32)(float *m, bool *nan, const float *x, int64_t n);
    void (*min_f32)(float *m, bool *nan, const float *x, int64_t n);
    void (*max_f64)(double *m, bool *nan, const double *x, int64_t n);
    void (*min_f64)(double *m, bool *nan, const double *x, int64_t n);
    /* n >= 1: *at = the first index of the largest (smallest) non-NaN x, *best its value;
     * *nan = whether any x is NaN (then *best and *at are unspecified) */
    void (*argmax_f32)(const float *x, int64_t n, float *best, int64_t *at, bool *nan);
    void (*argmin_f32)(const float *x, int64_t n, float *best, int64_t *at, bool *nan);
    void (*argmax_f64)(const double *x, int64_t n, double *best, int64_t *at, bool *nan);
    void (*argmin_f64)(const double *x, int64_t n, double *best, int64_t *at, bool *nan);
    /* Column steps over nrows (1..4) input rows of n outputs, rows applied in order:
     * acc[j] = (((acc[j] + r0[j]) + r1[j]) ...), the sum in double (or the product), or the
     * max/min step of cpu_reduce.c (a NaN or a larger/smaller value replaces acc[j]). */
    void (*col_sum_f32)(double *acc, const float *const *rows, int nrows, int64_t n);
    void (*col_sum_f64)(double *acc, const double *const *rows, int nrows, int64_t n);
    void (*col_prod_f32)(double *acc, const float *const *rows, int nrows, int64_t n);
    void (*col_prod_f64)(double *acc, const double *const *rows, int nrows, int64_t n);
    void (*col_max_f32)(float *acc, const float *const *rows, int nrows, int64_t n);
    void (*col_min_f32)(float *acc, const float *const *rows, int nrows, int64_t n);
    void (*col_max_f64)(double *acc, const double *const *rows, int nrows, int64_t n);
    void (*col_min_f64)(double *acc, const double *const *rows, int nrows, int64_t n);
} rk_isa;

#define RK__CAT(a, b) a##_##b
#define RK__XCAT(a, b) RK__CAT(a, b)
#endif

#define RK(name) RK__XCAT(rk_##name, RK_SUFFIX)

/* Eight f32 at p widened to f64 (exact). GCC 12 lowers __builtin_convertvector to 128-bit
 * pieces, so the AVX-512 copy names the instruction. */
#if defined(RK_AVX512)
#include <immintrin.h>
#define RK_WIDEN8(p) ((rk_v8d)_mm512_cvtps_pd(_mm256_loadu_ps(p)))
#else
#define RK_WIDEN8(p) __builtin_convertvector(*(const rk_u8f *)(p), rk_v8d)
#endif

/* ---- lane folds: sum and product in double ---- */

/* f32: four rk_v8d accumulators hold lanes 0-7, 8-15, 16-23, 24-31. */
#define RK_LANES_F32(NAME, OP)                                                             \
    RK_TARGET static void RK(NAME)(double *lanes, const float *x, int64_t n)              \
    {                                                                                      \
        rk_v8d a0 = *(const rk_u8d *)lanes, a1 = *(const rk_u8d *)(lanes + 8);             \
        rk_v8d a2 = *(const rk_u8d *)(lanes + 16), a3 = *(const rk_u8d *)(lanes + 24);     \
        int64_t i = 0;                                                                     \
        for (; i + RK_LANES <= n; i += RK_LANES) {                                         \
            a0 = a0 OP RK_WIDEN8(x + i);                                                   \
            a1 = a1 OP RK_WIDEN8(x + i + 8);                                               \
            a2 = a2 OP RK_WIDEN8(x + i + 16);                                              \
            a3 = a3 OP RK_WIDEN8(x + i + 24);                                              \
        }                                                                                  \
        *(rk_u8d *)lanes = a0;                                                             \
        *(rk_u8d *)(lanes + 8) = a1;                                                       \
        *(rk_u8d *)(lanes + 16) = a2;                                                      \
        *(rk_u8d *)(lanes + 24) = a3;                                                      \
        for (int64_t l = 0; i < n; i++, l++) lanes[l] = lanes[l] OP(double) x[i];          \
    }

#define RK_LANES_F64(NAME, OP)                                                             \
    RK_TARGET static void RK(NAME)(double *lanes, const double *x, int64_t n)             \
    {                                                                                      \
        rk_v8d a0 = *(const rk_u8d *)lanes, a1 = *(const rk_u8d *)(lanes + 8);             \
        rk_v8d a2 = *(const rk_u8d *)(lanes + 16), a3 = *(const rk_u8d *)(lanes + 24);     \
        int64_t i = 0;                                                                     \
        for (; i + RK_LANES <= n; i += RK_LANES) {                                         \
            a0 = a0 OP *(const rk_u8d *)(x + i);                                           \
            a1 = a1 OP *(const rk_u8d *)(x + i + 8);                                       \
            a2 = a2 OP *(const rk_u8d *)(x + i + 16);                                      \
            a3 = a3 OP *(const rk_u8d *)(x + i + 24);                                      \
        }                                                                                  \
        *(rk_u8d *)lanes = a0;                                                             \
        *(rk_u8d *)(lanes + 8) = a1;                                                       \
        *(rk_u8d *)(lanes + 16) = a2;                                                      \
        *(rk_u8d *)(lanes + 24) = a3;                                                      \
        for (int64_t l = 0; i < n; i++, l++) lanes[l] = lanes[l] OP x[i];                  \
    }

RK_LANES_F32(sum_f32, +)
RK_LANES_F32(prod_f32, *)
RK_LANES_F64(sum_f64, +)
RK_LANES_F64(prod_f64, *)

#ifndef RK_GT
#define RK_GT(a, b) ((a) > (b))
#define RK_LT(a, b) ((a) < (b))
#endif

/* ---- max / min and argmax / argmin of a contiguous run ----
 * T element type, V its 64-byte vector, M the compare-mask vector, W elements per vector,
 * GT the comparison that makes v better than the accumulator. */
#define RK_EXTREME(NAME, ARGNAME, T, V, M, W, GT)                                          \
    RK_TARGET static void RK(NAME)(T *m, bool *nan, const T *x, int64_t n)                \
    {                                                                                      \
        V a[2];                                                                            \
        M bad = {0};                                                                       \
        for (int l = 0; l < W; l++) a[0][l] = a[1][l] = *m;                                \
        int64_t i = 0;                                                                     \
        for (; i + 2 * W <= n; i += 2 * W) {                                               \
            V f[2];                                                                        \
            memcpy(f, x + i, sizeof f);                                                    \
            for (int k = 0; k < 2; k++) {                                                  \
                RK_BETTER_OF(a[k], f[k], V, M, GT);                                        \
                bad |= f[k] != f[k];                                                       \
            }                                                                              \
        }                                                                                  \
        T best = *m;                                                                       \
        bool any = false;                                                                  \
        for (int l = 0; l < W; l++) {                                                      \
            for (int k = 0; k < 2; k++)                                                    \
                if (GT(a[k][l], best)) best = a[k][l];                                     \
            any |= bad[l] != 0;                                                            \
        }                                                                                  \
        for (; i < n; i++) {                                                               \
            if (x[i] != x[i]) any = true;                                                  \
            else if (GT(x[i], best)) best = x[i];                                          \
        }                                                                                  \
        *m = best;                                                                         \
        *nan |= any;                                                                       \
    }                                                                                      \
    RK_TARGET static void RK(ARGNAME)(const T *x, int64_t n, T *best_out, int64_t *at_out, \
                                      bool *nan)                                           \
    {                                                                                      \
        /* lane l of a[k] sees elements c * 2W + k * W + l; ix holds the chunk c at which  \
         * the lane's best so far first appeared (strictly better replaces) */             \
        V a[2];                                                                            \
        M ix[2] = {{0}, {0}}, bad = {0};                                                   \
        int64_t i = 0;                                                                     \
        T best = x[0];                                                                     \
        int64_t at = 0;                                                                    \
        if (n >= 2 * W) {                                                                  \
            memcpy(a, x, sizeof a);                                                        \
            bad = (a[0] != a[0]) | (a[1] != a[1]);                                         \
            M c = {0};                                                                     \
            for (i = 2 * W; i + 2 * W <= n; i += 2 * W) {                                  \
                V f[2];                                                                    \
                memcpy(f, x + i, sizeof f);                                                \
                c += 1;                                                                    \
                for (int k = 0; k < 2; k++) {                                              \
                    M g = GT(f[k], a[k]);                                                  \
                    a[k] = (V)(((M)f[k] & g) | ((M)a[k] & ~g));                            \
                    ix[k] = (c & g) | (ix[k] & ~g);                                        \
                    bad |= f[k] != f[k];                                                   \
                }                                                                          \
            }                                                                              \
            at = -1;                                                                       \
            for (int k = 0; k < 2; k++)                                                    \
                for (int l = 0; l < W; l++) {                                              \
                    int64_t e = (int64_t)ix[k][l] * 2 * W + k * W + l;                     \
                    if (at < 0 || GT(a[k][l], best) || (a[k][l] == best && e < at)) {      \
                        best = a[k][l];                                                    \
                        at = e;                                                            \
                    }                                                                      \
                }                                                                          \
        }                                                                                  \
        bool any = false;                                                                  \
        for (int l = 0; l < W; l++) any |= bad[l] != 0;                                    \
        for (; i < n; i++) {                                                               \
            if (x[i] != x[i]) any = true;                                                  \
            else if (GT(x[i], best)) {                                                     \
                best = x[i];                                                               \
                at = i;                                                                    \
            }                                                                              \
        }                                                                                  \
        *best_out = best;                                                                  \
        *at_out = at;                                                                      \
        *nan = any;                                                                        \
    }

/* acc = the better of acc and f per element, keeping acc where f is NaN (acc never is).
 * AVX-512: vmaxps/vminps return their second operand when either is NaN; which zero they
 * return may differ from the blend, which is allowed here (see rk_isa.max_f32). */
#if defined(RK_AVX512)
#define RK_BETTER_OF(acc, f, V, M, GT) ((acc) = RK_VOP_##GT##_##V((f), (acc)))
#define RK_VOP_RK_GT_rk_v16f(f, a) ((rk_v16f)_mm512_max_ps((__m512)(f), (__m512)(a)))
#define RK_VOP_RK_LT_rk_v16f(f, a) ((rk_v16f)_mm512_min_ps((__m512)(f), (__m512)(a)))
#define RK_VOP_RK_GT_rk_v8d(f, a) ((rk_v8d)_mm512_max_pd((__m512d)(f), (__m512d)(a)))
#define RK_VOP_RK_LT_rk_v8d(f, a) ((rk_v8d)_mm512_min_pd((__m512d)(f), (__m512d)(a)))
#else
#define RK_BETTER_OF(acc, f, V, M, GT)                                                     \
    do {                                                                                   \
        M g_ = GT((f), (acc));                                                             \
        (acc) = (V)(((M)(f) & g_) | ((M)(acc) & ~g_));                                     \
    } while (0)
#endif

RK_EXTREME(max_f32, argmax_f32, float, rk_v16f, rk_v16i, 16, RK_GT)
RK_EXTREME(min_f32, argmin_f32, float, rk_v16f, rk_v16i, 16, RK_LT)
RK_EXTREME(max_f64, argmax_f64, double, rk_v8d, rk_v8l, 8, RK_GT)
RK_EXTREME(min_f64, argmin_f64, double, rk_v8d, rk_v8l, 8, RK_LT)

/* ---- column steps ---- */

/* Sum/product in double: 16 outputs at a time, each row's 16 elements loaded as two VL and
 * widened to rk_v8d. */
#define RK_COL_ARITH(NAME, T, VL, OP)                                                      \
    RK_TARGET static void RK(NAME)(double *acc, const T *const *rows, int nrows, int64_t n)  \
    {                                                                                      \
        int64_t j = 0;                                                                     \
        for (; j + 16 <= n; j += 16) {                                                     \
            rk_v8d a[2];                                                                   \
            memcpy(a, acc + j, sizeof a);                                                  \
            for (int r = 0; r < nrows; r++) {                                              \
                a[0] = a[0] OP RK_LOAD8(VL, rows[r] + j);                                  \
                a[1] = a[1] OP RK_LOAD8(VL, rows[r] + j + 8);                              \
            }                                                                              \
            memcpy(acc + j, a, sizeof a);                                                  \
        }                                                                                  \
        for (; j < n; j++) {                                                               \
            double a = acc[j];                                                             \
            for (int r = 0; r < nrows; r++) a = a OP(double) rows[r][j];                   \
            acc[j] = a;                                                                    \
        }                                                                                  \
    }

/* eight elements at p as rk_v8d: widened f32 or loaded f64 */
#define RK_LOAD8(VL, p) RK_LOAD8_##VL(p)
#define RK_LOAD8_rk_v8f(p) RK_WIDEN8(p)
#define RK_LOAD8_rk_v8d(p) (*(const rk_u8d *)(p))
RK_COL_ARITH(col_sum_f32, float, rk_v8f, +)
RK_COL_ARITH(col_prod_f32, float, rk_v8f, *)
RK_COL_ARITH(col_sum_f64, double, rk_v8d, +)
RK_COL_ARITH(col_prod_f64, double, rk_v8d, *)

/* Max/min: acc of T, the exact step of cpu_reduce.c applied row after row. */
#define RK_COL_EXTREME(NAME, T, V, M, W, GT)                                               \
    RK_TARGET static void RK(NAME)(T *acc, const T *const *rows, int nrows, int64_t n)     \
    {                                                                                      \
        int64_t j = 0;                                                                     \
        for (; j + W <= n; j += W) {                                                       \
            V a;                                                                           \
            memcpy(&a, acc + j, sizeof a);                                                 \
            for (int r = 0; r < nrows; r++) {                                              \
                V f;                                                                       \
                memcpy(&f, rows[r] + j, sizeof f);                                         \
                M g = GT(f, a) | (f != f);                                                 \
                a = (V)(((M)f & g) | ((M)a & ~g));                                         \
            }                                                                              \
            memcpy(acc + j, &a, sizeof a);                                                 \
        }                                                                                  \
        for (; j < n; j++) {                                                               \
            T a = acc[j];                                                                  \
            for (int r = 0; r < nrows; r++) {                                              \
                const T v = rows[r][j];                                                    \
                if (GT(v, a) || v != v) a = v;                                             \
            }                                                                              \
            acc[j] = a;                                                                    \
        }                                                                                  \
    }

RK_COL_EXTREME(col_max_f32, float, rk_v16f, rk_v16i, 16, RK_GT)
RK_COL_EXTREME(col_min_f32, float, rk_v16f, rk_v16i, 16, RK_LT)
RK_COL_EXTREME(col_max_f64, double, rk_v8d, rk_v8l, 8, RK_GT)
RK_COL_EXTREME(col_min_f64, double, rk_v8d, rk_v8l, 8, RK_LT)

static const rk_isa RK(isa) = {
    .name = RK_NAME,
    .sum_f32 = RK(sum_f32),
    .sum_f64 = RK(sum_f64),
    .prod_f32 = RK(prod_f32),
    .prod_f64 = RK(prod_f64),
    .max_f32 = RK(max_f32),
    .min_f32 = RK(min_f32),
    .max_f64 = RK(max_f64),
    .min_f64 = RK(min_f64),
    .argmax_f32 = RK(argmax_f32),
    .argmin_f32 = RK(argmin_f32),
    .argmax_f64 = RK(argmax_f64),
    .argmin_f64 = RK(argmin_f64),
    .col_sum_f32 = RK(col_sum_f32),
    .col_sum_f64 = RK(col_sum_f64),
    .col_prod_f32 = RK(col_prod_f32),
    .col_prod_f64 = RK(col_prod_f64),
    .col_max_f32 = RK(col_max_f32),
    .col_min_f32 = RK(col_min_f32),
    .col_max_f64 = RK(col_max_f64),
    .col_min_f64 = RK(col_min_f64),
};

#undef RK_LANES_F32
#undef RK_LANES_F64
#undef RK_EXTREME
#undef RK_BETTER_OF
#undef RK_WIDEN8
#undef RK_COL_ARITH
#undef RK_COL_EXTREME
#undef RK
#undef RK_SUFFIX
#undef RK_TARGET
#undef RK_NAME
#undef RK_AVX512

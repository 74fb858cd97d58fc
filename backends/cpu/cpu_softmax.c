/* cpu_softmax.c — SOFTMAX and LOG_SOFTMAX along one axis (the contract is in engine/op.h).
 *
 * Why it is built this way: these two ops replace a composite the engine used to emit (MAX,
 * SUB, EXP, SUM, DIV, or LOG and SUB instead of DIV), and on this backend — the reference —
 * they must give the very same bits. So each step is the C expression the primitive kernels
 * evaluate, on the same values, in the same order: the max fold of cpu_reduce.c (from -inf,
 * ascending, NaN-propagating), x - m and expf/exp in the element type, the sum of the e_i in
 * double folded as SUM folds them (a contiguous row: td__cpu_sum_row_*, SUM's own row fold;
 * the strided tile: ascending index order from 0.0, SUM's column path) and rounded once to
 * the element type, then e / s, or (x - m) - logf(s). Fusing them reads the input two or
 * three times while it is still in cache instead of five full passes with three temporaries.
 *
 * Layout: a tensor [outer, n, inner] (n along the axis) has outer * inner rows of n elements
 * at stride inner. Threads split the rows with the pool's fixed partition and a row is
 * computed by one thread alone, so results never depend on the thread count. When inner is
 * 1 a row is a contiguous run; otherwise a tile of up to TILE neighbouring rows of one outer
 * index is processed together, one axis index at a time, so loads are unit-stride while each
 * row's folds keep their ascending order.
 */
#include "backends/cpu/cpu_internal.h"
#include "backends/cpu/cpu_reduce.h"
#include <math.h>
#include <stdbool.h>

/* Rows folded together on the strided path: their maxima, double sums and scales (20 KiB
 * for f64) stay in L1 while a stripe of the input streams past. */
#define TILE 1024

/* cpu_reduce.c's MAX step: a NaN replaces the accumulator, a larger value too. */
#define STEP_MAX_F(acc, v) ((acc) = ((v) > (acc) || (v) != (v)) ? (v) : (acc))

/* Generates, for element type T with its exp and log:
 *   NAME_row(x, y, n, lg):            one contiguous row of n elements;
 *   NAME_tile(x, y, n, stride, c, lg): c neighbouring rows, element k of row j at
 *                                      k * stride + j;
 * lg selects log_softmax. */
#define SOFTMAX_KERNEL(NAME, T, EXP, LOG, SUMROW)                                          \
    static void NAME##_row(const T *restrict x, T *restrict y, int64_t n, bool lg)         \
    {                                                                                      \
        T m = -INFINITY;                                                                   \
        for (int64_t k = 0; k < n; k++) {                                                  \
            const T v = x[k];                                                              \
            STEP_MAX_F(m, v);                                                              \
        }                                                                                  \
        /* e_i go to y first: SUM's row fold reads them from there */                     \
        for (int64_t k = 0; k < n; k++) y[k] = EXP(x[k] - m);                              \
        const double acc = SUMROW(y, n);                                                   \
        if (!lg) {                                                                         \
            const T s = (T)acc;                                                            \
            for (int64_t k = 0; k < n; k++) y[k] = y[k] / s;                               \
        } else {                                                                           \
            const T ls = LOG((T)acc);                                                      \
            for (int64_t k = 0; k < n; k++) y[k] = (x[k] - m) - ls;                        \
        }                                                                                  \
    }                                                                                      \
    static void NAME##_tile(const T *x, T *y, int64_t n, int64_t stride, int64_t c,        \
                            bool lg)                                                       \
    {                                                                                      \
        T m[TILE], s[TILE];                                                                \
        double acc[TILE];                                                                  \
        for (int64_t j = 0; j < c; j++) {                                                  \
            m[j] = -INFINITY;                                                              \
            acc[j] = 0.0;                                                                  \
        }                                                                                  \
        for (int64_t k = 0; k < n; k++) {                                                  \
            const T *restrict xr = x + k * stride;                                         \
            for (int64_t j = 0; j < c; j++) {                                              \
                const T v = xr[j];                                                         \
                STEP_MAX_F(m[j], v);                                                       \
            }                                                                              \
        }                                                                                  \
        for (int64_t k = 0; k < n; k++) {                                                  \
            const T *restrict xr = x + k * stride;                                         \
            T *restrict yr = y + k * stride;                                               \
            for (int64_t j = 0; j < c; j++) {                                              \
                const T e = EXP(xr[j] - m[j]);                                             \
                if (!lg) yr[j] = e;                                                        \
                acc[j] += (double)e;                                                       \
            }                                                                              \
        }                                                                                  \
        for (int64_t j = 0; j < c; j++) s[j] = lg ? LOG((T)acc[j]) : (T)acc[j];            \
        for (int64_t k = 0; k < n; k++) {                                                  \
            const T *restrict xr = x + k * stride;                                         \
            T *restrict yr = y + k * stride;                                               \
            if (lg) {                                                                      \
                for (int64_t j = 0; j < c; j++) yr[j] = (xr[j] - m[j]) - s[j];             \
            } else {                                                                       \
                for (int64_t j = 0; j < c; j++) yr[j] = yr[j] / s[j];                      \
            }                                                                              \
        }                                                                                  \
    }

SOFTMAX_KERNEL(softmax_f32, float, expf, logf, td__cpu_sum_row_f32)
SOFTMAX_KERNEL(softmax_f64, double, exp, log, td__cpu_sum_row_f64)

typedef struct sm_task {
    const void *x;
    void *y;
    uint32_t dtype;
    bool lg; /* log_softmax */
    int64_t n, inner; /* axis length, product of the dims after the axis */
} sm_task;

/* Rows [lo, hi): row r is (outer index r / inner, column r % inner). */
static void softmax_chunk(void *ctx, int64_t lo, int64_t hi)
{
    const sm_task *t = ctx;
    const int64_t n = t->n, inner = t->inner;
    int64_t r = lo;
    while (r < hi) {
        const int64_t o = r / inner, j = r % inner;
        int64_t c = 1;
        if (inner > 1) {
            c = hi - r;
            if (c > inner - j) c = inner - j;
            if (c > TILE) c = TILE;
        }
        const int64_t at = o * n * inner + j;
        if (t->dtype == TD_F32) {
            const float *x = (const float *)t->x + at;
            float *y = (float *)t->y + at;
            if (inner == 1) softmax_f32_row(x, y, n, t->lg);
            else softmax_f32_tile(x, y, n, inner, c, t->lg);
        } else {
            const double *x = (const double *)t->x + at;
            double *y = (double *)t->y + at;
            if (inner == 1) softmax_f64_row(x, y, n, t->lg);
            else softmax_f64_tile(x, y, n, inner, c, t->lg);
        }
        r += c;
    }
}

td_status td__cpu_exec_softmax(const td__cpu_exec *x, const td__op *op, const td__view *in,
                               const td__view *out)
{
    const td__desc *d = &in[0].desc;
    const int64_t ax = op->n_iattrs == 1 ? op->iattrs[0] : -1;
    if (ax < 0 || ax >= (int64_t)d->rank || !td__dtype_is_float(d->dtype) ||
        out->desc.dtype != d->dtype)
        return td__cpu_fail(x, TD_EINTERNAL, "cpu: %s on dtype %u along axis %lld of rank %u",
                            op->opcode == TD_OP_LOG_SOFTMAX ? "log_softmax" : "softmax",
                            d->dtype, (long long)ax, d->rank);
    sm_task t = {.x = in[0].data,
                 .y = out->data,
                 .dtype = d->dtype,
                 .lg = op->opcode == TD_OP_LOG_SOFTMAX,
                 .n = d->dims[ax],
                 .inner = 1};
    int64_t outer = 1;
    for (int64_t i = 0; i < ax; i++) outer *= d->dims[i];
    for (uint32_t i = (uint32_t)ax + 1; i < d->rank; i++) t.inner *= d->dims[i];
    const int64_t rows = outer * t.inner;
    if (rows == 0 || t.n == 0) return TD_OK;
    td__cpu_run(x, rows, t.n, softmax_chunk, &t);
    return TD_OK;
}

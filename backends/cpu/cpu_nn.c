/* cpu_nn.c — the normalisations (LAYER_NORM RMS_NORM GROUP_NORM BATCH_NORM), their
 * backward ops, and DROPOUT (the op table's TD_OPCLASS_NN rows; formulas in their rows and
 * in include/tensord.h).
 *
 * Why one "group" kernel: every normalisation reduces some set of elements (a group) to a
 * mean and a reciprocal standard deviation and then maps each element of the group. A group
 * is `nseg` segments of `seglen` contiguous elements, segment s starting `segstride`
 * elements after segment s - 1:
 *   LAYER_NORM / RMS_NORM: a row of n = prod(dims[axis..]) elements (one segment), the
 *                          weight and bias indexed by the element's place in the row;
 *   GROUP_NORM:            x [N, C, S...] seen as [N, G, C/G, S]: C/G segments of S, the
 *                          parameters indexed by the segment's channel;
 *   BATCH_NORM_BACKWARD:   channel c: N segments of S, stride C S, one channel.
 * BATCH_NORM itself (given statistics) is elementwise.
 *
 * Arithmetic: every dtype is widened to double; sums run in double, the per-element formula
 * too, and the result is rounded once to the dtype (f16/bf16 therefore accumulate in better
 * than the f32 the issue asks for). Statistics are two-pass (mean, then the sum of squared
 * deviations from it), so a large mean does not cancel the variance. Each contiguous run is
 * folded into 16 lane accumulators (element j into lane j % 16) that are then added in lane
 * order: a fixed association that depends on the shape alone and lets the compiler keep the
 * lanes in vector registers without reassociating anything (-ffp-contract is off in ISO C
 * mode, so no fused multiply-add changes a rounding either).
 *
 * Threads split the groups with the pool's fixed partition and one group is computed by one
 * thread, so results never depend on the thread count.
 *
 * DROPOUT: element i keeps x_i when u_i >= p, u_i = td__philox_u24(word i % 4 of block i / 4)
 * of the op's seed (engine/philox.h: the f32 uniform's 24-bit u for every dtype), and gives
 * x_i * m_i with m_i = 1/(1-p) (rounded to the compute type: float for f32/f16/bf16, double
 * for f64) or 0: one IEEE multiply, so every backend gives the same bits.
 */
#include "backends/cpu/cpu_internal.h"
#include "engine/philox.h"
#include <math.h>
#include <stdbool.h>
#include <string.h>

#define LANES 16

/* ---- element access: every dtype widened to double, results rounded once ---- */

static inline double ld(uint32_t dt, const void *p, int64_t i)
{
    switch (dt) {
    case TD_F32: return ((const float *)p)[i];
    case TD_F64: return ((const double *)p)[i];
    case TD_F16: return td__f16_to_f32(((const uint16_t *)p)[i]);
    default: return td__bf16_to_f32(((const uint16_t *)p)[i]);
    }
}

static inline void st(uint32_t dt, void *p, int64_t i, double v)
{
    switch (dt) {
    case TD_F32: ((float *)p)[i] = (float)v; break;
    case TD_F64: ((double *)p)[i] = v; break;
    case TD_F16: ((uint16_t *)p)[i] = td__f64_to_f16(v); break;
    default: ((uint16_t *)p)[i] = td__f64_to_bf16(v); break;
    }
}

/* Lane folds of one contiguous run of n elements: sum x, sum (x - m)^2. The f32 and f64
 * versions are the same code on typed pointers, so the compiler vectorises them. */
#define LANE_FOLDS(SUF, T)                                                                 \
    static double sum_##SUF(const T *restrict x, int64_t n)                                \
    {                                                                                      \
        double acc[LANES] = {0};                                                           \
        int64_t j = 0;                                                                     \
        for (; j + LANES <= n; j += LANES)                                                 \
            for (int l = 0; l < LANES; l++) acc[l] += (double)x[j + l];                    \
        for (int l = 0; j + l < n; l++) acc[l] += (double)x[j + l];                        \
        double s = 0.0;                                                                    \
        for (int l = 0; l < LANES; l++) s += acc[l];                                       \
        return s;                                                                          \
    }                                                                                      \
    static double sumsq_##SUF(const T *restrict x, int64_t n, double m)                    \
    {                                                                                      \
        double acc[LANES] = {0};                                                           \
        int64_t j = 0;                                                                     \
        for (; j + LANES <= n; j += LANES)                                                 \
            for (int l = 0; l < LANES; l++) {                                              \
                const double d = (double)x[j + l] - m;                                     \
                acc[l] += d * d;                                                           \
            }                                                                              \
        for (int l = 0; j + l < n; l++) {                                                  \
            const double d = (double)x[j + l] - m;                                         \
            acc[l] += d * d;                                                               \
        }                                                                                  \
        double s = 0.0;                                                                    \
        for (int l = 0; l < LANES; l++) s += acc[l];                                       \
        return s;                                                                          \
    }
LANE_FOLDS(f32, float)
LANE_FOLDS(f64, double)

/* Contiguous rows (LAYER_NORM RMS_NORM and their backward ops on f32/f64): the group
 * kernel's arithmetic on typed pointers, so the compiler vectorises every pass, stamped for
 * the baseline ISA, AVX2 and AVX-512 (picked at run time). Same expressions, same lane
 * association and no contraction (ISO C), so every copy gives the generic path's bits. */
#define ROW_KERNELS(SUF, T, ATTR)                                                          \
    ATTR static double rsum_##SUF(const T *restrict x, int64_t n, double m, bool sq)       \
    {                                                                                      \
        double acc[LANES] = {0};                                                           \
        int64_t j = 0;                                                                     \
        if (sq) {                                                                          \
            for (; j + LANES <= n; j += LANES)                                             \
                for (int l = 0; l < LANES; l++) {                                          \
                    const double d = (double)x[j + l] - m;                                 \
                    acc[l] += d * d;                                                       \
                }                                                                          \
            for (int l = 0; j + l < n; l++) {                                              \
                const double d = (double)x[j + l] - m;                                     \
                acc[l] += d * d;                                                           \
            }                                                                              \
        } else {                                                                           \
            for (; j + LANES <= n; j += LANES)                                             \
                for (int l = 0; l < LANES; l++) acc[l] += (double)x[j + l];                \
            for (int l = 0; j + l < n; l++) acc[l] += (double)x[j + l];                    \
        }                                                                                  \
        double s = 0.0;                                                                    \
        for (int l = 0; l < LANES; l++) s += acc[l];                                       \
        return s;                                                                          \
    }                                                                                      \
    ATTR static void rowf_##SUF(const T *restrict x, const T *w, const T *b, T *restrict y, \
                                int64_t n, double eps, bool rms)                           \
    {                                                                                      \
        const double mean = rms ? 0.0 : rsum_##SUF(x, n, 0.0, false) / (double)n;         \
        const double r = 1.0 / sqrt(rsum_##SUF(x, n, mean, true) / (double)n + eps);       \
        if (w != NULL && b != NULL) {                                                      \
            for (int64_t j = 0; j < n; j++)                                                \
                y[j] = (T)(((double)x[j] - mean) * r * (double)w[j] + (double)b[j]);       \
        } else if (w != NULL) {                                                            \
            for (int64_t j = 0; j < n; j++) y[j] = (T)(((double)x[j] - mean) * r * (double)w[j]); \
        } else if (b != NULL) {                                                            \
            for (int64_t j = 0; j < n; j++) y[j] = (T)(((double)x[j] - mean) * r + (double)b[j]); \
        } else {                                                                           \
            for (int64_t j = 0; j < n; j++) y[j] = (T)(((double)x[j] - mean) * r);         \
        }                                                                                  \
    }                                                                                      \
    ATTR static void rowb_##SUF(const T *restrict dy, const T *restrict x, const T *w,     \
                                T *restrict y, int64_t n, double eps, bool rms)            \
    {                                                                                      \
        const double mean = rms ? 0.0 : rsum_##SUF(x, n, 0.0, false) / (double)n;         \
        const double r = 1.0 / sqrt(rsum_##SUF(x, n, mean, true) / (double)n + eps);       \
        double ag[LANES] = {0}, agx[LANES] = {0};                                          \
        int64_t j = 0;                                                                     \
        if (w != NULL) {                                                                   \
            for (; j + LANES <= n; j += LANES)                                             \
                for (int l = 0; l < LANES; l++) {                                          \
                    const double g = (double)dy[j + l] * (double)w[j + l];                 \
                    ag[l] += g;                                                            \
                    agx[l] += g * (((double)x[j + l] - mean) * r);                         \
                }                                                                          \
        } else {                                                                           \
            for (; j + LANES <= n; j += LANES)                                             \
                for (int l = 0; l < LANES; l++) {                                          \
                    const double g = (double)dy[j + l];                                    \
                    ag[l] += g;                                                            \
                    agx[l] += g * (((double)x[j + l] - mean) * r);                         \
                }                                                                          \
        }                                                                                  \
        for (int l = 0; j + l < n; l++) {                                                  \
            double g = (double)dy[j + l];                                                  \
            if (w != NULL) g *= (double)w[j + l];                                          \
            ag[l] += g;                                                                    \
            agx[l] += g * (((double)x[j + l] - mean) * r);                                 \
        }                                                                                  \
        double sg = 0.0, sgx = 0.0;                                                        \
        for (int l = 0; l < LANES; l++) {                                                  \
            sg += ag[l];                                                                   \
            sgx += agx[l];                                                                 \
        }                                                                                  \
        const double mg = rms ? 0.0 : sg / (double)n, mgx = sgx / (double)n;               \
        if (w != NULL) {                                                                   \
            for (j = 0; j < n; j++) {                                                      \
                const double g = (double)dy[j] * (double)w[j];                             \
                const double xh = ((double)x[j] - mean) * r;                               \
                y[j] = (T)(r * (g - mg - xh * mgx));                                       \
            }                                                                              \
        } else {                                                                           \
            for (j = 0; j < n; j++) {                                                      \
                const double xh = ((double)x[j] - mean) * r;                               \
                y[j] = (T)(r * ((double)dy[j] - mg - xh * mgx));                           \
            }                                                                              \
        }                                                                                  \
    }
ROW_KERNELS(f32_base, float, )
ROW_KERNELS(f64_base, double, )
ROW_KERNELS(f32_avx2, float, __attribute__((target("avx2"))))
ROW_KERNELS(f64_avx2, double, __attribute__((target("avx2"))))
ROW_KERNELS(f32_avx512, float, __attribute__((target("avx512f"))))
ROW_KERNELS(f64_avx512, double, __attribute__((target("avx512f"))))

typedef struct row_isa {
    void (*f32f)(const float *, const float *, const float *, float *, int64_t, double, bool);
    void (*f64f)(const double *, const double *, const double *, double *, int64_t, double,
                 bool);
    void (*f32b)(const float *, const float *, const float *, float *, int64_t, double, bool);
    void (*f64b)(const double *, const double *, const double *, double *, int64_t, double,
                 bool);
} row_isa;

static const row_isa row_base = {rowf_f32_base, rowf_f64_base, rowb_f32_base, rowb_f64_base};
static const row_isa row_avx2 = {rowf_f32_avx2, rowf_f64_avx2, rowb_f32_avx2, rowb_f64_avx2};
static const row_isa row_avx512 = {rowf_f32_avx512, rowf_f64_avx512, rowb_f32_avx512,
                                   rowb_f64_avx512};

static const row_isa *row_kernels(void)
{
    if (__builtin_cpu_supports("avx512f")) return &row_avx512;
    if (__builtin_cpu_supports("avx2")) return &row_avx2;
    return &row_base;
}

/* The same folds for any dtype (f16/bf16 through ld), same association. */
static double sum_any(uint32_t dt, const void *x, int64_t off, int64_t n, double m, bool sq)
{
    if (dt == TD_F32)
        return sq ? sumsq_f32((const float *)x + off, n, m) : sum_f32((const float *)x + off, n);
    if (dt == TD_F64)
        return sq ? sumsq_f64((const double *)x + off, n, m)
                  : sum_f64((const double *)x + off, n);
    double acc[LANES] = {0};
    for (int64_t j = 0; j < n; j++) {
        const double v = ld(dt, x, off + j), d = v - m;
        acc[j % LANES] += sq ? d * d : v;
    }
    double s = 0.0;
    for (int l = 0; l < LANES; l++) s += acc[l];
    return s;
}

/* ---- the group kernel ---- */

enum nn_kind { NN_LAYER, NN_RMS, NN_LAYER_BWD, NN_RMS_BWD };

typedef struct nn_task {
    uint32_t dt;
    enum nn_kind kind; /* GROUP_NORM(_BACKWARD) and BATCH_NORM_BACKWARD are NN_LAYER(_BWD) */
    const void *x, *dy, *w, *b;
    void *y;
    double eps;
    int64_t nseg, seglen, segstride; /* a group's segments */
    int64_t gstride;                 /* group k's first element: (k / gdiv) * gstride +
                                      * (k % gdiv) * gstep */
    int64_t gdiv, gstep;
    bool w_elem;      /* parameter index: the element's place in the segment (LN/RMS) */
    int64_t pdiv;     /* else the segment's channel (k % pdiv) * pmul + s * pseg */
    int64_t pmul, pseg;
    const row_isa *rows; /* contiguous f32/f64 rows (LN, RMS): the typed kernels; else NULL */
} nn_task;

static inline int64_t group_base(const nn_task *t, int64_t k)
{
    return (k / t->gdiv) * t->gstride + (k % t->gdiv) * t->gstep;
}

/* The parameter index of element j of segment s of group k. */
static inline int64_t pidx(const nn_task *t, int64_t k, int64_t s, int64_t j)
{
    return t->w_elem ? j : (k % t->pdiv) * t->pmul + s * t->pseg;
}

/* Forward: y = (x - mean) r w + b (LN, GN) or x r w (RMS). */
static void nn_forward_group(const nn_task *t, int64_t k)
{
    const uint32_t dt = t->dt;
    const int64_t base = group_base(t, k), n = t->nseg * t->seglen;
    double mean = 0.0, ss = 0.0;
    if (t->kind == NN_LAYER) {
        for (int64_t s = 0; s < t->nseg; s++)
            mean += sum_any(dt, t->x, base + s * t->segstride, t->seglen, 0.0, false);
        mean /= (double)n;
    }
    for (int64_t s = 0; s < t->nseg; s++)
        ss += sum_any(dt, t->x, base + s * t->segstride, t->seglen, mean, true);
    const double r = 1.0 / sqrt(ss / (double)n + t->eps);
    for (int64_t s = 0; s < t->nseg; s++) {
        const int64_t o = base + s * t->segstride;
        for (int64_t j = 0; j < t->seglen; j++) {
            const int64_t p = pidx(t, k, s, j);
            double v = (ld(dt, t->x, o + j) - mean) * r;
            if (t->w != NULL) v *= ld(dt, t->w, p);
            if (t->b != NULL) v += ld(dt, t->b, p);
            st(dt, t->y, o + j, v);
        }
    }
}

/* Backward: with g = dy w and xhat = (x - mean) r (RMS: x r),
 *   LN: dx = r (g - mean(g) - xhat mean(g xhat));   RMS: dx = r (g - xhat mean(g xhat)). */
static void nn_backward_group(const nn_task *t, int64_t k)
{
    const uint32_t dt = t->dt;
    const int64_t base = group_base(t, k), n = t->nseg * t->seglen;
    const bool layer = t->kind == NN_LAYER_BWD;
    double mean = 0.0, ss = 0.0;
    if (layer) {
        for (int64_t s = 0; s < t->nseg; s++)
            mean += sum_any(dt, t->x, base + s * t->segstride, t->seglen, 0.0, false);
        mean /= (double)n;
    }
    for (int64_t s = 0; s < t->nseg; s++)
        ss += sum_any(dt, t->x, base + s * t->segstride, t->seglen, mean, true);
    const double r = 1.0 / sqrt(ss / (double)n + t->eps);
    double ag[LANES] = {0}, agx[LANES] = {0};
    for (int64_t s = 0; s < t->nseg; s++) {
        const int64_t o = base + s * t->segstride;
        for (int64_t j = 0; j < t->seglen; j++) {
            double g = ld(dt, t->dy, o + j);
            if (t->w != NULL) g *= ld(dt, t->w, pidx(t, k, s, j));
            const double xh = (ld(dt, t->x, o + j) - mean) * r;
            ag[j % LANES] += g;
            agx[j % LANES] += g * xh;
        }
    }
    double sg = 0.0, sgx = 0.0;
    for (int l = 0; l < LANES; l++) {
        sg += ag[l];
        sgx += agx[l];
    }
    const double mg = layer ? sg / (double)n : 0.0, mgx = sgx / (double)n;
    for (int64_t s = 0; s < t->nseg; s++) {
        const int64_t o = base + s * t->segstride;
        for (int64_t j = 0; j < t->seglen; j++) {
            double g = ld(dt, t->dy, o + j);
            if (t->w != NULL) g *= ld(dt, t->w, pidx(t, k, s, j));
            const double xh = (ld(dt, t->x, o + j) - mean) * r;
            st(dt, t->y, o + j, r * (g - mg - xh * mgx));
        }
    }
}

static void nn_chunk(void *ctx, int64_t lo, int64_t hi)
{
    const nn_task *t = ctx;
    if (t->rows != NULL) {
        const int64_t n = t->seglen;
        const bool rms = t->kind == NN_RMS || t->kind == NN_RMS_BWD;
        const bool bwd = t->kind == NN_LAYER_BWD || t->kind == NN_RMS_BWD;
        for (int64_t k = lo; k < hi; k++) {
            if (t->dt == TD_F32) {
                const float *x = (const float *)t->x + k * n;
                float *y = (float *)t->y + k * n;
                if (bwd) t->rows->f32b((const float *)t->dy + k * n, x, t->w, y, n, t->eps, rms);
                else t->rows->f32f(x, t->w, t->b, y, n, t->eps, rms);
            } else {
                const double *x = (const double *)t->x + k * n;
                double *y = (double *)t->y + k * n;
                if (bwd) t->rows->f64b((const double *)t->dy + k * n, x, t->w, y, n, t->eps, rms);
                else t->rows->f64f(x, t->w, t->b, y, n, t->eps, rms);
            }
        }
        return;
    }
    for (int64_t k = lo; k < hi; k++) {
        if (t->kind == NN_LAYER || t->kind == NN_RMS) nn_forward_group(t, k);
        else nn_backward_group(t, k);
    }
}

/* ---- BATCH_NORM with given statistics: elementwise over [N, C, S] ---- */

typedef struct bn_task {
    uint32_t dt;
    const void *x, *mean, *var, *w, *b;
    void *y;
    double eps;
    int64_t c, s; /* channels, elements per (n, c) */
} bn_task;

/* Rows [lo, hi) of S elements; row q is channel q % C. */
static void bn_chunk(void *ctx, int64_t lo, int64_t hi)
{
    const bn_task *t = ctx;
    const uint32_t dt = t->dt;
    for (int64_t q = lo; q < hi; q++) {
        const int64_t c = q % t->c, o = q * t->s;
        const double m = ld(dt, t->mean, c);
        const double r = 1.0 / sqrt(ld(dt, t->var, c) + t->eps);
        const double w = t->w != NULL ? ld(dt, t->w, c) : 1.0;
        const double b = t->b != NULL ? ld(dt, t->b, c) : 0.0;
        for (int64_t j = 0; j < t->s; j++) {
            double v = (ld(dt, t->x, o + j) - m) * r;
            if (t->w != NULL) v *= w;
            if (t->b != NULL) v += b;
            st(dt, t->y, o + j, v);
        }
    }
}

/* ---- DROPOUT ---- */

typedef struct drop_task {
    uint32_t dt;
    const void *x;
    void *y;
    double p;
    uint64_t seed;
} drop_task;

/* Elements [4 lo, 4 hi): one Philox block of 4 each (the last may be partial: n_total). */
typedef struct drop_ctx {
    const drop_task *t;
    int64_t n;
} drop_ctx;

static void drop_chunk(void *ctx, int64_t lo, int64_t hi)
{
    const drop_ctx *c = ctx;
    const drop_task *t = c->t;
    const float sf = (float)(1.0 / (1.0 - t->p));
    const double sd = 1.0 / (1.0 - t->p);
    for (int64_t b = lo; b < hi; b++) {
        uint32_t w[4];
        td__philox_block(t->seed, (uint64_t)b, w);
        for (int q = 0; q < 4; q++) {
            const int64_t i = b * 4 + q;
            if (i >= c->n) break;
            const bool keep = td__philox_u24(w[q]) >= t->p;
            switch (t->dt) {
            case TD_F32:
                ((float *)t->y)[i] = ((const float *)t->x)[i] * (keep ? sf : 0.0f);
                break;
            case TD_F64:
                ((double *)t->y)[i] = ((const double *)t->x)[i] * (keep ? sd : 0.0);
                break;
            case TD_F16:
                ((uint16_t *)t->y)[i] = td__f32_to_f16(
                    td__f16_to_f32(((const uint16_t *)t->x)[i]) * (keep ? sf : 0.0f));
                break;
            default:
                ((uint16_t *)t->y)[i] = td__f32_to_bf16(
                    td__bf16_to_f32(((const uint16_t *)t->x)[i]) * (keep ? sf : 0.0f));
                break;
            }
        }
    }
}

/* ---- dispatch ---- */

td_status td__cpu_exec_nn(const td__cpu_exec *x, const td__op *op, const td__view *in,
                          const td__view *out)
{
    const uint32_t dt = out->desc.dtype;
    if (!td__dtype_is_float(dt))
        return td__cpu_fail(x, TD_EINTERNAL, "cpu: %s on dtype %u", td__op_name(op->opcode), dt);
    const int64_t total = td__cpu_nelem(&out->desc);
    if (total == 0) return TD_OK;
    const double eps = op->fattrs[0];
    if (op->opcode == TD_OP_DROPOUT) {
        drop_task t = {.dt = dt, .x = in[0].data, .y = out->data, .p = op->fattrs[0],
                       .seed = op->seed};
        drop_ctx c = {.t = &t, .n = total};
        td__cpu_run(x, (total + 3) / 4, 16, drop_chunk, &c);
        return TD_OK;
    }
    if (op->opcode == TD_OP_BATCH_NORM) {
        const td__desc *d = &in[0].desc;
        bn_task t = {.dt = dt, .x = in[0].data, .mean = in[1].data, .var = in[2].data,
                     .w = op->n_inputs > 3 ? in[3].data : NULL,
                     .b = op->n_inputs > 4 ? in[4].data : NULL,
                     .y = out->data, .eps = eps, .c = d->dims[1], .s = 1};
        for (uint32_t i = 2; i < d->rank; i++) t.s *= d->dims[i];
        td__cpu_run(x, total / t.s, t.s, bn_chunk, &t);
        return TD_OK;
    }
    const bool bwd = op->opcode == TD_OP_LAYER_NORM_BACKWARD ||
                     op->opcode == TD_OP_RMS_NORM_BACKWARD ||
                     op->opcode == TD_OP_GROUP_NORM_BACKWARD ||
                     op->opcode == TD_OP_BATCH_NORM_BACKWARD;
    const uint32_t xi = bwd ? 1 : 0;
    const td__desc *d = &in[xi].desc;
    nn_task t = {.dt = dt, .x = in[xi].data, .dy = bwd ? in[0].data : NULL,
                 .w = op->n_inputs > xi + 1 ? in[xi + 1].data : NULL,
                 .b = !bwd && op->n_inputs > 2 ? in[2].data : NULL,
                 .y = out->data, .eps = eps, .nseg = 1, .gdiv = 1, .gstep = 0, .pdiv = 1};
    int64_t ngroups;
    switch (op->opcode) {
    case TD_OP_LAYER_NORM: case TD_OP_RMS_NORM:
    case TD_OP_LAYER_NORM_BACKWARD: case TD_OP_RMS_NORM_BACKWARD: {
        int64_t n = 1;
        for (uint32_t i = (uint32_t)op->iattrs[0]; i < d->rank; i++) n *= d->dims[i];
        t.kind = op->opcode == TD_OP_LAYER_NORM            ? NN_LAYER
                 : op->opcode == TD_OP_RMS_NORM            ? NN_RMS
                 : op->opcode == TD_OP_LAYER_NORM_BACKWARD ? NN_LAYER_BWD
                                                           : NN_RMS_BWD;
        t.seglen = t.segstride = t.gstride = n;
        t.w_elem = true;
        if (dt == TD_F32 || dt == TD_F64) t.rows = row_kernels();
        ngroups = total / n;
        break;
    }
    case TD_OP_GROUP_NORM: case TD_OP_GROUP_NORM_BACKWARD: {
        const int64_t c = d->dims[1], g = op->iattrs[0];
        int64_t s = 1;
        for (uint32_t i = 2; i < d->rank; i++) s *= d->dims[i];
        t.kind = bwd ? NN_LAYER_BWD : NN_LAYER;
        t.nseg = c / g;
        t.seglen = t.segstride = s;
        t.gstride = t.nseg * s;
        t.pdiv = g;
        t.pmul = c / g;
        t.pseg = 1;
        ngroups = total / t.gstride;
        break;
    }
    default: { /* BATCH_NORM_BACKWARD: channel k is N segments of S at stride C S */
        const int64_t c = d->dims[1];
        int64_t s = 1;
        for (uint32_t i = 2; i < d->rank; i++) s *= d->dims[i];
        t.kind = NN_LAYER_BWD;
        t.nseg = d->dims[0];
        t.seglen = s;
        t.segstride = c * s;
        t.gdiv = c;
        t.gstride = 0;
        t.gstep = s;
        t.pdiv = c;
        t.pmul = 1;
        t.pseg = 0;
        ngroups = c;
        break;
    }
    }
    if (ngroups == 0 || t.nseg * t.seglen == 0) return TD_OK;
    td__cpu_run(x, ngroups, t.nseg * t.seglen * (bwd ? 4 : 3), nn_chunk, &t);
    return TD_OK;
}

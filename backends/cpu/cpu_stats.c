/* cpu_stats.c — the reductions that fold more than one running value: VAR STD LOGSUMEXP NORM
 * ANY ALL, and ARGMAX/ARGMIN over several axes (cpu_reduce.c does one axis).
 *
 * Why a file of its own: these ops are rarely the hot loop of a model, and each needs two
 * passes or a pair of accumulators, so they are written once as a plain fold per output in
 * a fixed order rather than stamped into cpu_reduce.c's blocked lane kernels. The contract
 * (what every backend computes; tests/unit/backends/conformance.c states the bound):
 *
 * Each output folds its reduced elements in row-major order over the reduced axes (the
 * order engine/collapse.h's plan walks), in double (f16/bf16/f32 are widened exactly):
 *   VAR       mean = (sum x) / n; var = sum (x - mean)^2 / max(0, n - correction)
 *             (PyTorch's torch.var: n - correction <= 0 divides by 0, giving inf, or NaN
 *             when the sum is 0 or n is 0);
 *   STD       sqrt(VAR);
 *   LOGSUMEXP m = max x; a NaN gives NaN; m = +-inf gives m; n = 0 gives -inf; else
 *             m + log(sum exp(x - m)) (torch.logsumexp);
 *   NORM      p = 0: count of x != 0 (NaN counts); p = +inf: max |x| (0 when n = 0); p = -inf: min |x|
 *             (+inf when n = 0); p = 1: sum |x|; p = 2: sqrt(sum x^2); any other p:
 *             (sum |x|^p)^(1/p) (torch.linalg.vector_norm); otherwise a NaN gives NaN;
 *   ANY / ALL whether some / every element is != 0 (NaN is != 0; a bool byte is true when
 *             nonzero); n = 0 gives false / true;
 *   ARGMAX/ARGMIN the first position (row-major over the reduced axes) of the largest /
 *             smallest value, or of the first NaN; integers compared exactly, bool bytes
 *             as raw bytes (as cpu_reduce.c's one-axis ARGMAX does).
 * The result is rounded once to the output dtype. Outputs are independent, so any thread
 * may compute any of them and the bits do not depend on the thread count.
 */
#include "backends/cpu/cpu_internal.h"
#include "engine/collapse.h"
#include <math.h>

typedef td__reduce_plan red_plan;

static int64_t kept_offset(const red_plan *p, int64_t o)
{
    int64_t off = 0;
    for (int g = p->nk - 1; g >= 0; g--) {
        off += (o % p->ksize[g]) * p->kstride[g];
        o /= p->ksize[g];
    }
    return off;
}

static double load_f(uint32_t dt, const void *b, int64_t i)
{
    switch (dt) {
    case TD_F32: return ((const float *)b)[i];
    case TD_F64: return ((const double *)b)[i];
    case TD_F16: return td__f16_to_f32(((const uint16_t *)b)[i]);
    case TD_BF16: return td__bf16_to_f32(((const uint16_t *)b)[i]);
    case TD_I32: return ((const int32_t *)b)[i];
    case TD_I64: return (double)((const int64_t *)b)[i];
    case TD_I8: return ((const int8_t *)b)[i];
    case TD_I16: return ((const int16_t *)b)[i];
    case TD_BOOL: return ((const uint8_t *)b)[i] != 0;
    default: return ((const uint8_t *)b)[i];
    }
}

static int64_t load_i(uint32_t dt, const void *b, int64_t i)
{
    switch (dt) {
    case TD_I32: return ((const int32_t *)b)[i];
    case TD_I64: return ((const int64_t *)b)[i];
    case TD_I8: return ((const int8_t *)b)[i];
    case TD_I16: return ((const int16_t *)b)[i];
    default: return ((const uint8_t *)b)[i];
    }
}

/* Visit the reduced elements of the output at kept offset `base` in row-major order:
 * BODY sees OFF, the element offset. */
#define FOR_EACH_REDUCED(p, base, OFF, BODY)                                               \
    do {                                                                                   \
        if ((p)->rcount == 0) break;                                                       \
        int64_t idx_[TD_MAX_RANK] = {0}, off0_ = (base);                                   \
        const int nr_ = (p)->nr;                                                           \
        const int64_t inner_ = nr_ > 0 ? (p)->rsize[nr_ - 1] : 1;                          \
        const int64_t ist_ = nr_ > 0 ? (p)->rstride[nr_ - 1] : 0;                          \
        for (;;) {                                                                         \
            for (int64_t j_ = 0; j_ < inner_; j_++) {                                      \
                const int64_t OFF = off0_ + j_ * ist_;                                     \
                BODY                                                                       \
            }                                                                              \
            int g_ = nr_ - 2;                                                              \
            for (; g_ >= 0; g_--) {                                                        \
                idx_[g_]++;                                                                \
                off0_ += (p)->rstride[g_];                                                 \
                if (idx_[g_] < (p)->rsize[g_]) break;                                      \
                off0_ -= idx_[g_] * (p)->rstride[g_];                                      \
                idx_[g_] = 0;                                                              \
            }                                                                              \
            if (g_ < 0) break;                                                             \
        }                                                                                  \
    } while (0)

typedef struct stat_task {
    red_plan plan;
    uint32_t opcode, dt, out_dt;
    double f0; /* correction or p */
    const void *x;
    void *out;
} stat_task;

static double stat_one(const stat_task *t, int64_t base)
{
    const red_plan *p = &t->plan;
    const uint32_t dt = t->dt;
    const void *x = t->x;
    const double n = (double)p->rcount;
    switch (t->opcode) {
    case TD_OP_VAR:
    case TD_OP_STD: {
        double s = 0.0, ss = 0.0;
        FOR_EACH_REDUCED(p, base, off, { s += load_f(dt, x, off); });
        const double mean = s / n;
        FOR_EACH_REDUCED(p, base, off, {
            const double d = load_f(dt, x, off) - mean;
            ss += d * d;
        });
        const double div = n - t->f0 > 0.0 ? n - t->f0 : 0.0;
        const double v = ss / div;
        return t->opcode == TD_OP_STD ? sqrt(v) : v;
    }
    case TD_OP_LOGSUMEXP: {
        double m = -INFINITY;
        bool nan = false;
        FOR_EACH_REDUCED(p, base, off, {
            const double v = load_f(dt, x, off);
            if (v != v) nan = true;
            else if (v > m) m = v;
        });
        if (nan) return NAN;
        if (isinf(m)) return m;
        double s = 0.0;
        FOR_EACH_REDUCED(p, base, off, { s += exp(load_f(dt, x, off) - m); });
        return m + log(s);
    }
    case TD_OP_NORM: {
        const double pw = t->f0;
        double s = pw == -INFINITY ? INFINITY : 0.0;
        bool nan = false;
        FOR_EACH_REDUCED(p, base, off, {
            const double a = fabs(load_f(dt, x, off));
            if (pw == 0.0) s += a != 0.0; /* a NaN is != 0 */
            else if (a != a) nan = true;
            else if (pw == INFINITY) s = a > s ? a : s;
            else if (pw == -INFINITY) s = a < s ? a : s;
            else if (pw == 1.0) s += a;
            else if (pw == 2.0) s += a * a;
            else s += pow(a, pw);
        });
        if (nan) return NAN;
        if (pw == 0.0 || pw == 1.0 || isinf(pw)) return s;
        if (pw == 2.0) return sqrt(s);
        return pow(s, 1.0 / pw);
    }
    case TD_OP_ANY: {
        bool r = false;
        FOR_EACH_REDUCED(p, base, off, { r = r || load_f(dt, x, off) != 0.0; });
        return r;
    }
    case TD_OP_ALL: {
        bool r = true;
        FOR_EACH_REDUCED(p, base, off, { r = r && load_f(dt, x, off) != 0.0; });
        return r;
    }
    }
    return NAN;
}

/* ARGMAX/ARGMIN over any set of axes: the first best position, the first NaN if any. */
static int64_t arg_one(const stat_task *t, int64_t base)
{
    const red_plan *p = &t->plan;
    const bool is_max = t->opcode == TD_OP_ARGMAX;
    int64_t r = 0, at = 0;
    if (td__dtype_is_float(t->dt)) {
        double best = 0.0;
        bool done = false;
        FOR_EACH_REDUCED(p, base, off, {
            if (!done) {
                const double v = load_f(t->dt, t->x, off);
                if (r == 0 || v != v || (is_max ? v > best : v < best)) {
                    best = v;
                    at = r;
                    if (v != v) done = true;
                }
            }
            r++;
        });
    } else {
        int64_t best = 0;
        FOR_EACH_REDUCED(p, base, off, {
            const int64_t v = load_i(t->dt, t->x, off);
            if (r == 0 || (is_max ? v > best : v < best)) {
                best = v;
                at = r;
            }
            r++;
        });
    }
    return at;
}

static void stat_chunk(void *ctx, int64_t lo, int64_t hi)
{
    const stat_task *t = ctx;
    for (int64_t o = lo; o < hi; o++) {
        const int64_t base = kept_offset(&t->plan, o);
        if (t->opcode == TD_OP_ARGMAX || t->opcode == TD_OP_ARGMIN)
            ((int64_t *)t->out)[o] = arg_one(t, base);
        else
            td__cpu_store_double(t->out_dt, t->out, o, stat_one(t, base));
    }
}

bool td__cpu_stats_op(const td__op *op, const td__desc *x)
{
    switch (op->opcode) {
    case TD_OP_VAR: case TD_OP_STD: case TD_OP_LOGSUMEXP: case TD_OP_NORM:
    case TD_OP_ANY: case TD_OP_ALL:
        return true;
    case TD_OP_ARGMAX:
    case TD_OP_ARGMIN: {
        if (op->n_iattrs < 1 || op->iattrs[0] < 0) return false;
        red_plan p;
        td__reduce_plan_init(&p, x, (uint64_t)op->iattrs[0]);
        return p.nr > 1;
    }
    default:
        return false;
    }
}

td_status td__cpu_exec_stats(const td__cpu_exec *x, const td__op *op, const td__view *in,
                             const td__view *out)
{
    if (op->n_iattrs < 1 || op->iattrs[0] < 0)
        return td__cpu_fail(x, TD_EINTERNAL, "cpu: %s without an axes mask",
                            td__op_name(op->opcode));
    stat_task t = {.opcode = op->opcode,
                   .dt = in[0].desc.dtype,
                   .out_dt = out->desc.dtype,
                   .f0 = op->fattrs[0],
                   .x = in[0].data,
                   .out = out->data};
    td__reduce_plan_init(&t.plan, &in[0].desc, (uint64_t)op->iattrs[0]);
    if (t.plan.nout == 0) return TD_OK;
    const int64_t cost = t.plan.rcount > 0 ? 2 * t.plan.rcount : 1;
    td__cpu_run(x, t.plan.nout, cost, stat_chunk, &t);
    return TD_OK;
}

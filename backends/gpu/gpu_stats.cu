/* gpu_stats.cu — VAR STD LOGSUMEXP NORM ANY ALL, and ARGMAX/ARGMIN over axes that are not
 * one run of adjacent dims (gpu_reduce.cu does those): backends/cpu/cpu_stats.c's contract.
 *
 * Plan: engine/collapse.h's reduce plan, as gpu_reduce.cu. A group of G threads (G = 256
 * when an output folds at least STAT_WIDE elements, else 32; a function of the shape only)
 * computes one output: lane l folds reduced positions l, l + G, l + 2G, ... in ascending
 * order in double (f16/bf16/f32 widened exactly), and the G partials are combined pairwise
 * in shared memory (l with l + s for s = G/2, ..., 1). Two-pass ops (VAR STD LOGSUMEXP)
 * broadcast the first pass's result through shared memory and fold again. ARGMAX/ARGMIN
 * keep (value, position) pairs with the CPU's order-independent rule (the best value at the
 * smallest position, the first NaN if any; integers compared exactly), so they match the
 * CPU bit for bit; the float folds differ from the CPU's ascending fold only in the
 * association of double sums (tests/unit/backends/conformance.c's stat bound).
 */
#include "backends/gpu/gpu_ops.cuh"
#include "engine/collapse.h"
#include <math.h>

namespace {

#define STAT_THREADS 256
#define STAT_WIDE 2048

typedef td__reduce_plan red_plan;

TD_DEV int64_t kept_off(const red_plan &p, int64_t o)
{
    int64_t off = 0;
    for (int g = p.nk - 1; g >= 0; g--) {
        off += (o % p.ksize[g]) * p.kstride[g];
        o /= p.ksize[g];
    }
    return off;
}

TD_DEV int64_t red_off(const red_plan &p, int64_t r)
{
    if (p.nr == 1) return r * p.rstride[0];
    int64_t off = 0;
    for (int g = p.nr - 1; g >= 0; g--) {
        off += (r % p.rsize[g]) * p.rstride[g];
        r /= p.rsize[g];
    }
    return off;
}

TD_DEV double ldd(uint32_t dt, const void *b, int64_t i)
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

TD_DEV int64_t ldi(uint32_t dt, const void *b, int64_t i)
{
    switch (dt) {
    case TD_I32: return ((const int32_t *)b)[i];
    case TD_I64: return ((const int64_t *)b)[i];
    case TD_I8: return ((const int8_t *)b)[i];
    case TD_I16: return ((const int16_t *)b)[i];
    default: return ((const uint8_t *)b)[i]; /* u8, and bool as its raw byte */
    }
}

enum comb { C_SUM, C_MAX, C_MIN, C_OR, C_AND };

/* Combine the G partials of each group in sh[] pairwise; returns the group's result (every
 * lane of the group sees it). All threads of the block must call it. */
TD_DEV double group_combine(double *sh, double v, int G, int comb)
{
    const int t = threadIdx.x, lane = t % G;
    sh[t] = v;
    __syncthreads();
    for (int s = G / 2; s > 0; s /= 2) {
        if (lane < s) {
            double a = sh[t], b = sh[t + s], r;
            switch (comb) {
            case C_MAX: r = (a != a || b != b) ? (a != a ? a : b) : (b > a ? b : a); break;
            case C_MIN: r = (a != a || b != b) ? (a != a ? a : b) : (b < a ? b : a); break;
            case C_OR: r = (a != 0.0 || b != 0.0) ? 1.0 : 0.0; break;
            case C_AND: r = (a != 0.0 && b != 0.0) ? 1.0 : 0.0; break;
            default: r = a + b; break;
            }
            sh[t] = r;
        }
        __syncthreads();
    }
    double r = sh[t - lane];
    __syncthreads();
    return r;
}

__global__ void __launch_bounds__(STAT_THREADS)
    k_stats(red_plan p, uint32_t op, uint32_t dt, uint32_t odt, double f0, const void *x,
            void *y, int G)
{
    __shared__ double sh[STAT_THREADS];
    const int gpb = STAT_THREADS / G, lane = threadIdx.x % G;
    const int64_t n = p.rcount;
    const double nd = (double)n;
    for (int64_t o0 = (int64_t)blockIdx.x * gpb; o0 < p.nout; o0 += (int64_t)gridDim.x * gpb) {
        const int64_t o = o0 + threadIdx.x / G;
        const bool active = o < p.nout;
        const int64_t base = active ? kept_off(p, o) : 0;
        const int64_t end = active ? n : 0;
        double res = 0.0;
        switch (op) {
        case TD_OP_VAR:
        case TD_OP_STD: {
            double s = 0.0;
            for (int64_t r = lane; r < end; r += G) s += ldd(dt, x, base + red_off(p, r));
            const double mean = group_combine(sh, s, G, C_SUM) / nd;
            double ss = 0.0;
            for (int64_t r = lane; r < end; r += G) {
                const double d = ldd(dt, x, base + red_off(p, r)) - mean;
                ss += d * d;
            }
            ss = group_combine(sh, ss, G, C_SUM);
            const double div = nd - f0 > 0.0 ? nd - f0 : 0.0;
            res = ss / div;
            if (op == TD_OP_STD) res = sqrt(res);
            break;
        }
        case TD_OP_LOGSUMEXP: {
            double m = -INFINITY;
            for (int64_t r = lane; r < end; r += G) {
                const double v = ldd(dt, x, base + red_off(p, r));
                if (v != v || m != m) m = m != m ? m : v;
                else if (v > m) m = v;
            }
            m = group_combine(sh, m, G, C_MAX);
            double s = 0.0;
            const bool direct = m != m || isinf(m);
            for (int64_t r = lane; r < end && !direct; r += G)
                s += exp(ldd(dt, x, base + red_off(p, r)) - m);
            s = group_combine(sh, s, G, C_SUM);
            res = direct ? m : m + log(s);
            break;
        }
        case TD_OP_NORM: {
            const bool pinf = f0 == INFINITY, ninf = f0 == -INFINITY;
            double s = ninf ? INFINITY : 0.0;
            bool nan = false;
            for (int64_t r = lane; r < end; r += G) {
                const double a = fabs(ldd(dt, x, base + red_off(p, r)));
                if (f0 == 0.0) s += a != 0.0 ? 1.0 : 0.0; /* a NaN is != 0 */
                else if (a != a) nan = true;
                else if (pinf) s = a > s ? a : s;
                else if (ninf) s = a < s ? a : s;
                else if (f0 == 1.0) s += a;
                else if (f0 == 2.0) s += a * a;
                else s += pow(a, f0);
            }
            const double any_nan = group_combine(sh, nan ? 1.0 : 0.0, G, C_OR);
            s = group_combine(sh, s, G, pinf ? C_MAX : ninf ? C_MIN : C_SUM);
            if (any_nan != 0.0) res = NAN;
            else if (f0 == 0.0 || f0 == 1.0 || pinf || ninf) res = s;
            else if (f0 == 2.0) res = sqrt(s);
            else res = pow(s, 1.0 / f0);
            break;
        }
        case TD_OP_ANY:
        case TD_OP_ALL: {
            const bool all = op == TD_OP_ALL;
            bool b = all;
            for (int64_t r = lane; r < end; r += G) {
                const bool nz = ldd(dt, x, base + red_off(p, r)) != 0.0;
                b = all ? (b && nz) : (b || nz);
            }
            res = group_combine(sh, b ? 1.0 : 0.0, G, all ? C_AND : C_OR);
            break;
        }
        }
        if (active && lane == 0) td_store_double(odt, y, o, res);
    }
}

/* ARGMAX/ARGMIN: (value, position) pairs; floats as double (exact for f16/bf16/f32/f64),
 * integers as int64 (exact). */
__global__ void __launch_bounds__(STAT_THREADS)
    k_arg(red_plan p, bool is_max, bool fl, uint32_t dt, const void *x, int64_t *y, int G)
{
    __shared__ double shv[STAT_THREADS];
    __shared__ int64_t shq[STAT_THREADS], shi[STAT_THREADS];
    const int gpb = STAT_THREADS / G, lane = threadIdx.x % G, t = threadIdx.x;
    for (int64_t o0 = (int64_t)blockIdx.x * gpb; o0 < p.nout; o0 += (int64_t)gridDim.x * gpb) {
        const int64_t o = o0 + threadIdx.x / G;
        const bool active = o < p.nout;
        const int64_t base = active ? kept_off(p, o) : 0;
        const int64_t end = active ? p.rcount : 0;
        double bv = 0.0;
        int64_t bq = 0, bi = INT64_MAX; /* INT64_MAX: nothing yet */
        for (int64_t r = lane; r < end; r += G) {
            const int64_t off = base + red_off(p, r);
            if (fl) {
                if (bi != INT64_MAX && bv != bv) break;
                const double v = ldd(dt, x, off);
                if (bi == INT64_MAX || v != v || (is_max ? v > bv : v < bv)) {
                    bv = v;
                    bi = r;
                }
            } else {
                const int64_t v = ldi(dt, x, off);
                if (bi == INT64_MAX || (is_max ? v > bq : v < bq)) {
                    bq = v;
                    bi = r;
                }
            }
        }
        shv[t] = bv;
        shq[t] = bq;
        shi[t] = bi;
        __syncthreads();
        for (int s = G / 2; s > 0; s /= 2) {
            if (lane < s) {
                const int64_t ai = shi[t], bj = shi[t + s];
                bool take = false;
                if (bj == INT64_MAX) take = false;
                else if (ai == INT64_MAX) take = true;
                else if (fl) {
                    const double a = shv[t], b = shv[t + s];
                    const bool an = a != a, bn = b != b;
                    if (an || bn) take = an && bn ? bj < ai : bn;
                    else take = (is_max ? b > a : b < a) || (b == a && bj < ai);
                } else {
                    const int64_t a = shq[t], b = shq[t + s];
                    take = (is_max ? b > a : b < a) || (b == a && bj < ai);
                }
                if (take) {
                    shv[t] = shv[t + s];
                    shq[t] = shq[t + s];
                    shi[t] = bj;
                }
            }
            __syncthreads();
        }
        if (active && lane == 0) y[o] = shi[t] == INT64_MAX ? 0 : shi[t];
        __syncthreads();
    }
}

} // namespace

extern "C" bool td__gpu_stats_op(const td__op *op, const td__desc *x)
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

extern "C" td_status td__gpu_exec_stats(const td__gpu_exec *x, const td__op *op,
                                        const td__view *in, const td__view *out)
{
    if (op->n_iattrs < 1 || op->iattrs[0] < 0)
        return td__gpu_fail(x, TD_EINTERNAL, TD_GPU_KIND ": %s without an axes mask",
                            td__op_name(op->opcode));
    red_plan p;
    td__reduce_plan_init(&p, &in[0].desc, (uint64_t)op->iattrs[0]);
    if (p.nout == 0) return TD_OK;
    const int G = p.rcount >= STAT_WIDE ? STAT_THREADS : 32;
    const unsigned blocks = td__gpu_blocks((p.nout + STAT_THREADS / G - 1) / (STAT_THREADS / G), 1);
    if (op->opcode == TD_OP_ARGMAX || op->opcode == TD_OP_ARGMIN)
        k_arg<<<blocks, STAT_THREADS, 0, x->st->s>>>(p, op->opcode == TD_OP_ARGMAX,
                                                     td__dtype_is_float(in[0].desc.dtype),
                                                     in[0].desc.dtype, in[0].data,
                                                     (int64_t *)out->data, G);
    else
        k_stats<<<blocks, STAT_THREADS, 0, x->st->s>>>(p, op->opcode, in[0].desc.dtype,
                                                       out->desc.dtype, op->fattrs[0],
                                                       in[0].data, out->data, G);
    return td__gpu_launched(x, "stats kernel");
}

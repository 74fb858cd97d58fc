/* gpu_stats.cu — VAR STD LOGSUMEXP NORM ANY ALL, and ARGMAX/ARGMIN over axes that are not
 * one run of adjacent dims (gpu_reduce.cu does those): backends/cpu/cpu_stats.c's contract.
 *
 * VAR and STD (batch norm's statistics among them: few outputs, each over N x H x W) split
 * each output's reduced positions into chunks of CH = G x VAR_ITEMS (G = 32 .. 256, the
 * smallest that holds the whole reduction in one chunk, else 256: a function of the shape
 * alone). A team of G lanes takes one (output, chunk) — nout x chunks items, so a few outputs
 * still fill the device — reads the chunk once into registers as double (lane l: positions
 * l, l + G, ...; coalesced where the reduced run is contiguous), and computes its mean and
 * M2 by two passes over the registers, each lane folding in ascending order and td_team_sum
 * adding the lanes in a fixed order. One chunk: that is the output. More: (mean, M2) go to
 * scratch and k_var_merge merges an output's chunks by Chan et al.'s pairwise rule (count,
 * mean and M2 of a union from those of its halves), lane l of a warp chunks l, l + 32, ...
 * in ascending order, then the lanes along a fixed shuffle tree. Accuracy: each merge's
 * error is a few 2^-53 of max |x|^2 per element (the difference of two means, each within
 * a few ulp of double), far inside the stat bound 16 n 2^-53 max|x|^2 below. Speed: one read
 * of x and 16 bytes of scratch per 2048 elements.
 *
 * The other ops: engine/collapse.h's reduce plan, as gpu_reduce.cu. A group of G threads
 * (G = 256 when an output folds at least STAT_WIDE elements, else 32; a function of the
 * shape only) computes one output: lane l folds reduced positions l, l + G, l + 2G, ... in ascending
 * order in double (f16/bf16/f32 widened exactly), and the G partials are combined pairwise
 * in shared memory (l with l + s for s = G/2, ..., 1). Two-pass ops (LOGSUMEXP)
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
    for (int64_t o0 = (int64_t)blockIdx.x * gpb; o0 < p.nout; o0 += (int64_t)gridDim.x * gpb) {
        const int64_t o = o0 + threadIdx.x / G;
        const bool active = o < p.nout;
        const int64_t base = active ? kept_off(p, o) : 0;
        const int64_t end = active ? n : 0;
        double res = 0.0;
        switch (op) {
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

/* ---- VAR STD: chunks in registers, merged by Chan et al.'s rule ----
 * Work item (o, c): output o's reduced positions c CH .. c CH + CH - 1 (CH = G VAR_ITEMS),
 * taken by a team of G lanes (lane l: positions c CH + i G + l, i < VAR_ITEMS, read once
 * into registers as double). The team's mean is its sum (td_team_sum) over the count, its M2
 * the sum of squared deviations from that mean: a two-pass variance of the chunk from
 * registers. With one chunk an output that is the result; else (mean, M2) goes to scratch
 * and k_var_merge combines an output's chunks. */
#define VAR_ITEMS 8

struct var_part {
    double mean, m2;
};

template <typename T>
__global__ void __launch_bounds__(STAT_THREADS)
    k_var_chunks(red_plan p, const T *x, int G, int64_t nchunk, var_part *part, bool is_std,
                 double f0, uint32_t odt, void *y)
{
    __shared__ double sh[STAT_THREADS / 32];
    const int tpb = STAT_THREADS / G, lane = (int)threadIdx.x % G;
    const int64_t CH = (int64_t)G * VAR_ITEMS, nitems = p.nout * nchunk;
    for (int64_t w0 = (int64_t)blockIdx.x * tpb; w0 < nitems; w0 += (int64_t)gridDim.x * tpb) {
        const int64_t w = w0 + (int)threadIdx.x / G;
        const int64_t o = w < nitems ? w / nchunk : 0, c = w < nitems ? w % nchunk : 0;
        const int64_t lo = c * CH;
        int64_t cnt = w < nitems ? p.rcount - lo : 0;
        if (cnt > CH) cnt = CH;
        const int64_t base = kept_off(p, o);
        double v[VAR_ITEMS];
#pragma unroll
        for (int i = 0; i < VAR_ITEMS; i++) {
            const int64_t k = (int64_t)i * G + lane;
            v[i] = k < cnt ? td_ld_double(x[base + red_off(p, lo + k)]) : 0.0;
        }
        double a = 0.0;
#pragma unroll
        for (int i = 0; i < VAR_ITEMS; i++)
            if ((int64_t)i * G + lane < cnt) a += v[i];
        const double mean = td_team_sum(a, G, sh) / (double)cnt;
        double q = 0.0;
#pragma unroll
        for (int i = 0; i < VAR_ITEMS; i++)
            if ((int64_t)i * G + lane < cnt) {
                const double d = v[i] - mean;
                q += d * d;
            }
        q = td_team_sum(q, G, sh);
        if (w >= nitems || lane != 0) continue;
        if (nchunk > 1) {
            part[w] = var_part{mean, q};
            continue;
        }
        const double nd = (double)p.rcount, div = nd - f0 > 0.0 ? nd - f0 : 0.0;
        const double res = q / div;
        td_store_double(odt, y, o, is_std ? sqrt(res) : res);
    }
}

/* (na, ma, qa) <- the count, mean and M2 of the union with (nb, mb, qb): Chan, Golub and
 * LeVeque, "Algorithms for computing the sample variance" (1983), eq. 2.1. */
TD_DEV void chan_merge(double &na, double &ma, double &qa, double nb, double mb, double qb)
{
    if (nb == 0.0) return;
    if (na == 0.0) {
        na = nb;
        ma = mb;
        qa = qb;
        return;
    }
    const double n = na + nb, d = mb - ma;
    ma = ma + d * (nb / n);
    qa = qa + qb + d * d * (na * nb / n);
    na = n;
}

/* One 32-lane warp an output: lane l merges chunks l, l + 32, ... in ascending order, then
 * lane l takes lane l + s's result for s = 16, 8, 4, 2, 1 (a fixed tree; lane 0 ends with
 * the output's count, mean and M2). */
__global__ void __launch_bounds__(STAT_THREADS)
    k_var_merge(int64_t nout, int64_t nchunk, int64_t ch, int64_t rcount, const var_part *part,
                bool is_std, double f0, uint32_t odt, void *y)
{
    const int lane = (int)threadIdx.x % 32, wpb = STAT_THREADS / 32;
    for (int64_t o0 = (int64_t)blockIdx.x * wpb; o0 < nout; o0 += (int64_t)gridDim.x * wpb) {
        const int64_t o = o0 + (int)threadIdx.x / 32;
        double n = 0.0, m = 0.0, q = 0.0;
        for (int64_t c = lane; o < nout && c < nchunk; c += 32) {
            const var_part pc = part[o * nchunk + c];
            const int64_t cnt = rcount - c * ch < ch ? rcount - c * ch : ch;
            chan_merge(n, m, q, (double)cnt, pc.mean, pc.m2);
        }
        for (int s = 16; s > 0; s >>= 1) {
            const double nb = td_shfl_down(n, s), mb = td_shfl_down(m, s),
                         qb = td_shfl_down(q, s);
            if (lane < s) chan_merge(n, m, q, nb, mb, qb);
        }
        if (o >= nout || lane != 0) continue;
        const double nd = (double)rcount, div = nd - f0 > 0.0 ? nd - f0 : 0.0;
        const double res = q / div;
        td_store_double(odt, y, o, is_std ? sqrt(res) : res);
    }
}

template <typename T>
td_status run_var(const td__gpu_exec *x, const red_plan &p, const void *in, bool is_std,
                  double f0, uint32_t odt, void *y)
{
    int G = 32;
    while (G < STAT_THREADS && (int64_t)G * VAR_ITEMS < p.rcount) G *= 2;
    const int64_t ch = (int64_t)G * VAR_ITEMS;
    /* at least one chunk: an empty reduction gives 0 / max(0 - correction, 0), as before */
    const int64_t nchunk = p.rcount > ch ? (p.rcount + ch - 1) / ch : 1;
    var_part *part = NULL;
    if (nchunk > 1) {
        td_status s = td__gpu_temp_alloc(x, (size_t)(p.nout * nchunk) * sizeof(var_part),
                                          (void **)&part);
        if (s != TD_OK) return s;
    }
    const int tpb = STAT_THREADS / G;
    k_var_chunks<T><<<td__gpu_blocks((p.nout * nchunk + tpb - 1) / tpb, 1), STAT_THREADS, 0,
                      x->st->s>>>(p, (const T *)in, G, nchunk, part, is_std, f0, odt, y);
    td_status s = td__gpu_launched(x, "var kernel");
    if (s == TD_OK && nchunk > 1) {
        const int wpb = STAT_THREADS / 32;
        k_var_merge<<<td__gpu_blocks((p.nout + wpb - 1) / wpb, 1), STAT_THREADS, 0,
                      x->st->s>>>(p.nout, nchunk, ch, p.rcount, part, is_std, f0, odt, y);
        s = td__gpu_launched(x, "var merge kernel");
    }
    if (part != NULL) td__gpu_temp_free(x, part);
    return s;
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
    if (op->opcode == TD_OP_VAR || op->opcode == TD_OP_STD) {
        const bool is_std = op->opcode == TD_OP_STD;
        const uint32_t odt = out->desc.dtype;
        const double f0 = op->fattrs[0];
        switch (in[0].desc.dtype) {
        case TD_F32: return run_var<float>(x, p, in[0].data, is_std, f0, odt, out->data);
        case TD_F64: return run_var<double>(x, p, in[0].data, is_std, f0, odt, out->data);
        case TD_F16: return run_var<td_f16>(x, p, in[0].data, is_std, f0, odt, out->data);
        default: return run_var<td_bf16>(x, p, in[0].data, is_std, f0, odt, out->data);
        }
    }
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

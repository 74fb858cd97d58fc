/* gpu_softmax.cu — SOFTMAX and LOG_SOFTMAX along one axis (the contract is in engine/op.h):
 * m = max of the row, e_i = exp(x_i - m) in the element type, s = sum of the e_i in double
 * rounded once, y_i = e_i / s or (x_i - m) - log(s).
 *
 * Why one kernel per row group instead of the five primitive ops: softmax is memory-bound,
 * and the composite read and wrote the tensor about five times. Here a row that fits in
 * registers is read once and written once.
 *
 * Layout: a tensor [outer, n, inner] (n along the axis) has outer * inner rows of n elements
 * at stride inner. A block is BX x BY threads; L of them ("lanes") share a row and the rest
 * take neighbouring rows. When inner is 1 the lanes are threadIdx.x, so a warp reads
 * consecutive elements of a row; otherwise the lanes are threadIdx.y and threadIdx.x walks
 * neighbouring rows, which are neighbouring in memory. Lane l takes the row's elements
 * k = l, l + L, l + 2L, ... (ascending); on the on-chip path of a contiguous row whose length
 * is a multiple of V = 16 bytes / element size, it takes groups of V consecutive elements
 * instead ((l + iL)V + u), read and written with 16-byte vector accesses.
 *
 * Paths, chosen from the shape alone:
 *  - on chip (ITEMS > 0): each lane keeps its at most ITEMS elements in registers (64 bytes
 *    a thread), so the input is read once: the row fits when n <= L * ITEMS with L up to
 *    1024 (16384 f32 or 8192 f64 elements when inner is 1; 512 / 256 when it is not);
 *  - streaming: longer rows are read three times (max, sum, write; the second and third
 *    reads mostly hit L2). With few rows the axis is also split into G chunks (grid.y), each
 *    writing a partial max and then a partial sum, so the whole GPU takes part.
 *
 * Determinism: no atomics; every fold has a fixed order that depends on the shape alone.
 * A lane folds its elements in ascending order, the lanes of a row combine along a fixed
 * shared-memory tree of fan-in 8 (portable to any warp or wavefront width: no shuffles, no
 * warp-synchronous code), and chunk partials are folded in ascending chunk order. The max
 * step is the CPU's (a NaN wins, else the larger), so NaN propagates; when +0 and -0 tie
 * for the maximum the one kept may differ from the CPU's, which can only flip the sign of
 * a zero result. exp/log are the device's expf/exp and logf/log (a few ulps from glibc),
 * and the sum's association differs from the CPU's ascending fold: the conformance suite
 * states the bound.
 */
#include "backends/gpu/gpu_ops.cuh"
#include <math.h>

namespace {

/* Most threads in a block; kernels are compiled for it (at most 64 registers a thread). */
#define SM_MAX_THREADS 1024
/* Register bytes a lane spends on its elements on the on-chip path. */
#define SM_ITEM_BYTES 64
/* Threads per block for short rows (several rows per block). */
#define SM_THREADS 256
/* Resident threads the streaming path aims for before it splits rows into chunks (a
 * constant, so partitions depend on the shape alone). */
#define SM_TARGET_THREADS (2048 * 256)
/* Fewest elements a lane takes per chunk when rows are split. */
#define SM_MIN_PER_LANE 32

TD_DEV float f_exp(float x) { return expf(x); }
TD_DEV double f_exp(double x) { return exp(x); }
TD_DEV float f_log(float x) { return logf(x); }
TD_DEV double f_log(double x) { return log(x); }

/* The CPU's MAX step: a NaN replaces the accumulator, and so does a larger value. */
template <typename T> TD_DEV T max_step(T acc, T v) { return (v > acc || v != v) ? v : acc; }

/* Rows and the lane layout, passed by value. */
struct sm_geom {
    int64_t rows;  /* outer * inner */
    int64_t n;     /* elements along the axis */
    int64_t inner; /* stride between a row's elements */
    int lanes_x;   /* 1: lanes are threadIdx.x (inner == 1); 0: threadIdx.y */
};

/* Where this thread sits: its lane, the number of lanes, its row within the block, the
 * rows per block, its shared-memory slot and the slot step from one lane to the next. */
struct sm_thread {
    int lane, nlanes, rowi, nrows, slot, lstep;
};

TD_DEV sm_thread sm_where(const sm_geom &g)
{
    sm_thread t;
    const int tx = threadIdx.x, ty = threadIdx.y;
    t.lane = g.lanes_x ? tx : ty;
    t.nlanes = g.lanes_x ? blockDim.x : blockDim.y;
    t.rowi = g.lanes_x ? ty : tx;
    t.nrows = g.lanes_x ? blockDim.y : blockDim.x;
    t.slot = ty * blockDim.x + tx;
    t.lstep = g.lanes_x ? 1 : blockDim.x;
    return t;
}

/* Combine the lanes' values of every row in the block along a fixed tree of fan-in up to 8
 * (three barriers for 512 lanes instead of nine): with w lanes holding values and f =
 * min(8, w), lane l < w / f folds lanes l, l + w/f, ..., l + (f-1) w/f in that order. Every
 * lane gets the result. All threads of the block must call it; L is a power of two. */
struct op_max {
    template <typename T> static TD_DEV T f(T a, T b) { return max_step(a, b); }
};
struct op_add {
    template <typename T> static TD_DEV T f(T a, T b) { return a + b; }
};

template <typename OP, typename T> TD_DEV T tree(T *sm, const sm_thread &t, T v)
{
    sm[t.slot] = v;
    __syncthreads();
    for (int w = t.nlanes; w > 1;) {
        const int f = w >= 8 ? 8 : w, next = w / f;
        if (t.lane < next) {
            T a = sm[t.slot];
            for (int j = 1; j < f; j++) a = OP::f(a, sm[t.slot + j * next * t.lstep]);
            sm[t.slot] = a;
        }
        __syncthreads();
        w = next;
    }
    const T r = sm[t.slot - t.lane * t.lstep];
    __syncthreads();
    return r;
}

/* VEC elements moved by one load or store. */
template <typename T, int VEC> struct alignas(sizeof(T) * VEC) sm_vec {
    T v[VEC];
};

/* On chip: one pass over memory. Lane l holds the groups of VEC elements that start at
 * (l + i L) VEC, i < ITEMS / VEC, in registers. VEC > 1 only for contiguous rows whose
 * length it divides; `aligned` (both pointers 16-byte aligned) picks vector loads and
 * stores, which move the same elements and so give the same bits. Blocks walk row groups
 * grid-stride, so any row count fits the grid. */
template <typename T, bool LOG, int ITEMS, int VEC>
__global__ void __launch_bounds__(SM_MAX_THREADS)
    k_softmax_chip(const T *x, T *y, sm_geom g, int aligned)
{
    typedef sm_vec<T, VEC> V;
    __shared__ T smax[SM_MAX_THREADS];
    __shared__ double ssum[SM_MAX_THREADS];
    const sm_thread t = sm_where(g);
    for (int64_t r0 = (int64_t)blockIdx.x * t.nrows; r0 < g.rows;
         r0 += (int64_t)gridDim.x * t.nrows) {
        const int64_t r = r0 + t.rowi;
        const bool live = r < g.rows;
        const int64_t base = live ? (r / g.inner) * g.n * g.inner + r % g.inner : 0;
        const T *xr = x + base;
        T v[ITEMS];
        T m = (T)-INFINITY;
#pragma unroll
        for (int i = 0; i < ITEMS / VEC; i++) {
            const int64_t k = ((int64_t)t.lane + (int64_t)i * t.nlanes) * VEC;
            if (live && k < g.n) {
                if (VEC > 1 && aligned) {
                    const V w = *(const V *)(xr + k);
#pragma unroll
                    for (int u = 0; u < VEC; u++) v[i * VEC + u] = w.v[u];
                } else {
#pragma unroll
                    for (int u = 0; u < VEC; u++) v[i * VEC + u] = xr[(k + u) * g.inner];
                }
            } else {
#pragma unroll
                for (int u = 0; u < VEC; u++) v[i * VEC + u] = (T)-INFINITY;
            }
#pragma unroll
            for (int u = 0; u < VEC; u++) m = max_step(m, v[i * VEC + u]);
        }
        m = tree<op_max>(smax, t, m);
        double acc = 0.0;
#pragma unroll
        for (int i = 0; i < ITEMS / VEC; i++) {
            const int64_t k = ((int64_t)t.lane + (int64_t)i * t.nlanes) * VEC;
            if (live && k < g.n) {
#pragma unroll
                for (int u = 0; u < VEC; u++) {
                    const T e = f_exp(v[i * VEC + u] - m);
                    v[i * VEC + u] = LOG ? v[i * VEC + u] - m : e;
                    acc += (double)e;
                }
            }
        }
        const T s = (T)tree<op_add>(ssum, t, acc);
        if (!live) continue;
        T *yr = y + base;
        const T ls = LOG ? f_log(s) : s;
#pragma unroll
        for (int i = 0; i < ITEMS / VEC; i++) {
            const int64_t k = ((int64_t)t.lane + (int64_t)i * t.nlanes) * VEC;
            if (k >= g.n) continue;
            V w;
#pragma unroll
            for (int u = 0; u < VEC; u++) w.v[u] = LOG ? v[i * VEC + u] - ls : v[i * VEC + u] / s;
            if (VEC > 1 && aligned) {
                *(V *)(yr + k) = w;
            } else {
#pragma unroll
                for (int u = 0; u < VEC; u++) yr[(k + u) * g.inner] = w.v[u];
            }
        }
    }
}

/* Streaming phases: ALL does max, sum and write in one kernel (one chunk per row); with
 * G > 1 chunks, MAX writes pmax[c * rows + r], SUM folds those into m and writes
 * psum[c * rows + r], WRITE folds both and writes chunk c of the output. */
enum { PH_ALL, PH_MAX, PH_SUM, PH_WRITE };

template <typename T, bool LOG, int PH>
__global__ void __launch_bounds__(SM_MAX_THREADS)
    k_softmax_stream(const T *x, T *y, sm_geom g, int64_t chunk, int nchunks, T *pmax,
                     double *psum)
{
    __shared__ T smax[SM_MAX_THREADS];
    __shared__ double ssum[SM_MAX_THREADS];
    const sm_thread t = sm_where(g);
    const int c = blockIdx.y;
    const int64_t k0 = (int64_t)c * chunk;
    const int64_t k1 = k0 + chunk < g.n ? k0 + chunk : g.n;
    for (int64_t r0 = (int64_t)blockIdx.x * t.nrows; r0 < g.rows;
         r0 += (int64_t)gridDim.x * t.nrows) {
        const int64_t r = r0 + t.rowi;
        const bool live = r < g.rows;
        const int64_t base = live ? (r / g.inner) * g.n * g.inner + r % g.inner : 0;
        const T *xr = x + base;
        T m = (T)-INFINITY;
        if (PH == PH_ALL || PH == PH_MAX) {
            for (int64_t k = k0 + t.lane; live && k < k1; k += t.nlanes)
                m = max_step(m, xr[k * g.inner]);
            m = tree<op_max>(smax, t, m);
            if (PH == PH_MAX) {
                if (live && t.lane == 0) pmax[(int64_t)c * g.rows + r] = m;
                continue;
            }
        } else if (live) {
            for (int j = 0; j < nchunks; j++) m = max_step(m, pmax[(int64_t)j * g.rows + r]);
        }
        double sum = 0.0;
        if (PH == PH_ALL || PH == PH_SUM) {
            for (int64_t k = k0 + t.lane; live && k < k1; k += t.nlanes)
                sum += (double)f_exp(xr[k * g.inner] - m);
            sum = tree<op_add>(ssum, t, sum);
            if (PH == PH_SUM) {
                if (live && t.lane == 0) psum[(int64_t)c * g.rows + r] = sum;
                continue;
            }
        } else if (live) {
            for (int j = 0; j < nchunks; j++) sum += psum[(int64_t)j * g.rows + r];
        }
        if (!live) continue;
        const T s = (T)sum;
        T *yr = y + base;
        if (LOG) {
            const T ls = f_log(s);
            for (int64_t k = k0 + t.lane; k < k1; k += t.nlanes)
                yr[k * g.inner] = (xr[k * g.inner] - m) - ls;
        } else {
            for (int64_t k = k0 + t.lane; k < k1; k += t.nlanes)
                yr[k * g.inner] = f_exp(xr[k * g.inner] - m) / s;
        }
    }
}

int pow2_at_least(int64_t n, int cap)
{
    int p = 1;
    while (p < cap && p < n) p *= 2;
    return p;
}

/* Blocks for `groups` row groups: the kernels loop over groups beyond the grid. */
unsigned grid_x(int64_t groups)
{
    return (unsigned)(groups < TD_GPU_MAX_BLOCKS ? groups : TD_GPU_MAX_BLOCKS);
}

template <typename T, bool LOG, int ITEMS>
td_status launch_chip(const td__gpu_exec *x, const T *in, T *out, const sm_geom &g, dim3 block,
                      int64_t groups)
{
    constexpr int VEC = 16 / sizeof(T);
    const int aligned = ((uintptr_t)in % 16 == 0) && ((uintptr_t)out % 16 == 0);
    if constexpr (ITEMS >= VEC) {
        if (g.lanes_x && g.n % VEC == 0) {
            k_softmax_chip<T, LOG, ITEMS, VEC><<<grid_x(groups), block, 0, x->st->s>>>(
                in, out, g, aligned);
            return td__gpu_launched(x, "softmax kernel");
        }
    }
    k_softmax_chip<T, LOG, ITEMS, 1><<<grid_x(groups), block, 0, x->st->s>>>(in, out, g, 0);
    return td__gpu_launched(x, "softmax kernel");
}

template <typename T, bool LOG>
td_status launch_stream(const td__gpu_exec *x, const T *in, T *out, const sm_geom &g,
                        dim3 block, int64_t groups, int lanes)
{
    const int threads = (int)(block.x * block.y);
    int64_t nchunks = 1;
    const int64_t want = (SM_TARGET_THREADS / threads + groups - 1) / groups;
    const int64_t most = g.n / ((int64_t)lanes * SM_MIN_PER_LANE);
    if (groups * threads < SM_TARGET_THREADS && most > 1) nchunks = want < most ? want : most;
    const int64_t chunk = (g.n + nchunks - 1) / nchunks;
    nchunks = (g.n + chunk - 1) / chunk;
    if (nchunks == 1) {
        dim3 grid(grid_x(groups), 1);
        k_softmax_stream<T, LOG, PH_ALL><<<grid, block, 0, x->st->s>>>(in, out, g, chunk, 1,
                                                                        NULL, NULL);
        return td__gpu_launched(x, "softmax kernel");
    }
    /* groups * threads < SM_TARGET_THREADS here, so the grid covers every row group */
    dim3 grid((unsigned)groups, (unsigned)nchunks);
    const size_t nmax = (size_t)(nchunks * g.rows);
    void *tmp = NULL;
    td_status s = td__gpu_temp_alloc(x, nmax * (sizeof(T) + sizeof(double)), &tmp);
    if (s != TD_OK) return s;
    double *psum = (double *)tmp;
    T *pmax = (T *)(psum + nmax);
    const int nc = (int)nchunks;
    k_softmax_stream<T, LOG, PH_MAX><<<grid, block, 0, x->st->s>>>(in, out, g, chunk, nc, pmax,
                                                                    psum);
    s = td__gpu_launched(x, "softmax max kernel");
    if (s == TD_OK) {
        k_softmax_stream<T, LOG, PH_SUM><<<grid, block, 0, x->st->s>>>(in, out, g, chunk, nc,
                                                                        pmax, psum);
        s = td__gpu_launched(x, "softmax sum kernel");
    }
    if (s == TD_OK) {
        k_softmax_stream<T, LOG, PH_WRITE><<<grid, block, 0, x->st->s>>>(in, out, g, chunk, nc,
                                                                          pmax, psum);
        s = td__gpu_launched(x, "softmax write kernel");
    }
    td__gpu_temp_free(x, tmp);
    return s;
}

template <typename T, bool LOG>
td_status run(const td__gpu_exec *x, const void *in_, void *out_, int64_t outer, int64_t n,
              int64_t inner)
{
    const T *in = (const T *)in_;
    T *out = (T *)out_;
    sm_geom g;
    g.rows = outer * inner;
    g.n = n;
    g.inner = inner;
    g.lanes_x = inner == 1;
    const int imax = SM_ITEM_BYTES / (int)sizeof(T);
    /* lanes: enough that each holds about imax / 2 elements, within the block limits */
    const int cap = g.lanes_x ? SM_MAX_THREADS : 32;
    int lanes = pow2_at_least((n + imax / 2 - 1) / (imax / 2), cap);
    int items = pow2_at_least((n + lanes - 1) / lanes, 2 * imax);
    const bool chip = (int64_t)lanes * items >= n && items <= imax;
    if (!chip) lanes = cap;
    int rows_per_block;
    if (g.lanes_x) rows_per_block = lanes >= SM_THREADS ? 1 : SM_THREADS / lanes;
    else rows_per_block = lanes >= 8 ? 32 : SM_THREADS / lanes;
    dim3 block = g.lanes_x ? dim3((unsigned)lanes, (unsigned)rows_per_block)
                           : dim3((unsigned)rows_per_block, (unsigned)lanes);
    const int64_t groups = (g.rows + rows_per_block - 1) / rows_per_block;
    if (!chip) return launch_stream<T, LOG>(x, in, out, g, block, groups, lanes);
    switch (items) {
    case 1: return launch_chip<T, LOG, 1>(x, in, out, g, block, groups);
    case 2: return launch_chip<T, LOG, 2>(x, in, out, g, block, groups);
    case 4: return launch_chip<T, LOG, 4>(x, in, out, g, block, groups);
    case 8: return launch_chip<T, LOG, 8>(x, in, out, g, block, groups);
    }
    if constexpr (sizeof(T) == 4) {
        if (items == 16) return launch_chip<T, LOG, 16>(x, in, out, g, block, groups);
    }
    return td__gpu_fail(x, TD_EINTERNAL, TD_GPU_KIND ": softmax with %d items a lane", items);
}

} // namespace

extern "C" td_status td__gpu_exec_softmax(const td__gpu_exec *x, const td__op *op,
                                           const td__view *in, const td__view *out)
{
    const td__desc *d = &in[0].desc;
    const int64_t ax = op->n_iattrs == 1 ? op->iattrs[0] : -1;
    const bool lg = op->opcode == TD_OP_LOG_SOFTMAX;
    if (ax < 0 || ax >= (int64_t)d->rank || out->desc.dtype != d->dtype ||
        (d->dtype != TD_F32 && d->dtype != TD_F64))
        return td__gpu_fail(x, TD_EINTERNAL,
                             TD_GPU_KIND ": %s on dtype %u along axis %lld of rank %u",
                             lg ? "log_softmax" : "softmax", d->dtype, (long long)ax, d->rank);
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < ax; i++) outer *= d->dims[i];
    for (uint32_t i = (uint32_t)ax + 1; i < d->rank; i++) inner *= d->dims[i];
    const int64_t n = d->dims[ax];
    if (outer == 0 || inner == 0 || n == 0) return TD_OK;
    if (d->dtype == TD_F32)
        return lg ? run<float, true>(x, in[0].data, out->data, outer, n, inner)
                  : run<float, false>(x, in[0].data, out->data, outer, n, inner);
    return lg ? run<double, true>(x, in[0].data, out->data, outer, n, inner)
              : run<double, false>(x, in[0].data, out->data, outer, n, inner);
}

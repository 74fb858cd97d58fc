/* gpu_scan.cu — CUMSUM and CUMPROD along one axis (backends/cpu/cpu_scan.c's contract:
 * accumulators in double for f32/f64, f32 for f16/bf16, uint64 wraparound for integers,
 * each output rounded once).
 *
 * Determinism: every association below is fixed by the shape alone (no atomics, no
 * decoupled look-back, whose carry order depends on timing). x is [outer, n, inner]:
 *  - inner > 1, or n <= SCAN_SHORT: one thread per line folds it in index order (the CPU's
 *    order exactly, so these results equal the CPU's bit for bit); neighbouring threads
 *    take neighbouring lines, so reads of a non-innermost axis are coalesced;
 *  - otherwise (contiguous lines longer than SCAN_SHORT) three passes over tiles of
 *    SCAN_TILE = SCAN_THREADS x SCAN_PER elements of a line: (1) each tile's total, its
 *    threads each folding SCAN_PER consecutive elements in order and the thread totals
 *    combined pairwise (a fixed tree); (2) per line, the exclusive scan of its tile totals,
 *    in chunks of SCAN_THREADS scanned by a fixed Hillis-Steele network and carried in
 *    order; (3) each tile again: thread t's prefix is carry + (the exclusive Hillis-Steele
 *    scan of the thread totals) and its elements fold onto it in order.
 * So for long rows the GPU's association differs from the CPU's sequential fold:
 * tests/unit/backends/conformance.c bounds the difference (TD_ACC_CUMSUM / CUMPROD).
 */
#include "backends/gpu/gpu_ops.cuh"
#include <type_traits>

namespace {

#define SCAN_THREADS 256
#define SCAN_PER 8
#define SCAN_TILE (SCAN_THREADS * SCAN_PER)
#define SCAN_SHORT 256

/* Element <-> accumulator per dtype. */
template <typename T> struct sc;
template <> struct sc<float> {
    typedef double Acc;
    static TD_DEV Acc in(float v) { return v; }
    static TD_DEV float out(Acc a) { return (float)a; }
};
template <> struct sc<double> {
    typedef double Acc;
    static TD_DEV Acc in(double v) { return v; }
    static TD_DEV double out(Acc a) { return a; }
};
template <> struct sc<td_f16> {
    typedef float Acc;
    static TD_DEV Acc in(td_f16 v) { return v.f(); }
    static TD_DEV td_f16 out(Acc a) { return td_f16::of(a); }
};
template <> struct sc<td_bf16> {
    typedef float Acc;
    static TD_DEV Acc in(td_bf16 v) { return v.f(); }
    static TD_DEV td_bf16 out(Acc a) { return td_bf16::of(a); }
};
#define TD_SC_INT(T)                                                                       \
    template <> struct sc<T> {                                                             \
        typedef uint64_t Acc;                                                              \
        static TD_DEV Acc in(T v) { return (uint64_t)(int64_t)v; }                         \
        static TD_DEV T out(Acc a) { return (T)a; }                                        \
    };
TD_SC_INT(int32_t)
TD_SC_INT(int64_t)
TD_SC_INT(int8_t)
TD_SC_INT(int16_t)
template <> struct sc<uint8_t> {
    typedef uint64_t Acc;
    static TD_DEV Acc in(uint8_t v) { return v; }
    static TD_DEV uint8_t out(Acc a) { return (uint8_t)a; }
};

template <typename A> TD_DEV A op2(A a, A b, bool prod) { return prod ? a * b : a + b; }

template <typename T>
__global__ void k_lines(const T *x, T *y, int64_t nlines, int64_t n, int64_t inner, bool prod)
{
    typedef typename sc<T>::Acc A;
    for (int64_t l = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; l < nlines;
         l += (int64_t)gridDim.x * blockDim.x) {
        const int64_t o = l / inner, j = l % inner;
        const int64_t base = o * n * inner + j;
        A acc = prod ? (A)1 : (A)0;
        for (int64_t k = 0; k < n; k++) {
            acc = op2<A>(acc, sc<T>::in(x[base + k * inner]), prod);
            y[base + k * inner] = sc<T>::out(acc);
        }
    }
}

/* Thread t of a tile: the total of its SCAN_PER elements, in order. */
template <typename T>
TD_DEV typename sc<T>::Acc thread_total(const T *row, int64_t i0, int64_t n, bool prod)
{
    typedef typename sc<T>::Acc A;
    A acc = prod ? (A)1 : (A)0;
    for (int q = 0; q < SCAN_PER; q++)
        if (i0 + q < n) acc = op2<A>(acc, sc<T>::in(row[i0 + q]), prod);
    return acc;
}

/* Inclusive Hillis-Steele scan of sh[0..SCAN_THREADS) (fixed network); all threads call. */
template <typename A> TD_DEV void block_scan(A *sh, bool prod)
{
    const int t = threadIdx.x;
    for (int s = 1; s < SCAN_THREADS; s *= 2) {
        A v = sh[t];
        if (t >= s) v = op2<A>(sh[t - s], v, prod);
        __syncthreads();
        sh[t] = v;
        __syncthreads();
    }
}

template <typename T>
__global__ void __launch_bounds__(SCAN_THREADS)
    k_tile_totals(const T *x, typename sc<T>::Acc *tot, int64_t nlines, int64_t n,
                  int64_t tiles, bool prod)
{
    typedef typename sc<T>::Acc A;
    __shared__ A sh[SCAN_THREADS];
    for (int64_t u = blockIdx.x; u < nlines * tiles; u += gridDim.x) {
        const int64_t line = u / tiles, tile = u % tiles;
        const T *row = x + line * n;
        const int64_t i0 = tile * SCAN_TILE + (int64_t)threadIdx.x * SCAN_PER;
        sh[threadIdx.x] = thread_total(row, i0, n, prod);
        __syncthreads();
        for (int s = SCAN_THREADS / 2; s > 0; s /= 2) {
            if ((int)threadIdx.x < s) sh[threadIdx.x] = op2<A>(sh[threadIdx.x], sh[threadIdx.x + s], prod);
            __syncthreads();
        }
        if (threadIdx.x == 0) tot[u] = sh[0];
        __syncthreads();
    }
}

/* In place: tot[line * tiles + i] becomes the exclusive prefix of the line's totals. */
template <typename A>
__global__ void __launch_bounds__(SCAN_THREADS)
    k_tile_carry(A *tot, int64_t nlines, int64_t tiles, bool prod)
{
    __shared__ A sh[SCAN_THREADS];
    for (int64_t line = blockIdx.x; line < nlines; line += gridDim.x) {
        A *tl = tot + line * tiles;
        A carry = prod ? (A)1 : (A)0;
        for (int64_t c0 = 0; c0 < tiles; c0 += SCAN_THREADS) {
            const int64_t i = c0 + threadIdx.x;
            const A mine = i < tiles ? tl[i] : (prod ? (A)1 : (A)0);
            sh[threadIdx.x] = mine;
            __syncthreads();
            block_scan<A>(sh, prod);
            const A incl = sh[threadIdx.x];
            const A excl = threadIdx.x == 0 ? (prod ? (A)1 : (A)0) : sh[threadIdx.x - 1];
            const A last = sh[SCAN_THREADS - 1];
            if (i < tiles) tl[i] = op2<A>(carry, excl, prod);
            (void)incl;
            carry = op2<A>(carry, last, prod);
            __syncthreads();
        }
    }
}

template <typename T>
__global__ void __launch_bounds__(SCAN_THREADS)
    k_tile_scan(const T *x, T *y, const typename sc<T>::Acc *carry, int64_t nlines, int64_t n,
                int64_t tiles, bool prod)
{
    typedef typename sc<T>::Acc A;
    __shared__ A sh[SCAN_THREADS];
    for (int64_t u = blockIdx.x; u < nlines * tiles; u += gridDim.x) {
        const int64_t line = u / tiles, tile = u % tiles;
        const T *row = x + line * n;
        T *out = y + line * n;
        const int64_t i0 = tile * SCAN_TILE + (int64_t)threadIdx.x * SCAN_PER;
        sh[threadIdx.x] = thread_total(row, i0, n, prod);
        __syncthreads();
        block_scan<A>(sh, prod);
        const A excl = threadIdx.x == 0 ? (prod ? (A)1 : (A)0) : sh[threadIdx.x - 1];
        A acc = op2<A>(carry[u], excl, prod);
        for (int q = 0; q < SCAN_PER; q++)
            if (i0 + q < n) {
                acc = op2<A>(acc, sc<T>::in(row[i0 + q]), prod);
                out[i0 + q] = sc<T>::out(acc);
            }
        __syncthreads();
    }
}

template <typename T>
td_status run(const td__gpu_exec *x, const void *in, void *outp, int64_t outer, int64_t n,
              int64_t inner, bool prod)
{
    typedef typename sc<T>::Acc A;
    const T *xs = (const T *)in;
    T *ys = (T *)outp;
    const int64_t nlines = outer * inner;
    if (inner > 1 || n <= SCAN_SHORT) {
        k_lines<T><<<td__gpu_blocks(nlines, TD_GPU_THREADS), TD_GPU_THREADS, 0, x->st->s>>>(
            xs, ys, nlines, n, inner, prod);
        return td__gpu_launched(x, "scan kernel");
    }
    const int64_t tiles = (n + SCAN_TILE - 1) / SCAN_TILE;
    void *tmp = NULL;
    td_status s = td__gpu_temp_alloc(x, (size_t)(nlines * tiles) * sizeof(A), &tmp);
    if (s != TD_OK) return s;
    const unsigned tb = td__gpu_blocks(nlines * tiles, 1);
    k_tile_totals<T><<<tb, SCAN_THREADS, 0, x->st->s>>>(xs, (A *)tmp, nlines, n, tiles, prod);
    s = td__gpu_launched(x, "scan totals kernel");
    if (s == TD_OK) {
        k_tile_carry<A><<<td__gpu_blocks(nlines, 1), SCAN_THREADS, 0, x->st->s>>>(
            (A *)tmp, nlines, tiles, prod);
        s = td__gpu_launched(x, "scan carry kernel");
    }
    if (s == TD_OK) {
        k_tile_scan<T><<<tb, SCAN_THREADS, 0, x->st->s>>>(xs, ys, (const A *)tmp, nlines, n,
                                                          tiles, prod);
        s = td__gpu_launched(x, "scan tiles kernel");
    }
    td__gpu_temp_free(x, tmp);
    return s;
}

} // namespace

extern "C" td_status td__gpu_exec_scan(const td__gpu_exec *x, const td__op *op,
                                       const td__view *in, const td__view *out)
{
    const td__desc *d = &in[0].desc;
    if (op->n_iattrs != 1)
        return td__gpu_fail(x, TD_EINTERNAL, TD_GPU_KIND ": %s: bad op", td__op_name(op->opcode));
    const int64_t ax = op->iattrs[0];
    int64_t outer = 1, n = 1, inner = 1;
    for (uint32_t i = 0; i < d->rank; i++) {
        if ((int64_t)i < ax) outer *= d->dims[i];
        else if ((int64_t)i == ax) n = d->dims[i];
        else inner *= d->dims[i];
    }
    if (outer == 0 || n == 0 || inner == 0) return TD_OK;
    const bool prod = op->opcode == TD_OP_CUMPROD;
    const void *xi = in[0].data;
    void *yo = out->data;
    switch (d->dtype) {
    case TD_F32: return run<float>(x, xi, yo, outer, n, inner, prod);
    case TD_F64: return run<double>(x, xi, yo, outer, n, inner, prod);
    case TD_F16: return run<td_f16>(x, xi, yo, outer, n, inner, prod);
    case TD_BF16: return run<td_bf16>(x, xi, yo, outer, n, inner, prod);
    case TD_I32: return run<int32_t>(x, xi, yo, outer, n, inner, prod);
    case TD_I64: return run<int64_t>(x, xi, yo, outer, n, inner, prod);
    case TD_U8: return run<uint8_t>(x, xi, yo, outer, n, inner, prod);
    case TD_I8: return run<int8_t>(x, xi, yo, outer, n, inner, prod);
    case TD_I16: return run<int16_t>(x, xi, yo, outer, n, inner, prod);
    }
    return td__gpu_fail(x, TD_EINTERNAL, TD_GPU_KIND ": %s: no kernel for dtype %u",
                        td__op_name(op->opcode), d->dtype);
}

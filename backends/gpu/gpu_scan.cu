/* gpu_scan.cu — CUMSUM and CUMPROD along one axis (backends/cpu/cpu_scan.c's contract:
 * accumulators in double for f32/f64, f32 for f16/bf16, uint64 wraparound for integers,
 * each output rounded once).
 *
 * Determinism: every association below is fixed by the shape alone (none depends on timing,
 * as decoupled look-back's does: there a tile sums whichever predecessors happen to have
 * published). x is [outer, n, inner]:
 *  - inner > 1, or n <= SCAN_SHORT: one thread per line folds it in index order (the CPU's
 *    order exactly, so these results equal the CPU's bit for bit); neighbouring threads
 *    take neighbouring lines, so reads of a non-innermost axis are coalesced;
 *  - otherwise (contiguous lines longer than SCAN_SHORT) one pass, k_scan_tiles, over tiles
 *    of SCAN_TILE = SCAN_THREADS x SCAN_ITEMS elements of a line, each element read once
 *    and written once (8 bytes an f32 element; the three passes this replaced read the
 *    input twice, 12 bytes, through 4-byte loads, and ran at 0.25x PyTorch). A block takes
 *    the next tile number from an atomic counter, so every smaller number belongs to a
 *    block that has started; blocks only ever wait on smaller numbers, so every wait ends.
 *    It loads its tile into registers (16-byte loads where the line is aligned), each
 *    thread folds its SCAN_ITEMS consecutive elements in order, a fixed Hillis-Steele
 *    network scans the thread totals, and thread 0 publishes the tile total (value, fence,
 *    flag). Tile totals form a fixed tree of fan-out F = SCAN_FAN: node b of level l >= 1
 *    is the total of tiles [b F^l, (b + 1) F^l), the pairwise tree of its F children,
 *    computed and published by the block of its last tile. The exclusive prefix of tile t
 *    sums the nodes its base-F digits name (digit d_l of t: children 0 .. d_l - 1 of t's
 *    ancestor at level l + 1, taken at level l), placed highest level first into one
 *    pairwise tree padded with the identity. So a tile combines the same nodes in the same
 *    association on every run, whatever order the blocks ran in: waits decide when, never
 *    what. Thread i's prefix is tile prefix + (the network's exclusive result for i), and
 *    its elements fold onto it in order.
 * So for long rows the GPU's association differs from the CPU's sequential fold:
 * tests/unit/backends/conformance.c bounds the difference (TD_ACC_CUMSUM / CUMPROD).
 */
#include "backends/gpu/gpu_ops.cuh"
#include <string.h>
#include <type_traits>

namespace {

#define SCAN_THREADS 256
/* Consecutive elements a thread owns (in registers from load to store). */
#define SCAN_ITEMS 16
#define SCAN_TILE (SCAN_THREADS * SCAN_ITEMS)
#define SCAN_SHORT 256
/* Fan-out of the tree of tile totals (a power of two, 2^SCAN_FAN_LOG); SCAN_THREADS /
 * SCAN_FAN levels at most (one group of SCAN_FAN threads reads each in the look-back). */
#define SCAN_FAN 32
#define SCAN_FAN_LOG 5
#define SCAN_LEVELS (SCAN_THREADS / SCAN_FAN)
/* 4 blocks of 256 a multiprocessor: up to 64 registers a thread for its SCAN_ITEMS
 * elements and accumulators. */
#define SCAN_MIN_BLOCKS 4

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

/* Pairwise tree over sh[0..span) (span a power of two); all threads call; the result is
 * sh[0]. */
template <typename A> TD_DEV void block_tree(A *sh, int span, bool prod)
{
    const int t = threadIdx.x;
    for (int s = span / 2; s > 0; s /= 2) {
        if (t < s) sh[t] = op2<A>(sh[t], sh[t + s], prod);
        __syncthreads();
    }
}

/* Where a line's nodes of level l start in its part of the node arrays (level m holds
 * ceil(tiles / F^m) nodes, levels stored in order). Host and device. */
TD_HOSTDEV int64_t level_off(int64_t tiles, int l)
{
    int64_t off = 0;
    for (int m = 0; m < l; m++) off += (tiles + ((int64_t)1 << (SCAN_FAN_LOG * m)) - 1) >> (SCAN_FAN_LOG * m);
    return off;
}

/* Make v opaque to the compiler: after it, v must be converted again rather than kept
 * converted. k_scan_tiles folds its elements twice (the thread total, then the outputs);
 * without this nvcc kept the 16 widened doubles of an f32 tile alive across the look-back
 * and spilled. A no-op off the NVIDIA device (HIP, the CPU emulation). */
template <typename T> TD_DEV void opaque(T &v)
{
#if defined(__CUDA_ARCH__)
    if constexpr (sizeof(T) == 8) {
        unsigned long long w;
        memcpy(&w, &v, 8);
        asm volatile("" : "+l"(w));
        memcpy(&v, &w, 8);
    } else if constexpr (sizeof(T) == 4) {
        unsigned w;
        memcpy(&w, &v, 4);
        asm volatile("" : "+r"(w));
        memcpy(&v, &w, 4);
    } else {
        unsigned short w = 0;
        memcpy(&w, &v, sizeof(T));
        asm volatile("" : "+h"(w));
        memcpy(&v, &w, sizeof(T));
    }
#else
    (void)v;
#endif
}

/* Publish node i: the value, a fence, then the flag (readers test the flag, fence, then read
 * the value; both through volatile accesses, which bypass the incoherent L1). */
template <typename A> TD_DEV void publish(A *val, unsigned *flag, int64_t i, A v)
{
    *(volatile A *)&val[i] = v;
    __threadfence();
    *(volatile unsigned *)&flag[i] = 1u;
}

template <typename A> TD_DEV A await(const A *val, const unsigned *flag, int64_t i)
{
    while (*(const volatile unsigned *)&flag[i] == 0u) {
    }
    __threadfence();
    return *(const volatile A *)&val[i];
}

/* 16 bytes of elements: a tile's loads and stores when the line is aligned. */
template <typename T> struct alignas(16) scan_vec {
    T v[16 / sizeof(T)];
};

/* One tile per block (module comment). VEC: the lines start 16-byte aligned in x and y, so a
 * thread's SCAN_ITEMS elements move as 16-byte vectors where they lie inside the line; only
 * the loads and stores change, never the fold. */
template <typename T, bool VEC>
__global__ void __launch_bounds__(SCAN_THREADS, SCAN_MIN_BLOCKS)
    k_scan_tiles(const T *__restrict__ x, T *__restrict__ y, int64_t n, unsigned tiles,
                 int levels, int64_t per_line, typename sc<T>::Acc *val, unsigned *flag,
                 unsigned *counter, bool prod)
{
    typedef typename sc<T>::Acc A;
    constexpr int V = 16 / (int)sizeof(T);
    constexpr bool VECS = SCAN_ITEMS % V == 0 && SCAN_ITEMS >= V;
    __shared__ A sh[SCAN_THREADS];
    __shared__ unsigned s_id;
    const int t = threadIdx.x;
    const A id = prod ? (A)1 : (A)0;
    if (t == 0) s_id = atomicAdd(counter, 1u);
    __syncthreads();
    const unsigned u = s_id, line = u / tiles, tile = u - line * tiles;
    const T *row = x + (int64_t)line * n;
    T *out = y + (int64_t)line * n;
    A *lval = val + (int64_t)line * per_line;
    unsigned *lflag = flag + (int64_t)line * per_line;
    const int64_t i0 = (int64_t)tile * SCAN_TILE + (int64_t)t * SCAN_ITEMS;
    const bool full = i0 + SCAN_ITEMS <= n;
    T v[SCAN_ITEMS];
    if (VEC && VECS && full) {
#pragma unroll
        for (int k = 0; k < SCAN_ITEMS / V; k++) {
            const scan_vec<T> w = ((const scan_vec<T> *)(row + i0))[k];
#pragma unroll
            for (int q = 0; q < V; q++) v[k * V + q] = w.v[q];
        }
    } else {
#pragma unroll
        for (int q = 0; q < SCAN_ITEMS; q++)
            if (i0 + q < n) v[q] = row[i0 + q];
    }
    A acc = id;
    if (full) {
#pragma unroll
        for (int q = 0; q < SCAN_ITEMS; q++) acc = op2<A>(acc, sc<T>::in(v[q]), prod);
    } else {
        for (int q = 0; q < SCAN_ITEMS; q++)
            if (i0 + q < n) acc = op2<A>(acc, sc<T>::in(v[q]), prod);
    }
    sh[t] = acc;
    __syncthreads();
    block_scan<A>(sh, prod);
    const A excl = t == 0 ? id : sh[t - 1];
    A node = sh[SCAN_THREADS - 1]; /* the tile's total */
    __syncthreads();
    if (t == 0) publish<A>(lval, lflag, tile, node);
    /* the last child of a node computes and publishes it, level after level */
    unsigned idx = tile;
    int64_t below = 0; /* level_off(tiles, l - 1) */
    for (int l = 1; l < levels && idx % SCAN_FAN == SCAN_FAN - 1; l++) {
        const unsigned parent = idx / SCAN_FAN;
        const int64_t here = level_off(tiles, l);
        if (t < SCAN_FAN)
            sh[t] = t == SCAN_FAN - 1
                        ? node
                        : await<A>(lval, lflag, below + (int64_t)parent * SCAN_FAN + t);
        __syncthreads();
        block_tree<A>(sh, SCAN_FAN, prod);
        node = sh[0];
        __syncthreads();
        if (t == 0) publish<A>(lval, lflag, here + parent, node);
        idx = parent;
        below = here;
    }
    /* the tile's exclusive prefix: thread g F + j takes child j of level l = levels - 1 - g
     * when j < digit l of the tile, else the identity */
    {
        const int g = t / SCAN_FAN, j = t % SCAN_FAN, l = levels - 1 - g;
        A w = id;
        if (l >= 0) {
            const uint64_t above = (uint64_t)tile >> (SCAN_FAN_LOG * (l + 1));
            const unsigned d = (unsigned)((uint64_t)tile >> (SCAN_FAN_LOG * l)) % SCAN_FAN;
            if ((unsigned)j < d)
                w = await<A>(lval, lflag, level_off(tiles, l) + (int64_t)above * SCAN_FAN + j);
        }
        sh[t] = w;
    }
    __syncthreads();
    int span = 1;
    while (span < levels * SCAN_FAN) span *= 2;
    block_tree<A>(sh, span, prod);
    acc = op2<A>(sh[0], excl, prod);
#pragma unroll
    for (int q = 0; q < SCAN_ITEMS; q++) opaque(v[q]);
    if (VEC && VECS && full) {
#pragma unroll
        for (int k = 0; k < SCAN_ITEMS / V; k++) {
            scan_vec<T> w;
#pragma unroll
            for (int q = 0; q < V; q++) {
                acc = op2<A>(acc, sc<T>::in(v[k * V + q]), prod);
                w.v[q] = sc<T>::out(acc);
            }
            ((scan_vec<T> *)(out + i0))[k] = w;
        }
    } else {
        for (int q = 0; q < SCAN_ITEMS; q++)
            if (i0 + q < n) {
                acc = op2<A>(acc, sc<T>::in(v[q]), prod);
                out[i0 + q] = sc<T>::out(acc);
            }
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
    if (tiles > INT32_MAX / nlines)
        return td__gpu_fail(x, TD_EUNSUPPORTED, "%s: %lld lines of %lld elements are too many",
                            prod ? "cumprod" : "cumsum", (long long)nlines, (long long)n);
    int levels = 1;
    for (int64_t cap = SCAN_FAN; cap < tiles; cap *= SCAN_FAN) levels++;
    const int64_t per_line = level_off(tiles, levels);
    /* [counter, padded to 16 bytes][flags: unsigned x nodes][values: A x nodes] */
    const int64_t nodes = nlines * per_line;
    const size_t flag_bytes = (16 + (size_t)nodes * sizeof(unsigned) + 15) / 16 * 16;
    void *tmp = NULL;
    td_status s = td__gpu_temp_alloc(x, flag_bytes + (size_t)nodes * sizeof(A), &tmp);
    if (s != TD_OK) return s;
    s = td__gpu_check(x, gpuMemsetAsync(tmp, 0, flag_bytes, x->st->s), "scan flags");
    if (s == TD_OK) {
        unsigned *counter = (unsigned *)tmp;
        unsigned *flag = (unsigned *)((char *)tmp + 16);
        A *val = (A *)((char *)tmp + flag_bytes);
        const bool vec = (uintptr_t)xs % 16 == 0 && (uintptr_t)ys % 16 == 0 &&
                         (nlines == 1 || (n * (int64_t)sizeof(T)) % 16 == 0);
        const unsigned blocks = (unsigned)(nlines * tiles);
        if (vec)
            k_scan_tiles<T, true><<<blocks, SCAN_THREADS, 0, x->st->s>>>(
                xs, ys, n, (unsigned)tiles, levels, per_line, val, flag, counter, prod);
        else
            k_scan_tiles<T, false><<<blocks, SCAN_THREADS, 0, x->st->s>>>(
                xs, ys, n, (unsigned)tiles, levels, per_line, val, flag, counter, prod);
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

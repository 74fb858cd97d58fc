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
 *    of 256 threads x ITEMS elements (32 of 4 bytes or less, 16 of 8 bytes: 32 KiB of f32),
 *    each element read once and written once. A block takes the next tile number from an
 *    atomic counter, so every smaller number belongs to a block that has started; blocks
 *    only ever wait on smaller numbers, so every wait ends.
 *    Inside a tile, warp w owns a contiguous segment of 32 x ITEMS elements, cut into
 *    16-byte chunks; lane l owns chunks l, 32 + l, 64 + l, ... ("row" k = chunk k of every
 *    lane), so warp instruction k of a load or store covers 512 contiguous bytes. Each lane
 *    folds each of its chunks in order, a shuffle network (Hillis-Steele, 5 steps) scans
 *    each row across the lanes, the rows' totals fold in order into row prefixes and the
 *    warp's total, and the warps' totals fold in order into the warps' offsets and the
 *    tile's total: one barrier. Thread 0 publishes the tile total at once (value, fence,
 *    flag). Tile totals form a fixed tree of fan-out F = 32: node b of level l >= 1 is the
 *    total of tiles [b F^l, (b + 1) F^l), the butterfly of its F children, computed and
 *    published by the block of its last tile before that block waits for anything else.
 *    The exclusive prefix of tile t sums the nodes its base-F digits name (digit d_l of t:
 *    children 0 .. d_l - 1 of t's ancestor at level l + 1): warp l takes level l, lane j
 *    child j (the identity where j >= d_l), a butterfly sums them, and the levels fold from
 *    the top down (second barrier). Waiting lanes poll their flag with a growing sleep
 *    (__nanosleep) so that polls do not crowd the memory system. So a tile combines the
 *    same nodes in the same association on every run, whatever order the blocks ran in:
 *    waits decide when, never what. Element i of a chunk is ((((tile prefix + warp offset)
 *    + row prefix) + the lane's exclusive row prefix) + the chunk's elements up to i).
 *    (The first one-pass version, 1011 GB/s against PyTorch's 2575 on the H200, had
 *    16-element tiles, 16 barriers of a shared-memory scan, the tile total published after
 *    them, and up to 128 threads a block polling without a pause.)
 * So for long rows the GPU's association differs from the CPU's sequential fold:
 * tests/unit/backends/conformance.c bounds the difference (TD_ACC_CUMSUM / CUMPROD).
 */
#include "backends/gpu/gpu_ops.cuh"
#include <string.h>
#include <type_traits>

namespace {

#define SCAN_THREADS 256
#define SCAN_WARPS (SCAN_THREADS / 32)
#define SCAN_SHORT 256
/* Fan-out of the tree of tile totals: a warp's width (lane j takes child j), 2^SCAN_FAN_LOG.
 * At most SCAN_WARPS levels (warp g awaits level g in the look-back): 32^7 > 2^31 tiles. */
#define SCAN_FAN 32
#define SCAN_FAN_LOG 5
/* 3 blocks of 256 a multiprocessor: up to 85 registers a thread, for 32 elements (f32) as
 * loaded and the accumulators (the lanes' exclusive row prefixes wait in shared memory). */
#define SCAN_MIN_BLOCKS 3

/* The tile shape per element type: a chunk is 16 bytes (V elements, one vector load); a
 * thread owns K chunks, ITEMS elements (32 of 4 bytes or less, 16 of 8 bytes). */
template <typename T> struct scan_shape {
    static constexpr int V = 16 / (int)sizeof(T);
    static constexpr int ITEMS = sizeof(T) >= 8 ? 16 : 32;
    static constexpr int K = ITEMS / V;
    static constexpr int TILE = SCAN_THREADS * ITEMS;
};

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

/* Warp shuffles of an accumulator (double, float or uint64_t) within 32 lanes: from lane
 * - d (a lane below d keeps its own value), from lane + d (past 31: its own), lane ^ m. */
template <typename A> TD_DEV A shfl_up(A v, int d)
{
#if defined(TD_GPU_HIP)
    return __shfl_up(v, (unsigned)d, 32);
#else
    return __shfl_up_sync(0xffffffffu, v, (unsigned)d, 32);
#endif
}
template <typename A> TD_DEV A shfl_down(A v, int d)
{
#if defined(TD_GPU_HIP)
    return __shfl_down(v, (unsigned)d, 32);
#else
    return __shfl_down_sync(0xffffffffu, v, (unsigned)d, 32);
#endif
}
template <typename A> TD_DEV A shfl_xor(A v, int m)
{
#if defined(TD_GPU_HIP)
    return __shfl_xor(v, m, 32);
#else
    return __shfl_xor_sync(0xffffffffu, v, m, 32);
#endif
}

/* The op over a warp's 32 values along a fixed butterfly (lane ^ 16, 8, 4, 2, 1); a + b ==
 * b + a and a b == b a bit for bit, so every lane ends with the same bits. */
template <typename A> TD_DEV A warp_tree(A v, bool prod)
{
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) v = op2<A>(v, shfl_xor(v, m), prod);
    return v;
}

/* A polling thread's pause between looks at a flag: lets the loads of running tiles through
 * instead of filling the memory system with polls. */
TD_DEV void backoff(unsigned ns)
{
#if defined(TD_GPU_HIP)
    (void)ns;
    __builtin_amdgcn_s_sleep(2);
#else
    __nanosleep(ns);
#endif
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
    unsigned ns = 32;
    while (*(const volatile unsigned *)&flag[i] == 0u) {
        backoff(ns);
        if (ns < 512) ns *= 2;
    }
    __threadfence();
    return *(const volatile A *)&val[i];
}

/* 16 bytes of elements: a tile's loads and stores when the line is aligned. */
template <typename T> struct alignas(16) scan_vec {
    T v[16 / sizeof(T)];
};

/* One tile per block (module comment). VEC: the lines start 16-byte aligned in x and y, so
 * a full tile's chunks move as 16-byte vectors (warp instruction k of warp w covers 512
 * contiguous bytes); a partial tile, or an unaligned line, moves element by element. Only
 * the loads and stores differ, never the fold. */
template <typename T, bool VEC>
__global__ void __launch_bounds__(SCAN_THREADS, SCAN_MIN_BLOCKS)
    k_scan_tiles(const T *__restrict__ x, T *__restrict__ y, int64_t n, unsigned tiles,
                 int levels, int64_t per_line, typename sc<T>::Acc *val, unsigned *flag,
                 unsigned *counter, bool prod)
{
    typedef typename sc<T>::Acc A;
    typedef scan_shape<T> S;
    constexpr int V = S::V, K = S::K, ITEMS = S::ITEMS;
    __shared__ A s_warp[SCAN_WARPS];         /* warp totals */
    __shared__ A s_row[SCAN_WARPS * K];      /* row prefixes P_k of each warp */
    __shared__ A s_lev[SCAN_WARPS];          /* the look-back's sum of each level */
    __shared__ A s_excl[K * SCAN_THREADS];   /* each lane's exclusive prefix in row k */
    __shared__ unsigned s_id;
    const int t = threadIdx.x, lane = t % 32, wp = t / 32;
    const A id = prod ? (A)1 : (A)0;
    if (t == 0) s_id = atomicAdd(counter, 1u);
    __syncthreads();
    const unsigned u = s_id, line = u / tiles, tile = u - line * tiles;
    const T *row = x + (int64_t)line * n;
    T *out = y + (int64_t)line * n;
    A *lval = val + (int64_t)line * per_line;
    unsigned *lflag = flag + (int64_t)line * per_line;
    const int64_t tbase = (int64_t)tile * S::TILE;
    const int64_t seg = tbase + (int64_t)wp * 32 * ITEMS; /* the warp's first element */
    const bool full = tbase + S::TILE <= n;               /* the same in every thread */
    T v[ITEMS];
    if (VEC && full) {
#pragma unroll
        for (int k = 0; k < K; k++) {
            const scan_vec<T> w = *(const scan_vec<T> *)(row + seg + ((int64_t)k * 32 + lane) * V);
#pragma unroll
            for (int q = 0; q < V; q++) v[k * V + q] = w.v[q];
        }
    } else {
#pragma unroll
        for (int k = 0; k < K; k++) {
            const int64_t e0 = seg + ((int64_t)k * 32 + lane) * V;
#pragma unroll
            for (int q = 0; q < V; q++) v[k * V + q] = row[full || e0 + q < n ? e0 + q : 0];
        }
    }
    /* Row k of the warp is chunk k of its 32 lanes (in memory order). Each lane folds its
     * chunk; a shuffle network scans the row (inclusive, Hillis-Steele from lane - d), the
     * exclusive lane prefix is kept, lane 31's inclusive value is the row total R_k, and
     * the row prefix P_k = ((R_0 + R_1) + ...) + R_(k-1) goes to shared memory. */
    A wtot = id;
#pragma unroll
    for (int k = 0; k < K; k++) {
        const int64_t e0 = seg + ((int64_t)k * 32 + lane) * V;
        A s = id;
#pragma unroll
        for (int q = 0; q < V; q++)
            if (full || e0 + q < n) s = op2<A>(s, sc<T>::in(v[k * V + q]), prod);
#pragma unroll
        for (int d = 1; d < 32; d *= 2) {
            const A o = shfl_up(s, d);
            if (lane >= d) s = op2<A>(o, s, prod);
        }
        const A e = shfl_up(s, 1);
        s_excl[k * SCAN_THREADS + t] = lane == 0 ? id : e; /* read back by this thread only */
        const A rt = shfl_down(s, 31 - lane);
        if (lane == 0) s_row[wp * K + k] = wtot;
        wtot = op2<A>(wtot, rt, prod);
    }
    if (lane == 0) s_warp[wp] = wtot;
    __syncthreads();
    /* the warp's offset and the tile's total: the warps' totals folded in order */
    A off = id, total = id;
#pragma unroll
    for (int w = 0; w < SCAN_WARPS; w++) {
        if (w == wp) off = total;
        total = op2<A>(total, s_warp[w], prod);
    }
    if (t == 0) publish<A>(lval, lflag, tile, total);
    /* The last child of a node computes and publishes it, level after level, before this
     * tile waits for its own prefix (so no chain of prefixes ever forms). Every warp computes
     * it alike (lane j: child j; lane 31: this tile's own node), thread 0 publishes. */
    {
        A node = total;
        unsigned idx = tile;
        int64_t below = 0; /* level_off(tiles, l - 1) */
        for (int l = 1; l < levels && idx % SCAN_FAN == SCAN_FAN - 1; l++) {
            const unsigned parent = idx / SCAN_FAN;
            A c = lane == SCAN_FAN - 1
                      ? node
                      : await<A>(lval, lflag, below + (int64_t)parent * SCAN_FAN + lane);
            node = warp_tree<A>(c, prod);
            const int64_t here = level_off(tiles, l);
            if (t == 0) publish<A>(lval, lflag, here + parent, node);
            idx = parent;
            below = here;
        }
    }
    /* The tile's exclusive prefix: warp g takes level g, lane j child j of this tile's
     * ancestor at level g + 1 when j < digit g of the tile (else the identity), a butterfly
     * sums them; the levels are then folded from the top down. */
    {
        A c = id;
        if (wp < levels) {
            const uint64_t above = (uint64_t)tile >> (SCAN_FAN_LOG * (wp + 1));
            const unsigned d = (unsigned)((uint64_t)tile >> (SCAN_FAN_LOG * wp)) % SCAN_FAN;
            if ((unsigned)lane < d)
                c = await<A>(lval, lflag, level_off(tiles, wp) + (int64_t)above * SCAN_FAN + lane);
        }
        c = warp_tree<A>(c, prod);
        if (lane == 0) s_lev[wp] = c;
    }
    __syncthreads();
    A pre = id;
    for (int l = levels - 1; l >= 0; l--) pre = op2<A>(pre, s_lev[l], prod);
    const A base = op2<A>(pre, off, prod);
#pragma unroll
    for (int q = 0; q < ITEMS; q++) opaque(v[q]);
    /* element i of chunk (k, lane): ((((pre + off) + P_k) + excl_k) + x_0) + ... + x_i */
#pragma unroll
    for (int k = 0; k < K; k++) {
        const int64_t e0 = seg + ((int64_t)k * 32 + lane) * V;
        A acc = op2<A>(op2<A>(base, s_row[wp * K + k], prod), s_excl[k * SCAN_THREADS + t], prod);
        if (VEC && full) {
            scan_vec<T> w;
#pragma unroll
            for (int q = 0; q < V; q++) {
                acc = op2<A>(acc, sc<T>::in(v[k * V + q]), prod);
                w.v[q] = sc<T>::out(acc);
            }
            *(scan_vec<T> *)(out + e0) = w;
        } else {
#pragma unroll
            for (int q = 0; q < V; q++)
                if (full || e0 + q < n) {
                    acc = op2<A>(acc, sc<T>::in(v[k * V + q]), prod);
                    out[e0 + q] = sc<T>::out(acc);
                }
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
    const int64_t tiles = (n + scan_shape<T>::TILE - 1) / scan_shape<T>::TILE;
    if (tiles > INT32_MAX / nlines)
        return td__gpu_fail(x, TD_EUNSUPPORTED, "%s: %lld lines of %lld elements are too many",
                            prod ? "cumprod" : "cumsum", (long long)nlines, (long long)n);
    int levels = 1;
    for (int64_t cap = SCAN_FAN; cap < tiles; cap *= SCAN_FAN) levels++;
    if (levels > SCAN_WARPS) /* not reached: tiles < 2^31 < 32^7 */
        return td__gpu_fail(x, TD_EINTERNAL, "%s: %d tree levels", prod ? "cumprod" : "cumsum",
                            levels);
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

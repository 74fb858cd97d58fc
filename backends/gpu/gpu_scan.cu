/* gpu_scan.cu — CUMSUM and CUMPROD along one axis (backends/cpu/cpu_scan.c's contract:
 * accumulators in double for f32/f64, f32 for f16/bf16, uint64 wraparound for integers,
 * each output rounded once).
 *
 * Determinism: every association below is fixed by the shape alone, never by timing (CUB's
 * decoupled look-back is not: there a tile adds up whichever predecessors happen to have
 * published, in the order it meets them walking down). x is [outer, n, inner]:
 *  - inner > 1, or n <= SCAN_SHORT: one thread per line folds it in index order (the CPU's
 *    order exactly, so these results equal the CPU's bit for bit); neighbouring threads
 *    take neighbouring lines, so reads of a non-innermost axis are coalesced;
 *  - otherwise (contiguous lines longer than SCAN_SHORT) one pass over tiles of 256 threads
 *    x ITEMS elements (32 of 4 bytes or less, 16 of 8 bytes: 32 KiB of f32), each element
 *    read once and written once. A block takes the next tile number from an atomic counter,
 *    so every smaller number belongs to a block that has started; blocks only ever wait on
 *    smaller numbers, so every wait ends.
 *    Inside a tile, warp w owns a contiguous segment of 32 x ITEMS elements, cut into
 *    16-byte chunks; lane l owns chunks l, 32 + l, 64 + l, ... ("row" k = chunk k of every
 *    lane), so warp instruction k of a load or store covers 512 contiguous bytes. Each lane
 *    folds each of its chunks in order, a shuffle network (Hillis-Steele, 5 steps) scans
 *    each row across the lanes, the rows' totals fold in order into row prefixes and the
 *    warp's total, and the warps' totals fold in order into the warps' offsets and the
 *    tile's total agg_t: one barrier. Element i of a chunk is ((((tile prefix + warp offset)
 *    + row prefix) + the lane's exclusive row prefix) + the chunk's elements up to i). The
 *    tile prefix (the totals of the tiles before it) comes from one of two kernels, by
 *    TENSORD_GPU_SCAN_VARIANT (variant(), below), which share everything else (take_tile,
 *    load_tile, fold_tile, store_tile):
 *    0, k_scan_tiles, a fixed tree. Thread 0 publishes the tile total at once
 *    (value, fence, flag). Tile totals form a fixed tree of fan-out F = 32: node b of level
 *    l >= 1 is the total of tiles [b F^l, (b + 1) F^l), the butterfly of its F children,
 *    computed and published by the block of its last tile before that block waits for
 *    anything else. The exclusive prefix of tile t sums the nodes its base-F digits name
 *    (digit d_l of t: children 0 .. d_l - 1 of t's ancestor at level l + 1): warp l takes
 *    level l, lane j child j (the identity where j >= d_l), a butterfly sums them, and the
 *    levels fold from the top down (second barrier). Waiting lanes poll their flag with a
 *    growing sleep (__nanosleep) so that polls do not crowd the memory system. So a tile
 *    combines the same nodes in the same association on every run, whatever order the
 *    blocks ran in: waits decide when, never what. (The first one-pass version, 1011 GB/s
 *    against PyTorch's 2575 on the H200, had 16-element tiles, 16 barriers of a
 *    shared-memory scan, the tile total published after them, and up to 128 threads a
 *    block polling without a pause.)
 *    1, k_scan_lookback, ordered decoupled look-back. Let incl_0 = agg_0 (agg_0 itself, not
 *    0 + agg_0, which turns -0 into +0) and incl_t = incl_(t-1) op agg_t: the left fold of
 *    the tile totals in ascending order. Thread 0 publishes agg_t as soon as it is known
 *    (value, fence, flag 1; tile 0 publishes incl_0 with flag 2). Then warp 0's lanes await
 *    the flags of the 32 tiles below (nonzero), the block takes the highest j whose flag
 *    was 2 (none: the next 32 below; tile 0 always has one), and thread 0 folds upwards
 *    excl_t = ((incl_j op agg_(j+1)) op ...) op agg_(t-1), re-reading the aggregates of the
 *    windows it passed over (a published value never changes), and publishes
 *    incl_t = excl_t op agg_t with flag 2. By induction incl_j is the left fold of agg_0 ..
 *    agg_j bit for bit, and folding the rest in ascending order continues that same fold one
 *    term at a time: excl_t is the left fold of agg_0 .. agg_(t-1) whichever j was found —
 *    the same operations on the same operands in the same order; timing decides only how
 *    many of them this tile repeats itself. (CUB folds the window from the top down as it
 *    walks, so its result depends on where it stops.) tests/gpu/scan_lookback_check.c checks
 *    this on a model of the protocol under random schedules. 2: 1 with only every 97th
 *    tile's inclusive prefix published (a test aid: in the CPU emulation blocks run in
 *    order, so every look-back would stop at the tile just below). The look-back uses
 *    barriers and shared memory, no shuffles: the emulation runs block-uniform shuffles
 *    only, and only warp 0 looks back.
 *    3, 4, k_scan_chain, the chained scan: variant 1's association exactly (excl_t is the
 *    left fold agg_0 op ... op agg_(t-1), incl_0 = agg_0, incl_t = excl_t op agg_t, each
 *    element ((((excl_t + warp offset) + row prefix) + lane prefix) + elements)), so its
 *    bits are 1's where the tile is the same, and they depend on the shape and the tile
 *    alone: whichever incl_j a look-back starts from, folding agg_(j+1) .. agg_(t-1) onto it
 *    in ascending order continues the same left fold (1's induction), and a tile never adds
 *    anything in an order that a wait could change; but an op on two NaNs may give other bits
 *    at another place in the code, so a NaN exclusive prefix is made the one quiet NaN
 *    (canon_nan: NaN bits then differ from 1's, and other values do not). What differs from
 *    1 is the machinery, for 1's measured costs:
 *    tiles of 512 threads (3: 16384 f32 elements, half as many hops
 *    of the chain of inclusive prefixes, 2 blocks a multiprocessor) or 256 (4: 1's tile,
 *    to tell the two changes apart); a tile's aggregate and its inclusive prefix each in
 *    one self-checking word (value and value ^ KEY, 16 or 8 bytes, chain_word), so a poll
 *    is one load, not a flag, a fence and a value; warp 0's lanes poll both words of their
 *    tile at once; the windows passed over stay in shared memory (up to 16 windows, 512
 *    tiles) and thread 0 folds them from there, where 1 re-read each aggregate from global
 *    memory in turn. 5: 3 with no inclusive prefix published but tile 0's (a test aid, as 2
 *    for 1: look-backs cross windows, and past 512 tiles take thread 0's walk; slow, for
 *    conformance only). The tile's number comes from the atomic counter as in 0 and 1, so
 *    every wait is on a tile that has started: no deadlock, whatever the number of blocks
 *    in flight.
 * So for long rows the GPU's association differs from the CPU's sequential fold (and
 * variant 0's from variant 1's, and 3's tiles of 16384 from 1's of 8192 f32 elements):
 * tests/unit/backends/conformance.c bounds the difference (TD_ACC_CUMSUM / CUMPROD:
 * 4 n u S_i, where a sum evaluated along a fixed tree of depth d is within gamma_d S_i =
 * d u S_i (1 + O(u)) of the exact one: Higham, Accuracy and Stability of Numerical
 * Algorithms, 2nd ed., section 4.2; the CPU's own fold has depth n, so the two differ by
 * at most (n + d) u S_i (1 + O(u))). Variant 0: d is at most about
 * 2 V + K + 25 + 6 x levels, under 100 (V <= 8 and K <= 8 for the float dtypes, levels <=
 * 7), while the tiled path starts at n = 257. Variant 1: the carry is a sequential fold, so
 * a term of tile j passes through t - j of its additions: d <= 2 V + K + 25 + T with T =
 * ceil(n / TILE) <= n / 4096 + 1 tiles, still far below 3 n for every n >= 257, so the
 * tolerance holds unchanged. The bound is looser than variant 0's: for 2^28 f32 (T = 2^15,
 * double accumulators) about 2^-38 S_i, far below the output's rounding; for f16/bf16 (f32
 * accumulators, T = n / 8192) T 2^-24 S_i, 2^-13 S_i at n = 2^24, under the f16 output's
 * own rounding (2^-11 |y_i|) where nothing cancels (S_i = |y_i|). Variants 3 to 5: 1's
 * bound with T = ceil(n / (NT x ITEMS)), as many tiles or fewer. For CUMPROD read |want|
 * for S_i.
 * Measured on an H100 (BENCHMARKS.md, 2026-12-06, 3 blocks a multiprocessor), variant 0:
 * 2^28 f32 in 1.358 ms, 1.58 TB/s, 0.75x PyTorch's (CUB's) 2.10 TB/s, conformance of every
 * cum case passing. 2026-12-06 11:40 UTC, same card type, with the bound of 4 blocks below
 * (tests/gpu/memops-on-gpu-host.sh, 3 alternated runs): variant 0 1.347 ms (1.59 TB/s,
 * 0.76x PyTorch's 1.017 ms; ncu 54 % of DRAM bandwidth, 47 % occupancy, half the stalls at
 * the block's barriers), variant 1 1.893 ms (0.54x; ncu 36 %: warp 0's look-back holds the
 * other warps at the barrier); conformance of every cum case passes under both
 * (tests/gpu/emu/run.sh checks the kernels on the CPU). The chained scan, variant 4, is the
 * default since 2026-12-07: 2^28 f32 in 0.823 ms on an H200 (1.03x PyTorch; variant 0
 * 1.144 ms, 0.74x) and 0.941 ms on an H100 (1.07x; variant 0 1.345 ms, 0.75x). Its first
 * H200 run failed conformance's second-run check on multi-line cases with NaNs (NaN bits
 * that depended on which block folded a prefix, before canon_nan); with canon_nan an H100
 * passed every cum case in 9 passes of variant 4 and 4 of variant 3, and scan-check under
 * both (BENCHMARKS.md, 2026-12-07 07:30).
 */
#include "backends/gpu/gpu_ops.cuh"
#include <stdlib.h>
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
/* 4 blocks of 256 a multiprocessor: at most 64 registers a thread, for 32 elements (f32) as
 * loaded and the accumulators (the lanes' exclusive row prefixes wait in shared memory);
 * ptxas spills 96 bytes for f32 (to L1). At 3 blocks (80 registers, no spill) an H100 ran
 * 2^28 f32 at 1.58 TB/s, 0.75x PyTorch, with 47 % of DRAM bandwidth and 37 % occupancy in
 * ncu. At 4 (64 registers, the spill) 1.347 ms, 0.76x: more tiles in flight gained 1 %. */
#define SCAN_MIN_BLOCKS 4

/* The tile shape per element type: a chunk is 16 bytes (V elements, one vector load); a
 * thread owns K chunks, ITEMS elements (32 of 4 bytes or less, 16 of 8 bytes). */
template <typename T> struct scan_shape {
    static constexpr int V = 16 / (int)sizeof(T);
    static constexpr int ITEMS = sizeof(T) >= 8 ? 16 : 32;
    static constexpr int K = ITEMS / V;
    static constexpr int TILE = SCAN_THREADS * ITEMS; /* of a block of SCAN_THREADS */
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
 * - d (a lane below d keeps its own value), from lane + d (past 31: its own), lane ^ m.
 * (HIP: integers travel as unsigned long long, the overload every HIP version has.) */
#if defined(TD_GPU_HIP)
template <typename A> using shfl_t =
    typename std::conditional<std::is_integral<A>::value, unsigned long long, A>::type;
#endif
template <typename A> TD_DEV A shfl_up(A v, int d)
{
#if defined(TD_GPU_HIP)
    return (A)__shfl_up((shfl_t<A>)v, (unsigned)d, 32);
#else
    return __shfl_up_sync(0xffffffffu, v, (unsigned)d, 32);
#endif
}
template <typename A> TD_DEV A shfl_down(A v, int d)
{
#if defined(TD_GPU_HIP)
    return (A)__shfl_down((shfl_t<A>)v, (unsigned)d, 32);
#else
    return __shfl_down_sync(0xffffffffu, v, (unsigned)d, 32);
#endif
}
template <typename A> TD_DEV A shfl_xor(A v, int m)
{
#if defined(TD_GPU_HIP)
    return (A)__shfl_xor((shfl_t<A>)v, m, 32);
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

/* Publish entry i: the value, a fence, then the flag `state` (readers test the flag, fence,
 * then read the value; both through volatile accesses, which bypass the incoherent L1). */
template <typename A>
TD_DEV void publish(A *val, unsigned *flag, int64_t i, A v, unsigned state = 1u)
{
    *(volatile A *)&val[i] = v;
    __threadfence();
    *(volatile unsigned *)&flag[i] = state;
}

/* Wait until flag i is nonzero; returns it (after a fence: the values it announces may be
 * read). */
TD_DEV unsigned await_flag(const unsigned *flag, int64_t i)
{
    unsigned ns = 16; /* at most 128: a warp's poll of its 31 flags is one or two L2 lines, so
                       * a short pause costs little traffic and wakes the waiter soon */
    unsigned f;
    while ((f = *(const volatile unsigned *)&flag[i]) == 0u) {
        backoff(ns);
        if (ns < 128) ns *= 2;
    }
    __threadfence();
    return f;
}

template <typename A> TD_DEV A await(const A *val, const unsigned *flag, int64_t i)
{
    (void)await_flag(flag, i);
    return *(const volatile A *)&val[i];
}

/* 16 bytes of elements: a tile's loads and stores when the line is aligned. */
template <typename T> struct alignas(16) scan_vec {
    T v[16 / sizeof(T)];
};

/* A block's tile (module comment): its number from the atomic counter, its line, the first
 * element of the warp's segment and whether the tile is full. The pieces below are shared by
 * both tile kernels (k_scan_tiles, k_scan_lookback): only the tile's prefix differs. */
struct scan_tile {
    unsigned line, tile;
    int64_t seg;
    bool full; /* the same in every thread */
};

/* Shared memory of the in-tile scan. */
/* NT: threads a block (SCAN_THREADS for variants 0 and 1; the chained scan's own sizes). */
template <typename A, int K, int NT = SCAN_THREADS> struct scan_smem {
    A warp[NT / 32];            /* warp totals */
    A row[NT / 32 * K];         /* row prefixes P_k of each warp */
    A excl[K * NT];             /* each lane's exclusive prefix in row k */
    unsigned id;
};

template <typename T, typename A, int K, int NT>
TD_DEV scan_tile take_tile(scan_smem<A, K, NT> &sm, unsigned *counter, unsigned tiles, int64_t n)
{
    typedef scan_shape<T> S;
    constexpr int64_t TILE = (int64_t)NT * S::ITEMS;
    const int t = threadIdx.x;
    if (t == 0) sm.id = atomicAdd(counter, 1u);
    __syncthreads();
    scan_tile p;
    p.line = sm.id / tiles;
    p.tile = sm.id - p.line * tiles;
    const int64_t tbase = (int64_t)p.tile * TILE;
    p.seg = tbase + (int64_t)(t / 32) * 32 * S::ITEMS;
    p.full = tbase + TILE <= n;
    return p;
}

/* The tile's elements into v. VEC: the lines start 16-byte aligned in x and y, so a full
 * tile's chunks move as 16-byte vectors (warp instruction k of warp w covers 512 contiguous
 * bytes); a partial tile, or an unaligned line, moves element by element. */
template <typename T, bool VEC>
TD_DEV void load_tile(const T *row, const scan_tile &p, int64_t n, T (&v)[scan_shape<T>::ITEMS])
{
    constexpr int V = scan_shape<T>::V, K = scan_shape<T>::K;
    const int lane = threadIdx.x % 32;
    if (VEC && p.full) {
#pragma unroll
        for (int k = 0; k < K; k++) {
            const scan_vec<T> w =
                *(const scan_vec<T> *)(row + p.seg + ((int64_t)k * 32 + lane) * V);
#pragma unroll
            for (int q = 0; q < V; q++) v[k * V + q] = w.v[q];
        }
    } else {
#pragma unroll
        for (int k = 0; k < K; k++) {
            const int64_t e0 = p.seg + ((int64_t)k * 32 + lane) * V;
#pragma unroll
            for (int q = 0; q < V; q++) v[k * V + q] = row[p.full || e0 + q < n ? e0 + q : 0];
        }
    }
}

/* The in-tile scan up to the warps' totals. Row k of the warp is chunk k of its 32 lanes
 * (in memory order). Each lane folds its chunk; a shuffle network scans the row (inclusive,
 * Hillis-Steele from lane - d), the exclusive lane prefix is kept, lane 31's inclusive value
 * is the row total R_k, and the row prefix P_k = ((R_0 + R_1) + ...) + R_(k-1) goes to
 * shared memory, the warp's total to sm.warp; one barrier. */
template <typename T, typename A, int K, int NT>
TD_DEV void fold_tile(const T (&v)[scan_shape<T>::ITEMS], const scan_tile &p, int64_t n,
                      bool prod, scan_smem<A, K, NT> &sm)
{
    constexpr int V = scan_shape<T>::V;
    const int t = threadIdx.x, lane = t % 32, wp = t / 32;
    const A id = prod ? (A)1 : (A)0;
    A wtot = id;
#pragma unroll
    for (int k = 0; k < K; k++) {
        const int64_t e0 = p.seg + ((int64_t)k * 32 + lane) * V;
        A s = id;
#pragma unroll
        for (int q = 0; q < V; q++)
            if (p.full || e0 + q < n) s = op2<A>(s, sc<T>::in(v[k * V + q]), prod);
#pragma unroll
        for (int d = 1; d < 32; d *= 2) {
            const A o = shfl_up(s, d);
            if (lane >= d) s = op2<A>(o, s, prod);
        }
        const A e = shfl_up(s, 1);
        sm.excl[k * NT + t] = lane == 0 ? id : e; /* read back by this thread only */
        const A rt = shfl_down(s, 31 - lane);
        if (lane == 0) sm.row[wp * K + k] = wtot;
        wtot = op2<A>(wtot, rt, prod);
    }
    if (lane == 0) sm.warp[wp] = wtot;
    __syncthreads();
}

/* After fold_tile: the warps' totals folded in order into the warp's offset `off` and the
 * tile's `total` (from shared memory, so a kernel may compute them where it needs them). */
template <typename A, int K, int NT>
TD_DEV void warp_offsets(const scan_smem<A, K, NT> &sm, bool prod, A &off, A &total)
{
    const int wp = threadIdx.x / 32;
    off = total = prod ? (A)1 : (A)0;
#pragma unroll
    for (int w = 0; w < NT / 32; w++) {
        if (w == wp) off = total;
        total = op2<A>(total, sm.warp[w], prod);
    }
}

/* The outputs, given base = tile prefix + warp offset: element i of chunk (k, lane) is
 * ((((pre + off) + P_k) + excl_k) + x_0) + ... + x_i. */
template <typename T, bool VEC, typename A, int K, int NT>
TD_DEV void store_tile(T *out, T (&v)[scan_shape<T>::ITEMS], const scan_tile &p, int64_t n,
                       bool prod, const scan_smem<A, K, NT> &sm, A base)
{
    constexpr int V = scan_shape<T>::V, ITEMS = scan_shape<T>::ITEMS;
    const int t = threadIdx.x, lane = t % 32, wp = t / 32;
#pragma unroll
    for (int q = 0; q < ITEMS; q++) opaque(v[q]);
#pragma unroll
    for (int k = 0; k < K; k++) {
        const int64_t e0 = p.seg + ((int64_t)k * 32 + lane) * V;
        A acc = op2<A>(op2<A>(base, sm.row[wp * K + k], prod), sm.excl[k * NT + t], prod);
        if (VEC && p.full) {
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
                if (p.full || e0 + q < n) {
                    acc = op2<A>(acc, sc<T>::in(v[k * V + q]), prod);
                    out[e0 + q] = sc<T>::out(acc);
                }
        }
    }
}

/* Variant 0: one tile per block, the prefix from the fixed tree of tile totals (module
 * comment). */
template <typename T, bool VEC>
__global__ void __launch_bounds__(SCAN_THREADS, SCAN_MIN_BLOCKS)
    k_scan_tiles(const T *__restrict__ x, T *__restrict__ y, int64_t n, unsigned tiles,
                 int levels, int64_t per_line, typename sc<T>::Acc *val, unsigned *flag,
                 unsigned *counter, bool prod)
{
    typedef typename sc<T>::Acc A;
    __shared__ scan_smem<A, scan_shape<T>::K> sm;
    __shared__ A s_lev[SCAN_WARPS]; /* the look-back's sum of each level */
    const int t = threadIdx.x, lane = t % 32, wp = t / 32;
    const A id = prod ? (A)1 : (A)0;
    const scan_tile p = take_tile<T>(sm, counter, tiles, n);
    const unsigned tile = p.tile;
    A *lval = val + (int64_t)p.line * per_line;
    unsigned *lflag = flag + (int64_t)p.line * per_line;
    T v[scan_shape<T>::ITEMS];
    load_tile<T, VEC>(x + (int64_t)p.line * n, p, n, v);
    fold_tile<T>(v, p, n, prod, sm);
    A off, total;
    warp_offsets(sm, prod, off, total);
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
    store_tile<T, VEC>(y + (int64_t)p.line * n, v, p, n, prod, sm, op2<A>(pre, off, prod));
}

/* The exclusive prefix of tile `tile` > 0 of a line by ordered look-back (module comment):
 * the left fold agg_0 op ... op agg_(tile-1), whichever predecessor's inclusive prefix it
 * starts from. Warp 0's lanes await the flags of a window of 32 predecessors; every thread
 * finds the highest with an inclusive prefix (else the window moves down by 32); thread 0
 * folds from it upwards: its inclusive prefix, the aggregates above it in that window, then
 * the aggregates of the windows passed over, re-read in ascending order. Block-wide (its
 * barriers: the emulation runs shuffles block-uniform only, so this uses none). */
template <typename A>
TD_DEV A look_back(const A *agg, const A *incl, const unsigned *flag, unsigned tile, bool prod,
                   unsigned *s_st, A *s_v)
{
    const int t = threadIdx.x;
    int hi = (int)tile; /* the window: tiles [hi - 32, hi) */
    int L;
    for (;;) {
        if (t < 32) {
            const int i = hi - 32 + t;
            unsigned f = 0; /* below tile 0: never the start */
            A v = prod ? (A)1 : (A)0;
            if (i >= 0) {
                f = await_flag(flag, i);
                v = *(const volatile A *)&(f == 2u ? incl : agg)[i];
            }
            s_st[t] = f;
            s_v[t] = v;
        }
        __syncthreads();
        L = -1;
        for (int l = 31; l >= 0 && L < 0; l--)
            if (s_st[l] == 2u) L = l;
        if (L >= 0) break; /* every thread alike: tile 0 always has its inclusive prefix */
        hi -= 32;
        __syncthreads(); /* before warp 0 overwrites the window */
    }
    if (t == 0) {
        A acc = s_v[L];
        for (int l = L + 1; l < 32; l++) acc = op2<A>(acc, s_v[l], prod);
        for (int i = hi; i < (int)tile; i++) acc = op2<A>(acc, *(const volatile A *)&agg[i], prod);
        s_v[0] = acc;
    }
    __syncthreads();
    return s_v[0];
}

/* Variant 1: one tile per block, the prefix by ordered decoupled look-back (module
 * comment). The tile's aggregate is published before the look-back, its inclusive prefix
 * right after it; incl_every > 1 (a test aid: TENSORD_GPU_SCAN_VARIANT=2) publishes the
 * inclusive prefix of every incl_every-th tile only, so look-backs cross windows. */
template <typename T, bool VEC>
__global__ void __launch_bounds__(SCAN_THREADS, SCAN_MIN_BLOCKS)
    k_scan_lookback(const T *__restrict__ x, T *__restrict__ y, int64_t n, unsigned tiles,
                    typename sc<T>::Acc *agg, typename sc<T>::Acc *incl, unsigned *flag,
                    unsigned *counter, unsigned incl_every, bool prod)
{
    typedef typename sc<T>::Acc A;
    __shared__ scan_smem<A, scan_shape<T>::K> sm;
    __shared__ unsigned s_st[32];
    __shared__ A s_v[32];
    const int t = threadIdx.x;
    const A id = prod ? (A)1 : (A)0;
    const scan_tile p = take_tile<T>(sm, counter, tiles, n);
    const unsigned tile = p.tile;
    const int64_t lo = (int64_t)p.line * tiles;
    T v[scan_shape<T>::ITEMS];
    load_tile<T, VEC>(x + (int64_t)p.line * n, p, n, v);
    fold_tile<T>(v, p, n, prod, sm);
    A off, total, pre = id;
    /* total and off are taken from shared memory where needed, so that they do not take
     * registers across the look-back (the tile's elements do) */
    if (t == 0) {
        warp_offsets(sm, prod, off, total);
        if (tile == 0) publish<A>(incl + lo, flag + lo, 0, total, 2u); /* incl_0 = agg_0 */
        else publish<A>(agg + lo, flag + lo, tile, total, 1u);
    }
    if (tile > 0) pre = look_back<A>(agg + lo, incl + lo, flag + lo, tile, prod, s_st, s_v);
    warp_offsets(sm, prod, off, total);
    if (t == 0 && tile > 0 && tile % incl_every == 0)
        publish<A>(incl + lo, flag + lo, tile, op2<A>(pre, total, prod), 2u);
    store_tile<T, VEC>(y + (int64_t)p.line * n, v, p, n, prod, sm, op2<A>(pre, off, prod));
}

/* The chained scan (variants 3 to 5; module comment): a tile's aggregate and its inclusive
 * prefix each travel in one word that also checks itself, so one load tells whether the
 * value is there and gives it, with no flag, fence or second load. A word is {u, u ^ KEY},
 * u the accumulator's bits, all zero until written (KEY != 0, so zeros never check). A
 * reader takes u when the check holds. Were a store seen torn, one half new and the other
 * still zero: (u, 0) checks only for u == KEY and (0, u ^ KEY) only for u == 0, and either
 * way the u read is the u written, so a torn read can only be taken for "not yet" or for
 * the right value. (On NVIDIA the word moves as one 16- or 8-byte access; HIP and the CPU
 * emulation store and load its halves apart, which the check makes safe.) */
template <typename A> struct alignas(2 * sizeof(A)) chain_word {
    typedef typename std::conditional<sizeof(A) == 8, unsigned long long, unsigned>::type U;
    U u, c;
};
template <typename U> TD_DEV U chain_key(void)
{
    return sizeof(U) == 8 ? (U)0x9e3779b97f4a7c15ull : (U)0x9e3779b9u;
}

template <typename A> TD_DEV void chain_store(chain_word<A> *w, A val)
{
    typedef typename chain_word<A>::U U;
    U u;
    memcpy(&u, &val, sizeof u);
    const U c = u ^ chain_key<U>();
#if defined(__CUDA_ARCH__)
    if constexpr (sizeof(U) == 8)
        asm volatile("st.relaxed.gpu.global.v2.u64 [%0], {%1, %2};" ::"l"(w), "l"(u), "l"(c)
                     : "memory");
    else
        asm volatile("st.relaxed.gpu.global.v2.u32 [%0], {%1, %2};" ::"l"(w), "r"(u), "r"(c)
                     : "memory");
#else
    ((volatile U *)w)[0] = u;
    ((volatile U *)w)[1] = c;
#endif
}

/* Whether word w holds a value (then in *val). */
template <typename A> TD_DEV bool chain_load(const chain_word<A> *w, A *val)
{
    typedef typename chain_word<A>::U U;
    U u, c;
#if defined(__CUDA_ARCH__)
    if constexpr (sizeof(U) == 8)
        asm volatile("ld.relaxed.gpu.global.v2.u64 {%0, %1}, [%2];"
                     : "=l"(u), "=l"(c)
                     : "l"(w)
                     : "memory");
    else
        asm volatile("ld.relaxed.gpu.global.v2.u32 {%0, %1}, [%2];"
                     : "=r"(u), "=r"(c)
                     : "l"(w)
                     : "memory");
#else
    u = ((const volatile U *)w)[0];
    c = ((const volatile U *)w)[1];
#endif
    if ((u ^ chain_key<U>()) != c) return false;
    memcpy(val, &u, sizeof u);
    return true;
}

/* Wait for tile i's inclusive prefix (returns 2) or, failing it, its aggregate (1), in *v.
 * Both words are loaded on every look, so one round trip answers. */
template <typename A>
TD_DEV unsigned chain_poll(const chain_word<A> *agg, const chain_word<A> *incl, int64_t i, A *v)
{
    unsigned ns = 16; /* as await_flag's */
    for (;;) {
        A a, b;
        const bool hi = chain_load(incl + i, &a), lo = chain_load(agg + i, &b);
        if (hi) {
            *v = a;
            return 2u;
        }
        if (lo) {
            *v = b;
            return 1u;
        }
        backoff(ns);
        if (ns < 128) ns *= 2;
    }
}

/* Windows of 32 predecessors a look-back keeps in shared memory (512 tiles); a look-back
 * that finds no inclusive prefix in them goes on alone in thread 0 (chain_look_back). */
#define CHAIN_WIN 16

template <typename A> struct chain_smem {
    A v[CHAIN_WIN][32];
    unsigned st[CHAIN_WIN][32];
    unsigned any[CHAIN_WIN]; /* window w holds an inclusive prefix; zeroed before take_tile */
    A pre;
};

/* The exclusive prefix of tile `tile` > 0 of a line, in thread 0 only (the caller publishes
 * and shares it): the left fold agg_0 op ... op agg_(tile-1), whichever predecessor's
 * inclusive prefix it starts from (module comment). Warp 0's lanes load window w, tiles
 * [tile - 32 (w + 1), tile - 32 w), into slot w, waiting per tile for either word; one
 * barrier; if no tile of the window had its inclusive prefix, the next window down. Thread 0
 * then folds from the highest tile j whose inclusive prefix it read: incl_j, the aggregates
 * above j in that window, then the windows above it in ascending order, all from shared
 * memory. Past CHAIN_WIN windows (the chain that far behind: not expected while at most a
 * few hundred tiles run at once) thread 0 walks down alone to an inclusive prefix and folds
 * the aggregates above it from global memory, waiting for each aggregate word (it may be
 * seen after the same tile's inclusive prefix; tile 0 publishes none, but a walk that
 * reaches tile 0 stops there). Barriers only, no shuffles (the emulation runs shuffles
 * block-uniform only). */
template <typename A>
TD_DEV A chain_look_back(const chain_word<A> *agg, const chain_word<A> *incl, unsigned tile,
                         bool prod, chain_smem<A> &cs)
{
    const int t = threadIdx.x;
    const A id = prod ? (A)1 : (A)0;
    int64_t hi = tile; /* window w: tiles [hi - 32, hi) */
    int w = 0;
    for (; w < CHAIN_WIN; w++, hi -= 32) {
        if (t < 32) {
            const int64_t i = hi - 32 + t;
            unsigned f = 0; /* below tile 0: never read (tile 0 ends the search above it) */
            A v = id;
            if (i >= 0) f = chain_poll(agg, incl, i, &v);
            cs.st[w][t] = f;
            cs.v[w][t] = v;
            if (f == 2u) cs.any[w] = 1u;
        }
        __syncthreads();
        if (cs.any[w] != 0u) break; /* every thread alike */
    }
    if (t != 0) return id;
    A acc;
    if (w < CHAIN_WIN) {
        int L = 31;
        while (cs.st[w][L] != 2u) L--;
        acc = cs.v[w][L];
        for (int l = L + 1; l < 32; l++) acc = op2<A>(acc, cs.v[w][l], prod);
    } else {
        /* hi: the lowest tile the windows covered */
        int64_t j = hi - 1;
        while (chain_poll(agg, incl, j, &acc) != 2u) j--;
        for (int64_t i = j + 1; i < hi; i++) {
            A a;
            unsigned ns = 16;
            while (!chain_load(agg + i, &a)) {
                backoff(ns);
                if (ns < 128) ns *= 2;
            }
            acc = op2<A>(acc, a, prod);
        }
    }
    for (int ww = w - 1; ww >= 0; ww--)
        for (int l = 0; l < 32; l++) acc = op2<A>(acc, cs.v[ww][l], prod);
    return acc;
}

/* A NaN as the one quiet NaN (0x7ff8000000000000, 0x7fc00000); other values, and integer
 * accumulators, unchanged. k_scan_chain's exclusive prefix goes through it: the association
 * is fixed by the shape, but an op on two NaNs is not a function of their bits alone (IEEE
 * 754 leaves open whose payload and sign the result carries, and the compiler may swap the
 * operands of + and * at one place in the code and not at another), and the double
 * accumulators keep payloads and signs (CUDA's own NaN is 0xfff8..., a NaN input's 0x7ff8...).
 * Timing decides whether a prefix was folded by this tile's look-back or came through a
 * predecessor's published inclusive prefix (computed at another place in the code), so its
 * NaN bits were timing dependent: conformance.c's multi-line cumsum "specials" cases gave
 * other bytes on a second run (f32 and f64 lines, variants 3 and 4, on an H200). Non-NaN
 * values are IEEE-determined and whether a prefix is NaN does not depend on which NaNs it
 * met, so canonicalizing the prefix makes every tile's bits depend on the shape alone again
 * (tests/gpu/scan_chain_check.c models this). */
template <typename A> TD_DEV A canon_nan(A v)
{
    if constexpr (std::is_floating_point<A>::value) {
        if (v != v) {
            typedef typename std::conditional<sizeof(A) == 8, unsigned long long, unsigned>::type U;
            const U q = sizeof(A) == 8 ? (U)0x7ff8000000000000ull : (U)0x7fc00000u;
            memcpy(&v, &q, sizeof v);
        }
    }
    return v;
}

/* Variants 3 to 5: one tile of NT threads x ITEMS elements per block, the prefix by the
 * chained look-back (module comment). Thread 0 publishes the tile's aggregate at once (tile
 * 0: its inclusive prefix, incl_0 = agg_0), looks back, and publishes the inclusive prefix
 * before the block's last barrier; incl_every > 1 (a test aid, variant 5) publishes it only
 * for every incl_every-th tile, so look-backs cross windows and reach thread 0's walk. */
template <typename T, bool VEC, int NT>
__global__ void __launch_bounds__(NT, 1024 / NT)
    k_scan_chain(const T *__restrict__ x, T *__restrict__ y, int64_t n, unsigned tiles,
                 chain_word<typename sc<T>::Acc> *agg, chain_word<typename sc<T>::Acc> *incl,
                 unsigned *counter, unsigned incl_every, bool prod)
{
    typedef typename sc<T>::Acc A;
    __shared__ scan_smem<A, scan_shape<T>::K, NT> sm;
    __shared__ chain_smem<A> cs;
    const int t = threadIdx.x;
    const A id = prod ? (A)1 : (A)0;
    if (t < CHAIN_WIN) cs.any[t] = 0u; /* ordered before any use by take_tile's barrier */
    const scan_tile p = take_tile<T>(sm, counter, tiles, n);
    const unsigned tile = p.tile;
    const int64_t lo = (int64_t)p.line * tiles;
    T v[scan_shape<T>::ITEMS];
    load_tile<T, VEC>(x + (int64_t)p.line * n, p, n, v);
    fold_tile<T>(v, p, n, prod, sm);
    A off, total, pre = id;
    if (t == 0) {
        warp_offsets(sm, prod, off, total);
        chain_store<A>((tile == 0 ? incl : agg) + lo + tile, total); /* incl_0 = agg_0 */
    }
    if (tile > 0) {
        pre = chain_look_back<A>(agg + lo, incl + lo, tile, prod, cs);
        if (t == 0) {
            pre = canon_nan(pre); /* its NaN bits depend on the path (canon_nan) */
            warp_offsets(sm, prod, off, total); /* again: not held across the look-back */
            if (tile % incl_every == 0) chain_store<A>(incl + lo + tile, op2<A>(pre, total, prod));
            cs.pre = pre;
        }
        __syncthreads();
        pre = cs.pre;
    }
    warp_offsets(sm, prod, off, total);
    store_tile<T, VEC>(y + (int64_t)p.line * n, v, p, n, prod, sm, op2<A>(pre, off, prod));
}

/* TENSORD_GPU_SCAN_VARIANT (read once; unset, empty or out of range: SCAN_DEFAULT_VARIANT,
 * 4): 0: k_scan_tiles, the fixed tree of tile totals; 1: k_scan_lookback, the ordered look-back; 2: 1 with the
 * inclusive prefix published by every 97th tile only (a test aid: look-backs then cross
 * up to 3 windows; the bits of 1, slower); 3: k_scan_chain, tiles of 512 threads; 4: the
 * same with 256 (1's tiles, 1's bits); 5: 3 with tile 0's inclusive prefix only (a test
 * aid; 3's bits, slow: quadratic in the tiles). 1 to 5 give other bits than 0 (another
 * association, fixed by the shape as well), 3 and 5 other than 1, 2 and 4 for lines
 * longer than 8192 elements. */
/* the chained scan of 256-thread tiles: measured fastest (module comment) */
#define SCAN_DEFAULT_VARIANT 4

int variant(void)
{
    static const int v = [] {
        const char *e = getenv("TENSORD_GPU_SCAN_VARIANT");
        const int r = e != NULL && e[0] != '\0' ? atoi(e) : SCAN_DEFAULT_VARIANT;
        return r >= 0 && r <= 5 ? r : SCAN_DEFAULT_VARIANT;
    }();
    return v;
}

/* Variants 3 to 5 (k_scan_chain): the threads a block, and which tiles publish their
 * inclusive prefix (for 5, the test aid, tile 0 alone: no tile number is a multiple of
 * UINT32_MAX but 0, and tile numbers stay below 2^31). */
int chain_threads(int var) { return var == 4 ? 256 : 512; }
unsigned chain_every(int var) { return var == 5 ? UINT32_MAX : 1u; }

/* Variants 3 to 5 for the contiguous lines of run(): [counter, 16 bytes][aggregate words of
 * every tile of every line][inclusive-prefix words, the same], all zeroed first. */
template <typename T, int NT>
td_status run_chain(const td__gpu_exec *x, const T *xs, T *ys, int64_t nlines, int64_t n,
                    bool vec, unsigned every, bool prod)
{
    typedef typename sc<T>::Acc A;
    typedef chain_word<A> W;
    const int64_t tiles = (n + (int64_t)NT * scan_shape<T>::ITEMS - 1) /
                          ((int64_t)NT * scan_shape<T>::ITEMS);
    if (tiles > INT32_MAX / nlines)
        return td__gpu_fail(x, TD_EUNSUPPORTED, "%s: %lld lines of %lld elements are too many",
                            prod ? "cumprod" : "cumsum", (long long)nlines, (long long)n);
    const size_t words = (size_t)(nlines * tiles);
    const size_t bytes = 16 + 2 * words * sizeof(W);
    void *tmp = NULL;
    td_status s = td__gpu_temp_alloc(x, bytes, &tmp);
    if (s != TD_OK) return s;
    s = td__gpu_check(x, gpuMemsetAsync(tmp, 0, bytes, x->st->s), "scan words");
    if (s == TD_OK) {
        unsigned *counter = (unsigned *)tmp;
        W *agg = (W *)((char *)tmp + 16), *incl = agg + words;
        const unsigned blocks = (unsigned)words;
        if (vec)
            k_scan_chain<T, true, NT><<<blocks, NT, 0, x->st->s>>>(
                xs, ys, n, (unsigned)tiles, agg, incl, counter, every, prod);
        else
            k_scan_chain<T, false, NT><<<blocks, NT, 0, x->st->s>>>(
                xs, ys, n, (unsigned)tiles, agg, incl, counter, every, prod);
        s = td__gpu_launched(x, "scan chain kernel");
    }
    td__gpu_temp_free(x, tmp);
    return s;
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
    const bool vec = (uintptr_t)xs % 16 == 0 && (uintptr_t)ys % 16 == 0 &&
                     (nlines == 1 || (n * (int64_t)sizeof(T)) % 16 == 0);
    const int var = variant();
    if (var >= 3 && chain_threads(var) == 512)
        return run_chain<T, 512>(x, xs, ys, nlines, n, vec, chain_every(var), prod);
    if (var >= 3)
        return run_chain<T, 256>(x, xs, ys, nlines, n, vec, chain_every(var), prod);
    const int64_t tiles = (n + scan_shape<T>::TILE - 1) / scan_shape<T>::TILE;
    if (tiles > INT32_MAX / nlines)
        return td__gpu_fail(x, TD_EUNSUPPORTED, "%s: %lld lines of %lld elements are too many",
                            prod ? "cumprod" : "cumsum", (long long)nlines, (long long)n);
    int levels = 1;
    for (int64_t cap = SCAN_FAN; cap < tiles; cap *= SCAN_FAN) levels++;
    if (levels > SCAN_WARPS) /* not reached: tiles < 2^31 < 32^7 */
        return td__gpu_fail(x, TD_EINTERNAL, "%s: %d tree levels", prod ? "cumprod" : "cumsum",
                            levels);
    /* entries a line: the tree's nodes (variant 0), or one a tile (the look-back: a flag, an
     * aggregate and an inclusive prefix) */
    const int64_t per_line = var == 0 ? level_off(tiles, levels) : tiles;
    /* [counter, padded to 16 bytes][flags: unsigned x nodes][values: A x nodes, twice for
     * the look-back: aggregates, then inclusive prefixes] */
    const int64_t nodes = nlines * per_line;
    const size_t flag_bytes = (16 + (size_t)nodes * sizeof(unsigned) + 15) / 16 * 16;
    const size_t val_bytes = (size_t)nodes * sizeof(A);
    void *tmp = NULL;
    td_status s = td__gpu_temp_alloc(x, flag_bytes + (var == 0 ? 1 : 2) * val_bytes, &tmp);
    if (s != TD_OK) return s;
    s = td__gpu_check(x, gpuMemsetAsync(tmp, 0, flag_bytes, x->st->s), "scan flags");
    if (s == TD_OK) {
        unsigned *counter = (unsigned *)tmp;
        unsigned *flag = (unsigned *)((char *)tmp + 16);
        A *val = (A *)((char *)tmp + flag_bytes);
        A *incl = (A *)((char *)tmp + flag_bytes + val_bytes);
        const unsigned blocks = (unsigned)(nlines * tiles);
        const unsigned every = var == 2 ? 97u : 1u;
        if (var != 0 && vec)
            k_scan_lookback<T, true><<<blocks, SCAN_THREADS, 0, x->st->s>>>(
                xs, ys, n, (unsigned)tiles, val, incl, flag, counter, every, prod);
        else if (var != 0)
            k_scan_lookback<T, false><<<blocks, SCAN_THREADS, 0, x->st->s>>>(
                xs, ys, n, (unsigned)tiles, val, incl, flag, counter, every, prod);
        else if (vec)
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

/* gpu_reduce.cu — SUM PROD MEAN MAX MIN ARGMAX ARGMIN over an axes bitmask.
 *
 * Determinism first: the partition of the work is a function of the shape alone (never of
 * the device, the timing or atomics), and every partial result is combined along a fixed
 * tree, so the same input gives the same bits on every run.
 *
 * Plan (as on the CPU): drop size-1 dims, merge adjacent dims that are both kept or both
 * reduced. A block of 256 threads is laid out as BX outputs x BY lanes (BY a power of
 * two). Lane ty of output o folds reduced indices r = r0 + ty, r0 + ty + BY, ... in
 * ascending order — or, when the reduced indices are one contiguous run (the innermost dims
 * reduced), groups of 16 bytes of adjacent elements r0 + N ty .. + N-1, then N (ty + BY) ..,
 * so a lane can load a group at once (fold_groups); the BY lane results are then combined pairwise in shared memory
 * (ty with ty + s for s = BY/2, ..., 1). When the innermost dim is reduced, lanes read
 * neighbouring inputs (BY large, BX small); when it is kept, neighbouring outputs do
 * (BX = 32, BY = 8). Few outputs with long folds split the reduced range into G chunks
 * (grid.y): each writes a partial, and a second kernel (one block per output) combines an
 * output's G partials along another fixed tree.
 *
 * The row path (k_reduce_rows): SUM/MEAN/PROD whose reduced elements are one contiguous run
 * of at least 16 KiB an output (x is [nout, rcount], e.g. a full reduction of a large
 * tensor) take a lean kernel of their own instead: one block of 256 lanes per 64 KiB chunk of
 * a row, 16-byte loads, each lane's 16 loads unrolled so that 4 are in flight before it folds
 * any, 4 accumulators a lane, 32-bit offsets inside the chunk and no descriptor walk, and its
 * own launch bounds (64 registers). k_reduce's 40-register cap and generic per-group index
 * math left the 1 GiB bf16 sum latency-bound (ncu: DRAM 61 %, SM 50 %; 0.69-0.74x PyTorch,
 * BENCHMARKS.md), while a standalone kernel of this shape reached ~0.95x. Its partition
 * (see the comment above k_reduce_rows) is again a function of the shape and the dtype's
 * size alone; an unaligned row is read element by element in the same order, so alignment
 * never changes the bits.
 *
 * f16/bf16 inputs are read as they are (2 bytes an element) and each element is widened to
 * f32 as it is folded. On k_reduce their partition is the f32 one of the same shape (groups
 * of 4 elements, loaded 8 bytes at a time); on the row path their vectors hold 8 elements.
 *
 * Accumulators: float SUM/PROD/MEAN in double, rounded once at the end; integer SUM/PROD in
 * uint64 with wraparound (equal to wrapping in the output type). MAX/MIN/ARGMAX/ARGMIN
 * carry (value, index) and keep the value at the smallest index among the extreme ones
 * (the first NaN if any) — an order-independent rule, so they match the CPU exactly,
 * -0.0 versus +0.0 included. Float SUM/PROD/MEAN differ from the CPU's ascending
 * double fold only by the double rounding of a different association: well under one ulp
 * of an f32 result; for f64 a relative error of about rcount * 2^-53 of sum |x|.
 */
#include "backends/gpu/gpu_ops.cuh"
#include "engine/collapse.h"
#include <limits>
#include <string.h>
#include <type_traits>

namespace {

#define RED_THREADS 256
/* Blocks a reduction aims for before it splits folds into chunks. Enough resident threads
 * to cover the memory latency of a whole GPU, and many waves of blocks: with 2048 an H200
 * (132 SMs, 5 of these blocks each) ran 3.1 waves, the last one a tenth full, and a 1 GiB
 * f32 sum reached 74% of DRAM bandwidth (ncu; 0.83x PyTorch); ~25 waves leave a tail of a
 * few percent. A constant, so partitions depend on the shape alone, not the device. */
#define RED_TARGET_BLOCKS 16384
/* Blocks per multiprocessor the compiler must fit (caps registers at 40 a thread on
 * sm_90): at 43 registers only 5 fitted; 8 (32 registers) made the 16-byte fold spill. */
#define RED_MIN_BLOCKS 6
/* Threads of the kernel that combines each output's partials. */
#define RED_PARTIAL_THREADS 1024
/* Fewest elements a lane folds per chunk when folds are split. */
#define RED_MIN_PER_LANE 32

typedef td__reduce_plan red_plan;

TD_DEV int64_t kept_offset(const red_plan &p, int64_t o)
{
    int64_t off = 0;
    for (int g = p.nk - 1; g >= 0; g--) {
        off += (o % p.ksize[g]) * p.kstride[g];
        o /= p.ksize[g];
    }
    return off;
}

TD_DEV int64_t red_offset(const red_plan &p, int64_t r)
{
    if (p.nr == 1) return r * p.rstride[0];
    int64_t off = 0;
    for (int g = p.nr - 1; g >= 0; g--) {
        off += (r % p.rsize[g]) * p.rstride[g];
        r /= p.rsize[g];
    }
    return off;
}

/* ---- reducers: In (element type), Acc, init, fold, combine ---- */

/* SUM/MEAN (PROD false) and PROD over T. */
template <typename T, bool PROD> struct arith_red {
    typedef T In;
    typedef typename std::conditional<std::is_floating_point<T>::value, double, uint64_t>::type Acc;
    static TD_DEV Acc init() { return PROD ? (Acc)1 : (Acc)0; }
    static TD_DEV Acc fold(Acc a, T v, int64_t)
    {
        Acc w;
        if constexpr (std::is_floating_point<T>::value) w = (double)v;
        else w = (uint64_t)(int64_t)v;
        return PROD ? a * w : a + w;
    }
    static TD_DEV Acc combine(Acc a, Acc b) { return PROD ? a * b : a + b; }
};

/* f16/bf16 SUM/MEAN and PROD: each element widened to f32 (exact) and folded as arith_red
 * folds an f32, in double. bf16 widens by f_arith (a shift; a NaN is not quieted first): every
 * element goes through a DADD/DMUL, whose NaN result is the canonical NaN whatever the
 * operand's payload, so the bits are those of f(), with three integer ops an element fewer
 * on the half-rate INT32 pipe (the 1 GiB bf16 sum's speed: BENCHMARKS.md, 2026-12-03). */
template <typename H> TD_DEV float half_arith_widen(H v) { return v.f(); }
template <> TD_DEV float half_arith_widen<td_bf16>(td_bf16 v) { return v.f_arith(); }

template <typename H, bool PROD> struct half_arith_red {
    typedef H In;
    typedef double Acc;
    static TD_DEV Acc init() { return PROD ? 1.0 : 0.0; }
    static TD_DEV Acc fold(Acc a, H v, int64_t)
    {
        const double w = (double)half_arith_widen(v);
        return PROD ? a * w : a + w;
    }
    static TD_DEV Acc combine(Acc a, Acc b) { return PROD ? a * b : a + b; }
};

template <typename T> struct ext_acc {
    T v;
    int64_t i; /* INT64_MAX: nothing folded yet */
};

/* MAX/ARGMAX (MAX true) and MIN/ARGMIN: keep the extreme value at the smallest index; a NaN
 * beats every number, and among NaNs the smallest index wins. */
template <typename T, bool MAX> struct ext_red {
    typedef T In;
    typedef ext_acc<T> Acc;
    static TD_DEV Acc init()
    {
        Acc a;
        a.v = T();
        a.i = INT64_MAX;
        return a;
    }
    static TD_DEV bool take_b(const Acc &a, const Acc &b)
    {
        if (b.i == INT64_MAX) return false;
        if (a.i == INT64_MAX) return true;
        if constexpr (std::is_floating_point<T>::value) {
            bool an = a.v != a.v, bn = b.v != b.v;
            if (an || bn) return an && bn ? b.i < a.i : bn;
        }
        if (MAX ? b.v > a.v : b.v < a.v) return true;
        return b.v == a.v && b.i < a.i;
    }
    static TD_DEV Acc combine(Acc a, Acc b) { return take_b(a, b) ? b : a; }
    static TD_DEV Acc fold(Acc a, T v, int64_t r)
    {
        Acc b;
        b.v = v;
        b.i = r;
        return combine(a, b);
    }
};

/* f16/bf16 MAX/MIN/ARGMAX/ARGMIN: ext_red over the elements widened to f32 (exact, NaNs
 * quiet as td__bf16_to_f32 / td__f16_to_f32 make them); the value is narrowed back when
 * stored, which is exact for a widened value. */
template <typename H, bool MAX> struct half_ext_red {
    typedef H In;
    typedef ext_acc<float> Acc;
    static TD_DEV Acc init() { return ext_red<float, MAX>::init(); }
    static TD_DEV Acc combine(Acc a, Acc b) { return ext_red<float, MAX>::combine(a, b); }
    static TD_DEV Acc fold(Acc a, H v, int64_t r) { return ext_red<float, MAX>::fold(a, v.f(), r); }
};

/* Elements of one group of the contiguous path: 16 bytes of the type a lane accumulates
 * from (an f16/bf16 element is folded as its f32 value, so its groups are those of f32,
 * 4 elements, and the partition of a half reduction is the f32 one of the same shape). */
template <typename T> struct group_elems {
    static constexpr int value = 16 / (td_is_half<T>::value ? (int)sizeof(float) : (int)sizeof(T));
};

/* What the final store writes. */
enum store_kind { ST_FLOAT, ST_MEAN, ST_WRAP, ST_VALUE, ST_VALUE_BOOL_MIN, ST_INDEX };

template <typename Acc> TD_DEV void store(int kind, uint32_t dt, void *out, int64_t o, Acc a,
                                          int64_t rcount);

template <> TD_DEV void store<double>(int kind, uint32_t dt, void *out, int64_t o, double a,
                                      int64_t rcount)
{
    td_store_double(dt, out, o, kind == ST_MEAN ? a / (double)rcount : a);
}

template <> TD_DEV void store<uint64_t>(int, uint32_t dt, void *out, int64_t o, uint64_t a,
                                        int64_t)
{
    switch (dt) {
    case TD_I32: ((int32_t *)out)[o] = (int32_t)(uint32_t)a; break;
    case TD_I64: ((int64_t *)out)[o] = (int64_t)a; break;
    case TD_U8: ((uint8_t *)out)[o] = (uint8_t)a; break;
    case TD_I8: ((int8_t *)out)[o] = (int8_t)(uint8_t)a; break;
    case TD_I16: ((int16_t *)out)[o] = (int16_t)(uint16_t)a; break;
    }
}

template <typename T> TD_DEV void store_ext(int kind, void *out, int64_t o, ext_acc<T> a)
{
    if (kind == ST_INDEX) {
        ((int64_t *)out)[o] = a.i;
    } else if (kind == ST_VALUE_BOOL_MIN) {
        /* the CPU folds bool MIN from 1 (true), so bytes above 1 give 1 */
        ((T *)out)[o] = a.v < (T)1 ? a.v : (T)1;
    } else {
        ((T *)out)[o] = a.v;
    }
}

template <typename R> TD_DEV void store_any(int kind, uint32_t dt, void *out, int64_t o,
                                            typename R::Acc a, int64_t rcount)
{
    if constexpr (td_is_half<typename R::In>::value &&
                  std::is_same<typename R::Acc, ext_acc<float>>::value) {
        if (kind == ST_INDEX) ((int64_t *)out)[o] = a.i;
        else ((typename R::In *)out)[o] = R::In::of(a.v);
    } else if constexpr (std::is_same<typename R::Acc, ext_acc<typename R::In>>::value)
        store_ext<typename R::In>(kind, out, o, a);
    else
        store<typename R::Acc>(kind, dt, out, o, a, rcount);
}

/* ---- kernels ---- */

/* One group of elements: what a lane of the contiguous path loads at a time (16 bytes; 8
 * for f16/bf16, whose groups are 4 elements). */
template <typename T> struct alignas(group_elems<T>::value * sizeof(T)) vec_group {
    T v[group_elems<T>::value];
};

/* The contiguous path (one reduced run, stride 1): lane ty takes groups of N =
 * group_elems<T> adjacent elements, r0 + N ty, r0 + N (ty + BY), ..., folding each group's
 * elements in ascending order. VEC (rows and base aligned to a group's bytes) only changes
 * how a group is loaded — one vector load instead of N — never the fold order, so both
 * variants give the same bits; the host picks VEC from the pointer's alignment. */
template <typename R, bool VEC>
TD_DEV typename R::Acc fold_groups(typename R::Acc acc, const typename R::In *base, int64_t r0,
                                   int64_t r1, int ty, int by)
{
    typedef typename R::In T;
    constexpr int N = group_elems<T>::value;
    int64_t g0 = r0 + (int64_t)ty * N;
    const int64_t step = (int64_t)by * N;
    if (VEC) {
#pragma unroll 4
        for (; g0 + N <= r1; g0 += step) {
            const vec_group<T> v = *(const vec_group<T> *)(base + g0);
#pragma unroll
            for (int q = 0; q < N; q++) acc = R::fold(acc, v.v[q], g0 + q);
        }
    }
    for (; g0 < r1; g0 += step)
        for (int q = 0; q < N && g0 + q < r1; q++) acc = R::fold(acc, base[g0 + q], g0 + q);
    return acc;
}

/* Block (BX x BY) folds outputs blockIdx.x * BX + tx over the reduced chunk blockIdx.y.
 * G == 1: stores the result; else writes partial[blockIdx.y * nout + o]. GROUPED: the
 * contiguous path (fold_groups); else lane ty folds r0 + ty, r0 + ty + BY, ... */
template <typename R, bool GROUPED, bool VEC>
__global__ void __launch_bounds__(RED_THREADS, RED_MIN_BLOCKS) k_reduce(red_plan p, const typename R::In *x, int64_t chunk, int kind,
                         uint32_t dt, void *out, typename R::Acc *partial)
{
    typedef typename R::Acc Acc;
    __shared__ Acc lanes[RED_THREADS];
    const int tx = threadIdx.x, ty = threadIdx.y, bx = blockDim.x, by = blockDim.y;
    const int64_t o = (int64_t)blockIdx.x * bx + tx;
    const int64_t r0 = (int64_t)blockIdx.y * chunk;
    const int64_t r1 = r0 + chunk < p.rcount ? r0 + chunk : p.rcount;
    Acc acc = R::init();
    if (o < p.nout) {
        const typename R::In *base = x + kept_offset(p, o);
        if (GROUPED) {
            acc = fold_groups<R, VEC>(acc, base, r0, r1, ty, by);
        } else if (p.nr <= 1) {
            /* one reduced dim: unrolled so that several loads are in flight (the fold order
             * is unchanged) */
            const int64_t rs = p.nr == 1 ? p.rstride[0] : 0;
#pragma unroll 4
            for (int64_t r = r0 + ty; r < r1; r += by) acc = R::fold(acc, base[r * rs], r);
        } else {
            for (int64_t r = r0 + ty; r < r1; r += by)
                acc = R::fold(acc, base[red_offset(p, r)], r);
        }
    }
    lanes[ty * bx + tx] = acc;
    __syncthreads();
    for (int s = by / 2; s > 0; s /= 2) {
        if (ty < s) lanes[ty * bx + tx] = R::combine(lanes[ty * bx + tx], lanes[(ty + s) * bx + tx]);
        __syncthreads();
    }
    if (ty == 0 && o < p.nout) {
        if (partial == NULL) store_any<R>(kind, dt, out, o, lanes[tx], p.rcount);
        else partial[(int64_t)blockIdx.y * p.nout + o] = lanes[tx];
    }
}

/* One block per output: lane t folds partials t, t + T, ... in order (T =
 * RED_PARTIAL_THREADS; unrolled so several loads are in flight), then the lanes combine
 * pairwise along a fixed tree as in k_reduce. */
template <typename R>
__global__ void __launch_bounds__(RED_PARTIAL_THREADS)
    k_reduce_partials(const typename R::Acc *partial, int g, int64_t nout, int64_t rcount,
                      int kind, uint32_t dt, void *out)
{
    typedef typename R::Acc Acc;
    __shared__ Acc lanes[RED_PARTIAL_THREADS];
    const int t = threadIdx.x;
    const int64_t o = blockIdx.x;
    Acc acc = R::init();
#pragma unroll 4
    for (int j = t; j < g; j += RED_PARTIAL_THREADS)
        acc = R::combine(acc, partial[(int64_t)j * nout + o]);
    lanes[t] = acc;
    __syncthreads();
    for (int s = RED_PARTIAL_THREADS / 2; s > 0; s /= 2) {
        if (t < s) lanes[t] = R::combine(lanes[t], lanes[t + s]);
        __syncthreads();
    }
    if (t == 0) store_any<R>(kind, dt, out, o, lanes[0], rcount);
}

/* ---- the row path: SUM/MEAN/PROD of long contiguous rows ----
 *
 * x is [nout, rcount], row o at x + o * rcount (the GROUPED case: one reduced run with
 * stride 1, so every kept dim lies outside it). A row is cut into chunks of ROW_CHUNK_VECS
 * 16-byte vectors (V = 16 / sizeof(T) elements each; 64 KiB a chunk), one block a chunk.
 * Lane t takes vectors k = (s ROW_UNROLL + u) ROW_THREADS + t of its chunk, s = 0 ..
 * ROW_STEPS - 1, u = 0 .. ROW_UNROLL - 1: accumulator u folds its vectors in s order and
 * each vector's elements in ascending order; then acc 0..ROW_UNROLL-1 combine pairwise, the
 * lanes along k_reduce's tree, and the chunks of a row in k_reduce_partials. */
#define ROW_THREADS 256
#define ROW_UNROLL 4
#define ROW_STEPS 4
#define ROW_CHUNK_VECS (ROW_THREADS * ROW_UNROLL * ROW_STEPS)
/* Rows shorter than one block step (16 KiB) stay on k_reduce, which packs rows into a block. */
#define ROW_MIN_BYTES (ROW_THREADS * ROW_UNROLL * 16)
/* 4 blocks of 256 a multiprocessor: up to 64 registers a lane, room for the ROW_UNROLL
 * vectors in flight (16 registers) next to the accumulators. */
#define ROW_MIN_BLOCKS 4

template <typename T> struct alignas(16) vec16 {
    T v[16 / sizeof(T)];
};

/* Block b folds chunk b % chunks of row b / chunks. chunks == 1: stores the result; else
 * writes partial[chunk * nout + row]. VEC (the row starts 16-byte aligned) loads a vector at
 * once where the whole vector lies in the row; otherwise element by element, in the same
 * order, so VEC never changes the bits. */
template <typename R, bool VEC>
__global__ void __launch_bounds__(ROW_THREADS, ROW_MIN_BLOCKS)
    k_reduce_rows(const typename R::In *__restrict__ x, int64_t rcount, int64_t nout,
                  unsigned chunks, int kind, uint32_t dt, void *out, typename R::Acc *partial)
{
    typedef typename R::In T;
    typedef typename R::Acc Acc;
    constexpr int V = 16 / (int)sizeof(T);
    constexpr int CH = ROW_CHUNK_VECS * V; /* elements of a chunk */
    __shared__ Acc lanes[ROW_THREADS];
    const int t = threadIdx.x;
    const unsigned o32 = blockIdx.x / chunks, c = blockIdx.x - o32 * chunks;
    const int64_t o = o32;
    const T *row = x + o * rcount + (int64_t)c * CH;
    const int64_t left = rcount - (int64_t)c * CH;
    const int len = left < CH ? (int)left : CH;
    Acc acc[ROW_UNROLL];
#pragma unroll
    for (int u = 0; u < ROW_UNROLL; u++) acc[u] = R::init();
    if (VEC && len == CH) {
        const vec16<T> *rv = (const vec16<T> *)row;
#pragma unroll
        for (int s = 0; s < ROW_STEPS; s++) {
            vec16<T> v[ROW_UNROLL];
#pragma unroll
            for (int u = 0; u < ROW_UNROLL; u++) v[u] = rv[(s * ROW_UNROLL + u) * ROW_THREADS + t];
#pragma unroll
            for (int u = 0; u < ROW_UNROLL; u++)
#pragma unroll
                for (int q = 0; q < V; q++) acc[u] = R::fold(acc[u], v[u].v[q], 0);
        }
    } else {
        for (int s = 0; s < ROW_STEPS; s++)
#pragma unroll
            for (int u = 0; u < ROW_UNROLL; u++) {
                const int e0 = ((s * ROW_UNROLL + u) * ROW_THREADS + t) * V;
                if (VEC && e0 + V <= len) {
                    const vec16<T> v = *(const vec16<T> *)(row + e0);
#pragma unroll
                    for (int q = 0; q < V; q++) acc[u] = R::fold(acc[u], v.v[q], 0);
                } else {
                    for (int q = 0; q < V && e0 + q < len; q++)
                        acc[u] = R::fold(acc[u], row[e0 + q], 0);
                }
            }
    }
#pragma unroll
    for (int w = 1; w < ROW_UNROLL; w *= 2)
#pragma unroll
        for (int u = 0; u + w < ROW_UNROLL; u += 2 * w) acc[u] = R::combine(acc[u], acc[u + w]);
    lanes[t] = acc[0];
    __syncthreads();
    for (int s = ROW_THREADS / 2; s > 0; s /= 2) {
        if (t < s) lanes[t] = R::combine(lanes[t], lanes[t + s]);
        __syncthreads();
    }
    if (t == 0) {
        if (partial == NULL) store_any<R>(kind, dt, out, o, lanes[0], rcount);
        else partial[(int64_t)c * nout + o] = lanes[0];
    }
}

/* The row path for reducer R, when it applies: *done false leaves the op to k_reduce. */
template <typename R>
td_status run_rows(const td__gpu_exec *x, const red_plan &p, const void *in, int kind,
                   uint32_t dt, void *out, bool *done)
{
    typedef typename R::In T;
    typedef typename R::Acc Acc;
    constexpr int64_t CH = (int64_t)ROW_CHUNK_VECS * (16 / (int)sizeof(T));
    *done = false;
    if (!(p.nr == 1 && p.rstride[0] == 1) || p.rcount * (int64_t)sizeof(T) < ROW_MIN_BYTES)
        return TD_OK;
    const int64_t chunks = (p.rcount + CH - 1) / CH;
    if (chunks > INT32_MAX / p.nout) return TD_OK; /* nout * chunks blocks must fit a grid */
    *done = true;
    const bool vec = (uintptr_t)in % 16 == 0 &&
                     (p.nout == 1 || (p.rcount * (int64_t)sizeof(T)) % 16 == 0);
    void *tmp = NULL;
    if (chunks > 1) {
        td_status s = td__gpu_temp_alloc(x, (size_t)(chunks * p.nout) * sizeof(Acc), &tmp);
        if (s != TD_OK) return s;
    }
    const unsigned blocks = (unsigned)(chunks * p.nout);
    if (vec)
        k_reduce_rows<R, true><<<blocks, ROW_THREADS, 0, x->st->s>>>(
            (const T *)in, p.rcount, p.nout, (unsigned)chunks, kind, dt, out, (Acc *)tmp);
    else
        k_reduce_rows<R, false><<<blocks, ROW_THREADS, 0, x->st->s>>>(
            (const T *)in, p.rcount, p.nout, (unsigned)chunks, kind, dt, out, (Acc *)tmp);
    td_status s = td__gpu_launched(x, "reduce rows kernel");
    if (chunks == 1) return s;
    if (s == TD_OK) {
        k_reduce_partials<R><<<(unsigned)p.nout, RED_PARTIAL_THREADS, 0, x->st->s>>>(
            (const Acc *)tmp, (int)chunks, p.nout, p.rcount, kind, dt, out);
        s = td__gpu_launched(x, "reduce partials kernel");
    }
    td__gpu_temp_free(x, tmp);
    return s;
}

int pow2_at_most(int64_t n, int cap)
{
    int p = 1;
    while (p < cap && p < n) p *= 2;
    return p;
}

template <typename R, bool GROUPED, bool VEC>
void launch_reduce(const td__gpu_exec *x, dim3 grid, dim3 block, const red_plan &p,
                   const typename R::In *in, int64_t chunk, int kind, uint32_t dt, void *out,
                   typename R::Acc *partial)
{
    k_reduce<R, GROUPED, VEC><<<grid, block, 0, x->st->s>>>(p, in, chunk, kind, dt, out, partial);
}

template <typename R>
td_status run(const td__gpu_exec *x, const red_plan &p, const void *in, int kind, uint32_t dt,
              void *out)
{
    typedef typename R::Acc Acc;
    constexpr int N = group_elems<typename R::In>::value;
    if constexpr (!std::is_same<typename R::Acc, ext_acc<typename R::In>>::value &&
                  !std::is_same<typename R::Acc, ext_acc<float>>::value) {
        bool done;
        td_status s = run_rows<R>(x, p, in, kind, dt, out, &done);
        if (done || s != TD_OK) return s;
    }
    /* the contiguous path: one reduced run with stride 1 (the innermost dims reduced) */
    const bool grouped = p.nr == 1 && p.rstride[0] == 1;
    int bx, by;
    if (p.inner_kept) {
        bx = 32;
        by = RED_THREADS / 32;
    } else {
        by = pow2_at_most(grouped ? (p.rcount + N - 1) / N : p.rcount, RED_THREADS);
        bx = RED_THREADS / by;
    }
    /* group loads need every row start aligned: the base and each kept stride */
    bool vec = grouped && ((uintptr_t)in % (N * sizeof(typename R::In))) == 0;
    for (int g = 0; g < p.nk && vec; g++) vec = p.kstride[g] % N == 0;
    int64_t blocks_x = (p.nout + bx - 1) / bx;
    if (blocks_x > INT32_MAX)
        return td__gpu_fail(x, TD_EUNSUPPORTED, "reduce: %lld outputs are too many",
                             (long long)p.nout);
    int64_t g = 1;
    if (blocks_x < RED_TARGET_BLOCKS && p.rcount / by > RED_MIN_PER_LANE) {
        int64_t want = (RED_TARGET_BLOCKS + blocks_x - 1) / blocks_x;
        int64_t most = p.rcount / ((int64_t)by * RED_MIN_PER_LANE);
        g = want < most ? want : most;
        if (g < 1) g = 1;
    }
    int64_t chunk = (p.rcount + g - 1) / g;
    if (grouped) chunk = (chunk + N - 1) / N * N; /* chunks hold whole groups */
    g = (p.rcount + chunk - 1) / chunk;
    dim3 grid((unsigned)blocks_x, (unsigned)g), block((unsigned)bx, (unsigned)by);
    const typename R::In *xin = (const typename R::In *)in;
    void *tmp = NULL;
    if (g > 1) {
        td_status s = td__gpu_temp_alloc(x, (size_t)(g * p.nout) * sizeof(Acc), &tmp);
        if (s != TD_OK) return s;
    }
    if (!grouped) launch_reduce<R, false, false>(x, grid, block, p, xin, chunk, kind, dt, out, (Acc *)tmp);
    else if (vec) launch_reduce<R, true, true>(x, grid, block, p, xin, chunk, kind, dt, out, (Acc *)tmp);
    else launch_reduce<R, true, false>(x, grid, block, p, xin, chunk, kind, dt, out, (Acc *)tmp);
    td_status s = td__gpu_launched(x, "reduce kernel");
    if (g == 1) return s;
    if (s == TD_OK) {
        k_reduce_partials<R><<<(unsigned)p.nout, RED_PARTIAL_THREADS, 0, x->st->s>>>(
            (const Acc *)tmp, (int)g, p.nout, p.rcount, kind, dt, out);
        s = td__gpu_launched(x, "reduce partials kernel");
    }
    td__gpu_temp_free(x, tmp);
    return s;
}

template <bool PROD>
td_status arith(const td__gpu_exec *x, const red_plan &p, uint32_t in_dt, const void *in,
                int kind, uint32_t dt, void *out)
{
    switch (in_dt) {
    case TD_F32: return run<arith_red<float, PROD>>(x, p, in, kind, dt, out);
    case TD_F64: return run<arith_red<double, PROD>>(x, p, in, kind, dt, out);
    case TD_I32: return run<arith_red<int32_t, PROD>>(x, p, in, kind, dt, out);
    case TD_I64: return run<arith_red<int64_t, PROD>>(x, p, in, kind, dt, out);
    case TD_U8: return run<arith_red<uint8_t, PROD>>(x, p, in, kind, dt, out);
    case TD_I8: return run<arith_red<int8_t, PROD>>(x, p, in, kind, dt, out);
    case TD_I16: return run<arith_red<int16_t, PROD>>(x, p, in, kind, dt, out);
    case TD_F16: return run<half_arith_red<td_f16, PROD>>(x, p, in, kind, dt, out);
    case TD_BF16: return run<half_arith_red<td_bf16, PROD>>(x, p, in, kind, dt, out);
    }
    return TD_EINTERNAL;
}

template <bool MAX>
td_status extreme(const td__gpu_exec *x, const red_plan &p, uint32_t in_dt, const void *in,
                  int kind, uint32_t dt, void *out)
{
    switch (in_dt) {
    case TD_F32: return run<ext_red<float, MAX>>(x, p, in, kind, dt, out);
    case TD_F64: return run<ext_red<double, MAX>>(x, p, in, kind, dt, out);
    case TD_I32: return run<ext_red<int32_t, MAX>>(x, p, in, kind, dt, out);
    case TD_I64: return run<ext_red<int64_t, MAX>>(x, p, in, kind, dt, out);
    case TD_U8: case TD_BOOL: return run<ext_red<uint8_t, MAX>>(x, p, in, kind, dt, out);
    case TD_I8: return run<ext_red<int8_t, MAX>>(x, p, in, kind, dt, out);
    case TD_I16: return run<ext_red<int16_t, MAX>>(x, p, in, kind, dt, out);
    case TD_F16: return run<half_ext_red<td_f16, MAX>>(x, p, in, kind, dt, out);
    case TD_BF16: return run<half_ext_red<td_bf16, MAX>>(x, p, in, kind, dt, out);
    }
    return TD_EINTERNAL;
}

} // namespace

extern "C" td_status td__gpu_exec_reduce(const td__gpu_exec *x, const td__op *op,
                                          const td__view *in, const td__view *out)
{
    const td__desc *xd = &in[0].desc;
    if (op->n_iattrs < 1 || op->iattrs[0] < 0)
        return td__gpu_fail(x, TD_EINTERNAL, TD_GPU_KIND ": reduce without an axes mask");
    red_plan p;
    td__reduce_plan_init(&p, xd, (uint64_t)op->iattrs[0]);
    if (p.nout == 0) return TD_OK;
    const uint32_t dt = out->desc.dtype, idt = xd->dtype;
    const bool is_float = td__dtype_is_float(idt);
    if (p.rcount == 0) {
        switch (op->opcode) {
        case TD_OP_SUM: return td__gpu_fill(x, dt, out->data, p.nout, 0.0);
        case TD_OP_PROD: return td__gpu_fill(x, dt, out->data, p.nout, 1.0);
        case TD_OP_MEAN:
            return td__gpu_fill(x, dt, out->data, p.nout, std::numeric_limits<double>::quiet_NaN());
        }
        return td__gpu_fail(x, TD_EINTERNAL, TD_GPU_KIND ": opcode %u reduces zero elements",
                             op->opcode);
    }
    td_status s = TD_EINTERNAL;
    switch (op->opcode) {
    case TD_OP_SUM:
        if (idt != TD_BOOL) s = arith<false>(x, p, idt, in[0].data, is_float ? ST_FLOAT : ST_WRAP, dt, out->data);
        break;
    case TD_OP_PROD:
        if (idt != TD_BOOL) s = arith<true>(x, p, idt, in[0].data, is_float ? ST_FLOAT : ST_WRAP, dt, out->data);
        break;
    case TD_OP_MEAN:
        if (is_float) s = arith<false>(x, p, idt, in[0].data, ST_MEAN, dt, out->data);
        break;
    case TD_OP_MAX:
        s = extreme<true>(x, p, idt, in[0].data, ST_VALUE, dt, out->data);
        break;
    case TD_OP_MIN:
        s = extreme<false>(x, p, idt, in[0].data, idt == TD_BOOL ? ST_VALUE_BOOL_MIN : ST_VALUE,
                           dt, out->data);
        break;
    case TD_OP_ARGMAX:
    case TD_OP_ARGMIN:
        if (p.nr > 1 || dt != TD_I64) break;
        s = op->opcode == TD_OP_ARGMAX
                ? extreme<true>(x, p, idt, in[0].data, ST_INDEX, dt, out->data)
                : extreme<false>(x, p, idt, in[0].data, ST_INDEX, dt, out->data);
        break;
    }
    if (s == TD_EINTERNAL)
        return td__gpu_fail(x, s, TD_GPU_KIND ": no reduce kernel for opcode %u dtype %u", op->opcode,
                             idt);
    return s;
}

/* gpu_sort.cu — SORT ARGSORT TOPK_VALUES TOPK_INDICES along one axis, and RANDPERM (a sort
 * of Philox keys), bit for bit the CPU's
 * (backends/cpu/cpu_sort.c's contract; the order is engine/sortkey.h's key).
 *
 * Every element of a line becomes a pair (key, position), with the key complemented for a
 * descending sort. Pairs are distinct (positions are), so sorting them by (key, position)
 * has one result, and that result is the stable sort: any correct sorting network gives the
 * same bits, whatever the schedule.
 *  - Lines of at most SORT_TILE elements: one block per line sorts its pairs in shared
 *    memory with a bitonic network (padded to a power of two with pairs that sort last) and
 *    writes the outputs.
 *  - Longer lines: blocks sort tiles of SORT_TILE pairs of a line the same way into a
 *    scratch array; then sorted runs of width w = SORT_TILE, 2 SORT_TILE, ... are merged
 *    pairwise until one run covers the line: each pair finds its place in the merged run as
 *    its index in its own run plus the count of pairs of the partner run below it (a
 *    binary search), so every pass is one independent write per element. Then the outputs
 *    are written from the sorted pairs.
 *  - On CUDA, lines longer than SORT_TILE go through CUB's LSD radix sort instead (the
 *    toolkit's own, cub::DeviceRadixSort / DeviceSegmentedRadixSort): keys sorted with the
 *    position as the value. LSD radix sort is stable, so it gives the same (key, position)
 *    order, hence the same bits; it runs 4 passes over 32-bit keys (dtypes of 4 bytes or
 *    less: the key below keeps engine/sortkey.h's order) or 8 over 64-bit keys (f64, i64,
 *    RANDPERM's Philox draws), where the merge passes above take log2(n / SORT_TILE) passes
 *    each with a binary search per element (0.08x PyTorch's sort of 2^24 f32 on the H200,
 *    BENCHMARKS.md). HIP keeps the merge path (Debian has no hipCUB). The radix path
 *    writes a value from its sorted key where the key fixes the value's bytes (f32 other
 *    than zeros and NaNs, integers of 4 bytes or less; k_radix_write) and gathers the rest
 *    from the input at the sorted position.
 * Values are the input's own bytes; indices are i64.
 */
#include "backends/gpu/gpu_ops.cuh"
#include "engine/philox.h"
#include "engine/sortkey.h"
#if !defined(TD_GPU_HIP)
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_segmented_radix_sort.cuh>
#endif

namespace {

#define SORT_TILE 2048
#define SORT_THREADS 1024

struct kv {
    uint64_t key;
    int64_t at;
};

TD_DEV bool kv_less(const kv &a, const kv &b)
{
    return a.key < b.key || (a.key == b.key && a.at < b.at);
}

struct line_geom {
    int64_t n, inner, k; /* axis length and stride, outputs per line */
    uint32_t dt;
    bool desc, values;
    size_t es;
    bool perm;     /* RANDPERM: the key of element i is its 64-bit Philox draw */
    uint64_t seed;
};

TD_DEV int64_t x_index(const line_geom &g, int64_t line, int64_t i)
{
    const int64_t o = line / g.inner, j = line % g.inner;
    return (o * g.n + i) * g.inner + j;
}

TD_DEV void write_out(const line_geom &g, const void *x, void *y, int64_t line, int64_t i,
                      int64_t at)
{
    const int64_t o = line / g.inner, j = line % g.inner;
    const int64_t yi = (o * g.k + i) * g.inner + j;
    if (!g.values) {
        ((int64_t *)y)[yi] = at;
        return;
    }
    const int64_t xi = x_index(g, line, at);
    switch (g.es) {
    case 1: ((uint8_t *)y)[yi] = ((const uint8_t *)x)[xi]; break;
    case 2: ((uint16_t *)y)[yi] = ((const uint16_t *)x)[xi]; break;
    case 4: ((uint32_t *)y)[yi] = ((const uint32_t *)x)[xi]; break;
    default: ((uint64_t *)y)[yi] = ((const uint64_t *)x)[xi]; break;
    }
}

/* Bitonic sort of sh[0..P) ascending by kv_less (P a power of two, <= SORT_TILE). */
TD_DEV void bitonic(kv *sh, int P)
{
    for (int size = 2; size <= P; size *= 2)
        for (int stride = size / 2; stride > 0; stride /= 2) {
            for (int i = threadIdx.x; i < P / 2; i += blockDim.x) {
                const int pos = 2 * stride * (i / stride) + (i % stride);
                const bool up = (pos & size) == 0;
                kv a = sh[pos], b = sh[pos + stride];
                if (kv_less(b, a) == up) {
                    sh[pos] = b;
                    sh[pos + stride] = a;
                }
            }
            __syncthreads();
        }
}

/* Tile `tile` of line `line` (elements [tile * SORT_TILE, ...) of it), sorted. direct: the
 * tile is the whole line; write the outputs. Else write the sorted pairs to run[]. */
__global__ void __launch_bounds__(SORT_THREADS)
    k_tile_sort(line_geom g, const void *x, void *y, kv *run, int64_t nlines, int64_t tiles,
                bool direct)
{
    __shared__ kv sh[SORT_TILE];
    for (int64_t u = blockIdx.x; u < nlines * tiles; u += gridDim.x) {
        const int64_t line = u / tiles, t0 = (u % tiles) * SORT_TILE;
        const int len = (int)(g.n - t0 < SORT_TILE ? g.n - t0 : SORT_TILE);
        int P = 1;
        while (P < len) P *= 2;
        if (P < 2) P = 2;
        for (int i = threadIdx.x; i < P; i += blockDim.x) {
            kv e;
            if (i < len) {
                uint64_t key;
                if (g.perm) {
                    uint32_t w[4];
                    td__philox_block(g.seed, (uint64_t)(t0 + i) / 2, w);
                    key = td__philox_draw64(w, (uint64_t)(t0 + i));
                } else {
                    key = td__sort_key(g.dt, x, x_index(g, line, t0 + i));
                }
                e.key = g.desc ? ~key : key;
                e.at = t0 + i;
            } else {
                e.key = UINT64_MAX;
                e.at = INT64_MAX;
            }
            sh[i] = e;
        }
        __syncthreads();
        bitonic(sh, P);
        if (direct) {
            for (int i = threadIdx.x; i < g.k; i += blockDim.x)
                write_out(g, x, y, line, i, sh[i].at);
        } else {
            for (int i = threadIdx.x; i < len; i += blockDim.x) run[line * g.n + t0 + i] = sh[i];
        }
        __syncthreads();
    }
}

/* Count of pairs in a[0..len) below e (a sorted). */
TD_DEV int64_t rank_in(const kv *a, int64_t len, const kv &e)
{
    int64_t lo = 0, hi = len;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (kv_less(a[mid], e)) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* One merge pass: runs of width w of every line of src merged pairwise into dst. */
__global__ void k_merge(const kv *src, kv *dst, int64_t nlines, int64_t n, int64_t w)
{
    const int64_t total = nlines * n;
    for (int64_t u = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; u < total;
         u += (int64_t)gridDim.x * blockDim.x) {
        const int64_t line = u / n, p = u % n;
        const kv *ls = src + line * n;
        const int64_t run = p / w, base = (run & ~(int64_t)1) * w;
        const kv e = ls[p];
        int64_t q;
        if ((run & 1) == 0) {
            const int64_t b0 = base + w, b1 = base + 2 * w < n ? base + 2 * w : n;
            q = p + (b0 < n ? rank_in(ls + b0, b1 - b0, e) : 0);
        } else {
            q = base + (p - (base + w)) + rank_in(ls + base, w, e);
        }
        dst[line * n + q] = e;
    }
}

__global__ void k_write(line_geom g, const void *x, void *y, const kv *run, int64_t nlines)
{
    const int64_t total = nlines * g.k;
    for (int64_t u = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; u < total;
         u += (int64_t)gridDim.x * blockDim.x) {
        const int64_t line = u / g.k, i = u % g.k;
        write_out(g, x, y, line, i, run[line * g.n + i].at);
    }
}

} // namespace

static td_status run_sort(const td__gpu_exec *x, const line_geom &g, int64_t nlines,
                          const void *xdata, void *ydata);

extern "C" td_status td__gpu_exec_sort(const td__gpu_exec *x, const td__op *op,
                                       const td__view *in, const td__view *out)
{
    const td__desc *d = &in[0].desc;
    const bool topk = op->opcode == TD_OP_TOPK_VALUES || op->opcode == TD_OP_TOPK_INDICES;
    if (op->n_iattrs != (topk ? 3u : 2u) || d->dtype >= TD_DTYPE_COUNT)
        return td__gpu_fail(x, TD_EINTERNAL, TD_GPU_KIND ": %s: bad op", td__op_name(op->opcode));
    const int64_t ax = op->iattrs[0];
    line_geom g;
    g.n = 1;
    g.inner = 1;
    g.dt = d->dtype;
    g.desc = topk ? op->iattrs[2] != 0 : op->iattrs[1] != 0;
    g.values = op->opcode == TD_OP_SORT || op->opcode == TD_OP_TOPK_VALUES;
    g.es = td__gpu_dtype_size(d->dtype);
    int64_t outer = 1;
    for (uint32_t i = 0; i < d->rank; i++) {
        if ((int64_t)i < ax) outer *= d->dims[i];
        else if ((int64_t)i == ax) g.n = d->dims[i];
        else g.inner *= d->dims[i];
    }
    g.k = topk ? op->iattrs[1] : g.n;
    g.perm = false;
    g.seed = 0;
    const int64_t nlines = outer * g.inner;
    if (nlines == 0 || g.n == 0 || g.k == 0) return TD_OK;
    return run_sort(x, g, nlines, in[0].data, out->data);
}

/* RANDPERM (engine/philox.h): the sort above of pairs (Philox key of i, i), one line of n,
 * writing the positions: the CPU's result, since (key, index) pairs have one order. */
extern "C" td_status td__gpu_randperm(const td__gpu_exec *x, uint64_t seed, int64_t n, void *out)
{
    if (n == 0) return TD_OK;
    line_geom g;
    g.n = n;
    g.inner = 1;
    g.k = n;
    g.dt = TD_I64;
    g.desc = false;
    g.values = false;
    g.es = 8;
    g.perm = true;
    g.seed = seed;
    return run_sort(x, g, 1, NULL, out);
}

#if !defined(TD_GPU_HIP)
namespace {

/* A 32-bit key with the order of td__sort_key for dtypes of at most 4 bytes: floats widened
 * to f32 (exact) with -0.0 as +0.0 and every NaN above +inf; signed integers with the sign
 * bit flipped; u8 the value; bool 0 or 1. Equal values get equal keys and the order is the
 * value order, as td__sort_key's, so sorting by it gives the same stable order. */
TD_DEV uint32_t sort_key32(uint32_t dt, const void *base, int64_t i)
{
    float f;
    switch (dt) {
    case TD_F32: f = ((const float *)base)[i]; break;
    case TD_F16: f = td__f16_to_f32(((const uint16_t *)base)[i]); break;
    case TD_BF16: f = td__bf16_to_f32(((const uint16_t *)base)[i]); break;
    case TD_I32: return (uint32_t)((const int32_t *)base)[i] ^ 0x80000000u;
    case TD_I16: return (uint32_t)(int32_t)((const int16_t *)base)[i] ^ 0x80000000u;
    case TD_I8: return (uint32_t)(int32_t)((const int8_t *)base)[i] ^ 0x80000000u;
    case TD_BOOL: return ((const uint8_t *)base)[i] != 0;
    default: return ((const uint8_t *)base)[i];
    }
    if (f != f) return UINT32_MAX;
    if (f == 0.0f) f = 0.0f;
    const uint32_t b = td__f32_bits(f);
    return (b >> 31) ? ~b : b | 0x80000000u;
}

template <typename K> TD_DEV K line_key(const line_geom &g, const void *x, int64_t line, int64_t i)
{
    K key;
    if constexpr (sizeof(K) == 4) {
        key = sort_key32(g.dt, x, x_index(g, line, i));
    } else if (g.perm) {
        uint32_t w[4];
        td__philox_block(g.seed, (uint64_t)i / 2, w);
        key = td__philox_draw64(w, (uint64_t)i);
    } else {
        key = td__sort_key(g.dt, x, x_index(g, line, i));
    }
    return g.desc ? (K)~key : key;
}

/* keys[line n + i] = the key of element i of the line, pos[...] = i; offs[line] = line n
 * (the segment starts, offs[nlines] = the end). */
template <typename K>
__global__ void k_radix_keys(line_geom g, const void *x, K *keys, int32_t *pos, int32_t *offs,
                             int64_t nlines)
{
    const int64_t total = nlines * g.n;
    for (int64_t u = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; u < total;
         u += (int64_t)gridDim.x * blockDim.x) {
        const int64_t line = u / g.n, i = u % g.n;
        keys[u] = line_key<K>(g, x, line, i);
        pos[u] = (int32_t)i;
        if (i == 0) offs[line] = (int32_t)u;
        if (u == total - 1) offs[nlines] = (int32_t)total;
    }
}

/* The value whose sort_key32 is `key` (ascending form), written at y[yi], when the key
 * determines its bytes: every f32 but the zeros and NaNs (their keys merge -0.0 with +0.0
 * and every NaN payload), and the signed and unsigned integers of 4 bytes or less; false
 * otherwise (f16, bf16, bool: their bytes are taken from the input). */
TD_DEV bool value_from_key32(uint32_t dt, uint32_t key, void *y, int64_t yi)
{
    switch (dt) {
    case TD_F32:
        if (key == UINT32_MAX || key == 0x80000000u) return false;
        ((uint32_t *)y)[yi] = (key >> 31) ? key ^ 0x80000000u : ~key;
        return true;
    case TD_I32: ((uint32_t *)y)[yi] = key ^ 0x80000000u; return true;
    case TD_I16: ((uint16_t *)y)[yi] = (uint16_t)(key ^ 0x80000000u); return true;
    case TD_I8: ((uint8_t *)y)[yi] = (uint8_t)(key ^ 0x80000000u); return true;
    case TD_U8: ((uint8_t *)y)[yi] = (uint8_t)key; return true;
    default: return false;
    }
}

/* The outputs from the sorted positions (and keys). Values whose key determines their bytes
 * (value_from_key32) are rebuilt from the sorted key, read in order, instead of gathered
 * from x at the sorted position — a random read a value, the bulk of this kernel's time
 * (2^24 f32: 32-byte sectors for 4-byte values); the rest are gathered. Either way the
 * bytes are the input's own. */
template <typename K>
__global__ void k_radix_write(line_geom g, const void *x, void *y, const K *keys,
                              const int32_t *pos, int64_t nlines)
{
    const int64_t total = nlines * g.k;
    for (int64_t u = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; u < total;
         u += (int64_t)gridDim.x * blockDim.x) {
        const int64_t line = u / g.k, i = u % g.k;
        if constexpr (sizeof(K) == 4) {
            if (g.values && g.inner == 1) {
                const uint32_t key = g.desc ? ~(uint32_t)keys[line * g.n + i]
                                            : (uint32_t)keys[line * g.n + i];
                if (value_from_key32(g.dt, key, y, line * g.k + i)) continue;
            }
        }
        write_out(g, x, y, line, i, pos[line * g.n + i]);
    }
}

/* One scratch block holding the arrays of the radix path, carved at 256-byte offsets. */
struct radix_scratch {
    size_t off[6];
    size_t total;
    void add(int k, size_t bytes)
    {
        off[k] = total;
        total += (bytes + 255) / 256 * 256;
    }
};

template <typename K>
td_status radix_sort(const td__gpu_exec *x, const line_geom &g, int64_t nlines,
                     const void *xdata, void *ydata)
{
    const int64_t total = nlines * g.n;
    const int n_items = (int)total, n_lines = (int)nlines;
    size_t cub_bytes = 0;
    cudaError_t e;
    if (nlines == 1)
        e = cub::DeviceRadixSort::SortPairs(NULL, cub_bytes, (const K *)NULL, (K *)NULL,
                                            (const int32_t *)NULL, (int32_t *)NULL, n_items, 0,
                                            (int)(8 * sizeof(K)), x->st->s);
    else
        e = cub::DeviceSegmentedRadixSort::SortPairs(
            NULL, cub_bytes, (const K *)NULL, (K *)NULL, (const int32_t *)NULL,
            (int32_t *)NULL, n_items, n_lines, (const int32_t *)NULL, (const int32_t *)NULL,
            0, (int)(8 * sizeof(K)), x->st->s);
    if (e != cudaSuccess) return td__gpu_check(x, e, "sort: radix sort size query");
    radix_scratch sc = {};
    sc.add(0, (size_t)total * sizeof(K));
    sc.add(1, (size_t)total * sizeof(K));
    sc.add(2, (size_t)total * sizeof(int32_t));
    sc.add(3, (size_t)total * sizeof(int32_t));
    sc.add(4, (size_t)(nlines + 1) * sizeof(int32_t));
    sc.add(5, cub_bytes);
    void *mem = NULL;
    td_status s = td__gpu_temp_alloc(x, sc.total, &mem);
    if (s != TD_OK) return s;
    char *m = (char *)mem;
    K *k_in = (K *)(m + sc.off[0]), *k_out = (K *)(m + sc.off[1]);
    int32_t *p_in = (int32_t *)(m + sc.off[2]), *p_out = (int32_t *)(m + sc.off[3]);
    int32_t *offs = (int32_t *)(m + sc.off[4]);
    void *tmp = m + sc.off[5];
    k_radix_keys<K><<<td__gpu_blocks(total, TD_GPU_THREADS), TD_GPU_THREADS, 0, x->st->s>>>(
        g, xdata, k_in, p_in, offs, nlines);
    s = td__gpu_launched(x, "sort keys kernel");
    if (s == TD_OK) {
        if (nlines == 1)
            e = cub::DeviceRadixSort::SortPairs(tmp, cub_bytes, k_in, k_out, p_in, p_out, n_items,
                                                0, (int)(8 * sizeof(K)), x->st->s);
        else
            e = cub::DeviceSegmentedRadixSort::SortPairs(tmp, cub_bytes, k_in, k_out, p_in,
                                                         p_out, n_items, n_lines, offs, offs + 1,
                                                         0, (int)(8 * sizeof(K)), x->st->s);
        s = td__gpu_check(x, e, "sort: radix sort");
    }
    if (s == TD_OK) {
        k_radix_write<K><<<td__gpu_blocks(nlines * g.k, TD_GPU_THREADS), TD_GPU_THREADS, 0,
                           x->st->s>>>(g, xdata, ydata, k_out, p_out, nlines);
        s = td__gpu_launched(x, "sort write kernel");
    }
    td__gpu_temp_free(x, mem);
    return s;
}

} // namespace
#endif

static td_status run_sort(const td__gpu_exec *x, const line_geom &g, int64_t nlines,
                          const void *xdata, void *ydata)
{
#if !defined(TD_GPU_HIP)
    /* CUB counts items in int: lines whose total fits take the radix path */
    if (g.n > SORT_TILE && nlines * g.n <= INT32_MAX) {
        if (!g.perm && g.es <= 4) return radix_sort<uint32_t>(x, g, nlines, xdata, ydata);
        return radix_sort<uint64_t>(x, g, nlines, xdata, ydata);
    }
#endif
    if (g.n <= SORT_TILE) {
        int threads = 32;
        while (threads < SORT_THREADS && threads * 2 < g.n) threads *= 2;
        k_tile_sort<<<td__gpu_blocks(nlines, 1), threads, 0, x->st->s>>>(g, xdata, ydata,
                                                                         NULL, nlines, 1, true);
        return td__gpu_launched(x, "sort kernel");
    }
    const int64_t tiles = (g.n + SORT_TILE - 1) / SORT_TILE;
    void *a = NULL, *b = NULL;
    const size_t nb = (size_t)(nlines * g.n) * sizeof(kv);
    td_status s = td__gpu_temp_alloc(x, nb, &a);
    if (s == TD_OK) s = td__gpu_temp_alloc(x, nb, &b);
    if (s == TD_OK) {
        k_tile_sort<<<td__gpu_blocks(nlines * tiles, 1), SORT_THREADS, 0, x->st->s>>>(
            g, xdata, ydata, (kv *)a, nlines, tiles, false);
        s = td__gpu_launched(x, "sort tiles kernel");
    }
    kv *src = (kv *)a, *dst = (kv *)b;
    for (int64_t w = SORT_TILE; s == TD_OK && w < g.n; w *= 2) {
        k_merge<<<td__gpu_blocks(nlines * g.n, TD_GPU_THREADS), TD_GPU_THREADS, 0, x->st->s>>>(
            src, dst, nlines, g.n, w);
        s = td__gpu_launched(x, "sort merge kernel");
        kv *t = src;
        src = dst;
        dst = t;
    }
    if (s == TD_OK) {
        k_write<<<td__gpu_blocks(nlines * g.k, TD_GPU_THREADS), TD_GPU_THREADS, 0, x->st->s>>>(
            g, xdata, ydata, src, nlines);
        s = td__gpu_launched(x, "sort write kernel");
    }
    if (a != NULL) td__gpu_temp_free(x, a);
    if (b != NULL) td__gpu_temp_free(x, b);
    return s;
}

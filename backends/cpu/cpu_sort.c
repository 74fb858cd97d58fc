/* cpu_sort.c — SORT ARGSORT TOPK_VALUES TOPK_INDICES along one axis, and RANDPERM (a sort
 * of Philox keys, at the end of the file).
 *
 * The contract (every backend, bit for bit): each line along the axis is ordered by a key,
 * stably (equal keys keep their index order). Keys order the values as numbers, with
 * -0.0 equal to +0.0, every NaN equal to every other NaN and above +inf (PyTorch's order:
 * NaNs last ascending, first descending), integers exactly, bool bytes as 0 (zero) or 1
 * (any nonzero byte). Descending sorts by the complemented key, so ties still keep index
 * order, and the largest-k of TOPK is the descending sort's first k (ties to the lower
 * index), the smallest-k the ascending sort's. SORT and TOPK_VALUES copy the input's own
 * bytes (NaN payloads, -0.0 and raw bool bytes survive); the index outputs are i64.
 *
 * Why a key: a uint64 whose unsigned order is the value order turns every dtype into one
 * comparison, which the GPU kernels (backends/gpu/gpu_sort.cu) share from td__sort_key.
 * The CPU sorts each line of (key, index) pairs with a bottom-up merge sort, or from 4096
 * elements an LSD radix sort over the key bits that differ (the same order: a stable sort
 * has one result); lines are independent, so the thread count never changes a result.
 */
#include "backends/cpu/cpu_internal.h"
#include "common/alloc.h"
#include "engine/philox.h"
#include "engine/sortkey.h"
#include <string.h>

typedef struct sort_task {
    uint32_t dt;
    bool desc, values;
    int64_t n, inner, k; /* axis length, stride, outputs per line */
    const void *x;
    void *y;
    size_t es;
    _Atomic int failed;
} sort_task;

typedef struct kv {
    uint64_t key;
    int64_t at;
} kv;

/* Stable bottom-up merge sort of a[0..n) by key, using tmp[0..n). Returns the sorted array
 * (a or tmp). */
static kv *merge_sort(kv *a, kv *tmp, int64_t n)
{
    for (int64_t w = 1; w < n; w *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * w) {
            int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            int64_t i = lo, j = mid, o = lo;
            while (i < mid && j < hi) tmp[o++] = a[j].key < a[i].key ? a[j++] : a[i++];
            while (i < mid) tmp[o++] = a[i++];
            while (j < hi) tmp[o++] = a[j++];
        }
        kv *s = a;
        a = tmp;
        tmp = s;
    }
    return a;
}

/* Lines at least this long are radix-sorted (below it clearing the digit counts of every
 * pass costs more than the merge passes it saves). */
#define RADIX_MIN 4096
#define RADIX_BITS 11

/* Stable least-significant-digit radix sort of a[0..n) by key, RADIX_BITS at a time over the
 * span of bits in which the keys differ, using tmp[0..n). Returns the sorted array (a or tmp).
 * A stable sort's order is unique, so the result is merge_sort's: the choice between the two
 * never changes a bit of any output. */
static kv *radix_sort(kv *a, kv *tmp, int64_t n)
{
    uint64_t diff = 0;
    for (int64_t i = 1; i < n; i++) diff |= a[i].key ^ a[0].key;
    if (diff == 0) return a;
    const int lo = __builtin_ctzll(diff), hi = 63 - __builtin_clzll(diff);
    static const uint64_t mask = (1u << RADIX_BITS) - 1;
    int64_t count[1 << RADIX_BITS];
    for (int shift = lo; shift <= hi; shift += RADIX_BITS) {
        memset(count, 0, sizeof count);
        for (int64_t i = 0; i < n; i++) count[(a[i].key >> shift) & mask]++;
        int64_t at = 0;
        for (int d = 0; d < (1 << RADIX_BITS); d++) {
            const int64_t c = count[d];
            count[d] = at;
            at += c;
        }
        for (int64_t i = 0; i < n; i++) tmp[count[(a[i].key >> shift) & mask]++] = a[i];
        kv *s = a;
        a = tmp;
        tmp = s;
    }
    return a;
}

static kv *stable_sort(kv *a, kv *tmp, int64_t n)
{
    return n >= RADIX_MIN ? radix_sort(a, tmp, n) : merge_sort(a, tmp, n);
}

static void sort_chunk(void *ctx, int64_t lo, int64_t hi)
{
    sort_task *t = ctx;
    kv *buf = td__malloc((size_t)t->n * 2 * sizeof(kv));
    if (buf == NULL) {
        t->failed = 1;
        return;
    }
    for (int64_t line = lo; line < hi; line++) {
        const int64_t o = line / t->inner, j = line % t->inner;
        const int64_t xbase = o * t->n * t->inner + j, ybase = o * t->k * t->inner + j;
        for (int64_t i = 0; i < t->n; i++) {
            uint64_t key = td__sort_key(t->dt, t->x, xbase + i * t->inner);
            buf[i].key = t->desc ? ~key : key;
            buf[i].at = i;
        }
        const kv *s = stable_sort(buf, buf + t->n, t->n);
        for (int64_t i = 0; i < t->k; i++) {
            const int64_t yi = ybase + i * t->inner;
            if (t->values)
                memcpy((char *)t->y + (size_t)yi * t->es,
                       (const char *)t->x + (size_t)(xbase + s[i].at * t->inner) * t->es, t->es);
            else
                ((int64_t *)t->y)[yi] = s[i].at;
        }
    }
    td__free(buf);
}

td_status td__cpu_exec_sort(const td__cpu_exec *x, const td__op *op, const td__view *in,
                            const td__view *out)
{
    const td__desc *d = &in[0].desc;
    const bool topk = op->opcode == TD_OP_TOPK_VALUES || op->opcode == TD_OP_TOPK_INDICES;
    if (op->n_iattrs != (topk ? 3u : 2u) || d->dtype >= TD_DTYPE_COUNT)
        return td__cpu_fail(x, TD_EINTERNAL, "cpu: %s: bad op", td__op_name(op->opcode));
    const int64_t ax = op->iattrs[0];
    sort_task t = {.dt = d->dtype,
                   .desc = topk ? op->iattrs[2] != 0 : op->iattrs[1] != 0,
                   .values = op->opcode == TD_OP_SORT || op->opcode == TD_OP_TOPK_VALUES,
                   .n = 1,
                   .inner = 1,
                   .x = in[0].data,
                   .y = out->data,
                   .es = td__cpu_dtype_size(d->dtype)};
    int64_t outer = 1;
    for (uint32_t i = 0; i < d->rank; i++) {
        if ((int64_t)i < ax) outer *= d->dims[i];
        else if ((int64_t)i == ax) t.n = d->dims[i];
        else t.inner *= d->dims[i];
    }
    t.k = topk ? op->iattrs[1] : t.n;
    if (outer == 0 || t.n == 0 || t.inner == 0 || t.k == 0) return TD_OK;
    int64_t cost = t.n * 8;
    td__cpu_run(x, outer * t.inner, cost, sort_chunk, &t);
    if (t.failed)
        return td__cpu_fail(x, TD_ENOMEM, "cpu: %s: no memory for a line of %lld keys",
                            td__op_name(op->opcode), (long long)t.n);
    return TD_OK;
}

/* RANDPERM (engine/philox.h): pairs (64-bit Philox draw of i, i), drawn in parallel and
 * sorted stably by key; ties keep index order, so the sort has one result. */
typedef struct perm_task {
    uint64_t seed;
    kv *pairs;
} perm_task;

static void perm_keys(void *ctx, int64_t lo, int64_t hi)
{
    const perm_task *t = ctx;
    for (int64_t i = lo; i < hi;) {
        uint32_t w[4];
        td__philox_block(t->seed, (uint64_t)i / 2, w);
        int64_t end = (i / 2 + 1) * 2;
        if (end > hi) end = hi;
        for (; i < end; i++) {
            t->pairs[i].key = td__philox_draw64(w, (uint64_t)i);
            t->pairs[i].at = i;
        }
    }
}

td_status td__cpu_exec_randperm(const td__cpu_exec *x, const td__op *op, const td__view *out)
{
    const int64_t n = op->iattrs[0];
    if (n == 0) return TD_OK;
    size_t nb;
    if (__builtin_mul_overflow((size_t)n, 2 * sizeof(kv), &nb))
        return td__cpu_fail(x, TD_ENOMEM, "cpu: randperm of %lld: scratch size overflows",
                            (long long)n);
    kv *buf = td__malloc(nb);
    if (buf == NULL)
        return td__cpu_fail(x, TD_ENOMEM, "cpu: randperm of %lld: out of memory for %zu bytes",
                            (long long)n, nb);
    perm_task t = {.seed = op->seed, .pairs = buf};
    td__cpu_run(x, n, 8, perm_keys, &t);
    const kv *s = stable_sort(buf, buf + n, n);
    int64_t *y = out->data;
    for (int64_t i = 0; i < n; i++) y[i] = s[i].at;
    td__free(buf);
    return TD_OK;
}

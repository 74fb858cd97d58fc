/* cpu_matmul.c — batched matmul [..., M, K] x [..., K, N] -> [..., M, N] with numpy batch
 * broadcasting.
 *
 * f32/f64 go to OpenBLAS (cblas_sgemm/cblas_dgemm), but never multithreaded OpenBLAS: its
 * result bits depend on its thread count (measured with 0.3.21: f32 [32,1000] x [1000,32]
 * differed in 772 of 1024 elements between 1 thread and 2, f64 [64,513] x [513,64] too;
 * the threaded driver and the single-threaded small-matrix kernels split the K sum
 * differently once K > 512). So local:cpu and a remote CPU device whose OpenBLAS ran with
 * other thread counts disagreed. Here every output matrix is cut into fixed tiles whose size
 * is a function of (M, N, K) alone (tile_plan), every tile is one single-threaded
 * cblas_?gemm over the whole K (K is never split), and the CPU device's own pool runs the
 * tiles, contiguous runs of them per thread. An element's value therefore depends on the
 * shapes and the data only, not on the device's thread count, OPENBLAS_NUM_THREADS or the
 * timing: which thread computes a tile changes nothing in it. OpenBLAS is switched to one
 * thread for the whole process (openblas_set_num_threads(1)) before each float matmul, so a
 * program that raised it in between cannot change the bits either. Its kernel is still
 * chosen per CPU model, so float GEMM bits may differ between machines (the design's "says
 * so" case); tensord.h states this.
 *
 * f16/bf16 use the same tiles. bf16, in builds with -Ddnnl_bf16_matmul=true (oneDNN from
 * libdnnl-dev, TD_DNNL_BF16_MATMUL; off by default because of the subnormals below):
 * each tile is one oneDNN matmul on one thread (bf16 operands, f32 accumulation and f32
 * result), created for the tile's shape with one OpenMP thread so its blocking is a function
 * of the shape too; products of bf16 pairs are exact in f32, but oneDNN's AVX512-BF16 kernel
 * (VDPBF16PS) adds them pairwise in its own order and treats subnormal inputs and results
 * as zero. Measured 1.6-2.9x the widened sgemm of the same tiles here (BENCHMARKS.md, "CPU
 * f16/bf16"; Debian's OpenBLAS 0.3.21 has no sbgemm). f16, and bf16 by default: both
 * operands widened to f32 (exact), the f32 tiles. Every output is rounded once from f32 to
 * the dtype.
 *
 * Integer dtypes use a plain i-k-j loop with wraparound arithmetic in the unsigned type of
 * the output width, which equals int64 accumulation truncated to the output (modular
 * arithmetic); it runs on the pool, split over output rows, and is exact.
 *
 * A batch's operand offsets come from its batch multi-index with broadcast strides (0 on a
 * size-1 or missing batch dim), so a [K, N] weight is shared by every batch of [B, M, K].
 * K == 0 gives zeros (BLAS is not called: it rejects lda = 0).
 */
#include "backends/cpu/cpu_internal.h"
#include "common/alloc.h"
#include "common/checked.h"
#include <cblas.h>
#include <string.h>
#if defined(TD_DNNL_BF16_MATMUL)
#include "backends/cpu/cpu_dnnl.h"
#include <stdatomic.h>
#endif

typedef struct mm_shape {
    int64_t m, n, k;
    int64_t nbatch;
    td__cpu_iter batch; /* over the output batch dims; inputs 0 and 1 = a and b */
} mm_shape;

static void mm_shape_init(mm_shape *s, const td__view *in, const td__view *out)
{
    const td__desc *a = &in[0].desc, *b = &in[1].desc, *o = &out->desc;
    s->m = o->dims[o->rank - 2];
    s->n = o->dims[o->rank - 1];
    s->k = a->dims[a->rank - 1];
    td__desc bo = *o;
    bo.rank -= 2;
    s->nbatch = td__cpu_nelem(&bo);
    int64_t st[2][TD_MAX_RANK];
    td__matmul_batch_strides(a, o, st[0]);
    td__matmul_batch_strides(b, o, st[1]);
    td__cpu_iter_init(&s->batch, &bo, 2, (const int64_t(*)[TD_MAX_RANK])st);
}

/* Integer kernels over output rows [lo, hi) of the flattened [nbatch * M] row space. */
#define INT_MATMUL(NAME, T, U)                                                             \
    static void NAME(const mm_shape *s, const int64_t *aoff, const int64_t *boff,          \
                     const void *a_, const void *b_, void *c_, int64_t lo, int64_t hi)     \
    {                                                                                      \
        const T *a = a_;                                                                   \
        const T *b = b_;                                                                   \
        T *c = c_;                                                                         \
        for (int64_t r = lo; r < hi; r++) {                                                \
            int64_t batch = r / s->m, i = r % s->m;                                        \
            const T *arow = a + aoff[batch] + i * s->k;                                    \
            const T *bmat = b + boff[batch];                                               \
            U *restrict crow = (U *)(c + r * s->n);                                        \
            for (int64_t j = 0; j < s->n; j++) crow[j] = 0;                                \
            for (int64_t kk = 0; kk < s->k; kk++) {                                        \
                const U av = (U)arow[kk];                                                  \
                const T *restrict brow = bmat + kk * s->n;                                 \
                for (int64_t j = 0; j < s->n; j++)                                         \
                    crow[j] = (U)(crow[j] + av * (U)brow[j]);                              \
            }                                                                              \
        }                                                                                  \
    }

INT_MATMUL(matmul_i32, int32_t, uint32_t)
INT_MATMUL(matmul_i64, int64_t, uint64_t)
INT_MATMUL(matmul_u8, uint8_t, uint8_t)
INT_MATMUL(matmul_i8, int8_t, uint8_t)
INT_MATMUL(matmul_i16, int16_t, uint16_t)

typedef void (*int_mm_fn)(const mm_shape *s, const int64_t *aoff, const int64_t *boff,
                          const void *a, const void *b, void *c, int64_t lo, int64_t hi);

typedef struct int_mm_ctx {
    const mm_shape *s;
    int_mm_fn fn;
    const int64_t *aoff, *boff;
    const void *a, *b;
    void *c;
} int_mm_ctx;

static void int_mm_chunk(void *ctx, int64_t lo, int64_t hi)
{
    const int_mm_ctx *t = ctx;
    t->fn(t->s, t->aoff, t->boff, t->a, t->b, t->c, lo, hi);
}

/* Record every batch's operand offsets (iterator row callback). */
typedef struct offs_ctx {
    int64_t *aoff, *boff;
} offs_ctx;

static void offs_run(void *ctx, const int64_t *off, const int64_t *st, int64_t o, int64_t n)
{
    const offs_ctx *t = ctx;
    for (int64_t j = 0; j < n; j++) {
        t->aoff[o + j] = off[0] + j * st[0];
        t->boff[o + j] = off[1] + j * st[1];
    }
}

static td_status int_matmul(const td__cpu_exec *x, const mm_shape *s, uint32_t dt,
                            const td__view *in, const td__view *out)
{
    int_mm_fn fn = dt == TD_I32 ? matmul_i32 : dt == TD_I64 ? matmul_i64
                 : dt == TD_U8  ? matmul_u8  : dt == TD_I8 ? matmul_i8
                 : dt == TD_I16 ? matmul_i16 : NULL;
    if (fn == NULL) return td__cpu_fail(x, TD_EINTERNAL, "cpu: matmul on dtype %u", dt);
    uint64_t bytes;
    if (!td__mul_u64((uint64_t)s->nbatch, 2 * sizeof(int64_t), &bytes))
        return td__cpu_fail(x, TD_ENOMEM, "matmul: %lld batches", (long long)s->nbatch);
    int64_t *offs = td__malloc((size_t)bytes);
    if (offs == NULL)
        return td__cpu_fail(x, TD_ENOMEM, "matmul: no memory for %lld batch offsets",
                            (long long)s->nbatch);
    offs_ctx oc = {.aoff = offs, .boff = offs + s->nbatch};
    td__cpu_iter_rows(&s->batch, 0, s->nbatch, offs_run, &oc);
    int_mm_ctx t = {.s = s,
                    .fn = fn,
                    .aoff = oc.aoff,
                    .boff = oc.boff,
                    .a = in[0].data,
                    .b = in[1].data,
                    .c = out->data};
    td__cpu_run(x, s->nbatch * s->m, s->n * (s->k > 0 ? s->k : 1), int_mm_chunk, &t);
    td__free(offs);
    return TD_OK;
}

/* ---- float GEMM on fixed tiles ----
 * Tiles start at TILE_ROWS x TILE_COLS (clipped to M x N); while a matrix has fewer than
 * TILE_MIN_COUNT tiles and a tile does more than TILE_MIN_MACS multiply-adds, the longer
 * side is halved (rounded up to a multiple of 16, the widest register blocking of the
 * OpenBLAS kernels here). 2048^3 gets 32 tiles of 256 x 512; 512^3 16 of 128 x 128;
 * [32,1000] x [1000,32] one. Tile sizes were picked by measurement (BENCHMARKS.md, P6).
 * Changing these constants changes float matmul bits: it is a format change between
 * client and server of different versions, so keep them fixed. */
#define TILE_ROWS 256
#define TILE_COLS 512
#define TILE_MIN_COUNT 16
#define TILE_MIN_MACS ((int64_t)1 << 22)

typedef struct tile_plan {
    int64_t rows, cols;   /* tile size */
    int64_t nrow, ncol;   /* tiles per matrix along M and N */
} tile_plan;

static int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0); }

static int64_t halve16(int64_t v)
{
    int64_t h = ceil_div(v, 2);
    return ceil_div(h, 16) * 16;
}

/* The tiling of an M x N output with inner dim K; a function of (m, n, k) only. */
static tile_plan tile_plan_of(int64_t m, int64_t n, int64_t k)
{
    tile_plan p = {.rows = m < TILE_ROWS ? m : TILE_ROWS, .cols = n < TILE_COLS ? n : TILE_COLS};
    for (;;) {
        p.nrow = ceil_div(m, p.rows);
        p.ncol = ceil_div(n, p.cols);
        int64_t macs;
        if (p.nrow * p.ncol >= TILE_MIN_COUNT ||
            (!__builtin_mul_overflow(p.rows * p.cols, k, &macs) && macs <= TILE_MIN_MACS))
            break;
        int64_t *side = p.cols >= p.rows ? &p.cols : &p.rows;
        int64_t h = halve16(*side);
        if (h >= *side) { /* 16 or less: try the other side, else stop */
            side = side == &p.cols ? &p.rows : &p.cols;
            h = halve16(*side);
            if (h >= *side) break;
        }
        *side = h;
    }
    return p;
}

typedef struct gemm_ctx {
    const mm_shape *s;
    tile_plan plan;
    uint32_t dtype;
    const int64_t *aoff, *boff; /* per output batch, in elements */
    const void *a, *b;
    void *c;
} gemm_ctx;

/* Work units [lo, hi): unit u is tile (u % tiles) of output batch (u / tiles), tiles
 * numbered row-major. Each is one single-threaded GEMM over the whole K. */
static void gemm_tiles(void *ctx, int64_t lo, int64_t hi)
{
    const gemm_ctx *g = ctx;
    const mm_shape *s = g->s;
    const tile_plan *p = &g->plan;
    const int64_t tiles = p->nrow * p->ncol;
    const int k = (int)s->k, ldb = (int)s->n;
    for (int64_t u = lo; u < hi; u++) {
        const int64_t batch = u / tiles, t = u % tiles;
        const int64_t i0 = (t / p->ncol) * p->rows, j0 = (t % p->ncol) * p->cols;
        const int mm = (int)(s->m - i0 < p->rows ? s->m - i0 : p->rows);
        const int nn = (int)(s->n - j0 < p->cols ? s->n - j0 : p->cols);
        const int64_t ao = g->aoff[batch] + i0 * s->k, bo = g->boff[batch] + j0;
        const int64_t co = batch * s->m * s->n + i0 * s->n + j0;
        if (g->dtype == TD_F32) {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, mm, nn, k, 1.0f,
                        (const float *)g->a + ao, k, (const float *)g->b + bo, ldb, 0.0f,
                        (float *)g->c + co, ldb);
        } else {
            cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, mm, nn, k, 1.0,
                        (const double *)g->a + ao, k, (const double *)g->b + bo, ldb, 0.0,
                        (double *)g->c + co, ldb);
        }
    }
}

static td_status float_matmul(const td__cpu_exec *x, const mm_shape *s, uint32_t dt,
                              const td__view *in, const td__view *out)
{
    if (s->m > INT32_MAX || s->n > INT32_MAX || s->k > INT32_MAX)
        return td__cpu_fail(x, TD_EUNSUPPORTED,
                            "matmul: dims M=%lld N=%lld K=%lld exceed BLAS's int range",
                            (long long)s->m, (long long)s->n, (long long)s->k);
    gemm_ctx g = {.s = s, .plan = tile_plan_of(s->m, s->n, s->k), .dtype = dt,
                  .a = in[0].data, .b = in[1].data, .c = out->data};
    int64_t units, cost;
    if (__builtin_mul_overflow(s->nbatch, g.plan.nrow * g.plan.ncol, &units))
        return td__cpu_fail(x, TD_ENOMEM, "matmul: %lld batches", (long long)s->nbatch);
    if (__builtin_mul_overflow(g.plan.rows * g.plan.cols, s->k, &cost)) cost = INT64_MAX;
    int64_t local[2 * 16];
    int64_t *offs = local;
    if (s->nbatch > 16) {
        uint64_t bytes;
        if (!td__mul_u64((uint64_t)s->nbatch, 2 * sizeof(int64_t), &bytes) ||
            (offs = td__malloc((size_t)bytes)) == NULL)
            return td__cpu_fail(x, TD_ENOMEM, "matmul: no memory for %lld batch offsets",
                                (long long)s->nbatch);
    }
    offs_ctx oc = {.aoff = offs, .boff = offs + s->nbatch};
    td__cpu_iter_rows(&s->batch, 0, s->nbatch, offs_run, &oc);
    g.aoff = oc.aoff;
    g.boff = oc.boff;
    /* process-wide: OpenBLAS's own threads would make the bits depend on their count */
    if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
    td__cpu_run(x, units, cost, gemm_tiles, &g);
    if (offs != local) td__free(offs);
    return TD_OK;
}

/* ---- f16/bf16 ---- */

/* Parallel conversion of n elements (the elementwise kernels' loops). */
typedef struct cvt_ctx {
    uint32_t dtype;
    const void *in;
    void *out;
    bool narrow;
} cvt_ctx;

static void cvt_chunk(void *ctx, int64_t lo, int64_t hi)
{
    const cvt_ctx *c = ctx;
    if (c->narrow)
        td__cpu_half_narrow(c->dtype, (const float *)c->in + lo, (uint16_t *)c->out + lo, hi - lo);
    else
        td__cpu_half_widen(c->dtype, (const uint16_t *)c->in + lo, (float *)c->out + lo, hi - lo);
}

static void convert(const td__cpu_exec *x, uint32_t dt, bool narrow, const void *in, void *out,
                    int64_t n)
{
    cvt_ctx c = {.dtype = dt, .in = in, .out = out, .narrow = narrow};
    td__cpu_run(x, n, 1, cvt_chunk, &c);
}

#if defined(TD_DNNL_BF16_MATMUL)
/* One primitive per tile shape: index (last tile row is short) * 2 + (last tile column). */
typedef struct onednn_plan {
    dnnl_primitive_t prim[4];
    dnnl_memory_desc_t md[4][4]; /* a, b, c, scratchpad */
    size_t scratch_bytes;
} onednn_plan;

typedef struct onednn_run {
    const gemm_ctx *g;
    onednn_plan *plan;
    atomic_bool failed; /* set by any tile that failed; read after the run */
} onednn_run;

static bool onednn_make(onednn_plan *pl, int idx, int64_t mm, int64_t nn, int64_t k, int64_t ldb)
{
    dnnl_dims_t ad = {mm, k}, as = {k, 1}, bd = {k, nn}, bs = {ldb, 1}, cd = {mm, nn}, cs = {ldb, 1};
    dnnl_memory_desc_t *md = pl->md[idx];
    if (dnnl_memory_desc_init_by_strides(&md[0], 2, ad, dnnl_bf16, as) != dnnl_success ||
        dnnl_memory_desc_init_by_strides(&md[1], 2, bd, dnnl_bf16, bs) != dnnl_success ||
        dnnl_memory_desc_init_by_strides(&md[2], 2, cd, dnnl_f32, cs) != dnnl_success)
        return false;
    dnnl_matmul_desc_t desc;
    if (dnnl_matmul_desc_init(&desc, &md[0], &md[1], NULL, &md[2]) != dnnl_success) return false;
    dnnl_primitive_desc_t pd;
    if (!td__dnnl_pd(&desc, &pd)) return false;
    const bool ok = td__dnnl_prim(pd, &pl->prim[idx], &md[3], &pl->scratch_bytes);
    dnnl_primitive_desc_destroy(pd);
    return ok;
}

static void onednn_plan_fini(onednn_plan *pl)
{
    for (int i = 0; i < 4; i++)
        if (pl->prim[i] != NULL) dnnl_primitive_destroy(pl->prim[i]);
}

/* The primitives for every tile shape of g, each planned for one thread. */
static bool onednn_plan_init(onednn_plan *pl, const gemm_ctx *g)
{
    memset(pl, 0, sizeof *pl);
    if (td__dnnl_engine() == NULL) return false;
    const mm_shape *s = g->s;
    const tile_plan *p = &g->plan;
    const int64_t last_rows = s->m - (p->nrow - 1) * p->rows;
    const int64_t last_cols = s->n - (p->ncol - 1) * p->cols;
    const int saved = td__dnnl_one_thread();
    bool ok = true;
    const bool short_row = last_rows != p->rows, short_col = last_cols != p->cols;
    for (int idx = 0; idx < 4 && ok; idx++) {
        /* bit 1: the short last tile row (if there is one); without it, a full tile row
         * (there is none when the only tile row is short); bit 0 likewise for columns */
        const bool r = (idx & 2) != 0, c = (idx & 1) != 0;
        if (r ? !short_row : (short_row && p->nrow == 1)) continue;
        if (c ? !short_col : (short_col && p->ncol == 1)) continue;
        ok = onednn_make(pl, idx, r ? last_rows : p->rows, c ? last_cols : p->cols, s->k, s->n);
    }
    td__dnnl_threads_restore(saved);
    if (!ok) onednn_plan_fini(pl);
    return ok;
}

static bool onednn_tile(const onednn_plan *pl, int idx, dnnl_stream_t st, void *scratch,
                        const void *a, const void *b, float *c)
{
    static const int arg[4] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST, DNNL_ARG_SCRATCHPAD};
    void *const h[4] = {(void *)a, (void *)b, c, scratch};
    return td__dnnl_exec(pl->prim[idx], st, 4, arg, pl->md[idx], h);
}

/* Work units as gemm_tiles; a is bf16, b bf16, c the f32 result. */
static void onednn_tiles(void *ctx, int64_t lo, int64_t hi)
{
    onednn_run *d = ctx;
    const gemm_ctx *g = d->g;
    const mm_shape *s = g->s;
    const tile_plan *p = &g->plan;
    const int64_t tiles = p->nrow * p->ncol;
    /* one OpenMP thread per tile on this thread (its setting restored after: the caller's
     * thread runs chunks too) */
    const int saved = td__dnnl_one_thread();
    dnnl_stream_t st = NULL;
    void *scratch = d->plan->scratch_bytes > 0 ? td__malloc(d->plan->scratch_bytes) : NULL;
    if ((d->plan->scratch_bytes > 0 && scratch == NULL) ||
        dnnl_stream_create(&st, td__dnnl_engine(), dnnl_stream_default_flags) != dnnl_success) {
        atomic_store(&d->failed, true);
        td__free(scratch);
        td__dnnl_threads_restore(saved);
        return;
    }
    for (int64_t u = lo; u < hi; u++) {
        const int64_t batch = u / tiles, t = u % tiles;
        const int64_t ti = t / p->ncol, tj = t % p->ncol;
        const int idx = (ti == p->nrow - 1 && p->nrow * p->rows != s->m ? 2 : 0) |
                        (tj == p->ncol - 1 && p->ncol * p->cols != s->n ? 1 : 0);
        if (d->plan->prim[idx] == NULL) {
            atomic_store(&d->failed, true);
            continue;
        }
        const int64_t ao = g->aoff[batch] + ti * p->rows * s->k, bo = g->boff[batch] + tj * p->cols;
        const int64_t co = batch * s->m * s->n + ti * p->rows * s->n + tj * p->cols;
        if (!onednn_tile(d->plan, idx, st, scratch, (const uint16_t *)g->a + ao,
                       (const uint16_t *)g->b + bo, (float *)g->c + co))
            atomic_store(&d->failed, true);
    }
    dnnl_stream_destroy(st);
    td__free(scratch);
    td__dnnl_threads_restore(saved);
}
#endif

static td_status half_matmul(const td__cpu_exec *x, const mm_shape *s, uint32_t dt,
                             const td__view *in, const td__view *out)
{
    const int64_t na = td__cpu_nelem(&in[0].desc), nb = td__cpu_nelem(&in[1].desc);
    const int64_t no = td__cpu_nelem(&out->desc);
    if (s->m > INT32_MAX || s->n > INT32_MAX || s->k > INT32_MAX)
        return td__cpu_fail(x, TD_EUNSUPPORTED,
                            "matmul: dims M=%lld N=%lld K=%lld exceed BLAS's int range",
                            (long long)s->m, (long long)s->n, (long long)s->k);
#if defined(TD_DNNL_BF16_MATMUL)
    if (dt == TD_BF16) {
        uint64_t bytes;
        if (!td__mul_u64((uint64_t)no, sizeof(float), &bytes) || bytes > SIZE_MAX)
            return td__cpu_fail(x, TD_ENOMEM, "matmul: bf16 result too large");
        gemm_ctx g = {.s = s, .plan = tile_plan_of(s->m, s->n, s->k), .dtype = dt,
                      .a = in[0].data, .b = in[1].data};
        int64_t units, cost;
        if (__builtin_mul_overflow(s->nbatch, g.plan.nrow * g.plan.ncol, &units))
            return td__cpu_fail(x, TD_ENOMEM, "matmul: %lld batches", (long long)s->nbatch);
        if (__builtin_mul_overflow(g.plan.rows * g.plan.cols, s->k, &cost)) cost = INT64_MAX;
        onednn_plan pl;
        if (onednn_plan_init(&pl, &g)) {
            float *c = td__malloc((size_t)bytes);
            int64_t *offs = NULL;
            if (c != NULL && td__mul_u64((uint64_t)s->nbatch, 2 * sizeof(int64_t), &bytes))
                offs = td__malloc((size_t)bytes);
            if (c == NULL || offs == NULL) {
                td__free(c);
                td__free(offs);
                onednn_plan_fini(&pl);
                return td__cpu_fail(x, TD_ENOMEM, "matmul: no memory for a bf16 result");
            }
            offs_ctx oc = {.aoff = offs, .boff = offs + s->nbatch};
            td__cpu_iter_rows(&s->batch, 0, s->nbatch, offs_run, &oc);
            g.aoff = oc.aoff;
            g.boff = oc.boff;
            g.c = c;
            onednn_run d = {.g = &g, .plan = &pl};
            td__cpu_run(x, units, cost, onednn_tiles, &d);
            const bool failed = atomic_load(&d.failed);
            if (!failed) convert(x, dt, true, c, out->data, no);
            td__free(c);
            td__free(offs);
            onednn_plan_fini(&pl);
            if (failed) return td__cpu_fail(x, TD_EINTERNAL, "matmul: oneDNN bf16 tile failed");
            return TD_OK;
        }
    }
#endif
    uint64_t total, bytes;
    if (!td__add_u64((uint64_t)na, (uint64_t)nb, &total) ||
        !td__add_u64(total, (uint64_t)no, &total) ||
        !td__mul_u64(total, sizeof(float), &bytes) || bytes > SIZE_MAX)
        return td__cpu_fail(x, TD_ENOMEM, "matmul: %s operands too large to widen",
                            td__dtype_str(dt));
    float *w = td__malloc((size_t)bytes);
    if (w == NULL)
        return td__cpu_fail(x, TD_ENOMEM, "matmul: no memory to widen %s operands to f32",
                            td__dtype_str(dt));
    td__view win[2] = {in[0], in[1]}, wout = *out;
    win[0].desc.dtype = win[1].desc.dtype = wout.desc.dtype = TD_F32;
    win[0].data = w;
    win[1].data = w + na;
    wout.data = w + na + nb;
    convert(x, dt, false, in[0].data, win[0].data, na);
    convert(x, dt, false, in[1].data, win[1].data, nb);
    td_status st = float_matmul(x, s, TD_F32, win, &wout);
    if (st == TD_OK) convert(x, dt, true, wout.data, out->data, no);
    td__free(w);
    return st;
}

td_status td__cpu_exec_matmul(const td__cpu_exec *x, const td__view *in, const td__view *out)
{
    if (in[0].desc.rank < 2 || in[1].desc.rank < 2 || out->desc.rank < 2)
        return td__cpu_fail(x, TD_EINTERNAL, "cpu: matmul operands below rank 2");
    mm_shape s;
    mm_shape_init(&s, in, out);
    const uint32_t dt = out->desc.dtype;
    if (s.nbatch == 0 || s.m == 0 || s.n == 0) return TD_OK;
    if (s.k == 0) {
        memset(out->data, 0, (size_t)(s.nbatch * s.m * s.n) * td__cpu_dtype_size(dt));
        return TD_OK;
    }
    if (!td__dtype_is_float(dt)) return int_matmul(x, &s, dt, in, out);
    if (td__dtype_is_half(dt)) return half_matmul(x, &s, dt, in, out);
    return float_matmul(x, &s, dt, in, out);
}

/* cpu_matmul.c — batched matmul [..., M, K] x [..., K, N] -> [..., M, N] with numpy batch
 * broadcasting.
 *
 * f32/f64 go to OpenBLAS (cblas_sgemm/cblas_dgemm), one GEMM per output batch; OpenBLAS
 * threads internally, partitioning the output (M and N) between its threads, and gave
 * identical bytes at 1, 4 and 16 threads when measured. Its kernel is chosen per CPU model,
 * so float GEMM bits may differ between machines (the design's "says so" case). Integer dtypes
 * use a plain i-k-j loop with wraparound arithmetic in the unsigned type of the output
 * width, which equals int64 accumulation truncated to the output (modular arithmetic);
 * it runs on the pool, split over output rows.
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

/* The iterator hands out runs of batches; a run has a base offset and a stride per operand. */
typedef struct gemm_ctx {
    const mm_shape *s;
    uint32_t dtype;
    const void *a, *b;
    void *c;
} gemm_ctx;

static void gemm_run(void *ctx, const int64_t *off, const int64_t *st, int64_t o, int64_t n)
{
    const gemm_ctx *g = ctx;
    const mm_shape *s = g->s;
    const int m = (int)s->m, nn = (int)s->n, k = (int)s->k;
    for (int64_t j = 0; j < n; j++) {
        int64_t ao = off[0] + j * st[0], bo = off[1] + j * st[1], co = (o + j) * s->m * s->n;
        if (g->dtype == TD_F32) {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, nn, k, 1.0f,
                        (const float *)g->a + ao, k, (const float *)g->b + bo, nn, 0.0f,
                        (float *)g->c + co, nn);
        } else {
            cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, nn, k, 1.0,
                        (const double *)g->a + ao, k, (const double *)g->b + bo, nn, 0.0,
                        (double *)g->c + co, nn);
        }
    }
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
                 : dt == TD_U8  ? matmul_u8  : NULL;
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
    if (s.m > INT32_MAX || s.n > INT32_MAX || s.k > INT32_MAX)
        return td__cpu_fail(x, TD_EUNSUPPORTED,
                            "matmul: dims M=%lld N=%lld K=%lld exceed BLAS's int range",
                            (long long)s.m, (long long)s.n, (long long)s.k);
    gemm_ctx g = {.s = &s, .dtype = dt, .a = in[0].data, .b = in[1].data, .c = out->data};
    td__cpu_iter_rows(&s.batch, 0, s.nbatch, gemm_run, &g);
    return TD_OK;
}

/* cuda_blas.c — f32/f64 batched matmul through cuBLAS, and f16/bf16 with f32 compute
 * (GemmEx, tensor cores).
 *
 * Why cuBLAS is opened with dlopen on first use instead of linked: libcublas (and the
 * libcublasLt it pulls in) is over half a gigabyte and takes about a second to load, and
 * every process that links libtensord loads this module at start. Loading it only when a
 * session first runs a float matmul keeps CPU-only work and GPU-less hosts free of that
 * cost. The module's RUNPATH (the CUDA library directory found at build time) and
 * LD_LIBRARY_PATH apply to this dlopen as to the module's own libraries.
 *
 * Row-major C[M,N] = A[M,K] B[K,N] is column-major C^T = B^T A^T, so the call passes B
 * first with m = N, n = M. One strided-batched GEMM per run of the batch iterator: a run
 * has one stride per operand (0 for a broadcast operand), so [B,M,K] x [K,N] is a single
 * call. Math is CUBLAS_COMPUTE_32F / 64F, and CUBLAS_COMPUTE_32F_FAST_TF32 only for an f32
 * op whose caller allowed TF32 (the op's precision attribute, td_matmul_ex in tensord.h):
 * the choice belongs to the program that knows what accuracy it needs, not to the server.
 * cuBLAS gives the same bits run to run on one GPU model and library version; its
 * summation order differs from OpenBLAS's, so agreement with the CPU is within a bound of
 * about K * 2^-24 * sum_k |a_ik b_kj| for f32 (see the conformance test; TF32 adds about
 * 2^-9 * sum_k |a_ik b_kj|).
 */
#include "backends/gpu/gpu_internal.h"
#include <cublas_v2.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TD_STR2(x) #x
#define TD_STR(x) TD_STR2(x)

static struct {
    void *lib;
    char err[256];
    __typeof__(cublasCreate_v2) *create;
    __typeof__(cublasDestroy_v2) *destroy;
    __typeof__(cublasSetStream_v2) *set_stream;
    __typeof__(cublasGemmStridedBatchedEx) *gemm;
    __typeof__(cublasGetStatusString) *status_string;
} g_blas;
static pthread_once_t g_blas_once = PTHREAD_ONCE_INIT;

/* Store symbol `name` into the function pointer at fn (dlsym returns void *; copying the
 * bytes is how ISO C lets it become a function pointer, as POSIX requires it to work). */
static void sym(void *fn, const char *name)
{
    void *p = dlsym(g_blas.lib, name);
    if (p == NULL && g_blas.err[0] == '\0')
        snprintf(g_blas.err, sizeof g_blas.err, "libcublas lacks %s", name);
    memcpy(fn, &p, sizeof p);
}

static void blas_load(void)
{
    static const char *const names[] = {"libcublas.so." TD_STR(CUBLAS_VER_MAJOR), "libcublas.so"};
    for (size_t i = 0; i < sizeof names / sizeof names[0] && g_blas.lib == NULL; i++)
        g_blas.lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (g_blas.lib == NULL) {
        const char *e = dlerror();
        snprintf(g_blas.err, sizeof g_blas.err, "cannot load libcublas: %s", e ? e : "?");
        return;
    }
    sym(&g_blas.create, "cublasCreate_v2");
    sym(&g_blas.destroy, "cublasDestroy_v2");
    sym(&g_blas.set_stream, "cublasSetStream_v2");
    sym(&g_blas.gemm, "cublasGemmStridedBatchedEx");
    sym(&g_blas.status_string, "cublasGetStatusString");
    if (g_blas.err[0] != '\0') {
        dlclose(g_blas.lib);
        g_blas.lib = NULL;
    }
}

static const char *status_str(cublasStatus_t s)
{
    return g_blas.status_string != NULL ? g_blas.status_string(s) : "?";
}

static td_status blas_fail(const td__gpu_exec *x, cublasStatus_t s, const char *what)
{
    td_status st = s == CUBLAS_STATUS_ALLOC_FAILED ? TD_ENOMEM : TD_EDEVICE;
    return td__gpu_fail(x, st, "cuda: cublas %s: %s (status %d)", what, status_str(s), (int)s);
}

void td__gpu_matmul_release(void *handle)
{
    if (handle != NULL && g_blas.destroy != NULL) g_blas.destroy((cublasHandle_t)handle);
}

/* The stream's handle, created on first use. */
static td_status blas_handle(const td__gpu_exec *x, cublasHandle_t *out)
{
    pthread_once(&g_blas_once, blas_load);
    if (g_blas.lib == NULL)
        return td__gpu_fail(x, TD_EUNSUPPORTED, "matmul: %s", g_blas.err);
    td__gpu_stream *st = x->st;
    if (st->blas == NULL) {
        cublasHandle_t h = NULL;
        cublasStatus_t s = g_blas.create(&h);
        if (s != CUBLAS_STATUS_SUCCESS) return blas_fail(x, s, "create");
        s = g_blas.set_stream(h, st->s);
        if (s != CUBLAS_STATUS_SUCCESS) {
            g_blas.destroy(h);
            return blas_fail(x, s, "set stream");
        }
        st->blas = h;
    }
    *out = (cublasHandle_t)st->blas;
    return TD_OK;
}

typedef struct gemm_ctx {
    const td__gpu_exec *x;
    cublasHandle_t h;
    cudaDataType type;
    cublasComputeType_t compute;
    const void *alpha, *beta;
    int m, n, k;
    const char *a, *b;
    char *c;
    size_t es;
    td_status status;
} gemm_ctx;

/* One run: cnt consecutive output batches from batch o; a and b start at element offsets
 * off[0], off[1] and step by step[0], step[1] elements per batch. */
static void gemm_run(void *ctx, const int64_t *off, const int64_t *step, int64_t o, int64_t cnt)
{
    gemm_ctx *g = ctx;
    const int64_t mn = (int64_t)g->m * g->n;
    int64_t aoff = off[0], boff = off[1];
    while (cnt > 0 && g->status == TD_OK) {
        int batch = cnt > INT32_MAX ? INT32_MAX : (int)cnt;
        cublasStatus_t s = g_blas.gemm(
            g->h, CUBLAS_OP_N, CUBLAS_OP_N, g->n, g->m, g->k, g->alpha,
            g->b + (size_t)boff * g->es, g->type, g->n, step[1],
            g->a + (size_t)aoff * g->es, g->type, g->k, step[0], g->beta,
            g->c + (size_t)(o * mn) * g->es, g->type, g->n, mn, batch, g->compute,
            CUBLAS_GEMM_DEFAULT);
        if (s != CUBLAS_STATUS_SUCCESS) g->status = blas_fail(g->x, s, "gemm");
        cnt -= batch;
        o += batch;
        aoff += batch * step[0];
        boff += batch * step[1];
    }
}

bool td__gpu_matmul_float_dtype(uint32_t dtype)
{
    return dtype == TD_F32 || dtype == TD_F64 || dtype == TD_F16 || dtype == TD_BF16;
}

td_status td__gpu_matmul_float(const td__gpu_exec *x, const td__gpu_iter *batch,
                               int64_t nbatch, int64_t m, int64_t n, int64_t k,
                               const td__view *in, const td__view *out, bool allow_tf32)
{
    if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX)
        return td__gpu_fail(x, TD_EUNSUPPORTED,
                             "matmul: dims M=%lld N=%lld K=%lld exceed cuBLAS's int range",
                             (long long)m, (long long)n, (long long)k);
    cublasHandle_t h = NULL;
    td_status st = blas_handle(x, &h);
    if (st != TD_OK) return st;
    static const double one = 1.0, zero = 0.0;
    static const float onef = 1.0f, zerof = 0.0f;
    const uint32_t dt = out->desc.dtype;
    const bool f64 = dt == TD_F64;
    gemm_ctx g;
    g.x = x;
    g.h = h;
    /* f16/bf16: products and sums in f32 (CUBLAS_COMPUTE_32F: tensor cores, f32
     * accumulation), each output rounded once to the dtype, as the CPU's widen + sgemm */
    g.type = f64 ? CUDA_R_64F
           : dt == TD_F16  ? CUDA_R_16F
           : dt == TD_BF16 ? CUDA_R_16BF
                           : CUDA_R_32F;
    g.compute = f64 ? CUBLAS_COMPUTE_64F
                    : allow_tf32 && dt == TD_F32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                 : CUBLAS_COMPUTE_32F;
    g.alpha = f64 ? (const void *)&one : (const void *)&onef;
    g.beta = f64 ? (const void *)&zero : (const void *)&zerof;
    g.m = (int)m;
    g.n = (int)n;
    g.k = (int)k;
    g.a = in[0].data;
    g.b = in[1].data;
    g.c = out->data;
    g.es = td__dtype_size(dt);
    g.status = TD_OK;
    td__gpu_iter_runs(batch, nbatch, gemm_run, &g);
    return g.status;
}

/* cpu_bench.c — CPU speed of tensord's f16/bf16 elementwise ops and matmuls on local:cpu,
 * next to the baselines that bound them in the same process: memcpy for bandwidth-bound
 * ops, OpenBLAS cblas_sgemm (its own threads) for f32 GEMM, and, when the build found
 * oneDNN (libdnnl-dev), oneDNN's bf16 matmul with f32 accumulation. PyTorch CPU runs the
 * same rows from bench/cpu_torch.py; bench/cpu_bench.sh runs both back to back and prints
 * the ratios (BENCHMARKS.md, "CPU f16/bf16").
 *
 * Timing rule (the same in cpu_torch.py): inputs made once; per row one untimed pass of the
 * timed loop, then `rounds` timed loops of `reps` ops (tensord: each result released at once,
 * then a fence); the time per op is the median loop divided by reps. Rates: GB/s counts the
 * bytes read and written once (add: 3 n e; cast: n (e_in + e_out); memcpy: 2 n), GFLOP/s is
 * 2 M N K per matmul.
 *
 * Usage: cpu-bench [--reps N] [--rounds N] [--quick] [--only elementwise|matmul|scan]
 * (scan: issue 13's stable sort of 2^24 f32 and cumsum over 1 GiB of f32, only when asked)
 * Output: "NAME  MS ms  RATE UNIT" per row, NAME shared with cpu_torch.py; other lines '#'. */
#include "tensord.h"
#include <cblas.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#if defined(TD_BENCH_DNNL)
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#endif

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

#define MAX_ROUNDS 16
static int reps = 10, rounds = 5;

/* A timed body: one op (or one loop of reps ops for tensord, see loop()). */
typedef struct body {
    bool (*fn)(struct body *b);
    td_context *ctx;
    td_tensor *a, *b;
    td_tensor *(*op2)(td_tensor *, td_tensor *);
    td_dtype cast_to;
    void *dst, *src;
    size_t nbytes;
    int m, n, k;
    const float *fa, *fb;
    float *fc;
    void *dnnl; /* struct dnnl_mm */
} body;

/* Median seconds per op; -1 on failure. */
static double time_body(body *b)
{
    for (int i = 0; i < reps; i++)
        if (!b->fn(b)) return -1;
    if (b->ctx != NULL && td_fence(b->ctx) != TD_OK) return -1;
    double t[MAX_ROUNDS];
    for (int r = 0; r < rounds; r++) {
        double t0 = now_s();
        for (int i = 0; i < reps; i++)
            if (!b->fn(b)) return -1;
        if (b->ctx != NULL && td_fence(b->ctx) != TD_OK) return -1;
        t[r] = (now_s() - t0) / reps;
    }
    qsort(t, (size_t)rounds, sizeof t[0], cmp_double);
    return t[rounds / 2];
}

static void report(const char *name, double s, double amount, double scale, const char *unit,
                   td_context *ctx)
{
    if (s < 0)
        printf("# %s failed: %s\n", name, ctx != NULL ? td_last_error(ctx) : "");
    else
        printf("%-28s %10.3f ms %10.2f %s\n", name, s * 1e3, amount / s / scale, unit);
    fflush(stdout);
}

static bool run_td2(body *b)
{
    td_tensor *r = b->op2(b->a, b->b);
    if (r == NULL) return false;
    td_release(r);
    return true;
}

static bool run_cast(body *b)
{
    td_tensor *r = td_cast(b->a, b->cast_to);
    if (r == NULL) return false;
    td_release(r);
    return true;
}

static bool run_memcpy(body *b)
{
    memcpy(b->dst, b->src, b->nbytes);
    __asm__ volatile("" ::: "memory");
    return true;
}

static bool run_sgemm(body *b)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, b->m, b->n, b->k, 1.0f, b->fa, b->k,
                b->fb, b->n, 0.0f, b->fc, b->n);
    return true;
}

/* [dims] tensor of dtype dt, uniform in [-1, 1) (drawn in dt directly). */
static td_tensor *rand_t(td_context *ctx, td_dtype dt, int rank, const int64_t *dims,
                         uint64_t seed)
{
    return td_rand_uniform(ctx, dt, rank, dims, seed, -1.0, 1.0);
}

static const char *dtname(td_dtype dt)
{
    return dt == TD_F32 ? "f32" : dt == TD_BF16 ? "bf16" : dt == TD_F16 ? "f16" : "?";
}

static size_t dtsize(td_dtype dt) { return dt == TD_F32 ? 4 : 2; }

static td_tensor *op_sort(td_tensor *a, td_tensor *unused)
{
    (void)unused;
    return td_sort(a, 0, false);
}

static td_tensor *op_cumsum(td_tensor *a, td_tensor *unused)
{
    (void)unused;
    return td_cumsum(a, 0);
}

/* Issue 13's scan and sort rows on the CPU: stable sort of 2^24 f32 (Melem/s) and cumsum over
 * 1 GiB of f32 (GB/s: read and written once). Quick: 2^16 elements each. */
static void bench_scan(td_context *ctx, bool quick)
{
    const int64_t ns = quick ? (1 << 16) : (1 << 24), nc = quick ? (1 << 16) : (1 << 28);
    char name[64];
    body b = {.fn = run_td2, .ctx = ctx, .op2 = op_sort};
    b.a = rand_t(ctx, TD_F32, 1, &ns, 11);
    snprintf(name, sizeof name, "sort_f32_%lld", (long long)ns);
    if (b.a != NULL) report(name, time_body(&b), (double)ns, 1e6, "Melem/s", ctx);
    td_release(b.a);
    b.op2 = op_cumsum;
    b.a = rand_t(ctx, TD_F32, 1, &nc, 12);
    snprintf(name, sizeof name, "cumsum_f32_%lld", (long long)nc);
    if (b.a != NULL) report(name, time_body(&b), 8.0 * (double)nc, 1e9, "GB/s", ctx);
    td_release(b.a);
}

static void bench_elementwise(td_context *ctx, int64_t nbytes)
{
    char name[64];
    body mb = {.fn = run_memcpy, .nbytes = (size_t)nbytes};
    mb.src = malloc((size_t)nbytes);
    mb.dst = malloc((size_t)nbytes);
    if (mb.src == NULL || mb.dst == NULL) return;
    memset(mb.src, 1, (size_t)nbytes);
    memset(mb.dst, 2, (size_t)nbytes);
    snprintf(name, sizeof name, "memcpy_%lld", (long long)nbytes);
    report(name, time_body(&mb), 2.0 * (double)nbytes, 1e9, "GB/s", NULL);
    free(mb.src);
    free(mb.dst);

    const td_dtype dts[] = {TD_F32, TD_BF16, TD_F16};
    for (size_t d = 0; d < 3; d++) {
        const td_dtype dt = dts[d];
        const int64_t n = nbytes / (int64_t)dtsize(dt);
        td_tensor *a = rand_t(ctx, dt, 1, &n, 1), *b = rand_t(ctx, dt, 1, &n, 2);
        body tb = {.fn = run_td2, .ctx = ctx, .a = a, .b = b, .op2 = td_add};
        snprintf(name, sizeof name, "add_%s_%lld", dtname(dt), (long long)n);
        report(name, time_body(&tb), 3.0 * (double)nbytes, 1e9, "GB/s", ctx);
        tb.op2 = td_mul;
        snprintf(name, sizeof name, "mul_%s_%lld", dtname(dt), (long long)n);
        report(name, time_body(&tb), 3.0 * (double)nbytes, 1e9, "GB/s", ctx);
        if (dt != TD_F32) {
            body cb = {.fn = run_cast, .ctx = ctx, .a = a, .cast_to = TD_F32};
            snprintf(name, sizeof name, "cast_%s_f32_%lld", dtname(dt), (long long)n);
            report(name, time_body(&cb), 3.0 * (double)nbytes, 1e9, "GB/s", ctx);
            td_tensor *f = td_cast(a, TD_F32);
            body nb = {.fn = run_cast, .ctx = ctx, .a = f, .cast_to = dt};
            snprintf(name, sizeof name, "cast_f32_%s_%lld", dtname(dt), (long long)n);
            report(name, time_body(&nb), 3.0 * (double)nbytes, 1e9, "GB/s", ctx);
            td_release(f);
            body eb = {.fn = run_cast, .ctx = ctx, .a = a, .cast_to = dt == TD_BF16 ? TD_F16 : TD_BF16};
            snprintf(name, sizeof name, "cast_%s_%s_%lld", dtname(dt),
                     dtname(eb.cast_to), (long long)n);
            report(name, time_body(&eb), 2.0 * (double)nbytes, 1e9, "GB/s", ctx);
        }
        td_release(a);
        td_release(b);
    }
}

#if defined(TD_BENCH_DNNL)
/* oneDNN matmul [m,k] x [k,n], bf16 sources, f32 destination (accumulated in f32, so the
 * one rounding to bf16 would be tensord's own). */
typedef struct dnnl_mm {
    dnnl_engine_t eng;
    dnnl_stream_t st;
    dnnl_primitive_t prim;
    dnnl_memory_t mem[3];
    const char *impl;
} dnnl_mm;

static bool dnnl_mm_init(dnnl_mm *d, int m, int n, int k, void *a, void *b, float *c)
{
    memset(d, 0, sizeof *d);
    dnnl_memory_desc_t md[3];
    dnnl_dims_t dims[3] = {{m, k}, {k, n}, {m, n}};
    if (dnnl_engine_create(&d->eng, dnnl_cpu, 0) != dnnl_success) return false;
    if (dnnl_stream_create(&d->st, d->eng, dnnl_stream_default_flags) != dnnl_success) return false;
    for (int i = 0; i < 3; i++)
        if (dnnl_memory_desc_init_by_tag(&md[i], 2, dims[i], i == 2 ? dnnl_f32 : dnnl_bf16,
                                         dnnl_ab) != dnnl_success)
            return false;
    dnnl_matmul_desc_t mmd;
    if (dnnl_matmul_desc_init(&mmd, &md[0], &md[1], NULL, &md[2]) != dnnl_success) return false;
    dnnl_primitive_desc_t pd;
    if (dnnl_primitive_desc_create(&pd, &mmd, NULL, d->eng, NULL) != dnnl_success) return false;
    const char *impl = NULL;
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    d->impl = impl != NULL ? strdup(impl) : "?";
    if (dnnl_primitive_create(&d->prim, pd) != dnnl_success) return false;
    void *ptr[3] = {a, b, c};
    for (int i = 0; i < 3; i++)
        if (dnnl_memory_create(&d->mem[i], &md[i], d->eng, ptr[i]) != dnnl_success) return false;
    dnnl_primitive_desc_destroy(pd);
    return true;
}

static bool run_dnnl(body *b)
{
    dnnl_mm *d = b->dnnl;
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, d->mem[0]}, {DNNL_ARG_WEIGHTS, d->mem[1]},
                               {DNNL_ARG_DST, d->mem[2]}};
    return dnnl_primitive_execute(d->prim, d->st, 3, args) == dnnl_success &&
           dnnl_stream_wait(d->st) == dnnl_success;
}
#endif

static void bench_matmul(td_context *ctx, int size)
{
    char name[64];
    const int64_t dims[2] = {size, size};
    const double flops = 2.0 * size * (double)size * size;
    const td_dtype dts[] = {TD_BF16, TD_F16, TD_F32};
    for (size_t d = 0; d < 3; d++) {
        td_tensor *a = rand_t(ctx, dts[d], 2, dims, 3), *b = rand_t(ctx, dts[d], 2, dims, 4);
        body tb = {.fn = run_td2, .ctx = ctx, .a = a, .b = b, .op2 = td_matmul};
        snprintf(name, sizeof name, "matmul_%s_%d", dtname(dts[d]), size);
        report(name, time_body(&tb), flops, 1e9, "GFLOP/s", ctx);
        td_release(a);
        td_release(b);
    }
    /* f32 OpenBLAS with its own threads (not deterministic across thread counts) */
    const size_t nel = (size_t)size * (size_t)size;
    float *fa = malloc(nel * 4), *fb = malloc(nel * 4), *fc = malloc(nel * 4);
    uint16_t *ha = malloc(nel * 2), *hb = malloc(nel * 2);
    if (fa == NULL || fb == NULL || fc == NULL || ha == NULL || hb == NULL) return;
    for (size_t i = 0; i < nel; i++) {
        fa[i] = (float)((i * 37) % 201) / 100.0f - 1.0f;
        fb[i] = (float)((i * 53) % 199) / 100.0f - 1.0f;
        uint32_t ua, ub;
        memcpy(&ua, &fa[i], 4);
        memcpy(&ub, &fb[i], 4);
        ha[i] = (uint16_t)(ua >> 16);
        hb[i] = (uint16_t)(ub >> 16);
    }
    /* tensord's matmul set OpenBLAS to one thread for the process: give it every core */
    openblas_set_num_threads((int)sysconf(_SC_NPROCESSORS_ONLN));
    body sb = {.fn = run_sgemm, .m = size, .n = size, .k = size, .fa = fa, .fb = fb, .fc = fc};
    snprintf(name, sizeof name, "sgemm_openblas_%d", size);
    report(name, time_body(&sb), flops, 1e9, "GFLOP/s", NULL);
#if defined(TD_BENCH_DNNL)
    dnnl_mm dm;
    if (dnnl_mm_init(&dm, size, size, size, ha, hb, fc)) {
        omp_set_num_threads((int)sysconf(_SC_NPROCESSORS_ONLN));
        body db = {.fn = run_dnnl, .dnnl = &dm};
        snprintf(name, sizeof name, "dnnl_bf16_%d", size);
        report(name, time_body(&db), flops, 1e9, "GFLOP/s", NULL);
        int threads = omp_get_max_threads();
        omp_set_num_threads(1);
        snprintf(name, sizeof name, "dnnl_bf16_1thread_%d", size);
        report(name, time_body(&db), flops, 1e9, "GFLOP/s", NULL);
        omp_set_num_threads(threads);
        printf("# oneDNN %d: %s, %d OpenMP threads\n", size, dm.impl, threads);
    } else {
        printf("# oneDNN %d: bf16 matmul not available\n", size);
    }
#endif
    free(fa);
    free(fb);
    free(fc);
    free(ha);
    free(hb);
}

static int arg_int(int argc, char **argv, const char *name, int def)
{
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], name) == 0) return atoi(argv[i + 1]);
    return def;
}

int main(int argc, char **argv)
{
    bool quick = false;
    for (int i = 1; i < argc; i++) quick = quick || strcmp(argv[i], "--quick") == 0;
    reps = arg_int(argc, argv, "--reps", quick ? 2 : 10);
    rounds = arg_int(argc, argv, "--rounds", quick ? 1 : 5);
    if (rounds < 1 || rounds > MAX_ROUNDS || reps < 1) {
        fprintf(stderr, "cpu-bench: --reps >= 1, --rounds 1..%d\n", MAX_ROUNDS);
        return 2;
    }
    td_context *ctx = NULL;
    if (td_connect("local:cpu", NULL, &ctx) != TD_OK) {
        fprintf(stderr, "cpu-bench: local:cpu: %s\n", td_last_error(NULL));
        return 1;
    }
    printf("# cpu-bench: reps %d, rounds %d, OpenBLAS %s\n", reps, rounds, openblas_get_config());
    const char *only = "";
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--only") == 0) only = argv[i + 1];
    if (strcmp(only, "scan") == 0) {
        bench_scan(ctx, quick);
        td_close(ctx);
        return 0;
    }
    if (strcmp(only, "matmul") != 0) bench_elementwise(ctx, quick ? (1 << 20) : (64 << 20));
    const int sizes[] = {512, 1024, 2048};
    for (size_t i = 0; i < (quick || strcmp(only, "elementwise") == 0 ? (quick ? 1u : 0u) : 3u); i++) {
        int saved = reps;
        reps = sizes[i] >= 2048 ? (reps > 3 ? 3 : reps) : reps;
        bench_matmul(ctx, quick ? 128 : sizes[i]);
        reps = saved;
    }
    td_close(ctx);
    return 0;
}

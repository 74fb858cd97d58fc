/* cpu_dnnl_conv.c — f32 CONV through oneDNN (backends/cpu/cpu_dnnl_conv.c), in builds with
 * -Ddnnl (meson registers this file only there):
 *  - values against a float64 reference computed here, over groups, strides, dilation,
 *    asymmetric padding, bias, 1-3 spatial dims and the ResNet-50 stem (C = 3, 7 x 7 / 2),
 *    within the conformance bound (K products: |err| <= 2 K u sum|x w| + ulp);
 *  - the determinism rule: the same bytes on devices of 1, 2 and 4 threads, and with the
 *    calling thread's OpenMP count raised (meson runs this file again with
 *    OMP_NUM_THREADS=4, so the pool threads start from another count too);
 *  - subnormal inputs, weights and results are kept (not flushed to zero);
 *  - the plan cache: more shapes than it holds, run from several threads at once (plans
 *    evicted and rebuilt while others run), give the bytes of a lone run. */
#include "cpu_test_util.h"
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct ccase {
    int nsp;
    int64_t n, c, co, g;
    int64_t in[3], k[3], s[3], d[3], pl[3], ph[3];
    bool bias;
} ccase;

static const ccase cases[] = {
    /* 2-d 3x3 pad 1 with bias (ResNet body) */
    {2, 8, 16, 32, 1, {12, 12}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, true},
    /* groups, stride 2, dilation 2, asymmetric padding */
    {2, 4, 12, 18, 3, {13, 11}, {3, 2}, {2, 1}, {2, 2}, {2, 0}, {1, 3}, true},
    /* depthwise */
    {2, 4, 8, 8, 8, {9, 9}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, false},
    /* negative high padding (the last input rows and columns are dropped) */
    {2, 4, 6, 8, 2, {10, 9}, {3, 3}, {1, 2}, {1, 1}, {1, 0}, {-2, -1}, true},
    /* 1x1 */
    {2, 16, 64, 32, 1, {7, 7}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0}, false},
    /* the ResNet-50 stem at a small size: C = 3, 7 x 7 stride 2 pad 3 */
    {2, 4, 3, 16, 1, {32, 32}, {7, 7}, {2, 2}, {1, 1}, {3, 3}, {3, 3}, false},
    /* 1-d and 3-d */
    {1, 6, 5, 7, 1, {40}, {5}, {3}, {2}, {2}, {1}, true},
    {3, 4, 4, 6, 2, {5, 6, 7}, {2, 3, 2}, {1, 2, 1}, {1, 1, 2}, {1, 0, 1}, {0, 1, 1}, true},
};

static int64_t out_size(const ccase *c, int i)
{
    return (c->in[i] + c->pl[i] + c->ph[i] - c->d[i] * (c->k[i] - 1) - 1) / c->s[i] + 1;
}

typedef struct built {
    uint32_t rank;
    int64_t xd[5], wd[5], yd[5], bd[1];
    td__op op;
} built;

static built build(const ccase *c)
{
    built b;
    memset(&b, 0, sizeof b);
    b.rank = (uint32_t)(2 + c->nsp);
    b.xd[0] = b.yd[0] = c->n;
    b.xd[1] = c->c;
    b.yd[1] = b.wd[0] = b.bd[0] = c->co;
    b.wd[1] = c->c / c->g;
    int64_t ia[13];
    ia[0] = c->g;
    for (int i = 0; i < c->nsp; i++) {
        b.xd[2 + i] = c->in[i];
        b.yd[2 + i] = out_size(c, i);
        b.wd[2 + i] = c->k[i];
        ia[1 + i] = c->s[i];
        ia[1 + c->nsp + i] = c->d[i];
        ia[1 + 2 * c->nsp + i] = c->pl[i];
        ia[1 + 3 * c->nsp + i] = c->ph[i];
    }
    b.op = tu_op(TD_OP_CONV, (uint32_t)(1 + 4 * c->nsp), ia);
    b.op.n_inputs = c->bias ? 3 : 2;
    b.op.dtype = TD_F32;
    return b;
}

static int64_t prod(const int64_t *d, uint32_t r)
{
    int64_t p = 1;
    for (uint32_t i = 0; i < r; i++)
        p *= d[i];
    return p;
}

/* Deterministic values in [-1, 1). */
static float *fill(int64_t n, uint64_t seed)
{
    float *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        v[i] = (float)((double)(seed >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
    }
    return v;
}

/* y[n, o, p...] in float64, and the sum of |x w| terms of each output into *mag. */
static void reference(const ccase *c, const built *b, const float *x, const float *w,
                      const float *bias, double *y, double *mag)
{
    const int nsp = c->nsp;
    int64_t os[3] = {1, 1, 1}, is[3] = {1, 1, 1}, ks[3] = {1, 1, 1}, d[3] = {1, 1, 1};
    int64_t k[3] = {1, 1, 1}, s[3] = {1, 1, 1}, pl[3] = {0, 0, 0}, in[3] = {1, 1, 1};
    for (int i = 0; i < nsp; i++) {
        os[3 - nsp + i] = b->yd[2 + i];
        is[3 - nsp + i] = c->in[i];
        ks[3 - nsp + i] = c->k[i];
        k[3 - nsp + i] = c->k[i];
        s[3 - nsp + i] = c->s[i];
        d[3 - nsp + i] = c->d[i];
        pl[3 - nsp + i] = c->pl[i];
        in[3 - nsp + i] = c->in[i];
    }
    const int64_t cg = c->c / c->g, cog = c->co / c->g, P = os[0] * os[1] * os[2];
    const int64_t L = in[0] * in[1] * in[2], K = ks[0] * ks[1] * ks[2];
    for (int64_t n = 0; n < c->n; n++)
        for (int64_t o = 0; o < c->co; o++)
            for (int64_t p = 0; p < P; p++) {
                const int64_t o0 = p / (os[1] * os[2]), o1 = p / os[2] % os[1], o2 = p % os[2];
                double acc = bias != NULL ? bias[o] : 0.0, m = fabs(acc);
                const int64_t g = o / cog;
                for (int64_t ci = 0; ci < cg; ci++)
                    for (int64_t t = 0; t < K; t++) {
                        const int64_t t0 = t / (k[1] * k[2]), t1 = t / k[2] % k[1], t2 = t % k[2];
                        const int64_t i0 = o0 * s[0] - pl[0] + t0 * d[0];
                        const int64_t i1 = o1 * s[1] - pl[1] + t1 * d[1];
                        const int64_t i2 = o2 * s[2] - pl[2] + t2 * d[2];
                        if (i0 < 0 || i0 >= in[0] || i1 < 0 || i1 >= in[1] || i2 < 0 || i2 >= in[2])
                            continue;
                        const double xv =
                            x[(n * c->c + g * cg + ci) * L + (i0 * in[1] + i1) * in[2] + i2];
                        const double wv = w[(o * cg + ci) * K + t];
                        acc += xv * wv;
                        m += fabs(xv * wv);
                    }
                y[(n * c->co + o) * P + p] = acc;
                mag[(n * c->co + o) * P + p] = m;
            }
    (void)is;
}

/* Run case c on dev; the output bytes into a new malloc'd buffer. */
static float *run_on(td__device *dev, const ccase *c, const built *b, const float *x,
                     const float *w, const float *bias)
{
    td__view in[3];
    in[0] = tu_new(dev, TD_F32, b->rank, b->xd, x);
    in[1] = tu_new(dev, TD_F32, b->rank, b->wd, w);
    if (c->bias) in[2] = tu_new(dev, TD_F32, 1, b->bd, bias);
    td__view y = tu_new(dev, TD_F32, b->rank, b->yd, NULL);
    cr_assert_eq(tu_exec(dev, b->op, in, c->bias ? 3 : 2, &y), TD_OK, "%s", tu_err);
    float *out = malloc(tu_nbytes(&y));
    memcpy(out, y.data, tu_nbytes(&y));
    for (int i = 0; i < (c->bias ? 3 : 2); i++)
        tu_free(dev, &in[i]);
    tu_free(dev, &y);
    return out;
}

Test(cpu_dnnl_conv, matches_a_float64_reference)
{
    td__device *dev = tu_open(2);
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        const ccase *c = &cases[t];
        const built b = build(c);
        const int64_t nx = prod(b.xd, b.rank), nw = prod(b.wd, b.rank), ny = prod(b.yd, b.rank);
        float *x = fill(nx, 11 + t), *w = fill(nw, 23 + t), *bias = fill(c->co, 37 + t);
        double *want = malloc((size_t)ny * sizeof *want), *mag = malloc((size_t)ny * sizeof *mag);
        reference(c, &b, x, w, c->bias ? bias : NULL, want, mag);
        float *got = run_on(dev, c, &b, x, w, bias);
        const double K = (double)(c->c / c->g) * (double)prod(b.wd + 2, b.rank - 2) + 1;
        for (int64_t i = 0; i < ny; i++) {
            const double bound =
                2.0 * K * FLT_EPSILON / 2 * mag[i] + FLT_TRUE_MIN + fabs(want[i]) * FLT_EPSILON;
            cr_assert_leq(fabs(got[i] - want[i]), bound, "case %zu element %lld: %.9g, want %.9g",
                          t, (long long)i, got[i], want[i]);
        }
        free(x);
        free(w);
        free(bias);
        free(want);
        free(mag);
        free(got);
    }
    tu_close(dev);
}

Test(cpu_dnnl_conv, bits_do_not_depend_on_threads)
{
    td__device *dev[3] = {tu_open(1), tu_open(2), tu_open(4)};
    /* the cases, and a ResNet layer2-like 3x3 128 -> 128 at 14 x 14 (blocked layouts,
     * several units per thread) */
    ccase all[sizeof cases / sizeof cases[0] + 1];
    memcpy(all, cases, sizeof cases);
    all[sizeof cases / sizeof cases[0]] =
        (ccase){2, 8, 128, 128, 1, {14, 14}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, true};
    const int omp_saved = omp_get_max_threads();
    for (size_t t = 0; t < sizeof all / sizeof all[0]; t++) {
        const ccase *c = &all[t];
        const built b = build(c);
        const int64_t nx = prod(b.xd, b.rank), nw = prod(b.wd, b.rank), ny = prod(b.yd, b.rank);
        float *x = fill(nx, 5 + t), *w = fill(nw, 7 + t), *bias = fill(c->co, 9 + t);
        float *ref = run_on(dev[0], c, &b, x, w, bias);
        for (int d = 0; d < 3; d++)
            for (int omp = 1; omp <= 4; omp += 3) {
                omp_set_num_threads(omp);
                float *got = run_on(dev[d], c, &b, x, w, bias);
                cr_assert_eq(memcmp(ref, got, (size_t)ny * sizeof *got), 0,
                             "case %zu: device with %d threads (caller's OpenMP count %d) "
                             "differs from 1 thread",
                             t, d == 0 ? 1 : d * 2, omp);
                free(got);
            }
        omp_set_num_threads(omp_saved);
        free(x);
        free(w);
        free(bias);
        free(ref);
    }
    for (int d = 0; d < 3; d++)
        tu_close(dev[d]);
}

/* Subnormal x (weights 1 and 0.5), subnormal weights (x 1), and normal x and w whose
 * products are subnormal: every result is the exact (subnormal) sum, never zero. */
Test(cpu_dnnl_conv, subnormals_are_not_flushed)
{
    td__device *dev = tu_open(2);
    const ccase cs[] = {
        {2, 4, 16, 16, 1, {6, 6}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0}, false},
        {2, 4, 16, 16, 1, {6, 6}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, false},
        {2, 4, 3, 16, 1, {16, 16}, {7, 7}, {2, 2}, {1, 1}, {3, 3}, {3, 3}, false},
        /* depthwise (brdgmm_dw here) and odd groups (oneDNN's gemm-based conv here) */
        {2, 4, 8, 8, 8, {9, 9}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, false},
        {2, 4, 12, 18, 3, {13, 11}, {3, 2}, {2, 1}, {2, 2}, {2, 0}, {1, 3}, false},
    };
    const float tiny = 0x1p-140f; /* subnormal (f32's normal floor is 2^-126) */
    for (size_t t = 0; t < sizeof cs / sizeof cs[0]; t++)
        for (int mode = 0; mode < 3; mode++) {
            const ccase *c = &cs[t];
            const built b = build(c);
            const int64_t nx = prod(b.xd, b.rank), nw = prod(b.wd, b.rank);
            const int64_t ny = prod(b.yd, b.rank);
            float *x = malloc((size_t)nx * sizeof *x), *w = malloc((size_t)nw * sizeof *w);
            for (int64_t i = 0; i < nx; i++)
                x[i] = mode == 0 ? tiny * (float)(1 + i % 3) : mode == 1 ? 1.0f : 0x1p-70f;
            for (int64_t i = 0; i < nw; i++)
                w[i] = mode == 0 ? (i % 2 ? 0.5f : 1.0f) : mode == 1 ? tiny : 0x1p-70f;
            double *want = malloc((size_t)ny * sizeof *want);
            double *mag = malloc((size_t)ny * sizeof *mag);
            reference(c, &b, x, w, NULL, want, mag);
            float *got = run_on(dev, c, &b, x, w, NULL);
            int64_t nonzero = 0;
            for (int64_t i = 0; i < ny; i++) {
                /* 0 where every tap of an output falls in the padding */
                cr_assert(want[i] >= 0 && want[i] < 0x1p-126, "case %zu mode %d: not subnormal", t,
                          mode);
                nonzero += want[i] > 0;
                cr_assert_eq((double)got[i], want[i],
                             "case %zu mode %d element %lld: %a, want %a (flushed?)", t, mode,
                             (long long)i, got[i], want[i]);
            }
            cr_assert_gt(nonzero, ny / 2, "case %zu: too few subnormal results", t);
            free(x);
            free(w);
            free(want);
            free(mag);
            free(got);
        }
    tu_close(dev);
}

/* 24 shapes (more than the cache's 16 plans), each [4, C, 6, 5] with C and Cout varying. */
enum { NSHAPES = 24, NWORKERS = 3 };

static ccase shape_k(int k)
{
    return (ccase){2,      4,      2 + k % 5, 3 + k,  1,      {6, 5},
                   {3, 2}, {1, 1}, {1, 1},    {1, 0}, {1, 1}, k % 2 == 0};
}

typedef struct worker {
    float *got[NSHAPES];
    td__device *dev;
} worker;

static void *worker_run(void *arg)
{
    worker *w = arg;
    for (int rep = 0; rep < 2; rep++)
        for (int k = 0; k < NSHAPES; k++) {
            const ccase c = shape_k(k);
            const built b = build(&c);
            float *x = fill(prod(b.xd, b.rank), 100 + k), *wt = fill(prod(b.wd, b.rank), 200 + k);
            float *bias = fill(c.co, 300 + k);
            free(w->got[k]);
            w->got[k] = run_on(w->dev, &c, &b, x, wt, bias);
            free(x);
            free(wt);
            free(bias);
        }
    return NULL;
}

Test(cpu_dnnl_conv, plan_cache_evicts_and_rebuilds_under_concurrent_use)
{
    worker lone = {.dev = tu_open(1)}, ws[NWORKERS];
    worker_run(&lone);
    pthread_t th[NWORKERS];
    for (int i = 0; i < NWORKERS; i++) {
        ws[i] = (worker){.dev = tu_open(1 + i)};
        cr_assert_eq(pthread_create(&th[i], NULL, worker_run, &ws[i]), 0);
    }
    for (int i = 0; i < NWORKERS; i++)
        cr_assert_eq(pthread_join(th[i], NULL), 0);
    for (int i = 0; i < NWORKERS; i++) {
        for (int k = 0; k < NSHAPES; k++) {
            const ccase c = shape_k(k);
            const built b = build(&c);
            cr_assert_eq(memcmp(lone.got[k], ws[i].got[k], (size_t)prod(b.yd, b.rank) * 4), 0,
                         "shape %d on worker %d differs from the lone run", k, i);
            free(ws[i].got[k]);
        }
        tu_close(ws[i].dev);
    }
    for (int k = 0; k < NSHAPES; k++)
        free(lone.got[k]);
    tu_close(lone.dev);
}

/* cpu_dnnl_conv.c — f32 CONV and CONV_TRANSPOSE through oneDNN
 * (backends/cpu/cpu_dnnl_conv.c), in builds that found oneDNN (the default where libdnnl-dev
 * is installed; meson registers this file only there):
 *  - values against a float64 reference computed here, over groups, strides, dilation,
 *    asymmetric and negative padding, bias, 1-3 spatial dims, the ResNet-50 stem (C = 3,
 *    7 x 7 / 2) and conv_transpose (stride, groups, dilation, output padding),
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
    bool t; /* CONV_TRANSPOSE: x [n, c, in], w [c, co/g, k], y [n, co, out] */
} ccase;

static const ccase cases[] = {
    /* 2-d 3x3 pad 1 with bias (ResNet body) */
    {2, 8, 16, 32, 1, {12, 12}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, true, false},
    /* groups, stride 2, dilation 2, asymmetric padding */
    {2, 4, 12, 18, 3, {13, 11}, {3, 2}, {2, 1}, {2, 2}, {2, 0}, {1, 3}, true, false},
    /* depthwise */
    {2, 4, 8, 8, 8, {9, 9}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, false, false},
    /* negative high padding (the last input rows and columns are dropped) */
    {2, 4, 6, 8, 2, {10, 9}, {3, 3}, {1, 2}, {1, 1}, {1, 0}, {-2, -1}, true, false},
    /* 1x1 */
    {2, 16, 64, 32, 1, {7, 7}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0}, false, false},
    /* the ResNet-50 stem at a small size: C = 3, 7 x 7 stride 2 pad 3 */
    {2, 4, 3, 16, 1, {32, 32}, {7, 7}, {2, 2}, {1, 1}, {3, 3}, {3, 3}, false, false},
    /* 1-d and 3-d */
    {1, 6, 5, 7, 1, {40}, {5}, {3}, {2}, {2}, {1}, true, false},
    {3, 4, 4, 6, 2, {5, 6, 7}, {2, 3, 2}, {1, 2, 1}, {1, 1, 2}, {1, 0, 1}, {0, 1, 1}, true, false},
    /* CONV_TRANSPOSE (conv's input gradient): groups, stride, dilation, negative pad_hi
     * (output padding); a DCGAN-like 4x4 / 2 upsampling; 1-d */
    {2, 4, 8, 6, 2, {5, 4}, {3, 2}, {2, 3}, {1, 2}, {1, 0}, {0, -1}, true, true},
    {2, 8, 32, 16, 1, {7, 7}, {4, 4}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, false, true},
    {1, 4, 6, 4, 2, {9}, {3}, {2}, {1}, {1}, {0}, true, true},
};

static int64_t out_size(const ccase *c, int i)
{
    if (c->t) return (c->in[i] - 1) * c->s[i] - c->pl[i] - c->ph[i] + c->d[i] * (c->k[i] - 1) + 1;
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
    b.yd[1] = b.bd[0] = c->co;
    b.wd[0] = c->t ? c->c : c->co;
    b.wd[1] = c->t ? c->co / c->g : c->c / c->g;
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
    b.op = tu_op(c->t ? TD_OP_CONV_TRANSPOSE : TD_OP_CONV, (uint32_t)(1 + 4 * c->nsp), ia);
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

/* The window of a case with its spatial dims right-aligned in 3 (unused ones 1, pad 0). */
typedef struct win3 {
    int64_t in[3], out[3], k[3], s[3], d[3], pl[3];
} win3;

/* Position p (flat, over `from`) moved by tap t (flat, over k): p s - pl + t d per dim, as
 * a flat index over `to`, or -1 outside it. Conv reads x at (output p, tap t); conv_transpose
 * writes y at (input p, tap t). */
static int64_t tap_at(const win3 *v, const int64_t *from, const int64_t *to, int64_t p, int64_t t)
{
    const int64_t pd[3] = {p / (from[1] * from[2]), p / from[2] % from[1], p % from[2]};
    const int64_t td[3] = {t / (v->k[1] * v->k[2]), t / v->k[2] % v->k[1], t % v->k[2]};
    int64_t q = 0;
    for (int i = 0; i < 3; i++) {
        const int64_t qi = pd[i] * v->s[i] - v->pl[i] + td[i] * v->d[i];
        if (qi < 0 || qi >= to[i]) return -1;
        q = q * to[i] + qi;
    }
    return q;
}

/* y[n, o, p...] in float64, and the sum of |x w| terms of each output into *mag. */
static void reference(const ccase *c, const built *b, const float *x, const float *w,
                      const float *bias, double *y, double *mag)
{
    const int nsp = c->nsp;
    win3 v = {{1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}};
    for (int i = 0; i < nsp; i++) {
        v.out[3 - nsp + i] = b->yd[2 + i];
        v.in[3 - nsp + i] = c->in[i];
        v.k[3 - nsp + i] = c->k[i];
        v.s[3 - nsp + i] = c->s[i];
        v.d[3 - nsp + i] = c->d[i];
        v.pl[3 - nsp + i] = c->pl[i];
    }
    const int64_t cg = c->c / c->g, cog = c->co / c->g;
    const int64_t P = v.out[0] * v.out[1] * v.out[2], L = v.in[0] * v.in[1] * v.in[2];
    const int64_t K = v.k[0] * v.k[1] * v.k[2];
    for (int64_t i = 0; i < c->n * c->co * P; i++) {
        y[i] = bias != NULL ? bias[i / P % c->co] : 0.0;
        mag[i] = fabs(y[i]);
    }
    for (int64_t n = 0; n < c->n; n++)
        for (int64_t ci = 0; ci < c->c; ci++) {
            const int64_t g = ci / cg;
            for (int64_t o = 0; o < cog; o++)
                for (int64_t p = 0; p < (c->t ? L : P); p++)
                    for (int64_t t = 0; t < K; t++) {
                        /* conv: output p reads x at q; conv_transpose: x at p adds to q */
                        const int64_t q =
                            c->t ? tap_at(&v, v.in, v.out, p, t) : tap_at(&v, v.out, v.in, p, t);
                        if (q < 0) continue;
                        const int64_t xi = (n * c->c + ci) * L + (c->t ? p : q);
                        const int64_t yi = (n * c->co + g * cog + o) * P + (c->t ? q : p);
                        const double wv = c->t ? w[(ci * cog + o) * K + t]
                                               : w[((g * cog + o) * cg + ci % cg) * K + t];
                        const double val = (double)x[xi] * wv;
                        y[yi] += val;
                        mag[yi] += fabs(val);
                    }
        }
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
        (ccase){2, 8, 128, 128, 1, {14, 14}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, true, false};
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
        {2, 4, 16, 16, 1, {6, 6}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0}, false, false},
        {2, 4, 16, 16, 1, {6, 6}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, false, false},
        {2, 4, 3, 16, 1, {16, 16}, {7, 7}, {2, 2}, {1, 1}, {3, 3}, {3, 3}, false, false},
        /* depthwise (brdgmm_dw here) and odd groups (oneDNN's gemm-based conv here) */
        {2, 4, 8, 8, 8, {9, 9}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, false, false},
        {2, 4, 12, 18, 3, {13, 11}, {3, 2}, {2, 1}, {2, 2}, {2, 0}, {1, 3}, false, false},
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
    return (ccase){2,      4,      2 + k % 5, 3 + k,  1,          {6, 5}, {3, 2},
                   {1, 1}, {1, 1}, {1, 0},    {1, 1}, k % 2 == 0, false};
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

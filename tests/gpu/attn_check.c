/* attn_check.c — the CUDA backend's fused f16/bf16 attention (backends/gpu/gpu_attention.cu)
 * against an f32 reference, with the numbers a first GPU run needs to find a bug: per case
 * the largest |got - ref|, where (batch, row, column), the bound it is held to, the CPU
 * lowering's own error in the same dtype next to it, NaNs, and whether two runs give the
 * same bits.
 *
 * Reference: the same f16/bf16 inputs widened to f32 (exactly) and run on the reference
 * device in f32 (the CPU's native kernel), with the scale rounded to the dtype as both the
 * lowering and the kernel use it. Bound: 4 u max|v| + u |ref|, u the dtype's unit roundoff
 * (2^-8 bf16, 2^-11 f16): the kernel's scores are f32 (their error is far below u), the
 * weights are rounded to the dtype (u max|v| over weights that sum to 1), the row sum
 * comes from the unrounded weights (u max|v|), the output is rounded once (u |y|), plus
 * the exp approximation and sum orders (2^-20 relative); 4 u max|v| leaves a margin.
 * The conformance program holds the op to the op table's looser ATTENTION bound; this
 * shows how far inside it the kernel is.
 *
 *     attn-check [--device local:cuda:0] [--reference local:cpu] [--quick] [--max-ls N]
 *                [--bits-only]
 * --quick: the cases with L S <= 300000 only; --max-ls N: L S <= N (runs under
 * compute-sanitizer stay short); --bits-only: no reference, one line a case with a hash
 * (FNV-1a 64) of the output's bits, to compare the kernel's timing variants
 * (TENSORD_GPU_ATTN_VARIANT) with the default: equal lines, equal bits.
 * Prints one line per case and a summary line "attn-check: N cases, F failed"; exit 1 when
 * a case fails. Inputs are deterministic (xorshift; no seeds to pass). */
#include "engine/convert.h"
#include "tensord.h"
#include <inttypes.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct acase {
    int64_t b, h, l, s, e; /* q [b, h, l, e], k v [b or 1, h, s, e] */
    int causal;
    double scale; /* 0: 1 / sqrt(e) */
    int kv_bcast; /* k and v [h, s, e], shared by every batch */
} acase;

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static int g_bits_only;

static uint64_t fnv1a(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static double unit(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (double)(g_rng >> 11) * 0x1p-53;
}

/* roughly normal(0, 1): the sum of 4 uniforms, centred and scaled */
static float gen(void)
{
    double t = unit() + unit() + unit() + unit() - 2.0;
    return (float)(t * 1.7320508075688772);
}

static td_tensor *host_f32(td_context *ctx, int rank, const int64_t *d, float **keep)
{
    int64_t n = 1;
    for (int i = 0; i < rank; i++) n *= d[i];
    float *x = malloc((size_t)(n ? n : 1) * sizeof *x);
    for (int64_t i = 0; i < n; i++) x[i] = gen();
    td_tensor *t = td_from_host(ctx, TD_F32, rank, d, x);
    *keep = x;
    return t;
}

/* the tensor's elements as f32 (a widening cast on its own device, then a read) */
static float *read_f32(td_tensor *t, int64_t n, td_context *ctx)
{
    td_tensor *w = td_cast(t, TD_F32);
    float *y = malloc((size_t)(n ? n : 1) * sizeof *y);
    if (w == NULL || td_read(w, y, (size_t)n * sizeof *y) != TD_OK) {
        fprintf(stderr, "attn-check: read failed: %s\n", td_last_error(ctx));
        free(y);
        y = NULL;
    }
    td_release(w);
    return y;
}

/* the dtype's raw bytes of t */
static void *read_raw(td_tensor *t, size_t nbytes, td_context *ctx)
{
    void *y = malloc(nbytes ? nbytes : 1);
    if (td_read(t, y, nbytes) != TD_OK) {
        fprintf(stderr, "attn-check: read failed: %s\n", td_last_error(ctx));
        free(y);
        return NULL;
    }
    return y;
}

static int run_case(td_context *dev, td_context *ref, const acase *c, td_dtype dt,
                    const char *dtn)
{
    const int64_t dq[4] = {c->b, c->h, c->l, c->e};
    const int64_t dkv4[4] = {c->b, c->h, c->s, c->e};
    const int64_t *dkv = c->kv_bcast ? dkv4 + 1 : dkv4;
    const int rkv = c->kv_bcast ? 3 : 4;
    const int64_t nq = c->b * c->h * c->l * c->e;
    const int64_t nkv = (c->kv_bcast ? 1 : c->b) * c->h * c->s * c->e;
    const double sc = c->scale != 0 ? c->scale : 1.0 / sqrt((double)c->e);
    const double sc_r = dt == TD_BF16 ? td__bf16_to_f32(td__f64_to_bf16(sc))
                                      : td__f16_to_f32(td__f64_to_f16(sc));
    const double u = dt == TD_BF16 ? 0x1p-8 : 0x1p-11;
    float *hq, *hk, *hv;
    int fail = 1;
    void *rq = NULL, *rk = NULL, *rv = NULL, *bits1 = NULL, *bits2 = NULL;
    float *want = NULL, *low = NULL, *got = NULL, *vv = NULL;
    /* inputs: f32 on the reference device, rounded to dt there */
    td_tensor *q32 = host_f32(ref, 4, dq, &hq), *k32 = host_f32(ref, rkv, dkv, &hk),
              *v32 = host_f32(ref, rkv, dkv, &hv);
    td_tensor *qh = td_cast(q32, dt), *kh = td_cast(k32, dt), *vh = td_cast(v32, dt);
    const size_t bq = (size_t)nq * 2, bkv = (size_t)nkv * 2;
    rq = read_raw(qh, bq, ref);
    rk = read_raw(kh, bkv, ref);
    rv = read_raw(vh, bkv, ref);
    if (rq == NULL || rk == NULL || rv == NULL) goto done;
    if (g_bits_only) {
        td_tensor *bq_ = td_from_host(dev, dt, 4, dq, rq),
                  *bk_ = td_from_host(dev, dt, rkv, dkv, rk),
                  *bv_ = td_from_host(dev, dt, rkv, dkv, rv);
        td_tensor *yb = td_scaled_dot_product_attention(bq_, bk_, bv_, NULL, c->causal != 0, sc);
        bits1 = yb ? read_raw(yb, (size_t)nq * 2, dev) : NULL;
        if (bits1 != NULL)
            printf("bits %-4s q [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "] S %-5" PRId64
                   " %s%s scale %.4g: %016" PRIx64 "\n",
                   dtn, c->b, c->h, c->l, c->e, c->s, c->causal ? "causal" : "full  ",
                   c->kv_bcast ? " kv-bcast" : "", sc, fnv1a(bits1, (size_t)nq * 2));
        else
            fprintf(stderr, "attn-check: op failed: %s\n", td_last_error(dev));
        fail = bits1 == NULL;
        td_release(bq_), td_release(bk_), td_release(bv_), td_release(yb);
        goto done;
    }
    vv = read_f32(vh, nkv, ref);
    /* reference: f32 on the widened inputs */
    td_tensor *qw = td_cast(qh, TD_F32), *kw = td_cast(kh, TD_F32), *vw = td_cast(vh, TD_F32);
    td_tensor *yr = td_scaled_dot_product_attention(qw, kw, vw, NULL, c->causal != 0, sc_r);
    const int64_t ny = nq;
    want = yr ? read_f32(yr, ny, ref) : NULL;
    /* the reference device's own dtype result (the lowering there) */
    td_tensor *yl = td_scaled_dot_product_attention(qh, kh, vh, NULL, c->causal != 0, sc);
    low = yl ? read_f32(yl, ny, ref) : NULL;
    td_release(qw), td_release(kw), td_release(vw), td_release(yr), td_release(yl);
    if (want == NULL || low == NULL || vv == NULL) goto done;
    /* the device under test, twice */
    td_tensor *dq_ = td_from_host(dev, dt, 4, dq, rq), *dk_ = td_from_host(dev, dt, rkv, dkv, rk),
              *dv_ = td_from_host(dev, dt, rkv, dkv, rv);
    td_tensor *y1 = td_scaled_dot_product_attention(dq_, dk_, dv_, NULL, c->causal != 0, sc);
    td_tensor *y2 = td_scaled_dot_product_attention(dq_, dk_, dv_, NULL, c->causal != 0, sc);
    if (y1 != NULL && y2 != NULL) {
        bits1 = read_raw(y1, (size_t)ny * 2, dev);
        bits2 = read_raw(y2, (size_t)ny * 2, dev);
        got = read_f32(y1, ny, dev);
    } else {
        fprintf(stderr, "attn-check: op failed: %s\n", td_last_error(dev));
    }
    td_release(dq_), td_release(dk_), td_release(dv_), td_release(y1), td_release(y2);
    if (got == NULL || bits1 == NULL || bits2 == NULL) goto done;
    double maxv = 0;
    for (int64_t i = 0; i < nkv; i++)
        if (fabs(vv[i]) > maxv) maxv = fabs(vv[i]);
    double worst = 0, worst_low = 0, worst_frac = 0;
    int64_t wi = 0, first_bad = -1, nans = 0, nbad = 0;
    for (int64_t i = 0; i < ny; i++) {
        const double w = want[i], g = got[i];
        if (isnan(g) != isnan(w)) {
            nans++;
            if (first_bad < 0) first_bad = i;
            continue;
        }
        const double d = fabs(g - w), tol = 4 * u * maxv + u * fabs(w);
        if (d > worst) {
            worst = d;
            wi = i;
        }
        if (d / tol > worst_frac) worst_frac = d / tol;
        if (d > tol) {
            nbad++;
            if (first_bad < 0) first_bad = i;
        }
        if (fabs((double)low[i] - w) > worst_low) worst_low = fabs((double)low[i] - w);
    }
    const bool same = memcmp(bits1, bits2, (size_t)ny * 2) == 0;
    fail = nbad > 0 || nans > 0 || !same;
    const int64_t row = (wi / c->e) % c->l, col = wi % c->e, bh = wi / (c->e * c->l);
    printf("%s %-4s q [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "] S %-5" PRId64
           " %s%s scale %.4g: max|err| %.3g at [bh %" PRId64 ", row %" PRId64 ", col %" PRId64
           "] (got %.6g want %.6g), %.3g of bound 4u max|v|+u|y| (max|v| %.3g); cpu %s "
           "lowering max|err| %.3g; bad %" PRId64 ", NaN mismatches %" PRId64 ", runs %s\n",
           fail ? "FAIL" : "ok  ", dtn, c->b, c->h, c->l, c->e, c->s,
           c->causal ? "causal" : "full  ", c->kv_bcast ? " kv-bcast" : "", sc, worst, bh, row,
           col, (double)got[wi], (double)want[wi], worst_frac, maxv, dtn, worst_low, nbad, nans,
           same ? "bit-identical" : "DIFFER");
    if (first_bad >= 0)
        printf("     first mismatch: element %" PRId64 " [bh %" PRId64 ", row %" PRId64
               ", col %" PRId64 "]: got %.8g want %.8g\n",
               first_bad, first_bad / (c->e * c->l), (first_bad / c->e) % c->l,
               first_bad % c->e, (double)got[first_bad], (double)want[first_bad]);
done:
    td_release(q32), td_release(k32), td_release(v32);
    td_release(qh), td_release(kh), td_release(vh);
    free(hq), free(hk), free(hv), free(rq), free(rk), free(rv), free(bits1), free(bits2);
    free(want), free(low), free(got), free(vv);
    return fail;
}

int main(int argc, char **argv)
{
    const char *dev_uri = "local:cuda:0", *ref_uri = "local:cpu";
    int64_t max_ls = INT64_MAX;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--device") == 0 && i + 1 < argc) dev_uri = argv[++i];
        else if (strcmp(argv[i], "--reference") == 0 && i + 1 < argc) ref_uri = argv[++i];
        else if (strcmp(argv[i], "--quick") == 0) max_ls = 300000;
        else if (strcmp(argv[i], "--max-ls") == 0 && i + 1 < argc) max_ls = atoll(argv[++i]);
        else if (strcmp(argv[i], "--bits-only") == 0) g_bits_only = 1;
        else {
            fprintf(stderr, "usage: attn-check [--device URI] [--reference URI] [--quick] "
                            "[--max-ls N] [--bits-only]\n");
            return 2;
        }
    }
    td_context *dev, *ref;
    if (td_connect(dev_uri, NULL, &dev) != TD_OK || td_connect(ref_uri, NULL, &ref) != TD_OK) {
        fprintf(stderr, "attn-check: %s\n", td_connect_error());
        return 1;
    }
    /* tile edges of the kernel (64 or 128 queries a block, 64 keys a tile), causal with
     * L < S and L > S, both head dims, k/v broadcast over the batch, a scale the dtype
     * rounds, negative scales */
    const acase cs[] = {
        {1, 1, 1, 1, 64, 0, 0, 0},        {1, 2, 1, 65, 64, 1, 0, 0},
        {2, 3, 63, 64, 64, 0, 0, 0},      {2, 3, 64, 63, 64, 1, 0, 0},
        {2, 3, 65, 65, 64, 1, 0, 0},      {1, 2, 129, 127, 64, 0, 0.3, 0},
        {2, 2, 200, 1000, 64, 1, 0, 0},   {2, 2, 1000, 200, 64, 1, 0, 0},
        {1, 2, 1000, 1000, 64, 0, 0, 0},  {2, 3, 1, 1, 128, 1, 0, 0},
        {2, 3, 63, 65, 128, 0, 0, 0},     {2, 3, 65, 63, 128, 1, 0.3, 0},
        {1, 2, 200, 1000, 128, 1, 0, 0},  {1, 2, 1000, 1000, 128, 0, 0, 0},
        {3, 4, 100, 300, 64, 0, 0, 1},    {2, 4, 130, 70, 128, 1, 0, 1},
        {1, 4, 2048, 2048, 64, 1, 0, 0},  {1, 2, 2048, 2048, 128, 0, 0, 0},
        {2, 3, 65, 130, 64, 1, -0.2, 0},  {1, 2, 70, 64, 128, 0, -0.3, 0},
    };
    const size_t n = sizeof cs / sizeof cs[0];
    size_t run = 0, failed = 0;
    for (int d = 0; d < 2; d++)
        for (size_t i = 0; i < n; i++) {
            if (cs[i].l * cs[i].s > max_ls) continue;
            failed += (size_t)run_case(dev, ref, &cs[i], d ? TD_F16 : TD_BF16, d ? "f16" : "bf16");
            run++;
            fflush(stdout);
        }
    printf("attn-check: %zu cases, %zu failed (%s vs %s)\n", run, failed, dev_uri, ref_uri);
    td_close(dev);
    td_close(ref);
    return failed ? 1 : 0;
}

/* attn_check.c — the CUDA backend's fused f16/bf16 attention (backends/gpu/gpu_attention.cu)
 * against an f32 reference, and its f32 attention (backends/gpu/gpu_attention_f32.cu)
 * against an f64 one, with the numbers a first GPU run needs to find a bug: per case
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
 * f32: the f32 inputs widened to f64 and run on the reference device in f64, the scale
 * rounded to f32 (as both the lowering and the kernel use it); the bound is the op table's
 * ATTENTION bound itself (16 ulp + (4 E |scale| max|q| max|k| + 4 S + 8) u max|v|, u =
 * 2^-24, tests/unit/backends/conformance.c), held by the kernel alone; the "cpu f32"
 * column is the reference device's own f32 error. The f32 list adds NaN and infinity in
 * the inputs (NaN mismatches fail) and a scale of 0.
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

/* f32-only cases: special 1 NaN and infinities in the inputs (host_f32), 2 scale 0 */
typedef struct acase32 {
    acase c;
    int special;
} acase32;

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

/* special (f32 cases): which (matrix 0) elements become what: q row 2 gets a NaN (that
 * row is NaN); k key 5 gets +inf in column 1 (the score is +inf where q's column 1 is
 * positive: those rows are NaN, inf - inf; -inf elsewhere: weight 0) and key 9 -inf in
 * column 0 (likewise, signs swapped); v key 3 gets a NaN in column 2 (column 2 of every row
 * that weighs key 3 is NaN; with causal masking not set). */
enum { SPECIAL_NONE, SPECIAL_Q, SPECIAL_K, SPECIAL_V };

static td_tensor *host_f32(td_context *ctx, int rank, const int64_t *d, float **keep,
                           int special)
{
    int64_t n = 1;
    for (int i = 0; i < rank; i++) n *= d[i];
    float *x = malloc((size_t)(n ? n : 1) * sizeof *x);
    for (int64_t i = 0; i < n; i++) x[i] = gen();
    const int64_t e = d[rank - 1], rows = d[rank - 2];
    if (special == SPECIAL_Q && rows > 2) x[2 * e] = NAN;
    if (special == SPECIAL_K && rows > 9) x[5 * e + 1] = INFINITY, x[9 * e] = -INFINITY;
    if (special == SPECIAL_V && rows > 3) x[3 * e + 2] = NAN;
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

/* the tensor's elements as f64 */
static double *read_f64(td_tensor *t, int64_t n, td_context *ctx)
{
    td_tensor *w = td_cast(t, TD_F64);
    double *y = malloc((size_t)(n ? n : 1) * sizeof *y);
    if (w == NULL || td_read(w, y, (size_t)n * sizeof *y) != TD_OK) {
        fprintf(stderr, "attn-check: read failed: %s\n", td_last_error(ctx));
        free(y);
        y = NULL;
    }
    td_release(w);
    return y;
}

static double max_abs_finite(const float *x, int64_t n)
{
    double m = 0;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(x[i]) && fabs(x[i]) > m) m = fabs(x[i]);
    return m;
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

static int run_case(td_context *dev, td_context *ref, const acase *c, int special,
                    td_dtype dt, const char *dtn)
{
    const int64_t dq[4] = {c->b, c->h, c->l, c->e};
    const int64_t dkv4[4] = {c->b, c->h, c->s, c->e};
    const int64_t *dkv = c->kv_bcast ? dkv4 + 1 : dkv4;
    const int rkv = c->kv_bcast ? 3 : 4;
    const int64_t nq = c->b * c->h * c->l * c->e;
    const int64_t nkv = (c->kv_bcast ? 1 : c->b) * c->h * c->s * c->e;
    const bool f32 = dt == TD_F32;
    const double sc = special == 2 ? 0.0 : c->scale != 0 ? c->scale : 1.0 / sqrt((double)c->e);
    const double sc_r = f32               ? (double)(float)sc
                        : dt == TD_BF16 ? td__bf16_to_f32(td__f64_to_bf16(sc))
                                        : td__f16_to_f32(td__f64_to_f16(sc));
    const double u = f32 ? 0x1p-24 : dt == TD_BF16 ? 0x1p-8 : 0x1p-11;
    const size_t esz = f32 ? 4 : 2;
    const int sp = f32 && special == 1;
    float *hq, *hk, *hv;
    int fail = 1;
    void *rq = NULL, *rk = NULL, *rv = NULL, *bits1 = NULL, *bits2 = NULL;
    double *want = NULL;
    float *low = NULL, *got = NULL, *vv = NULL;
    /* inputs: f32 on the reference device, rounded to dt there */
    td_tensor *q32 = host_f32(ref, 4, dq, &hq, sp ? SPECIAL_Q : SPECIAL_NONE),
              *k32 = host_f32(ref, rkv, dkv, &hk, sp ? SPECIAL_K : SPECIAL_NONE),
              *v32 = host_f32(ref, rkv, dkv, &hv, sp && !c->causal ? SPECIAL_V : SPECIAL_NONE);
    td_tensor *qh = td_cast(q32, dt), *kh = td_cast(k32, dt), *vh = td_cast(v32, dt);
    const size_t bq = (size_t)nq * esz, bkv = (size_t)nkv * esz;
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
    /* reference: f32 (f64 for f32) on the widened inputs */
    const td_dtype wide = f32 ? TD_F64 : TD_F32;
    td_tensor *qw = td_cast(qh, wide), *kw = td_cast(kh, wide), *vw = td_cast(vh, wide);
    td_tensor *yr = td_scaled_dot_product_attention(qw, kw, vw, NULL, c->causal != 0, sc_r);
    const int64_t ny = nq;
    want = yr ? read_f64(yr, ny, ref) : NULL;
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
        bits1 = read_raw(y1, (size_t)ny * esz, dev);
        bits2 = read_raw(y2, (size_t)ny * esz, dev);
        got = read_f32(y1, ny, dev);
    } else {
        fprintf(stderr, "attn-check: op failed: %s\n", td_last_error(dev));
    }
    td_release(dq_), td_release(dk_), td_release(dv_), td_release(y1), td_release(y2);
    if (got == NULL || bits1 == NULL || bits2 == NULL) goto done;
    const double maxv = max_abs_finite(vv, nkv);
    /* f32: the op table's ATTENTION bound; its ulp term as conformance.c's (2^-23 |w| at
     * least 2^-149) */
    const double attn_c = (4.0 * (double)c->e * fabs(sc_r) * max_abs_finite(hq, nq) *
                               max_abs_finite(hk, nkv) +
                           4.0 * (double)c->s + 8.0) *
                          u * maxv;
    double worst = 0, worst_low = 0, worst_frac = 0;
    int64_t wi = 0, first_bad = -1, nans = 0, nbad = 0;
    for (int64_t i = 0; i < ny; i++) {
        const double w = want[i], g = got[i];
        if (isnan(g) != isnan(w)) {
            nans++;
            if (first_bad < 0) first_bad = i;
            continue;
        }
        const double d = fabs(g - w),
                     tol = f32 ? 16 * fmax(fabs(w) * 0x1p-23, 0x1p-149) + attn_c
                               : 4 * u * maxv + u * fabs(w);
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
    const bool same = memcmp(bits1, bits2, (size_t)ny * esz) == 0;
    fail = nbad > 0 || nans > 0 || !same;
    const int64_t row = (wi / c->e) % c->l, col = wi % c->e, bh = wi / (c->e * c->l);
    printf("%s %-4s q [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "] S %-5" PRId64
           " %s%s%s scale %.4g: max|err| %.3g at [bh %" PRId64 ", row %" PRId64 ", col %" PRId64
           "] (got %.6g want %.6g), %.3g of bound %s (max|v| %.3g); cpu %s "
           "%s max|err| %.3g; bad %" PRId64 ", NaN mismatches %" PRId64 ", runs %s\n",
           fail ? "FAIL" : "ok  ", dtn, c->b, c->h, c->l, c->e, c->s,
           c->causal ? "causal" : "full  ", c->kv_bcast ? " kv-bcast" : "",
           sp ? " nan-inf" : "", sc, worst, bh, row, col, (double)got[wi], want[wi], worst_frac,
           f32 ? "ATTENTION" : "4u max|v|+u|y|", maxv, dtn, f32 ? "native" : "lowering",
           worst_low, nbad, nans, same ? "bit-identical" : "DIFFER");
    if (first_bad >= 0)
        printf("     first mismatch: element %" PRId64 " [bh %" PRId64 ", row %" PRId64
               ", col %" PRId64 "]: got %.8g want %.8g\n",
               first_bad, first_bad / (c->e * c->l), (first_bad / c->e) % c->l,
               first_bad % c->e, (double)got[first_bad], want[first_bad]);
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
    /* f32 (gpu_attention_f32.cu: 64 or 128 queries a block, 32 or 64 keys a tile): the
     * list above, then NaN and infinities in the inputs, scale 0, a tail of 1 key */
    const acase32 cs32[] = {
        {{2, 3, 100, 77, 64, 0, 0, 0}, 1},   {{2, 3, 77, 100, 64, 1, 0, 0}, 1},
        {{1, 2, 130, 70, 128, 0, 0, 0}, 1},  {{1, 2, 70, 130, 128, 1, 0, 0}, 1},
        {{2, 2, 65, 33, 64, 0, 0, 0}, 2},    {{1, 2, 65, 33, 128, 1, 0, 0}, 2},
        {{2, 3, 129, 129, 64, 1, 0.05, 0}, 0}, {{2, 3, 129, 97, 128, 0, 0.05, 1}, 0},
        {{1, 2, 2048, 2048, 64, 0, 0, 0}, 0},
    };
    const size_t n = sizeof cs / sizeof cs[0], n32 = sizeof cs32 / sizeof cs32[0];
    size_t run = 0, failed = 0;
    for (int d = 0; d < 3; d++)
        for (size_t i = 0; i < n + (d == 2 ? n32 : 0); i++) {
            const acase *c = i < n ? &cs[i] : &cs32[i - n].c;
            if (c->l * c->s > max_ls) continue;
            static const td_dtype dts[3] = {TD_BF16, TD_F16, TD_F32};
            static const char *const dtns[3] = {"bf16", "f16", "f32"};
            failed += (size_t)run_case(dev, ref, c, i < n ? 0 : cs32[i - n].special, dts[d],
                                       dtns[d]);
            run++;
            fflush(stdout);
        }
    printf("attn-check: %zu cases, %zu failed (%s vs %s)\n", run, failed, dev_uri, ref_uri);
    td_close(dev);
    td_close(ref);
    return failed ? 1 : 0;
}

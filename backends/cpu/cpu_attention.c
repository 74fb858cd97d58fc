/* cpu_attention.c — SCALED_DOT_PRODUCT_ATTENTION (f32, f64) without the [L, S] score matrix:
 * the online softmax of Milakov & Gimelshein ("Online normalizer calculation for softmax",
 * 2018) over blocks of keys, as FlashAttention (Dao et al., 2022) arranges it, with the
 * OpenBLAS GEMM of cpu_matmul.c for both products.
 *
 * A unit is (batch, block of QB queries). For each block of KB keys, in order: s = q k^T by
 * one single-threaded GEMM, times scale (rounded to T, as the lowering's MUL), the causal
 * and mask rules applied (-inf, or + the float mask); the running row maximum m and the
 * weights p = exp(s - m) (f32: exp_weight below, vectorised; f64: libm), with the running
 * sum z (double) and the output accumulator rescaled by exp(m_old - m) when the maximum
 * grows; then acc += p v (GEMM, beta 1). At the end y = acc / z. Block sizes are constants, so a result depends on
 * the shapes and the data, never on the thread count. Against the lowering (one softmax over
 * the whole row), only the order of the sums and the rescaling differ: the op table's
 * ATTENTION accuracy bounds the difference (tests/unit/backends/conformance.c).
 *
 * A row whose scores are all -inf gives NaN, as the lowering's softmax does (0 / 0); so does
 * any NaN score in a row. With causal, key blocks after a query block's last row are skipped
 * (their weights are exactly 0).
 */
#include "backends/cpu/cpu_internal.h"
#include "common/alloc.h"
#include <stdio.h>
#include <cblas.h>
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#define TD_CAT2(a, b) a##b
#define TD_CAT(a, b) TD_CAT2(a, b)

/* Queries and keys per block (fixed: they decide the order of the sums). */
#define QB ((int64_t)64)
#define KB ((int64_t)256)

typedef struct attn_ctx {
    const void *q, *k, *v, *mask;
    void *y;
    bool mask_bool, causal;
    double scale;
    int64_t l, s, e, ev, qblocks;
    int64_t mrow, mcol; /* the mask's strides along L and S (0 where it broadcasts) */
    uint32_t nb;        /* output batch rank */
    int64_t bdims[TD_MAX_RANK];
    int64_t bstride[4][TD_MAX_RANK]; /* q k v mask: element stride per output batch dim */
    atomic_bool failed;
} attn_ctx;

/* Element offsets of batch bi's q, k, v and mask matrices. */
static void attn_offsets(const attn_ctx *a, int64_t bi, int64_t off[4])
{
    off[0] = off[1] = off[2] = off[3] = 0;
    for (uint32_t d = a->nb; d-- > 0;) {
        const int64_t i = bi % a->bdims[d];
        bi /= a->bdims[d];
        for (int t = 0; t < 4; t++) off[t] += i * a->bstride[t][d];
    }
}

/* Strides of `in`'s batch dims (all but the last two) aligned right with the output's nb
 * batch dims; 0 where in has no dim or size 1. `mat` is the elements of one matrix. */
static void batch_strides(const td__desc *in, uint32_t nb, int64_t mat, int64_t *st)
{
    const uint32_t ib = in->rank - 2;
    int64_t stride = mat;
    for (uint32_t d = nb; d-- > 0;) {
        st[d] = 0;
        const int64_t di = (int64_t)d - (int64_t)(nb - ib);
        if (di < 0) continue;
        if (in->dims[di] != 1) st[d] = stride;
        stride *= in->dims[di];
    }
}

/* ---- f32 rows: the scores' pass and the weights' pass, vectorised ----
 * Both passes keep LANES running values (maximum, sum) per row, lane l taking columns
 * c = l mod LANES, combined in lane order at the end: an order fixed by the code, the same in
 * the generic, AVX2 and AVX-512 copies (GCC vectorises the lane loops; -std=c11 keeps
 * a * b + c unfused, so the copies give identical bits; tests/unit/backends/cpu_attention.c
 * checks it). exp_weight is exp(x) for x <= 0 by Cody and Waite's reduction x = k ln 2 + r,
 * |r| <= ln 2 / 2 (ln 2 split in two parts so k ln2_hi is exact), and the degree-7 Taylor
 * polynomial of e^r (truncation below 2^-27 relative), scaled by 2^k through the exponent
 * bits; within 2 ulp of expf, and 0 below -87 (where e^x < 2^-125: such a weight is below
 * f32's resolution of the row's largest weight, 1). */
#define LANES 16

static inline __attribute__((always_inline)) float exp_weight(float x)
{
    const float k = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    const float r = (x - k * 0.693145751953125f) - k * 1.42860682030941723212e-6f;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    int32_t e = ((int32_t)k + 127) * (1 << 23);
    float two_k;
    memcpy(&two_k, &e, sizeof two_k);
    return p * two_k;
}

/* exp_weight of x in [-87, 0], 0 below, NaN for NaN (the reduction sees only finite x) */
static inline __attribute__((always_inline)) float weight_of(float x)
{
    const float w = exp_weight(x >= -87.0f ? x : -87.0f);
    return x >= -87.0f ? w : (x != x ? x : 0.0f);
}

/* Score c of a row: row[c] * scale (+ mf[c]; mb[c] == 0 -> -inf; c >= lim -> -inf), stored
 * in place and folded into lane l's maximum and NaN flag. */
static inline __attribute__((always_inline)) void score_at(float *row, int64_t c, int64_t lim,
                                                           float scale, const uint8_t *mb,
                                                           const float *mf, float *pm,
                                                           int32_t *pn, int l)
{
    float v = row[c] * scale;
    if (mf != NULL) v = v + mf[c];
    if (mb != NULL) v = mb[c] != 0 ? v : -INFINITY;
    v = c < lim ? v : -INFINITY;
    row[c] = v;
    pm[l] = v > pm[l] ? v : pm[l];
    pn[l] |= v != v;
}

/* Scores of one row (score_at for c in [0, n)); returns their maximum and sets *nan when one
 * is NaN. mb/mf NULL: no mask (a mask that broadcasts along the row is applied by the
 * caller). */
static inline __attribute__((always_inline)) float scores_body(float *row, int64_t n,
                                                               int64_t lim, float scale,
                                                               const uint8_t *mb,
                                                               const float *mf, bool *nan)
{
    float pm[LANES];
    int32_t pn[LANES];
    for (int l = 0; l < LANES; l++) {
        pm[l] = -INFINITY;
        pn[l] = 0;
    }
    int64_t c0 = 0;
    for (; c0 + LANES <= n; c0 += LANES)
        for (int l = 0; l < LANES; l++) score_at(row, c0 + l, lim, scale, mb, mf, pm, pn, l);
    for (int64_t c = c0; c < n; c++) score_at(row, c, lim, scale, mb, mf, pm, pn, (int)(c - c0));
    float m = -INFINITY;
    for (int l = 0; l < LANES; l++) {
        m = pm[l] > m ? pm[l] : m;
        if (pn[l]) *nan = true;
    }
    return m;
}

/* Weights of one row: row[c] = exp(row[c] - m), in place; returns their sum (lane sums in
 * f32, combined in double). */
static inline __attribute__((always_inline)) double weights_body(float *row, int64_t n, float m)
{
    float ps[LANES] = {0};
    int64_t c0 = 0;
    for (; c0 + LANES <= n; c0 += LANES)
        for (int l = 0; l < LANES; l++) {
            const float p = weight_of(row[c0 + l] - m);
            row[c0 + l] = p;
            ps[l] += p;
        }
    for (int64_t c = c0; c < n; c++) {
        const float p = weight_of(row[c] - m);
        row[c] = p;
        ps[c - c0] += p;
    }
    double z = 0;
    for (int l = 0; l < LANES; l++) z += ps[l];
    return z;
}

typedef struct attn_isa {
    float (*scores)(float *, int64_t, int64_t, float, const uint8_t *, const float *, bool *);
    double (*weights)(float *, int64_t, float);
} attn_isa;

#define ATTN_ROWS(SFX, ATTR)                                                                   \
    ATTR static float scores_##SFX(float *row, int64_t n, int64_t lim, float scale,            \
                                   const uint8_t *mb, const float *mf, bool *nan)              \
    {                                                                                          \
        return scores_body(row, n, lim, scale, mb, mf, nan);                                   \
    }                                                                                          \
    ATTR static double weights_##SFX(float *row, int64_t n, float m)                           \
    {                                                                                          \
        return weights_body(row, n, m);                                                        \
    }                                                                                          \
    static const attn_isa attn_isa_##SFX = {scores_##SFX, weights_##SFX};

ATTN_ROWS(generic, )
#if defined(__x86_64__)
ATTN_ROWS(avx2, __attribute__((target("avx2"))))
#if defined(__clang__)
ATTN_ROWS(avx512, __attribute__((target("avx512f,avx512bw,avx512vl"))))
#else
ATTN_ROWS(avx512, __attribute__((target("avx512f,avx512bw,avx512vl,prefer-vector-width=512"))))
#endif
#endif

static td__cpu_isa_choice attn_choice;

static const attn_isa *attn_rows(void)
{
    static const attn_isa *const copies[TD_CPU_ISA_COUNT] = {
        &attn_isa_generic,
#if defined(__x86_64__)
        &attn_isa_avx2, &attn_isa_avx512,
#endif
    };
    const attn_isa *k = copies[td__cpu_isa_pick(&attn_choice)];
    return k != NULL ? k : &attn_isa_generic;
}

bool td__cpu_attention_force_isa(const char *name) { return td__cpu_isa_force(&attn_choice, name); }

/* f64 rows: the plain loops (libm's exp; no vector copies). */
static double scores_f64(double *row, int64_t n, int64_t lim, double scale, const uint8_t *mb,
                         const double *mf, bool *nan)
{
    double m = -INFINITY;
    for (int64_t c = 0; c < n; c++) {
        double v = row[c] * scale;
        if (mf != NULL) v = v + mf[c];
        if (mb != NULL) v = mb[c] != 0 ? v : -INFINITY;
        v = c < lim ? v : -INFINITY;
        row[c] = v;
        m = v > m ? v : m;
        if (v != v) *nan = true;
    }
    return m;
}

static double weights_f64(double *row, int64_t n, double m)
{
    double z = 0;
    for (int64_t c = 0; c < n; c++) {
        row[c] = exp(row[c] - m);
        z += row[c];
    }
    return z;
}

#define T float
#define GEMM cblas_sgemm
#define ROWS_SETUP const attn_isa *isa = attn_rows();
#define SCORES(...) isa->scores(__VA_ARGS__)
#define WEIGHTS(...) isa->weights(__VA_ARGS__)
#define SUF _f32
#include "backends/cpu/cpu_attention_impl.h"
#undef T
#undef GEMM
#undef ROWS_SETUP
#undef SCORES
#undef WEIGHTS
#undef SUF
#define T double
#define GEMM cblas_dgemm
#define ROWS_SETUP
#define SCORES(...) scores_f64(__VA_ARGS__)
#define WEIGHTS(...) weights_f64(__VA_ARGS__)
#define SUF _f64
#include "backends/cpu/cpu_attention_impl.h"
#undef T
#undef GEMM
#undef ROWS_SETUP
#undef SCORES
#undef WEIGHTS
#undef SUF

bool td__cpu_attention_supports(const td__desc *const *in, const td__desc *out)
{
    const uint32_t dt = in[0]->dtype;
    if (dt != TD_F32 && dt != TD_F64) return false;
    const td__desc *q = in[0], *v = in[2];
    const int64_t e = q->dims[q->rank - 1], ev = v->dims[v->rank - 1];
    int64_t n = 1;
    for (uint32_t i = 0; i < out->rank; i++) n *= out->dims[i];
    /* an empty result needs no GEMM, whatever the dims (the kernel returns at once) */
    return n == 0 || (e <= INT32_MAX && ev <= INT32_MAX);
}

td_status td__cpu_exec_attention(const td__cpu_exec *x, const td__op *op, const td__view *in,
                                 const td__view *out)
{
    attn_ctx a;
    memset(&a, 0, sizeof a);
    atomic_init(&a.failed, false);
    const td__desc *q = &in[0].desc, *k = &in[1].desc, *v = &in[2].desc, *o = &out->desc;
    a.q = in[0].data;
    a.k = in[1].data;
    a.v = in[2].data;
    a.y = out->data;
    a.l = q->dims[q->rank - 2];
    a.e = q->dims[q->rank - 1];
    a.s = k->dims[k->rank - 2];
    a.ev = v->dims[v->rank - 1];
    a.causal = op->iattrs[0] != 0;
    a.scale = op->fattrs[0];
    a.nb = o->rank - 2;
    for (uint32_t d = 0; d < a.nb; d++) a.bdims[d] = o->dims[d];
    batch_strides(q, a.nb, a.l * a.e, a.bstride[0]);
    batch_strides(k, a.nb, a.s * a.e, a.bstride[1]);
    batch_strides(v, a.nb, a.s * a.ev, a.bstride[2]);
    if (op->n_inputs > 3) {
        const td__desc *m = &in[3].desc;
        const int64_t ml = m->dims[m->rank - 2], ms = m->dims[m->rank - 1];
        a.mask = in[3].data;
        a.mask_bool = m->dtype == TD_BOOL;
        a.mcol = ms == 1 ? 0 : 1;
        a.mrow = ml == 1 ? 0 : ms;
        batch_strides(m, a.nb, ml * ms, a.bstride[3]);
    }
    int64_t nbatch = 1;
    for (uint32_t d = 0; d < a.nb; d++) nbatch *= a.bdims[d];
    a.qblocks = (a.l + QB - 1) / QB;
    if (nbatch == 0 || a.qblocks == 0 || a.ev == 0) return TD_OK;
    if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
    const int64_t cost = QB * a.s * (a.e + a.ev + 8);
    td__cpu_run(x, nbatch * a.qblocks, cost,
                q->dtype == TD_F64 ? attn_units_f64 : attn_units_f32, &a);
    if (atomic_load(&a.failed))
        return td__cpu_fail(x, TD_ENOMEM, "%s: no memory for a block of scores",
                            td__op_name(op->opcode));
    return TD_OK;
}

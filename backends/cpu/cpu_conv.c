/* cpu_conv.c — CONV, CONV_TRANSPOSE and CONV_WEIGHT_GRAD (engine/window.h) by im2col and
 * the OpenBLAS GEMM that cpu_matmul.c uses, under the same rule: every GEMM is one
 * single-threaded cblas_?gemm over its whole inner dim, on a block whose size is a function
 * of the shapes alone, and the CPU device's pool runs the blocks. So a result depends on the
 * shapes and the data, never on the thread count or the timing (checked by
 * tests/unit/backends/cpu_threads.c's pattern in tests/unit/backends/cpu_conv.c).
 *
 * CONV (cross-correlation, as PyTorch's conv*d): for image n and group g, y_g = W_g x col,
 * W_g the [Cout/g, C/g * k] rows of the weight, col the im2col matrix [C/g * k, P] (P output
 * positions), cut into column tiles of TILE_ELEMS / (C/g k) positions (a multiple of 16);
 * one GEMM per (n, g, tile). A 1 x 1 kernel with stride 1 and no padding reads x itself
 * (its im2col is x). The bias is added to each GEMM result.
 * CONV_TRANSPOSE: per (n, g), col = W_g^T x x_g (W_g the group's [C/g, Cout/g * k] rows),
 * then col2im adds every col element into its output position — the exact adjoint of
 * im2col, so conv_transpose(dy, w) is conv's input gradient — in a fixed order (input
 * column tiles in order, then col rows, then columns); then the bias.
 * CONV_WEIGHT_GRAD: per (g, tile of the [Cout/g, C/g * k] gradient's columns), over the
 * batch in order, dw_g[:, tile] += dy_g[n] x col_tile^T: one GEMM per image, accumulated
 * with beta = 1 in image order (fixed-order reduction, no atomics).
 *
 * f32 uses sgemm, f64 dgemm. f16/bf16: inputs widened to f32 (exact), the f32 path, every
 * output rounded once to the dtype (f32 accumulation; the bias is added in f32).
 *
 * In builds that found oneDNN (TD_HAVE_DNNL, the default where libdnnl-dev is installed),
 * f32 CONV and CONV_TRANSPOSE with a batch of 4 or more go to cpu_dnnl_conv.c first; what it
 * does not take comes here.
 */
#include "backends/cpu/cpu_dnnl.h"
#include "backends/cpu/cpu_internal.h"
#include "common/alloc.h"
#include "engine/window.h"
#include <cblas.h>
#include <stdatomic.h>
#include <string.h>

#define TD_CAT2(a, b) a##b
#define TD_CAT(a, b) TD_CAT2(a, b)

/* Target size (elements) of one im2col block; changing it changes which GEMM computes an
 * element (not its K sum), so keep it fixed like cpu_matmul.c's tiles. */
#define TILE_ELEMS ((int64_t)1 << 19)

/* A CONV whose whole output plane is narrower than MIN_COLS positions puts several images
 * side by side in one GEMM (a narrow GEMM runs below the core's peak, and one image per
 * GEMM made ResNet's 7 x 7 stage a 49-column product): about MIN_COLS columns, rounded down
 * to a power of two of images (so power-of-two batches split evenly over the threads), with
 * at most MAX_BLOCK_ELEMS im2col elements. The count depends on the shapes alone. */
#define MIN_COLS ((int64_t)256)
#define MAX_BLOCK_ELEMS ((int64_t)1 << 21)

typedef struct conv_ctx {
    td__window w;
    const void *x, *wt, *bias; /* wt: the weight, or CONV_WEIGHT_GRAD's dy */
    void *y;
    int64_t tile, ntiles;
    int64_t imgs; /* CONV: images per GEMM (1, or > 1 with tile == the whole plane) */
    bool direct;  /* CONV with an identity im2col, one image per GEMM */
    atomic_bool failed;
} conv_ctx;

static int64_t floor_div(int64_t a, int64_t b) { return a / b - (a % b != 0 && a < 0); }

/* The columns [jlo, jhi) of a run of im2col columns j in [0, run) whose input position
 * (ow + j) s + b lies in [0, in): an interval, since the position grows with j (s >= 1). */
static void conv_span(int64_t ow, int64_t run, int64_t s, int64_t b, int64_t in, int64_t *jlo,
                      int64_t *jhi)
{
    int64_t lo = -floor_div(b, s) - ow; /* first j with (ow + j) s + b >= 0: ceil(-b / s) - ow */
    int64_t hi = floor_div(in - 1 - b, s) + 1 - ow; /* one past the last j with pos <= in - 1 */
    if (lo < 0) lo = 0;
    if (hi > run) hi = run;
    if (hi < lo) hi = lo;
    *jlo = lo;
    *jhi = hi;
}

#define T float
#define GEMM cblas_sgemm
#define SUF _f32
#include "backends/cpu/cpu_conv_impl.h"
#undef T
#undef GEMM
#undef SUF
#define T double
#define GEMM cblas_dgemm
#define SUF _f64
#include "backends/cpu/cpu_conv_impl.h"
#undef T
#undef GEMM
#undef SUF

/* A tile of `per` elements per position: TILE_ELEMS / per, rounded down to a multiple of
 * 16, at least 16, at most `n`. */
static int64_t tile_of(int64_t per, int64_t n)
{
    int64_t t = per > 0 ? TILE_ELEMS / per : TILE_ELEMS;
    t = t / 16 * 16;
    if (t < 16) t = 16;
    if (t > n) t = n;
    return t > 0 ? t : 1;
}

static bool fits_int(int64_t v) { return v <= INT32_MAX; }

/* a * b * c, saturated at INT64_MAX (a work estimate for td__cpu_run only) */
static int64_t sat3(int64_t a, int64_t b, int64_t c)
{
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r) || __builtin_mul_overflow(r, c, &r)) return INT64_MAX;
    return r;
}

/* Widen a half tensor to a new f32 buffer (NULL on allocation failure). */
static float *widen(uint32_t dt, const void *src, int64_t n)
{
    float *f = td__malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (f != NULL) td__cpu_half_widen(dt, src, f, n);
    return f;
}

td_status td__cpu_exec_conv(const td__cpu_exec *x, const td__op *op, const td__view *in,
                            const td__view *out)
{
    const uint32_t dt = out->desc.dtype;
#if defined(TD_HAVE_DNNL)
    td_status dst;
    if (td__dnnl_conv(x, op, in, out, &dst)) return dst;
#endif
    conv_ctx cx;
    memset(&cx, 0, sizeof cx);
    atomic_init(&cx.failed, false);
    td__window *w = &cx.w;
    td__window_decode(op, &in[0].desc, &in[1].desc, &out->desc, w);
    const int64_t g = w->groups, cg = w->c / g, cog = w->co / g, kk = td__window_prod(w->k);
    const int64_t kg = cg * kk, L = td__window_prod(w->in), P = td__window_prod(w->out);
    /* BLAS takes int dims and leading dims */
    if (!fits_int(kg) || !fits_int(P) || !fits_int(L) || !fits_int(cog * kk) || !fits_int(cog))
        return td__cpu_fail(x, TD_EUNSUPPORTED,
                            "%s: a GEMM dim (C/g k = %lld, positions %lld or %lld) exceeds "
                            "BLAS's int range",
                            td__op_name(op->opcode), (long long)kg, (long long)P, (long long)L);
    const int64_t n_out = td__cpu_nelem(&out->desc);
    const bool half = td__dtype_is_half(dt);
    float *hx = NULL, *hw = NULL, *hb = NULL, *hy = NULL;
    td_status st = TD_OK;
    const bool has_bias = op->n_inputs == 3;
    if (half) {
        hx = widen(dt, in[0].data, td__cpu_nelem(&in[0].desc));
        hw = widen(dt, in[1].data, td__cpu_nelem(&in[1].desc));
        hb = has_bias ? widen(dt, in[2].data, td__cpu_nelem(&in[2].desc)) : NULL;
        hy = td__malloc((size_t)(n_out > 0 ? n_out : 1) * sizeof(float));
        if (hx == NULL || hw == NULL || (has_bias && hb == NULL) || hy == NULL) {
            st = td__cpu_fail(x, TD_ENOMEM, "%s: no memory to widen %s operands",
                              td__op_name(op->opcode), td_dtype_name((td_dtype)dt));
            goto done;
        }
        cx.x = hx;
        cx.wt = hw;
        cx.bias = hb;
        cx.y = hy;
    } else {
        cx.x = in[0].data;
        cx.wt = in[1].data;
        cx.bias = has_bias ? in[2].data : NULL;
        cx.y = out->data;
    }
    const bool dbl = dt == TD_F64;
    if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
    td__cpu_task_fn fn;
    int64_t units, cost;
    switch (op->opcode) {
    case TD_OP_CONV:
        cx.tile = tile_of(kg, P);
        cx.ntiles = P > 0 ? (P + cx.tile - 1) / cx.tile : 0;
        cx.imgs = 1;
        if (cx.tile == P && P > 0 && P < MIN_COLS && w->n > 1) {
            int64_t m = (MIN_COLS + P - 1) / P, cap = MAX_BLOCK_ELEMS / (kg * P > 0 ? kg * P : 1);
            m = m < cap ? m : cap;
            m = m < w->n ? m : w->n;
            cx.imgs = 1;
            while (cx.imgs * 2 <= m) cx.imgs *= 2;
        }
        cx.direct = cx.imgs == 1 && kk == 1 && L == P &&
                    w->stride[0] * w->stride[1] * w->stride[2] == 1 &&
                    w->pad_lo[0] + w->pad_lo[1] + w->pad_lo[2] == 0;
        units = sat3((w->n + cx.imgs - 1) / cx.imgs, g, cx.ntiles);
        cost = sat3(cog, cx.tile * cx.imgs, kg > 0 ? kg : 1);
        fn = dbl ? conv_units_f64 : conv_units_f32;
        break;
    case TD_OP_CONV_TRANSPOSE:
        cx.tile = tile_of(cog * kk, L);
        units = w->n * g;
        cost = sat3(cog * kk, L, cg > 0 ? cg : 1);
        fn = dbl ? convt_units_f64 : convt_units_f32;
        break;
    default: /* TD_OP_CONV_WEIGHT_GRAD */
        cx.tile = tile_of(P, kg);
        cx.ntiles = kg > 0 ? (kg + cx.tile - 1) / cx.tile : 0;
        units = g * cx.ntiles;
        cost = sat3(w->n > 0 ? w->n : 1, cog * cx.tile, P > 0 ? P : 1);
        fn = dbl ? wgrad_units_f64 : wgrad_units_f32;
        break;
    }
    td__cpu_run(x, units, cost, fn, &cx);
    if (atomic_load(&cx.failed)) {
        st = td__cpu_fail(x, TD_ENOMEM, "%s: no memory for an im2col block",
                          td__op_name(op->opcode));
        goto done;
    }
    if (half) td__cpu_half_narrow(dt, hy, out->data, n_out);
done:
    td__free(hx);
    td__free(hw);
    td__free(hb);
    td__free(hy);
    return st;
}

/* cpu_window.c — the POOL family (engine/window.h): MAX_POOL, MAX_POOL_INDICES, AVG_POOL,
 * ADAPTIVE_AVG_POOL, INTERPOLATE and the gradients MAX_POOL_BACKWARD, AVG_POOL_BACKWARD,
 * ADAPTIVE_AVG_POOL_BACKWARD, as direct loops over [N, C] planes, which the CPU device's
 * pool splits into contiguous runs: every element is computed by one fixed loop, so results
 * do not depend on the thread count. The GPU kernels (backends/gpu/gpu_window.cu) run the
 * same loops per element, in the same order, so both give the same sums.
 *
 * What each computes (PyTorch's definitions, torch.nn.functional):
 *  max_pool: the largest element of each window, in-bounds positions only, visited in
 *    row-major window order; a later element replaces the best when it is larger or NaN
 *    (so ties keep the first, and the last NaN wins, as PyTorch's CPU kernel);
 *    max_pool_indices gives that element's flat index in its [*in] plane.
 *  max_pool_backward: dx[i] = sum of dy[j] over the windows j (ascending) that contain i
 *    and whose index is i — a gather, so no two threads add into one element; indices that
 *    name no element of their window contribute nothing.
 *  avg_pool: sum of the in-bounds window / divisor, the divisor the product over dims of the
 *    window clipped to [-pad, L + pad) (count_include_pad 1) or to [0, L) (0).
 *  avg_pool_backward: dx[i] = sum over the windows j that hold i of dy[j] / divisor[j].
 *  adaptive_avg_pool: mean over [floor(j L / O), ceil((j + 1) L / O)) per dim; backward
 *    dx[i] = sum over the windows j that hold i of dy[j] / |window j|.
 *  interpolate: nearest td__nearest_src; linear: source s = j (L - 1) / (O - 1)
 *    (align_corners; 0 when O = 1) or max(0, (j + 0.5) L / O - 0.5), i0 = floor(s), i1 =
 *    i0 + 1 clipped to L - 1, weights 1 - (s - i0) and s - i0, combined dim by dim with the
 *    last dim innermost (PyTorch's UpSampleKernel.cpp order).
 * Sums run in the working type: f32 for f32 (f16/bf16 widened to f32, rounded once), f64
 * for f64.
 */
#include "backends/cpu/cpu_internal.h"
#include "common/alloc.h"
#include "engine/window.h"
#include <math.h>
#include <string.h>

#define TD_CAT2(a, b) a##b
#define TD_CAT(a, b) TD_CAT2(a, b)

typedef struct win_ctx {
    td__window w;
    uint32_t opcode;
    const void *x, *idx;
    bool idx32;
    void *y;
} win_ctx;

#define T float
#define SUF _f32
#include "backends/cpu/cpu_window_impl.h"
#undef T
#undef SUF
#define T double
#define SUF _f64
#include "backends/cpu/cpu_window_impl.h"
#undef T
#undef SUF

/* a * b, saturated at INT64_MAX (a work estimate only) */
static int64_t sat_mul(int64_t a, int64_t b)
{
    int64_t r;
    return __builtin_mul_overflow(a, b, &r) ? INT64_MAX : r;
}

td_status td__cpu_exec_window(const td__cpu_exec *x, const td__op *op, const td__view *in,
                              const td__view *out)
{
    win_ctx cx;
    memset(&cx, 0, sizeof cx);
    td__window_decode(op, &in[0].desc, op->n_inputs > 1 ? &in[1].desc : NULL, &out->desc, &cx.w);
    cx.opcode = op->opcode;
    const uint32_t dt = in[0].desc.dtype;
    const bool half = td__dtype_is_half(dt), dbl = dt == TD_F64;
    const bool idx_out = op->opcode == TD_OP_MAX_POOL_INDICES;
    const int64_t nin = td__cpu_nelem(&in[0].desc), nout = td__cpu_nelem(&out->desc);
    float *hx = NULL, *hy = NULL;
    if (op->opcode == TD_OP_MAX_POOL_BACKWARD) {
        cx.idx = in[1].data;
        cx.idx32 = in[1].desc.dtype == TD_I32;
    }
    if (half) {
        hx = td__malloc((size_t)(nin > 0 ? nin : 1) * sizeof(float));
        hy = idx_out ? NULL : td__malloc((size_t)(nout > 0 ? nout : 1) * sizeof(float));
        if (hx == NULL || (!idx_out && hy == NULL)) {
            td__free(hx);
            td__free(hy);
            return td__cpu_fail(x, TD_ENOMEM, "%s: no memory to widen %s",
                                td__op_name(op->opcode), td_dtype_name((td_dtype)dt));
        }
        td__cpu_half_widen(dt, in[0].data, hx, nin);
        cx.x = hx;
        cx.y = idx_out ? out->data : (void *)hy;
    } else {
        cx.x = in[0].data;
        cx.y = out->data;
    }
    td__cpu_task_fn fn;
    const td__window *w = &cx.w;
    int64_t cost;
    const int64_t IP = td__window_prod(w->in), OP = td__window_prod(w->out);
    const int64_t kk = sat_mul(sat_mul(w->k[0], w->k[1]), w->k[2]);
    switch (op->opcode) {
    case TD_OP_MAX_POOL:
    case TD_OP_MAX_POOL_INDICES: fn = dbl ? maxpool_f64 : maxpool_f32; cost = sat_mul(OP, kk); break;
    case TD_OP_MAX_POOL_BACKWARD: fn = dbl ? maxpool_bwd_f64 : maxpool_bwd_f32; cost = sat_mul(IP, kk); break;
    case TD_OP_AVG_POOL: fn = dbl ? avgpool_f64 : avgpool_f32; cost = sat_mul(OP, kk); break;
    case TD_OP_AVG_POOL_BACKWARD: fn = dbl ? avgpool_bwd_f64 : avgpool_bwd_f32; cost = sat_mul(IP, kk); break;
    case TD_OP_ADAPTIVE_AVG_POOL: fn = dbl ? adaptive_f64 : adaptive_f32; cost = IP + OP; break;
    case TD_OP_ADAPTIVE_AVG_POOL_BACKWARD:
        fn = dbl ? adaptive_bwd_f64 : adaptive_bwd_f32;
        cost = IP + OP;
        break;
    default: fn = dbl ? interp_f64 : interp_f32; cost = OP * 8; break;
    }
    td__cpu_run(x, w->n * w->c, cost, fn, &cx);
    if (half && !idx_out) td__cpu_half_narrow(dt, hy, out->data, nout);
    td__free(hx);
    td__free(hy);
    return TD_OK;
}

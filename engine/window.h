/* window.h — the attributes of the window ops (the CONV and POOL families of
 * engine/optable.h: convolution, transposed convolution, conv's weight gradient, max/avg/
 * adaptive pooling and their gradients, interpolation), decoded once into one struct that
 * the engine's shape rule (engine/window.c) and every backend's kernels read.
 *
 * Layout: tensors are [N, C, *spatial] with 1..3 spatial dims (rank 3..5), row-major
 * (NCW, NCHW, NCDHW). An op's iattrs are its row's scalars, then its lists, each list one
 * entry per spatial dim in order (for conv2d: groups, stride h, stride w, dilation h,
 * dilation w, pad_lo h, pad_lo w, pad_hi h, pad_hi w).
 *
 * Why normalised to three dims: every kernel is written once for [D, H, W]; an op with fewer
 * spatial dims has leading dims of size 1, kernel 1, stride 1, dilation 1, padding 0, which
 * changes no index and no sum. Real spatial dim i of an op with s of them sits at slot
 * 3 - s + i.
 *
 * Static inline and C/C++-neutral because the loadable backend modules (the GPU ones compile
 * it as CUDA/HIP C++) may not call engine symbols. Thread-safety: pure functions, any thread.
 */
#ifndef TD_ENGINE_WINDOW_H
#define TD_ENGINE_WINDOW_H

#include "engine/op.h"
#include <math.h>
#include <stdint.h>

#define TD_WIN_SP 3

/* The helpers kernels call run on the host and, in the GPU modules, on the device. */
#if defined(__CUDACC__) || defined(__HIPCC__)
#define TD_WIN_HD __host__ __device__
#else
#define TD_WIN_HD
#endif

typedef struct td__window {
    int nsp;               /* spatial dims of the op, 1..3 */
    int64_t n, c, co;      /* batch; channels of input 0 and of the output (forward sense) */
    int64_t groups;        /* CONV family; 1 elsewhere */
    int64_t in[TD_WIN_SP];  /* spatial size of the forward op's input */
    int64_t out[TD_WIN_SP]; /* spatial size of the forward op's output */
    int64_t k[TD_WIN_SP], stride[TD_WIN_SP], dil[TD_WIN_SP];
    int64_t pad_lo[TD_WIN_SP], pad_hi[TD_WIN_SP];
    int ceil_mode, count_include_pad; /* pooling */
    int mode, align_corners;          /* INTERPOLATE: 0 nearest, 1 (bi)linear */
} td__window;

/* Entry i of list j of a window op with `ns` scalars and `nsp` spatial dims. */
static inline int64_t td__window_list(const td__op *op, int ns, int nsp, int j, int i)
{
    return op->iattrs[ns + j * nsp + i];
}

/* The attributes of `op` (a window op with nsp spatial dims) into w: everything but n, c,
 * co and the in/out sizes a tensor holds. Lists the op does not have keep their neutral
 * values (kernel, stride, dilation 1; padding 0). Also sets in[] / out[] where an
 * attribute states them (input size of the backward ops, output size of ADAPTIVE_AVG_POOL
 * and INTERPOLATE). */
static inline void td__window_attrs(const td__op *op, int nsp, td__window *w)
{
    int off = TD_WIN_SP - nsp;
    w->nsp = nsp;
    w->groups = 1;
    w->ceil_mode = w->count_include_pad = w->mode = w->align_corners = 0;
    for (int i = 0; i < TD_WIN_SP; i++) {
        w->in[i] = w->out[i] = w->k[i] = w->stride[i] = w->dil[i] = 1;
        w->pad_lo[i] = w->pad_hi[i] = 0;
    }
    for (int i = 0; i < nsp; i++) {
        int d = off + i;
        switch (op->opcode) {
        case TD_OP_CONV_WEIGHT_GRAD: w->k[d] = td__window_list(op, 1, nsp, 4, i); /* fallthrough */
        case TD_OP_CONV:
        case TD_OP_CONV_TRANSPOSE:
            w->groups = op->iattrs[0];
            w->stride[d] = td__window_list(op, 1, nsp, 0, i);
            w->dil[d] = td__window_list(op, 1, nsp, 1, i);
            w->pad_lo[d] = td__window_list(op, 1, nsp, 2, i);
            w->pad_hi[d] = td__window_list(op, 1, nsp, 3, i);
            break;
        case TD_OP_MAX_POOL_BACKWARD: w->in[d] = td__window_list(op, 1, nsp, 4, i); /* fallthrough */
        case TD_OP_MAX_POOL:
        case TD_OP_MAX_POOL_INDICES:
            w->ceil_mode = (int)op->iattrs[0];
            w->k[d] = td__window_list(op, 1, nsp, 0, i);
            w->stride[d] = td__window_list(op, 1, nsp, 1, i);
            w->dil[d] = td__window_list(op, 1, nsp, 2, i);
            w->pad_lo[d] = w->pad_hi[d] = td__window_list(op, 1, nsp, 3, i);
            break;
        case TD_OP_AVG_POOL_BACKWARD: w->in[d] = td__window_list(op, 2, nsp, 3, i); /* fallthrough */
        case TD_OP_AVG_POOL:
            w->ceil_mode = (int)op->iattrs[0];
            w->count_include_pad = (int)op->iattrs[1];
            w->k[d] = td__window_list(op, 2, nsp, 0, i);
            w->stride[d] = td__window_list(op, 2, nsp, 1, i);
            w->pad_lo[d] = w->pad_hi[d] = td__window_list(op, 2, nsp, 2, i);
            break;
        case TD_OP_ADAPTIVE_AVG_POOL: w->out[d] = td__window_list(op, 0, nsp, 0, i); break;
        case TD_OP_ADAPTIVE_AVG_POOL_BACKWARD: w->in[d] = td__window_list(op, 0, nsp, 0, i); break;
        case TD_OP_INTERPOLATE:
            w->mode = (int)op->iattrs[0];
            w->align_corners = (int)op->iattrs[1];
            w->out[d] = td__window_list(op, 2, nsp, 0, i);
            break;
        default: break;
        }
    }
}

/* Whether the op's input 0 is the gradient dy of the forward op's output (backward ops). */
static inline bool td__window_is_backward(uint32_t opcode)
{
    return opcode == TD_OP_MAX_POOL_BACKWARD || opcode == TD_OP_AVG_POOL_BACKWARD ||
           opcode == TD_OP_ADAPTIVE_AVG_POOL_BACKWARD;
}

/* The whole window of a validated op: its attributes and the sizes its tensors hold.
 * x = input 0, in1 = input 1 (the weight, or CONV_WEIGHT_GRAD's dy; NULL if none), out =
 * the output. */
static inline void td__window_decode(const td__op *op, const td__desc *x, const td__desc *in1,
                                     const td__desc *out, td__window *w)
{
    int nsp = (int)x->rank - 2, off = TD_WIN_SP - nsp;
    td__window_attrs(op, nsp, w);
    w->n = x->dims[0];
    w->c = x->dims[1];
    w->co = out->dims[1];
    for (int i = 0; i < nsp; i++) {
        int d = off + i;
        switch (op->opcode) {
        case TD_OP_CONV:
        case TD_OP_CONV_TRANSPOSE:
            w->k[d] = in1->dims[2 + i];
            w->in[d] = x->dims[2 + i];
            w->out[d] = out->dims[2 + i];
            break;
        case TD_OP_CONV_WEIGHT_GRAD:
            w->in[d] = x->dims[2 + i];
            w->out[d] = in1->dims[2 + i];
            break;
        default:
            if (td__window_is_backward(op->opcode)) {
                w->in[d] = out->dims[2 + i];
                w->out[d] = x->dims[2 + i];
            } else {
                w->in[d] = x->dims[2 + i];
                w->out[d] = out->dims[2 + i];
            }
            break;
        }
    }
    if (op->opcode == TD_OP_CONV_WEIGHT_GRAD) {
        w->co = in1->dims[1];
    }
}

/* The shape rule TD_SHAPE_WINDOW (engine/window.c; engine only, not for backend modules):
 * checks the op's channels, groups and list values against its inputs and computes the
 * output desc's dims (its dtype is set by the caller). Returns TD_OK or TD_EINVAL with the
 * message in err. Called by td__op_infer after the row's generic checks. */
td_status td__window_shape(const td__op *op, const td__desc *const *in, td__desc *out,
                           char *err, size_t errlen);

/* Spatial element count of in[] / out[] / k[]. */
static inline TD_WIN_HD int64_t td__window_prod(const int64_t *v)
{
    return v[0] * v[1] * v[2];
}

/* AVG_POOL's window along one dim for output j: [start, end) clipped to the input, and the
 * divisor's extent along that dim (PyTorch's rule: the window clipped to the padded input,
 * [-pad, L + pad), when count_include_pad; else clipped to the input). */
static inline TD_WIN_HD void td__avg_window(const td__window *w, int d, int64_t j, int64_t *start,
                                  int64_t *end, int64_t *extent)
{
    int64_t s = j * w->stride[d] - w->pad_lo[d];
    int64_t e = s + w->k[d];
    if (e > w->in[d] + w->pad_hi[d]) e = w->in[d] + w->pad_hi[d];
    int64_t padded = e - s;
    if (s < 0) s = 0;
    if (e > w->in[d]) e = w->in[d];
    *start = s;
    *end = e;
    *extent = w->count_include_pad ? padded : e - s;
}

/* ADAPTIVE_AVG_POOL's window along one dim for output j: [floor(j L / O), ceil((j+1) L / O)). */
static inline TD_WIN_HD void td__adaptive_window(int64_t j, int64_t L, int64_t O,
                                                 int64_t *start, int64_t *end)
{
    *start = (j * L) / O;
    *end = ((j + 1) * L + O - 1) / O;
}

/* INTERPOLATE nearest: the source index of output j along a dim of input size L, output
 * size O — PyTorch's rule (nearest_idx in UpSample.h): j when O == L, j / 2 when O == 2 L,
 * else min(floor(j * s), L - 1) with s = L / O and the product in float. */
static inline TD_WIN_HD int64_t td__nearest_src(int64_t j, int64_t L, int64_t O)
{
    if (O == L) return j;
    if (O == 2 * L) return j >> 1;
    const float s = (float)L / (float)O;
    const int64_t i = (int64_t)floorf((float)j * s);
    return i < L - 1 ? i : L - 1;
}

#endif

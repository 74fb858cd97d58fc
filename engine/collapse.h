/* collapse.h — merging the dims of a strided walk, shared by every backend's iterator.
 *
 * Why: the cost of an N-d walk is paid per row, so rows should be as long as possible.
 * Size-1 output dims are dropped and adjacent dims are merged wherever every operand's
 * strides allow it (same-shape operands become one run of n elements, [M,N] + [N] becomes M
 * rows of N). Header-only (static inline) so loadable backend modules need no engine
 * symbols from the process that loads them.
 * Thread-safety: pure functions.
 */
#ifndef TD_ENGINE_COLLAPSE_H
#define TD_ENGINE_COLLAPSE_H

#include "engine/op.h"
#include <string.h>

/* Collapse the walk over `out` with n_in operands whose element strides are given in out's
 * axes (in_strides[k][d]). Writes the collapsed dims and strides (strides[k][0..rank)) and
 * returns the rank, at least 1 (a rank-0 or all-ones output is one element with stride 0). */
static inline int td__collapse_dims(const td__desc *out, int n_in,
                                    const int64_t (*in_strides)[TD_MAX_RANK],
                                    int64_t dims[TD_MAX_RANK],
                                    int64_t (*strides)[TD_MAX_RANK])
{
    int r = 0;
    for (uint32_t d = 0; d < out->rank; d++) {
        int64_t n = out->dims[d];
        if (n == 1) continue;
        bool merge = r > 0;
        for (int k = 0; k < n_in && merge; k++)
            merge = strides[k][r - 1] == in_strides[k][d] * n;
        if (merge) {
            dims[r - 1] *= n;
            for (int k = 0; k < n_in; k++) strides[k][r - 1] = in_strides[k][d];
        } else {
            dims[r] = n;
            for (int k = 0; k < n_in; k++) strides[k][r] = in_strides[k][d];
            r++;
        }
    }
    if (r == 0) {
        dims[0] = 1;
        for (int k = 0; k < n_in; k++) strides[k][0] = 0;
        r = 1;
    }
    return r;
}
/* The walk of a reduction over x with the axes in `mask`: kept and reduced dims, each merged
 * into runs of adjacent dims of the same class (size-1 dims dropped), outer to inner, with
 * their element strides in x. Output element o lies at the kept offset of o; its reduced
 * elements at the reduced offsets 0..rcount-1. Shared by the CPU and CUDA reductions so the
 * partition (and with it the fold order) is defined once. */
typedef struct td__reduce_plan {
    int nk, nr;
    int64_t ksize[TD_MAX_RANK], kstride[TD_MAX_RANK]; /* kept runs, outer to inner */
    int64_t rsize[TD_MAX_RANK], rstride[TD_MAX_RANK]; /* reduced runs, outer to inner */
    bool inner_kept; /* the innermost (stride-1) run is kept: column-wise folding */
    int64_t rcount;  /* reduced elements per output */
    int64_t nout;    /* output elements */
} td__reduce_plan;

static inline void td__reduce_plan_init(td__reduce_plan *p, const td__desc *x, uint64_t mask)
{
    int64_t st[TD_MAX_RANK];
    td__desc_strides(x, st);
    memset(p, 0, sizeof *p);
    p->rcount = 1;
    p->nout = 1;
    int last = -1; /* class of the previous non-1 dim: 0 kept, 1 reduced */
    for (uint32_t d = 0; d < x->rank; d++) {
        int64_t n = x->dims[d];
        int cls = (int)((mask >> d) & 1);
        if (cls) {
            p->rcount *= n;
        } else {
            p->nout *= n;
        }
        if (n == 1) continue;
        int64_t *size = cls ? p->rsize : p->ksize, *stride = cls ? p->rstride : p->kstride;
        int *count = cls ? &p->nr : &p->nk;
        if (cls == last) {
            size[*count - 1] *= n;
            stride[*count - 1] = st[d];
        } else {
            size[*count] = n;
            stride[(*count)++] = st[d];
        }
        last = cls;
    }
    p->inner_kept = last == 0;
}
#endif

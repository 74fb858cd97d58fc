/* collapse.h — merging the dims of a strided walk, shared by every backend's iterator.
 *
 * Why: the cost of an N-d walk is paid per row, so rows should be as long as possible.
 * Size-1 output dims are dropped and adjacent dims are merged wherever every operand's
 * strides allow it (same-shape operands become one run of n elements, [M,N] + [N] becomes M
 * rows of N). Header-only (static inline) so loadable backend modules need no engine
 * symbols from the process that loads them.
 * Thread-safety: pure function.
 */
#ifndef TD_ENGINE_COLLAPSE_H
#define TD_ENGINE_COLLAPSE_H

#include "engine/op.h"

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
#endif

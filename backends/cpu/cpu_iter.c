/* cpu_iter.c — the broadcast/strided iterator of the CPU backend (see cpu_internal.h).
 *
 * Why collapse dims first: the cost of a general N-d walk is paid per row, so making rows
 * as long as possible (same-shape operands become one row of n elements, [M,N] + [N]
 * becomes M rows of N) lets the row kernels run the tight, vectorisable loops for nearly
 * all real shapes while one code path still covers every broadcast.
 */
#include "backends/cpu/cpu_internal.h"
#include "engine/collapse.h"

void td__cpu_iter_init(td__cpu_iter *it, const td__desc *out, int n_in,
                       const int64_t (*in_strides)[TD_MAX_RANK])
{
    it->n_in = n_in;
    it->rank = td__collapse_dims(out, n_in, in_strides, it->dims, it->in_strides);
}

void td__cpu_iter_rows(const td__cpu_iter *it, int64_t lo, int64_t hi, td__cpu_row_fn row,
                       void *ctx)
{
    const int last = it->rank - 1;
    int64_t idx[TD_MAX_RANK];
    int64_t rem = lo;
    for (int d = last; d >= 0; d--) {
        idx[d] = rem % it->dims[d];
        rem /= it->dims[d];
    }
    int64_t inner[TD_CPU_ITER_MAX_IN];
    for (int k = 0; k < it->n_in; k++) inner[k] = it->in_strides[k][last];
    int64_t pos = lo;
    while (pos < hi) {
        int64_t off[TD_CPU_ITER_MAX_IN];
        for (int k = 0; k < it->n_in; k++) {
            int64_t o = 0;
            for (int d = 0; d <= last; d++) o += idx[d] * it->in_strides[k][d];
            off[k] = o;
        }
        int64_t n = it->dims[last] - idx[last];
        if (n > hi - pos) n = hi - pos;
        row(ctx, off, inner, pos, n);
        pos += n;
        idx[last] += n;
        for (int d = last; d > 0 && idx[d] == it->dims[d]; d--) {
            idx[d] = 0;
            idx[d - 1]++;
        }
    }
}

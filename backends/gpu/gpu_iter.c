/* gpu_iter.c — the host side of the GPU backend's broadcast/strided iterator (see
 * gpu_internal.h): collapsing an output shape and its operands' strides into the fewest
 * dims, and walking the result as runs on the host (batched matmul).
 *
 * Why collapse on the host: kernels split every output index over the iterator's dims with
 * one division per dim, so merging same-shape operands into one flat dim (and [M,N] + [N]
 * into two) makes the common cases cost a multiply. The rules are the CPU backend's, so
 * both backends see the same structure.
 */
#include "backends/gpu/gpu_internal.h"
#include "engine/collapse.h"

/* Largest offset or count that 32-bit kernel index math may reach; grid-stride loops add up
 * to 2^28 to an index below this without overflowing int32. */
#define SMALL_LIMIT (1LL << 30)

void td__gpu_iter_init(td__gpu_iter *it, const td__desc *out, int n_in,
                       const int64_t (*in_strides)[TD_MAX_RANK])
{
    it->n_in = n_in;
    int r = td__collapse_dims(out, n_in, in_strides, it->dims, it->strides);
    it->rank = r;
    for (int d = r; d < TD_MAX_RANK; d++) {
        it->dims[d] = 1;
        for (int k = 0; k < TD_GPU_ITER_MAX_IN; k++) it->strides[k][d] = 0;
    }
    for (int k = n_in; k < TD_GPU_ITER_MAX_IN; k++)
        for (int d = 0; d < r; d++) it->strides[k][d] = 0;
    /* small: the element count and every input's largest offset stay below SMALL_LIMIT */
    int64_t total = 1;
    bool small = true;
    for (int d = 0; d < r; d++) {
        total *= it->dims[d];
        if (total >= SMALL_LIMIT) small = false;
    }
    for (int k = 0; k < n_in && small; k++) {
        int64_t maxoff = 0;
        for (int d = 0; d < r; d++) {
            int64_t s = it->strides[k][d] < 0 ? -it->strides[k][d] : it->strides[k][d];
            if (it->dims[d] > 0 && s > 0) {
                if (s >= SMALL_LIMIT || it->dims[d] - 1 >= SMALL_LIMIT / s) {
                    small = false;
                    break;
                }
                maxoff += (it->dims[d] - 1) * s;
                if (maxoff >= SMALL_LIMIT) small = false;
            }
        }
    }
    it->small = small;
}

void td__gpu_iter_runs(const td__gpu_iter *it, int64_t total, td__gpu_run_fn fn, void *ctx)
{
    const int last = it->rank - 1;
    int64_t idx[TD_MAX_RANK] = {0};
    int64_t step[TD_GPU_ITER_MAX_IN];
    for (int k = 0; k < it->n_in; k++) step[k] = it->strides[k][last];
    int64_t pos = 0;
    while (pos < total) {
        int64_t off[TD_GPU_ITER_MAX_IN];
        for (int k = 0; k < it->n_in; k++) {
            int64_t o = 0;
            for (int d = 0; d <= last; d++) o += idx[d] * it->strides[k][d];
            off[k] = o;
        }
        int64_t n = it->dims[last] - idx[last];
        if (n > total - pos) n = total - pos;
        fn(ctx, off, step, pos, n);
        pos += n;
        idx[last] += n;
        for (int d = last; d > 0 && idx[d] == it->dims[d]; d--) {
            idx[d] = 0;
            idx[d - 1]++;
        }
    }
}

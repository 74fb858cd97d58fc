/* cuda_internal.h — what the CUDA backend's files share: the device and stream records, the
 * execution context handed to every kernel family, desc helpers, the host-side broadcast
 * iterator whose collapsed form the kernels walk, and the kernel-family entry points.
 *
 * Layout: cuda_backend.c is the vtable (plain C against the runtime API: devices, the
 * stream-ordered allocator, streams, dispatch); cuda_blas.c drives cuBLAS for float matmul;
 * the .cu files hold the kernels, one family per file (create, elementwise, reduce,
 * matmul for integers, movement). Every family entry gets an op that td__op_infer()
 * accepted and contiguous row-major views, enqueues its work on the session's stream and
 * returns td_status with a message in the context's err buffer.
 *
 * The module is loaded with dlopen and must not call into the engine (the host may not
 * export its symbols): only static inline helpers of engine headers are used, and memory
 * comes from libc, not the engine's allocation hooks.
 *
 * This header is included by C (gcc) and CUDA C++ (nvcc) translation units, so it keeps to
 * the common subset: no designated initializers, no `restrict`.
 */
#ifndef TD_BACKENDS_CUDA_INTERNAL_H
#define TD_BACKENDS_CUDA_INTERNAL_H

#include "backends/backend.h"
#include "backends/cuda/gpu_compat.h"
#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Threads per block of the elementwise and movement kernels. */
#define TD_CUDA_THREADS 256
/* Most blocks one grid-stride launch uses; larger tensors loop inside the kernel. */
#define TD_CUDA_MAX_BLOCKS (1 << 20)

/* One opened device. */
typedef struct td__cuda_device {
    int ordinal;
    gpuMemPool_t pool; /* every buffer of the device comes from this pool */
    int sm_count;
    uint64_t total_bytes;
} td__cuda_device;

/* One session's stream and the per-stream resources ops need. */
typedef struct td__cuda_stream {
    gpuStream_t s;
    void *blas;          /* cublasHandle_t, created on the first float matmul */
    bool tf32;           /* TENSORD_CUDA_TF32=1 when the stream was created */
    uint64_t *flag;      /* device scratch word for index range checks */
    uint64_t *host_word; /* pinned host word the flag is copied back into */
} td__cuda_stream;

/* What every kernel family gets. */
typedef struct td__cuda_exec {
    td__device *dev;
    td__cuda_device *cd;
    td__cuda_stream *st;
    char *err;
    size_t errlen;
} td__cuda_exec;

/* printf into the context's err buffer and return `s`. */
td_status td__cuda_fail(const td__cuda_exec *x, td_status s, const char *fmt, ...)
#ifdef __GNUC__
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* TD_OK when e is gpuSuccess; else TD_ENOMEM (allocation failures) or TD_EDEVICE with
 * "cuda: <what>: <error name>: <error string>" in err. Clears the runtime's last error. */
td_status td__cuda_check(const td__cuda_exec *x, gpuError_t e, const char *what);
/* Checks the launch that just happened (gpuGetLastError). */
td_status td__cuda_launched(const td__cuda_exec *x, const char *what);

/* Scratch device memory ordered on the session stream: usable by work enqueued after the
 * call, returned to the pool by td__cuda_temp_free once that work has been enqueued. */
td_status td__cuda_temp_alloc(const td__cuda_exec *x, size_t nbytes, void **out);
void td__cuda_temp_free(const td__cuda_exec *x, void *p);

/* Copy the stream's flag word to the host (waits for the stream). */
td_status td__cuda_read_flag(const td__cuda_exec *x, uint64_t *out);

/* ---- desc helpers ---- */

static inline size_t td__cuda_dtype_size(uint32_t dt)
{
    switch (dt) {
    case TD_F32: case TD_I32: return 4;
    case TD_F64: case TD_I64: return 8;
    case TD_U8: case TD_BOOL: return 1;
    }
    return 0;
}

static inline int64_t td__cuda_nelem(const td__desc *d)
{
    int64_t n = 1;
    for (uint32_t i = 0; i < d->rank; i++) n *= d->dims[i];
    return n;
}

/* Row-major strides in elements. */
static inline void td__cuda_strides(const td__desc *d, int64_t st[TD_MAX_RANK])
{
    int64_t s = 1;
    for (int i = (int)d->rank - 1; i >= 0; i--) {
        st[i] = s;
        s *= d->dims[i];
    }
}

/* Strides (elements) that read `in` broadcast to `out`'s shape: `in` aligned right, missing
 * and size-1 dims get stride 0. */
static inline void td__cuda_bcast_strides(const td__desc *in, const td__desc *out,
                                          int64_t st[TD_MAX_RANK])
{
    int64_t own[TD_MAX_RANK];
    td__cuda_strides(in, own);
    uint32_t lead = out->rank - in->rank;
    for (uint32_t d = 0; d < out->rank; d++)
        st[d] = (d < lead || in->dims[d - lead] == 1) ? 0 : own[d - lead];
}

/* Blocks for a grid-stride launch over n items. */
static inline unsigned td__cuda_blocks(int64_t n, int threads)
{
    int64_t b = (n + threads - 1) / threads;
    if (b < 1) b = 1;
    if (b > TD_CUDA_MAX_BLOCKS) b = TD_CUDA_MAX_BLOCKS;
    return (unsigned)b;
}

/* ---- broadcast / strided iterator ----
 * The collapsed walk of a contiguous output with up to 3 inputs read at arbitrary element
 * strides (0 = broadcast): size-1 dims dropped, adjacent dims that are contiguous for every
 * operand merged (same rules as the CPU backend's iterator). Passed to kernels by value;
 * output element i has coordinates i split over dims (row-major) and input k's offset is
 * the dot product of those coordinates with strides[k]. `small` says every offset and the
 * element count fit in 31 bits, so kernels may index with 32-bit arithmetic. */
#define TD_CUDA_ITER_MAX_IN 3

typedef struct td__gpu_iter {
    int rank; /* >= 1 */
    int n_in;
    bool small;
    int64_t dims[TD_MAX_RANK];
    int64_t strides[TD_CUDA_ITER_MAX_IN][TD_MAX_RANK];
} td__gpu_iter;

/* Build the iterator for `out` (rank, dims) with n_in inputs whose strides are given in
 * out's axes. */
void td__gpu_iter_init(td__gpu_iter *it, const td__desc *out, int n_in,
                       const int64_t (*in_strides)[TD_MAX_RANK]);

/* A run of the walk: n consecutive output elements from out index o; input k starts at
 * off[k] and steps by step[k]. */
typedef void (*td__gpu_run_fn)(void *ctx, const int64_t *off, const int64_t *step, int64_t o,
                               int64_t n);
/* Call fn for every run covering output elements [0, total), in order (host side). */
void td__gpu_iter_runs(const td__gpu_iter *it, int64_t total, td__gpu_run_fn fn, void *ctx);

/* ---- kernel families (enqueue on x->st->s) ---- */
td_status td__cuda_exec_create(const td__cuda_exec *x, const td__op *op, const td__view *out);
td_status td__cuda_exec_unary(const td__cuda_exec *x, const td__op *op, const td__view *in,
                              const td__view *out);
td_status td__cuda_exec_binary(const td__cuda_exec *x, const td__op *op, const td__view *in,
                               const td__view *out);
td_status td__cuda_exec_where(const td__cuda_exec *x, const td__view *in, const td__view *out);
td_status td__cuda_exec_cast(const td__cuda_exec *x, const td__view *in, const td__view *out);
td_status td__cuda_exec_reduce(const td__cuda_exec *x, const td__op *op, const td__view *in,
                               const td__view *out);
td_status td__cuda_exec_matmul(const td__cuda_exec *x, const td__view *in, const td__view *out);
td_status td__cuda_exec_movement(const td__cuda_exec *x, const td__op *op, const td__view *in,
                                 const td__view *out);

/* Integer batched matmul (cuda_matmul.cu); `batch` walks the output batch dims with inputs
 * a (0) and b (1) at element strides. */
td_status td__cuda_matmul_int(const td__cuda_exec *x, const td__gpu_iter *batch,
                              int64_t nbatch, int64_t m, int64_t n, int64_t k,
                              const td__view *in, const td__view *out);
/* Float matmul through cuBLAS (cuda_blas.c). */
td_status td__cuda_matmul_blas(const td__cuda_exec *x, const td__gpu_iter *batch,
                               int64_t nbatch, int64_t m, int64_t n, int64_t k,
                               const td__view *in, const td__view *out);
/* Free a stream's cuBLAS handle (NULL is a no-op). */
void td__cuda_blas_destroy(void *handle);

/* Fill n elements of dtype dt at `data` with the value v converted by the CAST rules. */
td_status td__cuda_fill(const td__cuda_exec *x, uint32_t dt, void *data, int64_t n, double v);

#ifdef __cplusplus
}
#endif
#endif

/* gpu_internal.h — what the GPU backends' shared files share: the device and stream
 * records, the execution context handed to every kernel family, desc helpers, the
 * host-side broadcast iterator whose collapsed form the kernels walk, and the kernel-family
 * entry points.
 *
 * One source, two runtimes: backends/cuda builds these files with nvcc against the CUDA
 * runtime, backends/hip builds the very same files with hipcc (TD_GPU_HIP defined) against
 * HIP; gpu_compat.h maps the `gpu*` runtime names. Only float matmul differs per vendor:
 * backends/cuda/cuda_blas.c calls cuBLAS, backends/hip/hip_gemm.cu is our own kernel
 * (Debian has no rocBLAS/hipBLAS). Both implement td__gpu_matmul_float below.
 *
 * Layout: gpu_backend.c is the vtable (plain C against the runtime API: devices, the
 * stream-ordered allocator, streams, dispatch); the .cu files hold the kernels, one family
 * per file (create, elementwise, reduce, matmul for integers, movement, softmax). Every family entry gets an op that td__op_infer()
 * accepted and contiguous row-major views, enqueues its work on the session's stream and
 * returns td_status with a message in the context's err buffer.
 *
 * The module is loaded with dlopen and must not call into the engine (the host may not
 * export its symbols): only static inline helpers of engine headers are used, and host
 * memory comes from td__gpu_host_calloc / td__gpu_host_free, which call the allocation
 * table the engine hands over at load (td__backend.set_host_alloc; libc's before that).
 *
 * This header is included by C (gcc) and CUDA C++ (nvcc) translation units, so it keeps to
 * the common subset: no designated initializers, no `restrict`.
 */
#ifndef TD_BACKENDS_GPU_INTERNAL_H
#define TD_BACKENDS_GPU_INTERNAL_H

#include "backends/backend.h"
#include "backends/gpu/gpu_compat.h"
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Threads per block of the elementwise and movement kernels. */
#define TD_GPU_THREADS 256
/* Most blocks one grid-stride launch uses; larger tensors loop inside the kernel. */
#define TD_GPU_MAX_BLOCKS (1 << 20)

/* Host <-> device transfers of at least TD_GPU_STAGE_MIN bytes, and writes of any size on a
 * session stream, go through pinned staging buffers of TD_GPU_STAGE_BYTES, two per pair (one
 * filled or drained by the CPU while the DMA engine moves the other; a transfer of
 * TD_GPU_STAGE_SPLIT_MIN or more, or a write of three chunks or more, takes several pairs),
 * from a fixed set of stage_sets pairs per device
 * (TENSORD_GPU_STAGE_SETS, 1..TD_GPU_STAGE_SETS, default TD_GPU_STAGE_SETS_DEFAULT): at most
 * stage_sets * 2 * TD_GPU_STAGE_BYTES (64 MiB at 8) of pinned host memory a device,
 * made on the first staged transfer and freed when the device closes. A transfer that finds
 * every pair in use takes the plain pageable copy instead of waiting. gpu_backend.c has the
 * ordering argument. */
#define TD_GPU_STAGE_BYTES ((size_t)4 << 20)
#define TD_GPU_STAGE_SETS 8
#define TD_GPU_STAGE_SETS_DEFAULT 8 /* 64 MiB pinned; 8 threads copy a large transfer
                                     * (BENCHMARKS.md 2026-12-06: 1 GiB 36-46 GB/s at 8
                                     * against 29-37 at 4 on an H100 host of 16 cores) */
#define TD_GPU_STAGE_MIN ((size_t)64 << 10)

typedef struct td__gpu_stage {
    void *buf[2];          /* pinned, TD_GPU_STAGE_BYTES each */
    gpuEvent_t done[2];    /* recorded after the last copy that used buf[i] */
    int next;              /* which buffer the next chunk uses */
    bool busy;             /* held by a transfer (under td__gpu_device.stage_mu) */
} td__gpu_stage;

/* One opened device. */
typedef struct td__gpu_device {
    int ordinal;
    gpuMemPool_t pool; /* every buffer of the device comes from this pool */
    int sm_count;
    uint64_t total_bytes;
    pthread_mutex_t stage_mu; /* guards stage[].busy and stage_ready */
    int stage_ready;   /* 0: not made yet; 1: made; -1: making them failed (pageable only) */
    int stage_sets;    /* pairs in use, 1..TD_GPU_STAGE_SETS (set at open) */
    int stage_next;    /* where stage_acquire's search starts (under stage_mu): pairs are
                        * taken in turn, so back-to-back writes use all 2 * stage_sets
                        * buffers before one waits for its earlier DMA */
    td__gpu_stage stage[TD_GPU_STAGE_SETS];
} td__gpu_device;

/* One session's stream and the per-stream resources ops need. */
typedef struct td__gpu_stream {
    gpuStream_t s;
    void *blas;          /* float-matmul state (cublasHandle_t on CUDA), made on first use */
    uint64_t *flag;      /* device scratch word for index range checks */
    uint64_t *host_word; /* pinned host word the flag is copied back into */
} td__gpu_stream;

/* What every kernel family gets. */
typedef struct td__gpu_exec {
    td__device *dev;
    td__gpu_device *cd;
    td__gpu_stream *st;
    char *err;
    size_t errlen;
} td__gpu_exec;

/* printf into the context's err buffer and return `s`. */
td_status td__gpu_fail(const td__gpu_exec *x, td_status s, const char *fmt, ...)
#ifdef __GNUC__
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* TD_OK when e is gpuSuccess; else TD_ENOMEM (allocation failures) or TD_EDEVICE with
 * TD_GPU_KIND ": <what>: <error name>: <error string>" in err. Clears the runtime's last error. */
td_status td__gpu_check(const td__gpu_exec *x, gpuError_t e, const char *what);
/* Checks the launch that just happened (gpuGetLastError). */
td_status td__gpu_launched(const td__gpu_exec *x, const char *what);

/* Scratch device memory ordered on the session stream: usable by work enqueued after the
 * call, returned to the pool by td__gpu_temp_free once that work has been enqueued. */
td_status td__gpu_temp_alloc(const td__gpu_exec *x, size_t nbytes, void **out);
void td__gpu_temp_free(const td__gpu_exec *x, void *p);

/* Host memory through the engine's allocation hooks (see set_host_alloc in backend.h).
 * Thread-safety: as thread-safe as the hooks. */
void *td__gpu_host_calloc(size_t count, size_t size);
void td__gpu_host_free(void *p);

/* Copy the stream's flag word to the host (waits for the stream). */
td_status td__gpu_read_flag(const td__gpu_exec *x, uint64_t *out);

/* ---- desc helpers ---- */

/* Element size of a dtype (0 if unknown): the dtype table's (engine/dtype.h). */
static inline size_t td__gpu_dtype_size(uint32_t dt) { return td__dtype_size(dt); }

static inline int64_t td__gpu_nelem(const td__desc *d)
{
    int64_t n = 1;
    for (uint32_t i = 0; i < d->rank; i++) n *= d->dims[i];
    return n;
}


/* Blocks for a grid-stride launch over n items. */
static inline unsigned td__gpu_blocks(int64_t n, int threads)
{
    int64_t b = (n + threads - 1) / threads;
    if (b < 1) b = 1;
    if (b > TD_GPU_MAX_BLOCKS) b = TD_GPU_MAX_BLOCKS;
    return (unsigned)b;
}

/* ---- broadcast / strided iterator ----
 * The collapsed walk of a contiguous output with up to 3 inputs read at arbitrary element
 * strides (0 = broadcast): size-1 dims dropped, adjacent dims that are contiguous for every
 * operand merged (same rules as the CPU backend's iterator). Passed to kernels by value;
 * output element i has coordinates i split over dims (row-major) and input k's offset is
 * the dot product of those coordinates with strides[k]. `small` says every offset and the
 * element count fit in 31 bits, so kernels may index with 32-bit arithmetic. */
#define TD_GPU_ITER_MAX_IN 3

typedef struct td__gpu_iter {
    int rank; /* >= 1 */
    int n_in;
    bool small;
    int64_t dims[TD_MAX_RANK];
    int64_t strides[TD_GPU_ITER_MAX_IN][TD_MAX_RANK];
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
td_status td__gpu_exec_create(const td__gpu_exec *x, const td__op *op, const td__view *in,
                              const td__view *out);
/* RANDPERM of n into the i64 buffer out (gpu_sort.cu). */
td_status td__gpu_randperm(const td__gpu_exec *x, uint64_t seed, int64_t n, void *out);
td_status td__gpu_exec_unary(const td__gpu_exec *x, const td__op *op, const td__view *in,
                              const td__view *out);
td_status td__gpu_exec_binary(const td__gpu_exec *x, const td__op *op, const td__view *in,
                               const td__view *out);
td_status td__gpu_exec_where(const td__gpu_exec *x, const td__view *in, const td__view *out);
td_status td__gpu_exec_cast(const td__gpu_exec *x, const td__view *in, const td__view *out);
td_status td__gpu_exec_reduce(const td__gpu_exec *x, const td__op *op, const td__view *in,
                               const td__view *out);
td_status td__gpu_exec_matmul(const td__gpu_exec *x, const td__view *in, const td__view *out);
/* The indexed movement ops (gpu_scatter.cu): ONE_HOT MASKED_FILL SCATTER SCATTER_ADD
 * INDEX_ADD GATHER_ND. */
td_status td__gpu_exec_indexed(const td__gpu_exec *x, const td__op *op, const td__view *in,
                               const td__view *out);
/* TD_ERANGE naming `name`, the value, [0, dim) and the first offending position (row-major
 * over idx, as the CPU) when an index of idx lies outside [0, dim); else TD_OK. Waits for
 * the stream when idx is non-empty. */
td_status td__gpu_check_indices(const td__gpu_exec *x, const char *name, const td__view *idx,
                                int64_t dim);
td_status td__gpu_exec_movement(const td__gpu_exec *x, const td__op *op, const td__view *in,
                                 const td__view *out);
td_status td__gpu_exec_nn(const td__gpu_exec *x, const td__op *op, const td__view *in,
                          const td__view *out);
td_status td__gpu_exec_softmax(const td__gpu_exec *x, const td__op *op, const td__view *in,
                                const td__view *out);

/* gpu_stats.cu: VAR STD LOGSUMEXP NORM ANY ALL and ARGMAX/ARGMIN over axes that are not
 * one run of adjacent dims; td__gpu_stats_op says whether a (validated) REDUCE op goes
 * there (x: the input's desc). gpu_scan.cu: CUMSUM CUMPROD. gpu_sort.cu: SORT ARGSORT
 * TOPK_VALUES TOPK_INDICES. */
bool td__gpu_stats_op(const td__op *op, const td__desc *x);
td_status td__gpu_exec_stats(const td__gpu_exec *x, const td__op *op, const td__view *in,
                             const td__view *out);
td_status td__gpu_exec_scan(const td__gpu_exec *x, const td__op *op, const td__view *in,
                            const td__view *out);
td_status td__gpu_exec_sort(const td__gpu_exec *x, const td__op *op, const td__view *in,
                            const td__view *out);
/* SCALED_DOT_PRODUCT_ATTENTION (gpu_attention.cu): whether the fused tensor-core kernel
 * takes this (validated) op (f16/bf16, no mask, head dim 64 or 128; f32 goes to the f32
 * kernel below; false in builds without them: HIP, the CPU emulation), and the kernel. */
bool td__gpu_attention_supports(const td__op *op, const td__desc *const *in,
                                const td__desc *out);
td_status td__gpu_exec_attention(const td__gpu_exec *x, const td__op *op, const td__view *in,
                                 const td__view *out);
/* Element strides of `in`'s batch dims aligned right with the output's nb batch dims (0
 * where in has no such dim or it is 1), `mat` elements per matrix, into st[0..nb): the
 * batch walk of both attention kernels (gpu_attention.cu; CUDA builds only). */
void td__gpu_attention_batch_strides(const td__desc *in, int nb, int64_t mat, int64_t *st);
/* The f32 kernel (gpu_attention_f32.cu; CUDA builds only, reached through the two above):
 * no mask, head dim 64 or 128, at least one key; TENSORD_GPU_ATTN_F32=0 declines. */
bool td__gpu_attention_f32_supports(const td__op *op, const td__desc *const *in,
                                    const td__desc *out);
td_status td__gpu_exec_attention_f32(const td__gpu_exec *x, const td__op *op,
                                     const td__view *in, const td__view *out);
/* CONV and POOL families (gpu_window.cu, engine/window.h). */
td_status td__gpu_exec_window(const td__gpu_exec *x, const td__op *op, const td__view *in,
                              const td__view *out);
/* CONV in f16/bf16 as an implicit GEMM on tensor cores, and in f32 on the CUDA cores when
 * TENSORD_GPU_CONV_F32=1 (gpu_conv.cu), `w` the op's decoded window: TD_EUNSUPPORTED
 * (nothing enqueued, no message) when it does not take the op (other dtypes, shapes past its
 * 32-bit indexing, f32 pointwise without bias, builds without it: HIP, and f16/bf16 under
 * the CPU emulation; TENSORD_GPU_CONV_VARIANT=5 for f16/bf16), and the caller runs im2col +
 * GEMM. */
struct td__window;
td_status td__gpu_conv_mma(const td__gpu_exec *x, const td__op *op, const td__view *in,
                           const td__view *out, const struct td__window *w);

/* Integer batched matmul (gpu_matmul.cu); `batch` walks the output batch dims with inputs
 * a (0) and b (1) at element strides. */
td_status td__gpu_matmul_int(const td__gpu_exec *x, const td__gpu_iter *batch,
                              int64_t nbatch, int64_t m, int64_t n, int64_t k,
                              const td__view *in, const td__view *out);
/* Float (f32/f64) batched matmul: cuBLAS on CUDA (backends/cuda/cuda_blas.c), our own
 * tiled kernel on HIP (backends/hip/hip_gemm.cu). Same arguments as td__gpu_matmul_int,
 * plus allow_tf32: the op is f32 and its precision attribute allows TF32 (engine/op.h), a
 * permission an implementation without a TF32 path ignores. */
td_status td__gpu_matmul_float(const td__gpu_exec *x, const td__gpu_iter *batch,
                               int64_t nbatch, int64_t m, int64_t n, int64_t k,
                               const td__view *in, const td__view *out, bool allow_tf32);
/* Whether td__gpu_matmul_float takes this float dtype (f16/bf16 computed in f32: cuBLAS
 * GemmEx with f32 compute, the HIP kernel with f32 loads); supports_op asks it. */
bool td__gpu_matmul_float_dtype(uint32_t dtype);
/* Free what td__gpu_matmul_float keeps per stream (st->blas; NULL is a no-op). */
void td__gpu_matmul_release(void *handle);

/* Fill n elements of dtype dt at `data` with the value v converted by the CAST rules. */
td_status td__gpu_fill(const td__gpu_exec *x, uint32_t dt, void *data, int64_t n, double v);

#ifdef __cplusplus
}
#endif
#endif

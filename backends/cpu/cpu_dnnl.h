/* cpu_dnnl.h — the oneDNN pieces the CPU kernels share (builds with TD_HAVE_DNNL only):
 * one engine for the process, the one-OpenMP-thread scope every oneDNN call of the backend
 * runs in, primitive creation with a caller-owned scratchpad, and execution of a primitive
 * over host pointers. cpu_dnnl_conv.c (f32 convolution, in every build that found oneDNN)
 * and cpu_matmul.c (bf16 tiles, only with TD_DNNL_BF16_MATMUL: -Ddnnl_bf16_matmul=true)
 * use them.
 *
 * Why one OpenMP thread: Debian's oneDNN is an OpenMP build (no threadpool API), and its
 * kernels choose their blocking, and so the order of their sums, from the thread count at
 * primitive creation. The CPU device's own pool already runs the work units, so each unit
 * runs oneDNN on its pool thread with one OpenMP thread: no oversubscription, and the bits
 * depend on the shapes only, never on OMP_NUM_THREADS or the device's thread count. */
#ifndef TD_BACKENDS_CPU_DNNL_H
#define TD_BACKENDS_CPU_DNNL_H
#if defined(TD_HAVE_DNNL)
#include "backends/cpu/cpu_internal.h"
#include <oneapi/dnnl/dnnl.h>
#include <stdbool.h>

/* The CPU engine, created once; NULL when oneDNN could not create it.
 * Thread-safety: any thread. */
dnnl_engine_t td__dnnl_engine(void);

/* Set this thread's OpenMP thread count to 1 and return the previous count, which
 * td__dnnl_threads_restore puts back. Thread-safety: per thread (OpenMP's setting is). */
int td__dnnl_one_thread(void);
void td__dnnl_threads_restore(int saved);

/* A primitive descriptor for op_desc (a dnnl_*_desc_t) on the engine, with a user-provided
 * scratchpad and strict f32 math (so ONEDNN_DEFAULT_FPMATH_MODE cannot turn f32 math into
 * bf16). Create it inside td__dnnl_one_thread. Returns false on any oneDNN refusal.
 * Thread-safety: any thread. */
bool td__dnnl_pd(const void *op_desc, dnnl_primitive_desc_t *pd);
/* A reorder from src to dst (both on the engine), with a user-provided scratchpad. */
bool td__dnnl_reorder_pd(const dnnl_memory_desc_t *src, const dnnl_memory_desc_t *dst,
                         dnnl_primitive_desc_t *pd);

/* The primitive of pd (pd stays the caller's); its scratchpad's desc into *sp (a zero desc
 * when it needs none) and *sp_bytes raised to at least the scratchpad's size. */
bool td__dnnl_prim(const_dnnl_primitive_desc_t pd, dnnl_primitive_t *prim, dnnl_memory_desc_t *sp,
                   size_t *sp_bytes);

/* Run prim on stream st over n host buffers h[i] described by md[i], passed as argument
 * arg[i] (DNNL_ARG_*), and wait for it. Thread-safety: a primitive may run on several
 * threads at once, each with its own stream and scratchpad. */
bool td__dnnl_exec(dnnl_primitive_t prim, dnnl_stream_t st, int n, const int *arg,
                   const dnnl_memory_desc_t *md, void *const *h);

/* CONV through oneDNN (cpu_dnnl_conv.c): false when it does not take the op (then
 * nothing was written and the caller runs its own path); true with *st the result
 * otherwise. */
bool td__dnnl_conv(const td__cpu_exec *x, const td__op *op, const td__view *in, const td__view *out,
                   td_status *st);
#endif
#endif

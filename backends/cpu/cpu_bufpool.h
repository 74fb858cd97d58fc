/* cpu_bufpool.h — pooled, pre-faulted host buffers for the CPU backend.
 * Thread-safety: any thread. */
#ifndef TD_BACKENDS_CPU_BUFPOOL_H
#define TD_BACKENDS_CPU_BUFPOOL_H
#include <stddef.h>
#include <stdint.h>

/* Buffers of at least this many bytes come from the pool. */
#define TD_CPU_POOL_MIN_BYTES ((size_t)1 << 20)

/* Allocate nbytes (>= TD_CPU_POOL_MIN_BYTES), page-aligned and already faulted in. NULL
 * when out of memory. */
void *td__cpu_pool_alloc(size_t nbytes);
/* Return a buffer from td__cpu_pool_alloc (same nbytes). It is kept for reuse when it is at
 * most half the cap (TENSORD_CPU_POOL_BYTES); the buffers freed longest ago are unmapped
 * to keep the pool under the cap. */
void td__cpu_pool_free(void *p, size_t nbytes);
/* Bytes held in the free lists now and the number of buffers mmap'd since the process
 * started (for tests and diagnostics). Either pointer may be NULL. */
void td__cpu_pool_stats(size_t *pooled_bytes, uint64_t *mapped);
#endif

/* cpu_bufpool.h — pooled, pre-faulted host buffers for the CPU backend.
 * Thread-safety: any thread. */
#ifndef TD_BACKENDS_CPU_BUFPOOL_H
#define TD_BACKENDS_CPU_BUFPOOL_H
#include <stddef.h>

/* Buffers of at least this many bytes come from the pool. */
#define TD_CPU_POOL_MIN_BYTES ((size_t)1 << 20)

/* Allocate nbytes (>= TD_CPU_POOL_MIN_BYTES), page-aligned and already faulted in. NULL
 * when out of memory. */
void *td__cpu_pool_alloc(size_t nbytes);
/* Return a buffer from td__cpu_pool_alloc (same nbytes). */
void td__cpu_pool_free(void *p, size_t nbytes);
#endif

/* par_copy.h — memcpy split over a few threads, for the server's one-copy transfers.
 *
 * Why: a same-host host-buffer transfer (README "Same-host clients", item 4) is one memcpy
 * by the server between the session's shared-memory region and a host tensor. One core's
 * copy is bounded by its own memory bandwidth and TLB reach: on the H200 host (16 cores) it
 * ran at 5.5 GB/s from the region, 0.63x a memcpy between huge-page-backed buffers
 * (BENCHMARKS.md, "H200 host, 2026-12-05 16:15"); the client waits for the copy meanwhile,
 * so the cores it would take are otherwise idle.
 *
 * Thread-safety: any thread; each call makes its own threads and joins them before it
 * returns, so nothing outlives it.
 */
#ifndef TD_COMMON_PAR_COPY_H
#define TD_COMMON_PAR_COPY_H

#include <stddef.h>

/* Below this, one memcpy (a thread costs tens of microseconds to start). */
#define TD_PAR_COPY_MIN_BYTES ((size_t)4 << 20)
/* At most this many threads, the caller's included. */
#define TD_PAR_COPY_MAX_THREADS 4

/* Copy n bytes from src to dst (not overlapping), as memcpy: in up to
 * min(TD_PAR_COPY_MAX_THREADS, online CPUs) contiguous parts of whole 4 KiB pages when
 * n >= TD_PAR_COPY_MIN_BYTES, the calling thread taking the first part. A thread that cannot
 * be started leaves its part to the caller. Returns the number of threads that copied
 * (1: a plain memcpy). */
int td__par_memcpy(void *dst, const void *src, size_t n);
#endif

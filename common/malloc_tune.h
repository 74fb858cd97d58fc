/* malloc_tune.h — keep glibc from returning gRPC's freed receive buffers to the kernel.
 *
 * gRPC reads a socket into freshly malloc'd 64 KiB slices and frees them once the message
 * they hold is consumed. With glibc's default trim threshold (128 KiB) each such free at
 * the top of the heap gives the memory back (brk/madvise), and the next read faults and
 * zeroes it again: measured on a 1 GiB download, a third of the received pages were
 * faulted in afresh and half the client's CPU went to page-fault handling
 * (BENCHMARKS.md, "P3 wire path after the client's malloc policy (issue 12)").
 *
 * Thread-safety: td__malloc_keep_heap from any thread; it acts once per process.
 */
#ifndef TD_COMMON_MALLOC_TUNE_H
#define TD_COMMON_MALLOC_TUNE_H

#include <stdbool.h>
#include <stddef.h>

/* Allocations below this come from the heap (reused), larger ones are mmap'd. */
#define TD_MALLOC_MMAP_MIN_BYTES ((size_t)16 << 20)

/* Set glibc's mmap threshold to TD_MALLOC_MMAP_MIN_BYTES and its trim threshold to
 * `trim_bytes` (free memory at the top of a malloc arena up to this size stays in the
 * process), once per process: the first call decides, later calls do nothing. Nothing is
 * changed when the environment already sets a malloc policy (GLIBC_TUNABLES,
 * MALLOC_ARENA_MAX, MALLOC_ARENA_TEST, MALLOC_MMAP_MAX_, MALLOC_MMAP_THRESHOLD_,
 * MALLOC_TOP_PAD_ or MALLOC_TRIM_THRESHOLD_; not the debugging MALLOC_CHECK_ and
 * MALLOC_PERTURB_), when `opt_out_env` names a
 * variable that is set to anything but "" or "0", or on a C library other than glibc.
 * `opt_out_env` may be NULL. Returns whether the thresholds were set by this call. */
bool td__malloc_keep_heap(size_t trim_bytes, const char *opt_out_env);
#endif

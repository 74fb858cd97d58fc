/* host_heap.h — first-fit allocator of byte ranges, for the host buffers that
 * td_host_alloc carves out of a session's shared-memory region (client/remote.c).
 *
 * Why its own file: the region's bytes are shared with the server, so the allocator keeps
 * its bookkeeping outside them (a sorted array of blocks here, never headers inside the
 * region that the server or a stray write could change) and is tested on its own
 * (tests/unit/client/host_heap.c).
 *
 * A heap manages offsets [base, base + size). Every allocation starts at a multiple of
 * `align` (a power of two) relative to 0 and takes a multiple of `align` bytes. Blocks are
 * kept sorted by offset; a free merges with free neighbours, so two free blocks are never
 * adjacent. Cost: O(number of blocks) per call. Thread-safety: none (the caller's lock).
 */
#ifndef TD_CLIENT_HOST_HEAP_H
#define TD_CLIENT_HOST_HEAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct td__heap_block {
    uint64_t off, len;
    bool used;
} td__heap_block;

typedef struct td__host_heap {
    td__heap_block *b; /* sorted by off, covering [base, base + size) exactly */
    size_t n, cap;
    uint64_t align;
    uint64_t used_bytes; /* sum of the used blocks' lengths */
} td__host_heap;

/* Manage [base, base + size): base and size are cut down to multiples of `align` (a power
 * of two, at least 1). Returns false when out of memory for the bookkeeping. An empty range
 * is allowed (every alloc then fails). */
bool td__host_heap_init(td__host_heap *h, uint64_t base, uint64_t size, uint64_t align);
void td__host_heap_fini(td__host_heap *h);
/* First free block that fits `nbytes` (> 0) rounded up to align; *off is its start.
 * Returns false when none fits (or nbytes is 0, or the bookkeeping cannot grow). */
bool td__host_heap_alloc(td__host_heap *h, uint64_t nbytes, uint64_t *off);
/* Free the allocation that starts at `off`. Returns false (and changes nothing) when no
 * used block starts there. *len, when not NULL, gets the freed block's length. */
bool td__host_heap_free(td__host_heap *h, uint64_t off, uint64_t *len);
/* The used block containing [off, off + nbytes) entirely (nbytes > 0), or NULL. */
const td__heap_block *td__host_heap_find(const td__host_heap *h, uint64_t off, uint64_t nbytes);
/* The largest free block's length (0: none). */
uint64_t td__host_heap_largest_free(const td__host_heap *h);
#endif

/* pinpool.h — pinned host buffers that take a stream upload's chunk on the receive side,
 * so that the device worker only queues its DMA.
 *
 * Why: over TCP (and the plain stream on a unix socket) a Write chunk reaches the server in
 * gRPC's slices, and the worker copied it into the GPU backend's pinned staging buffers
 * before queueing the DMA: that memcpy (about 80 µs for an 800 KB training batch on the
 * H100 host) ran on the session's worker between its kernel launches, so a `--graph`
 * training loop over TCP was bound by the worker, at 1.22x its local time (BENCHMARKS.md,
 * "H100 host, 2026-12-07 14:28"). Now the gRPC thread that received the chunk copies it
 * into one of these buffers (td__job.pinned), and the worker queues one DMA from it
 * (td__session_write_queued) and goes on; the session's shmdone thread gives the buffer
 * back once the copy's fence has finished (shmdone.h).
 *
 * One pool per backend that can pin host memory and queue copies from it (host_pin,
 * buffer_write_queued, fence_record, fence_finish: the CUDA/HIP backend, and the tests'
 * qdev module), made at the first take: TD_PINPOOL_BUFS buffers of TD_CHUNK_BYTES, one
 * allocation pinned once through the first device asking (backend.h: pins are process-wide
 * for the backend, so every device of it copies from them). 16 MiB of page-locked memory a
 * backend, whatever the number of sessions. When every buffer is out, or pinning failed,
 * td__pinpool_take returns NULL and the chunk takes the worker's path as before: slower,
 * never wrong. TENSORD_PIN_UPLOADS=0 at start turns the pool off (an A/B aid).
 *
 * Thread-safety: take and give from any thread (one mutex); shutdown once, after every
 * session has ended and before the backends close.
 */
#ifndef TD_SERVER_PINPOOL_H
#define TD_SERVER_PINPOOL_H

#include "backends/backend.h"

#include <stdbool.h>
#include <stddef.h>

#define TD_PINPOOL_BUFS 16
/* Chunks below this go the worker's way: the fence and hand-off cost more than the copy. */
#define TD_PINPOOL_MIN_BYTES ((size_t)64 << 10)

typedef struct td__pin_buf td__pin_buf;

/* Whether uploads to `dev` can use the pool: its backend pins host memory and queues copies
 * from it, and the pool is not turned off. */
bool td__pinpool_usable(const td__device *dev);
/* A free buffer of TD_CHUNK_BYTES for uploads to dev's backend, or NULL (none free, the
 * backend cannot use one, pinning failed, or no memory). The caller owns it until
 * td__pinpool_give. */
td__pin_buf *td__pinpool_take(td__device *dev);
/* The buffer's TD_CHUNK_BYTES bytes (page-aligned, pinned). */
void *td__pin_buf_data(td__pin_buf *b);
/* Give b back (NULL: nothing). No copy from it may still be queued. */
void td__pinpool_give(td__pin_buf *b);
/* Unpin and free every pool (buffers still out are a bug: logged, and leaked rather than
 * freed under a copy). Once, at the end of the process's service. */
void td__pinpool_shutdown(void);
/* Set by main from TENSORD_PIN_UPLOADS before any session starts (default true). */
extern bool td__pin_uploads;
#endif

/* tensor.h — reference-counted device buffers and the tensors that view them.
 *
 * A buffer is device memory with an atomic reference count; tensors (and in-flight network
 * sends) hold references, so RESHAPE can alias and a read can stream from memory that the
 * client has already released. The last unref frees through the device's backend.
 * Engine-wide counters (live buffers and bytes) feed GetInfo and the memory-baseline tests.
 *
 * Charging follows the buffer, not the tensor record: a buffer is charged once, when it is
 * created, to the session and the tenant quota of the session that created it. The tenant
 * quota is given back by the last unref, whoever drops it (a released tensor's buffer that
 * a network send still streams counts until the send completes); the session counts the
 * buffer while any of its tensors refers to it (`tensor_refs`, see engine/session.c).
 */
#ifndef TD_ENGINE_TENSOR_H
#define TD_ENGINE_TENSOR_H

#include "backends/backend.h"
#include "engine/quota.h"
#include <stdatomic.h>

typedef struct td__buffer {
    atomic_long refs;
    size_t nbytes;
    void *data;
    td__device *dev;
    /* The session stream on `dev` the buffer is allocated, used and freed on (backend.h,
     * "Streams and memory ordering"); NULL for host-memory devices, whose buffers may
     * outlive their session (a read being sent, an upload candidate), and for devices
     * without streams. A buffer with a stream is only ever referenced by its session, which
     * frees it before destroying the stream. */
    void *stream;
    /* The tenant quota charged `quota_bytes` for this buffer (NULL: none), uncharged by the
     * last unref. Set once, by the creator, before the buffer is shared. */
    td__quota *quota;
    uint64_t quota_bytes;
    /* Tensor records of the owning session that refer to this buffer (aliases included).
     * Touched only under the session's one-thread rule; 0 once only sends hold it. */
    uint32_t tensor_refs;
    /* A buffer with no stream whose creator waited for every copy into it (or left a
     * `fence` after them, below) and that only synchronous reads use afterwards (an upload
     * candidate's device copy, td__session_detach_copy): the last unref frees it with the
     * backend's buffer_free_idle, which does not wait for the whole device. Set once, by
     * the creator, before the buffer is shared. */
    bool idle;
    /* With `idle`, where the backend has fence_record: the copy into the buffer is still
     * queued on its creator's session stream and is complete once this fence is
     * (td__session_detach_copy: the creator does not wait for the session's earlier
     * kernels). Readers use NULL-stream entries, which wait for every stream first; the
     * last unref finishes the fence before buffer_free_idle. NULL: nothing pending. Set
     * once, by the creator, before the buffer is shared. */
    void *fence;
} td__buffer;

/* Allocate a buffer of nbytes (0 allowed: data is NULL) with one reference, ordered on
 * `stream` (the creating session's stream on dev, or NULL; ignored, and recorded as NULL,
 * for a host-memory device).
 * Returns TD_OK, TD_ENOMEM. Thread-safety: any thread. */
td_status td__buffer_create(td__device *dev, void *stream, size_t nbytes, td__buffer **out);
/* The hook td__buffer_create calls once when a device without host memory has no room
 * for nbytes: it frees device memory held only for a cache (the server's upload
 * candidates, server/candidates.h) on `dev` and returns the bytes it freed; a positive
 * answer makes td__buffer_create try the allocation again. NULL (the default): none.
 * Set before serving; the hook may run on any thread and must not create buffers. */
typedef uint64_t (*td__buffer_reclaim_fn)(td__device *dev, uint64_t need);
void td__buffer_set_reclaim(td__buffer_reclaim_fn fn);
void td__buffer_ref(td__buffer *b);
/* Drop a reference; frees on the last one, and then gives `quota_bytes` back to `quota`.
 * NULL is a no-op. Any thread. */
void td__buffer_unref(td__buffer *b);

/* Process-wide live buffer count and bytes (all devices). */
uint64_t td__buffer_live_count(void);
uint64_t td__buffer_live_bytes(void);

/* A tensor in a session's table: desc plus a buffer reference, or a poison record saying
 * which op failed. */
typedef struct td__tensor {
    td__desc desc;
    td__buffer *buf;   /* NULL when poisoned */
    td_status poison;  /* TD_OK unless the op producing it failed */
    char *poison_msg;  /* owned; set when poisoned */
    uint32_t record_bytes; /* host bytes this record is charged (engine/session.c) */
} td__tensor;
#endif

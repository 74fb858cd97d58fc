/* tensor.c — reference-counted device buffers (see tensor.h). The live counters are
 * process-wide atomics so GetInfo can report memory in use without locking sessions. */
#include "engine/tensor.h"
#include "common/alloc.h"

static atomic_ullong g_live_count;
static atomic_ullong g_live_bytes;
static _Atomic(td__buffer_reclaim_fn) g_reclaim;

void td__buffer_set_reclaim(td__buffer_reclaim_fn fn) { atomic_store(&g_reclaim, fn); }

td_status td__buffer_create(td__device *dev, void *stream, size_t nbytes, td__buffer **out)
{
    td__buffer *b = td__calloc(1, sizeof *b);
    if (b == NULL) return TD_ENOMEM;
    b->stream = dev->backend->host_memory ? NULL : stream;
    if (nbytes > 0) {
        td_status s = dev->backend->buffer_alloc(dev, b->stream, nbytes, &b->data);
        td__buffer_reclaim_fn reclaim = atomic_load(&g_reclaim);
        /* device memory held for a cache (upload candidates' copies) gives way first */
        if (s == TD_ENOMEM && !dev->backend->host_memory && reclaim != NULL &&
            reclaim(dev, nbytes) > 0)
            s = dev->backend->buffer_alloc(dev, b->stream, nbytes, &b->data);
        if (s != TD_OK) {
            td__free(b);
            return s;
        }
    }
    atomic_init(&b->refs, 1);
    b->nbytes = nbytes;
    b->dev = dev;
    atomic_fetch_add(&g_live_count, 1);
    atomic_fetch_add(&g_live_bytes, nbytes);
    *out = b;
    return TD_OK;
}

void td__buffer_ref(td__buffer *b) { atomic_fetch_add(&b->refs, 1); }

void td__buffer_unref(td__buffer *b)
{
    if (b == NULL || atomic_fetch_sub(&b->refs, 1) != 1) return;
    const td__backend *be = b->dev->backend;
    /* a failed fence: the device decides when the memory is free (buffer_free's wait) */
    if (b->fence != NULL && be->fence_finish(b->dev, b->fence) != TD_OK) b->idle = false;
    if (b->data != NULL && b->idle && b->stream == NULL && be->buffer_free_idle != NULL)
        be->buffer_free_idle(b->dev, b->data, b->nbytes);
    else if (b->data != NULL)
        be->buffer_free(b->dev, b->stream, b->data, b->nbytes);
    if (b->quota != NULL) td__quota_bytes_uncharge(b->quota, b->quota_bytes);
    atomic_fetch_sub(&g_live_count, 1);
    atomic_fetch_sub(&g_live_bytes, b->nbytes);
    td__free(b);
}

uint64_t td__buffer_live_count(void) { return atomic_load(&g_live_count); }
uint64_t td__buffer_live_bytes(void) { return atomic_load(&g_live_bytes); }

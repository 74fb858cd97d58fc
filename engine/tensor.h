/* tensor.h — reference-counted device buffers and the tensors that view them.
 *
 * A buffer is device memory with an atomic reference count; tensors (and in-flight network
 * sends) hold references, so RESHAPE can alias and a read can stream from memory that the
 * client has already released. The last unref frees through the device's backend.
 * Engine-wide counters (live buffers and bytes) feed GetInfo and the memory-baseline tests.
 */
#ifndef TD_ENGINE_TENSOR_H
#define TD_ENGINE_TENSOR_H

#include "backends/backend.h"
#include <stdatomic.h>

typedef struct td__buffer {
    atomic_long refs;
    size_t nbytes;
    void *data;
    td__device *dev;
} td__buffer;

/* Allocate a buffer of nbytes (0 allowed: data is NULL) with one reference.
 * Returns TD_OK, TD_ENOMEM. Thread-safety: any thread. */
td_status td__buffer_create(td__device *dev, size_t nbytes, td__buffer **out);
void td__buffer_ref(td__buffer *b);
/* Drop a reference; frees on the last one. NULL is a no-op. Any thread. */
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
    uint64_t charged;  /* bytes counted against the session (0 for aliases) */
} td__tensor;
#endif

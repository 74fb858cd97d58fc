/* backend.h — the backend vtable: what a device kind (cpu, cuda, hip, vulkan) provides.
 *
 * A backend is a `static const td__backend` with designated initializers (ggml-backend's
 * shape, minus its abort-only entries): every entry that can fail returns td_status and
 * writes a message into err. Optional entries may be NULL and the engine supplies the
 * default. Backends never validate ops: the engine has run td__op_infer() on every op, with
 * the actual input descs, before exec() sees it, and exec() receives contiguous row-major
 * tensors whose byte sizes match their descs.
 *
 * Memory: buffer_alloc returns an opaque device pointer (a host pointer when
 * `host_memory` is true, which lets the engine and server read and write it directly).
 * RESHAPE never reaches exec() (the engine aliases) and EMPTY arrives as FULL with value 0
 * (fresh memory is always zeroed so no session sees another's old bytes); supports_op is
 * still asked about both and should answer true.
 *
 * Host memory: a loadable module may not call engine symbols, so it cannot reach
 * common/alloc's hooks directly; the engine hands it their dispatchers through
 * set_host_alloc (below) when it loads the module, and the module allocates every host
 * structure through that table. Fault injection and accounting then reach modules too.
 *
 * Modules and the ABI: a loadable module exports two symbols, td_backend_abi() (the
 * TD_BACKEND_ABI_VERSION it was compiled with) and td_backend_entry() (its table); write
 * TD_BACKEND_MODULE(table) once to define both. engine/device.c refuses a module whose
 * version differs from its own, or that has no td_backend_abi, with a warning naming both
 * versions, before calling anything else in it.
 *
 * Streams and memory ordering: the buffer entries take `stream`, the stream (from
 * stream_create on this device) of the session the buffer belongs to, or NULL when there is
 * none (a backend without streams, a host-memory buffer, a caller outside a session). With a
 * stream the call is ordered on it like a kernel: an allocation is ready for work queued on
 * the stream after it, a free takes effect after the work queued on it before, and a write
 * or read comes after the stream's earlier work (and a write before its later work). The
 * engine uses each buffer of a device that is not host memory on one stream only, its
 * session's stream on that device, so a backend whose sessions' streams run concurrently
 * (CUDA/HIP) needs no device-wide ordering for them. With NULL the call must be safe against
 * work queued on every stream of the device (a device-wide synchronisation where needed).
 *
 * Thread-safety: a device may have several worker threads (tensord --device-workers), so
 * entries are called concurrently for different streams of one device; the entries for one
 * stream come from one thread at a time. Calls with a NULL stream may come from any thread.
 * Every entry must be thread-safe in that sense.
 */
#ifndef TD_BACKENDS_BACKEND_H
#define TD_BACKENDS_BACKEND_H

#include "common/alloc.h"
#include "engine/op.h"
#include <stdbool.h>
#include <stddef.h>

typedef struct td__device td__device;

/* The module ABI: bumped whenever anything a module shares with the engine changes meaning
 * or layout — td__backend, td__device, td__view, td__op, td__desc, td__alloc_hooks, the op
 * table's row layout (engine/optable.h), an opcode's or a dtype's meaning. Version 1 was
 * the unversioned table (modules without td_backend_abi); version 3 added the dtypes f16,
 * bf16, i8 and i16 (TD_DTYPE_COUNT 10); version 4 appended buffer_copy_peer (sessions
 * that span devices, issue 19); version 5 added td__device.uuid and the optional
 * no_device_reason entry; version 6 appended the optional set_log entry; version 7 gave
 * buffer_alloc, buffer_free, buffer_write, buffer_read and buffer_copy a `stream` argument
 * (sessions on one device run concurrently, issue 17); version 8 appended the optional
 * buffer_write_fill; version 9 appended the optional host_pin and host_unpin; version 10
 * appended the optional buffer_free_idle; version 11 appended the optional fence_record
 * and fence_finish; version 12 appended the optional buffer_write_queued. */
#define TD_BACKEND_ABI_VERSION 12u

/* A contiguous tensor as a backend sees it: desc plus the device address of element 0. */
typedef struct td__view {
    td__desc desc;
    void *data;
} td__view;

typedef struct td__backend {
    const char *kind;  /* "cpu", "cuda", ... */
    bool host_memory;  /* buffers are plain host memory */
    /* Number of devices of this kind on the host (0 when no driver/runtime: not an error). */
    td_status (*device_count)(int *out);
    /* Open device `index`: set dev->impl, dev->description. dev->name is set by the engine. */
    td_status (*device_open)(td__device *dev, int index, char *err, size_t errlen);
    void (*device_close)(td__device *dev);
    /* Optional: bytes of device memory; NULL = unknown (reported as 0). */
    td_status (*memory_info)(td__device *dev, uint64_t *total, uint64_t *free_bytes);
    /* Allocate nbytes (> 0) of device memory, ordered on `stream` (see "Streams and memory
     * ordering" above; NULL: usable by any stream when it returns). TD_ENOMEM when it
     * cannot. */
    td_status (*buffer_alloc)(td__device *dev, void *stream, size_t nbytes, void **out);
    /* Free a buffer after the work queued on `stream` (NULL: on every stream) before. */
    void (*buffer_free)(td__device *dev, void *stream, void *data, size_t nbytes);
    /* Copy between host memory and device memory at a byte offset, ordered on `stream`.
     * Both return once `src` may be reused and, for a read, `dst` holds the bytes. */
    td_status (*buffer_write)(td__device *dev, void *stream, void *dst, size_t offset,
                              const void *src, size_t nbytes);
    td_status (*buffer_read)(td__device *dev, void *stream, const void *src, size_t offset,
                             void *dst, size_t nbytes);
    /* Optional: device-to-device copy of nbytes, ordered on `stream`. NULL: the engine uses
     * memcpy for host_memory backends, else a round trip through host memory. */
    td_status (*buffer_copy)(td__device *dev, void *stream, void *dst, const void *src,
                             size_t nbytes);
    /* Optional per-session execution stream (CUDA stream, ...). NULL: stream is NULL. */
    td_status (*stream_create)(td__device *dev, void **out);
    void (*stream_destroy)(td__device *dev, void *stream);
    /* Optional: wait until all work on the stream is done. */
    td_status (*stream_sync)(td__device *dev, void *stream);
    /* Whether exec() implements this (validated) op for these descs. NULL = everything. */
    bool (*supports_op)(td__device *dev, const td__op *op, const td__desc *const *in,
                        const td__desc *out);
    /* Execute one validated op: in[0..op->n_inputs) and a freshly allocated out. Runtime
     * data errors (an out-of-range gather index) return TD_ERANGE with a message. */
    td_status (*exec)(td__device *dev, void *stream, const td__op *op, const td__view *in,
                      const td__view *out, char *err, size_t errlen);
    /* Optional (loadable modules): called once, right after the module is loaded and before
     * any other entry, with the engine's allocation functions (td__malloc, td__calloc,
     * td__realloc, td__free: they follow later td__alloc_set_hooks calls). The module copies
     * the table and allocates its host memory through it. Backends compiled into the engine
     * call td__malloc and friends directly and leave this NULL. */
    void (*set_host_alloc)(const td__alloc_hooks *hooks);
    /* Optional (ABI 4): copy nbytes from `src` on device `from` (another device of this
     * same backend) to `dst` on `dev`, device to device (peer to peer where the hardware
     * allows, else however the runtime does it best), complete when it returns. The engine
     * has synchronised the session's streams on both devices first (stream_sync), so no
     * queued work touches either buffer. TD_EUNSUPPORTED, or NULL: the engine copies
     * through host memory (buffer_read, then buffer_write). */
    td_status (*buffer_copy_peer)(td__device *dev, void *dst, td__device *from, const void *src,
                                  size_t nbytes);
    /* Optional (ABI 5): after device_count gave 0, why (the runtime's own error, e.g. "cudaGetDeviceCount:
     * CUDA driver version is insufficient for CUDA runtime version (35)"), written as a
     * NUL-terminated string of at most len bytes; "" when there is nothing to say. The engine
     * puts it in its "backend <kind>: no devices" line. */
    void (*no_device_reason)(char *buf, size_t len);
    /* Optional (ABI 6, loadable modules): called once after set_host_alloc with the
     * engine's one-line logger (level: 0 debug, 1 info, 2 warning, 3 error, as
     * common/log.h; msg without a newline). The module logs through it, so its lines take
     * the process's prefix, format and level threshold (it may not call td__log, an engine
     * symbol). Thread-safety: `log` may be called from any thread. */
    void (*set_log)(void (*log)(int level, const char *msg));
    /* Optional (ABI 8): buffer_write whose bytes the caller produces piece by piece:
     * fill(arg, off, to, len) copies source bytes [off, off + len) to `to`, memory the
     * backend chose (its pinned staging), and returns TD_OK or an error that ends the write
     * and is returned. The pieces cover [0, nbytes) in ascending order, each called once.
     * Made for payloads that arrive in several pieces (a received message's slices): they
     * are copied once, where buffer_write would need them flattened into host memory first.
     * Same ordering and return rules as buffer_write. NULL: the engine flattens the bytes
     * into host memory and calls buffer_write. */
    td_status (*buffer_write_fill)(td__device *dev, void *stream, void *dst, size_t offset,
                                   size_t nbytes,
                                   td_status (*fill)(void *arg, size_t off, void *to, size_t len),
                                   void *arg);
    /* Optional (ABI 9): page-lock the host range [p, p + nbytes) for this backend's devices
     * (CUDA: cudaHostRegister, portable), so that buffer_write and buffer_read whose host
     * side lies wholly inside a pinned range copy by DMA straight from and into it, without
     * the staging copy. For large host buffers that are reused: td_host_alloc on a local
     * context, a same-host session's shared-memory region. Pinning is process-wide for the
     * backend (any device of it), so pin a range once per backend, not per device.
     * Returns TD_OK, TD_EINVAL (nbytes 0, or the range overlaps one already pinned),
     * TD_ENOMEM (the registry of ranges is full) or TD_EDEVICE (the runtime refused: its
     * message in err); on an error nothing is pinned and transfers stay correct, only
     * staged. NULL: the backend cannot pin (host-memory backends need not). */
    td_status (*host_pin)(td__device *dev, void *p, size_t nbytes, char *err, size_t errlen);
    /* Optional (ABI 9): undo host_pin of the range starting at p (a range it did not pin is
     * ignored). The caller guarantees no transfer from or into the range is running or
     * starts until host_unpin returns; after it the memory may be freed or unmapped. */
    void (*host_unpin)(td__device *dev, void *p);
    /* Optional (ABI 10): free a buffer allocated with no stream (buffer_alloc's NULL) that
     * the caller knows is idle: every copy or kernel that touched it has completed (the
     * caller waited for it), so no stream's queued work can use it. Unlike buffer_free
     * with a NULL stream it does not wait for the whole device, so freeing it never waits
     * for another session's work. NULL: the engine calls buffer_free(dev, NULL, ...). */
    void (*buffer_free_idle)(td__device *dev, void *data, size_t nbytes);
    /* Optional (ABI 11): a fence after the work queued so far on `stream` (a session's
     * stream, never NULL), in *out (an opaque handle the caller must pass to fence_finish
     * exactly once). It lets a caller hand on a buffer whose copy is still queued without
     * waiting for the whole stream, i.e. for the session's earlier kernels. The stream may
     * be destroyed before the fence finishes. Returns TD_OK or TD_EDEVICE (nothing to
     * finish then). NULL: the engine waits for the stream (stream_sync) instead. */
    td_status (*fence_record)(td__device *dev, void *stream, void **out);
    /* Optional (ABI 11, given with fence_record): wait until the fence's work has completed,
     * then free the fence. Returns TD_OK, or TD_EDEVICE when the work or the wait failed
     * (the fence is freed either way). Any thread. */
    td_status (*fence_finish)(td__device *dev, void *fence);
    /* Optional (ABI 12, used only with fence_record): buffer_write that may return before
     * the copy has read `src`. When src lies wholly inside a range this backend pinned
     * (host_pin) and `stream` is a session's stream (not NULL), the copy is queued on
     * `stream` behind its earlier work and *queued is set: the caller must keep
     * [src, +nbytes) unchanged and mapped until a fence recorded after it (fence_record)
     * has finished. Otherwise it is buffer_write (the copy is done when it returns) and
     * *queued is false. Returns TD_OK or TD_EDEVICE (*queued false: nothing is queued). This
     * is what lets a server take a same-host client's upload without waiting for the
     * session's earlier kernels (server/handlers.c, run_shm_write). */
    td_status (*buffer_write_queued)(td__device *dev, void *stream, void *dst, size_t offset,
                                     const void *src, size_t nbytes, bool *queued);
} td__backend;

struct td__device {
    const td__backend *backend;
    void *impl;
    int index;
    char name[32];        /* "cpu", "cuda:0" */
    char description[96]; /* human-readable model */
    /* Stable hardware identity where the backend knows one, as the vendor's tools print it
     * (CUDA: "GPU-" and the 16-byte UUID as 8-4-4-4-12 hex digits, nvidia-smi -L's form);
     * "" otherwise. Set by device_open. */
    char uuid[48];
};

/* Define a loadable module's two exported symbols for its table `table` (a static const
 * td__backend): td_backend_abi() and td_backend_entry(). */
#define TD_BACKEND_MODULE(table)                                                           \
    __attribute__((visibility("default"))) uint32_t td_backend_abi(void);                  \
    uint32_t td_backend_abi(void) { return TD_BACKEND_ABI_VERSION; }                       \
    __attribute__((visibility("default"))) const td__backend *td_backend_entry(void);      \
    const td__backend *td_backend_entry(void) { return &(table); }

/* Backends compiled in. */
extern const td__backend td__cpu_backend;
#endif

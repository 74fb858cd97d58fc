/* session.h — one client's in-order execution stream on one device.
 *
 * A session maps client-chosen tensor ids to tensors and executes op batches strictly in
 * order. Every op is validated with td__op_infer() against the actual inputs first. An op
 * that fails (validation, allocation, execution) poisons its output id; ops that read a
 * poisoned tensor poison their outputs silently; independent ops keep running, so the
 * session stays usable. Reading a poisoned tensor returns TD_EPOISONED with the message of
 * the op that failed first.
 *
 * Used by the server (one per gRPC stream, driven by the device worker) and by the client
 * library's local:cpu mode (driven by the caller), so both run the same code.
 * Thread-safety: one thread at a time per session.
 */
#ifndef TD_ENGINE_SESSION_H
#define TD_ENGINE_SESSION_H

#include "engine/quota.h"
#include "engine/tensor.h"

typedef struct td__session td__session;

/* Called for each op of a batch that failed by itself (not merely poisoned). */
typedef void (*td__failure_fn)(void *arg, uint32_t op_index, td_status status,
                               const char *message);

/* Per-session limits; zero fields mean "no limit".
 * Memory is charged per buffer, not per tensor record: a buffer counts once however many
 * tensors (RESHAPE aliases) refer to it, from its creation (checked before it is allocated)
 * while any tensor of the session refers to it; a copy-on-write in td__session_write and
 * td__session_write_ptr is a new buffer and is charged, or refused with TD_EQUOTA. The
 * tenant quota is charged the same bytes and gets them back with the buffer's last
 * reference, so a buffer that a read is still sending counts there until it is sent. */
typedef struct td__session_limits {
    uint64_t max_bytes;   /* device bytes of the buffers the session's tensors refer to, plus
                           * the records' host memory (TD_TENSOR_RECORD_BYTES each) */
    uint64_t max_tensors; /* live tensor ids */
    td__quota *quota;     /* the tenant's shared quota (borrowed; outlives the session), or
                           * NULL: every tensor is also charged there */
} td__session_limits;

td_status td__session_create(td__device *dev, const td__session_limits *limits,
                             td__session **out);

/* Devices one session may span (the wire's TD_SESSION_MAX_DEVICES, proto/wire_limits.h). */
#define TD_SESSION_DEVICES_MAX 4
/* Let the session use `dev` too, as device *index (1, 2, ...; the device it was created on
 * is 0), with a stream of its own there. Ops run on the device holding their inputs (ops
 * without inputs on device 0); an op whose inputs are on different devices fails with
 * TD_EINVAL "op 3 (add): input 0 is on device cpu:0 and input 1 on device cpu:1; ...".
 * All of a session's ops are driven by the thread that drives the session. Returns TD_OK,
 * TD_EINVAL (already one of the session's, or TD_SESSION_DEVICES_MAX reached), or the
 * stream's failure, with a message in err. */
td_status td__session_add_device(td__session *s, td__device *dev, uint32_t *index, char *err,
                                 size_t errlen);
uint32_t td__session_device_count(const td__session *s);
/* Device `index` of the session, or NULL past the last. */
td__device *td__session_device(const td__session *s, uint32_t index);
/* Pin host memory [p, p + nbytes) for the session's devices (backends/backend.h host_pin),
 * once per backend that can pin (CUDA, HIP), so that transfers from and into it are one
 * DMA, without the staging copy. Returns which devices pinned it (bit i: device i); 0 when
 * none did (no device's backend can, or the runtime refused: logged at debug level). Never
 * an error: unpinned memory is only slower. Undo with td__session_host_unpin, with the
 * value returned, before the memory is freed or unmapped and while no transfer from or
 * into it runs. Thread-safety: as the session (its driving thread). */
uint32_t td__session_host_pin(td__session *s, void *p, size_t nbytes);
/* Whether a device of the session has a backend that can pin host memory (host_pin and
 * host_unpin), i.e. whether td__session_host_pin can return nonzero at all; ask it before
 * preparing memory only worth making for pinning. Thread-safety: as the session. */
bool td__session_can_pin(const td__session *s);
void td__session_host_unpin(td__session *s, uint32_t pinned, void *p);
/* Copy tensor `src` to the session's device `device` as the new tensor `out` (same dtype and
 * shape, its own buffer), device to device without the client: memcpy between host-memory
 * devices, one transfer when one side has host memory, the backend's buffer_copy_peer
 * between two GPUs of one backend (peer to peer where the hardware allows), else through a
 * host bounce buffer (4 MiB at a time); the source device's stream is synchronised first. Charged like an
 * op's output (session and tenant bytes, tensor counts). A poisoned `src` poisons `out`
 * (TD_EPOISONED, nothing to report); any other failure poisons `out` with the message too.
 * Returns TD_OK, TD_EINVAL (out id outside 1..TD_SESSION_ID_MAX or in use, device index
 * past the session's), TD_ENOTFOUND (src), TD_EPOISONED, TD_EQUOTA, TD_ENOMEM, or the
 * device's copy failure; messages start with "to_device: ". */
td_status td__session_to_device(td__session *s, uint64_t src, uint64_t out, uint32_t device,
                                char *err, size_t errlen);
/* Frees every tensor of the session. NULL is a no-op. */
void td__session_destroy(td__session *s);

/* Tensor ids a client may create: 1 .. TD_SESSION_ID_MAX. Ids above are the engine's own
 * (the graph executor's temporaries, engine/graph.h), so no client op, write or graph
 * binding can name or collide with them. The same limit is stated in tensord.proto. */
#define TD_SESSION_ID_MAX ((UINT64_C(1) << 62) - 1)
/* The lowering's temporaries (one per step of a composite, TD_LOWER_PROG_MAX at most: engine/lower.h):
 * from 2^63 up, disjoint from the graph executor's range (TD_GRAPH_TEMP_BASE, 2^62, plus at
 * most TD_GRAPH_MAX_OPS). They live only while their composite runs. */
#define TD_LOWER_TEMP_BASE (UINT64_C(1) << 63)

/* Execute ops[0..n) in order. Failures are reported through on_failure (may be NULL);
 * returns the number of ops that failed by themselves. Message format:
 * "op <index> (<name>): <reason>". An op whose output id is 0 or above TD_SESSION_ID_MAX
 * fails with TD_EINVAL.
 *
 * Composites (ops whose row in engine/optable.h has a lowering, e.g. SOFTMAX) run natively
 * when the device's supports_op says yes, and otherwise as their lowering: the primitive
 * steps run in order on temporaries (TD_LOWER_TEMP_BASE), charged to the session's
 * limits like any tensor while they live and released afterwards, within the same op (a
 * time slice never ends inside a composite). A failing step fails the composite with
 * "op <index> (<composite>): lowered step <j> (<name>): <reason>". A primitive the device
 * does not support fails with TD_EUNSUPPORTED "... not supported on device <name>". */
size_t td__session_exec(td__session *s, const td__op *ops, size_t n, td__failure_fn on_failure,
                        void *arg);

/* The resumable form, for the device worker's time slices: execute ops[first..n) in order
 * until all have run or `budget_ns` nanoseconds (CLOCK_MONOTONIC) have passed since the call
 * began; at least one op runs. Returns the index of the first op not yet run (n when the
 * batch is done); *failures (may be NULL) grows by the ops that failed by themselves.
 * Op indexes in messages are positions in ops[]. `engine_ids` allows output ids above
 * TD_SESSION_ID_MAX (only the graph executor passes true). */
size_t td__session_exec_slice(td__session *s, const td__op *ops, size_t first, size_t n,
                              uint64_t budget_ns, bool engine_ids, td__failure_fn on_failure,
                              void *arg, size_t *failures);

/* Copy host bytes into tensor `id` at byte offset. TD_ENOTFOUND, TD_EPOISONED, TD_ERANGE
 * (offset+nbytes past the end or overflowing), TD_EQUOTA (the copy-on-write of a shared
 * buffer would pass a limit), TD_ENOMEM, with a message in err. */
/* td__session_write with the bytes produced by fill(arg, off, to, len) (see the backend's
 * buffer_write_fill: pieces of [0, nbytes) in ascending order, each copied once to where
 * the device wants them; backends without that entry get them flattened into host memory
 * first). Same errors as td__session_write, plus fill's own status (err then says the
 * payload could not be read). */
td_status td__session_write_fill(td__session *s, uint64_t id, uint64_t offset, size_t nbytes,
                                 td_status (*fill)(void *arg, size_t off, void *to, size_t len),
                                 void *arg, char *err, size_t errlen);
td_status td__session_write(td__session *s, uint64_t id, uint64_t offset, const void *src,
                            size_t nbytes, char *err, size_t errlen);

/* A copy still queued on a device (td__session_write_queued): finished with
 * td__fence_finish. handle NULL: nothing is pending. */
typedef struct td__fence {
    td__device *dev;
    void *handle;
} td__fence;

/* td__session_write that may return before the device has read `src`: where src lies in
 * host memory the device's backend pinned (td__session_host_pin) and the backend can queue
 * the copy and fence it (buffer_write_queued, fence_record), the copy is queued behind the
 * session's earlier work without waiting for that work, and *fence gets a fence after it;
 * the caller must keep [src, +nbytes) unchanged and mapped until td__fence_finish(fence)
 * has returned. Otherwise the write is done when this returns and fence->handle is NULL.
 * Same errors as td__session_write (nothing is pending after an error). */
td_status td__session_write_queued(td__session *s, uint64_t id, uint64_t offset,
                                   const void *src, size_t nbytes, td__fence *fence, char *err,
                                   size_t errlen);
/* Wait until a fence's copy has completed and free the fence (handle NULL: TD_OK at once).
 * TD_OK, or TD_EDEVICE when the copy or the wait failed; the fence is freed either way.
 * Any thread; the session that made it may be gone (its devices may not). */
td_status td__fence_finish(td__fence *fence);
/* Copy tensor bytes to host memory. Same errors as write. */
td_status td__session_read(td__session *s, uint64_t id, uint64_t offset, void *dst,
                           size_t nbytes, char *err, size_t errlen);
/* Look up a readable tensor: on TD_OK *desc is its desc and, when its device has host
 * memory, *buf receives a new reference to its buffer (caller unrefs), else NULL. */
td_status td__session_lookup(td__session *s, uint64_t id, td__desc *desc, td__buffer **buf,
                             char *err, size_t errlen);
/* A copy of tensor `id`'s bytes in a new buffer on the tensor's device that belongs to no
 * session (no stream, backend.h): it may outlive the session and be read or freed from any
 * thread. For an upload candidate on a device without host memory (server/candidates.h):
 * a device-to-device copy costs microseconds where a host copy costs a transfer and fresh
 * host pages. The copy is queued on the session's stream after the tensor's writes; where
 * the backend has fence_record a fence after it goes in the buffer's `fence` (tensor.h: the
 * last unref finishes it, readers use NULL-stream entries), else the stream is waited for
 * before it returns. Either way the new buffer is idle (tensor.h) and later writes to the
 * tensor cannot reach it. *out gets the only reference; it is charged
 * to nothing (the caller charges a quota through its quota fields). Returns TD_OK;
 * TD_ENOTFOUND / TD_EPOISONED as td__session_read; TD_EUNSUPPORTED when the device has host
 * memory (keep a reference instead) or no device-to-device copy; TD_ENOMEM when the device
 * has no room; TD_EDEVICE; a message in err. */
td_status td__session_detach_copy(td__session *s, uint64_t id, td__buffer **out, char *err,
                                  size_t errlen);
/* Drop ids (unknown ids are ignored: a release is idempotent). */
void td__session_release(td__session *s, const uint64_t *ids, size_t n);
/* Mark `id` as failed with `status` and `message` (reads give TD_EPOISONED with it; ops
 * reading it poison their outputs). No-op when `id` is live, outside 1..TD_SESSION_ID_MAX,
 * over the session's or tenant's byte quota (a record costs host memory), or allocation
 * fails. Used by
 * the graph executor to fail a run's outputs. */
void td__session_poison(td__session *s, uint64_t id, td_status status, const char *message);
/* Test hook: lower every composite, even where the device has a native kernel (so the
 * lowering can be held to the native kernel on any backend). Sessions start with it on when
 * the environment has TENSORD_FORCE_LOWERING=1 (read by td__session_create; a tensord
 * server started with it lowers for all its sessions). */
void td__session_set_force_lowering(td__session *s, bool on);
/* Test hook: with TENSORD_TEST_PERTURB_OP=NAME in the environment (an op's name, as in
 * docs/ops.md; read by td__session_create), every successful execution of that op flips
 * bit 6 of the top byte of its first output element on the device: a backend made to return a
 * wrong value, which `tensorctl verify` must catch and name (tests/e2e/verify.sh). Never set
 * it on a real server. */
/* Wait for the device stream. */
td_status td__session_sync(td__session *s, char *err, size_t errlen);

/* Live tensors, and device bytes held by this session: the sizes of the distinct buffers
 * its tensors refer to (an alias adds nothing; buffers only a send still holds are not
 * counted here but in the tenant quota). */
uint64_t td__session_tensor_count(const td__session *s);
uint64_t td__session_bytes(const td__session *s);
/* Zero-copy write: check [offset, offset + nbytes) of tensor `id` as td__session_write
 * does and give the tensor a buffer of its own (copy-on-write); then, on a device with host
 * memory, *dst receives the host address of that range so the caller can copy the bytes
 * straight there (valid until the next call on the session); elsewhere *dst is NULL and
 * the caller uses td__session_write. Same errors as td__session_write. */
td_status td__session_write_ptr(td__session *s, uint64_t id, uint64_t offset, size_t nbytes,
                                void **dst, char *err, size_t errlen);
#endif

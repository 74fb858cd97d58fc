/* tensord.h — the public client API of libtensord.
 *
 * A program records tensor operations lazily on a context; the context ships them in
 * batches to an executor, either the in-process engine ("local:cpu") or a remote tensord
 * server over gRPC ("tensord://HOST:PORT/DEVICE", "unix:PATH[/DEVICE]"). Op calls return at
 * once with a handle whose dtype and shape are already known (the engine's op table infers
 * them on the client); only reads and fences wait for the executor.
 *
 * Lifetime rules:
 *  - A td_context owns every td_tensor made on it; td_close() releases them all.
 *  - A td_tensor handle is owned by the caller until td_release(); releasing a tensor that
 *    later ops used is fine (the executor keeps the data alive as long as needed).
 *  - Op functions accept NULL tensor inputs and then return NULL without recording anything, so
 *    that chained calls such as td_relu(td_add(a, b)) need one NULL check at the end;
 *    td_last_error(ctx) then names the first op that failed to record (see td_last_error
 *    for NULL inputs and for calls that name no context).
 *
 * Errors: every fallible call returns td_status (values frozen, append-only). The context
 * keeps a human-readable message for the last failure: td_last_error(). Errors of lazy ops
 * found by the executor (out of memory, a hostile-input check on the server) surface at the
 * next td_read of an affected tensor, or at the next td_fence, naming the op and its batch.
 *
 * Thread-safety: a context and its tensors are used by one thread at a time. Different
 * contexts are independent and may be used from different threads concurrently.
 */
#ifndef TENSORD_H
#define TENSORD_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TD_VERSION_STRING "0.1.0"
/* Highest tensor rank supported everywhere. */
#define TD_MAX_RANK 8

/* Status codes. Frozen and append-only: a value never changes meaning.
 * X(name, value, grpc_code, message) */
#define TD_STATUS_MAP(X)                                                                   \
    X(TD_OK, 0, 0, "ok")                                                                   \
    X(TD_EINVAL, 1, 3, "invalid argument")                                                 \
    X(TD_ENOMEM, 2, 8, "out of memory")                                                    \
    X(TD_ENOTFOUND, 3, 5, "unknown tensor id")                                             \
    X(TD_EPOISONED, 4, 9, "tensor depends on a failed op")                                 \
    X(TD_EUNAVAILABLE, 5, 14, "server unavailable")                                        \
    X(TD_ETIMEOUT, 6, 4, "deadline exceeded")                                              \
    X(TD_EPROTO, 7, 3, "protocol error")                                                   \
    X(TD_EUNSUPPORTED, 8, 12, "operation not supported by this device")                    \
    X(TD_EDEVICE, 9, 13, "device error")                                                   \
    X(TD_EQUOTA, 10, 8, "quota exceeded")                                                  \
    X(TD_EIO, 11, 13, "i/o error")                                                         \
    X(TD_ECANCELLED, 12, 1, "cancelled")                                                   \
    X(TD_EINTERNAL, 13, 13, "internal error")                                              \
    X(TD_EUNAUTHENTICATED, 14, 16, "unauthenticated")                                      \
    X(TD_ECLOSED, 15, 14, "session closed")                                                \
    X(TD_ERANGE, 16, 11, "offset or length out of range")                                  \
    X(TD_EBUSY, 17, 8, "too many operations pending")

typedef enum td_status {
#define TD__STATUS_ENUM(name, value, grpc, msg) name = value,
    TD_STATUS_MAP(TD__STATUS_ENUM)
#undef TD__STATUS_ENUM
} td_status;

/* Name ("TD_EINVAL") and generic message of a status; "unknown status" for values not in
 * the table. Returns static strings. Thread-safety: any thread. */
const char *td_status_name(td_status s);
const char *td_status_message(td_status s);

/* Element types. Frozen values (they travel on the wire). */
typedef enum td_dtype {
    TD_F32 = 0,
    TD_F64 = 1,
    TD_I32 = 2,
    TD_I64 = 3,
    TD_U8 = 4,
    TD_BOOL = 5, /* one byte per element, 0 or 1 */
    TD_F16 = 6,  /* IEEE 754 binary16: 1 sign, 5 exponent, 10 mantissa bits */
    TD_BF16 = 7, /* bfloat16: the top 16 bits of an f32 (8 exponent, 7 mantissa bits) */
    TD_I8 = 8,
    TD_I16 = 9,
} td_dtype;
/* Not (yet) u16, u32, u64: no model or file format we serve needs them, and each unsigned
 * type doubles the integer promotion questions (u64 has no exact double and no signed
 * twin); they can be appended later without touching these values. */
#define TD_DTYPE_COUNT 10

/* Bytes per element (0 for an unknown dtype) and name ("f32"; "?" if unknown). */
size_t td_dtype_size(td_dtype dt);
const char *td_dtype_name(td_dtype dt);

typedef struct td_context td_context;
typedef struct td_tensor td_tensor;

/* Options for td_connect. Zero-initialise, then set what you need; zero means default.
 * Fields are only ever appended. td_connect passes sizeof(td_options) of the header the
 * program was compiled with, so a program built against an older header (a shorter
 * struct) gets the defaults for the newer fields, never whatever bytes follow its struct. */
typedef struct td_options {
    int connect_timeout_ms; /* default 5000: how long td_connect waits for the server */
    int call_timeout_ms;    /* default 60000: deadline for one read/fence/info round trip,
                             * and how long an upload (td_write, td_from_host) waits for the
                             * server to take more of its bytes; then TD_ETIMEOUT and the
                             * session is closed */
    int batch_max_ops;      /* default 256: flush the op batch at this many ops */
    const char *client_name; /* shown in server logs; default "libtensord" */
    /* Security (append-only from here). Strings are borrowed for the td_connect call.
     * TLS is used when the uri is tensords://HOST:PORT[/DEVICE] or `tls` is nonzero; the
     * tls_* files are PEM. A TLS failure is reported as TD_EUNAVAILABLE with a message
     * naming the likely cause (wrong CA, missing client certificate, TLS vs plaintext). */
    int tls;                   /* nonzero: TLS even for a tensord:// or HOST:PORT address */
    const char *tls_ca_file;   /* CAs that sign the server's certificate; NULL: system CAs */
    const char *tls_cert_file; /* client certificate for mutual TLS (with tls_key_file) */
    const char *tls_key_file;  /* its private key (unencrypted PEM) */
    /* Bearer token for servers started with --tokens-file; NULL: $TENSORD_TOKEN if set.
     * Sent as "authorization: Bearer TOKEN" on every call. A missing or unknown token is
     * TD_EUNAUTHENTICATED. */
    const char *token;
    /* Batching and uploads (append-only from here; 0 means the default).
     * Ops are sent in batches: at batch_max_ops ops, at batch_max_bytes of encoded ops, on
     * a read, write or fence, and batch_flush_us after the first op of a
     * batch was recorded (a small background thread per remote context sends it, so a
     * program that records one op and then computes on the host is not left waiting). */
    size_t batch_max_bytes; /* default 1048576 (1 MiB) of encoded ops */
    int batch_flush_us;     /* default 2000 (2 ms); negative: no time bound (no thread),
                             * and no background sends (td_from_host) */
    /* td_from_host/td_write of a whole tensor of at least blob_min_bytes to a remote
     * context go through the server's blob store: the client offers a fingerprint of the
     * data (XXH3-128 of a 256 KiB sample, one round trip, no hashing of the whole buffer);
     * fresh data is sent and the server keeps it as a candidate; when the server knows the
     * fingerprint (a repeat, or a collision), the client offers the SHA-256 of the data and
     * sends the bytes only when the server's store lacks them (only the SHA-256 decides
     * which bytes the tensor gets). SIZE_MAX turns this off. Default (0) 1048576
     * (1 MiB), except on a session with shared memory (td_context_transport "shm" or
     * "shm+ring"), where the default is off: a same-host upload is a memcpy, faster than
     * the SHA-256 a repeat costs; set it explicitly to offer there too. An upload marked
     * TD_WRITE_FRESH (td_write_ex) is never offered, whatever this says. */
    size_t blob_min_bytes;
    /* Matmul precision (append-only from here; 0 means the default, full f32).
     * Nonzero: every f32 td_matmul recorded on this context allows TF32, exactly as if it
     * were td_matmul_ex(a, b, TD_MATMUL_ALLOW_TF32); td_matmul_ex calls keep their own
     * flags. A permission, not a requirement: see td_matmul_ex for what it means, what it
     * costs in accuracy, and which devices use it. */
    int matmul_allow_tf32;
    /* Same-host shared memory (append-only from here; 0 means the default).
     * A "unix:" context asks the server for a shared-memory region (a memfd the server
     * hands over the unix socket's side socket to this session only; README "Same-host
     * clients"); when it gets one, td_from_host/td_write/td_read of at least shm_min_bytes
     * move their bytes through it (one memcpy on each side) instead of the gRPC stream.
     * The bytes are the same either way; td_context_transport() says which path a context
     * uses. If the server offers none (TCP, an older server, --no-shm, its tenant's quota)
     * or the handover fails, the context uses the stream without an error (a debug line
     * with TENSORD_LOG_LEVEL=debug says why). */
    size_t shm_min_bytes; /* default 65536 (64 KiB); SIZE_MAX: keep it for nothing */
    int no_shm;           /* nonzero: never ask for shared memory (so does a non-empty
                           * $TENSORD_NO_SHM other than "0", for programs built without
                           * the option) */
    /* Same-host request ring (append-only from here; 0 means the default). With shared
     * memory, a "unix:" context also asks for the request ring: td_fence, td_read of at
     * most 32 KiB, and the small batch and releases recorded just before them, go through
     * the region with a futex doorbell instead of the gRPC stream (README "Same-host
     * clients"); td_context_transport() then says "shm+ring". */
    int no_ring;          /* nonzero: never ask for the ring (so does a non-empty
                           * $TENSORD_NO_RING other than "0") */
    /* Host buffers in shared memory (append-only from here; 0 means the default). With
     * shared memory, how many bytes of td_host_alloc buffers the context should be able to
     * hold: the context asks for a region that large plus its transfer slots (16 MiB) and
     * request ring (128 KiB). The server grants regions up to its --shm-max-bytes (default
     * 1 GiB) and charges them to the session's and tenant's byte limits; a region those
     * limits cannot hold means none (the stream, as above). 0: whatever the server's default
     * region leaves past the slots and ring (47.875 MiB of the default 64 MiB). */
    size_t shm_host_bytes;
} td_options;

/* Open a context on a device.
 *   "local:cpu"                      in-process engine, no network
 *   "tensord://HOST:PORT[/DEVICE]"   remote server over TCP (IPv6 hosts in brackets)
 *   "tensords://HOST:PORT[/DEVICE]"  the same over TLS (see td_options.tls_*)
 *   "unix:PATH[/DEVICE]"             remote server over a unix socket; the last path
 *                                    component is taken as DEVICE when its first entry
 *                                    looks like a device ("cpu", "cpu:0", "cuda:1", "auto",
 *                                    "cpu:0,cpu:1"); never a pool; a PATH containing ','
 *                                    is TD_EINVAL (gRPC splits unix: targets at commas)
 *   "tensord://H1:PORT,H2:PORT[/DEVICE]"  a pool: the session opens on one of the servers
 *                                    (round robin per process, starting at the next one
 *                                    each call; a server that is down, draining, full or
 *                                    refuses is skipped with a warning on stderr and the
 *                                    next tried, each once) and stays there; at most 64
 *   "dns:///NAME:PORT[/DEVICE]"      a pool of every address NAME resolves to (resolved by
 *                                    the system resolver at each call)
 * DEVICE: a device name ("cpu" is "cpu:0"); "auto", "cuda", "hip", "vulkan" to let the
 * server place the session (least load, then most free memory); or several names,
 * comma-separated, for a session that spans devices (td_to_device). Without DEVICE the
 * server's default device: its first accelerator, else the CPU. td_device_name() and
 * td_context_server() say where the session landed. `opts` may be NULL (all defaults) and is
 * copied. On success *out owns a new context (close with td_close).
 * Returns: TD_OK; TD_EINVAL (malformed uri, unknown device, a name that does not
 * resolve); TD_EUNAVAILABLE (cannot reach the server within connect_timeout_ms; for a
 * pool: no server opened the session, the message gives the last one's reason);
 * TD_EUNAUTHENTICATED (bad token, or a tenant not allowed that device); TD_EQUOTA (session
 * limits); TD_EPROTO (no common protocol version); TD_EUNSUPPORTED (several devices asked
 * of a server older than protocol 4); TD_ETIMEOUT (the server accepted the connection but
 * did not answer the open within call_timeout_ms); TD_ENOMEM. On failure *out is untouched;
 * td_connect_error() has the message. Each remote context has its own connection to its
 * server (so a server's --max-streams never limits how many contexts a process opens).
 * Process-wide effect: the first connection to a server (a remote context,
 * td_server_info_get, td_server_ping) sets glibc's malloc trim and mmap thresholds
 * (mallopt(3); README "Batching and uploads") unless $TENSORD_NO_MALLOC_TUNE is set (not
 * "0") or the environment already sets a malloc policy (GLIBC_TUNABLES or a MALLOC_*
 * policy variable of mallopt(3)).
 * Thread-safety: any thread. */
td_status td_connect_sized(const char *uri, const td_options *opts, size_t opts_size,
                           td_context **out);
#define td_connect(uri, opts, out) td_connect_sized((uri), (opts), sizeof(td_options), (out))
/* td_connect_sized is td_connect with the caller's sizeof(td_options) made explicit (the
 * td_connect macro passes it; bindings that load the library dynamically pass theirs).
 * opts_size smaller than this header's struct: the missing fields take their defaults.
 * Larger (a newer header): TD_EINVAL unless every byte past this struct is zero.
 * The function named td_connect (for programs built before the macro, and for taking its
 * address) assumes the layout that ended at blob_min_bytes. */
td_status(td_connect)(const char *uri, const td_options *opts, td_context **out);

/* Message of the last td_connect failure on this thread. */
const char *td_connect_error(void);

/* Close the context: releases its tensors, ends the session (the server frees all of the
 * session's memory). NULL is a no-op. */
void td_close(td_context *ctx);

/* Human-readable message of the last failure on this context ("" if none). The string is
 * owned by the context (or, see below, the calling thread) and valid until the next call on
 * it. Every op function that returns NULL has set a status and a message that starts with
 * its own name and says which argument was bad, e.g. "td_concat: n is 0, want 1..8":
 *  - with a context reachable from its arguments, on that context;
 *  - always also as the calling thread's last failure, which td_last_error(NULL) and
 *    td_last_status(NULL) return ("" and TD_OK before any);
 *  - a NULL tensor input ("td_add: input b is NULL") is taken as the result of the op call
 *    that failed before it: when the context of the other inputs has a failure newer than
 *    its last recorded op, the context keeps that message (it names the first op of the
 *    chain that failed) and only the thread's record names this call;
 *  - a call that names no context at all (a NULL context or array, td_concat with n < 1)
 *    records on the thread only, and td_last_error(ctx) / td_last_status(ctx) of any
 *    context report it too while nothing was recorded on, or failed on, that context after
 *    it (contexts are used by one thread at a time, so that is the call just made).
 * Thread-safety: the context's rule; the thread's record belongs to the calling thread. */
const char *td_last_error(const td_context *ctx);

/* Status of the last failure on this context (TD_OK if none), e.g. to tell TD_EINVAL
 * from TD_ENOMEM after an op call returned NULL; NULL ctx and context-free failures as for
 * td_last_error. */
td_status td_last_status(const td_context *ctx);

/* Device name the context runs on, e.g. "cpu", "cpu:2", "cuda:1": the device the server
 * opened the session on, which for "auto", "cuda", "hip", "vulkan" or no device at all is
 * the server's choice (DEVICE in td_connect). For a session that spans several devices,
 * the first one (where ops without inputs run). Owned by the context; "" for NULL.
 * Thread-safety: any thread (fixed after td_connect). */
const char *td_device_name(const td_context *ctx);
/* The server the context's session runs on: "HOST:PORT" or "unix:PATH" as td_connect
 * reached it (for a pool, tensord://h1:7070,h2:7070/..., the member it chose); "" for a
 * local context or NULL. Owned by the context. Thread-safety: any thread. */
const char *td_context_server(const td_context *ctx);
/* Devices of the session: td_context_device_count (1 unless td_connect's DEVICE listed
 * several, "cpu:0,cpu:1"; 0 for NULL) and the i-th name (0 is td_device_name; NULL when i is
 * out of range). Owned by the context. Thread-safety: any thread. */
int td_context_device_count(const td_context *ctx);
/* How the context's bulk data travels: "local" (in-process engine), "grpc" (the session's
 * gRPC stream), "shm" (a shared-memory region with the server, for transfers of at least
 * td_options.shm_min_bytes; smaller ones and every op still go over the stream) or
 * "shm+ring" (the region, and its request ring for fences, reads of at most 32 KiB and the
 * small batches before them; td_options.no_ring); NULL for a NULL ctx. Fixed at
 * td_connect. Static string. Thread-safety: any thread. */
const char *td_context_transport(const td_context *ctx);
const char *td_context_device_at(const td_context *ctx, int i);

/* ---- tensors on several devices of one server ----
 * A session can span up to 4 devices of one server (or of this process for local:):
 * name them all in td_connect's DEVICE, comma-separated, the first being where the
 * session starts ("tensord://gpu-host:7070/cuda:0,cuda:1", "local:cpu:0,cpu:1" with
 * TENSORD_CPU_DEVICES=2, "tensord://h:7070/auto,cpu:1"; only the first may be a placement
 * word). Tensors made without inputs (td_from_host, td_full, ...) start on the first
 * device; an op runs on the device that holds its inputs, and its result stays there;
 * td_graph_run takes inputs on the first device only.
 * An op whose inputs are on different devices is refused at once (NULL, TD_EINVAL, the
 * message names both devices); nothing is ever copied between devices implicitly. */

/* Copy `t` to `device` (a name among the session's devices; "cpu" also means "cpu:0") as
 * a new tensor of the same dtype and shape. The copy runs inside the server (or this
 * process for local:), device to device, never through the client: a memcpy between CPU
 * devices, one host<->device transfer when one side is the CPU, the GPU runtime's peer
 * copy between two GPUs (peer to peer where the pair allows). Lazy like an op: it returns
 * at once and a failure (quota, out of memory) surfaces at the next read or fence; a `t`
 * that depends on a failed op makes the result depend on it too. Caller owns the result
 * (td_release). The bytes are the same bits as `t`'s. Differentiable: when t requires a
 * gradient the copy is taped, and td_backward moves its gradient back to t's device.
 * Returns NULL with td_last_error set when t is NULL, device is NULL or not one of the
 * session's devices (the message lists them), t is a graph placeholder or a graph is being
 * captured, the session is closed (TD_ECLOSED), or the server predates protocol 4
 * (TD_EUNSUPPORTED). Thread-safety: one thread per context. */
td_tensor *td_to_device(td_tensor *t, const char *device);
/* Name of the device holding `t` (one of the session's devices); "" for NULL. Owned by the
 * context. Thread-safety: the context's rule. */
const char *td_tensor_device(const td_tensor *t);

/* Client statistics (monotonic since td_connect). */
typedef struct td_stats {
    uint64_t ops_recorded;
    uint64_t batches_sent;
    uint64_t bytes_sent;     /* tensor payload bytes written */
    uint64_t bytes_received; /* tensor payload bytes read */
    uint64_t round_trips;    /* reads, fences, pings and host-buffer writes (td_host_alloc)
                              * that waited for the executor */
} td_stats;
void td_get_stats(const td_context *ctx, td_stats *out);

/* ---- tensors ----
 * Shapes are arrays of `rank` int64 dims (rank 0..TD_MAX_RANK, dims >= 0); `dims` is
 * borrowed for the call and may be NULL when rank is 0. Tensors are row-major and
 * contiguous.
 * Ordering: everything on one context executes in program order. A td_write to a tensor
 * takes effect after every op recorded before it (which still see the old contents) and
 * before every op recorded after it. */

/* Element count, byte size, dtype, rank and dims of a tensor (known at once, lazily). */
int64_t td_nelem(const td_tensor *t);
size_t td_nbytes(const td_tensor *t);
td_dtype td_tensor_dtype(const td_tensor *t);
int td_rank(const td_tensor *t);
const int64_t *td_dims(const td_tensor *t); /* owned by the tensor */
td_context *td_tensor_context(const td_tensor *t);

/* New tensor holding a copy of `nbytes = nelem * dtype size` bytes at `data` (borrowed for
 * the call: the caller may change or free it as soon as the call returns).
 * Background sends: on a remote context over a stream (td_context_transport "grpc"), an
 * upload of at most 16 MiB (TENSORD_WRITE_COPY_MAX, README "Configuration"; 0: off; by
 * default on only when the process may run on at least 4 CPUs: on fewer the copy takes
 * CPU from the program and a same-host server, and costs more than it saves) is copied
 * into the context's buffers and the call returns before the bytes are on the wire; the
 * context's background thread keeps sending them while the program goes on (at most
 * 32 MiB of such copies are in flight; a call that needs another buffer waits for one, up
 * to call_timeout_ms). Larger uploads, shared-memory sessions and contexts with a negative
 * batch_flush_us return once every byte is sent. Either way a failure to send closes the
 * session and the next call reports it; the executor's failures are deferred to the next
 * fence. NULL on error (td_last_error). */
td_tensor *td_from_host(td_context *ctx, td_dtype dt, int rank, const int64_t *dims,
                        const void *data);
/* Overwrite the whole contents of `t` with host data (td_nbytes(t) bytes, borrowed for the
 * call; sent as td_from_host's bytes are). */
td_status td_write(td_tensor *t, const void *data, size_t nbytes);

/* Upload flags for td_from_host_ex and td_write_ex (a bitwise OR; 0 is td_from_host's and
 * td_write's behaviour).
 * TD_WRITE_FRESH: the data will not be uploaded again (a training batch, a frame of a
 *   stream). A remote context then skips the blob offer for this upload, whatever its size:
 *   no fingerprint, no extra round trip, and the server keeps no copy of it for a later
 *   repeat, so every byte crosses the wire each time (README "Batching and uploads"). The
 *   tensor's contents and the ordering rules are those of td_write. Without the flag an
 *   upload of at least td_options.blob_min_bytes is offered ("weights cross the wire once
 *   per server"), which costs a fresh upload a round trip and the server a kept copy.
 *   Local contexts have no blob store; the flag changes nothing there. */
enum { TD_WRITE_FRESH = 1u << 0 };
/* td_from_host / td_write with upload flags. TD_EINVAL (NULL for td_from_host_ex, with
 * td_last_error "td_write_ex: unknown flags 0x6 (known: TD_WRITE_FRESH 0x1)") when `flags`
 * has a bit other than TD_WRITE_FRESH; otherwise the same contract, errors and
 * thread-safety as td_from_host / td_write. */
td_tensor *td_from_host_ex(td_context *ctx, td_dtype dt, int rank, const int64_t *dims,
                           const void *data, unsigned flags);
td_status td_write_ex(td_tensor *t, const void *data, size_t nbytes, unsigned flags);

/* ---- host buffers ----
 * td_host_alloc gives `nbytes` (> 0) of host memory, aligned to at least 64 bytes, that
 * td_from_host, td_write and td_read on the same context move with the fewest copies: on
 * a context whose transport is "shm" or "shm+ring" (td_context_transport) it is a piece of
 * the session's shared-memory region (page aligned), so a transfer of at least
 * td_options.shm_min_bytes from or into it is one copy, done by the server straight
 * between the region and the tensor (a plain pointer costs a second copy through the
 * region's slots). Such a write or read returns once the server has copied every byte, so
 * the buffer is the caller's again when it returns (it waits for the session's earlier
 * work, like td_read); on a GPU session the server pins the region for the device at the
 * first transfer of 1 MiB or more, so such transfers are one DMA. On a local context whose
 * device is a GPU that can pin host memory (CUDA, HIP) it is page-aligned memory pinned for
 * the device (page-locked: it counts against the host's unswappable memory until freed), and
 * a write or read of at least 64 KiB from or into it is one DMA, without the staging copy.
 * On any other context it is ordinary memory and transfers behave as for any pointer. The
 * bytes start undefined.
 * Returns NULL on error, td_last_error saying why: TD_EINVAL (ctx NULL, nbytes 0), TD_ENOMEM
 * (no memory; on a shared-memory context: no room left in the region, with the bytes in
 * use and the largest free piece; ask for more with td_options.shm_host_bytes).
 * Ownership: the context's until td_host_free or td_close (which frees every buffer still
 * held; a pointer into a closed context's region is no longer mapped). Thread-safety: as
 * the context (one thread at a time). Measured: BENCHMARKS.md, P3 same host. */
void *td_host_alloc(td_context *ctx, size_t nbytes);
/* Give back a buffer from td_host_alloc on the same context. NULL: no-op, TD_OK.
 * TD_EINVAL (with td_last_error) when `ptr` is not a live buffer of this context (another
 * context's, freed already, or not from td_host_alloc); nothing is freed then. */
td_status td_host_free(td_context *ctx, void *ptr);
/* Tensor filled with `value`, converted to dt by the td_cast rules (float to integer:
 * truncate toward zero, saturate, NaN -> 0; integers exact up to 2^53). */
td_tensor *td_full(td_context *ctx, td_dtype dt, int rank, const int64_t *dims, double value);
/* 1-D tensor [start, start+step, ...] with n elements, computed in double then cast. */
td_tensor *td_arange(td_context *ctx, td_dtype dt, int64_t n, double start, double step);
/* Counter-based random numbers: element i of the result depends only on (seed, i), so
 * every backend and every thread count draws the same tensor.
 * Generator: Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
 * SC'11); the exact (seed, i) -> value mapping is specified in engine/philox.h.
 * uniform: [low, high) (rounding may give `high` itself); normal: Box-Muller.
 * dt must be a float dtype; f16/bf16 take the f32 mapping's double value rounded once to the
 * dtype (engine/philox.h): uniform draws have the same bits on every backend, normal draws
 * agree to the few ulp by which the backends' log and cos differ.
 * TD_EINVAL (NULL, naming the values) when low > high or a bound is not finite, or when the
 * mean is not finite or stddev is negative or not finite. */
td_tensor *td_rand_uniform(td_context *ctx, td_dtype dt, int rank, const int64_t *dims,
                           uint64_t seed, double low, double high);
td_tensor *td_rand_normal(td_context *ctx, td_dtype dt, int rank, const int64_t *dims,
                          uint64_t seed, double mean, double stddev);

/* More counter-based random ops on the same Philox4x32-10 stream; engine/philox.h states each
 * (seed, i) -> value mapping exactly. Every one gives the same bits on every backend and
 * every thread count (only integer and IEEE basic double operations), and element i depends
 * only on (seed, i, attributes), never on the shape around it (RANDPERM: on n).
 *
 * td_bernoulli: same dtype (float) and shape as the probabilities `p`; element i is 1 when
 *   w_i * 2^-32 < p_i (w_i one 32-bit Philox word), else 0: P(1) is within 2^-32 of p_i.
 *   Values of p are not checked (they are data): p <= 0 or NaN gives 0, p >= 1 gives 1.
 * td_bernoulli_scalar: shape `dims`, any dtype dt (0/1, bool false/true), one p for every
 *   element; equal bit for bit to td_bernoulli of a tensor full of p. TD_EINVAL when p is
 *   outside [0, 1] or NaN ("bernoulli_scalar: p 1.5 is outside [0, 1]").
 * td_randint: integers uniform in [low, high), dt an integer dtype (i8 i16 i32 i64 u8):
 *   low + floor(x (high - low) / 2^64) with x 64 Philox bits (multiply-shift, no rejection:
 *   each value's probability is within 2^-64 of 1 / (high - low)). TD_EINVAL when
 *   low >= high, when [low, high) does not fit dt (high may be dt's maximum + 1), or when
 *   dt is not an integer dtype.
 * td_randperm: i64 [n], a random permutation of 0..n-1: the indices sorted by a 64-bit
 *   Philox key each (ties, of probability below n^2 / 2^65, keep index order). TD_EINVAL
 *   when n < 0 ("randperm: n -1 is negative").
 * td_trunc_normal: normal(mean, stddev) truncated to [a, b] (a and b absolute, as in
 *   torch.nn.init.trunc_normal_), dt a float dtype, by the inverse CDF: Phi and Phi^-1 in
 *   engine/normcdf.h (IEEE basic operations only; relative error below 1e-13), one 53-bit
 *   uniform per element, values clamped to [a, b] and rounded once to dt. Costs about a
 *   microsecond per element per core (two Halley steps of Phi). TD_EINVAL when mean, a or b
 *   is not finite, stddev is not finite and > 0, or a >= b.
 * All: NULL on error (td_last_error names the op and the values); TD_EINVAL for a bad rank
 *   or shape as td_full. Thread-safety: one thread per context. */
td_tensor *td_bernoulli(td_tensor *p, uint64_t seed);
td_tensor *td_bernoulli_scalar(td_context *ctx, td_dtype dt, int rank, const int64_t *dims,
                               uint64_t seed, double p);
td_tensor *td_randint(td_context *ctx, td_dtype dt, int rank, const int64_t *dims,
                      uint64_t seed, int64_t low, int64_t high);
td_tensor *td_randperm(td_context *ctx, int64_t n, uint64_t seed);
td_tensor *td_trunc_normal(td_context *ctx, td_dtype dt, int rank, const int64_t *dims,
                           uint64_t seed, double mean, double stddev, double a, double b);

/* Copy `nbytes` of t's data into `dst`; nbytes must equal td_nbytes(t). Waits for every op
 * that produces t. Returns TD_OK; TD_EINVAL (size); TD_EPOISONED (t depends on a failed op:
 * td_last_error names it); TD_EUNAVAILABLE/TD_ETIMEOUT (server gone or too slow). */
td_status td_read(td_tensor *t, void *dst, size_t nbytes);
/* Read a rank-0 or 1-element tensor as double. */
td_status td_read_scalar(td_tensor *t, double *out);

/* A read in flight (td_read_start); opaque, freed by td_read_finish or td_close. */
typedef struct td_pending_read td_pending_read;
/* Start a read of t's bytes into `dst` without waiting for the ops that produce t: the
 * read takes its place in the context's stream after every op recorded before it, and
 * td_read_finish waits for it. nbytes must equal td_nbytes(t), as for td_read. `dst` is
 * borrowed until td_read_finish(*out) returns: it must stay valid, and the caller must not
 * read or write it before then. t may be released (td_release) before the read finishes;
 * the read still completes. Reads started on one context may be finished in any order,
 * with other calls (td_read, td_fence, op calls, uploads) in between.
 * Over gRPC (TCP, a unix socket without shared memory, and on a "unix:" context that
 * attached a shared-memory region a read smaller than td_options.shm_min_bytes) the
 * request goes out at once and its reply is taken in by whatever call next waits on the
 * session. On local devices, and for a read of at least shm_min_bytes over shared memory
 * (it goes through the region's slots), the read completes before td_read_start returns,
 * and td_read_finish returns its status.
 * Returns TD_OK with *out set; otherwise *out is NULL (when out is not NULL) and:
 * TD_EINVAL as td_read (t NULL, nbytes wrong, dst NULL, a graph placeholder, while
 * capturing), or out NULL; TD_EBUSY when TD_PENDING_READS_MAX reads are pending on the
 * context (finish some first; nothing was started); TD_ENOMEM; the session's failure
 * (TD_ECLOSED, TD_EUNAVAILABLE, ...) when the request could not be sent. Failures of the
 * read itself (TD_EPOISONED, a session lost while waiting) are td_read_finish's.
 * Thread-safety: one thread per context, as td_read. */
#define TD_PENDING_READS_MAX 64
td_status td_read_start(td_tensor *t, void *dst, size_t nbytes, td_pending_read **out);
/* Wait until the bytes of read p are in its dst, free p, and return the read's status:
 * TD_OK; TD_EPOISONED, TD_ENOTFOUND, ... as td_read; TD_EUNAVAILABLE, TD_ETIMEOUT or
 * TD_ECLOSED when the session was lost before the read completed (dst then holds
 * unspecified bytes). On failure td_last_error names td_read_finish and the cause.
 * TD_EINVAL for p NULL. p must come from td_read_start on a context not yet closed and be
 * finished once: td_close frees the reads still pending without writing to their dst
 * (free them once td_close has returned), and p must not be used after either.
 * Thread-safety: one thread per context, as td_read. */
td_status td_read_finish(td_pending_read *p);
/* Wait until every recorded op has executed. Returns the first executor error since the
 * previous fence (and forgets it), else TD_OK. */
td_status td_fence(td_context *ctx);
/* Release the handle. The executor frees the memory once nothing needs it. NULL is a no-op.
 * Like free(): releasing a handle twice, or using it after td_release or td_close, is
 * undefined behaviour. */
void td_release(td_tensor *t);

/* ---- elementwise (numpy broadcasting, both inputs of one dtype; no implicit promotion) ---- */
td_tensor *td_neg(td_tensor *x);
td_tensor *td_abs(td_tensor *x);
td_tensor *td_exp(td_tensor *x);   /* float dtypes only, like log..sigmoid */
td_tensor *td_log(td_tensor *x);
td_tensor *td_sqrt(td_tensor *x);
td_tensor *td_rsqrt(td_tensor *x);
td_tensor *td_tanh(td_tensor *x);
td_tensor *td_sigmoid(td_tensor *x);
td_tensor *td_relu(td_tensor *x);
/* SiLU (swish), x / (1 + e^-x), float dtypes only: x * sigmoid(x) of Elfwing et al. 2017
 * ("Sigmoid-weighted linear units"). Underflows to -0 below about -88 (f32) or -709 (f64)
 * and is NaN at -inf, as x * sigmoid(x) is. Lazy like every op; NULL on a bad argument
 * (td_last_error names td_silu). Thread-safety: one thread per context. */
td_tensor *td_silu(td_tensor *x);
td_tensor *td_add(td_tensor *a, td_tensor *b);
td_tensor *td_sub(td_tensor *a, td_tensor *b);
td_tensor *td_mul(td_tensor *a, td_tensor *b);
td_tensor *td_div(td_tensor *a, td_tensor *b); /* integer division truncates; x/0 gives 0 */
/* a^b, numeric dtypes. Floats: C99 pow. Integers: exact modulo 2^width (overflow wraps,
 * computed by repeated squaring); b < 0 gives 1 / a^-b truncated toward zero: 1 for a = 1,
 * +-1 for a = -1 (by b's parity), 0 otherwise (0 for a = 0 too, like x / 0 = 0). */
td_tensor *td_pow(td_tensor *a, td_tensor *b);
td_tensor *td_maximum(td_tensor *a, td_tensor *b);
td_tensor *td_minimum(td_tensor *a, td_tensor *b);
td_tensor *td_eq(td_tensor *a, td_tensor *b); /* comparisons give TD_BOOL */
td_tensor *td_ne(td_tensor *a, td_tensor *b);
td_tensor *td_lt(td_tensor *a, td_tensor *b);
td_tensor *td_le(td_tensor *a, td_tensor *b);
td_tensor *td_gt(td_tensor *a, td_tensor *b);
td_tensor *td_ge(td_tensor *a, td_tensor *b);
/* cond (TD_BOOL) ? a : b, all three broadcast together; a and b of one dtype. */
td_tensor *td_where(td_tensor *cond, td_tensor *a, td_tensor *b);
/* Conversion rules, for every pair of dtypes:
 *  - float -> integer: NaN gives 0; otherwise truncate toward zero and saturate to the
 *    target's range (i8 -128..127, i16 -32768..32767, u8 0..255, i32, i64; -inf gives the
 *    minimum, +inf the maximum);
 *  - integer -> integer: two's-complement wrap (keep the low bits), as numpy's astype;
 *  - anything -> bool is x != 0 (NaN gives 1); bool -> anything is 0 or 1;
 *  - to a narrower float (f64 -> f32, anything -> f16 or bf16, f16 <-> bf16): round once to
 *    nearest, ties to even, from the exact source value (an i64 or f64 is not rounded to
 *    f32 first); results below the smallest subnormal round to +-0, subnormals are kept,
 *    values past the largest finite (f16 65504, bf16 about 3.39e38) become +-inf; NaN
 *    stays a quiet NaN of the same sign;
 *  - to a wider float (f16/bf16 -> f32 or f64, f32 -> f64, small integers): exact.
 * Elementwise f16/bf16 arithmetic is computed in f32 and rounded once to the dtype. */
td_tensor *td_cast(td_tensor *x, td_dtype dt);

/* ---- elementwise math (issue 13) ----
 * Common rules for every function below (docs/ops.md has each op's row: dtypes, whether it
 * is a primitive or lowered, its accuracy class):
 *  - Lazy like every op: the result is a new handle of the shape given, computed when read.
 *    Returns NULL on a bad argument, with td_last_status TD_EINVAL and td_last_error naming
 *    the function and the offending values (a NULL input, a wrong dtype, shapes that do not
 *    broadcast, a bad attribute). Thread-safety: one thread per context.
 *  - Shapes: unary functions keep x's shape (rank 0 and zero-length dims included); binary
 *    ones numpy-broadcast a and b (both of one dtype; no implicit promotion).
 *  - "float" means f32, f64, f16, bf16. f16/bf16 are computed in f32 and rounded once to the
 *    dtype; float attributes are converted to the computing type (f32 for f16/bf16).
 *  - Accuracy: IEEE-exact functions (floor, ceil, round, trunc, sign, reciprocal, clamp,
 *    copysign, fmod, remainder, floor_divide, leaky_relu, nan_to_num) give the same bits on
 *    every backend; the transcendental ones follow the backend's math library (glibc on the
 *    CPU, CUDA's libdevice on the GPU) within the ulp bound of their row, which
 *    tests/unit/backends/conformance.c checks. Formulas are the C99 / IEEE 754-2008
 *    definitions of the functions named, unless stated. */

/* Trigonometric and hyperbolic functions of float x (radians), C99 7.12.4-5: sin, cos,
 * tan; asin and acos (NaN outside [-1, 1]), atan; sinh, cosh, asinh, acosh (NaN below 1),
 * atanh (+-inf at +-1, NaN outside [-1, 1]). Errors: TD_EINVAL for a non-float x. */
td_tensor *td_sin(td_tensor *x);
td_tensor *td_cos(td_tensor *x);
td_tensor *td_tan(td_tensor *x);
td_tensor *td_asin(td_tensor *x);
td_tensor *td_acos(td_tensor *x);
td_tensor *td_atan(td_tensor *x);
td_tensor *td_sinh(td_tensor *x);
td_tensor *td_cosh(td_tensor *x);
td_tensor *td_asinh(td_tensor *x);
td_tensor *td_acosh(td_tensor *x);
td_tensor *td_atanh(td_tensor *x);
/* The error function erf(x) = 2/sqrt(pi) int_0^x e^(-t^2) dt (C99 7.12.8.1), float x. */
td_tensor *td_erf(td_tensor *x);
/* GELU, x Phi(x) with Phi the standard normal CDF (Hendrycks & Gimpel, "Gaussian Error
 * Linear Units", 2016), float x. tanh_approximation false: the exact form x/2 (1 + erf(x /
 * sqrt 2)), computed as x/2 erfc(-x / sqrt 2) so it keeps its relative accuracy for
 * negative x; true: the paper's approximation x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
 * (PyTorch's approximate='tanh'), computed as x / (1 + e^(-2u)). gelu(-inf) is NaN in both
 * (-inf * 0, as PyTorch). Errors: TD_EINVAL for a non-float x. */
td_tensor *td_gelu(td_tensor *x, bool tanh_approximation);
/* softplus: x where beta x > threshold, else log(1 + e^(beta x)) / beta (torch.nn.Softplus's
 * definition), float x. Errors: TD_EINVAL for a non-float x, a beta that is 0 or not finite,
 * a threshold that is not finite (PyTorch's defaults: beta 1, threshold 20). */
td_tensor *td_softplus(td_tensor *x, double beta, double threshold);
/* leaky ReLU: x > 0 ? x : slope x (NaN stays NaN, -0 gives -0 * slope), float x (Maas et
 * al. 2013). Errors: TD_EINVAL for a non-float x or a non-finite slope. */
td_tensor *td_leaky_relu(td_tensor *x, double slope);
/* ELU: x > 0 ? x : alpha (e^x - 1), by expm1 (Clevert et al., "Fast and accurate deep
 * network learning by exponential linear units", 2015), float x. Errors: TD_EINVAL for a
 * non-float x or a non-finite alpha. */
td_tensor *td_elu(td_tensor *x, double alpha);
/* log(1 + x) and e^x - 1, accurate near 0 (C99 7.12.6.9, 7.12.6.3); log2 and log10 (C99
 * 7.12.6.10, 7.12.6.8): -inf at 0, NaN below. Float x. */
td_tensor *td_log1p(td_tensor *x);
td_tensor *td_expm1(td_tensor *x);
td_tensor *td_log2(td_tensor *x);
td_tensor *td_log10(td_tensor *x);
/* Rounding to an integral value, float x, exact: floor (toward -inf), ceil (toward +inf),
 * round (to nearest, ties to even: 0.5 -> 0, 1.5 -> 2, 2.5 -> 2, -0.5 -> -0; C99 rint in
 * the default rounding mode; note C's round() rounds ties away from zero, this does not),
 * trunc (toward zero, -0.5 -> -0). +-0, +-inf and NaN come back unchanged. For integer
 * tensors these would be the identity and are refused (TD_EINVAL): skip the call. */
td_tensor *td_floor(td_tensor *x);
td_tensor *td_ceil(td_tensor *x);
td_tensor *td_round(td_tensor *x);
td_tensor *td_trunc(td_tensor *x);
/* sign: 1, -1 or 0, any numeric dtype (bool refused). Floats: +-0 gives +0 (numpy and
 * PyTorch agree), NaN stays NaN (numpy's rule; PyTorch 1.13 gives 0). u8: 0 or 1. */
td_tensor *td_sign(td_tensor *x);
/* 1 / x, float x, IEEE-rounded (1 / +-0 = +-inf, 1 / +-inf = +-0). */
td_tensor *td_reciprocal(td_tensor *x);
/* Predicates with a TD_BOOL result of x's shape: isnan (any dtype: false for integers and
 * bool), isinf (+-inf), isfinite (neither inf nor NaN); isinf and isfinite take numeric
 * dtypes (bool refused) and are false / true for every integer. Lowered by the engine onto
 * comparisons (docs/ops.md), so every backend gives the same answer. */
td_tensor *td_isnan(td_tensor *x);
td_tensor *td_isinf(td_tensor *x);
td_tensor *td_isfinite(td_tensor *x);
/* clamp with scalar bounds: min(max(x, lo), hi) elementwise, any numeric dtype. NaN stays
 * NaN; lo = -INFINITY or hi = INFINITY leaves that side open. Integer x: the bounds are
 * converted by the cast rules (td_cast: toward zero, saturating), which equals clamping in
 * the reals and then converting. Errors: TD_EINVAL for bool x, a NaN bound, or lo > hi
 * (PyTorch returns hi everywhere then; here it is refused, since it is always a mistake). */
td_tensor *td_clamp(td_tensor *x, double lo, double hi);
/* clamp with tensor bounds: minimum(maximum(x, lo), hi), x, lo and hi of one numeric dtype,
 * broadcast together (output shape: the broadcast of all three). Lowered onto MAXIMUM and
 * MINIMUM; NaN in any operand propagates, and where lo > hi the result is hi (values are
 * only known when the op runs, so this cannot be refused). */
td_tensor *td_clamp_tensor(td_tensor *x, td_tensor *lo, td_tensor *hi);
/* Replace NaN by `nan`, +inf by `posinf`, -inf by `neginf` in float x (numpy.nan_to_num /
 * torch.nan_to_num). posinf = INFINITY and neginf = -INFINITY ask for PyTorch's defaults:
 * the dtype's largest and lowest finite values (f16 65504, bf16 about 3.39e38, f32
 * FLT_MAX, f64 DBL_MAX). The values are converted to the dtype (round to nearest; past its
 * range they become +-inf). Errors: TD_EINVAL for a non-float x. */
td_tensor *td_nan_to_num(td_tensor *x, double nan, double posinf, double neginf);

/* atan2(a, b): the angle of the point (b, a) in [-pi, pi] (C99 7.12.4.4, signed zeros
 * included); hypot(a, b) = sqrt(a^2 + b^2) without undue overflow, inf if either is inf
 * even when the other is NaN (C99 7.12.7.3); copysign(a, b): |a| with b's sign bit (exact,
 * NaN signs included). Float dtypes only. */
td_tensor *td_atan2(td_tensor *a, td_tensor *b);
td_tensor *td_hypot(td_tensor *a, td_tensor *b);
td_tensor *td_copysign(td_tensor *a, td_tensor *b);
/* Remainders and floor division, numeric dtypes (bool refused), exact:
 *  - fmod: a - trunc(a / b) b, the sign of a (C99 fmod; fmod(x, 0) is NaN for floats);
 *  - remainder: a - floor(a / b) b, the sign of b (Python's %): floats follow numpy's
 *    remainder (a zero result takes b's sign; x % 0 is NaN, inf % y is NaN);
 *  - floor_divide: floor(a / b) (Python's //): floats follow numpy's divmod rule (from the
 *    exact fmod; x // 0 is a / b, i.e. +-inf or NaN);
 *  - integers never trap: x // 0 = 0, fmod(x, 0) = remainder(x, 0) = x, MIN // -1 = MIN
 *    (wraps, like td_div), so a == (a // b) * b + remainder(a, b) for every a, b. */
td_tensor *td_fmod(td_tensor *a, td_tensor *b);
td_tensor *td_remainder(td_tensor *a, td_tensor *b);
td_tensor *td_floor_divide(td_tensor *a, td_tensor *b);
/* Logical ops, any dtype in (a and b of one dtype), TD_BOOL out: an element is true when
 * it is not 0 (NaN is true, -0 is false; bool bytes 2..255 are true). logical_not(x) is
 * x == 0 (lowered onto logical_or/eq/logical_xor). */
td_tensor *td_logical_and(td_tensor *a, td_tensor *b);
td_tensor *td_logical_or(td_tensor *a, td_tensor *b);
td_tensor *td_logical_xor(td_tensor *a, td_tensor *b);
td_tensor *td_logical_not(td_tensor *x);
/* Bitwise ops on integer dtypes and bool (two's complement; on bool they are the logical
 * ops and give 0/1 bytes). Result dtype: the inputs'. */
td_tensor *td_bitwise_and(td_tensor *a, td_tensor *b);
td_tensor *td_bitwise_or(td_tensor *a, td_tensor *b);
td_tensor *td_bitwise_xor(td_tensor *a, td_tensor *b);
td_tensor *td_bitwise_not(td_tensor *x);
/* Shifts of integer a by b bits (integer dtypes only; b of a's dtype, broadcast). Left:
 * the bits shifted out are lost (a signed result wraps). Right: arithmetic (sign-filling)
 * for signed dtypes, logical for u8. A count b < 0 or b >= the width in bits shifts every
 * bit out: the result is 0, or -1 for a right shift of a negative a (C leaves these
 * undefined; this is PyTorch's CPU result for counts >= width). */
td_tensor *td_shift_left(td_tensor *a, td_tensor *b);
td_tensor *td_shift_right(td_tensor *a, td_tensor *b);
/* where with scalars: cond ? a : b with one or both of a, b a double, converted to the
 * other operand's dtype (td_where_scalars: to dt) by the cast rules. A client-side
 * lowering: the scalars are recorded as rank-0 td_full tensors and a td_where (the same
 * ops on the wire). cond must be TD_BOOL; shapes broadcast. Errors: TD_EINVAL as td_where
 * (and for an unknown dt), each naming this function. */
td_tensor *td_where_scalar_a(td_tensor *cond, double a, td_tensor *b);
td_tensor *td_where_scalar_b(td_tensor *cond, td_tensor *a, double b);
td_tensor *td_where_scalars(td_tensor *cond, double a, double b, td_dtype dt);
/* Scalar helpers: a rank-0 tensor of x's dtype, then the binary op. */
td_tensor *td_add_scalar(td_tensor *x, double v);
td_tensor *td_mul_scalar(td_tensor *x, double v);

/* ---- reductions over `naxes` axes (negative axes count from the end; naxes == 0 with
 * axes == NULL means all axes). keepdims keeps reduced axes with size 1. Reducing a
 * zero-length axis: sum 0, prod 1, mean NaN, max/min/argmax/argmin fail with TD_EINVAL.
 * Float sum, mean and prod accumulate in double and round once to the result dtype (f16
 * and bf16 inputs are widened to f32 exactly and folded like f32). Their
 * bits depend only on x's shape, the reduced axes and the values: never on the thread
 * count, on timing, or on the vector instructions of the CPU running them. On the CPU
 * device, when x's innermost non-1 axis is reduced, each output's elements (in index order;
 * contiguous stretches of them are its runs) are cut into blocks of 4096 (runs longer than
 * that cut into pieces of 4096, shorter runs grouped 4096 / run-length whole runs to a
 * block); a block is folded into 32 interleaved lanes (element i of a run to lane i % 32,
 * ascending), the lanes are combined pairwise (lane l += lane l + 16, then + 8, + 4, + 2,
 * + 1) and the blocks pairwise in order (pairs, pairs of pairs, ...; an unpaired last
 * subtree joins where it first has a partner). When that axis is kept, each output is
 * folded in ascending index order. GPU devices use their own fixed order. Integer sums and
 * products wrap in the result dtype (so their order does not matter). max/min give what
 * an ascending fold gives: NaN propagates (the last NaN in index order), of equal values
 * (0 and -0) the first. argmax/argmin take exactly one axis and give TD_I64: the first
 * index of the extreme, or of the first NaN; td_argmax_axes/td_argmin_axes below take
 * several axes or all of them. ---- */
td_tensor *td_sum(td_tensor *x, int naxes, const int *axes, bool keepdims);
td_tensor *td_mean(td_tensor *x, int naxes, const int *axes, bool keepdims);
td_tensor *td_max(td_tensor *x, int naxes, const int *axes, bool keepdims);
td_tensor *td_min(td_tensor *x, int naxes, const int *axes, bool keepdims);
td_tensor *td_prod(td_tensor *x, int naxes, const int *axes, bool keepdims);
td_tensor *td_argmax(td_tensor *x, int axis, bool keepdims);
td_tensor *td_argmin(td_tensor *x, int axis, bool keepdims);

/* ---- more reductions, over axes as above (naxes == 0 with axes == NULL: every axis;
 * negative axes count from the end; keepdims keeps reduced axes with size 1). Each output
 * folds its n reduced elements in row-major order over the reduced axes, in double (f16,
 * bf16 and f32 widened exactly), and rounds once to the result dtype; the bits do not
 * depend on thread count or timing (backends/cpu/cpu_stats.c, backends/gpu/gpu_stats.cu;
 * other devices are held to the CPU within tests/unit/backends/conformance.c's bound).
 * Returns a new handle, or NULL with td_last_error naming the function and the values: a
 * NULL x, a bad axes list, a dtype outside the one stated, a bad attribute below.
 * Thread-safety: one thread per context. ----
 *
 * td_var: float x (f16 bf16 f32 f64), result x's dtype. mean = (sum x) / n, then
 *   var = sum (x - mean)^2 / max(0, n - correction)   (torch.var's definition, two passes).
 *   correction >= 0 (1: the unbiased sample variance, 0: the population variance); a
 *   negative or NaN correction fails at record time ("var: correction -1 is negative").
 *   n - correction <= 0 divides by 0, as PyTorch does: +inf, or NaN when the sum of squares
 *   is 0 (one element with correction 1) or n is 0 (an empty axis). A NaN or inf in x gives
 *   NaN.
 * td_std: sqrt(td_var), the same rules. */
td_tensor *td_var(td_tensor *x, int naxes, const int *axes, bool keepdims, double correction);
td_tensor *td_std(td_tensor *x, int naxes, const int *axes, bool keepdims, double correction);
/* td_logsumexp: float x, result x's dtype: m + log(sum exp(x - m)) with m = max x, which
 *   cannot overflow (torch.logsumexp). A NaN gives NaN; m = +inf gives +inf, all -inf gives
 *   -inf; an empty axis gives -inf (the log of an empty sum). */
td_tensor *td_logsumexp(td_tensor *x, int naxes, const int *axes, bool keepdims);
/* td_norm: float x, result x's dtype, the vector p-norm of torch.linalg.vector_norm:
 *   p = 1: sum |x| (run as abs then sum: the op table lowers it); p = +inf: max |x|, p = -inf:
 *   min |x| (abs then max / min: an empty axis fails with TD_EINVAL, as max does);
 *   p = 2: sqrt(sum x^2); p = 0: the count of elements != 0 (NaN counts); any other p, also
 *   negative: (sum |x|^p)^(1/p). A NaN in x gives NaN (p = +-inf: NaN propagates as in
 *   max). An empty axis gives 0 (p < 0: +inf). A NaN p fails at record time ("norm: p is
 *   NaN"). x^2 and |x|^p are computed in double, so f16 inputs above 256 do not overflow. */
td_tensor *td_norm(td_tensor *x, double p, int naxes, const int *axes, bool keepdims);
/* td_any / td_all: x of any dtype, result TD_BOOL: whether some / every element is != 0
 *   (a NaN is != 0; a bool byte is true when nonzero). An empty axis gives false / true. */
td_tensor *td_any(td_tensor *x, int naxes, const int *axes, bool keepdims);
td_tensor *td_all(td_tensor *x, int naxes, const int *axes, bool keepdims);
/* td_argmax_axes / td_argmin_axes: x of any dtype, result TD_I64: the position of the first
 *   largest / smallest element (or of the first NaN) among the reduced elements counted in
 *   row-major order over the reduced axes — over every axis (naxes 0, axes NULL) that is the
 *   flat index, as torch.argmax(x) without dim gives. An empty reduced axis fails with
 *   TD_EINVAL. The same ARGMAX/ARGMIN ops as td_argmax with an axes mask of several bits,
 *   so the wire format of one-axis calls is unchanged. */
td_tensor *td_argmax_axes(td_tensor *x, int naxes, const int *axes, bool keepdims);
td_tensor *td_argmin_axes(td_tensor *x, int naxes, const int *axes, bool keepdims);

/* ---- scans and sorts along one axis (negative counts from the end; a rank-0 x is one
 * element along axis 0 or -1, as in PyTorch). Returns a new handle, or NULL with
 * td_last_error naming the function and the values (NULL x, axis out of range, bad dtype,
 * bad k). Thread-safety: one thread per context. ----
 *
 * td_cumsum / td_cumprod: numeric x (not bool), result x's dtype and shape:
 *   y_i = x_0 + ... + x_i (x_0 * ... * x_i) along the axis. Accumulated in double for f32 and
 *   f64, in f32 for f16 and bf16, rounded once per output element; integers wrap in the
 *   dtype. The CPU folds each line in index order; GPU devices use a fixed blocked order
 *   that depends on the shape only (deterministic), within conformance.c's bound. */
td_tensor *td_cumsum(td_tensor *x, int axis);
td_tensor *td_cumprod(td_tensor *x, int axis);
/* td_sort: x of any dtype, result x's dtype and shape; td_argsort: the TD_I64 indices of the
 *   same order (sort(x) = gather(x, argsort(x))). Stable: equal values keep their index
 *   order, in both directions. Order: numbers as numbers (-0.0 equal to 0.0), NaN above
 *   +inf — NaNs last ascending, first descending, as torch.sort; bool false < true. The
 *   values are the input's own bytes (NaN payloads, -0.0 kept). Bit for bit on every
 *   device. */
td_tensor *td_sort(td_tensor *x, int axis, bool descending);
td_tensor *td_argsort(td_tensor *x, int axis, bool descending);
/* td_topk: x of any dtype; the k largest (largest true) or smallest elements along the axis
 *   in that order, result x's dtype with the axis of length k; when indices is non-NULL,
 *   *indices receives a second new handle, TD_I64 of the same shape, with their positions
 *   (the caller releases both). Ties go to the lower index; NaN counts as the largest value
 *   (the descending / ascending td_sort's first k, as torch.topk). 0 <= k <= the axis length
 *   (rank 0: k = 1), else NULL ("topk_values: k 5 exceeds the length 3 of axis 1").
 *   Two ops of the table (TOPK_VALUES, TOPK_INDICES), because an op has one output;
 *   *indices is untouched on failure. */
td_tensor *td_topk(td_tensor *x, int64_t k, int axis, bool largest, td_tensor **indices);

/* ---- convolution, pooling, interpolation (NCHW) ----
 * Tensors are [N, C, *spatial] with 1, 2 or 3 spatial dims (rank 3, 4, 5: NCW, NCHW,
 * NCDHW), row-major, float dtypes (f32, f64, f16, bf16; one dtype for every operand). The
 * spatial lists below (stride, padding, sizes ...) hold one entry per spatial dim of x, in
 * order; entries beyond them are ignored. Definitions and output sizes are PyTorch's
 * (torch.nn.functional.conv1d/2d/3d, conv_transpose1d/2d, max_pool1d/2d, avg_pool1d/2d,
 * adaptive_avg_pool1d/2d, interpolate) and engine/window.c states them. Each function
 * records one op of the table (docs/ops.md, family conv or pool) and returns a new handle,
 * or NULL with td_last_error naming the function, the op and the values: NULL input, rank
 * not 3..5, mismatched ranks or dtypes, channels not divisible by groups, a weight of the
 * wrong shape, a kernel larger than the padded input, a stride / dilation / kernel < 1, a
 * negative padding, a pooling padding above half the kernel, an output size below 1.
 * A zero-size batch (N = 0) is fine; zero-size spatial dims are refused.
 * Accuracy: conv ops within 2 K u (|x| conv |w|) + 1 ulp of exact (K the products summed per
 * output, u the unit roundoff of f32 for f32/f16/bf16 and of f64 for f64: f16/bf16 multiply
 * and accumulate in f32 and round once); pooling and interpolation sum in f32 (f64 for f64)
 * in a fixed order and round once. On one device the bits never depend on thread count or
 * timing: no float atomics; every reduction (the weight gradient's sum over the batch, the
 * pool gradients' sums over windows) runs in a fixed order. CPU: im2col + single-threaded
 * OpenBLAS GEMM per block (backends/cpu/cpu_conv.c); a build with oneDNN (the default where
 * libdnnl-dev is installed; -Ddnnl=disabled turns it off) runs f32 td_conv,
 * td_conv_transpose and td_conv_input_grad with a batch of 4 or more on oneDNN's
 * convolution / deconvolution instead (cpu_dnnl_conv.c: one OpenMP thread per block of
 * images, so still independent of the thread count; IEEE subnormals; the bits depend on the
 * ISA oneDNN picks for the CPU). Thread-safety: one thread per context. */

/* Convolution attributes; zero-initialised means stride 1, dilation 1, no padding,
 * groups 1 (so a zero entry means 1 for stride and dilation; negative values are refused).
 * pad_same: PyTorch's padding="same" — total padding dilation (k - 1) per dim, pad_lo =
 * total / 2, pad_hi = the rest (so even kernels pad one more at the end); needs stride 1 and
 * is td_conv / td_conv_input_grad / td_conv_weight_grad only. output_padding: td_conv_transpose only,
 * 0 <= output_padding < max(stride, dilation) per dim, added at the high end. */
typedef struct td_conv_params {
    int64_t stride[3];
    int64_t dilation[3];
    int64_t pad_lo[3], pad_hi[3]; /* zeros added before / after each spatial dim */
    bool pad_same;                /* overrides pad_lo / pad_hi */
    int64_t groups;               /* 0 means 1 */
    int64_t output_padding[3];
} td_conv_params;

/* td_conv: x [N, C, *L], weight [Cout, C / groups, *k], bias [Cout] or NULL ->
 *   [N, Cout, *O], O = floor((L + pad_lo + pad_hi - dilation (k - 1) - 1) / stride) + 1:
 *   y[n, o, j] = bias[o] + sum over c in o's group, kernel offsets t of
 *   x[n, c, j stride + t dilation - pad_lo] w[o, c, t] (zeros outside x: a cross-correlation,
 *   as torch's conv*d). groups > 1: channel groups of C / groups inputs and Cout / groups
 *   outputs (groups = C = Cout: depthwise). p NULL: the defaults. */
td_tensor *td_conv(td_tensor *x, td_tensor *weight, td_tensor *bias, const td_conv_params *p);
/* td_conv_transpose: x [N, Cin, *L], weight [Cin, Cout / groups, *k] (torch's layout),
 *   bias [Cout] or NULL -> [N, Cout, *O], O = (L - 1) stride - pad_lo - pad_hi +
 *   dilation (k - 1) + output_padding + 1 (torch's padding is pad_lo = pad_hi): the adjoint
 *   of td_conv with the same weight, y[n, o, i] = bias[o] + sum over c, t, j with
 *   j stride + t dilation - pad_lo = i of x[n, c, j] w[c, o, t]. */
td_tensor *td_conv_transpose(td_tensor *x, td_tensor *weight, td_tensor *bias,
                             const td_conv_params *p);
/* td_conv_input_grad: the gradient dL/dx of td_conv(x, weight, NULL, p) for an x of spatial
 *   size input_size (one entry per spatial dim), from dy [N, Cout, *O] -> [N, C, *input_size]:
 *   one CONV_TRANSPOSE op (the adjoint above), with pad_hi reduced by the rows the
 *   convolution's floor dropped, so the output has x's size exactly. */
td_tensor *td_conv_input_grad(td_tensor *dy, td_tensor *weight, const int64_t *input_size,
                              const td_conv_params *p);
/* td_conv_weight_grad: the gradient dL/dw of td_conv(x, w, NULL, p) for a w of spatial size
 *   kernel_size, from x [N, C, *L] and dy [N, Cout, *O] (O must be the convolution's) ->
 *   [Cout, C / groups, *kernel_size]: dw[o, c, t] = sum over n, j of dy[n, o, j]
 *   x[n, c, j stride + t dilation - pad_lo], summed over the batch in order. The bias
 *   gradient is td_sum of dy over the batch and spatial axes. Also the weight gradient of
 *   td_conv_transpose(x', w) with the roles swapped: td_conv_weight_grad(dy', x'). */
td_tensor *td_conv_weight_grad(td_tensor *x, td_tensor *dy, const int64_t *kernel_size,
                               const td_conv_params *p);

/* Pooling attributes. kernel: required, >= 1 per dim. stride: 0 means the kernel (torch's
 * default). padding: implicit -inf (max) or 0 (avg) on both sides, at most kernel / 2.
 * dilation: max pooling only, 0 means 1. ceil_mode: ceil instead of floor in the output
 * size, never starting a window in the right padding. exclude_pad: avg pooling divides by
 * the in-bounds count (torch's count_include_pad=False); false (the default) divides by
 * the window clipped to the padded input (count_include_pad=True). */
typedef struct td_pool_params {
    int64_t kernel[3];
    int64_t stride[3];
    int64_t padding[3];
    int64_t dilation[3];
    bool ceil_mode;
    bool exclude_pad;
} td_pool_params;

/* td_max_pool: x [N, C, *L] -> [N, C, *O], O = floor or ceil((L + 2 padding -
 *   dilation (kernel - 1) - 1) / stride) + 1: the largest in-bounds element of each window
 *   (window order row-major; ties keep the first; a NaN wins, the last NaN of the window as
 *   torch's CPU kernel). indices non-NULL: *indices gets a second handle, TD_I64 [N, C, *O],
 *   the flat position of each maximum in its [*L] plane (torch's return_indices); both are
 *   the caller's to release; *indices is untouched on failure. A window with no in-bounds
 *   element (dilation can step over the whole input) gives -inf and index -1. */
td_tensor *td_max_pool(td_tensor *x, const td_pool_params *p, td_tensor **indices);
/* td_max_pool_backward: dy [N, C, *O] and indices (i32 or i64, dy's shape, from td_max_pool
 *   with the same p on an x of spatial size input_size) -> dx [N, C, *input_size]:
 *   dx[i] = sum of dy[j] over the windows j that contain i and whose index is i, in
 *   ascending j (an index naming no element of its window adds nothing). */
td_tensor *td_max_pool_backward(td_tensor *dy, td_tensor *indices, const int64_t *input_size,
                                const td_pool_params *p);
/* td_avg_pool: x [N, C, *L] -> [N, C, *O] (O as td_max_pool with dilation 1): the sum of the
 *   in-bounds window over the divisor of exclude_pad above. td_avg_pool_backward: dy
 *   [N, C, *O] -> dx [N, C, *input_size], dx[i] = sum over windows j holding i of
 *   dy[j] / divisor[j]. p->dilation must be 0 or 1. */
td_tensor *td_avg_pool(td_tensor *x, const td_pool_params *p);
td_tensor *td_avg_pool_backward(td_tensor *dy, const int64_t *input_size,
                                const td_pool_params *p);
/* td_adaptive_avg_pool: x [N, C, *L] -> [N, C, *output_size] (each >= 1): output j averages
 *   x over [floor(j L / O), ceil((j + 1) L / O)) per dim (torch's adaptive_avg_pool).
 *   td_adaptive_avg_pool_backward: dy [N, C, *O] -> [N, C, *input_size], dx[i] = sum over
 *   the windows j holding i of dy[j] / |window j|. */
td_tensor *td_adaptive_avg_pool(td_tensor *x, const int64_t *output_size);
td_tensor *td_adaptive_avg_pool_backward(td_tensor *dy, const int64_t *input_size);

enum td_interp_mode {
    TD_INTERP_NEAREST = 0, /* torch mode="nearest": source floor(j L / O) (in float) */
    TD_INTERP_LINEAR = 1,  /* "linear" / "bilinear" / "trilinear" by the spatial rank */
};
/* td_interpolate: x [N, C, *L] -> [N, C, *output_size] (each >= 1), torch.nn.functional.
 *   interpolate with size=output_size. Linear: source s = j (L - 1) / (O - 1) with
 *   align_corners (0 when O = 1), else max(0, (j + 0.5) L / O - 0.5); the two neighbours
 *   floor(s) and floor(s) + 1 (clipped to L - 1), weighted 1 - frac(s) and frac(s), dim by dim
 *   (f32 arithmetic for f32/f16/bf16, f64 for f64). align_corners must be false for
 *   nearest. */
td_tensor *td_interpolate(td_tensor *x, const int64_t *output_size, enum td_interp_mode mode,
                          bool align_corners);

/* ---- linear algebra ----
 * Batched matmul: a [..., M, K] x b [..., K, N] -> [..., M, N]; ranks >= 2, batch dims
 * broadcast; f32/f64 through BLAS on the CPU, cuBLAS on CUDA; f16/bf16 on the CPU are
 * widened to f32, multiplied and summed in f32 by the same tiled sgemm and rounded once to
 * the dtype (a build with -Ddnnl_bf16_matmul=true runs bf16 on oneDNN tiles instead: f32
 * accumulation, subnormals flushed to zero, bits that depend on oneDNN's ISA choice); on
 * CUDA through cuBLAS GemmEx with f32 compute (tensor cores), on HIP by its
 * tiled kernel in f32, each output rounded once. Full precision unless the
 * context was opened with td_options.matmul_allow_tf32 (then as td_matmul_ex with
 * TD_MATMUL_ALLOW_TF32).
 * Determinism on the CPU device: the result bits are a function of the shapes and the data
 * alone, whatever the device's thread count (TENSORD_CPU_THREADS, tensord
 * --device-threads), OPENBLAS_NUM_THREADS or the timing, so local:cpu and a remote cpu
 * device agree bit for bit when both run the same OpenBLAS build on the same CPU model
 * (OpenBLAS picks its kernels per CPU model; other machines may differ in the last bits,
 * within the bound of td_matmul_ex). The CPU device sets OpenBLAS to one thread for the
 * whole process (it runs fixed tiles of the output on its own threads), which also applies
 * to a program's own OpenBLAS calls between matmuls.
 * Returns NULL on error (td_last_error): a NULL input, inputs of different contexts, dtypes
 * that differ or a bool dtype, ranks below 2, inner dims that differ, batch dims that do
 * not broadcast (TD_EINVAL). Thread-safety: the context's rule. */
td_tensor *td_matmul(td_tensor *a, td_tensor *b);

/* Flags of td_matmul_ex (bits; unknown bits are an error). */
enum td_matmul_flag {
    TD_MATMUL_ALLOW_TF32 = 1 << 0,
};

/* td_matmul with explicit precision flags, whatever the context's default.
 * flags 0: full precision everywhere: f32 inputs are multiplied and summed in f32, f64 in
 * f64 (a backend's summation order may differ from another's; the results agree within
 * about K * 2^-24 * sum_k |a_ik b_kj| for f32, K the inner dim).
 * TD_MATMUL_ALLOW_TF32: the device may compute an f32 matmul in TF32 ("TensorFloat-32", the
 * tensor-core format of NVIDIA GPUs since Ampere): every input element is reduced to a
 * 10-bit mantissa (f32's 8-bit exponent, so f32's range), the products are formed exactly
 * and accumulated in f32. Reducing an input changes it by at most 2^-11 of its magnitude
 * when rounded to nearest and 2^-10 when truncated (vendors do not document which their
 * kernels do), so each product a_ik b_kj is off by at most about 2^-10 (2^-9 truncated)
 * relative, and an output element satisfies
 *     |C_tf32 - C_exact| <= (2^-9 + 2^-20 + 2 K 2^-24) * sum_k |a_ik b_kj|
 * (tests/unit/backends/conformance.c holds the CUDA backend to this): about 3 significant
 * decimal digits instead of f32's 7, enough for training neural networks, not for
 * ill-conditioned linear algebra. In exchange cuBLAS multiplies 4096x4096 and 8192x8192
 * matrices 7 to 8 times faster on an H200 (BENCHMARKS.md). The flag is a permission, not a requirement: the CUDA
 * backend then uses cuBLAS's CUBLAS_COMPUTE_32F_FAST_TF32; the CPU backend (and any device
 * without a TF32 path) ignores it and returns exactly the bits of a full-precision matmul;
 * f64 and integer matmuls ignore it everywhere. The flag is part of the op: it travels to a
 * remote server with it, and a captured graph replays each matmul with the flags it was
 * captured with.
 * Returns NULL on error (td_last_error): unknown flag bits (TD_EINVAL), and td_matmul's.
 * Thread-safety: the context's rule (one thread at a time). */
td_tensor *td_matmul_ex(td_tensor *a, td_tensor *b, unsigned flags);

/* ---- movement ---- */
/* Same data, new shape (element counts must match; one dim may be -1). Aliases x. */
td_tensor *td_reshape(td_tensor *x, int rank, const int64_t *dims);
/* Output dim i is input dim perm[i]. */
td_tensor *td_permute(td_tensor *x, const int *perm);
/* 2-D transpose of the last two axes. */
td_tensor *td_transpose(td_tensor *x);
/* Per axis [start, stop) with step 1; negative values count from the end, clamped. */
td_tensor *td_slice(td_tensor *x, const int64_t *starts, const int64_t *stops);
/* Concatenate n (1..8) tensors of one dtype along `axis`; other dims must match. */
td_tensor *td_concat(int n, td_tensor *const *xs, int axis);
/* Broadcast x to `dims` (numpy rules). */
td_tensor *td_expand(td_tensor *x, int rank, const int64_t *dims);
/* take_along_axis: out[i..] = x[... index[i..] along axis ...]; index is TD_I32/TD_I64 of
 * x's rank, its other dims <= x's; out has index's shape. Out-of-range index: TD_ERANGE at
 * execution. Picks per-row labels: gather(logp [B,C], labels [B,1], 1) -> [B,1]. */
td_tensor *td_gather(td_tensor *x, td_tensor *index, int axis);
/* index_select: out = x with axis replaced by index's dims (embedding lookup). */
td_tensor *td_index_select(td_tensor *x, td_tensor *index, int axis);

/* ---- movement of issue 13 ----
 * Every function below records its op(s) lazily and returns a new handle (the caller
 * releases it), or NULL with td_last_error naming the function, the op and the values
 * (e.g. "td_pad: pad: reflect padding 5 on dim 1 needs < 4 (its size)"); a NULL tensor
 * argument gives NULL with "<function>: <argument> is NULL". Every dtype is accepted unless
 * stated. Results are bit-exact copies of input elements (or the stated constants), the same
 * on every backend and thread count. Where "primitive" is said, the op is one row of the op
 * table with a kernel per backend (docs/ops.md); "client-side" functions record existing
 * ops. Thread-safety: the context's rule (one thread at a time). */

/* x[start:stop:step] per dim, Python's slice semantics: starts, stops and steps hold rank
 * entries each (any may be NULL for rank 0); a negative start or stop counts from the end;
 * out-of-range bounds clamp (INT64_MAX / INT64_MIN are open ends: x[::-1] is start
 * INT64_MAX, stop INT64_MIN, step -1); steps are non-zero and may be negative (backwards).
 * Output dim d: the count of start + i * step that lie in [start, stop) (step > 0) or
 * (stop, start] (step < 0). One SLICE_STEP op (primitive: a strided copy; td_slice's SLICE
 * op stays for step 1). Errors (TD_EINVAL): a NULL array for rank > 0, a zero step
 * ("td_slice_step: step 0 on dim 1 (steps must be non-zero)"), |step| > 2^62. */
td_tensor *td_slice_step(td_tensor *x, const int64_t *starts, const int64_t *stops,
                         const int64_t *steps);
/* x with the naxes listed axes reversed (torch.flip); negative axes count from the end;
 * naxes 0 copies x. Output: x's dtype and shape. One FLIP op (primitive: a strided copy with
 * negative strides). Errors: naxes outside 0..rank, axes NULL with naxes > 0, an axis out of
 * range, an axis listed twice ("td_flip: axis 1 appears twice"). */
td_tensor *td_flip(td_tensor *x, int naxes, const int *axes);
/* torch.roll: out[.., i, ..] = x[.., (i - shift) mod dim, ..] along each listed axis (any
 * shift, negative too; an axis listed twice rolls by the sum). axes NULL: n must be 1 and
 * the flattened tensor is rolled by shifts[0] (RESHAPE, ROLL, RESHAPE). Output: x's dtype
 * and shape. One ROLL op (primitive: an index remap). Errors: n outside 0..8, shifts NULL
 * with n > 0, an axis out of range, axes NULL with n != 1. */
td_tensor *td_roll(td_tensor *x, int n, const int64_t *shifts, const int *axes);
/* Modes of td_pad (torch.nn.functional.pad's). */
typedef enum td_pad_mode {
    TD_PAD_CONSTANT = 0,  /* the value (converted to x's dtype by the cast rules) */
    TD_PAD_REFLECT = 1,   /* mirror without repeating the edge: x[1], x[0] | x[0..] (pad < dim) */
    TD_PAD_REPLICATE = 2, /* the edge element repeated (dim > 0) */
    TD_PAD_CIRCULAR = 3,  /* wrap around: x[n-1] | x[0..] (pad <= dim) */
} td_pad_mode;
/* Pad x as torch.nn.functional.pad(x, pads, mode, value): pads holds npads (even, at most
 * 2 x rank) counts >= 0 as (before, after) pairs starting at the LAST dim, then the one
 * before it, and so on; unlisted dims are not padded. Output dim d: before + dim + after,
 * x's dtype. Any dims may be padded in every mode (PyTorch limits reflect/replicate/
 * circular to the trailing 1-3 dims; the rules per dim are the same). One PAD op
 * (primitive: an index remap). Errors (TD_EINVAL): npads odd, negative or > 2 x rank,
 * pads NULL with npads > 0, a negative pad ("pad: constant padding -1 before dim 0 is
 * negative (crop with a slice instead)"), a mode outside td_pad_mode, reflect padding
 * >= the dim ("pad: reflect padding 5 on dim 1 needs < 4 (its size)"), replicate padding of
 * an empty dim, circular padding > the dim. */
td_tensor *td_pad(td_tensor *x, int npads, const int64_t *pads, td_pad_mode mode, double value);
/* torch.stack: the n (>= 1) tensors, all of one dtype and shape, joined along a new axis
 * `axis` of length n (in -(rank+1)..rank; negative counts from the end of the result).
 * Client-side: a RESHAPE per input and CONCATs of at most 8 inputs each (a tree for n > 8).
 * Errors: xs NULL or n < 1 (context-free, td_last_error(NULL)), a NULL input, inputs of
 * different contexts, dtypes or shapes ("td_stack: input 1 is f32[2, 4], input 0 is
 * f32[2, 3] (all must match)"), the axis out of range, rank 8 inputs. */
td_tensor *td_stack(int n, td_tensor *const *xs, int axis);
/* torch.split with sizes: out[0..n) receive n new handles, slices of x along `axis` of the
 * given lengths (>= 0, summing to the dim), each a SLICE_STEP op (client-side). All or
 * nothing: on error no handle is left in out and td_last_error names td_split.
 * Returns TD_OK; TD_EINVAL: x NULL, n < 1, sizes or out NULL, axis out of range, a negative
 * size, sizes that do not sum to the dim ("td_split: sizes sum to 5, dim 1 has 6"). */
td_status td_split(td_tensor *x, int n, const int64_t *sizes, int axis, td_tensor **out);
/* torch.chunk: split x along `axis` into pieces of ceil(dim / chunks) elements, the last
 * one smaller, so there may be fewer than `chunks` pieces (dim 6, chunks 4: three of 2); a
 * zero-length dim gives `chunks` empty pieces. out must have room for `chunks` handles;
 * *n_out receives the count. Client-side (SLICE_STEP ops), all or nothing.
 * Returns TD_OK; TD_EINVAL: x NULL, chunks < 1, out or n_out NULL, axis out of range. */
td_status td_chunk(td_tensor *x, int chunks, int axis, td_tensor **out, int *n_out);
/* torch.Tensor.repeat: n (rank..8) counts >= 0; x first gets n - rank leading dims of 1,
 * then dim d is tiled repeats[d] times: out[i] = x[i mod dim]. Output dims dim * repeats.
 * One REPEAT op (primitive: an index remap), after a RESHAPE when n > rank. Errors: n below
 * the rank or above 8, repeats NULL with n > 0, a negative count, an output too large. */
td_tensor *td_repeat(td_tensor *x, int n, const int64_t *repeats);
/* numpy.tile / torch.tile: as td_repeat, but n may be below the rank (reps are then
 * padded with leading 1s). Errors: n outside 0..8, reps NULL with n > 0, a negative count. */
td_tensor *td_tile(td_tensor *x, int n, const int64_t *reps);
/* torch.tril / torch.triu over the last two dims (rank >= 2; leading dims are a batch):
 * element (.., i, j) is kept where j - i <= diagonal (tril) or j - i >= diagonal (triu),
 * else 0 (false for bool); any int64 diagonal. Output: x's dtype and shape. One TRIL / TRIU
 * op (primitive). Errors: rank below 2 ("td_tril: tril: needs rank >= 2 ..."). */
td_tensor *td_tril(td_tensor *x, int64_t diagonal);
td_tensor *td_triu(td_tensor *x, int64_t diagonal);
/* torch.nn.functional.one_hot with an explicit class count and dtype: index TD_I32/TD_I64 of
 * any shape (rank <= 7); out[..., c] = 1 where index[...] == c, else 0, in dtype dt, shape
 * index's + [num_classes]. One ONE_HOT op (primitive). Errors at record time: num_classes
 * < 1, an index dtype that is not i32/i64, rank 8. Index values live on the device, so
 * they are checked when the op runs: a value outside [0, num_classes) fails the op with
 * TD_ERANGE, nothing written; the next read of it or of anything computed from it fails
 * (TD_EPOISONED) with td_last_error "... op 0 (one_hot): index 5 out of range [0, 5) at
 * position 2". */
td_tensor *td_one_hot(td_tensor *index, int64_t num_classes, td_dtype dt);
/* torch.Tensor.masked_fill: mask ? value : x, where mask is TD_BOOL (any nonzero byte is
 * true) whose shape broadcasts to x's (numpy rules, the result keeps x's shape); value is
 * converted to x's dtype by the cast rules (NaN and inf allowed for floats). One
 * MASKED_FILL op (primitive). Errors: mask not bool, a shape that does not broadcast to
 * x's ("td_masked_fill: masked_fill: mask shape [3, 2] does not broadcast to x's [2, 3]"),
 * inputs of different contexts. */
td_tensor *td_masked_fill(td_tensor *x, td_tensor *mask, double value);
/* torch.Tensor.scatter / scatter_add along `axis` (negative counts from the end), out of
 * place: out = x, then for every position p of index (TD_I32/TD_I64, x's rank),
 * out[p with p[axis] replaced by index[p]] = src[p] (td_scatter) or += src[p]
 * (td_scatter_add). src has x's dtype and rank; index.dims[d] <= src.dims[d] for every d and
 * <= x.dims[d] for d != axis. Deterministic: the contributions to one destination are
 * applied in ascending order of p along the axis (for scatter: the last one wins), each
 * add rounded to the dtype (f16/bf16: computed in f32, rounded once; integers wrap), so
 * the result is bit for bit the same on every thread count and backend run (this is the
 * gradient of td_gather). td_scatter_add needs a numeric dtype. One SCATTER / SCATTER_ADD op
 * (primitive). Record-time errors: the dims rules above, dtypes, ranks; at execution an
 * index outside [0, x.dims[axis]) fails the op with TD_ERANGE, nothing written, reported
 * as td_one_hot's ("op 2 (scatter_add): index 4 out of range [0, 4) at position 3",
 * position row-major over index). */
td_tensor *td_scatter(td_tensor *x, int axis, td_tensor *index, td_tensor *src);
td_tensor *td_scatter_add(td_tensor *x, int axis, td_tensor *index, td_tensor *src);
/* torch.Tensor.index_add (alpha 1), out of place: out = x, then for j in ascending order
 * out[.., index[j], ..] += src[.., j, ..] along `axis`; index TD_I32/TD_I64 of rank 1 (or
 * rank 0: one entry), src of x's numeric dtype with x's shape except dim `axis` of index's
 * length. Deterministic as td_scatter_add (ascending j per destination, each add rounded).
 * One INDEX_ADD op (primitive). Errors: src shape ("td_index_add: index_add: src shape [2, 2]
 * must be [2, 3] ..."), index rank > 1, dtypes; at execution TD_ERANGE for an index outside
 * [0, x.dims[axis]), reported as td_one_hot's. */
td_tensor *td_index_add(td_tensor *x, int axis, td_tensor *index, td_tensor *src);
/* tf.gather_nd (batch_dims 0): index TD_I32/TD_I64 of shape [..., k] with k <= x's rank;
 * out[p, ...] = x[index[p, 0], .., index[p, k-1], ...], shape index.shape[:-1] + x.shape[k:]
 * (rank <= 8). One GATHER_ND op (primitive). Errors: index rank 0, k > x's rank, result rank
 * > 8; at execution TD_ERANGE for an index outside its dim, reported as td_one_hot's
 * ("op 1 (gather_nd): index 3 out of range [0, 3) for dim 1 at position 5"); negative
 * indices are not wrapped. */
td_tensor *td_gather_nd(td_tensor *x, td_tensor *index);
/* numpy.einsum without ellipses or diagonals: equation "ij,jk->ik" names one letter
 * (a-z, A-Z) per dim of each of the n (1..8) operands, comma-separated, spaces ignored;
 * after "->" the output's letters (each at most once, each in some operand), or without
 * "->" numpy's implicit output (the letters used exactly once, in alphabetical order,
 * uppercase first). A letter's dims must have one size (no broadcasting); letters absent
 * from the output are summed over. Operands share one numeric dtype (matmul's rule).
 * Client-side: a lowering onto SUM, PERMUTE, RESHAPE and MATMUL (operands folded left to
 * right, each pair one batched matmul; float results therefore follow matmul's and sum's
 * rounding, not numpy's order). Returns a new handle of the output's shape (a COPY when the
 * equation is an identity). Errors (TD_EINVAL, td_last_error names td_einsum and the
 * equation): xs NULL or n outside 1..8 (context-free), a NULL operand, different contexts,
 * an equation NULL or naming another operand count, a character other than letters,
 * spaces, ',' and "->", an ellipsis ("ellipsis '...' is not supported"), a letter twice in
 * one operand ("repeated index 'i' in operand 0 (diagonals are not supported)"), subscripts
 * that do not match an operand's rank, sizes that differ ("index 'j' has sizes 3 and 4"),
 * an output letter in no operand or repeated, an intermediate above rank 8.
 * Thread-safety: the context's rule. */
td_tensor *td_einsum(const char *equation, int n, td_tensor *const *xs);

/* ---- softmax ----
 * Softmax and log-softmax of x along `axis` (negative counts from the end), each one op.
 * x must be f32 or f64 with a non-empty axis; the result has x's dtype and shape. Per row
 * along the axis, in this order:
 *   m   = max_j x_j                      (a NaN in the row makes m NaN, as td_max does)
 *   e_i = exp(x_i - m)                   (subtraction and exp in x's dtype)
 *   s   = sum_i e_i                      (accumulated in double, rounded once to x's dtype)
 *   td_softmax:     y_i = e_i / s
 *   td_log_softmax: y_i = (x_i - m) - log(s)
 * Subtracting the maximum keeps exp from overflowing; a row whose maximum is +inf or NaN,
 * or whose elements are all -inf, gives NaN. The CPU device sums s exactly as td_sum sums
 * along that axis (see the reductions above), which makes it bit-identical to the same
 * formula written with td_max, td_sub, td_exp, td_sum and td_div (td_log, td_sub); GPU
 * devices use their own deterministic summation
 * order and exp/log, within the bound tests/unit/backends/conformance.c states.
 * Returns NULL on error (td_last_error names the call): axis out of range, a non-float
 * dtype, a zero-length axis (TD_EINVAL); NULL input gives NULL.
 * Thread-safety: the context's rule (one thread at a time). */
td_tensor *td_softmax(td_tensor *x, int axis);
td_tensor *td_log_softmax(td_tensor *x, int axis);

/* ---- autodiff: gradients of recorded ops, computed where the tensors live ----
 *
 * Mark parameters with td_requires_grad, record the forward pass as usual, then call
 * td_backward(loss): every op recorded since, whose inputs depend on a marked tensor, is
 * differentiated in reverse (reverse-mode automatic differentiation). The gradient rules
 * are themselves ops of the table (docs/ops.md), recorded on the same context: they run
 * on the context's device, local or remote, batched like any op, and inside
 * td_graph_begin/td_graph_end they are captured too, so a whole training step replays as
 * one graph. Gradients of broadcasting ops are summed back to each input's shape.
 *
 * Which ops: float results only; integer and bool values have no gradient and stop it
 * (comparisons, argmax, casts to integers). The ops with a rule: neg abs exp log sqrt
 * rsqrt tanh sigmoid relu silu sin cos tan erf log1p expm1 log2 log10 reciprocal softplus
 * leaky_relu elu gelu (exact form) clamp floor ceil round trunc sign (zero gradient), add
 * sub mul div pow maximum minimum where cast, sum mean max min logsumexp var std norm_l1
 * cumsum, matmul, reshape permute slice concat expand copy, softmax log_softmax, flip roll
 * repeat tril triu masked_fill gather index_select scatter_add index_add, layer_norm
 * rms_norm group_norm (through their backward ops) dropout (the same mask), batch_norm
 * (every input: with td_batch_norm_stats' statistics the gradient also flows through them,
 * which is training's gradient; with fixed running statistics only dx = dy w / sqrt(var +
 * eps)), conv and conv_transpose (1-3 spatial dims, any groups, stride, dilation, padding,
 * output padding: td_conv_input_grad, td_conv_weight_grad, td_conv, and the sum of dy for
 * the bias), max_pool (recomputes the maxima's positions, then td_max_pool_backward),
 * avg_pool, adaptive_avg_pool (their backward ops), td_to_device (the gradient moved
 * back), interpolate (nearest and linear: the
 * source positions from the op run on arange(L), then td_index_add), pad (constant mode), slice_step with steps of 1 (td_split's), and every op recorded by a client-side
 * composition of these (td_stack, td_split, td_chunk, td_tile, td_einsum). Ties of
 * max/min/maximum/minimum share the gradient equally; relu and abs have gradient 0 at 0
 * (PyTorch's choices). td_backward fails with TD_EUNSUPPORTED naming the first op on the
 * loss's path that has no rule, before recording anything.
 *
 * Memory: the tape keeps an alias (no copy) of every input and output of each op it
 * records, so those buffers stay alive until td_backward (which frees the tape, once; a
 * second td_backward needs a new forward pass) or td_tape_clear, even when the program
 * released its handles. A td_write to a tensor the tape holds changes what td_backward
 * sees, as an in-place change would. Gradients of leaves accumulate over td_backward calls
 * until td_zero_grad. Higher-order gradients are not taped.
 * Thread-safety: the context's rule (one thread at a time per context). */

/* Mark t (a float tensor: f16, bf16, f32, f64) as a leaf whose gradient td_backward
 * accumulates (on = true), or unmark it and drop its gradient (on = false). Ops recorded
 * afterwards on t, and on results computed from it, are taped. Returns TD_OK; TD_EINVAL
 * (NULL t, or an integer or bool tensor: "only float tensors have gradients"); TD_ENOMEM. */
td_status td_requires_grad(td_tensor *t, bool on);
/* Whether t is a marked leaf or was computed from one by a taped op. */
bool td_is_requires_grad(const td_tensor *t);
/* Differentiate `loss` (exactly one element, float) with respect to every marked leaf it
 * depends on, adding d loss / d leaf to each leaf's gradient (td_grad); then free the
 * tape. Returns TD_OK; TD_EINVAL (NULL, more than one element, or loss does not depend on
 * a marked tensor); TD_EUNSUPPORTED (an op on its path has no gradient rule, named);
 * TD_ENOMEM; transport errors. The gradients are lazy tensors like any: read them, or use
 * them in further ops. */
td_status td_backward(td_tensor *loss);
/* As td_backward for an `out` of any shape, with d out / d out = `grad` (same dtype, shape
 * and device as out; borrowed). TD_EINVAL when they differ. Gradients are computed on the
 * devices their tensors are on; td_backward's seed of ones is made on the loss's. */
td_status td_backward_grad(td_tensor *out, td_tensor *grad);
/* The gradient accumulated for leaf t, or NULL with TD_ENOTFOUND (t is no leaf, or no
 * td_backward reached it since td_zero_grad; td_last_error says which) or TD_EINVAL (NULL
 * t). Borrowed: owned by the context, valid until td_zero_grad(t),
 * td_requires_grad(t, false), td_release(t) or td_close; do not release it. Same dtype and
 * shape as t. */
td_tensor *td_grad(td_tensor *t);
/* Drop t's accumulated gradient (the next td_backward starts it from zero). */
void td_zero_grad(td_tensor *t);
/* Scopes in which ops are not taped (evaluation, optimizer updates); they nest. */
void td_no_grad_begin(td_context *ctx);
void td_no_grad_end(td_context *ctx);
/* A new handle on t's data (an alias, no copy) that does not require a gradient: what is
 * computed from it is not taped. NULL on error (td_last_error). */
td_tensor *td_detach(td_tensor *t);
/* Forget the tape (the aliases it keeps are released) without computing gradients; the
 * leaves stay marked and keep their gradients. */
void td_tape_clear(td_context *ctx);

/* ---- optimizers: parameter updates as ops on the context's device ----
 *
 * An optimizer updates parameters from their gradients (td_grad) with ordinary ops,
 * recorded under a td_no_grad scope: they run where the parameters live, batched with the
 * rest of the step (no round trip per tensor: a step reads nothing back), and inside
 * td_graph_begin .. td_graph_end they are captured like any op. Its state (momentum
 * buffers, Adam's moments, the step count and the learning rate) are tensors listed by
 * td_optim_state and saved with td_optim_save: each parameter's on that parameter's device,
 * the shared scalars (lr, step, loss scale) on the session's first device, copied to each
 * other device the parameters are on at each step (tensors on several devices, above).
 *
 * Tensors are functional: td_optim_step replaces each params[i] with a new handle holding
 * the updated values (the old one is released, its gradient with it; the new one is marked
 * with td_requires_grad when the old one was), and the state tensors likewise.
 *
 * Update rules (PyTorch 1.13's torch.optim, single-tensor form; g = td_grad(p), lr the
 * current learning rate, t the step count after increment; parameters whose gradient is
 * absent are left alone, as PyTorch skips p.grad None):
 *   SGD:   g += weight_decay p; with momentum > 0: b = momentum b + g (b starts at 0, so
 *          b = g at t = 1), g = g + momentum b (nesterov) or g = b; p -= lr g.
 *   Adam:  g += weight_decay p; m += (g - m)(1 - beta1); v = beta2 v + (1 - beta2) g g;
 *          p -= lr / (1 - beta1^t) m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
 *          (Kingma & Ba, "Adam", ICLR 2015, with PyTorch's placement of eps).
 *   AdamW: as Adam without the weight_decay term in g, and p *= 1 - lr weight_decay first
 *          (Loshchilov & Hutter, "Decoupled weight decay regularization", ICLR 2019).
 * The scalars lr, t and the bias corrections are f64 tensors of rank 0 (so a captured step
 * replays with the step count and learning rate it is given), cast to each parameter's
 * dtype where they meet it; the elementwise arithmetic is in the parameter's dtype.
 * Thread-safety (every td_optim_* function): the context's rule (one thread at a time). */
typedef enum td_optim_kind {
    TD_OPTIM_SGD = 0,
    TD_OPTIM_ADAM = 1,
    TD_OPTIM_ADAMW = 2,
} td_optim_kind;

typedef struct td_optim_config {
    td_optim_kind kind;
    double lr;           /* > 0, finite */
    double momentum;     /* SGD: >= 0 (0: plain SGD) */
    bool nesterov;       /* SGD: needs momentum > 0 */
    double weight_decay; /* >= 0; SGD and Adam: L2 added to g; AdamW: decoupled */
    double beta1, beta2; /* Adam, AdamW: in [0, 1) */
    double eps;          /* Adam, AdamW: >= 0 */
    /* Dynamic loss scaling for f16 compute (PyTorch's GradScaler): 0 off; else the initial
     * scale S (in (0, 2^100], e.g. 65536). Multiply the loss by S with td_optim_scale_loss
     * before td_backward; td_optim_step then divides the gradients by S, and when any of
     * them is inf or NaN skips the update (parameters, state and step count unchanged) and
     * halves S, else doubles S after growth_interval finite steps in a row. All of it is
     * ops on the device (no read), so a captured step scales too. With S a power of two and
     * no overflow the result is bit-identical to an unscaled step. */
    double loss_scale;
    int64_t growth_interval; /* >= 1 when loss_scale > 0 (default 2000) */
} td_optim_config;

/* PyTorch's defaults for `kind` with learning rate lr: momentum 0, no nesterov, beta1 0.9,
 * beta2 0.999, eps 1e-8, weight_decay 0 (SGD, Adam) or 0.01 (AdamW); no loss scaling,
 * growth_interval 2000. */
td_optim_config td_optim_config_default(td_optim_kind kind, double lr);

typedef struct td_optim td_optim;

/* An optimizer for the n parameters params[0..n) (float tensors of ctx, borrowed: only
 * their dtypes and shapes are kept) called names[i] (unique, 1..200 bytes, no '.'; names
 * NULL: "0", "1", ...; the names of td_optim_save's file). Its state starts as PyTorch's:
 * zeros, step 0. On TD_OK *out owns it (td_optim_destroy, before td_close). Errors
 * (td_last_error(ctx) names the value): TD_EINVAL (NULL, n < 1, a non-float or other
 * context's parameter, a bad config value: "td_optim_create: beta1 1 is outside [0, 1)",
 * bad or duplicate names, one tensor given twice: both indexes named); TD_ENOMEM; errors of
 * the state's creation ops. */
td_status td_optim_create(td_context *ctx, const td_optim_config *cfg, int n,
                          td_tensor *const *params, const char *const *names, td_optim **out);
/* One update of params[0..n) (the n of td_optim_create, same dtypes and shapes) from their
 * gradients; replaces each params[i] and the state tensors as described above. Lazy (reads
 * nothing); an error of an op surfaces at the next read or fence. Returns TD_OK; TD_EINVAL
 * (NULL, a parameter of another dtype or shape than at creation, one handle given twice in
 * params); TD_ENOMEM; errors of recording the ops. On failure params[] and the state are
 * unchanged. */
td_status td_optim_step(td_optim *o, td_tensor **params);
/* *scaled = loss * S (a new handle, taped: call td_backward on it), S the current loss
 * scale (cast to loss's dtype). TD_EINVAL when o was created without loss scaling. */
td_status td_optim_scale_loss(td_optim *o, td_tensor *loss, td_tensor **scaled);
/* Set the learning rate (> 0, finite; TD_EINVAL otherwise) for the following steps: a new
 * "lr" state tensor. td_optim_lr returns the value last set (or loaded). */
td_status td_optim_set_lr(td_optim *o, double lr);
double td_optim_lr(const td_optim *o);
/* The number of state tensors: "lr" and "step" (f64, rank 0), with loss scaling
 * "loss_scale" (f32, rank 0) and "growth_tracker" (f64, rank 0), then per parameter NAME:
 * SGD with momentum "NAME.momentum_buffer"; Adam/AdamW "NAME.exp_avg", "NAME.exp_avg_sq"
 * (the parameter's dtype and shape; PyTorch's state_dict names). */
int td_optim_n_state(const td_optim *o);
/* State tensor i (0 <= i < td_optim_n_state): *t a borrowed handle (valid until the next
 * step, set or load), *name (may be NULL) borrowed from o. TD_EINVAL for a bad i. */
td_status td_optim_state(const td_optim *o, int i, const char **name, td_tensor **t);
/* Replace state tensor i with t (same dtype, shape and device; borrowed: o keeps an alias).
 * For a captured step: bind graph placeholders before the step, then the run's outputs
 * after. TD_EINVAL for a bad i, dtype, shape or device (named). */
td_status td_optim_set_state(td_optim *o, int i, td_tensor *t);
/* Write params[0..n) under their names, every state tensor under its name, and the
 * n_meta metadata pairs (keys[i] -> values[i]; the keys "tensord.optim" and
 * "tensord.optim.lr" are o's own: TD_EINVAL, naming the key, when keys has one) to the
 * safetensors file `path`, as td_safetensors_save does (one read per tensor, then the
 * file; a key given twice is TD_EINVAL). */
td_status td_optim_save(const td_optim *o, td_tensor *const *params, const char *path,
                        int n_meta, const char *const *keys, const char *const *values);
/* Read `path` (written by td_optim_save for an optimizer of the same kind, names, dtypes
 * and shapes) and replace params[0..n) and the whole state with its tensors (new handles
 * on o's context, each on the device of the tensor it replaces, marked with
 * td_requires_grad as the old ones were): a run resumed from it
 * continues bit for bit as if uninterrupted. The file must hold exactly o's tensors, and its
 * scalars what a run can produce: an "lr" tensor equal to the metadata tensord.optim.lr,
 * "step" (and "growth_tracker") a whole number >= 0, "loss_scale" finite and > 0 (read back
 * to check them). Errors (TD_EINVAL, TD_ENOTFOUND, TD_EIO; the message names the file and
 * the tensor) leave params and state unchanged. */
td_status td_optim_load(td_optim *o, td_tensor **params, const char *path);
/* Free o and its state tensors. NULL is a no-op. */
void td_optim_destroy(td_optim *o);

/* Learning-rate schedules as pure host functions of the step (0-based, the number of
 * steps taken so far): feed the result to td_optim_set_lr before each step. */
typedef enum td_lr_kind {
    TD_LR_CONSTANT = 0, /* base */
    TD_LR_STEP = 1,     /* base gamma^floor(step / step_size) (torch StepLR) */
    TD_LR_COSINE = 2,   /* min + (base - min)(1 + cos(pi s / total)) / 2, s = min(step,
                         * total) (torch CosineAnnealingLR's closed form, eta_min = min) */
} td_lr_kind;
typedef struct td_lr_schedule {
    td_lr_kind kind;
    double base;          /* the learning rate after warmup: finite, > 0 */
    int64_t warmup_steps; /* >= 0: steps 0 .. warmup-1 use base (step + 1) / warmup first */
    int64_t step_size;    /* TD_LR_STEP: >= 1 */
    double gamma;         /* TD_LR_STEP */
    int64_t total_steps;  /* TD_LR_COSINE: >= 1, counted after warmup */
    double min;           /* TD_LR_COSINE */
} td_lr_schedule;
/* The learning rate at `step` (steps after warmup count from 0 for the schedule proper).
 * NaN for a bad schedule: negative step or warmup_steps, base not finite and > 0 (what
 * td_optim_set_lr takes), step_size or total_steps < 1, an unknown kind. Thread-safety:
 * pure, any thread. */
double td_lr_at(const td_lr_schedule *s, int64_t step);

/* ---- safetensors files: tensors and metadata on disk ----
 * The format of https://github.com/huggingface/safetensors ("Format" in its README): an
 * 8-byte little-endian header length N, N bytes of JSON {"NAME": {"dtype": "F32", "shape":
 * [..], "data_offsets": [BEGIN, END]}, "__metadata__": {string: string}}, then the data,
 * little-endian and row-major. Dtypes: F32 F64 F16 BF16 I8 I16 I32 I64 U8 BOOL (tensord's).
 * The reader is strict, as for any untrusted file: it rejects, naming the file and the
 * problem, a file shorter than 8 bytes, a header length beyond the file or above 100 MiB,
 * invalid JSON or duplicate keys, an empty tensor name (the writer refuses one too),
 * entries without dtype/shape/data_offsets, an unknown
 * dtype, rank above 8, negative or non-integer dims, offsets out of range, overlapping or
 * leaving holes, or not equal to the dtype's size times the element count; every size goes
 * through overflow-checked arithmetic. Errors: td_last_error(NULL), and the context's for
 * the calls that take one. Thread-safety: any thread for distinct files and handles; the
 * tensors' context's rule for the calls that read or make tensors. */
typedef struct td_safetensors td_safetensors;

/* Write tensors[0..n) (read back to the host: one td_read each) named names[i] (unique,
 * not "__metadata__") and n_meta metadata pairs to `path`, through a temporary file
 * renamed into place (a failed save leaves no partial file). Returns TD_OK; TD_EINVAL
 * (NULL, n < 0, a bad or duplicate name, a metadata key given twice: named); TD_EIO
 * (named); errors of td_read. */
td_status td_safetensors_save(const char *path, int n, const char *const *names,
                              td_tensor *const *tensors, int n_meta, const char *const *keys,
                              const char *const *values);
/* Read and validate the whole file; on TD_OK *out owns it (td_safetensors_close). Errors:
 * TD_EIO (cannot open or read), TD_EINVAL (any rejection above), TD_ENOMEM. */
td_status td_safetensors_open(const char *path, td_safetensors **out);
void td_safetensors_close(td_safetensors *f); /* NULL is a no-op */
/* The tensors in header order: their number, and the name of tensor i (borrowed; NULL for a
 * bad i). */
int td_safetensors_count(const td_safetensors *f);
const char *td_safetensors_name(const td_safetensors *f, int i);
/* The metadata value for key (borrowed), or NULL. */
const char *td_safetensors_metadata(const td_safetensors *f, const char *key);
/* Upload tensor `name` to ctx as a new tensor (*out, the caller's). It must have dtype dt
 * and, when rank >= 0, shape dims[0..rank): the errors name the file, the tensor and
 * both sides ("m.safetensors: w1: shape [784, 32] in file, model needs [784, 256]",
 * TD_EINVAL; a missing tensor TD_ENOTFOUND; a dtype tensord lacks TD_EUNSUPPORTED). */
td_status td_safetensors_get(const td_safetensors *f, td_context *ctx, const char *name,
                             td_dtype dt, int rank, const int64_t *dims, td_tensor **out);

/* ---- neural-network ops: normalisation, dropout, attention, losses ----
 * All take float tensors (f32, f64, f16, bf16); every tensor argument of one call has one
 * dtype and belongs to one context, and the result has x's dtype and shape unless stated.
 * Arithmetic of the normalisations and their backward ops, on every device: elements
 * widened to double, sums and the per-element formula in double (two passes: the mean,
 * then the squared deviations from it), the result rounded once to the dtype; f16/bf16
 * therefore accumulate in double, better than f32. The CPU folds each run of contiguous
 * elements into 16 lanes in a fixed order; GPUs use a fixed tree: results do not depend on
 * the thread count, and devices agree within conformance.c's TD_ACC_NORM bound
 * (8 ulp + 64 n 2^-53 (1 + max |y|), n the number of elements normalised together).
 * `eps` must be finite and >= 0 (eps 0 on a constant group divides by zero: NaN, as in
 * PyTorch). NaN or inf in a group makes that group's results NaN. Zero-length dims give
 * empty results. Errors (NULL result, td_last_error names the function and the values,
 * TD_EINVAL): a NULL required input, inputs of different contexts or dtypes, a non-float
 * dtype, naxes outside 1..rank, a parameter of the wrong shape ("layer_norm: weight [5]
 * must have shape [4] (x [2, 4])"), bad eps, groups that do not divide C.
 * Thread-safety (all of them): the context's rule (one thread at a time). */

/* Layer norm (Ba, Kiros, Hinton, "Layer normalization", 2016; torch.nn.functional.
 * layer_norm): over the last `naxes` dims of x (1..rank; the normalised shape D =
 * x.dims[rank - naxes ..]), per group of n = prod(D) elements
 *   y = (x - mean) / sqrt(var + eps) * weight + bias,   var = mean((x - mean)^2) (biased)
 * weight and bias: NULL (1 and 0), or tensors of shape D. One op (LAYER_NORM, a primitive
 * with CPU and CUDA kernels). */
td_tensor *td_layer_norm(td_tensor *x, int naxes, td_tensor *weight, td_tensor *bias,
                         double eps);
/* RMS norm (Zhang, Sennrich, "Root mean square layer normalization", 2019): over the last
 * `naxes` dims, y = x / sqrt(mean(x^2) + eps) * weight; weight NULL (1) or of shape D.
 * One op (RMS_NORM). */
td_tensor *td_rms_norm(td_tensor *x, int naxes, td_tensor *weight, double eps);
/* Group norm (Wu, He, "Group normalization", 2018; torch.nn.functional.group_norm): x of
 * rank >= 2, [N, C, ...]; the C channels split into `groups` groups of C / groups
 * consecutive channels (groups >= 1 must divide C), each (sample, group) normalised as
 * layer norm does over its C / groups x spatial elements, then y * weight[c] + bias[c];
 * weight, bias NULL or [C]. One op (GROUP_NORM). */
td_tensor *td_group_norm(td_tensor *x, int64_t groups, td_tensor *weight, td_tensor *bias,
                         double eps);
/* Batch norm with given statistics (Ioffe, Szegedy, "Batch normalization", 2015;
 * torch.nn.functional.batch_norm): x [N, C, ...] (rank >= 2), mean and var [C] (the running
 * statistics for inference, or td_batch_norm_stats' batch statistics for training),
 *   y = (x - mean[c]) / sqrt(var[c] + eps) * weight[c] + bias[c];
 * weight, bias NULL or [C]. One op (BATCH_NORM). */
td_tensor *td_batch_norm(td_tensor *x, td_tensor *mean, td_tensor *var, td_tensor *weight,
                         td_tensor *bias, double eps);
/* Batch statistics for training: x [N, C, ...] (rank >= 2); returns the mean over every
 * axis but 1, shape [C]; when var is non-NULL, *var receives the biased variance (divisor
 * N x spatial: what training normalises with), when var_unbiased is non-NULL,
 * *var_unbiased the unbiased one (divisor N x spatial - 1: what PyTorch folds into
 * running_var). Training step: td_batch_norm(x, mean, var, w, b, eps); running_mean =
 * (1 - m) running_mean + m mean, running_var likewise with var_unbiased. Recorded as the
 * MEAN and VAR ops (correction 0 and 1), each a new handle the caller releases; on failure
 * NULL and the out-parameters untouched. */
td_tensor *td_batch_norm_stats(td_tensor *x, td_tensor **var, td_tensor **var_unbiased);

/* Backward ops (what issue 15's autodiff composes): dy is the gradient of the forward
 * output (x's shape), and the forward op's own arguments follow. Each returns dx (one
 * primitive op; recomputes the statistics from x rather than taking saved ones), and, when
 * the out-pointer is non-NULL, the parameter gradients as new handles (composites of
 * existing ops: dbias = sum of dy over the non-parameter axes, dweight = the same sum of
 * dy * xhat, xhat the forward op without weight and bias). Formulas, with g = dy * weight
 * (dy when weight is NULL), r = 1 / sqrt(var + eps), xhat = (x - mean) r, and means over
 * the group of n elements normalised together (derived by the chain rule; the same as
 * PyTorch's native_layer_norm_backward):
 *   layer, group, batch (training): dx = r (g - mean(g) - xhat mean(g xhat))
 *   rms (r = 1 / sqrt(mean x^2 + eps), xhat = x r):  dx = r (g - xhat mean(g xhat))
 * td_batch_norm_backward: mean and var both NULL means the forward pass used the batch's
 * own statistics (training: the formula above, one BATCH_NORM_BACKWARD op); both given
 * means it used these fixed statistics (inference: dx = dy weight[c] / sqrt(var[c] + eps),
 * a composite of elementwise ops). Giving only one of mean and var is an error. On
 * failure NULL, out-parameters untouched. */
td_tensor *td_layer_norm_backward(td_tensor *dy, td_tensor *x, int naxes, td_tensor *weight,
                                  double eps, td_tensor **dweight, td_tensor **dbias);
td_tensor *td_rms_norm_backward(td_tensor *dy, td_tensor *x, int naxes, td_tensor *weight,
                                double eps, td_tensor **dweight);
td_tensor *td_group_norm_backward(td_tensor *dy, td_tensor *x, int64_t groups,
                                  td_tensor *weight, double eps, td_tensor **dweight,
                                  td_tensor **dbias);
td_tensor *td_batch_norm_backward(td_tensor *dy, td_tensor *x, td_tensor *mean,
                                  td_tensor *var, td_tensor *weight, double eps,
                                  td_tensor **dweight, td_tensor **dbias);

/* Dropout (Srivastava et al., "Dropout", JMLR 2014, inverted scaling as in PyTorch): element
 * i of x (any shape, row-major index i) is kept when u_i >= p and then multiplied by
 * 1 / (1 - p), else multiplied by 0 (so a dropped NaN or inf gives NaN, a dropped -x -0, as
 * x * 0 in PyTorch); u_i is element i of td_rand_uniform(..., 0, 1, seed) in f32, i.e. the
 * 24-bit uniform (w >> 8) 2^-24 of Philox4x32-10 word i % 4 of block i / 4 (engine/philox.h;
 * Salmon et al., SC'11) for every dtype: the same mask on every device for the same seed.
 * The multiply is one IEEE operation in f32 (f16/bf16: in f32, rounded once) or f64, with
 * 1 / (1 - p) rounded to that type: bit for bit on every device. p in [0, 1]: p 0 returns
 * x's values, p 1 zeros (x * 0). The fraction kept is (2^24 - ceil(p 2^24)) / 2^24 in
 * expectation. Backward: dx = td_dropout(dy, p, seed) (the same mask and scale).
 * One op (DROPOUT). Errors: p NaN or outside [0, 1], non-float x (TD_EINVAL). */
td_tensor *td_dropout(td_tensor *x, double p, uint64_t seed);

/* Scaled dot-product attention (Vaswani et al., "Attention is all you need", 2017; the
 * semantics of PyTorch 2's torch.nn.functional.scaled_dot_product_attention without
 * dropout): q [..., L, E], k [..., S, E], v [..., S, Ev] (rank >= 2, batch dims broadcast
 * as td_matmul's), result [..., L, Ev]:
 *   s = q k^T * scale (+ mask),  y = softmax(s, last axis) v
 * scale 0 means 1 / sqrt(E); otherwise it must be finite. mask NULL, or broadcastable to
 * [..., L, S]: a bool mask keeps the positions that are true (the others get -inf), a
 * float mask (q's dtype) is added. causal keeps j <= i only (the lower-left triangle of
 * the L x S scores, top-left aligned as torch.tril). A row with every position masked
 * gives NaN (as PyTorch), as does a row with a NaN score. k needs at least one position.
 * One op (SCALED_DOT_PRODUCT_ATTENTION, docs/ops.md). The CPU runs it natively for f32 and
 * f64 without the [L, S] score matrix (blocks of 256 keys with a running maximum; memory
 * O(64 (256 + Ev)) per thread); CUDA devices run f16 and bf16 without a mask (causal or
 * not) at head dims E = Ev = 64 or 128 as one fused tensor-core kernel (FlashAttention-2's
 * scheme: f32 scores and running sums, the weights rounded to the dtype before they multiply
 * v, as the lowering's softmax output is); every other case and device runs its
 * lowering: permute(k), matmul, mul, (arange, le, where for causal), where or add for the
 * mask, softmax's steps, matmul, with the [..., L, S] scores as temporaries. The two agree
 * within the op table's ATTENTION bound; each is deterministic. Its gradient (td_backward)
 * recomputes the weights from q, k and the mask. q, k, v one float dtype.
 * Errors (TD_EINVAL, naming the op): a NULL q, k or v, a non-finite scale, rank < 2, q and
 * k's last dims or k and v's positions differing, S = 0, batch dims or a mask that do not
 * broadcast, a mask of another dtype than bool or q's, non-float q. */
td_tensor *td_scaled_dot_product_attention(td_tensor *q, td_tensor *k, td_tensor *v,
                                           td_tensor *mask, bool causal, double scale);

/* How a loss reduces its per-element values. */
typedef enum td_reduction {
    TD_REDUCTION_NONE = 0, /* the per-element losses, target's shape */
    TD_REDUCTION_MEAN = 1, /* their sum / the number of targets not equal to ignore_index
                            * (0 / 0 = NaN when every target is ignored, as PyTorch) */
    TD_REDUCTION_SUM = 2,  /* their sum (rank 0) */
} td_reduction;

/* Negative log-likelihood with class indices (torch.nn.functional.nll_loss without class
 * weights): logp [N, C, d1...] (rank >= 2, usually log-probabilities), target [N, d1...]
 * of i64 (or i32) class indices in [0, C), or ignore_index (PyTorch's default is -100):
 *   loss_i = -logp[i, target_i, ...]  (0 where target_i == ignore_index)
 * reduced by `reduction`. td_cross_entropy (torch.nn.functional.cross_entropy, class
 * indices) applies td_log_softmax over axis 1 first; with label_smoothing e in [0, 1]:
 *   loss_i = (1 - e) (-logp[i, t_i]) + e (-mean_c logp[i, c])   (0 where ignored)
 * Composites of LOG_SOFTMAX, NE, WHERE, GATHER, NEG, MEAN, MUL, ADD, SUM, CAST, DIV, so
 * their gradient follows from those ops'. A target outside [0, C) that is not ignore_index
 * fails at execution (the GATHER's TD_ERANGE, which a read of the loss reports: "op 6
 * (gather): index 3 out of range [0, 3) ..."). Errors at record time (NULL, TD_EINVAL):
 * a NULL input, target not i32/i64, shapes that do not match ([N, d...] for [N, C, d...]),
 * rank < 2, an unknown reduction, label_smoothing outside [0, 1]. */
td_tensor *td_nll_loss(td_tensor *logp, td_tensor *target, td_reduction reduction,
                       int64_t ignore_index);
td_tensor *td_cross_entropy(td_tensor *logits, td_tensor *target, td_reduction reduction,
                            int64_t ignore_index, double label_smoothing);

/* ---- server information (GetInfo) ---- */
typedef struct td_device_info {
    char name[32]; /* "cpu", "cuda:0" */
    char kind[16]; /* "cpu", "cuda" */
    char description[96];
    uint64_t memory_total; /* bytes; 0 if unknown */
    uint64_t memory_free;  /* bytes; 0 if unknown */
} td_device_info;

typedef struct td_server_info {
    uint32_t protocol_min, protocol_max;
    char server_version[32];
    int n_devices;
    td_device_info devices[16];
    uint64_t max_message_bytes, chunk_bytes, max_tensor_bytes;
    uint64_t sessions;     /* open sessions now */
    uint64_t tensors;      /* live tensors over all sessions */
    uint64_t bytes_in_use; /* device bytes held by sessions */
} td_server_info;

/* Query a server without opening a session. `address` is "HOST:PORT", "unix:PATH" or a
 * full tensord:// URI. timeout_ms <= 0 means 5000.
 * Returns TD_OK, TD_EINVAL, TD_EUNAVAILABLE, TD_ETIMEOUT, TD_EPROTO; message in
 * td_connect_error(). Thread-safety: any thread. */
td_status td_server_info_get(const char *address, int timeout_ms, td_server_info *out);

/* As td_server_info_get, with connect_timeout_ms, TLS and token taken from `opts` (may be
 * NULL); `address` may also be tensords://HOST:PORT. Adds TD_EUNAUTHENTICATED. */
td_status td_server_info_get_opts(const char *address, const td_options *opts,
                                  td_server_info *out);

/* n GetInfo round trips over one channel; rtt_ns[i] receives the wall time of round trip
 * i in nanoseconds (caller's array of n). */
td_status td_server_ping(const char *address, int n, int timeout_ms, uint64_t *rtt_ns);
/* As td_server_ping, with TLS and token from `opts` (may be NULL). */
td_status td_server_ping_opts(const char *address, const td_options *opts, int n,
                              uint64_t *rtt_ns);

/* One open session on a server, as td_server_sessions_list reports it. */
typedef struct td_session_info {
    uint64_t id;       /* the server's session id (its logs name it) */
    char tenant[64];   /* the tenant it authenticated as */
    char device[32];   /* "cpu", "cuda:0" */
    char peer[128];    /* the client's address as gRPC names it, e.g. "ipv4:10.0.0.7:51234" */
    uint64_t bytes;    /* device memory it holds, bytes */
    uint64_t age_ms;   /* milliseconds since its call started */
    uint64_t ops;      /* ops the server executed for it */
} td_session_info;

/* List the open sessions of every tenant on the server at `address` (forms as for
 * td_server_info_get; TLS and token from `opts`, which may be NULL; its connect_timeout_ms
 * bounds connect and call together, default 5000). The caller's tenant needs role=admin in
 * the server's tokens file. On success *out is a malloc'ed array of *n entries (free() it;
 * never NULL), in no set order, and *total (may be NULL) the number open: a server lists at
 * most 4096. Errors (message in td_connect_error): TD_EINVAL (bad address, NULL out/n),
 * TD_EUNAUTHENTICATED (no or unknown token, or the tenant lacks the admin role),
 * TD_EUNAVAILABLE, TD_ETIMEOUT, TD_EPROTO (not a tensord, or one without admin methods),
 * TD_ENOMEM. Thread-safety: any thread. */
td_status td_server_sessions_list(const char *address, const td_options *opts,
                                  td_session_info **out, size_t *n, uint64_t *total);
/* End open session `session_id` on the server at `address` (admin role needed, as above):
 * its client sees UNAVAILABLE "session ended by an administrator". Errors as
 * td_server_sessions_list, and TD_ENOTFOUND (no open session has that id), TD_EINVAL (id
 * 0 or above 2^63-1). Thread-safety: any thread. */
td_status td_server_session_kill(const char *address, const td_options *opts,
                                 uint64_t session_id);

/* ---- graphs: capture a sequence of ops once, replay it with new inputs ----
 *
 * Capture: td_graph_begin(ctx) switches the context to capturing. td_graph_input() makes a
 * named placeholder of a fixed dtype and shape; op calls made on placeholders (and on
 * ordinary tensors created before td_graph_begin, which the graph captures by reference:
 * "captured tensors", e.g. constant weights) validate and return placeholder handles at
 * once but execute nothing. td_graph_output() names results. td_graph_end() validates the
 * whole graph with the engine's op table and returns it. Placeholders can only be used in
 * ops while capturing; td_read/td_write of them fail with TD_EINVAL; td_release them (or
 * leave them to td_close) when done.
 * While capturing, td_read, td_write, td_from_host and td_fence on the context fail with
 * TD_EINVAL; creation ops with constant data (td_full, td_arange, td_rand_*) are captured.
 *
 * Replay: td_graph_run() binds one existing tensor to every input (exact dtype and shape)
 * and returns fresh output tensors; it is lazy like any op (errors surface at the next
 * td_read of an output or td_fence). The same kernels run in the same order as the eager
 * calls, so outputs are bit-identical to running the ops directly.
 * Remote: the server caches validated graphs by SHA-256 of their canonical encoding (a
 * bounded LRU per server, `tensord --graph-cache N`); a run sends only the graph id and the
 * bindings. The first run of a graph on a context looks it up in that cache (one round
 * trip) and sends the definition only when the server lacks it (evicted, restarted).
 *
 * Training loops: make the weights graph inputs and their updated values outputs; after a
 * run, release the old weights and bind the new ones next time. A tensor captured by
 * reference must stay alive while the graph is run: a run after it was released fails
 * with TD_ENOTFOUND naming the tensor.
 *
 * Lifetime: a td_graph belongs to the context it was captured on; td_graph_destroy() it
 * before td_close(). Thread-safety: the context's rule. */
typedef struct td_graph td_graph;

/* Start capturing on ctx. Pending ops are flushed first. Returns TD_OK; TD_EINVAL (already
 * capturing); transport errors of the flush. */
td_status td_graph_begin(td_context *ctx);
/* A placeholder input named `name` (1..255 printable characters, no spaces, unique among
 * inputs) of dtype dt and shape dims. NULL on error (td_last_error). */
td_tensor *td_graph_input(td_context *ctx, const char *name, td_dtype dt, int rank,
                          const int64_t *dims);
/* Name `t` (a placeholder, an input, or a captured tensor) as an output of the graph being
 * captured. Returns TD_OK or TD_EINVAL (not capturing, NULL t, bad or duplicate name). */
td_status td_graph_output(td_context *ctx, const char *name, td_tensor *t);
/* Stop capturing and validate. On TD_OK *out owns the graph. On failure (TD_EINVAL: no
 * outputs, an invalid graph; TD_ENOMEM) capture stops too and nothing is returned. */
td_status td_graph_end(td_context *ctx, td_graph **out);
/* Run g. `inputs[i]` binds the input named in_names[i] (in_names NULL: the inputs in the
 * order they were declared); n_in must equal the number of inputs. outputs[i] receives a
 * new tensor (owned by the caller) for the output named out_names[i] (NULL: declaration
 * order); n_out must equal the number of outputs. Returns TD_OK; TD_EINVAL (counts,
 * unknown names, wrong dtype/shape, a placeholder bound as input; message names the
 * input); transport errors. Execution errors, including a captured tensor that was
 * released, surface at the next read or fence as for any op. On failure no output is
 * returned. */
td_status td_graph_run(td_graph *g, int n_in, const char *const *in_names,
                       td_tensor *const *inputs, int n_out, const char *const *out_names,
                       td_tensor **outputs);
/* Free the graph. A remote session lets go of it too (a server session holds at most 256
 * graphs at a time, counting those not yet destroyed), while the server's cache may keep
 * it for the tenant, so capturing the same graph again costs no definition upload. Runs
 * already issued complete. NULL is a no-op. */
void td_graph_destroy(td_graph *g);

typedef struct td_graph_info {
    int n_inputs, n_outputs, n_ops, n_captured;
    uint64_t runs;             /* td_graph_run calls that succeeded */
    uint64_t definitions_sent; /* times the definition crossed the wire (remote) */
    char id[65];               /* SHA-256 of the canonical encoding, hex */
} td_graph_info;
void td_graph_get_info(const td_graph *g, td_graph_info *out);

/* ---- ONNX models: load once, run on any device ----
 *
 * td_onnx_load reads an ONNX model (a serialized onnx.ModelProto, the format of
 * https://github.com/onnx/onnx/blob/v1.12.0/onnx/onnx.proto) and prepares it to run on the
 * context's device, local or remote. Supported: IR versions TD_ONNX_IR_MIN..TD_ONNX_IR_MAX,
 * opsets TD_ONNX_OPSET_MIN..TD_ONNX_OPSET_MAX of the default domain ("" / "ai.onnx"),
 * tensors of the dtypes tensord has (FLOAT, DOUBLE, FLOAT16, BFLOAT16, INT8, INT16, INT32,
 * INT64, UINT8, BOOL); the ops docs/onnx.md lists (elementwise arithmetic and activations,
 * MatMul/Gemm, Conv/ConvTranspose, pooling, Resize, reductions, softmax, normalizations,
 * losses, shape and movement ops), each lowered onto ops of the op table. Not supported: other domains (ai.onnx.ml, com.microsoft),
 * control flow (If, Loop, Scan), sequences and maps, external or sparse tensor data.
 * Inputs that give shapes (Reshape's shape, Slice's bounds, ...) are computed on the host
 * when the graph is captured: from initializers, Constant nodes, Shape/Size, and graph
 * inputs (read at each run), through any mapped ops (run on a private local:cpu context;
 * at most 65536 elements per value).
 *
 * Validation at load, before anything runs: the protobuf must decode; every value is
 * defined once and every node input is defined; the nodes must have no cycle (any order in
 * the file is accepted); every node must map onto tensord ops; initializers' data must
 * match their dims and dtype (sizes computed with overflow checks, at most 2^48 bytes per
 * tensor). When every graph input has fixed dims, the whole model is also captured at load
 * as one tensord graph (td_graph_begin .. td_graph_end), which infers and checks every
 * node's shapes and dtypes with the engine's op table; otherwise that happens at the first
 * td_onnx_run with each new set of input shapes (the last few graphs are kept). Graph
 * inputs that give a shape or axes are read to the host at each run (one round trip) and
 * are part of that key. Errors name the node ("onnx node 3 'fc1' (Gemm): ...") and the
 * value; an op, dtype, domain or opset tensord lacks is TD_EUNSUPPORTED naming the op type,
 * domain and opset, never a wrong answer.
 *
 * Initializers and Constant nodes are uploaded once, at load, with td_from_host (so those
 * of at least td_options.blob_min_bytes cross the wire once per server through its blob
 * store), and stay on the device until td_onnx_destroy. An initializer that is also listed
 * as a graph input is a constant (its default is not overridable).
 *
 * Lifetime: the model belongs to its context (td_onnx_destroy it before td_close); it keeps
 * the tensors of its initializers. Thread-safety: the context's rule (one thread at a time,
 * the model included). */
#define TD_ONNX_IR_MIN 3
#define TD_ONNX_IR_MAX 8
#define TD_ONNX_OPSET_MIN 1
#define TD_ONNX_OPSET_MAX 17
/* Largest .onnx file td_onnx_load reads (protobuf's 2 GiB message limit). */
#define TD_ONNX_MAX_FILE_BYTES ((size_t)2 << 30)

typedef struct td_onnx_model td_onnx_model;

/* A graph input or output as the model declares it. */
typedef struct td_onnx_value {
    const char *name;          /* owned by the model */
    td_dtype dtype;
    int rank;                  /* -1: the model does not say */
    int64_t dims[TD_MAX_RANK]; /* -1: a symbolic or unknown dim */
} td_onnx_value;

/* Load the model in file `path` (at most TD_ONNX_MAX_FILE_BYTES) onto ctx. On TD_OK *out
 * owns the model (td_onnx_destroy). Returns: TD_OK; TD_EIO (cannot open or read the file);
 * TD_EINVAL (not a valid model: truncated or malformed protobuf, undefined or twice-defined
 * values, a cycle, initializer data that does not match its dims, shapes or dtypes the op
 * table rejects); TD_EUNSUPPORTED (IR version or opset outside the ranges above, an op,
 * domain, dtype or feature tensord lacks); TD_ENOMEM; transport errors of the initializer
 * uploads. td_last_error(ctx) says which node and value. On failure *out is untouched and
 * nothing stays allocated on the context. Thread-safety: the context's rule. */
td_status td_onnx_load(td_context *ctx, const char *path, td_onnx_model **out);
/* As td_onnx_load, from `nbytes` bytes at `data` (borrowed for the call). */
td_status td_onnx_load_memory(td_context *ctx, const void *data, size_t nbytes,
                              td_onnx_model **out);
/* Free the model and its initializer tensors. NULL is a no-op. */
void td_onnx_destroy(td_onnx_model *m);
/* Number of graph inputs (initializers excluded) and outputs; 0 for NULL. */
int td_onnx_n_inputs(const td_onnx_model *m);
int td_onnx_n_outputs(const td_onnx_model *m);
/* Declared name, dtype and shape of input / output i (0-based). TD_EINVAL when i is out of
 * range. The name is owned by the model. */
td_status td_onnx_input(const td_onnx_model *m, int i, td_onnx_value *out);
td_status td_onnx_output(const td_onnx_model *m, int i, td_onnx_value *out);
/* Run the model. inputs[j] (a tensor of the model's context) binds the input named
 * in_names[j] (in_names NULL: the inputs in declaration order); n_in must equal
 * td_onnx_n_inputs. Each input's dtype must be the declared one and its dims must match the
 * declared fixed dims. outputs[i] receives a new tensor (owned by the caller, td_release)
 * for output i in declaration order; n_out must equal td_onnx_n_outputs. Lazy like
 * td_graph_run: execution errors surface at the next td_read or td_fence; outputs are
 * bit-identical to running the same ops eagerly, so a local and a remote cpu device give
 * the same bits. Returns: TD_OK; TD_EINVAL (counts, names, dtypes or shapes of the inputs,
 * or a node that rejects these shapes, naming it); TD_EUNSUPPORTED; TD_ENOMEM; transport
 * errors. On failure no output is returned. Thread-safety: the context's rule. */
td_status td_onnx_run(td_onnx_model *m, int n_in, const char *const *in_names,
                      td_tensor *const *inputs, int n_out, td_tensor **outputs);

/* A host tensor decoded from a serialized onnx.TensorProto (the input_N.pb / output_N.pb
 * files of ONNX test data). */
typedef struct td_onnx_tensor {
    char name[256]; /* the TensorProto's name, truncated to 255 bytes */
    td_dtype dtype;
    int rank;
    int64_t dims[TD_MAX_RANK];
    void *data;    /* nbytes of row-major little-endian elements; owned (td_onnx_tensor_fini) */
    size_t nbytes; /* nelem * td_dtype_size(dtype) */
} td_onnx_tensor;
/* Decode `nbytes` at `buf` (borrowed) into *out (caller's storage, filled on TD_OK only).
 * Returns TD_OK; TD_EINVAL (malformed protobuf, dims and data that disagree, rank > 8);
 * TD_EUNSUPPORTED (a data type tensord lacks, external data); TD_ENOMEM. The message is
 * td_last_error(NULL). Thread-safety: any thread. */
td_status td_onnx_tensor_decode(const void *buf, size_t nbytes, td_onnx_tensor *out);
/* Free out->data (NULL or a zeroed struct is fine). */
void td_onnx_tensor_fini(td_onnx_tensor *t);

#ifdef __cplusplus
}
#endif
#endif

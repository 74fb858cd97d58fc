/* transport.h — how a client context reaches its executor.
 *
 * Two transports implement this table: local (client/local.c: an engine session in this
 * process) and remote (client/remote.c: a gRPC Session stream to tensord). The context
 * (client/context.c) records ops, does shape inference and batching, and calls these.
 *
 * Error contract shared by both: submit never reports executor failures itself — they are
 * queued as "deferred" and returned by the next fence (first one, then forgotten); a read
 * of a tensor that depends on a failed op returns TD_EPOISONED with the original message.
 * Transport-level errors (server gone, deadline) are returned at once and make the
 * transport unusable: every later call returns TD_ECLOSED.
 * Messages go to t->err. Thread-safety: one thread at a time.
 */
#ifndef TD_CLIENT_TRANSPORT_H
#define TD_CLIENT_TRANSPORT_H

#include "engine/op.h"
#include "tensord.h"

#include <stdatomic.h>

typedef struct td__transport td__transport;

/* Defaults of td_options fields (tensord.h documents them). */
#define TD_BATCH_MAX_OPS_DEFAULT 256
#define TD_BATCH_MAX_BYTES_DEFAULT ((size_t)1 << 20)
#define TD_BATCH_FLUSH_US_DEFAULT 2000
#define TD_BLOB_MIN_BYTES_DEFAULT ((size_t)1 << 20)
/* Below about 32 KiB the stream is as fast (one message either way); from 64 KiB the
 * region wins (write + read of 64 KiB: 117-166 us against 218-357 us over the unix
 * stream on the loaded 2-core VM, 2026-12-04). */
#define TD_SHM_MIN_BYTES_DEFAULT ((size_t)64 << 10)
struct td__graph;

/* Work a caller does while a transport waits for an answer (client/offer.c: hashing an
 * upload while its fingerprint offer is on the way): each step(arg) does one bounded piece
 * (tens of microseconds) and returns false once there is nothing left to do. The
 * transport checks for the answer between steps and stops calling step as soon as it is
 * there; the caller finishes whatever is left itself. */
typedef struct td__wait_work {
    bool (*step)(void *arg);
    void *arg;
} td__wait_work;

typedef struct td__transport_vt {
    td_status (*submit)(td__transport *t, const td__op *ops, size_t n);
    td_status (*write)(td__transport *t, uint64_t id, uint64_t offset, const void *src,
                       size_t nbytes);
    td_status (*read)(td__transport *t, uint64_t id, uint64_t offset, void *dst, size_t nbytes);
    /* Reads that do not wait (td_read_start). read_start sends a read of `nbytes` of tensor
     * `id` from byte `offset` into `dst` and returns at once with *ticket (never 0) naming
     * it; dst is the caller's until read_finish. read_finish waits until that read's bytes
     * are in dst or it failed (its status, message in t->err), and forgets the ticket; it
     * is called once per ticket. read_start returns TD_EUNSUPPORTED, having done nothing,
     * when this read must go another way (a large read through shared memory): the context
     * then reads with vt->read. close forgets the reads still pending and touches no dst
     * from then on. NULL: never asynchronous (local). */
    td_status (*read_start)(td__transport *t, uint64_t id, uint64_t offset, void *dst,
                            size_t nbytes, uint64_t *ticket);
    td_status (*read_finish)(td__transport *t, uint64_t ticket);
    td_status (*release)(td__transport *t, const uint64_t *ids, size_t n);
    td_status (*fence)(td__transport *t);
    void (*close)(td__transport *t); /* frees t */
    /* Graphs (client/graph.c). graph_prepare makes a validated graph usable by the executor
     * (remote: look it up in the server's cache, send the definition when it is missing;
     * *defines_sent counts definitions sent); NULL when nothing is needed (local).
     * graph_run runs it (fire-and-forget, like submit). */
    td_status (*graph_prepare)(td__transport *t, const struct td__graph *g,
                               uint64_t *defines_sent);
    td_status (*graph_run)(td__transport *t, const struct td__graph *g, const uint64_t *in_ids,
                           size_t n_in, const uint64_t *out_ids, size_t n_out);
    /* graph_release tells the executor that one graph_prepare of g is no longer needed
     * (remote: GraphRelease, on sessions of protocol 3 or later; fire-and-forget, nothing
     * is sent on a closed session); NULL when nothing is needed (local). */
    void (*graph_release)(td__transport *t, const struct td__graph *g);
    /* Blob store (content-addressed by SHA-256, hash is 32 bytes); NULL when the executor
     * has none (local). When to use them is client/offer.c's policy. blob_has asks whether
     * the store holds `hash` (one round trip; *present). blob_write fills tensor `id` from
     * the stored blob, blob_store asks the executor to keep tensor `id`'s bytes under
     * `hash` (both fire-and-forget: a failure comes back as a deferred error). */
    td_status (*blob_has)(td__transport *t, const uint8_t *hash, bool *present);
    td_status (*blob_write)(td__transport *t, uint64_t id, const uint8_t *hash);
    td_status (*blob_store)(td__transport *t, uint64_t id, const uint8_t *hash);
    /* Fingerprints (TD_FINGERPRINT_BYTES, common/fingerprint.h: a first-pass key, never
     * trusted). blob_has_fingerprint asks whether the executor keeps a candidate (or a
     * blob promoted from one) under `fp` for this tenant (one round trip; *present); on a
     * hit the executor has moved the candidate's bytes into the store under their SHA-256,
     * so a blob_has of the data's SHA-256 tells whether they are these bytes. While the
     * answer is on its way it runs `work`'s steps (may be NULL: none; td__wait_work).
     * blob_candidate asks the executor to keep tensor `id` (written) as a candidate under
     * `fp` (fire-and-forget). NULL when the executor has no blob store. */
    td_status (*blob_has_fingerprint)(td__transport *t, const uint8_t *fp, bool *present,
                                      const td__wait_work *work);
    td_status (*blob_candidate)(td__transport *t, uint64_t id, const uint8_t *fp);
    /* Copy tensor `id` to device `device` of the session (an index into
     * td__transport.devices) as the new tensor `out`, inside the executor; fire-and-forget
     * like submit (failures are deferred). NULL when the executor cannot (remote servers
     * before protocol 4). */
    td_status (*to_device)(td__transport *t, uint64_t id, uint64_t out, uint32_t device);
    /* Host buffers (td_host_alloc): host_alloc gives `nbytes` of memory that write and read
     * move with fewer copies (remote: a piece of the session's shared-memory region, page
     * aligned; local: pages pinned for the session's GPU, when it has one that can pin);
     * TD_EUNSUPPORTED when this transport has no such memory (the context then
     * gives plain memory), TD_ENOMEM with t->err when it has but not that much.
     * host_free gives back what host_alloc gave (TD_EINVAL: not one of its buffers).
     * NULL: never any. */
    td_status (*host_alloc)(td__transport *t, size_t nbytes, void **out);
    td_status (*host_free)(td__transport *t, void *p);
    /* Background sends: hand queued messages to the executor's connection for up to a few
     * milliseconds (remote: pump the call while its send queue is not empty, giving way at
     * once to a caller of any other function); returns true while messages are still
     * queued. Called by the context's flusher thread (client/batch.h) after a call left
     * t->sends_queued set; the only function that may run on another thread than the
     * context's user thread, at the same time as the others. NULL: never needed (local). */
    bool (*drive)(td__transport *t);
} td__transport_vt;

/* Devices one session may span (proto/wire_limits.h TD_SESSION_MAX_DEVICES). */
#define TD_TRANSPORT_MAX_DEVICES 4

struct td__transport {
    const td__transport_vt *vt;
    char device[32];     /* device actually opened */
    /* Every device of the session: devices[0] is `device`, then the further devices the
     * uri named, in order (ToDevice's numbering). */
    char devices[TD_TRANSPORT_MAX_DEVICES][32];
    uint32_t n_devices;
    char server[256];    /* the server the session is on ("" for local) */
    const char *transport; /* td_context_transport: "grpc", "shm", "shm+ring"; NULL: "local" */
    /* Set by the context while it flushes for a read or fence that follows at once: the
     * transport may hold the batch and releases to send them with it (the request ring). */
    bool sync_next;
    /* Set by the context when its flusher thread calls vt->drive: the transport may return
     * from a write before the bytes are on the wire (remote: a copy of a small write is
     * queued; client/remote.c "background sends"). */
    bool driven;
    /* After each call, set by the transport when messages wait in its send queue: the
     * context then wakes the flusher thread to drive them (vt->drive). Atomic: written by
     * whichever thread's call just ended (the user thread's read_start, read_finish, read
     * or fence run outside the flusher lock) and read by the flusher thread's flush (TSan
     * found the race with reads pending during background sends). A flag only: the kick
     * and vt->drive take their own locks. */
    atomic_bool sends_queued;
    size_t blob_min_bytes; /* uploads at least this large go through the blob offer */
    bool blob_fingerprints; /* the executor takes fingerprints (protocol >= 2) */
    bool offer_last_fresh;  /* client/offer.c: the last fingerprint offer found nothing */
    bool no_attention_op;   /* the executor predates opcode 299 (protocol < 6) */
    char err[1024];      /* message of the last failure */
    td_stats stats;      /* batches_sent, bytes_*, round_trips maintained by the transport */
    td_status deferred;  /* first executor failure since the last fence */
    char deferred_msg[1024];
};

/* Upload `nbytes` from `src` into tensor `id` (offset 0) through t, offering the data to
 * the executor's blob store first when the policy says so (client/offer.c). Same contract
 * as vt->write. */
td_status td__offer_write(td__transport *t, uint64_t id, const void *src, size_t nbytes,
                          bool fresh);

/* Record a deferred failure if none is pending (shared by both transports). */
void td__transport_defer(td__transport *t, td_status st, const char *msg);

/* Split a device list "cpu:0,cpu:1" (the uri's DEVICE part) into its first device and the
 * further ones: first (cap 64) and more[TD_TRANSPORT_MAX_DEVICES - 1] (cap 32 each).
 * Returns the number of further devices, or -1 with a message in err (too many, an empty
 * or too long entry). */
int td__device_list_split(const char *list, char first[64],
                          char more[TD_TRANSPORT_MAX_DEVICES - 1][32], char *err,
                          size_t errlen);

/* Open an in-process engine session on device `device` ("cpu"; a list "cpu:0,cpu:1" spans
 * several devices; "auto" and a GPU kind take the device of that kind with the most free
 * memory). */
td_status td__local_open(const char *device, td__transport **out, char *err, size_t errlen);

/* Whether a remote target names a pool: a comma-separated server list, or "dns:..."; a
 * "unix:PATH" target never is (a path may contain commas). */
bool td__pool_is_pool(const char *target);
/* Open a session on one server of pool `pool` ("h1:7070,h2:7070" or "dns:///NAME:PORT";
 * client/pool.c has the policy: round robin, skipping members that are down, draining or
 * refuse); the transport's `server` names the member. Errors as td__remote_open, the
 * message naming the pool. */
td_status td__pool_open(const char *pool, const char *device, const td_options *opts,
                        td__transport **out, char *err, size_t errlen);

/* Open a remote session. `target` is a gRPC target ("127.0.0.1:7070", "unix:/path"),
 * `device` may be "" (server default). */
td_status td__remote_open(const char *target, const char *device, const td_options *opts,
                          td__transport **out, char *err, size_t errlen);
/* td__remote_open for a pool member: on failure *device_denied (may be NULL) says whether
 * the server refused the tenant the device it asked for (PERMISSION_DENIED: "tenant 'T' may
 * not use device cpu:1"), which another member may grant, as opposed to a bad token
 * (UNAUTHENTICATED), which every member refuses. Both are TD_EUNAUTHENTICATED. */
td_status td__remote_open_member(const char *target, const char *device,
                                 const td_options *opts, td__transport **out,
                                 bool *device_denied, char *err, size_t errlen);
#endif

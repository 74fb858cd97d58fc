/* request.h — a Session stream's messages as plain structs: each received ClientMessage
 * decoded and validated into a td__request, each reply a td__reply encoded into a
 * ServerMessage.
 *
 * Why: every check of what a client sent (sizes, counts, hash lengths, payload placement,
 * protocol versions, device names, unknown bodies) sits in request.c, in one place, and
 * the handlers that run on the device worker (server/handlers.c, server/caches.c) work on
 * plain fields: they never see protobuf-c types. request.c and server/call.c are the only
 * server files that do.
 *
 * Validation that depends on the session (seq order, quotas, limits on sessions) is the
 * session's (server/session.c): a request carries the seq it came with, and a message that
 * breaks a wire rule becomes a TD_REQ_BAD request that still carries its seq, so the
 * session checks the order first, as it always has.
 *
 * Thread-safety: a td__req_decoder and the requests it produces belong to one thread at a
 * time; td__reply_encode is stateless.
 */
#ifndef TD_SERVER_REQUEST_H
#define TD_SERVER_REQUEST_H

#include "common/sha256.h"
#include "engine/device.h"
#include "engine/graph.h"
#include "engine/op.h"
#include "wire_limits.h"
#include "tensord.h"

#include <grpc/status.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct grpc_byte_buffer;

typedef enum td__req_kind {
    TD_REQ_BAD = 0,   /* broke a wire rule: answer with a Failure (status, text) */
    TD_REQ_OPEN,
    TD_REQ_BATCH,
    TD_REQ_WRITE,
    TD_REQ_HAS_BLOBS,
    TD_REQ_WRITE_FROM_BLOB,
    TD_REQ_STORE_BLOB,
    TD_REQ_READ,
    TD_REQ_RELEASE,
    TD_REQ_FENCE,
    TD_REQ_GRAPH_DEFINE,
    TD_REQ_GRAPH_RUN,
    TD_REQ_GRAPH_RELEASE,
    TD_REQ_TO_DEVICE,
    TD_REQ_SHM_WRITE,
    TD_REQ_SHM_READ,
    TD_REQ_KIND_COUNT /* not a kind: how many there are */
} td__req_kind;

/* Where a write's payload is (in gRPC's slices or in a decode scratch); request.c's. */
typedef struct td__req_payload td__req_payload;

typedef struct td__request {
    td__req_kind kind;
    bool decoded;   /* false: undecodable (kind is TD_REQ_BAD, seq unknown) */
    uint64_t seq;
    size_t cost;    /* memory the request holds, for the call's flow control */

    /* TD_REQ_BAD: the Failure to answer; the ids it poisons first (owned). For a first
     * message that is not a valid open, reject_code is the status that ends the call. */
    td_status status;
    char *text; /* owned; NULL: the status' own message */
    grpc_status_code reject_code;
    uint64_t *poison_ids;
    size_t n_poison;

    /* TD_REQ_OPEN */
    uint32_t protocol;  /* the version chosen */
    td__device *dev;    /* the device named; NULL for a placement request ("auto", "cuda") */
    char device_req[32]; /* the device string sent ("" = none): a name or a placement */
    char client[65];    /* sanitized client name */
    /* OpenSession.devices: the further devices named (distinct known devices, no
     * placement words); checked against the tenant's list and the placed device later */
    td__device *extra[TD_SESSION_MAX_DEVICES - 1];
    size_t n_extra;
    bool shm;           /* OpenSession.shm at protocol >= TD_PROTOCOL_SHM */
    bool ring;          /* OpenSession.ring with shm at protocol >= TD_PROTOCOL_RING */
    uint64_t shm_bytes; /* OpenSession.shm_bytes: the region size asked for (0: default) */

    /* TD_REQ_BATCH: converted ops (owned); op_errs[i] (owned, NULL unless op i could not
     * be converted: it then has opcode TD_REQ_BAD_OPCODE). */
    td__op *ops;
    size_t n_ops;
    char **op_errs;

    /* TD_REQ_WRITE, _WRITE_FROM_BLOB, _STORE_BLOB, _READ, _GRAPH_*, _TO_DEVICE */
    uint64_t tensor;
    uint64_t output;      /* TD_REQ_TO_DEVICE: the new tensor's id */
    uint32_t device;      /* TD_REQ_TO_DEVICE: index in the session's devices */
    uint64_t offset;
    uint64_t nbytes;      /* TD_REQ_READ, _SHM_*; TD_REQ_WRITE: the payload's length */
    uint64_t region_offset; /* TD_REQ_SHM_*: where in the session's region (unchecked
                             * here: the region's size is the session's) */
    td__req_payload *payload; /* TD_REQ_WRITE (owned) */
    const uint8_t *hash;  /* TD_SHA256_BYTES (blobs) or TD_GRAPH_HASH_BYTES (graphs) */

    /* TD_REQ_HAS_BLOBS: n_hashes pointers to TD_SHA256_BYTES each, then n_fps pointers to
     * TD_FINGERPRINT_BYTES each */
    const uint8_t **hashes;
    size_t n_hashes;
    const uint8_t **fps;
    size_t n_fps;
    /* TD_REQ_STORE_BLOB: keep as a candidate under this fingerprint (TD_FINGERPRINT_BYTES;
     * hash is then NULL), else NULL */
    const uint8_t *fp;

    /* TD_REQ_RELEASE */
    const uint64_t *ids;
    size_t n_ids;

    /* TD_REQ_GRAPH_RUN */
    const uint64_t *inputs, *outputs;
    size_t n_inputs, n_outputs;
    bool has_definition; /* TD_REQ_GRAPH_DEFINE carries a definition (td__request_graph) */

    void *msg; /* the unpacked message the pointers above point into (owned) */
} td__request;

/* Opcode no op uses: stands in for an op that could not be converted, so that the engine
 * poisons its output id and later ops that read it fail as they would for any failed op. */
#define TD_REQ_BAD_OPCODE 0xFFFFFFFFu

/* Decoding state of one stream (its reusable scratch). */
typedef struct td__req_decoder td__req_decoder;
/* Returns NULL when out of memory. */
td__req_decoder *td__req_decoder_create(void);
void td__req_decoder_destroy(td__req_decoder *d); /* NULL is a no-op */

/* Decode and validate one received message (takes ownership of bb) into *rq (fully
 * initialised whatever the result: a message that breaks a rule, or that there is no
 * memory for, is TD_REQ_BAD). `first`: the stream's first message, which must be a valid
 * open; anything else is TD_REQ_BAD with reject_code set. */
void td__request_decode(td__req_decoder *d, struct grpc_byte_buffer *bb, bool first,
                        td__request *rq);
/* The same for one message of the request ring (tensord.proto "request ring"): `data`
 * must be the server's private copy (it is read in place, never shared memory) and must
 * live until rq is finished. Never an open. */
void td__request_decode_flat(td__req_decoder *d, const uint8_t *data, size_t len,
                             td__request *rq);
/* Free what rq owns; it is then empty. */
void td__request_fini(td__request *rq);
/* Turn rq into TD_REQ_BAD answering `st` with the formatted text (what it held is freed,
 * poison_ids kept). Returns false when out of memory for the text (the status' own message
 * is used). */
bool td__request_fail(td__request *rq, td_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Copy a TD_REQ_WRITE's payload (rq->nbytes bytes) to dst, straight from where it was
 * received. Returns TD_OK or TD_EPROTO (unreadable, only on memory corruption). */
td_status td__request_payload_copy(const td__request *rq, void *dst);
/* Copy payload bytes [off, off + len) to dst (pieces in any order). TD_ERANGE when the range
 * is outside the payload, else as td__request_payload_copy. */
td_status td__request_payload_copy_range(const td__request *rq, size_t off, size_t len,
                                         void *dst);
/* The payload as one flat block, or NULL when it lies in several slices. */
const void *td__request_payload_flat(const td__request *rq);

/* Validate and build the definition a TD_REQ_GRAPH_DEFINE carries (a new reference in
 * *out). Returns td__wire_graph_from's status and message. */
td_status td__request_graph(const td__request *rq, td__graph **out, char *err, size_t errlen);

/* Copy `in` (NULL: "") into out as printable ASCII only (others become '?'), at most
 * cap-1 bytes: strings from the wire or the peer go into logs and messages. */
void td__request_printable(const char *in, char *out, size_t cap);

/* ---- replies ---- */

typedef enum td__reply_kind {
    TD_REPLY_OPENED,
    TD_REPLY_FAILURE,
    TD_REPLY_READ,
    TD_REPLY_FENCE,
    TD_REPLY_BLOB_STATUS,
    TD_REPLY_GRAPH_READY,
    TD_REPLY_SHM_DONE,
} td__reply_kind;

typedef struct td__reply {
    td__reply_kind kind;
    uint64_t seq;
    /* TD_REPLY_OPENED (the limits are proto/wire_limits.h's) */
    uint32_t protocol;
    const char *device;
    uint64_t session_id;
    const char *const *devices; /* every device of the session when it spans several */
    size_t n_devices;
    const char *shm_path;  /* the side socket, when the session has a region (else NULL) */
    const uint8_t *shm_secret; /* TD_SHM_SECRET_BYTES */
    uint64_t shm_bytes;
    uint64_t ring_offset, ring_bytes; /* the request ring in the region (0, 0: none) */
    const char *shm_refused; /* why an asked-for region was not given (else NULL) */
    /* TD_REPLY_FAILURE */
    uint32_t op_index;
    td_status status;
    const char *message;
    /* TD_REPLY_READ: a chunk; data (nbytes) is sent as its own slice, and release(arg) is
     * called (any thread) when gRPC lets go of it, or at once when encoding fails. */
    uint64_t tensor, offset;
    bool last;
    const void *data;
    size_t nbytes;
    void (*release)(void *arg);
    void *release_arg;
    /* TD_REPLY_FENCE: messages queued on the stream before it (FenceDone.stream_msgs) */
    uint64_t stream_msgs;
    /* TD_REPLY_BLOB_STATUS */
    const bool *present;
    size_t n_present;
    /* TD_REPLY_GRAPH_READY */
    const uint8_t *graph_id;
    bool known;
} td__reply;

/* Encode r. Returns TD_OK with a new byte buffer in *out, or TD_ENOMEM. */
td_status td__reply_encode(const td__reply *r, struct grpc_byte_buffer **out);
/* Encode r into dst (the same bytes, a read's payload inline): TD_OK with *len, TD_ENOMEM,
 * or TD_ERANGE when it needs more than cap bytes. A read's release runs before it returns. */
td_status td__reply_encode_flat(const td__reply *r, uint8_t *dst, size_t cap, size_t *len);
#endif

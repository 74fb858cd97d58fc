/* wire_limits.h — the protocol limits of tensord.v1 (chunk size, message size, batch ops, hashes
 * per request), in one header that the code and tensord.proto's comments both follow.
 *
 * Kept apart from wire.h so that code which must not see protobuf-c or gRPC types (the
 * server's handlers, the client's policies) can still use the limits.
 * Thread-safety: constants only.
 */
#ifndef TD_PROTO_WIRE_LIMITS_H
#define TD_PROTO_WIRE_LIMITS_H

#define TD_PROTOCOL_MIN 1
#define TD_PROTOCOL_MAX 6
/* The first protocol with HasBlobs.fingerprint and StoreBlob.fingerprint (tensord.proto);
 * a client offers fingerprints only to a session opened at this version or later. */
#define TD_PROTOCOL_FINGERPRINTS 2
/* The first protocol with GraphRelease (tensord.proto); a client releases graphs only on a
 * session opened at this version or later. */
#define TD_PROTOCOL_GRAPH_RELEASE 3
/* The first protocol with sessions that span devices (OpenSession.devices,
 * SessionOpened.devices, ToDevice). */
#define TD_PROTOCOL_DEVICES 4
/* The first protocol with the shared-memory data path (OpenSession.shm, SessionOpened.shm,
 * ShmWrite, ShmRead, ShmDone; tensord.proto "shared memory"). */
#define TD_PROTOCOL_SHM 5
/* The first protocol with the request ring (OpenSession.ring, ShmOffer.ring_offset and
 * ring_bytes; tensord.proto "request ring"). */
#define TD_PROTOCOL_RING 6
/* The first protocol whose servers know SCALED_DOT_PRODUCT_ATTENTION (opcode 299); a client
 * records the composite (matmul, mask, softmax, matmul) on older sessions. */
#define TD_PROTOCOL_ATTENTION 6
/* The side socket's handshake (tensord.proto "shared memory"): request and reply headers,
 * the secret's length, the longest reply message. */
#define TD_SHM_MAGIC "TDSHM001"
#define TD_SHM_SECRET_BYTES 16
#define TD_SHM_REQUEST_BYTES 32
#define TD_SHM_REPLY_BYTES 24
#define TD_SHM_MESSAGE_MAX 256
/* Region size when the server is given none (--shm-bytes), and the bounds it accepts. */
#define TD_SHM_DEFAULT_BYTES ((unsigned long long)64 << 20)
#define TD_SHM_MIN_BYTES ((unsigned long long)1 << 20)
#define TD_SHM_MAX_BYTES ((unsigned long long)4 << 30)
/* The largest region a session may ask for (OpenSession.shm_bytes) unless --shm-max-bytes
 * says otherwise. */
#define TD_SHM_DEFAULT_MAX_BYTES ((unsigned long long)1 << 30)
/* The request ring (tensord.proto "request ring"): the last TD_RING_BYTES of a session's
 * region when the open asked for it. Offsets are from the ring's start; every header word
 * is a little-endian u32 on its own, read and written atomically:
 *   REQ_COUNT  the client adds 1 after writing a request, in one aligned store of release
 *              order (tensord.proto "request ring": publishing) (the server's futex word)
 *   REQ_LEN    the request's length in bytes (read once by the server, then checked)
 *   CLIENT_WAITING  the client sets 1 before it sleeps on REP_COUNT (else it spins)
 *   REP_COUNT  the server sets it to the REQ_COUNT it answered (the client's futex word)
 *   REP_LEN    the reply's length
 *   SERVER_WAITING  the server sets 1 before it sleeps on REQ_COUNT
 *   CLOSED     the server sets 1 when it stops serving the ring (the session is ending)
 * A request is up to TD_RING_MAX_MESSAGES frames, each a u32 length and that many bytes of
 * an encoded ClientMessage (as on the stream); the reply is frames of ServerMessages. */
#define TD_RING_BYTES ((unsigned long long)128 << 10)
#define TD_RING_MAGIC 0x31474e52u /* "RNG1", at offset 0 of a fresh ring */
#define TD_RING_OFF_MAGIC 0
#define TD_RING_OFF_REQ_COUNT 64
#define TD_RING_OFF_REQ_LEN 68
#define TD_RING_OFF_CLIENT_WAITING 72
#define TD_RING_OFF_REP_COUNT 128
#define TD_RING_OFF_REP_LEN 132
#define TD_RING_OFF_SERVER_WAITING 136
#define TD_RING_OFF_CLOSED 140
#define TD_RING_REQ_OFFSET 4096
#define TD_RING_REQ_BYTES (28u << 10)
#define TD_RING_REP_OFFSET (32u << 10)
#define TD_RING_REP_BYTES (96u << 10)
#define TD_RING_MAX_MESSAGES 4
/* The most bytes the ReadRequests of one ring request may ask for together (their replies
 * must fit the reply area next to the Failures of the batches before them); a read past it
 * gets a Failure and the session goes on. */
#define TD_RING_READ_MAX (32u << 10)
/* Devices one session may span: OpenSession.devices holds at most this many minus one. */
#define TD_SESSION_MAX_DEVICES 4
#define TD_CHUNK_BYTES (1u << 20)
#define TD_MAX_MESSAGE_BYTES (8u << 20) /* set on both channel ends */
/* HTTP/2 per-stream receive window, fixed (BDP probing off) on both channel ends. gRPC's
 * default (64 KiB, grown by BDP probes) held 64 MiB uploads to ~1 GB/s on loopback; a
 * fixed window of one full message measured ~1.3 GB/s (BENCHMARKS.md, P3). Memory: at
 * most this much per stream waits in gRPC beyond the server's own flow control. */
#define TD_STREAM_WINDOW_BYTES (8u << 20)
#define TD_MAX_BATCH_OPS 65536
#define TD_MAX_HAS_BLOBS 4096 /* hashes plus fingerprints one HasBlobs may offer (tensord.proto) */
/* Fingerprint entries of one HasBlobs that may promote a candidate (a copy or move, and a
 * SHA-256 of its bytes, on the session's worker); later fingerprint entries of the same
 * message are answered absent. One message naming thousands of known fingerprints held
 * the device's worker (and every session waiting on it) for 0.7 s; libtensord offers one
 * fingerprint a message. */
#define TD_MAX_FP_PROMOTIONS 4
#define TD_FINGERPRINT_BYTES 16 /* HasBlobs.fingerprint, StoreBlob.fingerprint (common/fingerprint.h) */
#define TD_MAX_LIST_SESSIONS 4096 /* sessions one ListSessions answer lists (tensord.proto) */
#endif

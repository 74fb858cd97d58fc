/* wire.h — encoding and decoding of tensord.v1 messages to and from gRPC byte buffers.
 *
 * The only code that sees protobuf-c generated types besides the transport files of
 * server/ and client/. Payload bytes (tensor data) never pass through protobuf-c `bytes`
 * fields: the encoder appends field 15 by hand as its own slice over caller memory, and the
 * decoder locates field 15 by scanning the top-level fields of the received message.
 * Measured reason: shared/notes/platform-facts.md (bytes copies: 0.14–0.8 GB/s; slices:
 * 1.2–2.4 GB/s).
 * Thread-safety: stateless functions, any thread.
 */
#ifndef TD_PROTO_WIRE_H
#define TD_PROTO_WIRE_H

#include "wire_limits.h"
#include "tensord.pb-c.h"
#include "tensord.h"
#include <grpc/grpc.h>
#include <grpc/byte_buffer.h>
#include <stddef.h>
#include <stdint.h>

#define TD_METHOD_GETINFO "/tensord.v1.Tensord/GetInfo"
#define TD_METHOD_SESSION "/tensord.v1.Tensord/Session"
#define TD_METHOD_LIST_SESSIONS "/tensord.v1.Tensord/ListSessions"
#define TD_METHOD_KILL_SESSION "/tensord.v1.Tensord/KillSession"

/* Payload memory handed to gRPC: `release(release_arg)` is called (on any thread) when gRPC
 * no longer references `data`. release may be NULL when the memory outlives the call. */
typedef struct td__wire_payload {
    const void *data;
    size_t nbytes;
    void (*release)(void *release_arg);
    void *release_arg;
} td__wire_payload;

/* Pack a protobuf-c message, then (if payload != NULL) field 15 over payload->data.
 * On success *out is a new byte buffer (caller destroys or hands to gRPC). If it fails
 * (TD_ENOMEM), payload->release has been called already. */
td_status td__wire_encode(const ProtobufCMessage *msg, const td__wire_payload *payload,
                          grpc_byte_buffer **out);

/* Reusable receive scratch: grows to the largest message seen. */
typedef struct td__wire_scratch {
    uint8_t *data;
    size_t cap;
} td__wire_scratch;
void td__wire_scratch_fini(td__wire_scratch *s);

/* Decode `bb` (not consumed) as `desc` (e.g. &tensord__v1__client_message__descriptor).
 * The payload field, when present and last, is not copied by protobuf-c: *payload and
 * *payload_len point into scratch (valid until the next decode with that scratch); when a
 * peer placed it elsewhere the message's own payload field is used instead. On success
 * *out is the unpacked message (free with protobuf_c_message_free_unpacked(out, NULL)).
 * Returns TD_OK; TD_EPROTO for garbage or truncated bytes (message in err); TD_ENOMEM. */
td_status td__wire_decode(grpc_byte_buffer *bb, const ProtobufCMessageDescriptor *desc,
                          td__wire_scratch *scratch, ProtobufCMessage **out,
                          const uint8_t **payload, size_t *payload_len, char *err,
                          size_t errlen);

/* Whether every string field of `bb` as `desc`, nested messages included, is free of NUL
 * bytes (protobuf-c would cut such a string at its first NUL). Flattens into scratch.
 * Returns TD_OK, TD_EPROTO naming the field in err, or TD_ENOMEM. For messages read once
 * per stream (an open): it walks the whole message again. */
td_status td__wire_check_strings(grpc_byte_buffer *bb, const ProtobufCMessageDescriptor *desc,
                                 td__wire_scratch *scratch, char *err, size_t errlen);

/* Convert between td__op and the wire Op (op.h layout). from_wire rejects more inputs or
 * iattrs than td__op holds (TD_EPROTO) — no other validation: td__op_infer does that. */
struct td__op;
td_status td__wire_op_from(const Tensord__V1__Op *w, struct td__op *op, char *err, size_t errlen);
/* Fills w using storage in op (w borrows op's arrays; valid while op lives). */
void td__wire_op_to(const struct td__op *op, Tensord__V1__Op *w, uint64_t *inputs_storage);

/* Where a received message's payload lies, so that it can be copied out exactly once,
 * straight from gRPC's slices into its destination (a tensor, a read buffer). */
typedef struct td__wire_span {
    bool present;
    const uint8_t *flat; /* non-NULL: the payload is in the decode scratch at flat */
    size_t offset;       /* else: its byte offset inside the received byte buffer */
    size_t len;
} td__wire_span;

/* Like td__wire_decode, but only the bytes in front of a trailing payload are flattened
 * (into scratch); the payload stays in `bb` and *span says where. A message whose payload
 * is not its last field, or whose header is unusually long, is flattened whole (span->flat
 * set). Copy the payload with td__wire_span_copy while `bb` (and scratch) live. */
td_status td__wire_decode_head(grpc_byte_buffer *bb, const ProtobufCMessageDescriptor *desc,
                               td__wire_scratch *scratch, ProtobufCMessage **out,
                               td__wire_span *span, char *err, size_t errlen);
/* The request ring carries the same encoded messages as the stream, in flat memory; these
 * let the one decoder and the one encoder of each side serve it.
 * td__wire_bb_over: a byte buffer over `data` without copying it (data must outlive the
 * buffer and stay unchanged: pass a private copy, never shared memory). NULL when out of
 * memory. td__wire_bb_copy_out: copy bb's bytes (a payload slice included) to dst;
 * TD_OK with *len, or TD_ERANGE when they exceed cap (dst then holds a prefix). */
grpc_byte_buffer *td__wire_bb_over(const uint8_t *data, size_t len);
td_status td__wire_bb_copy_out(grpc_byte_buffer *bb, uint8_t *dst, size_t cap, size_t *len);

/* Copy the whole payload (span->len bytes) to dst. Returns TD_OK, or TD_EPROTO when the
 * buffer cannot be read (it was already read once, so only on memory corruption). */
td_status td__wire_span_copy(grpc_byte_buffer *bb, const td__wire_span *span, void *dst);
/* Copy payload bytes [off, off + len) to dst (pieces of one payload, in any order).
 * TD_ERANGE when the range is not inside the payload (nothing copied), TD_EPROTO as
 * above. */
td_status td__wire_span_copy_range(grpc_byte_buffer *bb, const td__wire_span *span, size_t off,
                                   size_t len, void *dst);
#endif

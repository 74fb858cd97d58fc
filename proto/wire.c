/* wire.c — tensord.v1 messages to and from gRPC byte buffers, with zero-copy payloads.
 *
 * Why hand-written framing around protobuf-c: tensor payloads are large, and protobuf-c's
 * `bytes` fields copy them (twice on the way out: into the packed buffer, then into gRPC).
 * So the encoder packs the small header message with protobuf-c and then appends field 15
 * itself — one tag byte, a varint length — followed by a second slice that points straight
 * at the caller's memory. The decoder does the reverse: it flattens the received slices into
 * a reusable scratch buffer (the one copy we cannot avoid), scans the top-level fields to
 * find field 15, and hands protobuf-c only the bytes in front of it, so the payload is never
 * copied again. Everything read here is untrusted: every length is checked against the bytes
 * that remain, and the error names the offset where parsing stopped.
 */
#include "wire.h"

#include "common/alloc.h"
#include "common/errbuf.h"
#include "engine/op.h"

#include <grpc/byte_buffer_reader.h>
#include <grpc/slice.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define WIRE_PAYLOAD_FIELD 15u
/* Field 15, wire type 2 (length-delimited): (15 << 3) | 2. */
#define WIRE_PAYLOAD_TAG 0x7Au
#define WIRE_VARINT_MAX 10u

static void wire_noop_release(void *arg) { (void)arg; }

static size_t varint_put(uint8_t *p, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        p[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    p[n++] = (uint8_t)v;
    return n;
}

static size_t varint_len(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

td_status td__wire_encode(const ProtobufCMessage *msg, const td__wire_payload *payload,
                          grpc_byte_buffer **out)
{
    size_t body = protobuf_c_message_get_packed_size(msg);
    size_t head = body;
    if (payload != NULL) head += 1 + varint_len(payload->nbytes);

    grpc_slice slices[2];
    size_t nslices = 1;
    slices[0] = grpc_slice_malloc(head);
    uint8_t *p = GRPC_SLICE_START_PTR(slices[0]);
    size_t packed = protobuf_c_message_pack(msg, p);
    if (packed != body) {
        /* protobuf-c disagrees with itself: only possible with a corrupt message struct. */
        grpc_slice_unref(slices[0]);
        if (payload != NULL && payload->release != NULL) payload->release(payload->release_arg);
        return TD_EINTERNAL;
    }
    if (payload != NULL) {
        p += body;
        *p++ = WIRE_PAYLOAD_TAG;
        varint_put(p, payload->nbytes);
        if (payload->nbytes > 0) {
            void (*release)(void *) =
                payload->release != NULL ? payload->release : wire_noop_release;
            /* gRPC never writes through a send slice; the cast only satisfies its API. */
            slices[1] = grpc_slice_new_with_user_data((void *)(uintptr_t)payload->data,
                                                      payload->nbytes, release,
                                                      payload->release_arg);
            nslices = 2;
        } else if (payload->release != NULL) {
            payload->release(payload->release_arg);
        }
    }
    /* The byte buffer takes its own reference on each slice; drop ours. */
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(slices, nslices);
    for (size_t i = 0; i < nslices; i++) grpc_slice_unref(slices[i]);
    *out = bb;
    return TD_OK;
}

void td__wire_scratch_fini(td__wire_scratch *s)
{
    if (s == NULL) return;
    td__free(s->data);
    s->data = NULL;
    s->cap = 0;
}

static td_status scratch_reserve(td__wire_scratch *s, size_t need)
{
    if (need <= s->cap) return TD_OK;
    size_t cap = s->cap > 0 ? s->cap : 4096;
    while (cap < need) {
        if (cap > SIZE_MAX / 2) {
            cap = need;
            break;
        }
        cap *= 2;
    }
    uint8_t *p = td__realloc(s->data, cap);
    if (p == NULL) return TD_ENOMEM;
    s->data = p;
    s->cap = cap;
    return TD_OK;
}

/* Read a varint at *pos; false if it runs past `len` or past 10 bytes. */
static bool varint_get(const uint8_t *p, size_t len, size_t *pos, uint64_t *out)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < WIRE_VARINT_MAX; i++) {
        if (*pos >= len) return false;
        uint8_t b = p[(*pos)++];
        if (i == 9 && b > 1) return false; /* would overflow 64 bits */
        v |= (uint64_t)(b & 0x7F) << (7 * i);
        if ((b & 0x80) == 0) {
            *out = v;
            return true;
        }
    }
    return false;
}

/* Location of the last top-level field 15 (length-delimited) in a message. */
typedef struct wire_payload_loc {
    bool found;
    size_t key_at;  /* offset of the field's tag */
    size_t data_at; /* offset of its first payload byte */
    size_t len;
} wire_payload_loc;

static td_status wire_scan(const uint8_t *p, size_t len, const char *what,
                           wire_payload_loc *loc, char *err, size_t errlen)
{
    size_t pos = 0;
    memset(loc, 0, sizeof *loc);
    while (pos < len) {
        size_t key_at = pos;
        uint64_t key;
        if (!varint_get(p, len, &pos, &key)) {
            td__errf(err, errlen, "%s: truncated or overlong field tag at offset %zu of %zu", what,
                     key_at, len);
            return TD_EPROTO;
        }
        uint64_t field = key >> 3;
        unsigned wt = (unsigned)(key & 7);
        if (field == 0 || field > 0x1FFFFFFFu) {
            td__errf(err, errlen, "%s: invalid field number %llu at offset %zu", what,
                     (unsigned long long)field, key_at);
            return TD_EPROTO;
        }
        switch (wt) {
        case 0: {
            uint64_t v;
            if (!varint_get(p, len, &pos, &v)) {
                td__errf(err, errlen, "%s: truncated or overlong varint (field %llu) at offset %zu",
                         what, (unsigned long long)field, key_at);
                return TD_EPROTO;
            }
            break;
        }
        case 1:
        case 5: {
            size_t w = wt == 1 ? 8 : 4;
            if (len - pos < w) {
                td__errf(err, errlen, "%s: truncated %zu-byte field %llu at offset %zu", what, w,
                         (unsigned long long)field, key_at);
                return TD_EPROTO;
            }
            pos += w;
            break;
        }
        case 2: {
            uint64_t n;
            if (!varint_get(p, len, &pos, &n)) {
                td__errf(err, errlen, "%s: truncated or overlong length (field %llu) at offset %zu",
                         what, (unsigned long long)field, key_at);
                return TD_EPROTO;
            }
            if (n > len - pos) {
                td__errf(err, errlen, "%s: field %llu at offset %zu claims %llu bytes, %zu remain",
                         what, (unsigned long long)field, key_at, (unsigned long long)n, len - pos);
                return TD_EPROTO;
            }
            if (field == WIRE_PAYLOAD_FIELD) {
                loc->found = true;
                loc->key_at = key_at;
                loc->data_at = pos;
                loc->len = (size_t)n;
            }
            pos += (size_t)n;
            break;
        }
        case 3:
        case 4:
            td__errf(err, errlen, "%s: group wire type %u (field %llu) at offset %zu", what, wt,
                     (unsigned long long)field, key_at);
            return TD_EPROTO;
        default:
            td__errf(err, errlen, "%s: invalid wire type %u (field %llu) at offset %zu", what, wt,
                     (unsigned long long)field, key_at);
            return TD_EPROTO;
        }
    }
    return TD_OK;
}

/* Flatten bb into scratch; *len receives its size. */
static td_status wire_flatten(grpc_byte_buffer *bb, td__wire_scratch *scratch, size_t *len,
                              char *err, size_t errlen)
{
    grpc_byte_buffer_reader rd;
    if (!grpc_byte_buffer_reader_init(&rd, bb)) {
        td__errf(err, errlen, "cannot read message (undecodable compression)");
        return TD_EPROTO;
    }
    size_t hint = grpc_byte_buffer_length(bb);
    if (hint > TD_MAX_MESSAGE_BYTES) hint = TD_MAX_MESSAGE_BYTES;
    td_status st = scratch_reserve(scratch, hint);
    size_t n = 0;
    grpc_slice s;
    while (st == TD_OK && grpc_byte_buffer_reader_next(&rd, &s)) {
        size_t sl = GRPC_SLICE_LENGTH(s);
        if (sl > TD_MAX_MESSAGE_BYTES - n) {
            td__errf(err, errlen, "message larger than %u bytes", TD_MAX_MESSAGE_BYTES);
            st = TD_EPROTO;
        } else if ((st = scratch_reserve(scratch, n + sl)) == TD_OK) {
            if (sl > 0) memcpy(scratch->data + n, GRPC_SLICE_START_PTR(s), sl);
            n += sl;
        }
        grpc_slice_unref(s);
    }
    grpc_byte_buffer_reader_destroy(&rd);
    if (st == TD_ENOMEM) td__errf(err, errlen, "out of memory for a %zu-byte message", n);
    if (st == TD_OK) *len = n;
    return st;
}

/* The first string field of desc (or of a message field inside it, up to 8 deep) whose
 * bytes hold a NUL, or NULL. protobuf-c hands strings over NUL-terminated, so one with an
 * embedded NUL would silently mean its prefix ("cpu:2\0x" would open cpu:2). Malformed
 * bytes are left to protobuf_c_message_unpack to refuse. */
static const ProtobufCFieldDescriptor *wire_nul_string(const uint8_t *p, size_t len,
                                                       const ProtobufCMessageDescriptor *desc,
                                                       int depth, size_t *at)
{
    size_t pos = 0;
    while (pos < len) {
        uint64_t key, v;
        if (!varint_get(p, len, &pos, &key)) return NULL;
        switch (key & 7) {
        case 0:
            if (!varint_get(p, len, &pos, &v)) return NULL;
            break;
        case 1:
        case 5: {
            size_t w = (key & 7) == 1 ? 8 : 4;
            if (len - pos < w) return NULL;
            pos += w;
            break;
        }
        case 2: {
            if (!varint_get(p, len, &pos, &v) || v > len - pos) return NULL;
            const ProtobufCFieldDescriptor *f =
                key >> 3 <= 0x1FFFFFFFu
                    ? protobuf_c_message_descriptor_get_field(desc, (unsigned)(key >> 3))
                    : NULL;
            if (f != NULL && f->type == PROTOBUF_C_TYPE_STRING &&
                memchr(p + pos, 0, (size_t)v) != NULL) {
                *at = pos + (size_t)((const uint8_t *)memchr(p + pos, 0, (size_t)v) - (p + pos));
                return f;
            }
            if (f != NULL && f->type == PROTOBUF_C_TYPE_MESSAGE && depth < 8) {
                const ProtobufCFieldDescriptor *in =
                    wire_nul_string(p + pos, (size_t)v, f->descriptor, depth + 1, at);
                if (in != NULL) {
                    *at += pos;
                    return in;
                }
            }
            pos += (size_t)v;
            break;
        }
        default:
            return NULL;
        }
    }
    return NULL;
}

td_status td__wire_check_strings(grpc_byte_buffer *bb, const ProtobufCMessageDescriptor *desc,
                                 td__wire_scratch *scratch, char *err, size_t errlen)
{
    size_t len = 0, at = 0;
    td_status st = wire_flatten(bb, scratch, &len, err, errlen);
    if (st != TD_OK || len == 0) return st;
    const ProtobufCFieldDescriptor *f = wire_nul_string(scratch->data, len, desc, 0, &at);
    if (f == NULL) return TD_OK;
    td__errf(err, errlen, "string field '%s' holds a NUL byte (message offset %zu); strings "
             "must not contain NUL", f->name, at);
    return TD_EPROTO;
}

td_status td__wire_decode(grpc_byte_buffer *bb, const ProtobufCMessageDescriptor *desc,
                          td__wire_scratch *scratch, ProtobufCMessage **out,
                          const uint8_t **payload, size_t *payload_len, char *err,
                          size_t errlen)
{
    static const uint8_t empty[1];
    size_t len = 0;
    td_status st = wire_flatten(bb, scratch, &len, err, errlen);
    if (st != TD_OK) return st;
    const uint8_t *data = len > 0 ? scratch->data : empty;

    wire_payload_loc loc;
    st = wire_scan(data, len, desc->short_name, &loc, err, errlen);
    if (st != TD_OK) return st;

    const ProtobufCFieldDescriptor *pf =
        protobuf_c_message_descriptor_get_field(desc, WIRE_PAYLOAD_FIELD);
    bool has_payload_field = pf != NULL && pf->type == PROTOBUF_C_TYPE_BYTES &&
                             pf->label != PROTOBUF_C_LABEL_REPEATED;
    bool tail = has_payload_field && loc.found && loc.data_at + loc.len == len;

    size_t unpack_len = tail ? loc.key_at : len;
    ProtobufCMessage *m = protobuf_c_message_unpack(desc, NULL, unpack_len, data);
    if (m == NULL) {
        td__errf(err, errlen, "%s: malformed message (%zu bytes)", desc->short_name, len);
        return TD_EPROTO;
    }

    /* The payload is always pointed at in the flattened bytes (scratch), never in the
     * unpacked message: callers free the message and keep the scratch (a write's request
     * does). Where the field is not last, its value is its last occurrence (protobuf's rule
     * for a singular field, which the unpacked message follows too), which is the one
     * wire_scan recorded. Pointing into the message instead let a payload-first write be
     * copied from freed memory (breaker round, 2026-12-06). */
    const uint8_t *pl = NULL;
    size_t pn = 0;
    if (has_payload_field && loc.found) {
        pl = data + loc.data_at;
        pn = loc.len;
    }
    *out = m;
    if (payload != NULL) *payload = pl;
    if (payload_len != NULL) *payload_len = pn;
    return TD_OK;
}

td_status td__wire_op_from(const Tensord__V1__Op *w, struct td__op *op, char *err,
                           size_t errlen)
{
    if (w->n_inputs > TD_OP_MAX_INPUTS) {
        td__errf(err, errlen, "op: %zu inputs, at most %d", w->n_inputs, TD_OP_MAX_INPUTS);
        return TD_EPROTO;
    }
    if (w->n_iattrs > TD_OP_MAX_IATTRS) {
        td__errf(err, errlen, "op: %zu integer attributes, at most %d", w->n_iattrs,
                 TD_OP_MAX_IATTRS);
        return TD_EPROTO;
    }
    if (w->n_fattrs > TD_OP_MAX_FATTRS) {
        td__errf(err, errlen, "op: %zu float attributes, at most %d", w->n_fattrs,
                 TD_OP_MAX_FATTRS);
        return TD_EPROTO;
    }
    memset(op, 0, sizeof *op);
    op->opcode = w->opcode;
    op->dtype = w->dtype;
    op->n_inputs = (uint32_t)w->n_inputs;
    op->n_iattrs = (uint32_t)w->n_iattrs;
    if (w->n_inputs > 0) memcpy(op->inputs, w->inputs, w->n_inputs * sizeof op->inputs[0]);
    op->output = w->output;
    if (w->n_iattrs > 0) memcpy(op->iattrs, w->iattrs, w->n_iattrs * sizeof op->iattrs[0]);
    for (size_t i = 0; i < w->n_fattrs; i++) op->fattrs[i] = w->fattrs[i];
    op->seed = w->seed;
    return TD_OK;
}

/* True for +0.0 exactly (not -0.0, whose sign must survive the trip). */
static bool is_positive_zero(double d)
{
    uint64_t bits;
    memcpy(&bits, &d, sizeof bits);
    return bits == 0;
}

void td__wire_op_to(const struct td__op *op, Tensord__V1__Op *w, uint64_t *inputs_storage)
{
    Tensord__V1__Op init = TENSORD__V1__OP__INIT;
    *w = init;
    size_t ni = op->n_inputs <= TD_OP_MAX_INPUTS ? op->n_inputs : TD_OP_MAX_INPUTS;
    size_t na = op->n_iattrs <= TD_OP_MAX_IATTRS ? op->n_iattrs : TD_OP_MAX_IATTRS;
    w->opcode = op->opcode;
    w->dtype = op->dtype;
    if (ni > 0) memcpy(inputs_storage, op->inputs, ni * sizeof op->inputs[0]);
    w->n_inputs = ni;
    w->inputs = ni > 0 ? inputs_storage : NULL;
    w->output = op->output;
    /* protobuf-c only reads these arrays when packing; the casts drop const for its API. */
    w->n_iattrs = na;
    w->iattrs = na > 0 ? (int64_t *)(uintptr_t)op->iattrs : NULL;
    /* Trailing +0.0 attributes are left off: the decoder zero-fills what is missing. */
    size_t nf = TD_OP_MAX_FATTRS;
    while (nf > 0 && is_positive_zero(op->fattrs[nf - 1])) nf--;
    w->n_fattrs = nf;
    w->fattrs = nf > 0 ? (double *)(uintptr_t)op->fattrs : NULL;
    w->seed = op->seed;
}

/* ---- head-only decoding: the payload stays in gRPC's slices ---- */

/* Bytes flattened to find the header; senders put a few dozen header bytes in front of
 * the payload, so this is generous. */
#define WIRE_HEAD_BYTES 4096u

/* Copy the first `want` bytes of bb into scratch; *got receives how many there were. */
static td_status wire_prefix(grpc_byte_buffer *bb, td__wire_scratch *scratch, size_t want,
                             size_t *got, char *err, size_t errlen)
{
    grpc_byte_buffer_reader rd;
    if (!grpc_byte_buffer_reader_init(&rd, bb)) {
        td__errf(err, errlen, "cannot read message (undecodable compression)");
        return TD_EPROTO;
    }
    td_status st = scratch_reserve(scratch, want > 0 ? want : 1);
    size_t n = 0;
    grpc_slice s;
    while (st == TD_OK && n < want && grpc_byte_buffer_reader_next(&rd, &s)) {
        size_t sl = GRPC_SLICE_LENGTH(s);
        size_t take = sl < want - n ? sl : want - n;
        if (take > 0) memcpy(scratch->data + n, GRPC_SLICE_START_PTR(s), take);
        n += take;
        grpc_slice_unref(s);
    }
    grpc_byte_buffer_reader_destroy(&rd);
    if (st == TD_ENOMEM) td__errf(err, errlen, "out of memory for a message header");
    if (st == TD_OK) *got = n;
    return st;
}

/* Find a field 15 that ends exactly at `total`, parsing only the `len` bytes we hold.
 * False when it is not found within them (the caller then decodes the whole message). */
static bool wire_find_tail(const uint8_t *p, size_t len, size_t total, wire_payload_loc *loc)
{
    size_t pos = 0;
    while (pos < len) {
        size_t key_at = pos;
        uint64_t key, v;
        if (!varint_get(p, len, &pos, &key)) return false;
        uint64_t field = key >> 3;
        switch (key & 7) {
        case 0:
            if (!varint_get(p, len, &pos, &v)) return false;
            break;
        case 1:
        case 5: {
            size_t w = (key & 7) == 1 ? 8 : 4;
            if (len - pos < w) return false;
            pos += w;
            break;
        }
        case 2:
            if (!varint_get(p, len, &pos, &v)) return false;
            if (field == WIRE_PAYLOAD_FIELD && v <= total - pos && pos + v == total) {
                loc->found = true;
                loc->key_at = key_at;
                loc->data_at = pos;
                loc->len = (size_t)v;
                return true;
            }
            if (v > len - pos) return false;
            pos += (size_t)v;
            break;
        default:
            return false;
        }
    }
    return false;
}

td_status td__wire_decode_head(grpc_byte_buffer *bb, const ProtobufCMessageDescriptor *desc,
                               td__wire_scratch *scratch, ProtobufCMessage **out,
                               td__wire_span *span, char *err, size_t errlen)
{
    memset(span, 0, sizeof *span);
    size_t total = grpc_byte_buffer_length(bb);
    const ProtobufCFieldDescriptor *pf =
        protobuf_c_message_descriptor_get_field(desc, WIRE_PAYLOAD_FIELD);
    bool has_payload_field = pf != NULL && pf->type == PROTOBUF_C_TYPE_BYTES &&
                             pf->label != PROTOBUF_C_LABEL_REPEATED;
    if (has_payload_field && total > WIRE_HEAD_BYTES && total <= TD_MAX_MESSAGE_BYTES) {
        size_t got = 0;
        td_status st = wire_prefix(bb, scratch, WIRE_HEAD_BYTES, &got, err, errlen);
        if (st != TD_OK) return st;
        wire_payload_loc loc = {0};
        if (got == WIRE_HEAD_BYTES && wire_find_tail(scratch->data, got, total, &loc)) {
            /* Validate the header bytes as strictly as a full decode would. */
            wire_payload_loc inner;
            st = wire_scan(scratch->data, loc.key_at, desc->short_name, &inner, err, errlen);
            if (st != TD_OK) return st;
            ProtobufCMessage *m = protobuf_c_message_unpack(desc, NULL, loc.key_at,
                                                            scratch->data);
            if (m == NULL) {
                td__errf(err, errlen, "%s: malformed message (%zu bytes)", desc->short_name, total);
                return TD_EPROTO;
            }
            span->present = true;
            span->offset = loc.data_at;
            span->len = loc.len;
            *out = m;
            return TD_OK;
        }
    }
    /* Small message, or an unusual layout: flatten it all. */
    const uint8_t *pl = NULL;
    size_t pn = 0;
    td_status st = td__wire_decode(bb, desc, scratch, out, &pl, &pn, err, errlen);
    if (st != TD_OK) return st;
    if (pl != NULL) {
        span->present = true;
        span->flat = pl;
        span->len = pn;
    }
    return TD_OK;
}

td_status td__wire_span_copy(grpc_byte_buffer *bb, const td__wire_span *span, void *dst)
{
    return td__wire_span_copy_range(bb, span, 0, span->present ? span->len : 0, dst);
}

td_status td__wire_span_copy_range(grpc_byte_buffer *bb, const td__wire_span *span, size_t off,
                                   size_t len, void *dst)
{
    if (len == 0) return TD_OK;
    if (!span->present || off > span->len || len > span->len - off) return TD_ERANGE;
    if (span->flat != NULL) {
        memcpy(dst, span->flat + off, len);
        return TD_OK;
    }
    grpc_byte_buffer_reader rd;
    if (!grpc_byte_buffer_reader_init(&rd, bb)) return TD_EPROTO;
    uint8_t *d = dst;
    size_t skip = span->offset + off, left = len;
    grpc_slice s;
    while (left > 0 && grpc_byte_buffer_reader_next(&rd, &s)) {
        const uint8_t *p = GRPC_SLICE_START_PTR(s);
        size_t sl = GRPC_SLICE_LENGTH(s);
        if (skip >= sl) {
            skip -= sl;
        } else {
            size_t take = sl - skip < left ? sl - skip : left;
            memcpy(d, p + skip, take);
            d += take;
            left -= take;
            skip = 0;
        }
        grpc_slice_unref(s);
    }
    grpc_byte_buffer_reader_destroy(&rd);
    return left == 0 ? TD_OK : TD_EPROTO;
}

/* ---- flat bytes (the request ring, tensord.proto "request ring") ---- */

grpc_byte_buffer *td__wire_bb_over(const uint8_t *data, size_t len)
{
    grpc_slice s = grpc_slice_from_static_buffer(data, len);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    return bb;
}

td_status td__wire_bb_copy_out(grpc_byte_buffer *bb, uint8_t *dst, size_t cap, size_t *len)
{
    size_t total = grpc_byte_buffer_length(bb);
    if (total > cap) return TD_ERANGE;
    grpc_byte_buffer_reader rd;
    if (!grpc_byte_buffer_reader_init(&rd, bb)) return TD_EPROTO;
    size_t n = 0;
    grpc_slice s;
    td_status st = TD_OK;
    while (grpc_byte_buffer_reader_next(&rd, &s)) {
        size_t sl = GRPC_SLICE_LENGTH(s);
        if (sl > cap - n)
            st = TD_ERANGE;
        else if (sl > 0)
            memcpy(dst + n, GRPC_SLICE_START_PTR(s), sl);
        if (st == TD_OK) n += sl;
        grpc_slice_unref(s);
    }
    grpc_byte_buffer_reader_destroy(&rd);
    if (st == TD_OK) *len = n;
    return st;
}

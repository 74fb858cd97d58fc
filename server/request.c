/* request.c — decoding and validation of a Session stream's ClientMessages into plain
 * td__request structs, and encoding of td__reply structs into ServerMessages (request.h).
 *
 * All wire validation of the session protocol is here. Tensor bytes: only a write's header
 * is flattened (td__wire_decode_head); the request keeps the received byte buffer and the
 * worker copies the payload once, from gRPC's slices straight into the tensor's (pooled)
 * buffer (td__request_payload_copy).
 */
#include "server/request.h"

#include "common/alloc.h"
#include "common/errbuf.h"
#include "wire.h"
#include "wire_graph.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Memory a request holds besides its message bytes (job, unpacked message, allocator
 * slack): counted so that a flood of tiny messages is held back too. */
#define REQ_OVERHEAD 512

struct td__req_decoder {
    td__wire_scratch scratch;
};

struct td__req_payload {
    grpc_byte_buffer *bb;     /* the payload stays in gRPC's slices, or */
    td__wire_scratch scratch; /* it was flattened into this scratch (span.flat) */
    td__wire_span span;
};

td__req_decoder *td__req_decoder_create(void) { return td__calloc(1, sizeof(td__req_decoder)); }

void td__req_decoder_destroy(td__req_decoder *d)
{
    if (d == NULL) return;
    td__wire_scratch_fini(&d->scratch);
    td__free(d);
}

static void payload_free(td__req_payload *p)
{
    if (p == NULL) return;
    td__wire_scratch_fini(&p->scratch);
    if (p->bb) grpc_byte_buffer_destroy(p->bb);
    td__free(p);
}

void td__request_fini(td__request *rq)
{
    if (rq->msg) protobuf_c_message_free_unpacked(rq->msg, NULL);
    payload_free(rq->payload);
    if (rq->op_errs) {
        for (size_t i = 0; i < rq->n_ops; i++) td__free(rq->op_errs[i]);
        td__free(rq->op_errs);
    }
    td__free(rq->ops);
    td__free(rq->poison_ids);
    td__free(rq->hashes);
    td__free(rq->text);
    memset(rq, 0, sizeof *rq);
}

static bool request_vfail(td__request *rq, td_status st, const char *fmt, va_list ap)
{
    char msg[512];
    td__verrf(msg, sizeof msg, fmt, ap);
    td__request keep = *rq;
    rq->poison_ids = NULL;
    td__request_fini(rq);
    rq->kind = TD_REQ_BAD;
    rq->decoded = keep.decoded;
    rq->seq = keep.seq;
    rq->cost = keep.cost;
    rq->poison_ids = keep.poison_ids;
    rq->n_poison = keep.n_poison;
    rq->reject_code = keep.reject_code;
    rq->status = st;
    rq->text = td__strdup(msg);
    return rq->text != NULL;
}

bool td__request_fail(td__request *rq, td_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    bool ok = request_vfail(rq, st, fmt, ap);
    va_end(ap);
    return ok;
}

void td__request_printable(const char *in, char *out, size_t cap)
{
    size_t n = 0;
    for (; in != NULL && *in != '\0' && n + 1 < cap; in++)
        out[n++] = (*in >= 0x20 && *in < 0x7f) ? *in : '?';
    out[n] = '\0';
}

static bool reject(td__request *rq, grpc_status_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static bool reject(td__request *rq, grpc_status_code code, const char *fmt, ...)
{
    rq->reject_code = code;
    va_list ap;
    va_start(ap, fmt);
    bool ok = request_vfail(rq, TD_EPROTO, fmt, ap);
    va_end(ap);
    return ok;
}

/* The first message: it must be a valid open. */
static bool decode_open(td__request *rq, td_status dst, const Tensord__V1__ClientMessage *cm,
                        const td__wire_span *span, const char *derr)
{
    if (dst != TD_OK)
        return reject(rq, GRPC_STATUS_INVALID_ARGUMENT,
                      "first message must be open (got an undecodable message: %s)", derr);
    if (cm->body_case != TENSORD__V1__CLIENT_MESSAGE__BODY_OPEN)
        return reject(rq, GRPC_STATUS_INVALID_ARGUMENT, "first message must be open");
    const Tensord__V1__OpenSession *o = cm->open;
    if (span->present)
        return reject(rq, GRPC_STATUS_INVALID_ARGUMENT,
                      "open carries a payload of %zu bytes; only write messages may", span->len);
    if (o->protocol_min > o->protocol_max || o->protocol_max < TD_PROTOCOL_MIN ||
        o->protocol_min > TD_PROTOCOL_MAX)
        return reject(rq, GRPC_STATUS_FAILED_PRECONDITION,
                      "protocol versions %u..%u not supported; this server speaks %u..%u",
                      o->protocol_min, o->protocol_max, (unsigned)TD_PROTOCOL_MIN,
                      (unsigned)TD_PROTOCOL_MAX);
    const char *want = o->device != NULL ? o->device : "";
    td__device *dev = NULL;
    if (td__device_is_placement(want)) {
        bool any = false;
        for (int i = 0; i < td__device_count() && !any; i++)
            any = td__device_place_candidate(td__device_at(i), want);
        if (!any) {
            char list[256] = "";
            size_t len = 0;
            for (int i = 0; i < td__device_count() && len < sizeof list; i++)
                len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", i ? ", " : "",
                                        td__device_at(i)->name);
            return reject(rq, GRPC_STATUS_INVALID_ARGUMENT,
                          "no %s device on this server for '%s'; it has: %s", want, want, list);
        }
    } else if ((dev = td__device_find(want)) == NULL) {
        char name[65], list[256] = "";
        td__request_printable(o->device, name, sizeof name);
        size_t len = 0;
        for (int i = 0; i < td__device_count() && len < sizeof list; i++)
            len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", i ? ", " : "",
                                    td__device_at(i)->name);
        return reject(rq, GRPC_STATUS_INVALID_ARGUMENT,
                      "unknown device '%s'; this server has: %s", name, list);
    }
    if (o->n_devices > 0 && o->protocol_max < TD_PROTOCOL_DEVICES)
        return reject(rq, GRPC_STATUS_INVALID_ARGUMENT,
                      "open names %zu more devices but offers protocols %u..%u; sessions that "
                      "span devices need protocol %d",
                      o->n_devices, o->protocol_min, o->protocol_max, TD_PROTOCOL_DEVICES);
    if (o->n_devices > TD_SESSION_MAX_DEVICES - 1)
        return reject(rq, GRPC_STATUS_INVALID_ARGUMENT,
                      "open names %zu more devices; a session spans at most %d devices",
                      o->n_devices, TD_SESSION_MAX_DEVICES);
    for (size_t i = 0; i < o->n_devices; i++) {
        char name[65];
        td__request_printable(o->devices[i], name, sizeof name);
        const char *e = o->devices[i] != NULL ? o->devices[i] : "";
        td__device *x = td__device_is_placement(e) || e[0] == '\0' ? NULL : td__device_find(e);
        if (x == NULL)
            return reject(rq, GRPC_STATUS_INVALID_ARGUMENT,
                          "open: '%s' is not a device of this server (entry %zu of the "
                          "device list, devices[%zu]; name devices beyond the first exactly, "
                          "e.g. cpu:1 or cuda:0)",
                          name, i + 2, i);
        bool dup = x == dev;
        for (size_t k = 0; k < rq->n_extra; k++) dup = dup || rq->extra[k] == x;
        if (dup)
            return reject(rq, GRPC_STATUS_INVALID_ARGUMENT,
                          "open: device %s is named twice", x->name);
        rq->extra[rq->n_extra++] = x;
    }
    rq->kind = TD_REQ_OPEN;
    rq->dev = dev;
    snprintf(rq->device_req, sizeof rq->device_req, "%s", want);
    rq->protocol = o->protocol_max < TD_PROTOCOL_MAX ? o->protocol_max : TD_PROTOCOL_MAX;
    rq->shm = o->shm && rq->protocol >= TD_PROTOCOL_SHM;
    rq->ring = rq->shm && o->ring && rq->protocol >= TD_PROTOCOL_RING;
    rq->shm_bytes = rq->shm ? o->shm_bytes : 0;
    td__request_printable(o->client_name, rq->client, sizeof rq->client);
    return true;
}

static bool decode_batch(td__request *rq, const Tensord__V1__OpBatch *b)
{
    if (b->n_ops > TD_MAX_BATCH_OPS)
        return td__request_fail(rq, TD_EPROTO, "batch seq %llu has %zu ops; the limit is %d",
                                (unsigned long long)rq->seq, b->n_ops, TD_MAX_BATCH_OPS);
    rq->kind = TD_REQ_BATCH;
    if (b->n_ops == 0) return true;
    rq->ops = td__calloc(b->n_ops, sizeof *rq->ops);
    if (rq->ops == NULL)
        return td__request_fail(rq, TD_ENOMEM, "out of memory for a batch of %zu ops",
                                b->n_ops);
    rq->n_ops = b->n_ops;
    rq->cost += b->n_ops * sizeof *rq->ops;
    for (size_t i = 0; i < b->n_ops; i++) {
        char err[256];
        if (td__wire_op_from(b->ops[i], &rq->ops[i], err, sizeof err) == TD_OK) continue;
        if (rq->op_errs == NULL &&
            (rq->op_errs = td__calloc(b->n_ops, sizeof *rq->op_errs)) == NULL)
            return td__request_fail(rq, TD_ENOMEM, "out of memory for a batch of %zu ops",
                                    b->n_ops);
        const char *why = strncmp(err, "op: ", 4) == 0 ? err + 4 : err;
        char msg[320];
        snprintf(msg, sizeof msg, "op %zu (%s): %s", i, td__op_name(b->ops[i]->opcode), why);
        rq->op_errs[i] = td__strdup(msg);
        memset(&rq->ops[i], 0, sizeof rq->ops[i]);
        rq->ops[i].opcode = TD_REQ_BAD_OPCODE;
        rq->ops[i].output = b->ops[i]->output;
    }
    return true;
}

static bool decode_write(td__request *rq, grpc_byte_buffer **bb, td__req_decoder *d,
                         const Tensord__V1__WriteChunk *w, const td__wire_span *span)
{
    if (!span->present)
        return td__request_fail(rq, TD_EPROTO,
                                "write seq %llu to tensor %llu: the message has no payload",
                                (unsigned long long)rq->seq, (unsigned long long)w->tensor);
    if (span->len > TD_CHUNK_BYTES)
        return td__request_fail(rq, TD_EPROTO,
                                "write seq %llu to tensor %llu: a chunk of %zu bytes; chunks "
                                "carry at most %u (Limits.chunk_bytes)",
                                (unsigned long long)rq->seq, (unsigned long long)w->tensor,
                                span->len, (unsigned)TD_CHUNK_BYTES);
    td__req_payload *p = td__calloc(1, sizeof *p);
    if (p == NULL) return td__request_fail(rq, TD_ENOMEM, "out of memory for a write");
    p->span = *span;
    if (span->flat != NULL) {
        /* The payload points into the scratch: the request keeps it. */
        p->scratch = d->scratch;
        memset(&d->scratch, 0, sizeof d->scratch);
        rq->cost += p->scratch.cap;
    } else {
        /* The payload stays in gRPC's slices (counted in cost already). */
        p->bb = *bb;
        *bb = NULL;
    }
    rq->kind = TD_REQ_WRITE;
    rq->payload = p;
    rq->tensor = w->tensor;
    rq->offset = w->offset;
    rq->nbytes = span->len;
    return true;
}

static bool hash_ok(const ProtobufCBinaryData *h) { return h->len == TD_SHA256_BYTES; }

static bool decode_has_blobs(td__request *rq, const Tensord__V1__HasBlobs *h)
{
    if (h->n_sha256 > TD_MAX_HAS_BLOBS || h->n_fingerprint > TD_MAX_HAS_BLOBS - h->n_sha256)
        return td__request_fail(rq, TD_EPROTO,
                                "has-blobs seq %llu offers %zu hashes and %zu fingerprints; the "
                                "limit is %d in all",
                                (unsigned long long)rq->seq, h->n_sha256, h->n_fingerprint,
                                TD_MAX_HAS_BLOBS);
    for (size_t i = 0; i < h->n_sha256; i++)
        if (!hash_ok(&h->sha256[i]))
            return td__request_fail(rq, TD_EPROTO,
                                    "has-blobs seq %llu: hash %zu has %zu bytes, SHA-256 has %d",
                                    (unsigned long long)rq->seq, i, h->sha256[i].len,
                                    TD_SHA256_BYTES);
    for (size_t i = 0; i < h->n_fingerprint; i++)
        if (h->fingerprint[i].len != TD_FINGERPRINT_BYTES)
            return td__request_fail(rq, TD_EPROTO,
                                    "has-blobs seq %llu: fingerprint %zu has %zu bytes, a "
                                    "fingerprint has %d",
                                    (unsigned long long)rq->seq, i, h->fingerprint[i].len,
                                    TD_FINGERPRINT_BYTES);
    size_t n = h->n_sha256 + h->n_fingerprint;
    rq->hashes = td__calloc(n > 0 ? n : 1, sizeof *rq->hashes);
    if (rq->hashes == NULL)
        return td__request_fail(rq, TD_ENOMEM, "out of memory answering has-blobs");
    for (size_t i = 0; i < h->n_sha256; i++) rq->hashes[i] = h->sha256[i].data;
    for (size_t i = 0; i < h->n_fingerprint; i++)
        rq->hashes[h->n_sha256 + i] = h->fingerprint[i].data;
    rq->n_hashes = h->n_sha256;
    rq->fps = rq->hashes + h->n_sha256;
    rq->n_fps = h->n_fingerprint;
    rq->cost += n * sizeof *rq->hashes;
    rq->kind = TD_REQ_HAS_BLOBS;
    return true;
}

static bool decode_graph(td__request *rq, const Tensord__V1__ClientMessage *cm)
{
    bool def = cm->body_case == TENSORD__V1__CLIENT_MESSAGE__BODY_GRAPH_DEFINE;
    bool rel = cm->body_case == TENSORD__V1__CLIENT_MESSAGE__BODY_GRAPH_RELEASE;
    const ProtobufCBinaryData *gid = def   ? &cm->graph_define->graph_id
                                     : rel ? &cm->graph_release->graph_id
                                           : &cm->graph_run->graph_id;
    if (gid->len != TD_GRAPH_HASH_BYTES)
        return td__request_fail(rq, TD_EPROTO,
                                "graph message seq %llu: graph id has %zu bytes, a SHA-256 "
                                "has %d",
                                (unsigned long long)rq->seq, gid->len, TD_GRAPH_HASH_BYTES);
    rq->hash = gid->data;
    if (rel) {
        rq->kind = TD_REQ_GRAPH_RELEASE;
        return true;
    }
    if (def) {
        rq->kind = TD_REQ_GRAPH_DEFINE;
        rq->has_definition = cm->graph_define->graph != NULL;
        return true;
    }
    const Tensord__V1__GraphRun *gr = cm->graph_run;
    if (gr->n_inputs > TD_GRAPH_MAX_INPUTS || gr->n_outputs > TD_GRAPH_MAX_INPUTS)
        return td__request_fail(rq, TD_EPROTO,
                                "graph run seq %llu binds %zu inputs and %zu outputs; at most "
                                "%d each",
                                (unsigned long long)rq->seq, gr->n_inputs, gr->n_outputs,
                                TD_GRAPH_MAX_INPUTS);
    rq->kind = TD_REQ_GRAPH_RUN;
    rq->inputs = gr->inputs;
    rq->n_inputs = gr->n_inputs;
    rq->outputs = gr->outputs;
    rq->n_outputs = gr->n_outputs;
    return true;
}

/* One message after open: the checks of handle_message, in the same order. */
static bool decode_body(td__request *rq, grpc_byte_buffer **bb, td__req_decoder *d,
                        const Tensord__V1__ClientMessage *cm, const td__wire_span *span)
{
    if (span->present && cm->body_case != TENSORD__V1__CLIENT_MESSAGE__BODY_WRITE)
        return td__request_fail(rq, TD_EPROTO,
                                "message seq %llu (body field %d) carries a payload of %zu "
                                "bytes; only write messages may",
                                (unsigned long long)cm->seq, (int)cm->body_case, span->len);
    switch (cm->body_case) {
    case TENSORD__V1__CLIENT_MESSAGE__BODY_OPEN:
        return td__request_fail(rq, TD_EPROTO, "seq %llu: the session is already open",
                                (unsigned long long)cm->seq);
    case TENSORD__V1__CLIENT_MESSAGE__BODY_BATCH:
        return decode_batch(rq, cm->batch);
    case TENSORD__V1__CLIENT_MESSAGE__BODY_WRITE:
        return decode_write(rq, bb, d, cm->write, span);
    case TENSORD__V1__CLIENT_MESSAGE__BODY_HAS_BLOBS:
        return decode_has_blobs(rq, cm->has_blobs);
    case TENSORD__V1__CLIENT_MESSAGE__BODY_WRITE_FROM_BLOB:
    case TENSORD__V1__CLIENT_MESSAGE__BODY_STORE_BLOB: {
        bool from = cm->body_case == TENSORD__V1__CLIENT_MESSAGE__BODY_WRITE_FROM_BLOB;
        const ProtobufCBinaryData *h = from ? &cm->write_from_blob->sha256
                                            : &cm->store_blob->sha256;
        if (!from && cm->store_blob->fingerprint.len > 0) {
            const ProtobufCBinaryData *f = &cm->store_blob->fingerprint;
            if (f->len != TD_FINGERPRINT_BYTES || h->len != 0)
                return td__request_fail(rq, TD_EPROTO,
                                        "store-blob seq %llu: fingerprint has %zu bytes and hash "
                                        "%zu; a fingerprint has %d and comes without a hash",
                                        (unsigned long long)cm->seq, f->len, h->len,
                                        TD_FINGERPRINT_BYTES);
            rq->kind = TD_REQ_STORE_BLOB;
            rq->tensor = cm->store_blob->tensor;
            rq->fp = f->data;
            return true;
        }
        if (!hash_ok(h))
            return td__request_fail(rq, TD_EPROTO,
                                    "%s seq %llu: hash has %zu bytes, SHA-256 has %d",
                                    from ? "write-from-blob" : "store-blob",
                                    (unsigned long long)cm->seq, h->len, TD_SHA256_BYTES);
        rq->kind = from ? TD_REQ_WRITE_FROM_BLOB : TD_REQ_STORE_BLOB;
        rq->tensor = from ? cm->write_from_blob->tensor : cm->store_blob->tensor;
        rq->hash = h->data;
        return true;
    }
    case TENSORD__V1__CLIENT_MESSAGE__BODY_READ:
        rq->kind = TD_REQ_READ;
        rq->tensor = cm->read->tensor;
        rq->offset = cm->read->offset;
        rq->nbytes = cm->read->nbytes;
        return true;
    case TENSORD__V1__CLIENT_MESSAGE__BODY_SHM_WRITE:
        rq->kind = TD_REQ_SHM_WRITE;
        rq->tensor = cm->shm_write->tensor;
        rq->offset = cm->shm_write->offset;
        rq->nbytes = cm->shm_write->nbytes;
        rq->region_offset = cm->shm_write->region_offset;
        return true;
    case TENSORD__V1__CLIENT_MESSAGE__BODY_SHM_READ:
        rq->kind = TD_REQ_SHM_READ;
        rq->tensor = cm->shm_read->tensor;
        rq->offset = cm->shm_read->offset;
        rq->nbytes = cm->shm_read->nbytes;
        rq->region_offset = cm->shm_read->region_offset;
        return true;
    case TENSORD__V1__CLIENT_MESSAGE__BODY_RELEASE:
        rq->kind = TD_REQ_RELEASE;
        rq->ids = cm->release->tensors;
        rq->n_ids = cm->release->n_tensors;
        rq->cost += cm->release->n_tensors * sizeof *cm->release->tensors;
        return true;
    case TENSORD__V1__CLIENT_MESSAGE__BODY_FENCE:
        rq->kind = TD_REQ_FENCE;
        return true;
    case TENSORD__V1__CLIENT_MESSAGE__BODY_TO_DEVICE: {
        const Tensord__V1__ToDevice *td = cm->to_device;
        if (td->device >= TD_SESSION_MAX_DEVICES || td->tensor == 0 ||
            td->tensor > TD_SESSION_ID_MAX || td->output == 0 || td->output > TD_SESSION_ID_MAX) {
            rq->poison_ids = td->output != 0 && td->output <= TD_SESSION_ID_MAX
                                 ? td__malloc(sizeof *rq->poison_ids)
                                 : NULL;
            if (rq->poison_ids != NULL) {
                rq->poison_ids[0] = td->output;
                rq->n_poison = 1;
            }
            return td__request_fail(rq, TD_EPROTO,
                                    "to-device seq %llu: tensor %llu, output %llu, device %u; "
                                    "want tensor and output in 1..%llu and device below %d",
                                    (unsigned long long)cm->seq,
                                    (unsigned long long)td->tensor,
                                    (unsigned long long)td->output, td->device,
                                    (unsigned long long)TD_SESSION_ID_MAX,
                                    TD_SESSION_MAX_DEVICES);
        }
        rq->kind = TD_REQ_TO_DEVICE;
        rq->tensor = td->tensor;
        rq->output = td->output;
        rq->device = td->device;
        return true;
    }
    case TENSORD__V1__CLIENT_MESSAGE__BODY_GRAPH_DEFINE:
    case TENSORD__V1__CLIENT_MESSAGE__BODY_GRAPH_RUN:
    case TENSORD__V1__CLIENT_MESSAGE__BODY_GRAPH_RELEASE:
        return decode_graph(rq, cm);
    default:
        break;
    }
    if (cm->base.n_unknown_fields > 0)
        return td__request_fail(rq, TD_EPROTO,
                                "message seq %llu: unknown body (field %u); this server speaks "
                                "protocol %u",
                                (unsigned long long)cm->seq, cm->base.unknown_fields[0].tag,
                                (unsigned)TD_PROTOCOL_MAX);
    return td__request_fail(rq, TD_EPROTO, "message seq %llu has no body",
                            (unsigned long long)cm->seq);
}

void td__request_decode(td__req_decoder *d, grpc_byte_buffer *bb, bool first,
                        td__request *rq)
{
    memset(rq, 0, sizeof *rq);
    rq->cost = grpc_byte_buffer_length(bb) + REQ_OVERHEAD;
    ProtobufCMessage *m = NULL;
    char err[256] = "";
    td__wire_span span;
    td_status st = td__wire_decode_head(bb, &tensord__v1__client_message__descriptor,
                                        &d->scratch, &m, &span, err, sizeof err);
    const Tensord__V1__ClientMessage *cm = (const Tensord__V1__ClientMessage *)m;
    if (first) {
        if (st == TD_OK && td__wire_check_strings(bb, &tensord__v1__client_message__descriptor,
                                                  &d->scratch, err, sizeof err) != TD_OK)
            reject(rq, GRPC_STATUS_INVALID_ARGUMENT, "open: %s", err);
        else
            decode_open(rq, st, cm, &span, err);
        if (st == TD_OK) {
            rq->decoded = true;
            rq->seq = cm->seq;
        }
        if (m) protobuf_c_message_free_unpacked(m, NULL);
    } else if (st != TD_OK) {
        td__request_fail(rq, st, "undecodable message: %s", err);
    } else {
        rq->decoded = true;
        rq->seq = cm->seq;
        rq->msg = m;
        decode_body(rq, &bb, d, cm, &span);
        /* A batch keeps its converted ops, a write its payload: the message can go. */
        if (rq->msg != NULL &&
            (rq->kind == TD_REQ_BATCH || rq->kind == TD_REQ_WRITE || rq->kind == TD_REQ_BAD)) {
            protobuf_c_message_free_unpacked(rq->msg, NULL);
            rq->msg = NULL;
        }
    }
    if (bb != NULL) grpc_byte_buffer_destroy(bb);
}

void td__request_decode_flat(td__req_decoder *d, const uint8_t *data, size_t len,
                             td__request *rq)
{
    grpc_byte_buffer *bb = td__wire_bb_over(data, len);
    if (bb == NULL) {
        memset(rq, 0, sizeof *rq);
        td__request_fail(rq, TD_ENOMEM, "out of memory for a ring message");
        return;
    }
    td__request_decode(d, bb, false, rq);
}

td_status td__request_payload_copy(const td__request *rq, void *dst)
{
    return td__wire_span_copy(rq->payload->bb, &rq->payload->span, dst);
}

td_status td__request_payload_copy_range(const td__request *rq, size_t off, size_t len,
                                         void *dst)
{
    return td__wire_span_copy_range(rq->payload->bb, &rq->payload->span, off, len, dst);
}

const void *td__request_payload_flat(const td__request *rq)
{
    return rq->payload->span.flat;
}

td_status td__request_graph(const td__request *rq, td__graph **out, char *err, size_t errlen)
{
    const Tensord__V1__ClientMessage *cm = rq->msg;
    return td__wire_graph_from(cm->graph_define->graph, out, err, errlen);
}

/* ---- replies ---- */

td_status td__reply_encode(const td__reply *r, grpc_byte_buffer **out)
{
    Tensord__V1__ServerMessage m = TENSORD__V1__SERVER_MESSAGE__INIT;
    Tensord__V1__SessionOpened o = TENSORD__V1__SESSION_OPENED__INIT;
    Tensord__V1__Limits lim = TENSORD__V1__LIMITS__INIT;
    Tensord__V1__Failure f = TENSORD__V1__FAILURE__INIT;
    Tensord__V1__ReadChunk rc = TENSORD__V1__READ_CHUNK__INIT;
    Tensord__V1__FenceDone fd = TENSORD__V1__FENCE_DONE__INIT;
    Tensord__V1__BlobStatus bst = TENSORD__V1__BLOB_STATUS__INIT;
    Tensord__V1__GraphReady gr = TENSORD__V1__GRAPH_READY__INIT;
    Tensord__V1__ShmOffer so = TENSORD__V1__SHM_OFFER__INIT;
    Tensord__V1__ShmDone sd = TENSORD__V1__SHM_DONE__INIT;
    protobuf_c_boolean *present = NULL;
    td__wire_payload pl = {0};
    m.seq = r->seq;
    switch (r->kind) {
    case TD_REPLY_OPENED:
        lim.max_message_bytes = TD_MAX_MESSAGE_BYTES;
        lim.chunk_bytes = TD_CHUNK_BYTES;
        lim.max_tensor_bytes = TD_MAX_TENSOR_BYTES;
        lim.max_rank = TD_MAX_RANK;
        lim.max_batch_ops = TD_MAX_BATCH_OPS;
        o.protocol = r->protocol;
        o.device = (char *)(uintptr_t)r->device; /* only read while packing */
        o.session_id = r->session_id;
        o.limits = &lim;
        o.n_devices = r->n_devices;
        o.devices = (char **)(uintptr_t)r->devices; /* only read while packing */
        if (r->shm_path != NULL) {
            so.socket_path = (char *)(uintptr_t)r->shm_path;
            so.secret.len = TD_SHM_SECRET_BYTES;
            so.secret.data = (uint8_t *)(uintptr_t)r->shm_secret;
            so.region_bytes = r->shm_bytes;
            so.ring_offset = r->ring_offset;
            so.ring_bytes = r->ring_bytes;
            o.shm = &so;
        }
        if (r->shm_refused != NULL) o.shm_refused = (char *)(uintptr_t)r->shm_refused;
        m.body_case = TENSORD__V1__SERVER_MESSAGE__BODY_OPENED;
        m.opened = &o;
        break;
    case TD_REPLY_FAILURE:
        f.op_index = r->op_index;
        f.status = (uint32_t)r->status;
        f.message = (char *)(uintptr_t)r->message;
        m.body_case = TENSORD__V1__SERVER_MESSAGE__BODY_FAILURE;
        m.failure = &f;
        break;
    case TD_REPLY_READ:
        rc.tensor = r->tensor;
        rc.offset = r->offset;
        rc.last = r->last;
        m.body_case = TENSORD__V1__SERVER_MESSAGE__BODY_READ;
        m.read = &rc;
        pl = (td__wire_payload){.data = r->data, .nbytes = r->nbytes, .release = r->release,
                                .release_arg = r->release_arg};
        break;
    case TD_REPLY_FENCE:
        m.body_case = TENSORD__V1__SERVER_MESSAGE__BODY_FENCE;
        fd.stream_msgs = r->stream_msgs;
        m.fence = &fd;
        break;
    case TD_REPLY_BLOB_STATUS:
        present = td__calloc(r->n_present > 0 ? r->n_present : 1, sizeof *present);
        if (present == NULL) return TD_ENOMEM;
        for (size_t i = 0; i < r->n_present; i++) present[i] = r->present[i];
        bst.n_present = r->n_present;
        bst.present = present;
        m.body_case = TENSORD__V1__SERVER_MESSAGE__BODY_BLOB_STATUS;
        m.blob_status = &bst;
        break;
    case TD_REPLY_GRAPH_READY:
        gr.graph_id.len = TD_GRAPH_HASH_BYTES;
        gr.graph_id.data = (uint8_t *)(uintptr_t)r->graph_id;
        gr.known = r->known;
        m.body_case = TENSORD__V1__SERVER_MESSAGE__BODY_GRAPH_READY;
        m.graph_ready = &gr;
        break;
    case TD_REPLY_SHM_DONE:
        m.body_case = TENSORD__V1__SERVER_MESSAGE__BODY_SHM_DONE;
        m.shm_done = &sd;
        break;
    }
    td_status st = td__wire_encode(&m.base, r->kind == TD_REPLY_READ && r->nbytes > 0 ? &pl : NULL,
                                   out);
    td__free(present);
    return st;
}

td_status td__reply_encode_flat(const td__reply *r, uint8_t *dst, size_t cap, size_t *len)
{
    grpc_byte_buffer *bb;
    td_status st = td__reply_encode(r, &bb);
    if (st != TD_OK) return st;
    st = td__wire_bb_copy_out(bb, dst, cap, len);
    grpc_byte_buffer_destroy(bb); /* lets go of a read's payload reference */
    return st;
}

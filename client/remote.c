/* remote.c — the remote transport: a context's ops travel over one gRPC Session stream.
 *
 * The gRPC call itself (channel, completion queue, pump, one send and one receive at a time)
 * is client/call.c's; this file gives the messages their meaning. Each transport owns a
 * completion queue that only its own thread polls, so the whole session is single-threaded:
 * every wait (for a send to be taken, a read's chunks, a fence) pumps the queue and
 * dispatches whatever arrives. One RECV_MESSAGE is kept armed from the moment the call
 * starts, so Failure
 * messages for earlier batches are taken in whenever we wait and recorded as deferred;
 * RECV_STATUS_ON_CLIENT is armed at the start too, so a server that ends the call (unknown
 * device, shutdown, crash) is noticed with its status details.
 *
 * Ops are fire-and-forget: submit hands the message to the call, or queues it behind the
 * messages still waiting for the call's one SEND_MESSAGE, and returns; pump() starts the
 * next queued message whenever a send completes. Only a driven transport (base.driven:
 * the flusher thread pumps) queues; otherwise a send waits for the previous one.
 *
 * Background sends: a write of at most async_write_max bytes (REMOTE_ASYNC_WRITE_MAX on a
 * host of at least REMOTE_ASYNC_MIN_CPUS CPUs, else 0; env TENSORD_WRITE_COPY_MAX) is
 * copied into buffers of this transport (TD_CHUNK_BYTES each, reused, at most
 * REMOTE_POOL_BUFS) and queued, and write returns at once: the caller's
 * next batch can be prepared while this one crosses the wire. Someone must pump for gRPC
 * to go on sending (its I/O runs in the threads that poll the completion queue), so the
 * context's flusher thread calls vt->drive (remote_drive) while the queue is not empty;
 * every function of the table takes the transport lock `mu`, and drive gives it up as soon
 * as the user thread asks for it (`want`). Without a flusher (batch_flush_us < 0) writes
 * stay synchronous. Larger writes are zero-copy: each chunk's payload is a slice over the
 * caller's memory, so write does not return until gRPC has dropped every such slice. Both
 * kinds of slices are counted by their release callback, which may run on a gRPC thread,
 * hence the atomics; the two kinds apart (a zero-copy write waits for its own slices only)
 * and a copy's buffer goes back to the pool there, under pool_mu. A session's end drops
 * what is still queued (outq_drop), releasing its slices at once.
 * Why: P5 on an H100 over loopback TCP (BENCHMARKS.md, 2026-12-06 21:00) spent 2.8 ms of
 * a 6.7 ms step with the client waiting for its own 12.8 MB batch to be sent.
 *
 * Any transport-level failure (stream ended, send failed, no reply within call_timeout_ms,
 * a server that breaks the protocol) finishes the call and leaves the transport closed:
 * every later call returns TD_ECLOSED.
 *
 * Blob-store uploads: when to offer a hash is client/offer.c's policy, above the
 * transport; this file only carries HasBlobs, WriteFromBlob and StoreBlob.
 *
 * Reads that do not wait (td_read_start): the ReadRequest goes out with its own seq and
 * read_start returns; the read stays in `areads` until read_finish, and its ReadChunk
 * replies (or its Failure) are dispatched there by seq by whatever wait pumps meanwhile,
 * so they may be in flight around synchronous reads, fences and round trips. The server
 * answers a session's requests in order, so the chunks of one read never interleave with
 * another's. On sessions with shared memory a read of at least shm_min_bytes is
 * synchronous (read_start declines: it goes through the region's slots); a smaller one
 * goes on the stream as above, its chunks taken in around the request ring's replies
 * (ring_keep_waiting pumps the stream) like any other stream reply.
 */
#include "client/call.h"
#include "client/ring.h"
#include "client/security.h"
#include "client/host_heap.h"
#include "client/shm.h"
#include "client/transport.h"
#include "common/alloc.h"
#include "common/log.h"
#include "common/sha256.h"
#include "proto/wire.h"
#include "proto/wire_graph.h"

#include <errno.h>
#include <grpc/slice.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define REMOTE_CONNECT_TIMEOUT_MS 5000
#define REMOTE_CALL_TIMEOUT_MS 60000
/* How long close waits for the server to end the call after our half-close. */
#define REMOTE_CLOSE_TIMEOUT_MS 10000
/* Split op batches so one message stays well under TD_MAX_MESSAGE_BYTES. */
#define REMOTE_BATCH_BYTES (4u << 20)
#define REMOTE_RELEASE_IDS 65536
/* The shared-memory region is cut into this many slots (fewer when slots would be smaller
 * than REMOTE_SHM_SLOT_MIN): with n slots in flight a transfer costs about (n + 1) / n
 * copies' time on two cores instead of two copies one after the other, while each slot
 * stays large enough that a message per slot costs little next to its copy. */
#define REMOTE_SHM_SLOTS 8
#define REMOTE_SHM_SLOT_MIN ((size_t)1 << 20)
/* The slots take at most this much of the region; the rest (before the request ring) holds
 * host buffers (td_host_alloc), whose transfers skip the slots and the client's copy. */
#define REMOTE_SHM_SLOT_AREA ((uint64_t)16 << 20)
/* A host-buffer transfer goes to the server in pieces of this size (each one job there,
 * so a 1 GiB upload does not hold the device worker in one go), up to REMOTE_SHM_SLOTS
 * pieces in flight. */
#define REMOTE_SHM_DIRECT_PIECE ((size_t)16 << 20)
/* Background sends (see the top of the file): writes up to this size are copied and queued
 * (a Fashion-MNIST batch of 4096 images is 12.8 MB); the copies use at most
 * REMOTE_POOL_BUFS chunk buffers (32 MiB) at a time, and the queue holds at most
 * REMOTE_OUTQ_BYTES before a send waits for room. */
#define REMOTE_ASYNC_WRITE_MAX ((size_t)16 << 20)
/* ...by default only when the process may run on at least this many CPUs (its affinity:
 * a container's or taskset's limit counts). */
#define REMOTE_ASYNC_MIN_CPUS 4
#define REMOTE_POOL_BUFS 32
#define REMOTE_OUTQ_BYTES ((size_t)64 << 20)
/* How long one drive call pumps, and one pump inside it waits (microseconds). */
#define REMOTE_DRIVE_US 2000
#define REMOTE_DRIVE_PUMP_US 250

/* A message waiting for the call's SEND_MESSAGE (already numbered and encoded). */
typedef struct outq_msg {
    struct outq_msg *next;
    grpc_byte_buffer *bb;
    uint32_t flags;
    size_t bytes;
} outq_msg;

/* A chunk buffer of the copy pool: the owner and the bytes. */
typedef struct pool_buf {
    struct remote *owner;
    struct pool_buf *next_free;
    _Alignas(64) uint8_t data[];
} pool_buf;

enum remote_req { REQ_NONE = 0, REQ_OPEN, REQ_READ, REQ_FENCE, REQ_GRAPH, REQ_BLOBS };

/* Where a read's chunks go: the synchronous read (r->req.read, on the caller's stack) or
 * one of r->areads (td_read_start, from the heap). */
typedef struct read_into {
    struct read_into *next; /* r->areads */
    uint64_t seq;
    uint64_t tensor;
    uint64_t offset;
    uint8_t *dst;
    size_t nbytes;
    size_t got;
    bool done;
    bool forgotten; /* the transport is closing: take the chunks, copy nothing */
    td_status st;
    char *err; /* an asynchronous read's Failure message (heap); NULL while none */
} read_into;

typedef struct remote {
    td__transport base; /* first: the context sees only this */
    /* The transport lock (every table function and drive) and how many threads wait for
     * it besides the one holding it; drive yields when want > 0. */
    pthread_mutex_t mu;
    atomic_int want;
    bool blob_min_default; /* td_options.blob_min_bytes was 0: the offer's default applies */
    char target[512];
    td__client_sec sec; /* TLS and bearer token */
    int call_timeout_ms;
    td__cli_call c; /* the Session call (client/call.h) */
    uint64_t next_seq;
    bool ending; /* tearing down: do not re-arm the receive */

    /* The one request being waited for (open, read or fence). */
    struct {
        enum remote_req kind;
        uint64_t seq;
        bool done;
        td_status st;
        read_into *read; /* REQ_READ: where its chunks go */
    } req;
    read_into *areads;  /* reads in flight that nobody waits for yet (td_read_start) */
    uint64_t wait_read; /* the seq wait_until(aread_done) waits for */
    bool graph_known; /* answer of the last GraphDefine (REQ_GRAPH) */
    bool blob_present; /* answer of the last HasBlobs (REQ_BLOBS) */
    grpc_byte_buffer *rx_bb; /* the message being dispatched (payload still in slices) */
    td__wire_span rx_span;
    char opened_device[sizeof(((td__transport *)0)->device)];
    uint32_t opened_protocol;
    char opened_devices[TD_TRANSPORT_MAX_DEVICES][32]; /* SessionOpened.devices */
    uint32_t n_opened_devices;
    uint64_t opened_session_id;

    /* Shared memory (tensord.proto "shared memory"): the offer SessionOpened made, then
     * the mapped region, used as a ring of shm_nslots slots so that the client fills (or
     * empties) one while the server drains (or fills) the others. A slot is busy from the
     * ShmWrite or ShmRead that names it until its ShmDone or Failure arrives. */
    struct {
        bool offered;
        char path[108];
        uint8_t secret[TD_SHM_SECRET_BYTES];
        uint64_t bytes;
        uint64_t ring_offset, ring_bytes;
        char refused[256]; /* SessionOpened.shm_refused: why none was given */
    } shm_offer;
    /* The request ring (tensord.proto "request ring"), when the region has one: a read
     * or fence goes there together with the batch and releases flushed just before it
     * (held here, already numbered, while base.sync_next says a read or fence follows).
     * Anything sent on the stream sends the held messages first, in order. */
    td__ring_cli ring;
    uint8_t *ring_held; /* TD_RING_REQ_BYTES of frames */
    size_t ring_held_len;
    int ring_held_n;
    uint8_t *ring_rep; /* the reply, copied out of the region (TD_RING_REP_BYTES) */
    gpr_timespec ring_deadline;
    td__shm_map shm;
    size_t shm_min_bytes;
    size_t shm_slot_bytes;
    int shm_nslots;
    struct {
        bool busy;
        bool read;
        uint64_t seq;
        td_status st; /* a read's failure */
    } slot[REMOTE_SHM_SLOTS];
    int next_slot;
    int wait_slot; /* the slot wait_until(slot_free) waits for */
    /* Messages received on the stream so far, and the count the last FenceDone said the
     * server had queued before it (remote_fence waits until they match). */
    uint64_t stream_msgs, fence_stream_msgs;
    char shm_err[1024]; /* a failed ShmRead's message */
    /* Host buffers (td_host_alloc): region offsets [shm_slot_area, heap end), page-aligned
     * blocks; empty when the region has no room past the slots. */
    td__host_heap heap;

    td_status violation; /* the server broke the protocol (found while dispatching) */
    char violation_msg[512];
    bool opening;
    bool device_denied; /* the open was refused with PERMISSION_DENIED: the tenant's devices */
    bool broken;

    td__wire_scratch scratch;
    bool send_buffered; /* the next send may wait in gRPC's write buffer (a non-final chunk) */
    atomic_size_t slices_released; /* zero-copy slices over the caller's memory */
    size_t slices_given;

    /* Background sends (top of the file). */
    outq_msg *outq_head, *outq_tail;
    size_t outq_bytes;
    size_t async_write_max; /* 0: every write waits until it is sent */
    pthread_mutex_t pool_mu; /* the free list: release callbacks run on gRPC threads */
    pool_buf *pool_free;
    int pool_total; /* buffers allocated (free or lent to gRPC) */
    /* Copies lent to gRPC and given back, counted apart from slices_given: a zero-copy
     * write waits for its own slices only, not for copies gRPC holds (a dead peer's
     * transport keeps its write buffer until the channel goes). */
    atomic_size_t pool_returned;
    size_t pool_lent;
} remote;

static void remote_errf(remote *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void remote_errf(remote *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->base.err, sizeof r->base.err, fmt, ap);
    va_end(ap);
}

static const char *grpc_code_name(grpc_status_code c)
{
    static const char *const names[] = {
        "OK",          "CANCELLED",         "UNKNOWN",          "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED", "NOT_FOUND",   "ALREADY_EXISTS",   "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
        "UNIMPLEMENTED", "INTERNAL",        "UNAVAILABLE",      "DATA_LOSS",
        "UNAUTHENTICATED",
    };
    if ((unsigned)c < sizeof names / sizeof names[0]) return names[c];
    return "UNKNOWN";
}

/* A server's Failure status as a td_status; values this client does not know (a newer
 * server) or TD_OK in a failure become TD_EINTERNAL. */
static td_status status_from_wire(uint32_t v)
{
    if (v == TD_OK || strcmp(td_status_name((td_status)v), "unknown status") == 0)
        return TD_EINTERNAL;
    return (td_status)v;
}

/* ---- the completion queue pump ---- */

static void on_slice_released(void *arg)
{
    remote *r = arg;
    atomic_fetch_add_explicit(&r->slices_released, 1, memory_order_release);
}

/* A copy's buffer came back from gRPC (any thread): onto the free list. The count goes
 * last: once teardown sees every copy returned, no callback touches r any more. */
static void on_pool_buf_released(void *arg)
{
    pool_buf *b = arg;
    remote *r = b->owner;
    pthread_mutex_lock(&r->pool_mu);
    b->next_free = r->pool_free;
    r->pool_free = b;
    pthread_mutex_unlock(&r->pool_mu);
    atomic_fetch_add_explicit(&r->pool_returned, 1, memory_order_release);
}

/* A free chunk buffer, a new one while fewer than REMOTE_POOL_BUFS exist, else NULL
 * (*nomem says whether allocation failed). */
static pool_buf *pool_take(remote *r, bool *nomem)
{
    *nomem = false;
    pthread_mutex_lock(&r->pool_mu);
    pool_buf *b = r->pool_free;
    if (b != NULL) {
        r->pool_free = b->next_free;
    } else if (r->pool_total < REMOTE_POOL_BUFS) {
        r->pool_total++;
        pthread_mutex_unlock(&r->pool_mu);
        b = td__malloc(sizeof *b + TD_CHUNK_BYTES);
        if (b != NULL) {
            b->owner = r;
            return b;
        }
        *nomem = true;
        pthread_mutex_lock(&r->pool_mu);
        r->pool_total--;
    }
    pthread_mutex_unlock(&r->pool_mu);
    return b;
}

static bool pool_has_free(const remote *r)
{
    remote *m = (remote *)(uintptr_t)r; /* the lock only */
    pthread_mutex_lock(&m->pool_mu);
    bool yes = m->pool_free != NULL || m->pool_total < REMOTE_POOL_BUFS;
    pthread_mutex_unlock(&m->pool_mu);
    return yes;
}

static void protocol_violation(remote *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void protocol_violation(remote *r, const char *fmt, ...)
{
    if (r->violation != TD_OK) return;
    r->violation = TD_EPROTO;
    int n = snprintf(r->violation_msg, sizeof r->violation_msg,
                     "tensord at %s broke the protocol: ", r->target);
    if (n < 0 || (size_t)n >= sizeof r->violation_msg) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->violation_msg + n, sizeof r->violation_msg - (size_t)n, fmt, ap);
    va_end(ap);
}


/* The asynchronous read that seq answers, or NULL. */
static read_into *aread_of(const remote *r, uint64_t seq)
{
    for (read_into *a = r->areads; a != NULL; a = a->next)
        if (a->seq == seq) return a;
    return NULL;
}

/* The read that seq answers: the synchronous one, or one in r->areads; NULL if none. */
static read_into *read_of(const remote *r, uint64_t seq)
{
    if (r->req.kind == REQ_READ && seq == r->req.seq) return r->req.read;
    return aread_of(r, seq);
}

static void dispatch_read_chunk(remote *r, const Tensord__V1__ServerMessage *m, size_t plen)
{
    const Tensord__V1__ReadChunk *c = m->read;
    read_into *rd = read_of(r, m->seq);
    if (rd == NULL || rd->done) {
        protocol_violation(r, "read chunk for request %llu, none pending",
                           (unsigned long long)m->seq);
        return;
    }
    if (c->tensor != rd->tensor) {
        protocol_violation(r, "read chunk names tensor %llu, request %llu read tensor %llu",
                           (unsigned long long)c->tensor, (unsigned long long)m->seq,
                           (unsigned long long)rd->tensor);
        return;
    }
    /* Chunks must arrive in order and stay inside the caller's buffer. */
    uint64_t expect = rd->offset + rd->got;
    if (c->offset != expect || plen > rd->nbytes - rd->got) {
        protocol_violation(r,
                           "read of tensor %llu: chunk at offset %llu with %zu bytes, expected "
                           "offset %llu and at most %zu bytes",
                           (unsigned long long)c->tensor, (unsigned long long)c->offset, plen,
                           (unsigned long long)expect, rd->nbytes - rd->got);
        return;
    }
    /* The one copy: from gRPC's slices straight into the caller's buffer. */
    if (plen > 0 && !rd->forgotten &&
        td__wire_span_copy(r->rx_bb, &r->rx_span, rd->dst + rd->got) != TD_OK) {
        protocol_violation(r, "read of tensor %llu: unreadable payload",
                           (unsigned long long)c->tensor);
        return;
    }
    rd->got += plen;
    r->base.stats.bytes_received += plen;
    if (c->last) {
        if (rd->got != rd->nbytes) {
            protocol_violation(r, "read of tensor %llu ended after %zu of %zu bytes",
                               (unsigned long long)c->tensor, rd->got, rd->nbytes);
            return;
        }
        rd->done = true;
        rd->st = TD_OK;
        if (rd == r->req.read) {
            r->req.done = true;
            r->req.st = TD_OK;
        }
    }
}

static void dispatch(remote *r, const Tensord__V1__ServerMessage *m, size_t plen)
{
    switch (m->body_case) {
    case TENSORD__V1__SERVER_MESSAGE__BODY_OPENED:
        if (r->req.kind != REQ_OPEN || m->seq != r->req.seq || m->opened == NULL) {
            protocol_violation(r, "unexpected session-opened message (seq %llu)",
                               (unsigned long long)m->seq);
            return;
        }
        snprintf(r->opened_device, sizeof r->opened_device, "%s",
                 m->opened->device != NULL ? m->opened->device : "");
        r->opened_protocol = m->opened->protocol;
        if (m->opened->n_devices > TD_TRANSPORT_MAX_DEVICES) {
            protocol_violation(r, "session-opened lists %zu devices; a session spans at most "
                               "%d", m->opened->n_devices, TD_TRANSPORT_MAX_DEVICES);
            return;
        }
        r->n_opened_devices = (uint32_t)m->opened->n_devices;
        for (size_t i = 0; i < m->opened->n_devices; i++)
            snprintf(r->opened_devices[i], sizeof r->opened_devices[i], "%s",
                     m->opened->devices[i] != NULL ? m->opened->devices[i] : "");
        r->opened_session_id = m->opened->session_id;
        if (m->opened->shm != NULL) {
            const Tensord__V1__ShmOffer *o = m->opened->shm;
            /* Checked here; a bad offer is ignored (the stream still works). */
            if (o->socket_path != NULL && strlen(o->socket_path) < sizeof r->shm_offer.path &&
                o->secret.len == TD_SHM_SECRET_BYTES && o->region_bytes >= 2 * 4096 &&
                o->region_bytes <= SIZE_MAX) {
                r->shm_offer.offered = true;
                snprintf(r->shm_offer.path, sizeof r->shm_offer.path, "%s", o->socket_path);
                memcpy(r->shm_offer.secret, o->secret.data, TD_SHM_SECRET_BYTES);
                r->shm_offer.bytes = o->region_bytes;
                r->shm_offer.ring_offset = o->ring_offset;
                r->shm_offer.ring_bytes = o->ring_bytes;
            }
        }
        if (m->opened->shm_refused != NULL)
            snprintf(r->shm_offer.refused, sizeof r->shm_offer.refused, "%s",
                     m->opened->shm_refused);
        r->req.done = true;
        r->req.st = TD_OK;
        return;
    case TENSORD__V1__SERVER_MESSAGE__BODY_FAILURE: {
        const Tensord__V1__Failure *f = m->failure;
        td_status st = status_from_wire(f->status);
        const char *msg = f->message != NULL && f->message[0] != '\0' ? f->message
                                                                      : td_status_message(st);
        for (int h = 0; h < r->shm_nslots; h++) {
            if (!r->slot[h].busy || r->slot[h].seq != m->seq) continue;
            /* The server is done with the slot. A write's failure is deferred like a
             * WriteChunk's; a read's is returned by the read. */
            r->slot[h].busy = false;
            if (r->slot[h].read) {
                r->slot[h].st = st;
                snprintf(r->shm_err, sizeof r->shm_err, "%s", msg);
            } else {
                td__transport_defer(&r->base, st, msg);
            }
            return;
        }
        read_into *a = aread_of(r, m->seq);
        if (a != NULL && !a->done) {
            /* an asynchronous read's: read_finish reports it */
            a->err = td__strdup(msg);
            a->st = st;
            a->done = true;
        } else if (r->req.kind != REQ_NONE && m->seq == r->req.seq) {
            snprintf(r->base.err, sizeof r->base.err, "%s", msg);
            r->req.st = st;
            r->req.done = true;
        } else {
            td__transport_defer(&r->base, st, msg);
        }
        return;
    }
    case TENSORD__V1__SERVER_MESSAGE__BODY_READ:
        dispatch_read_chunk(r, m, plen);
        return;
    case TENSORD__V1__SERVER_MESSAGE__BODY_GRAPH_READY:
        if (r->req.kind != REQ_GRAPH || m->seq != r->req.seq) {
            protocol_violation(r, "graph-ready for request %llu, none pending",
                               (unsigned long long)m->seq);
            return;
        }
        r->graph_known = m->graph_ready->known;
        r->req.done = true;
        r->req.st = TD_OK;
        return;
    case TENSORD__V1__SERVER_MESSAGE__BODY_BLOB_STATUS:
        if (r->req.kind != REQ_BLOBS || m->seq != r->req.seq ||
            m->blob_status->n_present != 1) {
            protocol_violation(r, "blob status for request %llu, none pending",
                               (unsigned long long)m->seq);
            return;
        }
        r->blob_present = m->blob_status->present[0];
        r->req.done = true;
        r->req.st = TD_OK;
        return;
    case TENSORD__V1__SERVER_MESSAGE__BODY_SHM_DONE:
        for (int h = 0; h < r->shm_nslots; h++) {
            if (r->slot[h].busy && r->slot[h].seq == m->seq) {
                r->slot[h].busy = false;
                r->slot[h].st = TD_OK;
                return;
            }
        }
        protocol_violation(r, "shm-done for request %llu, none pending",
                           (unsigned long long)m->seq);
        return;
    case TENSORD__V1__SERVER_MESSAGE__BODY_FENCE:
        if (r->req.kind != REQ_FENCE || m->seq != r->req.seq) {
            protocol_violation(r, "fence-done for request %llu, none pending",
                               (unsigned long long)m->seq);
            return;
        }
        r->fence_stream_msgs = m->fence->stream_msgs;
        r->req.done = true;
        r->req.st = TD_OK;
        return;
    default:
        protocol_violation(r, "message %llu has no known body (case %d)",
                           (unsigned long long)m->seq, (int)m->body_case);
        return;
    }
}

/* Decode and dispatch one received message (from the stream or the ring); bb is kept. */
static void receive(remote *r, grpc_byte_buffer *bb)
{
    ProtobufCMessage *msg = NULL;
    char err[256];
    td_status st = td__wire_decode_head(bb, &tensord__v1__server_message__descriptor,
                                        &r->scratch, &msg, &r->rx_span, err, sizeof err);
    if (st == TD_OK) {
        r->rx_bb = bb;
        dispatch(r, (const Tensord__V1__ServerMessage *)msg,
                 r->rx_span.present ? r->rx_span.len : 0);
        r->rx_bb = NULL;
        protobuf_c_message_free_unpacked(msg, NULL);
    } else if (st == TD_ENOMEM) {
        protocol_violation(r, "out of memory decoding a message");
        r->violation = TD_ENOMEM;
    } else {
        protocol_violation(r, "%s", err);
    }
}

/* A receive completed: arm the next receive, then dispatch this message (a read chunk's
 * copy into the caller's memory then runs while gRPC can already complete the next one),
 * so one receive stays armed. */
static void on_recv(remote *r)
{
    grpc_byte_buffer *bb = td__cli_call_take(&r->c);
    if (bb == NULL) return; /* the end of the stream (c.stream_ended) */
    if (r->ending || r->violation != TD_OK) {
        grpc_byte_buffer_destroy(bb);
        return;
    }
    td__cli_call_recv(&r->c);
    r->stream_msgs++;
    receive(r, bb);
    grpc_byte_buffer_destroy(bb);
}

/* Hand the first queued message to the call (its SEND_MESSAGE is free). A refusal sets
 * c.send_failed, which every wait reports as the session's end. */
static void outq_start(remote *r)
{
    outq_msg *m = r->outq_head;
    r->outq_head = m->next;
    if (r->outq_head == NULL) r->outq_tail = NULL;
    r->outq_bytes -= m->bytes;
    td__cli_call_send(&r->c, m->bb, r->sec.md, r->sec.n_md, m->flags);
    td__free(m);
}

/* Handle one completion (dispatching a received message, starting the next queued send);
 * false when the deadline passed first. */
static bool pump(remote *r, gpr_timespec deadline)
{
    bool got = td__cli_call_pump(&r->c, deadline);
    if (!r->c.send_pending && !r->c.send_failed && r->outq_head != NULL) outq_start(r);
    if (r->c.recv_ready) on_recv(r);
    return got;
}

/* Drop the messages still waiting for the call (it can carry no more): their payload
 * slices are released here, so a zero-copy write waiting for its slices is not left
 * waiting for messages that will never be sent. */
static void outq_drop(remote *r)
{
    while (r->outq_head != NULL) {
        outq_msg *m = r->outq_head;
        r->outq_head = m->next;
        grpc_byte_buffer_destroy(m->bb);
        td__free(m);
    }
    r->outq_tail = NULL;
    r->outq_bytes = 0;
}

/* Let every outstanding operation complete, cancelling the call when the server does not
 * end it within `wait_ms`; messages still queued are dropped. */
static void finish_call(remote *r, int wait_ms, bool cancel_now)
{
    r->ending = true;
    if (r->c.call == NULL) {
        outq_drop(r);
        return;
    }
    if (cancel_now) grpc_call_cancel(r->c.call, NULL);
    td__cli_call_drain(&r->c, td__cli_after_ms(wait_ms));
    if (td__cli_call_busy(&r->c)) {
        grpc_call_cancel(r->c.call, NULL);
        td__cli_call_drain(&r->c, td__cli_after_ms(REMOTE_CLOSE_TIMEOUT_MS));
    }
    outq_drop(r);
}

static td_status status_to_td_opening(grpc_status_code c)
{
    switch (c) {
    case GRPC_STATUS_INVALID_ARGUMENT:
    case GRPC_STATUS_NOT_FOUND:
        return TD_EINVAL;
    case GRPC_STATUS_FAILED_PRECONDITION:
    case GRPC_STATUS_UNIMPLEMENTED:
    case GRPC_STATUS_OUT_OF_RANGE:
        return TD_EPROTO;
    case GRPC_STATUS_UNAUTHENTICATED:
    case GRPC_STATUS_PERMISSION_DENIED:
        return TD_EUNAUTHENTICATED;
    case GRPC_STATUS_RESOURCE_EXHAUSTED:
        return TD_EQUOTA;
    case GRPC_STATUS_DEADLINE_EXCEEDED:
        return TD_ETIMEOUT;
    default:
        return TD_EUNAVAILABLE;
    }
}

/* The stream is gone (the server ended the call, or the connection broke). */
static td_status session_lost(remote *r)
{
    finish_call(r, r->call_timeout_ms < 5000 ? r->call_timeout_ms : 5000, false);
    r->broken = true;
    const char *details = (const char *)GRPC_SLICE_START_PTR(r->c.details);
    int dlen = (int)GRPC_SLICE_LENGTH(r->c.details);
    if (!r->c.status_done) {
        details = "no status";
        dlen = (int)strlen(details);
    }
    if (r->opening && (!r->c.status_done || r->c.status == GRPC_STATUS_UNAVAILABLE)) {
        /* Refused during or right after the handshake (a client certificate is checked
         * after the client's side of a TLS 1.3 handshake is done): say what is likely. */
        char why[1024] = "";
        td__client_sec_explain(&r->sec, r->target, why, sizeof why);
        if (why[0] != '\0') {
            remote_errf(r, "%s", why);
            return TD_EUNAVAILABLE;
        }
    }
    if (r->opening) {
        td_status st = status_to_td_opening(r->c.status);
        r->device_denied = r->c.status_done && r->c.status == GRPC_STATUS_PERMISSION_DENIED;
        if (r->c.status_done && r->c.status != GRPC_STATUS_UNAVAILABLE &&
            r->c.status != GRPC_STATUS_OK && dlen > 0) {
            /* The server refused the session: its message says why. */
            remote_errf(r, "tensord at %s refused the session: %.*s", r->target, dlen, details);
        } else {
            remote_errf(r, "tensord at %s ended the session while opening it: %.*s (%s)",
                        r->target, dlen, details, grpc_code_name(r->c.status));
        }
        return st;
    }
    remote_errf(r, "tensord at %s closed the session: %.*s (%s)", r->target, dlen, details,
                grpc_code_name(r->c.status));
    return TD_EUNAVAILABLE;
}

static td_status session_timeout(remote *r)
{
    finish_call(r, 2000, true);
    r->broken = true;
    remote_errf(r, "no reply from tensord at %s within %d ms", r->target, r->call_timeout_ms);
    return TD_ETIMEOUT;
}

static td_status session_violation(remote *r)
{
    td_status st = r->violation;
    finish_call(r, 2000, true);
    r->broken = true;
    remote_errf(r, "%s", r->violation_msg);
    return st;
}

/* The call can carry nothing more: a receive found the stream's end, or a send failed. A
 * status alone is not enough: messages sent before it may still be waiting to be read. */
static bool stream_broken(const remote *r) { return r->c.stream_ended || r->c.send_failed; }

typedef bool (*remote_cond)(const remote *r);

/* Pump until done(r), the stream breaks, or call_timeout_ms passes. poll_ms > 0 wakes up
 * that often to re-check a condition no completion signals (slice releases). */
static td_status wait_until(remote *r, remote_cond done, int poll_ms)
{
    gpr_timespec deadline = td__cli_after_ms(r->call_timeout_ms);
    for (;;) {
        if (r->violation != TD_OK) return session_violation(r);
        if (done(r)) return TD_OK;
        if (stream_broken(r)) return session_lost(r);
        gpr_timespec until = deadline;
        if (poll_ms > 0) {
            gpr_timespec soon = td__cli_after_ms(poll_ms);
            if (gpr_time_cmp(soon, deadline) < 0) until = soon;
        }
        if (!pump(r, until) && gpr_time_cmp(gpr_now(GPR_CLOCK_MONOTONIC), deadline) >= 0)
            return session_timeout(r);
    }
}

/* Every message handed to gRPC (none queued, none being sent). */
static bool send_idle(const remote *r) { return !r->c.send_pending && r->outq_head == NULL; }
static bool outq_room(const remote *r) { return r->outq_bytes < REMOTE_OUTQ_BYTES; }
static bool req_done(const remote *r) { return r->req.done; }
static bool slices_released(const remote *r)
{
    return atomic_load_explicit(&r->slices_released, memory_order_acquire) == r->slices_given;
}
static bool pool_returned(const remote *r)
{
    return atomic_load_explicit(&r->pool_returned, memory_order_acquire) == r->pool_lent;
}

/* Take in whatever has already arrived without blocking. */
static td_status poll_ready(remote *r)
{
    while (pump(r, gpr_inf_past(GPR_CLOCK_MONOTONIC))) {
    }
    if (r->violation != TD_OK) return session_violation(r);
    if (stream_broken(r)) return session_lost(r);
    return TD_OK;
}

static td_status check_open(remote *r)
{
    if (!r->broken) return TD_OK;
    /* Keep the first failure's message: it says why the session is gone. */
    if (strncmp(r->base.err, "session closed", 14) != 0) {
        char prev[sizeof r->base.err];
        memcpy(prev, r->base.err, sizeof prev);
        remote_errf(r, "session closed: %s", prev);
    }
    return TD_ECLOSED;
}

/* Start sending `msg` (and payload) with the next seq, after the previous send is taken.
 * With a payload, its release callback has run or will run whatever this returns. The
 * first message of the call carries the bearer token in its initial metadata. */
static td_status ring_flush_held(remote *r);

/* Hand bb (owned from here) to the call, or queue it behind the messages waiting for the
 * call's SEND_MESSAGE. The first message of the call carries the initial metadata (the
 * bearer token). */
static td_status send_bb(remote *r, grpc_byte_buffer *bb, uint32_t flags)
{
    /* Nobody drives the queue (no flusher thread, or still opening): hand the message to
     * the call before returning, as before the queue, so that nothing waits in it while
     * the program makes no call. */
    if (r->base.driven && (r->c.send_pending || r->outq_head != NULL)) {
        outq_msg *m = td__malloc(sizeof *m);
        if (m != NULL) {
            *m = (outq_msg){.bb = bb, .flags = flags, .bytes = grpc_byte_buffer_length(bb)};
            if (r->outq_tail != NULL) r->outq_tail->next = m;
            else r->outq_head = m;
            r->outq_tail = m;
            r->outq_bytes += m->bytes;
            return TD_OK;
        }
    }
    /* Not queued (or no memory for the queue entry): wait until the call can take it. */
    if (!send_idle(r)) {
        td_status st = wait_until(r, send_idle, 0);
        if (st != TD_OK) {
            grpc_byte_buffer_destroy(bb);
            return st;
        }
    }
    if (!td__cli_call_send(&r->c, bb, r->sec.md, r->sec.n_md, flags)) return session_lost(r);
    return TD_OK;
}

/* Number `msg` (and payload) with the next seq and send or queue it (send_bb), after the
 * queue has room. With a payload, its release callback has run or will run whatever this
 * returns. */
static td_status send_msg(remote *r, Tensord__V1__ClientMessage *msg,
                          const td__wire_payload *payload)
{
    td_status st = r->ring_held_n > 0 ? ring_flush_held(r) : TD_OK;
    /* A violation the flusher's drive found: a copied write would return without any wait
     * that reports it (wait_until does). */
    if (st == TD_OK && r->violation != TD_OK) st = session_violation(r);
    if (st == TD_OK && stream_broken(r)) st = session_lost(r);
    if (st == TD_OK && !outq_room(r)) st = wait_until(r, outq_room, 0);
    if (st != TD_OK) {
        if (payload != NULL && payload->release != NULL) payload->release(payload->release_arg);
        return st;
    }
    msg->seq = r->next_seq;
    grpc_byte_buffer *bb = NULL;
    st = td__wire_encode(&msg->base, payload, &bb);
    if (st != TD_OK) {
        remote_errf(r, "out of memory encoding a message");
        return st;
    }
    /* A non-final write chunk: gRPC may report the send done while it is still queued
     * (up to the channel's write buffer), so the next chunk is handed over without a gap.
     * The final chunk and every other message are sent without the hint, which flushes. */
    st = send_bb(r, bb, r->send_buffered ? GRPC_WRITE_BUFFER_HINT : 0);
    if (st == TD_OK) r->next_seq++;
    return st;
}

/* Send `msg` and wait for its answer, which dispatch() records in r->req (the caller sets
 * up the fields a read needs; kind and seq are set here), running `work`'s steps (may be
 * NULL) until it arrives or they are done. Counts a round trip (not for the open). r->req
 * is clear again on return. */
static td_status round_trip_working(remote *r, Tensord__V1__ClientMessage *msg,
                                    enum remote_req kind, const td__wait_work *work)
{
    uint64_t seq = r->next_seq;
    td_status st = send_msg(r, msg, NULL);
    if (st == TD_OK) {
        r->req.kind = kind;
        r->req.seq = seq;
        /* Take in what has arrived (without blocking) before each step. */
        while (work != NULL && (st = poll_ready(r)) == TD_OK && !r->req.done &&
               work->step(work->arg)) {
        }
        if (st == TD_OK) st = wait_until(r, req_done, 0);
        if (kind != REQ_OPEN) r->base.stats.round_trips++;
        if (st == TD_OK) st = r->req.st;
    }
    memset(&r->req, 0, sizeof r->req);
    return st;
}

static td_status round_trip(remote *r, Tensord__V1__ClientMessage *msg, enum remote_req kind)
{
    return round_trip_working(r, msg, kind, NULL);
}

/* ---- the request ring (tensord.proto "request ring") ---- */

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Send the held messages on the stream, in order (each already carries its seq). */
static td_status ring_flush_held(remote *r)
{
    int n = r->ring_held_n;
    size_t pos = 0;
    td_status st = TD_OK;
    r->ring_held_n = 0;
    for (int i = 0; i < n && st == TD_OK; i++) {
        uint32_t len = get_u32(r->ring_held + pos);
        pos += 4;
        if (stream_broken(r)) st = session_lost(r);
        if (st != TD_OK) break;
        grpc_slice sl = grpc_slice_from_copied_buffer((const char *)r->ring_held + pos, len);
        grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&sl, 1);
        grpc_slice_unref(sl);
        st = send_bb(r, bb, 0);
        pos += len;
    }
    r->ring_held_len = 0;
    return st;
}

/* Whether `msg` can join the held messages (`last`: it is the read or fence that sends
 * them; otherwise room stays for one). */
static bool ring_fits(const remote *r, size_t packed, bool last)
{
    size_t reserve = last ? 0 : 64;
    return r->ring.base != NULL && r->ring_held_n < TD_RING_MAX_MESSAGES - (last ? 0 : 1) &&
           packed + 4 + reserve <= TD_RING_REQ_BYTES - r->ring_held_len;
}

/* Number msg with the next seq and hold it (ring_fits said yes). */
static void ring_hold(remote *r, Tensord__V1__ClientMessage *msg, size_t packed)
{
    msg->seq = r->next_seq++;
    size_t got = tensord__v1__client_message__pack(msg, r->ring_held + r->ring_held_len + 4);
    put_u32(r->ring_held + r->ring_held_len, (uint32_t)got);
    r->ring_held_len += 4 + got;
    r->ring_held_n++;
}

/* Hold a fire-and-forget message when a read or fence follows (base.sync_next) and it
 * fits; true when held. */
static bool ring_try_hold(remote *r, Tensord__V1__ClientMessage *msg)
{
    if (!r->base.sync_next || r->ring.base == NULL) return false;
    msg->seq = r->next_seq; /* the packed size depends on the seq */
    size_t packed = tensord__v1__client_message__get_packed_size(msg);
    if (!ring_fits(r, packed, false)) return false;
    ring_hold(r, msg, packed);
    return true;
}

/* td__ring_cli_call's keep_waiting: take in what the stream brought (a Failure of an
 * earlier batch, the call's end) and give up at the call's deadline. */
static bool ring_keep_waiting(void *arg)
{
    remote *r = arg;
    while (pump(r, gpr_inf_past(GPR_CLOCK_MONOTONIC))) {
    }
    return r->violation == TD_OK && !stream_broken(r) &&
           gpr_time_cmp(gpr_now(GPR_CLOCK_MONOTONIC), r->ring_deadline) < 0;
}

/* Send the held messages and msg (a read or fence, whose answer dispatch() records in
 * r->req as round_trip's would) on the ring and dispatch every reply. */
static td_status ring_round_trip(remote *r, Tensord__V1__ClientMessage *msg,
                                 enum remote_req kind)
{
    msg->seq = r->next_seq;
    size_t packed = tensord__v1__client_message__get_packed_size(msg);
    td_status st = TD_OK;
    if (!ring_fits(r, packed, true)) st = ring_flush_held(r);
    /* Whatever is on its way on the stream must be gRPC's before we wait on the ring. */
    if (st == TD_OK && !send_idle(r)) st = wait_until(r, send_idle, 0);
    if (st != TD_OK) return st;
    uint64_t seq = r->next_seq;
    ring_hold(r, msg, packed);
    memcpy(td__ring_cli_request(&r->ring), r->ring_held, r->ring_held_len);
    uint32_t len = (uint32_t)r->ring_held_len;
    r->ring_held_len = 0;
    r->ring_held_n = 0;
    r->req.kind = kind;
    r->req.seq = seq;
    r->ring_deadline = td__cli_after_ms(r->call_timeout_ms);
    size_t rep_len = 0;
    st = td__ring_cli_call(&r->ring, len, r->ring_rep, &rep_len, ring_keep_waiting, r);
    r->base.stats.round_trips++;
    if (st == TD_ETIMEOUT && r->violation == TD_OK && !stream_broken(r)) {
        st = session_timeout(r);
    } else if (st == TD_EPROTO) {
        protocol_violation(r, "the request ring's reply count or length is out of range");
        st = session_violation(r);
    } else if (st != TD_OK) {
        /* The server closed the ring (its session is ending): the stream says why. */
        st = wait_until(r, req_done, 0);
        if (st == TD_OK) st = r->req.st;
    } else {
        for (size_t pos = 0; pos < rep_len && r->violation == TD_OK;) {
            uint32_t l = rep_len - pos >= 4 ? get_u32(r->ring_rep + pos) : UINT32_MAX;
            if (l > rep_len - pos - 4) {
                protocol_violation(r, "a frame of the request ring's reply runs past it");
                break;
            }
            grpc_byte_buffer *bb = td__wire_bb_over(r->ring_rep + pos + 4, l);
            if (bb == NULL) {
                protocol_violation(r, "out of memory decoding a message");
                r->violation = TD_ENOMEM;
                break;
            }
            receive(r, bb);
            grpc_byte_buffer_destroy(bb);
            pos += 4 + (size_t)l;
        }
        if (r->violation == TD_OK && !r->req.done)
            protocol_violation(r, "the request ring's reply lacks the answer to seq %llu",
                               (unsigned long long)seq);
        st = r->violation != TD_OK ? session_violation(r) : r->req.st;
    }
    memset(&r->req, 0, sizeof r->req);
    return st;
}

/* ---- the transport vtable ---- */

static td_status remote_submit(td__transport *t, const td__op *ops, size_t n)
{
    remote *r = (remote *)t;
    td_status st = check_open(r);
    if (st != TD_OK || n == 0) return st;
    if ((st = poll_ready(r)) != TD_OK) return st;

    Tensord__V1__Op *wops = td__calloc(n, sizeof *wops);
    Tensord__V1__Op **ptrs = td__calloc(n, sizeof *ptrs);
    uint64_t *inputs = td__calloc(n, TD_OP_MAX_INPUTS * sizeof *inputs);
    if (wops == NULL || ptrs == NULL || inputs == NULL) {
        remote_errf(r, "out of memory sending a batch of %zu ops", n);
        st = TD_ENOMEM;
        goto out;
    }
    size_t first = 0;
    while (first < n && st == TD_OK) {
        size_t count = 0, bytes = 0;
        while (first + count < n && count < TD_MAX_BATCH_OPS) {
            size_t i = first + count;
            td__wire_op_to(&ops[i], &wops[i], inputs + i * TD_OP_MAX_INPUTS);
            size_t sz = tensord__v1__op__get_packed_size(&wops[i]) + 6;
            if (count > 0 && bytes + sz > REMOTE_BATCH_BYTES) break;
            ptrs[i] = &wops[i];
            bytes += sz;
            count++;
        }
        Tensord__V1__OpBatch batch = TENSORD__V1__OP_BATCH__INIT;
        batch.n_ops = count;
        batch.ops = ptrs + first;
        Tensord__V1__ClientMessage cm = TENSORD__V1__CLIENT_MESSAGE__INIT;
        cm.body_case = TENSORD__V1__CLIENT_MESSAGE__BODY_BATCH;
        cm.batch = &batch;
        st = ring_try_hold(r, &cm) ? TD_OK : send_msg(r, &cm, NULL);
        if (st == TD_OK) r->base.stats.batches_sent++;
        first += count;
    }
out:
    td__free(inputs);
    td__free(ptrs);
    td__free(wops);
    return st;
}

/* ---- blob store (client/offer.c decides when) ---- */

/* HasBlobs with one key: a SHA-256 (len TD_SHA256_BYTES) or a fingerprint
 * (TD_FINGERPRINT_BYTES). One round trip, doing `work` (may be NULL) while it lasts;
 * *present on TD_OK. */
static td_status blob_ask(remote *r, const uint8_t *key, size_t len, bool *present,
                          const td__wait_work *work)
{
    td_status st = check_open(r);
    if (st != TD_OK) return st;
    ProtobufCBinaryData h = {.len = len, .data = (uint8_t *)(uintptr_t)key};
    Tensord__V1__HasBlobs hb = TENSORD__V1__HAS_BLOBS__INIT;
    if (len == TD_SHA256_BYTES) {
        hb.n_sha256 = 1;
        hb.sha256 = &h; /* only read while packing */
    } else {
        hb.n_fingerprint = 1;
        hb.fingerprint = &h;
    }
    Tensord__V1__ClientMessage cm = TENSORD__V1__CLIENT_MESSAGE__INIT;
    cm.body_case = TENSORD__V1__CLIENT_MESSAGE__BODY_HAS_BLOBS;
    cm.has_blobs = &hb;
    r->blob_present = false;
    st = round_trip_working(r, &cm, REQ_BLOBS, work);
    if (st == TD_OK) *present = r->blob_present;
    return st;
}

static td_status remote_blob_has(td__transport *t, const uint8_t hash[TD_SHA256_BYTES],
                                 bool *present)
{
    return blob_ask((remote *)t, hash, TD_SHA256_BYTES, present, NULL);
}

static td_status remote_blob_has_fingerprint(td__transport *t,
                                             const uint8_t fp[TD_FINGERPRINT_BYTES],
                                             bool *present, const td__wait_work *work)
{
    return blob_ask((remote *)t, fp, TD_FINGERPRINT_BYTES, present, work);
}

/* WriteFromBlob (from_store) or StoreBlob for tensor `id`; key is a SHA-256 or, for
 * StoreBlob only, a fingerprint (by len). Fire-and-forget. */
static td_status blob_send(remote *r, uint64_t id, const uint8_t *key, size_t len,
                           bool from_store)
{
    td_status st = check_open(r);
    if (st != TD_OK) return st;
    ProtobufCBinaryData h = {.len = len, .data = (uint8_t *)(uintptr_t)key};
    Tensord__V1__WriteFromBlob wb = TENSORD__V1__WRITE_FROM_BLOB__INIT;
    Tensord__V1__StoreBlob sb = TENSORD__V1__STORE_BLOB__INIT;
    Tensord__V1__ClientMessage cm = TENSORD__V1__CLIENT_MESSAGE__INIT;
    if (from_store) {
        wb.tensor = id;
        wb.sha256 = h; /* only read while packing */
        cm.body_case = TENSORD__V1__CLIENT_MESSAGE__BODY_WRITE_FROM_BLOB;
        cm.write_from_blob = &wb;
    } else {
        sb.tensor = id;
        if (len == TD_SHA256_BYTES)
            sb.sha256 = h;
        else
            sb.fingerprint = h;
        cm.body_case = TENSORD__V1__CLIENT_MESSAGE__BODY_STORE_BLOB;
        cm.store_blob = &sb;
    }
    return send_msg(r, &cm, NULL);
}

static td_status remote_blob_write(td__transport *t, uint64_t id,
                                   const uint8_t hash[TD_SHA256_BYTES])
{
    return blob_send((remote *)t, id, hash, TD_SHA256_BYTES, true);
}

static td_status remote_blob_store(td__transport *t, uint64_t id,
                                   const uint8_t hash[TD_SHA256_BYTES])
{
    return blob_send((remote *)t, id, hash, TD_SHA256_BYTES, false);
}

static td_status remote_blob_candidate(td__transport *t, uint64_t id,
                                       const uint8_t fp[TD_FINGERPRINT_BYTES])
{
    return blob_send((remote *)t, id, fp, TD_FINGERPRINT_BYTES, false);
}

/* ---- shared memory (tensord.proto "shared memory") ---- */

static bool slot_free(const remote *r) { return !r->slot[r->wait_slot].busy; }

/* Wait until the server is done with slot h (its ShmDone or Failure has arrived). */
static td_status shm_wait_slot(remote *r, int h)
{
    if (!r->slot[h].busy) return TD_OK;
    r->wait_slot = h;
    return wait_until(r, slot_free, 0);
}

static uint8_t *slot_data(const remote *r, int h)
{
    return r->shm.data + (size_t)h * r->shm_slot_bytes;
}

/* Upload through the region's ring: copy a piece into the next free slot, send a ShmWrite
 * naming it, go on with the next slot while the server copies this one into the tensor.
 * Returns once every piece is sent (like a chunked write: failures are deferred); `src` is
 * not needed after that. */
static td_status shm_write(remote *r, uint64_t id, uint64_t offset, const uint8_t *src,
                           size_t nbytes)
{
    td_status st = poll_ready(r);
    for (size_t done = 0; st == TD_OK && done < nbytes;) {
        int h = r->next_slot;
        size_t len = nbytes - done < r->shm_slot_bytes ? nbytes - done : r->shm_slot_bytes;
        if ((st = shm_wait_slot(r, h)) != TD_OK) break;
        memcpy(slot_data(r, h), src + done, len);
        Tensord__V1__ShmWrite sw = TENSORD__V1__SHM_WRITE__INIT;
        sw.tensor = id;
        sw.offset = offset + done;
        sw.nbytes = len;
        sw.region_offset = (uint64_t)h * r->shm_slot_bytes;
        Tensord__V1__ClientMessage cm = TENSORD__V1__CLIENT_MESSAGE__INIT;
        cm.body_case = TENSORD__V1__CLIENT_MESSAGE__BODY_SHM_WRITE;
        cm.shm_write = &sw;
        uint64_t seq = r->next_seq;
        if ((st = send_msg(r, &cm, NULL)) != TD_OK) break;
        r->slot[h].busy = true;
        r->slot[h].read = false;
        r->slot[h].seq = seq;
        r->next_slot = (h + 1) % r->shm_nslots;
        r->base.stats.bytes_sent += len;
        done += len;
    }
    return st;
}

/* Download through the ring: keep up to shm_nslots ShmReads in flight and copy each
 * finished slot out (in order) while the server fills the next ones. */
static td_status shm_read(remote *r, uint64_t id, uint64_t offset, uint8_t *dst, size_t nbytes)
{
    struct {
        int h;
        size_t off, len;
    } q[REMOTE_SHM_SLOTS];
    int qhead = 0, qn = 0, n = r->shm_nslots;
    size_t issued = 0;
    td_status st = poll_ready(r), fail = TD_OK;
    while (st == TD_OK) {
        while (fail == TD_OK && qn < n && issued < nbytes) {
            int h = r->next_slot;
            size_t len = nbytes - issued < r->shm_slot_bytes ? nbytes - issued
                                                             : r->shm_slot_bytes;
            if ((st = shm_wait_slot(r, h)) != TD_OK) break;
            Tensord__V1__ShmRead sr = TENSORD__V1__SHM_READ__INIT;
            sr.tensor = id;
            sr.offset = offset + issued;
            sr.nbytes = len;
            sr.region_offset = (uint64_t)h * r->shm_slot_bytes;
            Tensord__V1__ClientMessage cm = TENSORD__V1__CLIENT_MESSAGE__INIT;
            cm.body_case = TENSORD__V1__CLIENT_MESSAGE__BODY_SHM_READ;
            cm.shm_read = &sr;
            uint64_t seq = r->next_seq;
            if ((st = send_msg(r, &cm, NULL)) != TD_OK) break;
            r->slot[h].busy = true;
            r->slot[h].read = true;
            r->slot[h].seq = seq;
            r->slot[h].st = TD_OK;
            int qi = (qhead + qn) % n;
            q[qi].h = h;
            q[qi].off = issued;
            q[qi].len = len;
            qn++;
            r->next_slot = (h + 1) % n;
            issued += len;
        }
        if (st != TD_OK || qn == 0) break;
        int h = q[qhead].h;
        if ((st = shm_wait_slot(r, h)) != TD_OK) break;
        if (r->slot[h].st != TD_OK) {
            if (fail == TD_OK) {
                fail = r->slot[h].st;
                snprintf(r->base.err, sizeof r->base.err, "%s", r->shm_err);
            }
        } else if (fail == TD_OK) {
            memcpy(dst + q[qhead].off, slot_data(r, h), q[qhead].len);
            r->base.stats.bytes_received += q[qhead].len;
        }
        qhead = (qhead + 1) % n;
        qn--;
    }
    r->base.stats.round_trips++;
    return st != TD_OK ? st : fail;
}

/* The region offset of [p, p + nbytes) when it lies inside one host buffer of the region
 * (td_host_alloc), else UINT64_MAX. */
static uint64_t host_buffer_offset(const remote *r, const void *p, size_t nbytes)
{
    if (r->shm.data == NULL || r->heap.n == 0 || nbytes == 0) return UINT64_MAX;
    uintptr_t a = (uintptr_t)p, base = (uintptr_t)r->shm.data;
    if (a < base || a - base >= r->shm.size) return UINT64_MAX;
    uint64_t off = (uint64_t)(a - base);
    return td__host_heap_find(&r->heap, off, nbytes) != NULL ? off : UINT64_MAX;
}

/* A transfer between tensor `id` and host-buffer bytes at region offset `region_off`: the
 * server copies straight between the region and the tensor (one copy in all, none here).
 * Pieces of REMOTE_SHM_DIRECT_PIECE use the slots' tickets (not their bytes), so at most
 * REMOTE_SHM_SLOTS are in flight. Returns once the server has answered every piece, so the
 * buffer is the caller's again: a write's failure is deferred like any write's, a read's
 * is returned. */
static td_status shm_direct(remote *r, bool read, uint64_t id, uint64_t offset,
                            uint64_t region_off, size_t nbytes)
{
    td_status st = poll_ready(r);
    r->shm_err[0] = '\0';
    for (size_t done = 0; st == TD_OK && done < nbytes;) {
        int h = r->next_slot;
        size_t len = nbytes - done < REMOTE_SHM_DIRECT_PIECE ? nbytes - done
                                                              : REMOTE_SHM_DIRECT_PIECE;
        if ((st = shm_wait_slot(r, h)) != TD_OK) break;
        if (read && r->slot[h].st != TD_OK) break; /* an earlier piece failed: stop asking */
        Tensord__V1__ShmWrite sw = TENSORD__V1__SHM_WRITE__INIT;
        Tensord__V1__ShmRead sr = TENSORD__V1__SHM_READ__INIT;
        Tensord__V1__ClientMessage cm = TENSORD__V1__CLIENT_MESSAGE__INIT;
        if (read) {
            sr.tensor = id;
            sr.offset = offset + done;
            sr.nbytes = len;
            sr.region_offset = region_off + done;
            cm.body_case = TENSORD__V1__CLIENT_MESSAGE__BODY_SHM_READ;
            cm.shm_read = &sr;
        } else {
            sw.tensor = id;
            sw.offset = offset + done;
            sw.nbytes = len;
            sw.region_offset = region_off + done;
            cm.body_case = TENSORD__V1__CLIENT_MESSAGE__BODY_SHM_WRITE;
            cm.shm_write = &sw;
        }
        uint64_t seq = r->next_seq;
        if ((st = send_msg(r, &cm, NULL)) != TD_OK) break;
        r->slot[h].busy = true;
        r->slot[h].read = read;
        r->slot[h].seq = seq;
        r->slot[h].st = TD_OK;
        r->next_slot = (h + 1) % r->shm_nslots;
        done += len;
    }
    td_status fail = TD_OK;
    for (int h = 0; h < r->shm_nslots; h++) {
        if (st == TD_OK) st = shm_wait_slot(r, h);
        if (st == TD_OK && read && r->slot[h].st != TD_OK && fail == TD_OK) fail = r->slot[h].st;
        r->slot[h].st = TD_OK;
    }
    if (st == TD_OK && fail != TD_OK)
        snprintf(r->base.err, sizeof r->base.err, "%s", r->shm_err);
    if (st == TD_OK && fail == TD_OK) {
        if (read) r->base.stats.bytes_received += nbytes;
        else r->base.stats.bytes_sent += nbytes;
    }
    r->base.stats.round_trips++;
    return st != TD_OK ? st : fail;
}

static td_status remote_host_alloc(td__transport *t, size_t nbytes, void **out)
{
    remote *r = (remote *)t;
    if (r->shm.data == NULL || r->heap.n == 0) return TD_EUNSUPPORTED;
    uint64_t off;
    if (!td__host_heap_alloc(&r->heap, nbytes, &off)) {
        remote_errf(r, "no room for %zu bytes in this session's shared-memory region (host "
                    "buffers in use: %llu bytes; largest free piece: %llu bytes; the region: "
                    "%llu bytes): free some with td_host_free, or ask for more with "
                    "td_options.shm_host_bytes (the server grants regions up to its "
                    "--shm-max-bytes)",
                    nbytes, (unsigned long long)r->heap.used_bytes,
                    (unsigned long long)td__host_heap_largest_free(&r->heap),
                    (unsigned long long)r->shm.size);
        return TD_ENOMEM;
    }
    *out = r->shm.data + off;
    return TD_OK;
}

static td_status remote_host_free(td__transport *t, void *p)
{
    remote *r = (remote *)t;
    uintptr_t a = (uintptr_t)p, base = (uintptr_t)r->shm.data;
    if (r->shm.data == NULL || a < base || a - base >= r->shm.size ||
        !td__host_heap_free(&r->heap, (uint64_t)(a - base), NULL))
        return TD_EINVAL;
    return TD_OK;
}

static td_status remote_write(td__transport *t, uint64_t id, uint64_t offset, const void *src,
                              size_t nbytes)
{
    remote *r = (remote *)t;
    td_status st = check_open(r);
    if (st != TD_OK || nbytes == 0) return st;
    if (offset + nbytes < offset) {
        remote_errf(r, "write to tensor %llu: offset %llu + %zu bytes overflows",
                    (unsigned long long)id, (unsigned long long)offset, nbytes);
        return TD_ERANGE;
    }
    if (r->shm.data != NULL && nbytes >= r->shm_min_bytes) {
        uint64_t hb = host_buffer_offset(r, src, nbytes);
        if (hb != UINT64_MAX) return shm_direct(r, false, id, offset, hb, nbytes);
        return shm_write(r, id, offset, src, nbytes);
    }
    const uint8_t *p = src;
    bool copy = r->base.driven && nbytes <= r->async_write_max;
    for (size_t done = 0; done < nbytes && st == TD_OK;) {
        size_t len = nbytes - done < TD_CHUNK_BYTES ? nbytes - done : TD_CHUNK_BYTES;
        Tensord__V1__WriteChunk wc = TENSORD__V1__WRITE_CHUNK__INIT;
        wc.tensor = id;
        wc.offset = offset + done;
        Tensord__V1__ClientMessage cm = TENSORD__V1__CLIENT_MESSAGE__INIT;
        cm.body_case = TENSORD__V1__CLIENT_MESSAGE__BODY_WRITE;
        cm.write = &wc;
        td__wire_payload pl = {
            .data = p + done, .nbytes = len, .release = on_slice_released, .release_arg = r};
        if (copy) {
            bool nomem = false;
            pool_buf *b = pool_take(r, &nomem);
            while (b == NULL && !nomem && st == TD_OK) {
                st = wait_until(r, pool_has_free, 1);
                if (st == TD_OK) b = pool_take(r, &nomem);
            }
            if (st != TD_OK) break;
            if (b == NULL) { /* no memory for a copy: this write waits until it is sent */
                copy = false;
            } else {
                memcpy(b->data, p + done, len);
                pl = (td__wire_payload){.data = b->data, .nbytes = len,
                                        .release = on_pool_buf_released, .release_arg = b};
            }
        }
        if (copy) r->pool_lent++;
        else r->slices_given++;
        r->send_buffered = done + len < nbytes;
        st = send_msg(r, &cm, &pl);
        r->send_buffered = false;
        if (st == TD_OK) r->base.stats.bytes_sent += len;
        done += len;
    }
    /* A copied write is done once queued (the flusher drives it). Otherwise `src` is
     * borrowed for this call only: wait until gRPC holds none of it, even when the session
     * just broke (cancelling the call makes gRPC drop the slices). */
    if (copy) return st;
    if (st == TD_OK) st = wait_until(r, send_idle, 0);
    if (st == TD_OK) st = wait_until(r, slices_released, 1);
    if (!slices_released(r)) {
        gpr_timespec deadline = td__cli_after_ms(r->call_timeout_ms);
        while (!slices_released(r) &&
               gpr_time_cmp(gpr_now(GPR_CLOCK_MONOTONIC), deadline) < 0)
            pump(r, td__cli_after_ms(1));
    }
    return st;
}

/* Check a read's range and fill in its ReadRequest (rr, cm: the caller's storage). */
static td_status read_msg(remote *r, uint64_t id, uint64_t offset, size_t nbytes,
                          Tensord__V1__ReadRequest *rr, Tensord__V1__ClientMessage *cm)
{
    if (offset + nbytes < offset) {
        remote_errf(r, "read of tensor %llu: offset %llu + %zu bytes overflows",
                    (unsigned long long)id, (unsigned long long)offset, nbytes);
        return TD_ERANGE;
    }
    *rr = (Tensord__V1__ReadRequest)TENSORD__V1__READ_REQUEST__INIT;
    rr->tensor = id;
    rr->offset = offset;
    rr->nbytes = nbytes;
    *cm = (Tensord__V1__ClientMessage)TENSORD__V1__CLIENT_MESSAGE__INIT;
    cm->body_case = TENSORD__V1__CLIENT_MESSAGE__BODY_READ;
    cm->read = rr;
    return TD_OK;
}

static td_status remote_read(td__transport *t, uint64_t id, uint64_t offset, void *dst,
                             size_t nbytes)
{
    remote *r = (remote *)t;
    Tensord__V1__ReadRequest rr;
    Tensord__V1__ClientMessage cm;
    td_status st = check_open(r);
    if (st == TD_OK) st = read_msg(r, id, offset, nbytes, &rr, &cm);
    if (st != TD_OK) return st;
    if (r->shm.data != NULL && nbytes > 0 && nbytes >= r->shm_min_bytes) {
        uint64_t hb = host_buffer_offset(r, dst, nbytes);
        if (hb != UINT64_MAX) return shm_direct(r, true, id, offset, hb, nbytes);
        return shm_read(r, id, offset, dst, nbytes);
    }
    read_into rd = {.tensor = id, .offset = offset, .dst = dst, .nbytes = nbytes};
    r->req.read = &rd;
    if (r->ring.base != NULL && nbytes <= TD_RING_READ_MAX)
        return ring_round_trip(r, &cm, REQ_READ);
    return round_trip(r, &cm, REQ_READ);
}

static bool aread_done(const remote *r)
{
    const read_into *a = aread_of(r, r->wait_read);
    return a == NULL || a->done;
}

static td_status remote_read_start(td__transport *t, uint64_t id, uint64_t offset, void *dst,
                                   size_t nbytes, uint64_t *ticket)
{
    remote *r = (remote *)t;
    Tensord__V1__ReadRequest rr;
    Tensord__V1__ClientMessage cm;
    td_status st = check_open(r);
    if (st != TD_OK) return st;
    /* a large read goes through the region's slots (transport.h); a small one on the
     * stream, as without shared memory: it must not drain the pipeline that td_read_start
     * is for (a loss read every few steps did on same-host sessions) */
    if (r->shm.data != NULL && nbytes >= r->shm_min_bytes) return TD_EUNSUPPORTED;
    if ((st = read_msg(r, id, offset, nbytes, &rr, &cm)) != TD_OK) return st;
    read_into *a = td__calloc(1, sizeof *a);
    if (a == NULL) {
        remote_errf(r, "out of memory starting a read of tensor %llu", (unsigned long long)id);
        return TD_ENOMEM;
    }
    *a = (read_into){.seq = r->next_seq, .tensor = id, .offset = offset, .dst = dst,
                     .nbytes = nbytes};
    /* In the list before the send: a send that waits pumps, and may take its first chunks. */
    a->next = r->areads;
    r->areads = a;
    st = send_msg(r, &cm, NULL);
    if (st != TD_OK) {
        r->areads = a->next;
        td__free(a);
        return st;
    }
    r->base.stats.round_trips++;
    *ticket = a->seq;
    return TD_OK;
}

static td_status remote_read_finish(td__transport *t, uint64_t ticket)
{
    remote *r = (remote *)t;
    read_into **pp = &r->areads;
    while (*pp != NULL && (*pp)->seq != ticket) pp = &(*pp)->next;
    read_into *a = *pp;
    if (a == NULL) {
        remote_errf(r, "no read %llu is pending", (unsigned long long)ticket);
        return TD_EINVAL;
    }
    td_status st = TD_OK;
    if (!a->done) {
        st = check_open(r);
        r->wait_read = ticket;
        if (st == TD_OK) st = wait_until(r, aread_done, 0);
    }
    if (st == TD_OK && a->done) {
        st = a->st;
        if (st != TD_OK)
            snprintf(r->base.err, sizeof r->base.err, "%s",
                     a->err != NULL ? a->err : td_status_message(st));
    }
    *pp = a->next; /* the waits above add and remove no reads */
    td__free(a->err);
    td__free(a);
    return st;
}

static td_status remote_release(td__transport *t, const uint64_t *ids, size_t n)
{
    remote *r = (remote *)t;
    td_status st = check_open(r);
    for (size_t first = 0; st == TD_OK && first < n; first += REMOTE_RELEASE_IDS) {
        size_t count = n - first < REMOTE_RELEASE_IDS ? n - first : REMOTE_RELEASE_IDS;
        Tensord__V1__Release rel = TENSORD__V1__RELEASE__INIT;
        rel.n_tensors = count;
        rel.tensors = (uint64_t *)(uintptr_t)(ids + first); /* only read while packing */
        Tensord__V1__ClientMessage cm = TENSORD__V1__CLIENT_MESSAGE__INIT;
        cm.body_case = TENSORD__V1__CLIENT_MESSAGE__BODY_RELEASE;
        cm.release = &rel;
        st = ring_try_hold(r, &cm) ? TD_OK : send_msg(r, &cm, NULL);
    }
    return st;
}

/* wait_until's condition: every stream message the server had queued before the last
 * FenceDone has been received (FenceDone.stream_msgs). */
static bool stream_caught_up(const remote *r) { return r->stream_msgs >= r->fence_stream_msgs; }

static td_status remote_fence(td__transport *t)
{
    remote *r = (remote *)t;
    td_status st = check_open(r);
    if (st != TD_OK) return st;
    Tensord__V1__Fence f = TENSORD__V1__FENCE__INIT;
    Tensord__V1__ClientMessage cm = TENSORD__V1__CLIENT_MESSAGE__INIT;
    cm.body_case = TENSORD__V1__CLIENT_MESSAGE__BODY_FENCE;
    cm.fence = &f;
    st = r->ring.base != NULL ? ring_round_trip(r, &cm, REQ_FENCE) : round_trip(r, &cm, REQ_FENCE);
    /* A fence reports the failures of the requests before it, but an answer through the
     * ring may overtake the stream's replies to them: a batch's Failure, or a GPU
     * session's ShmDone or Failure, sent once its queued copy completed (server/shmdone.h;
     * the server counts it among the fence's stream_msgs). Take those in before reporting. */
    if (st == TD_OK && !stream_caught_up(r)) st = wait_until(r, stream_caught_up, 0);
    if (st != TD_OK) return st;
    st = r->base.deferred;
    if (st != TD_OK) {
        snprintf(r->base.err, sizeof r->base.err, "%s", r->base.deferred_msg);
        r->base.deferred = TD_OK;
        r->base.deferred_msg[0] = '\0';
    }
    return st;
}

/* Free everything; the call must have no operation in flight (or be cancelled). */
static void remote_teardown(remote *r)
{
    r->ending = true;
    td__cli_call_fini(&r->c);
    td__client_sec_fini(&r->sec);
    td__wire_scratch_fini(&r->scratch);
    td__shm_map_close(&r->shm); /* the server's mapping and the kernel's count keep it safe */
    td__host_heap_fini(&r->heap);
    r->ring.base = NULL;
    td__free(r->ring_held);
    td__free(r->ring_rep);
    outq_drop(r); /* never sent: the session is gone */
    while (r->areads != NULL) {
        read_into *a = r->areads;
        r->areads = a->next;
        td__free(a->err);
        td__free(a);
    }
    /* A payload slice gRPC still holds would call back into r: wait for it, and if gRPC
     * never lets go (it always does once the call is gone), leak r rather than free it. */
    bool released = slices_released(r) && pool_returned(r);
    for (int i = 0; !released && i < 5000; i++) {
        gpr_sleep_until(td__cli_after_ms(1));
        released = slices_released(r) && pool_returned(r);
    }
    if (released) {
        while (r->pool_free != NULL) {
            pool_buf *b = r->pool_free;
            r->pool_free = b->next_free;
            td__free(b);
        }
        pthread_mutex_destroy(&r->pool_mu);
        pthread_mutex_destroy(&r->mu);
        td__free(r);
    }
    grpc_shutdown();
}

static void remote_close(td__transport *t)
{
    remote *r = (remote *)t;
    if (r == NULL) return;
    for (read_into *a = r->areads; a != NULL; a = a->next) a->forgotten = true;
    td__cli_call *c = &r->c;
    if (!r->broken && c->call != NULL) {
        int wait_ms = r->call_timeout_ms < REMOTE_CLOSE_TIMEOUT_MS ? r->call_timeout_ms
                                                                    : REMOTE_CLOSE_TIMEOUT_MS;
        gpr_timespec deadline = td__cli_after_ms(wait_ms);
        while (!send_idle(r) && !c->send_failed && pump(r, deadline)) {
        }
        if (send_idle(r) && !c->send_failed) td__cli_call_half_close(c);
        /* Drain replies until the server ends the call; what they say no longer matters. */
        r->ending = true;
        while (td__cli_call_busy(c) && pump(r, deadline)) {
            if (!c->recv_pending && !c->stream_ended && !c->status_done) td__cli_call_recv(c);
        }
    }
    finish_call(r, 0, td__cli_call_busy(c));
    remote_teardown(r);
}

/* ---- graphs ---- */

/* GraphDefine round trip: a cache lookup (with_def false) or a definition. */
static td_status graph_define(remote *r, const td__graph *g, bool with_def, bool *known)
{
    td__wire_graph wg;
    Tensord__V1__GraphDefine gd = TENSORD__V1__GRAPH_DEFINE__INIT;
    gd.graph_id.len = TD_GRAPH_HASH_BYTES;
    gd.graph_id.data = (uint8_t *)(uintptr_t)g->hash; /* only read while packing */
    if (with_def) {
        if (td__wire_graph_to(g, &wg) != TD_OK) {
            remote_errf(r, "out of memory encoding a graph of %u ops", g->n_ops);
            return TD_ENOMEM;
        }
        gd.graph = &wg.msg;
    }
    Tensord__V1__ClientMessage cm = TENSORD__V1__CLIENT_MESSAGE__INIT;
    cm.body_case = TENSORD__V1__CLIENT_MESSAGE__BODY_GRAPH_DEFINE;
    cm.graph_define = &gd;
    td_status st = TD_OK;
    size_t packed = tensord__v1__client_message__get_packed_size(&cm);
    if (packed + 64 > TD_MAX_MESSAGE_BYTES) {
        remote_errf(r, "graph definition of %u ops is %zu bytes encoded; a message holds at "
                    "most %u", g->n_ops, packed, TD_MAX_MESSAGE_BYTES);
        st = TD_EINVAL;
    }
    r->graph_known = false;
    if (st == TD_OK) st = round_trip(r, &cm, REQ_GRAPH);
    if (with_def) td__wire_graph_fini(&wg);
    if (st == TD_OK) *known = r->graph_known;
    return st;
}

static td_status remote_graph_prepare(td__transport *t, const td__graph *g,
                                      uint64_t *defines_sent)
{
    remote *r = (remote *)t;
    td_status st = check_open(r);
    if (st != TD_OK) return st;
    bool known = false;
    st = graph_define(r, g, false, &known);
    if (st != TD_OK || known) return st;
    /* The server lacks it (never seen, evicted, restarted): send the definition once. */
    st = graph_define(r, g, true, &known);
    if (st == TD_OK) (*defines_sent)++;
    if (st == TD_OK && !known) {
        remote_errf(r, "tensord at %s did not accept the graph definition", r->target);
        st = TD_EPROTO;
    }
    return st;
}

static td_status remote_graph_run(td__transport *t, const td__graph *g, const uint64_t *in_ids,
                                  size_t n_in, const uint64_t *out_ids, size_t n_out)
{
    remote *r = (remote *)t;
    td_status st = check_open(r);
    if (st != TD_OK) return st;
    if ((st = poll_ready(r)) != TD_OK) return st;
    Tensord__V1__GraphRun gr = TENSORD__V1__GRAPH_RUN__INIT;
    gr.graph_id.len = TD_GRAPH_HASH_BYTES;
    gr.graph_id.data = (uint8_t *)(uintptr_t)g->hash; /* only read while packing */
    gr.n_inputs = n_in;
    gr.inputs = (uint64_t *)(uintptr_t)in_ids;
    gr.n_outputs = n_out;
    gr.outputs = (uint64_t *)(uintptr_t)out_ids;
    Tensord__V1__ClientMessage cm = TENSORD__V1__CLIENT_MESSAGE__INIT;
    cm.body_case = TENSORD__V1__CLIENT_MESSAGE__BODY_GRAPH_RUN;
    cm.graph_run = &gr;
    st = send_msg(r, &cm, NULL);
    if (st == TD_OK) r->base.stats.batches_sent++;
    return st;
}

static void remote_graph_release(td__transport *t, const td__graph *g)
{
    remote *r = (remote *)t;
    if (check_open(r) != TD_OK || r->opened_protocol < TD_PROTOCOL_GRAPH_RELEASE) return;
    if (poll_ready(r) != TD_OK) return;
    Tensord__V1__GraphRelease gr = TENSORD__V1__GRAPH_RELEASE__INIT;
    gr.graph_id.len = TD_GRAPH_HASH_BYTES;
    gr.graph_id.data = (uint8_t *)(uintptr_t)g->hash; /* only read while packing */
    Tensord__V1__ClientMessage cm = TENSORD__V1__CLIENT_MESSAGE__INIT;
    cm.body_case = TENSORD__V1__CLIENT_MESSAGE__BODY_GRAPH_RELEASE;
    cm.graph_release = &gr;
    (void)send_msg(r, &cm, NULL); /* a failure closes the session; the next call says so */
}

static td_status remote_to_device(td__transport *t, uint64_t id, uint64_t out, uint32_t device)
{
    remote *r = (remote *)t;
    td_status st = check_open(r);
    if (st != TD_OK) return st;
    Tensord__V1__ToDevice td = TENSORD__V1__TO_DEVICE__INIT;
    td.tensor = id;
    td.output = out;
    td.device = device;
    Tensord__V1__ClientMessage cm = TENSORD__V1__CLIENT_MESSAGE__INIT;
    cm.body_case = TENSORD__V1__CLIENT_MESSAGE__BODY_TO_DEVICE;
    cm.to_device = &td;
    return send_msg(r, &cm, NULL);
}

/* ---- the transport lock and background sends ---- */

/* Take the transport lock. When the flusher thread holds it, it is usually waiting in the
 * completion queue (gRPC's poller rounds a wait up to whole milliseconds): post an event
 * there so that drive sees `want` at once. gRPC has no public way to wake a queue; a
 * connectivity watch for a state the channel is not in completes immediately (its tag is
 * ignored by the pump). */
static void tp_lock(remote *r)
{
    if (pthread_mutex_trylock(&r->mu) == 0) return;
    atomic_fetch_add_explicit(&r->want, 1, memory_order_relaxed);
    if (r->c.ch != NULL)
        grpc_channel_watch_connectivity_state(r->c.ch, GRPC_CHANNEL_SHUTDOWN,
                                              gpr_inf_past(GPR_CLOCK_MONOTONIC), r->c.cq,
                                              NULL);
    pthread_mutex_lock(&r->mu);
    atomic_fetch_sub_explicit(&r->want, 1, memory_order_relaxed);
}

/* Unlock after a table function (the user thread): tell the context whether the flusher
 * should drive queued sends. */
static void tp_unlock(remote *r)
{
    atomic_store_explicit(&r->base.sends_queued, !r->broken && !send_idle(r),
                          memory_order_relaxed);
    pthread_mutex_unlock(&r->mu);
}

/* vt->drive (the flusher thread): pump while messages are queued, for at most
 * REMOTE_DRIVE_US, each wait at most REMOTE_DRIVE_PUMP_US so that a user thread asking for
 * the lock gets it soon; failures are left for the user thread's next call to find. */
static bool remote_drive(td__transport *t)
{
    remote *r = (remote *)t;
    pthread_mutex_lock(&r->mu);
    gpr_timespec end = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                    gpr_time_from_micros(REMOTE_DRIVE_US, GPR_TIMESPAN));
    bool more;
    for (;;) {
        more = !r->broken && r->violation == TD_OK && !stream_broken(r) && !send_idle(r);
        if (!more || atomic_load_explicit(&r->want, memory_order_relaxed) > 0) break;
        gpr_timespec now = gpr_now(GPR_CLOCK_MONOTONIC);
        if (gpr_time_cmp(now, end) >= 0) break;
        gpr_timespec step =
            gpr_time_add(now, gpr_time_from_micros(REMOTE_DRIVE_PUMP_US, GPR_TIMESPAN));
        pump(r, gpr_time_cmp(step, end) < 0 ? step : end);
    }
    pthread_mutex_unlock(&r->mu);
    return more;
}

/* The table: each function under the transport lock. */
#define LOCKED(ret, name, params, args)                                                   \
    static ret name##_locked params                                                       \
    {                                                                                     \
        remote *r = (remote *)t;                                                          \
        tp_lock(r);                                                                       \
        ret v = name args;                                                                \
        tp_unlock(r);                                                                     \
        return v;                                                                         \
    }
LOCKED(td_status, remote_submit, (td__transport *t, const td__op *ops, size_t n), (t, ops, n))
LOCKED(td_status, remote_write,
       (td__transport *t, uint64_t id, uint64_t offset, const void *src, size_t nbytes),
       (t, id, offset, src, nbytes))
LOCKED(td_status, remote_read,
       (td__transport *t, uint64_t id, uint64_t offset, void *dst, size_t nbytes),
       (t, id, offset, dst, nbytes))
LOCKED(td_status, remote_read_start,
       (td__transport *t, uint64_t id, uint64_t offset, void *dst, size_t nbytes,
        uint64_t *ticket),
       (t, id, offset, dst, nbytes, ticket))
LOCKED(td_status, remote_read_finish, (td__transport *t, uint64_t ticket), (t, ticket))
LOCKED(td_status, remote_release, (td__transport *t, const uint64_t *ids, size_t n),
       (t, ids, n))
LOCKED(td_status, remote_fence, (td__transport *t), (t))
LOCKED(td_status, remote_graph_prepare,
       (td__transport *t, const td__graph *g, uint64_t *defines_sent), (t, g, defines_sent))
LOCKED(td_status, remote_graph_run,
       (td__transport *t, const td__graph *g, const uint64_t *in_ids, size_t n_in,
        const uint64_t *out_ids, size_t n_out),
       (t, g, in_ids, n_in, out_ids, n_out))
LOCKED(td_status, remote_blob_has, (td__transport *t, const uint8_t *hash, bool *present),
       (t, hash, present))
LOCKED(td_status, remote_blob_write, (td__transport *t, uint64_t id, const uint8_t *hash),
       (t, id, hash))
LOCKED(td_status, remote_blob_store, (td__transport *t, uint64_t id, const uint8_t *hash),
       (t, id, hash))
LOCKED(td_status, remote_blob_has_fingerprint,
       (td__transport *t, const uint8_t *fp, bool *present, const td__wait_work *work),
       (t, fp, present, work))
LOCKED(td_status, remote_blob_candidate, (td__transport *t, uint64_t id, const uint8_t *fp),
       (t, id, fp))
LOCKED(td_status, remote_to_device, (td__transport *t, uint64_t id, uint64_t out, uint32_t dev),
       (t, id, out, dev))
#undef LOCKED

static void remote_graph_release_locked(td__transport *t, const td__graph *g)
{
    remote *r = (remote *)t;
    tp_lock(r);
    remote_graph_release(t, g);
    tp_unlock(r);
}

/* close runs after the flusher thread has stopped (td_close), host_alloc and host_free
 * touch only the region's heap: no lock. */
static const td__transport_vt remote_vt = {
    .submit = remote_submit_locked,
    .write = remote_write_locked,
    .read = remote_read_locked,
    .read_start = remote_read_start_locked,
    .read_finish = remote_read_finish_locked,
    .release = remote_release_locked,
    .fence = remote_fence_locked,
    .close = remote_close,
    .graph_prepare = remote_graph_prepare_locked,
    .graph_run = remote_graph_run_locked,
    .graph_release = remote_graph_release_locked,
    .blob_has = remote_blob_has_locked,
    .blob_write = remote_blob_write_locked,
    .blob_store = remote_blob_store_locked,
    .blob_has_fingerprint = remote_blob_has_fingerprint_locked,
    .blob_candidate = remote_blob_candidate_locked,
    .to_device = remote_to_device_locked,
    .host_alloc = remote_host_alloc,
    .host_free = remote_host_free,
    .drive = remote_drive,
};

/* Take the region SessionOpened offered. Any failure leaves the session on the stream,
 * with one debug line (TENSORD_LOG_LEVEL=debug) saying why. */
static void shm_attach(remote *r, int timeout_ms, bool want_ring)
{
    char why[512] = "";
    if (!r->shm_offer.offered) {
        if (r->shm_offer.refused[0] != '\0')
            snprintf(why, sizeof why, "the server refused this session a region: %s",
                     r->shm_offer.refused);
        else
            snprintf(why, sizeof why, "the server offers none on this socket");
    } else {
        /* A side socket busy with other handshakes says "try again": a few short retries
         * (20, 40, 80 ms) before settling for the stream. */
        td_status st = TD_EUNAVAILABLE;
        for (int attempt = 0; attempt < 4; attempt++) {
            if (attempt > 0) usleep((useconds_t)(10000u << attempt));
            st = td__shm_map_open(r->shm_offer.path, r->opened_session_id, r->shm_offer.secret,
                                  r->shm_offer.bytes, timeout_ms, &r->shm, why, sizeof why);
            if (st != TD_EUNAVAILABLE || strstr(why, "try again") == NULL) break;
        }
        uint64_t usable = r->shm.size;
        /* A ring the server keeps is off limits to slots and host buffers even when this
         * side does not take it up (an allocation failure below). */
        if (r->shm_offer.ring_bytes != 0 && r->shm_offer.ring_offset < usable)
            usable = r->shm_offer.ring_offset;
        if (st == TD_OK && r->shm_offer.ring_bytes != 0 && want_ring) {
            /* The ring is the region's last TD_RING_BYTES; the slots stay in front of it. */
            char rwhy[256];
            r->ring_held = td__malloc(TD_RING_REQ_BYTES);
            r->ring_rep = td__malloc(TD_RING_REP_BYTES);
            if (r->ring_held == NULL || r->ring_rep == NULL) {
                snprintf(rwhy, sizeof rwhy, "out of memory");
            } else if (td__ring_cli_init(&r->ring, r->shm.data, r->shm.size,
                                         r->shm_offer.ring_offset, r->shm_offer.ring_bytes,
                                         rwhy, sizeof rwhy) == TD_OK) {
                usable = r->shm_offer.ring_offset;
            }
            if (r->ring.base == NULL)
                td__log(TD_LOG_DEBUG, "session on %s: no request ring (%s)", r->target, rwhy);
        }
        if (st == TD_OK) {
            /* Slots of whole pages, so that each copy starts page-aligned; host buffers
             * after them. */
            uint64_t area = usable < REMOTE_SHM_SLOT_AREA ? usable : REMOTE_SHM_SLOT_AREA;
            size_t n = (size_t)(area / REMOTE_SHM_SLOT_MIN);
            r->shm_nslots = n < 2 ? 2 : n > REMOTE_SHM_SLOTS ? REMOTE_SHM_SLOTS : (int)n;
            r->shm_slot_bytes = (size_t)(area / (uint64_t)r->shm_nslots) & ~(size_t)4095;
            uint64_t heap_start = (uint64_t)r->shm_nslots * r->shm_slot_bytes;
            if (!td__host_heap_init(&r->heap, heap_start, usable - heap_start, 4096))
                td__log(TD_LOG_DEBUG, "session on %s: no room for host buffers", r->target);
            r->base.transport = r->ring.base != NULL ? "shm+ring" : "shm";
            /* The blob offer saves wire bytes; here the "wire" is a memcpy, faster than the
             * SHA-256 a repeat costs on both ends, and on a GPU session every fresh upload
             * would make the server keep a host copy as a candidate (BENCHMARKS.md
             * 2026-12-06 11:35: 36 GB/s uploads fell to 0.5). So off unless asked for. */
            if (r->blob_min_default) r->base.blob_min_bytes = SIZE_MAX;
        }
    }
    memset(r->shm_offer.secret, 0, sizeof r->shm_offer.secret);
    if (r->shm.data != NULL) return;
    const char *lvl = getenv("TENSORD_LOG_LEVEL");
    if (lvl != NULL && strcmp(lvl, "debug") == 0) {
        td__log_set_level(TD_LOG_DEBUG);
        td__log_set_prefix("libtensord");
        td__log(TD_LOG_DEBUG, "session on %s: no shared memory (%s); using the stream",
                r->target, why);
    }
}

td_status td__remote_open(const char *target, const char *device, const td_options *opts,
                          td__transport **out, char *err, size_t errlen)
{
    return td__remote_open_member(target, device, opts, out, NULL, err, errlen);
}

td_status td__remote_open_member(const char *target, const char *device,
                                 const td_options *opts, td__transport **out,
                                 bool *device_denied, char *err, size_t errlen)
{
    if (device_denied != NULL) *device_denied = false;
    if (target == NULL || target[0] == '\0' || strlen(target) >= sizeof(((remote *)0)->target)) {
        snprintf(err, errlen, "invalid server address '%s'", target != NULL ? target : "");
        return TD_EINVAL;
    }
    if (device == NULL) device = "";
    /* "cpu:0,cpu:1": the session's first device, then the further ones (protocol 4) */
    char first[64], more[TD_TRANSPORT_MAX_DEVICES - 1][32];
    char *more_p[TD_TRANSPORT_MAX_DEVICES - 1];
    int n_more = td__device_list_split(device, first, more, err, errlen);
    if (n_more < 0) return TD_EINVAL;
    for (int i = 0; i < n_more; i++) more_p[i] = more[i];
    device = first;
    int connect_ms = opts != NULL && opts->connect_timeout_ms > 0 ? opts->connect_timeout_ms
                                                                  : REMOTE_CONNECT_TIMEOUT_MS;
    int call_ms = opts != NULL && opts->call_timeout_ms > 0 ? opts->call_timeout_ms
                                                            : REMOTE_CALL_TIMEOUT_MS;
    const char *client_name =
        opts != NULL && opts->client_name != NULL ? opts->client_name : "libtensord";
    size_t blob_min = opts != NULL && opts->blob_min_bytes > 0 ? opts->blob_min_bytes
                                                               : TD_BLOB_MIN_BYTES_DEFAULT;

    /* Background sends trade a memcpy and the flusher's pumping for overlap: worth it with
     * cores to spare, a loss on a 2-core host, where the copy competes with the program
     * and a same-host server (P5 b4096 on the 2-core VM: 15 % slower with them;
     * BENCHMARKS.md 2026-12-07). */
    cpu_set_t cpus;
    int ncpu = sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
    size_t async_write_max = ncpu >= REMOTE_ASYNC_MIN_CPUS ? REMOTE_ASYNC_WRITE_MAX : 0;
    /* TENSORD_WRITE_COPY_MAX=N (README, "Configuration"): writes of at most N bytes are
     * copied and sent in the background; 0 makes every write wait until it is sent. */
    const char *env_copy = getenv("TENSORD_WRITE_COPY_MAX");
    if (env_copy != NULL && env_copy[0] != '\0') {
        /* Digits only: strtoull alone takes blanks and a sign (" -1" wraps around) and
         * saturates past 2^64 with only errno to say so. */
        char *end = NULL;
        errno = 0;
        unsigned long long v = strtoull(env_copy, &end, 10);
        if (*end != '\0' || env_copy[strspn(env_copy, "0123456789")] != '\0' ||
            errno == ERANGE) {
            snprintf(err, errlen, "TENSORD_WRITE_COPY_MAX=%.32s: expected a byte count (0 "
                     "turns background sends off)", env_copy);
            return TD_EINVAL;
        }
        async_write_max = v > SIZE_MAX ? SIZE_MAX : (size_t)v;
    }
    remote *r = td__calloc(1, sizeof *r);
    if (r == NULL) {
        snprintf(err, errlen, "out of memory opening a session to %s", target);
        return TD_ENOMEM;
    }
    grpc_init();
    r->base.vt = &remote_vt;
    r->base.deferred = TD_OK;
    snprintf(r->target, sizeof r->target, "%s", target);
    r->call_timeout_ms = call_ms;
    r->base.blob_min_bytes = blob_min;
    r->blob_min_default = opts == NULL || opts->blob_min_bytes == 0;
    r->next_seq = 1;
    atomic_init(&r->slices_released, 0);
    atomic_init(&r->pool_returned, 0);
    atomic_init(&r->want, 0);
    pthread_mutex_init(&r->mu, NULL);
    pthread_mutex_init(&r->pool_mu, NULL);
    r->async_write_max = async_write_max;
    td__cli_call_init(&r->c);

    td_status st = td__client_sec_init(&r->sec, false, opts, err, errlen);
    if (st == TD_OK) st = td__cli_channel_open(&r->c, target, &r->sec, 0, connect_ms, err, errlen);
    if (st != TD_OK) {
        remote_teardown(r);
        return st;
    }
    if (td__cli_call_start(&r->c, TD_METHOD_SESSION, gpr_inf_future(GPR_CLOCK_REALTIME)) !=
        TD_OK) {
        snprintf(err, errlen, "cannot start a session call to %s", target);
        remote_teardown(r);
        return TD_EINTERNAL;
    }
    td__cli_call_recv(&r->c);

    Tensord__V1__OpenSession os = TENSORD__V1__OPEN_SESSION__INIT;
    os.protocol_min = TD_PROTOCOL_MIN;
    os.protocol_max = TD_PROTOCOL_MAX;
    /* TENSORD_PROTOCOL_MAX=N (README, "Configuration"): offer at most protocol N, so a
     * client behaves as against an older server (a pool being upgraded; tests) */
    const char *env_pmax = getenv("TENSORD_PROTOCOL_MAX");
    if (env_pmax != NULL && env_pmax[0] != '\0') {
        char *end = NULL;
        long v = strtol(env_pmax, &end, 10);
        if (*end != '\0' || v < TD_PROTOCOL_MIN || v > TD_PROTOCOL_MAX) {
            snprintf(err, errlen, "TENSORD_PROTOCOL_MAX=%.32s: expected a protocol %d..%d",
                     env_pmax, TD_PROTOCOL_MIN, TD_PROTOCOL_MAX);
            remote_teardown(r);
            return TD_EINVAL;
        }
        os.protocol_max = (uint32_t)v;
    }
    os.device = (char *)(uintptr_t)device; /* only read while packing */
    os.n_devices = (size_t)n_more;
    os.devices = more_p;
    os.client_name = (char *)(uintptr_t)client_name;
    /* Shared memory only makes sense on the server's own host: a unix socket says so. */
    const char *env_no_shm = getenv("TENSORD_NO_SHM");
    bool no_shm = (opts != NULL && opts->no_shm) ||
                  (env_no_shm != NULL && env_no_shm[0] != '\0' && strcmp(env_no_shm, "0") != 0);
    os.shm = strncmp(target, "unix:", 5) == 0 && !no_shm;
    const char *env_no_ring = getenv("TENSORD_NO_RING");
    bool no_ring = (opts != NULL && opts->no_ring) ||
                   (env_no_ring != NULL && env_no_ring[0] != '\0' && strcmp(env_no_ring, "0") != 0);
    os.ring = os.shm && !no_ring;
    /* A region that holds the asked-for host buffers past the slots and the ring. */
    if (os.shm && opts != NULL && opts->shm_host_bytes > 0) {
        uint64_t want = (uint64_t)opts->shm_host_bytes + REMOTE_SHM_SLOT_AREA + TD_RING_BYTES;
        os.shm_bytes = want < opts->shm_host_bytes ? UINT64_MAX : want;
    }
    Tensord__V1__ClientMessage cm = TENSORD__V1__CLIENT_MESSAGE__INIT;
    cm.body_case = TENSORD__V1__CLIENT_MESSAGE__BODY_OPEN;
    cm.open = &os;
    r->opening = true;
    st = round_trip(r, &cm, REQ_OPEN);
    if (st == TD_OK &&
        (r->opened_protocol < TD_PROTOCOL_MIN || r->opened_protocol > TD_PROTOCOL_MAX)) {
        remote_errf(r, "tensord at %s chose protocol %u, this client speaks %d..%d", target,
                    r->opened_protocol, TD_PROTOCOL_MIN, TD_PROTOCOL_MAX);
        st = TD_EPROTO;
    }
    if (st == TD_OK && n_more > 0 && r->n_opened_devices != (uint32_t)n_more + 1) {
        remote_errf(r, "tensord at %s (protocol %u) did not open devices %s%s%s: sessions that "
                    "span devices need protocol %d and a server that knows them",
                    target, r->opened_protocol, more[0], n_more > 1 ? ", " : "",
                    n_more > 1 ? more[1] : "", TD_PROTOCOL_DEVICES);
        st = TD_EUNSUPPORTED;
    }
    r->opening = false;
    if (st != TD_OK) {
        snprintf(err, errlen, "%s", r->base.err);
        if (device_denied != NULL) *device_denied = r->device_denied;
        if (!r->broken) finish_call(r, 0, true);
        remote_teardown(r);
        return st;
    }
    snprintf(r->base.device, sizeof r->base.device, "%.31s",
             r->opened_device[0] != '\0' ? r->opened_device : device);
    memcpy(r->base.devices[0], r->base.device, sizeof r->base.devices[0]);
    r->base.n_devices = 1;
    for (uint32_t i = 1; i < r->n_opened_devices; i++) {
        memcpy(r->base.devices[i], r->opened_devices[i], sizeof r->base.devices[i]);
        r->base.n_devices = i + 1;
    }
    snprintf(r->base.server, sizeof r->base.server, "%s", target);
    r->base.blob_fingerprints = r->opened_protocol >= TD_PROTOCOL_FINGERPRINTS;
    r->base.no_attention_op = r->opened_protocol < TD_PROTOCOL_ATTENTION;
    r->base.transport = "grpc";
    r->shm_min_bytes = opts != NULL && opts->shm_min_bytes > 0 ? opts->shm_min_bytes
                                                               : TD_SHM_MIN_BYTES_DEFAULT;
    if (os.shm) shm_attach(r, connect_ms, os.ring);
    r->base.err[0] = '\0';
    *out = &r->base;
    return TD_OK;
}

/* handlers.c — what a server session's requests do, on the device worker: open, batches,
 * writes, reads, releases, fences, graph runs and failures, each on a plain td__request,
 * each answering with plain td__reply structs (server/request.h encodes them).
 *
 * Jobs run in submission order on the session's worker queue, so the engine session has
 * one user at a time. Every reply after open goes through the worker queue, failures
 * included, so the client sees replies in the order of its requests.
 *
 * Time slices (engine/worker.h): a batch or a graph run executes for at most
 * TD_WORKER_SLICE_NS per turn and sets j->continued when ops are left; the session then
 * queues the job again at the head of its queue (server/session.c, job_main), so a big
 * batch shares the device with other sessions without changing this session's order.
 *
 * Tensor bytes: a write's payload is copied once, from gRPC's slices (or the decode
 * scratch) straight into the tensor's buffer. Reads on host-memory devices send slices
 * over the tensor buffer itself, each holding a buffer reference.
 */
#include "server/session_int.h"

#include "common/alloc.h"
#include "common/log.h"
#include "common/par_copy.h"
#include "engine/tensor.h"
#include "server/candidates.h"
#include "server/metrics.h"
#include "server/ring.h"
#include "server/shm.h"
#include "server/shmdone.h"
#include "engine/optable.h"
#include "wire_limits.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

static void run_open(td__srv_session *ss, td__job *j)
{
    td__session_limits lim = {.max_bytes = td__service_max_session_bytes(ss->svc),
                              .quota = ss->quota};
    td__session *es;
    td__device *dev = j->rq.dev;
    /* Shared memory, when asked for and offered on this listener: the region counts against
     * the session's byte limit (the engine session gets what is left) and the tenant's
     * max_bytes, like tensor bytes. Without it (a limit below the region, quota, memory)
     * the session opens anyway and the client uses the stream: the answer lacks the offer
     * and the log says why. */
    uint8_t secret[TD_SHM_SECRET_BYTES];
    td__shm *shm = td__service_shm(ss->svc);
    const char *shm_note = "";
    char shm_refused[256] = "";
    td_status st;
    if (j->rq.shm && shm != NULL) {
        char err[256];
        uint64_t size = td__shm_grant(shm, j->rq.shm_bytes);
        if (lim.max_bytes != 0 && lim.max_bytes <= size) {
            snprintf(err, sizeof err, "the session's byte limit (%llu) is not above the "
                     "region's %llu bytes", (unsigned long long)lim.max_bytes,
                     (unsigned long long)size);
            st = TD_EQUOTA;
        } else {
            st = td__shm_region_create(shm, size, ss->c.id, ss->quota, &ss->shm, secret, err,
                                       sizeof err);
        }
        if (st != TD_OK) {
            td__log(TD_LOG_INFO, "session %llu: no shared-memory region: %s",
                    (unsigned long long)ss->c.id, err);
            snprintf(shm_refused, sizeof shm_refused, "%s", err);
        } else {
            shm_note = ", shared memory";
            if (lim.max_bytes != 0) lim.max_bytes -= td__shm_region_size(ss->shm);
        }
    }
    st = td__session_create(dev, &lim, &es);
    if (st != TD_OK) {
        td__shm_region_destroy(ss->shm);
        ss->shm = NULL;
        td__ss_unreserve(ss);
        td__log(TD_LOG_WARN, "session %llu: cannot open on %s: %s",
                (unsigned long long)ss->c.id, dev->name, td_status_message(st));
        td__srv_call_finish(&ss->c, td__grpc_code(st), "cannot open a session on %s: %s",
                            dev->name, td_status_message(st));
        return;
    }
    const char *names[TD_SESSION_MAX_DEVICES] = {dev->name};
    char more[160] = "";
    size_t ml = 0;
    for (size_t i = 0; i < j->rq.n_extra; i++) {
        uint32_t index;
        char err[256];
        td__device *x = j->rq.extra[i];
        st = td__session_add_device(es, x, &index, err, sizeof err);
        if (st != TD_OK) {
            td__session_destroy(es);
            td__shm_region_destroy(ss->shm);
            ss->shm = NULL;
            td__ss_unreserve(ss);
            td__log(TD_LOG_WARN, "session %llu: cannot open: %s", (unsigned long long)ss->c.id,
                    err);
            td__srv_call_finish(&ss->c, td__grpc_code(st), "cannot open a session on %s: %s",
                                dev->name, err);
            return;
        }
        names[index] = x->name;
        if (ml < sizeof more)
            ml += (size_t)snprintf(more + ml, sizeof more - ml, "%s%s", ml ? ", " : " and ",
                                   x->name);
    }
    ss->es = es;
    /* The request ring, when asked for and not off (--no-ring): the region's last
     * TD_RING_BYTES (ring.h). Without
     * it (no memory, no thread) the session goes on with the region and the stream. */
    uint64_t ring_offset = 0, ring_bytes = 0;
    if (j->rq.ring && ss->shm != NULL && td__service_ring(ss->svc) &&
        td__shm_region_size(ss->shm) > TD_RING_BYTES) {
        char err[256];
        td__ring *ring = NULL;
        ring_offset = td__shm_region_size(ss->shm) - TD_RING_BYTES;
        if (td__ring_start(ss, td__shm_region_data(ss->shm) + ring_offset, &ring, err,
                           sizeof err) == TD_OK) {
            atomic_store(&ss->ring, ring);
            ring_bytes = TD_RING_BYTES;
            shm_note = ", shared memory and request ring";
        } else {
            ring_offset = 0;
            td__log(TD_LOG_INFO, "session %llu: no request ring: %s",
                    (unsigned long long)ss->c.id, err);
        }
    }
    td__log(TD_LOG_INFO,
            "session %llu opened on %s%s by '%s' at %s, tenant '%s' (protocol %u%s)",
            (unsigned long long)ss->c.id, dev->name, more, ss->client, ss->peer, ss->tenant,
            j->rq.protocol, shm_note);
    td__reply r = {.kind = TD_REPLY_OPENED, .seq = j->rq.seq, .protocol = j->rq.protocol,
                   .device = dev->name, .session_id = ss->c.id,
                   .devices = j->rq.n_extra > 0 ? names : NULL,
                   .n_devices = j->rq.n_extra > 0 ? 1 + j->rq.n_extra : 0};
    if (shm_refused[0] != '\0') r.shm_refused = shm_refused;
    if (ss->shm != NULL) {
        r.shm_path = td__shm_path(shm);
        r.shm_secret = secret;
        r.shm_bytes = td__shm_region_size(ss->shm);
        r.ring_offset = ring_offset;
        r.ring_bytes = ring_bytes;
    }
    /* With pend_mu held (session.c, answer_fresh_offer): `opened` is set before any
     * message that follows SessionOpened can look at it. */
    pthread_mutex_lock(&ss->pend_mu);
    td__ss_reply_or_end(ss, &r);
    atomic_store(&ss->opened, true);
    pthread_mutex_unlock(&ss->pend_mu);
    memset(secret, 0, sizeof secret);
}

/* Failure replies one batch or graph run may produce: a client that never reads could
 * otherwise make each received batch of 65,536 failing ops hold 65,536 replies (~30 MB) in
 * the server (breaker finding). Every failed op's output is poisoned with its own message
 * whatever is sent, so reads still say what went wrong. */
#define TD_MAX_FAILURES_PER_BATCH 16

void td__handle_op_failure(void *arg, uint32_t op_index, td_status status, const char *message)
{
    td__job *j = arg;
    const td__request *rq = &j->rq;
    if (j->failures_sent > TD_MAX_FAILURES_PER_BATCH) return;
    if (j->failures_sent++ == TD_MAX_FAILURES_PER_BATCH) {
        char m[256];
        snprintf(m, sizeof m,
                 "op %u and later ops of this batch failed too; only the first %d failures "
                 "of a batch are reported (each failed op's output holds its own reason)",
                 op_index, TD_MAX_FAILURES_PER_BATCH);
        td__ss_failure(j->ss, rq->seq, op_index, status, m);
        return;
    }
    /* The op: of the batch, or of the graph being run (graph op indexes). */
    const char *name = NULL;
    if (j->graph != NULL || j->rq.kind == TD_REQ_GRAPH_RUN) {
        if (j->graph != NULL && op_index < j->graph->n_ops)
            name = td__op_name(j->graph->ops[op_index].opcode);
    } else if (op_index < rq->n_ops) {
        name = td__op_name(rq->ops[op_index].opcode);
    }
    if (rq->op_errs != NULL && op_index < rq->n_ops && rq->op_errs[op_index] != NULL)
        /* an op refused at decoding: its slot holds a placeholder opcode, and the message
         * already names the op ("op 0 (sort): 9 inputs, ...") */
        td__ss_failure_op(j->ss, rq->seq, op_index, NULL, TD_EPROTO, rq->op_errs[op_index]);
    else
        td__ss_failure_op(j->ss, rq->seq, op_index, name, status, message);
}

/* One op at a time through the engine's resumable executor, so that each op's worker time
 * is measured (tensord_op_duration_seconds): the slice budget is shared across the ops as
 * td__session_exec_slice would share it. A split op (a big CPU matmul run in pieces) may
 * stay pending across slices; its pieces' times add up in j->split_ns. */
static void run_batch(td__srv_session *ss, td__job *j)
{
    uint64_t start = td__metrics_now_ns();
    size_t i = j->next_op, n = j->rq.n_ops;
    while (i < n) {
        uint64_t t0 = td__metrics_now_ns();
        uint64_t used = t0 - start;
        uint64_t budget = used < TD_WORKER_SLICE_NS ? TD_WORKER_SLICE_NS - used : 1;
        size_t next = td__session_exec_slice(ss->es, j->rq.ops, i, i + 1, budget, false,
                                             td__handle_op_failure, j, NULL);
        uint64_t t1 = td__metrics_now_ns();
        if (next == i) { /* a split op with pieces left: resume it next turn */
            j->split_ns += t1 - t0;
            break;
        }
        td__metrics_op(j->slot, j->rq.ops[i].opcode, j->split_ns + (t1 - t0));
        j->split_ns = 0;
        ss->ops_run++;
        i = next;
        if (t1 - start >= TD_WORKER_SLICE_NS) break;
    }
    j->next_op = i;
    j->continued = j->next_op < n;
}

/* The payload is copied once: from gRPC's slices (or the decode scratch, for small or
 * unusually laid out messages) straight into the tensor's buffer. */
/* td__session_write_fill's source: bytes [off, off + len) of a WriteChunk's payload. */
static td_status fill_payload(void *arg, size_t off, void *to, size_t len)
{
    return td__request_payload_copy_range(arg, off, len, to);
}

static void run_write(td__srv_session *ss, td__job *j)
{
    const td__request *rq = &j->rq;
    char err[512];
    size_t n = rq->nbytes;
    void *dst = NULL;
    /* A candidate of the tensor's old bytes (server/candidates.h) would make this write copy
     * the buffer first (copy-on-write) and keep the old one out of the pool; the bytes are
     * being replaced, so drop the candidate instead and write in place. */
    td__desc desc;
    td__buffer *buf = NULL;
    if (td__session_lookup(ss->es, rq->tensor, &desc, &buf, err, sizeof err) == TD_OK &&
        buf != NULL && atomic_load(&buf->refs) > 2)
        td__candidates_forget(buf);
    td__buffer_unref(buf);
    td_status st = td__session_write_ptr(ss->es, rq->tensor, rq->offset, n, &dst, err,
                                         sizeof err);
    if (st == TD_OK && n > 0) {
        const void *flat = td__request_payload_flat(rq);
        if (dst != NULL) {
            st = td__request_payload_copy(rq, dst);
        } else if (flat != NULL) {
            st = td__session_write(ss->es, rq->tensor, rq->offset, flat, n, err, sizeof err);
        } else {
            /* in slices: copied once, to where the device wants them (GPU: pinned staging) */
            st = td__session_write_fill(ss->es, rq->tensor, rq->offset, n, fill_payload,
                                        (void *)rq, err, sizeof err);
        }
        if (st == TD_ENOMEM || st == TD_EPROTO)
            snprintf(err, sizeof err, "write seq %llu to tensor %llu: %s",
                     (unsigned long long)rq->seq, (unsigned long long)rq->tensor,
                     st == TD_ENOMEM ? "out of host memory" : "unreadable payload");
    }
    if (st != TD_OK) td__ss_failure(ss, rq->seq, 0, st, err);
}

/* The region range of a ShmWrite/ShmRead, checked like any wire input: the session must
 * have a region and [region_offset, +nbytes) must lie inside it. */
static td_status shm_check(td__srv_session *ss, const td__request *rq, char *err, size_t errlen)
{
    const char *what = rq->kind == TD_REQ_SHM_WRITE ? "shm write" : "shm read";
    if (ss->shm == NULL) {
        snprintf(err, errlen, "%s seq %llu: this session has no shared-memory region (ask for "
                 "one in the open, on a unix socket)", what, (unsigned long long)rq->seq);
        return TD_EPROTO;
    }
    char w[64];
    snprintf(w, sizeof w, "%s seq %llu", what, (unsigned long long)rq->seq);
    return td__shm_region_check(ss->shm, rq->region_offset, rq->nbytes, w, err, errlen);
}

/* Transfers below this do not pin the region (a few small ones would not repay it). */
#define SHM_PIN_MIN ((uint64_t)1 << 20)

/* The first ShmWrite/ShmRead of at least SHM_PIN_MIN bytes pins the whole region for the
 * session's GPU (td__session_host_pin; nothing for a CPU session), so that this and every
 * later transfer between the region and device memory is one DMA instead of a copy through
 * the backend's staging buffers. Not done at the open: pinning costs time (page-locking
 * every page) that sessions which never move much should not pay. Unpinned in
 * queue_closed (session.c) before the engine session goes. */
static void shm_pin(td__srv_session *ss, uint64_t nbytes)
{
    if (ss->shm_pin_tried || nbytes < SHM_PIN_MIN) return;
    ss->shm_pin_tried = true;
    ss->shm_pinned = td__session_host_pin(ss->es, td__shm_region_data(ss->shm),
                                          (size_t)td__shm_region_size(ss->shm));
    if (ss->shm_pinned != 0)
        td__log(TD_LOG_DEBUG, "session %llu: shared-memory region pinned for its device",
                (unsigned long long)ss->c.id);
}

/* ShmWrite: region -> tensor, one copy (straight into a host buffer, else the backend's
 * write from the region). The tensor's range is checked by the engine as for WriteChunk.
 * A device copy the backend could queue from the pinned region is answered by the
 * session's shmdone thread once its fence has finished (shmdone.h says why), not here. */
static void run_shm_write(td__srv_session *ss, td__job *j)
{
    const td__request *rq = &j->rq;
    char err[512];
    td_status st = shm_check(ss, rq, err, sizeof err);
    if (st == TD_OK && rq->nbytes > SIZE_MAX) st = TD_ERANGE;
    if (st == TD_OK) {
        size_t n = (size_t)rq->nbytes;
        shm_pin(ss, rq->nbytes);
        const uint8_t *src = td__shm_region_data(ss->shm) + rq->region_offset;
        td__desc desc;
        td__buffer *buf = NULL;
        if (td__session_lookup(ss->es, rq->tensor, &desc, &buf, err, sizeof err) == TD_OK &&
            buf != NULL && atomic_load(&buf->refs) > 2)
            td__candidates_forget(buf);
        td__buffer_unref(buf);
        void *dst = NULL;
        td__fence fence = {0};
        st = td__session_write_ptr(ss->es, rq->tensor, rq->offset, n, &dst, err, sizeof err);
        if (st == TD_OK && n > 0) {
            if (dst != NULL)
                td__par_memcpy(dst, src, n); /* the client waits: its cores are free */
            else if (td__shm_write_wait) /* the old way, for an A/B */
                st = td__session_write(ss->es, rq->tensor, rq->offset, src, n, err, sizeof err);
            else
                st = td__session_write_queued(ss->es, rq->tensor, rq->offset, src, n, &fence,
                                              err, sizeof err);
        }
        /* The answer goes out from the session's shmdone thread even when the copy is
         * done (fence.handle NULL): sending it here took the worker into gRPC's write path
         * between two steps' work (shmdone.h says what it cost) */
        if (st == TD_OK && (fence.handle != NULL || !td__shm_done_inline)) {
            td__shm_done_add(&ss->shm_done, ss, fence, rq->seq, rq->tensor);
            return;
        }
    }
    if (st != TD_OK) {
        td__ss_failure(ss, rq->seq, 0, st, err);
        return;
    }
    td__reply r = {.kind = TD_REPLY_SHM_DONE, .seq = rq->seq};
    td__ss_reply_or_end(ss, &r);
}

/* ShmRead: tensor -> region, after the session's queued work (as a read). */
static void run_shm_read(td__srv_session *ss, td__job *j)
{
    const td__request *rq = &j->rq;
    char err[512];
    td__desc desc;
    td__buffer *buf = NULL;
    td_status st = shm_check(ss, rq, err, sizeof err);
    if (st == TD_OK) st = td__session_lookup(ss->es, rq->tensor, &desc, &buf, err, sizeof err);
    if (st == TD_OK) {
        uint64_t total = td__desc_nbytes(&desc);
        if (buf != NULL && buf->nbytes < total) total = buf->nbytes;
        if (rq->offset > total || rq->nbytes > total - rq->offset) {
            snprintf(err, sizeof err,
                     "shm read of tensor %llu: range [%llu, +%llu) is outside its %llu bytes",
                     (unsigned long long)rq->tensor, (unsigned long long)rq->offset,
                     (unsigned long long)rq->nbytes, (unsigned long long)total);
            st = TD_ERANGE;
        }
    }
    if (st == TD_OK && buf != NULL) st = td__session_sync(ss->es, err, sizeof err);
    if (st == TD_OK && rq->nbytes > 0) {
        shm_pin(ss, rq->nbytes);
        uint8_t *dst = td__shm_region_data(ss->shm) + rq->region_offset;
        if (buf != NULL)
            td__par_memcpy(dst, (const uint8_t *)buf->data + rq->offset, (size_t)rq->nbytes);
        else
            st = td__session_read(ss->es, rq->tensor, rq->offset, dst, (size_t)rq->nbytes, err,
                                  sizeof err);
    }
    td__buffer_unref(buf);
    if (st != TD_OK) {
        td__ss_failure(ss, rq->seq, 0, st, err);
        return;
    }
    td__reply r = {.kind = TD_REPLY_SHM_DONE, .seq = rq->seq};
    td__ss_reply_or_end(ss, &r);
}

/* Unsent replies of a session above which a read of device memory stops (run_read): the
 * receive side's high mark (call.h), so a session holds at most about twice it; it goes on
 * once they are down to the low mark. */
#define READ_QUEUE_BYTES TD_CALL_RECV_HIGH
#define READ_RESUME_BYTES TD_CALL_RECV_LOW

static void release_buffer(void *arg) { td__buffer_unref(arg); }

/* A read chunk copied out of device memory: its host bytes follow this header, and while
 * it waits to be sent they are charged to the tenant's byte quota (when they fit). */
typedef struct read_copy {
    td__quota *quota; /* NULL: not charged */
    size_t charged;
    max_align_t align[]; /* the bytes, aligned */
} read_copy;

static void release_copy(void *arg)
{
    read_copy *c = arg;
    if (c->quota != NULL) td__quota_bytes_uncharge(c->quota, c->charged);
    td__free(c);
}

static void run_read(td__srv_session *ss, td__job *j)
{
    const td__request *rq = &j->rq;
    char err[512];
    td__desc desc;
    td__buffer *buf = NULL;
    td_status st = td__session_lookup(ss->es, rq->tensor, &desc, &buf, err, sizeof err);
    if (st != TD_OK) {
        td__ss_failure(ss, rq->seq, 0, st, err);
        return;
    }
    uint64_t total = td__desc_nbytes(&desc);
    if (buf != NULL && buf->nbytes < total) total = buf->nbytes;
    if (rq->offset > total || rq->nbytes > total - rq->offset) {
        snprintf(err, sizeof err, "read of tensor %llu: range [%llu, +%llu) is outside its %llu bytes",
                 (unsigned long long)rq->tensor, (unsigned long long)rq->offset,
                 (unsigned long long)rq->nbytes, (unsigned long long)total);
        td__buffer_unref(buf);
        td__ss_failure(ss, rq->seq, 0, TD_ERANGE, err);
        return;
    }
    if (buf != NULL && (st = td__session_sync(ss->es, err, sizeof err)) != TD_OK) {
        td__buffer_unref(buf);
        td__ss_failure(ss, rq->seq, 0, st, err);
        return;
    }
    td__reply r = {.kind = TD_REPLY_READ, .seq = rq->seq, .tensor = rq->tensor};
    /* A read resumed after a turn (below) goes on where it stopped (read_off starts at 0). */
    uint64_t off = j->read_off > rq->offset ? j->read_off : rq->offset;
    const uint64_t end = rq->offset + rq->nbytes;
    do {
        if (td__srv_call_dead(&ss->c)) break;
        /* Chunks of memory the host cannot address are copies: while the session's unsent
         * replies exceed READ_QUEUE_BYTES, the read stops, and its queue is held (no worker
         * turns) until the client has taken them down to READ_RESUME_BYTES; so a client that
         * does not take its replies makes the server hold at most that much more and costs
         * the worker nothing. Chunks of host buffers only reference the tensor. A read
         * through the request ring (no queue: j->wq NULL) answers in the ring instead. */
        if (buf == NULL && off < end && j->wq != NULL &&
            td__srv_call_queued_bytes(&ss->c) > READ_QUEUE_BYTES) {
            j->read_off = off;
            j->continued = true;
            td__ss_wait_for_drain(ss, j->wq, READ_RESUME_BYTES);
            break;
        }
        size_t len = end - off > TD_CHUNK_BYTES ? TD_CHUNK_BYTES : (size_t)(end - off);
        r.offset = off;
        r.last = off + len == end;
        r.data = NULL;
        r.nbytes = len;
        if (len > 0 && buf != NULL) {
            td__buffer_ref(buf);
            r.data = (const char *)buf->data + off;
            r.release = release_buffer;
            r.release_arg = buf;
        } else if (len > 0) {
            /* The copy is charged to the tenant's bytes until it is sent. When they have no
             * room, the read waits for one of its own queued chunks to go (which frees
             * room); with none queued it sends this one uncharged, so a tenant at its quota
             * can still read (one chunk beyond it per session, README "Memory limits"). */
            char why[256];
            const bool charged = td__quota_bytes_charge(ss->quota, len, "a read chunk of",
                                                        why, sizeof why) == TD_OK;
            if (!charged && j->wq != NULL) {
                const size_t queued = td__srv_call_queued_bytes(&ss->c);
                if (queued > 0 && td__ss_wait_for_drain(ss, j->wq, queued - 1)) {
                    j->read_off = off;
                    j->continued = true;
                    break;
                }
            }
            read_copy *host = td__malloc(sizeof(read_copy) + len);
            if (host == NULL) {
                if (charged) td__quota_bytes_uncharge(ss->quota, len);
                td__ss_failure(ss, rq->seq, 0, TD_ENOMEM, "out of host memory for a read chunk");
                break;
            }
            host->quota = charged ? ss->quota : NULL;
            host->charged = len;
            const uint64_t t0 = td__trace_jobs ? td__metrics_now_ns() : 0;
            st = td__session_read(ss->es, rq->tensor, off, host->align, len, err, sizeof err);
            if (td__trace_jobs) ss->trace_read_copy_ns += td__metrics_now_ns() - t0;
            if (st != TD_OK) {
                release_copy(host);
                td__ss_failure(ss, rq->seq, 0, st, err);
                break;
            }
            r.data = host->align;
            r.release = release_copy;
            r.release_arg = host;
        }
        st = td__ss_reply(ss, &r);
        if (st != TD_OK) {
            td__ss_failure(ss, rq->seq, 0, st, "out of memory while sending a read chunk");
            break;
        }
        off += len;
    } while (off < end);
    td__buffer_unref(buf);
}

static void run_release(td__srv_session *ss, td__job *j)
{
    td__session_release(ss->es, j->rq.ids, j->rq.n_ids);
}

static void run_fence(td__srv_session *ss, td__job *j)
{
    char err[512];
    td_status st = td__session_sync(ss->es, err, sizeof err);
    if (st != TD_OK) {
        /* A Failure with the fence's seq answers the fence (no FenceDone after it). */
        td__ss_failure(ss, j->rq.seq, 0, st, err);
        return;
    }
    td__reply r = {.kind = TD_REPLY_FENCE, .seq = j->rq.seq};
    td__ss_reply_or_end(ss, &r);
}

static void run_graph_run(td__srv_session *ss, td__job *j)
{
    if (j->grun != NULL) { /* a continuation */
        j->continued = !td__graph_run_step(ss->es, j->grun, TD_WORKER_SLICE_NS);
        return;
    }
    const td__request *rq = &j->rq;
    td__graph *g = td__graph_set_find(&ss->graphs, rq->hash);
    if (g == NULL) {
        char hex[2 * TD_GRAPH_HASH_BYTES + 1], err[256];
        td__graph_hash_hex(rq->hash, TD_GRAPH_HASH_BYTES, hex);
        snprintf(err, sizeof err, "graph %s is not defined in this session (GraphDefine first)",
                 hex);
        for (size_t i = 0; i < rq->n_outputs && i < TD_GRAPH_MAX_INPUTS; i++)
            td__session_poison(ss->es, rq->outputs[i], TD_ENOTFOUND, err);
        td__ss_failure(ss, rq->seq, 0, TD_ENOTFOUND, err);
        return;
    }
    td__graph_run_create(ss->es, g, rq->inputs, rq->n_inputs, rq->outputs, rq->n_outputs,
                         td__handle_op_failure, j, &j->grun);
    if (j->grun == NULL) return;
    td__graph_ref(g);
    j->graph = g;
    j->continued = !td__graph_run_step(ss->es, j->grun, TD_WORKER_SLICE_NS);
}

/* GraphRelease: drop one hold of a graph of this session (server/graphcache.h). */
static void run_graph_release(td__srv_session *ss, td__job *j)
{
    if (td__graph_set_release(&ss->graphs, j->rq.hash)) return;
    char hex[2 * TD_GRAPH_HASH_BYTES + 1], err[256];
    td__graph_hash_hex(j->rq.hash, TD_GRAPH_HASH_BYTES, hex);
    snprintf(err, sizeof err, "graph release: graph %s is not held by this session", hex);
    td__ss_failure(ss, j->rq.seq, 0, TD_ENOTFOUND, err);
}

/* ToDevice: copy a tensor to another device of the session (engine/session.h). A poisoned
 * source poisons the output silently, like an op reading it. */
static void run_to_device(td__srv_session *ss, td__job *j)
{
    char err[512];
    if (ss->protocol < TD_PROTOCOL_DEVICES) { /* its open could name no further device */
        snprintf(err, sizeof err, "to-device seq %llu: the session opened at protocol %u; "
                 "to-device needs protocol %d", (unsigned long long)j->rq.seq, ss->protocol,
                 TD_PROTOCOL_DEVICES);
        td__session_poison(ss->es, j->rq.output, TD_EPROTO, err);
        td__ss_failure(ss, j->rq.seq, 0, TD_EPROTO, err);
        return;
    }
    td_status st = td__session_to_device(ss->es, j->rq.tensor, j->rq.output, j->rq.device, err,
                                         sizeof err);
    if (st != TD_OK && st != TD_EPOISONED) td__ss_failure(ss, j->rq.seq, 0, st, err);
}

static void run_failure(td__srv_session *ss, td__job *j)
{
    const td__request *rq = &j->rq;
    const char *text = rq->text ? rq->text : td_status_message(rq->status);
    for (size_t i = 0; i < rq->n_poison; i++)
        td__session_poison(ss->es, rq->poison_ids[i], rq->status, text);
    td__ss_failure(ss, rq->seq, 0, rq->status, text);
}

bool td__trace_jobs;
bool td__shm_write_wait;
bool td__shm_done_inline;

/* The session whose job this thread is running (td__handle), for td__ss_in_job. */
static _Thread_local const td__srv_session *tl_job;

bool td__ss_in_job(const td__srv_session *ss) { return ss != NULL && tl_job == ss; }

static void handle_kind(td__srv_session *ss, td__job *j);

void td__handle(td__srv_session *ss, td__job *j)
{
    const td__srv_session *outer = tl_job;
    tl_job = ss;
    if (!td__trace_jobs || j->rq.kind >= TD_REQ_KIND_COUNT) {
        handle_kind(ss, j);
    } else {
        const uint64_t t0 = td__metrics_now_ns();
        const td__req_kind kind = j->rq.kind;
        handle_kind(ss, j);
        ss->trace_ns[kind] += td__metrics_now_ns() - t0;
        if (!j->continued) ss->trace_n[kind]++; /* a request, not each of its time slices */
    }
    tl_job = outer;
}

static void handle_kind(td__srv_session *ss, td__job *j)
{
    switch (j->rq.kind) {
    case TD_REQ_BAD: run_failure(ss, j); return;
    case TD_REQ_OPEN: run_open(ss, j); return;
    case TD_REQ_BATCH: run_batch(ss, j); return;
    case TD_REQ_WRITE: run_write(ss, j); return;
    case TD_REQ_HAS_BLOBS: td__handle_has_blobs(ss, j); return;
    case TD_REQ_WRITE_FROM_BLOB: td__handle_write_from_blob(ss, j); return;
    case TD_REQ_STORE_BLOB: td__handle_store_blob(ss, j); return;
    case TD_REQ_READ: run_read(ss, j); return;
    case TD_REQ_RELEASE: run_release(ss, j); return;
    case TD_REQ_FENCE: run_fence(ss, j); return;
    case TD_REQ_GRAPH_DEFINE: td__handle_graph_define(ss, j); return;
    case TD_REQ_GRAPH_RUN: run_graph_run(ss, j); return;
    case TD_REQ_GRAPH_RELEASE: run_graph_release(ss, j); return;
    case TD_REQ_TO_DEVICE: run_to_device(ss, j); return;
    case TD_REQ_SHM_WRITE: run_shm_write(ss, j); return;
    case TD_REQ_SHM_READ: run_shm_read(ss, j); return;
    case TD_REQ_KIND_COUNT: return;
    }
}

_Static_assert(TD_SESSION_DEVICES_MAX == TD_SESSION_MAX_DEVICES,
               "engine/session.h and proto/wire_limits.h disagree on devices per session");

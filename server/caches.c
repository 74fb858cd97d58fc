/* caches.c — a server session's use of the two caches its tenant shares between sessions:
 * the content-addressed blob store (server/blobstore.h) and the graph cache
 * (server/graphcache.h). Handlers for HasBlobs, WriteFromBlob, StoreBlob and GraphDefine,
 * on the device worker.
 *
 * Blobs: HasBlobs answers from the shared store and pins what it found until the session's
 * WriteFromBlob uses it (at most CACHES_MAX_PINS pins, each charged to the tenant's
 * max_bytes quota while held; a blob whose pin the quota refuses is reported absent, so the
 * client sends the bytes itself); StoreBlob re-hashes a written tensor before the store
 * accepts it, or, with a fingerprint, keeps it unhashed as a candidate, and a HasBlobs
 * fingerprint that hits one promotes it (server/candidates.h). Graphs: a definition is validated here and checked against the id the client
 * claims, charged once to the defining tenant, and cached. Keys are scoped by the
 * session's tenant.
 */
#include "server/session_int.h"

#include "common/alloc.h"
#include "common/log.h"
#include "engine/tensor.h"
#include "server/candidates.h"
#include "server/metrics.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CACHES_MAX_PINS 1024

/* ---- blobs ---- */

/* Drop a pin taken by pin_blob: its bytes go back to the tenant, its reference to the blob. */
static void unpin(td__srv_session *ss, td__blob *b)
{
    td__quota_bytes_uncharge(ss->quota, b->nbytes);
    td__blob_unref(b);
}

void td__ss_pins_fini(td__srv_session *ss)
{
    for (size_t i = 0; i < ss->n_pins; i++) unpin(ss, ss->pins[i]);
    td__free(ss->pins);
    ss->pins = NULL;
    ss->n_pins = 0;
}

/* Pin b (takes the caller's reference) until WriteFromBlob or the session's end, charging
 * its bytes to the tenant's max_bytes quota. Returns false, dropping the reference, when
 * the quota refuses the pin: the blob is then reported absent, so that the client sends
 * the bytes with its writes (already paid for by the tensor) instead. */
static bool pin_blob(td__srv_session *ss, td__blob *b)
{
    for (size_t i = 0; i < ss->n_pins; i++) {
        if (ss->pins[i] == b) {
            td__blob_unref(b);
            return true;
        }
    }
    if (ss->pins == NULL && (ss->pins = td__calloc(CACHES_MAX_PINS, sizeof *ss->pins)) == NULL) {
        td__blob_unref(b); /* WriteFromBlob then looks in the store itself */
        return true;
    }
    if (ss->n_pins == CACHES_MAX_PINS) { /* drop the oldest pin */
        unpin(ss, ss->pins[0]);
        memmove(ss->pins, ss->pins + 1, (CACHES_MAX_PINS - 1) * sizeof *ss->pins);
        ss->n_pins--;
    }
    char why[384];
    if (td__quota_bytes_charge(ss->quota, b->nbytes, "pinning a blob of", why, sizeof why) !=
        TD_OK) {
        td__log(TD_LOG_DEBUG, "session %llu: blob reported absent: %s",
                (unsigned long long)ss->c.id, why);
        td__blob_unref(b);
        return false;
    }
    ss->pins[ss->n_pins++] = b;
    return true;
}

/* The pinned blob with this hash (the pin's reference passes to the caller, its bytes go
 * back to the tenant), else a store lookup. */
static td__blob *take_blob(td__srv_session *ss, const uint8_t *hash)
{
    for (size_t i = 0; i < ss->n_pins; i++) {
        td__blob *b = ss->pins[i];
        if (memcmp(b->hash, hash, TD_SHA256_BYTES) != 0) continue;
        memmove(ss->pins + i, ss->pins + i + 1, (ss->n_pins - i - 1) * sizeof *ss->pins);
        ss->n_pins--;
        td__quota_bytes_uncharge(ss->quota, b->nbytes);
        return b;
    }
    td__blobstore *bs = td__service_blobs(ss->svc);
    return bs != NULL ? td__blobstore_get(bs, ss->tenant, hash) : NULL;
}

void td__handle_has_blobs(td__srv_session *ss, td__job *j)
{
    if (j->answered) return; /* the receive side said "absent" (session.c) */
    const td__request *rq = &j->rq;
    td__blobstore *bs = td__service_blobs(ss->svc);
    size_t n = rq->n_hashes + rq->n_fps;
    bool *present = td__calloc(n > 0 ? n : 1, sizeof *present);
    if (present == NULL) {
        td__ss_failure(ss, rq->seq, 0, TD_ENOMEM, "out of memory answering has-blobs");
        return;
    }
    for (size_t i = 0; i < rq->n_hashes; i++) {
        td__blob *b = bs != NULL ? td__blobstore_get(bs, ss->tenant, rq->hashes[i]) : NULL;
        present[i] = b != NULL && pin_blob(ss, b);
    }
    /* A fingerprint hit promotes the candidate (SHA-256 of its bytes, computed here) into
     * the store; the client's SHA-256 offer that follows decides whether they are its bytes.
     * At most TD_MAX_FP_PROMOTIONS entries a message may promote (wire_limits.h); absent is
     * always a safe answer to a fingerprint (the client sends the bytes). */
    for (size_t i = 0; i < rq->n_fps && i < TD_MAX_FP_PROMOTIONS; i++)
        present[rq->n_hashes + i] = td__candidates_offer(bs, ss->tenant, rq->fps[i]);
    td__reply r = {.kind = TD_REPLY_BLOB_STATUS, .seq = rq->seq, .present = present,
                   .n_present = n};
    td__ss_reply_or_end(ss, &r);
    td__free(present);
}

void td__handle_write_from_blob(td__srv_session *ss, td__job *j)
{
    const td__request *rq = &j->rq;
    char err[512], hex[TD_SHA256_HEX];
    td__sha256_hex(rq->hash, hex);
    td__blob *b = take_blob(ss, rq->hash);
    if (b == NULL) {
        snprintf(err, sizeof err, "write seq %llu to tensor %llu: blob %.16s... is not in the "
                 "store (offer it with has-blobs first)", (unsigned long long)rq->seq,
                 (unsigned long long)rq->tensor, hex);
        td__ss_failure(ss, rq->seq, 0, TD_ENOTFOUND, err);
        return;
    }
    td__desc desc;
    td__buffer *buf = NULL;
    td_status st = td__session_lookup(ss->es, rq->tensor, &desc, &buf, err, sizeof err);
    td__buffer_unref(buf);
    if (st == TD_OK && td__desc_nbytes(&desc) != b->nbytes) {
        snprintf(err, sizeof err, "write seq %llu: blob %.16s... has %zu bytes, tensor %llu "
                 "holds %zu", (unsigned long long)rq->seq, hex, b->nbytes,
                 (unsigned long long)rq->tensor, td__desc_nbytes(&desc));
        st = TD_ERANGE;
    }
    void *dst = NULL;
    if (st == TD_OK)
        st = td__session_write_ptr(ss->es, rq->tensor, 0, b->nbytes, &dst, err, sizeof err);
    if (st == TD_OK && b->nbytes > 0) {
        if (dst != NULL)
            memcpy(dst, b->data, b->nbytes);
        else
            st = td__session_write(ss->es, rq->tensor, 0, b->data, b->nbytes, err, sizeof err);
    }
    td__blob_unref(b);
    if (st != TD_OK) td__ss_failure(ss, rq->seq, 0, st, err);
}

/* TENSORD_CANDIDATE_COPY=host: GPU candidates as host copies (the old way; a timing aid). */
static bool host_copies_only(void)
{
    static atomic_int cached = -1; /* device workers may ask at once */
    int v = atomic_load(&cached);
    if (v < 0) {
        const char *e = getenv("TENSORD_CANDIDATE_COPY");
        v = e != NULL && strcmp(e, "host") == 0;
        atomic_store(&cached, v);
    }
    return v == 1;
}

/* A device copy of the tensor as the candidate, charged to the tenant through the copy's
 * quota fields; false when the device cannot (the caller makes a host copy). */
static bool keep_device_copy(td__srv_session *ss, const td__request *rq, size_t n)
{
    char err[512];
    td__buffer *copy = NULL;
    if (host_copies_only() ||
        td__session_detach_copy(ss->es, rq->tensor, &copy, err, sizeof err) != TD_OK)
        return false;
    copy->quota = ss->quota;
    copy->quota_bytes = n;
    if (!td__candidates_put(ss->tenant, ss->quota, rq->fp, copy, NULL, 0, n))
        td__log(TD_LOG_DEBUG, "session %llu: out of memory keeping a candidate",
                (unsigned long long)ss->c.id);
    td__buffer_unref(copy); /* the record's reference keeps it; without one it goes */
    return true;
}

/* StoreBlob with a fingerprint: keep tensor rq->tensor as a candidate (candidates.h), by
 * reference to its host buffer, else (a device without host memory) as a device copy or,
 * where the device cannot copy, a host copy, charged to the tenant. Nothing is hashed
 * here. */
static void keep_candidate(td__srv_session *ss, const td__request *rq)
{
    char err[512];
    td__desc desc;
    td__buffer *buf = NULL;
    td_status st = td__session_lookup(ss->es, rq->tensor, &desc, &buf, err, sizeof err);
    size_t n = st == TD_OK ? td__desc_nbytes(&desc) : 0;
    if (st == TD_OK && buf != NULL) {
        /* Writes reach a host buffer synchronously; copy-on-write keeps it unchanged. */
        if (!td__candidates_put(ss->tenant, ss->quota, rq->fp, buf, NULL, 0, n))
            td__log(TD_LOG_DEBUG, "session %llu: out of memory keeping a candidate",
                    (unsigned long long)ss->c.id);
    } else if (st == TD_OK && n > 0) {
        char why[384];
        td__blob *copy = NULL;
        const uint64_t t0 = td__trace_jobs ? td__metrics_now_ns() : 0;
        if (td__quota_bytes_charge(ss->quota, n, "keeping an upload of", why, sizeof why) !=
            TD_OK) {
            td__log(TD_LOG_DEBUG, "session %llu: no candidate: %s", (unsigned long long)ss->c.id,
                    why);
        } else if (keep_device_copy(ss, rq, n)) {
            /* kept as a device copy */
        } else if ((copy = td__blob_create(ss->tenant, n)) == NULL ||
                   td__session_read(ss->es, rq->tensor, 0, copy->data, n, err, sizeof err) !=
                       TD_OK) {
            td__blob_unref(copy);
            td__quota_bytes_uncharge(ss->quota, n);
        } else {
            (void)td__candidates_put(ss->tenant, ss->quota, rq->fp, NULL, copy, n, n);
        }
        /* TENSORD_TRACE_JOBS: the candidate's copy, device or host, timed once */
        if (td__trace_jobs) ss->trace_candidate_copy_ns += td__metrics_now_ns() - t0;
    }
    td__buffer_unref(buf);
    if (st != TD_OK) td__ss_failure(ss, rq->seq, 0, st, err);
}

void td__handle_store_blob(td__srv_session *ss, td__job *j)
{
    const td__request *rq = &j->rq;
    td__blobstore *bs = td__service_blobs(ss->svc);
    if (bs == NULL) return;
    if (rq->fp != NULL) {
        keep_candidate(ss, rq);
        return;
    }
    char err[512];
    td__desc desc;
    td__buffer *buf = NULL;
    td_status st = td__session_lookup(ss->es, rq->tensor, &desc, &buf, err, sizeof err);
    if (st == TD_OK) st = td__session_sync(ss->es, err, sizeof err);
    size_t n = st == TD_OK ? td__desc_nbytes(&desc) : 0;
    if (st == TD_OK) {
        if (buf != NULL) {
            st = td__blobstore_put(bs, ss->tenant, rq->hash, buf->data, n, err, sizeof err);
        } else {
            void *tmp = td__malloc(n > 0 ? n : 1);
            st = tmp == NULL ? TD_ENOMEM
                             : td__session_read(ss->es, rq->tensor, 0, tmp, n, err, sizeof err);
            if (st == TD_OK)
                st = td__blobstore_put(bs, ss->tenant, rq->hash, tmp, n, err, sizeof err);
            else if (tmp == NULL)
                snprintf(err, sizeof err, "out of host memory storing a %zu-byte blob", n);
            td__free(tmp);
        }
    }
    td__buffer_unref(buf);
    if (st != TD_OK) td__ss_failure(ss, rq->seq, 0, st, err);
}

/* ---- graphs ---- */

static void graph_ready(td__srv_session *ss, uint64_t seq, const uint8_t *hash, bool known)
{
    td__reply r = {.kind = TD_REPLY_GRAPH_READY, .seq = seq, .graph_id = hash, .known = known};
    td__ss_reply_or_end(ss, &r);
}

/* GraphDefine: attach a graph from the session's set, the server cache, or the definition
 * (validated here, on the worker, and checked against the id the client claims). */
void td__handle_graph_define(td__srv_session *ss, td__job *j)
{
    const td__request *rq = &j->rq;
    const uint8_t *id = rq->hash;
    td__graph *held = td__graph_set_find(&ss->graphs, id);
    if (held != NULL) {
        td__graph_set_add(&ss->graphs, held); /* one more hold; cannot fail */
        graph_ready(ss, rq->seq, id, true);
        return;
    }
    char err[768];
    td__graph *g = td__graphcache_get(ss->tenant, id);
    if (g == NULL && rq->has_definition) {
        td_status st = td__request_graph(rq, &g, err, sizeof err);
        if (st != TD_OK) {
            td__ss_failure(ss, rq->seq, 0, st, err);
            return;
        }
        if (memcmp(g->hash, id, TD_GRAPH_HASH_BYTES) != 0) {
            char want[2 * TD_GRAPH_HASH_BYTES + 1], have[2 * TD_GRAPH_HASH_BYTES + 1];
            td__graph_hash_hex(id, TD_GRAPH_HASH_BYTES, want);
            td__graph_hash_hex(g->hash, TD_GRAPH_HASH_BYTES, have);
            snprintf(err, sizeof err, "graph id %s does not match its definition (SHA-256 %s)",
                     want, have);
            td__graph_unref(g);
            td__ss_failure(ss, rq->seq, 0, TD_EINVAL, err);
            return;
        }
        /* Charged once, here, to the defining tenant; the last holder (this session's set,
         * another session's, the cache) gives it back. */
        uint64_t gbytes = td__graph_nbytes(g);
        char why[384];
        if (gbytes > TD_GRAPH_DEF_MAX_BYTES) {
            snprintf(err, sizeof err, "graph definition holds %llu bytes in memory (%u ops); "
                     "at most %llu", (unsigned long long)gbytes, g->n_ops,
                     (unsigned long long)TD_GRAPH_DEF_MAX_BYTES);
            td__graph_unref(g);
            td__ss_failure(ss, rq->seq, 0, TD_EINVAL, err);
            return;
        }
        if (td__quota_bytes_charge(ss->quota, gbytes, "keeping a graph definition of", why,
                                   sizeof why) != TD_OK) {
            td__graph_unref(g);
            td__ss_failure(ss, rq->seq, 0, TD_EQUOTA, why);
            return;
        }
        g->quota = ss->quota;
        g->charged = gbytes;
        if (!td__graphcache_put(ss->tenant, g))
            td__log(TD_LOG_WARN, "session %llu: out of memory caching a graph",
                    (unsigned long long)ss->c.id);
    }
    if (g != NULL && !td__graph_set_add(&ss->graphs, g)) {
        td__graph_unref(g);
        snprintf(err, sizeof err, "a session may use at most %d graphs of %llu ops in all",
                 TD_SESSION_MAX_GRAPHS, (unsigned long long)TD_SESSION_MAX_GRAPH_OPS);
        td__ss_failure(ss, rq->seq, 0, TD_EQUOTA, err);
        return;
    }
    td__graph_unref(g);
    graph_ready(ss, rq->seq, id, g != NULL);
}

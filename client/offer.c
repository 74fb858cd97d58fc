/* offer.c — the blob-offer policy: when an upload goes through the executor's
 * content-addressed blob store instead of (or besides) the wire.
 *
 * Why here and not in a transport: the policy is the same whatever carries the bytes, so it
 * sits above the transport table (client/transport.h) and every transport with a blob
 * store (vt->blob_has non-NULL) gets it; a transport only carries the blob messages.
 *
 * The policy for a whole-tensor upload of at least t->blob_min_bytes ("weights cross the
 * wire once per server", without a hashing toll on fresh data):
 *  - fingerprint it (common/fingerprint.h: ~15 us whatever the size) and ask whether the
 *    executor keeps a candidate under that fingerprint for this tenant;
 *    While the answer is on its way, start the data's SHA-256 (td__wait_work, in 128 KiB
 *    steps between which the transport looks for the answer): a repeat's answer waits
 *    behind the session's queued ops and the executor's own SHA-256 of the candidate, and
 *    hashing after it doubled that wait (issue 12: a repeated upload must not be slower
 *    than a fresh one). Not after an offer that found nothing (t->offer_last_fresh):
 *    a fresh upload's answer also waits, behind the bytes of the uploads before it (4 ms
 *    for a 3 MiB training batch on the 2-core VM), and hashing through that wait took CPU
 *    from the server on the same host for a hash that was then dropped. Uploads come in
 *    runs (an epoch of fresh batches, then one of repeats), so the last answer predicts
 *    the next, and a wrong guess costs one hash after the answer (no wait overlapped) or
 *    a partial hash of a fresh upload (no wall time);
 *  - no: drop the hash and send the bytes, asking the executor to keep the tensor as a
 *    candidate under the fingerprint. Nothing is copied, and in a run of fresh uploads
 *    nothing is hashed: it runs at the speed of the plain wire path (BENCHMARKS.md, P3);
 *  - yes (a repeat, or a collision): the executor has hashed the candidate (SHA-256) and
 *    moved it into its store; finish the hash here and offer the SHA-256 as before. Present:
 *    fill the tensor from the store, no payload crosses the wire (P4). Absent (the
 *    fingerprints collided, or the blob was evicted): send the bytes, keep them as a
 *    candidate.
 * An upload the program marked TD_WRITE_FRESH (td_write_ex: data that will not repeat,
 * such as a training batch) skips all of this and goes out as plain bytes: no fingerprint,
 * no round trip, and the executor keeps no candidate of it (on the 2-core VM the offer's
 * round trip and the kept candidate cost a b4096 training loop 10-20 %, BENCHMARKS.md
 * 2026-12-07).
 * Only the SHA-256 decides which bytes the tensor gets; the fingerprint only decides when
 * to pay for computing it. The design and the alternatives weighed (a full-data XXH3,
 * hashing off the fence path, offering only tensors marked as parameters) are in
 * server/candidates.h. An executor that predates fingerprints (t->blob_fingerprints false)
 * gets the SHA-256 offer for every such upload.
 * Thread-safety: as the transport (one thread at a time).
 */
#include "client/transport.h"

#include "common/fingerprint.h"
#include "common/sha256.h"

/* The SHA-256 offer: what every upload did before fingerprints. */
static td_status offer_sha256(td__transport *t, uint64_t id, const void *src, size_t nbytes)
{
    uint8_t hash[TD_SHA256_BYTES];
    if (!td__sha256(src, nbytes, hash)) /* no hash: plain upload */
        return t->vt->write(t, id, 0, src, nbytes);
    bool present = false;
    td_status st = t->vt->blob_has(t, hash, &present);
    if (st != TD_OK) return st;
    if (present) return t->vt->blob_write(t, id, hash);
    st = t->vt->write(t, id, 0, src, nbytes);
    return st == TD_OK ? t->vt->blob_store(t, id, hash) : st;
}

/* The SHA-256 of an upload, taken in OFFER_HASH_PIECE steps while its fingerprint offer
 * is on the way (td__wait_work). */
#define OFFER_HASH_PIECE ((size_t)128 << 10)

typedef struct offer_hash {
    td__sha256_ctx *ctx; /* NULL: could not start; hashed in one go if needed */
    const uint8_t *src;
    size_t nbytes, done;
    bool failed;
} offer_hash;

static bool hash_step(void *arg)
{
    offer_hash *h = arg;
    if (h->ctx == NULL || h->failed || h->done == h->nbytes) return false;
    size_t n = h->nbytes - h->done < OFFER_HASH_PIECE ? h->nbytes - h->done : OFFER_HASH_PIECE;
    h->failed = !td__sha256_update(h->ctx, h->src + h->done, n);
    h->done += n;
    return !h->failed && h->done < h->nbytes;
}

/* Finish the hash (false: none to offer); the context is gone either way. */
static bool hash_finish(offer_hash *h, uint8_t out[TD_SHA256_BYTES])
{
    if (h->ctx == NULL) return td__sha256(h->src, h->nbytes, out);
    if (!h->failed && h->done < h->nbytes)
        h->failed = !td__sha256_update(h->ctx, h->src + h->done, h->nbytes - h->done);
    if (h->failed) {
        td__sha256_abort(h->ctx);
        return false;
    }
    return td__sha256_final(h->ctx, out);
}

td_status td__offer_write(td__transport *t, uint64_t id, const void *src, size_t nbytes,
                          bool fresh)
{
    if (fresh || t->vt->blob_has == NULL || nbytes == 0 || nbytes < t->blob_min_bytes)
        return t->vt->write(t, id, 0, src, nbytes);
    uint8_t fp[TD_FINGERPRINT_LEN];
    if (!t->blob_fingerprints || t->vt->blob_has_fingerprint == NULL ||
        t->vt->blob_candidate == NULL)
        return offer_sha256(t, id, src, nbytes);
    if (!td__fingerprint(src, nbytes, fp)) return t->vt->write(t, id, 0, src, nbytes);
    /* A repeat needs the SHA-256 next: take it while the answer is on its way (behind the
     * session's queued work, and the executor's own hash of a candidate it promotes),
     * unless the last offer was a fresh upload (see the top of this file). */
    offer_hash h = {.ctx = t->offer_last_fresh ? NULL : td__sha256_begin(), .src = src,
                    .nbytes = nbytes};
    const td__wait_work work = {.step = hash_step, .arg = &h};
    bool known = false;
    td_status st = t->vt->blob_has_fingerprint(t, fp, &known, h.ctx != NULL ? &work : NULL);
    if (st == TD_OK) t->offer_last_fresh = !known;
    if (st != TD_OK || !known) {
        td__sha256_abort(h.ctx);
        if (st != TD_OK) return st;
    } else {
        uint8_t hash[TD_SHA256_BYTES];
        bool present = false;
        if (hash_finish(&h, hash)) {
            st = t->vt->blob_has(t, hash, &present);
            if (st != TD_OK) return st;
            if (present) return t->vt->blob_write(t, id, hash);
        }
    }
    st = t->vt->write(t, id, 0, src, nbytes);
    return st == TD_OK ? t->vt->blob_candidate(t, id, fp) : st;
}

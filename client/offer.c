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
 *  - no: send the bytes and ask the executor to keep the tensor as a candidate under the
 *    fingerprint. Nothing is hashed on either end and nothing is copied, so a fresh upload
 *    runs at the speed of the plain wire path (BENCHMARKS.md, P3);
 *  - yes (a repeat, or a collision): the executor has hashed the candidate (SHA-256) and
 *    moved it into its store; hash the data here and offer the SHA-256 as before. Present:
 *    fill the tensor from the store, no payload crosses the wire (P4). Absent (the
 *    fingerprints collided, or the blob was evicted): send the bytes, keep them as a
 *    candidate.
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

td_status td__offer_write(td__transport *t, uint64_t id, const void *src, size_t nbytes)
{
    if (t->vt->blob_has == NULL || nbytes == 0 || nbytes < t->blob_min_bytes)
        return t->vt->write(t, id, 0, src, nbytes);
    uint8_t fp[TD_FINGERPRINT_LEN];
    if (!t->blob_fingerprints || t->vt->blob_has_fingerprint == NULL ||
        t->vt->blob_candidate == NULL)
        return offer_sha256(t, id, src, nbytes);
    if (!td__fingerprint(src, nbytes, fp)) return t->vt->write(t, id, 0, src, nbytes);
    bool known = false;
    td_status st = t->vt->blob_has_fingerprint(t, fp, &known);
    if (st != TD_OK) return st;
    if (known) {
        uint8_t hash[TD_SHA256_BYTES];
        bool present = false;
        if (td__sha256(src, nbytes, hash)) {
            st = t->vt->blob_has(t, hash, &present);
            if (st != TD_OK) return st;
            if (present) return t->vt->blob_write(t, id, hash);
        }
    }
    st = t->vt->write(t, id, 0, src, nbytes);
    return st == TD_OK ? t->vt->blob_candidate(t, id, fp) : st;
}

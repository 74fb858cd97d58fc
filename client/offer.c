/* offer.c — the blob-offer policy: when an upload goes through the executor's
 * content-addressed blob store instead of (or besides) the wire.
 *
 * Why here and not in a transport: the policy is the same whatever carries the bytes, so it
 * sits above the transport table (client/transport.h) and every transport with a blob
 * store (vt->blob_has non-NULL) gets it; a transport only carries the three blob messages.
 *
 * The policy: a whole-tensor upload of at least t->blob_min_bytes is hashed (SHA-256) and
 * offered; when the store holds it the tensor is filled from the store and no payload
 * crosses the wire; else the bytes are sent and the executor is asked to keep them, so that
 * the next upload of the same bytes (this program again, or another) is free.
 * Thread-safety: as the transport (one thread at a time).
 */
#include "client/transport.h"

#include "common/sha256.h"

td_status td__offer_write(td__transport *t, uint64_t id, const void *src, size_t nbytes)
{
    uint8_t hash[TD_SHA256_BYTES];
    if (t->vt->blob_has == NULL || nbytes == 0 || nbytes < t->blob_min_bytes ||
        !td__sha256(src, nbytes, hash)) /* no hash: plain upload */
        return t->vt->write(t, id, 0, src, nbytes);
    bool present = false;
    td_status st = t->vt->blob_has(t, hash, &present);
    if (st != TD_OK) return st;
    if (present) return t->vt->blob_write(t, id, hash);
    st = t->vt->write(t, id, 0, src, nbytes);
    return st == TD_OK ? t->vt->blob_store(t, id, hash) : st;
}

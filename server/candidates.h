/* candidates.h — uploads the server keeps, unverified, under the client's fingerprint, so
 * that a repeat of the same bytes can come from the blob store without the first upload
 * paying for SHA-256 (issue 12, item 2).
 *
 * Design. A client fingerprints every large upload (common/fingerprint.h, ~15 us) and asks
 * whether its tenant has a candidate under that fingerprint; when not, it sends the bytes
 * and asks the server to keep the written tensor as a candidate (StoreBlob.fingerprint).
 * Keeping one costs no hashing and no copy: the record holds a reference to the tensor's
 * host buffer, and the engine's copy-on-write (engine/session.h) gives the tensor a new
 * buffer before anyone writes to it, so the candidate's bytes never change under it. On a
 * device without host memory (a GPU) the record holds a device-to-device copy instead
 * (td__session_detach_copy: microseconds, where a host copy cost a transfer into fresh
 * host pages on the fence path — 130 ms for 64 MiB on an H100 host, BENCHMARKS.md), charged
 * to the tenant's bytes; it belongs to no session, is dropped first when its device runs
 * out of memory (td__candidates_reclaim_device), and is read back to host memory only when
 * an offer promotes it. A device that cannot copy device to device (or
 * TENSORD_CANDIDATE_COPY=host, a timing aid) gets a host copy, charged alike.
 * When a later offer hits a candidate, the server hashes the candidate's bytes itself
 * (SHA-256, in place), moves them into the blob store under that hash (server/blobstore.h)
 * and keeps only (fingerprint -> SHA-256) in the record; the client then offers the SHA-256
 * of its own bytes, and the store serves them only when the two agree. Moving costs no
 * copy when the record holds the only reference to a host buffer (the tensor was released,
 * as a training loop's batches and a restarted program's weights are): the buffer itself
 * becomes the stored blob (td__blob_wrap) and stops counting against the tenant, like the
 * store's other blobs. Copying 3 MiB into fresh pages cost 9 ms on the 2-core VM, five
 * times the hash (1.8 ms), which made a repeated upload slower than a fresh one (issue 12,
 * BENCHMARKS.md 2026-12-06 evening). A buffer a live tensor still uses is copied (the
 * tensor may be written again); a host copy is stored as it is; a device copy is read back
 * into a new blob. So:
 *  - a fingerprint collision (or a client that lies about its fingerprint) costs one
 *    SHA-256 on each end and a normal upload, never wrong bytes: the store is keyed by the
 *    SHA-256 the server computed from the bytes it holds;
 *  - records are per tenant (the tenant name is part of the key); another tenant's
 *    fingerprint is simply absent, and a tenant can only promote bytes it uploaded itself
 *    into its own part of the store.
 *
 * Alternatives weighed: XXH3 over all the bytes (what the proposal used) costs
 * ~12% of a 64 MiB upload on these machines, more than the 10% budget, and buys nothing a
 * sample does not, since the SHA-256 check is what makes it safe; hashing off the fence
 * path still costs the 2-core machine the same CPU during the next upload; offering only
 * tensors marked as parameters needs an API change in every client.
 *
 * Memory. A record holding bytes keeps its buffer alive after the tensor is released; the
 * buffer stays charged to the tenant's max_bytes quota (as a buffer a read is still
 * sending does) until the record goes. Records are dropped, oldest first, when the bytes
 * they hold pass the blob store's cap (td__candidates_configure; all tenants) or a tenant holds more than
 * TD_CANDIDATES_MAX_PER_TENANT records, when a candidate is promoted, when its tensor is
 * written again (td__candidates_forget: no copy-on-write for a cache), and when the
 * tenant's quota needs the memory (td__server_reclaim, the quota reclaim hook). A record
 * that holds only a SHA-256 costs ~150 bytes and is capped by TD_CANDIDATES_MAX_RECORDS.
 * The per-tenant count is generous on purpose: a model's weights are many tensors, and a
 * restarted program offers them in the order it first sent them, so a cap below the
 * model's tensor count would evict each candidate just before its repeat arrives.
 * Thread-safety: every function may be called from any thread (one mutex; buffers are
 * hashed, copied and freed outside it). A record is promoted by one thread at a time: an
 * offer that finds it being promoted waits for that promotion (g_promoted) instead of
 * hashing the same bytes again, which also keeps a buffer the record held alone out of
 * every other hand while it moves into the store.
 */
#ifndef TD_SERVER_CANDIDATES_H
#define TD_SERVER_CANDIDATES_H

#include "common/fingerprint.h"
#include "common/sha256.h"
#include "engine/quota.h"
#include "engine/tensor.h"
#include "server/blobstore.h"

#include <stdbool.h>

#define TD_CANDIDATES_MAX_BYTES ((uint64_t)1 << 30)
#define TD_CANDIDATES_MAX_PER_TENANT 1024
#define TD_CANDIDATES_MAX_RECORDS 4096

/* Keep `nbytes` of `tenant` under fingerprint fp: either buffer `buf` (a host buffer, or an
 * idle device copy charged through its own quota fields; a new reference is taken) or, when buf is NULL, host copy `copy` (a blob that
 * is not in any store; the caller's reference passes to the record, which uncharges
 * `copy_charged` bytes from q when it drops it). Replaces a record with the same
 * (tenant, fp). Returns false only when out of memory (nothing is kept; `copy` is unref'd
 * and uncharged). */
bool td__candidates_put(const char *tenant, td__quota *q, const uint8_t fp[TD_FINGERPRINT_LEN],
                        td__buffer *buf, td__blob *copy, uint64_t copy_charged, size_t nbytes);

/* Answer an offer of fp by tenant: true when a record exists and its bytes are in bs. A
 * record that holds bytes is promoted first: they are hashed and moved into bs (see the
 * top of this file; td__blobstore_adopt, or td__blobstore_add for a copy) and the record
 * keeps only the hash (its bytes are dropped). A promotion that fails (out of memory,
 * blob larger than the store) keeps the record as it was and answers false; bs NULL
 * answers false. Waits while another thread promotes the same record. */
bool td__candidates_offer(td__blobstore *bs, const char *tenant,
                          const uint8_t fp[TD_FINGERPRINT_LEN]);

/* Whether tenant has a record under fp (with bytes or promoted), without promoting it:
 * false means an offer of fp would be answered "absent" unless the blob store's cache
 * directory knows fp (td__blobstore_fingerprint). Cheap (a scan under the mutex); any
 * thread. */
bool td__candidates_known(const char *tenant, const uint8_t fp[TD_FINGERPRINT_LEN]);

/* Drop the records that hold host buffer buf, if any (its tensor is about to be
 * overwritten: keeping the old bytes would cost a copy-on-write and a buffer). */
void td__candidates_forget(const td__buffer *buf);

/* The device reclaim hook (engine/tensor.h td__buffer_set_reclaim) the server installs:
 * drops the records that hold device copies on dev, oldest first, until `need` bytes are
 * freed or none is left; returns the bytes freed. Drops nothing when the device reports
 * its free memory (memory_info) and that plus every copy on it is still less than need. */
uint64_t td__candidates_reclaim_device(td__device *dev, uint64_t need);

/* The quota reclaim hook (engine/quota.h) the server installs: drops q's candidates whose
 * bytes nothing else holds, then its cached graphs (td__graphcache_reclaim). */
uint64_t td__server_reclaim(td__quota *q, uint64_t need);

/* Cap the bytes records hold to max_bytes (0: TD_CANDIDATES_MAX_BYTES); the server passes
 * its blob store's cap, since a larger candidate could never be promoted. Call before
 * serving. */
void td__candidates_configure(uint64_t max_bytes);

/* Promote every record that holds bytes into bs (at shutdown, with a cache directory, so
 * that an upload made once survives a restart as the blob store's contents do). */
void td__candidates_flush(td__blobstore *bs);

/* Records and the bytes they hold alone or with a live tensor (for tests). */
void td__candidates_stats(uint64_t *records, uint64_t *bytes);

/* Drop every record (at shutdown). */
void td__candidates_clear(void);
#endif

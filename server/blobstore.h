/* blobstore.h — the server's content-addressed blob store (DESIGN.md §3, PutBlob/HasBlobs).
 *
 * Blobs are immutable byte strings keyed by (tenant, SHA-256 of the bytes). Clients offer a
 * tensor's hash before uploading it and send the bytes only when the store lacks them, so
 * model weights cross the wire once per server and tenant. The store is shared by every
 * session of a tenant (never across tenants: another tenant's blob is absent), holds
 * blobs in a byte-capped LRU in memory and, with a cache directory, also keeps a copy of
 * each blob on disk that survives restarts. A blob read back from disk is re-hashed
 * before use: a file whose bytes do not hash to its name is deleted and reported missing
 * (the client then sends the bytes again), never served. Nothing a client sends is
 * trusted: a blob enters the store only after the server itself has hashed its bytes.
 *
 * Lifetime: blobs are reference-counted; eviction drops the store's reference, so a blob
 * in use (pinned by a session, being copied) stays valid until its last unref.
 * Thread-safety: every function may be called from any thread.
 */
#ifndef TD_SERVER_BLOBSTORE_H
#define TD_SERVER_BLOBSTORE_H

#include "common/sha256.h"
#include "tensord.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TD_BLOBSTORE_DEFAULT_BYTES ((uint64_t)1 << 30)

typedef struct td__blobstore td__blobstore;

typedef struct td__blob {
    atomic_long refs;
    uint8_t hash[TD_SHA256_BYTES];
    char *tenant;  /* owned */
    size_t nbytes;
    uint8_t *data; /* owned (unless `release`); NULL when nbytes is 0 */
    /* td__blob_wrap: the bytes belong to `owner`, and the last unref calls release(owner)
     * instead of freeing data. */
    void (*release)(void *owner);
    void *owner;
    /* Under the store's mutex: */
    struct td__blob *lru_prev, *lru_next; /* most recently used first */
    struct td__blob *chain;               /* same 64-bit index key */
    bool in_store;
} td__blob;

typedef struct td__blobstore_stats {
    uint64_t blobs, bytes;       /* in memory now */
    uint64_t hits, misses;       /* lookups */
    uint64_t evictions;          /* dropped from memory under the byte cap */
    uint64_t disk_loads;         /* blobs read back and verified from the cache directory */
    uint64_t disk_rejects;       /* cache files that failed verification (deleted) */
} td__blobstore_stats;

/* New store holding at most cap_bytes of blobs in memory (0: TD_BLOBSTORE_DEFAULT_BYTES).
 * cache_dir (may be NULL or "") is created if missing. Returns TD_OK, TD_ENOMEM, TD_EIO
 * (cache_dir unusable; message in err). */
td_status td__blobstore_create(uint64_t cap_bytes, const char *cache_dir, td__blobstore **out,
                               char *err, size_t errlen);
/* Frees the store's references; blobs still referenced elsewhere live on. NULL: no-op. */
void td__blobstore_destroy(td__blobstore *bs);

/* The blob for (tenant, hash) with a new reference (caller unrefs), looked up in memory,
 * then in the cache directory (verified); NULL when absent. */
td__blob *td__blobstore_get(td__blobstore *bs, const char *tenant,
                            const uint8_t hash[TD_SHA256_BYTES]);

/* Add `nbytes` at `src` as the blob (tenant, hash): copies and hashes the bytes, refuses
 * them when they do not hash to `hash` (TD_EINVAL), and writes the cache file. Blobs larger
 * than the cap are not kept (TD_OK: the store is a cache). Returns TD_OK, TD_EINVAL,
 * TD_ENOMEM; message in err. */
td_status td__blobstore_put(td__blobstore *bs, const char *tenant,
                            const uint8_t hash[TD_SHA256_BYTES], const void *src, size_t nbytes,
                            char *err, size_t errlen);

/* Add `nbytes` at `src` under the SHA-256 the store computes (of its own copy, so the key
 * matches the stored bytes even if src changes meanwhile) and return that hash in `hash`;
 * for bytes whose hash nobody claimed yet (server/candidates.h). Returns TD_OK (also when
 * the blob was already stored), TD_ERANGE (larger than the store's cap: not kept),
 * TD_ENOMEM; message in err. */
td_status td__blobstore_add(td__blobstore *bs, const char *tenant, const void *src,
                            size_t nbytes, uint8_t hash[TD_SHA256_BYTES], char *err,
                            size_t errlen);

/* A blob of `nbytes` uninitialised bytes with one reference, in no store (a candidate's
 * host copy, server/candidates.h); NULL when out of memory. */
td__blob *td__blob_create(const char *tenant, size_t nbytes);
/* A blob with one reference, in no store, over `nbytes` at `data`, which stay owner's: the
 * last unref calls release(owner) instead of freeing them. For bytes the server already
 * holds and that nobody writes while the blob lives (a promoted upload candidate's host
 * buffer, server/candidates.h), so that they enter the store without a copy. NULL when
 * out of memory (release is not called). */
td__blob *td__blob_wrap(const char *tenant, const void *data, size_t nbytes,
                        void (*release)(void *owner), void *owner);

/* Hash blob b's own bytes in place (SHA-256 into b->hash; nobody may write them while b
 * lives) and add b itself to the store under that hash, unless the store already holds
 * (b->tenant, hash); the caller keeps its reference. For a blob made by td__blob_create
 * or td__blob_wrap and in no store: nothing is copied. *added says whether b is in the
 * store now. Writes the cache file as td__blobstore_add does. Returns TD_OK, TD_ERANGE
 * (larger than the store's cap: not kept), TD_ENOMEM; message in err. */
td_status td__blobstore_adopt(td__blobstore *bs, td__blob *b, bool *added, char *err,
                              size_t errlen);
/* With a cache directory: remember (persist) that fingerprint fp (16 bytes) of tenant's
 * bytes was promoted to blob `sha`, so that a restarted server still answers a fingerprint
 * offer (the client then offers the SHA-256, and the blob itself is verified on load);
 * td__blobstore_fingerprint reads it back (false: none). No-ops without a directory. */
void td__blobstore_note_fingerprint(td__blobstore *bs, const char *tenant, const uint8_t *fp,
                                    const uint8_t sha[TD_SHA256_BYTES]);
bool td__blobstore_fingerprint(td__blobstore *bs, const char *tenant, const uint8_t *fp,
                               uint8_t sha[TD_SHA256_BYTES]);
/* Whether the store keeps a cache directory (td__blobstore_fingerprint may find a record
 * there). Any thread. */
bool td__blobstore_on_disk(const td__blobstore *bs);

void td__blob_ref(td__blob *b);
/* NULL is a no-op. */
void td__blob_unref(td__blob *b);

void td__blobstore_stats_get(td__blobstore *bs, td__blobstore_stats *out);
#endif

/* candidates.c — unverified uploads kept under their fingerprint (see candidates.h).
 *
 * One process-wide list, most recently used first, under one mutex, like the graph cache:
 * records are few (TD_CANDIDATES_MAX_RECORDS) and are looked up once per large upload, so
 * a linear scan costs less than the upload's one round trip. Buffers are referenced and
 * promoted (hashed, and moved or copied into the store) outside the mutex, and dropped
 * records are freed after it is released: freeing a buffer returns it to its device's pool.
 */
#include "server/candidates.h"

#include "common/alloc.h"
#include "common/log.h"
#include "server/graphcache.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

typedef struct cand {
    struct cand *prev, *next;
    char *tenant; /* owned */
    td__quota *quota;
    uint8_t fp[TD_FINGERPRINT_LEN];
    size_t nbytes;
    /* The bytes, at most one of: */
    td__buffer *buf;       /* a reference to a host buffer, or the only reference to an
                            * idle device copy (no stream; charged through its quota) */
    td__blob *copy;        /* a reference to a host copy (not in the store), whose
                            * `charged` bytes are charged to quota while the record holds it */
    uint64_t charged;
    uint64_t serial;       /* tells a record from a later one at the same address */
    bool promoted;         /* no bytes: they are in the blob store under sha */
    bool promoting;        /* a thread is promoting it: other offers wait (g_promoted) */
    uint8_t sha[TD_SHA256_BYTES];
} cand;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_promoted = PTHREAD_COND_INITIALIZER; /* a promotion ended */
static cand *g_head, *g_tail;
static uint64_t g_records, g_bytes; /* g_bytes: held by records with bytes */
static uint64_t g_serial;
static uint64_t g_max_bytes = TD_CANDIDATES_MAX_BYTES;

static bool holds_bytes(const cand *c) { return c->buf != NULL || c->copy != NULL; }

/* Whether c holds a device copy on dev: a buffer there, dev without host memory (a buffer
 * of a host-memory device, the CPU, is a reference to the tensor's own bytes). */
static bool holds_device_copy(const cand *c, const td__device *dev)
{
    return c->buf != NULL && c->buf->dev == dev && !dev->backend->host_memory;
}

static void unlink_locked(cand *c)
{
    if (c->prev != NULL) c->prev->next = c->next; else g_head = c->next;
    if (c->next != NULL) c->next->prev = c->prev; else g_tail = c->prev;
    c->prev = c->next = NULL;
    g_records--;
    if (holds_bytes(c)) g_bytes -= c->nbytes;
}

static void push_front_locked(cand *c)
{
    c->prev = NULL;
    c->next = g_head;
    if (g_head != NULL) g_head->prev = c; else g_tail = c;
    g_head = c;
    g_records++;
    if (holds_bytes(c)) g_bytes += c->nbytes;
}

/* Drop the bytes a record holds (outside the mutex). */
static void drop_bytes(cand *c)
{
    td__buffer_unref(c->buf);
    c->buf = NULL;
    td__blob_unref(c->copy);
    if (c->charged > 0) td__quota_bytes_uncharge(c->quota, c->charged);
    c->copy = NULL;
    c->charged = 0;
}

static void free_list(cand *c)
{
    while (c != NULL) {
        cand *next = c->next;
        drop_bytes(c);
        td__free(c->tenant);
        td__free(c);
        c = next;
    }
}

static cand *find_locked(const char *tenant, const uint8_t *fp)
{
    for (cand *c = g_head; c != NULL; c = c->next)
        if (memcmp(c->fp, fp, TD_FINGERPRINT_LEN) == 0 && strcmp(c->tenant, tenant) == 0)
            return c;
    return NULL;
}

/* Unlink c and push it on *dropped. */
static void drop_locked(cand *c, cand **dropped)
{
    unlink_locked(c);
    c->next = *dropped;
    *dropped = c;
}

/* Enforce the caps after inserting a record of `tenant`, oldest records first. */
static void trim_locked(const char *tenant, cand **dropped)
{
    size_t mine = 0;
    for (cand *c = g_head; c != NULL; c = c->next)
        if (strcmp(c->tenant, tenant) == 0) mine++;
    for (cand *c = g_tail, *prev; c != NULL && (g_bytes > g_max_bytes ||
                                                 g_records > TD_CANDIDATES_MAX_RECORDS ||
                                                 mine > TD_CANDIDATES_MAX_PER_TENANT);
         c = prev) {
        prev = c->prev;
        bool over_bytes = g_bytes > g_max_bytes && holds_bytes(c);
        bool over_mine = mine > TD_CANDIDATES_MAX_PER_TENANT && strcmp(c->tenant, tenant) == 0;
        if (!over_bytes && !over_mine && g_records <= TD_CANDIDATES_MAX_RECORDS) continue;
        if (strcmp(c->tenant, tenant) == 0) mine--;
        drop_locked(c, dropped);
    }
}

bool td__candidates_put(const char *tenant, td__quota *q, const uint8_t fp[TD_FINGERPRINT_LEN],
                        td__buffer *buf, td__blob *copy, uint64_t copy_charged, size_t nbytes)
{
    cand *c = td__calloc(1, sizeof *c);
    char *name = c != NULL ? td__strdup(tenant) : NULL;
    if (name == NULL) {
        td__free(c);
        td__blob_unref(copy);
        if (copy_charged > 0) td__quota_bytes_uncharge(q, copy_charged);
        return false;
    }
    c->tenant = name;
    c->quota = q;
    memcpy(c->fp, fp, TD_FINGERPRINT_LEN);
    c->nbytes = nbytes;
    if (buf != NULL) {
        td__buffer_ref(buf);
        c->buf = buf;
    } else {
        c->copy = copy;
        c->charged = copy_charged;
    }
    cand *dropped = NULL;
    pthread_mutex_lock(&g_mu);
    c->serial = ++g_serial;
    cand *old = find_locked(tenant, fp);
    if (old != NULL) drop_locked(old, &dropped);
    push_front_locked(c);
    trim_locked(tenant, &dropped);
    pthread_mutex_unlock(&g_mu);
    free_list(dropped);
    return true;
}

/* Add a record (tenant, fp) -> sha that holds no bytes; false when out of memory. */
static bool add_promoted(const char *tenant, td__quota *q, const uint8_t *fp, size_t nbytes,
                         const uint8_t *sha)
{
    cand *n = td__calloc(1, sizeof *n);
    char *name = n != NULL ? td__strdup(tenant) : NULL;
    if (name == NULL) {
        td__free(n);
        return false;
    }
    n->tenant = name;
    n->quota = q;
    memcpy(n->fp, fp, TD_FINGERPRINT_LEN);
    n->nbytes = nbytes;
    n->promoted = true;
    memcpy(n->sha, sha, TD_SHA256_BYTES);
    cand *dropped = NULL;
    pthread_mutex_lock(&g_mu);
    n->serial = ++g_serial;
    cand *old = find_locked(tenant, fp);
    if (old != NULL) drop_locked(old, &dropped);
    push_front_locked(n);
    trim_locked(tenant, &dropped);
    pthread_mutex_unlock(&g_mu);
    free_list(dropped);
    return true;
}

/* td__blob_wrap's release for a promoted host buffer: the blob's reference goes. */
static void unref_buffer(void *buf) { td__buffer_unref(buf); }

/* The blob that promotes a record's bytes, hashed and in bs when *added: the host buffer
 * itself when the record held its only reference (`exclusive`: no copy, no fresh pages),
 * else a copy of it; the record's host copy itself; a device copy read back into a new
 * blob. Outside the mutex; the caller holds references to buf or copy. */
static td_status promote_bytes(td__blobstore *bs, const char *tenant, td__buffer *buf,
                               td__blob *copy, size_t nbytes, bool exclusive, td__blob **out,
                               bool *added, uint8_t sha[TD_SHA256_BYTES], char *err,
                               size_t errlen)
{
    td__blob *b = NULL;
    td_status st = TD_OK;
    *added = false;
    if (copy != NULL) {
        td__blob_ref(copy); /* filled once when kept, never written since */
        b = copy;
    } else if (!buf->dev->backend->host_memory) {
        st = (b = td__blob_create(tenant, nbytes)) == NULL
                 ? TD_ENOMEM
                 : buf->dev->backend->buffer_read(buf->dev, NULL, buf->data, 0, b->data, nbytes);
        if (st != TD_OK)
            snprintf(err, errlen, "reading its device copy on %s: %s", buf->dev->name,
                     td_status_message(st));
    } else if (exclusive) {
        /* Nothing else can write the buffer: no tensor refers to it, and a write to one
         * that did would copy it first (copy-on-write). */
        if ((b = td__blob_wrap(tenant, buf->data, nbytes, unref_buffer, buf)) == NULL) {
            snprintf(err, errlen, "out of memory for a blob");
            st = TD_ENOMEM;
        } else {
            td__buffer_ref(buf);
        }
    } else { /* a live tensor shares the buffer: the store gets a copy */
        st = td__blobstore_add(bs, tenant, buf->data, nbytes, sha, err, errlen);
        *added = st == TD_OK;
        *out = NULL;
        return st;
    }
    if (st == TD_OK) st = td__blobstore_adopt(bs, b, added, err, errlen);
    if (st == TD_OK) memcpy(sha, b->hash, TD_SHA256_BYTES);
    if (st != TD_OK) {
        td__blob_unref(b);
        b = NULL;
    }
    *out = b;
    return st;
}

bool td__candidates_offer(td__blobstore *bs, const char *tenant,
                          const uint8_t fp[TD_FINGERPRINT_LEN])
{
    pthread_mutex_lock(&g_mu);
    cand *c = find_locked(tenant, fp);
    while (c != NULL && c->promoting) { /* another thread promotes it: wait for that */
        pthread_cond_wait(&g_promoted, &g_mu);
        c = find_locked(tenant, fp);
    }
    if (c != NULL) { /* most recently used first */
        unlink_locked(c);
        push_front_locked(c);
    }
    if (c == NULL || c->promoted || bs == NULL) {
        bool known = c != NULL && c->promoted;
        pthread_mutex_unlock(&g_mu);
        uint8_t sha[TD_SHA256_BYTES];
        /* Promoted by an earlier run of the server (a cache directory): the blob itself is
         * verified when the client's SHA-256 offer loads it. */
        if (!known && c == NULL && bs != NULL && td__blobstore_fingerprint(bs, tenant, fp, sha))
            known = add_promoted(tenant, NULL, fp, 0, sha);
        return known;
    }
    /* References to the bytes, so that they outlive an eviction during the hash. Only this
     * thread takes references through a promoting record, so a host buffer the record
     * holds alone stays this promotion's alone. */
    td__buffer *buf = c->buf;
    td__blob *copy = c->copy;
    const bool exclusive =
        buf != NULL && buf->dev->backend->host_memory && atomic_load(&buf->refs) == 1;
    if (buf != NULL) td__buffer_ref(buf);
    if (copy != NULL) td__blob_ref(copy);
    size_t nbytes = c->nbytes;
    uint64_t serial = c->serial;
    c->promoting = true;
    pthread_mutex_unlock(&g_mu);

    uint8_t sha[TD_SHA256_BYTES];
    char err[256];
    td__blob *b = NULL;
    bool added = false;
    td_status st = promote_bytes(bs, tenant, buf, copy, nbytes, exclusive, &b, &added, sha, err,
                                 sizeof err);
    if (st != TD_OK)
        td__log(TD_LOG_DEBUG, "candidate of tenant '%s' not promoted: %s", tenant, err);

    /* The record becomes (fp -> sha) in place, under the mutex: there is never a moment
     * without a record under fp, which the receive side's early "absent" relies on
     * (td__candidates_known). Its bytes are dropped after the mutex. */
    cand held = {0};
    pthread_mutex_lock(&g_mu);
    /* A buffer that went into the store whole is the store's now, no longer the tenant's:
     * its charge goes, as a copy's would have gone with the buffer. Only the references of
     * this promotion, the blob and the record hold it, and quota readers take the mutex. */
    if (added && exclusive && buf->quota != NULL) {
        td__quota_bytes_uncharge(buf->quota, buf->quota_bytes);
        buf->quota = NULL;
        buf->quota_bytes = 0;
    }
    c = find_locked(tenant, fp);
    if (c != NULL && c->serial == serial) c->promoting = false;
    bool mine = st == TD_OK && c != NULL && c->serial == serial; /* not replaced meanwhile */
    if (mine) {
        unlink_locked(c);
        held.quota = c->quota;
        held.buf = c->buf;
        held.copy = c->copy;
        held.charged = c->charged;
        c->buf = NULL;
        c->copy = NULL;
        c->charged = 0;
        c->promoted = true;
        memcpy(c->sha, sha, TD_SHA256_BYTES);
        push_front_locked(c);
    }
    pthread_cond_broadcast(&g_promoted);
    pthread_mutex_unlock(&g_mu);
    drop_bytes(&held);
    if (mine) td__blobstore_note_fingerprint(bs, tenant, fp, sha);
    td__blob_unref(b);
    td__buffer_unref(buf);
    td__blob_unref(copy);
    return st == TD_OK;
}

bool td__candidates_known(const char *tenant, const uint8_t fp[TD_FINGERPRINT_LEN])
{
    pthread_mutex_lock(&g_mu);
    const bool known = find_locked(tenant, fp) != NULL;
    pthread_mutex_unlock(&g_mu);
    return known;
}

void td__candidates_forget(const td__buffer *buf)
{
    cand *dropped = NULL;
    pthread_mutex_lock(&g_mu);
    for (cand *c = g_head, *next; c != NULL; c = next) {
        next = c->next;
        if (c->buf == buf) drop_locked(c, &dropped); /* a raw client may name it twice */
    }
    pthread_mutex_unlock(&g_mu);
    free_list(dropped);
}

uint64_t td__candidates_reclaim_device(td__device *dev, uint64_t need)
{
    /* Drop nothing that could not help: a request larger than the device's free memory
     * plus every copy it holds (a 200 GiB tensor) would otherwise flush every tenant's
     * candidates on the device for nothing. */
    uint64_t total = 0, free_bytes = 0;
    const bool known = dev->backend->memory_info != NULL &&
                       dev->backend->memory_info(dev, &total, &free_bytes) == TD_OK;
    cand *dropped = NULL;
    uint64_t freed = 0, held = 0;
    pthread_mutex_lock(&g_mu);
    for (cand *c = g_head; c != NULL; c = c->next)
        if (holds_device_copy(c, dev)) held += c->buf->nbytes;
    if (held == 0 || (known && held + free_bytes < need)) {
        pthread_mutex_unlock(&g_mu);
        return 0;
    }
    for (cand *c = g_tail, *prev; c != NULL && freed < need; c = prev) {
        prev = c->prev;
        if (!holds_device_copy(c, dev)) continue;
        freed += c->buf->nbytes;
        drop_locked(c, &dropped);
    }
    pthread_mutex_unlock(&g_mu);
    free_list(dropped);
    if (freed > 0)
        td__log(TD_LOG_DEBUG, "%s was full: dropped %llu bytes of upload candidates' copies",
                dev->name, (unsigned long long)freed);
    return freed;
}

uint64_t td__server_reclaim(td__quota *q, uint64_t need)
{
    cand *dropped = NULL;
    uint64_t freed = 0;
    pthread_mutex_lock(&g_mu);
    /* Only bytes nothing else holds go back to the quota when dropped. */
    for (cand *c = g_tail, *prev; c != NULL && freed < need; c = prev) {
        prev = c->prev;
        if (c->quota != q || !holds_bytes(c)) continue;
        if (c->buf != NULL) {
            if (c->buf->quota != q || atomic_load(&c->buf->refs) != 1) continue;
            freed += c->buf->quota_bytes;
        } else {
            freed += c->charged;
        }
        drop_locked(c, &dropped);
    }
    pthread_mutex_unlock(&g_mu);
    free_list(dropped);
    if (freed < need) freed += td__graphcache_reclaim(q, need - freed);
    return freed;
}

void td__candidates_configure(uint64_t max_bytes)
{
    pthread_mutex_lock(&g_mu);
    g_max_bytes = max_bytes != 0 ? max_bytes : TD_CANDIDATES_MAX_BYTES;
    pthread_mutex_unlock(&g_mu);
}

void td__candidates_flush(td__blobstore *bs)
{
    typedef struct { char tenant[TD_TENANT_NAME_MAX]; uint8_t fp[TD_FINGERPRINT_LEN]; } key;
    pthread_mutex_lock(&g_mu);
    size_t n = 0;
    key *keys = td__calloc(g_records > 0 ? g_records : 1, sizeof *keys);
    for (cand *c = g_head; keys != NULL && c != NULL; c = c->next) {
        if (!holds_bytes(c)) continue;
        snprintf(keys[n].tenant, sizeof keys[n].tenant, "%s", c->tenant);
        memcpy(keys[n].fp, c->fp, TD_FINGERPRINT_LEN);
        n++;
    }
    pthread_mutex_unlock(&g_mu);
    for (size_t i = 0; i < n; i++) (void)td__candidates_offer(bs, keys[i].tenant, keys[i].fp);
    td__free(keys);
}

void td__candidates_stats(uint64_t *records, uint64_t *bytes)
{
    pthread_mutex_lock(&g_mu);
    *records = g_records;
    *bytes = g_bytes;
    pthread_mutex_unlock(&g_mu);
}

void td__candidates_clear(void)
{
    pthread_mutex_lock(&g_mu);
    cand *list = g_head;
    g_head = g_tail = NULL;
    g_records = g_bytes = 0;
    pthread_mutex_unlock(&g_mu);
    free_list(list);
}

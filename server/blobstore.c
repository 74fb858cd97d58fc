/* blobstore.c — content-addressed blob store: memory LRU plus optional disk copy (see
 * blobstore.h).
 *
 * Index: a td__idmap keyed by the first 8 bytes of the hash (uniformly distributed for
 * SHA-256), with a short chain per key for the rare equal prefixes and for different
 * tenants storing the same bytes. The LRU is a doubly linked list under one mutex; blob
 * bytes are copied and hashed, and files read and written, outside it, so one large blob
 * does not stall every other session's lookups.
 *
 * Disk layout: DIR/<64 hex digits>.blob for tenant "", DIR/<16 hex of SHA-256(tenant)>-
 * <64 hex>.blob otherwise. Files are written to a temporary name and renamed, so a reader
 * (or a server restarted after a crash) never sees half a file; they are verified on every
 * load anyway. The directory is not size-capped (prune it with find -atime).
 */
#include "server/blobstore.h"

#include "common/alloc.h"
#include "common/idmap.h"
#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define BS_COPY_PIECE ((size_t)1 << 20)

struct td__blobstore {
    pthread_mutex_t mu;
    uint64_t cap;
    char *dir; /* NULL: no disk copy */
    td__idmap index;
    td__blob *lru_head, *lru_tail;
    td__blobstore_stats st;
    atomic_ullong tmp_counter;
};

static uint64_t index_key(const uint8_t *hash)
{
    uint64_t k;
    memcpy(&k, hash, sizeof k);
    return k;
}

void td__blob_ref(td__blob *b) { atomic_fetch_add(&b->refs, 1); }

void td__blob_unref(td__blob *b)
{
    if (b == NULL || atomic_fetch_sub(&b->refs, 1) != 1) return;
    if (b->release != NULL)
        b->release(b->owner);
    else
        td__free(b->data);
    td__free(b->tenant);
    td__free(b);
}

static td__blob *blob_new(const char *tenant, size_t nbytes)
{
    td__blob *b = td__calloc(1, sizeof *b);
    if (b == NULL) return NULL;
    atomic_init(&b->refs, 1);
    b->tenant = td__strdup(tenant);
    b->nbytes = nbytes;
    b->data = nbytes > 0 ? td__malloc(nbytes) : NULL;
    if (b->tenant == NULL || (nbytes > 0 && b->data == NULL)) {
        td__free(b->data);
        td__free(b->tenant);
        td__free(b);
        return NULL;
    }
    return b;
}

td__blob *td__blob_create(const char *tenant, size_t nbytes) { return blob_new(tenant, nbytes); }

td__blob *td__blob_wrap(const char *tenant, const void *data, size_t nbytes,
                        void (*release)(void *owner), void *owner)
{
    td__blob *b = blob_new(tenant, 0);
    if (b == NULL) return NULL;
    b->nbytes = nbytes;
    b->data = (uint8_t *)(uintptr_t)data; /* never written through a blob */
    b->release = release;
    b->owner = owner;
    return b;
}

td_status td__blobstore_create(uint64_t cap_bytes, const char *cache_dir, td__blobstore **out,
                               char *err, size_t errlen)
{
    td__blobstore *bs = td__calloc(1, sizeof *bs);
    if (bs == NULL) {
        snprintf(err, errlen, "out of memory for the blob store");
        return TD_ENOMEM;
    }
    bs->cap = cap_bytes != 0 ? cap_bytes : TD_BLOBSTORE_DEFAULT_BYTES;
    td__idmap_init(&bs->index);
    pthread_mutex_init(&bs->mu, NULL);
    if (cache_dir != NULL && cache_dir[0] != '\0') {
        if (mkdir(cache_dir, 0700) != 0 && errno != EEXIST) {
            snprintf(err, errlen, "cannot create cache directory %s: %s", cache_dir,
                     strerror(errno));
            td__blobstore_destroy(bs);
            return TD_EIO;
        }
        struct stat sb;
        if (stat(cache_dir, &sb) != 0 || !S_ISDIR(sb.st_mode) ||
            access(cache_dir, R_OK | W_OK | X_OK) != 0) {
            snprintf(err, errlen, "cache directory %s is not a writable directory", cache_dir);
            td__blobstore_destroy(bs);
            return TD_EIO;
        }
        bs->dir = td__strdup(cache_dir);
        if (bs->dir == NULL) {
            snprintf(err, errlen, "out of memory for the blob store");
            td__blobstore_destroy(bs);
            return TD_ENOMEM;
        }
    }
    *out = bs;
    return TD_OK;
}

void td__blobstore_destroy(td__blobstore *bs)
{
    if (bs == NULL) return;
    td__blob *b = bs->lru_head;
    while (b != NULL) {
        td__blob *next = b->lru_next;
        b->in_store = false;
        td__blob_unref(b);
        b = next;
    }
    td__idmap_fini(&bs->index);
    pthread_mutex_destroy(&bs->mu);
    td__free(bs->dir);
    td__free(bs);
}

/* ---- index and LRU (caller holds mu) ---- */

static td__blob *find_locked(td__blobstore *bs, const char *tenant, const uint8_t *hash)
{
    for (td__blob *b = td__idmap_get(&bs->index, index_key(hash)); b != NULL; b = b->chain)
        if (memcmp(b->hash, hash, TD_SHA256_BYTES) == 0 && strcmp(b->tenant, tenant) == 0)
            return b;
    return NULL;
}

static void lru_unlink(td__blobstore *bs, td__blob *b)
{
    if (b->lru_prev) b->lru_prev->lru_next = b->lru_next;
    else bs->lru_head = b->lru_next;
    if (b->lru_next) b->lru_next->lru_prev = b->lru_prev;
    else bs->lru_tail = b->lru_prev;
    b->lru_prev = b->lru_next = NULL;
}

static void lru_push_front(td__blobstore *bs, td__blob *b)
{
    b->lru_prev = NULL;
    b->lru_next = bs->lru_head;
    if (bs->lru_head) bs->lru_head->lru_prev = b;
    bs->lru_head = b;
    if (bs->lru_tail == NULL) bs->lru_tail = b;
}

/* Remove b from index and LRU; returns the store's reference for the caller to drop. */
static td__blob *remove_locked(td__blobstore *bs, td__blob *b)
{
    uint64_t k = index_key(b->hash);
    td__blob *first = td__idmap_get(&bs->index, k);
    if (first == b) {
        if (b->chain != NULL) td__idmap_put(&bs->index, k, b->chain); /* replace: no alloc */
        else td__idmap_del(&bs->index, k);
    } else {
        for (td__blob *p = first; p != NULL; p = p->chain)
            if (p->chain == b) {
                p->chain = b->chain;
                break;
            }
    }
    b->chain = NULL;
    lru_unlink(bs, b);
    b->in_store = false;
    bs->st.blobs--;
    bs->st.bytes -= b->nbytes;
    return b;
}

/* Insert b (the store takes a new reference), evicting from the LRU tail until it fits.
 * Returns the list of evicted blobs (linked through chain) to unref after unlocking. */
static td__blob *insert_locked(td__blobstore *bs, td__blob *b, bool *ok)
{
    td__blob *evicted = NULL;
    *ok = false;
    while (bs->lru_tail != NULL && bs->st.bytes + b->nbytes > bs->cap) {
        td__blob *victim = remove_locked(bs, bs->lru_tail);
        victim->chain = evicted;
        evicted = victim;
        bs->st.evictions++;
    }
    uint64_t k = index_key(b->hash);
    b->chain = td__idmap_get(&bs->index, k);
    if (!td__idmap_put(&bs->index, k, b)) {
        b->chain = NULL;
        return evicted;
    }
    td__blob_ref(b);
    b->in_store = true;
    lru_push_front(bs, b);
    bs->st.blobs++;
    bs->st.bytes += b->nbytes;
    *ok = true;
    return evicted;
}

static void unref_chain(td__blob *list)
{
    while (list != NULL) {
        td__blob *next = list->chain;
        list->chain = NULL;
        td__blob_unref(list);
        list = next;
    }
}

/* ---- disk ---- */

static void blob_path(const td__blobstore *bs, const char *tenant, const uint8_t *hash,
                      char *buf, size_t len)
{
    char hex[TD_SHA256_HEX];
    td__sha256_hex(hash, hex);
    if (tenant[0] == '\0') {
        snprintf(buf, len, "%s/%s.blob", bs->dir, hex);
        return;
    }
    uint8_t th[TD_SHA256_BYTES];
    char thex[TD_SHA256_HEX];
    if (!td__sha256(tenant, strlen(tenant), th)) memset(th, 0, sizeof th);
    td__sha256_hex(th, thex);
    snprintf(buf, len, "%s/%.16s-%s.blob", bs->dir, thex, hex);
}

static bool read_all(int fd, uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return false;
        p += r;
        n -= (size_t)r;
    }
    return true;
}

static bool write_all(int fd, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

/* Read and verify the cache file of (tenant, hash); NULL when absent or rejected. */
static td__blob *disk_load(td__blobstore *bs, const char *tenant, const uint8_t *hash)
{
    char path[4096];
    blob_path(bs, tenant, hash, path, sizeof path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return NULL;
    struct stat sb;
    td__blob *b = NULL;
    bool reject = false;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size < 0 ||
        (uint64_t)sb.st_size > bs->cap) {
        close(fd);
        return NULL;
    }
    b = blob_new(tenant, (size_t)sb.st_size);
    if (b == NULL) {
        close(fd);
        return NULL;
    }
    uint8_t got[TD_SHA256_BYTES];
    if (!read_all(fd, b->data, b->nbytes) || !td__sha256(b->data, b->nbytes, got) ||
        memcmp(got, hash, TD_SHA256_BYTES) != 0)
        reject = true;
    close(fd);
    if (reject) {
        char hex[TD_SHA256_HEX];
        td__sha256_hex(hash, hex);
        td__log(TD_LOG_WARN, "blob cache: %s does not hash to its name; deleting it", path);
        unlink(path);
        td__blob_unref(b);
        pthread_mutex_lock(&bs->mu);
        bs->st.disk_rejects++;
        pthread_mutex_unlock(&bs->mu);
        return NULL;
    }
    memcpy(b->hash, hash, TD_SHA256_BYTES);
    return b;
}

/* Write `n` bytes to `path` through a temporary name and a rename. */
static bool write_file(td__blobstore *bs, const char *path, const uint8_t *p, size_t n)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%llu", path, (long)getpid(),
             (unsigned long long)atomic_fetch_add(&bs->tmp_counter, 1));
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) return false;
    bool ok = write_all(fd, p, n);
    if (close(fd) != 0) ok = false;
    if (!ok || rename(tmp, path) != 0) {
        unlink(tmp);
        return false;
    }
    return true;
}

/* DIR/...<32 hex of fp>.fp: the SHA-256 a fingerprint was promoted to (server/candidates.h). */
static void fp_path(const td__blobstore *bs, const char *tenant, const uint8_t *fp, char *buf,
                    size_t len)
{
    uint8_t k[TD_SHA256_BYTES] = {0};
    memcpy(k, fp, 16);
    blob_path(bs, tenant, k, buf, len);
    size_t l = strlen(buf); /* ends in 32 zero hex digits and ".blob" */
    if (l >= 37) snprintf(buf + l - 37, len - (l - 37), ".fp");
}

void td__blobstore_note_fingerprint(td__blobstore *bs, const char *tenant, const uint8_t *fp,
                                    const uint8_t sha[TD_SHA256_BYTES])
{
    if (bs->dir == NULL) return;
    char path[4096];
    fp_path(bs, tenant, fp, path, sizeof path);
    if (!write_file(bs, path, sha, TD_SHA256_BYTES))
        td__log(TD_LOG_WARN, "blob cache: cannot write %s: %s", path, strerror(errno));
}

bool td__blobstore_on_disk(const td__blobstore *bs) { return bs->dir != NULL; }

bool td__blobstore_fingerprint(td__blobstore *bs, const char *tenant, const uint8_t *fp,
                               uint8_t sha[TD_SHA256_BYTES])
{
    if (bs->dir == NULL) return false;
    char path[4096];
    fp_path(bs, tenant, fp, path, sizeof path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    bool ok = read_all(fd, sha, TD_SHA256_BYTES);
    close(fd);
    return ok;
}

/* Write b's cache file; an existing file is kept unless `replace` (it may be one that failed
 * verification and is still there because nobody looked it up). */
static void disk_store(td__blobstore *bs, const td__blob *b, bool replace)
{
    char path[4096], tmp[4200];
    blob_path(bs, b->tenant, b->hash, path, sizeof path);
    if (!replace && access(path, F_OK) == 0) return;
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%llu", path, (long)getpid(),
             (unsigned long long)atomic_fetch_add(&bs->tmp_counter, 1));
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        td__log(TD_LOG_WARN, "blob cache: cannot create %s: %s", tmp, strerror(errno));
        return;
    }
    bool ok = write_all(fd, b->data, b->nbytes);
    if (close(fd) != 0) ok = false;
    if (!ok || rename(tmp, path) != 0) {
        td__log(TD_LOG_WARN, "blob cache: cannot write %s: %s", path, strerror(errno));
        unlink(tmp);
    }
}

/* ---- public ---- */

td__blob *td__blobstore_get(td__blobstore *bs, const char *tenant,
                            const uint8_t hash[TD_SHA256_BYTES])
{
    pthread_mutex_lock(&bs->mu);
    td__blob *b = find_locked(bs, tenant, hash);
    if (b != NULL) {
        lru_unlink(bs, b);
        lru_push_front(bs, b);
        td__blob_ref(b);
        bs->st.hits++;
    } else if (bs->dir == NULL) {
        bs->st.misses++;
    }
    pthread_mutex_unlock(&bs->mu);
    if (b != NULL || bs->dir == NULL) return b;

    td__blob *loaded = disk_load(bs, tenant, hash);
    pthread_mutex_lock(&bs->mu);
    if (loaded == NULL) {
        bs->st.misses++;
        pthread_mutex_unlock(&bs->mu);
        return NULL;
    }
    td__blob *evicted = NULL;
    b = find_locked(bs, tenant, hash); /* another session may have loaded it meanwhile */
    if (b != NULL) {
        td__blob_ref(b);
        bs->st.hits++;
    } else {
        bool ok;
        evicted = insert_locked(bs, loaded, &ok);
        bs->st.disk_loads++;
        bs->st.hits++;
        b = loaded;
        td__blob_ref(b);
    }
    pthread_mutex_unlock(&bs->mu);
    td__blob_unref(loaded);
    unref_chain(evicted);
    return b;
}

/* A new blob (not in the store) holding a copy of `nbytes` at src, and the SHA-256 of that
 * copy in b->hash: copied and hashed piece by piece, so each piece is hashed while it is
 * in cache, and the hash is of the blob's own bytes even if src changed meanwhile. */
static td_status copy_hash(const char *tenant, const void *src, size_t nbytes, td__blob **out,
                           char *err, size_t errlen)
{
    td__blob *b = blob_new(tenant, nbytes);
    td__sha256_ctx *hc = b != NULL ? td__sha256_begin() : NULL;
    if (hc == NULL) {
        td__blob_unref(b);
        snprintf(err, errlen, "out of memory for a %zu-byte blob", nbytes);
        return TD_ENOMEM;
    }
    bool ok = true;
    for (size_t off = 0; ok && off < nbytes; off += BS_COPY_PIECE) {
        size_t n = nbytes - off < BS_COPY_PIECE ? nbytes - off : BS_COPY_PIECE;
        memcpy(b->data + off, (const uint8_t *)src + off, n);
        ok = td__sha256_update(hc, b->data + off, n);
    }
    if (!ok) td__sha256_abort(hc);
    if (!ok || !td__sha256_final(hc, b->hash)) {
        td__blob_unref(b);
        snprintf(err, errlen, "out of memory hashing a %zu-byte blob", nbytes);
        return TD_ENOMEM;
    }
    *out = b;
    return TD_OK;
}

/* Insert b (the caller keeps its reference) unless (tenant, hash) is already stored, and
 * write its cache file (disk_store's `replace`); true when b was inserted. */
static bool insert_new(td__blobstore *bs, td__blob *b, bool replace)
{
    td__blob *evicted = NULL;
    bool inserted = false;
    pthread_mutex_lock(&bs->mu);
    if (find_locked(bs, b->tenant, b->hash) == NULL) evicted = insert_locked(bs, b, &inserted);
    pthread_mutex_unlock(&bs->mu);
    unref_chain(evicted);
    if (inserted && bs->dir != NULL) disk_store(bs, b, replace);
    return inserted;
}

td_status td__blobstore_put(td__blobstore *bs, const char *tenant,
                            const uint8_t hash[TD_SHA256_BYTES], const void *src, size_t nbytes,
                            char *err, size_t errlen)
{
    if (nbytes > bs->cap) return TD_OK;
    pthread_mutex_lock(&bs->mu);
    bool have = find_locked(bs, tenant, hash) != NULL;
    pthread_mutex_unlock(&bs->mu);
    if (have) return TD_OK;

    td__blob *b;
    td_status st = copy_hash(tenant, src, nbytes, &b, err, errlen);
    if (st != TD_OK) return st;
    if (memcmp(b->hash, hash, TD_SHA256_BYTES) != 0) {
        char want[TD_SHA256_HEX], have_hex[TD_SHA256_HEX];
        td__sha256_hex(hash, want);
        td__sha256_hex(b->hash, have_hex);
        td__blob_unref(b);
        snprintf(err, errlen, "blob %.16s...: the %zu bytes hash to %.16s..., not to the offered "
                 "hash; not stored", want, nbytes, have_hex);
        return TD_EINVAL;
    }
    insert_new(bs, b, false);
    td__blob_unref(b);
    return TD_OK;
}

td_status td__blobstore_add(td__blobstore *bs, const char *tenant, const void *src,
                            size_t nbytes, uint8_t hash[TD_SHA256_BYTES], char *err,
                            size_t errlen)
{
    if (nbytes > bs->cap) {
        snprintf(err, errlen, "a %zu-byte blob is larger than the store (%llu bytes)", nbytes,
                 (unsigned long long)bs->cap);
        return TD_ERANGE;
    }
    td__blob *b;
    td_status st = copy_hash(tenant, src, nbytes, &b, err, errlen);
    if (st != TD_OK) return st;
    memcpy(hash, b->hash, TD_SHA256_BYTES);
    insert_new(bs, b, true);
    td__blob_unref(b);
    return TD_OK;
}

td_status td__blobstore_adopt(td__blobstore *bs, td__blob *b, bool *added, char *err,
                              size_t errlen)
{
    *added = false;
    if (b->nbytes > bs->cap) {
        snprintf(err, errlen, "a %zu-byte blob is larger than the store (%llu bytes)", b->nbytes,
                 (unsigned long long)bs->cap);
        return TD_ERANGE;
    }
    if (!td__sha256(b->data, b->nbytes, b->hash)) {
        snprintf(err, errlen, "out of memory hashing a %zu-byte blob", b->nbytes);
        return TD_ENOMEM;
    }
    *added = insert_new(bs, b, true);
    return TD_OK;
}

void td__blobstore_stats_get(td__blobstore *bs, td__blobstore_stats *out)
{
    pthread_mutex_lock(&bs->mu);
    *out = bs->st;
    pthread_mutex_unlock(&bs->mu);
}

/* Promotion of upload candidates held in host memory (server/candidates.h), on the real CPU
 * device: a candidate whose buffer nothing else holds enters the blob store as that buffer
 * (no copy into fresh pages: issue 12, a repeated upload must not cost more than a fresh
 * one) and stops counting against the tenant; one that a live tensor shares is copied, and
 * the tensor's later writes never reach the store. Expected hashes come from OpenSSL's
 * SHA256, not from the code under test. */
#include "engine/device.h"
#include "engine/session.h"
#include "engine/tensor.h"
#include "server/blobstore.h"
#include "server/candidates.h"

#include <criterion/criterion.h>
#include <openssl/sha.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum { N = 3 << 20 };

static td__quota q;
static td__session *s;
static td__blobstore *bs;

static void setup(void)
{
    char err[256];
    cr_assert_eq(td__devices_init(err, sizeof err), TD_OK, "%s", err);
    td__quota_init(&q, "t1");
    td__session_limits lim = {.max_bytes = 1 << 28, .max_tensors = 100, .quota = &q};
    cr_assert_eq(td__session_create(td__device_find("cpu"), &lim, &s), TD_OK);
    cr_assert_eq(td__blobstore_create(1 << 28, NULL, &bs, err, sizeof err), TD_OK, "%s", err);
    td__candidates_clear();
}
static void teardown(void)
{
    td__candidates_clear();
    td__blobstore_destroy(bs);
    td__session_destroy(s);
}
TestSuite(candidates_host, .init = setup, .fini = teardown);

static void on_fail(void *arg, uint32_t idx, td_status st, const char *msg)
{
    (void)arg, (void)idx, (void)st;
    cr_assert_fail("op failed: %s", msg);
}

/* Tensor `id` of N u8 holding bytes i * 7 + seed (also into `bytes`), kept as a candidate
 * of tenant t1 under its fingerprint `fp`, as StoreBlob with a fingerprint does; returns
 * its buffer (a reference the caller drops). */
static td__buffer *keep(uint64_t id, unsigned seed, uint8_t *bytes, uint8_t *fp)
{
    td__op op = {.opcode = TD_OP_FULL, .dtype = TD_U8, .output = id, .n_iattrs = 1,
                 .iattrs = {N}, .fattrs = {0, 0}};
    cr_assert_eq(td__session_exec(s, &op, 1, on_fail, NULL), 0);
    for (size_t i = 0; i < N; i++) bytes[i] = (uint8_t)(i * 7 + seed);
    char err[256];
    cr_assert_eq(td__session_write(s, id, 0, bytes, N, err, sizeof err), TD_OK, "%s", err);
    td__desc desc;
    td__buffer *buf = NULL;
    cr_assert_eq(td__session_lookup(s, id, &desc, &buf, err, sizeof err), TD_OK, "%s", err);
    cr_assert_not_null(buf, "the CPU device has host memory");
    cr_assert(td__fingerprint(bytes, N, fp));
    cr_assert(td__candidates_put("t1", &q, fp, buf, NULL, 0, N));
    return buf;
}

static td__blob *stored(const uint8_t *bytes)
{
    uint8_t want[SHA256_DIGEST_LENGTH];
    SHA256(bytes, N, want);
    return td__blobstore_get(bs, "t1", want);
}

Test(candidates_host, a_candidate_held_alone_enters_the_store_without_a_copy)
{
    static uint8_t bytes[N];
    uint8_t fp[TD_FINGERPRINT_LEN];
    td__buffer *buf = keep(1, 3, bytes, fp);
    const void *data = buf->data;
    td__buffer_unref(buf);
    td__session_release(s, (uint64_t[]){1}, 1); /* the record holds the only reference */
    cr_assert_geq(atomic_load(&q.bytes), (uint64_t)N, "the candidate counts for the tenant");
    const uint64_t live = td__buffer_live_count();

    cr_assert(td__candidates_offer(bs, "t1", fp));
    td__blob *b = stored(bytes);
    cr_assert_not_null(b, "the store holds the upload's bytes under their SHA-256");
    cr_assert_eq(b->nbytes, (size_t)N);
    cr_assert_eq((const void *)b->data, data, "the store took the buffer itself, no copy");
    cr_assert_arr_eq(b->data, bytes, N);
    cr_assert_eq(td__buffer_live_count(), live, "no buffer freed or made");
    cr_assert_eq(atomic_load(&q.bytes), 0, "the store's bytes are not the tenant's");
    uint64_t records, held;
    td__candidates_stats(&records, &held);
    cr_assert_eq(records, 1);
    cr_assert_eq(held, 0, "the record keeps only the hash");
    cr_assert(td__candidates_offer(bs, "t1", fp), "a promoted record answers at once");
    td__blob_unref(b);

    /* The store's last reference frees the buffer, and charges nobody back. */
    td__blobstore_destroy(bs);
    bs = NULL;
    cr_assert_eq(td__buffer_live_count(), live - 1);
    cr_assert_eq(atomic_load(&q.bytes), 0);
    char err[256];
    cr_assert_eq(td__blobstore_create(1 << 28, NULL, &bs, err, sizeof err), TD_OK, "%s", err);
}

Test(candidates_host, a_candidate_a_live_tensor_shares_is_copied)
{
    static uint8_t bytes[N], other[N];
    uint8_t fp[TD_FINGERPRINT_LEN];
    td__buffer *buf = keep(1, 5, bytes, fp);
    const void *data = buf->data;
    td__buffer_unref(buf);
    const uint64_t charged = atomic_load(&q.bytes);

    cr_assert(td__candidates_offer(bs, "t1", fp));
    td__blob *b = stored(bytes);
    cr_assert_not_null(b);
    cr_assert_neq((const void *)b->data, data, "tensor 1 still uses its buffer: a copy");
    cr_assert_eq(atomic_load(&q.bytes), charged, "the tensor's buffer is still the tenant's");
    /* the tensor's next write goes to its buffer, never to the stored bytes */
    for (size_t i = 0; i < N; i++) other[i] = (uint8_t)(i * 13 + 1);
    char err[256];
    cr_assert_eq(td__session_write(s, 1, 0, other, N, err, sizeof err), TD_OK, "%s", err);
    cr_assert_arr_eq(b->data, bytes, N);
    td__blob_unref(b);
}

Test(candidates_host, a_candidate_whose_bytes_are_stored_already_is_freed)
{
    static uint8_t bytes[N];
    uint8_t fp[TD_FINGERPRINT_LEN];
    td__buffer_unref(keep(1, 9, bytes, fp));
    td__session_release(s, (uint64_t[]){1}, 1);
    cr_assert(td__candidates_offer(bs, "t1", fp));
    const uint64_t live = td__buffer_live_count();
    /* the same bytes uploaded again, kept again (replacing the promoted record) */
    td__buffer_unref(keep(2, 9, bytes, fp));
    td__session_release(s, (uint64_t[]){2}, 1);
    cr_assert_eq(td__buffer_live_count(), live + 1);
    cr_assert(td__candidates_offer(bs, "t1", fp));
    cr_assert_eq(td__buffer_live_count(), live, "the second buffer went, the store had them");
    cr_assert_eq(atomic_load(&q.bytes), 0);
    td__blobstore_stats st;
    td__blobstore_stats_get(bs, &st);
    cr_assert_eq(st.blobs, 1);
    td__blob *b = stored(bytes);
    cr_assert_not_null(b);
    cr_assert_arr_eq(b->data, bytes, N);
    td__blob_unref(b);
}

typedef struct {
    const uint8_t *fp;
    bool answer;
} offer_arg;

static void *offer_thread(void *p)
{
    offer_arg *a = p;
    a->answer = td__candidates_offer(bs, "t1", a->fp);
    return NULL;
}

Test(candidates_host, concurrent_offers_of_one_candidate_promote_it_once)
{
    static uint8_t bytes[N];
    uint8_t fp[TD_FINGERPRINT_LEN];
    td__buffer *buf = keep(1, 11, bytes, fp);
    const void *data = buf->data;
    td__buffer_unref(buf);
    td__session_release(s, (uint64_t[]){1}, 1);
    enum { K = 4 };
    pthread_t th[K];
    offer_arg args[K];
    for (int i = 0; i < K; i++) {
        args[i] = (offer_arg){.fp = fp};
        cr_assert_eq(pthread_create(&th[i], NULL, offer_thread, &args[i]), 0);
    }
    for (int i = 0; i < K; i++) {
        pthread_join(th[i], NULL);
        cr_expect(args[i].answer, "offer %d answered absent", i);
    }
    td__blob *b = stored(bytes);
    cr_assert_not_null(b);
    cr_assert_eq((const void *)b->data, data, "stored as the buffer itself");
    td__blobstore_stats st;
    td__blobstore_stats_get(bs, &st);
    cr_assert_eq(st.blobs, 1);
    cr_assert_eq(atomic_load(&q.bytes), 0);
    td__blob_unref(b);
}

/* Upload candidates on a device without host memory (issue 12: a GPU candidate is a
 * device-to-device copy, not a host copy on the fence path). Runs the engine and the
 * server's candidate list against a stand-in device whose "device memory" is malloc'd but
 * which the engine must treat as a GPU (host_memory false): every copy, sync and free it
 * is asked for is counted, so the tests see which backend entries the code used.
 * Expected hashes come from OpenSSL's SHA256, not from the code under test. */
#include "engine/device.h"
#include "engine/session.h"
#include "engine/tensor.h"
#include "server/blobstore.h"
#include "server/candidates.h"

#include <criterion/criterion.h>
#include <openssl/sha.h>
#include <stdlib.h>
#include <string.h>

/* ---- the stand-in device ---- */
static int n_copy, n_sync, n_free_wait, n_free_stream, n_free_idle, n_read_nostream;
static size_t in_use, capacity = SIZE_MAX;
static char the_stream; /* the session's one "stream" */

static td_status fake_alloc(td__device *dev, void *stream, size_t nbytes, void **out)
{
    (void)dev, (void)stream;
    if (nbytes > capacity - in_use) return TD_ENOMEM;
    size_t *p = malloc(sizeof(size_t) * 2 + nbytes);
    if (p == NULL) return TD_ENOMEM;
    p[0] = nbytes;
    in_use += nbytes;
    *out = p + 2;
    return TD_OK;
}
static void release(void *data) { size_t *p = (size_t *)data - 2; in_use -= p[0]; free(p); }
static void fake_free(td__device *dev, void *stream, void *data, size_t nbytes)
{
    (void)dev, (void)nbytes;
    if (stream == NULL) n_free_wait++; /* the whole device would be waited for */
    else n_free_stream++;
    release(data);
}
static void fake_free_idle(td__device *dev, void *data, size_t nbytes)
{
    (void)dev, (void)nbytes;
    n_free_idle++;
    release(data);
}
static td_status fake_write(td__device *dev, void *stream, void *dst, size_t off, const void *src,
                            size_t n)
{
    (void)dev, (void)stream;
    memcpy((char *)dst + off, src, n);
    return TD_OK;
}
static td_status fake_read(td__device *dev, void *stream, const void *src, size_t off, void *dst,
                           size_t n)
{
    (void)dev;
    if (stream == NULL) n_read_nostream++;
    memcpy(dst, (const char *)src + off, n);
    return TD_OK;
}
static td_status fake_copy(td__device *dev, void *stream, void *dst, const void *src, size_t n)
{
    (void)dev;
    cr_expect_eq(stream, &the_stream, "the copy is queued on the session's stream");
    n_copy++;
    memmove(dst, src, n);
    return TD_OK;
}
static td_status fake_stream_create(td__device *dev, void **out)
{
    (void)dev;
    *out = &the_stream;
    return TD_OK;
}
static void fake_stream_destroy(td__device *dev, void *s) { (void)dev, (void)s; }
static td_status fake_stream_sync(td__device *dev, void *s)
{
    (void)dev;
    cr_expect_eq(s, &the_stream);
    n_sync++;
    return TD_OK;
}
static td_status fake_exec(td__device *dev, void *stream, const td__op *op, const td__view *in,
                           const td__view *out, char *err, size_t errlen)
{
    (void)dev, (void)stream, (void)in, (void)err, (void)errlen;
    if (op->opcode != TD_OP_FULL) return TD_EUNSUPPORTED;
    memset(out->data, (int)op->fattrs[0], td__desc_nbytes(&out->desc));
    return TD_OK;
}
static td_status fake_count(int *n) { *n = 1; return TD_OK; }
static td_status fake_memory(td__device *dev, uint64_t *total, uint64_t *free_bytes)
{
    (void)dev;
    *total = capacity;
    *free_bytes = capacity - in_use;
    return TD_OK;
}

static const td__backend fake_backend = {
    .kind = "fake",
    .host_memory = false,
    .device_count = fake_count,
    .buffer_alloc = fake_alloc,
    .buffer_free = fake_free,
    .buffer_write = fake_write,
    .buffer_read = fake_read,
    .buffer_copy = fake_copy,
    .stream_create = fake_stream_create,
    .stream_destroy = fake_stream_destroy,
    .stream_sync = fake_stream_sync,
    .exec = fake_exec,
    .buffer_free_idle = fake_free_idle,
    .memory_info = fake_memory,
};
static td__device fake = {.backend = &fake_backend, .name = "fake:0"};

static td__session *s;

static void setup(void)
{
    n_copy = n_sync = n_free_wait = n_free_stream = n_free_idle = n_read_nostream = 0;
    in_use = 0;
    capacity = SIZE_MAX;
    td__session_limits lim = {.max_bytes = 1 << 24, .max_tensors = 100};
    cr_assert_eq(td__session_create(&fake, &lim, &s), TD_OK);
    td__candidates_clear();
    td__buffer_set_reclaim(NULL);
}
static void teardown(void)
{
    td__session_destroy(s);
    td__candidates_clear();
    td__buffer_set_reclaim(NULL);
}
TestSuite(candidates_device, .init = setup, .fini = teardown);

static void on_fail(void *arg, uint32_t idx, td_status st, const char *msg)
{
    (void)arg, (void)idx, (void)st;
    cr_assert_fail("op failed: %s", msg);
}

/* Tensor `id` of n u8 on the stand-in device, holding bytes i * 7 + seed. */
static void make_tensor(uint64_t id, size_t n, unsigned seed, unsigned char *bytes)
{
    td__op op = {.opcode = TD_OP_FULL, .dtype = TD_U8, .output = id, .n_iattrs = 1,
                 .iattrs = {(int64_t)n}, .fattrs = {0, 0}};
    cr_assert_eq(td__session_exec(s, &op, 1, on_fail, NULL), 0);
    for (size_t i = 0; i < n; i++) bytes[i] = (unsigned char)(i * 7 + seed);
    char err[256];
    cr_assert_eq(td__session_write(s, id, 0, bytes, n, err, sizeof err), TD_OK, "%s", err);
}

Test(candidates_device, detach_copy_is_an_idle_device_copy_the_tensor_cannot_change)
{
    enum { N = 5000 };
    unsigned char bytes[N], again[N], got[N];
    make_tensor(1, N, 3, bytes);
    char err[256];
    td__buffer *copy = NULL;
    cr_assert_eq(td__session_detach_copy(s, 1, &copy, err, sizeof err), TD_OK, "%s", err);
    cr_assert_eq(n_copy, 1, "one device-to-device copy, no round trip through the host");
    cr_assert_eq(n_sync, 1, "the session's stream is waited for, so the copy is idle");
    cr_assert(copy->idle);
    cr_assert_null(copy->stream, "it belongs to no session");
    cr_assert_eq(copy->dev, &fake);
    /* a later write to the tensor does not reach the copy */
    make_tensor(2, N, 99, again);
    cr_assert_eq(td__session_write(s, 1, 0, again, N, err, sizeof err), TD_OK);
    memcpy(got, copy->data, N);
    cr_assert_arr_eq(got, bytes, N);
    /* the last unref frees it without waiting for the device */
    td__buffer_unref(copy);
    cr_assert_eq(n_free_idle, 1);
    cr_assert_eq(n_free_wait, 0);
}

Test(candidates_device, detach_copy_refuses_host_memory_and_unknown_ids)
{
    char err[256];
    td__buffer *copy = (td__buffer *)1;
    cr_assert_eq(td__session_detach_copy(s, 42, &copy, err, sizeof err), TD_ENOTFOUND);
    cr_assert_null(copy);
    td__devices_init(err, sizeof err);
    td__session *cpu = NULL;
    td__session_limits lim = {.max_bytes = 1 << 20, .max_tensors = 10};
    cr_assert_eq(td__session_create(td__device_find("cpu"), &lim, &cpu), TD_OK);
    td__op op = {.opcode = TD_OP_FULL, .dtype = TD_U8, .output = 1, .n_iattrs = 1,
                 .iattrs = {16}, .fattrs = {1, 0}};
    cr_assert_eq(td__session_exec(cpu, &op, 1, on_fail, NULL), 0);
    cr_assert_eq(td__session_detach_copy(cpu, 1, &copy, err, sizeof err), TD_EUNSUPPORTED);
    cr_assert(strstr(err, "tensor 1") != NULL, "%s", err);
    td__session_destroy(cpu);
}

Test(candidates_device, a_non_idle_stream_less_buffer_still_waits_for_the_device)
{
    td__buffer *b = NULL;
    cr_assert_eq(td__buffer_create(&fake, NULL, 64, &b), TD_OK);
    td__buffer_unref(b);
    cr_assert_eq(n_free_wait, 1);
    cr_assert_eq(n_free_idle, 0);
}

Test(candidates_device, a_device_candidate_is_promoted_from_its_own_bytes)
{
    enum { N = 300000 };
    static unsigned char bytes[N], other[N];
    make_tensor(1, N, 11, bytes);
    td__quota q;
    td__quota_init(&q, "t1");
    char err[256];
    td__buffer *copy = NULL;
    cr_assert_eq(td__session_detach_copy(s, 1, &copy, err, sizeof err), TD_OK, "%s", err);
    cr_assert_eq(td__quota_bytes_charge(&q, N, "a copy of", err, sizeof err), TD_OK);
    copy->quota = &q;
    copy->quota_bytes = N;
    uint8_t fp[TD_FINGERPRINT_LEN];
    cr_assert(td__fingerprint(bytes, N, fp));
    cr_assert(td__candidates_put("t1", &q, fp, copy, NULL, 0, N));
    td__buffer_unref(copy); /* the record holds the only reference now */
    uint64_t records, held;
    td__candidates_stats(&records, &held);
    cr_assert_eq(records, 1);
    cr_assert_eq(held, N);
    /* the tensor is overwritten: the candidate keeps the bytes of the upload */
    make_tensor(2, N, 200, other);
    cr_assert_eq(td__session_write(s, 1, 0, other, N, err, sizeof err), TD_OK);

    td__blobstore *bs = NULL;
    cr_assert_eq(td__blobstore_create(1 << 24, NULL, &bs, err, sizeof err), TD_OK, "%s", err);
    cr_assert(!td__candidates_offer(bs, "t2", fp), "another tenant's fingerprint is absent");
    cr_assert(td__candidates_offer(bs, "t1", fp));
    cr_assert_eq(n_read_nostream, 1, "promotion reads the device copy back once");
    uint8_t want[SHA256_DIGEST_LENGTH];
    SHA256(bytes, N, want);
    td__blob *b = td__blobstore_get(bs, "t1", want);
    cr_assert_not_null(b, "the store holds the upload's bytes under their SHA-256");
    cr_assert_eq(b->nbytes, (size_t)N);
    cr_assert_arr_eq(b->data, bytes, N);
    td__blob_unref(b);
    /* promoted: the device copy is gone (freed without a device-wide wait), quota back */
    cr_assert_eq(n_free_idle, 1);
    cr_assert_eq(n_free_wait, 0);
    cr_assert_eq(atomic_load(&q.bytes), 0);
    cr_assert(td__candidates_offer(bs, "t1", fp), "a promoted record answers at once");
    td__candidates_clear();
    td__blobstore_destroy(bs);
}

Test(candidates_device, a_full_device_drops_candidate_copies_before_failing)
{
    enum { N = 4096 };
    unsigned char bytes[N];
    make_tensor(1, N, 5, bytes); /* in use: N */
    char err[256];
    td__quota q;
    td__quota_init(&q, "t1");
    for (int k = 0; k < 2; k++) { /* two candidates of N bytes each, oldest first */
        td__buffer *copy = NULL;
        cr_assert_eq(td__session_detach_copy(s, 1, &copy, err, sizeof err), TD_OK, "%s", err);
        uint8_t fp[TD_FINGERPRINT_LEN] = {(uint8_t)k};
        cr_assert(td__candidates_put("t1", &q, fp, copy, NULL, 0, N));
        td__buffer_unref(copy);
    }
    cr_assert_eq(in_use, 3 * N);
    capacity = 3 * N + N / 2; /* room for half of N more */
    td__buffer *big = NULL;
    cr_assert_eq(td__buffer_create(&fake, &the_stream, N, &big), TD_ENOMEM,
                 "without the hook the device is simply full");
    td__buffer_set_reclaim(td__candidates_reclaim_device);
    cr_assert_eq(td__buffer_create(&fake, &the_stream, N, &big), TD_OK);
    uint64_t records, held;
    td__candidates_stats(&records, &held);
    cr_assert_eq(records, 1, "only the oldest copy was dropped (it freed what was asked)");
    cr_assert_eq(n_free_idle, 1);
    uint8_t newer[TD_FINGERPRINT_LEN] = {1};
    td__blobstore *bs = NULL;
    cr_assert_eq(td__blobstore_create(1 << 24, NULL, &bs, err, sizeof err), TD_OK);
    cr_assert(td__candidates_offer(bs, "t1", newer), "the newer candidate survived");
    td__blobstore_destroy(bs);
    td__buffer_unref(big);
    /* (the offer promoted the newer copy: its record now holds only the hash) */
    td__candidates_stats(&records, &held);
    cr_assert_eq(records, 1);
    cr_assert_eq(held, 0);
    /* a fresh copy; a request that dropping every copy could not satisfy drops none */
    td__buffer *copy = NULL;
    cr_assert_eq(td__session_detach_copy(s, 1, &copy, err, sizeof err), TD_OK, "%s", err);
    uint8_t third[TD_FINGERPRINT_LEN] = {3};
    cr_assert(td__candidates_put("t1", &q, third, copy, NULL, 0, N));
    td__buffer_unref(copy);
    capacity = in_use + 8;
    cr_assert_eq(td__buffer_create(&fake, &the_stream, N + 64, &big), TD_ENOMEM);
    td__candidates_stats(&records, &held);
    cr_assert_eq(held, N, "a hopeless request (a huge tensor) keeps the copies");
    /* one it could satisfy drops the copy */
    cr_assert_eq(td__buffer_create(&fake, &the_stream, N, &big), TD_OK);
    td__candidates_stats(&records, &held);
    cr_assert_eq(held, 0);
    td__buffer_unref(big);
    /* a device with nothing to give back still fails */
    capacity = in_use + 8;
    cr_assert_eq(td__buffer_create(&fake, &the_stream, 64, &big), TD_ENOMEM);
}

/* ---- ABI 11: a backend with fence_record/fence_finish (the GPU backend's shape) ---- */
static int n_fence_record, n_fence_finish, finished_at_free;
static bool fence_record_fails, fence_finish_fails;
static char the_fence; /* the one outstanding fence's handle */
static td_status fake_fence_record(td__device *dev, void *stream, void **out)
{
    (void)dev;
    cr_expect_eq(stream, &the_stream, "the fence follows the copy on the session's stream");
    if (fence_record_fails) return TD_EDEVICE;
    n_fence_record++;
    *out = &the_fence;
    return TD_OK;
}
static td_status fake_fence_finish(td__device *dev, void *fence)
{
    (void)dev;
    cr_expect_eq(fence, &the_fence);
    n_fence_finish++;
    return fence_finish_fails ? TD_EDEVICE : TD_OK;
}
static void fenced_free_idle(td__device *dev, void *data, size_t nbytes)
{
    finished_at_free = n_fence_finish;
    fake_free_idle(dev, data, nbytes);
}

/* A session on a copy of the stand-in device whose backend has fences; *fb and *fdev must
 * outlive it. */
static td__session *fenced_session(td__backend *fb, td__device *fdev)
{
    *fb = fake_backend;
    fb->fence_record = fake_fence_record;
    fb->fence_finish = fake_fence_finish;
    fb->buffer_free_idle = fenced_free_idle;
    *fdev = (td__device){.backend = fb, .name = "fake:1"};
    n_fence_record = n_fence_finish = 0;
    finished_at_free = -1;
    fence_record_fails = fence_finish_fails = false;
    td__session_limits lim = {.max_bytes = 1 << 24, .max_tensors = 100};
    td__session *fs = NULL;
    cr_assert_eq(td__session_create(fdev, &lim, &fs), TD_OK);
    td__op op = {.opcode = TD_OP_FULL, .dtype = TD_U8, .output = 1, .n_iattrs = 1,
                 .iattrs = {4096}, .fattrs = {5, 0}};
    cr_assert_eq(td__session_exec(fs, &op, 1, on_fail, NULL), 0);
    return fs;
}

Test(candidates_device, a_fenced_copy_is_not_waited_for_and_its_last_unref_finishes_the_fence)
{
    td__backend fb;
    td__device fdev;
    td__session *fs = fenced_session(&fb, &fdev);
    char err[256];
    td__buffer *copy = NULL;
    cr_assert_eq(td__session_detach_copy(fs, 1, &copy, err, sizeof err), TD_OK, "%s", err);
    cr_assert_eq(n_sync, 0, "a fence instead of a wait for the session's stream");
    cr_assert_eq(n_fence_record, 1);
    cr_assert_eq(copy->fence, (void *)&the_fence);
    cr_assert(copy->idle);
    uint8_t fp[TD_FINGERPRINT_LEN] = {7};
    td__quota q;
    td__quota_init(&q, "t1");
    cr_assert(td__candidates_put("t1", &q, fp, copy, NULL, 0, 4096));
    td__buffer_unref(copy);
    cr_assert_eq(n_fence_finish, 0, "the record still holds it");
    td__candidates_clear(); /* eviction: the last unref */
    cr_assert_eq(n_fence_finish, 1, "finished exactly once");
    cr_assert_eq(finished_at_free, 1, "before the memory went back without a device wait");
    cr_assert_eq(n_free_wait, 0);
    td__session_destroy(fs);
}

Test(candidates_device, a_fence_that_cannot_be_recorded_falls_back_to_the_stream_wait)
{
    td__backend fb;
    td__device fdev;
    td__session *fs = fenced_session(&fb, &fdev);
    fence_record_fails = true;
    char err[256];
    td__buffer *copy = NULL;
    cr_assert_eq(td__session_detach_copy(fs, 1, &copy, err, sizeof err), TD_OK, "%s", err);
    cr_assert_eq(n_sync, 1, "no fence: the stream is waited for");
    cr_assert_null(copy->fence);
    td__buffer_unref(copy);
    cr_assert_eq(n_fence_finish, 0, "nothing to finish");
    cr_assert_eq(n_free_idle, 1);
    td__session_destroy(fs);
}

Test(candidates_device, a_failed_fence_frees_with_a_device_wait)
{
    td__backend fb;
    td__device fdev;
    td__session *fs = fenced_session(&fb, &fdev);
    fence_finish_fails = true;
    char err[256];
    td__buffer *copy = NULL;
    cr_assert_eq(td__session_detach_copy(fs, 1, &copy, err, sizeof err), TD_OK, "%s", err);
    td__buffer_unref(copy);
    cr_assert_eq(n_fence_finish, 1);
    cr_assert_eq(n_free_idle, 0, "the device decides when the memory is free");
    cr_assert_eq(n_free_wait, 1);
    td__session_destroy(fs);
}

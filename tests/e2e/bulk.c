/* e2e/bulk.c — batching, the bulk data path and the blob store, against a real tensord.
 *
 *  - batching: N ops and one read send ceil(N / batch_max_ops) batches; the byte threshold
 *    splits batches too; the time bound sends a lone op without any read (seen on the
 *    server through GetInfo's live tensor count);
 *  - chunked transfer: sizes 0, 1, chunk-1, chunk, chunk+1, 3*chunk+7 and 1 GiB round-trip
 *    bit-exactly (prints the measured GB/s of 64 MiB and 1 GiB transfers);
 *  - blob store: a second upload of the same bytes sends no payload, also from a second
 *    session (a fresh upload is kept as a fingerprint candidate; a repeat promotes it; a
 *    fingerprint collision or a rewritten tensor still gets its own bytes); an upload marked
 *    TD_WRITE_FRESH is sent whole every time, costs no round trip and leaves the server's
 *    candidate gauges where they were (TCP with background sends, a unix stream, shared
 *    memory); a corrupted cache file is detected and the bytes re-fetched after a restart;
 *    the LRU evicts under --blob-cache-bytes; hostile blob messages get errors;
 *  - background sends (client/remote.c): a write of up to 16 MiB returns before its bytes
 *    are sent, the caller's buffer is its own again at once, the bytes reach the server
 *    while the client makes no call (the flusher thread drives gRPC: seen in the server's
 *    tensord_received_bytes_total), many writes reuse the copy buffers and keep their
 *    contents, a close with sends queued neither hangs nor leaks, a frozen server makes a
 *    write fail with TD_ETIMEOUT once the copies are all in flight, a server that dies
 *    under a large write queued behind copies fails it at once (the queue is dropped with
 *    the session, not waited on for another call timeout), and a bad
 *    TENSORD_WRITE_COPY_MAX is refused by td_connect.
 */
#include "raw_session.h"
#include "server_fixture.h"
#include "suite_fixture.h"
#include "common/sha256.h"
#include "tensord.h"

#include <arpa/inet.h>
#include <sched.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CHUNK ((size_t)1 << 20) /* TD_CHUNK_BYTES */

/* Deterministic bytes that differ per seed (xorshift64). */
static void fill(uint8_t *p, size_t n, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        memcpy(p + i, &x, 8);
    }
    for (; i < n; i++) p[i] = (uint8_t)(x >> (8 * (i & 7)));
}

static uint64_t sent(td_context *ctx)
{
    td_stats s;
    td_get_stats(ctx, &s);
    return s.bytes_sent;
}

/* ---- batching ---- */

static uint64_t run_chain(const td_options *o, int n_ops, float *result)
{
    td_context *ctx = connect_with(o);
    td_tensor **h = calloc((size_t)n_ops, sizeof *h);
    h[0] = td_full(ctx, TD_F32, 1, (int64_t[]){4}, 1.5);
    for (int i = 1; i < n_ops; i++) h[i] = td_neg(h[i - 1]);
    cr_assert_not_null(h[n_ops - 1], "%s", td_last_error(ctx));
    float out[4];
    cr_assert_eq(td_read(h[n_ops - 1], out, sizeof out), TD_OK, "%s", td_last_error(ctx));
    *result = out[0];
    td_stats st;
    td_get_stats(ctx, &st);
    for (int i = 0; i < n_ops; i++) td_release(h[i]);
    free(h);
    td_close(ctx);
    return st.batches_sent;
}

Test(batching, count_threshold, .init = start_tcp, .fini = stop, .timeout = 300)
{
    const int thresholds[] = {1, 64, 256, 1000};
    for (size_t k = 0; k < sizeof thresholds / sizeof thresholds[0]; k++) {
        td_options o = {.batch_max_ops = thresholds[k], .batch_flush_us = -1};
        float r;
        uint64_t b = run_chain(&o, 1000, &r);
        uint64_t want = (1000 + (uint64_t)thresholds[k] - 1) / (uint64_t)thresholds[k];
        cr_expect_eq(b, want, "threshold %d: %llu batches, expected %llu", thresholds[k],
                     (unsigned long long)b, (unsigned long long)want);
        cr_expect_eq(r, -1.5f, "1000 ops: got %g", (double)r); /* 999 negations */
        (void)r;
    }
}

Test(batching, byte_threshold, .init = start_tcp, .fini = stop, .timeout = 300)
{
    td_options o = {.batch_max_ops = 100000, .batch_max_bytes = 4096, .batch_flush_us = -1};
    float r;
    uint64_t b = run_chain(&o, 1000, &r);
    cr_expect(b > 5 && b < 100, "byte threshold 4096: %llu batches for 1000 ops",
              (unsigned long long)b);
    cr_expect_eq(r, -1.5f, "got %g", (double)r);
}

Test(batching, time_bound_flushes_a_lone_op, .init = start_tcp, .fini = stop, .timeout = 300)
{
    td_options o = {.batch_flush_us = 2000};
    td_context *ctx = connect_with(&o);
    td_server_info info;
    cr_assert_eq(td_server_info_get(srv.addr, 5000, &info), TD_OK);
    uint64_t before = info.tensors;
    td_tensor *t = td_full(ctx, TD_F32, 1, (int64_t[]){1000}, 2.0);
    cr_assert_not_null(t);
    /* No read, no fence: only the time bound can send it. */
    bool seen = false;
    double t0 = td_test_now_ms();
    while (!seen && td_test_now_ms() - t0 < 3000) {
        usleep(5000);
        cr_assert_eq(td_server_info_get(srv.addr, 5000, &info), TD_OK);
        seen = info.tensors == before + 1;
    }
    cr_expect(seen, "the server never saw the op (tensors %llu, before %llu)",
              (unsigned long long)info.tensors, (unsigned long long)before);
    td_stats st;
    td_get_stats(ctx, &st);
    cr_expect_eq(st.batches_sent, 1, "batches_sent %llu", (unsigned long long)st.batches_sent);
    cr_log_info("lone op reached the server after %.1f ms", td_test_now_ms() - t0);
    td_release(t);
    td_close(ctx);
}

Test(batching, no_time_bound_keeps_the_op, .init = start_tcp, .fini = stop, .timeout = 300)
{
    td_options o = {.batch_flush_us = -1};
    td_context *ctx = connect_with(&o);
    td_tensor *t = td_full(ctx, TD_F32, 1, (int64_t[]){1000}, 2.0);
    usleep(100000);
    td_stats st;
    td_get_stats(ctx, &st);
    cr_expect_eq(st.batches_sent, 0);
    double v;
    td_tensor *s = td_sum(t, 0, NULL, false);
    cr_assert_eq(td_read_scalar(s, &v), TD_OK, "%s", td_last_error(ctx));
    cr_expect_eq(v, 2000.0);
    td_release(s);
    td_release(t);
    td_close(ctx);
}

/* ---- chunked transfer ---- */

static void round_trip(td_context *ctx, size_t n, uint64_t seed)
{
    uint8_t *src = malloc(n ? n : 1), *dst = malloc(n ? n : 1);
    cr_assert(src && dst);
    fill(src, n, seed);
    memset(dst, 0xA5, n);
    td_tensor *t = td_from_host(ctx, TD_U8, 1, (int64_t[]){(int64_t)n}, src);
    cr_assert_not_null(t, "size %zu: %s", n, td_last_error(ctx));
    cr_assert_eq(td_read(t, dst, n), TD_OK, "size %zu: %s", n, td_last_error(ctx));
    cr_expect(memcmp(src, dst, n) == 0, "size %zu: bytes differ", n);
    /* td_write over the same tensor, then a derived tensor, to interleave ops and data. */
    fill(src, n, seed + 1000);
    cr_assert_eq(td_write(t, src, n), TD_OK, "%s", td_last_error(ctx));
    cr_assert_eq(td_read(t, dst, n), TD_OK, "%s", td_last_error(ctx));
    cr_expect(memcmp(src, dst, n) == 0, "size %zu (td_write): bytes differ", n);
    td_release(t);
    free(src);
    free(dst);
}

Test(transfer, chunk_edge_sizes, .init = start_tcp, .fini = stop, .timeout = 300)
{
    const size_t sizes[] = {0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 7};
    for (int blob = 0; blob < 2; blob++) {
        td_options o = {.blob_min_bytes = blob ? 0 : SIZE_MAX};
        td_context *ctx = connect_with(&o);
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
            round_trip(ctx, sizes[i], 17 + i + 100 * (uint64_t)blob);
        td_close(ctx);
    }
}

static void timed_round_trip(size_t n, const char *label)
{
    td_options o = {.blob_min_bytes = SIZE_MAX}; /* the raw data path, no hashing */
    td_context *ctx = connect_with(&o);
    uint8_t *src = malloc(n), *dst = malloc(n);
    cr_assert(src && dst, "cannot allocate 2 x %zu bytes", n);
    fill(src, n, n);
    memset(dst, 0, n); /* fault the pages in before timing */
    double t0 = td_test_now_ms();
    td_tensor *t = td_from_host(ctx, TD_U8, 1, (int64_t[]){(int64_t)n}, src);
    cr_assert_not_null(t, "%s", td_last_error(ctx));
    cr_assert_eq(td_fence(ctx), TD_OK, "%s", td_last_error(ctx));
    double t1 = td_test_now_ms();
    cr_assert_eq(td_read(t, dst, n), TD_OK, "%s", td_last_error(ctx));
    double t2 = td_test_now_ms();
    cr_expect(memcmp(src, dst, n) == 0, "%s: bytes differ", label);
    fprintf(stderr, "bulk %s: upload %.2f GB/s (%.0f ms), download %.2f GB/s (%.0f ms)\n", label,
            (double)n / ((t1 - t0) * 1e6), t1 - t0, (double)n / ((t2 - t1) * 1e6), t2 - t1);
    td_release(t);
    td_close(ctx);
    free(src);
    free(dst);
}

Test(transfer, sixty_four_mib, .init = start_tcp, .fini = stop, .timeout = 300)
{
    timed_round_trip((size_t)64 << 20, "64 MiB");
    timed_round_trip((size_t)64 << 20, "64 MiB (again: pooled server buffers)");
}

Test(transfer, one_gib, .init = start_tcp, .fini = stop, .timeout = 300)
{
    timed_round_trip((size_t)1 << 30, "1 GiB");
}

#ifdef TD_TEST_HAVE_VULKAN
/* A device whose memory the host cannot address (vulkan:0 here; a GPU's likewise): every
 * write chunk goes through the backend's write and every read chunk through its read
 * (server/handlers.c). Sizes straddle the chunk edges and 8 MiB multiples. */
Test(transfer, device_memory_round_trip, .init = start_tcp, .fini = stop, .timeout = 300)
{
    /* tests/run.sh's TSan pass drives a tensord built without the device modules */
    const char *other = getenv("TD_TEST_TENSORD");
    if (other != NULL && other[0] != '\0')
        cr_skip_test("TD_TEST_TENSORD's server is built without the Vulkan module");
    const size_t piece = (size_t)8 << 20;
    const size_t sizes[] = {piece - 1, piece, piece + 1, 2 * piece + CHUNK + 5};
    td_options o = {.blob_min_bytes = SIZE_MAX};
    td_context *ctx = connect_device("vulkan:0", &o);
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) round_trip(ctx, sizes[i], 300 + i);
    td_close(ctx);
}
#endif

/* ---- blob store ---- */

static td_tensor *upload(td_context *ctx, const uint8_t *data, size_t n, uint64_t *bytes)
{
    uint64_t before = sent(ctx);
    td_tensor *t = td_from_host(ctx, TD_U8, 1, (int64_t[]){(int64_t)n}, data);
    cr_assert_not_null(t, "%s", td_last_error(ctx));
    cr_assert_eq(td_fence(ctx), TD_OK, "%s", td_last_error(ctx));
    *bytes = sent(ctx) - before;
    return t;
}

static void check_contents(td_context *ctx, td_tensor *t, const uint8_t *want, size_t n)
{
    uint8_t *got = malloc(n);
    cr_assert_eq(td_read(t, got, n), TD_OK, "%s", td_last_error(ctx));
    cr_expect(memcmp(got, want, n) == 0, "tensor contents differ from what was uploaded");
    free(got);
}

Test(blobs, second_upload_sends_nothing_and_sessions_share, .init = start_tcp, .fini = stop,
     .timeout = 300)
{
    size_t n = 4 * CHUNK + 3;
    uint8_t *w = malloc(n);
    fill(w, n, 4242);
    td_context *a = connect_with(NULL);
    uint64_t b1, b2, b3;
    td_tensor *t1 = upload(a, w, n, &b1);
    td_tensor *t2 = upload(a, w, n, &b2);
    cr_expect_eq(b1, n, "first upload sent %llu bytes", (unsigned long long)b1);
    cr_expect_eq(b2, 0, "second upload sent %llu bytes", (unsigned long long)b2);
    check_contents(a, t2, w, n);
    td_context *b = connect_with(NULL); /* another session shares the blob */
    td_tensor *t3 = upload(b, w, n, &b3);
    cr_expect_eq(b3, 0, "upload from a second session sent %llu bytes", (unsigned long long)b3);
    check_contents(b, t3, w, n);
    /* A small tensor never goes through the store. */
    uint64_t bs;
    td_tensor *small = upload(b, w, 1000, &bs);
    td_tensor *small2 = upload(b, w, 1000, &bs);
    cr_expect_eq(bs, 1000);
    td_release(small);
    td_release(small2);
    td_release(t1);
    td_release(t2);
    td_release(t3);
    td_close(a);
    td_close(b);
    free(w);
}

/* GetInfo's bytes_in_use for this tenant (the server's own count). */
static uint64_t server_bytes_in_use(void)
{
    td_server_info info;
    cr_assert_eq(td_server_info_get(srv.addr, 5000, &info), TD_OK, "%s", td_connect_error());
    return info.bytes_in_use;
}

/* Fingerprint candidates (server/candidates.h): a fresh upload is sent once and kept
 * unhashed; its repeat (a new session, as a restarted program) sends < 1% of its bytes; a
 * third is free too; the server's memory for the candidate goes when it is promoted. */
Test(blobs, fresh_upload_kept_as_candidate_repeat_is_free, .init = start_tcp, .fini = stop,
     .timeout = 300)
{
    size_t n = (size_t)64 << 20;
    uint8_t *w = malloc(n);
    fill(w, n, 31337);
    uint64_t b;
    td_context *ctx = connect_with(NULL);
    td_release(upload(ctx, w, n, &b));
    cr_expect_eq(b, n, "first upload sent %llu bytes", (unsigned long long)b);
    td_close(ctx);
    /* The candidate holds the released tensor's buffer, charged to the tenant. */
    cr_expect_geq(server_bytes_in_use(), n, "candidate not held: %llu bytes in use",
                  (unsigned long long)server_bytes_in_use());
    for (int k = 0; k < 2; k++) {
        ctx = connect_with(NULL);
        td_tensor *t = upload(ctx, w, n, &b);
        cr_expect_lt(b, n / 100, "upload %d sent %llu of %zu bytes", k + 2,
                     (unsigned long long)b, n);
        check_contents(ctx, t, w, n);
        td_release(t);
        td_close(ctx);
    }
    free(w);
}

/* A model of many tensors: a restarted program offers them in the order it first sent
 * them, and every one is still a candidate (the per-tenant cap is far above this). */
Test(blobs, many_tensor_model_repeat_is_free, .init = start_tcp, .fini = stop, .timeout = 300)
{
    enum { K = 48 };
    size_t n = CHUNK + 16;
    uint8_t *w = malloc(n * K);
    for (int i = 0; i < K; i++) fill(w + (size_t)i * n, n, 7000 + (uint64_t)i);
    uint64_t b, total = 0;
    for (int run = 0; run < 2; run++) {
        td_context *ctx = connect_with(NULL);
        td_tensor *t[K];
        total = 0;
        for (int i = 0; i < K; i++) {
            t[i] = upload(ctx, w + (size_t)i * n, n, &b);
            total += b;
        }
        if (run == 0) cr_expect_eq(total, (uint64_t)n * K);
        check_contents(ctx, t[K - 1], w + (size_t)(K - 1) * n, n);
        check_contents(ctx, t[0], w, n);
        for (int i = 0; i < K; i++) td_release(t[i]);
        td_close(ctx);
    }
    cr_expect_lt(total, (uint64_t)n * K / 100, "the repeat sent %llu of %zu bytes",
                 (unsigned long long)total, n * K);
    free(w);
}

/* TD_WRITE_FRESH (tensord.h): a marked upload is never offered and never kept. Two marked
 * uploads of the same 4 MiB each send every byte; the server kept no candidate of them, so
 * the first unmarked upload of those bytes sends them again, and only the second is free.
 * td_write_ex marks a rewrite the same way; contents are right throughout; unknown flags are
 * refused with a message naming them. */
Test(blobs, fresh_marked_uploads_are_never_offered_or_kept, .init = start_tcp, .fini = stop,
     .timeout = 300)
{
    size_t n = 4 * CHUNK + 5;
    uint8_t *x = malloc(n);
    fill(x, n, 8181);
    td_context *ctx = connect_with(NULL);
    const int64_t dims[1] = {(int64_t)n};
    for (int i = 0; i < 2; i++) {
        uint64_t before = sent(ctx);
        td_tensor *t = td_from_host_ex(ctx, TD_U8, 1, dims, x, TD_WRITE_FRESH);
        cr_assert_not_null(t, "%s", td_last_error(ctx));
        cr_assert_eq(td_fence(ctx), TD_OK, "%s", td_last_error(ctx));
        cr_expect_eq(sent(ctx) - before, (uint64_t)n, "marked upload %d sent %llu of %zu bytes",
                     i, (unsigned long long)(sent(ctx) - before), n);
        check_contents(ctx, t, x, n);
        td_release(t);
    }
    uint64_t b;
    td_tensor *u1 = upload(ctx, x, n, &b);
    cr_expect_eq(b, (uint64_t)n, "a marked upload was kept: the first unmarked one sent %llu",
                 (unsigned long long)b);
    td_tensor *u2 = upload(ctx, x, n, &b);
    cr_expect_eq(b, 0, "the unmarked repeat sent %llu bytes", (unsigned long long)b);
    check_contents(ctx, u2, x, n);
    /* a marked rewrite of a tensor: every byte again, even though the store holds them */
    uint64_t before = sent(ctx);
    cr_assert_eq(td_write_ex(u1, x, n, TD_WRITE_FRESH), TD_OK, "%s", td_last_error(ctx));
    cr_assert_eq(td_fence(ctx), TD_OK, "%s", td_last_error(ctx));
    cr_expect_eq(sent(ctx) - before, (uint64_t)n);
    check_contents(ctx, u1, x, n);
    /* unknown flag bits */
    cr_expect_eq(td_write_ex(u1, x, n, 0x6), TD_EINVAL);
    cr_expect_not_null(strstr(td_last_error(ctx), "td_write_ex: unknown flags 0x6"), "%s",
                       td_last_error(ctx));
    cr_expect_null(td_from_host_ex(ctx, TD_U8, 1, dims, x, TD_WRITE_FRESH | 0x80));
    cr_expect_not_null(strstr(td_last_error(ctx), "td_from_host_ex: unknown flags 0x80"),
                       "%s", td_last_error(ctx));
    check_contents(ctx, u1, x, n);
    td_release(u1);
    td_release(u2);
    td_close(ctx);
    free(x);
}

/* Two uploads whose fingerprints collide (they differ only in bytes outside the sample,
 * common/fingerprint.h): the SHA-256 check sends the second one whole, and each tensor
 * holds its own bytes; so do repeats of both. */
Test(blobs, fingerprint_collision_sends_the_bytes, .init = start_tcp, .fini = stop,
     .timeout = 300)
{
    size_t n = (size_t)8 << 20;
    uint8_t *x = malloc(n), *y = malloc(n);
    fill(x, n, 5150);
    memcpy(y, x, n);
    /* Sampled pieces are 256 bytes from offset floor(i * (n - 256) / 1023): byte 300 is in
     * none of them for this size (the second piece starts at 8200). */
    y[300] ^= 0x5a;
    uint64_t b;
    td_context *ctx = connect_with(NULL);
    td_tensor *tx = upload(ctx, x, n, &b);
    cr_expect_eq(b, n);
    td_tensor *ty = upload(ctx, y, n, &b);
    cr_expect_eq(b, n, "colliding upload sent %llu of %zu bytes", (unsigned long long)b, n);
    check_contents(ctx, tx, x, n);
    check_contents(ctx, ty, y, n);
    td_tensor *ty2 = upload(ctx, y, n, &b); /* y is now the candidate: its repeat is free */
    cr_expect_eq(b, 0, "repeat of y sent %llu bytes", (unsigned long long)b);
    check_contents(ctx, ty2, y, n);
    td_tensor *tx2 = upload(ctx, x, n, &b); /* x was promoted when y collided */
    cr_expect_eq(b, 0, "repeat of x sent %llu bytes", (unsigned long long)b);
    check_contents(ctx, tx2, x, n);
    td_release(tx);
    td_release(ty);
    td_release(ty2);
    td_release(tx2);
    td_close(ctx);
    free(x);
    free(y);
}

/* A tensor written again after its upload drops its candidate (no copy-on-write for a
 * cache): the new bytes are served, and the old ones are no longer offered. */
Test(blobs, rewritten_tensor_drops_its_candidate, .init = start_tcp, .fini = stop,
     .timeout = 300)
{
    size_t n = 4 * CHUNK;
    uint8_t *x = malloc(n), *y = malloc(n);
    fill(x, n, 1);
    fill(y, n, 2);
    uint64_t b;
    td_context *ctx = connect_with(NULL);
    td_tensor *t = upload(ctx, x, n, &b);
    cr_assert_eq(td_write(t, y, n), TD_OK, "%s", td_last_error(ctx));
    check_contents(ctx, t, y, n);
    td_tensor *t2 = upload(ctx, x, n, &b);
    cr_expect_eq(b, n, "x's candidate survived the rewrite: sent %llu", (unsigned long long)b);
    check_contents(ctx, t2, x, n);
    td_release(t);
    td_release(t2);
    td_close(ctx);
    free(x);
    free(y);
}

Test(blobs, lru_eviction_under_the_byte_cap, .fini = stop, .timeout = 300)
{
    start_with((const char *const[]){"--blob-cache-bytes", "3M", NULL});
    uint8_t *d[4];
    uint64_t b;
    td_context *ctx = connect_with(NULL);
    for (int i = 0; i < 4; i++) { /* A, B, C, D: D evicts A */
        d[i] = malloc(CHUNK);
        fill(d[i], CHUNK, 900 + (uint64_t)i);
        td_release(upload(ctx, d[i], CHUNK, &b));
        cr_expect_eq(b, CHUNK);
        /* The repeat promotes the fingerprint candidate into the store. */
        td_release(upload(ctx, d[i], CHUNK, &b));
        cr_expect_eq(b, 0);
    }
    td_close(ctx);
    ctx = connect_with(NULL);
    td_tensor *ta = upload(ctx, d[0], CHUNK, &b);
    cr_expect_eq(b, CHUNK, "A should have been evicted; sent %llu", (unsigned long long)b);
    td_tensor *td = upload(ctx, d[3], CHUNK, &b);
    cr_expect_eq(b, 0, "D should still be cached; sent %llu", (unsigned long long)b);
    check_contents(ctx, ta, d[0], CHUNK);
    check_contents(ctx, td, d[3], CHUNK);
    td_release(ta);
    td_release(td);
    td_close(ctx);
    for (int i = 0; i < 4; i++) free(d[i]);
}

static void flip_one_byte_in_blobs(const char *dir, int *files)
{
    DIR *dp = opendir(dir);
    cr_assert_not_null(dp);
    struct dirent *e;
    *files = 0;
    while ((e = readdir(dp)) != NULL) {
        size_t l = strlen(e->d_name);
        if (l < 5 || strcmp(e->d_name + l - 5, ".blob") != 0) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        int fd = open(path, O_RDWR);
        cr_assert(fd >= 0);
        uint8_t c;
        cr_assert_eq(pread(fd, &c, 1, 12345), 1);
        c ^= 0x40;
        cr_assert_eq(pwrite(fd, &c, 1, 12345), 1);
        close(fd);
        (*files)++;
    }
    closedir(dp);
}

Test(blobs, corrupted_cache_file_is_refetched, .fini = stop, .timeout = 300)
{
    char dir[] = "/tmp/td-blobcache-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    const char *args[] = {"--cache-dir", dir, NULL};
    size_t n = 2 * CHUNK;
    uint8_t *w = malloc(n);
    fill(w, n, 777);
    uint64_t b;

    start_with(args);
    td_context *ctx = connect_with(NULL);
    td_release(upload(ctx, w, n, &b));
    cr_expect_eq(b, n);
    td_close(ctx);
    cr_assert_eq(td_test_server_stop(&srv), 0);

    /* Restarted with the same directory: served from disk, nothing sent. */
    start_with(args);
    ctx = connect_with(NULL);
    td_tensor *t = upload(ctx, w, n, &b);
    cr_expect_eq(b, 0, "after a restart: sent %llu bytes", (unsigned long long)b);
    check_contents(ctx, t, w, n);
    td_release(t);
    td_close(ctx);
    cr_assert_eq(td_test_server_stop(&srv), 0);

    int files;
    flip_one_byte_in_blobs(dir, &files);
    cr_assert_eq(files, 1, "expected one cache file, found %d", files);

    /* Corrupted: detected, dropped, bytes sent again, the right contents served. */
    start_with(args);
    ctx = connect_with(NULL);
    t = upload(ctx, w, n, &b);
    cr_expect_eq(b, n, "corrupted cache file: sent %llu bytes", (unsigned long long)b);
    check_contents(ctx, t, w, n);
    td_release(t);
    td_close(ctx);
    cr_assert_eq(td_test_server_stop(&srv), 0);

    /* The re-fetched blob was written back correctly. */
    start_with(args);
    ctx = connect_with(NULL);
    t = upload(ctx, w, n, &b);
    cr_expect_eq(b, 0, "after re-fetch and restart: sent %llu bytes", (unsigned long long)b);
    check_contents(ctx, t, w, n);
    td_release(t);
    td_close(ctx);

    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_expect_eq(system(cmd), 0);
    free(w);
}

/* ---- hostile blob messages ---- */

static void expect_failure(raw_session *s, uint64_t seq, uint32_t status, const char *what)
{
    raw_msg m;
    int r = raw_recv(s, &m, 5000);
    cr_assert_eq(r, 1, "%s: no reply (%d)", what, r);
    cr_expect_eq(m.kind, TENSORD__V1__SERVER_MESSAGE__BODY_FAILURE, "%s: kind %d", what, m.kind);
    cr_expect_eq(m.seq, seq, "%s: seq %llu", what, (unsigned long long)m.seq);
    cr_expect_eq(m.status, status, "%s: status %u (%s)", what, m.status, m.message);
    cr_log_info("%s: %s", what, m.message);
    raw_msg_fini(&m);
}

Test(blobs, hostile_messages, .init = start_tcp, .fini = stop, .timeout = 300)
{
    raw_session s;
    cr_assert(raw_open(&s, srv.addr, 1, 1, "cpu"));
    uint8_t h[40] = {1, 2, 3};
    uint64_t seq;

    ProtobufCBinaryData bad = {.len = 31, .data = h};
    Tensord__V1__HasBlobs hb = TENSORD__V1__HAS_BLOBS__INIT;
    hb.n_sha256 = 1;
    hb.sha256 = &bad;
    Tensord__V1__ClientMessage cm = TENSORD__V1__CLIENT_MESSAGE__INIT;
    cm.body_case = TENSORD__V1__CLIENT_MESSAGE__BODY_HAS_BLOBS;
    cm.has_blobs = &hb;
    cr_assert(raw_send(&s, &cm, NULL, 0, &seq));
    expect_failure(&s, seq, TD_EPROTO, "31-byte hash");

    td__op full = raw_op_full(5, TD_U8, 1, (int64_t[]){64}, 3.0);
    raw_send_ops(&s, &full, 1);

    Tensord__V1__WriteFromBlob wb = TENSORD__V1__WRITE_FROM_BLOB__INIT;
    wb.tensor = 5;
    wb.sha256 = (ProtobufCBinaryData){.len = 32, .data = h};
    cm = (Tensord__V1__ClientMessage)TENSORD__V1__CLIENT_MESSAGE__INIT;
    cm.body_case = TENSORD__V1__CLIENT_MESSAGE__BODY_WRITE_FROM_BLOB;
    cm.write_from_blob = &wb;
    cr_assert(raw_send(&s, &cm, NULL, 0, &seq));
    expect_failure(&s, seq, TD_ENOTFOUND, "unknown blob");

    /* A lying StoreBlob: the hash is not that of tensor 5's bytes. */
    Tensord__V1__StoreBlob sb = TENSORD__V1__STORE_BLOB__INIT;
    sb.tensor = 5;
    sb.sha256 = (ProtobufCBinaryData){.len = 32, .data = h};
    cm = (Tensord__V1__ClientMessage)TENSORD__V1__CLIENT_MESSAGE__INIT;
    cm.body_case = TENSORD__V1__CLIENT_MESSAGE__BODY_STORE_BLOB;
    cm.store_blob = &sb;
    cr_assert(raw_send(&s, &cm, NULL, 0, &seq));
    expect_failure(&s, seq, TD_EINVAL, "lying store-blob");

    sb.tensor = 999; /* unknown tensor */
    cr_assert(raw_send(&s, &cm, NULL, 0, &seq));
    expect_failure(&s, seq, TD_ENOTFOUND, "store-blob of an unknown tensor");

    /* The honest hash of tensor 5 is accepted, and then a blob of the wrong size for a
     * 16-byte tensor is refused. */
    uint8_t bytes[64];
    memset(bytes, 3, sizeof bytes);
    uint8_t good[32];
    cr_assert(td__sha256(bytes, sizeof bytes, good));
    sb.tensor = 5;
    sb.sha256 = (ProtobufCBinaryData){.len = 32, .data = good};
    cr_assert(raw_send(&s, &cm, NULL, 0, &seq));
    td__op small = raw_op_full(6, TD_U8, 1, (int64_t[]){16}, 0.0);
    raw_send_ops(&s, &small, 1);
    wb.tensor = 6;
    wb.sha256 = (ProtobufCBinaryData){.len = 32, .data = good};
    cm = (Tensord__V1__ClientMessage)TENSORD__V1__CLIENT_MESSAGE__INIT;
    cm.body_case = TENSORD__V1__CLIENT_MESSAGE__BODY_WRITE_FROM_BLOB;
    cm.write_from_blob = &wb;
    cr_assert(raw_send(&s, &cm, NULL, 0, &seq));
    expect_failure(&s, seq, TD_ERANGE, "blob of the wrong size");

    /* Still serving. */
    seq = raw_send_fence(&s);
    raw_msg m;
    cr_assert_eq(raw_recv(&s, &m, 5000), 1);
    cr_expect_eq(m.kind, TENSORD__V1__SERVER_MESSAGE__BODY_FENCE);
    cr_expect_eq(m.seq, seq);
    raw_msg_fini(&m);
    cr_expect_eq(raw_close(&s), GRPC_STATUS_OK);
}

/* ---- background sends ---- */

/* The value of metric `name` (a line "NAME VALUE") from http://127.0.0.1:port/metrics
 * (plain HTTP/1.0 GET). */
static uint64_t metric_value(int port, const char *name)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0, "metrics port %d", port);
    const char req[] = "GET /metrics HTTP/1.0\r\n\r\n";
    cr_assert_eq(write(fd, req, sizeof req - 1), (ssize_t)(sizeof req - 1));
    static char body[1 << 17];
    size_t len = 0;
    ssize_t got;
    while (len < sizeof body - 1 && (got = read(fd, body + len, sizeof body - 1 - len)) > 0)
        len += (size_t)got;
    close(fd);
    body[len] = '\0';
    char key[128];
    snprintf(key, sizeof key, "\n%s ", name);
    const char *line = strstr(body, key);
    cr_assert_not_null(line, "no %s in the metrics", name);
    return strtoull(line + strlen(key), NULL, 10);
}

/* tensord_received_bytes_total: what the server took off the wire. */
static uint64_t metrics_received(int port)
{
    return metric_value(port, "tensord_received_bytes_total");
}

/* Background sends are on by default only on hosts of 4 CPUs or more (client/remote.c):
 * the suite turns them on for its tests, whatever the machine. */
static void async_on(void) { setenv("TENSORD_WRITE_COPY_MAX", "16777216", 1); }
static void start_tcp_async(void)
{
    async_on();
    start_tcp();
}

static int g_metrics_port;

static void start_with_metrics(void)
{
    g_metrics_port = td_test_free_port();
    cr_assert_gt(g_metrics_port, 0);
    static char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", g_metrics_port);
    const char *const args[] = {"--metrics", addr, NULL};
    async_on();
    start_with(args);
}

/* TD_WRITE_FRESH seen from the server (tensord.h): on every transport that offers
 * uploads, a marked upload or rewrite of any size costs no round trip of its own, every
 * byte is sent, ops recorded before a marked td_write_ex see the old bytes and ops after
 * it the new, and the server's candidate gauges (tensord_blob_candidates and _bytes) do not
 * move; an unmarked upload of the same size does move them on the same session, so the
 * gauges are watched where candidates would show. Sizes: around the 1 MiB offer threshold
 * and chunk, and past the 16 MiB background-send limit. */
static void fresh_uploads_keep_nothing(const td_options *o, const char *want_transport)
{
    td_context *ctx = connect_with(o);
    cr_assert_str_eq(td_context_transport(ctx), want_transport);
    const size_t sizes[] = {CHUNK - 1, CHUNK, CHUNK + 1, 17 * CHUNK + 3};
    const size_t max = 17 * CHUNK + 3;
    uint8_t *x = malloc(max), *y = malloc(max);
    int32_t *got = malloc(max * sizeof *got);
    cr_assert(x && y && got);
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        const size_t n = sizes[k];
        fill(x, n, 300 + k);
        fill(y, n, 600 + k);
        const int64_t dims[1] = {(int64_t)n};
        uint64_t cand = metric_value(g_metrics_port, "tensord_blob_candidates");
        uint64_t cand_bytes = metric_value(g_metrics_port, "tensord_blob_candidates_bytes");
        td_stats s0, s1;
        td_get_stats(ctx, &s0);
        td_tensor *t = td_from_host_ex(ctx, TD_U8, 1, dims, x, TD_WRITE_FRESH);
        cr_assert_not_null(t, "%zu bytes: %s", n, td_last_error(ctx));
        td_tensor *before = td_cast(t, TD_I32);
        cr_assert_eq(td_write_ex(t, y, n, TD_WRITE_FRESH), TD_OK, "%s", td_last_error(ctx));
        td_tensor *after = td_cast(t, TD_I32);
        cr_assert_eq(td_fence(ctx), TD_OK, "%s", td_last_error(ctx));
        td_get_stats(ctx, &s1);
        cr_expect_eq(s1.round_trips - s0.round_trips, 1, "%zu bytes: %llu round trips for two "
                     "marked uploads and a fence", n,
                     (unsigned long long)(s1.round_trips - s0.round_trips));
        cr_expect_eq(s1.bytes_sent - s0.bytes_sent, 2 * (uint64_t)n, "%zu bytes: sent %llu", n,
                     (unsigned long long)(s1.bytes_sent - s0.bytes_sent));
        cr_expect_eq(metric_value(g_metrics_port, "tensord_blob_candidates"), cand,
                     "%zu bytes: a marked upload was kept as a candidate", n);
        cr_expect_eq(metric_value(g_metrics_port, "tensord_blob_candidates_bytes"), cand_bytes,
                     "%zu bytes: a marked upload's bytes are held as a candidate", n);
        check_contents(ctx, t, y, n);
        cr_assert_eq(td_read(before, got, n * sizeof *got), TD_OK, "%s", td_last_error(ctx));
        size_t i = 0;
        while (i < n && got[i] == x[i]) i++;
        cr_expect_eq(i, n, "%zu bytes: an op recorded before td_write_ex saw new bytes at %zu",
                     n, i);
        cr_assert_eq(td_read(after, got, n * sizeof *got), TD_OK, "%s", td_last_error(ctx));
        i = 0;
        while (i < n && got[i] == y[i]) i++;
        cr_expect_eq(i, n, "%zu bytes: an op recorded after td_write_ex saw old bytes at %zu",
                     n, i);
        td_release(before);
        td_release(after);
        td_release(t);
        /* the control: the same size unmarked is kept, and the gauges show it */
        td_tensor *u = td_from_host(ctx, TD_U8, 1, dims, x);
        cr_assert_eq(td_fence(ctx), TD_OK, "%s", td_last_error(ctx));
        if (n >= CHUNK) {
            cr_expect_eq(metric_value(g_metrics_port, "tensord_blob_candidates"), cand + 1,
                         "%zu bytes: the unmarked control was not kept", n);
            cr_expect_eq(metric_value(g_metrics_port, "tensord_blob_candidates_bytes"),
                         cand_bytes + n, "%zu bytes: the unmarked control's bytes", n);
        }
        td_release(u);
    }
    td_close(ctx);
    free(x);
    free(y);
    free(got);
}

static void start_unix_with_metrics(void)
{
    g_metrics_port = td_test_free_port();
    cr_assert_gt(g_metrics_port, 0);
    static char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", g_metrics_port);
    const char *const args[] = {"--metrics", addr, NULL};
    start_server(true, args);
}

Test(blobs, fresh_marked_uploads_keep_nothing_over_tcp_with_background_sends,
     .init = start_with_metrics, .fini = stop, .timeout = 300)
{
    fresh_uploads_keep_nothing(NULL, "grpc");
}

Test(blobs, fresh_marked_uploads_keep_nothing_over_a_unix_stream, .init = start_unix_with_metrics,
     .fini = stop, .timeout = 300)
{
    td_options o = {.no_shm = 1};
    fresh_uploads_keep_nothing(&o, "grpc");
}

/* shared memory offers only when blob_min_bytes is set (README "Batching and uploads") */
Test(blobs, fresh_marked_uploads_keep_nothing_over_shared_memory,
     .init = start_unix_with_metrics, .fini = stop, .timeout = 300)
{
    td_options o = {.blob_min_bytes = CHUNK};
    fresh_uploads_keep_nothing(&o, "shm+ring");
}

Test(background, bytes_arrive_while_the_client_makes_no_call, .init = start_with_metrics,
     .fini = stop, .timeout = 300)
{
    /* The offer off: the upload is the write alone, no round trip first. */
    td_options o = {.blob_min_bytes = SIZE_MAX};
    td_context *ctx = connect_with(&o);
    const size_t n = (size_t)12 << 20; /* a 4096-image training batch is 12.8 MB */
    uint8_t *buf = malloc(n), *want = malloc(n), *got = malloc(n);
    cr_assert(buf && want && got);
    fill(buf, n, 4242);
    memcpy(want, buf, n);
    uint64_t before = metrics_received(g_metrics_port);
    td_tensor *t = td_from_host(ctx, TD_U8, 1, (int64_t[]){(int64_t)n}, buf);
    cr_assert_not_null(t, "%s", td_last_error(ctx));
    /* The caller's memory is its own again as soon as the call returns. */
    fill(buf, n, 999);
    /* No libtensord call from here until the bytes are there: only the context's flusher
     * thread can keep gRPC sending (the client's completion queue drives its I/O). */
    uint64_t now = before;
    double t0 = td_test_now_ms();
    while (now - before < n && td_test_now_ms() - t0 < 30000) {
        usleep(10000);
        now = metrics_received(g_metrics_port);
    }
    cr_expect_geq(now - before, n, "the server received %llu of %zu bytes in %.0f ms with "
                  "the client idle", (unsigned long long)(now - before), n,
                  td_test_now_ms() - t0);
    cr_assert_eq(td_read(t, got, n), TD_OK, "%s", td_last_error(ctx));
    cr_expect(memcmp(got, want, n) == 0, "the tensor does not hold what td_from_host was given");
    td_release(t);
    td_close(ctx);
    free(buf);
    free(want);
    free(got);
}

Test(background, many_writes_reuse_the_copies, .init = start_tcp_async, .fini = stop,
     .timeout = 300)
{
    /* 48 writes of two chunks each: three times the 32 copy buffers, each write from the
     * same caller buffer refilled in between; interleaved with ops on the written tensors. */
    td_options o = {.blob_min_bytes = SIZE_MAX};
    td_context *ctx = connect_with(&o);
    enum { N = 48 };
    const size_t n = CHUNK + 4096;
    uint8_t *buf = malloc(n), *got = malloc(n), *want = malloc(n);
    cr_assert(buf && got && want);
    td_tensor *t[N], *neg[N];
    for (int i = 0; i < N; i++) {
        fill(buf, n, 7000 + (uint64_t)i);
        t[i] = td_from_host(ctx, TD_I8, 1, (int64_t[]){(int64_t)n}, buf);
        cr_assert_not_null(t[i], "write %d: %s", i, td_last_error(ctx));
        neg[i] = td_neg(t[i]);
        cr_assert_not_null(neg[i], "%s", td_last_error(ctx));
        memset(buf, 0, n);
    }
    for (int i = 0; i < N; i++) {
        fill(want, n, 7000 + (uint64_t)i);
        cr_assert_eq(td_read(t[i], got, n), TD_OK, "%s", td_last_error(ctx));
        cr_expect(memcmp(got, want, n) == 0, "write %d: bytes differ", i);
        cr_assert_eq(td_read(neg[i], got, n), TD_OK, "%s", td_last_error(ctx));
        size_t bad = 0;
        for (size_t k = 0; k < n; k++)
            bad += (int8_t)got[k] != (int8_t)(-(int8_t)want[k]);
        cr_expect_eq(bad, 0, "neg of write %d: %zu wrong elements", i, bad);
        td_release(neg[i]);
        td_release(t[i]);
    }
    td_stats st;
    td_get_stats(ctx, &st);
    cr_expect_eq(st.bytes_sent, (uint64_t)N * n, "bytes_sent %llu",
                 (unsigned long long)st.bytes_sent);
    td_close(ctx);
    free(buf);
    free(got);
    free(want);
}

Test(background, close_with_sends_queued, .init = start_tcp_async, .fini = stop, .timeout = 300)
{
    td_options o = {.blob_min_bytes = SIZE_MAX};
    const size_t n = (size_t)14 << 20;
    uint8_t *buf = malloc(n);
    cr_assert(buf);
    for (int round = 0; round < 3; round++) {
        td_context *ctx = connect_with(&o);
        fill(buf, n, 31 + (uint64_t)round);
        td_tensor *t = td_from_host(ctx, TD_U8, 1, (int64_t[]){(int64_t)n}, buf);
        cr_assert_not_null(t, "%s", td_last_error(ctx));
        td_close(ctx); /* the copies still queued: sent, then the session ends */
    }
    free(buf);
    td_server_info info;
    cr_expect(td_test_wait_usage(srv.addr, 0, 0, 10000, &info),
              "the server still holds %llu sessions, %llu bytes",
              (unsigned long long)info.sessions, (unsigned long long)info.bytes_in_use);
}

Test(background, frozen_server_write_times_out, .init = start_tcp_async, .fini = stop,
     .timeout = 300)
{
    td_options o = {.call_timeout_ms = 1000, .blob_min_bytes = SIZE_MAX};
    td_context *ctx = connect_with(&o);
    const size_t n = (size_t)8 << 20;
    uint8_t *buf = malloc(n);
    cr_assert(buf);
    cr_assert_eq(td_fence(ctx), TD_OK, "%s", td_last_error(ctx));
    kill(srv.pid, SIGSTOP);
    int wst = 0;
    cr_assert_eq(waitpid(srv.pid, &wst, WUNTRACED), srv.pid);
    cr_assert(WIFSTOPPED(wst), "tensord did not stop (status %#x)", wst);
    /* Each write returns once copied; when the copies in flight (32 MiB) and the kernel's
     * socket buffers are full, the next one waits for a buffer, up to the call timeout. */
    td_status st = TD_OK;
    int writes = 0;
    double t0 = 0;
    td_tensor *held[64];
    while (st == TD_OK && writes < 64) {
        fill(buf, n, 500 + (uint64_t)writes);
        t0 = td_test_now_ms();
        held[writes] = td_from_host(ctx, TD_U8, 1, (int64_t[]){(int64_t)n}, buf);
        st = held[writes] != NULL ? TD_OK : td_last_status(ctx);
        writes++;
    }
    double dt = td_test_now_ms() - t0;
    kill(srv.pid, SIGCONT);
    cr_expect_eq(st, TD_ETIMEOUT, "after %d writes of 8 MiB: %s: %s", writes,
                 td_status_name(st), td_last_error(ctx));
    cr_expect(dt >= 900 && dt < 3500, "the write gave up after %.0f ms (timeout 1000)", dt);
    cr_expect(strstr(td_last_error(ctx), "1000 ms") != NULL, "%s", td_last_error(ctx));
    cr_expect_eq(td_fence(ctx), TD_ECLOSED, "after the timeout");
    for (int i = 0; i < writes - 1; i++) td_release(held[i]);
    td_close(ctx);
    free(buf);
}

Test(background, bad_copy_max_is_refused, .init = start_tcp_async, .fini = stop, .timeout = 300)
{
    char uri[600];
    td_test_server_uri(&srv, "cpu", uri, sizeof uri);
    setenv("TENSORD_WRITE_COPY_MAX", "12MB", 1);
    td_context *ctx = NULL;
    td_status st = td_connect(uri, NULL, &ctx);
    cr_expect_eq(st, TD_EINVAL, "%s", td_status_name(st));
    cr_expect(strstr(td_connect_error(), "TENSORD_WRITE_COPY_MAX=12MB") != NULL, "%s",
              td_connect_error());
    if (ctx != NULL) td_close(ctx);
    /* 0: every write waits until sent; the bytes are the same. */
    setenv("TENSORD_WRITE_COPY_MAX", "0", 1);
    ctx = connect_with(NULL);
    round_trip(ctx, 3 * CHUNK + 7, 77);
    td_close(ctx);
    unsetenv("TENSORD_WRITE_COPY_MAX");
}

/* A 14 MiB upload to a frozen server: *t gets the tensor (NULL on failure); returns the
 * status. The server runs again when this returns. */
static td_status upload_while_frozen(td_context *ctx, const uint8_t *buf, size_t n,
                                     td_tensor **t)
{
    cr_assert_eq(td_fence(ctx), TD_OK, "%s", td_last_error(ctx));
    kill(srv.pid, SIGSTOP);
    int wst = 0;
    cr_assert_eq(waitpid(srv.pid, &wst, WUNTRACED), srv.pid);
    cr_assert(WIFSTOPPED(wst), "tensord did not stop (status %#x)", wst);
    *t = td_from_host(ctx, TD_U8, 1, (int64_t[]){(int64_t)n}, buf);
    td_status st = *t != NULL ? TD_OK : td_last_status(ctx);
    kill(srv.pid, SIGCONT);
    return st;
}

Test(background, returns_before_the_bytes_are_on_the_wire_unless_off, .init = start_tcp_async,
     .fini = stop, .timeout = 300)
{
    const size_t n = (size_t)14 << 20;
    uint8_t *buf = malloc(n), *got = malloc(n);
    cr_assert(buf && got);
    fill(buf, n, 1414);
    /* Default: copied and queued, so the call returns while the server takes nothing; the
     * bytes arrive once it runs again. */
    td_options o = {.call_timeout_ms = 1000, .blob_min_bytes = SIZE_MAX};
    td_context *ctx = connect_with(&o);
    td_tensor *t = NULL;
    cr_expect_eq(upload_while_frozen(ctx, buf, n, &t), TD_OK, "%s", td_last_error(ctx));
    if (t != NULL) {
        cr_assert_eq(td_read(t, got, n), TD_OK, "%s", td_last_error(ctx));
        cr_expect(memcmp(got, buf, n) == 0, "bytes differ after the server resumed");
        td_release(t);
    }
    td_close(ctx);
    /* Off (TENSORD_WRITE_COPY_MAX=0, or no flusher thread): the call waits for the wire and
     * gives up after call_timeout_ms. */
    for (int way = 0; way < 2; way++) {
        td_options off = o;
        if (way == 0) setenv("TENSORD_WRITE_COPY_MAX", "0", 1);
        else off.batch_flush_us = -1;
        ctx = connect_with(&off);
        unsetenv("TENSORD_WRITE_COPY_MAX");
        td_status st = upload_while_frozen(ctx, buf, n, &t);
        cr_expect_eq(st, TD_ETIMEOUT, "%s: %s: %s",
                     way == 0 ? "TENSORD_WRITE_COPY_MAX=0" : "batch_flush_us -1",
                     td_status_name(st), td_last_error(ctx));
        td_release(t);
        td_close(ctx);
    }
    free(buf);
    free(got);
}

static void *kill_later(void *arg)
{
    (void)arg;
    usleep(500000);
    kill(srv.pid, SIGKILL);
    return NULL;
}

Test(background, server_death_under_a_queued_write_fails_it_at_once, .init = start_tcp_async,
     .fini = stop, .timeout = 300)
{
    /* A write too large to copy, queued behind a copied one on a frozen server, when the
     * server dies: the session's end drops the queue (the chunks over the caller's memory
     * included), so the write fails then, not a call timeout later (it waited 10.5 s). */
    td_options o = {.call_timeout_ms = 10000, .blob_min_bytes = SIZE_MAX};
    td_context *ctx = connect_with(&o);
    const size_t small = (size_t)8 << 20, big = (size_t)128 << 20;
    uint8_t *buf = malloc(big);
    cr_assert(buf);
    fill(buf, big, 808);
    cr_assert_eq(td_fence(ctx), TD_OK, "%s", td_last_error(ctx));
    kill(srv.pid, SIGSTOP);
    int wst = 0;
    cr_assert_eq(waitpid(srv.pid, &wst, WUNTRACED), srv.pid);
    td_tensor *a = td_from_host(ctx, TD_U8, 1, (int64_t[]){(int64_t)small}, buf);
    cr_assert_not_null(a, "%s", td_last_error(ctx));
    pthread_t killer;
    cr_assert_eq(pthread_create(&killer, NULL, kill_later, NULL), 0);
    double t0 = td_test_now_ms();
    td_tensor *b = td_from_host(ctx, TD_U8, 1, (int64_t[]){(int64_t)big}, buf);
    double dt = td_test_now_ms() - t0;
    pthread_join(killer, NULL);
    td_test_server_kill(&srv); /* reap */
    cr_expect_null(b, "the write succeeded on a dead server");
    cr_expect_eq(td_last_status(ctx), TD_EUNAVAILABLE, "%s: %s",
                 td_status_name(td_last_status(ctx)), td_last_error(ctx));
    cr_expect_lt(dt, 5000, "the write failed %.0f ms after it started; the server died at "
                 "500 ms (call timeout 10000 ms)", dt);
    td_release(a);
    td_close(ctx);
    free(buf);
}

Test(background, copy_max_takes_digits_only, .init = start_tcp_async, .fini = stop, .timeout = 300)
{
    /* strtoull alone let these through: a sign after blanks wrapped to "copy everything",
     * and a count past 2^64 saturated silently. */
    const char *const bad[] = {" -1", "+5", " 16", "99999999999999999999", "16 ", "0x10"};
    char uri[600];
    td_test_server_uri(&srv, "cpu", uri, sizeof uri);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv("TENSORD_WRITE_COPY_MAX", bad[i], 1);
        td_context *ctx = NULL;
        td_status st = td_connect(uri, NULL, &ctx);
        cr_expect_eq(st, TD_EINVAL, "TENSORD_WRITE_COPY_MAX='%s': %s", bad[i],
                     td_status_name(st));
        if (ctx != NULL) td_close(ctx);
    }
    setenv("TENSORD_WRITE_COPY_MAX", "18446744073709551615", 1);
    td_context *ctx = connect_with(NULL);
    round_trip(ctx, 3 * CHUNK + 7, 78);
    td_close(ctx);
    unsetenv("TENSORD_WRITE_COPY_MAX");
}

Test(background, no_thread_hands_every_message_over, .init = start_tcp_async, .fini = stop,
     .timeout = 300)
{
    /* batch_flush_us < 0: no thread drives the send queue, so a call must not return with
     * a message still queued behind the one gRPC is sending. A flush sends the ops, then
     * the releases behind them at once: the release must reach the server while the
     * program makes no further call. */
    td_options o = {.batch_max_ops = 4, .batch_flush_us = -1};
    td_context *ctx = connect_with(&o);
    td_tensor *t = td_full(ctx, TD_F32, 1, (int64_t[]){1000}, 1.0);
    cr_assert_eq(td_fence(ctx), TD_OK, "%s", td_last_error(ctx));
    td_server_info info;
    cr_assert_eq(td_server_info_get(srv.addr, 5000, &info), TD_OK);
    uint64_t before = info.tensors;
    td_release(t);
    td_tensor *made[4];
    for (int i = 0; i < 4; i++) made[i] = td_full(ctx, TD_F32, 1, (int64_t[]){10}, 2.0);
    uint64_t want = before - 1 + 4;
    double t0 = td_test_now_ms();
    do {
        usleep(10000);
        cr_assert_eq(td_server_info_get(srv.addr, 5000, &info), TD_OK);
    } while (info.tensors != want && td_test_now_ms() - t0 < 3000);
    cr_expect_eq(info.tensors, want, "the server holds %llu tensors, expected %llu (the "
                 "release stayed in the client's queue)", (unsigned long long)info.tensors,
                 (unsigned long long)want);
    for (int i = 0; i < 4; i++) td_release(made[i]);
    td_close(ctx);
}

Test(background, off_by_default_on_fewer_than_four_cpus, .init = start_tcp, .fini = stop,
     .timeout = 300)
{
    /* The default follows the CPUs this process may use (its affinity): with one, every
     * upload waits for the wire, so a 14 MiB upload to a frozen server times out. */
    unsetenv("TENSORD_WRITE_COPY_MAX");
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(sched_getcpu() >= 0 ? sched_getcpu() : 0, &one);
    cr_assert_eq(sched_setaffinity(0, sizeof one, &one), 0);
    const size_t n = (size_t)14 << 20;
    uint8_t *buf = malloc(n);
    cr_assert(buf);
    fill(buf, n, 1415);
    td_options o = {.call_timeout_ms = 1000, .blob_min_bytes = SIZE_MAX};
    td_context *ctx = connect_with(&o);
    td_tensor *t = NULL;
    td_status st = upload_while_frozen(ctx, buf, n, &t);
    cr_expect_eq(st, TD_ETIMEOUT, "one CPU, default options: %s: %s", td_status_name(st),
                 td_last_error(ctx));
    td_release(t);
    td_close(ctx);
    free(buf);
}

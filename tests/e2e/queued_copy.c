/* e2e/queued_copy.c — a same-host GPU session's uploads through the shared-memory region
 * when the device copy is queued (server/shmdone.h), against a real tensord on a unix
 * socket that serves the stand-in device qdev:0 (tests/e2e/qdev_module.c: malloc'd memory
 * that the engine treats as a GPU's, copies that complete milliseconds after they are
 * queued, fences, pinning):
 *
 *  - bytes: uploads below the 64 KiB threshold, of one slot, of several, and of 40 MiB
 *    (more than the eight 2 MiB slots together, so slots are reused while copies are still
 *    queued), several tensors uploaded before any is read, and a host buffer overwritten as
 *    soon as its upload returns, all read back bit-identical. This is the property the
 *    ShmDone order holds up: a ShmDone sent before its copy had read the slot would let
 *    the client overwrite the slot under the copy. The module's stats show the copies were
 *    queued and that ShmDone waited for some of them;
 *  - the same with TENSORD_SHM_WRITE_WAIT=1 (the worker waits for each copy): the same
 *    bytes, and the module saw no queued copy;
 *  - a client that closes, or is killed, while its copies are queued: the server stays up
 *    and clean (no copy reads the region after it was unpinned; ASan/LSan pass), and a new
 *    session works;
 *  - every test ends by stopping the server and requiring exit status 0 (a crash, or an
 *    ASan/LSan report at its exit, fails the test, which names it on its own line;
 *    qdev_stop, the .fini, cleans up after a test that ended early, and a failure there
 *    fails the run through tests/criterion/fini_guard.c, though criterion prints the test
 *    as passed);
 *  - a copy whose fence fails: the next td_fence fails with TD_EDEVICE naming the shm write
 *    and "device copy failed", over the request ring and over the stream, and once only;
 *    the session goes on.
 * The hostile side (a flood of ShmWrites of one region offset) is tests/hostile/shm_queued.py.
 */
#include "server_fixture.h"
#include "suite_fixture.h"
#include "tensord.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)
#define BIG (40 * MiB)

static char g_stats[256];

/* The environment of the tensord this test starts: the stand-in module, its stats file, and
 * `extra` ("NAME=VALUE" entries, NULL-terminated, may be NULL). Cleared by fini. */
static void qdev_env(const char *const *extra)
{
    static int n;
    snprintf(g_stats, sizeof g_stats, "/tmp/tensord-qdev-%ld-%d.stats", (long)getpid(), n++);
    unlink(g_stats);
    setenv("TENSORD_BACKEND_DIR", TD_TEST_QDEV_DIR, 1);
    setenv("TD_TEST_QDEV_STATS", g_stats, 1);
    for (int i = 0; extra != NULL && extra[i] != NULL; i++) {
        char name[64];
        const char *eq = strchr(extra[i], '=');
        cr_assert(eq != NULL && (size_t)(eq - extra[i]) < sizeof name, "%s", extra[i]);
        snprintf(name, sizeof name, "%.*s", (int)(eq - extra[i]), extra[i]);
        setenv(name, eq + 1, 1);
    }
}

static void qdev_start(const char *const *extra)
{
    qdev_env(extra);
    start_unix();
}

static void qdev_stop(void)
{
    stop();
    static const char *const vars[] = {"TENSORD_BACKEND_DIR", "TD_TEST_QDEV_STATS",
                                       "TD_TEST_QDEV_DELAY_US", "TD_TEST_QDEV_FENCE_FAIL",
                                       "TD_TEST_QDEV_FENCE_LAG_US", "TENSORD_SHM_WRITE_WAIT"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
    unlink(g_stats);
}

static void start_queued(void)
{
    static const char *const env[] = {"TD_TEST_QDEV_DELAY_US=3000", NULL};
    qdev_start(env);
}

static void start_wait(void)
{
    static const char *const env[] = {"TD_TEST_QDEV_DELAY_US=3000", "TENSORD_SHM_WRITE_WAIT=1",
                                      NULL};
    qdev_start(env);
}

/* Every fence fails, and its waiter returns 30 ms after the copy: long after the worker has
 * synchronised the stream for a fence of its own. */
static void start_failing(void)
{
    static const char *const env[] = {"TD_TEST_QDEV_DELAY_US=2000", "TD_TEST_QDEV_FENCE_FAIL=1",
                                      "TD_TEST_QDEV_FENCE_LAG_US=30000", NULL};
    qdev_start(env);
}

TestSuite(qdev, .init = start_queued, .fini = qdev_stop, .timeout = 120);
TestSuite(qdev_wait, .init = start_wait, .fini = qdev_stop, .timeout = 120);
TestSuite(qdev_fail, .init = start_failing, .fini = qdev_stop, .timeout = 120);

/* A context on qdev:0 with options o (may be NULL) that must use transport `want`. The
 * client takes only the device kinds it knows from a unix: uri's last component, so the
 * context asks for "auto": the server's first accelerator, which qdev:0 is. */
static td_context *connect_qdev(const td_options *o, const char *want)
{
    td_context *ctx = connect_device("auto", o);
    cr_assert_str_eq(td_device_name(ctx), "qdev:0", "placed on %s", td_device_name(ctx));
    cr_assert_str_eq(td_context_transport(ctx), want, "qdev:0 over %s", srv.addr);
    return ctx;
}

/* What the module's streams of the sessions so far wrote at their end (qdev_module.c). */
typedef struct qdev_stats {
    unsigned long long streams, queued, sync_writes, fences, waited, most_queued;
    unsigned violations;
    char first_violation[300];
} qdev_stats;

/* Wait until the server holds no session (their streams are destroyed by then), then read
 * the stats file. */
static qdev_stats read_stats(void)
{
    struct td_server_info info;
    cr_assert(td_test_wait_usage(srv.addr, 0, 0, 15000, &info),
              "sessions did not end: %llu sessions, %llu bytes",
              (unsigned long long)info.sessions, (unsigned long long)info.bytes_in_use);
    qdev_stats st;
    memset(&st, 0, sizeof st);
    FILE *f = fopen(g_stats, "r");
    char line[512];
    while (f != NULL && fgets(line, sizeof line, f) != NULL) {
        unsigned long long q, s, fe, w, m;
        if (sscanf(line, "qdev stream: queued %llu, synchronous writes %llu, fences %llu, "
                         "fences waited %llu, most queued at once %llu",
                   &q, &s, &fe, &w, &m) == 5) {
            st.streams++;
            st.queued += q;
            st.sync_writes += s;
            st.fences += fe;
            st.waited += w;
            if (m > st.most_queued) st.most_queued = m;
        } else if (strncmp(line, "VIOLATION", 9) == 0) {
            if (st.violations++ == 0)
                snprintf(st.first_violation, sizeof st.first_violation, "%.280s", line);
        }
    }
    if (f != NULL) fclose(f);
    cr_log_info("qdev: %llu streams, %llu copies queued, %llu synchronous writes, %llu fences "
                "(%llu waited), at most %llu queued at once",
                st.streams, st.queued, st.sync_writes, st.fences, st.waited, st.most_queued);
    cr_expect_eq(st.violations, 0u, "the module saw %u broken rules, the first: %s",
                 st.violations, st.first_violation);
    return st;
}

/* Upload n bytes as u8[n] on ctx, read them back and compare; then td_write other bytes
 * over them and do it again. */
static void round_trip(td_context *ctx, uint8_t *src, uint8_t *back, size_t n, uint64_t seed)
{
    int64_t dims[1] = {(int64_t)n};
    fill_random_bytes(src, n, seed);
    td_tensor *t = td_from_host(ctx, TD_U8, 1, dims, src);
    cr_assert_not_null(t, "td_from_host(%zu): %s", n, td_last_error(ctx));
    memset(back, 0xA5, n);
    cr_assert_eq(td_read(t, back, n), TD_OK, "td_read(%zu): %s", n, td_last_error(ctx));
    cr_assert(memcmp(back, src, n) == 0, "%zu bytes came back different", n);
    fill_random_bytes(src, n, seed + 1000);
    cr_assert_eq(td_write(t, src, n), TD_OK, "td_write(%zu): %s", n, td_last_error(ctx));
    cr_assert_eq(td_read(t, back, n), TD_OK, "td_read(%zu): %s", n, td_last_error(ctx));
    cr_assert(memcmp(back, src, n) == 0, "%zu bytes came back different after td_write", n);
    td_release(t);
}

/* The uploads of the header comment, on one context; the stats are read after it closed. */
static qdev_stats uploads(void)
{
    td_context *ctx = connect_qdev(NULL, "shm+ring");
    uint8_t *src = malloc(BIG), *back = malloc(BIG);
    cr_assert(src != NULL && back != NULL);
    const size_t sizes[] = {1,   4099,    (64 << 10) - 1, 64 << 10,        300 << 10,
                            MiB, 2 * MiB, 2 * MiB + 1,    5 * MiB + 4099, BIG};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        round_trip(ctx, src, back, sizes[i], i + 1);

    /* several tensors, each over several slots, uploaded before any is read */
    enum { NT = 6 };
    const size_t n = 7 * MiB + 123;
    td_tensor *t[NT];
    int64_t dims[1] = {(int64_t)n};
    for (int k = 0; k < NT; k++) {
        fill_random_bytes(src, n, 50 + (uint64_t)k);
        t[k] = td_from_host(ctx, TD_U8, 1, dims, src);
        cr_assert_not_null(t[k], "tensor %d: %s", k, td_last_error(ctx));
    }
    for (int k = 0; k < NT; k++) {
        fill_random_bytes(src, n, 50 + (uint64_t)k);
        cr_assert_eq(td_read(t[k], back, n), TD_OK, "%s", td_last_error(ctx));
        cr_assert(memcmp(back, src, n) == 0, "tensor %d of %d came back different", k, NT);
        td_release(t[k]);
    }

    /* a host buffer: the upload returns once the server is done with it, so overwriting it
     * at once changes nothing */
    const size_t hn = 20 * MiB + 4099;
    uint8_t *hb = td_host_alloc(ctx, hn);
    cr_assert_not_null(hb, "%s", td_last_error(ctx));
    fill_random_bytes(hb, hn, 77);
    memcpy(src, hb, hn);
    int64_t hd[1] = {(int64_t)hn};
    td_tensor *h = td_from_host(ctx, TD_U8, 1, hd, hb);
    cr_assert_not_null(h, "%s", td_last_error(ctx));
    memset(hb, 0x5A, hn);
    cr_assert_eq(td_read(h, back, hn), TD_OK, "%s", td_last_error(ctx));
    cr_assert(memcmp(back, src, hn) == 0, "a host buffer's %zu bytes came back different", hn);
    td_release(h);
    cr_expect_eq(td_host_free(ctx, hb), TD_OK);
    cr_expect_eq(td_fence(ctx), TD_OK, "%s", td_last_error(ctx));
    td_close(ctx);
    free(src);
    free(back);
    return read_stats();
}

Test(qdev, uploads_come_back_bit_identical)
{
    qdev_stats st = uploads();
    /* 40 MiB alone is 20 pieces of the 2 MiB slots, each queued */
    cr_expect_geq(st.queued, 20u, "copies queued: %llu", st.queued);
    cr_expect_geq(st.waited, 1u, "no ShmDone waited for its copy: the copies were not late");
    cr_expect_geq(st.most_queued, 2u, "the copies never overlapped");
    stop();
}

Test(qdev_wait, uploads_come_back_bit_identical)
{
    qdev_stats st = uploads();
    cr_expect_eq(st.queued, 0u, "TENSORD_SHM_WRITE_WAIT=1, yet %llu copies were queued",
                 st.queued);
    cr_expect_geq(st.sync_writes, 20u, "synchronous writes: %llu", st.sync_writes);
    stop();
}

/* A client that uploads and closes at once, its last copies still queued. */
Test(qdev, close_with_copies_queued)
{
    uint8_t *src = malloc(BIG);
    cr_assert_not_null(src);
    fill_random_bytes(src, BIG, 3);
    int64_t dims[1] = {(int64_t)BIG};
    for (int round = 0; round < 3; round++) {
        td_context *ctx = connect_qdev(NULL, "shm+ring");
        td_tensor *t = td_from_host(ctx, TD_U8, 1, dims, src);
        cr_assert_not_null(t, "%s", td_last_error(ctx));
        td_close(ctx);
    }
    qdev_stats st = read_stats();
    cr_expect_eq(st.streams, 3u);
    cr_expect_geq(st.most_queued, 2u, "copies were queued at the close");
    /* still serving */
    td_context *ctx = connect_qdev(NULL, "shm+ring");
    uint8_t *back = malloc(BIG);
    round_trip(ctx, src, back, 3 * MiB + 1, 9);
    td_close(ctx);
    free(back);
    free(src);
    stop();
}

/* The killed child: uploads 40 MiB again and again and never reads. */
static void upload_forever(const char *uri)
{
    td_context *ctx = NULL;
    if (td_connect(uri, NULL, &ctx) != TD_OK) _exit(2);
    if (strcmp(td_context_transport(ctx), "shm+ring") != 0) _exit(3);
    if (strcmp(td_device_name(ctx), "qdev:0") != 0) _exit(3);
    uint8_t *p = malloc(BIG);
    if (p == NULL) _exit(4);
    fill_random_bytes(p, BIG, 5);
    int64_t dims[1] = {(int64_t)BIG};
    td_tensor *t = td_from_host(ctx, TD_U8, 1, dims, p);
    for (;;) td_write(t, p, BIG);
}

Test(qdev, killed_client_with_copies_queued)
{
    /* its session holds the 64 MiB region and the tensor */
    kill_client_mid_work_on("auto", upload_forever, 64 * MiB + BIG, 300, NULL, NULL);
    qdev_stats st = read_stats();
    cr_expect_geq(st.most_queued, 2u, "copies were queued");
    td_context *ctx = connect_qdev(NULL, "shm+ring");
    uint8_t *src = malloc(3 * MiB + 1), *back = malloc(3 * MiB + 1);
    round_trip(ctx, src, back, 3 * MiB + 1, 11);
    td_close(ctx);
    free(src);
    free(back);
    stop();
}

/* A 2 MiB upload (queued) whose fence fails: the next td_fence says so, once. */
static void failed_copy_reported(const td_options *o, const char *transport)
{
    td_context *ctx = connect_qdev(o, transport);
    const size_t n = 2 * MiB;
    uint8_t *src = malloc(n), *back = malloc(n);
    fill_random_bytes(src, n, 21);
    int64_t dims[1] = {(int64_t)n};
    td_tensor *t = td_from_host(ctx, TD_U8, 1, dims, src);
    cr_assert_not_null(t, "%s", td_last_error(ctx));
    td_status st = td_fence(ctx);
    const char *e = td_last_error(ctx);
    cr_expect_eq(st, TD_EDEVICE, "%s: td_fence after a failed copy: %s: %s", transport,
                 td_status_name(st), e);
    cr_expect(strstr(e, "shm write seq") != NULL && strstr(e, "device copy failed") != NULL,
              "%s: the message names the shm write and the failed copy: %s", transport, e);
    cr_expect_eq(td_fence(ctx), TD_OK, "%s: reported once: %s", transport, td_last_error(ctx));
    /* the session goes on */
    td_tensor *f = td_full(ctx, TD_U8, 1, dims, 7.0);
    cr_assert_eq(td_read(f, back, n), TD_OK, "%s: %s", transport, td_last_error(ctx));
    cr_expect(back[0] == 7 && back[n - 1] == 7, "%s: td_full after the failure", transport);
    td_release(f);
    td_release(t);
    td_close(ctx);
    free(src);
    free(back);
}

Test(qdev_fail, failed_copy_is_reported_by_the_next_fence)
{
    failed_copy_reported(NULL, "shm+ring");
    td_options o = {.no_ring = 1};
    failed_copy_reported(&o, "shm");
    read_stats();
    stop();
}

/* e2e/ring.c — the request ring of same-host sessions (tensord.proto "request ring", README
 * "Same-host clients"), against a real tensord on a unix socket:
 *
 *  - negotiation: a unix: context uses "shm+ring"; td_options.no_ring and
 *    TENSORD_NO_RING=1 leave "shm"; no_shm leaves "grpc";
 *  - identical bytes and errors: one workload (ops, small and large reads, fences,
 *    releases, an op over the session's byte limit whose failure is deferred and whose
 *    tensor then reads as poisoned) gives the same bytes, statuses and messages over the
 *    ring, over the region without the ring, and over the stream alone;
 *  - order between the two paths: batches large enough to go on the stream, then a read on
 *    the ring, see every earlier op;
 *  - a client killed (SIGKILL) while it keeps the ring busy leaves the server serving, with
 *    no session and no bytes held;
 *  - fairness: while one ring session loops small op + read round trips, a stream session
 *    on the same device still gets its fences answered promptly;
 *  - a --no-ring server gives its unix clients the region without the ring ("shm", and
 *    tensorctl info says why), with the same bytes and errors as the stream.
 * The hostile side (garbage in the ring) is tests/hostile/ring.py.
 */
#include "server_fixture.h"
#include "suite_fixture.h"
#include "tensord.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const k_args[] = {"--shm-bytes", "2M", "--max-session-bytes", "12M", NULL};

static void start_ring(void) { start_server(true, k_args); }

TestSuite(ring, .init = start_ring, .fini = stop, .timeout = 60);

Test(ring, negotiation)
{
    expect_transport(NULL, "shm+ring", "default options");
    td_options o = {.no_ring = 1};
    expect_transport(&o, "shm", "no_ring");
    td_options g = {.no_shm = 1};
    expect_transport(&g, "grpc", "no_shm");
    setenv("TENSORD_NO_RING", "1", 1);
    expect_transport(NULL, "shm", "TENSORD_NO_RING=1");
    unsetenv("TENSORD_NO_RING");
}

/* What one run of the workload produced: every read's bytes and every status and
 * message, appended in order. */
typedef struct transcript {
    char text[16384];
    size_t len;
    uint8_t bytes[1 << 16];
    size_t nbytes;
} transcript;

static void note(transcript *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(transcript *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->text + t->len, sizeof t->text - t->len, fmt, ap);
    va_end(ap);
    if (n > 0) t->len += (size_t)n < sizeof t->text - t->len ? (size_t)n : 0;
}

static void take(transcript *t, const void *p, size_t n)
{
    size_t room = sizeof t->bytes - t->nbytes;
    size_t k = n < room ? n : room;
    memcpy(t->bytes + t->nbytes, p, k);
    t->nbytes += k;
}

static void read_into(transcript *t, td_context *ctx, td_tensor *x, const char *what)
{
    size_t n = td_nbytes(x);
    uint8_t *buf = malloc(n > 0 ? n : 1);
    cr_assert_not_null(buf);
    td_status st = td_read(x, buf, n);
    note(t, "%s: read %zu bytes: %s%s%s\n", what, n, td_status_name(st),
         st != TD_OK ? ": " : "", st != TD_OK ? td_last_error(ctx) : "");
    if (st == TD_OK) take(t, buf, n < 4096 ? n : 4096);
    if (st == TD_OK && n > 4096) take(t, buf + n - 4096, 4096);
    free(buf);
}

static void workload(td_context *ctx, transcript *t)
{
    int64_t d2[2] = {64, 64}, d1[1] = {1}, dbig[1] = {(int64_t)3 << 20}; /* 12 MiB f32 */
    td_tensor *a = td_rand_normal(ctx, TD_F32, 2, d2, 7, 0.0, 1.0);
    td_tensor *b = td_rand_uniform(ctx, TD_F32, 2, d2, 8, -1.0, 1.0);
    td_tensor *m = td_matmul(a, b);
    td_tensor *s = td_softmax(m, 1);
    read_into(t, ctx, s, "softmax");                   /* 16 KiB: the ring */
    td_tensor *sum = td_sum(m, 2, (int[]){0, 1}, false);
    read_into(t, ctx, sum, "sum");                     /* a scalar */
    td_status st = td_fence(ctx);
    note(t, "fence: %s\n", td_status_name(st));
    /* past the session's byte limit: the op fails on the server, deferred to the fence */
    td_tensor *big = td_full(ctx, TD_F32, 1, dbig, 1.0);
    td_tensor *one = td_full(ctx, TD_F32, 1, d1, 2.5);
    st = td_fence(ctx);
    note(t, "fence after the big op: %s: %s\n", td_status_name(st),
         st != TD_OK ? td_last_error(ctx) : "");
    read_into(t, ctx, one, "one after the failure");
    td_tensor *big_half = td_mul(big, one);
    read_into(t, ctx, big_half, "poisoned");
    td_release(big_half);
    td_release(big);
    /* a chain of small batches, each read at once (held and sent with the read) */
    td_tensor *x = td_full(ctx, TD_F32, 1, d1, 0.0);
    for (int i = 0; i < 50; i++) {
        td_tensor *y = td_add(x, one);
        td_release(x);
        x = y;
        float v;
        st = td_read(x, &v, sizeof v);
        take(t, &v, sizeof v);
        if (st != TD_OK) note(t, "chain %d: %s\n", i, td_status_name(st));
    }
    /* a larger read (region or stream) after ring traffic */
    int64_t dm[1] = {(int64_t)1 << 18};
    td_tensor *mid = td_rand_uniform(ctx, TD_F32, 1, dm, 9, 0.0, 1.0);
    read_into(t, ctx, mid, "1 MiB");
    td_release(mid);
    td_release(x);
    td_release(sum);
    td_release(s);
    td_release(m);
    td_release(b);
    td_release(a);
    td_release(one);
    st = td_fence(ctx);
    note(t, "last fence: %s\n", td_status_name(st));
}

/* Drop every " (... bytes in use)" from text. */
static void unlimit(char *text)
{
    char *p;
    while ((p = strstr(text, " bytes in use)")) != NULL) {
        char *open = p;
        while (open > text && *open != '(') open--;
        if (open > text && open[-1] == ' ') open--;
        char *end = p + strlen(" bytes in use)");
        memmove(open, end, strlen(end) + 1);
    }
}

/* Run the workload on one context per options set n (at most 3), each of which must get
 * transport want[k], and expect every transcript to equal the first. */
static void expect_same_on_every_path(const td_options *opts, const char *const *want, int n)
{
    static transcript tr[3];
    cr_assert_leq(n, 3);
    for (int k = 0; k < n; k++) {
        memset(&tr[k], 0, sizeof tr[k]);
        td_context *ctx = connect_with(&opts[k]);
        cr_assert_str_eq(td_context_transport(ctx), want[k]);
        workload(ctx, &tr[k]);
        td_close(ctx);
    }
    cr_log_info("transcript over %s:\n%s", want[0], tr[0].text);
    cr_expect(strstr(tr[0].text, "EQUOTA") != NULL, "the big op failed: %s", tr[0].text);
    /* Without a region the session's byte limit is not reduced by it: the quota message
     * names a different limit. */
    for (int k = 0; k < n; k++) unlimit(tr[k].text);
    for (int k = 1; k < n; k++) {
        cr_expect_str_eq(tr[0].text, tr[k].text, "%s vs %s:\n%s\n----\n%s", want[0], want[k],
                         tr[0].text, tr[k].text);
        cr_expect_eq(tr[0].nbytes, tr[k].nbytes);
        cr_expect(memcmp(tr[0].bytes, tr[k].bytes, tr[0].nbytes) == 0, "bytes differ: %s vs %s",
                  want[0], want[k]);
    }
}

Test(ring, identical_bytes_and_errors_on_every_path)
{
    td_options opts[3] = {{0}, {.no_ring = 1}, {.no_shm = 1}};
    const char *const want[3] = {"shm+ring", "shm", "grpc"};
    expect_same_on_every_path(opts, want, 3);
}

Test(ring, reads_on_the_ring_wait_for_the_stream)
{
    td_context *ctx = connect_with(NULL);
    cr_assert_str_eq(td_context_transport(ctx), "shm+ring");
    td_tensor *one = td_full(ctx, TD_F32, 1, (int64_t[]){1}, 1.0);
    td_tensor *x = td_full(ctx, TD_F32, 1, (int64_t[]){1}, 0.0);
    /* 3000 adds: batches of 256 ops leave on the stream as they fill; the read that
     * follows goes on the ring and must see all of them */
    for (int i = 0; i < 3000; i++) {
        td_tensor *y = td_add(x, one);
        td_release(x);
        x = y;
    }
    float v = -1;
    cr_assert_eq(td_read(x, &v, sizeof v), TD_OK, "%s", td_last_error(ctx));
    cr_expect_eq(v, 3000.0f);
    td_stats st;
    td_get_stats(ctx, &st);
    cr_expect_geq(st.batches_sent, 11);
    td_release(x);
    td_release(one);
    td_close(ctx);
}

/* The killed child: keeps the ring busy (a 256x256 matmul and a one-element read per
 * request). */
static void ring_forever(const char *uri)
{
    td_context *ctx = NULL;
    if (td_connect(uri, NULL, &ctx) != TD_OK) _exit(2);
    if (strcmp(td_context_transport(ctx), "shm+ring") != 0) _exit(3);
    int64_t d[2] = {256, 256};
    td_tensor *a = td_rand_normal(ctx, TD_F32, 2, d, 1, 0.0, 1.0);
    for (;;) {
        td_tensor *m = td_matmul(a, a);
        td_tensor *s = td_sum(m, 2, (int[]){0, 1}, false);
        float v;
        td_read(s, &v, sizeof v);
        td_release(s);
        td_release(m);
    }
}

Test(ring, killed_client_leaves_nothing)
{
    /* the child's session holds its region (2 MiB) and a tensor; killed 200 ms into it */
    kill_client_mid_work(ring_forever, ((size_t)2 << 20) + 1, 200, NULL, NULL);
    td_context *ctx = connect_with(NULL);
    cr_expect_str_eq(td_context_transport(ctx), "shm+ring");
    cr_expect_eq(td_fence(ctx), TD_OK, "%s", td_last_error(ctx));
    td_close(ctx);
}

static atomic_bool g_busy_stop;
static atomic_long g_busy_rounds;

static void *busy_ring(void *arg)
{
    td_context *ctx = arg;
    td_tensor *one = td_full(ctx, TD_F32, 1, (int64_t[]){1}, 1.0);
    while (!atomic_load(&g_busy_stop)) {
        td_tensor *y = td_add(one, one);
        float v;
        td_read(y, &v, sizeof v);
        td_release(y);
        atomic_fetch_add(&g_busy_rounds, 1);
    }
    td_release(one);
    return NULL;
}

static double median_fence_ms(td_context *ctx, int n)
{
    double v[64];
    for (int i = 0; i < n; i++) {
        double t0 = td_test_now_ms();
        cr_assert_eq(td_fence(ctx), TD_OK, "%s", td_last_error(ctx));
        v[i] = td_test_now_ms() - t0;
    }
    for (int i = 1; i < n; i++)
        for (int k = i; k > 0 && v[k - 1] > v[k]; k--) {
            double x = v[k];
            v[k] = v[k - 1];
            v[k - 1] = x;
        }
    return v[n / 2];
}

Test(ring, busy_ring_session_does_not_starve_the_stream)
{
    td_options g = {.no_shm = 1};
    td_context *stream = connect_with(&g);
    td_context *ring = connect_with(NULL);
    cr_assert_str_eq(td_context_transport(ring), "shm+ring");
    double idle = median_fence_ms(stream, 40);
    pthread_t th;
    atomic_store(&g_busy_stop, false);
    atomic_store(&g_busy_rounds, 0);
    cr_assert_eq(pthread_create(&th, NULL, busy_ring, ring), 0);
    while (atomic_load(&g_busy_rounds) < 100) usleep(1000);
    double busy = median_fence_ms(stream, 40);
    long rounds = atomic_load(&g_busy_rounds);
    atomic_store(&g_busy_stop, true);
    pthread_join(th, NULL);
    cr_log_info("stream fence median: %.3f ms idle, %.3f ms next to a busy ring session "
                "(%ld ring round trips meanwhile)", idle, busy, rounds);
    /* Generous: the VM is shared; starving would mean seconds. */
    cr_expect_lt(busy, 50.0, "fence median %.3f ms next to a busy ring session", busy);
    td_close(ring);
    td_close(stream);
}

/* A fence answered through the ring reports the failure of a batch that went on the
 * stream before it: the batch (an 800 MiB td_full past the session's 256M) is flushed onto
 * the stream by the small upload after it, whose WriteChunk has no answer, and the fence
 * then goes on the ring. The ring's answer can arrive before the stream's Failure; the
 * client waits for the stream messages the FenceDone counts (stream_msgs). A race, so a
 * stress check rather than a proof: with the server and client before stream_msgs, this
 * loop's standalone twin saw td_fence return TD_OK in 262 of 300 rounds (and no later
 * fence reported it); the server's counting alone has since made the old client lose the
 * race rarely, so this guards the behaviour more than it catches the old client. */
Test(ring_fence, reports_a_failure_sent_on_the_stream, .fini = stop, .timeout = 60)
{
    const char *const args[] = {"--max-session-bytes", "256M", NULL};
    start_server(true, args);
    td_context *ctx = connect_with(NULL);
    cr_assert_str_eq(td_context_transport(ctx), "shm+ring");
    float small[1024] = {0};
    for (int i = 0; i < 60; i++) {
        td_tensor *big = td_full(ctx, TD_F32, 1, (int64_t[]){200 << 20}, 1.0);
        td_tensor *u = td_from_host(ctx, TD_F32, 1, (int64_t[]){1024}, small);
        cr_assert_not_null(u, "%s", td_last_error(ctx));
        td_status st = td_fence(ctx);
        cr_assert_eq(st, TD_EQUOTA, "round %d: td_fence gave %s: %s", i, td_status_name(st),
                     td_last_error(ctx));
        cr_assert(strstr(td_last_error(ctx), "quota") != NULL, "%s", td_last_error(ctx));
        td_release(big);
        td_release(u);
    }
    cr_expect_eq(td_fence(ctx), TD_OK, "%s", td_last_error(ctx));
    td_close(ctx);
}

/* ---- where the ring is not offered ---- */

Test(ring_off, no_ring_server_keeps_the_region, .fini = stop, .timeout = 60)
{
    const char *const args[] = {"--shm-bytes", "2M", "--max-session-bytes", "12M", "--no-ring",
                                NULL};
    start_server(true, args);
    td_options opts[2] = {{0}, {.no_shm = 1}};
    const char *const want[2] = {"shm", "grpc"};
    expect_same_on_every_path(opts, want, 2);
    const char *out = tensorctl_info("", srv.addr);
    cr_expect(strstr(out, "transport: shm (no request ring (--no-ring") != NULL, "%s", out);
}

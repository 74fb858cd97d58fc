/* e2e/workers.c — several worker threads per device (tensord --device-workers, issue 17
 * item 3): sessions spread over a device's workers run at the same time, keep their own
 * order, and get the same bits as when they run alone.
 *
 * The server is a real tensord on its CPU device with --device-workers 2 (the option applies
 * to every device; the CPU device has one worker by default). Sessions go to the worker
 * with the fewest sessions when they open, ties to the lowest index, so the first session
 * of a test lands on worker 0 and the second on worker 1.
 *
 *  - same_bits_as_alone: SESSIONS sessions, each with its own seed, run a workload of
 *    matmuls, reductions, softmax, a sort and elementwise ops, first one after another
 *    (alone on the device), then all at once from as many threads; every result is compared
 *    byte for byte with the session's run alone.
 *  - long_op_does_not_hold_others: session A runs one long op (an average pool with a large
 *    window: a single backend call, which the engine cannot split into time slices the way
 *    it splits a big CPU matmul) and then fences; session B, on the other worker, starts
 *    once A's op is running and must finish a small op and a read in less than half the
 *    time A still needs. With one worker (the suite one_worker, for contrast) B waits for
 *    A's op to end: its jobs then run just before A's fence, in the worker's round robin.
 *  - many_contexts: one process opens more contexts to one server than a connection may
 *    carry streams (--max-streams 2, TCP and unix); each gets its own connection, so every
 *    one opens and computes at once instead of waiting for a stream until its timeout.
 *  - cq_threads: the server's completion-queue threads (--cq-threads, issue 12), counted by
 *    their names (td-cq0, ...) in /proc: one on a host with fewer than 4 CPUs by default,
 *    two on a larger one, N when asked; with two, sessions uploading at once each read back
 *    their own bytes (the default on the 2-CPU test machines is one thread, so this keeps
 *    two threads receiving at once under the sanitizers).
 */
#include "server_fixture.h"
#include "suite_fixture.h"
#include "tensord.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SESSIONS 4
#define ROUNDS 6
#define RESULT_FLOATS (64 + 64 + 256)

static void start_two_workers(void)
{
    const char *args[] = {"--device-workers", "2", NULL};
    start_with(args);
}

TestSuite(workers, .init = start_two_workers, .fini = stop, .timeout = 120);

/* ---- same bits alone and together ---- */

typedef struct run {
    int index;
    float out[RESULT_FLOATS];
    char error[512];
} run;

static bool step_failed(run *r, td_context *ctx, const char *what, td_status st)
{
    if (st == TD_OK) return false;
    snprintf(r->error, sizeof r->error, "session %d: %s: %s", r->index, what,
             td_last_error(ctx));
    return true;
}

/* The workload of session r->index: its own seed, ROUNDS rounds of dense work whose float
 * sums depend on the order of their terms, so a result computed any other way would
 * differ in its last bits. */
static void *workload(void *arg)
{
    run *r = arg;
    char uri[700];
    td_test_server_uri(&srv, "cpu", uri, sizeof uri);
    td_context *ctx = NULL;
    if (td_connect(uri, NULL, &ctx) != TD_OK) {
        snprintf(r->error, sizeof r->error, "session %d: connect: %s", r->index,
                 td_connect_error());
        return NULL;
    }
    const uint64_t seed = 1000 + (uint64_t)r->index;
    td_tensor *x = td_rand_normal(ctx, TD_F32, 2, (int64_t[]){64, 256}, seed, 0.0, 1.0);
    td_tensor *w = td_rand_normal(ctx, TD_F32, 2, (int64_t[]){256, 256}, seed + 7, 0.0, 0.0625);
    for (int k = 0; k < ROUNDS; k++) {
        td_tensor *h = td_matmul(x, w);
        td_tensor *a = td_tanh(h);
        td_tensor *s = td_softmax(a, 1);
        td_tensor *y = td_add(x, s);
        td_release(h);
        td_release(a);
        td_release(s);
        td_release(x);
        x = y;
    }
    td_tensor *rows = td_sum(x, 1, (int[]){1}, false);          /* [64] */
    td_tensor *sorted = td_sort(rows, 0, false);                  /* [64] */
    td_tensor *cols = td_mean(x, 1, (int[]){0}, false);           /* [256] */
    td_status st = td_read(rows, r->out, 64 * sizeof(float));
    if (!step_failed(r, ctx, "read rows", st)) {
        st = td_read(sorted, r->out + 64, 64 * sizeof(float));
        if (!step_failed(r, ctx, "read sorted", st)) {
            st = td_read(cols, r->out + 128, 256 * sizeof(float));
            step_failed(r, ctx, "read cols", st);
        }
    }
    td_release(rows);
    td_release(sorted);
    td_release(cols);
    td_release(x);
    td_release(w);
    td_close(ctx);
    return NULL;
}

Test(workers, same_bits_as_alone)
{
    static run alone[SESSIONS], together[SESSIONS];
    for (int i = 0; i < SESSIONS; i++) {
        alone[i].index = i;
        workload(&alone[i]);
        cr_assert_eq(alone[i].error[0], '\0', "%s", alone[i].error);
    }
    pthread_t th[SESSIONS];
    for (int i = 0; i < SESSIONS; i++) {
        together[i].index = i;
        cr_assert_eq(pthread_create(&th[i], NULL, workload, &together[i]), 0);
    }
    for (int i = 0; i < SESSIONS; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < SESSIONS; i++) {
        cr_assert_eq(together[i].error[0], '\0', "%s", together[i].error);
        int first = -1;
        for (int k = 0; k < RESULT_FLOATS && first < 0; k++)
            if (memcmp(&alone[i].out[k], &together[i].out[k], sizeof(float)) != 0) first = k;
        cr_assert_eq(first, -1,
                     "session %d: element %d is %.9g run with others, %.9g run alone", i,
                     first, first >= 0 ? (double)together[i].out[first] : 0.0,
                     first >= 0 ? (double)alone[i].out[first] : 0.0);
    }
    /* and different sessions really computed different things */
    cr_assert_neq(memcmp(alone[0].out, alone[1].out, sizeof alone[0].out), 0);
}

/* ---- a long op on one worker, a fence on the other ---- */

typedef struct long_session {
    td_context *ctx;
    atomic_bool started; /* its op has been sent (the fence is under way) */
    atomic_bool done;    /* its fence returned */
    double end_ms;
    td_status st;
    char error[512];
} long_session;

static void *long_main(void *arg)
{
    long_session *a = arg;
    /* [1, 1, 1024, 1024] averaged over 48 x 48 windows at stride 1: 977^2 windows of 2,304
     * elements, 2.2e9 additions in one backend call (seconds on this machine's cores) */
    td_tensor *img = td_rand_uniform(a->ctx, TD_F32, 4, (int64_t[]){1, 1, 1024, 1024}, 5, 0, 1);
    td_pool_params p;
    memset(&p, 0, sizeof p);
    p.kernel[0] = p.kernel[1] = 48;
    p.stride[0] = p.stride[1] = 1;
    p.dilation[0] = p.dilation[1] = 1;
    td_tensor *pooled = td_avg_pool(img, &p);
    atomic_store(&a->started, true);
    a->st = td_fence(a->ctx);
    a->end_ms = td_test_now_ms();
    if (a->st != TD_OK) snprintf(a->error, sizeof a->error, "%s", td_last_error(a->ctx));
    atomic_store(&a->done, true);
    td_release(pooled);
    td_release(img);
    return NULL;
}

Test(workers, long_op_does_not_hold_others)
{
    long_session a = {0};
    a.ctx = connect_device("cpu", NULL); /* worker 0 */
    td_context *b = connect_device("cpu", NULL); /* worker 1 */
    /* B's session is open before A's op starts, and its small op has run once, so its
     * timing below is one op and one fence on a warm session */
    td_tensor *warm = td_full(b, TD_F32, 1, (int64_t[]){16}, 1.0);
    cr_assert_eq(td_fence(b), TD_OK, "%s", td_last_error(b));
    td_release(warm);

    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, long_main, &a), 0);
    while (!atomic_load(&a.started)) usleep(1000);
    usleep(300 * 1000); /* A's batch has reached its worker and the pool op is running */
    bool a_done_before = atomic_load(&a.done);

    double t0 = td_test_now_ms();
    td_tensor *x = td_full(b, TD_F32, 1, (int64_t[]){16}, 2.0);
    td_tensor *y = td_mul(x, x);
    float v[16];
    td_status st = td_read(y, v, sizeof v);
    double b_ms = td_test_now_ms() - t0;
    td_release(x);
    td_release(y);
    pthread_join(th, NULL);
    cr_assert_eq(st, TD_OK, "%s", td_last_error(b));
    cr_assert_eq(v[15], 4.0f);
    cr_assert_eq(a.st, TD_OK, "session A: %s", a.error);
    cr_assert(!a_done_before, "session A's pool finished within 300 ms; the test needs a "
                              "longer op to show anything");
    const double a_ms = a.end_ms - t0; /* what A still needed when B started */
    cr_assert(b_ms < a_ms / 2,
              "session B's op and read took %.0f ms while session A's fence needed %.0f ms "
              "more: B waited for A instead of running on its own worker", b_ms, a_ms);
    cr_log_info("session B: op and read in %.1f ms while A's op ran (A: %.0f ms more)", b_ms,
                a_ms);
    td_close(b);
    td_close(a.ctx);
}

/* One worker (the CPU device's default) for contrast: the same B waits for A. Not a
 * property worth asserting for its own sake, but it shows that the test above tests
 * the workers and not, say, time slices. */
TestSuite(one_worker, .init = start_tcp, .fini = stop, .timeout = 120);

Test(one_worker, long_op_holds_the_only_worker)
{
    long_session a = {0};
    a.ctx = connect_device("cpu", NULL);
    td_context *b = connect_device("cpu", NULL);
    td_tensor *warm = td_full(b, TD_F32, 1, (int64_t[]){16}, 1.0);
    cr_assert_eq(td_fence(b), TD_OK, "%s", td_last_error(b));
    td_release(warm);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, long_main, &a), 0);
    while (!atomic_load(&a.started)) usleep(1000);
    usleep(300 * 1000);
    bool a_done_before = atomic_load(&a.done);
    double t0 = td_test_now_ms();
    td_tensor *x = td_full(b, TD_F32, 1, (int64_t[]){16}, 2.0);
    td_status st = td_fence(b);
    double b_ms = td_test_now_ms() - t0;
    td_release(x);
    pthread_join(th, NULL);
    cr_assert_eq(st, TD_OK, "%s", td_last_error(b));
    cr_assert_eq(a.st, TD_OK, "session A: %s", a.error);
    cr_assert(!a_done_before, "session A's pool finished within 300 ms");
    const double a_ms = a.end_ms - t0;
    cr_assert(b_ms >= a_ms / 2,
              "with one worker, session B's fence took %.0f ms while A needed %.0f ms more",
              b_ms, a_ms);
    td_close(b);
    td_close(a.ctx);
}

/* More contexts in one process than the server's --max-streams: each context is its own
 * connection (client/call.c), so all of them open and answer. Before, every context of a
 * process shared one connection and the third here would have waited out its call
 * timeout (TD_ETIMEOUT) for a stream. */
static const char *const k_two_streams[] = {"--max-streams", "2", NULL};
static void start_two_streams_tcp(void) { start_server(false, k_two_streams); }
static void start_two_streams_unix(void) { start_server(true, k_two_streams); }

static void open_many(void)
{
    enum { N = 12 };
    td_options o = {.connect_timeout_ms = 3000, .call_timeout_ms = 5000};
    td_context *ctx[N];
    for (int i = 0; i < N; i++) ctx[i] = connect_device("cpu", &o);
    for (int i = 0; i < N; i++) {
        td_tensor *t = td_full(ctx[i], TD_F32, 1, (int64_t[]){4}, (double)i);
        float got[4] = {-1, -1, -1, -1};
        cr_assert_eq(td_read(t, got, sizeof got), TD_OK, "context %d: %s", i,
                     td_last_error(ctx[i]));
        cr_expect(got[0] == (float)i && got[3] == (float)i, "context %d read %g", i, got[0]);
    }
    for (int i = 0; i < N; i++) td_close(ctx[i]);
}

Test(many_contexts, tcp, .init = start_two_streams_tcp, .fini = stop, .timeout = 120)
{
    open_many();
}
Test(many_contexts, unix_socket, .init = start_two_streams_unix, .fini = stop, .timeout = 120)
{
    open_many();
}

/* ---- completion-queue threads ---- */

/* Threads of process `pid` named td-cq* (server/service.c names them), or -1 when /proc
 * cannot be read. */
static int cq_thread_count(pid_t pid)
{
    char dir[64];
    snprintf(dir, sizeof dir, "/proc/%d/task", (int)pid);
    DIR *d = opendir(dir);
    if (d == NULL) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char path[400], comm[32] = "";
        snprintf(path, sizeof path, "%s/%s/comm", dir, e->d_name);
        FILE *f = fopen(path, "r");
        if (f == NULL) continue;
        if (fgets(comm, sizeof comm, f) != NULL && strncmp(comm, "td-cq", 5) == 0) n++;
        fclose(f);
    }
    closedir(d);
    return n;
}

TestSuite(cq_threads, .fini = stop, .timeout = 120);

Test(cq_threads, default_follows_the_host)
{
    start_tcp();
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int want = cpus >= 4 ? 2 : 1;
    cr_expect_eq(cq_thread_count(srv.pid), want,
                 "%d completion-queue threads on a host with %ld CPUs, expected %d",
                 cq_thread_count(srv.pid), cpus, want);
}

Test(cq_threads, flag_sets_the_count)
{
    const char *args[] = {"--cq-threads", "3", NULL};
    start_with(args);
    cr_expect_eq(cq_thread_count(srv.pid), 3, "%d completion-queue threads with --cq-threads 3",
                 cq_thread_count(srv.pid));
}

/* Session r->index writes UPLOAD_FLOATS floats of its own (a size that ends in a partial
 * chunk) UPLOAD_ROUNDS times, each time different, and reads each back. */
#define UPLOAD_FLOATS ((3u << 20) / 4 + 13)
#define UPLOAD_ROUNDS 3
static void *upload_workload(void *arg)
{
    run *r = arg;
    char uri[700];
    td_test_server_uri(&srv, "cpu", uri, sizeof uri);
    td_context *ctx = NULL;
    float *src = malloc(UPLOAD_FLOATS * sizeof(float));
    float *got = malloc(UPLOAD_FLOATS * sizeof(float));
    if (src == NULL || got == NULL || td_connect(uri, NULL, &ctx) != TD_OK) {
        snprintf(r->error, sizeof r->error, "session %d: set-up: %s", r->index,
                 td_connect_error());
        free(src);
        free(got);
        return NULL;
    }
    td_tensor *t = td_full(ctx, TD_F32, 1, (int64_t[]){UPLOAD_FLOATS}, 0.0);
    for (int k = 0; k < UPLOAD_ROUNDS && r->error[0] == '\0'; k++) {
        for (uint32_t i = 0; i < UPLOAD_FLOATS; i++)
            src[i] = (float)(r->index * 1000003u + (uint32_t)k * 7919u + i);
        if (step_failed(r, ctx, "write", td_write(t, src, UPLOAD_FLOATS * sizeof(float))) ||
            step_failed(r, ctx, "read", td_read(t, got, UPLOAD_FLOATS * sizeof(float))))
            break;
        if (memcmp(src, got, UPLOAD_FLOATS * sizeof(float)) != 0)
            snprintf(r->error, sizeof r->error, "session %d round %d: read back other bytes",
                     r->index, k);
    }
    td_release(t);
    td_close(ctx);
    free(src);
    free(got);
    return NULL;
}

Test(cq_threads, two_threads_concurrent_uploads)
{
    const char *args[] = {"--cq-threads", "2", "--device-workers", "2", NULL};
    start_with(args);
    cr_assert_eq(cq_thread_count(srv.pid), 2);
    static run up[SESSIONS];
    pthread_t th[SESSIONS];
    for (int i = 0; i < SESSIONS; i++) {
        up[i].index = i;
        cr_assert_eq(pthread_create(&th[i], NULL, upload_workload, &up[i]), 0);
    }
    for (int i = 0; i < SESSIONS; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < SESSIONS; i++) cr_expect_eq(up[i].error[0], '\0', "%s", up[i].error);
}

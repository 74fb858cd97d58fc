/* td_read_start / td_read_finish against a real tensord: over TCP and a unix socket on the
 * stream (reads in flight, their replies routed by seq, client/remote.c), and over a unix
 * socket with shared memory (each read completes in td_read_start). The cases shared with
 * local:cpu are in tests/unit/client/read_start_cases.h; this file adds reads of several
 * chunks in flight around a synchronous one, and the server killed or frozen while reads
 * are pending. */
#include "suite_fixture.h"

#include "../unit/client/read_start_cases.h"

#include <sys/wait.h>

/* How a context reaches the server, and the td_context_transport that shows it. */
typedef struct way {
    const char *name;
    bool unix_socket;
    bool no_shm;
    const char *transport;
} way;

static const way ways[] = {
    {"tcp", false, false, "grpc"},
    {"unix stream", true, true, "grpc"},
    {"unix shared memory", true, false, "shm+ring"},
};
enum { N_WAYS = sizeof ways / sizeof ways[0] };

/* A fresh server and context for each way in turn, running body(ctx); body closes the
 * context itself when `closes`. */
static void each_way(void (*body)(td_context *ctx), bool closes)
{
    for (int i = 0; i < N_WAYS; i++) {
        start_server(ways[i].unix_socket, NULL);
        td_options o = {.no_shm = ways[i].no_shm};
        td_context *ctx = connect_with(&o);
        cr_assert_str_eq(td_context_transport(ctx), ways[i].transport, "%s", ways[i].name);
        body(ctx);
        if (!closes) td_close(ctx);
        stop();
    }
}

TestSuite(read_start, .fini = stop, .timeout = 120);

Test(read_start, out_of_order) { each_way(read_start_case_out_of_order, false); }
Test(read_start, then_release) { each_way(read_start_case_released, false); }
Test(read_start, argument_errors) { each_way(read_start_case_errors, false); }
Test(read_start, poisoned) { each_way(read_start_case_poisoned, false); }
Test(read_start, pending_limit) { each_way(read_start_case_limit, false); }
Test(read_start, close_with_reads_pending) { each_way(read_start_case_close_pending, true); }

/* Three reads of 3 MiB (three chunks of TD_CHUNK_BYTES each on the stream) in flight, a
 * synchronous read and a fence between them, finished last-first: element i of x + k is
 * i + k, exact in f32 below 2^24. */
static void large_reads(td_context *ctx)
{
    enum { N = 3 << 18 }; /* 786432 floats, 3 MiB */
    float *src = malloc(N * sizeof *src), *got[4];
    cr_assert_not_null(src);
    for (int i = 0; i < N; i++) src[i] = (float)i;
    for (int k = 0; k < 4; k++) {
        got[k] = malloc(N * sizeof *got[k]);
        cr_assert_not_null(got[k]);
    }
    td_tensor *x = td_from_host(ctx, TD_F32, 1, (int64_t[]){N}, src);
    cr_assert_not_null(x, "%s", td_last_error(ctx));
    td_pending_read *p[3];
    td_tensor *y[4];
    for (int k = 0; k < 4; k++) {
        y[k] = td_add_scalar(x, (double)k);
        cr_assert_not_null(y[k], "%s", td_last_error(ctx));
        if (k == 2) {
            cr_assert_eq(td_read(y[k], got[k], N * sizeof *got[k]), TD_OK, "%s",
                         td_last_error(ctx));
            cr_assert_eq(td_fence(ctx), TD_OK, "%s", td_last_error(ctx));
            continue;
        }
        int j = k < 2 ? k : 2;
        cr_assert_eq(td_read_start(y[k], got[k], N * sizeof *got[k], &p[j]), TD_OK, "%s",
                     td_last_error(ctx));
    }
    for (int j = 2; j >= 0; j--) cr_assert_eq(td_read_finish(p[j]), TD_OK, "%s", td_last_error(ctx));
    for (int k = 0; k < 4; k++) {
        int bad = -1;
        for (int i = 0; i < N && bad < 0; i++)
            if (got[k][i] != (float)(i + k)) bad = i;
        cr_expect_eq(bad, -1, "x + %d: element %d is %g", k, bad, bad < 0 ? 0 : got[k][bad]);
        td_release(y[k]);
        free(got[k]);
    }
    td_release(x);
    free(src);
}

Test(read_start, large_reads_in_flight) { each_way(large_reads, false); }

/* SIGSTOP the server and wait until it really is stopped (the signal is asynchronous). */
static void freeze_server(void)
{
    cr_assert_eq(kill(srv.pid, SIGSTOP), 0);
    int wst = 0;
    cr_assert_eq(waitpid(srv.pid, &wst, WUNTRACED), srv.pid);
    cr_assert(WIFSTOPPED(wst), "tensord did not stop (status %#x)", wst);
}

/* Reads pending on a server that is stopped, then killed: td_read_finish returns an error
 * that names itself and the server (the first one finds the session lost, the next one a
 * closed session), without hanging. The server is stopped before the reads are started so
 * that it cannot answer them first. */
Test(read_start, server_killed_while_reads_pend)
{
    for (int w = 0; w < 2; w++) { /* tcp, unix stream */
        start_server(ways[w].unix_socket, NULL);
        td_options o = {.no_shm = ways[w].no_shm, .call_timeout_ms = 10000};
        td_context *ctx = connect_with(&o);
        td_tensor *x = td_full(ctx, TD_F32, 1, (int64_t[]){1000}, 2.0);
        cr_assert_eq(td_fence(ctx), TD_OK, "%s", td_last_error(ctx));
        freeze_server();
        float a[1000], b[1000];
        td_pending_read *pa, *pb;
        cr_assert_eq(td_read_start(x, a, sizeof a, &pa), TD_OK, "%s", td_last_error(ctx));
        td_tensor *y = td_neg(x);
        cr_assert_eq(td_read_start(y, b, sizeof b, &pb), TD_OK, "%s", td_last_error(ctx));
        td_test_server_kill(&srv);
        double t0 = td_test_now_ms();
        td_status st = td_read_finish(pb);
        cr_expect(st == TD_EUNAVAILABLE || st == TD_ECLOSED, "%s: %s: %s", ways[w].name,
                  td_status_name(st), td_last_error(ctx));
        const char *where = ways[w].unix_socket ? "unix:" : "127.0.0.1";
        cr_expect(strncmp(td_last_error(ctx), "td_read_finish: ", 16) == 0 &&
                      strstr(td_last_error(ctx), where) != NULL,
                  "%s: %s", ways[w].name, td_last_error(ctx));
        st = td_read_finish(pa);
        cr_expect_eq(st, TD_ECLOSED, "%s: %s", ways[w].name, td_status_name(st));
        cr_expect(strncmp(td_last_error(ctx), "td_read_finish: session closed: ", 32) == 0,
                  "%s: %s", ways[w].name, td_last_error(ctx));
        cr_expect_lt(td_test_now_ms() - t0, 5000.0, "%s: the finishes took %.0f ms",
                     ways[w].name, td_test_now_ms() - t0);
        td_release(y);
        td_release(x);
        td_close(ctx);
    }
}

/* A frozen server: td_read_finish gives up after call_timeout_ms (TD_ETIMEOUT, naming
 * itself); the server is woken and stopped normally afterwards. */
Test(read_start, frozen_server_times_out)
{
    start_tcp();
    td_options o = {.call_timeout_ms = 1000};
    td_context *ctx = connect_with(&o);
    td_tensor *x = td_full(ctx, TD_F32, 1, (int64_t[]){16}, 1.0);
    cr_assert_eq(td_fence(ctx), TD_OK, "%s", td_last_error(ctx));
    freeze_server();
    float v[16];
    td_pending_read *p;
    cr_assert_eq(td_read_start(x, v, sizeof v, &p), TD_OK, "%s", td_last_error(ctx));
    double t0 = td_test_now_ms();
    td_status st = td_read_finish(p);
    double waited = td_test_now_ms() - t0;
    kill(srv.pid, SIGCONT);
    cr_expect_eq(st, TD_ETIMEOUT, "%s: %s", td_status_name(st), td_last_error(ctx));
    cr_expect(strncmp(td_last_error(ctx), "td_read_finish: no reply from tensord", 37) == 0,
              "%s", td_last_error(ctx));
    cr_expect(waited >= 900 && waited < 5000, "waited %.0f ms", waited);
    td_release(x);
    td_close(ctx);
}

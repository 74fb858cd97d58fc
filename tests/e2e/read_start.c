/* td_read_start / td_read_finish against a real tensord: over TCP and a unix socket on the
 * stream (reads in flight, their replies routed by seq, client/remote.c), and over a unix
 * socket with shared memory (a read below shm_min_bytes in flight on the stream as well,
 * a larger one completed in td_read_start through the region's slots). The cases shared with
 * local:cpu are in tests/unit/client/read_start_cases.h; this file adds reads of several
 * chunks in flight around a synchronous one, and the server killed or frozen while reads
 * are pending. */
#include "suite_fixture.h"

#include "../unit/client/read_start_cases.h"

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

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
Test(read_start, finish_while_capturing)
{
    each_way(read_start_case_finish_while_capturing, false);
}
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
    for (int w = 0; w < N_WAYS; w++) { /* small reads are in flight on shared memory too */
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

/* On a shared-memory session a read below shm_min_bytes does not wait for the server (a
 * loss read every few steps must not drain the pipeline): td_read_start returns while the
 * server is stopped, and once it runs again the read completes with the right bytes, with
 * a synchronous read through the request ring and one through the region's slots in
 * between. Had td_read_start waited, it would have failed after call_timeout_ms. */
Test(read_start, small_reads_on_shared_memory_do_not_wait)
{
    start_server(true, NULL);
    td_options o = {.call_timeout_ms = 3000};
    td_context *ctx = connect_with(&o);
    cr_assert_str_eq(td_context_transport(ctx), "shm+ring");
    enum { S = 1000, L = 1 << 18 }; /* 4000 bytes; 1 MiB, above the default 64 KiB */
    td_tensor *x = td_full(ctx, TD_F32, 1, (int64_t[]){S}, 2.0);
    td_tensor *big = td_full(ctx, TD_F32, 1, (int64_t[]){L}, 7.0);
    cr_assert_eq(td_fence(ctx), TD_OK, "%s", td_last_error(ctx));
    freeze_server();
    static float a[S], b[S], c[S], d[L];
    td_pending_read *pa, *pb;
    double t0 = td_test_now_ms();
    cr_assert_eq(td_read_start(x, a, sizeof a, &pa), TD_OK, "%s", td_last_error(ctx));
    td_tensor *y = td_neg(x);
    cr_assert_eq(td_read_start(y, b, sizeof b, &pb), TD_OK, "%s", td_last_error(ctx));
    cr_expect_lt(td_test_now_ms() - t0, 2000.0, "td_read_start waited for a stopped server");
    kill(srv.pid, SIGCONT);
    td_tensor *z = td_add_scalar(x, 1.0);
    cr_assert_eq(td_read(z, c, sizeof c), TD_OK, "%s", td_last_error(ctx)); /* the ring */
    cr_assert_eq(td_read(big, d, sizeof d), TD_OK, "%s", td_last_error(ctx)); /* slots */
    cr_assert_eq(td_read_finish(pb), TD_OK, "%s", td_last_error(ctx));
    cr_assert_eq(td_read_finish(pa), TD_OK, "%s", td_last_error(ctx));
    int bad = -1;
    for (int i = 0; i < S && bad < 0; i++)
        if (a[i] != 2.0f || b[i] != -2.0f || c[i] != 3.0f) bad = i;
    cr_expect_eq(bad, -1, "element %d: %g %g %g", bad, bad < 0 ? 0 : a[bad],
                 bad < 0 ? 0 : b[bad], bad < 0 ? 0 : c[bad]);
    for (int i = 0; i < L && bad < 0; i++)
        if (d[i] != 7.0f) bad = i;
    cr_expect_eq(bad, -1, "large read: element %d", bad);
    td_release(x);
    td_release(y);
    td_release(z);
    td_release(big);
    td_close(ctx);
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

/* Reads of several chunks pending while the context's background thread sends copied
 * uploads (TENSORD_WRITE_COPY_MAX: the flusher's drive takes in their chunks), around a
 * synchronous read of another large tensor, a graph run, a move to another device and a
 * fence; finished in mixed order. Element i of x + k is i + k (exact in f32 below 2^24);
 * the uploads are bytes (u + j) & 0xFF. Two cpu devices: the session spans cpu:0,cpu:1. */
Test(read_start, pending_across_background_uploads)
{
    setenv("TENSORD_WRITE_COPY_MAX", "16777216", 1);
    const char *args[] = {"--cpu-devices", "2", NULL};
    for (int w = 0; w < 2; w++) { /* tcp, unix stream */
        start_server(ways[w].unix_socket, args);
        td_options o = {.no_shm = ways[w].no_shm};
        td_context *ctx = connect_device("cpu:0,cpu:1", &o);
        enum { N = 3 << 18, K = 4, U = 6 << 20 }; /* 3 MiB of f32; 6 MiB uploads */
        float *src = malloc(N * sizeof *src), *got[K + 1];
        uint8_t *up = malloc(U), *upb = malloc(U);
        cr_assert(src && up && upb);
        for (int i = 0; i < N; i++) src[i] = (float)i;
        for (int k = 0; k <= K; k++) cr_assert_not_null(got[k] = malloc(N * sizeof *got[k]));
        td_tensor *x = td_from_host(ctx, TD_F32, 1, (int64_t[]){N}, src);
        cr_assert_not_null(x, "%s", td_last_error(ctx));
        /* a graph: y = x_in * 1 + 0 (a copy through two ops) */
        cr_assert_eq(td_graph_begin(ctx), TD_OK, "%s", td_last_error(ctx));
        td_tensor *gin = td_graph_input(ctx, "x", TD_F32, 1, (int64_t[]){N});
        cr_assert_eq(td_graph_output(ctx, "y", td_add_scalar(td_mul_scalar(gin, 1.0), 0.0)),
                     TD_OK, "%s", td_last_error(ctx));
        td_graph *g = NULL;
        cr_assert_eq(td_graph_end(ctx, &g), TD_OK, "%s", td_last_error(ctx));
        td_pending_read *p[K];
        td_tensor *y[K], *u[K];
        for (int k = 0; k < K; k++) {
            y[k] = td_add_scalar(x, (double)k);
            cr_assert_not_null(y[k], "%s", td_last_error(ctx));
            cr_assert_eq(td_read_start(y[k], got[k], N * sizeof *got[k], &p[k]), TD_OK,
                         "%s: read %d: %s", ways[w].name, k, td_last_error(ctx));
            for (int j = 0; j < U; j++) up[j] = (uint8_t)(j + k);
            u[k] = td_from_host_ex(ctx, TD_U8, 1, (int64_t[]){U}, up, TD_WRITE_FRESH);
            cr_assert_not_null(u[k], "%s", td_last_error(ctx));
            memset(up, 0, U); /* borrowed for the call only */
            if (k == 1) {
                td_tensor *out = NULL;
                cr_assert_eq(td_graph_run(g, 1, (const char *[]){"x"}, &y[0], 1,
                                          (const char *[]){"y"}, &out),
                             TD_OK, "%s", td_last_error(ctx));
                cr_assert_eq(td_read(out, got[K], N * sizeof *got[K]), TD_OK, "%s",
                             td_last_error(ctx));
                td_release(out);
            }
            if (k == 2) {
                td_tensor *m = td_to_device(y[1], "cpu:1");
                cr_assert_not_null(m, "%s", td_last_error(ctx));
                td_release(y[1]); /* its read is pending */
                y[1] = m;
                cr_assert_eq(td_fence(ctx), TD_OK, "%s", td_last_error(ctx));
            }
        }
        int order[K] = {2, 0, 3, 1};
        for (int j = 0; j < K; j++)
            cr_assert_eq(td_read_finish(p[order[j]]), TD_OK, "%s: read %d: %s", ways[w].name,
                         order[j], td_last_error(ctx));
        for (int k = 0; k <= K; k++) {
            int add = k < K ? k : 0, bad = -1;
            for (int i = 0; i < N && bad < 0; i++)
                if (got[k][i] != (float)(i + add)) bad = i;
            cr_expect_eq(bad, -1, "%s: buffer %d: element %d is %g", ways[w].name, k, bad,
                         bad < 0 ? 0 : got[k][bad]);
        }
        for (int k = 0; k < K; k++) {
            cr_assert_eq(td_read(u[k], upb, U), TD_OK, "%s", td_last_error(ctx));
            int bad = -1;
            for (int j = 0; j < U && bad < 0; j++)
                if (upb[j] != (uint8_t)(j + k)) bad = j;
            cr_expect_eq(bad, -1, "%s: upload %d: byte %d", ways[w].name, k, bad);
            td_release(u[k]);
            td_release(y[k]);
        }
        td_graph_destroy(g);
        td_release(x);
        td_close(ctx);
        for (int k = 0; k <= K; k++) free(got[k]);
        free(src);
        free(up);
        free(upb);
        stop();
    }
}

/* td_close with reads of several chunks pending writes nothing to their dst: the replies
 * have arrived (nothing took them in: no call, no background send), dst is made
 * inaccessible (mprotect) before td_close, so a write during the close would fault. */
Test(read_start, close_writes_no_dst)
{
    for (int w = 0; w < 2; w++) { /* tcp, unix stream */
        start_server(ways[w].unix_socket, NULL);
        td_options o = {.no_shm = ways[w].no_shm};
        td_context *ctx = connect_with(&o);
        enum { N = 3 << 18 };
        size_t bytes = N * sizeof(float);
        float *dst = mmap(NULL, 2 * bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                          -1, 0);
        cr_assert_neq(dst, MAP_FAILED);
        td_tensor *x = td_full(ctx, TD_F32, 1, (int64_t[]){N}, 3.0);
        td_tensor *y = td_neg(x);
        cr_assert_not_null(y, "%s", td_last_error(ctx));
        td_pending_read *px, *py;
        cr_assert_eq(td_read_start(x, dst, bytes, &px), TD_OK, "%s", td_last_error(ctx));
        cr_assert_eq(td_read_start(y, dst + N, bytes, &py), TD_OK, "%s", td_last_error(ctx));
        usleep(300000);
        cr_assert_eq(mprotect(dst, 2 * bytes, PROT_NONE), 0);
        td_close(ctx);
        cr_assert_eq(munmap(dst, 2 * bytes), 0);
        stop();
    }
}

/* A read of a tensor with no elements: dst may be NULL, the read completes. */
Test(read_start, empty_tensor)
{
    for (int w = 0; w < N_WAYS; w++) {
        start_server(ways[w].unix_socket, NULL);
        td_options o = {.no_shm = ways[w].no_shm};
        td_context *ctx = connect_with(&o);
        td_tensor *e = td_full(ctx, TD_F32, 2, (int64_t[]){3, 0}, 1.0);
        cr_assert_not_null(e, "%s", td_last_error(ctx));
        float one[1];
        td_tensor *s = td_full(ctx, TD_F32, 1, (int64_t[]){1}, 5.0);
        td_pending_read *pe, *ps, *pe2;
        cr_assert_eq(td_read_start(e, NULL, 0, &pe), TD_OK, "%s: %s", ways[w].name,
                     td_last_error(ctx));
        cr_assert_eq(td_read_start(s, one, sizeof one, &ps), TD_OK, "%s", td_last_error(ctx));
        cr_assert_eq(td_read_start(e, one, 0, &pe2), TD_OK, "%s", td_last_error(ctx));
        cr_expect_eq(td_read_finish(ps), TD_OK, "%s: %s", ways[w].name, td_last_error(ctx));
        cr_expect_eq(td_read_finish(pe2), TD_OK, "%s: %s", ways[w].name, td_last_error(ctx));
        cr_expect_eq(td_read_finish(pe), TD_OK, "%s: %s", ways[w].name, td_last_error(ctx));
        cr_expect_eq(one[0], 5.0f);
        cr_expect_eq(td_fence(ctx), TD_OK, "%s: %s", ways[w].name, td_last_error(ctx));
        td_release(e);
        td_release(s);
        td_close(ctx);
        stop();
    }
}

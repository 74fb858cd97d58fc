/* e2e/load.c — issue 5's load test: 64 concurrent clients, each sending 1,000 op batches
 * (tiny elementwise ops, an occasional read) to one tensord, finish with zero errors, and
 * the server's usage (GetInfo: sessions, tensors, bytes in use) returns to its baseline
 * once they have closed.
 *
 * Each client is a process of its own (forked before this process touches gRPC), so the
 * server sees 64 connections, not 64 streams over one shared HTTP/2 connection as threads
 * of one process would get from gRPC's subchannel pool. batch_max_ops = 1 makes every op
 * its own OpBatch message, so 1,000 ops are 1,000 batches on the wire (checked with
 * td_get_stats); the data are 4 floats, so the test measures the session machinery,
 * not the kernels.
 */
#include "server_fixture.h"
#include "suite_fixture.h"
#include "tensord.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#define CLIENTS 64
#define BATCHES 1000
#define READ_EVERY 100

/* What a client process reports back through its pipe. */
typedef struct client {
    int index;
    uint64_t batches;
    int errors;
    char first_error[400];
} client;

static void fail(client *c, const char *what, const td_context *ctx)
{
    if (c->errors++ == 0)
        snprintf(c->first_error, sizeof c->first_error, "client %d: %s: %s", c->index, what,
                 ctx != NULL ? td_last_error(ctx) : td_connect_error());
}

/* x starts at index; every batch adds 1; a read now and then checks the running value. */
static void client_main(client *c)
{
    char uri[600];
    td_test_server_uri(&srv, "cpu", uri, sizeof uri);
    td_options o;
    memset(&o, 0, sizeof o);
    o.batch_max_ops = 1;
    o.connect_timeout_ms = 30000;
    o.call_timeout_ms = 60000;
    td_context *ctx = NULL;
    if (td_connect(uri, &o, &ctx) != TD_OK) {
        fail(c, "connect", NULL);
        return;
    }
    td_stats s0, s1;
    td_get_stats(ctx, &s0);
    td_tensor *x = td_full(ctx, TD_F32, 1, (int64_t[]){4}, (double)c->index);
    for (int i = 1; i <= BATCHES && x != NULL; i++) {
        td_tensor *y = td_add_scalar(x, 1.0);
        td_release(x);
        x = y;
        if (x == NULL) {
            fail(c, "add_scalar", ctx);
            break;
        }
        if (i % READ_EVERY == 0) {
            float v[4];
            if (td_read(x, v, sizeof v) != TD_OK) {
                fail(c, "read", ctx);
                break;
            }
            if (v[0] != (float)(c->index + i) || v[3] != v[0]) {
                char what[120];
                snprintf(what, sizeof what, "after %d batches read %g, want %d", i, v[0],
                         c->index + i);
                fail(c, what, ctx);
                break;
            }
        }
    }
    if (td_fence(ctx) != TD_OK) fail(c, "fence", ctx);
    td_get_stats(ctx, &s1);
    c->batches = s1.batches_sent - s0.batches_sent;
    td_release(x);
    td_close(ctx);
}

/* Fork one client: it waits until the `go` pipe reads end-of-file, runs, and writes its report to
 * the returned pipe. */
static pid_t spawn(int index, const int go[2], int *report)
{
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    pid_t pid = fork();
    cr_assert(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(fds[0]);
        close(go[1]); /* else the pipe never reads end-of-file */
        char b;
        while (read(go[0], &b, 1) < 0 && errno == EINTR) {
        }
        client c;
        memset(&c, 0, sizeof c);
        c.index = index;
        client_main(&c);
        ssize_t n = write(fds[1], &c, sizeof c);
        _exit(n == (ssize_t)sizeof c ? 0 : 1);
    }
    close(fds[1]);
    *report = fds[0];
    return pid;
}

static long server_rss_kib(void)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%ld/status", (long)srv.pid);
    FILE *f = fopen(path, "r");
    long kib = -1;
    if (f == NULL) return -1;
    while (fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, "VmRSS: %ld kB", &kib) == 1) break;
    fclose(f);
    return kib;
}

Test(load, sixty_four_clients_thousand_batches_each, .init = start_tcp, .fini = stop,
     .timeout = 120)
{
    /* Fork every client before this process uses gRPC (forking after is unsafe). */
    int go[2];
    cr_assert_eq(pipe(go), 0);
    client *cl = calloc(CLIENTS, sizeof *cl);
    pid_t pids[CLIENTS];
    int reports[CLIENTS];
    for (int i = 0; i < CLIENTS; i++) pids[i] = spawn(i, go, &reports[i]);
    close(go[0]);
    td_server_info base;
    cr_assert_eq(td_server_info_get(srv.addr, 5000, &base), TD_OK, "%s", td_connect_error());
    long rss0 = server_rss_kib();
    double t0 = td_test_now_ms();
    close(go[1]); /* go */
    int errors = 0;
    uint64_t batches = 0, fewest = UINT64_MAX;
    for (int i = 0; i < CLIENTS; i++) {
        ssize_t n;
        while ((n = read(reports[i], &cl[i], sizeof cl[i])) < 0 && errno == EINTR) {
        }
        close(reports[i]);
        int status = 0;
        while (waitpid(pids[i], &status, 0) < 0 && errno == EINTR) {
        }
        if (n != (ssize_t)sizeof cl[i] || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            memset(&cl[i], 0, sizeof cl[i]);
            cl[i].errors = 1;
            snprintf(cl[i].first_error, sizeof cl[i].first_error,
                     "client %d died (wait status 0x%x)", i, (unsigned)status);
        }
        errors += cl[i].errors;
        batches += cl[i].batches;
        if (cl[i].batches < fewest) fewest = cl[i].batches;
        if (cl[i].errors) cr_log_error("%s", cl[i].first_error);
    }
    double ms = td_test_now_ms() - t0;
    cr_log_info("%d clients, %llu batches in %.0f ms (%.0f batches/s)", CLIENTS,
                (unsigned long long)batches, ms, (double)batches * 1e3 / ms);
    cr_expect_eq(errors, 0, "%d client errors", errors);
    cr_expect_geq(fewest, BATCHES, "a client sent only %llu batches",
                  (unsigned long long)fewest);

    /* Back to the baseline: no session, tensor or device byte left behind. */
    td_server_info now;
    bool back = td_test_wait_usage(srv.addr, base.sessions, base.bytes_in_use, 15000, &now);
    cr_expect(back,
              "usage after the clients closed: %llu sessions, %llu bytes (baseline %llu, %llu)",
              (unsigned long long)now.sessions, (unsigned long long)now.bytes_in_use,
              (unsigned long long)base.sessions, (unsigned long long)base.bytes_in_use);
    cr_expect_eq(now.tensors, base.tensors, "live tensors %llu, baseline %llu",
                 (unsigned long long)now.tensors, (unsigned long long)base.tensors);
    long rss1 = server_rss_kib();
    cr_log_info("server RSS %ld KiB before, %ld KiB after", rss0, rss1);
    /* A loose bound: allocator arenas grow with 64 connections (about 8 MiB), while a leak
     * of even 1 KiB per batch would add over 100 MiB. Sanitizer builds hold quarantine and
     * shadow memory on purpose (the ASan pass's LeakSanitizer checks leaks instead). */
    if (rss0 > 0 && rss1 > 0 && td_test_server_sanitizer(&srv) == NULL)
        cr_expect_lt(rss1 - rss0, 48L * 1024, "server RSS grew from %ld to %ld KiB", rss0, rss1);
    /* The server still serves. */
    td_context *ctx = NULL;
    char uri[600];
    td_test_server_uri(&srv, "cpu", uri, sizeof uri);
    cr_assert_eq(td_connect(uri, NULL, &ctx), TD_OK, "%s", td_connect_error());
    double v = 0;
    cr_expect_eq(td_read_scalar(td_sum(td_full(ctx, TD_F32, 1, (int64_t[]){8}, 2.0), 0, NULL,
                                       false),
                                &v),
                 TD_OK, "%s", td_last_error(ctx));
    cr_expect_eq(v, 16.0);
    td_close(ctx);
    free(cl);
}

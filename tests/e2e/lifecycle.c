/* e2e/lifecycle.c — sessions that end badly: a client killed mid-session, a server killed
 * or frozen mid-session, a server that is not there, a peer that never answers. Each must
 * end promptly with a clear status, and the server must free what a dead client held. */
#include "server_fixture.h"
#include "suite_fixture.h"
#include "tensord.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static td_context *connect_ok(const char *uri, const td_options *opts)
{
    td_context *ctx = NULL;
    td_status st = td_connect(uri, opts, &ctx);
    cr_assert_eq(st, TD_OK, "td_connect(%s): %s: %s", uri, td_status_name(st),
                 td_connect_error());
    return ctx;
}

Test(lifecycle, close_frees_everything, .init = start_tcp, .fini = stop, .timeout = 60)
{
    char uri[600];
    td_test_server_uri(&srv, "cpu", uri, sizeof uri);
    td_context *ctx = connect_ok(uri, NULL);
    td_server_info info;
    cr_assert_eq(td_server_info_get(srv.addr, 5000, &info), TD_OK, "%s", td_connect_error());
    cr_expect_eq(info.sessions, 1);
    /* 1 MiB of f32 held by the session. */
    td_tensor *t = td_full(ctx, TD_F32, 2, (int64_t[]){256, 1024}, 1.5);
    cr_assert(t != NULL, "%s", td_last_error(ctx));
    cr_assert_eq(td_fence(ctx), TD_OK, "%s", td_last_error(ctx));
    cr_assert_eq(td_server_info_get(srv.addr, 5000, &info), TD_OK, "%s", td_connect_error());
    cr_expect_geq(info.bytes_in_use, 1u << 20, "bytes_in_use %llu",
                  (unsigned long long)info.bytes_in_use);
    cr_expect_geq(info.tensors, 1);
    td_close(ctx);
    cr_expect(td_test_wait_usage(srv.addr, 0, 0, 5000, &info),
              "after td_close: %llu sessions, %llu bytes", (unsigned long long)info.sessions,
              (unsigned long long)info.bytes_in_use);
    cr_expect_eq(info.tensors, 0);
}

/* The child connects, makes 4 MiB of tensors, tells the parent, then keeps sending batches
 * until it is killed. gRPC is only ever used after the fork in this process tree's child,
 * and in the parent only after forking. */
static void killed_client_child(const char *uri, int ready_fd, int go_fd)
{
    char c;
    if (read(go_fd, &c, 1) != 1) _exit(3);
    td_context *ctx;
    if (td_connect(uri, NULL, &ctx) != TD_OK) _exit(4);
    td_tensor *keep[4];
    for (int i = 0; i < 4; i++) {
        keep[i] = td_full(ctx, TD_F32, 2, (int64_t[]){256, 1024}, (double)i);
        if (keep[i] == NULL) _exit(5);
    }
    if (td_fence(ctx) != TD_OK) _exit(6);
    if (write(ready_fd, "r", 1) != 1) _exit(7);
    for (;;) {
        td_tensor *s = td_add(keep[0], keep[1]);
        td_tensor *u = td_mul(s, keep[2]);
        td_release(s);
        td_release(u);
        td_fence(ctx);
    }
}

Test(lifecycle, killed_client_frees_its_session, .init = start_tcp, .fini = stop,
     .timeout = 60)
{
    char uri[600];
    td_test_server_uri(&srv, "cpu", uri, sizeof uri);
    int ready[2], go[2];
    cr_assert_eq(pipe(ready), 0);
    cr_assert_eq(pipe(go), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        close(ready[0]);
        close(go[1]);
        killed_client_child(uri, ready[1], go[0]);
        _exit(0);
    }
    close(ready[1]);
    close(go[0]);
    td_server_info base;
    cr_assert_eq(td_server_info_get(srv.addr, 5000, &base), TD_OK, "%s", td_connect_error());
    cr_assert_eq(write(go[1], "g", 1), 1);
    char c;
    ssize_t n = read(ready[0], &c, 1);
    if (n != 1) {
        int status;
        waitpid(pid, &status, 0);
        cr_assert_fail("child failed before it was ready (exit %d)",
                       WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    }
    td_server_info mid;
    cr_assert_eq(td_server_info_get(srv.addr, 5000, &mid), TD_OK, "%s", td_connect_error());
    cr_expect_eq(mid.sessions, base.sessions + 1);
    cr_expect_geq(mid.bytes_in_use, base.bytes_in_use + (4u << 20));
    usleep(100000); /* let it get some batches in flight */
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    close(ready[0]);
    close(go[1]);
    td_server_info after;
    cr_expect(td_test_wait_usage(srv.addr, base.sessions, base.bytes_in_use, 5000, &after),
              "5 s after the client died: %llu sessions, %llu bytes in use (baseline %llu, "
              "%llu)",
              (unsigned long long)after.sessions, (unsigned long long)after.bytes_in_use,
              (unsigned long long)base.sessions, (unsigned long long)base.bytes_in_use);
    cr_expect_eq(after.tensors, base.tensors);
}

Test(lifecycle, server_killed_mid_session, .init = start_tcp, .fini = stop, .timeout = 60)
{
    char uri[600];
    td_test_server_uri(&srv, "cpu", uri, sizeof uri);
    td_context *ctx = connect_ok(uri, NULL); /* default 60 s call timeout */
    td_tensor *x = td_full(ctx, TD_F32, 1, (int64_t[]){1000}, 2.0);
    td_tensor *y = td_add(x, x);
    cr_assert(y != NULL, "%s", td_last_error(ctx));
    float v[1000];
    cr_assert_eq(td_read(y, v, sizeof v), TD_OK, "%s", td_last_error(ctx));
    cr_expect_eq(v[999], 4.0f);

    td_test_server_kill(&srv);
    td_tensor *z = td_mul(y, y);
    double t0 = td_test_now_ms();
    td_status st = td_read(z, v, sizeof v);
    double dt = td_test_now_ms() - t0;
    cr_expect_eq(st, TD_EUNAVAILABLE, "read after server death: %s: %s", td_status_name(st),
                 td_last_error(ctx));
    cr_expect_lt(dt, 5000, "took %.0f ms to notice", dt);
    cr_expect(strstr(td_last_error(ctx), "127.0.0.1") != NULL,
              "message does not name the server: %s", td_last_error(ctx));
    st = td_fence(ctx);
    cr_expect_eq(st, TD_ECLOSED, "after the session broke: %s", td_status_name(st));
    td_close(ctx);
}

/* A call that finds the server dead names itself and the cause, also when the ops recorded
 * before it are what fails to go out (no background flusher here, so they wait in the batch
 * until the call sends them): uploads, reads and fences alike (client/context.c flush). */
Test(lifecycle, call_after_server_death_names_itself, .init = start_tcp, .fini = stop,
     .timeout = 60)
{
    char uri[600];
    enum { NCALLS = 4 };
    const char *apis[NCALLS] = {"td_write: ", "td_write_ex: ", "td_read: ", "td_fence: "};
    for (int i = 0; i < NCALLS; i++) {
        if (i > 0) start_tcp(); /* the last was killed */
        td_test_server_uri(&srv, "cpu", uri, sizeof uri);
        td_options o = {.batch_flush_us = -1};
        td_context *ctx = connect_ok(uri, &o);
        td_tensor *x = td_full(ctx, TD_F32, 1, (int64_t[]){1000}, 2.0);
        cr_assert_eq(td_fence(ctx), TD_OK, "%s", td_last_error(ctx));
        td_tensor *y = td_add(x, x); /* recorded, still in the client's batch */
        cr_assert_not_null(y, "%s", td_last_error(ctx));
        td_test_server_kill(&srv);
        float v[1000] = {0};
        td_status st = i == 0   ? td_write(x, v, sizeof v)
                       : i == 1 ? td_write_ex(x, v, sizeof v, TD_WRITE_FRESH)
                       : i == 2 ? td_read(y, v, sizeof v)
                                : td_fence(ctx);
        cr_expect_neq(st, TD_OK, "%scall to a dead server", apis[i]);
        cr_expect(strncmp(td_last_error(ctx), apis[i], strlen(apis[i])) == 0 &&
                      strstr(td_last_error(ctx), "127.0.0.1") != NULL,
                  "message does not name the call and the server: %s", td_last_error(ctx));
        td_release(y);
        td_release(x);
        td_close(ctx);
    }
}

Test(lifecycle, frozen_server_times_out, .init = start_tcp, .fini = stop, .timeout = 60)
{
    char uri[600];
    td_test_server_uri(&srv, "cpu", uri, sizeof uri);
    td_options o = {.call_timeout_ms = 1000};
    td_context *ctx = connect_ok(uri, &o);
    td_tensor *x = td_full(ctx, TD_F32, 1, (int64_t[]){16}, 1.0);
    cr_assert_eq(td_fence(ctx), TD_OK, "%s", td_last_error(ctx));
    kill(srv.pid, SIGSTOP);
    /* The signal stops the server asynchronously: wait until it really is stopped. */
    int wst = 0;
    cr_assert_eq(waitpid(srv.pid, &wst, WUNTRACED), srv.pid);
    cr_assert(WIFSTOPPED(wst), "tensord did not stop (status %#x)", wst);
    float v[16];
    double t0 = td_test_now_ms();
    td_status st = td_read(x, v, sizeof v);
    double dt = td_test_now_ms() - t0;
    kill(srv.pid, SIGCONT);
    cr_expect_eq(st, TD_ETIMEOUT, "%s: %s", td_status_name(st), td_last_error(ctx));
    cr_expect(dt >= 900 && dt < 4000, "timed out after %.0f ms (timeout 1000)", dt);
    cr_expect(strstr(td_last_error(ctx), "1000 ms") != NULL, "%s", td_last_error(ctx));
    st = td_fence(ctx);
    cr_expect_eq(st, TD_ECLOSED, "after the timeout: %s: %s", td_status_name(st),
                 td_last_error(ctx));
    td_close(ctx);
    /* The server itself is fine afterwards. */
    td_server_info info;
    cr_expect(td_test_wait_usage(srv.addr, 0, 0, 5000, &info), "%llu sessions left",
              (unsigned long long)info.sessions);
}

/* call_timeout_ms bounds an upload too (include/tensord.h, td_options): a 64 MiB td_write
 * to a frozen server fills the socket and gRPC's window, then fails with TD_ETIMEOUT about
 * one timeout later (1.06-1.16 s here), not one timeout per chunk or per wait. */
Test(lifecycle, frozen_server_upload_times_out, .init = start_tcp, .fini = stop, .timeout = 60)
{
    char uri[600];
    td_test_server_uri(&srv, "cpu", uri, sizeof uri);
    td_options o = {.call_timeout_ms = 1000};
    td_context *ctx = connect_ok(uri, &o);
    const size_t n = (size_t)16 << 20; /* 64 MiB of f32 */
    float *buf = calloc(n, sizeof *buf);
    cr_assert(buf != NULL);
    for (size_t i = 0; i < n; i++) buf[i] = (float)(i % 977); /* never a repeat */
    /* No fence before the freeze: filling 64 MiB takes a sanitized tensord longer than the
     * 1 s timeout (CI's TSan pass), and the fill is queued before the upload either way. */
    td_tensor *x = td_full(ctx, TD_F32, 1, (int64_t[]){(int64_t)n}, 0.0);
    cr_assert(x != NULL, "%s", td_last_error(ctx));
    kill(srv.pid, SIGSTOP);
    int wst = 0;
    cr_assert_eq(waitpid(srv.pid, &wst, WUNTRACED), srv.pid);
    cr_assert(WIFSTOPPED(wst), "tensord did not stop (status %#x)", wst);
    double t0 = td_test_now_ms();
    td_status st = td_write(x, buf, n * sizeof *buf);
    double dt = td_test_now_ms() - t0;
    kill(srv.pid, SIGCONT);
    cr_expect_eq(st, TD_ETIMEOUT, "%s: %s", td_status_name(st), td_last_error(ctx));
    cr_expect(dt >= 900 && dt < 3500, "the upload gave up after %.0f ms (timeout 1000)", dt);
    cr_expect(strstr(td_last_error(ctx), "1000 ms") != NULL, "%s", td_last_error(ctx));
    free(buf); /* td_write has returned: gRPC holds none of it */
    cr_expect_eq(td_fence(ctx), TD_ECLOSED, "after the timeout");
    td_close(ctx);
}

Test(lifecycle, nothing_listening, .timeout = 60)
{
    int port = td_test_free_port();
    cr_assert_gt(port, 0);
    char uri[128];
    snprintf(uri, sizeof uri, "tensord://127.0.0.1:%d/cpu", port);
    td_options o = {.connect_timeout_ms = 2000};
    td_context *ctx = NULL;
    double t0 = td_test_now_ms();
    td_status st = td_connect(uri, &o, &ctx);
    double dt = td_test_now_ms() - t0;
    cr_expect_eq(st, TD_EUNAVAILABLE, "%s: %s", td_status_name(st), td_connect_error());
    cr_expect_null(ctx);
    cr_expect_lt(dt, 2500, "took %.0f ms (connect timeout 2000)", dt);
    char hostport[64];
    snprintf(hostport, sizeof hostport, "127.0.0.1:%d", port);
    cr_expect(strstr(td_connect_error(), hostport) != NULL, "%s", td_connect_error());

    st = td_connect("unix:/nonexistent/tensord-e2e.sock/cpu", &o, &ctx);
    cr_expect_eq(st, TD_EUNAVAILABLE, "%s: %s", td_status_name(st), td_connect_error());
}

Test(lifecycle, silent_peer_hits_connect_timeout, .timeout = 60)
{
    /* A socket that listens but never speaks HTTP/2: the TCP handshake succeeds (the kernel
     * does it), gRPC's does not. */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert_geq(fd, 0);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof sa;
    cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    cr_assert_eq(listen(fd, 8), 0);
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
    char uri[128];
    snprintf(uri, sizeof uri, "tensord://127.0.0.1:%d/cpu", ntohs(sa.sin_port));
    td_options o = {.connect_timeout_ms = 1000};
    td_context *ctx = NULL;
    double t0 = td_test_now_ms();
    td_status st = td_connect(uri, &o, &ctx);
    double dt = td_test_now_ms() - t0;
    close(fd);
    cr_expect_eq(st, TD_EUNAVAILABLE, "%s: %s", td_status_name(st), td_connect_error());
    cr_expect(dt >= 900 && dt < 3000, "gave up after %.0f ms (connect timeout 1000)", dt);
    cr_expect(strstr(td_connect_error(), "within 1000 ms") != NULL, "%s", td_connect_error());
}

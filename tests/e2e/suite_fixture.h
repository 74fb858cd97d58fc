/* suite_fixture.h — the criterion fixture the e2e and hostile suites share: one real
 * tensord per test, in `srv`, started by start_tcp / start_unix / start_with (a suite's
 * .init, or called from its own .init) and stopped by stop (.fini), which fails the test
 * when the server exits non-zero (a crash, or a sanitizer report); with the steps the
 * suites repeat against it (connect to one of its devices, `tensorctl info`, a client
 * process killed mid-work). Include it once per suite; include raw_session.h first to get
 * open_raw as well.
 * Thread-safety: the test's main thread only (criterion runs .init, the test and .fini
 * there). */
#ifndef TD_TESTS_E2E_SUITE_FIXTURE_H
#define TD_TESTS_E2E_SUITE_FIXTURE_H

#include "server_fixture.h"
#include "tensord.h"

#include <criterion/criterion.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* n pseudo-random bytes from seed (xorshift64, a byte of each step): upload data that a
 * copy of the wrong bytes, or of stale ones, would change. */
static inline void fill_random_bytes(uint8_t *p, size_t n, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p[i] = (uint8_t)(x >> 24);
    }
}

static td_test_server srv;

/* Start tensord on 127.0.0.1:0 (or a fresh unix socket) with extra_args (a NULL-terminated
 * list, or NULL); aborts the test with the fixture's message when it does not start. */
static inline void start_server(bool unix_socket, const char *const *extra_args)
{
    char err[600];
    cr_assert(td_test_server_start(&srv, unix_socket, extra_args, err, sizeof err), "%s", err);
}

static inline void start_with(const char *const *extra_args) { start_server(false, extra_args); }
static inline void start_tcp(void) { start_server(false, NULL); }
static inline void start_unix(void) { start_server(true, NULL); }

/* SIGTERM and require exit status 0; nothing to do when the test killed the server. */
static inline void stop(void)
{
    if (srv.pid == 0) return;
    int rc = td_test_server_stop(&srv);
    cr_expect_eq(rc, 0, "tensord exited with status %d after SIGTERM (crashed?)", rc);
}

/* A context on srv's `device` with options o (may be NULL); aborts the test when td_connect
 * fails, naming the URI and td_connect_error. */
static inline td_context *connect_device(const char *device, const td_options *o)
{
    char uri[700];
    td_test_server_uri(&srv, device, uri, sizeof uri);
    td_context *ctx = NULL;
    td_status st = td_connect(uri, o, &ctx);
    cr_assert_eq(st, TD_OK, "td_connect(%s): %s: %s", uri, td_status_name(st),
                 td_connect_error());
    return ctx;
}

static inline td_context *connect_with(const td_options *o) { return connect_device("cpu", o); }

/* Connect to srv's cpu with o (may be NULL), expect td_context_transport to say `want`
 * ("shm+ring", "shm", "grpc"; `what` names the case in the failure), and close. */
static inline void expect_transport(const td_options *o, const char *want, const char *what)
{
    td_context *ctx = connect_with(o);
    cr_expect_str_eq(td_context_transport(ctx), want, "%s", what);
    td_close(ctx);
}

/* The stdout of `$TENSORCTL_BIN info ARGS ADDR` (a static buffer, valid until the next
 * call); expects exit status 0. */
static inline const char *tensorctl_info(const char *args, const char *addr)
{
    static char out[8192];
    char cmd[1200];
    const char *bin = getenv("TENSORCTL_BIN");
    cr_assert(bin != NULL, "TENSORCTL_BIN is not set");
    snprintf(cmd, sizeof cmd, "%s info %s %s", bin, args, addr);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    cr_expect_eq(pclose(p), 0, "%s: %s", cmd, out);
    return out;
}

/* A client killed (SIGKILL) mid-work leaves the server with nothing. Forks (call it before
 * this process touches gRPC); the child runs body(URI of srv's `device`), which never returns
 * (it _exits with a code above 1 when it cannot start). Waits up to 10 s for the server to
 * show one session holding at least min_bytes, lets the child work busy_ms more, calls
 * during(arg) when not NULL (e.g. to measure the server mid-work), kills and reaps the
 * child (which must have died of the signal, not ended by itself), then requires the
 * server back to 0 sessions and 0 bytes within 15 s. Aborts the test otherwise. */
static inline void kill_client_mid_work_on(const char *device, void (*body)(const char *uri),
                                           size_t min_bytes, int busy_ms,
                                           void (*during)(void *arg), void *arg)
{
    pid_t child = fork();
    cr_assert_geq(child, 0);
    if (child == 0) {
        char uri[600];
        td_test_server_uri(&srv, device, uri, sizeof uri);
        body(uri);
        _exit(9);
    }
    struct td_server_info info = {0};
    bool up = false;
    for (double t0 = td_test_now_ms(); !up && td_test_now_ms() - t0 < 10000;) {
        up = td_server_info_get(srv.addr, 2000, &info) == TD_OK && info.sessions == 1 &&
             info.bytes_in_use >= min_bytes;
        if (!up) usleep(10000);
    }
    int status = 0;
    if (!up) {
        kill(child, SIGKILL);
        waitpid(child, &status, 0);
        cr_assert_fail("child session never came up (child status %d; %llu sessions, %llu "
                       "bytes, want 1 and %zu)", status, (unsigned long long)info.sessions,
                       (unsigned long long)info.bytes_in_use, min_bytes);
    }
    usleep((useconds_t)busy_ms * 1000);
    if (during != NULL) during(arg);
    kill(child, SIGKILL);
    waitpid(child, &status, 0);
    cr_assert(WIFSIGNALED(status), "the child ended by itself (status %d)", status);
    cr_assert(td_test_wait_usage(srv.addr, 0, 0, 15000, &info),
              "usage after the kill: %llu sessions, %llu bytes",
              (unsigned long long)info.sessions, (unsigned long long)info.bytes_in_use);
}

/* kill_client_mid_work_on srv's cpu. */
static inline void kill_client_mid_work(void (*body)(const char *uri), size_t min_bytes,
                                        int busy_ms, void (*during)(void *arg), void *arg)
{
    kill_client_mid_work_on("cpu", body, min_bytes, busy_ms, during, arg);
}

#ifdef TD_TESTS_E2E_RAW_SESSION_H
/* A raw session on srv's cpu device, any protocol version we speak; aborts the test when
 * the server refuses it. */
static inline void open_raw(raw_session *s)
{
    bool ok = raw_open(s, srv.addr, TD_PROTOCOL_MIN, TD_PROTOCOL_MAX, "cpu");
    cr_assert(ok, "cannot open a raw session: %s (status %d)", raw_details(s), (int)s->status);
}

/* Read bytes [off, off + cap) of tensor `id` through s into buf: sends the read and
 * gathers its chunks (other replies are skipped), each reply within timeout_ms; aborts the
 * test on a Failure, a stream end or more than cap bytes. Returns the bytes received. */
static inline size_t raw_read_back(raw_session *s, uint64_t id, uint64_t off, uint8_t *buf,
                                   size_t cap, int timeout_ms)
{
    uint64_t rseq = raw_send_read(s, id, off, cap);
    cr_assert_neq(rseq, 0u, "the read could not be sent");
    size_t got = 0;
    for (;;) {
        raw_msg m;
        int rc = raw_recv(s, &m, timeout_ms);
        cr_assert_eq(rc, 1, "session stopped working (rc %d, status %d: %s)", rc,
                     (int)s->status, raw_details(s));
        cr_assert_neq(m.kind, TENSORD__V1__SERVER_MESSAGE__BODY_FAILURE, "valid work failed: %s",
                      m.message);
        bool last = false;
        if (m.kind == TENSORD__V1__SERVER_MESSAGE__BODY_READ && m.seq == rseq) {
            cr_assert_leq(got + m.payload_len, cap);
            memcpy(buf + got, m.payload, m.payload_len);
            got += m.payload_len;
            last = m.last;
        }
        raw_msg_fini(&m);
        if (last) return got;
    }
}

/* raw_reply_to with a 10 s limit: 1 (a Failure for seq, its message in msg) or 0
 * (any other reply); aborts the test when neither came. */
static inline int reply_to(raw_session *s, uint64_t seq, char *msg, size_t len)
{
    int rc = raw_reply_to(s, seq, msg, len, 10000);
    cr_assert_neq(rc, -1, "no reply to seq %llu", (unsigned long long)seq);
    return rc;
}
#endif
#endif

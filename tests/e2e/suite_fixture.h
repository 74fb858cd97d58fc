/* suite_fixture.h — the criterion fixture the e2e and hostile suites share: one real
 * tensord per test, in `srv`, started by start_tcp / start_unix / start_with (a suite's
 * .init, or called from its own .init) and stopped by stop (.fini), which fails the test
 * when the server exits non-zero (a crash, or a sanitizer report). Include it once per
 * suite; include raw_session.h first to get open_raw as well.
 * Thread-safety: the test's main thread only (criterion runs .init, the test and .fini
 * there). */
#ifndef TD_TESTS_E2E_SUITE_FIXTURE_H
#define TD_TESTS_E2E_SUITE_FIXTURE_H

#include "server_fixture.h"

#include <criterion/criterion.h>
#include <stdbool.h>

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

#ifdef TD_TESTS_E2E_RAW_SESSION_H
/* A raw session on srv's cpu device, any protocol version we speak; aborts the test when
 * the server refuses it. */
static inline void open_raw(raw_session *s)
{
    bool ok = raw_open(s, srv.addr, TD_PROTOCOL_MIN, TD_PROTOCOL_MAX, "cpu");
    cr_assert(ok, "cannot open a raw session: %s (status %d)", raw_details(s), (int)s->status);
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

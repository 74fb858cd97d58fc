/* e2e/pool.c — a pool of servers (issue 19, item 3), with three real tensord processes on
 * loopback: sessions spread over them round robin and each reports its server; a draining
 * server (SIGTERM, one session still open) sends new sessions elsewhere; a dead one
 * (SIGKILL) is skipped with a warning line naming it; dns:/// resolves a name; malformed
 * lists and a pool with no live server fail with clear messages. Bounded: at most three
 * servers and a dozen sessions per test. */
#include "server_fixture.h"
#include "tensord.h"

#include <criterion/criterion.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NSRV 3

static td_test_server pool[NSRV];
static char pool_uri[2048];

static void start_pool(void)
{
    const char *args[] = {"--drain-timeout", "30", NULL};
    size_t len = (size_t)snprintf(pool_uri, sizeof pool_uri, "tensord://");
    for (int i = 0; i < NSRV; i++) {
        char err[600];
        cr_assert(td_test_server_start(&pool[i], false, args, err, sizeof err), "%s", err);
        len += (size_t)snprintf(pool_uri + len, sizeof pool_uri - len, "%s%s", i ? "," : "",
                                pool[i].addr);
    }
    snprintf(pool_uri + len, sizeof pool_uri - len, "/cpu");
}

static void stop_pool(void)
{
    for (int i = 0; i < NSRV; i++) {
        if (pool[i].pid == 0) continue;
        int rc = td_test_server_stop(&pool[i]);
        cr_expect_eq(rc, 0, "server %d exited with status %d", i, rc);
    }
}

/* Which pool member `server` (td_context_server) is, or -1. */
static int member(const char *server)
{
    for (int i = 0; i < NSRV; i++)
        if (strcmp(server, pool[i].addr) == 0) return i;
    return -1;
}

static td_context *connect_pool(void)
{
    td_context *ctx = NULL;
    td_status st = td_connect(pool_uri, NULL, &ctx);
    cr_assert_eq(st, TD_OK, "td_connect(%s): %s: %s", pool_uri, td_status_name(st),
                 td_connect_error());
    cr_assert_geq(member(td_context_server(ctx)), 0, "server '%s' is not in the pool",
                  td_context_server(ctx));
    return ctx;
}

/* A session works: 1 + 1 on its server. */
static void expect_works(td_context *ctx)
{
    td_tensor *a = td_full(ctx, TD_F32, 1, (int64_t[]){2}, 1.0);
    td_tensor *b = td_add(a, a);
    float out[2] = {0, 0};
    cr_assert_eq(td_read(b, out, sizeof out), TD_OK, "%s", td_last_error(ctx));
    cr_expect_eq(out[1], 2.0f);
    td_release(a);
    td_release(b);
}

/* Run td_connect with this process's stderr going to a file; the file's text into log. */
static td_status connect_capturing(const char *uri, td_context **ctx, char *log, size_t cap)
{
    char path[] = "/tmp/td-pool-log-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    td_status st = td_connect(uri, NULL, ctx);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    lseek(fd, 0, SEEK_SET);
    ssize_t n = read(fd, log, cap - 1);
    log[n > 0 ? n : 0] = '\0';
    close(fd);
    unlink(path);
    return st;
}

Test(pool, sessions_spread_and_report_their_server, .init = start_pool, .fini = stop_pool,
     .timeout = 90)
{
    td_context *ctx[2 * NSRV];
    int per[NSRV] = {0};
    for (int i = 0; i < 2 * NSRV; i++) {
        ctx[i] = connect_pool();
        per[member(td_context_server(ctx[i]))]++;
        cr_expect_str_eq(td_device_name(ctx[i]), "cpu");
        expect_works(ctx[i]);
    }
    for (int i = 0; i < NSRV; i++)
        cr_expect_eq(per[i], 2, "server %d (%s) got %d of %d sessions", i, pool[i].addr, per[i],
                     2 * NSRV);
    /* each session sticks to its server: its sessions are counted there */
    for (int i = 0; i < NSRV; i++) {
        td_server_info info;
        cr_assert_eq(td_server_info_get(pool[i].addr, 5000, &info), TD_OK);
        cr_expect_eq(info.sessions, 2u, "server %d counts %llu sessions", i,
                     (unsigned long long)info.sessions);
    }
    for (int i = 0; i < 2 * NSRV; i++) td_close(ctx[i]);
}

Test(pool, draining_server_sends_sessions_elsewhere, .init = start_pool, .fini = stop_pool,
     .timeout = 90)
{
    /* a session on server 1 keeps it draining (up to --drain-timeout 30) after SIGTERM */
    char uri[700];
    td_test_server_uri(&pool[1], "cpu", uri, sizeof uri);
    td_context *held;
    cr_assert_eq(td_connect(uri, NULL, &held), TD_OK, "%s", td_connect_error());
    cr_assert_eq(kill(pool[1].pid, SIGTERM), 0);
    /* wait (bounded) until server 1 refuses new sessions */
    bool refusing = false;
    for (int i = 0; i < 200 && !refusing; i++) {
        td_context *probe = NULL;
        if (td_connect(uri, NULL, &probe) == TD_OK)
            td_close(probe);
        else
            refusing = true;
        if (!refusing) usleep(25000);
    }
    cr_assert(refusing, "server 1 still opens sessions after SIGTERM");
    char log[8192];
    td_context *ctx[4];
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(connect_capturing(pool_uri, &ctx[i], log, sizeof log), TD_OK, "%s",
                     td_connect_error());
        int m = member(td_context_server(ctx[i]));
        cr_expect_neq(m, 1, "a new session went to the draining server %s", pool[1].addr);
        cr_expect_geq(m, 0);
        expect_works(ctx[i]);
    }
    /* the session it held keeps working while it drains */
    expect_works(held);
    for (int i = 0; i < 4; i++) td_close(ctx[i]);
    td_close(held);
    int rc = td_test_server_stop(&pool[1]); /* reaps it: it exits once the session is gone */
    cr_expect_eq(rc, 0, "the draining server exited with status %d", rc);
}

Test(pool, dead_server_is_skipped_with_a_log_line, .init = start_pool, .fini = stop_pool,
     .timeout = 90)
{
    td_test_server_kill(&pool[0]);
    char log[8192], want[700];
    snprintf(want, sizeof want, "skipping server %s (TD_EUNAVAILABLE)", pool[0].addr);
    bool logged = false;
    for (int i = 0; i < NSRV; i++) { /* one of these starts at the dead member */
        td_context *ctx = NULL;
        cr_assert_eq(connect_capturing(pool_uri, &ctx, log, sizeof log), TD_OK, "%s",
                     td_connect_error());
        cr_expect_gt(member(td_context_server(ctx)), 0, "session on %s",
                     td_context_server(ctx));
        if (strstr(log, want) != NULL) logged = true;
        cr_expect(strstr(log, "skipping") == NULL || strstr(log, want) != NULL,
                  "unexpected log: %s", log);
        expect_works(ctx);
        td_close(ctx);
    }
    cr_expect(logged, "no '%s' line on stderr", want);
}

Test(pool, no_live_server_fails_naming_the_pool, .timeout = 90)
{
    char uri[256];
    int p1 = td_test_free_port(), p2 = td_test_free_port();
    snprintf(uri, sizeof uri, "tensord://127.0.0.1:%d,127.0.0.1:%d/cpu", p1, p2);
    td_context *ctx = NULL;
    char log[8192];
    td_status st = connect_capturing(uri, &ctx, log, sizeof log);
    cr_expect_eq(st, TD_EUNAVAILABLE, "%s", td_status_name(st));
    cr_expect_null(ctx);
    cr_expect(strstr(td_connect_error(), "no server of pool") != NULL, "%s",
              td_connect_error());
    cr_expect(strstr(td_connect_error(), "(2 tried)") != NULL, "%s", td_connect_error());
    cr_expect(strstr(log, "skipping server 127.0.0.1:") != NULL, "log: %s", log);
}

/* A member that refuses the tenant the device (PERMISSION_DENIED: its devices= list names
 * cpu:3, which a 2-device server lacks) is skipped like one without the device; a bad token
 * (UNAUTHENTICATED) still stops at the first member. */
Test(pool, member_refusing_a_pinned_device_is_skipped, .timeout = 90)
{
    char dir[] = "/tmp/td-pool-pin-XXXXXX", tokens[64], cmd[512], tok[80];
    cr_assert(mkdtemp(dir) != NULL);
    snprintf(tokens, sizeof tokens, "%s/tokens", dir);
    snprintf(cmd, sizeof cmd, "'%s' token new --tenant pinned --devices cpu:3 --tokens-file '%s'",
             getenv("TENSORCTL_BIN"), tokens);
    FILE *p = popen(cmd, "r");
    cr_assert(p != NULL);
    cr_assert(fgets(tok, sizeof tok, p) != NULL, "no token from '%s'", cmd);
    cr_assert_eq(pclose(p), 0);
    tok[strcspn(tok, "\n")] = '\0';
    const char *two[] = {"--cpu-devices", "2", "--tokens-file", tokens, NULL};
    const char *four[] = {"--cpu-devices", "4", "--tokens-file", tokens, NULL};
    char err[600];
    cr_assert(td_test_server_start(&pool[0], false, two, err, sizeof err), "%s", err);
    cr_assert(td_test_server_start(&pool[1], false, four, err, sizeof err), "%s", err);
    char uri[1200];
    snprintf(uri, sizeof uri, "tensord://%s,%s/auto", pool[0].addr, pool[1].addr);
    td_options o;
    memset(&o, 0, sizeof o);
    o.token = tok;
    for (int i = 0; i < 3; i++) { /* round robin: at least one starts at the 2-device one */
        td_context *ctx = NULL;
        td_status st = td_connect(uri, &o, &ctx);
        cr_assert_eq(st, TD_OK, "try %d: %s: %s", i, td_status_name(st), td_connect_error());
        cr_expect_str_eq(td_context_server(ctx), pool[1].addr);
        cr_expect_str_eq(td_device_name(ctx), "cpu:3");
        td_close(ctx);
    }
    o.token = "td_not-a-token";
    for (int i = 0; i < 2; i++) {
        td_context *ctx = NULL;
        td_status st = td_connect(uri, &o, &ctx);
        cr_expect_eq(st, TD_EUNAUTHENTICATED, "%s: %s", td_status_name(st), td_connect_error());
        cr_expect(strstr(td_connect_error(), "no server of pool") == NULL,
                  "a bad token was tried on every member: %s", td_connect_error());
    }
    cr_expect_eq(td_test_server_stop(&pool[0]), 0);
    cr_expect_eq(td_test_server_stop(&pool[1]), 0);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_expect_eq(system(cmd), 0);
}

/* A pool uri is as long as its servers need: 40 members (the uri target buffer was 512
 * bytes, so ~31 members failed with a bare "malformed uri"), and 65 get the member limit. */
Test(pool, long_server_lists_are_parsed, .timeout = 90)
{
    td_test_server one;
    char err[600];
    cr_assert(td_test_server_start(&one, false, NULL, err, sizeof err), "%s", err);
    static char uri[65 * 32 + 64];
    for (int members = 40; members <= 65; members += 25) {
        size_t len = (size_t)snprintf(uri, sizeof uri, "tensord://");
        for (int i = 0; i < members; i++)
            len += (size_t)snprintf(uri + len, sizeof uri - len, "%s%s", i ? "," : "", one.addr);
        snprintf(uri + len, sizeof uri - len, "/cpu");
        td_context *ctx = NULL;
        td_status st = td_connect(uri, NULL, &ctx);
        if (members == 40) {
            cr_assert_eq(st, TD_OK, "%zu-byte uri: %s", strlen(uri), td_connect_error());
            cr_expect_str_eq(td_context_server(ctx), one.addr);
            expect_works(ctx);
            td_close(ctx);
        } else {
            cr_expect_eq(st, TD_EINVAL, "%s", td_status_name(st));
            cr_expect(strstr(td_connect_error(), "has more than 64 servers") != NULL, "%s",
                      td_connect_error());
        }
    }
    cr_expect_eq(td_test_server_stop(&one), 0);
}

Test(pool, malformed_lists_are_refused, .timeout = 90)
{
    static const struct {
        const char *uri, *says;
    } bad[] = {
        {"tensord://127.0.0.1:1,/cpu", "ends with a comma"},
        {"tensord://127.0.0.1:1,,127.0.0.1:2/cpu", "entry 2 is not HOST:PORT"},
        {"tensord://127.0.0.1:1,nohost/cpu", "entry 2 is not HOST:PORT"},
        {"dns:///noport/cpu", "expected dns:///NAME:PORT"},
        {"dns:/x:1", "expected dns:///NAME:PORT"},
        {"dns:///no-such-host.invalid:7070/cpu", "cannot resolve no-such-host.invalid"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        td_context *ctx = NULL;
        td_status st = td_connect(bad[i].uri, NULL, &ctx);
        cr_expect_eq(st, TD_EINVAL, "%s: %s", bad[i].uri, td_status_name(st));
        cr_expect_null(ctx);
        cr_expect(strstr(td_connect_error(), bad[i].says) != NULL, "%s: '%s' lacks '%s'",
                  bad[i].uri, td_connect_error(), bad[i].says);
    }
}

Test(pool, dns_name_resolves_to_the_server, .timeout = 90)
{
    td_test_server one;
    char err[600];
    cr_assert(td_test_server_start(&one, false, NULL, err, sizeof err), "%s", err);
    char uri[256];
    snprintf(uri, sizeof uri, "dns:///localhost:%d/cpu", one.port);
    for (int i = 0; i < 2; i++) { /* localhost may also be ::1, where nothing listens */
        td_context *ctx = NULL;
        char log[8192];
        td_status st = connect_capturing(uri, &ctx, log, sizeof log);
        cr_assert_eq(st, TD_OK, "%s: %s", uri, td_connect_error());
        char want[64];
        snprintf(want, sizeof want, "127.0.0.1:%d", one.port); /* HOST:PORT, no "ipv4:" */
        cr_expect_str_eq(td_context_server(ctx), want);
        expect_works(ctx);
        td_close(ctx);
    }
    cr_expect_eq(td_test_server_stop(&one), 0);
    /* nobody listens now: the hint is a --listen address tensord takes */
    td_context *ctx = NULL;
    char log[8192], want[96];
    snprintf(uri, sizeof uri, "dns:///127.0.0.1:%d/cpu", one.port);
    td_status st = connect_capturing(uri, &ctx, log, sizeof log);
    cr_expect_eq(st, TD_EUNAVAILABLE, "%s: %s", uri, td_connect_error());
    snprintf(want, sizeof want, "(tensord --listen 127.0.0.1:%d)", one.port);
    cr_expect(strstr(td_connect_error(), want) != NULL, "%s", td_connect_error());
    cr_expect(strstr(td_connect_error(), "ipv4:") == NULL, "%s", td_connect_error());
    cr_expect(strstr(log, "ipv4:") == NULL, "log: %s", log);
}

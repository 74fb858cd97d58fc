/* e2e/security.c — TLS and mutual TLS, bearer tokens, tenants and their quotas, and the
 * listen-address rules, against a real tensord (issue 5's Tests section).
 *
 * Certificates are made at test time by make_certs.sh (no private key is checked in);
 * tokens with `tensorctl token new`, exactly as an operator would.
 */
#include "raw_session.h"
#include "server_fixture.h"
#include "tensord.h"

#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static td_test_server srv;
static char dir[256];      /* certificates and tokens file */
static char tokens[320];
static char alice[128], bob[128];

static const char *path(const char *name)
{
    static char buf[4][400];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

static void run_ok(const char *cmd)
{
    int rc = system(cmd);
    cr_assert_eq(rc, 0, "'%s' failed (%d)", cmd, rc);
}

static void make_dir(void)
{
    snprintf(dir, sizeof dir, "/tmp/td-sec-XXXXXX");
    cr_assert(mkdtemp(dir) != NULL);
    char cmd[800];
    snprintf(cmd, sizeof cmd, "sh '%s/tests/e2e/make_certs.sh' '%s'", getenv("TD_SOURCE_ROOT"),
             dir);
    run_ok(cmd);
    snprintf(tokens, sizeof tokens, "%s/tokens", dir);
}

/* `tensorctl token new` for tenant with extra flags; the printed token into out. */
static void token_new(const char *tenant, const char *flags, char *out, size_t cap)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "'%s' token new --tenant %s --tokens-file '%s' %s",
             getenv("TENSORCTL_BIN"), tenant, tokens, flags);
    FILE *p = popen(cmd, "r");
    cr_assert(p != NULL);
    cr_assert(fgets(out, (int)cap, p) != NULL, "no token from '%s'", cmd);
    cr_assert_eq(pclose(p), 0);
    out[strcspn(out, "\n")] = '\0';
    cr_assert_eq(strncmp(out, "tdt_", 4), 0, "token '%s'", out);
}

static void cleanup(void)
{
    if (srv.pid != 0) {
        int rc = td_test_server_stop(&srv);
        cr_expect_eq(rc, 0, "tensord exited with status %d after SIGTERM", rc);
    }
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (dir[0] != '\0') cr_expect_eq(system(cmd), 0);
}

static void start(const char *const *args)
{
    char err[600];
    cr_assert(td_test_server_start(&srv, false, args, err, sizeof err), "%s", err);
}

static td_status try_connect(const char *scheme, const td_options *o, td_context **ctx)
{
    char uri[600];
    snprintf(uri, sizeof uri, "%s://127.0.0.1:%d/cpu", scheme, srv.port);
    *ctx = NULL;
    return td_connect(uri, o, ctx);
}

static void expect_connect_fails(const char *scheme, const td_options *o, td_status want,
                                 const char *must_contain)
{
    td_context *ctx;
    td_status st = try_connect(scheme, o, &ctx);
    cr_expect_eq(st, want, "got %s (%s), want %s", td_status_name(st), td_connect_error(),
                 td_status_name(want));
    cr_expect(strstr(td_connect_error(), must_contain) != NULL, "message '%s' lacks '%s'",
              td_connect_error(), must_contain);
    if (st == TD_OK) td_close(ctx);
}

/* A little work that must succeed on ctx. */
static void expect_works(td_context *ctx)
{
    td_tensor *a = td_full(ctx, TD_F32, 1, (int64_t[]){4}, 2.0);
    td_tensor *b = a ? td_add(a, a) : NULL;
    cr_assert(b != NULL, "%s", td_last_error(ctx));
    float out[4];
    cr_assert_eq(td_read(b, out, sizeof out), TD_OK, "%s", td_last_error(ctx));
    cr_expect_eq(out[3], 4.0f);
    td_release(a);
    td_release(b);
}

/* ---- TLS ---- */

static void start_mtls(void)
{
    make_dir();
    FILE *f = fopen(tokens, "w");
    cr_assert(f != NULL);
    fprintf(f, "# the client certificate maps to tenant alice\ncn:alice-cert alice max_tensors=2\n");
    fclose(f);
    const char *args[] = {"--tls-cert", path("server.pem"), "--tls-key", path("server.key"),
                          "--tls-client-ca", path("ca.pem"), "--tokens-file", tokens, NULL};
    start(args);
}

static td_options mtls_opts(const char *ca, const char *cert, const char *key)
{
    td_options o;
    memset(&o, 0, sizeof o);
    o.connect_timeout_ms = 5000;
    o.tls_ca_file = ca ? path(ca) : NULL;
    o.tls_cert_file = cert ? path(cert) : NULL;
    o.tls_key_file = key ? path(key) : NULL;
    return o;
}

Test(tls, plaintext_client_fails_clearly, .init = start_mtls, .fini = cleanup, .timeout = 60)
{
    expect_connect_fails("tensord", NULL, TD_EUNAVAILABLE, "TLS");
}

Test(tls, wrong_ca_fails, .init = start_mtls, .fini = cleanup, .timeout = 60)
{
    td_options o = mtls_opts("other-ca.pem", "client.pem", "client.key");
    expect_connect_fails("tensords", &o, TD_EUNAVAILABLE, "TLS handshake with 127.0.0.1");
}

Test(tls, mtls_without_client_cert_fails, .init = start_mtls, .fini = cleanup, .timeout = 60)
{
    td_options o = mtls_opts("ca.pem", NULL, NULL);
    expect_connect_fails("tensords", &o, TD_EUNAVAILABLE, "client certificate");
}

Test(tls, client_cert_from_other_ca_fails, .init = start_mtls, .fini = cleanup, .timeout = 60)
{
    td_options o = mtls_opts("ca.pem", "other-client.pem", "other-client.key");
    expect_connect_fails("tensords", &o, TD_EUNAVAILABLE, "TLS handshake");
}

Test(tls, valid_mtls_works_with_cn_tenant, .init = start_mtls, .fini = cleanup, .timeout = 60)
{
    td_options o = mtls_opts("ca.pem", "client.pem", "client.key");
    td_context *ctx;
    td_status st = try_connect("tensords", &o, &ctx);
    cr_assert_eq(st, TD_OK, "%s: %s", td_status_name(st), td_connect_error());
    expect_works(ctx);
    /* Tenant alice (from the certificate) may hold 2 tensors: the third fails. */
    td_tensor *a = td_full(ctx, TD_F32, 1, (int64_t[]){4}, 1.0);
    td_tensor *b = td_full(ctx, TD_F32, 1, (int64_t[]){4}, 1.0);
    td_tensor *c = td_full(ctx, TD_F32, 1, (int64_t[]){4}, 1.0);
    cr_assert(a && b && c, "%s", td_last_error(ctx));
    st = td_fence(ctx);
    cr_expect_eq(st, TD_EQUOTA, "fence: %s: %s", td_status_name(st), td_last_error(ctx));
    cr_expect(strstr(td_last_error(ctx), "tenant 'alice'") != NULL &&
                  strstr(td_last_error(ctx), "max_tensors") != NULL,
              "message: %s", td_last_error(ctx));
    td_release(c);
    td_release(b);
    td_release(a);
    cr_expect_eq(td_fence(ctx), TD_OK, "%s", td_last_error(ctx));
    expect_works(ctx);
    td_close(ctx);
    /* tensorctl too, with --ca/--cert/--key. */
    char cmd[1600];
    snprintf(cmd, sizeof cmd,
             "'%s' info tensords://127.0.0.1:%d --ca '%s' --cert '%s' --key '%s' >/dev/null",
             getenv("TENSORCTL_BIN"), srv.port, path("ca.pem"), path("client.pem"),
             path("client.key"));
    run_ok(cmd);
}

static void start_tls_only(void)
{
    make_dir();
    const char *args[] = {"--tls-cert", path("server.pem"), "--tls-key", path("server.key"),
                          NULL};
    start(args);
}

Test(tls, server_only_tls_works, .init = start_tls_only, .fini = cleanup, .timeout = 60)
{
    td_options o = mtls_opts("ca.pem", NULL, NULL);
    td_context *ctx;
    td_status st = try_connect("tensords", &o, &ctx);
    cr_assert_eq(st, TD_OK, "%s: %s", td_status_name(st), td_connect_error());
    expect_works(ctx);
    td_close(ctx);
    o = mtls_opts("other-ca.pem", NULL, NULL);
    expect_connect_fails("tensords", &o, TD_EUNAVAILABLE, "wrong CA");
}

/* Runs tensord with args (a shell fragment), returns its exit status; output in out. */
static int run_tensord(const char *args, char *out, size_t cap)
{
    char cmd[2000];
    snprintf(cmd, sizeof cmd, "timeout 10 '%s' %s 2>&1", getenv("TENSORD_BIN"), args);
    FILE *p = popen(cmd, "r");
    cr_assert(p != NULL);
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = '\0';
    int rc = pclose(p);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

Test(tls, bad_files_refused_at_startup, .init = make_dir, .fini = cleanup, .timeout = 60)
{
    char out[4096], args[1200];
    snprintf(args, sizeof args, "--listen 127.0.0.1:0 --tls-cert '%s' --tls-key '%s'",
             path("expired.pem"), path("expired.key"));
    cr_expect_eq(run_tensord(args, out, sizeof out), 2, "%s", out);
    cr_expect(strstr(out, "expired.pem: certificate has expired") != NULL, "%s", out);
    snprintf(args, sizeof args, "--listen 127.0.0.1:0 --tls-cert '%s' --tls-key '%s'",
             path("server.pem"), path("client.key"));
    cr_expect_eq(run_tensord(args, out, sizeof out), 2, "%s", out);
    cr_expect(strstr(out, "does not match the certificate") != NULL, "%s", out);
    snprintf(args, sizeof args, "--listen 127.0.0.1:0 --tls-cert '%s' --tls-key '%s'",
             path("missing.pem"), path("server.key"));
    cr_expect_eq(run_tensord(args, out, sizeof out), 2, "%s", out);
    cr_expect(strstr(out, "missing.pem: cannot read") != NULL, "%s", out);
}

/* ---- listening ---- */

Test(listen, any_address_without_tls_refused, .timeout = 60)
{
    char out[4096];
    cr_expect_eq(run_tensord("--listen 0.0.0.0:0", out, sizeof out), 2, "%s", out);
    cr_expect(strstr(out, "refusing to listen on 0.0.0.0:0 without TLS") != NULL, "%s", out);
}

Test(listen, any_address_with_insecure_starts_and_warns, .timeout = 60)
{
    char out[4096];
    /* timeout(1) sends SIGTERM after 2 s: a clean stop (exit 0 is reported as 124). */
    char cmd[600];
    snprintf(cmd, sizeof cmd, "timeout 2 '%s' --listen 0.0.0.0:0 --insecure 2>&1",
             getenv("TENSORD_BIN"));
    FILE *p = popen(cmd, "r");
    cr_assert(p != NULL);
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    pclose(p);
    cr_expect(strstr(out, "listening on 0.0.0.0:") != NULL, "%s", out);
    cr_expect(strstr(out, "without TLS (--insecure)") != NULL, "%s", out);
}

/* ---- tokens and quotas ---- */

static void start_tokens(void)
{
    make_dir();
    token_new("alice", "--max-sessions 2 --max-bytes 64K --max-tensor-bytes 32K", alice,
              sizeof alice);
    token_new("bob", "", bob, sizeof bob);
    const char *args[] = {"--tokens-file", tokens, NULL};
    start(args);
}

static td_context *connect_as(const char *token)
{
    td_options o;
    memset(&o, 0, sizeof o);
    o.token = token;
    td_context *ctx;
    td_status st = try_connect("tensord", &o, &ctx);
    cr_assert_eq(st, TD_OK, "%s: %s", td_status_name(st), td_connect_error());
    return ctx;
}

Test(tokens, missing_unknown_malformed_unauthenticated, .init = start_tokens, .fini = cleanup,
     .timeout = 60)
{
    unsetenv("TENSORD_TOKEN");
    expect_connect_fails("tensord", NULL, TD_EUNAUTHENTICATED, "requires authentication");
    td_options o;
    memset(&o, 0, sizeof o);
    o.token = "tdt_0000000000000000000000000000000000000000000000000000000000000000";
    expect_connect_fails("tensord", &o, TD_EUNAUTHENTICATED, "unknown or revoked");
    /* Malformed headers, sent raw. */
    static const char *const bad[] = {"Basic YWxpY2U6cHc=", "Bearer", "bearer  ", "tdt_x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        raw_authorization = bad[i];
        raw_session s;
        bool opened = raw_open(&s, srv.addr, TD_PROTOCOL_MIN, TD_PROTOCOL_MAX, "cpu");
        cr_expect(!opened, "header '%s' accepted", bad[i]);
        cr_expect_eq(s.status, GRPC_STATUS_UNAUTHENTICATED, "header '%s': status %d (%s)",
                     bad[i], (int)s.status, raw_details(&s));
        cr_expect(strstr(raw_details(&s), "authorization") != NULL ||
                      strstr(raw_details(&s), "unknown") != NULL,
                  "header '%s': %s", bad[i], raw_details(&s));
        raw_abort(&s);
    }
    raw_authorization = NULL;
    /* The environment variable works like td_options.token. */
    setenv("TENSORD_TOKEN", bob, 1);
    td_context *ctx;
    cr_assert_eq(try_connect("tensord", NULL, &ctx), TD_OK, "%s", td_connect_error());
    expect_works(ctx);
    td_close(ctx);
    unsetenv("TENSORD_TOKEN");
}

Test(tokens, revoked_after_sighup, .init = start_tokens, .fini = cleanup, .timeout = 60)
{
    td_context *a = connect_as(alice);
    expect_works(a);
    td_close(a);
    /* Keep only bob's line (the second), then SIGHUP. */
    char cmd[800];
    snprintf(cmd, sizeof cmd, "sed -i '/ alice/d' '%s'", tokens);
    run_ok(cmd);
    cr_assert_eq(kill(srv.pid, SIGHUP), 0);
    td_options o;
    memset(&o, 0, sizeof o);
    o.token = alice;
    td_status st = TD_OK;
    for (int i = 0; i < 50; i++) { /* the reload is asynchronous */
        td_context *ctx;
        st = try_connect("tensord", &o, &ctx);
        if (st != TD_OK) break;
        td_close(ctx);
        usleep(100000);
    }
    cr_expect_eq(st, TD_EUNAUTHENTICATED, "%s: %s", td_status_name(st), td_connect_error());
    td_context *b = connect_as(bob);
    expect_works(b);
    td_close(b);
}

Test(tokens, quotas_fail_the_request_only, .init = start_tokens, .fini = cleanup,
     .timeout = 60)
{
    td_context *a1 = connect_as(alice), *a2 = connect_as(alice), *b = connect_as(bob);
    /* max_sessions=2: a third session of alice is refused, naming the quota. */
    td_options o;
    memset(&o, 0, sizeof o);
    o.token = alice;
    expect_connect_fails("tensord", &o, TD_EQUOTA, "max_sessions");
    /* max_tensor_bytes=32K: one 64 KiB tensor fails; the session goes on. */
    td_tensor *big = td_full(a1, TD_F32, 1, (int64_t[]){16384}, 1.0);
    cr_assert(big != NULL, "%s", td_last_error(a1));
    td_status st = td_fence(a1);
    cr_expect_eq(st, TD_EQUOTA, "%s: %s", td_status_name(st), td_last_error(a1));
    cr_expect(strstr(td_last_error(a1), "max_tensor_bytes") != NULL, "%s", td_last_error(a1));
    td_release(big);
    expect_works(a1);
    /* max_bytes=64K over both sessions of alice: 24 + 24 KiB fit, another 24 KiB does not. */
    td_tensor *x = td_full(a1, TD_F32, 1, (int64_t[]){6144}, 1.0);
    td_tensor *y = td_full(a2, TD_F32, 1, (int64_t[]){6144}, 1.0);
    cr_assert(x && y);
    cr_expect_eq(td_fence(a1), TD_OK, "%s", td_last_error(a1));
    cr_expect_eq(td_fence(a2), TD_OK, "%s", td_last_error(a2));
    td_tensor *z = td_full(a2, TD_F32, 1, (int64_t[]){6144}, 1.0);
    cr_assert(z != NULL);
    st = td_fence(a2);
    cr_expect_eq(st, TD_EQUOTA, "%s: %s", td_status_name(st), td_last_error(a2));
    cr_expect(strstr(td_last_error(a2), "max_bytes") != NULL, "%s", td_last_error(a2));
    /* Bob is not affected: 1 MiB works while alice is at her limit. */
    td_tensor *bb = td_full(b, TD_F32, 1, (int64_t[]){262144}, 3.0);
    cr_assert(bb != NULL, "%s", td_last_error(b));
    double v;
    cr_expect_eq(td_read_scalar(td_sum(bb, 0, NULL, false), &v), TD_OK, "%s", td_last_error(b));
    expect_works(b);
    /* Releasing gives the bytes back. */
    td_release(z);
    td_release(x);
    cr_expect_eq(td_fence(a1), TD_OK, "%s", td_last_error(a1));
    z = td_full(a2, TD_F32, 1, (int64_t[]){6144}, 1.0);
    cr_expect_eq(td_fence(a2), TD_OK, "%s", td_last_error(a2));
    td_close(a1);
    td_close(a2);
    td_close(b);
}

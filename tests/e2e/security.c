/* e2e/security.c — TLS and mutual TLS, bearer tokens, tenants and their quotas, and the
 * listen-address rules, against a real tensord (issue 5's Tests section).
 *
 * Certificates are made at test time by make_certs.sh (no private key is checked in);
 * tokens with `tensorctl token new`, exactly as an operator would.
 */
#include "raw_session.h"
#include "server_fixture.h"
#include "tensord.h"

#include "common/sha256.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
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

Test(tls, plaintext_client_fails_clearly, .init = start_mtls, .fini = cleanup, .timeout = 90)
{
    expect_connect_fails("tensord", NULL, TD_EUNAVAILABLE, "TLS");
}

Test(tls, wrong_ca_fails, .init = start_mtls, .fini = cleanup, .timeout = 90)
{
    td_options o = mtls_opts("other-ca.pem", "client.pem", "client.key");
    expect_connect_fails("tensords", &o, TD_EUNAVAILABLE, "TLS handshake with 127.0.0.1");
}

Test(tls, mtls_without_client_cert_fails, .init = start_mtls, .fini = cleanup, .timeout = 90)
{
    td_options o = mtls_opts("ca.pem", NULL, NULL);
    expect_connect_fails("tensords", &o, TD_EUNAVAILABLE, "client certificate");
}

Test(tls, client_cert_from_other_ca_fails, .init = start_mtls, .fini = cleanup, .timeout = 90)
{
    td_options o = mtls_opts("ca.pem", "other-client.pem", "other-client.key");
    expect_connect_fails("tensords", &o, TD_EUNAVAILABLE, "TLS handshake");
}

Test(tls, valid_mtls_works_with_cn_tenant, .init = start_mtls, .fini = cleanup, .timeout = 90)
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

Test(tls, server_only_tls_works, .init = start_tls_only, .fini = cleanup, .timeout = 90)
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
    snprintf(cmd, sizeof cmd, "timeout 10 '%s' %s 2>&1", td_test_tensord_bin(), args);
    FILE *p = popen(cmd, "r");
    cr_assert(p != NULL);
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = '\0';
    int rc = pclose(p);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

Test(tls, bad_files_refused_at_startup, .init = make_dir, .fini = cleanup, .timeout = 90)
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

Test(listen, any_address_without_tls_refused, .timeout = 90)
{
    char out[4096];
    cr_expect_eq(run_tensord("--listen 0.0.0.0:0", out, sizeof out), 2, "%s", out);
    cr_expect(strstr(out, "refusing to listen on 0.0.0.0:0 without TLS") != NULL, "%s", out);
}

/* A path no client can reach (libtensord refuses ',' in a unix path: gRPC reads it as an
 * address separator) is refused at start, not served. */
Test(listen, unix_path_with_comma_refused, .timeout = 90)
{
    char out[4096];
    unlink("/tmp/td-test,comma.sock"); /* a leftover of an older tensord that served it */
    cr_expect_eq(run_tensord("--listen unix:/tmp/td-test,comma.sock", out, sizeof out), 2, "%s",
                 out);
    cr_expect(strstr(out, "listen address 'unix:/tmp/td-test,comma.sock': the socket path "
                          "contains ','") != NULL,
              "%s", out);
    cr_expect(access("/tmp/td-test,comma.sock", F_OK) != 0, "a socket was created");
}

Test(listen, any_address_with_insecure_starts_and_warns, .timeout = 90)
{
    char out[4096];
    /* timeout(1) sends SIGTERM after 2 s: a clean stop (exit 0 is reported as 124). */
    char cmd[600];
    snprintf(cmd, sizeof cmd, "timeout 2 '%s' --listen 0.0.0.0:0 --insecure 2>&1",
             td_test_tensord_bin());
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
     .timeout = 90)
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

Test(tokens, revoked_after_sighup, .init = start_tokens, .fini = cleanup, .timeout = 90)
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
     .timeout = 90)
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

/* ---- tenant isolation: tensors, blobs and graphs ---- */

static void start_two_tenants(void)
{
    make_dir();
    token_new("alice", "", alice, sizeof alice);
    token_new("bob", "", bob, sizeof bob);
    const char *args[] = {"--tokens-file", tokens, NULL};
    start(args);
}

static uint64_t bytes_sent(td_context *ctx)
{
    td_stats s;
    td_get_stats(ctx, &s);
    return s.bytes_sent;
}

/* Upload n bytes (over blob_min_bytes: the blob path) and return the payload bytes sent. */
static td_tensor *upload(td_context *ctx, const uint8_t *data, size_t n, uint64_t *sent)
{
    uint64_t before = bytes_sent(ctx);
    td_tensor *t = td_from_host(ctx, TD_U8, 1, (int64_t[]){(int64_t)n}, data);
    cr_assert_not_null(t, "%s", td_last_error(ctx));
    cr_assert_eq(td_fence(ctx), TD_OK, "%s", td_last_error(ctx));
    *sent = bytes_sent(ctx) - before;
    return t;
}

/* y = x + w, w (captured by reference) = [k, k, k, k]. */
static td_graph *add_graph(td_context *ctx, td_tensor *w)
{
    cr_assert_eq(td_graph_begin(ctx), TD_OK, "%s", td_last_error(ctx));
    td_tensor *x = td_graph_input(ctx, "x", TD_F32, 1, (int64_t[]){4});
    td_tensor *y = td_add(x, w);
    cr_assert_eq(td_graph_output(ctx, "y", y), TD_OK, "%s", td_last_error(ctx));
    td_graph *g = NULL;
    cr_assert_eq(td_graph_end(ctx, &g), TD_OK, "%s", td_last_error(ctx));
    td_release(x);
    td_release(y);
    return g;
}

static float run_add(td_context *ctx, td_graph *g)
{
    td_tensor *x = td_full(ctx, TD_F32, 1, (int64_t[]){4}, 1.0), *y = NULL;
    cr_assert_eq(td_graph_run(g, 1, NULL, &x, 1, NULL, &y), TD_OK, "%s", td_last_error(ctx));
    float v[4];
    cr_assert_eq(td_read(y, v, sizeof v), TD_OK, "%s", td_last_error(ctx));
    td_release(x);
    td_release(y);
    return v[0];
}

static void hex_to_bytes(const char *hex, uint8_t *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned v = 0;
        cr_assert_eq(sscanf(hex + 2 * i, "%2x", &v), 1, "bad hex id '%s'", hex);
        out[i] = (uint8_t)v;
    }
}

/* A raw session of the tenant owning `token`; the reply to a GraphDefine of `id` without a
 * definition: whether the server said it knows the graph. */
static bool raw_graph_known(const char *token, const uint8_t id[32])
{
    char header[200];
    snprintf(header, sizeof header, "Bearer %s", token);
    raw_authorization = header;
    raw_session s;
    cr_assert(raw_open(&s, srv.addr, TD_PROTOCOL_MIN, TD_PROTOCOL_MAX, "cpu"), "%s",
              raw_details(&s));
    raw_authorization = NULL;
    Tensord__V1__GraphDefine gd = TENSORD__V1__GRAPH_DEFINE__INIT;
    gd.graph_id = (ProtobufCBinaryData){.len = 32, .data = (uint8_t *)(uintptr_t)id};
    Tensord__V1__ClientMessage cm = TENSORD__V1__CLIENT_MESSAGE__INIT;
    cm.body_case = TENSORD__V1__CLIENT_MESSAGE__BODY_GRAPH_DEFINE;
    cm.graph_define = &gd;
    uint64_t seq = 0;
    cr_assert(raw_send(&s, &cm, NULL, 0, &seq));
    raw_msg m;
    cr_assert_eq(raw_recv(&s, &m, 10000), 1, "no GraphReady");
    cr_assert_eq(m.kind, TENSORD__V1__SERVER_MESSAGE__BODY_GRAPH_READY, "kind %d: %s", m.kind,
                 m.message);
    cr_assert_eq(m.seq, seq);
    bool known = m.known;
    raw_msg_fini(&m);
    /* Running the graph without having defined it fails as for an unknown id, and its
     * output is poisoned with that message. */
    Tensord__V1__GraphRun gr = TENSORD__V1__GRAPH_RUN__INIT;
    uint64_t in = 1, out = 2;
    td__op full = raw_op_full(in, TD_F32, 1, (int64_t[]){4}, 1.0);
    raw_send_ops(&s, &full, 1);
    gr.graph_id = gd.graph_id;
    gr.n_inputs = 1;
    gr.inputs = &in;
    gr.n_outputs = 1;
    gr.outputs = &out;
    cm = (Tensord__V1__ClientMessage)TENSORD__V1__CLIENT_MESSAGE__INIT;
    cm.body_case = TENSORD__V1__CLIENT_MESSAGE__BODY_GRAPH_RUN;
    cm.graph_run = &gr;
    if (!known) {
        cr_assert(raw_send(&s, &cm, NULL, 0, &seq));
        cr_assert_eq(raw_recv(&s, &m, 10000), 1);
        cr_expect_eq(m.kind, TENSORD__V1__SERVER_MESSAGE__BODY_FAILURE);
        cr_expect_eq(m.status, TD_ENOTFOUND, "%u: %s", m.status, m.message);
        cr_expect(strstr(m.message, "not defined in this session") != NULL, "%s", m.message);
        raw_msg_fini(&m);
        seq = raw_send_read(&s, out, 0, 16);
        cr_assert_eq(raw_recv(&s, &m, 10000), 1);
        cr_expect_eq(m.kind, TENSORD__V1__SERVER_MESSAGE__BODY_FAILURE);
        cr_expect(strstr(m.message, "not defined in this session") != NULL, "%s", m.message);
        raw_msg_fini(&m);
    }
    cr_expect_eq(raw_close(&s), GRPC_STATUS_OK, "%s", raw_details(&s));
    return known;
}

Test(tenants, cannot_see_each_others_tensors_blobs_or_graphs, .init = start_two_tenants,
     .fini = cleanup, .timeout = 90)
{
    td_context *a = connect_as(alice), *b = connect_as(bob), *a2 = connect_as(alice);
    /* Made first in each context, so that they get the same tensor id in each (below). */
    td_tensor *wa = td_full(a, TD_F32, 1, (int64_t[]){4}, 10.0);
    td_tensor *wb = td_full(b, TD_F32, 1, (int64_t[]){4}, 100.0);
    td_tensor *wa2 = td_full(a2, TD_F32, 1, (int64_t[]){4}, 1000.0);

    /* Blobs: 1 MiB + 3 bytes goes through the blob store (blob_min_bytes is 1 MiB). */
    size_t n = (1u << 20) + 3;
    uint8_t *w = malloc(n);
    for (size_t i = 0; i < n; i++) w[i] = (uint8_t)(i * 131 + 7);
    uint64_t sa, sb, sa2;
    td_tensor *ta = upload(a, w, n, &sa);
    cr_expect_eq(sa, n, "alice's first upload sent %llu bytes", (unsigned long long)sa);
    /* Bob offers the same hash: he must be told "absent" and send the bytes himself. */
    td_tensor *tb = upload(b, w, n, &sb);
    cr_expect_eq(sb, n, "bob sent %llu bytes: he learnt that alice holds this blob",
                 (unsigned long long)sb);
    /* Control: another session of alice's does hit the store. */
    td_tensor *ta2 = upload(a2, w, n, &sa2);
    cr_expect_eq(sa2, 0, "alice's second session sent %llu bytes", (unsigned long long)sa2);
    uint8_t *got = malloc(n);
    cr_assert_eq(td_read(tb, got, n), TD_OK, "%s", td_last_error(b));
    cr_expect(memcmp(got, w, n) == 0, "bob's tensor holds what he uploaded");
    free(got);
    /* The raw HasBlobs answer to bob for a hash only alice ever uploaded: absent. */
    uint8_t *only_a = malloc(n);
    memcpy(only_a, w, n);
    only_a[0] ^= 0xff;
    uint64_t s_only;
    /* Uploaded twice: the first upload leaves a fingerprint candidate, the second promotes
     * it into the store under its SHA-256 (server/candidates.h). */
    td_release(upload(a, only_a, n, &s_only));
    td_tensor *t_only = upload(a, only_a, n, &s_only);
    cr_expect_eq(s_only, 0, "alice's repeat sent %llu bytes", (unsigned long long)s_only);
    uint8_t h[32];
    cr_assert(td__sha256(only_a, n, h));
    for (int who = 0; who < 2; who++) {
        char header[200];
        snprintf(header, sizeof header, "Bearer %s", who == 0 ? bob : alice);
        raw_authorization = header;
        raw_session s;
        cr_assert(raw_open(&s, srv.addr, TD_PROTOCOL_MIN, TD_PROTOCOL_MAX, "cpu"), "%s",
                  raw_details(&s));
        raw_authorization = NULL;
        ProtobufCBinaryData hb1 = {.len = 32, .data = h};
        Tensord__V1__HasBlobs hb = TENSORD__V1__HAS_BLOBS__INIT;
        hb.n_sha256 = 1;
        hb.sha256 = &hb1;
        Tensord__V1__ClientMessage cm = TENSORD__V1__CLIENT_MESSAGE__INIT;
        cm.body_case = TENSORD__V1__CLIENT_MESSAGE__BODY_HAS_BLOBS;
        cm.has_blobs = &hb;
        uint64_t seq;
        cr_assert(raw_send(&s, &cm, NULL, 0, &seq));
        raw_msg m;
        cr_assert_eq(raw_recv(&s, &m, 10000), 1);
        cr_assert_eq(m.kind, TENSORD__V1__SERVER_MESSAGE__BODY_BLOB_STATUS, "%s", m.message);
        cr_expect_eq(m.n_present, 1);
        cr_expect_eq(m.present & 1, who == 0 ? 0u : 1u, "%s sees alice's blob: %d",
                     who == 0 ? "bob" : "alice", (int)(m.present & 1));
        raw_msg_fini(&m);
        cr_expect_eq(raw_close(&s), GRPC_STATUS_OK, "%s", raw_details(&s));
    }
    td_release(t_only);
    free(only_a);

    /* Graphs: the same definition (y = x + captured tensor) in both tenants. Each context
     * numbers its tensors alike, so the captured id and with it the graph id are equal. */
    td_graph *ga = add_graph(a, wa);
    cr_expect_eq(run_add(a, ga), 11.0f);
    td_graph_info ia, ib, ia2;
    td_graph_get_info(ga, &ia);
    cr_expect_eq(ia.definitions_sent, 1);
    uint8_t id[32];
    hex_to_bytes(ia.id, id, sizeof id);
    /* Bob asking for alice's graph id is told it is unknown, and cannot run it. */
    cr_expect(!raw_graph_known(bob, id), "bob learnt that alice defined a graph");
    cr_expect(raw_graph_known(alice, id), "control: alice's own tenant finds it cached");
    td_graph *gb = add_graph(b, wb);
    td_graph_get_info(gb, &ib);
    /* Bob's run binds bob's captured tensor, never alice's: he had to send the definition. */
    cr_expect_eq(run_add(b, gb), 101.0f, "bob's graph read someone else's tensor");
    td_graph_get_info(gb, &ib);
    cr_assert_str_eq(ia.id, ib.id, "the same graph in both tenants");
    cr_expect_eq(ib.definitions_sent, 1, "bob was spared the definition: a cross-tenant hit");
    td_graph *ga2 = add_graph(a2, wa2);
    td_graph_get_info(ga2, &ia2);
    cr_expect_eq(run_add(a2, ga2), 1001.0f);
    td_graph_get_info(ga2, &ia2);
    cr_assert_str_eq(ia.id, ia2.id);
    cr_expect_eq(ia2.definitions_sent, 0, "control: alice's second session hits the cache");

    /* Tensors: bob cannot read, write or use an id that only alice's session holds. */
    char header[200];
    snprintf(header, sizeof header, "Bearer %s", alice);
    raw_authorization = header;
    raw_session ra, rb;
    cr_assert(raw_open(&ra, srv.addr, TD_PROTOCOL_MIN, TD_PROTOCOL_MAX, "cpu"));
    snprintf(header, sizeof header, "Bearer %s", bob);
    cr_assert(raw_open(&rb, srv.addr, TD_PROTOCOL_MIN, TD_PROTOCOL_MAX, "cpu"));
    raw_authorization = NULL;
    td__op full = raw_op_full(77, TD_F32, 1, (int64_t[]){4}, 5.0);
    raw_send_ops(&ra, &full, 1);
    raw_msg m;
    uint64_t seq = raw_send_fence(&ra);
    cr_assert_eq(raw_recv(&ra, &m, 10000), 1);
    cr_assert_eq(m.kind, TENSORD__V1__SERVER_MESSAGE__BODY_FENCE, "%s", m.message);
    raw_msg_fini(&m);
    seq = raw_send_read(&rb, 77, 0, 16);
    cr_assert_eq(raw_recv(&rb, &m, 10000), 1);
    cr_expect_eq(m.kind, TENSORD__V1__SERVER_MESSAGE__BODY_FAILURE);
    cr_expect_eq(m.seq, seq);
    cr_expect_eq(m.status, TD_ENOTFOUND, "%u: %s", m.status, m.message);
    raw_msg_fini(&m);
    td__op add = raw_op_binary(TD_OP_ADD, 78, 77, 77);
    seq = raw_send_ops(&rb, &add, 1);
    cr_assert_eq(raw_recv(&rb, &m, 10000), 1);
    cr_expect_eq(m.kind, TENSORD__V1__SERVER_MESSAGE__BODY_FAILURE);
    cr_expect_eq(m.status, TD_ENOTFOUND, "%u: %s", m.status, m.message);
    raw_msg_fini(&m);
    cr_expect_eq(raw_close(&ra), GRPC_STATUS_OK);
    cr_expect_eq(raw_close(&rb), GRPC_STATUS_OK);

    td_graph_destroy(ga);
    td_graph_destroy(gb);
    td_graph_destroy(ga2);
    td_release(wa);
    td_release(wb);
    td_release(wa2);
    td_release(ta);
    td_release(tb);
    td_release(ta2);
    td_close(a);
    td_close(a2);
    td_close(b);
    free(w);
}

/* ---- max_queued_batches ---- */

typedef struct bob_loop {
    const char *token;
    atomic_int stop;
    int rounds, errors;
    char first_error[300];
} bob_loop;

/* The other tenant computes (op, read) until told to stop. */
static void *bob_computes(void *arg)
{
    bob_loop *l = arg;
    td_options o;
    memset(&o, 0, sizeof o);
    o.token = l->token;
    char uri[600];
    snprintf(uri, sizeof uri, "tensord://127.0.0.1:%d/cpu", srv.port);
    td_context *ctx = NULL;
    if (td_connect(uri, &o, &ctx) != TD_OK) {
        l->errors++;
        snprintf(l->first_error, sizeof l->first_error, "connect: %s", td_connect_error());
        return NULL;
    }
    while (!atomic_load(&l->stop) || l->rounds < 20) {
        td_tensor *x = td_full(ctx, TD_F32, 2, (int64_t[]){64, 64}, 1.0);
        td_tensor *y = td_matmul(x, x);
        static float v[64 * 64]; /* one thread */
        if (y == NULL || td_read(y, v, sizeof v) != TD_OK || v[0] != 64.0f) {
            if (l->errors++ == 0)
                snprintf(l->first_error, sizeof l->first_error, "round %d: %s", l->rounds,
                         td_last_error(ctx));
        }
        td_release(x);
        td_release(y);
        l->rounds++;
    }
    td_close(ctx);
    return NULL;
}

static void start_queued_quota(void)
{
    make_dir();
    token_new("alice", "--max-queued-batches 2", alice, sizeof alice);
    token_new("bob", "", bob, sizeof bob);
    const char *args[] = {"--tokens-file", tokens, NULL};
    start(args);
}

#define FLOOD 40

/* One of several sessions of one tenant sharing its queued-batch slots: a chain of
 * `ops` adds of 1, one op per batch, then a read. */
typedef struct chain_arg {
    const char *token;
    int ops;
    float got;
    char error[300];
} chain_arg;

static void *chain_one_op_per_batch(void *arg)
{
    chain_arg *a = arg;
    td_options o;
    memset(&o, 0, sizeof o);
    o.token = a->token;
    o.batch_max_ops = 1;
    char uri[600];
    snprintf(uri, sizeof uri, "tensord://127.0.0.1:%d/cpu", srv.port);
    td_context *ctx = NULL;
    if (td_connect(uri, &o, &ctx) != TD_OK) {
        snprintf(a->error, sizeof a->error, "connect: %s", td_connect_error());
        return NULL;
    }
    td_tensor *x = td_full(ctx, TD_F32, 1, (int64_t[]){16}, 0.0);
    for (int i = 0; i < a->ops && x != NULL; i++) {
        td_tensor *y = td_add_scalar(x, 1.0);
        td_release(x);
        x = y;
    }
    float out[16] = {0};
    if (x == NULL || td_read(x, out, sizeof out) != TD_OK)
        snprintf(a->error, sizeof a->error, "%s", td_last_error(ctx));
    a->got = out[15];
    td_release(x);
    td_close(ctx);
    return NULL;
}

/* Backpressure (issue 16, item 6): a tenant past max_queued_batches is slowed down, never
 * failed. Alice (at most 2 batches waiting) sends 20 times that without reading; the
 * server stops reading her stream while 2 wait, every batch runs, each output holds its
 * result, and no Failure comes back. Then: a client that aborts while its batches wait, a
 * 2000-op chain of one-op batches, and four such chains at once, all complete. */
Test(tokens, queued_batches_quota_slows_the_sender, .init = start_queued_quota,
     .fini = cleanup, .timeout = 90)
{
    bob_loop l;
    memset(&l, 0, sizeof l);
    l.token = bob;
    atomic_init(&l.stop, 0);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, bob_computes, &l), 0);

    char header[200];
    snprintf(header, sizeof header, "Bearer %s", alice);
    raw_authorization = header;
    raw_session s;
    cr_assert(raw_open(&s, srv.addr, TD_PROTOCOL_MIN, TD_PROTOCOL_MAX, "cpu"), "%s",
              raw_details(&s));
    raw_authorization = NULL;
    for (int i = 0; i < FLOOD; i++) {
        td__op ops[2] = {raw_op_full(1000 + 2 * (uint64_t)i, TD_F32, 2,
                                     (int64_t[]){512, 512}, 1.0),
                         raw_op_binary(TD_OP_MATMUL, 1001 + 2 * (uint64_t)i,
                                       1000 + 2 * (uint64_t)i, 1000 + 2 * (uint64_t)i)};
        cr_assert_neq(raw_send_ops(&s, ops, 2), 0);
    }
    uint64_t fence = raw_send_fence(&s);
    raw_msg m;
    cr_assert_eq(raw_recv(&s, &m, 60000), 1, "no reply before the fence");
    cr_expect_eq(m.kind, TENSORD__V1__SERVER_MESSAGE__BODY_FENCE, "seq %llu: %u: %s",
                 (unsigned long long)m.seq, m.status, m.message ? m.message : "");
    cr_expect_eq(m.seq, fence);
    raw_msg_fini(&m);
    /* Every batch ran: each output holds 512 (a 512x512 matmul of ones). */
    for (int i = 0; i < FLOOD; i++) {
        uint64_t seq = raw_send_read(&s, 1001 + 2 * (uint64_t)i, 0, 16);
        cr_assert_eq(raw_recv(&s, &m, 30000), 1);
        cr_expect_eq(m.seq, seq);
        cr_expect_eq(m.kind, TENSORD__V1__SERVER_MESSAGE__BODY_READ, "batch %d: %s", i,
                     m.message ? m.message : "");
        float v = 0;
        if (m.payload_len >= sizeof v) memcpy(&v, m.payload, sizeof v);
        cr_expect_eq(v, 512.0f, "batch %d", i);
        raw_msg_fini(&m);
    }
    cr_expect_eq(raw_close(&s), GRPC_STATUS_OK, "%s", raw_details(&s));

    /* A client that goes away while its batches wait leaves no charge behind: the chain
     * below would wait forever for queued-batch slots that never come back. */
    raw_authorization = header;
    cr_assert(raw_open(&s, srv.addr, TD_PROTOCOL_MIN, TD_PROTOCOL_MAX, "cpu"), "%s",
              raw_details(&s));
    raw_authorization = NULL;
    for (int i = 0; i < FLOOD; i++) {
        td__op ops[2] = {raw_op_full(1000 + 2 * (uint64_t)i, TD_F32, 2,
                                     (int64_t[]){512, 512}, 1.0),
                         raw_op_binary(TD_OP_MATMUL, 1001 + 2 * (uint64_t)i,
                                       1000 + 2 * (uint64_t)i, 1000 + 2 * (uint64_t)i)};
        cr_assert_neq(raw_send_ops(&s, ops, 2), 0);
    }
    raw_abort(&s);

    /* Through libtensord: a 2000-op chain sent one op per batch (1000 times the limit)
     * completes with the right value (the report: such a chain was poisoned). */
    td_options o;
    memset(&o, 0, sizeof o);
    o.token = alice;
    o.batch_max_ops = 1;
    char uri[600];
    snprintf(uri, sizeof uri, "tensord://127.0.0.1:%d/cpu", srv.port);
    td_context *ctx = NULL;
    cr_assert_eq(td_connect(uri, &o, &ctx), TD_OK, "%s", td_connect_error());
    td_tensor *x = td_full(ctx, TD_F32, 1, (int64_t[]){16}, 0.0);
    for (int i = 0; i < 2000 && x != NULL; i++) {
        td_tensor *y = td_add_scalar(x, 1.0);
        td_release(x);
        x = y;
    }
    float out[16];
    cr_assert(x != NULL && td_read(x, out, sizeof out) == TD_OK, "%s", td_last_error(ctx));
    cr_expect_eq(out[0], 2000.0f);
    cr_expect_eq(out[15], 2000.0f);
    td_release(x);
    td_close(ctx);

    /* Four sessions of alice at once share her 2 slots: each chain completes. */
    chain_arg ca[4];
    pthread_t ct[4];
    for (int i = 0; i < 4; i++) {
        memset(&ca[i], 0, sizeof ca[i]);
        ca[i].token = alice;
        ca[i].ops = 300 + 50 * i;
        cr_assert_eq(pthread_create(&ct[i], NULL, chain_one_op_per_batch, &ca[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(ct[i], NULL);
        cr_expect_eq(ca[i].error[0], '\0', "session %d: %s", i, ca[i].error);
        cr_expect_eq(ca[i].got, (float)ca[i].ops, "session %d", i);
    }

    /* Bob computed throughout, without a single error. */
    atomic_store(&l.stop, 1);
    pthread_join(th, NULL);
    cr_expect_eq(l.errors, 0, "bob: %d errors, first: %s", l.errors, l.first_error);
    cr_expect_geq(l.rounds, 20);
}

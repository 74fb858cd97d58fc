/* hostile/blobs.c — fingerprint offers from clients that lie (server/candidates.h).
 *
 * A fingerprint is a hint the server never trusts: a raw client that keeps bytes X under the
 * fingerprint of other bytes Y must not make an honest client's upload of Y read back X;
 * another tenant's fingerprint (or SHA-256) is absent; malformed fingerprint messages get
 * TD_EPROTO and the session goes on; the memory candidates hold is bounded and given back
 * when the tenant's quota needs it. */
#include "common/fingerprint.h"
#include "common/sha256.h"
#include "engine/op.h"
#include "raw_session.h"
#include "server_fixture.h"
#include "suite_fixture.h"
#include "tensord.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHUNK ((size_t)1 << 20)

static char dir[256], tokens[300], alice[128], bob[128];

/* stop, and remove the tokens directory a tenant test made */
static void stop_and_clean(void)
{
    stop();
    if (dir[0] != '\0') {
        char cmd[400];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        cr_expect_eq(system(cmd), 0);
        dir[0] = '\0';
    }
}

static void token_new(const char *tenant, char *out, size_t cap)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "'%s' token new --tenant %s --tokens-file '%s'",
             getenv("TENSORCTL_BIN"), tenant, tokens);
    FILE *p = popen(cmd, "r");
    cr_assert(p != NULL);
    cr_assert(fgets(out, (int)cap, p) != NULL, "no token from '%s'", cmd);
    cr_assert_eq(pclose(p), 0);
    out[strcspn(out, "\n")] = '\0';
}

static void start_two_tenants(void)
{
    snprintf(dir, sizeof dir, "/tmp/td-hblobs-XXXXXX");
    cr_assert(mkdtemp(dir) != NULL);
    snprintf(tokens, sizeof tokens, "%s/tokens", dir);
    token_new("alice", alice, sizeof alice);
    token_new("bob", bob, sizeof bob);
    const char *args[] = {"--tokens-file", tokens, NULL};
    start_with(args);
}

static void start_small_tenants(void)
{
    const char *args[] = {"--max-tenant-bytes", "12M", NULL};
    start_with(args);
}

static td_context *connect_tok(const char *token)
{
    char uri[600];
    td_test_server_uri(&srv, "cpu", uri, sizeof uri);
    td_options o;
    memset(&o, 0, sizeof o);
    o.token = token;
    td_context *ctx = NULL;
    td_status st = td_connect(uri, &o, &ctx);
    cr_assert_eq(st, TD_OK, "td_connect(%s): %s", uri, td_connect_error());
    return ctx;
}

static void fill(uint8_t *p, size_t n, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p[i] = (uint8_t)x;
    }
}

static uint64_t sent(td_context *ctx)
{
    td_stats s;
    td_get_stats(ctx, &s);
    return s.bytes_sent;
}

static td_tensor *upload(td_context *ctx, const uint8_t *data, size_t n, uint64_t *bytes)
{
    uint64_t before = sent(ctx);
    td_tensor *t = td_from_host(ctx, TD_U8, 1, (int64_t[]){(int64_t)n}, data);
    cr_assert_not_null(t, "%s", td_last_error(ctx));
    cr_assert_eq(td_fence(ctx), TD_OK, "%s", td_last_error(ctx));
    *bytes = sent(ctx) - before;
    return t;
}

static void check_contents(td_context *ctx, td_tensor *t, const uint8_t *want, size_t n)
{
    uint8_t *got = malloc(n);
    cr_assert_eq(td_read(t, got, n), TD_OK, "%s", td_last_error(ctx));
    cr_expect(memcmp(got, want, n) == 0, "tensor contents differ from what was uploaded");
    free(got);
}

static void open_raw_token(raw_session *s, const char *token)
{
    char header[200];
    if (token != NULL) {
        snprintf(header, sizeof header, "Bearer %s", token);
        raw_authorization = header;
    }
    bool ok = raw_open(s, srv.addr, TD_PROTOCOL_MIN, TD_PROTOCOL_MAX, "cpu");
    raw_authorization = NULL;
    cr_assert(ok, "cannot open a raw session: %s", raw_details(s));
}

/* Send a message and wait for its answer: 1 and *m for a reply, the test fails otherwise.
 * Fire-and-forget messages are followed by a fence: the Failure, if any, comes first. */
static void expect_failure(raw_session *s, Tensord__V1__ClientMessage *cm, uint32_t status,
                           const char *needle)
{
    uint64_t seq;
    cr_assert(raw_send(s, cm, NULL, 0, &seq));
    uint64_t fence = raw_send_fence(s);
    bool failed = false;
    for (;;) {
        raw_msg m;
        cr_assert_eq(raw_recv(s, &m, 10000), 1, "no reply");
        if (m.seq == seq && m.kind == TENSORD__V1__SERVER_MESSAGE__BODY_FAILURE) {
            failed = true;
            cr_expect_eq(m.status, status, "status %u: %s", m.status, m.message);
            cr_expect(strstr(m.message, needle) != NULL, "message '%s' lacks '%s'", m.message,
                      needle);
        }
        bool done = m.seq == fence;
        raw_msg_fini(&m);
        if (done) break;
    }
    cr_expect(failed, "no Failure for seq %llu", (unsigned long long)seq);
}

/* Send HasBlobs with the hash sha (NULL: none) and the n_fps fingerprints that lie one after
 * another at fps; its seq. */
static uint64_t send_has_blobs_n(raw_session *s, const uint8_t *sha, const uint8_t *fps,
                                 size_t n_fps)
{
    ProtobufCBinaryData h = {.len = TD_SHA256_BYTES, .data = (uint8_t *)(uintptr_t)sha};
    ProtobufCBinaryData f[8];
    cr_assert_leq(n_fps, sizeof f / sizeof f[0]);
    for (size_t i = 0; i < n_fps; i++)
        f[i] = (ProtobufCBinaryData){.len = TD_FINGERPRINT_LEN, .data = (uint8_t *)(uintptr_t)(fps + i * TD_FINGERPRINT_LEN)};
    Tensord__V1__HasBlobs hb = TENSORD__V1__HAS_BLOBS__INIT;
    if (sha != NULL) {
        hb.n_sha256 = 1;
        hb.sha256 = &h;
    }
    hb.n_fingerprint = n_fps;
    hb.fingerprint = n_fps > 0 ? f : NULL;
    Tensord__V1__ClientMessage cm = TENSORD__V1__CLIENT_MESSAGE__INIT;
    cm.body_case = TENSORD__V1__CLIENT_MESSAGE__BODY_HAS_BLOBS;
    cm.has_blobs = &hb;
    uint64_t seq;
    cr_assert(raw_send(s, &cm, NULL, 0, &seq));
    return seq;
}

/* Send HasBlobs with the hash sha and the fingerprint fp (either may be NULL); its seq. */
static uint64_t send_has_blobs(raw_session *s, const uint8_t *sha, const uint8_t *fp)
{
    return send_has_blobs_n(s, sha, fp, fp != NULL);
}

/* HasBlobs with the hash sha (NULL: none) and the n_fps fingerprints at fps (as
 * send_has_blobs_n); the present bits (bit i: answer i, the hash first). */
static uint64_t has_blobs_n(raw_session *s, const uint8_t *sha, const uint8_t *fps,
                            size_t n_fps)
{
    uint64_t seq = send_has_blobs_n(s, sha, fps, n_fps);
    raw_msg m;
    cr_assert_eq(raw_recv(s, &m, 30000), 1);
    cr_assert_eq(m.kind, TENSORD__V1__SERVER_MESSAGE__BODY_BLOB_STATUS, "%s", m.message);
    cr_assert_eq(m.seq, seq);
    cr_expect_eq(m.n_present, (size_t)(sha != NULL) + n_fps);
    uint64_t bits = m.present;
    raw_msg_fini(&m);
    return bits;
}

/* HasBlobs with the hash sha and the fingerprint fp (either may be NULL); the present bits. */
static uint64_t has_blobs(raw_session *s, const uint8_t *sha, const uint8_t *fp)
{
    return has_blobs_n(s, sha, fp, fp != NULL);
}

/* Tensor `id` u8[n] holding `data`, written over the raw session, kept as a candidate
 * under `fp` (whatever its real fingerprint is). */
static void raw_candidate(raw_session *s, uint64_t id, const uint8_t *data, size_t n,
                          const uint8_t *fp)
{
    td__op op = raw_op_full(id, TD_U8, 1, (int64_t[]){(int64_t)n}, 0.0);
    cr_assert_neq(raw_send_ops(s, &op, 1), 0);
    for (size_t off = 0; off < n; off += CHUNK)
        cr_assert_neq(raw_send_write(s, id, off, data + off, n - off < CHUNK ? n - off : CHUNK),
                      0);
    ProtobufCBinaryData f = {.len = TD_FINGERPRINT_LEN, .data = (uint8_t *)(uintptr_t)fp};
    Tensord__V1__StoreBlob sb = TENSORD__V1__STORE_BLOB__INIT;
    sb.tensor = id;
    sb.fingerprint = f;
    Tensord__V1__ClientMessage cm = TENSORD__V1__CLIENT_MESSAGE__INIT;
    cm.body_case = TENSORD__V1__CLIENT_MESSAGE__BODY_STORE_BLOB;
    cm.store_blob = &sb;
    cr_assert(raw_send(s, &cm, NULL, 0, NULL));
    uint64_t fence = raw_send_fence(s);
    for (;;) {
        raw_msg m;
        cr_assert_eq(raw_recv(s, &m, 10000), 1);
        cr_expect_neq(m.kind, TENSORD__V1__SERVER_MESSAGE__BODY_FAILURE, "%s", m.message);
        bool done = m.seq == fence;
        raw_msg_fini(&m);
        if (done) break;
    }
}

/* X kept under Y's fingerprint: the honest upload of Y hits it, the server promotes X under
 * SHA-256(X), the honest client's SHA-256(Y) offer misses, Y is sent and read back as Y. */
Test(blobs, lying_fingerprint_never_serves_wrong_bytes, .init = start_tcp, .fini = stop_and_clean,
     .timeout = 180)
{
    size_t n = 3 * CHUNK + 5;
    uint8_t *x = malloc(n), *y = malloc(n), fpy[TD_FINGERPRINT_LEN], shx[TD_SHA256_BYTES];
    fill(x, n, 11);
    fill(y, n, 12);
    cr_assert(td__fingerprint(y, n, fpy));
    cr_assert(td__sha256(x, n, shx));
    raw_session s;
    open_raw_token(&s, NULL);
    raw_candidate(&s, 1, x, n, fpy);

    td_context *ctx = connect_tok(NULL);
    uint64_t b;
    td_tensor *t = upload(ctx, y, n, &b);
    cr_expect_eq(b, n, "the lying candidate saved %llu bytes", (unsigned long long)(n - b));
    check_contents(ctx, t, y, n);
    /* The liar's own bytes went into the store only under their own hash. */
    cr_expect_eq(has_blobs(&s, shx, NULL) & 1, 1u);
    td_tensor *t2 = upload(ctx, y, n, &b); /* y is the candidate now: its repeat is free */
    cr_expect_eq(b, 0, "repeat of y sent %llu", (unsigned long long)b);
    check_contents(ctx, t2, y, n);
    td_release(t);
    td_release(t2);
    td_close(ctx);
    cr_expect_eq(raw_close(&s), GRPC_STATUS_OK, "%s", raw_details(&s));
    free(x);
    free(y);
}

/* One HasBlobs naming six known fingerprints promotes the first four (TD_MAX_FP_PROMOTIONS)
 * and answers the rest absent: one message may not keep the device's worker hashing for
 * every other session (1024 promotions in one message held it 0.7 s). The candidates it did
 * not look at are still there for a later offer. */
Test(blobs, one_offer_promotes_at_most_four, .init = start_tcp, .fini = stop_and_clean,
     .timeout = 180)
{
    enum { N = 6 };
    size_t n = CHUNK + 3;
    uint8_t *d[N], fp[N][TD_FINGERPRINT_LEN];
    raw_session s;
    open_raw_token(&s, NULL);
    for (int i = 0; i < N; i++) {
        d[i] = malloc(n);
        fill(d[i], n, 100 + (uint64_t)i);
        cr_assert(td__fingerprint(d[i], n, fp[i]));
        raw_candidate(&s, 10 + (uint64_t)i, d[i], n, fp[i]);
    }
    uint64_t present = has_blobs_n(&s, NULL, fp[0], N);
    cr_expect_eq(present, 0xfu, "present bits %#llx, want 0xf (the first four)",
                 (unsigned long long)present);
    /* the fifth, not looked at, is still a candidate; the first is a blob now */
    cr_expect_eq(has_blobs(&s, NULL, fp[4]) & 1, 1u);
    uint8_t sh0[TD_SHA256_BYTES];
    cr_assert(td__sha256(d[0], n, sh0));
    cr_expect_eq(has_blobs(&s, sh0, NULL) & 1, 1u);
    cr_expect_eq(raw_close(&s), GRPC_STATUS_OK, "%s", raw_details(&s));
    for (int i = 0; i < N; i++) free(d[i]);
}

/* Alice's candidate and promoted blob are invisible to bob, by fingerprint and by hash; a
 * candidate bob plants under alice's fingerprint changes nothing for alice. */
Test(blobs, another_tenants_fingerprint_is_absent, .init = start_two_tenants, .fini = stop_and_clean,
     .timeout = 180)
{
    size_t n = 2 * CHUNK;
    uint8_t *w = malloc(n), *evil = malloc(n), fp[TD_FINGERPRINT_LEN], sha[TD_SHA256_BYTES];
    fill(w, n, 21);
    fill(evil, n, 22);
    cr_assert(td__fingerprint(w, n, fp));
    cr_assert(td__sha256(w, n, sha));
    td_context *a = connect_tok(alice);
    uint64_t b;
    td_release(upload(a, w, n, &b)); /* alice's candidate */
    cr_expect_eq(b, n);

    raw_session s;
    open_raw_token(&s, bob);
    cr_expect_eq(has_blobs(&s, NULL, fp), 0u, "bob hit alice's candidate");
    raw_candidate(&s, 7, evil, n, fp); /* bob's own candidate under alice's fingerprint */
    cr_expect_eq(has_blobs(&s, NULL, fp), 1u, "bob's own candidate should be found");

    td_tensor *ta = upload(a, w, n, &b); /* alice's repeat: her own candidate */
    cr_expect_eq(b, 0, "alice's repeat sent %llu", (unsigned long long)b);
    check_contents(a, ta, w, n);
    cr_expect_eq(has_blobs(&s, sha, NULL), 0u, "bob sees alice's promoted blob");
    /* Bob writing from alice's hash is refused. */
    ProtobufCBinaryData h = {.len = TD_SHA256_BYTES, .data = sha};
    Tensord__V1__WriteFromBlob wb = TENSORD__V1__WRITE_FROM_BLOB__INIT;
    wb.tensor = 7;
    wb.sha256 = h;
    Tensord__V1__ClientMessage cm = TENSORD__V1__CLIENT_MESSAGE__INIT;
    cm.body_case = TENSORD__V1__CLIENT_MESSAGE__BODY_WRITE_FROM_BLOB;
    cm.write_from_blob = &wb;
    expect_failure(&s, &cm, TD_ENOTFOUND, "not in the store");
    cr_expect_eq(raw_close(&s), GRPC_STATUS_OK, "%s", raw_details(&s));

    /* Bob's libtensord upload of alice's bytes is sent whole and holds them. */
    td_context *bc = connect_tok(bob);
    td_tensor *tb = upload(bc, w, n, &b);
    cr_expect_eq(b, n, "bob's upload sent %llu", (unsigned long long)b);
    check_contents(bc, tb, w, n);
    td_release(tb);
    td_close(bc);
    td_release(ta);
    td_close(a);
    free(w);
    free(evil);
}

Test(blobs, malformed_fingerprint_messages_are_refused, .init = start_tcp, .fini = stop_and_clean,
     .timeout = 180)
{
    raw_session s;
    open_raw_token(&s, NULL);
    uint8_t key[TD_SHA256_BYTES] = {1, 2, 3};
    ProtobufCBinaryData short_fp = {.len = TD_FINGERPRINT_LEN - 1, .data = key};
    ProtobufCBinaryData fp = {.len = TD_FINGERPRINT_LEN, .data = key};
    ProtobufCBinaryData sha = {.len = TD_SHA256_BYTES, .data = key};

    Tensord__V1__HasBlobs hb = TENSORD__V1__HAS_BLOBS__INIT;
    hb.n_fingerprint = 1;
    hb.fingerprint = &short_fp;
    Tensord__V1__ClientMessage cm = TENSORD__V1__CLIENT_MESSAGE__INIT;
    cm.body_case = TENSORD__V1__CLIENT_MESSAGE__BODY_HAS_BLOBS;
    cm.has_blobs = &hb;
    expect_failure(&s, &cm, TD_EPROTO, "fingerprint 0 has 15 bytes");

    /* More entries than TD_MAX_HAS_BLOBS in all. */
    ProtobufCBinaryData *many = malloc(4096 * sizeof *many);
    for (int i = 0; i < 4096; i++) many[i] = sha;
    hb.n_sha256 = 4096;
    hb.sha256 = many;
    hb.n_fingerprint = 1;
    hb.fingerprint = &fp;
    expect_failure(&s, &cm, TD_EPROTO, "the limit is 4096 in all");
    free(many);

    td__op op = raw_op_full(3, TD_U8, 1, (int64_t[]){16}, 0.0);
    cr_assert_neq(raw_send_ops(&s, &op, 1), 0);
    Tensord__V1__StoreBlob sb = TENSORD__V1__STORE_BLOB__INIT;
    sb.tensor = 3;
    sb.fingerprint = fp;
    sb.sha256 = sha; /* both */
    cm.body_case = TENSORD__V1__CLIENT_MESSAGE__BODY_STORE_BLOB;
    cm.store_blob = &sb;
    expect_failure(&s, &cm, TD_EPROTO, "comes without a hash");
    sb.sha256 = (ProtobufCBinaryData){0};
    sb.fingerprint = short_fp;
    expect_failure(&s, &cm, TD_EPROTO, "fingerprint has 15 bytes");
    sb.fingerprint = fp;
    sb.tensor = 999; /* no such tensor */
    expect_failure(&s, &cm, TD_ENOTFOUND, "999");

    /* The session still works. */
    sb.tensor = 3;
    cr_assert(raw_send(&s, &cm, NULL, 0, NULL));
    cr_expect_eq(has_blobs(&s, NULL, key), 1u, "the 16-byte tensor is a candidate");
    cr_expect_eq(raw_close(&s), GRPC_STATUS_OK, "%s", raw_details(&s));
}

/* Candidates a tenant leaves behind count for its quota and are given back when it needs
 * them: with a 12 MiB tenant quota, 20 released 1 MiB uploads still leave room for a 10 MiB
 * tensor. */
Test(blobs, candidate_memory_is_bounded_and_reclaimed, .init = start_small_tenants,
     .fini = stop_and_clean, .timeout = 180)
{
    uint8_t *w = malloc(CHUNK);
    td_context *ctx = connect_tok(NULL);
    uint64_t b;
    for (int i = 0; i < 20; i++) {
        fill(w, CHUNK, 100 + (uint64_t)i);
        td_release(upload(ctx, w, CHUNK, &b));
        cr_expect_eq(b, CHUNK);
    }
    td_server_info info;
    cr_assert_eq(td_server_info_get(srv.addr, 5000, &info), TD_OK, "%s", td_connect_error());
    cr_expect_leq(info.bytes_in_use, 12 * CHUNK, "%llu bytes held after 20 released uploads",
                  (unsigned long long)info.bytes_in_use);
    td_tensor *big = td_full(ctx, TD_U8, 1, (int64_t[]){10 * (int64_t)CHUNK}, 1.0);
    cr_expect_eq(td_fence(ctx), TD_OK, "candidates kept the quota: %s", td_last_error(ctx));
    td_release(big);
    td_close(ctx);
    free(w);
}

/* A fresh fingerprint offer is answered as soon as it arrives, not after the session's
 * queued work (server/session.c, answer_fresh_offer): a client waits for that answer before
 * it sends an upload's bytes, so behind a training step's ops it emptied the server's
 * pipeline once per upload. Twelve 2048^3 matmuls (~200 GFLOP, over a second here)
 * are queued with a fence, then the offer: its BlobStatus must come before the fence's
 * answer. The old server answered in queue order (fence first). An offer of a fingerprint
 * the server knows still waits its turn (it may promote): checked after the fence. */
Test(blobs, fresh_fingerprint_offer_is_answered_before_queued_work, .init = start_tcp,
     .fini = stop_and_clean, .timeout = 180)
{
    raw_session s;
    open_raw_token(&s, NULL);
    const int64_t dims[2] = {2048, 2048};
    td__op ops[14] = {raw_op_full(1, TD_F32, 2, dims, 0.5), raw_op_full(2, TD_F32, 2, dims, 0.25)};
    for (int i = 0; i < 12; i++) ops[2 + i] = raw_op_binary(TD_OP_MATMUL, 10 + (uint64_t)i, 1, 2);
    cr_assert_neq(raw_send_ops(&s, ops, 14), 0);
    uint64_t fence = raw_send_fence(&s);
    uint8_t bytes[4096], fp[TD_FINGERPRINT_LEN];
    fill(bytes, sizeof bytes, 77);
    cr_assert(td__fingerprint(bytes, sizeof bytes, fp));
    const uint64_t offer = send_has_blobs(&s, NULL, fp);
    raw_msg m;
    cr_assert_eq(raw_recv(&s, &m, 60000), 1);
    cr_expect_eq(m.kind, TENSORD__V1__SERVER_MESSAGE__BODY_BLOB_STATUS,
                 "first reply is kind %d seq %llu (%s), not the offer's answer", m.kind,
                 (unsigned long long)m.seq, m.message);
    cr_expect_eq(m.seq, offer);
    cr_expect_eq(m.n_present, 1);
    cr_expect_eq(m.present & 1, 0u, "nothing is kept under a fresh fingerprint");
    raw_msg_fini(&m);
    cr_assert_eq(raw_recv(&s, &m, 120000), 1);
    cr_expect_eq(m.kind, TENSORD__V1__SERVER_MESSAGE__BODY_FENCE, "%s", m.message);
    cr_expect_eq(m.seq, fence);
    raw_msg_fini(&m);
    /* the session goes on in order: a candidate under fp, then the same offer hits it */
    raw_candidate(&s, 3, bytes, sizeof bytes, fp);
    cr_expect_eq(has_blobs(&s, NULL, fp) & 1, 1u);
    cr_expect_eq(raw_close(&s), GRPC_STATUS_OK, "%s", raw_details(&s));
}

/* hostile/memory.c — memory a client can make the server hold, against a real tensord over
 * the raw protocol (tests/e2e/raw_session.h; libtensord would never send these patterns).
 * Each case holds the server's resident memory (VmRSS in /proc/PID/status, measured after
 * the server has settled) to the limits it was started with plus a stated allowance, and
 * checks that the refusal is a Failure naming the quota while the session carries on.
 *
 * Bounds asserted (MiB of VmRSS growth over the server's baseline after opening):
 *   alias_release_*            limit 64 + 24 (allocator and pool slack)
 *   cow_after_alias            limit 64 + 24
 *   has_blobs_pins_charged     tenant 64 + blob store (one 40 MiB blob) + 24
 *   graph_definitions_flood    tenant 64 + 48 (a definition being decoded, heap slack)
 *   never_reading_client       send mark 64 + 40 (one batch of replies queued past the
 *                              mark, gRPC's stream windows, heap slack)
 *   defaults_apply             no limit configured: refused at the documented defaults,
 *                              24 (nothing allocated)
 * An ASan build of the server is allowed 320 MiB more (its quarantine and redzones).
 * Counts and sizes are fixed and each case takes a few seconds on 2 cores. */
#include "common/sha256.h"
#include "engine/op.h"
#include "raw_session.h"
#include "server_fixture.h"
#include "suite_fixture.h"

#include <criterion/criterion.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MiB (1024 * 1024)

/* The server's VmRSS in bytes. */
static long long rss(void)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)srv.pid);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "cannot read %s", path);
    long long kb = -1;
    while (fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, "VmRSS: %lld kB", &kb) == 1) break;
    fclose(f);
    cr_assert_geq(kb, 0);
    return kb * 1024;
}

/* Extra RSS a sanitizer build of the server holds (td_test_server_sanitizer): under ASan
 * freed memory waits in its quarantine (256 MiB by default) and every block carries
 * redzones, so the bounds below get 320 MiB of slack; under TSan shadow memory scales with
 * everything touched, so the bounds are not checked there (logged). The refusals carry
 * the test in both. */
static long long asan_slack(void)
{
    const char *san = td_test_server_sanitizer(&srv);
    if (san != NULL && strcmp(san, "tsan") == 0) {
        cr_log_info("server runs under ThreadSanitizer: RSS bound not checked");
        return LLONG_MAX / 2;
    }
    return san != NULL ? 320LL * MiB : 0;
}

/* VmRSS once it has stopped changing by more than 1 MiB over 300 ms (at most 5 s). */
static long long settled_rss(void)
{
    long long last = rss();
    for (int i = 0; i < 50; i++) {
        usleep(100 * 1000);
        long long now = rss();
        if (i >= 2 && llabs(now - last) < MiB) return now;
        if (i % 3 == 2) last = now;
    }
    return rss();
}

/* Fence and gather the failures that come back before the fence: count, and the first
 * message containing `needle` (or the first one) in msg. */
static int fence_failures(raw_session *s, const char *needle, char *msg, size_t len)
{
    uint64_t fence = raw_send_fence(s);
    cr_assert_neq(fence, 0, "fence not sent");
    int n = 0;
    msg[0] = '\0';
    for (;;) {
        raw_msg m;
        int rc = raw_recv(s, &m, 15000);
        cr_assert_eq(rc, 1, "no fence reply (rc %d): %s", rc, raw_details(s));
        bool done = m.seq == fence;
        if (m.kind == TENSORD__V1__SERVER_MESSAGE__BODY_FAILURE && !done) {
            if (n == 0 || (needle != NULL && strstr(m.message, needle) && !strstr(msg, needle)))
                snprintf(msg, len, "%s", m.message);
            n++;
        }
        raw_msg_fini(&m);
        if (done) return n;
    }
}

static td__op full_u8(uint64_t id, int64_t n)
{
    return raw_op_full(id, TD_U8, 1, (int64_t[]){n}, 1.0);
}

static td__op reshape(uint64_t out, uint64_t in, int64_t a, int64_t b)
{
    td__op o = {.opcode = TD_OP_RESHAPE, .n_inputs = 1, .inputs = {in}, .output = out,
                .n_iattrs = 2, .iattrs = {a, b}};
    return o;
}

/* (a) x = full(48 MiB); y = reshape(x); release x — eight times. Once charged by buffer,
 * the second x already passes the 64 MiB limit (48 held by y + 48); on the old code every
 * round passed and 8 x 48 MiB stayed held. */
/* `quota` is the text before the "(HELD of LIMIT bytes in use)" of the refusal. HELD is
 * 48 MiB (the first round's alias) plus the host memory of the records the session holds
 * (engine/session.c: 384 bytes a tensor, 768 a poison record): the alias's record, and one
 * poison record per refused round (the alias of the refused tensor; the refused tensor's
 * own poison record is released with it). */
static void alias_release_rounds(const char *quota)
{
    char needle[256];
    raw_session s;
    open_raw(&s);
    long long base = settled_rss();
    char msg[1024];
    int refused = 0;
    for (uint64_t k = 0; k < 8; k++) {
        td__op ops[2] = {full_u8(10 * k + 1, 48 * MiB), reshape(10 * k + 2, 10 * k + 1, 48, MiB)};
        cr_assert_neq(raw_send_ops(&s, ops, 2), 0);
        cr_assert_neq(raw_send_release(&s, (uint64_t[]){10 * k + 1}, 1), 0);
        snprintf(needle, sizeof needle, "%s(%llu of 67108864 bytes in use)", quota,
                 (unsigned long long)(48 * MiB + 384 + 768 * (uint64_t)refused));
        int n = fence_failures(&s, needle, msg, sizeof msg);
        if (n > 0) {
            cr_expect(strstr(msg, needle), "round %llu: '%s' lacks '%s'", (unsigned long long)k,
                      msg, needle);
            refused++;
        }
    }
    long long grew = settled_rss() - base;
    fprintf(stderr, "%s: server RSS +%.1f MiB\n", __func__, (double)grew / MiB);
    cr_expect_eq(refused, 7, "every round after the first is refused (got %d)", refused);
    cr_expect_lt(grew, (64 + 24) * (long long)MiB + asan_slack(), "server RSS grew by %lld MiB",
                 grew / MiB);
    /* the session carries on: drop the alias, and a new tensor fits */
    raw_send_release(&s, (uint64_t[]){2}, 1);
    td__op again = full_u8(100, 48 * MiB);
    raw_send_ops(&s, &again, 1);
    cr_expect_eq(fence_failures(&s, NULL, msg, sizeof msg), 0, "%s", msg);
    raw_close(&s);
}

static void start_session_limit(void)
{
    start_with((const char *const[]){"--max-session-bytes", "64M", NULL});
}

static void start_tenant_limit(void)
{
    start_with((const char *const[]){"--max-session-bytes", "0", "--max-tenant-bytes", "64M",
                                     NULL});
}

Test(memory, alias_release_refused_at_session_limit, .init = start_session_limit, .fini = stop,
     .timeout = 120)
{
    alias_release_rounds("session memory quota ");
}

Test(memory, alias_release_refused_at_tenant_quota, .init = start_tenant_limit, .fini = stop,
     .timeout = 120)
{
    alias_release_rounds("max_bytes quota (the server default, --max-tenant-bytes) ");
}

/* (b) x = full(24 MiB); then, seven times, y_k = reshape(x) and write one byte of x: each
 * write copies x (the alias keeps the old bytes). Two buffers fit under 64 MiB, the third
 * copy is refused; on the old code all seven copies were made (7 x 24 MiB uncharged). */
Test(memory, cow_after_alias, .init = start_session_limit, .fini = stop, .timeout = 120)
{
    raw_session s;
    open_raw(&s);
    long long base = settled_rss();
    td__op x = full_u8(1, 24 * MiB);
    cr_assert_neq(raw_send_ops(&s, &x, 1), 0);
    char msg[1024];
    int refused = 0;
    uint8_t byte = 9;
    for (uint64_t k = 0; k < 7; k++) {
        td__op y = reshape(10 + k, 1, 24, MiB);
        cr_assert_neq(raw_send_ops(&s, &y, 1), 0);
        cr_assert_neq(raw_send_write(&s, 1, k, &byte, 1), 0);
        int n = fence_failures(&s, "copy-on-write", msg, sizeof msg);
        if (n > 0) {
            /* held: x and its first copy (48 MiB), and the records of x and of the k + 1
             * aliases so far (384 bytes each, engine/session.c) */
            char want[128];
            snprintf(want, sizeof want, "session memory quota (%llu of 67108864 bytes",
                     (unsigned long long)(48 * MiB + 384 * (k + 2)));
            cr_expect(strstr(msg, "copy-on-write of tensor 1") && strstr(msg, want),
                      "round %llu: '%s' lacks '%s'", (unsigned long long)k, msg, want);
            refused++;
        }
    }
    long long grew = settled_rss() - base;
    fprintf(stderr, "%s: server RSS +%.1f MiB\n", __func__, (double)grew / MiB);
    cr_expect_eq(refused, 6, "only the first copy fits (got %d refusals)", refused);
    cr_expect_lt(grew, (64 + 24) * (long long)MiB + asan_slack(), "server RSS grew by %lld MiB", grew / MiB);
    /* the refused writes changed nothing: x[1] is still 1 */
    raw_send_read(&s, 1, 1, 1);
    raw_msg m;
    for (;;) {
        cr_assert_eq(raw_recv(&s, &m, 10000), 1);
        if (m.kind == TENSORD__V1__SERVER_MESSAGE__BODY_READ) break;
        raw_msg_fini(&m);
    }
    cr_expect_eq(m.payload_len, 1);
    cr_expect_eq(m.payload[0], 1, "byte 1 of x after a refused write");
    raw_msg_fini(&m);
    raw_close(&s);
}

static uint64_t send_has_blobs(raw_session *s, const uint8_t *hash)
{
    Tensord__V1__HasBlobs hb = TENSORD__V1__HAS_BLOBS__INIT;
    ProtobufCBinaryData h = {.len = TD_SHA256_BYTES, .data = (uint8_t *)(uintptr_t)hash};
    hb.n_sha256 = 1;
    hb.sha256 = &h;
    Tensord__V1__ClientMessage cm = TENSORD__V1__CLIENT_MESSAGE__INIT;
    cm.body_case = TENSORD__V1__CLIENT_MESSAGE__BODY_HAS_BLOBS;
    cm.has_blobs = &hb;
    uint64_t seq = 0;
    cr_assert(raw_send(s, &cm, NULL, 0, &seq));
    return seq;
}

/* Whether HasBlobs says the blob is present. */
static bool has_blob(raw_session *s, const uint8_t *hash)
{
    uint64_t seq = send_has_blobs(s, hash);
    for (;;) {
        raw_msg m;
        cr_assert_eq(raw_recv(s, &m, 10000), 1, "no blob status");
        bool mine = m.seq == seq && m.kind == TENSORD__V1__SERVER_MESSAGE__BODY_BLOB_STATUS;
        bool present = m.present & 1;
        raw_msg_fini(&m);
        if (mine) return present;
    }
}

/* (c) A 40 MiB blob in the store; HasBlobs pins it for the session. The pin is charged to
 * the tenant (64 MiB), so a 40 MiB tensor no longer fits while it is held, a second pin by
 * another session is refused (reported absent), and closing the session gives it back.
 * On the old code pins were free: the tensor fitted and both pins were taken. */
Test(memory, has_blobs_pins_charged, .init = start_tenant_limit, .fini = stop, .timeout = 120)
{
    enum { B = 40 * MiB };
    uint8_t *bytes = malloc(B);
    memset(bytes, 1, B); /* what full_u8 fills */
    uint8_t hash[TD_SHA256_BYTES];
    cr_assert(td__sha256(bytes, B, hash));
    free(bytes);
    raw_session a, b;
    open_raw(&a);
    long long base = settled_rss();
    td__op t = full_u8(1, B);
    raw_send_ops(&a, &t, 1);
    Tensord__V1__StoreBlob sb = TENSORD__V1__STORE_BLOB__INIT;
    sb.tensor = 1;
    sb.sha256.len = TD_SHA256_BYTES;
    sb.sha256.data = hash;
    Tensord__V1__ClientMessage cm = TENSORD__V1__CLIENT_MESSAGE__INIT;
    cm.body_case = TENSORD__V1__CLIENT_MESSAGE__BODY_STORE_BLOB;
    cm.store_blob = &sb;
    cr_assert(raw_send(&a, &cm, NULL, 0, NULL));
    raw_send_release(&a, (uint64_t[]){1}, 1);
    char msg[1024];
    cr_assert_eq(fence_failures(&a, NULL, msg, sizeof msg), 0, "%s", msg);

    cr_assert(has_blob(&a, hash), "the stored blob is present and now pinned");
    td__op t2 = full_u8(2, B);
    raw_send_ops(&a, &t2, 1);
    cr_expect_eq(fence_failures(&a, "max_bytes", msg, sizeof msg), 1,
                 "40 MiB pinned + 40 MiB > 64 MiB");
    cr_expect(strstr(msg, "(41943040 of 67108864 bytes in use)"), "%s", msg);
    open_raw(&b);
    cr_expect(!has_blob(&b, hash), "a second pin would pass the tenant's 64 MiB");
    long long grew = settled_rss() - base;
    fprintf(stderr, "%s: server RSS +%.1f MiB\n", __func__, (double)grew / MiB);
    cr_expect_lt(grew, (64 + 40 + 24) * (long long)MiB + asan_slack(), "server RSS grew by %lld MiB",
                 grew / MiB);
    raw_close(&a);
    usleep(200 * 1000); /* the session's end is processed on its worker */
    td__op t3 = full_u8(3, B);
    raw_send_ops(&b, &t3, 1);
    cr_expect_eq(fence_failures(&b, NULL, msg, sizeof msg), 0, "pin released: %s", msg);
    raw_close(&b);
}

/* ---- graph definitions ---- */

#define GRAPH_OPS 40000 /* ~15 MB in server memory each (~380 bytes an op), ~360 KB on the wire */

/* Define graph number `k`: learn its id from the mismatch message, then define it.
 * Returns 0 when accepted, 1 when refused (message in msg). */
static int define_graph(raw_session *s, int64_t k, char *msg, size_t len)
{
    raw_graph r;
    raw_graph_init(&r, GRAPH_OPS, TD_OP_NEG, 4 + k);
    uint8_t id[32];
    int rc = raw_define_graph(s, &r.g, id, msg, len);
    raw_graph_fini(&r);
    cr_assert_neq(rc, -1, "no reply to a GraphDefine");
    return rc;
}

static void start_graph_flood(void)
{
    start_with((const char *const[]){"--max-tenant-bytes", "64M", "--graph-cache-bytes", "32M",
                                     NULL});
}

/* (d) Two rounds of one session defining 8 distinct 40,000-op graphs. The tenant's 64 MiB
 * take 4 (15 MB each), the rest are refused naming the quota; after the session closes
 * its graphs go back (the cache keeps at most 32 MiB, and gives way to the tenant's next
 * definitions), so the second round gets as far as the first and RSS does not grow. On
 * the old code all 16 were accepted (8 x 15 MB held per session, 2^20 ops cached). */
Test(memory, graph_definitions_flood, .init = start_graph_flood, .fini = stop, .timeout = 120)
{
    raw_session probe;
    open_raw(&probe);
    long long base = settled_rss();
    char msg[1024];
    int accepted[2] = {0, 0};
    long long grew = 0;
    for (int round = 0; round < 2; round++) {
        raw_session s;
        open_raw(&s);
        for (int64_t k = 0; k < 8; k++) {
            int rc = define_graph(&s, 8 * round + k, msg, sizeof msg);
            if (rc == 0) {
                accepted[round]++;
                continue;
            }
            cr_expect(strstr(msg, "keeping a graph definition of") && strstr(msg, "max_bytes"),
                      "round %d graph %lld: %s", round, (long long)k, msg);
        }
        long long g = settled_rss() - base;
        fprintf(stderr, "graph flood round %d: %d accepted, server RSS +%.1f MiB\n", round,
                accepted[round], (double)g / MiB);
        if (g > grew) grew = g;
        raw_close(&s);
        usleep(200 * 1000);
    }
    cr_expect_eq(accepted[0], 4, "64 MiB hold 4 graphs of ~15 MB (accepted %d)", accepted[0]);
    cr_expect_eq(accepted[1], accepted[0], "the closed session's graphs were given back");
    cr_expect_lt(grew, (64 + 48) * (long long)MiB + asan_slack(), "server RSS grew by %lld MiB", grew / MiB);
    raw_close(&probe);
}

/* (e) A client that sends fences and never reads a reply (its channel takes 64 KiB of
 * replies ahead, then HTTP/2 flow control stops the server's sends). The server parks the
 * FenceDone replies, each counted at its real cost (SS_REPLY_OVERHEAD, 410 bytes measured
 * here), until its 64 MiB send mark and then stops reading. On the old code a reply was
 * counted at ~70 bytes, so the mark was reached only after ~950,000 replies (~390 MB);
 * this case stops at 300,000 (~123 MB on the old code). */
Test(memory, never_reading_client, .init = start_session_limit, .fini = stop, .timeout = 120)
{
    raw_recv_window = 65536;
    raw_session s;
    open_raw(&s);
    raw_recv_window = 0;
    long long base = settled_rss();
    int sent = 0;
    double t0 = td_test_now_ms();
    for (; sent < 300000; sent++)
        if (raw_send_fence(&s) == 0) break;
    long long grew = settled_rss() - base;
    fprintf(stderr, "%s: server RSS +%.1f MiB\n", __func__, (double)grew / MiB);
    fprintf(stderr, "never_reading_client: %d fences taken in %.0f ms; RSS +%lld MiB (%.0f bytes "
            "per fence)\n", sent, td_test_now_ms() - t0, grew / MiB, (double)grew / sent);
    cr_expect_lt(grew, (64 + 40) * (long long)MiB + asan_slack(), "server RSS grew by %lld MiB", grew / MiB);
    raw_abort(&s);
    /* the server still serves */
    raw_session t;
    open_raw(&t);
    raw_close(&t);
}

/* (f) No limit configured: the defaults (50 % of RAM per session, 75 % per tenant) apply.
 * A tensor of 60 % of RAM is refused by the session default; with the session limit
 * switched off (--max-session-bytes 0), one of 80 % is refused by the tenant default.
 * Both are refused before anything is allocated (RSS +24 MiB at most); on the old code
 * there was no default and the server pre-faulted them (or was killed trying). */
static unsigned long long host_ram(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    cr_assert(pages > 0 && page > 0);
    return (unsigned long long)pages * (unsigned long long)page;
}

static void refused_without_allocating(uint64_t nbytes, const char *want)
{
    raw_session s;
    open_raw(&s);
    long long base = settled_rss();
    td__op big = full_u8(1, (int64_t)nbytes);
    raw_send_ops(&s, &big, 1);
    char msg[1024];
    cr_assert_eq(fence_failures(&s, NULL, msg, sizeof msg), 1, "a tensor of %llu bytes refused",
                 (unsigned long long)nbytes);
    cr_expect(strstr(msg, want), "'%s' lacks '%s'", msg, want);
    long long grew = settled_rss() - base;
    fprintf(stderr, "%s: server RSS +%.1f MiB\n", __func__, (double)grew / MiB);
    cr_expect_lt(grew, 24LL * MiB + asan_slack(), "RSS grew by %lld MiB", grew / MiB);
    raw_close(&s);
}

Test(memory, defaults_apply, .fini = stop, .timeout = 120)
{
    unsigned long long ram = host_ram();
    char want[160];
    start_with(NULL);
    snprintf(want, sizeof want, "session memory quota (0 of %llu bytes in use)", ram / 100 * 50);
    refused_without_allocating(ram / 10 * 6, want);
    stop();
    start_with((const char *const[]){"--max-session-bytes", "0", NULL});
    snprintf(want, sizeof want,
             "max_bytes quota (the server default, --max-tenant-bytes) (0 of %llu bytes in use)",
             ram / 100 * 75);
    refused_without_allocating(ram / 10 * 8, want);
}

/* (g) Records: a flood of empty tensors (EMPTY f32 [0], 0 device bytes) and of failed ops
 * (NEG of an unknown id: a poison record each) with fresh output ids. Every record costs
 * host memory (~360 bytes measured, charged 384; a poison record ~470, charged 768), so
 * under a 64 MiB session limit the flood is refused after about 175,000 records (87,000
 * poison records)
 * and the server grows by less than the limit. On the code before, records were free:
 * 6M empty tensors grew a server by 1.3 GB with `bytes_in_use` at 3 kB (breaker report). */
static int record_flood(raw_session *s, bool failing, int batches, char *msg, size_t len)
{
    enum { OPS = 60000 };
    td__op *ops = calloc(OPS, sizeof *ops);
    cr_assert(ops != NULL);
    int refused = 0;
    uint64_t id = 1000;
    for (int b = 0; b < batches && refused == 0; b++) {
        for (int i = 0; i < OPS; i++) {
            td__op o = {.output = id++};
            if (failing) {
                o.opcode = TD_OP_NEG;
                o.n_inputs = 1;
                o.inputs[0] = 999; /* never created */
            } else {
                o.opcode = TD_OP_EMPTY;
                o.dtype = TD_F32;
                o.n_iattrs = 1;
                o.iattrs[0] = 0;
            }
            ops[i] = o;
        }
        cr_assert_neq(raw_send_ops(s, ops, OPS), 0);
        if (fence_failures(s, "would exceed the session memory quota", msg, len) > 0 &&
            strstr(msg, "would exceed the session memory quota") != NULL)
            refused = 1;
    }
    free(ops);
    return refused;
}

Test(memory, tensor_records_are_charged, .init = start_session_limit, .fini = stop,
     .timeout = 120)
{
    raw_session s;
    open_raw(&s);
    long long base = settled_rss();
    char msg[1024];
    cr_expect_eq(record_flood(&s, false, 6, msg, sizeof msg), 1,
                 "360,000 empty tensors were all accepted under a 64 MiB limit");
    cr_expect(strstr(msg, "recording a tensor (384 bytes of host memory)"), "%s", msg);
    long long grew = settled_rss() - base;
    fprintf(stderr, "%s: empty tensors: server RSS +%.1f MiB\n", __func__, (double)grew / MiB);
    cr_expect_lt(grew, (64 + 24) * (long long)MiB + asan_slack(), "server RSS grew by %lld MiB",
                 grew / MiB);
    raw_close(&s);

    open_raw(&s);
    base = settled_rss();
    /* Failed ops: the first failure is reported, the rest poison quietly; past the limit a
     * failed op's output stays unknown instead of holding a record. */
    record_flood(&s, true, 3, msg, sizeof msg);
    td__op probe = full_u8(5, 40 * MiB);
    raw_send_ops(&s, &probe, 1);
    cr_expect_eq(fence_failures(&s, "memory quota", msg, sizeof msg), 1,
                 "180,000 poison records held no memory: 40 MiB still fitted under 64 MiB");
    grew = settled_rss() - base;
    fprintf(stderr, "%s: poison records: server RSS +%.1f MiB\n", __func__,
            (double)grew / MiB);
    cr_expect_lt(grew, (64 + 24) * (long long)MiB + asan_slack(), "server RSS grew by %lld MiB",
                 grew / MiB);
    raw_close(&s);
}

/* (h) Failure replies per batch are capped (16, then one summary): a batch of 60,000
 * failing ops (output id 0: no record either) gave 60,000 replies, ~100 MiB held per
 * session that never reads (breaker round 2). The poison of a failed op still says why. */
Test(memory, failure_replies_per_batch_are_capped, .init = start_session_limit, .fini = stop,
     .timeout = 120)
{
    raw_session s;
    open_raw(&s);
    enum { OPS = 1000 };
    static td__op ops[OPS];
    for (int i = 0; i < OPS; i++)
        ops[i] = (td__op){.opcode = TD_OP_NEG, .n_inputs = 1, .inputs = {999},
                          .output = 5000 + (uint64_t)i};
    uint64_t seq = raw_send_ops(&s, ops, OPS);
    cr_assert_neq(seq, 0);
    uint64_t fence = raw_send_fence(&s);
    int failures = 0;
    char last[1024] = "";
    for (;;) {
        raw_msg m;
        cr_assert_eq(raw_recv(&s, &m, 15000), 1, "no fence reply");
        if (m.seq == seq && m.kind == TENSORD__V1__SERVER_MESSAGE__BODY_FAILURE) {
            failures++;
            snprintf(last, sizeof last, "%s", m.message);
        }
        bool done = m.seq == fence;
        raw_msg_fini(&m);
        if (done) break;
    }
    cr_expect_eq(failures, 17, "1000 failing ops: 16 failures and one summary, got %d",
                 failures);
    cr_expect(strstr(last, "only the first 16 failures"), "%s", last);
    /* op 999's output, never reported on its own, still reads as failed with its reason */
    uint64_t rs = raw_send_read(&s, 5000 + OPS - 1, 0, 4);
    for (;;) {
        raw_msg m;
        cr_assert_eq(raw_recv(&s, &m, 15000), 1);
        bool hit = m.seq == rs;
        if (hit) {
            cr_expect_eq(m.kind, TENSORD__V1__SERVER_MESSAGE__BODY_FAILURE);
            cr_expect(strstr(m.message, "unknown tensor id 999"), "%s", m.message);
        }
        raw_msg_fini(&m);
        if (hit) break;
    }
    raw_close(&s);
}

/* The f32 scratch the CPU device makes for an f16/bf16 matmul (both operands and the result
 * widened, 4 bytes an element) is charged while the op runs: with a 64 MiB session quota,
 * f16 [4096, 4096] (32 MiB) @ [4096, 1] needs 64 MiB of scratch and is refused with
 * TD_EQUOTA naming it (the read of its result: TD_EPOISONED with that message; before the
 * charge it ran, holding 96 MiB against a 64 MiB quota);
 * [1024, 1024] @ [1024, 1] (2 MiB, 4 MiB of scratch) runs, in f16 and bf16. */
Test(memory, half_matmul_scratch_is_charged, .init = start_session_limit, .fini = stop,
     .timeout = 120)
{
    char uri[600];
    td_test_server_uri(&srv, "cpu", uri, sizeof uri);
    td_context *ctx = NULL;
    cr_assert_eq(td_connect(uri, NULL, &ctx), TD_OK, "%s", td_connect_error());
    const td_dtype dts[2] = {TD_F16, TD_BF16};
    for (int k = 0; k < 2; k++) {
        td_tensor *a = td_full(ctx, dts[k], 2, (int64_t[]){4096, 4096}, 1.0);
        td_tensor *b = td_full(ctx, dts[k], 2, (int64_t[]){4096, 1}, 1.0);
        td_tensor *c = td_matmul(a, b);
        uint16_t v[4096];
        td_status st = td_read(c, v, sizeof v);
        /* the read reports the failed matmul it depends on */
        cr_expect_eq(st, TD_EPOISONED, "%s [4096,4096] @ [4096,1] under a 64 MiB quota: %s (%s)",
                     td_dtype_name(dts[k]), td_status_name(st), td_last_error(ctx));
        cr_expect(strstr(td_last_error(ctx), "f32 scratch of an f16/bf16 matmul") != NULL &&
                      strstr(td_last_error(ctx), "session memory quota") != NULL,
                  "message: %s", td_last_error(ctx));
        td_release(a);
        td_release(b);
        td_release(c);

        a = td_full(ctx, dts[k], 2, (int64_t[]){1024, 1024}, 1.0);
        b = td_full(ctx, dts[k], 2, (int64_t[]){1024, 1}, 1.0);
        c = td_matmul(a, b);
        st = td_read(c, v, 1024 * sizeof v[0]);
        cr_expect_eq(st, TD_OK, "%s [1024,1024] @ [1024,1]: %s (%s)", td_dtype_name(dts[k]),
                     td_status_name(st), td_last_error(ctx));
        /* 1024 ones summed: 1024 exactly, 0x6400 in f16 and 0x4480 in bf16 */
        const uint16_t want = dts[k] == TD_F16 ? 0x6400 : 0x4480;
        cr_expect_eq(v[0], want, "%s: element 0 is 0x%04x", td_dtype_name(dts[k]), v[0]);
        cr_expect_eq(v[1023], want, "%s: element 1023 is 0x%04x", td_dtype_name(dts[k]),
                     v[1023]);
        td_release(a);
        td_release(b);
        td_release(c);
    }
    td_close(ctx);
}

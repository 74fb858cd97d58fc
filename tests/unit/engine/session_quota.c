/* Unit tests for the memory charging of engine/session.c and engine/tensor.c: a buffer is
 * charged once, to the session and the tenant that created it, however many tensors alias
 * it; copy-on-write buffers are charged and refused past a limit; a buffer that only a
 * "send" (a reference taken by td__session_lookup) still holds counts in the tenant quota
 * until it is dropped; limits are checked before anything is allocated. Expected byte
 * counts are written out from the sizes of the tensors the tests create, plus the host
 * memory of their records as engine/session.c documents it: REC bytes for a tensor,
 * POISON for the record of a failed op. */
#include "engine/device.h"
#include "engine/session.h"
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#define N 400000 /* bytes of each u8 tensor */
#define REC 384    /* TD_TENSOR_RECORD_BYTES */
#define POISON 768 /* TD_POISON_RECORD_BYTES */

static td__session *s;
static td__quota q;
static char msgs[8][1024];
static td_status fail_st[8];
static int nfail;

static void on_fail(void *arg, uint32_t idx, td_status st, const char *msg)
{
    (void)arg;
    (void)idx;
    if (nfail < 8) {
        fail_st[nfail] = st;
        snprintf(msgs[nfail], sizeof msgs[0], "%s", msg);
    }
    nfail++;
}

/* A session with `session_max` bytes and a tenant quota of `tenant_max` bytes. */
static void open_session(uint64_t session_max, uint64_t tenant_max)
{
    char err[256];
    cr_assert_eq(td__devices_init(err, sizeof err), TD_OK, "%s", err);
    td__quota_init(&q, "alice");
    td__quota_limits ql = {.max_bytes = tenant_max};
    td__quota_set_limits(&q, &ql);
    td__session_limits lim = {.max_bytes = session_max, .quota = &q};
    cr_assert_eq(td__session_create(td__device_find("cpu"), &lim, &s), TD_OK);
    nfail = 0;
}

static void teardown(void)
{
    td__session_destroy(s);
    s = NULL;
    cr_expect_eq(atomic_load(&q.bytes), 0, "every byte given back at the end");
    cr_expect_eq(atomic_load(&q.tensors), 0);
    td__quota_set_default_bytes(0);
    td__quota_set_reclaim(NULL);
}

static void session_limit(void) { open_session(1000000, 0); }
static void tenant_limit(void) { open_session(0, 1000000); }

static td__op full_u8(uint64_t id, int64_t n, double v)
{
    return (td__op){.opcode = TD_OP_FULL, .dtype = TD_U8, .output = id, .n_iattrs = 1,
                    .iattrs = {n}, .fattrs = {v, 0}};
}

static td__op reshape(uint64_t out, uint64_t in, int64_t n)
{
    return (td__op){.opcode = TD_OP_RESHAPE, .n_inputs = 1, .inputs = {in}, .output = out,
                    .n_iattrs = 1, .iattrs = {n}};
}

static void exec1(td__op op) { td__session_exec(s, &op, 1, on_fail, NULL); }

TestSuite(session_quota, .fini = teardown);

Test(session_quota, alias_keeps_its_buffer_charged_to_the_session, .init = session_limit)
{
    exec1(full_u8(1, N, 1));
    exec1(reshape(2, 1, N));
    cr_assert_eq(nfail, 0, "%s", msgs[0]);
    cr_expect_eq(td__session_bytes(s), N, "an alias adds nothing");
    td__session_release(s, (uint64_t[]){1}, 1);
    cr_expect_eq(td__session_bytes(s), N, "the alias still holds the buffer");
    exec1(full_u8(3, N, 1));
    exec1(reshape(4, 3, N));
    td__session_release(s, (uint64_t[]){3}, 1);
    cr_expect_eq(td__session_bytes(s), 2 * N);
    uint64_t live = td__buffer_live_bytes();
    exec1(full_u8(5, N, 1)); /* 3 * 400000 > 1000000 */
    cr_assert_eq(nfail, 1);
    cr_expect_eq(fail_st[0], TD_EQUOTA);
    /* 2 buffers + the records of the two aliases */
    cr_expect(strstr(msgs[0], "session memory quota (800768 of 1000000 bytes in use)"), "%s",
              msgs[0]);
    cr_expect_eq(td__buffer_live_bytes(), live, "refused before allocating");
    td__session_release(s, (uint64_t[]){2, 4}, 2);
    cr_expect_eq(td__session_bytes(s), 0);
    exec1(full_u8(6, N, 1));
    cr_expect_eq(nfail, 1, "fits again once the aliases are gone");
}

Test(session_quota, alias_keeps_its_buffer_charged_to_the_tenant, .init = tenant_limit)
{
    for (uint64_t k = 0; k < 3; k++) {
        exec1(full_u8(10 * k + 1, N, 1));
        exec1(reshape(10 * k + 2, 10 * k + 1, N));
        td__session_release(s, (uint64_t[]){10 * k + 1}, 1);
    }
    cr_assert_eq(nfail, 1, "the third buffer passes the tenant's 1000000 bytes");
    cr_expect_eq(fail_st[0], TD_EQUOTA);
    cr_expect(strstr(msgs[0], "tenant 'alice': allocating 400000 bytes would exceed the "
                              "max_bytes quota (800768 of 1000000 bytes in use)"),
              "%s", msgs[0]);
    /* the two aliases' records, and the poison record of the third alias (its original's
     * was released with it) */
    cr_expect_eq(atomic_load(&q.bytes), 2 * N + 2 * REC + POISON);
    cr_expect_eq(atomic_load(&q.tensors), 2, "the two aliases");
}

Test(session_quota, copy_on_write_after_alias_is_charged, .init = session_limit)
{
    exec1(full_u8(1, N, 1));
    exec1(reshape(2, 1, N));
    char err[512];
    uint8_t v = 7, got;
    cr_assert_eq(td__session_write(s, 1, 5, &v, 1, err, sizeof err), TD_OK, "%s", err);
    cr_expect_eq(td__session_bytes(s), 2 * N, "the copy is a second buffer");
    exec1(reshape(3, 1, N));
    cr_assert_eq(td__session_write(s, 1, 6, &v, 1, err, sizeof err), TD_EQUOTA);
    cr_expect(strstr(err, "copy-on-write of tensor 1"), "%s", err);
    cr_expect(strstr(err, "session memory quota (801152 of 1000000 bytes in use)"), "%s", err);
    void *dst;
    cr_expect_eq(td__session_write_ptr(s, 1, 0, 1, &dst, err, sizeof err), TD_EQUOTA);
    cr_assert_eq(td__session_read(s, 3, 6, &got, 1, err, sizeof err), TD_OK);
    cr_expect_eq(got, 1, "the refused write changed nothing");
    cr_expect_eq(td__session_bytes(s), 2 * N);
    td__session_release(s, (uint64_t[]){3}, 1);
    cr_assert_eq(td__session_write(s, 1, 6, &v, 1, err, sizeof err), TD_OK, "%s", err);
    cr_expect_eq(td__session_bytes(s), 2 * N, "unshared again: no copy needed");
}

Test(session_quota, copy_on_write_is_refused_by_the_tenant_quota, .init = tenant_limit)
{
    exec1(full_u8(1, N, 1));
    exec1(reshape(2, 1, N));
    char err[512];
    uint8_t v = 7;
    cr_assert_eq(td__session_write(s, 1, 0, &v, 1, err, sizeof err), TD_OK, "%s", err);
    cr_expect_eq(atomic_load(&q.bytes), 2 * N + 2 * REC);
    exec1(reshape(3, 1, N));
    cr_assert_eq(td__session_write(s, 1, 0, &v, 1, err, sizeof err), TD_EQUOTA);
    cr_expect(strstr(err, "tenant 'alice': copying a shared tensor of 400000 bytes would exceed "
                          "the max_bytes quota (801152 of 1000000 bytes in use)"),
              "%s", err);
    cr_expect_eq(atomic_load(&q.bytes), 2 * N + 3 * REC, "nothing charged by the refusal");
}

Test(session_quota, a_buffer_being_sent_counts_for_the_tenant_until_sent, .init = tenant_limit)
{
    exec1(full_u8(1, N, 1));
    td__desc d;
    td__buffer *sending = NULL;
    char err[256];
    cr_assert_eq(td__session_lookup(s, 1, &d, &sending, err, sizeof err), TD_OK, "%s", err);
    cr_assert_not_null(sending, "the CPU has host memory");
    td__session_release(s, (uint64_t[]){1}, 1);
    cr_expect_eq(td__session_bytes(s), 0, "no tensor of the session refers to it");
    cr_expect_eq(atomic_load(&q.bytes), N, "still held by the send");
    exec1(full_u8(2, N, 1));
    exec1(full_u8(3, N, 1));
    cr_expect_eq(nfail, 1, "400000 being sent + 400000 + 400000 > 1000000");
    td__buffer_unref(sending); /* the send completes */
    cr_expect_eq(atomic_load(&q.bytes), N + REC + POISON);
}

Test(session_quota, writing_a_tensor_being_sent_copies_and_charges_the_copy,
     .init = tenant_limit)
{
    exec1(full_u8(1, N, 1));
    td__desc d;
    td__buffer *sending = NULL;
    char err[256];
    cr_assert_eq(td__session_lookup(s, 1, &d, &sending, err, sizeof err), TD_OK, "%s", err);
    static uint8_t data[N];
    memset(data, 3, sizeof data);
    cr_assert_eq(td__session_write(s, 1, 0, data, N, err, sizeof err), TD_OK, "%s", err);
    cr_expect_eq(td__session_bytes(s), N, "the session holds only the new buffer");
    cr_expect_eq(atomic_load(&q.bytes), 2 * N + REC,
                 "the tenant pays for both until the send ends");
    cr_expect_eq(((uint8_t *)sending->data)[0], 1, "the send keeps the old contents");
    td__buffer_unref(sending);
    cr_expect_eq(atomic_load(&q.bytes), N + REC);
}

Test(session_quota, default_tenant_limit_applies_without_a_quota, .init = tenant_limit)
{
    td__quota_limits none = {0};
    td__quota_set_limits(&q, &none);
    td__quota_set_default_bytes(N + N / 2);
    exec1(full_u8(1, N, 1));
    exec1(full_u8(2, N, 1));
    cr_assert_eq(nfail, 1);
    cr_expect(strstr(msgs[0], "max_bytes quota (the server default, --max-tenant-bytes) "
                              "(400384 of 600000 bytes in use)"),
              "%s", msgs[0]);
    td__quota_limits own = {.max_bytes = 2 * N + 2 * REC + POISON};
    td__quota_set_limits(&q, &own);
    exec1(full_u8(3, N, 1));
    cr_expect_eq(nfail, 1, "the tenant's own limit wins over the default");
}

static uint64_t cached = 0;
static int reclaim_calls;
static uint64_t reclaim(td__quota *qq, uint64_t need)
{
    (void)need;
    reclaim_calls++;
    uint64_t n = cached;
    td__quota_bytes_uncharge(qq, n);
    cached = 0;
    return n;
}

Test(session_quota, reclaim_hook_frees_cached_memory_before_refusing, .init = tenant_limit)
{
    char err[256];
    cached = 700000;
    cr_assert_eq(td__quota_bytes_charge(&q, cached, "keeping a graph of", err, sizeof err),
                 TD_OK);
    td__quota_set_reclaim(reclaim);
    exec1(full_u8(1, N, 1));
    cr_expect_eq(nfail, 0, "%s", msgs[0]);
    cr_expect_eq(reclaim_calls, 1);
    cr_expect_eq(atomic_load(&q.bytes), N + REC);
    exec1(full_u8(2, N, 1));
    exec1(full_u8(3, N, 1));
    cr_expect_eq(nfail, 1, "nothing left to reclaim");
    cr_expect_eq(reclaim_calls, 2);
}

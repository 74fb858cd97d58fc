/* Unit tests for engine/session.c: ids, poisoning, ranges, quotas, release. Drives the
 * session the way the server does, with ops built by hand. */
#include "engine/device.h"
#include "engine/session.h"
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

static td__session *s;
static char msgs[8][1024];
static uint32_t fail_idx[8];
static td_status fail_st[8];
static int nfail;

static void on_fail(void *arg, uint32_t idx, td_status st, const char *msg)
{
    (void)arg;
    if (nfail < 8) {
        fail_idx[nfail] = idx;
        fail_st[nfail] = st;
        snprintf(msgs[nfail], sizeof msgs[0], "%s", msg);
    }
    nfail++;
}

static void setup(void)
{
    char err[256];
    cr_assert_eq(td__devices_init(err, sizeof err), TD_OK, "%s", err);
    td__session_limits lim = {.max_bytes = 1 << 20, .max_tensors = 100};
    cr_assert_eq(td__session_create(td__device_find("cpu"), &lim, &s), TD_OK);
    nfail = 0;
}
static void teardown(void) { td__session_destroy(s); }

TestSuite(session, .init = setup, .fini = teardown);

static td__op full_op(uint64_t id, int64_t n, double v)
{
    return (td__op){.opcode = TD_OP_FULL, .dtype = TD_F32, .output = id, .n_iattrs = 1,
                    .iattrs = {n}, .fattrs = {v, 0}};
}

Test(session, exec_write_read)
{
    td__op ops[] = {full_op(1, 4, 2.5),
                    {.opcode = TD_OP_EMPTY, .dtype = TD_F32, .output = 2, .n_iattrs = 1,
                     .iattrs = {4}}};
    cr_assert_eq(td__session_exec(s, ops, 2, on_fail, NULL), 0);
    float in[4] = {1, 2, 3, 4}, out[4];
    char err[256];
    cr_assert_eq(td__session_write(s, 2, 0, in, sizeof in, err, sizeof err), TD_OK, "%s", err);
    td__op add = {.opcode = TD_OP_ADD, .n_inputs = 2, .inputs = {1, 2}, .output = 3};
    cr_assert_eq(td__session_exec(s, &add, 1, on_fail, NULL), 0);
    cr_assert_eq(td__session_read(s, 3, 0, out, sizeof out, err, sizeof err), TD_OK);
    /* 2.5 + [1,2,3,4] */
    cr_assert(out[0] == 3.5f && out[1] == 4.5f && out[2] == 5.5f && out[3] == 6.5f);
    cr_assert_eq(td__session_tensor_count(s), 3);
    cr_assert_eq(td__session_bytes(s), 48);
}

Test(session, unknown_input_poisons_dependents_only)
{
    td__op ops[] = {
        {.opcode = TD_OP_NEG, .n_inputs = 1, .inputs = {777}, .output = 10},
        {.opcode = TD_OP_NEG, .n_inputs = 1, .inputs = {10}, .output = 11},
        full_op(12, 2, 1.0),
    };
    cr_assert_eq(td__session_exec(s, ops, 3, on_fail, NULL), 1);
    cr_assert_eq(nfail, 1, "the dependent op is poisoned silently");
    cr_assert_eq(fail_idx[0], 0);
    cr_assert_eq(fail_st[0], TD_ENOTFOUND);
    cr_assert(strstr(msgs[0], "op 0 (neg): input 0: unknown tensor id 777"), "%s", msgs[0]);
    char err[512];
    float v[2];
    cr_assert_eq(td__session_read(s, 11, 0, v, 4, err, sizeof err), TD_EPOISONED);
    cr_assert(strstr(err, "unknown tensor id 777"), "root cause kept: %s", err);
    cr_assert_eq(td__session_read(s, 12, 0, v, 8, err, sizeof err), TD_OK);
}

Test(session, ranges_are_checked)
{
    td__op op = full_op(1, 4, 0);
    td__session_exec(s, &op, 1, on_fail, NULL);
    char err[256], buf[32] = {0};
    cr_assert_eq(td__session_write(s, 1, 12, buf, 8, err, sizeof err), TD_ERANGE);
    cr_assert(strstr(err, "outside tensor 1 of 16 bytes"), "%s", err);
    cr_assert_eq(td__session_write(s, 1, UINT64_MAX - 2, buf, 8, err, sizeof err), TD_ERANGE);
    cr_assert_eq(td__session_read(s, 1, 16, buf, 0, err, sizeof err), TD_OK, "empty at end");
    cr_assert_eq(td__session_read(s, 99, 0, buf, 0, err, sizeof err), TD_ENOTFOUND);
}

Test(session, duplicate_output_id_rejected)
{
    td__op ops[] = {full_op(5, 1, 1), full_op(5, 1, 2)};
    cr_assert_eq(td__session_exec(s, ops, 2, on_fail, NULL), 1);
    cr_assert(strstr(msgs[0], "output id 5 is already in use"), "%s", msgs[0]);
    float v;
    char err[128];
    cr_assert_eq(td__session_read(s, 5, 0, &v, 4, err, sizeof err), TD_OK);
    cr_assert_eq(v, 1.0f, "the first tensor is untouched");
}

Test(session, quotas)
{
    td__op big = {.opcode = TD_OP_EMPTY, .dtype = TD_U8, .output = 1, .n_iattrs = 1,
                  .iattrs = {(1 << 20) + 1}};
    cr_assert_eq(td__session_exec(s, &big, 1, on_fail, NULL), 1);
    cr_assert_eq(fail_st[0], TD_EQUOTA);
    cr_assert(strstr(msgs[0], "memory quota"), "%s", msgs[0]);
    td__op fit = big;
    /* The limit covers records too (engine/session.c): the poison record of op 1 (768
     * bytes) and this tensor's own record (384). */
    fit.iattrs[0] = (1 << 20) - 768 - 384;
    fit.output = 2;
    cr_assert_eq(td__session_exec(s, &fit, 1, on_fail, NULL), 0, "exactly the quota fits");
    td__op over = fit;
    over.iattrs[0] = 1;
    over.output = 3;
    cr_assert_eq(td__session_exec(s, &over, 1, on_fail, NULL), 1, "one byte more does not");
    td__session_release(s, (uint64_t[]){2}, 1);
    cr_assert_eq(td__session_bytes(s), 0);
    for (uint64_t id = 100; id < 200; id++) {
        td__op o = full_op(id, 1, 0);
        td__session_exec(s, &o, 1, on_fail, NULL);
    }
    cr_assert_eq(fail_st[nfail - 1], TD_EQUOTA, "tensor count quota of 100");
}

Test(session, reshape_aliases_and_release_keeps_data)
{
    td__op ops[] = {
        {.opcode = TD_OP_ARANGE, .dtype = TD_F32, .output = 1, .n_iattrs = 1, .iattrs = {6},
         .fattrs = {0, 1}},
        {.opcode = TD_OP_RESHAPE, .n_inputs = 1, .inputs = {1}, .output = 2, .n_iattrs = 2,
         .iattrs = {2, 3}},
    };
    cr_assert_eq(td__session_exec(s, ops, 2, on_fail, NULL), 0);
    cr_assert_eq(td__session_bytes(s), 24, "the alias is not charged twice");
    td__session_release(s, (uint64_t[]){1, 1, 424242}, 3);
    float v[6];
    char err[128];
    cr_assert_eq(td__session_read(s, 2, 0, v, sizeof v, err, sizeof err), TD_OK);
    cr_assert(v[0] == 0 && v[5] == 5);
}

Test(session, write_after_reshape_is_copy_on_write)
{
    /* y = reshape(x) is recorded before x is written: y keeps the old contents */
    td__op ops[] = {
        full_op(1, 4, 1.0),
        {.opcode = TD_OP_RESHAPE, .n_inputs = 1, .inputs = {1}, .output = 2, .n_iattrs = 2,
         .iattrs = {2, 2}},
    };
    cr_assert_eq(td__session_exec(s, ops, 2, on_fail, NULL), 0);
    float nv[2] = {7, 8}, x[4], y[4];
    char err[128];
    cr_assert_eq(td__session_write(s, 1, 4, nv, sizeof nv, err, sizeof err), TD_OK, "%s", err);
    cr_assert_eq(td__session_read(s, 1, 0, x, sizeof x, err, sizeof err), TD_OK);
    cr_assert_eq(td__session_read(s, 2, 0, y, sizeof y, err, sizeof err), TD_OK);
    cr_assert(x[0] == 1 && x[1] == 7 && x[2] == 8 && x[3] == 1, "partial write keeps the rest");
    cr_assert(y[0] == 1 && y[1] == 1 && y[2] == 1 && y[3] == 1, "alias unchanged");
}

Test(session, empty_tensors_never_show_old_memory)
{
    /* write a pattern, free it, then allocate EMPTY tensors of the same size: all zero */
    enum { N = 1 << 16 };
    static unsigned char pat[N], got[N];
    memset(pat, 0xA5, sizeof pat);
    char err[128];
    for (uint64_t round = 0; round < 4; round++) {
        td__op e = {.opcode = TD_OP_EMPTY, .dtype = TD_U8, .output = 10 + round, .n_iattrs = 1,
                    .iattrs = {N}};
        cr_assert_eq(td__session_exec(s, &e, 1, on_fail, NULL), 0);
        cr_assert_eq(td__session_read(s, 10 + round, 0, got, N, err, sizeof err), TD_OK);
        for (int i = 0; i < N; i++) cr_assert_eq(got[i], 0, "byte %d of round %llu", i,
                                                  (unsigned long long)round);
        cr_assert_eq(td__session_write(s, 10 + round, 0, pat, N, err, sizeof err), TD_OK);
        td__session_release(s, (uint64_t[]){10 + round}, 1);
    }
}

/* A CPU session has no backend that can pin host memory: td__session_can_pin says so, and
 * td__session_host_pin agrees (local_host_alloc asks the first to skip mapping pages the
 * second would only refuse). */
Test(session, cpu_session_cannot_pin)
{
    static unsigned char buf[4096];
    cr_assert(!td__session_can_pin(s));
    cr_assert_eq(td__session_host_pin(s, buf, sizeof buf), 0);
}

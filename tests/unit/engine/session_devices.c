/* Unit tests for sessions that span devices (engine/session.h: td__session_add_device,
 * td__session_to_device) and the device registry's rules (engine/device.h), on two CPU
 * devices (TENSORD_CPU_DEVICES=2, set before the registry opens: criterion runs each test
 * in a fresh process): a moved tensor keeps its bits and is charged like an op's output,
 * refused past the session's and the tenant's limits with the output poisoned; ops run on
 * their inputs' device and refuse inputs on two; the registry's names, filter entries,
 * placement candidates and default device. */
#include "engine/device.h"
#include "engine/session.h"
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REC 384    /* TD_TENSOR_RECORD_BYTES */
#define POISON 768 /* TD_POISON_RECORD_BYTES */

static td__session *s;
static td__quota q;
static char last_msg[1024];
static int nfail;

static void on_fail(void *arg, uint32_t idx, td_status st, const char *msg)
{
    (void)arg;
    (void)idx;
    (void)st;
    snprintf(last_msg, sizeof last_msg, "%s", msg);
    nfail++;
}

static void open_two(uint64_t session_max, uint64_t tenant_max)
{
    setenv("TENSORD_CPU_DEVICES", "2", 1);
    setenv("TENSORD_DEVICES", "cpu", 1); /* no Vulkan module's lavapipe device */
    char err[256];
    cr_assert_eq(td__devices_init(err, sizeof err), TD_OK, "%s", err);
    cr_assert_eq(td__device_count(), 2);
    td__quota_init(&q, "alice");
    td__quota_limits ql = {.max_bytes = tenant_max};
    td__quota_set_limits(&q, &ql);
    td__session_limits lim = {.max_bytes = session_max, .quota = &q};
    cr_assert_eq(td__session_create(td__device_find("cpu:0"), &lim, &s), TD_OK);
    uint32_t index = 0;
    cr_assert_eq(td__session_add_device(s, td__device_find("cpu:1"), &index, err, sizeof err),
                 TD_OK, "%s", err);
    cr_assert_eq(index, 1u);
    nfail = 0;
}

static void teardown(void)
{
    td__session_destroy(s);
    s = NULL;
    cr_expect_eq(atomic_load(&q.bytes), 0, "every byte given back at the end");
    cr_expect_eq(atomic_load(&q.tensors), 0);
}

static void no_limits(void) { open_two(0, 0); }
/* room for two 4000-byte tensors and the poison record of a refused third */
static void session_limit(void) { open_two(2 * REC + 2 * 4000 + POISON, 0); }
static void tenant_limit(void) { open_two(0, 2 * REC + 2 * 4000 + POISON); }

static td__op full(uint64_t out, int64_t n, double v)
{
    td__op op;
    memset(&op, 0, sizeof op);
    op.opcode = TD_OP_FULL;
    op.dtype = TD_F32;
    op.output = out;
    op.n_iattrs = 1;
    op.iattrs[0] = n;
    op.fattrs[0] = v;
    return op;
}

static td__op binary(uint32_t opcode, uint64_t out, uint64_t a, uint64_t b)
{
    td__op op;
    memset(&op, 0, sizeof op);
    op.opcode = opcode;
    op.dtype = TD_F32;
    op.output = out;
    op.n_inputs = 2;
    op.inputs[0] = a;
    op.inputs[1] = b;
    return op;
}

Test(devices, registry_names_and_rules, .init = no_limits, .fini = teardown)
{
    td__device *c0 = td__device_find("cpu:0"), *c1 = td__device_find("cpu:1");
    cr_assert_not_null(c0);
    cr_assert_not_null(c1);
    cr_expect_str_eq(c0->name, "cpu:0");
    cr_expect_eq(td__device_find("cpu"), c0, "plain cpu is cpu:0");
    cr_expect_eq(td__device_find(""), c0, "no accelerator: the default is the CPU");
    cr_expect_eq(td__device_default(), c0);
    cr_expect_null(td__device_find("cpu:2"));
    cr_expect_not(td__device_is_accelerator(c1));
    /* list entries: a kind names all of its devices, a name one */
    cr_expect(td__device_list_match(c1, "cpu"));
    cr_expect(td__device_list_match(c1, "cpu:1"));
    cr_expect_not(td__device_list_match(c0, "cpu:1"));
    cr_expect_not(td__device_list_match(c0, "cuda"));
    /* placement words */
    cr_expect(td__device_is_placement("auto"));
    cr_expect(td__device_is_placement("cuda"));
    cr_expect_not(td__device_is_placement("cpu"));
    cr_expect_not(td__device_is_placement("cuda:0"));
    cr_expect(td__device_place_candidate(c1, "auto"), "no accelerator: auto takes the CPUs");
    cr_expect_not(td__device_place_candidate(c1, "cuda"));
    /* a device twice, and a fifth one */
    char err[256];
    uint32_t index;
    cr_expect_eq(td__session_add_device(s, c1, &index, err, sizeof err), TD_EINVAL);
    cr_expect(strstr(err, "already device 1") != NULL, "%s", err);
    cr_expect_eq(td__session_device_count(s), 2u);
    cr_expect_eq(td__session_device(s, 1), c1);
    cr_expect_null(td__session_device(s, 2));
}

Test(devices, moves_keep_bits_and_ops_follow_their_inputs, .init = no_limits, .fini = teardown)
{
    float data[1000];
    for (int i = 0; i < 1000; i++) data[i] = (float)i * 0.37f - 11.0f;
    td__op mk = full(1, 1000, 0.0);
    cr_assert_eq(td__session_exec(s, &mk, 1, on_fail, NULL), 0u, "%s", last_msg);
    char err[512];
    cr_assert_eq(td__session_write(s, 1, 0, data, sizeof data, err, sizeof err), TD_OK, "%s",
                 err);
    cr_assert_eq(td__session_to_device(s, 1, 2, 1, err, sizeof err), TD_OK, "%s", err);
    float got[1000];
    cr_assert_eq(td__session_read(s, 2, 0, got, sizeof got, err, sizeof err), TD_OK, "%s", err);
    cr_expect_eq(memcmp(got, data, sizeof data), 0);
    cr_expect_eq(td__session_bytes(s), 8000u, "both copies are held");
    cr_expect_eq(atomic_load(&q.bytes), 8000u + 2 * REC);
    /* ops on the copy run on cpu:1; mixing devices fails naming both */
    td__op ops[2] = {binary(TD_OP_ADD, 3, 2, 2), binary(TD_OP_ADD, 4, 1, 2)};
    cr_expect_eq(td__session_exec(s, ops, 2, on_fail, NULL), 1u);
    cr_expect(strstr(last_msg, "op 1 (add): input 0 is on device cpu:0 and input 1 on device "
                     "cpu:1") != NULL, "%s", last_msg);
    td__desc d;
    td__buffer *b = NULL;
    cr_assert_eq(td__session_lookup(s, 3, &d, &b, err, sizeof err), TD_OK, "%s", err);
    cr_assert_not_null(b);
    cr_expect_eq(b->dev, td__device_find("cpu:1"), "the op ran on its inputs' device");
    td__buffer_unref(b);
    /* moving to the device it is on makes a copy there */
    cr_expect_eq(td__session_to_device(s, 3, 5, 1, err, sizeof err), TD_OK, "%s", err);
    uint64_t ids[] = {1, 2, 3, 4, 5};
    td__session_release(s, ids, 5);
    cr_expect_eq(td__session_bytes(s), 0u);
    cr_expect_eq(atomic_load(&q.bytes), 0u);
}

static void moves_refused_over(const char *what)
{
    td__op mk = full(1, 1000, 1.0);
    cr_assert_eq(td__session_exec(s, &mk, 1, on_fail, NULL), 0u, "%s", last_msg);
    char err[512];
    cr_assert_eq(td__session_to_device(s, 1, 2, 1, err, sizeof err), TD_OK, "%s", err);
    /* a third 4000-byte tensor passes the limit of two */
    cr_expect_eq(td__session_to_device(s, 2, 3, 0, err, sizeof err), TD_EQUOTA, "%s", err);
    cr_expect(strstr(err, what) != NULL, "'%s' lacks '%s'", err, what);
    cr_expect_eq(td__session_bytes(s), 8000u, "the refused copy holds nothing");
    float v;
    cr_expect_eq(td__session_read(s, 3, 0, &v, 4, err, sizeof err), TD_EPOISONED);
    cr_expect(strstr(err, "to_device") != NULL, "%s", err);
}

Test(devices, move_past_the_session_limit, .init = session_limit, .fini = teardown)
{
    moves_refused_over("session memory quota");
}

Test(devices, move_past_the_tenant_limit, .init = tenant_limit, .fini = teardown)
{
    moves_refused_over("max_bytes quota");
}

Test(devices, bad_moves, .init = no_limits, .fini = teardown)
{
    char err[512];
    td__op mk = full(1, 4, 1.0);
    cr_assert_eq(td__session_exec(s, &mk, 1, on_fail, NULL), 0u, "%s", last_msg);
    cr_expect_eq(td__session_to_device(s, 1, 0, 1, err, sizeof err), TD_EINVAL);
    cr_expect_eq(td__session_to_device(s, 1, TD_SESSION_ID_MAX + 1, 1, err, sizeof err),
                 TD_EINVAL);
    cr_expect_eq(td__session_to_device(s, 1, 1, 1, err, sizeof err), TD_EINVAL);
    cr_expect(strstr(err, "already in use") != NULL, "%s", err);
    cr_expect_eq(td__session_to_device(s, 1, 2, 2, err, sizeof err), TD_EINVAL);
    cr_expect(strstr(err, "device index 2, but the session has 2 devices") != NULL, "%s", err);
    cr_expect_eq(td__session_to_device(s, 99, 3, 1, err, sizeof err), TD_ENOTFOUND);
    /* a poisoned source poisons the copy with its own message */
    cr_expect_eq(td__session_to_device(s, 3, 4, 0, err, sizeof err), TD_EPOISONED);
    float v;
    cr_expect_eq(td__session_read(s, 4, 0, &v, 4, err, sizeof err), TD_EPOISONED);
    cr_expect(strstr(err, "unknown tensor id 99") != NULL, "%s", err);
}

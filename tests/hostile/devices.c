/* hostile/devices.c — the wire fields of sessions that span devices (protocol 4:
 * OpenSession.devices, ToDevice), sent raw by a client that is not libtensord, against a
 * tensord with three CPU devices: too many or unknown devices at open, placement words
 * where names belong, ToDevice with ids and device indexes out of range or in use, and an
 * op whose inputs a client put on two devices (the server refuses it, naming both). Each
 * case checks the status and message and that the server keeps serving. */
#include "engine/op.h"
#include "raw_session.h"
#include "server_fixture.h"
#include "suite_fixture.h"
#include "tensord.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void start_three(void)
{
    const char *args[] = {"--cpu-devices", "3", "--devices", "cpu", NULL};
    start_with(args);
}

/* Open a raw session on `device` plus `n` more; true when SessionOpened came, with its
 * device list's length in *n_devices (0 when it listed none). */
static bool open_with(raw_session *s, const char *device, const char *const *more, size_t n)
{
    if (!raw_start(s, srv.addr)) return false;
    Tensord__V1__OpenSession os = TENSORD__V1__OPEN_SESSION__INIT;
    os.protocol_min = TD_PROTOCOL_MIN;
    os.protocol_max = TD_PROTOCOL_MAX;
    os.device = (char *)(uintptr_t)device;
    os.client_name = (char *)"hostile-devices";
    os.n_devices = n;
    os.devices = (char **)(uintptr_t)more;
    Tensord__V1__ClientMessage cm = TENSORD__V1__CLIENT_MESSAGE__INIT;
    cm.body_case = TENSORD__V1__CLIENT_MESSAGE__BODY_OPEN;
    cm.open = &os;
    raw_msg m;
    if (!raw_send(s, &cm, NULL, 0, NULL)) {
        while (raw_recv(s, &m, 5000) == 1) raw_msg_fini(&m);
        return false;
    }
    int rc = raw_recv(s, &m, 10000);
    bool ok = rc == 1 && m.kind == TENSORD__V1__SERVER_MESSAGE__BODY_OPENED;
    if (rc == 1) raw_msg_fini(&m);
    if (!ok)
        while (raw_recv(s, &m, 5000) == 1) raw_msg_fini(&m);
    return ok;
}

static void expect_open_refused(const char *device, const char *const *more, size_t n,
                                grpc_status_code code, const char *needle)
{
    raw_session s;
    cr_assert_not(open_with(&s, device, more, n), "the open was accepted");
    cr_expect_eq(s.status, code, "status %d: %s", (int)s.status, raw_details(&s));
    cr_expect(strstr(raw_details(&s), needle) != NULL, "'%s' lacks '%s'", raw_details(&s),
              needle);
    raw_abort(&s);
}

static uint64_t send_to_device(raw_session *s, uint64_t tensor, uint64_t output,
                               uint32_t device)
{
    Tensord__V1__ToDevice td = TENSORD__V1__TO_DEVICE__INIT;
    td.tensor = tensor;
    td.output = output;
    td.device = device;
    Tensord__V1__ClientMessage cm = TENSORD__V1__CLIENT_MESSAGE__INIT;
    cm.body_case = TENSORD__V1__CLIENT_MESSAGE__BODY_TO_DEVICE;
    cm.to_device = &td;
    uint64_t seq = 0;
    cr_assert(raw_send(s, &cm, NULL, 0, &seq), "send failed");
    return seq;
}

/* Fence; the Failure for `seq` (required when want_status != 0) must carry want_status and
 * `needle`; no other Failure may come. */
static void expect_failure(raw_session *s, uint64_t seq, uint32_t want_status,
                           const char *needle)
{
    uint64_t fence = raw_send_fence(s);
    cr_assert_neq(fence, 0u);
    bool failed = false;
    for (;;) {
        raw_msg m;
        int rc = raw_recv(s, &m, 10000);
        cr_assert_eq(rc, 1, "session ended (rc %d, status %d: %s)", rc, (int)s->status,
                     raw_details(s));
        if (m.kind == TENSORD__V1__SERVER_MESSAGE__BODY_FAILURE) {
            cr_expect_eq(m.seq, seq, "Failure for seq %llu: %s", (unsigned long long)m.seq,
                         m.message);
            cr_expect_eq(m.status, want_status, "status %u: %s", m.status, m.message);
            cr_expect(strstr(m.message, needle) != NULL, "'%s' lacks '%s'", m.message, needle);
            failed = true;
        }
        bool done = m.kind == TENSORD__V1__SERVER_MESSAGE__BODY_FENCE && m.seq == fence;
        raw_msg_fini(&m);
        if (done) break;
    }
    cr_expect_eq(failed, want_status != 0, "Failure %s", failed ? "came" : "missing");
}

/* A read of `id` fails with `want_status` naming `needle`. */
static void expect_read_fails(raw_session *s, uint64_t id, uint32_t want_status,
                              const char *needle)
{
    uint64_t seq = raw_send_read(s, id, 0, 4);
    cr_assert_neq(seq, 0u);
    raw_msg m;
    cr_assert_eq(raw_recv(s, &m, 10000), 1);
    cr_expect_eq(m.kind, TENSORD__V1__SERVER_MESSAGE__BODY_FAILURE);
    cr_expect_eq(m.status, want_status, "status %u: %s", m.status, m.message);
    cr_expect(strstr(m.message, needle) != NULL, "'%s' lacks '%s'", m.message, needle);
    raw_msg_fini(&m);
}

static void expect_server_works(void)
{
    raw_session s;
    cr_assert(raw_open(&s, srv.addr, TD_PROTOCOL_MIN, TD_PROTOCOL_MAX, "cpu:1"));
    td__op op = raw_op_full(9, TD_F32, 1, (int64_t[]){3}, 2.5);
    cr_assert_neq(raw_send_ops(&s, &op, 1), 0u);
    uint64_t rseq = raw_send_read(&s, 9, 0, 12);
    float got[3] = {0, 0, 0};
    size_t have = 0;
    for (;;) {
        raw_msg m;
        cr_assert_eq(raw_recv(&s, &m, 10000), 1);
        cr_assert_neq(m.kind, TENSORD__V1__SERVER_MESSAGE__BODY_FAILURE, "%s", m.message);
        bool last = m.kind == TENSORD__V1__SERVER_MESSAGE__BODY_READ && m.seq == rseq && m.last;
        if (m.kind == TENSORD__V1__SERVER_MESSAGE__BODY_READ && have + m.payload_len <= 12) {
            memcpy((char *)got + have, m.payload, m.payload_len);
            have += m.payload_len;
        }
        raw_msg_fini(&m);
        if (last) break;
    }
    cr_expect_eq(got[2], 2.5f);
    cr_expect_eq(raw_close(&s), GRPC_STATUS_OK);
}

Test(devices, open_with_bad_device_lists, .init = start_three, .fini = stop, .timeout = 60)
{
    const char *four[] = {"cpu:1", "cpu:2", "cpu:0", "cpu:1"};
    expect_open_refused("cpu:0", four, 4, GRPC_STATUS_INVALID_ARGUMENT, "at most 4 devices");
    const char *unknown[] = {"cuda:9"};
    expect_open_refused("cpu:0", unknown, 1, GRPC_STATUS_INVALID_ARGUMENT,
                        "'cuda:9' is not a device of this server");
    const char *placement[] = {"auto"};
    expect_open_refused("cpu:0", placement, 1, GRPC_STATUS_INVALID_ARGUMENT, "'auto'");
    const char *empty[] = {""};
    expect_open_refused("cpu:0", empty, 1, GRPC_STATUS_INVALID_ARGUMENT,
                        "is not a device of this server");
    const char *garbage[] = {"cpu:1\n\x01\xff"};
    expect_open_refused("cpu:0", garbage, 1, GRPC_STATUS_INVALID_ARGUMENT,
                        "is not a device of this server");
    const char *dup[] = {"cpu:2", "cpu:2"};
    expect_open_refused("cpu:0", dup, 2, GRPC_STATUS_INVALID_ARGUMENT, "named twice");
    const char *self[] = {"cpu:0"};
    expect_open_refused("cpu", self, 1, GRPC_STATUS_INVALID_ARGUMENT, "named twice");
    /* "auto" places the first device among those not named after it: none is left here */
    const char *all[] = {"cpu:0", "cpu:1", "cpu:2"};
    expect_open_refused("auto", all, 3, GRPC_STATUS_INVALID_ARGUMENT,
                        "no device for 'auto' other than the session's further devices");
    expect_server_works();
}

Test(devices, to_device_out_of_range, .init = start_three, .fini = stop, .timeout = 60)
{
    raw_session s;
    const char *more[] = {"cpu:2"};
    cr_assert(open_with(&s, "cpu:0", more, 1), "%s", raw_details(&s));
    td__op op = raw_op_full(1, TD_F32, 1, (int64_t[]){4}, 1.5);
    cr_assert_neq(raw_send_ops(&s, &op, 1), 0u);
    /* checked on arrival: index past the wire limit, zero and engine-range ids */
    expect_failure(&s, send_to_device(&s, 1, 2, 4), TD_EPROTO, "device below 4");
    expect_failure(&s, send_to_device(&s, 1, 2, UINT32_MAX), TD_EPROTO, "device 4294967295");
    expect_failure(&s, send_to_device(&s, 0, 2, 1), TD_EPROTO, "tensor 0");
    expect_failure(&s, send_to_device(&s, 1, 0, 1), TD_EPROTO, "output 0");
    expect_failure(&s, send_to_device(&s, 1, UINT64_C(1) << 62, 1), TD_EPROTO,
                   "output 4611686018427387904");
    expect_failure(&s, send_to_device(&s, 1, UINT64_MAX, 1), TD_EPROTO, "want tensor and output");
    /* checked by the session: a device index it does not have, unknown source, output in
     * use (the live tensor stays intact) */
    uint64_t seq = send_to_device(&s, 1, 3, 2);
    expect_failure(&s, seq, TD_EINVAL, "device index 2, but the session has 2 devices");
    expect_read_fails(&s, 3, TD_EPOISONED, "device index 2");
    expect_failure(&s, send_to_device(&s, 77, 4, 1), TD_ENOTFOUND, "unknown tensor id 77");
    expect_failure(&s, send_to_device(&s, 1, 1, 1), TD_EINVAL, "output id 1 is already in use");
    /* a valid move still works afterwards, and a poisoned source poisons silently */
    expect_failure(&s, send_to_device(&s, 1, 5, 1), 0, "");
    expect_failure(&s, send_to_device(&s, 3, 6, 0), 0, "");
    expect_read_fails(&s, 6, TD_EPOISONED, "device index 2");
    cr_expect_eq(raw_close(&s), GRPC_STATUS_OK);
    expect_server_works();
}

Test(devices, to_device_on_a_one_device_session, .init = start_three, .fini = stop,
     .timeout = 60)
{
    raw_session s;
    cr_assert(raw_open(&s, srv.addr, TD_PROTOCOL_MIN, TD_PROTOCOL_MAX, "cpu:1"));
    td__op op = raw_op_full(1, TD_F32, 1, (int64_t[]){4}, 1.5);
    cr_assert_neq(raw_send_ops(&s, &op, 1), 0u);
    expect_failure(&s, send_to_device(&s, 1, 2, 1), TD_EINVAL, "the session has 1 device");
    cr_expect_eq(raw_close(&s), GRPC_STATUS_OK);
}

Test(devices, op_with_inputs_on_two_devices_is_refused, .init = start_three, .fini = stop,
     .timeout = 60)
{
    raw_session s;
    const char *more[] = {"cpu:1"};
    cr_assert(open_with(&s, "cpu:0", more, 1), "%s", raw_details(&s));
    td__op full = raw_op_full(1, TD_F32, 1, (int64_t[]){4}, 1.5);
    cr_assert_neq(raw_send_ops(&s, &full, 1), 0u);
    expect_failure(&s, send_to_device(&s, 1, 2, 1), 0, "");
    td__op add = raw_op_binary(TD_OP_ADD, 3, 1, 2);
    uint64_t seq = raw_send_ops(&s, &add, 1);
    expect_failure(&s, seq, TD_EINVAL, "input 0 is on device cpu:0 and input 1 on device cpu:1");
    expect_read_fails(&s, 3, TD_EPOISONED, "on device cpu:1");
    /* the same op on one device is fine */
    td__op add2 = raw_op_binary(TD_OP_ADD, 4, 2, 2);
    expect_failure(&s, raw_send_ops(&s, &add2, 1), 0, "");
    cr_expect_eq(raw_close(&s), GRPC_STATUS_OK);
    expect_server_works();
}

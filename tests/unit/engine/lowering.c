/* Unit tests for the engine's lowering of composites (engine/session.c, exec_lowered):
 * SOFTMAX and LOG_SOFTMAX on a CPU device whose backend hides its native kernels (and on
 * the plain CPU with the lowering forced), against float64 references computed here and
 * bit for bit against the native CPU kernels (op.h's contract); temporaries released;
 * a failing step named; time slices. */
#include "engine/device.h"
#include "engine/session.h"
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static td__backend hiding; /* the CPU backend without SOFTMAX/LOG_SOFTMAX (and maybe EXP) */
static bool hide_exp;
static td__device fake;
static td__session *s;
static char msgs[8][1024];
static td_status fail_st[8];
static int nfail;

static bool hide_composites(td__device *dev, const td__op *op, const td__desc *const *in,
                            const td__desc *out)
{
    if (td__op_class(op->opcode) == TD_OPCLASS_SOFTMAX) return false;
    if (hide_exp && op->opcode == TD_OP_EXP) return false;
    return td__cpu_backend.supports_op(dev, op, in, out);
}

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

static void setup(void)
{
    char err[256];
    cr_assert_eq(td__devices_init(err, sizeof err), TD_OK, "%s", err);
    hiding = td__cpu_backend;
    hiding.supports_op = hide_composites;
    hide_exp = false;
    fake = *td__device_find("cpu");
    fake.backend = &hiding;
    td__session_limits lim = {.max_bytes = 1 << 20, .max_tensors = 100};
    cr_assert_eq(td__session_create(&fake, &lim, &s), TD_OK);
    nfail = 0;
}
static void teardown(void) { td__session_destroy(s); }

TestSuite(lowering, .init = setup, .fini = teardown);

/* Tensor `id` of dtype dt and shape [r, c] holding `v`. */
static void put(td__session *ss, uint64_t id, uint32_t dt, int64_t r, int64_t c, const void *v)
{
    td__op e = {.opcode = TD_OP_EMPTY, .dtype = dt, .output = id, .n_iattrs = 2, .iattrs = {r, c}};
    cr_assert_eq(td__session_exec(ss, &e, 1, on_fail, NULL), 0);
    char err[256];
    size_t n = (size_t)(r * c) * (dt == TD_F32 ? 4 : 8);
    cr_assert_eq(td__session_write(ss, id, 0, v, n, err, sizeof err), TD_OK, "%s", err);
}

static td__op sm_op(uint32_t opcode, uint64_t in, uint64_t out, int64_t axis)
{
    return (td__op){.opcode = opcode, .n_inputs = 1, .inputs = {in}, .output = out,
                    .n_iattrs = 1, .iattrs = {axis}};
}

/* Rows of 5 with a large spread, a constant row, -inf entries and a NaN row. */
static const float X[3][5] = {{1.0f, 2.0f, 3.0f, 4.0f, 5.0f},
                              {-1e4f, 0.5f, 0.5f, -INFINITY, 30.0f},
                              {0.25f, NAN, -2.0f, 7.0f, 1.0f}};

Test(lowering, softmax_where_the_backend_has_no_kernel)
{
    put(s, 1, TD_F32, 3, 5, X);
    uint64_t before = td__session_tensor_count(s), bytes = td__session_bytes(s);
    td__op op = sm_op(TD_OP_SOFTMAX, 1, 2, 1);
    cr_assert_eq(td__session_exec(s, &op, 1, on_fail, NULL), 0, "%s", msgs[0]);
    cr_assert_eq(td__session_tensor_count(s), before + 1, "temporaries released");
    cr_assert_eq(td__session_bytes(s), bytes + 60, "only the output's 60 bytes stay");
    float y[3][5];
    char err[256];
    cr_assert_eq(td__session_read(s, 2, 0, y, sizeof y, err, sizeof err), TD_OK, "%s", err);
    /* float64 reference per row: e^(x - max) / sum */
    for (int r = 0; r < 2; r++) {
        double m = -INFINITY, sum = 0;
        for (int i = 0; i < 5; i++) m = fmax(m, X[r][i]);
        for (int i = 0; i < 5; i++) sum += exp((double)X[r][i] - m);
        for (int i = 0; i < 5; i++) {
            double want = exp((double)X[r][i] - m) / sum;
            cr_assert(fabs(y[r][i] - want) <= 4e-7 * want + 1e-45, "row %d col %d: %.9g vs %.9g",
                      r, i, (double)y[r][i], want);
        }
    }
    cr_assert_eq(y[1][3], 0.0f, "e^-inf is 0");
    for (int i = 0; i < 5; i++) cr_assert(isnan(y[2][i]), "a NaN row is NaN (max propagates)");
}

/* The lowered result equals the native CPU kernel bit for bit (op.h's contract). */
static void same_as_native(uint32_t opcode, uint32_t dt)
{
    td__session *native;
    cr_assert_eq(td__session_create(td__device_find("cpu"), NULL, &native), TD_OK);
    td__session_set_force_lowering(native, false);
    double xd[3][5];
    for (int r = 0; r < 3; r++)
        for (int i = 0; i < 5; i++) xd[r][i] = X[r][i] * (1.0 + r * 0.3183098861837907);
    const void *x = dt == TD_F32 ? (const void *)X : (const void *)xd;
    put(s, 1, dt, 3, 5, x);
    put(native, 1, dt, 3, 5, x);
    for (int64_t axis = 0; axis < 2; axis++) {
        td__op op = sm_op(opcode, 1, 10 + (uint64_t)axis, axis);
        cr_assert_eq(td__session_exec(s, &op, 1, on_fail, NULL), 0, "%s", msgs[0]);
        cr_assert_eq(td__session_exec(native, &op, 1, on_fail, NULL), 0, "%s", msgs[0]);
        unsigned char a[120], b[120];
        char err[256];
        size_t n = 15 * (dt == TD_F32 ? 4 : 8);
        cr_assert_eq(td__session_read(s, op.output, 0, a, n, err, sizeof err), TD_OK);
        cr_assert_eq(td__session_read(native, op.output, 0, b, n, err, sizeof err), TD_OK);
        cr_assert_eq(memcmp(a, b, n), 0, "%s %s axis %lld: lowered differs from the native kernel",
                     td__op_name(opcode), td_dtype_name((td_dtype)dt), (long long)axis);
    }
    td__session_destroy(native);
    const uint64_t ids[] = {1, 10, 11};
    td__session_release(s, ids, 3);
}

Test(lowering, bit_identical_to_native_cpu)
{
    same_as_native(TD_OP_SOFTMAX, TD_F32);
    same_as_native(TD_OP_SOFTMAX, TD_F64);
    same_as_native(TD_OP_LOG_SOFTMAX, TD_F32);
    same_as_native(TD_OP_LOG_SOFTMAX, TD_F64);
}

Test(lowering, forced_on_the_plain_cpu)
{
    td__session *cpu;
    cr_assert_eq(td__session_create(td__device_find("cpu"), NULL, &cpu), TD_OK);
    td__session_set_force_lowering(cpu, true);
    const double x[1][4] = {{0.0, 1.0, 2.0, 3.0}};
    put(cpu, 1, TD_F64, 1, 4, x);
    td__op op = sm_op(TD_OP_LOG_SOFTMAX, 1, 2, 1);
    cr_assert_eq(td__session_exec(cpu, &op, 1, on_fail, NULL), 0, "%s", msgs[0]);
    double y[4];
    char err[256];
    cr_assert_eq(td__session_read(cpu, 2, 0, y, sizeof y, err, sizeof err), TD_OK);
    /* log_softmax of 0..3: x - 3 - log(e^-3 + e^-2 + e^-1 + 1) = x - 3.4401896985611953 */
    for (int i = 0; i < 4; i++)
        cr_assert(fabs(y[i] - (i - 3.4401896985611953)) < 1e-15, "%d: %.17g", i, y[i]);
    cr_assert_eq(td__session_tensor_count(cpu), 2);
    td__session_destroy(cpu);
}

Test(lowering, failing_step_is_named_and_leaks_nothing)
{
    hide_exp = true;
    put(s, 1, TD_F32, 3, 5, X);
    td__op op = sm_op(TD_OP_SOFTMAX, 1, 2, 1);
    cr_assert_eq(td__session_exec(s, &op, 1, on_fail, NULL), 1);
    cr_assert_eq(fail_st[0], TD_EUNSUPPORTED);
    cr_assert_str_eq(msgs[0], "op 0 (softmax): lowered step 2 (exp): not supported on device cpu "
                                 "for dtype f32");
    cr_assert_eq(td__session_tensor_count(s), 2, "the input and the poisoned output only");
    char err[512];
    float y[15];
    cr_assert_eq(td__session_read(s, 2, 0, y, sizeof y, err, sizeof err), TD_EPOISONED);
    cr_assert(strstr(err, "lowered step 2 (exp)"), "%s", err);
}

Test(lowering, temporaries_count_against_the_quota)
{
    td__session *q;
    td__session_limits lim = {.max_tensors = 3};
    cr_assert_eq(td__session_create(&fake, &lim, &q), TD_OK);
    put(q, 1, TD_F32, 3, 5, X);
    td__op op = sm_op(TD_OP_SOFTMAX, 1, 2, 1);
    nfail = 0;
    cr_assert_eq(td__session_exec(q, &op, 1, on_fail, NULL), 1);
    cr_assert_eq(fail_st[0], TD_EQUOTA, "%s", msgs[0]);
    cr_assert(strstr(msgs[0], "op 0 (softmax): lowered step 2 (exp): session tensor quota of 3 reached"),
              "%s", msgs[0]);
    cr_assert_eq(td__session_tensor_count(q), 2, "temporaries released, output poisoned");
    td__session_destroy(q);
}

Test(lowering, one_time_slice_runs_a_whole_composite)
{
    put(s, 1, TD_F32, 3, 5, X);
    td__op ops[] = {sm_op(TD_OP_SOFTMAX, 1, 2, 1), sm_op(TD_OP_LOG_SOFTMAX, 2, 3, 0)};
    size_t failures = 0;
    cr_assert_eq(td__session_exec_slice(s, ops, 0, 2, 0, false, on_fail, NULL, &failures), 1);
    cr_assert_eq(td__session_tensor_count(s), 2, "composite done, temporaries gone");
    cr_assert_eq(td__session_exec_slice(s, ops, 1, 2, 0, false, on_fail, NULL, &failures), 2);
    cr_assert_eq(failures, 0, "%s", msgs[0]);
    cr_assert_eq(td__session_tensor_count(s), 3);
}

Test(lowering, clients_cannot_name_the_lowering_ids)
{
    td__op op = {.opcode = TD_OP_FULL, .dtype = TD_F32, .output = TD_LOWER_TEMP_BASE};
    cr_assert_eq(td__session_exec(s, &op, 1, on_fail, NULL), 1);
    cr_assert_eq(fail_st[0], TD_EINVAL);
    cr_assert(strstr(msgs[0], "is outside 1.."), "%s", msgs[0]);
}

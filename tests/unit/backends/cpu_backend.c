/* cpu_backend.c — the CPU backend's vtable: device registry entries, buffers, supports_op,
 * exec's dispatch and refusals, and the attribute-only ops FULL and ARANGE (expected
 * values by hand, following the conversion rules in backends/cpu/cpu_internal.h). */
#include "cpu_test_util.h"
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

Test(cpu_backend, identity_and_device_count)
{
    cr_assert_str_eq(td__cpu_backend.kind, "cpu");
    cr_assert(td__cpu_backend.host_memory);
    int n = -1;
    cr_assert_eq(td__cpu_backend.device_count(&n), TD_OK);
    cr_assert_eq(n, 1);
    cr_assert_not_null(td__cpu_backend.exec);
    cr_assert_not_null(td__cpu_backend.supports_op);
}

Test(cpu_backend, open_sets_description_and_rejects_other_indices)
{
    td__device *dev = tu_open(3);
    cr_assert_str_eq(dev->description, "CPU, 3 threads, OpenBLAS");
    cr_assert_not_null(dev->impl);
    tu_close(dev);

    td__device other = {.backend = &td__cpu_backend};
    char err[64] = "";
    cr_assert_eq(td__cpu_backend.device_open(&other, 1, err, sizeof err), TD_EINVAL);
    cr_assert_str_eq(err, "cpu: no device 1");
}

Test(cpu_backend, bad_thread_env_falls_back_to_cpu_count)
{
    setenv("TENSORD_CPU_THREADS", "lots", 1);
    td__device *dev = tu_open(0);
    unsetenv("TENSORD_CPU_THREADS");
    char want[96];
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    if (ncpu < 1) ncpu = 1;
    if (ncpu > 256) ncpu = 256;
    snprintf(want, sizeof want, "CPU, %ld threads, OpenBLAS", ncpu);
    cr_assert_str_eq(dev->description, want);
    tu_close(dev);
}

Test(cpu_backend, memory_info)
{
    td__device *dev = tu_open(1);
    uint64_t total = 0, avail = 0;
    cr_assert_eq(td__cpu_backend.memory_info(dev, &total, &avail), TD_OK);
    cr_assert_gt(total, 1u << 20);
    cr_assert_leq(avail, total);
    tu_close(dev);
}

/* With several CPU devices each reports its own free memory: bytes one holds lower its
 * figure, not the others' (all used to report available memory / N alike). */
Test(cpu_backend, memory_info_counts_each_devices_bytes)
{
    setenv("TENSORD_CPU_DEVICES", "2", 1);
    int n = 0;
    cr_assert_eq(td__cpu_backend.device_count(&n), TD_OK);
    cr_assert_eq(n, 2);
    td__device d[2] = {{.backend = &td__cpu_backend}, {.backend = &td__cpu_backend}};
    char err[128] = "";
    for (int i = 0; i < 2; i++) {
        snprintf(d[i].name, sizeof d[i].name, "cpu:%d", i);
        cr_assert_eq(td__cpu_backend.device_open(&d[i], i, err, sizeof err), TD_OK, "%s", err);
    }
    uint64_t total[2], free_bytes[2];
    const size_t held = (size_t)256 << 20;
    cr_assert_eq(td__cpu_backend.memory_info(&d[1], &total[1], &free_bytes[1]), TD_OK);
    if (total[1] < 4 * (uint64_t)held) cr_skip_test("host too small: %llu bytes per device",
                                                    (unsigned long long)total[1]);
    void *p = NULL;
    cr_assert_eq(td__cpu_backend.buffer_alloc(&d[1], NULL, held, &p), TD_OK);
    memset(p, 1, held); /* touched: the host's available memory drops too */
    for (int i = 0; i < 2; i++)
        cr_assert_eq(td__cpu_backend.memory_info(&d[i], &total[i], &free_bytes[i]), TD_OK);
    cr_expect_eq(total[0], total[1]);
    cr_expect_gt(free_bytes[0], free_bytes[1] + held / 2, "cpu:0 free %llu, cpu:1 free %llu",
                 (unsigned long long)free_bytes[0], (unsigned long long)free_bytes[1]);
    td__cpu_backend.buffer_free(&d[1], NULL, p, held);
    for (int i = 0; i < 2; i++) td__cpu_backend.device_close(&d[i]);
    unsetenv("TENSORD_CPU_DEVICES");
}

Test(cpu_backend, buffers)
{
    td__device *dev = tu_open(1);
    void *p = NULL;
    cr_assert_eq(td__cpu_backend.buffer_alloc(dev, NULL, 100, &p), TD_OK);
    cr_assert_eq((uintptr_t)p % 64, 0);
    const char msg[] = "tensord";
    cr_assert_eq(td__cpu_backend.buffer_write(dev, NULL, p, 10, msg, sizeof msg), TD_OK);
    char back[sizeof msg];
    cr_assert_eq(td__cpu_backend.buffer_read(dev, NULL, p, 10, back, sizeof back), TD_OK);
    cr_assert_str_eq(back, "tensord");
    cr_assert_eq(td__cpu_backend.buffer_write(dev, NULL, p, 0, NULL, 0), TD_OK);
    td__cpu_backend.buffer_free(dev, NULL, p, 100);
    void *q = (void *)1;
    cr_assert_eq(td__cpu_backend.buffer_alloc(dev, NULL, (size_t)TD_MAX_TENSOR_BYTES + 1, &q),
                 TD_ENOMEM);
    cr_assert_eq(q, (void *)1, "out parameter touched on failure");
    tu_close(dev);
}

Test(cpu_backend, supports_op)
{
    td__device *dev = tu_open(1);
    td__desc f32 = {.dtype = TD_F32, .rank = 1, .dims = {4}};
    td__desc bl = {.dtype = TD_BOOL, .rank = 1, .dims = {4}};
    td__desc i64 = {.dtype = TD_I64, .rank = 0};
    const td__desc *f2[2] = {&f32, &f32}, *b2[2] = {&bl, &bl}, *b1[1] = {&bl};
    td__op op = tu_op(TD_OP_ADD, 0, NULL);
    op.n_inputs = 2;
    cr_assert(td__cpu_backend.supports_op(dev, &op, f2, &f32));
    cr_assert_not(td__cpu_backend.supports_op(dev, &op, b2, &bl), "add on bool has no kernel");
    op.opcode = TD_OP_EQ;
    cr_assert(td__cpu_backend.supports_op(dev, &op, b2, &bl));
    op.opcode = TD_OP_EXP;
    op.n_inputs = 1;
    cr_assert(td__cpu_backend.supports_op(dev, &op, f2, &f32));
    op.opcode = TD_OP_SUM;
    cr_assert_not(td__cpu_backend.supports_op(dev, &op, b1, &bl));
    op.opcode = TD_OP_ARGMAX;
    cr_assert(td__cpu_backend.supports_op(dev, &op, b1, &i64));
    /* the engine runs EMPTY and RESHAPE itself; the device still supports them */
    op.opcode = TD_OP_EMPTY;
    cr_assert(td__cpu_backend.supports_op(dev, &op, NULL, &f32));
    op.opcode = TD_OP_RESHAPE;
    cr_assert(td__cpu_backend.supports_op(dev, &op, f2, &f32));
    op.opcode = TD_OP_GATHER;
    cr_assert(td__cpu_backend.supports_op(dev, &op, f2, &f32));
    op.opcode = 99;
    cr_assert_not(td__cpu_backend.supports_op(dev, &op, f2, &f32));
    tu_close(dev);
}

Test(cpu_backend, exec_refuses_engine_ops)
{
    td__device *dev = tu_open(1);
    td__view out = tu_new(dev, TD_F32, 1, DIMS(2), NULL);
    cr_assert_eq(tu_exec(dev, tu_op(TD_OP_EMPTY, 1, DIMS(2)), NULL, 0, &out), TD_EINTERNAL);
    cr_assert_str_eq(tu_err, "cpu: empty is handled by the engine, not the backend");
    cr_assert_eq(tu_exec(dev, tu_op(TD_OP_RESHAPE, 1, DIMS(2)), &out, 1, &out), TD_EINTERNAL);
    cr_assert_eq(tu_exec(dev, tu_op(99, 0, NULL), NULL, 0, &out), TD_EINTERNAL);
    cr_assert_str_eq(tu_err, "cpu: unknown opcode 99");
    tu_free(dev, &out);
    tu_close(dev);
}

static td__view full(td__device *dev, uint32_t dt, double v, uint32_t rank, const int64_t *dims)
{
    td__view out = tu_new(dev, dt, rank, dims, NULL);
    td__op op = tu_op(TD_OP_FULL, rank, dims);
    op.dtype = dt;
    op.fattrs[0] = v;
    cr_assert_eq(tu_exec(dev, op, NULL, 0, &out), TD_OK, "%s", tu_err);
    return out;
}

Test(cpu_backend, full_converts_like_cast)
{
    td__device *dev = tu_open(2);
    /* 3.7 -> f32 3.7f, f64 3.7, ints truncate to 3, bool 1 */
    /* f16 3.7 = 947/256 (numpy float16(3.7)), bf16 = 0x406d = 237/64 (f32 0x406ccccd's top
     * half rounded up: the low half 0xcccd is above 0x8000) */
    const double want37[TD_DTYPE_COUNT] = {(float)3.7, 3.7, 3, 3, 3, 1, 947.0 / 256, 237.0 / 64,
                                           3, 3};
    /* -1e20: i32/i64 saturate low, u8 0, bool 1; NaN: ints 0, bool 1 */
    /* f16 overflows to -inf; bf16 is f32 0xe0ad78ec rounded down to 0xe0ad = -173 * 2^59;
     * i8/i16 saturate */
    const double wantneg[TD_DTYPE_COUNT] = {(float)-1e20, -1e20, INT32_MIN, (double)INT64_MIN,
                                            0, 1, -INFINITY, -173 * 0x1p59, -128, -32768};
    const double wantnan[TD_DTYPE_COUNT] = {NAN, NAN, 0, 0, 0, 1, NAN, NAN, 0, 0};
    for (uint32_t dt = 0; dt < TD_DTYPE_COUNT; dt++) {
        td__view o = full(dev, dt, 3.7, 2, DIMS(2, 3));
        double w[6];
        for (int i = 0; i < 6; i++) w[i] = want37[dt];
        tu_expect_eq(&o, w, 6, "3.7");
        tu_free(dev, &o);
        o = full(dev, dt, -1e20, 0, NULL);
        tu_expect_eq(&o, &wantneg[dt], 1, "-1e20");
        tu_free(dev, &o);
        o = full(dev, dt, NAN, 1, DIMS(1));
        tu_expect_eq(&o, &wantnan[dt], 1, "NaN");
        tu_free(dev, &o);
        o = full(dev, dt, 1.0, 2, DIMS(3, 0));
        cr_assert_null(o.data);
    }
    /* 2^53 is exact in i64; a large fill runs on the pool */
    td__view o = full(dev, TD_I64, 9007199254740992.0, 1, DIMS(100000));
    for (int i = 0; i < 100000; i++) cr_assert_eq(((int64_t *)o.data)[i], 9007199254740992ll);
    tu_free(dev, &o);
    tu_close(dev);
}

Test(cpu_backend, arange)
{
    td__device *dev = tu_open(2);
    /* start 1.5, step -0.5, n 5: 1.5, 1.0, 0.5, 0.0, -0.5 */
    static const double want[TD_DTYPE_COUNT][5] = {
        [TD_F32] = {1.5, 1.0, 0.5, 0.0, -0.5}, [TD_F64] = {1.5, 1.0, 0.5, 0.0, -0.5},
        [TD_I32] = {1, 1, 0, 0, 0},            [TD_I64] = {1, 1, 0, 0, 0},
        [TD_U8] = {1, 1, 0, 0, 0},             [TD_BOOL] = {1, 1, 1, 0, 1},
        [TD_F16] = {1.5, 1.0, 0.5, 0.0, -0.5}, [TD_BF16] = {1.5, 1.0, 0.5, 0.0, -0.5},
        [TD_I8] = {1, 1, 0, 0, 0},             [TD_I16] = {1, 1, 0, 0, 0},
    };
    for (uint32_t dt = 0; dt < TD_DTYPE_COUNT; dt++) {
        td__view o = tu_new(dev, dt, 1, DIMS(5), NULL);
        td__op op = tu_op(TD_OP_ARANGE, 1, DIMS(5));
        op.dtype = dt;
        op.fattrs[0] = 1.5;
        op.fattrs[1] = -0.5;
        cr_assert_eq(tu_exec(dev, op, NULL, 0, &o), TD_OK);
        tu_expect_eq(&o, want[dt], 5, "arange");
        tu_free(dev, &o);
    }
    /* start + i * step in double: 0.1 * 3 is 0.30000000000000004, not 0.3 */
    td__view o = tu_new(dev, TD_F64, 1, DIMS(70000), NULL);
    td__op op = tu_op(TD_OP_ARANGE, 1, DIMS(70000));
    op.dtype = TD_F64;
    op.fattrs[1] = 0.1;
    cr_assert_eq(tu_exec(dev, op, NULL, 0, &o), TD_OK);
    for (int i = 0; i < 70000; i++) cr_assert_eq(((double *)o.data)[i], 0.0 + i * 0.1);
    cr_assert_eq(((double *)o.data)[3], 0.30000000000000004);
    tu_free(dev, &o);
    o = tu_new(dev, TD_F32, 1, DIMS(0), NULL);
    op = tu_op(TD_OP_ARANGE, 1, DIMS(0));
    op.dtype = TD_F32;
    cr_assert_eq(tu_exec(dev, op, NULL, 0, &o), TD_OK);
    tu_close(dev);
}

/* cpu_backend.c — the CPU backend's vtable: CPU devices whose buffers are plain, 64-byte
 * aligned host memory, and an exec() that dispatches each op to its kernel family.
 *
 * One device ("cpu") by default; TENSORD_CPU_DEVICES=N (tensord --cpu-devices N) makes N of
 * them (cpu:0 .. cpu:N-1), each with its own thread pool and its own count of the bytes
 * its buffers hold. Why: placement, device allow-lists and device-to-device copies are then
 * testable on machines without a GPU. Their memory_info splits the host's memory evenly:
 * total = physical memory / N, and free = min(total - held, (available + held by all CPU
 * devices) / N - held), `held` being the device's own bytes: the memory the CPU devices
 * could use, shared evenly, less what this one uses, so a device that holds more reports
 * less free memory, as a GPU would (free = min(total - held, available / N) reported the
 * same figure for every device whenever available / N was the smaller).
 *
 * The CPU backend is the reference every other backend is compared with, so its kernels
 * favour exactly stated semantics and bit-for-bit determinism (fixed partitioning over a
 * small thread pool, reductions in ascending index order) over the last bit of speed;
 * GEMM goes to OpenBLAS. The pool is created in device_open and lives as long as the device.
 */
#include "backends/cpu/cpu_bufpool.h"
#include "backends/cpu/cpu_internal.h"
#include "common/alloc.h"
#include "common/checked.h"
#include "common/errbuf.h"
#include "common/log.h"
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* At most this many CPU devices (the registry holds 16 devices of all kinds). */
#define TD_CPU_MAX_DEVICES 8

typedef struct td__cpu_device {
    td__cpu_pool *pool;
    atomic_ullong bytes; /* held by this device's live buffers */
} td__cpu_device;

/* The CPU device count, read once from the environment by cpu_device_count (the registry
 * asks it once, before opening any device); 1 until then. */
static atomic_int g_ndev = 1;
static atomic_ullong g_held_all; /* bytes held by every CPU device's live buffers */

/* TENSORD_CPU_DEVICES when it is an integer in 1..TD_CPU_MAX_DEVICES, else 1 (with one
 * warning). */
static int cpu_devices_env(void)
{
    const char *env = getenv("TENSORD_CPU_DEVICES");
    if (env == NULL || *env == '\0') return 1;
    char *end = NULL;
    long v = strtol(env, &end, 10);
    if (end != env && *end == '\0' && v >= 1 && v <= TD_CPU_MAX_DEVICES) return (int)v;
    td__log(TD_LOG_WARN, "cpu: ignoring TENSORD_CPU_DEVICES=\"%s\" (want 1..%d)", env,
            TD_CPU_MAX_DEVICES);
    return 1;
}

td_status td__cpu_fail(const td__cpu_exec *x, td_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    td__verrf(x->err, x->errlen, fmt, ap);
    va_end(ap);
    return s;
}

void td__cpu_run(const td__cpu_exec *x, int64_t n, int64_t cost, td__cpu_task_fn fn, void *ctx)
{
    if (n <= 0) return;
    if (cost < 1) cost = 1;
    int64_t work;
    if (__builtin_mul_overflow(n, cost, &work)) work = INT64_MAX;
    if (work < TD_CPU_PARALLEL_MIN || x->pool == NULL) {
        fn(ctx, 0, n);
        return;
    }
    int64_t grain = TD_CPU_GRAIN / cost;
    td__cpu_parallel_for(x->pool, n, grain < 1 ? 1 : grain, fn, ctx);
}

static td_status cpu_device_count(int *out)
{
    int n = cpu_devices_env();
    atomic_store(&g_ndev, n);
    *out = n;
    return TD_OK;
}

static td_status cpu_device_open(td__device *dev, int index, char *err, size_t errlen)
{
    if (index < 0 || index >= atomic_load(&g_ndev)) {
        if (err != NULL && errlen > 0) snprintf(err, errlen, "cpu: no device %d", index);
        return TD_EINVAL;
    }
    td__cpu_device *cd = td__calloc(1, sizeof *cd);
    if (cd == NULL) {
        if (err != NULL && errlen > 0) snprintf(err, errlen, "cpu: out of memory");
        return TD_ENOMEM;
    }
    td_status s = td__cpu_pool_create(td__cpu_default_threads(), &cd->pool);
    if (s != TD_OK) {
        td__free(cd);
        if (err != NULL && errlen > 0) snprintf(err, errlen, "cpu: cannot start thread pool");
        return s;
    }
    atomic_init(&cd->bytes, 0);
    dev->impl = cd;
    snprintf(dev->description, sizeof dev->description, "CPU, %d threads, OpenBLAS",
             td__cpu_pool_threads(cd->pool));
    return TD_OK;
}

static void cpu_device_close(td__device *dev)
{
    td__cpu_device *cd = dev->impl;
    if (cd == NULL) return;
    td__cpu_pool_destroy(cd->pool);
    td__free(cd);
    dev->impl = NULL;
}

static td_status cpu_memory_info(td__device *dev, uint64_t *total, uint64_t *free_bytes)
{
    const td__cpu_device *cd = dev->impl;
    const uint64_t ndev = (uint64_t)atomic_load(&g_ndev);
    long page = sysconf(_SC_PAGESIZE);
    long phys = sysconf(_SC_PHYS_PAGES);
    long avail = sysconf(_SC_AVPHYS_PAGES);
    uint64_t t = 0, f = 0;
    if (page > 0 && phys > 0 && !td__mul_u64((uint64_t)page, (uint64_t)phys, &t)) t = 0;
    if (page > 0 && avail > 0 && !td__mul_u64((uint64_t)page, (uint64_t)avail, &f)) f = 0;
    if (ndev > 1) {
        t /= ndev;
        uint64_t held = cd != NULL ? atomic_load(&cd->bytes) : 0;
        uint64_t all = atomic_load(&g_held_all), share = 0;
        if (!td__add_u64(f, all, &share)) share = UINT64_MAX;
        share /= ndev;
        f = held < share ? share - held : 0;
        uint64_t left = held < t ? t - held : 0;
        if (left < f) f = left;
    }
    *total = t;
    *free_bytes = f;
    return TD_OK;
}

/* Host memory: every access is the caller's own, so `stream` (always NULL) orders nothing. */
static td_status cpu_buffer_alloc(td__device *dev, void *stream, size_t nbytes, void **out)
{
    (void)stream;
    if (nbytes == 0 || nbytes > TD_MAX_TENSOR_BYTES) return TD_ENOMEM;
    void *p = NULL;
    if (nbytes >= TD_CPU_POOL_MIN_BYTES) {
        p = td__cpu_pool_alloc(nbytes);
        if (p == NULL) return TD_ENOMEM;
    } else if (posix_memalign(&p, 64, nbytes) != 0) {
        return TD_ENOMEM;
    }
    td__cpu_device *cd = dev != NULL ? dev->impl : NULL;
    if (cd != NULL) atomic_fetch_add(&cd->bytes, (unsigned long long)nbytes);
    atomic_fetch_add(&g_held_all, (unsigned long long)nbytes);
    *out = p;
    return TD_OK;
}

static void cpu_buffer_free(td__device *dev, void *stream, void *data, size_t nbytes)
{
    (void)stream;
    td__cpu_device *cd = dev != NULL ? dev->impl : NULL;
    if (cd != NULL) atomic_fetch_sub(&cd->bytes, (unsigned long long)nbytes);
    atomic_fetch_sub(&g_held_all, (unsigned long long)nbytes);
    if (nbytes >= TD_CPU_POOL_MIN_BYTES)
        td__cpu_pool_free(data, nbytes);
    else
        free(data);
}

static td_status cpu_buffer_write(td__device *dev, void *stream, void *dst, size_t offset,
                                  const void *src, size_t nbytes)
{
    (void)dev;
    (void)stream;
    if (nbytes > 0) memcpy((char *)dst + offset, src, nbytes);
    return TD_OK;
}

static td_status cpu_buffer_read(td__device *dev, void *stream, const void *src, size_t offset,
                                 void *dst, size_t nbytes)
{
    (void)dev;
    (void)stream;
    if (nbytes > 0) memcpy(dst, (const char *)src + offset, nbytes);
    return TD_OK;
}

/* BLAS takes int dims: a float matmul with any of M, N, K (or a leading dimension) above
 * INT32_MAX is not supported. */
static bool matmul_fits_blas(const td__desc *const *in, const td__desc *out)
{
    const td__desc *a = in[0];
    int64_t m = out->dims[out->rank - 2], n = out->dims[out->rank - 1];
    int64_t k = a->dims[a->rank - 1];
    return m <= INT32_MAX && n <= INT32_MAX && k <= INT32_MAX;
}

/* Whether this device runs the (validated) op natively: the op table's default (every
 * primitive, no composite), narrowed to the dtypes the kernel tables cover and the sizes
 * BLAS takes, plus the native SOFTMAX/LOG_SOFTMAX and SCALED_DOT_PRODUCT_ATTENTION kernels
 * (f32, f64). EMPTY and RESHAPE
 * answer true: the engine runs those two itself (buffer_alloc, aliasing). */
static bool cpu_supports_op(td__device *dev, const td__op *op, const td__desc *const *in,
                            const td__desc *out)
{
    (void)dev;
    switch (td__op_class(op->opcode)) {
    case TD_OPCLASS_UNARY: case TD_OPCLASS_BINARY: case TD_OPCLASS_COMPARE:
        return td__cpu_elementwise_supports(op->opcode, in[0]->dtype, out->dtype);
    case TD_OPCLASS_REDUCE:
        if (!td__op_default_supports(op->opcode)) return false;
        if (td__cpu_stats_op(op, in[0])) return true;
        return td__cpu_reduce_supports(op->opcode, in[0]->dtype);
    case TD_OPCLASS_MATMUL:
        return matmul_fits_blas(in, out) || !td__dtype_is_float(in[0]->dtype);
    case TD_OPCLASS_SOFTMAX:
        return in[0]->dtype == TD_F32 || in[0]->dtype == TD_F64;
    case TD_OPCLASS_NN:
        if (op->opcode == TD_OP_SCALED_DOT_PRODUCT_ATTENTION)
            return td__cpu_attention_supports(in, out);
        return td__op_default_supports(op->opcode);
    default:
        return td__op_default_supports(op->opcode);
    }
}

static td_status cpu_exec(td__device *dev, void *stream, const td__op *op, const td__view *in,
                          const td__view *out, char *err, size_t errlen)
{
    (void)stream;
    const td__cpu_device *cd = dev->impl;
    const td__cpu_exec x = {.pool = cd != NULL ? cd->pool : NULL, .err = err, .errlen = errlen};
    switch (td__op_class(op->opcode)) {
    case TD_OPCLASS_CREATE:
        if (op->opcode == TD_OP_EMPTY) break;
        return td__cpu_exec_create(&x, op, in, out);
    case TD_OPCLASS_UNARY:
        return td__cpu_exec_unary(&x, op, in, out);
    case TD_OPCLASS_BINARY:
    case TD_OPCLASS_COMPARE:
        return td__cpu_exec_binary(&x, op, in, out);
    case TD_OPCLASS_WHERE:
        return td__cpu_exec_where(&x, in, out);
    case TD_OPCLASS_CAST:
        return td__cpu_exec_cast(&x, in, out);
    case TD_OPCLASS_REDUCE:
        if (td__cpu_stats_op(op, &in[0].desc)) return td__cpu_exec_stats(&x, op, in, out);
        return td__cpu_exec_reduce(&x, op, in, out);
    case TD_OPCLASS_SCAN:
        return td__cpu_exec_scan(&x, op, in, out);
    case TD_OPCLASS_SORT:
        return td__cpu_exec_sort(&x, op, in, out);
    case TD_OPCLASS_MATMUL:
        return td__cpu_exec_matmul(&x, in, out);
    case TD_OPCLASS_MOVEMENT:
        if (op->opcode == TD_OP_RESHAPE) break;
        return td__cpu_exec_movement(&x, op, in, out);
    case TD_OPCLASS_SOFTMAX:
        return td__cpu_exec_softmax(&x, op, in, out);
    case TD_OPCLASS_NN:
        if (op->opcode == TD_OP_SCALED_DOT_PRODUCT_ATTENTION)
            return td__cpu_exec_attention(&x, op, in, out);
        return td__cpu_exec_nn(&x, op, in, out);
    case TD_OPCLASS_CONV:
        return td__cpu_exec_conv(&x, op, in, out);
    case TD_OPCLASS_POOL:
        return td__cpu_exec_window(&x, op, in, out);
    case TD_OPCLASS_NONE:
        return td__cpu_fail(&x, TD_EINTERNAL, "cpu: unknown opcode %u", op->opcode);
    }
    return td__cpu_fail(&x, TD_EINTERNAL, "cpu: %s is handled by the engine, not the backend",
                        td__op_name(op->opcode));
}

const td__backend td__cpu_backend = {
    .kind = "cpu",
    .host_memory = true,
    .device_count = cpu_device_count,
    .device_open = cpu_device_open,
    .device_close = cpu_device_close,
    .memory_info = cpu_memory_info,
    .buffer_alloc = cpu_buffer_alloc,
    .buffer_free = cpu_buffer_free,
    .buffer_write = cpu_buffer_write,
    .buffer_read = cpu_buffer_read,
    .stream_create = NULL,
    .stream_destroy = NULL,
    .stream_sync = NULL,
    .supports_op = cpu_supports_op,
    .exec = cpu_exec,
};

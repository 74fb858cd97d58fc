/* cpu_test_util.c — see cpu_test_util.h. */
#include "cpu_test_util.h"
#include "engine/convert.h"
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char tu_err[256];

td__device *tu_open(int threads)
{
    td__device *dev = calloc(1, sizeof *dev);
    cr_assert_not_null(dev);
    dev->backend = &td__cpu_backend;
    snprintf(dev->name, sizeof dev->name, "cpu");
    char old[64] = "";
    const char *env = getenv("TENSORD_CPU_THREADS");
    bool had = env != NULL;
    if (had) snprintf(old, sizeof old, "%s", env);
    if (threads > 0) {
        char buf[16];
        snprintf(buf, sizeof buf, "%d", threads);
        setenv("TENSORD_CPU_THREADS", buf, 1);
    }
    char err[128] = "";
    td_status s = td__cpu_backend.device_open(dev, 0, err, sizeof err);
    if (threads > 0) {
        if (had) {
            setenv("TENSORD_CPU_THREADS", old, 1);
        } else {
            unsetenv("TENSORD_CPU_THREADS");
        }
    }
    cr_assert_eq(s, TD_OK, "device_open: %s", err);
    return dev;
}

void tu_close(td__device *dev)
{
    if (dev == NULL) return;
    td__cpu_backend.device_close(dev);
    free(dev);
}

static size_t dtype_size(uint32_t dt)
{
    switch (dt) {
    case TD_F32: case TD_I32: return 4;
    case TD_F64: case TD_I64: return 8;
    case TD_F16: case TD_BF16: case TD_I16: return 2;
    default: return 1;
    }
}

int64_t tu_nelem(const td__view *v)
{
    int64_t n = 1;
    for (uint32_t i = 0; i < v->desc.rank; i++) n *= v->desc.dims[i];
    return n;
}

size_t tu_nbytes(const td__view *v) { return (size_t)tu_nelem(v) * dtype_size(v->desc.dtype); }

td__view tu_new(td__device *dev, uint32_t dtype, uint32_t rank, const int64_t *dims,
                const void *data)
{
    td__view v;
    memset(&v, 0, sizeof v);
    v.desc.dtype = dtype;
    v.desc.rank = rank;
    for (uint32_t i = 0; i < rank; i++) v.desc.dims[i] = dims[i];
    size_t nb = tu_nbytes(&v);
    if (nb > 0) {
        cr_assert_eq(td__cpu_backend.buffer_alloc(dev, NULL, nb, &v.data), TD_OK);
        cr_assert_eq((uintptr_t)v.data % 64, 0, "buffer not 64-byte aligned");
        if (data != NULL) {
            cr_assert_eq(td__cpu_backend.buffer_write(dev, NULL, v.data, 0, data, nb), TD_OK);
        } else {
            memset(v.data, 0xA5, nb); /* poison: kernels must write every element */
        }
    }
    return v;
}

td__view tu_from_doubles(td__device *dev, uint32_t dtype, uint32_t rank, const int64_t *dims,
                         const double *vals)
{
    td__view v = tu_new(dev, dtype, rank, dims, NULL);
    int64_t n = tu_nelem(&v);
    for (int64_t i = 0; i < n; i++) {
        switch (dtype) {
        case TD_F32: ((float *)v.data)[i] = (float)vals[i]; break;
        case TD_F64: ((double *)v.data)[i] = vals[i]; break;
        case TD_I32: ((int32_t *)v.data)[i] = (int32_t)vals[i]; break;
        case TD_I64: ((int64_t *)v.data)[i] = (int64_t)vals[i]; break;
        case TD_U8: ((uint8_t *)v.data)[i] = (uint8_t)vals[i]; break;
        case TD_BOOL: ((uint8_t *)v.data)[i] = vals[i] != 0.0; break;
        case TD_F16: ((uint16_t *)v.data)[i] = td__f64_to_f16(vals[i]); break;
        case TD_BF16: ((uint16_t *)v.data)[i] = td__f64_to_bf16(vals[i]); break;
        case TD_I8: ((int8_t *)v.data)[i] = (int8_t)vals[i]; break;
        case TD_I16: ((int16_t *)v.data)[i] = (int16_t)vals[i]; break;
        }
    }
    return v;
}

void tu_free(td__device *dev, td__view *v)
{
    if (v->data != NULL) td__cpu_backend.buffer_free(dev, NULL, v->data, tu_nbytes(v));
    v->data = NULL;
}

td__op tu_op(uint32_t opcode, uint32_t n_iattrs, const int64_t *iattrs)
{
    td__op op;
    memset(&op, 0, sizeof op);
    op.opcode = opcode;
    op.n_iattrs = n_iattrs;
    for (uint32_t i = 0; i < n_iattrs; i++) op.iattrs[i] = iattrs[i];
    return op;
}

td_status tu_exec(td__device *dev, td__op op, const td__view *in, uint32_t n_in,
                  const td__view *out)
{
    op.n_inputs = n_in;
    tu_err[0] = '\0';
    return td__cpu_backend.exec(dev, NULL, &op, in, out, tu_err, sizeof tu_err);
}

double tu_get(const td__view *v, int64_t i)
{
    switch (v->desc.dtype) {
    case TD_F32: return ((const float *)v->data)[i];
    case TD_F64: return ((const double *)v->data)[i];
    case TD_I32: return ((const int32_t *)v->data)[i];
    case TD_I64: return (double)((const int64_t *)v->data)[i];
    case TD_F16: return td__f16_to_f32(((const uint16_t *)v->data)[i]);
    case TD_BF16: return td__bf16_to_f32(((const uint16_t *)v->data)[i]);
    case TD_I8: return ((const int8_t *)v->data)[i];
    case TD_I16: return ((const int16_t *)v->data)[i];
    default: return ((const uint8_t *)v->data)[i];
    }
}

void tu_expect_close(const td__view *got, const double *want, int64_t n, double rtol,
                     double atol, const char *what)
{
    cr_assert_eq(tu_nelem(got), n, "%s: %lld elements, want %lld", what,
                 (long long)tu_nelem(got), (long long)n);
    for (int64_t i = 0; i < n; i++) {
        double g = tu_get(got, i), w = want[i];
        if (isnan(w) && isnan(g)) continue;
        if (isinf(w) && g == w) continue;
        cr_assert(fabs(g - w) <= atol + rtol * fabs(w), "%s[%lld]: got %.17g want %.17g",
                  what, (long long)i, g, w);
    }
}

void tu_expect_eq(const td__view *got, const double *want, int64_t n, const char *what)
{
    tu_expect_close(got, want, n, 0.0, 0.0, what);
}

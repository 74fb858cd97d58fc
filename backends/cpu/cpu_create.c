/* cpu_create.c — ops that make a tensor from attributes alone: FULL, ARANGE, RAND_UNIFORM,
 * RAND_NORMAL (the other random ops: cpu_random.c).
 *
 * The random ops follow engine/philox.h's (seed, index) mapping exactly: each thread's
 * chunk computes the Philox blocks its elements fall in, so a block that straddles a chunk
 * boundary is computed twice and both halves come out as if computed once. f16/bf16 draws
 * use the f32 mapping and round its double value once to the dtype.
 */
#include "backends/cpu/cpu_internal.h"
#include "engine/philox.h"
#include <string.h>

typedef struct create_task {
    const td__op *op;
    uint32_t dtype;
    void *data;
} create_task;

static void full_f32(void *ctx, int64_t lo, int64_t hi)
{
    const create_task *t = ctx;
    float v = (float)t->op->fattrs[0];
    float *o = t->data;
    for (int64_t i = lo; i < hi; i++) o[i] = v;
}

static void full_f64(void *ctx, int64_t lo, int64_t hi)
{
    const create_task *t = ctx;
    double v = t->op->fattrs[0];
    double *o = t->data;
    for (int64_t i = lo; i < hi; i++) o[i] = v;
}

static void full_i32(void *ctx, int64_t lo, int64_t hi)
{
    const create_task *t = ctx;
    int32_t v = td__cpu_sat_i32(t->op->fattrs[0]);
    int32_t *o = t->data;
    for (int64_t i = lo; i < hi; i++) o[i] = v;
}

static void full_i64(void *ctx, int64_t lo, int64_t hi)
{
    const create_task *t = ctx;
    int64_t v = td__cpu_sat_i64(t->op->fattrs[0]);
    int64_t *o = t->data;
    for (int64_t i = lo; i < hi; i++) o[i] = v;
}

static void full_bytes(void *ctx, int64_t lo, int64_t hi)
{
    const create_task *t = ctx;
    uint8_t v = t->dtype == TD_BOOL ? (uint8_t)(t->op->fattrs[0] != 0.0)
                                    : td__cpu_sat_u8(t->op->fattrs[0]);
    memset((uint8_t *)t->data + lo, v, (size_t)(hi - lo));
}

/* FULL of the 1- and 2-byte dtypes other than u8/bool: one conversion, then copies. */
static void full_any(void *ctx, int64_t lo, int64_t hi)
{
    const create_task *t = ctx;
    /* 8 bytes, so that no case of td__cpu_store_double's switch writes past it */
    union { uint64_t any; uint16_t h; } u = {0};
    td__cpu_store_double(t->dtype, &u, 0, t->op->fattrs[0]);
    const uint16_t v = u.h;
    if (td__cpu_dtype_size(t->dtype) == 1) {
        uint8_t b;
        memcpy(&b, &v, 1);
        memset((uint8_t *)t->data + lo, b, (size_t)(hi - lo));
        return;
    }
    uint16_t *o = t->data;
    for (int64_t i = lo; i < hi; i++) o[i] = v;
}

static void arange_any(void *ctx, int64_t lo, int64_t hi)
{
    const create_task *t = ctx;
    double start = t->op->fattrs[0], step = t->op->fattrs[1];
    for (int64_t i = lo; i < hi; i++)
        td__cpu_store_double(t->dtype, t->data, i, start + (double)i * step);
}

static void uniform_f32(void *ctx, int64_t lo, int64_t hi)
{
    const create_task *t = ctx;
    const double low = t->op->fattrs[0], high = t->op->fattrs[1];
    float *o = t->data;
    for (int64_t i = lo; i < hi;) {
        uint32_t w[4];
        td__philox_block(t->op->seed, (uint64_t)i / 4, w);
        int64_t end = (i / 4 + 1) * 4;
        if (end > hi) end = hi;
        for (; i < end; i++) o[i] = td__philox_uniform_f32_from(w, (uint64_t)i, low, high);
    }
}

static void uniform_f64(void *ctx, int64_t lo, int64_t hi)
{
    const create_task *t = ctx;
    const double low = t->op->fattrs[0], high = t->op->fattrs[1];
    double *o = t->data;
    for (int64_t i = lo; i < hi;) {
        uint32_t w[4];
        td__philox_block(t->op->seed, (uint64_t)i / 2, w);
        int64_t end = (i / 2 + 1) * 2;
        if (end > hi) end = hi;
        for (; i < end; i++) o[i] = td__philox_uniform_f64_from(w, (uint64_t)i, low, high);
    }
}

/* f16/bf16 draws: the f32 mapping's double value rounded once to the dtype (philox.h). */
static uint16_t round_half(uint32_t dtype, double v)
{
    return dtype == TD_F16 ? td__f64_to_f16(v) : td__f64_to_bf16(v);
}

static void uniform_half(void *ctx, int64_t lo, int64_t hi)
{
    const create_task *t = ctx;
    const double low = t->op->fattrs[0], high = t->op->fattrs[1];
    uint16_t *o = t->data;
    for (int64_t i = lo; i < hi;) {
        uint32_t w[4];
        td__philox_block(t->op->seed, (uint64_t)i / 4, w);
        int64_t end = (i / 4 + 1) * 4;
        if (end > hi) end = hi;
        for (; i < end; i++)
            o[i] = round_half(t->dtype, td__philox_uniform_u24_from(w, (uint64_t)i, low, high));
    }
}

/* Normal kernels compute each Box-Muller pair once and store the elements of it that fall
 * inside [lo, hi). */
static void normal_f32(void *ctx, int64_t lo, int64_t hi)
{
    const create_task *t = ctx;
    const double mean = t->op->fattrs[0], stddev = t->op->fattrs[1];
    float *o = t->data;
    uint32_t w[4] = {0, 0, 0, 0};
    for (int64_t p = lo / 2; p * 2 < hi; p++) {
        if (p == lo / 2 || p % 2 == 0) td__philox_block(t->op->seed, (uint64_t)p / 2, w);
        double z[2];
        td__philox_normal_f32_pair(w, (unsigned)(p % 2), z);
        for (int64_t e = 2 * p; e < 2 * p + 2; e++)
            if (e >= lo && e < hi) o[e] = (float)(mean + stddev * z[e - 2 * p]);
    }
}

static void normal_half(void *ctx, int64_t lo, int64_t hi)
{
    const create_task *t = ctx;
    const double mean = t->op->fattrs[0], stddev = t->op->fattrs[1];
    uint16_t *o = t->data;
    uint32_t w[4] = {0, 0, 0, 0};
    for (int64_t p = lo / 2; p * 2 < hi; p++) {
        if (p == lo / 2 || p % 2 == 0) td__philox_block(t->op->seed, (uint64_t)p / 2, w);
        double z[2];
        td__philox_normal_f32_pair(w, (unsigned)(p % 2), z);
        for (int64_t e = 2 * p; e < 2 * p + 2; e++)
            if (e >= lo && e < hi) o[e] = round_half(t->dtype, mean + stddev * z[e - 2 * p]);
    }
}

static void normal_f64(void *ctx, int64_t lo, int64_t hi)
{
    const create_task *t = ctx;
    const double mean = t->op->fattrs[0], stddev = t->op->fattrs[1];
    double *o = t->data;
    for (int64_t p = lo / 2; p * 2 < hi; p++) {
        uint32_t w[4];
        td__philox_block(t->op->seed, (uint64_t)p, w);
        double z[2];
        td__philox_normal_f64_pair(w, z);
        for (int64_t e = 2 * p; e < 2 * p + 2; e++)
            if (e >= lo && e < hi) o[e] = mean + stddev * z[e - 2 * p];
    }
}

td_status td__cpu_exec_create(const td__cpu_exec *x, const td__op *op, const td__view *in,
                              const td__view *out)
{
    const int64_t n = td__cpu_nelem(&out->desc);
    const uint32_t dt = out->desc.dtype;
    create_task t = {.op = op, .dtype = dt, .data = out->data};
    td__cpu_task_fn fn = NULL;
    int64_t cost = 1;
    switch (op->opcode) {
    case TD_OP_FULL:
        switch (dt) {
        case TD_F32: fn = full_f32; break;
        case TD_F64: fn = full_f64; break;
        case TD_I32: fn = full_i32; break;
        case TD_I64: fn = full_i64; break;
        case TD_U8: case TD_BOOL: fn = full_bytes; break;
        case TD_F16: case TD_BF16: case TD_I8: case TD_I16: fn = full_any; break;
        }
        break;
    case TD_OP_ARANGE:
        if (td__cpu_dtype_size(dt) != 0) fn = arange_any;
        break;
    case TD_OP_RAND_UNIFORM:
        fn = dt == TD_F32 ? uniform_f32 : dt == TD_F64 ? uniform_f64 : NULL;
        if (dt == TD_F16 || dt == TD_BF16) fn = uniform_half;
        cost = 8;
        break;
    case TD_OP_RAND_NORMAL:
        fn = dt == TD_F32 ? normal_f32 : dt == TD_F64 ? normal_f64 : NULL;
        if (dt == TD_F16 || dt == TD_BF16) fn = normal_half;
        cost = 32;
        break;
    case TD_OP_BERNOULLI: case TD_OP_BERNOULLI_SCALAR: case TD_OP_RANDINT:
    case TD_OP_RANDPERM: case TD_OP_TRUNC_NORMAL:
        return td__cpu_exec_random(x, op, in, out);
    }
    if (fn == NULL)
        return td__cpu_fail(x, TD_EINTERNAL, "cpu: no create kernel for opcode %u dtype %u",
                            op->opcode, dt);
    if (n > 0) td__cpu_run(x, n, cost, fn, &t);
    return TD_OK;
}

/* cpu_random.c — the random ops of issue 13: BERNOULLI, BERNOULLI_SCALAR, RANDINT,
 * TRUNC_NORMAL (RANDPERM, which sorts, is in cpu_sort.c).
 *
 * Each follows engine/philox.h's (seed, index) mapping: element i is a pure function of the
 * seed, i and the op's attributes, so each thread's chunk computes the Philox blocks its
 * elements fall in (a block that straddles a chunk boundary is computed twice, with the same
 * words) and the tensor does not depend on the thread count. backends/gpu/gpu_random.cu
 * mirrors these loops element for element.
 */
#include "backends/cpu/cpu_internal.h"
#include "engine/philox.h"

typedef struct random_task {
    const td__op *op;
    uint32_t dtype, p_dtype;
    const void *p; /* BERNOULLI's probabilities */
    void *data;
    td__truncnorm tn;
} random_task;

/* Element i of a float tensor of dtype dt, widened exactly to double. */
static double load_float(uint32_t dt, const void *base, int64_t i)
{
    switch (dt) {
    case TD_F32: return ((const float *)base)[i];
    case TD_F64: return ((const double *)base)[i];
    case TD_F16: return td__f16_to_f32(((const uint16_t *)base)[i]);
    default: return td__bf16_to_f32(((const uint16_t *)base)[i]);
    }
}

/* 0 or 1 in dtype dt (bool: the byte 1). */
static void store_bit(uint32_t dt, void *base, int64_t i, int bit)
{
    td__cpu_store_double(dt, base, i, bit ? 1.0 : 0.0);
}

static void bernoulli_chunk(void *ctx, int64_t lo, int64_t hi)
{
    const random_task *t = ctx;
    const double ps = t->op->fattrs[0];
    for (int64_t i = lo; i < hi;) {
        uint32_t w[4];
        td__philox_block(t->op->seed, (uint64_t)i / 4, w);
        int64_t end = (i / 4 + 1) * 4;
        if (end > hi) end = hi;
        for (; i < end; i++) {
            const double p = t->p != NULL ? load_float(t->p_dtype, t->p, i) : ps;
            store_bit(t->dtype, t->data, i, td__philox_bernoulli(w[i % 4], p));
        }
    }
}

static void randint_chunk(void *ctx, int64_t lo, int64_t hi)
{
    const random_task *t = ctx;
    const int64_t low = t->op->iattrs[0], high = t->op->iattrs[1];
    for (int64_t i = lo; i < hi;) {
        uint32_t w[4];
        td__philox_block(t->op->seed, (uint64_t)i / 2, w);
        int64_t end = (i / 2 + 1) * 2;
        if (end > hi) end = hi;
        for (; i < end; i++) {
            const int64_t v = td__philox_randint(td__philox_draw64(w, (uint64_t)i), low, high);
            switch (t->dtype) {
            case TD_I8: ((int8_t *)t->data)[i] = (int8_t)v; break;
            case TD_I16: ((int16_t *)t->data)[i] = (int16_t)v; break;
            case TD_I32: ((int32_t *)t->data)[i] = (int32_t)v; break;
            case TD_U8: ((uint8_t *)t->data)[i] = (uint8_t)v; break;
            default: ((int64_t *)t->data)[i] = v; break;
            }
        }
    }
}

static void truncnorm_chunk(void *ctx, int64_t lo, int64_t hi)
{
    const random_task *t = ctx;
    for (int64_t i = lo; i < hi;) {
        uint32_t w[4];
        td__philox_block(t->op->seed, (uint64_t)i / 2, w);
        int64_t end = (i / 2 + 1) * 2;
        if (end > hi) end = hi;
        for (; i < end; i++)
            td__cpu_store_double(t->dtype, t->data, i,
                                 td__truncnorm_value(&t->tn, td__philox_draw64(w, (uint64_t)i)));
    }
}

td_status td__cpu_exec_random(const td__cpu_exec *x, const td__op *op, const td__view *in,
                              const td__view *out)
{
    const int64_t n = td__cpu_nelem(&out->desc);
    random_task t = {.op = op, .dtype = out->desc.dtype, .data = out->data};
    td__cpu_task_fn fn = NULL;
    int64_t cost = 8;
    switch (op->opcode) {
    case TD_OP_BERNOULLI:
        t.p = in[0].data;
        t.p_dtype = in[0].desc.dtype;
        fn = bernoulli_chunk;
        break;
    case TD_OP_BERNOULLI_SCALAR: fn = bernoulli_chunk; break;
    case TD_OP_RANDINT: fn = randint_chunk; break;
    case TD_OP_TRUNC_NORMAL:
        t.tn = td__truncnorm_init(op->fattrs[0], op->fattrs[1], op->fattrs[2], op->fattrs[3]);
        fn = truncnorm_chunk;
        cost = 1024;
        break;
    case TD_OP_RANDPERM: return td__cpu_exec_randperm(x, op, out);
    }
    if (fn == NULL)
        return td__cpu_fail(x, TD_EINTERNAL, "cpu: no random kernel for opcode %u", op->opcode);
    if (n > 0) td__cpu_run(x, n, cost, fn, &t);
    return TD_OK;
}

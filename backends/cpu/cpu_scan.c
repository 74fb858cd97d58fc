/* cpu_scan.c — CUMSUM and CUMPROD along one axis.
 *
 * The contract (every backend; conformance.c states the bound for the others): x is viewed
 * as [outer, n, inner] around the axis (rank 0: one element); y_i folds x_0 .. x_i in
 * ascending order from 0 (1 for CUMPROD) in an accumulator — double for f32 and f64, f32
 * for f16 and bf16, uint64 with wraparound for integers (equal to wrapping in the dtype) —
 * and each y_i is the accumulator rounded once to the dtype. The CPU folds strictly in
 * order; lines are independent, so threads never change the bits.
 *
 * Why per-line tiles: when the axis is not innermost, a line's elements are `inner` apart;
 * a tile of up to TILE neighbouring lines is folded together, one axis index at a time, so
 * the reads stream through memory instead of striding.
 */
#include "backends/cpu/cpu_internal.h"
#include "common/alloc.h"

#define TILE 512

typedef struct scan_task {
    uint32_t dt;
    bool prod;
    int64_t n, inner, tiles; /* tiles per outer index */
    const void *x;
    void *y;
} scan_task;

#define SCAN_LOOP(T, ACC, LOADV, STOREV)                                                   \
    do {                                                                                   \
        const T *xs = (const T *)t->x + base;                                              \
        T *ys = (T *)t->y + base;                                                          \
        ACC acc[TILE];                                                                     \
        for (int64_t j = 0; j < c; j++) acc[j] = t->prod ? (ACC)1 : (ACC)0;                \
        for (int64_t k = 0; k < t->n; k++) {                                               \
            const T *xr = xs + k * t->inner;                                               \
            T *yr = ys + k * t->inner;                                                     \
            if (t->prod)                                                                   \
                for (int64_t j = 0; j < c; j++) {                                          \
                    acc[j] = acc[j] * (ACC)LOADV(xr[j]);                                   \
                    yr[j] = STOREV(acc[j]);                                                \
                }                                                                          \
            else                                                                           \
                for (int64_t j = 0; j < c; j++) {                                          \
                    acc[j] = acc[j] + (ACC)LOADV(xr[j]);                                   \
                    yr[j] = STOREV(acc[j]);                                                \
                }                                                                          \
        }                                                                                  \
    } while (0)

/* One contiguous line (inner 1): the same fold with one accumulator in a register. */
#define SCAN_LINE(T, ACC, LOADV, STOREV)                                                   \
    do {                                                                                   \
        const T *xs = (const T *)t->x + base;                                              \
        T *ys = (T *)t->y + base;                                                          \
        ACC acc = t->prod ? (ACC)1 : (ACC)0;                                               \
        if (t->prod)                                                                       \
            for (int64_t k = 0; k < t->n; k++) {                                           \
                acc = acc * (ACC)LOADV(xs[k]);                                             \
                ys[k] = STOREV(acc);                                                       \
            }                                                                              \
        else                                                                               \
            for (int64_t k = 0; k < t->n; k++) {                                           \
                acc = acc + (ACC)LOADV(xs[k]);                                             \
                ys[k] = STOREV(acc);                                                       \
            }                                                                              \
    } while (0)

#define SCAN_ANY(T, ACC, LOADV, STOREV)                                                    \
    do {                                                                                   \
        if (t->inner == 1)                                                                 \
            SCAN_LINE(T, ACC, LOADV, STOREV);                                              \
        else                                                                               \
            SCAN_LOOP(T, ACC, LOADV, STOREV);                                              \
    } while (0)

#define ID(v) (v)
#define WRAP64(v) ((uint64_t)(int64_t)(v))
#define F16IN(v) td__f16_to_f32(v)
#define BF16IN(v) td__bf16_to_f32(v)
#define F16OUT(a) td__f32_to_f16(a)
#define BF16OUT(a) td__f32_to_bf16(a)
#define TOF32(a) ((float)(a))
#define TOI32(a) ((int32_t)(uint32_t)(a))
#define TOI64(a) ((int64_t)(a))
#define TOU8(a) ((uint8_t)(a))
#define TOI8(a) ((int8_t)(uint8_t)(a))
#define TOI16(a) ((int16_t)(uint16_t)(a))

static void scan_chunk(void *ctx, int64_t lo, int64_t hi)
{
    const scan_task *t = ctx;
    for (int64_t u = lo; u < hi; u++) {
        const int64_t o = u / t->tiles, j0 = (u % t->tiles) * TILE;
        const int64_t c = t->inner - j0 < TILE ? t->inner - j0 : TILE;
        const int64_t base = o * t->n * t->inner + j0;
        switch (t->dt) {
        case TD_F32: SCAN_ANY(float, double, ID, TOF32); break;
        case TD_F64: SCAN_ANY(double, double, ID, ID); break;
        case TD_F16: SCAN_ANY(uint16_t, float, F16IN, F16OUT); break;
        case TD_BF16: SCAN_ANY(uint16_t, float, BF16IN, BF16OUT); break;
        case TD_I32: SCAN_ANY(int32_t, uint64_t, WRAP64, TOI32); break;
        case TD_I64: SCAN_ANY(int64_t, uint64_t, WRAP64, TOI64); break;
        case TD_U8: SCAN_ANY(uint8_t, uint64_t, ID, TOU8); break;
        case TD_I8: SCAN_ANY(int8_t, uint64_t, WRAP64, TOI8); break;
        case TD_I16: SCAN_ANY(int16_t, uint64_t, WRAP64, TOI16); break;
        }
    }
}

td_status td__cpu_exec_scan(const td__cpu_exec *x, const td__op *op, const td__view *in,
                            const td__view *out)
{
    const td__desc *d = &in[0].desc;
    const uint32_t dt = d->dtype;
    if (op->n_iattrs != 1 || dt == TD_BOOL || dt >= TD_DTYPE_COUNT || out->desc.dtype != dt)
        return td__cpu_fail(x, TD_EINTERNAL, "cpu: %s: bad op", td__op_name(op->opcode));
    const int64_t ax = op->iattrs[0];
    scan_task t = {.dt = dt, .prod = op->opcode == TD_OP_CUMPROD, .n = 1, .inner = 1,
                   .x = in[0].data, .y = out->data};
    int64_t outer = 1;
    for (uint32_t i = 0; i < d->rank; i++) {
        if ((int64_t)i < ax) outer *= d->dims[i];
        else if ((int64_t)i == ax) t.n = d->dims[i];
        else t.inner *= d->dims[i];
    }
    if (outer == 0 || t.n == 0 || t.inner == 0) return TD_OK;
    t.tiles = (t.inner + TILE - 1) / TILE;
    const int64_t per = t.n * (t.inner < TILE ? t.inner : TILE);
    td__cpu_run(x, outer * t.tiles, per, scan_chunk, &t);
    return TD_OK;
}

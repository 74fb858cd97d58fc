/* cpu_threads.c — the CPU backend's thread pool (fixed partition, full coverage, nested
 * calls inline) and the determinism contract: the same op gives the same bytes on a
 * 1-thread and a 4-thread device (random numbers, reductions, elementwise, movement,
 * softmax). */
#include "backends/cpu/cpu_pool.h"
#include "cpu_test_util.h"
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

typedef struct cover {
    atomic_int *hits;
    atomic_int calls;
    int64_t lo[TD_CPU_MAX_THREADS], hi[TD_CPU_MAX_THREADS];
    td__cpu_pool *pool;
    atomic_int nested_ok;
} cover;

static void mark(void *ctx, int64_t lo, int64_t hi)
{
    cover *c = ctx;
    int k = atomic_fetch_add(&c->calls, 1);
    c->lo[k] = lo;
    c->hi[k] = hi;
    for (int64_t i = lo; i < hi; i++) atomic_fetch_add(&c->hits[i], 1);
}

Test(cpu_pool, covers_every_index_once_in_fixed_chunks)
{
    td__cpu_pool *pool = NULL;
    cr_assert_eq(td__cpu_pool_create(4, &pool), TD_OK);
    cr_assert_eq(td__cpu_pool_threads(pool), 4);
    const int64_t n = 1001;
    for (int rep = 0; rep < 50; rep++) {
        cover c = {.hits = calloc((size_t)n, sizeof(atomic_int))};
        td__cpu_parallel_for(pool, n, 100, mark, &c);
        for (int64_t i = 0; i < n; i++) cr_assert_eq(atomic_load(&c.hits[i]), 1);
        cr_assert_eq(atomic_load(&c.calls), 4);
        /* chunks are [n*k/4, n*(k+1)/4): 0, 250, 500, 750, 1001 */
        for (int k = 0; k < 4; k++) {
            bool found = false;
            for (int j = 0; j < 4; j++)
                found |= c.lo[j] == n * k / 4 && c.hi[j] == n * (k + 1) / 4;
            cr_assert(found, "chunk %d missing", k);
        }
        free(c.hits);
    }
    /* grain limits the chunk count: 250 elements with grain 100 -> 3 chunks */
    cover c = {.hits = calloc(250, sizeof(atomic_int))};
    td__cpu_parallel_for(pool, 250, 100, mark, &c);
    cr_assert_eq(atomic_load(&c.calls), 3);
    free(c.hits);
    td__cpu_pool_destroy(pool);
}

static void record_only(void *ctx, int64_t lo, int64_t hi)
{
    cover *c = ctx;
    int k = atomic_fetch_add(&c->calls, 1);
    c->lo[k] = lo;
    c->hi[k] = hi;
}

/* Issue 10: chunk bounds n*k/c were formed as int64 products, which overflow (UBSan) for
 * n near 2^62. Expected bounds come from unsigned __int128 here. */
Test(cpu_pool, chunk_bounds_of_huge_ranges_do_not_overflow)
{
    __extension__ typedef unsigned __int128 u128;
    td__cpu_pool *pool = NULL;
    cr_assert_eq(td__cpu_pool_create(7, &pool), TD_OK);
    int c_n = td__cpu_pool_threads(pool);
    const int64_t ns[] = {((int64_t)1 << 62) + 7, INT64_MAX, INT64_MAX - 5, (int64_t)1 << 56};
    for (size_t t = 0; t < sizeof ns / sizeof ns[0]; t++) {
        cover c = {.hits = NULL};
        td__cpu_parallel_for(pool, ns[t], (int64_t)1 << 40, record_only, &c);
        int calls = atomic_load(&c.calls);
        cr_assert_eq(calls, c_n);
        for (int k = 0; k < calls; k++) {
            bool found = false;
            for (int j = 0; j < calls; j++)
                found |= (u128)c.lo[j] == (u128)ns[t] * (u128)k / (u128)calls &&
                         (u128)c.hi[j] == (u128)ns[t] * (u128)(k + 1) / (u128)calls;
            cr_assert(found, "n %lld: chunk %d missing", (long long)ns[t], k);
        }
    }
    td__cpu_pool_destroy(pool);
}

static void nested(void *ctx, int64_t lo, int64_t hi)
{
    cover *c = ctx;
    (void)lo;
    (void)hi;
    cover inner = {.hits = calloc(64, sizeof(atomic_int))};
    td__cpu_parallel_for(c->pool, 64, 1, mark, &inner);
    bool ok = true;
    for (int i = 0; i < 64; i++) ok &= atomic_load(&inner.hits[i]) == 1;
    if (ok) atomic_fetch_add(&c->nested_ok, 1);
    free(inner.hits);
}

Test(cpu_pool, nested_calls_run_inline, .timeout = 10)
{
    td__cpu_pool *pool = NULL;
    cr_assert_eq(td__cpu_pool_create(3, &pool), TD_OK);
    cover c = {.pool = pool};
    td__cpu_parallel_for(pool, 3, 1, nested, &c);
    cr_assert_eq(atomic_load(&c.nested_ok), 3);
    td__cpu_pool_destroy(pool);
}

Test(cpu_pool, degenerate_pools_and_ranges)
{
    cover c = {.hits = calloc(10, sizeof(atomic_int))};
    td__cpu_parallel_for(NULL, 10, 1, mark, &c); /* no pool: inline, one call */
    cr_assert_eq(atomic_load(&c.calls), 1);
    td__cpu_parallel_for(NULL, 0, 1, mark, &c);
    td__cpu_parallel_for(NULL, -5, 1, mark, &c);
    cr_assert_eq(atomic_load(&c.calls), 1);
    td__cpu_pool *pool = NULL;
    cr_assert_eq(td__cpu_pool_create(0, &pool), TD_OK);
    cr_assert_eq(td__cpu_pool_threads(pool), 1);
    td__cpu_parallel_for(pool, 10, 0, mark, &c);
    cr_assert_eq(atomic_load(&c.calls), 2);
    td__cpu_pool_destroy(pool);
    td__cpu_pool_destroy(NULL);
    free(c.hits);
}

Test(cpu_pool, thread_count_from_environment)
{
    setenv("TENSORD_CPU_THREADS", "5", 1);
    cr_assert_eq(td__cpu_default_threads(), 5);
    setenv("TENSORD_CPU_THREADS", "0", 1);
    int a = td__cpu_default_threads();
    setenv("TENSORD_CPU_THREADS", "12x", 1);
    int b = td__cpu_default_threads();
    unsetenv("TENSORD_CPU_THREADS");
    int def = td__cpu_default_threads();
    cr_assert_eq(a, def);
    cr_assert_eq(b, def);
    cr_assert_geq(def, 1);
}

/* ---- determinism across thread counts ---- */

static td__device *dev1, *dev4;
static void open_two(void)
{
    dev1 = tu_open(1);
    dev4 = tu_open(4);
}
static void close_two(void)
{
    tu_close(dev1);
    tu_close(dev4);
}

/* Run the op on both devices (inputs copied to each) and require identical output bytes. */
static void same_bytes(td__op op, const td__view *in, uint32_t n_in, uint32_t out_dt,
                       uint32_t rank, const int64_t *dims, const char *what)
{
    td__view a[3], b[3];
    for (uint32_t k = 0; k < n_in; k++) {
        a[k] = tu_new(dev1, in[k].desc.dtype, in[k].desc.rank, in[k].desc.dims, in[k].data);
        b[k] = tu_new(dev4, in[k].desc.dtype, in[k].desc.rank, in[k].desc.dims, in[k].data);
    }
    td__view o1 = tu_new(dev1, out_dt, rank, dims, NULL);
    td__view o4 = tu_new(dev4, out_dt, rank, dims, NULL);
    cr_assert_eq(tu_exec(dev1, op, a, n_in, &o1), TD_OK, "%s: %s", what, tu_err);
    cr_assert_eq(tu_exec(dev4, op, b, n_in, &o4), TD_OK, "%s: %s", what, tu_err);
    cr_assert_eq(memcmp(o1.data, o4.data, tu_nbytes(&o1)), 0, "%s: 1 and 4 threads differ",
                 what);
    for (uint32_t k = 0; k < n_in; k++) {
        tu_free(dev1, &a[k]);
        tu_free(dev4, &b[k]);
    }
    tu_free(dev1, &o1);
    tu_free(dev4, &o4);
}

TestSuite(cpu_determinism, .init = open_two, .fini = close_two);

Test(cpu_determinism, random_numbers)
{
    cr_assert_str_eq(dev1->description, "CPU, 1 threads, OpenBLAS");
    cr_assert_str_eq(dev4->description, "CPU, 4 threads, OpenBLAS");
    /* 250003 elements: chunk boundaries fall inside Philox blocks */
    for (uint32_t dt = TD_F32; dt <= TD_F64; dt++) {
        td__op op = tu_op(TD_OP_RAND_UNIFORM, 1, DIMS(250003));
        op.dtype = dt;
        op.seed = 0xfeedfacecafebeefull;
        op.fattrs[0] = -3.0;
        op.fattrs[1] = 3.0;
        same_bytes(op, NULL, 0, dt, 1, DIMS(250003), "uniform");
        op.opcode = TD_OP_RAND_NORMAL;
        op.fattrs[0] = 0.0;
        op.fattrs[1] = 1.0;
        same_bytes(op, NULL, 0, dt, 1, DIMS(250003), "normal");
    }
}

Test(cpu_determinism, reductions_are_bit_identical)
{
    /* x: [64, 50, 40] f32 normal values (128000 elements) */
    const int64_t d[3] = {64, 50, 40};
    td__view x = tu_new(dev1, TD_F32, 3, d, NULL);
    td__op gen = tu_op(TD_OP_RAND_NORMAL, 3, d);
    gen.dtype = TD_F32;
    gen.seed = 99;
    gen.fattrs[1] = 1.0;
    cr_assert_eq(tu_exec(dev1, gen, NULL, 0, &x), TD_OK);
    static const struct {
        int mask;
        uint32_t rank;
        int64_t dims[3];
    } cases[] = {
        {0x1, 2, {50, 40}}, {0x2, 2, {64, 40}}, {0x4, 2, {64, 50}},
        {0x3, 1, {40}},     {0x5, 1, {50}},     {0x6, 1, {64}},
        {0x7, 0, {0}},
    };
    static const uint32_t ops[] = {TD_OP_SUM, TD_OP_MEAN, TD_OP_PROD, TD_OP_MAX, TD_OP_MIN};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
            same_bytes(tu_op(ops[k], 2, DIMS(cases[c].mask, 0)), &x, 1, TD_F32, cases[c].rank,
                       cases[c].dims, "reduce f32");
        }
    }
    same_bytes(tu_op(TD_OP_ARGMAX, 2, DIMS(0x2, 0)), &x, 1, TD_I64, 2, DIMS(64, 40), "argmax");
    same_bytes(tu_op(TD_OP_ARGMIN, 2, DIMS(0x4, 0)), &x, 1, TD_I64, 2, DIMS(64, 50), "argmin");
    /* f64 sums of the same data */
    td__view x64 = tu_new(dev1, TD_F64, 3, d, NULL);
    td__op cast = tu_op(TD_OP_CAST, 0, NULL);
    cast.dtype = TD_F64;
    cr_assert_eq(tu_exec(dev1, cast, &x, 1, &x64), TD_OK);
    same_bytes(tu_op(TD_OP_SUM, 2, DIMS(0x5, 0)), &x64, 1, TD_F64, 1, DIMS(50), "sum f64");
    same_bytes(tu_op(TD_OP_SUM, 2, DIMS(0x7, 0)), &x64, 1, TD_F64, 0, NULL, "sum f64 all");
    tu_free(dev1, &x);
    tu_free(dev1, &x64);
}

Test(cpu_determinism, elementwise_and_movement)
{
    const int64_t d[2] = {300, 250};
    td__view x = tu_new(dev1, TD_F32, 2, d, NULL);
    td__op gen = tu_op(TD_OP_RAND_UNIFORM, 2, d);
    gen.dtype = TD_F32;
    gen.seed = 5;
    gen.fattrs[0] = -2.0;
    gen.fattrs[1] = 2.0;
    cr_assert_eq(tu_exec(dev1, gen, NULL, 0, &x), TD_OK);
    td__view row = tu_new(dev1, TD_F32, 1, DIMS(250), x.data);
    same_bytes(tu_op(TD_OP_TANH, 0, NULL), &x, 1, TD_F32, 2, d, "tanh");
    same_bytes(tu_op(TD_OP_POW, 0, NULL), (td__view[]){x, row}, 2, TD_F32, 2, d, "pow bcast");
    same_bytes(tu_op(TD_OP_LT, 0, NULL), (td__view[]){row, x}, 2, TD_BOOL, 2, d, "lt bcast");
    same_bytes(tu_op(TD_OP_PERMUTE, 2, DIMS(1, 0)), &x, 1, TD_F32, 2, DIMS(250, 300), "permute");
    same_bytes(tu_op(TD_OP_EXPAND, 3, DIMS(2, 300, 250)), &x, 1, TD_F32, 3, DIMS(2, 300, 250),
               "expand");
    td__op cast = tu_op(TD_OP_CAST, 0, NULL);
    cast.dtype = TD_I32;
    same_bytes(cast, &x, 1, TD_I32, 2, d, "cast");
    tu_free(dev1, &x);
    tu_free(dev1, &row);
}

Test(cpu_determinism, softmax_along_every_axis)
{
    /* [64, 50, 40] f32 and f64: each axis splits the rows between threads differently
     * (axis 1 and 0 take the tiled, strided path; chunks end inside a tile) */
    const int64_t d[3] = {64, 50, 40};
    td__view x = tu_new(dev1, TD_F32, 3, d, NULL);
    td__op gen = tu_op(TD_OP_RAND_NORMAL, 3, d);
    gen.dtype = TD_F32;
    gen.seed = 7;
    gen.fattrs[1] = 3.0;
    cr_assert_eq(tu_exec(dev1, gen, NULL, 0, &x), TD_OK);
    td__view x64 = tu_new(dev1, TD_F64, 3, d, NULL);
    td__op cast = tu_op(TD_OP_CAST, 0, NULL);
    cast.dtype = TD_F64;
    cr_assert_eq(tu_exec(dev1, cast, &x, 1, &x64), TD_OK);
    for (int64_t axis = 0; axis < 3; axis++) {
        same_bytes(tu_op(TD_OP_SOFTMAX, 1, DIMS(axis)), &x, 1, TD_F32, 3, d, "softmax f32");
        same_bytes(tu_op(TD_OP_LOG_SOFTMAX, 1, DIMS(axis)), &x, 1, TD_F32, 3, d,
                   "log_softmax f32");
        same_bytes(tu_op(TD_OP_SOFTMAX, 1, DIMS(axis)), &x64, 1, TD_F64, 3, d, "softmax f64");
        same_bytes(tu_op(TD_OP_LOG_SOFTMAX, 1, DIMS(axis)), &x64, 1, TD_F64, 3, d,
                   "log_softmax f64");
    }
    tu_free(dev1, &x);
    tu_free(dev1, &x64);
}

Test(cpu_determinism, scatter_add_and_index_add)
{
    /* 2000 x 300 sources into 64 rows: ~31 f32 (and bf16) adds per destination whose order
     * matters; the work is split between threads by lines / column blocks, never within a
     * destination's order (cpu_scatter.c) */
    enum { R = 2000, C = 300, M = 64 };
    const int64_t dx[2] = {M, C}, ds[2] = {R, C}, dm[1] = {R};
    int64_t *idx = malloc(sizeof(int64_t) * R * C);
    cr_assert_not_null(idx);
    uint64_t s = 99;
    for (int i = 0; i < R * C; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        idx[i] = (int64_t)((s >> 33) % M);
    }
    static const uint32_t dts[] = {TD_F32, TD_BF16};
    for (size_t d = 0; d < 2; d++) {
        const uint32_t dt = dts[d];
        td__view x = tu_new(dev1, dt, 2, dx, NULL), src = tu_new(dev1, dt, 2, ds, NULL);
        td__op gen = tu_op(TD_OP_RAND_NORMAL, 2, dx);
        gen.dtype = dt;
        gen.seed = 11;
        gen.fattrs[1] = 1e3;
        cr_assert_eq(tu_exec(dev1, gen, NULL, 0, &x), TD_OK);
        gen = tu_op(TD_OP_RAND_NORMAL, 2, ds);
        gen.dtype = dt;
        gen.seed = 12;
        gen.fattrs[1] = 1.0;
        cr_assert_eq(tu_exec(dev1, gen, NULL, 0, &src), TD_OK);
        td__view ix = tu_new(dev1, TD_I64, 2, ds, idx), ix1 = tu_new(dev1, TD_I64, 1, dm, idx);
        same_bytes(tu_op(TD_OP_SCATTER_ADD, 1, DIMS(0)), (td__view[]){x, ix, src}, 3, dt, 2, dx,
                   "scatter_add");
        same_bytes(tu_op(TD_OP_INDEX_ADD, 1, DIMS(0)), (td__view[]){x, ix1, src}, 3, dt, 2, dx,
                   "index_add");
        same_bytes(tu_op(TD_OP_SCATTER, 1, DIMS(0)), (td__view[]){x, ix, src}, 3, dt, 2, dx,
                   "scatter");
        tu_free(dev1, &x);
        tu_free(dev1, &src);
        tu_free(dev1, &ix);
        tu_free(dev1, &ix1);
    }
    free(idx);
}

Test(cpu_determinism, normalisations_and_dropout)
{
    /* [64, 50, 40] f32: layer norm over the last dim and the last two, group norm (groups of
     * 10 channels), the training batch-norm backward (a channel's N segments at stride C S),
     * and dropout over 128000 elements: 1 and 4 threads give the same bytes */
    const int64_t d[3] = {64, 50, 40};
    td__view x = tu_new(dev1, TD_F32, 3, d, NULL), dy = tu_new(dev1, TD_F32, 3, d, NULL);
    td__op gen = tu_op(TD_OP_RAND_NORMAL, 3, d);
    gen.dtype = TD_F32;
    gen.seed = 11;
    gen.fattrs[0] = 0.5;
    gen.fattrs[1] = 2.0;
    cr_assert_eq(tu_exec(dev1, gen, NULL, 0, &x), TD_OK);
    gen.seed = 12;
    cr_assert_eq(tu_exec(dev1, gen, NULL, 0, &dy), TD_OK);
    td__op ln = tu_op(TD_OP_LAYER_NORM, 1, DIMS(2));
    ln.fattrs[0] = 1e-5;
    same_bytes(ln, &x, 1, TD_F32, 3, d, "layer_norm last dim");
    ln.iattrs[0] = 1;
    same_bytes(ln, &x, 1, TD_F32, 3, d, "layer_norm last two dims");
    ln.opcode = TD_OP_LAYER_NORM_BACKWARD;
    same_bytes(ln, (td__view[]){dy, x}, 2, TD_F32, 3, d, "layer_norm_backward");
    td__op gn = tu_op(TD_OP_GROUP_NORM, 1, DIMS(5));
    gn.fattrs[0] = 1e-5;
    same_bytes(gn, &x, 1, TD_F32, 3, d, "group_norm");
    td__op bn = tu_op(TD_OP_BATCH_NORM_BACKWARD, 0, NULL);
    bn.fattrs[0] = 1e-5;
    same_bytes(bn, (td__view[]){dy, x}, 2, TD_F32, 3, d, "batch_norm_backward");
    td__op dr = tu_op(TD_OP_DROPOUT, 0, NULL);
    dr.fattrs[0] = 0.4;
    dr.seed = 77;
    same_bytes(dr, &x, 1, TD_F32, 3, d, "dropout");
    tu_free(dev1, &x);
    tu_free(dev1, &dy);
}

/* CONV and POOL families (cpu_conv.c, cpu_window.c): large enough that the 4-thread device
 * splits the blocks (conv tiles, weight-gradient column tiles, planes) across threads. */
static td__view normal_on(uint32_t dt, uint32_t rank, const int64_t *d, uint64_t seed)
{
    td__view x = tu_new(dev1, dt, rank, d, NULL);
    td__op gen = tu_op(TD_OP_RAND_NORMAL, rank, d);
    gen.dtype = dt;
    gen.seed = seed;
    gen.fattrs[1] = 1.0;
    cr_assert_eq(tu_exec(dev1, gen, NULL, 0, &x), TD_OK, "%s", tu_err);
    return x;
}

Test(cpu_determinism, conv_and_pool_are_bit_identical)
{
    static const uint32_t dts[] = {TD_F32, TD_F64, TD_BF16};
    for (size_t k = 0; k < 3; k++) {
        const uint32_t dt = dts[k];
        td__view in[3];
        in[0] = normal_on(dt, 4, DIMS(4, 8, 24, 24), 1);
        in[1] = normal_on(dt, 4, DIMS(16, 4, 3, 3), 2);
        in[2] = normal_on(dt, 1, DIMS(16), 3);
        /* groups 2, stride 1, pad 1: [4, 16, 24, 24] */
        same_bytes(tu_op(TD_OP_CONV, 9, DIMS(2, 1, 1, 1, 1, 1, 1, 1, 1)), in, 3, dt, 4,
                   DIMS(4, 16, 24, 24), "conv");
        td__view dy = normal_on(dt, 4, DIMS(4, 16, 24, 24), 4);
        td__view wg[2] = {in[0], dy};
        same_bytes(tu_op(TD_OP_CONV_WEIGHT_GRAD, 11, DIMS(2, 1, 1, 1, 1, 1, 1, 1, 1, 3, 3)), wg,
                   2, dt, 4, DIMS(16, 4, 3, 3), "conv_weight_grad");
        td__view tin[2] = {dy, in[1]};
        same_bytes(tu_op(TD_OP_CONV_TRANSPOSE, 9, DIMS(2, 1, 1, 1, 1, 1, 1, 1, 1)), tin, 2, dt, 4,
                   DIMS(4, 8, 24, 24), "conv_transpose (input grad)");
        same_bytes(tu_op(TD_OP_MAX_POOL_INDICES, 9, DIMS(0, 3, 3, 2, 2, 1, 1, 1, 1)), in, 1,
                   TD_I64, 4, DIMS(4, 8, 12, 12), "max_pool_indices");
        td__view pd = normal_on(dt, 4, DIMS(4, 8, 12, 12), 5);
        same_bytes(tu_op(TD_OP_AVG_POOL_BACKWARD, 10, DIMS(0, 1, 3, 3, 2, 2, 1, 1, 24, 24)), &pd,
                   1, dt, 4, DIMS(4, 8, 24, 24), "avg_pool_backward");
        same_bytes(tu_op(TD_OP_INTERPOLATE, 4, DIMS(1, 0, 37, 29)), in, 1, dt, 4,
                   DIMS(4, 8, 37, 29), "interpolate");
        tu_free(dev1, &pd);
        tu_free(dev1, &dy);
        for (int j = 0; j < 3; j++) tu_free(dev1, &in[j]);
    }
}

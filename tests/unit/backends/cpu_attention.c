/* cpu_attention.c — the CPU's native SCALED_DOT_PRODUCT_ATTENTION kernel
 * (backends/cpu/cpu_attention.c) at the backend level: its f32 row passes give the same bits
 * in every instruction-set copy this CPU runs (generic, AVX2, AVX-512), and a result does not
 * depend on the device's thread count. Its values are checked elsewhere: against PyTorch
 * float64 in cpu_nn.c, against its own lowering by the conformance suite. */
#include "cpu_test_util.h"
#include "backends/cpu/cpu_internal.h"
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define DIMS(...) ((const int64_t[]){__VA_ARGS__})

static uint64_t g_state = 0x243f6a8885a308d3ull;
static double draw(void) /* splitmix64 -> [-2, 2) */
{
    uint64_t z = (g_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1p-53 * 4.0 - 2.0;
}

static td__view filled(td__device *dev, uint32_t dt, uint32_t rank, const int64_t *dims)
{
    int64_t n = 1;
    for (uint32_t i = 0; i < rank; i++) n *= dims[i];
    double *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = draw();
    td__view t = tu_from_doubles(dev, dt, rank, dims, v);
    free(v);
    return t;
}

/* q [2, 150, 24], k [2, 300, 24], v [2, 300, 12] (blocks of 64 queries and 256 keys, row
 * lengths not multiples of the 16 lanes), float mask [150, 300], causal; on `dev`. */
static td__view run_case(td__device *dev, uint32_t dt, td__view *in)
{
    td__op op = tu_op(TD_OP_SCALED_DOT_PRODUCT_ATTENTION, 1, DIMS(1));
    op.n_inputs = 4;
    op.fattrs[0] = 0.3;
    td__view out = tu_new(dev, dt, 3, DIMS(2, 150, 12), NULL);
    cr_assert_eq(tu_exec(dev, op, in, 4, &out), TD_OK, "%s", tu_err);
    return out;
}

static void make_inputs(td__device *dev, uint32_t dt, td__view *in)
{
    g_state = 0x243f6a8885a308d3ull;
    in[0] = filled(dev, dt, 3, DIMS(2, 150, 24));
    in[1] = filled(dev, dt, 3, DIMS(2, 300, 24));
    in[2] = filled(dev, dt, 3, DIMS(2, 300, 12));
    in[3] = filled(dev, dt, 2, DIMS(150, 300));
}

Test(cpu_attention, same_bits_in_every_isa_copy)
{
    td__device *dev = tu_open(2);
    td__view in[4];
    make_inputs(dev, TD_F32, in);
    const char *isas[] = {"generic", "avx2", "avx512"};
    td__view first = {0};
    int tried = 0;
    for (int k = 0; k < 3; k++) {
        if (!td__cpu_attention_force_isa(isas[k])) continue;
        td__view o = run_case(dev, TD_F32, in);
        if (tried++ == 0) {
            first = o;
            continue;
        }
        cr_expect(memcmp(o.data, first.data, tu_nbytes(&o)) == 0,
                  "the %s copy differs from the generic one", isas[k]);
        tu_free(dev, &o);
    }
    td__cpu_attention_force_isa(NULL);
    cr_assert_geq(tried, 1, "the generic copy always runs");
    tu_free(dev, &first);
    for (int i = 0; i < 4; i++) tu_free(dev, &in[i]);
    tu_close(dev);
}

Test(cpu_attention, same_bits_on_1_and_4_threads)
{
    static const uint32_t dts[] = {TD_F32, TD_F64};
    for (int d = 0; d < 2; d++) {
        void *r[2];
        size_t nb = 0;
        for (int t = 0; t < 2; t++) {
            td__device *dev = tu_open(t == 0 ? 1 : 4);
            td__view in[4];
            make_inputs(dev, dts[d], in);
            td__view o = run_case(dev, dts[d], in);
            nb = tu_nbytes(&o);
            r[t] = malloc(nb);
            memcpy(r[t], o.data, nb);
            tu_free(dev, &o);
            for (int i = 0; i < 4; i++) tu_free(dev, &in[i]);
            tu_close(dev);
        }
        cr_expect(memcmp(r[0], r[1], nb) == 0, "dtype %u: 1 and 4 threads differ", dts[d]);
        free(r[0]);
        free(r[1]);
    }
}

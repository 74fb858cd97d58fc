/* philox.c — engine/philox.h against the Random123 known-answer vectors, the documented
 * (seed, index) -> value mapping checked by hand from those words, and the CPU backend's
 * RAND_UNIFORM / RAND_NORMAL kernels against that mapping. */
#include "cpu_test_util.h"
#include "engine/philox.h"
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

/* Random123 kat_vectors, philox4x32 with 10 rounds: counter, key, expected output. */
static const struct {
    uint32_t ctr[4], key[2], out[4];
} KAT[] = {
    {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
    {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
     {0xffffffff, 0xffffffff},
     {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
    {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
     {0xa4093822, 0x299f31d0},
     {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
};

Test(philox, known_answer_vectors)
{
    for (size_t v = 0; v < sizeof KAT / sizeof KAT[0]; v++) {
        uint32_t out[4];
        td__philox4x32_10(KAT[v].ctr, KAT[v].key, out);
        for (int j = 0; j < 4; j++)
            cr_assert_eq(out[j], KAT[v].out[j], "vector %zu word %d: %08x want %08x", v, j,
                         out[j], KAT[v].out[j]);
    }
}

Test(philox, output_may_alias_counter)
{
    uint32_t c[4] = {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344};
    td__philox4x32_10(c, KAT[2].key, c);
    for (int j = 0; j < 4; j++) cr_assert_eq(c[j], KAT[2].out[j]);
}

Test(philox, block_uses_seed_as_key_and_index_as_counter)
{
    uint32_t w[4];
    td__philox_block(0, 0, w); /* key (0, 0), counter (0, 0, 0, 0): vector 0 */
    for (int j = 0; j < 4; j++) cr_assert_eq(w[j], KAT[0].out[j]);
    /* seed 0x299f31d0a4093822 -> key (a4093822, 299f31d0); block 0x85a308d3243f6a88 ->
     * counter (243f6a88, 85a308d3, 0, 0) */
    const uint32_t ctr[4] = {0x243f6a88, 0x85a308d3, 0, 0};
    uint32_t want[4];
    td__philox4x32_10(ctr, KAT[2].key, want);
    td__philox_block(0x299f31d0a4093822ull, 0x85a308d3243f6a88ull, w);
    for (int j = 0; j < 4; j++) cr_assert_eq(w[j], want[j]);
}

/* Seed 0, elements in block 0 come straight from vector 0's words. */
Test(philox, mapping_by_hand_from_vector_0)
{
    /* f32 uniform element i = (w[i] >> 8) * 2^-24 */
    cr_assert_eq(td__philox_uniform_f32(0, 0, 0.0, 1.0), (float)(0x6627e8 * 0x1p-24));
    cr_assert_eq(td__philox_uniform_f32(0, 1, 0.0, 1.0), (float)(0xe169c5 * 0x1p-24));
    cr_assert_eq(td__philox_uniform_f32(0, 3, 0.0, 1.0), (float)(0x9b00db * 0x1p-24));
    /* low + (high - low) * u */
    cr_assert_eq(td__philox_uniform_f32(0, 2, -1.0, 3.0),
                 (float)(-1.0 + 4.0 * (0xbc57ac * 0x1p-24)));
    /* f64 element 0: (w1:w0 >> 11) * 2^-53, element 1: (w3:w2 >> 11) * 2^-53 */
    cr_assert_eq(td__philox_uniform_f64(0, 0, 0.0, 1.0),
                 (double)(0xe169c58d6627e8d5ull >> 11) * 0x1p-53);
    cr_assert_eq(td__philox_uniform_f64(0, 1, 0.0, 1.0),
                 (double)(0x9b00dbd8bc57ac4cull >> 11) * 0x1p-53);
    /* f64 normal elements 0 and 1: Box-Muller of u1 = (x + 1) 2^-53, u2 = y 2^-53 */
    double u1 = (double)((0xe169c58d6627e8d5ull >> 11) + 1) * 0x1p-53;
    double u2 = (double)(0x9b00dbd8bc57ac4cull >> 11) * 0x1p-53;
    double r = sqrt(-2.0 * log(u1)), t = 2.0 * M_PI * u2;
    cr_assert_float_eq(td__philox_normal_f64(0, 0, 0.0, 1.0), r * cos(t), 1e-15);
    cr_assert_float_eq(td__philox_normal_f64(0, 1, 0.0, 1.0), r * sin(t), 1e-15);
    /* f32 normal elements 2 and 3 use the second pair (w2, w3) */
    u1 = (double)(0xbc57ac + 1) * 0x1p-24;
    u2 = (double)0x9b00db * 0x1p-24;
    r = sqrt(-2.0 * log(u1));
    t = 2.0 * M_PI * u2;
    cr_assert_float_eq(td__philox_normal_f32(0, 2, 1.0, 2.0), (float)(1.0 + 2.0 * r * cos(t)),
                       1e-6);
    cr_assert_float_eq(td__philox_normal_f32(0, 3, 1.0, 2.0), (float)(1.0 + 2.0 * r * sin(t)),
                       1e-6);
}

static td__view run_rand(td__device *dev, uint32_t opcode, uint32_t dt, int64_t n,
                         uint64_t seed, double p0, double p1)
{
    td__view out = tu_new(dev, dt, 1, DIMS(n), NULL);
    td__op op = tu_op(opcode, 1, DIMS(n));
    op.dtype = dt;
    op.seed = seed;
    op.fattrs[0] = p0;
    op.fattrs[1] = p1;
    cr_assert_eq(tu_exec(dev, op, NULL, 0, &out), TD_OK, "%s", tu_err);
    return out;
}

Test(philox, backend_kernels_follow_the_mapping)
{
    td__device *dev = tu_open(0);
    const uint64_t seed = 0x0123456789abcdefull;
    const int64_t n = 1003; /* not a multiple of 4: partial last block */
    td__view u32 = run_rand(dev, TD_OP_RAND_UNIFORM, TD_F32, n, seed, -2.0, 5.0);
    td__view u64 = run_rand(dev, TD_OP_RAND_UNIFORM, TD_F64, n, seed, -2.0, 5.0);
    td__view n32 = run_rand(dev, TD_OP_RAND_NORMAL, TD_F32, n, seed, 0.5, 3.0);
    td__view n64 = run_rand(dev, TD_OP_RAND_NORMAL, TD_F64, n, seed, 0.5, 3.0);
    for (int64_t i = 0; i < n; i++) {
        cr_assert_eq(((float *)u32.data)[i], td__philox_uniform_f32(seed, (uint64_t)i, -2.0, 5.0));
        cr_assert_eq(((double *)u64.data)[i], td__philox_uniform_f64(seed, (uint64_t)i, -2.0, 5.0));
        cr_assert_eq(((float *)n32.data)[i], td__philox_normal_f32(seed, (uint64_t)i, 0.5, 3.0));
        cr_assert_eq(((double *)n64.data)[i], td__philox_normal_f64(seed, (uint64_t)i, 0.5, 3.0));
    }
    tu_free(dev, &u32);
    tu_free(dev, &u64);
    tu_free(dev, &n32);
    tu_free(dev, &n64);
    tu_close(dev);
}

Test(philox, element_depends_only_on_seed_and_index)
{
    td__device *dev = tu_open(0);
    td__view small = run_rand(dev, TD_OP_RAND_NORMAL, TD_F32, 7, 42, 0.0, 1.0);
    td__view big = run_rand(dev, TD_OP_RAND_NORMAL, TD_F32, 100000, 42, 0.0, 1.0);
    td__view other = run_rand(dev, TD_OP_RAND_NORMAL, TD_F32, 7, 43, 0.0, 1.0);
    cr_assert_eq(memcmp(small.data, big.data, 7 * sizeof(float)), 0);
    cr_assert_neq(memcmp(small.data, other.data, 7 * sizeof(float)), 0);
    tu_free(dev, &small);
    tu_free(dev, &big);
    tu_free(dev, &other);
    tu_close(dev);
}

Test(philox, distributions_look_right)
{
    td__device *dev = tu_open(0);
    const int64_t n = 200000;
    td__view u = run_rand(dev, TD_OP_RAND_UNIFORM, TD_F64, n, 7, -1.0, 3.0);
    td__view z = run_rand(dev, TD_OP_RAND_NORMAL, TD_F32, n, 7, 2.0, 0.5);
    double su = 0, sz = 0, szz = 0;
    for (int64_t i = 0; i < n; i++) {
        double v = ((double *)u.data)[i];
        cr_assert(v >= -1.0 && v < 3.0, "uniform[%lld] = %g", (long long)i, v);
        su += v;
        double w = ((float *)z.data)[i];
        cr_assert(isfinite(w));
        sz += w;
        szz += w * w;
    }
    double mu = su / n, mz = sz / n, sd = sqrt(szz / n - mz * mz);
    /* standard errors: 1.15/sqrt(n) = 0.0026 for the uniform mean, 0.0011 for the normal */
    cr_assert(fabs(mu - 1.0) < 0.02, "uniform mean %g", mu);
    cr_assert(fabs(mz - 2.0) < 0.01, "normal mean %g", mz);
    cr_assert(fabs(sd - 0.5) < 0.01, "normal stddev %g", sd);
    tu_free(dev, &u);
    tu_free(dev, &z);
    tu_close(dev);
}

Test(philox, zero_elements)
{
    td__device *dev = tu_open(0);
    td__view out = tu_new(dev, TD_F32, 2, DIMS(0, 5), NULL);
    td__op op = tu_op(TD_OP_RAND_NORMAL, 2, DIMS(0, 5));
    op.dtype = TD_F32;
    cr_assert_eq(out.data, NULL);
    cr_assert_eq(tu_exec(dev, op, NULL, 0, &out), TD_OK);
    tu_close(dev);
}

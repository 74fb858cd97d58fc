/* cpu_matmul.c — MATMUL of the CPU backend: f32/f64 (OpenBLAS) against numpy float64
 * products (cpu_reference.h), batch broadcasting, integer matmul with wraparound (by hand),
 * and zero-sized M, N, K and batch. */
#include "cpu_reference.h"
#include "cpu_test_util.h"
#include <criterion/criterion.h>
#include <stdlib.h>

static td__device *dev;
static void setup(void) { dev = tu_open(4); }
static void teardown(void) { tu_close(dev); }
TestSuite(cpu_matmul, .init = setup, .fini = teardown);

static td__view matmul(const td__view *a, const td__view *b, uint32_t rank, const int64_t *dims)
{
    td__view out = tu_new(dev, a->desc.dtype, rank, dims, NULL);
    td__view in[2] = {*a, *b};
    cr_assert_eq(tu_exec(dev, tu_op(TD_OP_MATMUL, 0, NULL), in, 2, &out), TD_OK, "%s", tu_err);
    return out;
}

Test(cpu_matmul, float_vs_numpy)
{
    for (uint32_t dt = TD_F32; dt <= TD_F64; dt++) {
        td__view a = tu_from_doubles(dev, dt, 2, DIMS(5, 7), REF_MM_A);
        td__view b = tu_from_doubles(dev, dt, 2, DIMS(7, 3), REF_MM_B);
        td__view c = matmul(&a, &b, 2, DIMS(5, 3));
        tu_expect_close(&c, REF_MM_C, 15, 1e-12, 1e-12, "[5,7]x[7,3]");
        tu_free(dev, &a);
        tu_free(dev, &b);
        tu_free(dev, &c);
        a = tu_from_doubles(dev, dt, 2, DIMS(33, 65), REF_LMM_A);
        b = tu_from_doubles(dev, dt, 2, DIMS(65, 17), REF_LMM_B);
        c = matmul(&a, &b, 2, DIMS(33, 17));
        /* f32: 65-term dot products of values <= 2 in magnitude */
        tu_expect_close(&c, REF_LMM_C, 33 * 17, dt == TD_F32 ? 1e-5 : 1e-12,
                        dt == TD_F32 ? 1e-4 : 1e-12, "[33,65]x[65,17]");
        tu_free(dev, &a);
        tu_free(dev, &b);
        tu_free(dev, &c);
    }
}

Test(cpu_matmul, batched_broadcast_vs_numpy)
{
    /* [2,1,3,4] x [3,4,2] -> [2,3,3,2]: a's batch dim 1 and b's missing leading dim
     * broadcast */
    for (uint32_t dt = TD_F32; dt <= TD_F64; dt++) {
        td__view a = tu_from_doubles(dev, dt, 4, DIMS(2, 1, 3, 4), REF_BMM_A);
        td__view b = tu_from_doubles(dev, dt, 3, DIMS(3, 4, 2), REF_BMM_B);
        td__view c = matmul(&a, &b, 4, DIMS(2, 3, 3, 2));
        tu_expect_close(&c, REF_BMM_C, 36, 1e-12, 1e-12, "batched");
        tu_free(dev, &a);
        tu_free(dev, &b);
        tu_free(dev, &c);
    }
}

Test(cpu_matmul, shared_weight_and_batched_a)
{
    /* a [3,2,2] x w [2,2]: every batch uses w. a[b] = [[b, 1], [0, 2]], w = [[1, 2], [3, 4]]
     * -> [[b + 3, 2b + 4], [6, 8]] */
    double av[12], want[12];
    for (int bb = 0; bb < 3; bb++) {
        double m[4] = {bb, 1, 0, 2}, r[4] = {bb + 3, 2 * bb + 4, 6, 8};
        for (int i = 0; i < 4; i++) {
            av[bb * 4 + i] = m[i];
            want[bb * 4 + i] = r[i];
        }
    }
    for (uint32_t dt = 0; dt < TD_U8; dt++) {
        td__view a = tu_from_doubles(dev, dt, 3, DIMS(3, 2, 2), av);
        td__view w = tu_from_doubles(dev, dt, 2, DIMS(2, 2), (double[]){1, 2, 3, 4});
        td__view c = matmul(&a, &w, 3, DIMS(3, 2, 2));
        tu_expect_eq(&c, want, 12, "a[b] x w");
        /* and w x a[b]: [[1,2],[3,4]] x [[b,1],[0,2]] = [[b, 5], [3b, 11]] */
        td__view c2 = matmul(&w, &a, 3, DIMS(3, 2, 2));
        for (int bb = 0; bb < 3; bb++) {
            double r[4] = {bb, 5, 3 * bb, 11};
            for (int i = 0; i < 4; i++)
                cr_assert_eq(tu_get(&c2, bb * 4 + i), r[i], "w x a[%d] element %d", bb, i);
        }
        tu_free(dev, &a);
        tu_free(dev, &w);
        tu_free(dev, &c);
        tu_free(dev, &c2);
    }
}

Test(cpu_matmul, integers_by_hand_and_wrap)
{
    /* [[1,2],[3,4]] x [[5,6],[7,8]] = [[19,22],[43,50]] */
    for (uint32_t dt = TD_I32; dt <= TD_U8; dt++) {
        td__view a = tu_from_doubles(dev, dt, 2, DIMS(2, 2), (double[]){1, 2, 3, 4});
        td__view b = tu_from_doubles(dev, dt, 2, DIMS(2, 2), (double[]){5, 6, 7, 8});
        td__view c = matmul(&a, &b, 2, DIMS(2, 2));
        tu_expect_eq(&c, (double[]){19, 22, 43, 50}, 4, "2x2");
        tu_free(dev, &a);
        tu_free(dev, &b);
        tu_free(dev, &c);
    }
    /* i64: 2^62 * 2 + 2^62 * 2 = 2^64 wraps to 0; i32: 65536 * 65536 = 0; u8: 16 * 16 + 3 = 3 */
    td__view a = tu_new(dev, TD_I64, 2, DIMS(1, 2), (int64_t[]){1ll << 62, 1ll << 62});
    td__view b = tu_new(dev, TD_I64, 2, DIMS(2, 1), (int64_t[]){2, 2});
    td__view c = matmul(&a, &b, 2, DIMS(1, 1));
    cr_assert_eq(((int64_t *)c.data)[0], 0);
    tu_free(dev, &a);
    tu_free(dev, &b);
    tu_free(dev, &c);
    a = tu_from_doubles(dev, TD_I32, 2, DIMS(1, 2), (double[]){65536, -3});
    b = tu_from_doubles(dev, TD_I32, 2, DIMS(2, 1), (double[]){65536, 5});
    c = matmul(&a, &b, 2, DIMS(1, 1));
    tu_expect_eq(&c, (double[]){-15}, 1, "i32 wrap");
    tu_free(dev, &a);
    tu_free(dev, &b);
    tu_free(dev, &c);
    a = tu_from_doubles(dev, TD_U8, 2, DIMS(1, 2), (double[]){16, 1});
    b = tu_from_doubles(dev, TD_U8, 2, DIMS(2, 1), (double[]){16, 3});
    c = matmul(&a, &b, 2, DIMS(1, 1));
    tu_expect_eq(&c, (double[]){3}, 1, "u8 wrap");
    tu_free(dev, &a);
    tu_free(dev, &b);
    tu_free(dev, &c);
}

Test(cpu_matmul, large_integer_matches_naive_loop)
{
    /* [4,70,90] x [90,110] i32: 2.8M multiply-adds on the pool; reference: naive int64 loop */
    enum { B = 4, M = 70, K = 90, N = 110 };
    int32_t *av = malloc(sizeof(int32_t) * B * M * K), *bv = malloc(sizeof(int32_t) * K * N);
    for (int i = 0; i < B * M * K; i++) av[i] = (i * 7919) % 201 - 100;
    for (int i = 0; i < K * N; i++) bv[i] = (i * 104729) % 151 - 75;
    td__view a = tu_new(dev, TD_I32, 3, DIMS(B, M, K), av);
    td__view b = tu_new(dev, TD_I32, 2, DIMS(K, N), bv);
    td__view c = matmul(&a, &b, 3, DIMS(B, M, N));
    for (int bb = 0; bb < B; bb++)
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                int64_t acc = 0;
                for (int k = 0; k < K; k++)
                    acc += (int64_t)av[(bb * M + i) * K + k] * bv[k * N + j];
                cr_assert_eq(((int32_t *)c.data)[(bb * M + i) * N + j], (int32_t)acc);
            }
    free(av);
    free(bv);
    tu_free(dev, &a);
    tu_free(dev, &b);
    tu_free(dev, &c);
}

Test(cpu_matmul, zero_sized)
{
    for (uint32_t dt = 0; dt < TD_BOOL; dt++) {
        /* K = 0: [2,0] x [0,3] = zeros; inputs have no data */
        td__view a = tu_new(dev, dt, 2, DIMS(2, 0), NULL);
        td__view b = tu_new(dev, dt, 2, DIMS(0, 3), NULL);
        td__view c = matmul(&a, &b, 2, DIMS(2, 3));
        tu_expect_eq(&c, (double[]){0, 0, 0, 0, 0, 0}, 6, "K = 0");
        tu_free(dev, &c);
        /* M = 0, N = 0, batch = 0 */
        td__view a2 = tu_new(dev, dt, 2, DIMS(0, 4), NULL);
        td__view b2 = tu_from_doubles(dev, dt, 2, DIMS(4, 1), (double[]){1, 2, 3, 4});
        c = matmul(&a2, &b2, 2, DIMS(0, 1));
        cr_assert_null(c.data);
        td__view a3 = tu_new(dev, dt, 3, DIMS(0, 2, 4), NULL);
        c = matmul(&a3, &b2, 3, DIMS(0, 2, 1));
        cr_assert_null(c.data);
        td__view b4 = tu_new(dev, dt, 2, DIMS(4, 0), NULL);
        td__view a4 = tu_from_doubles(dev, dt, 2, DIMS(1, 4), (double[]){1, 2, 3, 4});
        c = matmul(&a4, &b4, 2, DIMS(1, 0));
        cr_assert_null(c.data);
        tu_free(dev, &b2);
        tu_free(dev, &a4);
    }
}

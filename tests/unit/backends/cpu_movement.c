/* cpu_movement.c — PERMUTE SLICE CONCAT EXPAND COPY GATHER INDEX_SELECT of the CPU backend.
 * Inputs are arange-like (x[i] = i), so every expected value is a closed formula of the
 * output index, written next to each check. */
#include "cpu_test_util.h"
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

static td__device *dev;
static void setup(void) { dev = tu_open(4); }
static void teardown(void) { tu_close(dev); }
TestSuite(cpu_movement, .init = setup, .fini = teardown);

/* A tensor of dtype holding 0, 1, 2, ... (mod 256 for 1-byte dtypes, mod 2 for bool). */
static td__view iota(uint32_t dt, uint32_t rank, const int64_t *dims)
{
    int64_t n = 1;
    for (uint32_t i = 0; i < rank; i++) n *= dims[i];
    double *v = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++)
        v[i] = dt == TD_BOOL ? (double)(i % 2) : dt == TD_U8 ? (double)(i % 256) : (double)i;
    td__view t = tu_from_doubles(dev, dt, rank, dims, v);
    free(v);
    return t;
}

static td_status run1(uint32_t opcode, uint32_t n_attrs, const int64_t *attrs,
                      const td__view *in, uint32_t n_in, const td__view *out)
{
    return tu_exec(dev, tu_op(opcode, n_attrs, attrs), in, n_in, out);
}

Test(cpu_movement, permute_all_element_sizes)
{
    /* x [2,3,4] = iota, perm (2,0,1) -> [4,2,3], out[i][j][k] = x[j][k][i] = 12 j + 4 k + i */
    for (uint32_t dt = 0; dt < TD_BOOL; dt++) {
        td__view x = iota(dt, 3, DIMS(2, 3, 4));
        td__view o = tu_new(dev, dt, 3, DIMS(4, 2, 3), NULL);
        cr_assert_eq(run1(TD_OP_PERMUTE, 3, DIMS(2, 0, 1), &x, 1, &o), TD_OK);
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 2; j++)
                for (int k = 0; k < 3; k++)
                    cr_assert_eq(tu_get(&o, (i * 2 + j) * 3 + k), 12 * j + 4 * k + i);
        tu_free(dev, &x);
        tu_free(dev, &o);
    }
}

Test(cpu_movement, large_transpose)
{
    /* [300,200] -> [200,300] on the pool: out[i][j] = x[j][i] = 200 j + i */
    td__view x = iota(TD_F32, 2, DIMS(300, 200));
    td__view o = tu_new(dev, TD_F32, 2, DIMS(200, 300), NULL);
    cr_assert_eq(run1(TD_OP_PERMUTE, 2, DIMS(1, 0), &x, 1, &o), TD_OK);
    for (int i = 0; i < 200; i++)
        for (int j = 0; j < 300; j++)
            cr_assert_eq(((float *)o.data)[i * 300 + j], (float)(200 * j + i));
    tu_free(dev, &x);
    tu_free(dev, &o);
}

Test(cpu_movement, batched_transpose_blocked_path)
{
    /* [3,2,40,50] -> perm (1,0,3,2) -> [2,3,50,40]: out[a][b][i][j] = x[b][a][j][i]
     * = ((b * 2 + a) * 40 + j) * 50 + i; 1- and 8-byte elements */
    static const uint32_t dts[] = {TD_I64, TD_U8};
    for (size_t di = 0; di < 2; di++) {
        const uint32_t dt = dts[di];
        td__view x = iota(dt, 4, DIMS(3, 2, 40, 50));
        td__view o = tu_new(dev, dt, 4, DIMS(2, 3, 50, 40), NULL);
        cr_assert_eq(run1(TD_OP_PERMUTE, 4, DIMS(1, 0, 3, 2), &x, 1, &o), TD_OK);
        for (int a = 0; a < 2; a++)
            for (int b = 0; b < 3; b++)
                for (int i = 0; i < 50; i++)
                    for (int j = 0; j < 40; j++) {
                        int64_t v = ((b * 2 + a) * 40 + j) * 50 + i;
                        double want = dt == TD_U8 ? (double)(v % 256) : (double)v;
                        cr_assert_eq(tu_get(&o, ((a * 3 + b) * 50 + i) * 40 + j), want);
                    }
        tu_free(dev, &x);
        tu_free(dev, &o);
    }
}

Test(cpu_movement, slice)
{
    /* x [4,5] = iota, rows [1,3), cols [2,5) -> [[7,8,9],[12,13,14]] */
    td__view x = iota(TD_I64, 2, DIMS(4, 5));
    td__view o = tu_new(dev, TD_I64, 2, DIMS(2, 3), NULL);
    cr_assert_eq(run1(TD_OP_SLICE, 4, DIMS(1, 2, 3, 5), &x, 1, &o), TD_OK);
    tu_expect_eq(&o, (double[]){7, 8, 9, 12, 13, 14}, 6, "slice");
    tu_free(dev, &o);
    /* whole rows [2,4) x [0,5) -> 10..19 (one contiguous run) */
    o = tu_new(dev, TD_I64, 2, DIMS(2, 5), NULL);
    cr_assert_eq(run1(TD_OP_SLICE, 4, DIMS(2, 0, 4, 5), &x, 1, &o), TD_OK);
    tu_expect_eq(&o, (double[]){10, 11, 12, 13, 14, 15, 16, 17, 18, 19}, 10, "rows");
    tu_free(dev, &o);
    /* empty: [3,3) on axis 0 */
    o = tu_new(dev, TD_I64, 2, DIMS(0, 5), NULL);
    cr_assert_eq(run1(TD_OP_SLICE, 4, DIMS(3, 0, 3, 5), &x, 1, &o), TD_OK);
    tu_free(dev, &x);
    /* rank 0: no attributes, a copy */
    td__view s = tu_from_doubles(dev, TD_F64, 0, NULL, (double[]){2.5});
    o = tu_new(dev, TD_F64, 0, NULL, NULL);
    cr_assert_eq(run1(TD_OP_SLICE, 0, NULL, &s, 1, &o), TD_OK);
    tu_expect_eq(&o, (double[]){2.5}, 1, "rank 0");
    tu_free(dev, &s);
    tu_free(dev, &o);
}

Test(cpu_movement, concat)
{
    /* axis 1: [2,1] = (0; 1), [2,3] = iota, [2,0] -> [2,4] = [[0, 0,1,2], [1, 3,4,5]] */
    td__view in[3] = {iota(TD_I32, 2, DIMS(2, 1)), iota(TD_I32, 2, DIMS(2, 3)),
                      tu_new(dev, TD_I32, 2, DIMS(2, 0), NULL)};
    td__view o = tu_new(dev, TD_I32, 2, DIMS(2, 4), NULL);
    cr_assert_eq(run1(TD_OP_CONCAT, 1, DIMS(1), in, 3, &o), TD_OK);
    tu_expect_eq(&o, (double[]){0, 0, 1, 2, 1, 3, 4, 5}, 8, "axis 1");
    tu_free(dev, &o);
    /* axis 0: [2,3] twice -> [4,3] = 0..5, 0..5 */
    td__view twice[2] = {in[1], in[1]};
    o = tu_new(dev, TD_I32, 2, DIMS(4, 3), NULL);
    cr_assert_eq(run1(TD_OP_CONCAT, 1, DIMS(0), twice, 2, &o), TD_OK);
    tu_expect_eq(&o, (double[]){0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5}, 12, "axis 0");
    tu_free(dev, &o);
    /* one input: a copy */
    o = tu_new(dev, TD_I32, 2, DIMS(2, 3), NULL);
    cr_assert_eq(run1(TD_OP_CONCAT, 1, DIMS(1), &in[1], 1, &o), TD_OK);
    tu_expect_eq(&o, (double[]){0, 1, 2, 3, 4, 5}, 6, "one input");
    tu_free(dev, &o);
    tu_free(dev, &in[0]);
    tu_free(dev, &in[1]);
    /* all empty */
    td__view e[2] = {tu_new(dev, TD_F32, 2, DIMS(0, 2), NULL),
                     tu_new(dev, TD_F32, 2, DIMS(0, 3), NULL)};
    o = tu_new(dev, TD_F32, 2, DIMS(0, 5), NULL);
    cr_assert_eq(run1(TD_OP_CONCAT, 1, DIMS(1), e, 2, &o), TD_OK);
    /* empty rows along the outer axis: [1,0] twice on axis 0 -> [2,0] (outer 1, NULL
     * buffers; a fuzz find: a row address was formed from the NULL output, UBSan) */
    td__view z[2] = {tu_new(dev, TD_F32, 2, DIMS(1, 0), NULL),
                     tu_new(dev, TD_F32, 2, DIMS(1, 0), NULL)};
    td__view zo = tu_new(dev, TD_F32, 2, DIMS(2, 0), NULL);
    cr_assert_eq(run1(TD_OP_CONCAT, 1, DIMS(0), z, 2, &zo), TD_OK);
    td__view zo1 = tu_new(dev, TD_F32, 2, DIMS(1, 0), NULL);
    cr_assert_eq(run1(TD_OP_CONCAT, 1, DIMS(1), z, 2, &zo1), TD_OK);
}

Test(cpu_movement, expand_and_copy)
{
    /* [3,1] = (0,1,2) -> [2,3,4]: out[i][j][k] = j */
    for (uint32_t dt = 0; dt < TD_BOOL; dt++) {
        td__view x = iota(dt, 2, DIMS(3, 1));
        td__view o = tu_new(dev, dt, 3, DIMS(2, 3, 4), NULL);
        cr_assert_eq(run1(TD_OP_EXPAND, 3, DIMS(2, 3, 4), &x, 1, &o), TD_OK);
        for (int i = 0; i < 24; i++) cr_assert_eq(tu_get(&o, i), (i / 4) % 3);
        tu_free(dev, &x);
        tu_free(dev, &o);
    }
    /* rank 0 -> [2,2] */
    td__view s = tu_from_doubles(dev, TD_F64, 0, NULL, (double[]){-1.5});
    td__view o = tu_new(dev, TD_F64, 2, DIMS(2, 2), NULL);
    cr_assert_eq(run1(TD_OP_EXPAND, 2, DIMS(2, 2), &s, 1, &o), TD_OK);
    tu_expect_eq(&o, (double[]){-1.5, -1.5, -1.5, -1.5}, 4, "rank 0");
    tu_free(dev, &s);
    tu_free(dev, &o);
    /* copy keeps bytes (a NaN payload included) */
    uint32_t bits[3] = {0x7fc01234u, 0x80000000u, 0x3f800000u};
    td__view x = tu_new(dev, TD_F32, 1, DIMS(3), bits);
    o = tu_new(dev, TD_F32, 1, DIMS(3), NULL);
    cr_assert_eq(run1(TD_OP_COPY, 0, NULL, &x, 1, &o), TD_OK);
    cr_assert_eq(memcmp(o.data, bits, sizeof bits), 0);
    tu_free(dev, &x);
    tu_free(dev, &o);
}

Test(cpu_movement, gather_take_along_axis)
{
    /* x [3,4] = iota. axis 1, index [3,2] -> out[i][j] = x[i][idx[i][j]] = 4 i + idx */
    td__view x = iota(TD_F64, 2, DIMS(3, 4));
    td__view idx = tu_from_doubles(dev, TD_I64, 2, DIMS(3, 2), (double[]){3, 0, 1, 1, 0, 2});
    td__view o = tu_new(dev, TD_F64, 2, DIMS(3, 2), NULL);
    cr_assert_eq(run1(TD_OP_GATHER, 1, DIMS(1), (td__view[]){x, idx}, 2, &o), TD_OK, "%s", tu_err);
    tu_expect_eq(&o, (double[]){3, 0, 5, 5, 8, 10}, 6, "axis 1");
    tu_free(dev, &o);
    tu_free(dev, &idx);
    /* index with fewer rows than x: [2,1] i32 along axis 1 -> (x[0][2], x[1][3]) = (2, 7) */
    idx = tu_from_doubles(dev, TD_I32, 2, DIMS(2, 1), (double[]){2, 3});
    o = tu_new(dev, TD_F64, 2, DIMS(2, 1), NULL);
    cr_assert_eq(run1(TD_OP_GATHER, 1, DIMS(1), (td__view[]){x, idx}, 2, &o), TD_OK);
    tu_expect_eq(&o, (double[]){2, 7}, 2, "labels");
    tu_free(dev, &o);
    tu_free(dev, &idx);
    /* axis 0, index [2,3]: out[i][j] = x[idx[i][j]][j] = 4 idx + j */
    idx = tu_from_doubles(dev, TD_I32, 2, DIMS(2, 3), (double[]){2, 0, 1, 1, 1, 2});
    o = tu_new(dev, TD_F64, 2, DIMS(2, 3), NULL);
    cr_assert_eq(run1(TD_OP_GATHER, 1, DIMS(0), (td__view[]){x, idx}, 2, &o), TD_OK);
    tu_expect_eq(&o, (double[]){8, 1, 6, 4, 5, 10}, 6, "axis 0");
    tu_free(dev, &o);
    tu_free(dev, &idx);
    tu_free(dev, &x);
}

Test(cpu_movement, gather_out_of_range)
{
    /* x [2,10]; index [2,4] has -3 at position 5 (row 1, col 1) and 10 at position 7 */
    td__view x = iota(TD_F32, 2, DIMS(2, 10));
    td__view idx =
        tu_from_doubles(dev, TD_I64, 2, DIMS(2, 4), (double[]){0, 9, 1, 2, 3, -3, 4, 10});
    td__view o = tu_new(dev, TD_F32, 2, DIMS(2, 4), NULL);
    cr_assert_eq(run1(TD_OP_GATHER, 1, DIMS(1), (td__view[]){x, idx}, 2, &o), TD_ERANGE);
    cr_assert_str_eq(tu_err, "gather: index -3 out of range [0, 10) at position 5");
    for (size_t i = 0; i < tu_nbytes(&o); i++)
        cr_assert_eq(((uint8_t *)o.data)[i], 0xA5, "output written before the check");
    tu_free(dev, &idx);
    idx = tu_from_doubles(dev, TD_I32, 2, DIMS(1, 1), (double[]){10});
    td__view o1 = tu_new(dev, TD_F32, 2, DIMS(1, 1), NULL);
    cr_assert_eq(run1(TD_OP_GATHER, 1, DIMS(1), (td__view[]){x, idx}, 2, &o1), TD_ERANGE);
    cr_assert_str_eq(tu_err, "gather: index 10 out of range [0, 10) at position 0");
    tu_free(dev, &idx);
    tu_free(dev, &x);
    tu_free(dev, &o);
    tu_free(dev, &o1);
}

Test(cpu_movement, index_select)
{
    /* x [3,4] = iota; axis 0, index [2,2] = [[2,0],[1,2]] -> [2,2,4], rows of x */
    td__view x = iota(TD_I32, 2, DIMS(3, 4));
    td__view idx = tu_from_doubles(dev, TD_I64, 2, DIMS(2, 2), (double[]){2, 0, 1, 2});
    td__view o = tu_new(dev, TD_I32, 3, DIMS(2, 2, 4), NULL);
    cr_assert_eq(run1(TD_OP_INDEX_SELECT, 1, DIMS(0), (td__view[]){x, idx}, 2, &o), TD_OK);
    tu_expect_eq(&o,
                 (double[]){8, 9, 10, 11, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, 16, "axis 0");
    tu_free(dev, &o);
    tu_free(dev, &idx);
    /* axis 1, index [3] = (3, 3, 0) -> [3,3]: out[i][j] = 4 i + idx[j] */
    idx = tu_from_doubles(dev, TD_I32, 1, DIMS(3), (double[]){3, 3, 0});
    o = tu_new(dev, TD_I32, 2, DIMS(3, 3), NULL);
    cr_assert_eq(run1(TD_OP_INDEX_SELECT, 1, DIMS(1), (td__view[]){x, idx}, 2, &o), TD_OK);
    tu_expect_eq(&o, (double[]){3, 3, 0, 7, 7, 4, 11, 11, 8}, 9, "axis 1");
    tu_free(dev, &o);
    tu_free(dev, &idx);
    /* rank-0 index drops the axis: row 1 */
    idx = tu_from_doubles(dev, TD_I64, 0, NULL, (double[]){1});
    o = tu_new(dev, TD_I32, 1, DIMS(4), NULL);
    cr_assert_eq(run1(TD_OP_INDEX_SELECT, 1, DIMS(0), (td__view[]){x, idx}, 2, &o), TD_OK);
    tu_expect_eq(&o, (double[]){4, 5, 6, 7}, 4, "rank-0 index");
    tu_free(dev, &o);
    tu_free(dev, &idx);
    /* out of range: position 1 holds 12 */
    idx = tu_from_doubles(dev, TD_I32, 1, DIMS(2), (double[]){0, 12});
    o = tu_new(dev, TD_I32, 2, DIMS(3, 2), NULL);
    cr_assert_eq(run1(TD_OP_INDEX_SELECT, 1, DIMS(1), (td__view[]){x, idx}, 2, &o), TD_ERANGE);
    cr_assert_str_eq(tu_err, "index_select: index 12 out of range [0, 4) at position 1");
    tu_free(dev, &o);
    tu_free(dev, &idx);
    /* empty index -> empty output */
    idx = tu_new(dev, TD_I64, 1, DIMS(0), NULL);
    o = tu_new(dev, TD_I32, 2, DIMS(0, 4), NULL);
    cr_assert_eq(run1(TD_OP_INDEX_SELECT, 1, DIMS(0), (td__view[]){x, idx}, 2, &o), TD_OK);
    tu_free(dev, &x);
}

Test(cpu_movement, zero_elements)
{
    td__view x = tu_new(dev, TD_F32, 3, DIMS(2, 0, 3), NULL);
    td__view o = tu_new(dev, TD_F32, 3, DIMS(3, 2, 0), NULL);
    cr_assert_eq(run1(TD_OP_PERMUTE, 3, DIMS(2, 0, 1), &x, 1, &o), TD_OK);
    td__view o2 = tu_new(dev, TD_F32, 3, DIMS(2, 0, 3), NULL);
    cr_assert_eq(run1(TD_OP_COPY, 0, NULL, &x, 1, &o2), TD_OK);
    td__view o3 = tu_new(dev, TD_F32, 3, DIMS(4, 0, 3), NULL);
    td__view e = {.desc = {.dtype = TD_F32, .rank = 2, .dims = {0, 3}}};
    cr_assert_eq(run1(TD_OP_EXPAND, 3, DIMS(4, 0, 3), &e, 1, &o3), TD_OK);
    td__view idx = tu_new(dev, TD_I64, 3, DIMS(2, 0, 3), NULL);
    cr_assert_eq(run1(TD_OP_GATHER, 1, DIMS(2), (td__view[]){x, idx}, 2, &o2), TD_OK);
}

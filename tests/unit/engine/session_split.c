/* Unit tests for engine/session.c's big ops in pieces: a CPU matmul whose work passes the
 * split threshold runs as pieces of rows or of leading-batch slices. Checked: the result
 * against references computed here (exact integers; float64 dot products with a bound),
 * the same bits whether the pieces run in one call or one slice at a time, the op's output
 * invisible until its last piece ran, and a session destroyed mid-op leaking nothing. */
#include "engine/device.h"
#include "engine/session.h"
#include "engine/tensor.h"
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static td__session *s;
static int nfail;
static char lastmsg[1024];

static void on_fail(void *arg, uint32_t idx, td_status st, const char *msg)
{
    (void)arg;
    (void)idx;
    (void)st;
    snprintf(lastmsg, sizeof lastmsg, "%s", msg);
    nfail++;
}

static td__session *open_session(void)
{
    char err[256];
    cr_assert_eq(td__devices_init(err, sizeof err), TD_OK, "%s", err);
    td__session *x;
    cr_assert_eq(td__session_create(td__device_find("cpu"), NULL, &x), TD_OK);
    return x;
}

static void setup(void)
{
    s = open_session();
    nfail = 0;
}
static void teardown(void) { td__session_destroy(s); }
TestSuite(split, .init = setup, .fini = teardown);

static td__op empty(uint64_t id, uint32_t dtype, uint32_t rank, const int64_t *dims)
{
    td__op o = {.opcode = TD_OP_EMPTY, .dtype = dtype, .output = id, .n_iattrs = rank};
    for (uint32_t i = 0; i < rank; i++) o.iattrs[i] = dims[i];
    return o;
}

static td__op matmul(uint64_t out, uint64_t a, uint64_t b)
{
    return (td__op){.opcode = TD_OP_MATMUL, .n_inputs = 2, .inputs = {a, b}, .output = out};
}

static void put(td__session *x, uint64_t id, const void *src, size_t n)
{
    char err[256];
    cr_assert_eq(td__session_write(x, id, 0, src, n, err, sizeof err), TD_OK, "%s", err);
}

/* Small integers: exact in f32 products and in i64 sums. */
static float val_a(size_t i) { return (float)((int)(i * 7 % 11) - 5); }
static float val_b(size_t i) { return (float)((int)(i * 5 % 13) - 6); }

/* Run ops[0..n) one slice of (almost) no time at a time: each call runs one piece. Returns
 * the number of calls it took. */
static int exec_in_slices(td__session *x, const td__op *ops, size_t n)
{
    size_t i = 0;
    int calls = 0;
    while (i < n) {
        i = td__session_exec_slice(x, ops, i, n, 1, false, on_fail, NULL, NULL);
        calls++;
        cr_assert_lt(calls, 100000);
    }
    return calls;
}

/* f32 [1200,1024] x [1024,2048]: 2.5G multiply-adds, above twice the 2^30 piece size, so
 * it runs as row pieces (512, 512, 176 rows). Values are small integers, so every dot product is exact in f32 and
 * the reference is exact too. */
Test(split, f32_rows_exact_and_the_same_bits_in_slices)
{
    enum { M = 1200, K = 1024, N = 2048 };
    float *a = malloc(sizeof(float) * M * K), *b = malloc(sizeof(float) * K * N);
    float *c1 = malloc(sizeof(float) * M * N), *c2 = malloc(sizeof(float) * M * N);
    cr_assert(a && b && c1 && c2);
    for (size_t i = 0; i < (size_t)M * K; i++) a[i] = val_a(i);
    for (size_t i = 0; i < (size_t)K * N; i++) b[i] = val_b(i);
    td__op mk[2] = {empty(1, TD_F32, 2, (int64_t[]){M, K}), empty(2, TD_F32, 2, (int64_t[]){K, N})};
    cr_assert_eq(td__session_exec(s, mk, 2, on_fail, NULL), 0, "%s", lastmsg);
    put(s, 1, a, sizeof(float) * M * K);
    put(s, 2, b, sizeof(float) * K * N);
    td__op mm = matmul(3, 1, 2);
    cr_assert_eq(td__session_exec(s, &mm, 1, on_fail, NULL), 0, "%s", lastmsg);
    char err[256];
    cr_assert_eq(td__session_read(s, 3, 0, c1, sizeof(float) * M * N, err, sizeof err), TD_OK);
    for (int i = 0; i < M; i += 37)
        for (int j = 0; j < N; j += 41) {
            double ref = 0;
            for (int k = 0; k < K; k++) ref += (double)a[i * K + k] * b[k * N + j];
            cr_assert_eq(c1[i * N + j], (float)ref, "c[%d][%d] = %g, want %g", i, j, c1[i * N + j],
                         ref);
        }
    mm.output = 4;
    int calls = exec_in_slices(s, &mm, 1);
    cr_expect_geq(calls, 3, "1200 rows at 512 a piece take 3 pieces, one per slice (%d calls)",
                  calls);
    cr_assert_eq(td__session_read(s, 4, 0, c2, sizeof(float) * M * N, err, sizeof err), TD_OK);
    cr_expect_eq(memcmp(c1, c2, sizeof(float) * M * N), 0, "sliced run gave other bits");
    cr_expect_eq(nfail, 0, "%s", lastmsg);
    free(a);
    free(b);
    free(c1);
    free(c2);
}

/* i64 [300,200] x [200,300]: 18M multiply-adds, above twice the integer piece (2^23). */
Test(split, i64_rows_exact)
{
    enum { M = 300, K = 200, N = 300 };
    int64_t *a = malloc(sizeof(int64_t) * M * K), *b = malloc(sizeof(int64_t) * K * N);
    int64_t *c = malloc(sizeof(int64_t) * M * N);
    cr_assert(a && b && c);
    for (size_t i = 0; i < (size_t)M * K; i++) a[i] = (int64_t)(i % 1000) - 500;
    for (size_t i = 0; i < (size_t)K * N; i++) b[i] = (int64_t)(i % 777) * 3 - 1000;
    td__op mk[2] = {empty(1, TD_I64, 2, (int64_t[]){M, K}), empty(2, TD_I64, 2, (int64_t[]){K, N})};
    cr_assert_eq(td__session_exec(s, mk, 2, on_fail, NULL), 0, "%s", lastmsg);
    put(s, 1, a, sizeof(int64_t) * M * K);
    put(s, 2, b, sizeof(int64_t) * K * N);
    td__op mm = matmul(3, 1, 2);
    int calls = exec_in_slices(s, &mm, 1);
    cr_expect_geq(calls, 3, "%d calls", calls);
    char err[256];
    cr_assert_eq(td__session_read(s, 3, 0, c, sizeof(int64_t) * M * N, err, sizeof err), TD_OK,
                 "%s", err);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j += 7) {
            int64_t ref = 0;
            for (int k = 0; k < K; k++) ref += a[i * K + k] * b[k * N + j];
            cr_assert_eq(c[i * N + j], ref, "c[%d][%d]", i, j);
        }
    free(a);
    free(b);
    free(c);
}

/* Batched f32 [12,512,512] x [512,1024] (shared weights): 3.2G multiply-adds in slices of
 * 4 batches. */
Test(split, f32_batches_exact)
{
    const int64_t B = 12, M = 512, K = 512, N = 1024;
    size_t na = (size_t)(B * M * K), nb = (size_t)(K * N), nc = (size_t)(B * M * N);
    float *a = malloc(sizeof(float) * na), *b = malloc(sizeof(float) * nb);
    float *c = malloc(sizeof(float) * nc);
    cr_assert(a && b && c);
    for (size_t i = 0; i < na; i++) a[i] = val_a(i);
    for (size_t i = 0; i < nb; i++) b[i] = val_b(i);
    td__op mk[2] = {empty(1, TD_F32, 3, (int64_t[]){B, M, K}),
                    empty(2, TD_F32, 2, (int64_t[]){K, N})};
    cr_assert_eq(td__session_exec(s, mk, 2, on_fail, NULL), 0, "%s", lastmsg);
    put(s, 1, a, sizeof(float) * na);
    put(s, 2, b, sizeof(float) * nb);
    td__op mm = matmul(3, 1, 2);
    int calls = exec_in_slices(s, &mm, 1);
    cr_expect_geq(calls, 3, "%d calls", calls);
    char err[256];
    cr_assert_eq(td__session_read(s, 3, 0, c, sizeof(float) * nc, err, sizeof err), TD_OK);
    for (int64_t p = 0; p < B; p++)
        for (int64_t i = 0; i < M; i += 31)
            for (int64_t j = 0; j < N; j += 29) {
                double ref = 0;
                for (int64_t k = 0; k < K; k++) ref += (double)a[(p * M + i) * K + k] * b[k * N + j];
                cr_assert_eq(c[(p * M + i) * N + j], (float)ref, "c[%lld][%lld][%lld]",
                             (long long)p, (long long)i, (long long)j);
            }
    free(a);
    free(b);
    free(c);
}

/* The output of a split op appears only once its last piece ran; destroying the session
 * in the middle leaks nothing (buffers back to their count before). */
Test(split, pending_output_is_invisible_and_dropped_with_the_session)
{
    uint64_t live0 = td__buffer_live_count();
    td__session *x = open_session();
    enum { M = 1200, K = 1024, N = 2048 };
    td__op ops[3] = {empty(1, TD_F32, 2, (int64_t[]){M, K}),
                     empty(2, TD_F32, 2, (int64_t[]){K, N}), matmul(3, 1, 2)};
    size_t next = td__session_exec_slice(x, ops, 0, 3, 1, false, on_fail, NULL, NULL);
    while (next < 2) next = td__session_exec_slice(x, ops, next, 3, 1, false, on_fail, NULL, NULL);
    next = td__session_exec_slice(x, ops, next, 3, 1, false, on_fail, NULL, NULL);
    cr_assert_eq(next, 2, "the matmul is pending after one piece");
    td__desc d;
    td__buffer *buf = NULL;
    char err[256];
    cr_expect_eq(td__session_lookup(x, 3, &d, &buf, err, sizeof err), TD_ENOTFOUND,
                 "a pending output is not visible");
    td__session_destroy(x);
    cr_expect_eq(td__buffer_live_count(), live0, "the pending op's buffer was freed");
}

/* Matrix pieces (the breaker's case: a leading batch dim of 1 was never split): i32
 * [1,3,200,300] x [2,1,300,200] broadcasts to [2,3,200,200], 72M multiply-adds above the
 * integer piece, each matrix in two row blocks; operands reached through broadcast batch
 * strides. Exact against a reference computed here with the broadcast written out. */
Test(split, i32_broadcast_batches_by_matrix_exact)
{
    enum { M = 200, K = 300, N = 200 };
    const size_t na = 3 * M * K, nb = 2 * K * N, nc = 2 * 3 * M * N;
    int32_t *a = malloc(sizeof(int32_t) * na), *b = malloc(sizeof(int32_t) * nb);
    int32_t *c = malloc(sizeof(int32_t) * nc);
    cr_assert(a && b && c);
    for (size_t i = 0; i < na; i++) a[i] = (int32_t)(i % 17) - 8;
    for (size_t i = 0; i < nb; i++) b[i] = (int32_t)(i % 23) - 11;
    td__op mk[2] = {empty(1, TD_I32, 4, (int64_t[]){1, 3, M, K}),
                    empty(2, TD_I32, 4, (int64_t[]){2, 1, K, N})};
    cr_assert_eq(td__session_exec(s, mk, 2, on_fail, NULL), 0, "%s", lastmsg);
    put(s, 1, a, sizeof(int32_t) * na);
    put(s, 2, b, sizeof(int32_t) * nb);
    td__op mm = matmul(3, 1, 2);
    int calls = exec_in_slices(s, &mm, 1);
    cr_expect_geq(calls, 12, "6 matrices in 2 row blocks each, one per slice (%d calls)", calls);
    char err[256];
    cr_assert_eq(td__session_read(s, 3, 0, c, sizeof(int32_t) * nc, err, sizeof err), TD_OK,
                 "%s", err);
    for (int p = 0; p < 2; p++)       /* out dim 0: b's batch */
        for (int q = 0; q < 3; q++)   /* out dim 1: a's batch */
            for (int i = 0; i < M; i += 3)
                for (int j = 0; j < N; j += 5) {
                    int64_t ref = 0;
                    for (int k = 0; k < K; k++)
                        ref += (int64_t)a[(q * M + i) * K + k] * b[(p * K + k) * N + j];
                    cr_assert_eq(c[((p * 3 + q) * M + i) * N + j], (int32_t)ref,
                                 "c[%d][%d][%d][%d]", p, q, i, j);
                }
    free(a);
    free(b);
    free(c);
}

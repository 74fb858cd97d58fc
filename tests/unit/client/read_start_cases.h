/* read_start_cases.h — td_read_start / td_read_finish checks that take any context, so the
 * same cases run on local:cpu (tests/unit/client/api.c) and against a real tensord over TCP
 * and unix sockets (tests/e2e/read_start.c). Each case leaves ctx usable (no read pending)
 * unless it says otherwise. Expected values are written out by hand next to each case.
 * Thread-safety: the test's main thread. Include after <criterion/criterion.h>. */
#ifndef TD_TESTS_READ_START_CASES_H
#define TD_TESTS_READ_START_CASES_H

#include "tensord.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

/* Reads started with ops recorded between them, finished out of order, with a td_read and
 * a td_fence in between; each result against hand-computed values and td_read's bytes. */
static inline void read_start_case_out_of_order(td_context *ctx)
{
    /* a = [1, 2, 3, 4]; b = 2a = [2, 4, 6, 8]; c = a + b = [3, 6, 9, 12];
     * s = sum(c) = 30; d = c - 1 = [2, 5, 8, 11] */
    float av[] = {1, 2, 3, 4};
    td_tensor *a = td_from_host(ctx, TD_F32, 1, (int64_t[]){4}, av);
    cr_assert_not_null(a, "%s", td_last_error(ctx));
    float ra[4], rb[4], rc[4], rs, rd[4], sync_c[4];
    td_pending_read *pa, *pb, *pc, *ps, *pd;
    cr_assert_eq(td_read_start(a, ra, sizeof ra, &pa), TD_OK, "%s", td_last_error(ctx));
    td_tensor *b = td_mul_scalar(a, 2.0);
    cr_assert_eq(td_read_start(b, rb, sizeof rb, &pb), TD_OK, "%s", td_last_error(ctx));
    td_tensor *c = td_add(a, b);
    cr_assert_eq(td_read_start(c, rc, sizeof rc, &pc), TD_OK, "%s", td_last_error(ctx));
    td_tensor *s = td_sum(c, 1, (int[]){0}, false);
    cr_assert_not_null(s, "%s", td_last_error(ctx));
    cr_assert_eq(td_read_start(s, &rs, sizeof rs, &ps), TD_OK, "%s", td_last_error(ctx));
    cr_assert_eq(td_read(c, sync_c, sizeof sync_c), TD_OK, "%s", td_last_error(ctx));
    td_tensor *d = td_add_scalar(c, -1.0);
    cr_assert_eq(td_read_start(d, rd, sizeof rd, &pd), TD_OK, "%s", td_last_error(ctx));
    cr_assert_eq(td_fence(ctx), TD_OK, "%s", td_last_error(ctx));
    cr_assert_eq(td_read_finish(pc), TD_OK, "%s", td_last_error(ctx));
    cr_assert_eq(td_read_finish(pd), TD_OK, "%s", td_last_error(ctx));
    cr_assert_eq(td_read_finish(pa), TD_OK, "%s", td_last_error(ctx));
    cr_assert_eq(td_read_finish(ps), TD_OK, "%s", td_last_error(ctx));
    cr_assert_eq(td_read_finish(pb), TD_OK, "%s", td_last_error(ctx));
    const float wa[] = {1, 2, 3, 4}, wb[] = {2, 4, 6, 8}, wc[] = {3, 6, 9, 12},
                wd[] = {2, 5, 8, 11};
    cr_expect_arr_eq(ra, wa, sizeof wa);
    cr_expect_arr_eq(rb, wb, sizeof wb);
    cr_expect_arr_eq(rc, wc, sizeof wc);
    cr_expect_arr_eq(rd, wd, sizeof wd);
    cr_expect_eq(rs, 30.0f, "sum %g", rs);
    cr_expect_arr_eq(rc, sync_c, sizeof rc, "td_read of the same tensor");
    td_release(a);
    td_release(b);
    td_release(c);
    td_release(s);
    td_release(d);
}

/* A read started and its tensor released at once (before the release is flushed and after
 * a fence that sends it) still completes. */
static inline void read_start_case_released(td_context *ctx)
{
    /* x = [1.5, -2, 4]; y = x * x = [2.25, 4, 16]; z = y + 1 = [3.25, 5, 17] */
    float xv[] = {1.5f, -2, 4}, ry[3], rz[3];
    td_tensor *x = td_from_host(ctx, TD_F32, 1, (int64_t[]){3}, xv);
    td_tensor *y = td_mul(x, x);
    td_tensor *z = td_add_scalar(y, 1.0);
    cr_assert_not_null(z, "%s", td_last_error(ctx));
    td_pending_read *py, *pz;
    cr_assert_eq(td_read_start(y, ry, sizeof ry, &py), TD_OK, "%s", td_last_error(ctx));
    td_release(y);
    cr_assert_eq(td_read_start(z, rz, sizeof rz, &pz), TD_OK, "%s", td_last_error(ctx));
    td_release(z);
    td_release(x);
    cr_assert_eq(td_fence(ctx), TD_OK, "%s", td_last_error(ctx));
    cr_assert_eq(td_read_finish(pz), TD_OK, "%s", td_last_error(ctx));
    cr_assert_eq(td_read_finish(py), TD_OK, "%s", td_last_error(ctx));
    const float wy[] = {2.25f, 4, 16}, wz[] = {3.25f, 5, 17};
    cr_expect_arr_eq(ry, wy, sizeof wy);
    cr_expect_arr_eq(rz, wz, sizeof wz);
}

/* td_last_error after `call` failed with TD_EINVAL names `api`, and the rest equals what
 * td_read said for the same arguments (`want`, td_read's message). */
static inline void read_start_expect_same_message(td_context *ctx, const char *want)
{
    const char *got = td_last_error(ctx);
    cr_assert(strncmp(got, "td_read_start: ", 15) == 0, "%s", got);
    cr_assert(strncmp(want, "td_read: ", 9) == 0, "%s", want);
    cr_expect_str_eq(got + 15, want + 9);
}

/* Argument errors: the same status and message as td_read (named td_read_start), *out
 * NULL, nothing started; td_read_finish(NULL). */
static inline void read_start_case_errors(td_context *ctx)
{
    float v[2] = {1, 2}, dst[2];
    char want[1024];
    td_tensor *t = td_from_host(ctx, TD_F32, 1, (int64_t[]){2}, v);
    td_pending_read *p = (td_pending_read *)(uintptr_t)1;
    /* wrong size */
    cr_assert_eq(td_read(t, dst, 4), TD_EINVAL);
    snprintf(want, sizeof want, "%s", td_last_error(ctx));
    cr_assert_eq(td_read_start(t, dst, 4, &p), TD_EINVAL);
    cr_expect_null(p);
    read_start_expect_same_message(ctx, want);
    cr_expect(strstr(td_last_error(ctx), "holds 8 bytes, buffer has 4"), "%s",
              td_last_error(ctx));
    /* dst NULL */
    cr_assert_eq(td_read(t, NULL, 8), TD_EINVAL);
    snprintf(want, sizeof want, "%s", td_last_error(ctx));
    p = (td_pending_read *)(uintptr_t)1;
    cr_assert_eq(td_read_start(t, NULL, 8, &p), TD_EINVAL);
    cr_expect_null(p);
    read_start_expect_same_message(ctx, want);
    /* NULL tensor, NULL out */
    cr_expect_eq(td_read_start(NULL, dst, 8, &p), TD_EINVAL);
    cr_expect_eq(td_read_start(t, dst, 8, NULL), TD_EINVAL);
    cr_expect_str_eq(td_last_error(ctx), "td_read_start: out is NULL");
    /* while capturing a graph, and of a graph placeholder */
    cr_assert_eq(td_graph_begin(ctx), TD_OK, "%s", td_last_error(ctx));
    td_tensor *ph = td_graph_input(ctx, "x", TD_F32, 1, (int64_t[]){2});
    cr_assert_not_null(ph, "%s", td_last_error(ctx));
    cr_assert_eq(td_read(t, dst, 8), TD_EINVAL);
    snprintf(want, sizeof want, "%s", td_last_error(ctx));
    cr_assert_eq(td_read_start(t, dst, 8, &p), TD_EINVAL);
    read_start_expect_same_message(ctx, want);
    cr_expect(strstr(td_last_error(ctx), "while capturing"), "%s", td_last_error(ctx));
    td_graph *g = NULL;
    cr_assert_eq(td_graph_output(ctx, "y", td_neg(ph)), TD_OK, "%s", td_last_error(ctx));
    cr_assert_eq(td_graph_end(ctx, &g), TD_OK, "%s", td_last_error(ctx));
    cr_assert_eq(td_read(ph, dst, 8), TD_EINVAL);
    snprintf(want, sizeof want, "%s", td_last_error(ctx));
    cr_assert_eq(td_read_start(ph, dst, 8, &p), TD_EINVAL);
    read_start_expect_same_message(ctx, want);
    cr_expect(strstr(td_last_error(ctx), "placeholder"), "%s", td_last_error(ctx));
    td_graph_destroy(g);
    td_release(ph);
    /* td_read_finish(NULL): the calling thread's error names it */
    cr_expect_eq(td_read_finish(NULL), TD_EINVAL);
    cr_expect_str_eq(td_last_error(NULL), "td_read_finish: p is NULL");
    /* the context still reads */
    cr_assert_eq(td_read_start(t, dst, 8, &p), TD_OK, "%s", td_last_error(ctx));
    cr_assert_eq(td_read_finish(p), TD_OK, "%s", td_last_error(ctx));
    cr_expect(dst[0] == 1 && dst[1] == 2, "%g %g", dst[0], dst[1]);
    td_release(t);
}

/* A read of a tensor that depends on a failed op: td_read_finish returns TD_EPOISONED and
 * names itself and the op (gather index 5 is outside dim 3). */
static inline void read_start_case_poisoned(td_context *ctx)
{
    float xv[] = {1, 2, 3}, v, o[3];
    int64_t bad[] = {5};
    td_tensor *x = td_from_host(ctx, TD_F32, 1, (int64_t[]){3}, xv);
    td_tensor *i = td_from_host(ctx, TD_I64, 1, (int64_t[]){1}, bad);
    td_tensor *h = td_neg(td_gather(x, i, 0));
    td_tensor *ok = td_neg(x);
    cr_assert_not_null(h, "%s", td_last_error(ctx));
    td_pending_read *ph, *pok;
    cr_assert_eq(td_read_start(h, &v, sizeof v, &ph), TD_OK, "%s", td_last_error(ctx));
    cr_assert_eq(td_read_start(ok, o, sizeof o, &pok), TD_OK, "%s", td_last_error(ctx));
    cr_assert_eq(td_read_finish(ph), TD_EPOISONED, "%s", td_last_error(ctx));
    cr_expect(strncmp(td_last_error(ctx), "td_read_finish: ", 16) == 0 &&
                  strstr(td_last_error(ctx), "gather") != NULL,
              "%s", td_last_error(ctx));
    cr_assert_eq(td_read_finish(pok), TD_OK, "%s", td_last_error(ctx));
    cr_expect(o[0] == -1 && o[1] == -2 && o[2] == -3, "%g %g %g", o[0], o[1], o[2]);
    (void)td_fence(ctx); /* the deferred failure, then forgotten */
    td_release(x);
    td_release(i);
    td_release(h);
    td_release(ok);
}

/* TD_PENDING_READS_MAX reads pending: the next start is TD_EBUSY (nothing started, *out
 * NULL, the message says to finish some); after one finish a start succeeds again. */
static inline void read_start_case_limit(td_context *ctx)
{
    /* t = [7, 9] as i32: every read gives 7 and 9 */
    int32_t v[] = {7, 9};
    int32_t (*dst)[2] = calloc(TD_PENDING_READS_MAX + 1, sizeof *dst);
    td_pending_read *p[TD_PENDING_READS_MAX + 1];
    cr_assert_not_null(dst);
    td_tensor *t = td_from_host(ctx, TD_I32, 1, (int64_t[]){2}, v);
    for (int i = 0; i < TD_PENDING_READS_MAX; i++)
        cr_assert_eq(td_read_start(t, dst[i], sizeof dst[i], &p[i]), TD_OK, "read %d: %s", i,
                     td_last_error(ctx));
    p[TD_PENDING_READS_MAX] = (td_pending_read *)(uintptr_t)1;
    cr_assert_eq(td_read_start(t, dst[TD_PENDING_READS_MAX], sizeof dst[0],
                               &p[TD_PENDING_READS_MAX]),
                 TD_EBUSY);
    cr_expect_null(p[TD_PENDING_READS_MAX]);
    cr_expect_eq(td_last_status(ctx), TD_EBUSY);
    cr_expect(strstr(td_last_error(ctx), "td_read_start: 64 reads are pending") &&
                  strstr(td_last_error(ctx), "td_read_finish"),
              "%s", td_last_error(ctx));
    cr_assert_eq(td_read_finish(p[17]), TD_OK, "%s", td_last_error(ctx));
    p[17] = p[TD_PENDING_READS_MAX];
    cr_assert_eq(td_read_start(t, dst[17], sizeof dst[0], &p[17]), TD_OK, "%s",
                 td_last_error(ctx));
    for (int i = TD_PENDING_READS_MAX - 1; i >= 0; i--) {
        cr_assert_eq(td_read_finish(p[i]), TD_OK, "read %d: %s", i, td_last_error(ctx));
        cr_expect(dst[i][0] == 7 && dst[i][1] == 9, "read %d: %d %d", i, dst[i][0],
                  dst[i][1]);
    }
    td_release(t);
    free(dst);
}

/* A read started before td_graph_begin is finished while the graph is being captured (the
 * finish records nothing), and the graph then replays: x = [2, -3]; neg(x) = [-2, 3]. */
static inline void read_start_case_finish_while_capturing(td_context *ctx)
{
    float xv[] = {2, -3}, rx[2], ry[2];
    td_tensor *x = td_from_host(ctx, TD_F32, 1, (int64_t[]){2}, xv);
    cr_assert_not_null(x, "%s", td_last_error(ctx));
    td_pending_read *p;
    cr_assert_eq(td_read_start(x, rx, sizeof rx, &p), TD_OK, "%s", td_last_error(ctx));
    cr_assert_eq(td_graph_begin(ctx), TD_OK, "%s", td_last_error(ctx));
    td_tensor *in = td_graph_input(ctx, "x", TD_F32, 1, (int64_t[]){2});
    cr_assert_eq(td_read_finish(p), TD_OK, "%s", td_last_error(ctx));
    cr_assert_eq(td_graph_output(ctx, "y", td_neg(in)), TD_OK, "%s", td_last_error(ctx));
    td_graph *g = NULL;
    cr_assert_eq(td_graph_end(ctx, &g), TD_OK, "%s", td_last_error(ctx));
    td_tensor *y = NULL;
    cr_assert_eq(td_graph_run(g, 1, (const char *[]){"x"}, &x, 1, (const char *[]){"y"}, &y),
                 TD_OK, "%s", td_last_error(ctx));
    cr_assert_eq(td_read(y, ry, sizeof ry), TD_OK, "%s", td_last_error(ctx));
    cr_expect(rx[0] == 2 && rx[1] == -3, "%g %g", rx[0], rx[1]);
    cr_expect(ry[0] == -2 && ry[1] == 3, "%g %g", ry[0], ry[1]);
    td_release(y);
    td_release(in);
    td_graph_destroy(g);
    td_release(x);
}

#if defined(__SANITIZE_ADDRESS__)
/* Overwrite the stack below the caller's frame, where dead frames may still hold pointers
 * that a leak check would take for references. */
static __attribute__((noinline)) void read_start_scrub_stack(void)
{
    volatile char junk[256 << 10];
    for (size_t i = 0; i < sizeof junk; i++) junk[i] = 0;
}
#endif

/* The cases that close a context with reads pending, in a frame of their own. */
static __attribute__((noinline)) void read_start_close_pending_run(td_context *ctx)
{
    enum { N = 5, LEN = 3000 }; /* 12000-byte tensors */
    float *src = malloc(LEN * sizeof *src);
    cr_assert_not_null(src);
    for (int i = 0; i < LEN; i++) src[i] = (float)i;
    td_tensor *x = td_from_host(ctx, TD_F32, 1, (int64_t[]){LEN}, src);
    td_pending_read *p[N];
    float *dst[N];
    for (int i = 0; i < N; i++) {
        dst[i] = malloc(LEN * sizeof *dst[i]);
        cr_assert_not_null(dst[i]);
        td_tensor *y = td_add_scalar(x, (double)i);
        cr_assert_eq(td_read_start(y, dst[i], LEN * sizeof *dst[i], &p[i]), TD_OK, "%s",
                     td_last_error(ctx));
        if (i % 2 == 0) td_release(y);
    }
    td_close(ctx);
    for (int i = 0; i < N; i++) free(dst[i]);
    free(src);
}

/* Closing a context with reads pending frees them, and no byte of their dst is written
 * after td_close returns (dst is freed right after it: ASan). Under ASan a leak check runs
 * right after, so that a leak fails this test rather than the worker's exit. Closes ctx. */
static inline void read_start_case_close_pending(td_context *ctx)
{
    read_start_close_pending_run(ctx);
#if defined(__SANITIZE_ADDRESS__)
    read_start_scrub_stack();
    cr_expect_eq(__lsan_do_recoverable_leak_check(), 0, "leaks after td_close (stderr)");
#endif
}

#endif

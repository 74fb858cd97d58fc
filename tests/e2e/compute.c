/* e2e/compute.c — the same op chain in-process, over TCP and over a unix socket must give
 * the same bits, and the numbers a person computes by hand.
 *
 * The chain's inputs are dyadic rationals (k/2^n), so every sum and product below is exact
 * in f32 and the expected values are exact; transcendental results (tanh, softmax) are
 * checked against their known values within a tolerance, and bit-for-bit across transports.
 */
#include "server_fixture.h"
#include "tensord.h"

#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BIG_N (3 * 262144) /* 3 MiB of f32: three write chunks */
#define AR_N 300000        /* 1.2 MB read back: two read chunks */
#define RND_N 1000

typedef struct chain_out {
    float m[4];     /* matmul(k*x, w) */
    float y[2];     /* 0.5 * sum(relu(m + b), axis 1) */
    float th[4];    /* tanh(m) */
    int64_t am[3];  /* argmax(w, axis 1) */
    float mx[2];    /* max(m, axis 0) */
    double mean;    /* mean(k*x) */
    double sm[3];   /* softmax([1,2,3]) in f64 */
    float *big;     /* 2 * (from_host big data) */
    float *big2;    /* td_write over the same tensor, read back */
    float *ar;      /* arange(AR_N) + 1 */
    float rnd[RND_N];
    td_stats stats;
} chain_out;

static void chain_fini(chain_out *o)
{
    free(o->big);
    free(o->big2);
    free(o->ar);
}

#define CHK(cond, ...)                                                                     \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            snprintf(err, errlen, __VA_ARGS__);                                            \
            goto out;                                                                      \
        }                                                                                  \
    } while (0)

#define READ(t, dst, n)                                                                    \
    do {                                                                                   \
        td_status rs_ = td_read((t), (dst), (n));                                          \
        CHK(rs_ == TD_OK, "%s: read " #t ": %s: %s", uri, td_status_name(rs_),            \
            td_last_error(ctx));                                                           \
    } while (0)

/* Run the chain on `uri` with x scaled by k. Returns false with a message on failure. */
static bool run_chain(const char *uri, float k, chain_out *o, char *err, size_t errlen)
{
    memset(o, 0, sizeof *o);
    bool ok = false;
    td_context *ctx = NULL;
    float *bigdata = malloc(BIG_N * sizeof(float));
    float *bigdata2 = malloc(BIG_N * sizeof(float));
    o->big = malloc(BIG_N * sizeof(float));
    o->big2 = malloc(BIG_N * sizeof(float));
    o->ar = malloc(AR_N * sizeof(float));
    CHK(bigdata && bigdata2 && o->big && o->big2 && o->ar, "out of memory");
    for (int i = 0; i < BIG_N; i++) {
        bigdata[i] = (float)(i % 1024) * 0.125f * k;
        bigdata2[i] = (float)(i % 777) - 300.0f;
    }

    td_status st = td_connect(uri, NULL, &ctx);
    CHK(st == TD_OK, "td_connect(%s): %s: %s", uri, td_status_name(st), td_connect_error());
    CHK(strcmp(td_device_name(ctx), "cpu") == 0, "%s: device '%s'", uri, td_device_name(ctx));

    const float xd[6] = {1 * k, 2 * k, 3 * k, 4 * k, 5 * k, 6 * k};
    const float wd[6] = {0.5f, -1.0f, 0.25f, 2.0f, -0.5f, 1.0f};
    td_tensor *x = td_from_host(ctx, TD_F32, 2, (int64_t[]){2, 3}, xd);
    td_tensor *w = td_from_host(ctx, TD_F32, 2, (int64_t[]){3, 2}, wd);
    td_tensor *b = td_arange(ctx, TD_F32, 2, -1.0, 0.5);
    td_tensor *m = td_matmul(x, w);
    td_tensor *y = td_mul_scalar(td_sum(td_relu(td_add(m, b)), 1, (int[]){1}, false), 0.5);
    td_tensor *th = td_tanh(m);
    td_tensor *am = td_argmax(w, 1, false);
    td_tensor *mx = td_max(m, 1, (int[]){0}, false);
    td_tensor *mean = td_mean(td_cast(x, TD_F64), 0, NULL, false);
    td_tensor *sm = td_softmax(td_arange(ctx, TD_F64, 3, 1.0, 1.0), 0);
    td_tensor *big = td_from_host(ctx, TD_F32, 1, (int64_t[]){BIG_N}, bigdata);
    td_tensor *big2x = td_mul_scalar(big, 2.0);
    td_tensor *ar = td_add_scalar(td_arange(ctx, TD_F32, AR_N, 0.0, 1.0), 1.0);
    td_tensor *rnd = td_rand_uniform(ctx, TD_F32, 1, (int64_t[]){RND_N}, 42, 0.0, 1.0);
    CHK(x && w && b && m && y && th && am && mx && mean && sm && big && big2x && ar && rnd,
        "%s: recording failed: %s", uri, td_last_error(ctx));

    READ(m, o->m, sizeof o->m);
    READ(y, o->y, sizeof o->y);
    READ(th, o->th, sizeof o->th);
    READ(am, o->am, sizeof o->am);
    READ(mx, o->mx, sizeof o->mx);
    READ(mean, &o->mean, sizeof o->mean);
    READ(sm, o->sm, sizeof o->sm);
    READ(big2x, o->big, BIG_N * sizeof(float));
    READ(ar, o->ar, AR_N * sizeof(float));
    READ(rnd, o->rnd, sizeof o->rnd);
    /* Overwrite `big` (big2x was computed from its old contents and is read already). */
    st = td_write(big, bigdata2, BIG_N * sizeof(float));
    CHK(st == TD_OK, "%s: td_write: %s: %s", uri, td_status_name(st), td_last_error(ctx));
    READ(big, o->big2, BIG_N * sizeof(float));
    st = td_fence(ctx);
    CHK(st == TD_OK, "%s: fence: %s: %s", uri, td_status_name(st), td_last_error(ctx));
    td_get_stats(ctx, &o->stats);
    ok = true;
out:
    td_close(ctx);
    free(bigdata);
    free(bigdata2);
    return ok;
}

/* Hand-computed results for scale k = 1 and k = 3:
 *   x = k*[[1,2,3],[4,5,6]], w = [[0.5,-1],[0.25,2],[-0.5,1]]
 *   m[0][0] = k(0.5 + 0.5 - 1.5) = -0.5k   m[0][1] = k(-1 + 4 + 3) = 6k
 *   m[1][0] = k(2 + 1.25 - 3)   = 0.25k   m[1][1] = k(-4 + 10 + 6) = 12k
 *   b = [-1, -0.5]; relu(m + b) keeps only column 1: 6k - 0.5, 12k - 0.5
 *   y = 0.5 * row sums = [3k - 0.25, 6k - 0.25]
 *   argmax over rows of w: [0, 1, 1]; max over axis 0 of m: [0.25k, 12k]; mean(x) = 3.5k */
static void check_hand(const chain_out *o, float k)
{
    const float m[4] = {-0.5f * k, 6 * k, 0.25f * k, 12 * k};
    for (int i = 0; i < 4; i++)
        cr_expect_eq(o->m[i], m[i], "m[%d] = %g, want %g", i, o->m[i], m[i]);
    cr_expect_eq(o->y[0], 3 * k - 0.25f, "y[0] = %g", o->y[0]);
    cr_expect_eq(o->y[1], 6 * k - 0.25f, "y[1] = %g", o->y[1]);
    cr_expect_eq(o->am[0], 0);
    cr_expect_eq(o->am[1], 1);
    cr_expect_eq(o->am[2], 1);
    cr_expect_eq(o->mx[0], 0.25f * k);
    cr_expect_eq(o->mx[1], 12 * k);
    cr_expect_eq(o->mean, 3.5 * k, "mean = %.17g", o->mean);
    /* softmax([1,2,3]) = e^{i-3} / (e^-2 + e^-1 + 1) */
    const double sm[3] = {0.09003057317038046, 0.24472847105479764, 0.6652409557748218};
    for (int i = 0; i < 3; i++)
        cr_expect(fabs(o->sm[i] - sm[i]) < 1e-12, "softmax[%d] = %.17g", i, o->sm[i]);
    int bad = -1;
    for (int i = 0; i < BIG_N && bad < 0; i++)
        if (o->big[i] != (float)(i % 1024) * 0.25f * k) bad = i;
    cr_expect_eq(bad, -1, "big*2 wrong at %d: %g", bad, bad >= 0 ? o->big[bad] : 0.0f);
    bad = -1;
    for (int i = 0; i < BIG_N && bad < 0; i++)
        if (o->big2[i] != (float)(i % 777) - 300.0f) bad = i;
    cr_expect_eq(bad, -1, "written data wrong at %d: %g", bad, bad >= 0 ? o->big2[bad] : 0.0f);
    bad = -1;
    for (int i = 0; i < AR_N && bad < 0; i++)
        if (o->ar[i] != (float)(i + 1)) bad = i;
    cr_expect_eq(bad, -1, "arange+1 wrong at %d: %g", bad, bad >= 0 ? o->ar[bad] : 0.0f);
    /* [low, high), except that rounding to f32 may give `high` itself (tensord.h). */
    for (int i = 0; i < RND_N; i++)
        if (!(o->rnd[i] >= 0.0f && o->rnd[i] <= 1.0f)) {
            cr_expect_fail("rand_uniform[%d] = %g outside [0, 1]", i, o->rnd[i]);
            break;
        }
}

/* tanh(-0.5), tanh(6), tanh(0.25), tanh(12) (k = 1). */
static void check_tanh(const chain_out *o)
{
    const double th[4] = {-0.46211715726000974, 0.9999877116507956, 0.24491866240370913,
                          0.9999999999244973};
    for (int i = 0; i < 4; i++)
        cr_expect(fabs(o->th[i] - th[i]) < 1e-6, "tanh[%d] = %.9g, want %.9g", i, o->th[i],
                  th[i]);
}

static void check_same_bits(const chain_out *a, const chain_out *b, const char *what)
{
    cr_expect(memcmp(a->m, b->m, sizeof a->m) == 0, "%s: matmul differs", what);
    cr_expect(memcmp(a->y, b->y, sizeof a->y) == 0, "%s: y differs", what);
    cr_expect(memcmp(a->th, b->th, sizeof a->th) == 0, "%s: tanh differs", what);
    cr_expect(memcmp(a->am, b->am, sizeof a->am) == 0, "%s: argmax differs", what);
    cr_expect(memcmp(a->mx, b->mx, sizeof a->mx) == 0, "%s: max differs", what);
    cr_expect(memcmp(&a->mean, &b->mean, sizeof a->mean) == 0, "%s: mean differs", what);
    cr_expect(memcmp(a->sm, b->sm, sizeof a->sm) == 0, "%s: softmax differs", what);
    cr_expect(memcmp(a->big, b->big, BIG_N * sizeof(float)) == 0, "%s: big differs", what);
    cr_expect(memcmp(a->big2, b->big2, BIG_N * sizeof(float)) == 0, "%s: big2 differs", what);
    cr_expect(memcmp(a->ar, b->ar, AR_N * sizeof(float)) == 0, "%s: arange differs", what);
    cr_expect(memcmp(a->rnd, b->rnd, sizeof a->rnd) == 0, "%s: rand_uniform differs", what);
}

static td_test_server tcp_srv, unix_srv;

static void start_both(void)
{
    char err[600];
    cr_assert(td_test_server_start(&tcp_srv, false, NULL, err, sizeof err), "%s", err);
    cr_assert(td_test_server_start(&unix_srv, true, NULL, err, sizeof err), "%s", err);
}

static void stop_both(void)
{
    int a = td_test_server_stop(&tcp_srv);
    int b = td_test_server_stop(&unix_srv);
    cr_expect_eq(a, 0, "tcp tensord exited with %d", a);
    cr_expect_eq(b, 0, "unix tensord exited with %d", b);
}

Test(compute, local_tcp_unix_identical, .init = start_both, .fini = stop_both, .timeout = 120)
{
    char err[1200], uri_tcp[600], uri_unix[600];
    td_test_server_uri(&tcp_srv, "cpu", uri_tcp, sizeof uri_tcp);
    td_test_server_uri(&unix_srv, "cpu", uri_unix, sizeof uri_unix);
    chain_out local, tcp, ux;
    cr_assert(run_chain("local:cpu", 1, &local, err, sizeof err), "%s", err);
    cr_assert(run_chain(uri_tcp, 1, &tcp, err, sizeof err), "%s", err);
    cr_assert(run_chain(uri_unix, 1, &ux, err, sizeof err), "%s", err);
    check_hand(&local, 1);
    check_tanh(&local);
    check_hand(&tcp, 1);
    check_tanh(&tcp);
    check_same_bits(&local, &tcp, "local vs tcp");
    check_same_bits(&local, &ux, "local vs unix");

    /* The remote transport counts what crossed the wire: two 3 MiB uploads of big data plus
     * the small inputs, and everything read back. */
    size_t up = 2 * (size_t)BIG_N * sizeof(float) + 2 * 6 * sizeof(float);
    size_t down = sizeof tcp.m + sizeof tcp.y + sizeof tcp.th + sizeof tcp.am + sizeof tcp.mx +
                  sizeof tcp.mean + sizeof tcp.sm + 2 * (size_t)BIG_N * sizeof(float) +
                  AR_N * sizeof(float) + sizeof tcp.rnd;
    cr_expect_geq(tcp.stats.bytes_sent, up, "bytes_sent %llu < %zu",
                  (unsigned long long)tcp.stats.bytes_sent, up);
    cr_expect_eq(tcp.stats.bytes_received, down, "bytes_received %llu != %zu",
                 (unsigned long long)tcp.stats.bytes_received, down);
    cr_expect_geq(tcp.stats.round_trips, 12, "round_trips %llu",
                  (unsigned long long)tcp.stats.round_trips);
    cr_expect_geq(tcp.stats.batches_sent, 1);
    chain_fini(&local);
    chain_fini(&tcp);
    chain_fini(&ux);
}

typedef struct worker_arg {
    const char *uri;
    float k;
    int rounds;
    bool ok;
    char err[1200];
    chain_out last;
} worker_arg;

static void *worker(void *p)
{
    worker_arg *a = p;
    a->ok = true;
    for (int r = 0; r < a->rounds && a->ok; r++) {
        if (r > 0) chain_fini(&a->last);
        a->ok = run_chain(a->uri, a->k, &a->last, a->err, sizeof a->err);
    }
    return NULL;
}

Test(compute, two_concurrent_clients, .init = start_both, .fini = stop_both, .timeout = 120)
{
    char uri_tcp[600], uri_unix[600];
    td_test_server_uri(&tcp_srv, "cpu", uri_tcp, sizeof uri_tcp);
    td_test_server_uri(&unix_srv, "cpu", uri_unix, sizeof uri_unix);
    /* Two clients on one server, each with its own inputs, plus one on the other server. */
    worker_arg a[3] = {{.uri = uri_tcp, .k = 1, .rounds = 4},
                       {.uri = uri_tcp, .k = 3, .rounds = 4},
                       {.uri = uri_unix, .k = 3, .rounds = 2}};
    pthread_t th[3];
    for (int i = 0; i < 3; i++) cr_assert_eq(pthread_create(&th[i], NULL, worker, &a[i]), 0);
    for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 3; i++) {
        cr_assert(a[i].ok, "client %d: %s", i, a[i].err);
        check_hand(&a[i].last, a[i].k);
    }
    check_same_bits(&a[1].last, &a[2].last, "tcp vs unix, k = 3");
    for (int i = 0; i < 3; i++) chain_fini(&a[i].last);

    td_server_info info;
    cr_expect(td_test_wait_usage(tcp_srv.addr, 0, 0, 5000, &info),
              "after every client closed: %llu sessions, %llu bytes in use",
              (unsigned long long)info.sessions, (unsigned long long)info.bytes_in_use);
}

/* Zero-length tensors and rank-0 scalars cross the wire as empty and 1-element reads. */
static void edge_shapes(const char *uri)
{
    td_context *ctx;
    cr_assert_eq(td_connect(uri, NULL, &ctx), TD_OK, "%s: %s", uri, td_connect_error());
    td_tensor *z = td_full(ctx, TD_F32, 2, (int64_t[]){0, 3}, 1.0);
    cr_assert(z != NULL, "%s", td_last_error(ctx));
    cr_expect_eq(td_nbytes(z), 0);
    cr_expect_eq(td_write(z, NULL, 0), TD_OK, "%s: %s", uri, td_last_error(ctx));
    cr_expect_eq(td_read(z, NULL, 0), TD_OK, "%s: %s", uri, td_last_error(ctx));
    td_tensor *zs = td_sum(z, 1, (int[]){0}, false); /* sum over a zero-length axis: 0 */
    float zsum[3] = {9, 9, 9};
    cr_expect_eq(td_read(zs, zsum, sizeof zsum), TD_OK, "%s: %s", uri, td_last_error(ctx));
    for (int i = 0; i < 3; i++) cr_expect_eq(zsum[i], 0.0f);
    double v = 0;
    td_tensor *s = td_full(ctx, TD_F64, 0, NULL, -0.0);
    cr_expect_eq(td_read_scalar(s, &v), TD_OK, "%s: %s", uri, td_last_error(ctx));
    cr_expect(v == 0.0 && signbit(v), "%s: full(-0.0) gave %g (sign lost)", uri, v);
    cr_expect_eq(td_fence(ctx), TD_OK, "%s: %s", uri, td_last_error(ctx));
    td_close(ctx);
}

Test(compute, zero_sized_and_scalars, .init = start_both, .fini = stop_both, .timeout = 120)
{
    char uri_tcp[600];
    td_test_server_uri(&tcp_srv, "cpu", uri_tcp, sizeof uri_tcp);
    edge_shapes("local:cpu");
    edge_shapes(uri_tcp);
}

/* 35000 add_scalar steps (two ops each) recorded as one batch of 70000 ops: more than one
 * wire message may carry (65536 ops), so the transport must split it. Integers below 2^24
 * are exact in f32: the result is 35000. */
static float long_chain(const char *uri, td_stats *stats)
{
    td_options o = {.batch_max_ops = 200000};
    td_context *ctx;
    cr_assert_eq(td_connect(uri, &o, &ctx), TD_OK, "%s: %s", uri, td_connect_error());
    td_tensor *x = td_full(ctx, TD_F32, 1, (int64_t[]){1}, 0.0);
    for (int i = 0; i < 35000; i++) {
        td_tensor *y = td_add_scalar(x, 1.0);
        cr_assert(y != NULL, "step %d: %s", i, td_last_error(ctx));
        td_release(x);
        x = y;
    }
    float v = -1;
    cr_assert_eq(td_read(x, &v, sizeof v), TD_OK, "%s: %s", uri, td_last_error(ctx));
    cr_expect_eq(td_fence(ctx), TD_OK, "%s: %s", uri, td_last_error(ctx));
    td_get_stats(ctx, stats);
    td_close(ctx);
    return v;
}

Test(compute, batch_larger_than_one_message, .init = start_both, .fini = stop_both,
     .timeout = 120)
{
    char uri_tcp[600];
    td_test_server_uri(&tcp_srv, "cpu", uri_tcp, sizeof uri_tcp);
    td_stats ls, rs;
    cr_expect_eq(long_chain("local:cpu", &ls), 35000.0f);
    cr_expect_eq(long_chain(uri_tcp, &rs), 35000.0f);
    cr_expect_geq(rs.ops_recorded, 70000);
    cr_expect_geq(rs.batches_sent, 2, "70000+ ops went out in %llu message(s)",
                  (unsigned long long)rs.batches_sent);
}

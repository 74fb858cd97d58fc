/* e2e/cpu_determinism.c — local:cpu and a remote cpu device give the same matmul bits even
 * when their thread settings differ (issue 11, item 4).
 *
 * The server is a real tensord started with OPENBLAS_NUM_THREADS=1 in its environment and
 * --device-threads 1; the client runs local:cpu in this process with OpenBLAS at its default
 * (one thread per core when it loaded) and TENSORD_CPU_THREADS=5, set after the server was
 * started so that the server does not inherit it. Before the CPU matmul ran fixed tiles of
 * single-threaded GEMMs, f32 [32,1000] x [1000,32] differed in 772 of 1024 elements between
 * these two. Checked: f32 and f64, K > 512, a tiled shape with ragged edges, batched with a
 * broadcast weight and with both operands' batch dims broadcast; bit equality of every
 * element, and (once per case) each element within K * u * sum_k |a_ik b_kj| of a long
 * double reference computed here (u = 2^-24 for f32, 2^-53 for f64; Higham, "Accuracy and
 * Stability of Numerical Algorithms", 2nd ed., section 3.1).
 */
#include "server_fixture.h"
#include "suite_fixture.h"
#include "tensord.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void start_single_threaded(void)
{
    setenv("OPENBLAS_NUM_THREADS", "1", 1); /* inherited by the server only */
    char err[600];
    const char *args[] = {"--device-threads", "1", NULL};
    bool ok = td_test_server_start(&srv, false, args, err, sizeof err);
    unsetenv("OPENBLAS_NUM_THREADS");
    cr_assert(ok, "%s", err);
    setenv("TENSORD_CPU_THREADS", "5", 1); /* read when this process opens local:cpu */
}

typedef struct mm_case {
    const char *what;
    int ra, rb, ro;
    int64_t da[4], db[4], dout[4];
} mm_case;

static const mm_case k_cases[] = {
    {"[32,1000]x[1000,32]", 2, 2, 2, {32, 1000}, {1000, 32}, {32, 32}},
    {"[64,513]x[513,64]", 2, 2, 2, {64, 513}, {513, 64}, {64, 64}},
    {"[300,600]x[600,1100]", 2, 2, 2, {300, 600}, {600, 1100}, {300, 1100}},
    {"[3,70,600]x[600,90]", 3, 2, 3, {3, 70, 600}, {600, 90}, {3, 70, 90}},
    {"[2,1,40,530]x[3,530,50]", 4, 3, 4, {2, 1, 40, 530}, {3, 530, 50}, {2, 3, 40, 50}},
};

static int64_t prod_dims(int r, const int64_t *d)
{
    int64_t n = 1;
    for (int i = 0; i < r; i++) n *= d[i];
    return n;
}

/* Deterministic values in [-1, 1) with 12 significant bits (exact in f32). */
static void fill(double *v, int64_t n, uint32_t salt)
{
    uint32_t x = 2463534242u ^ salt;
    for (int64_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        v[i] = ((double)(x >> 20) - 2048.0) / 2048.0;
    }
}

/* Element offset of output batch ob's matrix in an operand of rank r, dims d (numpy
 * broadcasting against the output's batch dims od of rank orank - 2). */
static int64_t batch_offset(int r, const int64_t *d, int orank, const int64_t *od, int64_t ob)
{
    int64_t off = 0, stride = d[r - 1] * d[r - 2], rem = ob;
    for (int ax = orank - 3; ax >= 0; ax--) {
        int64_t idx = rem % od[ax];
        rem /= od[ax];
        int ia = ax - (orank - r);
        if (ia >= 0) {
            if (d[ia] != 1) off += idx * stride;
            stride *= d[ia];
        }
    }
    return off;
}

/* a @ b on ctx; returns the output bytes (malloc'd). */
static void *matmul_on(td_context *ctx, const mm_case *c, td_dtype dt, const void *a,
                       const void *b, size_t *nbytes)
{
    td_tensor *ta = td_from_host(ctx, dt, c->ra, c->da, a);
    td_tensor *tb = td_from_host(ctx, dt, c->rb, c->db, b);
    td_tensor *tc = td_matmul(ta, tb);
    cr_assert_not_null(tc, "%s: %s", c->what, td_last_error(ctx));
    *nbytes = td_nbytes(tc);
    void *out = malloc(*nbytes);
    cr_assert_eq(td_read(tc, out, *nbytes), TD_OK, "%s: %s", c->what, td_last_error(ctx));
    td_release(ta);
    td_release(tb);
    td_release(tc);
    return out;
}

static void check_reference(const mm_case *c, td_dtype dt, const double *av, const double *bv,
                            const void *got)
{
    const int64_t m = c->dout[c->ro - 2], n = c->dout[c->ro - 1], k = c->da[c->ra - 1];
    const double u = dt == TD_F32 ? ldexp(1.0, -24) : ldexp(1.0, -53);
    for (int64_t ob = 0; ob < prod_dims(c->ro - 2, c->dout); ob++) {
        const double *ab = av + batch_offset(c->ra, c->da, c->ro, c->dout, ob);
        const double *bb = bv + batch_offset(c->rb, c->db, c->ro, c->dout, ob);
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                long double acc = 0, mag = 0;
                for (int64_t kk = 0; kk < k; kk++) {
                    long double p = (long double)ab[i * k + kk] * bb[kk * n + j];
                    acc += p;
                    mag += fabsl(p);
                }
                int64_t e = (ob * m + i) * n + j;
                double g = dt == TD_F32 ? ((const float *)got)[e] : ((const double *)got)[e];
                cr_assert(fabs(g - (double)acc) <= (double)k * u * (double)mag,
                          "%s: element %lld is %.17g, reference %.17Lg", c->what, (long long)e,
                          g, acc);
            }
    }
}

TestSuite(cpu_determinism, .init = start_single_threaded, .fini = stop, .timeout = 120);

Test(cpu_determinism, remote_single_threaded_server_matches_local_client)
{
    td_server_info info;
    cr_assert_eq(td_server_info_get(srv.addr, 5000, &info), TD_OK, "%s", td_connect_error());
    cr_assert_str_eq(info.devices[0].description, "CPU, 1 threads, OpenBLAS");
    char uri[600];
    td_test_server_uri(&srv, "cpu", uri, sizeof uri);
    td_context *local = NULL, *remote = NULL;
    cr_assert_eq(td_connect("local:cpu", NULL, &local), TD_OK, "%s", td_connect_error());
    cr_assert_eq(td_connect(uri, NULL, &remote), TD_OK, "%s", td_connect_error());
    for (size_t ci = 0; ci < sizeof k_cases / sizeof k_cases[0]; ci++) {
        const mm_case *c = &k_cases[ci];
        int64_t na = prod_dims(c->ra, c->da), nb = prod_dims(c->rb, c->db);
        double *av = malloc(sizeof(double) * (size_t)na), *bv = malloc(sizeof(double) * (size_t)nb);
        float *af = malloc(sizeof(float) * (size_t)na), *bf = malloc(sizeof(float) * (size_t)nb);
        fill(av, na, (uint32_t)ci * 2 + 1);
        fill(bv, nb, (uint32_t)ci * 2 + 2);
        for (int64_t i = 0; i < na; i++) af[i] = (float)av[i];
        for (int64_t i = 0; i < nb; i++) bf[i] = (float)bv[i];
        for (int d = 0; d < 2; d++) {
            td_dtype dt = d == 0 ? TD_F32 : TD_F64;
            const void *a = d == 0 ? (const void *)af : av, *b = d == 0 ? (const void *)bf : bv;
            size_t n1, n2;
            void *l = matmul_on(local, c, dt, a, b, &n1);
            void *r = matmul_on(remote, c, dt, a, b, &n2);
            cr_assert_eq(n1, n2);
            size_t es = td_dtype_size(dt), diff = 0;
            for (size_t e = 0; e < n1 / es; e++)
                diff += memcmp((char *)l + e * es, (char *)r + e * es, es) != 0;
            cr_assert_eq(diff, 0, "%s %s: local (5 threads) and remote (1 thread, "
                         "OPENBLAS_NUM_THREADS=1) differ in %zu of %zu elements", c->what,
                         td_dtype_name(dt), diff, n1 / es);
            check_reference(c, dt, av, bv, l);
            free(l);
            free(r);
        }
        free(av);
        free(bv);
        free(af);
        free(bf);
    }
    td_close(local);
    td_close(remote);
}

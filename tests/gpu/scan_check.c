/* scan_check.c — gpu_scan.cu's long-line cumsum on a device: determinism and accuracy.
 *
 * For each length n (around the tile sizes of every variant: 1, tile - 1, tile, tile + 1
 * for tiles of 8192 and 16384 f32 elements, 2^20 + 3, 2^28 unless --quick) cumsum of f32
 * data in [-1, 1) runs twice on the device: the two results must agree bit for bit (the
 * association depends on the shape only, never on timing), and each element must lie within
 * 2^-23 |ref_i| + (i + 64) 2^-52 S_i of ref_i, the prefix sum in long double (S_i: the sum of
 * the |x_j| up to i): one f32 rounding of a sum accumulated in double (gpu_scan.cu's module
 * comment gives the association depth). Also two lines of tile + 5 along the last axis.
 * The variant is the device's TENSORD_GPU_SCAN_VARIANT (tests/gpu/memops-on-gpu-host.sh
 * runs this once per variant); the reference needs no second device.
 *
 *     scan-check [--device URI] [--quick]      exit 0 when every case passes */
#include "tensord.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t g_rng = 0x2545f4914f6cdd1du;
static float unit(void) /* xorshift64*, [-1, 1) */
{
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return (float)((double)((g_rng * 0x2545f4914f6cdd1du) >> 40) / 8388608.0 - 1.0);
}

static int run_cumsum(td_context *ctx, const float *x, int rank, const int64_t *dims,
                      int64_t nelem, float *y)
{
    td_tensor *t = td_from_host(ctx, TD_F32, rank, dims, x);
    td_tensor *c = t != NULL ? td_cumsum(t, rank - 1) : NULL;
    const int ok = c != NULL && td_read(c, y, (size_t)nelem * sizeof *y) == TD_OK;
    if (!ok) fprintf(stderr, "scan-check: cumsum failed: %s\n", td_last_error(ctx));
    td_release(c);
    td_release(t);
    return ok;
}

/* One case: `lines` lines of n elements. Returns 1 when it passes. */
static int run_case(td_context *ctx, int64_t lines, int64_t n)
{
    const int64_t nelem = lines * n;
    float *x = malloc((size_t)nelem * sizeof *x), *y1 = malloc((size_t)nelem * sizeof *y1),
          *y2 = malloc((size_t)nelem * sizeof *y2);
    int ok = x != NULL && y1 != NULL && y2 != NULL;
    if (ok) {
        for (int64_t i = 0; i < nelem; i++) x[i] = unit();
        const int64_t dims[2] = {lines, n};
        const int rank = lines > 1 ? 2 : 1;
        ok = run_cumsum(ctx, x, rank, dims + (rank == 1), nelem, y1) &&
             run_cumsum(ctx, x, rank, dims + (rank == 1), nelem, y2);
    }
    int64_t differ = 0, bad = 0, first_differ = -1, first_bad = -1;
    double worst = 0;
    for (int64_t l = 0; ok && l < lines; l++) {
        long double ref = 0, abs = 0;
        for (int64_t i = 0; i < n; i++) {
            const int64_t e = l * n + i;
            ref += x[e];
            abs += fabsl((long double)x[e]);
            if (memcmp(&y1[e], &y2[e], sizeof(float)) != 0 && differ++ == 0) first_differ = e;
            const double tol =
                ldexp(fabs((double)ref), -23) + ldexp((double)(i + 64), -52) * (double)abs;
            const double err = fabs((double)((long double)y1[e] - ref));
            if (!(err <= tol) && bad++ == 0) first_bad = e;
            if (tol > 0 && err / tol > worst) worst = err / tol;
        }
    }
    printf("%s lines %lld n %lld: %lld elements differ between runs, %lld out of bounds "
           "(worst error/bound %.3f)",
           ok && differ == 0 && bad == 0 ? "ok  " : "FAIL", (long long)lines, (long long)n,
           (long long)differ, (long long)bad, worst);
    if (first_differ >= 0)
        printf("; first differing element %lld: %a vs %a", (long long)first_differ,
               (double)y1[first_differ], (double)y2[first_differ]);
    if (first_bad >= 0) printf("; first out of bounds: element %lld", (long long)first_bad);
    printf("\n");
    ok = ok && differ == 0 && bad == 0;
    free(x);
    free(y1);
    free(y2);
    return ok;
}

int main(int argc, char **argv)
{
    const char *uri = "local:cuda:0";
    int quick = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--device") == 0 && i + 1 < argc) uri = argv[++i];
        else if (strcmp(argv[i], "--quick") == 0) quick = 1;
        else {
            fprintf(stderr, "usage: scan-check [--device URI] [--quick]\n");
            return 2;
        }
    }
    td_context *ctx;
    if (td_connect(uri, NULL, &ctx) != TD_OK) {
        fprintf(stderr, "scan-check: %s\n", td_connect_error());
        return 1;
    }
    const char *v = getenv("TENSORD_GPU_SCAN_VARIANT");
    printf("scan-check on %s, TENSORD_GPU_SCAN_VARIANT=%s\n", uri, v != NULL ? v : "(unset)");
    const int64_t ns[] = {1,     8191,  8192,  8193,          16383,          16384,
                          16385, 257,   40000, (1 << 20) + 3, (int64_t)1 << 28};
    int failed = 0, run = 0;
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
        if (quick && ns[i] > (1 << 21)) continue;
        failed += !run_case(ctx, 1, ns[i]);
        run++;
        fflush(stdout);
    }
    failed += !run_case(ctx, 2, 8192 + 5) + !run_case(ctx, 2, 16384 + 5);
    run += 2;
    printf("scan-check: %d cases, %d failed\n", run, failed);
    td_close(ctx);
    return failed != 0;
}

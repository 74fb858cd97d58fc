/* nn_bench.c — tensord's layer norm (issue 13's benchmark shape [8192, 4096] f32 and its
 * backward dx) on a device, timed like bench/cpu_bench.c: inputs made once, one untimed
 * pass, then the median of ROUNDS timed loops of REPS ops each followed by td_fence (the op
 * has run), each result released at once. GB/s counts the bytes read and written once
 * (x and y; dy too for the backward). bench/nn_torch.py is the PyTorch side with the same
 * row names; bench/nn_bench.sh runs both back to back.
 *
 * Usage: nn-bench [--device URI] [--rows N] [--cols N] [--reps N] [--rounds N] */
#include "tensord.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

enum { LN, LN_NOAFFINE, LN_BWD, VAR_BN };

int main(int argc, char **argv)
{
    const char *uri = "local:cpu";
    int64_t rows = 8192, cols = 4096;
    int reps = 10, rounds = 5;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--device") == 0) uri = argv[i + 1];
        else if (strcmp(argv[i], "--rows") == 0) rows = atoll(argv[i + 1]);
        else if (strcmp(argv[i], "--cols") == 0) cols = atoll(argv[i + 1]);
        else if (strcmp(argv[i], "--reps") == 0) reps = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--rounds") == 0) rounds = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "nn-bench: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (rows < 1 || cols < 1 || reps < 1 || rounds < 1 || rounds > 64) {
        fprintf(stderr, "nn-bench: bad sizes\n");
        return 2;
    }
    td_context *ctx;
    if (td_connect(uri, NULL, &ctx) != TD_OK) {
        fprintf(stderr, "nn-bench: %s\n", td_connect_error());
        return 1;
    }
    const int64_t d[2] = {rows, cols};
    td_tensor *x = td_rand_normal(ctx, TD_F32, 2, d, 1, 0.5, 2.0);
    td_tensor *dy = td_rand_normal(ctx, TD_F32, 2, d, 2, 0.0, 1.0);
    td_tensor *w = td_rand_normal(ctx, TD_F32, 1, &cols, 3, 1.0, 0.1);
    td_tensor *b = td_rand_normal(ctx, TD_F32, 1, &cols, 4, 0.0, 0.1);
    /* batch norm's statistics: var over axes {0, 2, 3} of an NCHW activation */
    const int64_t bn[4] = {128, 64, 28, 28};
    const int bn_axes[3] = {0, 2, 3};
    td_tensor *xb = td_rand_normal(ctx, TD_F32, 4, bn, 5, 0.5, 2.0);
    if (x == NULL || dy == NULL || w == NULL || b == NULL || xb == NULL ||
        td_fence(ctx) != TD_OK) {
        fprintf(stderr, "nn-bench: %s\n", td_last_error(ctx));
        return 1;
    }
    static const char *const names[] = {"layer_norm_f32", "layer_norm_f32_noaffine",
                                        "layer_norm_backward_dx_f32",
                                        "var_bn_stats_f32"};
    printf("# %s, [%lld, %lld] f32, median of %d x %d\n", uri, (long long)rows,
           (long long)cols, rounds, reps);
    for (int k = 0; k < 4; k++) {
        double t[64];
        for (int r = -1; r < rounds; r++) {
            double t0 = now();
            for (int i = 0; i < reps; i++) {
                td_tensor *y = k == LN            ? td_layer_norm(x, 1, w, b, 1e-5)
                               : k == LN_NOAFFINE ? td_layer_norm(x, 1, NULL, NULL, 1e-5)
                               : k == LN_BWD      ? td_layer_norm_backward(dy, x, 1, w, 1e-5,
                                                                           NULL, NULL)
                                                  : td_var(xb, 3, bn_axes, false, 0.0);
                if (y == NULL || td_fence(ctx) != TD_OK) {
                    fprintf(stderr, "nn-bench: %s\n", td_last_error(ctx));
                    return 1;
                }
                td_release(y);
            }
            if (r >= 0) t[r] = (now() - t0) / reps;
        }
        qsort(t, (size_t)rounds, sizeof t[0], cmp);
        const double s = t[rounds / 2];
        /* bytes read or written once: x and y (and dy); var reads x only */
        const double bytes = k == VAR_BN ? (double)(bn[0] * bn[1] * bn[2] * bn[3]) * 4
                                         : (double)rows * cols * 4 * (k == LN_BWD ? 3 : 2);
        printf("%-28s %10.3f ms %10.2f GB/s\n", names[k], s * 1e3, bytes / s / 1e9);
    }
    td_release(x);
    td_release(dy);
    td_release(w);
    td_release(b);
    td_release(xb);
    td_close(ctx);
    return 0;
}

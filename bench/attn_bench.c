/* attn_bench.c — td_scaled_dot_product_attention on a device at issue 13's benchmark shape
 * (batch 8, 16 heads, sequence 2048, head dim 64), causal and not, next to
 * bench/attn_torch.py (torch.nn.functional.scaled_dot_product_attention) with the same row
 * names. Timed like bench/nn_bench.c: inputs made once, one untimed pass, then the median of
 * ROUNDS timed loops of REPS ops each followed by td_fence, each result released at once.
 * TFLOP/s counts 4 B H L S D multiply-adds x 2 (the two matmuls; half that for causal, as
 * FlashAttention's papers count).
 *
 * Usage: attn-bench [--device URI] [--batch N] [--heads N] [--seq N] [--dim N] [--reps N]
 *                   [--rounds N] [--dtype f32|f64|bf16|f16]. Never asserts on speed.
 * bf16/f16 rows (the CUDA backend's fused kernel) pair with attn_torch.py's bf16 rows. */
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

int main(int argc, char **argv)
{
    const char *uri = "local:cpu", *dts = "f32";
    int64_t batch = 8, heads = 16, seq = 2048, dim = 64;
    int reps = 5, rounds = 3;
    for (int i = 1; i < argc; i += 2) {
        if (strcmp(argv[i], "--help") == 0 || i + 1 >= argc) {
            fprintf(stderr, "usage: attn-bench [--device URI] [--batch N] [--heads N] [--seq N] "
                            "[--dim N] [--reps N] [--rounds N] [--dtype f32|f64|bf16|f16]\n");
            return strcmp(argv[i], "--help") == 0 ? 0 : 2;
        }
        if (strcmp(argv[i], "--device") == 0) uri = argv[i + 1];
        else if (strcmp(argv[i], "--batch") == 0) batch = atoll(argv[i + 1]);
        else if (strcmp(argv[i], "--heads") == 0) heads = atoll(argv[i + 1]);
        else if (strcmp(argv[i], "--seq") == 0) seq = atoll(argv[i + 1]);
        else if (strcmp(argv[i], "--dim") == 0) dim = atoll(argv[i + 1]);
        else if (strcmp(argv[i], "--reps") == 0) reps = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--rounds") == 0) rounds = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--dtype") == 0) dts = argv[i + 1];
        else {
            fprintf(stderr, "attn-bench: unknown option %s (try --help)\n", argv[i]);
            return 2;
        }
    }
    td_dtype dt = strcmp(dts, "f64") == 0    ? TD_F64
                  : strcmp(dts, "bf16") == 0 ? TD_BF16
                  : strcmp(dts, "f16") == 0  ? TD_F16
                                             : TD_F32;
    if (batch < 1 || heads < 1 || seq < 1 || dim < 1 || reps < 1 || rounds < 1 || rounds > 64 ||
        (strcmp(dts, "f32") != 0 && strcmp(dts, "f64") != 0 && strcmp(dts, "bf16") != 0 &&
         strcmp(dts, "f16") != 0)) {
        fprintf(stderr, "attn-bench: bad sizes or dtype (f32, f64, bf16 or f16)\n");
        return 2;
    }
    td_context *ctx;
    if (td_connect(uri, NULL, &ctx) != TD_OK) {
        fprintf(stderr, "attn-bench: %s\n", td_connect_error());
        return 1;
    }
    const int64_t d[4] = {batch, heads, seq, dim};
    td_tensor *q = td_rand_normal(ctx, dt, 4, d, 1, 0, 1);
    td_tensor *k = td_rand_normal(ctx, dt, 4, d, 2, 0, 1);
    td_tensor *v = td_rand_normal(ctx, dt, 4, d, 3, 0, 1);
    if (q == NULL || k == NULL || v == NULL || td_fence(ctx) != TD_OK) {
        fprintf(stderr, "attn-bench: %s\n", td_last_error(ctx));
        return 1;
    }
    printf("# %s, q k v [%lld, %lld, %lld, %lld] %s, median of %d x %d\n", uri,
           (long long)batch, (long long)heads, (long long)seq, (long long)dim, dts, rounds, reps);
    for (int causal = 0; causal < 2; causal++) {
        double t[64];
        for (int r = -1; r < rounds; r++) {
            double t0 = now();
            for (int i = 0; i < reps; i++) {
                td_tensor *y = td_scaled_dot_product_attention(q, k, v, NULL, causal != 0, 0);
                if (y == NULL || td_fence(ctx) != TD_OK) {
                    fprintf(stderr, "attn-bench: %s\n", td_last_error(ctx));
                    return 1;
                }
                td_release(y);
            }
            if (r >= 0) t[r] = (now() - t0) / reps;
        }
        qsort(t, (size_t)rounds, sizeof t[0], cmp);
        const double s = t[rounds / 2];
        const double flop = 4.0 * batch * heads * seq * seq * dim / (causal ? 2 : 1);
        printf("attention_%s%-14s %10.3f ms %10.2f TFLOP/s\n", dts, causal ? "_causal" : "",
               s * 1e3, flop / s / 1e12);
    }
    td_release(q);
    td_release(k);
    td_release(v);
    td_close(ctx);
    return 0;
}

/* gpu_bench.c — device-side speed of tensord ops on one device URI, for the side-by-side
 * comparison with PyTorch that bench/gpu_torch.py makes on the same machine in the same
 * run (BENCHMARKS.md, "GPU"). Inputs are generated on the device (td_rand_uniform), every
 * measure runs a warm-up, then `reps` ops between two fences; the time per op includes the
 * op's dispatch from this client (local or remote), which is the point of the comparison.
 * Usage: gpu-bench [--device URI] [--reps N] [--quick]
 * Prints one line per measure: name, size, ms per op, rate (GFLOP/s or GB/s). */
#include "tensord.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef td_tensor *(*bin_fn)(td_tensor *, td_tensor *);

/* Time `reps` runs of op(a, b); returns seconds per op, or -1 on error. */
static double time_op(td_context *ctx, td_tensor *(*op)(td_tensor *, td_tensor *, int),
                      td_tensor *a, td_tensor *b, int arg, int reps)
{
    td_release(op(a, b, arg)); /* warm-up: kernels, allocator pool */
    if (td_fence(ctx) != TD_OK) return -1;
    double t0 = now_s();
    for (int i = 0; i < reps; i++) {
        td_tensor *r = op(a, b, arg);
        if (r == NULL) return -1;
        td_release(r);
    }
    if (td_fence(ctx) != TD_OK) return -1;
    return (now_s() - t0) / reps;
}

static td_tensor *op_matmul(td_tensor *a, td_tensor *b, int arg) { (void)arg; return td_matmul(a, b); }
static td_tensor *op_add(td_tensor *a, td_tensor *b, int arg) { (void)arg; return td_add(a, b); }
static td_tensor *op_mul(td_tensor *a, td_tensor *b, int arg) { (void)arg; return td_mul(a, b); }
static td_tensor *op_sum(td_tensor *a, td_tensor *b, int arg) { (void)b; (void)arg; return td_sum(a, 0, NULL, false); }
static td_tensor *op_softmax(td_tensor *a, td_tensor *b, int arg) { (void)b; return td_softmax(a, arg); }

int main(int argc, char **argv)
{
    const char *uri = "local:cuda:0";
    int reps = 20, quick = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--device") == 0 && i + 1 < argc) {
            uri = argv[++i];
        } else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
            reps = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--quick") == 0) {
            quick = 1;
        } else {
            fprintf(stderr, "usage: gpu-bench [--device URI] [--reps N] [--quick]\n"
                            "  matmul 4096^2/8192^2 f32, add/mul on 1 GiB, sum over 1 GiB,\n"
                            "  softmax over rows of [65536, 4096]; ms per op and rate\n");
            return strcmp(argv[i], "--help") == 0 ? 0 : 2;
        }
    }
    td_context *ctx;
    if (td_connect(uri, NULL, &ctx) != TD_OK) {
        fprintf(stderr, "gpu-bench: %s\n", td_connect_error());
        return 1;
    }
    int64_t n_big = quick ? (1 << 20) : (1 << 28); /* f32 elements: 1 GiB */
    int64_t mm[2] = {quick ? 256 : 4096, quick ? 512 : 8192};
    int64_t rows = quick ? 256 : 65536, cols = quick ? 256 : 4096;
    printf("device %s\n", td_device_name(ctx));
    for (int k = 0; k < 2; k++) {
        int64_t n = mm[k];
        td_tensor *a = td_rand_uniform(ctx, TD_F32, 2, (int64_t[]){n, n}, 1, -1, 1);
        td_tensor *b = td_rand_uniform(ctx, TD_F32, 2, (int64_t[]){n, n}, 2, -1, 1);
        double s = time_op(ctx, op_matmul, a, b, 0, reps);
        printf("matmul f32 %lld^3: %.3f ms  %.1f GFLOP/s\n", (long long)n, s * 1e3,
               2.0 * n * n * n / s / 1e9);
        td_release(a);
        td_release(b);
    }
    td_tensor *x = td_rand_uniform(ctx, TD_F32, 1, &n_big, 3, -1, 1);
    td_tensor *y = td_rand_uniform(ctx, TD_F32, 1, &n_big, 4, -1, 1);
    double gb = (double)n_big * 4 / 1e9;
    double s = time_op(ctx, op_add, x, y, 0, reps);
    printf("add f32 [%lld]: %.3f ms  %.1f GB/s (read 2, write 1)\n", (long long)n_big, s * 1e3, 3 * gb / s);
    s = time_op(ctx, op_mul, x, y, 0, reps);
    printf("mul f32 [%lld]: %.3f ms  %.1f GB/s (read 2, write 1)\n", (long long)n_big, s * 1e3, 3 * gb / s);
    s = time_op(ctx, op_sum, x, NULL, 0, reps);
    printf("sum f32 [%lld]: %.3f ms  %.1f GB/s (read 1)\n", (long long)n_big, s * 1e3, gb / s);
    td_release(x);
    td_release(y);
    td_tensor *z = td_rand_uniform(ctx, TD_F32, 2, (int64_t[]){rows, cols}, 5, -4, 4);
    s = time_op(ctx, op_softmax, z, NULL, 1, reps);
    printf("softmax f32 [%lld, %lld] rows: %.3f ms  %.1f GB/s (read 1, write 1)\n",
           (long long)rows, (long long)cols, s * 1e3, 2.0 * rows * cols * 4 / 1e9 / s);
    td_release(z);
    if (td_fence(ctx) != TD_OK) fprintf(stderr, "gpu-bench: %s\n", td_last_error(ctx));
    td_close(ctx);
    return 0;
}

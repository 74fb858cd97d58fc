/* conv-bench — td_conv on ResNet-50 layer shapes (batch 32, f32) on a tensord device, next to
 * PyTorch CPU in the same run (bench/conv_torch.py, started by bench/conv_bench.sh with
 * torch.set_num_threads(2)). Prints one line per shape: the median of `reps` timed runs
 * (after one warm-up) of record + fence, in milliseconds, and GFLOP/s (2 x MACs / time).
 * Usage: conv-bench [URI] [reps] [f32|bf16] [batch] [fwd|igrad]   (default local:cpu, 5, f32,
 * 32, fwd; bf16: input and weight cast once before timing; a smaller batch for slow devices
 * such as lavapipe; igrad: td_conv_input_grad of the same conv instead, from a random dy of
 * the output's shape, the same FLOPs). Never asserts on speed.
 * CONV_BENCH_BITS=1 in the environment: after each shape's timing, one more run whose output
 * is read back and printed as "bits <shape name> <64-bit FNV-1a of its bytes, 16 hex
 * digits>" (the name has spaces: the hash is the last field), so two kernel variants can
 * be compared bit for bit (the inputs come from fixed seeds). */
#include "tensord.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct shape {
    const char *name;
    int64_t c, h, w, co, k, stride, pad;
} shape;

static const shape shapes[] = {
    {"conv1 7x7/2 3->64 224", 3, 224, 224, 64, 7, 2, 3},
    {"layer1 3x3 64->64 56", 64, 56, 56, 64, 3, 1, 1},
    {"layer2 3x3 128->128 28", 128, 28, 28, 128, 3, 1, 1},
    {"layer3 1x1 1024->256 14", 1024, 14, 14, 256, 1, 1, 0},
    {"layer4 3x3 512->512 7", 512, 7, 7, 512, 3, 1, 1},
};

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

/* 64-bit FNV-1a (Fowler, Noll, Vo; offset basis 14695981039346656037, prime 1099511628211) */
static uint64_t fnv1a(const unsigned char *p, size_t n)
{
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

/* "bits NAME HASH" of y's bytes; 0, or 1 with a message on error */
static int print_bits(td_context *ctx, td_tensor *y, const char *name)
{
    size_t nbytes = td_nbytes(y);
    unsigned char *buf = malloc(nbytes ? nbytes : 1);
    if (buf == NULL || td_read(y, buf, nbytes) != TD_OK) {
        fprintf(stderr, "conv-bench: reading %s: %s\n", name,
                buf == NULL ? "out of memory" : td_last_error(ctx));
        free(buf);
        return 1;
    }
    printf("bits %s %016llx\n", name, (unsigned long long)fnv1a(buf, nbytes));
    free(buf);
    return 0;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    const char *uri = argc > 1 ? argv[1] : "local:cpu";
    int reps = argc > 2 ? atoi(argv[2]) : 5;
    if (reps < 1 || reps > 100) reps = 5;
    const char *dts = argc > 3 ? argv[3] : "f32";
    if (strcmp(dts, "f32") != 0 && strcmp(dts, "bf16") != 0) {
        fprintf(stderr, "usage: conv-bench [URI] [reps] [f32|bf16] [batch] [fwd|igrad]\n");
        return 2;
    }
    const bool bf16 = strcmp(dts, "bf16") == 0;
    td_context *ctx;
    if (td_connect(uri, NULL, &ctx) != TD_OK) {
        fprintf(stderr, "conv-bench: %s\n", td_connect_error());
        return 2;
    }
    const int64_t n = argc > 4 ? atoll(argv[4]) : 32;
    if (n < 1 || n > 1024) {
        fprintf(stderr, "conv-bench: batch %s: want 1..1024\n", argv[4]);
        return 2;
    }
    const bool igrad = argc > 5 && strcmp(argv[5], "igrad") == 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const shape *p = &shapes[s];
        const int64_t oh = (p->h + 2 * p->pad - p->k) / p->stride + 1;
        const int64_t ow = (p->w + 2 * p->pad - p->k) / p->stride + 1;
        td_tensor *x =
            igrad ? td_rand_normal(ctx, TD_F32, 4, (int64_t[]){n, p->co, oh, ow}, 1, 0, 1)
                  : td_rand_normal(ctx, TD_F32, 4, (int64_t[]){n, p->c, p->h, p->w}, 1, 0, 1);
        td_tensor *w =
            td_rand_normal(ctx, TD_F32, 4, (int64_t[]){p->co, p->c, p->k, p->k}, 2, 0, 0.1);
        if (bf16) {
            td_tensor *xb = td_cast(x, TD_BF16), *wb = td_cast(w, TD_BF16);
            td_release(x);
            td_release(w);
            x = xb;
            w = wb;
        }
        td_conv_params cp = {.stride = {p->stride, p->stride},
                             .pad_lo = {p->pad, p->pad},
                             .pad_hi = {p->pad, p->pad}};
        double t[100];
        for (int r = -1; r < reps; r++) {
            double t0 = now_ms();
            td_tensor *y = igrad ? td_conv_input_grad(x, w, (int64_t[]){p->h, p->w}, &cp)
                                 : td_conv(x, w, NULL, &cp);
            if (y == NULL || td_fence(ctx) != TD_OK) {
                fprintf(stderr, "conv-bench: %s\n", td_last_error(ctx));
                return 1;
            }
            if (r >= 0) t[r] = now_ms() - t0;
            td_release(y);
        }
        qsort(t, (size_t)reps, sizeof t[0], cmp);
        const double ms = t[reps / 2];
        const double flop =
            2.0 * (double)n * (double)p->co * (double)(oh * ow) * (double)(p->c * p->k * p->k);
        printf("tensord %s%-26s %9.3f ms %7.1f GFLOP/s\n", igrad ? "igrad " : "", p->name, ms,
               flop / ms * 1e-6);
        const char *bits = getenv("CONV_BENCH_BITS");
        if (bits != NULL && strcmp(bits, "1") == 0) {
            td_tensor *y = igrad ? td_conv_input_grad(x, w, (int64_t[]){p->h, p->w}, &cp)
                                 : td_conv(x, w, NULL, &cp);
            if (y == NULL) {
                fprintf(stderr, "conv-bench: %s\n", td_last_error(ctx));
                return 1;
            }
            if (print_bits(ctx, y, p->name) != 0) return 1;
            td_release(y);
        }
        td_release(x);
        td_release(w);
    }
    td_close(ctx);
    return 0;
}

/* gpu_bench.c — device-side speed of tensord ops on one device URI, next to PyTorch
 * (bench/gpu_torch.py: same sizes, same names, same timing rule) on the same machine in the
 * same run; tests/gpu/bench-on-gpu-host.sh runs both and prints the ratios (BENCHMARKS.md,
 * "GPU").
 *
 * Timing rule, the same on both sides: inputs are generated on the device; then, per
 * measure, one untimed pass of exactly the timed loop (reps ops, each result released at
 * once, then a fence), then `rounds` timed passes of that loop; the time per op is the
 * median pass divided by reps. Why the untimed pass is the whole loop and not one op:
 * tensord's client sends releases with the next batch, so a loop of reps ops holds up to
 * reps results at once (one batch: the ops, then their releases), and a device pool sized
 * by a single warm-up op grows to reps outputs inside the first timed loop — 19 fresh GiB
 * for add on 1 GiB: the likely reason (read from the code, to be confirmed by the next run)
 * why add, timed first, measured 0.74x PyTorch while mul, the same kernel timed next on the
 * grown pool, measured 1.02x. PyTorch's caching
 * allocator reuses one output block and needs no such growth. After the untimed pass both
 * sides take every output from memory their pools already hold, so the timed loops
 * measure kernels plus dispatch. Times include dispatching each op from this client
 * (local or remote), which is the point of the comparison.
 *
 * Usage: gpu-bench [--device URI] [--reps N] [--rounds N] [--quick] [--profile]
 *                  [--only NAME,...] [--elems N] [--shm-host-bytes N] [--offer-off]
 * --only runs the rows whose names start with a listed prefix that ends at a '_' of the
 * name or at its end (add, add_f32, sum, cumsum, sort, softmax, matmul; "transfers" for the
 * transfer rows); --elems sets the f32 element
 * count of the add/mul/sum/cumsum rows (default 2^28, 2^20 with --quick; the bf16 rows
 * take twice as many), e.g. to fit a device's maxStorageBufferRange.
 * Output: one line per measure, "NAME  MS ms  RATE UNIT", NAME a token shared with
 * gpu_torch.py (matmul_f32_4096, matmul_tf32_4096, add_f32_268435456, ...); other lines
 * start with '#'. TF32 rows use td_matmul_ex(a, b, TD_MATMUL_ALLOW_TF32); a '# tf32 check'
 * line shows that TF32 was in effect (relative difference from the f32 product).
 * Transfers (after the op rows, or alone with --transfers-only): td_write + td_fence and
 * td_read of a u8 tensor of 64 MiB and 1 GiB from/to malloc'd (pageable) memory and from/to
 * a td_host_alloc buffer (on a unix socket the context's shared-memory region must hold it:
 * --shm-host-bytes 1100000000 and a server with --shm-max-bytes 2147483648), the bytes
 * changed before each upload so that no upload is a repeat; --raw adds raw pinned and
 * pageable cudaMemcpy, the memcpy into pinned memory and a raw loopback TCP stream, the
 * bounds of the local and the remote path, in the same process and run.
 * --profile: no timing; one add, one sum and one softmax of the bench sizes after a
 * warm-up, between cudaProfilerStart and cudaProfilerStop of the CUDA runtime the backend
 * module loaded (for `ncu --profile-from-start off`; in-process devices only). */
#include "tensord.h"
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef td_tensor *(*op_fn)(td_tensor *a, td_tensor *b, int arg);

/* reps ops, each result released at once, then a fence. */
static bool run_loop(td_context *ctx, op_fn op, td_tensor *a, td_tensor *b, int arg, int reps)
{
    for (int i = 0; i < reps; i++) {
        td_tensor *r = op(a, b, arg);
        if (r == NULL) return false;
        td_release(r);
    }
    return td_fence(ctx) == TD_OK;
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

#define MAX_ROUNDS 16

/* Seconds per op: median of `rounds` timed loops after one untimed loop; -1 on error. */
static double time_op(td_context *ctx, op_fn op, td_tensor *a, td_tensor *b, int arg, int reps,
                      int rounds)
{
    if (!run_loop(ctx, op, a, b, arg, reps)) return -1; /* kernels, cuBLAS, pool growth */
    double t[MAX_ROUNDS];
    for (int r = 0; r < rounds; r++) {
        double t0 = now_s();
        if (!run_loop(ctx, op, a, b, arg, reps)) return -1;
        t[r] = (now_s() - t0) / reps;
    }
    qsort(t, (size_t)rounds, sizeof t[0], cmp_double);
    return t[rounds / 2];
}

/* --only: comma-separated prefixes of row names, each ending where the name has a '_' or
 * ends ("add" takes add_f32_N and add_bf16_N, "add_f32" only the first); NULL: every row. */
static const char *g_only;

static bool want(const char *row)
{
    if (g_only == NULL) return true;
    for (const char *p = g_only; *p != '\0';) {
        const size_t len = strcspn(p, ",");
        if (len > 0 && strncmp(p, row, len) == 0 && (row[len] == '_' || row[len] == '\0'))
            return true;
        p += len;
        if (*p == ',') p++;
    }
    return false;
}

/* One result line; `amount` is what one op does (FLOPs or bytes), shown per second in
 * units of `scale` (1e12: TFLOP/s, 1e9: GB/s). */
static void report(td_context *ctx, const char *name, double s, double amount, double scale,
                   const char *unit)
{
    if (s < 0) {
        printf("# %s failed: %s\n", name, td_last_error(ctx));
    } else {
        printf("%-26s %10.3f ms %10.1f %s\n", name, s * 1e3, amount / s / scale, unit);
    }
    fflush(stdout);
}

static td_tensor *op_matmul(td_tensor *a, td_tensor *b, int arg)
{
    (void)arg;
    return td_matmul_ex(a, b, 0);
}
static td_tensor *op_matmul_tf32(td_tensor *a, td_tensor *b, int arg)
{
    (void)arg;
    return td_matmul_ex(a, b, TD_MATMUL_ALLOW_TF32);
}
static td_tensor *op_add(td_tensor *a, td_tensor *b, int arg)
{
    (void)arg;
    return td_add(a, b);
}
static td_tensor *op_mul(td_tensor *a, td_tensor *b, int arg)
{
    (void)arg;
    return td_mul(a, b);
}
static td_tensor *op_sum(td_tensor *a, td_tensor *b, int arg)
{
    (void)b;
    (void)arg;
    return td_sum(a, 0, NULL, false);
}
static td_tensor *op_softmax(td_tensor *a, td_tensor *b, int arg)
{
    (void)b;
    return td_softmax(a, arg);
}

static td_tensor *op_cumsum(td_tensor *a, td_tensor *b, int arg)
{
    (void)b;
    (void)arg;
    return td_cumsum(a, 0);
}
static td_tensor *op_sort(td_tensor *a, td_tensor *b, int arg)
{
    (void)b;
    (void)arg;
    return td_sort(a, 0, false);
}

/* max |x| over all elements, read back (consumes x); -1 on error. */
static double max_abs(td_tensor *x)
{
    td_tensor *ax = td_abs(x);
    td_tensor *m = td_max(ax, 0, NULL, false);
    double v = -1;
    if (m == NULL || td_read_scalar(m, &v) != TD_OK) v = -1;
    td_release(x);
    td_release(ax);
    td_release(m);
    return v;
}

/* cudaProfilerStart (start) or cudaProfilerStop of the CUDA runtime already loaded in this
 * process (by the backend module); false when there is none. */
static bool cuda_profiler(bool start)
{
    static const char *const libs[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so"};
    for (size_t i = 0; i < sizeof libs / sizeof libs[0]; i++) {
        void *h = dlopen(libs[i], RTLD_NOW | RTLD_NOLOAD);
        if (h == NULL) continue;
        void *p = dlsym(h, start ? "cudaProfilerStart" : "cudaProfilerStop");
        int (*fn)(void) = NULL;
        memcpy(&fn, &p, sizeof p);
        int rc = fn != NULL ? fn() : -1;
        dlclose(h);
        return rc == 0;
    }
    return false;
}

/* --profile: one add, sum and softmax (f32), then one bf16 add and sum of twice the
 * elements (the same 1 GiB), between cudaProfilerStart and Stop. */
static int profile(td_context *ctx, int64_t n_big, int64_t rows, int64_t cols)
{
    td_tensor *x = td_rand_uniform(ctx, TD_F32, 1, &n_big, 3, -1, 1);
    td_tensor *y = td_rand_uniform(ctx, TD_F32, 1, &n_big, 4, -1, 1);
    td_tensor *z = td_rand_uniform(ctx, TD_F32, 2, (int64_t[]){rows, cols}, 5, -4, 4);
    const int64_t n16 = 2 * n_big;
    td_tensor *xb = td_rand_uniform(ctx, TD_BF16, 1, &n16, 6, -1, 1);
    td_tensor *yb = td_rand_uniform(ctx, TD_BF16, 1, &n16, 7, -1, 1);
    for (int pass = 0; pass < 2; pass++) { /* warm-up, then the profiled pass */
        if (pass == 1 && !cuda_profiler(true))
            fprintf(stderr, "gpu-bench: no CUDA runtime in this process (not a local cuda "
                            "device?): cudaProfilerStart not called\n");
        td_release(op_add(x, y, 0));
        td_release(op_sum(x, NULL, 0));
        td_release(op_softmax(z, NULL, 1));
        td_release(op_add(xb, yb, 0));
        td_release(op_sum(xb, NULL, 0));
        if (td_fence(ctx) != TD_OK) {
            fprintf(stderr, "gpu-bench: %s\n", td_last_error(ctx));
            return 1;
        }
    }
    cuda_profiler(false);
    printf("# profiled: add f32 [%lld], sum f32 [%lld], softmax f32 [%lld, %lld] rows, "
           "add bf16 [%lld], sum bf16 [%lld]\n",
           (long long)n_big, (long long)n_big, (long long)rows, (long long)cols,
           (long long)n16, (long long)n16);
    td_release(xb);
    td_release(yb);
    td_release(x);
    td_release(y);
    td_release(z);
    return 0;
}

/* ---- transfers: td_write/td_read next to raw pinned/pageable cudaMemcpy, the host copy
 * into pinned memory, and a raw loopback TCP stream (same process, same run) ---- */

static int cmp_d(const void *x, const void *y) { return cmp_double(x, y); }

/* Make the bytes fresh for the next upload (the client's fingerprint candidates would treat
 * an unchanged buffer as a repeat): a counter in every 4 KiB page, untimed. The counter
 * runs over the whole process, so no upload repeats another row's either (the host-buffer
 * rows once repeated the pageable rows' bytes and measured the blob store's repeat path). */
static void stamp(unsigned char *buf, size_t n)
{
    static uint64_t counter = 1;
    const uint64_t r = counter++;
    for (size_t off = 0; off + 8 <= n; off += 4096) memcpy(buf + off, &r, 8);
}

static void report_rate(const char *name, double s, double bytes)
{
    if (s < 0) printf("# %s failed\n", name);
    else printf("%-26s %10.3f ms %10.1f GB/s\n", name, s * 1e3, bytes / s / 1e9);
    fflush(stdout);
}

/* td_write (then a fence, so the copy has reached the device) and td_read of n bytes, the
 * median of `rounds`, after one untimed write and read; every read checked against what was
 * written. From and into malloc'd (pageable) memory, or with `hostbuf`, one td_host_alloc
 * buffer of the context (local CUDA: pinned pages; same-host remote: the session's
 * shared-memory region; elsewhere plain memory), rows named td_write_hb_N / td_read_hb_N. */
static void transfer_rows(td_context *ctx, size_t n, int rounds, bool hostbuf)
{
    unsigned char *host = hostbuf ? td_host_alloc(ctx, n) : malloc(n);
    unsigned char *back = hostbuf ? host : malloc(n), *ref = hostbuf ? malloc(n) : NULL;
    char name[64];
    const char *tag = hostbuf ? "_hb" : "";
    if (host == NULL || back == NULL || (hostbuf && ref == NULL)) {
        printf("# transfers%s of %zu bytes: no host memory (%s)\n", tag, n,
               hostbuf && host == NULL ? td_last_error(ctx) : "malloc");
        if (hostbuf) td_host_free(ctx, host);
        else free(host);
        if (!hostbuf) free(back);
        free(ref);
        return;
    }
    memset(host, 1, n);
    stamp(host, n);
    int64_t dim = (int64_t)n;
    td_tensor *t = td_full(ctx, TD_U8, 1, &dim, 0);
    double tw[MAX_ROUNDS], tr[MAX_ROUNDS];
    bool ok = t != NULL && td_write(t, host, n) == TD_OK && td_fence(ctx) == TD_OK &&
              td_read(t, back, n) == TD_OK;
    for (int r = 0; r < rounds && ok; r++) {
        stamp(host, n);
        if (hostbuf) memcpy(ref, host, n); /* untimed: the read overwrites host */
        double t0 = now_s();
        ok = td_write(t, host, n) == TD_OK && td_fence(ctx) == TD_OK;
        tw[r] = now_s() - t0;
        if (hostbuf) memset(back, 0, n);
        t0 = now_s();
        ok = ok && td_read(t, back, n) == TD_OK;
        tr[r] = now_s() - t0;
        ok = ok && memcmp(hostbuf ? ref : host, back, n) == 0;
    }
    if (!ok) {
        printf("# transfers%s of %zu bytes failed: %s\n", tag, n, td_last_error(ctx));
    } else {
        qsort(tw, (size_t)rounds, sizeof tw[0], cmp_d);
        qsort(tr, (size_t)rounds, sizeof tr[0], cmp_d);
        snprintf(name, sizeof name, "td_write%s_%zu", tag, n);
        report_rate(name, tw[rounds / 2], (double)n);
        snprintf(name, sizeof name, "td_read%s_%zu", tag, n);
        report_rate(name, tr[rounds / 2], (double)n);
    }
    td_release(t);
    if (hostbuf) {
        td_host_free(ctx, host);
        free(ref);
    } else {
        free(host);
        free(back);
    }
}

typedef int (*cu_fn_pp)(void **, size_t);
typedef int (*cu_fn_p)(void *);
typedef int (*cu_fn_cpy)(void *, const void *, size_t, int);

/* Raw CUDA copies of n bytes through the runtime the backend module loaded: pinned and
 * pageable, both ways, and the host memcpy from pageable into pinned memory (the staging
 * step of td_write). Median of `rounds` after one untimed copy. */
static void raw_cuda_rows(size_t n, int rounds)
{
    static const char *const libs[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so"};
    void *h = NULL;
    for (size_t i = 0; i < sizeof libs / sizeof libs[0] && h == NULL; i++)
        h = dlopen(libs[i], RTLD_NOW);
    if (h == NULL) {
        printf("# raw cuda rows: no libcudart\n");
        return;
    }
    cu_fn_pp malloc_host, malloc_dev;
    cu_fn_p free_host, free_dev;
    cu_fn_cpy cpy;
    void *p;
    p = dlsym(h, "cudaMallocHost"); memcpy(&malloc_host, &p, sizeof p);
    p = dlsym(h, "cudaMalloc"); memcpy(&malloc_dev, &p, sizeof p);
    p = dlsym(h, "cudaFreeHost"); memcpy(&free_host, &p, sizeof p);
    p = dlsym(h, "cudaFree"); memcpy(&free_dev, &p, sizeof p);
    p = dlsym(h, "cudaMemcpy"); memcpy(&cpy, &p, sizeof p);
    void *pin = NULL, *dev = NULL;
    unsigned char *page = malloc(n);
    if (malloc_host == NULL || malloc_dev == NULL || free_host == NULL || free_dev == NULL ||
        cpy == NULL || page == NULL || malloc_host(&pin, n) != 0 || malloc_dev(&dev, n) != 0) {
        printf("# raw cuda rows: cannot allocate %zu bytes\n", n);
        free(page);
        return;
    }
    memset(page, 1, n);
    memset(pin, 1, n);
    /* cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2 */
    struct { const char *what; void *dst; const void *src; int kind; } c[5] = {
        {"raw_pinned_h2d", dev, pin, 1},
        {"raw_pinned_d2h", pin, dev, 2},
        {"raw_pageable_h2d", dev, page, 1},
        {"raw_pageable_d2h", page, dev, 2},
        {"raw_memcpy_to_pinned", pin, page, 0},
    };
    for (int k = 0; k < 5; k++) {
        double t[MAX_ROUNDS];
        int rc = 0;
        for (int r = -1; r < rounds && rc == 0; r++) {
            double t0 = now_s();
            if (c[k].kind == 0) memcpy(c[k].dst, c[k].src, n);
            else rc = cpy(c[k].dst, c[k].src, n, c[k].kind);
            if (r >= 0) t[r] = now_s() - t0;
        }
        char name[64];
        snprintf(name, sizeof name, "%s_%zu", c[k].what, n);
        if (rc != 0) {
            printf("# %s: cudaMemcpy error %d\n", name, rc);
            continue;
        }
        qsort(t, (size_t)rounds, sizeof t[0], cmp_d);
        report_rate(name, t[rounds / 2], (double)n);
    }
    free_dev(dev);
    free_host(pin);
    free(page);
}

struct tcp_sink {
    int lfd;
    size_t n;
    int rounds;
};

/* Accept one connection; per round, receive n bytes and answer one byte. */
static void *tcp_sink_main(void *arg)
{
    struct tcp_sink *k = arg;
    int fd = accept(k->lfd, NULL, NULL);
    if (fd < 0) return NULL;
    char *buf = malloc(1 << 20);
    for (int r = 0; buf != NULL && r < k->rounds; r++) {
        size_t got = 0;
        while (got < k->n) {
            ssize_t m = recv(fd, buf, 1 << 20, 0);
            if (m <= 0) goto done;
            got += (size_t)m;
        }
        if (send(fd, "k", 1, 0) != 1) break;
    }
done:
    free(buf);
    close(fd);
    return NULL;
}

/* A raw TCP stream of n bytes over 127.0.0.1 (1 MiB sends, one byte back at the end), the
 * bound of a remote upload; median of `rounds` after one untimed stream. */
static void raw_tcp_row(size_t n, int rounds)
{
    struct tcp_sink k = {socket(AF_INET, SOCK_STREAM, 0), n, rounds + 1};
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof a;
    if (k.lfd < 0 || bind(k.lfd, (struct sockaddr *)&a, sizeof a) != 0 || listen(k.lfd, 1) != 0 ||
        getsockname(k.lfd, (struct sockaddr *)&a, &al) != 0) {
        printf("# raw tcp: cannot listen\n");
        if (k.lfd >= 0) close(k.lfd);
        return;
    }
    pthread_t th;
    if (pthread_create(&th, NULL, tcp_sink_main, &k) != 0) {
        close(k.lfd);
        return;
    }
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    char *buf = calloc(1, 1 << 20);
    double t[MAX_ROUNDS];
    bool ok = fd >= 0 && buf != NULL && connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
    for (int r = -1; r < rounds && ok; r++) {
        double t0 = now_s();
        for (size_t off = 0; off < n && ok;) {
            size_t len = n - off < (1u << 20) ? n - off : (1u << 20);
            ssize_t m = send(fd, buf, len, 0);
            ok = m > 0;
            if (ok) off += (size_t)m;
        }
        char c;
        ok = ok && recv(fd, &c, 1, MSG_WAITALL) == 1;
        if (r >= 0) t[r] = now_s() - t0;
    }
    if (fd >= 0) close(fd);
    pthread_join(th, NULL);
    close(k.lfd);
    free(buf);
    char name[64];
    snprintf(name, sizeof name, "raw_tcp_loopback_%zu", n);
    if (!ok) {
        printf("# %s failed\n", name);
        return;
    }
    qsort(t, (size_t)rounds, sizeof t[0], cmp_d);
    report_rate(name, t[rounds / 2], (double)n);
}

/* --transfers (and the full run): 64 MiB and 1 GiB (quick: 1 and 8 MiB); --raw adds the
 * raw rows. */
static void transfers(td_context *ctx, bool quick, bool raw, int rounds)
{
    const size_t sizes[2] = {quick ? (size_t)1 << 20 : (size_t)64 << 20,
                             quick ? (size_t)8 << 20 : (size_t)1 << 30};
    printf("# transfers: td_write + td_fence, td_read of a u8 tensor from/to pageable memory "
           "(td_*_N) and a td_host_alloc buffer (td_*_hb_N)\n");
    for (int i = 0; i < 2; i++) {
        transfer_rows(ctx, sizes[i], rounds, false);
        transfer_rows(ctx, sizes[i], rounds, true);
        if (raw) {
            raw_cuda_rows(sizes[i], rounds);
            raw_tcp_row(sizes[i], rounds);
        }
    }
}

int main(int argc, char **argv)
{
    const char *uri = "local:cuda:0";
    int reps = 20, rounds = 3;
    bool quick = false, prof = false, mm_only = false, xfer_only = false, raw = false;
    bool offer_off = false;
    long long elems = 0, shm_host_bytes = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--device") == 0 && i + 1 < argc) {
            uri = argv[++i];
        } else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
            reps = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) {
            rounds = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--offer-off") == 0) {
            offer_off = true;
        } else if (strcmp(argv[i], "--shm-host-bytes") == 0 && i + 1 < argc) {
            shm_host_bytes = atoll(argv[++i]);
        } else if (strcmp(argv[i], "--quick") == 0) {
            quick = true;
        } else if (strcmp(argv[i], "--profile") == 0) {
            prof = true;
        } else if (strcmp(argv[i], "--matmul-only") == 0) {
            mm_only = true;
        } else if (strcmp(argv[i], "--cumsum-only") == 0) {
            g_only = "cumsum_f32"; /* as --only cumsum_f32 */
        } else if (strcmp(argv[i], "--transfers-only") == 0) {
            xfer_only = true;
        } else if (strcmp(argv[i], "--raw") == 0) {
            raw = true;
        } else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
            g_only = argv[++i];
        } else if (strcmp(argv[i], "--elems") == 0 && i + 1 < argc) {
            elems = atoll(argv[++i]);
        } else {
            bool help = strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0;
            fprintf(help ? stdout : stderr,
                    "usage: gpu-bench [--device URI] [--reps N] [--rounds N] [--quick] "
                    "[--profile] [--matmul-only] [--cumsum-only] [--transfers-only] [--raw]\n"
                    "                 [--only NAME,...] [--elems N] [--shm-host-bytes N] [--offer-off]\n"
                    "GPU speed of tensord: matmul 4096^2/8192^2 f32, TF32, f16 and bf16, add/mul\n"
                    "on 1 GiB, bf16 add/sum on 1 GiB,\n"
                    "sum and cumsum over 1 GiB, sort of 2^24 f32, softmax over rows of\n"
                    "[65536, 4096]; prints ms per op and\n"
                    "the rate. Compare with bench/gpu_torch.py (tests/gpu/bench-on-gpu-host.sh\n"
                    "runs both and prints the ratios).\n"
                    "  --device URI    where to run (default local:cuda:0; e.g.\n"
                    "                  tensord://HOST:PORT/cuda:0)\n"
                    "  --reps N        ops per timed loop (default 20)\n"
                    "  --rounds N      timed loops, median reported (default 3, at most %d)\n"
                    "  --quick         small sizes (a smoke test, e.g. on local:cpu)\n"
                    "  --profile       run one add, one sum and one softmax between\n"
                    "                  cudaProfilerStart/Stop, for ncu --profile-from-start off\n"
                    "  --matmul-only   only the matmul rows\n"
                    "  --cumsum-only   only the cumsum row (tests/gpu/memops-on-gpu-host.sh)\n"
                    "  --transfers-only only td_write/td_read of 64 MiB and 1 GiB (also run\n"
                    "                  after the op rows)\n"
                    "  --raw           with the transfers: raw pinned and pageable cudaMemcpy,\n"
                    "                  memcpy into pinned memory, a loopback TCP stream\n"
                    "  --only NAMES    only the rows whose names start with one of these\n"
                    "                  comma-separated prefixes, cut at a '_' (add, add_f32,\n"
                    "                  sum, cumsum, sort, softmax, matmul, transfers)\n"
                    "  --elems N       f32 elements of the add/mul/sum/cumsum rows (default\n"
                    "                  2^28; 2^20 with --quick)\n"
                    "  --shm-host-bytes N  td_options.shm_host_bytes (unix sockets: room for\n"
                    "                  the transfer rows' td_host_alloc buffer; default 0)\n"
                    "  --offer-off     td_options.blob_min_bytes = SIZE_MAX: uploads skip the\n"
                    "                  blob offer (fingerprint and candidate)\n",
                    MAX_ROUNDS);
            if (!help) fprintf(stderr, "gpu-bench: unknown option '%s'\n", argv[i]);
            return help ? 0 : 2;
        }
    }
    if (shm_host_bytes < 0) {
        fprintf(stderr, "gpu-bench: --shm-host-bytes must be >= 0\n");
        return 2;
    }
    if (elems < 0 || elems > ((long long)1 << 40)) {
        fprintf(stderr, "gpu-bench: --elems must be 1..2^40\n");
        return 2;
    }
    if (reps < 1 || rounds < 1 || rounds > MAX_ROUNDS) {
        fprintf(stderr, "gpu-bench: --reps must be >= 1 and --rounds 1..%d\n", MAX_ROUNDS);
        return 2;
    }
    td_context *ctx;
    td_options opts;
    memset(&opts, 0, sizeof opts);
    opts.shm_host_bytes = (size_t)shm_host_bytes;
    if (offer_off) opts.blob_min_bytes = SIZE_MAX;
    if (td_connect(uri, &opts, &ctx) != TD_OK) {
        fprintf(stderr, "gpu-bench: %s\n", td_connect_error());
        return 1;
    }
    int64_t n_big = elems > 0 ? elems : quick ? (1 << 20) : (1 << 28); /* f32: 1 GiB */
    int64_t mm[2] = {quick ? 256 : 4096, quick ? 512 : 8192};
    int64_t rows = quick ? 256 : 65536, cols = quick ? 256 : 4096;
    printf("# device %s (%s)\n", td_device_name(ctx), uri);
    if (prof) {
        int rc = profile(ctx, n_big, rows, cols);
        td_close(ctx);
        return rc;
    }
    if (xfer_only) {
        transfers(ctx, quick, raw, rounds);
        td_close(ctx);
        return 0;
    }
    printf("# %d ops per loop, median of %d loops after one untimed loop\n", reps, rounds);
    char name[64];
    for (int k = 0; k < 2 && want("matmul"); k++) {
        int64_t n = mm[k];
        td_tensor *a = td_rand_uniform(ctx, TD_F32, 2, (int64_t[]){n, n}, 1, -1, 1);
        td_tensor *b = td_rand_uniform(ctx, TD_F32, 2, (int64_t[]){n, n}, 2, -1, 1);
        double flop = 2.0 * (double)n * (double)n * (double)n;
        snprintf(name, sizeof name, "matmul_f32_%lld", (long long)n);
        if (want(name))
            report(ctx, name, time_op(ctx, op_matmul, a, b, 0, reps, rounds), flop, 1e12,
                   "TFLOP/s");
        snprintf(name, sizeof name, "matmul_tf32_%lld", (long long)n);
        if (want(name))
            report(ctx, name, time_op(ctx, op_matmul_tf32, a, b, 0, reps, rounds), flop, 1e12,
                   "TFLOP/s");
        td_tensor *c32 = td_matmul_ex(a, b, 0), *ctf = td_matmul_ex(a, b, TD_MATMUL_ALLOW_TF32);
        double d = max_abs(td_sub(c32, ctf)), m = max_abs(c32);
        td_release(ctf);
        if (d >= 0 && m > 0)
            printf("# tf32 check %lld: max|C_tf32 - C_f32| / max|C_f32| = %.3g%s\n",
                   (long long)n, d / m, d == 0 ? " (identical: TF32 NOT in effect)" : "");
        /* 16-bit floats: the same values rounded once (td_cast), f32 accumulation */
        const td_dtype half[2] = {TD_F16, TD_BF16};
        const char *half_name[2] = {"f16", "bf16"};
        for (int h = 0; h < 2; h++) {
            td_tensor *ah = td_cast(a, half[h]), *bh = td_cast(b, half[h]);
            snprintf(name, sizeof name, "matmul_%s_%lld", half_name[h], (long long)n);
            if (want(name))
                report(ctx, name, time_op(ctx, op_matmul, ah, bh, 0, reps, rounds), flop, 1e12,
                       "TFLOP/s");
            td_release(ah);
            td_release(bh);
        }
        td_release(a);
        td_release(b);
    }
    if (mm_only) {
        td_close(ctx);
        return 0;
    }
    td_tensor *x = td_rand_uniform(ctx, TD_F32, 1, &n_big, 3, -1, 1);
    td_tensor *y = td_rand_uniform(ctx, TD_F32, 1, &n_big, 4, -1, 1);
    double bytes = (double)n_big * 4;
    snprintf(name, sizeof name, "add_f32_%lld", (long long)n_big);
    if (want(name))
        report(ctx, name, time_op(ctx, op_add, x, y, 0, reps, rounds), 3 * bytes, 1e9,
               "GB/s (read 2, write 1)");
    snprintf(name, sizeof name, "mul_f32_%lld", (long long)n_big);
    if (want(name))
        report(ctx, name, time_op(ctx, op_mul, x, y, 0, reps, rounds), 3 * bytes, 1e9,
               "GB/s (read 2, write 1)");
    snprintf(name, sizeof name, "sum_f32_%lld", (long long)n_big);
    if (want(name))
        report(ctx, name, time_op(ctx, op_sum, x, NULL, 0, reps, rounds), bytes, 1e9,
               "GB/s (read 1)");
    snprintf(name, sizeof name, "cumsum_f32_%lld", (long long)n_big);
    if (want(name))
        report(ctx, name, time_op(ctx, op_cumsum, x, NULL, 0, reps, rounds), 2 * bytes, 1e9,
               "GB/s (read 1, write 1)");
    td_release(x);
    td_release(y);
    if (want("sort")) {
        /* stable sort of 2^24 floats, one line */
        int64_t ns = quick ? (1 << 16) : (1 << 24);
        td_tensor *xs = td_rand_uniform(ctx, TD_F32, 1, &ns, 8, -1, 1);
        snprintf(name, sizeof name, "sort_f32_%lld", (long long)ns);
        if (want(name))
            report(ctx, name, time_op(ctx, op_sort, xs, NULL, 0, reps, rounds), (double)ns, 1e6,
                   "Melem/s");
        td_release(xs);
    }
    if (want("add") || want("sum")) {
        /* bf16 on 1 GiB: twice the elements of the f32 rows */
        int64_t n16 = 2 * n_big;
        td_tensor *x32 = td_rand_uniform(ctx, TD_F32, 1, &n16, 6, -1, 1);
        td_tensor *xb = td_cast(x32, TD_BF16);
        td_release(x32);
        td_tensor *y32 = td_rand_uniform(ctx, TD_F32, 1, &n16, 7, -1, 1);
        td_tensor *yb = td_cast(y32, TD_BF16);
        td_release(y32);
        double b16 = (double)n16 * 2;
        snprintf(name, sizeof name, "add_bf16_%lld", (long long)n16);
        if (want(name))
            report(ctx, name, time_op(ctx, op_add, xb, yb, 0, reps, rounds), 3 * b16, 1e9,
                   "GB/s (read 2, write 1)");
        snprintf(name, sizeof name, "sum_bf16_%lld", (long long)n16);
        if (want(name))
            report(ctx, name, time_op(ctx, op_sum, xb, NULL, 0, reps, rounds), b16, 1e9,
                   "GB/s (read 1)");
        td_release(xb);
        td_release(yb);
    }
    snprintf(name, sizeof name, "softmax_f32_%lldx%lld", (long long)rows, (long long)cols);
    if (want(name)) {
        td_tensor *z = td_rand_uniform(ctx, TD_F32, 2, (int64_t[]){rows, cols}, 5, -4, 4);
        report(ctx, name, time_op(ctx, op_softmax, z, NULL, 1, reps, rounds),
               2.0 * (double)rows * (double)cols * 4, 1e9, "GB/s (read 1, write 1)");
        td_release(z);
    }
    if (want("transfers")) transfers(ctx, quick, raw, rounds);
    int rc = 0;
    if (td_fence(ctx) != TD_OK) {
        fprintf(stderr, "gpu-bench: %s\n", td_last_error(ctx));
        rc = 1;
    }
    td_close(ctx);
    return rc;
}

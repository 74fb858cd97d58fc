/* device_bench.c — issue 19 next to the obvious alternatives, against a running tensord
 * started with --cpu-devices 2 (bench/device_bench.sh starts one):
 *   move   td_to_device of an f32 tensor from cpu:0 to cpu:1 inside one session (the copy
 *          stays in the server), next to the way before sessions could span devices: td_read
 *          it to the client and td_from_host it into a second session on cpu:1 (blob offer
 *          off there: the alternative at its fastest);
 *   pool   td_connect + td_close to the server directly, next to a two-member pool whose
 *          first member is dead (what skipping a dead server costs).
 * Prints one line per measure: name, median ms over --reps, and MB/s for moves. Never
 * asserts on speed; the moved bytes are read back once and compared with the source (exit 1
 * on a difference). --from/--to name the two devices (default cpu:0 and cpu:1; on a GPU
 * host e.g. --from cpu --to cuda:0, or cuda:0 and cuda:1 for the peer copy).
 * Usage: device-bench ADDR [--mib N] [--reps N] [--from DEV] [--to DEV] */
#include "tensord.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp);
    return v[n / 2];
}

static void die(const char *what, td_context *ctx)
{
    fprintf(stderr, "device-bench: %s: %s\n", what, ctx ? td_last_error(ctx) : td_connect_error());
    exit(1);
}

/* A TCP port on 127.0.0.1 that nothing listens on. */
static int dead_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0)
        exit(1);
    int port = ntohs(a.sin_port);
    close(fd);
    return port;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: device-bench ADDR [--mib N] [--reps N] [--from DEV] [--to DEV]\n");
        return 2;
    }
    const char *addr = argv[1];
    int mib = 64, reps = 9;
    const char *from = "cpu:0", *to = "cpu:1";
    for (int i = 2; i < argc; i += 2) {
        if (i + 1 >= argc) {
            fprintf(stderr, "device-bench: %s needs a value\n", argv[i]);
            return 2;
        }
        if (strcmp(argv[i], "--mib") == 0) mib = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--reps") == 0) reps = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--from") == 0) from = argv[i + 1];
        else if (strcmp(argv[i], "--to") == 0) to = argv[i + 1];
        else {
            fprintf(stderr, "device-bench: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (mib < 1 || reps < 1 || reps > 1000) return 2;
    const int64_t n = (int64_t)mib << 18; /* f32 elements */
    const size_t nbytes = (size_t)n * 4;
    float *host = malloc(nbytes);
    if (host == NULL) return 1;
    for (int64_t i = 0; i < n; i++) host[i] = (float)(i % 1000);
    double *t = calloc((size_t)reps, sizeof *t);

    char uri[600];
    td_context *span, *c0, *c1;
    /* where the server puts a session that names no device, and one that says auto */
    for (int i = 0; i < 2; i++) {
        snprintf(uri, sizeof uri, i == 0 ? "tensord://%s" : "tensord://%s/auto", addr);
        if (td_connect(uri, NULL, &span) != TD_OK) die(uri, NULL);
        printf("%s: session on %s\n", i == 0 ? "no device named" : "auto", td_device_name(span));
        td_close(span);
    }
    snprintf(uri, sizeof uri, "tensord://%s/%s,%s", addr, from, to);
    if (td_connect(uri, NULL, &span) != TD_OK) die(uri, NULL);
    snprintf(uri, sizeof uri, "tensord://%s/%s", addr, from);
    if (td_connect(uri, NULL, &c0) != TD_OK) die(uri, NULL);
    snprintf(uri, sizeof uri, "tensord://%s/%s", addr, to);
    /* the alternative at its fastest: no blob offer (no SHA-256 of every upload) */
    td_options fast = {.blob_min_bytes = SIZE_MAX};
    if (td_connect(uri, &fast, &c1) != TD_OK) die(uri, NULL);
    td_tensor *src = td_from_host(span, TD_F32, 1, &n, host);
    td_tensor *src0 = td_from_host(c0, TD_F32, 1, &n, host);
    if (src == NULL || src0 == NULL || td_fence(span) != TD_OK || td_fence(c0) != TD_OK)
        die("upload", span);

    { /* the bytes arrive unchanged */
        td_tensor *y = td_to_device(src, to);
        float *back = malloc(nbytes);
        if (y == NULL || back == NULL || td_read(y, back, nbytes) != TD_OK) die("td_to_device", span);
        if (memcmp(back, host, nbytes) != 0) {
            fprintf(stderr, "device-bench: bytes moved %s -> %s differ from the source\n", from, to);
            return 1;
        }
        printf("move_%s_to_%s: %d MiB bit-exact\n", from, to, mib);
        free(back);
        td_release(y);
    }
    for (int r = 0; r < reps; r++) { /* inside the server */
        double t0 = now_ms();
        td_tensor *y = td_to_device(src, to);
        if (y == NULL || td_fence(span) != TD_OK) die("td_to_device", span);
        t[r] = now_ms() - t0;
        td_release(y);
    }
    double m = median(t, reps);
    printf("move_in_server_%dMiB      %9.3f ms  %8.0f MB/s\n", mib, m, nbytes / 1e3 / m);

    for (int r = 0; r < reps; r++) { /* through the client */
        double t0 = now_ms();
        if (td_read(src0, host, nbytes) != TD_OK) die("td_read", c0);
        td_tensor *y = td_from_host(c1, TD_F32, 1, &n, host);
        if (y == NULL || td_fence(c1) != TD_OK) die("td_from_host", c1);
        t[r] = now_ms() - t0;
        td_release(y);
    }
    double m2 = median(t, reps);
    printf("move_via_client_%dMiB     %9.3f ms  %8.0f MB/s   (in-server %.1fx faster)\n", mib,
           m2, nbytes / 1e3 / m2, m2 / m);
    td_release(src);
    td_release(src0);
    td_close(span);
    td_close(c0);
    td_close(c1);

    /* direct and pool connects interleaved, so that both see the same machine load */
    char direct[600], pooled[600];
    snprintf(direct, sizeof direct, "tensord://%s/%s", addr, from);
    snprintf(pooled, sizeof pooled, "tensord://127.0.0.1:%d,%s/%s", dead_port(), addr, from);
    setenv("TENSORD_LOG_LEVEL", "error", 1); /* the skip warnings, once per connect */
    double *tp = calloc((size_t)reps, sizeof *tp);
    for (int r = 0; r < reps; r++) {
        td_context *c;
        double t0 = now_ms();
        if (td_connect(direct, NULL, &c) != TD_OK) die(direct, NULL);
        td_close(c);
        t[r] = now_ms() - t0;
        t0 = now_ms();
        /* round robin: every other connect starts at the dead member */
        if (td_connect(pooled, NULL, &c) != TD_OK) die(pooled, NULL);
        td_close(c);
        tp[r] = now_ms() - t0;
    }
    printf("connect_direct           %9.3f ms\n", median(t, reps));
    printf("connect_pool_one_dead    %9.3f ms   (median; half the connects skip the dead one)\n",
           median(tp, reps));
    free(tp);
    free(t);
    free(host);
    return 0;
}

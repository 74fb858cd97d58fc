/* raw_ping.c — the baseline for `tensorctl ping`: an 8-byte request/response over a plain
 * TCP loopback or unix-domain socket, echoed by a thread in the same process. It measures
 * what the kernel round trip costs with no RPC framework, so BENCHMARKS.md can state the
 * ratio gRPC/tensord adds on top.
 * Usage: raw-ping [--tcp | --unix] [-n N]; prints median, p99, min, max in microseconds. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static int g_listen_fd;
static int g_n;

static int full_io(int fd, char *buf, size_t n, int write_mode)
{
    size_t done = 0;
    while (done < n) {
        ssize_t r = write_mode ? write(fd, buf + done, n - done) : read(fd, buf + done, n - done);
        if (r <= 0) return -1;
        done += (size_t)r;
    }
    return 0;
}

static void *echo_thread(void *arg)
{
    (void)arg;
    int fd = accept(g_listen_fd, NULL, NULL);
    if (fd < 0) return NULL;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    char buf[8];
    for (int i = 0; i < g_n; i++) {
        if (full_io(fd, buf, 8, 0) || full_io(fd, buf, 8, 1)) break;
    }
    close(fd);
    return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    int use_unix = 0;
    g_n = 1000;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--unix") == 0) {
            use_unix = 1;
        } else if (strcmp(argv[i], "--tcp") == 0) {
            use_unix = 0;
        } else if (strcmp(argv[i], "-n") == 0 && i + 1 < argc) {
            g_n = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: raw-ping [--tcp | --unix] [-n N]\n"
                            "  8-byte ping-pong over a loopback socket; prints latency in us\n");
            return strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0 ? 0 : 2;
        }
    }
    if (g_n < 1) g_n = 1;
    int cfd;
    char path[108] = "";
    if (use_unix) {
        snprintf(path, sizeof path, "/tmp/raw-ping-%d.sock", (int)getpid());
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
        g_listen_fd = socket(AF_UNIX, SOCK_STREAM, 0);
        unlink(path);
        if (bind(g_listen_fd, (struct sockaddr *)&sa, sizeof sa) || listen(g_listen_fd, 1)) {
            perror("raw-ping: bind");
            return 1;
        }
        pthread_t th;
        pthread_create(&th, NULL, echo_thread, NULL);
        cfd = socket(AF_UNIX, SOCK_STREAM, 0);
        if (connect(cfd, (struct sockaddr *)&sa, sizeof sa)) {
            perror("raw-ping: connect");
            return 1;
        }
        pthread_detach(th);
    } else {
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t len = sizeof sa;
        g_listen_fd = socket(AF_INET, SOCK_STREAM, 0);
        if (bind(g_listen_fd, (struct sockaddr *)&sa, sizeof sa) || listen(g_listen_fd, 1) ||
            getsockname(g_listen_fd, (struct sockaddr *)&sa, &len)) {
            perror("raw-ping: bind");
            return 1;
        }
        pthread_t th;
        pthread_create(&th, NULL, echo_thread, NULL);
        cfd = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(cfd, (struct sockaddr *)&sa, sizeof sa)) {
            perror("raw-ping: connect");
            return 1;
        }
        int one = 1;
        setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        pthread_detach(th);
    }
    uint64_t *rtt = calloc((size_t)g_n, sizeof *rtt);
    char buf[8] = "ping1234";
    for (int i = 0; i < g_n; i++) {
        uint64_t t0 = now_ns();
        if (full_io(cfd, buf, 8, 1) || full_io(cfd, buf, 8, 0)) {
            fprintf(stderr, "raw-ping: socket closed\n");
            return 1;
        }
        rtt[i] = now_ns() - t0;
    }
    qsort(rtt, (size_t)g_n, sizeof *rtt, cmp_u64);
    printf("raw %s ping: n=%d median %.1f us  p99 %.1f us  min %.1f us  max %.1f us\n",
           use_unix ? "unix" : "tcp", g_n, rtt[g_n / 2] / 1e3, rtt[(g_n * 99) / 100] / 1e3,
           rtt[0] / 1e3, rtt[g_n - 1] / 1e3);
    close(cfd);
    if (use_unix) unlink(path);
    free(rtt);
    return 0;
}

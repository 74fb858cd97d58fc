/* e2e/tsan_client_reads.c — a driver for a ThreadSanitizer build of libtensord (criterion
 * does not start under TSan, so this is a plain program, not in meson's test list):
 * reads of several chunks pending (td_read_start) while the context's flusher thread sends
 * copied uploads and flushes batches, finished in mixed order, then td_close with a read
 * and an upload pending. Exit 0 when every value matched; TSan reports come on stderr.
 *
 *   meson setup build-tsan -Db_sanitize=thread -Db_lundef=false -Dtests=disabled ...
 *   ninja -C build-tsan client/libtensord.so.0.1.0 server/tensord
 *   gcc -fsanitize=thread -g -O1 -Iinclude tests/e2e/tsan_client_reads.c \
 *       -Lbuild-tsan/client -ltensord -Wl,-rpath,$PWD/build-tsan/client -o /tmp/tsan-reads
 *   build-tsan/server/tensord --listen 127.0.0.1:17081 &
 *   TSAN_OPTIONS=suppressions=$PWD/tests/tsan.supp /tmp/tsan-reads tensord://127.0.0.1:17081/cpu
 *
 * Found (2026-12-07): td__transport.sends_queued, written by tp_unlock on the user thread
 * after td_read_finish (outside the flusher lock) and read by the flusher's flush_locked. */
#include "tensord.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); exit(1); } } while (0)

int main(int argc, char **argv)
{
    CHECK(argc == 2, "usage: %s URI", argv[0]);
    setenv("TENSORD_WRITE_COPY_MAX", "16777216", 1);
    td_options o = {.no_shm = true, .batch_flush_us = 50};
    td_context *ctx;
    CHECK(td_connect(argv[1], &o, &ctx) == TD_OK, "%s", td_connect_error());
    enum { N = 3 << 18, K = 6, U = 4 << 20 };
    float *src = malloc(N * 4);
    uint8_t *up = malloc(U);
    float *got[K];
    for (int i = 0; i < N; i++) src[i] = (float)i;
    for (int k = 0; k < K; k++) got[k] = malloc(N * 4);
    td_tensor *x = td_from_host(ctx, TD_F32, 1, (int64_t[]){N}, src);
    for (int round = 0; round < 8; round++) {
        td_pending_read *p[K];
        td_tensor *y[K];
        for (int k = 0; k < K; k++) {
            y[k] = td_add_scalar(x, (double)(k + round));
            CHECK(td_read_start(y[k], got[k], N * 4, &p[k]) == TD_OK, "%s", td_last_error(ctx));
            memset(up, k, U);
            td_tensor *u = td_from_host_ex(ctx, TD_U8, 1, (int64_t[]){U}, up, TD_WRITE_FRESH);
            CHECK(u != NULL, "%s", td_last_error(ctx));
            td_tensor *v = td_neg(td_add_scalar(x, 1.0)); /* a batch for flush_due */
            usleep(2000);
            td_release(v);
            td_release(u);
        }
        for (int k = K - 1; k >= 0; k -= 2)
            CHECK(td_read_finish(p[k]) == TD_OK, "%s", td_last_error(ctx));
        for (int k = 0; k < K; k += 2)
            CHECK(td_read_finish(p[k]) == TD_OK, "%s", td_last_error(ctx));
        for (int k = 0; k < K; k++) {
            for (int i = 0; i < N; i++)
                CHECK(got[k][i] == (float)(i + k + round), "round %d read %d elem %d: %g", round, k,
                      i, got[k][i]);
            td_release(y[k]);
        }
    }
    /* close with reads pending */
    td_pending_read *q;
    td_tensor *z = td_neg(x);
    CHECK(td_read_start(z, got[0], N * 4, &q) == TD_OK, "%s", td_last_error(ctx));
    memset(up, 1, U);
    td_tensor *u = td_from_host_ex(ctx, TD_U8, 1, (int64_t[]){U}, up, TD_WRITE_FRESH);
    (void)u;
    td_close(ctx);
    printf("ok\n");
    return 0;
}

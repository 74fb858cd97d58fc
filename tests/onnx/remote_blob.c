/* remote_blob.c — an ONNX model on a real tensord: its 2 MiB initializer crosses the wire
 * once per server (td_from_host's blob offer: a second context that loads the same model
 * sends only the hash), and the remote run gives the bits of local:cpu. */
#include "../e2e/suite_fixture.h"
#include "../unit/client/onnx_model.h"
#include "tensord.h"
#include <criterion/criterion.h>
#include <stdio.h>

TestSuite(onnx_remote, .init = start_tcp, .fini = stop);

#define K_IN 512
#define N_OUT 1024

static float w[K_IN * N_OUT], xv[K_IN];

/* y = MatMul(x [1, 512], w [512, 1024]) with w an initializer of 2 MiB. */
static uint8_t *model(size_t *len)
{
    for (int64_t i = 0; i < K_IN * N_OUT; i++) w[i] = (float)((i * 7919) % 2003 - 1001) / 1024.0f;
    for (int i = 0; i < K_IN; i++) xv[i] = (float)((i * 31) % 17 - 8) / 8.0f;
    static mb b;
    mb_init(&b, 8, 13);
    mb_input(&b, "x", 1, 2, (const int64_t[]){1, K_IN});
    mb_init_f32(&b, "w", 2, (const int64_t[]){K_IN, N_OUT}, (size_t)K_IN * N_OUT, w);
    mb_add_node(&b, "MatMul", "mm", (const char *const[]){"x", "w", NULL},
                (const char *const[]){"y", NULL});
    mb_output(&b, "y", 1, 2, (const int64_t[]){1, N_OUT});
    return mb_pack(&b, len);
}

static void run(td_context *ctx, const uint8_t *buf, size_t len, float *out, uint64_t *sent)
{
    td_stats before, after;
    td_get_stats(ctx, &before);
    td_onnx_model *m = NULL;
    cr_assert_eq(td_onnx_load_memory(ctx, buf, len, &m), TD_OK, "%s", td_last_error(ctx));
    td_get_stats(ctx, &after);
    *sent = after.bytes_sent - before.bytes_sent;
    td_tensor *x = td_from_host(ctx, TD_F32, 2, (const int64_t[]){1, K_IN}, xv), *y = NULL;
    cr_assert_eq(td_onnx_run(m, 1, NULL, &x, 1, &y), TD_OK, "%s", td_last_error(ctx));
    cr_assert_eq(td_read(y, out, N_OUT * sizeof(float)), TD_OK, "%s", td_last_error(ctx));
    td_release(x);
    td_release(y);
    td_onnx_destroy(m);
}

Test(onnx_remote, initializer_once_and_local_bits)
{
    size_t len;
    uint8_t *buf = model(&len);
    char uri[600];
    snprintf(uri, sizeof uri, "tensord://%s/cpu", srv.addr);
    static float local[N_OUT], r1[N_OUT], r2[N_OUT];
    uint64_t s_local, s1, s2;
    td_context *lc, *c1, *c2;
    cr_assert_eq(td_connect("local:cpu", NULL, &lc), TD_OK);
    run(lc, buf, len, local, &s_local);
    cr_assert_eq(td_connect(uri, NULL, &c1), TD_OK, "%s", td_connect_error());
    run(c1, buf, len, r1, &s1);
    cr_assert_eq(td_connect(uri, NULL, &c2), TD_OK, "%s", td_connect_error());
    run(c2, buf, len, r2, &s2);
    size_t wbytes = sizeof w;
    cr_assert_geq(s1, wbytes, "first load sent %llu bytes, the initializer has %zu",
                  (unsigned long long)s1, wbytes);
    cr_assert_lt(s2, wbytes / 16, "second load sent %llu bytes: the blob store should have "
                 "the initializer", (unsigned long long)s2);
    cr_assert_eq(memcmp(local, r1, sizeof local), 0, "remote result differs from local:cpu");
    cr_assert_eq(memcmp(local, r2, sizeof local), 0);
    td_close(c2);
    td_close(c1);
    td_close(lc);
    free(buf);
}

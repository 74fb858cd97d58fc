/* ops_workload.c — a known workload for tests/e2e/ops.py (metrics deltas, log lines): not a
 * test by itself.
 *
 * usage: test-ops-workload URI N NBYTES
 *        test-ops-workload URI N busy
 *        test-ops-workload URI N train
 *        test-ops-workload URI N ring
 * The third form is a client mid-training: it prints "ready SESSION-OPEN", then runs one
 * step (N adds on a small tensor, read back) every 20 ms until a line arrives on stdin
 * (prints "done STEPS", exit 0) or a step fails (prints "error STATUS_NAME: MESSAGE" with
 * td_last_error, exit 3). $OPS_WORKLOAD_CA, when set, is the CA file for a tensords:// URI.
 * The fourth form needs a unix: URI whose session gets the request ring (it exits 1
 * otherwise): N rounds of one add on a one-element tensor read back at once (each round one
 * ring request: the read and the batch held for it), then "ready SESSION-OPEN" and a line
 * on stdin before closing, as the first form.
 * The second form queues N matmuls of 1024x1024 (about 2 GFLOP each) without waiting for
 * them, prints "ready SESSION-OPEN" and waits for a line on stdin, then exits without
 * reading (work for the server to drain while the caller looks at it).
 * Uploads one f32 tensor of NBYTES bytes, runs N adds on it, reads the NBYTES result back
 * (so the server receives and sends at least NBYTES each), then runs one gather with an
 * out-of-range index (one execution failure, TD_ERANGE, op "gather"). Prints
 * "ready SESSION-OPEN" and waits for a line on stdin before closing, so the caller can
 * scrape while the session is open; prints "done" after td_close. The bearer token comes
 * from $TENSORD_TOKEN (libtensord reads it). Exit 0, or 1 with a message.
 */
#include <tensord.h>

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int fail(td_context *ctx, const char *what)
{
    fprintf(stderr, "ops-workload: %s: %s\n", what, td_last_error(ctx));
    return 1;
}

static int train(const char *uri, long n_ops)
{
    td_options o = {0};
    o.tls_ca_file = getenv("OPS_WORKLOAD_CA");
    td_context *ctx;
    if (td_connect(uri, &o, &ctx) != TD_OK) {
        fprintf(stderr, "ops-workload: connect: %s\n", td_connect_error());
        return 1;
    }
    int64_t n = 64;
    td_tensor *w = td_full(ctx, TD_F32, 1, &n, 0.0);
    float v[64];
    if (w == NULL || td_read(w, v, sizeof v) != TD_OK) return fail(ctx, "first step");
    printf("ready SESSION-OPEN\n");
    fflush(stdout);
    for (long step = 0;; step++) {
        struct pollfd p = {.fd = 0, .events = POLLIN};
        if (poll(&p, 1, 20) > 0) {
            printf("done %ld\n", step);
            td_release(w);
            td_close(ctx);
            return 0;
        }
        td_tensor *x = w;
        for (long i = 0; i < n_ops && x != NULL; i++) {
            td_tensor *y = td_add_scalar(x, 1.0);
            if (x != w) td_release(x);
            x = y;
        }
        td_status st = x != NULL ? td_read(x, v, sizeof v) : TD_EINVAL;
        if (st != TD_OK) {
            printf("error %s: %s\n", td_status_name(st), td_last_error(ctx));
            fflush(stdout);
            return 3;
        }
        td_release(w);
        w = x;
    }
}

static int ring(const char *uri, long n_rounds)
{
    td_context *ctx;
    if (td_connect(uri, NULL, &ctx) != TD_OK) {
        fprintf(stderr, "ops-workload: connect: %s\n", td_connect_error());
        return 1;
    }
    if (strcmp(td_context_transport(ctx), "shm+ring") != 0) {
        fprintf(stderr, "ops-workload: transport %s, not shm+ring\n", td_context_transport(ctx));
        return 1;
    }
    int64_t one = 1;
    td_tensor *x = td_full(ctx, TD_F32, 1, &one, 0.0);
    td_tensor *inc = td_full(ctx, TD_F32, 1, &one, 1.0);
    for (long i = 0; i < n_rounds; i++) {
        td_tensor *y = td_add(x, inc);
        td_release(x);
        x = y;
        float v = -1;
        if (td_read(x, &v, sizeof v) != TD_OK) return fail(ctx, "ring round");
        if (v != (float)(i + 1)) {
            fprintf(stderr, "ops-workload: round %ld read %g\n", i, v);
            return 1;
        }
    }
    printf("ready SESSION-OPEN\n");
    fflush(stdout);
    char l[16];
    if (fgets(l, sizeof l, stdin) == NULL) { /* the caller went away */
    }
    td_close(ctx);
    printf("done\n");
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s URI N NBYTES\n", argv[0]);
        return 2;
    }
    long n_ops = atol(argv[2]);
    if (strcmp(argv[3], "train") == 0) return train(argv[1], n_ops);
    if (strcmp(argv[3], "busy") == 0) {
        td_context *bc;
        if (td_connect(argv[1], NULL, &bc) != TD_OK) {
            fprintf(stderr, "ops-workload: connect: %s\n", td_connect_error());
            return 1;
        }
        int64_t dims[2] = {1024, 1024};
        td_tensor *m = td_full(bc, TD_F32, 2, dims, 1.0 / 1024);
        td_tensor *acc = m;
        for (long i = 0; i < n_ops && acc != NULL; i++) acc = td_matmul(acc, m);
        if (acc == NULL) return fail(bc, "busy matmuls");
        /* the batch goes out batch_flush_us (2 ms) after its first op; give it 200 ms */
        struct timespec ts = {0, 200 * 1000 * 1000};
        nanosleep(&ts, NULL);
        printf("ready SESSION-OPEN\n");
        fflush(stdout);
        char l[16];
        if (fgets(l, sizeof l, stdin) == NULL) { /* the caller went away */
        }
        return 0;
    }
    if (strcmp(argv[3], "ring") == 0) return ring(argv[1], n_ops);
    long nbytes = atol(argv[3]);
    if (n_ops < 1 || nbytes < 4 || nbytes % 4 != 0) {
        fprintf(stderr, "ops-workload: N >= 1, NBYTES a positive multiple of 4\n");
        return 2;
    }
    td_context *ctx;
    if (td_connect(argv[1], NULL, &ctx) != TD_OK) {
        fprintf(stderr, "ops-workload: connect: %s\n", td_connect_error());
        return 1;
    }
    int64_t n = nbytes / 4;
    float *host = malloc((size_t)nbytes), *back = malloc((size_t)nbytes);
    if (host == NULL || back == NULL) return 1;
    for (int64_t i = 0; i < n; i++) host[i] = (float)(i % 7);
    td_tensor *x = td_from_host(ctx, TD_F32, 1, &n, host);
    td_tensor *y = x;
    for (long i = 0; i < n_ops; i++) {
        td_tensor *z = td_add(y, x);
        if (y != x) td_release(y);
        y = z;
    }
    if (y == NULL || td_read(y, back, (size_t)nbytes) != TD_OK) return fail(ctx, "adds");
    for (int64_t i = 0; i < n; i++)
        if (back[i] != (float)(i % 7) * (float)(n_ops + 1)) {
            fprintf(stderr, "ops-workload: element %lld is %g\n", (long long)i, back[i]);
            return 1;
        }
    int64_t sixteen = 16;
    td_tensor *a = td_full(ctx, TD_F32, 1, &sixteen, 3.0);
    td_graph *gr = NULL;
    if (td_graph_begin(ctx) != TD_OK) return fail(ctx, "graph begin");
    td_tensor *in = td_graph_input(ctx, "a", TD_F32, 1, &sixteen);
    if (td_graph_output(ctx, "y", td_mul(in, in)) != TD_OK || td_graph_end(ctx, &gr) != TD_OK)
        return fail(ctx, "graph capture");
    for (int r = 0; r < 2; r++) {
        td_tensor *sq;
        float v[16];
        if (td_graph_run(gr, 1, NULL, &a, 1, NULL, &sq) != TD_OK ||
            td_read(sq, v, sizeof v) != TD_OK)
            return fail(ctx, "graph run");
        if (v[0] != 9.0f || v[15] != 9.0f) {
            fprintf(stderr, "ops-workload: graph run gave %g\n", v[0]);
            return 1;
        }
        td_release(sq);
    }
    td_graph_destroy(gr);
    td_release(a);
    int64_t four = 4, one = 1;
    int64_t bad_index = 100;
    td_tensor *small = td_full(ctx, TD_F32, 1, &four, 1.0);
    td_tensor *idx = td_from_host(ctx, TD_I64, 1, &one, &bad_index);
    td_tensor *g = td_gather(small, idx, 0);
    float out;
    if (g == NULL) return fail(ctx, "gather (recording)");
    if (td_read(g, &out, sizeof out) == TD_OK) {
        fprintf(stderr, "ops-workload: a gather at index 100 of 4 elements succeeded\n");
        return 1;
    }
    printf("ready SESSION-OPEN\n");
    fflush(stdout);
    char line[16];
    if (fgets(line, sizeof line, stdin) == NULL) { /* the caller went away: close anyway */
    }
    td_release(g);
    td_release(idx);
    td_release(small);
    td_release(y);
    td_release(x);
    td_close(ctx);
    free(host);
    free(back);
    printf("done\n");
    return 0;
}

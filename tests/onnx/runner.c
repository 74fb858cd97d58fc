/* runner.c — the ONNX backend node tests (Debian's libonnx-testdata) through the public
 * API: each test directory's model.onnx is loaded with td_onnx_load on one device, every
 * test_data_set_N/input_K.pb is fed with td_onnx_run, and every output is compared with
 * output_K.pb by ONNX's own rule |actual - expected| <= atol + rtol * |expected| (rtol 1e-3,
 * atol 1e-7: onnx/backend/test/case/node, the defaults of its test runner), NaN matching NaN,
 * dtypes and shapes exactly.
 *
 * Per test it prints PASS, FAIL (a wrong value, dtype or shape, or a failure after the
 * model was accepted: a defect), or UNSUPPORTED (the loader refused the model with
 * TD_EUNSUPPORTED: a missing op, dtype or feature, with its message), then a summary by op
 * type (the op of a single-node model, "multi-node" otherwise). A load failure with another
 * status is REJECTED (the model was refused as invalid: also a defect for these tests,
 * which are valid models, but never a wrong answer).
 *
 *   td-onnx-runner --device URI [--expected FILE] [--write-expected FILE] [--only NAME] DIR
 *
 * With --expected, the exit status is 1 when a test listed as PASS does not pass, or any
 * test FAILs; tests that now pass but are listed otherwise are reported (update the list).
 */
#include "tensord.h"
#include <dirent.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define RTOL 1e-3
#define ATOL 1e-7

typedef struct result {
    char name[160];
    char op[64];
    char status[16];
} result;

static void *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) return NULL;
    size_t cap = 4096, n = 0;
    unsigned char *buf = malloc(cap);
    for (;;) {
        if (n == cap) {
            unsigned char *p = realloc(buf, cap *= 2);
            if (p == NULL) break;
            buf = p;
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0) break;
    }
    fclose(f);
    *len = n;
    return buf;
}

/* Minimal protobuf walk for the summary: the op_type of each node of ModelProto.graph
 * (field 7) -> GraphProto.node (field 1) -> NodeProto.op_type (field 4). */
static bool varint(const unsigned char **p, const unsigned char *end, uint64_t *v)
{
    *v = 0;
    for (int s = 0; s < 64 && *p < end; s += 7) {
        unsigned char b = *(*p)++;
        *v |= (uint64_t)(b & 0x7f) << s;
        if (!(b & 0x80)) return true;
    }
    return false;
}

/* Find length-delimited field `want` in [p, end); call fn on each. */
static int for_field(const unsigned char *p, const unsigned char *end, uint64_t want,
                     void (*fn)(const unsigned char *, size_t, void *), void *arg)
{
    int count = 0;
    while (p < end) {
        uint64_t key, v;
        if (!varint(&p, end, &key)) return count;
        switch (key & 7) {
        case 0: if (!varint(&p, end, &v)) return count; break;
        case 1: p += 8; break;
        case 5: p += 4; break;
        case 2:
            if (!varint(&p, end, &v) || v > (uint64_t)(end - p)) return count;
            if ((key >> 3) == want) {
                fn(p, (size_t)v, arg);
                count++;
            }
            p += v;
            break;
        default: return count;
        }
    }
    return count;
}

typedef struct opscan {
    char first[64];
    int nodes;
} opscan;

static void on_optype(const unsigned char *p, size_t n, void *arg)
{
    opscan *s = arg;
    if (s->nodes == 1 && s->first[0] == '\0')
        snprintf(s->first, sizeof s->first, "%.*s", (int)(n < 63 ? n : 63), (const char *)p);
}
static void on_node(const unsigned char *p, size_t n, void *arg)
{
    opscan *s = arg;
    s->nodes++;
    for_field(p, p + n, 4, on_optype, arg);
}
static void on_graph(const unsigned char *p, size_t n, void *arg)
{
    for_field(p, p + n, 1, on_node, arg);
}

static void model_op(const void *buf, size_t len, char *out, size_t outlen)
{
    opscan s = {{0}, 0};
    for_field(buf, (const unsigned char *)buf + len, 7, on_graph, &s);
    snprintf(out, outlen, "%s", s.nodes == 1 ? s.first : "multi-node");
}

static int cmpstr(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorted entries of dir starting with prefix (caller frees). */
static char **list_dir(const char *dir, const char *prefix, int *n)
{
    DIR *d = opendir(dir);
    *n = 0;
    if (d == NULL) return NULL;
    char **v = NULL;
    int cap = 0;
    struct dirent *ent;
    while ((ent = readdir(d)) != NULL) {
        if (strncmp(ent->d_name, prefix, strlen(prefix)) != 0) continue;
        if (*n == cap) v = realloc(v, (size_t)(cap = cap ? cap * 2 : 64) * sizeof *v);
        v[(*n)++] = strdup(ent->d_name);
    }
    closedir(d);
    qsort(v, (size_t)*n, sizeof *v, cmpstr);
    return v;
}

static void free_list(char **v, int n)
{
    for (int i = 0; i < n; i++) free(v[i]);
    free(v);
}

static double elem(const void *p, td_dtype dt, size_t i)
{
    switch (dt) {
    case TD_F32: return ((const float *)p)[i];
    case TD_F64: return ((const double *)p)[i];
    case TD_I32: return ((const int32_t *)p)[i];
    case TD_I64: return (double)((const int64_t *)p)[i];
    case TD_I16: return ((const int16_t *)p)[i];
    case TD_I8: return ((const int8_t *)p)[i];
    case TD_U8:
    case TD_BOOL: return ((const uint8_t *)p)[i];
    case TD_F16: {
        uint16_t h = ((const uint16_t *)p)[i];
        int ex = (h >> 10) & 31, man = h & 1023;
        double v = ex == 0 ? ldexp(man, -24) : ex == 31 ? (man ? NAN : INFINITY)
                                                        : ldexp(man + 1024, ex - 25);
        return (h & 0x8000) ? -v : v;
    }
    case TD_BF16: {
        uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    }
    return 0;
}

/* Compare; on mismatch write why. */
static bool compare(const td_onnx_tensor *want, td_tensor *got, const void *data, char *why,
                    size_t len)
{
    if (td_tensor_dtype(got) != want->dtype) {
        snprintf(why, len, "dtype %s, expected %s", td_dtype_name(td_tensor_dtype(got)),
                 td_dtype_name(want->dtype));
        return false;
    }
    bool same = td_rank(got) == want->rank;
    for (int i = 0; same && i < want->rank; i++) same = td_dims(got)[i] == want->dims[i];
    if (!same) {
        snprintf(why, len, "shape of rank %d differs from the expected rank %d (or a dim)",
                 td_rank(got), want->rank);
        return false;
    }
    size_t n = want->nbytes / (td_dtype_size(want->dtype) ? td_dtype_size(want->dtype) : 1);
    for (size_t i = 0; i < n; i++) {
        double a = elem(data, want->dtype, i), b = elem(want->data, want->dtype, i);
        if (want->dtype == TD_I64) {
            int64_t x = ((const int64_t *)data)[i], y = ((const int64_t *)want->data)[i];
            if (x == y) continue;
            snprintf(why, len, "element %zu is %lld, expected %lld", i, (long long)x,
                     (long long)y);
            return false;
        }
        if (isnan(a) && isnan(b)) continue;
        if (a == b) continue;
        if (!(fabs(a - b) <= ATOL + RTOL * fabs(b))) {
            snprintf(why, len, "element %zu is %.9g, expected %.9g", i, a, b);
            return false;
        }
    }
    return true;
}

/* Run one test directory. status: PASS FAIL UNSUPPORTED REJECTED. */
static void run_test(td_context *ctx, const char *dir, result *r, char *msg, size_t msglen)
{
    char path[4096];
    snprintf(path, sizeof path, "%.3000s/model.onnx", dir);
    size_t mlen = 0;
    void *mbuf = read_file(path, &mlen);
    msg[0] = '\0';
    if (mbuf == NULL) {
        strcpy(r->status, "FAIL");
        snprintf(msg, msglen, "cannot read %.1000s", path);
        return;
    }
    model_op(mbuf, mlen, r->op, sizeof r->op);
    td_onnx_model *m = NULL;
    td_status st = td_onnx_load_memory(ctx, mbuf, mlen, &m);
    free(mbuf);
    if (st != TD_OK) {
        strcpy(r->status, st == TD_EUNSUPPORTED ? "UNSUPPORTED" : "REJECTED");
        snprintf(msg, msglen, "%s: %s", td_status_name(st), td_last_error(ctx));
        return;
    }
    int nsets;
    char **sets = list_dir(dir, "test_data_set_", &nsets);
    strcpy(r->status, "PASS");
    int n_in = td_onnx_n_inputs(m), n_out = td_onnx_n_outputs(m);
    for (int s = 0; s < nsets && strcmp(r->status, "PASS") == 0; s++) {
        char sdir[4096];
        snprintf(sdir, sizeof sdir, "%.2000s/%.1000s", dir, sets[s]);
        td_tensor *ins[64] = {0}, *outs[64] = {0};
        const char *names[64] = {0};
        td_onnx_tensor host[64];
        bool unsup = false;
        memset(host, 0, sizeof host);
        bool ok = n_in <= 64 && n_out <= 64;
        for (int k = 0; ok && k < n_in; k++) {
            snprintf(path, sizeof path, "%.3500s/input_%d.pb", sdir, k);
            size_t len;
            void *buf = read_file(path, &len);
            if (buf == NULL || td_onnx_tensor_decode(buf, len, &host[k]) != TD_OK) {
                snprintf(msg, msglen, "input %d: %s", k, buf ? td_last_error(NULL) : "missing");
                ok = false;
            }
            free(buf);
            if (!ok) break;
            td_onnx_value v;
            td_onnx_input(m, k, &v);
            names[k] = host[k].name[0] ? host[k].name : v.name;
            ins[k] = td_from_host(ctx, host[k].dtype, host[k].rank, host[k].dims, host[k].data);
            if (ins[k] == NULL) {
                snprintf(msg, msglen, "input %d: %s", k, td_last_error(ctx));
                ok = false;
            }
        }
        if (!ok && td_last_status(NULL) == TD_EUNSUPPORTED) unsup = true;
        if (ok && td_onnx_run(m, n_in, names, ins, n_out, outs) != TD_OK) {
            unsup = td_last_status(ctx) == TD_EUNSUPPORTED;
            snprintf(msg, msglen, "run: %s: %s", td_status_name(td_last_status(ctx)),
                     td_last_error(ctx));
            ok = false;
        }
        for (int k = 0; ok && k < n_out; k++) {
            snprintf(path, sizeof path, "%.3500s/output_%d.pb", sdir, k);
            size_t len;
            void *buf = read_file(path, &len);
            td_onnx_tensor want;
            memset(&want, 0, sizeof want);
            if (buf == NULL || td_onnx_tensor_decode(buf, len, &want) != TD_OK) {
                snprintf(msg, msglen, "output %d: %s", k, buf ? td_last_error(NULL) : "missing");
                unsup = buf != NULL && td_last_status(NULL) == TD_EUNSUPPORTED;
                free(buf);
                ok = false;
                break;
            }
            free(buf);
            void *got = malloc(td_nbytes(outs[k]) ? td_nbytes(outs[k]) : 1);
            td_status rs = td_read(outs[k], got, td_nbytes(outs[k]));
            char why[300];
            if (rs != TD_OK) {
                snprintf(msg, msglen, "output %d: read: %s: %s", k, td_status_name(rs),
                         td_last_error(ctx));
                ok = false;
            } else if (!compare(&want, outs[k], got, why, sizeof why)) {
                snprintf(msg, msglen, "%.100s output %d: %s", sets[s], k, why);
                ok = false;
            }
            free(got);
            td_onnx_tensor_fini(&want);
        }
        for (int k = 0; k < 64; k++) {
            td_release(ins[k]);
            td_release(outs[k]);
            td_onnx_tensor_fini(&host[k]);
        }
        if (!ok) strcpy(r->status, unsup ? "UNSUPPORTED" : "FAIL");
    }
    free_list(sets, nsets);
    td_onnx_destroy(m);
}

typedef struct opsum {
    char op[64];
    int pass, fail, unsup, rej;
} opsum;

static int cmpop(const void *a, const void *b)
{
    return strcmp(((const opsum *)a)->op, ((const opsum *)b)->op);
}

int main(int argc, char **argv)
{
    const char *device = "local:cpu", *expected = NULL, *write_exp = NULL, *only = NULL;
    const char *root = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--device") == 0 && i + 1 < argc) device = argv[++i];
        else if (strcmp(argv[i], "--expected") == 0 && i + 1 < argc) expected = argv[++i];
        else if (strcmp(argv[i], "--write-expected") == 0 && i + 1 < argc) write_exp = argv[++i];
        else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) only = argv[++i];
        else if (argv[i][0] != '-' && root == NULL) root = argv[i];
        else {
            fprintf(stderr, "usage: %s [--device URI] [--expected FILE] [--write-expected FILE] "
                    "[--only TEST] NODE-TEST-DIR\n", argv[0]);
            return 2;
        }
    }
    if (root == NULL) {
        fprintf(stderr, "%s: no test directory given\n", argv[0]);
        return 2;
    }
    td_context *ctx;
    td_options opts = {0};
    opts.call_timeout_ms = 30000;
    if (td_connect(device, &opts, &ctx) != TD_OK) {
        fprintf(stderr, "cannot connect to %s: %s\n", device, td_connect_error());
        return 2;
    }
    int ntests;
    char **tests = list_dir(root, "test_", &ntests);
    if (ntests == 0) {
        fprintf(stderr, "no test_* directories in %s\n", root);
        return 2;
    }
    result *res = calloc((size_t)ntests, sizeof *res);
    int counts[4] = {0};
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int nrun = 0;
    for (int i = 0; i < ntests; i++) {
        if (only != NULL && strcmp(tests[i], only) != 0) continue;
        char dir[4096], msg[1200];
        snprintf(dir, sizeof dir, "%.3000s/%.500s", root, tests[i]);
        struct stat sb;
        if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) continue;
        /* A session keeps every graph it ran (tensord's per-session graph quota, 256):
         * a fresh context every 64 tests. */
        if (nrun > 0 && nrun % 64 == 0) {
            td_close(ctx);
            if (td_connect(device, &opts, &ctx) != TD_OK) {
                fprintf(stderr, "cannot reconnect to %s: %s\n", device, td_connect_error());
                return 2;
            }
        }
        result *r = &res[nrun++];
        snprintf(r->name, sizeof r->name, "%s", tests[i]);
        run_test(ctx, dir, r, msg, sizeof msg);
        int c = r->status[0] == 'P' ? 0 : r->status[0] == 'F' ? 1 : r->status[0] == 'U' ? 2 : 3;
        counts[c]++;
        printf("%-11s %s%s%s\n", r->status, r->name, msg[0] ? "  " : "", msg);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    /* Summary by op type. */
    opsum *ops = calloc((size_t)nrun + 1, sizeof *ops);
    int nops = 0;
    for (int i = 0; i < nrun; i++) {
        int k = 0;
        while (k < nops && strcmp(ops[k].op, res[i].op) != 0) k++;
        if (k == nops) snprintf(ops[nops++].op, sizeof ops[0].op, "%s", res[i].op);
        char c = res[i].status[0];
        if (c == 'P') ops[k].pass++;
        else if (c == 'F') ops[k].fail++;
        else if (c == 'U') ops[k].unsup++;
        else ops[k].rej++;
    }
    qsort(ops, (size_t)nops, sizeof *ops, cmpop);
    printf("\n%-24s %5s %5s %5s %5s\n", "op type", "pass", "fail", "unsup", "rej");
    for (int k = 0; k < nops; k++)
        printf("%-24s %5d %5d %5d %5d\n", ops[k].op, ops[k].pass, ops[k].fail, ops[k].unsup,
               ops[k].rej);
    printf("\n%s: %d tests: %d PASS, %d FAIL, %d UNSUPPORTED, %d REJECTED (%.1f s)\n", device,
           nrun, counts[0], counts[1], counts[2], counts[3],
           (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9);
    int rc = 0;
    if (write_exp != NULL) {
        FILE *f = fopen(write_exp, "w");
        if (f == NULL) {
            perror(write_exp);
            return 2;
        }
        fprintf(f, "# tests/onnx/expected.txt: status of each ONNX node test (libonnx-testdata "
                "1.12) on local:cpu and remote cpu.\n# Regenerate: td-onnx-runner "
                "--write-expected tests/onnx/expected.txt DIR (then review the diff).\n");
        for (int i = 0; i < nrun; i++) fprintf(f, "%s %s\n", res[i].status, res[i].name);
        fclose(f);
    }
    if (expected != NULL) {
        FILE *f = fopen(expected, "r");
        if (f == NULL) {
            perror(expected);
            return 2;
        }
        char line[512];
        int regress = 0, better = 0;
        while (fgets(line, sizeof line, f)) {
            char st[32], name[256];
            if (line[0] == '#' || sscanf(line, "%31s %255s", st, name) != 2) continue;
            for (int i = 0; i < nrun; i++) {
                if (strcmp(res[i].name, name) != 0) continue;
                if (strcmp(st, "PASS") == 0 && strcmp(res[i].status, "PASS") != 0) {
                    printf("REGRESSION  %s: expected PASS, got %s\n", name, res[i].status);
                    regress++;
                } else if (strcmp(st, "PASS") != 0 && strcmp(res[i].status, "PASS") == 0) {
                    printf("NOW PASSES  %s (listed %s: update %s)\n", name, st, expected);
                    better++;
                }
            }
        }
        fclose(f);
        if (regress > 0 || counts[1] > 0) rc = 1;
        printf("expected list: %d regressions, %d FAIL, %d newly passing\n", regress, counts[1],
               better);
    } else if (counts[1] > 0) {
        rc = 1;
    }
    free(ops);
    free(res);
    free_list(tests, ntests);
    td_close(ctx);
    return rc;
}

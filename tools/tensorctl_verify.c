/* tensorctl_verify.c — `tensorctl verify ADDR`: before trusting a server, a driver or a new
 * backend, run the op conformance cases (tests/unit/backends/conformance.c: every op of the
 * table in every dtype its row accepts, representative shapes, inputs from fixed seeds) on
 * each device the server hosts and compare them with the CPU engine inside this process,
 * within each op's stated tolerance; with --model, run an ONNX model on each device and
 * compare its outputs with the same model on the local CPU engine.
 */
#include "engine/convert.h"
#include "tensord.h"
#include "tests/unit/backends/conformance.h"
#include "tools/argv_opt.h"
#include "tools/model_run.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage_verify[] =
    "usage: tensorctl verify [-h] ADDR [--device NAME]... [--filter SUBSTR] [--quick]\n"
    "                        [--json FILE|-] [--model MODEL.onnx --input NAME=FILE.npy ...\n"
    "                        [--rtol R] [--atol A] [--ops]] [--token TOKEN] [--ca FILE]\n"
    "                        [--cert FILE --key FILE] [-t MS]\n"
    "\n"
    "Check that a server computes what the CPU engine in this process computes. For every\n"
    "device the server hosts (or each --device), run the op conformance cases: every op of\n"
    "the op table in every dtype it accepts, on representative shapes, with inputs from a\n"
    "fixed seed, each run twice on the server (the bytes must repeat), compared with the\n"
    "local CPU within the op's tolerance (docs/ops.md's accuracy column). Prints a table per\n"
    "device: cases, passed, failed, the worst distance in ulps and the worst error as a\n"
    "fraction of the tolerance, per op.\n"
    "\n"
    "With --model, run that ONNX model once on every device and once on local:cpu and\n"
    "compare each output: integers and bools bit for bit, floats within ONNX's test rule\n"
    "|got - want| <= atol + rtol |want| (default rtol 1e-3, atol 1e-7), NaN only against NaN.\n"
    "The op cases are skipped when --model is given, unless --ops is given too.\n"
    "\n"
    "options:\n"
    "  --device NAME       only this device of the server (repeatable; default: all)\n"
    "  --filter SUBSTR     only op cases whose name contains SUBSTR (\"add f32\", \"matmul\")\n"
    "  --quick             skip op cases with more than 65536 elements\n"
    "  --json FILE|-       also write JSON lines to FILE, one object per device and check\n"
    "                      (-: standard output, between the table lines)\n"
    "  --model FILE.onnx   compare this model's outputs instead (see above)\n"
    "  --input NAME=FILE   bind model input NAME to a .npy file (every input needs one)\n"
    "  --rtol R, --atol A  the model comparison's tolerances\n"
    "  --ops               run the op cases as well as the model\n"
    "  -t, --timeout MS    connect timeout in milliseconds (default 5000)\n"
    "  --token TOKEN       bearer token (default: $TENSORD_TOKEN)\n"
    "  --ca FILE           CA certificates (PEM) for tensords:// servers\n"
    "  --cert FILE         client certificate (PEM) for mutual TLS, with --key FILE\n"
    "  --key FILE          the client certificate's private key\n"
    "  -h, --help          show this help\n"
    "\n"
    "ADDR is HOST:PORT, unix:PATH, tensord://HOST:PORT or tensords://HOST:PORT (TLS).\n"
    "Exit status: 0 every check passed, 1 a mismatch (the op or output and the device are\n"
    "named) or the server failed or was lost, 2 usage error (options, an unknown device, a\n"
    "model or input that fails on local:cpu too). A vulkan device covers part of the op\n"
    "table: the cases it refuses are listed and counted, not failed.\n";

#define MAX_DEVICES 16

static int usage_fail(const char *fmt, const char *arg)
{
    fprintf(stderr, "tensorctl verify: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n%s", usage_verify);
    return 2;
}

/* The session URI of device `dev` on server `addr` (any ADDR form above). */
static bool device_uri(const char *addr, const char *dev, char *out, size_t len)
{
    int n;
    if (strncmp(addr, "unix:", 5) == 0) {
        n = snprintf(out, len, "%s/%s", addr, dev);
    } else {
        const bool tls = strncmp(addr, "tensords://", 11) == 0;
        const char *host = tls ? addr + 11 : strncmp(addr, "tensord://", 10) == 0 ? addr + 10 : addr;
        const char *slash = strchr(host, '/');
        int hl = slash != NULL ? (int)(slash - host) : (int)strlen(host);
        n = snprintf(out, len, "%s%.*s/%s", tls ? "tensords://" : "tensord://", hl, host, dev);
    }
    return n > 0 && (size_t)n < len;
}

/* Element i of a float output as double. */
static double float_at(const td__model_output *o, size_t i)
{
    switch (o->dtype) {
    case TD_F32: return ((const float *)o->data)[i];
    case TD_F64: return ((const double *)o->data)[i];
    case TD_F16: return td__f16_to_f32(((const uint16_t *)o->data)[i]);
    default: return td__bf16_to_f32(((const uint16_t *)o->data)[i]);
    }
}

static bool is_float(td_dtype d) { return d == TD_F32 || d == TD_F64 || d == TD_F16 || d == TD_BF16; }

/* Compare output `got` with `want`; false with a reason in why. */
static bool compare_output(const td__model_output *want, const td__model_output *got,
                           double rtol, double atol, double *max_abs, char *why, size_t len)
{
    *max_abs = 0;
    if (want->dtype != got->dtype || want->rank != got->rank ||
        memcmp(want->dims, got->dims, (size_t)want->rank * sizeof want->dims[0]) != 0) {
        snprintf(why, len, "dtype or shape differs from local:cpu's");
        return false;
    }
    if (!is_float(want->dtype)) {
        if (memcmp(want->data, got->data, want->nbytes) != 0) {
            snprintf(why, len, "%s values differ from local:cpu's (compared exactly)",
                     td_dtype_name(want->dtype));
            return false;
        }
        return true;
    }
    size_t n = want->nbytes / td_dtype_size(want->dtype);
    for (size_t i = 0; i < n; i++) {
        double w = float_at(want, i), g = float_at(got, i);
        if (isnan(w) || isnan(g)) {
            if (isnan(w) && isnan(g)) continue;
            snprintf(why, len, "element %zu: got %.9g, want %.9g", i, g, w);
            return false;
        }
        if (isinf(w) || isinf(g)) {
            if (w == g) continue;
            snprintf(why, len, "element %zu: got %.9g, want %.9g", i, g, w);
            return false;
        }
        double d = fabs(g - w);
        if (d > *max_abs) *max_abs = d;
        if (d > atol + rtol * fabs(w)) {
            snprintf(why, len, "element %zu: got %.9g, want %.9g (|diff| %.3g > %.3g)", i, g, w,
                     d, atol + rtol * fabs(w));
            return false;
        }
    }
    return true;
}

/* Returns 0 all outputs matched, 1 a device failed or differed, 2 the model or its inputs
 * failed on local:cpu (a usage problem, not the server's). Each device's JSON object is
 * built whole in memory and written as one line. */
static int verify_model(const char *const *uris, const char *const *names, int ndev,
                        const td_options *opts, const char *model, int n_in,
                        const char *const *in_names, const char *const *in_files, double rtol,
                        double atol, FILE *json)
{
    td__model_result ref;
    char err[1024];
    if (td__model_run_files("local:cpu", NULL, model, n_in, in_names, in_files, &ref, err,
                            sizeof err) != 0) {
        fprintf(stderr, "tensorctl verify: the model on local:cpu: %s\n", err);
        return 2;
    }
    int rc = 0;
    for (int d = 0; d < ndev; d++) {
        char *jbuf = NULL;
        size_t jlen = 0;
        FILE *j = json != NULL ? open_memstream(&jbuf, &jlen) : NULL;
        td__model_result got;
        printf("model %s on %s:\n", model, names[d]);
        if (j != NULL) {
            fputs("{\"device\": ", j);
            td__json_str(j, names[d]);
            fputs(", \"model\": ", j);
            td__json_str(j, model);
        }
        if (td__model_run_files(uris[d], opts, model, n_in, in_names, in_files, &got, err,
                                sizeof err) != 0) {
            printf("  FAIL the run: %s\n", err);
            if (j != NULL) {
                fputs(", \"error\": ", j);
                td__json_str(j, err);
                fputs("}\n", j);
            }
            rc = 1;
        } else {
            if (j != NULL) fputs(", \"outputs\": [", j);
            for (int i = 0; i < ref.n_out; i++) {
                char why[512] = "";
                double max_abs = 0;
                bool ok = i < got.n_out &&
                          compare_output(&ref.out[i], &got.out[i], rtol, atol, &max_abs, why,
                                         sizeof why);
                if (i >= got.n_out) snprintf(why, sizeof why, "missing");
                printf("  %-4s output %s: %s (max |diff| %.3g)\n", ok ? "ok" : "FAIL",
                       ref.out[i].name, ok ? "matches local:cpu" : why, max_abs);
                if (!ok) rc = 1;
                if (j != NULL) {
                    fputs(i ? ", {\"output\": " : "{\"output\": ", j);
                    td__json_str(j, ref.out[i].name);
                    fprintf(j, ", \"passed\": %s, \"max_abs_diff\": ", ok ? "true" : "false");
                    td__json_num(j, max_abs);
                    fputs(", \"why\": ", j);
                    td__json_str(j, why);
                    fputs("}", j);
                }
            }
            if (j != NULL) fputs("]}\n", j);
            printf("  run %.3f ms on %s, %.3f ms on local:cpu\n", got.run_s * 1e3, names[d],
                   ref.run_s * 1e3);
            td__model_result_free(&got);
        }
        if (j != NULL) {
            fclose(j);
            fflush(stdout);
            fwrite(jbuf, 1, jlen, json);
            fflush(json);
            free(jbuf);
        }
    }
    td__model_result_free(&ref);
    return rc;
}

int td__tensorctl_verify(int argc, char **argv)
{
    const char *addr = NULL, *filter = NULL, *json_path = NULL, *model = NULL;
    const char *only[MAX_DEVICES];
    int n_only = 0, n_in = 0, timeout_ms = 5000;
    const char *in_names[TD_MODEL_MAX_IO], *in_files[TD_MODEL_MAX_IO];
    bool quick = false, ops = false;
    double rtol = 1e-3, atol = 1e-7;
    td_options o;
    memset(&o, 0, sizeof o);
    for (int i = 0; i < argc; i++) {
        argv_opt opt;
        argv_opt_split(argv[i], &opt);
        const char *a = opt.name;
        const bool flag =
            argv_opt_is_help(a) || strcmp(a, "--quick") == 0 || strcmp(a, "--ops") == 0;
        if (flag && opt.value != NULL) return usage_fail("option %s takes no value", a);
        if (argv_opt_is_help(a)) {
            fputs(usage_verify, stdout);
            return 0;
        }
        bool takes = strcmp(a, "--device") == 0 || strcmp(a, "--filter") == 0 ||
                     strcmp(a, "--json") == 0 || strcmp(a, "--model") == 0 ||
                     strcmp(a, "--input") == 0 || strcmp(a, "--rtol") == 0 ||
                     strcmp(a, "--atol") == 0 || strcmp(a, "--token") == 0 ||
                     strcmp(a, "--ca") == 0 || strcmp(a, "--cert") == 0 ||
                     strcmp(a, "--key") == 0 || strcmp(a, "-t") == 0 ||
                     strcmp(a, "--timeout") == 0;
        char *v = takes ? argv_opt_value(&opt, argc, argv, &i) : NULL;
        if (takes && v == NULL) return usage_fail("option %s needs a value", a);
        if (strcmp(a, "--device") == 0) {
            if (n_only == MAX_DEVICES) return usage_fail("at most %s --device options", "16");
            only[n_only++] = v;
        } else if (strcmp(a, "--filter") == 0) filter = v;
        else if (strcmp(a, "--json") == 0) json_path = v;
        else if (strcmp(a, "--model") == 0) model = v;
        else if (strcmp(a, "--token") == 0) o.token = v;
        else if (strcmp(a, "--ca") == 0) o.tls_ca_file = v;
        else if (strcmp(a, "--cert") == 0) o.tls_cert_file = v;
        else if (strcmp(a, "--key") == 0) o.tls_key_file = v;
        else if (strcmp(a, "--quick") == 0) quick = true;
        else if (strcmp(a, "--ops") == 0) ops = true;
        else if (strcmp(a, "--rtol") == 0 || strcmp(a, "--atol") == 0) {
            char *end;
            errno = 0;
            double x = strtod(v, &end);
            if (errno != 0 || *end != '\0' || !(x >= 0) || isinf(x))
                return usage_fail("bad tolerance '%s' (a finite number >= 0)", v);
            *(strcmp(a, "--rtol") == 0 ? &rtol : &atol) = x;
        } else if (strcmp(a, "-t") == 0 || strcmp(a, "--timeout") == 0) {
            char *end;
            errno = 0;
            long t = strtol(v, &end, 10);
            if (errno != 0 || *end != '\0' || t < 1 || t > 3600000)
                return usage_fail("bad timeout '%s' (milliseconds, 1..3600000)", v);
            timeout_ms = (int)t;
        } else if (strcmp(a, "--input") == 0) {
            char *eq = strchr(v, '=');
            if (eq == NULL || eq == v || eq[1] == '\0')
                return usage_fail("--input wants NAME=FILE.npy, got '%s'", v);
            if (n_in == TD_MODEL_MAX_IO) return usage_fail("at most %s inputs", "64");
            *eq = '\0';
            in_names[n_in] = v;
            in_files[n_in++] = eq + 1;
        } else if (a[0] == '-' && a[1] != '\0') {
            return usage_fail("unknown option '%s'", a);
        } else if (addr == NULL) {
            addr = a;
        } else {
            return usage_fail("unexpected argument '%s'", a);
        }
    }
    if (addr == NULL) return usage_fail("%s", "missing server address ADDR");
    if (n_in > 0 && model == NULL) return usage_fail("%s", "--input needs --model");
    o.connect_timeout_ms = timeout_ms;
    td_server_info info;
    if (td_server_info_get_opts(addr, &o, &info) != TD_OK) {
        fprintf(stderr, "tensorctl verify: %s\n", td_connect_error());
        return 1;
    }
    static char uris[MAX_DEVICES][600];
    const char *uri_p[MAX_DEVICES], *name_p[MAX_DEVICES];
    int ndev = 0;
    for (int i = 0; i < info.n_devices && i < MAX_DEVICES; i++) {
        bool want = n_only == 0;
        for (int j = 0; j < n_only && !want; j++) want = strcmp(only[j], info.devices[i].name) == 0;
        if (!want) continue;
        if (!device_uri(addr, info.devices[i].name, uris[ndev], sizeof uris[0])) {
            fprintf(stderr, "tensorctl verify: address '%s' is too long\n", addr);
            return 2;
        }
        uri_p[ndev] = uris[ndev];
        name_p[ndev++] = info.devices[i].name;
    }
    for (int j = 0; j < n_only; j++) {
        bool found = false;
        for (int i = 0; i < info.n_devices && !found; i++)
            found = strcmp(only[j], info.devices[i].name) == 0;
        if (!found) {
            fprintf(stderr, "tensorctl verify: the server has no device '%s' (it has:", only[j]);
            for (int i = 0; i < info.n_devices; i++) fprintf(stderr, " %s", info.devices[i].name);
            fprintf(stderr, ")\n");
            return 2;
        }
    }
    if (ndev == 0) {
        fprintf(stderr, "tensorctl verify: the server at %s lists no devices\n", addr);
        return 1;
    }
    FILE *json = NULL;
    if (json_path != NULL) {
        json = strcmp(json_path, "-") == 0 ? stdout : fopen(json_path, "w");
        if (json == NULL) {
            fprintf(stderr, "tensorctl verify: cannot write %s: %s\n", json_path, strerror(errno));
            return 2;
        }
    }
    int rc = 0;
    if (model == NULL || ops) {
        for (int d = 0; d < ndev; d++) {
            /* the harness's own command line: conformance --table --target URI ... */
            char *args[12];
            int na = 0;
            args[na++] = "verify";
            args[na++] = "--table";
            args[na++] = "--target";
            args[na++] = (char *)uri_p[d];
            if (filter != NULL) {
                args[na++] = "--filter";
                args[na++] = (char *)filter;
            }
            if (quick) args[na++] = "--quick";
            /* the Vulkan backend covers part of the op table: what it refuses is listed */
            if (strncmp(name_p[d], "vulkan", 6) == 0) args[na++] = "--allow-unsupported";
            printf("device %s (%s):\n", name_p[d], uri_p[d]);
            fflush(stdout);
            /* JSON: the harness writes its own object per target to a temporary file, which
             * is copied into ours, so stdout's JSON lines stay whole */
            char tmpl[] = "/tmp/tensorctl-verify-XXXXXX";
            int fd = -1;
            if (json != NULL) {
                fd = mkstemp(tmpl);
                if (fd < 0) {
                    fprintf(stderr, "tensorctl verify: cannot make a temporary file: %s\n",
                            strerror(errno));
                    rc = 1;
                    break;
                }
                args[na++] = "--json";
                args[na++] = tmpl;
            }
            int r = td__conformance_main(na, args, &o);
            if (fd >= 0) {
                FILE *t = fdopen(fd, "r");
                char buf[4096];
                size_t k;
                while (t != NULL && (k = fread(buf, 1, sizeof buf, t)) > 0) fwrite(buf, 1, k, json);
                if (t != NULL) fclose(t);
                else close(fd);
                unlink(tmpl);
            }
            if (r != 0) {
                printf("verify: device %s: %s\n", name_p[d],
                       r == 1 ? "MISMATCH (the FAIL lines above name the ops)"
                              : "could not run (the server failed or the session was lost)");
                rc = 1;
            } else {
                printf("verify: device %s: every op case%s passed%s\n", name_p[d],
                       strncmp(name_p[d], "vulkan", 6) == 0 ? " it runs" : "",
                       strncmp(name_p[d], "vulkan", 6) == 0
                           ? " (the cases it refuses with TD_EUNSUPPORTED are listed above, "
                             "and counted as \"refused\" in the JSON)"
                           : "");
            }
        }
    }
    if (model != NULL) {
        int r = verify_model(uri_p, name_p, ndev, &o, model, n_in, in_names, in_files, rtol,
                             atol, json);
        if (r > rc) rc = r;
    }
    if (json != NULL && json != stdout) fclose(json);
    printf("verify %s: %s\n", addr, rc == 0 ? "PASSED" : rc == 2 ? "not run (usage)" : "FAILED");
    return rc;
}

/* tensorctl_run.c — `tensorctl run MODEL.onnx`: an ONNX model on any device, inputs and
 * outputs as numpy .npy files (tools/npy.c). Public API only (td_onnx_load, td_onnx_run).
 */
#include "tensord.h"
#include "tools/npy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_INPUTS 64

static const char usage_run[] =
    "usage: tensorctl run [-h] MODEL.onnx [--device URI] [--input NAME=FILE.npy ...]\n"
    "                     [--output-dir DIR]\n"
    "\n"
    "Load an ONNX model onto a device, run it once on the given inputs and print each\n"
    "output's name, dtype and shape, and the wall time of the run.\n"
    "\n"
    "options:\n"
    "  --device URI          local:cpu (default), tensord://HOST:PORT/DEVICE, unix:PATH/DEVICE\n"
    "  --input NAME=FILE     bind the model input NAME to a .npy file (every input needs one;\n"
    "                        format 1.0/2.0/3.0, little-endian, C order)\n"
    "  --output-dir DIR      write each output to DIR/NAME.npy (format 1.0; characters other\n"
    "                        than letters, digits, '.', '-' and '_' in NAME become '_')\n"
    "  --token TOKEN         bearer token (default: $TENSORD_TOKEN)\n"
    "  --ca FILE             CA certificates (PEM) for tensords:// servers\n"
    "  -h, --help            show this help\n"
    "Exit status: 0 ok, 1 the model, an input or the device failed, 2 usage error.\n";

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void print_shape(const int64_t *dims, int rank)
{
    printf("[");
    for (int i = 0; i < rank; i++) printf("%s%lld", i ? ", " : "", (long long)dims[i]);
    printf("]");
}

int td__tensorctl_run(int argc, char **argv)
{
    const char *model = NULL, *device = "local:cpu", *outdir = NULL;
    const char *in_names[MAX_INPUTS], *in_files[MAX_INPUTS];
    int n_in = 0;
    td_options opts = {0};
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(usage_run, stdout);
            return 0;
        }
        bool takes = strcmp(a, "--device") == 0 || strcmp(a, "--input") == 0 ||
                     strcmp(a, "--output-dir") == 0 || strcmp(a, "--token") == 0 ||
                     strcmp(a, "--ca") == 0;
        if (takes && i + 1 >= argc) {
            fprintf(stderr, "tensorctl run: option %s needs a value\n%s", a, usage_run);
            return 2;
        }
        if (strcmp(a, "--device") == 0) device = argv[++i];
        else if (strcmp(a, "--output-dir") == 0) outdir = argv[++i];
        else if (strcmp(a, "--token") == 0) opts.token = argv[++i];
        else if (strcmp(a, "--ca") == 0) opts.tls_ca_file = argv[++i];
        else if (strcmp(a, "--input") == 0) {
            char *v = argv[++i];
            char *eq = strchr(v, '=');
            if (eq == NULL || eq == v || eq[1] == '\0') {
                fprintf(stderr, "tensorctl run: --input wants NAME=FILE.npy, got '%s'\n", v);
                return 2;
            }
            if (n_in >= MAX_INPUTS) {
                fprintf(stderr, "tensorctl run: at most %d inputs\n", MAX_INPUTS);
                return 2;
            }
            *eq = '\0';
            in_names[n_in] = v;
            in_files[n_in++] = eq + 1;
        } else if (a[0] == '-') {
            fprintf(stderr, "tensorctl run: unknown option '%s'\n%s", a, usage_run);
            return 2;
        } else if (model == NULL) {
            model = a;
        } else {
            fprintf(stderr, "tensorctl run: unexpected argument '%s'\n%s", a, usage_run);
            return 2;
        }
    }
    if (model == NULL) {
        fprintf(stderr, "tensorctl run: missing MODEL.onnx\n%s", usage_run);
        return 2;
    }
    td_context *ctx;
    if (td_connect(device, &opts, &ctx) != TD_OK) {
        fprintf(stderr, "tensorctl run: cannot open %s: %s\n", device, td_connect_error());
        return 1;
    }
    int rc = 1;
    td_onnx_model *m = NULL;
    td_tensor *ins[MAX_INPUTS] = {0}, *outs[MAX_INPUTS] = {0};
    const char *bind_names[MAX_INPUTS];
    double t0 = now_s();
    if (td_onnx_load(ctx, model, &m) != TD_OK) {
        fprintf(stderr, "tensorctl run: %s: %s\n", model, td_last_error(ctx));
        goto done;
    }
    double t_load = now_s() - t0;
    int n_model_in = td_onnx_n_inputs(m), n_out = td_onnx_n_outputs(m);
    if (n_out > MAX_INPUTS) {
        fprintf(stderr, "tensorctl run: the model has %d outputs, at most %d are supported\n",
                n_out, MAX_INPUTS);
        goto done;
    }
    for (int i = 0; i < n_model_in; i++) {
        td_onnx_value v;
        td_onnx_input(m, i, &v);
        int k = -1;
        for (int j = 0; j < n_in; j++)
            if (strcmp(in_names[j], v.name) == 0) k = j;
        if (k < 0) {
            fprintf(stderr, "tensorctl run: no --input for model input '%s' (%s", v.name,
                    td_dtype_name(v.dtype));
            if (v.rank >= 0) {
                fprintf(stderr, "[");
                for (int d = 0; d < v.rank; d++) {
                    if (v.dims[d] < 0) fprintf(stderr, "%s?", d ? ", " : "");
                    else fprintf(stderr, "%s%lld", d ? ", " : "", (long long)v.dims[d]);
                }
                fprintf(stderr, "]");
            }
            fprintf(stderr, ")\n");
            goto done;
        }
    }
    for (int j = 0; j < n_in; j++) {
        bool known = false;
        for (int i = 0; i < n_model_in && !known; i++) {
            td_onnx_value v;
            td_onnx_input(m, i, &v);
            known = strcmp(in_names[j], v.name) == 0;
        }
        if (!known) {
            fprintf(stderr, "tensorctl run: the model has no input named '%s'\n", in_names[j]);
            goto done;
        }
        td_npy a;
        char err[512];
        if (td_npy_read(in_files[j], &a, err, sizeof err) != 0) {
            fprintf(stderr, "tensorctl run: input '%s': %s\n", in_names[j], err);
            goto done;
        }
        ins[j] = td_from_host(ctx, a.dtype, a.rank, a.dims, a.data);
        free(a.data);
        if (ins[j] == NULL) {
            fprintf(stderr, "tensorctl run: input '%s': %s\n", in_names[j], td_last_error(ctx));
            goto done;
        }
        bind_names[j] = in_names[j];
    }
    double t1 = now_s();
    if (td_onnx_run(m, n_in, bind_names, ins, n_out, outs) != TD_OK) {
        fprintf(stderr, "tensorctl run: %s\n", td_last_error(ctx));
        goto done;
    }
    void *host[MAX_INPUTS] = {0};
    bool ok = true;
    for (int i = 0; i < n_out && ok; i++) {
        host[i] = malloc(td_nbytes(outs[i]) ? td_nbytes(outs[i]) : 1);
        td_status st = host[i] ? td_read(outs[i], host[i], td_nbytes(outs[i])) : TD_ENOMEM;
        if (st != TD_OK) {
            td_onnx_value v;
            td_onnx_output(m, i, &v);
            fprintf(stderr, "tensorctl run: output '%s': %s\n", v.name,
                    host[i] ? td_last_error(ctx) : "out of memory");
            ok = false;
        }
    }
    double t_run = now_s() - t1;
    for (int i = 0; ok && i < n_out; i++) {
        td_onnx_value v;
        td_onnx_output(m, i, &v);
        printf("output %s: %s ", v.name, td_dtype_name(td_tensor_dtype(outs[i])));
        print_shape(td_dims(outs[i]), td_rank(outs[i]));
        if (outdir != NULL) {
            char fname[4096], safe[256];
            size_t k = 0;
            for (const char *p = v.name; *p && k < sizeof safe - 1; p++)
                safe[k++] = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                                    (*p >= '0' && *p <= '9') || *p == '.' || *p == '-' ||
                                    *p == '_'
                                ? *p
                                : '_';
            safe[k] = '\0';
            if (strcmp(safe, ".") == 0 || strcmp(safe, "..") == 0) safe[0] = '_';
            snprintf(fname, sizeof fname, "%.3000s/%s.npy", outdir, safe);
            char err[512];
            if (td_npy_write(fname, td_tensor_dtype(outs[i]), td_rank(outs[i]), td_dims(outs[i]),
                             host[i], td_nbytes(outs[i]), err, sizeof err) != 0) {
                fprintf(stderr, "\ntensorctl run: output '%s': %s\n", v.name, err);
                ok = false;
                break;
            }
            printf(" -> %s", fname);
        }
        printf("\n");
    }
    for (int i = 0; i < n_out; i++) free(host[i]);
    if (ok) {
        printf("device %s: load %.3f ms, run %.3f ms (td_onnx_run to the last output read)\n",
               device, t_load * 1e3, t_run * 1e3);
        rc = 0;
    }
done:
    for (int i = 0; i < MAX_INPUTS; i++) {
        td_release(ins[i]);
        td_release(outs[i]);
    }
    td_onnx_destroy(m);
    td_close(ctx);
    return rc;
}

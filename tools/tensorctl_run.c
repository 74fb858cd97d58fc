/* tensorctl_run.c — `tensorctl run MODEL.onnx`: an ONNX model on any device, inputs and
 * outputs as numpy .npy files (tools/npy.c). Public API only (td_onnx_load, td_onnx_run).
 */
#include "tensord.h"
#include "tools/argv_opt.h"
#include "tools/model_run.h"
#include "tools/npy.h"

#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>

#define MAX_INPUTS TD_MODEL_MAX_IO

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
    "  --output-dir DIR      write each output to DIR/NAME.npy (format 1.0; DIR is created if\n"
    "                        missing, its parent must exist; characters other\n"
    "                        than letters, digits, '.', '-' and '_' in NAME become '_')\n"
    "  --token TOKEN         bearer token (default: $TENSORD_TOKEN)\n"
    "  --ca FILE             CA certificates (PEM) for tensords:// servers\n"
    "  -h, --help            show this help\n"
    "Exit status: 0 ok, 1 the model, an input or the device failed, 2 usage error.\n";

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
        argv_opt opt;
        argv_opt_split(argv[i], &opt);
        const char *a = opt.name;
        if (argv_opt_is_help(a)) {
            if (opt.value != NULL) {
                fprintf(stderr, "tensorctl run: option %s takes no value\n%s", a, usage_run);
                return 2;
            }
            fputs(usage_run, stdout);
            return 0;
        }
        bool takes = strcmp(a, "--device") == 0 || strcmp(a, "--input") == 0 ||
                     strcmp(a, "--output-dir") == 0 || strcmp(a, "--token") == 0 ||
                     strcmp(a, "--ca") == 0;
        char *v = takes ? argv_opt_value(&opt, argc, argv, &i) : NULL;
        if (takes && v == NULL) {
            fprintf(stderr, "tensorctl run: option %s needs a value\n%s", a, usage_run);
            return 2;
        }
        if (strcmp(a, "--device") == 0) device = v;
        else if (strcmp(a, "--output-dir") == 0) outdir = v;
        else if (strcmp(a, "--token") == 0) opts.token = v;
        else if (strcmp(a, "--ca") == 0) opts.tls_ca_file = v;
        else if (strcmp(a, "--input") == 0) {
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
    td__model_result res;
    char err[1024];
    if (td__model_run_files(device, &opts, model, n_in, in_names, in_files, &res, err,
                            sizeof err) != 0) {
        fprintf(stderr, "tensorctl run: %s\n", err);
        return 1;
    }
    int rc = 0;
    if (outdir != NULL && mkdir(outdir, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "tensorctl run: --output-dir %s: cannot create: %s\n", outdir,
                strerror(errno));
        rc = 1;
    }
    for (int i = 0; i < res.n_out && rc == 0; i++) {
        const td__model_output *o = &res.out[i];
        printf("output %s: %s ", o->name, td_dtype_name(o->dtype));
        print_shape(o->dims, o->rank);
        if (outdir != NULL) {
            char fname[4096], safe[256];
            size_t k = 0;
            for (const char *p = o->name; *p && k < sizeof safe - 1; p++)
                safe[k++] = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                                    (*p >= '0' && *p <= '9') || *p == '.' || *p == '-' ||
                                    *p == '_'
                                ? *p
                                : '_';
            safe[k] = '\0';
            if (strcmp(safe, ".") == 0 || strcmp(safe, "..") == 0) safe[0] = '_';
            snprintf(fname, sizeof fname, "%.3000s/%s.npy", outdir, safe);
            if (td_npy_write(fname, o->dtype, o->rank, o->dims, o->data, o->nbytes, err,
                             sizeof err) != 0) {
                fprintf(stderr, "\ntensorctl run: output '%s': %s\n", o->name, err);
                rc = 1;
                break;
            }
            printf(" -> %s", fname);
        }
        printf("\n");
    }
    if (rc == 0)
        printf("device %s: load %.3f ms, run %.3f ms (td_onnx_run to the last output read)\n",
               device, res.load_s * 1e3, res.run_s * 1e3);
    td__model_result_free(&res);
    return rc;
}

/* model_run.c — see model_run.h. */
#include "tools/model_run.h"
#include "tools/npy.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* "(f32[1, ?, 28])" of a model value, for the missing-input message. */
static void value_str(const td_onnx_value *v, char *buf, size_t len)
{
    size_t k = (size_t)snprintf(buf, len, "%s", td_dtype_name(v->dtype));
    if (v->rank >= 0 && k < len) {
        k += (size_t)snprintf(buf + k, len - k, "[");
        for (int d = 0; d < v->rank && k < len; d++)
            k += v->dims[d] < 0 ? (size_t)snprintf(buf + k, len - k, "%s?", d ? ", " : "")
                                : (size_t)snprintf(buf + k, len - k, "%s%lld", d ? ", " : "",
                                                   (long long)v->dims[d]);
        if (k < len) snprintf(buf + k, len - k, "]");
    }
}

void td__model_result_free(td__model_result *res)
{
    for (int i = 0; i < res->n_out && i < TD_MODEL_MAX_IO; i++) {
        free(res->out[i].data);
        res->out[i].data = NULL;
    }
    res->n_out = 0;
}

int td__model_run_files(const char *device_uri, const td_options *opts, const char *model,
                        int n_in, const char *const *names, const char *const *files,
                        td__model_result *res, char *err, size_t errlen)
{
    memset(res, 0, sizeof *res);
    if (n_in < 0 || n_in > TD_MODEL_MAX_IO) {
        snprintf(err, errlen, "at most %d inputs", TD_MODEL_MAX_IO);
        return -1;
    }
    double t0 = now_s();
    td_context *ctx;
    if (td_connect(device_uri, opts, &ctx) != TD_OK) {
        snprintf(err, errlen, "cannot open %s: %s", device_uri, td_connect_error());
        return -1;
    }
    int rc = -1;
    td_onnx_model *m = NULL;
    td_tensor *ins[TD_MODEL_MAX_IO] = {0}, *outs[TD_MODEL_MAX_IO] = {0};
    if (td_onnx_load(ctx, model, &m) != TD_OK) {
        snprintf(err, errlen, "%s: %s", model, td_last_error(ctx));
        goto done;
    }
    res->load_s = now_s() - t0;
    int n_model_in = td_onnx_n_inputs(m), n_out = td_onnx_n_outputs(m);
    if (n_out > TD_MODEL_MAX_IO) {
        snprintf(err, errlen, "the model has %d outputs, at most %d are supported", n_out,
                 TD_MODEL_MAX_IO);
        goto done;
    }
    for (int i = 0; i < n_model_in; i++) {
        td_onnx_value v;
        td_onnx_input(m, i, &v);
        bool bound = false;
        for (int j = 0; j < n_in && !bound; j++) bound = strcmp(names[j], v.name) == 0;
        if (!bound) {
            char vs[160];
            value_str(&v, vs, sizeof vs);
            snprintf(err, errlen, "no --input for model input '%s' (%s)", v.name, vs);
            goto done;
        }
    }
    for (int j = 0; j < n_in; j++) {
        bool known = false;
        for (int i = 0; i < n_model_in && !known; i++) {
            td_onnx_value v;
            td_onnx_input(m, i, &v);
            known = strcmp(names[j], v.name) == 0;
        }
        if (!known) {
            snprintf(err, errlen, "the model has no input named '%s'", names[j]);
            goto done;
        }
        td_npy a;
        char nerr[512];
        if (td_npy_read(files[j], &a, nerr, sizeof nerr) != 0) {
            snprintf(err, errlen, "input '%s': %s", names[j], nerr);
            goto done;
        }
        ins[j] = td_from_host(ctx, a.dtype, a.rank, a.dims, a.data);
        free(a.data);
        if (ins[j] == NULL) {
            snprintf(err, errlen, "input '%s': %s", names[j], td_last_error(ctx));
            goto done;
        }
    }
    double t1 = now_s();
    if (td_onnx_run(m, n_in, names, ins, n_out, outs) != TD_OK) {
        snprintf(err, errlen, "%s", td_last_error(ctx));
        goto done;
    }
    for (int i = 0; i < n_out; i++) {
        td__model_output *o = &res->out[i];
        td_onnx_value v;
        td_onnx_output(m, i, &v);
        snprintf(o->name, sizeof o->name, "%s", v.name);
        o->dtype = td_tensor_dtype(outs[i]);
        o->rank = td_rank(outs[i]);
        memcpy(o->dims, td_dims(outs[i]), (size_t)o->rank * sizeof o->dims[0]);
        o->nbytes = td_nbytes(outs[i]);
        o->data = malloc(o->nbytes ? o->nbytes : 1);
        res->n_out = i + 1;
        if (o->data == NULL) {
            snprintf(err, errlen, "output '%s': out of memory for %zu bytes", v.name, o->nbytes);
            goto done;
        }
        if (td_read(outs[i], o->data, o->nbytes) != TD_OK) {
            snprintf(err, errlen, "output '%s': %s", v.name, td_last_error(ctx));
            goto done;
        }
    }
    res->run_s = now_s() - t1;
    rc = 0;
done:
    if (rc != 0) td__model_result_free(res);
    for (int i = 0; i < TD_MODEL_MAX_IO; i++) {
        td_release(ins[i]);
        td_release(outs[i]);
    }
    td_onnx_destroy(m);
    td_close(ctx);
    return rc;
}

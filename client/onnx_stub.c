/* onnx_stub.c — td_onnx_* when the library was built without onnx.proto (meson -Donnx=auto
 * found no libonnx-dev): every call says so with TD_EUNSUPPORTED, so programs link either
 * way and fail with a reason.
 */
#include "client/capture.h"
#include <string.h>

static td_status nope(td_context *ctx, const char *fn)
{
    char msg[200];
    strcpy(msg, fn);
    strcat(msg, ": this libtensord was built without ONNX support (no onnx.proto at build "
                "time; install libonnx-dev and rebuild)");
    td__ctx_set_error(ctx, TD_EUNSUPPORTED, msg);
    return TD_EUNSUPPORTED;
}

td_status td_onnx_load(td_context *ctx, const char *path, td_onnx_model **out)
{
    (void)path, (void)out;
    return nope(ctx, "td_onnx_load");
}
td_status td_onnx_load_memory(td_context *ctx, const void *data, size_t nbytes,
                              td_onnx_model **out)
{
    (void)data, (void)nbytes, (void)out;
    return nope(ctx, "td_onnx_load_memory");
}
void td_onnx_destroy(td_onnx_model *m) { (void)m; }
int td_onnx_n_inputs(const td_onnx_model *m) { (void)m; return 0; }
int td_onnx_n_outputs(const td_onnx_model *m) { (void)m; return 0; }
td_status td_onnx_input(const td_onnx_model *m, int i, td_onnx_value *out)
{
    (void)m, (void)i, (void)out;
    return TD_EINVAL;
}
td_status td_onnx_output(const td_onnx_model *m, int i, td_onnx_value *out)
{
    (void)m, (void)i, (void)out;
    return TD_EINVAL;
}
td_status td_onnx_run(td_onnx_model *m, int n_in, const char *const *in_names,
                      td_tensor *const *inputs, int n_out, td_tensor **outputs)
{
    (void)m, (void)n_in, (void)in_names, (void)inputs, (void)n_out, (void)outputs;
    return nope(NULL, "td_onnx_run");
}
td_status td_onnx_tensor_decode(const void *buf, size_t nbytes, td_onnx_tensor *out)
{
    (void)buf, (void)nbytes, (void)out;
    return nope(NULL, "td_onnx_tensor_decode");
}
void td_onnx_tensor_fini(td_onnx_tensor *t) { (void)t; }

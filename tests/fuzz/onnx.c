/* onnx.c — libFuzzer target for the ONNX loader: td_onnx_load_memory on arbitrary bytes
 * (protobuf decoding, validation, op mapping, graph capture on a local CPU context), then,
 * for a model that loads and whose inputs have fixed shapes of at most 4096 elements, one
 * run on zero inputs with every output read back; and td_onnx_tensor_decode on the same
 * bytes. Seeds: tests/fuzz/corpus/onnx (written by tests/fuzz/gen_onnx_seeds.c). */
#include "tensord.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static td_context *ctx;

static void run_once(td_onnx_model *m)
{
    int n_in = td_onnx_n_inputs(m), n_out = td_onnx_n_outputs(m);
    if (n_in > 16 || n_out > 16) return;
    td_tensor *in[16] = {0}, *out[16] = {0};
    for (int i = 0; i < n_in; i++) {
        td_onnx_value v;
        td_onnx_input(m, i, &v);
        int64_t n = 1;
        if (v.rank < 0) goto done;
        for (int d = 0; d < v.rank; d++) {
            if (v.dims[d] < 0 || v.dims[d] > 4096) goto done;
            n *= v.dims[d];
            if (n > 4096) goto done;
        }
        in[i] = td_full(ctx, v.dtype, v.rank, v.dims, 0);
        if (in[i] == NULL) goto done;
    }
    if (td_onnx_run(m, n_in, NULL, in, n_out, out) == TD_OK) {
        for (int i = 0; i < n_out; i++) {
            size_t nb = td_nbytes(out[i]);
            if (nb > (1u << 20)) continue;
            void *buf = malloc(nb ? nb : 1);
            td_read(out[i], buf, nb);
            free(buf);
        }
    }
done:
    for (int i = 0; i < 16; i++) {
        td_release(in[i]);
        td_release(out[i]);
    }
    td_fence(ctx);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (ctx == NULL && td_connect("local:cpu", NULL, &ctx) != TD_OK) abort();
    td_onnx_model *m = NULL;
    if (td_onnx_load_memory(ctx, data, size, &m) == TD_OK) {
        run_once(m);
        td_onnx_destroy(m);
    }
    td_onnx_tensor t;
    if (td_onnx_tensor_decode(data, size, &t) == TD_OK) td_onnx_tensor_fini(&t);
    return 0;
}

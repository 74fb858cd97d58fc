/* model_run.h — one run of an ONNX model on a device, inputs from .npy files and outputs
 * read back to host memory: what `tensorctl run` prints and writes, and what `tensorctl
 * verify --model` compares between devices. Public API only (td_connect, td_onnx_load,
 * td_onnx_run, td_read).
 * Thread-safety: no shared state; any thread, one td__model_result per call.
 */
#ifndef TD_TOOLS_MODEL_RUN_H
#define TD_TOOLS_MODEL_RUN_H

#include "tensord.h"
#include <stddef.h>
#include <stdint.h>

#define TD_MODEL_MAX_IO 64 /* inputs bound, outputs read */

typedef struct td__model_output {
    char name[256]; /* the model's output name (longer names are cut) */
    td_dtype dtype;
    int rank;
    int64_t dims[TD_MAX_RANK];
    void *data; /* malloc'd, nbytes (owned by the result) */
    size_t nbytes;
} td__model_output;

typedef struct td__model_result {
    int n_out;
    td__model_output out[TD_MODEL_MAX_IO];
    double load_s; /* td_connect + td_onnx_load, seconds */
    double run_s;  /* td_onnx_run to the last output read, seconds */
} td__model_result;

/* Open `device_uri` with `opts` (may be NULL), load `model`, bind input names[i] to the .npy
 * file files[i] (every model input needs one; an unknown name is an error), run once and
 * read every output. Returns 0, or -1 with a message in err naming the file, input, output
 * or device. On success free the result with td__model_result_free; on failure nothing is
 * left to free. n_in at most TD_MODEL_MAX_IO. */
int td__model_run_files(const char *device_uri, const td_options *opts, const char *model,
                        int n_in, const char *const *names, const char *const *files,
                        td__model_result *res, char *err, size_t errlen);

/* Free the outputs' host buffers (res may be zeroed or already freed). */
void td__model_result_free(td__model_result *res);
#endif

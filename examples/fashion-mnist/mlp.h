/* mlp.h — a two-layer perceptron trained with tensord ops.
 *
 *   logits = relu(x @ w1 + b1) @ w2 + b2        x [B, in], labels [B, 1] TD_I64
 *   loss   = mean over the batch of -log_softmax(logits)[label]
 *
 * The forward pass, its gradients (td_backward) and the SGD-with-momentum update are
 * all recorded as lazy library ops on one context; nothing but the loss (and predictions)
 * is read back. Parameters live on the executor and never cross the wire during training.
 *
 * Thread-safety: one thread per model (the context's rule).
 */
#ifndef FM_MLP_H
#define FM_MLP_H

#include "tensord.h"

#define FM_MLP_PARAMS 4

/* Parameter names in safetensors files, in the order of fm_mlp.param. */
extern const char *const fm_mlp_param_names[FM_MLP_PARAMS];

typedef struct fm_mlp {
    td_context *ctx; /* borrowed */
    int64_t n_in, n_hidden, n_out;
    /* w1 [in, hidden], b1 [hidden], w2 [hidden, out], b2 [out]; all TD_F32, owned */
    td_tensor *param[FM_MLP_PARAMS];
    td_tensor *velocity[FM_MLP_PARAMS]; /* momentum buffers, shapes as param */
    td_tensor *classes;                 /* arange(out), TD_I64 [out]: builds one-hot rows */
    td_tensor *zero;                    /* rank-0 TD_F32 0 */
    /* --graph: one captured training step per batch size (the last batch may be short) */
    td_graph *graph[2];
    int64_t graph_batch[2];
} fm_mlp;

/* Create the parameters on `ctx`: weights drawn by td_rand_normal with He (Kaiming)
 * initialisation, std = sqrt(2 / fan_in) (K. He et al., "Delving Deep into Rectifiers",
 * ICCV 2015, section 2.2), each from its own seed derived from `seed`; biases and momentum
 * buffers zero. Returns TD_OK, or a status with td_last_error(ctx) set; on failure the
 * model holds nothing. */
td_status fm_mlp_init(fm_mlp *m, td_context *ctx, int64_t n_in, int64_t n_hidden, int64_t n_out,
                      uint64_t seed);

/* Release every tensor of the model. NULL is a no-op. */
void fm_mlp_fini(fm_mlp *m);

/* One step of SGD with momentum (heavy ball, as in PyTorch's SGD):
 *   v <- momentum * v + grad;   p <- p - lr * v
 * on batch x [B, in] TD_F32 with labels [B, 1] TD_I64 (both borrowed). On success *loss
 * owns a rank-0 TD_F32 tensor holding the batch's mean cross-entropy (computed before the
 * update). Every intermediate handle is released before returning.
 * Returns TD_OK, or TD_EINVAL when an op failed to record (td_last_error names it); then
 * the parameters are unchanged. Execution errors surface at the next read or fence. */
td_status fm_mlp_train_step(fm_mlp *m, td_tensor *x, td_tensor *labels, double lr, double momentum,
                            td_tensor **loss);

/* The same step as fm_mlp_train_step, bit for bit, but captured once per batch size as a
 * graph (inputs x, labels, w1 b1 w2 b2, their momentum buffers and lr; outputs the new
 * parameters, the new momentum buffers and the loss) and replayed: remotely each step
 * then sends only the graph id and the tensor bindings. Same contract as
 * fm_mlp_train_step. */
td_status fm_mlp_train_step_graph(fm_mlp *m, td_tensor *x, td_tensor *labels, double lr,
                                  double momentum, td_tensor **loss);

/* The batch's mean cross-entropy (*loss) and the gradients of w1 b1 w2 b2 (grad[0..4), new
 * handles the caller releases) at the current parameters, by td_backward (hand false) or
 * by the hand-written backward pass (hand true: the formulas in mlp.c; the test oracle).
 * Returns TD_OK or TD_EINVAL (td_last_error names the op); nothing is returned then. */
td_status fm_mlp_gradients(fm_mlp *m, td_tensor *x, td_tensor *labels, bool hand,
                           td_tensor **grad, td_tensor **loss);

/* Predicted class of each row of x [B, in]: a new TD_I64 [B] tensor owned by the caller,
 * or NULL when an op failed to record (td_last_error). */
td_tensor *fm_mlp_predict(fm_mlp *m, td_tensor *x);

/* Read the parameters back and write them to `path` as safetensors (names w1 b1 w2 b2),
 * with the given metadata pairs. Returns 0, or -1 with a message in err. */
int fm_mlp_save(fm_mlp *m, const char *path, size_t n_meta, const char *const *keys,
                const char *const *values, char *err, size_t errlen);

/* Replace the parameters with those of `file` (read from `path`, used in messages) and
 * zero the momentum buffers. Each of w1 b1 w2 b2 must be present as F32 with the model's
 * shape; extra tensors are ignored. Returns 0, or -1 with a message such as
 * "PATH: w1: shape [784, 128] in file, model needs [784, 256]"; then nothing changed. */
int fm_mlp_load(fm_mlp *m, const td_safetensors *file, const char *path, char *err,
                size_t errlen);

#endif

/* cnn.h — a small convolutional network for Fashion-MNIST, trained with libtensord's
 * autodiff (td_backward) and its Adam optimizer (td_optim_*).
 *
 *   x [B, 784] -> [B, 1, 28, 28]
 *   -> conv 3x3 (C1 channels, padding 1, no bias) -> batch norm -> relu -> max pool 2
 *   -> conv 3x3 (C2 channels, padding 1, no bias) -> batch norm -> relu -> max pool 2
 *   -> [B, C2 * 7 * 7] -> dropout -> linear 10 -> log_softmax
 *   loss = mean over the batch of -log_softmax(logits)[label]
 *
 * Batch norm normalises with the batch's statistics while training (the gradient flows
 * through them) and keeps running estimates (momentum 0.1, unbiased variance, as PyTorch's
 * BatchNorm2d) for evaluation. Dropout draws its mask from a seed derived from the run's
 * seed and the step number, so a run is reproducible bit for bit on one backend, locally
 * or remotely. Thread-safety: one thread per model (the context's rule).
 */
#ifndef FM_CNN_H
#define FM_CNN_H

#include "tensord.h"

#define FM_CNN_PARAMS 8
#define FM_CNN_RUNNING 4

/* Parameter names (safetensors files), in the order of fm_cnn.param; then the running
 * statistics. */
extern const char *const fm_cnn_param_names[FM_CNN_PARAMS];
extern const char *const fm_cnn_running_names[FM_CNN_RUNNING];

typedef struct fm_cnn {
    td_context *ctx; /* borrowed */
    int64_t c1, c2;
    double dropout;
    uint64_t seed;
    int64_t steps;                       /* training steps taken (dropout seeds) */
    td_tensor *param[FM_CNN_PARAMS];     /* conv1_w bn1_w bn1_b conv2_w bn2_w bn2_b fc_w fc_b */
    td_tensor *running[FM_CNN_RUNNING];  /* bn1_mean bn1_var bn2_mean bn2_var */
    td_optim *opt;                       /* Adam over param */
} fm_cnn;

/* Create the model on ctx: conv and linear weights by td_rand_normal with He initialisation
 * (std sqrt(2 / fan_in); the last layer sqrt(1 / fan_in)), batch-norm weights 1, biases 0,
 * running means 0 and variances 1; Adam with learning rate lr and weight decay 0. Returns
 * TD_OK or a status with td_last_error(ctx) set (the model then holds nothing). */
td_status fm_cnn_init(fm_cnn *m, td_context *ctx, int64_t c1, int64_t c2, double dropout,
                      double lr, uint64_t seed);
void fm_cnn_fini(fm_cnn *m); /* NULL is a no-op */

/* One training step at learning rate lr on x [B, 784] TD_F32 and labels [B, 1] TD_I64
 * (borrowed): forward, td_backward, Adam, running statistics. *loss owns the batch's mean
 * loss (rank 0, computed before the update). Lazy: nothing is read. TD_EINVAL when an op
 * failed to record (td_last_error). */
td_status fm_cnn_train_step(fm_cnn *m, td_tensor *x, td_tensor *labels, double lr,
                            td_tensor **loss);

/* Predicted class of each row of x [B, 784] (evaluation mode: running statistics, no
 * dropout): a new TD_I64 [B] tensor, or NULL (td_last_error). */
td_tensor *fm_cnn_predict(fm_cnn *m, td_tensor *x);

/* Save the parameters and running statistics as safetensors with the metadata pairs; load
 * them back (each must be F32 of the model's shape). 0, or -1 with a message in err. */
int fm_cnn_save(fm_cnn *m, const char *path, size_t n_meta, const char *const *keys,
                const char *const *values, char *err, size_t errlen);
int fm_cnn_load(fm_cnn *m, const td_safetensors *file, char *err, size_t errlen);

#endif

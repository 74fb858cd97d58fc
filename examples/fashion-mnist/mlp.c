/* mlp.c — forward, backward and update of the example's MLP, as tensord ops (see mlp.h).
 *
 * Training takes its gradients from td_backward (libtensord's autodiff). The hand-written
 * backward pass below is kept as the test oracle (fm_mlp_gradients; tests/examples/
 * mlp_grads.c checks that both agree within rounding). Gradients, for a batch of B rows (p = softmax(logits), Y = one-hot labels):
 *   dlogits = (p - Y) / B                       [B, out]
 *   dw2 = relu_out^T @ dlogits,  db2 = sum_rows dlogits
 *   dh  = (dlogits @ w2^T) * [pre_activation > 0]
 *   dw1 = x^T @ dh,              db1 = sum_rows dh
 * p is exp(log_softmax) so the forward's work is reused; Y compares the labels [B, 1]
 * against arange(out) [out], which broadcasts to [B, out].
 *
 * Each step records ~60 ops. A small "scope" collects every intermediate handle so a step
 * releases all of them at its end; the executor frees their memory once the ops that use
 * them have run, which keeps memory flat however long training goes.
 */
#include "mlp.h"

#include "rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const fm_mlp_param_names[FM_MLP_PARAMS] = {"w1", "b1", "w2", "b2"};

#define SCOPE_MAX 64

typedef struct scope {
    td_tensor *t[SCOPE_MAX];
    int n;
} scope;

/* Remember `t` (NULL too) for release at the end of the step; returns t. */
static td_tensor *keep(scope *s, td_tensor *t)
{
    if (s->n < SCOPE_MAX)
        s->t[s->n++] = t;
    else
        abort(); /* our own invariant: a step records a fixed number of handles */
    return t;
}

static void scope_release(scope *s)
{
    for (int i = 0; i < s->n; i++)
        td_release(s->t[i]);
    s->n = 0;
}

static void param_dims(const fm_mlp *m, int i, int *rank, int64_t dims[2])
{
    switch (i) {
    case 0:
        *rank = 2;
        dims[0] = m->n_in;
        dims[1] = m->n_hidden;
        break;
    case 1:
        *rank = 1;
        dims[0] = m->n_hidden;
        break;
    case 2:
        *rank = 2;
        dims[0] = m->n_hidden;
        dims[1] = m->n_out;
        break;
    default:
        *rank = 1;
        dims[0] = m->n_out;
        break;
    }
}

td_status fm_mlp_init(fm_mlp *m, td_context *ctx, int64_t n_in, int64_t n_hidden, int64_t n_out,
                      uint64_t seed)
{
    memset(m, 0, sizeof *m);
    m->ctx = ctx;
    m->n_in = n_in;
    m->n_hidden = n_hidden;
    m->n_out = n_out;
    bool ok = true;
    for (int i = 0; i < FM_MLP_PARAMS; i++) {
        int rank;
        int64_t dims[2];
        param_dims(m, i, &rank, dims);
        if (i % 2 == 0) {
            double fan_in = (double)dims[0];
            /* Seed k of the run: SplitMix64's output for counter seed + k + 1. */
            uint64_t s = fm_rng_mix(seed + 0x9e3779b97f4a7c15ULL * (uint64_t)(i + 1));
            m->param[i] = td_rand_normal(ctx, TD_F32, rank, dims, s, 0.0, sqrt(2.0 / fan_in));
        } else {
            m->param[i] = td_full(ctx, TD_F32, rank, dims, 0.0);
        }
        m->velocity[i] = td_full(ctx, TD_F32, rank, dims, 0.0);
        ok = ok && m->param[i] != NULL && m->velocity[i] != NULL;
    }
    m->classes = td_arange(ctx, TD_I64, n_out, 0.0, 1.0);
    m->zero = td_full(ctx, TD_F32, 0, NULL, 0.0);
    if (!ok || m->classes == NULL || m->zero == NULL) {
        fm_mlp_fini(m);
        return TD_EINVAL;
    }
    return TD_OK;
}

void fm_mlp_fini(fm_mlp *m)
{
    if (m == NULL) return;
    for (int i = 0; i < FM_MLP_PARAMS; i++) {
        td_release(m->param[i]);
        td_release(m->velocity[i]);
    }
    td_release(m->classes);
    td_release(m->zero);
    td_graph_destroy(m->graph[0]);
    td_graph_destroy(m->graph[1]);
    memset(m, 0, sizeof *m);
}

/* The forward pass to the batch's mean cross-entropy; *pre_out and *hidden_out (may be
 * NULL) receive the pre-activation and the hidden layer for the hand-written backward. */
static td_tensor *forward_loss(td_tensor *x, td_tensor *labels, td_tensor *const *param,
                               scope *s, td_tensor **pre_out, td_tensor **hidden_out,
                               td_tensor **logp_out)
{
    td_tensor *pre = keep(s, td_add(keep(s, td_matmul(x, param[0])), param[1]));
    td_tensor *hidden = keep(s, td_relu(pre));
    td_tensor *logits = keep(s, td_add(keep(s, td_matmul(hidden, param[2])), param[3]));
    td_tensor *logp = keep(s, td_log_softmax(logits, 1));
    td_tensor *picked = keep(s, td_gather(logp, labels, 1));
    if (pre_out != NULL) *pre_out = pre;
    if (hidden_out != NULL) *hidden_out = hidden;
    if (logp_out != NULL) *logp_out = logp;
    return td_neg(keep(s, td_mean(picked, 0, NULL, false)));
}

/* The hand-written backward pass (the formulas at the top of this file): grad[i] new
 * handles, the test oracle of the autodiff gradients. */
static void hand_grads(fm_mlp *m, td_tensor *x, td_tensor *labels, td_tensor *const *param,
                       td_tensor *pre, td_tensor *hidden, td_tensor *logp, scope *s,
                       td_tensor **grad)
{
    const int rows[1] = {0};
    double batch = (double)td_dims(x)[0];
    td_tensor *onehot = keep(s, td_cast(keep(s, td_eq(labels, m->classes)), TD_F32));
    td_tensor *diff = keep(s, td_sub(keep(s, td_exp(logp)), onehot));
    td_tensor *dlogits = keep(s, td_mul_scalar(diff, 1.0 / batch));
    grad[2] = td_matmul(keep(s, td_transpose(hidden)), dlogits);
    grad[3] = td_sum(dlogits, 1, rows, false);
    td_tensor *dhidden = keep(s, td_matmul(dlogits, keep(s, td_transpose(param[2]))));
    td_tensor *active = keep(s, td_gt(pre, m->zero));
    td_tensor *dpre = keep(s, td_where(active, dhidden, m->zero));
    grad[0] = td_matmul(keep(s, td_transpose(x)), dpre);
    grad[1] = td_sum(dpre, 1, rows, false);
}

/* The loss and the gradients of `param` by td_backward (grad[i]: new handles, copies that
 * outlive the tape); the parameters are marked for the pass and unmarked after. */
static td_tensor *autodiff_grads(td_tensor *x, td_tensor *labels, td_tensor *const *param,
                                 scope *s, td_tensor **grad)
{
    td_context *ctx = td_tensor_context(x);
    for (int i = 0; i < FM_MLP_PARAMS; i++) td_requires_grad(param[i], true);
    td_tensor *loss = forward_loss(x, labels, param, s, NULL, NULL, NULL);
    bool ok = loss != NULL && td_backward(loss) == TD_OK;
    td_no_grad_begin(ctx);
    for (int i = 0; i < FM_MLP_PARAMS; i++) {
        td_tensor *g = ok ? td_grad(param[i]) : NULL;
        grad[i] = g != NULL ? td_detach(g) : NULL;
        td_requires_grad(param[i], false);
    }
    td_no_grad_end(ctx);
    td_tape_clear(ctx);
    return loss;
}

td_status fm_mlp_gradients(fm_mlp *m, td_tensor *x, td_tensor *labels, bool hand,
                           td_tensor **grad, td_tensor **loss)
{
    scope s = {.n = 0};
    td_tensor *l;
    if (hand) {
        td_tensor *pre, *hidden, *logp;
        l = forward_loss(x, labels, m->param, &s, &pre, &hidden, &logp);
        hand_grads(m, x, labels, m->param, pre, hidden, logp, &s, grad);
    } else {
        l = autodiff_grads(x, labels, m->param, &s, grad);
    }
    scope_release(&s);
    bool ok = l != NULL;
    for (int i = 0; i < FM_MLP_PARAMS; i++) ok = ok && grad[i] != NULL;
    if (!ok) {
        td_release(l);
        for (int i = 0; i < FM_MLP_PARAMS; i++) td_release(grad[i]);
        return TD_EINVAL;
    }
    *loss = l;
    return TD_OK;
}

/* Record one step on parameters `param` and momentum buffers `velocity`, the gradients by
 * td_backward; the learning rate is `lr_t` (a rank-0 TD_F32 tensor) or, when NULL, the
 * constant `lr` (td_mul_scalar records the very same mul op on a rank-0 constant, so both
 * give the same bits). On TD_OK new_p, new_v and *loss own new handles. */
static td_status record_step(fm_mlp *m, td_tensor *x, td_tensor *labels,
                             td_tensor *const *param, td_tensor *const *velocity,
                             td_tensor *lr_t, double lr, double momentum,
                             td_tensor **new_p, td_tensor **new_v, td_tensor **loss)
{
    scope s = {.n = 0};
    td_tensor *grad[FM_MLP_PARAMS];
    td_tensor *batch_loss = autodiff_grads(x, labels, param, &s, grad);
    for (int i = 0; i < FM_MLP_PARAMS; i++) keep(&s, grad[i]);

    /* update: SGD with momentum (heavy ball) */
    bool ok = batch_loss != NULL;
    for (int i = 0; i < FM_MLP_PARAMS; i++) {
        new_v[i] = td_add(keep(&s, td_mul_scalar(velocity[i], momentum)), grad[i]);
        td_tensor *step = lr_t != NULL ? td_mul(new_v[i], lr_t) : td_mul_scalar(new_v[i], lr);
        new_p[i] = td_sub(param[i], keep(&s, step));
        ok = ok && new_v[i] != NULL && new_p[i] != NULL;
    }
    scope_release(&s);
    (void)m;
    if (!ok) {
        td_release(batch_loss);
        for (int i = 0; i < FM_MLP_PARAMS; i++) {
            td_release(new_v[i]);
            td_release(new_p[i]);
        }
        return TD_EINVAL;
    }
    *loss = batch_loss;
    return TD_OK;
}

td_status fm_mlp_train_step(fm_mlp *m, td_tensor *x, td_tensor *labels, double lr, double momentum,
                            td_tensor **loss)
{
    td_tensor *new_v[FM_MLP_PARAMS], *new_p[FM_MLP_PARAMS], *batch_loss;
    td_status st = record_step(m, x, labels, m->param, m->velocity, NULL, lr, momentum, new_p,
                               new_v, &batch_loss);
    if (st != TD_OK) return st;
    for (int i = 0; i < FM_MLP_PARAMS; i++) {
        td_release(m->velocity[i]);
        td_release(m->param[i]);
        m->velocity[i] = new_v[i];
        m->param[i] = new_p[i];
    }
    *loss = batch_loss;
    return TD_OK;
}

static const char *const k_graph_in[] = {"x", "labels", "w1", "b1", "w2", "b2",
                                         "v1", "v2", "v3", "v4", "lr"};
static const char *const k_graph_out[] = {"w1_new", "b1_new", "w2_new", "b2_new", "v1_new",
                                          "v2_new", "v3_new", "v4_new", "loss"};

/* Capture one training step for batches of b rows. */
static td_status capture_step(fm_mlp *m, int64_t b, double momentum, td_graph **out)
{
    td_context *ctx = m->ctx;
    td_status st = td_graph_begin(ctx);
    if (st != TD_OK) return st;
    td_tensor *in[11] = {NULL};
    in[0] = td_graph_input(ctx, "x", TD_F32, 2, (int64_t[]){b, m->n_in});
    in[1] = td_graph_input(ctx, "labels", TD_I64, 2, (int64_t[]){b, 1});
    for (int i = 0; i < FM_MLP_PARAMS; i++) {
        in[2 + i] = td_graph_input(ctx, k_graph_in[2 + i], TD_F32, td_rank(m->param[i]),
                                   td_dims(m->param[i]));
        in[6 + i] = td_graph_input(ctx, k_graph_in[6 + i], TD_F32, td_rank(m->param[i]),
                                   td_dims(m->param[i]));
    }
    in[10] = td_graph_input(ctx, "lr", TD_F32, 0, NULL);
    td_tensor *new_p[FM_MLP_PARAMS] = {NULL}, *new_v[FM_MLP_PARAMS] = {NULL}, *loss = NULL;
    bool ok = true;
    for (int i = 0; i < 11; i++) ok = ok && in[i] != NULL;
    st = ok ? record_step(m, in[0], in[1], in + 2, in + 6, in[10], 0.0, momentum, new_p, new_v,
                          &loss)
            : TD_EINVAL;
    for (int i = 0; st == TD_OK && i < FM_MLP_PARAMS; i++) {
        if (st == TD_OK) st = td_graph_output(ctx, k_graph_out[i], new_p[i]);
        if (st == TD_OK) st = td_graph_output(ctx, k_graph_out[4 + i], new_v[i]);
    }
    if (st == TD_OK) st = td_graph_output(ctx, "loss", loss);
    /* td_graph_end also ends a failed capture */
    td_graph *g = NULL;
    td_status end = td_graph_end(ctx, &g);
    if (st == TD_OK) st = end;
    else td_graph_destroy(g);
    for (int i = 0; i < 11; i++) td_release(in[i]);
    for (int i = 0; i < FM_MLP_PARAMS; i++) {
        td_release(new_p[i]);
        td_release(new_v[i]);
    }
    td_release(loss);
    if (st == TD_OK) *out = g;
    return st;
}

td_status fm_mlp_train_step_graph(fm_mlp *m, td_tensor *x, td_tensor *labels, double lr,
                                  double momentum, td_tensor **loss)
{
    int64_t b = td_dims(x)[0];
    int slot = m->graph[0] == NULL || m->graph_batch[0] == b ? 0 : 1;
    if (m->graph[slot] != NULL && m->graph_batch[slot] != b) {
        td_graph_destroy(m->graph[slot]); /* a third batch size: recapture */
        m->graph[slot] = NULL;
    }
    if (m->graph[slot] == NULL) {
        td_status st = capture_step(m, b, momentum, &m->graph[slot]);
        if (st != TD_OK) return st;
        m->graph_batch[slot] = b;
    }
    td_tensor *lr_t = td_full(m->ctx, TD_F32, 0, NULL, lr);
    if (lr_t == NULL) return TD_EINVAL;
    td_tensor *in[11] = {x, labels, m->param[0], m->param[1], m->param[2], m->param[3],
                         m->velocity[0], m->velocity[1], m->velocity[2], m->velocity[3], lr_t};
    td_tensor *out[9] = {NULL};
    td_status st = td_graph_run(m->graph[slot], 11, k_graph_in, in, 9, k_graph_out, out);
    td_release(lr_t);
    if (st != TD_OK) return st;
    for (int i = 0; i < FM_MLP_PARAMS; i++) {
        td_release(m->param[i]);
        td_release(m->velocity[i]);
        m->param[i] = out[i];
        m->velocity[i] = out[4 + i];
    }
    *loss = out[8];
    return TD_OK;
}

td_tensor *fm_mlp_predict(fm_mlp *m, td_tensor *x)
{
    scope s = {.n = 0};
    td_tensor *pre = keep(&s, td_add(keep(&s, td_matmul(x, m->param[0])), m->param[1]));
    td_tensor *hidden = keep(&s, td_relu(pre));
    td_tensor *logits = keep(&s, td_add(keep(&s, td_matmul(hidden, m->param[2])), m->param[3]));
    td_tensor *pred = td_argmax(logits, 1, false);
    scope_release(&s);
    return pred;
}

int fm_mlp_save(fm_mlp *m, const char *path, size_t n_meta, const char *const *keys,
                const char *const *values, char *err, size_t errlen)
{
    if (td_safetensors_save(path, FM_MLP_PARAMS, fm_mlp_param_names, m->param, (int)n_meta, keys,
                            values) != TD_OK) {
        snprintf(err, errlen, "%s", td_last_error(NULL));
        return -1;
    }
    return 0;
}

int fm_mlp_load(fm_mlp *m, const td_safetensors *file, const char *path, char *err, size_t errlen)
{
    (void)path; /* the library's messages name the file */
    td_tensor *fresh[FM_MLP_PARAMS] = {NULL};
    td_tensor *zeros[FM_MLP_PARAMS] = {NULL};
    for (int i = 0; i < FM_MLP_PARAMS; i++) {
        int rank;
        int64_t dims[2];
        param_dims(m, i, &rank, dims);
        if (td_safetensors_get(file, m->ctx, fm_mlp_param_names[i], TD_F32, rank, dims,
                               &fresh[i]) != TD_OK ||
            (zeros[i] = td_full(m->ctx, TD_F32, rank, dims, 0.0)) == NULL) {
            snprintf(err, errlen, "%s", td_last_error(m->ctx));
            goto fail;
        }
    }
    for (int i = 0; i < FM_MLP_PARAMS; i++) {
        td_release(m->param[i]);
        td_release(m->velocity[i]);
        m->param[i] = fresh[i];
        m->velocity[i] = zeros[i];
    }
    return 0;
fail:
    for (int i = 0; i < FM_MLP_PARAMS; i++) {
        td_release(fresh[i]);
        td_release(zeros[i]);
    }
    return -1;
}

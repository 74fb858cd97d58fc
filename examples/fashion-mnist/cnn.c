/* cnn.c — the example's convolutional network (see cnn.h): the forward pass as tensord ops,
 * gradients by td_backward, updates by td_optim (Adam). Each step records its ops lazily
 * and reads nothing back; the handles of intermediates are released at the end of the step
 * (the tape keeps what the backward pass needs until td_backward frees it).
 */
#include "cnn.h"

#include "rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const fm_cnn_param_names[FM_CNN_PARAMS] = {
    "conv1_w", "bn1_w", "bn1_b", "conv2_w", "bn2_w", "bn2_b", "fc_w", "fc_b"};
const char *const fm_cnn_running_names[FM_CNN_RUNNING] = {"bn1_mean", "bn1_var", "bn2_mean",
                                                          "bn2_var"};

#define BN_EPS 1e-5
#define BN_MOMENTUM 0.1
#define SCOPE_MAX 64

typedef struct scope {
    td_tensor *t[SCOPE_MAX];
    int n;
} scope;

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
    for (int i = 0; i < s->n; i++) td_release(s->t[i]);
    s->n = 0;
}

static void param_shape(const fm_cnn *m, int i, int *rank, int64_t *dims)
{
    switch (i) {
    case 0: *rank = 4; dims[0] = m->c1; dims[1] = 1; dims[2] = dims[3] = 3; break;
    case 3: *rank = 4; dims[0] = m->c2; dims[1] = m->c1; dims[2] = dims[3] = 3; break;
    case 6: *rank = 2; dims[0] = m->c2 * 49; dims[1] = 10; break;
    case 7: *rank = 1; dims[0] = 10; break;
    default: *rank = 1; dims[0] = i < 3 ? m->c1 : m->c2; break;
    }
}

void fm_cnn_fini(fm_cnn *m)
{
    if (m == NULL) return;
    td_optim_destroy(m->opt);
    for (int i = 0; i < FM_CNN_PARAMS; i++) td_release(m->param[i]);
    for (int i = 0; i < FM_CNN_RUNNING; i++) td_release(m->running[i]);
    memset(m, 0, sizeof *m);
}

td_status fm_cnn_init(fm_cnn *m, td_context *ctx, int64_t c1, int64_t c2, double dropout,
                      double lr, uint64_t seed)
{
    memset(m, 0, sizeof *m);
    m->ctx = ctx;
    m->c1 = c1;
    m->c2 = c2;
    m->dropout = dropout;
    m->seed = seed;
    bool ok = true;
    for (int i = 0; i < FM_CNN_PARAMS; i++) {
        int rank;
        int64_t dims[4];
        param_shape(m, i, &rank, dims);
        if (i == 0 || i == 3 || i == 6) {
            const double fan_in = i == 6 ? (double)dims[0] : (double)(dims[1] * 9);
            const uint64_t s = fm_rng_mix(seed + 0x9e3779b97f4a7c15ULL * (uint64_t)(i + 1));
            m->param[i] = td_rand_normal(ctx, TD_F32, rank, dims, s, 0.0,
                                         sqrt((i == 6 ? 1.0 : 2.0) / fan_in));
        } else {
            m->param[i] = td_full(ctx, TD_F32, rank, dims, i == 1 || i == 4 ? 1.0 : 0.0);
        }
        ok = ok && m->param[i] != NULL && td_requires_grad(m->param[i], true) == TD_OK;
    }
    for (int i = 0; i < FM_CNN_RUNNING; i++) {
        m->running[i] = td_full(ctx, TD_F32, 1, (int64_t[]){i < 2 ? c1 : c2}, i % 2 ? 1.0 : 0.0);
        ok = ok && m->running[i] != NULL;
    }
    td_optim_config cfg = td_optim_config_default(TD_OPTIM_ADAM, lr);
    if (!ok || td_optim_create(ctx, &cfg, FM_CNN_PARAMS, m->param, fm_cnn_param_names,
                               &m->opt) != TD_OK) {
        fm_cnn_fini(m);
        return TD_EINVAL;
    }
    return TD_OK;
}

/* conv 3x3 (padding 1) -> batch norm -> relu -> max pool 2. Training: batch statistics, and
 * the running ones updated (under td_no_grad); else the running statistics. */
static td_tensor *block(fm_cnn *m, td_tensor *x, int k, bool training, scope *s)
{
    td_conv_params cp = {.pad_lo = {1, 1}, .pad_hi = {1, 1}};
    td_tensor *h = keep(s, td_conv(x, m->param[3 * k], NULL, &cp));
    td_tensor *mean, *var;
    if (training) {
        td_tensor *var_u = NULL;
        var = NULL;
        mean = keep(s, td_batch_norm_stats(h, &var, &var_u));
        keep(s, var);
        keep(s, var_u);
        if (mean != NULL) {
            td_no_grad_begin(m->ctx);
            td_tensor **rm = &m->running[2 * k], **rv = &m->running[2 * k + 1];
            td_tensor *nm = td_add(keep(s, td_mul_scalar(*rm, 1 - BN_MOMENTUM)),
                                   keep(s, td_mul_scalar(mean, BN_MOMENTUM)));
            td_tensor *nv = td_add(keep(s, td_mul_scalar(*rv, 1 - BN_MOMENTUM)),
                                   keep(s, td_mul_scalar(var_u, BN_MOMENTUM)));
            td_no_grad_end(m->ctx);
            if (nm != NULL && nv != NULL) {
                td_release(*rm);
                td_release(*rv);
                *rm = nm;
                *rv = nv;
            } else {
                td_release(nm);
                td_release(nv);
                return NULL;
            }
        }
    } else {
        mean = m->running[2 * k];
        var = m->running[2 * k + 1];
    }
    td_tensor *bn = keep(s, td_batch_norm(h, mean, var, m->param[3 * k + 1],
                                          m->param[3 * k + 2], BN_EPS));
    td_tensor *r = keep(s, td_relu(bn));
    td_pool_params pp = {.kernel = {2, 2}};
    return keep(s, td_max_pool(r, &pp, NULL));
}

/* The logits [B, 10]. */
static td_tensor *logits_of(fm_cnn *m, td_tensor *x, bool training, scope *s)
{
    const int64_t b = td_dims(x)[0];
    td_tensor *img = keep(s, td_reshape(x, 4, (int64_t[]){b, 1, 28, 28}));
    td_tensor *h1 = block(m, img, 0, training, s);
    td_tensor *h2 = block(m, h1, 1, training, s);
    td_tensor *flat = keep(s, td_reshape(h2, 2, (int64_t[]){b, m->c2 * 49}));
    if (training && m->dropout > 0)
        flat = keep(s, td_dropout(flat, m->dropout, fm_rng_mix(m->seed ^ (0xd1b54a32d192ed03ULL *
                                                                          (uint64_t)(m->steps + 1)))));
    return keep(s, td_add(keep(s, td_matmul(flat, m->param[6])), m->param[7]));
}

td_status fm_cnn_train_step(fm_cnn *m, td_tensor *x, td_tensor *labels, double lr,
                            td_tensor **loss)
{
    scope s = {.n = 0};
    td_tensor *logp = keep(&s, td_log_softmax(logits_of(m, x, true, &s), 1));
    td_tensor *picked = keep(&s, td_gather(logp, labels, 1));
    td_tensor *l = td_neg(keep(&s, td_mean(picked, 0, NULL, false)));
    td_status st = l == NULL ? TD_EINVAL : td_backward(l);
    scope_release(&s);
    if (st == TD_OK) st = td_optim_set_lr(m->opt, lr);
    if (st == TD_OK) st = td_optim_step(m->opt, m->param);
    if (st != TD_OK) {
        td_release(l);
        td_tape_clear(m->ctx);
        return st;
    }
    m->steps++;
    *loss = l;
    return TD_OK;
}

td_tensor *fm_cnn_predict(fm_cnn *m, td_tensor *x)
{
    scope s = {.n = 0};
    td_no_grad_begin(m->ctx);
    td_tensor *pred = td_argmax(logits_of(m, x, false, &s), 1, false);
    td_no_grad_end(m->ctx);
    scope_release(&s);
    return pred;
}

int fm_cnn_save(fm_cnn *m, const char *path, size_t n_meta, const char *const *keys,
                const char *const *values, char *err, size_t errlen)
{
    const char *names[FM_CNN_PARAMS + FM_CNN_RUNNING];
    td_tensor *ts[FM_CNN_PARAMS + FM_CNN_RUNNING];
    for (int i = 0; i < FM_CNN_PARAMS; i++) {
        names[i] = fm_cnn_param_names[i];
        ts[i] = m->param[i];
    }
    for (int i = 0; i < FM_CNN_RUNNING; i++) {
        names[FM_CNN_PARAMS + i] = fm_cnn_running_names[i];
        ts[FM_CNN_PARAMS + i] = m->running[i];
    }
    if (td_safetensors_save(path, FM_CNN_PARAMS + FM_CNN_RUNNING, names, ts, (int)n_meta, keys,
                            values) != TD_OK) {
        snprintf(err, errlen, "%s", td_last_error(NULL));
        return -1;
    }
    return 0;
}

int fm_cnn_load(fm_cnn *m, const td_safetensors *file, char *err, size_t errlen)
{
    td_tensor *fresh[FM_CNN_PARAMS + FM_CNN_RUNNING] = {NULL};
    for (int i = 0; i < FM_CNN_PARAMS + FM_CNN_RUNNING; i++) {
        int rank = 1;
        int64_t dims[4] = {i - FM_CNN_PARAMS < 2 ? m->c1 : m->c2};
        if (i < FM_CNN_PARAMS) param_shape(m, i, &rank, dims);
        const char *name = i < FM_CNN_PARAMS ? fm_cnn_param_names[i]
                                             : fm_cnn_running_names[i - FM_CNN_PARAMS];
        if (td_safetensors_get(file, m->ctx, name, TD_F32, rank, dims, &fresh[i]) != TD_OK) {
            snprintf(err, errlen, "%s", td_last_error(m->ctx));
            for (int j = 0; j < i; j++) td_release(fresh[j]);
            return -1;
        }
    }
    for (int i = 0; i < FM_CNN_PARAMS; i++) {
        td_release(m->param[i]);
        m->param[i] = fresh[i];
        td_requires_grad(m->param[i], true);
    }
    for (int i = 0; i < FM_CNN_RUNNING; i++) {
        td_release(m->running[i]);
        m->running[i] = fresh[FM_CNN_PARAMS + i];
    }
    return 0;
}

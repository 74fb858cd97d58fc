/* mlp.c — forward, backward and update of the example's MLP, as tensord ops (see mlp.h).
 *
 * Gradients, for a batch of B rows (p = softmax(logits), Y = one-hot labels):
 *   dlogits = (p - Y) / B                       [B, out]
 *   dw2 = relu_out^T @ dlogits,  db2 = sum_rows dlogits
 *   dh  = (dlogits @ w2^T) * [pre_activation > 0]
 *   dw1 = x^T @ dh,              db1 = sum_rows dh
 * p is exp(log_softmax) so the forward's work is reused; Y compares the labels [B, 1]
 * against arange(out) [out], which broadcasts to [B, out].
 *
 * Each step records ~45 ops. A small "scope" collects every intermediate handle so a step
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
    memset(m, 0, sizeof *m);
}

td_status fm_mlp_train_step(fm_mlp *m, td_tensor *x, td_tensor *labels, double lr, double momentum,
                            td_tensor **loss)
{
    scope s = {.n = 0};
    const int rows[1] = {0};
    td_tensor *const w1 = m->param[0], *const b1 = m->param[1];
    td_tensor *const w2 = m->param[2], *const b2 = m->param[3];
    double batch = (double)td_dims(x)[0];

    /* forward */
    td_tensor *pre = keep(&s, td_add(keep(&s, td_matmul(x, w1)), b1));
    td_tensor *hidden = keep(&s, td_relu(pre));
    td_tensor *logits = keep(&s, td_add(keep(&s, td_matmul(hidden, w2)), b2));
    td_tensor *logp = keep(&s, td_log_softmax(logits, 1));
    td_tensor *picked = keep(&s, td_gather(logp, labels, 1));
    td_tensor *batch_loss = td_neg(keep(&s, td_mean(picked, 0, NULL, false)));

    /* backward */
    td_tensor *onehot = keep(&s, td_cast(keep(&s, td_eq(labels, m->classes)), TD_F32));
    td_tensor *diff = keep(&s, td_sub(keep(&s, td_exp(logp)), onehot));
    td_tensor *dlogits = keep(&s, td_mul_scalar(diff, 1.0 / batch));
    td_tensor *grad[FM_MLP_PARAMS];
    grad[2] = keep(&s, td_matmul(keep(&s, td_transpose(hidden)), dlogits));
    grad[3] = keep(&s, td_sum(dlogits, 1, rows, false));
    td_tensor *dhidden = keep(&s, td_matmul(dlogits, keep(&s, td_transpose(w2))));
    td_tensor *active = keep(&s, td_gt(pre, m->zero));
    td_tensor *dpre = keep(&s, td_where(active, dhidden, m->zero));
    grad[0] = keep(&s, td_matmul(keep(&s, td_transpose(x)), dpre));
    grad[1] = keep(&s, td_sum(dpre, 1, rows, false));

    /* update */
    td_tensor *new_v[FM_MLP_PARAMS], *new_p[FM_MLP_PARAMS];
    bool ok = batch_loss != NULL;
    for (int i = 0; i < FM_MLP_PARAMS; i++) {
        new_v[i] = td_add(keep(&s, td_mul_scalar(m->velocity[i], momentum)), grad[i]);
        new_p[i] = td_sub(m->param[i], keep(&s, td_mul_scalar(new_v[i], lr)));
        ok = ok && new_v[i] != NULL && new_p[i] != NULL;
    }
    scope_release(&s);
    if (!ok) {
        td_release(batch_loss);
        for (int i = 0; i < FM_MLP_PARAMS; i++) {
            td_release(new_v[i]);
            td_release(new_p[i]);
        }
        return TD_EINVAL;
    }
    for (int i = 0; i < FM_MLP_PARAMS; i++) {
        td_release(m->velocity[i]);
        td_release(m->param[i]);
        m->velocity[i] = new_v[i];
        m->param[i] = new_p[i];
    }
    *loss = batch_loss;
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

static void format_shape(char *buf, size_t len, int rank, const int64_t *dims)
{
    size_t used = 0;
    used += (size_t)snprintf(buf, len, "[");
    for (int d = 0; d < rank && used < len; d++)
        used +=
            (size_t)snprintf(buf + used, len - used, "%s%lld", d ? ", " : "", (long long)dims[d]);
    if (used < len) snprintf(buf + used, len - used, "]");
}

int fm_mlp_save(fm_mlp *m, const char *path, size_t n_meta, const char *const *keys,
                const char *const *values, char *err, size_t errlen)
{
    int rc = -1;
    float *host[FM_MLP_PARAMS] = {NULL};
    int64_t dims[FM_MLP_PARAMS][2];
    safetensors_f32 out[FM_MLP_PARAMS];
    for (int i = 0; i < FM_MLP_PARAMS; i++) {
        int rank;
        param_dims(m, i, &rank, dims[i]);
        size_t nbytes = td_nbytes(m->param[i]);
        host[i] = malloc(nbytes ? nbytes : 1);
        if (host[i] == NULL) {
            snprintf(err, errlen, "%s: out of memory", path);
            goto done;
        }
        td_status st = td_read(m->param[i], host[i], nbytes);
        if (st != TD_OK) {
            snprintf(err, errlen, "%s: reading %s back failed: %s", path, fm_mlp_param_names[i],
                     td_last_error(m->ctx));
            goto done;
        }
        out[i] = (safetensors_f32){
            .name = fm_mlp_param_names[i], .rank = rank, .shape = dims[i], .data = host[i]};
    }
    rc = safetensors_write_f32(path, FM_MLP_PARAMS, out, n_meta, keys, values, err, errlen);
done:
    for (int i = 0; i < FM_MLP_PARAMS; i++)
        free(host[i]);
    return rc;
}

int fm_mlp_load(fm_mlp *m, const safetensors_file *file, const char *path, char *err, size_t errlen)
{
    td_tensor *fresh[FM_MLP_PARAMS] = {NULL};
    td_tensor *zeros[FM_MLP_PARAMS] = {NULL};
    for (int i = 0; i < FM_MLP_PARAMS; i++) {
        const char *name = fm_mlp_param_names[i];
        int rank;
        int64_t dims[2];
        param_dims(m, i, &rank, dims);
        char want[64], have[64];
        format_shape(want, sizeof want, rank, dims);
        const safetensors_tensor *t = safetensors_find(file, name);
        if (t == NULL) {
            snprintf(err, errlen,
                     "%s: %s: missing from the file (the model needs w1, b1, w2, "
                     "b2)",
                     path, name);
            goto fail;
        }
        if (strcmp(t->dtype, "F32") != 0) {
            snprintf(err, errlen, "%s: %s: dtype %s in file, model needs F32", path, name,
                     t->dtype);
            goto fail;
        }
        format_shape(have, sizeof have, t->rank, t->shape);
        if (t->rank != rank || memcmp(t->shape, dims, (size_t)rank * sizeof dims[0]) != 0) {
            snprintf(err, errlen, "%s: %s: shape %s in file, model needs %s", path, name, have,
                     want);
            goto fail;
        }
        fresh[i] = td_from_host(m->ctx, TD_F32, rank, dims, t->data);
        zeros[i] = td_full(m->ctx, TD_F32, rank, dims, 0.0);
        if (fresh[i] == NULL || zeros[i] == NULL) {
            snprintf(err, errlen, "%s: uploading %s failed: %s", path, name, td_last_error(m->ctx));
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

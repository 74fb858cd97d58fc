/* optim_run.h — a small convolutional classifier trained a few steps with td_optim (Adam),
 * shared by tests/unit/client/optim.c (local:cpu) and tests/e2e/autodiff.c (a real tensord):
 * the same run eagerly, replayed from one captured training step (forward, td_backward,
 * td_optim_step in one graph), and resumed from a td_optim_save checkpoint, so the tests
 * can demand identical bits from each.
 *
 * Model: x [4, 1, 6, 6] -> conv 3x3 (2 channels, padding 1, bias) -> batch norm (batch
 * statistics, weight, bias) -> relu -> max pool 2 -> [4, 18] -> matmul [18, 3] ->
 * log_softmax; loss = -mean of the target's log-probability. f32.
 * Thread-safety: the test's thread. */
#ifndef TD_TESTS_OPTIM_RUN_H
#define TD_TESTS_OPTIM_RUN_H

#include "tensord.h"
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#define OR_STEPS 6
#define OR_NP 5
#define OR_NPARAM (18 + 2 + 2 + 2 + 54)

typedef struct or_result {
    float loss[OR_STEPS];
    float params[OR_NPARAM];
    float exp_avg_sq[OR_NPARAM];
} or_result;

enum or_mode { OR_EAGER, OR_GRAPH, OR_RESUME };

static const char *const or_names[OR_NP] = {"conv_w", "conv_b", "bn_w", "bn_b", "fc"};
static const int or_rank[OR_NP] = {4, 1, 1, 1, 2};
static const int64_t or_dims[OR_NP][4] = {{2, 1, 3, 3}, {2}, {2}, {2}, {18, 3}};
static const int64_t or_n[OR_NP] = {18, 2, 2, 2, 54};

static void or_fill(float *p, int n, unsigned seed, float scale, float offset)
{
    for (int i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = ((float)((seed >> 8) & 0xffff) / 65536.0f - 0.5f) * scale + offset;
    }
}

static td_tensor *or_loss(td_context *c, td_tensor *x, td_tensor *onehot, td_tensor *const *p)
{
    td_conv_params cp = {.pad_lo = {1, 1}, .pad_hi = {1, 1}};
    td_tensor *h = td_conv(x, p[0], p[1], &cp);
    td_tensor *var = NULL, *mean = td_batch_norm_stats(h, &var, NULL);
    td_tensor *bn = td_batch_norm(h, mean, var, p[2], p[3], 1e-5);
    td_tensor *r = td_relu(bn);
    td_pool_params pp = {.kernel = {2, 2}};
    td_tensor *mp = td_max_pool(r, &pp, NULL);
    td_tensor *flat = td_reshape(mp, 2, (int64_t[]){4, 18});
    td_tensor *lp = td_log_softmax(td_matmul(flat, p[4]), 1);
    td_tensor *prod = td_mul(lp, onehot);
    td_tensor *loss = td_mul_scalar(td_sum(prod, 0, NULL, false), -0.25);
    cr_assert_not_null(loss, "%s", td_last_error(c));
    td_tensor *tmp[] = {h, var, mean, bn, r, mp, flat, lp, prod};
    for (size_t i = 0; i < sizeof tmp / sizeof tmp[0]; i++) td_release(tmp[i]);
    return loss;
}

static void or_read_state(td_optim *o, or_result *out)
{
    int at = 0;
    for (int i = 0; i < td_optim_n_state(o); i++) {
        const char *name;
        td_tensor *t;
        cr_assert_eq(td_optim_state(o, i, &name, &t), TD_OK);
        if (strstr(name, ".exp_avg_sq") == NULL) continue;
        cr_assert_eq(td_read(t, out->exp_avg_sq + at, td_nbytes(t)), TD_OK);
        at += (int)(td_nbytes(t) / sizeof(float));
    }
}

/* Train OR_STEPS steps on `uri` in the given mode; `ckpt` is a file path for OR_RESUME. */
static void or_train(const char *uri, enum or_mode mode, const char *ckpt, or_result *out)
{
    td_context *c;
    cr_assert_eq(td_connect(uri, NULL, &c), TD_OK, "%s: %s", uri, td_connect_error());
    float xs[4 * 36], oh[12] = {0}, init[OR_NPARAM];
    or_fill(xs, 4 * 36, 7, 2.0f, 0.0f);
    for (int i = 0; i < 4; i++) oh[i * 3 + (i * 2) % 3] = 1;
    td_tensor *x = td_from_host(c, TD_F32, 4, (int64_t[]){4, 1, 6, 6}, xs);
    td_tensor *y = td_from_host(c, TD_F32, 2, (int64_t[]){4, 3}, oh);
    td_tensor *p[OR_NP];
    int at = 0;
    for (int i = 0; i < OR_NP; i++) {
        or_fill(init + at, (int)or_n[i], 11u + (unsigned)i, 1.0f, i == 2 ? 1.0f : 0.0f);
        p[i] = td_from_host(c, TD_F32, or_rank[i], or_dims[i], init + at);
        cr_assert_eq(td_requires_grad(p[i], true), TD_OK, "%s", td_last_error(c));
        at += (int)or_n[i];
    }
    td_optim_config cfg = td_optim_config_default(TD_OPTIM_ADAM, 0.05);
    cfg.weight_decay = 0.01;
    td_optim *o;
    cr_assert_eq(td_optim_create(c, &cfg, OR_NP, p, or_names, &o), TD_OK, "%s", td_last_error(c));
    td_graph *g = NULL;
    const int ns = td_optim_n_state(o);
    if (mode == OR_GRAPH) {
        td_tensor *keep[64];
        cr_assert_leq(ns, 64);
        for (int j = 0; j < ns; j++) {
            td_tensor *s;
            cr_assert_eq(td_optim_state(o, j, NULL, &s), TD_OK);
            keep[j] = td_detach(s);
        }
        cr_assert_eq(td_graph_begin(c), TD_OK, "%s", td_last_error(c));
        td_tensor *gx = td_graph_input(c, "x", TD_F32, 4, (int64_t[]){4, 1, 6, 6});
        td_tensor *gy = td_graph_input(c, "y", TD_F32, 2, (int64_t[]){4, 3});
        td_tensor *gp[OR_NP];
        char nm[256];
        for (int i = 0; i < OR_NP; i++) {
            gp[i] = td_graph_input(c, or_names[i], TD_F32, or_rank[i], or_dims[i]);
            cr_assert_eq(td_requires_grad(gp[i], true), TD_OK);
        }
        for (int j = 0; j < ns; j++) {
            const char *sn;
            td_tensor *s;
            cr_assert_eq(td_optim_state(o, j, &sn, &s), TD_OK);
            snprintf(nm, sizeof nm, "in.%s", sn);
            td_tensor *ph = td_graph_input(c, nm, td_tensor_dtype(s), td_rank(s), td_dims(s));
            cr_assert_eq(td_optim_set_state(o, j, ph), TD_OK, "%s", td_last_error(c));
            td_release(ph);
        }
        td_tensor *l = or_loss(c, gx, gy, gp);
        cr_assert_eq(td_backward(l), TD_OK, "%s", td_last_error(c));
        cr_assert_eq(td_optim_step(o, gp), TD_OK, "%s", td_last_error(c));
        cr_assert_eq(td_graph_output(c, "loss", l), TD_OK, "%s", td_last_error(c));
        for (int i = 0; i < OR_NP; i++)
            cr_assert_eq(td_graph_output(c, or_names[i], gp[i]), TD_OK, "%s", td_last_error(c));
        for (int j = 0; j < ns; j++) {
            const char *sn;
            td_tensor *s;
            cr_assert_eq(td_optim_state(o, j, &sn, &s), TD_OK);
            snprintf(nm, sizeof nm, "out.%s", sn);
            cr_assert_eq(td_graph_output(c, nm, s), TD_OK, "%s", td_last_error(c));
        }
        cr_assert_eq(td_graph_end(c, &g), TD_OK, "%s", td_last_error(c));
        for (int j = 0; j < ns; j++) {
            cr_assert_eq(td_optim_set_state(o, j, keep[j]), TD_OK, "%s", td_last_error(c));
            td_release(keep[j]);
        }
        td_release(l);
        td_release(gx);
        td_release(gy);
        for (int i = 0; i < OR_NP; i++) td_release(gp[i]);
    }
    for (int step = 0; step < OR_STEPS; step++) {
        if (step == 3) cr_assert_eq(td_optim_set_lr(o, 0.02), TD_OK);
        if (mode == OR_RESUME && step == 3) { /* save, start over from the file */
            cr_assert_eq(td_optim_save(o, p, ckpt, 1, (const char *[]){"note"},
                                       (const char *[]){"resume test"}),
                         TD_OK, "%s", td_last_error(c));
            td_optim_destroy(o);
            for (int i = 0; i < OR_NP; i++) td_release(p[i]);
            td_release(x);
            td_release(y);
            td_close(c);
            cr_assert_eq(td_connect(uri, NULL, &c), TD_OK, "%s", td_connect_error());
            x = td_from_host(c, TD_F32, 4, (int64_t[]){4, 1, 6, 6}, xs);
            y = td_from_host(c, TD_F32, 2, (int64_t[]){4, 3}, oh);
            float zero[OR_NPARAM] = {0};
            at = 0;
            for (int i = 0; i < OR_NP; i++) { /* values to be replaced by the file's */
                p[i] = td_from_host(c, TD_F32, or_rank[i], or_dims[i], zero);
                cr_assert_eq(td_requires_grad(p[i], true), TD_OK);
            }
            td_optim_config other = td_optim_config_default(TD_OPTIM_ADAM, 0.5);
            other.weight_decay = 0.01;
            cr_assert_eq(td_optim_create(c, &other, OR_NP, p, or_names, &o), TD_OK);
            cr_assert_eq(td_optim_load(o, p, ckpt), TD_OK, "%s", td_last_error(c));
            cr_assert_eq(td_optim_lr(o), 0.02);
        }
        td_tensor *loss;
        if (mode == OR_GRAPH) {
            const char *in_names[2 + OR_NP + 64], *out_names[1 + OR_NP + 64];
            td_tensor *ins[2 + OR_NP + 64], *outs[1 + OR_NP + 64];
            char nbuf[64][256], obuf[64][256];
            int ni = 0, no = 0;
            in_names[ni] = "x";
            ins[ni++] = x;
            in_names[ni] = "y";
            ins[ni++] = y;
            out_names[no++] = "loss";
            for (int i = 0; i < OR_NP; i++) {
                in_names[ni] = or_names[i];
                ins[ni++] = p[i];
                out_names[no++] = or_names[i];
            }
            for (int j = 0; j < ns; j++) {
                const char *sn;
                td_tensor *s;
                cr_assert_eq(td_optim_state(o, j, &sn, &s), TD_OK);
                snprintf(nbuf[j], sizeof nbuf[j], "in.%s", sn);
                snprintf(obuf[j], sizeof obuf[j], "out.%s", sn);
                in_names[ni] = nbuf[j];
                ins[ni++] = s;
                out_names[no++] = obuf[j];
            }
            cr_assert_eq(td_graph_run(g, ni, in_names, ins, no, out_names, outs), TD_OK, "%s",
                         td_last_error(c));
            loss = outs[0];
            for (int i = 0; i < OR_NP; i++) {
                td_release(p[i]);
                p[i] = outs[1 + i];
            }
            for (int j = 0; j < ns; j++) {
                cr_assert_eq(td_optim_set_state(o, j, outs[1 + OR_NP + j]), TD_OK, "%s",
                             td_last_error(c));
                td_release(outs[1 + OR_NP + j]);
            }
        } else {
            loss = or_loss(c, x, y, p);
            cr_assert_eq(td_backward(loss), TD_OK, "%s", td_last_error(c));
            cr_assert_eq(td_optim_step(o, p), TD_OK, "%s", td_last_error(c));
        }
        cr_assert_eq(td_read(loss, &out->loss[step], sizeof(float)), TD_OK, "%s",
                     td_last_error(c));
        td_release(loss);
    }
    at = 0;
    for (int i = 0; i < OR_NP; i++) {
        cr_assert_eq(td_read(p[i], out->params + at, td_nbytes(p[i])), TD_OK, "%s",
                     td_last_error(c));
        at += (int)or_n[i];
        td_release(p[i]);
    }
    or_read_state(o, out);
    td_graph_destroy(g);
    td_optim_destroy(o);
    td_release(x);
    td_release(y);
    td_close(c);
}

#endif

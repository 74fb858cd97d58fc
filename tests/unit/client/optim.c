/* optim.c — td_optim_* (issue 15 item 3): every optimizer against PyTorch 1.13's torch.optim
 * in float64 (optim_reference.h, from gen_optim_reference.py: 4 steps, the learning rate
 * halved before step 3, a parameter without gradient left alone), the learning-rate
 * schedules against their closed forms worked by hand, config and checkpoint errors, the
 * public safetensors API, and on local:cpu a small CNN trained with Adam whose captured
 * training step and whose run resumed from a checkpoint give the eager run's bits
 * (tests/e2e/optim_run.h; tests/e2e/autodiff.c does the same through a real tensord).
 * Tolerance against PyTorch: |a - b| <= 1e-12 (1 + |b|): both compute in float64 with the
 * same formulas, and differ only by the order of a few roundings per step.
 */
#include "../../e2e/optim_run.h"
#include "optim_reference.h"
#include "tensord.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static td_context *ctx;
static char dir[64];

static void setup(void)
{
    cr_assert_eq(td_connect("local:cpu", NULL, &ctx), TD_OK, "%s", td_connect_error());
    snprintf(dir, sizeof dir, "/tmp/td-optim-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}
static void teardown(void)
{
    td_close(ctx);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_expect_eq(system(cmd), 0);
}
TestSuite(optim, .init = setup, .fini = teardown);

/* On context cx, each parameter pi on device devs[i] (NULL: where td_from_host puts it), the
 * constant of its loss term beside it. The two loss terms are differentiated one after the
 * other (gradients accumulate: the same as their sum) so that nothing crosses devices. With
 * `resume`, the optimizer is saved after step 2 and a new one loaded from the file takes
 * steps 3 and 4. With cfg.loss_scale, each term is scaled by td_optim_scale_loss. */
static void against_torch_on(td_context *cx, const char *name, td_optim_config cfg,
                             const double *ref, const char *const *devs, bool resume)
{
    td_tensor *p[3] = {
        td_from_host(cx, TD_F64, 2, (int64_t[]){2, 3}, ref_p0),
        td_from_host(cx, TD_F64, 1, (int64_t[]){4}, ref_p1),
        td_from_host(cx, TD_F64, 1, (int64_t[]){3}, ref_p2),
    };
    td_tensor *c0 = td_from_host(cx, TD_F64, 2, (int64_t[]){2, 3}, ref_c0);
    td_tensor *c1 = td_from_host(cx, TD_F64, 1, (int64_t[]){4}, ref_c1);
    for (int i = 0; devs != NULL && i < 3; i++) {
        td_tensor *m = td_to_device(p[i], devs[i]);
        cr_assert_not_null(m, "%s", td_last_error(cx));
        td_release(p[i]);
        p[i] = m;
    }
    if (devs != NULL) {
        td_tensor *m0 = td_to_device(c0, devs[0]), *m1 = td_to_device(c1, devs[1]);
        td_release(c0);
        td_release(c1);
        c0 = m0;
        c1 = m1;
    }
    for (int i = 0; i < 3; i++) cr_assert_eq(td_requires_grad(p[i], true), TD_OK);
    td_optim *o;
    const char *names[3] = {"p0", "p1", "p2"};
    cr_assert_eq(td_optim_create(cx, &cfg, 3, p, names, &o), TD_OK, "%s", td_last_error(cx));
    for (int step = 0; step < 4; step++) {
        if (step == 2 && resume) {
            char path[128];
            snprintf(path, sizeof path, "%s/resume.safetensors", dir);
            cr_assert_eq(td_optim_save(o, p, path, 0, NULL, NULL), TD_OK, "%s",
                         td_last_error(cx));
            td_optim_destroy(o);
            cr_assert_eq(td_optim_create(cx, &cfg, 3, p, names, &o), TD_OK);
            cr_assert_eq(td_optim_load(o, p, path), TD_OK, "%s", td_last_error(cx));
        }
        if (step == 2) cr_assert_eq(td_optim_set_lr(o, cfg.lr * 0.5), TD_OK);
        for (int k = 0; k < 2; k++) { /* each td_backward frees the tape: one term each */
            td_tensor *term = k == 0 ? td_sum(td_mul(c0, td_mul(p[0], p[0])), 0, NULL, false)
                                     : td_sum(td_mul(c1, p[1]), 0, NULL, false);
            td_tensor *l = term;
            if (cfg.loss_scale > 0)
                cr_assert_eq(td_optim_scale_loss(o, term, &l), TD_OK, "%s", td_last_error(cx));
            cr_assert_eq(td_backward(l), TD_OK, "%s", td_last_error(cx));
            if (l != term) td_release(l);
            td_release(term);
        }
        cr_assert_eq(td_optim_step(o, p), TD_OK, "%s", td_last_error(cx));
        double got[13];
        cr_assert_eq(td_read(p[0], got, 48), TD_OK, "%s", td_last_error(cx));
        cr_assert_eq(td_read(p[1], got + 6, 32), TD_OK);
        cr_assert_eq(td_read(p[2], got + 10, 24), TD_OK);
        for (int i = 0; i < 13; i++) {
            const double want = ref[step * 13 + i];
            cr_expect(fabs(got[i] - want) <= 1e-12 * (1 + fabs(want)),
                      "%s step %d element %d: td_optim %.17g, torch %.17g", name, step + 1, i,
                      got[i], want);
        }
    }
    cr_expect(td_is_requires_grad(p[0]), "the updated parameters stay marked");
    if (devs != NULL) { /* p0's first slot is state 2 or 4: on cpu:1, refuses cpu:0 */
        const int j = cfg.loss_scale > 0 ? 4 : 2;
        td_tensor *s0 = td_full(cx, TD_F64, 2, (int64_t[]){2, 3}, 0.0);
        cr_expect_eq(td_optim_set_state(o, j, s0), TD_EINVAL);
        cr_expect(strstr(td_last_error(cx), "device cpu:1") != NULL, "%s", td_last_error(cx));
        td_release(s0);
    }
    for (int i = 0; devs != NULL && i < 3; i++)
        cr_expect_str_eq(td_tensor_device(p[i]), devs[i], "%s: p%d moved", name, i);
    for (int j = 0; devs != NULL && j < td_optim_n_state(o); j++) {
        const char *sn;
        td_tensor *st;
        cr_assert_eq(td_optim_state(o, j, &sn, &st), TD_OK);
        const char *want = strchr(sn, '.') == NULL ? td_device_name(cx) : devs[sn[1] - '0'];
        cr_expect_str_eq(td_tensor_device(st), want, "%s: state %s", name, sn);
    }
    td_optim_destroy(o);
    for (int i = 0; i < 3; i++) td_release(p[i]);
    td_release(c0);
    td_release(c1);
}

static void against_torch(const char *name, td_optim_config cfg, const double *ref)
{
    against_torch_on(ctx, name, cfg, ref, NULL, false);
}

Test(optim, sgd) { against_torch("sgd", td_optim_config_default(TD_OPTIM_SGD, 0.1), ref_sgd); }
Test(optim, sgd_momentum_weight_decay)
{
    td_optim_config c = td_optim_config_default(TD_OPTIM_SGD, 0.05);
    c.momentum = 0.9;
    c.weight_decay = 0.01;
    against_torch("sgd_momentum_wd", c, ref_sgd_momentum_wd);
}
Test(optim, sgd_nesterov)
{
    td_optim_config c = td_optim_config_default(TD_OPTIM_SGD, 0.05);
    c.momentum = 0.8;
    c.nesterov = true;
    c.weight_decay = 0.05;
    against_torch("sgd_nesterov", c, ref_sgd_nesterov);
}
Test(optim, adam)
{
    td_optim_config c = td_optim_config_default(TD_OPTIM_ADAM, 0.01);
    c.weight_decay = 0.1;
    against_torch("adam", c, ref_adam);
}
Test(optim, adamw)
{
    td_optim_config c = td_optim_config_default(TD_OPTIM_ADAMW, 0.02);
    c.beta1 = 0.8;
    c.beta2 = 0.95;
    c.eps = 1e-6;
    c.weight_decay = 0.1;
    against_torch("adamw", c, ref_adamw);
}

/* A context spanning two CPU devices (TENSORD_CPU_DEVICES=2 before the first connect; each
 * test runs in its own process): p0 and p2 on cpu:1, p1 on cpu:0. Each parameter's state
 * lives on its device and the shared scalars on the first; the steps give PyTorch's values
 * (the same references as the one-device tests), a checkpoint resumes on the same devices,
 * and a loss-scaled step (scale 1024, a power of two: no bit changes) too. Before, the
 * state was made on cpu:0 and the first step failed with mixed devices. */
static td_context *two;
static void setup_two(void)
{
    setenv("TENSORD_CPU_DEVICES", "2", 1);
    setenv("TENSORD_DEVICES", "cpu", 1);
    setup();
    cr_assert_eq(td_connect("local:cpu:0,cpu:1", NULL, &two), TD_OK, "%s", td_connect_error());
}
static void teardown_two(void)
{
    td_close(two);
    teardown();
}
TestSuite(optim_devices, .init = setup_two, .fini = teardown_two);

static const char *const two_devs[3] = {"cpu:1", "cpu:0", "cpu:1"};

Test(optim_devices, sgd_momentum)
{
    td_optim_config c = td_optim_config_default(TD_OPTIM_SGD, 0.05);
    c.momentum = 0.9;
    c.weight_decay = 0.01;
    against_torch_on(two, "sgd_momentum_wd", c, ref_sgd_momentum_wd, two_devs, true);
}
Test(optim_devices, adam)
{
    td_optim_config c = td_optim_config_default(TD_OPTIM_ADAM, 0.01);
    c.weight_decay = 0.1;
    against_torch_on(two, "adam", c, ref_adam, two_devs, true);
}
Test(optim_devices, adamw_loss_scaled)
{
    td_optim_config c = td_optim_config_default(TD_OPTIM_ADAMW, 0.02);
    c.beta1 = 0.8;
    c.beta2 = 0.95;
    c.eps = 1e-6;
    c.weight_decay = 0.1;
    c.loss_scale = 1024;
    c.growth_interval = 3;
    against_torch_on(two, "adamw", c, ref_adamw, two_devs, true);
}

Test(optim, state_names_and_defaults)
{
    td_optim_config d = td_optim_config_default(TD_OPTIM_ADAMW, 1e-3);
    cr_expect(d.beta1 == 0.9 && d.beta2 == 0.999 && d.eps == 1e-8 && d.weight_decay == 0.01);
    td_tensor *w = td_full(ctx, TD_F32, 2, (int64_t[]){2, 2}, 1.0);
    td_optim *o;
    cr_assert_eq(td_optim_create(ctx, &d, 1, &w, NULL, &o), TD_OK, "%s", td_last_error(ctx));
    cr_assert_eq(td_optim_n_state(o), 4);
    const char *want[] = {"lr", "step", "0.exp_avg", "0.exp_avg_sq"};
    for (int i = 0; i < 4; i++) {
        const char *n;
        td_tensor *t;
        cr_assert_eq(td_optim_state(o, i, &n, &t), TD_OK);
        cr_expect_str_eq(n, want[i]);
        cr_expect_eq(td_tensor_dtype(t), i < 2 ? TD_F64 : TD_F32);
    }
    td_tensor *t;
    cr_expect_eq(td_optim_state(o, 4, NULL, &t), TD_EINVAL);
    td_tensor *bad = td_full(ctx, TD_F32, 1, (int64_t[]){4}, 0.0);
    cr_expect_eq(td_optim_set_state(o, 2, bad), TD_EINVAL);
    cr_expect(strstr(td_last_error(ctx), "0.exp_avg") != NULL, "%s", td_last_error(ctx));
    cr_expect_eq(td_optim_set_lr(o, -1), TD_EINVAL);
    cr_expect_eq(td_optim_lr(o), 1e-3);
    /* a step with no gradient anywhere changes nothing but the step count */
    td_tensor *before = w;
    cr_assert_eq(td_optim_step(o, &w), TD_OK, "%s", td_last_error(ctx));
    cr_expect_eq(w, before);
    td_release(bad);
    td_optim_destroy(o);
    td_release(w);
}

Test(optim, bad_configs_name_the_value)
{
    td_tensor *w = td_full(ctx, TD_F32, 1, (int64_t[]){3}, 1.0);
    td_tensor *i = td_full(ctx, TD_I32, 1, (int64_t[]){3}, 1.0);
    td_optim *o = NULL;
    td_optim_config c = td_optim_config_default(TD_OPTIM_ADAM, 0.1);
    c.beta1 = 1;
    cr_expect_eq(td_optim_create(ctx, &c, 1, &w, NULL, &o), TD_EINVAL);
    cr_expect_str_eq(td_last_error(ctx), "td_optim_create: beta1 1 is outside [0, 1)");
    c = td_optim_config_default(TD_OPTIM_SGD, 0.1);
    c.nesterov = true;
    cr_expect_eq(td_optim_create(ctx, &c, 1, &w, NULL, &o), TD_EINVAL);
    cr_expect(strstr(td_last_error(ctx), "nesterov needs momentum") != NULL);
    c = td_optim_config_default(TD_OPTIM_SGD, 0);
    cr_expect_eq(td_optim_create(ctx, &c, 1, &w, NULL, &o), TD_EINVAL);
    cr_expect(strstr(td_last_error(ctx), "lr 0") != NULL, "%s", td_last_error(ctx));
    c = td_optim_config_default(TD_OPTIM_SGD, 0.1);
    cr_expect_eq(td_optim_create(ctx, &c, 1, &i, NULL, &o), TD_EINVAL);
    cr_expect(strstr(td_last_error(ctx), "not a float tensor") != NULL);
    td_tensor *w3 = td_full(ctx, TD_F32, 1, (int64_t[]){3}, 1.0);
    cr_expect_eq(td_optim_create(ctx, &c, 2, (td_tensor *[]){w, w3},
                                 (const char *[]){"a", "a"}, &o), TD_EINVAL);
    cr_expect(strstr(td_last_error(ctx), "both named \"a\"") != NULL);
    td_release(w3);
    cr_expect_eq(td_optim_create(ctx, &c, 1, &w, (const char *[]){"a.b"}, &o), TD_EINVAL);
    cr_expect_null(o);
    /* a step given a parameter of another shape */
    cr_assert_eq(td_optim_create(ctx, &c, 1, &w, NULL, &o), TD_OK);
    td_tensor *w2 = td_full(ctx, TD_F32, 1, (int64_t[]){4}, 1.0);
    cr_expect_eq(td_optim_step(o, &w2), TD_EINVAL);
    td_optim_destroy(o);
    td_release(w);
    td_release(w2);
    td_release(i);
}

/* One tensor given twice: a step would release it after updating the first entry and then
 * read the released handle for the second (it crashed). Create and step refuse it. */
Test(optim, a_parameter_given_twice_is_refused)
{
    td_tensor *a = td_full(ctx, TD_F32, 1, (int64_t[]){3}, 2.0);
    td_tensor *b = td_full(ctx, TD_F32, 1, (int64_t[]){3}, 1.0);
    cr_assert_eq(td_requires_grad(a, true), TD_OK);
    cr_assert_eq(td_requires_grad(b, true), TD_OK);
    td_optim_config c = td_optim_config_default(TD_OPTIM_ADAM, 0.1);
    td_optim *o = NULL;
    cr_expect_eq(td_optim_create(ctx, &c, 3, (td_tensor *[]){b, a, a}, NULL, &o), TD_EINVAL);
    cr_expect(strstr(td_last_error(ctx), "parameters 1 and 2 are the same tensor") != NULL,
              "%s", td_last_error(ctx));
    cr_expect_null(o);
    td_tensor *ps[2] = {a, b};
    cr_assert_eq(td_optim_create(ctx, &c, 2, ps, NULL, &o), TD_OK, "%s", td_last_error(ctx));
    td_tensor *l = td_add(td_sum(td_mul(a, a), 0, NULL, false), td_sum(b, 0, NULL, false));
    cr_assert_eq(td_backward(l), TD_OK, "%s", td_last_error(ctx));
    td_release(l);
    td_tensor *twice[2] = {a, a};
    cr_expect_eq(td_optim_step(o, twice), TD_EINVAL);
    cr_expect(strstr(td_last_error(ctx), "params[0] and params[1] are the same tensor") != NULL,
              "%s", td_last_error(ctx));
    cr_expect(twice[0] == a && twice[1] == a, "a refused step replaces nothing");
    float v[3];
    cr_assert_eq(td_read(a, v, sizeof v), TD_OK, "%s", td_last_error(ctx));
    cr_expect(v[0] == 2.0f && v[1] == 2.0f && v[2] == 2.0f, "a is unchanged: %g", v[0]);
    const char *name;
    td_tensor *step;
    double sv = -1;
    cr_assert_eq(td_optim_state(o, 1, &name, &step), TD_OK);
    cr_assert_str_eq(name, "step");
    cr_assert_eq(td_read(step, &sv, sizeof sv), TD_OK);
    cr_expect_eq(sv, 0.0, "the step count is unchanged");
    char path[128];
    snprintf(path, sizeof path, "%s/twice.safetensors", dir);
    cr_assert_eq(td_optim_save(o, ps, path, 0, NULL, NULL), TD_OK, "%s", td_last_error(ctx));
    cr_expect_eq(td_optim_load(o, twice, path), TD_EINVAL);
    cr_expect(twice[0] == a && twice[1] == a, "a refused load replaces nothing");
    /* the proper step still runs: Adam's first step moves each element by lr (g != 0) */
    cr_assert_eq(td_optim_step(o, ps), TD_OK, "%s", td_last_error(ctx));
    cr_assert_eq(td_read(ps[0], v, sizeof v), TD_OK, "%s", td_last_error(ctx));
    cr_expect_float_eq(v[0], 1.9f, 1e-6f, "%g", v[0]);
    td_optim_destroy(o);
    td_release(ps[0]);
    td_release(ps[1]);
}

Test(optim, lr_schedules)
{
    td_lr_schedule s = {.kind = TD_LR_STEP, .base = 0.1, .step_size = 2, .gamma = 0.5};
    const double st[] = {0.1, 0.1, 0.05, 0.05, 0.025};
    for (int k = 0; k < 5; k++) cr_expect_float_eq(td_lr_at(&s, k), st[k], 1e-15, "step %d", k);
    td_lr_schedule w = {.kind = TD_LR_COSINE, .base = 1.0, .warmup_steps = 4, .total_steps = 4,
                        .min = 0.0};
    /* warmup 0.25 0.5 0.75 1; then (1 + cos(pi k / 4)) / 2 for k = 0..4, then 0 */
    const double cw[] = {0.25, 0.5, 0.75, 1.0, 1.0, 0.85355339059327373, 0.5,
                         0.14644660940672624, 0.0, 0.0};
    for (int k = 0; k < 10; k++) cr_expect_float_eq(td_lr_at(&w, k), cw[k], 1e-15, "step %d", k);
    td_lr_schedule c = {.kind = TD_LR_CONSTANT, .base = 3e-4};
    cr_expect_eq(td_lr_at(&c, 1000), 3e-4);
    cr_expect(isnan(td_lr_at(&c, -1)));
    td_lr_schedule bad = {.kind = TD_LR_STEP, .base = 0.1};
    cr_expect(isnan(td_lr_at(&bad, 0)), "step_size 0 is refused");
    /* a learning rate is finite and > 0 (td_optim_set_lr): another base is a bad schedule */
    const double bases[] = {-1.0, 0.0, NAN, INFINITY};
    for (int k = 0; k < 4; k++) {
        td_lr_schedule b = {.kind = TD_LR_CONSTANT, .base = bases[k]};
        cr_expect(isnan(td_lr_at(&b, 1)), "base %g gives %g", bases[k], td_lr_at(&b, 1));
        b.warmup_steps = 4;
        cr_expect(isnan(td_lr_at(&b, 1)), "base %g in warmup", bases[k]);
    }
}

Test(optim, safetensors_round_trip_any_dtype)
{
    char path[128];
    snprintf(path, sizeof path, "%s/t.safetensors", dir);
    const uint16_t bf[3] = {0x3f80, 0xc000, 0x7fc0};
    const int64_t iv[2] = {-5, (int64_t)1 << 40};
    const double dv = 2.5;
    td_tensor *a = td_from_host(ctx, TD_BF16, 1, (int64_t[]){3}, bf);
    td_tensor *b = td_from_host(ctx, TD_I64, 2, (int64_t[]){1, 2}, iv);
    td_tensor *d = td_from_host(ctx, TD_F64, 0, NULL, &dv);
    cr_assert_eq(td_safetensors_save(path, 3, (const char *[]){"a", "b", "d"},
                                     (td_tensor *[]){a, b, d}, 1, (const char *[]){"k"},
                                     (const char *[]){"v"}),
                 TD_OK, "%s", td_last_error(NULL));
    td_safetensors *f;
    cr_assert_eq(td_safetensors_open(path, &f), TD_OK, "%s", td_last_error(NULL));
    cr_expect_eq(td_safetensors_count(f), 3);
    cr_expect_str_eq(td_safetensors_name(f, 1), "b");
    cr_expect_null(td_safetensors_name(f, 3));
    cr_expect_str_eq(td_safetensors_metadata(f, "k"), "v");
    td_tensor *t;
    cr_assert_eq(td_safetensors_get(f, ctx, "a", TD_BF16, 1, (int64_t[]){3}, &t), TD_OK);
    uint16_t bf2[3];
    cr_assert_eq(td_read(t, bf2, sizeof bf2), TD_OK);
    cr_expect(memcmp(bf, bf2, sizeof bf) == 0);
    td_release(t);
    cr_assert_eq(td_safetensors_get(f, ctx, "b", TD_I64, -1, NULL, &t), TD_OK);
    int64_t iv2[2];
    cr_assert_eq(td_read(t, iv2, sizeof iv2), TD_OK);
    cr_expect(iv2[0] == -5 && iv2[1] == ((int64_t)1 << 40));
    td_release(t);
    cr_expect_eq(td_safetensors_get(f, ctx, "zz", TD_F32, -1, NULL, &t), TD_ENOTFOUND);
    cr_expect(strstr(td_last_error(ctx), "zz: missing from the file") != NULL);
    cr_expect_eq(td_safetensors_get(f, ctx, "d", TD_F32, -1, NULL, &t), TD_EINVAL);
    cr_expect(strstr(td_last_error(ctx), "d: dtype F64 in file, model needs F32") != NULL,
              "%s", td_last_error(ctx));
    cr_expect_eq(td_safetensors_get(f, ctx, "b", TD_I64, 1, (int64_t[]){2}, &t), TD_EINVAL);
    cr_expect(strstr(td_last_error(ctx), "b: shape [1, 2] in file, model needs [2]") != NULL,
              "%s", td_last_error(ctx));
    td_safetensors_close(f);
    cr_expect_eq(td_safetensors_open("/nonexistent/x.safetensors", &f), TD_EIO);
    cr_expect(strstr(td_last_error(NULL), "/nonexistent/x.safetensors: cannot open") != NULL,
              "%s", td_last_error(NULL));
    cr_expect_eq(td_safetensors_save(path, 2, (const char *[]){"a", "a"}, (td_tensor *[]){a, b},
                                     0, NULL, NULL),
                 TD_EINVAL);
    cr_expect(strstr(td_last_error(NULL), "appears twice") != NULL, "%s", td_last_error(NULL));
    td_release(a);
    td_release(b);
    td_release(d);
}

Test(optim, checkpoint_of_another_optimizer_is_refused)
{
    char path[128];
    snprintf(path, sizeof path, "%s/sgd.safetensors", dir);
    td_tensor *w = td_full(ctx, TD_F32, 1, (int64_t[]){3}, 1.0);
    td_optim_config c = td_optim_config_default(TD_OPTIM_SGD, 0.1);
    td_optim *o, *a;
    cr_assert_eq(td_optim_create(ctx, &c, 1, &w, (const char *[]){"w"}, &o), TD_OK);
    cr_assert_eq(td_optim_save(o, &w, path, 0, NULL, NULL), TD_OK, "%s", td_last_error(ctx));
    td_optim_config ac = td_optim_config_default(TD_OPTIM_ADAM, 0.1);
    cr_assert_eq(td_optim_create(ctx, &ac, 1, &w, (const char *[]){"w"}, &a), TD_OK);
    td_tensor *before = w;
    cr_expect_eq(td_optim_load(a, &w, path), TD_EINVAL);
    cr_expect(strstr(td_last_error(ctx), "saved by optimizer \"sgd\", this one is \"adam\""),
              "%s", td_last_error(ctx));
    cr_expect_eq(w, before, "a failed load leaves the parameters");
    td_tensor *w4 = td_full(ctx, TD_F32, 1, (int64_t[]){4}, 1.0);
    td_optim *o4;
    cr_assert_eq(td_optim_create(ctx, &c, 1, &w4, (const char *[]){"w"}, &o4), TD_OK);
    cr_expect_eq(td_optim_load(o4, &w4, path), TD_EINVAL);
    cr_expect(strstr(td_last_error(ctx), "w: shape [3] in file, model needs [4]"), "%s",
              td_last_error(ctx));
    td_optim_destroy(o);
    td_optim_destroy(a);
    td_optim_destroy(o4);
    td_release(w);
    td_release(w4);
}

/* The optimizer's own metadata keys cannot be overridden (a file saved with
 * tensord.optim = "evil" could not be loaded), and no key may be given twice (the last
 * was kept silently). Nothing is written. */
Test(optim, save_refuses_reserved_and_duplicate_metadata_keys)
{
    char path[128];
    snprintf(path, sizeof path, "%s/meta.safetensors", dir);
    td_tensor *w = td_full(ctx, TD_F32, 1, (int64_t[]){3}, 1.0);
    td_optim_config c = td_optim_config_default(TD_OPTIM_SGD, 0.1);
    td_optim *o;
    cr_assert_eq(td_optim_create(ctx, &c, 1, &w, (const char *[]){"w"}, &o), TD_OK);
    cr_expect_eq(td_optim_save(o, &w, path, 2, (const char *[]){"epoch", "tensord.optim"},
                               (const char *[]){"3", "evil"}),
                 TD_EINVAL);
    cr_expect(strstr(td_last_error(ctx), "metadata key 1 \"tensord.optim\" is reserved") != NULL,
              "%s", td_last_error(ctx));
    cr_expect_eq(td_optim_save(o, &w, path, 1, (const char *[]){"tensord.optim.lr"},
                               (const char *[]){"5"}),
                 TD_EINVAL);
    cr_expect(strstr(td_last_error(ctx), "\"tensord.optim.lr\" is reserved") != NULL, "%s",
              td_last_error(ctx));
    cr_expect_eq(td_optim_save(o, &w, path, 2, (const char *[]){"epoch", "epoch"},
                               (const char *[]){"3", "4"}),
                 TD_EINVAL);
    cr_expect(strstr(td_last_error(ctx), "metadata key \"epoch\" appears twice") != NULL, "%s",
              td_last_error(ctx));
    cr_expect_neq(access(path, F_OK), 0, "a refused save writes no file");
    cr_expect_eq(td_safetensors_save(path, 1, (const char *[]){"w"}, &w, 2,
                                     (const char *[]){"k", "k"}, (const char *[]){"1", "2"}),
                 TD_EINVAL);
    cr_expect(strstr(td_last_error(NULL), "metadata key \"k\" appears twice") != NULL, "%s",
              td_last_error(NULL));
    cr_expect_neq(access(path, F_OK), 0, "a refused save writes no file");
    /* other keys are the caller's, and the file loads */
    cr_assert_eq(td_optim_save(o, &w, path, 1, (const char *[]){"tensord.optimizer"},
                               (const char *[]){"x"}),
                 TD_OK, "%s", td_last_error(ctx));
    cr_expect_eq(td_optim_load(o, &w, path), TD_OK, "%s", td_last_error(ctx));
    td_optim_destroy(o);
    td_release(w);
}

/* An Adam checkpoint for one parameter "w" (f32 [3], all 1) written by hand with
 * td_safetensors_save: scalars lr and step as given, moments 0, metadata lr "0.01"; with
 * `extra` a further tensor of that name. */
static void write_adam_ckpt(const char *path, double lr, double step, const char *extra)
{
    td_tensor *w = td_full(ctx, TD_F32, 1, (int64_t[]){3}, 1.0);
    td_tensor *z = td_full(ctx, TD_F32, 1, (int64_t[]){3}, 0.0);
    td_tensor *l = td_full(ctx, TD_F64, 0, NULL, lr);
    td_tensor *t = td_full(ctx, TD_F64, 0, NULL, step);
    const char *names[6] = {"w", "lr", "step", "w.exp_avg", "w.exp_avg_sq", extra};
    cr_assert_eq(td_safetensors_save(path, extra != NULL ? 6 : 5, names,
                                     (td_tensor *[]){w, l, t, z, z, w}, 2,
                                     (const char *[]){"tensord.optim", "tensord.optim.lr"},
                                     (const char *[]){"adam", "0.01"}),
                 TD_OK, "%s", td_last_error(NULL));
    td_release(w);
    td_release(z);
    td_release(l);
    td_release(t);
}

/* td_optim_load checks the scalar state it resumes from: an lr tensor that is not the
 * metadata's learning rate (td_optim_lr said 0.01 while the steps used 5), a step count that
 * is NaN, negative or fractional (the bias corrections, and with them the parameters, become
 * NaN or wrong), and tensors the optimizer does not have (they were dropped silently). A
 * refused load changes nothing. */
Test(optim, load_refuses_inconsistent_scalars_and_extra_tensors)
{
    char path[128];
    snprintf(path, sizeof path, "%s/adam.safetensors", dir);
    td_tensor *w = td_full(ctx, TD_F32, 1, (int64_t[]){3}, 2.0);
    td_optim_config c = td_optim_config_default(TD_OPTIM_ADAM, 0.5);
    td_optim *o;
    cr_assert_eq(td_optim_create(ctx, &c, 1, &w, (const char *[]){"w"}, &o), TD_OK);
    const struct {
        double lr, step;
        const char *extra, *want;
    } bad[] = {
        {5.0, 3, NULL, "tensor lr 5 differs from the metadata's tensord.optim.lr 0.01"},
        {0.01, NAN, NULL, "tensor step nan is not a count"},
        {0.01, -7, NULL, "tensor step -7 is not a count"},
        {0.01, 2.5, NULL, "tensor step 2.5 is not a count"},
        {0.01, INFINITY, NULL, "tensor step inf is not a count"},
        {0.01, 3, "b", "tensor \"b\" is not one of this optimizer's 5"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        write_adam_ckpt(path, bad[k].lr, bad[k].step, bad[k].extra);
        td_tensor *before = w;
        cr_expect_eq(td_optim_load(o, &w, path), TD_EINVAL, "case %zu loaded", k);
        cr_expect(strstr(td_last_error(ctx), bad[k].want) != NULL, "case %zu: %s", k,
                  td_last_error(ctx));
        cr_expect_eq(w, before, "case %zu: a refused load keeps the parameters", k);
        cr_expect_eq(td_optim_lr(o), 0.5, "case %zu: and the learning rate", k);
    }
    /* the consistent file loads: step 3, lr 0.01, w 1 */
    write_adam_ckpt(path, 0.01, 3, NULL);
    cr_assert_eq(td_optim_load(o, &w, path), TD_OK, "%s", td_last_error(ctx));
    cr_expect_eq(td_optim_lr(o), 0.01);
    float v[3];
    cr_assert_eq(td_read(w, v, sizeof v), TD_OK);
    cr_expect(v[0] == 1.0f && v[2] == 1.0f);
    td_optim_destroy(o);
    td_release(w);
}

Test(optim, graph_step_and_resume_match_eager_bits)
{
    char path[128];
    snprintf(path, sizeof path, "%s/resume.safetensors", dir);
    or_result e, g, r;
    memset(&e, 0, sizeof e);
    memset(&g, 0, sizeof g);
    memset(&r, 0, sizeof r);
    or_train("local:cpu", OR_EAGER, NULL, &e);
    or_train("local:cpu", OR_GRAPH, NULL, &g);
    or_train("local:cpu", OR_RESUME, path, &r);
    cr_expect(e.loss[OR_STEPS - 1] < e.loss[0], "training lowers the loss: %g -> %g", e.loss[0],
              e.loss[OR_STEPS - 1]);
    cr_expect(memcmp(&e, &g, sizeof e) == 0, "the captured step's run differs from eager");
    cr_expect(memcmp(&e, &r, sizeof e) == 0, "the resumed run differs from the uninterrupted");
}

/* Many parameters of mixed dtypes, one without a gradient between them: Adam's first step
 * moves each element by lr g / (|g| + eps) (m = (1 - beta1) g and v = (1 - beta2) g^2 after
 * the bias corrections), i.e. by lr against the gradient's sign. */
Test(optim, many_parameters_of_mixed_dtypes)
{
    enum { N = 24 };
    td_tensor *p[N], *c[N];
    for (int i = 0; i < N; i++) {
        const td_dtype dt = i % 3 == 1 ? TD_F64 : TD_F32;
        p[i] = td_full(ctx, dt, 1, (int64_t[]){2}, 1.0);
        c[i] = td_full(ctx, dt, 1, (int64_t[]){2}, i % 2 ? 0.5 : -2.0);
        cr_assert_eq(td_requires_grad(p[i], true), TD_OK);
    }
    td_optim_config cfg = td_optim_config_default(TD_OPTIM_ADAM, 0.01);
    td_optim *o;
    cr_assert_eq(td_optim_create(ctx, &cfg, N, p, NULL, &o), TD_OK, "%s", td_last_error(ctx));
    td_tensor *loss = NULL;
    for (int i = 0; i < N; i++) {
        if (i == 7) continue; /* no gradient: left alone */
        td_tensor *t = td_sum(td_mul(p[i], c[i]), 0, NULL, false);
        if (td_tensor_dtype(t) != TD_F64) t = td_cast(t, TD_F64);
        loss = loss == NULL ? t : td_add(loss, t);
    }
    cr_assert_eq(td_backward(loss), TD_OK, "%s", td_last_error(ctx));
    cr_assert_eq(td_optim_step(o, p), TD_OK, "%s", td_last_error(ctx));
    for (int i = 0; i < N; i++) {
        double v[2];
        td_tensor *d = td_cast(p[i], TD_F64);
        cr_assert_eq(td_read(d, v, sizeof v), TD_OK, "%s", td_last_error(ctx));
        const double want = i == 7 ? 1.0 : 1.0 - 0.01 * (i % 2 ? 1 : -1);
        cr_expect(fabs(v[0] - want) < 1e-6 && fabs(v[1] - want) < 1e-6,
                  "parameter %d: %.9g, want %.9g", i, v[0], want);
        td_release(d);
    }
    td_optim_destroy(o);
    for (int i = 0; i < N; i++) {
        td_release(p[i]);
        td_release(c[i]);
    }
}

/* ---- dynamic loss scaling ---- */

/* Three Adam steps on L = sum(c p p) in f32, plain or with the loss scaled by 1024 and
 * growth_interval 2; returns the parameters' bits and, scaled, the final scale. */
static void scaled_run(bool scaled, float *out, float *scale_out)
{
    const float p0[4] = {0.5f, -1.25f, 2.0f, 0.75f}, c0[4] = {1.5f, 0.25f, -0.5f, 2.0f};
    td_tensor *p = td_from_host(ctx, TD_F32, 1, (int64_t[]){4}, p0);
    td_tensor *c = td_from_host(ctx, TD_F32, 1, (int64_t[]){4}, c0);
    cr_assert_eq(td_requires_grad(p, true), TD_OK);
    td_optim_config cfg = td_optim_config_default(TD_OPTIM_ADAM, 0.1);
    if (scaled) {
        cfg.loss_scale = 1024;
        cfg.growth_interval = 2;
    }
    td_optim *o;
    cr_assert_eq(td_optim_create(ctx, &cfg, 1, &p, NULL, &o), TD_OK, "%s", td_last_error(ctx));
    for (int k = 0; k < 3; k++) {
        td_tensor *l = td_sum(td_mul(c, td_mul(p, p)), 0, NULL, false), *ls = l;
        if (scaled) cr_assert_eq(td_optim_scale_loss(o, l, &ls), TD_OK, "%s", td_last_error(ctx));
        cr_assert_eq(td_backward(ls), TD_OK, "%s", td_last_error(ctx));
        cr_assert_eq(td_optim_step(o, &p), TD_OK, "%s", td_last_error(ctx));
    }
    cr_assert_eq(td_read(p, out, 16), TD_OK, "%s", td_last_error(ctx));
    if (scaled) {
        const char *n;
        td_tensor *s;
        cr_assert_eq(td_optim_state(o, 2, &n, &s), TD_OK);
        cr_expect_str_eq(n, "loss_scale");
        cr_assert_eq(td_read(s, scale_out, 4), TD_OK);
    }
    td_optim_destroy(o);
    td_release(p);
    td_release(c);
}

Test(optim, loss_scaling_by_a_power_of_two_changes_no_bit)
{
    float a[4], b[4], scale = 0;
    scaled_run(false, a, NULL);
    scaled_run(true, b, &scale);
    cr_expect(memcmp(a, b, sizeof a) == 0, "scaled %.9g %.9g, plain %.9g %.9g", b[0], b[1], a[0],
              a[1]);
    cr_expect_eq(scale, 2048.0f, "1024 doubled once after 2 finite steps, got %g", scale);
}

/* Loss scaling over many parameters: the finiteness flags took two slots per parameter of
 * a 64-entry list, so a step over 33 or more failed. SGD lr 0.5 on d/dp sum(p) = 1 from 1:
 * every element 0.5 (the scale 1024 is a power of two: unscaling is exact). */
Test(optim, loss_scaling_over_many_parameters)
{
    enum { NP = 40 };
    td_tensor *p[NP];
    td_tensor *l = NULL;
    for (int i = 0; i < NP; i++) {
        p[i] = td_full(ctx, TD_F32, 1, (int64_t[]){2}, 1.0);
        cr_assert_eq(td_requires_grad(p[i], true), TD_OK);
    }
    td_optim_config c = td_optim_config_default(TD_OPTIM_SGD, 0.5);
    c.loss_scale = 1024;
    td_optim *o;
    cr_assert_eq(td_optim_create(ctx, &c, NP, p, NULL, &o), TD_OK, "%s", td_last_error(ctx));
    for (int i = 0; i < NP; i++) {
        td_tensor *t = td_sum(p[i], 0, NULL, false);
        td_tensor *nl = l == NULL ? t : td_add(l, t);
        if (l != NULL) {
            td_release(l);
            td_release(t);
        }
        l = nl;
    }
    td_tensor *scaled;
    cr_assert_eq(td_optim_scale_loss(o, l, &scaled), TD_OK, "%s", td_last_error(ctx));
    cr_assert_eq(td_backward(scaled), TD_OK, "%s", td_last_error(ctx));
    cr_assert_eq(td_optim_step(o, p), TD_OK, "%s", td_last_error(ctx));
    for (int i = 0; i < NP; i++) {
        float v[2];
        cr_assert_eq(td_read(p[i], v, sizeof v), TD_OK, "%s", td_last_error(ctx));
        cr_expect(v[0] == 0.5f && v[1] == 0.5f, "p%d: %g %g", i, v[0], v[1]);
    }
    td_optim_destroy(o);
    td_release(l);
    td_release(scaled);
    for (int i = 0; i < NP; i++) td_release(p[i]);
}

/* f32 master weights, f16 compute: a gradient that overflows f16 skips the step and halves
 * the scale; a gradient below f16's smallest subnormal survives only when scaled. */
Test(optim, loss_scaling_with_f16_compute)
{
    td_tensor *w = td_full(ctx, TD_F32, 1, (int64_t[]){2}, 1.0);
    cr_assert_eq(td_requires_grad(w, true), TD_OK);
    td_optim_config cfg = td_optim_config_default(TD_OPTIM_SGD, 1e6);
    cfg.loss_scale = 65536;
    td_optim *o;
    cr_assert_eq(td_optim_create(ctx, &cfg, 1, &w, NULL, &o), TD_OK, "%s", td_last_error(ctx));
    /* L = sum(w16 * 4): dL/dw16 = 4, scaled 262144: inf in f16 -> skipped */
    td_tensor *w16 = td_cast(w, TD_F16);
    td_tensor *l = td_sum(td_mul_scalar(w16, 4.0), 0, NULL, false), *ls;
    cr_assert_eq(td_optim_scale_loss(o, l, &ls), TD_OK, "%s", td_last_error(ctx));
    cr_expect_eq(td_tensor_dtype(ls), TD_F16);
    cr_assert_eq(td_backward(ls), TD_OK, "%s", td_last_error(ctx));
    cr_assert_eq(td_optim_step(o, &w), TD_OK, "%s", td_last_error(ctx));
    float v[2], scale, stepc;
    double step;
    cr_assert_eq(td_read(w, v, sizeof v), TD_OK, "%s", td_last_error(ctx));
    cr_expect(v[0] == 1.0f && v[1] == 1.0f, "an overflowing step is skipped: %g", v[0]);
    td_tensor *t;
    cr_assert_eq(td_optim_state(o, 2, NULL, &t), TD_OK);
    cr_assert_eq(td_read(t, &scale, 4), TD_OK);
    cr_expect_eq(scale, 32768.0f);
    cr_assert_eq(td_optim_state(o, 1, NULL, &t), TD_OK);
    cr_assert_eq(td_read(t, &step, 8), TD_OK);
    cr_expect_eq(step, 0.0, "a skipped step is not counted");
    (void)stepc;
    /* L = sum((w16 * 2^-14) * 2^-14) (both constants exact in f16): the gradient 2^-28 is
     * below f16's smallest subnormal (2^-24), so unscaled it is 0; scaled by 2^15 it is
     * 2^-13, exact in f16, and unscaled in f32 */
    w16 = td_cast(w, TD_F16);
    l = td_sum(td_mul_scalar(td_mul_scalar(w16, 0x1p-14), 0x1p-14), 0, NULL, false);
    cr_assert_eq(td_optim_scale_loss(o, l, &ls), TD_OK);
    cr_assert_eq(td_backward(ls), TD_OK, "%s", td_last_error(ctx));
    cr_assert_eq(td_optim_step(o, &w), TD_OK, "%s", td_last_error(ctx));
    cr_assert_eq(td_read(w, v, sizeof v), TD_OK);
    const float want = 1.0f - 1e6f * 0x1p-28f;
    cr_expect(v[0] == want && v[1] == want, "w = %.9g, want %.9g", v[0], want);
    td_optim_config plain = td_optim_config_default(TD_OPTIM_SGD, 1e6);
    td_optim *p;
    td_tensor *u = td_full(ctx, TD_F32, 1, (int64_t[]){2}, 1.0);
    cr_assert_eq(td_requires_grad(u, true), TD_OK);
    cr_assert_eq(td_optim_create(ctx, &plain, 1, &u, NULL, &p), TD_OK);
    cr_expect_eq(td_optim_scale_loss(p, l, &ls), TD_EINVAL);
    td_tensor *u16 = td_cast(u, TD_F16);
    l = td_sum(td_mul_scalar(td_mul_scalar(u16, 0x1p-14), 0x1p-14), 0, NULL, false);
    cr_assert_eq(td_backward(l), TD_OK, "%s", td_last_error(ctx));
    cr_assert_eq(td_optim_step(p, &u), TD_OK, "%s", td_last_error(ctx));
    cr_assert_eq(td_read(u, v, sizeof v), TD_OK);
    cr_expect(v[0] == 1.0f, "without scaling the f16 gradient underflows to 0: %.9g", v[0]);
    td_optim_destroy(o);
    td_optim_destroy(p);
    td_release(w);
    td_release(u);
}

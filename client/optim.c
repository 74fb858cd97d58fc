/* optim.c — optimizers (SGD, Adam, AdamW), their checkpoints and learning-rate schedules
 * (include/tensord.h, "optimizers").
 *
 * Why built this way: an update is ordinary ops recorded under td_no_grad, so it runs on
 * the device that holds the parameters, travels in the same batches as the forward and
 * backward passes (a step reads nothing back) and is captured by td_graph_begin like any
 * op. Every quantity that changes from step to step, the step count and the learning rate
 * included, is a state tensor rather than a host constant, so a captured step given the
 * state as graph inputs replays exactly what the eager step computes. The formulas follow
 * PyTorch 1.13's single-tensor torch.optim code (tensord.h states them).
 * Thread-safety: the context's rule (one thread at a time).
 */
#include "client/capture.h"
#include "common/alloc.h"
#include "tensord.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NAME_MAX_BYTES 200
#define ST_LR 0
#define ST_STEP 1
#define ST_SCALE 2 /* with loss scaling */
#define ST_TRACK 3

typedef struct pdesc {
    td_dtype dt;
    int rank;
    int64_t dims[TD_MAX_RANK];
} pdesc;

struct td_optim {
    td_context *ctx;
    td_optim_config cfg;
    int n, slots; /* parameters; state tensors per parameter */
    int first;    /* index of the first per-parameter state tensor */
    bool scaling; /* dynamic loss scaling */
    pdesc *p;
    char **names;       /* n */
    int n_state;
    td_tensor **state;  /* n_state */
    char **state_names; /* n_state */
    double lr;
};

static td_status fail(td_context *ctx, td_status st, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    td__ctx_set_error(ctx, st, msg);
    return st;
}

static bool is_float(td_dtype dt)
{
    return dt == TD_F32 || dt == TD_F64 || dt == TD_F16 || dt == TD_BF16;
}

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = td__malloc(n);
    if (d != NULL) memcpy(d, s, n);
    return d;
}

td_optim_config td_optim_config_default(td_optim_kind kind, double lr)
{
    return (td_optim_config){.kind = kind, .lr = lr, .beta1 = 0.9, .beta2 = 0.999,
                             .eps = 1e-8, .weight_decay = kind == TD_OPTIM_ADAMW ? 0.01 : 0.0,
                             .loss_scale = 0, .growth_interval = 2000};
}

static td_status check_config(td_context *ctx, const td_optim_config *c)
{
    static const char api[] = "td_optim_create";
    if (c->kind != TD_OPTIM_SGD && c->kind != TD_OPTIM_ADAM && c->kind != TD_OPTIM_ADAMW)
        return fail(ctx, TD_EINVAL, "%s: unknown kind %d", api, (int)c->kind);
    if (!(c->lr > 0) || !isfinite(c->lr))
        return fail(ctx, TD_EINVAL, "%s: lr %g must be finite and > 0", api, c->lr);
    if (!(c->weight_decay >= 0) || !isfinite(c->weight_decay))
        return fail(ctx, TD_EINVAL, "%s: weight_decay %g must be finite and >= 0", api,
                    c->weight_decay);
    if (!(c->loss_scale >= 0) || !isfinite(c->loss_scale) || c->loss_scale > 0x1p100)
        return fail(ctx, TD_EINVAL, "%s: loss_scale %g must be 0 (off) or in (0, 2^100]", api,
                    c->loss_scale);
    if (c->loss_scale > 0 && c->growth_interval < 1)
        return fail(ctx, TD_EINVAL, "%s: growth_interval %lld must be >= 1", api,
                    (long long)c->growth_interval);
    if (c->kind == TD_OPTIM_SGD) {
        if (!(c->momentum >= 0) || !isfinite(c->momentum))
            return fail(ctx, TD_EINVAL, "%s: momentum %g must be finite and >= 0", api,
                        c->momentum);
        if (c->nesterov && c->momentum == 0)
            return fail(ctx, TD_EINVAL, "%s: nesterov needs momentum > 0", api);
        return TD_OK;
    }
    if (!(c->beta1 >= 0 && c->beta1 < 1))
        return fail(ctx, TD_EINVAL, "%s: beta1 %g is outside [0, 1)", api, c->beta1);
    if (!(c->beta2 >= 0 && c->beta2 < 1))
        return fail(ctx, TD_EINVAL, "%s: beta2 %g is outside [0, 1)", api, c->beta2);
    if (!(c->eps >= 0) || !isfinite(c->eps))
        return fail(ctx, TD_EINVAL, "%s: eps %g must be finite and >= 0", api, c->eps);
    return TD_OK;
}

/* Which two entries of params[0..n) are the same handle: false when none is, else *a < *b
 * are the indexes of the first such pair in sorted order. Sorting a copy keeps the check
 * O(n log n) for the up to 2^20 parameters an optimizer takes. Sets *oom on allocation
 * failure. */
typedef struct pslot {
    const td_tensor *t;
    int i;
} pslot;

static int pslot_cmp(const void *x, const void *y)
{
    const pslot *a = x, *b = y;
    if (a->t != b->t) return (uintptr_t)a->t < (uintptr_t)b->t ? -1 : 1;
    return a->i < b->i ? -1 : a->i > b->i;
}

static bool find_twice(int n, td_tensor *const *params, int *a, int *b, bool *oom)
{
    *oom = false;
    if (n < 2) return false;
    pslot *s = td__malloc((size_t)n * sizeof *s);
    if (s == NULL) {
        *oom = true;
        return false;
    }
    for (int i = 0; i < n; i++) s[i] = (pslot){params[i], i};
    qsort(s, (size_t)n, sizeof *s, pslot_cmp);
    bool found = false;
    for (int i = 1; i < n; i++)
        if (s[i].t != NULL && s[i].t == s[i - 1].t && (!found || s[i - 1].i < *a)) {
            *a = s[i - 1].i;
            *b = s[i].i;
            found = true;
        }
    td__free(s);
    return found;
}

void td_optim_destroy(td_optim *o)
{
    if (o == NULL) return;
    for (int i = 0; i < o->n_state; i++) {
        td_release(o->state[i]);
        td__free(o->state_names[i]);
    }
    for (int i = 0; o->names != NULL && i < o->n; i++) td__free(o->names[i]);
    td__free(o->state);
    td__free(o->state_names);
    td__free(o->names);
    td__free(o->p);
    td__free(o);
}

/* td_full on the device of `like` (td_full makes it on the session's first device). */
static td_tensor *full_on(const td_tensor *like, td_dtype dt, int rank, const int64_t *dims,
                          double v)
{
    td_tensor *t = td_full(td__tensor_ctx(like), dt, rank, dims, v);
    if (t == NULL || td__ctx_tensor_device(t) == td__ctx_tensor_device(like)) return t;
    td_tensor *m = td_to_device(t, td_tensor_device(like));
    td_release(t);
    return m;
}

static const char *slot_name(const td_optim *o, int k)
{
    if (o->cfg.kind == TD_OPTIM_SGD) return "momentum_buffer";
    return k == 0 ? "exp_avg" : "exp_avg_sq";
}

td_status td_optim_create(td_context *ctx, const td_optim_config *cfg, int n,
                          td_tensor *const *params, const char *const *names, td_optim **out)
{
    static const char api[] = "td_optim_create";
    if (ctx == NULL || cfg == NULL || params == NULL || out == NULL || n < 1 || n > (1 << 20))
        return fail(ctx, TD_EINVAL, "%s: NULL argument or n %d outside 1..2^20", api, n);
    td_status st = check_config(ctx, cfg);
    if (st != TD_OK) return st;
    int a, b;
    bool oom;
    if (find_twice(n, params, &a, &b, &oom))
        return fail(ctx, TD_EINVAL, "%s: parameters %d and %d are the same tensor; give each "
                    "parameter once", api, a, b);
    if (oom) return fail(ctx, TD_ENOMEM, "%s: out of memory", api);
    td_optim *o = td__calloc(1, sizeof *o);
    if (o == NULL) return fail(ctx, TD_ENOMEM, "%s: out of memory", api);
    o->ctx = ctx;
    o->cfg = *cfg;
    o->n = n;
    o->lr = cfg->lr;
    o->slots = cfg->kind == TD_OPTIM_SGD ? (cfg->momentum > 0 ? 1 : 0) : 2;
    o->scaling = cfg->loss_scale > 0;
    o->first = o->scaling ? ST_TRACK + 1 : ST_STEP + 1;
    o->n_state = o->first + n * o->slots;
    o->p = td__calloc((size_t)n, sizeof *o->p);
    o->names = td__calloc((size_t)n, sizeof *o->names);
    o->state = td__calloc((size_t)o->n_state, sizeof *o->state);
    o->state_names = td__calloc((size_t)o->n_state, sizeof *o->state_names);
    if (o->p == NULL || o->names == NULL || o->state == NULL || o->state_names == NULL) {
        st = fail(ctx, TD_ENOMEM, "%s: out of memory", api);
        goto fail;
    }
    for (int i = 0; i < n; i++) {
        td_tensor *t = params[i];
        if (t == NULL || td__tensor_ctx(t) != ctx || !is_float(td_tensor_dtype(t))) {
            st = fail(ctx, TD_EINVAL, "%s: parameter %d is %s", api, i,
                      t == NULL ? "NULL" : td__tensor_ctx(t) != ctx ? "of another context"
                                                                    : "not a float tensor");
            goto fail;
        }
        o->p[i].dt = td_tensor_dtype(t);
        o->p[i].rank = td_rank(t);
        memcpy(o->p[i].dims, td_dims(t), sizeof(int64_t) * (size_t)o->p[i].rank);
        char buf[32];
        snprintf(buf, sizeof buf, "%d", i);
        const char *nm = names != NULL ? names[i] : buf;
        if (nm == NULL || nm[0] == '\0' || strlen(nm) > NAME_MAX_BYTES || strchr(nm, '.') ||
            strcmp(nm, "lr") == 0 || strcmp(nm, "step") == 0 || strcmp(nm, "__metadata__") == 0) {
            st = fail(ctx, TD_EINVAL, "%s: name of parameter %d (\"%s\") must be 1..%d bytes "
                      "without '.', and not lr, step or __metadata__", api, i,
                      nm != NULL ? nm : "(null)", NAME_MAX_BYTES);
            goto fail;
        }
        for (int j = 0; j < i; j++)
            if (strcmp(o->names[j], nm) == 0) {
                st = fail(ctx, TD_EINVAL, "%s: parameters %d and %d are both named \"%s\"", api,
                          j, i, nm);
                goto fail;
            }
        if ((o->names[i] = dup_str(nm)) == NULL) {
            st = fail(ctx, TD_ENOMEM, "%s: out of memory", api);
            goto fail;
        }
    }
    o->state_names[ST_LR] = dup_str("lr");
    o->state_names[ST_STEP] = dup_str("step");
    o->state[ST_LR] = td_full(ctx, TD_F64, 0, NULL, cfg->lr);
    o->state[ST_STEP] = td_full(ctx, TD_F64, 0, NULL, 0.0);
    if (o->scaling) {
        o->state_names[ST_SCALE] = dup_str("loss_scale");
        o->state_names[ST_TRACK] = dup_str("growth_tracker");
        o->state[ST_SCALE] = td_full(ctx, TD_F32, 0, NULL, cfg->loss_scale);
        o->state[ST_TRACK] = td_full(ctx, TD_F64, 0, NULL, 0.0);
    }
    for (int i = 0; i < n; i++)
        for (int k = 0; k < o->slots; k++) {
            const int j = o->first + i * o->slots + k;
            char buf[NAME_MAX_BYTES + 32];
            snprintf(buf, sizeof buf, "%s.%s", o->names[i], slot_name(o, k));
            o->state_names[j] = dup_str(buf);
            o->state[j] = full_on(params[i], o->p[i].dt, o->p[i].rank, o->p[i].dims, 0.0);
        }
    for (int j = 0; j < o->n_state; j++)
        if (o->state[j] == NULL || o->state_names[j] == NULL) {
            st = td_last_status(ctx) != TD_OK ? td_last_status(ctx) : TD_ENOMEM;
            if (o->state_names[j] == NULL) fail(ctx, TD_ENOMEM, "%s: out of memory", api);
            goto fail;
        }
    *out = o;
    return TD_OK;
fail:
    td_optim_destroy(o);
    return st;
}

/* ---- the step ---- */

typedef struct tmp_list {
    td_tensor *t[64];
    int n;
    bool failed;
} tmp_list;

/* Keep t for release at the end of the step; NULL marks failure. */
static td_tensor *K(tmp_list *l, td_tensor *t)
{
    if (t == NULL || l->n == (int)(sizeof l->t / sizeof l->t[0])) {
        l->failed = true;
        td_release(t);
        return NULL;
    }
    l->t[l->n++] = t;
    return t;
}

static void tmp_release(tmp_list *l)
{
    for (int i = 0; i < l->n; i++) td_release(l->t[i]);
    l->n = 0;
}

/* x where `like` is: x itself when they share a device, else a copy kept in l (NULL marks
 * failure). A session may span devices: each parameter's update runs on its device, and
 * the shared scalars (lr, step, loss scale) live on the first. */
static td_tensor *on_dev(tmp_list *l, td_tensor *x, const td_tensor *like)
{
    if (x == NULL) return K(l, NULL);
    if (td__ctx_tensor_device(x) == td__ctx_tensor_device(like)) return x;
    return K(l, td_to_device(x, td_tensor_device(like)));
}

/* The per-step scalars, in f64 and cast to one parameter dtype. */
typedef struct scalars {
    td_tensor *lr;        /* SGD: lr */
    td_tensor *step_size; /* Adam: lr / (1 - beta1^t) */
    td_tensor *bc2_sqrt;  /* Adam: sqrt(1 - beta2^t) */
    td_tensor *decay;     /* AdamW: 1 - lr weight_decay */
    /* The configuration's constants as rank-0 tensors of the dtype, made once per step and
     * dtype rather than once per parameter and use (td_mul_scalar makes one each call: on a
     * GPU each is an allocation and a kernel, a fifth of an Adam step's ops). The same values
     * in the same dtype as td_mul_scalar / td_add_scalar would make, so the same bits. */
    td_tensor *wd;        /* weight_decay (SGD, Adam) */
    td_tensor *momentum;  /* SGD */
    td_tensor *one_m_b1;  /* Adam: 1 - beta1 */
    td_tensor *b2;        /* Adam: beta2 */
    td_tensor *one_m_b2;  /* Adam: 1 - beta2 */
    td_tensor *eps;       /* Adam */
} scalars;

static void make_scalars(td_optim *o, tmp_list *l, td_tensor *t, const td_tensor *p,
                         scalars *s)
{
    const td_dtype dt = td_tensor_dtype(p);
    td_tensor *lr = on_dev(l, o->state[ST_LR], p);
    t = on_dev(l, t, p);
    const td_optim_config *c = &o->cfg;
    memset(s, 0, sizeof *s);
    if (c->kind != TD_OPTIM_ADAMW && c->weight_decay != 0)
        s->wd = K(l, full_on(p, dt, 0, NULL, c->weight_decay));
    if (c->kind == TD_OPTIM_SGD) {
        s->lr = dt == TD_F64 ? lr : K(l, td_cast(lr, dt));
        if (c->momentum > 0) s->momentum = K(l, full_on(p, dt, 0, NULL, c->momentum));
        return;
    }
    s->one_m_b1 = K(l, full_on(p, dt, 0, NULL, 1.0 - c->beta1));
    s->b2 = K(l, full_on(p, dt, 0, NULL, c->beta2));
    s->one_m_b2 = K(l, full_on(p, dt, 0, NULL, 1.0 - c->beta2));
    s->eps = K(l, full_on(p, dt, 0, NULL, c->eps));
    td_tensor *b1 = K(l, full_on(p, TD_F64, 0, NULL, c->beta1));
    td_tensor *b2 = K(l, full_on(p, TD_F64, 0, NULL, c->beta2));
    td_tensor *bc1 = K(l, td_add_scalar(K(l, td_neg(K(l, td_pow(b1, t)))), 1.0));
    td_tensor *bc2 = K(l, td_add_scalar(K(l, td_neg(K(l, td_pow(b2, t)))), 1.0));
    td_tensor *ss = K(l, td_div(lr, bc1));
    td_tensor *b2s = K(l, td_sqrt(bc2));
    s->step_size = dt == TD_F64 ? ss : K(l, td_cast(ss, dt));
    s->bc2_sqrt = dt == TD_F64 ? b2s : K(l, td_cast(b2s, dt));
    if (c->kind == TD_OPTIM_ADAMW) {
        td_tensor *d = K(l, td_add_scalar(K(l, td_mul_scalar(lr, -c->weight_decay)), 1.0));
        s->decay = dt == TD_F64 ? d : K(l, td_cast(d, dt));
    }
}

/* Dynamic loss scaling (PyTorch's torch.cuda.amp.GradScaler): when some gradient was not
 * finite, keep every parameter and state tensor (the step is skipped, its count too) and
 * halve the scale; else count the step, and double the scale after growth_interval
 * finite steps in a row. Every choice is a td_where on the device: no read. */
static bool scale_update(td_optim *o, tmp_list *gl, td_tensor *finite, td_tensor **fresh,
                         td_tensor *const *params, td_tensor **nstate)
{
    td_context *ctx = o->ctx;
    td_tensor *at[256] = {NULL}; /* finite on each device (td__ctx_tensor_device) */
    for (int i = 0; i < o->n; i++) {
        if (fresh[i] == NULL) continue;
        const uint32_t d = td__ctx_tensor_device(fresh[i]) & 255;
        if (at[d] == NULL && (at[d] = on_dev(gl, finite, fresh[i])) == NULL) return false;
        td_tensor *w = td_where(at[d], fresh[i], params[i]);
        td_release(fresh[i]);
        fresh[i] = w;
        if (w == NULL) return false;
    }
    for (int j = ST_STEP; j < o->n_state; j++) {
        if (nstate[j] == NULL || j == ST_SCALE || j == ST_TRACK) continue;
        const uint32_t d = td__ctx_tensor_device(nstate[j]) & 255;
        if (at[d] == NULL && (at[d] = on_dev(gl, finite, nstate[j])) == NULL) return false;
        td_tensor *w = td_where(at[d], nstate[j], o->state[j]);
        td_release(nstate[j]);
        nstate[j] = w;
        if (w == NULL) return false;
    }
    td_tensor *scale = o->state[ST_SCALE], *track = o->state[ST_TRACK];
    td_tensor *t1 = K(gl, td_add_scalar(track, 1.0));
    td_tensor *grow = K(gl, td_ge(t1, K(gl, td_full(ctx, TD_F64, 0, NULL,
                                                     (double)o->cfg.growth_interval))));
    td_tensor *kept = K(gl, td_where(grow, K(gl, td_mul_scalar(scale, 2.0)), scale));
    nstate[ST_SCALE] = td_where(finite, kept, K(gl, td_mul_scalar(scale, 0.5)));
    nstate[ST_TRACK] = td_where_scalar_b(finite, K(gl, td_where_scalar_a(grow, 0.0, t1)), 0.0);
    return !gl->failed && nstate[ST_SCALE] != NULL && nstate[ST_TRACK] != NULL;
}

td_status td_optim_scale_loss(td_optim *o, td_tensor *loss, td_tensor **scaled)
{
    if (o == NULL || loss == NULL || scaled == NULL)
        return fail(o != NULL ? o->ctx : NULL, TD_EINVAL, "td_optim_scale_loss: NULL argument");
    if (!o->scaling)
        return fail(o->ctx, TD_EINVAL, "td_optim_scale_loss: the optimizer was created with "
                    "loss_scale 0 (no loss scaling)");
    tmp_list l = {.n = 0};
    td_tensor *sc = on_dev(&l, o->state[ST_SCALE], loss);
    if (sc != NULL && td_tensor_dtype(loss) != TD_F32)
        sc = K(&l, td_cast(sc, td_tensor_dtype(loss)));
    td_tensor *r = sc != NULL ? td_mul(loss, sc) : NULL;
    tmp_release(&l);
    if (r == NULL) return td_last_status(o->ctx);
    *scaled = r;
    return TD_OK;
}

td_status td_optim_step(td_optim *o, td_tensor **params)
{
    static const char api[] = "td_optim_step";
    if (o == NULL || params == NULL)
        return fail(o != NULL ? o->ctx : NULL, TD_EINVAL, "%s: NULL argument", api);
    td_context *ctx = o->ctx;
    const td_optim_config *c = &o->cfg;
    for (int i = 0; i < o->n; i++) {
        td_tensor *p = params[i];
        if (p == NULL || td_tensor_dtype(p) != o->p[i].dt || td_rank(p) != o->p[i].rank ||
            memcmp(td_dims(p), o->p[i].dims, sizeof(int64_t) * (size_t)o->p[i].rank) != 0)
            return fail(ctx, TD_EINVAL, "%s: parameter %d (%s) is %s, not the dtype and shape "
                        "it had at td_optim_create", api, i, o->names[i],
                        p == NULL ? "NULL" : "different");
    }
    int a, b;
    bool oom;
    if (find_twice(o->n, params, &a, &b, &oom))
        return fail(ctx, TD_EINVAL, "%s: params[%d] and params[%d] are the same tensor (%s "
                    "and %s); each step replaces every parameter, so each must be given once",
                    api, a, b, o->names[a], o->names[b]);
    if (oom) return fail(ctx, TD_ENOMEM, "%s: out of memory", api);
    td_tensor **fresh = td__calloc((size_t)(o->n + o->n_state), sizeof *fresh);
    if (fresh == NULL) return fail(ctx, TD_ENOMEM, "%s: out of memory", api);
    td_tensor **nstate = fresh + o->n;
    td_status st = TD_OK;
    tmp_list l = {.n = 0};
    td_no_grad_begin(ctx);
    td_tensor *t = td_add_scalar(o->state[ST_STEP], 1.0);
    nstate[ST_STEP] = t;
    td_dtype have_dt = (td_dtype)-1;
    uint32_t have_dev = UINT32_MAX;
    scalars s = {0};
    tmp_list sl = {.n = 0}; /* the scalars of the current dtype and device */
    tmp_list gl = {.n = 0}; /* loss scaling: 1 / scale and whether every gradient is finite */
    td_tensor *inv = o->scaling ? K(&gl, td_reciprocal(o->state[ST_SCALE])) : NULL;
    td_tensor *finite = NULL;
    for (int i = 0; i < o->n && t != NULL && !l.failed && !sl.failed; i++) {
        td_tensor *p = params[i];
        td_tensor *g = td__ad_grad_peek(p);
        if (g == NULL) continue; /* no gradient: left alone, as PyTorch skips p.grad None */
        if (o->p[i].dt != have_dt || td__ctx_tensor_device(p) != have_dev) {
            tmp_release(&sl);
            make_scalars(o, &sl, t, p, &s);
            have_dt = o->p[i].dt;
            have_dev = td__ctx_tensor_device(p);
        }
        td_tensor **slot = &o->state[o->first + i * o->slots];
        td_tensor **nslot = &nstate[o->first + i * o->slots];
        if (o->scaling) { /* unscale, and note whether it is finite (on the first device) */
            td_tensor *iv = on_dev(&l, inv, p);
            g = K(&l, td_mul(g, o->p[i].dt == TD_F32 ? iv : K(&l, td_cast(iv, o->p[i].dt))));
            td_tensor *fin = on_dev(&l, K(&l, td_all(K(&l, td_isfinite(g)), 0, NULL, false)),
                                    inv);
            td_tensor *both = finite == NULL ? td_detach(fin) : td_logical_and(finite, fin);
            td_release(finite); /* its op is recorded: only the latest handle is kept */
            finite = both;
            if (finite == NULL) break;
        }
        if (c->kind != TD_OPTIM_ADAMW && c->weight_decay != 0)
            g = K(&l, td_add(g, K(&l, td_mul(p, s.wd))));
        if (c->kind == TD_OPTIM_SGD) {
            if (o->slots == 1) {
                nslot[0] = td_add(K(&l, td_mul(slot[0], s.momentum)), g);
                if (nslot[0] == NULL) break;
                g = c->nesterov ? K(&l, td_add(g, K(&l, td_mul(nslot[0], s.momentum))))
                                : nslot[0];
            }
            fresh[i] = g != NULL ? td_sub(p, K(&l, td_mul(g, s.lr))) : NULL;
        } else {
            td_tensor *pp = p;
            if (c->kind == TD_OPTIM_ADAMW) pp = K(&l, td_mul(p, s.decay));
            /* m + (g - m)(1 - beta1): torch's lerp_ with weight < 0.5 */
            nslot[0] = td_add(slot[0], K(&l, td_mul(K(&l, td_sub(g, slot[0])), s.one_m_b1)));
            nslot[1] = td_add(K(&l, td_mul(slot[1], s.b2)),
                              K(&l, td_mul(K(&l, td_mul(g, g)), s.one_m_b2)));
            if (nslot[0] == NULL || nslot[1] == NULL) break;
            td_tensor *denom = K(&l, td_add(K(&l, td_div(K(&l, td_sqrt(nslot[1])), s.bc2_sqrt)),
                                            s.eps));
            fresh[i] = td_sub(pp, K(&l, td_mul(K(&l, td_div(nslot[0], denom)), s.step_size)));
        }
        if (fresh[i] == NULL) break;
        tmp_release(&l); /* this parameter's intermediates: its ops are recorded */
    }
    bool ok = t != NULL && !l.failed && !sl.failed && !gl.failed;
    for (int i = 0; ok && i < o->n; i++)
        if (fresh[i] == NULL && td__ad_grad_peek(params[i]) != NULL)
            ok = false;
    if (ok && finite != NULL && !scale_update(o, &gl, finite, fresh, params, nstate)) ok = false;
    td_release(finite);
    tmp_release(&gl);
    tmp_release(&sl);
    tmp_release(&l);
    td_no_grad_end(ctx);
    if (!ok) {
        st = td_last_status(ctx) != TD_OK ? td_last_status(ctx) : TD_ENOMEM;
        for (int j = 0; j < o->n + o->n_state; j++) td_release(fresh[j]);
        td__free(fresh);
        return st;
    }
    for (int i = 0; i < o->n; i++) {
        if (fresh[i] == NULL) continue;
        const bool was = td_is_requires_grad(params[i]);
        td_release(params[i]);
        params[i] = fresh[i];
        if (was) td_requires_grad(params[i], true);
    }
    for (int j = ST_STEP; j < o->n_state; j++) {
        if (nstate[j] == NULL) continue;
        td_release(o->state[j]);
        o->state[j] = nstate[j];
    }
    td__free(fresh);
    return TD_OK;
}

td_status td_optim_set_lr(td_optim *o, double lr)
{
    if (o == NULL) return fail(NULL, TD_EINVAL, "td_optim_set_lr: o is NULL");
    if (!(lr > 0) || !isfinite(lr))
        return fail(o->ctx, TD_EINVAL, "td_optim_set_lr: lr %g must be finite and > 0", lr);
    td_tensor *t = td_full(o->ctx, TD_F64, 0, NULL, lr);
    if (t == NULL) return td_last_status(o->ctx);
    td_release(o->state[ST_LR]);
    o->state[ST_LR] = t;
    o->lr = lr;
    return TD_OK;
}

double td_optim_lr(const td_optim *o) { return o != NULL ? o->lr : NAN; }

int td_optim_n_state(const td_optim *o) { return o != NULL ? o->n_state : 0; }

td_status td_optim_state(const td_optim *o, int i, const char **name, td_tensor **t)
{
    if (o == NULL || t == NULL || i < 0 || i >= o->n_state)
        return fail(o != NULL ? o->ctx : NULL, TD_EINVAL, "td_optim_state: index %d is outside "
                    "0..%d or an argument is NULL", i, o != NULL ? o->n_state - 1 : -1);
    if (name != NULL) *name = o->state_names[i];
    *t = o->state[i];
    return TD_OK;
}

/* Whether t has the dtype, shape and device of state tensor i. */
static bool state_fits(const td_optim *o, int i, const td_tensor *t)
{
    const td_tensor *s = o->state[i];
    return td_tensor_dtype(t) == td_tensor_dtype(s) && td_rank(t) == td_rank(s) &&
           memcmp(td_dims(t), td_dims(s), sizeof(int64_t) * (size_t)td_rank(s)) == 0 &&
           td__ctx_tensor_device(t) == td__ctx_tensor_device(s);
}

td_status td_optim_set_state(td_optim *o, int i, td_tensor *t)
{
    if (o == NULL || t == NULL || i < 0 || i >= o->n_state)
        return fail(o != NULL ? o->ctx : NULL, TD_EINVAL, "td_optim_set_state: index %d is "
                    "outside 0..%d or an argument is NULL", i, o != NULL ? o->n_state - 1 : -1);
    if (!state_fits(o, i, t))
        return fail(o->ctx, TD_EINVAL, "td_optim_set_state: %s needs dtype %s, the shape it "
                    "has and device %s", o->state_names[i],
                    td_dtype_name(td_tensor_dtype(o->state[i])), td_tensor_device(o->state[i]));
    td_tensor *a = td_detach(t);
    if (a == NULL) return td_last_status(o->ctx);
    td_release(o->state[i]);
    o->state[i] = a;
    return TD_OK;
}

/* ---- checkpoints ---- */

static const char *kind_name(td_optim_kind k)
{
    return k == TD_OPTIM_SGD ? "sgd" : k == TD_OPTIM_ADAM ? "adam" : "adamw";
}

td_status td_optim_save(const td_optim *o, td_tensor *const *params, const char *path,
                        int n_meta, const char *const *keys, const char *const *values)
{
    if (o == NULL || params == NULL || path == NULL || n_meta < 0 ||
        (n_meta > 0 && (keys == NULL || values == NULL)))
        return fail(o != NULL ? o->ctx : NULL, TD_EINVAL, "td_optim_save: NULL argument");
    for (int i = 0; i < n_meta; i++)
        if (keys[i] != NULL &&
            (strcmp(keys[i], "tensord.optim") == 0 || strcmp(keys[i], "tensord.optim.lr") == 0))
            return fail(o->ctx, TD_EINVAL, "td_optim_save: metadata key %d \"%s\" is reserved "
                        "for the optimizer's own entry", i, keys[i]);
    const int n = o->n + o->n_state, nm = n_meta + 2;
    const char **names = td__calloc((size_t)n, sizeof *names);
    td_tensor **ts = td__calloc((size_t)n, sizeof *ts);
    const char **k = td__calloc((size_t)nm, sizeof *k), **v = td__calloc((size_t)nm, sizeof *v);
    td_status st;
    if (names == NULL || ts == NULL || k == NULL || v == NULL) {
        st = fail(o->ctx, TD_ENOMEM, "td_optim_save: out of memory");
        goto done;
    }
    for (int i = 0; i < o->n; i++) {
        names[i] = o->names[i];
        ts[i] = params[i];
    }
    for (int j = 0; j < o->n_state; j++) {
        names[o->n + j] = o->state_names[j];
        ts[o->n + j] = o->state[j];
    }
    char lr[40];
    snprintf(lr, sizeof lr, "%.17g", o->lr);
    k[0] = "tensord.optim";
    v[0] = kind_name(o->cfg.kind);
    k[1] = "tensord.optim.lr";
    v[1] = lr;
    for (int i = 0; i < n_meta; i++) {
        k[2 + i] = keys[i];
        v[2 + i] = values[i];
    }
    st = td_safetensors_save(path, n, names, ts, nm, k, v);
done:
    td__free(names);
    td__free(ts);
    td__free(k);
    td__free(v);
    return st;
}

static int str_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Every tensor of the file is one of o's (a checkpoint with more is of another model: its
 * extras would be dropped silently). The file's names are unique and each of o's was found,
 * so a count above o's means extras; only then are they looked for, to name one. */
static td_status check_extras(const td_optim *o, const td_safetensors *f, const char *path)
{
    const int n = o->n + o->n_state, have = td_safetensors_count(f);
    if (have <= n) return TD_OK;
    const char **names = td__malloc((size_t)n * sizeof *names);
    if (names == NULL) return fail(o->ctx, TD_ENOMEM, "td_optim_load: out of memory");
    for (int i = 0; i < n; i++) names[i] = i < o->n ? o->names[i] : o->state_names[i - o->n];
    qsort(names, (size_t)n, sizeof *names, str_cmp);
    const char *extra = NULL;
    for (int i = 0; i < have && extra == NULL; i++) {
        const char *nm = td_safetensors_name(f, i);
        if (bsearch(&nm, names, (size_t)n, sizeof *names, str_cmp) == NULL) extra = nm;
    }
    td__free(names);
    return fail(o->ctx, TD_EINVAL, "td_optim_load: %s: tensor \"%s\" is not one of this "
                "optimizer's %d parameters and state tensors (the file holds %d tensors)", path,
                extra != NULL ? extra : "?", n, have);
}

/* The value of rank-0 tensor t as a double (one read); false with the error set. */
static bool read_scalar(td_tensor *t, double *v)
{
    if (td_tensor_dtype(t) == TD_F64) return td_read(t, v, sizeof *v) == TD_OK;
    float x;
    if (td_read(t, &x, sizeof x) != TD_OK) return false;
    *v = x;
    return true;
}

/* The loaded scalar state must be what a run can have produced: the lr tensor the
 * metadata's learning rate (td_optim_lr reports the metadata, the steps use the tensor),
 * the step count and growth tracker whole numbers >= 0 (a NaN or negative step makes the
 * bias corrections NaN and every parameter with them), the loss scale finite and > 0. */
static td_status check_scalars(const td_optim *o, td_tensor *const *state, double lr,
                               const char *path)
{
    static const char api[] = "td_optim_load";
    double v;
    if (!read_scalar(state[ST_LR], &v)) return td_last_status(o->ctx);
    if (v != lr)
        return fail(o->ctx, TD_EINVAL, "%s: %s: tensor lr %.17g differs from the metadata's "
                    "tensord.optim.lr %.17g", api, path, v, lr);
    const int ints[2] = {ST_STEP, ST_TRACK};
    for (int k = 0; k < (o->scaling ? 2 : 1); k++) {
        if (!read_scalar(state[ints[k]], &v)) return td_last_status(o->ctx);
        if (!(v >= 0) || v > 0x1p53 || floor(v) != v)
            return fail(o->ctx, TD_EINVAL, "%s: %s: tensor %s %g is not a count (a whole "
                        "number in 0..2^53)", api, path, o->state_names[ints[k]], v);
    }
    if (o->scaling) {
        if (!read_scalar(state[ST_SCALE], &v)) return td_last_status(o->ctx);
        if (!(v > 0) || !isfinite(v))
            return fail(o->ctx, TD_EINVAL, "%s: %s: tensor loss_scale %g must be finite and > 0",
                        api, path, v);
    }
    return TD_OK;
}

td_status td_optim_load(td_optim *o, td_tensor **params, const char *path)
{
    if (o == NULL || params == NULL || path == NULL)
        return fail(o != NULL ? o->ctx : NULL, TD_EINVAL, "td_optim_load: NULL argument");
    int a, b;
    bool oom;
    if (find_twice(o->n, params, &a, &b, &oom))
        return fail(o->ctx, TD_EINVAL, "td_optim_load: params[%d] and params[%d] are the same "
                    "tensor (%s and %s); each must be given once", a, b, o->names[a],
                    o->names[b]);
    if (oom) return fail(o->ctx, TD_ENOMEM, "td_optim_load: out of memory");
    td_safetensors *f;
    td_status st = td_safetensors_open(path, &f);
    if (st != TD_OK) {
        char msg[600];
        snprintf(msg, sizeof msg, "%s", td_last_error(NULL));
        return fail(o->ctx, st, "td_optim_load: %s", msg);
    }
    const char *kind = td_safetensors_metadata(f, "tensord.optim");
    if (kind == NULL || strcmp(kind, kind_name(o->cfg.kind)) != 0) {
        st = fail(o->ctx, TD_EINVAL, "td_optim_load: %s: saved by optimizer \"%s\", this one is "
                  "\"%s\"", path, kind != NULL ? kind : "(none)", kind_name(o->cfg.kind));
        td_safetensors_close(f);
        return st;
    }
    const int n = o->n + o->n_state;
    td_tensor **fresh = td__calloc((size_t)n, sizeof *fresh);
    if (fresh == NULL) {
        td_safetensors_close(f);
        return fail(o->ctx, TD_ENOMEM, "td_optim_load: out of memory");
    }
    for (int i = 0; i < n && st == TD_OK; i++) {
        const bool is_p = i < o->n;
        const char *name = is_p ? o->names[i] : o->state_names[i - o->n];
        if (is_p)
            st = td_safetensors_get(f, o->ctx, name, o->p[i].dt, o->p[i].rank, o->p[i].dims,
                                    &fresh[i]);
        else {
            td_tensor *s = o->state[i - o->n];
            st = td_safetensors_get(f, o->ctx, name, td_tensor_dtype(s), td_rank(s), td_dims(s),
                                    &fresh[i]);
        }
        /* back on the device of the tensor it replaces (the file's land on the first) */
        const td_tensor *where = is_p ? params[i] : o->state[i - o->n];
        if (st == TD_OK && where != NULL &&
            td__ctx_tensor_device(where) != td__ctx_tensor_device(fresh[i])) {
            td_tensor *m = td_to_device(fresh[i], td_tensor_device(where));
            td_release(fresh[i]);
            fresh[i] = m;
            if (m == NULL) st = td_last_status(o->ctx);
        }
    }
    double lr = NAN;
    if (st == TD_OK) {
        const char *l = td_safetensors_metadata(f, "tensord.optim.lr");
        char *end = NULL;
        lr = l != NULL ? strtod(l, &end) : NAN;
        if (l == NULL || *end != '\0' || !(lr > 0) || !isfinite(lr))
            st = fail(o->ctx, TD_EINVAL, "td_optim_load: %s: metadata tensord.optim.lr \"%s\" "
                      "is not a learning rate", path, l != NULL ? l : "(missing)");
    }
    if (st == TD_OK) st = check_extras(o, f, path);
    td_safetensors_close(f);
    if (st == TD_OK) st = check_scalars(o, fresh + o->n, lr, path);
    if (st != TD_OK) {
        for (int i = 0; i < n; i++) td_release(fresh[i]);
        td__free(fresh);
        return st;
    }
    for (int i = 0; i < o->n; i++) {
        const bool was = td_is_requires_grad(params[i]);
        td_release(params[i]);
        params[i] = fresh[i];
        if (was) td_requires_grad(params[i], true);
    }
    for (int j = 0; j < o->n_state; j++) {
        td_release(o->state[j]);
        o->state[j] = fresh[o->n + j];
    }
    o->lr = lr;
    td__free(fresh);
    return TD_OK;
}

/* ---- schedules ---- */

double td_lr_at(const td_lr_schedule *s, int64_t step)
{
    if (s == NULL || step < 0 || s->warmup_steps < 0 || !(s->base > 0) || !isfinite(s->base))
        return NAN;
    if (step < s->warmup_steps)
        return s->base * (double)(step + 1) / (double)s->warmup_steps;
    const int64_t k = step - s->warmup_steps;
    switch (s->kind) {
    case TD_LR_CONSTANT: return s->base;
    case TD_LR_STEP:
        if (s->step_size < 1) return NAN;
        return s->base * pow(s->gamma, (double)(k / s->step_size));
    case TD_LR_COSINE: {
        if (s->total_steps < 1) return NAN;
        const double t = (double)(k < s->total_steps ? k : s->total_steps);
        return s->min + (s->base - s->min) * (1 + cos(M_PI * t / (double)s->total_steps)) / 2;
    }
    default: return NAN;
    }
}

/* main.c — fortune-lm: a small decoder-only transformer language model trained on the text
 * of Debian's `fortunes` package through tensord.
 *
 * The second example a new user runs: every tensor operation goes through
 * include/tensord.h, the gradients come from td_backward and the updates from td_optim
 * (AdamW), so the same binary trains in-process ("--device local:cpu") or on a server
 * ("--device tensord://HOST:PORT/cuda:0") and, the engine being deterministic, prints the
 * same numbers and samples both ways on the same backend.
 *
 * Data: every regular file directly in --data (default /usr/share/games/fortunes, about
 * 1.2 MB of English quotes separated by "%" lines, from the package `fortunes`; the .dat
 * indexes and .u8 links are skipped), concatenated in name order, read as bytes: the
 * vocabulary is the 256 byte values, so the loss in nats / ln 2 is bits per character.
 * The first 90% trains, the last 10% validates.
 *
 * Model (GPT-2's layout: A. Radford et al., "Language Models are Unsupervised Multitask
 * Learners", 2019; the transformer of A. Vaswani et al., "Attention is all you need", 2017):
 *   x = wte[tokens] + wpe[positions]
 *   per layer: x += proj(causal_attention(layer_norm(x)));  x += mlp(layer_norm(x))
 *   mlp(h) = gelu(h W_fc + b_fc) W_proj + b_proj (4x wide)
 *   logits = layer_norm(x) W_head
 * with td_scaled_dot_product_attention (causal). --bf16 runs the linear layers' matmuls in
 * bf16 (parameters stay f32; inputs and weights are cast to bf16 for the product and the
 * result back to f32); softmax, layer norm and the loss stay in f32.
 *
 * Output: the configuration, a progress bar (a line per evaluation otherwise) with the
 * training loss, then per evaluation "step N/M  train loss A  val loss B  bpc C", then the
 * samples, and last exactly one summary line:
 *   val loss: L  bits per char: B  steps: N  seconds: S
 * Exit status: 0 success, 1 runtime error, 2 usage error.
 */
#include "tensord.h"
#include "../getopt_flag.h"

#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define PROG "fortune-lm"
#define DEFAULT_DATA_DIR "/usr/share/games/fortunes"
#define VOCAB 256
#define MAX_LAYERS 16
#define EVAL_BATCHES 4
#define SCOPE_MAX 512

typedef struct options {
    const char *device, *data_dir;
    int64_t steps, batch, context, dim, heads, layers, limit_bytes, sample_chars, eval_every;
    double lr, weight_decay, temperature;
    uint64_t seed;
    bool bf16;
} options;

/* ---- small helpers ---- */

static uint64_t mix64(uint64_t z) /* SplitMix64's finaliser */
{
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

typedef struct rng {
    uint64_t state;
} rng;

static uint64_t rng_next(rng *r) { return mix64(r->state++); }
static double rng_unit(rng *r) { return (double)(rng_next(r) >> 11) * 0x1p-53; }

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct scope {
    td_tensor *t[SCOPE_MAX];
    int n;
} scope;

static td_tensor *keep(scope *s, td_tensor *t)
{
    if (s->n < SCOPE_MAX)
        s->t[s->n++] = t;
    else
        abort(); /* our own invariant: a forward pass records a bounded number of handles */
    return t;
}

static void scope_release(scope *s)
{
    for (int i = 0; i < s->n; i++) td_release(s->t[i]);
    s->n = 0;
}

/* ---- corpus ---- */

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* Read every regular file (not a link, not *.dat / *.u8) of dir in name order, at most
 * limit bytes (0: all). *out is malloc'ed. 0, or -1 with a message on stderr. */
static int load_corpus(const char *dir, int64_t limit, uint8_t **out, int64_t *len)
{
    DIR *d = opendir(dir);
    if (d == NULL) {
        fprintf(stderr, PROG ": %s: %s (install the Debian package fortunes, or pass --data)\n",
                dir, strerror(errno));
        return -1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || ends_with(e->d_name, ".dat") || ends_with(e->d_name, ".u8"))
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            char **nn = realloc(names, cap * sizeof *nn);
            if (nn == NULL) break;
            names = nn;
        }
        names[n] = strdup(e->d_name);
        if (names[n] != NULL) n++;
    }
    closedir(d);
    qsort(names, n, sizeof *names, name_cmp);
    uint8_t *buf = NULL;
    int64_t used = 0, bcap = 0;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0 && (limit == 0 || used < limit); i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        struct stat st;
        if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        FILE *f = fopen(path, "rb");
        if (f == NULL) {
            fprintf(stderr, PROG ": %s: %s\n", path, strerror(errno));
            rc = -1;
            break;
        }
        int64_t want = (int64_t)st.st_size;
        if (limit > 0 && used + want > limit) want = limit - used;
        if (used + want > bcap) {
            bcap = (used + want) * 2;
            uint8_t *nb = realloc(buf, (size_t)bcap);
            if (nb == NULL) {
                fprintf(stderr, PROG ": out of memory reading %s\n", path);
                fclose(f);
                rc = -1;
                break;
            }
            buf = nb;
        }
        if (fread(buf + used, 1, (size_t)want, f) != (size_t)want) {
            fprintf(stderr, PROG ": %s: short read\n", path);
            rc = -1;
        }
        used += want;
        fclose(f);
    }
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    if (rc == 0 && used == 0) {
        fprintf(stderr, PROG ": %s: no text files found\n", dir);
        rc = -1;
    }
    if (rc != 0) {
        free(buf);
        return -1;
    }
    *out = buf;
    *len = used;
    return 0;
}

/* ---- the model ---- */

enum { P_LN1_W, P_LN1_B, P_QKV_W, P_QKV_B, P_O_W, P_O_B, P_LN2_W, P_LN2_B, P_FC_W, P_FC_B,
       P_PROJ_W, P_PROJ_B, P_PER_LAYER };

typedef struct model {
    td_context *ctx;
    const options *o;
    int n;                       /* parameters */
    td_tensor **p;               /* wte, wpe, layers..., lnf_w, lnf_b, head */
    char (*names)[32];
    td_optim *opt;
} model;

static td_tensor *P(const model *m, int layer, int which)
{
    return m->p[2 + layer * P_PER_LAYER + which];
}

static int init_model(model *m, td_context *ctx, const options *o)
{
    const int64_t d = o->dim, L = o->layers;
    m->ctx = ctx;
    m->o = o;
    m->n = 2 + (int)L * P_PER_LAYER + 3;
    m->p = calloc((size_t)m->n, sizeof *m->p);
    m->names = calloc((size_t)m->n, sizeof *m->names);
    if (m->p == NULL || m->names == NULL) return -1;
    static const char *const per[P_PER_LAYER] = {"ln1_w", "ln1_b", "qkv_w", "qkv_b", "o_w", "o_b",
                                                 "ln2_w", "ln2_b", "fc_w", "fc_b", "proj_w", "proj_b"};
    uint64_t seed = o->seed;
    const double proj_std = 0.02 / sqrt(2.0 * (double)L); /* GPT-2's residual scaling */
    for (int i = 0; i < m->n; i++) {
        int64_t dims[2];
        int rank = 2;
        double std = 0.02, fill = 0.0;
        if (i == 0) {
            snprintf(m->names[i], 32, "wte");
            dims[0] = VOCAB, dims[1] = d;
        } else if (i == 1) {
            snprintf(m->names[i], 32, "wpe");
            dims[0] = o->context, dims[1] = d;
        } else if (i < m->n - 3) {
            const int l = (i - 2) / P_PER_LAYER, w = (i - 2) % P_PER_LAYER;
            snprintf(m->names[i], 32, "h%d_%s", l, per[w]);
            switch (w) {
            case P_QKV_W: dims[0] = d, dims[1] = 3 * d; break;
            case P_O_W: dims[0] = d, dims[1] = d, std = proj_std; break;
            case P_FC_W: dims[0] = d, dims[1] = 4 * d; break;
            case P_PROJ_W: dims[0] = 4 * d, dims[1] = d, std = proj_std; break;
            default:
                rank = 1;
                dims[0] = w == P_QKV_B ? 3 * d : w == P_FC_B ? 4 * d : d;
                std = 0;
                fill = w == P_LN1_W || w == P_LN2_W ? 1.0 : 0.0;
            }
        } else if (i == m->n - 1) {
            snprintf(m->names[i], 32, "head");
            dims[0] = d, dims[1] = VOCAB;
        } else {
            snprintf(m->names[i], 32, i == m->n - 3 ? "lnf_w" : "lnf_b");
            rank = 1, dims[0] = d, std = 0, fill = i == m->n - 3 ? 1.0 : 0.0;
        }
        m->p[i] = std > 0 ? td_rand_normal(ctx, TD_F32, rank, dims, mix64(seed + (uint64_t)i),
                                           0.0, std)
                          : td_full(ctx, TD_F32, rank, dims, fill);
        if (m->p[i] == NULL || td_requires_grad(m->p[i], true) != TD_OK) return -1;
    }
    td_optim_config cfg = td_optim_config_default(TD_OPTIM_ADAMW, o->lr);
    cfg.weight_decay = o->weight_decay;
    cfg.beta2 = 0.99;
    const char *names[2 + MAX_LAYERS * P_PER_LAYER + 3];
    for (int i = 0; i < m->n; i++) names[i] = m->names[i];
    return td_optim_create(ctx, &cfg, m->n, m->p, names, &m->opt) == TD_OK ? 0 : -1;
}

static void fini_model(model *m)
{
    td_optim_destroy(m->opt);
    for (int i = 0; m->p != NULL && i < m->n; i++) td_release(m->p[i]);
    free(m->p);
    free(m->names);
    memset(m, 0, sizeof *m);
}

/* x [B, T, k] times w [k, n] plus b [n] (NULL: none), as one 2-d matmul; bf16 products on
 * request. */
static td_tensor *linear(const model *m, scope *s, td_tensor *x, td_tensor *w, td_tensor *b)
{
    const int64_t *xd = td_dims(x);
    const int64_t rows = xd[0] * xd[1], k = xd[2], n = td_dims(w)[1];
    td_tensor *x2 = keep(s, td_reshape(x, 2, (int64_t[]){rows, k}));
    td_tensor *y;
    if (m->o->bf16)
        y = keep(s, td_cast(keep(s, td_matmul(keep(s, td_cast(x2, TD_BF16)),
                                              keep(s, td_cast(w, TD_BF16)))),
                            TD_F32));
    else
        y = keep(s, td_matmul(x2, w));
    if (b != NULL) y = keep(s, td_add(y, b));
    return keep(s, td_reshape(y, 3, (int64_t[]){xd[0], xd[1], n}));
}

/* [B, T, d] -> [B, H, T, d / H] */
static td_tensor *heads_of(const model *m, scope *s, td_tensor *x)
{
    const int64_t *xd = td_dims(x), h = m->o->heads;
    td_tensor *r = keep(s, td_reshape(x, 4, (int64_t[]){xd[0], xd[1], h, xd[2] / h}));
    return keep(s, td_permute(r, (int[]){0, 2, 1, 3}));
}

/* The logits [B, T, 256] of tokens idx [B, T] (T <= context). */
static td_tensor *forward(model *m, scope *s, td_tensor *idx)
{
    const options *o = m->o;
    const int64_t b = td_dims(idx)[0], t = td_dims(idx)[1], d = o->dim;
    td_tensor *flat = keep(s, td_reshape(idx, 1, (int64_t[]){b * t}));
    td_tensor *tok = keep(s, td_reshape(keep(s, td_index_select(m->p[0], flat, 0)), 3,
                                        (int64_t[]){b, t, d}));
    td_tensor *pos = t == o->context ? m->p[1]
                                     : keep(s, td_slice(m->p[1], (int64_t[]){0, 0},
                                                        (int64_t[]){t, d}));
    td_tensor *x = keep(s, td_add(tok, pos));
    for (int l = 0; l < o->layers; l++) {
        td_tensor *h = keep(s, td_layer_norm(x, 1, P(m, l, P_LN1_W), P(m, l, P_LN1_B), 1e-5));
        td_tensor *qkv = linear(m, s, h, P(m, l, P_QKV_W), P(m, l, P_QKV_B));
        td_tensor *part[3];
        for (int k = 0; k < 3; k++)
            part[k] = heads_of(m, s, keep(s, td_slice(qkv, (int64_t[]){0, 0, k * d},
                                                      (int64_t[]){b, t, (k + 1) * d})));
        td_tensor *a = keep(s, td_scaled_dot_product_attention(part[0], part[1], part[2], NULL,
                                                                true, 0.0));
        td_tensor *merged = keep(s, td_reshape(keep(s, td_permute(a, (int[]){0, 2, 1, 3})), 3,
                                               (int64_t[]){b, t, d}));
        x = keep(s, td_add(x, linear(m, s, merged, P(m, l, P_O_W), P(m, l, P_O_B))));
        h = keep(s, td_layer_norm(x, 1, P(m, l, P_LN2_W), P(m, l, P_LN2_B), 1e-5));
        td_tensor *f = keep(s, td_gelu(linear(m, s, h, P(m, l, P_FC_W), P(m, l, P_FC_B)), false));
        x = keep(s, td_add(x, linear(m, s, f, P(m, l, P_PROJ_W), P(m, l, P_PROJ_B))));
    }
    td_tensor *xf = keep(s, td_layer_norm(x, 1, m->p[m->n - 3], m->p[m->n - 2], 1e-5));
    return linear(m, s, xf, m->p[m->n - 1], NULL);
}

/* Mean cross-entropy (nats) of predicting tgt [B, T] from idx [B, T]: a rank-0 handle. */
static td_tensor *loss_of(model *m, scope *s, td_tensor *idx, td_tensor *tgt)
{
    td_tensor *logp = keep(s, td_log_softmax(forward(m, s, idx), 2));
    const int64_t *td = td_dims(tgt);
    td_tensor *t3 = keep(s, td_reshape(tgt, 3, (int64_t[]){td[0], td[1], 1}));
    td_tensor *picked = keep(s, td_gather(logp, t3, 2));
    return td_neg(keep(s, td_mean(picked, 0, NULL, false)));
}

/* A batch of b windows of T + 1 bytes from text[lo, hi) at offsets from r (or, r NULL,
 * evenly spaced from `at`): inputs and next-byte targets as TD_I64 [b, T]. */
static int make_batch(td_context *ctx, const uint8_t *text, int64_t lo, int64_t hi, int64_t b,
                      int64_t t, rng *r, int64_t at, int64_t *host, td_tensor **idx,
                      td_tensor **tgt)
{
    const int64_t span = hi - lo - t - 1;
    for (int64_t i = 0; i < b; i++) {
        int64_t off = lo + (r != NULL ? (int64_t)(rng_next(r) % (uint64_t)(span + 1))
                                      : (at + i * (span / b + 1)) % (span + 1));
        for (int64_t j = 0; j < t; j++) {
            host[i * t + j] = text[off + j];
            host[b * t + i * t + j] = text[off + j + 1];
        }
    }
    *idx = td_from_host(ctx, TD_I64, 2, (int64_t[]){b, t}, host);
    *tgt = td_from_host(ctx, TD_I64, 2, (int64_t[]){b, t}, host + b * t);
    return *idx != NULL && *tgt != NULL ? 0 : -1;
}

/* Validation loss: the mean over EVAL_BATCHES fixed batches. */
static int evaluate(model *m, const uint8_t *text, int64_t lo, int64_t hi, int64_t *host,
                    double *out)
{
    const options *o = m->o;
    double sum = 0;
    td_no_grad_begin(m->ctx);
    for (int k = 0; k < EVAL_BATCHES; k++) {
        td_tensor *idx, *tgt;
        scope s = {.n = 0};
        if (make_batch(m->ctx, text, lo, hi, o->batch, o->context, NULL, k * 7919, host, &idx,
                       &tgt) != 0) {
            td_no_grad_end(m->ctx);
            return -1;
        }
        td_tensor *l = loss_of(m, &s, idx, tgt);
        double v;
        td_status st = l != NULL ? td_read_scalar(l, &v) : TD_EINVAL;
        td_release(l);
        td_release(idx);
        td_release(tgt);
        scope_release(&s);
        if (st != TD_OK) {
            td_no_grad_end(m->ctx);
            return -1;
        }
        sum += v;
    }
    td_no_grad_end(m->ctx);
    *out = sum / EVAL_BATCHES;
    return 0;
}

/* Print `n` sampled bytes after `prompt`: each from softmax(logits / temperature) of the
 * last position (one read per byte). */
static int sample(model *m, const char *prompt, int64_t n, rng *r)
{
    const options *o = m->o;
    int64_t *ctxbuf = malloc((size_t)(o->context) * sizeof *ctxbuf);
    if (ctxbuf == NULL) return -1;
    size_t plen = strlen(prompt);
    int64_t len = 0;
    for (size_t i = 0; i < plen; i++) {
        if (len == o->context) {
            memmove(ctxbuf, ctxbuf + 1, (size_t)(len - 1) * sizeof *ctxbuf);
            len--;
        }
        ctxbuf[len++] = (uint8_t)prompt[i];
    }
    fputs(prompt, stdout);
    int rc = 0;
    td_no_grad_begin(m->ctx);
    for (int64_t k = 0; k < n; k++) {
        scope s = {.n = 0};
        td_tensor *idx = keep(&s, td_from_host(m->ctx, TD_I64, 2, (int64_t[]){1, len}, ctxbuf));
        td_tensor *logits = forward(m, &s, idx);
        td_tensor *last = keep(&s, td_slice(logits, (int64_t[]){0, len - 1, 0},
                                            (int64_t[]){1, len, VOCAB}));
        float lg[VOCAB];
        td_status st = last != NULL ? td_read(last, lg, sizeof lg) : TD_EINVAL;
        scope_release(&s);
        if (st != TD_OK) {
            rc = -1;
            break;
        }
        double mx = -INFINITY, p[VOCAB], z = 0;
        for (int v = 0; v < VOCAB; v++) mx = fmax(mx, lg[v] / o->temperature);
        for (int v = 0; v < VOCAB; v++) z += p[v] = exp(lg[v] / o->temperature - mx);
        double u = rng_unit(r) * z;
        int c = VOCAB - 1;
        for (int v = 0; v < VOCAB; v++) {
            if (u < p[v]) {
                c = v;
                break;
            }
            u -= p[v];
        }
        putchar(c >= 32 || c == '\n' || c == '\t' ? c : '?');
        if (len == o->context) {
            memmove(ctxbuf, ctxbuf + 1, (size_t)(len - 1) * sizeof *ctxbuf);
            len--;
        }
        ctxbuf[len++] = c;
    }
    td_no_grad_end(m->ctx);
    putchar('\n');
    free(ctxbuf);
    return rc;
}

/* ---- command line ---- */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: " PROG " [options]\n"
            "Train a small decoder-only transformer on the fortune files with tensord, report\n"
            "the validation loss in bits per character and print samples.\n"
            "\n"
            "  --device URI        where tensors run (default local:cpu; tensord://HOST:PORT/cpu,\n"
            "                      tensord://HOST:PORT/cuda:0, unix:PATH/cpu, local:cuda:0)\n"
            "  --data DIR          text files to train on (default " DEFAULT_DATA_DIR ",\n"
            "                      from the Debian package fortunes)\n"
            "  --limit-bytes N     use only the first N bytes of the corpus (default all)\n"
            "  --steps N           training steps (default 300)\n"
            "  --batch N           sequences per step (default 32)\n"
            "  --context N         sequence length T (default 64)\n"
            "  --dim N             model width (default 128)\n"
            "  --heads N           attention heads, dividing --dim (default 4)\n"
            "  --layers N          transformer blocks, 1..%d (default 2)\n"
            "  --lr X              peak AdamW learning rate (default 0.003; warmup over the\n"
            "                      first 10%% of steps, then cosine to a tenth)\n"
            "  --weight-decay X    AdamW weight decay (default 0.01)\n"
            "  --bf16              linear layers' matmuls in bf16 (parameters stay f32)\n"
            "  --eval-every N      validation every N steps (default 50)\n"
            "  --sample N          bytes to sample at the end (default 300; 0: none)\n"
            "  --temperature X     sampling temperature (default 0.8)\n"
            "  --seed N            seed of initialisation, batches and sampling (default 1)\n"
            "  --help, --version\n"
            "\n"
            "The last line printed is the summary:\n"
            "  val loss: L  bits per char: B  steps: N  seconds: S\n",
            MAX_LAYERS);
}

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, PROG ": ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n\n");
    usage(stderr);
    return 2;
}

static bool parse_i64(const char *s, int64_t min, int64_t max, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < min || v > max) return false;
    *out = v;
    return true;
}

static bool parse_pos(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !isfinite(v) || v < 0) return false;
    *out = v;
    return true;
}

static int parse_args(int argc, char **argv, options *o)
{
    static const struct option longopts[] = {
        {"device", 1, NULL, 'D'},      {"data", 1, NULL, 'd'},       {"limit-bytes", 1, NULL, 'l'},
        {"steps", 1, NULL, 's'},       {"batch", 1, NULL, 'b'},      {"context", 1, NULL, 't'},
        {"dim", 1, NULL, 'm'},         {"heads", 1, NULL, 'H'},      {"layers", 1, NULL, 'L'},
        {"lr", 1, NULL, 'r'},          {"weight-decay", 1, NULL, 'w'}, {"bf16", 0, NULL, 'B'},
        {"eval-every", 1, NULL, 'e'},  {"sample", 1, NULL, 'n'},     {"temperature", 1, NULL, 'T'},
        {"seed", 1, NULL, 'S'},        {"help", 0, NULL, 'h'},       {"version", 0, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    *o = (options){.device = "local:cpu", .data_dir = DEFAULT_DATA_DIR, .steps = 300,
                   .batch = 32, .context = 64, .dim = 128, .heads = 4, .layers = 2,
                   .sample_chars = 300, .eval_every = 50, .lr = 0.003, .weight_decay = 0.01,
                   .temperature = 0.8, .seed = 1};
    opterr = 0;
    int c;
    int64_t v;
    while ((c = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
        switch (c) {
        case 'D': o->device = optarg; break;
        case 'd': o->data_dir = optarg; break;
#define INT_OPT(ch, field, lo, hi, name)                                                    \
    case ch:                                                                                \
        if (!parse_i64(optarg, lo, hi, &o->field))                                          \
            return usage_error(name " needs an integer in " #lo ".." #hi ", not '%s'", optarg); \
        break;
        INT_OPT('l', limit_bytes, 1, INT64_MAX, "--limit-bytes")
        INT_OPT('s', steps, 1, 10000000, "--steps")
        INT_OPT('b', batch, 1, 4096, "--batch")
        INT_OPT('t', context, 2, 4096, "--context")
        INT_OPT('m', dim, 1, 8192, "--dim")
        INT_OPT('H', heads, 1, 256, "--heads")
        INT_OPT('L', layers, 1, 16, "--layers") /* MAX_LAYERS */
        INT_OPT('e', eval_every, 1, 10000000, "--eval-every")
        INT_OPT('n', sample_chars, 0, 100000, "--sample")
#undef INT_OPT
        case 'r':
            if (!parse_pos(optarg, &o->lr) || o->lr == 0)
                return usage_error("--lr needs a positive number, not '%s'", optarg);
            break;
        case 'w':
            if (!parse_pos(optarg, &o->weight_decay))
                return usage_error("--weight-decay needs a number >= 0, not '%s'", optarg);
            break;
        case 'T':
            if (!parse_pos(optarg, &o->temperature) || o->temperature == 0)
                return usage_error("--temperature needs a positive number, not '%s'", optarg);
            break;
        case 'B': o->bf16 = true; break;
        case 'S': {
            char *end;
            errno = 0;
            unsigned long long s = strtoull(optarg, &end, 0);
            if (errno != 0 || end == optarg || *end != '\0' || optarg[0] == '-')
                return usage_error("--seed needs a non-negative integer, not '%s'", optarg);
            o->seed = s;
            break;
        }
        case 'h': usage(stdout); return -1;
        case 'V': printf(PROG " (tensord %s)\n", TD_VERSION_STRING); return -1;
        case ':': return usage_error("option %s needs a value", argv[optind - 1]);
        default: {
            char msg[160];
            return usage_error("%s", getopt_bad_option(longopts, argv[optind - 1], optopt, msg,
                                                        sizeof msg));
        }
        }
    }
    if (optind < argc) return usage_error("unexpected argument '%s'", argv[optind]);
    (void)v;
    if (o->dim % o->heads != 0) return usage_error("%s", "--heads must divide --dim");
    return 0;
}

int main(int argc, char **argv)
{
    options o;
    int rc = parse_args(argc, argv, &o);
    if (rc != 0) return rc < 0 ? 0 : rc;
    const bool tty = isatty(STDOUT_FILENO) == 1;
    uint8_t *text = NULL;
    int64_t len = 0;
    if (load_corpus(o.data_dir, o.limit_bytes, &text, &len) != 0) return 1;
    const int64_t split = len - len / 10;
    if (len / 10 < o.context + 2 || split < o.context + 2) {
        fprintf(stderr, PROG ": the corpus (%" PRId64 " bytes) is too short for --context %" PRId64
                        "\n", len, o.context);
        free(text);
        return 1;
    }
    int64_t *host = malloc((size_t)(2 * o.batch * o.context) * sizeof *host);
    td_context *ctx = NULL;
    model m = {0};
    rc = 1;
    td_options topts = {.client_name = PROG};
    if (host == NULL) {
        fprintf(stderr, PROG ": out of memory\n");
        goto done;
    }
    if (td_connect(o.device, &topts, &ctx) != TD_OK) {
        fprintf(stderr, PROG ": cannot connect to %s: %s\n", o.device, td_connect_error());
        goto done;
    }
    if (init_model(&m, ctx, &o) != 0) {
        fprintf(stderr, PROG ": creating the model: %s\n", td_last_error(ctx));
        goto done;
    }
    int64_t nparam = 0;
    for (int i = 0; i < m.n; i++) nparam += td_nelem(m.p[i]);
    printf(PROG ": %" PRId64 " training / %" PRId64 " validation bytes from %s on %s (%s); "
           "%" PRId64 " layers, dim %" PRId64 ", %" PRId64 " heads, context %" PRId64
           " (%" PRId64 " parameters), batch %" PRId64 ", adamw lr %g%s, seed %" PRIu64 "\n",
           split, len - split, o.data_dir, td_device_name(ctx), o.device, o.layers, o.dim,
           o.heads, o.context, nparam, o.batch, o.lr, o.bf16 ? ", bf16 matmuls" : "", o.seed);
    fflush(stdout);
    td_lr_schedule sched = {.kind = TD_LR_COSINE, .base = o.lr, .warmup_steps = o.steps / 10,
                            .total_steps = o.steps - o.steps / 10, .min = o.lr / 10};
    rng r = {.state = mix64(o.seed ^ 0x5eedULL)};
    double t0 = now_s(), val = NAN, tok_t0 = t0;
    td_tensor *acc = NULL;
    int64_t window = 0;
    for (int64_t step = 0; step < o.steps; step++) {
        td_tensor *idx, *tgt;
        if (make_batch(ctx, text, 0, split, o.batch, o.context, &r, 0, host, &idx, &tgt) != 0) {
            fprintf(stderr, PROG ": uploading a batch: %s\n", td_last_error(ctx));
            goto done;
        }
        scope s = {.n = 0};
        td_tensor *loss = loss_of(&m, &s, idx, tgt);
        td_status st = loss == NULL ? TD_EINVAL : td_backward(loss);
        scope_release(&s);
        td_release(idx);
        td_release(tgt);
        if (st == TD_OK) st = td_optim_set_lr(m.opt, td_lr_at(&sched, step));
        if (st == TD_OK) st = td_optim_step(m.opt, m.p);
        if (st != TD_OK) {
            fprintf(stderr, PROG ": recording step %" PRId64 ": %s\n", step + 1,
                    td_last_error(ctx));
            td_release(loss);
            goto done;
        }
        td_tensor *next = acc != NULL ? td_add(acc, loss) : loss;
        if (acc != NULL) {
            td_release(acc);
            td_release(loss);
        }
        acc = next;
        window++;
        const bool eval = (step + 1) % o.eval_every == 0 || step + 1 == o.steps;
        const bool bar = tty && ((step + 1) % 5 == 0 || eval);
        if (!eval && !bar) continue;
        double sum;
        if (acc == NULL || td_read_scalar(acc, &sum) != TD_OK) {
            fprintf(stderr, PROG ": training: %s\n", td_last_error(ctx));
            goto done;
        }
        const double secs = now_s() - tok_t0;
        const double tps = secs > 0 ? (double)(window * o.batch * o.context) / secs : 0;
        if (!isfinite(sum)) {
            fprintf(stderr, PROG ": the loss diverged (%g) near step %" PRId64
                            "; try a smaller --lr\n", sum, step + 1);
            goto done;
        }
        if (bar && !eval) {
            char b[25];
            int filled = (int)(24 * (step + 1) / o.steps);
            for (int i = 0; i < 24; i++) b[i] = i < filled ? '#' : '.';
            b[24] = '\0';
            printf("\rstep [%s] %" PRId64 "/%" PRId64 "  loss %.4f  %6.0f tok/s\033[K", b,
                   step + 1, o.steps, sum / (double)window, tps);
            fflush(stdout);
            continue;
        }
        td_release(acc);
        acc = NULL;
        if (evaluate(&m, text, split, len, host, &val) != 0) {
            fprintf(stderr, PROG ": validation: %s\n", td_last_error(ctx));
            goto done;
        }
        printf("%sstep %" PRId64 "/%" PRId64 "  train loss %.4f  val loss %.4f  bpc %.4f  "
               "%.0f tok/s\n", tty ? "\r\033[K" : "", step + 1, o.steps, sum / (double)window,
               val, val / log(2.0), tps);
        fflush(stdout);
        window = 0;
        tok_t0 = now_s();
    }
    double seconds = now_s() - t0;
    if (o.sample_chars > 0) {
        printf("samples:\n");
        for (int k = 0; k < 2; k++) {
            rng sr = {.state = mix64(o.seed + 1000 + (uint64_t)k)};
            if (sample(&m, k == 0 ? "The " : "%\n", o.sample_chars / 2, &sr) != 0) {
                fprintf(stderr, PROG ": sampling: %s\n", td_last_error(ctx));
                goto done;
            }
        }
    }
    printf("val loss: %.6f  bits per char: %.4f  steps: %" PRId64 "  seconds: %.1f\n", val,
           val / log(2.0), o.steps, seconds);
    rc = 0;
done:
    fflush(stdout);
    fini_model(&m);
    td_close(ctx);
    free(host);
    free(text);
    return rc;
}

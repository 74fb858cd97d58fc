/* main.c — fashion-mnist: train a small MLP or CNN on Fashion-MNIST through tensord.
 *
 * The program a new user runs first. All tensor work goes through include/tensord.h, so
 * the same binary trains in-process ("--device local:cpu") or on a remote server
 * ("--device tensord://HOST:PORT/cpu") and, because the engine is deterministic, prints
 * the same result both ways. Host work is limited to reading the IDX files, shuffling,
 * gathering each batch's u8 pixels and labels, and printing progress: the pixels are
 * scaled to [0, 1] on the device (f32(x) / 255; --upload-f32 does it on the host, as
 * before, with the same bits), so a batch crosses the wire and the bus as one byte a pixel.
 *
 * Defaults (measured in the README of this folder): hidden 256, batch 128, SGD with
 * momentum 0.9 and a learning rate of 0.1 decayed to 0 over the run by a cosine
 * (I. Loshchilov, F. Hutter, "SGDR: Stochastic Gradient Descent with Warm Restarts", ICLR
 * 2017, eq. 5 without restarts); 2 epochs reach about 0.86 test accuracy.
 * --model cnn (cnn.h): two conv + batch norm + max pool blocks (32 and 64 channels), dropout
 * 0.25 and a linear layer, trained with Adam at a peak learning rate of 0.002, the same
 * cosine decay and batch 128; gradients come from td_backward for both models.
 *
 * Output: progress (a redrawn bar on a terminal, a line every ~10% of an epoch otherwise;
 * --reports N sets how many times an epoch the loss is read; each line appears at the next
 * report point, when the read started at its own has finished, td_read_start),
 * one line per epoch, and last exactly one summary line:
 *   test accuracy: A  final loss: L  epochs: N  seconds: S
 * A: fraction of test images classified correctly (4 decimals); L: mean over the steps of
 * the last epoch of each step's mean training loss (6 decimals); S: wall seconds of
 * training plus evaluation (data loading and connecting excluded; 1 decimal). With
 * --eval-only, L and N are those stored in the loaded file's metadata.
 *
 * Exit status: 0 success, 1 runtime error (message on stderr), 2 usage error.
 */
#include "cnn.h"
#include "idx.h"
#include "mlp.h"
#include "rng.h"
#include "tensord.h"
#include "../getopt_flag.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PROG "fashion-mnist"
#define DEFAULT_DATA_DIR "/usr/share/datasets/fashion-mnist"
#define EVAL_BATCH 1000

typedef struct options {
    const char *data_dir;
    const char *device;
    int epochs;
    int64_t batch;
    int64_t hidden;
    double lr;
    double momentum;
    bool cosine;
    uint64_t seed;
    int64_t limit_train;
    int64_t limit_test;
    const char *save_path;
    const char *load_path;
    bool eval_only;
    bool graph;
    bool offer_batches; /* --offer-batches: upload batches without TD_WRITE_FRESH */
    bool upload_f32;    /* --upload-f32: scale batches on the host, upload f32 */
    bool timings;       /* --timings: where each epoch's wall time went, on stderr */
    int64_t reports;    /* --reports N: loss reads per epoch; 0: 50 on a terminal, else 10 */
    bool cnn;
    bool lr_set;
    bool momentum_set, hidden_set; /* mlp-only flags given */
} options;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: " PROG " [options]\n"
            "Train a 784-H-10 ReLU MLP (or a small CNN) on Fashion-MNIST with tensord and\n"
            "report test accuracy.\n"
            "\n"
            "  --model M           mlp (the default: SGD with momentum) or cnn (two conv + batch\n"
            "                      norm + max pool blocks, dropout, linear; Adam)\n"
            "  --device URI        where tensors run (default local:cpu):\n"
            "                        local:cpu                 in this process\n"
            "                        local:cuda:0              this process, first NVIDIA GPU\n"
            "                        tensord://HOST:PORT/cpu   a tensord server over TCP\n"
            "                                                  (/cuda:0 for its GPU)\n"
            "                        unix:PATH/cpu             a tensord server on a unix socket\n"
            "  --data DIR          directory with train-/t10k-{images-idx3,labels-idx1}-ubyte.gz\n"
            "                      (default " DEFAULT_DATA_DIR ")\n"
            "  --epochs N          passes over the training set (default 2)\n"
            "  --batch N           mini-batch size (default 128)\n"
            "  --hidden N          hidden layer width H (default 256)\n"
            "  --lr X              peak learning rate (default 0.1 for mlp, 0.002 for cnn)\n"
            "  --momentum X        SGD momentum in [0, 1) (default 0.9; mlp only)\n"
            "  --schedule S        learning-rate schedule: cosine (decay to 0 over the run,\n"
            "                      the default) or constant\n"
            "  --seed N            seed of weight initialisation and shuffling (default 1)\n"
            "  --limit-train N     use only the first N training images (default all)\n"
            "  --limit-test N      evaluate only the first N test images (default all)\n"
            "  --save FILE         write the trained weights (mlp: w1 b1 w2 b2) as safetensors\n"
            "  --load FILE         start from the weights in a safetensors FILE\n"
            "  --eval-only         with --load: evaluate only, no training\n"
            "  --graph             capture one training step as a graph and replay it (same\n"
            "                      results, bit for bit; remotely each step sends only the\n"
            "                      graph id and its bindings; mlp only)\n"
            "  --offer-batches     upload training batches without TD_WRITE_FRESH, so that a\n"
            "                      tensord offers each one of at least 1 MiB (u8 batches of\n"
            "                      1338 images or more; f32 with --upload-f32: 335) to its\n"
            "                      blob store as it does weights (slower for data that never\n"
            "                      repeats; for tensord-bench's P5 A/B)\n"
            "  --upload-f32        scale training and test batches to [0, 1] on the host and\n"
            "                      upload them as f32 (4 bytes a pixel), instead of uploading\n"
            "                      the dataset's u8 pixels and scaling them on the device\n"
            "                      (the same values, bit for bit; for A/B timing: tensord-\n"
            "                      bench --p5-configs tcp-f32)\n"
            "  --reports N         read the loss and report progress N times an epoch\n"
            "                      (default 50 on a terminal, else 10); each read is\n"
            "                      started there and waited for at the next report point,\n"
            "                      whose progress line it then prints (the last at the\n"
            "                      end of the epoch)\n"
            "  --timings           after each epoch, print to stderr where this program's\n"
            "                      time went: assembling batches, uploading them (which\n"
            "                      first submits the ops recorded before: on local:cpu it\n"
            "                      runs them; and records the pixels' scaling), recording\n"
            "                      the step's ops, and the loss\n"
            "                      reads (starting each, then waiting for it a report\n"
            "                      later: the device's backlog); milliseconds\n"
            "  --help              show this help and exit\n"
            "  --version           show the version and exit\n"
            "\n"
            "The last line printed is the summary:\n"
            "  test accuracy: A  final loss: L  epochs: N  seconds: S\n"
            "L is the mean training loss of the last epoch, S the wall time of training and\n"
            "evaluation. Exit status: 0 ok, 1 runtime error, 2 usage error.\n");
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

static bool parse_double(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !isfinite(v)) return false;
    *out = v;
    return true;
}

/* Returns 0 to run, 2 for a usage error, -1 for --help/--version (exit 0). */
static int parse_args(int argc, char **argv, options *o)
{
    enum {
        O_DATA = 256,
        O_DEVICE,
        O_EPOCHS,
        O_BATCH,
        O_HIDDEN,
        O_LR,
        O_MOMENTUM,
        O_SCHEDULE,
        O_SEED,
        O_LIMIT_TRAIN,
        O_LIMIT_TEST,
        O_SAVE,
        O_LOAD,
        O_EVAL_ONLY,
        O_GRAPH,
        O_OFFER_BATCHES,
        O_UPLOAD_F32,
        O_TIMINGS,
        O_REPORTS,
        O_MODEL,
        O_HELP,
        O_VERSION
    };
    static const struct option longopts[] = {
        {"data", required_argument, NULL, O_DATA},
        {"device", required_argument, NULL, O_DEVICE},
        {"epochs", required_argument, NULL, O_EPOCHS},
        {"batch", required_argument, NULL, O_BATCH},
        {"hidden", required_argument, NULL, O_HIDDEN},
        {"lr", required_argument, NULL, O_LR},
        {"momentum", required_argument, NULL, O_MOMENTUM},
        {"schedule", required_argument, NULL, O_SCHEDULE},
        {"seed", required_argument, NULL, O_SEED},
        {"limit-train", required_argument, NULL, O_LIMIT_TRAIN},
        {"limit-test", required_argument, NULL, O_LIMIT_TEST},
        {"save", required_argument, NULL, O_SAVE},
        {"load", required_argument, NULL, O_LOAD},
        {"eval-only", no_argument, NULL, O_EVAL_ONLY},
        {"graph", no_argument, NULL, O_GRAPH},
        {"offer-batches", no_argument, NULL, O_OFFER_BATCHES},
        {"upload-f32", no_argument, NULL, O_UPLOAD_F32},
        {"timings", no_argument, NULL, O_TIMINGS},
        {"reports", required_argument, NULL, O_REPORTS},
        {"model", required_argument, NULL, O_MODEL},
        {"help", no_argument, NULL, O_HELP},
        {"version", no_argument, NULL, O_VERSION},
        {NULL, 0, NULL, 0},
    };
    *o = (options){.data_dir = DEFAULT_DATA_DIR,
                   .device = "local:cpu",
                   .epochs = 2,
                   .batch = 128,
                   .hidden = 256,
                   .lr = 0.1,
                   .momentum = 0.9,
                   .cosine = true,
                   .seed = 1};
    opterr = 0;
    int c;
    int64_t v;
    while ((c = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
        switch (c) {
        case O_DATA:
            o->data_dir = optarg;
            break;
        case O_DEVICE:
            o->device = optarg;
            break;
        case O_EPOCHS:
            if (!parse_i64(optarg, 1, 10000, &v))
                return usage_error("--epochs needs an integer in 1..10000, not '%s'", optarg);
            o->epochs = (int)v;
            break;
        case O_BATCH:
            if (!parse_i64(optarg, 1, 65536, &o->batch))
                return usage_error("--batch needs an integer in 1..65536, not '%s'", optarg);
            break;
        case O_HIDDEN:
            if (!parse_i64(optarg, 1, 65536, &o->hidden))
                return usage_error("--hidden needs an integer in 1..65536, not '%s'", optarg);
            o->hidden_set = true;
            break;
        case O_LR:
            if (!parse_double(optarg, &o->lr) || o->lr <= 0)
                return usage_error("--lr needs a positive number, not '%s'", optarg);
            o->lr_set = true;
            break;
        case O_MOMENTUM:
            if (!parse_double(optarg, &o->momentum) || o->momentum < 0 || o->momentum >= 1)
                return usage_error("--momentum needs a number in [0, 1), not '%s'", optarg);
            o->momentum_set = true;
            break;
        case O_SCHEDULE:
            if (strcmp(optarg, "cosine") == 0)
                o->cosine = true;
            else if (strcmp(optarg, "constant") == 0)
                o->cosine = false;
            else
                return usage_error("--schedule is cosine or constant, not '%s'", optarg);
            break;
        case O_SEED: {
            char *end;
            errno = 0;
            unsigned long long s = strtoull(optarg, &end, 0);
            if (errno != 0 || end == optarg || *end != '\0' || optarg[0] == '-')
                return usage_error("--seed needs a non-negative integer, not '%s'", optarg);
            o->seed = s;
            break;
        }
        case O_LIMIT_TRAIN:
            if (!parse_i64(optarg, 1, INT64_MAX, &o->limit_train))
                return usage_error("--limit-train needs a positive integer, not '%s'", optarg);
            break;
        case O_LIMIT_TEST:
            if (!parse_i64(optarg, 1, INT64_MAX, &o->limit_test))
                return usage_error("--limit-test needs a positive integer, not '%s'", optarg);
            break;
        case O_SAVE:
            o->save_path = optarg;
            break;
        case O_LOAD:
            o->load_path = optarg;
            break;
        case O_EVAL_ONLY:
            o->eval_only = true;
            break;
        case O_GRAPH:
            o->graph = true;
            break;
        case O_OFFER_BATCHES:
            o->offer_batches = true;
            break;
        case O_UPLOAD_F32:
            o->upload_f32 = true;
            break;
        case O_TIMINGS:
            o->timings = true;
            break;
        case O_REPORTS:
            if (!parse_i64(optarg, 1, INT64_MAX, &o->reports))
                return usage_error("--reports needs a positive integer, not '%s'", optarg);
            break;
        case O_MODEL:
            if (strcmp(optarg, "cnn") == 0)
                o->cnn = true;
            else if (strcmp(optarg, "mlp") == 0)
                o->cnn = false;
            else
                return usage_error("--model is mlp or cnn, not '%s'", optarg);
            break;
        case O_HELP:
            usage(stdout);
            return -1;
        case O_VERSION:
            printf(PROG " (tensord %s)\n", TD_VERSION_STRING);
            return -1;
        case ':':
            return usage_error("option %s needs a value", argv[optind - 1]);
        default: {
            char msg[160];
            return usage_error("%s", getopt_bad_option(longopts, argv[optind - 1], optopt, msg,
                                                        sizeof msg));
        }
        }
    }
    if (optind < argc) return usage_error("unexpected argument '%s'", argv[optind]);
    if (o->eval_only && o->load_path == NULL)
        return usage_error("%s needs --load FILE", "--eval-only");
    if (o->cnn && o->graph) return usage_error("%s is for --model mlp only", "--graph");
    if (o->cnn && o->momentum_set)
        return usage_error("%s is for --model mlp only (the cnn trains with Adam)", "--momentum");
    if (o->cnn && o->hidden_set) return usage_error("%s is for --model mlp only", "--hidden");
    if (o->save_path != NULL && o->save_path[0] == '\0')
        return usage_error("%s needs a file name", "--save");
    if (o->cnn && !o->lr_set) o->lr = 0.002;
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Copy the images idx[0..b) of `d` into x (scaled to [0, 1]) and their labels into y. */
static void fill_batch(const fm_dataset *d, const int64_t *idx, int64_t b, float *x, int64_t *y)
{
    for (int64_t r = 0; r < b; r++) {
        const uint8_t *src = d->pixels + idx[r] * FM_IMAGE_PIXELS;
        float *dst = x + r * FM_IMAGE_PIXELS;
        for (int p = 0; p < FM_IMAGE_PIXELS; p++)
            dst[p] = (float)src[p] / 255.0f;
        y[r] = d->labels[idx[r]];
    }
}

/* Copy the images idx[0..b) of `d` into x as they are (u8, 0..255) and their labels into y. */
static void fill_batch_u8(const fm_dataset *d, const int64_t *idx, int64_t b, uint8_t *x,
                          int64_t *y)
{
    for (int64_t r = 0; r < b; r++) {
        memcpy(x + r * FM_IMAGE_PIXELS, d->pixels + idx[r] * FM_IMAGE_PIXELS, FM_IMAGE_PIXELS);
        y[r] = d->labels[idx[r]];
    }
}

/* State shared by the training and evaluation loops. */
typedef struct run {
    options opt;
    td_context *ctx;
    fm_mlp model;
    fm_cnn cnn;
    fm_dataset train, test;
    float *xbuf;   /* max batch * FM_IMAGE_PIXELS (--upload-f32) */
    uint8_t *xbuf8; /* max batch * FM_IMAGE_PIXELS (the u8 uploads) */
    td_tensor *k255; /* f32 scalar 255: the pixels' scale */
    int64_t *ybuf; /* max batch */
    int64_t *order;
    bool tty;
} run;

/* The images idx[0..b) of `d` into the run's host buffer (u8 as they are; scaled to f32
 * with --upload-f32) and their labels into y. */
static void fill_images(run *r, const fm_dataset *d, const int64_t *idx, int64_t b, int64_t *y)
{
    if (r->opt.upload_f32)
        fill_batch(d, idx, b, r->xbuf, y);
    else
        fill_batch_u8(d, idx, b, r->xbuf8, y);
}

/* The b filled images as an f32 [b, 784] tensor in [0, 1]: uploaded as f32 with
 * --upload-f32, else uploaded as u8 and scaled on the device, f32(x) / 255 in f32: the same
 * operations as fill_batch's, so the same bits (IEEE division, correctly rounded on every
 * backend). flags: td_from_host_ex's. NULL on error (the context's message says why). */
static td_tensor *upload_images(run *r, int64_t b, unsigned flags)
{
    const int64_t dims[2] = {b, FM_IMAGE_PIXELS};
    if (r->opt.upload_f32) return td_from_host_ex(r->ctx, TD_F32, 2, dims, r->xbuf, flags);
    td_tensor *x8 = td_from_host_ex(r->ctx, TD_U8, 2, dims, r->xbuf8, flags);
    td_tensor *xf = x8 != NULL ? td_cast(x8, TD_F32) : NULL;
    td_tensor *x = xf != NULL ? td_div(xf, r->k255) : NULL;
    td_release(x8);
    td_release(xf);
    return x;
}

static int fail_td(run *r, const char *what)
{
    fprintf(stderr, PROG ": %s: %s\n", what, td_last_error(r->ctx));
    return 1;
}

static void draw_progress(const run *r, int epoch, int64_t step, int64_t steps, double loss,
                          double ips)
{
    if (r->tty) {
        char bar[25];
        int filled = (int)(24 * step / steps);
        for (int i = 0; i < 24; i++)
            bar[i] = i < filled ? '#' : '.';
        bar[24] = '\0';
        printf("\repoch %d/%d [%s] %5" PRId64 "/%" PRId64 "  loss %.4f  %6.0f img/s\033[K", epoch,
               r->opt.epochs, bar, step, steps, loss, ips);
    } else {
        printf("epoch %d/%d  step %" PRId64 "/%" PRId64 "  loss %.6f  %.0f img/s\n", epoch,
               r->opt.epochs, step, steps, loss, ips);
    }
    fflush(stdout);
}

/* A report point's loss read in flight (td_read_start) and what its progress line shows. */
typedef struct report {
    td_pending_read *read; /* NULL: none pending */
    float sum;             /* the accumulator's f32 bytes land here */
    int64_t step, window, images;
} report;

/* Wait for rep's loss read, add it to *epoch_sum and draw its progress line; the wait is
 * added to *t_read. Returns 0, or 1 after saying why training stops. */
static int finish_report(run *r, report *rep, int epoch, int64_t steps, double t0,
                         double *epoch_sum, double *t_read)
{
    if (rep->read == NULL) return 0;
    double tp = now_s();
    td_status st = td_read_finish(rep->read);
    *t_read += now_s() - tp;
    rep->read = NULL;
    if (st != TD_OK) return fail_td(r, "training");
    double sum = rep->sum;
    if (!isfinite(sum)) {
        fprintf(stderr,
                PROG ": the loss diverged (%g) in epoch %d near step %" PRId64
                     "; try a smaller --lr\n",
                sum, epoch, rep->step);
        return 1;
    }
    *epoch_sum += sum;
    double elapsed = now_s() - t0;
    /* The bar shows the epoch's running mean (steadier when redrawn often); the lines show
     * the mean over the steps since the previous line. */
    double shown = r->tty ? *epoch_sum / (double)rep->step : sum / (double)rep->window;
    draw_progress(r, epoch, rep->step, steps, shown,
                  elapsed > 0 ? (double)rep->images / elapsed : 0.0);
    return 0;
}

/* Train for the configured epochs; *final_loss receives the last epoch's mean loss. */
static int train(run *r, double *final_loss)
{
    const options *o = &r->opt;
    const int64_t n = r->train.n;
    const int64_t steps = (n + o->batch - 1) / o->batch;
    const int64_t total_steps = steps * o->epochs;
    const int64_t reports = o->reports > 0 ? o->reports : r->tty ? 50 : 10;
    /* steps per report point, rounded up; without the overflow of steps + reports - 1 for
     * a --reports near INT64_MAX (every was 0 there: a division by zero) */
    const int64_t every = reports >= steps ? 1 : (steps + reports - 1) / reports;
    fm_rng rng = {.state = o->seed};
    td_tensor *acc = NULL;
    /* Each report point starts a read of the loss and finishes the previous point's, whose
     * line is printed then (one report late): reporting never drains the device's queue.
     * The two alternate, so a read's dst stays put while it is pending. */
    report reps[2] = {{0}};

    for (int64_t i = 0; i < n; i++)
        r->order[i] = i;
    for (int epoch = 1; epoch <= o->epochs; epoch++) {
        /* Fisher-Yates shuffle, continuing one generator across epochs. */
        for (int64_t i = n - 1; i > 0; i--) {
            int64_t j = (int64_t)fm_rng_below(&rng, (uint64_t)i + 1);
            int64_t t = r->order[i];
            r->order[i] = r->order[j];
            r->order[j] = t;
        }
        double t0 = now_s();
        double epoch_sum = 0.0;
        int64_t window = 0;
        /* --timings: seconds of this thread's wall time per phase */
        double t_fill = 0.0, t_upload = 0.0, t_record = 0.0, t_read = 0.0, tp = 0.0;
        int64_t n_reports = 0;
        acc = td_full(r->ctx, TD_F32, 0, NULL, 0.0);
        if (acc == NULL) return fail_td(r, "creating the loss accumulator");
        for (int64_t step = 0; step < steps; step++) {
            int64_t start = step * o->batch;
            int64_t b = n - start < o->batch ? n - start : o->batch;
            tp = now_s();
            fill_images(r, &r->train, r->order + start, b, r->ybuf);
            t_fill += now_s() - tp;
            tp = now_s();
            /* A shuffled batch never repeats: TD_WRITE_FRESH skips the blob offer (its
             * round trip and the server's kept copy) that weights are worth. The pixels go
             * as the dataset has them, one byte each (a quarter of f32's bytes over the
             * wire and the host-to-device copy), and are scaled on the device. */
            unsigned fresh = o->offer_batches ? 0u : TD_WRITE_FRESH;
            td_tensor *x = upload_images(r, b, fresh);
            td_tensor *y = td_from_host_ex(r->ctx, TD_I64, 2, (int64_t[]){b, 1}, r->ybuf, fresh);
            t_upload += now_s() - tp;
            tp = now_s();
            int64_t global = (int64_t)(epoch - 1) * steps + step;
            double lr = o->lr;
            if (o->cosine) lr *= 0.5 * (1.0 + cos(M_PI * (double)global / (double)total_steps));
            td_tensor *loss = NULL;
            td_status st = x == NULL || y == NULL ? TD_EINVAL
                           : o->cnn   ? fm_cnn_train_step(&r->cnn, x, y, lr, &loss)
                           : o->graph ? fm_mlp_train_step_graph(&r->model, x, y, lr, o->momentum,
                                                                &loss)
                                      : fm_mlp_train_step(&r->model, x, y, lr, o->momentum, &loss);
            td_release(x);
            td_release(y);
            if (st != TD_OK) {
                td_release(acc);
                return fail_td(r, "recording a training step");
            }
            /* Sum losses on the executor; read only at report points so steps pipeline. */
            td_tensor *next = td_add(acc, loss);
            td_release(acc);
            td_release(loss);
            acc = next;
            t_record += now_s() - tp;
            if (acc == NULL) return fail_td(r, "accumulating the loss");
            window++;
            if ((step + 1) % every != 0 && step + 1 != steps) continue;
            report *cur = &reps[n_reports % 2], *prev = &reps[(n_reports + 1) % 2];
            n_reports++;
            *cur = (report){.step = step + 1, .window = window, .images = start + b};
            tp = now_s();
            st = td_read_start(acc, &cur->sum, sizeof cur->sum, &cur->read);
            t_read += now_s() - tp;
            td_release(acc);
            acc = NULL;
            if (st != TD_OK) return fail_td(r, "training");
            if (finish_report(r, prev, epoch, steps, t0, &epoch_sum, &t_read) != 0) return 1;
            window = 0;
            if (step + 1 != steps) {
                acc = td_full(r->ctx, TD_F32, 0, NULL, 0.0);
                if (acc == NULL) return fail_td(r, "creating the loss accumulator");
            }
        }
        for (int k = 0; k < 2; k++) /* the last report point's read */
            if (finish_report(r, &reps[k], epoch, steps, t0, &epoch_sum, &t_read) != 0)
                return 1;
        double secs = now_s() - t0;
        *final_loss = epoch_sum / (double)steps;
        printf("%sepoch %d/%d  loss %.6f  %.1f s  %.0f img/s\n", r->tty ? "\r\033[K" : "", epoch,
               o->epochs, *final_loss, secs, secs > 0 ? (double)n / secs : 0.0);
        fflush(stdout);
        if (o->timings) {
            /* "other" is the progress lines and the accumulator's refills */
            double other = secs - t_fill - t_upload - t_record - t_read;
            if (other < 0) other = 0; /* rounding: the phases lie inside the epoch */
            fprintf(stderr,
                    PROG ": timings epoch %d: %.1f ms = batches %.1f + uploads %.1f + "
                         "recording %.1f + loss reads %.1f (%" PRId64 " reads) + other %.1f\n",
                    epoch, secs * 1e3, t_fill * 1e3, t_upload * 1e3, t_record * 1e3,
                    t_read * 1e3, (steps + every - 1) / every, other * 1e3);
        }
    }
    return 0;
}

static int evaluate(run *r, double *accuracy)
{
    const int64_t n = r->test.n;
    int64_t correct = 0;
    int64_t *idx = malloc(EVAL_BATCH * sizeof *idx);
    int64_t *pred = malloc(EVAL_BATCH * sizeof *pred);
    int64_t *y = r->ybuf;
    int rc = 1;
    if (idx == NULL || pred == NULL) {
        fprintf(stderr, PROG ": out of memory\n");
        goto done;
    }
    for (int64_t start = 0; start < n; start += EVAL_BATCH) {
        int64_t b = n - start < EVAL_BATCH ? n - start : EVAL_BATCH;
        for (int64_t i = 0; i < b; i++)
            idx[i] = start + i;
        fill_images(r, &r->test, idx, b, y);
        td_tensor *xt = upload_images(r, b, 0);
        td_tensor *p = r->opt.cnn ? fm_cnn_predict(&r->cnn, xt) : fm_mlp_predict(&r->model, xt);
        td_release(xt);
        if (p == NULL) {
            rc = fail_td(r, "recording the evaluation");
            goto done;
        }
        td_status st = td_read(p, pred, (size_t)b * sizeof *pred);
        td_release(p);
        if (st != TD_OK) {
            rc = fail_td(r, "evaluation");
            goto done;
        }
        for (int64_t i = 0; i < b; i++)
            correct += pred[i] == y[i];
    }
    *accuracy = n > 0 ? (double)correct / (double)n : 0.0;
    rc = 0;
done:
    free(idx);
    free(pred);
    return rc;
}

static int save_model(run *r, int n_epochs, double final_loss, double accuracy)
{
    char epochs[32], loss[40], acc[32], seed[32], arch[64], err[512];
    snprintf(epochs, sizeof epochs, "%d", n_epochs);
    snprintf(loss, sizeof loss, "%.17g", final_loss);
    snprintf(acc, sizeof acc, "%.4f", accuracy);
    snprintf(seed, sizeof seed, "%" PRIu64, r->opt.seed);
    if (r->opt.cnn)
        snprintf(arch, sizeof arch, "cnn conv%" PRId64 "-conv%" PRId64 "-fc%d batchnorm dropout",
                 r->cnn.c1, r->cnn.c2, FM_CLASSES);
    else
        snprintf(arch, sizeof arch, "mlp %d-%" PRId64 "-%d relu", FM_IMAGE_PIXELS,
                 r->opt.hidden, FM_CLASSES);
    const char *keys[] = {"format",     "architecture",  "epochs",
                          "final_loss", "test_accuracy", "seed"};
    const char *values[] = {"tensord-fashion-mnist", arch, epochs, loss, acc, seed};
    if ((r->opt.cnn ? fm_cnn_save(&r->cnn, r->opt.save_path, 6, keys, values, err, sizeof err)
                    : fm_mlp_save(&r->model, r->opt.save_path, 6, keys, values, err,
                                  sizeof err)) != 0) {
        fprintf(stderr, PROG ": %s\n", err);
        return 1;
    }
    printf("saved weights to %s\n", r->opt.save_path);
    return 0;
}

/* Warn on stderr about each f32 tensor of f (read from path) holding NaN or infinite
 * values: the file loads, but an evaluation with such weights prints an accuracy that
 * means nothing, and nothing else would say why. Tensors of other dtypes are not the
 * model's weights and are skipped. */
static void warn_nonfinite(run *r, const td_safetensors *f, const char *path)
{
    for (int i = 0; i < td_safetensors_count(f); i++) {
        const char *name = td_safetensors_name(f, i);
        td_tensor *t = NULL;
        if (td_safetensors_get(f, r->ctx, name, TD_F32, -1, NULL, &t) != TD_OK) continue;
        size_t n = td_nbytes(t) / sizeof(float);
        float *v = malloc(n > 0 ? n * sizeof *v : 1);
        unsigned long long bad = 0;
        if (v != NULL && td_read(t, v, n * sizeof *v) == TD_OK)
            for (size_t k = 0; k < n; k++) bad += !isfinite(v[k]);
        free(v);
        td_release(t);
        if (bad > 0)
            fprintf(stderr, PROG ": warning: %s: %s holds %llu NaN or infinite value%s of %zu; "
                            "results computed with these weights are meaningless\n",
                    path, name, bad, bad == 1 ? "" : "s", n);
    }
}

/* Load --load FILE into the model; with --eval-only also take the epochs and final loss
 * recorded in its metadata (0 and NaN when absent). Warns about non-finite weights. */
static int load_model(run *r, int *epochs, double *final_loss)
{
    char err[512];
    td_safetensors *f;
    if (td_safetensors_open(r->opt.load_path, &f) != TD_OK) {
        const char *e = td_last_error(NULL);
        const char *skip = "td_safetensors_open: ";
        fprintf(stderr, PROG ": %s\n", strncmp(e, skip, strlen(skip)) == 0 ? e + strlen(skip) : e);
        return 1;
    }
    int rc = r->opt.cnn ? fm_cnn_load(&r->cnn, f, err, sizeof err)
                        : fm_mlp_load(&r->model, f, r->opt.load_path, err, sizeof err);
    if (rc != 0) {
        fprintf(stderr, PROG ": %s\n", err);
    } else {
        const char *e = td_safetensors_metadata(f, "epochs");
        const char *l = td_safetensors_metadata(f, "final_loss");
        *epochs = e != NULL ? atoi(e) : 0;
        *final_loss = l != NULL ? strtod(l, NULL) : NAN;
        printf("loaded weights from %s\n", r->opt.load_path);
        warn_nonfinite(r, f, r->opt.load_path);
    }
    td_safetensors_close(f);
    return rc;
}

/* Whether --save's file can be written, checked before the data loads and training starts
 * (a CNN run takes minutes; finding a missing directory at the end loses it). Creates the
 * file if it is missing and removes it again; an existing file is opened, not truncated. */
static int check_save_path(const char *path)
{
    const bool existed = access(path, F_OK) == 0;
    int fd = open(path, O_WRONLY | O_CREAT, 0644);
    if (fd < 0) {
        fprintf(stderr, PROG ": --save %s: cannot write there: %s\n", path, strerror(errno));
        return -1;
    }
    close(fd);
    if (!existed) unlink(path);
    return 0;
}

int main(int argc, char **argv)
{
    run r = {.tty = isatty(STDOUT_FILENO) == 1};
    int rc = parse_args(argc, argv, &r.opt);
    if (rc != 0) return rc < 0 ? 0 : rc;
    const options *o = &r.opt;
    char err[1024];
    rc = 1;
    if (o->save_path != NULL && check_save_path(o->save_path) != 0) return 1;

    if (!o->eval_only &&
        fm_dataset_load(&r.train, o->data_dir, "train-images-idx3-ubyte.gz",
                        "train-labels-idx1-ubyte.gz", o->limit_train, err, sizeof err) != 0) {
        fprintf(stderr, PROG ": %s\n", err);
        goto done;
    }
    if (fm_dataset_load(&r.test, o->data_dir, "t10k-images-idx3-ubyte.gz",
                        "t10k-labels-idx1-ubyte.gz", o->limit_test, err, sizeof err) != 0) {
        fprintf(stderr, PROG ": %s\n", err);
        goto done;
    }
    int64_t max_batch = o->batch;
    if (max_batch < EVAL_BATCH) max_batch = EVAL_BATCH; /* evaluate() shares the buffers */
    r.xbuf = malloc((size_t)max_batch * FM_IMAGE_PIXELS * sizeof *r.xbuf);
    r.xbuf8 = malloc((size_t)max_batch * FM_IMAGE_PIXELS);
    r.ybuf = malloc((size_t)max_batch * sizeof *r.ybuf);
    r.order = malloc((size_t)(r.train.n ? r.train.n : 1) * sizeof *r.order);
    if (r.xbuf == NULL || r.xbuf8 == NULL || r.ybuf == NULL || r.order == NULL) {
        fprintf(stderr, PROG ": out of memory\n");
        goto done;
    }

    td_options topts = {.client_name = PROG};
    if (td_connect(o->device, &topts, &r.ctx) != TD_OK) {
        fprintf(stderr, PROG ": cannot connect to %s: %s\n", o->device, td_connect_error());
        goto done;
    }
    if (o->cnn ? fm_cnn_init(&r.cnn, r.ctx, 32, 64, 0.25, o->lr, o->seed) != TD_OK
               : fm_mlp_init(&r.model, r.ctx, FM_IMAGE_PIXELS, o->hidden, FM_CLASSES, o->seed) !=
                     TD_OK) {
        fail_td(&r, "creating the model");
        goto done;
    }
    r.k255 = td_full(r.ctx, TD_F32, 0, NULL, 255.0);
    if (r.k255 == NULL) {
        fail_td(&r, "creating the pixel scale");
        goto done;
    }
    int epochs = o->epochs;
    double final_loss = NAN;
    if (o->load_path != NULL) {
        int file_epochs;
        double file_loss;
        if (load_model(&r, &file_epochs, &file_loss) != 0) goto done;
        if (o->eval_only) {
            epochs = file_epochs;
            final_loss = file_loss;
        }
    }
    if (o->eval_only)
        printf(PROG ": evaluating %" PRId64 " test images on %s (%s)\n", r.test.n,
               td_device_name(r.ctx), o->device);
    else if (o->cnn)
        printf(PROG ": %" PRId64 " training / %" PRId64 " test images on %s (%s); model cnn "
                    "conv%" PRId64 "-conv%" PRId64 "-fc%d (batch norm, dropout 0.25), batch %" PRId64
                    ", adam lr %g (%s), seed %" PRIu64 "\n",
               r.train.n, r.test.n, td_device_name(r.ctx), o->device, r.cnn.c1, r.cnn.c2,
               FM_CLASSES, o->batch, o->lr, o->cosine ? "cosine" : "constant", o->seed);
    else
        printf(PROG ": %" PRId64 " training / %" PRId64 " test images on %s (%s); model "
                    "%d-%" PRId64 "-%d, batch %" PRId64 ", lr %g (%s), momentum %g, seed %" PRIu64
                    "\n",
               r.train.n, r.test.n, td_device_name(r.ctx), o->device, FM_IMAGE_PIXELS, o->hidden,
               FM_CLASSES, o->batch, o->lr, o->cosine ? "cosine" : "constant", o->momentum,
               o->seed);
    fflush(stdout);

    double t0 = now_s();
    if (!o->eval_only && train(&r, &final_loss) != 0) goto done;
    double accuracy = 0.0;
    if (evaluate(&r, &accuracy) != 0) goto done;
    double seconds = now_s() - t0;
    if (o->save_path != NULL && save_model(&r, epochs, final_loss, accuracy) != 0) goto done;
    printf("test accuracy: %.4f  final loss: %.6f  epochs: %d  seconds: %.1f\n", accuracy,
           final_loss, epochs, seconds);
    rc = 0;
done:
    fflush(stdout);
    fm_mlp_fini(&r.model);
    fm_cnn_fini(&r.cnn);
    td_release(r.k255);
    td_close(r.ctx);
    fm_dataset_fini(&r.train);
    fm_dataset_fini(&r.test);
    free(r.xbuf);
    free(r.xbuf8);
    free(r.ybuf);
    free(r.order);
    return rc;
}

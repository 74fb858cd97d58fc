/* qdev_module.c — "qdev", a stand-in device whose host-to-device copies really are queued,
 * built as the loadable module tensord-backend-qdev.so for tests/e2e/queued_copy.c.
 *
 * Why: a same-host GPU session answers a ShmWrite from its pinned region only once the
 * queued device copy has read the region (server/shmdone.h); until then the client must not
 * reuse the slot. Only the CUDA/HIP backend queues such copies, and CI has no GPU, so this
 * module gives a real tensord the same shape with plain memory: buffers are malloc'd but
 * host_memory is false (the server then takes the backend's write path, not a memcpy of its
 * own), and each session's stream is a FIFO of copies that a device thread of that stream
 * runs one after the other, each after a delay, so a queued copy completes well after
 * buffer_write_queued has returned. Nothing here is GPU-like beyond what that path needs.
 *
 * Ordering, as backends/backend.h asks of a stream: a queued copy runs after the stream's
 * earlier copies; every other entry that touches memory (buffer_write, buffer_read,
 * buffer_copy, buffer_free, exec) first waits until the stream's queued copies have
 * completed ("drains") and then does its work at once, which is the order a stream would
 * give it. A call without a stream drains every stream of the device. exec runs FULL only
 * (EMPTY arrives as FULL 0; RESHAPE never arrives), and only where memset gives the value:
 * 0 of any dtype, or a u8 value; supports_op says no to everything else.
 *
 * Checks of the caller's side of the contract, each a TD_EDEVICE or a "VIOLATION" line in
 * the stats file (below) that the tests look for: a copy past the end of its buffer; a
 * host_unpin while a queued copy still reads the range (the server must finish its fences
 * first: server/session.c queue_closed); a queued copy whose source is no longer pinned
 * when it runs.
 *
 * Knobs, read from the environment at device_open (the tests set them for tensord):
 *   TD_TEST_QDEV_DELAY_US   delay before each queued copy (default 3000)
 *   TD_TEST_QDEV_FENCE_FAIL 1: every fence_finish answers TD_EDEVICE after its wait
 *   TD_TEST_QDEV_FENCE_LAG_US  fence_finish returns this long after its copies completed
 *                           (a waiter the OS wakes late), default 0
 *   TD_TEST_QDEV_STATS      a file to which each stream appends one line when it is
 *                           destroyed: "qdev stream: queued Q, synchronous writes S,
 *                           fences F, fences waited W, most queued at once D" (W: fences
 *                           whose copies had not completed when fence_finish was called)
 *
 * Thread-safety: as backend.h asks; each stream's queue under its mutex, the pinned ranges
 * and the device's stream list under theirs.
 */
#include "backends/backend.h"
#include "engine/dtype.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static td__alloc_hooks g_host = {malloc, calloc, realloc, free}; /* until set_host_alloc */
static void (*g_log)(int level, const char *msg);

static long g_delay_us = 3000, g_lag_us;
static bool g_fence_fail;
static char g_stats_path[512];

static void qdev_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void qdev_log(int level, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (g_log != NULL) g_log(level, msg);
}

/* Append one line to the stats file, if there is one (O_APPEND: one write, whole). */
static void stats_line(const char *line)
{
    if (g_stats_path[0] == '\0') return;
    int fd = open(g_stats_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return;
    ssize_t n = write(fd, line, strlen(line));
    (void)n;
    close(fd);
}

/* A broken rule of the contract: logged as an error and written to the stats file. */
static void violation(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void violation(const char *fmt, ...)
{
    char msg[400], line[440];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    qdev_log(3, "qdev: %s", msg);
    snprintf(line, sizeof line, "VIOLATION: %s\n", msg);
    stats_line(line);
}

static void sleep_us(long us)
{
    if (us <= 0) return;
    struct timespec ts = {.tv_sec = us / 1000000, .tv_nsec = (us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* ---- device memory: a block whose header holds its size ---- */

#define QDEV_HDR 64 /* keeps the data 64-byte aligned after malloc's 16 */

static size_t block_size(const void *data)
{
    size_t n;
    memcpy(&n, (const char *)data - QDEV_HDR, sizeof n);
    return n;
}

/* Whether [offset, +nbytes) lies inside the block at data; a violation otherwise. */
static bool in_block(const void *data, size_t offset, size_t nbytes, const char *what)
{
    size_t size = block_size(data);
    if (offset <= size && nbytes <= size - offset) return true;
    violation("%s of [%zu, +%zu) past the end of a %zu-byte buffer", what, offset, nbytes,
              size);
    return false;
}

/* ---- pinned host ranges (host_pin): process-wide, as backend.h says ---- */

#define QDEV_PIN_MAX 32
static pthread_mutex_t g_pin_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    uintptr_t p;
    size_t nbytes;
} g_pins[QDEV_PIN_MAX];
static int g_npins;

static bool pinned(const void *src, size_t nbytes)
{
    uintptr_t a = (uintptr_t)src;
    bool in = false;
    pthread_mutex_lock(&g_pin_mu);
    for (int i = 0; i < g_npins && !in; i++)
        in = a >= g_pins[i].p && a - g_pins[i].p <= g_pins[i].nbytes &&
             nbytes <= g_pins[i].nbytes - (a - g_pins[i].p);
    pthread_mutex_unlock(&g_pin_mu);
    return in;
}

/* ---- streams: a FIFO of copies and the device thread that runs them ---- */

typedef struct qcopy {
    struct qcopy *next;
    void *dst;
    const void *src;
    size_t nbytes;
} qcopy;

typedef struct qstream {
    pthread_mutex_t mu;
    pthread_cond_t work; /* a copy was queued, or the stream stops */
    pthread_cond_t done; /* a copy completed */
    qcopy *head, *tail;  /* queued copies, oldest first; the head is the one running */
    uint64_t queued, completed; /* copies queued and completed so far, in FIFO order */
    bool stop;
    atomic_int refs; /* the session's, and one per fence not yet finished */
    pthread_t thread;
    struct qstream *next; /* the device's live streams (qdev.mu) */
    uint64_t n_sync_writes, n_fences, n_fences_waited, most_queued;
} qstream;

typedef struct qdev {
    pthread_mutex_t mu;
    qstream *streams;
} qdev;

typedef struct qfence {
    qstream *s;
    uint64_t ticket; /* done once s->completed reaches it */
} qfence;

static void *device_main(void *arg)
{
    qstream *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (s->head == NULL && !s->stop) pthread_cond_wait(&s->work, &s->mu);
        if (s->head == NULL) break; /* stopping, and nothing is queued */
        qcopy *c = s->head;
        pthread_mutex_unlock(&s->mu);
        sleep_us(g_delay_us);
        if (!pinned(c->src, c->nbytes))
            violation("a queued copy of %zu bytes runs after its source was unpinned",
                      c->nbytes);
        else
            memcpy(c->dst, c->src, c->nbytes);
        pthread_mutex_lock(&s->mu);
        s->head = c->next;
        if (s->head == NULL) s->tail = NULL;
        s->completed++;
        g_host.free_fn(c);
        pthread_cond_broadcast(&s->done);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* Wait until every copy queued on s so far has completed. */
static void drain(qstream *s)
{
    pthread_mutex_lock(&s->mu);
    const uint64_t want = s->queued;
    while (s->completed < want) pthread_cond_wait(&s->done, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

/* drain(stream), or every stream of the device for a call without one. */
static void drain_for(td__device *dev, void *stream)
{
    if (stream != NULL) {
        drain(stream);
        return;
    }
    qdev *d = dev->impl;
    pthread_mutex_lock(&d->mu);
    for (qstream *s = d->streams; s != NULL; s = s->next) drain(s);
    pthread_mutex_unlock(&d->mu);
}

static void stream_unref(qstream *s)
{
    if (atomic_fetch_sub(&s->refs, 1) != 1) return;
    pthread_cond_destroy(&s->done);
    pthread_cond_destroy(&s->work);
    pthread_mutex_destroy(&s->mu);
    g_host.free_fn(s);
}

static td_status qdev_stream_create(td__device *dev, void **out)
{
    qstream *s = g_host.calloc_fn(1, sizeof *s);
    if (s == NULL) return TD_ENOMEM;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->work, NULL);
    pthread_cond_init(&s->done, NULL);
    atomic_init(&s->refs, 1);
    if (pthread_create(&s->thread, NULL, device_main, s) != 0) {
        stream_unref(s);
        return TD_EDEVICE;
    }
    qdev *d = dev->impl;
    pthread_mutex_lock(&d->mu);
    s->next = d->streams;
    d->streams = s;
    pthread_mutex_unlock(&d->mu);
    *out = s;
    return TD_OK;
}

static void qdev_stream_destroy(td__device *dev, void *stream)
{
    qstream *s = stream;
    qdev *d = dev->impl;
    pthread_mutex_lock(&d->mu);
    for (qstream **p = &d->streams; *p != NULL; p = &(*p)->next) {
        if (*p == s) {
            *p = s->next;
            break;
        }
    }
    pthread_mutex_unlock(&d->mu);
    pthread_mutex_lock(&s->mu);
    s->stop = true; /* the thread runs what is queued, then ends */
    pthread_cond_broadcast(&s->work);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    char line[256];
    pthread_mutex_lock(&s->mu);
    snprintf(line, sizeof line,
             "qdev stream: queued %llu, synchronous writes %llu, fences %llu, fences waited "
             "%llu, most queued at once %llu\n",
             (unsigned long long)s->queued, (unsigned long long)s->n_sync_writes,
             (unsigned long long)s->n_fences, (unsigned long long)s->n_fences_waited,
             (unsigned long long)s->most_queued);
    pthread_mutex_unlock(&s->mu);
    stats_line(line);
    stream_unref(s);
}

static td_status qdev_stream_sync(td__device *dev, void *stream)
{
    drain_for(dev, stream);
    return TD_OK;
}

/* ---- the table's entries ---- */

static td_status qdev_count(int *out)
{
    *out = 1;
    return TD_OK;
}

static long env_long(const char *name, long dflt)
{
    const char *v = getenv(name);
    return v != NULL && v[0] != '\0' ? strtol(v, NULL, 10) : dflt;
}

static td_status qdev_open(td__device *dev, int index, char *err, size_t errlen)
{
    (void)index;
    qdev *d = g_host.calloc_fn(1, sizeof *d);
    if (d == NULL) {
        snprintf(err, errlen, "out of memory");
        return TD_ENOMEM;
    }
    pthread_mutex_init(&d->mu, NULL);
    g_delay_us = env_long("TD_TEST_QDEV_DELAY_US", 3000);
    g_lag_us = env_long("TD_TEST_QDEV_FENCE_LAG_US", 0);
    g_fence_fail = env_long("TD_TEST_QDEV_FENCE_FAIL", 0) == 1;
    const char *stats = getenv("TD_TEST_QDEV_STATS");
    snprintf(g_stats_path, sizeof g_stats_path, "%s", stats != NULL ? stats : "");
    dev->impl = d;
    snprintf(dev->description, sizeof dev->description,
             "queued-copy stand-in (tests; copies %ld us late%s)", g_delay_us,
             g_fence_fail ? ", fences fail" : "");
    return TD_OK;
}

static void qdev_close(td__device *dev)
{
    qdev *d = dev->impl;
    if (d == NULL) return;
    pthread_mutex_destroy(&d->mu);
    g_host.free_fn(d);
    dev->impl = NULL;
}

static td_status qdev_alloc(td__device *dev, void *stream, size_t nbytes, void **out)
{
    (void)dev, (void)stream; /* a fresh block: no queued copy can touch it */
    if (nbytes > SIZE_MAX - QDEV_HDR) return TD_ENOMEM;
    char *p = g_host.malloc_fn(QDEV_HDR + nbytes);
    if (p == NULL) return TD_ENOMEM;
    memcpy(p, &nbytes, sizeof nbytes);
    *out = p + QDEV_HDR;
    return TD_OK;
}

static void qdev_free(td__device *dev, void *stream, void *data, size_t nbytes)
{
    (void)nbytes;
    drain_for(dev, stream); /* a queued copy into it completes first */
    g_host.free_fn((char *)data - QDEV_HDR);
}

static td_status qdev_write(td__device *dev, void *stream, void *dst, size_t offset,
                            const void *src, size_t nbytes)
{
    if (!in_block(dst, offset, nbytes, "buffer_write")) return TD_EDEVICE;
    drain_for(dev, stream);
    memcpy((char *)dst + offset, src, nbytes);
    if (stream != NULL) {
        qstream *s = stream;
        pthread_mutex_lock(&s->mu);
        s->n_sync_writes++;
        pthread_mutex_unlock(&s->mu);
    }
    return TD_OK;
}

static td_status qdev_read(td__device *dev, void *stream, const void *src, size_t offset,
                           void *dst, size_t nbytes)
{
    if (!in_block(src, offset, nbytes, "buffer_read")) return TD_EDEVICE;
    drain_for(dev, stream);
    memcpy(dst, (const char *)src + offset, nbytes);
    return TD_OK;
}

static td_status qdev_copy(td__device *dev, void *stream, void *dst, const void *src,
                           size_t nbytes)
{
    if (!in_block(dst, 0, nbytes, "buffer_copy") || !in_block(src, 0, nbytes, "buffer_copy"))
        return TD_EDEVICE;
    drain_for(dev, stream);
    memmove(dst, src, nbytes);
    return TD_OK;
}

/* FULL where memset gives the value (the header comment); EMPTY and RESHAPE as backend.h
 * asks; nothing else. */
static bool qdev_supports(td__device *dev, const td__op *op, const td__desc *const *in,
                          const td__desc *out)
{
    (void)dev, (void)in, (void)out;
    if (op->opcode == TD_OP_EMPTY || op->opcode == TD_OP_RESHAPE) return true;
    if (op->opcode != TD_OP_FULL) return false;
    const double v = op->fattrs[0];
    return v == 0.0 || (op->dtype == TD_U8 && v >= 0.0 && v <= 255.0 && v == (double)(int)v);
}

static td_status qdev_exec(td__device *dev, void *stream, const td__op *op, const td__view *in,
                           const td__view *out, char *err, size_t errlen)
{
    (void)in;
    if (op->opcode != TD_OP_FULL) {
        snprintf(err, errlen, "the qdev test device runs FULL only (opcode %u)", op->opcode);
        return TD_EUNSUPPORTED;
    }
    size_t nbytes = td__dtype_size(out->desc.dtype);
    for (uint32_t i = 0; i < out->desc.rank; i++)
        if (__builtin_mul_overflow(nbytes, (size_t)out->desc.dims[i], &nbytes)) return TD_ERANGE;
    if (nbytes == 0) return TD_OK;
    if (!in_block(out->data, 0, nbytes, "exec FULL")) return TD_EDEVICE;
    drain_for(dev, stream);
    memset(out->data, (int)op->fattrs[0], nbytes);
    return TD_OK;
}

static void qdev_set_host_alloc(const td__alloc_hooks *hooks) { g_host = *hooks; }

static void qdev_set_log(void (*log)(int level, const char *msg)) { g_log = log; }

static td_status qdev_host_pin(td__device *dev, void *p, size_t nbytes, char *err,
                               size_t errlen)
{
    (void)dev;
    uintptr_t a = (uintptr_t)p;
    if (nbytes == 0 || a + nbytes < a) {
        snprintf(err, errlen, "host_pin: empty or wrapping range");
        return TD_EINVAL;
    }
    td_status st = TD_OK;
    pthread_mutex_lock(&g_pin_mu);
    for (int i = 0; i < g_npins && st == TD_OK; i++)
        if (a < g_pins[i].p + g_pins[i].nbytes && g_pins[i].p < a + nbytes) st = TD_EINVAL;
    if (st == TD_OK && g_npins == QDEV_PIN_MAX) st = TD_ENOMEM;
    if (st == TD_OK) {
        g_pins[g_npins].p = a;
        g_pins[g_npins].nbytes = nbytes;
        g_npins++;
    }
    pthread_mutex_unlock(&g_pin_mu);
    if (st == TD_EINVAL) snprintf(err, errlen, "host_pin: the range overlaps one already pinned");
    if (st == TD_ENOMEM) snprintf(err, errlen, "host_pin: %d ranges are pinned already",
                                  QDEV_PIN_MAX);
    return st;
}

/* Whether a copy queued on a stream of dev still reads from [a, a + nbytes). */
static bool queued_reads(td__device *dev, uintptr_t a, size_t nbytes)
{
    qdev *d = dev->impl;
    bool found = false;
    pthread_mutex_lock(&d->mu);
    for (qstream *s = d->streams; s != NULL && !found; s = s->next) {
        pthread_mutex_lock(&s->mu);
        for (qcopy *c = s->head; c != NULL && !found; c = c->next)
            found = (uintptr_t)c->src < a + nbytes && a < (uintptr_t)c->src + c->nbytes;
        pthread_mutex_unlock(&s->mu);
    }
    pthread_mutex_unlock(&d->mu);
    return found;
}

static void qdev_host_unpin(td__device *dev, void *p)
{
    uintptr_t a = (uintptr_t)p;
    size_t nbytes = 0;
    pthread_mutex_lock(&g_pin_mu);
    for (int i = 0; i < g_npins; i++) {
        if (g_pins[i].p != a) continue;
        nbytes = g_pins[i].nbytes;
        g_pins[i] = g_pins[--g_npins];
        break;
    }
    pthread_mutex_unlock(&g_pin_mu);
    if (nbytes != 0 && queued_reads(dev, a, nbytes))
        violation("host_unpin of a %zu-byte range that a queued copy still reads", nbytes);
}

static td_status qdev_fence_record(td__device *dev, void *stream, void **out)
{
    (void)dev;
    qstream *s = stream;
    qfence *f = g_host.malloc_fn(sizeof *f);
    if (f == NULL) return TD_EDEVICE;
    atomic_fetch_add(&s->refs, 1);
    f->s = s;
    pthread_mutex_lock(&s->mu);
    f->ticket = s->queued;
    s->n_fences++;
    pthread_mutex_unlock(&s->mu);
    *out = f;
    return TD_OK;
}

static td_status qdev_fence_finish(td__device *dev, void *fence)
{
    (void)dev;
    qfence *f = fence;
    qstream *s = f->s;
    pthread_mutex_lock(&s->mu);
    if (s->completed < f->ticket) s->n_fences_waited++;
    while (s->completed < f->ticket) pthread_cond_wait(&s->done, &s->mu);
    pthread_mutex_unlock(&s->mu);
    sleep_us(g_lag_us);
    stream_unref(s);
    g_host.free_fn(f);
    return g_fence_fail ? TD_EDEVICE : TD_OK;
}

/* backend.h's buffer_write_queued: queued when src is pinned and there is a stream (and a
 * queue entry can be had), else buffer_write. */
static td_status qdev_write_queued(td__device *dev, void *stream, void *dst, size_t offset,
                                   const void *src, size_t nbytes, bool *queued)
{
    *queued = false;
    if (nbytes == 0) return TD_OK;
    qcopy *c = NULL;
    if (stream != NULL && pinned(src, nbytes)) c = g_host.malloc_fn(sizeof *c);
    if (c == NULL) return qdev_write(dev, stream, dst, offset, src, nbytes);
    if (!in_block(dst, offset, nbytes, "buffer_write_queued")) {
        g_host.free_fn(c);
        return TD_EDEVICE;
    }
    *c = (qcopy){.dst = (char *)dst + offset, .src = src, .nbytes = nbytes};
    qstream *s = stream;
    pthread_mutex_lock(&s->mu);
    if (s->tail != NULL) s->tail->next = c;
    else s->head = c;
    s->tail = c;
    s->queued++;
    if (s->queued - s->completed > s->most_queued) s->most_queued = s->queued - s->completed;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->mu);
    *queued = true;
    return TD_OK;
}

static const td__backend qdev_backend = {
    .kind = "qdev",
    .host_memory = false,
    .device_count = qdev_count,
    .device_open = qdev_open,
    .device_close = qdev_close,
    .buffer_alloc = qdev_alloc,
    .buffer_free = qdev_free,
    .buffer_write = qdev_write,
    .buffer_read = qdev_read,
    .buffer_copy = qdev_copy,
    .stream_create = qdev_stream_create,
    .stream_destroy = qdev_stream_destroy,
    .stream_sync = qdev_stream_sync,
    .supports_op = qdev_supports,
    .exec = qdev_exec,
    .set_host_alloc = qdev_set_host_alloc,
    .set_log = qdev_set_log,
    .host_pin = qdev_host_pin,
    .host_unpin = qdev_host_unpin,
    .fence_record = qdev_fence_record,
    .fence_finish = qdev_fence_finish,
    .buffer_write_queued = qdev_write_queued,
};

TD_BACKEND_MODULE(qdev_backend)

/* context.c — the public client API: contexts, lazy tensors, batching.
 *
 * Every op call runs the engine's td__op_infer() on the client, so the returned handle has
 * its dtype and shape at once and most mistakes are reported immediately, at the call that
 * made them. Valid ops are appended to a batch that is handed to the transport (local
 * engine or remote server) on a read, a fence, td_from_host, when the batch reaches
 * batch_max_ops or batch_max_bytes, and (remote) batch_flush_us after its first op, from
 * the background flusher of client/batch.h, which shares the batch under one mutex. Tensor ids are chosen here, increasing from 1, never reused in a context.
 */
#include "client/batch.h"
#include "client/capture.h"
#include "client/transport.h"
#include "client/uri.h"
#include "common/alloc.h"
#include "common/idmap.h"
#include "engine/convert.h"
#include "engine/device.h"
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

struct td_tensor {
    td_context *ctx;
    uint64_t id;
    td__desc desc;
    bool placeholder; /* made while capturing a graph: exists only inside the graph */
    uint8_t dev;      /* index of its device in ctx->tp->devices (0 unless moved) */
};

struct td_context {
    td__transport *tp;
    td_options opts;
    uint64_t next_id;
    td__op *batch;
    size_t batch_len, batch_cap;
    uint64_t *releases;
    size_t n_releases, cap_releases;
    td__idmap handles; /* id -> td_tensor* for live handles */
    uint64_t ops_recorded;
    td_status last_status;
    uint64_t seq;    /* g_err_seq at this context's last recorded op or failure */
    bool op_failed;  /* a failure came after the last recorded op: a NULL input is its result */
    td_status dead; /* set once the transport failed: later ops are refused at once */
    char err[1024];
    bool capturing; /* between td_graph_begin and td_graph_end (client/graph.c) */
    /* Time-bound flushing (client/batch.h): NULL for local contexts. Its lock guards batch,
     * releases, batch_bytes and the transport while a batch is being sent. */
    td__flusher *flusher;
    size_t batch_bytes; /* estimated encoded size of the pending ops */
    struct td__capture *capture; /* graph.c's capture state while capturing */
    td__autodiff *ad;            /* autodiff.c's tape and leaves; NULL until first used */
    uint64_t capture_first_id;
    /* td_host_alloc buffers the transport did not give (plain memory): the pointer handed
     * out and the allocation it lies in. The transport's own are its business. */
    struct host_buf {
        void *user, *raw;
    } *host_bufs;
    size_t n_host_bufs, cap_host_bufs;
    td_pending_read *pending; /* reads started and not finished (td_read_start), a list */
    int n_pending;
};

/* A read started by td_read_start: the transport's ticket, or the outcome of a read that
 * ran at once (the transport has no asynchronous reads, or declined this one). */
struct td_pending_read {
    td_context *ctx;
    td_pending_read *prev, *next; /* ctx->pending */
    uint64_t ticket;              /* 0: it ran in td_read_start */
    td_status st;                 /* that read's status */
    char msg[1024];               /* and message when it failed */
};

static _Thread_local char g_connect_err[1024];

/* Every failure of a call on a context is also the calling thread's last failure, and op
 * calls that fail before any context is known (a NULL context, array or tensor) have only
 * this: td_last_error(NULL) reads it. `ctx_free` marks those with a bad argument other than
 * a NULL tensor (td_concat(0, ...), a NULL array or context), which td_last_error(ctx) also
 * reports while nothing newer happened on ctx. Order comes from one process-wide counter,
 * since a context may move between threads. */
static _Thread_local struct thread_err {
    uint64_t seq;
    td_status status;
    bool ctx_free;
    char msg[1024];
} g_thread_err;
static atomic_uint_fast64_t g_err_seq;

static uint64_t next_seq(void) { return (uint64_t)atomic_fetch_add(&g_err_seq, 1) + 1; }

static void thread_err_vset(td_status st, bool ctx_free, const char *fmt, va_list ap)
{
    g_thread_err.seq = next_seq();
    g_thread_err.status = st;
    g_thread_err.ctx_free = ctx_free;
    vsnprintf(g_thread_err.msg, sizeof g_thread_err.msg, fmt, ap);
}

static void thread_note(td_status st, bool ctx_free, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void thread_note(td_status st, bool ctx_free, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    thread_err_vset(st, ctx_free, fmt, ap);
    va_end(ap);
}

/* An op call failed on an argument with no context to record to (a NULL context or array, a
 * bad count): the calling thread's record only, marked context-free. Returns NULL. */
static td_tensor *thread_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static td_tensor *thread_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    thread_err_vset(TD_EINVAL, true, fmt, ap);
    va_end(ap);
    return NULL;
}

static void flush_due(void *arg);
static bool drive_due(void *arg);

void td__set_connect_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void td__set_connect_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_connect_err, sizeof g_connect_err, fmt, ap);
    va_end(ap);
}

const char *td_connect_error(void) { return g_connect_err; }

void td__transport_defer(td__transport *t, td_status st, const char *msg)
{
    if (t->deferred != TD_OK) return;
    t->deferred = st;
    snprintf(t->deferred_msg, sizeof t->deferred_msg, "%s", msg);
}

static void set_err_status(td_context *ctx, td_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_err_status(td_context *ctx, td_status st, const char *fmt, ...)
{
    ctx->last_status = st;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->err, sizeof ctx->err, fmt, ap);
    va_end(ap);
    ctx->op_failed = true;
    g_thread_err.seq = ctx->seq = next_seq();
    g_thread_err.status = st;
    g_thread_err.ctx_free = false;
    snprintf(g_thread_err.msg, sizeof g_thread_err.msg, "%s", ctx->err);
}

/* Most client-side failures are argument errors; set_err_status names others. */
static void set_err(td_context *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_err(td_context *ctx, const char *fmt, ...)
{
    char msg[sizeof ctx->err];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    set_err_status(ctx, TD_EINVAL, "%s", msg);
}

/* Input `which` of op `api` is NULL. `ctx` is another input's context (NULL if none). A
 * NULL input is normally the result of an op call that failed just before (a chain such as
 * td_relu(td_add(a, b))): when ctx's last failure came after its last recorded op, ctx keeps
 * that failure's message, which names the op that failed first; otherwise this call is the
 * first failure and ctx records it. The thread's record always names this call. */
static td_tensor *null_input(td_context *ctx, const char *api, const char *which)
{
    if (ctx != NULL && !ctx->op_failed) {
        set_err(ctx, "%s: input %s is NULL", api, which);
    } else {
        thread_note(TD_EINVAL, false, "%s: input %s is NULL", api, which);
    }
    return NULL;
}

/* ---- connecting ---- */

/* "cpu", "cpu:0", "cuda:1", "hip:0", "vulkan:2", "auto" */
static bool looks_like_one_device(const char *s)
{
    if (strcmp(s, "auto") == 0) return true;
    static const char *kinds[] = {"cpu", "cuda", "hip", "vulkan"};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        size_t n = strlen(kinds[i]);
        if (strncmp(s, kinds[i], n) != 0) continue;
        if (s[n] == '\0') return true;
        if (s[n] != ':' || s[n + 1] == '\0') return false;
        for (const char *p = s + n + 1; *p; p++)
            if (*p < '0' || *p > '9') return false;
        return true;
    }
    return false;
}

/* The last component of a unix: uri is a device list when its first entry looks like a
 * device ("cpu:0,cpu:1", and "cpu:0,bogus", whose bad entry the server then names); a
 * socket named "a,b.sock" is part of the path. */
static bool looks_like_device(const char *s)
{
    char buf[64];
    if (strlen(s) >= sizeof buf || s[0] == '\0') return false;
    snprintf(buf, sizeof buf, "%s", s);
    buf[strcspn(buf, ",")] = '\0';
    return looks_like_one_device(buf);
}

/* How much of a uri (or a path taken from one) a connect error echoes: a uri may be any
 * length, and the message must still say what is wrong with it after the echo. */
#define URI_ECHO_BYTES 200
typedef struct uri_echo {
    char text[URI_ECHO_BYTES + 48];
} uri_echo;

/* s itself when it has at most URI_ECHO_BYTES bytes, else its first URI_ECHO_BYTES bytes,
 * an ellipsis (as echo_name's) and its length. */
static uri_echo echo_uri(const char *s)
{
    uri_echo e;
    size_t n = strlen(s);
    if (n <= URI_ECHO_BYTES)
        snprintf(e.text, sizeof e.text, "%s", s);
    else
        snprintf(e.text, sizeof e.text, "%.*s\xe2\x80\xa6 (%zu bytes)", URI_ECHO_BYTES, s, n);
    return e;
}

/* Check the port of each comma-separated HOST:PORT entry of `list` (len bytes; IPv6 hosts
 * in brackets): decimal, 1..65535. Returns TD_OK, or TD_EINVAL naming the entry (and
 * `shown`, the uri as errors echo it). */
static td_status check_ports(const char *shown, const char *list, size_t len)
{
    int entry = 0;
    for (const char *p = list, *end = list + len; p < end;) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *e = comma != NULL ? comma : end;
        entry++;
        const char *colon = NULL, *host_end = p;
        if (*p == '[') /* [IPv6]:PORT: the port's colon follows the bracket */
            while (host_end < e && *host_end != ']') host_end++;
        for (const char *q = host_end; q < e; q++)
            if (*q == ':') colon = q;
        if (colon != NULL) { /* a missing port is the caller's error to report */
            unsigned long port = 0;
            bool digits = colon + 1 < e && e - colon <= 6;
            for (const char *q = colon + 1; digits && q < e; q++) {
                digits = *q >= '0' && *q <= '9';
                port = port * 10 + (unsigned long)(*q - '0');
            }
            if (!digits || port < 1 || port > 65535) {
                int el = (int)(e - p), pl = (int)(e - colon - 1);
                if (el > 64) el = 64; /* an entry of a long uri: its start names it */
                if (pl > 16) pl = 16;
                if (comma != NULL || p != list)
                    td__set_connect_error("malformed uri '%s': entry %d (%.*s) has port '%.*s', "
                                          "want 1..65535", shown, entry, el, p, pl, colon + 1);
                else
                    td__set_connect_error("malformed uri '%s': port '%.*s' of %.*s is not "
                                          "1..65535", shown, pl, colon + 1, el, p);
                return TD_EINVAL;
            }
        }
        p = e + 1;
    }
    return TD_OK;
}

bool td__uri_same_device(const char *a, const char *b)
{
    if (strcmp(a, b) == 0) return true;
    return (strcmp(a, "cpu") == 0 && strcmp(b, "cpu:0") == 0) ||
           (strcmp(a, "cpu:0") == 0 && strcmp(b, "cpu") == 0);
}

int td__device_list_split(const char *list, char first[64],
                          char more[TD_TRANSPORT_MAX_DEVICES - 1][32], char *err,
                          size_t errlen)
{
    first[0] = '\0';
    if (list == NULL) list = "";
    const char *comma = strchr(list, ',');
    size_t fl = comma != NULL ? (size_t)(comma - list) : strlen(list);
    if (fl >= 64 || (comma != NULL && fl == 0)) {
        snprintf(err, errlen, "device list '%s': the first entry is %s", list,
                 fl == 0 ? "empty" : "too long");
        return -1;
    }
    memcpy(first, list, fl);
    first[fl] = '\0';
    int n = 0;
    while (comma != NULL) {
        const char *e = comma + 1;
        comma = strchr(e, ',');
        size_t el = comma != NULL ? (size_t)(comma - e) : strlen(e);
        if (n == TD_TRANSPORT_MAX_DEVICES - 1) {
            snprintf(err, errlen, "device list '%s': a session spans at most %d devices", list,
                     TD_TRANSPORT_MAX_DEVICES);
            return -1;
        }
        if (el == 0 || el >= 32) {
            snprintf(err, errlen, "device list '%s': entry %d is %s", list, n + 2,
                     el == 0 ? "empty" : "too long"); /* the first is entry 1 */
            return -1;
        }
        memcpy(more[n], e, el);
        more[n][el] = '\0';
        n++;
    }
    /* What any server refuses, said before connecting (server/request.c checks the same
     * for other clients, by device): a placement after the first entry, a device twice. */
    for (int i = 0; i < n; i++) {
        if (td__device_is_placement(more[i])) {
            snprintf(err, errlen,
                     "device list '%s': entry %d ('%s') asks the server to place it, which "
                     "only the first entry may; name the devices after the first exactly, "
                     "e.g. cpu:1 or cuda:0",
                     list, i + 2, more[i]);
            return -1;
        }
        for (int k = -1; k < i; k++) {
            const char *a = k < 0 ? first : more[k];
            if (k < 0 && td__device_is_placement(a)) continue; /* placed among the others */
            if (!td__uri_same_device(a, more[i])) continue;
            snprintf(err, errlen,
                     "device list '%s': device %s is named twice (entries %d '%s' and %d "
                     "'%s')",
                     list, strcmp(a, "cpu") == 0 ? more[i] : a, k + 2, a, i + 2, more[i]);
            return -1;
        }
    }
    return n;
}

/* Split uri into transport kind, target and device. */
/* The device part of uri `shown` into device (dlen bytes); a part that does not fit is
 * refused rather than cut (a cut name would reach the server as another device). */
static td_status take_device(const char *part, char *device, size_t dlen, const char *shown)
{
    size_t n = strlen(part);
    if (n >= dlen) {
        td__set_connect_error("uri '%s': the device list is %zu bytes; at most %zu", shown, n,
                              dlen - 1);
        return TD_EINVAL;
    }
    memcpy(device, part, n + 1);
    return TD_OK;
}

static td_status parse_uri(const char *uri, bool *local, char *target, size_t tlen,
                           char *device, size_t dlen)
{
    device[0] = '\0';
    target[0] = '\0';
    *local = false;
    uri_echo shown = echo_uri(uri);
    if (strncmp(uri, "local:", 6) == 0) {
        *local = true;
        return take_device(uri + 6, device, dlen, shown.text);
    }
    if (strncmp(uri, "tensord://", 10) == 0) {
        const char *host = uri + 10;
        const char *slash = strchr(host, '/');
        size_t hl = slash ? (size_t)(slash - host) : strlen(host);
        if (hl == 0 || hl >= tlen || memchr(host, ':', hl) == NULL) {
            td__set_connect_error("malformed uri '%s': expected tensord://HOST:PORT[/DEVICE]",
                                  shown.text);
            return TD_EINVAL;
        }
        if (check_ports(shown.text, host, hl) != TD_OK) return TD_EINVAL;
        memcpy(target, host, hl);
        target[hl] = '\0';
        return slash != NULL ? take_device(slash + 1, device, dlen, shown.text) : TD_OK;
    }
    if (strncmp(uri, "dns:", 4) == 0) { /* dns:///NAME:PORT[/DEVICE], dns://AUTH/NAME:PORT[/D] */
        const char *name = strncmp(uri, "dns:///", 7) == 0 ? uri + 7
                           : strncmp(uri, "dns://", 6) == 0 && strchr(uri + 6, '/') != NULL
                               ? strchr(uri + 6, '/') + 1
                               : NULL;
        const char *slash = name != NULL ? strchr(name, '/') : NULL;
        size_t nl = name == NULL ? 0 : slash ? (size_t)(slash - name) : strlen(name);
        size_t pl = name == NULL ? 0 : (size_t)(name - uri) + nl;
        if (name == NULL || nl == 0 || pl >= tlen || memchr(name, ':', nl) == NULL) {
            td__set_connect_error("malformed uri '%s': expected dns:///NAME:PORT[/DEVICE]",
                                  shown.text);
            return TD_EINVAL;
        }
        if (check_ports(shown.text, name, nl) != TD_OK) return TD_EINVAL;
        memcpy(target, uri, pl);
        target[pl] = '\0';
        return slash != NULL ? take_device(slash + 1, device, dlen, shown.text) : TD_OK;
    }
    if (strncmp(uri, "unix:", 5) == 0) {
        snprintf(target, tlen, "%s", uri);
        char *last = strrchr(target, '/');
        if (last != NULL && last > target + 5 && looks_like_device(last + 1)) {
            if (take_device(last + 1, device, dlen, shown.text) != TD_OK) return TD_EINVAL;
            *last = '\0';
        }
        if (strlen(target) <= 5) {
            td__set_connect_error("malformed uri '%s': expected unix:PATH[/DEVICE]",
                                  shown.text);
            return TD_EINVAL;
        }
        if (strchr(target, ',') != NULL) { /* never a pool; but gRPC cannot reach it */
            td__set_connect_error("unix socket path '%s' contains ',', which gRPC's unix: "
                                  "targets take as a separator between addresses; use a path "
                                  "(or a symlink to the socket) without one",
                                  echo_uri(target + 5).text);
            return TD_EINVAL;
        }
        return TD_OK;
    }
    td__set_connect_error("unsupported uri '%s': use local:cpu, tensord://HOST:PORT/DEVICE, "
                          "tensord://HOST:PORT,HOST:PORT/DEVICE, tensords://HOST:PORT/DEVICE, "
                          "dns:///NAME:PORT/DEVICE or unix:PATH/DEVICE", shown.text);
    return TD_EINVAL;
}

/* td_connect's reading of `uri`, before it opens anything: tensords:// is tensord:// with
 * TLS (*tls), then parse_uri's parts, then the device list's own rules
 * (td__device_list_split). `mem` (2 * strlen(uri) + 16 bytes) holds the tensords:// uri
 * rewritten and the target (*target: a pool lists up to 64 servers), each no longer than
 * the uri. Sets the connect error on failure. */
static td_status read_uri(const char *uri, char *mem, bool *tls, bool *local, char **target,
                          char device[64])
{
    size_t ul = strlen(uri);
    char *plain_uri = mem;
    *target = mem + ul + 11;
    *tls = strncmp(uri, "tensords://", 11) == 0;
    if (*tls) { /* same syntax as tensord:// */
        snprintf(plain_uri, ul + 11, "tensord://%s", uri + 11);
        uri = plain_uri;
    }
    td_status s = parse_uri(uri, local, *target, ul + 5, device, 64);
    if (s != TD_OK) return s;
    char first[64], more[TD_TRANSPORT_MAX_DEVICES - 1][32], err[512];
    if (td__device_list_split(device, first, more, err, sizeof err) < 0) {
        td__set_connect_error("%s", err);
        return TD_EINVAL;
    }
    return TD_OK;
}

td_status td__uri_device_list(const char *uri, char device[64])
{
    if (uri == NULL) {
        td__set_connect_error("no uri given");
        return TD_EINVAL;
    }
    char *mem = td__malloc(2 * strlen(uri) + 16), *target;
    if (mem == NULL) {
        td__set_connect_error("out of memory reading uri");
        return TD_ENOMEM;
    }
    bool tls, local;
    char dev[64];
    td_status s = read_uri(uri, mem, &tls, &local, &target, dev);
    td__free(mem);
    if (s == TD_OK) memcpy(device, dev, sizeof dev);
    return s;
}

/* sizeof(td_options) of the headers before td_connect took the caller's size: the struct
 * ended at blob_min_bytes. What the td_connect symbol assumes its caller passes. */
#define TD_OPTIONS_SIZE_V0 offsetof(td_options, matmul_allow_tf32)

td_status(td_connect)(const char *uri, const td_options *opts, td_context **out)
{
    return td_connect_sized(uri, opts, TD_OPTIONS_SIZE_V0, out);
}

td_status td_connect_sized(const char *uri, const td_options *opts, size_t opts_size,
                           td_context **out)
{
    if (uri == NULL || out == NULL) {
        td__set_connect_error("td_connect: uri and out must not be NULL");
        return TD_EINVAL;
    }
    td_options o;
    memset(&o, 0, sizeof o);
    if (opts != NULL) {
        /* read only the caller's bytes; a newer caller's extra fields must all be unset */
        memcpy(&o, opts, opts_size < sizeof o ? opts_size : sizeof o);
        for (size_t i = sizeof o; i < opts_size; i++) {
            if (((const unsigned char *)opts)[i] != 0) {
                td__set_connect_error("td_connect: td_options has %zu bytes and byte %zu is "
                                      "set, but this libtensord knows %zu bytes of options; "
                                      "link a libtensord as new as the tensord.h you "
                                      "compiled with",
                                      opts_size, i, sizeof o);
                return TD_EINVAL;
            }
        }
    }
    if (o.connect_timeout_ms <= 0) o.connect_timeout_ms = 5000;
    if (o.call_timeout_ms <= 0) o.call_timeout_ms = 60000;
    if (o.batch_max_ops <= 0) o.batch_max_ops = TD_BATCH_MAX_OPS_DEFAULT;
    if (o.batch_max_bytes == 0) o.batch_max_bytes = TD_BATCH_MAX_BYTES_DEFAULT;
    if (o.batch_flush_us == 0) o.batch_flush_us = TD_BATCH_FLUSH_US_DEFAULT;
    /* blob_min_bytes 0 stays 0: the transport picks the default, which depends on whether
     * the session got shared memory (remote.c) */
    if (o.client_name == NULL) o.client_name = "libtensord";
    bool local, tls;
    char device[64], *target;
    char *mem = td__malloc(2 * strlen(uri) + 16);
    if (mem == NULL) {
        td__set_connect_error("td_connect: out of memory");
        return TD_ENOMEM;
    }
    td_status s = read_uri(uri, mem, &tls, &local, &target, device);
    if (tls) o.tls = 1;
    td_context *ctx = s == TD_OK ? td__calloc(1, sizeof *ctx) : NULL;
    if (s == TD_OK && ctx == NULL) {
        td__set_connect_error("td_connect: out of memory");
        s = TD_ENOMEM;
    }
    if (s != TD_OK) {
        td__free(mem);
        return s;
    }
    ctx->opts = o;
    ctx->opts.client_name = NULL; /* not kept: borrowed */
    ctx->opts.tls_ca_file = ctx->opts.tls_cert_file = ctx->opts.tls_key_file = NULL;
    ctx->opts.token = NULL;
    ctx->next_id = 1;
    td__idmap_init(&ctx->handles);
    char err[1024] = "";
    if (local) {
        s = td__local_open(device, &ctx->tp, err, sizeof err);
    } else {
        s = td__pool_is_pool(target)
                ? td__pool_open(target, device, &o, &ctx->tp, err, sizeof err)
                : td__remote_open(target, device, &o, &ctx->tp, err, sizeof err);
    }
    td__free(mem);
    if (s != TD_OK) {
        td__set_connect_error("%s", err[0] ? err : td_status_message(s));
        td__idmap_fini(&ctx->handles);
        td__free(ctx);
        return s;
    }
    if (!local && o.batch_flush_us > 0 &&
        td__flusher_start(o.batch_flush_us, flush_due,
                          ctx->tp->vt->drive != NULL ? drive_due : NULL, ctx,
                          &ctx->flusher) != TD_OK) {
        td__set_connect_error("td_connect: cannot start the batch flusher thread");
        ctx->tp->vt->close(ctx->tp);
        td__idmap_fini(&ctx->handles);
        td__free(ctx);
        return TD_ENOMEM;
    }
    ctx->tp->driven = ctx->flusher != NULL && ctx->tp->vt->drive != NULL;
    *out = ctx;
    return TD_OK;
}

void td_close(td_context *ctx)
{
    if (ctx == NULL) return;
    td__flusher_stop(ctx->flusher);
    size_t pos = 0;
    uint64_t id;
    void *v;
    while (td__idmap_next(&ctx->handles, &pos, &id, &v)) td__free(v);
    td__idmap_fini(&ctx->handles);
    td__capture_free(ctx->capture);
    td__ad_free(ctx->ad);
    for (size_t i = 0; i < ctx->n_host_bufs; i++) td__free(ctx->host_bufs[i].raw);
    td__free(ctx->host_bufs);
    while (ctx->pending != NULL) { /* the transport's close forgets their tickets */
        td_pending_read *p = ctx->pending;
        ctx->pending = p->next;
        td__free(p);
    }
    ctx->tp->vt->close(ctx->tp);
    td__free(ctx->batch);
    td__free(ctx->releases);
    td__free(ctx);
}

/* The thread's context-free failure counts for ctx when nothing happened on ctx after it. */
static bool thread_err_newer(const td_context *ctx)
{
    return g_thread_err.ctx_free && g_thread_err.seq > ctx->seq;
}
const char *td_last_error(const td_context *ctx)
{
    if (ctx == NULL || thread_err_newer(ctx)) return g_thread_err.msg;
    return ctx->err;
}
td_status td_last_status(const td_context *ctx)
{
    if (ctx == NULL || thread_err_newer(ctx)) return g_thread_err.status;
    return ctx->last_status;
}
const char *td_device_name(const td_context *ctx) { return ctx ? ctx->tp->device : ""; }

static td_status flush(td_context *ctx, const char *api);
static td_tensor *new_handle(td_context *ctx, const td__desc *d);

const char *td_context_server(const td_context *ctx) { return ctx ? ctx->tp->server : ""; }

int td_context_device_count(const td_context *ctx) { return ctx ? (int)ctx->tp->n_devices : 0; }

const char *td_context_transport(const td_context *ctx)
{
    if (ctx == NULL) return NULL;
    return ctx->tp->transport != NULL ? ctx->tp->transport : "local";
}

const char *td_context_device_at(const td_context *ctx, int i)
{
    if (ctx == NULL || i < 0 || (uint32_t)i >= ctx->tp->n_devices) return NULL;
    return ctx->tp->devices[i];
}

const char *td_tensor_device(const td_tensor *t)
{
    return t != NULL ? t->ctx->tp->devices[t->dev] : "";
}

/* `s` for a message: at most its first 64 bytes, then "…" when longer. */
static void echo_name(const char *s, char out[72])
{
    size_t n = strlen(s);
    if (n <= 64)
        memcpy(out, s, n + 1);
    else
        snprintf(out, 72, "%.64s\xe2\x80\xa6", s); /* U+2026 in UTF-8 */
}

/* The index of device `name` in the session's devices ("cpu" also finds "cpu:0"), or -1. */
static int session_device(const td_context *ctx, const char *name)
{
    for (uint32_t i = 0; i < ctx->tp->n_devices; i++) {
        const char *d = ctx->tp->devices[i];
        if (td__uri_same_device(d, name)) return (int)i;
    }
    return -1;
}

td_tensor *td_to_device(td_tensor *t, const char *device)
{
    if (t == NULL) return thread_fail("td_to_device: input t is NULL");
    td_context *ctx = t->ctx;
    if (device == NULL) {
        set_err(ctx, "td_to_device: device is NULL");
        return NULL;
    }
    if (ctx->dead != TD_OK) {
        set_err_status(ctx, TD_ECLOSED, "td_to_device: the session is closed (%s)",
                       ctx->tp->err);
        return NULL;
    }
    if (t->placeholder || ctx->capturing) {
        set_err(ctx, "td_to_device: %s", t->placeholder ? "tensor is a graph placeholder"
                : "not allowed while capturing a graph (td_graph_begin)");
        return NULL;
    }
    int k = session_device(ctx, device);
    if (k < 0) {
        char have[160] = "", uri[200] = "", name[72];
        size_t hl = 0, ul = 0;
        for (uint32_t i = 0; i < ctx->tp->n_devices && hl < sizeof have; i++) {
            hl += (size_t)snprintf(have + hl, sizeof have - hl, "%s%s", i ? ", " : "",
                                   ctx->tp->devices[i]);
            if (ul < sizeof uri)
                ul += (size_t)snprintf(uri + ul, sizeof uri - ul, "%s%s", i ? "," : "",
                                       ctx->tp->devices[i]);
        }
        echo_name(device, name);
        /* a hint only where it is a valid uri: one exact device name, room for it */
        bool exact = strcmp(device, "cpu") == 0 ||
                     (strchr(device, ':') != NULL && looks_like_one_device(device));
        if (exact && ctx->tp->n_devices < TD_TRANSPORT_MAX_DEVICES)
            set_err(ctx, "td_to_device: device '%s' is not one of this session's (%s); name "
                    "every device the session uses in td_connect's uri, e.g. "
                    "tensord://HOST:PORT/%s,%s", name, have, uri, name);
        else if (exact)
            set_err(ctx, "td_to_device: device '%s' is not one of this session's (%s); a "
                    "session spans at most %d devices", name, have, TD_TRANSPORT_MAX_DEVICES);
        else
            set_err(ctx, "td_to_device: device '%s' is not one of this session's (%s); name "
                    "one device exactly, e.g. %s", name, have, ctx->tp->devices[0]);
        return NULL;
    }
    if (ctx->tp->vt->to_device == NULL) {
        set_err_status(ctx, TD_EUNSUPPORTED, "td_to_device: this session cannot move tensors "
                       "between devices");
        return NULL;
    }
    td_tensor *out = new_handle(ctx, &t->desc);
    if (out == NULL) {
        set_err_status(ctx, TD_ENOMEM, "td_to_device: out of memory");
        return NULL;
    }
    out->dev = (uint8_t)k;
    td_status s = flush(ctx, "td_to_device");
    if (s == TD_OK) s = ctx->tp->vt->to_device(ctx->tp, t->id, out->id, (uint32_t)k);
    if (s != TD_OK) {
        if (ctx->dead == TD_OK) ctx->dead = s;
        set_err_status(ctx, s, "td_to_device: %s", ctx->tp->err);
        /* the handle stays valid: reads report the lost session */
    }
    ctx->ops_recorded++;
    ctx->op_failed = false;
    ctx->seq = next_seq();
    if (ctx->ad != NULL) td__ad_moved(ctx->ad, t, out);
    return out;
}

void td_get_stats(const td_context *ctx, td_stats *out)
{
    if (out == NULL) return;
    if (ctx == NULL) {
        *out = (td_stats){0};
        return;
    }
    td__flusher_lock(ctx->flusher);
    *out = ctx->tp->stats;
    td__flusher_unlock(ctx->flusher);
    out->ops_recorded = ctx->ops_recorded;
}

/* ---- batching ---- */

/* Hand the pending batch, then pending releases, to the transport. */
/* Caller holds the flusher lock. `api` (the public call that flushes): record a failure as
 * the context's last error, "API: transport message"; NULL from the flusher thread (the user
 * thread may be reading it; the transport keeps the message and every later call reports
 * it). */
static td_status flush_locked(td_context *ctx, const char *api)
{
    if (ctx->capturing) return TD_OK; /* captured ops stay in the batch until td_graph_end */
    td_status s = TD_OK;
    if (ctx->batch_len > 0) {
        s = ctx->tp->vt->submit(ctx->tp, ctx->batch, ctx->batch_len);
        ctx->batch_len = 0;
        ctx->batch_bytes = 0;
    }
    if (s == TD_OK && ctx->n_releases > 0) {
        s = ctx->tp->vt->release(ctx->tp, ctx->releases, ctx->n_releases);
        ctx->n_releases = 0;
    }
    td__flusher_idle(ctx->flusher);
    if (atomic_load_explicit(&ctx->tp->sends_queued, memory_order_relaxed))
        td__flusher_kick_locked(ctx->flusher);
    if (s != TD_OK && ctx->dead == TD_OK) ctx->dead = s;
    if (s != TD_OK && api != NULL) set_err_status(ctx, s, "%s: %s", api, ctx->tp->err);
    return s;
}

static td_status flush(td_context *ctx, const char *api)
{
    td__flusher_lock(ctx->flusher);
    td_status s = flush_locked(ctx, api);
    td__flusher_unlock(ctx->flusher);
    return s;
}

/* flush() before a read or fence: the transport may send the batch with it. */
static td_status flush_for_sync(td_context *ctx, const char *api)
{
    td__flusher_lock(ctx->flusher);
    ctx->tp->sync_next = true;
    td_status s = flush_locked(ctx, api);
    ctx->tp->sync_next = false;
    td__flusher_unlock(ctx->flusher);
    return s;
}

/* The flusher thread: a batch waited batch_flush_us. */
static void flush_due(void *arg) { flush_locked(arg, NULL); }

/* The flusher thread, without its lock: the transport's queued sends (vt->drive). */
static bool drive_due(void *arg)
{
    td_context *ctx = arg;
    return ctx->tp->vt->drive(ctx->tp);
}

/* Upper bound of an op's protobuf encoding (tags, varints of at most 10 bytes, framing):
 * what the byte threshold counts. */
static size_t op_wire_bytes(const td__op *op)
{
    return 48 + 11 * (size_t)op->n_inputs + 11 * (size_t)op->n_iattrs;
}

static td_tensor *new_handle(td_context *ctx, const td__desc *d)
{
    td_tensor *t = td__malloc(sizeof *t);
    if (t == NULL) return NULL;
    t->ctx = ctx;
    t->id = ctx->next_id++;
    t->desc = *d;
    t->dev = 0;
    t->placeholder = false;
    if (!td__idmap_put(&ctx->handles, t->id, t)) {
        td__free(t);
        return NULL;
    }
    return t;
}

/* Validate op against its input handles, append it to the batch, return the new handle.
 * `api` names the public function for error messages. */
static td_tensor *record(td_context *ctx, const char *api, td__op *op, td_tensor *const *in)
{
    const td__desc *descs[TD_OP_MAX_INPUTS] = {NULL};
    if (ctx->dead != TD_OK) {
        set_err_status(ctx, TD_ECLOSED, "%s: the session is closed (%s)", api, ctx->tp->err);
        return NULL;
    }
    for (uint32_t i = 0; i < op->n_inputs; i++) {
        if (in[i]->placeholder && !ctx->capturing) {
            set_err(ctx, "%s: input %u (tensor %llu) belongs to a captured graph; run the graph "
                    "with td_graph_run to get real tensors", api, i,
                    (unsigned long long)in[i]->id);
            return NULL;
        }
        descs[i] = &in[i]->desc;
        op->inputs[i] = in[i]->id;
        if (in[i]->dev != in[0]->dev) {
            set_err(ctx, "%s: input 0 (tensor %llu) is on device %s and input %u (tensor %llu) "
                    "on device %s; an op's inputs must be on one device (move one with "
                    "td_to_device: tensors are never copied between devices silently)",
                    api, (unsigned long long)in[0]->id, ctx->tp->devices[in[0]->dev], i,
                    (unsigned long long)in[i]->id, ctx->tp->devices[in[i]->dev]);
            return NULL;
        }
    }
    td__desc od;
    char why[768];
    if (td__op_infer(op, descs, &od, why, sizeof why) != TD_OK) {
        set_err(ctx, "%s: %s", api, why);
        return NULL;
    }
    td_tensor *t = new_handle(ctx, &od);
    if (t == NULL) {
        set_err_status(ctx, TD_ENOMEM, "%s: out of memory", api);
        return NULL;
    }
    td__flusher_lock(ctx->flusher);
    if (ctx->batch_len == ctx->batch_cap) {
        size_t ncap = ctx->batch_cap ? ctx->batch_cap * 2 : 64;
        td__op *nb = td__realloc(ctx->batch, ncap * sizeof *nb);
        if (nb == NULL) {
            td__flusher_unlock(ctx->flusher);
            td__idmap_del(&ctx->handles, t->id);
            td__free(t);
            set_err_status(ctx, TD_ENOMEM, "%s: out of memory", api);
            return NULL;
        }
        ctx->batch = nb;
        ctx->batch_cap = ncap;
    }
    op->output = t->id;
    t->placeholder = ctx->capturing;
    t->dev = op->n_inputs > 0 ? in[0]->dev : 0;
    ctx->batch[ctx->batch_len++] = *op;
    ctx->batch_bytes += op_wire_bytes(op);
    ctx->ops_recorded++;
    ctx->op_failed = false;
    ctx->seq = next_seq();
    if (ctx->batch_len == 1) td__flusher_pending(ctx->flusher);
    if ((ctx->batch_len >= (size_t)ctx->opts.batch_max_ops ||
         ctx->batch_bytes >= ctx->opts.batch_max_bytes) &&
        flush_locked(ctx, api) != TD_OK) {
        /* the transport failed; the handle stays valid and later reads report it */
    }
    td__flusher_unlock(ctx->flusher);
    if (ctx->ad != NULL) td__ad_recorded(ctx->ad, op, in, t);
    return t;
}

/* ---- tensor metadata ---- */

int64_t td_nelem(const td_tensor *t) { return t ? td__desc_nelem(&t->desc) : 0; }
size_t td_nbytes(const td_tensor *t) { return t ? td__desc_nbytes(&t->desc) : 0; }
td_dtype td_tensor_dtype(const td_tensor *t) { return t ? (td_dtype)t->desc.dtype : TD_F32; }
int td_rank(const td_tensor *t) { return t ? (int)t->desc.rank : -1; }
const int64_t *td_dims(const td_tensor *t) { return t ? t->desc.dims : NULL; }
td_context *td_tensor_context(const td_tensor *t) { return t ? t->ctx : NULL; }

static bool set_shape(td_context *ctx, const char *api, td__op *op, int rank,
                      const int64_t *dims)
{
    if (rank < 0 || rank > TD_MAX_RANK || (rank > 0 && dims == NULL)) {
        set_err(ctx, "%s: rank %d is outside 0..%d (or dims is NULL)", api, rank, TD_MAX_RANK);
        return false;
    }
    op->n_iattrs = (uint32_t)rank;
    for (int i = 0; i < rank; i++) op->iattrs[i] = dims[i];
    return true;
}

/* ---- creation ---- */

static td_status write_impl(td_tensor *t, const void *data, size_t nbytes, unsigned flags,
                            const char *api);

/* td_write_ex / td_from_host_ex flags: only TD_WRITE_FRESH is known. */
static bool write_flags_ok(td_context *ctx, unsigned flags, const char *api)
{
    unsigned unknown = flags & ~(unsigned)TD_WRITE_FRESH;
    if (unknown != 0)
        set_err(ctx, "%s: unknown flags 0x%x (known: TD_WRITE_FRESH 0x%x)", api, unknown,
                (unsigned)TD_WRITE_FRESH);
    return unknown == 0;
}

static td_tensor *from_host_impl(td_context *ctx, td_dtype dt, int rank, const int64_t *dims,
                                 const void *data, unsigned flags, const char *api)
{
    if (ctx == NULL) return thread_fail("%s: ctx is NULL", api);
    if (!write_flags_ok(ctx, flags, api)) return NULL;
    /* Refused before recording: the empty op would stay in the capture (a failed call
     * leaves no trace) and make td_graph_end fail on an uninitialised tensor. */
    if (ctx->capturing) {
        set_err(ctx, "%s: not allowed while capturing a graph (td_graph_begin)", api);
        return NULL;
    }
    td__op op = {.opcode = TD_OP_EMPTY, .dtype = (uint32_t)dt};
    if (!set_shape(ctx, api, &op, rank, dims)) return NULL;
    if (data == NULL) {
        td__desc d = {.dtype = (uint32_t)dt, .rank = (uint32_t)rank};
        for (int i = 0; i < rank; i++) d.dims[i] = dims[i];
        if (td__desc_check(&d, NULL, 0) != TD_OK || td__desc_nbytes(&d) > 0) {
            set_err(ctx, "%s: data is NULL", api);
            return NULL;
        }
    }
    td_tensor *t = record(ctx, api, &op, NULL);
    if (t == NULL) return NULL;
    if (write_impl(t, data, td_nbytes(t), flags, api) != TD_OK) {
        td_release(t);
        return NULL;
    }
    return t;
}

td_tensor *td_from_host(td_context *ctx, td_dtype dt, int rank, const int64_t *dims,
                        const void *data)
{
    return from_host_impl(ctx, dt, rank, dims, data, 0, "td_from_host");
}

td_tensor *td_from_host_ex(td_context *ctx, td_dtype dt, int rank, const int64_t *dims,
                           const void *data, unsigned flags)
{
    return from_host_impl(ctx, dt, rank, dims, data, flags, "td_from_host_ex");
}

static td_status write_impl(td_tensor *t, const void *data, size_t nbytes, unsigned flags,
                            const char *api)
{
    if (t == NULL) return TD_EINVAL;
    td_context *ctx = t->ctx;
    if (!write_flags_ok(ctx, flags, api)) return TD_EINVAL;
    if (t->placeholder || ctx->capturing) {
        set_err(ctx, "%s: %s", api, t->placeholder ? "tensor is a graph placeholder (graphs "
                "take data through td_graph_input and td_graph_run)"
                : "not allowed while capturing a graph (td_graph_begin)");
        return TD_EINVAL;
    }
    if (nbytes != td_nbytes(t) || (nbytes > 0 && data == NULL)) {
        set_err(ctx, "%s: tensor %llu holds %zu bytes, got %zu%s", api,
                (unsigned long long)t->id, td_nbytes(t), nbytes, data ? "" : " (data is NULL)");
        return TD_EINVAL;
    }
    td_status s = flush(ctx, api);
    if (s != TD_OK) return s;
    s = td__offer_write(ctx->tp, t->id, data, nbytes, (flags & TD_WRITE_FRESH) != 0);
    if (atomic_load_explicit(&ctx->tp->sends_queued, memory_order_relaxed))
        td__flusher_kick(ctx->flusher);
    if (s != TD_OK) set_err_status(ctx, s, "%s: %s", api, ctx->tp->err);
    return s;
}

td_status td_write(td_tensor *t, const void *data, size_t nbytes)
{
    return write_impl(t, data, nbytes, 0, "td_write");
}

td_status td_write_ex(td_tensor *t, const void *data, size_t nbytes, unsigned flags)
{
    return write_impl(t, data, nbytes, flags, "td_write_ex");
}

/* ---- host buffers ---- */

/* Plain memory, 64-byte aligned, tracked so that td_host_free can tell ours from others. */
static void *host_alloc_plain(td_context *ctx, size_t nbytes)
{
    if (ctx->n_host_bufs == ctx->cap_host_bufs) {
        size_t cap = ctx->cap_host_bufs ? 2 * ctx->cap_host_bufs : 8;
        struct host_buf *nb = td__realloc(ctx->host_bufs, cap * sizeof *nb);
        if (nb == NULL) return NULL;
        ctx->host_bufs = nb;
        ctx->cap_host_bufs = cap;
    }
    if (nbytes > SIZE_MAX - 64) return NULL;
    void *raw = td__malloc(nbytes + 64);
    if (raw == NULL) return NULL;
    void *user = (void *)(((uintptr_t)raw + 63) & ~(uintptr_t)63);
    ctx->host_bufs[ctx->n_host_bufs++] = (struct host_buf){.user = user, .raw = raw};
    return user;
}

void *td_host_alloc(td_context *ctx, size_t nbytes)
{
    if (ctx == NULL) return thread_fail("td_host_alloc: ctx is NULL");
    if (nbytes == 0) {
        set_err_status(ctx, TD_EINVAL, "td_host_alloc: nbytes is 0");
        return NULL;
    }
    void *p = NULL;
    td_status s = ctx->tp->vt->host_alloc != NULL ? ctx->tp->vt->host_alloc(ctx->tp, nbytes, &p)
                                                   : TD_EUNSUPPORTED;
    if (s == TD_OK) return p;
    if (s != TD_EUNSUPPORTED) {
        set_err_status(ctx, s, "td_host_alloc: %s", ctx->tp->err);
        return NULL;
    }
    p = host_alloc_plain(ctx, nbytes);
    if (p == NULL) set_err_status(ctx, TD_ENOMEM, "td_host_alloc: out of memory for %zu bytes",
                                  nbytes);
    return p;
}

td_status td_host_free(td_context *ctx, void *ptr)
{
    if (ctx == NULL) {
        thread_fail("td_host_free: ctx is NULL");
        return TD_EINVAL;
    }
    if (ptr == NULL) return TD_OK;
    for (size_t i = 0; i < ctx->n_host_bufs; i++) {
        if (ctx->host_bufs[i].user != ptr) continue;
        td__free(ctx->host_bufs[i].raw);
        ctx->host_bufs[i] = ctx->host_bufs[--ctx->n_host_bufs];
        return TD_OK;
    }
    if (ctx->tp->vt->host_free != NULL && ctx->tp->vt->host_free(ctx->tp, ptr) == TD_OK)
        return TD_OK;
    set_err_status(ctx, TD_EINVAL,
                   "td_host_free: %p is not a live buffer of this context's td_host_alloc "
                   "(another context's, freed already, or never from td_host_alloc)",
                   ptr);
    return TD_EINVAL;
}

td_tensor *td_full(td_context *ctx, td_dtype dt, int rank, const int64_t *dims, double value)
{
    if (ctx == NULL) return thread_fail("td_full: ctx is NULL");
    td__op op = {.opcode = TD_OP_FULL, .dtype = (uint32_t)dt, .fattrs = {value, 0}};
    if (!set_shape(ctx, "td_full", &op, rank, dims)) return NULL;
    return record(ctx, "td_full", &op, NULL);
}

td_tensor *td_arange(td_context *ctx, td_dtype dt, int64_t n, double start, double step)
{
    if (ctx == NULL) return thread_fail("td_arange: ctx is NULL");
    td__op op = {.opcode = TD_OP_ARANGE, .dtype = (uint32_t)dt, .n_iattrs = 1,
                 .iattrs = {n}, .fattrs = {start, step}};
    return record(ctx, "td_arange", &op, NULL);
}

static td_tensor *rand_op(td_context *ctx, const char *api, uint32_t opcode, td_dtype dt,
                          int rank, const int64_t *dims, uint64_t seed, double a, double b)
{
    if (ctx == NULL) return thread_fail("%s: ctx is NULL", api);
    td__op op = {.opcode = opcode, .dtype = (uint32_t)dt, .fattrs = {a, b}, .seed = seed};
    if (!set_shape(ctx, api, &op, rank, dims)) return NULL;
    return record(ctx, api, &op, NULL);
}

td_tensor *td_rand_uniform(td_context *ctx, td_dtype dt, int rank, const int64_t *dims,
                           uint64_t seed, double low, double high)
{
    return rand_op(ctx, "td_rand_uniform", TD_OP_RAND_UNIFORM, dt, rank, dims, seed, low, high);
}

td_tensor *td_rand_normal(td_context *ctx, td_dtype dt, int rank, const int64_t *dims,
                          uint64_t seed, double mean, double stddev)
{
    return rand_op(ctx, "td_rand_normal", TD_OP_RAND_NORMAL, dt, rank, dims, seed, mean,
                   stddev);
}

td_tensor *td_bernoulli(td_tensor *p, uint64_t seed)
{
    if (p == NULL) return null_input(NULL, "td_bernoulli", "p");
    td__op op = {.opcode = TD_OP_BERNOULLI, .n_inputs = 1, .seed = seed};
    return record(p->ctx, "td_bernoulli", &op, &p);
}

td_tensor *td_bernoulli_scalar(td_context *ctx, td_dtype dt, int rank, const int64_t *dims,
                               uint64_t seed, double p)
{
    return rand_op(ctx, "td_bernoulli_scalar", TD_OP_BERNOULLI_SCALAR, dt, rank, dims, seed, p,
                   0);
}

td_tensor *td_randint(td_context *ctx, td_dtype dt, int rank, const int64_t *dims,
                      uint64_t seed, int64_t low, int64_t high)
{
    if (ctx == NULL) return thread_fail("td_randint: ctx is NULL");
    td__op op = {.opcode = TD_OP_RANDINT, .dtype = (uint32_t)dt, .seed = seed};
    if (!set_shape(ctx, "td_randint", &op, rank, dims)) return NULL;
    for (int i = rank - 1; i >= 0; i--) op.iattrs[i + 2] = op.iattrs[i];
    op.iattrs[0] = low;
    op.iattrs[1] = high;
    op.n_iattrs += 2;
    return record(ctx, "td_randint", &op, NULL);
}

td_tensor *td_randperm(td_context *ctx, int64_t n, uint64_t seed)
{
    if (ctx == NULL) return thread_fail("td_randperm: ctx is NULL");
    td__op op = {.opcode = TD_OP_RANDPERM, .dtype = TD_I64, .n_iattrs = 1, .iattrs = {n},
                 .seed = seed};
    return record(ctx, "td_randperm", &op, NULL);
}

td_tensor *td_trunc_normal(td_context *ctx, td_dtype dt, int rank, const int64_t *dims,
                           uint64_t seed, double mean, double stddev, double a, double b)
{
    if (ctx == NULL) return thread_fail("td_trunc_normal: ctx is NULL");
    td__op op = {.opcode = TD_OP_TRUNC_NORMAL, .dtype = (uint32_t)dt,
                 .fattrs = {mean, stddev, a, b}, .seed = seed};
    if (!set_shape(ctx, "td_trunc_normal", &op, rank, dims)) return NULL;
    return record(ctx, "td_trunc_normal", &op, NULL);
}

/* ---- reading, fences, release ---- */

/* The argument checks of a read of t into dst (td_read, td_read_start: `api`). */
static td_status read_check(const char *api, td_tensor *t, const void *dst, size_t nbytes)
{
    if (t == NULL) return TD_EINVAL;
    td_context *ctx = t->ctx;
    if (t->placeholder || ctx->capturing) {
        set_err(ctx, "%s: %s", api, t->placeholder ? "tensor is a graph placeholder; read the "
                "outputs of td_graph_run instead"
                : "not allowed while capturing a graph (td_graph_begin)");
        return TD_EINVAL;
    }
    if (nbytes != td_nbytes(t) || (nbytes > 0 && dst == NULL)) {
        set_err(ctx, "%s: tensor %llu holds %zu bytes, buffer has %zu%s", api,
                (unsigned long long)t->id, td_nbytes(t), nbytes, dst ? "" : " (dst is NULL)");
        return TD_EINVAL;
    }
    return TD_OK;
}

td_status td_read(td_tensor *t, void *dst, size_t nbytes)
{
    td_status s = read_check("td_read", t, dst, nbytes);
    if (s != TD_OK) return s;
    td_context *ctx = t->ctx;
    s = flush_for_sync(ctx, "td_read");
    if (s != TD_OK) return s;
    s = ctx->tp->vt->read(ctx->tp, t->id, 0, dst, nbytes);
    if (s != TD_OK) set_err_status(ctx, s, "td_read: %s", ctx->tp->err);
    return s;
}

td_status td_read_start(td_tensor *t, void *dst, size_t nbytes, td_pending_read **out)
{
    if (out != NULL) *out = NULL;
    td_status s = read_check("td_read_start", t, dst, nbytes);
    if (s != TD_OK) return s;
    td_context *ctx = t->ctx;
    if (out == NULL) {
        set_err(ctx, "td_read_start: out is NULL");
        return TD_EINVAL;
    }
    if (ctx->n_pending >= TD_PENDING_READS_MAX) {
        set_err_status(ctx, TD_EBUSY, "td_read_start: %d reads are pending on this context, "
                       "the most it keeps; finish some with td_read_finish first",
                       ctx->n_pending);
        return TD_EBUSY;
    }
    td_pending_read *p = td__calloc(1, sizeof *p);
    if (p == NULL) {
        set_err_status(ctx, TD_ENOMEM, "td_read_start: out of memory");
        return TD_ENOMEM;
    }
    /* flushed as for a read: where the read then runs at once, the request ring may carry
     * the batch with it */
    s = flush_for_sync(ctx, "td_read_start");
    if (s != TD_OK) {
        td__free(p);
        return s;
    }
    const td__transport_vt *vt = ctx->tp->vt;
    s = vt->read_start != NULL ? vt->read_start(ctx->tp, t->id, 0, dst, nbytes, &p->ticket)
                               : TD_EUNSUPPORTED;
    if (s == TD_EUNSUPPORTED) {
        p->ticket = 0;
        p->st = vt->read(ctx->tp, t->id, 0, dst, nbytes);
        if (p->st != TD_OK) snprintf(p->msg, sizeof p->msg, "%s", ctx->tp->err);
        s = TD_OK;
    } else if (s != TD_OK) {
        set_err_status(ctx, s, "td_read_start: %s", ctx->tp->err);
        td__free(p);
        return s;
    }
    p->ctx = ctx;
    p->next = ctx->pending;
    if (p->next != NULL) p->next->prev = p;
    ctx->pending = p;
    ctx->n_pending++;
    *out = p;
    return TD_OK;
}

td_status td_read_finish(td_pending_read *p)
{
    if (p == NULL) {
        thread_note(TD_EINVAL, true, "td_read_finish: p is NULL");
        return TD_EINVAL;
    }
    td_context *ctx = p->ctx;
    td_status s = p->st;
    if (p->ticket != 0) {
        s = ctx->tp->vt->read_finish(ctx->tp, p->ticket);
        if (s != TD_OK) snprintf(p->msg, sizeof p->msg, "%s", ctx->tp->err);
    }
    if (p->prev != NULL) p->prev->next = p->next;
    else ctx->pending = p->next;
    if (p->next != NULL) p->next->prev = p->prev;
    ctx->n_pending--;
    if (s != TD_OK) set_err_status(ctx, s, "td_read_finish: %s", p->msg);
    td__free(p);
    return s;
}

td_status td_read_scalar(td_tensor *t, double *out)
{
    if (t == NULL) return TD_EINVAL;
    if (td_nelem(t) != 1) {
        set_err(t->ctx, "td_read_scalar: tensor has %lld elements, expected 1",
                (long long)td_nelem(t));
        return TD_EINVAL;
    }
    union {
        float f32;
        double f64;
        int32_t i32;
        int64_t i64;
        uint8_t u8;
        uint16_t h;
        int8_t i8;
        int16_t i16;
    } v;
    td_status s = td_read(t, &v, td_nbytes(t));
    if (s != TD_OK) return s;
    switch (t->desc.dtype) {
    case TD_F32: *out = v.f32; break;
    case TD_F64: *out = v.f64; break;
    case TD_I32: *out = v.i32; break;
    case TD_I64: *out = (double)v.i64; break;
    case TD_F16: *out = td__f16_to_f32(v.h); break;
    case TD_BF16: *out = td__bf16_to_f32(v.h); break;
    case TD_I8: *out = v.i8; break;
    case TD_I16: *out = v.i16; break;
    default: *out = v.u8; break;
    }
    return TD_OK;
}

td_status td_fence(td_context *ctx)
{
    if (ctx == NULL) return TD_EINVAL;
    if (ctx->capturing) {
        set_err(ctx, "td_fence: not allowed while capturing a graph (td_graph_begin)");
        return TD_EINVAL;
    }
    td_status s = flush_for_sync(ctx, "td_fence");
    if (s != TD_OK) return s;
    s = ctx->tp->vt->fence(ctx->tp);
    if (s != TD_OK) set_err_status(ctx, s, "td_fence: %s", ctx->tp->err);
    return s;
}

void td_release(td_tensor *t)
{
    if (t == NULL) return;
    td_context *ctx = t->ctx;
    if (ctx->ad != NULL) td__ad_forget(ctx->ad, t->id);
    td__idmap_del(&ctx->handles, t->id);
    if (t->placeholder) { /* never existed on the executor */
        td__free(t);
        return;
    }
    td__flusher_lock(ctx->flusher);
    if (ctx->n_releases == ctx->cap_releases) {
        size_t ncap = ctx->cap_releases ? ctx->cap_releases * 2 : 64;
        uint64_t *nr = td__realloc(ctx->releases, ncap * sizeof *nr);
        if (nr == NULL) { /* cannot queue: the id stays alive until td_close */
            td__flusher_unlock(ctx->flusher);
            td__free(t);
            return;
        }
        ctx->releases = nr;
        ctx->cap_releases = ncap;
    }
    ctx->releases[ctx->n_releases++] = t->id;
    td__free(t);
    if (ctx->n_releases == 1) td__flusher_pending(ctx->flusher);
    if (ctx->n_releases >= 4096) flush_locked(ctx, "td_release");
    td__flusher_unlock(ctx->flusher);
}

/* ---- elementwise ---- */

static td_tensor *unary(const char *api, uint32_t opcode, td_tensor *x)
{
    if (x == NULL) return null_input(NULL, api, "x");
    td__op op = {.opcode = opcode, .n_inputs = 1};
    return record(x->ctx, api, &op, &x);
}

/* The context of the first non-NULL of n tensors (NULL if all are). */
static td_context *any_ctx(int n, td_tensor *const *t)
{
    for (int i = 0; i < n; i++)
        if (t[i] != NULL) return t[i]->ctx;
    return NULL;
}

static td_tensor *binary(const char *api, uint32_t opcode, td_tensor *a, td_tensor *b)
{
    if (a == NULL || b == NULL)
        return null_input(any_ctx(2, (td_tensor *[]){a, b}), api, a == NULL ? "a" : "b");
    if (a->ctx != b->ctx) {
        set_err(a->ctx, "%s: inputs belong to different contexts", api);
        return NULL;
    }
    td__op op = {.opcode = opcode, .n_inputs = 2};
    td_tensor *in[2] = {a, b};
    return record(a->ctx, api, &op, in);
}

#define TD__UNARY(fn, OP)                                                                  \
    td_tensor *fn(td_tensor *x) { return unary(#fn, TD_OP_##OP, x); }
TD__UNARY(td_neg, NEG)
TD__UNARY(td_abs, ABS)
TD__UNARY(td_exp, EXP)
TD__UNARY(td_log, LOG)
TD__UNARY(td_sqrt, SQRT)
TD__UNARY(td_rsqrt, RSQRT)
TD__UNARY(td_tanh, TANH)
TD__UNARY(td_sigmoid, SIGMOID)
TD__UNARY(td_relu, RELU)
TD__UNARY(td_silu, SILU)
TD__UNARY(td_sin, SIN)
TD__UNARY(td_cos, COS)
TD__UNARY(td_tan, TAN)
TD__UNARY(td_asin, ASIN)
TD__UNARY(td_acos, ACOS)
TD__UNARY(td_atan, ATAN)
TD__UNARY(td_sinh, SINH)
TD__UNARY(td_cosh, COSH)
TD__UNARY(td_asinh, ASINH)
TD__UNARY(td_acosh, ACOSH)
TD__UNARY(td_atanh, ATANH)
TD__UNARY(td_erf, ERF)
TD__UNARY(td_log1p, LOG1P)
TD__UNARY(td_expm1, EXPM1)
TD__UNARY(td_log2, LOG2)
TD__UNARY(td_log10, LOG10)
TD__UNARY(td_floor, FLOOR)
TD__UNARY(td_ceil, CEIL)
TD__UNARY(td_round, ROUND)
TD__UNARY(td_trunc, TRUNC)
TD__UNARY(td_sign, SIGN)
TD__UNARY(td_reciprocal, RECIPROCAL)
TD__UNARY(td_isnan, ISNAN)
TD__UNARY(td_isinf, ISINF)
TD__UNARY(td_isfinite, ISFINITE)
TD__UNARY(td_logical_not, LOGICAL_NOT)
TD__UNARY(td_bitwise_not, BITWISE_NOT)
#undef TD__UNARY

/* A unary op with attributes: `mode` as iattrs[0] when n_iattrs is 1, f as fattrs. */
static td_tensor *unary_attrs(const char *api, uint32_t opcode, td_tensor *x, uint32_t n_iattrs,
                              int64_t mode, double f0, double f1, double f2)
{
    if (x == NULL) return null_input(NULL, api, "x");
    td__op op = {.opcode = opcode, .n_inputs = 1, .n_iattrs = n_iattrs, .iattrs = {mode},
                 .fattrs = {f0, f1, f2}};
    return record(x->ctx, api, &op, &x);
}

td_tensor *td_gelu(td_tensor *x, bool tanh_approximation)
{
    /* the exact form is recorded without the attribute (its absent value means exact) */
    return unary_attrs("td_gelu", TD_OP_GELU, x, tanh_approximation ? 1 : 0,
                       tanh_approximation ? 1 : 0, 0, 0, 0);
}

td_tensor *td_softplus(td_tensor *x, double beta, double threshold)
{
    return unary_attrs("td_softplus", TD_OP_SOFTPLUS, x, 0, 0, beta, threshold, 0);
}

td_tensor *td_leaky_relu(td_tensor *x, double slope)
{
    return unary_attrs("td_leaky_relu", TD_OP_LEAKY_RELU, x, 0, 0, slope, 0, 0);
}

td_tensor *td_elu(td_tensor *x, double alpha)
{
    return unary_attrs("td_elu", TD_OP_ELU, x, 0, 0, alpha, 0, 0);
}

td_tensor *td_clamp(td_tensor *x, double lo, double hi)
{
    return unary_attrs("td_clamp", TD_OP_CLAMP, x, 0, 0, lo, hi, 0);
}

/* The largest finite value of a float dtype (0 for others: the op refuses them anyway). */
static double float_max(uint32_t dt)
{
    switch (dt) {
    case TD_F32: return 3.4028234663852886e38;
    case TD_F64: return 1.7976931348623157e308;
    case TD_F16: return 65504.0;
    case TD_BF16: return 3.3895313892515355e38;
    }
    return 0.0;
}

td_tensor *td_nan_to_num(td_tensor *x, double nan, double posinf, double neginf)
{
    if (x == NULL) return null_input(NULL, "td_nan_to_num", "x");
    if (posinf == INFINITY) posinf = float_max(x->desc.dtype);
    if (neginf == -INFINITY) neginf = -float_max(x->desc.dtype);
    return unary_attrs("td_nan_to_num", TD_OP_NAN_TO_NUM, x, 0, 0, nan, posinf, neginf);
}

#define TD__BINARY(fn, OP)                                                                 \
    td_tensor *fn(td_tensor *a, td_tensor *b) { return binary(#fn, TD_OP_##OP, a, b); }
TD__BINARY(td_add, ADD)
TD__BINARY(td_sub, SUB)
TD__BINARY(td_mul, MUL)
TD__BINARY(td_div, DIV)
TD__BINARY(td_pow, POW)
TD__BINARY(td_maximum, MAXIMUM)
TD__BINARY(td_minimum, MINIMUM)
TD__BINARY(td_eq, EQ)
TD__BINARY(td_ne, NE)
TD__BINARY(td_lt, LT)
TD__BINARY(td_le, LE)
TD__BINARY(td_gt, GT)
TD__BINARY(td_ge, GE)
TD__BINARY(td_atan2, ATAN2)
TD__BINARY(td_hypot, HYPOT)
TD__BINARY(td_copysign, COPYSIGN)
TD__BINARY(td_fmod, FMOD)
TD__BINARY(td_remainder, REMAINDER)
TD__BINARY(td_floor_divide, FLOOR_DIVIDE)
TD__BINARY(td_logical_and, LOGICAL_AND)
TD__BINARY(td_logical_or, LOGICAL_OR)
TD__BINARY(td_logical_xor, LOGICAL_XOR)
TD__BINARY(td_bitwise_and, BITWISE_AND)
TD__BINARY(td_bitwise_or, BITWISE_OR)
TD__BINARY(td_bitwise_xor, BITWISE_XOR)
TD__BINARY(td_shift_left, SHIFT_LEFT)
TD__BINARY(td_shift_right, SHIFT_RIGHT)
#undef TD__BINARY

/* MATMUL carries TD_MATMUL_PRECISION_TF32 only for f32 inputs: other dtypes ignore it, and
 * leaving it off keeps their ops (and graph ids) the same as before the attribute existed. */
static td_tensor *matmul(const char *api, td_tensor *a, td_tensor *b, unsigned flags)
{
    if (a == NULL || b == NULL)
        return null_input(any_ctx(2, (td_tensor *[]){a, b}), api, a == NULL ? "a" : "b");
    if (a->ctx != b->ctx) {
        set_err(a->ctx, "%s: inputs belong to different contexts", api);
        return NULL;
    }
    if ((flags & ~(unsigned)TD_MATMUL_ALLOW_TF32) != 0) {
        set_err(a->ctx, "%s: unknown flags 0x%x (known: TD_MATMUL_ALLOW_TF32 = 0x%x)", api,
                flags & ~(unsigned)TD_MATMUL_ALLOW_TF32, (unsigned)TD_MATMUL_ALLOW_TF32);
        return NULL;
    }
    td__op op = {.opcode = TD_OP_MATMUL, .n_inputs = 2};
    if ((flags & TD_MATMUL_ALLOW_TF32) && a->desc.dtype == TD_F32) {
        op.n_iattrs = 1;
        op.iattrs[0] = TD_MATMUL_PRECISION_TF32;
    }
    td_tensor *in[2] = {a, b};
    return record(a->ctx, api, &op, in);
}

td_tensor *td_matmul(td_tensor *a, td_tensor *b)
{
    unsigned flags = a != NULL && a->ctx->opts.matmul_allow_tf32 ? TD_MATMUL_ALLOW_TF32 : 0;
    return matmul("td_matmul", a, b, flags);
}

td_tensor *td_matmul_ex(td_tensor *a, td_tensor *b, unsigned flags)
{
    return matmul("td_matmul_ex", a, b, flags);
}

/* An op of three tensor inputs (WHERE, CLAMP_TENSOR); names: the inputs' names. */
static td_tensor *ternary(const char *api, uint32_t opcode, td_tensor *x, td_tensor *y,
                          td_tensor *z, const char *const names[3])
{
    if (x == NULL || y == NULL || z == NULL)
        return null_input(any_ctx(3, (td_tensor *[]){x, y, z}), api,
                          x == NULL ? names[0] : y == NULL ? names[1] : names[2]);
    if (x->ctx != y->ctx || y->ctx != z->ctx) {
        set_err(y->ctx, "%s: inputs belong to different contexts", api);
        return NULL;
    }
    td__op op = {.opcode = opcode, .n_inputs = 3};
    td_tensor *in[3] = {x, y, z};
    return record(y->ctx, api, &op, in);
}

td_tensor *td_where(td_tensor *cond, td_tensor *a, td_tensor *b)
{
    static const char *const names[3] = {"cond", "a", "b"};
    return ternary("td_where", TD_OP_WHERE, cond, a, b, names);
}

td_tensor *td_clamp_tensor(td_tensor *x, td_tensor *lo, td_tensor *hi)
{
    static const char *const names[3] = {"x", "lo", "hi"};
    return ternary("td_clamp_tensor", TD_OP_CLAMP_TENSOR, x, lo, hi, names);
}

/* t, the result of an op without inputs (FULL, ARANGE: those run on the session's first
 * device), for a composite's op on `like`: t itself when like is on the first device too,
 * else t's copy on like's device (t released). Never a copy on a session of one device,
 * nor while capturing, where every input is on the first. NULL stays NULL. */
static td_tensor *beside(td_tensor *t, const td_tensor *like)
{
    if (t == NULL || t->dev == like->dev) return t;
    td_tensor *m = td_to_device(t, like->ctx->tp->devices[like->dev]);
    td_release(t);
    return m;
}

/* A rank-0 FULL of value v, recorded under `api`'s name, for an op on `like` (beside). */
static td_tensor *scalar_full(const td_tensor *like, const char *api, uint32_t dt, double v)
{
    td__op op = {.opcode = TD_OP_FULL, .dtype = dt, .fattrs = {v}};
    return beside(record(like->ctx, api, &op, NULL), like);
}

/* WHERE with one or two scalar operands, recorded as rank-0 FULLs (the tensor operand's
 * dtype, or dt) and a WHERE: a client-side lowering, nothing new on the wire. */
static td_tensor *where_scalar(const char *api, td_tensor *cond, td_tensor *a, double av,
                               td_tensor *b, double bv, bool have_dt, td_dtype dt)
{
    static const char *const names[3] = {"cond", "a", "b"};
    if (cond == NULL) return null_input(any_ctx(2, (td_tensor *[]){a, b}), api, "cond");
    if (!have_dt && a == NULL && b == NULL) return null_input(cond->ctx, api, "a and b");
    td_context *ctx = cond->ctx;
    td_tensor *other = a != NULL ? a : b;
    if (other != NULL && other->ctx != ctx) {
        set_err(ctx, "%s: inputs belong to different contexts", api);
        return NULL;
    }
    uint32_t sdt = have_dt ? (uint32_t)dt : other->desc.dtype;
    td_tensor *sa = a, *sb = b;
    if (a == NULL && (sa = scalar_full(cond, api, sdt, av)) == NULL) return NULL;
    if (b == NULL && (sb = scalar_full(cond, api, sdt, bv)) == NULL) {
        if (a == NULL) td_release(sa);
        return NULL;
    }
    td_tensor *r = ternary(api, TD_OP_WHERE, cond, sa, sb, names);
    if (a == NULL) td_release(sa);
    if (b == NULL) td_release(sb);
    return r;
}

td_tensor *td_where_scalar_a(td_tensor *cond, double a, td_tensor *b)
{
    if (b == NULL) return null_input(cond != NULL ? cond->ctx : NULL, "td_where_scalar_a", "b");
    return where_scalar("td_where_scalar_a", cond, NULL, a, b, 0, false, TD_F32);
}

td_tensor *td_where_scalar_b(td_tensor *cond, td_tensor *a, double b)
{
    if (a == NULL) return null_input(cond != NULL ? cond->ctx : NULL, "td_where_scalar_b", "a");
    return where_scalar("td_where_scalar_b", cond, a, 0, NULL, b, false, TD_F32);
}

td_tensor *td_where_scalars(td_tensor *cond, double a, double b, td_dtype dt)
{
    return where_scalar("td_where_scalars", cond, NULL, a, NULL, b, true, dt);
}

td_tensor *td_cast(td_tensor *x, td_dtype dt)
{
    if (x == NULL) return null_input(NULL, "td_cast", "x");
    td__op op = {.opcode = TD_OP_CAST, .n_inputs = 1, .dtype = (uint32_t)dt};
    return record(x->ctx, "td_cast", &op, &x);
}

static td_tensor *scalar_op(const char *api, uint32_t opcode, td_tensor *x, double v)
{
    if (x == NULL) return null_input(NULL, api, "x");
    td_tensor *s = scalar_full(x, api, x->desc.dtype, v);
    if (s == NULL) return NULL;
    td_tensor *r = binary(api, opcode, x, s);
    td_release(s);
    return r;
}

td_tensor *td_add_scalar(td_tensor *x, double v) { return scalar_op("td_add_scalar", TD_OP_ADD, x, v); }
td_tensor *td_mul_scalar(td_tensor *x, double v) { return scalar_op("td_mul_scalar", TD_OP_MUL, x, v); }

/* ---- reductions ---- */

/* Normalise an axis (negative counts from the end); false if out of range. */
static bool norm_axis(int axis, uint32_t rank, int *out)
{
    int a = axis < 0 ? axis + (int)rank : axis;
    if (a < 0 || a >= (int)rank) return false;
    *out = a;
    return true;
}

/* The axes mask of an axes list (x non-NULL); false with the error set. */
static bool axes_mask(const char *api, td_tensor *x, int naxes, const int *axes, int64_t *out)
{
    int64_t mask = 0;
    if (naxes == 0 && axes == NULL) {
        mask = x->desc.rank ? (int64_t)((1u << x->desc.rank) - 1) : 0;
    } else {
        if (naxes < 0 || naxes > (int)x->desc.rank || (naxes > 0 && axes == NULL)) {
            set_err(x->ctx, "%s: invalid axes list (naxes %d for rank %u%s)", api, naxes,
                    x->desc.rank, axes == NULL ? ", axes NULL" : "");
            return false;
        }
        for (int i = 0; i < naxes; i++) {
            int a;
            if (!norm_axis(axes[i], x->desc.rank, &a)) {
                set_err(x->ctx, "%s: axis %d out of range for rank %u", api, axes[i],
                        x->desc.rank);
                return false;
            }
            if (mask & ((int64_t)1 << a)) {
                set_err(x->ctx, "%s: axis %d listed twice", api, axes[i]);
                return false;
            }
            mask |= (int64_t)1 << a;
        }
    }
    *out = mask;
    return true;
}

/* A reduction with float attribute f0 (correction, p; 0 where unused). */
static td_tensor *reduce_f(const char *api, uint32_t opcode, td_tensor *x, int naxes,
                           const int *axes, bool keepdims, double f0)
{
    if (x == NULL) return null_input(NULL, api, "x");
    int64_t mask;
    if (!axes_mask(api, x, naxes, axes, &mask)) return NULL;
    td__op op = {.opcode = opcode, .n_inputs = 1, .n_iattrs = 2, .iattrs = {mask, keepdims},
                 .fattrs = {f0, 0}};
    return record(x->ctx, api, &op, &x);
}

static td_tensor *reduce(const char *api, uint32_t opcode, td_tensor *x, int naxes,
                         const int *axes, bool keepdims)
{
    return reduce_f(api, opcode, x, naxes, axes, keepdims, 0.0);
}

td_tensor *td_sum(td_tensor *x, int naxes, const int *axes, bool keepdims)
{
    return reduce("td_sum", TD_OP_SUM, x, naxes, axes, keepdims);
}
td_tensor *td_mean(td_tensor *x, int naxes, const int *axes, bool keepdims)
{
    return reduce("td_mean", TD_OP_MEAN, x, naxes, axes, keepdims);
}
td_tensor *td_max(td_tensor *x, int naxes, const int *axes, bool keepdims)
{
    return reduce("td_max", TD_OP_MAX, x, naxes, axes, keepdims);
}
td_tensor *td_min(td_tensor *x, int naxes, const int *axes, bool keepdims)
{
    return reduce("td_min", TD_OP_MIN, x, naxes, axes, keepdims);
}
td_tensor *td_prod(td_tensor *x, int naxes, const int *axes, bool keepdims)
{
    return reduce("td_prod", TD_OP_PROD, x, naxes, axes, keepdims);
}
td_tensor *td_argmax(td_tensor *x, int axis, bool keepdims)
{
    return reduce("td_argmax", TD_OP_ARGMAX, x, 1, &axis, keepdims);
}
td_tensor *td_argmin(td_tensor *x, int axis, bool keepdims)
{
    return reduce("td_argmin", TD_OP_ARGMIN, x, 1, &axis, keepdims);
}
td_tensor *td_argmax_axes(td_tensor *x, int naxes, const int *axes, bool keepdims)
{
    return reduce("td_argmax_axes", TD_OP_ARGMAX, x, naxes, axes, keepdims);
}
td_tensor *td_argmin_axes(td_tensor *x, int naxes, const int *axes, bool keepdims)
{
    return reduce("td_argmin_axes", TD_OP_ARGMIN, x, naxes, axes, keepdims);
}
td_tensor *td_var(td_tensor *x, int naxes, const int *axes, bool keepdims, double correction)
{
    return reduce_f("td_var", TD_OP_VAR, x, naxes, axes, keepdims, correction);
}
td_tensor *td_std(td_tensor *x, int naxes, const int *axes, bool keepdims, double correction)
{
    return reduce_f("td_std", TD_OP_STD, x, naxes, axes, keepdims, correction);
}
td_tensor *td_logsumexp(td_tensor *x, int naxes, const int *axes, bool keepdims)
{
    return reduce("td_logsumexp", TD_OP_LOGSUMEXP, x, naxes, axes, keepdims);
}
td_tensor *td_norm(td_tensor *x, double p, int naxes, const int *axes, bool keepdims)
{
    uint32_t opcode = p == 1.0        ? TD_OP_NORM_L1
                      : p == INFINITY  ? TD_OP_NORM_INF
                      : p == -INFINITY ? TD_OP_NORM_NEG_INF
                                       : TD_OP_NORM;
    return reduce_f("td_norm", opcode, x, naxes, axes, keepdims, opcode == TD_OP_NORM ? p : 0.0);
}
td_tensor *td_any(td_tensor *x, int naxes, const int *axes, bool keepdims)
{
    return reduce("td_any", TD_OP_ANY, x, naxes, axes, keepdims);
}
td_tensor *td_all(td_tensor *x, int naxes, const int *axes, bool keepdims)
{
    return reduce("td_all", TD_OP_ALL, x, naxes, axes, keepdims);
}

/* ---- scans and sorts along one axis (rank 0: axis 0 or -1) ---- */

static bool along_axis(const char *api, td_tensor *x, int axis, int64_t *out)
{
    int a;
    uint32_t rank = x->desc.rank > 0 ? x->desc.rank : 1;
    if (!norm_axis(axis, rank, &a)) {
        set_err(x->ctx, "%s: axis %d out of range for rank %u", api, axis, x->desc.rank);
        return false;
    }
    *out = a;
    return true;
}

static td_tensor *along(const char *api, uint32_t opcode, td_tensor *x, int axis, int n_extra,
                        int64_t extra)
{
    if (x == NULL) return null_input(NULL, api, "x");
    td__op op = {.opcode = opcode, .n_inputs = 1, .n_iattrs = 1 + (uint32_t)n_extra,
                 .iattrs = {0, extra}};
    if (!along_axis(api, x, axis, &op.iattrs[0])) return NULL;
    return record(x->ctx, api, &op, &x);
}

td_tensor *td_cumsum(td_tensor *x, int axis) { return along("td_cumsum", TD_OP_CUMSUM, x, axis, 0, 0); }
td_tensor *td_cumprod(td_tensor *x, int axis)
{
    return along("td_cumprod", TD_OP_CUMPROD, x, axis, 0, 0);
}
td_tensor *td_sort(td_tensor *x, int axis, bool descending)
{
    return along("td_sort", TD_OP_SORT, x, axis, 1, descending);
}
td_tensor *td_argsort(td_tensor *x, int axis, bool descending)
{
    return along("td_argsort", TD_OP_ARGSORT, x, axis, 1, descending);
}

td_tensor *td_topk(td_tensor *x, int64_t k, int axis, bool largest, td_tensor **indices)
{
    static const char api[] = "td_topk";
    if (x == NULL) return null_input(NULL, api, "x");
    td__op op = {.opcode = TD_OP_TOPK_VALUES, .n_inputs = 1, .n_iattrs = 3,
                 .iattrs = {0, k, largest}};
    if (!along_axis(api, x, axis, &op.iattrs[0])) return NULL;
    td__op iop = op;
    td_tensor *v = record(x->ctx, api, &op, &x);
    if (v == NULL || indices == NULL) return v;
    iop.opcode = TD_OP_TOPK_INDICES;
    td_tensor *ix = record(x->ctx, api, &iop, &x);
    if (ix == NULL) {
        td_release(v);
        return NULL;
    }
    *indices = ix;
    return v;
}

/* ---- convolution, pooling, interpolation (engine/window.h's attribute layout) ---- */

/* The spatial rank of a window op's input 0, or -1 with the error set. */
static int window_nsp(const char *api, const td_tensor *x, const char *which)
{
    if (x->desc.rank < 3 || x->desc.rank > 5) {
        set_err(x->ctx,
                "%s: %s must be [N, C, spatial...] with 1 to 3 spatial dims (rank 3 to 5), got "
                "rank %u",
                api, which, x->desc.rank);
        return -1;
    }
    return (int)x->desc.rank - 2;
}

/* A list argument of nsp entries: NULL refused. */
static bool window_list(const char *api, td_tensor *x, const int64_t *v, const char *name)
{
    if (v == NULL) {
        set_err(x->ctx, "%s: %s is NULL", api, name);
        return false;
    }
    return true;
}

/* The conv attributes {groups, stride, dilation, pad_lo, pad_hi} (+ kernel for the weight
 * gradient) into op->iattrs; `k` the kernel sizes (for "same"). transpose: pad_hi less the
 * output padding. */
static bool conv_attrs(const char *api, td_tensor *x, const td_conv_params *p, int nsp,
                       const int64_t *k, bool transpose, td__op *op)
{
    static const td_conv_params dflt = {.groups = 1};
    if (p == NULL) p = &dflt;
    if (transpose && p->pad_same) {
        set_err(x->ctx, "%s: pad_same is for convolutions, not transposed ones", api);
        return false;
    }
    op->iattrs[0] = p->groups == 0 ? 1 : p->groups;
    for (int i = 0; i < nsp; i++) {
        int64_t st = p->stride[i] == 0 ? 1 : p->stride[i], dl = p->dilation[i] == 0 ? 1 : p->dilation[i];
        int64_t lo = p->pad_lo[i], hi = p->pad_hi[i];
        if (p->pad_same) {
            if (st != 1) {
                set_err(x->ctx, "%s: pad_same needs stride 1, got stride %lld in spatial dim %d",
                        api, (long long)st, i);
                return false;
            }
            if (dl < 1 || k[i] < 1 || k[i] > ((int64_t)1 << 31) || dl > ((int64_t)1 << 31)) {
                set_err(x->ctx, "%s: pad_same with kernel %lld and dilation %lld in spatial dim %d",
                        api, (long long)k[i], (long long)dl, i);
                return false;
            }
            int64_t total = dl * (k[i] - 1);
            lo = total / 2;
            hi = total - lo;
        }
        if (transpose) {
            int64_t op_ = p->output_padding[i], m = st > dl ? st : dl;
            if (op_ < 0 || op_ >= m) {
                set_err(x->ctx,
                        "%s: output_padding %lld in spatial dim %d must be in [0, max(stride %lld, "
                        "dilation %lld))",
                        api, (long long)op_, i, (long long)st, (long long)dl);
                return false;
            }
            hi -= op_;
        } else if (p->output_padding[i] != 0) {
            set_err(x->ctx, "%s: output_padding is for transposed convolutions", api);
            return false;
        }
        op->iattrs[1 + i] = st;
        op->iattrs[1 + nsp + i] = dl;
        op->iattrs[1 + 2 * nsp + i] = lo;
        op->iattrs[1 + 3 * nsp + i] = hi;
    }
    op->n_iattrs = 1 + 4 * (uint32_t)nsp;
    return true;
}

static td_tensor *conv_common(const char *api, uint32_t opcode, td_tensor *x, td_tensor *w,
                              td_tensor *bias, const td_conv_params *p)
{
    if (x == NULL || w == NULL)
        return null_input(any_ctx(2, (td_tensor *[]){x, w}), api, x == NULL ? "x" : "weight");
    int nsp = window_nsp(api, x, "x");
    if (nsp < 0) return NULL;
    if (w->desc.rank != x->desc.rank) {
        set_err(x->ctx, "%s: weight rank %u differs from x rank %u", api, w->desc.rank,
                x->desc.rank);
        return NULL;
    }
    td__op op = {.opcode = opcode, .n_inputs = bias != NULL ? 3 : 2};
    if (!conv_attrs(api, x, p, nsp, w->desc.dims + 2, opcode == TD_OP_CONV_TRANSPOSE, &op))
        return NULL;
    td_tensor *in[3] = {x, w, bias};
    return record(x->ctx, api, &op, in);
}

td_tensor *td_conv(td_tensor *x, td_tensor *weight, td_tensor *bias, const td_conv_params *p)
{
    return conv_common("td_conv", TD_OP_CONV, x, weight, bias, p);
}

td_tensor *td_conv_transpose(td_tensor *x, td_tensor *weight, td_tensor *bias,
                             const td_conv_params *p)
{
    return conv_common("td_conv_transpose", TD_OP_CONV_TRANSPOSE, x, weight, bias, p);
}

td_tensor *td_conv_input_grad(td_tensor *dy, td_tensor *weight, const int64_t *input_size,
                              const td_conv_params *p)
{
    static const char api[] = "td_conv_input_grad";
    if (dy == NULL || weight == NULL)
        return null_input(any_ctx(2, (td_tensor *[]){dy, weight}), api,
                          dy == NULL ? "dy" : "weight");
    int nsp = window_nsp(api, dy, "dy");
    if (nsp < 0 || !window_list(api, dy, input_size, "input_size")) return NULL;
    if (weight->desc.rank != dy->desc.rank) {
        set_err(dy->ctx, "%s: weight rank %u differs from dy rank %u", api, weight->desc.rank,
                dy->desc.rank);
        return NULL;
    }
    td_conv_params q = p != NULL ? *p : (td_conv_params){.groups = 1};
    for (int i = 0; i < 3; i++) q.output_padding[i] = 0;
    td__op op = {.opcode = TD_OP_CONV_TRANSPOSE, .n_inputs = 2};
    if (!conv_attrs(api, dy, &q, nsp, weight->desc.dims + 2, false, &op)) return NULL;
    for (int i = 0; i < nsp; i++) {
        const int64_t st = op.iattrs[1 + i], dl = op.iattrs[1 + nsp + i];
        const int64_t lo = op.iattrs[1 + 2 * nsp + i], hi = op.iattrs[1 + 3 * nsp + i];
        const int64_t L = input_size[i], k = weight->desc.dims[2 + i];
        if (L < 1 || L > ((int64_t)1 << 47) || st < 1 || dl < 1 || k < 1 || lo < 0 || hi < 0 ||
            st > ((int64_t)1 << 31) || dl > ((int64_t)1 << 31) || k > ((int64_t)1 << 31) ||
            lo > ((int64_t)1 << 31) || hi > ((int64_t)1 << 31)) {
            set_err(dy->ctx,
                    "%s: spatial dim %d: input size %lld, stride %lld, dilation %lld, kernel %lld, "
                    "padding %lld + %lld out of range",
                    api, i, (long long)L, (long long)st, (long long)dl, (long long)k,
                    (long long)lo, (long long)hi);
            return NULL;
        }
        const int64_t span = L + lo + hi - dl * (k - 1) - 1;
        if (span < 0) {
            set_err(dy->ctx,
                    "%s: kernel extent %lld exceeds the padded input %lld in spatial dim %d", api,
                    (long long)(dl * (k - 1) + 1), (long long)(L + lo + hi), i);
            return NULL;
        }
        if (span / st + 1 != dy->desc.dims[2 + i]) {
            set_err(dy->ctx, "%s: dy spatial dim %d is %lld, the convolution of input size %lld gives %lld",
                    api, i, (long long)dy->desc.dims[2 + i], (long long)L,
                    (long long)(span / st + 1));
            return NULL;
        }
        op.iattrs[1 + 3 * nsp + i] = hi - span % st; /* the rows the floor dropped */
    }
    td_tensor *in[2] = {dy, weight};
    return record(dy->ctx, api, &op, in);
}

td_tensor *td_conv_weight_grad(td_tensor *x, td_tensor *dy, const int64_t *kernel_size,
                               const td_conv_params *p)
{
    static const char api[] = "td_conv_weight_grad";
    if (x == NULL || dy == NULL)
        return null_input(any_ctx(2, (td_tensor *[]){x, dy}), api, x == NULL ? "x" : "dy");
    int nsp = window_nsp(api, x, "x");
    if (nsp < 0 || !window_list(api, x, kernel_size, "kernel_size")) return NULL;
    td__op op = {.opcode = TD_OP_CONV_WEIGHT_GRAD, .n_inputs = 2};
    if (!conv_attrs(api, x, p, nsp, kernel_size, false, &op)) return NULL;
    for (int i = 0; i < nsp; i++) op.iattrs[1 + 4 * nsp + i] = kernel_size[i];
    op.n_iattrs = 1 + 5 * (uint32_t)nsp;
    td_tensor *in[2] = {x, dy};
    return record(x->ctx, api, &op, in);
}

/* Pool attributes: kernel, stride (0: the kernel), [dilation (0: 1)], padding; sizes. */
static bool pool_attrs(const char *api, td_tensor *x, const td_pool_params *p, int nsp,
                       bool avg, const int64_t *size, td__op *op)
{
    if (p == NULL) {
        set_err(x->ctx, "%s: pooling parameters are NULL (the kernel is required)", api);
        return false;
    }
    uint32_t ns = avg ? 2 : 1, j = 0;
    op->iattrs[0] = p->ceil_mode;
    if (avg) op->iattrs[1] = !p->exclude_pad;
    for (int i = 0; i < nsp; i++) {
        if (avg && p->dilation[i] != 0 && p->dilation[i] != 1) {
            set_err(x->ctx, "%s: dilation %lld in spatial dim %d: avg pooling has none", api,
                    (long long)p->dilation[i], i);
            return false;
        }
        op->iattrs[ns + i] = p->kernel[i];
        op->iattrs[ns + nsp + i] = p->stride[i] == 0 ? p->kernel[i] : p->stride[i];
        if (avg) {
            op->iattrs[ns + 2 * nsp + i] = p->padding[i];
        } else {
            op->iattrs[ns + 2 * nsp + i] = p->dilation[i] == 0 ? 1 : p->dilation[i];
            op->iattrs[ns + 3 * nsp + i] = p->padding[i];
        }
    }
    j = ns + (avg ? 3 : 4) * (uint32_t)nsp;
    if (size != NULL)
        for (int i = 0; i < nsp; i++) op->iattrs[j++] = size[i];
    op->n_iattrs = j;
    return true;
}

td_tensor *td_max_pool(td_tensor *x, const td_pool_params *p, td_tensor **indices)
{
    static const char api[] = "td_max_pool";
    if (x == NULL) return null_input(NULL, api, "x");
    int nsp = window_nsp(api, x, "x");
    td__op op = {.opcode = TD_OP_MAX_POOL, .n_inputs = 1};
    if (nsp < 0 || !pool_attrs(api, x, p, nsp, false, NULL, &op)) return NULL;
    td__op iop = op;
    td_tensor *v = record(x->ctx, api, &op, &x);
    if (v == NULL || indices == NULL) return v;
    iop.opcode = TD_OP_MAX_POOL_INDICES;
    td_tensor *ix = record(x->ctx, api, &iop, &x);
    if (ix == NULL) {
        td_release(v);
        return NULL;
    }
    *indices = ix;
    return v;
}

td_tensor *td_max_pool_backward(td_tensor *dy, td_tensor *indices, const int64_t *input_size,
                                const td_pool_params *p)
{
    static const char api[] = "td_max_pool_backward";
    if (dy == NULL || indices == NULL)
        return null_input(any_ctx(2, (td_tensor *[]){dy, indices}), api,
                          dy == NULL ? "dy" : "indices");
    int nsp = window_nsp(api, dy, "dy");
    if (nsp < 0 || !window_list(api, dy, input_size, "input_size")) return NULL;
    td__op op = {.opcode = TD_OP_MAX_POOL_BACKWARD, .n_inputs = 2};
    if (!pool_attrs(api, dy, p, nsp, false, input_size, &op)) return NULL;
    td_tensor *in[2] = {dy, indices};
    return record(dy->ctx, api, &op, in);
}

td_tensor *td_avg_pool(td_tensor *x, const td_pool_params *p)
{
    static const char api[] = "td_avg_pool";
    if (x == NULL) return null_input(NULL, api, "x");
    int nsp = window_nsp(api, x, "x");
    td__op op = {.opcode = TD_OP_AVG_POOL, .n_inputs = 1};
    if (nsp < 0 || !pool_attrs(api, x, p, nsp, true, NULL, &op)) return NULL;
    return record(x->ctx, api, &op, &x);
}

td_tensor *td_avg_pool_backward(td_tensor *dy, const int64_t *input_size,
                                const td_pool_params *p)
{
    static const char api[] = "td_avg_pool_backward";
    if (dy == NULL) return null_input(NULL, api, "dy");
    int nsp = window_nsp(api, dy, "dy");
    if (nsp < 0 || !window_list(api, dy, input_size, "input_size")) return NULL;
    td__op op = {.opcode = TD_OP_AVG_POOL_BACKWARD, .n_inputs = 1};
    if (!pool_attrs(api, dy, p, nsp, true, input_size, &op)) return NULL;
    return record(dy->ctx, api, &op, &dy);
}

/* One op with {scalars..., size list}. */
static td_tensor *sized(const char *api, uint32_t opcode, td_tensor *x, const char *which,
                        const int64_t *size, const char *size_name, int ns, int64_t s0,
                        int64_t s1)
{
    if (x == NULL) return null_input(NULL, api, which);
    int nsp = window_nsp(api, x, which);
    if (nsp < 0 || !window_list(api, x, size, size_name)) return NULL;
    td__op op = {.opcode = opcode, .n_inputs = 1, .n_iattrs = (uint32_t)(ns + nsp),
                 .iattrs = {s0, s1}};
    for (int i = 0; i < nsp; i++) op.iattrs[ns + i] = size[i];
    return record(x->ctx, api, &op, &x);
}

td_tensor *td_adaptive_avg_pool(td_tensor *x, const int64_t *output_size)
{
    return sized("td_adaptive_avg_pool", TD_OP_ADAPTIVE_AVG_POOL, x, "x", output_size,
                 "output_size", 0, 0, 0);
}

td_tensor *td_adaptive_avg_pool_backward(td_tensor *dy, const int64_t *input_size)
{
    return sized("td_adaptive_avg_pool_backward", TD_OP_ADAPTIVE_AVG_POOL_BACKWARD, dy, "dy",
                 input_size, "input_size", 0, 0, 0);
}

td_tensor *td_interpolate(td_tensor *x, const int64_t *output_size, enum td_interp_mode mode,
                          bool align_corners)
{
    return sized("td_interpolate", TD_OP_INTERPOLATE, x, "x", output_size, "output_size", 2,
                 (int64_t)mode, align_corners);
}

/* ---- movement ---- */

td_tensor *td_reshape(td_tensor *x, int rank, const int64_t *dims)
{
    if (x == NULL) return null_input(NULL, "td_reshape", "x");
    if (rank < 0 || rank > TD_MAX_RANK || (rank > 0 && dims == NULL)) {
        set_err(x->ctx, "td_reshape: rank %d is outside 0..%d", rank, TD_MAX_RANK);
        return NULL;
    }
    td__op op = {.opcode = TD_OP_RESHAPE, .n_inputs = 1, .n_iattrs = (uint32_t)rank};
    int infer_at = -1;
    int64_t known = 1;
    for (int i = 0; i < rank; i++) {
        op.iattrs[i] = dims[i];
        if (dims[i] == -1) {
            if (infer_at >= 0) {
                set_err(x->ctx, "td_reshape: more than one -1 dim");
                return NULL;
            }
            infer_at = i;
        } else if (dims[i] < 0 || __builtin_mul_overflow(known, dims[i], &known)) {
            set_err(x->ctx, "td_reshape: invalid dim %lld", (long long)dims[i]);
            return NULL;
        }
    }
    if (infer_at >= 0) {
        int64_t n = td__desc_nelem(&x->desc);
        if (known == 0 || n % known != 0) {
            set_err(x->ctx, "td_reshape: cannot infer the -1 dim for %lld elements",
                    (long long)n);
            return NULL;
        }
        op.iattrs[infer_at] = n / known;
    }
    return record(x->ctx, "td_reshape", &op, &x);
}

td_tensor *td_permute(td_tensor *x, const int *perm)
{
    if (x == NULL) return null_input(NULL, "td_permute", "x");
    if (perm == NULL && x->desc.rank > 0) {
        set_err(x->ctx, "td_permute: perm is NULL");
        return NULL;
    }
    td__op op = {.opcode = TD_OP_PERMUTE, .n_inputs = 1, .n_iattrs = x->desc.rank};
    for (uint32_t i = 0; i < x->desc.rank; i++) op.iattrs[i] = perm[i];
    return record(x->ctx, "td_permute", &op, &x);
}

td_tensor *td_transpose(td_tensor *x)
{
    if (x == NULL) return null_input(NULL, "td_transpose", "x");
    if (x->desc.rank < 2) {
        set_err(x->ctx, "td_transpose: needs rank >= 2, got %u", x->desc.rank);
        return NULL;
    }
    int perm[TD_MAX_RANK];
    for (uint32_t i = 0; i < x->desc.rank; i++) perm[i] = (int)i;
    perm[x->desc.rank - 2] = (int)x->desc.rank - 1;
    perm[x->desc.rank - 1] = (int)x->desc.rank - 2;
    return td_permute(x, perm);
}

static int64_t clamp_index(int64_t v, int64_t dim)
{
    if (v < 0) v += dim;
    if (v < 0) v = 0;
    if (v > dim) v = dim;
    return v;
}

td_tensor *td_slice(td_tensor *x, const int64_t *starts, const int64_t *stops)
{
    if (x == NULL) return null_input(NULL, "td_slice", "x");
    uint32_t r = x->desc.rank;
    if (r > 0 && (starts == NULL || stops == NULL)) {
        set_err(x->ctx, "td_slice: starts and stops must hold %u entries each (got NULL)", r);
        return NULL;
    }
    td__op op = {.opcode = TD_OP_SLICE, .n_inputs = 1, .n_iattrs = 2 * r};
    for (uint32_t i = 0; i < r; i++) {
        int64_t a = clamp_index(starts[i], x->desc.dims[i]);
        int64_t b = clamp_index(stops[i], x->desc.dims[i]);
        op.iattrs[i] = a;
        op.iattrs[r + i] = b < a ? a : b;
    }
    return record(x->ctx, "td_slice", &op, &x);
}

td_tensor *td_concat(int n, td_tensor *const *xs, int axis)
{
    if (xs == NULL) return thread_fail("td_concat: xs is NULL (n %d)", n);
    if (n < 1 || n > TD_OP_MAX_INPUTS) {
        /* xs[0] exists when n >= 1: its context gets the message */
        if (n >= 1 && xs[0] != NULL) {
            set_err(xs[0]->ctx, "td_concat: n is %d, want 1..%d", n, TD_OP_MAX_INPUTS);
            return NULL;
        }
        return thread_fail("td_concat: n is %d, want 1..%d", n, TD_OP_MAX_INPUTS);
    }
    for (int i = 0; i < n; i++) {
        if (xs[i] == NULL) {
            char which[16];
            snprintf(which, sizeof which, "xs[%d]", i);
            return null_input(any_ctx(n, xs), "td_concat", which);
        }
    }
    td_context *ctx = xs[0]->ctx;
    for (int i = 1; i < n; i++) {
        if (xs[i]->ctx != ctx) {
            set_err(ctx, "td_concat: inputs belong to different contexts");
            return NULL;
        }
    }
    int a;
    if (!norm_axis(axis, xs[0]->desc.rank, &a)) {
        set_err(ctx, "td_concat: axis %d out of range for rank %u", axis, xs[0]->desc.rank);
        return NULL;
    }
    td__op op = {.opcode = TD_OP_CONCAT, .n_inputs = (uint32_t)n, .n_iattrs = 1, .iattrs = {a}};
    return record(ctx, "td_concat", &op, xs);
}

td_tensor *td_expand(td_tensor *x, int rank, const int64_t *dims)
{
    if (x == NULL) return null_input(NULL, "td_expand", "x");
    td__op op = {.opcode = TD_OP_EXPAND, .n_inputs = 1};
    if (!set_shape(x->ctx, "td_expand", &op, rank, dims)) return NULL;
    return record(x->ctx, "td_expand", &op, &x);
}

static td_tensor *indexed(const char *api, uint32_t opcode, td_tensor *x, td_tensor *index,
                          int axis)
{
    if (x == NULL || index == NULL)
        return null_input(any_ctx(2, (td_tensor *[]){x, index}), api,
                          x == NULL ? "x" : "index");
    int a;
    if (!norm_axis(axis, x->desc.rank, &a)) {
        set_err(x->ctx, "%s: axis %d out of range for rank %u", api, axis, x->desc.rank);
        return NULL;
    }
    if (x->ctx != index->ctx) {
        set_err(x->ctx, "%s: inputs belong to different contexts", api);
        return NULL;
    }
    td__op op = {.opcode = opcode, .n_inputs = 2, .n_iattrs = 1, .iattrs = {a}};
    td_tensor *in[2] = {x, index};
    return record(x->ctx, api, &op, in);
}

td_tensor *td_gather(td_tensor *x, td_tensor *index, int axis)
{
    return indexed("td_gather", TD_OP_GATHER, x, index, axis);
}

td_tensor *td_index_select(td_tensor *x, td_tensor *index, int axis)
{
    return indexed("td_index_select", TD_OP_INDEX_SELECT, x, index, axis);
}

/* ---- movement of issue 13: strided slices, flip, roll, pad, stack/split, repeat/tile,
 * tril/triu, one_hot, masked_fill, scatter, index_add, gather_nd ---- */

/* A RESHAPE recorded under `api`'s name (dims known valid). */
static td_tensor *reshape_as(const char *api, td_tensor *x, uint32_t rank, const int64_t *dims)
{
    td__op op = {.opcode = TD_OP_RESHAPE, .n_inputs = 1, .n_iattrs = rank};
    for (uint32_t i = 0; i < rank; i++) op.iattrs[i] = dims[i];
    return record(x->ctx, api, &op, &x);
}

/* A SLICE_STEP recorded under `api`'s name from normalised starts, stops, steps. */
static td_tensor *slice_step_as(const char *api, td_tensor *x, const int64_t *a,
                                const int64_t *b, const int64_t *st)
{
    const uint32_t r = x->desc.rank;
    td__op op = {.opcode = TD_OP_SLICE_STEP, .n_inputs = 1, .n_iattrs = 3 * r};
    for (uint32_t i = 0; i < r; i++) {
        op.iattrs[i] = a[i];
        op.iattrs[r + i] = b[i];
        op.iattrs[2 * r + i] = st[i];
    }
    return record(x->ctx, api, &op, &x);
}

/* Python's slice.indices: v (negative counts from the end) clamped for a step's sign. */
static int64_t slice_bound(int64_t v, int64_t n, bool neg)
{
    if (v < 0) {
        v += n;
        if (v < 0) v = neg ? -1 : 0;
    } else if (v >= n) {
        v = neg ? n - 1 : n;
    }
    return v;
}

td_tensor *td_slice_step(td_tensor *x, const int64_t *starts, const int64_t *stops,
                         const int64_t *steps)
{
    static const char api[] = "td_slice_step";
    if (x == NULL) return null_input(NULL, api, "x");
    const uint32_t r = x->desc.rank;
    if (r > 0 && (starts == NULL || stops == NULL || steps == NULL)) {
        set_err(x->ctx, "%s: starts, stops and steps must hold %u entries each (got NULL)", api, r);
        return NULL;
    }
    int64_t a[TD_MAX_RANK], b[TD_MAX_RANK];
    for (uint32_t i = 0; i < r; i++) {
        const int64_t n = x->desc.dims[i], st = steps[i];
        if (st == 0) {
            set_err(x->ctx, "%s: step 0 on dim %u (steps must be non-zero)", api, i);
            return NULL;
        }
        a[i] = slice_bound(starts[i], n, st < 0);
        b[i] = slice_bound(stops[i], n, st < 0);
        if (st > 0 && b[i] < a[i]) b[i] = a[i];
        if (st < 0 && b[i] > a[i]) b[i] = a[i];
    }
    return slice_step_as(api, x, a, b, steps);
}

/* Normalise n axes of x (negative from the end) into a mask; duplicates refused. */
static bool axes_unique(const char *api, td_tensor *x, int n, const int *axes, int64_t *mask,
                        int *norm)
{
    int64_t m = 0;
    if (n < 0 || n > (int)x->desc.rank || (n > 0 && axes == NULL)) {
        set_err(x->ctx, "%s: invalid axes list (n %d for rank %u%s)", api, n, x->desc.rank,
                axes == NULL ? ", axes NULL" : "");
        return false;
    }
    for (int i = 0; i < n; i++) {
        int a;
        if (!norm_axis(axes[i], x->desc.rank, &a)) {
            set_err(x->ctx, "%s: axis %d out of range for rank %u", api, axes[i], x->desc.rank);
            return false;
        }
        if ((m >> a) & 1) {
            set_err(x->ctx, "%s: axis %d appears twice", api, axes[i]);
            return false;
        }
        m |= (int64_t)1 << a;
        if (norm != NULL) norm[i] = a;
    }
    *mask = m;
    return true;
}

td_tensor *td_flip(td_tensor *x, int naxes, const int *axes)
{
    static const char api[] = "td_flip";
    if (x == NULL) return null_input(NULL, api, "x");
    td__op op = {.opcode = TD_OP_FLIP, .n_inputs = 1, .n_iattrs = 1};
    if (!axes_unique(api, x, naxes, axes, &op.iattrs[0], NULL)) return NULL;
    return record(x->ctx, api, &op, &x);
}

td_tensor *td_roll(td_tensor *x, int n, const int64_t *shifts, const int *axes)
{
    static const char api[] = "td_roll";
    if (x == NULL) return null_input(NULL, api, "x");
    if (n < 0 || n > TD_MAX_RANK || (n > 0 && shifts == NULL)) {
        set_err(x->ctx, "%s: n %d is outside 0..%d (or shifts is NULL)", api, n, TD_MAX_RANK);
        return NULL;
    }
    if (axes == NULL) {
        /* torch.roll without dims: roll the flattened tensor, restore the shape */
        if (n != 1) {
            set_err(x->ctx, "%s: without axes it takes one shift (of the flattened tensor), "
                    "got %d", api, n);
            return NULL;
        }
        int64_t len = td__desc_nelem(&x->desc);
        td_tensor *f = reshape_as(api, x, 1, &len);
        if (f == NULL) return NULL;
        td__op op = {.opcode = TD_OP_ROLL, .n_inputs = 1, .n_iattrs = 1,
                     .iattrs = {len > 0 ? shifts[0] % len : 0}};
        td_tensor *rl = record(x->ctx, api, &op, &f);
        td_release(f);
        if (rl == NULL) return NULL;
        td_tensor *out = reshape_as(api, rl, x->desc.rank, x->desc.dims);
        td_release(rl);
        return out;
    }
    td__op op = {.opcode = TD_OP_ROLL, .n_inputs = 1, .n_iattrs = x->desc.rank};
    for (int i = 0; i < n; i++) {
        int a;
        if (!norm_axis(axes[i], x->desc.rank, &a)) {
            set_err(x->ctx, "%s: axis %d out of range for rank %u", api, axes[i], x->desc.rank);
            return NULL;
        }
        /* a repeated axis rolls by the sum of its shifts, as torch.roll; taken mod the dim */
        int64_t d = x->desc.dims[a];
        if (d > 0) op.iattrs[a] = (op.iattrs[a] + shifts[i] % d) % d;
    }
    return record(x->ctx, api, &op, &x);
}

td_tensor *td_pad(td_tensor *x, int npads, const int64_t *pads, td_pad_mode mode, double value)
{
    static const char api[] = "td_pad";
    if (x == NULL) return null_input(NULL, api, "x");
    const uint32_t r = x->desc.rank;
    if (npads < 0 || npads % 2 != 0 || npads > 2 * (int)r || (npads > 0 && pads == NULL)) {
        set_err(x->ctx, "%s: npads %d must be even and at most 2 x rank %u (pads %s)", api, npads,
                r, pads == NULL ? "NULL" : "given");
        return NULL;
    }
    td__op op = {.opcode = TD_OP_PAD, .n_inputs = 1, .n_iattrs = 1 + 2 * r,
                 .iattrs = {(int64_t)mode}, .fattrs = {value}};
    /* torch order: (before, after) of the last dim first */
    for (int i = 0; i < npads / 2; i++) {
        uint32_t d = r - 1 - (uint32_t)i;
        op.iattrs[1 + d] = pads[2 * i];
        op.iattrs[1 + r + d] = pads[2 * i + 1];
    }
    return record(x->ctx, api, &op, &x);
}

/* x with n - rank leading dims of 1 (n >= rank), recorded under api; a new reference. */
static td_tensor *lead_ones(const char *api, td_tensor *x, int n)
{
    int64_t dims[TD_MAX_RANK];
    const int extra = n - (int)x->desc.rank;
    for (int i = 0; i < extra; i++) dims[i] = 1;
    for (uint32_t i = 0; i < x->desc.rank; i++) dims[extra + (int)i] = x->desc.dims[i];
    return reshape_as(api, x, (uint32_t)n, dims);
}

static td_tensor *repeat_common(const char *api, td_tensor *x, int n, const int64_t *reps,
                                bool tile)
{
    if (x == NULL) return null_input(NULL, api, "x");
    const int r = (int)x->desc.rank;
    if (n < 0 || n > TD_MAX_RANK || (n > 0 && reps == NULL) || (!tile && n < r)) {
        set_err(x->ctx, "%s: n %d must be %s..%d (rank %d%s)", api, n, tile ? "0" : "rank",
                TD_MAX_RANK, r, n > 0 && reps == NULL ? ", repeats NULL" : "");
        return NULL;
    }
    const int m = n > r ? n : r;
    td__op op = {.opcode = TD_OP_REPEAT, .n_inputs = 1, .n_iattrs = (uint32_t)m};
    for (int i = 0; i < m; i++) op.iattrs[i] = 1;
    for (int i = 0; i < n; i++) op.iattrs[m - n + i] = reps[i];
    td_tensor *y = m > r ? lead_ones(api, x, m) : x;
    if (y == NULL) return NULL;
    td_tensor *out = record(x->ctx, api, &op, &y);
    if (y != x) td_release(y);
    return out;
}

td_tensor *td_repeat(td_tensor *x, int n, const int64_t *repeats)
{
    return repeat_common("td_repeat", x, n, repeats, false);
}

td_tensor *td_tile(td_tensor *x, int n, const int64_t *reps)
{
    return repeat_common("td_tile", x, n, reps, true);
}

td_tensor *td_stack(int n, td_tensor *const *xs, int axis)
{
    static const char api[] = "td_stack";
    if (xs == NULL) return thread_fail("td_stack: xs is NULL (n %d)", n);
    if (n < 1) return thread_fail("td_stack: n is %d, want >= 1", n);
    for (int i = 0; i < n; i++) {
        if (xs[i] == NULL) {
            char which[16];
            snprintf(which, sizeof which, "xs[%d]", i);
            return null_input(any_ctx(n, xs), api, which);
        }
    }
    td_context *ctx = xs[0]->ctx;
    const uint32_t r = xs[0]->desc.rank;
    int a;
    if (r + 1 > TD_MAX_RANK || !norm_axis(axis, r + 1, &a)) {
        set_err(ctx, "%s: axis %d out of range for rank %u + 1", api, axis, r);
        return NULL;
    }
    for (int i = 1; i < n; i++) {
        if (xs[i]->ctx != ctx) {
            set_err(ctx, "%s: inputs belong to different contexts", api);
            return NULL;
        }
        if (!td__desc_equal(&xs[i]->desc, &xs[0]->desc)) {
            char s0[96], si[96];
            td__desc_str(&xs[0]->desc, s0, sizeof s0);
            td__desc_str(&xs[i]->desc, si, sizeof si);
            set_err(ctx, "%s: input %d is %s, input 0 is %s (all must match)", api, i, si, s0);
            return NULL;
        }
    }
    /* each input as [..., 1, ...], then CONCATs of at most 8 inputs, level by level */
    int64_t dims[TD_MAX_RANK];
    for (int i = 0; i < a; i++) dims[i] = xs[0]->desc.dims[i];
    dims[a] = 1;
    for (uint32_t i = (uint32_t)a; i < r; i++) dims[i + 1] = xs[0]->desc.dims[i];
    td_tensor **level = td__malloc((size_t)n * sizeof *level);
    if (level == NULL) {
        set_err_status(ctx, TD_ENOMEM, "%s: out of memory", api);
        return NULL;
    }
    int m = 0;
    td_tensor *out = NULL;
    for (; m < n; m++)
        if ((level[m] = reshape_as(api, xs[m], r + 1, dims)) == NULL) goto done;
    while (m > 1) {
        int k = 0;
        for (int i = 0; i < m; i += TD_OP_MAX_INPUTS, k++) {
            int g = m - i < TD_OP_MAX_INPUTS ? m - i : TD_OP_MAX_INPUTS;
            td__op op = {.opcode = TD_OP_CONCAT, .n_inputs = (uint32_t)g, .n_iattrs = 1,
                         .iattrs = {a}};
            td_tensor *c = record(ctx, api, &op, &level[i]);
            for (int j = 0; j < g; j++) td_release(level[i + j]);
            level[k] = c;
            if (c == NULL) {
                for (int j = i + g; j < m; j++) td_release(level[j]);
                m = k;
                goto done;
            }
        }
        m = k;
    }
    out = level[0];
    m = 0;
done:
    for (int j = 0; j < m; j++) td_release(level[j]);
    td__free(level);
    return out;
}

/* n slices of x along axis with the given sizes into out[0..n); all or nothing. */
static td_status split_as(const char *api, td_tensor *x, int n, const int64_t *sizes, int a,
                          td_tensor **out)
{
    const uint32_t r = x->desc.rank;
    int64_t st[TD_MAX_RANK], b[TD_MAX_RANK], e[TD_MAX_RANK];
    for (uint32_t i = 0; i < r; i++) {
        st[i] = 1;
        b[i] = 0;
        e[i] = x->desc.dims[i];
    }
    int64_t at = 0;
    for (int i = 0; i < n; i++) {
        b[a] = at;
        e[a] = at + sizes[i];
        at = e[a];
        if ((out[i] = slice_step_as(api, x, b, e, st)) == NULL) {
            for (int j = 0; j < i; j++) {
                td_release(out[j]);
                out[j] = NULL;
            }
            return td_last_status(x->ctx);
        }
    }
    return TD_OK;
}

td_status td_split(td_tensor *x, int n, const int64_t *sizes, int axis, td_tensor **out)
{
    static const char api[] = "td_split";
    if (x == NULL) {
        null_input(NULL, api, "x");
        return TD_EINVAL;
    }
    int a;
    if (n < 1 || sizes == NULL || out == NULL) {
        set_err(x->ctx, "%s: n %d must be >= 1 with sizes and out non-NULL", api, n);
        return TD_EINVAL;
    }
    if (!norm_axis(axis, x->desc.rank, &a)) {
        set_err(x->ctx, "%s: axis %d out of range for rank %u", api, axis, x->desc.rank);
        return TD_EINVAL;
    }
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        if (sizes[i] < 0 || __builtin_add_overflow(total, sizes[i], &total)) {
            set_err(x->ctx, "%s: size %lld of piece %d is negative or overflows", api,
                    (long long)sizes[i], i);
            return TD_EINVAL;
        }
    }
    if (total != x->desc.dims[a]) {
        set_err(x->ctx, "%s: sizes sum to %lld, dim %d has %lld", api, (long long)total, a,
                (long long)x->desc.dims[a]);
        return TD_EINVAL;
    }
    return split_as(api, x, n, sizes, a, out);
}

td_status td_chunk(td_tensor *x, int chunks, int axis, td_tensor **out, int *n_out)
{
    static const char api[] = "td_chunk";
    if (x == NULL) {
        null_input(NULL, api, "x");
        return TD_EINVAL;
    }
    int a;
    if (chunks < 1 || out == NULL || n_out == NULL) {
        set_err(x->ctx, "%s: chunks %d must be >= 1 with out and n_out non-NULL", api, chunks);
        return TD_EINVAL;
    }
    if (!norm_axis(axis, x->desc.rank, &a)) {
        set_err(x->ctx, "%s: axis %d out of range for rank %u", api, axis, x->desc.rank);
        return TD_EINVAL;
    }
    /* torch.chunk: pieces of ceil(dim / chunks), the last smaller; an empty dim gives
     * `chunks` empty pieces */
    const int64_t d = x->desc.dims[a];
    const int64_t size = d == 0 ? 0 : (d + chunks - 1) / chunks;
    const int n = d == 0 ? chunks : (int)((d + size - 1) / size);
    int64_t *sizes = td__malloc((size_t)n * sizeof *sizes);
    if (sizes == NULL) {
        set_err_status(x->ctx, TD_ENOMEM, "%s: out of memory", api);
        return TD_ENOMEM;
    }
    for (int i = 0; i < n; i++) sizes[i] = d == 0 ? 0 : (i + 1 < n ? size : d - size * (n - 1));
    td_status s = split_as(api, x, n, sizes, a, out);
    td__free(sizes);
    if (s == TD_OK) *n_out = n;
    return s;
}

static td_tensor *tri(const char *api, uint32_t opcode, td_tensor *x, int64_t diagonal)
{
    if (x == NULL) return null_input(NULL, api, "x");
    td__op op = {.opcode = opcode, .n_inputs = 1, .n_iattrs = 1, .iattrs = {diagonal}};
    return record(x->ctx, api, &op, &x);
}

td_tensor *td_tril(td_tensor *x, int64_t diagonal) { return tri("td_tril", TD_OP_TRIL, x, diagonal); }
td_tensor *td_triu(td_tensor *x, int64_t diagonal) { return tri("td_triu", TD_OP_TRIU, x, diagonal); }

td_tensor *td_one_hot(td_tensor *index, int64_t num_classes, td_dtype dt)
{
    static const char api[] = "td_one_hot";
    if (index == NULL) return null_input(NULL, api, "index");
    td__op op = {.opcode = TD_OP_ONE_HOT, .dtype = (uint32_t)dt, .n_inputs = 1, .n_iattrs = 1,
                 .iattrs = {num_classes}};
    return record(index->ctx, api, &op, &index);
}

td_tensor *td_masked_fill(td_tensor *x, td_tensor *mask, double value)
{
    static const char api[] = "td_masked_fill";
    if (x == NULL || mask == NULL)
        return null_input(any_ctx(2, (td_tensor *[]){x, mask}), api, x == NULL ? "x" : "mask");
    if (x->ctx != mask->ctx) {
        set_err(x->ctx, "%s: inputs belong to different contexts", api);
        return NULL;
    }
    td__op op = {.opcode = TD_OP_MASKED_FILL, .n_inputs = 2, .fattrs = {value}};
    td_tensor *in[2] = {x, mask};
    return record(x->ctx, api, &op, in);
}

static td_tensor *scatter_common(const char *api, uint32_t opcode, td_tensor *x, int axis,
                                 td_tensor *index, td_tensor *src)
{
    td_tensor *in[3] = {x, index, src};
    static const char *const names[3] = {"x", "index", "src"};
    for (int i = 0; i < 3; i++)
        if (in[i] == NULL) return null_input(any_ctx(3, in), api, names[i]);
    if (index->ctx != x->ctx || src->ctx != x->ctx) {
        set_err(x->ctx, "%s: inputs belong to different contexts", api);
        return NULL;
    }
    int a;
    if (!norm_axis(axis, x->desc.rank, &a)) {
        set_err(x->ctx, "%s: axis %d out of range for rank %u", api, axis, x->desc.rank);
        return NULL;
    }
    td__op op = {.opcode = opcode, .n_inputs = 3, .n_iattrs = 1, .iattrs = {a}};
    return record(x->ctx, api, &op, in);
}

td_tensor *td_scatter(td_tensor *x, int axis, td_tensor *index, td_tensor *src)
{
    return scatter_common("td_scatter", TD_OP_SCATTER, x, axis, index, src);
}

td_tensor *td_scatter_add(td_tensor *x, int axis, td_tensor *index, td_tensor *src)
{
    return scatter_common("td_scatter_add", TD_OP_SCATTER_ADD, x, axis, index, src);
}

td_tensor *td_index_add(td_tensor *x, int axis, td_tensor *index, td_tensor *src)
{
    return scatter_common("td_index_add", TD_OP_INDEX_ADD, x, axis, index, src);
}

td_tensor *td_gather_nd(td_tensor *x, td_tensor *index)
{
    static const char api[] = "td_gather_nd";
    if (x == NULL || index == NULL)
        return null_input(any_ctx(2, (td_tensor *[]){x, index}), api, x == NULL ? "x" : "index");
    if (x->ctx != index->ctx) {
        set_err(x->ctx, "%s: inputs belong to different contexts", api);
        return NULL;
    }
    td__op op = {.opcode = TD_OP_GATHER_ND, .n_inputs = 2};
    td_tensor *in[2] = {x, index};
    return record(x->ctx, api, &op, in);
}

/* ---- softmax ---- */

static td_tensor *softmax_common(const char *api, uint32_t opcode, td_tensor *x, int axis)
{
    if (x == NULL) return null_input(NULL, api, "x");
    int a;
    if (!norm_axis(axis, x->desc.rank, &a)) {
        set_err(x->ctx, "%s: axis %d out of range for rank %u", api, axis, x->desc.rank);
        return NULL;
    }
    if (!td__dtype_is_float(x->desc.dtype)) {
        set_err(x->ctx, "%s: needs a float dtype, got %s", api, td_dtype_name(x->desc.dtype));
        return NULL;
    }
    if (x->desc.dims[a] == 0) {
        set_err(x->ctx, "%s: axis %d has length 0", api, axis);
        return NULL;
    }
    td__op op = {.opcode = opcode, .n_inputs = 1, .n_iattrs = 1, .iattrs = {a}};
    return record(x->ctx, api, &op, &x);
}

td_tensor *td_softmax(td_tensor *x, int axis)
{
    return softmax_common("td_softmax", TD_OP_SOFTMAX, x, axis);
}

td_tensor *td_log_softmax(td_tensor *x, int axis)
{
    return softmax_common("td_log_softmax", TD_OP_LOG_SOFTMAX, x, axis);
}

/* ---- einsum: a client-side lowering onto SUM, PERMUTE, RESHAPE and MATMUL ----
 * Operands are folded left to right. Before each step, every index that no later operand
 * and not the output uses is summed away from the operand that alone holds it; a pair
 * (a, b) then becomes one batched matmul: a permuted to [batch, a-only, contracted] and b to
 * [batch, contracted, b-only], each reshaped to rank 3, multiplied, and reshaped back to
 * [batch..., a-only..., b-only...]. The last operand is summed to the output's indices and
 * permuted into their order. Every op is recorded under td_einsum's name. */

#define EINSUM_MAX_OPERANDS 8

typedef struct es_term {
    td_tensor *t;
    bool owned;            /* an intermediate of ours (released), not the caller's */
    char ix[TD_MAX_RANK];  /* one index letter per dim */
    int rank;
} es_term;

static void es_drop(es_term *e)
{
    if (e->owned) td_release(e->t);
    e->t = NULL;
    e->owned = false;
}

/* Replace e's tensor by r (NULL: failure, e dropped). */
static bool es_set(es_term *e, td_tensor *r)
{
    es_drop(e);
    if (r == NULL) return false;
    e->t = r;
    e->owned = true;
    return true;
}

/* Whether letter c is used by the output or by a term after index `after`. */
static bool es_needed(char c, const char *out, const es_term *terms, int n, int after)
{
    if (strchr(out, c) != NULL) return true;
    for (int k = after + 1; k < n; k++)
        if (memchr(terms[k].ix, c, (size_t)terms[k].rank) != NULL) return true;
    return false;
}

/* Sum away the dims of e whose letters `keep` rejects (keep[i] false). */
static bool es_sum(const char *api, es_term *e, const bool *keep)
{
    int axes[TD_MAX_RANK], na = 0, r = 0;
    char ix[TD_MAX_RANK];
    for (int i = 0; i < e->rank; i++) {
        if (!keep[i]) axes[na++] = i;
        else ix[r++] = e->ix[i];
    }
    if (na == 0) return true;
    if (!es_set(e, reduce(api, TD_OP_SUM, e->t, na, axes, false))) return false;
    memcpy(e->ix, ix, (size_t)r);
    e->rank = r;
    return true;
}

/* Permute e's dims into the letter order `ix` (a permutation of e->ix). */
static bool es_permute(const char *api, es_term *e, const char *ix)
{
    td__op op = {.opcode = TD_OP_PERMUTE, .n_inputs = 1, .n_iattrs = (uint32_t)e->rank};
    bool same = true;
    for (int i = 0; i < e->rank; i++) {
        op.iattrs[i] = (const char *)memchr(e->ix, ix[i], (size_t)e->rank) - e->ix;
        same = same && op.iattrs[i] == i;
    }
    if (same) return true;
    if (!es_set(e, record(e->t->ctx, api, &op, &e->t))) return false;
    memcpy(e->ix, ix, (size_t)e->rank);
    return true;
}

static int64_t es_prod(const int64_t *size, const char *ix, int n)
{
    int64_t p = 1;
    for (int i = 0; i < n; i++) p *= size[(unsigned char)ix[i]];
    return p;
}

/* a := a (x) b contracted over the letters neither the output nor a later term needs. */
static bool es_pair(const char *api, es_term *a, es_term *b, const char *out,
                    const es_term *terms, int n, int at, const int64_t *size, unsigned mmflags)
{
    char bat[TD_MAX_RANK], ao[TD_MAX_RANK], bo[TD_MAX_RANK], con[TD_MAX_RANK];
    int nb = 0, na = 0, nbo = 0, nc = 0;
    for (int i = 0; i < a->rank; i++) {
        char c = a->ix[i];
        if (memchr(b->ix, c, (size_t)b->rank) == NULL) ao[na++] = c;
        else if (es_needed(c, out, terms, n, at)) bat[nb++] = c;
        else con[nc++] = c;
    }
    for (int i = 0; i < b->rank; i++)
        if (memchr(a->ix, b->ix[i], (size_t)a->rank) == NULL) bo[nbo++] = b->ix[i];
    if (nb + na + nbo > TD_MAX_RANK) {
        set_err(a->t->ctx, "%s: an intermediate would have rank %d (more than %d)", api,
                nb + na + nbo, TD_MAX_RANK);
        return false;
    }
    char pa[TD_MAX_RANK], pb[TD_MAX_RANK];
    memcpy(pa, bat, (size_t)nb);
    memcpy(pa + nb, ao, (size_t)na);
    memcpy(pa + nb + na, con, (size_t)nc);
    memcpy(pb, bat, (size_t)nb);
    memcpy(pb + nb, con, (size_t)nc);
    memcpy(pb + nb + nc, bo, (size_t)nbo);
    if (!es_permute(api, a, pa) || !es_permute(api, b, pb)) return false;
    const int64_t B = es_prod(size, bat, nb), M = es_prod(size, ao, na),
                  K = es_prod(size, con, nc), N = es_prod(size, bo, nbo);
    if (!es_set(a, reshape_as(api, a->t, 3, (int64_t[]){B, M, K})) ||
        !es_set(b, reshape_as(api, b->t, 3, (int64_t[]){B, K, N})))
        return false;
    td_tensor *m = matmul(api, a->t, b->t, mmflags);
    es_drop(b);
    if (!es_set(a, m)) return false;
    int64_t dims[TD_MAX_RANK];
    int r = 0;
    for (int i = 0; i < nb; i++) dims[r] = size[(unsigned char)bat[i]], a->ix[r++] = bat[i];
    for (int i = 0; i < na; i++) dims[r] = size[(unsigned char)ao[i]], a->ix[r++] = ao[i];
    for (int i = 0; i < nbo; i++) dims[r] = size[(unsigned char)bo[i]], a->ix[r++] = bo[i];
    a->rank = r;
    return es_set(a, reshape_as(api, a->t, (uint32_t)r, dims));
}

td_tensor *td_einsum(const char *equation, int n, td_tensor *const *xs)
{
    static const char api[] = "td_einsum";
    if (xs == NULL || n < 1 || n > EINSUM_MAX_OPERANDS)
        return thread_fail("td_einsum: n is %d, want 1..%d with xs non-NULL", n,
                           EINSUM_MAX_OPERANDS);
    for (int i = 0; i < n; i++) {
        if (xs[i] == NULL) {
            char which[16];
            snprintf(which, sizeof which, "xs[%d]", i);
            return null_input(any_ctx(n, xs), api, which);
        }
    }
    td_context *ctx = xs[0]->ctx;
    for (int i = 1; i < n; i++) {
        if (xs[i]->ctx != ctx) {
            set_err(ctx, "%s: inputs belong to different contexts", api);
            return NULL;
        }
    }
    if (equation == NULL) {
        set_err(ctx, "%s: equation is NULL", api);
        return NULL;
    }
    /* parse: letters per operand, then the output after "->" (or the implicit one) */
    es_term terms[EINSUM_MAX_OPERANDS];
    memset(terms, 0, sizeof terms);
    char out[TD_MAX_RANK + 1] = "";
    int nout = 0, k = 0, count[256] = {0};
    bool explicit_out = false;
    int64_t size[256];
    for (const char *p = equation; *p != '\0'; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == ' ') continue;
        if (c == '.') {
            set_err(ctx, "%s: \"%s\": ellipsis '...' is not supported", api, equation);
            return NULL;
        }
        if (c == '-' && p[1] == '>' && !explicit_out) {
            explicit_out = true;
            p++;
            continue;
        }
        if (c == ',' && !explicit_out) {
            if (++k >= n) {
                set_err(ctx, "%s: \"%s\" has more operands than the %d given", api, equation, n);
                return NULL;
            }
            continue;
        }
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))) {
            set_err(ctx, "%s: \"%s\": unexpected character '%c' (indices are letters)", api,
                    equation, c);
            return NULL;
        }
        if (explicit_out) {
            if (strchr(out, c) != NULL || nout >= TD_MAX_RANK) {
                set_err(ctx, "%s: \"%s\": output index '%c' repeated or output rank above %d",
                        api, equation, c, TD_MAX_RANK);
                return NULL;
            }
            out[nout++] = (char)c;
            out[nout] = '\0';
            continue;
        }
        es_term *e = &terms[k];
        if (memchr(e->ix, c, (size_t)e->rank) != NULL) {
            set_err(ctx, "%s: \"%s\": repeated index '%c' in operand %d (diagonals are not "
                    "supported)", api, equation, c, k);
            return NULL;
        }
        if (e->rank >= (int)xs[k]->desc.rank) {
            set_err(ctx, "%s: \"%s\": operand %d has rank %u, its subscripts name more", api,
                    equation, k, xs[k]->desc.rank);
            return NULL;
        }
        int64_t d = xs[k]->desc.dims[e->rank];
        if (count[c] > 0 && size[c] != d) {
            set_err(ctx, "%s: \"%s\": index '%c' has sizes %lld and %lld", api, equation, c,
                    (long long)size[c], (long long)d);
            return NULL;
        }
        size[c] = d;
        count[c]++;
        e->ix[e->rank++] = (char)c;
    }
    if (k != n - 1) {
        set_err(ctx, "%s: \"%s\" names %d operands, %d given", api, equation, k + 1, n);
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        if (terms[i].rank != (int)xs[i]->desc.rank) {
            set_err(ctx, "%s: \"%s\": operand %d has rank %u, its subscripts name %d", api,
                    equation, i, xs[i]->desc.rank, terms[i].rank);
            return NULL;
        }
        terms[i].t = xs[i];
    }
    if (explicit_out) {
        for (int i = 0; i < nout; i++) {
            if (count[(unsigned char)out[i]] == 0) {
                set_err(ctx, "%s: \"%s\": output index '%c' is in no operand", api, equation,
                        out[i]);
                return NULL;
            }
        }
    } else {
        /* numpy's implicit output: the indices that occur once, in alphabetical order */
        for (int c = 'A'; c <= 'z'; c++) {
            if (count[c] != 1) continue;
            if (nout >= TD_MAX_RANK) {
                set_err(ctx, "%s: \"%s\": output rank above %d", api, equation, TD_MAX_RANK);
                return NULL;
            }
            out[nout++] = (char)c;
        }
        out[nout] = '\0';
    }
    const unsigned mmflags = ctx->opts.matmul_allow_tf32 ? TD_MATMUL_ALLOW_TF32 : 0;
    td_tensor *result = NULL;
    es_term *acc = &terms[0];
    for (int i = 0; i < n; i++) {
        /* sum away what only this term holds and nothing later needs */
        es_term *e = &terms[i];
        bool keep[TD_MAX_RANK];
        for (int j = 0; j < e->rank; j++) {
            char c = e->ix[j];
            bool in_acc = i > 0 && memchr(acc->ix, c, (size_t)acc->rank) != NULL;
            keep[j] = in_acc || es_needed(c, out, terms, n, i);
        }
        if (!es_sum(api, e, keep)) goto fail;
        if (i > 0) {
            /* and from the accumulated term what e does not share and nothing later needs */
            bool akeep[TD_MAX_RANK];
            for (int j = 0; j < acc->rank; j++) {
                char c = acc->ix[j];
                akeep[j] = memchr(e->ix, c, (size_t)e->rank) != NULL || es_needed(c, out, terms, n, i);
            }
            if (!es_sum(api, acc, akeep)) goto fail;
        }
        if (i > 0 && !es_pair(api, acc, e, out, terms, n, i, size, mmflags)) goto fail;
    }
    {
        bool keep[TD_MAX_RANK];
        for (int j = 0; j < acc->rank; j++) keep[j] = strchr(out, acc->ix[j]) != NULL;
        if (!es_sum(api, acc, keep) || !es_permute(api, acc, out)) goto fail;
    }
    if (!acc->owned) {
        /* the result must be a new handle: copy the caller's tensor */
        td__op op = {.opcode = TD_OP_COPY, .n_inputs = 1};
        if (!es_set(acc, record(ctx, api, &op, &acc->t))) goto fail;
    }
    result = acc->t;
    acc->owned = false;
fail:
    for (int i = 0; i < n; i++) es_drop(&terms[i]);
    return result;
}

/* ---- hooks for graph capture (client/graph.c; declared in client/capture.h) ---- */

td_status td__ctx_capture_begin(td_context *ctx, struct td__capture *cap)
{
    if (ctx->capturing) {
        set_err(ctx, "td_graph_begin: a graph is already being captured on this context");
        return TD_EINVAL;
    }
    td_status s = flush(ctx, "td_graph_begin");
    if (s != TD_OK) return s;
    ctx->capturing = true;
    ctx->capture = cap;
    ctx->capture_first_id = ctx->next_id;
    return TD_OK;
}

struct td__capture *td__ctx_capture(const td_context *ctx, uint64_t *first_id)
{
    if (first_id != NULL) *first_id = ctx->capture_first_id;
    return ctx->capture;
}

td_tensor *td__ctx_lookup(td_context *ctx, uint64_t id)
{
    return td__idmap_get(&ctx->handles, id);
}

td__op *td__ctx_capture_take(td_context *ctx, size_t *n)
{
    td__flusher_lock(ctx->flusher);
    td__op *ops = ctx->batch;
    *n = ctx->batch_len;
    ctx->batch = NULL;
    ctx->batch_len = ctx->batch_cap = 0;
    ctx->batch_bytes = 0;
    ctx->capturing = false;
    ctx->capture = NULL;
    td__flusher_idle(ctx->flusher);
    td__flusher_unlock(ctx->flusher);
    return ops;
}

bool td__ctx_capturing(const td_context *ctx) { return ctx->capturing; }

td_tensor *td__ctx_new_tensor(td_context *ctx, const td__desc *d, bool placeholder)
{
    td_tensor *t = new_handle(ctx, d);
    if (t == NULL) {
        set_err_status(ctx, TD_ENOMEM, "out of memory for a tensor handle");
        return NULL;
    }
    t->placeholder = placeholder;
    return t;
}

td_status td__ctx_flush(td_context *ctx, const char *api) { return flush(ctx, api); }
uint32_t td__ctx_tensor_device(const td_tensor *t) { return t->dev; }
td__transport *td__ctx_transport(td_context *ctx) { return ctx->tp; }
td__autodiff **td__ctx_autodiff(td_context *ctx) { return &ctx->ad; }
td_context *td__tensor_ctx(const td_tensor *t) { return t->ctx; }

void td__ctx_graph_release(td_context *ctx, const struct td__graph *g)
{
    if (ctx->tp->vt->graph_release == NULL) return;
    td__flusher_lock(ctx->flusher);
    if (flush_locked(ctx, NULL) == TD_OK) ctx->tp->vt->graph_release(ctx->tp, g);
    td__flusher_unlock(ctx->flusher);
}
void td__ctx_set_error(td_context *ctx, td_status st, const char *msg)
{
    if (ctx == NULL) {
        thread_note(st, true, "%s", msg);
        return;
    }
    set_err_status(ctx, st, "%s", msg);
}
uint64_t td__tensor_id(const td_tensor *t) { return t->id; }
const td__desc *td__tensor_desc(const td_tensor *t) { return &t->desc; }
bool td__tensor_placeholder(const td_tensor *t) { return t->placeholder; }

/* ---- neural-network ops (include/tensord.h says what each computes) ---- */

/* Check that the non-NULL tensors of `t` share x's context; false with the error set. */
static bool same_ctx(const char *api, td_tensor *x, int n, td_tensor *const *t)
{
    for (int i = 0; i < n; i++)
        if (t[i] != NULL && t[i]->ctx != x->ctx) {
            set_err(x->ctx, "%s: inputs belong to different contexts", api);
            return false;
        }
    return true;
}

/* The first normalised axis of the last `naxes` dims of x; false with the error set. */
static bool norm_first_axis(const char *api, td_tensor *x, int naxes, int64_t *out)
{
    if (naxes < 1 || naxes > (int)x->desc.rank) {
        set_err(x->ctx, "%s: naxes %d is outside 1..%u (the rank of x)", api, naxes,
                x->desc.rank);
        return false;
    }
    *out = (int64_t)x->desc.rank - naxes;
    return true;
}

/* Record an NN op: inputs in[0..n) (trailing NULLs dropped: optional parameters). */
static td_tensor *nn_op(const char *api, td__op *op, int n, td_tensor *const *in)
{
    td_tensor *t[TD_OP_MAX_INPUTS];
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (in[i] == NULL) break;
        t[m++] = in[i];
    }
    op->n_inputs = (uint32_t)m;
    return record(in[0]->ctx, api, op, t);
}

td_tensor *td_layer_norm(td_tensor *x, int naxes, td_tensor *weight, td_tensor *bias,
                         double eps)
{
    static const char api[] = "td_layer_norm";
    if (x == NULL) return null_input(weight != NULL ? weight->ctx : NULL, api, "x");
    td_tensor *in[3] = {x, weight, bias};
    if (!same_ctx(api, x, 3, in)) return NULL;
    td__op op = {.opcode = TD_OP_LAYER_NORM, .n_iattrs = 1, .fattrs = {eps}};
    if (!norm_first_axis(api, x, naxes, &op.iattrs[0])) return NULL;
    if (weight == NULL && bias != NULL) {
        /* the op takes bias only after weight: a weight of ones */
        td_tensor *ones = beside(td_full(x->ctx, (td_dtype)bias->desc.dtype,
                                         (int)bias->desc.rank, bias->desc.dims, 1.0),
                                 x);
        if (ones == NULL) return NULL;
        in[1] = ones;
        td_tensor *r = nn_op(api, &op, 3, in);
        td_release(ones);
        return r;
    }
    return nn_op(api, &op, 3, in);
}

td_tensor *td_rms_norm(td_tensor *x, int naxes, td_tensor *weight, double eps)
{
    static const char api[] = "td_rms_norm";
    if (x == NULL) return null_input(weight != NULL ? weight->ctx : NULL, api, "x");
    td_tensor *in[2] = {x, weight};
    if (!same_ctx(api, x, 2, in)) return NULL;
    td__op op = {.opcode = TD_OP_RMS_NORM, .n_iattrs = 1, .fattrs = {eps}};
    if (!norm_first_axis(api, x, naxes, &op.iattrs[0])) return NULL;
    return nn_op(api, &op, 2, in);
}

/* A [C] tensor of ones for a bias given without a weight (the ops take bias after weight). */
static td_tensor *ones_like_param(td_tensor *p)
{
    const td__desc *d = &p->desc;
    return beside(td_full(p->ctx, (td_dtype)d->dtype, (int)d->rank, d->dims, 1.0), p);
}

td_tensor *td_group_norm(td_tensor *x, int64_t groups, td_tensor *weight, td_tensor *bias,
                         double eps)
{
    static const char api[] = "td_group_norm";
    if (x == NULL) return null_input(weight != NULL ? weight->ctx : NULL, api, "x");
    td_tensor *in[3] = {x, weight, bias};
    if (!same_ctx(api, x, 3, in)) return NULL;
    td__op op = {.opcode = TD_OP_GROUP_NORM, .n_iattrs = 1, .iattrs = {groups},
                 .fattrs = {eps}};
    td_tensor *ones = NULL;
    if (weight == NULL && bias != NULL && (in[1] = ones = ones_like_param(bias)) == NULL)
        return NULL;
    td_tensor *r = nn_op(api, &op, 3, in);
    td_release(ones);
    return r;
}

td_tensor *td_batch_norm(td_tensor *x, td_tensor *mean, td_tensor *var, td_tensor *weight,
                         td_tensor *bias, double eps)
{
    static const char api[] = "td_batch_norm";
    if (x == NULL || mean == NULL || var == NULL)
        return null_input(any_ctx(3, (td_tensor *[]){x, mean, var}), api,
                          x == NULL ? "x" : mean == NULL ? "mean" : "var");
    td_tensor *in[5] = {x, mean, var, weight, bias};
    if (!same_ctx(api, x, 5, in)) return NULL;
    td__op op = {.opcode = TD_OP_BATCH_NORM, .fattrs = {eps}};
    td_tensor *ones = NULL;
    if (weight == NULL && bias != NULL && (in[3] = ones = ones_like_param(bias)) == NULL)
        return NULL;
    td_tensor *r = nn_op(api, &op, 5, in);
    td_release(ones);
    return r;
}

/* The axes mask of every axis of x but axis 1 (x rank >= 2). */
static int64_t all_but_channels(const td_tensor *x)
{
    return (int64_t)((1u << x->desc.rank) - 1) & ~(int64_t)2;
}

/* A reduction by mask (the mask already checked against x's rank). */
static td_tensor *reduce_mask(const char *api, uint32_t opcode, td_tensor *x, int64_t mask,
                              double f0)
{
    td__op op = {.opcode = opcode, .n_inputs = 1, .n_iattrs = 2, .iattrs = {mask, 0},
                 .fattrs = {f0}};
    return record(x->ctx, api, &op, &x);
}

/* x needs rank >= 2 ([N, C, ...]); false with the error set. */
static bool needs_nc(const char *api, td_tensor *x)
{
    if (x->desc.rank >= 2) return true;
    set_err(x->ctx, "%s: x needs rank >= 2 ([N, C, ...]), got rank %u", api, x->desc.rank);
    return false;
}

td_tensor *td_batch_norm_stats(td_tensor *x, td_tensor **var, td_tensor **var_unbiased)
{
    static const char api[] = "td_batch_norm_stats";
    if (x == NULL) return null_input(NULL, api, "x");
    if (!needs_nc(api, x)) return NULL;
    const int64_t mask = all_but_channels(x);
    td_tensor *m = reduce_mask(api, TD_OP_MEAN, x, mask, 0.0), *v = NULL, *vu = NULL;
    if (m == NULL) return NULL;
    if (var != NULL && (v = reduce_mask(api, TD_OP_VAR, x, mask, 0.0)) == NULL) goto fail;
    if (var_unbiased != NULL && (vu = reduce_mask(api, TD_OP_VAR, x, mask, 1.0)) == NULL)
        goto fail;
    if (var != NULL) *var = v;
    if (var_unbiased != NULL) *var_unbiased = vu;
    return m;
fail:
    td_release(m);
    td_release(v);
    return NULL;
}

/* Parameter gradients of a normalisation: dbias = sum of dy over `mask`, dweight = the sum
 * of dy * xhat (xhat given; released here). Each only when its out-pointer is non-NULL.
 * Returns false (with both released) when a step failed. */
static bool param_grads(const char *api, td_tensor *dy, td_tensor *xhat, int64_t mask,
                        td_tensor **dweight, td_tensor **dbias, td_tensor **gw,
                        td_tensor **gb)
{
    *gw = *gb = NULL;
    bool ok = true;
    if (dweight != NULL) {
        td_tensor *p = xhat != NULL ? td_mul(dy, xhat) : NULL;
        ok = p != NULL && (*gw = reduce_mask(api, TD_OP_SUM, p, mask, 0.0)) != NULL;
        td_release(p);
    }
    if (ok && dbias != NULL) ok = (*gb = reduce_mask(api, TD_OP_SUM, dy, mask, 0.0)) != NULL;
    td_release(xhat);
    if (!ok) {
        td_release(*gw);
        td_release(*gb);
        *gw = *gb = NULL;
    }
    return ok;
}

/* Finish a backward call: hand out dx and the parameter gradients, or release all. */
static td_tensor *backward_done(td_tensor *dx, bool ok, td_tensor *gw, td_tensor *gb,
                                td_tensor **dweight, td_tensor **dbias)
{
    if (!ok) {
        td_release(dx);
        return NULL;
    }
    if (dweight != NULL) *dweight = gw;
    if (dbias != NULL) *dbias = gb;
    return dx;
}

/* The null and context checks of the backward calls (dy, x required). */
static bool backward_inputs(const char *api, td_tensor *dy, td_tensor *x, int n,
                            td_tensor *const *rest)
{
    if (dy == NULL || x == NULL) {
        null_input(dy != NULL ? dy->ctx : x != NULL ? x->ctx : NULL, api,
                   dy == NULL ? "dy" : "x");
        return false;
    }
    td_tensor *all[6] = {dy, x};
    for (int i = 0; i < n && i < 4; i++) all[2 + i] = rest[i];
    return same_ctx(api, x, 2 + n, all);
}

td_tensor *td_layer_norm_backward(td_tensor *dy, td_tensor *x, int naxes, td_tensor *weight,
                                  double eps, td_tensor **dweight, td_tensor **dbias)
{
    static const char api[] = "td_layer_norm_backward";
    if (!backward_inputs(api, dy, x, 1, &weight)) return NULL;
    td__op op = {.opcode = TD_OP_LAYER_NORM_BACKWARD, .n_iattrs = 1, .fattrs = {eps}};
    if (!norm_first_axis(api, x, naxes, &op.iattrs[0])) return NULL;
    td_tensor *dx = nn_op(api, &op, 3, (td_tensor *[]){dy, x, weight});
    if (dx == NULL) return NULL;
    const int64_t lead = ((int64_t)1 << op.iattrs[0]) - 1;
    td_tensor *xhat = dweight != NULL ? td_layer_norm(x, naxes, NULL, NULL, eps) : NULL, *gw,
              *gb;
    bool ok = param_grads(api, dy, xhat, lead, dweight, dbias, &gw, &gb);
    return backward_done(dx, ok, gw, gb, dweight, dbias);
}

td_tensor *td_rms_norm_backward(td_tensor *dy, td_tensor *x, int naxes, td_tensor *weight,
                                double eps, td_tensor **dweight)
{
    static const char api[] = "td_rms_norm_backward";
    if (!backward_inputs(api, dy, x, 1, &weight)) return NULL;
    td__op op = {.opcode = TD_OP_RMS_NORM_BACKWARD, .n_iattrs = 1, .fattrs = {eps}};
    if (!norm_first_axis(api, x, naxes, &op.iattrs[0])) return NULL;
    td_tensor *dx = nn_op(api, &op, 3, (td_tensor *[]){dy, x, weight});
    if (dx == NULL) return NULL;
    const int64_t lead = ((int64_t)1 << op.iattrs[0]) - 1;
    td_tensor *xhat = dweight != NULL ? td_rms_norm(x, naxes, NULL, eps) : NULL, *gw, *gb;
    bool ok = param_grads(api, dy, xhat, lead, dweight, NULL, &gw, &gb);
    return backward_done(dx, ok, gw, gb, dweight, NULL);
}

td_tensor *td_group_norm_backward(td_tensor *dy, td_tensor *x, int64_t groups,
                                  td_tensor *weight, double eps, td_tensor **dweight,
                                  td_tensor **dbias)
{
    static const char api[] = "td_group_norm_backward";
    if (!backward_inputs(api, dy, x, 1, &weight)) return NULL;
    td__op op = {.opcode = TD_OP_GROUP_NORM_BACKWARD, .n_iattrs = 1, .iattrs = {groups},
                 .fattrs = {eps}};
    td_tensor *dx = nn_op(api, &op, 3, (td_tensor *[]){dy, x, weight});
    if (dx == NULL) return NULL;
    td_tensor *xhat = dweight != NULL ? td_group_norm(x, groups, NULL, NULL, eps) : NULL, *gw,
              *gb;
    bool ok = param_grads(api, dy, xhat, all_but_channels(x), dweight, dbias, &gw, &gb);
    return backward_done(dx, ok, gw, gb, dweight, dbias);
}

td_tensor *td_batch_norm_backward(td_tensor *dy, td_tensor *x, td_tensor *mean,
                                  td_tensor *var, td_tensor *weight, double eps,
                                  td_tensor **dweight, td_tensor **dbias)
{
    static const char api[] = "td_batch_norm_backward";
    if (!backward_inputs(api, dy, x, 3, (td_tensor *[]){mean, var, weight})) return NULL;
    if ((mean == NULL) != (var == NULL)) {
        set_err(x->ctx, "%s: give both mean and var (inference) or neither (training), got "
                "only %s", api, mean != NULL ? "mean" : "var");
        return NULL;
    }
    if (!needs_nc(api, x)) return NULL;
    td_tensor *dx = NULL, *xhat = NULL, *gw, *gb;
    if (mean == NULL) {
        td__op op = {.opcode = TD_OP_BATCH_NORM_BACKWARD, .fattrs = {eps}};
        dx = nn_op(api, &op, 3, (td_tensor *[]){dy, x, weight});
        if (dx == NULL) return NULL;
        if (dweight != NULL) {
            td_tensor *bv = NULL, *bm = td_batch_norm_stats(x, &bv, NULL);
            xhat = bm != NULL ? td_batch_norm(x, bm, bv, NULL, NULL, eps) : NULL;
            td_release(bm);
            td_release(bv);
            if (xhat == NULL) {
                td_release(dx);
                return NULL;
            }
        }
    } else {
        /* fixed statistics: dx = dy * (weight / sqrt(var + eps)) per channel */
        td__op chk = {.opcode = TD_OP_BATCH_NORM, .fattrs = {eps}};
        const td__desc *d[4] = {&x->desc, &mean->desc, &var->desc,
                                weight != NULL ? &weight->desc : NULL};
        td__desc od;
        char why[512];
        chk.n_inputs = weight != NULL ? 4 : 3;
        if (td__op_infer(&chk, d, &od, why, sizeof why) != TD_OK) {
            set_err(x->ctx, "%s: %s", api, why);
            return NULL;
        }
        td_tensor *ve = td_add_scalar(var, eps), *r = ve != NULL ? td_rsqrt(ve) : NULL;
        td_release(ve);
        td_tensor *s = r;
        if (r != NULL && weight != NULL) {
            s = td_mul(r, weight);
            td_release(r);
        }
        int64_t dims[TD_MAX_RANK];
        dims[0] = x->desc.dims[1];
        for (uint32_t i = 1; i + 1 < x->desc.rank; i++) dims[i] = 1;
        td_tensor *sb = s != NULL ? td_reshape(s, (int)x->desc.rank - 1, dims) : NULL;
        td_release(s);
        dx = sb != NULL ? td_mul(dy, sb) : NULL;
        td_release(sb);
        if (dx == NULL) return NULL;
        if (dweight != NULL &&
            (xhat = td_batch_norm(x, mean, var, NULL, NULL, eps)) == NULL) {
            td_release(dx);
            return NULL;
        }
    }
    bool ok = param_grads(api, dy, xhat, all_but_channels(x), dweight, dbias, &gw, &gb);
    return backward_done(dx, ok, gw, gb, dweight, dbias);
}

td_tensor *td_dropout(td_tensor *x, double p, uint64_t seed)
{
    if (x == NULL) return null_input(NULL, "td_dropout", "x");
    td__op op = {.opcode = TD_OP_DROPOUT, .n_inputs = 1, .fattrs = {p}, .seed = seed};
    return record(x->ctx, "td_dropout", &op, &x);
}

td_tensor *td_scaled_dot_product_attention(td_tensor *q, td_tensor *k, td_tensor *v,
                                           td_tensor *mask, bool causal, double scale)
{
    static const char api[] = "td_scaled_dot_product_attention";
    if (q == NULL || k == NULL || v == NULL)
        return null_input(any_ctx(3, (td_tensor *[]){q, k, v}), api,
                          q == NULL ? "q" : k == NULL ? "k" : "v");
    if (!same_ctx(api, q, 4, (td_tensor *[]){q, k, v, mask})) return NULL;
    if (!isfinite(scale)) {
        set_err(q->ctx, "%s: scale %g must be finite (0: 1/sqrt(E))", api, scale);
        return NULL;
    }
    const int64_t e = q->desc.rank >= 1 ? q->desc.dims[q->desc.rank - 1] : 0;
    if (scale == 0.0) scale = e > 0 ? 1.0 / sqrt((double)e) : 1.0;
    if (q->ctx->tp->no_attention_op) { /* a server before protocol 6: the composite */
        td_tensor *p = td__attention_weights(q, k, mask, causal, scale, NULL);
        td_tensor *y = p != NULL ? td_matmul(p, v) : NULL;
        td_release(p);
        return y;
    }
    td__op op = {.opcode = TD_OP_SCALED_DOT_PRODUCT_ATTENTION, .n_inputs = mask ? 4 : 3,
                 .n_iattrs = 1, .iattrs = {causal ? 1 : 0}, .fattrs = {scale}};
    return record(q->ctx, api, &op, (td_tensor *[]){q, k, v, mask});
}

td_tensor *td__attention_weights(td_tensor *q, td_tensor *k, td_tensor *mask, bool causal,
                                 double scale, td_tensor **visible)
{
    td_context *ctx = q->ctx;
    td_tensor *keep = NULL; /* the keys each query may see (causal rule and bool mask) */
    if (causal) {
        const int64_t l = q->desc.dims[q->desc.rank - 2], sl = k->desc.dims[k->desc.rank - 2];
        td_tensor *ri = beside(td_arange(ctx, TD_I64, l, 0, 1), q);
        td_tensor *ci = beside(td_arange(ctx, TD_I64, sl, 0, 1), q);
        td_tensor *rr = ri != NULL ? td_reshape(ri, 2, (int64_t[]){l, 1}) : NULL;
        td_tensor *cr = ci != NULL ? td_reshape(ci, 2, (int64_t[]){1, sl}) : NULL;
        keep = rr != NULL && cr != NULL ? td_le(cr, rr) : NULL;
        td_tensor *tmp[] = {ri, ci, rr, cr};
        for (size_t i = 0; i < sizeof tmp / sizeof tmp[0]; i++) td_release(tmp[i]);
        if (keep == NULL) return NULL;
    }
    if (mask != NULL && mask->desc.dtype == TD_BOOL) {
        td_tensor *both = keep != NULL ? td_logical_and(keep, mask) : td_reshape(mask,
                              (int)mask->desc.rank, mask->desc.dims);
        td_release(keep);
        if ((keep = both) == NULL) return NULL;
    }
    td_tensor *kt = td_transpose(k);
    td_tensor *s0 = kt != NULL ? td_matmul(q, kt) : NULL;
    td_release(kt);
    td_tensor *s = s0 != NULL ? td_mul_scalar(s0, scale) : NULL;
    td_release(s0);
    if (s != NULL && keep != NULL) {
        td_tensor *sm = td_where_scalar_b(keep, s, -INFINITY);
        td_release(s);
        s = sm;
    }
    if (s != NULL && mask != NULL && mask->desc.dtype != TD_BOOL) {
        td_tensor *sm = td_add(s, mask);
        td_release(s);
        s = sm;
    }
    td_tensor *p = s != NULL ? td_softmax(s, -1) : NULL;
    td_release(s);
    if (p != NULL && visible != NULL) *visible = keep;
    else td_release(keep);
    return p;
}

/* NLL of log-probabilities (any float dtype) with the optional label-smoothing term. */
static td_tensor *nll_common(const char *api, td_tensor *logp, td_tensor *target,
                             td_reduction reduction, int64_t ignore_index, double smoothing,
                             bool take_log_softmax)
{
    if (logp == NULL || target == NULL)
        return null_input(any_ctx(2, (td_tensor *[]){logp, target}), api,
                          logp == NULL ? "input" : "target");
    td_context *ctx = logp->ctx;
    if (!same_ctx(api, logp, 1, &target)) return NULL;
    const td__desc *ld = &logp->desc, *tdsc = &target->desc;
    if (!td__dtype_is_float(ld->dtype)) {
        set_err(ctx, "%s: input needs a float dtype, got %s", api, td_dtype_name(ld->dtype));
        return NULL;
    }
    if (tdsc->dtype != TD_I64 && tdsc->dtype != TD_I32) {
        set_err(ctx, "%s: target needs i64 or i32 class indices, got %s", api,
                td_dtype_name(tdsc->dtype));
        return NULL;
    }
    bool shapes = ld->rank >= 2 && tdsc->rank + 1 == ld->rank && tdsc->dims[0] == ld->dims[0];
    for (uint32_t i = 2; shapes && i < ld->rank; i++) shapes = tdsc->dims[i - 1] == ld->dims[i];
    if (!shapes) {
        char a[160], b[160];
        td__desc_str(ld, a, sizeof a);
        td__desc_str(tdsc, b, sizeof b);
        set_err(ctx, "%s: input %s must be [N, C, d...] (rank >= 2) with target [N, d...], got "
                "target %s", api, a, b);
        return NULL;
    }
    if (reduction != TD_REDUCTION_NONE && reduction != TD_REDUCTION_MEAN &&
        reduction != TD_REDUCTION_SUM) {
        set_err(ctx, "%s: unknown reduction %d (0 none, 1 mean, 2 sum)", api, (int)reduction);
        return NULL;
    }
    if (!(smoothing >= 0.0 && smoothing <= 1.0)) {
        set_err(ctx, "%s: label_smoothing %g is not in [0, 1]", api, smoothing);
        return NULL;
    }
    td_tensor *lp = take_log_softmax ? td_log_softmax(logp, 1) : logp;
    if (lp == NULL) return NULL;
    td_tensor *ig = beside(td_full(ctx, (td_dtype)tdsc->dtype, 0, NULL, (double)ignore_index),
                           target);
    td_tensor *valid = ig != NULL ? td_ne(target, ig) : NULL;
    td_release(ig);
    td_tensor *tsafe = valid != NULL ? td_where_scalar_b(valid, target, 0) : NULL;
    int64_t idims[TD_MAX_RANK];
    idims[0] = ld->dims[0];
    idims[1] = 1;
    for (uint32_t i = 2; i < ld->rank; i++) idims[i] = ld->dims[i];
    td_tensor *idx = tsafe != NULL ? td_reshape(tsafe, (int)ld->rank, idims) : NULL;
    td_release(tsafe);
    td_tensor *picked = idx != NULL ? td_gather(lp, idx, 1) : NULL;
    td_release(idx);
    td_tensor *pr = picked != NULL ? td_reshape(picked, (int)tdsc->rank, tdsc->dims) : NULL;
    td_release(picked);
    td_tensor *per = pr != NULL ? td_neg(pr) : NULL;
    td_release(pr);
    if (per != NULL && smoothing > 0.0) {
        td_tensor *mc = td_mean(lp, 1, (int[]){1}, false);
        td_tensor *a = td_mul_scalar(per, 1.0 - smoothing);
        td_tensor *b = mc != NULL ? td_mul_scalar(mc, -smoothing) : NULL;
        td_tensor *sum = a != NULL && b != NULL ? td_add(a, b) : NULL;
        td_release(mc);
        td_release(a);
        td_release(b);
        td_release(per);
        per = sum;
    }
    if (lp != logp) td_release(lp);
    td_tensor *loss = per != NULL && valid != NULL ? td_where_scalar_b(valid, per, 0) : NULL;
    td_release(per);
    td_tensor *r = loss;
    if (loss != NULL && reduction != TD_REDUCTION_NONE) {
        r = td_sum(loss, 0, NULL, false);
        if (r != NULL && reduction == TD_REDUCTION_MEAN) {
            td_tensor *vf = td_cast(valid, (td_dtype)ld->dtype);
            td_tensor *cnt = vf != NULL ? td_sum(vf, 0, NULL, false) : NULL;
            td_tensor *m = cnt != NULL ? td_div(r, cnt) : NULL;
            td_release(vf);
            td_release(cnt);
            td_release(r);
            r = m;
        }
        td_release(loss);
    }
    td_release(valid);
    return r;
}

td_tensor *td_nll_loss(td_tensor *logp, td_tensor *target, td_reduction reduction,
                       int64_t ignore_index)
{
    return nll_common("td_nll_loss", logp, target, reduction, ignore_index, 0.0, false);
}

td_tensor *td_cross_entropy(td_tensor *logits, td_tensor *target, td_reduction reduction,
                            int64_t ignore_index, double label_smoothing)
{
    return nll_common("td_cross_entropy", logits, target, reduction, ignore_index,
                      label_smoothing, true);
}

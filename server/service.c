/* service.c — the gRPC server of tensord (see service.h).
 *
 * gRPC C core has no generated service stubs for protobuf-c, so methods are registered by
 * path and each call is a small state machine driven by completion-queue events. This file
 * owns the server object, the completion-queue threads, the per-device worker pools, the pool of
 * outstanding "request a new call" operations, the unary GetInfo call, and shutdown
 * bookkeeping; the bidirectional Session call lives in session.c.
 *
 * Shutdown order (all driven from the loop thread): grpc_server_shutdown_and_notify stops
 * accepting; calls in progress finish or are cancelled (td__service_cancel_all); each
 * session frees its engine state through its worker queue and drops its call; once gRPC has
 * reported the shutdown and no call object is left, on_drained fires and the loop destroys
 * the workers, the server and the completion queue, in that order.
 */
#include "server/service.h"
#include "server/admin.h"
#include "server/auth.h"
#include "server/connlimit.h"
#include "server/health.h"
#include "server/request.h"
#include "server/session.h"
#include "server/unary.h"

#include "common/alloc.h"
#include "common/log.h"
#include "auth/tenant.h"
#include "auth/tokens.h"
#include "engine/tensor.h"
#include "server/metrics.h"
#include "wire.h"
#include "wire_health.h"

#include <grpc/compression.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/log.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SVC_MAX_DEVICES 16
#define SVC_REQUESTS_PER_METHOD 8
/* A client that has not finished its TLS/HTTP/2 handshake after this long is dropped
 * (gRPC's default is 120 s; bounded also by the idle timeout). */
#define SVC_HANDSHAKE_TIMEOUT_MS 10000
/* Keepalive: ping a connection after this long without traffic, drop it when the ping is
 * not answered within SVC_KEEPALIVE_TIMEOUT_MS (a vanished peer holds nothing for long). */
#define SVC_KEEPALIVE_TIME_MS 60000
#define SVC_KEEPALIVE_TIMEOUT_MS 20000

/* gRPC logged "Failed accept4": its listener is dead (see server/connlimit.h). */
static atomic_bool g_listener_failed;

struct td__live_session {
    struct td__live_session *prev, *next;
    struct td__srv_session *ss;
    td__quota *quota;
    td__identity id;
    uint64_t start_ms;  /* CLOCK_MONOTONIC */
    char peer[128];
    atomic_bool opened; /* its first whole message arrived */
    atomic_int slot;    /* its device's metrics slot once open, else -1 */
    /* For the admin listing (td__service_sessions_list), written by the session's own
     * threads: its id and device once open, its memory and ops after each job. */
    atomic_ullong sid, bytes, ops;
    _Atomic(const char *) device;
    bool timed_out;     /* ended for TD_OPEN_TIMEOUT_MS (under live_mu) */
};

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

struct td__service {
    td__service_opts opts;
    grpc_server *server;
    grpc_completion_queue *cq;
    void *rm_info, *rm_session, *rm_health_check, *rm_health_watch, *rm_list, *rm_kill;
    td__health *health; /* NULL when out of memory: health calls get UNAVAILABLE */
    pthread_t threads[TD_SERVICE_CQ_THREADS_MAX];
    int nthreads;
    int ndev;
    const td__device *devs[SVC_MAX_DEVICES];
    /* Each device's workers; a session's queue is opened on the one with the fewest queues
     * (td__service_queue_open, under queue_mu so that two opens see each other). */
    td__worker *workers[SVC_MAX_DEVICES][TD_SERVICE_MAX_DEVICE_WORKERS];
    int nworkers[SVC_MAX_DEVICES];
    pthread_mutex_t queue_mu;

    atomic_bool shutting_down; /* draining: no new sessions, health NOT_SERVING */
    atomic_bool grpc_down;     /* grpc_server_shutdown_and_notify was called */
    atomic_long live_calls;     /* call objects + outstanding call requests */
    atomic_long work;           /* closures queued or running on workers */
    atomic_ullong sessions;     /* reserved session slots */
    atomic_ullong next_session_id;

    /* Reloadable limits (td__service_set_limits); opts' copies are the start-up values. */
    atomic_ullong max_sessions, max_session_bytes;
    /* TLS: the certificate configuration the next handshake picks up (tls_fetch), under
     * tls_mu; NULL once taken. `tls_client_ca` says whether client certificates are
     * required (fixed at start: gRPC's request type cannot change). */
    pthread_mutex_t tls_mu;
    grpc_ssl_server_certificate_config *tls_pending;
    bool tls_on, tls_client_ca;

    grpc_resource_quota *rq; /* bounds the memory of every connection's buffers */
    pthread_mutex_t place_mu; /* one placement at a time (td__service_place) */
    pthread_mutex_t live_mu; /* guards live */
    struct td__live_session *live;

    pthread_mutex_t mu; /* guards the three flags below */
    bool shutdown_started;
    bool shutdown_notified;
    bool drained_fired;
    td__tag shutdown_tag;
};

grpc_status_code td__grpc_code(td_status st)
{
    switch (st) {
#define TD__GRPC_CODE(name, value, grpc, msg)                                              \
    case name:                                                                             \
        return (grpc_status_code)grpc;
        TD_STATUS_MAP(TD__GRPC_CODE)
#undef TD__GRPC_CODE
    }
    return GRPC_STATUS_INTERNAL;
}

/* ---- bookkeeping ---- */

static void maybe_drained(td__service *s)
{
    bool fire = false;
    pthread_mutex_lock(&s->mu);
    if (s->shutdown_notified && !s->drained_fired && atomic_load(&s->live_calls) == 0) {
        s->drained_fired = true;
        fire = true;
    }
    pthread_mutex_unlock(&s->mu);
    if (fire && s->opts.on_drained) s->opts.on_drained(s->opts.arg);
}

void td__service_call_begin(td__service *s) { atomic_fetch_add(&s->live_calls, 1); }

void td__service_call_end(td__service *s)
{
    if (atomic_fetch_sub(&s->live_calls, 1) == 1 && atomic_load(&s->shutting_down))
        maybe_drained(s);
}

void td__service_work_add(td__service *s, long delta) { atomic_fetch_add(&s->work, delta); }

bool td__service_idle(td__service *s) { return atomic_load(&s->work) == 0; }

grpc_completion_queue *td__service_cq(td__service *s) { return s->cq; }

static int device_index(const td__service *s, const td__device *dev)
{
    for (int i = 0; i < s->ndev; i++)
        if (s->devs[i] == dev) return i;
    return -1;
}

td_status td__service_queue_open(td__service *s, const td__device *dev, td__worker_queue **out)
{
    int d = device_index(s, dev);
    if (d < 0) return TD_ENOTFOUND;
    pthread_mutex_lock(&s->queue_mu);
    int best = 0;
    size_t best_n = SIZE_MAX;
    for (int k = 0; k < s->nworkers[d]; k++) {
        size_t n = td__worker_queue_count(s->workers[d][k]);
        if (n < best_n) {
            best = k;
            best_n = n;
        }
    }
    td_status st = td__worker_queue_create(s->workers[d][best], out);
    pthread_mutex_unlock(&s->queue_mu);
    return st;
}

int td__service_device_workers(const td__service *s, const td__device *dev)
{
    int d = device_index(s, dev);
    return d < 0 ? 0 : s->nworkers[d];
}

/* The completion-queue threads to start for td__service_opts.cq_threads `want` on a host
 * with `online_cpus` CPUs (service.h says why the default depends on it). */
static int cq_threads_for(uint64_t want, long online_cpus)
{
    if (want == 0) return online_cpus >= TD_SERVICE_CQ_SMALL_HOST_CPUS ? 2 : 1;
    return want > TD_SERVICE_CQ_THREADS_MAX ? TD_SERVICE_CQ_THREADS_MAX : (int)want;
}

bool td__service_session_reserve(td__service *s, uint64_t *id_out)
{
    if (atomic_load(&s->shutting_down)) return false;
    unsigned long long n = atomic_load(&s->sessions);
    do {
        unsigned long long max = atomic_load(&s->max_sessions);
        if (max != 0 && n >= max) return false;
    } while (!atomic_compare_exchange_weak(&s->sessions, &n, n + 1));
    *id_out = atomic_fetch_add(&s->next_session_id, 1) + 1;
    return true;
}

void td__service_session_unreserve(td__service *s)
{
    if (atomic_fetch_sub(&s->sessions, 1) == 1) {
#ifdef __GLIBC__
        /* The last session ended: hand the heap memory its messages left behind back to the
         * kernel (server/main.c keeps up to 64 MiB per malloc arena while sessions stream,
         * which after a flood of clients stayed resident however idle the server was). */
        malloc_trim(0);
#endif
    }
}

uint64_t td__service_max_session_bytes(td__service *s) { return atomic_load(&s->max_session_bytes); }
struct td__blobstore *td__service_blobs(const td__service *s) { return s->opts.blobs; }
struct td__shm *td__service_shm(const td__service *s) { return s->opts.shm; }
bool td__service_ring(const td__service *s) { return !s->opts.no_ring; }
uint64_t td__service_max_sessions(td__service *s) { return atomic_load(&s->max_sessions); }

void td__service_set_limits(td__service *s, uint64_t max_sessions, uint64_t max_session_bytes)
{
    atomic_store(&s->max_sessions, max_sessions);
    atomic_store(&s->max_session_bytes, max_session_bytes);
}
bool td__service_shutting_down(td__service *s) { return atomic_load(&s->shutting_down); }

/* ---- GetInfo (unary) ---- */

/* Sessions, tensors and bytes are the caller's tenant's only (td__quota): one tenant
 * learns nothing about another's use of the server. */
static td_status info_encode(td__service *s, const td__quota *quota, grpc_byte_buffer **out)
{
    Tensord__V1__InfoResponse r = TENSORD__V1__INFO_RESPONSE__INIT;
    Tensord__V1__Limits lim = TENSORD__V1__LIMITS__INIT;
    Tensord__V1__Device devs[SVC_MAX_DEVICES];
    Tensord__V1__Device *devp[SVC_MAX_DEVICES];
    r.protocol_min = TD_PROTOCOL_MIN;
    r.protocol_max = TD_PROTOCOL_MAX;
    r.server_version = (char *)TD_VERSION_STRING;
    int n = td__device_count();
    if (n > SVC_MAX_DEVICES) n = SVC_MAX_DEVICES;
    for (int i = 0; i < n; i++) {
        td__device *d = td__device_at(i);
        Tensord__V1__Device init = TENSORD__V1__DEVICE__INIT;
        devs[i] = init;
        devs[i].name = d->name;
        devs[i].kind = (char *)d->backend->kind;
        devs[i].description = d->description;
        uint64_t total = 0, free_bytes = 0;
        if (d->backend->memory_info != NULL &&
            d->backend->memory_info(d, &total, &free_bytes) != TD_OK) {
            total = 0;
            free_bytes = 0;
        }
        devs[i].memory_total = total;
        devs[i].memory_free = free_bytes;
        devp[i] = &devs[i];
    }
    r.n_devices = (size_t)n;
    r.devices = devp;
    lim.max_message_bytes = TD_MAX_MESSAGE_BYTES;
    lim.chunk_bytes = TD_CHUNK_BYTES;
    lim.max_tensor_bytes = TD_MAX_TENSOR_BYTES;
    lim.max_rank = TD_MAX_RANK;
    lim.max_batch_ops = TD_MAX_BATCH_OPS;
    r.limits = &lim;
    (void)s;
    r.sessions = atomic_load(&quota->sessions);
    r.tensors = atomic_load(&quota->tensors);
    r.bytes_in_use = atomic_load(&quota->bytes);
    return td__wire_encode(&r.base, NULL, out);
}

static void info_start(td__service *s, grpc_call *call, grpc_byte_buffer *request,
                       const td__quota *quota)
{
    grpc_status_code code = GRPC_STATUS_OK;
    const char *details = "";
    char err[256];
    ProtobufCMessage *req = NULL;
    td__wire_scratch scratch = {0};
    grpc_byte_buffer *response = NULL;
    if (request != NULL) {
        td_status st = td__wire_decode(request, &tensord__v1__info_request__descriptor, &scratch,
                                       &req, NULL, NULL, err, sizeof err);
        if (st != TD_OK) {
            code = td__grpc_code(st);
            details = err;
        }
    }
    if (req) protobuf_c_message_free_unpacked(req, NULL);
    td__wire_scratch_fini(&scratch);
    if (code == GRPC_STATUS_OK && info_encode(s, quota, &response) != TD_OK) {
        code = GRPC_STATUS_RESOURCE_EXHAUSTED;
        details = "out of memory";
    }
    td__srv_unary_reply(s, call, response, code, details, "GetInfo");
}

/* ---- outstanding call requests ---- */

enum {
    REQ_INFO,
    REQ_SESSION,
    REQ_HEALTH_CHECK,
    REQ_HEALTH_WATCH,
    REQ_LIST_SESSIONS,
    REQ_KILL_SESSION,
    REQ_UNKNOWN
};

typedef struct call_request {
    td__tag tag;
    td__service *svc;
    int kind;
    grpc_call *call;
    gpr_timespec deadline;
    grpc_metadata_array md;
    grpc_byte_buffer *payload;
    grpc_call_details details; /* REQ_UNKNOWN */
} call_request;

/* ---- unknown methods ---- */

/* A call to a method this server does not have. gRPC parks such calls until the
 * application asks for them (grpc_server_request_call), so without these requests every
 * one of them stayed open, and held its memory, for good. Each is answered at once with
 * UNIMPLEMENTED; the call then takes no more memory than a rejected one. */
static void answer_unknown(td__service *s, grpc_call *call, const grpc_slice *method)
{
    char name[128];
    size_t n = GRPC_SLICE_LENGTH(*method), k = 0;
    const char *p = (const char *)GRPC_SLICE_START_PTR(*method);
    for (size_t i = 0; i < n && k + 1 < sizeof name; i++)
        name[k++] = (p[i] >= 0x20 && p[i] < 0x7f) ? p[i] : '?';
    name[k] = '\0';
    char msg[400];
    snprintf(msg, sizeof msg, "unknown method '%s%s'; this server has %s, %s, %s, %s, %s and %s",
             name, n > k ? "..." : "", TD_METHOD_GETINFO, TD_METHOD_SESSION,
             TD_METHOD_LIST_SESSIONS, TD_METHOD_KILL_SESSION, TD_METHOD_HEALTH_CHECK,
             TD_METHOD_HEALTH_WATCH);
    td__log(TD_LOG_DEBUG, "%s", msg);
    td__srv_reject(s, call, GRPC_STATUS_UNIMPLEMENTED, msg);
}

static void request_done(td__tag *tag, bool ok);

static void request_post(td__service *s, int kind)
{
    call_request *r = td__calloc(1, sizeof *r);
    if (r == NULL) {
        td__log(TD_LOG_ERROR, "out of memory: one fewer pending call request");
        return;
    }
    r->tag.fn = request_done;
    r->svc = s;
    r->kind = kind;
    grpc_metadata_array_init(&r->md);
    grpc_call_details_init(&r->details);
    td__service_call_begin(s);
    td__tag_arm(&r->tag);
    grpc_call_error e;
    if (kind == REQ_UNKNOWN)
        e = grpc_server_request_call(s->server, &r->call, &r->details, &r->md, s->cq, s->cq,
                                     &r->tag);
    else {
        void *rm = kind == REQ_INFO            ? s->rm_info
                   : kind == REQ_SESSION       ? s->rm_session
                   : kind == REQ_HEALTH_CHECK  ? s->rm_health_check
                   : kind == REQ_LIST_SESSIONS ? s->rm_list
                   : kind == REQ_KILL_SESSION  ? s->rm_kill
                                               : s->rm_health_watch;
        e = grpc_server_request_registered_call(s->server, rm, &r->call, &r->deadline, &r->md,
                                                kind == REQ_SESSION ? NULL : &r->payload, s->cq,
                                                s->cq, &r->tag);
    }
    if (e != GRPC_CALL_OK) {
        td__log(TD_LOG_ERROR, "cannot request calls (grpc error %d)", (int)e);
        grpc_call_details_destroy(&r->details);
        grpc_metadata_array_destroy(&r->md);
        td__free(r);
        td__service_call_end(s);
    }
}

static void request_done(td__tag *tag, bool ok)
{
    call_request *r = (call_request *)tag;
    td__service *s = r->svc;
    if (ok && !atomic_load(&s->grpc_down)) request_post(s, r->kind);
    if (ok && r->kind == REQ_UNKNOWN) {
        answer_unknown(s, r->call, &r->details.method);
        ok = false; /* answered; the call is gone */
    }
    if (ok && (r->kind == REQ_HEALTH_CHECK || r->kind == REQ_HEALTH_WATCH)) {
        /* No token needed: the answer says nothing about any tenant. */
        if (s->health == NULL)
            td__srv_reject(s, r->call, GRPC_STATUS_UNAVAILABLE, "health service out of memory");
        else if (r->kind == REQ_HEALTH_CHECK)
            td__health_check(s->health, r->call, r->payload);
        else
            td__health_watch(s->health, r->call, r->payload);
        ok = false; /* the call is taken over */
    }
    td__quota *quota = NULL;
    td__identity id;
    if (ok && td__srv_auth_call(s, s->opts.tenants, r->call, &r->md,
                                r->kind == REQ_INFO            ? "GetInfo"
                                : r->kind == REQ_SESSION       ? "Session"
                                : r->kind == REQ_LIST_SESSIONS ? "ListSessions"
                                                               : "KillSession",
                                &quota, &id) != TD_OK)
        ok = false; /* answered with UNAUTHENTICATED; the call is gone */
    if (ok) {
        if (r->kind == REQ_INFO)
            info_start(s, r->call, r->payload, quota);
        else if (r->kind == REQ_LIST_SESSIONS || r->kind == REQ_KILL_SESSION)
            td__admin_call(s, s->opts.tenants,
                           r->kind == REQ_LIST_SESSIONS ? TD_ADMIN_LIST_SESSIONS
                                                        : TD_ADMIN_KILL_SESSION,
                           r->call, r->payload, quota);
        else
            td__srv_session_start(s, r->call, quota, &id);
    }
    if (r->payload) grpc_byte_buffer_destroy(r->payload);
    grpc_call_details_destroy(&r->details);
    grpc_metadata_array_destroy(&r->md);
    td__free(r);
    td__service_call_end(s);
}

/* ---- threads ---- */

static void shutdown_done(td__tag *tag, bool ok)
{
    (void)ok;
    td__service *s = (td__service *)((char *)tag - offsetof(td__service, shutdown_tag));
    pthread_mutex_lock(&s->mu);
    s->shutdown_notified = true;
    pthread_mutex_unlock(&s->mu);
    maybe_drained(s);
}

static void *cq_main(void *arg)
{
    td__service *s = arg;
    for (;;) {
        grpc_event ev = grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN) break;
        if (ev.type != GRPC_OP_COMPLETE) continue;
        td__tag *tag = ev.tag;
        (void)atomic_load_explicit(&tag->armed, memory_order_acquire);
        tag->fn(tag, ev.success != 0);
    }
    return NULL;
}

/* TLS handshake failures. gRPC 1.51 tells why a handshake failed inside TLS (bad or missing
 * client certificate, a plaintext client) at ERROR severity ("Handshake failed with fatal
 * error SSL_ERROR_SSL: ...certificate verify failed") without naming the peer, and names
 * the peer only of a client that closed the connection during the handshake (one that
 * rejected our certificate, or a port scanner), at DEBUG severity ("Security handshake
 * failed: ... Socket closed {... target_address:"ipv4:10.0.0.7:51234"}"). Neither message
 * has both. With TLS on, tensord lowers gRPC's log threshold to DEBUG (unless the operator
 * set GRPC_VERBOSITY) to get the second kind, and drops every other DEBUG/INFO message of
 * gRPC unread. */
static bool g_grpc_debug_filtered; /* threshold lowered by us: drop gRPC's chatter */

static void tls_reason_of(const char *msg, char *out, size_t len)
{
    /* "Handshake failed with fatal error SSL_ERROR_SSL: error:0A000086:SSL
     * routines::certificate verify failed." -> "certificate verify failed (...)" */
    const char *last = strrchr(msg, ':');
    if (last != NULL && last[1] != '\0') {
        const char *r = last + 1;
        size_t n = strlen(r);
        while (n > 0 && (r[n - 1] == '.' || r[n - 1] == ' ')) n--;
        snprintf(out, len, "%.*s (%s)", (int)n, r, msg);
    } else {
        snprintf(out, len, "%s", msg);
    }
}

/* The peer of a "Security handshake failed" message; false when it names none. */
static bool tls_peer_of(const char *msg, char *out, size_t len)
{
    const char *p = strstr(msg, "target_address:\"");
    if (p == NULL) return false;
    p += strlen("target_address:\"");
    const char *e = strchr(p, '"');
    if (e == NULL || e == p) return false;
    char raw[128];
    snprintf(raw, sizeof raw, "%.*s", (int)(e - p), p);
    td__request_printable(raw, out, len);
    return true;
}

static void grpc_log_to_ours(gpr_log_func_args *a)
{
    enum td__log_level lv = a->severity == GPR_LOG_SEVERITY_ERROR  ? TD_LOG_ERROR
                            : a->severity == GPR_LOG_SEVERITY_INFO ? TD_LOG_INFO
                                                                   : TD_LOG_DEBUG;
    if (strstr(a->message, "Failed accept4") != NULL) {
        atomic_store(&g_listener_failed, true);
        td__log(TD_LOG_ERROR,
                "grpc stopped accepting connections (%s): new clients cannot connect until "
                "tensord is restarted; health reports NOT_SERVING",
                a->message);
        return;
    }
    /* A refused TLS client is only UNAVAILABLE on its side: say here why, or who. */
    if (strncmp(a->message, "Handshake failed with fatal error", 33) == 0) {
        char why[512];
        tls_reason_of(a->message, why, sizeof why);
        td__log(TD_LOG_WARN, "TLS handshake with a client failed: %s", why);
        return;
    }
    if (strncmp(a->message, "Security handshake failed", 25) == 0) {
        char peer[128];
        if (tls_peer_of(a->message, peer, sizeof peer))
            td__log(TD_LOG_WARN,
                    "TLS handshake with %s failed: the client closed the connection (it may "
                    "have rejected this server's certificate, e.g. it trusts another CA)",
                    peer);
        return; /* else the same failure as the "fatal error" line before it */
    }
    if (g_grpc_debug_filtered && a->severity != GPR_LOG_SEVERITY_ERROR) return;
    td__log(lv, "grpc: %s (%s:%d)", a->message, a->file, a->line);
}

/* ---- TLS certificates (reloadable) ---- */

/* gRPC calls this at start and before every new connection's handshake (on its own
 * threads): a configuration queued by td__service_tls_reload is handed over (gRPC frees
 * it), otherwise the one in force stays. Connections already up keep the certificate they
 * were made with, so a reload ends no session. */
static grpc_ssl_certificate_config_reload_status tls_fetch(void *arg,
                                                           grpc_ssl_server_certificate_config **out)
{
    td__service *s = arg;
    pthread_mutex_lock(&s->tls_mu);
    grpc_ssl_server_certificate_config *c = s->tls_pending;
    s->tls_pending = NULL;
    pthread_mutex_unlock(&s->tls_mu);
    if (c == NULL) return GRPC_SSL_CERTIFICATE_CONFIG_RELOAD_UNCHANGED;
    *out = c;
    return GRPC_SSL_CERTIFICATE_CONFIG_RELOAD_NEW;
}

static grpc_ssl_server_certificate_config *tls_config_of(const td__tls_files *tls)
{
    grpc_ssl_pem_key_cert_pair pair = {.private_key = tls->key_pem, .cert_chain = tls->cert_pem};
    /* gRPC 1.51 asserts on a fetched configuration without root certificates, even when no
     * client certificate is asked for (ssl_security_connector.cc:366). Without a client CA
     * the server's own chain stands in: it is never used, since no client is asked for a
     * certificate then. */
    const char *roots = tls->client_ca_pem != NULL ? tls->client_ca_pem : tls->cert_pem;
    return grpc_ssl_server_certificate_config_create(roots, &pair, 1);
}

td_status td__service_tls_reload(td__service *s, const td__tls_files *tls, char *err,
                                 size_t errlen)
{
    if (!s->tls_on) {
        snprintf(err, errlen, "the server was started without TLS; restart it to turn TLS on");
        return TD_EINVAL;
    }
    if ((tls->client_ca_pem != NULL) != s->tls_client_ca) {
        snprintf(err, errlen, "tls_client_ca was %s; client certificates can only be turned "
                              "on or off by a restart",
                 s->tls_client_ca ? "removed" : "added");
        return TD_EINVAL;
    }
    grpc_ssl_server_certificate_config *c = tls_config_of(tls);
    if (c == NULL) {
        snprintf(err, errlen, "out of memory");
        return TD_ENOMEM;
    }
    pthread_mutex_lock(&s->tls_mu);
    grpc_ssl_server_certificate_config *old = s->tls_pending;
    s->tls_pending = c;
    pthread_mutex_unlock(&s->tls_mu);
    if (old != NULL) grpc_ssl_server_certificate_config_destroy(old);
    return TD_OK;
}

/* ---- life cycle ---- */

static void service_free(td__service *s)
{
    for (int i = 0; i < s->ndev; i++)
        for (int k = 0; k < s->nworkers[i]; k++) td__worker_destroy(s->workers[i][k]);
    if (s->server) grpc_server_destroy(s->server);
    if (s->cq) {
        grpc_completion_queue_shutdown(s->cq);
        for (int i = 0; i < s->nthreads; i++) pthread_join(s->threads[i], NULL);
        if (s->nthreads == 0) {
            grpc_event ev;
            do {
                ev = grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
            } while (ev.type != GRPC_QUEUE_SHUTDOWN);
        }
        grpc_completion_queue_destroy(s->cq);
    }
    if (s->rq) grpc_resource_quota_unref(s->rq);
    if (s->tls_pending) grpc_ssl_server_certificate_config_destroy(s->tls_pending);
    td__health_destroy(s->health);
    pthread_mutex_destroy(&s->tls_mu);
    pthread_mutex_destroy(&s->live_mu);
    pthread_mutex_destroy(&s->place_mu);
    pthread_mutex_destroy(&s->queue_mu);
    pthread_mutex_destroy(&s->mu);
    td__free(s);
    grpc_shutdown();
}

td_status td__service_start(const td__service_opts *opts, td__service **out, int *port,
                            char *err, size_t errlen)
{
    gpr_set_log_function(grpc_log_to_ours);
    grpc_init();
    /* gRPC's own chatter stays off unless the operator asks for it (GRPC_VERBOSITY); with
     * TLS its DEBUG lines are let through to grpc_log_to_ours, which keeps only the one
     * naming a failed handshake's peer. */
    if (getenv("GRPC_VERBOSITY") == NULL) {
        g_grpc_debug_filtered = opts->tls != NULL;
        gpr_set_log_verbosity(g_grpc_debug_filtered ? GPR_LOG_SEVERITY_DEBUG
                                                    : GPR_LOG_SEVERITY_ERROR);
    }
    td__service *s = td__calloc(1, sizeof *s);
    if (s == NULL) {
        grpc_shutdown();
        snprintf(err, errlen, "out of memory");
        return TD_ENOMEM;
    }
    s->opts = *opts;
    s->shutdown_tag.fn = shutdown_done;
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->live_mu, NULL);
    pthread_mutex_init(&s->place_mu, NULL);
    pthread_mutex_init(&s->queue_mu, NULL);
    pthread_mutex_init(&s->tls_mu, NULL);
    atomic_init(&s->max_sessions, opts->max_sessions);
    atomic_init(&s->max_session_bytes, opts->max_session_bytes);
    s->opts.tls = NULL; /* the caller's files, freed after start: only tls_on is kept */
    td_status st = TD_OK;

    int n = td__device_count();
    for (int i = 0; i < n && i < SVC_MAX_DEVICES; i++) {
        s->devs[i] = td__device_at(i);
        s->ndev = i + 1;
        uint64_t want = opts->device_workers;
        if (want == 0) want = td__device_is_accelerator(s->devs[i]) ? TD_SERVICE_ACCEL_WORKERS : 1;
        if (want > TD_SERVICE_MAX_DEVICE_WORKERS) want = TD_SERVICE_MAX_DEVICE_WORKERS;
        for (int k = 0; k < (int)want; k++) {
            char name[16]; /* a thread name holds 15 characters */
            if (want == 1)
                snprintf(name, sizeof name, "td-%.12s", s->devs[i]->name);
            else
                snprintf(name, sizeof name, "td-%.9s/%u", s->devs[i]->name, (unsigned)k % 100u);
            st = td__worker_create(name, &s->workers[i][k]);
            if (st != TD_OK) {
                snprintf(err, errlen, "cannot start worker %d of device %s", k,
                         s->devs[i]->name);
                goto fail;
            }
            s->nworkers[i] = k + 1;
        }
        td__log(TD_LOG_INFO, "device %s: %d worker thread%s", s->devs[i]->name, s->nworkers[i],
                s->nworkers[i] == 1 ? "" : "s");
    }

    /* Transport limits (README "Limits"): each bounds what a client can make the server
     * hold before any session exists. */
    td__transport_limits net = opts->net;
    if (net.max_streams == 0) net.max_streams = TD_DEFAULT_MAX_STREAMS;
    if (net.stream_window == 0) net.stream_window = TD_DEFAULT_STREAM_WINDOW;
    if (net.transport_bytes == 0) net.transport_bytes = TD_DEFAULT_TRANSPORT_BYTES;
    if (net.idle_timeout_s == 0) net.idle_timeout_s = TD_DEFAULT_IDLE_TIMEOUT_S;
    s->opts.net = net;
    /* Every buffer of every connection (reads, partial messages, received messages not yet
     * handled) is drawn from this quota; past it gRPC closes idle connections and then
     * cancels streams ("Buffers full") until it is back under. */
    s->rq = grpc_resource_quota_create("tensord");
    if (s->rq == NULL) {
        snprintf(err, errlen, "cannot create the gRPC resource quota");
        st = TD_EINTERNAL;
        goto fail;
    }
    grpc_resource_quota_resize(s->rq, (size_t)net.transport_bytes);
    uint64_t idle_ms = net.idle_timeout_s * 1000;
    uint64_t hs_ms = idle_ms < SVC_HANDSHAKE_TIMEOUT_MS ? idle_ms : SVC_HANDSHAKE_TIMEOUT_MS;
    grpc_arg args[16];
    size_t na = 0;
#define SVC_INT_ARG(k, v)                                                                  \
    do {                                                                                   \
        args[na].type = GRPC_ARG_INTEGER;                                                  \
        args[na].key = (char *)(k);                                                        \
        args[na].value.integer = (int)(v);                                                 \
        na++;                                                                              \
    } while (0)
    SVC_INT_ARG(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, TD_MAX_MESSAGE_BYTES);
    SVC_INT_ARG(GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, TD_MAX_MESSAGE_BYTES);
    /* gRPC sets SO_REUSEPORT by default: a second server on a busy port would then start
     * "successfully" and steal half the connections. Fail the bind instead. */
    SVC_INT_ARG(GRPC_ARG_ALLOW_REUSEPORT, 0);
    /* A fixed receive window per stream (BDP probing off): what a partial message can
     * park in gRPC per stream. */
    SVC_INT_ARG(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, net.stream_window);
    SVC_INT_ARG(GRPC_ARG_HTTP2_BDP_PROBE, 0);
    SVC_INT_ARG(GRPC_ARG_MAX_CONCURRENT_STREAMS, net.max_streams);
    /* Identity only: a compressed message is refused (UNIMPLEMENTED) instead of being
     * inflated, to any size, before the message size check. */
    SVC_INT_ARG(GRPC_COMPRESSION_CHANNEL_ENABLED_ALGORITHMS_BITSET, 1u << GRPC_COMPRESS_NONE);
    SVC_INT_ARG(GRPC_ARG_MAX_CONNECTION_IDLE_MS, idle_ms > INT32_MAX ? INT32_MAX : idle_ms);
    SVC_INT_ARG(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS, hs_ms);
    SVC_INT_ARG(GRPC_ARG_KEEPALIVE_TIME_MS, SVC_KEEPALIVE_TIME_MS);
    SVC_INT_ARG(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, SVC_KEEPALIVE_TIMEOUT_MS);
    /* Keep pinging a connection whose streams are quiet (an idle session), not just twice. */
    SVC_INT_ARG(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
#undef SVC_INT_ARG
    args[na].type = GRPC_ARG_POINTER;
    args[na].key = (char *)GRPC_ARG_RESOURCE_QUOTA;
    args[na].value.pointer.p = s->rq;
    args[na].value.pointer.vtable = grpc_resource_quota_arg_vtable();
    na++;
    grpc_channel_args cargs = {.num_args = na, .args = args};
    s->server = grpc_server_create(&cargs, NULL);
    s->cq = grpc_completion_queue_create_for_next(NULL);
    if (s->server == NULL || s->cq == NULL) {
        snprintf(err, errlen, "cannot create the gRPC server");
        st = TD_EINTERNAL;
        goto fail;
    }
    grpc_server_register_completion_queue(s->server, s->cq, NULL);
    s->rm_info = grpc_server_register_method(s->server, TD_METHOD_GETINFO, NULL,
                                             GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER, 0);
    s->rm_session = grpc_server_register_method(s->server, TD_METHOD_SESSION, NULL,
                                                GRPC_SRM_PAYLOAD_NONE, 0);
    s->rm_health_check = grpc_server_register_method(
        s->server, TD_METHOD_HEALTH_CHECK, NULL, GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER, 0);
    s->rm_health_watch = grpc_server_register_method(
        s->server, TD_METHOD_HEALTH_WATCH, NULL, GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER, 0);
    s->rm_list = grpc_server_register_method(s->server, TD_METHOD_LIST_SESSIONS, NULL,
                                             GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER, 0);
    s->rm_kill = grpc_server_register_method(s->server, TD_METHOD_KILL_SESSION, NULL,
                                             GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER, 0);
    s->health = td__health_create(s);
    if (s->rm_info == NULL || s->rm_session == NULL || s->rm_health_check == NULL ||
        s->rm_health_watch == NULL || s->rm_list == NULL || s->rm_kill == NULL) {
        snprintf(err, errlen, "cannot register the gRPC methods");
        st = TD_EINTERNAL;
        goto fail;
    }
    grpc_server_credentials *creds;
    if (opts->tls != NULL) {
        /* Through a fetcher, so that SIGHUP can swap the certificate (tls_fetch). */
        s->tls_client_ca = opts->tls->client_ca_pem != NULL;
        s->tls_pending = tls_config_of(opts->tls);
        grpc_ssl_server_credentials_options *o =
            s->tls_pending == NULL
                ? NULL
                : grpc_ssl_server_credentials_create_options_using_config_fetcher(
                      s->tls_client_ca ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                                       : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE,
                      tls_fetch, s);
        creds = o != NULL ? grpc_ssl_server_credentials_create_with_options(o) : NULL;
        if (creds == NULL) {
            snprintf(err, errlen, "cannot set up TLS (out of memory)");
            st = TD_ENOMEM;
            goto fail;
        }
        s->tls_on = true;
    } else {
        creds = grpc_insecure_server_credentials_create();
    }
    int bound = grpc_server_add_http2_port(s->server, opts->target, creds);
    grpc_server_credentials_release(creds);
    if (bound == 0) {
        snprintf(err, errlen,
                 "cannot listen on %s (address in use, not local, or no permission; "
                 "see the grpc error above)",
                 opts->target);
        st = TD_EIO;
        goto fail;
    }
    grpc_server_start(s->server);
    int ncq = cq_threads_for(opts->cq_threads, sysconf(_SC_NPROCESSORS_ONLN));
    for (int i = 0; i < ncq; i++) {
        if (pthread_create(&s->threads[i], NULL, cq_main, s) != 0) break;
        char name[16];
        snprintf(name, sizeof name, "td-cq%d", i);
        pthread_setname_np(s->threads[i], name); /* best effort, for ps and perf */
        s->nthreads++;
    }
    if (s->nthreads > 0)
        td__log(TD_LOG_INFO, "%d completion-queue thread%s", s->nthreads,
                s->nthreads == 1 ? "" : "s");
    if (s->nthreads == 0) {
        snprintf(err, errlen, "cannot start completion-queue threads");
        st = TD_EINTERNAL;
        /* The server is started: shut it down properly before destroying it. */
        td__tag_arm(&s->shutdown_tag);
        grpc_server_shutdown_and_notify(s->server, s->cq, &s->shutdown_tag);
        grpc_event ev;
        do {
            ev = grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        } while (ev.type != GRPC_OP_COMPLETE || ev.tag != &s->shutdown_tag);
        goto fail;
    }
    for (int i = 0; i < SVC_REQUESTS_PER_METHOD; i++) {
        request_post(s, REQ_INFO);
        request_post(s, REQ_SESSION);
        request_post(s, REQ_HEALTH_CHECK);
        request_post(s, REQ_HEALTH_WATCH);
        request_post(s, REQ_UNKNOWN);
        if (i < 2) { /* admin calls are rare */
            request_post(s, REQ_LIST_SESSIONS);
            request_post(s, REQ_KILL_SESSION);
        }
    }
    *port = strncmp(opts->target, "unix:", 5) == 0 ? 0 : bound;
    *out = s;
    return TD_OK;
fail:
    service_free(s);
    return st;
}

void td__service_drain_begin(td__service *s)
{
    if (atomic_exchange(&s->shutting_down, true)) return;
    td__health_update(s->health); /* watchers hear NOT_SERVING before anything is cancelled */
}

void td__service_shutdown(td__service *s)
{
    pthread_mutex_lock(&s->mu);
    bool first = !s->shutdown_started;
    s->shutdown_started = true;
    pthread_mutex_unlock(&s->mu);
    if (!first) return;
    td__service_drain_begin(s);
    atomic_store(&s->grpc_down, true);
    td__tag_arm(&s->shutdown_tag);
    grpc_server_shutdown_and_notify(s->server, s->cq, &s->shutdown_tag);
}

void td__service_cancel_all(td__service *s)
{
    td__service_shutdown(s);
    grpc_server_cancel_all_calls(s->server);
}

void td__service_destroy(td__service *s)
{
    if (s == NULL) return;
    service_free(s);
}

/* ---- health and revocation ---- */

bool td__service_serving(td__service *s, char *why, size_t whylen)
{
    const char *reason = NULL;
    if (atomic_load(&s->shutting_down))
        reason = "shutting down";
    else if (atomic_load(&g_listener_failed))
        reason = "grpc stopped accepting connections (Failed accept4); restart tensord";
    else if (td__conn_fd_trouble())
        reason = "connections refused for lack of file descriptors in the last 10 s";
    if (why != NULL && whylen > 0) snprintf(why, whylen, "%s", reason ? reason : "serving");
    return reason == NULL;
}

struct td__live_session *td__service_live_add(td__service *s, struct td__srv_session *ss,
                                              td__quota *quota, const td__identity *id,
                                              const char *peer)
{
    struct td__live_session *l = td__calloc(1, sizeof *l);
    if (l == NULL) return NULL;
    l->ss = ss;
    snprintf(l->peer, sizeof l->peer, "%s", peer);
    atomic_init(&l->sid, 0);
    atomic_init(&l->bytes, 0);
    atomic_init(&l->ops, 0);
    atomic_init(&l->device, NULL);
    l->quota = quota;
    l->start_ms = mono_ms();
    atomic_init(&l->opened, false);
    atomic_init(&l->slot, -1);
    if (id != NULL) l->id = *id;
    pthread_mutex_lock(&s->live_mu);
    l->next = s->live;
    if (s->live) s->live->prev = l;
    s->live = l;
    pthread_mutex_unlock(&s->live_mu);
    return l;
}

void td__service_live_remove(td__service *s, struct td__live_session *l)
{
    if (l == NULL) return;
    pthread_mutex_lock(&s->live_mu);
    if (l->prev)
        l->prev->next = l->next;
    else
        s->live = l->next;
    if (l->next) l->next->prev = l->prev;
    pthread_mutex_unlock(&s->live_mu);
    td__free(l);
}

size_t td__service_revoke_stale(td__service *s, td__tenants *tenants)
{
    size_t n = 0;
    /* Under live_mu no session can be freed (td__service_live_remove waits), and revoking
     * only cancels the call: its end runs later, on a completion-queue thread. */
    pthread_mutex_lock(&s->live_mu);
    for (struct td__live_session *l = s->live; l != NULL; l = l->next) {
        if (td__tenants_still_grants(tenants, &l->id, l->quota)) continue;
        td__srv_session_revoke(l->ss, GRPC_STATUS_UNAUTHENTICATED,
                               l->id.kind == TD_IDENTITY_CN
                                   ? "client certificate no longer in the tokens file"
                                   : "bearer token revoked");
        n++;
    }
    pthread_mutex_unlock(&s->live_mu);
    return n;
}

void td__service_live_opened(struct td__live_session *l)
{
    if (l != NULL) atomic_store(&l->opened, true);
}

void td__service_live_closed(struct td__live_session *l)
{
    if (l != NULL) atomic_store(&l->slot, -1);
}

void td__service_live_set_device(struct td__live_session *l, uint64_t session_id, int slot,
                                 const char *device)
{
    if (l == NULL) return;
    atomic_store(&l->sid, session_id);
    atomic_store(&l->device, device);
    atomic_store(&l->slot, slot);
}

/* Whether tenant list `allow` ("" = everything) lets a session use `d`. */
static bool allowed(const char *allow, const td__device *d)
{
    if (allow[0] == '\0') return true;
    char buf[TD_TOKEN_DEVICES_MAX];
    snprintf(buf, sizeof buf, "%s", allow);
    char *save = NULL;
    for (char *e = strtok_r(buf, ",", &save); e != NULL; e = strtok_r(NULL, ",", &save))
        if (td__device_list_match(d, e)) return true;
    return false;
}

static bool excluded(const td__device *d, td__device *const *exclude, size_t n_exclude)
{
    for (size_t i = 0; i < n_exclude; i++)
        if (exclude[i] == d) return true;
    return false;
}

td_status td__service_place(td__service *s, const td__quota *quota, const char *request,
                            td__device *named, td__device *const *exclude, size_t n_exclude,
                            struct td__live_session *live, td__device **out, char *msg,
                            size_t msglen)
{
    char allow[TD_TOKEN_DEVICES_MAX];
    const char *tenant = quota != NULL ? quota->name : TD_DEFAULT_TENANT;
    bool pinned = td__tenants_devices(s->opts.tenants, quota, allow, sizeof allow);
    if (named != NULL && (request[0] != '\0' || allowed(allow, named))) {
        if (!allowed(allow, named)) {
            snprintf(msg, msglen, "tenant '%s' may not use device %s (its devices: %s)",
                     tenant, named->name, allow);
            return TD_EUNAUTHENTICATED;
        }
        *out = named;
        snprintf(msg, msglen, "%s", request[0] != '\0' ? "named by the client"
                                                       : "the server's default device");
        if (live != NULL) atomic_store(&live->slot, td__metrics_device_slot(named));
        return TD_OK;
    }
    /* Placement: "auto", a kind, or "" for a pinned tenant whose list lacks the default. */
    const char *want = request[0] != '\0' ? request : "auto";
    int nsess[SVC_MAX_DEVICES] = {0};
    pthread_mutex_lock(&s->place_mu);
    pthread_mutex_lock(&s->live_mu);
    for (struct td__live_session *l = s->live; l != NULL; l = l->next) {
        int slot = atomic_load(&l->slot);
        if (slot >= 0 && slot < SVC_MAX_DEVICES) nsess[slot]++;
    }
    pthread_mutex_unlock(&s->live_mu);
    td__device *best = NULL;
    long best_load = 0;
    uint64_t best_free = 0;
    size_t len = 0;
    len += (size_t)snprintf(msg, msglen, "'%s' placed by load (sessions + queued requests) "
                            "then free memory:", want);
    /* "auto": the accelerators the tenant may use when there is one, else the CPU devices
     * it may use, else whatever it may use (a software Vulkan device) */
    bool automatic = strcmp(want, "auto") == 0, any_accel = false, any_cpu = false;
    for (int i = 0; automatic && i < s->ndev; i++) {
        if (!allowed(allow, s->devs[i]) || excluded(s->devs[i], exclude, n_exclude)) continue;
        if (td__device_is_accelerator(s->devs[i])) any_accel = true;
        if (strcmp(s->devs[i]->backend->kind, "cpu") == 0) any_cpu = true;
    }
    for (int i = 0; i < s->ndev; i++) {
        td__device *d = (td__device *)s->devs[i];
        int slot = td__metrics_device_slot(d);
        bool is_cpu = strcmp(d->backend->kind, "cpu") == 0;
        bool candidate = !automatic  ? td__device_place_candidate(d, want)
                         : any_accel ? td__device_is_accelerator(d)
                                     : is_cpu || !any_cpu;
        if (!candidate || !allowed(allow, d) || slot < 0 || excluded(d, exclude, n_exclude))
            continue;
        uint64_t total = 0, free_bytes = 0;
        if (d->backend->memory_info == NULL ||
            d->backend->memory_info(d, &total, &free_bytes) != TD_OK)
            total = free_bytes = 0;
        long load = (long)nsess[slot] + td__metrics_device_queue(slot);
        if (len < msglen)
            len += (size_t)snprintf(msg + len, msglen - len, " %s load %ld free %llu MiB;",
                                    d->name, load, (unsigned long long)(free_bytes >> 20));
        if (best == NULL || load < best_load || (load == best_load && free_bytes > best_free)) {
            best = d;
            best_load = load;
            best_free = free_bytes;
        }
    }
    if (best != NULL && live != NULL) atomic_store(&live->slot, td__metrics_device_slot(best));
    pthread_mutex_unlock(&s->place_mu);
    if (best == NULL) {
        char have[256] = "";
        size_t hl = 0;
        for (int i = 0; i < s->ndev && hl < sizeof have; i++)
            hl += (size_t)snprintf(have + hl, sizeof have - hl, "%s%s", hl ? ", " : "",
                                   s->devs[i]->name);
        char others[160] = "";
        size_t ol = 0;
        for (size_t i = 0; i < n_exclude && ol < sizeof others; i++)
            ol += (size_t)snprintf(others + ol, sizeof others - ol, "%s%s",
                                   i ? ", " : " other than the session's further devices ",
                                   exclude[i]->name);
        if (pinned)
            snprintf(msg, msglen, "no device for '%s'%s that tenant '%s' may use (its devices: "
                     "%s; this server has: %s)", want, others, tenant, allow, have);
        else
            snprintf(msg, msglen, "no device for '%s'%s on this server (it has: %s)", want,
                     others, have);
        return pinned ? TD_EUNAUTHENTICATED : TD_ENOTFOUND;
    }
    if (len > 0 && len < msglen && msg[len - 1] == ';') msg[len - 1] = '\0';
    *out = best;
    return TD_OK;
}

void td__service_live_progress(struct td__live_session *l, uint64_t ops, uint64_t bytes)
{
    if (l == NULL) return;
    atomic_store(&l->ops, ops);
    atomic_store(&l->bytes, bytes);
}

size_t td__service_session_count(td__service *s)
{
    size_t n = 0;
    pthread_mutex_lock(&s->live_mu);
    for (struct td__live_session *l = s->live; l != NULL; l = l->next) n++;
    pthread_mutex_unlock(&s->live_mu);
    return n;
}

size_t td__service_end_sessions(td__service *s, grpc_status_code code, const char *why)
{
    size_t n = 0;
    pthread_mutex_lock(&s->live_mu); /* as in td__service_revoke_stale */
    for (struct td__live_session *l = s->live; l != NULL; l = l->next) {
        td__srv_session_revoke(l->ss, code, why);
        n++;
    }
    pthread_mutex_unlock(&s->live_mu);
    return n;
}

size_t td__service_sessions_list(td__service *s, td__session_row *rows, size_t cap)
{
    size_t n = 0;
    uint64_t now = mono_ms();
    pthread_mutex_lock(&s->live_mu);
    for (struct td__live_session *l = s->live; l != NULL; l = l->next) {
        uint64_t sid = atomic_load(&l->sid);
        if (sid == 0) continue; /* not open yet: nothing to show or kill */
        if (n < cap) {
            td__session_row *r = &rows[n];
            const char *dev = atomic_load(&l->device);
            r->id = sid;
            snprintf(r->tenant, sizeof r->tenant, "%s", l->quota->name);
            snprintf(r->device, sizeof r->device, "%s", dev != NULL ? dev : "");
            snprintf(r->peer, sizeof r->peer, "%s", l->peer);
            r->bytes = atomic_load(&l->bytes);
            r->ops = atomic_load(&l->ops);
            r->age_ms = now - l->start_ms;
        }
        n++;
    }
    pthread_mutex_unlock(&s->live_mu);
    return n;
}

bool td__service_session_kill(td__service *s, uint64_t session_id, grpc_status_code code,
                              const char *why)
{
    bool found = false;
    pthread_mutex_lock(&s->live_mu);
    for (struct td__live_session *l = s->live; l != NULL && !found; l = l->next) {
        if (session_id == 0 || atomic_load(&l->sid) != session_id) continue;
        td__srv_session_revoke(l->ss, code, why);
        found = true;
    }
    pthread_mutex_unlock(&s->live_mu);
    return found;
}

void td__service_sessions_foreach(td__service *s,
                                  void (*fn)(void *arg, const char *tenant, int slot),
                                  void *arg)
{
    pthread_mutex_lock(&s->live_mu);
    for (struct td__live_session *l = s->live; l != NULL; l = l->next) {
        int slot = atomic_load(&l->slot);
        if (slot >= 0) fn(arg, l->quota->name, slot);
    }
    pthread_mutex_unlock(&s->live_mu);
}

void td__service_tick(td__service *s)
{
    td__health_update(s->health);
    uint64_t now = mono_ms();
    pthread_mutex_lock(&s->live_mu);
    for (struct td__live_session *l = s->live; l != NULL; l = l->next) {
        if (l->timed_out || atomic_load(&l->opened) || now - l->start_ms < TD_OPEN_TIMEOUT_MS)
            continue;
        l->timed_out = true;
        char why[128];
        snprintf(why, sizeof why, "no complete open message within %d ms of the call",
                 TD_OPEN_TIMEOUT_MS);
        td__srv_session_revoke(l->ss, GRPC_STATUS_DEADLINE_EXCEEDED, why);
    }
    pthread_mutex_unlock(&s->live_mu);
}

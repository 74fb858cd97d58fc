/* metrics.c — counters, the exposition writer and the HTTP listener (see metrics.h).
 *
 * Why written by hand: Debian has no C Prometheus client, and the text format is a few
 * line shapes (HELP, TYPE, `name{labels} value`). Why sharded counters: the receive and
 * send paths run on every completion-queue thread, and one shared counter's cache line
 * bouncing between cores on every message costs more than the work it counts; each thread
 * takes a shard of its own the first time it counts (threads beyond the shard count share
 * one, which stays correct: every update is an atomic add).
 *
 * Histogram buckets are stored per bucket (not cumulative) by the writer and summed into
 * the cumulative `le` series when scraped, so an observation is one atomic add.
 */
#include "server/metrics.h"

#include "auth/tenant.h"
#include "common/alloc.h"
#include "common/log.h"
#include "engine/device.h"
#include "engine/optable.h"
#include "server/blobstore.h"
#include "server/ring.h"
#include "server/shm.h"
#include "server/candidates.h"
#include "server/graphcache.h"
#include "server/service.h"
#include "server/session.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef TD_HAVE_MICROHTTPD
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#endif

/* ---- counters ---- */

#define SHARDS 8
#define N_STATUS 32   /* td_status values are below this (TD_STATUS_MAP) */
#define N_FAMILY 32   /* enum td__op_class values are below this */
/* Latency bucket upper bounds in seconds: ×4 steps from 1 µs to 4 s, then +Inf. Ops on
 * these devices take from about a microsecond (a small elementwise op on the CPU) to
 * seconds (a large matmul piece). */
static const double k_bounds[] = {1e-6,   4e-6,   16e-6, 64e-6, 256e-6, 1.024e-3,
                                  4.096e-3, 16.384e-3, 65.536e-3, 0.262144, 1.048576, 4.194304};
#define N_BOUNDS (sizeof k_bounds / sizeof k_bounds[0])

typedef struct hist {
    atomic_ullong bucket[N_BOUNDS + 1]; /* last: above every bound */
    atomic_ullong sum_ns;
} hist;

typedef struct shard {
    _Alignas(64) atomic_ullong bytes_received;
    atomic_ullong bytes_sent;
    atomic_ullong failures[N_STATUS];
} shard;

typedef struct dev_counters {
    _Alignas(64) atomic_ullong ops[TD_OPCODE_LIMIT];
    hist op_latency[N_FAMILY];
    hist batch_latency[2]; /* batches, graph runs */
    atomic_long queue;     /* written by several threads (submit and finish) */
} dev_counters;

static shard g_shards[SHARDS];
static atomic_uint g_next_shard;
static _Thread_local int t_shard = -1;
static dev_counters g_dev[TD_METRICS_MAX_DEVICES];

static shard *my_shard(void)
{
    if (t_shard < 0) t_shard = (int)(atomic_fetch_add(&g_next_shard, 1) % SHARDS);
    return &g_shards[t_shard];
}

static inline void bump(atomic_ullong *c, uint64_t n)
{
    atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

static inline uint64_t get(const atomic_ullong *c)
{
    return atomic_load_explicit((atomic_ullong *)c, memory_order_relaxed);
}

uint64_t td__metrics_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int td__metrics_device_slot(const td__device *dev)
{
    int n = td__device_count();
    for (int i = 0; i < n && i < TD_METRICS_MAX_DEVICES; i++)
        if (td__device_at(i) == dev) return i;
    return -1;
}

long td__metrics_device_queue(int slot)
{
    if (slot < 0 || slot >= TD_METRICS_MAX_DEVICES) return 0;
    long q = atomic_load_explicit(&g_dev[slot].queue, memory_order_relaxed);
    return q < 0 ? 0 : q;
}

void td__metrics_bytes_received(size_t nbytes) { bump(&my_shard()->bytes_received, nbytes); }
void td__metrics_bytes_sent(size_t nbytes) { bump(&my_shard()->bytes_sent, nbytes); }

void td__metrics_failure(td_status st)
{
    if ((unsigned)st < N_STATUS) bump(&my_shard()->failures[st], 1);
}

static void observe(hist *h, uint64_t ns)
{
    size_t b = 0;
    double s = (double)ns * 1e-9;
    while (b < N_BOUNDS && s > k_bounds[b]) b++;
    bump(&h->bucket[b], 1);
    bump(&h->sum_ns, ns);
}

void td__metrics_op(int slot, uint32_t opcode, uint64_t ns)
{
    if (slot < 0 || slot >= TD_METRICS_MAX_DEVICES || opcode >= TD_OPCODE_LIMIT) return;
    dev_counters *d = &g_dev[slot];
    bump(&d->ops[opcode], 1);
    unsigned fam = (unsigned)td__op_class(opcode);
    if (ns != UINT64_MAX && fam < N_FAMILY) observe(&d->op_latency[fam], ns);
}

void td__metrics_batch(int slot, bool graph, uint64_t ns)
{
    if (slot < 0 || slot >= TD_METRICS_MAX_DEVICES) return;
    observe(&g_dev[slot].batch_latency[graph ? 1 : 0], ns);
}

void td__metrics_queue_add(int slot, long delta)
{
    if (slot < 0 || slot >= TD_METRICS_MAX_DEVICES) return;
    atomic_fetch_add_explicit(&g_dev[slot].queue, delta, memory_order_relaxed);
}

/* ---- the exposition writer ---- */

typedef struct out {
    char *buf;
    size_t len, cap;
    bool oom;
} out;

static void emit(out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void emit(out *o, const char *fmt, ...)
{
    if (o->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(o->buf + o->len, o->cap - o->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            o->oom = true;
            return;
        }
        if ((size_t)n < o->cap - o->len) {
            o->len += (size_t)n;
            return;
        }
        size_t ncap = o->cap * 2 + (size_t)n;
        char *nb = td__realloc(o->buf, ncap);
        if (nb == NULL) {
            o->oom = true;
            return;
        }
        o->buf = nb;
        o->cap = ncap;
    }
}

/* A label value with the format's escapes (backslash, quote, newline). */
static void emit_label(out *o, const char *v)
{
    for (const char *p = v; *p != '\0'; p++) {
        if (*p == '\\')
            emit(o, "\\\\");
        else if (*p == '"')
            emit(o, "\\\"");
        else if (*p == '\n')
            emit(o, "\\n");
        else
            emit(o, "%c", *p);
    }
}

static void family(out *o, const char *name, const char *type, const char *help)
{
    emit(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static const char *const k_class_names[] = {
    [TD_OPCLASS_NONE] = "none",       [TD_OPCLASS_CREATE] = "create",
    [TD_OPCLASS_UNARY] = "unary",     [TD_OPCLASS_BINARY] = "binary",
    [TD_OPCLASS_COMPARE] = "compare", [TD_OPCLASS_WHERE] = "where",
    [TD_OPCLASS_CAST] = "cast",       [TD_OPCLASS_REDUCE] = "reduce",
    [TD_OPCLASS_MATMUL] = "matmul",   [TD_OPCLASS_MOVEMENT] = "movement",
    [TD_OPCLASS_SOFTMAX] = "softmax",
};

static const char *class_name(unsigned fam)
{
    size_t n = sizeof k_class_names / sizeof k_class_names[0];
    return fam < n && k_class_names[fam] != NULL ? k_class_names[fam] : "other";
}

static void emit_hist(out *o, const char *name, const char *labels, const hist *h)
{
    uint64_t cum = 0;
    for (size_t b = 0; b < N_BOUNDS; b++) {
        cum += get(&h->bucket[b]);
        emit(o, "%s_bucket{%s,le=\"%g\"} %llu\n", name, labels, k_bounds[b],
             (unsigned long long)cum);
    }
    cum += get(&h->bucket[N_BOUNDS]);
    emit(o, "%s_bucket{%s,le=\"+Inf\"} %llu\n", name, labels, (unsigned long long)cum);
    emit(o, "%s_sum{%s} %.9f\n", name, labels, (double)get(&h->sum_ns) * 1e-9);
    emit(o, "%s_count{%s} %llu\n", name, labels, (unsigned long long)cum);
}

/* Sessions grouped by (tenant, device). Tenants are few (the tokens file), so a flat
 * array with a linear search is enough. */
typedef struct sess_group {
    char tenant[TD_TENANT_NAME_MAX];
    int slot;
    uint64_t n;
} sess_group;

typedef struct sess_acc {
    sess_group *g;
    size_t n, cap;
    bool oom;
} sess_acc;

static void count_session(void *arg, const char *tenant, int slot)
{
    sess_acc *a = arg;
    for (size_t i = 0; i < a->n; i++)
        if (a->g[i].slot == slot && strcmp(a->g[i].tenant, tenant) == 0) {
            a->g[i].n++;
            return;
        }
    if (a->n == a->cap) {
        size_t ncap = a->cap ? a->cap * 2 : 16;
        sess_group *ng = td__realloc(a->g, ncap * sizeof *ng);
        if (ng == NULL) {
            a->oom = true;
            return;
        }
        a->g = ng;
        a->cap = ncap;
    }
    sess_group *g = &a->g[a->n++];
    snprintf(g->tenant, sizeof g->tenant, "%s", tenant);
    g->slot = slot;
    g->n = 1;
}

static void emit_tenant(void *arg, const td__quota *q)
{
    out *o = arg;
    td__quota *mq = (td__quota *)q;
    emit(o, "tensord_tenant_memory_bytes{tenant=\"");
    emit_label(o, q->name);
    emit(o, "\"} %llu\n", (unsigned long long)atomic_load(&mq->bytes));
}

static void emit_tenant_quota(void *arg, const td__quota *q)
{
    out *o = arg;
    uint64_t max = td__quota_max_bytes(q);
    if (max == 0) return; /* no limit: no series (README) */
    emit(o, "tensord_tenant_memory_quota_bytes{tenant=\"");
    emit_label(o, q->name);
    emit(o, "\"} %llu\n", (unsigned long long)max);
}

static void emit_tenant_tensors(void *arg, const td__quota *q)
{
    out *o = arg;
    td__quota *mq = (td__quota *)q;
    emit(o, "tensord_tenant_tensors{tenant=\"");
    emit_label(o, q->name);
    emit(o, "\"} %llu\n", (unsigned long long)atomic_load(&mq->tensors));
}

static void emit_tenant_queued(void *arg, const td__quota *q)
{
    out *o = arg;
    td__quota *mq = (td__quota *)q;
    emit(o, "tensord_tenant_queued_batches{tenant=\"");
    emit_label(o, q->name);
    emit(o, "\"} %llu\n", (unsigned long long)atomic_load(&mq->queued_batches));
}

td_status td__metrics_render(const td__metrics_sources *src, char **outp, size_t *lenp)
{
    out o = {.cap = 16384};
    o.buf = td__malloc(o.cap);
    if (o.buf == NULL) return TD_ENOMEM;
    o.buf[0] = '\0';
    int ndev = td__device_count();
    if (ndev > TD_METRICS_MAX_DEVICES) ndev = TD_METRICS_MAX_DEVICES;

    family(&o, "tensord_build_info", "gauge", "The running tensord's version (value 1).");
    emit(&o, "tensord_build_info{version=\"%s\"} 1\n", TD_VERSION_STRING);
    family(&o, "tensord_serving", "gauge",
           "1 while the server takes new sessions, 0 while draining or unable to accept.");
    emit(&o, "tensord_serving %d\n", td__service_serving(src->svc, NULL, 0) ? 1 : 0);

    /* Devices. tensord_device_info carries each device's model and, for GPUs, the UUID
     * label NVIDIA's DCGM exporter uses (UUID="GPU-..."), so a query can join our series
     * with the exporter's on it (group_left through the info series). */
    family(&o, "tensord_device_info", "gauge",
           "Devices this server hosts (value 1): kind, model and hardware UUID where known.");
    for (int i = 0; i < ndev; i++) {
        td__device *d = td__device_at(i);
        emit(&o, "tensord_device_info{device=\"%s\",kind=\"%s\",model=\"", d->name,
             d->backend->kind);
        emit_label(&o, d->description);
        emit(&o, "\",UUID=\"");
        emit_label(&o, d->uuid);
        emit(&o, "\"} 1\n");
    }
    family(&o, "tensord_device_memory_total_bytes", "gauge",
           "Memory of the device as its backend reports it (0: unknown).");
    for (int i = 0; i < ndev; i++) {
        td__device *d = td__device_at(i);
        uint64_t total = 0, free_bytes = 0;
        if (d->backend->memory_info != NULL &&
            d->backend->memory_info(d, &total, &free_bytes) != TD_OK)
            total = free_bytes = 0;
        emit(&o, "tensord_device_memory_total_bytes{device=\"%s\",kind=\"%s\"} %llu\n",
             d->name, d->backend->kind, (unsigned long long)total);
    }
    family(&o, "tensord_device_memory_free_bytes", "gauge",
           "Free memory of the device as its backend reports it (0: unknown).");
    for (int i = 0; i < ndev; i++) {
        td__device *d = td__device_at(i);
        uint64_t total = 0, free_bytes = 0;
        if (d->backend->memory_info != NULL &&
            d->backend->memory_info(d, &total, &free_bytes) != TD_OK)
            total = free_bytes = 0;
        emit(&o, "tensord_device_memory_free_bytes{device=\"%s\",kind=\"%s\"} %llu\n",
             d->name, d->backend->kind, (unsigned long long)free_bytes);
    }
    family(&o, "tensord_device_queue_depth", "gauge",
           "Requests received for the device and not yet finished (queued or running).");
    for (int i = 0; i < ndev; i++) {
        long q = atomic_load_explicit(&g_dev[i].queue, memory_order_relaxed);
        emit(&o, "tensord_device_queue_depth{device=\"%s\"} %ld\n", td__device_at(i)->name,
             q < 0 ? 0 : q);
    }
    family(&o, "tensord_device_workers", "gauge",
           "Worker threads serving the device's sessions (--device-workers); a session runs "
           "on one of them.");
    for (int i = 0; i < ndev; i++)
        emit(&o, "tensord_device_workers{device=\"%s\"} %d\n", td__device_at(i)->name,
             td__service_device_workers(src->svc, td__device_at(i)));

    /* Sessions by tenant and device. */
    sess_acc acc = {0};
    td__service_sessions_foreach(src->svc, count_session, &acc);
    family(&o, "tensord_sessions", "gauge", "Open sessions by tenant and device.");
    for (size_t i = 0; i < acc.n; i++) {
        if (acc.g[i].slot < 0 || acc.g[i].slot >= ndev) continue;
        emit(&o, "tensord_sessions{tenant=\"");
        emit_label(&o, acc.g[i].tenant);
        emit(&o, "\",device=\"%s\"} %llu\n", td__device_at(acc.g[i].slot)->name,
             (unsigned long long)acc.g[i].n);
    }
    td__free(acc.g);
    if (acc.oom) o.oom = true;

    /* Tenants. */
    family(&o, "tensord_tenant_memory_bytes", "gauge",
           "Memory held for the tenant: device buffers, tensor records, pinned blobs, "
           "graphs (what its max_bytes quota limits).");
    td__tenants_foreach(src->tenants, emit_tenant, &o);
    family(&o, "tensord_tenant_memory_quota_bytes", "gauge",
           "The tenant's max_bytes limit in force (absent: no limit).");
    td__tenants_foreach(src->tenants, emit_tenant_quota, &o);
    family(&o, "tensord_tenant_tensors", "gauge", "Live tensors of the tenant.");
    td__tenants_foreach(src->tenants, emit_tenant_tensors, &o);
    family(&o, "tensord_tenant_queued_batches", "gauge",
           "Op batches of the tenant received and not yet executed.");
    td__tenants_foreach(src->tenants, emit_tenant_queued, &o);

    family(&o, "tensord_batches_waiting", "gauge",
           "Batches waiting for their tenant's max_queued_batches; their sessions' streams are "
           "not read meanwhile (backpressure).");
    emit(&o, "tensord_batches_waiting %ld\n", td__srv_sessions_parked());

    /* Ops, by device, family and op. */
    family(&o, "tensord_ops_executed_total", "counter",
           "Ops executed (successfully or not), by device, op family and op.");
    for (int i = 0; i < ndev; i++)
        for (uint32_t op = 0; op < TD_OPCODE_LIMIT; op++) {
            uint64_t n = get(&g_dev[i].ops[op]);
            if (n == 0) continue;
            emit(&o,
                 "tensord_ops_executed_total{device=\"%s\",family=\"%s\",op=\"%s\"} %llu\n",
                 td__device_at(i)->name, class_name((unsigned)td__op_class(op)),
                 td__op_name(op), (unsigned long long)n);
        }
    family(&o, "tensord_op_duration_seconds", "histogram",
           "Worker time per op of a batch, by device and op family (on GPUs the launch; "
           "kernels run asynchronously).");
    for (int i = 0; i < ndev; i++)
        for (unsigned f = 1; f < N_FAMILY; f++) {
            const hist *h = &g_dev[i].op_latency[f];
            uint64_t any = 0;
            for (size_t b = 0; b <= N_BOUNDS; b++) any += get(&h->bucket[b]);
            if (any == 0) continue;
            char labels[128];
            snprintf(labels, sizeof labels, "device=\"%s\",family=\"%s\"",
                     td__device_at(i)->name, class_name(f));
            emit_hist(&o, "tensord_op_duration_seconds", labels, h);
        }
    family(&o, "tensord_batch_duration_seconds", "histogram",
           "From the receipt of a batch (kind=batch) or graph run (kind=graph_run) to its "
           "last op executed: queueing and execution, by device.");
    for (int i = 0; i < ndev; i++)
        for (int k = 0; k < 2; k++) {
            char labels[128];
            snprintf(labels, sizeof labels, "device=\"%s\",kind=\"%s\"",
                     td__device_at(i)->name, k ? "graph_run" : "batch");
            emit_hist(&o, "tensord_batch_duration_seconds", labels, &g_dev[i].batch_latency[k]);
        }

    /* Wire and failures. */
    uint64_t rx = 0, tx = 0, fail[N_STATUS] = {0};
    for (int s = 0; s < SHARDS; s++) {
        rx += get(&g_shards[s].bytes_received);
        tx += get(&g_shards[s].bytes_sent);
        for (int k = 0; k < N_STATUS; k++) fail[k] += get(&g_shards[s].failures[k]);
    }
    family(&o, "tensord_received_bytes_total", "counter",
           "Bytes of gRPC messages received from clients.");
    emit(&o, "tensord_received_bytes_total %llu\n", (unsigned long long)rx);
    family(&o, "tensord_sent_bytes_total", "counter", "Bytes of gRPC messages sent to clients.");
    emit(&o, "tensord_sent_bytes_total %llu\n", (unsigned long long)tx);
    family(&o, "tensord_failures_total", "counter",
           "Failure replies sent to clients (failed ops, reads, writes, refused batches), by "
           "status.");
for (int k = 1; k < N_STATUS; k++) {
        const char *name = td_status_name((td_status)k);
        if (strcmp(name, "unknown status") == 0) continue;
        emit(&o, "tensord_failures_total{status=\"%s\"} %llu\n", name,
             (unsigned long long)fail[k]);
    }

    /* Caches. */
    td__blobstore_stats bs = {0};
    if (src->blobs != NULL) td__blobstore_stats_get(src->blobs, &bs);
    uint64_t cand = 0, cand_bytes = 0;
    td__candidates_stats(&cand, &cand_bytes);
    td__graphcache_stats gs;
    td__graphcache_stats_get(&gs);
    family(&o, "tensord_blob_store_hits_total", "counter", "Blob-store lookups that found the blob.");
    emit(&o, "tensord_blob_store_hits_total %llu\n", (unsigned long long)bs.hits);
    family(&o, "tensord_blob_store_misses_total", "counter", "Blob-store lookups that did not.");
    emit(&o, "tensord_blob_store_misses_total %llu\n", (unsigned long long)bs.misses);
    family(&o, "tensord_blob_store_evictions_total", "counter",
           "Blobs dropped from memory under --blob-cache-bytes.");
    emit(&o, "tensord_blob_store_evictions_total %llu\n", (unsigned long long)bs.evictions);
    family(&o, "tensord_blob_store_blobs", "gauge", "Blobs in memory.");
    emit(&o, "tensord_blob_store_blobs %llu\n", (unsigned long long)bs.blobs);
    family(&o, "tensord_blob_store_bytes", "gauge", "Bytes of the blobs in memory.");
    emit(&o, "tensord_blob_store_bytes %llu\n", (unsigned long long)bs.bytes);
    family(&o, "tensord_blob_candidates", "gauge",
           "Uploads kept as unverified fingerprint candidates (server/candidates.h).");
    emit(&o, "tensord_blob_candidates %llu\n", (unsigned long long)cand);
    family(&o, "tensord_blob_candidates_bytes", "gauge", "Bytes those candidates hold.");
    emit(&o, "tensord_blob_candidates_bytes %llu\n", (unsigned long long)cand_bytes);
    family(&o, "tensord_graph_cache_hits_total", "counter", "Graph-cache lookups that found the graph.");
    emit(&o, "tensord_graph_cache_hits_total %llu\n", (unsigned long long)gs.hits);
    family(&o, "tensord_graph_cache_misses_total", "counter", "Graph-cache lookups that did not.");
    emit(&o, "tensord_graph_cache_misses_total %llu\n", (unsigned long long)gs.misses);
    family(&o, "tensord_graph_cache_evictions_total", "counter",
           "Graphs dropped for --graph-cache, --graph-cache-bytes or their tenant's quota.");
    emit(&o, "tensord_graph_cache_evictions_total %llu\n", (unsigned long long)gs.evictions);
    family(&o, "tensord_graph_cache_graphs", "gauge", "Graphs in the cache.");
    emit(&o, "tensord_graph_cache_graphs %llu\n", (unsigned long long)gs.graphs);
    family(&o, "tensord_graph_cache_bytes", "gauge", "Bytes of the graphs in the cache.");
    emit(&o, "tensord_graph_cache_bytes %llu\n", (unsigned long long)gs.bytes);

    /* Shared memory of same-host sessions (server/shm.h); zeros when not offered. */
    td__shm_stats ss = {0};
    if (src->shm != NULL) td__shm_stats_get(src->shm, &ss);
    family(&o, "tensord_shm_regions", "gauge",
           "Sessions holding a shared-memory region (unix socket, README \"Same-host clients\").");
    emit(&o, "tensord_shm_regions %llu\n", (unsigned long long)ss.regions);
    family(&o, "tensord_shm_bytes", "gauge", "Bytes of those regions (charged to their tenants).");
    emit(&o, "tensord_shm_bytes %llu\n", (unsigned long long)ss.bytes);
    family(&o, "tensord_shm_handouts_total", "counter",
           "Region fds handed to their sessions' clients over the side socket.");
    emit(&o, "tensord_shm_handouts_total %llu\n", (unsigned long long)ss.handed);
    family(&o, "tensord_shm_refusals_total", "counter",
           "Side-socket requests refused: wrong secret, unknown session, repeat, garbage, "
           "timeout.");
    emit(&o, "tensord_shm_refusals_total %llu\n", (unsigned long long)ss.refusals);
    /* Request rings of those sessions (server/ring.h); zeros when none was ever open. */
    uint64_t rings = 0, ring_requests = 0;
    td__ring_stats(&rings, &ring_requests);
    family(&o, "tensord_shm_rings", "gauge",
           "Sessions serving a request ring (README \"Same-host clients\", item 5).");
    emit(&o, "tensord_shm_rings %llu\n", (unsigned long long)rings);
    family(&o, "tensord_shm_ring_requests_total", "counter",
           "Requests served through request rings (a fence or small read with the batch "
           "and releases sent with it).");
    emit(&o, "tensord_shm_ring_requests_total %llu\n", (unsigned long long)ring_requests);

    if (o.oom) {
        td__free(o.buf);
        return TD_ENOMEM;
    }
    *outp = o.buf;
    *lenp = o.len;
    return TD_OK;
}

/* ---- the HTTP listener ---- */

#ifdef TD_HAVE_MICROHTTPD
static struct MHD_Daemon *g_daemon;
static td__metrics_sources g_src;

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned code, const char *type,
                             char *body, size_t len, bool owned)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(
        len, body, owned ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_MUST_COPY);
    if (r == NULL) {
        if (owned) td__free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", type);
    enum MHD_Result ret = MHD_queue_response(conn, code, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_size, void **con_cls)
{
    (void)cls;
    (void)version;
    (void)upload_data;
    static const char *text = "text/plain; charset=utf-8";
    if (*con_cls == NULL) { /* first call for this request: headers only */
        *con_cls = (void *)1;
        return MHD_YES;
    }
    if (*upload_size != 0) { /* a body: ignored */
        *upload_size = 0;
        return MHD_YES;
    }
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
        char m[] = "only GET and HEAD\n";
        return reply(conn, MHD_HTTP_METHOD_NOT_ALLOWED, text, m, strlen(m), false);
    }
    if (strcmp(url, "/metrics") == 0) {
        char *body;
        size_t len;
        if (td__metrics_render(&g_src, &body, &len) != TD_OK) {
            char m[] = "out of memory\n";
            return reply(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, text, m, strlen(m), false);
        }
        /* MHD frees the buffer with free(): hand it a copy when td__malloc is hooked. */
        char *copy = malloc(len > 0 ? len : 1);
        if (copy == NULL) {
            td__free(body);
            return MHD_NO;
        }
        memcpy(copy, body, len);
        td__free(body);
        return reply(conn, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", copy, len,
                     true);
    }
    if (strcmp(url, "/healthz") == 0) {
        char m[] = "ok\n";
        return reply(conn, MHD_HTTP_OK, text, m, strlen(m), false);
    }
    if (strcmp(url, "/readyz") == 0) {
        char why[200], m[256];
        bool ok = td__service_serving(g_src.svc, why, sizeof why);
        snprintf(m, sizeof m, "%s\n", ok ? "ready" : why);
        return reply(conn, ok ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE, text, m, strlen(m),
                     false);
    }
    char m[] = "not found: this listener serves /metrics, /healthz and /readyz\n";
    return reply(conn, MHD_HTTP_NOT_FOUND, text, m, strlen(m), false);
}

#define METRICS_CONNECTIONS 512
#define METRICS_PER_IP 64
#define METRICS_IDLE_S 3

td_status td__metrics_open(const char *host, int port, const td__metrics_sources *src,
                           int *bound_port, char *err, size_t errlen)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV | AI_PASSIVE};
    struct addrinfo *res = NULL;
    char ports[16];
    snprintf(ports, sizeof ports, "%d", port);
    int gai = getaddrinfo(host, ports, &hints, &res);
    if (gai != 0 || res == NULL) {
        snprintf(err, errlen, "metrics address %s: cannot resolve the host: %s", host,
                 gai_strerror(gai));
        return TD_EIO;
    }
    g_src = *src;
    /* epoll where there is one (no select() limit on descriptors) */
    unsigned flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ERROR_LOG;
    if (res->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    /* Connections that send nothing must not lock the probes out (a breaker held all 16
     * slots of the old limit with idle sockets, and /healthz failed): at most
     * METRICS_PER_IP from one address, METRICS_CONNECTIONS in all, and METRICS_IDLE_S
     * seconds to send a request (a scrape or probe sends at once). */
    g_daemon = MHD_start_daemon(flags, (uint16_t)port, NULL, NULL, on_request, NULL,
                                MHD_OPTION_SOCK_ADDR, res->ai_addr,
                                MHD_OPTION_CONNECTION_LIMIT, (unsigned)METRICS_CONNECTIONS,
                                MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)METRICS_PER_IP,
                                MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)METRICS_IDLE_S,
                                MHD_OPTION_END);
    freeaddrinfo(res);
    if (g_daemon == NULL) {
        snprintf(err, errlen, "cannot listen for metrics on %s:%d (address in use, not local, "
                              "or no permission)", host, port);
        return TD_EIO;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(g_daemon, MHD_DAEMON_INFO_BIND_PORT);
    *bound_port = info != NULL && info->port != 0 ? (int)info->port : port;
    return TD_OK;
}

void td__metrics_close(void)
{
    if (g_daemon == NULL) return;
    MHD_stop_daemon(g_daemon);
    g_daemon = NULL;
}
#else
td_status td__metrics_open(const char *host, int port, const td__metrics_sources *src,
                           int *bound_port, char *err, size_t errlen)
{
    (void)host;
    (void)port;
    (void)src;
    (void)bound_port;
    snprintf(err, errlen, "this tensord was built without metrics (libmicrohttpd-dev was not "
                          "found at build time; install it and rebuild)");
    return TD_EUNSUPPORTED;
}

void td__metrics_close(void) {}
#endif

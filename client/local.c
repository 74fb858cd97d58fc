/* local.c — the in-process transport ("local:cpu"): an engine session driven directly on
 * the caller's thread. It runs exactly the code the server runs for a session (engine
 * validation, execution, poisoning), which is what makes local and remote results agree
 * bit for bit. */
#include "client/transport.h"
#include "common/log.h"
#include <stdlib.h>
#include <string.h>
#include "common/alloc.h"
#include "engine/device.h"
#include "engine/graph.h"
#include "engine/session.h"
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

/* A td_host_alloc buffer of this transport: whole pages of its own mapping (so that no two
 * buffers share a page the runtime pins), pinned for the session's devices. */
typedef struct local_hostbuf {
    struct local_hostbuf *next;
    void *p;
    size_t len; /* mapped bytes (whole pages) */
    uint32_t pinned;
} local_hostbuf;

typedef struct local_transport {
    td__transport base;
    td__session *session;
    uint64_t batches;
    local_hostbuf *hostbufs;
} local_transport;


static void on_failure(void *arg, uint32_t op_index, td_status st, const char *msg)
{
    local_transport *lt = arg;
    char m[1024];
    snprintf(m, sizeof m, "batch %llu: %s", (unsigned long long)lt->batches, msg);
    (void)op_index;
    td__transport_defer(&lt->base, st, m);
}

static td_status local_submit(td__transport *t, const td__op *ops, size_t n)
{
    local_transport *lt = (local_transport *)t;
    lt->batches++;
    t->stats.batches_sent++;
    td__session_exec(lt->session, ops, n, on_failure, lt);
    return TD_OK;
}

static td_status local_write(td__transport *t, uint64_t id, uint64_t offset, const void *src,
                             size_t nbytes)
{
    local_transport *lt = (local_transport *)t;
    t->stats.bytes_sent += nbytes;
    return td__session_write(lt->session, id, offset, src, nbytes, t->err, sizeof t->err);
}

static td_status local_read(td__transport *t, uint64_t id, uint64_t offset, void *dst,
                            size_t nbytes)
{
    local_transport *lt = (local_transport *)t;
    t->stats.round_trips++;
    td_status s = td__session_sync(lt->session, t->err, sizeof t->err);
    if (s == TD_OK) s = td__session_read(lt->session, id, offset, dst, nbytes, t->err,
                                         sizeof t->err);
    if (s == TD_OK) t->stats.bytes_received += nbytes;
    return s;
}

static td_status local_release(td__transport *t, const uint64_t *ids, size_t n)
{
    td__session_release(((local_transport *)t)->session, ids, n);
    return TD_OK;
}

static td_status local_fence(td__transport *t)
{
    local_transport *lt = (local_transport *)t;
    t->stats.round_trips++;
    td_status s = td__session_sync(lt->session, t->err, sizeof t->err);
    if (s != TD_OK) return s;
    s = t->deferred;
    if (s != TD_OK) {
        snprintf(t->err, sizeof t->err, "%s", t->deferred_msg);
        t->deferred = TD_OK;
    }
    return s;
}

/* td_host_alloc on a local context: pinned memory when a device of the session can pin
 * (CUDA, HIP: its transfers are then one DMA, at the bus's rate, where plain memory goes
 * through the backend's staging buffers), else TD_EUNSUPPORTED (the context gives plain
 * memory: a CPU or Vulkan session gains nothing from pinning). No backend of the session
 * able to pin: TD_EUNSUPPORTED at once, with nothing mapped. The mapping is whole pages,
 * page aligned. */
static td_status local_host_alloc(td__transport *t, size_t nbytes, void **out)
{
    local_transport *lt = (local_transport *)t;
    if (!td__session_can_pin(lt->session)) return TD_EUNSUPPORTED;
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    if (nbytes > SIZE_MAX - page) return TD_EUNSUPPORTED;
    const size_t len = (nbytes + page - 1) / page * page;
    local_hostbuf *b = td__calloc(1, sizeof *b);
    if (b == NULL) return TD_EUNSUPPORTED;
    b->p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (b->p == MAP_FAILED || (b->pinned = td__session_host_pin(lt->session, b->p, len)) == 0) {
        if (b->p != MAP_FAILED) munmap(b->p, len);
        td__free(b);
        return TD_EUNSUPPORTED;
    }
    b->len = len;
    b->next = lt->hostbufs;
    lt->hostbufs = b;
    *out = b->p;
    return TD_OK;
}

static void hostbuf_free(local_transport *lt, local_hostbuf *b)
{
    td__session_host_unpin(lt->session, b->pinned, b->p);
    munmap(b->p, b->len);
    td__free(b);
}

static td_status local_host_free(td__transport *t, void *p)
{
    local_transport *lt = (local_transport *)t;
    for (local_hostbuf **pp = &lt->hostbufs; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->p != p) continue;
        local_hostbuf *b = *pp;
        *pp = b->next;
        /* the session's transfers are synchronous: none from or into b is running */
        hostbuf_free(lt, b);
        return TD_OK;
    }
    return TD_EINVAL;
}

static void local_close(td__transport *t)
{
    local_transport *lt = (local_transport *)t;
    /* transfers finish before they return: nothing is moving from or into the buffers */
    while (lt->hostbufs != NULL) {
        local_hostbuf *b = lt->hostbufs;
        lt->hostbufs = b->next;
        hostbuf_free(lt, b);
    }
    td__session_destroy(lt->session);
    td__free(lt);
}

static td_status local_graph_run(td__transport *t, const td__graph *g, const uint64_t *in_ids,
                                 size_t n_in, const uint64_t *out_ids, size_t n_out)
{
    local_transport *lt = (local_transport *)t;
    lt->batches++;
    t->stats.batches_sent++;
    td__graph_exec(lt->session, g, in_ids, n_in, out_ids, n_out, on_failure, lt);
    return TD_OK;
}

static td_status local_to_device(td__transport *t, uint64_t id, uint64_t out, uint32_t device)
{
    local_transport *lt = (local_transport *)t;
    char err[512];
    td_status st = td__session_to_device(lt->session, id, out, device, err, sizeof err);
    if (st != TD_OK && st != TD_EPOISONED) td__transport_defer(t, st, err);
    return TD_OK;
}

/* "auto" or a GPU kind in-process: the candidate with the most free memory (no other
 * sessions to weigh), the first on a tie, leaving out the session's `n_extra` further
 * devices; NULL when none. */
static td__device *place_local(const char *want, td__device *const *extra, int n_extra)
{
    td__device *best = NULL;
    uint64_t best_free = 0;
    for (int i = 0; i < td__device_count(); i++) {
        td__device *d = td__device_at(i);
        bool taken = false;
        for (int k = 0; k < n_extra; k++) taken = taken || extra[k] == d;
        if (taken || !td__device_place_candidate(d, want)) continue;
        uint64_t total = 0, free_bytes = 0;
        if (d->backend->memory_info == NULL ||
            d->backend->memory_info(d, &total, &free_bytes) != TD_OK)
            free_bytes = 0;
        if (best == NULL || free_bytes > best_free) {
            best = d;
            best_free = free_bytes;
        }
    }
    return best;
}

static const td__transport_vt local_vt = {
    .submit = local_submit,
    .write = local_write,
    .read = local_read,
    .release = local_release,
    .fence = local_fence,
    .close = local_close,
    .graph_run = local_graph_run,
    .to_device = local_to_device,
    .host_alloc = local_host_alloc,
    .host_free = local_host_free,
};

td_status td__local_open(const char *device, td__transport **out, char *err, size_t errlen)
{
    /* A library should not chatter on its user's stderr: backend discovery notes ("backend
     * cuda: no devices") are info lines, shown only when TENSORD_LOG_LEVEL asks for them. */
    const char *lvl = getenv("TENSORD_LOG_LEVEL");
    td__log_set_level(lvl == NULL                   ? TD_LOG_WARN
                      : strcmp(lvl, "debug") == 0 ? TD_LOG_DEBUG
                      : strcmp(lvl, "info") == 0  ? TD_LOG_INFO
                      : strcmp(lvl, "error") == 0 ? TD_LOG_ERROR
                                                  : TD_LOG_WARN);
    td__log_set_prefix("libtensord");
    td_status s = td__devices_init(err, errlen);
    if (s != TD_OK) return s;
    char first[64], more[TD_TRANSPORT_MAX_DEVICES - 1][32];
    int n_more = td__device_list_split(device, first, more, err, errlen);
    if (n_more < 0) return TD_EINVAL;
    device = first;
    td__device *extra[TD_TRANSPORT_MAX_DEVICES - 1];
    td__device *dev = NULL;
    bool extras_ok = true;
    for (int i = 0; i < n_more && extras_ok; i++) {
        if ((extra[i] = td__device_find(more[i])) == NULL) {
            device = more[i];
            extras_ok = false;
        }
    }
    if (extras_ok)
        dev = td__device_is_placement(device) ? place_local(device, extra, n_more)
                                              : td__device_find(device);
    if (dev == NULL) {
        char names[256] = "";
        size_t o = 0;
        for (int i = 0; i < td__device_count() && o < sizeof names; i++)
            o += (size_t)snprintf(names + o, sizeof names - o, "%s%s", i ? ", " : "",
                                  td__device_at(i)->name);
        snprintf(err, errlen, "unknown device '%s'; this process has: %s", device, names);
        return TD_EINVAL;
    }
    local_transport *lt = td__calloc(1, sizeof *lt);
    if (lt == NULL) return TD_ENOMEM;
    s = td__session_create(dev, NULL, &lt->session);
    if (s != TD_OK) {
        snprintf(err, errlen, "cannot create a session on %s", dev->name);
        td__free(lt);
        return s;
    }
    lt->base.vt = &local_vt;
    snprintf(lt->base.device, sizeof lt->base.device, "%s", dev->name);
    snprintf(lt->base.devices[0], sizeof lt->base.devices[0], "%s", dev->name);
    lt->base.n_devices = 1;
    for (int i = 0; i < n_more; i++) {
        uint32_t index;
        s = td__session_add_device(lt->session, extra[i], &index, err, errlen);
        if (s != TD_OK) {
            td__session_destroy(lt->session);
            td__free(lt);
            return s;
        }
        snprintf(lt->base.devices[index], sizeof lt->base.devices[index], "%s", extra[i]->name);
        lt->base.n_devices = index + 1;
    }
    *out = &lt->base;
    return TD_OK;
}

/* health.c — grpc.health.v1.Health (see health.h).
 *
 * Check is one batch (metadata, response, status, wait for the close), like GetInfo.
 * Watch is a small state machine per call: a RECV_CLOSE_ON_SERVER operation that tells us
 * when the client goes away, and at most one send at a time (gRPC's rule), each sending the
 * newest status when it differs from the last one sent. Watchers are kept in a list under
 * one mutex; status changes are rare (start, drain, file-descriptor trouble), so the list
 * is walked only on td__health_update.
 */
#include "server/health.h"
#include "server/auth.h"
#include "server/unary.h"

#include "common/alloc.h"
#include "common/log.h"
#include "wire_health.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

typedef struct watch {
    td__tag send_tag, close_tag;
    struct watch *prev, *next; /* h->watches, under h->mu */
    td__health *h;
    grpc_call *call;
    atomic_int refs; /* the list (until the close) and a send in flight */
    /* Under h->mu: */
    bool known;      /* the service name is one we answer for */
    bool sending;    /* a send is in flight */
    bool md_sent;
    bool finished;   /* the final status went out (shutdown) */
    bool closed;     /* RECV_CLOSE_ON_SERVER completed */
    int sent;        /* last status sent, -1 before the first */
    grpc_byte_buffer *bb;
    grpc_slice details;
    int cancelled;
} watch;

struct td__health {
    td__service *svc;
    pthread_mutex_t mu;
    watch *watches;
};

static enum td__health_status current(td__health *h)
{
    return td__service_serving(h->svc, NULL, 0) ? TD_HEALTH_SERVING : TD_HEALTH_NOT_SERVING;
}

static bool known_service(const char *name)
{
    return name[0] == '\0' || strcmp(name, TD_HEALTH_SERVICE_NAME) == 0;
}

td__health *td__health_create(td__service *svc)
{
    td__health *h = td__calloc(1, sizeof *h);
    if (h == NULL) return NULL;
    h->svc = svc;
    pthread_mutex_init(&h->mu, NULL);
    return h;
}

void td__health_destroy(td__health *h)
{
    if (h == NULL) return;
    pthread_mutex_destroy(&h->mu);
    td__free(h);
}

/* ---- Check ---- */

void td__health_check(td__health *h, grpc_call *call, grpc_byte_buffer *request)
{
    char service[TD_HEALTH_SERVICE_MAX + 1], msg[TD_HEALTH_SERVICE_MAX + 128];
    grpc_status_code code = GRPC_STATUS_OK;
    grpc_byte_buffer *response = NULL;
    msg[0] = '\0';
    td_status st = td__wire_health_request_decode(request, service, sizeof service, msg,
                                                  sizeof msg);
    if (st != TD_OK) {
        code = st == TD_ENOMEM ? GRPC_STATUS_RESOURCE_EXHAUSTED : GRPC_STATUS_INVALID_ARGUMENT;
    } else if (!known_service(service)) {
        code = GRPC_STATUS_NOT_FOUND;
        snprintf(msg, sizeof msg, "unknown service '%s' (this server answers for '' and '%s')",
                 service, TD_HEALTH_SERVICE_NAME);
    } else if (td__wire_health_response_encode(current(h), &response) != TD_OK) {
        code = GRPC_STATUS_RESOURCE_EXHAUSTED;
        snprintf(msg, sizeof msg, "out of memory");
    }
    td__srv_unary_reply(h->svc, call, response, code, msg, "health check");
}

/* ---- Watch ---- */

static void watch_unref(watch *w)
{
    if (atomic_fetch_sub(&w->refs, 1) != 1) return;
    td__service *svc = w->h->svc;
    if (w->bb) grpc_byte_buffer_destroy(w->bb);
    grpc_slice_unref(w->details);
    grpc_call_unref(w->call);
    td__free(w);
    td__service_call_end(svc);
}

/* Caller holds h->mu. Start the next send when one is due: the newest status if it differs
 * from the last one sent, or, once shutting down and the newest status was sent, the final
 * status. */
static void kick_locked(watch *w)
{
    if (w->sending || w->closed || w->finished) return;
    td__health *h = w->h;
    int want = w->known ? (int)current(h) : TD_HEALTH_SERVICE_UNKNOWN;
    bool ending = td__service_shutting_down(h->svc) && w->sent == want;
    if (want == w->sent && !ending) return;
    grpc_op ops[2];
    memset(ops, 0, sizeof ops);
    size_t n = 0;
    if (!w->md_sent) ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    if (ending) {
        w->details = grpc_slice_from_static_string("server is shutting down");
        ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
        ops[n].data.send_status_from_server.status = GRPC_STATUS_UNAVAILABLE;
        ops[n++].data.send_status_from_server.status_details = &w->details;
    } else {
        if (w->bb) grpc_byte_buffer_destroy(w->bb);
        w->bb = NULL;
        if (td__wire_health_response_encode((enum td__health_status)want, &w->bb) != TD_OK) {
            grpc_call_cancel_with_status(w->call, GRPC_STATUS_RESOURCE_EXHAUSTED,
                                         "out of memory", NULL);
            return;
        }
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = w->bb;
    }
    atomic_fetch_add(&w->refs, 1);
    td__service_work_add(h->svc, 1);
    w->sending = true;
    td__tag_arm(&w->send_tag);
    grpc_call_error e = grpc_call_start_batch(w->call, ops, n, &w->send_tag, NULL);
    if (e != GRPC_CALL_OK) {
        td__log(TD_LOG_ERROR, "health watch: cannot start a send (grpc error %d)", (int)e);
        w->sending = false;
        td__service_work_add(h->svc, -1);
        atomic_fetch_sub(&w->refs, 1); /* the list still holds one */
        grpc_call_cancel(w->call, NULL);
        return;
    }
    w->md_sent = true;
    if (ending)
        w->finished = true;
    else
        w->sent = want;
}

static void watch_sent(td__tag *tag, bool ok)
{
    watch *w = (watch *)((char *)tag - offsetof(watch, send_tag));
    td__health *h = w->h;
    pthread_mutex_lock(&h->mu);
    w->sending = false;
    if (ok)
        kick_locked(w);
    else
        w->finished = true; /* the call is over: send nothing more */
    pthread_mutex_unlock(&h->mu);
    td__service_work_add(h->svc, -1);
    watch_unref(w);
}

static void watch_closed(td__tag *tag, bool ok)
{
    (void)ok;
    watch *w = (watch *)((char *)tag - offsetof(watch, close_tag));
    td__health *h = w->h;
    pthread_mutex_lock(&h->mu);
    w->closed = true;
    if (w->prev)
        w->prev->next = w->next;
    else
        h->watches = w->next;
    if (w->next) w->next->prev = w->prev;
    pthread_mutex_unlock(&h->mu);
    watch_unref(w);
}

void td__health_watch(td__health *h, grpc_call *call, grpc_byte_buffer *request)
{
    char service[TD_HEALTH_SERVICE_MAX + 1], msg[256];
    td_status st = td__wire_health_request_decode(request, service, sizeof service, msg,
                                                  sizeof msg);
    if (st != TD_OK) {
        td__srv_reject(h->svc, call,
                       st == TD_ENOMEM ? GRPC_STATUS_RESOURCE_EXHAUSTED
                                       : GRPC_STATUS_INVALID_ARGUMENT,
                       msg);
        return;
    }
    watch *w = td__calloc(1, sizeof *w);
    if (w == NULL) {
        grpc_call_cancel_with_status(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory",
                                     NULL);
        grpc_call_unref(call);
        return;
    }
    td__service_call_begin(h->svc);
    w->send_tag.fn = watch_sent;
    w->close_tag.fn = watch_closed;
    w->h = h;
    w->call = call;
    w->known = known_service(service);
    w->sent = -1;
    w->details = grpc_empty_slice();
    atomic_init(&w->refs, 1);
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    op.data.recv_close_on_server.cancelled = &w->cancelled;
    pthread_mutex_lock(&h->mu);
    td__tag_arm(&w->close_tag);
    grpc_call_error e = grpc_call_start_batch(call, &op, 1, &w->close_tag, NULL);
    if (e != GRPC_CALL_OK) {
        pthread_mutex_unlock(&h->mu);
        td__log(TD_LOG_ERROR, "health watch: cannot start (grpc error %d)", (int)e);
        grpc_call_cancel(call, NULL);
        watch_unref(w);
        return;
    }
    w->next = h->watches;
    if (h->watches) h->watches->prev = w;
    h->watches = w;
    kick_locked(w);
    pthread_mutex_unlock(&h->mu);
}

void td__health_update(td__health *h)
{
    if (h == NULL) return;
    pthread_mutex_lock(&h->mu);
    for (watch *w = h->watches; w != NULL; w = w->next) kick_locked(w);
    pthread_mutex_unlock(&h->mu);
}

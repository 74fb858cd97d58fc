/* info.c — td_server_info_get and td_server_ping: unary GetInfo calls without a session.
 *
 * Used by tensorctl and by programs that want to pick a server or device before connecting.
 * Each function opens its own channel (through the client's one call helper,
 * client/call.h, so limits, reconnect behaviour and error messages match the session
 * transport), and ping reuses one channel for all its round trips so that what it measures
 * is the call, not the connect.
 */
#include "client/call.h"
#include "client/uri.h"
#include "client/security.h"
#include "common/alloc.h"
#include "proto/wire.h"
#include "tensord.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define INFO_TIMEOUT_MS 5000

/* Provided by client/context.c: sets the thread's td_connect_error() message. */
void td__set_connect_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Turn an address into a gRPC target: "HOST:PORT" stays; "tensord://HOST:PORT[/DEVICE]"
 * loses its scheme and path; "unix:PATH" stays, except that a trailing "/DEVICE" (as in a
 * td_connect URI) is dropped when PATH does not exist but its parent is a socket. */
static td_status info_target(const char *address, char *target, size_t cap, bool *tls)
{
    *tls = false;
    if (address == NULL || address[0] == '\0') {
        td__set_connect_error("no server address given");
        return TD_EINVAL;
    }
    size_t alen = strlen(address);
    if (alen >= cap) {
        td__set_connect_error("server address too long (%zu bytes)", alen);
        return TD_EINVAL;
    }
    if (strncmp(address, "unix:", 5) == 0) {
        if (address[5] == '\0') {
            td__set_connect_error("'%s': unix socket path missing", address);
            return TD_EINVAL;
        }
        /* the socket path as td_connect reads it (client/uri.h): a last component that
         * looks like a device list is one, anything else is part of the path */
        char dev[64];
        td_status st = td__uri_device_list(address, dev);
        if (st != TD_OK) return st;
        memcpy(target, address, alen + 1);
        char *slash = strrchr(target + 5, '/');
        if (dev[0] != '\0' && slash != NULL) *slash = '\0';
        return TD_OK;
    }
    const char *hostport = address;
    if (strncmp(address, "tensord://", 10) == 0) {
        hostport = address + 10;
    } else if (strncmp(address, "tensords://", 11) == 0) {
        hostport = address + 11;
        *tls = true;
    } else if (strstr(address, "://") != NULL || strncmp(address, "local:", 6) == 0) {
        td__set_connect_error("'%s': expected HOST:PORT, unix:PATH or tensord://HOST:PORT",
                              address);
        return TD_EINVAL;
    }
    size_t n = strcspn(hostport, "/");
    if (n == 0) {
        td__set_connect_error("'%s': host missing", address);
        return TD_EINVAL;
    }
    /* The port follows the last ':' after any bracketed IPv6 host. */
    const char *host_end = hostport;
    if (hostport[0] == '[') {
        const char *rb = memchr(hostport, ']', n);
        if (rb == NULL) {
            td__set_connect_error("'%s': unterminated '[' in the host", address);
            return TD_EINVAL;
        }
        host_end = rb;
    }
    const char *colon = NULL;
    for (const char *p = host_end; p < hostport + n; p++)
        if (*p == ':') colon = p;
    if (colon == NULL || colon + 1 == hostport + n) {
        td__set_connect_error("'%s': port missing (expected HOST:PORT)", address);
        return TD_EINVAL;
    }
    for (const char *p = colon + 1; p < hostport + n; p++) {
        if (*p < '0' || *p > '9') {
            td__set_connect_error("'%s': port is not a number", address);
            return TD_EINVAL;
        }
    }
    memcpy(target, hostport, n);
    target[n] = '\0';
    return TD_OK;
}

static td_status status_from_grpc(grpc_status_code c)
{
    switch (c) {
    case GRPC_STATUS_DEADLINE_EXCEEDED:
        return TD_ETIMEOUT;
    case GRPC_STATUS_INVALID_ARGUMENT:
        return TD_EINVAL;
    case GRPC_STATUS_UNAUTHENTICATED:
    case GRPC_STATUS_PERMISSION_DENIED:
        return TD_EUNAUTHENTICATED;
    case GRPC_STATUS_NOT_FOUND:
        return TD_ENOTFOUND;
    case GRPC_STATUS_UNIMPLEMENTED:
    case GRPC_STATUS_FAILED_PRECONDITION:
    case GRPC_STATUS_INTERNAL:
    case GRPC_STATUS_UNKNOWN:
        return TD_EPROTO;
    default:
        return TD_EUNAVAILABLE;
    }
}

typedef struct info_channel {
    char target[512];
    bool open; /* grpc_init ran and c is initialised */
    td__cli_call c;
    td__wire_scratch scratch;
    td__client_sec sec;
} info_channel;

static td_status info_channel_open(info_channel *ic, const char *address,
                                   const td_options *opts, int timeout_ms)
{
    memset(ic, 0, sizeof *ic);
    bool tls;
    td_status st = info_target(address, ic->target, sizeof ic->target, &tls);
    if (st != TD_OK) return st;
    grpc_init();
    ic->open = true;
    td__cli_call_init(&ic->c);
    char err[768];
    st = td__client_sec_init(&ic->sec, tls, opts, err, sizeof err);
    if (st == TD_OK)
        st = td__cli_channel_open(&ic->c, ic->target, &ic->sec, 0, timeout_ms, err, sizeof err);
    if (st != TD_OK) td__set_connect_error("%s", err);
    return st;
}

static void info_channel_close(info_channel *ic)
{
    if (!ic->open) return; /* the address did not parse: grpc_init never ran */
    td__cli_call_fini(&ic->c);
    td__wire_scratch_fini(&ic->scratch);
    td__client_sec_fini(&ic->sec);
    grpc_shutdown();
}

/* One unary round trip of `method` (named `name` in messages): `req` out, a `desc` reply
 * back into *out (free with protobuf_c_message_free_unpacked). */
static td_status unary_call(info_channel *ic, const char *method, const char *name,
                            const ProtobufCMessage *req, const ProtobufCMessageDescriptor *desc,
                            int timeout_ms, ProtobufCMessage **out)
{
    grpc_byte_buffer *send_bb = NULL;
    td_status st = td__wire_encode(req, NULL, &send_bb);
    if (st != TD_OK) {
        td__set_connect_error("out of memory");
        return st;
    }
    grpc_byte_buffer *recv_bb = NULL;
    if (!td__cli_call_unary(&ic->c, method, td__cli_after_ms(timeout_ms), send_bb,
                            ic->sec.md, ic->sec.n_md, &recv_bb)) {
        td__set_connect_error("cannot start a %s call to %s", name, ic->target);
        return TD_EUNAVAILABLE;
    }
    grpc_status_code code = ic->c.status;
    grpc_slice details = ic->c.details;
    if (code == GRPC_STATUS_DEADLINE_EXCEEDED) {
        td__set_connect_error("no reply from tensord at %s within %d ms", ic->target,
                              timeout_ms);
        st = TD_ETIMEOUT;
    } else if (code == GRPC_STATUS_UNAVAILABLE && ic->sec.tls) {
        char why[512];
        td__client_sec_handshake_msg(ic->target, why, sizeof why);
        td__set_connect_error("%s", why);
        st = TD_EUNAVAILABLE;
    } else if (code == GRPC_STATUS_UNIMPLEMENTED && strcmp(method, TD_METHOD_GETINFO) == 0) {
        td__set_connect_error("the server at %s is not tensord: it does not serve %s (%.*s)",
                              ic->target, method, (int)GRPC_SLICE_LENGTH(details),
                              (const char *)GRPC_SLICE_START_PTR(details));
        st = TD_EPROTO;
    } else if (code != GRPC_STATUS_OK) {
        td__set_connect_error("%s on tensord at %s failed: %.*s", name, ic->target,
                              (int)GRPC_SLICE_LENGTH(details),
                              (const char *)GRPC_SLICE_START_PTR(details));
        st = status_from_grpc(code);
    } else if (recv_bb == NULL) {
        td__set_connect_error("tensord at %s sent no %s reply", ic->target, name);
        st = TD_EPROTO;
    } else {
        char err[256];
        ProtobufCMessage *m = NULL;
        st = td__wire_decode(recv_bb, desc, &ic->scratch, &m, NULL, NULL, err, sizeof err);
        if (st != TD_OK)
            td__set_connect_error("bad %s reply from tensord at %s: %s", name, ic->target, err);
        else
            *out = m;
    }
    if (recv_bb != NULL) grpc_byte_buffer_destroy(recv_bb);
    return st;
}

static td_status info_call(info_channel *ic, int timeout_ms, Tensord__V1__InfoResponse **out)
{
    Tensord__V1__InfoRequest req = TENSORD__V1__INFO_REQUEST__INIT;
    ProtobufCMessage *m = NULL;
    td_status st = unary_call(ic, TD_METHOD_GETINFO, "GetInfo", &req.base,
                              &tensord__v1__info_response__descriptor, timeout_ms, &m);
    if (st == TD_OK) *out = (Tensord__V1__InfoResponse *)m;
    return st;
}

static void copy_str(char *dst, size_t cap, const char *src)
{
    snprintf(dst, cap, "%s", src != NULL ? src : "");
}

td_status td_server_info_get(const char *address, int timeout_ms, td_server_info *out)
{
    td_options o;
    memset(&o, 0, sizeof o);
    o.connect_timeout_ms = timeout_ms;
    return td_server_info_get_opts(address, &o, out);
}

td_status td_server_info_get_opts(const char *address, const td_options *opts,
                                  td_server_info *out)
{
    int timeout_ms = opts != NULL ? opts->connect_timeout_ms : 0;
    if (out == NULL) {
        td__set_connect_error("td_server_info_get: out is NULL");
        return TD_EINVAL;
    }
    if (timeout_ms <= 0) timeout_ms = INFO_TIMEOUT_MS;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    info_channel ic;
    td_status st = info_channel_open(&ic, address, opts, timeout_ms);
    Tensord__V1__InfoResponse *resp = NULL;
    if (st == TD_OK) {
        /* One budget for connect and call together. */
        struct timespec t1;
        clock_gettime(CLOCK_MONOTONIC, &t1);
        long spent = (long)(t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
        int left = spent < timeout_ms ? timeout_ms - (int)spent : 1;
        st = info_call(&ic, left, &resp);
    }
    if (st == TD_OK) {
        td_server_info info;
        memset(&info, 0, sizeof info);
        info.protocol_min = resp->protocol_min;
        info.protocol_max = resp->protocol_max;
        copy_str(info.server_version, sizeof info.server_version, resp->server_version);
        size_t nd = resp->n_devices;
        size_t max = sizeof info.devices / sizeof info.devices[0];
        if (nd > max) nd = max;
        info.n_devices = (int)nd;
        for (size_t i = 0; i < nd; i++) {
            const Tensord__V1__Device *d = resp->devices[i];
            td_device_info *o = &info.devices[i];
            copy_str(o->name, sizeof o->name, d->name);
            copy_str(o->kind, sizeof o->kind, d->kind);
            copy_str(o->description, sizeof o->description, d->description);
            o->memory_total = d->memory_total;
            o->memory_free = d->memory_free;
        }
        if (resp->limits != NULL) {
            info.max_message_bytes = resp->limits->max_message_bytes;
            info.chunk_bytes = resp->limits->chunk_bytes;
            info.max_tensor_bytes = resp->limits->max_tensor_bytes;
        }
        info.sessions = resp->sessions;
        info.tensors = resp->tensors;
        info.bytes_in_use = resp->bytes_in_use;
        *out = info;
        tensord__v1__info_response__free_unpacked(resp, NULL);
    }
    info_channel_close(&ic);
    return st;
}

td_status td_server_ping(const char *address, int n, int timeout_ms, uint64_t *rtt_ns)
{
    td_options o;
    memset(&o, 0, sizeof o);
    o.connect_timeout_ms = timeout_ms;
    return td_server_ping_opts(address, &o, n, rtt_ns);
}

td_status td_server_ping_opts(const char *address, const td_options *opts, int n,
                              uint64_t *rtt_ns)
{
    int timeout_ms = opts != NULL ? opts->connect_timeout_ms : 0;
    if (n <= 0 || rtt_ns == NULL) {
        td__set_connect_error("td_server_ping: need n > 0 (got %d) and an array for the times",
                              n);
        return TD_EINVAL;
    }
    if (timeout_ms <= 0) timeout_ms = INFO_TIMEOUT_MS;
    info_channel ic;
    td_status st = info_channel_open(&ic, address, opts, timeout_ms);
    for (int i = 0; st == TD_OK && i < n; i++) {
        struct timespec t0, t1;
        Tensord__V1__InfoResponse *resp = NULL;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        st = info_call(&ic, timeout_ms, &resp);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if (st == TD_OK) {
            tensord__v1__info_response__free_unpacked(resp, NULL);
            int64_t ns =
                (int64_t)(t1.tv_sec - t0.tv_sec) * 1000000000 + (t1.tv_nsec - t0.tv_nsec);
            rtt_ns[i] = ns > 0 ? (uint64_t)ns : 0;
        }
    }
    info_channel_close(&ic);
    return st;
}

/* ---- administration ---- */

/* Open a channel on the budget of opts->connect_timeout_ms (default INFO_TIMEOUT_MS) and
 * run one admin call on what is left of it. */
static td_status admin_call(const char *address, const td_options *opts, const char *method,
                            const char *name, const ProtobufCMessage *req,
                            const ProtobufCMessageDescriptor *desc, ProtobufCMessage **out)
{
    int timeout_ms = opts != NULL ? opts->connect_timeout_ms : 0;
    if (timeout_ms <= 0) timeout_ms = INFO_TIMEOUT_MS;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    info_channel ic;
    td_status st = info_channel_open(&ic, address, opts, timeout_ms);
    if (st == TD_OK) {
        clock_gettime(CLOCK_MONOTONIC, &t1);
        long spent = (long)(t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
        int left = spent < timeout_ms ? timeout_ms - (int)spent : 1;
        st = unary_call(&ic, method, name, req, desc, left, out);
    }
    info_channel_close(&ic);
    return st;
}

td_status td_server_sessions_list(const char *address, const td_options *opts,
                                  td_session_info **out, size_t *n, uint64_t *total)
{
    if (out == NULL || n == NULL) {
        td__set_connect_error("td_server_sessions_list: out and n must not be NULL");
        return TD_EINVAL;
    }
    Tensord__V1__ListSessionsRequest req = TENSORD__V1__LIST_SESSIONS_REQUEST__INIT;
    ProtobufCMessage *m = NULL;
    td_status st = admin_call(address, opts, TD_METHOD_LIST_SESSIONS, "ListSessions", &req.base,
                              &tensord__v1__list_sessions_response__descriptor, &m);
    if (st != TD_OK) return st;
    Tensord__V1__ListSessionsResponse *r = (Tensord__V1__ListSessionsResponse *)m;
    size_t k = r->n_sessions;
    td_session_info *v = calloc(k > 0 ? k : 1, sizeof *v);
    if (v == NULL) {
        protobuf_c_message_free_unpacked(m, NULL);
        td__set_connect_error("out of memory for %zu sessions", k);
        return TD_ENOMEM;
    }
    for (size_t i = 0; i < k; i++) {
        const Tensord__V1__SessionInfo *w = r->sessions[i];
        v[i].id = w->id;
        copy_str(v[i].tenant, sizeof v[i].tenant, w->tenant);
        copy_str(v[i].device, sizeof v[i].device, w->device);
        copy_str(v[i].peer, sizeof v[i].peer, w->peer);
        v[i].bytes = w->bytes;
        v[i].age_ms = w->age_ms;
        v[i].ops = w->ops;
    }
    *out = v;
    *n = k;
    if (total != NULL) *total = r->total > k ? r->total : k;
    protobuf_c_message_free_unpacked(m, NULL);
    return TD_OK;
}

td_status td_server_session_kill(const char *address, const td_options *opts,
                                 uint64_t session_id)
{
    Tensord__V1__KillSessionRequest req = TENSORD__V1__KILL_SESSION_REQUEST__INIT;
    req.id = session_id;
    ProtobufCMessage *m = NULL;
    td_status st = admin_call(address, opts, TD_METHOD_KILL_SESSION, "KillSession", &req.base,
                              &tensord__v1__kill_session_response__descriptor, &m);
    if (m != NULL) protobuf_c_message_free_unpacked(m, NULL);
    return st;
}

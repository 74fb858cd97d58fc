/* admin.c — ListSessions and KillSession (see admin.h).
 *
 * Both are one unary answer built from the service's live-session list
 * (td__service_sessions_list / td__service_session_kill); nothing here holds state.
 */
#include "server/admin.h"
#include "server/unary.h"

#include "common/alloc.h"
#include "common/log.h"
#include "wire.h"
#include "wire_limits.h"

#include <stdio.h>
#include <string.h>

static const char *method_name(enum td__admin_method m)
{
    return m == TD_ADMIN_LIST_SESSIONS ? "ListSessions" : "KillSession";
}

static grpc_status_code list_sessions(td__service *s, grpc_byte_buffer **out, char *err,
                                      size_t errlen)
{
    td__session_row *rows = td__calloc(TD_MAX_LIST_SESSIONS, sizeof *rows);
    Tensord__V1__SessionInfo *infos = td__calloc(TD_MAX_LIST_SESSIONS, sizeof *infos);
    Tensord__V1__SessionInfo **ptrs = td__calloc(TD_MAX_LIST_SESSIONS, sizeof *ptrs);
    grpc_status_code code = GRPC_STATUS_OK;
    if (rows == NULL || infos == NULL || ptrs == NULL) {
        snprintf(err, errlen, "out of memory");
        code = GRPC_STATUS_RESOURCE_EXHAUSTED;
        goto out;
    }
    size_t total = td__service_sessions_list(s, rows, TD_MAX_LIST_SESSIONS);
    size_t n = total < TD_MAX_LIST_SESSIONS ? total : TD_MAX_LIST_SESSIONS;
    for (size_t i = 0; i < n; i++) {
        Tensord__V1__SessionInfo init = TENSORD__V1__SESSION_INFO__INIT;
        infos[i] = init;
        infos[i].id = rows[i].id;
        infos[i].tenant = rows[i].tenant;
        infos[i].device = rows[i].device;
        infos[i].peer = rows[i].peer;
        infos[i].bytes = rows[i].bytes;
        infos[i].age_ms = rows[i].age_ms;
        infos[i].ops = rows[i].ops;
        ptrs[i] = &infos[i];
    }
    Tensord__V1__ListSessionsResponse r = TENSORD__V1__LIST_SESSIONS_RESPONSE__INIT;
    r.n_sessions = n;
    r.sessions = ptrs;
    r.total = total;
    if (td__wire_encode(&r.base, NULL, out) != TD_OK) {
        snprintf(err, errlen, "out of memory");
        code = GRPC_STATUS_RESOURCE_EXHAUSTED;
    }
out:
    td__free(ptrs);
    td__free(infos);
    td__free(rows);
    return code;
}

static grpc_status_code kill_session(td__service *s, const Tensord__V1__KillSessionRequest *rq,
                                     const td__quota *quota, grpc_byte_buffer **out, char *err,
                                     size_t errlen)
{
    if (rq->id == 0 || rq->id > (uint64_t)INT64_MAX) {
        snprintf(err, errlen, "KillSession: session id %llu is not valid (ids are 1..2^63-1)",
                 (unsigned long long)rq->id);
        return GRPC_STATUS_INVALID_ARGUMENT;
    }
    char why[128];
    snprintf(why, sizeof why, "session ended by an administrator (tenant '%s')", quota->name);
    if (!td__service_session_kill(s, rq->id, GRPC_STATUS_UNAVAILABLE, why)) {
        snprintf(err, errlen, "KillSession: no open session %llu", (unsigned long long)rq->id);
        return GRPC_STATUS_NOT_FOUND;
    }
    Tensord__V1__KillSessionResponse r = TENSORD__V1__KILL_SESSION_RESPONSE__INIT;
    if (td__wire_encode(&r.base, NULL, out) != TD_OK) {
        snprintf(err, errlen, "out of memory");
        return GRPC_STATUS_RESOURCE_EXHAUSTED;
    }
    return GRPC_STATUS_OK;
}

void td__admin_call(td__service *s, td__tenants *tenants, enum td__admin_method m,
                    grpc_call *call, grpc_byte_buffer *request, const td__quota *quota)
{
    char err[512] = "";
    grpc_byte_buffer *response = NULL;
    grpc_status_code code = GRPC_STATUS_OK;
    if (!td__tenants_is_admin(tenants, quota)) {
        snprintf(err, sizeof err, "%s needs the admin role: tenant '%s' does not have "
                                          "role=admin in the server's tokens file%s",
                 method_name(m), quota->name,
                 td__tenants_enabled(tenants) ? "" : " (this server has no tokens file)");
        td__log(TD_LOG_WARN, "%s refused: %s", method_name(m), err);
        td__srv_unary_reply(s, call, NULL, GRPC_STATUS_PERMISSION_DENIED, err, method_name(m));
        return;
    }
    const ProtobufCMessageDescriptor *desc = m == TD_ADMIN_LIST_SESSIONS
                                                 ? &tensord__v1__list_sessions_request__descriptor
                                                 : &tensord__v1__kill_session_request__descriptor;
    ProtobufCMessage *req = NULL;
    td__wire_scratch scratch = {0};
    td_status st = TD_OK;
    if (request != NULL)
        st = td__wire_decode(request, desc, &scratch, &req, NULL, NULL, err, sizeof err);
    else
        req = protobuf_c_message_unpack(desc, NULL, 0, (const uint8_t *)"");
    if (st != TD_OK || req == NULL) {
        code = st == TD_ENOMEM ? GRPC_STATUS_RESOURCE_EXHAUSTED : GRPC_STATUS_INVALID_ARGUMENT;
        if (err[0] == '\0') snprintf(err, sizeof err, "%s: malformed request", method_name(m));
    } else if (m == TD_ADMIN_LIST_SESSIONS) {
        code = list_sessions(s, &response, err, sizeof err);
    } else {
        code = kill_session(s, (const Tensord__V1__KillSessionRequest *)req, quota, &response,
                            err, sizeof err);
        if (code == GRPC_STATUS_OK)
            td__log(TD_LOG_INFO, "KillSession: session %llu ended at the request of tenant '%s'",
                    (unsigned long long)((const Tensord__V1__KillSessionRequest *)req)->id,
                    quota->name);
    }
    if (req != NULL) protobuf_c_message_free_unpacked(req, NULL);
    td__wire_scratch_fini(&scratch);
    td__srv_unary_reply(s, call, response, code, code == GRPC_STATUS_OK ? "" : err,
                        method_name(m));
}

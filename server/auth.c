/* auth.c — authenticate each call before it reaches GetInfo or Session (see auth.h).
 *
 * Done here, when the call is handed to us, rather than in a gRPC auth metadata
 * processor: the request metadata is already in hand, the failure answer is an ordinary
 * status with our message, and nothing runs on gRPC's internal threads.
 */
#include "server/auth.h"
#include "server/unary.h"

#include "common/alloc.h"
#include "common/log.h"

#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#define AUTH_HEADER_MAX 512

void td__srv_reject(td__service *svc, grpc_call *call, grpc_status_code code, const char *msg)
{
    td__srv_unary_reply(svc, call, NULL, code, msg, "refusal");
}

/* The verified client certificate's common name into cn, or "" when there is none. */
static void peer_cn(grpc_call *call, char *cn, size_t cap)
{
    cn[0] = '\0';
    grpc_auth_context *ctx = grpc_call_auth_context(call);
    if (ctx == NULL) return;
    if (grpc_auth_context_peer_is_authenticated(ctx)) {
        grpc_auth_property_iterator it =
            grpc_auth_context_find_properties_by_name(ctx, GRPC_X509_CN_PROPERTY_NAME);
        const grpc_auth_property *p = grpc_auth_property_iterator_next(&it);
        if (p != NULL && p->value_length > 0 && p->value_length < cap &&
            memchr(p->value, '\0', p->value_length) == NULL) {
            memcpy(cn, p->value, p->value_length);
            cn[p->value_length] = '\0';
        }
    }
    grpc_auth_context_release(ctx);
}

/* Printable ASCII only, for logs. */
static void printable(const char *in, char *out, size_t cap)
{
    size_t n = 0;
    for (; *in != '\0' && n + 1 < cap; in++) out[n++] = (*in >= 0x20 && *in < 0x7f) ? *in : '?';
    out[n] = '\0';
}

td_status td__srv_auth_call(td__service *svc, td__tenants *tenants, grpc_call *call,
                            const grpc_metadata_array *md, const char *what, td__quota **quota,
                            td__identity *id)
{
    char cn[256], err[512] = "";
    peer_cn(call, cn, sizeof cn);
    const char *token = NULL;
    size_t token_len = 0;
    int n_auth = 0;
    bool malformed = false;
    for (size_t i = 0; i < md->count; i++) {
        const grpc_slice *k = &md->metadata[i].key;
        if (GRPC_SLICE_LENGTH(*k) != 13 ||
            strncasecmp((const char *)GRPC_SLICE_START_PTR(*k), "authorization", 13) != 0)
            continue;
        n_auth++;
        const grpc_slice *v = &md->metadata[i].value;
        const char *s = (const char *)GRPC_SLICE_START_PTR(*v);
        size_t len = GRPC_SLICE_LENGTH(*v);
        if (len <= 7 || len > AUTH_HEADER_MAX || strncasecmp(s, "Bearer ", 7) != 0) {
            malformed = true;
            continue;
        }
        token = s + 7;
        token_len = len - 7;
    }
    td_status st;
    if (n_auth > 1) {
        snprintf(err, sizeof err, "more than one authorization header");
        st = TD_EUNAUTHENTICATED;
    } else if (malformed) {
        snprintf(err, sizeof err,
                 "malformed authorization header: expected 'Bearer TOKEN' (at most %d bytes)",
                 AUTH_HEADER_MAX);
        st = TD_EUNAUTHENTICATED;
    } else {
        st = td__tenants_authenticate(tenants, token, token_len, cn[0] ? cn : NULL, quota, err,
                                      sizeof err);
    }
    if (st == TD_OK) {
        if (id != NULL) td__identity_of(token, token_len, cn[0] ? cn : NULL, id);
        return TD_OK;
    }
    char *peer = grpc_call_get_peer(call), shown[128];
    printable(peer != NULL ? peer : "?", shown, sizeof shown);
    gpr_free(peer);
    td__log(TD_LOG_WARN, "%s from %s refused: %s", what, shown, err);
    td__srv_reject(svc, call,
                   st == TD_EUNAUTHENTICATED ? GRPC_STATUS_UNAUTHENTICATED : td__grpc_code(st),
                   err);
    return st;
}

/* auth.h — who is calling: the server side of bearer tokens and client certificates.
 *
 * Every accepted call passes td__srv_auth_call before its handler runs: it reads the
 * `authorization` metadata and the call's verified certificate name, maps them to a
 * tenant (auth/tenant.h), and otherwise ends the call with UNAUTHENTICATED and a message.
 * Thread-safety: completion-queue threads, any number at once.
 */
#ifndef TD_SERVER_AUTH_H
#define TD_SERVER_AUTH_H

#include "auth/tenant.h"
#include "server/service.h"

#include <grpc/grpc.h>

/* Authenticate `call` (request metadata md). TD_OK with *quota borrowed from tenants and
 * *id (may be NULL) saying what the caller authenticated with (td__service_revoke_stale
 * checks it again after a reload); otherwise the call has been answered with
 * UNAUTHENTICATED and its reference taken over, and the reason is logged. `what` names the
 * method for the log. */
td_status td__srv_auth_call(td__service *svc, td__tenants *tenants, grpc_call *call,
                            const grpc_metadata_array *md, const char *what, td__quota **quota,
                            td__identity *id);

/* Answer `call` with status `code` and message `msg` (initial metadata, status, wait for
 * the close), taking over its reference. For calls refused before any handler runs. */
void td__srv_reject(td__service *svc, grpc_call *call, grpc_status_code code, const char *msg);
#endif

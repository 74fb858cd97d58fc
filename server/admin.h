/* admin.h — the admin methods of tensord.v1.Tensord: ListSessions and KillSession
 * (tensord.proto, "administration"), for `tensorctl sessions`.
 *
 * The caller is authenticated like every call (server/auth.h) and must then belong to a
 * tenant with role=admin in the tokens file (td__tenants_is_admin); anyone else gets
 * PERMISSION_DENIED naming the role and the caller's tenant. Requests are decoded and
 * checked like all wire input (malformed bytes: INVALID_ARGUMENT; a session id of 0 or
 * past 2^63-1: INVALID_ARGUMENT naming it). Every kill is logged with who asked.
 * Thread-safety: completion-queue threads, any number at once.
 */
#ifndef TD_SERVER_ADMIN_H
#define TD_SERVER_ADMIN_H

#include "auth/tenant.h"
#include "server/service.h"
#include <grpc/grpc.h>

enum td__admin_method { TD_ADMIN_LIST_SESSIONS, TD_ADMIN_KILL_SESSION };

/* Answer an admin call; takes over the call's reference. `request` is borrowed, `quota`
 * is the authenticated caller's tenant. */
void td__admin_call(td__service *s, td__tenants *tenants, enum td__admin_method m,
                    grpc_call *call, grpc_byte_buffer *request, const td__quota *quota);
#endif

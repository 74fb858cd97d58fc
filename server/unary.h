/* unary.h — the one way tensord answers a unary call: initial metadata, an optional
 * response message, the status, and a wait for the close, as one gRPC batch. GetInfo,
 * health Check, the admin calls and every refusal (td__srv_reject) go through it, so the
 * call's reference, the service's call count and the buffers are released in one place.
 * Thread-safety: any thread.
 */
#ifndef TD_SERVER_UNARY_H
#define TD_SERVER_UNARY_H

#include "server/service.h"
#include <grpc/grpc.h>

/* Answer `call` with `response` (owned: freed once sent; NULL: no message), `code` and
 * `details` (copied; "" for none), taking over the call's reference. If the batch cannot
 * start, the call is cancelled with the same status and everything is freed. `what` names
 * the method in a log line for that case. */
void td__srv_unary_reply(td__service *svc, grpc_call *call, grpc_byte_buffer *response,
                         grpc_status_code code, const char *details, const char *what);
#endif

/* wire_health.h — the codec of the standard health service (grpc.health.v1, the .proto in
 * proto/grpc/health/v1/health.proto), with plain types, so that server/health.c sees no
 * generated code.
 * Thread-safety: stateless functions, any thread.
 */
#ifndef TD_PROTO_WIRE_HEALTH_H
#define TD_PROTO_WIRE_HEALTH_H

#include "tensord.h"
#include <grpc/grpc.h>
#include <stddef.h>

#define TD_METHOD_HEALTH_CHECK "/grpc.health.v1.Health/Check"
#define TD_METHOD_HEALTH_WATCH "/grpc.health.v1.Health/Watch"
/* The service name tensord answers for besides "" (the whole server). */
#define TD_HEALTH_SERVICE_NAME "tensord.v1.Tensord"
/* Longest service name a request may carry (longer ones are refused, INVALID_ARGUMENT). */
#define TD_HEALTH_SERVICE_MAX 200

/* HealthCheckResponse.ServingStatus, with the specification's numbers. */
enum td__health_status {
    TD_HEALTH_UNKNOWN = 0,
    TD_HEALTH_SERVING = 1,
    TD_HEALTH_NOT_SERVING = 2,
    TD_HEALTH_SERVICE_UNKNOWN = 3,
};

/* Decode a HealthCheckRequest (bb not consumed; NULL reads as the empty request). Its
 * service name goes to `service` (NUL-terminated; `len` > TD_HEALTH_SERVICE_MAX).
 * Returns TD_OK, TD_EPROTO (malformed, or a name longer than TD_HEALTH_SERVICE_MAX; message
 * in err) or TD_ENOMEM. */
td_status td__wire_health_request_decode(grpc_byte_buffer *bb, char *service, size_t len,
                                         char *err, size_t errlen);
/* Encode a HealthCheckResponse. *out is a new byte buffer. TD_OK or TD_ENOMEM. */
td_status td__wire_health_response_encode(enum td__health_status status, grpc_byte_buffer **out);
#endif

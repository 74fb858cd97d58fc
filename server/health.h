/* health.h — the standard gRPC health service (grpc.health.v1.Health, Check and Watch) on
 * tensord's gRPC port, for load balancers, Kubernetes probes and operators.
 *
 * Status: SERVING while td__service_serving says the server takes new clients,
 * NOT_SERVING while it drains (SIGTERM) or cannot accept connections. Names "" and
 * TD_HEALTH_SERVICE_NAME are known; Check of another name ends with NOT_FOUND, Watch of one
 * sends SERVICE_UNKNOWN (the specification's rules). No bearer token is needed: the
 * answer tells nothing about any tenant.
 *
 * Watch: the current status at once, then each change. When the service shuts down, the
 * watchers get NOT_SERVING and then the end of the stream (UNAVAILABLE, "server is shutting
 * down"); a send in flight counts as queued work (td__service_work_add), so the drain
 * finishes those sends before it cancels the remaining calls.
 *
 * Thread-safety: every function may be called from any thread.
 */
#ifndef TD_SERVER_HEALTH_H
#define TD_SERVER_HEALTH_H

#include "server/service.h"
#include <grpc/grpc.h>

typedef struct td__health td__health;

/* NULL when out of memory (the service then answers health calls UNAVAILABLE). */
td__health *td__health_create(td__service *svc);
/* After every health call has ended (the service's drain). NULL is a no-op. */
void td__health_destroy(td__health *h);

/* Answer a Check call; takes over the call's reference. `request` is borrowed. */
void td__health_check(td__health *h, grpc_call *call, grpc_byte_buffer *request);
/* Start a Watch call; takes over the call's reference. `request` is borrowed. */
void td__health_watch(td__health *h, grpc_call *call, grpc_byte_buffer *request);
/* Look at the status again and tell the watchers when it changed (the service calls it
 * on shutdown and once a second). */
void td__health_update(td__health *h);
#endif

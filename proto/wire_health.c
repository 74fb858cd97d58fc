/* wire_health.c — see wire_health.h. Both messages go through the generic codec of wire.c,
 * so they get its bounds and error messages. */
#include "wire_health.h"
#include "common/errbuf.h"
#include "health.pb-c.h"
#include "wire.h"

#include <string.h>

td_status td__wire_health_request_decode(grpc_byte_buffer *bb, char *service, size_t len,
                                         char *err, size_t errlen)
{
    service[0] = '\0';
    if (bb == NULL) return TD_OK;
    td__wire_scratch scratch = {0};
    ProtobufCMessage *m = NULL;
    td_status st = td__wire_decode(bb, &grpc__health__v1__health_check_request__descriptor,
                                   &scratch, &m, NULL, NULL, err, errlen);
    if (st == TD_OK) {
        const Grpc__Health__V1__HealthCheckRequest *r =
            (const Grpc__Health__V1__HealthCheckRequest *)m;
        size_t n = r->service != NULL ? strlen(r->service) : 0;
        if (n > TD_HEALTH_SERVICE_MAX || n >= len) {
            td__errf(err, errlen, "health check: service name of %zu bytes (at most %d)", n,
                     TD_HEALTH_SERVICE_MAX);
            st = TD_EPROTO;
        } else if (n > 0) {
            memcpy(service, r->service, n + 1);
        }
        protobuf_c_message_free_unpacked(m, NULL);
    }
    td__wire_scratch_fini(&scratch);
    return st;
}

td_status td__wire_health_response_encode(enum td__health_status status, grpc_byte_buffer **out)
{
    Grpc__Health__V1__HealthCheckResponse r = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
    r.status = (Grpc__Health__V1__HealthCheckResponse__ServingStatus)status;
    return td__wire_encode(&r.base, NULL, out);
}

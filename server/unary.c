/* unary.c — answering a unary call (see unary.h). */
#include "server/unary.h"

#include "common/alloc.h"
#include "common/log.h"

#include <string.h>

typedef struct unary_call {
    td__tag tag;
    td__service *svc;
    grpc_call *call;
    grpc_byte_buffer *response;
    grpc_slice details;
    int cancelled;
} unary_call;

static void unary_done(td__tag *tag, bool ok)
{
    (void)ok;
    unary_call *c = (unary_call *)tag;
    if (c->response) grpc_byte_buffer_destroy(c->response);
    grpc_slice_unref(c->details);
    grpc_call_unref(c->call);
    td__service *svc = c->svc;
    td__free(c);
    td__service_call_end(svc);
}

void td__srv_unary_reply(td__service *svc, grpc_call *call, grpc_byte_buffer *response,
                         grpc_status_code code, const char *details, const char *what)
{
    unary_call *c = td__calloc(1, sizeof *c);
    if (c == NULL) {
        if (response) grpc_byte_buffer_destroy(response);
        grpc_call_cancel_with_status(call, code == GRPC_STATUS_OK ? GRPC_STATUS_RESOURCE_EXHAUSTED
                                                                  : code,
                                     code == GRPC_STATUS_OK ? "out of memory" : details, NULL);
        grpc_call_unref(call);
        return;
    }
    td__service_call_begin(svc);
    c->tag.fn = unary_done;
    c->svc = svc;
    c->call = call;
    c->response = response;
    c->details = grpc_slice_from_copied_string(details);
    grpc_op ops[4];
    memset(ops, 0, sizeof ops);
    size_t n = 0;
    ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    if (response != NULL) {
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = response;
    }
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = code;
    ops[n++].data.send_status_from_server.status_details = &c->details;
    ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[n++].data.recv_close_on_server.cancelled = &c->cancelled;
    td__tag_arm(&c->tag);
    grpc_call_error e = grpc_call_start_batch(call, ops, n, &c->tag, NULL);
    if (e != GRPC_CALL_OK) {
        td__log(TD_LOG_ERROR, "%s: cannot start batch (grpc error %d)", what, (int)e);
        grpc_call_cancel_with_status(call, code, details, NULL);
        unary_done(&c->tag, false);
    }
}

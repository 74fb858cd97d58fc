/* raw_session.c — a synchronous, bare-bones Session client for hostile-input tests.
 * Everything waits with a bound, so a server that hangs fails the test instead of hanging it.
 * The call is driven through libtensord's call helper (client/call.h); the messages, the
 * metadata and the channel's receive window are the test's to choose.
 */
#include "raw_session.h"

#include "engine/op.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RAW_CALL_DEADLINE_S 120
#define RAW_SEND_MS 10000

/* Handle one completion; false on timeout. */
static bool pump(raw_session *s, gpr_timespec deadline)
{
    bool got = td__cli_call_pump(&s->c, deadline);
    if (s->c.status_done) s->status = s->c.status;
    return got;
}

void raw_msg_fini(raw_msg *m)
{
    free(m->payload);
    m->payload = NULL;
    m->payload_len = 0;
}

const char *raw_authorization;
int raw_recv_window;
bool raw_want_shm;
uint64_t raw_want_shm_bytes;

bool raw_start(raw_session *s, const char *target)
{
    memset(s, 0, sizeof *s);
    grpc_init();
    s->started = true;
    s->next_seq = 1;
    td__cli_call_init(&s->c);
    char err[512];
    /* No wait for READY: the test decides what a refused connection looks like. */
    if (td__cli_channel_open(&s->c, target, NULL, raw_recv_window, -1, err, sizeof err) != TD_OK)
        return false;
    if (td__cli_call_start(&s->c, TD_METHOD_SESSION,
                           td__cli_after_ms(RAW_CALL_DEADLINE_S * 1000)) != TD_OK)
        return false;
    return s->c.status_armed;
}

static bool send_bb(raw_session *s, grpc_byte_buffer *bb, bool consume_seq)
{
    gpr_timespec deadline = td__cli_after_ms(RAW_SEND_MS);
    while (s->c.send_pending && pump(s, deadline)) {
    }
    if (s->c.send_pending || s->c.stream_ended || s->c.send_failed) {
        grpc_byte_buffer_destroy(bb);
        return false;
    }
    grpc_metadata md;
    size_t n_md = 0;
    if (raw_authorization != NULL) {
        md.key = grpc_slice_from_static_string("authorization");
        md.value = grpc_slice_from_static_string(raw_authorization);
        n_md = 1;
    }
    if (!td__cli_call_send(&s->c, bb, &md, n_md, 0)) return false;
    if (consume_seq) s->next_seq++;
    /* Synchronous: wait until the message is taken. */
    while (s->c.send_pending && pump(s, deadline)) {
    }
    return !s->c.send_pending && !s->c.stream_ended && !s->c.send_failed;
}

bool raw_send(raw_session *s, Tensord__V1__ClientMessage *m, const void *payload, size_t n,
              uint64_t *seq)
{
    m->seq = s->next_seq;
    if (seq != NULL) *seq = s->next_seq;
    td__wire_payload pl = {.data = payload, .nbytes = n, .release = NULL};
    grpc_byte_buffer *bb;
    if (td__wire_encode(&m->base, payload != NULL ? &pl : NULL, &bb) != TD_OK) return false;
    return send_bb(s, bb, true);
}

bool raw_send_bytes(raw_session *s, const void *bytes, size_t n)
{
    grpc_slice sl = grpc_slice_from_copied_buffer(bytes, n);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&sl, 1);
    grpc_slice_unref(sl);
    return send_bb(s, bb, false);
}

bool raw_open(raw_session *s, const char *target, uint32_t pmin, uint32_t pmax,
              const char *device)
{
    if (!raw_start(s, target)) return false;
    Tensord__V1__OpenSession os = TENSORD__V1__OPEN_SESSION__INIT;
    os.protocol_min = pmin;
    os.protocol_max = pmax;
    os.device = (char *)(uintptr_t)(device ? device : "");
    os.client_name = (char *)"e2e-raw";
    os.shm = raw_want_shm;
    os.shm_bytes = raw_want_shm_bytes;
    Tensord__V1__ClientMessage cm = TENSORD__V1__CLIENT_MESSAGE__INIT;
    cm.body_case = TENSORD__V1__CLIENT_MESSAGE__BODY_OPEN;
    cm.open = &os;
    if (!raw_send(s, &cm, NULL, 0, NULL)) {
        /* The server may have ended the call already: collect its status. */
        raw_msg m;
        while (raw_recv(s, &m, 5000) == 1) raw_msg_fini(&m);
        return false;
    }
    raw_msg m;
    int rc = raw_recv(s, &m, 10000);
    if (rc != 1) return false;
    bool ok = m.kind == TENSORD__V1__SERVER_MESSAGE__BODY_OPENED && m.seq == 1;
    raw_msg_fini(&m);
    return ok;
}

int raw_recv(raw_session *s, raw_msg *m, int timeout_ms)
{
    memset(m, 0, sizeof *m);
    if (s->c.stream_ended && !s->c.recv_pending) return 0;
    if (!s->c.recv_pending) {
        td__cli_call_recv(&s->c);
        if (!s->c.recv_pending) return 0;
    }
    gpr_timespec deadline = td__cli_after_ms(timeout_ms);
    while (s->c.recv_pending && pump(s, deadline)) {
    }
    if (s->c.recv_pending) return -1;
    grpc_byte_buffer *bb = td__cli_call_take(&s->c);
    if (bb == NULL) {
        gpr_timespec sd = td__cli_after_ms(10000);
        while (!s->c.status_done && pump(s, sd)) {
        }
        return 0;
    }
    ProtobufCMessage *pm;
    const uint8_t *payload;
    size_t plen;
    char err[256];
    td_status ds = td__wire_decode(bb, &tensord__v1__server_message__descriptor, &s->scratch,
                                   &pm, &payload, &plen, err, sizeof err);
    grpc_byte_buffer_destroy(bb);
    if (ds != TD_OK) {
        snprintf(m->message, sizeof m->message, "%s", err);
        return -2;
    }
    const Tensord__V1__ServerMessage *sm = (const Tensord__V1__ServerMessage *)pm;
    m->seq = sm->seq;
    m->kind = (int)sm->body_case;
    if (sm->body_case == TENSORD__V1__SERVER_MESSAGE__BODY_FAILURE) {
        m->status = sm->failure->status;
        m->op_index = sm->failure->op_index;
        snprintf(m->message, sizeof m->message, "%s", sm->failure->message);
    } else if (sm->body_case == TENSORD__V1__SERVER_MESSAGE__BODY_READ) {
        m->tensor = sm->read->tensor;
        m->offset = sm->read->offset;
        m->last = sm->read->last;
    } else if (sm->body_case == TENSORD__V1__SERVER_MESSAGE__BODY_OPENED) {
        snprintf(s->device, sizeof s->device, "%s", sm->opened->device);
        s->session_id = sm->opened->session_id;
        if (sm->opened->shm != NULL && sm->opened->shm->secret.len == sizeof s->shm_secret) {
            snprintf(s->shm_path, sizeof s->shm_path, "%s", sm->opened->shm->socket_path);
            memcpy(s->shm_secret, sm->opened->shm->secret.data, sizeof s->shm_secret);
            s->shm_bytes = sm->opened->shm->region_bytes;
        }
        if (sm->opened->shm_refused != NULL)
            snprintf(s->shm_refused, sizeof s->shm_refused, "%s", sm->opened->shm_refused);
    } else if (sm->body_case == TENSORD__V1__SERVER_MESSAGE__BODY_GRAPH_READY) {
        m->known = sm->graph_ready->known;
    } else if (sm->body_case == TENSORD__V1__SERVER_MESSAGE__BODY_BLOB_STATUS) {
        m->n_present = sm->blob_status->n_present;
        for (size_t i = 0; i < sm->blob_status->n_present && i < 64; i++)
            if (sm->blob_status->present[i]) m->present |= UINT64_C(1) << i;
    }
    if (plen > 0) {
        m->payload = malloc(plen);
        memcpy(m->payload, payload, plen);
        m->payload_len = plen;
    }
    protobuf_c_message_free_unpacked(pm, NULL);
    return 1;
}

static void raw_free(raw_session *s)
{
    if (!s->started) return;
    td__cli_call_drain(&s->c, td__cli_after_ms(10000));
    if (s->c.status_done) s->status = s->c.status;
    td__cli_call_fini(&s->c);
    td__wire_scratch_fini(&s->scratch);
    s->started = false;
    grpc_shutdown();
}

grpc_status_code raw_close(raw_session *s)
{
    if (s->c.call != NULL && !s->c.stream_ended) {
        gpr_timespec deadline = td__cli_after_ms(10000);
        while (s->c.send_pending && pump(s, deadline)) {
        }
        td__cli_call_half_close(&s->c);
        raw_msg m;
        while (raw_recv(s, &m, 10000) == 1) raw_msg_fini(&m);
    }
    if (s->c.call != NULL && !s->c.status_done) grpc_call_cancel(s->c.call, NULL);
    grpc_status_code code = s->c.status_done ? s->c.status : GRPC_STATUS_UNKNOWN;
    raw_free(s);
    return code;
}

void raw_abort(raw_session *s)
{
    if (s->c.call != NULL) grpc_call_cancel(s->c.call, NULL);
    raw_free(s);
}

const char *raw_details(const raw_session *s)
{
    static _Thread_local char buf[1024];
    snprintf(buf, sizeof buf, "%.*s", (int)GRPC_SLICE_LENGTH(s->c.details),
             (const char *)GRPC_SLICE_START_PTR(s->c.details));
    return buf;
}

uint64_t raw_send_ops(raw_session *s, const td__op *ops, size_t n)
{
    Tensord__V1__Op *w = calloc(n ? n : 1, sizeof *w);
    Tensord__V1__Op **p = calloc(n ? n : 1, sizeof *p);
    uint64_t *in = calloc(n ? n : 1, TD_OP_MAX_INPUTS * sizeof *in);
    for (size_t i = 0; i < n; i++) {
        td__wire_op_to(&ops[i], &w[i], in + i * TD_OP_MAX_INPUTS);
        p[i] = &w[i];
    }
    Tensord__V1__OpBatch b = TENSORD__V1__OP_BATCH__INIT;
    b.n_ops = n;
    b.ops = p;
    Tensord__V1__ClientMessage cm = TENSORD__V1__CLIENT_MESSAGE__INIT;
    cm.body_case = TENSORD__V1__CLIENT_MESSAGE__BODY_BATCH;
    cm.batch = &b;
    uint64_t seq = 0;
    bool ok = raw_send(s, &cm, NULL, 0, &seq);
    free(in);
    free(p);
    free(w);
    return ok ? seq : 0;
}

uint64_t raw_send_fence(raw_session *s)
{
    Tensord__V1__Fence f = TENSORD__V1__FENCE__INIT;
    Tensord__V1__ClientMessage cm = TENSORD__V1__CLIENT_MESSAGE__INIT;
    cm.body_case = TENSORD__V1__CLIENT_MESSAGE__BODY_FENCE;
    cm.fence = &f;
    uint64_t seq = 0;
    return raw_send(s, &cm, NULL, 0, &seq) ? seq : 0;
}

uint64_t raw_send_read(raw_session *s, uint64_t tensor, uint64_t offset, uint64_t nbytes)
{
    Tensord__V1__ReadRequest r = TENSORD__V1__READ_REQUEST__INIT;
    r.tensor = tensor;
    r.offset = offset;
    r.nbytes = nbytes;
    Tensord__V1__ClientMessage cm = TENSORD__V1__CLIENT_MESSAGE__INIT;
    cm.body_case = TENSORD__V1__CLIENT_MESSAGE__BODY_READ;
    cm.read = &r;
    uint64_t seq = 0;
    return raw_send(s, &cm, NULL, 0, &seq) ? seq : 0;
}

uint64_t raw_send_write(raw_session *s, uint64_t tensor, uint64_t offset, const void *data,
                        size_t n)
{
    Tensord__V1__WriteChunk w = TENSORD__V1__WRITE_CHUNK__INIT;
    w.tensor = tensor;
    w.offset = offset;
    Tensord__V1__ClientMessage cm = TENSORD__V1__CLIENT_MESSAGE__INIT;
    cm.body_case = TENSORD__V1__CLIENT_MESSAGE__BODY_WRITE;
    cm.write = &w;
    uint64_t seq = 0;
    return raw_send(s, &cm, data, n, &seq) ? seq : 0;
}

uint64_t raw_send_release(raw_session *s, const uint64_t *ids, size_t n)
{
    Tensord__V1__Release r = TENSORD__V1__RELEASE__INIT;
    r.n_tensors = n;
    r.tensors = (uint64_t *)(uintptr_t)ids;
    Tensord__V1__ClientMessage cm = TENSORD__V1__CLIENT_MESSAGE__INIT;
    cm.body_case = TENSORD__V1__CLIENT_MESSAGE__BODY_RELEASE;
    cm.release = &r;
    uint64_t seq = 0;
    return raw_send(s, &cm, NULL, 0, &seq) ? seq : 0;
}

td__op raw_op_full(uint64_t out, uint32_t dtype, int rank, const int64_t *dims, double v)
{
    td__op op;
    memset(&op, 0, sizeof op);
    op.opcode = TD_OP_FULL;
    op.dtype = dtype;
    op.output = out;
    op.n_iattrs = (uint32_t)rank;
    for (int i = 0; i < rank && i < TD_OP_MAX_IATTRS; i++) op.iattrs[i] = dims[i];
    op.fattrs[0] = v;
    return op;
}

td__op raw_op_binary(uint32_t opcode, uint64_t out, uint64_t a, uint64_t b)
{
    td__op op;
    memset(&op, 0, sizeof op);
    op.opcode = opcode;
    op.output = out;
    op.n_inputs = 2;
    op.inputs[0] = a;
    op.inputs[1] = b;
    return op;
}

/* ---- graphs ---- */

void raw_graph_init(raw_graph *r, size_t n, uint32_t opcode, int64_t len)
{
    memset(r, 0, sizeof *r);
    tensord__v1__graph__init(&r->g);
    tensord__v1__graph_input__init(&r->in);
    tensord__v1__graph_output__init(&r->out);
    r->dims[0] = len;
    r->in.name = "x";
    r->in.dtype = TD_F32;
    r->in.n_dims = 1;
    r->in.dims = r->dims;
    r->inp = &r->in;
    r->out.name = "y";
    r->out.value = n;
    r->outp = &r->out;
    r->ops = calloc(n ? n : 1, sizeof *r->ops);
    r->opp = calloc(n ? n : 1, sizeof *r->opp);
    r->inputs = calloc(n ? n : 1, sizeof *r->inputs);
    for (size_t k = 0; r->ops && r->opp && r->inputs && k < n; k++) {
        tensord__v1__op__init(&r->ops[k]);
        r->ops[k].opcode = opcode;
        r->inputs[k] = k;
        r->ops[k].n_inputs = 1;
        r->ops[k].inputs = &r->inputs[k];
        r->opp[k] = &r->ops[k];
    }
    r->g.n_inputs = 1;
    r->g.inputs = &r->inp;
    r->g.n_outputs = 1;
    r->g.outputs = &r->outp;
    r->g.n_ops = n;
    r->g.ops = r->opp;
}

void raw_graph_fini(raw_graph *r)
{
    free(r->ops);
    free(r->opp);
    free(r->inputs);
}

uint64_t raw_send_define(raw_session *s, const uint8_t *id, size_t id_len,
                         Tensord__V1__Graph *graph)
{
    Tensord__V1__GraphDefine gd = TENSORD__V1__GRAPH_DEFINE__INIT;
    gd.graph_id.data = (uint8_t *)(uintptr_t)id;
    gd.graph_id.len = id_len;
    gd.graph = graph;
    Tensord__V1__ClientMessage cm = TENSORD__V1__CLIENT_MESSAGE__INIT;
    cm.body_case = TENSORD__V1__CLIENT_MESSAGE__BODY_GRAPH_DEFINE;
    cm.graph_define = &gd;
    uint64_t seq = 0;
    return raw_send(s, &cm, NULL, 0, &seq) ? seq : 0;
}

int raw_reply_to(raw_session *s, uint64_t seq, char *msg, size_t len, int timeout_ms)
{
    if (len > 0) msg[0] = '\0';
    for (;;) {
        raw_msg m;
        if (seq == 0 || raw_recv(s, &m, timeout_ms) != 1) return -1;
        if (m.seq != seq) {
            raw_msg_fini(&m);
            continue;
        }
        int failed = m.kind == TENSORD__V1__SERVER_MESSAGE__BODY_FAILURE;
        if (len > 0) snprintf(msg, len, "%s", m.message);
        raw_msg_fini(&m);
        return failed;
    }
}

int raw_define_graph(raw_session *s, Tensord__V1__Graph *graph, uint8_t id[32], char *msg,
                     size_t len)
{
    static const uint8_t zero[32];
    int rc = raw_reply_to(s, raw_send_define(s, zero, 32, graph), msg, len, 15000);
    if (rc != 1) return rc < 0 ? -1 : 1; /* the zero id cannot be a real one */
    const char *p = strstr(msg, "SHA-256 ");
    if (p == NULL) return 1; /* refused before the id check */
    for (int i = 0; i < 32; i++) {
        unsigned v;
        if (sscanf(p + 8 + 2 * i, "%2x", &v) != 1) return 1;
        id[i] = (uint8_t)v;
    }
    return raw_reply_to(s, raw_send_define(s, id, 32, graph), msg, len, 15000);
}

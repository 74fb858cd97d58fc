/* fault.c — allocation fault injection (SQLite's and curl's discipline): the hooks of
 * common/alloc.h fail the Nth allocation, for N = 1, 2, ... until a run completes without
 * reaching N, through each scenario below. Every run must end cleanly: no crash (the suite
 * also runs under ASan/UBSan), every failure reported as an error status with a message,
 * no wrong value reported as a success, and after teardown no allocation outstanding and
 * td__buffer_live_count() back where it started.
 *
 * Scenarios:
 *   session  ops on a local CPU session: FULL, ARANGE, RESHAPE, MATMUL, SUM, CONCAT, LT,
 *            WHERE, GATHER, EMPTY + write; reads of the results; release; destroy
 *   graph    td__graph_alloc + td__graph_validate + td__graph_exec of a graph with an
 *            input, a captured tensor, MATMUL, SUM, LT, WHERE, CONCAT; reads; unref
 *   wire     td__wire_decode of a ClientMessage with a batch, td__wire_op_from of each op,
 *            td__wire_decode of a ClientMessage with a GraphDefine, td__wire_graph_from,
 *            td__wire_graph_to (encode back)
 *   client   libtensord on "local:cpu": td_connect, recorded ops, td_read, td_read_start
 *            and td_read_finish, td_close with a read pending
 *
 * Expected values are worked out by hand in the comments. protobuf-c's own unpack
 * allocations use libc, not the hooks (the free calls all over server/ and client/ pass a
 * NULL allocator), so they are neither failed nor counted here.
 *
 * Usage: test-fault [scenario ...] (default: all). Exit status 0 when every run was clean.
 *        test-fault --self-check: the harness catches a scenario that leaks (exit 0 if so).
 */
#include "common/alloc.h"
#include "engine/device.h"
#include "engine/graph.h"
#include "engine/session.h"
#include "engine/tensor.h"
#include "proto/wire.h"
#include "proto/wire_graph.h"
#include "tensord.h"

#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <grpc/slice.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the hooks ---- */

static atomic_long g_calls;   /* allocation calls since the run started */
static atomic_long g_fail_at; /* fail this call (1-based); 0 = never */
static atomic_bool g_injected;
static atomic_long g_live; /* allocations outstanding through the hooks */

static bool fail_now(void)
{
    long k = atomic_fetch_add(&g_calls, 1) + 1;
    if (k == atomic_load(&g_fail_at)) {
        atomic_store(&g_injected, true);
        return true;
    }
    return false;
}

static void *f_malloc(size_t n)
{
    if (fail_now()) return NULL;
    void *p = malloc(n);
    if (p != NULL) atomic_fetch_add(&g_live, 1);
    return p;
}

static void *f_calloc(size_t c, size_t n)
{
    if (fail_now()) return NULL;
    void *p = calloc(c, n);
    if (p != NULL) atomic_fetch_add(&g_live, 1);
    return p;
}

static void *f_realloc(void *p, size_t n)
{
    if (fail_now()) return NULL;
    void *q = realloc(p, n);
    if (q != NULL && p == NULL) atomic_fetch_add(&g_live, 1);
    return q;
}

static void f_free(void *p)
{
    if (p != NULL) atomic_fetch_sub(&g_live, 1);
    free(p);
}

static const td__alloc_hooks fault_hooks = {f_malloc, f_calloc, f_realloc, f_free};

/* ---- run bookkeeping ---- */

/* What a scenario run found wrong (a dirty result); empty when clean. */
static char g_dirty[1024];

static void dirty(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void dirty(const char *fmt, ...)
{
    if (g_dirty[0] != '\0') return; /* keep the first */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_dirty, sizeof g_dirty, fmt, ap);
    va_end(ap);
}

static bool injected(void) { return atomic_load(&g_injected); }

static long g_errors; /* error statuses seen in the current run */

/* A call returned st with message msg: fine when TD_OK; otherwise only in a run with an
 * injected failure, and only with a message. */
static bool note(const char *what, td_status st, const char *msg)
{
    if (st == TD_OK) return true;
    g_errors++;
    if (!injected())
        dirty("%s failed without an injected failure: %s: %s", what, td_status_name(st), msg);
    else if (msg == NULL || msg[0] == '\0')
        dirty("%s failed with %s and no message", what, td_status_name(st));
    else if (st == TD_EINTERNAL)
        dirty("%s: an allocation failure became TD_EINTERNAL: %s", what, msg);
    return false;
}

static void on_failure(void *arg, uint32_t op_index, td_status st, const char *message)
{
    char what[64];
    snprintf(what, sizeof what, "%s op %u", (const char *)arg, op_index);
    note(what, st, message);
}

static void expect_f32(const char *what, const float *got, const float *want, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i]) {
            dirty("%s: element %zu is %g, expected %g (reported as a success)", what, i,
                  (double)got[i], (double)want[i]);
            return;
        }
}

static td__device *cpu(void) { return td__device_find("cpu"); }

static td__op full(uint64_t id, uint32_t dt, uint32_t rank, const int64_t *dims, double v)
{
    td__op op = {.opcode = TD_OP_FULL, .dtype = dt, .output = id, .n_iattrs = rank,
                 .fattrs = {v, 0}};
    for (uint32_t i = 0; i < rank; i++) op.iattrs[i] = dims[i];
    return op;
}

/* Read tensor id (n f32) and compare; a failed read must be a clean error. */
static void read_f32(td__session *s, const char *what, uint64_t id, const float *want, size_t n)
{
    float got[16];
    char err[512] = "";
    td_status st = td__session_read(s, id, 0, got, n * sizeof(float), err, sizeof err);
    if (note(what, st, err)) expect_f32(what, got, want, n);
}

/* ---- scenario: ops on a local CPU session ---- */

static void scen_session(void)
{
    td__session *s = NULL;
    td__session_limits lim = {.max_bytes = 1 << 20, .max_tensors = 64};
    td_status st = td__session_create(cpu(), &lim, &s);
    if (!note("session create", st, "session create failed")) return;
    td__op ops[] = {
        full(1, TD_F32, 2, (int64_t[]){2, 3}, 1.5),
        {.opcode = TD_OP_ARANGE, .dtype = TD_F32, .output = 2, .n_iattrs = 1, .iattrs = {6},
         .fattrs = {0, 1}},
        {.opcode = TD_OP_RESHAPE, .n_inputs = 1, .inputs = {2}, .output = 3, .n_iattrs = 2,
         .iattrs = {3, 2}},
        {.opcode = TD_OP_MATMUL, .n_inputs = 2, .inputs = {1, 3}, .output = 4},
        {.opcode = TD_OP_SUM, .n_inputs = 1, .inputs = {4}, .output = 5, .n_iattrs = 2,
         .iattrs = {1, 0}},
        {.opcode = TD_OP_CONCAT, .n_inputs = 2, .inputs = {4, 4}, .output = 6, .n_iattrs = 1,
         .iattrs = {0}},
        full(7, TD_F32, 2, (int64_t[]){1, 2}, 10.0),
        {.opcode = TD_OP_LT, .n_inputs = 2, .inputs = {4, 7}, .output = 8},
        {.opcode = TD_OP_WHERE, .n_inputs = 3, .inputs = {8, 4, 7}, .output = 9},
        full(10, TD_I64, 2, (int64_t[]){2, 1}, 1.0),
        {.opcode = TD_OP_GATHER, .n_inputs = 2, .inputs = {4, 10}, .output = 11,
         .n_iattrs = 1, .iattrs = {1}},
        {.opcode = TD_OP_EMPTY, .dtype = TD_F32, .output = 12, .n_iattrs = 1, .iattrs = {3}},
    };
    size_t nops = sizeof ops / sizeof ops[0];
    td__session_exec(s, ops, nops, on_failure, "session");
    char err[512] = "";
    const float w[3] = {7, 8, 9};
    st = td__session_write(s, 12, 0, w, sizeof w, err, sizeof err);
    if (note("session write", st, err)) read_f32(s, "read 12", 12, w, 3);
    /* [2,3] of 1.5 x [[0,1],[2,3],[4,5]] = [[9, 13.5], [9, 13.5]] */
    read_f32(s, "read matmul", 4, (const float[]){9, 13.5f, 9, 13.5f}, 4);
    read_f32(s, "read sum", 5, (const float[]){18, 27}, 2);
    read_f32(s, "read concat", 6, (const float[]){9, 13.5f, 9, 13.5f, 9, 13.5f, 9, 13.5f}, 8);
    /* 9 < 10 and 13.5 >= 10: where picks 9 and 10 */
    read_f32(s, "read where", 9, (const float[]){9, 10, 9, 10}, 4);
    read_f32(s, "read gather", 11, (const float[]){13.5f, 13.5f}, 2);
    uint64_t rel[] = {1, 2, 3};
    td__session_release(s, rel, 3);
    td__session_destroy(s);
}

/* ---- scenario: graph alloc, validate, exec ---- */

static void scen_graph(void)
{
    td__graph *g = NULL;
    char err[768] = "";
    /* values: 0 = input x f32[2,3], 1 = const (id 1) f32[3,2], then ops 2.. */
    td_status st = td__graph_alloc(1, 1, 7, 3, &g, err, sizeof err);
    if (!note("graph alloc", st, err)) return;
    td__session *s = NULL;
    g->inputs[0].desc = (td__desc){.dtype = TD_F32, .rank = 2, .dims = {2, 3}};
    g->consts[0] = (td__graph_const){.id = 1, .desc = {.dtype = TD_F32, .rank = 2,
                                                       .dims = {3, 2}}};
    g->ops[0] = (td__op){.opcode = TD_OP_MATMUL, .n_inputs = 2, .inputs = {0, 1}};   /* 2 */
    g->ops[1] = (td__op){.opcode = TD_OP_SUM, .n_inputs = 1, .inputs = {2}, .n_iattrs = 2,
                         .iattrs = {3, 0}};                                           /* 3 */
    g->ops[2] = full(0, TD_F32, 2, (int64_t[]){1, 2}, 10.0);                          /* 4 */
    g->ops[3] = (td__op){.opcode = TD_OP_LT, .n_inputs = 2, .inputs = {2, 4}};       /* 5 */
    g->ops[4] = (td__op){.opcode = TD_OP_WHERE, .n_inputs = 3, .inputs = {5, 2, 4}}; /* 6 */
    g->ops[5] = (td__op){.opcode = TD_OP_CONCAT, .n_inputs = 2, .inputs = {6, 2},
                         .n_iattrs = 1, .iattrs = {1}};                               /* 7 */
    g->ops[6] = (td__op){.opcode = TD_OP_NEG, .n_inputs = 1, .inputs = {7}};         /* 8 */
    const char *names[] = {"x", "total", "picked", "neg"};
    if ((g->inputs[0].name = td__strdup(names[0])) == NULL) {
        note("graph name", TD_ENOMEM, "out of memory for a name");
        goto out;
    }
    g->outputs[0].value = 3;
    g->outputs[1].value = 6;
    g->outputs[2].value = 8;
    for (int i = 0; i < 3; i++) {
        if ((g->outputs[i].name = td__strdup(names[1 + i])) == NULL) {
            note("graph name", TD_ENOMEM, "out of memory for a name");
            goto out;
        }
    }
    st = td__graph_validate(g, err, sizeof err);
    if (!note("graph validate", st, err)) goto out;
    td__session_limits lim = {.max_bytes = 1 << 20, .max_tensors = 64};
    st = td__session_create(cpu(), &lim, &s);
    if (!note("session create", st, "session create failed")) goto out;
    td__op mk[] = {full(1, TD_F32, 2, (int64_t[]){3, 2}, 2.0),
                   {.opcode = TD_OP_ARANGE, .dtype = TD_F32, .output = 20, .n_iattrs = 1,
                    .iattrs = {6}, .fattrs = {1, 1}},
                   {.opcode = TD_OP_RESHAPE, .n_inputs = 1, .inputs = {20}, .output = 2,
                    .n_iattrs = 2, .iattrs = {2, 3}}};
    td__session_exec(s, mk, 3, on_failure, "graph setup");
    uint64_t in_ids[1] = {2}, out_ids[3] = {30, 31, 32};
    td__graph_exec(s, g, in_ids, 1, out_ids, 3, on_failure, "graph");
    /* x = [[1,2,3],[4,5,6]] times all-2 [3,2] = [[12,12],[30,30]]; total 84;
     * picked: 12 < 10? no -> 10; 30 -> 10: [[10,10],[10,10]];
     * neg(concat(picked, mm) along 1) = [[-10,-10,-12,-12],[-10,-10,-30,-30]] */
    read_f32(s, "graph total", 30, (const float[]){84}, 1);
    read_f32(s, "graph picked", 31, (const float[]){10, 10, 10, 10}, 4);
    read_f32(s, "graph neg", 32, (const float[]){-10, -10, -12, -12, -10, -10, -30, -30}, 8);
out:
    td__session_destroy(s);
    td__graph_unref(g);
}

/* ---- scenario: wire decode ---- */

static uint8_t *g_batch_msg, *g_graph_msg;
static size_t g_batch_len, g_graph_len;

/* Pack the two ClientMessages once, before any hook is installed (protobuf-c packing does
 * not allocate). */
static void wire_prepare(void)
{
    static Tensord__V1__Op ops[3];
    static Tensord__V1__Op *opp[3] = {&ops[0], &ops[1], &ops[2]};
    static int64_t dims[2] = {2, 3}, axes[2] = {1, 0};
    static uint64_t in_mm[2] = {1, 1}, in_sum[1] = {2};
    static double fv[2] = {1.5, 0};
    for (int i = 0; i < 3; i++) tensord__v1__op__init(&ops[i]);
    ops[0].opcode = TD_OP_FULL, ops[0].dtype = TD_F32, ops[0].output = 1;
    ops[0].n_iattrs = 2, ops[0].iattrs = dims, ops[0].n_fattrs = 2, ops[0].fattrs = fv;
    ops[1].opcode = TD_OP_ADD, ops[1].n_inputs = 2, ops[1].inputs = in_mm, ops[1].output = 2;
    ops[2].opcode = TD_OP_SUM, ops[2].n_inputs = 1, ops[2].inputs = in_sum, ops[2].output = 3;
    ops[2].n_iattrs = 2, ops[2].iattrs = axes;
    static Tensord__V1__OpBatch batch;
    tensord__v1__op_batch__init(&batch);
    batch.n_ops = 3, batch.ops = opp;
    Tensord__V1__ClientMessage cm;
    tensord__v1__client_message__init(&cm);
    cm.seq = 7;
    cm.body_case = TENSORD__V1__CLIENT_MESSAGE__BODY_BATCH;
    cm.batch = &batch;
    g_batch_len = tensord__v1__client_message__get_packed_size(&cm);
    g_batch_msg = malloc(g_batch_len);
    tensord__v1__client_message__pack(&cm, g_batch_msg);

    /* graph: input x f32[2,3]; ADD(x, x) -> 1; SUM(1, axes 0b01) -> 2; outputs y=2, x2=1 */
    static Tensord__V1__GraphInput gi;
    static Tensord__V1__GraphInput *gip[1] = {&gi};
    tensord__v1__graph_input__init(&gi);
    gi.name = "x", gi.dtype = TD_F32, gi.n_dims = 2, gi.dims = dims;
    static Tensord__V1__Op gops[2];
    static Tensord__V1__Op *gopp[2] = {&gops[0], &gops[1]};
    static uint64_t g_in0[2] = {0, 0}, g_in1[1] = {1};
    for (int i = 0; i < 2; i++) tensord__v1__op__init(&gops[i]);
    gops[0].opcode = TD_OP_ADD, gops[0].n_inputs = 2, gops[0].inputs = g_in0;
    gops[1].opcode = TD_OP_SUM, gops[1].n_inputs = 1, gops[1].inputs = g_in1;
    gops[1].n_iattrs = 2, gops[1].iattrs = axes;
    static Tensord__V1__GraphOutput go[2];
    static Tensord__V1__GraphOutput *gop[2] = {&go[0], &go[1]};
    tensord__v1__graph_output__init(&go[0]);
    tensord__v1__graph_output__init(&go[1]);
    go[0].name = "y", go[0].value = 2;
    go[1].name = "x2", go[1].value = 1;
    static Tensord__V1__Graph gr;
    tensord__v1__graph__init(&gr);
    gr.n_inputs = 1, gr.inputs = gip, gr.n_ops = 2, gr.ops = gopp, gr.n_outputs = 2;
    gr.outputs = gop;
    static Tensord__V1__GraphDefine gd;
    tensord__v1__graph_define__init(&gd);
    gd.graph = &gr;
    Tensord__V1__ClientMessage cg;
    tensord__v1__client_message__init(&cg);
    cg.seq = 8;
    cg.body_case = TENSORD__V1__CLIENT_MESSAGE__BODY_GRAPH_DEFINE;
    cg.graph_define = &gd;
    g_graph_len = tensord__v1__client_message__get_packed_size(&cg);
    g_graph_msg = malloc(g_graph_len);
    tensord__v1__client_message__pack(&cg, g_graph_msg);
}

static grpc_byte_buffer *two_slices(const uint8_t *p, size_t n)
{
    size_t cut = n / 3;
    grpc_slice parts[2] = {grpc_slice_from_copied_buffer((const char *)p, cut),
                           grpc_slice_from_copied_buffer((const char *)p + cut, n - cut)};
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(parts, 2);
    grpc_slice_unref(parts[0]);
    grpc_slice_unref(parts[1]);
    return bb;
}

static void scen_wire(void)
{
    td__wire_scratch scratch = {0};
    char err[768] = "";
    ProtobufCMessage *m = NULL;
    grpc_byte_buffer *bb = two_slices(g_batch_msg, g_batch_len);
    td_status st = td__wire_decode(bb, &tensord__v1__client_message__descriptor, &scratch, &m,
                                   NULL, NULL, err, sizeof err);
    grpc_byte_buffer_destroy(bb);
    if (note("decode batch", st, err)) {
        const Tensord__V1__ClientMessage *cm = (const Tensord__V1__ClientMessage *)m;
        if (cm->body_case != TENSORD__V1__CLIENT_MESSAGE__BODY_BATCH || cm->batch->n_ops != 3)
            dirty("decode batch: wrong message decoded");
        else
            for (size_t i = 0; i < cm->batch->n_ops; i++) {
                td__op op;
                st = td__wire_op_from(cm->batch->ops[i], &op, err, sizeof err);
                if (note("op from wire", st, err) && op.opcode != cm->batch->ops[i]->opcode)
                    dirty("op %zu: opcode %u decoded as %u", i, cm->batch->ops[i]->opcode,
                          op.opcode);
            }
        protobuf_c_message_free_unpacked(m, NULL);
        m = NULL;
    }
    bb = two_slices(g_graph_msg, g_graph_len);
    st = td__wire_decode(bb, &tensord__v1__client_message__descriptor, &scratch, &m, NULL,
                         NULL, err, sizeof err);
    grpc_byte_buffer_destroy(bb);
    if (note("decode graph define", st, err)) {
        const Tensord__V1__ClientMessage *cm = (const Tensord__V1__ClientMessage *)m;
        td__graph *g = NULL;
        st = td__wire_graph_from(cm->graph_define->graph, &g, err, sizeof err);
        if (note("graph from wire", st, err)) {
            /* values: x, ADD(x, x) f32[2,3], SUM over axis 0 f32[3] */
            if (g->n_ops != 2 || g->values[2].rank != 1 || g->values[2].dims[0] != 3)
                dirty("graph from wire: wrong value descs");
            td__wire_graph wg;
            st = td__wire_graph_to(g, &wg);
            if (note("graph to wire", st, "td__wire_graph_to failed")) {
                if (tensord__v1__graph__get_packed_size(&wg.msg) == 0)
                    dirty("graph to wire: empty encoding");
                td__wire_graph_fini(&wg);
            }
            td__graph_unref(g);
        }
        protobuf_c_message_free_unpacked(m, NULL);
    }
    td__wire_scratch_fini(&scratch);
}

/* ---- scenario: libtensord on local:cpu (record, flush, read) ---- */

static void scen_client(void)
{
    td_context *ctx = NULL;
    td_status st = td_connect("local:cpu", NULL, &ctx);
    if (!note("td_connect", st, td_connect_error())) return;
    td_tensor *a = td_full(ctx, TD_F32, 2, (int64_t[]){2, 3}, 1.5);
    td_tensor *r = td_arange(ctx, TD_F32, 6, 0, 1);
    td_tensor *b = td_reshape(r, 2, (int64_t[]){3, 2});
    td_tensor *mm = td_matmul(a, b);
    td_tensor *ten = td_full(ctx, TD_F32, 2, (int64_t[]){1, 2}, 10.0);
    td_tensor *lt = td_lt(mm, ten);
    td_tensor *w = td_where(lt, mm, ten);
    td_tensor *parts[2] = {w, mm};
    td_tensor *cat = td_concat(2, parts, 0);
    td_tensor *sum = td_sum(cat, 1, (int[]){0}, false);
    /* mm = [[9,13.5],[9,13.5]]; where = [[9,10],[9,10]]; concat rows; sum over rows:
     * [9+9+9+9, 10+10+13.5+13.5] = [36, 47] */
    float got[2];
    if (sum == NULL) {
        st = td_last_status(ctx);
        if (st == TD_OK) dirty("record returned NULL and td_last_status is TD_OK");
        note("record", st, td_last_error(ctx));
    } else {
        st = td_read(sum, got, sizeof got);
        if (note("td_read", st, td_last_error(ctx)))
            expect_f32("client sum", got, (const float[]){36, 47}, 2);
        /* a read started and finished, and one left pending for td_close to free */
        float got_mm[4], got_w[4];
        td_pending_read *p = NULL, *left = NULL;
        st = td_read_start(mm, got_mm, sizeof got_mm, &p);
        if (note("td_read_start", st, td_last_error(ctx))) {
            if (p == NULL) dirty("td_read_start: TD_OK with *out NULL");
            st = td_read_finish(p);
            if (note("td_read_finish", st, td_last_error(ctx)))
                expect_f32("client mm", got_mm, (const float[]){9, 13.5f, 9, 13.5f}, 4);
        } else if (p != NULL) {
            dirty("td_read_start failed and left *out set");
        }
        st = td_read_start(w, got_w, sizeof got_w, &left);
        note("td_read_start (left pending)", st, td_last_error(ctx));
    }
    td_tensor *all[] = {a, r, b, mm, ten, lt, w, cat, sum};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) td_release(all[i]);
    td_close(ctx);
}

/* ---- the harness's own check: a scenario that leaks when an allocation fails ---- */

static void *g_leaked[8]; /* what scen_leaky "leaks", kept reachable for LeakSanitizer */
static int g_n_leaked;

static void scen_leaky(void)
{
    void *a = td__malloc(16), *b = td__malloc(16);
    if (a == NULL || b == NULL) {
        note("leaky", TD_ENOMEM, "out of memory");
        if (g_n_leaked < 8) g_leaked[g_n_leaked++] = a != NULL ? a : b; /* not freed */
        return;
    }
    td__free(a);
    td__free(b);
}

/* ---- driver ---- */

typedef struct scenario {
    const char *name;
    void (*run)(void);
} scenario;

static const scenario scenarios[] = {
    {"session", scen_session},
    {"graph", scen_graph},
    {"wire", scen_wire},
    {"client", scen_client},
};

/* Run one scenario with the Nth allocation failing (0: none). Returns false (with a line
 * on stderr) when the run was not clean. *calls receives the allocations it made. */
static bool run_once(const scenario *sc, long n, long *calls)
{
    uint64_t buffers = td__buffer_live_count();
    g_dirty[0] = '\0';
    atomic_store(&g_calls, 0);
    atomic_store(&g_live, 0);
    atomic_store(&g_injected, false);
    g_errors = 0;
    atomic_store(&g_fail_at, n);
    td__alloc_set_hooks(&fault_hooks);
    sc->run();
    td__alloc_set_hooks(NULL);
    *calls = atomic_load(&g_calls);
    long live = atomic_load(&g_live);
    uint64_t buffers_after = td__buffer_live_count();
    if (live != 0) dirty("%ld allocation(s) outstanding after teardown (a leak)", live);
    if (buffers_after != buffers)
        dirty("td__buffer_live_count is %llu after teardown, %llu before",
              (unsigned long long)buffers_after, (unsigned long long)buffers);
    if (g_dirty[0] != '\0') {
        fprintf(stderr, "fault: %s, allocation %ld failed: %s\n", sc->name, n, g_dirty);
        return false;
    }
    return true;
}

int main(int argc, char **argv)
{
    char err[256];
    /* --self-check: the harness must catch the leak of scen_leaky (exit 0 when it does) */
    bool self_check = argc == 2 && strcmp(argv[1], "--self-check") == 0;
    grpc_init();
    /* Process-wide state (device table, CPU thread pool) is made once, outside the runs. */
    if (td__devices_init(err, sizeof err) != TD_OK || cpu() == NULL) {
        fprintf(stderr, "fault: no cpu device: %s\n", err);
        return 1;
    }
    wire_prepare();
    if (self_check) {
        long calls;
        const scenario leaky = {"leaky", scen_leaky};
        bool caught = !run_once(&leaky, 1, &calls) && !run_once(&leaky, 2, &calls);
        bool quiet = run_once(&leaky, 0, &calls) && run_once(&leaky, 3, &calls);
        printf("fault: self-check: leaks %s, clean runs %s\n", caught ? "caught" : "MISSED",
               quiet ? "pass" : "FLAGGED");
        for (int i = 0; i < g_n_leaked; i++) free(g_leaked[i]);
        free(g_batch_msg);
        free(g_graph_msg);
        grpc_shutdown();
        return caught && quiet ? 0 : 1;
    }
    int bad = 0;
    for (size_t k = 0; k < sizeof scenarios / sizeof scenarios[0]; k++) {
        const scenario *sc = &scenarios[k];
        bool wanted = argc < 2;
        for (int a = 1; a < argc; a++) wanted |= strcmp(argv[a], sc->name) == 0;
        if (!wanted) continue;
        long calls = 0;
        /* warm-up without injection: lazily made process state is made here, and the run
         * must be fully correct */
        if (!run_once(sc, 0, &calls)) {
            bad++;
            continue;
        }
        long total = calls, failed_runs = 0, reported = 0, runs = 0;
        for (long n = 1;; n++) {
            long c = 0;
            if (!run_once(sc, n, &c)) failed_runs++;
            if (atomic_load(&g_injected)) {
                runs++;
                reported += g_errors > 0;
            }
            if (!atomic_load(&g_injected)) break; /* the run made fewer than n allocations */
            if (n > 100000) {
                fprintf(stderr, "fault: %s: more than 100000 allocations, stopping\n", sc->name);
                failed_runs++;
                break;
            }
        }
        printf("fault: %s: %ld allocations per run, each failed in turn (%ld runs: %ld reported "
               "an error, %ld absorbed the failure): %s\n",
               sc->name, total, runs, reported, runs - reported,
               failed_runs == 0 ? "all runs clean" : "NOT CLEAN");
        if (failed_runs) {
            fprintf(stderr, "fault: %s: %ld unclean run(s)\n", sc->name, failed_runs);
            bad++;
        }
    }
    free(g_batch_msg);
    free(g_graph_msg);
    grpc_shutdown();
    return bad == 0 ? 0 : 1;
}

/* graph.c — the public graph API: capture on a context, validate, replay (see tensord.h).
 *
 * Capture reuses the context's op recording: while capturing, ops stay in the context's
 * batch (client/context.c) and their handles are placeholders. td_graph_end renames the
 * tensor ids those ops use into the graph's value numbering (engine/graph.h): declared
 * inputs first, then every tensor from before the capture that an op reads (captured by
 * id), then one value per op. The engine validates the result once, here on the client,
 * and again on the server when the definition arrives, with the same code.
 */
#include "client/capture.h"
#include "common/alloc.h"
#include "common/idmap.h"
#include "engine/graph.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

typedef struct cap_input {
    char *name;
    uint64_t id;
    td__desc desc;
} cap_input;

typedef struct cap_output {
    char *name;
    uint64_t id;
} cap_output;

struct td__capture {
    cap_input *inputs;
    size_t n_inputs, cap_inputs;
    cap_output *outputs;
    size_t n_outputs, cap_outputs;
};

struct td_graph {
    td_context *ctx;
    td__graph *g;
    bool prepared;
    uint64_t runs, defines_sent;
};

void td__capture_free(struct td__capture *cap)
{
    if (cap == NULL) return;
    for (size_t i = 0; i < cap->n_inputs; i++) td__free(cap->inputs[i].name);
    for (size_t i = 0; i < cap->n_outputs; i++) td__free(cap->outputs[i].name);
    td__free(cap->inputs);
    td__free(cap->outputs);
    td__free(cap);
}

static void gerr(td_context *ctx, td_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void gerr(td_context *ctx, td_status st, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    td__ctx_set_error(ctx, st, msg);
}

static bool name_ok(const char *s)
{
    if (s == NULL || s[0] == '\0') return false;
    for (size_t n = 0; s[n] != '\0'; n++)
        if (n >= TD_GRAPH_MAX_NAME || s[n] < 0x21 || s[n] > 0x7e) return false;
    return true;
}

static bool grow(void **arr, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap) return true;
    size_t ncap = *cap ? *cap * 2 : 8;
    void *p = td__realloc(*arr, ncap * elem);
    if (p == NULL) return false;
    *arr = p;
    *cap = ncap;
    return true;
}

td_status td_graph_begin(td_context *ctx)
{
    if (ctx == NULL) return TD_EINVAL;
    struct td__capture *cap = td__calloc(1, sizeof *cap);
    if (cap == NULL) {
        gerr(ctx, TD_ENOMEM, "td_graph_begin: out of memory");
        return TD_ENOMEM;
    }
    td_status st = td__ctx_capture_begin(ctx, cap);
    if (st != TD_OK) td__capture_free(cap);
    return st;
}

td_tensor *td_graph_input(td_context *ctx, const char *name, td_dtype dt, int rank,
                          const int64_t *dims)
{
    if (ctx == NULL) {
        gerr(NULL, TD_EINVAL, "td_graph_input: ctx is NULL");
        return NULL;
    }
    struct td__capture *cap = td__ctx_capture(ctx, NULL);
    if (cap == NULL) {
        gerr(ctx, TD_EINVAL, "td_graph_input: not capturing (call td_graph_begin first)");
        return NULL;
    }
    if (!name_ok(name)) {
        gerr(ctx, TD_EINVAL,
             "td_graph_input: name must be 1..%d printable characters without spaces",
             TD_GRAPH_MAX_NAME);
        return NULL;
    }
    for (size_t i = 0; i < cap->n_inputs; i++)
        if (strcmp(cap->inputs[i].name, name) == 0) {
            gerr(ctx, TD_EINVAL, "td_graph_input: input '%s' is already declared", name);
            return NULL;
        }
    if (cap->n_inputs >= TD_GRAPH_MAX_INPUTS) {
        gerr(ctx, TD_EINVAL, "td_graph_input: a graph has at most %d inputs",
             TD_GRAPH_MAX_INPUTS);
        return NULL;
    }
    if (rank < 0 || rank > TD_MAX_RANK || (rank > 0 && dims == NULL)) {
        gerr(ctx, TD_EINVAL, "td_graph_input '%s': rank %d is outside 0..%d (or dims is NULL)",
             name, rank, TD_MAX_RANK);
        return NULL;
    }
    td__desc d = {.dtype = (uint32_t)dt, .rank = (uint32_t)rank};
    for (int i = 0; i < rank; i++) d.dims[i] = dims[i];
    char why[256];
    if (td__desc_check(&d, why, sizeof why) != TD_OK) {
        gerr(ctx, TD_EINVAL, "td_graph_input '%s': %s", name, why);
        return NULL;
    }
    if (!grow((void **)&cap->inputs, &cap->cap_inputs, cap->n_inputs, sizeof *cap->inputs)) {
        gerr(ctx, TD_ENOMEM, "td_graph_input: out of memory");
        return NULL;
    }
    char *copy = td__strdup(name);
    td_tensor *t = copy != NULL ? td__ctx_new_tensor(ctx, &d, true) : NULL;
    if (t == NULL) {
        td__free(copy);
        gerr(ctx, TD_ENOMEM, "td_graph_input: out of memory");
        return NULL;
    }
    cap->inputs[cap->n_inputs++] = (cap_input){.name = copy, .id = td__tensor_id(t), .desc = d};
    return t;
}

td_status td_graph_output(td_context *ctx, const char *name, td_tensor *t)
{
    if (ctx == NULL) return TD_EINVAL;
    struct td__capture *cap = td__ctx_capture(ctx, NULL);
    if (cap == NULL) {
        gerr(ctx, TD_EINVAL, "td_graph_output: not capturing (call td_graph_begin first)");
        return TD_EINVAL;
    }
    if (t == NULL || td_tensor_context(t) != ctx) {
        gerr(ctx, TD_EINVAL, "td_graph_output '%s': %s", name ? name : "",
             t == NULL ? "tensor is NULL (an op failed to record?)"
                       : "tensor belongs to another context");
        return TD_EINVAL;
    }
    if (!name_ok(name)) {
        gerr(ctx, TD_EINVAL,
             "td_graph_output: name must be 1..%d printable characters without spaces",
             TD_GRAPH_MAX_NAME);
        return TD_EINVAL;
    }
    for (size_t i = 0; i < cap->n_outputs; i++)
        if (strcmp(cap->outputs[i].name, name) == 0) {
            gerr(ctx, TD_EINVAL, "td_graph_output: output '%s' is already declared", name);
            return TD_EINVAL;
        }
    if (cap->n_outputs >= TD_GRAPH_MAX_INPUTS) {
        gerr(ctx, TD_EINVAL, "td_graph_output: a graph has at most %d outputs",
             TD_GRAPH_MAX_INPUTS);
        return TD_EINVAL;
    }
    char *copy = td__strdup(name);
    if (copy == NULL ||
        !grow((void **)&cap->outputs, &cap->cap_outputs, cap->n_outputs, sizeof *cap->outputs)) {
        td__free(copy);
        gerr(ctx, TD_ENOMEM, "td_graph_output: out of memory");
        return TD_ENOMEM;
    }
    cap->outputs[cap->n_outputs++] = (cap_output){.name = copy, .id = td__tensor_id(t)};
    return TD_OK;
}

/* Value tags in the id map during td_graph_end: kind (0 input, 1 captured, 2 op) and
 * index, stored +1 so that no tag is NULL. */
static void *tag(uint64_t kind, uint64_t index) { return (void *)(uintptr_t)((kind << 32 | index) + 1); }
static uint64_t tag_kind(void *v) { return ((uint64_t)(uintptr_t)v - 1) >> 32; }
static uint64_t tag_index(void *v) { return ((uint64_t)(uintptr_t)v - 1) & 0xffffffffu; }

/* Classify tensor `id` read by the graph: known value, or a new captured tensor. */
static td_status resolve(td_context *ctx, td__idmap *map, uint64_t id, uint64_t first_id,
                         uint64_t *n_consts, const char *who, char *err, size_t errlen)
{
    if (td__idmap_get(map, id) != NULL) return TD_OK;
    if (id >= first_id) {
        snprintf(err, errlen, "%s reads tensor %llu, made during the capture but neither an "
                 "input nor the result of an earlier op", who, (unsigned long long)id);
        return TD_EINVAL;
    }
    td_tensor *t = td__ctx_lookup(ctx, id);
    if (t == NULL) {
        snprintf(err, errlen, "%s reads tensor %llu, which was released before td_graph_end; "
                 "a captured tensor must stay alive", who, (unsigned long long)id);
        return TD_EINVAL;
    }
    if (td__tensor_placeholder(t)) {
        snprintf(err, errlen, "%s reads tensor %llu, a placeholder of another graph", who,
                 (unsigned long long)id);
        return TD_EINVAL;
    }
    if (!td__idmap_put(map, id, tag(1, *n_consts))) {
        snprintf(err, errlen, "out of memory");
        return TD_ENOMEM;
    }
    (*n_consts)++;
    return TD_OK;
}

static uint64_t value_of(void *v, uint64_t n_in, uint64_t n_c)
{
    uint64_t k = tag_kind(v), i = tag_index(v);
    return k == 0 ? i : k == 1 ? n_in + i : n_in + n_c + i;
}

td_status td_graph_end(td_context *ctx, td_graph **out)
{
    if (ctx == NULL || out == NULL) return TD_EINVAL;
    uint64_t first_id;
    struct td__capture *cap = td__ctx_capture(ctx, &first_id);
    if (cap == NULL) {
        gerr(ctx, TD_EINVAL, "td_graph_end: not capturing (call td_graph_begin first)");
        return TD_EINVAL;
    }
    size_t n_ops;
    td__op *ops = td__ctx_capture_take(ctx, &n_ops);
    td__idmap map;
    td__idmap_init(&map);
    td__graph *g = NULL;
    td_graph *res = NULL;
    char err[900] = "", who[64];
    td_status st = TD_OK;
    uint64_t n_consts = 0;
    if (cap->n_outputs == 0) {
        snprintf(err, sizeof err, "the graph has no outputs (use td_graph_output)");
        st = TD_EINVAL;
    }
    for (size_t i = 0; st == TD_OK && i < cap->n_inputs; i++)
        if (!td__idmap_put(&map, cap->inputs[i].id, tag(0, i))) st = TD_ENOMEM;
    for (size_t k = 0; st == TD_OK && k < n_ops; k++) {
        snprintf(who, sizeof who, "op %zu (%s)", k, td__op_name(ops[k].opcode));
        for (uint32_t i = 0; st == TD_OK && i < ops[k].n_inputs; i++)
            st = resolve(ctx, &map, ops[k].inputs[i], first_id, &n_consts, who, err, sizeof err);
        if (st == TD_OK && !td__idmap_put(&map, ops[k].output, tag(2, k))) st = TD_ENOMEM;
    }
    for (size_t i = 0; st == TD_OK && i < cap->n_outputs; i++) {
        snprintf(who, sizeof who, "output '%.40s'", cap->outputs[i].name);
        st = resolve(ctx, &map, cap->outputs[i].id, first_id, &n_consts, who, err, sizeof err);
    }
    if (st == TD_OK)
        st = td__graph_alloc(cap->n_inputs, n_consts, n_ops, cap->n_outputs, &g, err,
                             sizeof err);
    if (st == TD_OK) {
        uint64_t n_in = cap->n_inputs;
        for (size_t i = 0; i < cap->n_inputs; i++) {
            g->inputs[i].name = cap->inputs[i].name;
            cap->inputs[i].name = NULL;
            g->inputs[i].desc = cap->inputs[i].desc;
        }
        size_t pos = 0;
        uint64_t id;
        void *v;
        while (td__idmap_next(&map, &pos, &id, &v)) {
            if (tag_kind(v) != 1) continue;
            g->consts[tag_index(v)].id = id;
            g->consts[tag_index(v)].desc = *td__tensor_desc(td__ctx_lookup(ctx, id));
        }
        for (size_t k = 0; k < n_ops; k++) {
            g->ops[k] = ops[k];
            for (uint32_t i = 0; i < ops[k].n_inputs; i++)
                g->ops[k].inputs[i] = value_of(td__idmap_get(&map, ops[k].inputs[i]), n_in,
                                               n_consts);
        }
        for (size_t i = 0; i < cap->n_outputs; i++) {
            g->outputs[i].name = cap->outputs[i].name;
            cap->outputs[i].name = NULL;
            g->outputs[i].value = value_of(td__idmap_get(&map, cap->outputs[i].id), n_in,
                                           n_consts);
        }
        st = td__graph_validate(g, err, sizeof err);
    }
    if (st == TD_OK && (res = td__calloc(1, sizeof *res)) == NULL) st = TD_ENOMEM;
    if (st == TD_ENOMEM && err[0] == '\0') snprintf(err, sizeof err, "out of memory");
    td__idmap_fini(&map);
    td__free(ops);
    td__capture_free(cap);
    if (st != TD_OK) {
        td__graph_unref(g);
        gerr(ctx, st, "td_graph_end: %s", err);
        return st;
    }
    res->ctx = ctx;
    res->g = g;
    *out = res;
    return TD_OK;
}

static int find_name(const char *const *names, int n, const char *want)
{
    for (int i = 0; i < n; i++)
        if (names[i] != NULL && strcmp(names[i], want) == 0) return i;
    return -1;
}

td_status td_graph_run(td_graph *graph, int n_in, const char *const *in_names,
                       td_tensor *const *inputs, int n_out, const char *const *out_names,
                       td_tensor **outputs)
{
    if (graph == NULL) return TD_EINVAL;
    td_context *ctx = graph->ctx;
    const td__graph *g = graph->g;
    if (td__ctx_capturing(ctx)) {
        gerr(ctx, TD_EINVAL, "td_graph_run: not allowed while capturing a graph");
        return TD_EINVAL;
    }
    if (n_in != (int)g->n_inputs || n_out != (int)g->n_outputs ||
        (n_in > 0 && inputs == NULL) || (n_out > 0 && outputs == NULL)) {
        gerr(ctx, TD_EINVAL, "td_graph_run: the graph has %u inputs and %u outputs, got %d and %d",
             g->n_inputs, g->n_outputs, n_in, n_out);
        return TD_EINVAL;
    }
    uint64_t in_ids[TD_GRAPH_MAX_INPUTS];
    uint64_t out_ids[TD_GRAPH_MAX_INPUTS];
    int out_pos[TD_GRAPH_MAX_INPUTS];
    for (uint32_t i = 0; i < g->n_inputs; i++) {
        const char *name = g->inputs[i].name;
        int k = in_names != NULL ? find_name(in_names, n_in, name) : (int)i;
        if (k < 0) {
            gerr(ctx, TD_EINVAL, "td_graph_run: no tensor bound to input '%s'", name);
            return TD_EINVAL;
        }
        const td_tensor *t = inputs[k];
        if (t == NULL || td_tensor_context(t) != ctx || td__tensor_placeholder(t)) {
            gerr(ctx, TD_EINVAL, "td_graph_run: input '%s': %s", name,
                 t == NULL ? "tensor is NULL"
                 : td_tensor_context(t) != ctx ? "tensor belongs to another context"
                                                : "tensor is a graph placeholder");
            return TD_EINVAL;
        }
        if (!td__desc_equal(td__tensor_desc(t), &g->inputs[i].desc)) {
            char a[160], b[160];
            td__desc_str(&g->inputs[i].desc, a, sizeof a);
            td__desc_str(td__tensor_desc(t), b, sizeof b);
            gerr(ctx, TD_EINVAL, "td_graph_run: input '%s' needs %s, got tensor %llu of %s",
                 name, a, (unsigned long long)td__tensor_id(t), b);
            return TD_EINVAL;
        }
        if (td__ctx_tensor_device(t) != 0) {
            gerr(ctx, TD_EINVAL, "td_graph_run: input '%s' (tensor %llu) is on device %s; "
                 "graphs run on the session's first device, %s (move it with td_to_device)",
                 name, (unsigned long long)td__tensor_id(t), td_tensor_device(t),
                 td_device_name(ctx));
            return TD_EINVAL;
        }
        in_ids[i] = td__tensor_id(t);
    }
    for (uint32_t i = 0; i < g->n_outputs; i++) {
        int k = out_names != NULL ? find_name(out_names, n_out, g->outputs[i].name) : (int)i;
        if (k < 0) {
            gerr(ctx, TD_EINVAL, "td_graph_run: output '%s' is not requested",
                 g->outputs[i].name);
            return TD_EINVAL;
        }
        out_pos[i] = k;
    }
    td__transport *tp = td__ctx_transport(ctx);
    td_status st = td__ctx_flush(ctx, "td_graph_run");
    if (st == TD_OK && !graph->prepared && tp->vt->graph_prepare != NULL) {
        st = tp->vt->graph_prepare(tp, g, &graph->defines_sent);
        if (st != TD_OK) gerr(ctx, st, "td_graph_run: %s", tp->err);
    }
    if (st != TD_OK) return st;
    graph->prepared = true;
    td_tensor *made[TD_GRAPH_MAX_INPUTS];
    for (uint32_t i = 0; i < g->n_outputs; i++) {
        made[i] = td__ctx_new_tensor(ctx, &g->values[g->outputs[i].value], false);
        if (made[i] == NULL) {
            for (uint32_t j = 0; j < i; j++) td_release(made[j]);
            return TD_ENOMEM;
        }
        out_ids[i] = td__tensor_id(made[i]);
    }
    st = tp->vt->graph_run(tp, g, in_ids, g->n_inputs, out_ids, g->n_outputs);
    if (st != TD_OK) {
        gerr(ctx, st, "td_graph_run: %s", tp->err);
        for (uint32_t i = 0; i < g->n_outputs; i++) td_release(made[i]);
        return st;
    }
    for (uint32_t i = 0; i < g->n_outputs; i++) outputs[out_pos[i]] = made[i];
    graph->runs++;
    return TD_OK;
}

void td_graph_destroy(td_graph *g)
{
    if (g == NULL) return;
    if (g->prepared) {
        /* the server's session holds the graph once per prepare: let it go, so that a
         * long-lived session can make graphs for new shapes without reaching the
         * per-session graph limit (TD_SESSION_MAX_GRAPHS) */
        td__ctx_graph_release(g->ctx, g->g);
    }
    td__graph_unref(g->g);
    td__free(g);
}

void td_graph_get_info(const td_graph *g, td_graph_info *out)
{
    memset(out, 0, sizeof *out);
    if (g == NULL) return;
    out->n_inputs = (int)g->g->n_inputs;
    out->n_outputs = (int)g->g->n_outputs;
    out->n_ops = (int)g->g->n_ops;
    out->n_captured = (int)g->g->n_consts;
    out->runs = g->runs;
    out->definitions_sent = g->defines_sent;
    td__graph_hash_hex(g->g->hash, TD_GRAPH_HASH_BYTES, out->id);
}

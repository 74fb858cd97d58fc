/* onnx.c — td_onnx_load and friends: an ONNX model as one tensord graph (see tensord.h).
 *
 * Load: the file is decoded with protobuf-c (code generated at build time from Debian's
 * onnx.proto) and validated as a whole before anything runs: IR version and opset in range,
 * every value defined exactly once, every node input defined, the nodes ordered
 * topologically (Kahn; a cycle is an error naming a node on it), every node mapped by the
 * table of client/onnx_ops.c (else TD_EUNSUPPORTED naming the op type, domain and opset),
 * inputs that must be known on the host (shapes, axes) known to be constant, initializers
 * decoded with checked sizes. Initializers and Constant nodes are uploaded once, with
 * td_from_host (so large ones go through the server's blob store).
 *
 * Capture: the nodes are emitted, in order, as calls of the public op functions on graph
 * placeholders (td_graph_begin .. td_graph_end). Every op call runs the engine's op table
 * (td__op_infer), so shapes and dtypes are inferred and checked node by node, and a failure
 * names the node. A graph is specific to the inputs' shapes and to the values of inputs
 * read on the host: a model whose inputs all have fixed dims is captured at load (and its
 * errors reported there); otherwise at the first run with each new set of shapes, keeping
 * the last few graphs.
 */
#include "client/onnx_int.h"
#include "common/alloc.h"
#include "engine/optable.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ONNX_SPECS 4
#define ONNX_MAX_HOST_READ (1u << 16) /* bytes of one graph input read to the host */
#define ONNX_MAX_MATERIALIZE 1024      /* elements of a host value turned into a tensor */

enum { V_INPUT, V_INIT, V_NODE };

typedef struct oval {
    const char *name;
    uint8_t kind;
    int32_t index;      /* graph input index, initializer index, or producing node */
    bool has_host;      /* initializer or Constant output: `host` holds it */
    bool host_needed;   /* a graph input read to the host at each run */
    td__onnx_host host;
    td_tensor *dev;     /* uploaded initializer / Constant */
} oval;

typedef struct onode {
    const Onnx__NodeProto *n;
    const td__onnx_op *op;
    int64_t opset;
    int32_t *in, *out; /* value per input / output; -1: absent */
    bool fold;         /* computes a host value (a shape, axes) from host values */
} onode;

typedef struct oio {
    int32_t value;
    int32_t onnx_type;
    td_onnx_value info;
} oio;

typedef struct ospec {
    uint8_t *key;
    size_t keylen;
    td_graph *g;
} ospec;

struct td_onnx_model {
    td_context *ctx;
    Onnx__ModelProto *proto;
    int64_t opset;
    oval *vals;
    size_t n_vals, cap_vals;
    int32_t *hash;
    size_t hcap;
    onode *nodes;
    size_t n_nodes;
    size_t *order;
    oio *inputs, *outputs;
    size_t n_inputs, n_outputs;
    ospec specs[ONNX_SPECS];
    size_t next_spec;
    td_context *fold_ctx; /* local:cpu, opened for the first folded node */
};

struct td__onnx_emit {
    td_onnx_model *m;
    td_context *ctx; /* the model's, or the folding context while folding a node */
    td_tensor **dev;
    const td__onnx_host **hp;
    td__onnx_host *owned; /* host values made during this capture, by value */
    td_tensor **keep;
    size_t n_keep, cap_keep;
    const onode *cur;
    size_t cur_index;
    int64_t *ints[TD_OP_MAX_INPUTS]; /* td__onnx_host_ints conversions of the node */
    td_status st;
    char err[1024];
};

/* ---- errors ---- */

static td_status merr(td_context *ctx, td_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static td_status merr(td_context *ctx, td_status st, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    td__ctx_set_error(ctx, st, msg);
    return st;
}

static int node_prefix(const td_onnx_model *m, size_t k, char *buf, size_t len)
{
    const Onnx__NodeProto *n = m->nodes[k].n;
    if (n->name != NULL && n->name[0] != '\0')
        return snprintf(buf, len, "onnx node %zu '%.100s' (%.60s)", k, n->name,
                        n->op_type ? n->op_type : "");
    return snprintf(buf, len, "onnx node %zu (%.60s)", k, n->op_type ? n->op_type : "");
}

td_status td__onnx_fail(td__onnx_emit *e, td_status st, const char *fmt, ...)
{
    if (e->st != TD_OK) return e->st;
    int p = node_prefix(e->m, e->cur_index, e->err, sizeof e->err);
    if (p < 0 || (size_t)p >= sizeof e->err - 3) p = 0;
    e->err[p++] = ':';
    e->err[p++] = ' ';
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->err + p, sizeof e->err - (size_t)p, fmt, ap);
    va_end(ap);
    e->st = st;
    return st;
}

td_status td__onnx_fail_op(td__onnx_emit *e)
{
    td_status st = td_last_status(e->ctx);
    return td__onnx_fail(e, st != TD_OK ? st : TD_EINVAL, "%s", td_last_error(e->ctx));
}

/* ---- values ---- */

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

static int32_t find_val(const td_onnx_model *m, const char *name)
{
    if (m->hcap == 0) return -1;
    for (size_t i = hash_str(name) & (m->hcap - 1);; i = (i + 1) & (m->hcap - 1)) {
        int32_t v = m->hash[i];
        if (v < 0) return -1;
        if (strcmp(m->vals[v].name, name) == 0) return v;
    }
}

/* Add a value (names unique; the caller checked find_val). */
static int32_t add_val(td_onnx_model *m, const char *name, uint8_t kind, int32_t index)
{
    if (m->n_vals >= m->cap_vals || m->n_vals > INT32_MAX / 2) return -1;
    int32_t v = (int32_t)m->n_vals++;
    m->vals[v] = (oval){.name = name, .kind = kind, .index = index};
    for (size_t i = hash_str(name) & (m->hcap - 1);; i = (i + 1) & (m->hcap - 1))
        if (m->hash[i] < 0) {
            m->hash[i] = v;
            break;
        }
    return v;
}

/* ---- attributes ---- */

const Onnx__AttributeProto *td__onnx_attr(const Onnx__NodeProto *n, const char *name)
{
    for (size_t i = 0; i < n->n_attribute; i++)
        if (n->attribute[i]->name != NULL && strcmp(n->attribute[i]->name, name) == 0)
            return n->attribute[i];
    return NULL;
}

int64_t td__onnx_attr_i(const Onnx__NodeProto *n, const char *name, int64_t dflt)
{
    const Onnx__AttributeProto *a = td__onnx_attr(n, name);
    return a != NULL && a->has_i ? a->i : dflt;
}

float td__onnx_attr_f(const Onnx__NodeProto *n, const char *name, float dflt)
{
    const Onnx__AttributeProto *a = td__onnx_attr(n, name);
    return a != NULL && a->has_f ? a->f : dflt;
}

/* ---- emitter services ---- */

td_context *td__onnx_ctx(td__onnx_emit *e) { return e->ctx; }
int td__onnx_nin(td__onnx_emit *e, const Onnx__NodeProto *n) { return (int)n->n_input; }
int td__onnx_nout(const Onnx__NodeProto *n) { return (int)n->n_output; }

td_tensor *td__onnx_keep(td__onnx_emit *e, td_tensor *t)
{
    if (t == NULL) return NULL;
    if (e->n_keep == e->cap_keep) {
        size_t nc = e->cap_keep ? e->cap_keep * 2 : 64;
        td_tensor **p = td__realloc(e->keep, nc * sizeof *p);
        if (p == NULL) {
            td_release(t);
            td__ctx_set_error(e->ctx, TD_ENOMEM, "onnx: out of memory");
            return NULL;
        }
        e->keep = p;
        e->cap_keep = nc;
    }
    e->keep[e->n_keep++] = t;
    return t;
}

/* A host value as a tensor, made of td_full scalars joined with td_concat (no host upload
 * is allowed while capturing). Only small values (shapes) get here. */
td_tensor *td__onnx_materialize(td__onnx_emit *e, const td__onnx_host *h)
{
    td_context *ctx = e->ctx;
    td_dtype dt = (td_dtype)h->desc.dtype;
    int64_t n = td__desc_nelem(&h->desc);
    if (n > ONNX_MAX_MATERIALIZE) {
        td__onnx_fail(e, TD_EUNSUPPORTED, "a computed constant of %lld elements is too large "
                      "(at most %d)", (long long)n, ONNX_MAX_MATERIALIZE);
        return NULL;
    }
    if (n == 0 || h->desc.rank == 0) {
        double v = 0;
        if (n == 1 && dt == TD_I64) v = (double)*(const int64_t *)h->data;
        else if (n == 1 && dt == TD_I32) v = *(const int32_t *)h->data;
        else if (n == 1 && dt == TD_F32) v = *(const float *)h->data;
        else if (n == 1 && dt == TD_F64) v = *(const double *)h->data;
        else if (n == 1 && (dt == TD_BOOL || dt == TD_U8)) v = *(const uint8_t *)h->data;
        else if (n == 1) {
            td__onnx_fail(e, TD_EUNSUPPORTED, "a computed %s constant cannot be used as a "
                          "tensor", td_dtype_name(dt));
            return NULL;
        }
        return td__onnx_keep(e, td_full(ctx, dt, (int)h->desc.rank, h->desc.dims, v));
    }
    td_tensor *acc = NULL;
    for (int64_t i = 0; i < n; i += 8) {
        td_tensor *part[9];
        int np = 0;
        if (acc != NULL) part[np++] = acc;
        for (int64_t j = i; j < n && j < i + 8; j++) {
            double v;
            switch (dt) {
            case TD_I64: {
                int64_t x = ((const int64_t *)h->data)[j];
                if (x > (1ll << 53) || x < -(1ll << 53)) {
                    if (x == INT64_MAX || x == INT64_MIN) {
                        v = (double)x;
                        break;
                    }
                    td__onnx_fail(e, TD_EUNSUPPORTED, "computed constant %lld is not exact "
                                  "in a double", (long long)x);
                    return NULL;
                }
                v = (double)x;
                break;
            }
            case TD_I32: v = ((const int32_t *)h->data)[j]; break;
            case TD_F32: v = ((const float *)h->data)[j]; break;
            case TD_F64: v = ((const double *)h->data)[j]; break;
            default:
                td__onnx_fail(e, TD_EUNSUPPORTED, "a computed %s constant cannot be used "
                              "as a tensor", td_dtype_name(dt));
                return NULL;
            }
            part[np++] = td__onnx_keep(e, td_full(ctx, dt, 1, (int64_t[]){1}, v));
            if (part[np - 1] == NULL) return NULL;
        }
        acc = np == 1 ? part[0] : td__onnx_keep(e, td_concat(np > 8 ? 8 : np, part, 0));
        if (np > 8) {
            td_tensor *two[2] = {acc, part[8]};
            acc = td__onnx_keep(e, td_concat(2, two, 0));
        }
        if (acc == NULL) return NULL;
    }
    return td__onnx_keep(e, td_reshape(acc, (int)h->desc.rank, h->desc.dims));
}

td_tensor *td__onnx_in(td__onnx_emit *e, const Onnx__NodeProto *n, int k)
{
    if (k < 0 || (size_t)k >= n->n_input) return NULL;
    int32_t v = e->cur->in[k];
    if (v < 0) return NULL;
    if (e->dev[v] == NULL && e->hp[v] != NULL) {
        e->dev[v] = td__onnx_materialize(e, e->hp[v]);
        if (e->dev[v] == NULL && e->st == TD_OK) td__onnx_fail_op(e);
    }
    return e->dev[v];
}

const td__onnx_host *td__onnx_host_in(td__onnx_emit *e, const Onnx__NodeProto *n, int k)
{
    if (k < 0 || (size_t)k >= n->n_input || e->cur->in[k] < 0) return NULL;
    return e->hp[e->cur->in[k]];
}

bool td__onnx_host_ints(td__onnx_emit *e, const Onnx__NodeProto *n, int k, bool optional,
                        const int64_t **vals, size_t *count, bool *present)
{
    if (present) *present = false;
    bool absent = k < 0 || (size_t)k >= n->n_input || e->cur->in[k] < 0;
    if (absent) {
        if (optional) {
            *vals = NULL;
            *count = 0;
            return true;
        }
        td__onnx_fail(e, TD_EINVAL, "input %d is required", k);
        return false;
    }
    const td__onnx_host *h = e->hp[e->cur->in[k]];
    const char *name = n->input[k];
    if (h == NULL) {
        td__onnx_fail(e, TD_EUNSUPPORTED, "input '%.100s' must be a constant known before the "
                      "run (an initializer, a Constant node, a Shape or a graph input)", name);
        return false;
    }
    if (h->desc.dtype != TD_I64 && h->desc.dtype != TD_I32) {
        td__onnx_fail(e, TD_EINVAL, "input '%.100s' must be int32 or int64, not %s", name,
                      td_dtype_name((td_dtype)h->desc.dtype));
        return false;
    }
    size_t cnt = (size_t)td__desc_nelem(&h->desc);
    if (k >= TD_OP_MAX_INPUTS) {
        td__onnx_fail(e, TD_EUNSUPPORTED, "input %d cannot be a host value", k);
        return false;
    }
    td__free(e->ints[k]);
    e->ints[k] = td__malloc((cnt ? cnt : 1) * sizeof(int64_t));
    if (e->ints[k] == NULL) {
        td__onnx_fail(e, TD_ENOMEM, "out of memory");
        return false;
    }
    for (size_t i = 0; i < cnt; i++)
        e->ints[k][i] = h->desc.dtype == TD_I64 ? ((const int64_t *)h->data)[i]
                                                : ((const int32_t *)h->data)[i];
    *vals = e->ints[k];
    *count = cnt;
    if (present) *present = true;
    return true;
}

td_status td__onnx_set_out(td__onnx_emit *e, const Onnx__NodeProto *n, int k, td_tensor *t)
{
    if (t == NULL) return e->st != TD_OK ? e->st : td__onnx_fail_op(e);
    if (k < 0 || (size_t)k >= n->n_output || e->cur->out[k] < 0) return TD_OK;
    e->dev[e->cur->out[k]] = t;
    return TD_OK;
}

td_status td__onnx_set_host_out(td__onnx_emit *e, const Onnx__NodeProto *n, int k,
                                td__onnx_host *h)
{
    if (k < 0 || (size_t)k >= n->n_output || e->cur->out[k] < 0) {
        td__onnx_host_fini(h);
        return TD_OK;
    }
    int32_t v = e->cur->out[k];
    td__onnx_host_fini(&e->owned[v]);
    e->owned[v] = *h;
    h->data = NULL;
    e->hp[v] = &e->owned[v];
    return TD_OK;
}

/* ---- capture of one specialization ---- */

static void emit_fini(td__onnx_emit *e)
{
    for (size_t i = 0; i < e->n_keep; i++) td_release(e->keep[i]);
    td__free(e->keep);
    if (e->owned != NULL)
        for (size_t v = 0; v < e->m->n_vals; v++) td__onnx_host_fini(&e->owned[v]);
    td__free(e->owned);
    td__free(e->dev);
    td__free((void *)e->hp);
    for (int k = 0; k < TD_OP_MAX_INPUTS; k++) td__free(e->ints[k]);
}


/* Fold node nd: its inputs all have host values (the load-time walk made sure); run its
 * handler eagerly on a private local:cpu context and read its outputs back as host
 * values, which later nodes use as shapes or axes (or as small tensors, materialized). */
#define ONNX_MAX_FOLD 65536 /* elements of one folded input or output */
static void fold_node(td__onnx_emit *e, const onode *nd)
{
    td_onnx_model *m = e->m;
    if (m->fold_ctx == NULL && td_connect("local:cpu", NULL, &m->fold_ctx) != TD_OK) {
        td__onnx_fail(e, TD_EUNSUPPORTED, "cannot open a local:cpu context to compute a "
                      "shape on the host: %s", td_connect_error());
        return;
    }
    td_tensor **dev = e->dev, **keep = e->keep;
    size_t n_keep = e->n_keep, cap_keep = e->cap_keep;
    td_tensor **fdev = td__calloc(m->n_vals ? m->n_vals : 1, sizeof *fdev);
    if (fdev == NULL) {
        td__onnx_fail(e, TD_ENOMEM, "out of memory");
        return;
    }
    e->ctx = m->fold_ctx;
    e->dev = fdev;
    e->keep = NULL;
    e->n_keep = e->cap_keep = 0;
    for (size_t j = 0; j < nd->n->n_input && e->st == TD_OK; j++) {
        int32_t v = nd->in[j];
        if (v < 0 || fdev[v] != NULL) continue;
        const td__onnx_host *h = e->hp[v];
        if (h == NULL) {
            td__onnx_fail(e, TD_EINTERNAL, "input '%.100s' has no host value to fold",
                          nd->n->input[j]);
            break;
        }
        if (td__desc_nelem(&h->desc) > ONNX_MAX_FOLD) {
            td__onnx_fail(e, TD_EUNSUPPORTED, "computing a shape from '%.100s' of %lld "
                          "elements on the host is not supported (at most %d)",
                          nd->n->input[j], (long long)td__desc_nelem(&h->desc), ONNX_MAX_FOLD);
            break;
        }
        fdev[v] = td__onnx_keep(e, td_from_host(e->ctx, (td_dtype)h->desc.dtype,
                                                (int)h->desc.rank, h->desc.dims, h->data));
        if (fdev[v] == NULL) td__onnx_fail_op(e);
    }
    if (e->st == TD_OK && nd->op->fn(e, nd->n, nd->op) != TD_OK && e->st == TD_OK)
        td__onnx_fail_op(e);
    for (size_t j = 0; j < nd->n->n_output && e->st == TD_OK; j++) {
        int32_t v = nd->out[j];
        if (v < 0 || e->hp[v] != NULL || fdev[v] == NULL) continue;
        td_tensor *t = fdev[v];
        td__onnx_host h = {.desc = *td__tensor_desc(t), .nbytes = td_nbytes(t)};
        if (td_nelem(t) > ONNX_MAX_FOLD) {
            td__onnx_fail(e, TD_EUNSUPPORTED, "a host-computed value of %lld elements is too "
                          "large (at most %d)", (long long)td_nelem(t), ONNX_MAX_FOLD);
            break;
        }
        if (h.nbytes > 0 && (h.data = td__malloc(h.nbytes)) == NULL) {
            td__onnx_fail(e, TD_ENOMEM, "out of memory");
            break;
        }
        if (h.nbytes > 0 && td_read(t, h.data, h.nbytes) != TD_OK) {
            td__onnx_host_fini(&h);
            td__onnx_fail_op(e);
            break;
        }
        td__onnx_set_host_out(e, nd->n, (int)j, &h);
    }
    for (size_t i = 0; i < e->n_keep; i++) td_release(e->keep[i]);
    td__free(e->keep);
    td__free(fdev);
    e->ctx = m->ctx;
    e->dev = dev;
    e->keep = keep;
    e->n_keep = n_keep;
    e->cap_keep = cap_keep;
}

static bool desc_matches_decl(const td__desc *d, const td_onnx_value *decl)
{
    if (d->dtype != (uint32_t)decl->dtype) return false;
    if (decl->rank < 0) return true;
    if ((int)d->rank != decl->rank) return false;
    for (int i = 0; i < decl->rank; i++)
        if (decl->dims[i] >= 0 && decl->dims[i] != d->dims[i]) return false;
    return true;
}

/* Capture the model for inputs of descs `in` (one per graph input) and host values `hin`
 * (for inputs read on the host; others NULL). On TD_OK *out owns the graph. */
static td_status specialize(td_onnx_model *m, const td__desc *in, td__onnx_host *hin,
                            td_graph **out)
{
    td_context *ctx = m->ctx;
    td__onnx_emit e = {.m = m, .ctx = m->ctx};
    e.dev = td__calloc(m->n_vals ? m->n_vals : 1, sizeof *e.dev);
    e.hp = td__calloc(m->n_vals ? m->n_vals : 1, sizeof *e.hp);
    e.owned = td__calloc(m->n_vals ? m->n_vals : 1, sizeof *e.owned);
    if (e.dev == NULL || e.hp == NULL || e.owned == NULL) {
        emit_fini(&e);
        return merr(ctx, TD_ENOMEM, "td_onnx: out of memory");
    }
    for (size_t v = 0; v < m->n_vals; v++)
        if (m->vals[v].has_host) {
            e.dev[v] = m->vals[v].dev;
            e.hp[v] = &m->vals[v].host;
        }
    for (size_t i = 0; i < m->n_inputs; i++) {
        int32_t v = m->inputs[i].value;
        if (hin != NULL && hin[i].desc.rank <= TD_MAX_RANK && m->vals[v].host_needed) {
            e.owned[v] = hin[i];
            hin[i].data = NULL;
            e.hp[v] = &e.owned[v];
        }
    }
    td_status st = td_graph_begin(ctx);
    if (st != TD_OK) {
        emit_fini(&e);
        return st;
    }
    char nm[32];
    for (size_t i = 0; i < m->n_inputs && e.st == TD_OK; i++) {
        snprintf(nm, sizeof nm, "in%zu", i);
        td_tensor *t = td__onnx_keep(
            &e, td_graph_input(ctx, nm, (td_dtype)in[i].dtype, (int)in[i].rank, in[i].dims));
        if (t == NULL) {
            e.st = td_last_status(ctx);
            snprintf(e.err, sizeof e.err, "onnx input '%.100s': %s", m->inputs[i].info.name,
                     td_last_error(ctx));
        }
        e.dev[m->inputs[i].value] = t;
    }
    for (size_t k = 0; k < m->n_nodes && e.st == TD_OK; k++) {
        size_t idx = m->order[k];
        const onode *nd = &m->nodes[idx];
        if (nd->op == NULL) continue; /* Constant: done at load */
        e.cur = nd;
        e.cur_index = idx;
        const td__onnx_op *op = nd->op;
        if (!nd->fold && op->opcode != UINT32_MAX && nd->n->n_input > 0 && nd->in[0] >= 0) {
            td_tensor *x0 = td__onnx_in(&e, nd->n, 0);
            if (x0 != NULL) {
                const td__op_row *row = td__op_row_of(op->opcode);
                td_dtype dt = td_tensor_dtype(x0);
                if (row != NULL && !td__dtype_in((uint32_t)dt, row->in_dtype)) {
                    td__onnx_fail(&e, TD_EUNSUPPORTED, "input '%.100s' is %s; tensord's %s "
                                  "takes %s", nd->n->input[0], td_dtype_name(dt), row->name,
                                  td__dtype_class_str(row->in_dtype));
                    break;
                }
            }
            if (e.st != TD_OK) break;
        }
        if (nd->fold) {
            fold_node(&e, nd);
        } else {
            st = op->fn(&e, nd->n, op);
            if (st != TD_OK && e.st == TD_OK) td__onnx_fail_op(&e);
        }
        for (size_t j = 0; e.st == TD_OK && j < nd->n->n_output; j++) {
            int32_t v = nd->out[j];
            if (v >= 0 && e.dev[v] == NULL && e.hp[v] == NULL)
                td__onnx_fail(&e, TD_EUNSUPPORTED, "output %zu ('%.100s') is not produced by "
                              "this mapping", j, nd->n->output[j]);
        }
        for (int j = 0; j < TD_OP_MAX_INPUTS; j++) {
            td__free(e.ints[j]);
            e.ints[j] = NULL;
        }
    }
    for (size_t i = 0; i < m->n_outputs && e.st == TD_OK; i++) {
        int32_t v = m->outputs[i].value;
        const td_onnx_value *decl = &m->outputs[i].info;
        td_tensor *t = e.dev[v];
        if (t == NULL && e.hp[v] != NULL) {
            e.cur_index = m->vals[v].kind == V_NODE ? (size_t)m->vals[v].index : 0;
            t = e.dev[v] = td__onnx_materialize(&e, e.hp[v]);
            if (t == NULL) {
                if (e.st == TD_OK) td__onnx_fail_op(&e);
                break;
            }
        }
        if (t == NULL) {
            e.st = TD_EINTERNAL;
            snprintf(e.err, sizeof e.err, "onnx output '%.100s' has no value", decl->name);
            break;
        }
        if (!desc_matches_decl(td__tensor_desc(t), decl)) {
            char a[160];
            td__desc_str(td__tensor_desc(t), a, sizeof a);
            e.st = TD_EINVAL;
            snprintf(e.err, sizeof e.err, "onnx output '%.100s': the model declares %s of "
                     "rank %d, the nodes compute %s", decl->name, td_dtype_name(decl->dtype),
                     decl->rank, a);
            break;
        }
        snprintf(nm, sizeof nm, "out%zu", i);
        if (td_graph_output(ctx, nm, t) != TD_OK) {
            e.st = td_last_status(ctx);
            snprintf(e.err, sizeof e.err, "onnx output '%.100s': %s", decl->name,
                     td_last_error(ctx));
        }
    }
    td_graph *g = NULL;
    st = td_graph_end(ctx, &g);
    if (e.st == TD_OK && st != TD_OK) {
        e.st = st;
        snprintf(e.err, sizeof e.err, "onnx model: %s", td_last_error(ctx));
    }
    if (e.st != TD_OK) {
        td_graph_destroy(g);
        st = e.st;
        char msg[sizeof e.err];
        snprintf(msg, sizeof msg, "%s", e.err);
        emit_fini(&e);
        return merr(ctx, st, "%s", msg);
    }
    emit_fini(&e);
    *out = g;
    return TD_OK;
}

/* ---- load ---- */

static void model_free(td_onnx_model *m)
{
    if (m == NULL) return;
    for (size_t i = 0; i < ONNX_SPECS; i++) {
        td_graph_destroy(m->specs[i].g);
        td__free(m->specs[i].key);
    }
    for (size_t v = 0; v < m->n_vals; v++) {
        td_release(m->vals[v].dev);
        td__onnx_host_fini(&m->vals[v].host);
    }
    for (size_t k = 0; k < m->n_nodes; k++) {
        td__free(m->nodes[k].in);
        td__free(m->nodes[k].out);
    }
    td__free(m->nodes);
    td__free(m->order);
    td__free(m->vals);
    td__free(m->hash);
    td__free(m->inputs);
    td__free(m->outputs);
    if (m->proto != NULL) onnx__model_proto__free_unpacked(m->proto, &td__onnx_allocator);
    td_close(m->fold_ctx);
    td__free(m);
}

static bool is_default_domain(const char *d)
{
    return d == NULL || d[0] == '\0' || strcmp(d, "ai.onnx") == 0;
}

/* Declared type of a graph input/output. */
static td_status value_info(td_context *ctx, const Onnx__ValueInfoProto *vi, const char *what,
                            oio *io)
{
    const char *name = vi->name;
    io->info.name = name;
    const Onnx__TypeProto *tp = vi->type;
    if (tp == NULL || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE ||
        tp->tensor_type == NULL)
        return merr(ctx, TD_EUNSUPPORTED, "onnx %s '%.100s': only tensor values are supported "
                    "(not sequences, maps, optionals or sparse tensors)", what, name);
    const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
    io->onnx_type = tt->has_elem_type ? tt->elem_type : 0;
    if (!td__onnx_dtype(io->onnx_type, &io->info.dtype))
        return merr(ctx, io->onnx_type == 0 ? TD_EINVAL : TD_EUNSUPPORTED,
                    "onnx %s '%.100s' has data type %s (%d), which tensord does not support",
                    what, name, td__onnx_dtype_name(io->onnx_type), (int)io->onnx_type);
    if (tt->shape == NULL) {
        io->info.rank = -1;
        return TD_OK;
    }
    if (tt->shape->n_dim > TD_MAX_RANK)
        return merr(ctx, TD_EUNSUPPORTED, "onnx %s '%.100s' has rank %zu, more than tensord's %d",
                    what, name, tt->shape->n_dim, TD_MAX_RANK);
    io->info.rank = (int)tt->shape->n_dim;
    for (size_t i = 0; i < tt->shape->n_dim; i++) {
        const Onnx__TensorShapeProto__Dimension *d = tt->shape->dim[i];
        if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE) {
            if (d->dim_value < 0)
                return merr(ctx, TD_EINVAL, "onnx %s '%.100s': dim %zu is %lld", what, name, i,
                            (long long)d->dim_value);
            io->info.dims[i] = d->dim_value;
        } else {
            io->info.dims[i] = -1;
        }
    }
    return TD_OK;
}

static bool all_static(const td_onnx_model *m)
{
    for (size_t i = 0; i < m->n_inputs; i++) {
        const td_onnx_value *x = &m->inputs[i].info;
        if (x->rank < 0 || m->vals[m->inputs[i].value].host_needed) return false;
        for (int d = 0; d < x->rank; d++)
            if (x->dims[d] < 0) return false;
    }
    return true;
}

static td_status constant_node(td_onnx_model *m, size_t k, char *err, size_t errlen)
{
    const Onnx__NodeProto *n = m->nodes[k].n;
    char pre[200];
    node_prefix(m, k, pre, sizeof pre);
    if (n->n_output != 1 || m->nodes[k].out[0] < 0 || n->n_attribute != 1) {
        snprintf(err, errlen, "%s: needs one output and exactly one value attribute", pre);
        return TD_EINVAL;
    }
    oval *v = &m->vals[m->nodes[k].out[0]];
    const Onnx__AttributeProto *a = n->attribute[0];
    const char *an = a->name ? a->name : "";
    td__onnx_host *h = &v->host;
    td_status st = TD_OK;
    if (strcmp(an, "value") == 0 && a->t != NULL) {
        char what[260];
        snprintf(what, sizeof what, "%s: value", pre);
        st = td__onnx_host_decode(a->t, what, h, err, errlen);
    } else if (strcmp(an, "value_float") == 0 || strcmp(an, "value_int") == 0 ||
               strcmp(an, "value_floats") == 0 || strcmp(an, "value_ints") == 0) {
        bool isf = an[6] == 'f';
        bool list = an[strlen(an) - 1] == 's';
        size_t cnt = list ? (isf ? a->n_floats : a->n_ints) : 1;
        if (cnt > ((size_t)1 << 40)) cnt = 0;
        h->desc = (td__desc){.dtype = isf ? TD_F32 : TD_I64, .rank = list ? 1u : 0u};
        h->desc.dims[0] = (int64_t)cnt;
        h->nbytes = cnt * (isf ? 4 : 8);
        if (h->nbytes > 0 && (h->data = td__malloc(h->nbytes)) == NULL) st = TD_ENOMEM;
        else if (cnt > 0) {
            if (!list && isf) *(float *)h->data = a->f;
            else if (!list) *(int64_t *)h->data = a->i;
            else memcpy(h->data, isf ? (void *)a->floats : (void *)a->ints, h->nbytes);
        }
        if (st == TD_ENOMEM) snprintf(err, errlen, "%s: out of memory", pre);
    } else {
        snprintf(err, errlen, "%s: attribute '%.60s' is not supported (sparse or string "
                 "constants)", pre, an);
        st = TD_EUNSUPPORTED;
    }
    if (st == TD_OK) v->has_host = true;
    return st;
}

td_status td_onnx_load_memory(td_context *ctx, const void *data, size_t nbytes,
                              td_onnx_model **out)
{
    if (ctx == NULL || out == NULL || (data == NULL && nbytes > 0))
        return merr(ctx, TD_EINVAL, "td_onnx_load: ctx, data or out is NULL");
    if (td__ctx_capturing(ctx))
        return merr(ctx, TD_EINVAL, "td_onnx_load: not allowed while capturing a graph");
    td_onnx_model *m = td__calloc(1, sizeof *m);
    if (m == NULL) return merr(ctx, TD_ENOMEM, "td_onnx_load: out of memory");
    m->ctx = ctx;
    char err[900] = "";
    td_status st = TD_OK;
    m->proto = onnx__model_proto__unpack(&td__onnx_allocator, nbytes, data);
    if (m->proto == NULL) {
        model_free(m);
        return merr(ctx, TD_EINVAL, "td_onnx_load: not a valid ONNX model: the protobuf is "
                    "truncated or malformed (%zu bytes)", nbytes);
    }
    const Onnx__ModelProto *mp = m->proto;
    if (!mp->has_ir_version || mp->ir_version < 1) {
        model_free(m);
        return merr(ctx, TD_EINVAL, "td_onnx_load: the model has no IR version (not an ONNX "
                    "model?)");
    }
    if (mp->ir_version < TD_ONNX_IR_MIN || mp->ir_version > TD_ONNX_IR_MAX) {
        long long ir = (long long)mp->ir_version;
        model_free(m);
        return merr(ctx, TD_EUNSUPPORTED, "td_onnx_load: IR version %lld is outside the "
                    "supported range %d..%d", ir, TD_ONNX_IR_MIN, TD_ONNX_IR_MAX);
    }
    m->opset = -1;
    for (size_t i = 0; i < mp->n_opset_import; i++) {
        const Onnx__OperatorSetIdProto *o = mp->opset_import[i];
        if (is_default_domain(o->domain)) m->opset = o->has_version ? o->version : 0;
    }
    if (m->opset >= 0 && (m->opset < TD_ONNX_OPSET_MIN || m->opset > TD_ONNX_OPSET_MAX)) {
        int64_t o = m->opset;
        model_free(m);
        return merr(ctx, TD_EUNSUPPORTED, "td_onnx_load: opset %lld of domain 'ai.onnx' is "
                    "outside the supported range %d..%d", (long long)o, TD_ONNX_OPSET_MIN,
                    TD_ONNX_OPSET_MAX);
    }
    const Onnx__GraphProto *g = mp->graph;
    if (g == NULL) {
        model_free(m);
        return merr(ctx, TD_EINVAL, "td_onnx_load: the model has no graph");
    }
    if (g->n_sparse_initializer > 0) {
        model_free(m);
        return merr(ctx, TD_EUNSUPPORTED, "td_onnx_load: sparse initializers are not supported");
    }
    /* Value table: initializers, inputs, node outputs. */
    size_t cap = g->n_initializer + g->n_input;
    bool ok = true;
    for (size_t k = 0; k < g->n_node && ok; k++)
        ok = !__builtin_add_overflow(cap, g->node[k]->n_output, &cap);
    size_t hcap = 16;
    while (ok && hcap < 2 * cap + 1) {
        if (hcap > SIZE_MAX / 4) ok = false;
        hcap *= 2;
    }
    if (ok) {
        m->vals = td__calloc(cap ? cap : 1, sizeof *m->vals);
        m->hash = td__malloc(hcap * sizeof *m->hash);
        m->nodes = td__calloc(g->n_node ? g->n_node : 1, sizeof *m->nodes);
        m->order = td__calloc(g->n_node ? g->n_node : 1, sizeof *m->order);
        m->inputs = td__calloc(g->n_input ? g->n_input : 1, sizeof *m->inputs);
        m->outputs = td__calloc(g->n_output ? g->n_output : 1, sizeof *m->outputs);
    }
    if (!ok || m->vals == NULL || m->hash == NULL || m->nodes == NULL || m->order == NULL ||
        m->inputs == NULL || m->outputs == NULL) {
        model_free(m);
        return merr(ctx, TD_ENOMEM, "td_onnx_load: out of memory");
    }
    m->cap_vals = cap;
    m->hcap = hcap;
    for (size_t i = 0; i < hcap; i++) m->hash[i] = -1;
    for (size_t i = 0; i < g->n_initializer && st == TD_OK; i++) {
        const Onnx__TensorProto *tp = g->initializer[i];
        const char *name = tp->name ? tp->name : "";
        if (name[0] == '\0' || find_val(m, name) >= 0) {
            snprintf(err, sizeof err, "initializer %zu: name '%.100s' is %s", i, name,
                     name[0] ? "used twice" : "empty");
            st = TD_EINVAL;
            break;
        }
        int32_t v = add_val(m, name, V_INIT, (int32_t)i);
        char what[200];
        snprintf(what, sizeof what, "initializer '%.100s'", name);
        st = td__onnx_host_decode(tp, what, &m->vals[v].host, err, sizeof err);
        if (st == TD_OK) m->vals[v].has_host = true;
    }
    for (size_t i = 0; i < g->n_input && st == TD_OK; i++) {
        const char *name = g->input[i]->name ? g->input[i]->name : "";
        int32_t v = find_val(m, name);
        if (v >= 0 && m->vals[v].kind == V_INIT) continue; /* an initializer's default */
        if (name[0] == '\0' || v >= 0) {
            snprintf(err, sizeof err, "graph input %zu: name '%.100s' is %s", i, name,
                     name[0] ? "used twice" : "empty");
            st = TD_EINVAL;
            break;
        }
        oio *io = &m->inputs[m->n_inputs];
        if ((st = value_info(ctx, g->input[i], "input", io)) != TD_OK) {
            model_free(m);
            return st;
        }
        io->value = add_val(m, name, V_INPUT, (int32_t)m->n_inputs);
        m->n_inputs++;
    }
    if (m->n_inputs > 64 && st == TD_OK) {
        snprintf(err, sizeof err, "the graph has %zu inputs, at most 64 are supported",
                 m->n_inputs);
        st = TD_EUNSUPPORTED;
    }
    m->n_nodes = g->n_node;
    for (size_t k = 0; k < g->n_node && st == TD_OK; k++) {
        const Onnx__NodeProto *n = g->node[k];
        onode *nd = &m->nodes[k];
        nd->n = n;
        char pre[200];
        node_prefix(m, k, pre, sizeof pre);
        if (n->op_type == NULL || n->op_type[0] == '\0') {
            snprintf(err, sizeof err, "%s: no op_type", pre);
            st = TD_EINVAL;
            break;
        }
        nd->in = td__malloc((n->n_input ? n->n_input : 1) * sizeof *nd->in);
        nd->out = td__malloc((n->n_output ? n->n_output : 1) * sizeof *nd->out);
        if (nd->in == NULL || nd->out == NULL) {
            st = TD_ENOMEM;
            snprintf(err, sizeof err, "out of memory");
            break;
        }
        for (size_t j = 0; j < n->n_output; j++) {
            const char *name = n->output[j];
            nd->out[j] = -1;
            if (name == NULL || name[0] == '\0') continue;
            if (find_val(m, name) >= 0) {
                snprintf(err, sizeof err, "%s: output '%.100s' is already defined (a graph "
                         "input, an initializer or another node's output)", pre, name);
                st = TD_EINVAL;
                break;
            }
            nd->out[j] = add_val(m, name, V_NODE, (int32_t)k);
        }
    }
    /* Inputs, op mapping. */
    for (size_t k = 0; k < m->n_nodes && st == TD_OK; k++) {
        onode *nd = &m->nodes[k];
        const Onnx__NodeProto *n = nd->n;
        char pre[200];
        node_prefix(m, k, pre, sizeof pre);
        for (size_t j = 0; j < n->n_input; j++) {
            const char *name = n->input[j];
            nd->in[j] = -1;
            if (name == NULL || name[0] == '\0') continue;
            nd->in[j] = find_val(m, name);
            if (nd->in[j] < 0) {
                snprintf(err, sizeof err, "%s: input '%.100s' is not defined (not a graph "
                         "input, an initializer or a node's output)", pre, name);
                st = TD_EINVAL;
                break;
            }
        }
        if (st != TD_OK) break;
        if (!is_default_domain(n->domain)) {
            int64_t ver = -1;
            for (size_t i = 0; i < mp->n_opset_import; i++)
                if (mp->opset_import[i]->domain && strcmp(mp->opset_import[i]->domain, n->domain) == 0)
                    ver = mp->opset_import[i]->version;
            snprintf(err, sizeof err, "%s: op %.60s of domain '%.60s' (opset %lld) is not "
                     "supported (only the default domain 'ai.onnx' is)", pre, n->op_type,
                     n->domain, (long long)ver);
            st = TD_EUNSUPPORTED;
            break;
        }
        nd->opset = m->opset;
        if (m->opset < 0) {
            snprintf(err, sizeof err, "%s: the model imports no opset of the default domain "
                     "'ai.onnx'", pre);
            st = TD_EINVAL;
            break;
        }
        if (strcmp(n->op_type, "Constant") == 0) continue;
        nd->op = td__onnx_op_find(n->op_type, m->opset);
        if (nd->op == NULL) {
            snprintf(err, sizeof err, "%s: op %.60s of domain 'ai.onnx' at opset %lld is not "
                     "supported%s", pre, n->op_type, (long long)m->opset,
                     td__onnx_op_known(n->op_type) ? " (other opsets of it are)" : "");
            st = TD_EUNSUPPORTED;
            break;
        }
    }
    /* Topological order (Kahn): pending[k] counts k's inputs made by nodes not yet placed. */
    if (st == TD_OK && m->n_nodes > 0) {
        size_t *pending = td__calloc(m->n_nodes, sizeof *pending);
        size_t *users = NULL, *ustart = td__calloc(m->n_vals + 1, sizeof *ustart);
        size_t total = 0;
        for (size_t k = 0; k < m->n_nodes; k++) total += m->nodes[k].n->n_input;
        users = td__malloc((total ? total : 1) * sizeof *users);
        if (pending == NULL || ustart == NULL || users == NULL) {
            st = TD_ENOMEM;
            snprintf(err, sizeof err, "out of memory");
        } else {
            /* users of value v: users[ustart[v] .. ustart[v+1]) (counting sort) */
            for (size_t k = 0; k < m->n_nodes; k++)
                for (size_t j = 0; j < m->nodes[k].n->n_input; j++) {
                    int32_t v = m->nodes[k].in[j];
                    if (v >= 0 && m->vals[v].kind == V_NODE) {
                        ustart[v + 1]++;
                        pending[k]++;
                    }
                }
            for (size_t v = 0; v < m->n_vals; v++) ustart[v + 1] += ustart[v];
            size_t *fill = td__calloc(m->n_vals + 1, sizeof *fill);
            if (fill == NULL) {
                st = TD_ENOMEM;
                snprintf(err, sizeof err, "out of memory");
            } else {
                for (size_t k = 0; k < m->n_nodes; k++)
                    for (size_t j = 0; j < m->nodes[k].n->n_input; j++) {
                        int32_t v = m->nodes[k].in[j];
                        if (v >= 0 && m->vals[v].kind == V_NODE)
                            users[ustart[v] + fill[v]++] = k;
                    }
                td__free(fill);
                size_t head = 0, tail = 0;
                for (size_t k = 0; k < m->n_nodes; k++)
                    if (pending[k] == 0) m->order[tail++] = k;
                while (head < tail) {
                    size_t k = m->order[head++];
                    for (size_t j = 0; j < m->nodes[k].n->n_output; j++) {
                        int32_t v = m->nodes[k].out[j];
                        if (v < 0) continue;
                        for (size_t u = ustart[v]; u < ustart[v + 1]; u++)
                            if (--pending[users[u]] == 0) m->order[tail++] = users[u];
                    }
                }
                if (tail < m->n_nodes) {
                    size_t bad = 0;
                    while (pending[bad] == 0) bad++;
                    char pre[200];
                    node_prefix(m, bad, pre, sizeof pre);
                    snprintf(err, sizeof err, "%s: the graph has a cycle through this node "
                             "(%zu of %zu nodes cannot be ordered)", pre, m->n_nodes - tail,
                             m->n_nodes);
                    st = TD_EINVAL;
                }
            }
        }
        td__free(pending);
        td__free(users);
        td__free(ustart);
    }
    /* Constant nodes, then host-value requirements. */
    for (size_t k = 0; k < m->n_nodes && st == TD_OK; k++)
        if (m->nodes[k].op == NULL) st = constant_node(m, k, err, sizeof err);
    /* Values needed on the host, walking back from the inputs that must be (host_mask):
     * initializers and Constants have one; Shape/Size make one; a graph input is read at
     * each run; any other node is folded (run on host values, see fold_node). */
    bool *need = st == TD_OK ? td__calloc(m->n_vals ? m->n_vals : 1, sizeof *need) : NULL;
    if (st == TD_OK && need == NULL) {
        st = TD_ENOMEM;
        snprintf(err, sizeof err, "out of memory");
    }
    for (size_t q = m->n_nodes; st == TD_OK && q-- > 0;) {
        onode *nd = &m->nodes[m->order[q]];
        if (nd->op == NULL) continue;
        bool out_needed = false;
        for (size_t j = 0; j < nd->n->n_output; j++)
            if (nd->out[j] >= 0 && need[nd->out[j]]) out_needed = true;
        nd->fold = out_needed && (nd->op->host_mask & TD_ONNX_HOST_OUT) == 0;
        for (size_t j = 0; j < nd->n->n_input; j++) {
            int32_t v = nd->in[j];
            if (v < 0) continue;
            if (nd->fold || (j < 31 && (nd->op->host_mask & (1u << j)))) need[v] = true;
        }
    }
    for (size_t v = 0; st == TD_OK && v < m->n_vals; v++)
        if (need[v] && m->vals[v].kind == V_INPUT) m->vals[v].host_needed = true;
    td__free(need);
    for (size_t i = 0; i < g->n_output && st == TD_OK; i++) {
        oio *io = &m->outputs[i];
        if ((st = value_info(ctx, g->output[i], "output", io)) != TD_OK) {
            model_free(m);
            return st;
        }
        io->value = find_val(m, io->info.name ? io->info.name : "");
        if (io->value < 0) {
            snprintf(err, sizeof err, "graph output '%.100s' is not defined", io->info.name);
            st = TD_EINVAL;
        }
        m->n_outputs++;
    }
    if (st == TD_OK && m->n_outputs == 0) {
        snprintf(err, sizeof err, "the graph has no outputs");
        st = TD_EINVAL;
    }
    if (st == TD_OK && m->n_outputs > 64) {
        snprintf(err, sizeof err, "the graph has %zu outputs, at most 64 are supported",
                 m->n_outputs);
        st = TD_EUNSUPPORTED;
    }
    if (st != TD_OK) {
        model_free(m);
        return merr(ctx, st, "td_onnx_load: %s", err);
    }
    /* Upload initializers and constants once. */
    for (size_t v = 0; v < m->n_vals; v++) {
        oval *x = &m->vals[v];
        if (!x->has_host) continue;
        x->dev = td_from_host(ctx, (td_dtype)x->host.desc.dtype, (int)x->host.desc.rank,
                              x->host.desc.dims, x->host.data);
        if (x->dev == NULL) {
            char msg[1000];
            st = td_last_status(ctx);
            snprintf(msg, sizeof msg, "td_onnx_load: initializer '%.100s': %.800s", x->name,
                     td_last_error(ctx));
            model_free(m);
            return merr(ctx, st != TD_OK ? st : TD_EINVAL, "%s", msg);
        }
    }
    if (all_static(m)) {
        td__desc in[64];
        for (size_t i = 0; i < m->n_inputs; i++) {
            const td_onnx_value *x = &m->inputs[i].info;
            in[i] = (td__desc){.dtype = (uint32_t)x->dtype, .rank = (uint32_t)x->rank};
            for (int d = 0; d < x->rank; d++) in[i].dims[d] = x->dims[d];
            char why[256];
            if (td__desc_check(&in[i], why, sizeof why) != TD_OK) {
                char msg[600];
                snprintf(msg, sizeof msg, "td_onnx_load: input '%.100s': %s", x->name, why);
                model_free(m);
                return merr(ctx, TD_EINVAL, "%s", msg);
            }
        }
        td_graph *gr = NULL;
        if ((st = specialize(m, in, NULL, &gr)) != TD_OK) {
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", td_last_error(ctx));
            model_free(m);
            return merr(ctx, st, "td_onnx_load: %s", msg);
        }
        size_t keylen = m->n_inputs * sizeof(td__desc);
        m->specs[0].key = td__malloc(keylen ? keylen : 1);
        if (m->specs[0].key == NULL) {
            td_graph_destroy(gr);
            model_free(m);
            return merr(ctx, TD_ENOMEM, "td_onnx_load: out of memory");
        }
        memcpy(m->specs[0].key, in, keylen);
        m->specs[0].keylen = keylen;
        m->specs[0].g = gr;
        m->next_spec = 1;
    }
    *out = m;
    return TD_OK;
}

td_status td_onnx_load(td_context *ctx, const char *path, td_onnx_model **out)
{
    if (ctx == NULL || path == NULL || out == NULL)
        return merr(ctx, TD_EINVAL, "td_onnx_load: ctx, path or out is NULL");
    FILE *f = fopen(path, "rb");
    if (f == NULL) return merr(ctx, TD_EIO, "td_onnx_load: cannot open '%.200s'", path);
    size_t cap = 1 << 16, len = 0;
    uint8_t *buf = td__malloc(cap);
    td_status st = buf == NULL ? TD_ENOMEM : TD_OK;
    while (st == TD_OK) {
        if (len == cap) {
            if (cap >= TD_ONNX_MAX_FILE_BYTES) {
                st = merr(ctx, TD_EINVAL, "td_onnx_load: '%.200s' is larger than %llu bytes "
                          "(protobuf's 2 GiB limit)", path, (unsigned long long)TD_ONNX_MAX_FILE_BYTES);
                break;
            }
            size_t nc = cap * 2 > TD_ONNX_MAX_FILE_BYTES ? TD_ONNX_MAX_FILE_BYTES : cap * 2;
            uint8_t *p = td__realloc(buf, nc);
            if (p == NULL) {
                st = TD_ENOMEM;
                break;
            }
            buf = p;
            cap = nc;
        }
        size_t r = fread(buf + len, 1, cap - len, f);
        len += r;
        if (r == 0) {
            if (ferror(f)) st = merr(ctx, TD_EIO, "td_onnx_load: reading '%.200s' failed", path);
            break;
        }
    }
    fclose(f);
    if (st == TD_ENOMEM) merr(ctx, TD_ENOMEM, "td_onnx_load: out of memory reading '%.200s'", path);
    if (st == TD_OK) st = td_onnx_load_memory(ctx, buf, len, out);
    td__free(buf);
    return st;
}

void td_onnx_destroy(td_onnx_model *m) { model_free(m); }

int td_onnx_n_inputs(const td_onnx_model *m) { return m ? (int)m->n_inputs : 0; }
int td_onnx_n_outputs(const td_onnx_model *m) { return m ? (int)m->n_outputs : 0; }

td_status td_onnx_input(const td_onnx_model *m, int i, td_onnx_value *out)
{
    if (m == NULL || out == NULL || i < 0 || (size_t)i >= m->n_inputs) return TD_EINVAL;
    *out = m->inputs[i].info;
    return TD_OK;
}

td_status td_onnx_output(const td_onnx_model *m, int i, td_onnx_value *out)
{
    if (m == NULL || out == NULL || i < 0 || (size_t)i >= m->n_outputs) return TD_EINVAL;
    *out = m->outputs[i].info;
    return TD_OK;
}

td_status td_onnx_run(td_onnx_model *m, int n_in, const char *const *in_names,
                      td_tensor *const *inputs, int n_out, td_tensor **outputs)
{
    if (m == NULL) return TD_EINVAL;
    td_context *ctx = m->ctx;
    if (n_in != (int)m->n_inputs || n_out != (int)m->n_outputs || (n_in > 0 && inputs == NULL) ||
        (n_out > 0 && outputs == NULL))
        return merr(ctx, TD_EINVAL, "td_onnx_run: the model has %zu inputs and %zu outputs, "
                    "got %d and %d", m->n_inputs, m->n_outputs, n_in, n_out);
    td_tensor *bound[64];
    td__desc in[64];
    for (size_t i = 0; i < m->n_inputs; i++) {
        const td_onnx_value *decl = &m->inputs[i].info;
        int k = (int)i;
        if (in_names != NULL) {
            k = -1;
            for (int j = 0; j < n_in && k < 0; j++)
                if (in_names[j] != NULL && strcmp(in_names[j], decl->name) == 0) k = j;
            if (k < 0)
                return merr(ctx, TD_EINVAL, "td_onnx_run: no tensor bound to input '%.100s'",
                            decl->name);
        }
        td_tensor *t = inputs[k];
        if (t == NULL || td_tensor_context(t) != ctx)
            return merr(ctx, TD_EINVAL, "td_onnx_run: input '%.100s': %s", decl->name,
                        t == NULL ? "tensor is NULL" : "tensor belongs to another context");
        in[i] = *td__tensor_desc(t);
        if (!desc_matches_decl(&in[i], decl)) {
            char a[160], b[200];
            td__desc_str(&in[i], a, sizeof a);
            int p = snprintf(b, sizeof b, "%s", td_dtype_name(decl->dtype));
            if (decl->rank >= 0) {
                p += snprintf(b + p, sizeof b - (size_t)p, "[");
                for (int d = 0; d < decl->rank; d++) {
                    if (decl->dims[d] >= 0)
                        p += snprintf(b + p, sizeof b - (size_t)p, "%s%lld", d ? ", " : "",
                                      (long long)decl->dims[d]);
                    else
                        p += snprintf(b + p, sizeof b - (size_t)p, "%s?", d ? ", " : "");
                }
                snprintf(b + p, sizeof b - (size_t)p, "]");
            }
            return merr(ctx, TD_EINVAL, "td_onnx_run: input '%.100s' needs %s, got %s",
                        decl->name, b, a);
        }
        bound[i] = t;
    }
    /* Inputs the graph needs on the host, and the key of this specialization. */
    td__onnx_host hin[64];
    memset(hin, 0, sizeof hin);
    size_t keylen = m->n_inputs * sizeof(td__desc);
    td_status st = TD_OK;
    for (size_t i = 0; i < m->n_inputs && st == TD_OK; i++) {
        if (!m->vals[m->inputs[i].value].host_needed) continue;
        size_t nb = td__desc_nbytes(&in[i]);
        if (nb > ONNX_MAX_HOST_READ) {
            st = merr(ctx, TD_EUNSUPPORTED, "td_onnx_run: input '%.100s' gives a shape, axes "
                      "or bounds, read on the host: at most %u bytes, not %zu",
                      m->inputs[i].info.name, ONNX_MAX_HOST_READ, nb);
            break;
        }
        hin[i].desc = in[i];
        hin[i].nbytes = nb;
        if (nb > 0 && (hin[i].data = td__malloc(nb)) == NULL) {
            st = merr(ctx, TD_ENOMEM, "td_onnx_run: out of memory");
            break;
        }
        if (nb > 0 && (st = td_read(bound[i], hin[i].data, nb)) != TD_OK) break;
        keylen += nb;
    }
    uint8_t *key = st == TD_OK ? td__malloc(keylen ? keylen : 1) : NULL;
    if (st == TD_OK && key == NULL) st = merr(ctx, TD_ENOMEM, "td_onnx_run: out of memory");
    if (st != TD_OK) {
        for (size_t i = 0; i < m->n_inputs; i++) td__onnx_host_fini(&hin[i]);
        return st;
    }
    size_t pos = m->n_inputs * sizeof(td__desc);
    memset(key, 0, keylen ? keylen : 1);
    for (size_t i = 0; i < m->n_inputs; i++) {
        td__desc d = {0};
        d.dtype = in[i].dtype;
        d.rank = in[i].rank;
        for (uint32_t r = 0; r < in[i].rank; r++) d.dims[r] = in[i].dims[r];
        in[i] = d;
        memcpy(key + i * sizeof d, &d, sizeof d);
        if (hin[i].nbytes > 0) {
            memcpy(key + pos, hin[i].data, hin[i].nbytes);
            pos += hin[i].nbytes;
        }
    }
    td_graph *gr = NULL;
    for (size_t s = 0; s < ONNX_SPECS && gr == NULL; s++)
        if (m->specs[s].g != NULL && m->specs[s].keylen == keylen &&
            memcmp(m->specs[s].key, key, keylen) == 0)
            gr = m->specs[s].g;
    if (gr == NULL) {
        st = specialize(m, in, hin, &gr);
        if (st != TD_OK) {
            for (size_t i = 0; i < m->n_inputs; i++) td__onnx_host_fini(&hin[i]);
            td__free(key);
            return st;
        }
        ospec *sp = &m->specs[m->next_spec];
        m->next_spec = (m->next_spec + 1) % ONNX_SPECS;
        td_graph_destroy(sp->g);
        td__free(sp->key);
        *sp = (ospec){.key = key, .keylen = keylen, .g = gr};
        key = NULL;
    }
    td__free(key);
    for (size_t i = 0; i < m->n_inputs; i++) td__onnx_host_fini(&hin[i]);
    return td_graph_run(gr, (int)m->n_inputs, NULL, bound, (int)m->n_outputs, NULL, outputs);
}

/* graph.c — validation, hashing and execution of captured graphs (see graph.h).
 *
 * Why execution translates the graph into an ordinary op batch: the session already knows
 * how to validate each op against real tensors, charge quotas, poison failed outputs and
 * report failures; a graph run reuses all of it by renaming values to session ids (inputs
 * and captured tensors to their bound ids, the values named as outputs to the caller's
 * fresh ids, everything else to temporaries above TD_GRAPH_TEMP_BASE that are released when
 * the run ends). The same kernels run in the same order as in eager mode, so a replay gives
 * the same bits.
 */
#include "engine/graph.h"

#include "common/alloc.h"
#include "common/errbuf.h"
#include "engine/tensor.h"

#include <openssl/evp.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>


td_status td__graph_alloc(uint64_t n_inputs, uint64_t n_consts, uint64_t n_ops,
                          uint64_t n_outputs, td__graph **out, char *err, size_t errlen)
{
    if (n_ops > TD_GRAPH_MAX_OPS)
        return td__einval(err, errlen, "graph has %llu ops; the limit is %d",
                          (unsigned long long)n_ops, TD_GRAPH_MAX_OPS);
    if (n_inputs > TD_GRAPH_MAX_INPUTS || n_consts > TD_GRAPH_MAX_INPUTS ||
        n_outputs > TD_GRAPH_MAX_INPUTS)
        return td__einval(
            err, errlen,
            "graph has %llu inputs, %llu captured tensors and %llu outputs; the limit "
            "is %d each",
            (unsigned long long)n_inputs, (unsigned long long)n_consts,
            (unsigned long long)n_outputs, TD_GRAPH_MAX_INPUTS);
    td__graph *g = td__calloc(1, sizeof *g);
    if (g == NULL) goto oom;
    atomic_init(&g->refs, 1);
    g->n_inputs = (uint32_t)n_inputs;
    g->n_consts = (uint32_t)n_consts;
    g->n_ops = (uint32_t)n_ops;
    g->n_outputs = (uint32_t)n_outputs;
    size_t nv = (size_t)(n_inputs + n_consts + n_ops);
    g->inputs = td__calloc(n_inputs ? n_inputs : 1, sizeof *g->inputs);
    g->consts = td__calloc(n_consts ? n_consts : 1, sizeof *g->consts);
    g->ops = td__calloc(n_ops ? n_ops : 1, sizeof *g->ops);
    g->outputs = td__calloc(n_outputs ? n_outputs : 1, sizeof *g->outputs);
    g->values = td__calloc(nv ? nv : 1, sizeof *g->values);
    if (!g->inputs || !g->consts || !g->ops || !g->outputs || !g->values) {
        td__graph_unref(g);
        goto oom;
    }
    *out = g;
    return TD_OK;
oom:
    if (err != NULL && errlen > 0) snprintf(err, errlen, "out of memory for a graph");
    return TD_ENOMEM;
}

void td__graph_ref(td__graph *g) { atomic_fetch_add(&g->refs, 1); }

void td__graph_unref(td__graph *g)
{
    if (g == NULL || atomic_fetch_sub(&g->refs, 1) != 1) return;
    if (g->inputs != NULL)
        for (uint32_t i = 0; i < g->n_inputs; i++) td__free(g->inputs[i].name);
    if (g->outputs != NULL)
        for (uint32_t i = 0; i < g->n_outputs; i++) td__free(g->outputs[i].name);
    td__free(g->inputs);
    td__free(g->consts);
    td__free(g->ops);
    td__free(g->outputs);
    td__free(g->values);
    if (g->quota != NULL) td__quota_bytes_uncharge(g->quota, g->charged);
    td__free(g);
}

uint64_t td__graph_nbytes(const td__graph *g)
{
    uint64_t n = sizeof *g + (uint64_t)g->n_inputs * sizeof *g->inputs +
                 (uint64_t)g->n_consts * sizeof *g->consts + (uint64_t)g->n_ops * sizeof *g->ops +
                 (uint64_t)g->n_outputs * sizeof *g->outputs +
                 ((uint64_t)g->n_inputs + g->n_consts + g->n_ops) * sizeof *g->values;
    for (uint32_t i = 0; i < g->n_inputs; i++)
        if (g->inputs[i].name != NULL) n += strlen(g->inputs[i].name) + 1;
    for (uint32_t i = 0; i < g->n_outputs; i++)
        if (g->outputs[i].name != NULL) n += strlen(g->outputs[i].name) + 1;
    return n;
}

void td__graph_hash_hex(const uint8_t *hash, size_t nbytes, char *buf)
{
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < nbytes; i++) {
        buf[2 * i] = hex[hash[i] >> 4];
        buf[2 * i + 1] = hex[hash[i] & 15];
    }
    buf[2 * nbytes] = '\0';
}

/* ---- canonical encoding, streamed into SHA-256 ---- */

static void h_u32(EVP_MD_CTX *h, uint32_t v)
{
    uint8_t b[4];
    for (int i = 0; i < 4; i++) b[i] = (uint8_t)(v >> (8 * i));
    EVP_DigestUpdate(h, b, 4);
}

static void h_u64(EVP_MD_CTX *h, uint64_t v)
{
    uint8_t b[8];
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
    EVP_DigestUpdate(h, b, 8);
}

static void h_desc(EVP_MD_CTX *h, const td__desc *d)
{
    h_u32(h, d->dtype);
    h_u32(h, d->rank);
    for (uint32_t i = 0; i < d->rank; i++) h_u64(h, (uint64_t)d->dims[i]);
}

static void h_name(EVP_MD_CTX *h, const char *s)
{
    size_t n = strlen(s);
    h_u32(h, (uint32_t)n);
    EVP_DigestUpdate(h, s, n);
}

static td_status graph_hash(td__graph *g, char *err, size_t errlen)
{
    EVP_MD_CTX *h = EVP_MD_CTX_new();
    if (h == NULL || EVP_DigestInit_ex(h, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(h);
        return td__einval(err, errlen, "graph: cannot start SHA-256 (libcrypto)");
    }
    EVP_DigestUpdate(h, "TDG1", 4);
    h_u32(h, g->n_inputs);
    for (uint32_t i = 0; i < g->n_inputs; i++) {
        h_name(h, g->inputs[i].name);
        h_desc(h, &g->inputs[i].desc);
    }
    h_u32(h, g->n_consts);
    for (uint32_t i = 0; i < g->n_consts; i++) {
        h_u64(h, g->consts[i].id);
        h_desc(h, &g->consts[i].desc);
    }
    h_u32(h, g->n_ops);
    for (uint32_t k = 0; k < g->n_ops; k++) {
        const td__op *op = &g->ops[k];
        h_u32(h, op->opcode);
        h_u32(h, op->dtype);
        h_u32(h, op->n_inputs);
        for (uint32_t i = 0; i < op->n_inputs; i++) h_u64(h, op->inputs[i]);
        h_u32(h, op->n_iattrs);
        for (uint32_t i = 0; i < op->n_iattrs; i++) h_u64(h, (uint64_t)op->iattrs[i]);
        /* The first two always, later ones only when set (not +0.0): the ids of graphs
         * recorded before ops had a third float attribute stay what they were. */
        for (int i = 0; i < TD_OP_MAX_FATTRS; i++) {
            uint64_t bits;
            memcpy(&bits, &op->fattrs[i], sizeof bits);
            if (i < 2 || bits != 0) h_u64(h, bits);
        }
        h_u64(h, op->seed);
    }
    h_u32(h, g->n_outputs);
    for (uint32_t i = 0; i < g->n_outputs; i++) {
        h_name(h, g->outputs[i].name);
        h_u64(h, g->outputs[i].value);
    }
    unsigned len = 0;
    int ok = EVP_DigestFinal_ex(h, g->hash, &len);
    EVP_MD_CTX_free(h);
    if (ok != 1 || len != TD_GRAPH_HASH_BYTES)
        return td__einval(err, errlen, "graph: SHA-256 failed (libcrypto)");
    return TD_OK;
}

/* ---- validation ---- */

static bool name_ok(const char *s)
{
    if (s == NULL || s[0] == '\0') return false;
    size_t n = 0;
    for (; s[n] != '\0'; n++)
        if (n >= TD_GRAPH_MAX_NAME || s[n] < 0x21 || s[n] > 0x7e) return false;
    return true;
}

/* Names of one list (inputs or outputs) must be unique: quadratic, fine under the caps for
 * real graphs, and bounded (4096^2 / 2 compares) for hostile ones. */
static bool names_unique(const char *const *names, uint32_t n, uint32_t *dup)
{
    for (uint32_t i = 1; i < n; i++)
        for (uint32_t j = 0; j < i; j++)
            if (strcmp(names[i], names[j]) == 0) {
                *dup = i;
                return false;
            }
    return true;
}

td_status td__graph_validate(td__graph *g, char *err, size_t errlen)
{
    char why[512];
    const uint64_t base = (uint64_t)g->n_inputs + g->n_consts;
    const char *names[TD_GRAPH_MAX_INPUTS];
    for (uint32_t i = 0; i < g->n_inputs; i++) {
        const td__graph_input *in = &g->inputs[i];
        if (!name_ok(in->name))
            return td__einval(err, errlen,
                              "graph input %u: name must be 1..%d printable characters without "
                              "spaces",
                              i, TD_GRAPH_MAX_NAME);
        if (td__desc_check(&in->desc, why, sizeof why) != TD_OK)
            return td__einval(err, errlen, "graph input %u ('%s'): %s", i, in->name, why);
        g->values[i] = in->desc;
        names[i] = in->name;
    }
    uint32_t dup;
    if (!names_unique(names, g->n_inputs, &dup))
        return td__einval(err, errlen, "graph input %u: name '%s' is used twice", dup,
                          g->inputs[dup].name);
    for (uint32_t i = 0; i < g->n_consts; i++) {
        const td__graph_const *c = &g->consts[i];
        if (td__desc_check(&c->desc, why, sizeof why) != TD_OK)
            return td__einval(err, errlen, "graph captured tensor %u (id %llu): %s", i,
                              (unsigned long long)c->id, why);
        if (c->id == 0 || c->id >= TD_GRAPH_TEMP_BASE)
            return td__einval(err, errlen, "graph captured tensor %u: invalid tensor id %llu", i,
                              (unsigned long long)c->id);
        g->values[g->n_inputs + i] = c->desc;
    }
    for (uint32_t k = 0; k < g->n_ops; k++) {
        td__op *op = &g->ops[k];
        uint64_t self = base + k;
        if (op->n_inputs > TD_OP_MAX_INPUTS || op->n_iattrs > TD_OP_MAX_IATTRS)
            return td__einval(err, errlen, "graph op %u (%s): %u inputs and %u attributes", k,
                              td__op_name(op->opcode), op->n_inputs, op->n_iattrs);
        const td__desc *in[TD_OP_MAX_INPUTS];
        for (uint32_t i = 0; i < op->n_inputs; i++) {
            if (op->inputs[i] >= self)
                return td__einval(
                    err, errlen,
                    "graph op %u (%s): input %u refers to value %llu, which is not "
                    "defined before it (forward reference or cycle; values below %llu "
                    "are defined here)",
                    k, td__op_name(op->opcode), i, (unsigned long long)op->inputs[i],
                    (unsigned long long)self);
            in[i] = &g->values[op->inputs[i]];
        }
        if (td__op_class(op->opcode) == TD_OPCLASS_NONE)
            return td__einval(err, errlen, "graph op %u: unknown opcode %u", k, op->opcode);
        if (op->opcode == TD_OP_EMPTY)
            return td__einval(err, errlen,
                              "graph op %u (empty): uninitialised tensors cannot be captured "
                              "(use a graph input)",
                              k);
        if (td__op_infer(op, in, &g->values[self], why, sizeof why) != TD_OK)
            return td__einval(err, errlen, "graph op %u (%s): %s", k, td__op_name(op->opcode), why);
        op->output = self;
    }
    const uint64_t nv = base + g->n_ops;
    for (uint32_t i = 0; i < g->n_outputs; i++) {
        const td__graph_output *o = &g->outputs[i];
        if (!name_ok(o->name))
            return td__einval(err, errlen,
                              "graph output %u: name must be 1..%d printable characters without "
                              "spaces",
                              i, TD_GRAPH_MAX_NAME);
        if (o->value >= nv)
            return td__einval(err, errlen,
                              "graph output %u ('%s') refers to value %llu; the graph "
                              "has %llu values",
                              i, o->name, (unsigned long long)o->value, (unsigned long long)nv);
        names[i] = o->name;
    }
    if (!names_unique(names, g->n_outputs, &dup))
        return td__einval(err, errlen, "graph output %u: name '%s' is used twice", dup,
                          g->outputs[dup].name);
    td_status st = graph_hash(g, err, errlen);
    if (st != TD_OK) return st;
    g->valid = true;
    return TD_OK;
}

/* ---- execution ---- */

/* Check that session tensor `id` exists unpoisoned with desc `want`. */
static td_status check_binding(td__session *s, uint64_t id, const td__desc *want,
                               const char *what, char *msg, size_t msglen)
{
    td__desc have;
    td__buffer *buf = NULL;
    char why[768];
    td_status st = td__session_lookup(s, id, &have, &buf, why, sizeof why);
    td__buffer_unref(buf);
    if (st == TD_EPOISONED) {
        snprintf(msg, msglen, "%s", why);
        return st;
    }
    if (st != TD_OK) {
        snprintf(msg, msglen, "%s: %s", what, why);
        return st;
    }
    if (!td__desc_equal(&have, want)) {
        char a[160], b[160];
        td__desc_str(want, a, sizeof a);
        td__desc_str(&have, b, sizeof b);
        snprintf(msg, msglen, "%s: tensor %llu is %s, the graph needs %s", what,
                 (unsigned long long)id, b, a);
        return TD_EINVAL;
    }
    return TD_OK;
}

typedef struct exec_ctx {
    td__failure_fn fn;
    void *arg;
    const td__graph *g;
    size_t failures;
} exec_ctx;

static void on_op_failure(void *arg, uint32_t op_index, td_status st, const char *msg)
{
    exec_ctx *x = arg;
    char hex[17], m[1200];
    td__graph_hash_hex(x->g->hash, 8, hex);
    snprintf(m, sizeof m, "graph %s: %s", hex, msg);
    x->failures++;
    if (x->fn != NULL) x->fn(x->arg, op_index, st, m);
}

/* Poison the output ids a client may name and that are not live (poison() leaves live
 * tensors alone; ids outside the client range are never recorded). */
static void poison_all(td__session *s, const uint64_t *out_ids, size_t n, td_status st,
                       const char *msg)
{
    for (size_t i = 0; i < n; i++)
        if (out_ids[i] != 0 && out_ids[i] <= TD_SESSION_ID_MAX)
            td__session_poison(s, out_ids[i], st, msg);
}

struct td__graph_run {
    td__op *ops; /* the run as an ordinary batch over session ids */
    size_t n_ops, next;
    uint64_t *temps; /* engine-range ids released when the run ends */
    size_t n_temps;
    exec_ctx x;
};

/* Whether id names a live entry of the session (a tensor or a poison record). */
static bool id_in_use(td__session *s, uint64_t id)
{
    td__desc d;
    td__buffer *b = NULL;
    char why[8];
    td_status st = td__session_lookup(s, id, &d, &b, why, sizeof why);
    td__buffer_unref(b);
    return st != TD_ENOTFOUND;
}

size_t td__graph_run_create(td__session *s, const td__graph *g, const uint64_t *in_ids,
                            size_t n_in, const uint64_t *out_ids, size_t n_out,
                            td__failure_fn on_failure, void *arg, td__graph_run **out)
{
    char msg[1024], hex[17];
    *out = NULL;
    td__graph_hash_hex(g->hash, 8, hex);
    td_status st = TD_OK;
    if (!g->valid) {
        snprintf(msg, sizeof msg, "graph %s: not validated", hex);
        st = TD_EINTERNAL;
    } else if (n_in != g->n_inputs || n_out != g->n_outputs) {
        snprintf(msg, sizeof msg,
                 "graph %s: run binds %zu inputs and %zu outputs, the graph has %u and %u", hex,
                 n_in, n_out, g->n_inputs, g->n_outputs);
        st = TD_EINVAL;
    }
    for (size_t i = 0; st == TD_OK && i < n_out; i++) {
        if (out_ids[i] == 0 || out_ids[i] > TD_SESSION_ID_MAX) {
            snprintf(msg, sizeof msg, "graph %s: output %zu: tensor id %llu is outside 1..%llu",
                     hex, i, (unsigned long long)out_ids[i],
                     (unsigned long long)TD_SESSION_ID_MAX);
            st = TD_EINVAL;
        } else if (id_in_use(s, out_ids[i])) {
            snprintf(msg, sizeof msg,
                     "graph %s: output %zu: tensor id %llu is already in use (outputs need "
                     "fresh ids)", hex, i, (unsigned long long)out_ids[i]);
            st = TD_EINVAL;
        }
        for (size_t j = 0; st == TD_OK && j < i; j++)
            if (out_ids[j] == out_ids[i]) {
                snprintf(msg, sizeof msg, "graph %s: outputs %zu and %zu both use id %llu", hex,
                         j, i, (unsigned long long)out_ids[i]);
                st = TD_EINVAL;
            }
    }
    char what[400], why[1024];
    for (size_t i = 0; st == TD_OK && i < n_in; i++) {
        snprintf(what, sizeof what, "graph %s: input '%s'", hex, g->inputs[i].name);
        if (in_ids[i] == 0 || in_ids[i] > TD_SESSION_ID_MAX) {
            snprintf(msg, sizeof msg, "%s: tensor id %llu is outside 1..%llu", what,
                     (unsigned long long)in_ids[i], (unsigned long long)TD_SESSION_ID_MAX);
            st = TD_EINVAL;
            break;
        }
        st = check_binding(s, in_ids[i], &g->inputs[i].desc, what, why, sizeof why);
        if (st != TD_OK) snprintf(msg, sizeof msg, "%s", why);
    }
    for (uint32_t i = 0; st == TD_OK && i < g->n_consts; i++) {
        snprintf(what, sizeof what,
                 "graph %s: captured tensor %llu (a tensor used by the graph but created "
                 "before td_graph_begin; it must stay alive while the graph is used)",
                 hex, (unsigned long long)g->consts[i].id);
        st = check_binding(s, g->consts[i].id, &g->consts[i].desc, what, why, sizeof why);
        if (st != TD_OK) snprintf(msg, sizeof msg, "%s", why);
    }
    if (st != TD_OK) {
        /* Live ids are never touched: a refused run leaves the caller's tensors alone. */
        poison_all(s, out_ids, g->valid && n_out == g->n_outputs ? n_out : 0,
                   st == TD_EPOISONED ? TD_EPOISONED : st, msg);
        if (st == TD_EPOISONED) return 0;
        if (on_failure != NULL) on_failure(arg, 0, st, msg);
        return 1;
    }

    /* Map every value to a session id; outputs take the caller's ids where they can. */
    const uint64_t base = (uint64_t)g->n_inputs + g->n_consts;
    const size_t nv = (size_t)base + g->n_ops;
    td__graph_run *r = td__calloc(1, sizeof *r);
    uint64_t *ids = td__malloc((nv ? nv : 1) * sizeof *ids);
    bool *copied = td__calloc(n_out ? n_out : 1, sizeof *copied);
    if (r != NULL) {
        r->ops = td__malloc(((size_t)g->n_ops + n_out + 1) * sizeof *r->ops);
        r->temps = td__malloc(((size_t)g->n_ops + 1) * sizeof *r->temps);
    }
    if (r == NULL || ids == NULL || copied == NULL || r->ops == NULL || r->temps == NULL) {
        snprintf(msg, sizeof msg, "graph %s: out of host memory for a run", hex);
        poison_all(s, out_ids, n_out, TD_ENOMEM, msg);
        if (on_failure != NULL) on_failure(arg, 0, TD_ENOMEM, msg);
        if (r != NULL) {
            td__free(r->ops);
            td__free(r->temps);
            td__free(r);
        }
        td__free(ids);
        td__free(copied);
        return 1;
    }
    for (uint32_t i = 0; i < g->n_inputs; i++) ids[i] = in_ids[i];
    for (uint32_t i = 0; i < g->n_consts; i++) ids[g->n_inputs + i] = g->consts[i].id;
    for (uint32_t k = 0; k < g->n_ops; k++) ids[base + k] = TD_GRAPH_TEMP_BASE + k;
    for (size_t i = 0; i < n_out; i++) {
        uint64_t v = g->outputs[i].value;
        if (v >= base && ids[v] >= TD_GRAPH_TEMP_BASE) {
            ids[v] = out_ids[i]; /* the op writes straight into the caller's id */
        } else {
            copied[i] = true; /* an input, a captured tensor or a value named twice */
        }
    }
    for (uint32_t k = 0; k < g->n_ops; k++) {
        td__op op = g->ops[k];
        for (uint32_t i = 0; i < op.n_inputs; i++) op.inputs[i] = ids[op.inputs[i]];
        op.output = ids[base + k];
        if (op.output >= TD_GRAPH_TEMP_BASE) r->temps[r->n_temps++] = op.output;
        r->ops[r->n_ops++] = op;
    }
    for (size_t i = 0; i < n_out; i++) {
        if (!copied[i]) continue;
        td__op op = {.opcode = TD_OP_COPY, .n_inputs = 1};
        op.inputs[0] = ids[g->outputs[i].value];
        op.output = out_ids[i];
        r->ops[r->n_ops++] = op;
    }
    td__free(copied);
    td__free(ids);
    r->x = (exec_ctx){.fn = on_failure, .arg = arg, .g = g};
    *out = r;
    return 0;
}

bool td__graph_run_step(td__session *s, td__graph_run *r, uint64_t budget_ns)
{
    r->next = td__session_exec_slice(s, r->ops, r->next, r->n_ops, budget_ns, true,
                                     on_op_failure, &r->x, NULL);
    return r->next >= r->n_ops;
}

size_t td__graph_run_destroy(td__session *s, td__graph_run *r)
{
    if (r == NULL) return 0;
    td__session_release(s, r->temps, r->n_temps);
    size_t failures = r->x.failures;
    td__free(r->ops);
    td__free(r->temps);
    td__free(r);
    return failures;
}

size_t td__graph_exec(td__session *s, const td__graph *g, const uint64_t *in_ids, size_t n_in,
                      const uint64_t *out_ids, size_t n_out, td__failure_fn on_failure,
                      void *arg)
{
    td__graph_run *r;
    size_t failures = td__graph_run_create(s, g, in_ids, n_in, out_ids, n_out, on_failure, arg,
                                           &r);
    if (r == NULL) return failures;
    td__graph_run_step(s, r, UINT64_MAX);
    return td__graph_run_destroy(s, r);
}

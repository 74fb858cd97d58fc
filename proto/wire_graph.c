/* wire_graph.c — captured graphs to and from the wire (see wire_graph.h).
 *
 * The decoder treats every count, rank and string as hostile: counts are capped by
 * td__graph_alloc before anything is allocated for them, ranks by TD_MAX_RANK, and the
 * result goes through td__graph_validate, which the executor relies on.
 */
#include "wire_graph.h"

#include "common/alloc.h"

#include <stdio.h>
#include <string.h>

void td__wire_graph_fini(td__wire_graph *w)
{
    for (size_t i = 0; i < sizeof w->mem / sizeof w->mem[0]; i++) {
        td__free(w->mem[i]);
        w->mem[i] = NULL;
    }
}

td_status td__wire_graph_to(const td__graph *g, td__wire_graph *w)
{
    memset(w, 0, sizeof *w);
    Tensord__V1__Graph init = TENSORD__V1__GRAPH__INIT;
    w->msg = init;
    size_t ni = g->n_inputs, nc = g->n_consts, no = g->n_ops, nu = g->n_outputs;
    Tensord__V1__GraphInput *in = w->mem[0] = td__calloc(ni + 1, sizeof *in);
    Tensord__V1__GraphInput **inp = w->mem[1] = td__calloc(ni + 1, sizeof *inp);
    Tensord__V1__GraphConst *cs = w->mem[2] = td__calloc(nc + 1, sizeof *cs);
    Tensord__V1__GraphConst **csp = w->mem[3] = td__calloc(nc + 1, sizeof *csp);
    Tensord__V1__Op *ops = w->mem[4] = td__calloc(no + 1, sizeof *ops);
    Tensord__V1__Op **opp = w->mem[5] = td__calloc(no + 1, sizeof *opp);
    uint64_t *inputs = w->mem[6] = td__calloc((no + 1) * TD_OP_MAX_INPUTS, sizeof *inputs);
    Tensord__V1__GraphOutput *os = w->mem[7] = td__calloc(nu + 1, sizeof *os);
    if (!in || !inp || !cs || !csp || !ops || !opp || !inputs || !os) {
        td__wire_graph_fini(w);
        return TD_ENOMEM;
    }
    /* protobuf-c only reads the borrowed arrays while packing; casts drop const for it. */
    for (size_t i = 0; i < ni; i++) {
        Tensord__V1__GraphInput x = TENSORD__V1__GRAPH_INPUT__INIT;
        x.name = g->inputs[i].name;
        x.dtype = g->inputs[i].desc.dtype;
        x.n_dims = g->inputs[i].desc.rank;
        x.dims = (int64_t *)(uintptr_t)g->inputs[i].desc.dims;
        in[i] = x;
        inp[i] = &in[i];
    }
    for (size_t i = 0; i < nc; i++) {
        Tensord__V1__GraphConst x = TENSORD__V1__GRAPH_CONST__INIT;
        x.tensor = g->consts[i].id;
        x.dtype = g->consts[i].desc.dtype;
        x.n_dims = g->consts[i].desc.rank;
        x.dims = (int64_t *)(uintptr_t)g->consts[i].desc.dims;
        cs[i] = x;
        csp[i] = &cs[i];
    }
    for (size_t k = 0; k < no; k++) {
        td__wire_op_to(&g->ops[k], &ops[k], inputs + k * TD_OP_MAX_INPUTS);
        ops[k].output = 0;
        opp[k] = &ops[k];
    }
    Tensord__V1__GraphOutput **osp = w->mem[8] = td__calloc(nu + 1, sizeof *osp);
    if (osp == NULL) {
        td__wire_graph_fini(w);
        return TD_ENOMEM;
    }
    for (size_t i = 0; i < nu; i++) {
        Tensord__V1__GraphOutput x = TENSORD__V1__GRAPH_OUTPUT__INIT;
        x.name = g->outputs[i].name;
        x.value = g->outputs[i].value;
        os[i] = x;
        osp[i] = &os[i];
    }
    w->msg.n_inputs = ni;
    w->msg.inputs = inp;
    w->msg.n_consts = nc;
    w->msg.consts = csp;
    w->msg.n_ops = no;
    w->msg.ops = opp;
    w->msg.n_outputs = nu;
    w->msg.outputs = osp;
    return TD_OK;
}

static td_status dims_from(uint32_t dtype, size_t n_dims, const int64_t *dims, td__desc *d,
                           const char *what, size_t index, char *err, size_t errlen)
{
    if (n_dims > TD_MAX_RANK) {
        snprintf(err, errlen, "graph %s %zu: rank %zu, at most %d", what, index, n_dims,
                 TD_MAX_RANK);
        return TD_EINVAL;
    }
    memset(d, 0, sizeof *d);
    d->dtype = dtype;
    d->rank = (uint32_t)n_dims;
    for (size_t i = 0; i < n_dims; i++) d->dims[i] = dims[i];
    return TD_OK;
}

td_status td__wire_graph_from(const Tensord__V1__Graph *w, td__graph **out, char *err,
                              size_t errlen)
{
    td__graph *g;
    td_status st = td__graph_alloc(w->n_inputs, w->n_consts, w->n_ops, w->n_outputs, &g, err,
                                   errlen);
    if (st != TD_OK) return st;
    for (size_t i = 0; st == TD_OK && i < w->n_inputs; i++) {
        const Tensord__V1__GraphInput *x = w->inputs[i];
        st = dims_from(x->dtype, x->n_dims, x->dims, &g->inputs[i].desc, "input", i, err,
                       errlen);
        if (st == TD_OK && (g->inputs[i].name = td__strdup(x->name ? x->name : "")) == NULL)
            st = TD_ENOMEM;
    }
    for (size_t i = 0; st == TD_OK && i < w->n_consts; i++) {
        const Tensord__V1__GraphConst *x = w->consts[i];
        g->consts[i].id = x->tensor;
        st = dims_from(x->dtype, x->n_dims, x->dims, &g->consts[i].desc, "captured tensor", i,
                       err, errlen);
    }
    for (size_t k = 0; st == TD_OK && k < w->n_ops; k++) {
        char why[256];
        st = td__wire_op_from(w->ops[k], &g->ops[k], why, sizeof why);
        if (st != TD_OK) snprintf(err, errlen, "graph op %zu: %s", k, why);
    }
    for (size_t i = 0; st == TD_OK && i < w->n_outputs; i++) {
        const Tensord__V1__GraphOutput *x = w->outputs[i];
        g->outputs[i].value = x->value;
        if ((g->outputs[i].name = td__strdup(x->name ? x->name : "")) == NULL) st = TD_ENOMEM;
    }
    if (st == TD_ENOMEM) snprintf(err, errlen, "out of memory for a graph");
    if (st == TD_OK) st = td__graph_validate(g, err, errlen);
    if (st != TD_OK) {
        td__graph_unref(g);
        return st;
    }
    *out = g;
    return TD_OK;
}

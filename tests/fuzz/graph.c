/* fuzz/graph.c — libFuzzer target for the graph validator: the bytes are a protobuf
 * tensord.v1.Graph (the body of a GraphDefine, as a hostile client sends it), decoded with
 * protobuf-c, converted by td__wire_graph_from and checked by td__graph_validate.
 *
 * Beyond "no crash, leak or undefined behaviour", an accepted graph must hold what the
 * executor relies on: every op reads only earlier values, every output names an existing
 * value, every value's desc passes td__desc_check (issue 10: a WHERE of three broadcast
 * FULLs validated with a byte size that wrapped to 28), and encoding it back (td__wire_graph_to) and decoding again gives a valid graph
 * with the same hash (the id a client computes is the id the server checks).
 *
 * A valid graph that is small (at most 64 ops, every value at most FUZZ_EXEC_MAX_BYTES, every
 * matmul at most FUZZ_EXEC_MAX_MACS) is then run with td__graph_exec on a local CPU session,
 * its inputs and captured tensors made by FULL / ARANGE, its outputs read back whole; after
 * releasing every id the session must hold no tensor and no byte. */
#include "engine/graph.h"
#include "proto/wire_graph.h"
#include "tests/fuzz/fuzz_exec.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_invariants(const td__graph *g)
{
    uint64_t n_values = (uint64_t)g->n_inputs + g->n_consts + g->n_ops;
    if (!g->valid) abort();
    for (uint32_t k = 0; k < g->n_ops; k++) {
        uint64_t self = (uint64_t)g->n_inputs + g->n_consts + k;
        if (g->ops[k].n_inputs > TD_OP_MAX_INPUTS) abort();
        for (uint32_t i = 0; i < g->ops[k].n_inputs; i++)
            if (g->ops[k].inputs[i] >= self) abort();
    }
    for (uint32_t i = 0; i < g->n_outputs; i++)
        if (g->outputs[i].value >= n_values) abort();
    /* every value, op outputs included, passed the checked constructor (op.h) */
    for (uint64_t v = 0; v < n_values; v++)
        if (td__desc_check(&g->values[v], NULL, 0) != TD_OK) abort();
}

/* Whether running g is cheap enough for one fuzz input. */
static bool graph_cheap(const td__graph *g)
{
    if (g->n_ops > 64) return false;
    uint32_t n_values = g->n_inputs + g->n_consts + g->n_ops;
    for (uint32_t v = 0; v < n_values; v++)
        if (td__desc_nbytes(&g->values[v]) > FUZZ_EXEC_MAX_BYTES) return false;
    for (uint32_t k = 0; k < g->n_ops; k++) {
        const td__op *op = &g->ops[k];
        const td__desc *in[TD_OP_MAX_INPUTS];
        for (uint32_t i = 0; i < op->n_inputs; i++) in[i] = &g->values[op->inputs[i]];
        if (!fuzz_exec_cheap(op, in, &g->values[g->n_inputs + g->n_consts + k])) return false;
    }
    return true;
}

#define IN_BASE (UINT64_C(1) << 40)
#define OUT_BASE (UINT64_C(1) << 41)

/* Bind inputs (ids IN_BASE + i) and captured tensors (their capture ids, when those are
 * plain session ids below IN_BASE) and run the graph; then read and release everything. */
static void run_graph(const td__graph *g)
{
    td__session *s = fuzz_cpu_session();
    uint64_t *ids = malloc(sizeof(uint64_t) * ((size_t)g->n_inputs + g->n_consts + g->n_outputs + 1));
    if (ids == NULL) return;
    size_t n_ids = 0;
    bool ok = true;
    for (uint32_t c = 0; c < g->n_consts && ok; c++)
        if (g->consts[c].id == 0 || g->consts[c].id >= IN_BASE) ok = false;
    for (uint32_t i = 0; i < g->n_inputs && ok; i++) {
        ids[n_ids] = IN_BASE + i;
        ok = fuzz_make_tensor(s, ids[n_ids++], OUT_BASE - 1, &g->inputs[i].desc, 1.0 + i, false);
    }
    bool strict = true;
    for (uint32_t c = 0; c < g->n_consts && ok; c++) {
        bool dup = false;
        for (uint32_t e = 0; e < c; e++) dup |= g->consts[e].id == g->consts[c].id;
        if (dup) {
            /* the same capture id twice: unless the descs agree, the run is a bind error */
            strict = false;
            continue;
        }
        ids[n_ids] = g->consts[c].id;
        ok = fuzz_make_tensor(s, ids[n_ids++], OUT_BASE - 1, &g->consts[c].desc, -0.5, false);
    }
    if (ok) {
        uint64_t *out_ids = ids + n_ids;
        for (uint32_t o = 0; o < g->n_outputs; o++) out_ids[o] = OUT_BASE + o;
        const uint64_t *in_ids = ids; /* the inputs were made first, in order */
        size_t failed = td__graph_exec(s, g, in_ids, g->n_inputs, out_ids, g->n_outputs,
                                       strict ? fuzz_on_failure : NULL, NULL);
        for (uint32_t o = 0; o < g->n_outputs; o++) {
            const td__desc *d = &g->values[g->outputs[o].value];
            td_status st = fuzz_read_all(s, out_ids[o], d);
            if (failed == 0 && st != TD_OK) abort(); /* a clean run's outputs are readable */
        }
        n_ids += g->n_outputs;
        fuzz_trace("graph: ran %u ops, %zu failures", g->n_ops, failed);
    }
    td__session_release(s, ids, n_ids);
    free(ids);
    if (td__session_tensor_count(s) != 0 || td__session_bytes(s) != 0) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    Tensord__V1__Graph *w = tensord__v1__graph__unpack(NULL, size, data);
    if (w == NULL) return 0;
    td__graph *g = NULL;
    char err[768];
    td_status st = td__wire_graph_from(w, &g, err, sizeof err);
    tensord__v1__graph__free_unpacked(w, NULL);
    if (st != TD_OK) {
        if (err[0] == '\0') abort(); /* every refusal carries a message */
        return 0;
    }
    check_invariants(g);

    /* Round trip: the canonical form survives encoding, and so does the id. */
    td__wire_graph wg;
    if (td__wire_graph_to(g, &wg) == TD_OK) {
        size_t n = tensord__v1__graph__get_packed_size(&wg.msg);
        uint8_t *buf = malloc(n > 0 ? n : 1);
        if (buf != NULL) {
            tensord__v1__graph__pack(&wg.msg, buf);
            Tensord__V1__Graph *w2 = tensord__v1__graph__unpack(NULL, n, buf);
            if (w2 == NULL) abort();
            td__graph *g2 = NULL;
            if (td__wire_graph_from(w2, &g2, err, sizeof err) != TD_OK) abort();
            if (memcmp(g->hash, g2->hash, TD_GRAPH_HASH_BYTES) != 0) abort();
            td__graph_unref(g2);
            tensord__v1__graph__free_unpacked(w2, NULL);
            free(buf);
        }
        td__wire_graph_fini(&wg);
    }
    if (graph_cheap(g)) run_graph(g);
    td__graph_unref(g);
    return 0;
}

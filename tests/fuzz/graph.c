/* fuzz/graph.c — libFuzzer target for the graph validator: the bytes are a protobuf
 * tensord.v1.Graph (the body of a GraphDefine, as a hostile client sends it), decoded with
 * protobuf-c, converted by td__wire_graph_from and checked by td__graph_validate.
 *
 * Beyond "no crash, leak or undefined behaviour", an accepted graph must hold what the
 * executor relies on: every op reads only earlier values, every output names an existing
 * value, and encoding it back (td__wire_graph_to) and decoding again gives a valid graph
 * with the same hash (the id a client computes is the id the server checks). */
#include "engine/graph.h"
#include "proto/wire_graph.h"

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
    td__graph_unref(g);
    return 0;
}

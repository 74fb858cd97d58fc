/* wire_graph.h — captured graphs (engine/graph.h) to and from the wire Graph message.
 * Thread-safety: stateless functions, any thread. */
#ifndef TD_PROTO_WIRE_GRAPH_H
#define TD_PROTO_WIRE_GRAPH_H

#include "engine/graph.h"
#include "wire.h"

/* Storage behind a Tensord__V1__Graph built by td__wire_graph_to (it borrows g's names
 * and attribute arrays, so g must outlive it). */
typedef struct td__wire_graph {
    Tensord__V1__Graph msg;
    void *mem[9];
} td__wire_graph;

/* Build w->msg from a valid graph. Returns TD_OK or TD_ENOMEM. */
td_status td__wire_graph_to(const td__graph *g, td__wire_graph *w);
void td__wire_graph_fini(td__wire_graph *w);

/* Convert and validate an untrusted wire graph (td__graph_validate). On TD_OK *out holds
 * a new valid graph (one reference). Errors: TD_EINVAL / TD_EPROTO with a message; TD_ENOMEM. */
td_status td__wire_graph_from(const Tensord__V1__Graph *w, td__graph **out, char *err,
                              size_t errlen);
#endif

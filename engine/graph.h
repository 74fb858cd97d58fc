/* graph.h — captured op graphs: validated once, run many times with new bindings.
 *
 * A graph is a straight-line program over numbered values:
 *   values [0, n_inputs)                          named inputs (dtype and shape fixed)
 *   values [n_inputs, n_inputs + n_consts)        captured tensors, referred to by the
 *                                                 session tensor id they had at capture
 *   value  n_inputs + n_consts + k                the output of ops[k]
 * Op k may only read values below its own, so the capture order is a topological order
 * and cycles or forward references cannot be expressed (they are rejected as such).
 * Outputs name values. td__op.inputs of a graph op hold value numbers; td__op.output is
 * ignored (set to the value number by td__graph_validate).
 *
 * Why a value numbering rather than the client's tensor ids: the definition is then the
 * same for every run and every session, so its SHA-256 (over the canonical encoding below)
 * identifies it in the server's cache, and a run only names the graph and its bindings.
 *
 * Canonical encoding (little-endian, hashed with SHA-256): "TDG1", then
 *   u32 n_inputs,  per input:  u32 name length, name bytes, u32 dtype, u32 rank, i64 dims
 *   u32 n_consts,  per const:  u64 tensor id, u32 dtype, u32 rank, i64 dims
 *   u32 n_ops,     per op:     u32 opcode, u32 dtype, u32 n_inputs, u64 inputs,
 *                              u32 n_iattrs, i64 iattrs, 2 x f64 bits, u64 seed
 *   u32 n_outputs, per output: u32 name length, name bytes, u64 value
 *
 * Thread-safety: a validated graph is immutable; refs/unrefs are atomic, so one graph may
 * be shared by many sessions and threads.
 */
#ifndef TD_ENGINE_GRAPH_H
#define TD_ENGINE_GRAPH_H

#include "engine/op.h"
#include "engine/session.h"
#include <stdatomic.h>

#define TD_GRAPH_HASH_BYTES 32
#define TD_GRAPH_MAX_OPS 65536
#define TD_GRAPH_MAX_INPUTS 4096   /* also the cap on consts and outputs */
#define TD_GRAPH_MAX_NAME 255
/* Session ids at and above this are the graph executor's temporaries: the engine's own
 * range, above every id a client may name (TD_SESSION_ID_MAX, engine/session.h). */
#define TD_GRAPH_TEMP_BASE (TD_SESSION_ID_MAX + 1)

typedef struct td__graph_input {
    char *name; /* owned */
    td__desc desc;
} td__graph_input;

typedef struct td__graph_const {
    uint64_t id; /* session tensor id at capture */
    td__desc desc;
} td__graph_const;

typedef struct td__graph_output {
    char *name; /* owned */
    uint64_t value;
} td__graph_output;

typedef struct td__graph {
    atomic_long refs;
    uint32_t n_inputs, n_consts, n_ops, n_outputs;
    td__graph_input *inputs;
    td__graph_const *consts;
    td__op *ops;
    td__graph_output *outputs;
    td__desc *values; /* n_inputs + n_consts + n_ops, filled by td__graph_validate */
    bool valid;
    uint8_t hash[TD_GRAPH_HASH_BYTES];
    /* The tenant quota charged `charged` bytes for this graph (NULL: none), given back by
     * the last unref. Set once by whoever keeps it (server/graphcache.c) before sharing. */
    td__quota *quota;
    uint64_t charged;
} td__graph;

/* Host memory the graph holds: its struct, arrays and names (what td__graph_alloc and the
 * decoder allocated), without allocator overhead. Thread-safety: any thread. */
uint64_t td__graph_nbytes(const td__graph *g);

/* A graph with room for the given counts (zeroed, one reference). Counts above the caps
 * give TD_EINVAL with a message; TD_ENOMEM. */
td_status td__graph_alloc(uint64_t n_inputs, uint64_t n_consts, uint64_t n_ops,
                          uint64_t n_outputs, td__graph **out, char *err, size_t errlen);
void td__graph_ref(td__graph *g);
/* Drop a reference; frees on the last. NULL is a no-op. */
void td__graph_unref(td__graph *g);

/* Check everything (names present, printable and unique; descs; every op input refers to
 * an earlier value; td__op_infer on every op; outputs refer to existing values), fill
 * values[] and the hash, mark the graph valid. Treats every field as hostile.
 * Returns TD_OK or TD_EINVAL with a message ("graph op 3 (matmul): ...") in err. */
td_status td__graph_validate(td__graph *g, char *err, size_t errlen);

/* Lowercase hex of the first `nbytes` bytes of a hash into buf (2*nbytes+1 chars). */
void td__graph_hash_hex(const uint8_t *hash, size_t nbytes, char *buf);

/* Run a valid graph on session s: inputs bound to session ids in_ids[0..n_in) (in the
 * graph's input order), results written to the fresh ids out_ids[0..n_out). Bindings are
 * checked first: counts; each output id is in 1..TD_SESSION_ID_MAX, not in use in the
 * session and not named twice; each input and captured tensor exists, is not poisoned and
 * has exactly the declared dtype and shape. A binding error is reported through
 * on_failure (op_index 0) and poisons the output ids that are valid and unused (live
 * tensors are never touched); a poisoned input poisons the outputs quietly (its failure
 * was reported when it happened). Failures of ops are reported as by td__session_exec,
 * op_index being the graph op. Returns the number of failures reported.
 * Thread-safety: the session's rule (one thread at a time). */
size_t td__graph_exec(td__session *s, const td__graph *g, const uint64_t *in_ids, size_t n_in,
                      const uint64_t *out_ids, size_t n_out, td__failure_fn on_failure,
                      void *arg);

/* The same run in time slices (the server's device worker uses it so that a long graph
 * does not hold the device from other sessions). td__graph_run_create checks the bindings
 * as td__graph_exec does; on a binding error it reports it, sets *out = NULL and returns
 * the failures reported (0 or 1); else *out is the run (nothing executed yet) and it
 * returns 0. td__graph_run_step executes ops for about budget_ns (at least one op) and
 * returns true when every op has run. td__graph_run_destroy releases the run's
 * temporaries (also when it stops early: the remaining ops simply do not run) and returns
 * the failures reported by its ops. The run borrows g, which must outlive it. NULL is a
 * no-op for destroy. Thread-safety: the session's rule. */
typedef struct td__graph_run td__graph_run;
size_t td__graph_run_create(td__session *s, const td__graph *g, const uint64_t *in_ids,
                            size_t n_in, const uint64_t *out_ids, size_t n_out,
                            td__failure_fn on_failure, void *arg, td__graph_run **out);
bool td__graph_run_step(td__session *s, td__graph_run *r, uint64_t budget_ns);
size_t td__graph_run_destroy(td__session *s, td__graph_run *r);
#endif

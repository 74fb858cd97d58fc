/* raw_session.h — a bare Session stream for hostile-input tests.
 *
 * Talks tensord.v1 with proto/wire.c directly, bypassing libtensord, so a test can send
 * what no well-behaved client would: unknown ids and opcodes, bad shapes, out-of-range
 * writes, wrong protocol versions, garbage bytes. Every call is synchronous and bounded.
 * The gRPC call itself is libtensord's one call helper (client/call.h), so the test client
 * and the product drive the call the same way; what is sent is the test's.
 * Thread-safety: one thread per session. */
#ifndef TD_TESTS_E2E_RAW_SESSION_H
#define TD_TESTS_E2E_RAW_SESSION_H

#include "client/call.h"
#include "engine/op.h"
#include "proto/wire.h"
#include <grpc/grpc.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct raw_session {
    td__cli_call c; /* the call; c.stream_ended: a receive found the end of the stream;
                       c.send_failed: the call is over, but replies already on their way
                       can still be received */
    bool started;   /* grpc_init ran and c is initialised */
    uint64_t next_seq;
    grpc_status_code status; /* the final status, once the call has one */
    td__wire_scratch scratch;
    char device[64];
    /* SessionOpened's session id and shared-memory offer (shm_bytes 0: none) */
    uint64_t session_id;
    char shm_path[128];
    uint8_t shm_secret[16];
    uint64_t shm_bytes;
    char shm_refused[256]; /* SessionOpened.shm_refused */
} raw_session;

/* One received server message, copied out. */
typedef struct raw_msg {
    uint64_t seq;
    int kind; /* TENSORD__V1__SERVER_MESSAGE__BODY_* */
    uint32_t status;        /* failure */
    uint32_t op_index;      /* failure */
    char message[1024];     /* failure */
    uint64_t tensor, offset; /* read chunk */
    bool last;              /* read chunk */
    uint8_t *payload;       /* read chunk: malloc'd copy (free with raw_msg_fini) */
    size_t payload_len;
    bool known;             /* graph ready */
    uint64_t present;       /* blob status: bit i set when hash i (of the first 64) is present */
    size_t n_present;       /* blob status: number of answers */
} raw_msg;
void raw_msg_fini(raw_msg *m);

/* When not NULL, sent as the "authorization" header of every new session (for servers
 * started with --tokens-file), e.g. "Bearer tdt_..." or something malformed. */
extern const char *raw_authorization;

/* When > 0, new sessions' channels take at most this many bytes of replies ahead of what
 * the test receives (HTTP/2 stream window, no BDP growth): a client that does not read. */
extern int raw_recv_window;

/* When true, raw_open asks for a shared-memory region (OpenSession.shm). */
extern bool raw_want_shm;
/* OpenSession.shm_bytes raw_open sends (0: the server's default region). */
extern uint64_t raw_want_shm_bytes;

/* Start a Session call (no message sent yet). false if the channel cannot be created. */
bool raw_start(raw_session *s, const char *target);
/* raw_start + OpenSession{pmin, pmax, device}; returns true when SessionOpened came back.
 * When the server ends the call instead, returns false with s->status/s->details set. */
bool raw_open(raw_session *s, const char *target, uint32_t pmin, uint32_t pmax,
              const char *device);
/* Send a message with the next seq (returned in *seq if non-NULL), optionally with a
 * payload. false if the send failed (stream gone). */
bool raw_send(raw_session *s, Tensord__V1__ClientMessage *m, const void *payload, size_t n,
              uint64_t *seq);
/* Send arbitrary bytes as one message (no seq number is used up: the server cannot know
 * one from garbage). */
bool raw_send_bytes(raw_session *s, const void *bytes, size_t n);
/* Convenience senders; each returns the seq used (0 if the send failed). */
uint64_t raw_send_ops(raw_session *s, const td__op *ops, size_t n);
uint64_t raw_send_fence(raw_session *s);
uint64_t raw_send_read(raw_session *s, uint64_t tensor, uint64_t offset, uint64_t nbytes);
uint64_t raw_send_write(raw_session *s, uint64_t tensor, uint64_t offset, const void *data,
                        size_t n);
uint64_t raw_send_release(raw_session *s, const uint64_t *ids, size_t n);
/* Receive one message within timeout_ms. Returns 1 (message in *m), 0 (stream ended: the
 * status is then in s->status/details), -1 (timeout), -2 (undecodable message). */
int raw_recv(raw_session *s, raw_msg *m, int timeout_ms);
/* Half-close, drain, collect the status, free everything. Returns the final status. */
grpc_status_code raw_close(raw_session *s);
/* Cancel the call and free everything. */
void raw_abort(raw_session *s);
/* The final status details as a C string (static buffer, valid until the next call). */
const char *raw_details(const raw_session *s);

/* Op builders (zeroed td__op plus the given fields). */
td__op raw_op_full(uint64_t out, uint32_t dtype, int rank, const int64_t *dims, double v);
td__op raw_op_binary(uint32_t opcode, uint64_t out, uint64_t a, uint64_t b);
/* ---- graphs over the raw protocol ---- */

/* A chain of n ops of one unary `opcode` over input "x" f32[len]: op k reads value k (the
 * input for op 0, op k-1's output after), output "y" is value n. Fields may be changed
 * before sending (a test breaks it on purpose). raw_graph_fini frees what init took. */
typedef struct raw_graph {
    Tensord__V1__Graph g;
    Tensord__V1__GraphInput in, *inp;
    Tensord__V1__GraphOutput out, *outp;
    Tensord__V1__Op *ops, **opp;
    uint64_t *inputs;
    int64_t dims[1];
} raw_graph;
void raw_graph_init(raw_graph *r, size_t n, uint32_t opcode, int64_t len);
void raw_graph_fini(raw_graph *r);
/* Send GraphDefine{graph_id = id[0..id_len), graph}; the seq used, or 0 if the send
 * failed. */
uint64_t raw_send_define(raw_session *s, const uint8_t *id, size_t id_len,
                         Tensord__V1__Graph *graph);
/* Wait up to timeout_ms for the reply to `seq` (other messages are skipped). Returns 1 for a
 * Failure (its message copied to msg), 0 for any other reply, -1 when none came. */
int raw_reply_to(raw_session *s, uint64_t seq, char *msg, size_t len, int timeout_ms);
/* Define `graph` under its real id: a define under the zero id is refused with a message
 * naming the definition's SHA-256, which is then used. Returns 0 with id[] set when the
 * server accepted it, 1 when it refused it (message in msg: e.g. a quota or an invalid
 * definition), -1 when no reply came. */
int raw_define_graph(raw_session *s, Tensord__V1__Graph *graph, uint8_t id[32], char *msg,
                     size_t len);
#endif

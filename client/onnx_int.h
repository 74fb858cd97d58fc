/* onnx_int.h — what the ONNX loader's files share (client/onnx.c, client/onnx_ops.c,
 * client/onnx_tensor.c). Only these files include the protobuf-c code generated from
 * Debian's onnx.proto (build directory, never checked in).
 * Thread-safety: the context's rule (one thread at a time per model).
 */
#ifndef TD_CLIENT_ONNX_INT_H
#define TD_CLIENT_ONNX_INT_H

#include "client/capture.h"
#include "engine/op.h"
#include "onnx.pb-c.h"
#include "tensord.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A host tensor: a decoded TensorProto (initializer, Constant node, Shape output). */
typedef struct td__onnx_host {
    td__desc desc;
    void *data; /* td__malloc'd, desc's byte size (NULL when 0 bytes) */
    size_t nbytes;
} td__onnx_host;

/* ONNX TensorProto.DataType -> td dtype; false for the types tensord lacks (uint16,
 * uint32, uint64, string, complex, float8). */
bool td__onnx_dtype(int32_t onnx_type, td_dtype *out);
/* Name of an ONNX data type ("UINT16"), for messages. */
const char *td__onnx_dtype_name(int32_t onnx_type);
/* Decode a TensorProto into host memory, checking dims (rank <= 8, >= 0, overflow-safe
 * byte size), the data type and that the data present matches the element count.
 * `what` names the tensor in messages ("initializer 'w'"). Returns TD_OK, TD_EINVAL,
 * TD_EUNSUPPORTED (a data type tensord lacks, external data), TD_ENOMEM; err set. */
td_status td__onnx_host_decode(const Onnx__TensorProto *tp, const char *what, td__onnx_host *out,
                               char *err, size_t errlen);
void td__onnx_host_fini(td__onnx_host *h);
/* protobuf-c allocator over the project's allocation hooks (tests fail the Nth one). */
extern ProtobufCAllocator td__onnx_allocator;

/* ---- the op mapping (client/onnx_ops.c) ---- */
typedef struct td__onnx_emit td__onnx_emit;
typedef struct td__onnx_op td__onnx_op;
/* Emit one node: read inputs with td__onnx_in/td__onnx_host_ints, set outputs with
 * td__onnx_set_out. Returns TD_OK or the failure (td__onnx_fail set the message). */
typedef td_status (*td__onnx_handler)(td__onnx_emit *e, const Onnx__NodeProto *n,
                                      const td__onnx_op *op);
struct td__onnx_op {
    const char *op_type;
    int since, until;   /* opsets of the default domain this entry handles; until 0: newest */
    td__onnx_handler fn;
    td_tensor *(*un)(td_tensor *);
    td_tensor *(*bin)(td_tensor *, td_tensor *);
    uint32_t opcode;     /* the tensord op whose dtype class input 0 must be in; ~0u: none */
    uint32_t host_mask;  /* bit k: input k is needed on the host (a shape, axes, ...) */
};
/* host_mask bit 31: the op's outputs are host values (Shape, Size), usable as constants. */
#define TD_ONNX_HOST_OUT (1u << 31)
/* The entry for op_type at `opset`, or NULL. */
const td__onnx_op *td__onnx_op_find(const char *op_type, int64_t opset);
/* Whether some entry has this op type at any opset (to say "opset" rather than "op"). */
bool td__onnx_op_known(const char *op_type);

/* Emitter services (client/onnx.c). */
td_context *td__onnx_ctx(td__onnx_emit *e);
int td__onnx_nin(td__onnx_emit *e, const Onnx__NodeProto *n); /* inputs incl. absent */
/* Device tensor of input k (NULL when absent: an empty name or k beyond the list). */
td_tensor *td__onnx_in(td__onnx_emit *e, const Onnx__NodeProto *n, int k);
/* Host value of input k (NULL when absent or not a host value). */
const td__onnx_host *td__onnx_host_in(td__onnx_emit *e, const Onnx__NodeProto *n, int k);
/* Input k's host value as int64 (i32 or i64 data); *n its element count. false with the
 * error set when absent (and !optional) or not an integer host value. *vals valid for
 * the node. */
bool td__onnx_host_ints(td__onnx_emit *e, const Onnx__NodeProto *n, int k, bool optional,
                        const int64_t **vals, size_t *count, bool *present);
/* Track a handle made while emitting (released after capture); returns t. NULL t: a failed
 * op call, whose message td__onnx_fail will pick up. */
td_tensor *td__onnx_keep(td__onnx_emit *e, td_tensor *t);
/* A small host value (at most 1024 elements) as a tensor made of td_full and td_concat
 * (kept; allowed while capturing). NULL with the failure recorded. */
td_tensor *td__onnx_materialize(td__onnx_emit *e, const td__onnx_host *h);
/* Set output k; t NULL means the op call failed: report it (TD_EINVAL/...). */
td_status td__onnx_set_out(td__onnx_emit *e, const Onnx__NodeProto *n, int k, td_tensor *t);
/* Set output k to a host value (taken over: h->data moves). */
td_status td__onnx_set_host_out(td__onnx_emit *e, const Onnx__NodeProto *n, int k,
                                td__onnx_host *h);
int td__onnx_nout(const Onnx__NodeProto *n);
/* Record a failure of this node ("node 3 'n' (Op): ..."); returns st. */
td_status td__onnx_fail(td__onnx_emit *e, td_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The failure of the last op call on the context (its td_last_error), as a node failure. */
td_status td__onnx_fail_op(td__onnx_emit *e);

/* Attributes. */
const Onnx__AttributeProto *td__onnx_attr(const Onnx__NodeProto *n, const char *name);
int64_t td__onnx_attr_i(const Onnx__NodeProto *n, const char *name, int64_t dflt);
float td__onnx_attr_f(const Onnx__NodeProto *n, const char *name, float dflt);
#endif

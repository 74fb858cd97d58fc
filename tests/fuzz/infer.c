/* fuzz/infer.c — libFuzzer target for the op validator and shape inference: the bytes
 * are taken as a raw td__op followed by its input descs, exactly the values a hostile
 * client can reach after decoding (any opcode, dtype, rank, dims, attributes). */
#include "engine/op.h"

#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    td__op op;
    td__desc d[TD_OP_MAX_INPUTS];
    const td__desc *in[TD_OP_MAX_INPUTS];
    memset(&op, 0, sizeof op);
    memset(d, 0, sizeof d);
    size_t n = size < sizeof op ? size : sizeof op;
    memcpy(&op, data, n);
    if (size > n) memcpy(d, data + n, size - n < sizeof d ? size - n : sizeof d);
    /* Wire decoding bounds these (td__wire_op_from); the validator sees no more. */
    if (op.n_inputs > TD_OP_MAX_INPUTS) op.n_inputs = TD_OP_MAX_INPUTS;
    if (op.n_iattrs > TD_OP_MAX_IATTRS) op.n_iattrs = TD_OP_MAX_IATTRS;
    /* Inputs are live tensors, whose descs were validated when they were made. */
    for (int k = 0; k < TD_OP_MAX_INPUTS; k++) {
        d[k].dtype %= TD_DTYPE_COUNT;
        d[k].rank %= TD_MAX_RANK + 1;
        for (int r = 0; r < TD_MAX_RANK; r++)
            d[k].dims[r] = (int64_t)((uint64_t)d[k].dims[r] % 17);
        in[k] = &d[k];
    }
    td__desc out;
    char err[512];
    (void)td__op_infer(&op, in, &out, err, sizeof err);
    return 0;
}

/* fuzz/wire.c — libFuzzer target for the server's message path before the engine:
 * td__wire_decode of a ClientMessage (garbage, truncated, oversized fields), then
 * td__wire_op_from and td__op_infer on every op of a batch against fuzzed input descs
 * taken from the same bytes. Nothing here may crash, leak or hit undefined behaviour. */
#include "engine/op.h"
#include "proto/wire.h"

#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <grpc/slice.h>
#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static td__wire_scratch scratch;
    /* Split the bytes over two slices, as gRPC may hand them over. */
    size_t cut = size > 0 ? data[0] % (size + 1) : 0;
    grpc_slice parts[2] = {grpc_slice_from_copied_buffer((const char *)data, cut),
                           grpc_slice_from_copied_buffer((const char *)data + cut, size - cut)};
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(parts, 2);
    grpc_slice_unref(parts[0]);
    grpc_slice_unref(parts[1]);
    ProtobufCMessage *m = NULL;
    const uint8_t *payload = NULL;
    size_t payload_len = 0;
    char err[256];
    td_status st = td__wire_decode(bb, &tensord__v1__client_message__descriptor, &scratch, &m,
                                   &payload, &payload_len, err, sizeof err);
    grpc_byte_buffer_destroy(bb);
    if (st != TD_OK) return 0;
    const Tensord__V1__ClientMessage *cm = (const Tensord__V1__ClientMessage *)m;
    if (payload != NULL && payload_len > 0) {
        volatile uint8_t sink = payload[payload_len - 1];
        (void)sink;
    }
    if (cm->body_case == TENSORD__V1__CLIENT_MESSAGE__BODY_BATCH) {
        for (size_t i = 0; i < cm->batch->n_ops && i < 64; i++) {
            td__op op;
            if (td__wire_op_from(cm->batch->ops[i], &op, err, sizeof err) != TD_OK) continue;
            td__desc d[TD_OP_MAX_INPUTS];
            const td__desc *in[TD_OP_MAX_INPUTS];
            for (int k = 0; k < TD_OP_MAX_INPUTS; k++) {
                memset(&d[k], 0, sizeof d[k]);
                d[k].dtype = (uint32_t)((uint64_t)op.iattrs[k % TD_OP_MAX_IATTRS] % TD_DTYPE_COUNT);
                d[k].rank = (uint32_t)(op.seed >> (4 * k)) % (TD_MAX_RANK + 1);
                for (uint32_t r = 0; r < d[k].rank; r++)
                    d[k].dims[r] = (int64_t)((op.seed >> (r + k)) & 3) + (r == 0 ? 1 : 0);
                in[k] = &d[k];
            }
            td__desc out;
            (void)td__op_infer(&op, in, &out, err, sizeof err);
        }
    }
    protobuf_c_message_free_unpacked(m, NULL);
    return 0;
}

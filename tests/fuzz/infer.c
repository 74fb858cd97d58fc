/* fuzz/infer.c — libFuzzer target for the op validator and shape inference, and for the
 * CPU kernels behind it: the bytes are taken as a raw td__op followed by its input descs,
 * exactly the values a hostile client can reach after decoding (any opcode, dtype, rank,
 * dims, attributes). When td__op_infer accepts and every input and the output are small
 * (tests/fuzz/fuzz_exec.h), the op is executed on a local CPU session with inputs made by
 * FULL / ARANGE, and its output is read back whole, so ASan/UBSan check the kernel against
 * the buffer the validator sized.
 *
 * Dims: a dim whose top bit is set keeps its other 63 bits (huge shapes: the overflow
 * cases of issue 10), else it is taken modulo 17 (small shapes that execute). Inputs that
 * fail td__desc_check are skipped: live tensors were validated when they were made. */
#include "engine/op.h"
#include "tests/fuzz/fuzz_exec.h"

#include <stdint.h>
#include <stdlib.h>
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
        for (int r = 0; r < TD_MAX_RANK; r++) {
            uint64_t u = (uint64_t)d[k].dims[r];
            d[k].dims[r] = (u >> 63) ? (int64_t)(u & (uint64_t)INT64_MAX) : (int64_t)(u % 17);
        }
        in[k] = &d[k];
    }
    for (uint32_t k = 0; k < op.n_inputs; k++)
        if (td__desc_check(in[k], NULL, 0) != TD_OK) return 0;
    td__desc out;
    char err[512];
    if (td__op_infer(&op, in, &out, err, sizeof err) != TD_OK) {
        if (err[0] == '\0') abort(); /* every refusal carries a message */
        return 0;
    }
    if (td__desc_check(&out, NULL, 0) != TD_OK) abort(); /* op.h: every output is checked */
    if (!fuzz_exec_cheap(&op, in, &out)) return 0;

    /* Execute: inputs 1..n (gather/index_select indices are zeros, in range), output 100. */
    td__session *s = fuzz_cpu_session();
    uint64_t ids[TD_OP_MAX_INPUTS + 1];
    uint32_t made = 0;
    bool ok = true;
    for (uint32_t k = 0; k < op.n_inputs && ok; k++) {
        bool index = k == 1 && (op.opcode == TD_OP_GATHER || op.opcode == TD_OP_INDEX_SELECT);
        ids[made] = 1 + k;
        ok = fuzz_make_tensor(s, ids[made], 50 + k, in[k], op.fattrs[0] == op.fattrs[0] ?
                              op.fattrs[0] : 0.0, index);
        made++;
        op.inputs[k] = 1 + k;
    }
    if (ok) {
        op.output = 100;
        ids[made++] = 100;
        char od[160];
        td__desc_str(&out, od, sizeof od);
        if (td__session_exec(s, &op, 1, fuzz_on_failure, NULL) == 0) {
            td_status st = fuzz_read_all(s, 100, &out);
            if (st != TD_OK) abort(); /* the op succeeded: its output must be readable */
            fuzz_trace("infer: executed %s -> %s", td__op_name(op.opcode), od);
        } else {
            fuzz_trace("infer: %s -> %s failed at run time", td__op_name(op.opcode), od);
        }
    }
    td__session_release(s, ids, made);
    if (td__session_tensor_count(s) != 0 || td__session_bytes(s) != 0) abort();
    return 0;
}

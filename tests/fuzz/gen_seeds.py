#!/usr/bin/env python3
"""Write the hand-made seed inputs of tests/fuzz/corpus/{infer,graph,wire}/ (issue 10).

Seeds: the WHERE heap overflow (FULL f32 [3161593,1,1], [1,2438809,1], [1,1,598103] ->
2^62 + 7 elements, byte size wrapping to 28), its 2^62-element variant (0 bytes), the UBSan
count case (u8 [1,1,2^40,0] + [2^12,2^12,1,1]), and small ops and graphs that validate and
execute (where, matmul, concat, gather, reduce), so the targets start from inputs that reach
the CPU kernels.

infer seeds are the raw bytes the target reads: a td__op (engine/op.h, little-endian,
304 bytes) then td__desc entries (72 bytes each). A dim with its top bit set is taken as
its low 63 bits by the target; other dims modulo 17. graph and wire seeds are protobuf
(tensord.v1 Graph, ClientMessage), encoded by hand below.

Run: python3 tests/fuzz/gen_seeds.py (rewrites only the files named here).
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
OP = {"full": 1, "arange": 2, "add": 30, "lt": 42, "where": 50, "sum": 60, "matmul": 70,
      "concat": 83, "gather": 85, "index_select": 86, "cast": 51, "neg": 10}
F32, F64, I32, I64, U8, BOOL = range(6)
TOP = 1 << 63


def op_bytes(opcode, dtype=0, n_inputs=0, iattrs=(), fattrs=(0.0, 0.0), seed=0):
    b = struct.pack("<IIII", opcode, dtype, n_inputs, len(iattrs))
    b += struct.pack("<8Q", *([0] * 8)) + struct.pack("<Q", 0)
    ia = list(iattrs) + [0] * (24 - len(iattrs))
    b += struct.pack("<24q", *ia) + struct.pack("<2d", *fattrs) + struct.pack("<Q", seed)
    assert len(b) == 304
    return b


def dim(d):
    """Encode a dim for fuzz-infer: small ones as is, others with the top bit set."""
    return d if d < 17 else (TOP | d)


def desc_bytes(dtype, dims):
    dd = [dim(d) for d in dims] + [0] * (8 - len(dims))
    b = struct.pack("<II", dtype, len(dims)) + struct.pack("<8Q", *dd)
    assert len(b) == 72
    return b


def infer_seeds():
    w = {}
    big3 = [[3161593, 1, 1], [1, 2438809, 1], [1, 1, 598103]]
    w["where_overflow_2p62_plus_7"] = (op_bytes(OP["where"], n_inputs=3) +
                                       desc_bytes(BOOL, big3[0]) + desc_bytes(F32, big3[1]) +
                                       desc_bytes(F32, big3[2]))
    e = [[1 << 21, 1, 1], [1, 1 << 21, 1], [1, 1, 1 << 20]]
    w["where_overflow_2p62"] = (op_bytes(OP["where"], n_inputs=3) + desc_bytes(BOOL, e[0]) +
                                desc_bytes(F32, e[1]) + desc_bytes(F32, e[2]))
    w["add_u8_empty_span_2p64"] = (op_bytes(OP["add"], n_inputs=2) +
                                   desc_bytes(U8, [1, 1, 1 << 40, 0]) +
                                   desc_bytes(U8, [1 << 12, 1 << 12, 1, 1]))
    w["cast_u8_to_f64_widens"] = op_bytes(OP["cast"], dtype=F64, n_inputs=1) + \
        desc_bytes(U8, [1 << 48])
    w["where_small"] = (op_bytes(OP["where"], n_inputs=3) + desc_bytes(BOOL, [3, 1]) +
                        desc_bytes(F32, [1, 4]) + desc_bytes(F32, [3, 4]))
    w["matmul_small"] = (op_bytes(OP["matmul"], n_inputs=2) + desc_bytes(F32, [2, 3, 4]) +
                         desc_bytes(F32, [4, 5]))
    w["concat_small"] = (op_bytes(OP["concat"], n_inputs=3, iattrs=[1]) +
                         desc_bytes(I32, [2, 1]) + desc_bytes(I32, [2, 3]) +
                         desc_bytes(I32, [2, 0]))
    w["gather_small"] = (op_bytes(OP["gather"], n_inputs=2, iattrs=[1]) +
                         desc_bytes(F64, [4, 5]) + desc_bytes(I64, [4, 2]))
    w["index_select_small"] = (op_bytes(OP["index_select"], n_inputs=2, iattrs=[0]) +
                               desc_bytes(F32, [6, 2]) + desc_bytes(I32, [3, 2]))
    w["sum_keepdims_small"] = (op_bytes(OP["sum"], n_inputs=1, iattrs=[0b101, 1]) +
                               desc_bytes(I64, [3, 4, 5]))
    w["neg_extra_attr"] = op_bytes(OP["neg"], n_inputs=1, iattrs=[7]) + desc_bytes(F32, [3])
    return w


def varint(n):
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field(num, wire, payload):
    key = varint((num << 3) | wire)
    if wire == 0:
        return key + varint(payload)
    return key + varint(len(payload)) + payload


def packed(num, values):
    return field(num, 2, b"".join(varint(v) for v in values))


def pb_op(opcode, dtype=0, inputs=(), iattrs=(), fattrs=()):
    b = field(1, 0, opcode) + field(2, 0, dtype)
    if inputs:
        b += packed(3, inputs)
    if iattrs:
        b += packed(5, iattrs)
    if fattrs:
        b += field(6, 2, b"".join(struct.pack("<d", f) for f in fattrs))
    return b


def pb_graph(inputs, ops, outputs):
    b = b""
    for name, dt, dims in inputs:
        b += field(1, 2, field(1, 2, name.encode()) + field(2, 0, dt) + packed(3, dims))
    for o in ops:
        b += field(3, 2, o)
    for name, value in outputs:
        b += field(4, 2, field(1, 2, name.encode()) + field(2, 0, value))
    return b


def where_full_graph(shapes):
    ops = [pb_op(OP["full"], BOOL, iattrs=shapes[0], fattrs=[1.0]),
           pb_op(OP["full"], F32, iattrs=shapes[1], fattrs=[2.0]),
           pb_op(OP["full"], F32, iattrs=shapes[2], fattrs=[3.0]),
           pb_op(OP["where"], 0, inputs=[0, 1, 2])]
    return pb_graph([], ops, [("y", 3)])


def graph_seeds():
    w = {}
    w["where_overflow_2p62_plus_7"] = where_full_graph(
        [[3161593, 1, 1], [1, 2438809, 1], [1, 1, 598103]])
    w["where_overflow_2p62"] = where_full_graph([[1 << 21, 1, 1], [1, 1 << 21, 1],
                                                 [1, 1, 1 << 20]])
    # small and valid: x f32[2,3]; h = full f32[2,1] 0.5; m = x < h; y = where(m, x, h);
    # z = matmul(y, full f32[3,2] 1); s = sum(z, axis 1); c = concat(z, z) along 0
    ops = [pb_op(OP["full"], F32, iattrs=[2, 1], fattrs=[0.5]),      # value 1
           pb_op(OP["lt"], 0, inputs=[0, 1]),                         # value 2
           pb_op(OP["where"], 0, inputs=[2, 0, 1]),                   # value 3
           pb_op(OP["full"], F32, iattrs=[3, 2], fattrs=[1.0]),       # value 4
           pb_op(OP["matmul"], 0, inputs=[3, 4]),                     # value 5
           pb_op(OP["sum"], 0, inputs=[5], iattrs=[2, 0]),            # value 6
           pb_op(OP["concat"], 0, inputs=[5, 5], iattrs=[0])]         # value 7
    w["where_matmul_small"] = pb_graph([("x", F32, [2, 3])], ops,
                                       [("y", 3), ("s", 6), ("c", 7)])
    return w


def wire_seeds():
    def batch(ops):
        return field(1, 0, 1) + field(3, 2, b"".join(field(1, 2, o) for o in ops))
    w = {}
    big3 = [[3161593, 1, 1], [1, 2438809, 1], [1, 1, 598103]]
    ops = [pb_op(OP["full"], BOOL, iattrs=big3[0], fattrs=[1.0]) + field(4, 0, 1),
           pb_op(OP["full"], F32, iattrs=big3[1], fattrs=[2.0]) + field(4, 0, 2),
           pb_op(OP["full"], F32, iattrs=big3[2], fattrs=[3.0]) + field(4, 0, 3),
           pb_op(OP["where"], 0, inputs=[1, 2, 3]) + field(4, 0, 4)]
    w["batch_where_overflow"] = batch(ops)
    return w


def main():
    for target, seeds in (("infer", infer_seeds()), ("graph", graph_seeds()),
                          ("wire", wire_seeds())):
        d = os.path.join(HERE, "corpus", target)
        os.makedirs(d, exist_ok=True)
        for name, data in seeds.items():
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)
            print(f"{target}/{name}: {len(data)} bytes")


if __name__ == "__main__":
    main()

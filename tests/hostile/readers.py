#!/usr/bin/python3
"""hostile-readers-py: a client that asks for reads of a tensor in device memory and never
takes the replies, spoken by a client that is not libtensord (tests/hostile/wireclient.py),
against a tensord serving vulkan:0 (lavapipe in CI: memory the host cannot address, so
every read chunk is a copy the server makes).

README ("Replies a client does not read are held up to 64 MiB per session"): twelve reads
of a 32 MiB tensor on vulkan:0 that the client never takes may grow the server by that
bound plus one read's worth of chunks, not by the 384 MiB they add up to (they did, before
run_read gave up its turn above the mark). Meanwhile another session on the same device
works; when the client goes, the server's memory returns to where it was.

Bounded: loopback, one server, every call with a deadline; about 15 s. Registered only
when the Vulkan module is built. usage: readers.py TENSORD SOURCE_ROOT
"""
import os
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wireclient  # noqa: E402
from wireclient import Session, channel, check, serve  # noqa: E402

OP_FULL, F32 = 1, 0  # engine/optable.h: FULL is opcode 1
MIB = 1 << 20
TENSOR_MIB, READS = 32, 12


def rss_mib():
    with open(f"/proc/{wireclient.server_pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def full_f32(pb, tensor, n, value):
    return pb.OpBatch(ops=[pb.Op(opcode=OP_FULL, dtype=F32, output=tensor, iattrs=[n],
                                 fattrs=[value])])


def open_session(ch, pb, device):
    s = Session(ch, pb)
    s.send(open=pb.OpenSession(protocol_min=1, protocol_max=4, device=device,
                               client_name="hostile-readers"))
    m = s.recv()
    check(m.WhichOneof("body") == "opened", f"session opened on {device} ({m.WhichOneof('body')})")
    return s


def run(pb, addr, sock):
    ch = channel(addr)
    s = open_session(ch, pb, "vulkan:0")
    n = TENSOR_MIB * MIB
    s.send(batch=full_f32(pb, 1, n // 4, 1.0))
    fence = s.send(fence=pb.Fence())
    m = s.reply_to(fence)
    check(m.WhichOneof("body") == "fence", f"a {TENSOR_MIB} MiB tensor on vulkan:0 ({m})")
    time.sleep(0.5)
    base = rss_mib()
    for _ in range(READS):
        s.send(read=pb.ReadRequest(tensor=1, offset=0, nbytes=n))
    peak = base
    for _ in range(16):  # never take the replies; watch the server
        time.sleep(0.25)
        peak = max(peak, rss_mib())
    bound = 64 + TENSOR_MIB + 48  # the mark, one read, allocator slack
    check(peak - base < bound,
          f"{READS} unread reads of {TENSOR_MIB} MiB grew the server by {peak - base:.0f} MiB "
          f"(< {bound}; unbounded would be {READS * TENSOR_MIB})")

    s2 = open_session(channel(addr), pb, "vulkan:0")
    s2.send(batch=full_f32(pb, 5, 4, 2.0))
    got, failure = s2.read(s2.send(read=pb.ReadRequest(tensor=5, offset=0, nbytes=16)))
    check(got == struct.pack("<4f", 2, 2, 2, 2) and failure is None,
          f"another session on vulkan:0 reads meanwhile ({got!r}, {failure})")
    s2.close()

    s.replies.cancel()
    after = peak
    for _ in range(40):
        time.sleep(0.25)
        after = rss_mib()
        if after - base < 32:
            break
    check(after - base < 32, f"the server's memory returns after the client goes "
          f"({after - base:.0f} MiB over its baseline)")


serve(["--devices", "cpu,vulkan:0"], run)

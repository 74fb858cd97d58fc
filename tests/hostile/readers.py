#!/usr/bin/python3
"""hostile-readers-py: a client that asks for reads of a tensor in device memory and never
takes the replies, spoken by a client that is not libtensord (tests/hostile/wireclient.py),
against a tensord serving vulkan:0 (lavapipe in CI: memory the host cannot address, so
every read chunk is a copy the server makes).

README ("Replies a client does not read are held up to 64 MiB per session"): twelve reads
of a 32 MiB tensor on vulkan:0 that the client never takes may grow the server by that
bound plus one read's worth of chunks, not by the 384 MiB they add up to (they did, before
run_read stopped above the mark). The copies waiting to be sent are charged to the tenant's
bytes (README "Memory limits": GetInfo's bytes_in_use counts them; it did not, before).
Meanwhile another session on the same device works. When the client then takes its
replies, the held read resumes (the call's drain releases its queue) and every one of the
twelve reads delivers all its bytes, in order, and the charge goes back to the tensor's.
When a client goes without reading, a second one doing the same finds the first one's
memory freed (the server's peak does not grow again).

The server runs with TENSORD_NO_MALLOC_TUNE=1 (glibc's own trim policy: tensord's keeps
64 MiB of freed heap, which would hide whether the chunks were freed). As in
tests/hostile/memory.c does under TSan, a sanitizer build of the server gets no memory
bounds (logged; ASan's quarantine keeps freed memory resident, TSan's shadow scales with
what is touched); the other checks hold there too, and the plain pass checks the bounds.

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


def server_cpu_s():
    """The server's user + system CPU time so far, in seconds (/proc/PID/stat)."""
    with open(f"/proc/{wireclient.server_pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def sanitizer_slack():
    """None (memory bounds not checked) for a sanitizer build of the server, else 0 (from
    the libraries in its /proc/PID/maps): ASan's quarantine keeps up to 256 MiB of freed
    memory resident and TSan's shadow memory scales with everything touched, so RSS says
    nothing about what the server holds; the plain pass checks the bounds."""
    with open(f"/proc/{wireclient.server_pid}/maps") as f:
        maps = f.read()
    for lib, name in (("libtsan", "ThreadSanitizer"), ("libasan", "AddressSanitizer")):
        if lib in maps:
            print(f"server runs under {name}: memory bounds not checked")
            return None
    return 0


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


def bytes_in_use(pb, addr):
    """GetInfo's bytes_in_use: what the caller's tenant is charged for."""
    ch = channel(addr)
    info = ch.unary_unary("/tensord.v1.Tensord/GetInfo",
                          request_serializer=lambda m: m.SerializeToString(),
                          response_deserializer=pb.InfoResponse.FromString)(pb.InfoRequest(),
                                                                            timeout=10)
    ch.close()
    return info.bytes_in_use


def never_read(pb, addr, tensor):
    """A session on vulkan:0 that makes a TENSOR_MIB tensor, asks for READS reads of it and
    does not take the replies; returns (the session, RSS before the reads, peak RSS after,
    the reads' seqs)."""
    s = open_session(channel(addr), pb, "vulkan:0")
    n = TENSOR_MIB * MIB
    s.send(batch=full_f32(pb, tensor, n // 4, 1.0))
    fence = s.send(fence=pb.Fence())
    m = s.reply_to(fence)
    check(m.WhichOneof("body") == "fence", f"a {TENSOR_MIB} MiB tensor on vulkan:0 ({m})")
    time.sleep(0.5)
    base = rss_mib()
    seqs = [s.send(read=pb.ReadRequest(tensor=tensor, offset=0, nbytes=n)) for _ in range(READS)]
    peak = base
    for _ in range(16):  # do not take the replies; watch the server
        time.sleep(0.25)
        peak = max(peak, rss_mib())
    return s, base, peak, seqs


def run(pb, addr, sock):
    s, base, peak, seqs = never_read(pb, addr, 1)
    slack = sanitizer_slack()
    charged = bytes_in_use(pb, addr)
    check(charged >= (TENSOR_MIB + 48) * MIB,
          f"the tenant is charged for the unsent read copies: {charged / MIB:.1f} MiB in use "
          f"(the tensor's {TENSOR_MIB} MiB and at least 48 MiB of copies)")
    bound = 64 + TENSOR_MIB + 48 + (slack or 0)  # the mark, one read, allocator slack
    check(slack is None or peak - base < bound,
          f"{READS} unread reads of {TENSOR_MIB} MiB grew the server by {peak - base:.0f} MiB "
          f"(< {bound}; unbounded would be {READS * TENSOR_MIB})")

    s2 = open_session(channel(addr), pb, "vulkan:0")
    s2.send(batch=full_f32(pb, 5, 4, 2.0))
    got, failure = s2.read(s2.send(read=pb.ReadRequest(tensor=5, offset=0, nbytes=16)))
    check(got == struct.pack("<4f", 2, 2, 2, 2) and failure is None,
          f"another session on vulkan:0 reads meanwhile ({got!r}, {failure})")
    s2.close()

    # The client takes its replies now: the held read resumes, all of every read arrives.
    want = struct.pack("<f", 1.0) * (TENSOR_MIB * MIB // 4)
    for i, seq in enumerate(seqs):
        got, failure = s.read(seq)
        check(got == want and failure is None,
              f"read {i + 1} of {READS}, taken late, delivers its {TENSOR_MIB} MiB "
              f"({len(got)} bytes, {'equal' if got == want else 'different'}, {failure})")
    for _ in range(50):  # the last sends' completions may trail the client's receipt
        charged = bytes_in_use(pb, addr)
        if charged - TENSOR_MIB * MIB < MIB:
            break
        time.sleep(0.1)
    check(charged - TENSOR_MIB * MIB < MIB,
          f"once sent, the copies' charge is gone: {charged} bytes in use (the tensor's "
          f"{TENSOR_MIB * MIB} and less than one 1 MiB chunk of anything else)")

    # Held, then the client half-closes its request stream (it may still take replies): the
    # read stays held without spinning the worker, and taking the replies afterwards gets
    # every byte; the server stays up (a held read on a closing queue once freed the queue
    # under the hold: SIGSEGV/SIGABRT, and spun a core).
    s4 = open_session(channel(addr), pb, "vulkan:0")
    n4 = 8 * MIB
    s4.send(batch=full_f32(pb, 1, n4 // 4, 3.0))
    seqs4 = [s4.send(read=pb.ReadRequest(tensor=1, offset=0, nbytes=n4)) for _ in range(12)]
    time.sleep(1)
    s4.close()  # half-close: no more requests
    cpu0 = server_cpu_s()
    time.sleep(2)
    spent = server_cpu_s() - cpu0
    check(spent < 1.0, f"a held read after a half-close takes no worker turns: server CPU "
                       f"{spent:.2f} s in 2 s (< 1)")
    want4 = struct.pack("<f", 3.0) * (n4 // 4)
    ok4 = True
    for seq in seqs4:
        got, failure = s4.read(seq)
        ok4 = ok4 and got == want4 and failure is None
    check(ok4, "after the half-close, all 12 held reads deliver their bytes")
    s5 = open_session(channel(addr), pb, "vulkan:0")
    s5.send(batch=full_f32(pb, 2, 4, 5.0))
    got, failure = s5.read(s5.send(read=pb.ReadRequest(tensor=2, offset=0, nbytes=16)))
    check(got == struct.pack("<4f", 5, 5, 5, 5), f"the server still serves ({got!r}, {failure})")
    s5.close()

    # The client goes; a second one does the same. Had the first one's queued chunks not
    # been freed, the server would now hold both sets (the allocator may keep freed memory
    # mapped, so the check is that the second round reuses it, not that RSS falls).
    s.replies.cancel()
    time.sleep(1)
    s3, _, peak2, _ = never_read(pb, addr, 1)
    grew = 48 + (slack or 0)
    check(slack is None or peak2 - peak < grew,
          f"a second never-reading client after the first went: peak {peak2 - peak:+.0f} MiB "
          f"over the first's (< {grew}; a leak would add ~64)")
    s3.replies.cancel()


if os.environ.get("TD_TEST_TENSORD"):
    # tests/run.sh's TSan pass: that tensord is built without the device modules
    print("skipping: TD_TEST_TENSORD's server is built without the Vulkan module")
    sys.exit(77)
os.environ["TENSORD_NO_MALLOC_TUNE"] = "1"
serve(["--devices", "cpu,vulkan:0"], run)

#!/usr/bin/python3
"""hostile-ring-py: the request ring (protocol 6, tensord.proto "request ring"), spoken by a
client that is not libtensord: Debian's python3-grpcio with tensord.proto compiled at test
time, the region fetched over the side socket (helpers of shm.py), the ring's words written
with Python's mmap and the doorbell rung with futex(2) through ctypes, against a tensord on a
unix socket with --shm-bytes 2M.

- A protocol-5 open that asks for the ring gets a region without one; a protocol-6 open
  gets the ring as the region's last 128 KiB.
- Well-formed ring requests: a read of a tensor written over the stream just before (the
  ring waits for the stream), a fence, and a read too large for the ring (a Failure with
  its seq; the session goes on).
- Garbage, each on a fresh session: a request length past the area, a zero length, a
  frame length past the request, more frames than allowed, undecodable bytes, a body the
  ring does not carry, a seq already used. Each ends that session with INVALID_ARGUMENT and
  a message naming the request ring, the ring is marked closed, and the server goes on
  serving (a new session works; tensord exits 0 on SIGTERM).

Bounded: one server, every wait with a deadline. Skipped (77) without python3-grpcio /
python3-grpc-tools. usage: ring.py TENSORD SOURCE_ROOT
"""
import ctypes
import mmap
import os
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shm  # noqa: E402  (its side() and main; exits 77 without grpc)
from shm import REGION, side  # noqa: E402
from wireclient import SAMPLE, Session, channel, check, empty_f32  # noqa: E402

import grpc  # noqa: E402

TD_EPROTO = 7
RING = 128 << 10
OFF_REQ_COUNT, OFF_REQ_LEN, OFF_REP_COUNT, OFF_REP_LEN, OFF_CLOSED = 64, 68, 128, 132, 140
REQ_OFFSET, REP_OFFSET = 4096, 32 << 10
libc = ctypes.CDLL(None, use_errno=True)
SYS_FUTEX, FUTEX_WAKE = 202, 1


class Ring:
    def __init__(self, region, offset):
        self.m, self.off = region, offset
        self.word = ctypes.c_uint32.from_buffer(region, offset + OFF_REQ_COUNT)

    def u32(self, at):
        return struct.unpack_from("<I", self.m, self.off + at)[0]

    def set_u32(self, at, v):
        struct.pack_into("<I", self.m, self.off + at, v & 0xFFFFFFFF)

    def post(self, body, length=None):
        """Write body into the request area, REQ_LEN (length or len(body)), bump REQ_COUNT
        and ring the doorbell. Returns the count to wait for."""
        self.m[self.off + REQ_OFFSET:self.off + REQ_OFFSET + len(body)] = body
        self.set_u32(OFF_REQ_LEN, len(body) if length is None else length)
        want = (self.u32(OFF_REQ_COUNT) + 1) & 0xFFFFFFFF
        self.set_u32(OFF_REQ_COUNT, want)
        libc.syscall(SYS_FUTEX, ctypes.addressof(self.word), FUTEX_WAKE, 1, None, None, 0)
        return want

    def wait(self, want, timeout=10):
        """'reply', 'closed' or 'timeout'."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.u32(OFF_REP_COUNT) == want:
                return "reply"
            if self.u32(OFF_CLOSED) != 0:
                return "closed"
            time.sleep(0.0005)
        return "timeout"

    def replies(self, pb):
        n = self.u32(OFF_REP_LEN)
        data = bytes(self.m[self.off + REP_OFFSET:self.off + REP_OFFSET + n])
        out, pos = [], 0
        while pos + 4 <= len(data):
            ln = struct.unpack_from("<I", data, pos)[0]
            out.append(pb.ServerMessage.FromString(data[pos + 4:pos + 4 + ln]))
            pos += 4 + ln
        return out

    def close(self):
        del self.word
        self.m.close()


def frame(msg):
    b = msg.SerializeToString()
    return struct.pack("<I", len(b)) + b


def open_session(ch, pb, pmax=6):
    s = Session(ch, pb)
    s.send(open=pb.OpenSession(protocol_min=1, protocol_max=pmax, device="cpu", shm=True,
                               ring=True, client_name="hostile-ring-py"))
    m = s.recv()
    o = m.opened.shm
    st, msg, size, fd = side(o.socket_path,
                             b"TDSHM001" + struct.pack("<Q", m.opened.session_id) + o.secret)
    if st != 0 or fd is None:
        sys.exit(f"no region: {st} {msg}")
    region = mmap.mmap(fd, size)
    os.close(fd)
    return s, m, region


def expect_end(s, ring, want, what):
    got = ring.wait(want)
    code, details = None, ""
    try:
        while True:
            s.recv()
    except grpc.RpcError as e:
        code, details = e.code(), e.details() or ""
    except StopIteration:
        pass
    check(got == "closed" and code == grpc.StatusCode.INVALID_ARGUMENT and
          "request ring" in details,
          f"{what}: session ended ({got}, {code}, {details!r})")


def run(pb, addr, sock):
    ch = channel(addr)

    s, m, region = open_session(ch, pb, pmax=5)
    o = m.opened.shm
    check(m.opened.protocol == 5 and o.region_bytes == REGION and o.ring_bytes == 0,
          f"protocol 5 with ring asked: a region without a ring ({o.ring_bytes})")
    s.close()
    region.close()

    s, m, region = open_session(ch, pb)
    o = m.opened.shm
    check(m.opened.protocol == 6 and o.ring_bytes == RING and o.ring_offset == REGION - RING,
          f"protocol 6: the ring is the region's last 128 KiB ({o.ring_offset}, {o.ring_bytes})")
    ring = Ring(region, o.ring_offset)
    check(ring.u32(0) == 0x31474E52, "the ring carries its magic")

    data = SAMPLE
    s.send(batch=empty_f32(pb, 1, 8))
    s.send(write=pb.WriteChunk(tensor=1, offset=0), payload=data)
    s.seq += 1
    rd = pb.ClientMessage(seq=s.seq, read=pb.ReadRequest(tensor=1, offset=0, nbytes=32))
    got = ring.wait(ring.post(frame(rd)))
    reps = ring.replies(pb) if got == "reply" else []
    check(len(reps) == 1 and reps[0].seq == s.seq and reps[0].WhichOneof("body") == "read" and
          reps[0].read.last and reps[0].payload == data,
          f"a read on the ring sees the write sent on the stream before it ({got})")
    s.seq += 1
    fe = pb.ClientMessage(seq=s.seq, fence=pb.Fence())
    got = ring.wait(ring.post(frame(fe)))
    reps = ring.replies(pb) if got == "reply" else []
    check(len(reps) == 1 and reps[0].WhichOneof("body") == "fence", f"a fence on the ring ({got})")
    s.seq += 1
    big = pb.ClientMessage(seq=s.seq, read=pb.ReadRequest(tensor=1, offset=0, nbytes=40000))
    got = ring.wait(ring.post(frame(big)))
    reps = ring.replies(pb) if got == "reply" else []
    check(len(reps) == 1 and reps[0].WhichOneof("body") == "failure" and
          reps[0].failure.status == TD_EPROTO and "request ring" in reps[0].failure.message,
          f"a read too large for the ring gets a Failure ({reps[0].failure.message if reps else got!r})")
    s.seq += 1
    fe = pb.ClientMessage(seq=s.seq, fence=pb.Fence())
    got = ring.wait(ring.post(frame(fe)))
    check(got == "reply", "the session goes on after that Failure")
    # three reads of 32 KiB in one request: the first fits, the others pass the request's
    # 32 KiB of reads and get Failures; the session goes on
    s.send(batch=empty_f32(pb, 2, 16384))
    frames = []
    for _ in range(3):
        s.seq += 1
        frames.append(frame(pb.ClientMessage(seq=s.seq, read=pb.ReadRequest(
            tensor=2, offset=0, nbytes=32768))))
    got = ring.wait(ring.post(b"".join(frames)))
    reps = ring.replies(pb) if got == "reply" else []
    kinds = [r.WhichOneof("body") for r in reps]
    check(got == "reply" and kinds[:1] == ["read"] and kinds.count("failure") == 2 and
          all("together" in r.failure.message for r in reps if r.WhichOneof("body") == "failure"),
          f"three 32 KiB reads in one request: one read, two Failures ({got}, {kinds})")
    s.seq += 1
    fe = pb.ClientMessage(seq=s.seq, fence=pb.Fence())
    got = ring.wait(ring.post(frame(fe)))
    check(got == "reply", "the session goes on after the reads past the request's budget")
    seq = s.send(fence=pb.Fence())  # and on the stream, in the same sequence
    check(s.reply_to(seq).WhichOneof("body") == "fence", "the stream takes the next seq")
    s.close()
    ring.close()

    def garbage(what, make):
        s, m, region = open_session(ch, pb)
        ring = Ring(region, m.opened.shm.ring_offset)
        body, length = make(s.seq + 1)
        expect_end(s, ring, ring.post(body, length), what)
        ring.close()

    fence = lambda seq: frame(pb.ClientMessage(seq=seq, fence=pb.Fence()))  # noqa: E731
    garbage("REQ_LEN past the request area", lambda q: (fence(q), 0xFFFFFFFF))
    garbage("REQ_LEN 0", lambda q: (fence(q), 0))
    garbage("a frame longer than the request",
            lambda q: (struct.pack("<I", 1000) + b"\0" * 8, None))
    garbage("a frame length cut short", lambda q: (fence(q) + b"\x01\x00", None))
    garbage("five frames", lambda q: (b"".join(fence(q + i) for i in range(5)), None))
    garbage("undecodable bytes", lambda q: (struct.pack("<I", 12) + b"\xff" * 12, None))
    garbage("a write on the ring",
            lambda q: (frame(pb.ClientMessage(seq=q, write=pb.WriteChunk(tensor=1),
                                              payload=b"1234")), None))
    garbage("a seq already used", lambda q: (fence(1), None))

    # the server goes on serving
    s = Session(ch, pb)
    s.send(open=pb.OpenSession(protocol_min=1, protocol_max=6, device="cpu"))
    m = s.recv()
    seq = s.send(fence=pb.Fence())
    check(m.WhichOneof("body") == "opened" and s.reply_to(seq).WhichOneof("body") == "fence",
          "a new session is served after the garbage")
    s.close()

    # FenceDone.stream_msgs counts the messages queued on the stream before the answer, so
    # that a fence answered through the ring can wait for the stream's earlier replies:
    # here every reply travels on the stream, and each fence's count is what came before it
    # (reads of a tensor that does not exist answer with a Failure).
    s = Session(ch, pb)
    s.send(open=pb.OpenSession(protocol_min=1, protocol_max=6, device="cpu"))
    received = 1 if s.recv().WhichOneof("body") == "opened" else 0
    counts = []
    for fails in (2, 0, 3):
        for _ in range(fails):
            s.send(read=pb.ReadRequest(tensor=999, offset=0, nbytes=4))
        seq = s.send(fence=pb.Fence())
        while True:
            r = s.recv()
            if r.seq == seq:
                counts.append((r.WhichOneof("body"), r.fence.stream_msgs, received))
                received += 1
                break
            received += 1
    check(all(b == "fence" and n == want for b, n, want in counts),
          f"FenceDone.stream_msgs is the count of stream messages before it ({counts})")
    s.close()
    ch.close()


if __name__ == "__main__":
    shm.main(run)

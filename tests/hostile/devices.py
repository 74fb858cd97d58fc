#!/usr/bin/python3
"""hostile-devices-py: sessions that span devices (protocol 4), spoken by a client that is
not libtensord: Debian's python3-grpcio with tensord.proto compiled at test time by
python3-grpc-tools, against a tensord with --cpu-devices 3.

- A protocol-4 open naming a second device gets SessionOpened.devices [first, second]; a
  tensor written on the first, moved with ToDevice, reads back with the same bytes.
- ToDevice with a device index past the session's, a zero output id and an index past the
  wire limit each get a Failure carrying the status and a message; the session goes on.
- Backward compatibility: an open offering protocols 1..3 without devices is answered at
  protocol 3 with no device list (an older client sees nothing new).
- Open with five more devices, or an unknown one: the call ends INVALID_ARGUMENT naming it.
- Refused too (INVALID_ARGUMENT): a device string with an embedded NUL ("cpu:2\\0x" used to
  open cpu:2), and a devices list in an open offering protocols below 4 (it used to be
  answered at protocol 3 with a device list); ToDevice in a protocol-3 session is a
  Failure, and a tensor id of 2^64-1 gets the same range message as 0.

Bounded: loopback, one server, every call with a deadline. Skipped (77) without
python3-grpcio / python3-grpc-tools. usage: devices.py TENSORD SOURCE_ROOT
"""
import os
import queue
import re
import struct
import subprocess
import sys
import tempfile

try:
    import grpc
    from grpc_tools import protoc
except ImportError as e:  # meson treats 77 as "skipped"
    print(f"skipping: {e} (install python3-grpcio python3-grpc-tools)")
    sys.exit(77)

TENSORD, SRC = sys.argv[1:3]
TENSORD = os.environ.get("TD_TEST_TENSORD") or TENSORD
TD_EINVAL, TD_EPROTO = 1, 7
OP_EMPTY, F32 = 0, 0
failures = []


def check(cond, what):
    print(("ok: " if cond else "FAIL: ") + what)
    if not cond:
        failures.append(what)


def stubs(tmp):
    proto_dir = os.path.join(SRC, "proto", "tensord", "v1")
    rc = protoc.main(["protoc", f"-I{proto_dir}", f"--python_out={tmp}",
                      os.path.join(proto_dir, "tensord.proto")])
    if rc != 0:
        sys.exit(f"protoc failed on tensord.proto ({rc})")
    sys.path.insert(0, tmp)
    import tensord_pb2
    return tensord_pb2


class Session:
    """A Session stream: send() queues a ClientMessage (seq numbered), recv() takes one reply."""

    def __init__(self, channel, pb):
        self.pb, self.q, self.seq = pb, queue.Queue(), 0
        call = channel.stream_stream("/tensord.v1.Tensord/Session",
                                     request_serializer=lambda m: m.SerializeToString(),
                                     response_deserializer=pb.ServerMessage.FromString)
        self.replies = call(iter(self.q.get, None), timeout=30)

    def send(self, **body):
        self.seq += 1
        self.q.put(self.pb.ClientMessage(seq=self.seq, **body))
        return self.seq

    def recv(self):
        return next(self.replies)

    def close(self):
        self.q.put(None)


def expect_failure(s, seq, status, needle, what):
    fence = s.send(fence=s.pb.Fence())
    got = None
    while True:
        m = s.recv()
        if m.WhichOneof("body") == "failure":
            got = m
        if m.WhichOneof("body") == "fence" and m.seq == fence:
            break
    check(got is not None and got.seq == seq and got.failure.status == status and
          needle in got.failure.message,
          f"{what}: Failure status {status} naming '{needle}' "
          f"({got.failure.status if got else None}: {got.failure.message if got else None!r})")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        pb = stubs(tmp)
        err = open(os.path.join(tmp, "stderr"), "w+")
        proc = subprocess.Popen([TENSORD, "--listen", "127.0.0.1:0", "--cpu-devices", "3",
                                 "--devices", "cpu"], stdout=subprocess.PIPE, stderr=err,
                                text=True)
        try:
            line = proc.stdout.readline()
            m = re.match(r"listening on (\S+)", line)
            if not m:
                sys.exit(f"tensord did not start: {line!r}")
            run(pb, m.group(1))
        finally:
            proc.terminate()
            rc = proc.wait(timeout=30)
            check(rc == 0, f"tensord exited 0 after SIGTERM ({rc})")
    if failures:
        print(f"{len(failures)} failed")
        sys.exit(1)


def run(pb, addr):
    ch = grpc.insecure_channel(addr)
    grpc.channel_ready_future(ch).result(timeout=10)

    # a session on cpu:0 and cpu:1; a tensor moved between them keeps its bytes
    s = Session(ch, pb)
    s.send(open=pb.OpenSession(protocol_min=1, protocol_max=4, device="cpu:0",
                               devices=["cpu:1"], client_name="hostile-py"))
    m = s.recv()
    check(m.WhichOneof("body") == "opened" and m.opened.protocol == 4 and
          list(m.opened.devices) == ["cpu:0", "cpu:1"] and m.opened.device == "cpu:0",
          f"protocol-4 open lists the session's devices ({m})")
    data = struct.pack("<8f", 1.5, -0.0, float("inf"), 3.25, -7.0, 1e-40, 2.0, 9.5)
    s.send(batch=pb.OpBatch(ops=[pb.Op(opcode=OP_EMPTY, dtype=F32, output=1, iattrs=[8])]))
    s.send(write=pb.WriteChunk(tensor=1, offset=0), payload=data)
    s.send(to_device=pb.ToDevice(tensor=1, output=2, device=1))
    rseq = s.send(read=pb.ReadRequest(tensor=2, offset=0, nbytes=32))
    got = b""
    while True:
        m = s.recv()
        if m.WhichOneof("body") == "failure":
            check(False, f"no failure while moving: {m.failure.message}")
            break
        if m.WhichOneof("body") == "read" and m.seq == rseq:
            got += m.payload
            if m.read.last:
                break
    check(got == data, "the moved tensor reads back with the written bytes")

    seq = s.send(to_device=pb.ToDevice(tensor=1, output=3, device=2))
    expect_failure(s, seq, TD_EINVAL, "device index 2, but the session has 2 devices",
                   "device index past the session's")
    seq = s.send(to_device=pb.ToDevice(tensor=1, output=0, device=1))
    expect_failure(s, seq, TD_EPROTO, "output 0", "output id 0")
    seq = s.send(to_device=pb.ToDevice(tensor=1, output=4, device=9))
    expect_failure(s, seq, TD_EPROTO, "device below 4", "device index past the wire limit")
    for tensor in (0, (1 << 64) - 1):
        seq = s.send(to_device=pb.ToDevice(tensor=tensor, output=5, device=1))
        expect_failure(s, seq, TD_EPROTO, "want tensor and output in 1..",
                       f"tensor id {tensor} out of range")
    s.close()

    # a protocol-3 session cannot move tensors: it has one device
    s = Session(ch, pb)
    s.send(open=pb.OpenSession(protocol_min=1, protocol_max=3, device="cpu:0"))
    m = s.recv()
    check(m.WhichOneof("body") == "opened" and m.opened.protocol == 3, "protocol-3 open")
    s.send(batch=pb.OpBatch(ops=[pb.Op(opcode=OP_EMPTY, dtype=F32, output=1, iattrs=[8])]))
    seq = s.send(to_device=pb.ToDevice(tensor=1, output=2, device=0))
    expect_failure(s, seq, TD_EPROTO, "to-device needs protocol 4", "ToDevice at protocol 3")
    s.close()

    # an older client: protocols 1..3, no devices: nothing new in the answer
    s = Session(ch, pb)
    s.send(open=pb.OpenSession(protocol_min=1, protocol_max=3, device="cpu:2"))
    m = s.recv()
    check(m.WhichOneof("body") == "opened" and m.opened.protocol == 3 and
          len(m.opened.devices) == 0 and m.opened.device == "cpu:2",
          f"a protocol-3 open gets protocol 3 and no device list ({m.opened})")
    s.close()

    # refused opens end the call with INVALID_ARGUMENT naming the problem
    for dev, devs, pmax, needle in (
            ("cpu:0", ["cpu:1", "cpu:2", "cpu:1", "cpu:2", "cpu:1"], 4, "at most 4 devices"),
            ("cpu:0", ["cuda:3"], 4, "'cuda:3' is not a device of this server"),
            ("cpu:2\0x", [], 4, "string field 'device' holds a NUL byte"),
            ("cpu:0", ["cpu:1\0junk"], 4, "string field 'devices' holds a NUL byte"),
            ("cpu:0", ["cpu:1"], 3, "sessions that span devices need protocol 4")):
        s = Session(ch, pb)
        s.send(open=pb.OpenSession(protocol_min=1, protocol_max=pmax, device=dev,
                                   devices=devs))
        try:
            m = s.recv()
            check(False, f"open with devices {devs} refused (got {m})")
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.INVALID_ARGUMENT and needle in e.details(),
                  f"open with devices {devs}: INVALID_ARGUMENT naming '{needle}' "
                  f"({e.code()}, {e.details()!r})")
        s.close()
    ch.close()


main()

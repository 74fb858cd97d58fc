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
python3-grpcio / python3-grpc-tools (tests/hostile/wireclient.py, shared with shm.py and
ring.py). usage: devices.py TENSORD SOURCE_ROOT
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wireclient import SAMPLE, Session, channel, check, empty_f32, serve  # noqa: E402

import grpc  # noqa: E402

TD_EINVAL, TD_EPROTO = 1, 7


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


def run(pb, addr, sock):
    ch = channel(addr)

    # a session on cpu:0 and cpu:1; a tensor moved between them keeps its bytes
    s = Session(ch, pb)
    s.send(open=pb.OpenSession(protocol_min=1, protocol_max=4, device="cpu:0",
                               devices=["cpu:1"], client_name="hostile-py"))
    m = s.recv()
    check(m.WhichOneof("body") == "opened" and m.opened.protocol == 4 and
          list(m.opened.devices) == ["cpu:0", "cpu:1"] and m.opened.device == "cpu:0",
          f"protocol-4 open lists the session's devices ({m})")
    s.send(batch=empty_f32(pb, 1, 8))
    s.send(write=pb.WriteChunk(tensor=1, offset=0), payload=SAMPLE)
    s.send(to_device=pb.ToDevice(tensor=1, output=2, device=1))
    got, failure = s.read(s.send(read=pb.ReadRequest(tensor=2, offset=0, nbytes=32)))
    check(failure is None, f"no failure while moving ({failure.message if failure else ''})")
    check(got == SAMPLE, "the moved tensor reads back with the written bytes")

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
    s.send(batch=empty_f32(pb, 1, 8))
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


serve(["--cpu-devices", "3", "--devices", "cpu"], run)

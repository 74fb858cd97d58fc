#!/usr/bin/python3
"""hostile-shm-queued-py: ShmWrites whose device copies are queued (server/shmdone.h), from
a client that is not libtensord (tests/hostile/wireclient.py, the region fetched with
shm.py's side()), against a tensord serving the stand-in device qdev:0
(tests/e2e/qdev_module.c: copies complete 1 ms after they are queued, and each fence's
waiter returns 0.3 ms late) with --shm-bytes 4M.

- A flood: 500 ShmWrites of 1 MiB, all naming region offset 0 and one tensor, sent without
  waiting for any answer, then a Fence. The server answers every ShmWrite with a ShmDone,
  in seq order, and the FenceDone only after the last of them (replies keep request order,
  tensord.proto; a fence's own wait for the stream does not let it overtake the answers
  still to come from the session's shmdone thread); the tensor then holds the region's
  bytes.
- Meanwhile a second session on qdev:0 uploads and reads back through its own region, one
  ShmWrite and ShmRead at a time, and gets its bytes back unchanged each time.
- Afterwards a new session works, tensord exits 0 on SIGTERM, and the module saw every copy
  queued and no broken rule (a range unpinned under a queued copy).
- The same on the cpu device, whose copies are done when the worker returns but whose
  ShmDones still come from the session's shmdone thread (not the worker: shmdone.h says
  why): 300 ShmWrites with an op batch that fails in their middle, then a Fence. Every
  answer (ShmDone, the batch's Failure, the FenceDone) comes in seq order.

Bounded: one server, every call with a deadline; about 2 s. Skipped (77) without
python3-grpcio / python3-grpc-tools. usage: shm_queued.py TENSORD SOURCE_ROOT QDEV_DIR
(QDEV_DIR: the folder holding tensord-backend-qdev.so)
"""
import mmap
import os
import struct
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shm import side  # noqa: E402  (exits 77 without grpc)
from wireclient import Session, channel, check, serve  # noqa: E402

import grpc  # noqa: E402

OP_EMPTY, U8 = 0, 4  # engine/optable.h, include/tensord.h
MIB = 1 << 20
FLOOD = 500
DELAY_US, LAG_US = 1000, 300


def open_qdev(ch, pb, name, device="qdev:0"):
    """A protocol-6 session on `device` with a region: (session, mapped region or None)."""
    s = Session(ch, pb)
    s.send(open=pb.OpenSession(protocol_min=1, protocol_max=6, device=device, shm=True,
                               client_name=name))
    m = s.recv()
    ok = m.WhichOneof("body") == "opened" and m.opened.HasField("shm")
    check(ok, f"{name}: a session on {device} with a region ({m.WhichOneof('body')})")
    if not ok:
        return s, None
    o = m.opened.shm
    st, msg, size, fd = side(o.socket_path, b"TDSHM001" + struct.pack("<Q", m.opened.session_id)
                             + o.secret)
    check(st == 0 and fd is not None, f"{name}: the region's fd ({st}, {msg!r})")
    region = mmap.mmap(fd, size)
    os.close(fd)
    return s, region


def empty_u8(pb, tensor, n):
    return pb.OpBatch(ops=[pb.Op(opcode=OP_EMPTY, dtype=U8, output=tensor, iattrs=[n])])


def neighbour(ch, pb, results):
    """The second session: 20 uploads of 1.5 MiB and their read-backs, one at a time."""
    s, region = open_qdev(ch, pb, "neighbour")
    if region is None:
        return
    n = 3 * MIB // 2
    for i in range(20):
        data = os.urandom(n)
        s.send(batch=empty_u8(pb, 100 + i, n))
        region[0:n] = data
        m = s.reply_to(s.send(shm_write=pb.ShmWrite(tensor=100 + i, offset=0, nbytes=n,
                                                    region_offset=0)))
        done = m.WhichOneof("body") == "shm_done"
        m = s.reply_to(s.send(shm_read=pb.ShmRead(tensor=100 + i, offset=0, nbytes=n,
                                                  region_offset=2 * MIB)))
        results.append(done and m.WhichOneof("body") == "shm_done" and
                       region[2 * MIB:2 * MIB + n] == data)
    region.close()
    s.close()


def run(pb, addr, sock):
    ch = channel(addr)
    s, region = open_qdev(ch, pb, "flood")
    if region is None:
        return
    data = os.urandom(MIB)
    region[0:MIB] = data
    s.send(batch=empty_u8(pb, 1, MIB))
    first = s.seq + 1
    for _ in range(FLOOD):
        s.send(shm_write=pb.ShmWrite(tensor=1, offset=0, nbytes=MIB, region_offset=0))
    fence = s.send(fence=pb.Fence())

    results = []
    other = threading.Thread(target=neighbour, args=(ch, pb, results))
    other.start()

    # every answer, up to the FenceDone and any ShmDone that came after it
    done, failures, fence_before = [], [], None
    try:
        while fence_before is None or len(done) + len(failures) < FLOOD:
            m = s.recv()
            body = m.WhichOneof("body")
            if body == "shm_done":
                done.append(m.seq)
            elif body == "failure":
                failures.append(f"seq {m.seq}: {m.failure.message}")
            if m.seq == fence:
                fence_before = len(done)
    except grpc.RpcError as e:
        check(False, f"the session ended before every answer came ({e.code()})")
    other.join(timeout=60)
    check(not failures, f"no ShmWrite of the flood failed ({failures[:3]})")
    check(len(done) == FLOOD, f"every ShmWrite of the flood answered by ShmDone ({len(done)} "
          f"of {FLOOD})")
    check(done == list(range(first, first + FLOOD)), "the ShmDones came in seq order")
    check(fence_before == FLOOD, f"the FenceDone came after every ShmDone before it "
          f"({fence_before} of {FLOOD} before it)")
    got, failure = s.read(s.send(read=pb.ReadRequest(tensor=1, offset=0, nbytes=MIB)))
    check(failure is None and got == data, "the tensor holds the region's bytes")
    check(len(results) == 20 and all(results),
          f"the neighbour's 20 uploads came back unchanged ({results.count(True)} of "
          f"{len(results)})")
    region.close()
    s.close()

    # a new session works
    s, region = open_qdev(ch, pb, "after")
    if region is not None:
        region[0:MIB] = data
        s.send(batch=empty_u8(pb, 1, MIB))
        m = s.reply_to(s.send(shm_write=pb.ShmWrite(tensor=1, offset=0, nbytes=MIB,
                                                    region_offset=0)))
        got, _ = s.read(s.send(read=pb.ReadRequest(tensor=1, offset=0, nbytes=MIB)))
        check(m.WhichOneof("body") == "shm_done" and got == data, "a new session works")
        region.close()
    s.close()
    ch.close()


def cpu_order(pb, addr):
    """ShmWrites on cpu answered by the shmdone thread keep their order against the worker's
    own replies (a Failure) and the FenceDone."""
    ch = channel(addr)
    s, region = open_qdev(ch, pb, "cpu-order", device="cpu")
    if region is None:
        return
    data = os.urandom(MIB)
    region[0:MIB] = data
    s.send(batch=empty_u8(pb, 1, MIB))
    expect = {}
    for i in range(300):
        if i == 150:  # dtype 99 is no dtype: the worker answers with a Failure
            bad = pb.OpBatch(ops=[pb.Op(opcode=OP_EMPTY, dtype=99, output=7, iattrs=[4])])
            expect[s.send(batch=bad)] = "failure"
        expect[s.send(shm_write=pb.ShmWrite(tensor=1, offset=0, nbytes=MIB,
                                            region_offset=0))] = "shm_done"
    fence = s.send(fence=pb.Fence())
    expect[fence] = "fence"
    got = []
    try:
        while not got or got[-1][0] != fence:
            m = s.recv()
            got.append((m.seq, m.WhichOneof("body")))
    except grpc.RpcError as e:
        check(False, f"cpu: the session ended before the FenceDone ({e.code()})")
    check(got == sorted(expect.items()), "cpu: every answer in seq order "
          f"({len(got)} answers; first out of place: "
          f"{next((g for g, e in zip(got, sorted(expect.items())) if g != e), None)})")
    rd, failure = s.read(s.send(read=pb.ReadRequest(tensor=1, offset=0, nbytes=MIB)))
    check(failure is None and rd == data, "cpu: the tensor holds the region's bytes")
    region.close()
    s.close()
    ch.close()


def main():
    fd, stats = tempfile.mkstemp(prefix="tensord-qdev-", suffix=".stats")
    os.close(fd)
    os.environ.update({"TENSORD_BACKEND_DIR": sys.argv[3], "TD_TEST_QDEV_STATS": stats,
                       "TD_TEST_QDEV_DELAY_US": str(DELAY_US),
                       "TD_TEST_QDEV_FENCE_LAG_US": str(LAG_US)})
    try:
        serve(["--shm-bytes", "4M"], lambda pb, addr, sock: (run(pb, addr, sock),
                                                          cpu_order(pb, addr)),
              unix=True)  # exits 1 when a check failed
        # the server has ended: every stream wrote its line
        with open(stats) as f:
            lines = f.read().splitlines()
    finally:
        os.unlink(stats)
    queued = sum(int(line.split("queued ")[1].split(",")[0]) for line in lines
                 if line.startswith("qdev stream:"))
    bad = [line for line in lines if line.startswith("VIOLATION")]
    check(queued >= FLOOD, f"the flood's copies were queued ({queued} in "
          f"{len(lines) - len(bad)} streams)")
    check(not bad, f"the module saw no broken rule ({bad[:2]})")
    if not queued >= FLOOD or bad:
        sys.exit(1)


if __name__ == "__main__":
    main()

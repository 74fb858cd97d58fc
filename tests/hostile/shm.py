#!/usr/bin/python3
"""hostile-shm-py: the shared-memory data path (protocol 5, tensord.proto "shared memory"),
spoken by a client that is not libtensord: Debian's python3-grpcio with tensord.proto
compiled at test time, the side socket and SCM_RIGHTS through Python's socket module,
against a tensord on a unix socket with --shm-bytes 2M --shm-max-bytes 8M.

- A protocol-5 open with shm gets an offer (side socket next to the main one, 16-byte
  secret, the region size); a protocol-4 open with shm, or one without it, gets none.
- The side socket hands the sealed region out once for the right id and secret; a wrong
  secret, a second request and garbage get a status and a message and no fd; the fd cannot
  be shrunk or grown.
- Bytes written into the region and named by ShmWrite land in the tensor (read back over
  the stream); ShmRead puts the tensor's bytes into the region; each is answered by
  ShmDone with its seq.
- ShmWrite/ShmRead with a region range past the end, an overflowing offset or an
  overlong length get a Failure (TD_ERANGE) naming the range; the session goes on.
- OpenSession.shm_bytes (protocol 6): the region a session asks for is rounded up to 8 KiB,
  at least 1 MiB and at most --shm-max-bytes (2^64 - 1 gets 8 MiB, 0 the 2 MiB default);
  the granted region's last bytes are usable and one byte past them is TD_ERANGE.

Bounded: one server, every call with a deadline. Skipped (77) without python3-grpcio /
python3-grpc-tools (tests/hostile/wireclient.py). usage: shm.py TENSORD SOURCE_ROOT
"""
import fcntl
import mmap
import os
import socket
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wireclient import SAMPLE, Session, channel, check, empty_f32, serve  # noqa: E402

TD_EINVAL, TD_EPROTO, TD_EUNAUTHENTICATED, TD_ERANGE = 1, 7, 14, 16
REGION = 2 << 20


def side(path, request):
    """One side-socket exchange: (status, message, region bytes, fd or None)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect(path)
    s.sendall(request)
    data, fds, _, _ = socket.recv_fds(s, 1024, 1)
    s.close()
    if len(data) < 24 or data[:8] != b"TDSHM001":
        return None, data, 0, None
    status, mlen, size = struct.unpack("<IIQ", data[8:24])
    return status, data[24:24 + mlen].decode(), size, (fds[0] if fds else None)


def main(run_fn=None):
    """Start tensord on a unix socket with --shm-bytes 2M --shm-max-bytes 8M, call
    run_fn(pb, addr, sock) (this file's run by default; tests/hostile/ring.py passes its
    own), stop it."""
    serve(["--shm-bytes", "2M", "--shm-max-bytes", "8M"], run_fn or run, unix=True)


def run(pb, addr, sock):
    ch = channel(addr)

    # no offer without asking, nor at protocol 4
    for pmax, ask in ((5, False), (4, True)):
        s = Session(ch, pb)
        s.send(open=pb.OpenSession(protocol_min=1, protocol_max=pmax, device="cpu", shm=ask))
        m = s.recv()
        check(m.WhichOneof("body") == "opened" and not m.opened.HasField("shm"),
              f"protocol {pmax}, shm={ask}: no offer")
        s.close()

    s = Session(ch, pb)
    s.send(open=pb.OpenSession(protocol_min=1, protocol_max=5, device="cpu", shm=True,
                               client_name="hostile-shm-py"))
    m = s.recv()
    o = m.opened.shm
    check(m.opened.protocol == 5 and m.opened.HasField("shm") and
          o.socket_path == sock + ".shm" and len(o.secret) == 16 and o.region_bytes == REGION,
          f"protocol-5 open with shm gets an offer ({o.socket_path}, {len(o.secret)}-byte "
          f"secret, {o.region_bytes} bytes)")
    sid = m.opened.session_id

    # the side socket: refusals first, then the fd, once
    bad = bytes([o.secret[0] ^ 1]) + o.secret[1:]
    st, msg, _, fd = side(o.socket_path, b"TDSHM001" + struct.pack("<Q", sid) + bad)
    check(st == TD_EUNAUTHENTICATED and fd is None and "with that secret" in msg,
          f"wrong secret refused ({st}, {msg!r})")
    st, msg, _, fd = side(o.socket_path, os.urandom(32))
    check(st == TD_EPROTO and fd is None and "bad magic" in msg, f"garbage refused ({st}, {msg!r})")
    good = b"TDSHM001" + struct.pack("<Q", sid) + o.secret
    st, msg, size, fd = side(o.socket_path, good)
    check(st == 0 and fd is not None and size == REGION, f"the right secret gets the fd ({st}, {msg!r})")
    st2, msg2, _, fd2 = side(o.socket_path, good)
    check(st2 == TD_EINVAL and fd2 is None and "handed out already" in msg2,
          f"a second request is refused ({st2}, {msg2!r})")
    if fd is None:
        return
    seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
    check(seals & (fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW) == (fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW),
          f"the region is sealed against resizing (seals {seals:#x})")
    try:
        os.ftruncate(fd, 4096)
        check(False, "shrinking the region fails")
    except OSError:
        check(True, "shrinking the region fails")
    region = mmap.mmap(fd, REGION)
    os.close(fd)

    # ShmWrite: region -> tensor; read back over the stream
    data = SAMPLE
    s.send(batch=empty_f32(pb, 1, 8))
    region[4096:4096 + 32] = data
    seq = s.send(shm_write=pb.ShmWrite(tensor=1, offset=0, nbytes=32, region_offset=4096))
    m = s.reply_to(seq)
    check(m.WhichOneof("body") == "shm_done", f"ShmWrite answered by ShmDone ({m.WhichOneof('body')})")
    region[4096:4096 + 32] = b"\xff" * 32  # the server copied; later scribbles change nothing
    got, _ = s.read(s.send(read=pb.ReadRequest(tensor=1, offset=0, nbytes=32)))
    check(got == data, "the tensor holds the region's bytes")

    # ShmRead: tensor -> region
    seq = s.send(shm_read=pb.ShmRead(tensor=1, offset=8, nbytes=16, region_offset=REGION - 16))
    m = s.reply_to(seq)
    check(m.WhichOneof("body") == "shm_done" and region[REGION - 16:] == data[8:24],
          "ShmRead puts the tensor's bytes at the end of the region")

    # out-of-range region ranges: Failure TD_ERANGE, session goes on
    for what, kw in (("past the end", dict(nbytes=32, region_offset=REGION - 8)),
                     ("offset overflowing", dict(nbytes=32, region_offset=2**64 - 16)),
                     ("longer than the region", dict(nbytes=REGION + 1, region_offset=0))):
        for kind in ("shm_write", "shm_read"):
            msg_t = pb.ShmWrite if kind == "shm_write" else pb.ShmRead
            seq = s.send(**{kind: msg_t(tensor=1, offset=0, **kw)})
            m = s.reply_to(seq)
            check(m.WhichOneof("body") == "failure" and m.failure.status == TD_ERANGE and
                  "outside the session's" in m.failure.message,
                  f"{kind} {what}: TD_ERANGE ({m.failure.message if m.HasField('failure') else m})")
    fseq = s.send(fence=pb.Fence())
    m = s.reply_to(fseq)
    check(m.WhichOneof("body") == "fence", "the session goes on after the refusals")
    region.close()
    s.close()

    # the size a session asks for: rounded, clamped, and exactly that much is usable
    for ask, want in ((2**64 - 1, 8 << 20), (0, REGION), (1, 1 << 20), ((3 << 20) + 1, (3 << 20) + 8192)):
        s = Session(ch, pb)
        s.send(open=pb.OpenSession(protocol_min=1, protocol_max=6, device="cpu", shm=True,
                                   shm_bytes=ask, client_name="hostile-shm-py"))
        m = s.recv()
        o = m.opened.shm
        check(m.WhichOneof("body") == "opened" and o.region_bytes == want,
              f"shm_bytes={ask}: a {want}-byte region ({o.region_bytes})")
        if ask == 2**64 - 1 and o.region_bytes == want:
            st, msg, size, fd = side(o.socket_path, b"TDSHM001" + struct.pack("<Q", m.opened.session_id) + o.secret)
            check(st == 0 and fd is not None and size == want, f"the {want}-byte region's fd ({st}, {msg!r})")
            if fd is not None:
                big = mmap.mmap(fd, want)
                os.close(fd)
                s.send(batch=empty_f32(pb, 1, 8))
                off = want - 32  # no ring asked: the region's last bytes are bulk bytes
                big[off:off + 32] = SAMPLE
                seq = s.send(shm_write=pb.ShmWrite(tensor=1, offset=0, nbytes=32, region_offset=off))
                m2 = s.reply_to(seq)
                got, _ = s.read(s.send(read=pb.ReadRequest(tensor=1, offset=0, nbytes=32)))
                check(m2.WhichOneof("body") == "shm_done" and got == SAMPLE,
                      "a write from the top of a grown region lands in the tensor")
                seq = s.send(shm_read=pb.ShmRead(tensor=1, offset=0, nbytes=32, region_offset=want - 31))
                m2 = s.reply_to(seq)
                check(m2.WhichOneof("body") == "failure" and m2.failure.status == TD_ERANGE,
                      f"one byte past the grown region: TD_ERANGE ({m2.WhichOneof('body')})")
                big.close()
        s.close()
    ch.close()


if __name__ == "__main__":
    main()

"""wireclient.py — what the Python hostile suites (devices.py, shm.py, ring.py) share: a
client that is not libtensord (Debian's python3-grpcio, tensord.proto compiled at test time
by python3-grpc-tools) and a tensord child to point it at.

Importing it exits 77 (meson's "skipped") without python3-grpcio / python3-grpc-tools, and
takes TENSORD and SOURCE_ROOT from argv[1:3] (TD_TEST_TENSORD overrides the binary, as
tests/run.sh sets it for a ThreadSanitizer build). serve() starts tensord, hands the
generated module, the address and the unix socket path to the suite's run function, stops
the server (which must exit 0 on SIGTERM) and exits 1 when any check() failed.
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
OP_EMPTY, F32 = 0, 0
# Eight f32 values with a negative zero, an infinity and a subnormal: bytes a sloppy copy
# or conversion would change.
SAMPLE = struct.pack("<8f", 1.5, -0.0, float("inf"), 3.25, -7.0, 1e-40, 2.0, 9.5)
failures = []
server_pid = None  # the tensord that serve() started (for suites that watch its memory)


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


def channel(addr):
    """A connected insecure channel to addr (10 s to connect)."""
    ch = grpc.insecure_channel(addr)
    grpc.channel_ready_future(ch).result(timeout=10)
    return ch


def empty_f32(pb, tensor, n):
    """An OpBatch creating f32[n] with id `tensor` (contents unspecified)."""
    return pb.OpBatch(ops=[pb.Op(opcode=OP_EMPTY, dtype=F32, output=tensor, iattrs=[n])])


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

    def reply_to(self, seq):
        while True:
            m = self.recv()
            if m.seq == seq:
                return m

    def read(self, seq):
        """The payload of read seq's replies, up to its last chunk: (bytes, the first
        Failure seen meanwhile, any seq, or None). Stops at that Failure when it is seq's."""
        got, failure = b"", None
        while True:
            m = self.recv()
            body = m.WhichOneof("body")
            if body == "failure" and failure is None:
                failure = m.failure
            if m.seq != seq:
                continue
            got += m.payload
            if body != "read" or m.read.last:
                return got, failure

    def close(self):
        self.q.put(None)


def serve(args, run_fn, unix=False):
    """Start tensord with args on 127.0.0.1:0 (or a unix socket in a temporary folder),
    call run_fn(pb, addr, sock) (sock: the socket path, or None on TCP), stop it with
    SIGTERM and check it exits 0; exit 1 when any check failed."""
    with tempfile.TemporaryDirectory() as tmp:
        pb = stubs(tmp)
        err = open(os.path.join(tmp, "stderr"), "w+")
        sock = os.path.join(tmp, "td.sock") if unix else None
        listen = f"unix:{sock}" if unix else "127.0.0.1:0"
        proc = subprocess.Popen([TENSORD, "--listen", listen] + list(args),
                                stdout=subprocess.PIPE, stderr=err, text=True)
        try:
            line = proc.stdout.readline()
            m = re.match(r"listening on (\S+)", line)
            if not m:
                sys.exit(f"tensord did not start: {line!r}")
            global server_pid
            server_pid = proc.pid
            run_fn(pb, m.group(1), sock)
        finally:
            proc.terminate()
            rc = proc.wait(timeout=30)
            check(rc == 0, f"tensord exited 0 after SIGTERM ({rc})")
    if failures:
        print(f"{len(failures)} failed")
        sys.exit(1)

#!/usr/bin/python3
"""e2e-ops: what an operator watches, checked against a real tensord with clients that are
not libtensord (issue 16, items 1-3).

- gRPC health (grpc.health.v1, Debian's python3-grpcio with stubs generated at test time from
  proto/grpc/health/v1/health.proto by python3-grpc-tools): Check answers SERVING without a
  token on a server that requires one, NOT_FOUND for an unknown service name; Watch sends
  SERVING, then NOT_SERVING once SIGTERM starts the drain, then the stream ends
  (UNAVAILABLE); an unknown method answers UNIMPLEMENTED within 1 s.
- Metrics (--metrics): every line of a scrape parses as the Prometheus text exposition
  format 0.0.4 and follows the naming rules (TYPE before samples, counters end in _total,
  histograms cumulative with +Inf == _count, no duplicate series); scrapes before and after
  a known workload (tests/e2e/ops_workload.c: N adds on an NBYTES tensor, the result read
  back, a one-mul graph run twice, one failing gather) differ by exactly N add ops, two mul
  ops and two graph runs, a graph-cache miss (a hit for a second session), one gather, one
  TD_ERANGE failure,
  N binary-family latency observations, at least NBYTES received and sent (at most 64 KiB
  of framing more); the session shows in tensord_sessions by tenant and device while open;
  /healthz and /readyz are 200 while serving; while a SIGTERM'd server drains queued work
  (200 queued matmuls) /readyz is 503, tensord_serving 0 and /healthz still 200.
  On a unix socket, tensord_shm_rings is 1 while a ring session is open and 0 after it,
  and tensord_shm_ring_requests_total grows by exactly one per small read it sends (README
  "Same-host clients" item 5); a --no-ring server gives the client "shm" and counts none.
- Flags: --help names --no-ring and the ring key; --check-config accepts ring = false and
  --no-ring, and names the key when its value is not a boolean.
- Logs: every stderr line is "RFC3339-UTC-ms tensord: LEVEL: message" (text), or one JSON
  object with time/level/prog/msg (--log-format json); with $JOURNAL_STREAM naming stderr's
  device and inode, lines start with "<N>" (text lines then carry no time). The session
  open and close lines name peer, tenant and device, the close line the bytes; the failing
  gather is logged at info with the session id and the op name; refused TLS clients are
  logged with the reason (plaintext, no client certificate) or, for a client that rejects
  our certificate, its address (gRPC 1.51 gives one or the other).

Everything is bounded: loopback only, every wait and call has a deadline, three servers.
usage: ops.py TENSORD TENSORCTL WORKLOAD SOURCE_ROOT
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

try:
    import grpc
    from grpc_tools import protoc
except ImportError as e:  # meson treats 77 as "skipped"
    print(f"skipping: {e} (install python3-grpcio python3-grpc-tools)")
    sys.exit(77)

TENSORD, TENSORCTL, WORKLOAD, SRC = sys.argv[1:5]
# tests/run.sh points the e2e suites at a ThreadSanitizer tensord this way
TENSORD = os.environ.get("TD_TEST_TENSORD") or TENSORD
N_OPS, NBYTES = 37, 256 * 1024
FRAMING = 64 * 1024
failures = []


def check(cond, what):
    if cond:
        print(f"ok: {what}")
    else:
        print(f"FAIL: {what}")
        failures.append(what)


def load_health_stubs(tmp):
    proto_dir = os.path.join(SRC, "proto", "grpc", "health", "v1")
    rc = protoc.main(["protoc", f"-I{proto_dir}", f"--python_out={tmp}",
                      f"--grpc_python_out={tmp}", os.path.join(proto_dir, "health.proto")])
    if rc != 0:
        sys.exit(f"protoc failed on health.proto ({rc})")
    sys.path.insert(0, tmp)
    import health_pb2
    import health_pb2_grpc
    return health_pb2, health_pb2_grpc


class Server:
    """A tensord child with its stderr in a file (so the log lines can be checked)."""

    def __init__(self, tmp, name, args, env_extra=None, journal=False, listen="127.0.0.1:0"):
        self.err_path = os.path.join(tmp, f"{name}.stderr")
        self.err = open(self.err_path, "w+b")
        env = dict(os.environ)
        env.pop("JOURNAL_STREAM", None)
        if journal:
            st = os.fstat(self.err.fileno())
            env["JOURNAL_STREAM"] = f"{st.st_dev}:{st.st_ino}"
        env.update(env_extra or {})
        self.proc = subprocess.Popen(
            [TENSORD, "--listen", listen, "--metrics", "127.0.0.1:0"] + args,
            stdout=subprocess.PIPE, stderr=self.err, env=env)
        line = self.proc.stdout.readline().decode()  # "listening on ADDR" (tensord exits if not)
        m = re.match(r"listening on (127\.0\.0\.1:\d+|unix:\S+)$", line.strip())
        if not m:
            self.stop()
            sys.exit(f"{name}: no 'listening on' line: {line!r}\n{self.log()}")
        self.addr = m.group(1)
        self.metrics = None
        deadline = time.monotonic() + 15
        while self.metrics is None and time.monotonic() < deadline:
            m = re.search(r"metrics on (http://127\.0\.0\.1:\d+)/metrics", self.log())
            if m:
                self.metrics = m.group(1)
            else:
                time.sleep(0.05)
        if self.metrics is None:
            self.stop()
            sys.exit(f"{name}: no 'metrics on' log line\n{self.log()}")

    def log(self):
        with open(self.err_path, "rb") as f:
            return f.read().decode(errors="replace")

    def sigterm(self):
        self.terminated = True
        self.proc.send_signal(signal.SIGTERM)

    def stop(self):
        # One SIGTERM only: a second one while tensord is already exiting (its signal
        # handlers gone) would kill it instead of letting it finish (slow under TSan).
        if self.proc.poll() is None and not getattr(self, "terminated", False):
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait(timeout=5)
        self.err.close()
        return rc


def http_get(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode(), r.headers.get("Content-Type", "")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), e.headers.get("Content-Type", "")


# ---- the exposition format ----

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
SAMPLE = re.compile(rf"^({NAME})(?:\{{((?:{LABEL})(?:,{LABEL})*)?\}})? "
                    r"([-+]?(?:[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?|Inf)|NaN)(?: -?[0-9]+)?$")
LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"')


def parse_exposition(text):
    """Returns ({(name, frozenset(labels)): value}, [problems]); checks every line."""
    problems, series, types = [], {}, {}
    if not text.endswith("\n"):
        problems.append("the exposition does not end with a newline")
    for no, line in enumerate(text.split("\n")[:-1], 1):
        if line.startswith("# HELP "):
            if not re.match(rf"^# HELP {NAME} \S", line):
                problems.append(f"line {no}: bad HELP: {line!r}")
            continue
        if line.startswith("# TYPE "):
            m = re.match(rf"^# TYPE ({NAME}) (counter|gauge|histogram|summary|untyped)$", line)
            if not m:
                problems.append(f"line {no}: bad TYPE: {line!r}")
            elif m.group(1) in types:
                problems.append(f"line {no}: second TYPE for {m.group(1)}")
            else:
                types[m.group(1)] = m.group(2)
            continue
        if line.startswith("#") or line == "":
            problems.append(f"line {no}: unexpected line {line!r}")
            continue
        m = SAMPLE.match(line)
        if not m:
            problems.append(f"line {no}: not a sample: {line!r}")
            continue
        name, labels, value = m.group(1), m.group(2) or "", m.group(3)
        fam = name
        for suffix in ("_bucket", "_sum", "_count"):
            if name.endswith(suffix) and types.get(name[: -len(suffix)]) == "histogram":
                fam = name[: -len(suffix)]
        if fam not in types:
            problems.append(f"line {no}: {name} has no TYPE before it")
        elif types[fam] == "counter" and not name.endswith("_total"):
            problems.append(f"line {no}: counter {name} does not end in _total")
        elif types[fam] != "counter" and name.endswith("_total"):
            problems.append(f"line {no}: {name} ends in _total but is a {types[fam]}")
        if re.search(r"_(ms|milliseconds|us|microseconds|kb|mb|kib|mib)(_|$)", name):
            problems.append(f"line {no}: {name} is not in base units")
        lab = frozenset(LABEL_RE.findall(labels))
        if (name, lab) in series:
            problems.append(f"line {no}: duplicate series {name}{{{labels}}}")
        series[(name, lab)] = float(value.replace("Inf", "inf"))
    # histograms: cumulative buckets ending in +Inf == _count
    for (name, lab), v in series.items():
        if not name.endswith("_count") or types.get(name[:-6]) != "histogram":
            continue
        base = name[:-6]
        buckets = sorted(((float(dict(l)["le"].replace("+Inf", "inf")), bv)
                          for (n, l), bv in series.items()
                          if n == base + "_bucket" and frozenset(x for x in l if x[0] != "le") == lab))
        if not buckets or buckets[-1][0] != float("inf") or buckets[-1][1] != v:
            problems.append(f"{base}{dict(lab)}: no +Inf bucket equal to _count")
        if any(b[1] > c[1] for b, c in zip(buckets, buckets[1:])):
            problems.append(f"{base}{dict(lab)}: buckets not cumulative")
    return series, problems


def value(series, name, **labels):
    want = frozenset(labels.items())
    return sum(v for (n, l), v in series.items() if n == name and want <= l)


def scrape(srv):
    code, body, ctype = http_get(srv.metrics + "/metrics")
    check(code == 200 and ctype.startswith("text/plain; version=0.0.4"),
          f"GET /metrics: 200 text/plain version 0.0.4 (got {code} {ctype!r})")
    series, problems = parse_exposition(body)
    for p in problems[:20]:
        print("  " + p)
    check(not problems, f"every line of the scrape parses and follows the naming rules "
                        f"({len(body.splitlines())} lines, {len(problems)} problems)")
    return series


# ---- the log format ----

TS = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"
LEVELS = {"debug": 7, "info": 6, "warning": 4, "error": 3}


def check_text_log(text, journal):
    bad = []
    for line in text.splitlines():
        if journal:
            m = re.match(r"^<(\d)>tensord: (debug|info|warning|error): ", line)
            ok = m is not None and int(m.group(1)) == LEVELS[m.group(2)]
        else:
            ok = re.match(rf"^{TS} tensord: (debug|info|warning|error): ", line) is not None
        if not ok:
            bad.append(line)
    for line in bad[:5]:
        print(f"  bad log line: {line!r}")
    return text.strip() != "" and not bad


def check_json_log(text, journal):
    bad = []
    for line in text.splitlines():
        m = re.match(r"^<(\d)>(.*)$", line) if journal else None
        body = m.group(2) if m else line
        try:
            obj = json.loads(body)
            ok = (list(obj) == ["time", "level", "prog", "msg"]
                  and re.fullmatch(TS, obj["time"]) is not None
                  and obj["level"] in LEVELS and obj["prog"] == "tensord"
                  and (not journal or (m is not None and int(m.group(1)) == LEVELS[obj["level"]])))
        except (ValueError, KeyError, TypeError):
            ok = False
        if not ok:
            bad.append(line)
    for line in bad[:5]:
        print(f"  bad log line: {line!r}")
    return text.strip() != "" and not bad


# ---- the tests ----

def test_health_metrics_logs(tmp, pb, pbg):
    tokens = os.path.join(tmp, "tokens")
    tok = subprocess.run([TENSORCTL, "token", "new", "--tenant", "alice", "--tokens-file", tokens],
                         capture_output=True, text=True, timeout=30)
    token = tok.stdout.strip().split()[-1] if tok.returncode == 0 and tok.stdout.strip() else ""
    check(token != "", f"tensorctl token new made a token ({tok.stderr.strip()!r})")
    srv = Server(tmp, "main", ["--tokens-file", tokens])
    try:
        ch = grpc.insecure_channel(srv.addr)
        stub = pbg.HealthStub(ch)
        r = stub.Check(pb.HealthCheckRequest(service=""), timeout=5)
        check(r.status == pb.HealthCheckResponse.SERVING, "Check('') without a token: SERVING")
        r = stub.Check(pb.HealthCheckRequest(service="tensord.v1.Tensord"), timeout=5)
        check(r.status == pb.HealthCheckResponse.SERVING, "Check('tensord.v1.Tensord'): SERVING")
        try:
            stub.Check(pb.HealthCheckRequest(service="no.such.Service"), timeout=5)
            check(False, "Check of an unknown service fails")
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.NOT_FOUND, f"Check of an unknown service: NOT_FOUND ({e.code()})")
        # the token is required for everything else
        info = ch.unary_unary("/tensord.v1.Tensord/GetInfo")
        try:
            info(b"", timeout=5)
            check(False, "GetInfo without a token is refused")
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.UNAUTHENTICATED, f"GetInfo without a token: UNAUTHENTICATED ({e.code()})")
        # unknown methods answer at once
        for path in ("/no.such.Service/Method", "/tensord.v1.Tensord/NoSuchMethod"):
            t0 = time.monotonic()
            try:
                ch.unary_unary(path)(b"", timeout=10)
                check(False, f"{path} fails")
            except grpc.RpcError as e:
                dt = time.monotonic() - t0
                check(e.code() == grpc.StatusCode.UNIMPLEMENTED and dt < 1.0,
                      f"{path}: UNIMPLEMENTED in {dt:.3f} s (< 1 s; got {e.code()})")

        code, body, _ = http_get(srv.metrics + "/healthz")
        check(code == 200, f"/healthz: 200 ({code})")
        code, body, _ = http_get(srv.metrics + "/readyz")
        check(code == 200, f"/readyz while serving: 200 ({code} {body.strip()!r})")
        code, _, _ = http_get(srv.metrics + "/nothing")
        check(code == 404, f"/nothing: 404 ({code})")

        # 32 connections that never send a request (a breaker's 16 locked the probes out):
        # the probes still answer, and the server drops the idle ones within a few seconds.
        hp = re.match(r"http://([^:/]+|\[[^]]+\]):(\d+)", srv.metrics)
        idle = [socket.create_connection((hp.group(1).strip("[]"), int(hp.group(2))), timeout=5)
                for _ in range(32)]
        code, _, _ = http_get(srv.metrics + "/healthz")
        check(code == 200, f"/healthz with 32 idle connections open: 200 ({code})")
        code, _, _ = http_get(srv.metrics + "/readyz")
        check(code == 200, f"/readyz with 32 idle connections open: 200 ({code})")
        t0 = time.monotonic()
        try:
            idle[0].settimeout(8)
            closed = idle[0].recv(1) == b""
        except OSError:
            closed = True
        dt = time.monotonic() - t0
        check(closed and dt < 6, f"an idle metrics connection is closed by the server "
              f"within 6 s ({closed}, {dt:.1f} s)")
        for c in idle:
            c.close()

        before = scrape(srv)
        check(value(before, "tensord_build_info") == 1, "tensord_build_info is 1")
        check(value(before, "tensord_serving") == 1, "tensord_serving is 1")
        env = dict(os.environ, TENSORD_TOKEN=token)
        wl = subprocess.Popen([WORKLOAD, f"tensord://{srv.addr}/cpu", str(N_OPS), str(NBYTES)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True)
        ready = wl.stdout.readline().strip()
        check(ready == "ready SESSION-OPEN", f"the workload ran ({ready!r})")
        during = scrape(srv)
        check(value(during, "tensord_sessions", tenant="alice", device="cpu") == 1,
              "tensord_sessions{tenant=alice,device=cpu} is 1 while the session is open")
        check(value(during, "tensord_tenant_tensors", tenant="alice") >= 1,
              "tensord_tenant_tensors{tenant=alice} counts its live tensors")
        check(value(during, "tensord_tenant_memory_bytes", tenant="alice") >= NBYTES,
              "tensord_tenant_memory_bytes{tenant=alice} holds at least the uploaded tensor")
        wl.stdin.write("close\n")
        wl.stdin.flush()
        done = wl.stdout.readline().strip()
        check(wl.wait(timeout=30) == 0 and done == "done", "the workload closed its session")

        deadline = time.monotonic() + 10  # the close reaches the server asynchronously
        after = scrape(srv)
        while value(after, "tensord_sessions", tenant="alice") != 0 and time.monotonic() < deadline:
            time.sleep(0.05)
            after = scrape(srv)
        d = lambda name, **l: value(after, name, **l) - value(before, name, **l)  # noqa: E731
        check(d("tensord_ops_executed_total", device="cpu", family="binary", op="add") == N_OPS,
              f"ops executed: +{N_OPS} add (got +{d('tensord_ops_executed_total', op='add'):g})")
        check(d("tensord_ops_executed_total", device="cpu", family="movement", op="gather") == 1,
              "ops executed: +1 gather")
        check(d("tensord_failures_total", status="TD_ERANGE") == 1,
              f"failures: +1 TD_ERANGE (got +{d('tensord_failures_total', status='TD_ERANGE'):g})")
        fails = {dict(l)["status"]: v - value(before, n, **dict(l))
                 for (n, l), v in after.items() if n == "tensord_failures_total"}
        fails = {k: v for k, v in fails.items() if v}
        check(fails == {"TD_ERANGE": 1, "TD_EPOISONED": 1},
              f"failures: the gather (TD_ERANGE) and the read of its output (TD_EPOISONED): {fails}")
        check(d("tensord_op_duration_seconds_count", device="cpu", family="binary") == N_OPS,
              f"op latency: +{N_OPS} observations in the binary family")
        check(d("tensord_batch_duration_seconds_count", device="cpu", kind="batch") >= 1,
              "batch latency: at least one batch observed")
        rx, tx = d("tensord_received_bytes_total"), d("tensord_sent_bytes_total")
        check(NBYTES <= rx <= NBYTES + FRAMING, f"received bytes: +{rx:g} (NBYTES {NBYTES} + framing)")
        check(NBYTES <= tx <= NBYTES + FRAMING, f"sent bytes: +{tx:g} (NBYTES {NBYTES} + framing)")
        check(value(after, "tensord_sessions", tenant="alice") == 0, "no session left after the close")
        check(value(after, "tensord_device_queue_depth", device="cpu") == 0, "queue depth back to 0")
        check(value(after, "tensord_device_workers", device="cpu") == 1,
              "one worker thread on the CPU device (the default)")
        check(d("tensord_ops_executed_total", device="cpu", family="binary", op="mul") == 2,
              "ops executed: +2 mul (the graph's op, two runs)")
        check(d("tensord_batch_duration_seconds_count", device="cpu", kind="graph_run") == 2,
              "batch latency: +2 graph runs")
        check(d("tensord_graph_cache_misses_total") >= 1 and d("tensord_graph_cache_hits_total") == 0,
              "graph cache: the first definition missed")
        check(value(after, "tensord_graph_cache_graphs") == 1 and value(after, "tensord_graph_cache_bytes") > 0,
              "graph cache: it holds the graph")
        # a second session of the tenant finds the graph in the cache
        wl = subprocess.Popen([WORKLOAD, f"tensord://{srv.addr}/cpu", "1", "4096"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True)
        check(wl.stdout.readline().strip() == "ready SESSION-OPEN", "the second workload ran")
        wl.stdin.write("close\n")
        wl.stdin.flush()
        wl.wait(timeout=30)
        again = scrape(srv)
        check(value(again, "tensord_graph_cache_hits_total") - value(after, "tensord_graph_cache_hits_total") == 1,
              "graph cache: the second session's definition hit")
        for name in ("tensord_blob_store_hits_total", "tensord_graph_cache_misses_total",
                     "tensord_blob_store_bytes", "tensord_graph_cache_graphs",
                     "tensord_device_memory_total_bytes"):
            check(any(n == name for (n, _) in after), f"{name} is exported")
        # the device info series: the CPU has no hardware UUID (the label is there, empty);
        # tests/gpu/run-on-gpu-host.sh checks a GPU's against nvidia-smi
        check(value(after, "tensord_device_info", device="cpu", kind="cpu", UUID="") == 1,
              "tensord_device_info{device=\"cpu\",kind=\"cpu\",UUID=\"\"} is 1")
    finally:
        rc = srv.stop()
    check(rc == 0, f"tensord exited 0 after SIGTERM ({rc})")
    log = srv.log()
    check(check_text_log(log, journal=False), "every log line: RFC 3339 UTC ms time, tensord, level")
    opened = re.search(r"tensord: info: session (\d+) opened on cpu by '[^']*' at (ipv4:127\.0\.0\.1:\d+), "
                       r"tenant 'alice'", log)
    check(opened is not None, "session open line: id, device, peer, tenant")
    sid = opened.group(1) if opened else "?"
    closed = re.search(rf"tensord: info: session {sid} closed \([^)]*\): tenant 'alice', device cpu, "
                       r"peer ipv4:127\.0\.0\.1:\d+, [0-9.]+ s, (\d+) ops, received (\d+) bytes, "
                       r"sent (\d+) bytes", log)
    check(closed is not None and int(closed.group(2)) >= NBYTES and int(closed.group(3)) >= NBYTES,
          "session close line: tenant, device, peer, ops, bytes received and sent")
    check(re.search(rf"tensord: info: session {sid} \(tenant 'alice'\): op 0 \(gather\) of seq \d+ "
                    r"failed: TD_ERANGE: ", log) is not None,
          "the failing gather is logged at info with the session id and the op name")


def test_drain(tmp, pb, pbg):
    srv = Server(tmp, "drain", ["--log-format", "json"], journal=True)
    seen, ended = [], {}
    try:
        ch = grpc.insecure_channel(srv.addr)
        stub = pbg.HealthStub(ch)
        stream = stub.Watch(pb.HealthCheckRequest(service=""), timeout=30)
        first = threading.Event()

        def watch():
            try:
                for r in stream:
                    seen.append(r.status)
                    first.set()
            except grpc.RpcError as e:
                ended["code"] = e.code()
            first.set()

        t = threading.Thread(target=watch, daemon=True)
        t.start()
        check(first.wait(10) and seen[:1] == [pb.HealthCheckResponse.SERVING], f"Watch: SERVING first ({seen})")
        code, _, _ = http_get(srv.metrics + "/readyz")
        check(code == 200, "/readyz before the drain: 200")
        srv.sigterm()
        t.join(20)
        check(not t.is_alive(), "the Watch stream ended within 20 s of SIGTERM")
        check(seen == [pb.HealthCheckResponse.SERVING, pb.HealthCheckResponse.NOT_SERVING],
              f"Watch across the drain: SERVING then NOT_SERVING (got {seen})")
        check(ended.get("code") == grpc.StatusCode.UNAVAILABLE,
              f"then the stream ends UNAVAILABLE (got {ended.get('code')})")
    finally:
        rc = srv.stop()
    check(rc == 0, f"tensord exited 0 ({rc})")
    check(check_json_log(srv.log(), journal=True),
          "--log-format json under the journal: <N>{time, level, prog, msg} on every line")


def test_readyz_while_draining(tmp):
    # Queued work keeps a SIGTERM'd server draining (up to 2 s): meanwhile /readyz is 503
    # and tensord_serving 0, while /healthz stays 200.
    srv = Server(tmp, "readyz", [])
    try:
        wl = subprocess.Popen([WORKLOAD, f"tensord://{srv.addr}/cpu", "200", "busy"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        check(wl.stdout.readline().strip() == "ready SESSION-OPEN", "200 matmuls queued")
        srv.sigterm()
        code, serving, live = None, None, None
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            try:
                code, body, _ = http_get(srv.metrics + "/readyz")
                if code == 503:
                    live = http_get(srv.metrics + "/healthz")[0]
                    serving = value(parse_exposition(http_get(srv.metrics + "/metrics")[1])[0],
                                    "tensord_serving")
                    break
            except OSError:
                break  # the listener is gone: the drain finished first
            time.sleep(0.01)
        check(code == 503, f"/readyz while draining: 503 ({code})")
        check(serving == 0, f"tensord_serving while draining: 0 ({serving})")
        check(live == 200, f"/healthz while draining: 200 ({live})")
        wl.stdin.write("close\n")
        wl.stdin.flush()
        wl.wait(timeout=30)
    finally:
        rc = srv.stop()
    check(rc == 0, f"tensord exited 0 ({rc})")


def test_journal_text(tmp):
    srv = Server(tmp, "journal", [], journal=True)
    rc = srv.stop()
    check(rc == 0, f"tensord exited 0 ({rc})")
    check(check_text_log(srv.log(), journal=True), "text under the journal: <N> priority, no time")


def test_tls_handshake_logs(tmp):
    pki = os.path.join(tmp, "pki")
    subprocess.run(["sh", os.path.join(SRC, "tests", "e2e", "make_certs.sh"), pki], check=True,
                   timeout=60, capture_output=True)
    srv = Server(tmp, "tls", ["--tls-cert", os.path.join(pki, "server.pem"),
                              "--tls-key", os.path.join(pki, "server.key"),
                              "--tls-client-ca", os.path.join(pki, "ca.pem")])
    try:
        def attempt(creds):
            ch = grpc.secure_channel(srv.addr, creds, options=[("grpc.ssl_target_name_override", "localhost")]) \
                if creds is not None else grpc.insecure_channel(srv.addr)
            try:
                ch.unary_unary("/grpc.health.v1.Health/Check")(b"", timeout=3)
                return "ok"
            except grpc.RpcError as e:
                return e.code()
            finally:
                ch.close()

        def read(name):
            with open(os.path.join(pki, name), "rb") as f:
                return f.read()

        other_ca = grpc.ssl_channel_credentials(root_certificates=read("other-ca.pem"))
        no_cert = grpc.ssl_channel_credentials(root_certificates=read("ca.pem"))
        good = grpc.ssl_channel_credentials(read("ca.pem"), read("client.key"), read("client.pem"))
        check(attempt(None) == grpc.StatusCode.UNAVAILABLE, "a plaintext client is refused")
        check(attempt(other_ca) == grpc.StatusCode.UNAVAILABLE, "a client trusting another CA is refused")
        check(attempt(no_cert) == grpc.StatusCode.UNAVAILABLE, "a client without a certificate is refused")
        check(attempt(good) == "ok", "a client with a good certificate gets an answer")
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and srv.log().count("TLS handshake with") < 3:
            time.sleep(0.05)
    finally:
        rc = srv.stop()
    check(rc == 0, f"tensord exited 0 ({rc})")
    log = srv.log()
    check(re.search(r"warning: TLS handshake with a client failed: wrong version number", log) is not None,
          "plaintext client: the reason is logged")
    check(re.search(r"warning: TLS handshake with a client failed: peer did not return a certificate", log)
          is not None, "client without a certificate: the reason is logged")
    check(re.search(r"warning: TLS handshake with ipv4:127\.0\.0\.1:\d+ failed: the client closed the connection",
                    log) is not None, "client that rejects our certificate: its address is logged")


# ---- lifecycle (issue 16, item 4) ----

def readline_within(proc, seconds):
    """One line of proc's stdout, or '' after `seconds`."""
    out = []
    t = threading.Thread(target=lambda: out.append(proc.stdout.readline()), daemon=True)
    t.start()
    t.join(seconds)
    return out[0].strip() if out else ""


def train(srv, env=None, uri=None):
    wl = subprocess.Popen([WORKLOAD, uri or f"tensord://{srv.addr}/cpu", "4", "train"],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                          env=dict(os.environ, **(env or {})))
    ready = readline_within(wl, 20)
    return wl, ready


def finish(wl):
    try:
        wl.stdin.write("close\n")
        wl.stdin.flush()
    except (BrokenPipeError, ValueError):
        pass
    line = readline_within(wl, 20)
    try:
        rc = wl.wait(timeout=20)
    except subprocess.TimeoutExpired:
        wl.kill()
        rc = wl.wait()
    return line, rc


def test_drain_ends_live_session(tmp):
    # A client mid-training outlives --drain-timeout 1: it is ended with the documented
    # error, and the server exits 0.
    srv = Server(tmp, "drainlive", ["--drain-timeout", "1"])
    try:
        wl, ready = train(srv)
        check(ready == "ready SESSION-OPEN", f"a training client is running ({ready!r})")
        srv.sigterm()
        line = readline_within(wl, 20)
        check(line.startswith("error TD_EUNAVAILABLE") and "server is shutting down" in line,
              f"the client mid-training sees 'server is shutting down' ({line!r})")
        wl.wait(timeout=20)
    finally:
        rc = srv.stop()
    check(rc == 0, f"tensord exited 0 after ending the session ({rc})")
    log = srv.log()
    check("1 sessions still open after the drain timeout (1 s)" in log,
          "the log says the drain timed out with one session open")
    # A client that finishes during the drain is not cut off.
    srv = Server(tmp, "drainok", ["--drain-timeout", "60"])
    try:
        wl, ready = train(srv)
        check(ready == "ready SESSION-OPEN", "a second training client is running")
        srv.sigterm()
        line, wrc = finish(wl)
        check(line.startswith("done ") and wrc == 0,
              f"a client that closes during the drain finishes cleanly ({line!r}, {wrc})")
    finally:
        rc = srv.stop()
    check(rc == 0 and "still open after the drain timeout" not in srv.log(),
          f"the server exits 0 once the last session closed, before the timeout ({rc})")


def new_token(tokens, tenant, *extra):
    r = subprocess.run([TENSORCTL, "token", "new", "--tenant", tenant, "--tokens-file", tokens]
                       + list(extra), capture_output=True, text=True, timeout=30)
    return r.stdout.strip().split()[-1] if r.returncode == 0 and r.stdout.strip() else ""


def wait_log(srv, text, seconds=10):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if text in srv.log():
            return True
        time.sleep(0.05)
    return False


def test_sighup_tokens_and_config(tmp):
    tokens = os.path.join(tmp, "hup-tokens")
    alice, bob = new_token(tokens, "alice"), new_token(tokens, "bob")
    conf = os.path.join(tmp, "hup.conf")
    with open(conf, "w") as f:
        f.write("max_sessions = 256\ngraph_cache = 256\n")
    srv = Server(tmp, "hup", ["--config", conf, "--tokens-file", tokens])
    try:
        wa, ra = train(srv, {"TENSORD_TOKEN": alice})
        wb, rb = train(srv, {"TENSORD_TOKEN": bob})
        check(ra == rb == "ready SESSION-OPEN", f"alice and bob are training ({ra!r}, {rb!r})")
        with open(tokens) as f:
            lines = f.readlines()
        with open(tokens, "w") as f:
            f.writelines(l for l in lines if " alice" not in l)
        with open(conf, "w") as f:
            f.write("max_sessions = 1\ngraph_cache = 5\n")
        srv.proc.send_signal(signal.SIGHUP)
        line = readline_within(wa, 20)
        check(line.startswith("error ") and "bearer token revoked" in line,
              f"SIGHUP after alice's token left the file ends her session ({line!r})")
        wa.wait(timeout=20)
        check(wait_log(srv, "SIGHUP: settings reloaded (max_sessions 1,"),
              "SIGHUP reloads max_sessions from the config file")
        check("SIGHUP: graph_cache changed: it takes effect at the next restart" in srv.log(),
              "a key that needs a restart is named in the log")
        wc, rc_ = train(srv, {"TENSORD_TOKEN": bob})
        out = wc.communicate(timeout=20)[0] if rc_ != "ready SESSION-OPEN" else ""
        check(rc_ != "ready SESSION-OPEN" and wc.returncode != 0,
              "with max_sessions reloaded to 1, a second session of bob is refused")
        if rc_ == "ready SESSION-OPEN":
            finish(wc)
        line, wrc = finish(wb)
        check(line.startswith("done ") and wrc == 0, f"bob's session went on across the reload ({line!r})")
        # a file that does not parse: everything stays, and the log says so consistently
        with open(conf, "w") as f:
            f.write("max_sessions = 7\nno_such_key = 1\n")
        srv.proc.send_signal(signal.SIGHUP)
        check(wait_log(srv, "SIGHUP: settings unchanged (max_sessions 1,"),
              "SIGHUP with a bad file logs the settings in force as unchanged (max_sessions 1)")
        check(srv.log().count("SIGHUP: settings reloaded") == 1 and
              "SIGHUP: settings not reloaded, those in force stay" in srv.log(),
              "a bad file is never logged as 'settings reloaded'")
    finally:
        rc = srv.stop()
    check(rc == 0, f"tensord exited 0 ({rc})")


def test_sighup_new_certificate(tmp, pb, pbg):
    pki, pki2 = os.path.join(tmp, "hup-pki"), os.path.join(tmp, "hup-pki2")
    for d in (pki, pki2):
        subprocess.run(["sh", os.path.join(SRC, "tests", "e2e", "make_certs.sh"), d], check=True,
                       timeout=60, capture_output=True)
    cert, key = os.path.join(tmp, "live.pem"), os.path.join(tmp, "live.key")

    def install(d):
        for src, dst in (("server.pem", cert), ("server.key", key)):
            with open(os.path.join(d, src), "rb") as f, open(dst + ".new", "wb") as g:
                g.write(f.read())
            os.replace(dst + ".new", dst)

    def read(d, name):
        with open(os.path.join(d, name), "rb") as f:
            return f.read()

    def channel(d):
        return grpc.secure_channel(srv.addr, grpc.ssl_channel_credentials(read(d, "ca.pem")),
                                   options=[("grpc.ssl_target_name_override", "localhost")])

    def check_once(d):
        ch = channel(d)
        try:
            r = pbg.HealthStub(ch).Check(pb.HealthCheckRequest(service=""), timeout=3)
            return r.status == pb.HealthCheckResponse.SERVING
        except grpc.RpcError:
            return False
        finally:
            ch.close()

    install(pki)
    srv = Server(tmp, "hupcert", ["--tls-cert", cert, "--tls-key", key])
    try:
        old = channel(pki)
        seen, ended = [], {}
        stream = pbg.HealthStub(old).Watch(pb.HealthCheckRequest(service=""), timeout=60)

        def watch():
            try:
                for r in stream:
                    seen.append(r.status)
            except grpc.RpcError as e:
                ended["code"] = e.code()

        t = threading.Thread(target=watch, daemon=True)
        t.start()
        wl, ready = train(srv, {"OPS_WORKLOAD_CA": os.path.join(pki, "ca.pem")},
                          uri=f"tensords://{srv.addr.replace('127.0.0.1', 'localhost')}/cpu")
        check(ready == "ready SESSION-OPEN", f"a TLS session is training ({ready!r})")
        check(check_once(pki) and not check_once(pki2), "before SIGHUP: the first CA's certificate")
        install(pki2)
        srv.proc.send_signal(signal.SIGHUP)
        check(wait_log(srv, "SIGHUP: TLS certificate reloaded"), "SIGHUP reloads the certificate")
        check(check_once(pki2), "a new connection after SIGHUP gets the new certificate")
        check(not check_once(pki), "a client trusting only the old CA is refused now")
        line, wrc = finish(wl)
        check(line.startswith("done ") and wrc == 0,
              f"the TLS session opened before the reload went on and closed cleanly ({line!r})")
        check(t.is_alive() and not ended and seen[:1] == [pb.HealthCheckResponse.SERVING],
              f"a Watch stream on the old connection is still open ({seen}, {ended})")
        old.close()
    finally:
        rc = srv.stop()
    check(rc == 0, f"tensord exited 0 ({rc})")


def test_ring_metrics(tmp):
    """tensord_shm_rings counts the sessions serving a request ring, and
    tensord_shm_ring_requests_total grows by one for each synchronous read sent on one
    (README "Same-host clients", item 5: a read and the batch held for it are one request)."""
    rounds = 25
    srv = Server(tmp, "ring", ["--shm-bytes", "2M"], listen=f"unix:{tmp}/ring.sock")
    try:
        before = scrape(srv)
        check(value(before, "tensord_shm_rings") == 0, "tensord_shm_rings is 0 before any session")
        wl = subprocess.Popen([WORKLOAD, f"{srv.addr}/cpu", str(rounds), "ring"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        ready = wl.stdout.readline().strip()
        check(ready == "ready SESSION-OPEN", f"the ring workload ran ({ready!r})")
        during = scrape(srv)
        check(value(during, "tensord_shm_rings") == 1,
              f"tensord_shm_rings is 1 while the session is open ({value(during, 'tensord_shm_rings')})")
        got = value(during, "tensord_shm_ring_requests_total") - value(before, "tensord_shm_ring_requests_total")
        check(got == rounds, f"tensord_shm_ring_requests_total grew by {rounds} reads ({got})")
        check(value(during, "tensord_shm_regions") == 1, "tensord_shm_regions is 1 meanwhile")
        wl.stdin.write("close\n")
        wl.stdin.flush()
        done = wl.stdout.readline().strip()
        check(done == "done" and wl.wait(timeout=30) == 0, f"the ring workload closed ({done!r})")
        after = None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            after = scrape(srv)
            if value(after, "tensord_shm_rings") == 0:
                break
            time.sleep(0.05)
        check(value(after, "tensord_shm_rings") == 0, "tensord_shm_rings is back to 0 after td_close")
    finally:
        rc = srv.stop()
    check(rc == 0, f"tensord exited 0 ({rc})")
    srv = Server(tmp, "noring", ["--shm-bytes", "2M", "--no-ring"], listen=f"unix:{tmp}/noring.sock")
    try:
        wl = subprocess.run([WORKLOAD, f"{srv.addr}/cpu", "3", "ring"], input="close\n",
                            capture_output=True, text=True, timeout=60)
        check(wl.returncode == 1 and "transport shm, not shm+ring" in wl.stderr,
              f"a --no-ring server gives no ring ({wl.returncode} {wl.stderr.strip()!r})")
        m = scrape(srv)
        check(value(m, "tensord_shm_rings") == 0 and value(m, "tensord_shm_ring_requests_total") == 0,
              "a --no-ring server reports no rings and no ring requests")
        check("without request rings (--no-ring)" in srv.log(), "its start-up log says the rings are off")
    finally:
        rc = srv.stop()
    check(rc == 0, f"tensord exited 0 ({rc})")


def test_help(tmp):
    r = subprocess.run([TENSORD, "--help"], capture_output=True, text=True, timeout=30)
    for want in ("--no-shm", "--no-ring", "ring = true|false", "--shm-max-bytes",
                 "shm_max_bytes = BYTES"):
        check(r.returncode == 0 and want in r.stdout, f"tensord --help names {want!r}")


def test_check_config(tmp):
    def run(text, *extra):
        path = os.path.join(tmp, "check.conf")
        with open(path, "w") as f:
            f.write(text)
        r = subprocess.run([TENSORD, "--check-config", path] + list(extra), capture_output=True,
                           text=True, timeout=30)
        return r.returncode, r.stdout + r.stderr, path

    rc, out, path = run("listen = 127.0.0.1:0\nmax_sessions = 8\ndrain_timeout_s = 5\n")
    check(rc == 0 and out.strip() == f"{path}: ok", f"--check-config of a good file: 0, 'FILE: ok' ({rc} {out!r})")
    rc, out, path = run("listen = unix:/tmp/td-check.sock\nshm = true\nring = false\n", "--no-ring")
    check(rc == 0 and out.strip() == f"{path}: ok", f"--check-config knows ring = false and --no-ring ({rc} {out!r})")
    rc, out, _ = run(open(os.path.join(SRC, "deploy", "tensord.conf.example")).read())
    check(rc == 0, f"--check-config passes deploy/tensord.conf.example ({rc} {out!r})")
    bad_tokens = os.path.join(tmp, "bad-tokens")
    with open(bad_tokens, "w") as f:
        f.write("sha256:1234 alice\n")
    cases = [
        ('max_sessions = "8"\n', "remove the quotes"),
        ("max_sessions = 8 # eight\n", "comment after the value"),
        ("no_such_key = 1\n", "unknown key 'no_such_key'"),
        ("listen = tensord://127.0.0.1:7070\n", "clients connect to"),
        ("listen = 127.0.0.1:70000\n", "port '70000' is not a number in 0..65535"),
        ("listen = ::1:7070\n", "put IPv6 hosts in brackets"),
        ("listen = 0.0.0.0:7070\n", "refusing to listen on 0.0.0.0:7070 without TLS"),
        (f"tokens_file = {bad_tokens}\n", "bad-tokens:1: sha256: needs 64 hex digits"),
        (f"tls_cert = {tmp}/none.pem\ntls_key = {tmp}/none.key\n", "none.pem"),
        ("drain_timeout_s = 9999\n", "drain_timeout_s: '9999' is not an integer in 0..3600"),
        ("ring = maybe\n", "ring: 'maybe' is not true or false"),
        ("shm_max_bytes = 5G\n", "shm_max_bytes: '5G' is not a byte count from 1M to 4G"),
        ("shm_max_bytes = 1000000\n", "a multiple of 8K"),
        ("transport_bytes = 1\n", "transport_bytes: '1' is not a byte count (K, M, G suffixes) "
         "in 16777216.."),
        ("\ufefflisten = 127.0.0.1:0\n", "starts with a UTF-8 byte-order mark"),
        ("\0\0\0\0", "holds a NUL byte"),
    ]
    for text, want in cases:
        rc, out, _ = run(text)
        check(rc == 2 and want in out, f"--check-config of {text.strip()!r}: exit 2 naming {want!r} ({rc} {out.strip()!r})")
    r = subprocess.run([TENSORD, "--check-config", tmp], capture_output=True, text=True, timeout=30)
    check(r.returncode == 2 and "it is a directory" in r.stdout + r.stderr,
          f"--check-config of a directory: exit 2, says so ({r.returncode} {(r.stdout + r.stderr).strip()!r})")
    # a passphrase-protected key: refused by name, no prompt (stdin is closed: a prompt
    # would print "Enter PEM pass phrase" and then fail as not a key)
    key, enc, crt = (os.path.join(tmp, n) for n in ("plain.key", "enc.key", "c.pem"))
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-subj", "/CN=check", "-days", "2",
                    "-keyout", key, "-out", crt], check=True, capture_output=True, timeout=30)
    subprocess.run(["openssl", "pkey", "-in", key, "-aes128", "-passout", "pass:secret",
                    "-out", enc], check=True, capture_output=True, timeout=30)
    rc, out, _ = run(f"tls_cert = {crt}\ntls_key = {enc}\n")
    check(rc == 2 and "is encrypted (passphrase-protected)" in out and "pass phrase" not in out,
          f"--check-config with an encrypted key: exit 2, named, no prompt ({rc} {out.strip()!r})")
    rc, out, _ = run("listen = 127.0.0.1:0\n", "--max-sessions", "x")
    check(rc == 2 and "max_sessions: 'x'" in out, "--check-config applies the other flags too")


# ---- admin (issue 16, item 5) ----

def varint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def tctl(*args, token=None):
    env = dict(os.environ)
    env.pop("TENSORD_TOKEN", None)
    if token:
        env["TENSORD_TOKEN"] = token
    return subprocess.run([TENSORCTL] + list(args), capture_output=True, text=True, timeout=30,
                          env=env)


def test_admin(tmp):
    tokens = os.path.join(tmp, "admin-tokens")
    admin = new_token(tokens, "ops", "--admin", "--label", "ops-laptop")
    alice = new_token(tokens, "alice", "--max-bytes", "8G", "--label", "alice-1")
    check(admin != "" and alice != "", "tokens for an admin tenant and for alice")
    r = tctl("token", "new", "--tenant", "alice", "--tokens-file", tokens, "--max-bytes", "1G")
    check(r.returncode == 2 and "already has max_bytes=8589934592" in r.stderr
          and "--update-quotas" in r.stderr and r.stdout == "",
          f"token new for alice with another max_bytes is refused, naming --update-quotas ({r.stderr.strip()!r})")
    same = new_token(tokens, "alice", "--max-bytes", "8G", "--label", "alice-2")
    check(same != "", "token new for alice with the same quota is fine")
    r = tctl("token", "new", "--tenant", "alice", "--tokens-file", tokens, "--max-bytes", "16G",
             "--update-quotas", "--label", "alice-3")
    check(r.returncode == 0, "--update-quotas changes the tenant's quota")
    r = tctl("token", "list", "--tokens-file", tokens, "--json")
    entries = json.loads(r.stdout) if r.returncode == 0 else []
    check([(e["tenant"], e["label"], e["admin"]) for e in entries] ==
          [("ops", "ops-laptop", True), ("alice", "alice-1", False), ("alice", "alice-2", False),
           ("alice", "alice-3", False)]
          and all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", e["created"]) for e in entries)
          and entries[3]["quotas"] == {"max_bytes": 16 << 30}
          and all(e["id"].startswith("sha256:") and e["id"].endswith("...") for e in entries),
          f"token list --json: tenants, labels, roles, creation times, quotas, hash prefixes only ({r.stdout.strip()[:200]!r})")
    r = tctl("token", "list", "--tokens-file", tokens)
    check(r.returncode == 0 and "ops-laptop" in r.stdout and "admin" in r.stdout
          and alice not in r.stdout and admin not in r.stdout,
          "token list: a table without any token")
    r = tctl("--version")
    check(r.returncode == 0 and re.fullmatch(r"tensorctl \d+\.\d+\.\d+\n", r.stdout) is not None,
          f"tensorctl --version ({r.stdout!r})")

    srv = Server(tmp, "admin", ["--tokens-file", tokens])
    try:
        r = tctl("info", "--json", srv.addr, token=alice)
        try:
            info = json.loads(r.stdout)
        except ValueError:
            info = {}
        check(r.returncode == 0 and info.get("devices", [{}])[0].get("name") == "cpu"
              and "limits" in info, f"tensorctl info --json ({r.stdout.strip()[:120]!r})")
        wl, ready = train(srv, {"TENSORD_TOKEN": alice})
        check(ready == "ready SESSION-OPEN", "alice is training")
        r = tctl("sessions", srv.addr, token=alice)
        check(r.returncode == 1 and "ListSessions needs the admin role: tenant 'alice'" in r.stderr,
              f"tensorctl sessions with a non-admin token: refused, naming the role ({r.stderr.strip()!r})")
        ch = grpc.insecure_channel(srv.addr)
        md_alice = (("authorization", f"Bearer {alice}"),)
        md_admin = (("authorization", f"Bearer {admin}"),)
        lst = ch.unary_unary("/tensord.v1.Tensord/ListSessions")
        kill = ch.unary_unary("/tensord.v1.Tensord/KillSession")

        def code_of(fn, body, md):
            try:
                fn(body, timeout=5, metadata=md)
                return "OK", ""
            except grpc.RpcError as e:
                return e.code(), e.details()

        c, d = code_of(lst, b"", md_alice)
        check(c == grpc.StatusCode.PERMISSION_DENIED and "needs the admin role" in d,
              f"ListSessions as alice: PERMISSION_DENIED naming the role ({c}, {d!r})")
        c, _ = code_of(kill, b"\x08\x01", md_alice)
        check(c == grpc.StatusCode.PERMISSION_DENIED, f"KillSession as alice: PERMISSION_DENIED ({c})")
        c, _ = code_of(lst, b"", None)
        check(c == grpc.StatusCode.UNAUTHENTICATED, f"ListSessions without a token: UNAUTHENTICATED ({c})")
        for body, want, what in [
            (b"\xff\xff\xff", grpc.StatusCode.INVALID_ARGUMENT, "garbage bytes"),
            (b"", grpc.StatusCode.INVALID_ARGUMENT, "id 0 (absent)"),
            (b"\x08" + varint(1 << 63), grpc.StatusCode.INVALID_ARGUMENT, "id 2^63"),
            (b"\x08" + varint((1 << 64) - 1), grpc.StatusCode.INVALID_ARGUMENT, "id 2^64-1"),
            (b"\x08" + varint(987654321), grpc.StatusCode.NOT_FOUND, "an id nobody has"),
            (b"\x0a\x03abc", grpc.StatusCode.INVALID_ARGUMENT, "id as a length-delimited field"),
        ]:
            c, d = code_of(kill, body, md_admin)
            check(c == want, f"KillSession with {what}: {want} ({c}, {d!r})")
        c, _ = code_of(lst, b"\xff\xff\xff", md_admin)
        check(c == grpc.StatusCode.INVALID_ARGUMENT, f"ListSessions with garbage bytes: INVALID_ARGUMENT ({c})")
        c, _ = code_of(lst, b"\x08\x05", md_admin)  # an unknown field is ignored (proto3)
        check(c == "OK", f"ListSessions with an unknown field answers ({c})")
        ch.close()

        deadline = time.monotonic() + 10
        rows = []
        while time.monotonic() < deadline:
            r = tctl("sessions", "--json", srv.addr, token=admin)
            rows = json.loads(r.stdout) if r.returncode == 0 else []
            if rows and rows[0]["ops"] > 0 and rows[0]["bytes"] > 0:
                break
            time.sleep(0.1)
        row = rows[0] if len(rows) == 1 else {}
        check(row.get("tenant") == "alice" and row.get("device") == "cpu"
              and row.get("peer", "").startswith("ipv4:127.0.0.1:") and row.get("ops", 0) > 0
              and row.get("bytes", 0) >= 256 and row.get("age_seconds", -1) >= 0,
              f"tensorctl sessions --json: alice's session with tenant, device, peer, ops, bytes, age ({rows})")
        r = tctl("sessions", srv.addr, token=admin)
        check(r.returncode == 0 and r.stdout.split("\n")[0].split() ==
              ["ID", "TENANT", "DEVICE", "PEER", "BYTES", "AGE_S", "OPS"] and " alice " in r.stdout,
              "tensorctl sessions: a table")
        r = tctl("sessions", srv.addr, "--kill", "0", token=admin)
        check(r.returncode == 2, "tensorctl sessions --kill 0: usage error")
        r = tctl("sessions", srv.addr, "--kill", "987654321", token=admin)
        check(r.returncode == 1 and "no open session 987654321" in r.stderr,
              f"tensorctl sessions --kill of an unknown id ({r.stderr.strip()!r})")
        r = tctl("sessions", srv.addr, "--kill=987654322", token=admin)
        check(r.returncode == 1 and "no open session 987654322" in r.stderr,
              f"tensorctl sessions --kill=ID asks the server as --kill ID does ({r.stderr.strip()!r})")
        r = tctl("sessions", srv.addr, "--kill", str(row.get("id", 1)), token=admin)
        check(r.returncode == 0, f"tensorctl sessions --kill ID ({r.stderr.strip()!r})")
        line = readline_within(wl, 20)
        check(line.startswith("error ") and "session ended by an administrator" in line,
              f"the killed session's client is told ({line!r})")
        wl.wait(timeout=20)
    finally:
        rc = srv.stop()
    check(rc == 0, f"tensord exited 0 ({rc})")
    check("KillSession: session" in srv.log() and "at the request of tenant 'ops'" in srv.log(),
          "the kill is logged with who asked")
    r = tctl("token", "revoke", "--tokens-file", tokens, "--label", "alice-1")
    r2 = tctl("token", "list", "--tokens-file", tokens, "--json")
    labels = [e["label"] for e in json.loads(r2.stdout)] if r2.returncode == 0 else []
    check(r.returncode == 0 and labels == ["ops-laptop", "alice-2", "alice-3"],
          f"token revoke --label removes that entry only ({labels})")
    r = tctl("token", "revoke", "--tokens-file", tokens, "--label", "alice-1")
    check(r.returncode == 1 and "no entry" in r.stderr, "revoking it again: exit 1, no entry matches")
    r = tctl("token", "revoke", "--tokens-file", tokens, "--tenant", "alice")
    r2 = tctl("token", "list", "--tokens-file", tokens, "--json")
    check(r.returncode == 0 and [e["tenant"] for e in json.loads(r2.stdout)] == ["ops"],
          "token revoke --tenant removes all of its entries")
    check(oct(os.stat(tokens).st_mode & 0o777) == "0o600", "the rewritten tokens file keeps mode 0600")


def test_token_name_equals_value(tmp):
    """token new, list and revoke take every option that has a value as --name=value too (the
    value is the rest of the argument); a flag given a value, an empty value and an unknown
    --foo=bar are usage errors (exit 2) naming the option, and leave the file as it was."""
    tokens = os.path.join(tmp, "equals-tokens")
    r = tctl("token", "new", "--tenant=bob", f"--tokens-file={tokens}", "--max-bytes=2G",
             "--label=bob-1", "--devices=cpu")
    check(r.returncode == 0 and len(r.stdout.strip()) > 20,
          f"token new --tenant=bob --tokens-file=FILE --max-bytes=2G ... ({r.stderr.strip()!r})")
    r = tctl("token", "new", "--tenant=bob", f"--tokens-file={tokens}", "--max-bytes=4G",
             "--label=bob-2")
    check(r.returncode == 2 and "already has max_bytes=2147483648" in r.stderr,
          f"--max-bytes=4G is read as 4G: refused without --update-quotas ({r.stderr.strip()!r})")
    r = tctl("token", "new", "--tenant=bob", f"--tokens-file={tokens}", "--max-bytes=4G",
             "--update-quotas", "--label=bob-2")
    check(r.returncode == 0, f"token new ... --update-quotas --label=bob-2 ({r.stderr.strip()!r})")
    for args, msg in [
        (["new", "--tenant=bob", f"--tokens-file={tokens}", "--admin=1"],
         "tensorctl: token: new: option --admin takes no value"),
        (["new", "--tenant=bob", f"--tokens-file={tokens}", "--update-quotas=yes"],
         "tensorctl: token: new: option --update-quotas takes no value"),
        (["new", "--tenant=", f"--tokens-file={tokens}"],
         "tensorctl: token: new: option needs a value: --tenant"),
        (["new", "--tenant=bob", f"--tokens-file={tokens}", "--bogus=1"],
         "tensorctl: token: new: unknown option --bogus"),
        (["list", f"--tokens-file={tokens}", "--json=1"],
         "tensorctl: token: list: option --json takes no value"),
        (["list", "--tokens-file="], "tensorctl: token: list: option needs a value: --tokens-file"),
        (["list", f"--tokens-file={tokens}", "--bogus=1"],
         "tensorctl: token: list: unknown option --bogus"),
        (["revoke", f"--tokens-file={tokens}", "--label="],
         "tensorctl: token: revoke: option needs a value: --label"),
        (["revoke", f"--tokens-file={tokens}", "--help=1"],
         "tensorctl: token: revoke: option --help takes no value"),
        (["--help=1"], "tensorctl: token: option --help takes no value"),
    ]:
        r = tctl("token", *args)
        check(r.returncode == 2 and msg in r.stderr and "usage: tensorctl token" in r.stderr,
              f"token {' '.join(args)}: exit 2, {msg!r} ({r.returncode}, {r.stderr.strip()[:160]!r})")
    r = tctl("token", "new", "--tenant=bob", f"--tokens-file={tokens}", "--mode=0644")
    check(r.returncode == 2 and "--mode '0644': give 0600 or 0640" in r.stderr,
          f"--mode=0644 is read as 0644: refused ({r.stderr.strip()!r})")
    r = tctl("token", "list", f"--tokens-file={tokens}", "--json")
    entries = json.loads(r.stdout) if r.returncode == 0 else []
    check([(e["tenant"], e["label"], e["devices"], e["quotas"]) for e in entries] ==
          [("bob", "bob-1", "cpu", {"max_bytes": 2 << 30}), ("bob", "bob-2", "", {"max_bytes": 4 << 30})],
          f"token list --tokens-file=FILE: the two tokens made with --name=value, nothing else ({entries})")
    r = tctl("token", "revoke", f"--tokens-file={tokens}", "--label=bob-1")
    r2 = tctl("token", "list", f"--tokens-file={tokens}", "--json")
    labels = [e["label"] for e in json.loads(r2.stdout)] if r2.returncode == 0 else []
    check(r.returncode == 0 and labels == ["bob-2"],
          f"token revoke --tokens-file=FILE --label=bob-1 removes that entry only ({labels})")


def test_token_repeated_quotas(tmp):
    """token new with the same quota option given many times (both spellings): the last value
    counts, the line carries each quota once. (It used to append every one to a 512-byte
    buffer: 60 of them overflowed it, a crash after the token was written.)"""
    tokens = os.path.join(tmp, "repeat-tokens")
    args = [f"--max-bytes={i}" for i in range(1, 61)] + ["--max-queued-batches",
                                                         "999999999999999"] * 30
    r = tctl("token", "new", "--tenant=carol", f"--tokens-file={tokens}", *args,
             "--max-sessions=3", "--max-sessions", "4")
    check(r.returncode == 0 and len(r.stdout.strip()) > 20,
          f"token new with 60 --max-bytes=N and 30 --max-queued-batches N: exit 0 "
          f"({r.returncode}, {r.stderr.strip()[:200]!r})")
    with open(tokens) as f:
        lines = f.read().splitlines()
    fields = lines[0].split()[2:] if len(lines) == 1 else []
    quotas = [x for x in fields if x.startswith("max_")]
    check(quotas == ["max_bytes=60", "max_sessions=4", "max_queued_batches=999999999999999"],
          f"one line, each quota once with its last value ({lines})")
    r = tctl("token", "list", f"--tokens-file={tokens}", "--json")
    entries = json.loads(r.stdout) if r.returncode == 0 else []
    check([e["quotas"] for e in entries] ==
          [{"max_bytes": 60, "max_sessions": 4, "max_queued_batches": 999999999999999}],
          f"token list reads them back ({entries})")


def main():
    with tempfile.TemporaryDirectory(prefix="td-ops-") as tmp:
        pb, pbg = load_health_stubs(tmp)
        test_health_metrics_logs(tmp, pb, pbg)
        test_drain(tmp, pb, pbg)
        test_readyz_while_draining(tmp)
        test_journal_text(tmp)
        test_tls_handshake_logs(tmp)
        test_drain_ends_live_session(tmp)
        test_sighup_tokens_and_config(tmp)
        test_sighup_new_certificate(tmp, pb, pbg)
        test_ring_metrics(tmp)
        test_help(tmp)
        test_check_config(tmp)
        test_admin(tmp)
        test_token_name_equals_value(tmp)
        test_token_repeated_quotas(tmp)
    if failures:
        print(f"{len(failures)} checks failed")
        sys.exit(1)
    print("all checks passed")


if __name__ == "__main__":
    main()

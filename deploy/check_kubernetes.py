#!/usr/bin/python3
"""Check deploy/kubernetes/ and deploy/container/Dockerfile against the real tensord.

Usage: check_kubernetes.py TENSORD TENSORCTL SOURCE_ROOT (meson test runs it as
deploy-kubernetes). Exit 0 when everything holds, 1 with one line per problem, 77 (skipped)
without python3-yaml (deploy/install-deps.sh installs it).

What it checks:
  - every manifest parses as YAML (all documents), has apiVersion, kind and metadata.name,
    and kustomization.yaml lists exactly the other files;
  - a headless Service, a StatefulSet whose container requests nvidia.com/gpu, the ConfigMap
    and the Secret the pods mount, with selectors, port names and mount paths agreeing;
  - the probes name the server's real ports and paths: the container ports equal the
    ConfigMap config's `listen` and `metrics` ports, liveness/startup probe GET /healthz and
    readiness GET /readyz on the metrics port, and a tensord started from that very config
    (addresses moved to 127.0.0.1:0, devices to cpu) answers 200 on each probe's path;
  - `tensord --check-config` accepts the config, `tensorctl token list` the Secret's tokens;
  - the Dockerfile starts FROM debian:12, EXPOSEs both ports and runs the config path the
    StatefulSet mounts.
"""
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

try:
    import yaml
except ImportError:
    print("skipped: python3-yaml is not installed (deploy/install-deps.sh installs it)")
    sys.exit(77)

TENSORD, TENSORCTL, ROOT = sys.argv[1:4]
KDIR = os.path.join(ROOT, "deploy", "kubernetes")
problems = []


def fail(msg):
    problems.append(msg)


def load_manifests():
    objs, files = [], sorted(f for f in os.listdir(KDIR) if f.endswith((".yaml", ".yml")))
    for f in files:
        with open(os.path.join(KDIR, f)) as fh:
            try:
                docs = [d for d in yaml.safe_load_all(fh) if d is not None]
            except yaml.YAMLError as e:
                fail(f"{f}: not valid YAML: {e}")
                continue
        for d in docs:
            if not isinstance(d, dict) or "apiVersion" not in d or "kind" not in d:
                fail(f"{f}: a document without apiVersion/kind")
                continue
            if d["kind"] != "Kustomization" and not d.get("metadata", {}).get("name"):
                fail(f"{f}: {d['kind']} without metadata.name")
            d["__file"] = f
            objs.append(d)
    return objs, files


def one(objs, kind):
    found = [o for o in objs if o["kind"] == kind]
    if len(found) != 1:
        fail(f"want exactly one {kind}, found {len(found)}")
        return {}
    return found[0]


def conf_value(conf, key):
    m = re.search(rf"^\s*{key}\s*=\s*(\S+)\s*$", conf, re.M)
    return m.group(1) if m else None


def port_of(addr):
    return int(addr.rsplit(":", 1)[1])


def resolve_port(container, port):
    if isinstance(port, int):
        return port
    for p in container.get("ports", []):
        if p.get("name") == port:
            return p["containerPort"]
    fail(f"probe port '{port}' is not a container port name")
    return None


objs, files = load_manifests()
kust = one(objs, "Kustomization")
if kust and sorted(kust.get("resources", [])) != sorted(f for f in files if f != "kustomization.yaml"):
    fail(f"kustomization.yaml resources {kust.get('resources')} differ from the files {files}")
svc, sts = one(objs, "Service"), one(objs, "StatefulSet")
cm, secret = one(objs, "ConfigMap"), one(objs, "Secret")
if problems:
    print("\n".join(problems))
    sys.exit(1)

# --- Service, StatefulSet, volumes
if svc["spec"].get("clusterIP") != "None":
    fail("the Service is not headless (clusterIP: None)")
if sts["spec"].get("serviceName") != svc["metadata"]["name"]:
    fail("the StatefulSet's serviceName is not the headless Service")
pod = sts["spec"]["template"]
labels = pod["metadata"].get("labels", {})
for k, v in svc["spec"].get("selector", {}).items():
    if labels.get(k) != v:
        fail(f"the Service selects {k}={v}, the pods do not carry it")
c = pod["spec"]["containers"][0]
limits = c.get("resources", {}).get("limits", {})
if int(limits.get("nvidia.com/gpu", 0)) < 1:
    fail("the container does not request nvidia.com/gpu")
args = c.get("args", [])
config_path = args[args.index("--config") + 1] if "--config" in args else None
if config_path is None:
    fail("the container is not started with --config")
conf = cm["data"].get("tensord.conf", "")
listen, metrics = conf_value(conf, "listen"), conf_value(conf, "metrics")
if listen is None or metrics is None:
    fail("the ConfigMap's tensord.conf sets no listen or no metrics address")
    print("\n".join(problems))
    sys.exit(1)
cports = {p.get("name"): p["containerPort"] for p in c.get("ports", [])}
if cports.get("grpc") != port_of(listen):
    fail(f"container port grpc {cports.get('grpc')} is not the config's listen {listen}")
if cports.get("metrics") != port_of(metrics):
    fail(f"container port metrics {cports.get('metrics')} is not the config's metrics {metrics}")
for sp in svc["spec"]["ports"]:
    tp = sp.get("targetPort")
    if resolve_port(c, tp) != sp["port"]:
        fail(f"Service port {sp['name']} {sp['port']} targets {tp}, another port")
probes = {}
for kind, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz"),
                   ("startupProbe", "/healthz")):
    pr = c.get(kind)
    if pr is None:
        if kind != "startupProbe":
            fail(f"no {kind}")
        continue
    get = pr.get("httpGet")
    if get is None:
        fail(f"{kind} is not an httpGet probe")
        continue
    if get.get("path") != path:
        fail(f"{kind} GETs {get.get('path')}, want {path}")
    if resolve_port(c, get.get("port")) != port_of(metrics):
        fail(f"{kind} is not on the metrics port {port_of(metrics)}")
    probes[kind] = get.get("path")
mounts = {m["name"]: m for m in c.get("volumeMounts", [])}
vols = {v["name"]: v for v in pod["spec"].get("volumes", [])}
cfg_mount = next((m for m in mounts.values() if m.get("subPath") == "tensord.conf"), None)
if cfg_mount is None or cfg_mount["mountPath"] != config_path:
    fail(f"the config is not mounted at the --config path {config_path}")
elif vols.get(cfg_mount["name"], {}).get("configMap", {}).get("name") != cm["metadata"]["name"]:
    fail("the config mount is not the ConfigMap")
tokens_file = conf_value(conf, "tokens_file")
tok_mount = next((m for n, m in mounts.items()
                  if vols.get(n, {}).get("secret", {}).get("secretName") == secret["metadata"]["name"]),
                 None)
if tokens_file is None or tok_mount is None or \
        os.path.dirname(tokens_file) != tok_mount["mountPath"] or \
        os.path.basename(tokens_file) not in secret.get("stringData", {}):
    fail(f"tokens_file {tokens_file} is not a key of the Secret mounted at "
         f"{tok_mount['mountPath'] if tok_mount else '(not mounted)'}")

# --- the Dockerfile
with open(os.path.join(ROOT, "deploy", "container", "Dockerfile")) as fh:
    docker = fh.read()
if not re.search(r"^FROM debian:12\b", docker, re.M):
    fail("the Dockerfile does not start from debian:12")
exposed = {int(p) for line in re.findall(r"^EXPOSE (.+)$", docker, re.M) for p in line.split()}
for p in (port_of(listen), port_of(metrics)):
    if p not in exposed:
        fail(f"the Dockerfile does not EXPOSE {p}")
if config_path and config_path not in docker:
    fail(f"the Dockerfile never names {config_path}")

# --- the real server, from the ConfigMap's config
with tempfile.TemporaryDirectory() as tmp:
    tokens = os.path.join(tmp, "tokens")
    with open(tokens, "w") as fh:
        fh.write(secret["stringData"][os.path.basename(tokens_file or "tokens")])
    os.chmod(tokens, 0o600)
    r = subprocess.run([TENSORCTL, "token", "list", "--tokens-file", tokens],
                       capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"tensorctl token list refuses the Secret's tokens: {r.stderr.strip()}")
    local = re.sub(r"^(\s*tokens_file\s*=).*$", rf"\1 {tokens}", conf, flags=re.M)
    local = re.sub(r"^(\s*cache_dir\s*=).*$", rf"\1 {tmp}/cache", local, flags=re.M)
    cfg = os.path.join(tmp, "tensord.conf")
    with open(cfg, "w") as fh:
        fh.write(local)
    over = ["--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--devices", "cpu",
            "--log-format", "text"]
    r = subprocess.run([TENSORD, "--check-config", cfg] + over, capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"tensord --check-config refuses the ConfigMap's config: {r.stdout}{r.stderr}")
    errlog = open(os.path.join(tmp, "stderr"), "w+")
    proc = subprocess.Popen([TENSORD, "--config", cfg] + over, stdout=subprocess.DEVNULL,
                            stderr=errlog)
    try:
        port = None
        for _ in range(150):
            errlog.seek(0)
            m = re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", errlog.read())
            if m:
                port = int(m.group(1))
                break
            if proc.poll() is not None:
                break
            time.sleep(0.1)
        if port is None:
            errlog.seek(0)
            fail(f"tensord did not start from the ConfigMap's config: {errlog.read()[-2000:]}")
        else:
            for kind, path in probes.items():
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
                        if resp.status != 200:
                            fail(f"{kind} path {path}: HTTP {resp.status}")
                except urllib.error.URLError as e:
                    fail(f"{kind} path {path} on the real server: {e}")
    finally:
        proc.terminate()
        try:
            rc = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
        if rc != 0:
            fail(f"tensord exited with status {rc} after SIGTERM")

if problems:
    print("\n".join(problems))
    sys.exit(1)
print(f"ok: {len(objs)} manifests; probes {probes} on port {port_of(metrics)}, "
      f"gRPC on {port_of(listen)}")

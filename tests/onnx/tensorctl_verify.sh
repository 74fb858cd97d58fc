#!/usr/bin/env bash
# tensorctl_verify.sh TENSORCTL DATA-DIR: `tensorctl verify` against real tensord servers.
# A server whose engine is made to return a wrong value for one op (the test hook
# TENSORD_TEST_PERTURB_OP, engine/session.h) must make verify exit 1 and name the op and the
# device, in the table, the FAIL lines and the JSON; the same for an ONNX model whose
# output depends on that op. An honest server passes. Usage errors exit 2.
set -euo pipefail
tensorctl=$1 data=$2
py=/usr/bin/python3
if ! "$py" -c 'import numpy' 2>/dev/null; then
    echo "SKIP: numpy for /usr/bin/python3 is not installed"
    exit 77
fi
: "${TENSORD_BIN:?TENSORD_BIN is not set (run through meson test)}"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/tctl-verify.XXXXXX")
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
    rm -rf "$TMP"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# start NAME [ENV=VALUE]: a tensord on unix:$TMP/NAME.sock
start() {
    local name=$1; shift
    env "$@" "${TD_TEST_TENSORD:-$TENSORD_BIN}" --listen "unix:$TMP/$name.sock" \
        >"$TMP/$name.log" 2>&1 &
    pids+=($!)
    for ((i = 0; i < 200; i++)); do
        grep -q 'listening on' "$TMP/$name.log" && return 0
        sleep 0.05
    done
    cat "$TMP/$name.log" >&2
    fail "tensord $name did not start"
}
# CPU-only servers (no backend modules: a host with lavapipe would add vulkan:0, and the
# checks below count devices)
start good TENSORD_LOG_LEVEL=warn TENSORD_BACKEND_DIR=
start bad TENSORD_TEST_PERTURB_OP=matmul TENSORD_BACKEND_DIR=

"$py" - "$TMP" <<'PY'
import sys, numpy as np
d = sys.argv[1]
r = np.random.RandomState(15)
np.save(d + "/a.npy", r.randn(3, 4).astype(np.float32))
np.save(d + "/b.npy", r.randn(4, 3).astype(np.float32))
PY
mm=$data/test_matmul_2d/model.onnx

# the honest server passes, op cases and the model
rc=0
"$tensorctl" verify "unix:$TMP/good.sock" --filter "matmul f32" --quick >"$TMP/good.out" || rc=$?
cat "$TMP/good.out"
[[ $rc == 0 ]] || fail "verify of an honest server exited $rc"
grep -Eq '^matmul +[0-9]+ +[0-9]+ +0 ' "$TMP/good.out" || fail "no matmul table line"
grep -q 'verify: device cpu: every op case passed' "$TMP/good.out" || fail "no device line"
rc=0
"$tensorctl" verify "unix:$TMP/good.sock" --model "$mm" --input a="$TMP/a.npy" \
    --input b="$TMP/b.npy" >"$TMP/goodm.out" || rc=$?
cat "$TMP/goodm.out"
[[ $rc == 0 ]] || fail "verify --model of an honest server exited $rc"
grep -q 'ok   output c: matches local:cpu' "$TMP/goodm.out" || fail "no ok line for output c"

# the perturbed server fails, naming matmul and cpu
rc=0
"$tensorctl" verify "unix:$TMP/bad.sock" --filter "matmul f32" --quick \
    --json "$TMP/bad.json" >"$TMP/bad.out" || rc=$?
[[ $rc == 1 ]] || { cat "$TMP/bad.out"; fail "verify of a perturbed server exited $rc, want 1"; }
grep -Eq '^FAIL matmul f32 .* on unix:.*/bad.sock/cpu: element 0' "$TMP/bad.out" ||
    fail "no FAIL line naming matmul on cpu"
grep -Eq '^matmul .* FAIL$' "$TMP/bad.out" || fail "the table does not mark matmul FAIL"
grep -q 'verify: device cpu: MISMATCH' "$TMP/bad.out" || fail "no mismatch line for cpu"
"$py" - "$TMP/bad.json" <<'PY' || fail "the JSON does not name matmul on cpu"
import json, sys
objs = [json.loads(line) for line in open(sys.argv[1])]
assert len(objs) == 1, objs
o = objs[0]
assert o["target"].endswith("/cpu") and o["failed"] > 0, o
assert {f["op"] for f in o["failures"]} == {"matmul"}, o["failures"][:3]
assert [x for x in o["ops"] if x["op"] == "matmul"][0]["failed"] == o["failed"]
PY
rc=0
"$tensorctl" verify "unix:$TMP/bad.sock" --model "$mm" --input a="$TMP/a.npy" \
    --input b="$TMP/b.npy" >"$TMP/badm.out" || rc=$?
cat "$TMP/badm.out"
[[ $rc == 1 ]] || fail "verify --model of a perturbed server exited $rc, want 1"
grep -q 'FAIL output c: element 0' "$TMP/badm.out" || fail "no FAIL line for output c"
grep -q 'model .* on cpu:' "$TMP/badm.out" || fail "the device is not named"

# usage and setup errors
expect_rc() {
    local want=$1 msg=$2; shift 2
    local rc=0
    "$@" >"$TMP/e.out" 2>&1 || rc=$?
    [[ $rc == "$want" ]] || { cat "$TMP/e.out"; fail "$* exited $rc, want $want"; }
    grep -q -- "$msg" "$TMP/e.out" || { cat "$TMP/e.out"; fail "$*: no '$msg'"; }
}
expect_rc 2 "missing server address" "$tensorctl" verify
expect_rc 2 "--input needs --model" "$tensorctl" verify "unix:$TMP/good.sock" --input a=x.npy
expect_rc 2 "bad tolerance" "$tensorctl" verify "unix:$TMP/good.sock" --rtol -1
expect_rc 2 "no device 'cuda:7' (it has: cpu)" "$tensorctl" verify "unix:$TMP/good.sock" \
    --device cuda:7
expect_rc 0 "Check that a server computes" "$tensorctl" verify --help
expect_rc 2 "no --input for model input 'b'" "$tensorctl" verify "unix:$TMP/good.sock" \
    --model "$mm" --input a="$TMP/a.npy"

# the GNU spelling --name=value, as "--name value" (--json takes a FILE here, where info's
# --json is a flag); a flag given a value, an empty value and an unknown option: exit 2
rc=0
"$tensorctl" verify "unix:$TMP/good.sock" --filter="matmul f32" --quick --device=cpu \
    --timeout=5000 --json="$TMP/equals.json" >"$TMP/equals.out" || rc=$?
[[ $rc == 0 ]] || { cat "$TMP/equals.out"; fail "verify with --name=value options exited $rc"; }
grep -q 'verify: device cpu: every op case passed' "$TMP/equals.out" || fail "no device line"
"$py" - "$TMP/equals.json" <<'PY' || fail "--json=FILE: not one passing object of matmul cases"
import json, sys
objs = [json.loads(line) for line in open(sys.argv[1])]
assert len(objs) == 1, objs
o = objs[0]
assert o["target"].endswith("/good.sock/cpu") and o["failed"] == 0, o
assert {x["op"] for x in o["ops"]} == {"matmul"}, o["ops"]
PY
rc=0
"$tensorctl" verify "unix:$TMP/good.sock" --model="$mm" --input=a="$TMP/a.npy" \
    --input=b="$TMP/b.npy" --rtol=1e-3 --atol=1e-7 >"$TMP/equalsm.out" || rc=$?
[[ $rc == 0 ]] || { cat "$TMP/equalsm.out"; fail "verify --model=... --input=NAME=FILE exited $rc"; }
grep -q 'ok   output c: matches local:cpu' "$TMP/equalsm.out" || fail "--model=: no ok line for c"
expect_rc 2 "tensorctl verify: bad tolerance '-1' (a finite number >= 0)" "$tensorctl" verify \
    "unix:$TMP/good.sock" --rtol=-1
expect_rc 2 "tensorctl verify: bad tolerance 'x=1'" "$tensorctl" verify "unix:$TMP/good.sock" \
    --atol=x=1
expect_rc 2 "tensorctl verify: bad timeout '0'" "$tensorctl" verify "unix:$TMP/good.sock" \
    --timeout=0
expect_rc 2 "tensorctl verify: --input needs --model" "$tensorctl" verify "unix:$TMP/good.sock" \
    --input=a=x.npy
expect_rc 2 "no device 'cuda:7' (it has: cpu)" "$tensorctl" verify "unix:$TMP/good.sock" \
    --device=cuda:7
expect_rc 2 "tensorctl verify: option --json needs a value" "$tensorctl" verify \
    "unix:$TMP/good.sock" --json=
expect_rc 2 "tensorctl verify: option --rtol needs a value" "$tensorctl" verify \
    "unix:$TMP/good.sock" --rtol=
expect_rc 2 "tensorctl verify: option --quick takes no value" "$tensorctl" verify \
    "unix:$TMP/good.sock" --quick=1
expect_rc 2 "tensorctl verify: option --ops takes no value" "$tensorctl" verify \
    "unix:$TMP/good.sock" --ops=
expect_rc 2 "tensorctl verify: option --help takes no value" "$tensorctl" verify --help=1
expect_rc 2 "tensorctl verify: unknown option '--bogus'" "$tensorctl" verify \
    "unix:$TMP/good.sock" --bogus=1

# --json - with --model: whole JSON objects on their own lines among the table's
"$tensorctl" verify "unix:$TMP/good.sock" --model "$mm" --input a="$TMP/a.npy" \
    --input b="$TMP/b.npy" --json - >"$TMP/mj.out"
grep '^{' "$TMP/mj.out" >"$TMP/mj.json"
"$py" - "$TMP/mj.json" <<'PY' || fail "--json - with --model is not one object per line"
import json, sys
objs = [json.loads(line) for line in open(sys.argv[1])]
assert len(objs) == 1 and objs[0]["outputs"][0]["passed"] is True, objs
PY

# a server killed mid-run: one "lost the session" line and exit 1, not thousands of FAILs
start lost TENSORD_LOG_LEVEL=warn
lost_pid=${pids[-1]}
rc=0
( sleep 1.5; kill -9 "$lost_pid" ) &
"$tensorctl" verify "unix:$TMP/lost.sock" >"$TMP/lost.out" 2>&1 || rc=$?
[[ $rc == 1 ]] || { tail "$TMP/lost.out"; fail "verify of a killed server exited $rc, want 1"; }
grep -q "lost the session" "$TMP/lost.out" || { tail "$TMP/lost.out"; fail "no 'lost the session'"; }
nf=$(grep -c '^FAIL' "$TMP/lost.out" || true)
[[ $nf -le 1 ]] || fail "$nf FAIL lines after the server died"
grep -q "could not run" "$TMP/lost.out" || fail "no 'could not run' verdict"
echo "ok: tensorctl verify"

#!/usr/bin/env bash
# tensorctl_run.sh TENSORCTL DATA-DIR: `tensorctl run` on models of the ONNX test data gives
# the same .npy bytes on local:cpu and through a real tensord; .npy versions 1.0/2.0/3.0 are
# read; big-endian, Fortran-order, version 4.0 and truncated files and a missing input get
# clear errors. Inputs are written with numpy (/usr/bin/python3), which also reads the
# outputs back (an independent check of the writer).
set -euo pipefail
tensorctl=$1 data=$2
py=/usr/bin/python3
if ! "$py" -c 'import numpy' 2>/dev/null; then
    echo "SKIP: numpy for /usr/bin/python3 is not installed"
    exit 77
fi
: "${TENSORD_BIN:?TENSORD_BIN is not set (run through meson test)}"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/tctl-run.XXXXXX")
pid=
cleanup() {
    if [[ -n $pid ]]; then
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    fi
    rm -rf "$TMP"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
: >"$TMP/log"
"${TD_TEST_TENSORD:-$TENSORD_BIN}" --listen 127.0.0.1:0 >"$TMP/log" 2>&1 &
pid=$!
addr=
for ((i = 0; i < 200; i++)); do
    addr=$(sed -n 's/.*listening on \([^ ]*\).*/\1/p' "$TMP/log" | head -n 1)
    [[ -n $addr ]] && break
    kill -0 "$pid" 2>/dev/null || { cat "$TMP/log" >&2; fail "tensord exited"; }
    sleep 0.05
done
[[ -n $addr ]] || fail "tensord did not start"

"$py" - "$TMP" <<'PY'
import sys, numpy as np
d = sys.argv[1]
r = np.random.RandomState(14)
np.save(d + "/a.npy", r.randn(3, 4).astype(np.float32))
with open(d + "/b.npy", "wb") as f:  # format 2.0
    np.lib.format.write_array(f, r.randn(4, 3).astype(np.float32), version=(2, 0))
with open(d + "/x.npy", "wb") as f:  # format 3.0
    np.lib.format.write_array(f, r.randn(3, 4, 5).astype(np.float32), version=(3, 0))
np.save(d + "/big.npy", np.zeros((3, 4), ">f4"))
np.save(d + "/fortran.npy", np.asfortranarray(np.zeros((3, 4), np.float32)))
raw = open(d + "/a.npy", "rb").read()
open(d + "/v4.npy", "wb").write(raw[:6] + bytes([4, 0]) + raw[8:])
open(d + "/short.npy", "wb").write(raw[:-5])
PY

mm=$data/test_matmul_2d/model.onnx
sm=$data/test_softmax_axis_1/model.onnx
for dev in local:cpu "tensord://$addr/cpu"; do
    tag=${dev%%:*}
    mkdir -p "$TMP/$tag"
    "$tensorctl" run "$mm" --device "$dev" --input a="$TMP/a.npy" --input b="$TMP/b.npy" \
        --output-dir "$TMP/$tag" >"$TMP/$tag.out"
    "$tensorctl" run "$sm" --device "$dev" --input x="$TMP/x.npy" --output-dir "$TMP/$tag" \
        >>"$TMP/$tag.out"
    cat "$TMP/$tag.out"
    grep -q '^output c: f32 \[3, 3\]' "$TMP/$tag.out" || fail "no output line for c on $dev"
    grep -q "run [0-9.]* ms" "$TMP/$tag.out" || fail "no wall time on $dev"
done
cmp "$TMP/local/c.npy" "$TMP/tensord/c.npy" || fail "matmul output differs local vs remote"
cmp "$TMP/local/y.npy" "$TMP/tensord/y.npy" || fail "softmax output differs local vs remote"
"$py" - "$TMP" <<'PY'
import sys, numpy as np
d = sys.argv[1]
a, b, c = np.load(d + "/a.npy"), np.load(d + "/b.npy"), np.load(d + "/local/c.npy")
assert c.dtype == np.float32 and c.shape == (3, 3), (c.dtype, c.shape)
ref = a.astype(np.float64) @ b.astype(np.float64)
assert np.allclose(c, ref, rtol=1e-5, atol=1e-6), abs(c - ref).max()
x, y = np.load(d + "/x.npy").astype(np.float64), np.load(d + "/local/y.npy")
e = np.exp(x - x.max(axis=1, keepdims=True))
assert np.allclose(y, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)
print("numpy reads the outputs and agrees with a float64 reference")
PY

expect() { # expect NEEDLE CMD...: exit 1 and NEEDLE on stderr
    local needle=$1; shift
    local rc=0
    "$@" >"$TMP/o" 2>"$TMP/e" || rc=$?
    [[ $rc -eq 1 ]] || { cat "$TMP/o" "$TMP/e" >&2; fail "'$*' exited $rc, expected 1"; }
    grep -qF -- "$needle" "$TMP/e" || { cat "$TMP/e" >&2; fail "stderr lacks '$needle'"; }
    echo "ok: $(head -n 1 "$TMP/e")"
}
expect "big-endian dtype '>f4'" "$tensorctl" run "$mm" --input a="$TMP/big.npy" --input b="$TMP/b.npy"
expect "Fortran-order" "$tensorctl" run "$mm" --input a="$TMP/fortran.npy" --input b="$TMP/b.npy"
expect "format version 4.0 is not supported" "$tensorctl" run "$mm" --input a="$TMP/v4.npy" --input b="$TMP/b.npy"
expect "shorter than the shape" "$tensorctl" run "$mm" --input a="$TMP/short.npy" --input b="$TMP/b.npy"
expect "no --input for model input 'b' (f32[4, 3])" "$tensorctl" run "$mm" --input a="$TMP/a.npy"
expect "input 'a' needs f32[3, 4], got f32[4, 3]" "$tensorctl" run "$mm" --input a="$TMP/b.npy" --input b="$TMP/b.npy"
expect "not a valid ONNX model" "$tensorctl" run "$TMP/a.npy"
"$tensorctl" run --help | grep -q -- "--output-dir DIR" || fail "run --help"

# the GNU spelling --name=value, as "--name value": --input=NAME=FILE (the value holds '=')
"$tensorctl" run "$mm" --device="tensord://$addr/cpu" --input=a="$TMP/a.npy" \
    --input=b="$TMP/b.npy" --output-dir="$TMP/equals" >"$TMP/equals.out"
grep -qF "output c: f32 [3, 3] -> $TMP/equals/c.npy" "$TMP/equals.out" ||
    fail "--output-dir=DIR: no output line for c ($(cat "$TMP/equals.out"))"
grep -qF "device tensord://$addr/cpu: load" "$TMP/equals.out" || fail "--device=URI is not the device"
cmp "$TMP/local/c.npy" "$TMP/equals/c.npy" || fail "--input=NAME=FILE gave another output"
expect "no --input for model input 'b'" "$tensorctl" run "$mm" --input=a="$TMP/a.npy"
expect_usage() { # expect_usage NEEDLE CMD...: exit 2, NEEDLE and the usage on stderr
    local needle=$1; shift
    local rc=0
    "$@" >"$TMP/o" 2>"$TMP/e" || rc=$?
    [[ $rc -eq 2 ]] || { cat "$TMP/o" "$TMP/e" >&2; fail "'$*' exited $rc, expected 2"; }
    grep -qF -- "$needle" "$TMP/e" || { cat "$TMP/e" >&2; fail "stderr lacks '$needle'"; }
    grep -qF -- "usage: tensorctl run" "$TMP/e" || fail "'$*': no usage on stderr"
    echo "ok: $(head -n 1 "$TMP/e")"
}
expect_usage "tensorctl run: option --help takes no value" "$tensorctl" run "$mm" --help=1
expect_usage "tensorctl run: option --device needs a value" "$tensorctl" run "$mm" --device= \
    --input=a="$TMP/a.npy" --input=b="$TMP/b.npy"
expect_usage "tensorctl run: option --input needs a value" "$tensorctl" run "$mm" --input=
expect_usage "tensorctl run: unknown option '--bogus'" "$tensorctl" run "$mm" --bogus=1
echo "PASS"

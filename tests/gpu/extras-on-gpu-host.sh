#!/usr/bin/env bash
# extras-on-gpu-host.sh — the GPU checks that run after run-on-gpu-host.sh in the same device
# call (it reuses that script's unpacked carry): the ONNX backend node tests on cuda:0 in
# process and through a tensord (issue 14's per-device pass rate), and the GPU's UUID in
# /metrics against nvidia-smi (issue 16). Appends its lines to $OUT/summary.txt and its logs
# to $OUT/smoke.log (the device tool returns at most 8 files; run-on-gpu-host.sh writes 8).
#
# Needs in carry/: tensord-gpu.tar.xz (tests/gpu/prepare-carry.sh; bin/td-onnx-runner) and
# onnx-node.tar.xz (the node tests of Debian's libonnx-testdata, packed by prepare-carry.sh).
#     BUDGET=150 bash tests/gpu/extras-on-gpu-host.sh
set -u -o pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${OUT:-/tmp/tensord-gpu-out}
mkdir -p "$OUT"
SUM=$OUT/summary.txt
LOG=$OUT/smoke.log
note() { echo "$*" | tee -a "$SUM"; }
failures=0
result() { if [ "$2" -eq 0 ]; then note "PASS $1"; else note "FAIL $1 (exit $2)"; failures=$((failures + 1)); fi; }
start=$(date +%s)
BUDGET=${BUDGET:-150}
. tests/gpu/gpu-host-lib.sh
X=${TMPDIR:-/tmp}/tensord-gpu
[ -x "$X/bin/tensord" ] || unpack_carry "$X" || { note "FAIL unpack carry"; exit 1; }
use_carry "$X"
NODE=${TMPDIR:-/tmp}/onnx-data
rm -rf "$NODE" && mkdir -p "$NODE" && tar -C "$NODE" -xJf carry/onnx-node.tar.xz

# ---- ONNX node tests, in process on cuda:0 ----
onnx() { # label uri
    echo "== td-onnx-runner --device $2" >>"$LOG"
    timeout "$(limit 120)" "$X/bin/td-onnx-runner" --device "$2" --expected tests/onnx/expected.txt \
        "$NODE/node" >"$NODE/run.log" 2>&1
    local r=$?
    grep -E '^(FAIL|REJECTED|REGRESSION|NOW PASSES|expected list)' "$NODE/run.log" >>"$LOG"
    tail -5 "$NODE/run.log" >>"$LOG"
    result "onnx node tests $1: $(grep -c '^PASS' "$NODE/run.log") PASS, $(grep -c '^FAIL' "$NODE/run.log") FAIL, $(grep -c '^UNSUPPORTED' "$NODE/run.log") UNSUPPORTED, $(grep -c '^REJECTED' "$NODE/run.log") REJECTED" $r
}
onnx "local:cuda:0" local:cuda:0

# ---- a tensord with metrics: ONNX through it, then /metrics' UUID against nvidia-smi ----
start_tensord "$X/bin/tensord" "$NODE/server.log" --metrics 127.0.0.1:0
if [ -z "$SERVER_ADDR" ]; then
    result "tensord --metrics start" 1
    cat "$NODE/server.log" >>"$LOG"
else
    onnx "remote cuda:0" "tensord://$SERVER_ADDR/cuda:0"
    murl=$(grep -m1 -a -oE 'metrics on http://[^ ]+' "$NODE/server.log" | sed 's/^metrics on //')
    want=$(nvidia-smi --query-gpu=uuid --format=csv,noheader -i 0 2>/dev/null | tr -d ' ')
    got=$(python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())' "$murl" 2>>"$LOG" |
          grep '^tensord_device_info{device="cuda:0"' | tee -a "$LOG" | grep -oE 'UUID="[^"]*"' | sed -e 's/^UUID="//' -e 's/"$//')
    echo "nvidia-smi uuid: $want; /metrics: $got" >>"$LOG"
    [ -n "$want" ] && [ "$want" = "$got" ]
    result "/metrics tensord_device_info{device=\"cuda:0\"} UUID $got = nvidia-smi $want" $?
    stop_tensord
fi
note "extras done in $(($(date +%s) - start)) s, $failures failed step(s)"
[ "$failures" -eq 0 ]

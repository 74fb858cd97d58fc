#!/usr/bin/env bash
# placement-on-gpu-host.sh — issue 19 on a GPU host, in the device call after
# run-on-gpu-host.sh (reuses its unpacked carry): a tensord started with no --devices
# exposes cpu and cuda:0; a session that names no device and one that says "auto" land on
# cuda:0 (the first accelerator); td_to_device moves 256 MiB cpu -> cuda:0 and cuda:0 -> cpu
# inside the server with the bytes unchanged (bench/device-bench checks them), next to a
# read + upload through the client. Appends to $OUT/summary.txt and $OUT/smoke.log.
#     BUDGET=60 bash tests/gpu/placement-on-gpu-host.sh
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/tensord-gpu-out}
mkdir -p "$OUT"
SUM=$OUT/summary.txt
LOG=$OUT/smoke.log
note() { echo "$*" | tee -a "$SUM"; }
failures=0
result() { if [ "$2" -eq 0 ]; then note "PASS $1"; else note "FAIL $1 (exit $2)"; failures=$((failures + 1)); fi; }
start=$(date +%s)
BUDGET=${BUDGET:-60}
. tests/gpu/gpu-host-lib.sh
X=${TMPDIR:-/tmp}/tensord-gpu
[ -x "$X/bin/tensord" ] || unpack_carry "$X" || { note "FAIL unpack carry"; exit 1; }
use_carry "$X"
S=${TMPDIR:-/tmp}/placement-server.log
start_tensord "$X/bin/tensord" "$S"
if [ -z "$SERVER_ADDR" ]; then
    result "tensord start (no --devices)" 1
    cat "$S" >>"$LOG"
    exit 1
fi
for dir in "--from cpu --to cuda:0" "--from cuda:0 --to cpu"; do
    # shellcheck disable=SC2086
    timeout "$(limit 60)" "$X/bin/device-bench" "$SERVER_ADDR" --mib 256 --reps 5 $dir \
        >"$S.bench" 2>&1
    r=$?
    tee -a "$LOG" <"$S.bench"
    grep -q '^no device named: session on cuda:0' "$S.bench" && grep -q '^auto: session on cuda:0' "$S.bench"
    result "default and auto sessions on cuda:0" $?
    result "device-bench $dir (bytes unchanged)" $r
done
grep -aE 'placed|opened on' "$S" | head -6 >>"$LOG"
stop_tensord
note "placement done in $(($(date +%s) - start)) s, $failures failed step(s)"
[ "$failures" -eq 0 ]

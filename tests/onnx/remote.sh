#!/usr/bin/env bash
# remote.sh RUNNER EXPECTED DATA-DIR: the ONNX node tests through a real tensord on a free
# loopback port (its cpu device), checked against the same expected list as local:cpu.
set -euo pipefail
runner=$1 expected=$2 data=$3
: "${TENSORD_BIN:?TENSORD_BIN is not set (run through meson test)}"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/onnx-remote.XXXXXX")
pid=
cleanup() {
    if [[ -n $pid ]]; then
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    fi
    rm -rf "$TMP"
}
trap cleanup EXIT
: >"$TMP/log"
"${TD_TEST_TENSORD:-$TENSORD_BIN}" --listen 127.0.0.1:0 >"$TMP/log" 2>&1 &
pid=$!
addr=
for ((i = 0; i < 200; i++)); do
    addr=$(sed -n 's/.*listening on \([^ ]*\).*/\1/p' "$TMP/log" | head -n 1)
    [[ -n $addr ]] && break
    kill -0 "$pid" 2>/dev/null || { cat "$TMP/log" >&2; echo "tensord exited" >&2; exit 1; }
    sleep 0.05
done
[[ -n $addr ]] || { cat "$TMP/log" >&2; echo "tensord did not start" >&2; exit 1; }
"$runner" --device "tensord://$addr/cpu" --expected "$expected" "$data"

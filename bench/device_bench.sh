#!/bin/sh
# device_bench.sh — bench/device_bench.c against a fresh tensord with two CPU devices on
# loopback: td_to_device inside the server next to a read + upload through the client, and
# td_connect to a server next to a pool whose other member is dead (BENCHMARKS.md).
# Usage: bench/device_bench.sh BUILD_DIR [--mib N --reps N]
set -eu
build=${1:?usage: bench/device_bench.sh BUILD_DIR [options]}
shift
out=$(mktemp)
trap 'kill "$pid" 2>/dev/null || true; rm -f "$out"' EXIT
date -u
lscpu | grep 'Model name' || true
uptime
"$build/server/tensord" --listen 127.0.0.1:0 --cpu-devices 2 --log-level warn >"$out" &
pid=$!
for _ in $(seq 100); do grep -q 'listening on' "$out" && break; sleep 0.1; done
addr=$(sed -n 's/^listening on //p' "$out")
"$build/bench/device-bench" "$addr" "$@"

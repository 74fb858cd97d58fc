#!/bin/sh
# cpu_bench.sh — bench/cpu_bench.c (tensord on local:cpu, memcpy, OpenBLAS, oneDNN) and
# bench/cpu_torch.py (PyTorch CPU) back to back on this machine, then each tensord row next
# to the PyTorch row of the same name with the ratio of rates (> 1: tensord faster).
# Usage: bench/cpu_bench.sh BUILD_DIR [cpu-bench options, passed to both]
set -eu
build=${1:?usage: bench/cpu_bench.sh BUILD_DIR [options]}
shift
here=$(dirname "$0")
td=$(mktemp)
pt=$(mktemp)
trap 'rm -f "$td" "$pt"' EXIT
date -u
lscpu | grep 'Model name' || true
"$build/bench/cpu-bench" "$@" | tee "$td"
/usr/bin/python3 "$here/cpu_torch.py" "$@" | tee "$pt"
echo "# name  tensord  pytorch  (rates; ratio tensord/pytorch)"
awk 'NR == FNR { if ($1 !~ /^#/) { r[$1] = $4; u[$1] = $5 } next }
     $1 !~ /^#/ && ($1 in r) { printf "%-28s %10s %10s %s  %.2fx\n", $1, $4, r[$1], u[$1], $4 / r[$1] }' \
    "$pt" "$td"

#!/bin/sh
# nn_bench.sh — bench/nn_bench.c (tensord's layer norm on a device, default local:cpu) and
# bench/nn_torch.py (PyTorch CPU, 2 threads) back to back, then each tensord row next to
# PyTorch's with the ratio of rates (> 1: tensord faster).
# Usage: bench/nn_bench.sh BUILD_DIR [--rows N --cols N --reps N --rounds N]
set -eu
build=${1:?usage: bench/nn_bench.sh BUILD_DIR [options]}
shift
here=$(dirname "$0")
td=$(mktemp)
pt=$(mktemp)
trap 'rm -f "$td" "$pt"' EXIT
date -u
lscpu | grep 'Model name' || true
uptime
"$build/bench/nn-bench" "$@" | tee "$td"
/usr/bin/python3 "$here/nn_torch.py" "$@" | tee "$pt"
echo "# name  tensord  pytorch  (GB/s; ratio tensord/pytorch)"
awk 'NR == FNR { if ($1 !~ /^#/) r[$1] = $4; next }
     $1 !~ /^#/ && ($1 in r) { printf "%-28s %10s %10s  %.2fx\n", $1, $4, r[$1], $4 / r[$1] }' \
    "$pt" "$td"

#!/usr/bin/env bash
# p5-on-gpu-host.sh — tensord-bench P5 on the GPU host: one Fashion-MNIST epoch on
# local:cuda:0 next to the same trainer through a tensord on loopback (TCP and a unix
# socket), eager and --graph, at batch 128/1024/4096 x hidden 256/2048, 3 alternated runs
# each (issue 12's "P5 at real sizes"). Needs carry/ from tests/gpu/prepare-carry.sh.
# Run on the GPU host from the repository root (device tool, carry ["carry"]):
#     OUT=$OUT bash tests/gpu/p5-on-gpu-host.sh      # P5_ARGS="--p5-sizes 1024x2048" to narrow
# Results in $OUT: p5.md (the table), p5.log (tensord-bench's stderr), libs.txt.
# The whole run is bounded by $BUDGET seconds (default 420). Exit status: tensord-bench's.
set -u -o pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-/tmp/tensord-p5-out}
mkdir -p "$OUT"
[ -f carry/tensord-gpu.tar.xz ] || { echo "carry/ missing: run tests/gpu/prepare-carry.sh here first" >&2; exit 1; }
. tests/gpu/gpu-host-lib.sh
X=/tmp/tensord-p5-carry
unpack_carry "$X" || { echo "cannot unpack the carry" >&2; exit 1; }
use_carry "$X" "$OUT/libs.txt"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >>"$OUT/libs.txt" 2>&1
# shellcheck disable=SC2086 # P5_ARGS is a list of arguments
timeout "${BUDGET:-420}" "$X/bin/tensord-bench" --only P5 --device cuda:0 \
    --tensord "$X/bin/tensord" --trainer "$X/bin/fashion-mnist" --data "$PWD/carry/fashion-mnist" \
    ${P5_ARGS:-} >"$OUT/p5.md" 2>"$OUT/p5.log"
rc=$?
cat "$OUT/p5.md"
tail -5 "$OUT/p5.log"
exit $rc

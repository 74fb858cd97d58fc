#!/usr/bin/env bash
# scan-repeat-on-gpu-host.sh — is a scan variant deterministic on this GPU? Conformance's
# cumsum/cumprod cases (each case runs twice and compares the bits) on local:cuda:0 under
# each TENSORD_GPU_SCAN_VARIANT of SCAN_VARIANTS (default "3 4": the chained scans), REPEAT
# passes each (default 4), alternated, then scan-check once per variant; "d" is the default
# (TENSORD_GPU_SCAN_VARIANT empty). A variant is
# deterministic here only if every pass passes: the chained scan's NaN bits once depended
# on which block folded a prefix (BENCHMARKS.md, H200 2026-12-07 04:23), so one clean pass
# proves little.
# Run on the GPU host from the repository root (device tool, carry/tensord-gpu.tar.xz):
#     OUT=$OUT bash tests/gpu/scan-repeat-on-gpu-host.sh     # BUDGET=120 seconds
# Appends a line per pass to $OUT/summary.txt; FAIL lines of a failing pass follow it.
# Exit status: 0 when every pass passed.
set -u -o pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-/tmp/tensord-gpu-out}
mkdir -p "$OUT"
SUM=$OUT/summary.txt
start=$(date +%s)
BUDGET=${BUDGET:-120}
. tests/gpu/gpu-host-lib.sh
X=${TMPDIR:-/tmp}/tensord-gpu-scanrep
unpack_carry "$X" || { echo "FAIL unpack carry" | tee -a "$SUM"; exit 1; }
use_carry "$X"
echo "== scan determinism $(date -u +%H:%M:%S) UTC on $(nvidia-smi -L 2>/dev/null | head -1)" | tee -a "$SUM"
fails=0
for p in $(seq "${REPEAT:-4}"); do
    for v in ${SCAN_VARIANTS:-3 4}; do
        if [ $(($(date +%s) - start)) -gt "$BUDGET" ]; then
            echo "pass $p variant $v: skipped (budget)" | tee -a "$SUM"
            continue
        fi
        log=$OUT/scanrep-v$v-p$p.log
        TENSORD_GPU_SCAN_VARIANT=${v#d} timeout 60 "$X/bin/conformance" --target local:cuda:0 \
            --filter cum >"$log" 2>&1
        rc=$?
        [ $rc -ne 0 ] && fails=$((fails + 1))
        echo "pass $p variant $v: $(grep -m1 '^conformance ' "$log" | sed 's/^conformance //') (exit $rc)" | tee -a "$SUM"
        grep -m5 '^FAIL' "$log" | cut -c1-300 | sed 's/^/  /' | tee -a "$SUM"
    done
done
for v in ${SCAN_VARIANTS:-3 4}; do
    TENSORD_GPU_SCAN_VARIANT=${v#d} timeout 60 "$X/bin/scan-check" --device local:cuda:0 \
        >"$OUT/scanrep-check-v$v.log" 2>&1
    rc=$?
    [ $rc -ne 0 ] && fails=$((fails + 1))
    echo "scan-check variant $v: $(tail -1 "$OUT/scanrep-check-v$v.log") (exit $rc)" | tee -a "$SUM"
done
echo "scan determinism: $fails failing step(s)" | tee -a "$SUM"
[ $fails -eq 0 ]

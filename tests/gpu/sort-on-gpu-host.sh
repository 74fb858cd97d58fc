#!/usr/bin/env bash
# sort-on-gpu-host.sh — issue 13's sort row on the GPU host: conformance of every sort,
# argsort, topk and randperm case on local:cuda:0 against local:cpu (bit for bit), then the
# stable sort of 2^24 f32 through local:cuda:0 (gpu-bench --only sort) next to PyTorch's
# torch.sort(stable=True) (bench/gpu_torch.py --sort-only), alternated ROUNDS times.
# Needs carry/tensord-gpu.tar.xz and carry/gpu-bench (tests/gpu/prepare-carry.sh).
# Results: $OUT/sort.md; bounded by $BUDGET s (default 90).
#     OUT=$OUT bash tests/gpu/sort-on-gpu-host.sh
set -u -o pipefail
cd "$(dirname "$0")/../.." || exit 1
ROUNDS=${ROUNDS:-3}
HOST_LD=${LD_LIBRARY_PATH:-} # PyTorch runs with the host's libraries, not the carried ones
. tests/gpu/gpu-host-lib.sh
gpu_host_setup sort 90 || exit 1
rc=0
for f in sort argsort topk randperm; do
    timeout "$(limit 40)" "$X/bin/conformance" --target local:cuda:0 --filter "$f" \
        >"$OUT/conformance-$f.log" 2>&1 || rc=1
    echo "conformance local:cuda:0 --filter $f: $(grep -m1 '^conformance ' "$OUT/conformance-$f.log")" | tee -a "$MD"
    grep -m3 '^FAIL' "$OUT/conformance-$f.log" | cut -c1-300 | tee -a "$MD"
done
for r in $(seq 1 "$ROUNDS"); do
    [ "$(limit 30)" -le 8 ] && break
    timeout "$(limit 30)" "$GPU_BENCH" --device local:cuda:0 --only sort 2>&1 | grep '^sort' |
        sed 's/^/tensord /' | tee -a "$MD" || rc=1
    timeout "$(limit 30)" env LD_LIBRARY_PATH="$HOST_LD" python3 bench/gpu_torch.py --sort-only \
        2>&1 | grep '^sort' | sed 's/^/PyTorch /' | tee -a "$MD" || rc=1
done
echo "sort done in $(($(date +%s) - start)) s, rc $rc" | tee -a "$MD"
exit $rc

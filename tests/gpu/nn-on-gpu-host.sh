#!/usr/bin/env bash
# nn-on-gpu-host.sh — issue 13's GPU benchmark rows next to PyTorch on the same GPU, same
# run: conv2d on five ResNet-50 layer shapes (batch 32; f32 with TF32 off on both sides, and
# bf16), layer norm [8192, 4096] f32 forward and backward dx, scaled dot-product attention
# (batch 8, 16 heads, seq 2048, dim 64; tensord's f32 composite next to PyTorch's f32 and bf16
# flash kernels). Runs after run-on-gpu-host.sh in the same device call (reuses its unpacked
# carry); appends the side-by-side table to $OUT/summary.txt and raw output to $OUT/smoke.log.
#     BUDGET=150 bash tests/gpu/nn-on-gpu-host.sh
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/tensord-gpu-out}
mkdir -p "$OUT"
SUM=$OUT/summary.txt
LOG=$OUT/smoke.log
start=$(date +%s)
BUDGET=${BUDGET:-150}
HOST_LD=${LD_LIBRARY_PATH:-}
. tests/gpu/gpu-host-lib.sh
X=${TMPDIR:-/tmp}/tensord-gpu
[ -x "$X/bin/tensord" ] || unpack_carry "$X" || { echo "FAIL unpack carry" | tee -a "$SUM"; exit 1; }
use_carry "$X"
T=$(mktemp -d)
py() { timeout "$(limit "$1")" env PYTHONUNBUFFERED=1 LD_LIBRARY_PATH="$HOST_LD" python3 "${@:2}"; }
# side by side: rows whose first word (after "tensord"/"torch") matches; ratio = torch ms / ours
pair() { # title ours theirs
    {
        echo "== $1 (ms; x/PT = PyTorch's time / tensord's, above 1: tensord faster)"
        awk 'NR == FNR { if ($1 !~ /^#/) { sub(/^(tensord|torch) +/, ""); t[$1 " " $2 " " $3] = $0 } next }
             $1 !~ /^#/ { line = $0; sub(/^(tensord|torch) +/, "", line); split(line, f, / +/);
                          key = f[1] " " f[2] " " f[3]; if (!(key in t)) next
                          n = split(t[key], g, / +/); for (i = 1; i <= n; i++) if (g[i] == "ms") pm = g[i - 1]
                          m = split(line, h, / +/); for (i = 1; i <= m; i++) if (h[i] == "ms") om = h[i - 1]
                          printf "  %-36s tensord %10s ms   PyTorch %10s ms   x/PT %.2f\n", key, om, pm, pm / om }' \
            "$3" "$2"
    } | tee -a "$SUM"
}
for dt in f32 bf16; do
    timeout "$(limit 60)" "$X/bin/conv-bench" local:cuda:0 5 "$dt" >"$T/conv-$dt" 2>&1
    py 60 bench/conv_torch.py 5 cuda "$dt" >"$T/conv-torch-$dt" 2>&1
    { echo "== conv $dt"; cat "$T/conv-$dt" "$T/conv-torch-$dt"; } >>"$LOG"
    pair "conv2d ResNet-50 shapes, batch 32, $dt" "$T/conv-$dt" "$T/conv-torch-$dt"
done
timeout "$(limit 40)" "$X/bin/nn-bench" --device local:cuda:0 >"$T/ln" 2>&1
py 40 bench/nn_torch.py --device cuda >"$T/ln-torch" 2>&1
{ echo "== layer norm"; cat "$T/ln" "$T/ln-torch"; } >>"$LOG"
awk 'NR == FNR { if ($1 !~ /^#/) pt[$1] = $2; next }
     $1 !~ /^#/ && ($1 in pt) { printf "  %-36s tensord %10s ms   PyTorch %10s ms   x/PT %.2f\n", $1, $2, pt[$1], pt[$1] / $2 }' \
    "$T/ln-torch" "$T/ln" | { echo "== layer norm [8192, 4096] on cuda:0"; cat; } | tee -a "$SUM"
timeout "$(limit 60)" "$X/bin/attn-bench" --device local:cuda:0 >"$T/attn" 2>&1
py 60 bench/attn_torch.py --device cuda >"$T/attn-torch" 2>&1
{ echo "== attention"; cat "$T/attn" "$T/attn-torch"; } >>"$LOG"
{ echo "== attention [8, 16, 2048, 64] on cuda:0 (ms)"; grep -h '^attention' "$T/attn" "$T/attn-torch" | sed 's/^/  /'; } | tee -a "$SUM"
rm -rf "$T"
echo "nn benchmarks done in $(($(date +%s) - start)) s" | tee -a "$SUM"

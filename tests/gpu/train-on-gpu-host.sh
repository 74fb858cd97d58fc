#!/usr/bin/env bash
# train-on-gpu-host.sh — issue 15's training throughput on one GPU next to PyTorch eager:
# the two examples (fashion-mnist --model cnn, fortune-lm in f32 and --bf16) in process on
# cuda:0, through a tensord on loopback (session cuda:0), and their PyTorch equivalents
# (bench/train_torch.py: same architecture, initialisation scheme, batches, optimizer and
# schedule) on the same GPU. Appends a table to $OUT/summary.txt and every run's output to
# $OUT/smoke.log (the device tool returns at most 8 files; run-on-gpu-host.sh writes 8).
#
# Throughput as the examples define it: cnn, images / wall seconds of the last epoch (its
# "epoch N/N ... img/s" line; train_torch.py's the same way); lm, tokens per second over the
# steps after the first --eval-every window, evaluation excluded (fortune-lm's per-evaluation
# tok/s lines combined: (sum of steps) / (sum of steps / tok/s); train_torch.py --warmup-steps
# EVAL_EVERY times the same steps). Ratios: local/torch = tensord in process / PyTorch
# (above 1: tensord faster), remote/local = through the server / in process.
#
# Needs carry/tensord-gpu.tar.xz (bin/tensord, bin/fashion-mnist, bin/fortune-lm),
# carry/fashion-mnist/ and carry/fortunes.tar.xz (or carry/fortunes/: the fortune files), and a
# python3 with PyTorch and numpy on the host. Every step has its own time limit, capped by
# what is left of BUDGET seconds; steps that would start with less than MIN_STEP seconds
# left are skipped and said so.
#     BUDGET=240 bash tests/gpu/train-on-gpu-host.sh
# Knobs (environment): CNN_EPOCHS (1), LM_STEPS (200), LM_EVAL_EVERY (50), LM_LAYERS (2),
# LM_DIM (128), LM_HEADS (4), LM_CONTEXT (64), LM_BATCH (32), TORCH_ATTENTION (sdpa:
# PyTorch's fused kernel; math: the composite tensord runs), FASHION_MNIST_BIN,
# FORTUNE_LM_BIN (default: the carried bin/), FASHION_MNIST_DATA, FORTUNES_DIR, PYTHON.
set -u -o pipefail
cd "$(dirname "$0")/../.." || exit 1
ROOT=$PWD
OUT=${OUT:-/tmp/tensord-gpu-out}
mkdir -p "$OUT"
SUM=$OUT/summary.txt
LOG=$OUT/smoke.log
note() { echo "$*" | tee -a "$SUM"; }
start=$(date +%s)
BUDGET=${BUDGET:-240}
MIN_STEP=${MIN_STEP:-15}
HOST_LD=${LD_LIBRARY_PATH:-}
PYTHON=${PYTHON:-python3}
. tests/gpu/gpu-host-lib.sh
X=${TMPDIR:-/tmp}/tensord-gpu
[ -x "$X/bin/tensord" ] || unpack_carry "$X" || { note "FAIL unpack carry"; exit 1; }
use_carry "$X"
FM_BIN=${FASHION_MNIST_BIN:-$X/bin/fashion-mnist}
LM_BIN=${FORTUNE_LM_BIN:-$X/bin/fortune-lm}
FM_DATA=${FASHION_MNIST_DATA:-$ROOT/carry/fashion-mnist}
# The fortunes: FORTUNES_DIR, else carry/fortunes.tar.xz (prepare-carry.sh packs fortunes/),
# else carry/fortunes/, else the host's own.
FORTUNES=${FORTUNES_DIR:-}
if [ -z "$FORTUNES" ] && [ -f carry/fortunes.tar.xz ]; then
    FT=${TMPDIR:-/tmp}/fortunes-data
    rm -rf "$FT" && mkdir -p "$FT" &&
        { tar -C "$FT" -xJf carry/fortunes.tar.xz 2>/dev/null ||
              python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
                  carry/fortunes.tar.xz "$FT"; } &&
        FORTUNES=$FT/fortunes
fi
for d in "$ROOT/carry/fortunes" /usr/share/games/fortunes; do
    [ -z "$FORTUNES" ] && [ -d "$d" ] && FORTUNES=$d
done
FORTUNES=${FORTUNES:-$ROOT/carry/fortunes}
CNN_EPOCHS=${CNN_EPOCHS:-1}
LM_STEPS=${LM_STEPS:-200}
LM_EVAL=${LM_EVAL_EVERY:-50}
TORCH_ATTENTION=${TORCH_ATTENTION:-sdpa}
LM_SHAPE=(--layers "${LM_LAYERS:-2}" --dim "${LM_DIM:-128}" --heads "${LM_HEADS:-4}"
          --context "${LM_CONTEXT:-64}" --batch "${LM_BATCH:-32}")
T=$(mktemp -d)
SERVER_PID=""
trap 'stop_tensord; rm -rf "$T"' EXIT

# run_step LABEL SECONDS OUTFILE COMMAND...: COMMAND under timeout (capped by the budget),
# its output in OUTFILE and the log; a PASS/FAIL/SKIP line. Returns COMMAND's status (1
# when skipped).
run_step() {
    local label=$1 f=$3 left secs r
    secs=$(limit "$2")
    shift 3
    : >"$f"
    left=$((BUDGET - ($(date +%s) - start)))
    if [ "$left" -lt "$MIN_STEP" ]; then
        note "SKIP $label: budget spent ($left s of $BUDGET s left)"
        return 1
    fi
    echo "== $label (limit $secs s): $*" >>"$LOG"
    timeout -k 5 "$secs" "$@" >"$f" 2>&1
    r=$?
    cat "$f" >>"$LOG"
    case $r in
    0) note "PASS $label: $(tail -1 "$f")" ;;
    124 | 137) note "FAIL $label: timed out after $secs s" ;;
    *) note "FAIL $label (exit $r): $(tail -1 "$f")" ;;
    esac
    return $r
}
# PyTorch with the host's own library path (the carried libraries are not for it).
PY=(env PYTHONUNBUFFERED=1 LD_LIBRARY_PATH="$HOST_LD" "$PYTHON")

# Parsers (stdout of one run in a file; print nothing when the value is absent).
# fashion-mnist / train_torch.py cnn: img/s of the last "epoch N/M  loss L  S s  R img/s".
cnn_ips() {
    awk '/^epoch [0-9]+\/[0-9]+  loss [^ ]+  [0-9.]+ s  [0-9]+ img\/s/ { v = $(NF - 1) }
         END { if (v != "") print v }' "$1"
}
# fortune-lm: "step N/M  train loss A  val loss B  bpc C  R tok/s" lines after the first,
# combined by time (each line's R covers the steps since the previous line).
lm_tps() {
    awk '/^step [0-9]+\/[0-9]+  train loss .* tok\/s$/ {
             split($2, a, "/"); w = a[1] - prev; prev = a[1]
             if (++k > 1 && $(NF - 1) > 0) { sw += w; st += w / $(NF - 1) }
         }
         END { if (st > 0) printf "%.0f\n", sw / st }' "$1"
}
# train_torch.py: "torch cnn: img/s X ..." / "torch lm: tokens/s X ...".
torch_val() {
    awk -v k="$2" '$1 == "torch" && $2 == k ":" { v = $4 } END { if (v != "") print v }' "$1"
}

note "== training throughput on cuda:0, tensord vs PyTorch eager (budget $BUDGET s)"
start_tensord "$X/bin/tensord" "$T/server.log"
ADDR=$SERVER_ADDR
if [ -z "$ADDR" ]; then
    note "FAIL tensord start (its log is in smoke.log)"
    cat "$T/server.log" >>"$LOG"
fi
REMOTE=tensord://$ADDR/cuda:0

declare -A V # V[row,side] = throughput
ROWS=()

# ---- fashion-mnist --model cnn ----
ROWS+=("cnn f32")
if [ -d "$FM_DATA" ]; then
    fm=(--model cnn --epochs "$CNN_EPOCHS" --data "$FM_DATA")
    run_step "fashion-mnist cnn local:cuda:0" 60 "$T/cnn-local" \
        "$FM_BIN" --device local:cuda:0 "${fm[@]}"
    V["cnn f32,local"]=$(cnn_ips "$T/cnn-local")
    if [ -n "$ADDR" ]; then
        run_step "fashion-mnist cnn $REMOTE" 90 "$T/cnn-remote" \
            "$FM_BIN" --device "$REMOTE" "${fm[@]}"
        V["cnn f32,remote"]=$(cnn_ips "$T/cnn-remote")
    fi
    run_step "train_torch.py cnn cuda" 60 "$T/cnn-torch" \
        "${PY[@]}" bench/train_torch.py cnn --epochs "$CNN_EPOCHS" --data "$FM_DATA" \
        --device cuda
    V["cnn f32,torch"]=$(torch_val "$T/cnn-torch" cnn)
else
    note "SKIP cnn: no Fashion-MNIST data at $FM_DATA"
fi

# ---- fortune-lm, bf16 matmuls then f32 ----
lm=(--steps "$LM_STEPS" --eval-every "$LM_EVAL" "${LM_SHAPE[@]}")
for variant in bf16 f32; do
    row="lm $variant"
    ROWS+=("$row")
    flag=()
    [ "$variant" = bf16 ] && flag=(--bf16)
    if [ ! -d "$FORTUNES" ]; then
        note "SKIP $row: no fortunes at $FORTUNES"
        continue
    fi
    if [ -x "$LM_BIN" ]; then
        run_step "fortune-lm $variant local:cuda:0" 40 "$T/lm-$variant-local" \
            "$LM_BIN" --device local:cuda:0 --data "$FORTUNES" --sample 0 "${lm[@]}" "${flag[@]}"
        V["$row,local"]=$(lm_tps "$T/lm-$variant-local")
        if [ -n "$ADDR" ]; then
            run_step "fortune-lm $variant $REMOTE" 40 "$T/lm-$variant-remote" \
                "$LM_BIN" --device "$REMOTE" --data "$FORTUNES" --sample 0 "${lm[@]}" "${flag[@]}"
            V["$row,remote"]=$(lm_tps "$T/lm-$variant-remote")
        fi
    else
        note "SKIP fortune-lm $variant: no executable $LM_BIN"
    fi
    run_step "train_torch.py lm $variant cuda" 40 "$T/lm-$variant-torch" \
        "${PY[@]}" bench/train_torch.py lm --text "$FORTUNES" --warmup-steps "$LM_EVAL" \
        --attention "$TORCH_ATTENTION" "${lm[@]}" "${flag[@]}" --device cuda
    V["$row,torch"]=$(torch_val "$T/lm-$variant-torch" lm)
done
if [ -n "$ADDR" ]; then
    stop_tensord
    { echo "== tensord log"; cat "$T/server.log"; } >>"$LOG"
fi

# ---- the table ----
ratio() {
    awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", a / b; else printf "-" }'
}
fmt="  %-6s %-8s %14s %15s %12s %12s %13s\n"
{
    echo "== training throughput on cuda:0 (cnn: img/s of epoch $CNN_EPOCHS;" \
         "lm: tokens/s of steps $((LM_EVAL + 1))-$LM_STEPS, evaluation excluded)"
    # shellcheck disable=SC2059 # one format for the header and the rows
    printf "$fmt" model variant "tensord local" "tensord remote" torch local/torch remote/local
    for row in "${ROWS[@]}"; do
        l=${V["$row,local"]:-} r=${V["$row,remote"]:-} p=${V["$row,torch"]:-}
        # shellcheck disable=SC2059
        printf "$fmt" "${row%% *}" "${row#* }" "${l:--}" "${r:--}" "${p:--}" \
            "$(ratio "$l" "$p")" "$(ratio "$r" "$l")"
    done
} | tee -a "$SUM"
note "training comparison done in $(($(date +%s) - start)) s"

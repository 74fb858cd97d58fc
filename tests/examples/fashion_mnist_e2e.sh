#!/usr/bin/env bash
# The trainer against a real tensord (over TCP and over a unix socket) and against the
# in-process engine, same seed: one epoch on 2,000 images. The loss must fall and every run
# must print the same summary line (seconds aside): the engine is deterministic wherever it
# runs. Then batches large enough for the blob offer (marked TD_WRITE_FRESH by the trainer),
# scaled on the host and uploaded as f32 (--upload-f32) over TCP, give the in-process weights
# of the default u8 uploads scaled on the device, bit for bit.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

start_server
ARGS=(--data "$DATA" --epochs 1 --limit-train 2000 --limit-test 2000 --seed 7)
"$TRAINER" --device "tensord://$SERVER_ADDR/cpu" "${ARGS[@]}" >"$TMP/remote.out" ||
    fail "remote run failed: $(cat "$TMP/remote.out")"
"$TRAINER" --device local:cpu "${ARGS[@]}" >"$TMP/local.out" ||
    fail "local run failed: $(cat "$TMP/local.out")"
cat "$TMP/remote.out"

summary_re='^test accuracy: 0\.[0-9]{4}  final loss: [0-9]+\.[0-9]{6}  epochs: 1  seconds: [0-9]+\.[0-9]$'
remote=$(tail -n 1 "$TMP/remote.out")
local_=$(tail -n 1 "$TMP/local.out")
[[ $remote =~ $summary_re ]] || fail "remote summary line malformed: '$remote'"
[[ $local_ =~ $summary_re ]] || fail "local summary line malformed: '$local_'"
[[ ${remote%%  seconds:*} == "${local_%%  seconds:*}" ]] ||
    fail "remote and local differ: '$remote' vs '$local_'"

# Progress lines look like "epoch 1/1  step 2/16  loss 2.012345  9000 img/s".
losses=$(sed -n 's/^epoch 1\/1  step [0-9]*\/[0-9]*  loss \([0-9.]*\) .*/\1/p' "$TMP/remote.out")
[[ $(wc -l <<<"$losses") -ge 2 ]] || fail "expected several progress lines"
first=$(head -n 1 <<<"$losses")
last=$(tail -n 1 <<<"$losses")
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a) }' ||
    fail "loss did not decrease: first $first, last $last"
grep -q '^epoch 1/1  loss [0-9.]*  [0-9.]* s' "$TMP/remote.out" || fail "no epoch line"

acc=$(sed -n 's/^test accuracy: \([0-9.]*\) .*/\1/p' <<<"$remote")
awk -v a="$acc" 'BEGIN { exit !(a > 0.5) }' || fail "accuracy $acc is not above 0.5"

# The same through a unix socket.
start_server "unix:$TMP/tensord.sock"
[[ $SERVER_ADDR == "unix:$TMP/tensord.sock" ]] || fail "unexpected address '$SERVER_ADDR'"
"$TRAINER" --device "$SERVER_ADDR/cpu" "${ARGS[@]}" >"$TMP/unix.out" ||
    fail "unix-socket run failed: $(cat "$TMP/unix.out")"
unix=$(tail -n 1 "$TMP/unix.out")
[[ ${unix%%  seconds:*} == "${local_%%  seconds:*}" ]] ||
    fail "unix-socket and local differ: '$unix' vs '$local_'"
# Batches above the 1 MiB blob-offer threshold (1024 images as f32 with --upload-f32: 3.2 MB),
# which the trainer marks TD_WRITE_FRESH, with background sends on: the same weights, bit for
# bit, as in-process with the default u8 uploads (0.8 MB a batch) that the device scales.
start_server
BIG=(--data "$DATA" --epochs 1 --limit-train 4096 --limit-test 1000 --seed 7 --batch 1024)
TENSORD_WRITE_COPY_MAX=16777216 "$TRAINER" --device "tensord://$SERVER_ADDR/cpu" "${BIG[@]}" \
    --upload-f32 --save "$TMP/big-remote.safetensors" --timings --reports 2 >"$TMP/big-remote.out" \
    2>"$TMP/big-remote.err" ||
    fail "remote batch-1024 run failed: $(cat "$TMP/big-remote.out" "$TMP/big-remote.err")"
# --timings (on stderr; it changes nothing else, the weights are compared below): one line for
# the epoch whose phases add up to its total (each rounded to 0.1 ms), and the 2 loss reads
# that --reports 2 asks for (4 steps: one read every 2 steps). The local run reads as often:
# the saved file's metadata holds the final loss, whose f32 sums on the device follow the
# reads.
timing=$(grep -E '^fashion-mnist: timings epoch 1: ' "$TMP/big-remote.err") ||
    fail "--timings printed no line for epoch 1: '$(cat "$TMP/big-remote.err")'"
awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+\.[0-9]$/) v[n++] = $i }
     END { s = v[1] + v[2] + v[3] + v[4] + v[5]; d = s - v[0]; if (d < 0) d = -d
           exit !(n == 6 && d <= 0.35 && v[0] > 0) }' <<<"$timing" ||
    fail "--timings: the phases do not add up to the epoch: '$timing'"
[[ $timing == *"(2 reads)"* ]] || fail "--timings: expected 2 loss reads: '$timing'"
[[ $(grep -c '^epoch 1/1  step ' "$TMP/big-remote.out") == 2 ]] ||
    fail "--reports 2: expected 2 progress lines: '$(cat "$TMP/big-remote.out")'"
"$TRAINER" --device local:cpu "${BIG[@]}" --reports 2 --save "$TMP/big-local.safetensors" \
    >"$TMP/big-local.out" || fail "local batch-1024 run failed: $(cat "$TMP/big-local.out")"
big_remote=$(tail -n 1 "$TMP/big-remote.out")
big_local=$(tail -n 1 "$TMP/big-local.out")
[[ ${big_remote%%  seconds:*} == "${big_local%%  seconds:*}" ]] ||
    fail "batch 1024: remote and local differ: '$big_remote' vs '$big_local'"
cmp -s "$TMP/big-remote.safetensors" "$TMP/big-local.safetensors" ||
    fail "batch 1024: remote (f32 uploads) and local (u8 uploads) weights differ"
# The default u8 batches above the offer threshold too (2048 images: 1.6 MB), offered to the
# blob store (--offer-batches): the same weights as in-process.
U8=(--data "$DATA" --epochs 1 --limit-train 4096 --limit-test 1000 --seed 9 --batch 2048 --reports 1)
"$TRAINER" --device "tensord://$SERVER_ADDR/cpu" "${U8[@]}" --offer-batches \
    --save "$TMP/u8-remote.safetensors" >"$TMP/u8-remote.out" ||
    fail "remote batch-2048 run failed: $(cat "$TMP/u8-remote.out")"
"$TRAINER" --device local:cpu "${U8[@]}" --save "$TMP/u8-local.safetensors" >"$TMP/u8-local.out" ||
    fail "local batch-2048 run failed: $(cat "$TMP/u8-local.out")"
cmp -s "$TMP/u8-remote.safetensors" "$TMP/u8-local.safetensors" ||
    fail "batch 2048: remote (u8 uploads, offered) and local weights differ"
echo "ok: loss $first -> $last; tcp == unix == local: ${remote%%  seconds:*}; batch 1024" \
    "tcp f32 uploads == local u8 uploads, weights bit for bit: ${big_local%%  seconds:*};" \
    "batch 2048 u8 offered over tcp == local"

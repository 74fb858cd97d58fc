#!/usr/bin/env bash
# The trainer with --graph (one training step captured and replayed) must give the same bits
# as eager mode: in-process and against a real tensord, the saved weights are byte-identical
# to an eager in-process run with the same seed. 2,000 images in batches of 128 end with a
# short batch of 80, so two graphs are captured.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

start_server
ARGS=(--data "$DATA" --epochs 1 --limit-train 2000 --limit-test 1000 --seed 7)
"$TRAINER" --device local:cpu "${ARGS[@]}" --save "$TMP/eager.st" >"$TMP/eager.out" ||
    fail "eager run failed: $(cat "$TMP/eager.out")"
"$TRAINER" --device local:cpu "${ARGS[@]}" --graph --save "$TMP/local.st" >"$TMP/local.out" ||
    fail "local --graph run failed: $(cat "$TMP/local.out")"
"$TRAINER" --device "tensord://$SERVER_ADDR/cpu" "${ARGS[@]}" --graph --save "$TMP/remote.st" \
    >"$TMP/remote.out" || fail "remote --graph run failed: $(cat "$TMP/remote.out")"

eager=$(tail -n 1 "$TMP/eager.out")
for run in local remote; do
    line=$(tail -n 1 "$TMP/$run.out")
    [[ ${line%%  seconds:*} == "${eager%%  seconds:*}" ]] ||
        fail "$run --graph summary differs from eager: '$line' vs '$eager'"
    cmp -s "$TMP/eager.st" "$TMP/$run.st" || fail "$run --graph weights differ from eager"
done
echo "ok: eager == local --graph == remote --graph (weights byte-identical): ${eager%%  seconds:*}"

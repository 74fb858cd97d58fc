#!/usr/bin/env bash
# The trainer on vulkan:0 (lavapipe in CI), in-process and through a real tensord, against
# local:cpu with the same seed: one epoch on 256 images. The Vulkan backend runs every op the
# trainer records (matmul, elementwise, reductions, the lowered softmax, casts, compares) and
# must print the CPU's summary line exactly (seconds aside). Skipped (77) on a host without a
# Vulkan device.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ARGS=(--data "$DATA" --epochs 1 --limit-train 256 --limit-test 256 --seed 7)
vulkan_run "$TMP/vk.out" "${ARGS[@]}"
"$TRAINER" --device local:cpu "${ARGS[@]}" >"$TMP/cpu.out" || fail "local:cpu run failed"
start_server
"$TRAINER" --device "tensord://$SERVER_ADDR/vulkan:0" "${ARGS[@]}" >"$TMP/remote.out" ||
    fail "remote vulkan:0 run failed: $(cat "$TMP/remote.out")"

summary_re='^test accuracy: 0\.[0-9]{4}  final loss: [0-9]+\.[0-9]{6}  epochs: 1  seconds: [0-9]+\.[0-9]$'
vk=$(tail -n 1 "$TMP/vk.out")
cpu=$(tail -n 1 "$TMP/cpu.out")
remote=$(tail -n 1 "$TMP/remote.out")
[[ $vk =~ $summary_re ]] || fail "vulkan summary line malformed: '$vk'"
[[ ${vk%%  seconds:*} == "${cpu%%  seconds:*}" ]] ||
    fail "vulkan:0 and cpu differ: '$vk' vs '$cpu'"
[[ ${remote%%  seconds:*} == "${cpu%%  seconds:*}" ]] ||
    fail "remote vulkan:0 and cpu differ: '$remote' vs '$cpu'"
echo "ok: local vulkan:0 == remote vulkan:0 == local cpu: ${vk%%  seconds:*}"

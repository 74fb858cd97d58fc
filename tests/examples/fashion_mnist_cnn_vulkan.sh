#!/usr/bin/env bash
# --model cnn on vulkan:0 (lavapipe in CI) against local:cpu with the same seed, on a tiny
# slice (16 training images in batches of 8, 16 test images: the CNN runs about 100 times
# slower on lavapipe than on the CPU). Every op of the model runs on the Vulkan backend
# (conv and its two gradients, batch norm and its backward op, max pool with indices and
# its gradient, dropout, Adam's f64 pow). Both print the same test accuracy and a final loss
# within 1e-5: the pools, norms, dropout masks and elementwise ops follow the CPU's order,
# but the convolutions sum their products in their own order (inside the conformance
# suite's conv bound), so the loss may differ in its last printed digit. Skipped (77) on a
# host without a Vulkan device.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ARGS=(--data "$DATA" --model cnn --epochs 1 --limit-train 16 --limit-test 16 --batch 8 --seed 3)
vulkan_run "$TMP/vk.out" "${ARGS[@]}"
"$TRAINER" --device local:cpu "${ARGS[@]}" >"$TMP/cpu.out" || fail "local:cpu cnn run failed"

summary_re='^test accuracy: (0\.[0-9]{4})  final loss: ([0-9]+\.[0-9]{6})  epochs: 1  seconds: [0-9]+\.[0-9]$'
vk=$(tail -n 1 "$TMP/vk.out")
cpu=$(tail -n 1 "$TMP/cpu.out")
[[ $vk =~ $summary_re ]] || fail "vulkan summary line malformed: '$vk'"
vk_acc=${BASH_REMATCH[1]} vk_loss=${BASH_REMATCH[2]}
[[ $cpu =~ $summary_re ]] || fail "cpu summary line malformed: '$cpu'"
cpu_acc=${BASH_REMATCH[1]} cpu_loss=${BASH_REMATCH[2]}
[[ $vk_acc == "$cpu_acc" ]] || fail "accuracy: vulkan:0 $vk_acc, cpu $cpu_acc"
awk -v a="$vk_loss" -v b="$cpu_loss" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-5) }' ||
    fail "final loss: vulkan:0 $vk_loss, cpu $cpu_loss (more than 1e-5 apart)"
echo "ok: cnn on vulkan:0 (${vk%%  seconds:*}) matches cpu (${cpu%%  seconds:*})"

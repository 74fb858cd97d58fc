#!/usr/bin/env bash
# group_conv.sh TENSORCTL MODELS-DIR: ONNX Conv with group > 1 (group 2 with bias, strides and
# asymmetric pads, then depthwise with dilation: models/conv_group.onnx from gen_group_conv.py)
# through `tensorctl run` on local:cpu and through a real tensord: both within 1e-5 of the
# largest output of PyTorch's float64 result (models/conv_group_y.npy), and the same bytes locally and
# remotely. The ONNX 1.12 node tests have no grouped Conv.
set -euo pipefail
tensorctl=$1 models=$2
py=/usr/bin/python3
"$py" -c 'import numpy' 2>/dev/null || { echo "SKIP: numpy for /usr/bin/python3 is not installed"; exit 77; }
: "${TENSORD_BIN:?TENSORD_BIN is not set (run through meson test)}"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/group-conv.XXXXXX")
pid=
cleanup() {
    if [[ -n $pid ]]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
    rm -rf "$TMP"
}
trap cleanup EXIT
: >"$TMP/log" # exists before the background server opens it: the loop below reads it at once
"${TD_TEST_TENSORD:-$TENSORD_BIN}" --listen 127.0.0.1:0 >"$TMP/log" 2>&1 &
pid=$!
addr=
for ((i = 0; i < 200; i++)); do
    addr=$(sed -n 's/.*listening on \([^ ]*\).*/\1/p' "$TMP/log" | head -n 1)
    [[ -n $addr ]] && break
    kill -0 "$pid" 2>/dev/null || { cat "$TMP/log" >&2; echo "tensord exited" >&2; exit 1; }
    sleep 0.05
done
[[ -n $addr ]] || { cat "$TMP/log" >&2; echo "tensord did not start" >&2; exit 1; }
"$tensorctl" run "$models/conv_group.onnx" --device local:cpu --input "x=$models/conv_group_x.npy" \
    --output-dir "$TMP/local"
"$tensorctl" run "$models/conv_group.onnx" --device "tensord://$addr/cpu" \
    --input "x=$models/conv_group_x.npy" --output-dir "$TMP/remote"
cmp "$TMP/local/y.npy" "$TMP/remote/y.npy" || { echo "FAIL: local and remote outputs differ"; exit 1; }
"$py" - "$TMP/local/y.npy" "$models/conv_group_y.npy" <<'PY'
import sys
import numpy as np
got, want = np.load(sys.argv[1]), np.load(sys.argv[2])
assert got.shape == want.shape and got.dtype == np.float32, (got.shape, got.dtype)
# f32 sums of a few dozen products: errors of a few ulp of the largest output; a wrong
# channel grouping or padding gives errors of the outputs' own size
err = np.abs(got.astype(np.float64) - want).max() / np.abs(want).max()
print("max error %.3g of the largest |output| over %d elements" % (err, got.size))
sys.exit(0 if err <= 1e-5 else 1)
PY
echo "ok: grouped and depthwise Conv match PyTorch, local == remote"

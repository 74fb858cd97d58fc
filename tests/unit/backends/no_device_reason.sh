#!/usr/bin/env bash
# no_device_reason.sh CONFORMANCE: on a host where the CUDA module loads but finds no GPU (the
# build machines: no driver), the info line names the runtime's reason, as the README says:
# "backend cuda: no devices (cudaGetDeviceCount: <the runtime's message> (<its code>))".
# Skipped (77) on a host where the module lists devices.
set -uo pipefail
out=$(TENSORD_LOG_LEVEL=info "$1" --require-backend cuda --target local:cpu --filter no-such-case 2>&1)
rc=$?
echo "$out"
[ "$rc" -eq 0 ] || { echo "conformance exited $rc"; exit 1; }
if grep -q '^device cuda:' <<<"$out"; then
    echo "this host has a CUDA device: nothing to check"
    exit 77
fi
line=$(grep -m1 'backend cuda: no devices' <<<"$out")
[ -n "$line" ] || { echo "no 'backend cuda: no devices' line at info level"; exit 1; }
grep -qE 'backend cuda: no devices \(cudaGetDeviceCount: [^()]+ \(-?[0-9]+\)\)$' <<<"$line" || {
    echo "the line does not give the runtime's reason: $line"
    exit 1
}
echo "ok: $line"

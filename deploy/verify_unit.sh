#!/usr/bin/env bash
# verify_unit.sh UNIT TENSORD: systemd-analyze verify of the unit meson configured, with its
# tensord paths pointed at TENSORD (verify checks that ExecStart= programs exist). Exit 77
# (skipped) without systemd-analyze.
set -euo pipefail
unit=$1 bin=$(realpath "$2")
command -v systemd-analyze >/dev/null || { echo "skipping: no systemd-analyze"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sed -e "s|^\(ExecStart[A-Za-z]*=\)[^ ]*/tensord |\1$bin |" "$unit" >"$tmp/tensord.service"
grep -q "^ExecStart=$bin " "$tmp/tensord.service" || { echo "FAIL: no ExecStart= line to point at $bin"; exit 1; }
out=$(systemd-analyze verify "$tmp/tensord.service" 2>&1) || { echo "FAIL: $out"; exit 1; }
# verify exits 0 on some problems and only prints them: any output is a finding
[ -z "$out" ] || { echo "FAIL: systemd-analyze verify said: $out"; exit 1; }
echo "ok: systemd-analyze verify found nothing in the unit"

#!/usr/bin/env bash
# vulkan_pcache.sh CONFORMANCE: the Vulkan backend's on-disk pipeline cache
# (backends/vulkan/vk_pcache.c). A run with TENSORD_VULKAN_CACHE=DIR leaves one file there
# whose header is the Vulkan spec's (header size 32, version 1, this device's vendor and
# device IDs, a 16-byte UUID); a run that finds a corrupt, truncated or foreign file there
# says so at info level ("pipeline cache ... ignored (reason)"), passes all the same, and
# leaves a valid file behind; TENSORD_VULKAN_CACHE=off writes nothing. Skipped (77) on a
# host without a Vulkan device.
set -uo pipefail
conf=$1
dir=$(mktemp -d "${TMPDIR:-/tmp}/td-pcache.XXXXXX")
trap 'rm -rf "$dir"' EXIT
run() { # run CACHE: one small case on every vulkan device, log at info level
    TENSORD_LOG_LEVEL=info TENSORD_VULKAN_CACHE=$1 "$conf" --target-kind vulkan \
        --allow-unsupported --filter 'add f32 [7] [7]' 2>&1
}
out=$(run "$dir")
rc=$?
[ "$rc" -eq 0 ] || { echo "$out"; echo "conformance exited $rc"; exit 1; }
if ! grep -q '^device vulkan:' <<<"$out"; then
    echo "$out"
    echo "no vulkan device on this host: nothing to check"
    exit 77
fi
file=$(ls "$dir"/vulkan-*.bin 2>/dev/null | head -n 1)
[ -n "$file" ] || { echo "$out"; echo "no cache file in $dir"; exit 1; }
# little-endian u32 words 0 (header size) and 1 (header version)
check_header() {
    local size=$(stat -c %s "$1") hs hv
    [ "$size" -ge 32 ] || { echo "$1: $size bytes, shorter than the header"; return 1; }
    hs=$(od -An -tu4 -N4 "$1" | tr -d ' ')
    hv=$(od -An -tu4 -j4 -N4 "$1" | tr -d ' ')
    [ "$hs" -ge 32 ] && [ "$hs" -le "$size" ] && [ "$hv" -eq 1 ] ||
        { echo "$1: header size $hs, version $hv"; return 1; }
}
check_header "$file" || exit 1
echo "ok: $(basename "$file") written, $(stat -c %s "$file") bytes"

corrupt() { # corrupt HOW: garbage, truncated, foreign (another vendor ID)
    case $1 in
    garbage) head -c 4096 /dev/urandom >"$file" ;;
    truncated) head -c 20 "$dir/good" >"$file" ;;
    foreign) cp "$dir/good" "$file"; printf '\xef\xbe\xad\xde' |
        dd of="$file" bs=1 seek=8 conv=notrunc status=none ;;
    esac
}
cp "$file" "$dir/good"
for how in garbage truncated foreign; do
    corrupt "$how"
    out=$(run "$dir")
    rc=$?
    [ "$rc" -eq 0 ] || { echo "$out"; echo "$how cache: conformance exited $rc"; exit 1; }
    line=$(grep -m1 'pipeline cache .* ignored (' <<<"$out")
    [ -n "$line" ] || { echo "$out"; echo "$how cache: no 'ignored' info line"; exit 1; }
    grep -q 'passed, 0 failed' <<<"$out" || { echo "$out"; echo "$how cache: cases failed"; exit 1; }
    check_header "$file" || { echo "$how cache: not replaced by a valid one"; exit 1; }
    echo "ok: $how: ${line#*vulkan:}"
done

off=$(mktemp -d "$dir/off.XXXXXX")
out=$(HOME=$off XDG_CACHE_HOME=$off run off)
# (the driver may keep a cache of its own there, e.g. Mesa's mesa_shader_cache)
[ -z "$(find "$off" -name 'vulkan-*.bin')" ] ||
    { echo "TENSORD_VULKAN_CACHE=off wrote a cache file"; exit 1; }
echo "ok: TENSORD_VULKAN_CACHE=off writes nothing"

# shellcheck shell=bash
# gpu-host-lib.sh — what the *-on-gpu-host.sh scripts all do on the GPU host: unpack the
# carried binaries, point the dynamic linker at them and at the host's CUDA libraries,
# start/stop a tensord on loopback, keep to a time budget, and (gpu_host_setup) the preamble
# of the scripts that write one $OUT/NAME.md. Sourced, not run.

# unpack_carry DIR: carry/tensord-gpu.tar.xz into a fresh DIR (Python's tarfile when tar
# lacks xz). Returns non-zero on failure.
unpack_carry() {
    rm -rf "$1" && mkdir -p "$1" || return 1
    tar -C "$1" -xJf carry/tensord-gpu.tar.xz 2>/dev/null ||
        python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
            carry/tensord-gpu.tar.xz "$1"
}

# use_carry DIR [LOG]: LD_LIBRARY_PATH = the carried libraries, then the host's libcudart and
# libcublas (the carried libcudart only as a fallback), then what was there; modules from
# DIR/lib/tensord. Appends where each CUDA library was found to LOG when given.
use_carry() {
    local x=$1 log=${2:-/dev/null} dirs="" lib p d
    for lib in libcudart.so.13 libcublas.so.13; do
        p=$(ldconfig -p 2>/dev/null | awk -v l="$lib" '$1 == l {print $NF; exit}')
        if [ -z "$p" ]; then
            for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
                     /usr/local/cuda-13*/lib64 /usr/lib/x86_64-linux-gnu; do
                [ -e "$d/$lib" ] && { p=$d/$lib; break; }
            done
        fi
        [ -z "$p" ] && p=$(find /usr/local /opt /usr/lib -name "$lib" 2>/dev/null | head -1)
        [ -n "$p" ] && dirs="$dirs:$(dirname "$p")"
        echo "$lib: ${p:-not found}" >>"$log"
    done
    export LD_LIBRARY_PATH="$x/lib${dirs}:$x/lib/cuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export TENSORD_BACKEND_DIR="$x/lib/tensord"
}

# start_tensord BIN LOG [ARGS...]: a tensord on 127.0.0.1 (any free port) logging to LOG,
# with ARGS added to its command line; sets SERVER_PID and SERVER_ADDR (HOST:PORT). Returns
# non-zero when it did not come up in 10 s.
start_tensord() {
    "$1" --listen 127.0.0.1:0 "${@:3}" >"$2" 2>&1 &
    SERVER_PID=$!
    SERVER_ADDR=""
    for _ in $(seq 1 100); do
        SERVER_ADDR=$(grep -m1 -a '^listening on ' "$2" | awk '{print $3}')
        [ -n "$SERVER_ADDR" ] && return 0
        kill -0 "$SERVER_PID" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}

# stop_tensord: SIGTERM, up to 5 s to drain, then SIGKILL; sets SERVER_STATUS to its exit
# status. Call it in the shell that started it (not in $(...): only that shell can wait).
stop_tensord() {
    SERVER_STATUS=""
    [ -n "${SERVER_PID:-}" ] || return 0
    kill -TERM "$SERVER_PID" 2>/dev/null
    for _ in $(seq 1 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$SERVER_PID" 2>/dev/null
    wait "$SERVER_PID" 2>/dev/null
    SERVER_STATUS=$?
    SERVER_PID=""
}

# limit SECONDS: SECONDS, or what is left of the script's BUDGET since its `start` (both set
# by the script before it calls this) if that is less, and never below 5.
limit() {
    local left=$((BUDGET - ($(date +%s) - start)))
    [ "$left" -lt 5 ] && left=5
    echo $(($1 < left ? $1 : left))
}

# gpu_host_setup NAME BUDGET_S: the preamble of a script (run from the repository root) that
# writes its results to one markdown file. Sets OUT (default /tmp/tensord-gpu-out; made),
# MD=$OUT/NAME.md, start (now, for `limit`), BUDGET (default BUDGET_S), X (the carry, in
# ${TMPDIR:-/tmp}/tensord-gpu; unpacked unless the same carry is there already) with the
# carried libraries in use (use_carry), and GPU_BENCH (the carried gpu-bench, else
# carry/gpu-bench, where prepare-carry.sh also puts it). Returns non-zero, with a line in
# $MD, when the carry cannot be unpacked. Set LD_LIBRARY_PATH aside first if the script
# needs the host's own (use_carry changes it).
gpu_host_setup() {
    # shellcheck disable=SC2034 # MD, start, BUDGET and GPU_BENCH are for the caller
    {
        OUT=${OUT:-/tmp/tensord-gpu-out}
        mkdir -p "$OUT" || return 1
        MD=$OUT/$1.md
        start=$(date +%s)
        BUDGET=${BUDGET:-$2}
        X=${TMPDIR:-/tmp}/tensord-gpu
        # a warm machine keeps /tmp between calls: unpack again when the carry changed
        local sum
        sum=$(cksum <carry/tensord-gpu.tar.xz 2>/dev/null)
        if [ ! -x "$X/bin/tensord" ] || [ "$(cat "$X/.carry-sum" 2>/dev/null)" != "$sum" ]; then
            unpack_carry "$X" || { echo "cannot unpack the carry" | tee -a "$MD"; return 1; }
            echo "$sum" >"$X/.carry-sum"
        fi
        use_carry "$X"
        GPU_BENCH=$X/bin/gpu-bench
        [ -x "$GPU_BENCH" ] || GPU_BENCH=$PWD/carry/gpu-bench
    }
}

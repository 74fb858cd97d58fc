#!/usr/bin/env bash
# quickstart.sh — from a fresh Debian 12 to a trained Fashion-MNIST model, remote and local.
#
#   sudo deploy/quickstart.sh [--epochs N]
#
# 1. installs the build dependencies and the data set (skipped when all are installed);
# 2. builds tensord in build/ (release);
# 3. starts a tensord server on a free loopback port;
# 4. trains the example MLP through the server (--device tensord://ADDR/cpu), then again
#    in-process (--device local:cpu) with the same seed;
# 5. prints both summary lines and whether the results are identical, and stops the server.
# Exits non-zero if any step fails or the two runs disagree.
set -euo pipefail

EPOCHS=2
SEED=1
usage() {
    echo "usage: $0 [--epochs N]   (run as root on Debian 12, from anywhere)"
}
while [[ $# -gt 0 ]]; do
    case $1 in
    --epochs)
        [[ $# -ge 2 ]] || { usage >&2; exit 2; }
        EPOCHS=$2
        shift 2
        ;;
    --epochs=*)
        EPOCHS=${1#--epochs=}
        shift
        ;;
    -h | --help)
        usage
        exit 0
        ;;
    *)
        echo "quickstart: unknown argument '$1'" >&2
        usage >&2
        exit 2
        ;;
    esac
done
[[ $EPOCHS =~ ^[1-9][0-9]*$ ]] || { echo "quickstart: --epochs needs a positive integer" >&2; exit 2; }

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
say() { printf '\n==> %s\n' "$*"; }

# ---- 1. packages ----
PACKAGES=(meson ninja-build pkg-config gcc libgrpc-dev protobuf-c-compiler libprotobuf-c-dev
    libuv1-dev libssl-dev libopenblas-dev libdnnl-dev libsystemd-dev zlib1g-dev libxxhash-dev
    libjansson-dev libmicrohttpd-dev
    dataset-fashion-mnist)
missing=()
for p in "${PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$p")
    fi
done
if [[ ${#missing[@]} -gt 0 ]]; then
    say "installing ${missing[*]}"
    SUDO=()
    if [[ $(id -u) -ne 0 ]]; then
        command -v sudo >/dev/null || { echo "quickstart: run as root (or install sudo)" >&2; exit 1; }
        SUDO=(sudo)
    fi
    export DEBIAN_FRONTEND=noninteractive
    "${SUDO[@]}" apt-get update
    "${SUDO[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
else
    say "all packages already installed"
fi

# ---- 2. build ----
say "building in build/ (release)"
if [[ -f build/build.ninja ]]; then
    meson configure build -Dbuildtype=release
else
    meson setup build --buildtype=release
fi
ninja -C build
TENSORD=build/server/tensord
TRAINER=build/examples/fashion-mnist/fashion-mnist

# ---- 3. server ----
WORK=$(mktemp -d "${TMPDIR:-/tmp}/tensord-quickstart.XXXXXX")
SERVER_PID=
cleanup() {
    if [[ -n $SERVER_PID ]]; then
        kill "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say "starting $TENSORD --listen 127.0.0.1:0"
"$TENSORD" --listen 127.0.0.1:0 >"$WORK/server.log" 2>&1 &
SERVER_PID=$!
ADDR=
for ((i = 0; i < 300; i++)); do
    ADDR=$(sed -n 's/.*listening on \([^ ]*\).*/\1/p' "$WORK/server.log" | head -n 1)
    [[ -n $ADDR ]] && break
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
        cat "$WORK/server.log" >&2
        echo "quickstart: tensord exited before listening" >&2
        exit 1
    fi
    sleep 0.1
done
if [[ -z $ADDR ]]; then
    cat "$WORK/server.log" >&2
    echo "quickstart: tensord did not report its address within 30 s" >&2
    exit 1
fi
echo "tensord is listening on $ADDR"

# ---- 4. train remotely, then locally ----
say "training remotely: --device tensord://$ADDR/cpu --epochs $EPOCHS --seed $SEED"
"$TRAINER" --device "tensord://$ADDR/cpu" --epochs "$EPOCHS" --seed "$SEED" | tee "$WORK/remote.out"
say "training locally: --device local:cpu --epochs $EPOCHS --seed $SEED"
"$TRAINER" --device local:cpu --epochs "$EPOCHS" --seed "$SEED" | tee "$WORK/local.out"

# ---- 5. compare, stop ----
remote=$(tail -n 1 "$WORK/remote.out")
local_=$(tail -n 1 "$WORK/local.out")

say "stopping tensord"
kill -TERM "$SERVER_PID"
server_rc=0
wait "$SERVER_PID" || server_rc=$?
SERVER_PID=
if [[ $server_rc -ne 0 ]]; then
    cat "$WORK/server.log" >&2
    echo "quickstart: tensord exited with status $server_rc after SIGTERM" >&2
fi

echo
echo "remote: $remote"
echo "local:  $local_"
# Compare accuracy, loss and epochs; the seconds differ by nature.
if [[ ${remote%%  seconds:*} == "${local_%%  seconds:*}" ]]; then
    echo "remote and local results are identical"
    [[ $server_rc -eq 0 ]] || exit 1
else
    echo "remote and local results DIFFER"
    exit 1
fi

#!/usr/bin/env bash
# bench-on-gpu-host.sh — GPU speed of tensord next to PyTorch on the same machine, same run.
# Needs carry/ from tests/gpu/prepare-carry.sh plus carry/gpu-bench (build-gpu/bench/gpu-bench).
# Run on the GPU host from the repository root (device tool, carry ["carry"]).
set -u
cd "$(dirname "$0")/../.."
X=${TMPDIR:-/tmp}/tensord-gpu-bench
rm -rf "$X" && mkdir -p "$X" && tar -C "$X" -xJf carry/tensord-gpu.tar.xz
cuda_dirs=""
for lib in libcudart.so.13 libcublas.so.13; do
    p=$(ldconfig -p 2>/dev/null | awk -v l="$lib" '$1 == l {print $NF; exit}')
    [ -z "$p" ] && p=$(find /usr/local /opt /usr/lib -name "$lib" 2>/dev/null | head -1)
    [ -n "$p" ] && cuda_dirs="$cuda_dirs:$(dirname "$p")"
done
export LD_LIBRARY_PATH="$X/lib${cuda_dirs}:$X/lib/cuda"
export TENSORD_BACKEND_DIR="$X/lib/tensord"
echo "== tensord local:cuda:0"
carry/gpu-bench --device local:cuda:0
"$X/bin/tensord" --listen 127.0.0.1:0 >/tmp/gb-server.log 2>&1 &
pid=$!
for _ in $(seq 1 100); do
    addr=$(grep -m1 '^listening on ' /tmp/gb-server.log | awk '{print $3}')
    [ -n "$addr" ] && break
    sleep 0.1
done
echo "== tensord remote tensord://$addr/cuda:0"
carry/gpu-bench --device "tensord://$addr/cuda:0"
kill -TERM "$pid"; wait "$pid"
echo "== PyTorch (fp32)"
python3 bench/gpu_torch.py
echo "== PyTorch (tf32 matmul)"
python3 bench/gpu_torch.py --tf32

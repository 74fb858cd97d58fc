#!/bin/sh
# conv2d on ResNet-50 shapes, batch 32, f32: tensord local:cpu (BUILD/bench/conv-bench) and
# PyTorch CPU with 2 threads in the same run. Run on a quiet machine (uptime load < 2.5).
# Usage: bench/conv_bench.sh BUILD_DIR [reps]
set -e
b=${1:?usage: conv_bench.sh BUILD_DIR [reps]}
r=${2:-5}
uptime
TENSORD_CPU_THREADS=2 "$b/bench/conv-bench" local:cpu "$r"
/usr/bin/python3 "$(dirname "$0")/conv_torch.py" "$r"

#!/usr/bin/env bash
# Install the Debian 12 packages that building, testing and the quickstart need
# (libmicrohttpd-dev: tensord's --metrics listener; python3-grpcio, python3-grpc-tools and
# python3-protobuf: the e2e-ops test's plain gRPC health client; python3-yaml: the
# deploy-kubernetes test; systemd: systemd-analyze for
# the deploy-unit test; glslc, libvulkan-dev: the Vulkan backend module, mesa-vulkan-drivers:
# lavapipe, the software Vulkan device its conformance tests run on; fortunes: the text the
# fortune-lm example trains on; vulkan-tools:
# vulkaninfo, to see what a host offers; libdnnl-dev: oneDNN, the CPU's f32 convolution
# (-Ddnnl, default auto: used when installed)).
# Opt-in build options bring their own packages through TD_EXTRA_PKGS, e.g.
# TD_EXTRA_PKGS="hipcc libamdhip64-dev" for -Dhip (tests/run.sh does so).
# Skips apt entirely when everything is already installed. Run as root.
set -euo pipefail
PKGS=(meson ninja-build pkg-config gcc libc6-dev
      libgrpc-dev protobuf-c-compiler libprotobuf-c-dev libuv1-dev libssl-dev
      libopenblas-dev libdnnl-dev libsystemd-dev zlib1g-dev libxxhash-dev libjansson-dev
      libcriterion-dev libmicrohttpd-dev libonnx-dev libonnx-testdata
      dataset-fashion-mnist fortunes python3-numpy openssl procps
      python3-grpcio python3-grpc-tools python3-protobuf python3-yaml systemd
      glslc libvulkan-dev mesa-vulkan-drivers vulkan-tools ${TD_EXTRA_PKGS:-})
missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "install-deps: all ${#PKGS[@]} packages are installed" >&2
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps: missing packages: ${missing[*]}; run as root or install them with apt-get" >&2
    exit 1
fi
echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null

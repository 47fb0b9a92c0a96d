#!/usr/bin/env bash
# Installs what ctc needs to build, test and run its demo, from Debian's packages.
# Needs root (runs apt-get; uses sudo when not root). Does nothing when all is present.
set -euo pipefail
need=()
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
for p in gcc clang libclang-rt-14-dev ninja-build libopenblas-dev zlib1g-dev python3-numpy python3-pytest python3-pytest-xdist python3-torch python3-torchvision \
         python3-dev python3-matplotlib graphviz \
         libopenmpi-dev openmpi-bin \
         dataset-fashion-mnist fortunes-min \
         gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm qemu-user gcc-aarch64-linux-gnu libc6-dev-arm64-cross \
         libclang-dev; do
  have_pkg "$p" || need+=("$p")
done
[ ${#need[@]} -eq 0 ] && exit 0
echo "installing: ${need[*]}"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}"

#!/usr/bin/env bash
# Builds the C++ inference example: `ctc build --shared` of examples/mlp_sequential.py
# (libmlp.so and libmlp.h in OUT), then infer.cpp with g++ against it (OUT/infer).
# usage: examples/cpp_infer/build.sh [OUT]   (default build/cpp_infer; ctc built with ninja)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$(dirname "$here")")"
out="${1:-$root/build/cpp_infer}"
mkdir -p "$out"
"$root/build/ctc" build "$root/examples/mlp_sequential.py" --shared -o "$out/libmlp.so"
${CXX:-g++} -std=c++17 -O2 -Wall -Wextra -Werror -I"$out" -I"$root/runtime_min" "$here/infer.cpp" \
    -L"$out" -lmlp -Wl,-rpath,'$ORIGIN' -o "$out/infer"
echo "built $out/infer: $out/infer WEIGHTS.safetensors X.npy [Y.npy]"

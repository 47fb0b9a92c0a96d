#!/usr/bin/env bash
# scripts/gpu_check.sh - on a machine with a GPU (the device machine): builds ctc with
# ninja and runs the CUDA target's GPU suite (tests/gpu: programs built with nvcc
# against the C target). Needs nvcc, nvidia-smi, and a python with pytest and numpy
# ($PYTHON, default python3). The GPU benchmark of issue 8 is not written yet.
set -euo pipefail
cd "$(dirname "$0")/.."
ninja
nvidia-smi -L
exec "${PYTHON:-python3}" -m pytest tests/gpu -q -rs "$@"

#!/usr/bin/env bash
# scripts/gpu_check.sh - on a machine with a GPU (the device machine), in one call: builds
# ctc with ninja, runs the CUDA target's GPU suite (tests/gpu: programs built with nvcc
# against the C target and PyTorch on the GPU, compute-sanitizer's memcheck; torch.autocast('cuda')
# bf16/f16 builds on tensor cores against their emulation and PyTorch's CUDA autocast), then the
# GPU benchmark (bench/bench_gpu.py: the bench GPT and a GPT-2-small-sized train step
# against PyTorch eager). Needs nvcc, nvidia-smi, and a python with pytest, numpy and a
# CUDA PyTorch ($PYTHON, default python3). Arguments go to bench_gpu.py.
# The bench models are ../shared/bench/models, or $CTC_BENCH_MODELS where the repository
# travels alone (the device tool sends the checkout only: copy the models into an ignored
# folder of it, carry that, and point CTC_BENCH_MODELS there).
set -euo pipefail
cd "$(dirname "$0")/.."
models="${CTC_BENCH_MODELS:-../shared/bench/models}"
if [ ! -f "$models/gpt.py" ]; then
  echo "gpu_check.sh: no bench models in '$models' (set CTC_BENCH_MODELS to a copy of ../shared/bench/models)" >&2
  exit 2
fi
ninja
nvidia-smi -L
py="${PYTHON:-python3}"
status=0
"$py" -m pytest tests/gpu -q -rs || status=$?
"$py" bench/bench_gpu.py "$@" || status=$?
exit $status

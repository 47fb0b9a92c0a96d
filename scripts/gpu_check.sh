#!/usr/bin/env bash
# scripts/gpu_check.sh - on a machine with a GPU (the device machine), in one call: builds
# ctc with ninja, runs the CUDA target's GPU suite (tests/gpu: programs built with nvcc
# against the C target and PyTorch on the GPU, compute-sanitizer's memcheck; torch.autocast('cuda')
# bf16/f16 builds on tensor cores against their emulation and PyTorch's CUDA autocast), then the
# GPU benchmark (bench/bench_gpu.py: the bench GPT and a GPT-2-small-sized train step
# against PyTorch eager); with CTC_GPU_NCU=1, Nsight Compute's kernel times of the bench GPT's
# train step (bench/ncu_summary.py). Needs nvcc, nvidia-smi, and a python with pytest, numpy and a
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
if [ "${CTC_GPU_NCU:-0}" = 1 ]; then   # where the bench GPT's train step spends its kernel time
  d=$(mktemp -d)
  "$py" -c "import sys; sys.path.insert(0, 'bench'); from bench import WRAPPER; open('$d/gpt.py', 'w').write(open('$models/gpt.py').read() + WRAPPER)"
  build/ctc build "$d/gpt.py" --target cuda -o "$d/net" --entry train_step
  ncu --clock-control none --metrics gpu__time_duration.sum --csv "$d/net" bench train_step --iters 1 --warmup 0 \
      --int-max 256 > "$d/ncu.csv" || status=$?
  "$py" bench/ncu_summary.py "$d/ncu.csv" || status=$?
fi
exit $status

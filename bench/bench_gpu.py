"""The GPT train step as generated CUDA against PyTorch eager on the same GPU, in one run.

usage: python3 bench/bench_gpu.py [--configs bench,gpt2] [--iters 10] [--warmup 3] [--rounds 3]
                                  [--emulate]

Configurations of ../shared/bench/models/gpt.py (its module constants replaced):
  bench  the bench model as it is: L4 H4 C256, vocabulary 256, T=128, B=8;
  gpt2   GPT-2 small's shape: L12 H12 C768, vocabulary 50257, T=1024, B=4;
  tiny   L1 H2 C32, vocabulary 64, T=16, B=2 (for --emulate: checks the script).
Each is the file a user writes around the model (bench/bench.py's WRAPPER: an
SGD-momentum `train_step` with cross-entropy), built with `ctc build --target cuda`
(nvcc, cuBLAS, cuDNN where installed) and timed with `./net bench train_step` (the
host-pointer entry: the batch is copied in, the parameters stay on the GPU); PyTorch
eager runs the same step on the same GPU (this interpreter's torch, cuda synchronised
around each call), both in fresh processes, alternating, --rounds times. It prints a
Markdown table with the GPU's name: median ms per step of each and torch/ctc.

--emulate builds with `--emulate` and runs PyTorch on the CPU: no GPU needed, the
numbers mean nothing; tests/test_bench_script.py runs it that way. Nothing is
asserted about speed."""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CTC = os.path.join(ROOT, "build", "ctc")
sys.path.insert(0, HERE)
from bench import MODELS_DIR, WRAPPER  # noqa: E402  (the same models and training step as bench.py)

GPT = os.path.join(MODELS_DIR, "gpt.py")

CONFIGS = {
    "bench": {},
    "gpt2": {"VOCAB": 50257, "BLOCK": 1024, "N_LAYER": 12, "N_HEAD": 12, "N_EMBD": 768, "BATCH": 4},
    "tiny": {"VOCAB": 64, "BLOCK": 16, "N_LAYER": 1, "N_HEAD": 2, "N_EMBD": 32, "BATCH": 2},
}
BENCH_LINE = re.compile(r"^bench \S+: median ([0-9.]+) ms, min ([0-9.]+) ms per call", re.M)


def model_source(config):
    src = open(GPT).read()
    for name, value in CONFIGS[config].items():
        src, n = re.subn(rf"^{name} = .*$", f"{name} = {value}", src, flags=re.M)
        assert n == 1, f"{name} not found in {GPT}"
    return src + WRAPPER


def torch_worker(a):
    """Times the train step in this process; prints one JSON line."""
    import contextlib
    import importlib.util
    import time

    import torch

    dev = "cpu" if a.emulate else "cuda"
    torch.manual_seed(0)
    spec = importlib.util.spec_from_file_location("bench_gpu_model", a.worker)
    with (torch.device(dev) if dev != "cpu" else contextlib.nullcontext()):
        m = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(m)   # model and optimizer made on the device
        x, y = (t.to(dev) for t in m.make_inputs())
        sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
        for _ in range(a.warmup):
            m.train_step(x, y)
        ms = []
        for _ in range(a.iters):
            sync()
            t0 = time.perf_counter()
            m.train_step(x, y)
            sync()
            ms.append((time.perf_counter() - t0) * 1e3)
    print(json.dumps({"median": statistics.median(ms), "min": min(ms), "version": torch.__version__,
                      "device": torch.cuda.get_device_name(0) if dev == "cuda" else "CPU (--emulate)"}))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--configs", default="bench,gpt2")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--emulate", action="store_true")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return torch_worker(a)
    configs = a.configs.split(",")
    for c in configs:
        if c not in CONFIGS:
            ap.error(f"unknown config '{c}' (expected {', '.join(CONFIGS)})")
    rows, device = [], "?"
    with tempfile.TemporaryDirectory(prefix="ctc_bench_gpu_") as d:
        for c in configs:
            path = os.path.join(d, f"gpt_{c}.py")
            with open(path, "w") as f:
                f.write(model_source(c))
            exe = os.path.join(d, f"net_{c}")
            cmd = [CTC, "build", path, "--target", "cuda", "-o", exe, "--entry", "train_step"]
            r = subprocess.run(cmd + (["--emulate"] if a.emulate else []), capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f"ctc build failed for {c}:\n{r.stderr}")
            ctc_ms, torch_ms = [], []
            for _ in range(a.rounds):
                vocab = CONFIGS[c].get("VOCAB", 256)   # token ids and targets in [0, vocabulary)
                r = subprocess.run([exe, "bench", "train_step", "--iters", str(a.iters), "--warmup", str(a.warmup),
                                    "--int-max", str(vocab)], capture_output=True, text=True)
                m = BENCH_LINE.search(r.stdout + r.stderr)
                if r.returncode != 0 or not m:
                    sys.exit(f"./net bench failed for {c}:\n{r.stdout}\n{r.stderr}")
                ctc_ms.append(float(m.group(1)))
                r = subprocess.run([sys.executable, __file__, "--worker", path, "--iters", str(a.iters), "--warmup",
                                    str(a.warmup)] + (["--emulate"] if a.emulate else []), capture_output=True, text=True)
                if r.returncode != 0:
                    sys.exit(f"the PyTorch worker failed for {c}:\n{r.stderr[-3000:]}")
                res = json.loads(r.stdout.strip().splitlines()[-1])
                torch_ms.append(res["median"])
                device = f"{res['device']}, torch {res['version']}"
            tm, cm = statistics.median(torch_ms), statistics.median(ctc_ms)
            rows.append((c, tm, cm))
            print(f"# {c}: torch {tm:.2f} ms, ctc {cm:.2f} ms", flush=True)
    print(f"\ntrain step (SGD momentum, cross-entropy) on {device}, median of {a.rounds} rounds x {a.iters} steps\n")
    print("| config | PyTorch eager ms | ctc CUDA ms | torch/ctc |")
    print("|---|---|---|---|")
    for c, tm, cm in rows:
        print(f"| {c} | {tm:.2f} | {cm:.2f} | {tm / cm:.2f} |")


if __name__ == "__main__":
    main()

"""Forward-pass speed: ctc's generated C against PyTorch eager on the same model
file, side by side in one run, printing the ratio. Never asserted on.

usage: /usr/bin/python3 bench/bench_forward.py [--threads 2] [--steps 20]
Models: ../shared/bench/models/{mlp,lenet,gpt}.py at their make_inputs() shapes."""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from ctc_testlib import BENCH, CTC, build_ctc, load_module, st_write, state_dict_np  # noqa: E402

MODELS = [("mlp.py", "MLP", "x"), ("lenet.py", "Network", "t"), ("gpt.py", "GPT", "idx")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    a = ap.parse_args()
    build_ctc()
    torch.set_num_threads(a.threads)
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), OPENBLAS_NUM_THREADS=str(a.threads))
    print(f"{'model':8} {'torch ms':>9} {'ctc ms':>9} {'torch/ctc':>10}  (forward, median of {a.steps}, {a.threads} threads)")
    for fname, cls, arg in MODELS:
        path = os.path.join(BENCH, fname)
        mod = load_module(path, "bench_" + cls)
        torch.manual_seed(0)
        model = getattr(mod, cls)()
        model.eval()
        x, _ = mod.make_inputs()
        with torch.no_grad():
            for _ in range(3):
                model(x)
            ts = []
            for _ in range(a.steps):
                t = time.perf_counter()
                model(x)
                ts.append(time.perf_counter() - t)
        t_torch = statistics.median(ts) * 1e3
        with tempfile.TemporaryDirectory() as d:
            exe = os.path.join(d, "net")
            dt = "i64" if x.dtype == torch.int64 else "f32"
            spec = f"{arg}={dt}[{','.join(map(str, x.shape))}]"
            subprocess.run([CTC, "build", path, "-o", exe, "--model", cls, "--input", spec], check=True)
            w = os.path.join(d, "w.safetensors")
            st_write(w, state_dict_np(model))
            np.save(os.path.join(d, "x.npy"), x.numpy())
            r = subprocess.run([exe, "infer", "--weights", w, "--input", os.path.join(d, "x.npy"),
                                "--repeat", str(a.steps)], capture_output=True, text=True, env=env, check=True)
            m = re.search(r"median ([0-9.]+) ms", r.stderr)
            t_ctc = float(m.group(1)) if m else float("nan")
        print(f"{cls:8} {t_torch:9.3f} {t_ctc:9.3f} {t_torch / t_ctc:10.2f}x")


if __name__ == "__main__":
    main()

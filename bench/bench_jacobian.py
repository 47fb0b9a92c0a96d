"""Jacobian of an MLP f: R^8 -> R^512, three ways, side by side in one run:
ctc's compiled forward-mode jacobian (one tangent sweep batched over the 8
input directions), ctc's compiled reverse-mode jacobian (one adjoint sweep batched
over the 512 output directions), and PyTorch's
torch.autograd.functional.jacobian (reverse mode, vectorize=False and True).
Forward mode costs O(inputs), reverse O(outputs): the asymptotics should show.

usage: /usr/bin/python3 bench/bench_jacobian.py [--repeat 20]"""
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
from ctc_testlib import CTC, build_ctc, load_module, st_write, state_dict_np  # noqa: E402

SRC = """\
import torch
import torch.nn as nn
from torch.autograd.functional import jacobian


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 64)
        self.fc2 = nn.Linear(64, 512)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


model = MLP()


def jac_fwd(x):
    return jacobian(model, x, strategy="forward-mode", vectorize=True)


def jac_rev(x):
    return jacobian(model, x)


example_inputs = {"forward": (torch.randn(8),), "jac_fwd": (torch.randn(8),), "jac_rev": (torch.randn(8),)}
"""


def median_ms(fn, repeat):
    for _ in range(3):
        fn()
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=20)
    a = ap.parse_args()
    build_ctc()
    torch.set_num_threads(1)
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "jac.py")
        open(path, "w").write(SRC)
        exe = os.path.join(d, "net")
        t0 = time.time()
        subprocess.run([CTC, "build", path, "-o", exe], check=True)
        build_s = time.time() - t0
        mod = load_module(path, "jac_bench")
        w = os.path.join(d, "w.safetensors")
        st_write(w, state_dict_np(mod.model))
        x = np.random.default_rng(0).standard_normal(8).astype(np.float32)
        np.save(os.path.join(d, "x.npy"), x)
        res = {}
        for entry in ("jac_fwd", "jac_rev"):
            out = os.path.join(d, entry + ".npy")
            r = subprocess.run([exe, "run", entry, "--weights", w, "--input", os.path.join(d, "x.npy"), "--output", out,
                                "--repeat", str(a.repeat)], capture_output=True, text=True, env=env, check=True)
            res[entry] = (float(re.search(r"median ([0-9.]+) ms", r.stderr).group(1)), np.load(out))
        tx = torch.from_numpy(x)
        want = torch.autograd.functional.jacobian(mod.model, tx).detach().numpy()
        t_loop = median_ms(lambda: torch.autograd.functional.jacobian(mod.model, tx), a.repeat)
        t_vec = median_ms(lambda: torch.autograd.functional.jacobian(mod.model, tx, vectorize=True), a.repeat)
        size = os.path.getsize(exe + ".c")
    print(f"jacobian of an MLP R^8 -> R^512 (8-64-512, tanh), 1 thread, median of {a.repeat}; "
          f"ctc build {build_s:.1f} s, model.c {size // 1024} KB")
    for entry, label in (("jac_fwd", "ctc forward-mode (8 batched)"), ("jac_rev", "ctc reverse-mode (512 batched)")):
        ms, J = res[entry]
        print(f"  {label:34} {ms:9.3f} ms   max |J - torch| {np.abs(J - want).max():.1e}")
    print(f"  {'torch jacobian (reverse, loop)':34} {t_loop:9.3f} ms")
    print(f"  {'torch jacobian (reverse, vmap)':34} {t_vec:9.3f} ms")
    print(f"  reverse/forward cost ratio in ctc: {res['jac_rev'][0] / res['jac_fwd'][0]:.1f}x; "
          f"torch(vmap)/ctc forward: {t_vec / res['jac_fwd'][0]:.1f}x")


if __name__ == "__main__":
    main()

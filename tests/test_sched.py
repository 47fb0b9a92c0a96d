"""LR schedulers: the learning rate a compiled program uses after k scheduler
steps equals PyTorch's (rtol 1e-5), both for epoch-wise schedulers (ctc adds a
`scheduler_step` entry that `./net train` runs after every epoch) and for a
scheduler stepped inside train_step (the parameters then follow PyTorch's
over several steps, rtol 1e-3)."""
import numpy as np
import pytest
import torch

from ctc_testlib import CTC, compare, load_module, run, st_read, st_write, state_dict_np

SRC = """\
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.lr_scheduler import {cls}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 3)

    def forward(self, x):
        return self.fc(x)


model = Net()
optimizer = torch.optim.{opt}
scheduler = {cls}(optimizer, {args})


def train_step(x, y):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    {inner}
    return loss


example_inputs = {{"forward": (torch.randn(4, 6),), "train_step": (torch.randn(4, 6), torch.randint(0, 3, (4,)))}}
"""

SCHEDULERS = {
    "StepLR": "step_size=3, gamma=0.5",
    "MultiStepLR": "milestones=[2, 5, 6], gamma=0.3",
    "ExponentialLR": "gamma=0.9",
    "CosineAnnealingLR": "T_max=8, eta_min=0.001",
    "LinearLR": "start_factor=0.25, end_factor=1.0, total_iters=4",
}


def build(tmp_path, cls, args, opt="SGD(model.parameters(), lr=0.1, momentum=0.9)", inner=""):
    path = tmp_path / "m.py"
    path.write_text(SRC.format(cls=cls, args=args, opt=opt, inner=inner))
    exe = tmp_path / "net"
    run([CTC, "build", path, "-o", exe])
    return path, exe


@pytest.mark.parametrize("cls", sorted(SCHEDULERS))
def test_epoch_schedule(tmp_path, cls):
    path, exe = build(tmp_path, cls, SCHEDULERS[cls])
    mod = load_module(str(path), "sched_" + cls)
    w = None
    for k in range(10):
        args = [exe, "run", "scheduler_step", "--save", tmp_path / f"w{k}.safetensors", "--save-training-state"]
        if w:
            args += ["--weights", w]
        run(args)
        w = tmp_path / f"w{k}.safetensors"
        mod.optimizer.step()  # PyTorch warns when a scheduler steps before the optimizer
        mod.scheduler.step()
        got = float(st_read(w)["optimizer.lr"])
        want = mod.optimizer.param_groups[0]["lr"]
        assert abs(got - want) <= 1e-5 * abs(want) + 1e-9, f"{cls} step {k + 1}: lr {got} vs PyTorch {want}"


def paired_steps(tmp_path, exe, mod, steps, seed, each=None):
    """Run train_step `steps` times in the compiled program (weights round-tripping
    through safetensors) and in PyTorch on the same batches; `each(k, weights)`
    checks after every step. Returns the program's final weights."""
    w = tmp_path / "w.safetensors"
    st_write(w, state_dict_np(mod.model))
    rng = np.random.default_rng(seed)
    for k in range(steps):
        x = rng.standard_normal((4, 6)).astype(np.float32)
        y = rng.integers(0, 3, 4).astype(np.int64)
        np.save(tmp_path / "x.npy", x)
        np.save(tmp_path / "y.npy", y)
        nxt = tmp_path / f"w{k}.safetensors"
        run([exe, "run", "train_step", "--weights", w, "--input", tmp_path / "x.npy", "--input", tmp_path / "y.npy",
             "--save", nxt, "--save-training-state"])
        w = nxt
        mod.train_step(torch.from_numpy(x), torch.from_numpy(y))
        if each:
            each(k, st_read(w))
    return st_read(w)


def test_schedule_inside_train_step(tmp_path):
    path, exe = build(tmp_path, "StepLR", "step_size=2, gamma=0.5", opt="Adam(model.parameters(), lr=0.05)",
                      inner="scheduler.step()")
    mod = load_module(str(path), "sched_inner")
    got = paired_steps(tmp_path, exe, mod, 6, 0)
    for k, v in mod.model.state_dict().items():
        compare(f"StepLR in train_step: {k}", got[k], v.numpy(), 1e-3, 1e-5)
    assert abs(float(got["optimizer.lr"]) - mod.optimizer.param_groups[0]["lr"]) < 1e-8


def test_train_command_steps_the_scheduler(tmp_path):
    path, exe = build(tmp_path, "ExponentialLR", "gamma=0.5")
    rng = np.random.default_rng(1)
    np.save(tmp_path / "x.npy", rng.standard_normal((8, 6)).astype(np.float32))
    np.save(tmp_path / "y.npy", rng.integers(0, 3, 8).astype(np.int64))
    run([exe, "train", "--data", tmp_path / "x.npy", "--labels", tmp_path / "y.npy", "--epochs", "3",
         "--batch", "4", "--save", tmp_path / "out.safetensors", "--save-training-state"])
    assert abs(float(st_read(tmp_path / "out.safetensors")["optimizer.lr"]) - 0.1 * 0.5 ** 3) < 1e-8


@pytest.mark.parametrize("opt,args", [
    ("SGD(model.parameters(), lr=0.1, momentum=0.9)", "max_lr=0.5, total_steps=10"),
    ("Adam(model.parameters(), lr=0.1)", "max_lr=0.05, epochs=2, steps_per_epoch=5, anneal_strategy='linear'"),
    ("SGD(model.parameters(), lr=0.1, momentum=0.9)", "max_lr=0.5, total_steps=10, three_phase=True"),
    ("SGD(model.parameters(), lr=0.1)", "max_lr=0.5, total_steps=10, cycle_momentum=False, pct_start=0.4"),
], ids=["sgd_cos", "adam_linear", "three_phase", "no_momentum_cycle"])
def test_onecycle(tmp_path, opt, args):
    """OneCycleLR stepped inside train_step: lr and momentum (SGD) / beta1 (Adam)
    follow PyTorch's at every step, and so do the parameters."""
    path, exe = build(tmp_path, "OneCycleLR", args, opt=opt, inner="scheduler.step()")
    mod = load_module(str(path), "onecycle")

    def each(k, got):
        group = mod.optimizer.param_groups[0]
        # atol 1e-8: f32 cancellation in (1 + cos) as the cosine reaches -1 near min_lr
        assert abs(float(got["optimizer.lr"]) - group["lr"]) <= 1e-5 * group["lr"] + 1e-8, (k, got["optimizer.lr"], group["lr"])
        if "optimizer.momentum" in got:
            want_m = group["betas"][0] if "betas" in group else group["momentum"]
            assert abs(float(got["optimizer.momentum"]) - want_m) < 1e-6, (k, got["optimizer.momentum"], want_m)
    got = paired_steps(tmp_path, exe, mod, 9, 2, each)
    for k, v in mod.model.state_dict().items():
        compare(f"OneCycleLR: {k}", got[k], v.numpy(), 1e-3, 1e-5)

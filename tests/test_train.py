"""Training steps compiled to C: 20 steps of each optimizer from the same
initial safetensors and the same batches as PyTorch; every parameter must stay
within rtol 1e-3 (atol 1e-5) of PyTorch's after step 20. The step runs as the
generated train_step entry (forward, backward, update) through the driver:
`./net run train_step --weights W --input x --input y --save W'`, so optimizer
state also round-trips through the weights file every step."""
import os
import textwrap

import numpy as np
import pytest
import torch

from ctc_testlib import CTC, compare, load_module, run, st_read, st_write, state_dict_np

MODEL = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(12, 16)
        self.ln = nn.LayerNorm(16)
        self.fc2 = nn.Linear(16, 5)

    def forward(self, x):
        return self.fc2(F.gelu(self.ln(torch.tanh(self.fc1(x)))))


model = Net()
optimizer = {opt}
criterion = nn.CrossEntropyLoss({loss_args})


def train_step(x, y):
    optimizer.zero_grad()
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


example_inputs = {{"forward": (torch.randn(8, 12),),
                  "train_step": (torch.randn(8, 12), torch.randint(0, 5, (8,)))}}
"""

OPTIMIZERS = {
    "sgd": "torch.optim.SGD(model.parameters(), lr=0.1)",
    "sgd_momentum": "torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-3)",
    "sgd_nesterov": "torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True)",
    "sgd_dampening": "torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.8, dampening=0.3)",
    "adam": "torch.optim.Adam(model.parameters(), lr=1e-2)",
    "adam_amsgrad_wd": "torch.optim.Adam(model.parameters(), lr=1e-2, betas=(0.8, 0.99), weight_decay=1e-2, amsgrad=True)",
    "adamw": "torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)",
    "rmsprop": "torch.optim.RMSprop(model.parameters(), lr=1e-3)",
    "rmsprop_centered_momentum": "torch.optim.RMSprop(model.parameters(), lr=1e-3, momentum=0.5, centered=True)",
    "adagrad": "torch.optim.Adagrad(model.parameters(), lr=0.05, lr_decay=0.01)",
    "adadelta": "torch.optim.Adadelta(model.parameters(), lr=1.0)",
}
STEPS = 20


def trajectory(tmp_path, name, opt, loss_args=""):
    path = tmp_path / f"train_{name}.py"
    path.write_text(MODEL.format(opt=opt, loss_args=loss_args))
    exe = tmp_path / "net"
    run([CTC, "build", path, "-o", exe])
    mod = load_module(str(path), "train_" + name)
    torch.manual_seed(0)
    init = state_dict_np(mod.model)
    w = tmp_path / "w0.safetensors"
    st_write(w, init)
    rng = np.random.default_rng(1)
    losses_c, losses_t = [], []
    for step in range(STEPS):
        x = rng.standard_normal((8, 12)).astype(np.float32)
        y = rng.integers(0, 5, size=8).astype(np.int64)
        np.save(tmp_path / "x.npy", x)
        np.save(tmp_path / "y.npy", y)
        w_next = tmp_path / f"w{step + 1}.safetensors"
        run([exe, "run", "train_step", "--weights", w, "--input", tmp_path / "x.npy", "--input", tmp_path / "y.npy",
             "--output", tmp_path / "loss.npy", "--save", w_next, "--save-training-state"])
        losses_c.append(float(np.load(tmp_path / "loss.npy")))
        losses_t.append(float(mod.train_step(torch.from_numpy(x), torch.from_numpy(y))))
        w = w_next
    got = st_read(w)
    for k, v in mod.model.state_dict().items():
        d = compare(f"{name}: {k} after {STEPS} steps", got[k], v.numpy(), 1e-3, 1e-5)
        print(f"{name}: {k} max abs diff after {STEPS} steps {d:.2e}")
    compare(f"{name}: losses", np.array(losses_c), np.array(losses_t), 1e-3, 1e-5)
    return got


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_optimizer_trajectory(tmp_path, name):
    trajectory(tmp_path, name, OPTIMIZERS[name])


@pytest.mark.parametrize("loss_args", ["reduction='sum'", "label_smoothing=0.1", "ignore_index=2"])
def test_cross_entropy_options(tmp_path, loss_args):
    trajectory(tmp_path, "ce_" + loss_args.split("=")[0], OPTIMIZERS["sgd"], loss_args)


def test_optimizer_state_is_saved(tmp_path):
    got = trajectory(tmp_path, "state", OPTIMIZERS["adam"])
    assert "optimizer.fc1.weight.exp_avg" in got and float(got["optimizer.step"]) == STEPS

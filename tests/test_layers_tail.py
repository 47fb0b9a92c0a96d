"""Layers users reach for beyond the 2-D basics (issue 30): the 1-D pools (MaxPool1d,
AvgPool1d, AdaptiveAvgPool1d, AdaptiveMaxPool1d), AdaptiveMaxPool2d, BatchNorm3d and
InstanceNorm3d, MultiLabelSoftMarginLoss, module and F forms, in a sequence CNN and an
image net as people write them: forward (eval) and three SGD steps in training mode
against PyTorch."""
import re
import subprocess

import numpy as np
import pytest
import torch

from ctc_testlib import CTC, compare, load_module, run, run_forward, st_read, st_write, state_dict_np

SEQ = """import torch
import torch.nn as nn
import torch.nn.functional as F


class SeqNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(4, 8, 3, padding=1)
        self.pool = nn.MaxPool1d(2)
        self.avg = nn.AvgPool1d(3, stride=2, padding=1)
        self.ada = nn.AdaptiveAvgPool1d(5)
        self.adm = nn.AdaptiveMaxPool1d(4)
        self.fc = nn.Linear(8 * 5 + 8 * 4 + 8 * 4, 6)

    def forward(self, x):
        h = F.relu(self.conv(x))                        # [N, 8, 20]
        a = self.ada(self.avg(self.pool(h)))            # 20 -> 10 -> 5 -> 5
        b = self.adm(h)                                 # 20 -> 4
        c = F.max_pool1d(F.avg_pool1d(h, 2), kernel_size=3, stride=2, padding=1, dilation=1)   # 20 -> 10 -> 5
        c = F.adaptive_max_pool1d(c[:, :, :4], 4)
        return self.fc(torch.cat([a.flatten(1), b.flatten(1), c.flatten(1)], 1))


model = SeqNet()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
criterion = nn.MultiLabelSoftMarginLoss()


def train_step(x, y):
    optimizer.zero_grad()
    loss = criterion(model(x), y) + 0.5 * F.multilabel_soft_margin_loss(model(x), y, reduction="sum")
    loss.backward()
    optimizer.step()
    return loss


example_inputs = {"forward": (torch.randn(3, 4, 20),), "train_step": (torch.randn(3, 4, 20), torch.zeros(3, 6))}
"""

IMG = """import torch
import torch.nn as nn
import torch.nn.functional as F


class VolNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3, padding=1)
        self.bn3 = nn.BatchNorm3d(6)
        self.in3 = nn.InstanceNorm3d(6, affine=True)
        self.pool = nn.AdaptiveMaxPool2d((2, 4))
        self.fc = nn.Linear(6 * 2 * 4 + 6 * 4, 5)

    def forward(self, x):
        h = self.conv(x)                                # [N, 6, 8, 8]
        v = h.view(h.shape[0], 6, 2, 4, 8)              # a volume of depth 2
        v = F.relu(self.in3(self.bn3(v)))
        h = v.view(h.shape[0], 6, 8, 8)
        return self.fc(torch.cat([self.pool(h).flatten(1), F.adaptive_max_pool2d(h, 2).flatten(1)], 1))


model = VolNet()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def train_step(x, y):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


example_inputs = {"forward": (torch.randn(4, 3, 8, 8),),
                  "train_step": (torch.randn(4, 3, 8, 8), torch.zeros(4, dtype=torch.long))}
"""


def make_data(name, rng):
    if name == "seq":
        return (rng.standard_normal((3, 4, 20)).astype(np.float32),
                (rng.random((3, 6)) < 0.4).astype(np.float32))
    return rng.standard_normal((4, 3, 8, 8)).astype(np.float32), rng.integers(0, 5, size=4).astype(np.int64)


@pytest.mark.parametrize("name, src", [("seq", SEQ), ("img", IMG)])
def test_forward_and_training_steps(tmp_path, name, src):
    path = tmp_path / f"{name}.py"
    path.write_text(src)
    torch.manual_seed(0)
    mod = load_module(str(path), f"tail_{name}")
    rng = np.random.default_rng(1)
    # forward in eval mode (BatchNorm3d's running statistics set to something non-trivial)
    with torch.no_grad():
        for m in mod.model.modules():
            if isinstance(m, torch.nn.BatchNorm3d):
                m.running_mean.uniform_(-0.3, 0.3)
                m.running_var.uniform_(0.5, 1.5)
    mod.model.eval()
    x, _ = make_data(name, rng)
    (got,) = run_forward(str(tmp_path), str(path), mod.model, [x])
    with torch.no_grad():
        compare(f"{name} forward", got, mod.model(torch.from_numpy(x)).numpy(), 1e-4, 1e-5)
    mod.model.train()
    exe = tmp_path / "net"
    w = tmp_path / "w0.safetensors"
    st_write(w, state_dict_np(mod.model))
    for step in range(3):
        x, y = make_data(name, rng)
        np.save(tmp_path / "x.npy", x)
        np.save(tmp_path / "y.npy", y)
        nxt = tmp_path / f"w{step + 1}.safetensors"
        run([exe, "run", "train_step", "--weights", w, "--input", tmp_path / "x.npy", "--input", tmp_path / "y.npy",
             "--output", tmp_path / "loss.npy", "--save", nxt, "--save-training-state"])
        lt = float(mod.train_step(torch.from_numpy(x), torch.from_numpy(y)))
        compare(f"{name} loss at step {step}", float(np.load(tmp_path / "loss.npy")), lt, 1e-4, 1e-6)
        w = nxt
    got = st_read(w)
    for k, v in mod.model.state_dict().items():
        if k.endswith("num_batches_tracked"):
            assert int(got[k]) == int(v) == 3, k
        else:
            compare(f"{name} {k} after 3 steps", got[k], v.numpy(), 1e-3, 1e-5)


@pytest.mark.parametrize("body, msg", [
    ("F.adaptive_max_pool2d(x, 3)", "adaptive_max_pool2d to 3 needs an output size dividing the input's 8"),
    ("F.max_pool1d(x, 2)", "max_pool1d expects a 2-D or 3-D input, got shape [2, 3, 8, 8]"),
    ("self.bn(x)", "BatchNorm3d expects a 5-D input, got shape [2, 3, 8, 8]"),
])
def test_errors(tmp_path, body, msg):
    src = ("import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\nclass M(nn.Module):\n"
           "    def __init__(self):\n        super().__init__()\n        self.bn = nn.BatchNorm3d(3)\n\n"
           "    def forward(self, x):\n        return " + body + "\n")
    p = tmp_path / "m.py"
    p.write_text(src)
    r = run([CTC, "check", p, "--input", "x=f32[2,3,8,8]"], check=False)
    assert r.returncode == 1 and "m.py:12:" in r.stderr and msg in r.stderr, r.stderr


LINSPACE = """import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("a", torch.linspace(0.3, 1.7, 7))
        self.register_buffer("b", torch.linspace(-3, 11.1, 1001))
        self.register_buffer("c", torch.linspace(0, 1, 1))
        self.register_buffer("d", torch.linspace(1e-3, 5.0, 64, dtype=torch.float64))

    def forward(self, x):
        return x * self.a.sum() + self.b.mean() + self.c + torch.linspace(-1, 1, 4) + self.d.float().sum()
"""


def test_linspace(tmp_path):
    """torch.linspace in __init__ and in forward: PyTorch's formula (start + step * i up to the
    middle, end - step * (steps - 1 - i) after, in the result's dtype; one step is start). PyTorch's
    vectorised kernel computes runs of 8 or 16 values from each run's first (the width depends on
    the CPU), so its values differ from the formula's by at most one ulp in places."""
    p = tmp_path / "lin.py"
    p.write_text(LINSPACE)
    run([CTC, "build", p, "-o", tmp_path / "net", "--input", "x=f32[4]"])
    np.save(tmp_path / "x.npy", np.arange(4, dtype=np.float32))
    run([tmp_path / "net", "infer", "--random-weights", "--input", tmp_path / "x.npy", "--output", tmp_path / "o.npy",
         "--save", tmp_path / "s.safetensors"])
    m = load_module(p, "lin_model").Net()
    got = st_read(tmp_path / "s.safetensors")
    for k, v in m.state_dict().items():
        w = v.numpy()
        # one ulp of the range's magnitude (near 0 both are sums of values that size)
        assert got[k].dtype == w.dtype and np.all(np.abs(got[k] - w) <= np.spacing(np.abs(w).max())), k
        assert got[k][0] == w[0], k
    np.testing.assert_allclose(np.load(tmp_path / "o.npy"), m(torch.arange(4.0)).numpy(), rtol=1e-6)


@pytest.mark.parametrize("call,message", [
    ("torch.linspace(0, 1, -2)", "number of steps must be non-negative"),
    ("torch.linspace(0, 1, 0)", "this linspace is empty"),
    ("torch.linspace(0, 10, 5, dtype=torch.int64)", "torch.linspace with an integer dtype is not supported"),
])
def test_linspace_refusals(tmp_path, call, message):
    p = tmp_path / "bad.py"
    p.write_text("import torch\nimport torch.nn as nn\n\n\nclass Net(nn.Module):\n    def forward(self, x):\n"
                 f"        return x + {call}.sum()\n")
    r = subprocess.run([CTC, "check", p, "--input", "x=f32[2]"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and re.search(rf"bad\.py:7:\d+: error: .*{re.escape(message)}", r.stderr), r.stderr

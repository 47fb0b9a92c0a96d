"""Dropout in training mode: a counter-based random stream (the `rng.offset`
state), reproducible for a seed and equal to PyTorch in distribution (not bit
for bit). Checked statistically: the dropped fraction is within 5 standard
deviations of p, kept values are scaled by exactly 1 / (1 - p), and the
masks of successive steps differ."""
import numpy as np

from ctc_testlib import CTC, run, st_read, st_write

SRC = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(100, 10)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return self.fc(self.drop(x))


model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)


def drop(x):
    return F.dropout(x, 0.3, training=True) * 1.0


def train_step(x, y):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


example_inputs = {"forward": (torch.randn(16, 100),), "drop": (torch.randn(1000, 100),),
                  "train_step": (torch.randn(16, 100), torch.randint(0, 10, (16,)))}
"""


def build(tmp_path):
    (tmp_path / "m.py").write_text(SRC)
    exe = tmp_path / "net"
    run([CTC, "build", tmp_path / "m.py", "-o", exe, "--entry", "drop", "--entry", "train_step"])
    return exe


def test_dropout_statistics_and_stream(tmp_path):
    exe = build(tmp_path)
    x = np.ones((1000, 100), np.float32)
    np.save(tmp_path / "x.npy", x)
    outs = []
    w = None
    for step in range(2):
        args = [exe, "run", "drop", "--input", tmp_path / "x.npy", "--output", tmp_path / f"y{step}.npy",
                "--save", tmp_path / f"s{step}.safetensors", "--save-training-state"]
        if w:
            args += ["--weights", w]
        run(args)
        w = tmp_path / f"s{step}.safetensors"
        outs.append(np.load(tmp_path / f"y{step}.npy"))
    n, p = x.size, 0.3
    for y in outs:
        dropped = float((y == 0).mean())
        assert abs(dropped - p) < 5 * np.sqrt(p * (1 - p) / n), dropped
        kept = y[y != 0]
        assert np.allclose(kept, 1 / (1 - p), rtol=1e-6)
    assert (outs[0] != outs[1]).any(), "the second call reused the first call's mask"
    assert int(st_read(tmp_path / "s1.safetensors")["rng.offset"]) == 2 * n
    # reproducible: the same starting state gives the same mask
    run([exe, "run", "drop", "--input", tmp_path / "x.npy", "--output", tmp_path / "again.npy"])
    assert np.array_equal(np.load(tmp_path / "again.npy"), outs[0])


def test_dropout_in_a_training_step(tmp_path):
    """nn.Dropout in train mode inside train_step: the step runs, the stream
    advances by the number of masked elements, and the forward entry (eval
    mode) stays deterministic."""
    exe = build(tmp_path)
    rng = np.random.default_rng(0)
    np.save(tmp_path / "x.npy", rng.standard_normal((16, 100)).astype(np.float32))
    np.save(tmp_path / "y.npy", rng.integers(0, 10, 16).astype(np.int64))
    run([exe, "run", "train_step", "--input", tmp_path / "x.npy", "--input", tmp_path / "y.npy",
         "--save", tmp_path / "s.safetensors", "--save-training-state", "--repeat", "3"])
    s = st_read(tmp_path / "s.safetensors")
    assert int(s["rng.offset"]) == 3 * 16 * 100
    for k in range(2):
        run([exe, "infer", "--weights", tmp_path / "s.safetensors", "--input", tmp_path / "x.npy",
             "--output", tmp_path / f"f{k}.npy"])
    assert np.array_equal(np.load(tmp_path / "f0.npy"), np.load(tmp_path / "f1.npy"))

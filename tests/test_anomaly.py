"""Anomaly mode: `ctc build --anomaly` checks every op's float result for NaN and
Inf; the first one stops the entry, `./net` exits 1 naming the op, the value and
the model line (for backward code: the forward line it differentiates, as
PyTorch's detect_anomaly prints the forward traceback)."""
import os

import numpy as np

from ctc_testlib import CTC, run

MODEL = '''
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        h = torch.relu(self.fc(x))
        r = torch.{fn}(h)
        return (r * r).sum(dim=1)


model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
example_inputs = {{"forward": (torch.randn(2, 4),), "train_step": (torch.randn(2, 4), torch.randn(2))}}


def train_step(x, y):
    optimizer.zero_grad()
    loss = F.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    return loss
'''


def build(tmp, fn, *opts):
    py = os.path.join(tmp, "anom.py")
    with open(py, "w") as f:
        f.write(MODEL.format(fn=fn))
    exe = os.path.join(tmp, "net_" + fn + ("_a" if opts else ""))
    run([CTC, "build", py, "-o", exe, *opts])
    return exe


def save(tmp, name, a):
    p = os.path.join(tmp, name)
    np.save(p, a)
    return p


# the second sample drives every unit of fc to a negative value, so relu gives 0 there
X_ZERO = np.array([[0.1, 0.2, 0.3, 0.4], [-50, -50, -50, -50]], np.float32)


def weights(tmp):
    """fc with all-positive weights: the second sample of X_ZERO reaches relu at 0."""
    from ctc_testlib import st_write
    w = os.path.join(tmp, "w.safetensors")
    st_write(w, {"fc.weight": np.full((3, 4), 0.5, np.float32), "fc.bias": np.zeros(3, np.float32)})
    return w


def test_forward_nan_names_the_op_and_line(tmp_path):
    tmp = str(tmp_path)
    exe = build(tmp, "log", "--anomaly")
    r = run([exe, "infer", "--weights", weights(tmp), "--input", save(tmp, "x.npy", X_ZERO)], check=False)
    assert r.returncode == 1, r
    assert "-Inf in 'r' (element 3) computed by log at anom.py:14 (forward of entry 'forward'): r = torch.log(h)" \
        in r.stderr, r.stderr


def test_backward_nan_names_the_forward_line(tmp_path):
    """sqrt at 0: its backward divides 0 by 0 (PyTorch's detect_anomaly reports
    SqrtBackward0 returning nan, with the forward line of the sqrt)."""
    tmp = str(tmp_path)
    exe = build(tmp, "sqrt", "--anomaly")
    w = weights(tmp)
    x, y = save(tmp, "x.npy", X_ZERO), save(tmp, "y.npy", np.zeros(2, np.float32))
    r = run([exe, "infer", "--weights", w, "--input", x])   # the forward is finite
    r = run([exe, "run", "train_step", "--weights", w, "--input", x, "--input", y], check=False)
    assert r.returncode == 1, r
    assert "anomaly in entry 'train_step': NaN in" in r.stderr, r.stderr
    assert "in the backward pass of entry 'train_step', differentiating anom.py:14: r = torch.sqrt(h)" in r.stderr, \
        r.stderr
    # the training loop reports it with its epoch and step
    xs, ys = save(tmp, "xs.npy", np.tile(X_ZERO, (2, 1))), save(tmp, "ys.npy", np.zeros(4, np.float32))
    r = run([exe, "train", "--weights", w, "--data", xs, "--labels", ys, "--epochs", "1", "--no-shuffle"], check=False)
    assert r.returncode == 1 and "anomaly in entry 'train_step' at epoch 1, step 1:" in r.stderr, r.stderr


def test_same_results_and_no_checks_without_the_flag(tmp_path):
    tmp = str(tmp_path)
    plain, checked = build(tmp, "sqrt"), build(tmp, "sqrt", "--anomaly")
    assert "ctc_anomaly_check" not in open(plain + ".c").read()
    assert "ctc_anomaly_check" in open(checked + ".c").read()
    x = save(tmp, "x.npy", np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32) + 3)
    w = weights(tmp)
    outs = []
    for exe in (plain, checked):
        o = os.path.join(tmp, os.path.basename(exe) + ".npy")
        run([exe, "infer", "--weights", w, "--input", x, "--output", o])
        outs.append(np.load(o))
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-6)

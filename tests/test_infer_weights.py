"""`./net infer` says what it runs on and what it computed (issue 28, item 4).

Without `--weights` a program with parameters refuses (exit 1, naming both ways out)
instead of running on its random initial parameters; `--random-weights` runs on them on
purpose. Without `--output` it prints a short summary of each output (dtype and shape,
min / max / mean, the first values, a 2-D output's argmax per row), which the test reads
back against PyTorch's forward on the same weights and input."""
import re

import numpy as np
import torch

from ctc_testlib import CTC, load_module, run, st_write, state_dict_np

MODEL = """\
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(12, 16)
        self.fc2 = nn.Linear(16, 5)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


model = Net()
example_inputs = {"forward": (torch.zeros(3, 12),)}
"""


def _build(tmp_path):
    path = tmp_path / "net.py"
    path.write_text(MODEL)
    exe = tmp_path / "net"
    run([CTC, "build", path, "-o", exe])
    return path, exe


def test_infer_without_weights_refuses(tmp_path):
    _, exe = _build(tmp_path)
    np.save(tmp_path / "x.npy", np.ones((3, 12), np.float32))
    r = run([exe, "infer", "--input", tmp_path / "x.npy", "--output", tmp_path / "o.npy"], check=False)
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    assert "--weights" in r.stderr and "--random-weights" in r.stderr, r.stderr
    assert not (tmp_path / "o.npy").exists(), "nothing written when it refuses"
    # both at once is a usage error too
    r = run([exe, "infer", "--weights", tmp_path / "w.safetensors", "--random-weights",
             "--input", tmp_path / "x.npy"], check=False)
    assert r.returncode != 0 and "exclude each other" in r.stderr, r.stderr
    # on purpose: runs, exit 0
    run([exe, "infer", "--random-weights", "--input", tmp_path / "x.npy", "--output", tmp_path / "o.npy"])
    assert np.load(tmp_path / "o.npy").shape == (3, 5)


def test_infer_without_output_prints_a_summary(tmp_path):
    path, exe = _build(tmp_path)
    mod = load_module(str(path), "infer_weights_net")
    torch.manual_seed(3)
    for p in mod.model.parameters():
        torch.nn.init.normal_(p)
    w = tmp_path / "w.safetensors"
    st_write(w, state_dict_np(mod.model))
    x = np.random.default_rng(0).standard_normal((3, 12)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    r = run([exe, "infer", "--weights", w, "--input", tmp_path / "x.npy"])
    with torch.no_grad():
        want = mod.model(torch.from_numpy(x)).double().numpy()
    head = re.search(r"output '(\w+)' f32\[3, ?5\]: min (\S+), max (\S+), mean (\S+)\n", r.stdout)
    assert head, r.stdout
    lo, hi, mean = (float(v) for v in head.groups()[1:])
    # printed with 6 significant digits (%.6g): float32 rounding is below that
    assert np.allclose([lo, hi, mean], [want.min(), want.max(), want.mean()], rtol=2e-5, atol=1e-5), \
        (r.stdout, want.min(), want.max(), want.mean())
    first = re.search(r"first values:([^\n]*)", r.stdout)
    assert first, r.stdout
    vals = [float(v) for v in first.group(1).replace("...", "").split()]
    assert len(vals) >= 5
    assert np.allclose(vals, want.reshape(-1)[:len(vals)], rtol=2e-5, atol=1e-5), (vals, want.reshape(-1))
    arg = re.search(r"argmax of rows 0 to 2:([^\n]*)", r.stdout)
    assert arg, r.stdout
    assert [int(v) for v in arg.group(1).split()] == list(want.argmax(axis=1)), (arg.group(1), want)

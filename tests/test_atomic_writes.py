"""Writes that never lose the old file (issue 12, item 1): the generated program's
--save (safetensors), --output (.npy) and --log, and ctc's own model.c/.h, go to a
temporary file beside the destination that is fsync'ed and renamed over it. A write
that fails half-way (RLIMIT_FSIZE with SIGXFSZ ignored: write() fails with EFBIG
past a byte budget, as on a full disk, for stdio and raw writes alike) must report
the path, exit non-zero, leave the earlier file byte-identical and leave no
temporary file behind."""
import os
import resource
import signal
import subprocess

import numpy as np
import pytest

from ctc_testlib import CTC, run, st_write, state_dict_np, load_module

MODEL = """\
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 32)

    def forward(self, x):
        return self.fc(x)


model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)


def train_step(x, y):
    optimizer.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


example_inputs = {"forward": (torch.randn(4, 64),), "train_step": (torch.randn(4, 64), torch.randint(0, 32, (4,)))}
"""


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("atomic")
    (tmp / "m.py").write_text(MODEL)
    run([CTC, "build", tmp / "m.py", "-o", tmp / "net"])
    mod = load_module(str(tmp / "m.py"), "atomic_model")
    st_write(tmp / "w0.safetensors", state_dict_np(mod.model))
    rng = np.random.default_rng(0)
    np.save(tmp / "x.npy", rng.standard_normal((4, 64)).astype(np.float32))
    np.save(tmp / "y.npy", rng.integers(0, 32, 4).astype(np.int64))
    return tmp


def failing_run(args, budget):
    """Runs args with file writes failing (EFBIG) past `budget` bytes of any one file."""
    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (budget, budget))
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, preexec_fn=limit,
                          env=dict(os.environ, CTC_NO_REEXEC="1"))


def leftovers(d):
    return [p.name for p in d.iterdir() if ".tmp." in p.name]


@pytest.mark.parametrize("budget", [0, 100, 5000])
def test_failed_save_keeps_the_old_checkpoint(setup, budget):
    tmp = setup
    out = tmp / "ckpt.safetensors"
    args = [tmp / "net", "run", "train_step", "--weights", tmp / "w0.safetensors", "--input", tmp / "x.npy",
            "--input", tmp / "y.npy", "--save", out, "--save-training-state"]
    run(args)   # a good checkpoint first
    before = out.read_bytes()
    assert len(before) > 5000
    r = failing_run(args, budget)
    assert r.returncode == 2, r.stderr
    assert str(out) in r.stderr and "File too large" in r.stderr, r.stderr
    assert out.read_bytes() == before
    assert not leftovers(tmp)


def test_failed_output_keeps_the_old_npy(setup):
    tmp = setup
    out = tmp / "y_out.npy"
    args = [tmp / "net", "infer", "--weights", tmp / "w0.safetensors", "--input", tmp / "x.npy", "--output", out]
    run(args)
    before = out.read_bytes()
    r = failing_run(args, 200)
    assert r.returncode == 2 and str(out) in r.stderr, r.stderr
    assert out.read_bytes() == before
    assert not leftovers(tmp)


def test_failed_compile_keeps_the_old_model_c(setup):
    tmp = setup
    c = tmp / "gen.c"
    run([CTC, "compile", tmp / "m.py", "-o", c])
    before_c, before_h = c.read_bytes(), (tmp / "gen.h").read_bytes()
    (tmp / "m2.py").write_text(MODEL.replace("nn.Linear(64, 32)", "nn.Linear(64, 16)").replace("(0, 32,", "(0, 16,"))
    r = failing_run([CTC, "compile", tmp / "m2.py", "-o", c], 3000)
    assert r.returncode == 2, r.stderr
    assert "cannot write" in r.stderr and "gen." in r.stderr, r.stderr
    assert c.read_bytes() == before_c and (tmp / "gen.h").read_bytes() == before_h
    assert not leftovers(tmp)
    run([CTC, "compile", tmp / "m2.py", "-o", c])   # without the limit it is replaced
    assert c.read_bytes() != before_c

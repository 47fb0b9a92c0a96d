"""--input on the command line as a PyTorch user writes it (issue 28, item 8): PyTorch's
dtype names, and a name that matches no parameter reported at the entry's def with the
parameters it takes."""
import numpy as np
import pytest
import torch

from ctc_testlib import CTC, MLP_TRAIN_SRC, compare, ctc_build, load_module, run, st_write, state_dict_np

SRC = """import torch
import torch.nn as nn


class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.e = nn.Embedding(10, 4)

    def forward(self, x, i):
        return self.e(i).sum(1) + x
"""


@pytest.mark.parametrize("xs, ispec, out", [
    ("float32", "long", "f32[2,4]"), ("torch.float32", "torch.int64", "f32[2,4]"), ("float", "int64", "f32[2,4]"),
    ("double", "int32", "f64[2,4]"), ("float64", "int", "f64[2,4]"), ("f32", "i64", "f32[2,4]"),
])
def test_pytorch_dtype_names(tmp_path, xs, ispec, out):
    p = tmp_path / "m.py"
    p.write_text(SRC)
    r = run([CTC, "check", p, "--input", f"x={xs}[2,4]", "--input", f"i={ispec}[2,3]"])
    assert f"entry forward -> {out}" in r.stdout, r.stdout


def test_bad_dtype_lists_the_names(tmp_path):
    p = tmp_path / "m.py"
    p.write_text(SRC)
    r = run([CTC, "check", p, "--input", "x=complex64[2,4]"], check=False)
    assert r.returncode != 0
    assert "bad --input 'x=complex64[2,4]'" in r.stderr and "float32 float float64 double int64 long" in r.stderr, r.stderr


def test_misspelt_input_name(tmp_path):
    """A wrong name leaves a parameter's shape unknown: the error at that parameter says
    which names were given; a name no entry has is reported at the entry's def with
    every entry's parameters (it was at m.py:1:1, naming none)."""
    p = tmp_path / "m.py"
    p.write_text(SRC)
    r = run([CTC, "check", p, "--input", "y=f32[2,4]", "--input", "i=i64[2,3]"], check=False)
    assert r.returncode == 1
    assert "m.py:10:23: error: the shape of input 'x' is unknown" in r.stderr, r.stderr
    assert "forward takes (x, i), and --input names y" in r.stderr, r.stderr
    r = run([CTC, "check", p, "--input", "x=f32[2,4]", "--input", "i=i64[2,3]", "--input", "z=f32[3]"], check=False)
    assert r.returncode == 1
    assert "m.py:10:5: error: --input z: no compiled entry has a parameter named 'z' (forward takes (x, i))" \
        in r.stderr, r.stderr


BARE = """import torch
import torch.nn as nn
import torch.nn.functional as F

model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)


def train_step(x, y):
    optimizer.zero_grad()
    loss = F.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    return loss
"""


def test_bare_module_with_several_inputs(tmp_path):
    """Issue 30: a bare nn.Sequential model given several --input options (its own and a
    training entry's) takes the one named 'input', as PyTorch's forward(input) is named;
    without one the error says so."""
    p = tmp_path / "bare.py"
    p.write_text(BARE)
    r = run([CTC, "check", p, "--input", "input=f32[5,4]", "--input", "x=f32[5,4]", "--input", "y=f32[5,2]"])
    assert "entry forward -> f32[5,2]" in r.stdout and "entry train_step" in r.stdout, r.stdout
    r = run([CTC, "check", p, "--input", "x=f32[5,4]", "--input", "y=f32[5,2]"], check=False)
    assert r.returncode == 1 and "the model's is the one named 'input'" in r.stderr, r.stderr


# ctc_testlib's MLP file with only train_step's example
TRAIN_ONLY = MLP_TRAIN_SRC.replace('example_inputs = {"forward": (torch.randn(8, 20),), ', "example_inputs = {")


def test_train_step_example_only(tmp_path):
    """A training file whose example_inputs dict gives only train_step's example (a
    pytorch-cifar model with a train_step added): with `--entry train_step` the entry
    compiles and trains as PyTorch does, and forward, whose input shape nothing gives, is
    listed as skipped instead of stopping the build; `infer` then says the program has no
    forward. Without --entry the error at forward's parameter says to add a "forward"
    example to the dict (it said to define a tuple). A forward example compiles forward too."""
    p = tmp_path / "net.py"
    p.write_text(TRAIN_ONLY)
    r = run([CTC, "check", p], check=False)
    assert r.returncode == 1
    assert TRAIN_ONLY != MLP_TRAIN_SRC
    assert ("net.py:13:23: error: the shape of input 'x' is unknown: pass --input x=f32[...] or add \"forward\": "
            "(torch.randn(...), ...) to the example_inputs dict in the file") in r.stderr, r.stderr
    r = run([CTC, "check", p, "--entry", "train_step"])
    assert "entry train_step -> f32[]" in r.stdout and "entry forward" not in r.stdout, r.stdout
    assert ("skipped forward (line 13): the shape of its input 'x' is unknown (give --input x=f32[...] or a "
            "\"forward\" example in example_inputs to compile it for ./net infer)") in r.stdout, r.stdout
    exe = tmp_path / "net"
    ctc_build(str(p), str(exe), "--entry", "train_step")
    mod = load_module(str(p), "train_only_net")
    w = tmp_path / "w.safetensors"
    st_write(w, state_dict_np(mod.model))
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((8, 20)).astype(np.float32), rng.integers(0, 4, 8).astype(np.int64)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    run([exe, "run", "train_step", "--weights", w, "--input", tmp_path / "x.npy", "--input", tmp_path / "y.npy",
         "--output", tmp_path / "loss.npy"])
    want = mod.train_step(torch.from_numpy(x), torch.from_numpy(y)).detach().numpy()
    compare("loss", np.load(tmp_path / "loss.npy"), want, 1e-5, 1e-6)
    r = run([exe, "infer", "--random-weights", "--input", tmp_path / "x.npy"], check=False)
    assert r.returncode == 1
    assert "infer runs the model's forward, which this program does not have (`ctc check` says why); run an entry " \
           f"by name: `{exe} run train_step`" in r.stderr, r.stderr
    p.write_text(MLP_TRAIN_SRC)
    r = run([CTC, "check", p, "--entry", "train_step"])
    assert "entry forward -> f32[8,4]" in r.stdout and "skipped" not in r.stdout, r.stdout

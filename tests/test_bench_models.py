"""The bench models of ../shared/bench/models that bench/bench.py runs by default, against
PyTorch: llama (RMSNorm, rotary embeddings, grouped-query causal attention, SwiGLU, its mask
from torch.full(...).triu(1) on a 4-D tensor) and resnet; and torch.triu/tril of N-D
compile-time tensors, which llama's __init__ needs."""
import copy
import os

import numpy as np
import pytest

from ctc_testlib import BENCH, BENCH_TRAIN_STEP, CTC, compare, load_module, run, st_read, st_write, state_dict_np

torch = pytest.importorskip("torch")

TRI = """
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        base = torch.arange(2 * 3 * 5 * 4, dtype=torch.float32).reshape(2, 3, 5, 4) - 50.0
        self.register_buffer("a", torch.full((1, 1, 5, 5), float("-inf")).triu(1))
        self.register_buffer("b", base.tril(-1))
        self.register_buffer("c", torch.triu(base, diagonal=2))
        self.register_buffer("d", torch.tril(base[0], 1))
        self.register_buffer("e", base.triu(-7).tril(6))
        self.register_buffer("f", torch.ones(3, 4, 4, dtype=torch.bool).tril())

    def forward(self, x):
        y = torch.softmax(x + self.a, dim=-1)
        z = x[..., :4] * self.b + self.c - self.d + self.e * self.f.float()[0, 1]
        return y.sum(-1, keepdim=True) + z.sum(-1, keepdim=True) + self.f.float().sum()
"""


def test_triu_tril_of_nd_compile_time_tensors(tmp_path):
    """triu/tril (function and method, with and without diagonal) of 3-D and 4-D tensors made
    in __init__: each matrix of the last two dims, as PyTorch."""
    p = tmp_path / "tri.py"
    p.write_text(TRI)
    exe = tmp_path / "net"
    run([CTC, "build", p, "-o", exe, "--input", "x=f32[2,3,5,5]"])
    x = np.random.default_rng(0).standard_normal((2, 3, 5, 5)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    run([exe, "infer", "--random-weights", "--input", tmp_path / "x.npy", "--output", tmp_path / "o.npy"])
    want = load_module(str(p), "tri_nd").Net()(torch.from_numpy(x)).numpy()
    compare("tri N-D", np.load(tmp_path / "o.npy"), want, 1e-6, 1e-6)


def test_triu_of_a_vector_is_refused(tmp_path):
    p = tmp_path / "bad.py"
    p.write_text(TRI.replace('torch.full((1, 1, 5, 5), float("-inf")).triu(1)', "torch.ones(5).triu(1)"))
    r = run([CTC, "check", p, "--input", "x=f32[2,3,5,5]"], check=False)
    assert r.returncode == 1 and "triu: input tensor must have at least 2 dimensions" in r.stderr, r.stderr
    line = p.read_text().splitlines().index(next(l for l in p.read_text().splitlines() if ".triu(1)" in l)) + 1
    assert f"{p}:{line}:" in r.stderr, r.stderr


def _forward_and_step(tmp, name, xname, x, y, rtol_fwd, rtol_step):
    """Builds ../shared/bench/models/NAME.py with the bench's train step at x's batch; forward
    and one SGD-momentum step from PyTorch's initial weights, against PyTorch."""
    src = tmp / f"{name}.py"
    src.write_text(open(os.path.join(BENCH, f"{name}.py")).read() + BENCH_TRAIN_STEP)
    dt = lambda a: "i64" if a.dtype == np.int64 else "f32"
    spec = lambda n, a: f"{n}={dt(a)}[{','.join(map(str, a.shape))}]"
    exe = tmp / "net"
    specs = ["--input", spec("x", x), "--input", spec("y", y)] + (["--input", spec(xname, x)] if xname != "x" else [])
    run([CTC, "build", src, "-o", exe, *specs], timeout=900)
    torch.manual_seed(0)
    mod = load_module(str(src), "bench_" + name)
    w = tmp / "w.safetensors"
    st_write(w, state_dict_np(mod.model))
    np.save(tmp / "x.npy", x)
    np.save(tmp / "y.npy", y)
    run([exe, "infer", "--weights", w, "--input", tmp / "x.npy", "--output", tmp / "o.npy"], timeout=600)
    run([exe, "run", "train_step", "--weights", w, "--input", tmp / "x.npy", "--input", tmp / "y.npy",
         "--output", tmp / "loss.npy", "--save", tmp / "after.safetensors"], timeout=600)
    with torch.no_grad():   # the forward entry is inference (eval mode), on a copy: the step starts from train mode
        want = copy.deepcopy(mod.model).eval()(torch.from_numpy(x)).numpy()
    compare(f"{name} forward", np.load(tmp / "o.npy"), want, rtol_fwd, 1e-5)
    loss = float(mod.train_step(torch.from_numpy(x), torch.from_numpy(y)))
    compare(f"{name} loss", np.load(tmp / "loss.npy"), np.float32(loss), rtol_fwd, 1e-5)
    after = st_read(str(tmp / "after.safetensors"))
    sd = mod.model.state_dict()
    assert set(after) == set(sd), set(after) ^ set(sd)
    for k, v in sd.items():
        compare(f"{name} {k} after a step", after[k], v.numpy(), rtol_step, 1e-5)


@pytest.mark.skipif(not os.path.exists(os.path.join(BENCH, "llama.py")), reason="../shared/bench/models/llama.py missing")
def test_llama_forward_and_train_step_match_torch(tmp_path):
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 512, (2, 128)), rng.integers(0, 512, (2, 128))
    _forward_and_step(tmp_path, "llama", "idx", x, y, 1e-4, 1e-3)


@pytest.mark.slow
def test_gpt_forward_and_train_step_match_torch(tmp_path):
    """gpt at T = 100 (not a multiple of the fused attention's blocks): its causal attention is
    fused in forward and in the train step's backward (tests/test_attention.py)."""
    rng = np.random.default_rng(1)
    x, y = rng.integers(0, 256, (2, 100)), rng.integers(0, 256, (2, 100))
    _forward_and_step(tmp_path, "gpt", "idx", x, y, 1e-4, 1e-3)


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists(os.path.join(BENCH, "resnet.py")), reason="../shared/bench/models/resnet.py missing")
def test_resnet_forward_and_train_step_match_torch(tmp_path):
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((4, 3, 32, 32)).astype(np.float32), rng.integers(0, 10, 4)
    _forward_and_step(tmp_path, "resnet", "x", x, y, 1e-4, 1e-3)

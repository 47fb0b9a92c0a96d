"""Gradient checking: `ctc build --dtype f64` compiles the whole model in double
precision and adds the hidden entries __grad_<entry> (reverse mode) and
__jvp_<entry> (forward mode); `./net gradcheck [ENTRY]` compares them with
central differences of the compiled function (torch.autograd.gradcheck's eps,
atol, rtol and report). It passes for every example model, fails (exit 1,
naming the input) when one VJP or JVP rule is wrong (the test-only
CTC_TEST_WRONG_VJP / CTC_TEST_WRONG_JVP hook of autograd_ad/gradcheck.c), and an
f64 program computes what PyTorch computes under torch.set_default_dtype(float64)."""
import os

import numpy as np
import pytest
import torch

from ctc_testlib import CTC, EXAMPLES, load_module, run, st_write, state_dict_np

ONE_THREAD = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")

TINY = '''
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(5, 4)
        self.fc2 = nn.Linear(4, 3)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
example_inputs = {"forward": (torch.randn(2, 5),), "train_step": (torch.randn(2, 5), torch.randint(0, 3, (2,)))}


def train_step(x, y):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss
'''


def _run(args, env=ONE_THREAD, check=True):
    import subprocess
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True, env=env, timeout=300)
    if check and r.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, args))} -> {r.returncode}\n{r.stdout}\n{r.stderr}")
    return r


def _build(tmp_path, src, name, *opts, env=None):
    exe = tmp_path / name
    _run([CTC, "build", src, "-o", exe, "--dtype", "f64", *opts], env=env or ONE_THREAD)
    return exe


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("gc")
    src = d / "tiny.py"
    src.write_text(TINY)
    return d, src, _build(d, src, "net")


def test_gradcheck_tiny_all_entries_and_info(tiny):
    d, src, exe = tiny
    ir = _run([CTC, "compile", src, "--dtype", "f64", "--emit", "ir"]).stdout
    assert "f64[" in ir and "f32" not in ir, ir   # optimizer state and the lr included
    info = _run([exe, "info"]).stdout
    assert "input  x f64[2, 5]" in info and "fc1.weight f64[4, 5]" in info, info
    assert "entry __grad_train_step" in info and "entry __jvp_forward" in info, info
    out = _run([exe, "gradcheck", "--int-max", "3"]).stdout
    # every element: x (10) + parameters (20 + 4 + 12 + 3) per entry
    assert "gradcheck forward: ok: reverse mode 49 elements of 5 tensors" in out, out
    assert "gradcheck train_step: ok: reverse mode 49 elements of 5 tensors" in out, out
    one = _run([exe, "gradcheck", "train_step", "--int-max", "3", "--samples", "2"]).stdout
    assert one.startswith("gradcheck train_step: ok: reverse mode 10 elements of 5 tensors"), one
    assert "gradcheck forward" not in one, one


@pytest.mark.parametrize("env_var,mode", [("CTC_TEST_WRONG_VJP", "reverse"), ("CTC_TEST_WRONG_JVP", "forward")])
def test_gradcheck_catches_a_wrong_rule(tiny, env_var, mode):
    d, src, _ = tiny
    exe = _build(d, src, f"bad_{mode}", env=dict(ONE_THREAD, **{env_var: "matmul"}))
    r = _run([exe, "gradcheck", "forward"], check=False)
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    assert f"gradcheck forward: {mode} mode: Jacobian mismatch" in r.stdout, r.stdout
    # the first checked tensor is the input x, whose adjoint/tangent goes through the wrong matmul rule
    assert "with respect to input 0 ('x')" in r.stdout, r.stdout
    assert "numerical: " in r.stdout and "analytical: " in r.stdout, r.stdout


def test_gradcheck_needs_f64(tiny, tmp_path):
    d, src, _ = tiny
    exe = tmp_path / "net32"
    _run([CTC, "build", src, "-o", exe])
    r = _run([exe, "gradcheck"], check=False)
    assert r.returncode == 1 and "--dtype f64" in r.stderr, (r.stdout, r.stderr)
    r = _run([CTC, "build", src, "-o", exe, "--dtype", "f16"], check=False)
    assert r.returncode == 1 and "bad --dtype 'f16'" in r.stderr, r.stderr


def test_f64_forward_equals_torch_float64(tmp_path):
    """mlp_sequential in f64 against PyTorch under set_default_dtype(float64), with
    f64 weights and f32 input data (converted on load), and with f32 weights."""
    src = os.path.join(EXAMPLES, "mlp_sequential.py")
    exe = _build(tmp_path, src, "mlp", "--input", "x=f32[3,1,28,28]")
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        torch.manual_seed(0)
        m = load_module(src, "mlp_f64").model.eval()
        x32 = np.random.RandomState(0).randn(3, 1, 28, 28).astype(np.float32)
        np.save(tmp_path / "x.npy", x32)
        for wdt in (np.float64, np.float32):
            sd = {k: v.astype(wdt) for k, v in state_dict_np(m).items()}
            st_write(tmp_path / "w.safetensors", sd)
            m.load_state_dict({k: torch.from_numpy(v.astype(np.float64)) for k, v in sd.items()})
            want = m(torch.from_numpy(x32.astype(np.float64))).detach().numpy()
            _run([exe, "infer", "--weights", tmp_path / "w.safetensors", "--input", tmp_path / "x.npy",
                  "--output", tmp_path / "y.npy"])
            got = np.load(tmp_path / "y.npy")
            assert got.dtype == np.float64
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=0)
    finally:
        torch.set_default_dtype(old)
    out = _run([exe, "gradcheck", "--samples", "16"]).stdout
    assert "gradcheck forward: ok" in out, out


EXAMPLE_CHECKS = [
    ("cifar_net.py", ["--input", "x=f32[1,3,32,32]"], []),
    ("seed_cnn.py", ["--input", "t=f32[2,1,28,28]", "--input", "images=f32[2,1,28,28]", "--input", "labels=i64[2]"],
     ["--int-max", "10"]),
    ("hessian_top_eigenvalue.py", ["--input", "W=f32[5,3]", "--input", "b=f32[3]", "--input", "VW=f32[5,3]",
                                   "--input", "Vb=f32[3]", "--input", "X=f32[4,5]", "--input", "y=i64[4]"],
     ["--int-max", "3"]),
    ("mlp_sequential.py", [], ["--int-max", "10"]),
    # its decode/prefill entries (the KV cache ctc derives) are inference only: no hidden entries
    ("char_gpt.py", ["--input", "idx=i64[1,8]", "--input", "x=i64[1,8]", "--input", "y=i64[1,8]"], ["--int-max", "60"]),
]


@pytest.mark.slow
@pytest.mark.parametrize("name,build_opts,gc_opts", EXAMPLE_CHECKS, ids=[c[0] for c in EXAMPLE_CHECKS])
def test_gradcheck_examples(tmp_path, name, build_opts, gc_opts):
    """Every example model (mlp_sequential's forward also against torch.float64:
    test_f64_forward_equals_torch_float64)."""
    exe = _build(tmp_path, os.path.join(EXAMPLES, name), "net", *build_opts)
    entries = [ln.split()[1].rstrip(":") for ln in _run([exe, "info"]).stdout.splitlines()
               if ln.startswith("entry __grad_")]
    assert entries and not any(e in ("__grad_decode", "__grad_prefill") for e in entries), (name, entries)
    out = _run([exe, "gradcheck", "--samples", "24", *gc_opts]).stdout
    for e in entries:
        assert f"gradcheck {e[len('__grad_'):]}: ok" in out, out


LITERALS = '''
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("k", torch.tensor([0.1, 0.3]) * 3.0 + 0.1)

    def forward(self, x):
        return (x * 0.1 + self.k * 0.7) / 3.0 + torch.full((2,), 0.3)


model = Net()
example_inputs = (torch.ones(2),)
'''


def test_f64_literals_and_compile_time_data(tmp_path):
    """Compile-time tensor arithmetic and literals are not rounded to f32 in f64 programs."""
    src = tmp_path / "lit.py"
    src.write_text(LITERALS)
    exe = _build(tmp_path, src, "lit")
    x = np.array([1.0, 3.0])
    np.save(tmp_path / "x.npy", x)
    _run([exe, "infer", "--random-weights", "--input", tmp_path / "x.npy", "--output", tmp_path / "y.npy"])
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        want = load_module(src, "lit_f64").model(torch.from_numpy(x)).numpy()
    finally:
        torch.set_default_dtype(old)
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), want, rtol=1e-15, atol=0)


def test_f64_train_step_equals_torch_float64(tiny, tmp_path):
    """Two SGD-with-momentum steps in f64 (parameters and momentum buffers f64, saved as f64)."""
    d, src, exe = tiny
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        mod = load_module(src, "tiny_f64")
        rs = np.random.RandomState(1)
        x, y = rs.randn(2, 5), np.array([2, 0])
        st_write(tmp_path / "w0.safetensors", state_dict_np(mod.model))
        np.save(tmp_path / "x.npy", x.astype(np.float32))   # f32 data into the f64 input
        np.save(tmp_path / "y.npy", y)
        w = tmp_path / "w0.safetensors"
        for step in range(2):
            loss = mod.train_step(torch.from_numpy(x.astype(np.float32).astype(np.float64)), torch.from_numpy(y))
            out = tmp_path / f"w{step + 1}.safetensors"
            _run([exe, "run", "train_step", "--weights", w, "--input", tmp_path / "x.npy", "--input",
                  tmp_path / "y.npy", "--output", tmp_path / "loss.npy", "--save", out, "--save-training-state"])
            w = out
            np.testing.assert_allclose(np.load(tmp_path / "loss.npy"), loss.item(), rtol=1e-12)
        from ctc_testlib import st_read
        got = st_read(w)
        for k, v in mod.model.state_dict().items():
            assert got[k].dtype == np.float64, (k, got[k].dtype)
            np.testing.assert_allclose(got[k], v.numpy(), rtol=1e-12, atol=1e-15)
        mom = [k for k in got if "momentum" in k]
        assert mom and all(got[k].dtype == np.float64 for k in mom), list(got)
    finally:
        torch.set_default_dtype(old)

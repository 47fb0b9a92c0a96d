"""torch.autocast('cuda') on the CUDA target (docs/mixed-precision.md), without a GPU.

No GPU is available here: the CUDA programs run under the emulation header
(`ctc build --target cuda --emulate`, runtime_min/cuda_emu), whose cublasGemmEx
down-converts its f32 operands to bf16/f16 as tensor cores read them and sums in double.

- An MLP (Linear, ReLU, MSE loss: PyTorch's CPU and CUDA lists agree on these) in a
  'cuda' region, bf16 and f16, forward and 3 SGD-momentum steps on the emulated CUDA target,
  against the C target's build of the same file with a 'cpu' region (equal up to GEMM
  summation order) and, for bf16, PyTorch 1.13's CPU autocast run.
- A 2-block GPT (the one of test_autocast.py) in a 'cuda' region, where the lists differ
  (CUDA: softmax, layer_norm and cross_entropy in f32): forward and 3 training steps held to
  their distance to a float64 run, against PyTorch's CPU bf16 run's distance.
- The .cu runs the GEMMs of rounded operands through cublasGemmEx with
  CUBLAS_COMPUTE_32F_FAST_16BF / _16F, compiles with nvcc (sm_80, sm_90, warnings as errors)
  and passes --validate; the C target disables a 'cuda' region with a note, as PyTorch does
  without CUDA; the refusals."""
import math
import os
import re
import subprocess

import numpy as np
import pytest
import torch

from ctc_testlib import CTC, load_module, run, st_read, st_write, state_dict_np
from cuda_testlib import NVCC, RT, run_env
from test_autocast import GPT, HEAD, bf16_ulp

MLP = HEAD + '''
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(20, 64)
        self.fc2 = nn.Linear(64, 64)
        self.fc3 = nn.Linear(64, 10)

    def forward(self, x):
        with torch.autocast(DEVICE, dtype=DTYPE):
            h = F.relu(self.fc1(x))
            h = F.relu(self.fc2(h)) + h
            return self.fc3(h).float()


model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def train_step(x, y):
    optimizer.zero_grad()
    with torch.autocast(DEVICE, dtype=DTYPE):
        loss = F.mse_loss(model.fc3(F.relu(model.fc2(F.relu(model.fc1(x))))), y)
    loss.backward()
    optimizer.step()
    return loss


example_inputs = {"forward": (torch.randn(16, 20),), "train_step": (torch.randn(16, 20), torch.randn(16, 10))}
'''

GPT_FILE = GPT + '''

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.m = GPT()

    def forward(self, idx):
        with torch.autocast(DEVICE, dtype=DTYPE):
            return self.m(idx).float()


model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def train_step(idx, targets):
    optimizer.zero_grad()
    with torch.autocast(DEVICE, dtype=DTYPE):
        logits = model.m(idx)
        loss = F.cross_entropy(logits.view(-1, V), targets.view(-1))
    loss.backward()
    optimizer.step()
    return loss


example_inputs = {"forward": (torch.zeros(4, T, dtype=torch.long),),
                  "train_step": (torch.zeros(4, T, dtype=torch.long), torch.zeros(4, T, dtype=torch.long))}
'''

DT = {"bf16": "torch.bfloat16", "f16": "torch.float16"}


def write(tmp, text, device, dt, stem):
    p = tmp / f"{stem}_{device}_{dt}.py"
    p.write_text(text.replace("DEVICE", repr(device)).replace("DTYPE", DT[dt]))
    return p


def f16_ulp(x):
    x = np.maximum(np.abs(np.asarray(x, np.float64)), 2.0 ** -14)
    return 2.0 ** (np.floor(np.log2(x)) - 10)


def build(tmp, path, cuda):
    exe = tmp / (path.stem + ("_cuda" if cuda else "_c"))
    run([CTC, "build", path, "-o", exe, *(["--target", "cuda", "--emulate"] if cuda else [])], timeout=600)
    return exe


def steps(tmp, exe, w0, batches, tag):
    """forward on batches[0][0], then len(batches) train_step calls; the outputs, losses and weights"""
    np.save(tmp / "x0.npy", batches[0][0])
    out = tmp / f"{tag}_fwd.npy"
    run_env([exe, "run", "forward", "--weights", w0, "--input", tmp / "x0.npy", "--output", out])
    fwd = np.load(out)
    w, losses = w0, []
    for s, (x, y) in enumerate(batches):
        np.save(tmp / "x.npy", x)
        np.save(tmp / "y.npy", y)
        w_next = tmp / f"{tag}_w{s + 1}.safetensors"
        run_env([exe, "run", "train_step", "--weights", w, "--input", tmp / "x.npy", "--input", tmp / "y.npy",
                 "--output", tmp / "loss.npy", "--save", w_next, "--save-training-state"])
        losses.append(float(np.load(tmp / "loss.npy")))
        w = w_next
    return fwd, losses, st_read(w)


def dist(a, b, keys):
    return math.sqrt(sum(float(((np.asarray(a[k], np.float64) - np.asarray(b[k], np.float64)) ** 2).sum())
                         for k in keys))


def torch_train(mod, init, batches, loss_fn, autocast, dtype=torch.float32):
    """PyTorch's CPU run of the same steps (bf16 autocast, or f32 / f64 without)."""
    m = mod.Net().to(dtype)
    m.load_state_dict(init)
    opt = torch.optim.SGD(m.parameters(), lr=mod.optimizer.defaults["lr"], momentum=0.9)
    x0 = torch.from_numpy(batches[0][0])
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        fwd = m(x0.double() if dtype == torch.float64 and x0.is_floating_point() else x0)
    for x, y in batches:
        x, y = torch.from_numpy(x), torch.from_numpy(y)
        if dtype == torch.float64 and x.is_floating_point():
            x, y = x.double(), y.double()
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = loss_fn(m, x, y)
        loss.backward()
        opt.step()
    return fwd.double().numpy(), {k: v.double().numpy() for k, v in m.state_dict().items()}


@pytest.mark.parametrize("dt", ["bf16", "f16"])
def test_mlp_emulated_against_c_target_and_torch(tmp_path, dt):
    cu_py, c_py = write(tmp_path, MLP, "cuda", dt, "mlp"), write(tmp_path, MLP, "cpu", dt, "mlp")
    mod = load_module(str(c_py), f"acc_mlp_{dt}")
    torch.manual_seed(0)
    init = {k: v.clone() for k, v in mod.Net().state_dict().items()}
    w0 = tmp_path / "w0.safetensors"
    st_write(w0, {k: v.numpy() for k, v in init.items()})
    rng = np.random.default_rng(1)
    batches = [((rng.standard_normal((16, 20)) * 2).astype(np.float32), rng.standard_normal((16, 10)).astype(np.float32))
               for _ in range(3)]
    cu_exe = build(tmp_path, cu_py, True)
    cu_src = open(str(cu_exe) + ".cu").read()
    fast = "CUBLAS_COMPUTE_32F_FAST_16BF" if dt == "bf16" else "CUBLAS_COMPUTE_32F_FAST_16F"
    n_lp = len(re.findall(r"ctc_gemm_lp\(" + fast, cu_src))
    assert n_lp >= 3 and "ctc_gemm_f32(ctc_blas" not in cu_src, "every GEMM of the MLP has rounded operands"
    got = steps(tmp_path, cu_exe, w0, batches, "cuda")
    ref = steps(tmp_path, build(tmp_path, c_py, False), w0, batches, "c")
    ulp = bf16_ulp if dt == "bf16" else f16_ulp
    d = np.abs(got[0] - ref[0])
    print(f"{dt} mlp: {n_lp} cublasGemmEx calls; forward max |cuda emu - C target| {d.max():.3g}")
    assert (d <= ulp(ref[0])).all(), "the CUDA target's forward differs from the C target's by more than a rounding"
    keys = list(init)
    dw = max(float(np.abs(got[2][k] - ref[2][k]).max()) for k in keys)
    print(f"{dt} mlp: after 3 steps max |cuda emu - C target| weights {dw:.3g}, losses {got[1]} vs {ref[1]}")
    np.testing.assert_allclose(got[1], ref[1], rtol=2e-3)
    assert dw <= 1e-3
    if dt != "bf16":
        return   # PyTorch 1.13 has no CPU float16 autocast (test_grad_scaler.py holds ctc's f16 to PyTorch 2.x)

    def loss_fn(m, x, y):
        return torch.nn.functional.mse_loss(m.fc3(torch.relu(m.fc2(torch.relu(m.fc1(x))))), y)

    t_fwd, t_bf = torch_train(mod, init, batches, loss_fn, True)
    _, t_32 = torch_train(mod, init, batches, loss_fn, False)
    d = np.abs(got[0] - t_fwd)
    assert (d <= bf16_ulp(t_fwd)).all(), f"forward: {d.max():.3g} from PyTorch's bf16 autocast"
    d_ct, d_tt = dist(got[2], t_bf, keys), dist(t_bf, t_32, keys)
    print(f"bf16 mlp: forward max |cuda emu - torch cpu bf16| {d.max():.3g}; after 3 steps |cuda emu - torch bf16| "
          f"{d_ct:.3g}, |torch bf16 - torch f32| {d_tt:.3g}")
    assert d_ct <= d_tt


@pytest.mark.parametrize("dt", ["bf16", "f16"])
def test_gpt_emulated_float64_distance(tmp_path, dt):
    cu_py = write(tmp_path, GPT_FILE, "cuda", dt, "gpt")
    mod = load_module(str(write(tmp_path, GPT_FILE, "cpu", "bf16", "gpt")), f"acc_gpt_{dt}")
    torch.manual_seed(0)
    net = mod.Net()
    with torch.no_grad():
        for q in net.parameters():
            q.add_(0.1 * torch.randn_like(q))
    init = {k: v.clone() for k, v in net.state_dict().items()}
    w0 = tmp_path / "w0.safetensors"
    st_write(w0, {k: v.numpy() for k, v in init.items()})
    rng = np.random.default_rng(2)
    batches = [(rng.integers(0, 32, (4, 8)), rng.integers(0, 32, (4, 8))) for _ in range(3)]
    cu_exe = build(tmp_path, cu_py, True)
    cu_src = open(str(cu_exe) + ".cu").read()
    n_lp, n_f32 = cu_src.count("CTC_CUBLAS(ctc_gemm_lp("), cu_src.count("CTC_CUBLAS(ctc_gemm_f32(")
    got = steps(tmp_path, cu_exe, w0, batches, "cuda")

    def loss_fn(m, x, y):
        return torch.nn.functional.cross_entropy(m.m(x).view(-1, 32), y.view(-1))

    r_fwd, r_64 = torch_train(mod, init, batches, loss_fn, False, torch.float64)
    if dt == "bf16":   # PyTorch 1.13's CPU autocast
        t_fwd, t_w = torch_train(mod, init, batches, loss_fn, True)
        what = "torch cpu bf16"
    else:   # the C target's CPU f16 autocast (as far from float64 as PyTorch 2.x's: test_grad_scaler.py)
        t_fwd, _, t_w = steps(tmp_path, build(tmp_path, write(tmp_path, GPT_FILE, "cpu", dt, "gpt"), False), w0,
                              batches, "c")
        what = "ctc C target cpu f16"
    keys = [k for k in init if not k.endswith("mask")]
    fc, ft = float(np.abs(got[0] - r_fwd).max()), float(np.abs(t_fwd - r_fwd).max())
    wc, wt = dist(got[2], r_64, keys), dist(t_w, r_64, keys)
    print(f"{dt} gpt: {n_lp} cublasGemmEx calls, {n_f32} f32 GEMMs; distance to float64: logits ctc cuda {fc:.3g}, "
          f"{what} {ft:.3g}; weights after 3 steps ctc cuda {wc:.3g}, {what} {wt:.3g}; losses {got[1]}")
    assert n_lp >= 8
    assert fc <= 1.5 * ft and wc <= 1.5 * wt


@pytest.mark.skipif(NVCC is None, reason="nvcc not found (the CUDA toolkit is not installed)")
@pytest.mark.parametrize("dt", ["bf16", "f16"])
def test_nvcc_and_validate(tmp_path, dt):
    """the autocast GPT's training .cu: nvcc for sm_80 and sm_90, every warning an error, and --validate"""
    p = write(tmp_path, GPT_FILE, "cuda", dt, "gpt")
    cu = tmp_path / "m.cu"
    r = run([CTC, "compile", p, "--target", "cuda", "--validate", "-o", cu])
    assert "error" not in r.stderr
    assert "cublasGemmEx(" in cu.read_text() and "cublasGemmStridedBatchedEx(" in cu.read_text()
    run([NVCC, "-c", "-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90",
         "-Werror", "all-warnings", "-Xcompiler", "-Wall,-Wextra,-Werror", "-I", RT, cu, "-o", tmp_path / "m.o"],
        timeout=600)


PROBE = HEAD + '''
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)
        self.ln = nn.LayerNorm(16)

    def forward(self, x):
        with torch.autocast(DEVICE, dtype=DTYPE):
            h = self.fc(x) * 0.5
            outs = (h, F.gelu(h), h.mean(-1), F.softmax(h, -1), F.log_softmax(h, -1), h.sum(-1), torch.exp(h),
                    h.log1p(), h ** 2, self.ln(h), torch.logsumexp(h, -1), torch.cumsum(h, -1), h @ h.t())
        return tuple(o.float() for o in outs)


model = Net()
example_inputs = {"forward": (torch.rand(4, 16),)}
'''
# the probe's outputs: True where PyTorch's CUDA autocast returns a low-precision tensor
PROBE_LOW = [("linear", True), ("gelu", True), ("mean", True), ("softmax", False), ("log_softmax", False),
             ("sum", False), ("exp", False), ("log1p", False), ("pow", False), ("layer_norm", False),
             ("logsumexp", False), ("cumsum", False), ("matmul", True)]


@pytest.mark.parametrize("dt", ["bf16", "f16"])
def test_cuda_op_lists(tmp_path, dt):
    """which results are bf16/f16 values in a 'cuda' region (PyTorch's CUDA lists: softmax,
    sum, exp, pow, layer_norm ... in f32), on the emulated CUDA target"""
    exe = build(tmp_path, write(tmp_path, PROBE, "cuda", dt, "probe"), True)
    x = np.random.default_rng(3).random((4, 16)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    outs = [tmp_path / f"o{i}.npy" for i in range(len(PROBE_LOW))]
    run_env([exe, "run", "forward", "--input", tmp_path / "x.npy",
             *[a for o in outs for a in ("--output", o)]])
    rnd = (lambda a: torch.from_numpy(a).bfloat16().float().numpy()) if dt == "bf16" else \
        (lambda a: a.astype(np.float16).astype(np.float32))
    for (name, low), o in zip(PROBE_LOW, outs):
        v = np.load(o)
        assert (rnd(v) == v).all() == low, f"{name}: {'expected' if low else 'not expected'} {dt} values"


def test_c_target_disables_cuda_autocast(tmp_path):
    """PyTorch without CUDA warns and computes in f32 (an enclosing 'cpu' region stays on);
    so does the C target, with a note."""
    src = HEAD + '''
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        with torch.cuda.amp.autocast():
            a = self.fc(x)
        with torch.autocast("cpu"):
            with torch.autocast("cuda", dtype=torch.float16):
                b = self.fc(x)
        with torch.autocast("cuda", dtype=torch.float32):
            c = self.fc(x)
        return a, b.float(), c


model = Net()
example_inputs = {"forward": (torch.randn(4, 8),)}
'''
    p = tmp_path / "m.py"
    p.write_text(src)
    exe = tmp_path / "net"
    r = run([CTC, "build", p, "-o", exe])
    assert "note: torch.autocast('cuda') is disabled on the C target" in r.stderr
    mod = load_module(str(p), "acc_disabled")
    torch.manual_seed(0)
    m = mod.Net()
    w = tmp_path / "w.safetensors"
    st_write(w, state_dict_np(m))
    x = torch.randn(4, 8)
    np.save(tmp_path / "x.npy", x.numpy())
    run([exe, "run", "forward", "--weights", w, "--input", tmp_path / "x.npy", "--output", tmp_path / "a.npy",
         "--output", tmp_path / "b.npy", "--output", tmp_path / "c.npy"])
    with torch.no_grad():
        a, b, c = m(x)   # PyTorch 1.13 without CUDA: "CUDA is not available. Disabling"
    assert a.dtype == torch.float32 and c.dtype == torch.float32
    np.testing.assert_allclose(np.load(tmp_path / "a.npy"), a.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.load(tmp_path / "c.npy"), c.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(np.load(tmp_path / "b.npy"), b.numpy())   # the cpu region's bf16 linear


@pytest.mark.parametrize("body,message", [
    ("with torch.autocast('cuda'):\n            return F.binary_cross_entropy(torch.sigmoid(self.fc(x)), x)",
     "binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast"),
    ("with torch.autocast('cuda', dtype=torch.float64):\n            return self.fc(x)",
     "takes dtype=torch.bfloat16 or torch.float16"),
    ("with torch.autocast('xla'):\n            return self.fc(x)", "device_type='xla') is not supported"),
])
def test_refusals(tmp_path, body, message):
    p = tmp_path / "m.py"
    p.write_text(HEAD + "class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                 "        self.fc = nn.Linear(8, 8)\n\n    def forward(self, x):\n        " + body + "\n\n\n"
                 "model = Net()\nexample_inputs = {'forward': (torch.rand(4, 8),)}\n")
    r = subprocess.run([CTC, "compile", str(p), "--target", "cuda", "-o", str(tmp_path / "m.cu")],
                       capture_output=True, text=True)
    assert r.returncode != 0 and message in r.stderr and "m.py:" in r.stderr, r.stderr

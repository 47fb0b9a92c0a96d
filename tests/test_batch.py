"""A batch dimension chosen at run time: `--input x=f32[N,...] --max N=M`.

The generated entries take the batch as an argument (1..M, the arena planned for
M); `./net infer` accepts any batch up to M and `./net train` runs the last
partial batch without padding. PyTorch, run on the same batch sizes, is the
oracle (forward rtol 1e-4 as in test_models.py; one training step and a short
training run at 1e-4/1e-5 as in test_train.py)."""
import copy
import os
import subprocess

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ctc_testlib import CTC, ROOT, compare, ctc_build, load_module, run, st_read, st_write, state_dict_np

MLP = '''
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 48)
        self.fc2 = nn.Linear(48, 10)

    def forward(self, x):
        x = x.reshape(x.shape[0], 784)
        return self.fc2(F.relu(self.fc1(x)))


model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def train_step(x, y):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss
'''

CNN = '''
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.conv1 = nn.Conv2d(1, 6, 5, padding=2)
        self.conv2 = nn.Conv2d(6, 8, 5)
        self.fc = nn.Linear(8 * 5 * 5, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(torch.tanh(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        return F.log_softmax(self.fc(x), dim=1)
'''

GPT_BLOCK = '''
import math
import torch
import torch.nn as nn
import torch.nn.functional as F

T, C, H = 16, 32, 4


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(C)
        self.qkv = nn.Linear(C, 3 * C)
        self.proj = nn.Linear(C, C)
        self.register_buffer("mask", torch.tril(torch.ones(T, T)).view(1, 1, T, T))

    def forward(self, x):
        B, T_, C_ = x.size()
        q, k, v = self.qkv(self.ln(x)).split(C, dim=2)
        q = q.view(B, T_, H, C // H).transpose(1, 2)
        k = k.view(B, T_, H, C // H).transpose(1, 2)
        v = v.view(B, T_, H, C // H).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.mask[:, :, :T_, :T_] == 0, float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        y = y.transpose(1, 2).contiguous().view(B, T_, C)
        return x + F.gelu(self.proj(y))
'''


def write(tmp, name, text):
    p = os.path.join(tmp, name)
    with open(p, "w") as f:
        f.write(text)
    return p


def infer(tmp, exe, w, x, tag):
    xp, op = os.path.join(tmp, f"x{tag}.npy"), os.path.join(tmp, f"o{tag}.npy")
    np.save(xp, x)
    run([exe, "infer", "--weights", w, "--input", xp, "--output", op])
    return np.load(op)


@pytest.mark.parametrize("src,shape,name", [(MLP, (1, 28, 28), "mlp"), (CNN, (1, 28, 28), "cnn"),
                                            (GPT_BLOCK, (16, 32), "block")])
def test_forward_any_batch(tmp_path, src, shape, name):
    tmp = str(tmp_path)
    py = write(tmp, f"{name}.py", src)
    mod = load_module(py, f"batch_{name}")
    torch.manual_seed(0)
    model = mod.model if hasattr(mod, "model") else mod.Net() if hasattr(mod, "Net") else mod.Block()
    model.eval()
    exe = os.path.join(tmp, "net")
    ctc_build(py, exe, "--input", "x=f32[N,%s]" % ",".join(map(str, shape)), "--max", "N=24")
    info = run([exe, "info"]).stdout
    assert "any batch from 1 to 24" in info, info
    w = os.path.join(tmp, "w.safetensors")
    st_write(w, state_dict_np(model))
    rng = np.random.default_rng(1)
    for n in (1, 5, 24):
        x = rng.standard_normal((n,) + shape).astype(np.float32)
        with torch.no_grad():
            want = model(torch.from_numpy(x)).numpy()
        got = infer(tmp, exe, w, x, n)
        assert got.shape == want.shape
        compare(f"{name} forward at batch {n}", got, want, rtol=1e-4, atol=1e-5)
    # a batch past --max, and one whose other dims are wrong: errors naming the input
    x = rng.standard_normal((25,) + shape).astype(np.float32)
    np.save(os.path.join(tmp, "big.npy"), x)
    r = run([exe, "infer", "--weights", w, "--input", os.path.join(tmp, "big.npy")], check=False)
    assert r.returncode == 1 and "input 'x' has 25 along axis 0" in r.stderr and "1 to 24" in r.stderr, r.stderr


def test_generated_api_and_warnings(tmp_path):
    """The entry takes `int64_t batch`; the code compiles clean with -Werror, and a
    call with a batch out of range returns CTC_ERR_SHAPE."""
    tmp = str(tmp_path)
    py = write(tmp, "mlp.py", MLP)
    c = os.path.join(tmp, "mlp.c")
    run([CTC, "compile", py, "--input", "x=f32[B,1,28,28]", "--input", "y=i64[B]", "--max", "B=32", "-o", c])
    h = open(os.path.join(tmp, "mlp.h")).read()
    assert "int net_forward(net_t *m, int64_t batch, const float *x, float *out);" in h, h
    assert "int net_train_step(net_t *m, int64_t batch, const float *x, const int64_t *y, float *loss);" in h, h
    text = open(c).read()
    assert "if (batch < 1 || batch > 32)\n    return ctc_error_set(m->error, sizeof m->error, CTC_ERR_SHAPE," in text
    main = write(tmp, "main.c", '''
#include <stdio.h>
#include <stdlib.h>
#include "mlp.h"
int main(void) {
  net_t m;
  void *arena = aligned_alloc(64, (NET_ARENA_BYTES + 63) / 64 * 64);
  if (net_init(&m, arena, NET_ARENA_BYTES)) return 1;
  static float x[33 * 784], out[33 * 10];
  int a = net_forward(&m, 0, x, out), b = net_forward(&m, 33, x, out), c = net_forward(&m, 3, x, out);
  printf("%d %d %d\\n", a == CTC_ERR_SHAPE, b == CTC_ERR_SHAPE, c == CTC_OK);
  printf("<%s>\\n", net_error(&m));   /* b's: c succeeded, and entries leave the message */
  free(arena);
  return 0;
}
''')
    exe = os.path.join(tmp, "api")
    rt = os.path.join(ROOT, "runtime_min")
    run(["cc", "-std=c11", "-O1", "-Wall", "-Wextra", "-Werror", "-I", rt, c, main, "-o", exe,
         os.path.join(ROOT, "build", "libctc_rt.a"), "-lz", "-lm"])
    out = run([exe]).stdout.splitlines()
    assert out[0].split() == ["1", "1", "1"] and out[1] == "<entry 'forward': batch 33 is outside 1..32>", out


def torch_step(model, opt, x, y):
    opt.zero_grad()
    loss = F.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(y))
    loss.backward()
    opt.step()
    return float(loss)


BN = '''
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 16)
        self.bn = nn.BatchNorm1d(16)
        self.fc2 = nn.Linear(16, 10)

    def forward(self, x):
        return self.fc2(F.relu(self.bn(self.fc1(x.flatten(1)))))


model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def train_step(x, y):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss
'''


@pytest.mark.parametrize("src,name", [(MLP, "mlp"), (BN, "bn")])
def test_train_step_partial_batch(tmp_path, src, name):
    """One SGD-momentum step on a batch of 13 (compiled for up to 32) gives
    PyTorch's loss and parameters after the step on those 13 samples (with
    BatchNorm: its running statistics too, whose variance is scaled by 13/12)."""
    tmp = str(tmp_path)
    py = write(tmp, "m.py", src)
    mod = load_module(py, "batch_step_" + name)
    exe = os.path.join(tmp, "net")
    ctc_build(py, exe, "--input", "x=f32[N,1,28,28]", "--input", "y=i64[N]", "--max", "N=32")
    w0, w1 = os.path.join(tmp, "w0.safetensors"), os.path.join(tmp, "w1.safetensors")
    st_write(w0, state_dict_np(mod.model))
    rng = np.random.default_rng(2)
    x = rng.standard_normal((13, 1, 28, 28)).astype(np.float32)
    y = rng.integers(0, 10, 13).astype(np.int64)
    np.save(os.path.join(tmp, "x.npy"), x)
    np.save(os.path.join(tmp, "y.npy"), y)
    run([exe, "run", "train_step", "--weights", w0, "--input", os.path.join(tmp, "x.npy"), "--input",
         os.path.join(tmp, "y.npy"), "--output", os.path.join(tmp, "loss.npy"), "--save", w1, "--save-training-state"])
    loss = torch_step(mod.model, mod.optimizer, x, y)
    compare("loss", np.load(os.path.join(tmp, "loss.npy")), loss, rtol=1e-4, atol=1e-6)
    got = st_read(w1)
    for k, v in mod.model.state_dict().items():
        compare(k, got[k], v.numpy(), rtol=1e-4, atol=1e-5)


def test_train_last_partial_batch(tmp_path):
    """`./net train --batch 16` on 40 samples in file order runs batches of 16, 16
    and 8 (no padding, nothing dropped), as a PyTorch DataLoader with
    drop_last=False does; the weights match PyTorch's after the epoch."""
    tmp = str(tmp_path)
    py = write(tmp, "mlp.py", MLP)
    mod = load_module(py, "batch_mlp_train")
    exe = os.path.join(tmp, "net")
    ctc_build(py, exe, "--input", "x=f32[N,1,28,28]", "--input", "y=i64[N]", "--max", "N=32")
    w0, w1 = os.path.join(tmp, "w0.safetensors"), os.path.join(tmp, "w1.safetensors")
    st_write(w0, state_dict_np(mod.model))
    rng = np.random.default_rng(3)
    x = rng.standard_normal((40, 1, 28, 28)).astype(np.float32)
    y = rng.integers(0, 10, 40).astype(np.int64)
    np.save(os.path.join(tmp, "x.npy"), x)
    np.save(os.path.join(tmp, "y.npy"), y)
    tx = rng.standard_normal((37, 1, 28, 28)).astype(np.float32)   # test batches of 32 and 5
    ty = rng.integers(0, 10, 37).astype(np.int64)
    np.save(os.path.join(tmp, "tx.npy"), tx)
    np.save(os.path.join(tmp, "ty.npy"), ty)
    r = run([exe, "train", "--data", os.path.join(tmp, "x.npy"), "--labels", os.path.join(tmp, "y.npy"),
             "--test-data", os.path.join(tmp, "tx.npy"), "--test-labels", os.path.join(tmp, "ty.npy"),
             "--weights", w0, "--epochs", "1", "--batch", "16", "--no-shuffle", "--save", w1, "--save-training-state"])
    for s in (0, 16, 32):
        torch_step(mod.model, mod.optimizer, x[s:s + 16], y[s:s + 16])
    got = st_read(w1)
    for k, v in mod.model.state_dict().items():
        compare(k, got[k], v.numpy(), rtol=1e-4, atol=1e-5)
    with torch.no_grad():
        correct = int((mod.model(torch.from_numpy(tx)).argmax(1).numpy() == ty).sum())
    assert "test accuracy %.2f%%" % (100.0 * correct / 37) in r.stdout, (correct, r.stdout)
    r = run([exe, "train", "--data", os.path.join(tmp, "x.npy"), "--labels", os.path.join(tmp, "y.npy"),
             "--epochs", "1", "--batch", "33"], check=False)
    assert r.returncode == 1 and "at most 32" in r.stderr, r.stderr


def ctc_err(tmp, src, *args):
    py = write(tmp, "m.py", src)
    r = subprocess.run([CTC, "compile", py, "-o", os.path.join(tmp, "m.c"), *args], capture_output=True, text=True)
    assert r.returncode == 1, (r.returncode, r.stderr)
    return r.stderr


def test_errors(tmp_path):
    tmp = str(tmp_path)
    e = ctc_err(tmp, MLP, "--input", "x=f32[N,1,28,28]", "--input", "y=i64[N]")
    assert "the file gives no example of 'x' with 4 dims" in e and "--max N=M" in e, e
    e = ctc_err(tmp, MLP, "--input", "x=f32[4,1,28,28]", "--input", "y=i64[4]", "--max", "N=8")
    assert "--max N: no --input names a dim 'N'" in e, e
    e = ctc_err(tmp, MLP, "--input", "x=f32[N,1,28,28]", "--input", "y=i64[B]", "--max", "N=8")
    assert "one batch name per compile" in e, e
    # N in Python control flow changes the program: located at the entry
    branchy = MLP.replace("x = x.reshape(x.shape[0], 784)",
                          "x = x.reshape(x.shape[0], 784)\n        if x.shape[0] > 8:\n            x = x * 2")
    e = ctc_err(tmp, branchy, "--input", "x=f32[N,1,28,28]", "--input", "y=i64[N]", "--max", "N=8")
    assert "m.py:" in e and "staged differently for N = 8 and N = 9" in e, e
    # an output of shape [N, N] is not N times a fixed shape
    gram = MLP.replace("return self.fc2(F.relu(self.fc1(x)))", "h = self.fc1(x)\n        return h @ h.t()")
    e = ctc_err(tmp, gram, "--input", "x=f32[N,1,28,28]", "--max", "N=8")
    assert "not N times a fixed shape" in e, e
    # a hard-coded batch in the model: the shape error names the line, and the batch tried
    fixed = MLP.replace("x = x.reshape(x.shape[0], 784)", "x = x.reshape(8, 784)")
    e = ctc_err(tmp, fixed, "--input", "x=f32[N,1,28,28]", "--input", "y=i64[N]", "--max", "N=8")
    assert "m.py:14:" in e and "with the run-time batch N = 9" in e, e


def test_max_defaults_to_the_example(tmp_path):
    # without --max, the largest batch is the size example_inputs gives the input
    tmp = str(tmp_path)
    ex = ("\nexample_inputs = {'forward': (torch.randn(20, 1, 28, 28),),\n"
          "                  'train_step': (torch.randn(20, 1, 28, 28), torch.randint(0, 10, (20,)))}\n")
    py = write(tmp, "m.py", MLP + ex)
    exe = os.path.join(tmp, "net")
    ctc_build(py, exe, "--input", "x=f32[N,1,28,28]", "--input", "y=i64[N]")
    info = run([exe, "info"]).stdout
    assert "entry forward: 1 input, 1 output, any batch from 1 to 20" in info, info
    assert "entry train_step: 2 inputs, 1 output, any batch from 1 to 20" in info, info
    # --max still wins over the example
    ctc_build(py, exe, "--input", "x=f32[N,1,28,28]", "--input", "y=i64[N]", "--max", "N=7")
    assert "any batch from 1 to 7" in run([exe, "info"]).stdout


def test_fused_differently_is_an_error_not_a_crash(tmp_path):
    """Two unrelated elementwise ops of the same shape at N = 10 only (a [10, 48]
    parameter and an [N, 48] input) fuse at that batch alone: ctc refuses the
    runtime batch with a located error and exits 1 (it used to free the first
    trace's text twice on this path)."""
    src = ("import torch\nimport torch.nn as nn\n\n\nclass Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
           "        self.p = nn.Parameter(torch.randn(10, 48))\n\n    def forward(self, x):\n"
           "        a = self.p + 2.0\n        b = x + 3.0\n        return a.sum() + b.sum()\n\n\nmodel = Net()\n")
    py = tmp_path / "m.py"
    py.write_text(src)
    r = run([CTC, "build", str(py), "-o", str(tmp_path / "net"), "--input", "x=f32[N,48]", "--max", "N=10"], check=False)
    assert r.returncode == 1, r
    assert "m.py:10:5: error: entry 'forward' is fused differently for N = 10 and N = 11" in r.stderr, r.stderr


BN_CNN = '''
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(16)
        self.fc = nn.Linear(16 * 8 * 8, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return self.fc(torch.flatten(x, 1))


model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def train_step(x, y):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss
'''


def test_batchnorm2d_cnn_train_step_any_batch(tmp_path):
    """BatchNorm2d in training: the mean over N x 32 x 32 is 1 / (1024 N), printed as a
    float that no short c / N reproduces at N = 64..67 (it used to be refused), and the
    running variance's k*N / (k*N - 1) with k = 1024 and 256. One SGD step at batches
    1, 5 and 64 (compiled for up to 64) gives PyTorch's loss, parameters and running
    statistics; `ctc check` says ok where `ctc build` succeeds."""
    tmp = str(tmp_path)
    py = write(tmp, "m.py", BN_CNN)
    args = ["--input", "x=f32[N,3,32,32]", "--input", "y=i64[N]", "--max", "N=64"]
    r = run([CTC, "check", py, *args])
    assert ": ok:" in r.stdout, r.stdout
    exe = os.path.join(tmp, "net")
    ctc_build(py, exe, *args)
    rng = np.random.default_rng(4)
    for n in (1, 5, 64):
        mod = load_module(py, "batch_bn_cnn_%d" % n)
        w0, w1 = os.path.join(tmp, "w0.safetensors"), os.path.join(tmp, "w1.safetensors")
        st_write(w0, state_dict_np(mod.model))
        x = rng.standard_normal((n, 3, 32, 32)).astype(np.float32)
        y = rng.integers(0, 10, n).astype(np.int64)
        np.save(os.path.join(tmp, "x.npy"), x)
        np.save(os.path.join(tmp, "y.npy"), y)
        run([exe, "run", "train_step", "--weights", w0, "--input", os.path.join(tmp, "x.npy"), "--input",
             os.path.join(tmp, "y.npy"), "--output", os.path.join(tmp, "loss.npy"), "--save", w1])
        # the same step in float64: at batch 1 a BatchNorm backward's float32 sums can decide the
        # third digit (seen: PyTorch 2.7e-3 from float64 on conv1.weight, ctc 3e-8), so where
        # PyTorch's float32 step is far from float64, ctc must be as close to float64 as it
        ref = copy.deepcopy(mod.model).double()
        ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
        torch_step(ref, ref_opt, x.astype(np.float64), y)
        loss = torch_step(mod.model, mod.optimizer, x, y)
        compare("loss at batch %d" % n, np.load(os.path.join(tmp, "loss.npy")), loss, rtol=1e-4, atol=1e-6)
        got = st_read(w1)
        want64 = ref.state_dict()
        for k, v in mod.model.state_dict().items():
            v64 = want64[k].numpy()
            torch_off = float(np.abs(v.numpy().astype(np.float64) - v64).max())
            if torch_off <= 1e-5 + 1e-4 * float(np.abs(v64).max()):
                compare("%s at batch %d" % (k, n), got[k], v.numpy(), rtol=1e-4, atol=1e-5)
            else:
                compare("%s at batch %d (float64; PyTorch's float32 is %.3g off)" % (k, n, torch_off), got[k], v64,
                        rtol=0, atol=max(1.5 * torch_off, 1e-5))


def test_check_reports_what_build_refuses(tmp_path):
    """A constant 1 / N^2 fits no form of the batch: it shows only in the generated
    numbers, and `ctc check` reports it as `ctc build` does (it used to say ok)."""
    tmp = str(tmp_path)
    src = MLP.replace("return self.fc2(F.relu(self.fc1(x)))",
                      "return self.fc2(F.relu(self.fc1(x))) / (x.shape[0] * x.shape[0])")
    py = write(tmp, "m.py", src)
    args = ["--input", "x=f32[N,1,28,28]", "--max", "N=16"]
    c = run([CTC, "check", py, *args], check=False)
    b = run([CTC, "build", py, "-o", os.path.join(tmp, "net"), *args], check=False)
    assert b.returncode == 1 and "a constant that is not c/N" in b.stderr, b.stderr
    assert c.returncode == 1 and c.stderr == b.stderr and ": ok:" not in c.stdout, (c.stdout, c.stderr)

"""The default build's forward takes any batch from 1 to the file's (planned) batch.

ctc stages forward again at B+1..B+3 (and checks it at 2) and merges the code as for
`--max` (compiler/batch.c); where forward does not hold at other batches (Python code
on the batch size, a reshape that needs B, a batch that is not axis 0) the build keeps
the fixed batch, and `./net infer` names it. PyTorch at the same batch is the oracle
(forward rtol 1e-4)."""
import os
import subprocess

import numpy as np
import pytest
import torch

from ctc_testlib import CTC, ROOT, compare, ctc_build, load_module, run, st_write, state_dict_np

PY = "/usr/bin/python3"

CNN = '''
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
    model.train()
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


model.eval()
'''

ARGS = ["--input", "x=f32[64,3,32,32]", "--input", "y=i64[64]"]


def write(tmp, name, text):
    p = os.path.join(tmp, name)
    with open(p, "w") as f:
        f.write(text)
    return p


def trained_eval_model(py, name):
    """The file's model with non-trivial running statistics, in eval mode."""
    mod = load_module(py, name)
    torch.manual_seed(0)
    for m in mod.model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
    mod.model.eval()
    return mod.model


def torch_forward(model, x):
    with torch.no_grad():
        return model(torch.from_numpy(x)).numpy()


def test_default_build_forward_any_batch_cli(tmp_path):
    tmp = str(tmp_path)
    py = write(tmp, "cnn.py", CNN)
    exe = os.path.join(tmp, "net")
    ctc_build(py, exe, *ARGS)
    info = run([exe, "info"]).stdout
    assert "entry forward: 1 input, 1 output, any batch from 1 to 64" in info, info
    assert "entry train_step: 2 inputs, 1 output\n" in info, info   # the other entries keep theirs
    model = trained_eval_model(py, "auto_cnn_cli")
    w = os.path.join(tmp, "w.safetensors")
    st_write(w, state_dict_np(model))
    rng = np.random.default_rng(0)
    for n in (1, 5, 64):
        x = rng.standard_normal((n, 3, 32, 32)).astype(np.float32)
        np.save(os.path.join(tmp, "x.npy"), x)
        run([exe, "infer", "--weights", w, "--input", os.path.join(tmp, "x.npy"), "--output",
             os.path.join(tmp, "o.npy")])
        compare("forward at batch %d" % n, np.load(os.path.join(tmp, "o.npy")), torch_forward(model, x),
                rtol=1e-4, atol=1e-5)
    # --fixed-batch keeps the planned batch, and says so for another
    ctc_build(py, exe, *ARGS, "--fixed-batch")
    np.save(os.path.join(tmp, "x1.npy"), x[:1])
    r = run([exe, "infer", "--weights", w, "--input", os.path.join(tmp, "x1.npy")], check=False)
    assert r.returncode == 1 and "runs at its planned batch 64 only" in r.stderr, r.stderr


def test_default_build_forward_any_batch_c_api(tmp_path):
    """<m>_forward keeps its signature (batch 64); <m>_forward_batch takes 1..64."""
    tmp = str(tmp_path)
    py = write(tmp, "cnn.py", CNN)
    c = os.path.join(tmp, "cnn.c")
    run([CTC, "compile", py, *ARGS, "-o", c])
    h = open(os.path.join(tmp, "cnn.h")).read()
    assert "int net_forward_batch(net_t *m, int64_t batch, const float *x, float *out);" in h, h
    assert "int net_forward(net_t *m, const float *x, float *out);" in h, h
    assert "int net_train_step(net_t *m, const float *x, const int64_t *y, float *loss);" in h, h
    model = trained_eval_model(py, "auto_cnn_c")
    w = os.path.join(tmp, "w.safetensors")
    st_write(w, state_dict_np(model))
    rng = np.random.default_rng(1)
    x = rng.standard_normal((64, 3, 32, 32)).astype(np.float32)
    x.tofile(os.path.join(tmp, "x.bin"))
    main = write(tmp, "main.c", '''
#include <stdio.h>
#include <stdlib.h>
#include "cnn.h"
int main(int argc, char **argv) {
  if (argc != 4) return 5;
  net_t m;
  void *arena = aligned_alloc(64, (NET_ARENA_BYTES + 63) / 64 * 64);
  if (net_init(&m, arena, NET_ARENA_BYTES) || net_load(&m, argv[1])) return 1;
  static float x[64 * 3 * 32 * 32], out1[10], out64[64 * 10];
  FILE *f = fopen(argv[2], "rb");
  if (!f || fread(x, sizeof x, 1, f) != 1) return 2;
  fclose(f);
  if (net_forward_batch(&m, 1, x, out1) || net_forward(&m, x, out64)) return 3;
  if (net_forward_batch(&m, 0, x, out1) != CTC_ERR_SHAPE || net_forward_batch(&m, 65, x, out1) != CTC_ERR_SHAPE)
    return 4;
  f = fopen(argv[3], "wb");
  fwrite(out1, sizeof out1, 1, f);
  fwrite(out64, sizeof out64, 1, f);
  fclose(f);
  free(arena);
  return 0;
}
''')
    exe = os.path.join(tmp, "api")
    rt = os.path.join(ROOT, "runtime_min")
    run(["cc", "-std=c11", "-O1", "-Wall", "-Wextra", "-Werror", "-I", rt, c, main, "-o", exe,
         os.path.join(ROOT, "build", "libctc_rt.a"), "-lz", "-lm"])
    run([exe, w, os.path.join(tmp, "x.bin"), os.path.join(tmp, "o.bin")])
    got = np.fromfile(os.path.join(tmp, "o.bin"), dtype=np.float32)
    compare("C API forward at batch 1", got[:10].reshape(1, 10), torch_forward(model, x[:1]), rtol=1e-4, atol=1e-5)
    compare("C API forward at batch 64", got[10:].reshape(64, 10), torch_forward(model, x), rtol=1e-4, atol=1e-5)


def test_default_build_forward_any_batch_python(tmp_path):
    tmp = str(tmp_path)
    py = write(tmp, "cnn.py", CNN)
    r = subprocess.run([CTC, "build", py, "--python", "-o", os.path.join(tmp, "cnnmod"), *ARGS], capture_output=True,
                       text=True, env=dict(os.environ, PYTHON=PY))
    assert r.returncode == 0, r.stderr
    model = trained_eval_model(py, "auto_cnn_py")
    st_write(os.path.join(tmp, "w.safetensors"), state_dict_np(model))
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 3, 32, 32)).astype(np.float32)
    np.save(os.path.join(tmp, "x.npy"), x)
    prog = '''import sys
sys.path.insert(0, %r)
import numpy as np
import cnnmod
m = cnnmod.Model("w.safetensors")
x = np.load("x.npy")
np.save("o1.npy", m.forward(x[:1]))
np.save("o3.npy", m.forward(x))
''' % tmp
    r = subprocess.run([PY, "-c", prog], capture_output=True, text=True, cwd=tmp, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    compare("module forward at batch 1", np.load(os.path.join(tmp, "o1.npy")), torch_forward(model, x[:1]),
            rtol=1e-4, atol=1e-5)
    compare("module forward at batch 3", np.load(os.path.join(tmp, "o3.npy")), torch_forward(model, x),
            rtol=1e-4, atol=1e-5)


MLP = '''
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(24, 16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        h = x.reshape(x.shape[0], 24)
        return self.fc2(F.relu(self.fc1(h)))


model = Net()
'''


@pytest.mark.parametrize("what,old,new,shape", [
    ("control flow on the batch", "return self.fc2", "if x.shape[0] < 64:\n            h = h * 2\n        return self.fc2",
     "x=f32[64,24]"),
    ("a reshape that needs the batch", "h = x.reshape(x.shape[0], 24)", "h = x.reshape(64, 24)", "x=f32[64,24]"),
    ("a reshape folding the batch", "h = x.reshape(x.shape[0], 24)", "h = x.reshape(-1, 2, 24).sum(1)",
     "x=f32[64,24]"),
    ("the batch on axis 1", "h = x.reshape(x.shape[0], 24)", "h = x[0] + x[1] * x[2]",
     "x=f32[3,64,24]"),
    ("a constant 1/N^2", "return self.fc2(F.relu(self.fc1(h)))",
     "return self.fc2(F.relu(self.fc1(h))) / (x.shape[0] * x.shape[0])", "x=f32[64,24]"),
])
def test_forward_that_needs_its_batch_keeps_it(tmp_path, what, old, new, shape):
    """Forward that does not hold at other batches keeps the fixed one (never silently
    wrong): it is built as with --fixed-batch, runs at its batch, and `./net infer`
    names the planned batch for another."""
    tmp = str(tmp_path)
    assert old in MLP
    py = write(tmp, "m.py", MLP.replace(old, new))
    exe = os.path.join(tmp, "net")
    r = ctc_build(py, exe, "--input", shape, "--stats")
    assert "ctc: forward keeps its batch" in r.stderr and "error" not in r.stderr.split("keeps its batch")[0], r.stderr
    info = run([exe, "info"]).stdout
    assert "any batch" not in info, info
    dims = [int(d) for d in shape[len("x=f32["):-1].split(",")]
    model = load_module(py, "auto_keep").model
    model.eval()
    w = os.path.join(tmp, "w.safetensors")
    st_write(w, state_dict_np(model))
    x = np.random.default_rng(3).standard_normal(dims).astype(np.float32)
    np.save(os.path.join(tmp, "x.npy"), x)
    run([exe, "infer", "--weights", w, "--input", os.path.join(tmp, "x.npy"), "--output", os.path.join(tmp, "o.npy")])
    compare(what, np.load(os.path.join(tmp, "o.npy")), torch_forward(model, x), rtol=1e-4, atol=1e-5)
    np.save(os.path.join(tmp, "x1.npy"), x[:1])
    r = run([exe, "infer", "--weights", w, "--input", os.path.join(tmp, "x1.npy")], check=False)
    assert r.returncode == 1 and "expected [%s]" % ", ".join(map(str, dims)) in r.stderr, r.stderr
    if dims[0] == 64:
        assert "runs at its planned batch 64 only" in r.stderr, r.stderr


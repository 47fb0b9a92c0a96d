"""The CUDA target on every entry of the examples and of the fuzzers' seeds
(forward, train steps, grads, jvps, an hvp): the generated .cu, built as C++
against the emulation header, computes what the C target computes (rtol 1e-5)."""
import os
import re

import numpy as np
import pytest

from ctc_testlib import CTC, ROOT, compare, run, st_read
from cuda_testlib import NVCC, RT, emulated, run_env, rt_objects  # noqa: F401 (a fixture)


EXAMPLES = [os.path.join("examples", f"{n}.py") for n in ("cifar_net", "hessian_top_eigenvalue", "mlp_sequential",
                                                            "seed_cnn")]
# the fuzzers' seeds: many ops, gradients, jvps, optimizers, a transformer
SEEDS = sorted(os.path.join("tests", "fuzz_seeds", f) for f in os.listdir(os.path.join(ROOT, "tests", "fuzz_seeds"))
               if f.endswith(".py"))


def _entries(info):
    """[(entry, [(dtype, shape)...], noutputs)] from `./net info`."""
    out = []
    for block in re.split(r"^(?=entry )", info, flags=re.M):
        m = re.match(r"entry (\S+): \d+ inputs?, (\d+) outputs?", block)
        if not m:
            continue
        ins = [(d, [int(s) for s in shp.split(",") if s.strip()])
               for d, shp in re.findall(r"^  input\s+\S+ (\w+)\[([^\]]*)\]", block, re.M)]
        out.append((m.group(1), ins, int(m.group(2))))
    return out


# dropout (RAND_UNIFORM: a counter-based stream, so both targets draw the same masks),
# concat, iota
DROPOUT = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(20, 6)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        h = torch.cat([self.drop(x), x * 2.0], dim=1)[:, ::2] + torch.arange(20, dtype=torch.float32)
        return self.fc(h)


model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)


def train_step(x, y):
    optimizer.zero_grad()
    model.train()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


example_inputs = {"forward": (torch.randn(8, 20),), "train_step": (torch.randn(8, 20), torch.randint(0, 2, (8,)))}
"""


# pooling with padding, ceil mode, dilation and overlapping windows, forward and
# gradients; slices with steps (their gradient: unslice)
POOLS = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 3, padding=1)

    def forward(self, x):
        h = self.conv(x)
        a = F.avg_pool2d(h, 3, stride=2, padding=1, count_include_pad=True)
        b = F.avg_pool2d(h, 2, stride=2, padding=1, count_include_pad=False)
        c = F.max_pool2d(h, 3, stride=2, padding=1, dilation=2, ceil_mode=True)
        d = F.max_pool2d(h, 2, stride=1)
        return a.sum((2, 3)) + b[:, :, 1::2, ::3].sum((2, 3)) + c.mean((2, 3)) + d.amax((2, 3))


model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def train_step(x, y):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


example_inputs = {"forward": (torch.randn(2, 2, 9, 10),), "train_step": (torch.randn(2, 2, 9, 10),
                                                                         torch.randint(0, 3, (2,)))}
"""
# the ops that run the C target's loops in a one-thread kernel: pad, upsample,
# cumsum, argmax, gather and their gradients
MISC = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 2, 3, padding=1)

    def forward(self, x):
        h = self.conv(F.pad(x, (1, 2, 0, 1), mode="reflect"))
        u = F.interpolate(h, scale_factor=2, mode="bilinear", align_corners=False)
        v = F.interpolate(h, scale_factor=2, mode="nearest")
        c = torch.cumsum(u + v, dim=3)
        idx = torch.argmax(c, dim=3, keepdim=True)
        return torch.gather(c, 3, idx).flatten(1)


model = Net()


def grads(x):
    y = model(x)
    return torch.autograd.grad((y * y).sum(), x)


example_inputs = {"forward": (torch.randn(2, 2, 5, 6),), "grads": (torch.randn(2, 2, 5, 6),)}
"""
# grouped and depthwise convolutions (with padding and stride, and 1x1), trained
GROUPS = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2)
        self.b = nn.Conv2d(6, 6, 3, padding=1, groups=6)
        self.c = nn.Conv2d(6, 4, 1, groups=2)

    def forward(self, x):
        return self.c(torch.tanh(self.b(torch.tanh(self.a(x))))).mean((2, 3))


model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)


def train_step(x, y):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


example_inputs = {"forward": (torch.randn(3, 4, 9, 8),), "train_step": (torch.randn(3, 4, 9, 8), torch.randint(0, 4, (3,)))}
"""
INLINE = {"dropout": DROPOUT, "pools": POOLS, "misc": MISC, "groups": GROUPS}


@pytest.mark.parametrize("rel", EXAMPLES + SEEDS + sorted(INLINE),
                         ids=[os.path.basename(p)[:-3] for p in EXAMPLES + SEEDS] + sorted(INLINE))
def test_examples_emulated_match_c_target(tmp_path, rel, rt_objects):
    """Every entry of the examples and the fuzz seeds (forward, train steps, grads,
    jvps, an hvp) and of a dropout model, from the programs' own initial weights on
    random inputs: emulated CUDA = C target. Also a pooling model (padding, ceil
    mode, dilation, overlapping windows, strided slices)."""
    path, name = os.path.join(ROOT, rel), os.path.basename(rel)[:-3]
    if rel in INLINE:
        path, name = str(tmp_path / f"{rel}.py"), rel
        open(path, "w").write(INLINE[rel])
    opts = ["--entry", "grads"] if rel == "misc" else []
    _, emu = emulated(tmp_path, path, opts, rt_objects, opt="-O0")   # -O0: half the compile time
    cexe = tmp_path / "m_c"
    run([CTC, "build", path, "-o", cexe, "--no-openmp", *opts], timeout=600)
    info = run([cexe, "info"]).stdout
    rng = np.random.default_rng(1)
    entries = _entries(info)
    assert entries, info
    for entry, ins, nout in entries:
        args = []
        for k, (dt, shape) in enumerate(ins):
            a = rng.standard_normal(shape).astype(np.float32) if dt == "f32" else rng.integers(0, 2, shape)
            p = tmp_path / f"{entry}_in{k}.npy"
            np.save(p, a)
            args += ["--input", p]
        got, saved = {}, {}
        for tag, exe in (("cuda", emu), ("c", cexe)):
            outs = [tmp_path / f"{tag}_{entry}_out{k}.npy" for k in range(nout)]
            w = tmp_path / f"{tag}_{entry}_w.safetensors"   # the parameters after the entry (a step updates them)
            run_env([exe, "run", entry, *args, *[x for o in outs for x in ("--output", o)], "--save", w, "--save-training-state"])
            got[tag] = [np.load(o) for o in outs]
            saved[tag] = st_read(str(w))
        for k in range(nout):
            compare(f"{name} {entry} output {k} vs C", got["cuda"][k], got["c"][k], 1e-5, 1e-5)
        assert saved["cuda"].keys() == saved["c"].keys()
        for k in saved["c"]:
            compare(f"{name} {entry}: {k} after it vs C", saved["cuda"][k], saved["c"][k], 1e-5, 1e-6)


@pytest.mark.slow
@pytest.mark.skipif(NVCC is None, reason="nvcc not found (the CUDA toolkit is not installed)")
def test_inline_models_compile_with_nvcc(tmp_path):
    """The dropout, pooling and one-thread-kernel models: nvcc for sm_80 and sm_90,
    every warning an error (the C target's loops inside __global__ functions)."""
    for name, src in sorted(INLINE.items()):
        path = tmp_path / f"{name}.py"
        path.write_text(src)
        cu = tmp_path / f"{name}.cu"
        run([CTC, "compile", path, "--target", "cuda", "-o", cu, *(["--entry", "grads"] if name == "misc" else [])])
        run([NVCC, "-c", "-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90",
             "-Werror", "all-warnings", "-Xcompiler", "-Wall,-Wextra,-Werror", "-I", RT, cu, "-o", tmp_path / "m.o"],
            timeout=600)

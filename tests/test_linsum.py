"""A normalisation's input gradient through the mean without a pass of its own (ir/linsum.c).

Reverse mode gives LayerNorm's, GroupNorm's and BatchNorm's input gradient a sum over the
normalised axes of g_y * r + k * (x - mean), where k comes from another sum over the same tensor;
ir/linsum.c writes it as r * sum(g_y) + k * sum(x - mean), sums that run with the others.
- The kernels: the backward of a LayerNorm, GroupNorm or InstanceNorm (whose sums are over the
  trailing axes of the groups or the image) is a row kernel of two loops per row, the sums and
  then the input's gradient (three before); `--dump-after linsum` shows the sum of the centred
  input.
- The numbers: three Adam steps of a model with LayerNorm (with and without affine), GroupNorm
  and InstanceNorm against PyTorch (the loss at rtol 1e-4, the state at 1e-3, as the other
  training tests); a gradient penalty through layer_norm (second order: the rewrite comes after
  both sweeps) against PyTorch, float64 at rtol 1e-10.
- Sums of products with per-channel factors: BatchNorm's backward sums three products (the relu's
  gradient g, x - mean and their product), not five, on the C and the CUDA target; the bias, weight
  and input gradients are per-channel multiples of them. Three SGD steps against PyTorch; a
  forward sum of a product with a per-row value and a literal against PyTorch.
BatchNorm's sums (over N, H and W) are also checked with the residual block of test_rowsplit.py."""
import re

import numpy as np
import torch

from ctc_testlib import CTC, load_module, run, run_entry, st_write, state_dict_np, train_steps_match

NORMS = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1)
        self.gn = nn.GroupNorm(4, 16)
        self.inorm = nn.InstanceNorm2d(16, affine=True)
        self.fc = nn.Linear(16 * 8 * 8, 48)
        self.ln = nn.LayerNorm(48)
        self.ln2 = nn.LayerNorm(48, elementwise_affine=False)
        self.head = nn.Linear(48, 10)

    def forward(self, x):
        h = F.relu(self.gn(self.conv(x)))
        h = self.inorm(h) + h
        h = F.gelu(self.ln(self.fc(h.flatten(1))))
        return self.head(self.ln2(h) * 1.5)


model = Net()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)


def train_step(x, y):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


example_inputs = {"forward": (torch.zeros(32, 3, 8, 8),),
                  "train_step": (torch.zeros(32, 3, 8, 8), torch.zeros(32, dtype=torch.long))}
"""

PENALTY = """\
import torch
import torch.nn.functional as F


def penalty(x, w, b):
    y = F.layer_norm(x, (x.shape[-1],), w, b)
    g, = torch.autograd.grad((y * y * y).sum(), x, create_graph=True)
    return torch.autograd.grad((g * g).sum(), (x, w, b))


example_inputs = {"penalty": (torch.zeros(6, 24, dtype=torch.float64), torch.zeros(24, dtype=torch.float64),
                              torch.zeros(24, dtype=torch.float64))}
"""

BATCHNORM = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8 * 8 * 8, 10)

    def forward(self, x):
        return self.fc(F.relu(self.bn(self.conv(x))).flatten(1))


model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)


def train_step(x, y):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


def weighted(x, s):
    return (x * s * 0.5).sum(-1) + 1.0, (x * (x * s)).sum(-1)


example_inputs = {"forward": (torch.zeros(4, 3, 8, 8),),
                  "train_step": (torch.zeros(4, 3, 8, 8), torch.zeros(4, dtype=torch.long)),
                  "weighted": (torch.zeros(6, 40), torch.zeros(6, 1))}
"""


def test_norm_backward_rows_are_two_loops(tmp_path):
    path = tmp_path / "norms.py"
    path.write_text(NORMS)
    text = run([CTC, "compile", path, "--emit", "kernels"]).stdout
    step = text[text.index("func train_step"):]
    kernels = re.split(r"\n  kernel \d+: ", step)
    # GroupNorm's rows [32, 4, 256] and InstanceNorm's [32, 16, 64]: backward the sums, then the
    # input's gradient (three loops a row before: the sum through the mean had one of its own)
    def loops(shape):
        return [int(re.match(r"row over f32\[%s\], rows of \d+, (\d) loops?" % shape, k).group(1)) for k in kernels
                if k.startswith("row over f32[%s]" % shape) and "%grad." in k]
    assert loops("32,4,256") == [2] and loops("32,16,64") == [1, 2, 1], step
    # the two LayerNorms' backward over [32, 48], fused with the GELU's between them: 2 + 3 loops
    # (3 + 3 before)
    assert sum(loops("32,48")) == 5, step
    dump = run([CTC, "compile", path, "--dump-after", "linsum", "-o", tmp_path / "n.c"]).stderr
    ir = dump[dump.index("func train_step"):]
    assert re.search(r"= reduce_sum\[\d+\] %sub\.\d+ : f32\[32,1\]", ir), ir   # sum(x - mean) of a LayerNorm


def _three_steps_match(tmp_path, src, name, n, seed):
    """Three training steps of the file src on batches of n 3x8x8 images against PyTorch. A fixed
    initialisation: with some (seeds 2 and 6 of 0-7 for NORMS), Adam's first steps divide a few
    weights' near-zero gradients by their square roots, and float32's rounding, PyTorch's or
    ctc's, puts them 1e-3 apart (each as far from a float64 run)."""
    path = tmp_path / f"{name}.py"
    path.write_text(src)
    torch.manual_seed(0)
    mod = load_module(str(path), f"linsum_{name}")
    w = tmp_path / "w0.safetensors"
    st_write(w, state_dict_np(mod.model))
    run([CTC, "build", path, "-o", tmp_path / "net"])
    rng = np.random.default_rng(seed)
    batches = [((rng.standard_normal((n, 3, 8, 8)) * 2 + 1).astype(np.float32),
                rng.integers(0, 10, n).astype(np.int64)) for _ in range(3)]
    train_steps_match(str(tmp_path), str(tmp_path / "net"), mod, w, batches, name)


def test_norm_training_matches_pytorch(tmp_path):
    _three_steps_match(tmp_path, NORMS, "norms", 32, 5)


def test_gradient_penalty_through_layer_norm(tmp_path):
    path = tmp_path / "penalty.py"
    path.write_text(PENALTY)
    mod = load_module(str(path), "linsum_penalty")
    rng = np.random.default_rng(7)
    args = [rng.standard_normal((6, 24)) * 3 + 2, rng.standard_normal(24), rng.standard_normal(24)]
    want = mod.penalty(*[torch.from_numpy(a).requires_grad_() for a in args])
    run([CTC, "build", path, "-o", tmp_path / "net", "--entry", "penalty"])
    got = run_entry(str(tmp_path), str(tmp_path / "net"), "penalty", args, 3)
    for name, a, b in zip(("x", "w", "b"), got, want):
        np.testing.assert_allclose(a, b.detach().numpy(), rtol=1e-10, atol=1e-12, err_msg=name)


def _sums_after_linsum(path, tmp_path, *opts):
    """Per sum over N, H and W of the BatchNorm's channels in train_step: its operand's op, and
    for a product the ops of its two factors."""
    dump = run([CTC, "compile", path, *opts, "--dump-after", "linsum", "-o", tmp_path / "b.out"]).stderr
    ir = dump[dump.index("func train_step"):]
    ops = dict(re.findall(r"%([\w.]+) = (\w+)", ir))
    out = []
    for arg in re.findall(r"= reduce_sum\[13\] %([\w.]+) : f32\[1,8,1,1\]", ir):
        m = re.search(r"%%%s = mul %%([\w.]+), %%([\w.]+) :" % re.escape(arg), ir)
        out.append(ops[arg] if not m else "mul(%s)" % ",".join(sorted(ops[m.group(k)] for k in (1, 2))))
    return out


def test_batchnorm_backward_sums_three_products(tmp_path):
    path = tmp_path / "bn.py"
    path.write_text(BATCHNORM)
    # forward: the mean (of the convolution) and the variance (of the centred input squared);
    # backward: the relu's gradient (a where), the centred input and their product
    assert _sums_after_linsum(path, tmp_path) == ["conv2d", "mul(sub,sub)", "where", "mul(sub,where)", "sub"]
    # the CUDA target (no row sums, so ir/linsum.c's first rewrite does not apply: the input's
    # gradient through the mean keeps its own sum of a combination)
    cuda = _sums_after_linsum(path, tmp_path, "--target", "cuda")
    assert cuda[:4] == ["conv2d", "mul(sub,sub)", "where", "mul(sub,where)"] and len(cuda) == 5, cuda
    _three_steps_match(tmp_path, BATCHNORM, "bn", 4, 3)


def test_forward_sum_of_a_product_with_a_per_row_factor(tmp_path):
    path = tmp_path / "bn.py"
    path.write_text(BATCHNORM)
    dump = run([CTC, "compile", path, "--entry", "weighted", "--dump-after", "linsum", "-o", tmp_path / "w.c"]).stderr
    ir = dump[dump.index("func weighted"):]
    # the sums are of x and x * x, times s and 0.5 after them
    assert re.search(r"= reduce_sum\[2\] %x\.\d+ : f32\[6,1\]", ir), ir
    mod = load_module(str(path), "linsum_weighted")
    rng = np.random.default_rng(9)
    args = [rng.standard_normal((6, 40)).astype(np.float32), rng.standard_normal((6, 1)).astype(np.float32)]
    want = mod.weighted(*[torch.from_numpy(a) for a in args])
    run([CTC, "build", path, "-o", tmp_path / "net", "--entry", "weighted"])
    got = run_entry(str(tmp_path), str(tmp_path / "net"), "weighted", args, 2)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a.reshape(b.shape), b.numpy(), rtol=1e-5, atol=1e-5)

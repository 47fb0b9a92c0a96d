"""BatchNorm's sums in the kernels that compute what they sum (ir/rowsplit.c, kernels/schedule.c's
merged rows).

A residual block as CIFAR ResNets write it (conv, BatchNorm, relu, conv, BatchNorm, a 1x1
shortcut, relu) and an average pool. Its training step sums over N, H and W per channel: the
statistics, and the gradients of the weight, the bias and the input. For the hosted C target
each such sum of an elementwise value is a double sum per (image, channel) over H * W, computed
in the loop that computes the value (a row kernel over the merged H and W), then a sum over the
images; a sum over H and W alone (the pool) is that row kernel directly.

- The kernels: the sums are row kernels over [N, C, H * W], none a pass of its own over the
  tensor; their operand arrays hold floats (ctc_sum_f32, the double sum of the same floats).
- The numbers: three SGD-momentum steps (running statistics too) against PyTorch (rtol 1e-3
  on the state, 1e-4 on the loss), and against the unfused build (`--no-fuse`: one pass per
  sum), whose double sums differ only in their order (rtol 1e-5).
- Other sums over H and W (LayerNorm over [H, W], InstanceNorm, a max with a NaN, a variance,
  a mean broadcast back): merged row kernels, forward and three steps against PyTorch.
- The targets without it: `--freestanding` sums in float and `--target cuda` keeps its own
  reductions; the merged row kernel of the pool on the CUDA target (a block per row), run on
  the emulation header, gives the C target's numbers."""
import re

import numpy as np
import pytest
import torch

from ctc_testlib import CTC, ROOT, compare, load_module, run, st_read, st_write, state_dict_np, train_steps_match
from cuda_testlib import emulated, run_env, rt_objects  # noqa: F401 (a fixture)

BLOCK = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block(8, 16)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        out = self.block(x)
        out = F.adaptive_avg_pool2d(out, 1).flatten(1)
        return self.fc(out)


model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def train_step(x, y):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


example_inputs = {"forward": (torch.zeros(16, 8, 16, 16),),
                  "train_step": (torch.zeros(16, 8, 16, 16), torch.zeros(16, dtype=torch.long))}
"""


def _batches(n):
    rng = np.random.default_rng(11)
    return [(rng.standard_normal((16, 8, 16, 16)).astype(np.float32), rng.integers(0, 10, 16).astype(np.int64))
            for _ in range(n)]


@pytest.fixture
def block(tmp_path):
    path = tmp_path / "block.py"
    path.write_text(BLOCK)
    return path


def _train_step_kernels(path, *opts):
    text = run([CTC, "compile", path, "--emit", "kernels", *opts]).stdout
    return text[text.index("func train_step"):]


def test_the_sums_are_row_kernels_of_what_they_sum(block):
    ks = _train_step_kernels(block)
    kernels = re.split(r"\n  kernel \d+: ", ks)
    rows = [k for k in kernels if re.match(r"row over \w+\[16,16,256\], rows of 256", k)]
    # forward: each BatchNorm's variance (3); backward: each one's sums of g_y, x - mean and
    # g_y * (x - mean), of which the bias, weight and input gradients are per-channel multiples
    # (ir/linsum.c) (9), but the bias sums of bn2 and the shortcut's BatchNorm are one (the same
    # gradient)
    sums = sum(len(re.findall(r"= reduce_sum : f64\[16,16,1,1\]", k)) for k in rows)
    assert sums == 11, ks
    # the variance's sum in the kernel that centres the input (which it stores for the output)
    assert sum(1 for k in rows if re.search(r"outputs: %sub\.\d+ %mean\.\d+\n", k)) == 3, ks
    # the pool's sum over H and W: a row kernel over the merged axes
    assert any(re.search(r"= reduce_sum (\(local\) )?: f32\[16,16,1,1\]", k) for k in rows), ks
    # no sum over N, H and W of a full tensor is an op of its own but the means of the convolutions (3)
    own = [k for k in kernels if re.match(r"op over f32\[1,16,1,1\]", k) and "reduce_sum" in k]
    assert len(own) == 3 and all(re.search(r"inputs: %(block_conv\d|block_shortcut_0)\.\d+\n", k) for k in own), own
    # the relu's gradient and the three sums of the shortcut's BatchNorm, and of bn1, in one row
    # kernel each (the input's gradient then one pass after it)
    assert sum(1 for k in rows if len(re.findall(r"= reduce_sum : f64", k)) == 3) == 2, ks
    unfused = _train_step_kernels(block, "--no-fuse")
    assert "f64" not in unfused and "rows of" not in unfused


def test_backward_recomputes_the_centred_input(block):
    """BatchNorm's backward computes x - mean for its sums and again for its input gradient, which
    comes after the sum over the images: the two copies are in different kernels, and CSE (ir/cse.c)
    leaves them apart (a sum over a leading axis is its barrier) instead of the sums' kernel storing
    x - mean for the later one. Each backward row kernel with sums stores no centred input; the
    input-gradient passes after them recompute it from the convolution's output."""
    ks = _train_step_kernels(block)
    kernels = re.split(r"\n  kernel \d+: ", ks[ks.index("grad"):])
    rows = [k for k in kernels if re.match(r"row over \w+\[16,16,256\], rows of 256", k) and "= reduce_sum : f64" in k]
    assert len(rows) >= 3, ks
    for k in rows:
        outs = re.search(r"outputs: (.*)", k).group(1).split()
        assert not any(re.match(r"%sub\.", v) for v in outs), k
    after = [k for k in kernels if re.match(r"elementwise over f32\[16,16,16,16\]", k) and re.search(r"= sub (\(local\) )?:", k)]
    assert len(after) >= 3 and all(re.search(r"inputs: .*%block_(conv\d|shortcut_0)\.", k) for k in after), after


def test_the_row_arrays_hold_floats_and_compile_clean(block, tmp_path):
    out = tmp_path / "gen.c"
    run([CTC, "compile", block, "-o", out])
    text = out.read_text()
    arrays = re.findall(r"(float|double) (\w+_in)\[(\d+)\];", text)
    assert arrays and all(t == "float" for t, _, _ in arrays), arrays
    summed = re.findall(r"_acc = ctc_sum_f32\((\w+_in), 256\);", text)
    # the 11 double sums of the step, and the pool's in it (forward's reads the relu's output in place)
    assert len(summed) == 12 and set(summed) == {a for _, a, n in arrays if n == "256"}, summed
    run(["gcc", "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-fopenmp", "-c", out, "-I", f"{ROOT}/runtime_min",
         "-o", tmp_path / "gen.o"])


def test_training_matches_pytorch_and_the_unfused_build(block, tmp_path):
    mod = load_module(str(block), "rowsplit_block")
    w = tmp_path / "w0.safetensors"
    st_write(w, state_dict_np(mod.model))
    fused, plain = tmp_path / "fused", tmp_path / "plain"
    run([CTC, "build", block, "-o", fused])
    run([CTC, "build", block, "--no-fuse", "-o", plain])
    batches = _batches(3)
    train_steps_match(str(tmp_path), fused, mod, w, batches, "block")
    fused_w = st_read(str(tmp_path / "w3.safetensors"))
    np.save(tmp_path / "ux.npy", batches[0][0])
    np.save(tmp_path / "uy.npy", batches[0][1])
    for exe, tag in ((fused, "f"), (plain, "p")):
        run([exe, "run", "train_step", "--weights", w, "--input", tmp_path / "ux.npy", "--input",
             tmp_path / "uy.npy", "--output", tmp_path / f"{tag}_loss.npy", "--save", tmp_path / f"{tag}.safetensors",
             "--save-training-state"])
    a, b = st_read(str(tmp_path / "f.safetensors")), st_read(str(tmp_path / "p.safetensors"))
    assert a.keys() == b.keys() and "block.bn1.running_var" in a and fused_w
    for k in a:
        compare(f"{k}: fused against --no-fuse after a step", a[k], b[k], 1e-5, 1e-7)


def test_freestanding_and_cuda_keep_their_sums(block, tmp_path):
    free = _train_step_kernels(block, "--freestanding")
    assert "f64" not in free and "rows of 256" in free   # (the pool's row kernel: no double in it)
    cuda = _train_step_kernels(block, "--target", "cuda")
    assert "f64" not in cuda


def test_the_merged_rows_on_the_cuda_target(block, tmp_path, rt_objects):
    """The pool's sum over H and W is a row kernel over [16, 16, 256] on the CUDA target too (a
    block per row): the emulated program's forward output against the C target's."""
    cuda = run([CTC, "compile", block, "--target", "cuda", "--emit", "kernels"]).stdout
    fwd = cuda[:cuda.index("func train_step")]
    assert "row over f32[16,16,256], rows of 256" in fwd, fwd
    cu, emu = emulated(tmp_path, block, [], rt_objects)
    cexe = tmp_path / "c_net"
    run([CTC, "build", block, "-o", cexe])
    mod = load_module(str(block), "rowsplit_block_cuda")
    w = tmp_path / "w.safetensors"
    st_write(w, state_dict_np(mod.model))
    x = _batches(1)[0][0]
    np.save(tmp_path / "x.npy", x)
    outs = []
    for exe, tag in ((emu, "cuda"), (cexe, "c")):
        run_env([exe, "run", "forward", "--weights", w, "--input", tmp_path / "x.npy", "--output",
                 tmp_path / f"{tag}.npy"])
        outs.append(np.load(tmp_path / f"{tag}.npy"))
    compare("forward: CUDA (emulated) against C", outs[0], outs[1], 1e-5, 1e-6)


TRAILING = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 8, 3, padding=1)
        self.ln = nn.LayerNorm([12, 12])
        self.inorm = nn.InstanceNorm2d(8, affine=True)

    def forward(self, x):
        h = self.conv(x)
        a = self.ln(h)
        b = self.inorm(torch.tanh(h))
        c = (a * b.mean((2, 3), keepdim=True)).sum((2, 3))
        d = h.amax(dim=(2, 3))
        e = (a - b).var((2, 3))
        f = F.adaptive_avg_pool2d(F.relu(a + b), 1).flatten(1)
        return c + d + e + f


model = M()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)


def train_step(x, y):
    optimizer.zero_grad()
    loss = F.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


example_inputs = {"forward": (torch.randn(16, 4, 12, 12),), "train_step": (torch.randn(16, 4, 12, 12), torch.randn(16, 8))}
"""


def test_other_sums_over_h_and_w_are_merged_rows(tmp_path):
    path = tmp_path / "trailing.py"
    path.write_text(TRAILING)
    fwd = run([CTC, "compile", path, "--emit", "kernels"]).stdout
    fwd = fwd[:fwd.index("func train_step")]
    # LayerNorm's two loops, InstanceNorm's, the max, the variance, the pool: rows of H * W
    assert fwd.count("row over f32[16,8,144], rows of 144") >= 4 and "op over f32[16,8,1,1]" not in fwd, fwd
    mod = load_module(str(path), "rowsplit_trailing")
    w = tmp_path / "w0.safetensors"
    st_write(w, state_dict_np(mod.model))
    exe = tmp_path / "net"
    run([CTC, "build", path, "-o", exe])
    rng = np.random.default_rng(1)
    x = rng.standard_normal((16, 4, 12, 12)).astype(np.float32)
    x[0, 0, 3, 3] = np.nan   # the max and every sum of image 0 propagate it
    np.save(tmp_path / "x.npy", x)
    run([exe, "run", "forward", "--weights", w, "--input", tmp_path / "x.npy", "--output", tmp_path / "o.npy"])
    with torch.no_grad():
        want = mod.model(torch.from_numpy(x)).numpy()
    got = np.load(tmp_path / "o.npy")
    assert np.array_equal(np.isnan(got), np.isnan(want)) and np.isnan(want).any()
    ok = ~np.isnan(want)
    compare("forward", got[ok], want[ok], 1e-4, 1e-5)
    batches = [(rng.standard_normal((16, 4, 12, 12)).astype(np.float32), rng.standard_normal((16, 8)).astype(np.float32))
               for _ in range(3)]
    train_steps_match(str(tmp_path), exe, mod, w, batches, "trailing")

"""Concatenations that read their parts in place (kernels/schedule.c: CONCAT among the readers
that index a folded slice or permute through strides), on the C and the CUDA target.

`torch.roll`, HF-style `rotate_half` (`torch.cat((-x2, x1), -1)`), a Swin-style shift over two
axes and a `cat` of stepped and transposed slices, as users write them: each slice is a view read
in place by the concatenation, not a copy of its own before it.

- The C: the concatenation's parts say "read in place from" their root, and no slice is a loop of
  its own (each is "a strided view, no code"); it compiles with -Wall -Wextra -Werror.
- The numbers: the forward's outputs are PyTorch's bit for bit (copies and one linear layer
  computed the same way in both builds: against the `--no-fuse` build, which copies every
  slice), against PyTorch at rtol 1e-5, and three SGD steps through them against PyTorch.
- The CUDA target's concatenation kernel indexes the same views through their strides; its
  emulated forward and training step match the C target's."""
import re

import numpy as np
import pytest

from ctc_testlib import CTC, ROOT, compare, load_module, run, st_read, st_write, state_dict_np, train_steps_match
from cuda_testlib import emulated, run_env, rt_objects  # noqa: F401 (a fixture)

MODEL = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


class Mixer(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(24, 24)
        self.out = nn.Linear(24, 5)

    def forward(self, x):
        h = self.proj(x)                                   # [B, 6, 8, 24]
        s = torch.roll(h, shifts=(-2, 3), dims=(1, 2))     # a shifted window, two axes
        r = torch.roll(h, 5, -1)
        c = torch.cat([h[..., 12:], h[..., :4], h[..., 1:16:2]], dim=-1)   # 12 + 4 + 8
        t = torch.cat([h.transpose(1, 2)[:, :3], h.transpose(1, 2)[:, 5:]], dim=1)
        y = s + r * 0.5 + rotate_half(h) * torch.sigmoid(c)
        return self.out(y + t.transpose(1, 2)[:, :, :6].sum(2, keepdim=True)).mean((1, 2))


model = Mixer()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)


def train_step(x, y):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


example_inputs = {"forward": (torch.zeros(4, 6, 8, 24),),
                  "train_step": (torch.zeros(4, 6, 8, 24), torch.zeros(4, dtype=torch.long))}
"""


@pytest.fixture
def mixer(tmp_path):
    path = tmp_path / "mixer.py"
    path.write_text(MODEL)
    return path


def _batches(n):
    rng = np.random.default_rng(5)
    return [(rng.standard_normal((4, 6, 8, 24)).astype(np.float32), rng.integers(0, 5, 4).astype(np.int64))
            for _ in range(n)]


def test_the_parts_are_read_in_place(mixer, tmp_path):
    out = tmp_path / "gen.c"
    run([CTC, "compile", mixer, "-o", out])
    text = out.read_text()
    fwd = text[text.index("int mixer_forward_batch("):text.index("int mixer_train_step(")]
    # every concatenation of the forward reads its slices in place (roll over two axes: two
    # concatenations, the second reading the first's parts; roll over the last; the cat of
    # three; rotate_half's x1 beside its -x2; the transposed slices)
    concats = re.findall(r"/\* mixer\.py:\d+  concat\(([^)]*)\)", fwd)
    assert len(concats) >= 6, concats
    assert len(re.findall(r"read in place from h\b", fwd)) >= 7, fwd
    assert "(in h)" in fwd
    # no slice of the forward is a copy of its own
    slices = re.findall(r"/\* mixer\.py:\d+  slice\([^\n]*", fwd)
    assert slices and all("a strided view, no code" in s for s in slices), slices
    run(["gcc", "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-fopenmp", "-c", out, "-I",
         f"{ROOT}/runtime_min", "-o", tmp_path / "gen.o"])
    # the unfused build copies each slice (no folding without fusion)
    plain = tmp_path / "plain.c"
    run([CTC, "compile", mixer, "--no-fuse", "-o", plain])
    assert "read in place" not in plain.read_text()


def test_forward_and_training_match_pytorch(mixer, tmp_path):
    import torch
    mod = load_module(str(mixer), "strided_concat_mixer")
    w = tmp_path / "w0.safetensors"
    st_write(w, state_dict_np(mod.model))
    exe, plain = tmp_path / "net", tmp_path / "plain"
    run([CTC, "build", mixer, "-o", exe])
    run([CTC, "build", mixer, "--no-fuse", "-o", plain])
    x = _batches(1)[0][0]
    np.save(tmp_path / "x.npy", x)
    outs = {}
    for e, tag in ((exe, "fused"), (plain, "plain")):
        run([e, "run", "forward", "--weights", w, "--input", tmp_path / "x.npy", "--output",
             tmp_path / f"{tag}.npy"])
        outs[tag] = np.load(tmp_path / f"{tag}.npy")
    with torch.no_grad():
        want = mod.model(torch.from_numpy(x)).numpy()
    compare("forward against PyTorch", outs["fused"], want, 1e-5, 1e-6)
    compare("forward against the --no-fuse build", outs["fused"], outs["plain"], 1e-6, 1e-7)
    train_steps_match(str(tmp_path), exe, mod, w, _batches(3), "mixer")


def test_cuda_reads_the_parts_in_place(mixer, tmp_path, rt_objects):
    """On the CUDA target too the slices are views its concatenation kernel indexes through their
    strides; the emulated forward and a training step give the C target's numbers."""
    def forward_kernels(*opts):
        k = run([CTC, "compile", mixer, "--emit", "kernels", *opts]).stdout
        return k[:k.index("func train_step")]

    cuda, c = forward_kernels("--target", "cuda"), forward_kernels()
    in_place = "(strided, read in place by its readers)"
    assert cuda.count(in_place) == c.count(in_place) >= 12, (c, cuda)
    cu, emu = emulated(tmp_path, mixer, [], rt_objects)
    assert re.search(r"cat\[ctc_i\] = h\[384 \+ ctc_o \* 1152 \+ \(ctc_a - 0\) \* 192 \+ ctc_q\];", cu.read_text())
    cexe = tmp_path / "c_net"
    run([CTC, "build", mixer, "-o", cexe])
    mod = load_module(str(mixer), "strided_concat_cuda")
    w = tmp_path / "w.safetensors"
    st_write(w, state_dict_np(mod.model))
    x, y = _batches(1)[0]
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    outs = []
    for e, tag in ((emu, "cuda"), (cexe, "c")):
        run_env([e, "run", "forward", "--weights", w, "--input", tmp_path / "x.npy", "--output",
                 tmp_path / f"{tag}.npy"])
        run_env([e, "run", "train_step", "--weights", w, "--input", tmp_path / "x.npy", "--input",
                 tmp_path / "y.npy", "--output", tmp_path / f"{tag}_loss.npy", "--save", tmp_path / f"{tag}.safetensors"])
        outs.append((np.load(tmp_path / f"{tag}.npy"), st_read(str(tmp_path / f"{tag}.safetensors"))))
    compare("forward: CUDA (emulated) against C", outs[0][0], outs[1][0], 1e-5, 1e-6)
    for k in outs[1][1]:
        compare(f"{k} after a step: CUDA (emulated) against C", outs[0][1][k], outs[1][1][k], 1e-5, 1e-6)

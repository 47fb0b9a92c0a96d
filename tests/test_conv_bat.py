"""Stride-1 convolutions of bf16 values on small images as a GEMM per output position over the
batch (codegen_c/conv_bat_c.c, ir_conv_bat_bytes: the taps that fall into the padding skipped).

An autocast CNN of 8x8 and 4x4 images, batch 32: 3x3 convolutions with odd channel counts in and
out (a pair of channels half empty, a 12-row tile part full), a 5x5 one on 4x4 images (at a corner
9 of its 25 taps inside), a stride-2 one 8x8 -> 4x4, and the classifier. On a CPU with AMX the
convolutions with whole tiles of 16 channel pairs in (c's forward and input gradient, wide's
forward: 32 channels) and every weight gradient by position run on its tiles (20 output channels:
a part-full second row tile; 33: a part-full block), the others on vdpbf16ps. Checked:

- test_calls: the generated C calls ctc_conv_bat_bf16 for the four same-size convolutions of the
  forward with 8 channels in or more and the stride-2 one, and in the training step also for the
  same-size ones' input gradients and ctc_conv_bat_wgrad_bf16 for their weight gradients (the
  5-channel stem: the implicit GEMM); a batch chosen at run time keeps the implicit GEMM for other
  batches under `if (N % 32 == 0)` (and the stride-2 one on the tiles); both
  files compile with -Wall -Wextra -Werror for AVX-512 BF16, AVX-512 and AVX2;
- test_small_images: built with -march=native where the CPU has AVX-512 BF16 (else skipped; the
  other branch is test_gemm_bf16's), the forward within two bf16 roundings of PyTorch 1.13's CPU
  autocast (seven layers rounded to bf16: a sum summed in another order and rounded the other
  way in one of them moves the output by up to one more; seen: one element of 320 at 2) and no
  further from a float64 run than PyTorch's (x 1.25), at batch 32 and, through a batch chosen at
  run time (1..64), at 32, 64 (two panels) and 7 (the implicit GEMM); three SGD-momentum steps:
  the weights' distance to PyTorch's bf16 run within PyTorch's own bf16-vs-f32 distance and to
  float64 within 1.25x PyTorch bf16's; the same bits with 1 and 2 threads."""
import re

import numpy as np
import torch

from ctc_testlib import CTC, build_ctc, run
from test_gemm_bf16 import CFLAGS, HEAD, RT, STEPS, build_cnn, infer_check, train_check
from test_gemm_isa import cpu_has, x86

CNN = HEAD + """
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(5, 16, 3, padding=1)
        self.a = nn.Conv2d(16, 33, 3, padding=1, bias=False)
        self.b = nn.Conv2d(33, 24, 3, padding=1)
        self.down = nn.Conv2d(24, 32, 3, stride=2, padding=1)
        self.c = nn.Conv2d(32, 32, 3, padding=1)
        self.wide = nn.Conv2d(32, 20, 5, padding=2)
        self.head = nn.Linear(20 * 4 * 4, 10)

    def forward(self, x):
        h = F.relu(self.stem(x))
        h = F.relu(self.b(F.relu(self.a(h))))
        h = F.relu(self.down(h))
        h = h + F.relu(self.c(h))
        h = torch.tanh(self.wide(h))
        return self.head(h.flatten(1))
""" + STEPS + """

example_inputs = {"infer": (torch.randn(32, 5, 8, 8),),
                  "train_step": (torch.randn(32, 5, 8, 8), torch.zeros(32, dtype=torch.long))}
"""


def bat_calls(path):
    """The calls of ctc_conv_bat_bf16, ctc_conv_bat_wgrad_bf16, ctc_conv_pix_bf16 and ctc_conv_wgrad_bf16
    in a generated model.c's entries"""
    code = path.read_text()
    code = code[code.index("int net_init("):]
    return tuple(len(re.findall(r"\b%s\(" % f, code))
                 for f in ("ctc_conv_bat_bf16", "ctc_conv_bat_wgrad_bf16", "ctc_conv_pix_bf16", "ctc_conv_wgrad_bf16"))


def test_calls(tmp_path):
    build_ctc()
    (tmp_path / "cnn.py").write_text(CNN)
    run([CTC, "compile", tmp_path / "cnn.py", "--name", "net", "--entry", "train_step", "-o", tmp_path / "t.c"])
    # the forward's a, b, c, wide and their input gradients and weight gradients, the forward of the
    # strided one (down: its gradients stay on the tiles); the stem (5 channels in) on the implicit GEMM
    assert bat_calls(tmp_path / "t.c") == (9, 4, 1, 1)
    # a batch chosen at run time (1..32): each of the four under `if (N % 32 == 0)`, the implicit GEMM else
    # (the strided one on the tiles)
    run([CTC, "compile", tmp_path / "cnn.py", "--name", "net", "--entry", "infer", "--input", "images=f32[N,5,8,8]",
         "--max", "N=32", "-o", tmp_path / "i.c"])
    assert bat_calls(tmp_path / "i.c") == (4, 0, 5, 0)
    assert len(re.findall(r"if \(\(batch\) % 32 == 0\)", (tmp_path / "i.c").read_text())) == 4
    # each branch compiles with warnings as errors: AVX-512 BF16 (where the CPU has it), AVX-512 without it, AVX2
    for march, need in (("native", "avx512_bf16"), ("skylake-avx512", None), ("haswell", None)):
        if x86() and (need is None or cpu_has(need)):
            for f in ("t", "i"):
                run(["cc", *CFLAGS, f"-march={march}", "-fopenmp", f"-I{RT}", "-c", tmp_path / f"{f}.c", "-o",
                     tmp_path / f"{f}_{march}.o"], timeout=600)


def test_small_images(tmp_path):
    exe, mod, w0 = build_cnn(tmp_path, CNN, "native", "conv_bat_cnn")
    src = tmp_path / "cnn.py"
    dyn = tmp_path / "net_n"   # infer at a batch chosen at run time, 1..64 (-march=native: ctc build's)
    run([CTC, "build", src, "--entry", "infer", "--input", "images=f32[N,5,8,8]", "--max", "N=64", "-o", dyn])
    for prog, n in ((exe, 32), (dyn, 32), (dyn, 64), (dyn, 7)):
        infer_check(tmp_path, prog, mod, w0, torch.randn(n, 5, 8, 8), 2, f"batch {n}")

    rng = np.random.default_rng(1)
    batches = [(rng.standard_normal((32, 5, 8, 8)).astype(np.float32), rng.integers(0, 10, 32)) for _ in range(3)]
    train_check(tmp_path, exe, mod.Net, w0, batches, "small images")

"""Elementwise runs regrouped across a GEMM (ir/regroup.c): reverse mode writes SwiGLU's backward
as a run for w3's input gradient (g * silu(w1)), w3's GEMMs, then a run for w1's that reads the
first run's g * w3 and recomputes sigmoid(w1). The second run moves up to follow the first: one
loop computes both gradients with one sigmoid, and the training step still matches PyTorch
(float32: rtol 1e-4 on the loss, 1e-3 on the weights after the steps)."""
import re

import numpy as np

from ctc_testlib import CTC, load_module, run, st_write, state_dict_np, train_steps_match

SWIGLU = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class FeedForward(nn.Module):
    def __init__(self, dim=64, hidden=256):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


model = FeedForward()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)


def train_step(x, y):
    optimizer.zero_grad()
    loss = F.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


example_inputs = {"forward": (torch.zeros(4, 64, 64),), "train_step": (torch.zeros(4, 64, 64), torch.zeros(4, 64, 64))}
"""


def test_swiglu_backward_is_one_loop(tmp_path):
    path = tmp_path / "ffn.py"
    path.write_text(SWIGLU)
    run([CTC, "compile", path, "-o", tmp_path / "gen.c"])
    text = (tmp_path / "gen.c").read_text()
    step = text[text.index("int feedforward_train_step(feedforward_t *m"):]
    # forward: silu(w1) in w1's GEMM epilogue, which stores sigmoid(w1) (autograd_ad/remat.c keeps a
    # sigmoid of 65,536 elements rather than recompute it); backward: one kernel for both gradients
    # (their runs both read w1 and its sigmoid), no sigmoid
    kernels = re.findall(r"/\* kernel \d+: (\d+) elementwise ops fused over f32\[4,64,256\], stores ([\w, ]+) \*/", step)
    both = [k for k in kernels if "grad_w3" in k[1] and "grad_w1" in k[1]]
    assert len(both) == 1, kernels
    assert step.count("ctc_exp_cr_f32(-") == 1, "sigmoid(w1) once, in forward"
    loop = step[step.index(both[0][1]):]
    assert re.search(r"const float sigmoid\w* = sigmoid\w*\[", loop[:loop.index("\n  }\n")]), "backward reads no stored sigmoid"
    mod = load_module(str(path), "regroup_swiglu")
    w = tmp_path / "w0.safetensors"
    st_write(w, state_dict_np(mod.model))
    exe = tmp_path / "net"
    run([CTC, "build", path, "-o", exe])
    rng = np.random.default_rng(4)
    batches = [(rng.standard_normal((4, 64, 64)).astype(np.float32), rng.standard_normal((4, 64, 64)).astype(np.float32))
               for _ in range(2)]
    train_steps_match(str(tmp_path), exe, mod, w, batches, "swiglu")

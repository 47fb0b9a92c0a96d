"""Values that must equal PyTorch's exactly where PyTorch's semantics are easy
to miss (issue 27): no-op conversions return the tensor itself (so an in-place
update through the result reaches the original), the gradients of losses at
the edges of their domains, and compile-time str()/repr() of values."""
import os
import subprocess

import numpy as np
import torch

from ctc_testlib import CTC, compare, load_module, run_forward

ALIAS_SRC = '''
import torch
import torch.nn as nn

y0 = torch.ones(3)
# PyTorch returns self for a conversion that changes nothing, a new tensor otherwise
SAME = [y0.float() is y0, y0.to(torch.float32) is y0, y0.type_as(y0) is y0, y0.contiguous() is y0,
        y0.cpu() is y0, y0.to("cpu") is y0, y0.to(y0) is y0, y0.to(dtype=torch.float32) is y0,
        y0.double() is y0, y0.to(torch.float32, copy=True) is y0, y0.long() is y0]


class Net(nn.Module):
    def forward(self, x):
        y = x * 1
        y.float().mul_(2)
        y.to(torch.float32).add_(1)
        y.type_as(x).mul_(3)
        y.contiguous().add_(10)
        y.to("cpu").mul_(2)
        y.cpu().add_(1)
        y.to(x).mul_(2)
        y.to(dtype=torch.float32).add_(-0.5)
        d = y.double()
        d.mul_(100)          # a new float64 tensor: y unchanged
        c = y.to(torch.float32, copy=True)
        c.mul_(1000)         # copy=True: a new tensor
        n = y.long()
        n.add_(7)
        flags = sum(2.0 ** i for i, s in enumerate(SAME) if s)
        return y + flags, d, n


example_inputs = (torch.zeros(3),)
'''


def test_noop_conversions_alias(tmp_path):
    path = tmp_path / "model.py"
    path.write_text(ALIAS_SRC)
    mod = load_module(str(path))
    x = np.array([1.0, -2.0, 3.5], np.float32)
    want = [t.detach().numpy() for t in mod.Net()(torch.from_numpy(x))]
    got = run_forward(str(tmp_path), str(path), mod.Net(), [x])
    assert len(got) == 3
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        compare("alias", g, w, 1e-6, 0)

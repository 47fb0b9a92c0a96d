"""torch.einsum (contracted pairwise as permutes, reshapes, sums and batched GEMMs) and
torch.meshgrid, against PyTorch running the same file: forward and one SGD step (the
gradients flow through the GEMMs and reductions einsum becomes)."""
import numpy as np
import torch

from ctc_testlib import compare, load_module, run_forward, train_steps_match

EINSUM = """
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import einsum


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(6, 5) * 0.3)
        self.v = nn.Parameter(torch.randn(5, 4) * 0.3)
        ys, xs = torch.meshgrid(torch.arange(3), torch.arange(4), indexing="ij")   # compile time
        self.register_buffer("grid", (ys * 4 + xs).float())

    def forward(self, q, k, x):               # q, k [2, 3, 7, 6]; x [2, 7, 6]
        dots = einsum('b h i d, b h j d -> b h i j', q, k)
        out = einsum('bhij,bhjd->bhid', dots.softmax(dim=-1), k)
        proj = torch.einsum('...id,de->...ie', x, self.w)          # an ellipsis
        chain = torch.einsum('bid,de,ef->bif', x, self.w, self.v)  # three operands
        tr = torch.einsum('bij->bji', x)                            # a permutation
        tot = torch.einsum('bij->b', x)                             # sums only
        imp = torch.einsum('ij,jk', self.w, self.v)                 # implicit output: 'ik'
        outer = torch.einsum('i,j->ij', x[0, 0], self.v[:, 0])
        gy, gx = torch.meshgrid(torch.arange(2.0), x[0, 0, :3], indexing="xy")   # staged
        loss_terms = (out.mean() + proj.sum() * 0.1 + chain.square().mean() + imp.sum() + outer.mean())
        return out, proj, chain, tr, tot, imp, outer, gy, gx, self.grid, loss_terms


model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)


def train_step(q, k, x):
    optimizer.zero_grad()
    loss = model(q, k, x)[-1]
    loss.backward()
    optimizer.step()
    return loss


_ins = (torch.randn(2, 3, 7, 6), torch.randn(2, 3, 7, 6), torch.randn(2, 7, 6))
example_inputs = {"forward": _ins, "train_step": _ins}
"""


def test_einsum_and_meshgrid(tmp_path):
    path = tmp_path / "m.py"
    path.write_text(EINSUM)
    mod = load_module(str(path), "einsum_model")
    rng = np.random.default_rng(0)
    ins = [rng.standard_normal(s).astype(np.float32) for s in [(2, 3, 7, 6), (2, 3, 7, 6), (2, 7, 6)]]
    got = run_forward(str(tmp_path), str(path), mod.model, ins)
    with torch.no_grad():
        want = mod.model(*[torch.from_numpy(a) for a in ins])
    assert len(got) == len(want) == 11
    for i, (g, t) in enumerate(zip(got, want)):
        compare(f"output {i}", g, t.numpy(), 1e-4, 1e-5)
    train_steps_match(str(tmp_path), str(tmp_path / "net"), mod, str(tmp_path / "weights.safetensors"), [tuple(ins)],
                      "einsum", 1e-4, 1e-6)

"""torch.einsum (contracted pairwise as permutes, reshapes, sums and batched GEMMs) and
torch.meshgrid, against PyTorch running the same file: forward and one SGD step (the
gradients flow through the GEMMs and reductions einsum becomes)."""
import numpy as np
import torch

from ctc_testlib import CTC, compare, load_module, run, st_read, st_write, state_dict_np

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
    exe = tmp_path / "net"
    run([CTC, "build", path, "-o", exe])
    mod = load_module(str(path), "einsum_model")
    torch.manual_seed(0)
    net = mod.Net()
    rng = np.random.default_rng(0)
    ins = [rng.standard_normal(s).astype(np.float32) for s in [(2, 3, 7, 6), (2, 3, 7, 6), (2, 7, 6)]]
    args = []
    for i, a in enumerate(ins):
        np.save(tmp_path / f"i{i}.npy", a)
        args += ["--input", tmp_path / f"i{i}.npy"]
    w = tmp_path / "w.safetensors"
    st_write(str(w), state_dict_np(net))
    outs = [tmp_path / f"o{i}.npy" for i in range(11)]
    run([exe, "run", "forward", "--weights", w] + args + [a for o in outs for a in ("--output", o)])
    with torch.no_grad():
        want = net(*[torch.from_numpy(a) for a in ins])
    for i, (o, t) in enumerate(zip(outs, want)):
        compare(f"output {i}", np.load(o), t.numpy(), 1e-4, 1e-5)
    run([exe, "run", "train_step", "--weights", w] + args + ["--output", tmp_path / "loss.npy", "--save",
                                                              tmp_path / "after.safetensors"])
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    loss = net(*[torch.from_numpy(a) for a in ins])[-1]
    loss.backward()
    opt.step()
    compare("loss", np.load(tmp_path / "loss.npy"), loss.detach().numpy(), 1e-4, 1e-6)
    got = st_read(str(tmp_path / "after.safetensors"))
    for k, v in net.state_dict().items():
        compare(k, got[k], v.numpy(), 1e-4, 1e-6)

"""Forward mode: make_dual / unpack_dual and the functional jvp / hvp."""
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.autograd.forward_ad as fwAD
from torch.autograd.functional import jvp, hvp


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(5, 4)

    def forward(self, x):
        return F.softmax(self.lin(x), dim=1)


model = Net()


def f(x):
    return torch.sin(x) * x.sum(dim=1, keepdim=True) + torch.cos(x) / (x * x + 1)


def dual_tangent(x, t):
    with fwAD.dual_level():
        y = model(fwAD.make_dual(x, t))
        return fwAD.unpack_dual(y).tangent


def f_jvp(x, v):
    return jvp(f, x, v)


def loss(x):
    return (model(x) * torch.arange(4.0)).sum()


def loss_hvp(x, v):
    return hvp(loss, x, v)


example_inputs = {"forward": (torch.randn(2, 5),),
                  "dual_tangent": (torch.randn(2, 5), torch.randn(2, 5)),
                  "f_jvp": (torch.randn(2, 5), torch.randn(2, 5)),
                  "loss_hvp": (torch.randn(2, 5), torch.randn(2, 5))}

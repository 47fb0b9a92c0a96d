"""A grab bag of tensor operations: elementwise, reductions, shapes, indexing."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Ops(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(4))

    def forward(self, x, y):
        a = torch.exp(-x.abs()) + torch.sqrt(x * x + 1.0) - torch.log(y.abs() + 1.0)
        b = torch.where(x > y, torch.maximum(x, y), torch.minimum(x, 2 * y)).clamp(-2.0, 2.0)
        c = torch.cat([a, b], dim=1)
        d = torch.stack([a, b], dim=0).amax(dim=0)
        e = c.reshape(3, 2, 4).permute(1, 0, 2).sum(dim=1)
        f = x.unsqueeze(1).expand(3, 2, 4).mean(dim=1) * self.scale
        g = (x @ y.t()).softmax(dim=-1) @ y
        h = x[:, 1:3].pow(2).sum(-1, keepdim=True) + y[..., :1]
        return d + f + g * h + e.mean() + torch.erf(x).transpose(0, 1).t() ** 2


model = Ops()
example_inputs = (torch.randn(3, 4), torch.randn(3, 4))

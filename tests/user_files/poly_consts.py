"""A polynomial-fitting script in the style of a regression example: tensors
computed at module level (arithmetic, transpose, indexing, cat, size, item) are
constants of the compiled model or shape its construction; a positional table
filled by slice assignment in __init__; a module-level fitting loop that runs no
iterations under ctc and whose results are only printed."""
from itertools import count
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

DEGREE = 3
W_true = torch.arange(1., DEGREE + 1).view(DEGREE, 1) * 1.5 - 2
b_true = torch.tensor([0.25]) * 4
noise_scale = torch.randn(DEGREE, 1) * 5          # only its shape matters below
powers = torch.cat([W_true.t() ** k for k in range(1, 3)], 0)   # [2, DEGREE]
offset = (powers.sum() - W_true.mean()).item()
scales = [float(v) for v in b_true]


def features(x):
    x = x.unsqueeze(1)
    return torch.cat([x ** i for i in range(1, DEGREE + 1)], 1)


def target(x):
    return x.mm(W_true) + b_true.item()


class Table(nn.Module):
    def __init__(self, width, length=12):
        super().__init__()
        table = torch.zeros(length, width)
        pos = torch.arange(0, length, dtype=torch.float).unsqueeze(1)
        freq = torch.exp(torch.arange(0, width, 2).float() * (-math.log(1000.0) / width))
        table[:, 0::2] = torch.sin(pos * freq)
        table[:, 1::2] = torch.cos(pos * freq)
        self.register_buffer('table', table.unsqueeze(0).transpose(0, 1))

    def forward(self, n):
        return self.table[:n, 0, :]


class Fit(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(noise_scale.size(0), 1)
        self.pos = Table(4)

    def forward(self, x):
        f = features(x)
        y = self.fc(f) + target(f) * scales[0] + powers[1, 2] * offset
        return y + self.pos(x.size(0)).sum(1, keepdim=True)


model = Fit()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in count(1):
    batch = torch.randn(8)
    opt.zero_grad()
    loss = F.smooth_l1_loss(model(batch), target(features(batch)))
    loss.backward()
    opt.step()
    if step >= 3:
        break

print('loss {} after {} steps'.format(loss.item(), step))


def describe(W, b):
    text = 'y = '
    for i, w in enumerate(W):
        text += '{:+.2f} x^{} '.format(w, i + 1)
    return text + '{:+.2f}'.format(b[0])


print('fitted: ' + describe(model.fc.weight.view(-1), model.fc.bias))
print('true:   ' + describe(W_true.view(-1), b_true))

# Rotary table with Llama-3-style frequency scaling: a Python loop over the
# frequencies (0-d tensors) in __init__, branching on each, rebuilt with
# torch.tensor(list); then the complex rotation of llama_rope.py.
import math

import torch
import torch.nn as nn


def scale_frequencies(freqs, factor=8.0, lo=1.0, hi=4.0, context=64):
    long_wave, short_wave = context / lo, context / hi
    out = []
    for f in freqs:
        wave = 2 * math.pi / f
        if wave < short_wave:
            out.append(f)
        elif wave > long_wave:
            out.append(f / factor)
        else:
            mix = (context / wave - lo) / (hi - lo)
            out.append((1 - mix) * f / factor + mix * f)
    return torch.tensor(out, dtype=freqs.dtype)


def table(dim, n, base=500000.0):
    freqs = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
    ang = torch.outer(torch.arange(n, dtype=torch.float32), scale_frequencies(freqs))
    return torch.polar(torch.ones_like(ang), ang)


class Net(nn.Module):
    def __init__(self, dim=16, n=32):
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.freqs_cis = table(dim, n)

    def forward(self, x):
        b, t, _ = x.shape
        h = torch.view_as_complex(self.fc(x).float().reshape(b, t, -1, 2))
        return torch.view_as_real(h * self.freqs_cis[:t]).flatten(2).type_as(x)

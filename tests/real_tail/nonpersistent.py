import math
import torch
import torch.nn as nn


class Rotary(nn.Module):
    def __init__(self, dim, max_len=16):
        super().__init__()
        inv = 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim))
        t = torch.arange(max_len).float()
        freqs = torch.outer(t, inv)
        self.register_buffer("cos_cached", freqs.cos(), persistent=False)
        self.register_buffer("sin_cached", freqs.sin(), persistent=False)
        self.register_buffer("scale", torch.ones(dim))

    def forward(self, x):
        n = x.shape[1]
        x1, x2 = x[..., 0::2], x[..., 1::2]
        c, s = self.cos_cached[:n], self.sin_cached[:n]
        return torch.cat([x1 * c - x2 * s, x1 * s + x2 * c], dim=-1) * self.scale


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.rot = Rotary(8)
        self.register_buffer("mask", torch.tril(torch.ones(6, 6)), persistent=False)

    def forward(self, x):
        h = self.rot(self.fc(x))
        return (self.mask[: x.shape[1], : x.shape[1]] @ h)


class Reset(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.register_buffer("pos", torch.zeros(6, 8), persistent=False)
        self.pos = torch.arange(48).float().view(6, 8) / 48.0
        self.n_keys = len(self.state_dict())

    def forward(self, x):
        return self.fc(x + self.pos) * self.n_keys


class Late(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.register_buffer("mask", None, persistent=False)
        self.mask = torch.tril(torch.ones(6, 6))

    def forward(self, x):
        return self.mask @ self.fc(x)

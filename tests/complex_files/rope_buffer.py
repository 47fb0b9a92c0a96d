# Rotary tables kept as complex64 buffers: persistent (a state_dict entry a
# PyTorch checkpoint carries) and not (computed in __init__).
import torch
import torch.nn as nn


def rope_table(dim, n, base=10000.0):
    inv = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
    ang = torch.outer(torch.arange(n).float(), inv)
    return torch.polar(torch.ones_like(ang), ang)


def rotate(x, table):
    # x: (B, T, H, D) real; table: (T, D // 2) complex
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    out = torch.view_as_real(xc * table[None, :, None, :])
    return out.flatten(3).type_as(x)


class Rotary(nn.Module):
    def __init__(self, heads=2, dim=8, n=6):
        super().__init__()
        self.heads = heads
        self.proj = nn.Linear(heads * dim, heads * dim)
        self.register_buffer("table", rope_table(dim, n))
        self.register_buffer("spare", rope_table(dim, n) * 2.0, persistent=False)

    def forward(self, x):
        b, t, c = x.shape
        q = self.proj(x).view(b, t, self.heads, c // self.heads)
        return rotate(q, self.table[:t]) + rotate(q, self.spare[:t].conj())

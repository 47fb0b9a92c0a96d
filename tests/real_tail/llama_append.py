import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = RMSNorm(dim)
        self.w1 = nn.Linear(dim, 2 * dim, bias=False)
        self.w2 = nn.Linear(2 * dim, dim, bias=False)

    def forward(self, x):
        return x + self.w2(F.silu(self.w1(self.norm(x))))


class Decoder(nn.Module):
    def __init__(self, vocab=11, dim=8, n_layers=3):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList()
        for _ in range(n_layers - 1):
            self.layers.append(Block(dim))
        self.layers.insert(0, Block(dim))
        self.extra = nn.ModuleList([Block(dim)])
        self.extra += [Block(dim)]
        self.extra.extend([Block(dim)])
        self.heads = nn.ModuleDict()
        self.heads["out"] = nn.Linear(dim, vocab)
        self.heads.update({"aux": nn.Linear(dim, 2)})
        self.scales = nn.ParameterList()
        for i in range(2):
            self.scales.append(nn.Parameter(torch.full((dim,), 1.0 + i)))
        self.norm = RMSNorm(dim)

    def forward(self, idx):
        h = self.tok(idx)
        for layer in self.layers:
            h = layer(h)
        for i, blk in enumerate(self.extra):
            h = blk(h) * self.scales[i % 2]
        for name, head in self.heads.items():
            if name == "out":
                logits = head(self.norm(h))
        return logits


model = Decoder()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)


def train_step(idx, targets):
    logits = model(idx)
    loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss

import torch
import torch.nn as nn
import torch.nn.functional as F


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(13, 8)
        self.head = nn.Linear(8, 13)
        self.last_loss = None

    def forward(self, idx, targets=None):
        logits = self.head(torch.tanh(self.tok(idx)))
        if targets is not None:
            self.last_loss = F.cross_entropy(logits.view(-1, 13), targets.view(-1))
        else:
            self.last_loss = None
        return logits


model = Tiny()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)


def train_step(idx, targets):
    model(idx, targets)
    loss = model.last_loss
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss

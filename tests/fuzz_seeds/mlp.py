"""A small MLP classifier (forward only)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class MLP(nn.Module):
    def __init__(self, d_in=12, hidden=16, classes=5):
        super().__init__()
        self.fc1 = nn.Linear(d_in, hidden)
        self.fc2 = nn.Linear(hidden, hidden, bias=False)
        self.act = nn.Tanh()
        self.head = nn.Linear(hidden, classes)

    def forward(self, x):
        h = F.relu(self.fc1(x))
        h = self.act(self.fc2(h)) + h
        h = h * torch.sigmoid(h)
        logits = self.head(h)
        return F.log_softmax(logits, dim=-1)


model = MLP()
example_inputs = (torch.randn(4, 12),)

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class MyLinear(nn.Module):
    """The classic style: allocate with torch.Tensor, then reset_parameters()."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.weight = nn.Parameter(torch.Tensor(out_features, in_features))
        self.bias = nn.Parameter(torch.Tensor(out_features))
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        bound = 1 / math.sqrt(self.weight.size(1))
        nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)


class GraphConv(nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_in, n_out))
        nn.init.xavier_uniform_(self.weight)
        self.bias = nn.Parameter(torch.empty(n_out).zero_())
        self.gate = nn.Parameter(torch.empty(n_out).normal_(0.0, 0.02))
        self.shift = nn.Parameter(torch.empty(n_out))
        self.shift.data.uniform_(-0.1, 0.1)

    def forward(self, x, adj):
        return adj @ (x @ self.weight) + self.bias + self.gate * self.shift


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.gc = GraphConv(6, 8)
        self.fc = MyLinear(8, 3)
        assert isinstance(self.fc.weight, torch.Tensor) and not isinstance(3, torch.Tensor)

    def forward(self, x, adj):
        h = F.relu(self.gc(x, adj))
        a, b, c = torch.unbind(h[:, :3], dim=1)
        rows = h.unbind(0)
        h = h + (a * b - c).unsqueeze(1) + rows[0]
        return self.fc(h)


model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def train_step(x, adj, y):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x, adj), y)
    loss.backward()
    optimizer.step()
    return loss

"""Gradients with torch.autograd.grad of a loss with respect to inputs and weights."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 6)
        self.fc2 = nn.Linear(6, 3)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


model = Net()


def input_grad(x, target):
    loss = F.cross_entropy(model(x), target)
    return torch.autograd.grad(loss, x)


def energy_grad(x, w):
    e = (torch.exp(-x * x) * w).sum() + (x @ x.t()).pow(2).mean()
    gx, gw = torch.autograd.grad(e, (x, w))
    return gx, gw


example_inputs = {"forward": (torch.randn(3, 4),),
                  "input_grad": (torch.randn(3, 4), torch.randint(0, 3, (3,))),
                  "energy_grad": (torch.randn(3, 4), torch.randn(3, 4))}

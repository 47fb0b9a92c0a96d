"""AdamW with amsgrad and a per-step LR schedule; a double backward through autograd.grad."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(3, 5)
        self.fc2 = nn.Linear(5, 1)

    def forward(self, x):
        return self.fc2(torch.sigmoid(self.fc1(x)))


model = Tiny()
optimizer = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.01, amsgrad=True)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)


def train_step(x, y):
    optimizer.zero_grad()
    loss = F.smooth_l1_loss(model(x), y, beta=0.5)
    loss.backward()
    optimizer.step()
    scheduler.step()
    return loss


def curvature(x):
    y = (x ** 3).sum() + (torch.tanh(x) * x).mean()
    (g,) = torch.autograd.grad(y, x, create_graph=True)
    (h,) = torch.autograd.grad(g.sum(), x)
    return g, h


example_inputs = {"forward": (torch.randn(4, 3),),
                  "train_step": (torch.randn(4, 3), torch.randn(4, 1)),
                  "curvature": (torch.randn(2, 3),)}

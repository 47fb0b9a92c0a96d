"""A regression MLP trained with Adam on an MSE loss, plus a classifier loss."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Regressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(6, 10), nn.SiLU(), nn.Linear(10, 10), nn.LeakyReLU(0.1))
        self.out = nn.Linear(10, 2)

    def forward(self, x):
        return self.out(self.body(x))


model = Regressor()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.99), weight_decay=0.0)
criterion = nn.MSELoss()


def train_step(x, y):
    optimizer.zero_grad()
    pred = model(x)
    loss = criterion(pred, y) + 0.1 * F.l1_loss(pred, y)
    loss.backward()
    optimizer.step()
    return loss


example_inputs = {"forward": (torch.randn(5, 6),),
                  "train_step": (torch.randn(5, 6), torch.randn(5, 2))}

"""Convolutions and pooling with strides, dilation and padding; two training steps
(Adagrad, and Adadelta on the classifier head only)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class ConvNet(nn.Module):
    def __init__(self, channels=3, classes=4):
        super().__init__()
        self.c1 = nn.Conv2d(channels, 5, kernel_size=(3, 2), stride=(2, 1), padding=1, dilation=(1, 2))
        self.c2 = nn.Conv2d(5, 6, 3, padding=1, bias=False)
        self.pool = nn.MaxPool2d(3, stride=2, padding=1)
        self.avg = nn.AvgPool2d(2, stride=1, padding=1, count_include_pad=False)
        self.fc = nn.Linear(6, classes)

    def forward(self, x):
        x = F.leaky_relu(self.c1(x), 0.2)
        x = self.pool(F.silu(self.c2(x)))
        x = self.avg(x)
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x)


model = ConvNet()
opt_a = torch.optim.Adagrad(model.parameters(), lr=0.05, lr_decay=0.01)
opt_b = torch.optim.Adadelta(model.fc.parameters(), rho=0.8)


def step_a(x, y):
    opt_a.zero_grad()
    loss = F.cross_entropy(model(x), y, reduction="sum")
    loss.backward()
    opt_a.step()
    return loss


def step_b(x, target):
    opt_b.zero_grad()
    loss = F.binary_cross_entropy_with_logits(model(x), target)
    loss.backward()
    opt_b.step()
    return loss


example_inputs = {"forward": (torch.randn(2, 3, 9, 8),),
                  "step_a": (torch.randn(2, 3, 9, 8), torch.randint(0, 4, (2,))),
                  "step_b": (torch.randn(2, 3, 9, 8), torch.rand(2, 4))}

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["ResNetTiny", "resnet_tiny"]


class _Basic(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + x)


class ResNetTiny(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.stem = nn.Conv2d(3, 4, 3, padding=1)
        self.layer1 = nn.Sequential(_Basic(4), _Basic(4))
        self.linear = nn.Linear(4, num_classes)

    def forward(self, x):
        out = self.layer1(F.relu(self.stem(x)))
        out = F.adaptive_avg_pool2d(out, 1).flatten(1)
        return self.linear(out)


def resnet_tiny():
    return ResNetTiny(num_classes=5)


def _hidden_helper():
    raise RuntimeError("not exported")

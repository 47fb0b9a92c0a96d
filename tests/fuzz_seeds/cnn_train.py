"""A small CNN with conv/pool layers and an SGD training step."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, kernel_size=3, padding=1)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(4, 6, 3, stride=1, padding=0)
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(6, 3)

    def forward(self, x):
        x = self.pool(F.relu(self.conv1(x)))
        x = F.avg_pool2d(torch.tanh(self.conv2(x)), kernel_size=2, stride=1)
        x = self.gap(x)
        x = torch.flatten(x, 1)
        return self.fc(x)


model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)


def train_step(images, labels):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(images), labels)
    loss.backward()
    optimizer.step()
    return loss


example_inputs = {
    "forward": (torch.randn(2, 1, 10, 10),),
    "train_step": (torch.randn(2, 1, 10, 10), torch.randint(0, 3, (2,))),
}

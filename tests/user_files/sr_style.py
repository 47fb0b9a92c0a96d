"""An upscaling network in the style of the super-resolution example: orthogonal
initialisation with calculate_gain, PixelShuffle; and channel-wise dropout."""
import torch
import torch.nn as nn
import torch.nn.init as init
import torch.nn.functional as F


class Upscale(nn.Module):
    def __init__(self, factor):
        super(Upscale, self).__init__()
        self.relu = nn.ReLU()
        self.conv1 = nn.Conv2d(1, 8, (5, 5), (1, 1), (2, 2))
        self.conv2 = nn.Conv2d(8, 6, (3, 3), (1, 1), (1, 1))
        self.conv3 = nn.Conv2d(6, factor ** 2, (3, 3), (1, 1), (1, 1))
        self.shuffle = nn.PixelShuffle(factor)
        self.drop = nn.Dropout2d(0.25)
        init.orthogonal_(self.conv1.weight, init.calculate_gain('relu'))
        init.orthogonal_(self.conv2.weight, init.calculate_gain('leaky_relu', 0.2))
        init.orthogonal_(self.conv3.weight)

    def forward(self, x):
        x = self.drop(self.relu(self.conv1(x)))
        x = self.relu(self.conv2(x))
        return self.shuffle(self.conv3(x))


model = Upscale(2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)


def train_step(x, y):
    optimizer.zero_grad()
    loss = F.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


def drop2d(x):
    return F.dropout2d(x, 0.4) * 1.0


example_inputs = {"forward": (torch.randn(2, 1, 8, 8),), "train_step": (torch.randn(2, 1, 8, 8), torch.randn(2, 1, 16, 16)),
                  "drop2d": (torch.randn(50, 40, 3, 3),)}

"""A multi-layer perceptron built from nn.Sequential, with nn.Flatten, GELU,
Dropout (identity at inference), LayerNorm and log_softmax output."""
import torch
import torch.nn as nn

HIDDEN = 256


class MLP(nn.Module):
    def __init__(self, in_features=28 * 28, hidden=HIDDEN, classes=10):
        super().__init__()
        self.net = nn.Sequential(
            nn.Flatten(),
            nn.Linear(in_features, hidden),
            nn.GELU(),
            nn.Dropout(0.1),
            nn.Linear(hidden, hidden),
            nn.LayerNorm(hidden),
            nn.SiLU(),
            nn.Linear(hidden, classes),
            nn.LogSoftmax(dim=1),
        )

    def forward(self, x):
        return self.net(x)


model = MLP()
example_inputs = (torch.randn(32, 1, 28, 28),)

if __name__ == "__main__":
    model.eval()
    print(model(*example_inputs).shape)

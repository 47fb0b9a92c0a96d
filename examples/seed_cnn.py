"""The seed CNN ("Network"): two 5x5 convolutions and three linear layers, for
28x28 grey-scale images such as Fashion-MNIST, with its training step.
Runs unchanged under PyTorch:

    python3 seed_cnn.py            # one training step on random data
    ctc build seed_cnn.py -o net   # standalone program: ./net infer ..., ./net train ...
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Network(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels=1, out_channels=6, kernel_size=5)
        self.conv2 = nn.Conv2d(in_channels=6, out_channels=12, kernel_size=5)
        self.fc1 = nn.Linear(in_features=12 * 4 * 4, out_features=120)
        self.fc2 = nn.Linear(in_features=120, out_features=60)
        self.out = nn.Linear(in_features=60, out_features=10)

    def forward(self, t):
        t = F.max_pool2d(F.relu(self.conv1(t)), kernel_size=2, stride=2)
        t = F.max_pool2d(F.relu(self.conv2(t)), kernel_size=2, stride=2)
        t = t.reshape(-1, 12 * 4 * 4)
        t = F.relu(self.fc1(t))
        t = F.relu(self.fc2(t))
        return self.out(t)


BATCH = 64
model = Network()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


def train_step(images, labels):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(images), labels)
    loss.backward()
    optimizer.step()
    return loss


example_inputs = {
    "forward": (torch.randn(BATCH, 1, 28, 28),),
    "train_step": (torch.randn(BATCH, 1, 28, 28), torch.randint(0, 10, (BATCH,))),
}

if __name__ == "__main__":
    print("loss", train_step(*example_inputs["train_step"]).item())

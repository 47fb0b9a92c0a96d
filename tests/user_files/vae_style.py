"""A variational autoencoder in the style of the VAE example: reparameterize draws
eps = torch.randn_like(std) in forward, so the inference entry draws too."""
import torch
from torch import nn
from torch.nn import functional as F


class VAE(nn.Module):
    def __init__(self, d=48, h=32, z=6):
        super().__init__()
        self.d = d
        self.enc = nn.Linear(d, h)
        self.mu = nn.Linear(h, z)
        self.logvar = nn.Linear(h, z)
        self.dec1 = nn.Linear(z, h)
        self.dec2 = nn.Linear(h, d)

    def encode(self, x):
        h = F.relu(self.enc(x))
        return self.mu(h), self.logvar(h)

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5 * logvar)
        eps = torch.randn_like(std)
        return mu + eps * std

    def decode(self, z):
        return torch.sigmoid(self.dec2(F.relu(self.dec1(z))))

    def forward(self, x):
        mu, logvar = self.encode(x.view(-1, self.d))
        return self.decode(self.reparameterize(mu, logvar)), mu, logvar


class Noise(nn.Module):
    """The sampling alone, for its statistics: normal and uniform draws."""

    def forward(self, mu, logvar):
        std = torch.exp(0.5 * logvar)
        return mu + torch.randn_like(std) * std, torch.rand_like(std), torch.randn(3, 5)


model = VAE()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)


def loss_function(recon_x, x, mu, logvar):
    bce = F.binary_cross_entropy(recon_x, x.view(-1, 48), reduction='sum')
    kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return bce + kld


def train_step(data):
    model.train()
    optimizer.zero_grad()
    recon, mu, logvar = model(data)
    loss = loss_function(recon, data, mu, logvar)
    loss.backward()
    optimizer.step()
    return loss

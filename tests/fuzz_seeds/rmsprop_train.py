"""Classifier on sequences: embedding, layer norm, mean pooling, RMSprop step."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class SeqNet(nn.Module):
    def __init__(self, vocab=9, d=6, classes=4):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.norm = nn.LayerNorm(d)
        self.fc = nn.Linear(d, classes)
        self.drop = nn.Dropout(0.1)

    def forward(self, tokens):
        h = self.norm(self.emb(tokens))
        h = self.drop(F.gelu(h)).mean(dim=1)
        return self.fc(h)


model = SeqNet()
optimizer = torch.optim.RMSprop(model.parameters(), lr=0.01, alpha=0.9, momentum=0.5)


def train_step(tokens, labels):
    model.train()
    optimizer.zero_grad()
    out = model(tokens)
    loss = F.cross_entropy(out, labels, label_smoothing=0.1)
    loss.backward()
    optimizer.step()
    return loss


example_inputs = {"forward": (torch.randint(0, 9, (3, 5)),),
                  "train_step": (torch.randint(0, 9, (3, 5)), torch.randint(0, 4, (3,)))}

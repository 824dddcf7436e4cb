"""A small classifier whose pretrained encoder is meant to be frozen — with three bugs.

    gradflow inspect examples/frozen_encoder.py:main
"""
import torch
from torch import nn


class Encoder(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.layer1 = nn.Linear(d, d)
        self.norm = nn.BatchNorm1d(d)
        self.layer2 = nn.Linear(d, d)

    def forward(self, x):
        return torch.relu(self.layer2(torch.relu(self.norm(self.layer1(x)))))


class Classifier(nn.Module):
    def __init__(self, d: int = 16, classes: int = 3):
        super().__init__()
        self.encoder = Encoder(d)
        self.adapter = nn.Linear(d, d)
        self.head = nn.Linear(d, classes)
        self.aux_head = nn.Linear(d, 1)  # for an auxiliary loss that was never added

    def forward(self, x):
        h = self.encoder(x)
        h = h + self.adapter(h).detach()  # bug: the adapter never learns
        return self.head(h)


def main():
    torch.manual_seed(0)
    model = Classifier()
    model.encoder.requires_grad_(False)  # freeze the pretrained encoder (on purpose; but not .eval())
    x, y = torch.randn(8, 16), torch.randint(0, 3, (8,))
    loss = nn.functional.cross_entropy(model(x), y)
    return loss, model

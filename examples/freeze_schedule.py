"""A training loop with a freeze schedule and an auxiliary head used on odd steps only, under gradflow.watch.

    >>> from freeze_schedule import train
    >>> print(train().summary())
"""
import torch
from torch import nn
from torch.nn import functional as F

import gradflow


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(8, 16)
        self.body = nn.Linear(16, 16)
        self.head = nn.Linear(16, 2)
        self.aux = nn.Linear(16, 2)

    def forward(self, x, with_aux=False):
        h = torch.relu(self.body(self.embed(x)))
        return self.head(h) + self.aux(h) if with_aux else self.head(h)


def train(steps=6, unfreeze_at=2):
    torch.manual_seed(0)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model.embed.requires_grad_(False)  # warm up the rest first
    with gradflow.watch(model, optimizer=optimizer) as w:  # each optimizer.step() closes a step
        for step in range(steps):
            if step == unfreeze_at:
                model.embed.requires_grad_(True)
            x, y = torch.randn(4, 8), torch.randint(0, 2, (4,))
            loss = F.cross_entropy(model(x, with_aux=step % 2 == 1), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    return w

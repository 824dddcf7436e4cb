"""A detached branch: the adapter's output goes through .detach(), so the adapter gets no gradient on any rank.

    gradflow ddp examples/ddp_detached.py:main --nproc 2
"""
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(8, 16)
        self.adapter = nn.Linear(16, 16)
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        h = torch.relu(self.body(x))
        h = h + self.adapter(h).detach()  # bug: meant to stop gradient into body, stops the adapter's too
        return self.head(h)


def main(rank, world_size):
    torch.manual_seed(0)
    model = Net()

    def step(model):
        torch.manual_seed(rank)
        x, y = torch.randn(16, 8), torch.randint(0, 4, (16,))
        return nn.functional.cross_entropy(model(x), y)

    return model, step

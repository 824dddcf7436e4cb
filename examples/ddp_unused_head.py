"""A head that is built but never used: every rank leaves it out, so DDP (find_unused_parameters=False) raises
at the second iteration.

    gradflow ddp examples/ddp_unused_head.py:main --nproc 2
"""
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(8, 16)
        self.head = nn.Linear(16, 4)
        self.old_head = nn.Linear(16, 4)  # kept from an earlier experiment, never called

    def forward(self, x):
        return self.head(torch.relu(self.body(x)))


def main(rank, world_size):
    torch.manual_seed(0)
    model = Net()

    def step(model):
        torch.manual_seed(rank)
        x, y = torch.randn(16, 8), torch.randint(0, 4, (16,))
        return nn.functional.cross_entropy(model(x), y)

    return model, step

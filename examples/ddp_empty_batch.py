"""A module skipped when a rank's batch is empty: the last, uneven batch of an epoch leaves rank 1 with nothing,
so its forward never runs `refine`, and rank 0 waits in backward for a gradient rank 1 never sends.

    gradflow ddp examples/ddp_empty_batch.py:main --nproc 2
"""
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.encode = nn.Linear(8, 16)
        self.refine = nn.Linear(16, 16)
        self.head = nn.Linear(16, 1)

    def forward(self, x):
        h = torch.relu(self.encode(x))
        if x.shape[0] > 0:  # skip the expensive part when there is nothing to refine
            h = h + torch.relu(self.refine(h))
        return self.head(h)


def main(rank, world_size):
    torch.manual_seed(0)
    model = Net()

    def step(model):
        n = 8 if rank == 0 else 0  # 8 samples left over: all of them on rank 0
        x, y = torch.randn(n, 8), torch.randn(n, 1)
        return (model(x) - y).pow(2).sum() / max(n, 1)

    return model, step

"""FSDP2: a refinement layer inside the root unit, run only when a rank's batch has hard examples (class 3).

Rank 1's batch has none, so its reduce-scatter of the root unit carries fewer gradients than rank 0's.

    gradflow ddp examples/fsdp_hard_examples.py:main --timeout 5
"""
import torch
from torch import nn
from torch.distributed.fsdp import fully_shard


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(8, 16)
        self.head = nn.Linear(16, 4)
        self.refine = nn.Linear(16, 4)  # extra capacity for the hard class

    def forward(self, x, hard):
        h = torch.relu(self.body(x))
        out = self.head(h)
        if hard.any():
            out = out + self.refine(h) * hard[:, None]
        return out


def main(rank, world_size):
    torch.manual_seed(0)
    model = Net()
    fully_shard(model)  # one unit: body, head and refine are all-gathered and reduce-scattered together

    def step(model):
        torch.manual_seed(rank)
        x = torch.randn(16, 8)
        y = torch.randint(0, 4 if rank == 0 else 3, (16,))  # rank 1's shard of the data has no class 3
        return nn.functional.cross_entropy(model(x, y == 3), y)

    return model, step

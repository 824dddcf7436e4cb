"""find_unused_parameters=True "fixed" DDP's error: it runs, but searches the autograd graph every iteration.
gradflow names the one parameter that forces it; freeze or delete that and turn the flag off.

    gradflow ddp examples/ddp_find_unused.py:main --nproc 2
"""
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.Sequential(*[nn.Sequential(nn.Linear(32, 32), nn.ReLU()) for _ in range(4)])
        self.head = nn.Linear(32, 1)
        self.temperature = nn.Parameter(torch.ones(()))  # read only by an evaluation metric, never in training

    def forward(self, x):
        return self.head(self.blocks(x))


def main(rank, world_size):
    torch.manual_seed(0)
    model = DistributedDataParallel(Net(), find_unused_parameters=True)  # the usual "fix" for DDP's error

    def step(model):
        torch.manual_seed(rank)
        x, y = torch.randn(16, 32), torch.randn(16, 1)
        return nn.functional.mse_loss(model(x), y)

    return model, step

"""FSDP2: a frozen encoder weight next to its trainable bias in one unit, and a head that is never called.

FSDP raises nothing for either: gradflow says what each costs.

    gradflow ddp examples/fsdp_frozen_encoder.py:main
"""
import torch
from torch import nn
from torch.distributed.fsdp import fully_shard


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Linear(8, 16)
        self.encoder.weight.requires_grad_(False)  # pretrained; only its bias is tuned
        self.head = nn.Linear(16, 4)
        self.old_head = nn.Linear(16, 4)  # left over from the previous task

    def forward(self, x):
        return self.head(torch.relu(self.encoder(x)))


def main(rank, world_size):
    torch.manual_seed(0)
    model = Net()
    fully_shard(model.head)
    fully_shard(model)  # the root unit: encoder (frozen weight, trainable bias) and old_head

    def step(model):
        torch.manual_seed(rank)
        x, y = torch.randn(16, 8), torch.randint(0, 4, (16,))
        return nn.functional.cross_entropy(model(x), y)

    return model, step

"""FSDP2: an auxiliary head sharded as its own unit and used on rank 0 only. DDP would raise; FSDP hangs.

    gradflow ddp examples/fsdp_aux_head.py:main --timeout 5
"""
import torch
from torch import nn
from torch.distributed.fsdp import fully_shard


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16))
        self.head = nn.Linear(16, 4)
        self.aux_head = nn.Linear(16, 1)  # a depth estimate, supervised only where labels exist

    def forward(self, x, with_aux):
        h = torch.relu(self.body(x))
        if with_aux:
            return self.head(h), self.aux_head(h)
        return self.head(h), None


def main(rank, world_size):
    torch.manual_seed(0)
    model = Net()
    fully_shard(model.body)
    fully_shard(model.aux_head)
    fully_shard(model)  # the root unit: head

    def step(model):
        torch.manual_seed(rank)  # each rank its own batch
        x, y = torch.randn(16, 8), torch.randint(0, 4, (16,))
        has_depth = rank == 0  # bug: only rank 0 has depth labels, so only rank 0 runs the auxiliary head
        logits, depth = model(x, has_depth)
        loss = nn.functional.cross_entropy(logits, y)
        if has_depth:
            loss = loss + 0.1 * depth.pow(2).mean()
        return loss

    return model, step

"""An auxiliary loss computed only on rank 0: DDP's classic "parameters that were not used in producing loss".

    gradflow ddp examples/ddp_aux_loss.py:main --nproc 2
"""
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(8, 16)
        self.head = nn.Linear(16, 4)
        self.aux_head = nn.Linear(16, 1)  # a depth estimate, say, supervised only where labels exist

    def forward(self, x):
        h = torch.relu(self.body(x))
        return self.head(h), self.aux_head(h)


def main(rank, world_size):
    torch.manual_seed(0)
    model = Net()

    def step(model):
        torch.manual_seed(rank)  # each rank its own batch
        x, y = torch.randn(16, 8), torch.randint(0, 4, (16,))
        logits, depth = model(x)
        loss = nn.functional.cross_entropy(logits, y)
        if rank == 0:  # bug: only rank 0 has depth labels, so only rank 0 adds the auxiliary loss
            loss = loss + 0.1 * depth.pow(2).mean()
        return loss

    return model, step

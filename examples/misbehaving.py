"""Code `gradflow inspect` has to contain: each function goes wrong in its own way (docs/inspect.md, docs/limits.md).

    gradflow inspect examples/misbehaving.py:checkpointed
"""
import sys

import torch
import torch.utils.checkpoint as cp
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed, self.block, self.head = nn.Linear(4, 8), nn.Linear(8, 8), nn.Linear(8, 1)

    def forward(self, x):
        h = self.embed(x)
        h = cp.checkpoint(lambda a: torch.relu(self.block(a)), h, use_reentrant=True)  # saves memory
        return self.head(h)


def checkpointed():
    """A reentrant checkpoint: gradflow cannot trace inside it yet (plain backward does reach `block`)."""
    torch.manual_seed(0)
    model = Net()
    return model(torch.randn(5, 4)).pow(2).mean(), model


def hook_fails():
    """A gradient hook that raises during backward."""
    torch.manual_seed(0)
    model = Net()
    norms = {"head": []}
    model.head.weight.register_hook(lambda g: norms["haed"].append(float(g.norm())))
    return model(torch.randn(5, 4)).mean(), model


def exits():
    """sys.exit() where the loss should be returned."""
    print("training done")
    sys.exit(0)

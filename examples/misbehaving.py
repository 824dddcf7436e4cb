"""Code `gradflow inspect` has to contain: each function goes wrong in its own way (docs/inspect.md, docs/limits.md).

    gradflow inspect examples/misbehaving.py:closure
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
    """A reentrant checkpoint: its forward runs with gradients off; gradflow records its recomputation."""
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


class Closure(torch.autograd.Function):
    """Uses `block` from the module (not one of its inputs) and backpropagates into it on its own."""

    @staticmethod
    def forward(ctx, h, block):
        ctx.save_for_backward(h)
        ctx.block = block
        return torch.relu(block(h))

    @staticmethod
    def backward(ctx, g):
        (h,) = ctx.saved_tensors
        h = h.detach().requires_grad_()
        with torch.enable_grad():
            torch.autograd.backward(torch.relu(ctx.block(h)), g)
        return h.grad, None


def closure():
    """A custom autograd.Function that uses a layer it was not given: gradflow cannot see how it gets gradient."""
    torch.manual_seed(0)
    model = Net()
    h = Closure.apply(model.embed(torch.randn(5, 4)), model.block)
    return model.head(h).pow(2).mean(), model

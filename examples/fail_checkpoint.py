"""Class 6: reentrant activation checkpointing whose inputs do not require grad.

The LoRA + `gradient_checkpointing_enable()` trap in miniature: the base layers are frozen, the trainable
adapter sits inside the checkpointed block, and the block's input (from a frozen embedding) does not require
grad. A reentrant checkpoint then records nothing for autograd (torch warns "None of the inputs have
requires_grad=True"), so the adapter gets no gradient, and here backward fails outright.

    gradflow script examples/fail_checkpoint.py
"""
import warnings

import torch
from torch.utils.checkpoint import checkpoint

# torch warns "None of the inputs have requires_grad=True. Gradients will be None" here, naming the file of its
# own checkpoint.py; silenced so that this example prints the same wherever torch is installed.
warnings.filterwarnings("ignore", "None of the inputs have requires_grad")
torch.manual_seed(0)
embed = torch.nn.Embedding(10, 8).requires_grad_(False)
frozen = torch.nn.Linear(8, 8).requires_grad_(False)
adapter = torch.nn.Linear(8, 8)


def block(h):
    return frozen(h) + adapter(h)


tokens = torch.tensor([[1, 2, 3]])
h = embed(tokens)
out = checkpoint(block, h, use_reentrant=True)
loss = out.pow(2).mean()
loss.backward()

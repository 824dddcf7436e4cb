"""A float16 training step on CPU (torch.autocast), without and with a GradScaler.

    gradflow inspect examples/mixed_precision.py:step
    gradflow inspect examples/mixed_precision.py:scaled_step

The loss averages 32,768 squared errors of about 1e-3, so its gradient for each output is about 6e-8: at the
edge of what float16 can hold (its smallest positive number is 6e-8), and many elements underflow to exactly
0. A GradScaler multiplies the loss by 65536 first, and nothing underflows.
"""
import torch
from torch import nn


def build():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64))


X = torch.randn(512, 64, generator=torch.Generator().manual_seed(1))
with torch.no_grad():  # targets close to what the model gives: errors of about 1e-3 (made before any trace)
    Y = build()(X) + 1e-3 * torch.randn(512, 64, generator=torch.Generator().manual_seed(2))


def step():
    model = build()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = nn.functional.mse_loss(model(X), Y)
    return loss, model


def scaled_step():
    model = build()
    scaler = torch.amp.GradScaler("cpu")  # init_scale 65536
    with torch.autocast("cpu", dtype=torch.float16):
        loss = nn.functional.mse_loss(model(X), Y)
    return scaler.scale(loss), model

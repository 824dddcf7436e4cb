"""A residual MLP with LayerScale (each block's branch is multiplied by a constant) — and two init mistakes.

    gradflow inspect examples/layer_scale.py:main --health

Block 2's scale was set to 1e-6 (meant: 1e-1), so its layers learn a million times slower than their
neighbours; the extra head was zero-initialised in both layers, so its first layer gets a gradient of
exactly zero.
"""
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, d: int, scale: float):
        super().__init__()
        self.fc1, self.fc2, self.scale = nn.Linear(d, 2 * d), nn.Linear(2 * d, d), scale

    def forward(self, x):
        return x + self.scale * self.fc2(torch.tanh(self.fc1(x)))


class Net(nn.Module):
    def __init__(self, d: int = 16):
        super().__init__()
        self.embed = nn.Linear(4, d)
        self.blocks = nn.ModuleList(Block(d, s) for s in (0.1, 0.1, 1e-6, 0.1))
        self.head = nn.Linear(d, 1)
        self.extra = nn.Sequential(nn.Linear(d, d), nn.Linear(d, 1))
        for layer in self.extra:
            nn.init.zeros_(layer.weight)

    def forward(self, x):
        h = self.embed(x)
        for block in self.blocks:
            h = block(h)
        return self.head(h) + self.extra(h)


def main():
    torch.manual_seed(0)
    model = Net()
    x, y = torch.randn(32, 4), torch.randn(32, 1)
    return nn.functional.mse_loss(model(x), y), model

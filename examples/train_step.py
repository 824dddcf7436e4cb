"""One training step of a small classifier, with its optimizer — which was built with two mistakes.

    gradflow inspect examples/train_step.py:step --arg batch_size=4 --arg lr=0.1
"""
import torch
from torch import nn
from torch.nn import functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(8, 16)
        self.body = nn.Linear(16, 16)
        self.norm = nn.LayerNorm(16)  # added later, and forgotten in make_optimizer
        self.head = nn.Linear(16, 2)
        self.old_head = nn.Linear(16, 2)  # replaced by head, but still in the optimizer

    def forward(self, x):
        return self.head(self.norm(torch.relu(self.body(self.embed(x)))))


def make_optimizer(model, lr):
    return torch.optim.SGD([
        {"params": [*model.embed.parameters(), *model.body.parameters()]},
        {"params": [*model.head.parameters(), *model.old_head.parameters()], "lr": lr * 10},
    ], lr=lr)


def step(batch_size: int = 8, lr: float = 0.01):
    torch.manual_seed(0)
    model = Net()
    optimizer = make_optimizer(model, lr)
    x, y = torch.randn(batch_size, 8), torch.randint(0, 2, (batch_size,))
    loss = F.cross_entropy(model(x), y)
    return loss, model, optimizer

# A small training loop with a freeze schedule: after 100 steps the first layer is frozen to tune the head.
# The first layer still moves: SGD's momentum keeps pushing it (zero_grad(set_to_none=False) leaves it a .grad
# of zeros, which torch's optimizers do not skip).
#   python examples/train_loop.py
#   gradflow script examples/train_loop.py
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
X = torch.randn(32, 3)
Y = X.sum(1, keepdim=True).sin()


@torch.no_grad()
def evaluate():
    return ((model(X) - Y) ** 2).mean().item()


for step in range(300):
    if step == 100:
        model[0].requires_grad_(False)  # freeze the first layer
    opt.zero_grad(set_to_none=False)
    loss = ((model(X) - Y) ** 2).mean()
    loss.backward()
    opt.step()
    if step % 100 == 99:
        print(f"step {step + 1}: eval loss {evaluate():.4f}")

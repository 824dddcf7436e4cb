# A model with a frozen encoder, a detach inside its forward, and a second model run under no_grad.
import torch
from torch import nn

torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(4, 8)
        self.mid = nn.Linear(8, 8)
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        h = torch.relu(self.enc(x))
        z = self.mid(h)
        side = z.detach() * 2  # cut: detach
        return self.head(z + side)


net = Net()
net.enc.requires_grad_(False)
aux = nn.Linear(4, 1)
x = torch.randn(3, 4)
with torch.no_grad():
    prior = aux(x)  # cut: no_grad
loss = (net(x) ** 2).mean() + (prior * 3).mean()
loss.backward()

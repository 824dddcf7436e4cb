# One GAN step: the discriminator's loss sees the generator's output through an inline fake.detach().
import torch
from torch import nn

torch.manual_seed(0)
G = nn.Linear(2, 2)
D = nn.Linear(2, 1)
z = torch.randn(4, 2)
real = torch.randn(4, 2)
fake = G(z)
loss_d = D(real).mean() - D(fake.detach()).mean()  # cut: G.weight G.bias
loss_d.backward()
loss_g = -D(fake).mean()
loss_g.backward()

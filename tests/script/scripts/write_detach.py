# A detach()ed tensor shares its memory: zeroing it zeroes y, which autograd still computes as x * 2.
import torch

x = torch.tensor([1.0, 2.0], requires_grad=True)
y = x * 2
y.detach().zero_()  # the write
loss = (y * x).sum()
loss.backward()

# An in-place op with gradients off on a tensor that requires grad: its backward stays the old one.
import torch

x = torch.tensor([1.0, 2.0], requires_grad=True)
a = x * 2
with torch.no_grad():
    a.mul_(2)  # the write
loss = (a * x).sum()
loss.backward()

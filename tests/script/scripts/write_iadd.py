# += on the tensors themselves: versions a program follows (y = x*2 + c), and c's new value where it is used.
import torch

x = torch.tensor([1.0, 2.0], requires_grad=True)
c = torch.tensor([3.0, 4.0])
h = x + c
c += 1
y = x * 2
y += c
loss = (h * c).sum() + (y * y).sum()
loss.backward()

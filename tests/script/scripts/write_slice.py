# Slice assignment and += on a view of a: a changes too.
import torch

x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
a = x * 2
a[1:] = a[1:] * 0  # the write
b = a[0:1]
b += 5
loss = (a * x).sum()
loss.backward()

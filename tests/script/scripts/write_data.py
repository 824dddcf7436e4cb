# A write through .data after mul used c: backward uses the new c, autograd keeps no version of it.
import torch

x = torch.tensor([1.0, 2.0], requires_grad=True)
c = torch.tensor([3.0, 4.0])
h = x * c
c.data.add_(10)  # the write
loss = h.sum()
loss.backward()

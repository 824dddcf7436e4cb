# A write through a numpy view after mul used c: neither torch nor the recorder sees it, backward uses the new c.
import torch

x = torch.tensor([1.0, 2.0], requires_grad=True)
c = torch.tensor([3.0, 4.0])
h = x * c
view = c.numpy()  # the write (through this array, on the next line)
view[0] = 10.0
loss = h.sum()
loss.backward()

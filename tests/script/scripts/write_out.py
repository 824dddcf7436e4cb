# out= into c's memory after mul used c.
import torch

x = torch.tensor([1.0, -2.0], requires_grad=True)
c = torch.tensor([3.0, 4.0])
h = x * c
torch.add(c.data, 1, out=c.data)  # the write
loss = h.sum()
loss.backward()

# Reading w through .data: the loss is computed from values without their history.
import torch

w = torch.tensor([1.0, 2.0], requires_grad=True)
x = torch.tensor([3.0, 4.0])
loss = (w.data * x).sum()  # cut here
loss.backward()

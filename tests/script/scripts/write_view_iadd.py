# += on a view: the tensor it views changes, which the program of a would not see.
import torch

x = torch.tensor([1.0, 2.0], requires_grad=True)
a = x * 2
b = a[0:1]
b += 5  # the write
loss = (a * x).sum()
loss.backward()

# relu_ on a view of a: a is rectified too, and its backward goes through relu.
import torch

x = torch.tensor([1.0, -2.0], requires_grad=True)
a = x * 2
v = a.view(2)
v.relu_()  # the write
loss = (a * x).sum()
loss.backward()

# `w.data -= lr * w.grad.data` changes w without autograd knowing: each step's program has that step's w.
import torch

w = torch.tensor([0.5, -1.0], dtype=torch.float64, requires_grad=True)
x = torch.tensor([2.0, 3.0], dtype=torch.float64)
for _step in range(3):
    loss = ((w * x).sum() - 1) ** 2
    loss.backward()
    w.data -= 0.01 * w.grad.data
    w.grad.data.zero_()

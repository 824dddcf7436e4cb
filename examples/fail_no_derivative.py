"""Class 7: an op torch has no derivative for, with respect to one of its arguments.

The regularized incomplete gamma function has a derivative in its second argument only: a learned shape
parameter `a` makes backward fail ("the derivative for 'igamma: input' is not implemented").

    gradflow script examples/fail_no_derivative.py
"""
import torch

torch.manual_seed(0)
a = torch.full((3,), 2.0, requires_grad=True)
x = torch.rand(3) * 4
cdf = torch.special.gammainc(a, x)
loss = (cdf - 0.5).pow(2).sum()
loss.backward()

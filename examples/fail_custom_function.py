"""Class 7: a custom autograd.Function whose backward returns the wrong number of gradients.

forward takes two tensors, so backward must return two gradients (None for one that needs none).

    gradflow script examples/fail_custom_function.py
"""
import torch


class Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, s):
        ctx.save_for_backward(s)
        return x * s

    @staticmethod
    def backward(ctx, grad):
        (s,) = ctx.saved_tensors
        return grad * s


torch.manual_seed(0)
x = torch.randn(3, requires_grad=True)
s = torch.randn(3)
loss = Scale.apply(x, s).sum()
loss.backward()

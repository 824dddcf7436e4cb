"""Class 3: an in-place op on a leaf that requires grad ("a leaf Variable that requires grad is being used in
an in-place operation"): scaling a freshly made weight.

    gradflow script examples/fail_leaf_inplace.py
"""
import torch

torch.manual_seed(0)
w = torch.randn(4, 2, requires_grad=True)
w.mul_(0.1)
loss = (torch.randn(3, 4) @ w).sum()
loss.backward()

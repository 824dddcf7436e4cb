"""Class 1: a tensor saved for backward is changed in place before backward runs.

sigmoid saves its result for its backward; `h += 1` then writes into that very tensor, so torch refuses:
"one of the variables needed for gradient computation has been modified by an inplace operation".

    python examples/fail_inplace.py             # torch's error
    gradflow script examples/fail_inplace.py    # which line saved it, which line changed it, the fix
"""
import torch

torch.manual_seed(0)
w = torch.randn(3, 4, requires_grad=True)
x = torch.randn(2, 3)
h = torch.sigmoid(x @ w)
h += 1
loss = h.pow(2).sum()
loss.backward()

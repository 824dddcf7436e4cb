"""Class 5: `.grad` of a tensor that is not a leaf is None (torch only warns), and the script fails later.

`.double()` after `requires_grad=True` makes a copy: `w` is that copy, not the leaf, and the gradient goes to
the hidden leaf behind it.

    gradflow script examples/fail_nonleaf_grad.py
"""
import warnings

import torch

# torch warns "The .grad attribute of a Tensor that is not a leaf Tensor is being accessed"; silenced so that
# this example prints the same wherever torch is installed.
warnings.filterwarnings("ignore", "The .grad attribute of a Tensor that is not a leaf")
torch.manual_seed(0)
w = torch.randn(3, requires_grad=True).double()
loss = (w * torch.arange(3.0, dtype=torch.float64)).sum()
loss.backward()
print("grad norm:", w.grad.norm())

"""Class 4: "element 0 of tensors does not require grad": the path from the loss back to every leaf was cut.

`.item()` turns the prediction into a Python float; `torch.tensor(...)` makes a new tensor of it, with no
history: nothing that made the loss requires grad any more.

    gradflow script examples/fail_no_grad_path.py
"""
import torch

torch.manual_seed(0)
w = torch.randn(3, 1, requires_grad=True)
x = torch.randn(4, 3)
pred = (x @ w).mean()
loss = torch.tensor(pred.item()) ** 2
loss.backward()

# c changed in place after mul saved it: torch's backward raises, and no program may claim grads for it.
import torch

x = torch.tensor([1.0, 2.0], requires_grad=True)
c = torch.tensor([3.0, 4.0])
h = x * c
c += 1
try:
    h.sum().backward()
except RuntimeError as err:
    print("backward failed:", str(err)[:40])

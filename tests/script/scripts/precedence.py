# Operators with Python's precedence, negative powers, reversed operands.
import torch

a = torch.tensor(1.5, requires_grad=True)
b = torch.tensor([0.25, -0.5], requires_grad=True)
r = (a - (b - a * 3)) * (a + b) / (a * (b + 2)) - (-(a ** 2)) ** 2 + a ** -1 - 2 ** (b * a) + 0.1 * -b
r.sum().backward()

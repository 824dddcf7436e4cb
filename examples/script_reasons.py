# Why some tensors get no gradient, as `gradflow script` explains it: a frozen weight, a helper decorated with
# @torch.no_grad(), a value logged through .item() and used again, an argmax, an inline .detach().
#   python examples/script_reasons.py
#   gradflow script examples/script_reasons.py
import torch

w = torch.tensor([0.5, -1.0], requires_grad=True)
bias = torch.tensor([0.1, 0.2], requires_grad=True)
bias.requires_grad_(False)  # frozen while warming up
x = torch.tensor([2.0, 3.0])


@torch.no_grad()
def running_average(t):
    return t * 0.9


h = w * x + bias
avg = running_average(h)
scale = torch.tensor(h.sum().item())
best = h.argmax()
other = torch.tensor([1.0, 1.0], requires_grad=True)
loss = (h * avg).sum() * scale + best + (other * 2).detach().sum()
loss.backward()
print("w.grad:", w.grad, " other.grad:", other.grad)

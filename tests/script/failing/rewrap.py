# torch.tensor(t) of a tensor copies its values without their gradient.
import torch

w = torch.tensor([1.0, 2.0], requires_grad=True)
pred = w * 3
loss = torch.tensor(pred).sum()  # cut here
loss.backward()

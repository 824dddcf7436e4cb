# A loss rebuilt from a Python number: .item() cut every path to w.
import torch

w = torch.tensor([1.0, 2.0], requires_grad=True)
x = torch.tensor([3.0, 4.0])
pred = (w * x).sum()
value = pred.item()  # cut here
loss = torch.tensor(value) ** 2
loss.backward()

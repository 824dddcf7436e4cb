# A numpy view only read (logging): nothing changed, so the program is offered and replays the script's grads.
import torch

x = torch.tensor([1.0, 2.0], requires_grad=True)
c = torch.tensor([3.0, 4.0])
h = x * c
print(float(c.numpy().sum()))
loss = (h * h).sum()
loss.backward()

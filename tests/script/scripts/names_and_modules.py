# Names from a function's locals, aliases, a module's parameters and a list.
import torch

model = torch.nn.Linear(2, 1)
params = [torch.ones(2, requires_grad=True)]
def step(batch):
    inp = batch
    loss = model(inp).sum() + (params[0] * inp).sum()
    also = loss  # noqa: F841 - a second name for the table
    loss.backward()
step(torch.ones(3, 2))

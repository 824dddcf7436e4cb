# Every parameter frozen: the loss requires grad nowhere.
import torch

torch.manual_seed(0)
model = torch.nn.Linear(2, 1)
model.requires_grad_(False)  # cut here
loss = model(torch.ones(3, 2)).sum()
loss.backward()

# Through numpy and back: .detach() (which .numpy() needs) cut the path.
import torch

w = torch.tensor([1.0, 2.0], requires_grad=True)
pred = w * 3
arr = pred.detach().numpy()  # cut here
loss = torch.from_numpy(arr).pow(2).sum()
loss.backward()

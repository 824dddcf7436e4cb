# argmax gives integers: no gradient flows through the choice.
import torch

logits = torch.tensor([[0.2, 1.5, -0.3]], requires_grad=True)
choice = logits.argmax(1).float()  # cut here
loss = (choice - 1.0).abs().sum()
loss.backward()

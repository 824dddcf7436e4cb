"""gradflow.explain_errors on a training step, from Python: the step runs plain (no cost); when torch raises,
gradflow runs the same call again, with torch's RNG put back (dropout drops the same units), under its recording,
and adds the explanation to torch's own error. The step fails before optimizer.step(), so running it twice is safe.

    python examples/fail_step.py
"""
import torch

import gradflow

torch.manual_seed(0)


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)
        self.drop = torch.nn.Dropout(0.1)

    def forward(self, x):
        h = torch.sigmoid(self.fc(self.drop(x)))
        h += x  # sigmoid saved h for its backward
        return h


model = Block()
opt = torch.optim.SGD(model.parameters(), lr=0.1)


@gradflow.explain_errors
def train_step(x):
    opt.zero_grad()
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
    return loss.item()


try:
    train_step(torch.randn(4, 8))
except RuntimeError as err:
    print(err)
    print(f"\nerr.gradflow.modified_at: {err.gradflow.modified_at}")

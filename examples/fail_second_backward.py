"""Class 2: backward through a graph an earlier backward() freed.

A recurrent `hidden` state carried from one step into the next without `.detach()`: the second backward()
runs into the first step's graph, which the first backward() freed ("Trying to backward through the graph a
second time").

    gradflow script examples/fail_second_backward.py
"""
import torch

torch.manual_seed(0)
cell = torch.nn.RNNCell(3, 4)
hidden = torch.zeros(1, 4)
for _ in range(2):
    x = torch.randn(1, 3)
    hidden = cell(x, hidden)
    loss = hidden.pow(2).sum()
    loss.backward()

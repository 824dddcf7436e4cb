"""gradflow.explain_errors on a recurrent step that is given the last step's `hidden` without `.detach()`: the
second call's backward() runs into the graph the first call's backward() freed. gradflow re-runs only the call
that failed, so it names the argument that brings the old graph in, not the earlier backward() line
(`with gradflow.explain_errors():` around the loop records that too).

    python examples/fail_step_hidden.py
"""
import torch

import gradflow

torch.manual_seed(0)
cell = torch.nn.RNNCell(3, 4)


@gradflow.explain_errors
def step(x, hidden):
    hidden = cell(x, hidden)
    hidden.pow(2).sum().backward()
    return hidden


hidden = torch.zeros(1, 4)
try:
    for _ in range(2):
        hidden = step(torch.randn(1, 3), hidden)
except RuntimeError as err:
    print(err)

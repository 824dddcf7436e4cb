"""Each op's source line is the line of this file that ran it, read from the file itself (the `# at:` marks below), at every depth of nested modules, whether the
module's forward is the user's own or torch's (Sequential), a leaf run whole or an op run through the mode."""
from pathlib import Path

import torch

import gradflow

HERE = Path(__file__)
SOURCE = HERE.read_text().splitlines()


def at(mark: str) -> str:
    """`tests/tracer/test_call_sites.py:N` of the line carrying `# at: mark`."""
    n = next(i for i, text in enumerate(SOURCE, 1) if text.rstrip().endswith(f"# at: {mark}"))
    return f"{HERE.relative_to(Path.cwd()) if HERE.is_relative_to(Path.cwd()) else HERE}:{n}"


class Inner(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x):
        y = self.lin(x)  # at: inner-lin
        return y * 2  # at: inner-mul


class Outer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.seq = torch.nn.Sequential(Inner(), torch.nn.GELU(), torch.nn.Sequential(Inner()))

    def forward(self, x):
        h = self.seq(x)  # at: outer-seq
        return (h - x).sum()  # at: outer-sum


def test_every_op_gets_the_line_that_ran_it_at_every_depth():
    torch.manual_seed(0)
    model, x = Outer(), torch.ones(2, 3)
    with gradflow.trace(autograd=True) as t:  # (autograd=True: every op's line is recorded)
        loss = model(x)
    got = [(r.name, r.line) for r in t.ops]
    assert got == [("linear", at("inner-lin")), ("mul", at("inner-mul")), ("gelu", at("outer-seq")),
                   ("linear", at("inner-lin")), ("mul", at("inner-mul")), ("sub", at("outer-sum")),
                   ("sum", at("outer-sum"))]
    report = t.explain(loss, params=model)
    assert {r.line for p in report.params for r in p.routes} == {at("inner-lin")}


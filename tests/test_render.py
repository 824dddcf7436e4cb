"""The table's cells and the lines under it (rich, rendered without a terminal)."""
from io import StringIO

import torch
from rich.console import Console

from gradflow import explain
from gradflow.render import format_tensor, print_explanation


def test_format_tensor():
    assert format_tensor(None) == "—"
    assert format_tensor(torch.tensor(-20.0)) == "-20"
    assert format_tensor(torch.tensor([[1.0, 2.5], [float("nan"), float("-inf")]])) == "[[1, 2.5], [nan, -inf]]"
    big = torch.arange(1.0, 11.0)  # mean 5.5, min 1, max 10, norm sqrt(385) = 19.62
    assert format_tensor(big) == "shape (10,) float32 mean 5.5 norm 19.62 min 1 max 10"
    third = "shape (2, 4) float32 mean 0.3333 norm 0.9428 min 0.3333 max 0.3333"  # norm sqrt(8/9)
    assert format_tensor(torch.full((2, 4), 1 / 3)) == third


def render(result, width=100):
    out, err = StringIO(), StringIO()
    print_explanation(result, Console(file=out, width=width, color_system=None),
                      Console(file=err, width=width, color_system=None))
    return out.getvalue(), err.getvalue()


def test_lines_under_the_table():
    out, err = render(explain("x*y + 0*detach(z)", x=2, y=3, z=4, wrt="all"))
    lines = [line.rstrip() for line in out.splitlines()]
    assert lines[-6:] == ["● on a live gradient path  ✂ cut off by detach/no_grad  ○ never required grad",
                          "✂ cut: z → detach(z)", "", "x.grad = 3", "y.grad = 2",
                          "z.grad = None  (every path from z to L is cut by detach(z))"]
    assert err == ""


def test_legend_lists_only_statuses_present():
    out, _ = render(explain("x*2", x=1))
    assert "● on a live gradient path  ○ never required grad" in out and "✂" not in out


def test_warning_on_stderr_one_line():
    out, err = render(explain("no_grad(x)*y", x=2, y=3), width=40)
    assert err.count("\n") == 1 and err.startswith("warning: no_grad(x) returns x itself")
    assert "warning" not in out

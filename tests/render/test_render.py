"""The table's cells and the lines under it (rich, rendered without a terminal)."""
from io import StringIO

import torch
from rich.console import Console

from gradflow import explain
from gradflow.render.node_table import print_explanation
from gradflow.values.text import format_tensor


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


def test_narrow_console_gets_a_block_per_node_and_loses_no_column():
    """Below the table's width rich would fold its headers and drop its last columns (grad first). Blog example,
    x*y2 detached, hand-derived: L = (x*y1 - c)^2 = 25, dL/d(x*y1 - c) = 2*(-5) = -10, x.grad = -10*y1 = -20."""
    r = explain("(x*y1 - detach(x*y2))^2", x=1, y1=2, y2=7)
    narrow, _ = render(r, width=50)
    assert " node " not in narrow and max(len(line.rstrip()) for line in narrow.splitlines()) <= 50
    text = " ".join(narrow.split())
    for node, op, grad, value in [("x", "var", "-20", "1"), ("x*y1", "mul", "-10", "2"),
                                  ("x*y1 - detach(x*y2)", "sub", "-10", "-5"), ("detach(x*y2)", "detach", "—", "7"),
                                  ("(x*y1 - detach(x*y2))^2", "pow", "1", "25")]:
        assert f"{node} {op} grad {grad} · value {value} ·" in text, node
    assert text.count("grad_fn") == len(r.nodes) and "x.grad = -20" in text


def test_the_table_stays_while_it_fits_with_the_node_column_folded():
    r = explain("(x*y1 - detach(x*y2))^2", x=1, y1=2, y2=7)
    for width in (69, 100):  # 69: node folded to 8 columns, every other column whole
        out, _ = render(r, width=width)
        header = next(line for line in out.splitlines() if " node " in line)
        assert header.split() == ["node", "op", "value", "requires_grad", "is_leaf", "grad_fn", "grad"]
        assert max(len(line) for line in out.splitlines()) <= width
    out, _ = render(r, width=68)
    assert " node " not in out

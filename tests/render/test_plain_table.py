"""Without colour (a pipe, a file) the node table is laid out by render/table.py itself, not by rich (rich took
~0.2 ms a row: 4 s for a 19,200-node program). Its lines must be exactly rich's, for every layout: the table,
the table with its node column folded, and the per-node blocks of a narrow console."""
import io

import pytest
from rich.console import Group

from gradflow import explain
from gradflow.render.console import new_console
from gradflow.render.table import nodes_view, plain_nodes_view

BIG = {"length": 10**6, "depth": 10**6, "nodes": 10**6}
PROGRAMS = [
    ("(x*y1 - detach(x*y2))^2", dict(x=1, y1=2, y2=7)),
    ("a = x*y; b = x*2; b", dict(x=1, y=3)),
    ("sum(w*x) + detach(w).sum()", dict(w=[1.5, -2], x=[3, 4], wrt="all")),
    ("sum(tanh(w) * x)", dict(w=[[0.1] * 40] * 40, x=2)),  # summaries: cells of several lines
    ("log(x) * 0 + sqrt(x - 2)", dict(x=1)),  # nan: the ⚠ marker
    ("with torch.no_grad():\n    a = x*2\na*x + sin(a)", dict(x=0.5)),
    ("(tanh(weight*input_value + bias_of_the_layer) - target_value)^2",
     dict(weight=0.5, input_value=2, bias_of_the_layer=0.1, target_value=1)),
    ("very_long_variable_name_number_one * another_quite_long_variable_name + x", dict(
        very_long_variable_name_number_one=1, another_quite_long_variable_name=2, x=3)),
    (" + ".join(f"x*{k}" for k in range(1, 60)), dict(x=1.25)),
    ("cat([" + ", ".join(f"x*{k}" for k in range(1, 40)) + "]).sum()", dict(x=[1.0])),
]


def rich_lines(result, width: int) -> list[str]:
    console = new_console(file=io.StringIO(), width=width)
    console.print(Group(nodes_view(result, width)))  # as print_explanation prints it: lines padded to the width
    return console.file.getvalue().split("\n")[:-1]


@pytest.mark.parametrize("width", [40, 72, 160])
@pytest.mark.parametrize("number", range(len(PROGRAMS)))
def test_plain_lines_are_richs(number, width):
    source, values = PROGRAMS[number]
    result = explain(source, limits=BIG, **values)
    plain = plain_nodes_view(result, width)
    if plain is None:  # a layout left to rich: only where the title itself would fold
        assert len(f"L = {result.output.expr}") > 40
        return
    assert plain == rich_lines(result, width)


@pytest.mark.parametrize("source", ["a = sum(x *\n  2, # a comment\n dim=0); a*4", "sum(x *\n\t2)",
                                    "sum(x * # a note\x01\n 2)"])
def test_text_over_several_lines_with_tabs_or_controls(source):
    """A name over several lines is laid out as rich does; a tab or a control character is left to rich."""
    result = explain(source, x=[1.0, 2.0], limits=BIG)
    for width in (40, 100):
        plain = plain_nodes_view(result, width)
        assert plain == rich_lines(result, width) if "\t" not in source and "\x01" not in source else plain is None


def test_a_big_program_is_laid_out_plainly():
    result = explain(" + ".join(f"x*{k}" for k in range(1, 401)), x=1, limits=BIG)
    for width in (80, 200):
        lines = plain_nodes_view(result, width)
        assert lines is not None and len(lines) >= 1200 and max(len(line) for line in lines) <= width


def test_line_breaks_are_richs():
    """Where a line breaks, against rich._wrap.divide_line itself: words of any length, runs of spaces, one-cell
    symbols, leading spaces, words longer than the line (rich folds them: its own code does it)."""
    import random

    from rich._wrap import divide_line

    from gradflow.render.table import _breaks

    rng = random.Random(12)
    for _ in range(3000):
        words = ["".join(rng.choice("ab·—●%1") for _ in range(rng.randint(1, 14))) for _ in range(rng.randint(1, 12))]
        line = " " * rng.choice([0, 0, 2]) + "".join(w + " " * rng.choice([1, 1, 1, 2, 3]) for w in words)
        width = rng.randint(4, 40)
        assert _breaks(line, width) == divide_line(line, width, fold=True), (line, width)

"""Without colour (a pipe, a file) a node table of one-line cells that fits its width is padded by
render/node_table.py itself, not laid out by rich (rich's per-cell layout was most of the time of a big program's
command). Its lines must be exactly rich's; every other layout (a folded node column, cells of several lines,
the per-node blocks of a narrow console) is left to rich."""
import io

import pytest
from rich.console import Group

from gradflow import explain
from gradflow.render.console import new_console
from gradflow.render.node_table import nodes_view, plain_table_lines

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
    plain = plain_table_lines(result, width)
    if plain is None:  # left to rich: a layout that is not one line per node (folded, several lines, blocks)
        assert len(rich_lines(result, width)) != 5 + len(result.nodes)
        return
    assert plain == rich_lines(result, width)


def test_most_programs_take_the_plain_lines():
    taken = [plain_table_lines(explain(source, limits=BIG, **values), 160) is not None for source, values in PROGRAMS]
    assert sum(taken) >= 6, taken


@pytest.mark.parametrize("source", ["a = sum(x *\n  2, # a comment\n dim=0); a*4", "sum(x *\n\t2)",
                                    "sum(x * # a note\x01\n 2)"])
def test_text_over_several_lines_with_tabs_or_controls_is_left_to_rich(source):
    result = explain(source, x=[1.0, 2.0], limits=BIG)
    for width in (40, 100):
        assert plain_table_lines(result, width) is None


def test_a_big_program_is_laid_out_plainly():
    result = explain(" + ".join(f"x*{k}" for k in range(1, 401)), x=1, limits=BIG)
    lines = plain_table_lines(result, 200)
    assert lines is not None and len(lines) >= 1200 and max(len(line) for line in lines) <= 200
    assert lines == rich_lines(result, 200)

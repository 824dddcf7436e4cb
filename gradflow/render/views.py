"""How every result shows itself (gradflow/display.py's Shown and Drawn): text, Jupyter HTML, its graph.

There is one drawing of each result, the terminal's: `print_result()` prints it through the same rich renderers
`gradflow eval`, `inspect`, `script`, `whatif` and `compare` use. Text is that drawing without colour at a
fixed width; HTML is the same drawing recorded by rich with its colours and exported with inline styles (no
stylesheet, so a notebook shows it as the terminal does). Graphs come from render/graph_text.py (an expression's
autograd picture) and report/module_picture.py (a model's modules), as SVG where Graphviz's `dot` is installed.
"""
from __future__ import annotations

import io
from functools import singledispatch
from pathlib import Path
from types import ModuleType

from rich.console import Console
from rich.text import Text

from gradflow.analysis.explanation import Explanation
from gradflow.errors import GradflowError, ValueInputError
from gradflow.render import graphviz
from gradflow.render.console import new_console
from gradflow.render.health import chart
from gradflow.render.node_table import print_brief, print_explanation
from gradflow.render.whatif import compare_view, whatif_table
from gradflow.report.inspect_report import InspectReport
from gradflow.report.layer_health import HealthReport
from gradflow.report.op_graph import OpGraph
from gradflow.report.param_table import print_report
from gradflow.report.watch import Watch
from gradflow.script.backward_table import backward_view
from gradflow.script.recorder import BackwardCall
from gradflow.studies.rows import Comparison
from gradflow.studies.whatif import WhatIf

TEXT_WIDTH = 100  # print(result): the width the README's examples are printed at
HTML_WIDTH = 120  # a notebook cell is wider than a terminal's 80 columns
REPR_LINES = 40  # repr(result) stops here: a debugger or a list of results must stay readable
_PRE = ('<pre class="gradflow" style="font-family:Menlo,\'DejaVu Sans Mono\',Consolas,\'Courier New\',monospace;'
        'font-size:13px;line-height:1.25;color:{foreground};background-color:{background};padding:6px">'
        '<code style="font-family:inherit">{code}</code></pre>')
MODULE_DEPTH = 2  # an inspect report's picture groups parameters by module at this depth (inspect's default)


@singledispatch
def print_result(result, out: Console, err: Console) -> None:
    """Print `result` as its command prints it (`out` for the table, `err` for its warnings)."""
    raise TypeError(f"gradflow cannot show a {type(result).__name__}")


@print_result.register
def _(result: Explanation, out: Console, err: Console) -> None:
    (print_brief if result.brief else print_explanation)(result, out, err)


@print_result.register
def _(result: InspectReport, out: Console, err: Console) -> None:
    print_report(result, out, err)


@print_result.register
def _(result: BackwardCall, out: Console, err: Console) -> None:
    out.print(backward_view(result, out.width))


@print_result.register
def _(result: WhatIf, out: Console, err: Console) -> None:
    out.print(whatif_table(result))


@print_result.register
def _(result: Comparison, out: Console, err: Console) -> None:
    out.print(compare_view(result))


@print_result.register
def _(result: HealthReport, out: Console, err: Console) -> None:
    out.print(chart(result, columns=out.width), soft_wrap=True)


@print_result.register
def _(result: Watch, out: Console, err: Console) -> None:
    out.print(Text(result.summary()))


# ---- text and HTML ----------------------------------------------------------------------------------------

def text(result) -> str:
    """The terminal's drawing without colour, TEXT_WIDTH columns wide (what `print(result)` shows)."""
    file = io.StringIO()
    console = new_console(file=file, width=TEXT_WIDTH, color_system=None, force_terminal=False,
                          force_jupyter=False)  # in a notebook rich would display, not write to `file`
    print_result(result, console, console)
    return "\n".join(line.rstrip() for line in file.getvalue().rstrip("\n").split("\n"))


def short_text(result) -> str:
    """repr(result): text() up to REPR_LINES lines; never raises (a repr that fails hides the real error)."""
    try:
        lines = text(result).split("\n")
    except Exception as err:  # noqa: BLE001 - a repr must not raise, whatever the result holds
        return f"<{type(result).__name__} (cannot be drawn: {type(err).__name__}: {err})>"
    if len(lines) > REPR_LINES:
        more = len(lines) - REPR_LINES
        lines = [*lines[:REPR_LINES], f"… {more} more line{'s' * (more != 1)} (print() shows them all)"]
    return "\n".join(lines)


def html(result) -> str:
    """The terminal's drawing with its colours, as an HTML <pre> with inline styles."""
    console = new_console(file=io.StringIO(), width=HTML_WIDTH, record=True, color_system="truecolor",
                          force_terminal=True, force_jupyter=False)
    print_result(result, console, console)
    return console.export_html(inline_styles=True, code_format=_PRE)


def mimebundle(result) -> dict:
    """IPython's display bundle: the text, the HTML table and, for a result with a graph, its SVG (below the
    table in the HTML too, since a notebook shows only the richest type) where Graphviz's `dot` exists."""
    page = html(result)
    bundle = {"text/plain": short_text(result)}
    svg = _svg_or_none(result)
    if svg is not None:
        bundle["image/svg+xml"] = svg
        page += f'<div class="gradflow-graph">{svg[svg.find("<svg"):]}</div>'
    bundle["text/html"] = page
    return bundle


# ---- graphs -----------------------------------------------------------------------------------------------

@singledispatch
def _drawing(result) -> tuple[ModuleType, tuple]:
    """The module that draws this kind of result's graph (its `to_dot` and `to_mermaid`) and what they take."""
    raise TypeError(f"a {type(result).__name__} has no graph")


def dot(result) -> str:
    """The result's graph as Graphviz DOT text."""
    module, args = _drawing(result)
    return module.to_dot(*args)


def mermaid(result) -> str:
    """The result's graph as Mermaid text."""
    module, args = _drawing(result)
    return module.to_mermaid(*args)


@_drawing.register
def _(result: Explanation) -> tuple[ModuleType, tuple]:
    from gradflow.render import graph_text
    from gradflow.studies.torch_graph import picture

    if result.brief or result.graph is None or not result.nodes:
        raise ValueInputError("no_graph", "this result has no graph (explain(..., brief=True) keeps the answer "
                              "only)", hint="explain it without brief=True")
    return graph_text, (picture(result),)


@_drawing.register
def _(result: InspectReport) -> tuple[ModuleType, tuple]:
    from gradflow.report import module_picture

    return module_picture, (result, MODULE_DEPTH)


@_drawing.register
def _(result: OpGraph) -> tuple[ModuleType, tuple]:
    from gradflow.render import op_graph

    return op_graph, (result,)


@_drawing.register
def _(result: BackwardCall) -> tuple[ModuleType, tuple]:
    """The gradflow program that computes the same loss and grads as this backward: its picture is the
    backward's."""
    from gradflow.script.program_writer import Program

    if not isinstance(result.program, Program):
        raise ValueInputError("no_graph", f"this backward has no graph: {result.program.reason}")
    return _drawing(result.program.explain())


@print_result.register
def _(result: OpGraph, out: Console, err: Console) -> None:
    from collections import Counter

    kinds = Counter(n.fn or n.kind for n in result.nodes.values())
    out.print(Text(f"{result.title}: {len(result.nodes)} nodes, {len(result.edges)} edges"
                   + "".join(f"\n  {k} ×{v}" for k, v in kinds.most_common())
                   + "".join(f"\n  folded: {f.label}" for f in result.folds)))


def _svg_or_none(result) -> str | None:
    """The graph as SVG text; None for a result without a graph, or without Graphviz (the text stands alone)."""
    if _drawing.dispatch(type(result)) is _drawing.dispatch(object) or not graphviz.available():
        return None
    try:
        return graphviz.graphviz(dot(result), "svg", asked="an SVG picture").decode()
    except GradflowError:
        return None


_FORMATS = {".svg": "svg", ".png": "png", ".pdf": "pdf", ".dot": "dot", ".gv": "dot", ".mmd": "mermaid",
            ".mermaid": "mermaid"}


def picture_format(path) -> str:
    """The format a file name's suffix names (svg, png, pdf, dot, mermaid); a ValueInputError (exit 2) if none."""
    path = Path(path)
    fmt = _FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise ValueInputError("usage", f"cannot tell a picture format from {path.name!r}",
                              hint="end the file name with " + ", ".join(_FORMATS))
    return fmt


def picture(result, path, asked: str) -> str | bytes:
    """The graph in the format `path`'s suffix names: DOT or Mermaid text, or Graphviz's svg/png/pdf bytes."""
    fmt = picture_format(path)
    if fmt in ("mermaid", "dot"):
        return mermaid(result) if fmt == "mermaid" else dot(result)
    return graphviz.graphviz(dot(result), fmt, asked=asked)


def draw(result, path) -> Path:
    """Write the graph to `path` in the format its suffix names (see display.Drawn.draw)."""
    path = Path(path)
    data = picture(result, path, f"draw({path.name!r})")
    if isinstance(data, str):
        path.write_text(data, encoding="utf-8")
    else:
        path.write_bytes(data)
    return path

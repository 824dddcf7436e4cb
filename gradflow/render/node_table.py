"""Explanation -> rich table and summary lines; errors -> readable stderr text.

Never prints JSON (that goes out through result.dumps and plain print).
"""
from __future__ import annotations

import math
from typing import Any

from rich import box
from rich.cells import cell_len
from rich.console import Console, Group
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from gradflow.analysis.explanation import Explanation, NodeResult
from gradflow.display import visible
from gradflow.errors import GradflowError
from gradflow.language.graph import NAME_WIDTH
from gradflow.values.jsonable import UNCONVERTED
from gradflow.values.text import DASH, format_numbers, format_tensor

ANOMALY = "⚠"
_STATUS = {  # marker, style, legend text
    "live": ("●", "green", "on a live gradient path"),
    "cut": ("✂", "red", "cut off by detach/no_grad"),
    "unused": ("◌", "yellow", "requires grad, unused by L"),
    "unreached": ("◌", "yellow", "requires grad, got none"),
    "off": ("○", "dim", "never required grad"),
}


def _flag(b: bool) -> Text:
    return Text("True", style="bold") if b else Text("False", style="dim")


def _node_cell(n: NodeResult, anomaly: bool = False) -> Text:
    mark, style, _ = _STATUS[n.status]
    return Text.assemble((mark + " ", style), n.name, (" " + ANOMALY if anomaly else "", "bold magenta"))


def anomalies(result: Explanation) -> set[int]:
    """Nodes where a nan/inf first appeared (forward or backward): marked in the table."""
    return {w.node_id for w in result.warnings if w.kind.startswith("nonfinite") and w.node_id is not None}


def legend(result: Explanation) -> Text:
    seen = dict.fromkeys(n.status for n in result.nodes)
    extra = [f"{ANOMALY} nan/inf starts here (see warnings)"] if anomalies(result) else []
    return Text("  ".join([f"{_STATUS[s][0]} {_STATUS[s][2]}" for s in _STATUS if s in seen] + extra), style="dim")


def cut_lines(result: Explanation) -> Text:
    """One line per cut edge: which value stopped carrying gradient into which node."""
    lines = Text()
    for e in result.edges:
        if e.cut:
            dst = result.nodes[e.dst]
            lines.append("✂ cut: ", style="red")
            lines.append(f"{result.nodes[e.src].name} → {dst.name}")
            if dst.cut_by and dst.cut_by != dst.name:
                lines.append(f"  (inside {dst.cut_by})", style="dim")
            lines.append("\n")
    return lines


def _out_label(result: Explanation) -> str:
    return result.output.name if result.output.name != result.output.expr else "L"


# Only the node column wraps; a console too narrow for the rest gets node_blocks() instead (see nodes_view)
_COLUMNS: list[tuple[str, dict[str, Any]]] = [("node", {"overflow": "fold", "min_width": 8}), ("op", {"no_wrap": True}),
            ("value", {"justify": "right", "min_width": 5, "no_wrap": True}),
            ("requires_grad", {"no_wrap": True}), ("is_leaf", {"no_wrap": True}),
            ("grad_fn", {"no_wrap": True}), ("grad", {"justify": "right", "min_width": 5, "no_wrap": True})]


def _tensor_cells(result: Explanation) -> list[tuple[str, str]]:
    """Each node's value and grad as the table shows them (a big tensor's summary costs a pass over it: once),
    from the numbers the engine read where it did (NodeResult.value_py)."""
    cells = []
    for n in result.nodes:
        if n.dims is None or n.value_py is UNCONVERTED or n.grad_py is UNCONVERTED:
            cells.append((format_tensor(n.value, "\n"), format_tensor(n.grad, "\n")))
        else:
            size = math.prod(n.dims)
            cells.append((format_numbers(n.value, n.value_py, size, "\n"), format_numbers(n.grad, n.grad_py, size,
                                                                                           "\n")))
    return cells


def abbreviated(result: Explanation) -> bool:
    """Is any name shortened (`%17 + x*6400`)? Then the table numbers its nodes, so %17 can be found."""
    return any(n.abbreviated for n in result.nodes)


def node_table(result: Explanation, cells: list[tuple[str, str]]) -> Table:
    table = Table(title=Text(f"{_out_label(result)} = {result.output.expr}"), title_justify="left", box=box.SIMPLE_HEAD,
                  padding=(0, 1), pad_edge=False, collapse_padding=True)
    ids = abbreviated(result)
    if ids:
        table.add_column("id", justify="right", no_wrap=True)
    for col, kw in _COLUMNS:
        table.add_column(col, **kw)
    marked = anomalies(result)
    for n, (value, grad) in zip(result.nodes, cells):
        # Text, not str: values like [nan, 1] must not be read as markup
        table.add_row(*([f"%{n.id}"] if ids else []), _node_cell(n, n.id in marked), n.op, Text(value),
                      _flag(n.requires_grad), _flag(n.is_leaf), n.grad_fn or DASH, Text(grad))
    return table


def node_blocks(result: Explanation) -> Group:
    """The table's content as a block per node, for a console too narrow for the table (rich would fold its
    headers and drop its last columns, grad first): nothing is lost, the details wrap under their node."""
    marked = anomalies(result)
    parts: list = [Text(f"{_out_label(result)} = {result.output.expr}\n")]
    ids = abbreviated(result)
    for n in result.nodes:
        parts.append(Text.assemble((f"%{n.id} " if ids else "", "dim"), _node_cell(n, n.id in marked),
                                   (f"  {n.op}", "dim")))
        details = Text.assemble((f"grad {format_tensor(n.grad)}", "bold"),  # first: what the table is read for
                                f" · value {format_tensor(n.value)} · requires_grad {n.requires_grad}"
                                f" · is_leaf {n.is_leaf} · grad_fn {n.grad_fn or DASH}")
        parts.append(Padding(details, (0, 0, 0, 2)))
    parts.append(Text())
    return Group(*parts)


def _fits(result: Explanation, cells: list[tuple[str, str]], width: int) -> bool:
    """Does the table fit in `width` with its node column folded to 8 columns and every other column whole?"""
    column = {"op": [n.op for n in result.nodes], "value": [v for v, _ in cells], "requires_grad": ["False"],
              "is_leaf": ["False"], "grad_fn": [n.grad_fn or DASH for n in result.nodes], "grad": [g for _, g in cells]}
    need = 2 + 2 * (len(_COLUMNS) - 1) + 8  # the box's edges, the gaps between columns, the node column
    if abbreviated(result):
        need += 3 + len(str(len(result.nodes)))  # the id column and its gap
    for name, _ in _COLUMNS[1:]:
        need += max(map(len, "\n".join([name, *column[name]]).split("\n")))  # the longest line of any cell
    return need <= width


def nodes_view(result: Explanation, width: int):
    """The node table when it fits in `width` (see _fits), else node_blocks()."""
    cells = _tensor_cells(result)
    return node_table(result, cells) if _fits(result, cells, width) else node_blocks(result)


# ---- the same, as plain lines, where that is simple ---------------------------------------------------------
# rich measures, wraps and pads every cell it prints: for a program of thousands of nodes that was most of the
# command's time (bench/program_size.py). Printed without colour, a table whose every cell is one line and that
# fits its width whole is plain padding: plain_table_lines() writes it; everything else is rich's.
# tests/render/test_node_table.py checks the lines are rich's.

def plain_table_lines(result: Explanation, width: int) -> list[str] | None:
    """The node table's lines as rich prints them without colour, or None where rich must lay it out: a cell
    or the title over several lines or with a character rich escapes, a table wider than `width`."""
    marked, ids, cells = anomalies(result), abbreviated(result), _tensor_cells(result)
    mark = {status: f"{m} " for status, (m, _, _) in _STATUS.items()}
    columns = [[mark[n.status] + n.name + (" " + ANOMALY if n.id in marked else "") for n in result.nodes],
               [n.op for n in result.nodes], [v for v, _ in cells], [str(n.requires_grad) for n in result.nodes],
               [str(n.is_leaf) for n in result.nodes], [n.grad_fn or DASH for n in result.nodes], [g for _, g in cells]]
    specs = [("id", {"justify": "right"})] * ids + _COLUMNS
    columns = [[f"%{n.id}" for n in result.nodes]] * ids + columns
    title = f"{_out_label(result)} = {result.output.expr}"
    if not " ".join([title, *(" ".join(column) for column in columns)]).isprintable():
        return None
    widths, padded = [], []
    for (head, kw), column in zip(specs, columns):
        one = " ".join(column).translate(_ONE_CELL).isascii()  # every character one cell: a width is a length
        widths.append(max(cell_len(head), kw.get("min_width", 0), *map(len if one else cell_len, column)))
        right = kw.get("justify") == "right"
        padded.append([c.rjust(widths[-1]) if right else c.ljust(widths[-1]) for c in column] if one
                      else [_pad(c, widths[-1], right) for c in column])
    inner = sum(widths) + 2 * (len(widths) - 1)
    if inner + 2 > width or cell_len(title) > inner + 2:
        return None
    head = " " + "  ".join(_pad(h, w, kw.get("justify") == "right") for (h, kw), w in zip(specs, widths)) + " "
    return [_pad(title, inner + 2), " " * (inner + 2), head, " " + "─" * inner + " ",
            *(" " + "  ".join(row) + " " for row in zip(*padded)), " " * (inner + 2)]


_ONE_CELL = dict.fromkeys(map(ord, "●○◌✂⚠—"))  # the table's own marks, one cell each: left out of the test


def _pad(text: str, width: int, right: bool = False) -> str:
    gap = " " * (width - cell_len(text))
    return gap + text if right else text + gap


def grad_lines(result: Explanation) -> Text:
    """`x.grad = 50`, one line per chosen leaf, with the reason where it is None."""
    lines = Text()
    for leaf, g in result.grads.items():
        lines.append(f"{leaf}.grad = ", style="bold")
        if g is None:
            lines.append("None", style="yellow")
            lines.append(f"  ({result.why.get(leaf, 'no gradient reached it')})")
        else:
            lines.append(format_tensor(g), style="bold green")
        lines.append("\n")
    lines.rstrip()
    return lines


def print_explanation(result: Explanation, out: Console, err: Console):
    note = [Text(f"%N is node N: a name over {NAME_WIDTH} characters refers to its long operands by id "
                 "(--json: each node's span in the source)", style="dim")] if abbreviated(result) else []
    # a pipe or a file, without colour, in UTF-8: an ASCII output has rich draw its boxes in ASCII
    plain = None if out.is_terminal or out.color_system or out.options.ascii_only else plain_table_lines(result,
                                                                                                         out.width)
    if plain is not None:
        out.file.write("\n".join(plain) + "\n")  # the lines rich would print
    view = [] if plain is not None else [nodes_view(result, out.width)]
    out.print(Group(*view, legend(result), *note, cut_lines(result), grad_lines(result)))
    print_warnings(result, err)


def print_brief(result: Explanation, out: Console, err: Console):
    """`eval --brief`: the output's value and the grad lines, no table (the result has no nodes)."""
    lines = Text(f"{_out_label(result)} = ", style="bold")
    lines.append(format_tensor(result.output.value))
    lines.append("\n")
    out.print(lines + grad_lines(result))
    print_warnings(result, err)


def print_warnings(result: Explanation, err: Console):
    for w in result.warnings:
        err.print(Text(visible(f"warning: {w.message}"), style="yellow"), soft_wrap=True)


def print_error(error: GradflowError, err: Console):
    """As render/plain.py prints it: control characters shown escaped (rich's Text would drop some)."""
    err.print(Text(visible(f"error: {error.message}"), style="bold red"), soft_wrap=True)  # one line: greppable
    caret = error.caret()
    if caret:
        err.print(Text(caret), soft_wrap=True)  # never wrap: the caret must stay under its column
    if error.detail:
        err.print(Text(error.detail), soft_wrap=True)
    if error.hint:
        err.print(Text(visible(f"hint: {error.hint}"), style="cyan"), soft_wrap=True)

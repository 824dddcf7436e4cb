"""Explanation -> rich table and summary lines; errors -> readable stderr text.

Never prints JSON (that goes out through result.dumps and plain print).
"""
from __future__ import annotations

import math
import re
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


def abbreviation_note() -> Text:
    return Text(f"%N is node N: a name over {NAME_WIDTH} characters refers to its long operands by id "
                "(--json: each node's span in the source)", style="dim")


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


# ---- the same, as plain lines -------------------------------------------------------------------------------
# Rich spends ~0.2 ms per table row (measuring, wrapping and padding every cell), so a program of 19,200 nodes
# took 4 s to print. Without colour (a pipe or a file: no styles to emit), plain_nodes_view() lays out the
# very same lines itself; where rich's layout is not a plain one (a title or a header wider than the table
# would fold) it returns None and rich does it. tests/render/test_plain_table.py checks both agree.

_WIDER = "[^\x20-\x7e·—●○◌✂…]"  # neither printable ASCII nor one of the table's own one-cell characters
_WIDER_LINES = "[^\x20-\x7e·—●○◌✂…\n]"  # the same, in lines joined by "\n"


def _cells(text: str) -> int:
    return len(text) if text.isascii() or re.search(_WIDER, text) is None else cell_len(text)


def _breaks(line: str, width: int, one_cell: bool = False) -> list[int]:
    """rich._wrap.divide_line(line, width): where rich breaks a line, found with rfind() instead of a Python
    step per word when every character is one cell and the only white space is ' ' (else rich's own).
    `one_cell`: the caller knows both already."""
    from rich._wrap import divide_line

    if not one_cell and (_cells(line) != len(line) or not line.replace(" ", "x").isprintable()):
        return divide_line(line, width, fold=True)
    breaks, start, n = [], 0, len(line)
    while start + width < n:
        end = start + width  # the first character that does not fit
        if line[end] == " ":  # the word before it fits; the next word starts the next line
            nxt = len(line) - len(line[end:].lstrip(" "))
            if nxt >= n:
                break
        else:  # the word under `end` starts the next line
            nxt = line.rfind(" ", start, end) + 1
            if nxt <= start or line[start:nxt].strip(" ") == "":
                return divide_line(line, width, fold=True)  # a word longer than the line: rich folds it
        breaks.append(nxt)
        start = nxt
    return breaks


def _wrap(text: str, width: int, pad: bool = False, one_cell: bool = False) -> list[str]:
    """rich's Text.wrap() of plain text (overflow fold, default justify); `pad`: each line padded to `width`
    (as a Padding around it prints it); `one_cell`: every character of `text` is known to take one cell, and its
    only white space is ' '."""
    if "\n" not in text:  # one line (most): as the loop below does it, without the loop
        cells = len(text) if one_cell else _cells(text)
        if cells <= width:
            return [_pad(text, width, cells=cells) if pad else text]
    lines = []
    for line in text.split("\n"):
        cells = len(line) if one_cell else _cells(line)
        one = cells == len(line)  # every piece's width is its length
        cuts = [0, *_breaks(line, width, one_cell), len(line)] if cells > width else [0, len(line)]
        for a, b in zip(cuts, cuts[1:]):
            piece = line[a:b]
            excess = (len(piece) if one else _cells(piece)) - width
            if excess > 0:  # rich's rstrip_end(): spaces beyond the width go
                piece = piece[:len(piece) - min(excess, len(piece) - len(piece.rstrip()))]
            lines.append(_pad(piece, width, cells=len(piece) if one else None) if pad else piece)
    return lines


def _pad(text: str, width: int, right: bool = False, cells: int | None = None) -> str:
    gap = width - (_cells(text) if cells is None else cells)
    return (" " * gap + text if right else text + " " * gap) if gap > 0 else text


def _column(texts: list[str]) -> tuple[int, bool, bool]:
    """A column's widest line in cells; whether every character of it is one cell (so a cell's width is its
    length); whether some cell has several lines. Looked at whole, with one C-level pass where it can be."""
    joined = "\n".join(texts)
    lines = joined.split("\n")
    multi = len(lines) != len(texts)
    if joined.isascii() or re.search(_WIDER_LINES, joined) is None:
        return max(map(len, lines), default=0), True, multi
    return max(map(_cells, lines), default=0), False, multi


def _plain_table(result: Explanation, cells: list[tuple[str, str]], width: int) -> list[str] | None:
    marked = anomalies(result)
    ids = abbreviated(result)
    heads = (["id"] if ids else []) + [col for col, _ in _COLUMNS]
    right = ([True] if ids else []) + [kw.get("justify") == "right" for _, kw in _COLUMNS]
    mark = {status: f"{m} " for status, (m, _, _) in _STATUS.items()}
    columns = [[mark[n.status] + n.name + (" " + ANOMALY if n.id in marked else "") for n in result.nodes],
               [n.op for n in result.nodes], [v for v, _ in cells], [str(n.requires_grad) for n in result.nodes],
               [str(n.is_leaf) for n in result.nodes], [n.grad_fn or DASH for n in result.nodes], [g for _, g in cells]]
    if ids:
        columns.insert(0, [f"%{n.id}" for n in result.nodes])
    info = [_column(col) for col in columns]
    widths = [max(_cells(h), w) for h, (w, _, _) in zip(heads, info)]
    for i, (_, kw) in enumerate(_COLUMNS, start=len(heads) - len(_COLUMNS)):
        widths[i] = max(widths[i], kw.get("min_width", 0))
    at = len(heads) - len(_COLUMNS)  # the node column
    inner = sum(widths) + 2 * (len(widths) - 1)
    if inner + 2 > width:  # rich folds the node column (the only one that wraps) to what is left
        widths[at] -= inner + 2 - width
        inner = width - 2
        if widths[at] < _COLUMNS[0][1]["min_width"]:
            return None
        columns[at] = [c if _cells(c) <= widths[at] else "\n".join(line.rstrip() for line in _wrap(c, widths[at]))
                       for c in columns[at]]
        info[at] = _column(columns[at])
    title = f"{_out_label(result)} = {result.output.expr}"
    if _cells(title) > inner + 2 or "\n" in title:
        return None  # rich would fold the title: its own layout

    def line(cells_of_row: list[str]) -> str:
        return " " + "  ".join(_pad(c, w, r) for c, w, r in zip(cells_of_row, widths, right)) + " "

    out = [_pad(title, inner + 2), " " * (inner + 2), line(heads), " " + "─" * inner + " "]
    if any(multi for _, _, multi in info):  # a cell over several lines: row by row
        for r in zip(*columns):
            parts = [c.split("\n") for c in r]
            for k in range(max(len(p) for p in parts)):
                out.append(line([p[k] if k < len(p) else "" for p in parts]))
    else:  # every cell one line: each column padded at once (a cell's width is its length where `one`)
        padded = [[c.rjust(w) for c in col] if one and r else [c.ljust(w) for c in col] if one
                  else [_pad(c, w, r) for c in col] for col, w, r, (_, one, _) in zip(columns, widths, right, info)]
        out += [" " + "  ".join(row) + " " for row in zip(*padded)]
    out.append(" " * (inner + 2))
    return out


def _plain_blocks(result: Explanation, width: int, cells: list[tuple[str, str]]) -> list[str] | None:
    marked = anomalies(result)
    ids = abbreviated(result)
    out = _wrap(f"{_out_label(result)} = {result.output.expr}\n", width)
    for n, (value, grad) in zip(result.nodes, cells):  # a cell without "\n" is what format_tensor(t) gives
        node = f"{_STATUS[n.status][0]} {n.name}" + (" " + ANOMALY if n.id in marked else "")
        out += _wrap(f"%{n.id} " * ids + node + f"  {n.op}", width, one_cell=n.name.isascii()
                     and n.name.isprintable() and n.id not in marked)
        value = format_tensor(n.value) if "\n" in value else value
        grad = format_tensor(n.grad) if "\n" in grad else grad
        details = (f"grad {grad} · value {value} · requires_grad "
                   f"{n.requires_grad} · is_leaf {n.is_leaf} · grad_fn {n.grad_fn or DASH}")
        # numbers, torch's class names and the table's own characters: one cell each, no need to measure them
        one = grad.isascii() and value.isascii() and (n.grad_fn is None or n.grad_fn.isascii())
        out += ["  " + line for line in _wrap(details, width - 2, pad=True, one_cell=one)]
    out.append("")
    return out


def plain_nodes_view(result: Explanation, width: int) -> list[str] | None:
    """nodes_view()'s lines as rich prints them without colour, or None where rich must lay them out (also
    for text with a tab or a control character in it: rich expands and escapes those its own way)."""
    if not all(n.name.isprintable() or n.name.replace("\n", "").isprintable() for n in result.nodes) \
            or not result.output.expr.isprintable():
        return None
    cells = _tensor_cells(result)
    fits = _fits(result, cells, width)
    lines = _plain_table(result, cells, width) if fits else _plain_blocks(result, width, cells)
    return None if lines is None else [ln if ln.isprintable() else visible(ln) for ln in lines]


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
    note = [abbreviation_note()] if abbreviated(result) else []
    # a pipe or a file, without colour, in UTF-8: an ASCII output has rich draw its boxes in ASCII
    plain = None if out.is_terminal or out.color_system or out.options.ascii_only else plain_nodes_view(result,
                                                                                                        out.width)
    if plain is not None:
        out.file.write("\n".join(plain) + "\n")  # see plain_nodes_view: the lines rich would print
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

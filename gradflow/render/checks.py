"""Rich views of the numeric check and the second derivatives (never JSON)."""
from __future__ import annotations

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from gradflow.values.text import DASH, format_number, format_tensor


def check_table(result) -> Group:
    """One row per chosen leaf: autograd, numeric, agreement, true derivative, what the cuts removed."""
    title = Text(f"Numeric check: autograd vs central differences (float64, eps {result.eps:g}) with every cut "
                 "held at its forward value; true = the derivative with the cuts removed", style="bold")
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False)
    for col in ("leaf", "autograd", "numeric", "agree", "true (no cuts)", "cuts removed"):
        table.add_column(col, justify="left" if col in ("leaf", "agree") else "right", overflow="fold")
    for c in result.leaves:
        mark = Text("✓", style="green") if c.ok else Text(f"✗ off by {format_number(c.error)}", style="bold red")
        table.add_row(Text(c.leaf), format_tensor(c.autograd) if c.autograd is not None else "None",
                      format_tensor(c.numeric), mark, format_tensor(c.true), format_tensor(c.removed))
    return Group(title, table)


def note_lines(notes) -> Text:
    lines = Text()
    for n in notes:
        lines.append("⚠ ", style="yellow")
        lines.append(n.message + "\n")
    lines.rstrip()
    return lines


def hessian_view(result):
    """The Hessian as a matrix table (scalar leaves) or one diagonal line per tensor leaf."""
    where = f", computed in {result.computed_in}" if getattr(result, "computed_in", None) else ""
    if result.kind == "diagonal":
        lines = Text(f"Second derivatives (Hessian diagonal, cuts respected{where})\n", style="bold")
        for w, d in result.diagonal.items():
            lines.append(f"d²L/d{w}² = ")
            lines.append(DASH + "  (no gradient reaches it)" if d is None else format_tensor(d), style="green")
            lines.append("\n")
        lines.rstrip()
        return lines
    title = Text(f"Second derivatives (cuts respected{where}): row i, column j = d/dj of dL/di", style="bold")
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False)
    table.add_column("")
    for w in result.wrt:
        table.add_column(w, justify="right")
    for w, row in zip(result.wrt, result.matrix):
        table.add_row(Text(w, style="bold"), *(DASH if v is None else format_number(v) for v in row))
    return Group(title, table)

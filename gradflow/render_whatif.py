"""What-if and compare results -> rich tables (never JSON; that goes out through dumps)."""
from __future__ import annotations

from rich import box
from rich.table import Table
from rich.text import Text

from .render import DASH
from .render_flows import compact
from .values import format_number
from .whatif import Scenario, WhatIf

NO_GRAD_TEXT = "no gradient"


def signed(t) -> str:
    """A change: +20, -70, 0 (tensors compactly)."""
    if t is None:
        return DASH
    if t.dim() == 0:
        v = t.item()
        return format_number(v) if v <= 0 else "+" + format_number(v)
    return compact(t)


def grad_cell(grad, error=None) -> Text:
    if error is not None and error.kind == "no_gradient":
        return Text(NO_GRAD_TEXT, style="yellow")
    if error is not None:
        return Text("error", style="bold red")
    return Text(compact(grad) if grad is not None else "None", style="" if grad is not None else "yellow")


def new_table(title: str) -> Table:
    return Table(title=Text(title), title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False)


def _whatif_columns(table: Table, wrt: list[str], notes: bool):
    table.add_column("node", overflow="fold", min_width=8)
    table.add_column("action", no_wrap=True)
    for leaf in wrt:
        table.add_column(f"{leaf}.grad", justify="right", overflow="fold")
        table.add_column("change", justify="right", overflow="fold")
    if notes:
        table.add_column("note", overflow="fold")


def _row(s: Scenario, wrt: list[str], notes: bool) -> list:
    cells: list = [Text(s.node), s.action]
    for leaf in wrt:
        changed = s.change.get(leaf) is not None and bool((s.change[leaf] != 0).any())
        cells += [grad_cell(s.grads.get(leaf), s.error),
                  Text(signed(s.change.get(leaf)), style="bold" if changed else "dim")]
    if notes:
        cells.append(Text(s.error.message if s.error is not None and not s.no_gradient else ""))
    return cells


def whatif_table(result: WhatIf) -> Table:
    cur = result.current
    wrt = cur.wrt
    notes = any(s.error is not None and not s.no_gradient for s in result.scenarios)
    table = new_table(f"What if … (L = {cur.output.name})")
    _whatif_columns(table, wrt, notes)
    first: list = [Text("(as written)", style="bold"), DASH]
    for leaf in wrt:
        first += [grad_cell(cur.grads.get(leaf), cur.error), ""]
    table.add_row(*first, *([""] if notes else []))
    for s in result.scenarios:
        table.add_row(*_row(s, wrt, notes))
    return table

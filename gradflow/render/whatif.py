"""What-if and compare results -> rich tables (never JSON; that goes out through dumps)."""
from __future__ import annotations

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from gradflow.render.flows import compact
from gradflow.studies.rows import Comparison, Row
from gradflow.studies.whatif import Scenario, WhatIf
from gradflow.values.text import DASH, format_number

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


def _compare_columns(table: Table, result: Comparison):
    table.add_column("mechanism" if result.modes else "expression", overflow="fold", min_width=10)
    if result.modes:
        table.add_column("program", overflow="fold", min_width=20)
    table.add_column("L", justify="right")
    for leaf in result.leaves:
        table.add_column(f"{leaf}.grad", justify="right", overflow="fold")
    if result.modes:
        table.add_column("inside the cut", overflow="fold")


def _inner_cell(row: Row) -> Text:
    if not row.inner:
        return Text(DASH, style="dim")
    return Text(", ".join(f"{k} {'✓' if v else '✗'}" for k, v in row.inner.items()))


def _compare_row(row: Row, result: Comparison) -> list:
    cells: list = [Text(row.label, style="bold" if result.modes else "")]
    if result.modes:
        cells.append(Text(row.program))
    cells.append(Text(compact(row.output) if row.output is not None else ("n/a" if row.skipped else DASH)))
    for leaf in result.leaves:
        if row.skipped:
            cells.append(Text("n/a", style="dim"))
            continue
        cells.append(grad_cell(row.grads.get(leaf), row.error) if leaf in row.grads or row.error
                     else Text("not used", style="dim"))
    if result.modes:
        cells.append(_inner_cell(row))
    return cells


def compare_notes(result: Comparison) -> Text:
    """Below the table: each row's explanation, and the error of each row that failed."""
    out = Text("✓/✗: the node inside the cut requires grad / does not\n" if result.modes else "", style="dim")
    for row in result.rows:
        label = row.label
        if row.error is not None:
            out.append(f"✗ {label}: {row.error.message}\n", style="red")
            if row.note and result.modes:
                out.append(f"  why: {row.note}\n", style="dim")
        elif row.note:
            out.append(f"• {label}: {row.note}\n", style="dim")
    out.rstrip()
    return out


def compare_table(result: Comparison) -> Table:
    title = "Cut mechanisms side by side" if result.modes else "Side by side"
    table = new_table(title)
    _compare_columns(table, result)
    for row in result.rows:
        table.add_row(*_compare_row(row, result))
    return table


def compare_view(result: Comparison) -> Group:
    """The table, and its notes when there are any."""
    notes = compare_notes(result)
    return Group(compare_table(result), *([notes] if notes.plain else []))

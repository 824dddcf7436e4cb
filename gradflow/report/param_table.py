"""InspectReport -> a rich table (parameters folded by module) or a module tree.

Pictures in dot / mermaid text live in report/module_picture.py. Never prints JSON.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from rich import box
from rich.console import Console, Group
from rich.padding import Padding
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from gradflow.display import fit_name, visible
from gradflow.report.inspect_report import InspectReport, ParamReport
from gradflow.values.text import format_number

DASH = "—"
STATUS = {  # marker, style, legend
    "live": ("●", "green", "gets gradient"),
    "zero": ("0", "yellow", "gradient is exactly zero (not None)"),
    "cut": ("✂", "red", "cut by detach/no_grad/inference_mode"),
    "unused": ("◌", "yellow", "not used / result never reaches the loss"),
    "unreached": ("◌", "yellow", "reaches the loss, got nothing"),
    "frozen": ("○", "dim", "requires_grad=False"),
    "untraced": ("?", "magenta", "could not be traced (gradient from a plain backward)"),
}


@dataclass
class Row:
    """One table row: a parameter, or several under one module with the same status and reason."""

    key: str
    params: list[ParamReport] = field(default_factory=list)

    @property
    def first(self) -> ParamReport:
        return self.params[0]

    @property
    def label(self) -> str:
        if len(self.params) == 1:
            p = self.first
            return visible(p.name + "".join(f" = {a}" for a in p.aliases))  # names from user code
        return visible(f"{self.key}.*")

    @property
    def grad_norm(self) -> float | None:
        norms = [p.grad_norm for p in self.params if p.grad_norm is not None]
        return math.sqrt(sum(n * n for n in norms)) if norms else None


def module_of(name: str, depth: int) -> str:
    """`encoder.layer3.attn.q.weight` -> `encoder.layer3` at depth 2 ('' for a top-level tensor)."""
    path = name.rsplit(".", 1)[0] if "." in name else ""
    return ".".join(path.split(".")[:depth]) if path else ""


def rows(report: InspectReport, depth: int = 2, expand: bool = False, only_problems: bool = False) -> list[Row]:
    return _fold([p for p in report.params if p.problem or not only_problems], depth, expand)


def _fold(params: list[ParamReport], depth: int, expand: bool) -> list[Row]:
    """Parameters folded under their module at `depth`, in order of first appearance. A module whose parameters
    differ in status or reason is folded one level deeper (down to one row per parameter): one name never
    stands for rows of different status."""
    groups: dict[tuple[bool, str], list[ParamReport]] = {}
    for p in params:
        key = module_of(p.name, depth)
        single = expand or not key or len(p.routes) > 1
        groups.setdefault((single, p.name if single else key), []).append(p)
    out: list[Row] = []
    for (single, key), members in groups.items():
        if single or len({(p.status, p.why) for p in members}) == 1:
            out.append(Row(key, members))
        elif all(module_of(p.name, depth + 1) == key for p in members):  # no deeper module: one row each
            out.extend(Row(p.name, [p]) for p in members)
        else:
            out.extend(_fold(members, depth + 1, expand))
    return out


def _shape(row: Row) -> str:
    if len(row.params) == 1:
        return "×".join(map(str, row.first.shape)) or "scalar"
    return f"{len(row.params)} tensors"


def _why(row: Row) -> Text:
    p = row.first
    parts = [p.why] if p.why else []
    if len(p.routes) > 1:
        routes = [f"{r.module or f'{r.op} @ {r.line}'} {_pct(r.share)}" for r in p.routes]
        parts.append(f"{len(p.routes)} uses: " + ", ".join(routes))
    return Text(visible("; ".join(parts)))


def _pct(share: float | None) -> str:
    return DASH if share is None else f"{100 * share:.0f}%"


def param_table(report: InspectReport, depth: int = 2, expand: bool = False,
                only_problems: bool = False, width: int | None = None) -> Table:
    """The table. In `width` columns, a table whose names and reasons do not fit side by side puts each reason
    on its own line under its row, and names that still do not fit lose their front (display.fit_name): a
    name never breaks mid-word."""
    title = Text(f"loss = {format_number(float(report.loss.detach()))}  ·  " + summary(report.params)
                 + optimizer_summary(report))
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False)
    shown = rows(report, depth, expand, only_problems)
    cells = [(_shape(row), f"{sum(p.numel for p in row.params):,}", row.grad_norm) for row in shown]
    norms = ["None" if norm is None else format_number(norm) for _, _, norm in cells]
    fixed = sum(max(len(head), *(len(c) for c in column)) for head, column in (
        ("shape", [c[0] for c in cells]), ("numel", [c[1] for c in cells]), ("grad norm", norms)))
    whys = [_why(row) for row in shown]
    longest = max((len(row.label) for row in shown), default=0)
    why = max(WHY_MIN, min(WHY_WIDTH, max(map(len, whys), default=0)))
    beside = width is None or _EDGES + 2 + longest + fixed + why + _GAP * 4 <= width
    names = 10 ** 6 if width is None else width - _EDGES - 2 - fixed - _GAP * 3 - (why + _GAP if beside else 0)
    table.add_column("parameter", no_wrap=True, min_width=14, max_width=None if beside else max(NAME_MIN, names) + 2)
    table.add_column("shape", no_wrap=True)
    table.add_column("numel", justify="right", no_wrap=True)
    table.add_column("grad norm", justify="right", no_wrap=True)
    if beside:
        table.add_column("why / routes", overflow="fold", min_width=WHY_MIN)
    for row, (shape, numel, norm), norm_text, reason in zip(shown, cells, norms, whys):
        mark, style = STATUS[row.first.status][:2]
        table.add_row(Text.assemble((mark + " ", style), fit_name(row.label, max(NAME_MIN, names))), shape, numel,
                      Text("None", style="yellow") if norm is None else norm_text, *([reason] if beside else []))
        if reason and not beside:  # under its row, wrapped at spaces across the name's column
            table.add_row(Padding(Text.assemble(reason, style="dim", no_wrap=False, overflow="fold"), (0, 0, 0, 2)))
    return table


WHY_WIDTH = 30  # a reason beside its row needs this much (it folds beyond); else it goes under the row
WHY_MIN = 20  # the reasons column is never narrower
NAME_MIN = 16  # names are never shortened below this
_EDGES, _GAP = 2, 3  # the table's blank first and last columns; between two columns, padding and the rule


def summary(params: list[ParamReport], sep: str = " · ") -> str:
    """`2 live · 2 cut`: tensors per status, in the legend's order."""
    counts = Counter(p.status for p in params)
    return sep.join(f"{counts[s]} {s}" for s in STATUS if counts[s]) or "no parameters"


def optimizer_summary(report: InspectReport) -> str:
    """`  ·  optimizer: 2 untrained · 2 orphan` when an optimizer was given (report/optimizer_coverage.py)."""
    opt = report.optimizer
    if opt is None:
        return ""
    found = [f"{len(opt[k])} {k}" for k in ("untrained", "orphan") if opt[k]]
    return "  ·  optimizer: " + (" · ".join(found) if found else "covers every parameter that gets gradient")


def legend(report: InspectReport) -> Text:
    seen = {p.status for p in report.params}
    return Text("  ".join(f"{STATUS[s][0]} {_legend_text(report, s)}" for s in STATUS if s in seen), style="dim")


CHECKPOINT_LEGEND = "a reentrant checkpoint whose inputs do not require grad"


def _legend_text(report: InspectReport, status: str) -> str:
    """The status's words; a cut by a reentrant checkpoint (no detach, no_grad or inference_mode of the user's)
    is named as such."""
    if status != "cut":
        return STATUS[status][2]
    kinds = {c.kind for p in report.params if p.status == "cut" for c in p.cuts}
    if "checkpoint" not in kinds:
        return STATUS["cut"][2]
    return f"cut by {CHECKPOINT_LEGEND}" if kinds == {"checkpoint"} else f"{STATUS['cut'][2]} or {CHECKPOINT_LEGEND}"


def print_report(report: InspectReport, out: Console, err: Console, depth: int = 2, expand: bool = False,
                 only_problems: bool = False):
    if only_problems and not report.problems:
        out.print(Text(f"loss = {format_number(float(report.loss.detach()))}  ·  every parameter gets a "
                       f"non-zero gradient ({len(report.params)} tensors)", style="green"))
    else:
        out.print(Group(param_table(report, depth, expand, only_problems, out.width), legend(report)))
    for w in report.warnings:
        err.print(Text(f"warning: {w}", style="yellow"))


def module_tree(report: InspectReport) -> Tree:
    """The module hierarchy with every parameter's status (`--graph tree`)."""
    root = Tree(Text(f"loss = {format_number(float(report.loss.detach()))}"))
    branches: dict[str, Tree] = {"": root}
    for p in report.params:
        parts = p.name.split(".")
        for i in range(1, len(parts)):
            path = ".".join(parts[:i])
            if path not in branches:
                branches[path] = branches[".".join(parts[:i - 1])].add(Text(visible(parts[i - 1]), style="bold"))
        mark, style, _ = STATUS[p.status]
        leaf = Text.assemble((mark + " ", style), visible(parts[-1]))
        if p.why:
            leaf.append(f"  {visible(p.why)}", style="dim")
        branches[".".join(parts[:-1])].add(leaf)
    return root

"""InspectReport -> a rich table (parameters folded by module) or a module tree.

Pictures in dot / mermaid text live in report/module_picture.py. Never prints JSON.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from rich import box
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from gradflow.display import visible
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
    out: dict[tuple, Row] = {}
    for p in report.params:
        if only_problems and not p.problem:
            continue
        key = module_of(p.name, depth)
        single = expand or not key or len(p.routes) > 1
        gk = (p.name,) if single else (key, p.status, p.why)
        out.setdefault(gk, Row(p.name if single else key)).params.append(p)
    return list(out.values())


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
                only_problems: bool = False) -> Table:
    title = Text(f"loss = {format_number(float(report.loss.detach()))}  ·  " + summary(report.params)
                 + optimizer_summary(report))
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False)
    table.add_column("parameter", overflow="fold", min_width=14)
    table.add_column("shape", no_wrap=True)
    table.add_column("numel", justify="right", no_wrap=True)
    table.add_column("grad norm", justify="right", no_wrap=True)
    table.add_column("why / routes", overflow="fold", min_width=20)
    for row in rows(report, depth, expand, only_problems):
        mark, style, _ = STATUS[row.first.status]
        norm = row.grad_norm
        table.add_row(Text.assemble((mark + " ", style), row.label), _shape(row),
                      f"{sum(p.numel for p in row.params):,}",
                      Text("None", style="yellow") if norm is None else format_number(norm), _why(row))
    return table


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
        out.print(Group(param_table(report, depth, expand, only_problems), legend(report)))
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

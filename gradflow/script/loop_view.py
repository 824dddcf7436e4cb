"""How `gradflow script` shows a loop: a line per backward() call, the changes, the optimizer's findings and the
summary at the end (rich Text for the terminal, plain dicts for --json --brief)."""
from __future__ import annotations

from rich.console import Group
from rich.text import Text

from gradflow.display import fit_name
from gradflow.script.loop import LoopWatch, Step
from gradflow.script.optimizer import Finding, OptimizerWatch
from gradflow.values.jsonable import fresh

TREND_ROWS = 12  # parameters charted in the summary; the others are counted


def _norm(pick: tuple[str, float] | None) -> str:
    return "-" if pick is None else f"{pick[1]:.2e} {pick[0]}"


class StepLine:
    """`   12  loss 0.4231  grad 4/4  max 1.21e-01 w2  min 3.40e-03 w1`, laid out for the console's width when
    printed: where the names make the line too long (peft's), the numbers stay on it and each name gets a line
    of its own below, losing its front only if it must (display.fit_name), never broken mid-word."""

    def __init__(self, step: Step):
        self.step = step

    def __rich_console__(self, console, options):
        s = self.step
        loss = "-" if s.loss is None else f"{s.loss:.4g}"
        head = Text.assemble((f"{s.index:>6}", "bold"), f"  {s.loss_name or 'loss'} {loss}",
                             f"  grad {s.got}/{s.params}")
        whole = Text.assemble(head, ("  max ", "dim"), _norm(s.largest), ("  min ", "dim"), _norm(s.smallest))
        if whole.cell_len <= options.max_width:
            yield whole
            return
        picks = [("max", s.largest), ("min", s.smallest)]
        yield Text.assemble(head, *[part for word, pick in picks for part in
                                    ((f"  {word} ", "dim"), "-" if pick is None else f"{pick[1]:.2e}")])
        for word, pick in picks:
            if pick is not None:
                yield Text.assemble((f"        {word} ", "dim"), fit_name(pick[0], options.max_width - 12))


def changes_head(step: Step) -> Text:
    """What changed at this call, said before its full table."""
    out = Text(f"changed at backward {step.index}:\n", style="bold yellow")
    for c in step.changes:
        out.append(f"  {c}\n", style="yellow")
    out.rstrip()
    return out


def finding_lines(findings: list[Finding]) -> Text:
    out = Text()
    for f in findings:
        out.append("⚠ optimizer: ", style="bold yellow")
        out.append(f"{f.text} (seen at backward {f.call})\n")
    out.rstrip()
    return out


def summary(loop: LoopWatch, optimizers: OptimizerWatch, lines_shown: int, full_shown: int) -> Group:
    """The steps, the status changes with their steps, each parameter's gradient-norm trend, the findings."""
    parts: list = [Text(f"summary: {loop.calls:,} backward() calls, {full_shown} shown in full, {lines_shown} as "
                        "lines", style="bold")]
    for site, (calls, code) in loop.lines.items():
        parts.append(Text(f"  {site}  {code}  ×{calls:,}", style="dim"))
    parts.append(Text("changes:" if loop.changes else "changes: none", style="bold"))
    for c in loop.changes:
        parts.append(Text(f"  backward {c.step}: {c.text}"))
    if loop.more_changes:
        parts.append(Text(f"  … and {loop.more_changes:,} more", style="dim"))
    parts += _trends(loop)
    if optimizers.seen:
        made = ", ".join(f"{s.label}{' at ' + s.line if s.line else ''}: {s.steps:,} steps"
                         for s in optimizers.seen.values())
        parts.append(Text(f"optimizers: {made}", style="bold"))
        if not optimizers.findings:
            parts.append(Text("  no finding: every parameter with gradient is held, and none moved without one"))
        for f in optimizers.findings:
            parts.append(Text(f"  ⚠ {f.text} (backward {f.call})", style="yellow"))
    return Group(*parts)


def _trends(loop: LoopWatch) -> list:
    trends = [(name, t) for name, t in loop.trends.items() if t.buckets]
    if not trends:
        return []
    out: list = [Text("gradient norm per parameter (log scale, each row its own range; first → last):", style="bold"),
                 _TrendRows(trends[:TREND_ROWS])]
    if len(trends) > TREND_ROWS:
        out.append(Text(f"  … and {len(trends) - TREND_ROWS} more parameters", style="dim"))
    return out


class _TrendRows:
    """A row per parameter, laid out for the console's width when printed: a name that does not fit loses its
    front (display.fit_name); where that leaves two rows with one name (peft's `…lora_A.default.weight` of two
    layers), each name gets a line of its own above its chart."""

    def __init__(self, trends: list):
        self.trends = trends

    def __rich_console__(self, console, options):
        width = options.max_width
        rest = [Text.assemble((t.chart(), "cyan"), f"  {t.first:.2e} → {t.last:.2e}") for _, t in self.trends]
        room = width - 4 - max(len(r) for r in rest)
        shown = [fit_name(name, max(room, 8)) for name, _ in self.trends]
        if len(set(shown)) == len(shown) and room >= 8:
            pad = max(map(len, shown))
            for name, r in zip(shown, rest):
                yield Text.assemble(f"  {name:<{pad}}  ", r)
            return
        for (name, _), r in zip(self.trends, rest):
            yield Text(f"  {fit_name(name, width - 2)}")
            yield Text.assemble("      ", r)


def summary_record(loop: LoopWatch, optimizers: OptimizerWatch) -> dict:
    """--json --brief's last record: the loop's summary."""
    return {"summary": {
        "calls": loop.calls,
        "lines": [{"line": site, "code": code, "calls": made} for site, (made, code) in loop.lines.items()],
        "changes": [{"call": c.step, "change": c.text} for c in loop.changes], "more_changes": loop.more_changes,
        "trends": {name: {"first": fresh(t.first), "last": fresh(t.last), "chart": t.chart()}
                   for name, t in loop.trends.items()},
        "optimizers": [{"optimizer": s.label, "line": s.line, "steps": s.steps} for s in optimizers.seen.values()],
        "findings": [f.to_dict() for f in optimizers.findings]}}

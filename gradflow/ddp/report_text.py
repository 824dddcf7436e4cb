"""`gradflow ddp`'s report for people (rich), printed from the report's JSON-able dict: the launcher that prints
it never imports torch."""
from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from gradflow.ddp.merge import fold, fold_names

MARKS = {"unused": "◌", "unreached": "◌", "cut": "✂", "untraced": "?"}


def _say(console: Console, text: str, style: str | None = None, indent: int = 0) -> None:
    console.print(Text(" " * indent + text, style=style or ""), soft_wrap=False)


def _where(p: dict) -> str:
    line = p.get("line")
    if not line:
        return ""
    return f"defined at {line}" if p.get("line_is") == "definition" else line


def print_ranks(report: dict, console: Console) -> None:
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for col, justify in (("rank", "right"), ("parameter", "left"), ("numel", "right"), ("why no gradient", "left")):
        table.add_column(col, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for r in report["ranks"]:
        rows = fold(r["no_gradient"])
        if not rows:
            table.add_row(str(r["rank"]), Text("● all"), "", Text("every parameter gets a gradient"))
        for row in rows:
            why, where = row["reason"] or row["status"], _where(row)
            if where and row.get("line") not in why:
                why += f" ({where})"
            table.add_row(str(r["rank"]), Text(f"{MARKS.get(row['status'], '◌')} {row['name']}"),
                          f"{row['numel']:,}", Text(why))
    console.print(table)


def print_divergent(report: dict, console: Console) -> None:
    for g in report["divergent"]:
        names = ", ".join(fold_names(g["params"]))
        on, off = (", ".join(str(r) for r in g[k]) for k in ("gradient_on", "none_on"))
        _say(console, f"divergent: {names} get a gradient on rank {on} and none on rank {off}", "bold yellow")
        if g["branch"]:
            _say(console, f"the branch that differs: {g['branch']['line']}  {g['branch']['code']}", indent=2)
        else:
            _say(console, "the branch that differs was not found in your source", indent=2)


def _rows(console: Console, rows: list[tuple[str, str]]) -> None:
    """Two columns, the second wrapped under itself (a hanging indent)."""
    table = Table(box=None, show_header=False, pad_edge=False, show_edge=False)
    table.add_column(no_wrap=True)
    table.add_column(overflow="fold")
    for left, right in rows:
        table.add_row(Text("  " + left), Text(right))
    console.print(table)


def print_would(report: dict, console: Console) -> None:
    if report.get("fsdp"):
        _say(console, "what FSDP does with this step", "bold")
        _rows(console, [tuple(row) for row in report["fsdp"]["would"]])
        return
    _say(console, "what DDP does with this step", "bold")
    rows = []
    forced = report.get("find_unused_forced_by")
    if forced:
        rows.append(("your find_unused=True", "needed only because of " + ", ".join(fold_names(forced))))
    elif forced is not None:
        rows.append(("your find_unused=True", "not needed: every parameter gets a gradient on every rank; set it "
                                              "to False (DDP then skips a search of the autograd graph every "
                                              "iteration)"))
    _rows(console, rows + list(report["ddp_would"].items()))


def _fsdp_rank(r: dict) -> str:
    if r["ok"]:
        none = fold_names(r["grad_none"])
        return "ran 1 step; " + (f"grad None after it: {', '.join(none)}" if none else
                                 "every trainable parameter got a gradient")
    if r["outcome"] == "peer lost":  # gloo's words for it vary with the moment (reset, closed, broken pipe)
        return f"lost the other ranks in {r['stage']}: a peer closed its connection"
    said = {"hung": "hung (gradflow stopped it)", "aborted": f"aborted by gloo ({r['signal']})",
            "timed out": "timed out"}.get(r["outcome"], "raised")
    return f"{said} in {r['stage']}: {r['said']}"


def print_torch(report: dict, console: Console) -> None:
    if report.get("fsdp"):
        if report["fsdp"]["step"]:
            _say(console, "FSDP's own step (your fully_shard model, 1 step, run for real under --timeout)", "bold")
            _rows(console, [(f"rank {r['rank']}", _fsdp_rank(r)) for r in report["fsdp"]["step"]])
        return
    said = report.get("torch")
    if not said:
        return
    _say(console, "torch's own DDP step (find_unused_parameters=False, 2 iterations, run for real)", "bold")
    rows = []
    for r in said["ranks"]:
        if r["ok"]:
            what = f"ran {r['iterations']} iterations without an error"
        elif r["blocked"]:
            what = (f"blocked in {r['stage']}, waiting for an all-reduce the other ranks never started (torch "
                    "waits until the timeout; gradflow released it)")
        else:
            what = f"raised in {r['stage']}: {r['said']}"
            if r["unused"]:
                what += f" (the parameter indices it lists: {', '.join(r['unused'])})"
        rows.append((f"rank {r['rank']}", what))
    _rows(console, rows)


def print_fix(report: dict, console: Console) -> None:
    if not report["fix"]:
        return
    _say(console, "the fix" if report.get("fsdp") else "the fix that keeps find_unused_parameters=False", "bold")
    _rows(console, [(f"{i}.", line) for i, line in enumerate(report["fix"], 1)])


def _setup(report: dict) -> str:
    ddp = report["ddp"]
    if ddp.get("fsdp"):
        n = len(ddp["units"])
        return f"your FSDP2 model, {n} fully_shard unit{'s' * (n != 1)}"
    how = "DDP by gradflow" if ddp["wrapped_by"] == "gradflow" else "your DDP"
    return f"{how}, find_unused_parameters={ddp['find_unused_parameters']}" + \
        (", static_graph=True" if ddp["static_graph"] else "")


def print_report(report: dict, out: Console, err: Console) -> None:
    ranks = f"{report['world_size']} rank{'s' * (report['world_size'] != 1)}"
    _say(out, f"{report['target']}  ·  {ranks}  ·  {_setup(report)}")
    print_ranks(report, out)
    out.print()
    for part in (print_divergent, print_would, print_torch, print_fix):
        before = len(report["divergent"]) if part is print_divergent else 1
        if before:
            part(report, out)
            out.print()
    for r in report["ranks"]:
        for w in r["warnings"]:
            err.print(Text(f"warning: rank {r['rank']}: {w}"))

"""The classes a run can fail on: `inspect --fail-on`, `gradflow.testing.assert_gradients_flow` (and `ddp`).

    failures(report, ["cut", "unused"], allow=["aux_head.*"]) -> [Failure(name, kind, reason, line), ...]

A parameter can fall in several classes (a cut parameter that the optimizer holds is `cut` and `orphan`);
each class it falls in and was asked for is one failure. `allow` holds glob patterns (fnmatch) on the
parameter's names (its aliases count too): a parameter one of them matches never fails.

`report` is an InspectReport or its JSON document (`report.to_dict()`, `inspect --json`): a command that gets
reports from other processes (ddp ranks) can gate on those. Torch-free (the CLI checks --fail-on before
torch is imported).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING

from gradflow.errors import ExitCode, GradflowError, ValueInputError
from gradflow.report.optimizer_coverage import UNTRAINED

if TYPE_CHECKING:
    from gradflow.report.inspect_report import InspectReport, ParamReport

CLASSES = {  # name -> what it means (the order of `--help`, the docs and the summaries)
    "cut": "gets no gradient because a detach / no_grad / inference_mode cut is in the way",
    "partly-cut": "gets gradient, but none along some of its uses: a cut is in the way there",
    "unused": "requires grad, but is not used, or nothing computed from it reaches the loss",
    "unreached": "its result reaches the loss, but backward sent nothing back",
    "frozen": "requires_grad=False",
    "zero": "its gradient is exactly zero (not None)",
    "nonfinite": "its gradient holds nan or inf",
    "untraced": "gradflow could not trace how it gets its gradient",
    "untrained": "gets gradient, but is in no param group of the optimizer: it never trains",
    "orphan": "is in a param group of the optimizer, but gets no gradient",
}
DEFAULT = ("cut", "unused", "unreached", "zero", "nonfinite")  # gradient reaches every trainable parameter
_AT = r" at (\S+:\d+)"  # the first file:line a reason names


@dataclass(frozen=True)
class Failure:
    name: str
    kind: str  # one of CLASSES
    reason: str
    line: str | None  # the file:line the reason names first, if any

    def describe(self) -> str:
        return f"{self.name}: {self.kind}: {self.reason}"

    def to_dict(self) -> dict:
        return {"name": self.name, "class": self.kind, "reason": self.reason, "line": self.line}


class GateError(GradflowError):
    """Some parameter fell in a class the run was asked to fail on (exit 6)."""

    exit_code = ExitCode.GATE


def parse_classes(values, extra: dict[str, str] | None = None) -> tuple[str, ...]:
    """`"cut,unused"` or `["cut", "zero,frozen"]` -> ('cut', 'unused', ...); 'default' and 'all' are allowed.

    `extra`: a command's own classes (name -> meaning, as CLASSES), accepted too and part of 'all' (ddp's
    `divergent`); `failures` never reports them: the command does."""
    known = {**CLASSES, **(extra or {})}
    items = [values] if isinstance(values, str) else list(values)
    out: list[str] = []
    for item in items:
        for name in (x.strip() for x in item.split(",")):
            expanded = DEFAULT if name == "default" else tuple(known) if name == "all" else (name,)
            for n in expanded:
                if n not in known:
                    raise ValueInputError("usage", f"--fail-on: unknown class '{n}'",
                                          hint="classes: " + ", ".join(known) + " (or default, all)")
                if n not in out:
                    out.append(n)
    if not out:
        raise ValueInputError("usage", "--fail-on needs at least one class", hint="e.g. --fail-on cut,unused")
    return tuple(out)


@dataclass(frozen=True)
class Row:
    """What the gate reads of one parameter, from a ParamReport or from its JSON (`to_dict()`)."""

    name: str
    aliases: tuple[str, ...]
    status: str
    requires_grad: bool
    why: str | None  # the reason as shown (partly cut, optimizer notes included)
    got: bool  # grad is not None
    nonfinite: bool
    partly_cut: bool
    in_optimizer: bool | None  # None: no optimizer was given
    first_use: str  # "; first used by `op` at file:line", or ""


def rows_of(report) -> list[Row]:
    """An InspectReport, or an inspect JSON document (dict) such as a `ddp` rank sends back."""
    if isinstance(report, dict):
        return [_row_of_dict(p) for p in report["params"]]
    return [_row_of_param(p) for p in report.params]


def _row_of_param(p: ParamReport) -> Row:
    """Its JSON's row, with nonfinite read from the elements (a huge but finite gradient can overflow its norm)."""
    return replace(_row_of_dict(p.to_dict()), nonfinite=p.grad is not None and _nonfinite(p))


def _row_of_dict(p: dict) -> Row:
    norm, routes = p.get("grad_norm"), p.get("routes") or []
    nonfinite = isinstance(norm, str) or (isinstance(norm, float) and not math.isfinite(norm))  # "nan", "inf"
    use = f"; first used by `{routes[0]['op']}` at {routes[0]['line']}" if routes and routes[0].get("line") else ""
    in_opt = None if "optimizer_group" not in p else p["optimizer_group"] is not None
    return Row(p["name"], tuple(p.get("aliases", ())), p["status"], p["requires_grad"], p.get("reason"),
               not p["grad_is_none"], not p["grad_is_none"] and nonfinite,
               bool(p.get("cuts")) and p["status"] != "cut", in_opt, use)


def _nonfinite(p: ParamReport) -> bool:
    if p.grad_norm is not None and math.isfinite(p.grad_norm):
        return False  # a finite norm: every element is finite
    return not bool(p.grad.isfinite().all())


def classes_of(p: Row | ParamReport) -> list[str]:
    """The classes this parameter falls in, in CLASSES order."""
    r = p if isinstance(p, Row) else _row_of_param(p)
    found = {r.status} & {"cut", "unused", "unreached", "frozen", "zero", "untraced"}
    if r.partly_cut:
        found.add("partly-cut")
    if r.nonfinite:
        found.add("nonfinite")
    if r.in_optimizer is False and r.got:
        found.add("untrained")
    if r.in_optimizer is True and not r.got and r.requires_grad:
        found.add("orphan")
    return [c for c in CLASSES if c in found]


def allowed(r: Row, allow) -> bool:
    return any(fnmatchcase(n, pat) for pat in allow for n in (r.name, *r.aliases))


def failures(report, fail_on=DEFAULT, allow=()) -> list[Failure]:
    """Every (parameter, class) pair asked for in `fail_on`, except the parameters `allow` matches.

    `report`: an InspectReport, or its JSON document (a dict)."""
    wanted = parse_classes(fail_on)
    out = []
    for r in rows_of(report):
        if allowed(r, allow):
            continue
        for kind in classes_of(r):
            if kind in wanted:
                reason = _reason(r, kind)
                m = re.search(_AT, reason)
                out.append(Failure(r.name, kind, reason, m.group(1) if m else None))
    return out


def _reason(r: Row, kind: str) -> str:
    if kind == "nonfinite":
        return "its gradient holds nan or inf" + r.first_use
    if kind == "untrained":
        return UNTRAINED
    if kind == "zero":
        return (r.why or CLASSES[kind]) + r.first_use
    return r.why or CLASSES[kind]


def unmatched(report, allow) -> list[str]:
    """The --allow patterns that match no parameter (a typo would silently allow nothing)."""
    rows = rows_of(report)
    return [pat for pat in allow if not any(allowed(r, [pat]) for r in rows)]


def gate_document(report: InspectReport, fail_on, allow) -> dict:
    """What the JSON document says about the gate."""
    found = failures(report, fail_on, allow)
    return {"fail_on": list(parse_classes(fail_on)), "allow": list(allow), "passed": not found,
            "failures": [f.to_dict() for f in found], "unmatched_allow": unmatched(report, allow)}


def gate_error(found: list[Failure], fail_on, extra: dict[str, str] | None = None) -> GateError:
    """The summary printed after the report: one line per failure, grouped by class (`extra`: as for
    parse_classes)."""
    names = sorted({f.name for f in found})
    known = {**CLASSES, **(extra or {})}
    counts = ", ".join(f"{k}: {sum(f.kind == k for f in found)}" for k in known if any(f.kind == k for f in found))
    wide = max(len(f.name) for f in found)
    lines = [f"  {f.name:<{wide}}  {f.kind:<9}  {f.reason}" for f in found]
    example = next((n for n in names if "." in n), names[0])
    err = GateError("gate", f"--fail-on {','.join(parse_classes(fail_on, extra))}: {len(names)} parameter"
                    f"{'s' * (len(names) != 1)} failed ({counts})",
                    hint=f"fix them, or allow the intended ones: --allow '{example.rsplit('.', 1)[0]}.*' "
                         f"(a glob on parameter names; repeatable)" if "." in example else
                         f"fix them, or allow the intended ones: --allow '{example}' (repeatable)")
    err.detail = "\n".join(lines)
    return err

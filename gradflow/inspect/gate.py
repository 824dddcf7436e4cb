"""The classes a run can fail on: `inspect --fail-on`, `gradflow.testing.assert_gradients_flow` (and `ddp`).

    failures(report, ["cut", "unused"], allow=["aux_head.*"]) -> [Failure(name, kind, reason, line), ...]

A parameter can fall in several classes (a cut parameter that the optimizer holds is `cut` and `orphan`);
each class it falls in and was asked for is one failure. `allow` holds glob patterns (fnmatch) on the
parameter's names (its aliases count too): a parameter one of them matches never fails.

Torch-free (the CLI checks --fail-on before torch is imported): reports are read through their attributes.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING

from gradflow.errors import ExitCode, GradflowError, ValueInputError
from gradflow.inspect.coverage import ORPHAN, UNTRAINED

if TYPE_CHECKING:
    from gradflow.inspect.report import InspectReport, ParamReport

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


def parse_classes(values) -> tuple[str, ...]:
    """`"cut,unused"` or `["cut", "zero,frozen"]` -> ('cut', 'unused', ...); 'default' and 'all' are allowed."""
    items = [values] if isinstance(values, str) else list(values)
    out: list[str] = []
    for item in items:
        for name in (x.strip() for x in item.split(",")):
            expanded = DEFAULT if name == "default" else tuple(CLASSES) if name == "all" else (name,)
            for n in expanded:
                if n not in CLASSES:
                    raise ValueInputError("usage", f"--fail-on: unknown class '{n}'",
                                          hint="classes: " + ", ".join(CLASSES) + " (or default, all)")
                if n not in out:
                    out.append(n)
    if not out:
        raise ValueInputError("usage", "--fail-on needs at least one class", hint="e.g. --fail-on cut,unused")
    return tuple(out)


def classes_of(p: ParamReport) -> list[str]:
    """The classes this parameter falls in, in CLASSES order."""
    got = p.grad is not None
    found = {p.status} & {"cut", "unused", "unreached", "frozen", "zero", "untraced"}
    if p.cuts and p.status != "cut":
        found.add("partly-cut")
    if got and _nonfinite(p):
        found.add("nonfinite")
    in_opt = getattr(p, "in_optimizer", None)
    if in_opt is False and got:
        found.add("untrained")
    if in_opt is True and not got and p.requires_grad:
        found.add("orphan")
    return [c for c in CLASSES if c in found]


def _nonfinite(p: ParamReport) -> bool:
    if p.grad_norm is not None and math.isfinite(p.grad_norm):
        return False  # a finite norm: every element is finite
    return not bool(p.grad.isfinite().all())  # (a huge but finite gradient can overflow its norm)


def allowed(p: ParamReport, allow) -> bool:
    return any(fnmatchcase(n, pat) for pat in allow for n in (p.name, *p.aliases))


def failures(report: InspectReport, fail_on=DEFAULT, allow=()) -> list[Failure]:
    """Every (parameter, class) pair asked for in `fail_on`, except the parameters `allow` matches."""
    wanted = parse_classes(fail_on)
    out = []
    for p in report.params:
        if allowed(p, allow):
            continue
        for kind in classes_of(p):
            if kind in wanted:
                reason = _reason(p, kind)
                m = re.search(_AT, reason)
                out.append(Failure(p.name, kind, reason, m.group(1) if m else None))
    return out


def _reason(p: ParamReport, kind: str) -> str:
    if kind == "nonfinite":
        return f"its gradient holds nan or inf (norm {p.grad_norm})" + _first_use(p)
    if kind == "untrained":
        return UNTRAINED
    if kind == "orphan":
        return ORPHAN.format(group=p.optimizer_group) + (f" ({p.reason})" if p.reason else "")
    if kind == "zero":
        return (p.reason or CLASSES[kind]) + _first_use(p)
    return p.why or CLASSES[kind]


def _first_use(p: ParamReport) -> str:
    return f"; first used by `{p.routes[0].op}` at {p.routes[0].line}" if p.routes and p.routes[0].line else ""


def unmatched(report: InspectReport, allow) -> list[str]:
    """The --allow patterns that match no parameter (a typo would silently allow nothing)."""
    return [pat for pat in allow if not any(fnmatchcase(n, pat) for p in report.params for n in (p.name, *p.aliases))]


def gate_document(report: InspectReport, fail_on, allow) -> dict:
    """What the JSON document says about the gate."""
    found = failures(report, fail_on, allow)
    return {"fail_on": list(parse_classes(fail_on)), "allow": list(allow), "passed": not found,
            "failures": [f.to_dict() for f in found], "unmatched_allow": unmatched(report, allow)}


def gate_error(found: list[Failure], fail_on) -> GateError:
    """The summary printed after the report: one line per failure, grouped by class."""
    names = sorted({f.name for f in found})
    counts = ", ".join(f"{k}: {sum(f.kind == k for f in found)}" for k in CLASSES if any(f.kind == k for f in found))
    wide = max(len(f.name) for f in found)
    lines = [f"  {f.name:<{wide}}  {f.kind:<9}  {f.reason}" for f in found]
    example = next((n for n in names if "." in n), names[0])
    err = GateError("gate", f"--fail-on {','.join(parse_classes(fail_on))}: {len(names)} parameter"
                    f"{'s' * (len(names) != 1)} failed ({counts})",
                    hint=f"fix them, or allow the intended ones: --allow '{example.rsplit('.', 1)[0]}.*' "
                         f"(a glob on parameter names; repeatable)" if "." in example else
                         f"fix them, or allow the intended ones: --allow '{example}' (repeatable)")
    err.detail = "\n".join(lines)
    return err

"""The per-parameter report of a traced forward: grad, routes (per use) and reasons; its types, their JSON and
their lookups. report/build.py builds it."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gradflow.analysis.explanation import SCHEMA_VERSION
from gradflow.display import Drawn
from gradflow.errors import GradflowError
from gradflow.report.optimizer_coverage import note as optimizer_note
from gradflow.report.reasons import Cut, FlowGraph, describe_cuts
from gradflow.values.jsonable import dumps, one_document, to_jsonable

ZERO_REASON = ("gradient is exactly zero (not None): it flowed back, but every element is 0 "
               "(multiplied by 0? a dead ReLU? a mask?)")
STATUSES = ("live", "zero", "cut", "unused", "unreached", "frozen")  # and "untraced", counted only when present


@dataclass(slots=True)
class Route:
    """One use of a parameter by an op, and the gradient that came back along it."""

    op: str
    line: str | None
    module: str | None
    flow: Any = None  # tensor | None
    norm: float | None = None
    share: float | None = None  # <flow, grad> / |grad|^2: the shares of all uses sum to 1
    cut: str | None = None

    def to_dict(self) -> dict:
        return {"op": self.op, "line": self.line, "module": self.module, "norm": _num(self.norm),
                "share": _num(self.share), "cut": self.cut}


@dataclass(slots=True)
class ParamReport:
    name: str
    shape: list[int]
    numel: int
    requires_grad: bool
    status: str  # one of STATUSES, or "untraced"
    reason: str | None = None
    grad: Any = None  # tensor | None (not in JSON: use grad_norm)
    grad_norm: float | None = None
    aliases: list[str] = field(default_factory=list)
    routes: list[Route] = field(default_factory=list)
    cuts: list[Cut] = field(default_factory=list)
    serial: int | None = None  # the trace's id for this tensor (not in JSON)
    in_optimizer: bool | None = None  # None: no optimizer was given (report/optimizer_coverage.py)
    optimizer_group: int | None = None
    library_lines: bool = False  # the reason also names the library line of each cut (not in JSON)

    @property
    def problem(self) -> bool:
        return self.status != "live" or bool(self.cuts) or optimizer_note(self) is not None

    @property
    def why(self) -> str | None:
        """The reason, or for a parameter that gets gradient on some paths only, where the others are cut."""
        reason = self.reason
        if self.status in ("live", "zero") and self.cuts:
            also = "partly cut: " + describe_cuts(self.cuts, self.library_lines)
            reason = f"{self.reason}; {also}" if self.reason else also
        elif self.status == "cut" and self.library_lines and self.cuts:
            reason = describe_cuts(self.cuts, True)
        opt = optimizer_note(self)
        return reason if opt is None else f"{reason}; {opt}" if reason else opt

    def to_dict(self) -> dict:
        return {"name": self.name, "aliases": self.aliases, "shape": self.shape, "numel": self.numel,
                "requires_grad": self.requires_grad, "status": self.status, "reason": self.why,
                "grad_is_none": self.grad is None, "grad_norm": _num(self.grad_norm),
                "routes": [r.to_dict() for r in self.routes], "cuts": [c.to_dict() for c in self.cuts],
                **({} if self.in_optimizer is None else {"optimizer_group": self.optimizer_group})}


@dataclass(repr=False)  # repr(): the table as text, never the tensors (display.Shown)
class InspectReport(Drawn):
    loss: Any  # tensor
    params: list[ParamReport]
    error: GradflowError | None = None
    graph: FlowGraph | None = None  # for pictures; not in JSON
    module_names: dict[int, str] = field(default_factory=dict)
    use_ops: set[int] = field(default_factory=set)  # indices of ops that used a parameter
    warnings: list[str] = field(default_factory=list)
    optimizer: dict | None = None  # coverage by the optimizer, when one was given (report/optimizer_coverage.py)
    gate: dict | None = None  # the --fail-on verdict, when asked (report/fail_on.py)
    precision: Any = None  # PrecisionReport when the trace saw float16/bfloat16 ops (report/precision.py)

    def show_library_lines(self) -> None:
        """Reasons also name where in library code (transformers, ...) each cut op ran (`--library-lines`)."""
        for p in self.params:
            p.library_lines = True

    def param(self, name: str) -> ParamReport:
        for p in self.params:
            if p.name == name or name in p.aliases:
                return p
        raise KeyError(name)

    @property
    def problems(self) -> list[ParamReport]:
        return [p for p in self.params if p.problem]

    def health(self):
        """Each layer's gradient norm in forward order, vanishing / exploding ones flagged (report/layer_health.py)."""
        from gradflow.report.layer_health import layer_health

        return layer_health(self)

    @one_document
    def to_dict(self) -> dict:
        counts = {s: sum(p.status == s for p in self.params) for s in STATUSES}
        untraced = sum(p.status == "untraced" for p in self.params)
        if untraced:  # only then: the documents of fully traced runs stay as they were
            counts["untraced"] = untraced
        out = {"schema": SCHEMA_VERSION, "loss": to_jsonable(self.loss.detach()),
               "loss_requires_grad": bool(self.loss.requires_grad), "counts": counts,
               "params": [p.to_dict() for p in self.params], "warnings": list(self.warnings),
               "error": None if self.error is None else self.error.to_dict()}
        if self.precision is not None:  # only then: float32 documents stay as they were
            out["precision"] = self.precision.to_dict()
        out.update({k: v for k, v in (("optimizer", self.optimizer), ("gate", self.gate)) if v is not None})
        return out

    def to_json(self, **kw) -> str:
        return dumps(self.to_dict(), **kw)


def _num(x: float | None):
    return None if x is None else to_jsonable(x)

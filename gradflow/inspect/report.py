"""The per-parameter report of a traced forward: grad, routes (per use) and reasons.

`build_report` runs `torch.autograd.grad` (parameters' `.grad` are left untouched),
reads the per-use flows the trace's hooks measured, and explains every parameter
that got nothing: frozen, not used, or cut (naming the op and source line).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from itertools import repeat
from typing import TYPE_CHECKING, Any

import torch

from gradflow.analysis.explanation import SCHEMA_VERSION
from gradflow.errors import GradflowError, NoGradientError
from gradflow.inspect.coverage import cover
from gradflow.inspect.coverage import note as optimizer_note
from gradflow.inspect.naming import resolve_params
from gradflow.inspect.norms import dot, grad_norm, grad_norms
from gradflow.inspect.reasons import Cut, FlowGraph, cut_of, describe_cuts, frozen_reason, why_none
from gradflow.inspect.truth import gradients, hidden_serials, settle, untraced_error
from gradflow.values.jsonable import dumps, one_document, to_jsonable

if TYPE_CHECKING:  # the tracer imports this module: types only, no cycle
    from gradflow.inspect.tracer import Trace, TraceFailure

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
    in_optimizer: bool | None = None  # None: no optimizer was given (inspect/coverage.py)
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


class _LiveOnce(ParamReport):
    """The ParamReport of a parameter that got a gradient along its one uncut use and has no alias (the common one,
    written inline by _reports): the same fields, its shape, numel, aliases, routes and cuts made when first read
    (each then kept, so a list read twice is the same list). A model of many small layers reads none of them to
    explain, and its report does not make and free five objects per parameter (~1 us each, the collector's scan
    included). Equal to, shown, copied and replaced as the ParamReport _param_report + _measure give the parameter
    (tests/inspect_code/test_speed_safety.py)."""

    __slots__ = ("_op", "_line", "_module", "_cut", "_module_name")

    def __init__(self, name: str, grad, norm: float, serial: int, rec, module_name) -> None:
        self.name = name  # (one field a statement: ~45% fewer instructions than tuple assignments)
        self.requires_grad = True
        self.grad = grad
        self.grad_norm = norm
        self.serial = serial
        if norm != 0.0:
            self.status = "live"
            self.reason = None
        else:
            self.status = "zero"
            self.reason = ZERO_REASON
        self.in_optimizer = None
        self.optimizer_group = None
        self.library_lines = False
        self._op = rec.name
        self._line = rec.line
        self._module = rec.module
        self._cut = rec.cut
        self._module_name = module_name

    def __getattr__(self, field: str):  # only while a lazy field's slot is unset
        if field == "shape":
            self.shape = list(self.grad.shape)  # autograd gives the grad the parameter's shape
            return self.shape
        if field == "numel":
            self.numel = self.grad.numel()
            return self.numel
        if field == "routes":
            norm = self.grad_norm
            self.routes = [Route(self._op, self._line, self._module_name(self._module), self.grad, norm,
                                 1.0 if norm is not None and norm > 0 else None, self._cut)]
            return self.routes
        if field == "aliases":
            self.aliases = []
            return self.aliases
        if field == "cuts":
            self.cuts = []
            return self.cuts
        raise AttributeError(f"'ParamReport' object has no attribute {field!r}")

    @property  # type: ignore[misc]
    def __class__(self):  # a ParamReport as the dataclass's __eq__, __repr__ and dataclasses.replace see it
        return ParamReport

    def __reduce__(self):  # copied and pickled as the ParamReport it equals
        return ParamReport, (self.name, self.shape, self.numel, self.requires_grad, self.status, self.reason,
                             self.grad, self.grad_norm, self.aliases, self.routes, self.cuts, self.serial,
                             self.in_optimizer, self.optimizer_group, self.library_lines)



@dataclass
class InspectReport:
    loss: Any  # tensor
    params: list[ParamReport]
    error: GradflowError | None = None
    graph: FlowGraph | None = None  # for pictures; not in JSON
    module_names: dict[int, str] = field(default_factory=dict)
    use_ops: set[int] = field(default_factory=set)  # indices of ops that used a parameter
    warnings: list[str] = field(default_factory=list)
    optimizer: dict | None = None  # coverage by the optimizer, when one was given (inspect/coverage.py)
    gate: dict | None = None  # the --fail-on verdict, when asked (inspect/gate.py)
    precision: Any = None  # PrecisionReport when the trace saw float16/bfloat16 ops (inspect/precision.py)

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
        """Each layer's gradient norm in forward order, vanishing / exploding layers flagged (inspect/health.py)."""
        from gradflow.inspect.health import layer_health

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


# ---- building the report ---------------------------------------------------------------
def check_loss(loss) -> None:
    if not isinstance(loss, torch.Tensor):
        raise GradflowError("bad_loss", f"the loss must be a tensor, got {type(loss).__name__}",
                            hint="return a scalar tensor, e.g. loss = model(x).mean()")
    if loss.numel() != 1:
        raise GradflowError("non_scalar_loss", f"the loss must be a scalar, got shape {tuple(loss.shape)}",
                            hint="reduce it first: .mean() or .sum()")
    if loss.is_complex():
        raise GradflowError("complex_loss", f"the loss must be a real number, got a {loss.dtype} tensor "
                            "(backward needs a real scalar)", hint="return a real loss, e.g. loss.abs() or loss.real")
    if loss.is_meta:
        raise GradflowError("meta_loss", "the loss is on the meta device: it has a shape but no values, so there "
                            "are no gradients to report", hint="build the model and its inputs on a real device "
                            "(cpu) to inspect them")


def _same(a, b) -> bool:
    """The same elements in memory (a use's flow is the grad itself when the parameter has one use)."""
    return (a.data_ptr() == b.data_ptr() and a.storage_offset() == b.storage_offset() and a.dtype == b.dtype
            and a.shape == b.shape and a.stride() == b.stride())


def _measure(p: ParamReport, norm: float) -> None:
    """The grad norm (and so "zero"), and each route's norm and share <flow, grad> / |grad|^2. A route whose flow
    is the grad tensor itself (one use) has the grad's norm and a share of exactly 1, without two more torch
    calls per parameter (~10 us each: a model of many small layers spent most of explain() here)."""
    p.grad_norm = norm
    if norm == 0.0 and p.status == "live":
        p.status, p.reason = "zero", ZERO_REASON
    squared = None
    for r in p.routes:
        if r.flow is None:
            continue
        if r.flow is p.grad or _same(r.flow, p.grad):
            r.norm, r.share = norm, 1.0 if norm > 0 else None
            continue
        squared = dot(p.grad, p.grad) if squared is None else squared
        r.norm = grad_norm(r.flow)
        r.share = dot(r.flow, p.grad) / squared if squared > 0 else None


def _routes(ops: list, graph: FlowGraph, serial: int, module_name, grad) -> list[Route]:
    """Every use whose result reaches the loss (earlier forwards in the same trace are left out); their norms
    and shares are filled in by _measure. A parameter's only use (`whole`, not hooked) sent it all its grad."""
    out = []
    for use in graph.uses.get(serial, ()):
        rec = ops[use.op]
        flow = use.flow
        if flow is None:
            flow = grad if use.whole else None
            if flow is None and not any(o in graph.to_loss for o in rec.outs):
                continue
        elif flow.is_sparse:
            flow = flow.to_dense()
        out.append(Route(rec.name, rec.line, module_name(rec.module), flow, None, None, rec.cut))
    return out


def _reports(trace: Trace, graph: FlowGraph, named: dict[str, list], grads: list, whys: list | None,
             serials: list, module_name, partial: dict) -> list[ParamReport]:
    """Each parameter's report, measured (_measure; the grad norms taken together first, grad_norms). A parameter
    that got a gradient with nothing cut on the way (the common one) is "live" (or "zero") without
    _param_report's questions, and its only use (`whole`: not hooked, it sent the whole grad) is its route with the
    grad's norm and a share of 1, written inline: what _param_report, _routes and _measure give it. (Its shape and
    size read from the grad, which autograd gives the parameter's shape: a Parameter's own are ~3x slower to ask.)
    `whys`: settle's reason per parameter (untraced), or None when no parameter can be. A grad that is not None
    is one of a tensor that required grad when backward had run (truth.gradients gives None for the others)."""
    norms = iter(grad_norms([g for g in grads if g is not None]))
    ops, once = trace.ops, graph.whole_once().get
    out: list[ParamReport] = []
    for (name, tensors), g, why, s in zip(named.items(), grads, whys or repeat(None), serials):
        if g is None or why is not None or partial or s is None:
            p = _param_report(trace, graph, name, tensors, g, module_name, partial, why, s)
            if g is not None:
                _measure(p, next(norms))
            out.append(p)
            continue
        norm = next(norms)
        op = once(s)
        if op is not None:
            rec = ops[op]
            if len(tensors) == 1:  # no alias: its lists made when read (_LiveOnce)
                out.append(_LiveOnce(name, g, norm, s, rec, module_name))
                continue
            routes = [Route(rec.name, rec.line, module_name(rec.module), g, norm, 1.0 if norm > 0 else None, rec.cut)]
            out.append(ParamReport(name, list(g.shape), g.numel(), True, "live" if norm != 0.0 else "zero",
                                   None if norm != 0.0 else ZERO_REASON, g, norm, tensors[1:], routes, [], s))
            continue
        t = tensors[0]
        p = ParamReport(name, list(t.shape), t.numel(), True, "live", None, g, None, tensors[1:],
                        _routes(ops, graph, s, module_name, g), [], s)
        _measure(p, norm)
        out.append(p)
    return out


def _param_report(trace, graph, name, tensors, grad, module_name, partial, untraced, serial) -> ParamReport:
    t = tensors[0]
    p = ParamReport(name, list(t.shape), t.numel(), bool(t.requires_grad), "live", grad=grad,
                    aliases=list(tensors[1:]), serial=serial)
    if untraced is not None:
        p.status, p.reason = "untraced", untraced
    elif not t.requires_grad:
        p.status, p.reason = "frozen", frozen_reason(trace, serial)
    elif grad is None:
        p.status, p.reason, p.cuts = why_none(graph, trace, serial, module_name)
    if p.status == "live":  # or "zero": _measure tells, from the norm
        p.routes = _routes(trace.ops, graph, serial, module_name, grad)
        if partial:
            p.cuts = [cut_of(r, module_name) for r in partial.get(serial, ())]
    return p


def build_report(trace: Trace, loss, params=None, *, retain_graph: bool = True, optimizer=None) -> InspectReport:
    check_loss(loss)
    if trace.known(loss) is None:
        raise GradflowError("loss_not_traced", "the loss was not computed inside this trace",
                            hint="compute it inside the block: with gradflow.trace() as t: loss = model(x).mean()")
    named, module_names = resolve_params(trace, params)
    for use in trace.state.made:  # (the uses still in columns have no flow)
        use.flow = None
    trace.arm()
    tensors = [v[0] for v in named.values()]
    serials = trace.known_all(tensors)
    leaf_serials = {s for s in serials if s is not None}
    hidden = hidden_serials(trace, leaf_serials)
    low = bool(trace.state.low_nodes)  # half precision: the graph is needed again (inspect/precision.py)
    got = gradients(trace, loss, tensors, hidden, retain_graph or low)
    hidden = hidden_serials(trace, leaf_serials)  # what a reentrant checkpoint's recomputation showed is not
    graph = FlowGraph(trace, trace.known(loss), leaf_serials)
    module_name = module_names.get
    partial = graph.cuts_by_leaf()
    grads, whys = got.grads, None  # (settle's answer when no parameter is used where the trace cannot see)
    if hidden:
        settled = [settle(trace, got, i, t, hidden, s) for i, (t, s) in enumerate(zip(tensors, serials))]
        grads, whys = [g for g, _ in settled], [why for _, why in settled]
    params_out = _reports(trace, graph, named, grads, whys, serials, module_name, partial)
    report = InspectReport(loss, params_out, graph=graph, module_names=module_names,
                           use_ops=_use_ops(*trace.state.use_columns(), leaf_serials))
    report.warnings = frozen_but_changing(trace, module_names)
    if optimizer is not None:
        cover(report, optimizer, tensors)
    if low:
        _precision(report, trace, graph, loss, named, got.grads, retain_graph)
    if not loss.requires_grad:
        report.error = no_gradient_error(report)
    elif (whys or graph.outside) and any(p.status == "untraced" for p in params_out):  # (only settle, or a use
        #                                     the trace may not have seen (reasons.why_none), makes one untraced)
        report.error = untraced_error(report.params)
    return report


def _use_ops(serials: list[int], ops: list[int], leaf_serials: set[int]) -> set[int]:
    """The ops that used one of `leaf_serials` (`serials`, `ops`: the trace's uses as columns). Every use is of
    one when explain reports the trace's own parameters: then a set of the ops at once (~0.25 M instructions less
    than the test per use on a model of 800 parameters; tests/inspect_code/test_speed_safety.py)."""
    if leaf_serials.issuperset(serials):
        return set(ops)
    return {op for s, op in zip(serials, ops) if s in leaf_serials}


def _precision(report: InspectReport, trace: Trace, graph: FlowGraph, loss, named: dict[str, list], grads: list,
               retain_graph: bool) -> None:
    """Underflow to 0 / overflow to inf in float16 or bfloat16: the report's `precision`, and each such
    parameter's reason."""
    from gradflow.inspect.precision import check_precision

    pairs = [(name, vals[0]) for name, vals in named.items()]
    report.precision = check_precision(trace, graph, loss, pairs, grads, report.module_names.get, retain_graph)
    for f in report.precision.findings:
        p = report.param(f.param)
        p.reason = f.describe() if p.reason in (None, ZERO_REASON) else f"{p.reason}; {f.describe()}"
    if not retain_graph:  # the nodes kept for this, latest first: each one freed alone, never a long chain at once
        while trace.state.low_nodes:  # (torch frees a node's inputs recursively: docs/limits.md, long graphs)
            trace.state.low_nodes.popitem()


def frozen_but_changing(trace: Trace, module_names: dict[int, str]) -> list[str]:
    """Frozen norm layers that ran in training mode: their running statistics changed anyway."""
    out = []
    for key, module in trace.state.stats_updated.items():
        own = list(module.parameters(recurse=False))
        if own and not any(p.requires_grad for p in own):
            name = module_names.get(key, type(module).__name__)
            out.append(f"{name} is frozen (requires_grad=False) but ran in training mode, so this forward "
                       f"updated its running_mean/running_var: call .eval() on it to keep it fixed")
    return out


def no_gradient_error(report: InspectReport) -> NoGradientError:
    by_reason: dict[str, list[str]] = {}
    for p in report.params:
        by_reason.setdefault(p.reason or "no gradient", []).append(p.name)
    parts = [f"{', '.join(names[:3])}{f' (+{len(names) - 3} more)' if len(names) > 3 else ''}: {reason}"
             for reason, names in by_reason.items()]
    return NoGradientError("no_gradient", "the loss does not require grad, so no parameter can get a gradient. "
                           f"Why: {'; '.join(parts) or 'no parameters found'}",
                           hint="remove the detach/no_grad on the path, or unfreeze a parameter")


def failure_error(failure: TraceFailure) -> GradflowError:
    return GradflowError("inference_tensor", failure.describe(),
                         hint="create that tensor outside torch.inference_mode() (use torch.no_grad() "
                              "there instead), or .clone() it before using it in training")

"""The per-parameter report of a traced forward: grad, routes (per use) and reasons.

`build_report` runs `torch.autograd.grad` (parameters' `.grad` are left untouched),
reads the per-use flows the trace's hooks measured, and explains every parameter
that got nothing: frozen, not used, or cut (naming the op and source line).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from gradflow.analysis.explanation import SCHEMA_VERSION
from gradflow.errors import GradflowError, NoGradientError
from gradflow.inspect.reasons import Cut, FlowGraph, cut_of, describe_cuts, frozen_reason, why_none
from gradflow.inspect.truth import dense, gradients, hidden_serials, settle, untraced_error
from gradflow.values.jsonable import dumps, to_jsonable

if TYPE_CHECKING:  # the tracer imports this module: types only, no cycle
    from gradflow.inspect.tracer import Trace, TraceFailure

ZERO_REASON = ("gradient is exactly zero (not None): it flowed back, but every element is 0 "
               "(multiplied by 0? a dead ReLU? a mask?)")
STATUSES = ("live", "zero", "cut", "unused", "unreached", "frozen")  # and "untraced", counted only when present


@dataclass
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


@dataclass
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
    library_lines: bool = False  # the reason also names the library line of each cut (not in JSON)

    @property
    def problem(self) -> bool:
        return self.status != "live" or bool(self.cuts)

    @property
    def why(self) -> str | None:
        """The reason, or for a parameter that gets gradient on some paths only, where the others are cut."""
        if self.status in ("live", "zero") and self.cuts:
            also = "partly cut: " + describe_cuts(self.cuts, self.library_lines)
            return f"{self.reason}; {also}" if self.reason else also
        if self.status == "cut" and self.library_lines and self.cuts:
            return describe_cuts(self.cuts, True)
        return self.reason

    def to_dict(self) -> dict:
        return {"name": self.name, "aliases": self.aliases, "shape": self.shape, "numel": self.numel,
                "requires_grad": self.requires_grad, "status": self.status, "reason": self.why,
                "grad_is_none": self.grad is None, "grad_norm": _num(self.grad_norm),
                "routes": [r.to_dict() for r in self.routes], "cuts": [c.to_dict() for c in self.cuts]}


@dataclass
class InspectReport:
    loss: Any  # tensor
    params: list[ParamReport]
    error: GradflowError | None = None
    graph: FlowGraph | None = None  # for pictures; not in JSON
    module_names: dict[int, str] = field(default_factory=dict)
    use_ops: set[int] = field(default_factory=set)  # indices of ops that used a parameter
    warnings: list[str] = field(default_factory=list)

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

    def to_dict(self) -> dict:
        counts = {s: sum(p.status == s for p in self.params) for s in STATUSES}
        untraced = sum(p.status == "untraced" for p in self.params)
        if untraced:  # only then: the documents of fully traced runs stay as they were
            counts["untraced"] = untraced
        return {"schema": SCHEMA_VERSION, "loss": to_jsonable(self.loss.detach()),
                "loss_requires_grad": bool(self.loss.requires_grad), "counts": counts,
                "params": [p.to_dict() for p in self.params], "warnings": list(self.warnings),
                "error": None if self.error is None else self.error.to_dict()}

    def to_json(self, **kw) -> str:
        return dumps(self.to_dict(), **kw)


def _num(x: float | None):
    return None if x is None else to_jsonable(x)


# ---- naming the parameters -----------------------------------------------------------
def _module_names(roots: list) -> dict[int, str]:
    names: dict[int, str] = {}
    prefix = len(roots) > 1
    for root in roots:
        base = type(root).__name__ if prefix else ""
        for name, m in root.named_modules():
            full = ".".join(x for x in (base, name) if x)
            names.setdefault(id(m), full or type(root).__name__)
    return names


def _named_from_modules(roots: list) -> dict[str, list]:
    """{first name: [tensor, alias, alias…]} — tied weights appear once, with their other names."""
    by_id: dict[int, list] = {}
    prefix = len(roots) > 1
    for root in roots:
        base = type(root).__name__ + "." if prefix else ""
        for name, p in root.named_parameters(remove_duplicate=False):
            by_id.setdefault(id(p), [p]).append(base + name)
    return {v[1]: [v[0], *v[2:]] for v in by_id.values()}


def resolve_params(trace: Trace, params) -> tuple[dict[str, list], dict[int, str]]:
    """params: a Module, a dict of named tensors, or None (the modules the trace saw called)."""
    if isinstance(params, torch.nn.Module):
        roots = [params]
    elif params is None:
        roots = trace.state.roots
    elif isinstance(params, dict):
        bad = [k for k, v in params.items() if not isinstance(v, torch.Tensor)]
        if bad:
            raise GradflowError("bad_params", f"params[{bad[0]!r}] is not a tensor",
                                hint="pass a Module or a dict of name -> tensor")
        return {k: [v] for k, v in params.items()}, _module_names(trace.state.roots)
    else:
        raise GradflowError("bad_params", f"params must be a Module or a dict of tensors, "
                            f"not {type(params).__name__}", hint="t.explain(loss, params=model)")
    named = _named_from_modules(roots)
    if params is None:
        _add_stray_leaves(trace, named)
    return named, _module_names(roots)


def _add_stray_leaves(trace: Trace, named: dict[str, list]):
    """Leaf tensors that require grad and were used, but belong to no module: name them by line."""
    known = {id(v[0]) for v in named.values()}
    for t, serial in trace.used_leaves():
        if id(t) not in known:
            first = next(u for u in trace.state.uses if u.serial == serial)
            named[f"tensor@{trace.ops[first.op].line or serial}"] = [t]
            known.add(id(t))


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


def _dot(a, b) -> float:
    """<a, b> without copies (in the tensors' own dtype: float32 models give ~7 digits)."""
    return float(torch.dot(a.reshape(-1), b.reshape(-1)))


def _routes(trace: Trace, graph: FlowGraph, serial: int, grad, module_name) -> list[Route]:
    """Every use whose result reaches the loss (earlier forwards in the same trace are left out)."""
    out = []
    gg = _dot(grad, grad) if grad is not None else 0.0
    for use in graph.uses.get(serial, []):
        rec = trace.ops[use.op]
        if use.flow is None and not any(o in graph.to_loss for o in rec.outs):
            continue
        r = Route(rec.name, rec.line, module_name(rec.module), dense(use.flow), cut=rec.cut)
        if r.flow is not None:
            r.norm = float(torch.linalg.vector_norm(r.flow))
            r.share = _dot(r.flow, grad) / gg if gg > 0 else None
        out.append(r)
    return out


def _param_report(trace, graph, name, tensors, grad, module_name, partial, untraced) -> ParamReport:
    t = tensors[0]
    serial = trace.known(t)
    p = ParamReport(name, list(t.shape), t.numel(), bool(t.requires_grad), "live", grad=grad,
                    aliases=list(tensors[1:]), serial=serial)
    if untraced is not None:
        p.status, p.reason = "untraced", untraced
        p.grad_norm = None if grad is None else float(torch.linalg.vector_norm(grad))
    elif not t.requires_grad:
        p.status, p.reason = "frozen", frozen_reason(trace, serial)
    elif grad is None:
        p.status, p.reason, p.cuts = why_none(graph, trace, serial, module_name)
    else:
        p.grad_norm = float(torch.linalg.vector_norm(grad))
        if p.grad_norm == 0.0:
            p.status, p.reason = "zero", ZERO_REASON
    if p.status in ("live", "zero"):
        p.routes = _routes(trace, graph, serial, grad, module_name)
        p.cuts = [cut_of(r, module_name) for r in partial.get(serial, [])]
    return p


def build_report(trace: Trace, loss, params=None, *, retain_graph: bool = True) -> InspectReport:
    check_loss(loss)
    if trace.known(loss) is None:
        raise GradflowError("loss_not_traced", "the loss was not computed inside this trace",
                            hint="compute it inside the block: with gradflow.trace() as t: loss = model(x).mean()")
    named, module_names = resolve_params(trace, params)
    for use in trace.state.uses:
        use.flow = None
    tensors = [v[0] for v in named.values()]
    leaf_serials = {s for s in (trace.known(t) for t in tensors) if s is not None}
    hidden = hidden_serials(trace, leaf_serials)
    got = gradients(trace, loss, tensors, hidden, retain_graph)
    hidden = hidden_serials(trace, leaf_serials)  # what a reentrant checkpoint's recomputation showed is not
    graph = FlowGraph(trace, trace.known(loss), leaf_serials)
    module_name = module_names.get
    partial = graph.cuts_by_leaf()
    settled = [settle(trace, got, i, t, hidden) for i, t in enumerate(tensors)]
    params_out = [_param_report(trace, graph, name, vals, g, module_name, partial, why)
                  for (name, vals), (g, why) in zip(named.items(), settled)]
    report = InspectReport(loss, params_out, graph=graph, module_names=module_names,
                           use_ops={u.op for u in trace.state.uses if u.serial in leaf_serials})
    report.warnings = frozen_but_changing(trace, module_names)
    if not loss.requires_grad:
        report.error = no_gradient_error(report)
    elif any(p.status == "untraced" for p in params_out):
        report.error = untraced_error(report.params)
    return report


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

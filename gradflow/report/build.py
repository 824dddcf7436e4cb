"""Building inspect's report (report/inspect_report.py holds its types): `build_report` runs `torch.autograd.grad`
(parameters' `.grad` are left untouched), reads the per-use flows the trace's hooks measured, and explains every
parameter that got nothing: frozen, not used, or cut (naming the op and source line)."""
from __future__ import annotations

from itertools import repeat

import torch

from gradflow.errors import GradflowError, NoGradientError
from gradflow.report.inspect_report import ZERO_REASON, InspectReport, ParamReport, Route
from gradflow.report.naming import resolve_params
from gradflow.report.norms import dot, grad_norm, grad_norms
from gradflow.report.optimizer_coverage import cover
from gradflow.report.reasons import FlowGraph, cut_of, frozen_reason, why_none
from gradflow.report.truth import gradients, hidden_serials, settle, untraced_error
from gradflow.tracer.grad_regions import CHECKPOINT_FIX
from gradflow.tracer.trace import Trace, TraceFailure


def check_loss(loss) -> None:
    if not issubclass(type(loss), torch.Tensor):  # type(): isinstance would ask the object's own __class__
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
    calls per parameter."""
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
    size read from the grad, which autograd gives the parameter's shape.)
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
    low = bool(trace.state.low_nodes)  # half precision: the graph is needed again (report/precision.py)
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
    one when explain reports the trace's own parameters: then a set of the ops at once, no test per use
    (tests/tracer/test_invariants.py)."""
    if leaf_serials.issuperset(serials):
        return set(ops)
    return {op for s, op in zip(serials, ops) if s in leaf_serials}


def _precision(report: InspectReport, trace: Trace, graph: FlowGraph, loss, named: dict[str, list], grads: list,
               retain_graph: bool) -> None:
    """Underflow to 0 / overflow to inf in float16 or bfloat16: the report's `precision`, and each such
    parameter's reason."""
    from gradflow.report.precision import check_precision

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
                           hint=_no_gradient_hint(report))


def _no_gradient_hint(report: InspectReport) -> str:
    if {c.kind for p in report.params for c in p.cuts} == {"checkpoint"}:  # nothing but a checkpoint's cut
        return f"make the reentrant checkpoint's input require grad: {CHECKPOINT_FIX}"
    return "remove the detach/no_grad on the path, or unfreeze a parameter"


def failure_error(failure: TraceFailure) -> GradflowError:
    return GradflowError("inference_tensor", failure.describe(),
                         hint="create that tensor outside torch.inference_mode() (use torch.no_grad() "
                              "there instead), or .clone() it before using it in training")


def trace(*, autograd: bool = False, failures=None) -> Trace:
    """Start recording: `with gradflow.trace() as t: loss = model(x).mean()`; then `t.explain(loss, params=model)`.
    `autograd=True`: also name torch's autograd nodes by the ops that made them, for `autograd_graph(report, t)`
    (report/op_graph.py; every op's line is then recorded, which costs time). `failures`: a
    tracer.failure_log.FailureLog that records, from the same calls, what explains a failing backward (`gradflow
    inspect` gives one)."""
    t = Trace(explain=build_report, failures=failures)
    t.keeps_nodes = autograd
    return t

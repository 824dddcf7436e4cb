"""Why each tensor of a backward's table is as it is, by inspect's own reasoning (report/reasons.py) on the script's
recorded ops: a tensor that does not require grad is frozen (the line that set the flag) or cut (each detach,
`.data`, no_grad / inference_mode entered by `with`, a decorator or library code, `.item()` / `.tolist()` /
`.numpy()` / `torch.tensor(...)`, integer output and reentrant checkpoint on the way to it, with its line); a leaf
that requires grad but got nothing from this backward gets inspect's why_none (the inline `fake.detach()`, the
unused branch). A backward whose output does not require grad is explained the same way (`failed_backward`).

The FlowGraph is built only when a row needs a reason beyond what the op that made it says.
"""
from __future__ import annotations

from typing import Any

from gradflow.report.reasons import (
    CUT_FIX,
    Cut,
    FlowGraph,
    cut_of,
    describe_cuts,
    frozen_reason,
    unfrozen_reason,
    was_frozen,
    why_none,
)

BackwardCall = Any  # script/recorder.py's, which imports this module
ScriptTrace = Any


def _no_module(module) -> None:  # the table names tensors, not modules
    return None


def give_reasons(trace: ScriptTrace, call: BackwardCall) -> None:
    """Fill each named tensor's `reason` (and `cuts`) after its backward ran."""
    for n in call.named:
        if n.cuts:  # the op that made it cut: that says why
            n.reason = describe_cuts(n.cuts)
    asks = [n for n in call.named if n.serial is not None and not n.cuts and (
        not n.tensor.requires_grad or n.tensor.is_leaf and n.grad is None)]
    if not asks:
        return
    graph = _graph(trace, call)
    for n in asks:
        if n.tensor.requires_grad:
            n.reason, n.cuts = why_none(graph, trace, n.serial, _no_module)[1:]
        elif was_frozen(trace, n.serial):
            n.reason = frozen_reason(trace, n.serial)
        else:
            n.cuts = [cut_of(r, _no_module) for r in graph.cuts_behind(n.serial)]
            n.reason = describe_cuts(n.cuts) if n.cuts else None


def frozen_lines(trace: ScriptTrace, call: BackwardCall) -> None:
    """In a backward whose ops were not recorded (a loop's later steps): the frozen tensors' reasons only, from the
    flag changes the recorder keeps in every step."""
    for n in call.named:
        if n.serial is not None and not n.tensor.requires_grad and was_frozen(trace, n.serial):
            n.reason = frozen_reason(trace, n.serial)


def unfrozen_lines(trace: ScriptTrace, call: BackwardCall) -> None:
    """The line that unfroze each tensor the script set back to requires_grad=True (a loop's change report)."""
    for n in call.named:
        if n.serial is not None and n.tensor.requires_grad:
            n.unfrozen = unfrozen_reason(trace, n.serial)


def failed_backward(trace: ScriptTrace, call: BackwardCall) -> tuple[str, str] | None:
    """(why, fix) for a backward whose output does not require grad: the cuts every path to it met, or the
    frozen leaves it is computed from; None when gradflow saw neither."""
    root = next((r for r in call.roots if not r.requires_grad), None)
    serial = trace.known(root) if root is not None else None
    if serial is None:
        return None
    graph = _graph(trace, call)
    cuts: list[Cut] = [cut_of(r, _no_module) for r in graph.cuts_behind(serial)]
    if cuts:
        return f"{describe_cuts(cuts)} (every path to it from a tensor that requires grad stops there)", \
            CUT_FIX[cuts[0].kind]
    frozen = [frozen_reason(trace, s) for s in sorted(graph.ancestors(serial)) if was_frozen(trace, s)]
    if frozen:
        return f"nothing it is computed from requires grad ({'; '.join(dict.fromkeys(frozen))})", \
            "unfreeze a parameter it uses (requires_grad_(True)), or leave that line out"
    return None


def _graph(trace: ScriptTrace, call: BackwardCall) -> FlowGraph:
    leaves = {n.serial for n in call.named if n.serial is not None and n.tensor.is_leaf and n.tensor.requires_grad}
    return FlowGraph(trace, trace.known(call.roots[0]) if call.roots else None, leaves, trace.index)

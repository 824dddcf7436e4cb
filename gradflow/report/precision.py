"""Mixed precision: parameters whose gradient underflowed to exactly 0, or overflowed to inf, in float16 or
bfloat16, and the op and line where it happened.

It runs when the trace saw an op with a half-precision result (or a half-precision input, as autocast's
float32 ops have) that requires grad: `torch.autocast`, a `.half()` model. The oracle is loss scaling, as
`torch.amp.GradScaler` does it: a backward pass from S times the loss, S a power of two (so scaling is exact),
gives exactly S times every gradient unless a number under- or overflows on the way. S is 2**24 when float16
ran (its smallest number is 2**-24, its largest 65504) and 2**64 for bfloat16 alone (float32's range). An
element that is 0 in the report's gradient but not in grad(S * loss) / S underflowed; one that is inf/nan in
the report's gradient but finite in grad(loss / S) * S overflowed. (An element that stays 0 at every scale is
not underflow: a mask, a dead ReLU, or a low-precision sum that cancelled exactly.)

Where: the trace keeps the autograd node of every half-precision op. Hooks on those nodes during an unscaled
and a scaled backward find, for underflow, the node (closest to the loss) whose gradient for its inputs has
elements that are 0 unscaled and not 0 scaled while the gradient it received has none; for overflow, the node
whose gradient for its inputs holds inf/nan while the gradient it received was finite. Each parameter is given
the one such node on its own path to the loss (the closest to the loss), with that op's source line.
`.grad` is never touched (torch.autograd.grad), and the per-use flows of the report are put back.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from gradflow.report.truth import grad_leaves, plain_grads

if TYPE_CHECKING:  # report/build.py imports this module inside build_report: types only, no cycle
    from gradflow.report.reasons import FlowGraph
    from gradflow.tracer.trace import Trace

SCALES = {"float16": 24, "bfloat16": 64}  # log2 of S, by the half-precision dtype seen (float16's when both)
LOW_NAMES = {torch.float16: "float16", torch.bfloat16: "bfloat16"}


@dataclass
class Finding:
    param: str
    kind: str  # underflow | overflow
    elements: int  # how many elements of its gradient
    numel: int
    rescaled_norm: float | None = None  # the norm of the rescaled loss's gradient, scaled back
    scale: int = 24  # log2 of the scale
    dtype: str | None = None  # where it happened: float16 | bfloat16
    op: str | None = None
    line: str | None = None
    module: str | None = None

    def describe(self) -> str:
        which = "its gradient" if self.elements == self.numel else \
            f"{self.elements} of {self.numel} elements of its gradient"
        became = "underflowed to exactly 0" if self.kind == "underflow" else "overflowed to inf/nan"
        where = f" at `{self.op}`" if self.op else ""
        where += f" at {self.line}" if self.line else ""
        where += f" (in {self.module})" if self.module else ""
        if self.kind == "underflow":
            fix = (f"(not with the loss scaled by 2**{self.scale}): scale the loss (torch.amp.GradScaler), or keep "
                   "that op in float32")
        else:
            fix = (f"(not with the loss scaled down by 2**{self.scale}): lower the loss scale, or keep that op in "
                   "float32")
        return f"{which} {became} in {self.dtype or 'half precision'}{where} {fix}"

    def to_dict(self) -> dict:
        from gradflow.values.jsonable import to_jsonable

        return {"param": self.param, "kind": self.kind, "elements": self.elements, "numel": self.numel,
                "dtype": self.dtype, "op": self.op, "line": self.line, "module": self.module,
                "rescaled_norm": None if self.rescaled_norm is None else to_jsonable(self.rescaled_norm)}


@dataclass
class PrecisionReport:
    dtypes: list[str]  # the half-precision dtypes the trace saw
    scale: float = 2.0 ** 24
    findings: list[Finding] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"dtypes": self.dtypes, "scale": self.scale, "findings": [f.to_dict() for f in self.findings]}


@dataclass
class _Nodes:
    """What the hooks saw at each half-precision node, per backward pass."""

    zeros_in: dict[int, list] = field(default_factory=dict)  # node id -> masks of 0 in its input grads (unscaled)
    zeros_out: dict[int, list] = field(default_factory=dict)
    underflow: list[int] = field(default_factory=list)  # op indices, in firing order
    overflow: list[int] = field(default_factory=list)


def check_precision(trace: Trace, graph: FlowGraph, loss, named: list[tuple[str, Any]], grads: list,
                    module_name, retain_graph: bool) -> PrecisionReport:
    """The findings for `named` (name, tensor) whose `grads` (the report's) hold 0 or inf/nan elements."""
    dtypes = sorted({LOW_NAMES[dtype] for _, _, dtype in trace.state.low_nodes.values()})
    log2 = min(SCALES[d] for d in dtypes)
    report = PrecisionReport(dtypes, 2.0 ** log2)
    suspects = [i for i, g in enumerate(grads) if g is not None and g.is_floating_point()
                and (bool((g == 0).any()) or not bool(g.isfinite().all()))]
    if not suspects or not loss.requires_grad:
        return report
    wanted = [named[i][1] for i in suspects]
    checkpoints = trace.regions.checkpoint_ops or "CheckpointFunction" in trace.state.functions
    leaves = grad_leaves(trace, wanted) if checkpoints else None  # a reentrant checkpoint refuses
    #                                  torch.autograd.grad: plain backward passes, .grad put back
    flows = [u.flow for u in trace.state.uses]  # the trace's hooks fire again in these passes
    overflow = any(not bool(grads[i].isfinite().all()) for i in suspects)
    try:
        nodes = _passes(trace, loss, wanted, overflow, retain_graph, report.scale, leaves)
    finally:
        for u, f in zip(trace.state.uses, flows):
            u.flow = f
    scaled, down = nodes.pop("scaled"), nodes.pop("down")
    hooks: _Nodes = nodes["hooks"]
    for k, i in enumerate(suspects):
        name, t = named[i]
        for kind, oracle in (("underflow", scaled[k]), ("overflow", down[k] if down else None)):
            found = _finding(kind, name, t, grads[i], oracle)
            if found is not None:
                found.scale = log2
                _where(found, trace, graph, hooks, trace.known(t), module_name)
                report.findings.append(found)
    return report


def _finding(kind: str, name: str, t, grad, oracle) -> Finding | None:
    if oracle is None:
        return None
    if kind == "underflow":
        mask = (grad == 0) & (oracle != 0) & oracle.isfinite()
    else:
        mask = ~grad.isfinite() & oracle.isfinite()
    n = int(mask.sum())
    if not n:
        return None
    norm = float(torch.linalg.vector_norm(oracle.double())) if bool(oracle.isfinite().all()) else None
    return Finding(name, kind, n, t.numel(), norm)


def _passes(trace: Trace, loss, wanted: list, overflow: bool, retain_graph: bool, scale: float,
            leaves: list | None) -> dict:
    """An unscaled backward, a scaled-up one and (for overflow) a scaled-down one, hooked at the low nodes."""
    seen = _Nodes()
    low = trace.state.low_nodes
    phase = ["plain"]

    def hook(node_id: int, index: int):
        def record(grad_in, grad_out):
            if phase[0] == "plain":
                seen.zeros_in[node_id] = [None if g is None else g == 0 for g in grad_in]
                seen.zeros_out[node_id] = [None if g is None else g == 0 for g in grad_out]
                if _bad(grad_in) and not _bad(grad_out):
                    seen.overflow.append(index)
            elif phase[0] == "scaled" and node_id in seen.zeros_in:
                if _revived(seen.zeros_in[node_id], grad_in) and not _revived(seen.zeros_out[node_id], grad_out):
                    seen.underflow.append(index)
        return record

    hooked = {key: (node, index) for key, (node, index, _) in low.items()}
    for node, index, _ in list(low.values()):  # autocast's casts inside an op (mse_loss casts float16 up)
        for nxt, _ in node.next_functions:
            if nxt is not None and type(nxt).__name__ == "ToCopyBackward0" and id(nxt) not in hooked:
                hooked[id(nxt)] = (nxt, index)
    handles = [node.register_hook(hook(key, index)) for key, (node, index) in hooked.items()]
    try:
        _grad(loss, wanted, 1.0, True, leaves)
        phase[0] = "scaled"
        scaled = [None if g is None else g / scale
                  for g in _grad(loss, wanted, scale, retain_graph or overflow, leaves)]
        phase[0] = "down"
        down = [None if g is None else g * scale for g in _grad(loss, wanted, 1 / scale, retain_graph, leaves)] \
            if overflow else None
    finally:
        for h in handles:
            h.remove()
    return {"hooks": seen, "scaled": scaled, "down": down}


def _grad(loss, wanted: list, scale: float, retain: bool, leaves: list | None) -> list:
    """The gradients of `wanted` from a backward seeded with `scale`; given `leaves` (a reentrant checkpoint
    refuses torch.autograd.grad), a plain one, each .grad put back: none (no finding) if that would run a
    post-accumulate-grad hook."""
    seed = torch.full_like(loss, scale)
    if leaves is not None:
        return plain_grads(loss, leaves, wanted, retain, seed) or [None] * len(wanted)
    return list(torch.autograd.grad(loss, wanted, grad_outputs=seed, allow_unused=True, retain_graph=retain))


def _bad(grads) -> bool:
    return any(g is not None and g.is_floating_point() and not bool(g.isfinite().all()) for g in grads)


def _revived(zero_masks: list, grads) -> bool:
    """Is some element that was 0 in the unscaled pass not 0 now?"""
    return any(m is not None and g is not None and m.shape == g.shape and bool((m & (g != 0)).any())
               for m, g in zip(zero_masks, grads))


def _where(found: Finding, trace: Trace, graph: FlowGraph, hooks: _Nodes, serial: int | None, module_name):
    """The op on this parameter's path to the loss where it happened (the closest to the loss)."""
    candidates = hooks.underflow if found.kind == "underflow" else hooks.overflow
    path = _downstream(graph, serial)
    on_path = [i for i in candidates if i in path]
    if not on_path:
        return
    rec = trace.ops[max(on_path)]
    found.op, found.line, found.module = rec.name, rec.line, module_name(rec.module)
    found.dtype = next(LOW_NAMES[d] for _, i, d in trace.state.low_nodes.values() if i == rec.index)


def _downstream(graph: FlowGraph, serial: int | None) -> set[int]:
    """Indices of the ops computed from this tensor (its forward data flow)."""
    if serial is None:
        return set()
    ops: set[int] = set()
    seen, todo = {serial}, [serial]
    while todo:
        for i in graph.consumers.get(todo.pop(), ()):
            if i not in ops:
                ops.add(i)
                for o in graph.ops[i].outs:
                    if o not in seen:
                        seen.add(o)
                        todo.append(o)
    return ops

"""Why a parameter got no gradient: walk the recorded data flow between tensors.

Nodes are tensor serials, edges go from an op's inputs to its outputs. A cut op
(detach, an op run under no_grad / inference_mode, an op with an integer output)
stops the walk; it matters only if what it produced reaches the loss.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gradflow.language.ops import CUT_OPS

if TYPE_CHECKING:  # the tracer imports this module: types only, no cycle
    from gradflow.inspect.tracer import OpRecord, Trace, Use


SHOWN_CUTS = CUT_OPS  # user-made cuts, named as the op table names them ("nondiff" ops are not)
CUT_TEXT = {
    "detach": "cut by `{op}`",
    "no_grad": "cut: `{op}` ran under torch.no_grad()",
    "inference_mode": "cut: `{op}` ran under torch.inference_mode()",
    "nondiff": "cut: `{op}` has no gradient (integer/boolean output)",
}


@dataclass
class Cut:
    kind: str  # detach | no_grad | inference_mode | nondiff
    op: str
    line: str | None
    module: str | None

    def describe(self) -> str:
        where = f" at {self.line}" if self.line else ""
        inside = f" (in {self.module})" if self.module else ""
        op = f"{self.op}()" if self.kind == "detach" else self.op
        return CUT_TEXT[self.kind].format(op=op) + where + inside

    def to_dict(self) -> dict:
        return {"kind": self.kind, "op": self.op, "line": self.line, "module": self.module}


class FlowGraph:
    """Producers and consumers of every recorded tensor, and what reaches the loss."""

    def __init__(self, trace: Trace, loss_serial: int | None, leaf_serials: set[int]):
        self.ops = trace.ops
        self.consumers: dict[int, list[int]] = defaultdict(list)
        self.producers: dict[int, list[int]] = defaultdict(list)
        for rec in self.ops:
            for s in dict.fromkeys(rec.ins):
                self.consumers[s].append(rec.index)
            for s in rec.outs:
                self.producers[s].append(rec.index)
        self.uses: dict[int, list[Use]] = defaultdict(list)  # parameter serial -> its uses, in order
        for use in trace.state.uses:
            self.uses[use.serial].append(use)
        self.loss = loss_serial
        self.leaves = leaf_serials
        self.to_loss = self._ancestors()
        self.outside = [self.ops[i] for i, s in trace.state.outside if s in self.to_loss]  # ops fed from outside

    def _ancestors(self) -> set[int]:
        """Serials the loss is computed from (not looking behind parameters: their init)."""
        if self.loss is None:
            return set()
        seen, todo = {self.loss}, [self.loss]
        while todo:
            s = todo.pop()
            if s in self.leaves and s != self.loss:
                continue
            for i in self.producers.get(s, ()):
                for a in self.ops[i].ins:
                    if a not in seen:
                        seen.add(a)
                        todo.append(a)
        return seen

    def relevant_ops(self) -> list[OpRecord]:
        """Ops whose result reaches the loss (with the cuts on those paths)."""
        return [r for r in self.ops if any(o in self.to_loss for o in r.outs)
                and not set(r.ins) <= set(r.outs)]  # identity / pure in-place ops bring in nothing

    def walk(self, start: int) -> tuple[list[OpRecord], bool]:
        """From a tensor: the cut ops whose output reaches the loss, and whether an uncut path does."""
        cuts: dict[int, OpRecord] = {}
        seen, todo, reached = {start}, [start], False
        while todo:
            s = todo.pop()
            reached |= s == self.loss
            for i in self.consumers.get(s, ()):
                rec = self.ops[i]
                if rec.cut:
                    if any(o in self.to_loss for o in rec.outs):
                        cuts[i] = rec
                    continue
                for o in rec.outs:
                    if o not in seen:
                        seen.add(o)
                        todo.append(o)
        return [cuts[i] for i in sorted(cuts)], reached


    def cuts_by_leaf(self) -> dict[int, list[OpRecord]]:
        """Per leaf: the detach / no_grad / inference_mode ops reaching the loss that its values flow into."""
        out: dict[int, list[OpRecord]] = defaultdict(list)
        for rec in self.ops:
            if rec.cut in SHOWN_CUTS and any(o in self.to_loss for o in rec.outs):
                for leaf in self._leaves_behind(rec):
                    out[leaf].append(rec)
        return out

    def _leaves_behind(self, cut: OpRecord) -> list[int]:
        """Leaves that reach this op's inputs through uncut ops run before it."""
        seen, todo, found = set(cut.ins), list(cut.ins), []
        while todo:
            s = todo.pop()
            if s in self.leaves:
                found.append(s)
                continue
            for i in self.producers.get(s, ()):
                if i < cut.index and not self.ops[i].cut:
                    todo += [a for a in self.ops[i].ins if a not in seen]
                    seen.update(self.ops[i].ins)
        return found


def cut_of(rec: OpRecord, module_name) -> Cut:
    return Cut(rec.cut or "nondiff", rec.name, rec.line, module_name(rec.module))


def why_none(graph: FlowGraph, trace: Trace, serial: int, module_name) -> tuple[str, str, list[Cut]]:
    """(status, reason, cuts) for a parameter that requires grad but received None."""
    uses = graph.uses.get(serial, [])
    if not uses and graph.outside:  # it may be used where the trace could not see
        rec = graph.outside[0]
        return "untraced", (f"not used in the forward gradflow saw, but part of the computation ran outside the "
                            f"trace (`{rec.name}` at {rec.line or 'an unknown line'} used a tensor computed there: "
                            "in another thread, or before the trace started); torch gives it no gradient"), []
    if not uses:
        return "unused", "not used in the forward", []
    cuts, reached = graph.walk(serial)
    if cuts:
        found = [cut_of(r, module_name) for r in cuts]
        return "cut", "; ".join(c.describe() for c in found), found
    first = trace.ops[uses[0].op]
    where = f"`{first.name}` at {first.line}" if first.line else f"`{first.name}`"
    if reached:
        return "unreached", f"used by {where} and its result reaches the loss, but backward sent nothing back", []
    return "unused", f"used by {where}, but nothing computed from it reaches the loss (unused branch)", []


def frozen_reason(trace: Trace, serial: int | None) -> str:
    """Why requires_grad is False, naming the line that set it when the trace saw it."""
    events = [f for f in trace.state.flags if f.serial == serial and serial is not None]
    if events and not events[-1].value:
        e = events[-1]
        how = "requires_grad_(False)" if e.op == "requires_grad_" else "`.requires_grad = False`"
        return f"frozen: {how} at {e.line}" if e.line else f"frozen: {how}"
    return "frozen: requires_grad is False"

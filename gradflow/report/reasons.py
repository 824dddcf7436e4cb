"""Why a parameter got no gradient: walk the recorded data flow between tensors.

Nodes are tensor serials, edges go from an op's inputs to its outputs. A cut op
(detach, an op run under no_grad / inference_mode, an op with an integer output)
stops the walk; it matters only if what it produced reaches the loss.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from gradflow.language.ops import CUT_OPS
from gradflow.tracer.records import ESCAPES, REWRAP

if TYPE_CHECKING:  # the tracer imports this module: types only, no cycle
    from gradflow.tracer.trace import OpRecord, Trace, Use


# User-made cuts: as the op table names them, a value turned into a Python number (`item`: .item(), float(t),
# .tolist(), ...), a tensor copied into a new one (`rewrap`: torch.tensor(t)) and an op in a reentrant checkpoint
# that autograd does not record (`checkpoint`: none of its inputs requires grad); "nondiff" ops are not shown.
SHOWN_CUTS = (*CUT_OPS, "item", "rewrap", "checkpoint")
CUT_TEXT = {
    "detach": "cut by `{op}`",
    "no_grad": "cut: `{op}` ran under {how}",
    "inference_mode": "cut: `{op}` ran under torch.inference_mode()",
    "nondiff": "cut: `{op}` has no gradient (integer/boolean output)",
    "item": "cut: `{op}` turned it into a Python number",
    "rewrap": "cut: `{op}` copied it into a new tensor without gradient",
    "checkpoint": "cut: `{op}` ran in a reentrant checkpoint whose inputs do not require grad ({how})",
}
GRAD_OFF = "gradients off"  # a no_grad cut whose context the trace did not see switch (entered before it began)


def spelled(kind: str, op: str) -> str:
    """The op as the user wrote it: `detach()`, `.item()`, `float()`, `torch.tensor(...)`; else torch's name."""
    if kind == "detach":
        return ".data" if op == "data" else f"{op}()"
    return ESCAPES.get(op, op) if kind == "item" else REWRAP.get(op, op) if kind == "rewrap" else op


@dataclass
class Cut:
    kind: str  # detach | no_grad | inference_mode | item | rewrap | nondiff
    op: str
    line: str | None  # the user's own line (the call into library code, when the op ran there)
    module: str | None
    library_line: str | None = None  # where in library code the op ran (transformers, ...), if it did
    how: str | None = None  # no_grad: what switched gradients off (torch.no_grad(), torch.set_grad_enabled(False))

    def describe(self, more: int = 0, library: bool = False) -> str:
        where = f" at {self.line}" if self.line else ""
        if library and self.library_line:
            where += f" (library: {self.library_line})"
        inside = f" (in {self.module})" if self.module else ""
        op = spelled(self.kind, self.op) + (f"` (+{more} more op{'s' * (more != 1)})" if more else "`")
        text = CUT_TEXT[self.kind].replace("`{op}`", "`{op}").format(op=op, how=self.how or GRAD_OFF)
        return text + where + inside

    def to_dict(self) -> dict:
        return {"kind": self.kind, "op": self.op, "line": self.line, "module": self.module,
                "library_line": self.library_line, "how": self.how}


def describe_cuts(cuts: list[Cut], library: bool = False) -> str:
    """One clause per (kind, context, line): many ops of a library cut at one line of the user's are one reason
    (with `library`, the library line of the first)."""
    groups: dict[tuple, list[Cut]] = {}
    for c in cuts:
        groups.setdefault((c.kind, c.how, c.line), []).append(c)
    return "; ".join(g[0].describe(len(g) - 1, library) for g in groups.values())


class OpIndex:
    """Which ops wrote (producers) and read (consumers) each tensor serial: FlowGraph builds one from the ops at
    once; the script's recorder keeps one as it records, so each backward of a long loop reads it as it is."""

    def __init__(self, ops=()) -> None:
        self.producers: dict[int, list[int]] = defaultdict(list)
        self.consumers: dict[int, list[int]] = defaultdict(list)
        for rec in ops:
            self.add(rec)

    def add(self, rec: OpRecord) -> None:
        for s in dict.fromkeys(rec.ins):
            self.consumers[s].append(rec.index)
        for s in rec.outs:
            self.producers[s].append(rec.index)


class FlowGraph:
    """Producers and consumers of every recorded tensor, and what reaches the loss."""

    def __init__(self, trace: Trace, loss_serial: int | None, leaf_serials: set[int], index: OpIndex | None = None):
        self.ops = list(trace.ops)  # as they are now: the trace may record more later
        self._state = trace.state
        self._made = list(trace.state.made)  # likewise (the uses still in columns: numbers, made when read)
        self._columns = (list(trace.state.use_serials), list(trace.state.use_ops), trace.state.whole_below)
        self.loss = loss_serial
        self.leaves = leaf_serials
        self._outside = list(trace.state.outside)
        self.modules = trace.state.modules  # id -> every module the trace saw called (the pictures read them)
        self._given = index  # kept up to date by the caller (the script's recorder), else built when first asked
        # The rest is built when first asked: a report whose parameters all got gradient along uncut paths,
        # each used once, needs none of it.

    @cached_property
    def _uses(self) -> list[Use]:
        """The uses the trace had when this graph was made, as Use objects (the trace's own: made there now)."""
        return self._state.uses[:len(self._made) + len(self._columns[0])]

    @cached_property
    def uses(self) -> dict[int, list[Use]]:
        """Parameter serial -> its uses, in order."""
        uses: dict[int, list[Use]] = defaultdict(list)
        for use in self._uses:
            uses[use.serial].append(use)
        return uses

    def whole_once(self) -> dict[int, int]:
        """Parameter serial -> the op index of its use, for the parameters used once whose use sent them their
        whole gradient (`whole`, not hooked: no flow of its own). What `uses` tells of them, read from the
        trace's columns without making Use objects (explain asks it of every parameter; most are used once)."""
        serials, ops, whole = self._columns
        out: dict[int, int] = {}
        more = set()  # used more than once, or once but not wholly: not in the answer
        for use in self._made:
            if use.serial in out or use.serial in more:
                more.add(use.serial)
            elif use.whole and use.flow is None:
                out[use.serial] = use.op
            else:
                more.add(use.serial)
        for i, (s, op) in enumerate(zip(serials, ops)):
            if s in out or s in more:
                more.add(s)
            elif i < whole:
                out[s] = op
            else:
                more.add(s)
        for s in more:
            out.pop(s, None)
        return out

    @cached_property
    def _index(self) -> OpIndex:
        return self._given if self._given is not None else OpIndex(self.ops)

    @property
    def consumers(self) -> dict[int, list[int]]:
        return self._index.consumers

    @property
    def producers(self) -> dict[int, list[int]]:
        return self._index.producers

    @cached_property
    def to_loss(self) -> set[int]:
        return self.ancestors(self.loss)  # (not looking behind parameters: their init)

    @cached_property
    def outside(self) -> list[OpRecord]:
        """Ops fed from outside the trace, whose results reach the loss."""
        return [self.ops[i] for i, s in self._outside if s in self.to_loss] if self._outside else []

    def ancestors(self, serial: int | None) -> set[int]:
        """Serials this tensor is computed from, itself included (not looking behind the leaves)."""
        if serial is None:
            return set()
        seen, todo = {serial}, [serial]
        while todo:
            s = todo.pop()
            if s in self.leaves and s != serial:
                continue
            for i in self.producers.get(s, ()):
                for a in self.ops[i].ins:
                    if a not in seen:
                        seen.add(a)
                        todo.append(a)
        return seen

    def cuts_behind(self, serial: int) -> list[OpRecord]:
        """The cut ops a tensor is computed from, in order: where each path to it from a tensor that required grad
        stopped (a tensor that does not require grad, made from ones that do)."""
        ops = {i for s in self.ancestors(serial) for i in self.producers.get(s, ())}
        return [self.ops[i] for i in sorted(ops) if self.ops[i].cut]

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


    def escapes(self, start: int) -> list[OpRecord]:
        """The ops at which values computed from this tensor left torch (.item(), .tolist(), ...), through
        uncut ops: each is where a gradient would stop if that value were used later."""
        found: dict[int, OpRecord] = {}
        seen, todo = {start}, [start]
        while todo:
            for i in self.consumers.get(todo.pop(), ()):
                rec = self.ops[i]
                if rec.cut == "item":
                    found[i] = rec
                elif not rec.cut:
                    todo += [o for o in rec.outs if o not in seen]
                    seen.update(rec.outs)
        return [found[i] for i in sorted(found)]

    def cuts_by_leaf(self) -> dict[int, list[OpRecord]]:
        """Per leaf: the detach / no_grad / inference_mode ops reaching the loss that its values flow into."""
        out: dict[int, list[OpRecord]] = defaultdict(list)
        for rec in [r for r in self.ops if r.cut is not None and r.cut in SHOWN_CUTS]:  # (most ops cut nothing)
            if any(o in self.to_loss for o in rec.outs):
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
    return Cut(rec.cut or "nondiff", rec.name, rec.line, module_name(rec.module), rec.library_line, rec.how)


def why_none(graph: FlowGraph, trace: Trace, serial: int, module_name) -> tuple[str, str, list[Cut]]:
    """(status, reason, cuts) for a parameter that requires grad but received None.

    A use counts as one only if gradient could have flowed back through it: an op that ran with gradients on
    and gave a result that requires grad (or one inside a custom autograd.Function, which carries gradient
    itself). Any other read of the parameter -- its initialisation, `new_tensor`, `.data`, a norm logged under
    no_grad -- cannot give it a gradient, so it is named only when what it computed reaches the loss: as a cut.
    """
    uses = graph.uses.get(serial, [])
    counted = [u for u in uses if trace.ops[u.op].cut is None and
               (trace.ops[u.op].grad_enabled or trace.ops[u.op].inside is not None)]
    cuts, reached = graph.walk(serial) if uses else ([], False)
    if cuts:
        found = [cut_of(r, module_name) for r in cuts]
        return "cut", describe_cuts(found), found
    if not counted and graph.outside:  # it may be used where the trace could not see
        rec = graph.outside[0]
        return "untraced", (f"not used in the forward gradflow saw, but part of the computation ran outside the "
                            f"trace (`{rec.name}` at {rec.line or 'an unknown line'} used a tensor computed there: "
                            "in another thread, or before the trace started); torch gives it no gradient"), []
    if not counted:
        return "unused", "not used in the forward", []
    first = trace.ops[counted[0].op]
    where = f"`{first.name}` at {first.line}" if first.line else f"`{first.name}`"
    if reached:
        return "unreached", f"used by {where} and its result reaches the loss, but backward sent nothing back", []
    left = graph.escapes(serial)
    note = (f"; its value left torch by `{spelled('item', left[0].name)}` at {left[0].line or 'an unknown line'} "
            "(a Python value gradflow cannot follow from there)") if left else ""
    return "unused", f"used by {where}, but nothing computed from it reaches the loss (unused branch){note}", []


# What to do about a cut that leaves the loss without gradient, by its kind (the first cut on the way names it).
CUT_FIX = {
    "detach": "use the tensor itself, not its detach() or .data, on the way to the loss",
    "no_grad": "compute it with gradients on: outside the no_grad block, or inside `with torch.enable_grad():` "
               "when a decorator (@torch.no_grad()) or library code switched them off",
    "inference_mode": "compute it outside torch.inference_mode()",
    "item": "keep it a tensor: use the tensor itself, not a Python number from .item(), .tolist(), float() or "
            ".numpy() made into a new tensor",
    "rewrap": "use the tensor itself: torch.tensor(t) copies the values without their gradient",
    "nondiff": "argmax, argsort, round, comparisons give no gradient: use a differentiable stand-in (softmax "
               "weights instead of argmax, the values instead of their rank)",
    "checkpoint": "make an input of the checkpoint require grad (model.enable_input_require_grads()) or pass "
                  "use_reentrant=False",
}


def frozen_reason(trace: Trace, serial: int | None) -> str:
    """Why requires_grad is False, naming the line that set it when the trace saw it."""
    e = _last_flag(trace, serial)
    if e is not None and not e.value:
        return f"frozen: {_set_by(e)} at {e.line}" if e.line else f"frozen: {_set_by(e)}"
    return "frozen: requires_grad is False"


def unfrozen_reason(trace: Trace, serial: int | None) -> str | None:
    """The line that last set this tensor's requires_grad to True, when the trace saw one (an unfreeze)."""
    e = _last_flag(trace, serial)
    if e is None or not e.value or not e.line:
        return None
    return f"unfrozen: {_set_by(e)} at {e.line}"


def _set_by(e) -> str:
    """How the script set requires_grad, as it wrote it: `requires_grad_(False)` or `.requires_grad = False`."""
    return f"requires_grad_({e.value})" if e.op == "requires_grad_" else f"`.requires_grad = {e.value}`"


def was_frozen(trace: Trace, serial: int | None) -> bool:
    """Did the trace see the code set this tensor's requires_grad to False (the line frozen_reason names)?"""
    e = _last_flag(trace, serial)
    return e is not None and not e.value


def _last_flag(trace: Trace, serial: int | None):
    events = [f for f in trace.state.flags if f.serial == serial and serial is not None]
    return events[-1] if events else None

"""Gradient on/off contexts and reentrant checkpoints, for the tracer (tracer/trace.py): `GradRegions`.

Each torch.no_grad() / set_grad_enabled / enable_grad the trace sees opens or closes a region, so a no_grad cut
names what switched gradients off. A reentrant `torch.utils.checkpoint` runs its forward with grad off: its ops
are kept per checkpoint, and the explaining backward (`replaying`) records the recomputation, whose k-th op is
the forward's k-th op in the same checkpoint: it gives them their cuts and per-use gradients (`Replay`).
"""
from __future__ import annotations

import weakref
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from gradflow.tracer.records import DETACH, ESCAPES, FLAGS, OpRecord, Use, cut_kind, tensors_in
from gradflow.tracer.source_lines import grad_switch, lines


@dataclass
class Region:
    """A stretch of code with gradient recording switched on or off; a reentrant checkpoint's own no_grad (its
    forward) and enable_grad (its recomputation in backward) carry the checkpoint's ctx id."""

    value: bool
    how: str
    checkpoint: int | None = None
    recompute: bool = False
    count: int = 0  # ops recorded in it (a recomputation)
    dead: tuple[str, str | None] | None = None  # a checkpoint autograd will not record: (cut kind, how)
    nested: bool = False  # a checkpoint inside another's forward: recomputed only as part of that one's


CHECKPOINT_FIX = "`model.enable_input_require_grads()` (transformers, peft) or `use_reentrant=False`"


@dataclass(frozen=True)
class DeadCheckpoint:
    """A reentrant checkpoint none of whose inputs required grad: autograd records nothing of it, so the parameters
    used inside get no gradient (torch only warns "None of the inputs have requires_grad=True")."""

    line: str | None  # the user's line it ran from
    library_line: str | None  # where library code called it (transformers' gradient checkpointing), if it did

    @property
    def how(self) -> str:
        """Its call and the fix, as a cut's reason shows them (report/reasons.py)."""
        where = self.library_line or self.line
        return (f"torch.utils.checkpoint called at {where}; " if where else "") + f"fix: {CHECKPOINT_FIX}"

    def fix(self, given: str | None = None) -> str:
        """The fix; `given`: the checkpoint's first input as the user's call spells it (`h`), when known."""
        if self.library_line and "transformers" in self.library_line:
            return ("call `model.enable_input_require_grads()` after `gradient_checkpointing_enable()` (LoRA and "
                    "other frozen-base fine-tuning), or enable it with "
                    "`gradient_checkpointing_kwargs={\"use_reentrant\": False}`")
        made = f"`{given}.requires_grad_()` before the call" if given else "`x.requires_grad_()`"
        return f"pass `use_reentrant=False` to torch.utils.checkpoint, or make its input require grad ({made})"


@dataclass
class Replay:
    """The explaining backward, run through reentrant checkpoints: their forward ran with grad off, so the
    recomputation in backward is what shows how each parameter used inside gets its gradient. Its k-th op is
    the forward's k-th op inside the same checkpoint."""

    uses: dict  # forward op index -> its uses
    alias: dict = field(default_factory=dict)  # id(detached input) -> (weak ref, serial of the forward tensor)
    cuts: dict = field(default_factory=dict)  # checkpoint -> [(forward op, kind, how, line, library line)]
    found: dict = field(default_factory=dict)  # checkpoint -> [forward uses the recomputation measured]
    counts: dict = field(default_factory=dict)  # checkpoint -> ops its recomputation ran
    broken: set = field(default_factory=set)  # checkpoints whose recomputation ran other ops

    def twin(self, region: Region, name: str, ops: list[OpRecord], checkpoint_ops: dict) -> OpRecord | None:
        """The forward's op that this op of the recomputation repeats; None (and the checkpoint broken) when the
        recomputation runs another op than the forward did."""
        key, k = region.checkpoint, region.count
        region.count += 1
        forward = checkpoint_ops.get(key)
        if forward is None or k >= len(forward) or ops[forward[k]].name != name:
            self.broken.add(key)
            return None
        return ops[forward[k]]

    def serial_of(self, a, known: int | None) -> int | None:
        """The forward tensor's serial for `a`: its own, or that of the input the checkpoint detached into it."""
        if known is not None:
            return known
        entry = self.alias.get(id(a))
        return entry[1] if entry is not None and entry[0]() is a else None

    def settle(self, checkpoint_ops: dict) -> None:
        """Give the forward's ops their cuts and uses, for the recomputations that ran exactly the forward's ops."""
        for key, ops in checkpoint_ops.items():
            if key in self.broken or self.counts.get(key) != len(ops):
                continue
            for rec, kind, how, line, library in self.cuts.get(key, []):
                rec.cut, rec.how = kind, how
                rec.line, rec.library_line = rec.line or line, rec.library_line or library
            for use in self.found.get(key, []):
                use.hidden = False


class GradRegions:
    """A trace's open gradient contexts (innermost last), the reentrant checkpoints whose forward it recorded, and
    while explain's backward runs through them (`replaying`), the replay of their recomputation."""

    def __init__(self) -> None:
        self.open: list[Region] = []
        self.base = True  # gradients on when the trace began
        self.checkpoint: int | None = None  # the reentrant checkpoint whose forward is running
        self.dead: tuple[str, str | None] | None = None  # ... when autograd does not record it: (cut kind, how)
        self.checkpoint_ops: dict[int, list[int]] = {}  # reentrant checkpoint (ctx id) -> its forward's ops
        self.replay: Replay | None = None

    def switch(self, value: bool, trace) -> None:
        """torch switched gradients to `value` (trace: the Trace, told of a checkpoint autograd will not record)."""
        switch = grad_switch(value)
        if switch.action == "exit" and self.open:
            region = self.open.pop()
            if region.recompute and self.replay is not None and region.checkpoint is not None:
                self.replay.counts[region.checkpoint] = region.count
        elif switch.action == "enter":
            self.open.append(self._region(value, switch, trace))
        inner = self._innermost_checkpoint()
        if inner is None or inner.recompute or self.replay is not None:
            self.checkpoint, self.dead = None, None
        else:  # the innermost checkpoint's forward: recorded by autograd, or its ops' (cut kind, how)
            live = inner.dead is None and not inner.nested
            self.checkpoint, self.dead = (inner.checkpoint if live else None), inner.dead

    def _region(self, value: bool, switch, trace) -> Region:
        region = Region(value, switch.how, switch.checkpoint, switch.recompute)
        if switch.checkpoint is not None and not switch.recompute and self.replay is None:
            region.nested = any(r.checkpoint is not None and not r.nested and r.dead is None for r in self.open)
            region.dead = None if region.nested else self._unrecorded(switch.inputs_require_grad, trace)
            if region.dead is None and not region.nested:
                trace.state.functions.add("CheckpointFunction")
                self.checkpoint_ops.setdefault(switch.checkpoint, [])
        return region

    def _unrecorded(self, inputs_require_grad: bool, trace) -> tuple[str, str | None] | None:
        """A reentrant checkpoint starting: autograd records it only if gradients were on where it was called and
        one of its inputs requires grad; else the parameters used inside get nothing -- (cut kind, how)."""
        outer = self.open[-1] if self.open else None
        if not (outer.value if outer is not None else self.base):
            return "no_grad", outer.how if outer is not None else None
        if inputs_require_grad:
            return None
        dead = DeadCheckpoint(*lines())
        if trace.failures is not None:
            trace.failures.checkpoints.append(dead)
        return "checkpoint", dead.how

    def _innermost_checkpoint(self) -> Region | None:
        return next((r for r in reversed(self.open) if r.checkpoint is not None), None)

    def grad_off(self) -> str | None:
        """How the innermost context switched gradients off, when the trace saw it do so."""
        region = self.open[-1] if self.open else None
        return region.how if region is not None and not region.value else None

    def recorded(self, index: int) -> None:
        """Op `index` was recorded: one of the running checkpoint's forward, if one runs."""
        if self.checkpoint is not None:
            self.checkpoint_ops[self.checkpoint].append(index)

    @contextmanager
    def replaying(self, uses: list[Use]):
        """While a plain backward runs: the reentrant checkpoints' recomputations are replayed (`replayed`), then
        each of their forward's ops gets the cut and the per-use gradients of its recomputed twin."""
        by_op: dict[int, list[Use]] = {}
        for use in uses:
            by_op.setdefault(use.op, []).append(use)
        saved, self.open = self.open, []
        self.replay = replay = Replay(by_op)
        try:
            yield
        finally:
            self.replay, self.open, self.checkpoint = None, saved, None
        replay.settle(self.checkpoint_ops)

    def replayed(self, name: str, ins: list, in_rg: list[bool], in_leaf: list[bool], out, known,
                 ops: list[OpRecord]) -> tuple[list, dict] | None:
        """An op run during the explaining backward: a reentrant checkpoint's recomputation, or anything else.
        (its results, {id(leaf): forward Use}) for the per-use hooks, when it used leaves with gradients on."""
        replay = self.replay
        assert replay is not None
        if name in DETACH and ins:  # the checkpoint detaches its saved inputs before recomputing
            serial = known(ins[0])
            if serial is not None:
                for o in tensors_in(out, []):
                    replay.alias[id(o)] = (weakref.ref(o), serial)
        region = self._innermost_checkpoint()
        outs = tensors_in(out, []) if name != "__setitem__" else ins[:1]
        if region is None or not region.recompute or name in FLAGS or not (outs or name in ESCAPES):
            return None
        rec = replay.twin(region, name, ops, self.checkpoint_ops)
        if rec is None:
            return None
        if any(in_rg) and (name in ESCAPES or not any(o.requires_grad for o in outs)):
            kind = "item" if name in ESCAPES else cut_kind(name, torch.is_grad_enabled(),
                                                           torch.is_inference_mode_enabled())
            replay.cuts.setdefault(region.checkpoint, []).append(
                (rec, kind, self.grad_off() if kind == "no_grad" else None, *lines()))
        uses = {}
        for a, leaf in zip(ins, in_leaf):
            serial = replay.serial_of(a, known(a)) if leaf and not any(a is o for o in outs) else None
            use = next((u for u in replay.uses.get(rec.index, []) if u.serial == serial), None)
            if use is not None:
                uses[id(a)] = use
                replay.found.setdefault(region.checkpoint, []).append(use)
        return (outs, uses) if uses and torch.is_grad_enabled() else None

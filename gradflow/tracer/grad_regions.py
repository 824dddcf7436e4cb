"""Gradient on/off contexts and reentrant checkpoints, for the tracer (tracer/trace.py).

Each torch.no_grad() / set_grad_enabled / enable_grad the trace sees opens or closes a region, so a no_grad cut
names what switched gradients off. A reentrant `torch.utils.checkpoint` runs its forward with grad off: its ops
are kept per checkpoint, and the explaining backward (`replaying`) records the recomputation, whose k-th op is
the forward's k-th op in the same checkpoint: it gives them their cuts and per-use gradients.
"""
from __future__ import annotations

import contextlib
import weakref
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from gradflow.tracer.records import DETACH, ESCAPES, FLAGS, Use, tensors_in
from gradflow.tracer.source_lines import grad_switch, lines

if TYPE_CHECKING:  # the tracer imports this module: types only, no cycle
    from gradflow.tracer.trace import Trace


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


def switch_grad(t: Trace, value: bool):
    switch = grad_switch(value)
    regions = t._regions
    if switch.action == "exit" and regions:
        region = regions.pop()
        if region.recompute and t._replay is not None and region.checkpoint is not None:
            t._replay.counts[region.checkpoint] = region.count
    elif switch.action == "enter":
        region = Region(value, switch.how, switch.checkpoint, switch.recompute)
        if switch.checkpoint is not None and not switch.recompute and t._replay is None:
            region.nested = any(r.checkpoint is not None and not r.nested and r.dead is None for r in regions)
            region.dead = None if region.nested else t._unrecorded(switch.inputs_require_grad)
            if region.dead is None and not region.nested:
                t.state.functions.add("CheckpointFunction")
                t.checkpoint_ops.setdefault(switch.checkpoint, [])
        regions.append(region)
    inner = next((r for r in reversed(regions) if r.checkpoint is not None), None)
    forward = inner is not None and not inner.recompute and t._replay is None
    live = forward and inner.dead is None and not inner.nested  # type: ignore[union-attr]
    t._checkpoint = inner.checkpoint if live else None  # type: ignore[union-attr]
    t._dead = inner.dead if forward else None  # type: ignore[union-attr]
    t._settle_plain()


def unrecorded(t: Trace, inputs_require_grad: bool) -> tuple[str, str | None] | None:
    """A reentrant checkpoint starting: autograd records it only if gradients were on where it was called and
    one of its inputs requires grad; else the parameters used inside get nothing -- (cut kind, how)."""
    outer = t._regions[-1] if t._regions else None
    if not (outer.value if outer is not None else t._grad_base):
        return "no_grad", outer.how if outer is not None else None
    return None if inputs_require_grad else ("checkpoint", None)


def grad_off(t: Trace) -> str | None:
    """How the innermost context switched gradients off, when the trace saw it do so."""
    region = t._regions[-1] if t._regions else None
    return region.how if region is not None and not region.value else None


def listening(t: Trace) -> _Listening:
    """The per-use hooks record what flows back while this is open."""
    return _Listening(t._ear)


class _Listening:
    """(A plain context manager, not a generator's: explain opens one on every call.)"""

    __slots__ = ("ear",)

    def __init__(self, ear: list) -> None:
        self.ear = ear

    def __enter__(self) -> None:
        self.ear[0] = True

    def __exit__(self, *exc) -> None:
        self.ear[0] = False


@contextmanager
def replaying(t: Trace):
    """Run a plain backward inside this: the reentrant checkpoints' recomputations are recorded, and each of
    their forward's ops gets the cut and the per-use gradients of its recomputed twin."""
    by_op: dict[int, list[Use]] = {}
    for use in t.state.uses:
        by_op.setdefault(use.op, []).append(use)
    saved, t._regions = t._regions, []
    t._replay = Replay(by_op)
    t._plain = False
    try:
        if not t._recording:
            t._mode.t = t  # (the mode holds its trace only while on)
        with t.listening(), contextlib.nullcontext() if t._recording else t._mode:
            yield
    finally:
        if not t._recording:
            t._mode.t = None
        replay, t._replay, t._regions = t._replay, None, saved
        t._checkpoint = None
        t._settle_plain()
    for key, ops in t.checkpoint_ops.items():  # only recomputations that ran exactly the forward's ops
        if key in replay.broken or replay.counts.get(key) != len(ops):
            continue
        for rec, kind, how, line, library in replay.cuts.get(key, []):
            rec.cut, rec.how = kind, how
            rec.line, rec.library_line = rec.line or line, rec.library_line or library
        for use in replay.found.get(key, []):
            use.hidden = False


def replayed(t: Trace, name: str, ins: list, in_rg: list[bool], in_leaf: list[bool], out, stop):
    """An op run during the explaining backward: a reentrant checkpoint's recomputation, or anything else."""
    replay = t._replay
    assert replay is not None
    if name in DETACH and ins:  # the checkpoint detaches its saved inputs before recomputing
        for o in tensors_in(out, []):
            serial = t.known(ins[0])
            if serial is not None:
                replay.alias[id(o)] = (weakref.ref(o), serial)
    region = next((r for r in reversed(t._regions) if r.checkpoint is not None), None)
    outs = tensors_in(out, []) if name != "__setitem__" else ins[:1]
    if region is None or not region.recompute or name in FLAGS or not (outs or name in ESCAPES):
        return
    key, k = region.checkpoint, region.count
    region.count += 1
    ops = t.checkpoint_ops.get(key)  # type: ignore[arg-type]
    if ops is None or k >= len(ops) or t.state.ops[ops[k]].name != name:
        replay.broken.add(key)
        return
    rec = t.state.ops[ops[k]]
    if any(in_rg) and (name in ESCAPES or not any(o.requires_grad for o in outs)):
        kind = "item" if name in ESCAPES else t._cut_kind(name, torch.is_grad_enabled(),
                                                               torch.is_inference_mode_enabled())
        line, library = lines()
        replay.cuts.setdefault(key, []).append((rec, kind, t._grad_off() if kind == "no_grad" else None,
                                                line, library))
    uses = {}
    for a, leaf in zip(ins, in_leaf):
        serial = t._serial_or_alias(a) if leaf and not any(a is o for o in outs) else None
        use = next((u for u in replay.uses.get(rec.index, []) if u.serial == serial), None)
        if use is not None:
            uses[id(a)] = use
            replay.found.setdefault(key, []).append(use)
    if uses and torch.is_grad_enabled():
        t._listen(outs, uses, stop, rec.index)


def serial_or_alias(t: Trace, a: torch.Tensor) -> int | None:
    serial = t.known(a)
    if serial is None and t._replay is not None:
        entry = t._replay.alias.get(id(a))
        serial = entry[1] if entry is not None and entry[0]() is a else None
    return serial

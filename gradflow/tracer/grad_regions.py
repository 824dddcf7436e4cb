"""Gradient on/off contexts and reentrant checkpoints, for the tracer (tracer/trace.py).

Each torch.no_grad() / set_grad_enabled / enable_grad the trace sees opens or closes a region, so a no_grad cut
names what switched gradients off. A reentrant `torch.utils.checkpoint` runs its forward with grad off: its ops
are kept per checkpoint, and the explaining backward (Trace.replaying) records the recomputation, whose k-th op is
the forward's k-th op in the same checkpoint: it gives them their cuts and per-use gradients (`Replay`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from gradflow.tracer.records import OpRecord


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


def checkpoint_state(regions: list[Region], replaying: bool) -> tuple[int | None, tuple[str, str | None] | None]:
    """(the reentrant checkpoint whose forward is running and recorded by autograd, or None; the (cut kind, how)
    of its ops when autograd does not record it) for the innermost checkpoint among the open regions."""
    inner = next((r for r in reversed(regions) if r.checkpoint is not None), None)
    if inner is None or inner.recompute or replaying:
        return None, None
    live = inner.dead is None and not inner.nested
    return (inner.checkpoint if live else None), inner.dead


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

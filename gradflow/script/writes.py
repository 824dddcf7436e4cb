"""In-place writes a script makes, kept by the memory they touch, so that a program is never offered for a
backward whose tensors were changed where the program cannot see it.

The program writer (program_writer.py) follows each tensor's versions: an in-place op on a tensor (`y += 1`,
`y.relu_()`) is a new version of that same tensor, written as a new statement. What it cannot follow is a write
into the same memory through another tensor object: `.data`, a `detach()`ed tensor, a view (`a[0:1] += 5`,
`v = a.view(2); v.relu_()`), `out=`. Autograd does not always see those either (`.data` keeps no version), so the
backward may use values no recorded op computed. A write is kept with its position in the trace (the index the
op has or would have had), the memory it touched (`untyped_storage().data_ptr()`), the tensor written and how
that tensor was made (`data`, `detach`, `__getitem__`...); `conflict` finds the first write into the memory of a
program op's tensor, after that op, through another tensor than the one the program follows.
"""
from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

import torch

from gradflow.tracer.records import storage_of

_SPELLED = {"data": ".data", "detach": "detach()", "__getitem__": "indexing"}  # how the written tensor was made


@dataclass(frozen=True, slots=True)
class Write:
    position: int  # the trace's op count when it ran: after every op with a lower index
    serial: int  # the tensor written
    op: str  # the writing op (`add_`, `__iadd__`, `__setitem__`, ...)
    via: str | None  # the op that made the written tensor (`data`, `detach`, `__getitem__`, ...), if recorded
    line: str | None

    def describe(self) -> str:
        through = f" through {_SPELLED.get(self.via, f'`{self.via}`')}" if self.via else ""
        return f"`{self.op}`{through} at {self.line or 'an unknown line'}"


ESCAPES_KEPT = 256  # numpy views followed at a time (a loop logging with .numpy() makes one per step)
ESCAPE_CAP = 1 << 16  # elements copied to see a write through a numpy view; a bigger one counts as written


class Escape:
    """A numpy array sharing a tensor's memory (`t.numpy()`): writes through it reach the tensor unseen by torch
    and by this recorder. The tensor's values when the view was made are kept, so a later change is found."""

    __slots__ = ("tensor", "values", "line")

    def __init__(self, t: torch.Tensor, line: str | None):
        self.tensor = weakref.ref(t)
        self.values = t.detach().clone() if t.numel() <= ESCAPE_CAP else None
        self.line = line

    def changed(self) -> bool:
        t = self.tensor()
        if t is None:  # gone: its memory is no program tensor's
            return False
        return self.values is None or not torch.equal(t.detach(), self.values)


class Writes:
    """Every in-place write of the script, by memory, and the numpy views that could write unseen."""

    def __init__(self) -> None:
        self.by_storage: dict[int, list[Write]] = {}
        self.escapes: OrderedDict[int, Escape] = OrderedDict()  # storage -> its latest numpy view

    def escaped(self, t: torch.Tensor, line: str | None) -> None:
        """`t.numpy()` ran: its memory may now be written through the array."""
        storage = storage_of(t)
        if storage is None:
            return
        self.escapes.pop(storage, None)
        self.escapes[storage] = Escape(t, line)
        if len(self.escapes) > ESCAPES_KEPT:
            self.escapes.popitem(last=False)

    def through_numpy(self, storages: Iterable[int | None]) -> str | None:
        """The line of a `.numpy()` whose array changed (or may have changed) one of these memories, else None."""
        for storage in storages:
            escape = self.escapes.get(storage) if storage is not None else None
            if escape is not None and escape.changed():
                return escape.line or "an unknown line"
        return None

    def add(self, storage: int, write: Write) -> None:
        self.by_storage.setdefault(storage, []).append(write)

    def conflict(self, ops: Iterable[tuple[int, tuple[tuple[int, int | None], ...]]]) -> tuple[int, Write] | None:
        """For (op index, its tensors as (serial, storage)): the first (op, write) where a write into the memory
        of one of the op's tensors came after the op through another tensor object; None if there is none."""
        for index, tensors in ops:
            for serial, storage in tensors:
                for w in reversed(self.by_storage.get(storage, ()) if storage is not None else ()):
                    if w.position <= index:
                        break
                    if w.serial != serial:
                        return index, w
        return None

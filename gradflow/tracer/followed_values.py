"""Values that leave torch, for the tracer (tracer/trace.py): `.item()`, `float(t)`, `.tolist()`, `.numpy()` give
Python values, followed by identity into the ops they are given to (`torch.tensor(...)`, `x * number`), and numpy
arrays by the memory a later `torch.from_numpy` shares."""
from __future__ import annotations

import weakref
from collections.abc import Callable

import torch

_FOLLOWED_OBJECTS = 10_000  # Python values followed per trace
_SCAN_BUDGET = 1_000  # arguments looked at per op for a followed Python value
_FOLLOWED_LIST = 4_096  # elements: a longer list from .tolist() is not followed


class FollowedValues:
    """The Python values (and numpy arrays) that left torch, each with the serial of the op result it was."""

    def __init__(self) -> None:
        self._objs: dict[int, tuple] = {}  # id(Python value) -> (it or a weak ref, serial)
        self._arrays: dict[int, int] = {}  # data pointer of a followed numpy array -> serial (torch.from_numpy)

    def __bool__(self) -> bool:
        """Whether any value is followed (then every op's arguments are looked at)."""
        return bool(self._objs)

    def follow(self, obj, serial: int, depth: int = 0) -> None:
        if len(self._objs) >= _FOLLOWED_OBJECTS or obj is None or isinstance(obj, bool):
            return
        if isinstance(obj, int) and -5 <= obj <= 256:  # small ints are shared objects: not this value's own
            return
        if isinstance(obj, list) and len(obj) > _FOLLOWED_LIST:  # kept alive while followed: not a huge one
            return
        if isinstance(obj, (int, float, complex, list)):
            self._objs[id(obj)] = (obj, serial)
            if isinstance(obj, list) and depth < 2:
                for x in obj[:64]:
                    self.follow(x, serial, depth + 1)
            return
        try:
            self._objs[id(obj)] = (weakref.ref(obj), serial)  # a numpy array: its memory is the tensor's
        except TypeError:
            return
        pointer = getattr(obj, "__array_interface__", {}).get("data", (0,))[0]
        if pointer and getattr(obj, "size", 0):
            self._arrays[pointer] = serial

    def serial_of(self, obj) -> int | None:
        entry = self._objs.get(id(obj))
        if entry is None:
            return None
        held = entry[0]() if isinstance(entry[0], weakref.ref) else entry[0]
        return entry[1] if held is obj else None

    def serials_in(self, args, kwargs: dict, ins: list, known: Callable) -> tuple[int, ...]:
        """Serials of followed Python values among an op's arguments (nested lists, tuples, dicts), and of the
        numpy arrays whose memory an input tensor the trace has not seen (`known` says None) uses
        (torch.from_numpy is not an op)."""
        if not self._objs:
            return ()
        found: list[int] = [self._arrays[p] for p in (a.data_ptr() for a in ins if self._arrays and
                                                      known(a) is None) if p in self._arrays]
        todo: list = [args, tuple(kwargs.values())]
        budget = _SCAN_BUDGET
        while todo and budget > 0:
            x = todo.pop()
            budget -= 1
            if isinstance(x, torch.Tensor):
                continue
            serial = self.serial_of(x)
            if serial is not None:
                found.append(serial)
            elif isinstance(x, (list, tuple)):
                todo.extend(x)
            elif isinstance(x, dict):
                todo.extend(x.values())
        return tuple(dict.fromkeys(found))

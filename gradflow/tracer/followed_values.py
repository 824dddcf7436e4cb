"""Values that leave torch, for the tracer (tracer/trace.py): `.item()`, `float(t)`, `.tolist()`, `.numpy()` give
Python values, followed by identity into the ops they are given to (`torch.tensor(...)`, `x * number`), and numpy
arrays by the memory a later `torch.from_numpy` shares."""
from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

import torch

from gradflow.tracer.records import OpRecord
from gradflow.tracer.source_lines import lines

if TYPE_CHECKING:  # the tracer imports this module: types only, no cycle
    from gradflow.tracer.trace import Trace


_FOLLOWED_OBJECTS = 10_000  # Python values followed per trace


_SCAN_BUDGET = 1_000  # arguments looked at per op for a followed Python value


_FOLLOWED_LIST = 4_096  # elements: a longer list from .tolist() is not followed


def escape(t: Trace, name: str, ins: list, in_rg: list[bool], out):
    """`.item()`, `float(t)`, `.tolist()`, `.numpy()`: an op whose output is a Python value, followed by id."""
    if not ins:
        return
    st = t.state
    serial = len(t._refs)
    t._refs.append(None)  # (a Python value's serial: no tensor to refer to)
    follow(t, out, serial)
    rec = OpRecord(len(st.ops), name, (t.serial(ins[0]),), (serial,), torch.is_grad_enabled(),
                   torch.is_inference_mode_enabled(), id(st.stack[-1]) if st.stack else None,
                   cut="item" if in_rg[0] else None)
    rec.line, rec.library_line = lines()
    t._append(rec)


def follow(t: Trace, obj, serial: int, depth: int = 0):
    if len(t._objs) >= _FOLLOWED_OBJECTS or obj is None or isinstance(obj, bool):
        return
    if isinstance(obj, int) and -5 <= obj <= 256:  # small ints are shared objects: not this value's own
        return
    if isinstance(obj, list) and len(obj) > _FOLLOWED_LIST:  # kept alive while followed: not a huge one
        return
    t._plain = False
    if isinstance(obj, (int, float, complex, list)):
        t._objs[id(obj)] = (obj, serial)
        if isinstance(obj, list) and depth < 2:
            for x in obj[:64]:
                follow(t, x, serial, depth + 1)
        return
    try:
        t._objs[id(obj)] = (weakref.ref(obj), serial)  # a numpy array: its memory is the tensor's
    except TypeError:
        return
    pointer = getattr(obj, "__array_interface__", {}).get("data", (0,))[0]
    if pointer and getattr(obj, "size", 0):
        t._arrays[pointer] = serial


def followed(t: Trace, obj) -> int | None:
    entry = t._objs.get(id(obj))
    if entry is None:
        return None
    held = entry[0]() if isinstance(entry[0], weakref.ref) else entry[0]
    return entry[1] if held is obj else None


def followed_in(t: Trace, args, kwargs, ins: list) -> tuple[int, ...]:
    """Serials of followed Python values among an op's arguments (nested lists, tuples, dicts), and of the
    numpy arrays whose memory an input tensor the trace has not seen uses (torch.from_numpy is not an op)."""
    found: list[int] = [t._arrays[p] for p in (a.data_ptr() for a in ins if t._arrays and
                                                  t.known(a) is None) if p in t._arrays]
    todo: list = [args, tuple(kwargs.values())]
    budget = _SCAN_BUDGET
    while todo and budget > 0:
        x = todo.pop()
        budget -= 1
        if isinstance(x, torch.Tensor):
            continue
        serial = followed(t, x)
        if serial is not None:
            found.append(serial)
        elif isinstance(x, (list, tuple)):
            todo.extend(x)
        elif isinstance(x, dict):
            todo.extend(x.values())
    return tuple(dict.fromkeys(found))
